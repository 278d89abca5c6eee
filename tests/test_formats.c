/* test_formats.c — the file-format layer: IDX (plain and gzipped), CIFAR-10
   binary, safetensors (round trip, every refusal, atomic writes).

   Build (from the repository root):
       cc -std=c99 -Wall -Wextra -Wpedantic -DGPUDL_ZLIB -Iparts \
          tests/test_formats.c -lz -o build/test_formats
   Without -DGPUDL_ZLIB the gzip cases check the "build with -DGPUDL_ZLIB"
   refusal instead. POSIX only (temporary directories, setrlimit).
*/
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef GPUDL_ZLIB
#include <zlib.h>
#endif

#include "harness.h"

/* A fault-injecting allocator: with fail_after = k >= 0 the (k+1)-th
   allocation from the library fails; -1 never fails. Where the C library
   tells a block's size (glibc's malloc_usable_size), it also counts the
   library's live bytes and their peak (live_bytes, peak_bytes). */
#if defined(__GLIBC__)
#include <malloc.h>
#define BLOCK_SIZE(p) ((p) ? (long long)malloc_usable_size(p) : 0)
#define COUNTS_BYTES 1
#else
#define BLOCK_SIZE(p) 0LL
#define COUNTS_BYTES 0
#endif
static long fail_after = -1;
static int injected;
static long long live_bytes, peak_bytes;
static void count_bytes(long long delta) {
    live_bytes += delta;
    if (live_bytes > peak_bytes) peak_bytes = live_bytes;
}
static void *test_malloc(size_t sz) {
    void *p;
    if (fail_after == 0) { injected = 1; return NULL; }
    if (fail_after > 0) fail_after--;
    p = malloc(sz);
    count_bytes(BLOCK_SIZE(p));
    return p;
}
static void *test_realloc(void *p, size_t sz) {
    long long before = BLOCK_SIZE(p);
    void *q;
    if (fail_after == 0) { injected = 1; return NULL; }
    if (fail_after > 0) fail_after--;
    q = realloc(p, sz);
    if (q) count_bytes(BLOCK_SIZE(q) - before);
    return q;
}
static void test_free(void *p) {
    count_bytes(-BLOCK_SIZE(p));
    free(p);
}
#define GPUDL_MALLOC(sz) test_malloc(sz)
#define GPUDL_REALLOC(p, sz) test_realloc(p, sz)
#define GPUDL_FREE(p) test_free(p)

#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"

HARNESS_MAIN_DEFS();

/* ---------------------------------------------------------------------------
   helpers
   ------------------------------------------------------------------------- */

static char tmpdir[256];
static char pathbuf[8][512];
static int pathidx;

/* tmpdir/name, in a small ring of buffers */
static const char *tp(const char *name) {
    char *p = pathbuf[pathidx++ & 7];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

static int write_bytes(const char *path, const void *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    size_t w;
    if (!f) return -1;
    w = fwrite(buf, 1, len, f);
    return (fclose(f) == 0 && w == len) ? 0 : -1;
}

#ifdef GPUDL_ZLIB
static int write_gz(const char *path, const void *buf, size_t len) {
    gzFile g = gzopen(path, "wb");
    int ok;
    if (!g) return -1;
    ok = len == 0 || gzwrite(g, buf, (unsigned)len) == (int)len;
    return (gzclose(g) == Z_OK && ok) ? 0 : -1;
}
#else
/* without zlib the loader must refuse on the magic alone */
static int write_gz(const char *path, const void *buf, size_t len) {
    static const unsigned char fake[] = {0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 3};
    (void)buf; (void)len;
    return write_bytes(path, fake, sizeof fake);
}
#endif

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    unsigned char *b;
    long n;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    b = (unsigned char *)malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* number of entries in dir whose name contains needle */
static int count_matching(const char *dir, const char *needle) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, needle)) n++;
    closedir(d);
    return n;
}

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[1024];
    if (!d) return;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (is_dir(p)) rm_tree(p);
        else remove(p);
    }
    closedir(d);
    rmdir(dir);
}

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

/* An IDX image: magic (0, 0, type, ndim), dims, then `data_len` bytes of data. */
static size_t make_idx(unsigned char *out, int type, int ndim, const uint32_t *dims, const void *data,
                       size_t data_len) {
    int d;
    out[0] = 0; out[1] = 0; out[2] = (unsigned char)type; out[3] = (unsigned char)ndim;
    for (d = 0; d < ndim; d++) put_be32(out + 4 + 4 * d, dims[d]);
    if (data_len) memcpy(out + 4 + 4 * ndim, data, data_len);
    return 4 + 4 * (size_t)ndim + data_len;
}

static char fail_why[2048];

/* Load `bytes` as a plain and as a gzipped IDX file; both must fail with a
   message naming gdl_idx_load, the file and containing `needle`, and leave
   the output untouched. 0 if so. */
static int idx_must_fail(const char *name, const unsigned char *bytes, size_t len, const char *needle) {
    int gz;
    for (gz = 0; gz < 2; gz++) {
        char fname[128];
        const char *p;
        gdl_idx out, before;
        snprintf(fname, sizeof fname, "%s%s", name, gz ? ".gz" : "");
        p = tp(fname);
        if ((gz ? write_gz(p, bytes, len) : write_bytes(p, bytes, len)) != 0) {
            snprintf(fail_why, sizeof fail_why, "cannot write %s", p);
            return -1;
        }
        memset(&out, 0xAB, sizeof out);
        before = out;
        if (gdl_idx_load(p, &out) == 0) {
            snprintf(fail_why, sizeof fail_why, "%s loaded, expected '%s'", p, needle);
            gdl_idx_free(&out);
            return -1;
        }
        if (memcmp(&out, &before, sizeof out) != 0) {
            snprintf(fail_why, sizeof fail_why, "%s: output changed on failure", p);
            return -1;
        }
#ifdef GPUDL_ZLIB
        if (!strstr(gdl_last_error(), needle)
#else
        if (!strstr(gdl_last_error(), gz ? "-DGPUDL_ZLIB" : needle)
#endif
            || !strstr(gdl_last_error(), "gdl_idx_load") || !strstr(gdl_last_error(), p)) {
            snprintf(fail_why, sizeof fail_why, "%s: message \"%s\" lacks \"%s\" or the path", p,
                     gdl_last_error(), needle);
            return -1;
        }
        remove(p);
    }
    return 0;
}

/* ---------------------------------------------------------------------------
   IDX
   ------------------------------------------------------------------------- */

static int idx_roundtrip_one(int gz) {
    unsigned char px[5 * 4 * 3], lb[5], buf[256];
    uint32_t idims[3] = {5, 4, 3}, ldims[1] = {5};
    gdl_idx im, la;
    size_t n, i;
    const char *pi = tp(gz ? "img.gz" : "img"), *pl = tp(gz ? "lab.gz" : "lab");
    for (i = 0; i < sizeof px; i++) px[i] = (unsigned char)(i * 7 + 1);
    for (i = 0; i < 5; i++) lb[i] = (unsigned char)(i * 2);
    n = make_idx(buf, 0x08, 3, idims, px, sizeof px);
    if ((gz ? write_gz(pi, buf, n) : write_bytes(pi, buf, n)) != 0) return -1;
    n = make_idx(buf, 0x08, 1, ldims, lb, sizeof lb);
    if ((gz ? write_gz(pl, buf, n) : write_bytes(pl, buf, n)) != 0) return -1;
    if (gdl_idx_load(pi, &im) != 0) { snprintf(fail_why, sizeof fail_why, "%s", gdl_last_error()); return -1; }
    if (gdl_idx_load(pl, &la) != 0) {
        snprintf(fail_why, sizeof fail_why, "%s", gdl_last_error());
        gdl_idx_free(&im);
        return -1;
    }
    n = 0;
    if (im.dtype_code != 0x08 || im.ndim != 3 || im.dims[0] != 5 || im.dims[1] != 4 || im.dims[2] != 3 ||
        im.count != 60 || im.elem_size != 1 || memcmp(im.data, px, sizeof px) != 0)
        n = 1;
    if (la.ndim != 1 || la.count != 5 || memcmp(la.data, lb, 5) != 0) n = 1;
    if (gdl_idx_check_pair(&im, &la, 10, "train") != 0) n = 1;
    if (gdl_idx_check_pair(&im, &la, 8, "train") == 0) n = 1; /* label 8 is out of [0, 8) */
    snprintf(fail_why, sizeof fail_why, "round trip content mismatch: %s", gdl_last_error());
    gdl_idx_free(&im);
    gdl_idx_free(&la);
    if (im.data != NULL || la.data != NULL) n = 1;
    return n ? -1 : 0;
}

TEST idx_roundtrip_plain(void) {
    if (idx_roundtrip_one(0) != 0) FAILm(fail_why);
    PASS();
}

TEST idx_roundtrip_gz(void) {
#ifndef GPUDL_ZLIB
    SKIPm("built without GPUDL_ZLIB");
#else
    if (idx_roundtrip_one(1) != 0) FAILm(fail_why);
    PASS();
#endif
}

TEST idx_wide_types_to_host_order(void) {
    unsigned char buf[128];
    uint32_t dims[1] = {2};
    gdl_idx x;
    size_t n;
    /* i32: 0x01020304, -2 */
    unsigned char i32[8] = {0x01, 0x02, 0x03, 0x04, 0xFF, 0xFF, 0xFF, 0xFE};
    /* f32: 1.5f = 0x3FC00000, -2.0f = 0xC0000000 */
    unsigned char f32[8] = {0x3F, 0xC0, 0, 0, 0xC0, 0, 0, 0};
    /* i16: 0x1234, -1 */
    unsigned char i16[4] = {0x12, 0x34, 0xFF, 0xFF};
    /* f64: 0.25 = 0x3FD0000000000000, 3.0 = 0x4008000000000000 */
    unsigned char f64[16] = {0x3F, 0xD0, 0, 0, 0, 0, 0, 0, 0x40, 0x08, 0, 0, 0, 0, 0, 0};
    n = make_idx(buf, 0x0C, 1, dims, i32, 8);
    ASSERT_EQ(0, write_bytes(tp("i32"), buf, n));
    ASSERT_EQ(0, gdl_idx_load(tp("i32"), &x));
    ASSERT_EQ((size_t)4, x.elem_size);
    ASSERT_EQ(0x01020304, ((int32_t *)x.data)[0]);
    ASSERT_EQ(-2, ((int32_t *)x.data)[1]);
    gdl_idx_free(&x);
    n = make_idx(buf, 0x0D, 1, dims, f32, 8);
    ASSERT_EQ(0, write_bytes(tp("f32"), buf, n));
    ASSERT_EQ(0, gdl_idx_load(tp("f32"), &x));
    ASSERT_IN_RANGE(1.5, ((float *)x.data)[0], 0.0);
    ASSERT_IN_RANGE(-2.0, ((float *)x.data)[1], 0.0);
    gdl_idx_free(&x);
    n = make_idx(buf, 0x0B, 1, dims, i16, 4);
    ASSERT_EQ(0, write_bytes(tp("i16"), buf, n));
    ASSERT_EQ(0, gdl_idx_load(tp("i16"), &x));
    ASSERT_EQ(0x1234, ((int16_t *)x.data)[0]);
    ASSERT_EQ(-1, ((int16_t *)x.data)[1]);
    gdl_idx_free(&x);
    n = make_idx(buf, 0x0E, 1, dims, f64, 16);
    ASSERT_EQ(0, write_bytes(tp("f64"), buf, n));
    ASSERT_EQ(0, gdl_idx_load(tp("f64"), &x));
    ASSERT_IN_RANGE(0.25, ((double *)x.data)[0], 0.0);
    ASSERT_IN_RANGE(3.0, ((double *)x.data)[1], 0.0);
    gdl_idx_free(&x);
    n = make_idx(buf, 0x09, 1, dims, "\xFF\x05", 2);
    ASSERT_EQ(0, write_bytes(tp("i8"), buf, n));
    ASSERT_EQ(0, gdl_idx_load(tp("i8"), &x));
    ASSERT_EQ(-1, ((int8_t *)x.data)[0]);
    ASSERT_EQ(5, ((int8_t *)x.data)[1]);
    gdl_idx_free(&x);
    PASS();
}

TEST idx_err_wrong_magic(void) {
    unsigned char buf[64];
    uint32_t dims[1] = {3};
    size_t n = make_idx(buf, 0x08, 1, dims, "abc", 3);
    buf[1] = 0x08; /* 0x00080801 */
    if (idx_must_fail("magic", buf, n, "bad magic 0x00080801")) FAILm(fail_why);
    buf[0] = 0x50; buf[1] = 0x4B; /* a zip file, say */
    if (idx_must_fail("magic2", buf, n, "first two bytes must be zero")) FAILm(fail_why);
    PASS();
}

TEST idx_err_unknown_type(void) {
    unsigned char buf[64];
    uint32_t dims[1] = {3};
    size_t n = make_idx(buf, 0x0A, 1, dims, "abc", 3);
    if (idx_must_fail("type0a", buf, n, "unknown type byte 0x0A")) FAILm(fail_why);
    buf[2] = 0x07;
    if (idx_must_fail("type07", buf, n, "unknown type byte 0x07")) FAILm(fail_why);
    buf[2] = 0x0F;
    if (idx_must_fail("type0f", buf, n, "unknown type byte 0x0F")) FAILm(fail_why);
    PASS();
}

TEST idx_err_bad_ndim(void) {
    unsigned char buf[128];
    uint32_t dims[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    size_t n = make_idx(buf, 0x08, 0, dims, "a", 1);
    if (idx_must_fail("ndim0", buf, n, "bad number of dimensions 0")) FAILm(fail_why);
    n = make_idx(buf, 0x08, 9, dims, "a", 1);
    if (idx_must_fail("ndim9", buf, n, "bad number of dimensions 9")) FAILm(fail_why);
    n = make_idx(buf, 0x08, 8, dims, "a", 1); /* 8 is the most allowed */
    ASSERT_EQ(0, write_bytes(tp("ndim8"), buf, n));
    {
        gdl_idx x;
        ASSERT_EQ(0, gdl_idx_load(tp("ndim8"), &x));
        ASSERT_EQ(8, x.ndim);
        ASSERT_EQ((int64_t)1, x.count);
        gdl_idx_free(&x);
    }
    PASS();
}

TEST idx_err_zero_dim(void) {
    unsigned char buf[64];
    uint32_t dims[3] = {2, 0, 3};
    size_t n = make_idx(buf, 0x08, 3, dims, NULL, 0);
    if (idx_must_fail("zerodim", buf, n, "dimension 1 is 0")) FAILm(fail_why);
    PASS();
}

TEST idx_err_too_big(void) {
    unsigned char buf[64];
    uint32_t dims[3] = {70000, 70000, 1}; /* 4.9e9 bytes > 2 GiB */
    size_t n = make_idx(buf, 0x08, 3, dims, NULL, 0);
    if (idx_must_fail("toobig", buf, n, "exceeds 2 GiB")) FAILm(fail_why);
    dims[0] = 0xFFFFFFFFu; dims[1] = 0xFFFFFFFFu; dims[2] = 0xFFFFFFFFu; /* would overflow 64 bits */
    n = make_idx(buf, 0x0E, 3, dims, NULL, 0);
    if (idx_must_fail("overflow", buf, n, "exceeds 2 GiB")) FAILm(fail_why);
    PASS();
}

TEST idx_err_truncated(void) {
    unsigned char buf[256], px[60];
    uint32_t dims[3] = {5, 4, 3};
    size_t n;
    memset(px, 9, sizeof px);
    n = make_idx(buf, 0x08, 3, dims, px, sizeof px);
    if (idx_must_fail("trunc", buf, n - 1, "truncated: expected 76 bytes, got 75")) FAILm(fail_why);
    if (idx_must_fail("trunc_data0", buf, 16, "truncated: expected 76 bytes, got 16")) FAILm(fail_why);
    if (idx_must_fail("trunc_hdr", buf, 10, "truncated header: expected 16 bytes, got 10")) FAILm(fail_why);
    if (idx_must_fail("trunc_magic", buf, 3, "truncated")) FAILm(fail_why);
    if (idx_must_fail("empty", buf, 0, "truncated")) FAILm(fail_why);
    PASS();
}

TEST idx_err_trailing_bytes(void) {
    unsigned char buf[256], px[60];
    uint32_t dims[3] = {5, 4, 3};
    size_t n;
    memset(px, 9, sizeof px);
    n = make_idx(buf, 0x08, 3, dims, px, sizeof px);
    buf[n] = 1; buf[n + 1] = 2; buf[n + 2] = 3;
    if (idx_must_fail("trail", buf, n + 3, "3 trailing bytes: expected 76 bytes, got 79")) FAILm(fail_why);
    PASS();
}

TEST idx_err_gz_corrupt(void) {
#ifndef GPUDL_ZLIB
    SKIPm("built without GPUDL_ZLIB");
#else
    /* a valid gzip cut in half: zlib reports the stream error */
    unsigned char buf[4096], px[3000], *gz;
    uint32_t dims[1] = {3000};
    size_t n, glen, i;
    gdl_idx x;
    for (i = 0; i < 3000; i++) px[i] = (unsigned char)(i * 31 + i / 7);
    n = make_idx(buf, 0x08, 1, dims, px, 3000);
    ASSERT_EQ((size_t)3008, n);
    ASSERT_EQ(0, write_gz(tp("full.gz"), buf, n));
    gz = read_all(tp("full.gz"), &glen);
    ASSERT_NOT_NULL(gz);
    ASSERT_EQ(0, write_bytes(tp("half.gz"), gz, glen / 2));
    ASSERT(gdl_idx_load(tp("half.gz"), &x) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "truncated");
    ASSERT_CONTAINS(gdl_last_error(), "half.gz");
    /* a whole gzip with one damaged byte is corrupt, not truncated: its CRC fails */
    gz[glen - 6] ^= 0xFF; /* inside the trailer's CRC-32 */
    ASSERT_EQ(0, write_bytes(tp("flipped.gz"), gz, glen));
    free(gz);
    ASSERT(gdl_idx_load(tp("flipped.gz"), &x) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_idx_load: ");
    ASSERT_CONTAINS(gdl_last_error(), "flipped.gz: corrupt gzip data (zlib: incorrect data check): the file is damaged");
    ASSERT(strstr(gdl_last_error(), "truncated") == NULL);
    PASS();
#endif
}

TEST idx_err_gz_without_zlib_message(void) {
#ifdef GPUDL_ZLIB
    SKIPm("built with GPUDL_ZLIB (build without it to check the refusal)");
#else
    gdl_idx x;
    ASSERT_EQ(0, write_gz(tp("nozlib.gz"), NULL, 0));
    ASSERT(gdl_idx_load(tp("nozlib.gz"), &x) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "-DGPUDL_ZLIB");
    ASSERT_CONTAINS(gdl_last_error(), "gunzip");
    PASS();
#endif
}

TEST idx_err_missing_file(void) {
    gdl_idx x;
    ASSERT(gdl_idx_load(tp("does-not-exist"), &x) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_idx_load");
    ASSERT_CONTAINS(gdl_last_error(), "does-not-exist");
    ASSERT_CONTAINS(gdl_last_error(), "cannot open");
    PASS();
}

static void fake_idx(gdl_idx *x, int type, int ndim, int64_t d0, int64_t d1, int64_t d2, void *data) {
    memset(x, 0, sizeof *x);
    x->dtype_code = type; x->ndim = ndim;
    x->dims[0] = d0; x->dims[1] = d1; x->dims[2] = d2;
    x->elem_size = 1; x->count = d0 * (ndim > 1 ? d1 : 1) * (ndim > 2 ? d2 : 1);
    x->data = data;
}

TEST idx_pair_count_mismatch(void) {
    unsigned char px[4 * 2 * 2] = {0}, lb[3] = {1, 2, 3};
    gdl_idx im, la;
    fake_idx(&im, 0x08, 3, 4, 2, 2, px);
    fake_idx(&la, 0x08, 1, 3, 0, 0, lb);
    ASSERT(gdl_idx_check_pair(&im, &la, 10, "fashion-train") != 0);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_idx_check_pair: fashion-train: 4 images but 3 labels");
    PASS();
}

TEST idx_pair_label_out_of_range(void) {
    unsigned char px[3 * 2 * 2] = {0}, lb[3] = {1, 10, 3};
    gdl_idx im, la;
    fake_idx(&im, 0x08, 3, 3, 2, 2, px);
    fake_idx(&la, 0x08, 1, 3, 0, 0, lb);
    ASSERT(gdl_idx_check_pair(&im, &la, 10, "test") != 0);
    ASSERT_CONTAINS(gdl_last_error(), "label 10 at index 1 is out of range [0, 10)");
    ASSERT_EQ(0, gdl_idx_check_pair(&im, &la, 11, "test"));
    PASS();
}

TEST idx_pair_wrong_shapes(void) {
    unsigned char px[3 * 4] = {0}, lb[3] = {1, 2, 3};
    gdl_idx im, la;
    fake_idx(&im, 0x08, 2, 3, 4, 0, px); /* 2-D images */
    fake_idx(&la, 0x08, 1, 3, 0, 0, lb);
    ASSERT(gdl_idx_check_pair(&im, &la, 10, "x") != 0);
    ASSERT_CONTAINS(gdl_last_error(), "images must be u8");
    fake_idx(&im, 0x08, 3, 3, 2, 2, px);
    fake_idx(&la, 0x0C, 1, 3, 0, 0, lb); /* i32 labels */
    ASSERT(gdl_idx_check_pair(&im, &la, 10, "x") != 0);
    ASSERT_CONTAINS(gdl_last_error(), "labels must be u8");
    fake_idx(&la, 0x08, 1, 3, 0, 0, lb);
    ASSERT(gdl_idx_check_pair(&im, &la, 0, "x") != 0);
    ASSERT_CONTAINS(gdl_last_error(), "num_classes");
    ASSERT(gdl_idx_check_pair(NULL, &la, 10, "x") != 0);
    PASS();
}

TEST idx_fashion_mnist_if_installed(void) {
    const char *dir = "/usr/share/datasets/fashion-mnist";
    char pi[256], pl[256];
    gdl_idx im, la;
    int rc;
    snprintf(pi, sizeof pi, "%s/t10k-images-idx3-ubyte.gz", dir);
    snprintf(pl, sizeof pl, "%s/t10k-labels-idx1-ubyte.gz", dir);
#ifndef GPUDL_ZLIB
    SKIPm("built without GPUDL_ZLIB");
#endif
    if (access(pi, R_OK) != 0 || access(pl, R_OK) != 0) SKIPm("dataset-fashion-mnist not installed");
    ASSERT_EQ(0, gdl_idx_load(pi, &im));
    if (gdl_idx_load(pl, &la) != 0) {
        gdl_idx_free(&im);
        FAILm(gdl_last_error());
    }
    rc = gdl_idx_check_pair(&im, &la, 10, "fashion-mnist t10k");
    ASSERT_EQ((int64_t)10000, im.dims[0]);
    ASSERT_EQ((int64_t)28, im.dims[1]);
    ASSERT_EQ((int64_t)28, im.dims[2]);
    gdl_idx_free(&im);
    gdl_idx_free(&la);
    ASSERT_EQ(0, rc);
    PASS();
}

SUITE(idx_suite) {
    RUN_TEST(idx_roundtrip_plain);
    RUN_TEST(idx_roundtrip_gz);
    RUN_TEST(idx_wide_types_to_host_order);
    RUN_TEST(idx_err_wrong_magic);
    RUN_TEST(idx_err_unknown_type);
    RUN_TEST(idx_err_bad_ndim);
    RUN_TEST(idx_err_zero_dim);
    RUN_TEST(idx_err_too_big);
    RUN_TEST(idx_err_truncated);
    RUN_TEST(idx_err_trailing_bytes);
    RUN_TEST(idx_err_gz_corrupt);
    RUN_TEST(idx_err_gz_without_zlib_message);
    RUN_TEST(idx_err_missing_file);
    RUN_TEST(idx_pair_count_mismatch);
    RUN_TEST(idx_pair_label_out_of_range);
    RUN_TEST(idx_pair_wrong_shapes);
    RUN_TEST(idx_fashion_mnist_if_installed);
}

/* ---------------------------------------------------------------------------
   CIFAR-10
   ------------------------------------------------------------------------- */

/* n records; record r has label (first_label + r) % 10 and pixels (seed + r + i) & 255 */
static int write_cifar(const char *path, int n, int first_label, int seed) {
    unsigned char *b = (unsigned char *)malloc((size_t)n * 3073 + 1);
    int r, i, rc;
    if (!b) return -1;
    for (r = 0; r < n; r++) {
        b[r * 3073] = (unsigned char)((first_label + r) % 10);
        for (i = 0; i < 3072; i++) b[r * 3073 + 1 + i] = (unsigned char)((seed + r + i) & 255);
    }
    rc = write_bytes(path, b, (size_t)n * 3073);
    free(b);
    return rc;
}

TEST cifar_good(void) {
    uint8_t *im = NULL, *lb = NULL;
    int64_t n = 0;
    int r, i;
    ASSERT_EQ(0, write_cifar(tp("c.bin"), 3, 7, 5));
    ASSERT_EQ(0, gdl_cifar10_load(tp("c.bin"), &im, &lb, &n));
    ASSERT_EQ((int64_t)3, n);
    for (r = 0; r < 3; r++) {
        ASSERT_EQ((7 + r) % 10, (int)lb[r]);
        for (i = 0; i < 3072; i++)
            if (im[r * 3072 + i] != (uint8_t)((5 + r + i) & 255)) {
                free(im); free(lb);
                FAILm("pixel mismatch");
            }
    }
    free(im);
    free(lb);
    PASS();
}

TEST cifar_bad_size(void) {
    unsigned char b[3073 * 2 + 5];
    uint8_t *im = (uint8_t *)&b, *lb = (uint8_t *)&b;
    int64_t n = 42;
    memset(b, 1, sizeof b);
    ASSERT_EQ(0, write_bytes(tp("bad.bin"), b, sizeof b));
    ASSERT(gdl_cifar10_load(tp("bad.bin"), &im, &lb, &n) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_cifar10_load");
    ASSERT_CONTAINS(gdl_last_error(), "bad.bin");
    ASSERT_CONTAINS(gdl_last_error(), "size 6151 bytes is not a positive multiple of 3073");
    ASSERT(im == (uint8_t *)&b && lb == (uint8_t *)&b && n == 42);
    ASSERT_EQ(0, write_bytes(tp("empty.bin"), b, 0));
    ASSERT(gdl_cifar10_load(tp("empty.bin"), &im, &lb, &n) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "size 0 bytes");
    ASSERT_EQ(0, write_bytes(tp("short.bin"), b, 3072));
    ASSERT(gdl_cifar10_load(tp("short.bin"), &im, &lb, &n) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "size 3072 bytes");
    PASS();
}

TEST cifar_bad_label(void) {
    unsigned char *b;
    size_t len;
    uint8_t *im, *lb;
    int64_t n;
    ASSERT_EQ(0, write_cifar(tp("lab.bin"), 4, 0, 0));
    b = read_all(tp("lab.bin"), &len);
    ASSERT_NOT_NULL(b);
    b[2 * 3073] = 10;
    ASSERT_EQ(0, write_bytes(tp("lab.bin"), b, len));
    free(b);
    ASSERT(gdl_cifar10_load(tp("lab.bin"), &im, &lb, &n) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "record 2 has label 10, out of range [0, 10)");
    PASS();
}

TEST cifar_dir(void) {
    static const int counts[5] = {2, 1, 3, 1, 2};
    char dir[300], name[64];
    uint8_t *im = NULL, *lb = NULL;
    int64_t n = 0;
    int k, r, off = 0;
    snprintf(dir, sizeof dir, "%s/cifar", tmpdir);
    ASSERT_EQ(0, mkdir(dir, 0755));
    for (k = 0; k < 5; k++) {
        snprintf(name, sizeof name, "cifar/data_batch_%d.bin", k + 1);
        ASSERT_EQ(0, write_cifar(tp(name), counts[k], k, 100 * k));
    }
    ASSERT_EQ(0, write_cifar(tp("cifar/test_batch.bin"), 3, 4, 9));
    ASSERT_EQ(0, gdl_cifar10_load_dir(dir, 1, &im, &lb, &n));
    ASSERT_EQ((int64_t)9, n);
    for (k = 0; k < 5; k++)
        for (r = 0; r < counts[k]; r++, off++) {
            ASSERT_EQ((k + r) % 10, (int)lb[off]);
            ASSERT_EQ((100 * k + r + 17) & 255, (int)im[off * 3072 + 17]);
        }
    free(im);
    free(lb);
    /* the test split, with a trailing slash on the directory */
    strcat(dir, "/");
    ASSERT_EQ(0, gdl_cifar10_load_dir(dir, 0, &im, &lb, &n));
    ASSERT_EQ((int64_t)3, n);
    ASSERT_EQ(4, (int)lb[0]);
    free(im);
    free(lb);
    /* a missing batch: the error names it, nothing leaks */
    ASSERT_EQ(0, remove(tp("cifar/data_batch_3.bin")));
    im = NULL;
    ASSERT(gdl_cifar10_load_dir(dir, 1, &im, &lb, &n) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "data_batch_3.bin");
    ASSERT_EQ(0, strncmp(gdl_last_error(), "gdl_cifar10_load_dir: ", 22)); /* the call made, not its helper */
    ASSERT_NULL(im);
    PASS();
}

/* every file call's error starts with the public call the user made, also where a helper underneath failed */
static enum harness_result starts_with(const char *s, const char *prefix) {
    ASSERTm(s, strncmp(s, prefix, strlen(prefix)) == 0);
    PASS();
}

TEST errors_name_the_call(void) {
    static const char missing[] = "no-such-dir-gpudl/file";
    uint8_t *im = NULL, *lb = NULL;
    int64_t n = 0, shape[1] = {1};
    float v = 1;
    gdl_st_tensor t;
    gdl_st_file f;
    gdl_idx idx;
    t.name = "t", t.dtype = "F32", t.ndim = 1, t.shape = shape, t.data = &v;
    ASSERT_EQ(-1, gdl_idx_load(missing, &idx));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_idx_load: no-such-dir-gpudl/file: cannot open"));
    ASSERT_EQ(-1, gdl_cifar10_load(missing, &im, &lb, &n));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_cifar10_load: no-such-dir-gpudl/file: cannot open"));
    ASSERT_EQ(-1, gdl_cifar10_load_dir(missing, 1, &im, &lb, &n));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_cifar10_load_dir: no-such-dir-gpudl/file/data_batch_1.bin"));
    ASSERT_EQ(-1, gdl_st_read(missing, &f));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_st_read: no-such-dir-gpudl/file: cannot open"));
    ASSERT_EQ(-1, gdl_st_write(missing, 1, &t, 0, NULL, NULL));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_st_write: no-such-dir-gpudl/file: "));
    /* the datasets over these files */
    ASSERT_NULL(gdl_dataset_from_idx(missing, missing));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_dataset_from_idx: "));
    ASSERT_NULL(gdl_dataset_from_cifar10(missing, 0));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_dataset_from_cifar10: "));
    ASSERT_NULL(im);
    PASS();
}

SUITE(cifar_suite) {
    RUN_TEST(cifar_good);
    RUN_TEST(cifar_bad_size);
    RUN_TEST(cifar_bad_label);
    RUN_TEST(cifar_dir);
    RUN_TEST(errors_name_the_call);
}

/* ---------------------------------------------------------------------------
   safetensors
   ------------------------------------------------------------------------- */

/* u64le(strlen(json)) + json + data */
static unsigned char stbuf[1 << 16];
static size_t mk_st(const char *json, const void *data, size_t data_len) {
    size_t n = strlen(json), k;
    for (k = 0; k < 8; k++) stbuf[k] = (unsigned char)((uint64_t)n >> (8 * k));
    memcpy(stbuf + 8, json, n);
    if (data_len) memcpy(stbuf + 8 + n, data, data_len);
    return 8 + n + data_len;
}

static const unsigned char zeros64[64] = {0};

/* gdl_st_parse(buf[0,len)) must fail mentioning needle; out untouched. */
static int st_must_fail(const unsigned char *buf, size_t len, const char *needle) {
    gdl_st_file f, before;
    memset(&f, 0x5A, sizeof f);
    before = f;
    if (gdl_st_parse(buf, len, &f, "case.safetensors") == 0) {
        snprintf(fail_why, sizeof fail_why, "parsed OK, expected failure with '%s'", needle);
        gdl_st_free(&f);
        return -1;
    }
    if (memcmp(&f, &before, sizeof f) != 0) {
        snprintf(fail_why, sizeof fail_why, "output changed on failure ('%s')", needle);
        return -1;
    }
    if (!strstr(gdl_last_error(), needle) || !strstr(gdl_last_error(), "gdl_st_parse: case.safetensors: ")) {
        snprintf(fail_why, sizeof fail_why, "message \"%s\" lacks \"%s\"", gdl_last_error(), needle);
        return -1;
    }
    return 0;
}

/* the JSON header + zero data must fail with needle */
static int st_json_fails(const char *json, size_t data_len, const char *needle) {
    size_t n = mk_st(json, zeros64, data_len);
    return st_must_fail(stbuf, n, needle);
}

static int st_json_ok(const char *json, size_t data_len) {
    gdl_st_file f;
    size_t n = mk_st(json, zeros64, data_len);
    if (gdl_st_parse(stbuf, n, &f, "ok.safetensors") != 0) {
        snprintf(fail_why, sizeof fail_why, "valid header refused: %s", gdl_last_error());
        return -1;
    }
    gdl_st_free(&f);
    return 0;
}

#define ST_FAILS(json, dlen, needle) do { if (st_json_fails(json, dlen, needle)) FAILm(fail_why); } while (0)
#define ST_OK(json, dlen) do { if (st_json_ok(json, dlen)) FAILm(fail_why); } while (0)

static const char *T_A = "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";

TEST st_roundtrip(void) {
    float w[6] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
    int64_t ids[4] = {1, -2, 3000000000LL, -4};
    uint16_t bf[3] = {0x3F80, 0xC000, 0x7F80};
    double sc = 3.5;
    const char *weird = "w\xc3\xa9ight\"\\\n\t/\x01 \xf0\x9f\x98\x80";
    int64_t s_w[2] = {2, 3}, s_ids[1] = {4}, s_empty[2] = {0, 5}, s_bf[1] = {3};
    gdl_st_tensor t[5];
    const char *mk[3] = {"format", "quote\"key", "unicode"};
    const char *mv[3] = {"pt", "line1\nline2\\", "\xce\xbb=0.1"};
    gdl_st_file f;
    const gdl_st_entry *e;
    unsigned char *raw;
    size_t rawlen;
    uint64_t N = 0;
    int k;
    t[0].name = "layer.weight"; t[0].dtype = "F32"; t[0].ndim = 2; t[0].shape = s_w; t[0].data = w;
    t[1].name = "ids"; t[1].dtype = "I64"; t[1].ndim = 1; t[1].shape = s_ids; t[1].data = ids;
    t[2].name = "empty"; t[2].dtype = "U8"; t[2].ndim = 2; t[2].shape = s_empty; t[2].data = NULL;
    t[3].name = weird; t[3].dtype = "F64"; t[3].ndim = 0; t[3].shape = NULL; t[3].data = &sc;
    t[4].name = "bf"; t[4].dtype = "BF16"; t[4].ndim = 1; t[4].shape = s_bf; t[4].data = bf;
    if (gdl_st_write(tp("rt.safetensors"), 5, t, 3, mk, mv) != 0) FAILm(gdl_last_error());
    ASSERT_EQ(0, count_matching(tmpdir, ".tmp."));

    raw = read_all(tp("rt.safetensors"), &rawlen);
    ASSERT_NOT_NULL(raw);
    for (k = 7; k >= 0; k--) N = (N << 8) | raw[k];
    free(raw);
    ASSERT_EQ((uint64_t)0, N % 8);
    ASSERT_EQ((uint64_t)rawlen, 8 + N + 24 + 32 + 0 + 8 + 6);

    if (gdl_st_read(tp("rt.safetensors"), &f) != 0) FAILm(gdl_last_error());
    ASSERT_EQ(5, f.n);
    ASSERT_EQ((uint64_t)70, f.data_len);
    ASSERT_EQ(0, (int)(((uintptr_t)f.data) % 8));
    for (k = 0; k < 5; k++) ASSERT_STR_EQ(t[k].name, f.entries[k].name); /* header order */
    e = gdl_st_find(&f, "layer.weight");
    ASSERT_NOT_NULL(e);
    ASSERT_STR_EQ("F32", e->dtype);
    ASSERT_EQ(2, e->ndim);
    ASSERT_EQ((int64_t)2, e->shape[0]);
    ASSERT_EQ((int64_t)3, e->shape[1]);
    ASSERT_EQ((uint64_t)0, e->begin);
    ASSERT_EQ((uint64_t)24, e->end);
    ASSERT_EQ(0, memcmp(f.data + e->begin, w, sizeof w));
    e = gdl_st_find(&f, "ids");
    ASSERT_NOT_NULL(e);
    ASSERT_STR_EQ("I64", e->dtype);
    ASSERT_EQ(0, memcmp(f.data + e->begin, ids, sizeof ids));
    e = gdl_st_find(&f, "empty");
    ASSERT_NOT_NULL(e);
    ASSERT_EQ(e->begin, e->end);
    ASSERT_EQ((int64_t)0, e->shape[0]);
    ASSERT_EQ((int64_t)5, e->shape[1]);
    e = gdl_st_find(&f, weird);
    ASSERT_NOT_NULL(e);
    ASSERT_EQ(0, e->ndim);
    ASSERT_STR_EQ("F64", e->dtype);
    ASSERT_EQ(0, memcmp(f.data + e->begin, &sc, 8));
    e = gdl_st_find(&f, "bf");
    ASSERT_NOT_NULL(e);
    ASSERT_STR_EQ("BF16", e->dtype);
    ASSERT_EQ(0, memcmp(f.data + e->begin, bf, 6));
    ASSERT_NULL(gdl_st_find(&f, "nope"));
    ASSERT_EQ(3, f.n_meta);
    for (k = 0; k < 3; k++) {
        ASSERT_STR_EQ(mk[k], f.meta_keys[k]);
        ASSERT_STR_EQ(mv[k], f.meta_vals[k]);
    }
    gdl_st_free(&f);
    ASSERT_EQ(0, f.n);
    ASSERT_NULL(f.entries);
    PASS();
}

TEST st_roundtrip_empty_file(void) {
    gdl_st_file f;
    unsigned char *raw;
    size_t len;
    ASSERT_EQ(0, gdl_st_write(tp("none.safetensors"), 0, NULL, 0, NULL, NULL));
    raw = read_all(tp("none.safetensors"), &len);
    ASSERT_NOT_NULL(raw);
    ASSERT_EQ((size_t)16, len);
    ASSERT_EQ(0, memcmp(raw + 8, "{}      ", 8));
    free(raw);
    ASSERT_EQ(0, gdl_st_read(tp("none.safetensors"), &f));
    ASSERT_EQ(0, f.n);
    ASSERT_EQ(0, f.n_meta);
    ASSERT_EQ((uint64_t)0, f.data_len);
    gdl_st_free(&f);
    PASS();
}

TEST st_accepts_valid_json_features(void) {
    gdl_st_file f;
    size_t n;
    /* whitespace, unknown keys with nested values, escapes, surrogate pairs,
       exponents, literals, key order, metadata anywhere */
    ST_OK(" \t\r\n{ \"a\" : { \"shape\" : [ 2 ] , \"x\" : {\"y\":[1.5e-3,-0,true,false,null,\"\\u00e9\"]},"
          " \"data_offsets\" : [ 0 , 8 ] , \"dtype\" : \"F32\" } , \"__metadata__\" : { } }  \n", 8);
    ST_OK("{}", 0);
    ST_OK("{\"__metadata__\":{\"k\":\"v\"}}", 0);
    n = mk_st("{\"\\ud83d\\ude00\\u00e9\\n\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "z", 1);
    ASSERT_EQ(0, gdl_st_parse(stbuf, n, &f, "esc"));
    ASSERT_STR_EQ("\xf0\x9f\x98\x80\xc3\xa9\n", f.entries[0].name);
    gdl_st_free(&f);
    /* an empty tensor between two others, in any header order */
    ST_OK("{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
          "\"e\":{\"dtype\":\"F32\",\"shape\":[0,7],\"data_offsets\":[4,4]},"
          "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8);
    PASS();
}

TEST st_refuse_short_file(void) {
    size_t k;
    for (k = 0; k < 8; k++)
        if (st_must_fail(zeros64, k, "too short for the 8-byte header length")) FAILm(fail_why);
    ASSERT_EQ(0, write_bytes(tp("short.safetensors"), "\x02\0\0", 3));
    {
        gdl_st_file f;
        ASSERT(gdl_st_read(tp("short.safetensors"), &f) != 0);
        ASSERT_CONTAINS(gdl_last_error(), "gdl_st_read: ");
        ASSERT_CONTAINS(gdl_last_error(), "short.safetensors: file is 3 bytes");
    }
    PASS();
}

TEST st_refuse_huge_header_len(void) {
    unsigned char b[16] = {0};
    uint64_t N = 100000001ull;
    int k;
    for (k = 0; k < 8; k++) b[k] = (unsigned char)(N >> (8 * k));
    if (st_must_fail(b, 16, "header length 100000001 exceeds the limit")) FAILm(fail_why);
    memset(b, 0xFF, 8);
    if (st_must_fail(b, 16, "exceeds the limit")) FAILm(fail_why);
    PASS();
}

TEST st_refuse_header_past_eof(void) {
    size_t n = mk_st("{}", NULL, 0);
    stbuf[0] = 3; /* says 3 header bytes, has 2 */
    if (st_must_fail(stbuf, n, "header length 3 runs past the end of the file (10 bytes)")) FAILm(fail_why);
    PASS();
}

TEST st_refuse_invalid_utf8(void) {
    static const char *bad[] = {
        "{\"\xff\":{}}",             /* invalid byte */
        "{\"\xc0\xaf\":{}}",         /* overlong '/' */
        "{\"\xe0\x80\xaf\":{}}",     /* overlong, 3 bytes */
        "{\"\xed\xa0\x80\":{}}",     /* UTF-16 surrogate D800 */
        "{\"\xf4\x90\x80\x80\":{}}", /* > U+10FFFF */
        "{\"\xc3\":{}}",             /* truncated sequence */
        "{\"a\":{}}\xe2\x82",        /* truncated at the end */
        "{\"\x80\":{}}",             /* lone continuation byte */
    };
    size_t k;
    for (k = 0; k < sizeof bad / sizeof bad[0]; k++)
        if (st_json_fails(bad[k], 0, "header is not valid UTF-8")) FAILm(fail_why);
    PASS();
}

TEST st_refuse_invalid_json_syntax(void) {
    static const char *bad[] = {
        "{",  "}", "{\"a\"}", "{\"a\" {}}", "{\"a\":}", "{,}", "{\"__metadata__\":{},}", "{'a':{}}", "{a:{}}",
        "{\"a\":{\"dtype\":\"F32\" \"shape\":[]}}", "{\"a\":{\"x\":[1,]}}", "{\"a\":{\"x\":[1 2]}}",
        "{\"a\":{\"x\":tru}}", "{\"a\":{\"x\":nul}}", "{\"a\":{\"x\":True}}", "{\"a\":{\"x\":NaN}}",
        "{\"a\":{\"x\":01}}", "{\"a\":{\"x\":1.}}", "{\"a\":{\"x\":.5}}", "{\"a\":{\"x\":--1}}",
        "{\"a\":{\"x\":+1}}", "{\"a\":{\"x\":1e}}", "{\"a\":{\"x\":0x10}}",
        "{\"a\":{\"x\":\"unterminated}}", "{\"a\":{\"x\":\"tab\there\"}}", "{\"a\":{\"x\":\"nl\nhere\"}}",
        "{\"a\":{\"x\":\"\\x\"}}", "{\"a\":{\"x\":\"\\u12G4\"}}", "{\"a\":{\"x\":\"\\u123\"}}",
        "{\"a\":{\"x\":\"\\ud800\"}}", "{\"a\":{\"x\":\"\\ud800\\u0041\"}}", "{\"a\":{\"x\":\"\\udc00\"}}",
        "{\"a\":{\"x\":\"\\",
    };
    size_t k;
    for (k = 0; k < sizeof bad / sizeof bad[0]; k++)
        if (st_json_fails(bad[k], 0, "invalid JSON")) {
            char m[2300];
            snprintf(m, sizeof m, "case %d (%s): %s", (int)k, bad[k], fail_why);
            memcpy(fail_why, m, sizeof fail_why - 1);
            fail_why[sizeof fail_why - 1] = 0;
            FAILm(fail_why);
        }
    PASS();
}

TEST st_refuse_trailing_garbage(void) {
    ST_FAILS("{} x", 0, "trailing characters after the JSON object");
    ST_FAILS("{}{}", 0, "trailing characters");
    {
        size_t n = mk_st("{}", NULL, 0); /* NUL padding is not whitespace */
        memset(stbuf + n, 0, 6);
        stbuf[0] = 8;
        if (st_must_fail(stbuf, n + 6, "trailing characters")) FAILm(fail_why);
    }
    PASS();
}

TEST st_refuse_too_deep(void) {
    char json[512];
    int k, o = 0;
    o += sprintf(json + o, "{\"a\":{\"x\":");
    for (k = 0; k < 100; k++) json[o++] = '[';
    for (k = 0; k < 100; k++) json[o++] = ']';
    sprintf(json + o, "}}");
    ST_FAILS(json, 0, "nesting too deep");
    PASS();
}

TEST st_refuse_empty_header(void) {
    ST_FAILS("", 0, "header is empty");
    ST_FAILS("    ", 0, "header is empty");
    PASS();
}

TEST st_refuse_top_level_not_object(void) {
    ST_FAILS("[]", 0, "top level is not a JSON object");
    ST_FAILS("\"x\"", 0, "top level is not a JSON object");
    ST_FAILS("12", 0, "top level is not a JSON object");
    ST_FAILS("null", 0, "top level is not a JSON object");
    PASS();
}

TEST st_refuse_missing_fields(void) {
    ST_FAILS("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "tensor 'a': missing \"dtype\"");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "tensor 'a': missing \"shape\"");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "tensor 'a': missing \"data_offsets\"");
    ST_FAILS("{\"a\":{}}", 0, "tensor 'a': missing");
    PASS();
}

TEST st_refuse_wrong_types(void) {
    ST_FAILS("{\"a\":5}", 0, "tensor 'a': expected an object");
    ST_FAILS("{\"a\":[1]}", 0, "tensor 'a': expected an object");
    ST_FAILS("{\"a\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "\"dtype\" must be a string");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}", 8,
             "\"shape\" must be an array of non-negative integers");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8,
             "\"shape\" must be an array of non-negative integers");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]}}", 8,
             "\"shape\" must be an array");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{}}}", 8,
             "\"data_offsets\" must be an array");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8]}}", 8,
             "\"data_offsets\" must have 2 elements, has 1");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8,
             "\"data_offsets\" has more than 2 elements");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.0]}}", 8,
             "\"data_offsets\"[1] is 8.0: not a non-negative integer");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-0,8]}}", 8,
             "not a non-negative integer");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
             "duplicate key \"dtype\"");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8,
             "\"shape\" has more than 8 elements");
    PASS();
}

TEST st_refuse_unknown_dtype(void) {
    ST_FAILS("{\"a\":{\"dtype\":\"F128\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype \"F128\"");
    ST_FAILS("{\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype \"f32\"");
    ST_FAILS("{\"a\":{\"dtype\":\"\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\\u0000\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype");
    ST_FAILS("{\"a\":{\"dtype\":\"FLOAT32_EXTRA_LONG\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype");
    PASS();
}

TEST st_refuse_bad_shape_dims(void) {
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
             "\"shape\"[0] is -2: not a non-negative integer");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8,
             "\"shape\"[0] is 2.0: not a non-negative integer");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,2e0],\"data_offsets\":[0,8]}}", 8,
             "\"shape\"[1] is 2e0");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[9223372036854775808],\"data_offsets\":[0,8]}}", 8,
             "is 9223372036854775808: out of range");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}", 8,
             "not a non-negative integer");
    PASS();
}

TEST st_refuse_end_before_begin(void) {
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
             "tensor 'a': data_offsets [8, 0]: end < begin");
    PASS();
}

TEST st_refuse_size_mismatch(void) {
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
             "tensor 'a': data_offsets [0, 4] hold 4 bytes but F32 x [2] needs 8");
    ST_FAILS("{\"a\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", 24, "needs 12");
    ST_FAILS("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,1]}}", 1, "needs 0");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,8]}}", 8, "needs 4");
    /* overflow of dtype size x product(shape) */
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
             "byte size of F32 x [4294967296, 4294967296] overflows");
    ST_FAILS("{\"a\":{\"dtype\":\"F64\",\"shape\":[9223372036854775807],\"data_offsets\":[0,8]}}", 8, "overflows");
    PASS();
}

TEST st_refuse_overlap(void) {
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
             "tensor 'b' data_offsets [4, 12] overlap 'a', which ends at 8");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "overlap");
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8, "overlap");
    PASS();
}

TEST st_refuse_hole(void) {
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12,
             "hole in the data buffer: bytes [4, 8) belong to no tensor (next is 'b')");
    ST_FAILS("{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "bytes [0, 4)");
    PASS();
}

TEST st_refuse_trailing_bytes(void) {
    char json[200];
    snprintf(json, sizeof json, "{%s}", T_A);
    ST_FAILS(json, 12, "4 trailing bytes after the last tensor (data buffer 12 bytes, tensors end at 8)");
    ST_FAILS("{}", 1, "1 trailing bytes");
    PASS();
}

TEST st_refuse_truncated(void) {
    char json[200];
    size_t n, k;
    snprintf(json, sizeof json, "{%s}", T_A);
    ST_FAILS(json, 5, "truncated: tensor 'a' data_offsets [0, 8] go past the end of the 5-byte data buffer");
    /* every proper prefix of a valid file is refused */
    n = mk_st(json, zeros64, 8);
    for (k = 0; k < n; k++) {
        gdl_st_file f;
        if (gdl_st_parse(stbuf, k, &f, "prefix") == 0) {
            gdl_st_free(&f);
            FAILm("a truncated buffer parsed");
        }
    }
    PASS();
}

TEST st_refuse_duplicate_names(void) {
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate tensor name 'a'");
    /* the same name spelled with an escape */
    ST_FAILS("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"\\u0061\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate tensor name 'a'");
    PASS();
}

TEST st_refuse_bad_metadata(void) {
    ST_FAILS("{\"__metadata__\":\"x\"}", 0, "__metadata__ must be an object of string -> string");
    ST_FAILS("{\"__metadata__\":[]}", 0, "__metadata__ must be an object");
    ST_FAILS("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__[\"k\"] must be a string");
    ST_FAILS("{\"__metadata__\":{\"k\":null}}", 0, "__metadata__[\"k\"] must be a string");
    ST_FAILS("{\"__metadata__\":{\"k\":{\"n\":\"v\"}}}", 0, "__metadata__[\"k\"] must be a string");
    ST_FAILS("{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}}", 0, "duplicate __metadata__ key 'k'");
    ST_FAILS("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate \"__metadata__\"");
    ST_FAILS("{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0, "contains a NUL character");
    PASS();
}

TEST st_refuse_bad_names(void) {
    char json[600];
    char name[300];
    memset(name, 'n', 256);
    name[256] = 0;
    snprintf(json, sizeof json, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", name);
    ST_FAILS(json, 0, "is 256 bytes, longer than 255");
    name[255] = 0; /* 255 bytes is fine */
    snprintf(json, sizeof json, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", name);
    ST_OK(json, 0);
    ST_FAILS("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0,
             "contains a NUL character");
    PASS();
}

/* flip bytes of a valid file: the parser may accept or refuse, never crash */
TEST st_mutations_do_not_crash(void) {
    static const unsigned char vals[] = {0, '"', '\\', '{', '}', '[', ']', ',', ':', '-', '0', '9', 0x80, 0xFF, ' '};
    unsigned char orig[512];
    size_t n, i, v;
    int ok = 0;
    n = mk_st("{\"__metadata__\":{\"k\":\"v\\u00e9\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"U8\",\"shape\":[1,2],\"data_offsets\":[8,10]}}", zeros64, 10);
    ASSERT(n < sizeof orig);
    memcpy(orig, stbuf, n);
    for (i = 0; i < n; i++)
        for (v = 0; v < sizeof vals; v++) {
            gdl_st_file f;
            memcpy(stbuf, orig, n);
            stbuf[i] = vals[v];
            if (gdl_st_parse(stbuf, n, &f, "mut") == 0) {
                ok++;
                gdl_st_free(&f);
            } else if (gdl_last_error()[0] == 0)
                FAILm("refused without a message");
        }
    ASSERT(ok > 0); /* e.g. data bytes, spaces */
    PASS();
}

/* ---- the writer ------------------------------------------------------------ */

static int write_simple(const char *path, float v) {
    float d[2];
    int64_t s[1] = {2};
    gdl_st_tensor t;
    d[0] = v; d[1] = -v;
    t.name = "w"; t.dtype = "F32"; t.ndim = 1; t.shape = s; t.data = d;
    return gdl_st_write(path, 1, &t, 0, NULL, NULL);
}

TEST st_write_overwrites(void) {
    gdl_st_file f;
    float got;
    ASSERT_EQ(0, write_simple(tp("ow.safetensors"), 1.0f));
    ASSERT_EQ(0, write_simple(tp("ow.safetensors"), 2.0f));
    ASSERT_EQ(0, gdl_st_read(tp("ow.safetensors"), &f));
    memcpy(&got, f.data, 4);
    gdl_st_free(&f);
    ASSERT_IN_RANGE(2.0, got, 0.0);
    ASSERT_EQ(0, count_matching(tmpdir, ".tmp."));
    PASS();
}

TEST st_write_refuses_bad_input(void) {
    float d[4] = {0};
    int64_t s[1] = {2}, neg[1] = {-1};
    gdl_st_tensor t[2];
    const char *k2[2] = {"k", "k"}, *v2[2] = {"1", "2"};
    unsigned char *before, *after;
    size_t lb, la;
    const char *p = tp("keep.safetensors");
    ASSERT_EQ(0, write_simple(p, 5.0f));
    before = read_all(p, &lb);
    ASSERT_NOT_NULL(before);
    t[0].name = "a"; t[0].dtype = "F32"; t[0].ndim = 1; t[0].shape = s; t[0].data = d;
    t[1] = t[0];
    ASSERT(gdl_st_write(p, 2, t, 0, NULL, NULL) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "duplicate tensor name 'a'");
    t[1].name = "b"; t[1].dtype = "F33";
    ASSERT(gdl_st_write(p, 2, t, 0, NULL, NULL) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "tensor 'b': unknown dtype \"F33\"");
    t[1].dtype = "F32"; t[1].shape = neg;
    ASSERT(gdl_st_write(p, 2, t, 0, NULL, NULL) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "shape[0] = -1 is negative");
    t[1].shape = s; t[1].data = NULL;
    ASSERT(gdl_st_write(p, 2, t, 0, NULL, NULL) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "data is NULL");
    t[1].data = d; t[1].name = "__metadata__";
    ASSERT(gdl_st_write(p, 2, t, 0, NULL, NULL) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "__metadata__");
    t[1].name = "bad\xff";
    ASSERT(gdl_st_write(p, 2, t, 0, NULL, NULL) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "valid UTF-8");
    t[1].name = "b"; t[1].ndim = 9;
    ASSERT(gdl_st_write(p, 2, t, 0, NULL, NULL) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "ndim 9");
    t[1].ndim = 1;
    ASSERT(gdl_st_write(p, 2, t, 2, k2, v2) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "duplicate metadata key 'k'");
    after = read_all(p, &la);
    ASSERT_NOT_NULL(after);
    ASSERT_EQ(lb, la);
    ASSERT_EQ(0, memcmp(before, after, lb));
    free(before);
    free(after);
    ASSERT_EQ(0, count_matching(tmpdir, ".tmp."));
    ASSERT_EQ(0, gdl_st_write(p, 2, t, 1, k2, v2)); /* and the fixed call works */
    PASS();
}

#ifndef _WIN32 /* symlinks: POSIX (Windows needs a privilege to make them) */
/* Symlinks planted at every name an earlier writer would have used for its temporary (path.tmp.<pid>.<n>,
   gdl_fit's path.tmp) and pointing at a victim: a save creates its temporary new under a random name,
   so it never writes through them; the victim is untouched and the saved file is a regular file. */
TEST st_write_ignores_planted_symlinks(void) {
    const char *victim = tp("victim.txt"), *p = tp("planted.safetensors");
    char link[700];
    unsigned char *after;
    size_t la;
    struct stat st;
    int n, links = 0;
    mode_t um = umask(022);
    umask(um);
    ASSERT_EQ(0, write_bytes(victim, "precious", 8));
    for (n = 0; n <= 64; n++) {
        if (n == 0) snprintf(link, sizeof link, "%s.tmp", p);
        else snprintf(link, sizeof link, "%s.tmp.%ld.%d", p, (long)getpid(), n);
        ASSERT_EQ(0, symlink(victim, link));
        links++;
    }
    for (n = 0; n < 3; n++) ASSERT_EQ(0, write_simple(p, 1.0f + (float)n));
    after = read_all(victim, &la);
    ASSERT_NOT_NULL(after);
    ASSERT_EQ((size_t)8, la);
    ASSERT_EQ(0, memcmp(after, "precious", 8));
    free(after);
    ASSERT_EQ(0, lstat(p, &st));
    ASSERT(S_ISREG(st.st_mode));
    ASSERT_EQ((unsigned)(0666 & ~um), (unsigned)(st.st_mode & 0777)); /* the mode fopen gave */
    ASSERT_EQ(links, count_matching(tmpdir, "planted.safetensors.tmp")); /* the plants left as they were */
    for (n = 0; n <= 64; n++) {
        if (n == 0) snprintf(link, sizeof link, "%s.tmp", p);
        else snprintf(link, sizeof link, "%s.tmp.%ld.%d", p, (long)getpid(), n);
        ASSERT_EQ(0, lstat(link, &st));
        ASSERT(S_ISLNK(st.st_mode));
        ASSERT_EQ(0, unlink(link));
    }
    PASS();
}

/* gdl_fit's metrics CSV, rewritten on resume, used the fixed temporary path.tmp: a symlink planted
   there made the rewrite go through it. Now the victim is untouched and the rows kept. */
TEST csv_resume_ignores_planted_symlink(void) {
    const char *victim = tp("csv_victim.txt"), *csv = tp("metrics.csv");
    char link[700];
    unsigned char *after;
    size_t la;
    FILE *f;
    ASSERT_EQ(0, write_bytes(victim, "precious", 8));
    ASSERT_EQ(0, write_bytes(csv, "epoch,loss\n1,0.5\n2,0.4\n3,0.3\n", 29));
    snprintf(link, sizeof link, "%s.tmp", csv);
    ASSERT_EQ(0, symlink(victim, link));
    ASSERT_NOT_NULL(f = gdl__csv_resume(csv, 3));
    fclose(f);
    after = read_all(victim, &la);
    ASSERT_NOT_NULL(after);
    ASSERT_EQ((size_t)8, la);
    ASSERT_EQ(0, memcmp(after, "precious", 8));
    free(after);
    after = read_all(csv, &la);
    ASSERT_NOT_NULL(after);
    after[la] = 0;
    ASSERT_CONTAINS((const char *)after, "\n1,0.5\n2,0.4\n");
    ASSERT(strstr((const char *)after, "3,0.3") == NULL);
    free(after);
    ASSERT_EQ(0, unlink(link));
    PASS();
}
#endif

/* the name is new each time and taken exclusively: two temporaries of one path never share a name, and
   neither follows a symlink */
TEST os_create_temporary_is_exclusive(void) {
    const char *p = tp("excl.bin");
    char a[700], b[700];
    struct stat st;
    FILE *fa = gdl__os_create_temporary(p, a, sizeof a, "wb"), *fb = gdl__os_create_temporary(p, b, sizeof b, "wb");
    ASSERT_NOT_NULL(fa);
    ASSERT_NOT_NULL(fb);
    ASSERT(strcmp(a, b) != 0);
    ASSERT_EQ(0, strncmp(a, p, strlen(p)));
    ASSERT_EQ(0, stat(a, &st));
    ASSERT(S_ISREG(st.st_mode));
    fclose(fa);
    fclose(fb);
    ASSERT_EQ(0, unlink(a));
    ASSERT_EQ(0, unlink(b));
    ASSERT(gdl__os_create_temporary(p, a, 8, "wb") == NULL); /* the name does not fit: refused, nothing made */
    ASSERT_EQ(ENAMETOOLONG, errno);
    PASS();
}

/* A header of many zero-size tensors (a 6 MB file of 100000 empty entries): the reader's memory stays a
   fixed multiple of the file. The entry array is the public gdl_st_entry (about 350 bytes, its name and
   shape fixed-size) for at least 50 bytes of header, so about 7x is the floor; before the bound it took
   13x (doubling past what the header can hold, and a full copy of the entries to sort them). */
TEST st_many_empty_tensors_memory(void) {
    const int n = 100000;
    size_t cap = (size_t)n * 64 + 64, len = 8;
    unsigned char *buf = (unsigned char *)malloc(cap);
    gdl_st_file f;
    long long before;
    int k;
    if (!COUNTS_BYTES) {
        free(buf);
        SKIPm("the C library tells no block sizes (malloc_usable_size)");
    }
    ASSERT_NOT_NULL(buf);
    buf[len++] = '{';
    for (k = 0; k < n; k++)
        len += (size_t)snprintf((char *)buf + len, cap - len, "%s\"t%06d\":{\"dtype\":\"F32\",\"shape\":[0],"
                                "\"data_offsets\":[0,0]}", k ? "," : "", k);
    buf[len++] = '}';
    for (k = 0; k < 8; k++) buf[k] = (unsigned char)((uint64_t)(len - 8) >> (8 * k));
    before = live_bytes;
    peak_bytes = live_bytes;
    ASSERT_EQ(0, gdl_st_parse(buf, len, &f, "many"));
    ASSERT_EQ(n, f.n);
    ASSERT_STR_EQ("t099999", f.entries[n - 1].name);
    printf("\n    %d empty tensors, %.1f MB header: peak %.1f MB held (%.2fx the file)\n", n, len / 1e6,
           (peak_bytes - before) / 1e6, (double)(peak_bytes - before) / (double)len);
    ASSERT((double)(peak_bytes - before) <= 9.0 * (double)len);
    gdl_st_free(&f);
    ASSERT_EQ(before, live_bytes);
    free(buf);
    PASS();
}

TEST st_write_nonexistent_dir(void) {
    char p[600];
    snprintf(p, sizeof p, "%s/no/such/dir/x.safetensors", tmpdir);
    ASSERT(write_simple(p, 1.0f) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_st_write");
    ASSERT_CONTAINS(gdl_last_error(), "cannot create temporary file");
    ASSERT_CONTAINS(gdl_last_error(), "x.safetensors.tmp.");
    ASSERT(!is_dir(tp("no")));
    PASS();
}

TEST st_write_target_is_directory(void) {
    const char *d = tp("adir.safetensors");
    char inner[600];
    ASSERT_EQ(0, mkdir(d, 0755));
    snprintf(inner, sizeof inner, "%s/keep", d);
    ASSERT_EQ(0, write_bytes(inner, "x", 1));
    ASSERT(write_simple(d, 1.0f) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "cannot rename");
    ASSERT(is_dir(d));
    ASSERT_EQ(1, count_matching(d, "keep"));
    ASSERT_EQ(0, count_matching(tmpdir, ".tmp."));
    PASS();
}

/* the write itself fails half-way (file size limit): the old file stays */
TEST st_write_failure_keeps_previous(void) {
    const char *p = tp("prev.safetensors");
    unsigned char *before, *after;
    size_t lb, la;
    struct rlimit old, lim;
    static float big[16384];
    int64_t s[1] = {16384};
    gdl_st_tensor t;
    int rc;
    void (*oldsig)(int);
    ASSERT_EQ(0, write_simple(p, 3.0f));
    before = read_all(p, &lb);
    ASSERT_NOT_NULL(before);
    t.name = "big"; t.dtype = "F32"; t.ndim = 1; t.shape = s; t.data = big;
    ASSERT_EQ(0, getrlimit(RLIMIT_FSIZE, &old));
    lim = old;
    lim.rlim_cur = 8192;
    oldsig = signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) {
        signal(SIGXFSZ, oldsig);
        free(before);
        SKIPm("setrlimit(RLIMIT_FSIZE) not permitted");
    }
    rc = gdl_st_write(p, 1, &t, 0, NULL, NULL);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, oldsig);
    ASSERT(rc != 0);
    ASSERT_CONTAINS(gdl_last_error(), "writing temporary file");
    after = read_all(p, &la);
    ASSERT_NOT_NULL(after);
    ASSERT_EQ(lb, la);
    ASSERT_EQ(0, memcmp(before, after, lb));
    free(before);
    free(after);
    ASSERT_EQ(0, count_matching(tmpdir, ".tmp."));
    PASS();
}

TEST st_read_missing_file(void) {
    gdl_st_file f;
    ASSERT(gdl_st_read(tp("missing.safetensors"), &f) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_st_read: ");
    ASSERT_CONTAINS(gdl_last_error(), "missing.safetensors: cannot open");
    PASS();
}

/* ---------------------------------------------------------------------------
   every allocation failure is reported and leaks nothing (run under ASan)
   ------------------------------------------------------------------------- */

/* Run op with allocation number k failing, k = 0, 1, ... until a run sees
   no injected failure (and so must succeed). A failed run must say "out of
   memory"; a run may also survive a failure (a shrinking realloc). */
#define OOM_SWEEP(op_expr, on_success)                                         \
    do {                                                                       \
        long k_;                                                               \
        for (k_ = 0; k_ < 100000; k_++) {                                      \
            int rc_;                                                           \
            fail_after = k_;                                                   \
            injected = 0;                                                      \
            rc_ = (op_expr);                                                   \
            fail_after = -1;                                                   \
            if (rc_ == 0) { on_success; }                                      \
            if (!injected) { ASSERT_EQ(0, rc_); break; }                       \
            if (rc_ != 0) ASSERT_CONTAINS(gdl_last_error(), "out of memory");  \
        }                                                                      \
        ASSERT(k_ > 0 && k_ < 100000);                                         \
    } while (0)

TEST oom_paths_are_clean(void) {
    unsigned char buf[256], px[60];
    uint32_t dims[3] = {5, 4, 3};
    size_t n;
    gdl_idx x;
    uint8_t *im, *lb;
    int64_t cnt, s2[2] = {2, 3};
    gdl_st_file f;
    gdl_st_tensor t[3];
    float w[6] = {1, 2, 3, 4, 5, 6};
    const char *mk[2] = {"a", "b"}, *mv[2] = {"x", "y"};
    char dir[300];
    int k;
    memset(px, 3, sizeof px);
    n = make_idx(buf, 0x08, 3, dims, px, sizeof px);
    ASSERT_EQ(0, write_bytes(tp("oom.idx"), buf, n));
    OOM_SWEEP(gdl_idx_load(tp("oom.idx"), &x), gdl_idx_free(&x));
#ifdef GPUDL_ZLIB
    ASSERT_EQ(0, write_gz(tp("oom.idx.gz"), buf, n));
    OOM_SWEEP(gdl_idx_load(tp("oom.idx.gz"), &x), gdl_idx_free(&x));
#endif
    snprintf(dir, sizeof dir, "%s/oomcifar", tmpdir);
    ASSERT_EQ(0, mkdir(dir, 0755));
    for (k = 1; k <= 5; k++) {
        char name[64];
        snprintf(name, sizeof name, "oomcifar/data_batch_%d.bin", k);
        ASSERT_EQ(0, write_cifar(tp(name), 2, k, k));
    }
    OOM_SWEEP(gdl_cifar10_load_dir(dir, 1, &im, &lb, &cnt), (free(im), free(lb)));
    for (k = 0; k < 3; k++) {
        t[k].dtype = "F32"; t[k].ndim = 2; t[k].shape = s2; t[k].data = w;
    }
    t[0].name = "x"; t[1].name = "y"; t[2].name = "z";
    ASSERT_EQ(0, gdl_st_write(tp("oom.safetensors"), 3, t, 2, mk, mv));
    OOM_SWEEP(gdl_st_write(tp("oom.safetensors"), 3, t, 2, mk, mv), (void)0);
    ASSERT_EQ(0, count_matching(tmpdir, ".tmp."));
    OOM_SWEEP(gdl_st_read(tp("oom.safetensors"), &f), gdl_st_free(&f));
    PASS();
}

TEST directories_are_refused(void) {
    gdl_st_file f;
    gdl_idx x;
    uint8_t *im, *lb;
    int64_t n;
    const char *d = tp("a_directory");
    ASSERT_EQ(0, mkdir(d, 0755));
    ASSERT(gdl_st_read(d, &f) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "a_directory");
    ASSERT(gdl_idx_load(d, &x) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "a_directory");
    ASSERT(gdl_cifar10_load(d, &im, &lb, &n) != 0);
    ASSERT_CONTAINS(gdl_last_error(), "a_directory");
    PASS();
}

SUITE(safetensors_suite) {
    RUN_TEST(st_roundtrip);
    RUN_TEST(st_roundtrip_empty_file);
    RUN_TEST(st_accepts_valid_json_features);
    RUN_TEST(st_refuse_short_file);
    RUN_TEST(st_refuse_huge_header_len);
    RUN_TEST(st_refuse_header_past_eof);
    RUN_TEST(st_refuse_invalid_utf8);
    RUN_TEST(st_refuse_invalid_json_syntax);
    RUN_TEST(st_refuse_trailing_garbage);
    RUN_TEST(st_refuse_too_deep);
    RUN_TEST(st_refuse_empty_header);
    RUN_TEST(st_refuse_top_level_not_object);
    RUN_TEST(st_refuse_missing_fields);
    RUN_TEST(st_refuse_wrong_types);
    RUN_TEST(st_refuse_unknown_dtype);
    RUN_TEST(st_refuse_bad_shape_dims);
    RUN_TEST(st_refuse_end_before_begin);
    RUN_TEST(st_refuse_size_mismatch);
    RUN_TEST(st_refuse_overlap);
    RUN_TEST(st_refuse_hole);
    RUN_TEST(st_refuse_trailing_bytes);
    RUN_TEST(st_refuse_truncated);
    RUN_TEST(st_refuse_duplicate_names);
    RUN_TEST(st_refuse_bad_metadata);
    RUN_TEST(st_refuse_bad_names);
    RUN_TEST(st_mutations_do_not_crash);
    RUN_TEST(st_write_overwrites);
    RUN_TEST(st_write_refuses_bad_input);
    RUN_TEST(st_write_nonexistent_dir);
#ifndef _WIN32
    RUN_TEST(st_write_ignores_planted_symlinks);
    RUN_TEST(csv_resume_ignores_planted_symlink);
#endif
    RUN_TEST(os_create_temporary_is_exclusive);
    RUN_TEST(st_many_empty_tensors_memory);
    RUN_TEST(st_write_target_is_directory);
    RUN_TEST(st_write_failure_keeps_previous);
    RUN_TEST(st_read_missing_file);
    RUN_TEST(oom_paths_are_clean);
    RUN_TEST(directories_are_refused);
}

int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/gdl_formats_XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
            fprintf(stderr, "test_formats: mkdtemp(%s): %s\n", tmpdir, strerror(errno));
            return 1;
        }
    }
    RUN_SUITE(idx_suite);
    RUN_SUITE(cifar_suite);
    RUN_SUITE(safetensors_suite);
    rm_tree(tmpdir);
    HARNESS_MAIN_END();
}
