/* vram dist — the communicator: the collectives data parallel and ZeRO need, with real engines.
 *
 * Engines:
 *   self   a world of one rank: every collective leaves the buffer as it is (no library needed);
 *   mpi    OpenMPI (Debian's libopenmpi), for `cpu` devices: buffers in host memory, collectives block.
 *          Compiled where CMake finds MPI (VRAM_HAVE_MPI); ranks come from the launcher (mpirun, Slurm);
 *   nccl   NCCL for CUDA devices, loaded at run time (libnccl.so.2): buffers in device memory, collectives
 *          queued on the CUDA stream given (asynchronous, like kernels). One process per GPU.
 *
 * Every collective is in place over n elements of dtype dt. VR_COMM_AVG divides the sum by the world size
 * (ncclAvg; on MPI the sum then a division, in f32). 16-bit buffers (bf16, f16) are reduced in f32 by the MPI
 * engine (widened, reduced, rounded back once) and natively by NCCL.
 *
 * Failure: a collective whose peer has died returns an error where the engine can tell (MPI's error
 * handler is set to return); NCCL cannot always tell, which is why `vram train --gpus N` watches its
 * children and stops them all when one fails (src/cli). */
#ifndef VRAM_DIST_H
#define VRAM_DIST_H

#include <stdbool.h>
#include <stdint.h>

#include "vram/graph.h"
#include "vram/status.h"
#include "vram/export.h"

VR_API_BEGIN
typedef struct vr_comm vr_comm;

typedef enum vr_comm_engine { VR_COMM_SELF, VR_COMM_MPI, VR_COMM_NCCL } vr_comm_engine;
typedef enum vr_comm_op { VR_COMM_SUM, VR_COMM_AVG } vr_comm_op;

/* The size of an NCCL unique id (ncclUniqueId), and of its text form (hex, NUL-terminated). */
#define VR_COMM_ID_BYTES 128
#define VR_COMM_ID_HEX (2 * VR_COMM_ID_BYTES + 1)

/* A communicator of one rank (rank 0, size 1). */
vr_status vr_comm_self(vr_comm **out);

/* Whether this build has the MPI engine, and whether the environment says this process was started by an
 * MPI launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set). */
bool vr_comm_mpi_built(void);
bool vr_comm_mpi_launched(void);
/* The world size the MPI launcher announces (OMPI_COMM_WORLD_SIZE or PMI_SIZE), 0 when it says none. */
int vr_comm_mpi_launched_size(void);
/* Initializes MPI (once per process) and returns its world communicator. */
vr_status vr_comm_mpi(vr_comm **out);

/* Whether libnccl.so.2 can be loaded (and its version, e.g. 22703, into *version when not NULL); when not,
 * vr_last_error() says why. Also looked for: PyTorch's pip copy (.../site-packages/nvidia/nccl/lib).
 * NCCL 2.10 or later (ncclAvg, bf16). */
bool vr_comm_nccl_available(int *version);
/* A new NCCL unique id in hex (the root's; pass it to every rank). The calling process serves the
 * bootstrap and must outlive the ranks' initialisation. */
vr_status vr_comm_nccl_id(char hex[VR_COMM_ID_HEX]);
/* Joins the NCCL world `world` as `rank` on the current CUDA device, from the root's id in hex. Blocks until
 * every rank has joined (ncclCommInitRank). The device memory NCCL took for itself while joining (measured
 * around it) is vr_comm_own_bytes. */
vr_status vr_comm_nccl(const char *id_hex, int rank, int world, vr_comm **out);

int vr_comm_rank(const vr_comm *c);
int vr_comm_size(const vr_comm *c);
vr_comm_engine vr_comm_engine_of(const vr_comm *c);
const char *vr_comm_engine_name(const vr_comm *c);
/* Device bytes the engine allocated for itself, outside vram's allocator (NCCL's buffers; 0 otherwise). */
uint64_t vr_comm_own_bytes(const vr_comm *c);

/* buf (n elements of dt) = the sum (or mean) of every rank's buf. stream: a cudaStream_t for NCCL (NULL: the
 * default stream), ignored by MPI. */
vr_status vr_comm_allreduce(vr_comm *c, void *buf, int64_t n, vr_dtype dt, vr_comm_op op, void *stream);
/* Root's buf = the sum (or mean) of every rank's buf; the other ranks' buf is left unspecified. */
vr_status vr_comm_reduce(vr_comm *c, void *buf, int64_t n, vr_dtype dt, vr_comm_op op, int root, void *stream);
/* Every rank's buf = root's buf. */
vr_status vr_comm_broadcast(vr_comm *c, void *buf, int64_t n, vr_dtype dt, int root, void *stream);
/* NCCL: collectives between begin and end are launched as one (ncclGroupStart/End); no-ops elsewhere. */
vr_status vr_comm_group_begin(vr_comm *c);
vr_status vr_comm_group_end(vr_comm *c);

/* Host values (loss sums, flags, fingerprints), blocking: v[0..n) = the sum over ranks (min: the least). */
vr_status vr_comm_sum_host(vr_comm *c, double *v, int n);
vr_status vr_comm_min_host(vr_comm *c, double *v, int n);
/* Host floats, blocking: v[0..n) = the sum over ranks (large arrays: the sharded weights gathered for a
 * checkpoint, each element non-zero on one rank only, so the sum is exact). */
vr_status vr_comm_sum_host_f32(vr_comm *c, float *v, int64_t n);

/* Ends the communicator (MPI: finalizes MPI, once every communicator is freed). NULL is allowed. */
void vr_comm_free(vr_comm *c);
VR_API_END

#endif
