/* Inside the dist layer: the communicator behind vram/dist.h is a small table of engine functions plus
 * what every engine has (rank, size, the engine's own device bytes). The public functions in comm.c
 * check their arguments once, so that an engine only ever sees a valid call with n > 0. */
#ifndef VRAM_DIST_COMM_IMPL_H
#define VRAM_DIST_COMM_IMPL_H

#include "vram/dist.h"

typedef struct vr_comm_ops {
    vr_status (*allreduce)(vr_comm *c, void *buf, int64_t n, vr_dtype dt, vr_comm_op op, void *stream);
    vr_status (*reduce)(vr_comm *c, void *buf, int64_t n, vr_dtype dt, vr_comm_op op, int root, void *stream);
    vr_status (*broadcast)(vr_comm *c, void *buf, int64_t n, vr_dtype dt, int root, void *stream);
    vr_status (*group_begin)(vr_comm *c);   /* NULL: a no-op */
    vr_status (*group_end)(vr_comm *c);     /* NULL: a no-op */
    vr_status (*host)(vr_comm *c, double *v, int n, bool min);  /* sum (or min) of host doubles */
    vr_status (*host_f32)(vr_comm *c, float *v, int64_t n);      /* sum of host floats (NULL: self, a no-op) */
    void (*free)(vr_comm *c);               /* the engine's part; comm.c frees the struct */
} vr_comm_ops;

struct vr_comm {
    const vr_comm_ops *ops;
    vr_comm_engine engine;
    int rank, size;
    uint64_t own_bytes;
    void *impl;                             /* the engine's state */
};

/* A zeroed communicator with ops and engine set (NULL with a message when out of memory). */
vr_comm *vr__comm_new(const vr_comm_ops *ops, vr_comm_engine engine);

#endif
