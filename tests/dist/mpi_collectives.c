/* The MPI engine with real processes: run under mpirun (ctest dist/mpi_np2, dist/mpi_np3). Every rank
 * fills its buffers with values that depend on its rank, and checks what each collective leaves:
 * all-reduce SUM and AVG in f32, bf16 and f16 (n = 1000, an odd n = 7, and n = 0), reduce onto rank
 * 1 % size, broadcast from the last rank (f32, i32, u8), sums and minima of host doubles, and the
 * communicator's life (a second communicator, MPI finalised with the last one, not restartable).
 * Prints "ok rank R" and exits 0, or names the first failing check and exits 1.
 *
 * The values are small multiples of powers of two, so every sum is exact in f32 and the expected result
 * is the f32 sum (divided by the size for AVG) rounded once to the buffer's dtype. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vram/convert.h"
#include "vram/dist.h"

static int rank = -1;

#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (!(cond)) {                                                \
            printf("FAIL rank %d: ", rank);                           \
            printf(__VA_ARGS__);                                      \
            printf(" (%s:%d) %s\n", __FILE__, __LINE__, vr_last_error()); \
            fflush(stdout);                                           \
            exit(1);                                                  \
        }                                                             \
    } while (0)

/* Rank r's value at i, for dtype dt (representable in dt). */
static float value(vr_dtype dt, int r, int64_t i)
{
    if (dt == VR_F32) return (float)(r + 1) * 0.5f * (float)(i % 13 + 1) - 3.0f;
    if (dt == VR_BF16) return (float)(r + 1) * (float)(i % 5 + 1) * (i % 2 ? -1.0f : 1.0f);
    return (float)(r + 1) * 0.25f * (float)(i % 7 + 1);
}

static void fill(vr_dtype dt, void *buf, int64_t n, int r)
{
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    for (int64_t i = 0; i < n; i++)
        f[i] = value(dt, r, i);
    vr_convert(dt, buf, VR_F32, f, (size_t)n);
    free(f);
}

/* The expected result at i of a SUM or AVG over `size` ranks, rounded to dt. */
static float expected(vr_dtype dt, int size, vr_comm_op op, int64_t i)
{
    float s = 0;
    for (int r = 0; r < size; r++)
        s += value(dt, r, i);
    if (op == VR_COMM_AVG)
        s /= (float)size;
    uint16_t h;
    float back = s;
    if (dt != VR_F32) {
        vr_convert(dt, &h, VR_F32, &s, 1);
        vr_convert(VR_F32, &back, dt, &h, 1);
    }
    return back;
}

static void check_result(const char *what, vr_dtype dt, const void *buf, int64_t n, int size, vr_comm_op op)
{
    float *got = malloc((size_t)(n ? n : 1) * sizeof *got);
    vr_convert(VR_F32, got, dt, buf, (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        float want = expected(dt, size, op, i);
        CHECK(got[i] == want, "%s %s %s n=%lld: [%lld] = %g, expected %g", what, vr_dtype_name(dt),
              op == VR_COMM_AVG ? "avg" : "sum", (long long)n, (long long)i, got[i], want);
    }
    free(got);
}

static void reductions(vr_comm *c)
{
    int size = vr_comm_size(c), root = 1 % size;
    const vr_dtype dts[] = {VR_F32, VR_BF16, VR_F16};
    const int64_t ns[] = {1000, 7, 0};
    void *buf = malloc(1000 * sizeof(float));
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 3; k++)
            for (int o = 0; o < 2; o++) {
                vr_dtype dt = dts[d];
                int64_t n = ns[k];
                vr_comm_op op = o ? VR_COMM_AVG : VR_COMM_SUM;
                fill(dt, buf, n, rank);
                CHECK(vr_comm_allreduce(c, n ? buf : NULL, n, dt, op, NULL) == VR_OK, "allreduce %s n=%lld",
                      vr_dtype_name(dt), (long long)n);
                check_result("allreduce", dt, buf, n, size, op);
                fill(dt, buf, n, rank);
                CHECK(vr_comm_reduce(c, buf, n, dt, op, root, NULL) == VR_OK, "reduce %s n=%lld", vr_dtype_name(dt),
                      (long long)n);
                if (rank == root)
                    check_result("reduce", dt, buf, n, size, op);
            }
    free(buf);
}

static void broadcasts(vr_comm *c)
{
    int size = vr_comm_size(c), root = size - 1;
    float f[7];
    int32_t i32[1000];
    uint8_t u8[7];
    for (int i = 0; i < 7; i++) {
        f[i] = (float)rank * 10.0f + (float)i;
        u8[i] = (uint8_t)(rank * 40 + i);
    }
    for (int i = 0; i < 1000; i++)
        i32[i] = rank * 100000 - i;
    CHECK(vr_comm_broadcast(c, f, 7, VR_F32, root, NULL) == VR_OK, "broadcast f32");
    CHECK(vr_comm_broadcast(c, i32, 1000, VR_I32, root, NULL) == VR_OK, "broadcast i32");
    CHECK(vr_comm_broadcast(c, u8, 7, VR_U8, root, NULL) == VR_OK, "broadcast u8");
    CHECK(vr_comm_broadcast(c, NULL, 0, VR_U8, root, NULL) == VR_OK, "broadcast n=0");
    for (int i = 0; i < 7; i++) {
        CHECK(f[i] == (float)root * 10.0f + (float)i, "broadcast f32 [%d] = %g", i, f[i]);
        CHECK(u8[i] == (uint8_t)(root * 40 + i), "broadcast u8 [%d] = %d", i, u8[i]);
    }
    for (int i = 0; i < 1000; i++)
        CHECK(i32[i] == root * 100000 - i, "broadcast i32 [%d] = %d", i, i32[i]);
}

static void host_values(vr_comm *c)
{
    int size = vr_comm_size(c);
    double v[3] = {rank, 1.0, rank * 0.5};
    CHECK(vr_comm_sum_host(c, v, 3) == VR_OK, "sum_host");
    double s = size * (size - 1) / 2.0;
    CHECK(v[0] == s && v[1] == size && v[2] == s * 0.5, "sum_host = %g %g %g", v[0], v[1], v[2]);
    double m[3] = {rank + 2.0, -rank, 5};
    CHECK(vr_comm_min_host(c, m, 3) == VR_OK, "min_host");
    CHECK(m[0] == 2 && m[1] == -(size - 1) && m[2] == 5, "min_host = %g %g %g", m[0], m[1], m[2]);
}

int main(void)
{
    CHECK(vr_comm_mpi_built(), "this vram was built without MPI");
    CHECK(vr_comm_mpi_launched(), "not started by an MPI launcher");
    vr_comm *c = NULL;
    CHECK(vr_comm_mpi(&c) == VR_OK, "vr_comm_mpi");
    rank = vr_comm_rank(c);
    int size = vr_comm_size(c);
    const char *env = getenv("OMPI_COMM_WORLD_SIZE");
    CHECK(!env || atoi(env) == size, "size %d, launcher says %s", size, env);
    CHECK(rank >= 0 && rank < size, "rank %d of %d", rank, size);
    CHECK(vr_comm_engine_of(c) == VR_COMM_MPI && !strcmp(vr_comm_engine_name(c), "mpi"), "engine");
    CHECK(vr_comm_own_bytes(c) == 0, "own bytes");

    /* a second communicator shares the world, and freeing it leaves MPI running */
    vr_comm *c2 = NULL;
    CHECK(vr_comm_mpi(&c2) == VR_OK && vr_comm_rank(c2) == rank && vr_comm_size(c2) == size, "second communicator");
    vr_comm_free(c2);

    reductions(c);
    broadcasts(c);
    host_values(c);
    CHECK(vr_comm_group_begin(c) == VR_OK && vr_comm_group_end(c) == VR_OK, "group");
    CHECK(vr_comm_broadcast(c, &size, 1, VR_I32, size, NULL) == VR_ERR_INVALID, "root out of range accepted");

    vr_comm_free(c);   /* the last one: MPI is finalised */
    c = NULL;
    CHECK(vr_comm_mpi(&c) == VR_ERR_UNSUPPORTED && !c && strstr(vr_last_error(), "finalized"),
          "vr_comm_mpi after finalize");
    printf("ok rank %d\n", rank);
    return 0;
}
