/* vram command: the environment the CPU backend needs (see vram/exec.h,
 * "threads of the CPU backend"): for the commands that compute, when
 * OMP_WAIT_POLICY is not set, set it to passive and re-execute this binary so
 * that libgomp, which reads it at load time, sees it. */
#define _DEFAULT_SOURCE /* setenv */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

void vr_cli_prepare_env(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "train") && strcmp(argv[1], "eval")) || getenv("OMP_WAIT_POLICY"))
        return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0)
        return;
    execv("/proc/self/exe", argv); /* returns only on failure: then run as we are */
}
