/* vram exec — threads of the CPU backend: OpenMP (the kernels' loops) and
 * OpenBLAS (its own pthread pool behind the matrix products). */
#define _DEFAULT_SOURCE /* strcasecmp */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "exec/exec_internal.h"

#ifdef VRAM_HAVE_OPENBLAS
void openblas_set_num_threads(int num_threads); /* cblas.h of OpenBLAS */
int openblas_get_num_threads(void);
#endif

void vr_exec_cpu_set_threads(int n)
{
    if (n < 1)
        return;
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
#ifdef VRAM_HAVE_OPENBLAS
    openblas_set_num_threads(n);
#endif
}

int vr_exec_cpu_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

bool vr_exec_cpu_wait_policy_ok(void)
{
    const char *p = getenv("OMP_WAIT_POLICY");
    return vr_exec_cpu_threads() <= 1 || (p && !strcasecmp(p, "passive"));
}
