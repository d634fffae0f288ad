/* vram — the plan: where every tensor of a step graph lives, and how many
 * bytes each role needs, decided before anything runs.
 *
 * From a graph (vram/graph.h) the plan computes, touching no memory:
 *   - the lifetime of every tensor: the first and last node that uses its
 *     storage (inclusive; views count for their storage). Persistent tensors
 *     (params, master, optim, accumulated grads, library workspace) live for
 *     the whole step; inputs from node 0; outputs (the losses) to the last node;
 *   - its resolved role: an intermediate declared "act" is an activation when a
 *     backward or recompute node reads it, otherwise temp;
 *   - the live bytes per role during each node (the timeline), the peak and
 *     where it happens;
 *   - a static arena with an exact byte offset for every tensor: the
 *     persistent tensors one after another in a region of their own at the
 *     start, then the rest packed by lifetime (greedy by size: largest first,
 *     each at the best-fitting gap among the tensors whose lifetimes overlap
 *     it, as in TFLite's and ggml-alloc's planners; above VR_PLAN_GREEDY_MAX
 *     such tensors, node by node by best fit in O(n log n): src/plan/pack.c).
 *     Every offset and size is
 *     a multiple of the alignment, VR_PLAN_ALIGN = 256 bytes (cudaMalloc's);
 *   - with in-place reuse on (opt-in), the output of a gelu, relu or add
 *     takes over the bytes of an input of the same size that dies at that
 *     node (the kernels allow out == in there), as ggml-alloc does;
 *   - in dynamic mode, the same step replayed through the caching allocator
 *     (vram/alloc.h) on a meta device: each tensor allocated when first used
 *     and freed after its last use, as PyTorch's eager mode does. Its peak
 *     allocated and reserved bytes are the allocator's own statistics.
 *
 * Bytes: raw = numel × dtype size (what the tensors hold); aligned = raw
 * rounded up to the alignment (what the arena gives them). The executor
 * allocates arena_size bytes once and places tensor t at tensors[t].offset. */
#ifndef VRAM_PLAN_H
#define VRAM_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "vram/graph.h"
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

#define VR_PLAN_ALIGN 256
/* Packed tensors up to which the arena is packed greedy by size (O(n^2), tightest); above, in time order. */
#define VR_PLAN_GREEDY_MAX 16384

typedef enum vr_memory_mode { VR_MEMORY_PLANNED, VR_MEMORY_DYNAMIC } vr_memory_mode;

typedef struct vr_plan_config {
    vr_memory_mode memory;     /* planned: the arena; dynamic: also replay through vr_alloc */
    uint64_t align;            /* arena alignment in bytes, a power of two (0 = VR_PLAN_ALIGN) */
    const char *alloc_policy;  /* dynamic: allocator policy (NULL = "pytorch") */
    uint64_t capacity;         /* dynamic: capacity of the simulated device (0 = unlimited) */
    int steps;                 /* dynamic: steps replayed (0 = 2; later steps find a warm cache) */
    bool inplace;              /* gelu/relu/add outputs reuse a dying input's bytes */
    int greedy_max;            /* pack greedy by size up to this many packed tensors, in time order
                                * above (0 = VR_PLAN_GREEDY_MAX; < 0: always in time order) */
} vr_plan_config;

/* Where one tensor lives. */
typedef struct vr_plan_tensor {
    int first, last;           /* nodes during which its storage is live; -1, -1 when never used */
    vr_role role;              /* resolved role */
    uint64_t bytes;            /* raw bytes of its storage (0 for a view) */
    uint64_t size;             /* bytes reserved in the arena: raw rounded up to the alignment */
    uint64_t offset;           /* byte offset in the arena (a view: its storage's + view offset) */
    int base;                  /* the tensor whose bytes it occupies: itself, its view's storage, or
                                * (in place) the input it overwrote; the dynamic mode allocates
                                * once per base and frees after the last use of any tensor on it */
    bool persistent;           /* placed in the persistent region */
    bool host;                 /* in host memory (offload): offset is into the host arena, and its bytes
                                * are in host_total, not in the device timeline */
} vr_plan_tensor;

/* The caching-allocator replay (dynamic mode). */
typedef struct vr_plan_dynamic {
    vr_status status;          /* VR_OK, or VR_ERR_OOM when the capacity ran out */
    char error[1024];          /* the allocator's out-of-memory message */
    int oom_node;              /* node at which it ran out, -1 */
    uint64_t peak_allocated;   /* "max_memory_allocated": rounded block bytes */
    uint64_t peak_reserved;    /* "max_memory_reserved": segment bytes held from the device */
    uint64_t peak_requested;   /* bytes as asked (= the plan's raw live bytes) */
    int64_t device_allocs;     /* segments obtained from the device */
    int64_t allocs;            /* blocks handed out over all steps */
    uint64_t device_calls;     /* driver calls of the allocator (vr_device_calls_vm_total), all steps */
    uint64_t device_calls_last_step; /* those of the last step (warm cache: the steady state) */
    uint64_t *allocated;       /* [n_nodes] allocated bytes during node i of the last step */
    uint64_t *reserved;        /* [n_nodes] reserved bytes during node i of the last step */
    int snapshot_node;         /* node of the last step with the most allocated bytes (-1) */
    char *snapshot;            /* the allocator's snapshot JSON (segments and blocks, PyTorch's keys)
                                * during that node, or NULL (owned; for the HTML report) */
    uint64_t largest_free;     /* largest cached free block during that node */
} vr_plan_dynamic;

typedef struct vr_plan {
    const vr_graph *graph;     /* not owned; must outlive the plan */
    vr_plan_config config;
    uint64_t align;
    int n_tensors, n_nodes;
    vr_plan_tensor *tensors;   /* [n_tensors], by tensor id */
    int n_inplace;             /* outputs computed in place over a dying input */

    /* Totals over storage tensors, per role (raw bytes). */
    int count[VR_ROLE_COUNT];          /* storage tensors used */
    uint64_t total[VR_ROLE_COUNT];     /* sum of their bytes */
    uint64_t max_live[VR_ROLE_COUNT];  /* most bytes of the role live during one node */
    uint64_t at_peak[VR_ROLE_COUNT];   /* bytes of the role live during the peak node */

    /* Timeline: live[i * VR_ROLE_COUNT + r] = raw bytes of role r live during node i. */
    uint64_t *live;
    uint64_t *live_aligned;    /* [n_nodes]: aligned bytes live during node i (all roles) */
    uint64_t peak;             /* most raw bytes live during one node */
    int peak_node;
    uint64_t peak_aligned;     /* most aligned bytes live during one node (a lower bound of the arena) */
    int peak_aligned_node;

    /* Arena. */
    uint64_t persistent_size;  /* [0, persistent_size): the persistent tensors */
    uint64_t arena_size;       /* all of it: persistent region + packed region */

    /* Host memory (offload): the host tensors, all persistent, one after another in a host arena of
     * host_size bytes (pinned on a GPU), raw bytes per role in host_total. None of it is in the figures
     * above, which are the device's. */
    int host_count[VR_ROLE_COUNT];
    uint64_t host_total[VR_ROLE_COUNT];
    uint64_t host_size;

    bool has_dynamic;
    vr_plan_dynamic dynamic;
} vr_plan;

/* Plans graph g (config may be NULL: planned, 256-byte alignment). VR_ERR_INVALID
 * for a bad alignment; in dynamic mode an allocator that runs out of capacity is
 * not an error of the call: it is reported in plan->dynamic.status. */
vr_status vr_plan_create(const vr_graph *g, const vr_plan_config *config, vr_plan **out);

void vr_plan_free(vr_plan *p);

/* Checks the arena: every offset and size aligned; every tensor inside the
 * arena; no two storage tensors with overlapping lifetimes overlap in memory;
 * the arena at least the aligned peak. VR_ERR_INVALID naming the first violation. */
vr_status vr_plan_check(const vr_plan *p);

/* Raw bytes of role r live during node i (r = VR_ROLE_COUNT: all roles). */
uint64_t vr_plan_live(const vr_plan *p, int node, int role);

/* arena_size / peak_aligned: how much the packing loses to fragmentation (>= 1). */
double vr_plan_arena_factor(const vr_plan *p);

/* Writes the summary table (bytes per role, peak, arena, dynamic figures) and,
 * with timeline, one line per node with the live bytes per role. */
void vr_plan_print(const vr_plan *p, FILE *f, bool timeline);

/* The same as JSON (caller frees): {"roles": {...}, "peak": ..., "arena": ..., "timeline": [...]}. */
char *vr_plan_json(const vr_plan *p, bool timeline);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
