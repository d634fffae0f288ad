/* vram — the dynamic quantization maps of 8-bit optimizer state (Dettmers et al. 2021, as bitsandbytes'
 * create_dynamic_map(signed, max_exponent_bits=7, total_bits=8)): for each exponent e = 0..6 the
 * midpoints of 2^e + 1 (signed; 2^(e+1) + 1 unsigned) points spaced evenly over [0.1, 1], scaled by
 * 10^(e-6), with their negatives when signed; then 0 and 1; 256 values sorted. Computed in double,
 * stored as float. */
#include "kernels/cpu/kernels_cpu.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void vr_qmap_dynamic(int is_signed, float out[256])
{
    double d[256];
    int n = 0;
    for (int e = 0; e < 7; e++) {
        int points = is_signed ? (1 << e) + 1 : (1 << (e + 1)) + 1;
        double scale = pow(10.0, e - 6), step = 0.9 / (points - 1);
        for (int k = 0; k + 1 < points; k++) {
            double hi = k + 2 == points ? 1.0 : 0.1 + step * (k + 1); /* the last point exactly 1 */
            double mid = ((0.1 + step * k) + hi) / 2.0;
            d[n++] = scale * mid;
            if (is_signed)
                d[n++] = -scale * mid;
        }
    }
    d[n++] = 0.0;
    d[n++] = 1.0; /* n == 256 for both */
    qsort(d, (size_t)n, sizeof *d, by_value);
    for (int i = 0; i < 256; i++)
        out[i] = (float)d[i];
}

static float maps[2][256];
static pthread_once_t maps_once = PTHREAD_ONCE_INIT;

static void maps_init(void)
{
    vr_qmap_dynamic(0, maps[0]);
    vr_qmap_dynamic(1, maps[1]);
}

const float *vr_qmap(int is_signed)
{
    pthread_once(&maps_once, maps_init);
    return maps[is_signed ? 1 : 0];
}
