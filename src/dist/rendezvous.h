/* src/dist/rendezvous.h — NCCL's id from rank 0 to every rank over TCP,
   where there is no MPI, handed only to processes that know the job's token. */

/* ---- the rendezvous without MPI: NCCL's id from rank 0 over TCP, as torchrun's
   env:// store. Rank 0 listens at MASTER_PORT (on every IPv4 address, or on
   GPUDL_DIST_BIND_ADDR's); every other rank connects to MASTER_ADDR:MASTER_PORT
   (retrying while rank 0 is not up yet). Both sides prove that they know the
   job's token (gdl__rdv_token: GPUDL_DIST_TOKEN, or what the launcher gives every
   rank) by a keyed hash (HMAC-SHA-256) over a fresh nonce of the other side's, and
   the id travels masked and authenticated by the same key. A connection that does
   not prove it, or says another world size or a rank out of range, is logged (one
   line on stderr) and dropped; it never takes a rank's place nor ends the wait.
   Rank 0 serves every connection at once (one poll), so idle or slow ones cost
   nothing. Each side gives up after the timeout with an error naming the address.
   docs/security.md: what the token protects against, and what it does not.

   Messages (integers: 4 bytes, big-endian; K: the job's key; N_j, N_0: 32-byte
   nonces of the joining rank's and rank 0's; | concatenates; labels end in a 0 byte):
     hello      joiner -> 0   "gdlH" N_j                                          36 bytes
     challenge  0 -> joiner   "gdlC" N_0 HMAC(K, "gdl rank 0\0" N_j N_0)           68 bytes
     auth       joiner -> 0   "gdlA" rank world HMAC(K, "gdl joiner\0" N_0 N_j rank world)   44 bytes
     reply      0 -> joiner   "gdlI" status world id^S MAC                        172 bytes
       status 0: the id; 1: another WORLD_SIZE (world: rank 0's); 2: a rank out of range;
       3: a newer connection of this job took the rank; 4: rank 0 gave up (its timeout);
       S: the blocks HMAC(K, "gdl id\0" N_0 N_j block) (no id: zeros, unmasked);
       MAC = HMAC(K, "gdl reply\0" N_0 N_j rank, then the reply's first 140 bytes). */
#if !defined(GPUDL_MPI) && defined(GDL__OS_SOCKETS)
#define GDL__HAVE_RDV 1

/* ---- SHA-256 (FIPS 180-4) and HMAC (RFC 2104): the rendezvous's keyed hash ---- */

typedef struct {
    uint32_t h[8];
    uint64_t len; /* bytes so far */
    unsigned char b[64];
} gdl__sha256;

static const uint32_t gdl__sha256_k[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u};

static void gdl__sha256_init(gdl__sha256 *s) {
    static const uint32_t h0[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                   0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    memcpy(s->h, h0, sizeof h0);
    s->len = 0;
}

#define GDL__ROTR32(x, n) ((x) >> (n) | (x) << (32 - (n)))
/* one 64-byte block into the state */
static void gdl__sha256_block(uint32_t h[8], const unsigned char *p) {
    uint32_t w[64], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    int i;
    for (i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (i = 16; i < 64; i++) {
        uint32_t s0 = GDL__ROTR32(w[i - 15], 7) ^ GDL__ROTR32(w[i - 15], 18) ^ w[i - 15] >> 3;
        uint32_t s1 = GDL__ROTR32(w[i - 2], 17) ^ GDL__ROTR32(w[i - 2], 19) ^ w[i - 2] >> 10;
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    for (i = 0; i < 64; i++) {
        uint32_t t1 = k + (GDL__ROTR32(e, 6) ^ GDL__ROTR32(e, 11) ^ GDL__ROTR32(e, 25)) + ((e & f) ^ (~e & g)) +
                      gdl__sha256_k[i] + w[i];
        uint32_t t2 = (GDL__ROTR32(a, 2) ^ GDL__ROTR32(a, 13) ^ GDL__ROTR32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}
#undef GDL__ROTR32

static void gdl__sha256_add(gdl__sha256 *s, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    while (n > 0) {
        size_t at = (size_t)(s->len % 64), take = 64 - at < n ? 64 - at : n;
        memcpy(s->b + at, p, take);
        s->len += take, p += take, n -= take;
        if (at + take == 64) gdl__sha256_block(s->h, s->b);
    }
}

static void gdl__sha256_end(gdl__sha256 *s, unsigned char out[32]) {
    uint64_t bits = s->len * 8;
    unsigned char pad[72];
    size_t np = 64 - (size_t)((s->len + 8) % 64), i; /* 0x80, zeros, then the length fills the last block */
    memset(pad, 0, sizeof pad);
    pad[0] = 0x80;
    for (i = 0; i < 8; i++) pad[np + i] = (unsigned char)(bits >> (56 - 8 * i));
    gdl__sha256_add(s, pad, np + 8);
    for (i = 0; i < 32; i++) out[i] = (unsigned char)(s->h[i / 4] >> (24 - 8 * (i % 4)));
}

typedef struct {
    gdl__sha256 in;
    unsigned char okey[64]; /* the key ^ 0x5c */
} gdl__hmac;

static void gdl__hmac_init(gdl__hmac *m, const void *key, size_t n) {
    unsigned char k[64], ik[64];
    size_t i;
    memset(k, 0, sizeof k);
    if (n > 64) { /* a long key is its hash */
        gdl__sha256_init(&m->in);
        gdl__sha256_add(&m->in, key, n);
        gdl__sha256_end(&m->in, k);
    } else if (n) {
        memcpy(k, key, n);
    }
    for (i = 0; i < 64; i++) ik[i] = (unsigned char)(k[i] ^ 0x36), m->okey[i] = (unsigned char)(k[i] ^ 0x5c);
    gdl__sha256_init(&m->in);
    gdl__sha256_add(&m->in, ik, sizeof ik);
}

static void gdl__hmac_add(gdl__hmac *m, const void *data, size_t n) { gdl__sha256_add(&m->in, data, n); }

static void gdl__hmac_end(gdl__hmac *m, unsigned char out[32]) {
    unsigned char inner[32];
    gdl__sha256 o;
    gdl__sha256_end(&m->in, inner);
    gdl__sha256_init(&o);
    gdl__sha256_add(&o, m->okey, sizeof m->okey);
    gdl__sha256_add(&o, inner, sizeof inner);
    gdl__sha256_end(&o, out);
}

/* ---- the protocol's pieces ---- */

enum {
    GDL__RDV_NONCE = 32,
    GDL__RDV_HELLO = 4 + GDL__RDV_NONCE,
    GDL__RDV_CHAL = 4 + GDL__RDV_NONCE + 32,
    GDL__RDV_AUTH = 4 + 4 + 4 + 32,
    GDL__RDV_REPLY = 4 + 4 + 4 + GDL_COMM_ID_BYTES + 32,
    GDL__RDV_PENDING = 64,   /* connections in their handshake at once (the rest wait in the listen queue) */
    GDL__RDV_LOGGED = 32     /* dropped connections logged one by one; then one line, then none */
};
/* the reply's status */
enum { GDL__RDV_OK, GDL__RDV_WORLD, GDL__RDV_RANK, GDL__RDV_REPLACED, GDL__RDV_GAVE_UP };
#define GDL__RDV_HANDSHAKE_S 10.0 /* a connection's time from accept to a proven auth */
#define GDL__RDV_CROWDED_S 0.5    /* all GDL__RDV_PENDING taken: the oldest goes when it is this old */

static void gdl__put32(unsigned char *b, uint32_t v) {
    b[0] = (unsigned char)(v >> 24), b[1] = (unsigned char)(v >> 16), b[2] = (unsigned char)(v >> 8),
    b[3] = (unsigned char)v;
}
static uint32_t gdl__get32(const unsigned char *b) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/* The job's token: GPUDL_DIST_TOKEN, else GPUDL_JOB_UID (a Kubernetes Job's uid through the downward API),
   else what the launcher gives every rank of one job alike: torchrun's TORCHELASTIC_RUN_ID (not its default
   "none"), Slurm's SLURM_JOB_ID and SLURM_STEP_ID, Open MPI's OMPI_MCA_orte_ess_jobid or PMIx's
   PMIX_NAMESPACE. key: the rendezvous's key, HMAC(token, "gpudl rendezvous key"), where the token is
   "NAME=value" of the variables (ranks whose tokens come from different variables do not meet). src: the
   variables' names. 0: found; -1: none (key from the empty token: the protocol runs, but anyone can join). */
static int gdl__rdv_token(unsigned char key[32], char *src, size_t slen) {
    static const char *const vars[][2] = {{"GPUDL_DIST_TOKEN", NULL},       {"GPUDL_JOB_UID", NULL},
                                          {"TORCHELASTIC_RUN_ID", NULL},    {"SLURM_JOB_ID", "SLURM_STEP_ID"},
                                          {"OMPI_MCA_orte_ess_jobid", NULL}, {"PMIX_NAMESPACE", NULL}};
    unsigned char tok[65]; /* the token, or (over 64 bytes) its SHA-256, as HMAC keys it (RFC 2104) */
    size_t i, n = 0;
    gdl__hmac m;
    int found = -1;
    snprintf(src, slen, "none");
    for (i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *a = getenv(vars[i][0]), *b = vars[i][1] ? getenv(vars[i][1]) : NULL;
        const char *piece[7];
        gdl__sha256 h;
        size_t k, np = 3;
        if (!a || !a[0] || (i == 2 && !strcmp(a, "none"))) continue; /* torchrun's default run id: no secret */
        /* "NAME=value[ NAME2=value2]", hashed piece by piece: a token of any length counts whole */
        piece[0] = vars[i][0], piece[1] = "=", piece[2] = a;
        if (b && b[0]) piece[3] = " ", piece[4] = vars[i][1], piece[5] = "=", piece[6] = b, np = 7;
        for (k = 0; k < np; k++) n += strlen(piece[k]);
        if (n <= 64) {
            for (n = 0, k = 0; k < np; n += strlen(piece[k]), k++) memcpy(tok + n, piece[k], strlen(piece[k]));
        } else {
            gdl__sha256_init(&h);
            for (k = 0; k < np; k++) gdl__sha256_add(&h, piece[k], strlen(piece[k]));
            gdl__sha256_end(&h, tok);
            memset(&h, 0, sizeof h);
            n = 32;
        }
        snprintf(src, slen, "%s%s%s", vars[i][0], b && b[0] ? "+" : "", b && b[0] ? vars[i][1] : "");
        found = 0;
        break;
    }
    gdl__hmac_init(&m, tok, n);
    gdl__hmac_add(&m, "gpudl rendezvous key", 20);
    gdl__hmac_end(&m, key);
    memset(tok, 0, sizeof tok);
    return found;
}

/* a fresh nonce: the system's random bytes, hashed with the time, the process and a count, so that two
   nonces differ even where the system has no random source */
static void gdl__rdv_nonce(unsigned char out[GDL__RDV_NONCE]) {
    static int64_t count; /* atomic where there are atomics (threads may meet: tests/test_platform.c) */
    unsigned char r[32];
    double t = gdl_now();
    long pid = gdl__os_pid();
    clock_t c = clock();
    gdl__sha256 s;
    memset(r, 0, sizeof r);
    int64_t k;
    (void)gdl__os_random(r, sizeof r);
#if defined(GDL__ATOMICS)
    k = gdl__atomic_add(&count, 1, GDL__MO_RELAXED);
#else
    k = ++count;
#endif
    gdl__sha256_init(&s);
    gdl__sha256_add(&s, r, sizeof r);
    gdl__sha256_add(&s, &t, sizeof t);
    gdl__sha256_add(&s, &pid, sizeof pid);
    gdl__sha256_add(&s, &c, sizeof c);
    gdl__sha256_add(&s, &k, sizeof k);
    gdl__sha256_end(&s, out);
}

/* an HMAC begun with key over label\0 a b (a, b: nonces), the start of every MAC of the protocol */
static void gdl__rdv_mac_begin(gdl__hmac *m, const unsigned char key[32], const char *label, const unsigned char *a,
                               const unsigned char *b) {
    gdl__hmac_init(m, key, 32);
    gdl__hmac_add(m, label, strlen(label) + 1);
    gdl__hmac_add(m, a, GDL__RDV_NONCE);
    gdl__hmac_add(m, b, GDL__RDV_NONCE);
}

/* v, 4 bytes big-endian, into the HMAC */
static void gdl__rdv_mac_u32(gdl__hmac *m, uint32_t v) {
    unsigned char b[4];
    gdl__put32(b, v);
    gdl__hmac_add(m, b, 4);
}

/* HMAC(key, label\0 a b [rank world]) into out; rank and world when with_rank */
static void gdl__rdv_mac(const unsigned char key[32], const char *label, const unsigned char *a,
                         const unsigned char *b, int with_rank, uint32_t rank, uint32_t world, unsigned char out[32]) {
    gdl__hmac m;
    gdl__rdv_mac_begin(&m, key, label, a, b);
    if (with_rank) gdl__rdv_mac_u32(&m, rank), gdl__rdv_mac_u32(&m, world);
    gdl__hmac_end(&m, out);
}

/* 1 when the n bytes of a and b are equal, in a time that does not depend on where they differ */
static int gdl__rdv_same(const unsigned char *a, const unsigned char *b, size_t n) {
    unsigned d = 0;
    size_t i;
    for (i = 0; i < n; i++) d |= (unsigned)(a[i] ^ b[i]);
    return d == 0;
}

/* the id's bytes at p masked, or unmasked, by the session's key stream HMAC(K, "gdl id\0" N_0 N_j block) */
static void gdl__rdv_mask(const unsigned char key[32], const unsigned char *n0, const unsigned char *nj,
                          unsigned char *p) {
    unsigned char mask[32];
    uint32_t i;
    for (i = 0; i * 32 < GDL_COMM_ID_BYTES; i++) {
        gdl__hmac m;
        size_t j;
        gdl__rdv_mac_begin(&m, key, "gdl id", n0, nj);
        gdl__rdv_mac_u32(&m, i);
        gdl__hmac_end(&m, mask);
        for (j = 0; j < 32 && i * 32 + j < GDL_COMM_ID_BYTES; j++) p[i * 32 + j] ^= mask[j];
    }
}

/* the MAC of reply r (its first GDL__RDV_REPLY - 32 bytes) to `rank` in the session (n0, nj) */
static void gdl__rdv_reply_mac(const unsigned char key[32], const unsigned char *n0, const unsigned char *nj,
                               uint32_t rank, const unsigned char *r, unsigned char out[32]) {
    gdl__hmac m;
    gdl__rdv_mac_begin(&m, key, "gdl reply", n0, nj);
    gdl__rdv_mac_u32(&m, rank);
    gdl__hmac_add(&m, r, GDL__RDV_REPLY - 32);
    gdl__hmac_end(&m, out);
}

/* The reply to `rank` of the session (n0, nj): status, world, the id masked (status 0) and the MAC. */
static void gdl__rdv_reply(const unsigned char key[32], const unsigned char *n0, const unsigned char *nj,
                           uint32_t rank, uint32_t status, int world, const unsigned char *id,
                           unsigned char r[GDL__RDV_REPLY]) {
    memset(r, 0, GDL__RDV_REPLY);
    memcpy(r, "gdlI", 4);
    gdl__put32(r + 4, status);
    gdl__put32(r + 8, (uint32_t)world);
    if (status == GDL__RDV_OK) {
        memcpy(r + 12, id, GDL_COMM_ID_BYTES);
        gdl__rdv_mask(key, n0, nj, r + 12);
    }
    gdl__rdv_reply_mac(key, n0, nj, rank, r, r + GDL__RDV_REPLY - 32);
}

/* ---- rank 0 ---- */

/* a connection of rank 0's: in its handshake (pending) or holding a rank (joined) */
typedef struct {
    gdl__sock fd;
    int stage;              /* pending: 0 reads the hello, 1 the auth */
    size_t have;            /* bytes of the message read */
    unsigned char buf[GDL__RDV_AUTH > GDL__RDV_HELLO ? GDL__RDV_AUTH : GDL__RDV_HELLO];
    unsigned char n0[GDL__RDV_NONCE], nj[GDL__RDV_NONCE];
    double since, until; /* accepted; the handshake's deadline */
    char peer[24];       /* "address:port" */
} gdl__rdv_conn;

/* rank 0's rendezvous: the job, its connections, what was dropped */
typedef struct {
    const char *op, *addr;
    long port;
    int world, got; /* ranks joined, rank 0 aside */
    const unsigned char *key, *id;
    gdl__rdv_conn *rank; /* by rank: fd GDL__SOCK_NONE while none holds it */
    gdl__rdv_conn pend[GDL__RDV_PENDING];
    int npend;
    long dropped, logged;
    char note[300]; /* the last refusal of a process that knew the token (for the timeout's error) */
} gdl__rdv_server;

/* One line on stderr for a connection dropped (the first GDL__RDV_LOGGED of them, then one line saying the
   rest are not logged). */
static void gdl__rdv_log(gdl__rdv_server *sv, const char *peer, const char *why) {
    sv->dropped++;
    if (sv->logged < GDL__RDV_LOGGED)
        fprintf(stderr, "gpudl rendezvous (rank 0, MASTER_PORT=%ld): dropped the connection from %s: %s\n",
                sv->port, peer, why);
    else if (sv->logged == GDL__RDV_LOGGED)
        fprintf(stderr, "gpudl rendezvous (rank 0, MASTER_PORT=%ld): more connections dropped; not logged\n",
                sv->port);
    sv->logged++;
}

/* pending connection i closed (logged with why, unless NULL); the last pending one takes its place */
static void gdl__rdv_drop_pending(gdl__rdv_server *sv, int i, const char *why) {
    if (why) gdl__rdv_log(sv, sv->pend[i].peer, why);
    gdl__os_sock_close(sv->pend[i].fd);
    sv->pend[i] = sv->pend[--sv->npend];
}

/* reply `status` to the connection c that proved the token as `rank` (best effort: it may be gone) */
static void gdl__rdv_answer(gdl__rdv_server *sv, const gdl__rdv_conn *c, uint32_t rank, uint32_t status) {
    unsigned char r[GDL__RDV_REPLY];
    gdl__rdv_reply(sv->key, c->n0, c->nj, rank, status, sv->world, sv->id, r);
    (void)gdl__os_sock_io(c->fd, r, sizeof r, 1, gdl_now() + 1); /* 172 bytes: the send buffer takes them */
}

/* A complete auth of pending connection i: a slot for a proven rank of this world; else logged and dropped. */
static void gdl__rdv_on_auth(gdl__rdv_server *sv, int i) {
    gdl__rdv_conn *c = &sv->pend[i];
    unsigned char mac[32];
    char why[200];
    uint32_t r = gdl__get32(c->buf + 4), w = gdl__get32(c->buf + 8);
    if (memcmp(c->buf, "gdlA", 4) != 0) {
        gdl__rdv_drop_pending(sv, i, "its second message is not a rendezvous auth");
        return;
    }
    gdl__rdv_mac(sv->key, "gdl joiner", c->n0, c->nj, 1, r, w, mac);
    if (!gdl__rdv_same(mac, c->buf + 12, 32)) {
        snprintf(why, sizeof why, "says rank %lu of %lu but does not prove it knows the job's token",
                 (unsigned long)r, (unsigned long)w);
        gdl__rdv_drop_pending(sv, i, why);
        return;
    }
    if (w != (uint32_t)sv->world || r == 0 || r >= (uint32_t)sv->world) {
        if (w != (uint32_t)sv->world)
            snprintf(why, sizeof why, "knows the token but says WORLD_SIZE=%lu, rank 0 says %d (it is told so)",
                     (unsigned long)w, sv->world);
        else
            snprintf(why, sizeof why, "knows the token but says rank %lu, not in [1, %d) (it is told so)",
                     (unsigned long)r, sv->world);
        snprintf(sv->note, sizeof sv->note, "; refused %s, which %s", c->peer, why);
        gdl__rdv_answer(sv, c, r, w != (uint32_t)sv->world ? GDL__RDV_WORLD : GDL__RDV_RANK);
        gdl__rdv_drop_pending(sv, i, why);
        return;
    }
    if (sv->rank[r].fd != GDL__SOCK_NONE) { /* the rank came again (restarted): the newer connection holds it */
        snprintf(why, sizeof why, "rank %lu came again from %s after %.1f s: this older connection is told so",
                 (unsigned long)r, c->peer, gdl_now() - sv->rank[r].since);
        gdl__rdv_answer(sv, &sv->rank[r], r, GDL__RDV_REPLACED);
        gdl__rdv_log(sv, sv->rank[r].peer, why);
        gdl__os_sock_close(sv->rank[r].fd);
    } else {
        sv->got++;
    }
    sv->rank[r] = *c;
    sv->pend[i] = sv->pend[--sv->npend];
}

/* Pending connection i can be read: the rest of its message; a complete hello is answered with the
   challenge, a complete auth judged. */
static void gdl__rdv_on_read(gdl__rdv_server *sv, int i) {
    gdl__rdv_conn *c = &sv->pend[i];
    size_t need = c->stage == 0 ? GDL__RDV_HELLO : GDL__RDV_AUTH;
    unsigned char chal[GDL__RDV_CHAL];
    long n = gdl__os_sock_read_some(c->fd, c->buf + c->have, need - c->have);
    if (n <= 0) {
        char why[160];
        snprintf(why, sizeof why, "it closed after %lu bytes of its %s%s%s", (unsigned long)c->have,
                 c->stage ? "auth" : "hello", n < 0 ? ": " : "", n < 0 ? gdl__os_sock_strerror(errno) : "");
        gdl__rdv_drop_pending(sv, i, why);
        return;
    }
    if ((c->have += (size_t)n) < need) return;
    if (c->stage == 1) {
        gdl__rdv_on_auth(sv, i);
        return;
    }
    if (memcmp(c->buf, "gdlH", 4) != 0) {
        gdl__rdv_drop_pending(sv, i, "not a rendezvous hello");
        return;
    }
    memcpy(c->nj, c->buf + 4, GDL__RDV_NONCE);
    gdl__rdv_nonce(c->n0);
    memcpy(chal, "gdlC", 4);
    memcpy(chal + 4, c->n0, GDL__RDV_NONCE);
    gdl__rdv_mac(sv->key, "gdl rank 0", c->nj, c->n0, 0, 0, 0, chal + 4 + GDL__RDV_NONCE);
    if (gdl__os_sock_io(c->fd, chal, sizeof chal, 1, gdl_now() + 1) < 0) { /* 68 bytes to a new connection */
        gdl__rdv_drop_pending(sv, i, "it did not take the challenge");
        return;
    }
    c->stage = 1, c->have = 0;
}

/* A new connection, if the listener has one: pending; when GDL__RDV_PENDING are, the oldest goes. */
static void gdl__rdv_on_accept(gdl__rdv_server *sv, gdl__sock lfd, double deadline) {
    gdl__rdv_conn c;
    double now = gdl_now();
    memset(&c, 0, sizeof c);
    if (gdl__os_sock_accept_from(lfd, &c.fd, c.peer, sizeof c.peer, now + 1) != 0) { /* poll: one waits */
        gdl__os_sleep_ms(10); /* gone before it was taken, or no descriptor left (EMFILE): no busy loop */
        return;
    }
    c.since = now;
    c.until = now + GDL__RDV_HANDSHAKE_S < deadline ? now + GDL__RDV_HANDSHAKE_S : deadline;
    if (sv->npend == GDL__RDV_PENDING) {
        int i, old = 0;
        for (i = 1; i < sv->npend; i++)
            if (sv->pend[i].since < sv->pend[old].since) old = i;
        gdl__rdv_drop_pending(sv, old, "too many connections in their handshake at once: the oldest goes");
    }
    sv->pend[sv->npend++] = c;
}

/* Every rank has come: those whose connection closed since (restarted, killed) must come again. */
static void gdl__rdv_recheck(gdl__rdv_server *sv) {
    int r;
    for (r = 1; r < sv->world; r++)
        if (gdl__os_sock_readable(sv->rank[r].fd)) { /* owes nothing more: readable is its end */
            char why[80];
            snprintf(why, sizeof why, "rank %d went away %.1f s after it came: waiting for it again", r,
                     gdl_now() - sv->rank[r].since);
            gdl__rdv_log(sv, sv->rank[r].peer, why);
            gdl__os_sock_close(sv->rank[r].fd);
            sv->rank[r].fd = GDL__SOCK_NONE, sv->got--;
        }
}

/* rank 0 gave up at the deadline: the error names the missing ranks and what was dropped */
static void gdl__rdv_timeout_error(gdl__rdv_server *sv, double timeout) {
    char missing[200], drops[120] = "";
    size_t k = 0;
    int i;
    for (i = 1; i < sv->world && k + 12 < sizeof missing; i++)
        if (sv->rank[i].fd == GDL__SOCK_NONE)
            k += (size_t)snprintf(missing + k, sizeof missing - k, "%s%d", k ? ", " : "", i);
    if (sv->dropped)
        snprintf(drops, sizeof drops, "; %ld connections dropped (stderr says why)", sv->dropped);
    gdl__set_error("%s: rank 0 waited %g s (GPUDL_DIST_TIMEOUT) at MASTER_ADDR=%s MASTER_PORT=%ld: %d of %d ranks "
                   "came; missing: rank %s%s%s", sv->op, timeout, sv->addr, sv->port, sv->got + 1, sv->world,
                   missing, sv->note, drops);
}

/* One round: the listener and every pending connection polled at once; what is ready is served. */
static int gdl__rdv_round(gdl__rdv_server *sv, gdl__sock lfd, double deadline) {
    gdl__sock s[1 + GDL__RDV_PENDING];
    unsigned char out[1 + GDL__RDV_PENDING], ready[1 + GDL__RDV_PENDING];
    double now = gdl_now(), until = deadline;
    int i, n = 0, listen = 1;
    for (i = sv->npend - 1; i >= 0; i--) /* handshakes past their time */
        if (sv->pend[i].until <= now) gdl__rdv_drop_pending(sv, i, "no proof of the token in time");
    if (sv->npend == GDL__RDV_PENDING) { /* crowded: new ones wait until the oldest may go */
        double old = sv->pend[0].since;
        for (i = 1; i < sv->npend; i++) old = sv->pend[i].since < old ? sv->pend[i].since : old;
        listen = now >= old + GDL__RDV_CROWDED_S;
        if (!listen && old + GDL__RDV_CROWDED_S < until) until = old + GDL__RDV_CROWDED_S;
    }
    if (listen) s[n] = lfd, out[n++] = 0;
    for (i = 0; i < sv->npend; i++) {
        s[n] = sv->pend[i].fd, out[n++] = 0;
        if (sv->pend[i].until < until) until = sv->pend[i].until;
    }
    if ((n = gdl__os_sock_poll(s, out, ready, n, until)) < 0) {
        gdl__set_error("%s: rank 0's wait for the ranks at MASTER_PORT=%ld failed: %s", sv->op, sv->port,
                       gdl__os_sock_strerror(errno));
        return -1;
    }
    if (n == 0) return 0;
    for (i = sv->npend - 1; i >= 0; i--) /* from the end: serving one may move the last into its place */
        if (ready[listen + i]) gdl__rdv_on_read(sv, i);
    if (listen && ready[0]) gdl__rdv_on_accept(sv, lfd, deadline);
    return 0;
}

static const char *gdl__rdv_bind_addr(const char *addr);

/* gdl__rendezvous on rank 0: waits for every other rank at MASTER_PORT (until deadline), then sends each the
   id. The token from the environment (gdl__rdv_token), the address to listen at too (gdl__rdv_bind_addr). */
static int gdl__rdv_serve(const char *op, int world, const unsigned char *id, double timeout, double deadline,
                          const char *addr, long port) {
    const char *bind_addr = gdl__rdv_bind_addr(addr);
    unsigned char key[32];
    char src[64];
    gdl__rdv_server *sv;
    gdl__sock lfd;
    int i, rc = -1;
    if (gdl__rdv_token(key, src, sizeof src) < 0)
        fprintf(stderr, "gpudl rendezvous (rank 0, MASTER_PORT=%ld): no job token (GPUDL_DIST_TOKEN, or the "
                        "launcher's job id): any process that reaches the port can join; see docs/security.md\n",
                port);
    if (!(sv = (gdl__rdv_server *)GPUDL_MALLOC(sizeof *sv)) ||
        !(sv->rank = (gdl__rdv_conn *)GPUDL_MALLOC(sizeof(gdl__rdv_conn) * (size_t)world))) {
        GPUDL_FREE(sv);
        gdl__set_error("%s: out of memory", op);
        return -1;
    }
    sv->op = op, sv->addr = addr, sv->port = port, sv->world = world, sv->got = 0;
    sv->key = key, sv->id = id, sv->npend = 0, sv->dropped = sv->logged = 0, sv->note[0] = 0;
    for (i = 0; i < world; i++) sv->rank[i].fd = GDL__SOCK_NONE;
    /* the listen queue: every rank, and room for strangers beside them (the kernel caps it) */
    if ((i = gdl__os_sock_listen_at(&lfd, bind_addr, (int)port, world < 4096 - 128 ? world + 128 : 4096)) != 0) {
        int e = errno;
        gdl__set_error("%s: rank 0 cannot listen at %s%s MASTER_PORT=%ld: %s", op,
                       bind_addr ? "address " : "every address,", bind_addr ? bind_addr : "", port,
                       i == -2 ? "that is no IPv4 address"
                       : e == EADDRNOTAVAIL ? "not an address of this machine" : gdl__os_sock_strerror(e));
        GPUDL_FREE(sv->rank), GPUDL_FREE(sv);
        memset(key, 0, sizeof key);
        return -1;
    }
    while (sv->got < sv->world - 1) {
        if (gdl_now() >= deadline) {
            gdl__rdv_timeout_error(sv, timeout);
            for (i = 1; i < world; i++)
                if (sv->rank[i].fd != GDL__SOCK_NONE) gdl__rdv_answer(sv, &sv->rank[i], (uint32_t)i, GDL__RDV_GAVE_UP);
            goto done;
        }
        if (gdl__rdv_round(sv, lfd, deadline) < 0) goto done;
        if (sv->got == world - 1) gdl__rdv_recheck(sv);
    }
    rc = 0;
    for (i = 1; i < world; i++) {
        unsigned char r[GDL__RDV_REPLY];
        gdl__rdv_reply(key, sv->rank[i].n0, sv->rank[i].nj, (uint32_t)i, GDL__RDV_OK, world, id, r);
        if (gdl__os_sock_io(sv->rank[i].fd, r, sizeof r, 1, deadline) < 0 && rc == 0) {
            gdl__set_error("%s: rank 0 could not send the job's id to rank %d (%s): %s", op, i, sv->rank[i].peer,
                           gdl__os_sock_strerror(errno));
            rc = -1;
        }
    }
done:
    for (i = 1; i < world; i++)
        if (sv->rank[i].fd != GDL__SOCK_NONE) gdl__os_sock_close(sv->rank[i].fd);
    while (sv->npend) gdl__rdv_drop_pending(sv, sv->npend - 1, NULL);
    gdl__os_sock_close(lfd);
    GPUDL_FREE(sv->rank), GPUDL_FREE(sv);
    memset(key, 0, sizeof key);
    return rc;
}

/* ---- the other ranks ---- */

/* One try at rank 0 over the connection fd: hello, rank 0's proof, auth, the reply. 0: the id; 1: try again
   (the connection closed before rank 0's challenge: rank 0 was crowded, or something else listens
   there; why in `last`); -1 + error. t0: when this rank began. */
static int gdl__rdv_join_once(const char *op, gdl__sock fd, int rank, int world, unsigned char *id, double t0,
                              double timeout, double deadline, const char *where, const unsigned char key[32],
                              const char *src, char *last, size_t llen) {
    unsigned char nj[GDL__RDV_NONCE], msg[GDL__RDV_CHAL], mac[32], r[GDL__RDV_REPLY];
    const unsigned char *n0 = msg + 4;
    double asked;
    uint32_t st;
    int e;
    gdl__rdv_nonce(nj);
    memcpy(msg, "gdlH", 4);
    memcpy(msg + 4, nj, sizeof nj);
    if (gdl__os_sock_io(fd, msg, GDL__RDV_HELLO, 1, deadline) < 0 ||
        gdl__os_sock_io(fd, msg, GDL__RDV_CHAL, 0, deadline) < 0) {
        if ((e = errno) == ETIMEDOUT) {
            gdl__set_error("%s: rank %d: the process at %s took the connection but did not answer the hello within "
                           "%g s (GPUDL_DIST_TIMEOUT): not this job's rank 0, or one that is stuck", op, rank,
                           where, timeout);
            return -1;
        }
        snprintf(last, llen, "%.1f s after this rank began, the listener closed the connection without "
                 "answering the hello (%s)", gdl_now() - t0,
                 e == EPIPE ? "it closed its end" : gdl__os_sock_strerror(e));
        return 1;
    }
    gdl__rdv_mac(key, "gdl rank 0", nj, n0, 0, 0, 0, mac);
    if (memcmp(msg, "gdlC", 4) != 0 || !gdl__rdv_same(mac, msg + 4 + GDL__RDV_NONCE, 32)) {
        gdl__set_error("%s: rank %d: the process listening at %s is not this job's rank 0: it %s (this rank's "
                       "token comes from %s). Another job or a stranger holds the port, or the ranks' tokens "
                       "differ: set GPUDL_DIST_TOKEN alike on every rank (docs/security.md)", op, rank, where,
                       memcmp(msg, "gdlC", 4) ? "does not speak the rendezvous"
                                              : "does not prove that it knows the job's token", src);
        return -1;
    }
    memcpy(r, "gdlA", 4);
    gdl__put32(r + 4, (uint32_t)rank), gdl__put32(r + 8, (uint32_t)world);
    gdl__rdv_mac(key, "gdl joiner", n0, nj, 1, (uint32_t)rank, (uint32_t)world, r + 12);
    asked = gdl_now();
    if (gdl__os_sock_io(fd, r, GDL__RDV_AUTH, 1, deadline) < 0 || gdl__os_sock_io(fd, r, sizeof r, 0, deadline) < 0) {
        if ((e = errno) == ETIMEDOUT)
            gdl__set_error("%s: rank %d: rank 0 at %s took this rank %.1f s after it began but sent no id within "
                           "the %g s (GPUDL_DIST_TIMEOUT): some other rank did not come", op, rank, where,
                           asked - t0, timeout);
        else
            gdl__set_error("%s: rank %d: rank 0 at %s took this rank %.1f s after it began, then closed the "
                           "connection %.1f s later without the id (%s): rank 0 failed or exited; its own error "
                           "says why", op, rank, where, asked - t0, gdl_now() - asked,
                           e == EPIPE ? "it closed its end" : gdl__os_sock_strerror(e));
        return -1;
    }
    gdl__rdv_reply_mac(key, n0, nj, (uint32_t)rank, r, mac);
    if (memcmp(r, "gdlI", 4) != 0 || !gdl__rdv_same(mac, r + GDL__RDV_REPLY - 32, 32)) {
        gdl__set_error("%s: rank %d: the answer from %s does not carry the proof of the job's token: not rank "
                       "0's (a connection tampered with?)", op, rank, where);
        return -1;
    }
    switch (st = gdl__get32(r + 4)) {
    case GDL__RDV_OK:
        gdl__rdv_mask(key, n0, nj, r + 12);
        memcpy(id, r + 12, GDL_COMM_ID_BYTES);
        return 0;
    case GDL__RDV_WORLD:
        gdl__set_error("%s: rank 0 at %s refused rank %d: it says WORLD_SIZE=%lu, this rank %d", op, where, rank,
                       (unsigned long)gdl__get32(r + 8), world);
        break;
    case GDL__RDV_RANK:
        gdl__set_error("%s: rank 0 at %s refused rank %d: not a rank of its WORLD_SIZE=%lu (rank 0 is itself)", op,
                       where, rank, (unsigned long)gdl__get32(r + 8));
        break;
    case GDL__RDV_REPLACED:
        gdl__set_error("%s: rank %d: rank 0 at %s took this rank %.1f s after it began; %.1f s later a newer "
                       "connection that knows the job's token took rank %d (a restart of this rank, or two "
                       "processes with one RANK)", op, rank, where, asked - t0, gdl_now() - asked, rank);
        break;
    case GDL__RDV_GAVE_UP:
        gdl__set_error("%s: rank %d: rank 0 at %s took this rank %.1f s after it began; %.1f s later it gave up "
                       "waiting for the other ranks (its GPUDL_DIST_TIMEOUT; its own error names the missing)", op,
                       rank, where, asked - t0, gdl_now() - asked);
        break;
    default:
        gdl__set_error("%s: rank %d: rank 0 at %s answered with status %lu, which this gpudl does not know", op,
                       rank, where, (unsigned long)st);
        break;
    }
    return -1;
}

/* gdl__rendezvous on the other ranks: reaches rank 0 (until deadline), proves the token (from the
   environment: gdl__rdv_token) and checks rank 0's proof, receives the id. */
static int gdl__rdv_join(const char *op, int rank, int world, unsigned char *id, double timeout, double deadline,
                         const char *addr, long port) {
    double t0 = gdl_now();
    char where[300], last[200] = "", src[64];
    unsigned char key[32];
    int tries = 0, rc = 0, e = 0;
    (void)gdl__rdv_token(key, src, sizeof src);
    snprintf(where, sizeof where, "MASTER_ADDR=%s MASTER_PORT=%ld", addr, port);
    for (;;) {
        gdl__sock fd = GDL__SOCK_NONE;
        if ((rc = gdl__os_sock_connect(&fd, addr, (int)port, deadline)) == 0) {
            tries++;
            rc = gdl__rdv_join_once(op, fd, rank, world, id, t0, timeout, deadline, where, key, src, last,
                                    sizeof last);
            gdl__os_sock_close(fd);
            if (rc <= 0) break;
        } else {
            e = rc == -2 ? 0 : errno;
        }
        if (gdl_now() + 0.1 > deadline) {
            if (tries)
                gdl__set_error("%s: rank %d could not get NCCL's id from rank 0 at %s within %g s "
                               "(GPUDL_DIST_TIMEOUT), %d connections; the last: %s%s%s", op, rank, where, timeout,
                               tries, last, rc < 0 ? "; then: " : "", rc < 0 ? gdl__os_sock_strerror(e) : "");
            else
                gdl__set_error("%s: rank %d could not reach rank 0 at %s within %g s (GPUDL_DIST_TIMEOUT): %s", op,
                               rank, where, timeout,
                               rc == -2 ? "MASTER_ADDR does not resolve to an address"
#ifdef GDL__OS_SOCK_NUMERIC_ONLY
                                          " (this build takes numeric IPv4 addresses only: define "
                                          "_POSIX_C_SOURCE 200112L or more for host names)"
#endif
                                        : gdl__os_sock_strerror(e));
            rc = -1;
            break;
        }
        gdl__os_sleep_ms(100); /* rank 0 may not listen yet, or dropped the connection when crowded */
    }
    memset(key, 0, sizeof key);
    return rc;
}

/* src/dist/cluster.h: MASTER_ADDR / MASTER_PORT, or what Kubeflow or srun's node list give ("" unset); 0 / -1 */
static int gdl__cluster_master(const char *op, char *addr, size_t alen, char *port, size_t plen);

/* rank 0's address to listen at: GPUDL_DIST_BIND_ADDR (an address; "MASTER_ADDR": MASTER_ADDR's), else
   MASTER_ADDR when it is this machine's loopback by name ("localhost", 127.x.y.z: every rank is here),
   else NULL (every address). Not MASTER_ADDR's address otherwise: a host name may resolve to a loopback
   address on its own host (Debian's 127.0.1.1) and to another on the others. */
static const char *gdl__rdv_bind_addr(const char *addr) {
    const char *b = getenv("GPUDL_DIST_BIND_ADDR");
    if (b && b[0]) return strcmp(b, "MASTER_ADDR") ? b : addr;
    if (!strcmp(addr, "localhost") || (!strncmp(addr, "127.", 4) && strspn(addr, "0123456789.") == strlen(addr)))
        return addr;
    return NULL;
}

/* Rank 0 hands `id` to every rank; the others receive it. 0 / -1 + error naming MASTER_ADDR, MASTER_PORT. */
static int gdl__rendezvous(const char *op, int rank, int world, unsigned char *id, double timeout) {
    char addr[256], ps[32];
    const char *bind;
    long port;
    double deadline = gdl_now() + timeout;
    if (gdl__cluster_master(op, addr, sizeof addr, ps, sizeof ps) < 0) return -1;
    if (gdl__env_str(op, "GPUDL_DIST_BIND_ADDR", 255, &bind) < 0) return -1; /* gdl__rdv_bind_addr's */
    if (!addr[0] || !ps[0]) {
        gdl__set_error("%s: %s is not set: the %d processes of a job without MPI meet at MASTER_ADDR:MASTER_PORT "
                       "(rank 0's host and a free port, as torchrun sets them)", op, !addr[0] ?
                       "MASTER_ADDR" : "MASTER_PORT", world);
        return -1;
    }
    if (gdl__parse_long(ps, 1, 65535, &port) < 0) {
        gdl__set_error("%s: MASTER_PORT='%s' is not a port number in [1, 65535]", op, ps);
        return -1;
    }
    return rank == 0 ? gdl__rdv_serve(op, world, id, timeout, deadline, addr, port)
                     : gdl__rdv_join(op, rank, world, id, timeout, deadline, addr, port);
}
#endif
