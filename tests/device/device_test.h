/* Helpers shared by the device tests. */
#ifndef VRAM_TEST_DEVICE_H
#define VRAM_TEST_DEVICE_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vram/device.h"

/* Opens spec, failing the test with the library's message if it cannot. */
static inline vr_device *open_or_fail(const char *spec)
{
    vr_device *dev = NULL;
    vr_status st = vr_device_open(spec, &dev);
    if (st != VR_OK)
        fail_msg("vr_device_open(%s): %s", spec, vr_last_error());
    return dev;
}

/* Runs fn(dev) in a child process (stderr silenced) and reports whether it
 * died of SIGABRT, i.e. the device caught a misuse. */
static inline int aborts(const char *spec, void (*fn)(vr_device *))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGABRT, SIG_DFL);  /* cmocka catches it in the parent's handlers */
        if (!freopen("/dev/null", "w", stderr))
            _exit(3);
        vr_device *dev = NULL;
        if (vr_device_open(spec, &dev) != VR_OK)
            _exit(2);
        fn(dev);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

#endif
