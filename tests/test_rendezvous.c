/* test_rendezvous.c — the TCP rendezvous without MPI (src/dist/rendezvous.h):
   its SHA-256 and HMAC against the published vectors (FIPS 180-4's examples,
   RFC 4231), where the job's token comes from, and jobs of three ranks
   (processes, fork) on 127.0.0.1 beside an attacker that does not know the
   token: a forged hello gets nothing, a forged rank 1 evicts nobody, a wrong
   world size is dropped, idle connections stall nothing, a fake rank 0 is
   refused by the joiners; each time the job still forms. Also a restarted
   rank, rank 0's timeout, and rank 0 bound to one address. One translation
   unit with the implementation: it calls the static gdl__rdv_ functions.
   POSIX only (fork). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>
#include <time.h>

#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

#ifndef GDL__HAVE_RDV
#error "this build has no rendezvous (GPUDL_MPI, or no sockets)"
#endif

/* ---- SHA-256 and HMAC-SHA-256 ---- */

static void hex(const unsigned char *b, size_t n, char *out) {
    size_t i;
    for (i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

/* SHA-256 of n bytes given in pieces of `chunk` bytes (every split must give one digest), as hex */
static const char *sha_hex(const void *p, size_t n, size_t chunk) {
    static char out[65];
    unsigned char d[32];
    gdl__sha256 s;
    size_t k;
    gdl__sha256_init(&s);
    for (k = 0; k < n; k += chunk) gdl__sha256_add(&s, (const char *)p + k, n - k < chunk ? n - k : chunk);
    gdl__sha256_end(&s, d);
    hex(d, 32, out);
    return out;
}

TEST sha256_fips180_vectors(void) {
    static const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    static const char *four = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                              "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    static const size_t chunks[] = {1, 3, 63, 64, 65, 1000};
    char *million = (char *)malloc(1000000);
    size_t c;
    ASSERT(million != NULL);
    memset(million, 'a', 1000000);
    for (c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        ASSERT_STR_EQ("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", sha_hex("abc", 3, chunks[c]));
        ASSERT_STR_EQ("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", sha_hex("", 0, chunks[c]));
        ASSERT_STR_EQ("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
                      sha_hex(two, strlen(two), chunks[c]));
        ASSERT_STR_EQ("cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1",
                      sha_hex(four, strlen(four), chunks[c]));
    }
    ASSERT_STR_EQ("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", sha_hex(million, 1000000, 4096));
    ASSERT_STR_EQ("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", sha_hex(million, 1000000, 999));
    free(million);
    PASS();
}

TEST hmac_rfc4231_vectors(void) {
    static const char *big_data = "This is a test using a larger than block-size key and a larger than block-size "
                                  "data. The key needs to be hashed before being used by the HMAC algorithm.";
    struct {
        unsigned char key[131];
        size_t klen;
        unsigned char data[160];
        size_t dlen;
        const char *mac; /* hex; case 5: the first 128 bits */
    } v[7];
    size_t i;
    memset(v, 0, sizeof v);
    memset(v[0].key, 0x0b, v[0].klen = 20), memcpy(v[0].data, "Hi There", v[0].dlen = 8);
    v[0].mac = "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7";
    memcpy(v[1].key, "Jefe", v[1].klen = 4), memcpy(v[1].data, "what do ya want for nothing?", v[1].dlen = 28);
    v[1].mac = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
    memset(v[2].key, 0xaa, v[2].klen = 20), memset(v[2].data, 0xdd, v[2].dlen = 50);
    v[2].mac = "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe";
    for (i = 0; i < 25; i++) v[3].key[i] = (unsigned char)(i + 1);
    v[3].klen = 25, memset(v[3].data, 0xcd, v[3].dlen = 50);
    v[3].mac = "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b";
    memset(v[4].key, 0x0c, v[4].klen = 20), memcpy(v[4].data, "Test With Truncation", v[4].dlen = 20);
    v[4].mac = "a3b6167473100ee06e0c796c2955552b";
    memset(v[5].key, 0xaa, v[5].klen = 131);
    memcpy(v[5].data, "Test Using Larger Than Block-Size Key - Hash Key First", v[5].dlen = 54);
    v[5].mac = "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54";
    memset(v[6].key, 0xaa, v[6].klen = 131), memcpy(v[6].data, big_data, v[6].dlen = strlen(big_data));
    v[6].mac = "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2";
    for (i = 0; i < 7; i++) {
        gdl__hmac m;
        unsigned char d[32];
        char out[65];
        gdl__hmac_init(&m, v[i].key, v[i].klen);
        gdl__hmac_add(&m, v[i].data, 1); /* in two pieces */
        gdl__hmac_add(&m, v[i].data + 1, v[i].dlen - 1);
        gdl__hmac_end(&m, d);
        hex(d, 32, out);
        out[strlen(v[i].mac)] = 0;
        ASSERT_STR_EQ(v[i].mac, out);
    }
    PASS();
}

/* ---- where the token comes from ---- */

static const char *const token_vars[] = {"GPUDL_DIST_TOKEN", "GPUDL_JOB_UID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID",
                                         "SLURM_STEP_ID", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE",
                                         "GPUDL_DIST_BIND_ADDR", "SLURM_PROCID", "PET_MASTER_ADDR", "PET_MASTER_PORT"};

static void clear_env(void) {
    size_t i;
    for (i = 0; i < sizeof token_vars / sizeof *token_vars; i++) unsetenv(token_vars[i]);
}

/* where gdl__rdv_token found the token ("error" when it found none), its key in key */
static const char *source(unsigned char key[32]) {
    static char src[64];
    return gdl__rdv_token(key, src, sizeof src) == 0 ? src : "error";
}

TEST token_sources(void) {
    unsigned char none[32], k1[32], k2[32], k3[32];
    char src[64];
    clear_env();
    ASSERT_EQ(-1, gdl__rdv_token(none, src, sizeof src));
    ASSERT_STR_EQ("none", src);
    setenv("PMIX_NAMESPACE", "prterun-node1-1234@1", 1);
    ASSERT_STR_EQ("PMIX_NAMESPACE", source(k1));
    setenv("SLURM_JOB_ID", "4242", 1);
    ASSERT_STR_EQ("SLURM_JOB_ID", source(k2));
    setenv("SLURM_STEP_ID", "0", 1);
    ASSERT_STR_EQ("SLURM_JOB_ID+SLURM_STEP_ID", source(k3));
    ASSERT(memcmp(k2, k3, 32) != 0 && memcmp(k1, k2, 32) != 0 && memcmp(none, k1, 32) != 0);
    setenv("SLURM_STEP_ID", "1", 1); /* another step of the job: another token */
    ASSERT_STR_EQ("SLURM_JOB_ID+SLURM_STEP_ID", source(k2));
    ASSERT(memcmp(k2, k3, 32) != 0);
    setenv("TORCHELASTIC_RUN_ID", "none", 1); /* torchrun without --rdzv-id or --standalone: no secret */
    ASSERT_STR_EQ("SLURM_JOB_ID+SLURM_STEP_ID", source(k1));
    setenv("TORCHELASTIC_RUN_ID", "5c1e", 1);
    ASSERT_STR_EQ("TORCHELASTIC_RUN_ID", source(k1));
    setenv("GPUDL_JOB_UID", "0b6c7c1e-7d5a-4b8e-9f63-2d5c1f0e8a11", 1);
    ASSERT_STR_EQ("GPUDL_JOB_UID", source(k1));
    setenv("GPUDL_DIST_TOKEN", "s3cret", 1);
    ASSERT_STR_EQ("GPUDL_DIST_TOKEN", source(k1));
    setenv("GPUDL_DIST_TOKEN", "s3creT", 1);
    ASSERT_STR_EQ("GPUDL_DIST_TOKEN", source(k2));
    ASSERT(memcmp(k1, k2, 32) != 0);
    { /* a token counts whole, however long: two differing in their last byte only give two keys, and the
         key is HMAC's over the whole "NAME=value" */
        static char tok[2001], full[2100];
        gdl__hmac m;
        memset(tok, 'x', 2000);
        setenv("GPUDL_DIST_TOKEN", tok, 1);
        ASSERT_STR_EQ("GPUDL_DIST_TOKEN", source(k1));
        snprintf(full, sizeof full, "GPUDL_DIST_TOKEN=%s", tok);
        gdl__hmac_init(&m, full, strlen(full));
        gdl__hmac_add(&m, "gpudl rendezvous key", 20);
        gdl__hmac_end(&m, k3);
        ASSERT(memcmp(k1, k3, 32) == 0);
        tok[1999] = 'y';
        setenv("GPUDL_DIST_TOKEN", tok, 1);
        ASSERT_STR_EQ("GPUDL_DIST_TOKEN", source(k2));
        ASSERT(memcmp(k1, k2, 32) != 0);
    }
    setenv("GPUDL_DIST_TOKEN", "", 1); /* empty: not set */
    ASSERT_STR_EQ("GPUDL_JOB_UID", source(k1));
    clear_env();
    /* where rank 0 listens */
    ASSERT_STR_EQ("127.0.0.1", gdl__rdv_bind_addr("127.0.0.1"));
    ASSERT_STR_EQ("localhost", gdl__rdv_bind_addr("localhost"));
    ASSERT_NULL(gdl__rdv_bind_addr("node01"));
    ASSERT_NULL(gdl__rdv_bind_addr("127.0.0.1.example.org"));
    setenv("GPUDL_DIST_BIND_ADDR", "10.1.2.3", 1);
    ASSERT_STR_EQ("10.1.2.3", gdl__rdv_bind_addr("node01"));
    setenv("GPUDL_DIST_BIND_ADDR", "MASTER_ADDR", 1);
    ASSERT_STR_EQ("node01", gdl__rdv_bind_addr("node01"));
    clear_env();
    PASS();
}

/* ---- jobs of three ranks, as processes ---- */

enum { WORLD = 3 };
static unsigned char job_id[GDL_COMM_ID_BYTES];

/* a TCP port nobody listens at (the system's pick, released) */
static int free_port(void) {
    gdl__sock l;
    int port;
    if (gdl__os_sock_listen_at(&l, "127.0.0.1", 0, 1) != 0) return 0;
    port = gdl__os_sock_port(l);
    gdl__os_sock_close(l);
    return port;
}

static void nap(double s) {
    struct timespec t;
    t.tv_sec = (time_t)s, t.tv_nsec = (long)((s - (double)t.tv_sec) * 1e9);
    nanosleep(&t, NULL);
}

/* a rank started as a process: its pipe says "ok" (the id came, equal to rank 0's) or "error: ..." */
typedef struct {
    pid_t pid;
    int fd;
    char said[16384]; /* what it said; for rank 0 also its stderr (the dropped connections) */
} proc;

/* Starts rank `rank` of `world` after `delay` seconds with GPUDL_DIST_TOKEN=token (NULL: none) and the
   timeout; MASTER_ADDR=addr. */
static proc start_rank(int rank, int world, int port, const char *token, double timeout, double delay,
                       const char *addr) {
    proc p;
    int fds[2];
    memset(&p, 0, sizeof p);
    p.fd = -1;
    if (pipe(fds) != 0) return p;
    fflush(NULL);
    if ((p.pid = fork()) == 0) {
        char ps[16], out[1100];
        unsigned char id[GDL_COMM_ID_BYTES];
        int rc;
        close(fds[0]);
        dup2(fds[1], 2); /* its stderr: rank 0's log of dropped connections */
        clear_env();
        snprintf(ps, sizeof ps, "%d", port);
        setenv("MASTER_ADDR", addr, 1);
        setenv("MASTER_PORT", ps, 1);
        if (token) setenv("GPUDL_DIST_TOKEN", token, 1);
        nap(delay);
        if (rank == 0) memcpy(id, job_id, sizeof id);
        else memset(id, 0, sizeof id);
        rc = gdl__rendezvous("test", rank, world, id, timeout);
        if (rc == 0 && memcmp(id, job_id, sizeof id) == 0) snprintf(out, sizeof out, "ok\n");
        else if (rc == 0) snprintf(out, sizeof out, "error: the id that came is not rank 0's\n");
        else snprintf(out, sizeof out, "error: %s\n", gdl_last_error());
        fputs(out, stderr);
        fflush(stderr);
        _exit(0);
    }
    close(fds[1]);
    p.fd = fds[0];
    return p;
}

/* what the rank said, once it ended */
static const char *finish(proc *p) {
    size_t k = 0;
    long n;
    int st;
    while (p->fd >= 0 && k + 1 < sizeof p->said && (n = (long)read(p->fd, p->said + k, sizeof p->said - 1 - k)) > 0)
        k += (size_t)n;
    p->said[k] = 0;
    if (p->fd >= 0) close(p->fd);
    p->fd = -1;
    if (p->pid > 0) waitpid(p->pid, &st, 0);
    p->pid = 0;
    return p->said;
}

/* 1 when the rank's last line is "ok" */
static int said_ok(const proc *p) {
    size_t n = strlen(p->said);
    return n >= 3 && !strcmp(p->said + n - 3, "ok\n");
}

/* a connection to 127.0.0.1:port, retried while nobody listens (3 s); -1 */
static int dial(int port) {
    struct sockaddr_in sa;
    int k;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(0x7f000001u);
    for (k = 0; k < 300; k++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
        if (fd >= 0) close(fd);
        nap(0.01);
    }
    return -1;
}

/* n bytes read within `s` seconds: the count read (n), 0 at the end of the stream first, -1 on time out */
static long read_within(int fd, unsigned char *b, size_t n, double s) {
    size_t k = 0;
    double end = gdl_now() + s;
    while (k < n) {
        long r;
        if (gdl__os_sock_wait(fd, 0, end) < 0) return -1;
        if ((r = (long)recv(fd, b + k, n - k, 0)) <= 0) return k ? (long)k : 0;
        k += (size_t)r;
    }
    return (long)k;
}

/* An attacker without the token: a hello, the challenge, then an auth of `rank` of `world` with a proof made
   by the key of `token` (NULL: zeros). 1 when it got nothing back (no reply, the connection closed). */
static int forge_auth(int port, int rank, int world, const char *token) {
    unsigned char m[GDL__RDV_REPLY], key[32];
    int fd = dial(port), nothing;
    if (fd < 0) return 0;
    memcpy(m, "gdlH", 4);
    gdl__rdv_nonce(m + 4);
    if (write(fd, m, GDL__RDV_HELLO) != GDL__RDV_HELLO || read_within(fd, m + 4, GDL__RDV_CHAL, 3) != GDL__RDV_CHAL) {
        close(fd);
        return 0;
    }
    memmove(m, m + 4 + 4, GDL__RDV_NONCE); /* rank 0's nonce */
    memcpy(m + 100, "gdlA", 4);
    gdl__put32(m + 104, (uint32_t)rank), gdl__put32(m + 108, (uint32_t)world);
    memset(m + 112, 0, 32);
    if (token) {
        unsigned char nj[GDL__RDV_NONCE];
        memset(nj, 0, sizeof nj); /* not the hello's nonce either: it does not matter, the key is wrong */
        setenv("GPUDL_DIST_TOKEN", token, 1);
        gdl__rdv_token(key, (char *)m + 40, 20);
        unsetenv("GPUDL_DIST_TOKEN");
        gdl__rdv_mac(key, "gdl joiner", m, nj, 1, (uint32_t)rank, (uint32_t)world, m + 112);
    }
    nothing = write(fd, m + 100, GDL__RDV_AUTH) == GDL__RDV_AUTH && read_within(fd, m, sizeof m, 3) == 0;
    close(fd);
    return nothing;
}

/* the job's three ranks: 0 at once, 1 and 2 after delay1, delay2 */
static void start_job(proc r[WORLD], int port, double timeout, double delay1, double delay2) {
    r[0] = start_rank(0, WORLD, port, "job-token", timeout, 0, "127.0.0.1");
    r[1] = start_rank(1, WORLD, port, "job-token", timeout, delay1, "127.0.0.1");
    r[2] = start_rank(2, WORLD, port, "job-token", timeout, delay2, "127.0.0.1");
}

/* every rank of the job ended with the id; rank 0's stderr holds `log` (NULL: anything) */
static enum harness_result job_formed(proc r[WORLD], const char *log) {
    int i;
    for (i = 0; i < WORLD; i++) finish(&r[i]);
    for (i = 0; i < WORLD; i++)
        if (!said_ok(&r[i])) FAILf("rank %d: %s", i, r[i].said);
    if (log) ASSERT_CONTAINS(r[0].said, log);
    return HARNESS_PASS;
}

TEST job_forms(void) {
    proc r[WORLD];
    start_job(r, free_port(), 10, 0.05, 0.1);
    CHECK_CALL(job_formed(r, NULL));
    ASSERT(strstr(r[0].said, "dropped") == NULL);
    PASS();
}

/* no token anywhere: rank 0 says so, and the job forms */
TEST job_without_token(void) {
    proc r[WORLD];
    int i, port = free_port();
    for (i = 0; i < WORLD; i++) r[i] = start_rank(i, WORLD, port, NULL, 10, 0.05 * i, "127.0.0.1");
    CHECK_CALL(job_formed(r, "no job token (GPUDL_DIST_TOKEN, or the launcher's job id)"));
    PASS();
}

/* forged hellos before every rank: without a proof, with the proof of another token, a hello of the older
   protocol, garbage: each gets nothing and is logged; the job forms */
TEST forged_hello_gets_nothing(void) {
    proc r[WORLD];
    int port = free_port(), fd;
    r[0] = start_rank(0, WORLD, port, "job-token", 10, 0, "127.0.0.1");
    ASSERTm("a forged auth (no proof) was answered", forge_auth(port, 1, WORLD, NULL));
    ASSERTm("a forged auth (another token's proof) was answered", forge_auth(port, 1, WORLD, "guess"));
    fd = dial(port);
    ASSERT(fd >= 0);
    ASSERT_EQ(12, write(fd, "gdlR\0\0\0\1\0\0\0\3", 12)); /* the older hello: no token, it held a slot */
    ASSERT_EQ(36, write(dial(port), "GET / HTTP/1.0\r\n\r\n..................", 36));
    r[1] = start_rank(1, WORLD, port, "job-token", 10, 0, "127.0.0.1");
    r[2] = start_rank(2, WORLD, port, "job-token", 10, 0.05, "127.0.0.1");
    CHECK_CALL(job_formed(r, "dropped the connection from 127.0.0.1:"));
    close(fd);
    ASSERT_CONTAINS(r[0].said, "says rank 1 of 3 but does not prove it knows the job's token");
    ASSERT_CONTAINS(r[0].said, "not a rendezvous hello");
    PASS();
}

/* rank 1 has come; a forged rank 1 (no token) does not take its place */
TEST forged_rank_evicts_nobody(void) {
    proc r[WORLD];
    int port = free_port();
    start_job(r, port, 10, 0, 0.6);
    nap(0.3);
    ASSERTm("a forged rank 1 was answered", forge_auth(port, 1, WORLD, "guess"));
    ASSERTm("a forged rank 1 was answered", forge_auth(port, 1, WORLD, NULL));
    CHECK_CALL(job_formed(r, "says rank 1 of 3 but does not prove"));
    ASSERT(strstr(r[0].said, "came again") == NULL);
    PASS();
}

/* a wrong world size: from a stranger, dropped without a word; from a process with the token (a
   misconfigured rank), told so and dropped; either way the job forms */
TEST wrong_world_is_dropped(void) {
    proc r[WORLD], odd;
    int port = free_port();
    r[0] = start_rank(0, WORLD, port, "job-token", 10, 0, "127.0.0.1");
    ASSERT(forge_auth(port, 1, 5, NULL));
    odd = start_rank(1, 4, port, "job-token", 10, 0, "127.0.0.1");
    finish(&odd);
    ASSERT_CONTAINS(odd.said, "refused rank 1: it says WORLD_SIZE=3, this rank 4");
    r[1] = start_rank(1, WORLD, port, "job-token", 10, 0, "127.0.0.1");
    r[2] = start_rank(2, WORLD, port, "job-token", 10, 0, "127.0.0.1");
    CHECK_CALL(job_formed(r, "knows the token but says WORLD_SIZE=4, rank 0 says 3"));
    ASSERT_CONTAINS(r[0].said, "says rank 1 of 5 but does not prove");
    PASS();
}

/* three idle connections and one that sent half a hello, held for the whole job: the job forms in well
   under the handshake's 10 s (rank 0 read hellos one by one, up to 10 s each, before) */
TEST idle_connections_stall_nothing(void) {
    proc r[WORLD];
    int port = free_port(), idle[4], i;
    double t0;
    r[0] = start_rank(0, WORLD, port, "job-token", 8, 0, "127.0.0.1");
    for (i = 0; i < 4; i++) ASSERT((idle[i] = dial(port)) >= 0);
    ASSERT_EQ(10, write(idle[3], "gdlH012345", 10));
    t0 = gdl_now();
    r[1] = start_rank(1, WORLD, port, "job-token", 8, 0, "127.0.0.1");
    r[2] = start_rank(2, WORLD, port, "job-token", 8, 0, "127.0.0.1");
    CHECK_CALL(job_formed(r, NULL));
    ASSERT_LT(gdl_now() - t0, 5.0);
    for (i = 0; i < 4; i++) close(idle[i]);
    PASS();
}

/* 300 connections of random bytes (some begin as a hello, then send a random auth; random lengths; some
   closed at once, some left open) beside the job: rank 0 drops them all and the job forms */
TEST random_bytes_are_dropped(void) {
    proc r[WORLD];
    int port = free_port(), k, open_fds[40], nopen = 0;
    unsigned seed = 12345;
    r[0] = start_rank(0, WORLD, port, "job-token", 20, 0, "127.0.0.1");
    for (k = 0; k < 300; k++) {
        unsigned char m[256];
        size_t n, i;
        int fd = dial(port);
        ASSERT(fd >= 0);
        for (i = 0; i < sizeof m; i++) m[i] = (unsigned char)((seed = seed * 1103515245u + 12345u) >> 16);
        n = (seed >> 8) % sizeof m;
        if (k % 3 == 0 && n >= 4) memcpy(m, "gdlH", 4);
        if (k % 3 == 1 && n >= 4) memcpy(m, "gdlA", 4);
        if (n && write(fd, m, n) < 0) { /* rank 0 may have dropped it already */
        }
        if (k % 3 == 0 && n >= GDL__RDV_HELLO) { /* a hello: the challenge, then a random auth */
            unsigned char c[GDL__RDV_CHAL];
            if (read_within(fd, c, sizeof c, 2) == (long)sizeof c && write(fd, m, sizeof m) < 0) {
            }
        }
        if (k % 5 == 0 && nopen < 40) open_fds[nopen++] = fd;
        else close(fd);
    }
    r[1] = start_rank(1, WORLD, port, "job-token", 20, 0, "127.0.0.1");
    r[2] = start_rank(2, WORLD, port, "job-token", 20, 0, "127.0.0.1");
    CHECK_CALL(job_formed(r, "more connections dropped; not logged"));
    while (nopen) close(open_fds[--nopen]);
    PASS();
}

/* a listener that is not rank 0: it answers the hello with a challenge it cannot prove, or with the older
   protocol's status 0 and an id of its own: the joiner refuses it at once, saying so */
static void fake_rank0(int port, int old_style) {
    struct sockaddr_in sa;
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1, n;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(0x7f000001u);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(l, 8) != 0) _exit(1);
    for (n = 0; n < 2; n++) {
        unsigned char m[GDL__RDV_REPLY];
        int c = accept(l, NULL, NULL);
        if (c < 0) _exit(1);
        (void)read_within(c, m, GDL__RDV_HELLO, 3);
        memset(m, 0x5a, sizeof m);
        if (old_style) memset(m, 0, 12); /* "status 0, world 0", then a fake id */
        else memcpy(m, "gdlC", 4);
        if (write(c, m, old_style ? 12 + GDL_COMM_ID_BYTES : GDL__RDV_CHAL) < 0) _exit(1);
        (void)read_within(c, m, 1, 2);
        close(c);
    }
    _exit(0);
}

TEST fake_rank0_is_refused(void) {
    int old_style;
    for (old_style = 0; old_style < 2; old_style++) {
        proc r[2];
        pid_t fake;
        int port = free_port(), st, i;
        double t0 = gdl_now();
        fflush(NULL);
        if ((fake = fork()) == 0) fake_rank0(port, old_style);
        ASSERT(fake > 0);
        for (i = 0; i < 2; i++) r[i] = start_rank(i + 1, WORLD, port, "job-token", 10, 0.1, "127.0.0.1");
        for (i = 0; i < 2; i++) {
            finish(&r[i]);
            ASSERT_CONTAINS(r[i].said, "is not this job's rank 0: it");
            ASSERT_CONTAINS(r[i].said, old_style ? "does not speak the rendezvous"
                                                 : "does not prove that it knows the job's token");
        }
        ASSERT_LT(gdl_now() - t0, 5.0);
        waitpid(fake, &st, 0);
    }
    PASS();
}

/* ranks whose tokens differ: the joiner stops at rank 0's proof, naming where its token came from */
TEST other_token_is_refused(void) {
    proc r0, r1;
    int port = free_port();
    r0 = start_rank(0, 2, port, "job-token", 1.5, 0, "127.0.0.1");
    r1 = start_rank(1, 2, port, "another-token", 10, 0.05, "127.0.0.1");
    finish(&r1);
    finish(&r0);
    ASSERT_CONTAINS(r1.said, "does not prove that it knows the job's token (this rank's token comes from "
                             "GPUDL_DIST_TOKEN)");
    ASSERT_CONTAINS(r0.said, "missing: rank 1");
    ASSERT_CONTAINS(r0.said, "connections dropped");
    PASS();
}

/* rank 1 restarted: its newer connection (with the token) takes the rank; the older one is told what
   happened and when */
TEST restarted_rank_replaces_its_older_self(void) {
    proc r[WORLD], first;
    int port = free_port();
    r[0] = start_rank(0, WORLD, port, "job-token", 10, 0, "127.0.0.1");
    first = start_rank(1, WORLD, port, "job-token", 10, 0, "127.0.0.1");
    r[1] = start_rank(1, WORLD, port, "job-token", 10, 0.5, "127.0.0.1");
    r[2] = start_rank(2, WORLD, port, "job-token", 10, 0.8, "127.0.0.1");
    CHECK_CALL(job_formed(r, "rank 1 came again from 127.0.0.1:"));
    finish(&first);
    ASSERT_CONTAINS(first.said, "a newer connection that knows the job's token took rank 1");
    ASSERT_CONTAINS(first.said, "took this rank 0.");
    PASS();
}

/* rank 0's timeout names the missing rank; the rank that came is told that rank 0 gave up */
TEST timeout_names_the_missing(void) {
    proc r0, r1;
    int port = free_port();
    r0 = start_rank(0, WORLD, port, "job-token", 1, 0, "127.0.0.1");
    r1 = start_rank(1, WORLD, port, "job-token", 5, 0.05, "127.0.0.1");
    finish(&r0);
    finish(&r1);
    ASSERT_CONTAINS(r0.said, "rank 0 waited 1 s (GPUDL_DIST_TIMEOUT) at MASTER_ADDR=127.0.0.1 MASTER_PORT=");
    ASSERT_CONTAINS(r0.said, "2 of 3 ranks came; missing: rank 2");
    ASSERT_CONTAINS(r1.said, "it gave up waiting for the other ranks");
    PASS();
}

/* rank 0 bound to one address (127.0.0.2, on Linux's loopback): a connection to another address of the
   machine finds nobody; the job, at that address, forms */
TEST bind_to_one_address(void) {
    proc r[WORLD];
    struct sockaddr_in sa;
    int port = free_port(), fd, i, rc;
    char ps[16];
    gdl__sock l;
    setenv("GPUDL_DIST_BIND_ADDR", "127.0.0.2", 1);
    if (gdl__os_sock_listen_at(&l, "127.0.0.2", 0, 1) != 0) {
        unsetenv("GPUDL_DIST_BIND_ADDR");
        SKIPm("127.0.0.2 is not an address here (not Linux's loopback)");
    }
    gdl__os_sock_close(l);
    for (i = 0; i < WORLD; i++) r[i] = start_rank(i, WORLD, port, "job-token", 10, i ? 0.3 : 0, "127.0.0.2");
    nap(0.15);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(0x7f000001u);
    rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    close(fd);
    unsetenv("GPUDL_DIST_BIND_ADDR");
    CHECK_CALL(job_formed(r, NULL));
    ASSERTm("rank 0 bound to 127.0.0.2 took a connection at 127.0.0.1", rc != 0);
    /* an address that is not this machine's, one that is no address */
    snprintf(ps, sizeof ps, "%d", port);
    setenv("MASTER_ADDR", "127.0.0.1", 1), setenv("MASTER_PORT", ps, 1), setenv("GPUDL_DIST_TOKEN", "t", 1);
    setenv("GPUDL_DIST_BIND_ADDR", "192.0.2.1", 1); /* TEST-NET-1: nobody's */
    ASSERT_EQ(-1, gdl__rendezvous("test", 0, 2, job_id, 1));
    ASSERT_CONTAINS(gdl_last_error(), "rank 0 cannot listen at address 192.0.2.1 MASTER_PORT=");
    ASSERT_CONTAINS(gdl_last_error(), "not an address of this machine");
    setenv("GPUDL_DIST_BIND_ADDR", "no-such-host.invalid", 1);
    ASSERT_EQ(-1, gdl__rendezvous("test", 0, 2, job_id, 1));
    ASSERT_CONTAINS(gdl_last_error(), "that is no IPv4 address");
    clear_env();
    unsetenv("MASTER_ADDR"), unsetenv("MASTER_PORT");
    PASS();
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    size_t i;
    HARNESS_MAIN_BEGIN(argc, argv);
    signal(SIGPIPE, SIG_IGN); /* the attackers write to connections rank 0 closed */
    for (i = 0; i < sizeof job_id; i++) job_id[i] = (unsigned char)(i * 37 + 11);
    RUN_TEST(sha256_fips180_vectors);
    RUN_TEST(hmac_rfc4231_vectors);
    RUN_TEST(token_sources);
    RUN_TEST(job_forms);
    RUN_TEST(job_without_token);
    RUN_TEST(forged_hello_gets_nothing);
    RUN_TEST(forged_rank_evicts_nobody);
    RUN_TEST(wrong_world_is_dropped);
    RUN_TEST(idle_connections_stall_nothing);
    RUN_TEST(random_bytes_are_dropped);
    RUN_TEST(fake_rank0_is_refused);
    RUN_TEST(other_token_is_refused);
    RUN_TEST(restarted_rank_replaces_its_older_self);
    RUN_TEST(timeout_names_the_missing);
    RUN_TEST(bind_to_one_address);
    HARNESS_MAIN_END();
}
