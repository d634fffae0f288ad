/* Does memory mapped through CUDA's virtual memory calls run kernels as fast as cudaMalloc's? The same 2 GiB
 * buffer, allocated with cudaMalloc and mapped from physical allocations of 2 MiB (stitch's default granule),
 * 8, 64 MiB and one of 2 GiB (each a cuMemCreate, mapped side by side, one cuMemSetAccess over the range; with
 * 2 MiB also in a shuffled physical order, as stitch maps them), timed with two kernels: a stream over the whole
 * buffer (y = a x + y, 16-byte accesses) and a gather of 16 bytes at pseudo-random offsets (the translation
 * lookaside buffer's worst case).
 *     nvcc -O3 -arch=sm_90 bench/alloc/vmm_bw.cu -o /tmp/vmm_bw -lcuda && /tmp/vmm_bw [device]
 * One line per layout: GB/s of the stream (moved bytes / time) and of the gather (useful bytes / time), the best
 * of REPS launches after a warm-up. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "cu_check.h"

#define RK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));  \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

static const size_t BYTES = (size_t)2 << 30;
enum { REPS = 10 };

__global__ void k_stream(float4 *y, const float4 *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float4 a = x[i], b = y[i];
        y[i] = make_float4(1.5f * a.x + b.x, 1.5f * a.y + b.y, 1.5f * a.z + b.z, 1.5f * a.w + b.w);
    }
}

__global__ void k_gather(float *out, const float4 *x, size_t n, int per_thread)
{
    unsigned long long h = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    float s = 0.0f;
    for (int k = 0; k < per_thread; k++) {
        h = h * 6364136223846793005ULL + 1442695040888963407ULL;
        float4 v = x[(h >> 17) % n];
        s += v.x + v.y + v.z + v.w;
    }
    if (s == 12345.0f)
        out[0] = s;
}

static void run(const char *name, char *p)
{
    cudaEvent_t e0, e1;
    RK(cudaEventCreate(&e0));
    RK(cudaEventCreate(&e1));
    RK(cudaMemset(p, 0, BYTES));
    size_t half = BYTES / 2 / sizeof(float4);
    float4 *x = (float4 *)p, *y = (float4 *)(p + BYTES / 2);
    float best_s = 1e30f, best_g = 1e30f, ms;
    const int threads = 256, blocks = 132 * 8, per = 64;
    for (int r = 0; r <= REPS; r++) {
        RK(cudaEventRecord(e0));
        k_stream<<<blocks, threads>>>(y, x, half);
        RK(cudaEventRecord(e1));
        RK(cudaEventSynchronize(e1));
        RK(cudaEventElapsedTime(&ms, e0, e1));
        if (r && ms < best_s) best_s = ms;
        RK(cudaEventRecord(e0));
        k_gather<<<blocks * 4, threads>>>((float *)p, x, BYTES / sizeof(float4), per);
        RK(cudaEventRecord(e1));
        RK(cudaEventSynchronize(e1));
        RK(cudaEventElapsedTime(&ms, e0, e1));
        if (r && ms < best_g) best_g = ms;
    }
    double moved = 3.0 * (BYTES / 2), useful = 16.0 * blocks * 4 * threads * per;
    printf("%-28s stream %7.1f GB/s (%.3f ms)   gather %7.1f GB/s (%.3f ms)\n", name, moved / best_s / 1e6, best_s,
           useful / best_g / 1e6, best_g);
    RK(cudaEventDestroy(e0));
    RK(cudaEventDestroy(e1));
}

/* The buffer mapped from physical allocations of `chunk` bytes; shuffle: their order in the range permuted. */
static void vmm(int dev, size_t chunk, int shuffle)
{
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t n = BYTES / chunk;
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, BYTES, 0, 0, 0));
    CUmemGenericAllocationHandle *h = (CUmemGenericAllocationHandle *)malloc(n * sizeof *h);
    size_t *slot = (size_t *)malloc(n * sizeof *slot);
    for (size_t i = 0; i < n; i++) {
        CK(cuMemCreate(&h[i], chunk, &prop, 0));
        slot[i] = i;
    }
    if (shuffle)
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = (size_t)rand() % (i + 1), t = slot[i];
            slot[i] = slot[j];
            slot[j] = t;
        }
    for (size_t i = 0; i < n; i++)
        CK(cuMemMap(va + slot[i] * chunk, chunk, 0, h[i], 0));
    CUmemAccessDesc acc = {};
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(va, BYTES, &acc, 1));
    char name[64];
    snprintf(name, sizeof name, "cuMemMap %zu MiB chunks%s", chunk >> 20, shuffle ? ", shuffled" : "");
    run(name, (char *)va);
    CK(cuMemUnmap(va, BYTES));
    for (size_t i = 0; i < n; i++)
        CK(cuMemRelease(h[i]));
    CK(cuMemAddressFree(va, BYTES));
    free(h);
    free(slot);
}

int main(int argc, char **argv)
{
    int dev = argc > 1 ? atoi(argv[1]) : 0;
    RK(cudaSetDevice(dev));
    RK(cudaFree(0));
    char *p;
    RK(cudaMalloc(&p, BYTES));
    run("cudaMalloc", p);
    RK(cudaFree(p));
    vmm(dev, (size_t)2 << 20, 0);
    vmm(dev, (size_t)2 << 20, 1);
    vmm(dev, (size_t)8 << 20, 0);
    vmm(dev, (size_t)64 << 20, 0);
    vmm(dev, BYTES, 0);
    RK(cudaMalloc(&p, BYTES));
    run("cudaMalloc (again)", p);
    RK(cudaFree(p));
    return 0;
}
