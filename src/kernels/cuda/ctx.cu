/* vram — CUDA kernels: the context (stream, cuBLASLt handle, workspace) and dtype helpers. */
#include <cublasLt.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"

#define VR_CUDA_LT_WORKSPACE ((size_t)32 << 20)

extern "C" size_t vr_cuda_matmul_workspace_bytes(void) { return VR_CUDA_LT_WORKSPACE; }

extern "C" size_t vr_cuda_dtype_size(vr_cuda_dtype dt)
{
    switch (dt) {
    case VR_CUDA_F32: return 4;
    case VR_CUDA_BF16: return 2;
    case VR_CUDA_F16: return 2;
    }
    return 0;
}

extern "C" const char *vr_cuda_dtype_name(vr_cuda_dtype dt)
{
    switch (dt) {
    case VR_CUDA_F32: return "f32";
    case VR_CUDA_BF16: return "bf16";
    case VR_CUDA_F16: return "f16";
    }
    return "?";
}

extern "C" vr_status vr_cuda_ctx_init(vr_cuda_ctx *ctx, void *stream, void *workspace,
                                      size_t workspace_bytes)
{
    if (!ctx) return vr_cu_bad("ctx_init", "ctx is NULL");
    memset(ctx, 0, sizeof *ctx);
    if (!workspace && workspace_bytes) return vr_cu_bad("ctx_init", "workspace is NULL but bytes > 0");
    int dev = 0;
    VR_CU_CHECK(cudaGetDevice(&dev), "ctx_init");
    int sms = 0;
    VR_CU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "ctx_init");
    cublasLtHandle_t lt = NULL;
    cublasStatus_t s = cublasLtCreate(&lt);
    if (s != CUBLAS_STATUS_SUCCESS)
        return vr_error(VR_ERR_DEVICE, "cuda kernels: ctx_init: cublasLtCreate failed: %s",
                        cublasLtGetStatusString(s));
    ctx->stream = stream;
    ctx->lt = lt;
    ctx->workspace = workspace;
    ctx->workspace_bytes = workspace_bytes;
    ctx->allow_tf32 = 0;
    ctx->device = dev;
    ctx->sm_count = sms;
    return VR_OK;
}

extern "C" void vr_cuda_ctx_destroy(vr_cuda_ctx *ctx)
{
    if (!ctx) return;
    if (ctx->lt) cublasLtDestroy((cublasLtHandle_t)ctx->lt);
    ctx->lt = NULL;
}

extern "C" vr_status vr_cuda_sync(const vr_cuda_ctx *ctx)
{
    VR_CU_CTX_OK(ctx, "sync");
    VR_CU_CHECK(cudaStreamSynchronize(VR_STREAM(ctx)), "sync");
    return VR_OK;
}

/* ---------------------------------------------------------------- streams and CUDA graphs */

extern "C" vr_status vr_cuda_stream_create(void **stream)
{
    if (!stream) return vr_cu_bad("stream_create", "NULL pointer");
    cudaStream_t st = NULL;
    VR_CU_CHECK(cudaStreamCreate(&st), "stream_create");
    *stream = st;
    return VR_OK;
}

extern "C" void vr_cuda_stream_destroy(void *stream)
{
    if (stream) cudaStreamDestroy((cudaStream_t)stream);
}

static vr_status copy_async(const vr_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            const char *op)
{
    VR_CU_CTX_OK(ctx, op);
    if (!bytes) return VR_OK;
    if (!dst || !src) return vr_cu_bad(op, "NULL pointer");
    VR_CU_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, VR_STREAM(ctx)), op);
    return VR_OK;
}

extern "C" vr_status vr_cuda_upload(const vr_cuda_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    return copy_async(ctx, dst, src, bytes, cudaMemcpyHostToDevice, "upload");
}

extern "C" vr_status vr_cuda_download(const vr_cuda_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    return copy_async(ctx, dst, src, bytes, cudaMemcpyDeviceToHost, "download");
}

extern "C" vr_status vr_cuda_capture_begin(const vr_cuda_ctx *ctx)
{
    VR_CU_CTX_OK(ctx, "capture_begin");
    if (!ctx->stream) return vr_cu_bad("capture_begin", "the legacy default stream cannot be captured");
    VR_CU_CHECK(cudaStreamBeginCapture(VR_STREAM(ctx), cudaStreamCaptureModeThreadLocal), "capture_begin");
    return VR_OK;
}

extern "C" vr_status vr_cuda_capture_end(const vr_cuda_ctx *ctx, int keep, void **exec)
{
    VR_CU_CTX_OK(ctx, "capture_end");
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(VR_STREAM(ctx), &g);
    if (e != cudaSuccess || !keep) {
        if (g) cudaGraphDestroy(g);
        (void)cudaGetLastError();
        return keep ? vr_cu_status(e, "capture_end", "cudaStreamEndCapture") : VR_OK;
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiateWithFlags(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return vr_cu_status(e, "capture_end", "cudaGraphInstantiate");
    }
    *exec = x;
    return VR_OK;
}

extern "C" vr_status vr_cuda_graph_launch(const vr_cuda_ctx *ctx, void *exec)
{
    VR_CU_CTX_OK(ctx, "graph_launch");
    if (!exec) return vr_cu_bad("graph_launch", "no graph");
    VR_CU_CHECK(cudaGraphLaunch((cudaGraphExec_t)exec, VR_STREAM(ctx)), "graph_launch");
    return VR_OK;
}

extern "C" void vr_cuda_graph_destroy(void *exec)
{
    if (exec) cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

/* ---------------------------------------------------------------- timing events */

extern "C" vr_status vr_cuda_events_create(void **ev, int n)
{
    if (!ev || n < 0) return vr_cu_bad("events_create", "bad arguments");
    for (int i = 0; i < n; i++) {
        cudaEvent_t e = NULL;
        cudaError_t r = cudaEventCreate(&e);
        if (r != cudaSuccess) {
            vr_cuda_events_destroy(ev, i);
            return vr_cu_status(r, "events_create", "cudaEventCreate");
        }
        ev[i] = e;
    }
    return VR_OK;
}

extern "C" vr_status vr_cuda_event_record(const vr_cuda_ctx *ctx, void *ev)
{
    VR_CU_CTX_OK(ctx, "event_record");
    VR_CU_CHECK(cudaEventRecord((cudaEvent_t)ev, VR_STREAM(ctx)), "event_record");
    return VR_OK;
}

extern "C" vr_status vr_cuda_event_ms(void *from, void *to, float *ms)
{
    VR_CU_CHECK(cudaEventSynchronize((cudaEvent_t)to), "event_ms");
    VR_CU_CHECK(cudaEventElapsedTime(ms, (cudaEvent_t)from, (cudaEvent_t)to), "event_ms");
    return VR_OK;
}

extern "C" vr_status vr_cuda_event_elapsed(void *from, void *to, float *ms)
{
    VR_CU_CHECK(cudaEventElapsedTime(ms, (cudaEvent_t)from, (cudaEvent_t)to), "event_elapsed");
    return VR_OK;
}

extern "C" void vr_cuda_events_destroy(void **ev, int n)
{
    for (int i = 0; ev && i < n; i++)
        if (ev[i]) cudaEventDestroy((cudaEvent_t)ev[i]);
}

extern "C" vr_status vr_cuda_copy_stream_create(void **stream)
{
    if (!stream) return vr_cu_bad("copy_stream_create", "NULL pointer");
    cudaStream_t st = NULL;
    VR_CU_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "copy_stream_create");
    *stream = st;
    return VR_OK;
}

extern "C" vr_status vr_cuda_copy_down(const vr_cuda_ctx *ctx, void *copy_stream, void *mark, void *fence, void *begin,
                                       void *done, void *dst, const void *src, size_t bytes)
{
    VR_CU_CTX_OK(ctx, "copy_down");
    if (!copy_stream || !mark || !done || !dst || !src) return vr_cu_bad("copy_down", "NULL pointer");
    cudaStream_t cs = (cudaStream_t)copy_stream;
    if (fence) VR_CU_CHECK(cudaStreamWaitEvent(VR_STREAM(ctx), (cudaEvent_t)fence, 0), "copy_down");
    VR_CU_CHECK(cudaEventRecord((cudaEvent_t)mark, VR_STREAM(ctx)), "copy_down");
    VR_CU_CHECK(cudaStreamWaitEvent(cs, (cudaEvent_t)mark, 0), "copy_down");
    if (begin) VR_CU_CHECK(cudaEventRecord((cudaEvent_t)begin, cs), "copy_down");
    VR_CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cs), "copy_down");
    VR_CU_CHECK(cudaEventRecord((cudaEvent_t)done, cs), "copy_down");
    return VR_OK;
}

extern "C" vr_status vr_cuda_copy_up(void *copy_stream, void *begin, void *end, void *dst, const void *src, size_t bytes)
{
    if (!copy_stream || !dst || !src) return vr_cu_bad("copy_up", "NULL pointer");
    cudaStream_t cs = (cudaStream_t)copy_stream;
    if (begin) VR_CU_CHECK(cudaEventRecord((cudaEvent_t)begin, cs), "copy_up");
    VR_CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cs), "copy_up");
    if (end) VR_CU_CHECK(cudaEventRecord((cudaEvent_t)end, cs), "copy_up");
    return VR_OK;
}

extern "C" vr_status vr_cuda_event_wait(void *ev)
{
    VR_CU_CHECK(cudaEventSynchronize((cudaEvent_t)ev), "event_wait");
    return VR_OK;
}

extern "C" vr_status vr_cuda_stream_fork(const vr_cuda_ctx *ctx, void *side, void *mark, void *fence)
{
    VR_CU_CTX_OK(ctx, "stream_fork");
    if (!side || !mark) return vr_cu_bad("stream_fork", "NULL pointer");
    if (fence) VR_CU_CHECK(cudaStreamWaitEvent(VR_STREAM(ctx), (cudaEvent_t)fence, 0), "stream_fork");
    VR_CU_CHECK(cudaEventRecord((cudaEvent_t)mark, VR_STREAM(ctx)), "stream_fork");
    VR_CU_CHECK(cudaStreamWaitEvent((cudaStream_t)side, (cudaEvent_t)mark, 0), "stream_fork");
    return VR_OK;
}

extern "C" vr_status vr_cuda_stream_record(void *side, void *ev)
{
    if (!side || !ev) return vr_cu_bad("stream_record", "NULL pointer");
    VR_CU_CHECK(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)side), "stream_record");
    return VR_OK;
}

extern "C" vr_status vr_cuda_stream_join(const vr_cuda_ctx *ctx, void *ev)
{
    VR_CU_CTX_OK(ctx, "stream_join");
    if (!ev) return vr_cu_bad("stream_join", "NULL pointer");
    VR_CU_CHECK(cudaStreamWaitEvent(VR_STREAM(ctx), (cudaEvent_t)ev, 0), "stream_join");
    return VR_OK;
}

extern "C" vr_status vr_cuda_stream_wait_host(void *stream)
{
    VR_CU_CHECK(cudaStreamSynchronize((cudaStream_t)stream), "stream_sync");
    return VR_OK;
}
