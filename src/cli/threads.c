/* vram command: the environment the CPU backend needs (see vram/exec.h,
 * "threads of the CPU backend"). For the commands that compute, when they are
 * unset: OMP_WAIT_POLICY=passive (OpenMP threads sleep instead of spinning
 * after each loop) and OPENBLAS_THREAD_TIMEOUT=4 (OpenBLAS's idle threads poll
 * for 2^4 cycles, its minimum, instead of 2^28, before they sleep); then this binary
 * re-executes itself so that libgomp and OpenBLAS, which read them when they
 * load, see them. */
#define _DEFAULT_SOURCE /* setenv */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

void vr_cli_prepare_env(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "train") && strcmp(argv[1], "eval")))
        return;
    bool changed = false;
    if (!getenv("OMP_WAIT_POLICY"))
        changed |= setenv("OMP_WAIT_POLICY", "passive", 1) == 0;
    if (!getenv("OPENBLAS_THREAD_TIMEOUT"))
        changed |= setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1) == 0;
    if (changed)
        execv("/proc/self/exe", argv); /* returns only on failure: then run as we are */
}
