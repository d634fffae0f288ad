// cuBLASLt's first heuristic vs the fastest of its first 16 candidates, for GPT-2 124M's products
// (B*T = 16384, bf16, fp32 compute, 32 MiB workspace), laid out as vram calls them (src/kernels/cuda/
// matmul.cu). Build and run on the GPU machine:
//   nvcc -O2 -arch=sm_90 bench/gpu/lt_algos.cu -lcublasLt -o /tmp/lt_algos && /tmp/lt_algos [C [N]]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <vector>
#include "lt_time.h"
#define CK(x) do { auto r_ = (x); if ((int)r_) { printf("%s:%d error %d\n", __FILE__, __LINE__, (int)r_); return 1; } } while (0)

static float g_beta = 0;
struct Shape { const char *name; int m, n, k, lda, ldb, ldd, ta, tb; cublasLtEpilogue_t epi; };

static int run(cublasLtHandle_t lt, const Shape &s, void *A, void *B, void *D, void *bias, void *ws, size_t wsb,
               cudaStream_t st)
{
    cublasLtMatmulDesc_t desc; cublasLtMatrixLayout_t la, lb, ld; cublasLtMatmulPreference_t pref;
    cudaDataType_t ty = CUDA_R_16BF, sty = CUDA_R_32F;
    cublasOperation_t oa = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &sty, sizeof sty));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &s.epi, sizeof s.epi));
    if (s.epi != CUBLASLT_EPILOGUE_DEFAULT) {
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &ty, sizeof ty));
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    CK(cublasLtMatrixLayoutCreate(&la, ty, s.ta ? s.k : s.m, s.ta ? s.m : s.k, s.lda));
    CK(cublasLtMatrixLayoutCreate(&lb, ty, s.tb ? s.n : s.k, s.tb ? s.k : s.n, s.ldb));
    CK(cublasLtMatrixLayoutCreate(&ld, ty, s.m, s.n, s.ldd));
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t h[16]; int got = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 16, h, &got));
    float alpha = 1, beta = g_beta, first, best; int bi;
    double flop = 2.0 * s.m * s.n * s.k;
    auto call = [&](int i) {
        cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &h[i].algo, ws, wsb, st);
    };
    lt_time_candidates(got, st, call, [](int) {}, &first, &best, &bi);
    printf("%-22s m %5d n %5d k %5d: heuristic 0 %.4f ms (%.0f TFLOP/s), best #%d of %d %.4f ms (%.0f TFLOP/s) %.1f%%\n",
           s.name, s.m, s.n, s.k, first, flop / first / 1e9, bi, got, best, flop / best / 1e9, 100 * (first - best) / first);
    cublasLtMatmulPreferenceDestroy(pref); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld); cublasLtMatmulDescDestroy(desc);
    return 0;
}

int main(int argc, char **argv)
{
    int N = argc > 2 ? atoi(argv[2]) : 16384, C = argc > 1 ? atoi(argv[1]) : 768, V = 50304;
    cublasLtHandle_t lt; CK(cublasLtCreate(&lt));
    size_t big = (size_t)V * N * 2 + (size_t)4 * C * N * 2;
    void *A, *B, *D, *bias, *ws; size_t wsb = 32u << 20;
    CK(cudaMalloc(&A, big)); CK(cudaMalloc(&B, big)); CK(cudaMalloc(&D, big)); CK(cudaMalloc(&bias, 1 << 20));
    CK(cudaMalloc(&ws, wsb));
    cudaMemset(A, 0x3c, big); cudaMemset(B, 0x3b, big);  // small nonzero bf16 values
    cudaStream_t st; cudaStreamCreate(&st);
    const cublasLtEpilogue_t BI = CUBLASLT_EPILOGUE_BIAS, DF = CUBLASLT_EPILOGUE_DEFAULT, BG = CUBLASLT_EPILOGUE_BGRADB;
    int ocs[4] = {3 * C, C, 4 * C, C}, ks[4] = {C, C, C, 4 * C};
    const char *nm[4] = {"qkv", "attproj", "fch", "fcproj"};
    for (int i = 0; i < 4; i++) {
        int OC = ocs[i], K = ks[i];
        char a[64], b[64], c[64];
        snprintf(a, 64, "%s fwd", nm[i]); snprintf(b, 64, "%s bwd dinp", nm[i]); snprintf(c, 64, "%s bwd dw+db", nm[i]);
        Shape f = {a, OC, N, K, K, K, OC, 1, 0, BI};           // out = w inp^T + b
        Shape di = {b, K, N, OC, K, OC, K, 0, 0, DF};           // dinp
        Shape dw = {c, K, OC, N, K, OC, K, 0, 1, BG};           // dw, db
        char d2[64], d3[64];
        snprintf(d2, 64, "%s dw^T+db (swapped)", nm[i]); snprintf(d3, 64, "%s dw no epilogue", nm[i]);
        Shape sw = {d2, OC, K, N, OC, K, OC, 0, 1, CUBLASLT_EPILOGUE_BGRADA};  // dw^T = dout^T inp, then transposed
        Shape ne = {d3, K, OC, N, K, OC, K, 0, 1, DF};
        if (run(lt, f, A, B, D, bias, ws, wsb, st) || run(lt, di, A, B, D, bias, ws, wsb, st) ||
            run(lt, dw, A, B, D, bias, ws, wsb, st) || run(lt, sw, A, B, D, bias, ws, wsb, st) ||
            run(lt, ne, A, B, D, bias, ws, wsb, st)) return 1;
    }
    Shape l = {"logits", V, N, C, C, C, V, 1, 0, DF}, dx = {"cls dx", C, N, V, C, V, C, 0, 0, DF},
          dwte = {"cls dwte", C, V, N, C, V, C, 0, 1, DF};
    if (run(lt, l, A, B, D, bias, ws, wsb, st) || run(lt, dx, A, B, D, bias, ws, wsb, st) ||
        run(lt, dwte, A, B, D, bias, ws, wsb, st)) return 1;
    // the classifier's chunks (src/kernels/cuda/classifier.cu): R rows at a time, dwte accumulating
    for (int R = 1024; R <= N; R *= 2) {
        char a[64], b[64], c[64];
        snprintf(a, 64, "chunk %d logits", R); snprintf(b, 64, "chunk %d dx", R); snprintf(c, 64, "chunk %d dwte+=", R);
        Shape cl = {a, V, R, C, C, C, V, 1, 0, DF}, cx = {b, C, R, V, C, V, C, 0, 0, DF}, cw = {c, C, V, R, C, V, C, 0, 1, DF};
        g_beta = 0;
        if (run(lt, cl, A, B, D, bias, ws, wsb, st) || run(lt, cx, A, B, D, bias, ws, wsb, st)) return 1;
        g_beta = 1;
        if (run(lt, cw, A, B, D, bias, ws, wsb, st)) return 1;
        g_beta = 0;
    }
    return 0;
}
