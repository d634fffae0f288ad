/* Times the vram CPU kernels at GPT-2 small layer shapes; prints "<op> <milliseconds>" lines
 * (best of REPS after one warm-up) for run.sh to set beside PyTorch's. Usage: bench_kcpu B T [REPS] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/cpu/kernels_cpu.h"

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static float *rnd(size_t n, float lo, float hi)
{
    float *x = malloc(n * sizeof(float));
    if (!x) abort();
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)rand() / (float)RAND_MAX;
    return x;
}

#define TIME(name, stmt)                                                                          \
    do {                                                                                          \
        double best = 1e30;                                                                       \
        for (int r_ = 0; r_ <= reps; r_++) {                                                      \
            double t0_ = now_ms();                                                                \
            stmt;                                                                                 \
            double t_ = now_ms() - t0_;                                                           \
            if (r_ > 0 && t_ < best) best = t_;                                                   \
        }                                                                                         \
        printf("%s %.3f\n", name, best);                                                          \
        fflush(stdout);                                                                           \
    } while (0)

int main(int argc, char **argv)
{
    int B = argc > 1 ? atoi(argv[1]) : 4, T = argc > 2 ? atoi(argv[2]) : 1024;
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    int C = 768, NH = 12, V = 50257;
    size_t N = (size_t)B * T;
    float *qkv = rnd(N * 3 * C, -1, 1), *out = rnd(N * C, -1, 1), *lse = rnd((size_t)B * NH * T, 0, 1);
    float *dout = rnd(N * C, -1, 1), *dqkv = rnd(N * 3 * C, -1, 1);
    TIME("attention_fwd", vr_cpu_attention_fwd(out, lse, qkv, B, T, C, NH));
    TIME("attention_bwd", vr_cpu_attention_bwd(dqkv, dout, qkv, out, lse, B, T, C, NH, 0));

    float *x = rnd(N * C, -2, 2), *w = rnd(C, 0.5f, 1.5f), *b = rnd(C, -1, 1), *mean = rnd(N, 0, 1);
    float *rstd = rnd(N, 0, 1), *dx = rnd(N * C, -1, 1), *dw = rnd(C, 0, 1), *db = rnd(C, 0, 1);
    TIME("layernorm_fwd", vr_cpu_layernorm_fwd(out, mean, rstd, x, w, b, (int)N, C));
    TIME("layernorm_bwd", vr_cpu_layernorm_bwd(dx, dw, db, dout, x, w, mean, rstd, (int)N, C, 0, 0));

    float *h = rnd(N * 4 * C, -3, 3), *hg = rnd(N * 4 * C, -1, 1), *dh = rnd(N * 4 * C, -1, 1);
    TIME("gelu_fwd", vr_cpu_gelu_fwd(hg, h, N * 4 * C));
    TIME("gelu_bwd", vr_cpu_gelu_bwd(dh, h, hg, N * 4 * C, 0));

    float *W = rnd((size_t)4 * C * C, -0.05f, 0.05f), *dW = rnd((size_t)4 * C * C, -1, 1);
    float *bias = rnd(4 * C, -1, 1), *dbias = rnd(4 * C, -1, 1);
    TIME("matmul_fwd", vr_cpu_matmul_fwd(h, x, W, bias, (int)N, C, 4 * C));
    TIME("matmul_bwd", vr_cpu_matmul_bwd(dx, dW, dbias, dh, x, W, (int)N, C, 4 * C, 0, 0));

    float *wte = rnd((size_t)V * C, -0.05f, 0.05f), *dwte = rnd((size_t)V * C, -1, 1), *losses = rnd(N, 0, 1);
    int32_t *tg = malloc(N * sizeof(int32_t));
    for (size_t i = 0; i < N; i++) tg[i] = rand() % V;
    size_t sb = vr_cpu_classifier_scratch_bytes((int)N, V);
    float *scr = malloc(sb);
    int creps = reps < 2 ? reps : 2, save = reps;
    reps = creps;
    TIME("classifier_fwd_bwd", vr_cpu_classifier(losses, dx, dwte, x, wte, tg, (int)N, C, V, 1.0f / N, scr, sb, 0, 0));
    reps = save;

    size_t np = 124439808; // GPT-2 small parameter count
    float *p = rnd(np, -1, 1), *g = rnd(np, -1, 1), *m = rnd(np, 0, 0), *v = rnd(np, 0, 0);
    int step = 0;
    TIME("adamw_124M", vr_cpu_adamw(p, g, m, v, np, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.1f, ++step, 1.0f));
    return 0;
}
