/* test_dist.c — multi-process training pieces (src/api/dist.h): the launchers'
   environments (torchrun, mpirun, srun) and each of their errors, the
   loader's DistributedSampler shards, and — built with -DGPUDL_MPI and run
   as `mpirun -np 2 build/test_dist_mpi` — the collectives, the shards
   gathered from both ranks, and data-parallel SGD on two ranks against one
   process training on the whole batch.

   Build: cc -std=c99 -pthread tests/test_dist.c -lm -o build/test_dist
          mpicc -std=c99 -pthread -DGPUDL_MPI tests/test_dist.c -lm -o build/test_dist_mpi */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h> /* mkdir */
#include <dirent.h>   /* preemption: a save's temporary seen in the checkpoint directory */
#include <unistd.h>   /* getpid, rmdir */
#include <signal.h>   /* preemption: SIGUSR1, SIGTERM */
#include <pthread.h>
#include <time.h>

#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include "ddp_setup.h"

#ifndef GPUDL_MPI /* run alone: the environment is the test's to set */
static const char *const all_vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
                                       "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID",
                                       "SLURM_NTASKS", "SLURM_LOCALID", "JOB_COMPLETION_INDEX", "PET_NNODES",
                                       "PET_NODE_RANK", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR", "PET_MASTER_PORT"};

static void clear_env(void) {
    size_t i;
    for (i = 0; i < sizeof all_vars / sizeof *all_vars; i++) unsetenv(all_vars[i]);
}

/* setenv pairs (NULL-terminated), init, expect failure naming `needle` */
static int init_fails_with(const char *needle, const char *const *kv, char *msg, size_t len) {
    int rc;
    clear_env();
    for (; kv[0]; kv += 2) setenv(kv[0], kv[1], 1);
    rc = gdl_dist_init();
    clear_env();
    if (rc == 0) {
        gdl_dist_shutdown();
        snprintf(msg, len, "gdl_dist_init succeeded; expected an error naming %s", needle);
        return 0;
    }
    if (!strstr(gdl_last_error(), needle)) {
        snprintf(msg, len, "the error '%.300s' does not name %s", gdl_last_error(), needle);
        return 0;
    }
    return 1;
}

TEST bad_environments(void) {
    static const char *const c1[] = {"RANK", "0", NULL};
    static const char *const c2[] = {"RANK", "0", "WORLD_SIZE", "1", NULL};
    static const char *const c3[] = {"RANK", "x1", "WORLD_SIZE", "1", "LOCAL_RANK", "0", NULL};
    static const char *const c4[] = {"RANK", "3", "WORLD_SIZE", "2", "LOCAL_RANK", "0", NULL};
    static const char *const c5[] = {"RANK", "0", "WORLD_SIZE", "0", "LOCAL_RANK", "0", NULL};
    static const char *const c6[] = {"OMPI_COMM_WORLD_SIZE", "2", NULL};
    static const char *const c7[] = {"SLURM_PROCID", "0", "SLURM_NTASKS", "1", "SLURM_LOCALID", "", NULL};
    static const char *const c8[] = {"RANK", "0", "WORLD_SIZE", "1", "LOCAL_RANK", "-1", NULL};
    char msg[512];
    if (!init_fails_with("WORLD_SIZE", c1, msg, sizeof msg)) FAILm(msg);
    if (!init_fails_with("LOCAL_RANK", c2, msg, sizeof msg)) FAILm(msg);
    if (!init_fails_with("RANK='x1'", c3, msg, sizeof msg)) FAILm(msg);
    if (!init_fails_with("RANK='3' (torchrun) is not a whole number in [0, 1]", c4, msg, sizeof msg)) FAILm(msg);
    if (!init_fails_with("WORLD_SIZE='0'", c5, msg, sizeof msg)) FAILm(msg);
    if (!init_fails_with("OMPI_COMM_WORLD_RANK", c6, msg, sizeof msg)) FAILm(msg);
    if (!init_fails_with("SLURM_LOCALID=''", c7, msg, sizeof msg)) FAILm(msg);
    if (!init_fails_with("LOCAL_RANK='-1'", c8, msg, sizeof msg)) FAILm(msg);
    ASSERT(!gdl_dist_is_initialized());
    PASS();
}

/* The launchers' and the rendezvous's variables are parsed whole: a number with anything around it, a
   value too long for its buffer, a Slurm job id that is not a number (the port comes from it) are errors
   naming the variable, never a number read from the front, a truncation or a default port. The
   rendezvous itself runs only for CUDA tensors without MPI: it is called here directly, and every case
   fails before any connection. */
#if defined(GDL__HAVE_RDV)
static int rdv_fails_with(const char *needle, int rank, const char *const *kv, char *msg, size_t len) {
    static const char *const vars[] = {"MASTER_ADDR", "MASTER_PORT", "PET_MASTER_ADDR", "PET_MASTER_PORT",
                                       "SLURM_PROCID", "SLURM_JOB_NODELIST", "SLURM_JOB_ID", "GPUDL_DIST_BIND_ADDR"};
    unsigned char id[GDL_COMM_ID_BYTES];
    size_t i;
    int rc;
    for (i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
    for (; kv[0]; kv += 2) setenv(kv[0], kv[1], 1);
    rc = gdl__rendezvous("gdl_dist_init", rank, 2, id, 0.5);
    for (i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
    if (rc == 0) {
        snprintf(msg, len, "the rendezvous succeeded; expected an error naming %s", needle);
        return 0;
    }
    if (!strstr(gdl_last_error(), needle)) {
        snprintf(msg, len, "the error '%.300s' does not name %s", gdl_last_error(), needle);
        return 0;
    }
    return 1;
}
#endif

TEST variables_parsed_whole(void) {
    static const char *const r1[] = {"RANK", "1e3", "WORLD_SIZE", "2", "LOCAL_RANK", "0", NULL};
    static const char *const r2[] = {"RANK", "0", "WORLD_SIZE", "2abc", "LOCAL_RANK", "0", NULL};
    static const char *const r3[] = {"RANK", "0", "WORLD_SIZE", "2", "LOCAL_RANK", " 0", NULL};
    static const char *const r4[] = {"PET_NNODES", " 2", "PET_NODE_RANK", "0", NULL};
    char msg[512];
    if (!init_fails_with("RANK='1e3' (torchrun) is not a whole number", r1, msg, sizeof msg)) FAILm(msg);
    if (!init_fails_with("WORLD_SIZE='2abc'", r2, msg, sizeof msg)) FAILm(msg);
    if (!init_fails_with("LOCAL_RANK=' 0'", r3, msg, sizeof msg)) FAILm(msg);
    if (!init_fails_with("PET_NNODES=' 2'", r4, msg, sizeof msg)) FAILm(msg);
#if defined(GDL__HAVE_RDV)
    {
        static char long_name[301];
        const char *a1[] = {"MASTER_ADDR", long_name, "MASTER_PORT", "29500", NULL};
        const char *a2[] = {"PET_MASTER_ADDR", long_name, "MASTER_PORT", "29500", NULL};
        static const char *const p1[] = {"MASTER_ADDR", "localhost", "MASTER_PORT", "29500x", NULL};
        static const char *const p2[] = {"MASTER_ADDR", "localhost", "MASTER_PORT", "+29500", NULL};
        static const char *const p3[] = {"MASTER_ADDR", "localhost", "MASTER_PORT", "123456789012345678901234567890123",
                                         NULL};
        static const char *const s1[] = {"SLURM_PROCID", "1", "SLURM_JOB_NODELIST", "localhost", "SLURM_JOB_ID",
                                         "12ab", NULL};
        const char *b1[] = {"MASTER_ADDR", "localhost", "MASTER_PORT", "29500", "GPUDL_DIST_BIND_ADDR", long_name,
                            NULL};
        memset(long_name, 'h', 300);
        if (!rdv_fails_with("MASTER_ADDR is 300 bytes long", 1, a1, msg, sizeof msg)) FAILm(msg);
        if (!rdv_fails_with("PET_MASTER_ADDR is 300 bytes long", 1, a2, msg, sizeof msg)) FAILm(msg);
        if (!rdv_fails_with("MASTER_PORT='29500x' is not a port number", 1, p1, msg, sizeof msg)) FAILm(msg);
        if (!rdv_fails_with("MASTER_PORT='+29500'", 1, p2, msg, sizeof msg)) FAILm(msg);
        if (!rdv_fails_with("MASTER_PORT is 33 bytes long", 1, p3, msg, sizeof msg)) FAILm(msg);
        if (!rdv_fails_with("SLURM_JOB_ID='12ab': not a whole number", 1, s1, msg, sizeof msg)) FAILm(msg);
        if (!rdv_fails_with("GPUDL_DIST_BIND_ADDR is 300 bytes long", 0, b1, msg, sizeof msg)) FAILm(msg);
    }
#endif
    ASSERT(!gdl_dist_is_initialized());
    PASS();
}

/* Kubernetes' controllers: an Indexed Job (JOB_COMPLETION_INDEX and WORLD_SIZE from the manifest),
   Kubeflow's PyTorchJob (RANK, WORLD_SIZE, PET_*: no LOCAL_RANK) and PET_* alone (TrainJob); as one
   process each is read, and each broken environment is refused naming the variable. */
TEST kubernetes_environments(void) {
    static const char *const ok[3][12] = {
        {"JOB_COMPLETION_INDEX", "0", "WORLD_SIZE", "1", NULL},
        {"RANK", "0", "WORLD_SIZE", "1", "PET_NPROC_PER_NODE", "1", "PET_NNODES", "1", "MASTER_ADDR", "h", NULL},
        {"PET_NNODES", "1:1", "PET_NODE_RANK", "0", "PET_NPROC_PER_NODE", "1", NULL}};
    static const char *const names[3] = {"k8s-indexed-job", "pytorchjob", "kubeflow-pet"};
    static const char *const b1[] = {"JOB_COMPLETION_INDEX", "0", NULL};
    static const char *const b2[] = {"JOB_COMPLETION_INDEX", "2", "WORLD_SIZE", "2", NULL};
    static const char *const b3[] = {"JOB_COMPLETION_INDEX", "x", "WORLD_SIZE", "2", NULL};
    static const char *const b4[] = {"RANK", "0", "WORLD_SIZE", "2", "PET_NPROC_PER_NODE", "auto", NULL};
    static const char *const b5[] = {"PET_NNODES", "1:4", "PET_NODE_RANK", "0", NULL};
    static const char *const b6[] = {"PET_NNODES", "2", NULL};
    static const char *const b7[] = {"PET_NNODES", "2", "PET_NODE_RANK", "2", NULL};
    static const char *const b8[] = {"RANK", "0", "WORLD_SIZE", "1", NULL}; /* torchrun's rule stays */
    char msg[512];
    int k;
    for (k = 0; k < 3; k++) {
        const char *const *kv;
        clear_env();
        for (kv = ok[k]; kv[0]; kv += 2) setenv(kv[0], kv[1], 1);
        if (gdl_dist_init() < 0) FAILf("%s: %s", names[k], gdl_last_error());
        ASSERT_STR_EQ(names[k], gdl_dist_launcher());
        ASSERT_EQ(0, gdl_dist_rank());
        ASSERT_EQ(1, gdl_dist_world_size());
        ASSERT_EQ(0, gdl_dist_local_rank());
        gdl_dist_shutdown();
        unsetenv("MASTER_ADDR");
    }
    /* torchrun inside a PyTorchJob's pod: its processes inherit PET_*, and torchrun's variables rule */
    clear_env();
    setenv("RANK", "0", 1), setenv("WORLD_SIZE", "1", 1), setenv("LOCAL_RANK", "0", 1);
    setenv("PET_NPROC_PER_NODE", "4", 1), setenv("PET_NNODES", "2", 1);
    if (gdl_dist_init() < 0) FAILf("torchrun in a pod: %s", gdl_last_error());
    ASSERT_STR_EQ("torchrun", gdl_dist_launcher());
    gdl_dist_shutdown();
    clear_env();
    if (!init_fails_with("JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but WORLD_SIZE is not", b1, msg,
                         sizeof msg)) FAILm(msg);
    if (!init_fails_with("JOB_COMPLETION_INDEX='2' (k8s-indexed-job) is not a whole number in [0, 1]", b2, msg,
                         sizeof msg)) FAILm(msg);
    if (!init_fails_with("JOB_COMPLETION_INDEX='x'", b3, msg, sizeof msg)) FAILm(msg);
    if (!init_fails_with("PET_NPROC_PER_NODE='auto' (Kubeflow): gpudl runs one process per pod", b4, msg, sizeof msg))
        FAILm(msg);
    if (!init_fails_with("PET_NNODES='1:4' (Kubeflow) is not a number of pods: an elastic range", b5, msg, sizeof msg))
        FAILm(msg);
    if (!init_fails_with("PET_NNODES is set (Kubeflow) but PET_NODE_RANK is not", b6, msg, sizeof msg)) FAILm(msg);
    if (!init_fails_with("PET_NODE_RANK='2' (kubeflow-pet) is not a whole number in [0, 1]", b7, msg, sizeof msg))
        FAILm(msg);
    if (!init_fails_with("RANK is set (torchrun) but LOCAL_RANK is not", b8, msg, sizeof msg)) FAILm(msg);
    PASS();
}

/* Slurm's host lists, as `scontrol show hostnames` expands them (tests/slurm/test_slurm.sh checks this
   against the real scontrol where Slurm is installed), and bad lists refused, saying where. */
static int hosts_are(const char *list, const char *want, char *msg, size_t len) {
    char all[1024] = "", h[64];
    int64_t n = gdl_hostlist_host(list, 0, h, sizeof h), i;
    size_t k = 0;
    if (n < 0) {
        snprintf(msg, len, "'%s': %s", list, gdl_last_error());
        return 0;
    }
    for (i = 0; i < n && k < sizeof all; i++) {
        if (gdl_hostlist_host(list, i, h, sizeof h) != n) {
            snprintf(msg, len, "'%s': host %lld: %s", list, (long long)i, gdl_last_error());
            return 0;
        }
        k += (size_t)snprintf(all + k, sizeof all - k, "%s%s", i ? " " : "", h);
    }
    if (strcmp(all, want)) {
        snprintf(msg, len, "'%s' gave '%s'; expected '%s'", list, all, want);
        return 0;
    }
    return 1;
}

TEST hostlists(void) {
    static const char *const good[][2] = {
        {"node7", "node7"},
        {"node[01-04,07],gpu-a[1-2]", "node01 node02 node03 node04 node07 gpu-a1 gpu-a2"},
        {"a[1-2]b[7,9]c", "a1b7c a1b9c a2b7c a2b9c"},
        {"n[8-11]", "n8 n9 n10 n11"},
        {"n[098-101]", "n098 n099 n100 n101"},
        {"x,y[3],z", "x y3 z"},
        {"r[0]", "r0"}};
    static const char *const bad[][2] = {
        {"", "the host list is empty"},
        {"node[01-04", "the '[' is never closed"},
        {"node[1-2]]", "a ']' at offset 9 without its '['"},
        {"node[[1]]", "brackets inside brackets at offset 5"},
        {"node[3-1]", "the range 3-1 at offset 8 goes down"},
        {"node[1-]", "the range at offset 6 has no upper bound"},
        {"node[]", "no number at offset 5"},
        {"node[1,,2]", "no number at offset 7"},
        {"node[a]", "no number at offset 5"},
        {"node[1;2]", "';' at offset 6 inside brackets"},
        {"a,,b", "an empty name at offset 2"},
        {"a[0-9999]b[0-9999]", "more than 16777216 hosts"},
        {"n[1-1234567890]", "a number too long"}};
    char msg[512], h[8];
    size_t i;
    for (i = 0; i < sizeof good / sizeof *good; i++)
        if (!hosts_are(good[i][0], good[i][1], msg, sizeof msg)) FAILm(msg);
    for (i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (gdl_hostlist_host(bad[i][0], 0, h, sizeof h) != -1) FAILf("'%s' was taken", bad[i][0]);
        if (!strstr(gdl_last_error(), bad[i][1]))
            FAILf("'%s': the error '%s' does not say '%s'", bad[i][0], gdl_last_error(), bad[i][1]);
    }
    ASSERT_EQ(-1, gdl_hostlist_host("averyveryverylongname", 0, h, sizeof h));
    ASSERT_CONTAINS(gdl_last_error(), "host 0 is longer than 7 characters");
    ASSERT_EQ(2, gdl_hostlist_host("a[1-2]", 5, h, sizeof h)); /* past the end: the count, out empty */
    ASSERT_STR_EQ("", h);
    ASSERT_EQ(-1, gdl_hostlist_host("a", 0, NULL, 4));
    PASS();
}

/* The collectives' timeout: GPUDL_DIST_TIMEOUT at gdl_dist_init, gdl_dist_set_timeout; bad values named. */
TEST timeout_settings(void) {
    static const char *const bad[] = {"0", "-3", "x", "", "2s", "nan", " 5", "+5", "0x10", "5 "};
    size_t i;
    clear_env();
    ASSERT_EQ(600.0, gdl_dist_timeout());
    for (i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("GPUDL_DIST_TIMEOUT", bad[i], 1);
        ASSERT_EQ(-1, gdl_dist_init());
        ASSERT_CONTAINS(gdl_last_error(), "GPUDL_DIST_TIMEOUT='");
        ASSERT_CONTAINS(gdl_last_error(), "is not a number of seconds > 0");
        ASSERT(!gdl_dist_is_initialized());
    }
    setenv("GPUDL_DIST_TIMEOUT", "2.5", 1);
    ASSERT_EQ(0, gdl_dist_init());
    ASSERT_EQ(2.5, gdl_dist_timeout());
    ASSERT_EQ(0, gdl_dist_set_timeout(7));
    ASSERT_EQ(7.0, gdl_dist_timeout());
    ASSERT_EQ(-1, gdl_dist_set_timeout(0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_dist_set_timeout: 0 is not a number of seconds > 0");
    ASSERT_EQ(-1, gdl_dist_set_timeout(NAN));
    ASSERT_EQ(7.0, gdl_dist_timeout());
    ASSERT_EQ(0, gdl_dist_set_timeout(INFINITY));
    ASSERT(isinf(gdl_dist_timeout()));
    ASSERT_EQ(0, gdl_dist_barrier()); /* one process: nothing to wait for */
    gdl_dist_shutdown();
    /* a gdl_dist_set_timeout call wins over GPUDL_DIST_TIMEOUT at a later gdl_dist_init (still checked) */
    ASSERT_EQ(0, gdl_dist_init());
    ASSERT(isinf(gdl_dist_timeout()));
    gdl_dist_shutdown();
    setenv("GPUDL_DIST_TIMEOUT", "x", 1);
    ASSERT_EQ(-1, gdl_dist_init());
    ASSERT(isinf(gdl_dist_timeout()));
    unsetenv("GPUDL_DIST_TIMEOUT");
    ASSERT_EQ(0, gdl_dist_set_timeout(600));
    PASS();
}

/* Without MPI a job of several processes is refused, naming the way out. */
TEST several_processes_need_mpi(void) {
    static const char *const kv[] = {"RANK", "1", "WORLD_SIZE", "2", "LOCAL_RANK", "1", NULL};
    char msg[512];
    if (!init_fails_with("-DGPUDL_MPI", kv, msg, sizeof msg)) FAILm(msg);
    PASS();
}

/* One process: the variables of each launcher are read; collectives are
   the identity; their argument errors. */
TEST single_process(void) {
    static const char *const L[3][4] = {{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
                                        {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_LOCAL_RANK"},
                                        {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};
    int64_t s3[1] = {3}, s6[1] = {6};
    float v[3] = {1, 2, 4};
    gdl_tensor *t, *big, *u8;
    int k;
    clear_env();
    ASSERT_EQ(-1, gdl_dist_barrier());
    ASSERT_CONTAINS(gdl_last_error(), "call gdl_dist_init first");
    for (k = 0; k < 3; k++) {
        setenv(L[k][1], "0", 1);
        setenv(L[k][2], "1", 1);
        setenv(L[k][3], "0", 1);
        if (gdl_dist_init() < 0) FAILf("%s: %s", L[k][0], gdl_last_error());
        ASSERT_STR_EQ(L[k][0], gdl_dist_launcher());
        ASSERT_EQ(0, gdl_dist_rank());
        ASSERT_EQ(1, gdl_dist_world_size());
        gdl_dist_shutdown();
        clear_env();
    }
    ASSERT_EQ(0, gdl_dist_init());
    ASSERT_STR_EQ("single", gdl_dist_launcher());
    ASSERT_EQ(-1, gdl_dist_init());
    ASSERT_CONTAINS(gdl_last_error(), "already initialised");
    ASSERT(gdl_device_equal(gdl_dist_device(), gdl_cuda_device_count() > 0 ? gdl_cuda(0) : gdl_cpu()));
    t = gdl_from_array(v, 1, s3, GDL_F32, gdl_cpu());
    big = gdl_zeros(1, s6, GDL_F32, gdl_cpu());
    u8 = gdl_zeros(1, s3, GDL_U8, gdl_cpu());
    ASSERT_EQ(0, gdl_dist_all_reduce(t, GDL_AVG));
    ASSERT_EQ(0, memcmp(t->data, v, sizeof v));
    ASSERT_EQ(0, gdl_dist_broadcast(t, 0));
    ASSERT_EQ(-1, gdl_dist_broadcast(t, 1));
    ASSERT_CONTAINS(gdl_last_error(), "root 1 is not a rank (world size 1)");
    ASSERT_EQ(-1, gdl_dist_all_reduce(u8, GDL_SUM));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_dist_all_reduce: t is u8 [3]; expected f32 or i32");
    ASSERT_EQ(-1, gdl_dist_all_gather(big, t));
    ASSERT_CONTAINS(gdl_last_error(), "out f32 [6] must have world size (1) x the elements of in f32 [3]");
    ASSERT_EQ(-1, gdl_dist_all_reduce(t, (gdl_dist_op)7));
    ASSERT_CONTAINS(gdl_last_error(), "neither GDL_SUM nor GDL_AVG");
    gdl_free(big);
    big = gdl_zeros(1, s3, GDL_F32, gdl_cpu());
    ASSERT_EQ(0, gdl_dist_all_gather(big, t));
    ASSERT_EQ(0, memcmp(big->data, v, sizeof v));
    ASSERT_EQ(0, gdl_dist_reduce_scatter(big, t, GDL_AVG));
    ASSERT_EQ(0, memcmp(big->data, v, sizeof v));
    ASSERT_EQ(0, gdl_dist_barrier());
    gdl_dist_shutdown();
    ASSERT(!gdl_dist_is_initialized());
    ASSERT_EQ(-1, gdl_dist_all_reduce(t, GDL_SUM));
    gdl_free(t);
    gdl_free(big);
    gdl_free(u8);
    PASS();
}
/* DDP all-reduces f32 gradients: master weights (bf16 parameters) are refused, naming the dtype, whether the
   parameters became bf16 before gdl_ddp_new or after */
TEST ddp_refuses_master_weights(void) {
    gdl_module *m = gdl_nn_linear(3, 2, 1);
    gdl_optimizer *opt = gdl_sgd_new(0.1, 0, 0, 0, 0);
    gdl_ddp *d;
    gdl_tensor *x, *loss;
    int64_t xs[2] = {4, 3};
    clear_env();
    ASSERT(m && opt);
    ASSERT_EQ(0, gdl_dist_init());
    ASSERT_NOT_NULL(d = gdl_ddp_new(m, NULL));
    ASSERT_EQ(0, gdl_optim_add_module(opt, m, 0));
    ASSERT_EQ(0, gdl_optim_set_master_weights(opt, GDL_BF16));
    gdl_arena_reset();
    ASSERT_NOT_NULL(x = gdl_zeros(2, xs, GDL_BF16, gdl_cpu()));
    ASSERT_NOT_NULL(loss = gdl_sum(gdl_ddp_forward(d, x)));
    ASSERT_EQ(-1, gdl_ddp_backward(d, loss));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_ddp_backward");
    ASSERT_CONTAINS(gdl_last_error(), "bf16");
    gdl_arena_reset(); /* the refused backward left its graph on the tape */
    gdl_ddp_free(d);
    ASSERT_NULL(gdl_ddp_new(m, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "bf16");
    gdl_dist_shutdown();
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_free(x);
    PASS();
}
#endif

/* ---- the gradient-ready signal ---- */

typedef struct ready_log {
    int n;
    gdl_tensor *who[8];
    float snap[8]; /* the gradient's first element when signalled */
} ready_log;

static void on_ready(gdl_tensor *leaf, void *user) {
    ready_log *r = (ready_log *)user;
    if (r->n < 8) {
        r->who[r->n] = leaf;
        r->snap[r->n] = ((float *)leaf->grad->data)[0];
    }
    r->n++;
}

/* Each leaf once, the last layer's first, with its final gradient; w is
   read by two ops (fan-out) and comes after its older use. */
TEST grad_ready_hook(void) {
    int64_t s1[2] = {4, 3}, sb[1] = {4}, s2[2] = {2, 4}, sx[2] = {5, 3}, sy[1] = {5};
    float xs[15];
    int32_t ys[5] = {0, 1, 1, 0, 1};
    ready_log r;
    gdl_tensor *w1, *b1, *w2, *x, *y, *h, *loss;
    int i;
    memset(&r, 0, sizeof r);
    for (i = 0; i < 15; i++) xs[i] = (float)cos(i);
    gdl_manual_seed(3);
    w1 = gdl_randn(2, s1, gdl_cpu()), b1 = gdl_randn(1, sb, gdl_cpu()), w2 = gdl_randn(2, s2, gdl_cpu());
    gdl_set_requires_grad(w1, 1), gdl_set_requires_grad(b1, 1), gdl_set_requires_grad(w2, 1);
    x = gdl_from_array(xs, 2, sx, GDL_F32, gdl_cpu());
    y = gdl_from_array(ys, 1, sy, GDL_I32, gdl_cpu());
    /* w1 feeds the first layer and, again, a penalty added at the end */
    h = gdl_tanh(gdl_linear(x, w1, b1));
    loss = gdl_add(gdl_cross_entropy(gdl_linear(h, w2, NULL), y), gdl_mul_scalar(gdl_sum(gdl_mul(w1, w1)), 0.01));
    gdl_set_grad_ready_hook(on_ready, &r);
    ASSERT_EQ(0, gdl_backward(loss));
    gdl_set_grad_ready_hook(NULL, NULL);
    ASSERT_EQ(3, r.n);
    ASSERT(r.who[0] == w2);
    ASSERT((r.who[1] == w1 && r.who[2] == b1) || (r.who[1] == b1 && r.who[2] == w1));
    for (i = 0; i < 3; i++) ASSERT_EQ(((float *)r.who[i]->grad->data)[0], r.snap[i]);
    memset(&r, 0, sizeof r);
    ASSERT_EQ(0, gdl_backward(loss)); /* no hook: nothing called */
    ASSERT_EQ(0, r.n);
    gdl_free(w1), gdl_free(b1), gdl_free(w2), gdl_free(x), gdl_free(y);
    gdl_arena_reset();
    PASS();
}

/* ---- the DistributedSampler ---- */

enum { NS = 23 };

/* a dataset whose label is the sample's index, so batches say which samples they hold */
static gdl_dataset *index_dataset(void) {
    static float x[NS];
    static int32_t y[NS];
    int64_t s1[1] = {1};
    int i;
    for (i = 0; i < NS; i++) x[i] = (float)i, y[i] = i;
    return gdl_dataset_from_arrays(x, GDL_F32, 1, s1, y, NS, NS);
}

/* the indices a loader delivers in one epoch, in order; returns their number */
static int epoch_indices(gdl_loader *l, int32_t *out, int max) {
    gdl_tensor *x, *y;
    int n = 0;
    while (gdl_loader_next(l, &x, &y) > 0) {
        int64_t k;
        for (k = 0; k < y->numel && n < max; k++) out[n++] = ((int32_t *)y->data)[k];
    }
    return n;
}

typedef struct shard_case {
    int world, shuffle, batch, workers;
} shard_case;

/* PyTorch's sampler: pad the epoch's list to a multiple of W by repeating
   it from its start; rank r takes positions r, r+W, ... Checked against the
   unsharded loader's list of the same epoch (same seed, so same shuffle). */
TEST shards_partition_the_epoch(void *arg) {
    const shard_case *c = (const shard_case *)arg;
    gdl_dataset *ds = index_dataset();
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *whole, *part[5];
    int32_t list[NS], got[5][NS];
    int W = c->world, per = (NS + W - 1) / W, r, epoch, p;
    ASSERT_NOT_NULL(ds);
    o.batch_size = c->batch;
    o.shuffle = c->shuffle;
    o.seed = 77;
    o.num_workers = c->workers;
    ASSERT_NOT_NULL(whole = gdl_loader_new(ds, &o));
    for (r = 0; r < W; r++) {
        o.num_replicas = W;
        o.rank = r;
        ASSERT_NOT_NULL(part[r] = gdl_loader_new(ds, &o));
        ASSERT_EQ((per + c->batch - 1) / c->batch, gdl_loader_num_batches(part[r]));
    }
    for (epoch = 0; epoch < 3; epoch++) {
        int seen[NS] = {0};
        ASSERT_EQ(NS, epoch_indices(whole, list, NS));
        for (r = 0; r < W; r++) ASSERT_EQ(per, epoch_indices(part[r], got[r], NS));
        for (p = 0; p < per * W; p++) {
            int want = list[p % NS], have = got[p % W][p / W];
            if (have != want)
                FAILf("W %d epoch %d: padded position %d (rank %d) holds %d, expected %d", W, epoch, p, p % W, have,
                      want);
            seen[have]++;
        }
        for (p = 0; p < NS; p++) ASSERT(seen[p] >= 1 && seen[p] <= 2); /* each once, the padding twice */
    }
    gdl_loader_free(whole);
    for (r = 0; r < W; r++) gdl_loader_free(part[r]);
    gdl_dataset_free(ds);
    PASS();
}

TEST sampler_bad_rank(void) {
    gdl_dataset *ds = index_dataset();
    gdl_loader_opts o = gdl_loader_defaults();
    o.num_replicas = 2;
    o.rank = 2;
    ASSERT_NULL(gdl_loader_new(ds, &o));
    ASSERT_CONTAINS(gdl_last_error(), "rank 2 is not in [0, num_replicas 2)");
    o.num_replicas = -1;
    o.rank = 0;
    ASSERT_NULL(gdl_loader_new(ds, &o));
    o.num_replicas = 0;
    o.rank = 1;
    ASSERT_NULL(gdl_loader_new(ds, &o));
    gdl_dataset_free(ds);
    PASS();
}

#ifdef GPUDL_MPI
/* ---- two ranks under mpirun ---- */

TEST collectives_two_ranks(void) {
    int r = gdl_dist_rank(), W = gdl_dist_world_size();
    int64_t s2[1] = {2}, s4[1] = {4};
    float a[2], g[4], rs[4];
    int32_t iv[2];
    gdl_tensor *t, *ti, *in, *out, *big, *small;
    ASSERT_EQ(2, W);
    a[0] = (float)(r + 1), a[1] = 10.0f * (float)(r + 1);
    t = gdl_from_array(a, 1, s2, GDL_F32, gdl_cpu());
    ASSERT_EQ(0, gdl_dist_all_reduce(t, GDL_SUM));
    ASSERT_EQ(3.0, ((float *)t->data)[0]);
    ASSERT_EQ(30.0, ((float *)t->data)[1]);
    ASSERT_EQ(0, gdl_dist_all_reduce(t, GDL_AVG));
    ASSERT_EQ(3.0, ((float *)t->data)[0]);
    ASSERT_EQ(30.0, ((float *)t->data)[1]);
    iv[0] = r, iv[1] = 5;
    ti = gdl_from_array(iv, 1, s2, GDL_I32, gdl_cpu());
    ASSERT_EQ(0, gdl_dist_all_reduce(ti, GDL_SUM));
    ASSERT_EQ(1, ((int32_t *)ti->data)[0]);
    ASSERT_EQ(10, ((int32_t *)ti->data)[1]);
    ASSERT_EQ(-1, gdl_dist_all_reduce(ti, GDL_AVG)); /* a mean of integers: refused */
    a[0] = (float)(7 * r), a[1] = -1;
    gdl_free(t);
    t = gdl_from_array(a, 1, s2, GDL_F32, gdl_cpu());
    ASSERT_EQ(0, gdl_dist_broadcast(t, 1));
    ASSERT_EQ(7.0, ((float *)t->data)[0]);
    small = gdl_full(1, s2, (double)r, GDL_F32, gdl_cpu());
    big = gdl_zeros(1, s4, GDL_F32, gdl_cpu());
    ASSERT_EQ(0, gdl_dist_all_gather(big, small));
    memcpy(g, big->data, sizeof g);
    ASSERT(g[0] == 0 && g[1] == 0 && g[2] == 1 && g[3] == 1);
    rs[0] = 1, rs[1] = 2, rs[2] = 3, rs[3] = 4;
    in = gdl_from_array(rs, 1, s4, GDL_F32, gdl_cpu());
    gdl_mul_scalar_(in, r + 1);
    out = gdl_zeros(1, s2, GDL_F32, gdl_cpu());
    ASSERT_EQ(0, gdl_dist_reduce_scatter(out, in, GDL_SUM));
    ASSERT_EQ(3.0 * (2 * r + 1), ((float *)out->data)[0]);
    ASSERT_EQ(3.0 * (2 * r + 2), ((float *)out->data)[1]);
    ASSERT_EQ(0, gdl_dist_barrier());
    gdl_free(t), gdl_free(ti), gdl_free(in), gdl_free(out), gdl_free(big), gdl_free(small);
    PASS();
}

/* Each rank's shard, gathered: together the padded epoch, as PyTorch's sampler. */
TEST shards_gathered_from_both_ranks(void) {
    gdl_dataset *ds = index_dataset();
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *whole, *mine;
    int32_t list[NS], got[NS];
    int64_t sp[1], sa[1];
    int per = (NS + 1) / 2, p, n;
    gdl_tensor *part, *all;
    o.batch_size = 5;
    o.shuffle = 1;
    o.seed = 5;
    ASSERT_NOT_NULL(whole = gdl_loader_new(ds, &o));
    o.num_replicas = gdl_dist_world_size();
    o.rank = gdl_dist_rank();
    ASSERT_NOT_NULL(mine = gdl_loader_new(ds, &o));
    ASSERT_EQ(NS, epoch_indices(whole, list, NS));
    ASSERT_EQ(per, n = epoch_indices(mine, got, NS));
    sp[0] = per, sa[0] = 2 * per;
    part = gdl_from_array(got, 1, sp, GDL_I32, gdl_cpu());
    all = gdl_zeros(1, sa, GDL_I32, gdl_cpu());
    ASSERT_EQ(0, gdl_dist_all_gather(all, part));
    for (p = 0; p < 2 * per; p++) {
        int have = ((int32_t *)all->data)[(p % 2) * per + p / 2];
        if (have != list[p % NS]) FAILf("padded position %d holds %d, expected %d", p, have, list[p % NS]);
    }
    gdl_free(part), gdl_free(all);
    gdl_loader_free(whole), gdl_loader_free(mine);
    gdl_dataset_free(ds);
    PASS();
}

/* A small MLP: two ranks on half a batch each, gradients averaged with
   gdl_dist_all_reduce, equal one process on the whole batch after 50 SGD
   steps (to rounding: the two halves' means are added in another order). */
typedef struct mlp {
    gdl_tensor *w1, *b1, *w2;
} mlp;

static void mlp_make(mlp *m) {
    int64_t s1[2] = {5, 6}, sb[1] = {5}, s2[2] = {3, 5};
    gdl_manual_seed(21);
    m->w1 = gdl_uniform(2, s1, -0.4, 0.4, gdl_cpu());
    m->b1 = gdl_uniform(1, sb, -0.1, 0.1, gdl_cpu());
    m->w2 = gdl_uniform(2, s2, -0.4, 0.4, gdl_cpu());
    gdl_set_requires_grad(m->w1, 1), gdl_set_requires_grad(m->b1, 1), gdl_set_requires_grad(m->w2, 1);
}

static int mlp_step(mlp *m, gdl_tensor *x, gdl_tensor *y, int reduce) {
    gdl_tensor *loss, *p[3];
    int i;
    p[0] = m->w1, p[1] = m->b1, p[2] = m->w2;
    for (i = 0; i < 3; i++) gdl_zero_grad_tensor(p[i]);
    loss = gdl_cross_entropy(gdl_linear(gdl_tanh(gdl_linear(x, m->w1, m->b1)), m->w2, NULL), y);
    if (!loss || gdl_backward(loss) < 0) return -1;
    for (i = 0; i < 3; i++)
        if ((reduce && gdl_dist_all_reduce(p[i]->grad, GDL_AVG) < 0) || gdl_sgd_update_(p[i], 0.2) < 0) return -1;
    return 0;
}

TEST data_parallel_equals_one_process(void) {
    enum { B = 8, D = 6 };
    float xs[B * D];
    int32_t ys[B];
    int64_t sx[2] = {B, D}, sy[1] = {B}, hx[2] = {B / 2, D}, hy[1] = {B / 2};
    int r = gdl_dist_rank(), i, step;
    mlp dp, one;
    gdl_tensor *xall, *yall, *xh, *yh, *a[3], *b[3];
    for (i = 0; i < B * D; i++) xs[i] = (float)sin(0.7 * i + 0.3);
    for (i = 0; i < B; i++) ys[i] = (i * 5) % 3;
    xall = gdl_from_array(xs, 2, sx, GDL_F32, gdl_cpu());
    yall = gdl_from_array(ys, 1, sy, GDL_I32, gdl_cpu());
    xh = gdl_from_array(xs + r * (B / 2) * D, 2, hx, GDL_F32, gdl_cpu());
    yh = gdl_from_array(ys + r * (B / 2), 1, hy, GDL_I32, gdl_cpu());
    mlp_make(&dp);
    mlp_make(&one);
    a[0] = dp.w1, a[1] = dp.b1, a[2] = dp.w2, b[0] = one.w1, b[1] = one.b1, b[2] = one.w2;
    for (i = 0; i < 3; i++) ASSERT_EQ(0, gdl_dist_broadcast(a[i], 0)); /* as DDP does at construction */
    for (step = 0; step < 50; step++) {
        gdl_arena_reset();
        ASSERT_EQ(0, mlp_step(&dp, xh, yh, 1));
        ASSERT_EQ(0, mlp_step(&one, xall, yall, 0));
    }
    for (i = 0; i < 3; i++) {
        int64_t k;
        const float *p = (const float *)a[i]->data, *q = (const float *)b[i]->data;
        for (k = 0; k < a[i]->numel; k++)
            if (fabs(p[k] - q[k]) > 1e-6 * (1 + fabs(q[k])))
                FAILf("rank %d parameter %d[%lld]: data parallel %.9g, one process %.9g", r, i, (long long)k, p[k],
                      q[k]);
    }
    for (i = 0; i < 3; i++) gdl_free(a[i]), gdl_free(b[i]);
    gdl_free(xall), gdl_free(yall), gdl_free(xh), gdl_free(yh);
    gdl_arena_reset();
    PASS();
}

/* A module under gdl_ddp on two ranks, half of each batch per rank, equals
   one process on the whole batch (SGD with momentum, 30 steps), with buckets
   small enough that there are several; and with no_sync, two micro-batches
   per rank accumulate to the same step (tests/ddp_setup.h). */
TEST ddp_equals_one_process(void *arg) { return ddp_steps_case(gdl_cpu(), *(const int *)arg, 30); }

/* gdl_fit under DDP on 2 ranks, each with its shard (batch 4), equals gdl_fit
   in one process on the whole data (batch 8): the same weights and the same
   epoch figures (loss and accuracy summed over both ranks). */
TEST fit_under_ddp_equals_one_process(void) { return ddp_fit_case(gdl_cpu()); }

#endif

/* ---- gdl_fit under DDP: checkpoints and resume (the helpers: preemption in one process uses them too) ---- */

/* The loss gdl_fit calls, failing at its call number crash_at (0: never), as a crash would interrupt
   the run: every rank fails at the same batch, so none is left waiting. */
static int crash_at, loss_calls;
static gdl_tensor *crashing_loss(gdl_tensor *out, gdl_tensor *y, void *user) {
    if (crash_at && ++loss_calls == crash_at) {
        gdl_clear_error();
        return NULL;
    }
    return gdl_loss_cross_entropy(out, y, user);
}

/* the model's hidden width: 7, or wide where a test needs a checkpoint that takes a while to write */
static int run_hidden = 7;

/* a fresh model, optimizer, StepLR and loader (batch per rank, this rank's shard), under DDP (which
   broadcasts rank 0's weights), trained with crashing_loss */
static int run_make(ddp_job *r, int batch) {
    ddp_job_spec s = {.data = &ddp_resume_data, .hidden = run_hidden, .model_seed = 8, .batch = batch,
                      .shuffle = 31, .shard = 1, .ddp = 1, .loss = crashing_loss};
    if (ddp_job_make(r, &s, gdl_cpu()) < 0) return -1;
    return (r->sched = gdl_steplr_new(r->opt, 1, 0.7)) ? 0 : -1;
}

#ifdef GPUDL_MPI

/* Two ranks, 6 batches of 4 per rank and epoch, Adam and StepLR: a run stopped after epoch 1 (at_end) or
   in epoch 2 (its loss fails at batch 4, the last checkpoint is at batch 2) and resumed from rank 0's
   checkpoint by fresh objects ends bit for bit where the uninterrupted run ends, on every rank (each
   rank loaded the model, the optimizer's moments, the scheduler and the sampler's position); the resumed
   epoch's figures are the uninterrupted ones (loss to rounding: the sums meet in another order). A resume
   whose batch size cannot continue the epoch is refused on both ranks, neither left waiting. */
TEST fit_resume_under_ddp(void *arg) {
    int at_end = *(const int *)arg, i;
    ddp_job a, b;
    gdl_epoch_stats hs[2], hr[2];
    char dir[256], msg[256];
    ASSERT_EQ(0, ddp_shared_dir(dir, sizeof dir, "gpudl-ddp-resume", at_end ? "end" : "mid"));
    crash_at = 0;
    ASSERT_EQ(0, run_make(&a, 4));
    ASSERT_EQ(6, gdl_loader_num_batches(a.l));
    if (ddp_job_fit(&a, 2, 0, 0, NULL, hs) < 0) FAILf("uninterrupted: %s", gdl_last_error());
    ASSERT_EQ(0, run_make(&b, 4));
    if (at_end) {
        if (ddp_job_fit(&b, 1, 6, 0, dir, NULL) < 0) FAILf("epoch 1: %s", gdl_last_error());
    } else {
        crash_at = 10, loss_calls = 0;
        ASSERT_EQ(-1, ddp_job_fit(&b, 2, 4, 0, dir, NULL));
        crash_at = 0;
        ddp_job_free(&b);
        /* another batch size: 16 samples done are not a whole number of 2 x 3-sample batches */
        ASSERT_EQ(0, run_make(&b, 3));
        ASSERT_EQ(-1, ddp_job_fit(&b, 2, 4, 1, dir, NULL));
        ASSERT_CONTAINS(gdl_last_error(), "after 16 samples (batch 2 of batch size 4 on 2 ranks); with batch size 3 on 2 ranks");
    }
    ddp_job_free(&b);
    ASSERT_EQ(0, run_make(&b, 4));
    if (ddp_job_fit(&b, 2, 4, 1, dir, hr) < 0) FAILf("resumed: %s", gdl_last_error());
    if (!ddp_same_params(a.m, b.m, -1, msg, sizeof msg)) FAILf("rank %d: %s", gdl_dist_rank(), msg);
    if (!at_end) ASSERT(isnan(hr[0].loss)); /* finished before the checkpoint: not known */
    for (i = at_end ? 0 : 1; i < 2; i++) { /* at_end: epoch 1's figures come from the checkpoint */
        ASSERT_EQ(hs[i].samples, hr[i].samples);
        ASSERT_EQ(hs[i].accuracy, hr[i].accuracy);
        if (fabs(hs[i].loss - hr[i].loss) > 1e-12 * fabs(hs[i].loss))
            FAILf("epoch %d loss: uninterrupted %.17g, resumed %.17g", i + 1, hs[i].loss, hr[i].loss);
    }
    ASSERT_EQ(gdl_optim_get_lr(a.opt, 0), gdl_optim_get_lr(b.opt, 0));
    ddp_job_free(&a);
    ddp_job_free(&b);
    ASSERT_EQ(0, ddp_remove_dir(dir));
    PASS();
}

/* Failures around checkpoints end every rank's gdl_fit with -1, none left waiting: rank 0's save fails
   (its path is a directory): rank 1 is told so; a checkpoint that only rank 0 sees (each rank's own
   checkpoint_dir): rank 0 resumes, rank 1 cannot read it, and neither loads anything. */
TEST fit_checkpoint_failures_under_ddp(void) {
    ddp_job a, b, c;
    char dir[256], mine[300], blocker[340], msg[256];
    int r = gdl_dist_rank();
    ASSERT_EQ(0, ddp_shared_dir(dir, sizeof dir, "gpudl-ddp-resume", "fail"));
    snprintf(blocker, sizeof blocker, "%s/gdl_fit.safetensors", dir);
    if (r == 0) {
        ASSERT(mkdir(dir, 0777) == 0 || errno == EEXIST); /* a failed run before may have left it */
        ASSERT(mkdir(blocker, 0777) == 0 || errno == EEXIST);
    }
    ASSERT_EQ(0, gdl_dist_barrier());
    crash_at = 0;
    ASSERT_EQ(0, run_make(&a, 4));
    ASSERT_EQ(-1, ddp_job_fit(&a, 1, 2, 0, dir, NULL));
    if (r == 1) ASSERT_CONTAINS(gdl_last_error(), "gdl_fit: 1 of 2 ranks failed saving the checkpoint (rank 0)");
    else ASSERT(strstr(gdl_last_error(), "ranks failed") == NULL); /* rank 0 says why its save failed */
    ddp_job_free(&a);
    ASSERT_EQ(0, gdl_dist_barrier());
    if (r == 0) ASSERT_EQ(0, rmdir(blocker));
    /* each rank its own directory: only rank 0's gets the checkpoint */
    snprintf(mine, sizeof mine, "%s/rank%d", dir, r);
    ASSERT_EQ(0, run_make(&a, 4));
    if (ddp_job_fit(&a, 1, 6, 0, mine, NULL) < 0) FAILf("epoch 1: %s", gdl_last_error());
    ddp_job_free(&a);
    ASSERT_EQ(0, run_make(&b, 4));
    ASSERT_EQ(-1, ddp_job_fit(&b, 2, 6, 1, mine, NULL));
    if (r == 0) ASSERT_CONTAINS(gdl_last_error(), "gdl_fit: 1 of 2 ranks failed loading the checkpoint to resume from");
    else ASSERT_CONTAINS(gdl_last_error(), mine); /* its own: the file is not there */
    ASSERT_EQ(0, run_make(&c, 4));
    if (!ddp_same_params(b.m, c.m, -1, msg, sizeof msg)) FAILf("rank %d loaded something: %s", r, msg);
    ASSERT_EQ(0, gdl_optim_get_step(b.opt));
    ddp_job_free(&b);
    ddp_job_free(&c);
    ASSERT_EQ(0, gdl_dist_barrier());
    snprintf(blocker, sizeof blocker, "%s/gdl_fit.safetensors", mine);
    remove(blocker);
    rmdir(mine);
    ASSERT_EQ(0, ddp_remove_dir(dir));
    PASS();
}
#endif

/* ---- preemption: a signal makes gdl_fit save and stop; the run started again resumes bit for bit ---- */

/* the loss gdl_fit calls, raising signal_sig at its call signal_at (0: never) on the ranks in signal_ranks
   (a bit mask), and starting the storm */
static int signal_at, signal_sig, signal_ranks = ~0;
static volatile int storm_on, storm_stop;
static volatile long storm_sent;
static gdl_tensor *signalling_loss(gdl_tensor *out, gdl_tensor *y, void *user) {
    if (signal_at && ++loss_calls == signal_at && (signal_ranks >> gdl_dist_rank() & 1)) {
        struct timespec ts = {0, 10000};
        raise(signal_sig);
        storm_on = 1;
        while (storm_sent == 0) nanosleep(&ts, NULL); /* begun: the step's rest and the save under it */
    }
    return gdl_loss_cross_entropy(out, y, user);
}

/* whether dir holds a save's temporary (gdl_st_write's path.tmp.<pid>.<n>: it is there from the save's
   fopen to its rename) */
static int save_in_progress(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    if (!d) return 0;
    while (!found && (e = readdir(d)) != NULL) found = strstr(e->d_name, ".safetensors.tmp.") != NULL;
    closedir(d);
    return found;
}

/* Once on, SIGUSR1 and SIGTERM in turn every 20 microseconds, until told to stop: what is left of the step
   and the whole checkpoint save run under signals. With storm_dir set, storm_in_save counts the signals
   sent while a save's temporary was in storm_dir both just before and just after the kill: those
   certainly landed inside the save (its write, fsync, close or rename). Every other pair goes to the thread
   that runs gdl_fit (pthread_kill), the others to the process (kill, as Slurm sends them): those the kernel
   may hand to any thread that does not block them (the pool's), where the save would not see them. A
   rank that was not signalled itself (preempt_two_ranks' rank 0, which saves) has its storm begin when
   the temporary appears in storm_dir: signals inside a save that no signal of its own started. */
static const char *storm_dir;
static long storm_in_save;
static pthread_t storm_target; /* the thread that runs gdl_fit */
static void *storm(void *arg) {
    struct timespec ts = {0, 20000};
    (void)arg;
    while (!storm_stop) {
        if (!storm_on && storm_dir && save_in_progress(storm_dir)) storm_on = 1; /* a rank that saves unsignalled */
        if (storm_on) {
            int before = storm_dir && save_in_progress(storm_dir);
            int sig = storm_sent % 2 ? SIGTERM : SIGUSR1;
            if (storm_sent / 2 % 2) kill(getpid(), sig);
            else pthread_kill(storm_target, sig);
            storm_sent++;
            if (before && save_in_progress(storm_dir)) storm_in_save++;
        }
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* gdl_fit with preempt on a fresh job (run_make's, batch 4 per rank, this rank's shard), the loss raising
   sig at its call at (0: never); 2 epochs, checkpoints in dir only when signalled, resuming from it */
static int preempt_fit(ddp_job *j, const char *dir, int at, int sig) {
    gdl_fit_opts fo = gdl_fit_defaults();
    if (run_make(j, 4) < 0) return -1;
    fo.epochs = 2;
    fo.verbose = 0;
    fo.ddp = j->d;
    fo.scheduler = j->sched;
    fo.loss = signalling_loss;
    fo.checkpoint_dir = dir;
    fo.resume = 1;
    fo.preempt = 1;
    signal_at = at, signal_sig = sig, loss_calls = 0;
    return gdl_fit(j->m, j->l, j->opt, &fo, NULL);
}

/* A signal at step `at` (on the ranks of signal_ranks; the others learn of it: every rank stops at that
   step), under a storm of SIGUSR1 and SIGTERM from then until gdl_fit returns (the save is not
   disturbed: no temporary is left, and the checkpoint loads on its own, at step `at`); the run started
   again resumes from the checkpoint and ends bit for bit where the uninterrupted run ends. SIGTERM's and
   SIGUSR1's actions are the default again after the last gdl_preempt_catch(0); preempt without
   checkpoint_dir is refused. */
static enum harness_result preempt_case(const char *dir, int at, int sig) {
    ddp_job a, b;
    pthread_t th;
    struct sigaction now;
    struct timespec ts = {0, 5000000};
    gdl_fit_opts fo = gdl_fit_defaults();
    char msg[256], path[300];
    int rc;
    crash_at = 0;
    ASSERT_EQ(0, run_make(&a, 4));
    if (ddp_job_fit(&a, 2, 0, 0, NULL, NULL) < 0) FAILf("uninterrupted: %s", gdl_last_error());
    /* caught around the whole run: a storm signal that comes after gdl_fit's own catch ends must not kill */
    ASSERT_EQ(0, gdl_preempt_catch(1));
    storm_on = storm_stop = 0, storm_sent = storm_in_save = 0, storm_target = pthread_self();
    ASSERT_EQ(0, pthread_create(&th, NULL, storm, NULL));
    rc = preempt_fit(&b, dir, at, sig);
    storm_stop = 1;
    pthread_join(th, NULL);
    nanosleep(&ts, NULL); /* the storm's last signals are delivered while still caught */
    ASSERT_EQ(0, gdl_preempt_catch(0));
    if (rc != GDL_FIT_PREEMPTED) FAILf("rank %d: gdl_fit returned %d, not GDL_FIT_PREEMPTED (%s)", gdl_dist_rank(),
                                       rc, rc < 0 ? gdl_last_error() : "it finished");
    ASSERT_EQ(at, gdl_optim_get_step(b.opt));
    ASSERT(storm_sent > 0 || !(signal_ranks >> gdl_dist_rank() & 1));
    ddp_job_free(&b);
    /* the checkpoint is whole, no temporary is left, and it holds step `at` */
    ASSERT(!save_in_progress(dir));
    snprintf(path, sizeof path, "%s/gdl_fit.safetensors", dir);
    ASSERT_EQ(0, run_make(&b, 4));
    if (gdl_checkpoint_load(b.m, b.opt, NULL, NULL, path) < 0)
        FAILf("rank %d: the checkpoint: %s", gdl_dist_rank(), gdl_last_error());
    ASSERT_EQ(at, gdl_optim_get_step(b.opt));
    ddp_job_free(&b);
    ASSERT_EQ(0, sigaction(SIGTERM, NULL, &now));
    ASSERT(now.sa_handler == SIG_DFL);
    ASSERT_EQ(0, sigaction(SIGUSR1, NULL, &now));
    ASSERT(now.sa_handler == SIG_DFL);
    /* started again: resumes at step `at` and finishes */
    if ((rc = preempt_fit(&b, dir, 0, 0)) != 0) FAILf("resumed: returned %d (%s)", rc, gdl_last_error());
    if (!ddp_same_params(a.m, b.m, -1, msg, sizeof msg)) FAILf("rank %d: %s", gdl_dist_rank(), msg);
    fo.preempt = 1;
    fo.verbose = 0;
    ASSERT_EQ(-1, gdl_fit(a.m, a.l, a.opt, &fo, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "preempt needs checkpoint_dir");
    ddp_job_free(&a);
    ddp_job_free(&b);
    PASS();
}

#ifdef GPUDL_MPI
/* Two ranks: a signal that only rank 1 catches is known to both (gdl_preempt_check), and gdl_fit under DDP
   stops both at the step where rank 1 caught it (step 5, mid-epoch), then resumes bit for bit. The model is
   wide (preempt_signals_during_save's): rank 0 saves under a storm that begins with its save. */
TEST preempt_two_ranks(void) {
    char dir[256];
    enum harness_result r;
    ASSERT_EQ(0, gdl_preempt_catch(1));
    if (gdl_dist_rank() == 1) raise(SIGUSR1);
    ASSERT_EQ(SIGUSR1, gdl_preempt_check());
    ASSERT_EQ(gdl_dist_rank() == 1 ? SIGUSR1 : 0, gdl_preempt_signal());
    ASSERT_EQ(0, gdl_preempt_catch(0));
    ASSERT_EQ(0, ddp_shared_dir(dir, sizeof dir, "gpudl-preempt", NULL));
    signal_ranks = 2, run_hidden = 10000, storm_dir = dir;
    r = preempt_case(dir, 5, SIGUSR1);
    signal_ranks = ~0, run_hidden = 7, storm_dir = NULL;
    ASSERT_EQ(0, ddp_remove_dir(dir));
    if (r != HARNESS_PASS) return r;
    printf("    rank %d: %ld signals sent, %ld of them inside the save\n", gdl_dist_rank(), storm_sent, storm_in_save);
    ASSERT(storm_in_save > 0 || gdl_dist_rank() != 0);
    PASS();
}
#endif

static shard_case shard_cases[] = {{1, 0, 4, 0}, {2, 0, 4, 0}, {2, 1, 5, 0}, {3, 1, 4, 2}, {4, 1, 3, 0}, {5, 0, 7, 2}};

#ifndef GPUDL_MPI
/* one process (12 steps an epoch): SIGUSR1 at step 4 and SIGTERM at step 15 (epoch 2), each under the storm */
TEST preempt_one_process(void) {
    char dir[256];
    int i;
    static const int at[2] = {4, 15}, sig[2] = {SIGUSR1, SIGTERM};
    clear_env();
    ASSERT_EQ(0, gdl_dist_init());
    for (i = 0; i < 2; i++) {
        enum harness_result r;
        snprintf(dir, sizeof dir, "/tmp/gpudl-preempt-%d-%d", (int)getpid(), i);
        r = preempt_case(dir, at[i], sig[i]);
        ddp_remove_dir(dir);
        if (r != HARNESS_PASS) {
            gdl_dist_shutdown();
            return r;
        }
    }
    /* the hand-written loop's helpers */
    ASSERT_EQ(0, gdl_preempt_catch(1));
    ASSERT_EQ(0, gdl_preempt_check());
    raise(SIGUSR1);
    ASSERT_EQ(SIGUSR1, gdl_preempt_signal());
    ASSERT_EQ(SIGUSR1, gdl_preempt_check());
    ASSERT_EQ(0, gdl_preempt_catch(0));
    gdl_dist_shutdown();
    PASS();
}

/* A second signal during the save must not corrupt the checkpoint. A wide model (hidden
   10000: a checkpoint of 1.2 MB, the weights and Adam's two moments) makes the save last milliseconds,
   so that the storm's signals land inside its writes, fsync and rename, each of them counted
   (storm_in_save): gdl_fit still stops with GDL_FIT_PREEMPTED at the signalled step, the checkpoint
   loads, and the resumed run ends bit for bit where the uninterrupted one ends (preempt_case). A system
   call of the save that failed on EINTR would fail the save, and gdl_fit with it (checked: a nanosleep
   put into gdl_st_write that fails on EINTR fails this test). */
TEST preempt_signals_during_save(void) {
    char dir[256];
    enum harness_result r;
    clear_env();
    ASSERT_EQ(0, gdl_dist_init());
    snprintf(dir, sizeof dir, "/tmp/gpudl-preempt-save-%d", (int)getpid());
    run_hidden = 10000, storm_dir = dir;
    r = preempt_case(dir, 6, SIGTERM);
    run_hidden = 7, storm_dir = NULL;
    ddp_remove_dir(dir);
    gdl_dist_shutdown();
    if (r != HARNESS_PASS) return r;
    printf("    %ld signals sent, %ld of them inside the save\n", storm_sent, storm_in_save);
    ASSERT(storm_in_save > 0);
    PASS();
}

SUITE(environment) {
    RUN_TEST(bad_environments);
    RUN_TEST(variables_parsed_whole);
    RUN_TEST(several_processes_need_mpi);
    RUN_TEST(timeout_settings);
    RUN_TEST(single_process);
    RUN_TEST(ddp_refuses_master_weights);
    RUN_TEST(kubernetes_environments);
    RUN_TEST(hostlists);
    RUN_TEST(preempt_one_process);
    RUN_TEST(preempt_signals_during_save);
}
#endif

SUITE(autograd) { RUN_TEST(grad_ready_hook); }

SUITE(sampler) {
    size_t i;
    char name[64];
    for (i = 0; i < sizeof shard_cases / sizeof *shard_cases; i++) {
        snprintf(name, sizeof name, "shards_W%d_shuffle%d_B%d_workers%d", shard_cases[i].world,
                 shard_cases[i].shuffle, shard_cases[i].batch, shard_cases[i].workers);
        RUN_TEST_NAMED(name, shards_partition_the_epoch, (void *)&shard_cases[i]);
    }
    RUN_TEST(sampler_bad_rank);
}

#ifdef GPUDL_MPI
SUITE(two_ranks) {
    RUN_TEST(collectives_two_ranks);
    RUN_TEST(shards_gathered_from_both_ranks);
    RUN_TEST(data_parallel_equals_one_process);
    {
        static const int one = 1, two = 2;
        RUN_TEST_NAMED("ddp_equals_one_process", ddp_equals_one_process, (void *)&one);
        RUN_TEST_NAMED("ddp_no_sync_accumulation", ddp_equals_one_process, (void *)&two);
    }
    RUN_TEST(fit_under_ddp_equals_one_process);
    {
        static const int end = 1, mid = 0;
        RUN_TEST_NAMED("fit_resume_under_ddp_epoch_end", fit_resume_under_ddp, (void *)&end);
        RUN_TEST_NAMED("fit_resume_under_ddp_mid_epoch", fit_resume_under_ddp, (void *)&mid);
    }
    RUN_TEST(fit_checkpoint_failures_under_ddp);
    RUN_TEST(preempt_two_ranks);
}
#endif

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
#ifdef GPUDL_MPI
    /* the launcher's variables are this test's input: keep them from the
       environment tests, which clear them */
    if (gdl_dist_init() < 0) {
        fprintf(stderr, "test_dist: %s\n", gdl_last_error());
        return 1;
    }
    printf("rank %d of %d (%s)\n", gdl_dist_rank(), gdl_dist_world_size(), gdl_dist_launcher());
    RUN_SUITE(autograd);
    RUN_SUITE(sampler);
    RUN_SUITE(two_ranks);
    gdl_dist_shutdown();
#else
    RUN_SUITE(environment);
    RUN_SUITE(autograd);
    RUN_SUITE(sampler);
#endif
    gdl_shutdown();
    HARNESS_MAIN_END();
}
