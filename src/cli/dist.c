/* vram command — data parallel ranks: `--gpus N` starts one process per GPU on this host by itself; under
 * mpirun (or Slurm's PMI) each process is a rank of MPI's world.
 *
 *   --gpus 1        this process is the only rank: an NCCL world of one, on cuda:0 (every collective runs)
 *   --gpus N > 1    this process is the launcher: it makes an NCCL id (serving NCCL's bootstrap), starts N
 *                   copies of the command with VRAM_DIST_RANK/WORLD/ID in their environment (and NVLink
 *                   multicast off: NCCL_NVLS_ENABLE=0 unless set), waits for them, and when one fails stops
 *                   the others (SIGTERM, then SIGKILL after 10 s) and exits with its status: a dead or stuck
 *                   rank never leaves the others hanging in a collective
 *   a child         rank VRAM_DIST_RANK on cuda:RANK, joins the NCCL world
 *   mpirun -np N    MPI's world, on the cpu device (every sharding rule with real processes, in CI)
 *
 * Rank 0 prints; the other ranks run quietly. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "vram/util.h"

/* Stops every child still running: SIGTERM, then SIGKILL for those alive after 10 s. */
static void stop_all(pid_t *pids, int n)
{
    for (int r = 0; r < n; r++)
        if (pids[r] > 0)
            kill(pids[r], SIGTERM);
    for (int t = 0; t < 100; t++) {
        int alive = 0;
        for (int r = 0; r < n; r++)
            if (pids[r] > 0) {
                if (waitpid(pids[r], NULL, WNOHANG) == pids[r])
                    pids[r] = 0;
                else
                    alive++;
            }
        if (!alive)
            return;
        nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    for (int r = 0; r < n; r++)
        if (pids[r] > 0) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], NULL, 0);
        }
}

static int launch(const char *cmd, int argc, char **argv, int world)
{
    char id[VR_COMM_ID_HEX];
    if (vr_comm_nccl_id(id))
        return vr_cli_fail(cmd, 1, "--gpus %d: %s", world, vr_last_error());
    char **args = calloc((size_t)argc + 2, sizeof *args);
    pid_t *pids = calloc((size_t)world, sizeof *pids);
    if (!args || !pids) {
        free(args);
        free(pids);
        return vr_cli_fail(cmd, 1, "out of host memory");
    }
    args[0] = "vram";
    for (int i = 0; i < argc; i++)
        args[i + 1] = argv[i];
    fflush(stdout);
    fflush(stderr);
    int rc = 0;
    for (int r = 0; r < world && !rc; r++) {
        pid_t p = fork();
        if (p == 0) {
            char v[32];
            snprintf(v, sizeof v, "%d", r);
            setenv("VRAM_DIST_RANK", v, 1);
            snprintf(v, sizeof v, "%d", world);
            setenv("VRAM_DIST_WORLD", v, 1);
            setenv("VRAM_DIST_ID", id, 1);
            setenv("NCCL_NVLS_ENABLE", "0", 0);
            setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 0);
            setenv("NVSHMEM_DISABLE_NVLS", "1", 0);
            execv("/proc/self/exe", args);
            fprintf(stderr, "vram %s: rank %d: cannot start /proc/self/exe\n", cmd, r);
            _exit(127);
        }
        if (p < 0)
            rc = vr_cli_fail(cmd, 1, "--gpus %d: cannot start rank %d", world, r);
        pids[r] = p;
    }
    for (int left = rc ? 0 : world; left > 0 && !rc; left--) {
        int status = 0;
        pid_t p = wait(&status);
        if (p < 0)
            break;
        int r = 0;
        while (r < world && pids[r] != p)
            r++;
        if (r < world)
            pids[r] = 0;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
            continue;
        rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
        fprintf(stderr, "vram %s: rank %d %s %d; stopping the other ranks\n", cmd, r,
                WIFEXITED(status) ? "exited with status" : "was killed by signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
    stop_all(pids, world);
    free(args);
    free(pids);
    return rc;
}

int vr_cli_dist_setup(const char *cmd, int argc, char **argv, vr_step_config *s, const char **device,
                      vr_cli_dist *d)
{
    memset(d, 0, sizeof *d);
    const char *child = getenv("VRAM_DIST_RANK");
    bool mpi = vr_comm_mpi_launched();
    if (!child && !mpi && s->world < 1)
        return -1; /* not distributed */
    if (mpi) {
        if (*device && strncmp(*device, "cpu", 3))
            return vr_cli_fail(cmd, 2, "--device: under mpirun the ranks run on the cpu device (MPI's collectives); "
                               "for GPUs use --gpus N");
        if (vr_comm_mpi(&d->comm))
            return vr_cli_fail(cmd, 1, "mpirun: %s", vr_last_error());
        if (s->world >= 1 && s->world != vr_comm_size(d->comm)) {
            int n = vr_comm_size(d->comm);
            vr_comm_free(d->comm);
            d->comm = NULL;
            return vr_cli_fail(cmd, 2, "--gpus %d: mpirun started %d ranks", s->world, n);
        }
    } else if (!child) {
        if (*device && strncmp(*device, "cuda", 4))
            return vr_cli_fail(cmd, 2, "--gpus: ranks on GPUs need --device cuda (CPU ranks: mpirun -np N vram %s "
                               "--device cpu)", cmd);
        if (s->world > 1) {
            d->launcher = true;
            d->status = launch(cmd, argc, argv, s->world);
            return 0;
        }
        char id[VR_COMM_ID_HEX];
        *device = "cuda:0";
        if (vr_device_open(*device, &d->dev) || vr_device_use(d->dev) || vr_comm_nccl_id(id) ||
            vr_comm_nccl(id, 0, 1, &d->comm))
            return vr_cli_fail(cmd, 1, "--gpus 1: %s", vr_last_error());
    } else {
        long long r = 0, w = 0;
        const char *id = getenv("VRAM_DIST_ID"), *ws = getenv("VRAM_DIST_WORLD");
        if (vr_parse_int(child, "VRAM_DIST_RANK", 0, VR_MAX_RANKS - 1, &r) ||
            vr_parse_int(ws ? ws : "", "VRAM_DIST_WORLD", 1, VR_MAX_RANKS, &w) || r >= w || !id)
            return vr_cli_fail(cmd, 2, "VRAM_DIST_RANK/WORLD/ID: not a rank of a world (set by vram --gpus only)");
        snprintf(d->device, sizeof d->device, "cuda:%lld", r);
        *device = d->device;
        if (vr_device_open(*device, &d->dev) || vr_device_use(d->dev) || vr_comm_nccl(id, (int)r, (int)w, &d->comm))
            return vr_cli_fail(cmd, 1, "rank %lld: %s", r, vr_last_error());
    }
    s->world = vr_comm_size(d->comm);
    s->rank = vr_comm_rank(d->comm);
    return 0;
}

void vr_cli_dist_end(vr_cli_dist *d)
{
    vr_comm_free(d->comm);
    if (d->dev)
        vr_device_close(d->dev);
    memset(d, 0, sizeof *d);
}
