/* vram — CPU fused classifier (tied head + softmax cross-entropy, forward and backward in one op)
 * and plain softmax cross-entropy over given logits (small V). */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/scratch.h"

/* Recommended rows per chunk: kernels/scratch.h (the plan sizes the node's scratch with it). */
size_t vr_cpu_classifier_scratch_bytes(int N, int V) { return (size_t)vr_scratch_cpu_classifier(N, V); }

/* One row of logits (V) -> returns the loss -log softmax(z)[t]; if grad, turns z into
 * (softmax(z) - onehot(t)) * g in place. t must be in [0,V).
 * The normaliser is summed in double: in float, the many terms below half an ulp of the running sum
 * (exp(z_v - max) < 6e-8 for a peaked softmax over a large vocabulary) would be lost, biasing every p
 * by up to ~1e-5 relative. */
VR_CPU_HOT
static float xent_row(float *z, int V, int t, int grad, float g)
{
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    float zt = z[t];
    double sum = 0.0;
    if (grad) {
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < V; v++) {
            z[v] = vr_expf(z[v] - mx);
            sum += (double)z[v];
        }
        float k = (float)((double)g / sum);
#pragma omp simd
        for (int v = 0; v < V; v++) z[v] *= k;
        z[t] -= g;
    } else {
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < V; v++) sum += (double)vr_expf(z[v] - mx);
    }
    return (float)(log(sum) + (double)mx - (double)zt);
}

void vr_cpu_classifier(float *losses, float *dx, float *dwte, const float *x, const float *wte,
                       const int32_t *targets, int N, int C, int V, float dloss_scale,
                       float *scratch, size_t scratch_bytes, int acc_dx, int acc_dwte)
{
    // losses is (N), dx is (N,C), dwte is (V,C), x is (N,C), wte is (V,C), targets is (N),
    // scratch holds R rows of V floats: the logits of one chunk, then their gradient
    int grad = dx || dwte;
    size_t cap = scratch_bytes / ((size_t)V * sizeof(float));
    int R = cap < (size_t)N ? (int)cap : N;
    if (R < 1) R = 1; // scratch must hold one row; the contract says so
    if (dwte && !acc_dwte && N == 0) memset(dwte, 0, (size_t)V * C * sizeof(float));
    for (int r0 = 0; r0 < N; r0 += R) {
        int rn = N - r0 < R ? N - r0 : R;
        const float *xc = x + (size_t)r0 * C;
        // logits(rn,V) = x(rn,C) wte(V,C)^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rn, V, C, 1.0f, xc, C, wte, C, 0.0f,
                    scratch, V);
#pragma omp parallel for if ((size_t)rn * V >= VR_CPU_PAR_MIN) schedule(static)
        for (int i = 0; i < rn; i++) {
            float *z = scratch + (size_t)i * V;
            int t = targets[r0 + i];
            if (t < 0) {
                losses[r0 + i] = 0.0f;
                if (grad) memset(z, 0, (size_t)V * sizeof(float));
                continue;
            }
            losses[r0 + i] = xent_row(z, V, t, grad, dloss_scale);
        }
        if (dx) // dx(rn,C) = dlogits(rn,V) wte(V,C)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rn, C, V, 1.0f, scratch, V, wte, C,
                        acc_dx ? 1.0f : 0.0f, dx + (size_t)r0 * C, C);
        if (dwte) // dwte(V,C) += dlogits(rn,V)^T x(rn,C)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, V, C, rn, 1.0f, scratch, V, xc, C,
                        (r0 == 0 && !acc_dwte) ? 0.0f : 1.0f, dwte, C);
    }
}

void vr_cpu_softmax_xent_fwd(float *losses, float *probs, const float *logits,
                             const int32_t *targets, int N, int V)
{
    // losses is (N), probs and logits are (N,V), targets is (N)
#pragma omp parallel for if ((size_t)N * V >= VR_CPU_PAR_MIN) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *z = logits + (size_t)i * V;
        float *p = probs + (size_t)i * V;
        float mx = -INFINITY;
        for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
        double sum = 0.0; // in double, as in xent_row
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < V; v++) {
            p[v] = vr_expf(z[v] - mx);
            sum += (double)p[v];
        }
        float inv = (float)(1.0 / sum);
#pragma omp simd
        for (int v = 0; v < V; v++) p[v] *= inv;
        int t = targets[i];
        losses[i] = t < 0 ? 0.0f : (float)(log(sum) + (double)mx - (double)z[t]);
    }
}

void vr_cpu_softmax_xent_bwd(float *dlogits, const float *dlosses, float dloss_scale,
                             const float *probs, const int32_t *targets, int N, int V, int acc)
{
    // dlogits and probs are (N,V), dlosses is (N) or NULL, targets is (N)
#pragma omp parallel for if ((size_t)N * V >= VR_CPU_PAR_MIN) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *p = probs + (size_t)i * V;
        float *d = dlogits + (size_t)i * V;
        int t = targets[i];
        float g = t < 0 ? 0.0f : dloss_scale * (dlosses ? dlosses[i] : 1.0f);
        if (acc) {
#pragma omp simd
            for (int v = 0; v < V; v++) d[v] += p[v] * g;
        } else {
#pragma omp simd
            for (int v = 0; v < V; v++) d[v] = p[v] * g;
        }
        if (t >= 0) d[t] -= g;
    }
}
