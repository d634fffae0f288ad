/* An intrusive AVL tree of allocator blocks.
 *
 * Free blocks are kept in one tree per pool ordered by (stream, size, address),
 * so best fit is a lower-bound search; unmapped ranges of expandable segments
 * in another ordered by (stream, address). Keys are unique (the address breaks
 * ties), so the successor and predecessor of a node are found by searching
 * from the root with the node itself as key: no parent links needed.
 * Every operation is O(log n). A block is in at most one tree at a time. */
#ifndef VRAM_ALLOC_TREE_H
#define VRAM_ALLOC_TREE_H

#include <stdbool.h>
#include <stddef.h>

struct vr_block;

/* The orders a tree can keep (compared inline: this is the allocator's hot path). */
typedef enum vra_order {
    VRA_BY_SIZE, /* (stream, size, addr): best fit */
    VRA_BY_ADDR, /* (stream, addr) */
} vra_order;

typedef struct vra_tree {
    struct vr_block *root;
    vra_order order;
    size_t count;
} vra_tree;

void vra_tree_init(vra_tree *t, vra_order order);

/* <0, 0, >0 as a sorts before, with, after b in the tree's order. */
int vra_tree_cmp(const vra_tree *t, const struct vr_block *a, const struct vr_block *b);
void vra_tree_insert(vra_tree *t, struct vr_block *b);
void vra_tree_remove(vra_tree *t, struct vr_block *b);

/* The first node not less than key / greater than key / less than key. NULL if none. */
struct vr_block *vra_tree_lower_bound(const vra_tree *t, const struct vr_block *key);
struct vr_block *vra_tree_next(const vra_tree *t, const struct vr_block *key);
struct vr_block *vra_tree_prev(const vra_tree *t, const struct vr_block *key);
struct vr_block *vra_tree_first(const vra_tree *t);
struct vr_block *vra_tree_last(const vra_tree *t);

/* Calls fn on each node in order (fn must not modify the tree). */
void vra_tree_walk(const vra_tree *t, void (*fn)(struct vr_block *b, void *ctx), void *ctx);

/* Checks ordering, heights and balance; returns the node count or -1 when broken. */
long vra_tree_verify(const vra_tree *t);

#endif
