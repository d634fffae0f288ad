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
 *   mpirun -np N    MPI's world: on the cpu device MPI's collectives (every sharding rule with real processes, in
 *                   CI); with --device cuda an NCCL world whose id rank 0 makes and MPI broadcasts, each rank on
 *                   the GPU of its local rank on its host (the launcher's OMPI_COMM_WORLD_LOCAL_RANK,
 *                   MPI_LOCALRANKID or SLURM_LOCALID), so the same command spans hosts (mpirun -H, srun)
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

/* The rank's index among the ranks on its host, from the launcher's environment (-1: it says none). */
static int local_rank(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "PMIX_LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        long long v = 0;
        const char *e = getenv(vars[i]);
        if (e && !vr_parse_int(e, vars[i], 0, VR_MAX_RANKS - 1, &v))
            return (int)v;
    }
    return -1;
}

/* mpirun with --device cuda: MPI's world (in *boot) carries rank 0's NCCL id to every rank, which then joins the
 * NCCL world on the GPU of its local rank. A rank 0 that cannot make an id sends an empty one: every rank then
 * fails with a message instead of waiting. */
static int nccl_over_mpi(const char *cmd, const char **device, vr_cli_dist *d)
{
    int r = vr_comm_rank(d->boot), w = vr_comm_size(d->boot), local = local_rank();
    char id[VR_COMM_ID_HEX] = {0}, why[512] = "";
    snprintf(d->device, sizeof d->device, "cuda:%d", local >= 0 ? local : r);
    *device = d->device;
    if (r == 0 && vr_comm_nccl_id(id)) {
        snprintf(why, sizeof why, "%s", vr_last_error());
        id[0] = 0;
    }
    if (vr_comm_broadcast(d->boot, id, VR_COMM_ID_HEX, VR_U8, 0, NULL))
        return vr_cli_fail(cmd, 1, "mpirun: rank %d: %s", r, vr_last_error());
    if (!id[0])
        return vr_cli_fail(cmd, 1, "mpirun --device cuda: rank 0 could not make an NCCL id%s%s", why[0] ? ": " : "",
                           why);
    if (vr_device_open(*device, &d->dev) || vr_device_use(d->dev) || vr_comm_nccl(id, r, w, &d->comm))
        return vr_cli_fail(cmd, 1, "mpirun: rank %d of %d on %s: %s", r, w, *device, vr_last_error());
    return 0;
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
        bool gpu = *device && !strncmp(*device, "cuda", 4);
        if (*device && !gpu && strncmp(*device, "cpu", 3))
            return vr_cli_fail(cmd, 2, "--device: under mpirun the ranks run on cpu (MPI's collectives) or cuda "
                               "(NCCL's)");
        if (vr_comm_mpi(gpu ? &d->boot : &d->comm))
            return vr_cli_fail(cmd, 1, "mpirun: %s", vr_last_error());
        int n = vr_comm_size(gpu ? d->boot : d->comm);
        if (s->world >= 1 && s->world != n) {
            vr_cli_dist_end(d);
            return vr_cli_fail(cmd, 2, "--gpus %d: mpirun started %d ranks", s->world, n);
        }
        int rc = gpu ? nccl_over_mpi(cmd, device, d) : 0;
        if (rc) {
            vr_cli_dist_end(d);
            return rc;
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
    vr_comm_free(d->boot); /* MPI's world, after NCCL's */
    if (d->dev)
        vr_device_close(d->dev);
    memset(d, 0, sizeof *d);
}
