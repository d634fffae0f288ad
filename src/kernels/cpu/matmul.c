/* vram — CPU matrix product with bias (nn.Linear layout), through OpenBLAS. */
#include <cblas.h>
#include <string.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/cpu_internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

void vr_cpu_matmul_fwd(float *out, const float *inp, const float *w, const float *bias,
                       int N, int C, int OC)
{
    // out is (N,OC), inp is (N,C), w is (OC,C), bias is (OC) or NULL: out = inp w^T + bias
    float beta = 0.0f;
    if (bias) {
        size_t n = (size_t)N * OC;
#pragma omp parallel for if (n >= VR_CPU_PAR_MIN) schedule(static)
        for (int i = 0; i < N; i++) memcpy(out + (size_t)i * OC, bias, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, beta, out, OC);
}

/* dbias(OC) (=|+=) sum over rows of dout(N,OC); each thread owns a slice of the OC columns. */
static void bias_grad(float *dbias, const float *dout, int N, int OC, int acc)
{
    int par = (size_t)N * OC >= VR_CPU_PAR_MIN;
#pragma omp parallel if (par)
    {
        int nth = 1, th = 0;
#ifdef _OPENMP
        nth = omp_get_num_threads();
        th = omp_get_thread_num();
#endif
        int o0 = (int)((long long)OC * th / nth), o1 = (int)((long long)OC * (th + 1) / nth);
        if (!acc)
            for (int o = o0; o < o1; o++) dbias[o] = 0.0f;
        for (int i = 0; i < N; i++) {
            const float *g = dout + (size_t)i * OC;
#pragma omp simd
            for (int o = o0; o < o1; o++) dbias[o] += g[o];
        }
    }
}

void vr_cpu_matmul_bwd(float *dinp, float *dw, float *dbias, const float *dout,
                       const float *inp, const float *w, int N, int C, int OC,
                       int acc_dinp, int acc_dparam)
{
    // dinp is (N,C), dw is (OC,C), dbias is (OC), dout is (N,OC)
    if (dinp) // dinp = dout w
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C,
                    acc_dinp ? 1.0f : 0.0f, dinp, C);
    if (dw) // dw = dout^T inp
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C,
                    acc_dparam ? 1.0f : 0.0f, dw, C);
    if (dbias) bias_grad(dbias, dout, N, OC, acc_dparam);
}
