/* test_platform.c — the platform part (src/runtime/platform.h) on
   whatever it is built for: natively on Linux (make test-portability) and as
   a MinGW-w64 program under Wine (make test-windows). Threads, mutexes,
   condition variables, once-only initialisation, atomics, clocks, directory
   listing, processes, mkdir, fsync, the checkpoints' atomic replace, also
   while the file being replaced is open for reading (where Windows and POSIX
   differ), and the sockets of the TCP rendezvous (loopback, and the
   rendezvous between threads; on Windows also between two processes). One translation unit with the implementation: it calls the
   static gdl__os_ functions. Files go to $GPUDL_TEST_DIR (else .). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

static char dir[1024];

static void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}
/* the file's first line, "" when it cannot be read */
static const char *read_text(const char *path) {
    static char buf[256];
    FILE *f = fopen(path, "rb");
    size_t k = 0;
    buf[0] = 0;
    if (f) {
        k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
    }
    buf[k] = 0;
    return buf;
}

/* ---- threads ---- */
#ifdef GDL__OS_THREADS
typedef struct {
    gdl__mutex mu;
    gdl__cond cv;
    long counter;
    int64_t atomic64;
    int atomic32;
    int turn; /* the ping-pong: whose turn, under mu */
} shared_t;
static shared_t sh = {GDL__MUTEX_INIT, GDL__COND_INIT, 0, 0, 0, 0};

static void *hammer(void *arg) {
    int i;
    (void)arg;
    for (i = 0; i < 20000; i++) {
        gdl__mutex_lock(&sh.mu);
        sh.counter++;
        gdl__mutex_unlock(&sh.mu);
        gdl__atomic_add(&sh.atomic64, 3, GDL__MO_RELAXED);
        gdl__atomic_add(&sh.atomic32, 1, GDL__MO_ACQ_REL);
    }
    return NULL;
}

TEST threads_mutex_atomics(void) {
    gdl__thread t[4];
    int i;
    for (i = 0; i < 4; i++) ASSERT_EQ(0, gdl__thread_start(&t[i], hammer, NULL));
    for (i = 0; i < 4; i++) gdl__thread_join(&t[i]);
    ASSERT_EQ(80000, sh.counter);
    ASSERT_EQ(240000, (long long)gdl__atomic_load(&sh.atomic64, GDL__MO_SEQ_CST));
    ASSERT_EQ(80000, (long long)gdl__atomic_load(&sh.atomic32, GDL__MO_SEQ_CST));
    PASS();
}

TEST atomic_cas(void) {
    uint64_t v = 5, expected = 4;
    int w = 7, we = 7;
    ASSERT_FALSE(gdl__atomic_cas(&v, &expected, (uint64_t)9, 0, GDL__MO_ACQ_REL, GDL__MO_ACQUIRE));
    ASSERT_EQ(5, (long long)expected); /* the value seen */
    ASSERT(gdl__atomic_cas(&v, &expected, (uint64_t)1 << 40, 0, GDL__MO_ACQ_REL, GDL__MO_ACQUIRE));
    ASSERT_EQ((long long)1 << 40, (long long)gdl__atomic_load(&v, GDL__MO_ACQUIRE));
    ASSERT(gdl__atomic_cas(&w, &we, 8, 1, GDL__MO_ACQUIRE, GDL__MO_RELAXED) || we == 7);
    gdl__atomic_store(&w, -2, GDL__MO_RELEASE);
    ASSERT_EQ(-1, (long long)gdl__atomic_add(&w, 1, GDL__MO_RELAXED));
    PASS();
}

/* two threads hand a turn back and forth through one condition variable */
static void *pong(void *arg) {
    int i;
    (void)arg;
    for (i = 0; i < 200; i++) {
        gdl__mutex_lock(&sh.mu);
        while (sh.turn != 1) gdl__cond_wait(&sh.cv, &sh.mu);
        sh.turn = 0;
        gdl__cond_broadcast(&sh.cv);
        gdl__mutex_unlock(&sh.mu);
    }
    return NULL;
}
TEST condition_variable(void) {
    gdl__thread t;
    int i;
    sh.turn = 0;
    ASSERT_EQ(0, gdl__thread_start(&t, pong, NULL));
    for (i = 0; i < 200; i++) {
        gdl__mutex_lock(&sh.mu);
        while (sh.turn != 0) gdl__cond_wait(&sh.cv, &sh.mu);
        sh.turn = 1;
        gdl__cond_signal(&sh.cv);
        gdl__mutex_unlock(&sh.mu);
    }
    gdl__mutex_lock(&sh.mu);
    while (sh.turn != 0) gdl__cond_wait(&sh.cv, &sh.mu);
    gdl__mutex_unlock(&sh.mu);
    gdl__thread_join(&t);
    PASS();
}

static gdl__once_flag once = GDL__ONCE_INIT;
static int once_runs;
static void once_body(void) { once_runs++; }
static void *call_once(void *arg) {
    (void)arg;
    gdl__once(&once, once_body);
    return NULL;
}
TEST once_only(void) {
    gdl__thread t[4];
    int i;
    for (i = 0; i < 4; i++) ASSERT_EQ(0, gdl__thread_start(&t[i], call_once, NULL));
    for (i = 0; i < 4; i++) gdl__thread_join(&t[i]);
    call_once(NULL);
    ASSERT_EQ(1, once_runs);
    PASS();
}
#endif

/* the thread pool: a GEMM on 4 threads gives the bits of 1 thread */
TEST pool_bitwise(void) {
    enum { M = 96, N = 80, K = 300 };
    static gdl_real a[M * K], b[K * N], c1[M * N], c4[M * N];
    int i;
    for (i = 0; i < M * K; i++) a[i] = (gdl_real)((i * 37 % 101) - 50) / 17;
    for (i = 0; i < K * N; i++) b[i] = (gdl_real)((i * 53 % 89) - 44) / 13;
    gdl_set_num_threads(1);
    gdl_gemm_cpu(0, 0, M, N, K, 1, a, K, b, N, 0, c1, N);
    gdl_set_num_threads(4);
    gdl_gemm_cpu(0, 0, M, N, K, 1, a, K, b, N, 0, c4, N);
    gdl_set_num_threads(0);
    ASSERT_EQ(0, memcmp(c1, c4, sizeof c1));
    PASS();
}

TEST clocks(void) {
    double w0 = gdl_now(), m0 = gdl__os_monotonic_seconds(), m1;
    ASSERT_GT(w0, 1.5e9); /* seconds since 1970: after 2017 */
    gdl__os_sleep_ms(30);
    gdl__os_sleep_ms(0);
    m1 = gdl__os_monotonic_seconds();
    if (m0 >= 0) ASSERT_GE(m1 - m0, 0.02); /* a sleep takes at least about its time */
    ASSERT_GE(gdl_now() - w0, 0.02);
    PASS();
}

TEST cpus_and_processes(void) {
    ASSERT_GE(gdl__os_cpu_count(), 1);
    ASSERT_GE(gdl_get_num_threads(), 1);
    ASSERT_GT(gdl__os_pid(), 0);
    ASSERT_EQ(0, gdl__os_pid_gone(gdl__os_pid()));
    ASSERT_EQ(1, gdl__os_pid_gone(0x7ffffff0L)); /* above any pid Linux or Windows hands out */
    PASS();
}

TEST directories_and_files(void) {
    char p[1300], sub[1200];
    gdl__dir d;
    const char *e;
    int seen = 0, dots = 0;
    FILE *f;
    path_in(sub, sizeof sub, "sub");
    ASSERT_EQ(0, gdl__os_mkdir(sub));
    ASSERT_EQ(-1, gdl__os_mkdir(sub));
    ASSERT_EQ(EEXIST, errno);
    snprintf(p, sizeof p, "%s/a.txt", sub);
    ASSERT_EQ(0, write_text(p, "a"));
    snprintf(p, sizeof p, "%s/b.txt", sub);
    ASSERT_EQ(0, write_text(p, "b"));
    ASSERT_EQ(0, gdl__dir_open(&d, sub));
    while ((e = gdl__dir_next(&d)) != NULL) {
        if (!strcmp(e, "a.txt") || !strcmp(e, "b.txt")) seen++;
        else if (!strcmp(e, ".") || !strcmp(e, "..")) dots++;
        else FAILf("unexpected entry %s", e);
    }
    gdl__dir_close(&d);
    ASSERT_EQ(2, seen);
    path_in(p, sizeof p, "no such dir");
    ASSERT_EQ(-1, gdl__dir_open(&d, p));
    /* fsync after a write; a regular file is no terminal */
    snprintf(p, sizeof p, "%s/a.txt", sub);
    f = fopen(p, "ab");
    ASSERT_NOT_NULL(f);
    fputs("more", f);
    ASSERT_EQ(0, fflush(f));
    ASSERT_EQ(0, gdl__os_fsync(f));
    ASSERT_EQ(0, gdl__os_isatty(f));
    fclose(f);
    ASSERT_STR_EQ("amore", read_text(p));
    remove(p);
    snprintf(p, sizeof p, "%s/b.txt", sub);
    remove(p);
    PASS();
}

TEST replace_is_atomic(void) {
    char a[1200], b[1200];
    FILE *r;
    char got[8] = {0};
    path_in(a, sizeof a, "target.txt");
    path_in(b, sizeof b, "new.txt");
    ASSERT_EQ(0, write_text(a, "old"));
    ASSERT_EQ(0, write_text(b, "new"));
    ASSERT_EQ(0, gdl__os_replace(b, a));
    ASSERT_STR_EQ("new", read_text(a));
    ASSERT_NULL(fopen(b, "rb"));
    /* with the target open for reading (gdl__os_fopen_read, as gdl_st_read opens): POSIX replaces it
       and the reader goes on reading the old contents; Windows (and Wine) refuse to replace an open
       file even with FILE_SHARE_DELETE: -1 with EACCES, and both files are as they were */
    ASSERT_EQ(0, write_text(b, "two"));
    r = gdl__os_fopen_read(a);
    ASSERT_NOT_NULL(r);
#ifdef _WIN32
    ASSERT_EQ(-1, gdl__os_replace(b, a));
    ASSERT_EQ(EACCES, errno);
    ASSERT_STR_EQ("two", read_text(b));
#else
    ASSERT_EQ(0, gdl__os_replace(b, a));
#endif
    ASSERT_EQ(3, (long long)fread(got, 1, 3, r));
    ASSERT_STR_EQ("new", got);
    fclose(r);
#ifdef _WIN32
    ASSERT_STR_EQ("new", read_text(a));
    ASSERT_EQ(0, gdl__os_replace(b, a)); /* closed: now it goes */
#endif
    ASSERT_STR_EQ("two", read_text(a));
    /* a missing source: -1 with errno */
    errno = 0;
    ASSERT_EQ(-1, gdl__os_replace(b, a));
    ASSERT_EQ(ENOENT, errno);
    remove(a);
    PASS();
}

/* a checkpoint saved over one that is open for reading (by gdl__os_fopen_read, as gdl_st_read opens
   it, or by plain fopen, as another program would): on POSIX the save replaces it; on Windows the replace
   is refused, and then the save fails with an error, the old checkpoint intact and no temporary left
   behind. Then: a dead process's temporary is removed by the next save, this process's own is not. */
TEST checkpoint_replace_while_read(void) {
    char p[1200], name[1300];
    gdl_module *m = gdl_nn_linear(4, 3, 1), *m2 = gdl_nn_linear(4, 3, 1);
    FILE *r;
    gdl__dir d;
    const char *e;
    int rc, k, temps = 0;
    ASSERT_NOT_NULL(m);
    path_in(p, sizeof p, "model.safetensors");
    ASSERT_EQ(0, gdl_save_model(m, p));
    for (k = 0; k < 2; k++) {
        r = k == 0 ? gdl__os_fopen_read(p) : fopen(p, "rb");
        ASSERT_NOT_NULL(r);
        rc = gdl_save_model(m2, p);
        fclose(r);
#ifdef _WIN32
        ASSERT_EQ(-1, rc);
        ASSERT_CONTAINS(gdl_last_error(), "cannot rename");
#else
        ASSERT_EQ(0, rc);
#endif
        ASSERT_EQ(0, gdl_load_model(m, p)); /* the old or the new one, whole */
    }
    ASSERT_EQ(0, gdl__dir_open(&d, dir));
    while ((e = gdl__dir_next(&d)) != NULL) temps += strstr(e, ".tmp.") != NULL;
    gdl__dir_close(&d);
    ASSERT_EQ(0, temps);
    snprintf(name, sizeof name, "%s.tmp.%ld.1", p, 0x7ffffff0L);
    ASSERT_EQ(0, write_text(name, "x"));
    ASSERT_EQ(0, gdl_save_model(m, p));
    ASSERT_NULL(fopen(name, "rb"));
    snprintf(name, sizeof name, "%s.tmp.%ld.999", p, gdl__os_pid());
    ASSERT_EQ(0, write_text(name, "x"));
    ASSERT_EQ(0, gdl_save_model(m, p));
    ASSERT_STR_EQ("x", read_text(name));
    remove(name);
    remove(p);
    gdl_module_free(m);
    gdl_module_free(m2);
    PASS();
}

/* ---- sockets: the TCP rendezvous's transport ---- */
#ifdef GDL__OS_SOCKETS
/* a port nobody listens at now (the system's pick, released) */
static int free_port(void) {
    gdl__sock l;
    int port;
    if (gdl__os_sock_listen(&l, 0, 1) != 0) return 0;
    port = gdl__os_sock_port(l);
    gdl__os_sock_close(l);
    return port;
}

#ifdef GDL__OS_THREADS
typedef struct {
    gdl__sock s;
    size_t n;
    int rc;
} bulk_t;
static void *send_bulk(void *arg) {
    bulk_t *b = (bulk_t *)arg;
    unsigned char *buf = (unsigned char *)malloc(b->n);
    size_t i;
    for (i = 0; buf && i < b->n; i++) buf[i] = (unsigned char)(i * 7 + i / 251);
    b->rc = buf ? gdl__os_sock_io(b->s, buf, b->n, 1, gdl_now() + 20) : -1;
    free(buf);
    return NULL;
}
#endif

/* a loopback connection: bytes both ways (4 MB in pieces while another thread sends), deadlines that
   run out, a peer that closes, a port nobody listens at */
TEST sockets_loopback(void) {
    gdl__sock l, c = GDL__SOCK_NONE, a = GDL__SOCK_NONE;
    unsigned char out[300], in[300];
    double t0;
    int port, i;
    ASSERT_EQ(0, gdl__os_sock_listen(&l, 0, 4));
    ASSERT_GT(port = gdl__os_sock_port(l), 0);
    ASSERT_EQ(0, gdl__os_sock_connect(&c, "localhost", port, gdl_now() + 10));
    ASSERT_EQ(0, gdl__os_sock_accept(l, &a, gdl_now() + 10));
    for (i = 0; i < (int)sizeof out; i++) out[i] = (unsigned char)(i * 13);
    ASSERT_EQ(0, gdl__os_sock_io(c, out, sizeof out, 1, gdl_now() + 10));
    ASSERT_EQ(0, gdl__os_sock_io(a, in, sizeof in, 0, gdl_now() + 10));
    ASSERT_EQ(0, memcmp(in, out, sizeof in));
    ASSERT_EQ(0, gdl__os_sock_io(a, out, 100, 1, gdl_now() + 10));
    ASSERT_EQ(0, gdl__os_sock_io(c, in, 100, 0, gdl_now() + 10));
    ASSERT_EQ(0, memcmp(in, out, 100));
#ifdef GDL__OS_THREADS
    { /* more than the system buffers hold: sends and receives return part of it at a time */
        bulk_t b;
        gdl__thread t;
        unsigned char *got = (unsigned char *)malloc(4u << 20);
        size_t k, bad = 0;
        ASSERT_NOT_NULL(got);
        b.s = a, b.n = 4u << 20, b.rc = -2;
        ASSERT_EQ(0, gdl__thread_start(&t, send_bulk, &b));
        i = gdl__os_sock_io(c, got, b.n, 0, gdl_now() + 20);
        gdl__thread_join(&t);
        for (k = 0; k < b.n; k++) bad += got[k] != (unsigned char)(k * 7 + k / 251);
        free(got);
        ASSERT_EQ(0, i);
        ASSERT_EQ(0, b.rc);
        ASSERT_EQ(0, (long long)bad);
    }
#endif
    /* nothing comes: the wait ends at its deadline with ETIMEDOUT */
    ASSERT_EQ(0, gdl__os_sock_readable(a));
    t0 = gdl_now();
    ASSERT_EQ(-1, gdl__os_sock_io(a, in, 1, 0, t0 + 0.2));
    ASSERT_EQ(ETIMEDOUT, errno);
    ASSERT_GE(gdl_now() - t0, 0.15);
    ASSERT_LT(gdl_now() - t0, 3);
    t0 = gdl_now();
    ASSERT_EQ(-1, gdl__os_sock_accept(l, &c, t0 + 0.2));
    ASSERT_EQ(ETIMEDOUT, errno);
    ASSERT_LT(gdl_now() - t0, 3);
    /* the peer closes: readable at once, and a read says EPIPE */
    gdl__os_sock_close(c);
    for (i = 0; i < 100 && !gdl__os_sock_readable(a); i++) gdl__os_sleep_ms(10);
    ASSERT_EQ(1, gdl__os_sock_readable(a));
    ASSERT_EQ(-1, gdl__os_sock_io(a, in, 1, 0, gdl_now() + 5));
    ASSERT_EQ(EPIPE, errno);
    gdl__os_sock_close(a);
    gdl__os_sock_close(l);
    /* nobody listens: refused, in words the C library may lack (Windows) */
    ASSERT_EQ(-1, gdl__os_sock_connect(&c, "127.0.0.1", port, gdl_now() + 10));
    ASSERT_EQ(ECONNREFUSED, errno);
    ASSERT_CONTAINS(gdl__os_sock_strerror(ECONNREFUSED), "refused");
    ASSERT_CONTAINS(gdl__os_sock_strerror(ETIMEDOUT), "timed out");
    /* a port taken: EADDRINUSE */
    ASSERT_EQ(0, gdl__os_sock_listen(&l, 0, 1));
    ASSERT_EQ(-1, gdl__os_sock_listen(&a, gdl__os_sock_port(l), 1));
    ASSERT_EQ(EADDRINUSE, errno);
    gdl__os_sock_close(l);
    PASS();
}
#endif

/* The rendezvous itself (src/dist/, which gdl_dist_init runs for NCCL jobs without MPI): rank 0 hands its
   id to ranks 1 and 2, threads of this process here; a rank that never comes is named. */
#if defined(GDL__HAVE_RDV)
static unsigned char rdv_id[GDL_COMM_ID_BYTES];
static void fill_id(unsigned char *id) {
    int i;
    for (i = 0; i < GDL_COMM_ID_BYTES; i++) id[i] = (unsigned char)(i * 29 + 3);
}
#endif
#if defined(GDL__HAVE_RDV) && defined(GDL__OS_THREADS)
typedef struct {
    int rank, port, rc;
    unsigned char id[GDL_COMM_ID_BYTES];
} joiner_t;
static void *join_rank(void *arg) {
    joiner_t *j = (joiner_t *)arg;
    j->rc = gdl__rdv_join("test", j->rank, 3, j->id, 20, gdl_now() + 20, "127.0.0.1", j->port);
    return NULL;
}
TEST rendezvous_threads(void) {
    joiner_t j[2];
    gdl__thread t[2];
    int port = free_port(), i, rc;
    ASSERT_GT(port, 0);
    fill_id(rdv_id);
    for (i = 0; i < 2; i++) {
        j[i].rank = i + 1, j[i].port = port, j[i].rc = -2;
        memset(j[i].id, 0, sizeof j[i].id);
        ASSERT_EQ(0, gdl__thread_start(&t[i], join_rank, &j[i]));
    }
    rc = gdl__rdv_serve("test", 3, rdv_id, 20, gdl_now() + 20, "127.0.0.1", port);
    for (i = 0; i < 2; i++) gdl__thread_join(&t[i]);
    ASSERT_EQ(0, rc);
    for (i = 0; i < 2; i++) {
        ASSERT_EQ(0, j[i].rc);
        ASSERT_EQ(0, memcmp(j[i].id, rdv_id, sizeof rdv_id));
    }
    ASSERT_EQ(-1, gdl__rdv_serve("test", 2, rdv_id, 0.3, gdl_now() + 0.3, "127.0.0.1", port));
    ASSERT_CONTAINS(gdl_last_error(), "1 of 2 ranks came; missing: rank 1");
    PASS();
}
#endif

/* On Windows, the rendezvous between two processes: this program again (GetModuleFileName) as rank 1,
   told the port by the environment, and this one as rank 0. (On Linux tests/test_dist_nccl.sh starts two.) */
#if defined(_WIN32) && defined(GDL__HAVE_RDV)
#define RANK1_VAR "GPUDL_TEST_RDV_RANK1_PORT"
static int rank1_main(const char *port) {
    unsigned char id[GDL_COMM_ID_BYTES], want[GDL_COMM_ID_BYTES];
    fill_id(want);
    if (gdl__rdv_join("rank 1", 1, 2, id, 20, gdl_now() + 20, "127.0.0.1", atoi(port)) != 0) {
        printf("%s\n", gdl_last_error());
        return 1;
    }
    return memcmp(id, want, sizeof id) == 0 ? 0 : 2;
}
TEST rendezvous_two_processes(void) {
    char self[MAX_PATH + 2], quoted[MAX_PATH + 4], ps[16];
    const char *args[2];
    DWORD len = GetModuleFileNameA(NULL, self, MAX_PATH);
    intptr_t child;
    int code = -1, rc, port = free_port();
    ASSERT(len > 0 && len < MAX_PATH);
    ASSERT_GT(port, 0);
    snprintf(quoted, sizeof quoted, "\"%s\"", self); /* a path holds no quote and ends in no backslash */
    snprintf(ps, sizeof ps, "%d", port);
    args[0] = quoted, args[1] = NULL;
    fill_id(rdv_id);
    ASSERT_EQ(0, _putenv_s(RANK1_VAR, ps));
    fflush(NULL);
    child = _spawnv(_P_NOWAIT, self, args);
    _putenv_s(RANK1_VAR, "");
    ASSERT(child != -1);
    rc = gdl__rdv_serve("rank 0", 2, rdv_id, 20, gdl_now() + 20, "127.0.0.1", port);
    if (_cwait(&code, child, 0) == -1) FAILm("_cwait failed");
    ASSERT_EQ(0, rc);
    ASSERT_EQ(0, code);
    PASS();
}
#endif

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    const char *base = getenv("GPUDL_TEST_DIR");
    int k = 0, rc;
#if defined(_WIN32) && defined(GDL__HAVE_RDV)
    if (getenv(RANK1_VAR) && *getenv(RANK1_VAR)) return rank1_main(getenv(RANK1_VAR));
#endif
    HARNESS_MAIN_BEGIN(argc, argv);
    /* a fresh directory: Wine hands out the same small pids run after run */
    do snprintf(dir, sizeof dir, "%s/gdl_platform_%ld_%d", base && *base ? base : ".", gdl__os_pid(), k);
    while ((rc = gdl__os_mkdir(dir)) != 0 && errno == EEXIST && ++k < 1000);
    if (rc != 0) {
        printf("cannot make %s\n", dir);
        return 1;
    }
#ifdef GDL__OS_THREADS
    RUN_TEST(threads_mutex_atomics);
    RUN_TEST(atomic_cas);
    RUN_TEST(condition_variable);
    RUN_TEST(once_only);
#endif
    RUN_TEST(pool_bitwise);
    RUN_TEST(clocks);
    RUN_TEST(cpus_and_processes);
    RUN_TEST(directories_and_files);
    RUN_TEST(replace_is_atomic);
    RUN_TEST(checkpoint_replace_while_read);
#ifdef GDL__OS_SOCKETS
    RUN_TEST(sockets_loopback);
#endif
#if defined(GDL__HAVE_RDV) && defined(GDL__OS_THREADS)
    RUN_TEST(rendezvous_threads);
#endif
#if defined(_WIN32) && defined(GDL__HAVE_RDV)
    RUN_TEST(rendezvous_two_processes);
#endif
    gdl_shutdown();
    HARNESS_MAIN_END();
}
