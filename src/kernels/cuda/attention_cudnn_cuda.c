/* vram — causal attention through cuDNN's fused flash attention (CUDA builds; C11, cuDNN's backend API).
 *
 * libcudnn.so.9 is loaded at run time with dlopen (no link-time dependency; a machine without cuDNN runs
 * vram's own kernels, attention.cu). Only cuDNN's headers are read at build time, for the backend API's
 * types and enum values; without them (no cudnn_graph.h where vram is built) this file compiles to
 * functions that answer "not built with cuDNN's headers".
 *
 * The operation graphs are those cudnn-frontend's sdpa and sdpa_backward nodes emit for a causal mask, no
 * bias, no dropout (include/cudnn_frontend/node/scaled_dot_product_flash_attention.h, the composite nodes;
 * utils/attn_score_modifiers.h and node/diagonal_band_mask.h for the mask), which cuDNN's flash attention
 * engines recognise:
 *   forward:  S = Q K^T * scale; causal mask (row >= col, else -inf); M = max(S); E = exp(S - M);
 *             Z = sum(E); Stats = M + log Z (the saved logsumexp, as vram's lse); P = E / Z; O = P V.
 *   backward: softmax_sum = rowsum(dO * O) (fp32, scratch); S as above; P = exp(mask(S - Stats));
 *             dV = P^T dO; dP = dO V^T; dS = P (dP - softmax_sum) * scale; dK = dS^T Q; dQ = dS K through
 *             an fp32 accumulator (scratch), then rounded into dQ.
 *   Grouped-query attention (NKV < NH): K and V have NKV heads (query head h reads kv head h / (NH/NKV), as
 *   vram's kernels), dK and dV are the sums over each group's query heads (a reduction after the products).
 * Q, K, V and dQ, dK, dV are strided views of the packed qkv / dqkv rows (B,T,(NH+2NKV)hs), O and dO of
 * (B,T,NH hs), Stats is vram's lse (B,NH,T) fp32: the saved tensors are the same for both paths.
 *
 * Plans: one forward and one backward execution plan per (device, dtype, B, T, NH, NKV, hs), built on first
 * use (heuristics mode A; the first engine config that finalizes) and kept for the process, with one cuDNN
 * handle per device; execution sets the caller's stream on that handle under a lock. The plan's own
 * workspace comes from the ctx's (cuBLASLt) workspace, which the plan of a step counts; the backward's two
 * fp32 tensors from the caller's scratch (kernels/scratch.h, vr_scratch_cudnn_attention_bwd).
 *
 * UNTESTED where vram is developed (no GPU): this file is only compiled there. tests/kcuda/
 * test_attention_cudnn.c compares it with vram's kernels on a GPU. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels/cuda/kernels_cuda.h"
#include "kernels/scratch.h"

#if defined(__has_include)
#if __has_include(<cudnn_graph.h>)
#define VR_HAVE_CUDNN_HEADERS 1
#endif
#endif

size_t vr_cuda_attention_cudnn_scratch_bytes(int B, int T, int NH, int NKV, int hs)
{
    return (size_t)vr_scratch_cudnn_attention_bwd(B, T, NH, NKV, hs);
}

#ifndef VR_HAVE_CUDNN_HEADERS

int vr_cuda_cudnn_version(void) { return 0; }
const char *vr_cuda_cudnn_why(void) { return "vram was built without cuDNN's headers (cudnn_graph.h)"; }
static vr_status no_cudnn(void) { return vr_error(VR_ERR_UNSUPPORTED, "cuda kernels: attention (cudnn): %s", vr_cuda_cudnn_why()); }
vr_status vr_cuda_attention_cudnn_prepare(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, int B, int T, int NH, int NKV,
                                          int hs, size_t *fwd_ws, size_t *bwd_ws)
{
    (void)ctx, (void)dt, (void)B, (void)T, (void)NH, (void)NKV, (void)hs, (void)fwd_ws, (void)bwd_ws;
    return no_cudnn();
}
vr_status vr_cuda_attention_cudnn_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, float *lse,
                                      const void *qkv, int B, int T, int NH, int NKV, int hs)
{
    (void)ctx, (void)dt, (void)out, (void)lse, (void)qkv, (void)B, (void)T, (void)NH, (void)NKV, (void)hs;
    return no_cudnn();
}
vr_status vr_cuda_attention_cudnn_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dqkv, const void *dout,
                                      const void *qkv, const void *out, const float *lse, int B, int T, int NH,
                                      int NKV, int hs, void *scratch, size_t scratch_bytes)
{
    (void)ctx, (void)dt, (void)dqkv, (void)dout, (void)qkv, (void)out, (void)lse, (void)B, (void)T, (void)NH;
    (void)NKV, (void)hs, (void)scratch, (void)scratch_bytes;
    return no_cudnn();
}
void vr_cuda_attention_cudnn_release(void) {}
void vr__cudnn_attention_pick(int i) { (void)i; }

#else

#include <cudnn_graph.h>

/* ---------------------------------------------------------------- the library */

static struct {
    void *lib;
    size_t version;
    size_t (*get_version)(void);
    const char *(*error_string)(cudnnStatus_t);
    void (*last_error)(char *, size_t);
    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*destroy)(cudnnHandle_t);
    cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*d_create)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*d_destroy)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*d_finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*d_set)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                           int64_t, const void *);
    cudnnStatus_t (*d_get)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                           int64_t, int64_t *, void *);
    cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
    bool ok;
    char why[512];
} dn;

static pthread_once_t dn_once = PTHREAD_ONCE_INIT;

static void *dn_sym(const char *name)
{
    void *p = dlsym(dn.lib, name);
    if (!p && !dn.why[0])
        snprintf(dn.why, sizeof dn.why, "libcudnn.so.9 has no %s", name);
    return p;
}

static void dn_load(void)
{
    dn.lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!dn.lib)
        dn.lib = dlopen("libcudnn.so", RTLD_NOW | RTLD_LOCAL);
    if (!dn.lib) {
        const char *e = dlerror();
        snprintf(dn.why, sizeof dn.why, "cannot load libcudnn.so.9 (%s)", e ? e : "not found");
        return;
    }
    *(void **)&dn.get_version = dn_sym("cudnnGetVersion");
    *(void **)&dn.error_string = dn_sym("cudnnGetErrorString");
    *(void **)&dn.create = dn_sym("cudnnCreate");
    *(void **)&dn.destroy = dn_sym("cudnnDestroy");
    *(void **)&dn.set_stream = dn_sym("cudnnSetStream");
    *(void **)&dn.d_create = dn_sym("cudnnBackendCreateDescriptor");
    *(void **)&dn.d_destroy = dn_sym("cudnnBackendDestroyDescriptor");
    *(void **)&dn.d_finalize = dn_sym("cudnnBackendFinalize");
    *(void **)&dn.d_set = dn_sym("cudnnBackendSetAttribute");
    *(void **)&dn.d_get = dn_sym("cudnnBackendGetAttribute");
    *(void **)&dn.execute = dn_sym("cudnnBackendExecute");
    *(void **)&dn.last_error = dlsym(dn.lib, "cudnnGetLastErrorString"); /* optional */
    if (dn.why[0])
        return;
    dn.version = dn.get_version();
    if (dn.version < 90000) {
        snprintf(dn.why, sizeof dn.why, "libcudnn is version %zu, below 9.0", dn.version);
        return;
    }
    dn.ok = true;
}

static bool dn_ok(void)
{
    pthread_once(&dn_once, dn_load);
    return dn.ok;
}

int vr_cuda_cudnn_version(void) { return dn_ok() ? (int)dn.version : 0; }
const char *vr_cuda_cudnn_why(void) { return dn_ok() ? "" : dn.why; }

/* ---------------------------------------------------------------- building a graph */

#define GB_MAX_DESC 192
#define GB_MAX_OPS 48

typedef struct gb {
    cudnnBackendDescriptor_t keep[GB_MAX_DESC]; /* every descriptor made, destroyed with the plan */
    int nkeep;
    cudnnBackendDescriptor_t ops[GB_MAX_OPS];
    int nops;
    int64_t next_uid;
    bool failed;
    char err[512];
} gb;

static void gb_fail(gb *g, cudnnStatus_t st, const char *what)
{
    if (g->failed)
        return;
    g->failed = true;
    char last[256] = "";
    if (dn.last_error)
        dn.last_error(last, sizeof last);
    snprintf(g->err, sizeof g->err, "%s: %s%s%s", what, dn.error_string(st), last[0] ? ": " : "", last);
}

static cudnnBackendDescriptor_t gb_new(gb *g, cudnnBackendDescriptorType_t t, const char *what)
{
    cudnnBackendDescriptor_t d = NULL;
    if (g->failed)
        return NULL;
    if (g->nkeep == GB_MAX_DESC) {
        g->failed = true;
        snprintf(g->err, sizeof g->err, "%s: too many descriptors", what);
        return NULL;
    }
    cudnnStatus_t st = dn.d_create(t, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        gb_fail(g, st, what);
        return NULL;
    }
    g->keep[g->nkeep++] = d;
    return d;
}

static void gb_set(gb *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                   int64_t n, const void *v, const char *what)
{
    if (g->failed)
        return;
    cudnnStatus_t st = dn.d_set(d, a, t, n, v);
    if (st != CUDNN_STATUS_SUCCESS)
        gb_fail(g, st, what);
}

static void gb_fin(gb *g, cudnnBackendDescriptor_t d, const char *what)
{
    if (g->failed)
        return;
    cudnnStatus_t st = dn.d_finalize(d);
    if (st != CUDNN_STATUS_SUCCESS)
        gb_fail(g, st, what);
}

static void gb_free(gb *g)
{
    for (int i = g->nkeep - 1; i >= 0; i--)
        dn.d_destroy(g->keep[i]);
    g->nkeep = g->nops = 0;
}

/* A tensor of 4 dimensions; strides NULL: packed (virtual tensors). */
static cudnnBackendDescriptor_t gb_tensor(gb *g, int64_t uid, cudnnDataType_t dt, int64_t d0, int64_t d1, int64_t d2,
                                          int64_t d3, const int64_t *strides, bool virt, bool by_value)
{
    int64_t dims[4] = {d0, d1, d2, d3}, packed[4] = {d1 * d2 * d3, d2 * d3, d3, 1}, align = 16;
    cudnnBackendDescriptor_t t = gb_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
    gb_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor data type");
    gb_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dimensions");
    gb_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides ? strides : packed, "tensor strides");
    gb_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
    gb_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    gb_set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual");
    if (by_value)
        gb_set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by value");
    gb_fin(g, t, "tensor");
    return t;
}

/* A virtual tensor (a fresh uid), packed. */
static cudnnBackendDescriptor_t gb_v(gb *g, cudnnDataType_t dt, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    return gb_tensor(g, g->next_uid++, dt, d0, d1, d2, d3, NULL, true, false);
}

static void gb_op(gb *g, cudnnBackendDescriptor_t op)
{
    if (g->failed)
        return;
    if (g->nops == GB_MAX_OPS) {
        g->failed = true;
        snprintf(g->err, sizeof g->err, "too many operations");
        return;
    }
    g->ops[g->nops++] = op;
}

static void gb_matmul(gb *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c)
{
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t m = gb_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
    gb_set(g, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "matmul compute type");
    gb_fin(g, m, "matmul");
    cudnnBackendDescriptor_t op = gb_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op");
    gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul A");
    gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "matmul B");
    gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul C");
    gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m, "matmul desc");
    gb_fin(g, op, "matmul op");
    gb_op(g, op);
}

/* y = mode(x[, b][, t]); prec the math precision; axis >= 0 for GEN_INDEX. */
static void gb_pw(gb *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
                  cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis)
{
    cudnnBackendDescriptor_t p = gb_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
    gb_set(g, p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    gb_set(g, p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    if (axis >= 0)
        gb_set(g, p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    gb_fin(g, p, "pointwise");
    cudnnBackendDescriptor_t op = gb_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
    gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p, "pw desc");
    gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pw X");
    if (b)
        gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "pw B");
    if (t)
        gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, "pw T");
    gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pw Y");
    gb_fin(g, op, "pointwise op");
    gb_op(g, op);
}

static void gb_reduce(gb *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t r = gb_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
    gb_set(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "reduction mode");
    gb_set(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "reduction compute type");
    gb_fin(g, r, "reduction");
    cudnnBackendDescriptor_t op = gb_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op");
    gb_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reduction X");
    gb_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reduction Y");
    gb_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, "reduction desc");
    gb_fin(g, op, "reduction op");
    gb_op(g, op);
}

/* out (B, HK, T, D) = a b over the H query heads: one product when H == HK; under GQA into every query head's
 * (B, H, T, D) in dt first, then summed per group of H/HK heads. */
static void gb_matmul_kv(gb *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t out,
                         cudnnDataType_t dt, int64_t B, int64_t H, int64_t HK, int64_t T, int64_t D)
{
    if (H == HK) {
        gb_matmul(g, a, b, out);
        return;
    }
    cudnnBackendDescriptor_t full = gb_v(g, dt, B, H, T, D);
    gb_matmul(g, a, b, full);
    gb_reduce(g, CUDNN_REDUCE_TENSOR_ADD, full, out);
}

static void gb_reshape(gb *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t op = gb_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape op");
    gb_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reshape X");
    gb_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reshape Y");
    gb_fin(g, op, "reshape op");
    gb_op(g, op);
}

/* The causal mask of cudnn-frontend's composite diagonal band mask (top-left, right bound 0): keeps s where
 * row >= col, else the value of neginf. */
static cudnnBackendDescriptor_t gb_causal(gb *g, cudnnBackendDescriptor_t s, cudnnBackendDescriptor_t neginf,
                                          int64_t B, int64_t NH, int64_t T)
{
    cudnnBackendDescriptor_t row = gb_v(g, CUDNN_DATA_INT32, B, NH, T, T), col = gb_v(g, CUDNN_DATA_INT32, B, NH, T, T);
    gb_pw(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, s, NULL, NULL, row, 2);
    gb_pw(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, s, NULL, NULL, col, 3);
    cudnnBackendDescriptor_t keep = gb_v(g, CUDNN_DATA_BOOLEAN, B, NH, T, T);
    gb_pw(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1);
    cudnnBackendDescriptor_t out = gb_v(g, CUDNN_DATA_FLOAT, B, NH, T, T);
    gb_pw(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, neginf, keep, out, -1);
    return out;
}

/* The non-virtual tensors' uids (variant pack). */
enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, U_SCALE, U_NEGINF, U_ONE, U_SSUM, U_DQACC, U_FIRST_VIRTUAL = 100 };

typedef struct shape {
    int device;
    vr_cuda_dtype dt;
    int B, T, NH, NKV, hs;
} shape;

/* Strides of the views (elements): q/k/v heads in packed rows of W = NH + 2NKV heads; o rows of NH heads. */
static void qkv_strides(const shape *s, int64_t st[4])
{
    int64_t W = (int64_t)(s->NH + 2 * s->NKV) * s->hs;
    st[0] = (int64_t)s->T * W, st[1] = s->hs, st[2] = W, st[3] = 1;
}
static void o_strides(const shape *s, int64_t st[4])
{
    int64_t C = (int64_t)s->NH * s->hs;
    st[0] = (int64_t)s->T * C, st[1] = s->hs, st[2] = C, st[3] = 1;
}

static cudnnDataType_t io_type(vr_cuda_dtype dt) { return dt == VR_CUDA_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }

static void build_fwd(gb *g, const shape *s)
{
    int64_t B = s->B, H = s->NH, HK = s->NKV, T = s->T, D = s->hs;
    cudnnDataType_t io = io_type(s->dt), f = CUDNN_DATA_FLOAT;
    int64_t sq[4], skt[4], so[4], sst[4] = {H * T, T, 1, 1}, one[4] = {1, 1, 1, 1};
    qkv_strides(s, sq);
    int64_t t2 = sq[2];
    memcpy(skt, sq, sizeof skt);
    skt[2] = 1, skt[3] = t2; /* K^T: (B, HK, D, T) */
    o_strides(s, so);
    cudnnBackendDescriptor_t Q = gb_tensor(g, U_Q, io, B, H, T, D, sq, false, false);
    cudnnBackendDescriptor_t KT = gb_tensor(g, U_K, io, B, HK, D, T, skt, false, false);
    cudnnBackendDescriptor_t V = gb_tensor(g, U_V, io, B, HK, T, D, sq, false, false);
    cudnnBackendDescriptor_t O = gb_tensor(g, U_O, io, B, H, T, D, so, false, false);
    cudnnBackendDescriptor_t Stats = gb_tensor(g, U_STATS, f, B, H, T, 1, sst, false, false);
    cudnnBackendDescriptor_t scale = gb_tensor(g, U_SCALE, f, 1, 1, 1, 1, one, false, true);
    cudnnBackendDescriptor_t neginf = gb_tensor(g, U_NEGINF, f, 1, 1, 1, 1, one, false, true);

    cudnnBackendDescriptor_t S = gb_v(g, f, B, H, T, T);
    gb_matmul(g, Q, KT, S);
    cudnnBackendDescriptor_t S2 = gb_v(g, f, B, H, T, T);
    gb_pw(g, CUDNN_POINTWISE_MUL, f, S, scale, NULL, S2, -1);
    cudnnBackendDescriptor_t S3 = gb_causal(g, S2, neginf, B, H, T);
    cudnnBackendDescriptor_t M = gb_v(g, f, B, H, T, 1);
    gb_reduce(g, CUDNN_REDUCE_TENSOR_MAX, S3, M);
    cudnnBackendDescriptor_t S4 = gb_v(g, f, B, H, T, T);
    gb_pw(g, CUDNN_POINTWISE_SUB, f, S3, M, NULL, S4, -1);
    cudnnBackendDescriptor_t E = gb_v(g, f, B, H, T, T);
    gb_pw(g, CUDNN_POINTWISE_EXP, f, S4, NULL, NULL, E, -1);
    cudnnBackendDescriptor_t Z = gb_v(g, f, B, H, T, 1);
    gb_reduce(g, CUDNN_REDUCE_TENSOR_ADD, E, Z);
    cudnnBackendDescriptor_t LZ = gb_v(g, f, B, H, T, 1);
    gb_pw(g, CUDNN_POINTWISE_LOG, f, Z, NULL, NULL, LZ, -1);
    gb_pw(g, CUDNN_POINTWISE_ADD, f, M, LZ, NULL, Stats, -1);
    cudnnBackendDescriptor_t P = gb_v(g, io, B, H, T, T); /* bmm2's A in the i/o type, as the frontend */
    gb_pw(g, CUDNN_POINTWISE_DIV, f, E, Z, NULL, P, -1);
    gb_matmul(g, P, V, O);
}

static void build_bwd(gb *g, const shape *s)
{
    int64_t B = s->B, H = s->NH, HK = s->NKV, T = s->T, D = s->hs;
    cudnnDataType_t io = io_type(s->dt), f = CUDNN_DATA_FLOAT;
    int64_t sq[4], st[4], so[4], sst[4] = {H * T, T, 1, 1}, one[4] = {1, 1, 1, 1};
    int64_t sacc[4] = {H * T * D, T * D, D, 1};
    qkv_strides(s, sq);
    memcpy(st, sq, sizeof st);
    st[2] = 1, st[3] = sq[2]; /* K^T, V^T: (B, HK, D, T) */
    o_strides(s, so);
    cudnnBackendDescriptor_t Q = gb_tensor(g, U_Q, io, B, H, T, D, sq, false, false);
    cudnnBackendDescriptor_t KT = gb_tensor(g, U_K, io, B, HK, D, T, st, false, false);
    cudnnBackendDescriptor_t VT = gb_tensor(g, U_V, io, B, HK, D, T, st, false, false);
    cudnnBackendDescriptor_t O = gb_tensor(g, U_O, io, B, H, T, D, so, false, false);
    cudnnBackendDescriptor_t dO = gb_tensor(g, U_DO, io, B, H, T, D, so, false, false);
    cudnnBackendDescriptor_t Stats = gb_tensor(g, U_STATS, f, B, H, T, 1, sst, false, false);
    cudnnBackendDescriptor_t dQ = gb_tensor(g, U_DQ, io, B, H, T, D, sq, false, false);
    cudnnBackendDescriptor_t dK = gb_tensor(g, U_DK, io, B, HK, T, D, sq, false, false);
    cudnnBackendDescriptor_t dV = gb_tensor(g, U_DV, io, B, HK, T, D, sq, false, false);
    cudnnBackendDescriptor_t scale = gb_tensor(g, U_SCALE, f, 1, 1, 1, 1, one, false, true);
    cudnnBackendDescriptor_t neginf = gb_tensor(g, U_NEGINF, f, 1, 1, 1, 1, one, false, true);
    cudnnBackendDescriptor_t onet = gb_tensor(g, U_ONE, f, 1, 1, 1, 1, one, false, true);
    cudnnBackendDescriptor_t ssum = gb_tensor(g, U_SSUM, f, B, H, T, 1, sst, false, false);
    cudnnBackendDescriptor_t dqacc = gb_tensor(g, U_DQACC, f, B, H, T, D, sacc, false, false);

    /* softmax_sum = rowsum(dO * O) */
    cudnnBackendDescriptor_t t1 = gb_v(g, f, B, H, T, D), t2 = gb_v(g, f, B, H, T, 1);
    gb_pw(g, CUDNN_POINTWISE_MUL, f, dO, O, NULL, t1, -1);
    gb_reduce(g, CUDNN_REDUCE_TENSOR_ADD, t1, t2);
    gb_pw(g, CUDNN_POINTWISE_MUL, f, t2, onet, NULL, ssum, -1);
    /* P = exp(mask(Q K^T * scale - Stats)) */
    cudnnBackendDescriptor_t s1 = gb_v(g, f, B, H, T, T), s2 = gb_v(g, f, B, H, T, T), s3 = gb_v(g, f, B, H, T, T);
    gb_matmul(g, Q, KT, s1);
    gb_pw(g, CUDNN_POINTWISE_MUL, f, s1, scale, NULL, s2, -1);
    gb_pw(g, CUDNN_POINTWISE_SUB, f, s2, Stats, NULL, s3, -1);
    cudnnBackendDescriptor_t s4 = gb_causal(g, s3, neginf, B, H, T);
    cudnnBackendDescriptor_t P = gb_v(g, f, B, H, T, T);
    gb_pw(g, CUDNN_POINTWISE_EXP, f, s4, NULL, NULL, P, -1);
    /* dV = P^T dO (GQA: over every query head, then summed per group) */
    int64_t tr[4] = {H * T * T, T * T, 1, T};
    cudnnBackendDescriptor_t PT = gb_tensor(g, g->next_uid++, io, B, H, T, T, tr, true, false);
    gb_reshape(g, P, PT);
    gb_matmul_kv(g, PT, dO, dV, io, B, H, HK, T, D);
    /* dS = P (dO V^T - softmax_sum) * scale */
    cudnnBackendDescriptor_t dP = gb_v(g, f, B, H, T, T), d1 = gb_v(g, f, B, H, T, T), d2 = gb_v(g, f, B, H, T, T);
    cudnnBackendDescriptor_t dS = gb_v(g, f, B, H, T, T);
    gb_matmul(g, dO, VT, dP);
    gb_pw(g, CUDNN_POINTWISE_SUB, f, dP, ssum, NULL, d1, -1);
    gb_pw(g, CUDNN_POINTWISE_MUL, f, d1, P, NULL, d2, -1);
    gb_pw(g, CUDNN_POINTWISE_MUL, f, d2, scale, NULL, dS, -1);
    /* dK = dS^T Q */
    cudnnBackendDescriptor_t dST = gb_tensor(g, g->next_uid++, io, B, H, T, T, tr, true, false);
    gb_reshape(g, dS, dST);
    gb_matmul_kv(g, dST, Q, dK, io, B, H, HK, T, D);
    /* dQ = dS K (fp32 accumulator, then rounded) */
    cudnnBackendDescriptor_t K = gb_tensor(g, g->next_uid++, f, B, HK, T, D, sq, true, false); /* fp32, as the
                                                              frontend's reshape_k (a virtual tensor's default type) */
    gb_reshape(g, KT, K);
    gb_matmul(g, dS, K, dqacc);
    gb_pw(g, CUDNN_POINTWISE_IDENTITY, f, dqacc, NULL, NULL, dQ, -1);
}

/* ---------------------------------------------------------------- plans, cached */

typedef struct plan {
    shape s;
    bool bwd;
    bool ok;
    gb *g;                          /* the graph's descriptors (kept alive with the plan) */
    cudnnBackendDescriptor_t exec;  /* the execution plan (also in g->keep) */
    int64_t ws;                     /* its workspace */
    char why[512];
} plan;

#define MAX_PLANS 64
#define MAX_DEVICES 64
static plan *plans[MAX_PLANS];
static int n_plans;
static cudnnHandle_t handles[MAX_DEVICES];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static bool same(const shape *a, const shape *b)
{
    return a->device == b->device && a->dt == b->dt && a->B == b->B && a->T == b->T && a->NH == b->NH &&
           a->NKV == b->NKV && a->hs == b->hs;
}

static int cfg_pick; /* vr__cudnn_attention_pick: how many finalizing configs to pass over (tests, benchmarks) */

void vr__cudnn_attention_pick(int i) { cfg_pick = i; }

/* Heuristics (mode A), then the first engine config whose plan finalizes. */
static void make_plan(plan *p, cudnnHandle_t h)
{
    gb *g = p->g;
    g->next_uid = U_FIRST_VIRTUAL;
    if (p->bwd)
        build_bwd(g, &p->s);
    else
        build_fwd(g, &p->s);
    cudnnBackendDescriptor_t og = gb_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    gb_set(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops, "graph ops");
    gb_set(g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
    gb_fin(g, og, "operation graph");
    cudnnBackendDescriptor_t heur = gb_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    gb_set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og, "heur graph");
    gb_set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heur mode");
    gb_fin(g, heur, "heuristics");
    int64_t n = 0;
    if (!g->failed) {
        cudnnStatus_t st = dn.d_get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL);
        if (st != CUDNN_STATUS_SUCCESS)
            gb_fail(g, st, "heuristics results (count)");
    }
    if (!g->failed && n <= 0) {
        g->failed = true;
        snprintf(g->err, sizeof g->err, "heuristics found no engine for the graph");
    }
    if (n > 8)
        n = 8;
    cudnnBackendDescriptor_t cfg[8] = {0};
    for (int64_t i = 0; i < n; i++)
        cfg[i] = gb_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
    int64_t got = 0;
    if (!g->failed) {
        cudnnStatus_t st = dn.d_get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, cfg);
        if (st != CUDNN_STATUS_SUCCESS)
            gb_fail(g, st, "heuristics results");
    }
    char first_err[512] = "";
    int passed = 0;
    for (int64_t i = 0; i < got && !g->failed; i++) {
        cudnnBackendDescriptor_t ep = gb_new(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
        gb_set(g, ep, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "plan handle");
        gb_set(g, ep, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i], "plan config");
        gb_fin(g, ep, "execution plan");
        if (!g->failed) {
            int64_t ws = 0, cnt = 0;
            cudnnStatus_t st = dn.d_get(ep, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, &ws);
            if (st != CUDNN_STATUS_SUCCESS) {
                gb_fail(g, st, "plan workspace size");
                break;
            }
            if (passed++ < cfg_pick) {
                snprintf(first_err, sizeof first_err, "engine config %d of %lld not found", cfg_pick, (long long)got);
                continue;
            }
            p->exec = ep;
            p->ws = ws;
            p->ok = true;
            return;
        }
        if (!first_err[0])
            snprintf(first_err, sizeof first_err, "%s", g->err);
        g->failed = false; /* try the next config */
        g->err[0] = 0;
    }
    snprintf(p->why, sizeof p->why, "%s", first_err[0] ? first_err : g->err[0] ? g->err : "no engine config finalizes");
}

static void plan_free(plan *p)
{
    if (!p)
        return;
    if (p->g) {
        gb_free(p->g);
        free(p->g);
    }
    free(p);
}

static vr_status unsupported(const char *op, const shape *s, const char *why)
{
    return vr_error(VR_ERR_UNSUPPORTED,
                    "cuda kernels: attention %s (cudnn): B=%d T=%d heads %d kv heads %d head size %d %s: %s", op, s->B,
                    s->T, s->NH, s->NKV, s->hs, vr_cuda_dtype_name(s->dt), why);
}

/* The cached plan of shape s (built now if new) and the device's handle; under mu. */
static vr_status get_plan(const shape *s, bool bwd, plan **out, cudnnHandle_t *hout)
{
    const char *op = bwd ? "bwd" : "fwd";
    if (!dn_ok())
        return unsupported(op, s, dn.why);
    if (s->dt != VR_CUDA_BF16 && s->dt != VR_CUDA_F16)
        return unsupported(op, s, "cuDNN's flash attention takes bf16 or fp16");
    if (!vr_scratch_cudnn_attention_ok(s->hs, 2) || s->NH <= 0 || s->NKV <= 0 || s->NH % s->NKV || s->B <= 0 ||
        s->T <= 0)
        return unsupported(op, s, "a head size that is a multiple of 8 up to 128, heads a multiple of kv heads");
    if (s->device < 0 || s->device >= MAX_DEVICES)
        return unsupported(op, s, "device index out of range");
    for (int i = 0; i < n_plans; i++)
        if (plans[i]->bwd == bwd && same(&plans[i]->s, s)) {
            if (!plans[i]->ok)
                return unsupported(op, s, plans[i]->why);
            *out = plans[i];
            *hout = handles[s->device];
            return VR_OK;
        }
    if (!handles[s->device]) {
        cudnnStatus_t st = dn.create(&handles[s->device]);
        if (st != CUDNN_STATUS_SUCCESS) {
            handles[s->device] = NULL;
            return vr_error(VR_ERR_DEVICE, "cuda kernels: attention (cudnn): cudnnCreate failed: %s",
                            dn.error_string(st));
        }
    }
    if (n_plans == MAX_PLANS)
        return unsupported(op, s, "more than 64 shapes");
    plan *p = calloc(1, sizeof *p);
    gb *g = calloc(1, sizeof *g);
    if (!p || !g) {
        free(p);
        free(g);
        return vr_error(VR_ERR_OOM, "cuda kernels: attention (cudnn): out of host memory");
    }
    p->s = *s;
    p->bwd = bwd;
    p->g = g;
    make_plan(p, handles[s->device]);
    if (!p->ok) { /* keep the graph's descriptors out of the way; remember the answer */
        gb_free(g);
        free(g);
        p->g = NULL;
    }
    plans[n_plans++] = p;
    if (!p->ok)
        return unsupported(op, s, p->why);
    *out = p;
    *hout = handles[s->device];
    return VR_OK;
}

static vr_status shape_of(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, int B, int T, int NH, int NKV, int hs, shape *s)
{
    memset(s, 0, sizeof *s);
    s->dt = dt, s->B = B, s->T = T, s->NH = NH, s->NKV = NKV, s->hs = hs;
    s->device = ctx ? ctx->device : 0;
    if (!ctx) {
        cudaError_t e = cudaGetDevice(&s->device);
        if (e != cudaSuccess)
            return vr_error(VR_ERR_DEVICE, "cuda kernels: attention (cudnn): cudaGetDevice: %s", cudaGetErrorString(e));
    }
    return VR_OK;
}

vr_status vr_cuda_attention_cudnn_prepare(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, int B, int T, int NH, int NKV,
                                          int hs, size_t *fwd_ws, size_t *bwd_ws)
{
    shape s;
    vr_status st = shape_of(ctx, dt, B, T, NH, NKV, hs, &s);
    if (st)
        return st;
    plan *pf = NULL, *pb = NULL;
    cudnnHandle_t h;
    pthread_mutex_lock(&mu);
    st = get_plan(&s, false, &pf, &h);
    if (!st)
        st = get_plan(&s, true, &pb, &h);
    pthread_mutex_unlock(&mu);
    if (st)
        return st;
    if (fwd_ws)
        *fwd_ws = (size_t)pf->ws;
    if (bwd_ws)
        *bwd_ws = (size_t)pb->ws;
    return VR_OK;
}

/* Executes plan p with the variant pack (uids, pointers); its workspace: `own` (own_bytes, planned in the node's
 * scratch) when it holds it, else the ctx's. */
static vr_status run(const vr_cuda_ctx *ctx, const shape *s, bool bwd, const int64_t *uids, void **ptrs, int n,
                     void *own, size_t own_bytes)
{
    const char *op = bwd ? "attention_bwd (cudnn)" : "attention_fwd (cudnn)";
    plan *p = NULL;
    cudnnHandle_t h = NULL;
    pthread_mutex_lock(&mu);
    vr_status st = get_plan(s, bwd, &p, &h);
    if (st) {
        pthread_mutex_unlock(&mu);
        return st;
    }
    bool mine = own && own_bytes >= (size_t)p->ws;
    if ((size_t)p->ws > 0 && !mine && (!ctx->workspace || ctx->workspace_bytes < (size_t)p->ws)) {
        pthread_mutex_unlock(&mu);
        return vr_error(VR_ERR_INVALID, "cuda kernels: %s: cuDNN's plan needs %lld bytes of workspace, the scratch "
                        "holds %zu and the ctx's %zu", op, (long long)p->ws, own ? own_bytes : (size_t)0,
                        ctx->workspace ? ctx->workspace_bytes : (size_t)0);
    }
    gb g;
    g.nkeep = g.nops = 0;
    g.failed = false;
    g.err[0] = 0;
    void *ws = p->ws > 0 ? (mine ? own : ctx->workspace) : NULL;
    cudnnBackendDescriptor_t vp = gb_new(&g, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    gb_set(&g, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids, "variant uids");
    gb_set(&g, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs, "variant pointers");
    gb_set(&g, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, "variant workspace");
    gb_fin(&g, vp, "variant pack");
    if (!g.failed) {
        cudnnStatus_t cs = dn.set_stream(h, (cudaStream_t)ctx->stream);
        if (cs != CUDNN_STATUS_SUCCESS)
            gb_fail(&g, cs, "cudnnSetStream");
    }
    if (!g.failed) {
        cudnnStatus_t cs = dn.execute(h, p->exec, vp);
        if (cs != CUDNN_STATUS_SUCCESS)
            gb_fail(&g, cs, "cudnnBackendExecute");
    }
    gb_free(&g);
    pthread_mutex_unlock(&mu);
    if (g.failed)
        return vr_error(VR_ERR_DEVICE, "cuda kernels: %s: %s", op, g.err);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return vr_error(VR_ERR_DEVICE, "cuda kernels: %s: %s", op, cudaGetErrorString(e));
#ifndef NDEBUG
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (!(ctx->stream && cudaStreamIsCapturing((cudaStream_t)ctx->stream, &cap) == cudaSuccess &&
          cap != cudaStreamCaptureStatusNone)) {
        e = cudaStreamSynchronize((cudaStream_t)ctx->stream);
        if (e != cudaSuccess)
            return vr_error(VR_ERR_DEVICE, "cuda kernels: %s (debug sync): %s", op, cudaGetErrorString(e));
    }
#endif
    return VR_OK;
}

static float neg_inf(void) { return dn.version < 91000 ? -3.402823466e38f : -INFINITY; }

static vr_status check(const vr_cuda_ctx *ctx, const char *op, int B, int T, int NH, int NKV, int hs)
{
    if (!ctx)
        return vr_error(VR_ERR_INVALID, "cuda kernels: %s: ctx is NULL", op);
    if (B < 0 || T < 0 || NH <= 0 || NKV <= 0 || hs <= 0 || NH % NKV)
        return vr_error(VR_ERR_INVALID, "cuda kernels: %s: bad shape", op);
    return VR_OK;
}

vr_status vr_cuda_attention_cudnn_fwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *out, float *lse,
                                      const void *qkv, int B, int T, int NH, int NKV, int hs)
{
    vr_status st = check(ctx, "attention_fwd (cudnn)", B, T, NH, NKV, hs);
    if (st || (size_t)B * T == 0)
        return st;
    if (!out || !lse || !qkv)
        return vr_error(VR_ERR_INVALID, "cuda kernels: attention_fwd (cudnn): NULL pointer");
    shape s;
    if ((st = shape_of(ctx, dt, B, T, NH, NKV, hs, &s)))
        return st;
    if (!dn_ok())
        return unsupported("fwd", &s, dn.why);
    size_t es = 2;
    float scale = 1.0f / sqrtf((float)hs), ninf = neg_inf();
    char *q = (char *)qkv;
    int64_t uids[] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEGINF};
    void *ptrs[] = {q, q + (size_t)NH * hs * es, q + (size_t)(NH + NKV) * hs * es, out, lse, &scale, &ninf};
    return run(ctx, &s, false, uids, ptrs, 7, NULL, 0);
}

vr_status vr_cuda_attention_cudnn_bwd(const vr_cuda_ctx *ctx, vr_cuda_dtype dt, void *dqkv, const void *dout,
                                      const void *qkv, const void *out, const float *lse, int B, int T, int NH,
                                      int NKV, int hs, void *scratch, size_t scratch_bytes)
{
    const char *op = "attention_bwd (cudnn)";
    vr_status st = check(ctx, op, B, T, NH, NKV, hs);
    if (st || (size_t)B * T == 0)
        return st;
    if (!dqkv || !dout || !qkv || !out || !lse)
        return vr_error(VR_ERR_INVALID, "cuda kernels: %s: NULL pointer", op);
    size_t need = vr_cuda_attention_cudnn_scratch_bytes(B, T, NH, NKV, hs);
    if (!scratch || scratch_bytes < need)
        return vr_error(VR_ERR_INVALID, "cuda kernels: %s: scratch of %zu bytes < %zu needed", op, scratch_bytes, need);
    shape s;
    if ((st = shape_of(ctx, dt, B, T, NH, NKV, hs, &s)))
        return st;
    if (!dn_ok())
        return unsupported("bwd", &s, dn.why);
    char *dqacc = (char *)scratch;
    char *ssum = dqacc + vr_scratch_align(vr_scratch_cudnn_attention_dq(B, T, NH, hs));
    if (dn.version < 90600) { /* before 9.6 the caller zeroes the dQ accumulator (cudnn-frontend does) */
        cudaError_t e = cudaMemsetAsync(dqacc, 0, (size_t)vr_scratch_cudnn_attention_dq(B, T, NH, hs),
                                        (cudaStream_t)ctx->stream);
        if (e != cudaSuccess)
            return vr_error(VR_ERR_DEVICE, "cuda kernels: %s: cudaMemsetAsync: %s", op, cudaGetErrorString(e));
    }
    size_t es = 2, ko = (size_t)NH * hs * es, vo = (size_t)(NH + NKV) * hs * es;
    float scale = 1.0f / sqrtf((float)hs), ninf = neg_inf(), one = 1.0f;
    char *q = (char *)qkv, *dq = (char *)dqkv;
    int64_t uids[] = {U_Q, U_K, U_V, U_O, U_DO, U_STATS, U_DQ, U_DK, U_DV, U_SCALE, U_NEGINF, U_ONE, U_SSUM, U_DQACC};
    void *ptrs[] = {q, q + ko, q + vo, (void *)out, (void *)dout, (void *)lse, dq, dq + ko, dq + vo,
                    &scale, &ninf, &one, ssum, dqacc};
    size_t ws_off = (size_t)vr_scratch_cudnn_attention_ws_offset(B, T, NH, hs);
    size_t ws = (size_t)vr_scratch_cudnn_attention_plan_ws(B, T, NH, NKV, hs);
    return run(ctx, &s, true, uids, ptrs, 14, ws ? (char *)scratch + ws_off : NULL, ws);
}

void vr_cuda_attention_cudnn_release(void)
{
    if (!dn_ok())
        return;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_plans; i++)
        plan_free(plans[i]);
    n_plans = 0;
    for (int d = 0; d < MAX_DEVICES; d++)
        if (handles[d]) {
            dn.destroy(handles[d]);
            handles[d] = NULL;
        }
    pthread_mutex_unlock(&mu);
}

#endif
