/* vram — CPU token + position embedding (GPT-2 encoder). */
#include <string.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/cpu_internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

void vr_cpu_embedding_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe,
                          int B, int T, int C)
{
    // out is (B,T,C), tok is (B,T), wte is (V,C), wpe is (maxT,C)
    size_t rows = (size_t)B * T;
#pragma omp parallel for if (rows * (size_t)C >= VR_CPU_PAR_MIN) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        int t = (int)(r % (size_t)T);
        float *o = out + r * C;
        const float *e = wte + (size_t)tok[r] * C;
        if (!wpe) { // no position table (Llama: rotary positions inside attention)
            memcpy(o, e, (size_t)C * sizeof(float));
            continue;
        }
        const float *p = wpe + (size_t)t * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    }
}

void vr_cpu_embedding_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                          int B, int T, int C, int V, int acc)
{
    // dwte is (V,C), dwpe is (maxT,C), dout is (B,T,C), tok is (B,T)
    size_t rows = (size_t)B * T;
    int par = rows * (size_t)C >= VR_CPU_PAR_MIN;
    if (dwte && !acc) memset(dwte, 0, (size_t)V * C * sizeof(float));
    if (dwte) {
        // Tokens repeat, so rows of dwte collide: each thread owns a slice of the C channels
        // and walks all rows, so no two threads ever write the same float.
#pragma omp parallel if (par)
        {
            int nth = 1, th = 0;
#ifdef _OPENMP
            nth = omp_get_num_threads();
            th = omp_get_thread_num();
#endif
            int c0 = (int)((long long)C * th / nth), c1 = (int)((long long)C * (th + 1) / nth);
            for (size_t r = 0; r < rows; r++) {
                float *d = dwte + (size_t)tok[r] * C;
                const float *g = dout + r * C;
#pragma omp simd
                for (int c = c0; c < c1; c++) d[c] += g[c];
            }
        }
    }
    if (dwpe) {
        // dwpe[t] = sum_b dout[b,t]: one thread per position
#pragma omp parallel for if (par) schedule(static)
        for (int t = 0; t < T; t++) {
            float *d = dwpe + (size_t)t * C;
            if (!acc) memset(d, 0, (size_t)C * sizeof(float));
            for (int b = 0; b < B; b++) {
                const float *g = dout + ((size_t)b * T + t) * C;
#pragma omp simd
                for (int c = 0; c < C; c++) d[c] += g[c];
            }
        }
    }
}
