/* vram — the bandwidth kernels of layer normalization (layernorm_rows.cu), private to
 * src/kernels/cuda: a row lives in a warp's registers as 16-byte vectors, read once from memory.
 * Each returns 0 when it does not apply (the shape or the alignment; layernorm.cu then runs the
 * generic kernels), 1 when it launched (*st: the launch's status). */
#ifndef VRAM_KERNELS_CUDA_LAYERNORM_ROWS_CUH
#define VRAM_KERNELS_CUDA_LAYERNORM_ROWS_CUH

#include <stdbool.h>

#include "kernels/cuda/kernels_cuda.h"

#define VR_LN_EPS 1e-5f

/* out = layernorm(x) with x = inp, or x = inp + inp2 rounded to the dtype and written to res
 * (inp2 and res both NULL or both not). */
int vr__ln_rows_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, float *mean, float *rstd, void *res,
                    const void *inp, const void *inp2, const void *w, const void *b, int N, int C, vr_status *st);

/* dinp (may be NULL) in one pass over dout and inp, and when part is not NULL the fp32 partial sums of
 * dw | db of at most *slices row slices (kernels/scratch.h's layout; *slices: how many were written), each
 * summed in a fixed order; when part_sum is not NULL (dinp and part then not NULL) also each slice's column
 * sums of dinp as written, slice s's at part_sum + s C (*st VR_ERR_UNSUPPORTED, nothing queued, on a GPU
 * without the shared memory that takes). */
/* out: inp is the forward's output and x-hat = (inp - b) / w (kernels/norm_math.h; b NULL: no bias; mean
 * unused). */
int vr__ln_rows_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, float *part, float *part_sum,
                    const void *dout, const void *inp, const void *w, const void *b, bool out, const float *mean,
                    const float *rstd, int N, int C, int *slices, int acc_dinp, vr_status *st);

/* res = a + b rounded to the dtype, out = rmsnorm(res) (rstd about 0, eps), in one pass (0: the rows do not fit
 * or the alignment; nothing queued). */
int vr__add_rms_rows_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, float *rstd, void *res, const void *a,
                         const void *b, const void *w, int N, int C, float eps, vr_status *st);

/* RMSNorm's dinp and the fp32 partial sums of dw (at most *slices row slices of C, in a fixed order; *slices: how
 * many were written) in one pass over dout and inp, where both are wanted and the rows fit (0: they do not, or
 * the GPU lacks the shared memory: nothing queued). out: inp is the forward's output (x-hat = inp / w). */
int vr__rms_rows_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dinp, float *part, const void *dout,
                     const void *inp, const void *w, bool out, const float *rstd, int N, int C, int *slices,
                     int acc_dinp, vr_status *st);

#endif
