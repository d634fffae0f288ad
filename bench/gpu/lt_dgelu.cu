// The MLP's products with cuBLASLt's GELU epilogues against the same products without them, GPT-2 124M (B*T 16384,
// C 768) and medium (8192, 1024), bf16: heuristic 0 and the best of the first 32 candidates of each.
//  backward: the dinp product of the Linear after the GELU (what vram runs, src/kernels/cuda/matmul.cu
//    vr_cuda_matmul_dgelu_bwd) plain, with DGELU, and with DGELU_BGRAD, which also writes the column sums of the
//    result (the bias gradient of the Linear before the GELU, which vram otherwise sums in a separate pass over
//    d_pre; whether BGRAD's sums are the same bit for bit twice);
//  forward: the Linear before the GELU with BIAS (plain) and GELU_AUX_BIAS (vr_cuda_matmul_gelu_fwd: writes the
//    pre-activation too).
// Build and run on the GPU machine:
//   nvcc -O2 -arch=sm_90 bench/gpu/lt_dgelu.cu -lcublasLt -o /tmp/lt_dgelu && /tmp/lt_dgelu
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstring>
#include <vector>
#include "lt_time.h"
#define CK(x) do { auto r_ = (x); if ((int)r_) { printf("%s:%d error %d\n", __FILE__, __LINE__, (int)r_); return 1; } } while (0)

enum Mode { BWD_PLAIN, BWD_DGELU, BWD_DGELU_BGRAD, FWD_BIAS, FWD_GELU_AUX, N_MODES };
static const char *mode_name[N_MODES] = {"bwd plain", "bwd DGELU", "bwd DGELU_BGRAD", "fwd BIAS", "fwd GELU_AUX_BIAS"};
#define MAX_CAND 32

// bwd: dpre^T(H, N) = w^T(H, C) dout^T(C, N), then the GELU gradient at pre (aux, ld H); BGRAD: + column sums into
// bias. fwd: pre^T(H, N) = w(H, C) inp^T(C, N) + bias, GELU_AUX: gelu into dpre, pre into the aux.
static int run(cublasLtHandle_t lt, int N, int C, Mode mode, void *w, void *dout, void *dpre, void *pre, void *bias,
               void *ws, size_t wsb, cudaStream_t st)
{
    int H = 4 * C, m = H, n = N, k = C;
    bool fwd = mode >= FWD_BIAS, bgrad = mode == BWD_DGELU_BGRAD;
    cublasLtEpilogue_t epis[N_MODES] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU_BGRAD,
                                        CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS};
    cublasLtEpilogue_t epi = epis[mode];
    cublasLtMatmulDesc_t desc; cublasLtMatrixLayout_t la, lb, ld; cublasLtMatmulPreference_t pref;
    cudaDataType_t ty = CUDA_R_16BF, sty = CUDA_R_32F;
    cublasOperation_t op = CUBLAS_OP_N, opa = fwd ? CUBLAS_OP_T : CUBLAS_OP_N;
    int64_t ldaux = H;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &sty, sizeof sty));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op, sizeof op));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (mode == BWD_DGELU || bgrad || mode == FWD_GELU_AUX) {
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof pre));
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux, sizeof ldaux));
    }
    if (bgrad || fwd) {
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &ty, sizeof ty));
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    if (fwd) CK(cublasLtMatrixLayoutCreate(&la, ty, k, m, k));
    else CK(cublasLtMatrixLayoutCreate(&la, ty, m, k, m));
    CK(cublasLtMatrixLayoutCreate(&lb, ty, k, n, k));
    CK(cublasLtMatrixLayoutCreate(&ld, ty, m, n, m));
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t h[MAX_CAND]; int got = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, MAX_CAND, h, &got));
    float alpha = 1, beta = 0, first, best; int bi;
    std::vector<uint16_t> b1(H), b2(H);
    bool same = true;
    auto call = [&](int i) {
        cublasLtMatmul(lt, desc, &alpha, w, la, dout, lb, &beta, dpre, ld, dpre, ld, &h[i].algo, ws, wsb, st);
    };
    lt_time_candidates(got, st, call, [&](int i) {
        if (!bgrad) return; // two more runs of this algorithm: the same sums?
        call(i);
        cudaMemcpy(b1.data(), bias, 2 * H, cudaMemcpyDeviceToHost);
        call(i);
        cudaMemcpy(b2.data(), bias, 2 * H, cudaMemcpyDeviceToHost);
        same = same && !memcmp(b1.data(), b2.data(), 2 * H);
    }, &first, &best, &bi);
    double flop = 2.0 * m * n * k;
    printf("N %5d C %4d %-17s heuristic 0 %.4f ms (%.0f TFLOP/s), best #%d of %d %.4f ms%s\n", N, C,
           mode_name[mode], first, flop / first / 1e9, bi, got, best,
           bgrad ? (same ? ", sums equal twice" : ", SUMS DIFFER between runs") : "");
    cublasLtMatmulPreferenceDestroy(pref); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld); cublasLtMatmulDescDestroy(desc);
    return 0;
}

int main()
{
    cublasLtHandle_t lt; CK(cublasLtCreate(&lt));
    size_t big = (size_t)16384 * 4 * 1024 * 2;
    void *w, *dout, *dpre, *pre, *bias, *ws; size_t wsb = 32u << 20;
    CK(cudaMalloc(&w, big)); CK(cudaMalloc(&dout, big)); CK(cudaMalloc(&dpre, big)); CK(cudaMalloc(&pre, big));
    CK(cudaMalloc(&bias, 1 << 20)); CK(cudaMalloc(&ws, wsb));
    // pseudo-random bf16 in [-1, 1): sums whose order shows
    std::vector<uint16_t> hb(big / 2);
    uint32_t s = 12345;
    for (size_t i = 0; i < hb.size(); i++) {
        s = s * 1664525u + 1013904223u;
        float f = (float)(s >> 8) / (float)(1 << 24) * 2.0f - 1.0f;
        uint32_t u; memcpy(&u, &f, 4); hb[i] = (uint16_t)(u >> 16);
    }
    CK(cudaMemcpy(w, hb.data(), big, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dout, hb.data(), big, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(pre, hb.data(), big, cudaMemcpyHostToDevice));
    cudaStream_t st; cudaStreamCreate(&st);
    int shapes[2][2] = {{16384, 768}, {8192, 1024}};
    for (auto &sh : shapes)
        for (int mo = 0; mo < N_MODES; mo++)
            if (run(lt, sh[0], sh[1], (Mode)mo, w, dout, dpre, pre, bias, ws, wsb, st)) return 1;
    return 0;
}
