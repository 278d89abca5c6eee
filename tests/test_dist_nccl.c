/* test_dist_nccl.c — collectives and DDP of CUDA tensors through NCCL
   (src/api/dist.h), on the CUDA-on-CPU emulator (tests/cuda_emu/, whose NCCL
   runs ranks as processes or threads over shared memory).

   Run alone, it tests one process: the TCP rendezvous's errors (no
   MASTER_PORT, a bad one, rank 0 that never comes, a rank that never comes,
   mismatched world sizes), the one-rank NCCL path (collectives and DDP equal
   to plain training), and the emulator's NCCL with ranks as threads
   (collectives, and a peer that never comes: an error after the timeout,
   not a hang). Run as two ranks — tests/test_dist_nccl.sh starts them
   torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT,
   no MPI), or, built with -DGPUDL_MPI, under mpirun -np 2 — each rank on its
   emulated device cuda:(local rank): the collectives against the values
   every rank can compute (and, with MPI, against MPI's results on CPU
   tensors), DDP against one process on the whole batch, and a rank that
   leaves early: the other's barrier fails within the timeout.

   Build: see tests/dist.mk (emulator objects; -DGPUDL_MPI with mpicc); on a GPU
       nvcc -O2 -arch=sm_90 -DGPUDL_CUDA tests/test_dist_nccl.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl
   (one GPU: the one-process tests, with NCCL over one rank; two GPUs: the two ranks too). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>
#include <time.h>

#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include "ddp_setup.h"
#ifdef GPUDL_EMU
#include <nccl.h>
#include "emu_api.h"
#endif

static int g_ranks; /* 2: this process is one of two ranks */

/* ---- deterministic data each rank can compute for every rank ---- */

static float val(int rank, int64_t i) { return (float)sin(0.001 * (double)i + rank) * (float)(rank + 1); }

static gdl_tensor *rank_data(int rank, int64_t n, gdl_device dev) {
    float *a = (float *)malloc(sizeof(float) * (size_t)n);
    gdl_tensor *t;
    int64_t i;
    for (i = 0; i < n; i++) a[i] = val(rank, i);
    t = gdl_from_array(a, 1, &n, GDL_F32, dev);
    free(a);
    return t;
}

/* t's values on the host (a copy, freed by the caller) */
static float *host(gdl_tensor *t) {
    gdl_tensor *h = gdl_to(t, gdl_cpu());
    float *a;
    if (!h) return NULL;
    a = (float *)malloc(sizeof(float) * (size_t)h->numel);
    memcpy(a, h->data, sizeof(float) * (size_t)h->numel);
    gdl_free(h);
    return a;
}

/* ---- DDP: two ranks on half a batch each (or one rank on all of it) against one process ---- */

/* arg: micro-batches per rank and step (no_sync on all but the last); tests/ddp_setup.h */
TEST ddp_cuda_equals_one_process(void *arg) {
    ASSERT(gdl_dist_device().type == GDL_DEVICE_CUDA);
    return ddp_steps_case(gdl_dist_device(), *(const int *)arg, 20);
}

/* ---- one process ---- */

#ifndef GPUDL_MPI
static const char *const all_vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                                       "GPUDL_DIST_TIMEOUT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                                       "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST",
                                       "SLURM_JOB_ID", "PET_MASTER_ADDR", "PET_MASTER_PORT"};

static void clear_env(void) {
    size_t i;
    for (i = 0; i < sizeof all_vars / sizeof *all_vars; i++) unsetenv(all_vars[i]);
}

/* a TCP port nobody listens at (the kernel's pick, released) */
static int free_port(void) {
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(0x7f000001u);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

static void set_rank(int rank, int world, int port) {
    char b[3][16];
    clear_env();
    snprintf(b[0], sizeof b[0], "%d", rank);
    snprintf(b[1], sizeof b[1], "%d", world);
    snprintf(b[2], sizeof b[2], "%d", port);
    setenv("RANK", b[0], 1);
    setenv("WORLD_SIZE", b[1], 1);
    setenv("LOCAL_RANK", b[0], 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    if (port) setenv("MASTER_PORT", b[2], 1);
}

/* gdl_dist_init fails with `needle` in its error within `within` seconds */
static int init_fails(const char *needle, double within, char *msg, size_t len) {
    double t0 = gdl_now(), dt;
    int rc = gdl_dist_init();
    dt = gdl_now() - t0;
    if (rc == 0) {
        gdl_dist_shutdown();
        snprintf(msg, len, "gdl_dist_init succeeded; expected an error naming %s", needle);
        return 0;
    }
    if (!strstr(gdl_last_error(), needle)) {
        snprintf(msg, len, "the error '%.300s' does not name %s", gdl_last_error(), needle);
        return 0;
    }
    if (dt > within) {
        snprintf(msg, len, "the error came after %.1f s (at most %.1f expected): %.300s", dt, within, gdl_last_error());
        return 0;
    }
    return 1;
}

/* Runs first, before the emulator has any stream threads (one case forks). */
TEST rendezvous_errors(void) {
    char msg[600], want[160];
    int port = free_port(), st = 0, i, rc;
    pid_t child, kids[2];
    if (gdl_cuda_device_count() < 1) SKIPm("no GPU: a job of 2 processes has no transport without MPI");
    ASSERT(port > 0);
    set_rank(1, 2, 0); /* no MASTER_PORT */
    if (!init_fails("MASTER_PORT is not set", 1, msg, sizeof msg)) FAILm(msg);
    set_rank(1, 2, 0);
    setenv("MASTER_PORT", "http", 1);
    if (!init_fails("MASTER_PORT='http' is not a port number", 1, msg, sizeof msg)) FAILm(msg);
    set_rank(1, 2, 0);
    unsetenv("MASTER_ADDR");
    setenv("MASTER_PORT", "29500", 1);
    if (!init_fails("MASTER_ADDR is not set", 1, msg, sizeof msg)) FAILm(msg);
    set_rank(1, 2, port);
    setenv("GPUDL_DIST_TIMEOUT", "soon", 1);
    if (!init_fails("GPUDL_DIST_TIMEOUT='soon'", 1, msg, sizeof msg)) FAILm(msg);
    /* rank 0 never comes: rank 1 retries, then gives up naming where it looked */
    set_rank(1, 2, port);
    setenv("GPUDL_DIST_TIMEOUT", "1", 1);
    snprintf(want, sizeof want, "rank 1 could not reach rank 0 at MASTER_ADDR=127.0.0.1 MASTER_PORT=%d within 1 s", port);
    if (!init_fails(want, 5, msg, sizeof msg)) FAILm(msg);
    /* under srun without MASTER_ADDR: the first host of the step's node list (else the job's), a port from
       the job's id; a bad list is named */
    clear_env();
    setenv("SLURM_PROCID", "1", 1), setenv("SLURM_NTASKS", "2", 1), setenv("SLURM_LOCALID", "1", 1);
    setenv("GPUDL_DIST_TIMEOUT", "1", 1);
    setenv("SLURM_JOB_NODELIST", "node[01-02", 1);
    if (!init_fails("MASTER_ADDR is not set and cannot come from SLURM_JOB_NODELIST: host list 'node[01-02': ",
                    1, msg, sizeof msg)) FAILm(msg);
    setenv("SLURM_STEP_NODELIST", "localhost,node[2-3]", 1);
    snprintf(want, sizeof want, "%d", port);
    setenv("MASTER_PORT", want, 1);
    snprintf(want, sizeof want, "rank 1 could not reach rank 0 at MASTER_ADDR=localhost MASTER_PORT=%d", port);
    if (!init_fails(want, 5, msg, sizeof msg)) FAILm(msg);
    unsetenv("MASTER_PORT");
    setenv("SLURM_JOB_ID", "123457", 1); /* 20000 + 123457 mod 20000 */
    if (!init_fails("rank 1 could not reach rank 0 at MASTER_ADDR=localhost MASTER_PORT=23457", 5, msg, sizeof msg))
        FAILm(msg);
    /* Kubeflow's PET_MASTER_ADDR / PET_MASTER_PORT */
    set_rank(1, 2, 0);
    unsetenv("MASTER_ADDR");
    setenv("PET_MASTER_ADDR", "127.0.0.1", 1);
    snprintf(want, sizeof want, "%d", port);
    setenv("PET_MASTER_PORT", want, 1);
    setenv("GPUDL_DIST_TIMEOUT", "1", 1);
    snprintf(want, sizeof want, "rank 1 could not reach rank 0 at MASTER_ADDR=127.0.0.1 MASTER_PORT=%d", port);
    if (!init_fails(want, 5, msg, sizeof msg)) FAILm(msg);
    /* rank 1 never comes: rank 0 gives up, naming the missing rank */
    set_rank(0, 2, port);
    setenv("GPUDL_DIST_TIMEOUT", "1", 1);
    if (!init_fails("1 of 2 ranks came; missing: rank 1", 5, msg, sizeof msg)) FAILm(msg);
    /* world sizes that disagree: both sides say so */
    fflush(NULL);
    if ((child = fork()) == 0) {
        int ok;
        set_rank(1, 3, port);
        setenv("GPUDL_DIST_TIMEOUT", "inf", 1); /* no limit: waits in pieces, no overflow */
        ok = gdl_dist_init() < 0 && strstr(gdl_last_error(), "refused rank 1: it says WORLD_SIZE=2, this rank 3");
        if (!ok) fprintf(stderr, "child: %s\n", gdl_last_error());
        _exit(ok ? 0 : 1);
    }
    ASSERT(child > 0);
    set_rank(0, 2, port); /* rank 0 drops it, waits on for a rank 1 of its world, and names it at the end */
    setenv("GPUDL_DIST_TIMEOUT", "2", 1);
    if (!init_fails("knows the token but says WORLD_SIZE=3, rank 0 says 2", 3, msg, sizeof msg)) FAILm(msg);
    ASSERT_EQ(child, waitpid(child, &st, 0));
    ASSERTm("the rank with the other world size did not get its error", WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* of 3 ranks, rank 1 comes, goes and comes again (restarted): rank 0 answers its newer connection */
    fflush(NULL);
    port = free_port();
    for (i = 1; i <= 2; i++)
        if ((kids[i - 1] = fork()) == 0) {
            int ok = 1;
            set_rank(i, 3, port);
            setenv("GPUDL_DIST_TIMEOUT", "10", 1);
            if (i == 1) { /* the first coming: rank 1 gives up after 0.3 s (no id yet), then comes again */
                int k;
                setenv("GPUDL_DIST_TIMEOUT", "0.3", 1);
                for (k = 0, ok = 0; k < 20 && !ok; k++) /* until rank 0 listens and takes it */
                    ok = gdl_dist_init() < 0 && strstr(gdl_last_error(), "sent no id within the 0.3 s");
                if (!ok) fprintf(stderr, "rank 1, the first time: %s\n", gdl_last_error());
                setenv("GPUDL_DIST_TIMEOUT", "10", 1);
            } else {
                nanosleep(&(struct timespec){0, 500000000}, NULL); /* rank 2 last */
            }
            ok = ok && gdl_dist_init() == 0 && gdl_dist_rank() == i;
            if (!ok) fprintf(stderr, "rank %d: %s\n", i, gdl_last_error());
            gdl_dist_shutdown();
            _exit(ok ? 0 : 1);
        }
    ASSERT(kids[0] > 0 && kids[1] > 0);
    set_rank(0, 3, port);
    setenv("GPUDL_DIST_TIMEOUT", "10", 1);
    rc = gdl_dist_init();
    if (rc < 0) snprintf(msg, sizeof msg, "rank 0: %.500s", gdl_last_error());
    gdl_dist_shutdown();
    for (i = 0; i < 2; i++) {
        ASSERT_EQ(kids[i], waitpid(kids[i], &st, 0));
        ASSERTm("a rank of 3 (one restarted) failed its gdl_dist_init", WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    if (rc < 0) FAILm(msg);
    clear_env();
    ASSERT(!gdl_dist_is_initialized());
    PASS();
}

/* One process: NCCL over one rank. The collectives are the identity (through NCCL all the same), their
   errors; DDP equals plain training. */
TEST one_rank_nccl(void) {
    gdl_device dev = gdl_cuda(0);
    int64_t n = 1000, s2[1] = {2};
    gdl_tensor *t, *big, *cpu;
    float *a;
    int64_t i;
    static const int one = 1;
    if (gdl_cuda_device_count() < 1) SKIPm("no GPU: NCCL has nothing to run on");
    clear_env();
    ASSERT_EQ(0, gdl_dist_init());
    ASSERT_EQ(1, gdl_dist_world_size());
    t = rank_data(0, n, dev);
    ASSERT_EQ(0, gdl_dist_all_reduce(t, GDL_AVG));
    ASSERT_EQ(0, gdl_dist_broadcast(t, 0));
    big = gdl_zeros(1, &n, GDL_F32, dev);
    ASSERT_EQ(0, gdl_dist_all_gather(big, t));
    ASSERT_EQ(0, gdl_dist_reduce_scatter(t, big, GDL_SUM));
    ASSERT_NOT_NULL(a = host(t));
    for (i = 0; i < n; i++)
        if (a[i] != val(0, i)) FAILf("[%lld]: %g, expected %g", (long long)i, a[i], val(0, i));
    free(a);
    ASSERT_EQ(-1, gdl_dist_broadcast(t, 1));
    ASSERT_CONTAINS(gdl_last_error(), "root 1 is not a rank");
    cpu = gdl_zeros(1, &n, GDL_F32, gdl_cpu());
    ASSERT_EQ(-1, gdl_dist_all_gather(cpu, t));
    ASSERT_CONTAINS(gdl_last_error(), "out is on cpu, in on cuda:0: one device");
    if (gdl_cuda_device_count() > 1) { /* one communicator per process, on one device */
        gdl_tensor *other = gdl_zeros(1, s2, GDL_F32, gdl_cuda(1));
        ASSERT_EQ(-1, gdl_dist_all_reduce(other, GDL_SUM));
        ASSERT_CONTAINS(gdl_last_error(), "communicator is on cuda:0, the tensor on cuda:1");
        gdl_free(other);
    }
    ASSERT_EQ(0, gdl_dist_barrier());
    gdl_free(t), gdl_free(big), gdl_free(cpu);
    CHECK_CALL(ddp_cuda_equals_one_process((void *)&one));
    gdl_dist_shutdown();
    PASS();
}

#ifdef GPUDL_EMU
/* The emulator's NCCL with two ranks as threads of this process, each on its device. */
typedef struct rank_thread {
    int rank, ok;
    ncclUniqueId id;
    int collective; /* 0: this rank joins the communicator and then never calls the collective */
    int count;      /* elements it reduces (3; another count on one rank is a mismatch) */
    double seconds;
    ncclResult_t async;
    char why[200];
} rank_thread;

static void *rank_main(void *arg) {
    rank_thread *R = (rank_thread *)arg;
    ncclComm_t c;
    cudaStream_t s;
    float h[3], *d = NULL;
    double t0;
    cudaSetDevice(R->rank);
    if (ncclCommInitRank(&c, 2, R->id, R->rank) != ncclSuccess) {
        snprintf(R->why, sizeof R->why, "ncclCommInitRank: %s", gdl_emu_last_diagnostic());
        return NULL;
    }
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaMalloc((void **)&d, sizeof h);
    h[0] = (float)R->rank + 1, h[1] = 10, h[2] = -3;
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    t0 = gdl_now();
    if (R->collective) {
        ncclAllReduce(d, d, (size_t)R->count, ncclFloat32, ncclSum, c, s);
        cudaStreamSynchronize(s);
    }
    R->seconds = gdl_now() - t0;
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    ncclCommGetAsyncError(c, &R->async);
    R->ok = R->async == ncclSuccess && R->collective ? h[0] == 3 && h[1] == 20 && h[2] == -6
                                                     : h[0] == (float)R->rank + 1 && h[1] == 10; /* untouched */
    if (!R->ok) snprintf(R->why, sizeof R->why, "rank %d: %g %g %g, async %d", R->rank, h[0], h[1], h[2], (int)R->async);
    cudaFree(d);
    cudaStreamDestroy(s);
    if (R->async == ncclSuccess) ncclCommDestroy(c);
    else ncclCommAbort(c);
    return NULL;
}

TEST emulator_ranks_as_threads(void) {
    rank_thread R[2];
    pthread_t th[2];
    int k, pass;
    if (gdl_cuda_device_count() < 2) SKIPm("two emulated devices (GPUDL_EMU_DEVICES=2)");
    /* 0: both reduce; 1: rank 1 never calls, rank 0 times out; 2: the ranks' counts differ */
    for (pass = 0; pass < 3; pass++) {
        memset(R, 0, sizeof R);
        ASSERT_EQ(ncclSuccess, ncclGetUniqueId(&R[0].id));
        R[1].id = R[0].id;
        gdl_emu_nccl_timeout(pass ? 0.5 : 0);
        for (k = 0; k < 2; k++) {
            R[k].rank = k;
            R[k].collective = !(pass == 1 && k == 1);
            R[k].count = pass == 2 && k == 1 ? 2 : 3;
            ASSERT_EQ(0, pthread_create(&th[k], NULL, rank_main, &R[k]));
        }
        for (k = 0; k < 2; k++) pthread_join(th[k], NULL);
        gdl_emu_nccl_timeout(0);
        for (k = 0; k < 2; k++)
            if (!R[k].ok) FAILf("pass %d: %s", pass, R[k].why);
        if (pass == 1) {
            ASSERT_EQ(ncclRemoteError, R[0].async);
            ASSERT_LT(R[0].seconds, 5.0);
            ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "a rank never arrived");
        }
        if (pass == 2) { /* both see it, neither output changes */
            ASSERT_EQ(ncclInvalidUsage, R[0].async);
            ASSERT_EQ(ncclInvalidUsage, R[1].async);
            ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "does not match");
        }
    }
    PASS();
}
#else
TEST emulator_ranks_as_threads(void) { SKIPm("the emulator's own NCCL test"); }
#endif

SUITE(one_process) {
    RUN_TEST(rendezvous_errors);
    RUN_TEST(one_rank_nccl);
    RUN_TEST(emulator_ranks_as_threads);
}
#endif

/* ---- two ranks ---- */

TEST collectives_cuda(void) {
    enum { N = 300001 }; /* > the emulator's 1 MiB round: several rounds, the last one short */
    int r = gdl_dist_rank(), W = gdl_dist_world_size();
    gdl_device dev = gdl_dist_device();
    int64_t n = N, s2[1] = {2}, s4[1] = {4}, i;
    float *got, fv[2];
    int32_t iv[2];
    gdl_tensor *t, *big, *ti, *in, *out;
    ASSERT_EQ(2, W);
    ASSERT(gdl_device_equal(dev, gdl_cuda(gdl_dist_local_rank())));
    /* all-reduce, sum and mean, of a buffer larger than a round */
    t = rank_data(r, n, dev);
    ASSERT_EQ(0, gdl_dist_all_reduce(t, GDL_SUM));
    ASSERT_NOT_NULL(got = host(t));
    for (i = 0; i < n; i++)
        if (got[i] != val(0, i) + val(1, i)) FAILf("sum [%lld]: %.9g, expected %.9g", (long long)i, got[i], val(0, i) + val(1, i));
    free(got);
    gdl_free(t);
    t = rank_data(r, n, dev);
    ASSERT_EQ(0, gdl_dist_all_reduce(t, GDL_AVG));
    ASSERT_NOT_NULL(got = host(t));
    for (i = 0; i < n; i++)
        if (got[i] != (val(0, i) + val(1, i)) / 2) FAILf("mean [%lld]: %.9g", (long long)i, got[i]);
    free(got);
#ifdef GPUDL_MPI
    { /* the same through MPI on CPU tensors: the same bits */
        gdl_tensor *c = rank_data(r, n, gdl_cpu());
        ASSERT_EQ(0, gdl_dist_all_reduce(c, GDL_AVG));
        ASSERT_NOT_NULL(got = host(t));
        ASSERT_EQ(0, memcmp(got, c->data, sizeof(float) * (size_t)n));
        free(got);
        gdl_free(c);
    }
#endif
    /* all-gather of the large buffer: rank order */
    gdl_free(t);
    t = rank_data(r, n, dev);
    big = gdl_zeros(1, (int64_t[1]){2 * n}, GDL_F32, dev);
    ASSERT_EQ(0, gdl_dist_all_gather(big, t));
    ASSERT_NOT_NULL(got = host(big));
    for (i = 0; i < 2 * n; i++)
        if (got[i] != val((int)(i / n), i % n)) FAILf("all_gather [%lld]: %.9g", (long long)i, got[i]);
    free(got);
    /* reduce-scatter of it: rank r's half of the sum */
    gdl_free(big);
    big = gdl_zeros(1, (int64_t[1]){2 * n}, GDL_F32, dev);
    {
        float *a = (float *)malloc(sizeof(float) * (size_t)(2 * n));
        int64_t m = 2 * n;
        for (i = 0; i < 2 * n; i++) a[i] = val(r, i);
        gdl_free(big);
        big = gdl_from_array(a, 1, &m, GDL_F32, dev);
        free(a);
    }
    ASSERT_EQ(0, gdl_dist_reduce_scatter(t, big, GDL_SUM));
    ASSERT_NOT_NULL(got = host(t));
    for (i = 0; i < n; i++)
        if (got[i] != val(0, r * n + i) + val(1, r * n + i)) FAILf("reduce_scatter [%lld]: %.9g", (long long)i, got[i]);
    free(got);
    /* small ones: i32 sums, broadcast from rank 1, the mean refused for integers */
    iv[0] = r, iv[1] = 5;
    ti = gdl_from_array(iv, 1, s2, GDL_I32, dev);
    ASSERT_EQ(0, gdl_dist_all_reduce(ti, GDL_SUM));
    {
        gdl_tensor *h = gdl_to(ti, gdl_cpu());
        ASSERT_EQ(1, ((int32_t *)h->data)[0]);
        ASSERT_EQ(10, ((int32_t *)h->data)[1]);
        gdl_free(h);
    }
    ASSERT_EQ(-1, gdl_dist_all_reduce(ti, GDL_AVG));
    fv[0] = (float)(7 * r), fv[1] = -1;
    in = gdl_from_array(fv, 1, s2, GDL_F32, dev);
    ASSERT_EQ(0, gdl_dist_broadcast(in, 1));
    ASSERT_NOT_NULL(got = host(in));
    ASSERT(got[0] == 7 && got[1] == -1);
    free(got);
    gdl_free(in);
    {
        float rs[4] = {1, 2, 3, 4};
        in = gdl_from_array(rs, 1, s4, GDL_F32, dev);
    }
    gdl_mul_scalar_(in, r + 1);
    out = gdl_zeros(1, s2, GDL_F32, dev);
    ASSERT_EQ(0, gdl_dist_reduce_scatter(out, in, GDL_AVG));
    ASSERT_NOT_NULL(got = host(out));
    ASSERT(got[0] == 1.5f * (float)(2 * r + 1) && got[1] == 1.5f * (float)(2 * r + 2));
    free(got);
#ifndef GPUDL_MPI
    { /* CPU tensors need MPI, which this build lacks */
        gdl_tensor *c = gdl_zeros(1, s2, GDL_F32, gdl_cpu());
        ASSERT_EQ(-1, gdl_dist_all_reduce(c, GDL_SUM));
        ASSERT_CONTAINS(gdl_last_error(), "-DGPUDL_MPI");
        gdl_free(c);
    }
#endif
    ASSERT_EQ(0, gdl_dist_barrier());
    gdl_free(t), gdl_free(big), gdl_free(ti), gdl_free(in), gdl_free(out);
    PASS();
}

/* gdl_fit under DDP on CUDA, each rank its shard (batch 4), equals gdl_fit in one process on the whole
   data (batch 8): the weights, and the epoch figures summed over the ranks (through NCCL without MPI). */
TEST fit_under_ddp_cuda(void) { return ddp_fit_case(gdl_dist_device()); }

/* A parameter the forward does not use gets its gradient from gdl_ddp_backward (the mean of zeros) in the
   optimizer's flat block, as gdl_backward gives it on the CPU: its slot, not a tensor of its own. */
TEST ddp_cuda_unused_param_flat_slot(void) {
    enum { B = 4, D = 6 };
    float xs[B * D];
    int32_t ys[B] = {0, 1, 2, 1};
    int64_t sx[2] = {B, D}, sy[1] = {B}, s5[1] = {5};
    gdl_device dev = gdl_dist_device();
    gdl_module *m = ddp_mlp(D, 7, 8, dev);
    gdl_tensor *spare = gdl_zeros(1, s5, GDL_F32, dev), *x, *y;
    gdl_optimizer *opt = gdl_sgd_new(0.1, 0, 0, 0, 0);
    gdl_ddp *d;
    float *g;
    int i, step;
    for (i = 0; i < B * D; i++) xs[i] = (float)cos(0.3 * i);
    ASSERT_EQ(0, gdl_set_requires_grad(spare, 1));
    ASSERT_EQ(0, gdl_module_add_param(m, "spare", spare));
    ASSERT_EQ(0, gdl_optim_add_module(opt, m, 0));
    if (!(d = gdl_ddp_new(m, NULL))) FAILm(gdl_last_error());
    x = gdl_from_array(xs, 2, sx, GDL_F32, dev);
    y = gdl_from_array(ys, 1, sy, GDL_I32, dev);
    for (step = 0; step < 2; step++) { /* the second: the parameters are in the flat block */
        ASSERT_EQ(0, gdl_zero_grad_ex(opt, 1)); /* PyTorch's default: the grads go */
        ASSERT(!spare->grad);
        if (gdl_ddp_backward(d, gdl_cross_entropy(gdl_ddp_forward(d, x), y)) < 0) FAILm(gdl_last_error());
        ASSERT_NOT_NULL(spare->grad);
        if (step == 1) {
            ASSERT_NOT_NULL(spare->flat);
            ASSERTm("the unused parameter's gradient is not its slot of the flat block",
                    spare->grad->flat == spare->flat);
            ASSERT_NOT_NULL(g = host(spare->grad));
            for (i = 0; i < 5; i++) ASSERT_EQ(0.0f, g[i]);
            free(g);
        }
        ASSERT_EQ(0, gdl_step(opt));
    }
    gdl_ddp_free(d);
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_free(x), gdl_free(y);
    gdl_arena_reset();
    PASS();
}

/* gdl_fit under DDP with a checkpoint every 3 steps, resumed by fresh objects (NCCL carries gdl_fit's
   agreements without MPI): both ranks find rank 0's checkpoint and resume at its step, and end bit for bit
   where the uninterrupted run ends; epoch 1's figures (the checkpoint's running sums: every rank's) and
   epoch 2's are the uninterrupted ones. */
TEST fit_resume_under_ddp_cuda(void) {
    static const ddp_job_spec spec = {.data = &ddp_resume_data, .hidden = 7, .model_seed = 8, .batch = 4,
                                      .shuffle = 31, .shard = 1, .ddp = 1};
    ddp_job a, b;
    gdl_epoch_stats hs[2], hr[2];
    char dir[256], msg[256];
    int i;
    gdl_device dev = gdl_dist_device();
    ASSERT_EQ(0, ddp_shared_dir(dir, sizeof dir, "gpudl-nccl-resume", NULL));
    ASSERT_EQ(0, ddp_job_make(&a, &spec, dev));
    ASSERT_EQ(6, gdl_loader_num_batches(a.l));
    if (ddp_job_fit(&a, 2, 0, 0, NULL, hs) < 0) FAILf("uninterrupted: %s", gdl_last_error());
    ASSERT_EQ(0, ddp_job_make(&b, &spec, dev));
    if (ddp_job_fit(&b, 1, 3, 0, dir, NULL) < 0) FAILf("epoch 1: %s", gdl_last_error());
    ddp_job_free(&b);
    ASSERT_EQ(0, ddp_job_make(&b, &spec, dev));
    if (ddp_job_fit(&b, 2, 3, 1, dir, hr) < 0) FAILf("rank %d resumed: %s", gdl_dist_rank(), gdl_last_error());
    ASSERT_EQ(12, gdl_optim_get_step(b.opt));
    if (!ddp_same_params(b.m, a.m, -1, msg, sizeof msg)) FAILf("rank %d: %s", gdl_dist_rank(), msg);
    for (i = 0; i < 2; i++) {
        ASSERT_EQ(hs[i].samples, hr[i].samples);
        ASSERT_EQ(hs[i].accuracy, hr[i].accuracy);
        if (hs[i].loss != hr[i].loss)
            FAILf("rank %d epoch %d loss: uninterrupted %.17g, resumed %.17g", gdl_dist_rank(), i + 1, hs[i].loss,
                  hr[i].loss);
    }
    ddp_job_free(&a);
    ddp_job_free(&b);
    ASSERT_EQ(0, ddp_remove_dir(dir)); /* nobody reads the checkpoint any more */
    PASS();
}

/* Rank 1 leaves; rank 0's next collective finds no peer: the barrier fails within the timeout. */
TEST peer_leaves(void) {
    gdl_tensor *t;
    double t0;
    int64_t s2[1] = {2};
    if (gdl_dist_rank() == 1) PASS(); /* it shuts down and exits */
#ifdef GPUDL_EMU
    gdl_emu_nccl_timeout(1); /* the emulator's collective gives up; NCCL's waits for GPUDL_DIST_TIMEOUT */
#endif
    t = gdl_zeros(1, s2, GDL_F32, gdl_dist_device());
    t0 = gdl_now();
    ASSERT_EQ(0, gdl_dist_all_reduce(t, GDL_SUM)); /* queued: the host does not wait */
    ASSERT_EQ(-1, gdl_dist_barrier());
#ifdef GPUDL_EMU
    ASSERT_LT(gdl_now() - t0, 10.0);
    ASSERT_CONTAINS(gdl_last_error(), "a collective failed");
    gdl_emu_nccl_timeout(0);
#else
    ASSERT_LT(gdl_now() - t0, gdl_dist_timeout() + 10.0);
    ASSERT_CONTAINS(gdl_last_error(), "NCCL");
#endif
    ASSERT_EQ(-1, gdl_dist_all_reduce(t, GDL_SUM));
    ASSERT_CONTAINS(gdl_last_error(), "aborted");
    gdl_free(t);
    PASS();
}

SUITE(two_ranks) {
    static const int one = 1, two = 2;
    RUN_TEST(collectives_cuda);
    RUN_TEST_NAMED("ddp_cuda_equals_one_process", ddp_cuda_equals_one_process, (void *)&one);
    RUN_TEST_NAMED("ddp_cuda_no_sync_accumulation", ddp_cuda_equals_one_process, (void *)&two);
    RUN_TEST(ddp_cuda_unused_param_flat_slot);
    RUN_TEST(fit_under_ddp_cuda);
    RUN_TEST(fit_resume_under_ddp_cuda);
    RUN_TEST(peer_leaves);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    const char *w = getenv("WORLD_SIZE");
    HARNESS_MAIN_BEGIN(argc, argv);
    if (!w) w = getenv("OMPI_COMM_WORLD_SIZE");
    g_ranks = w ? atoi(w) : 1;
    if (g_ranks > 1 && getenv("GPUDL_TEST_INIT_FAILS")) {
        /* rank 0 cannot make NCCL's id (GPUDL_EMU_NCCL_FAIL_ID=1 there): every rank's gdl_dist_init fails
           within the timeout (GPUDL_DIST_TIMEOUT), none left waiting for the id */
        double t0 = gdl_now();
        int rc = gdl_dist_init(), ok;
        const char *e = gdl_last_error();
        ok = rc == -1 && gdl_now() - t0 < 20 && strstr(e, "rank 0 could not make NCCL's id") != NULL;
        printf("init_fails: gdl_dist_init %d after %.3f s: %s\n%d passed, %d failed, 0 skipped\n", rc,
               gdl_now() - t0, e, ok, !ok);
        gdl_shutdown();
        return !ok;
    }
    if (g_ranks > 1) {
        if (gdl_dist_init() < 0) {
            fprintf(stderr, "test_dist_nccl: %s\n", gdl_last_error());
            return 1;
        }
        printf("rank %d of %d (%s) on %s\n", gdl_dist_rank(), gdl_dist_world_size(), gdl_dist_launcher(),
               gdl_device_str(gdl_dist_device()));
        RUN_SUITE(two_ranks);
        gdl_dist_shutdown();
    } else {
#ifndef GPUDL_MPI
        RUN_SUITE(one_process);
#endif
    }
    gdl_shutdown();
    HARNESS_MAIN_END();
}
