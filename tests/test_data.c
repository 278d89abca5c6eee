/* test_data.c — datasets (arrays, IDX plain and gzipped, CIFAR-10, the
   Fashion-MNIST locator, subsets), transforms (scale, normalise, random
   crop with zero padding, horizontal flip, random erasing, mixup/cutmix against
   torchvision's numbers) and the DataLoader (batch counts,
   every sample once per epoch, shuffle determinism, identical batches for 0,
   2 and 4 workers, shutdown mid-epoch), text data (vocabularies, language-
   modelling windows, padded labelled text, fortune readers, splits,
   sampling), with every failure checked for a clear message and no leak (a
   counting, fault-injecting allocator). Debian's fortunes are read when
   installed (make data-text), and that one test is skipped loudly otherwise.

   Build (from the repository root):
       cc -std=c99 -Wall -Wextra -Wpedantic -pthread -DGPUDL_ZLIB \
          tests/test_data.c -lz -lm -o build/test_data
   also under -fsanitize=address,undefined and -fsanitize=thread. Without
   -DGPUDL_ZLIB the gzip cases are skipped. POSIX only (temporary files).
   The Fashion-MNIST checks use /usr/share/datasets/fashion-mnist when it
   exists (apt-get install dataset-fashion-mnist) and are skipped otherwise.
*/
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef GPUDL_ZLIB
#include <zlib.h>
#endif

/* A counting, fault-injecting allocator for the library: `live` counts the
   blocks it holds; with fail_after = k >= 0 the (k+1)-th allocation fails;
   `largest` is the largest size asked for (a file's claims must not size an
   allocation before the file backs them). */
static long live;
static long fail_after = -1;
static int injected;
static size_t largest;
static void *test_malloc(size_t sz) {
    void *p;
    if (sz > largest) largest = sz;
    if (fail_after == 0) { injected = 1; return NULL; }
    if (fail_after > 0) fail_after--;
    p = malloc(sz);
    if (p) live++;
    return p;
}
static void *test_realloc(void *p, size_t sz) {
    void *r;
    if (sz > largest) largest = sz;
    if (fail_after == 0) { injected = 1; return NULL; }
    if (fail_after > 0) fail_after--;
    r = realloc(p, sz);
    if (!p && r) live++;
    return r;
}
static void test_free(void *p) {
    if (p) live--;
    free(p);
}
#define GPUDL_MALLOC(sz) test_malloc(sz)
#define GPUDL_REALLOC(p, sz) test_realloc(p, sz)
#define GPUDL_FREE(p) test_free(p)

#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

/* ---- temporary files ------------------------------------------------------ */

static char tmpdir[64];
static char *made[256]; /* files and dirs to remove, in creation order */
static int nmade;

static const char *tpath(const char *name) {
    static char ring[8][512];
    static int slot;
    char *s = ring[slot++ & 7];
    snprintf(s, 512, "%s/%s", tmpdir, name);
    return s;
}
static void remember(const char *path) {
    if (nmade < 256) {
        size_t n = strlen(path) + 1;
        made[nmade] = (char *)malloc(n);
        if (made[nmade]) memcpy(made[nmade++], path, n);
    }
}
static void cleanup_tmp(void) {
    while (nmade > 0) {
        char *p = made[--nmade];
        if (unlink(p) != 0) rmdir(p);
        free(p);
    }
    rmdir(tmpdir);
}
static int make_dir(const char *path) {
    if (mkdir(path, 0700) != 0) return -1;
    remember(path);
    return 0;
}

/* Writes buf[0,n) to path, gzipped when gz (needs GPUDL_ZLIB). 0 / -1. */
static int write_bytes(const char *path, const void *buf, size_t n, int gz) {
    remember(path);
    if (gz) {
#ifdef GPUDL_ZLIB
        gzFile f = gzopen(path, "wb");
        int ok;
        if (!f) return -1;
        ok = n == 0 || gzwrite(f, buf, (unsigned)n) == (int)n;
        return gzclose(f) == Z_OK && ok ? 0 : -1;
#else
        return -1;
#endif
    } else {
        FILE *f = fopen(path, "wb");
        int ok;
        if (!f) return -1;
        ok = fwrite(buf, 1, n, f) == n;
        return fclose(f) == 0 && ok ? 0 : -1;
    }
}

/* An IDX file of u8 data: magic 0 0 type ndim, big-endian dims, then the
   data minus `cut` bytes. */
static int write_idx(const char *path, int gz, const unsigned char magic[4], int ndim, const uint32_t *dims,
                     const unsigned char *data, size_t nbytes, size_t cut) {
    unsigned char *b = (unsigned char *)malloc(4 + 4 * (size_t)ndim + nbytes + 1);
    size_t k = 0;
    int d, rc;
    if (!b) return -1;
    memcpy(b, magic, 4);
    k = 4;
    for (d = 0; d < ndim; d++) {
        b[k++] = (unsigned char)(dims[d] >> 24);
        b[k++] = (unsigned char)(dims[d] >> 16);
        b[k++] = (unsigned char)(dims[d] >> 8);
        b[k++] = (unsigned char)dims[d];
    }
    if (nbytes) memcpy(b + k, data, nbytes);
    rc = write_bytes(path, b, k + nbytes - cut, gz);
    free(b);
    return rc;
}

static const unsigned char MAGIC_IMAGES[4] = {0, 0, 0x08, 3};
static const unsigned char MAGIC_LABELS[4] = {0, 0, 0x08, 1};

/* n images rows x cols (pixel = (i*7 + j*3) & 255 for image i, pixel j) and labels i % 10. */
static int write_idx_pair(const char *ipath, const char *lpath, int gz, uint32_t n, uint32_t rows, uint32_t cols) {
    size_t np = (size_t)n * rows * cols, j;
    unsigned char *px = (unsigned char *)malloc(np + 1), *lb = (unsigned char *)malloc(n + 1);
    uint32_t di[3], dl[1];
    int rc;
    if (!px || !lb) { free(px); free(lb); return -1; }
    for (j = 0; j < np; j++) px[j] = (unsigned char)(((j / (rows * cols)) * 7 + (j % (rows * cols)) * 3) & 255);
    for (j = 0; j < n; j++) lb[j] = (unsigned char)(j % 10);
    di[0] = n; di[1] = rows; di[2] = cols; dl[0] = n;
    rc = write_idx(ipath, gz, MAGIC_IMAGES, 3, di, px, np, 0);
    if (rc == 0) rc = write_idx(lpath, gz, MAGIC_LABELS, 1, dl, lb, n, 0);
    free(px);
    free(lb);
    return rc;
}

/* ---- common --------------------------------------------------------------- */

static long live0;
static void setup(void *u) {
    (void)u;
    gdl_clear_error();
    fail_after = -1;
    injected = 0;
    live0 = live;
}
#define ASSERT_NO_LEAK() ASSERT_EQm("library blocks still held (leak)", live0, live)

/* A dataset of n f32 samples [2] = {i, -i}, label i % nc: content names the sample. */
static gdl_dataset *indexed_dataset(int64_t n, int nc) {
    float *x = (float *)malloc(sizeof(float) * 2 * (size_t)n);
    int32_t *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    int64_t shape[1] = {2}, i;
    gdl_dataset *ds = NULL;
    if (x && y) {
        for (i = 0; i < n; i++) {
            x[2 * i] = (float)i;
            x[2 * i + 1] = (float)-i;
            y[i] = (int32_t)(i % nc);
        }
        ds = gdl_dataset_from_arrays(x, GDL_F32, 1, shape, y, n, nc);
    }
    free(x);
    free(y);
    return ds;
}

/* A dataset of n u8 images [c,h,w] with pseudo-random pixels, labels i % 10. */
static gdl_dataset *image_dataset(int64_t n, int c, int h, int w, uint64_t seed) {
    int64_t shape[3], i, numel = (int64_t)c * h * w;
    unsigned char *x = (unsigned char *)malloc((size_t)(n * numel));
    int32_t *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    gdl_dataset *ds = NULL;
    shape[0] = c; shape[1] = h; shape[2] = w;
    if (x && y) {
        for (i = 0; i < n * numel; i++) x[i] = (unsigned char)(gdl_hash64(seed, (uint64_t)i) >> 56);
        for (i = 0; i < n; i++) y[i] = (int32_t)(i % 10);
        ds = gdl_dataset_from_arrays(x, GDL_U8, 3, shape, y, n, 10);
    }
    free(x);
    free(y);
    return ds;
}

/* All batches of `epochs` epochs of a fresh loader, concatenated. Returns
   the number of batches, -1 on error. */
static int collect(gdl_dataset *ds, const gdl_loader_opts *o, int epochs, float **xs, int32_t **ys, int64_t *nsamples) {
    gdl_loader *L = gdl_loader_new(ds, o);
    gdl_tensor *x, *y;
    int64_t cap = 0, used = 0, per = 0;
    int e, r, nb = 0;
    *xs = NULL;
    *ys = NULL;
    *nsamples = 0;
    if (!L) return -1;
    for (e = 0; e < epochs; e++) {
        while ((r = gdl_loader_next(L, &x, &y)) == 1) {
            int64_t b = x->shape[0];
            per = x->numel / b;
            if (used + b > cap) {
                cap = (used + b) * 2;
                *xs = (float *)realloc(*xs, sizeof(float) * (size_t)(cap * per));
                *ys = (int32_t *)realloc(*ys, sizeof(int32_t) * (size_t)cap);
                if (!*xs || !*ys) { gdl_loader_free(L); return -1; }
            }
            memcpy(*xs + used * per, x->data, sizeof(float) * (size_t)x->numel);
            memcpy(*ys + used, y->data, sizeof(int32_t) * (size_t)b);
            used += b;
            nb++;
        }
        if (r < 0) { gdl_loader_free(L); return -1; }
    }
    gdl_loader_free(L);
    *nsamples = used;
    return nb;
}

/* ---- datasets -------------------------------------------------------------- */

TEST test_from_arrays(void) {
    unsigned char px[2 * 3 * 2] = {0, 1, 2, 3, 4, 5, 250, 251, 252, 253, 254, 255};
    int32_t lab[2] = {1, 0};
    int64_t shape[3] = {3, 1, 2};
    gdl_dataset *ds = gdl_dataset_from_arrays(px, GDL_U8, 3, shape, lab, 2, 4);
    ASSERT_NOT_NULL(ds);
    ASSERT_EQ(2, ds->n);
    ASSERT_EQ(3, ds->ndim);
    ASSERT_EQ(3, ds->shape[0]);
    ASSERT_EQ(1, ds->shape[1]);
    ASSERT_EQ(2, ds->shape[2]);
    ASSERT_EQ(6, ds->sample_numel);
    ASSERT_EQ(GDL_U8, ds->dtype);
    ASSERT_EQ(4, ds->num_classes);
    px[0] = 99; /* a copy: the caller's arrays may go */
    lab[0] = 3;
    ASSERT_EQ(0, ((unsigned char *)ds->x)[0]);
    ASSERT_EQ(255, ((unsigned char *)ds->x)[11]);
    ASSERT_EQ(1, ds->labels[0]);
    ASSERT_EQ(0, ds->labels[1]);
    gdl_dataset_free(ds);
    gdl_dataset_free(NULL);
    {
        float f[6] = {0.5f, -1, 2, 3, 4, 5};
        int64_t s1[1] = {3};
        int32_t l2[2] = {0, 1};
        ds = gdl_dataset_from_arrays(f, GDL_F32, 1, s1, l2, 2, 2);
        ASSERT_NOT_NULL(ds);
        ASSERT_EQ(GDL_F32, ds->dtype);
        ASSERT_IN_RANGE(-1.0, ((float *)ds->x)[1], 0);
        gdl_dataset_free(ds);
    }
    ASSERT_NO_LEAK();
    PASS();
}

TEST test_from_arrays_errors(void) {
    unsigned char px[8] = {0};
    int32_t lab[2] = {0, 1}, bad_hi[2] = {0, 4}, bad_lo[2] = {-1, 0};
    int64_t shape[2] = {2, 2}, zero[2] = {2, 0};
    ASSERT_NULL(gdl_dataset_from_arrays(NULL, GDL_U8, 2, shape, lab, 2, 4));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_dataset_from_arrays: x is NULL");
    ASSERT_NULL(gdl_dataset_from_arrays(px, GDL_U8, 2, shape, NULL, 2, 4));
    ASSERT_CONTAINS(gdl_last_error(), "labels is NULL");
    ASSERT_NULL(gdl_dataset_from_arrays(px, GDL_F16, 2, shape, lab, 2, 4));
    ASSERT_CONTAINS(gdl_last_error(), "must be u8, f32 or i32 (token ids), got f16");
    ASSERT_NULL(gdl_dataset_from_arrays(px, GDL_U8, 0, shape, lab, 2, 4));
    ASSERT_CONTAINS(gdl_last_error(), "sample ndim 0 out of range");
    ASSERT_NULL(gdl_dataset_from_arrays(px, GDL_U8, GDL_MAX_DIMS, shape, lab, 2, 4));
    ASSERT_CONTAINS(gdl_last_error(), "out of range");
    ASSERT_NULL(gdl_dataset_from_arrays(px, GDL_U8, 2, zero, lab, 2, 4));
    ASSERT_CONTAINS(gdl_last_error(), "[2,0] has a dimension < 1");
    ASSERT_NULL(gdl_dataset_from_arrays(px, GDL_U8, 2, shape, lab, 0, 4));
    ASSERT_CONTAINS(gdl_last_error(), "0 samples");
    ASSERT_NULL(gdl_dataset_from_arrays(px, GDL_U8, 2, shape, lab, 2, 0));
    ASSERT_CONTAINS(gdl_last_error(), "num_classes 0");
    ASSERT_NULL(gdl_dataset_from_arrays(px, GDL_U8, 2, shape, bad_hi, 2, 4));
    ASSERT_CONTAINS(gdl_last_error(), "label 4 at index 1 is out of range [0, 4)");
    ASSERT_NULL(gdl_dataset_from_arrays(px, GDL_U8, 2, shape, bad_lo, 2, 4));
    ASSERT_CONTAINS(gdl_last_error(), "label -1 at index 0");
    ASSERT_NO_LEAK();
    PASS();
}

static enum harness_result check_idx_dataset(gdl_dataset *ds, int64_t n, int64_t rows, int64_t cols) {
    int64_t i, j, per = rows * cols;
    ASSERT_NOT_NULL(ds);
    ASSERT_EQ(n, ds->n);
    ASSERT_EQ(3, ds->ndim);
    ASSERT_EQ(1, ds->shape[0]);
    ASSERT_EQ(rows, ds->shape[1]);
    ASSERT_EQ(cols, ds->shape[2]);
    ASSERT_EQ(GDL_U8, ds->dtype);
    ASSERT_EQ(10, ds->num_classes);
    for (i = 0; i < n; i++) {
        ASSERT_EQ(i % 10, ds->labels[i]);
        for (j = 0; j < per; j++) ASSERT_EQ((i * 7 + j * 3) & 255, ((unsigned char *)ds->x)[i * per + j]);
    }
    return HARNESS_PASS;
}

TEST test_idx_plain(void) {
    gdl_dataset *ds;
    ASSERT_EQ(0, write_idx_pair(tpath("p-img"), tpath("p-lab"), 0, 13, 4, 3));
    ds = gdl_dataset_from_idx(tpath("p-img"), tpath("p-lab"));
    CHECK_CALL(check_idx_dataset(ds, 13, 4, 3));
    gdl_dataset_free(ds);
    ds = gdl_dataset_from_idx_ex(tpath("p-img"), tpath("p-lab"), 10);
    CHECK_CALL(check_idx_dataset(ds, 13, 4, 3));
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
}

TEST test_idx_gzipped(void) {
#ifdef GPUDL_ZLIB
    gdl_dataset *ds;
    ASSERT_EQ(0, write_idx_pair(tpath("g-img.gz"), tpath("g-lab.gz"), 1, 21, 5, 6));
    ds = gdl_dataset_from_idx(tpath("g-img.gz"), tpath("g-lab.gz"));
    CHECK_CALL(check_idx_dataset(ds, 21, 5, 6));
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
#else
    SKIPm("built without GPUDL_ZLIB");
#endif
}

/* from_idx(img, lab) must fail with a message containing each of the needles. */
static enum harness_result expect_idx_failure(const char *img, const char *lab, int nc, const char *n1, const char *n2) {
    long before = live;
    gdl_dataset *ds = gdl_dataset_from_idx_ex(img, lab, nc);
    ASSERT_NULL(ds);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_dataset_from_idx: ");
    ASSERT_CONTAINS(gdl_last_error(), n1);
    if (n2) ASSERT_CONTAINS(gdl_last_error(), n2);
    ASSERT_EQm("leak on a failed load", before, live);
    return HARNESS_PASS;
}

TEST test_idx_failures(void) {
    unsigned char px[2 * 2 * 2 * 5] = {0}, lb[5] = {1, 2, 3, 4, 5}, lb_bad[3] = {1, 10, 2};
    unsigned char bad_magic[4] = {1, 0, 0x08, 3}, i8_magic[4] = {0, 0, 0x09, 1};
    uint32_t d5[3] = {5, 2, 2}, d4[1] = {4}, d5l[1] = {5}, d3[3] = {3, 2, 2}, d3l[1] = {3};
    ASSERT_EQ(0, write_idx(tpath("ok-img"), 0, MAGIC_IMAGES, 3, d5, px, 20, 0));
    ASSERT_EQ(0, write_idx(tpath("ok-lab"), 0, MAGIC_LABELS, 1, d5l, lb, 5, 0));
    /* wrong magic */
    ASSERT_EQ(0, write_idx(tpath("bm-img"), 0, bad_magic, 3, d5, px, 20, 0));
    CHECK_CALL(expect_idx_failure(tpath("bm-img"), tpath("ok-lab"), 10, "bad magic", tpath("bm-img")));
    /* labels with the wrong type byte */
    ASSERT_EQ(0, write_idx(tpath("i8-lab"), 0, i8_magic, 1, d5l, lb, 5, 0));
    CHECK_CALL(expect_idx_failure(tpath("ok-img"), tpath("i8-lab"), 10, "labels must be u8", NULL));
    /* images and labels swapped: labels given as images */
    CHECK_CALL(expect_idx_failure(tpath("ok-lab"), tpath("ok-img"), 10, "images must be u8", "3 dims"));
    /* mismatched counts */
    ASSERT_EQ(0, write_idx(tpath("4-lab"), 0, MAGIC_LABELS, 1, d4, lb, 4, 0));
    CHECK_CALL(expect_idx_failure(tpath("ok-img"), tpath("4-lab"), 10, "5 images but 4 labels", NULL));
    /* truncated images, truncated labels, a truncated header */
    ASSERT_EQ(0, write_idx(tpath("tr-img"), 0, MAGIC_IMAGES, 3, d5, px, 20, 3));
    CHECK_CALL(expect_idx_failure(tpath("tr-img"), tpath("ok-lab"), 10, "truncated", tpath("tr-img")));
    ASSERT_EQ(0, write_idx(tpath("tr-lab"), 0, MAGIC_LABELS, 1, d5l, lb, 5, 1));
    CHECK_CALL(expect_idx_failure(tpath("ok-img"), tpath("tr-lab"), 10, "truncated", tpath("tr-lab")));
    ASSERT_EQ(0, write_idx(tpath("th-img"), 0, MAGIC_IMAGES, 3, d5, px, 0, 6));
    CHECK_CALL(expect_idx_failure(tpath("th-img"), tpath("ok-lab"), 10, "truncated header", NULL));
    /* a label >= num_classes */
    ASSERT_EQ(0, write_idx(tpath("3-img"), 0, MAGIC_IMAGES, 3, d3, px, 12, 0));
    ASSERT_EQ(0, write_idx(tpath("big-lab"), 0, MAGIC_LABELS, 1, d3l, lb_bad, 3, 0));
    CHECK_CALL(expect_idx_failure(tpath("3-img"), tpath("big-lab"), 10, "label 10 at index 1 is out of range [0, 10)", NULL));
    CHECK_CALL(expect_idx_failure(tpath("ok-img"), tpath("ok-lab"), 5, "label 5 at index 4 is out of range [0, 5)", NULL));
    /* a missing file, NULL paths */
    CHECK_CALL(expect_idx_failure(tpath("no-such-file"), tpath("ok-lab"), 10, "cannot open", "no-such-file"));
    CHECK_CALL(expect_idx_failure(tpath("ok-img"), tpath("no-such-labels"), 10, "cannot open", "no-such-labels"));
    CHECK_CALL(expect_idx_failure(NULL, tpath("ok-lab"), 10, "images_path is NULL", NULL));
#ifdef GPUDL_ZLIB
    /* a truncated gzip stream */
    ASSERT_EQ(0, write_idx(tpath("trgz-img.gz"), 1, MAGIC_IMAGES, 3, d5, px, 20, 2));
    CHECK_CALL(expect_idx_failure(tpath("trgz-img.gz"), tpath("ok-lab"), 10, "truncated", NULL));
    {
        /* a gzip file cut short on disk */
        FILE *f;
        unsigned char buf[4096];
        size_t n;
        ASSERT_EQ(0, write_idx(tpath("cut.gz"), 1, MAGIC_IMAGES, 3, d5, px, 20, 0));
        f = fopen(tpath("cut.gz"), "rb");
        ASSERT_NOT_NULL(f);
        n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        ASSERT_EQ(0, write_bytes(tpath("cut2.gz"), buf, n - 10, 0));
        CHECK_CALL(expect_idx_failure(tpath("cut2.gz"), tpath("ok-lab"), 10, "cut2.gz", NULL));
    }
#endif
    ASSERT_NO_LEAK();
    PASS();
}

/* Every allocation of a load failing in turn: NULL, an out-of-memory
   message, nothing held; then success. */
TEST test_idx_out_of_memory(void) {
    long k;
    gdl_dataset *ds = NULL;
    ASSERT_EQ(0, write_idx_pair(tpath("oom-img"), tpath("oom-lab"), 0, 7, 3, 3));
    for (k = 0; k < 100; k++) {
        fail_after = k;
        injected = 0;
        ds = gdl_dataset_from_idx(tpath("oom-img"), tpath("oom-lab"));
        fail_after = -1;
        if (ds) break;
        ASSERT(injected);
        ASSERT_CONTAINS(gdl_last_error(), "out of memory");
        ASSERT_EQm("leak after an allocation failure", live0, live);
    }
    ASSERT_NOT_NULL(ds);
    ASSERT_GT(k, 2);
    CHECK_CALL(check_idx_dataset(ds, 7, 3, 3));
    {
        gdl_dataset *s = NULL;
        long before = live;
        for (k = 0; k < 100; k++) {
            fail_after = k;
            s = gdl_dataset_subset(ds, 2, 3);
            fail_after = -1;
            if (s) break;
            ASSERT_CONTAINS(gdl_last_error(), "gdl_dataset_subset: out of memory");
            ASSERT_EQ(before, live);
        }
        ASSERT_NOT_NULL(s);
        gdl_dataset_free(s);
    }
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
}

TEST test_subset(void) {
    gdl_dataset *ds = indexed_dataset(30, 7), *s, *s2;
    ASSERT_NOT_NULL(ds);
    s = gdl_dataset_subset(ds, 10, 15);
    ASSERT_NOT_NULL(s);
    ASSERT_EQ(15, s->n);
    ASSERT_EQ(1, s->ndim);
    ASSERT_EQ(2, s->shape[0]);
    ASSERT_EQ(7, s->num_classes);
    ASSERT_IN_RANGE(10.0, ((float *)s->x)[0], 0);
    ASSERT_IN_RANGE(-24.0, ((float *)s->x)[29], 0);
    ASSERT_EQ(10 % 7, s->labels[0]);
    ASSERT_EQ(24 % 7, s->labels[14]);
    s2 = gdl_dataset_subset(ds, 0, 30); /* the whole */
    ASSERT_NOT_NULL(s2);
    ASSERT_EQ(0, memcmp(ds->x, s2->x, sizeof(float) * 60));
    gdl_dataset_free(s2);
    gdl_dataset_free(ds); /* the subset is independent */
    ASSERT_IN_RANGE(14.0, ((float *)s->x)[8], 0);
    ASSERT_NULL(gdl_dataset_subset(s, 10, 6));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_dataset_subset: samples [10, 16) out of range for a dataset of 15");
    ASSERT_NULL(gdl_dataset_subset(s, -1, 2));
    ASSERT_CONTAINS(gdl_last_error(), "out of range");
    ASSERT_NULL(gdl_dataset_subset(s, 0, 0));
    ASSERT_CONTAINS(gdl_last_error(), "count must be >= 1");
    ASSERT_NULL(gdl_dataset_subset(NULL, 0, 1));
    ASSERT_CONTAINS(gdl_last_error(), "ds is NULL");
    gdl_dataset_free(s);
    ASSERT_NO_LEAK();
    PASS();
}

/* CIFAR-10: 5 train files of 2 records and a test file of 3. */
TEST test_cifar10(void) {
    unsigned char rec[3073 * 3];
    const char *dir = tpath("cifar");
    char path[600];
    gdl_dataset *ds;
    int f, r, k;
    ASSERT_EQ(0, make_dir(dir));
    for (f = 0; f <= 5; f++) {
        int nrec = f < 5 ? 2 : 3;
        for (r = 0; r < nrec; r++) {
            rec[r * 3073] = (unsigned char)((f * 2 + r) % 10);
            for (k = 0; k < 3072; k++) rec[r * 3073 + 1 + k] = (unsigned char)((k / 1024) * 50 + f * 2 + r);
        }
        if (f < 5) snprintf(path, sizeof path, "%s/data_batch_%d.bin", dir, f + 1);
        else snprintf(path, sizeof path, "%s/test_batch.bin", dir);
        ASSERT_EQ(0, write_bytes(path, rec, (size_t)nrec * 3073, 0));
    }
    ds = gdl_dataset_from_cifar10(dir, 1);
    ASSERT_NOT_NULL(ds);
    ASSERT_EQ(10, ds->n);
    ASSERT_EQ(3, ds->ndim);
    ASSERT_EQ(3, ds->shape[0]);
    ASSERT_EQ(32, ds->shape[1]);
    ASSERT_EQ(32, ds->shape[2]);
    ASSERT_EQ(10, ds->num_classes);
    for (r = 0; r < 10; r++) {
        ASSERT_EQ(r % 10, ds->labels[r]);
        ASSERT_EQ(r, ((unsigned char *)ds->x)[r * 3072]);            /* R plane */
        ASSERT_EQ(50 + r, ((unsigned char *)ds->x)[r * 3072 + 1024]); /* G plane */
        ASSERT_EQ(100 + r, ((unsigned char *)ds->x)[r * 3072 + 3071]); /* B plane */
    }
    gdl_dataset_free(ds);
    ds = gdl_dataset_from_cifar10(dir, 0);
    ASSERT_NOT_NULL(ds);
    ASSERT_EQ(3, ds->n);
    ASSERT_EQ(11 % 10, ds->labels[1]);
    gdl_dataset_free(ds);
    /* a bad label, a missing directory */
    rec[0] = 10;
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    ASSERT_EQ(0, write_bytes(path, rec, 3073, 0));
    ASSERT_NULL(gdl_dataset_from_cifar10(dir, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_dataset_from_cifar10: ");
    ASSERT_CONTAINS(gdl_last_error(), "label 10, out of range [0, 10)");
    ASSERT_NULL(gdl_dataset_from_cifar10(tpath("no-cifar"), 1));
    ASSERT_CONTAINS(gdl_last_error(), "data_batch_1.bin: cannot open");
    ASSERT_NULL(gdl_dataset_from_cifar10(NULL, 1));
    ASSERT_CONTAINS(gdl_last_error(), "dir is NULL");
    ASSERT_NO_LEAK();
    PASS();
}

/* ---- the Fashion-MNIST locator ------------------------------------------------ */

TEST test_fashion_locator_fake(void) {
    const char *dir = tpath("fm"), *dir2 = tpath("fm-small");
    char ip[600], lp[600];
    gdl_dataset *ds;
    ASSERT_EQ(0, make_dir(dir));
    /* plain images, and plain labels */
    snprintf(ip, sizeof ip, "%s/train-images-idx3-ubyte", dir);
    snprintf(lp, sizeof lp, "%s/train-labels-idx1-ubyte", dir);
    ASSERT_EQ(0, write_idx_pair(ip, lp, 0, 12, 28, 28));
    ds = gdl_dataset_fashion_mnist(dir, 1);
    CHECK_CALL(check_idx_dataset(ds, 12, 28, 28));
    gdl_dataset_free(ds);
    /* the t10k split is absent from dir: the error names the package */
    ASSERT_NULL(gdl_dataset_fashion_mnist(dir, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_dataset_fashion_mnist: ");
    ASSERT_CONTAINS(gdl_last_error(), "t10k-images-idx3-ubyte");
    ASSERT_CONTAINS(gdl_last_error(), dir);
    ASSERT_CONTAINS(gdl_last_error(), "apt-get install dataset-fashion-mnist");
    ASSERT_CONTAINS(gdl_last_error(), "https://github.com/zalandoresearch/fashion-mnist");
#ifdef GPUDL_ZLIB
    /* gzipped names; the NULL search with ./data replaced by dir */
    snprintf(ip, sizeof ip, "%s/t10k-images-idx3-ubyte.gz", dir);
    snprintf(lp, sizeof lp, "%s/t10k-labels-idx1-ubyte.gz", dir);
    ASSERT_EQ(0, write_idx_pair(ip, lp, 1, 5, 28, 28));
    {
        const char *saved0 = gdl__fmnist_dirs[0];
        gdl__fmnist_dirs[0] = dir;
        ds = gdl_dataset_fashion_mnist(NULL, 0);
        gdl__fmnist_dirs[0] = saved0;
    }
    CHECK_CALL(check_idx_dataset(ds, 5, 28, 28));
    gdl_dataset_free(ds);
#endif
    /* images without labels */
    ASSERT_EQ(0, make_dir(dir2));
    snprintf(ip, sizeof ip, "%s/train-images-idx3-ubyte", dir2);
    snprintf(lp, sizeof lp, "%s/train-labels-idx1-ubyte", dir2);
    ASSERT_EQ(0, write_idx_pair(ip, lp, 0, 3, 20, 20));
    ASSERT_NULL(gdl_dataset_fashion_mnist(dir2, 1)); /* 20x20: not Fashion-MNIST */
    ASSERT_CONTAINS(gdl_last_error(), "images are 20x20, expected 28x28");
    ASSERT_EQ(0, unlink(lp));
    ASSERT_NULL(gdl_dataset_fashion_mnist(dir2, 1));
    ASSERT_CONTAINS(gdl_last_error(), "but not train-labels-idx1-ubyte[.gz]");
    ASSERT_NO_LEAK();
    PASS();
}

/* Set (value) or unset (NULL) an environment variable for one test; restore_env puts it back. */
static char env_saved[4096];
static int env_had;
static int with_env(const char *name, const char *value) {
    static int saved = 0;
    if (!saved) {
        const char *v = getenv(name);
        env_had = v != NULL;
        snprintf(env_saved, sizeof env_saved, "%s", v ? v : "");
        saved = 1;
    }
    return value ? setenv(name, value, 1) : unsetenv(name);
}
static void restore_env(const char *name) {
    if (env_had) setenv(name, env_saved, 1);
    else unsetenv(name);
}

TEST test_fashion_missing_message(void) {
    const char *s0 = gdl__fmnist_dirs[0], *s1 = gdl__fmnist_dirs[1];
    gdl_dataset *ds;
    ds = gdl_dataset_fashion_mnist(tpath("no-such-dir"), 1);
    ASSERT_NULL(ds);
    ASSERT_CONTAINS(gdl_last_error(), "not found in ");
    ASSERT_CONTAINS(gdl_last_error(), tpath("no-such-dir"));
    ASSERT_CONTAINS(gdl_last_error(), "apt-get install dataset-fashion-mnist");
    ASSERT_CONTAINS(gdl_last_error(), "train-images-idx3-ubyte.gz");
    /* the default search, made to find nothing: every place searched is named, and the commands */
    ASSERT_EQ(0, with_env("GPUDL_DATA", NULL));
    gdl__fmnist_dirs[0] = tpath("nodata");
    gdl__fmnist_dirs[1] = tpath("nosys");
    ds = gdl_dataset_fashion_mnist(NULL, 1);
    gdl__fmnist_dirs[0] = s0;
    gdl__fmnist_dirs[1] = s1;
    restore_env("GPUDL_DATA");
    ASSERT_NULL(ds);
    ASSERT_CONTAINS(gdl_last_error(), "apt-get install dataset-fashion-mnist");
    ASSERT_CONTAINS(gdl_last_error(), "nodata");
    ASSERT_CONTAINS(gdl_last_error(), "nosys");
    ASSERT_CONTAINS(gdl_last_error(), "`make data`");
    ASSERT_CONTAINS(gdl_last_error(), "GPUDL_DATA");
    ASSERT_NO_LEAK();
    PASS();
}

/* GPUDL_DATA replaces the search: found there, and when absent there, no fallback elsewhere */
TEST test_fashion_env_override(void) {
    const char *dir = tpath("fm-env"), *s0 = gdl__fmnist_dirs[0], *s1 = gdl__fmnist_dirs[1];
    char ip[600], lp[600];
    gdl_dataset *ds;
    ASSERT_EQ(0, make_dir(dir));
    snprintf(ip, sizeof ip, "%s/train-images-idx3-ubyte", dir);
    snprintf(lp, sizeof lp, "%s/train-labels-idx1-ubyte", dir);
    ASSERT_EQ(0, write_idx_pair(ip, lp, 0, 7, 28, 28));
    ASSERT_EQ(0, with_env("GPUDL_DATA", dir));
    ds = gdl_dataset_fashion_mnist(NULL, 1);
    ASSERT_EQ(0, with_env("GPUDL_DATA", tpath("fm-env-missing")));
    /* the default places hold data; GPUDL_DATA must still win */
    gdl__fmnist_dirs[0] = dir;
    gdl__fmnist_dirs[1] = dir;
    ASSERT_NULL(gdl_dataset_fashion_mnist(NULL, 1));
    gdl__fmnist_dirs[0] = s0;
    gdl__fmnist_dirs[1] = s1;
    restore_env("GPUDL_DATA");
    CHECK_CALL(check_idx_dataset(ds, 7, 28, 28));
    gdl_dataset_free(ds);
    ASSERT_CONTAINS(gdl_last_error(), "fm-env-missing (from GPUDL_DATA)");
    ASSERT_NO_LEAK();
    PASS();
}

#define FMNIST_SYS "/usr/share/datasets/fashion-mnist"

/* NULL when the real files are usable, else why not. */
static const char *real_fashion_missing(void) {
    FILE *f = fopen(FMNIST_SYS "/train-images-idx3-ubyte", "rb");
    if (f) {
        fclose(f);
        return NULL;
    }
    f = fopen(FMNIST_SYS "/train-images-idx3-ubyte.gz", "rb");
    if (!f) return "Fashion-MNIST not installed in " FMNIST_SYS " (apt-get install dataset-fashion-mnist)";
    fclose(f);
#ifdef GPUDL_ZLIB
    return NULL;
#else
    return "Fashion-MNIST in " FMNIST_SYS " is gzipped: build with -DGPUDL_ZLIB -lz";
#endif
}

TEST test_fashion_real(void) {
    static const int first_train[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
    static const int first_test[10] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
    int split;
    if (real_fashion_missing()) SKIPm(real_fashion_missing());
    for (split = 1; split >= 0; split--) {
        gdl_dataset *ds = gdl_dataset_fashion_mnist(FMNIST_SYS, split);
        int64_t hist[10] = {0}, head[10] = {0}, i, n = split ? 60000 : 10000;
        const int *first = split ? first_train : first_test;
        if (!ds) FAILm(gdl_last_error());
        ASSERT_EQ(n, ds->n);
        ASSERT_EQ(3, ds->ndim);
        ASSERT_EQ(1, ds->shape[0]);
        ASSERT_EQ(28, ds->shape[1]);
        ASSERT_EQ(28, ds->shape[2]);
        ASSERT_EQ(GDL_U8, ds->dtype);
        ASSERT_EQ(10, ds->num_classes);
        for (i = 0; i < n; i++) {
            ASSERT(ds->labels[i] >= 0 && ds->labels[i] < 10);
            hist[ds->labels[i]]++;
            if (i < 1000) head[ds->labels[i]]++;
        }
        for (i = 0; i < 10; i++) {
            ASSERT_EQ(first[i], ds->labels[i]);
            ASSERT_EQ(n / 10, hist[i]);            /* the splits are balanced */
            ASSERT(head[i] >= 50 && head[i] <= 150); /* and shuffled */
        }
        gdl_dataset_free(ds);
    }
    /* the default search finds them too (./data first, when it has them) */
    {
        gdl_dataset *ds = gdl_dataset_fashion_mnist(NULL, 0);
        if (!ds) FAILm(gdl_last_error());
        ASSERT_EQ(10000, ds->n);
        gdl_dataset_free(ds);
    }
    ASSERT_NO_LEAK();
    PASS();
}

/* One epoch of the real training set through 4 workers, a 10k subset too. */
TEST test_fashion_real_loader(void) {
    gdl_dataset *ds, *sub;
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *L;
    gdl_tensor *x, *y;
    int64_t seen = 0, nb = 0, hist[10] = {0}, i;
    double sum = 0;
    int r;
    if (real_fashion_missing()) SKIPm(real_fashion_missing());
    ds = gdl_dataset_fashion_mnist(FMNIST_SYS, 1);
    if (!ds) FAILm(gdl_last_error());
    sub = gdl_dataset_subset(ds, 0, 10000);
    ASSERT_NOT_NULL(sub);
    gdl_dataset_free(ds);
    o.batch_size = 256;
    o.shuffle = 1;
    o.num_workers = 4;
    o.seed = 1;
    o.transform.normalize = 1;
    o.transform.mean[0] = 0.2860;
    o.transform.std[0] = 0.3530;
    L = gdl_loader_new(sub, &o);
    ASSERT_NOT_NULL(L);
    ASSERT_EQ(40, gdl_loader_num_batches(L));
    while ((r = gdl_loader_next(L, &x, &y)) == 1) {
        ASSERT_EQ(4, x->ndim);
        ASSERT_EQ(1, x->shape[1]);
        ASSERT_EQ(28, x->shape[2]);
        ASSERT_EQ(28, x->shape[3]);
        for (i = 0; i < x->numel; i++) sum += ((float *)x->data)[i];
        for (i = 0; i < y->numel; i++) hist[((int32_t *)y->data)[i]]++;
        seen += x->shape[0];
        nb++;
    }
    ASSERT_EQ(0, r);
    ASSERT_EQ(40, nb);
    ASSERT_EQ(10000, seen);
    for (i = 0; i < 10; i++) ASSERT(hist[i] > 800 && hist[i] < 1200);
    /* normalised with the dataset's mean and std: the mean is near 0 */
    ASSERT_IN_RANGE(0.0, sum / (10000.0 * 784), 0.05);
    gdl_loader_free(L);
    gdl_dataset_free(sub);
    ASSERT_NO_LEAK();
    PASS();
}

/* ---- the loader -------------------------------------------------------------- */

TEST test_batch_counts(void) {
    gdl_dataset *ds = indexed_dataset(10, 3);
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *L;
    gdl_tensor *x, *y;
    int64_t sizes[8], k;
    int nb, drop, workers, r;
    ASSERT_NOT_NULL(ds);
    ASSERT_EQ(1, o.batch_size);
    ASSERT_EQ(2, o.prefetch);
    ASSERT_EQ(GDL_DEVICE_CPU, o.device.type);
    for (workers = 0; workers <= 2; workers += 2)
        for (drop = 0; drop <= 1; drop++) {
            int epoch;
            o.batch_size = 3;
            o.drop_last = drop;
            o.num_workers = workers;
            L = gdl_loader_new(ds, &o);
            ASSERT_NOT_NULL(L);
            ASSERT_EQ(drop ? 3 : 4, gdl_loader_num_batches(L));
            for (epoch = 0; epoch < 3; epoch++) {
                ASSERT_EQ(epoch, (long long)gdl_loader_epoch(L));
                nb = 0;
                while ((r = gdl_loader_next(L, &x, &y)) == 1) {
                    ASSERT(nb < 8);
                    ASSERT_EQ(GDL_F32, x->dtype);
                    ASSERT_EQ(GDL_I32, y->dtype);
                    ASSERT_EQ(2, x->ndim);
                    ASSERT_EQ(2, x->shape[1]);
                    ASSERT_EQ(1, y->ndim);
                    ASSERT_EQ(x->shape[0], y->shape[0]);
                    ASSERT_EQ(x->shape[0] * 2, x->numel);
                    ASSERT_EQ(y->shape[0], y->numel);
                    ASSERT_EQ(GDL_DEVICE_CPU, x->device.type);
                    for (k = 0; k < x->shape[0]; k++) { /* no shuffle: in order */
                        ASSERT_IN_RANGE((double)(nb * 3 + k), ((float *)x->data)[2 * k], 0);
                        ASSERT_EQ((nb * 3 + k) % 3, ((int32_t *)y->data)[k]);
                    }
                    sizes[nb++] = x->shape[0];
                }
                ASSERT_EQ(0, r);
                ASSERT_NULL(x);
                ASSERT_EQ(drop ? 3 : 4, nb);
                for (k = 0; k < 3; k++) ASSERT_EQ(3, sizes[k]);
                if (!drop) ASSERT_EQ(1, sizes[3]);
            }
            ASSERT_EQ(3, (long long)gdl_loader_epoch(L));
            gdl_loader_free(L);
        }
    /* a batch larger than the dataset */
    o.batch_size = 16;
    o.drop_last = 0;
    o.num_workers = 1;
    L = gdl_loader_new(ds, &o);
    ASSERT_NOT_NULL(L);
    ASSERT_EQ(1, gdl_loader_num_batches(L));
    ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
    ASSERT_EQ(10, x->shape[0]);
    ASSERT_EQ(0, gdl_loader_next(L, &x, &y));
    gdl_loader_free(L);
    o.drop_last = 1;
    L = gdl_loader_new(ds, &o);
    ASSERT_NOT_NULL(L);
    ASSERT_EQ(0, gdl_loader_num_batches(L));
    ASSERT_EQ(0, gdl_loader_next(L, &x, &y));
    ASSERT_EQ(0, gdl_loader_next(L, &x, &y));
    ASSERT_EQ(2, (long long)gdl_loader_epoch(L));
    gdl_loader_free(L);
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
}

/* Every sample exactly once per epoch, with x and y from the same sample. */
TEST test_every_sample_once(void) {
    gdl_dataset *ds = indexed_dataset(37, 5);
    gdl_loader_opts o = gdl_loader_defaults();
    int workers;
    ASSERT_NOT_NULL(ds);
    o.batch_size = 5;
    o.shuffle = 1;
    o.seed = 42;
    for (workers = 0; workers <= 4; workers += 2) {
        gdl_loader *L;
        int epoch;
        o.num_workers = workers;
        L = gdl_loader_new(ds, &o);
        ASSERT_NOT_NULL(L);
        for (epoch = 0; epoch < 4; epoch++) {
            int count[37] = {0}, i, r, in_order = 1, pos = 0;
            gdl_tensor *x, *y;
            while ((r = gdl_loader_next(L, &x, &y)) == 1) {
                int64_t k;
                for (k = 0; k < x->shape[0]; k++) {
                    float v = ((float *)x->data)[2 * k];
                    int idx = (int)v;
                    ASSERT(idx >= 0 && idx < 37);
                    ASSERT_IN_RANGE(-v, ((float *)x->data)[2 * k + 1], 0);
                    ASSERT_EQ(idx % 5, ((int32_t *)y->data)[k]);
                    count[idx]++;
                    in_order &= idx == pos++;
                }
            }
            ASSERT_EQ(0, r);
            for (i = 0; i < 37; i++) ASSERT_EQm("each sample once per epoch", 1, count[i]);
            ASSERT_FALSEm("shuffled", in_order);
        }
        gdl_loader_free(L);
    }
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
}

/* The order of samples of `epochs` epochs (sample index of each position). */
static int order_of(gdl_dataset *ds, const gdl_loader_opts *o, int first_epoch, int epochs, int *out) {
    gdl_loader *L = gdl_loader_new(ds, o);
    gdl_tensor *x, *y;
    int e, n = 0, r;
    if (!L) return -1;
    if (first_epoch) gdl_loader_set_epoch(L, (uint64_t)first_epoch);
    for (e = 0; e < epochs; e++) {
        while ((r = gdl_loader_next(L, &x, &y)) == 1) {
            int64_t k;
            for (k = 0; k < x->shape[0]; k++) out[n++] = (int)((float *)x->data)[2 * k];
        }
        if (r < 0) n = -1;
    }
    gdl_loader_free(L);
    return n;
}

TEST test_shuffle_determinism(void) {
    enum { N = 50 };
    gdl_dataset *ds = indexed_dataset(N, 10);
    gdl_loader_opts o = gdl_loader_defaults();
    int a[3 * N], b[3 * N], c[N], d[2 * N], i, same;
    ASSERT_NOT_NULL(ds);
    o.batch_size = 8;
    o.shuffle = 1;
    o.seed = 7;
    ASSERT_EQ(3 * N, order_of(ds, &o, 0, 3, a));
    ASSERT_EQ(3 * N, order_of(ds, &o, 0, 3, b));
    ASSERT_EQm("same seed, same orders", 0, memcmp(a, b, sizeof a));
    ASSERT_FALSEm("epoch 0 and 1 differ", memcmp(a, a + N, sizeof(int) * N) == 0);
    ASSERT_FALSEm("epoch 1 and 2 differ", memcmp(a + N, a + 2 * N, sizeof(int) * N) == 0);
    /* the order of epoch e is a function of (seed, e): set_epoch jumps there */
    ASSERT_EQ(N, order_of(ds, &o, 2, 1, c));
    ASSERT_EQm("set_epoch(2) gives epoch 2's order", 0, memcmp(a + 2 * N, c, sizeof c));
    /* and does not depend on the workers */
    o.num_workers = 3;
    ASSERT_EQ(3 * N, order_of(ds, &o, 0, 3, b));
    ASSERT_EQ(0, memcmp(a, b, sizeof a));
    o.num_workers = 0;
    /* another seed, another order */
    o.seed = 8;
    ASSERT_EQ(N, order_of(ds, &o, 0, 1, c));
    ASSERT_FALSEm("seed 8 differs from seed 7", memcmp(a, c, sizeof c) == 0);
    /* no shuffle: 0..N-1 every epoch */
    o.shuffle = 0;
    ASSERT_EQ(2 * N, order_of(ds, &o, 0, 2, d));
    for (i = 0, same = 1; i < 2 * N; i++) same &= d[i] == i % N;
    ASSERT(same);
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
}

/* num_workers 0, 1, 2 and 4 (and prefetch 1..5) give bitwise the same batches,
   random transforms included. */
TEST test_workers_identical(void) {
    gdl_dataset *ds = image_dataset(53, 3, 9, 7, 11);
    gdl_loader_opts o = gdl_loader_defaults();
    float *xr, *xw;
    int32_t *yr, *yw;
    int64_t nr, nw;
    int nbr, cfg;
    static const int workers[5] = {1, 2, 4, 2, 4}, prefetch[5] = {2, 1, 2, 5, 3};
    ASSERT_NOT_NULL(ds);
    o.batch_size = 6;
    o.shuffle = 1;
    o.seed = 99;
    o.transform.normalize = 3;
    o.transform.mean[0] = 0.4914; o.transform.mean[1] = 0.4822; o.transform.mean[2] = 0.4465;
    o.transform.std[0] = 0.2470; o.transform.std[1] = 0.2435; o.transform.std[2] = 0.2616;
    o.transform.crop_padding = 2;
    o.transform.hflip = 1;
    nbr = collect(ds, &o, 3, &xr, &yr, &nr);
    ASSERT_EQ(27, nbr);
    ASSERT_EQ(3 * 53, nr);
    for (cfg = 0; cfg < 5; cfg++) {
        int nbw;
        o.num_workers = workers[cfg];
        o.prefetch = prefetch[cfg];
        nbw = collect(ds, &o, 3, &xw, &yw, &nw);
        ASSERT_EQ(nbr, nbw);
        ASSERT_EQ(nr, nw);
        ASSERT_EQm("x bitwise identical across num_workers", 0, memcmp(xr, xw, sizeof(float) * (size_t)(nr * 3 * 9 * 7)));
        ASSERT_EQm("y identical across num_workers", 0, memcmp(yr, yw, sizeof(int32_t) * (size_t)nr));
        free(xw);
        free(yw);
    }
    free(xr);
    free(yr);
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
}

TEST test_transform_scale(void) {
    unsigned char px[4 * 2] = {0, 1, 127, 255, 3, 200, 254, 128};
    float fx[4] = {-3.5f, 0.25f, 1e30f, 7};
    int32_t lab[2] = {0, 1};
    int64_t s4[1] = {4}, s2[1] = {2}, k;
    gdl_dataset *ds = gdl_dataset_from_arrays(px, GDL_U8, 1, s4, lab, 2, 2), *df;
    gdl_loader *L;
    gdl_tensor *x, *y;
    ASSERT_NOT_NULL(ds);
    L = gdl_loader_new(ds, NULL); /* defaults: batch 1, inline */
    ASSERT_NOT_NULL(L);
    ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
    ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
    ASSERT_EQ(1, x->shape[0]);
    for (k = 0; k < 4; k++) ASSERT_EQ(1, ((float *)x->data)[k] == (float)px[4 + k] / 255.0f);
    gdl_loader_free(L);
    /* f32 samples pass through untouched */
    df = gdl_dataset_from_arrays(fx, GDL_F32, 1, s2, lab, 2, 2);
    ASSERT_NOT_NULL(df);
    L = gdl_loader_new(df, NULL);
    ASSERT_NOT_NULL(L);
    ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
    ASSERT_EQ(0, memcmp(x->data, fx, sizeof(float) * 2));
    ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
    ASSERT_EQ(0, memcmp(x->data, fx + 2, sizeof(float) * 2));
    gdl_loader_free(L);
    gdl_dataset_free(df);
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
}

TEST test_transform_normalize(void) {
    unsigned char px[8] = {0, 51, 102, 255, 10, 20, 30, 40};
    int32_t lab[1] = {0};
    int64_t s[3] = {2, 2, 2}, s8[1] = {8}, k;
    gdl_dataset *ds = gdl_dataset_from_arrays(px, GDL_U8, 3, s, lab, 1, 1), *d1;
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *L;
    gdl_tensor *x, *y;
    ASSERT_NOT_NULL(ds);
    o.transform.normalize = 2;
    o.transform.mean[0] = 0.5;
    o.transform.std[0] = 0.25;
    o.transform.mean[1] = 0.1;
    o.transform.std[1] = 2;
    L = gdl_loader_new(ds, &o);
    ASSERT_NOT_NULL(L);
    ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
    for (k = 0; k < 8; k++) {
        double m = k < 4 ? 0.5 : 0.1, sd = k < 4 ? 0.25 : 2;
        ASSERT_IN_RANGE((px[k] / 255.0 - m) / sd, ((float *)x->data)[k], 1e-6);
    }
    gdl_loader_free(L);
    /* one mean/std for all, any shape */
    d1 = gdl_dataset_from_arrays(px, GDL_U8, 1, s8, lab, 1, 1);
    ASSERT_NOT_NULL(d1);
    o.transform.normalize = 1;
    o.num_workers = 2;
    L = gdl_loader_new(d1, &o);
    ASSERT_NOT_NULL(L);
    ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
    for (k = 0; k < 8; k++) ASSERT_IN_RANGE((px[k] / 255.0 - 0.5) / 0.25, ((float *)x->data)[k], 1e-6);
    gdl_loader_free(L);
    gdl_dataset_free(d1);
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
}

/* out (c planes of oh x ow) equals src (h x w) shifted by (dy, dx) with
   zeros outside, mirrored when flip. */
static int matches_shift(const float *out, const float *src, int c, int h, int w, int oh, int ow, int dy, int dx, int flip) {
    int p, y, x;
    for (p = 0; p < c; p++)
        for (y = 0; y < oh; y++)
            for (x = 0; x < ow; x++) {
                int sx = (flip ? ow - 1 - x : x) + dx, sy = y + dy;
                float want = (sy < 0 || sy >= h || sx < 0 || sx >= w) ? 0.0f : src[(p * h + sy) * w + sx];
                if (out[(p * oh + y) * ow + x] != want) return 0;
            }
    return 1;
}

/* Finds the (dy, dx, flip) that out is; -1 if none. Encoded (dy+8)*100 + (dx+8)*2 + flip. */
static int find_shift(const float *out, const float *src, int c, int h, int w, int oh, int ow, int pad, int flips) {
    int dy, dx, f;
    for (f = 0; f <= flips; f++)
        for (dy = -pad; dy <= h + pad - oh; dy++)
            for (dx = -pad; dx <= w + pad - ow; dx++)
                if (matches_shift(out, src, c, h, w, oh, ow, dy, dx, f)) return (dy + 8) * 100 + (dx + 8) * 2 + f;
    return -1;
}

TEST test_transform_crop_and_flip(void) {
    enum { N = 60, C = 2, H = 5, W = 6 };
    float *x = (float *)malloc(sizeof(float) * N * C * H * W), src[C * H * W];
    int32_t lab[N] = {0};
    int64_t shape[3] = {C, H, W};
    gdl_dataset *ds;
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *L;
    gdl_tensor *bx, *by;
    int i, cfg, r;
    ASSERT_NOT_NULL(x);
    for (i = 0; i < C * H * W; i++) src[i] = (float)(i + 1); /* no zeros in the image */
    for (i = 0; i < N; i++) memcpy(x + i * C * H * W, src, sizeof src);
    ds = gdl_dataset_from_arrays(x, GDL_F32, 3, shape, lab, N, 1);
    free(x);
    ASSERT_NOT_NULL(ds);
    o.batch_size = 7;
    for (cfg = 0; cfg < 4; cfg++) {
        /* 0: crop pad 2; 1: flip; 2: crop pad 1 + flip; 3: crop 3x3 out of the unpadded image */
        int pad = cfg == 0 ? 2 : cfg == 2 ? 1 : 0, oh = cfg == 3 ? 3 : H, ow = cfg == 3 ? 3 : W;
        int seen[2000] = {0}, distinct = 0, flipped = 0, unflipped = 0, zeros = 0, n = 0;
        memset(&o.transform, 0, sizeof o.transform);
        o.transform.crop_padding = pad;
        o.transform.crop_size = cfg == 3 ? 3 : 0;
        o.transform.hflip = cfg == 1 || cfg == 2;
        o.num_workers = cfg & 1 ? 2 : 0;
        L = gdl_loader_new(ds, &o);
        ASSERT_NOT_NULL(L);
        while ((r = gdl_loader_next(L, &bx, &by)) == 1) {
            int64_t k;
            ASSERT_EQ(4, bx->ndim);
            ASSERT_EQ(C, bx->shape[1]);
            ASSERT_EQ(oh, bx->shape[2]);
            ASSERT_EQ(ow, bx->shape[3]);
            for (k = 0; k < bx->shape[0]; k++) {
                const float *out = (const float *)bx->data + k * C * oh * ow;
                int code = find_shift(out, src, C, H, W, oh, ow, pad, o.transform.hflip);
                int j;
                ASSERTm("a crop of the zero-padded image, possibly mirrored", code >= 0);
                if (!seen[code]++) distinct++;
                if (code & 1) flipped++;
                else unflipped++;
                for (j = 0; j < C * oh * ow; j++) zeros += out[j] == 0.0f;
                n++;
            }
        }
        ASSERT_EQ(0, r);
        ASSERT_EQ(N, n);
        if (cfg == 0) {
            ASSERT_GT(distinct, 10); /* up to 25 offsets */
            ASSERT_GT(zeros, 0);     /* padding came in */
            ASSERT_EQ(0, flipped);
        }
        if (cfg == 1) {
            ASSERT_EQ(2, distinct); /* as is, or mirrored */
            ASSERT_GT(flipped, 15);
            ASSERT_GT(unflipped, 15);
            ASSERT_EQ(0, zeros);
        }
        if (cfg == 2) {
            ASSERT_GT(distinct, 8);
            ASSERT_GT(flipped, 10);
            ASSERT_GT(unflipped, 10);
        }
        if (cfg == 3) {
            ASSERT_GT(distinct, 4); /* 3 x 4 windows */
            ASSERT_EQ(0, zeros);
        }
        gdl_loader_free(L);
    }
    /* a hand-checked case: the flipped, unpadded image */
    memset(&o.transform, 0, sizeof o.transform);
    {
        float want[C * H * W];
        int p, y, xx;
        for (p = 0; p < C; p++)
            for (y = 0; y < H; y++)
                for (xx = 0; xx < W; xx++) want[(p * H + y) * W + xx] = src[(p * H + y) * W + (W - 1 - xx)];
        ASSERT(matches_shift(want, src, C, H, W, H, W, 0, 0, 1));
        ASSERT_FALSE(matches_shift(want, src, C, H, W, H, W, 0, 0, 0));
    }
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
}

/* The random choices of a sample depend on (seed, epoch, index): another
   epoch draws again, the same epoch of another loader repeats them. */
TEST test_transform_randomness(void) {
    gdl_dataset *ds = image_dataset(20, 1, 8, 8, 5);
    gdl_loader_opts o = gdl_loader_defaults();
    float *a, *b;
    int32_t *ya, *yb;
    int64_t na, nb2;
    ASSERT_NOT_NULL(ds);
    o.batch_size = 20;
    o.transform.crop_padding = 3;
    o.transform.hflip = 1;
    ASSERT_EQ(2, collect(ds, &o, 2, &a, &ya, &na));
    ASSERT_EQ(2, collect(ds, &o, 2, &b, &yb, &nb2));
    ASSERT_EQ(0, memcmp(a, b, sizeof(float) * 40 * 64));
    ASSERT_FALSEm("epoch 1 draws new crops", memcmp(a, a + 20 * 64, sizeof(float) * 20 * 64) == 0);
    free(b);
    free(yb);
    o.seed = 1;
    ASSERT_EQ(1, collect(ds, &o, 1, &b, &yb, &nb2));
    ASSERT_FALSEm("another seed, other crops", memcmp(a, b, sizeof(float) * 20 * 64) == 0);
    free(a);
    free(ya);
    free(b);
    free(yb);
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
}

/* RandomErasing's box against torchvision 0.29's RandomErasing on the same uniforms (tests/transforms_ref.py
   made the rows: torchvision run with its draws replaced by these numbers). */
TEST test_erase_params_torchvision(void) {
    static const struct {
        int H, W;
        double p, s0, s1, r0, r1, u[7];
        int64_t box[4];
    } c[] = {
        {28, 28, 0.5, 0.02, 0.33, 0.3, 3.3, {0.25, 0.6, 0.3, 0.7, 0.1, 0.5, 0.5}, {13, 1, 10, 16}},
        {28, 28, 0.5, 0.02, 0.33, 0.3, 3.3, {0.75, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5}, {0, 0, 0, 0}},
        {10, 12, 1.0, 0.5, 0.9, 0.3, 3.3, {0.0, 0.9, 0.99, 0.2, 0.5, 0.99, 0.999}, {2, 4, 8, 8}},
        {8, 8, 1.0, 0.95, 1.0, 2.0, 3.0, {0.1, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5}, {0, 0, 0, 0}},
        {32, 20, 0.9, 0.1, 0.2, 0.5, 2.0, {0.3, 0.125, 0.625, 0.999, 0.0, 0.5, 0.5}, {23, 0, 9, 8}},
    };
    size_t k;
    for (k = 0; k < sizeof c / sizeof c[0]; k++) {
        double u[23], sc[2], lr[2];
        int64_t box[4] = {0, 0, 0, 0};
        int i, got;
        for (i = 0; i < 23; i++) u[i] = i < 7 ? c[k].u[i] : 0.5;
        sc[0] = c[k].s0, sc[1] = c[k].s1, lr[0] = log(c[k].r0), lr[1] = log(c[k].r1);
        got = gdl__erase_params(c[k].H, c[k].W, c[k].p, sc, lr, u, box);
        ASSERT_EQ(c[k].box[2] > 0, got);
        for (i = 0; got && i < 4; i++) ASSERT_EQ(c[k].box[i], box[i]);
    }
    PASS();
}

/* CutMix's box and adjusted lambda, and the MixUp / CutMix outputs on a fixed batch, against torchvision
   0.29's v2.CutMix / v2.MixUp with lambda and the centre fixed (tests/transforms_ref.py). */
TEST test_mix_torchvision(void) {
    static const struct {
        int H, W;
        double lam;
        int rx, ry;
        int64_t box[4];
        double adj;
    } c[] = {
        {28, 28, 0.3, 5, 20, {0, 9, 16, 28}, 0.61224489795918369},
        {28, 28, 0.9, 27, 0, {23, 0, 28, 4}, 0.97448979591836737},
        {10, 16, 0.5, 8, 5, {3, 2, 13, 8}, 0.625},
        {5, 7, 0.01, 3, 2, {0, 0, 6, 4}, 0.31428571428571428},
    };
    static const float mix_x[48] = {3.20000005f, 3.34285712f, 3.48571444f, 3.62857151f, 3.77142859f, 3.91428566f,
        4.05714273f, 4.20000029f, 4.34285736f, 4.48571396f, 4.62857151f, 4.77142811f, 4.91428518f, 5.05714273f,
        5.19999981f, 5.34285688f, 0.685714364f, 0.828571498f, 0.971428573f, 1.11428571f, 1.2571429f, 1.4000001f,
        1.54285717f, 1.68571436f, 1.82857156f, 1.97142863f, 2.11428571f, 2.25714278f, 2.4000001f, 2.54285717f,
        2.68571424f, 2.82857132f, 2.97142887f, 3.11428595f, 3.25714302f, 3.39999986f, 3.54285717f, 3.68571424f,
        3.82857132f, 3.97142863f, 4.11428595f, 4.25714302f, 4.4000001f, 4.54285717f, 4.68571424f, 4.82857132f,
        4.97142839f, 5.11428547f};
    static const float mix_y[9] = {0, 0, 1, 0.300000012f, 0, 0.699999988f, 0.699999988f, 0, 0.300000012f};
    static const float cut_x[48] = {0, 4.71428585f, 4.85714293f, 0.428571433f, 0.571428597f, 5.28571415f,
        5.42857122f, 1, 1.14285719f, 1.28571427f, 1.42857146f, 1.57142854f, 1.71428573f, 1.85714281f, 2,
        2.14285707f, 2.28571439f, 0.142857149f, 0.285714298f, 2.71428561f, 2.85714293f, 0.714285731f,
        0.857142866f, 3.28571439f, 3.42857146f, 3.57142854f, 3.71428561f, 3.85714293f, 4, 4.14285707f,
        4.28571415f, 4.42857122f, 4.57142878f, 2.42857146f, 2.57142854f, 5, 5.14285707f, 3, 3.14285707f,
        5.57142878f, 5.71428585f, 5.85714293f, 6, 6.14285707f, 6.28571415f, 6.42857122f, 6.57142878f,
        6.71428585f};
    static const float cut_y[9] = {0, 0, 1, 0.75f, 0, 0.25f, 0.25f, 0, 0.75f};
    static const int32_t lab[3] = {2, 0, 2};
    float x[48], ys[9], first[16];
    int64_t box[4];
    double adj;
    size_t k;
    int i;
    for (k = 0; k < sizeof c / sizeof c[0]; k++) {
        adj = gdl__cutmix_box(c[k].H, c[k].W, c[k].lam, c[k].rx, c[k].ry, box);
        for (i = 0; i < 4; i++) ASSERT_EQ(c[k].box[i], box[i]);
        ASSERT_IN_RANGE(c[k].adj, adj, 1e-15);
    }
    for (i = 0; i < 48; i++) x[i] = (float)i / 7.0f;
    gdl__mix_apply(3, 1, 1, 16, 3, 0, 0.3, box, x, lab, ys, first);
    for (i = 0; i < 48; i++) ASSERT_IN_RANGE(mix_x[i], x[i], 1e-6);
    for (i = 0; i < 9; i++) ASSERT_IN_RANGE(mix_y[i], ys[i], 1e-7);
    for (i = 0; i < 48; i++) x[i] = (float)i / 7.0f;
    adj = gdl__cutmix_box(4, 4, 0.5, 2, 1, box);
    ASSERT_IN_RANGE(0.75, adj, 1e-15);
    gdl__mix_apply(3, 1, 4, 4, 3, 1, adj, box, x, lab, ys, first);
    for (i = 0; i < 48; i++) ASSERT_EQ(cut_x[i], x[i]);
    for (i = 0; i < 9; i++) ASSERT_IN_RANGE(cut_y[i], ys[i], 1e-7);
    PASS();
}

/* Erasing through the loader: with p = 1 and a value no pixel has, each sample gets at most one box of it,
   whose area fraction and aspect ratio are within range; the same batches for 0 and 2 workers and when
   the loader is put at a batch mid-epoch (a resumed run), others another epoch. */
TEST test_loader_erase(void) {
    gdl_dataset *ds = image_dataset(64, 2, 16, 16, 9);
    gdl_loader_opts o = gdl_loader_defaults();
    float *a, *b;
    int32_t *ya, *yb;
    int64_t n, i, erased = 0;
    gdl_loader *L;
    gdl_tensor *x, *y;
    ASSERT_NOT_NULL(ds);
    o.batch_size = 16;
    o.transform.erase_p = 1;
    o.transform.erase_value = -3;
    o.transform.hflip = 1;
    ASSERT_EQ(8, collect(ds, &o, 2, &a, &ya, &n));
    for (i = 0; i < n; i++) {
        const float *s = a + i * 512;
        int64_t y0 = 99, y1 = -1, x0 = 99, x1 = -1, cnt = 0, yy, xx, c;
        for (c = 0; c < 2; c++)
            for (yy = 0; yy < 16; yy++)
                for (xx = 0; xx < 16; xx++)
                    if (s[(c * 16 + yy) * 16 + xx] == -3.0f) {
                        cnt++;
                        if (yy < y0) y0 = yy;
                        if (yy > y1) y1 = yy;
                        if (xx < x0) x0 = xx;
                        if (xx > x1) x1 = xx;
                    }
        if (!cnt) continue;
        erased++;
        ASSERT_EQm("one box, in every channel", 2 * (y1 - y0 + 1) * (x1 - x0 + 1), cnt);
        /* rounding of h, w: area fraction within scale widened by one row and column */
        ASSERT_LE((double)((y1 - y0) * (x1 - x0)), 0.33 * 256);
        ASSERT_GE((double)((y1 - y0 + 2) * (x1 - x0 + 2)), 0.02 * 256);
    }
    ASSERTm("most samples erased (p = 1; few of 10 tries miss)", erased > n * 9 / 10);
    o.num_workers = 2;
    ASSERT_EQ(8, collect(ds, &o, 2, &b, &yb, &n));
    ASSERT_EQ(0, memcmp(a, b, sizeof(float) * 128 * 512));
    ASSERT_FALSEm("epoch 1 erases elsewhere", memcmp(a, a + 64 * 512, sizeof(float) * 64 * 512) == 0);
    L = gdl_loader_new(ds, &o);
    ASSERT_NOT_NULL(L);
    ASSERT_EQ(0, gdl_loader_set_position(L, 1, 2));
    ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
    ASSERT_EQm("a resumed position gives the same batch", 0, memcmp(a + (64 + 32) * 512, x->data, sizeof(float) * 16 * 512));
    gdl_loader_free(L);
    free(a);
    free(ya);
    free(b);
    free(yb);
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
}

/* MixUp and CutMix through the loader: soft targets f32 [B, K] summing to 1, lam read back from them;
   MixUp's x is lam x_i + (1 - lam) x_{i-1}; lam's mean and variance are Beta(a, a)'s (1/2 and
   1 / (4 (2a + 1))) over many batches; the same with 2 workers. */
TEST test_loader_mix(void) {
    gdl_dataset *ds = indexed_dataset(4000, 1000);
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *L;
    gdl_tensor *x, *y, *x0;
    double sum = 0, sq = 0, a = 0.4;
    int64_t nb = 0, i, j;
    float *keep;
    ASSERT_NOT_NULL(ds);
    o.batch_size = 2;
    o.transform.mixup_alpha = a;
    o.transform.num_classes = 1000;
    L = gdl_loader_new(ds, &o);
    ASSERT_NOT_NULL(L);
    while (gdl_loader_next(L, &x, &y) == 1) {
        const float *xs = (const float *)x->data, *ys = (const float *)y->data;
        ASSERT_EQ(GDL_F32, y->dtype);
        ASSERT_EQ(2, y->ndim);
        ASSERT_EQ(1000, y->shape[1]);
        for (i = 0; i < 2; i++) {
            /* samples (2b, 2b+1): x = (v, -v) with v the index, label = index % 1000 */
            int64_t me = nb * 2 + i, prev = nb * 2 + (i ? 0 : 1);
            double lam = ys[i * 1000 + me % 1000], s = 0;
            for (j = 0; j < 1000; j++) s += ys[i * 1000 + j];
            ASSERT_IN_RANGE(1.0, s, 1e-6);
            ASSERT_IN_RANGE(1.0 - lam, ys[i * 1000 + prev % 1000], 1e-6);
            ASSERT_IN_RANGE(lam * (double)me + (1 - lam) * (double)prev, xs[i * 2], 1e-3);
            if (i == 0) {
                sum += lam;
                sq += lam * lam;
            }
        }
        nb++;
    }
    ASSERT_EQ(2000, nb);
    ASSERT_IN_RANGE(0.5, sum / (double)nb, 0.03);
    ASSERT_IN_RANGE(1.0 / (4 * (2 * a + 1)), sq / (double)nb - (sum / (double)nb) * (sum / (double)nb), 0.02);
    gdl_loader_free(L);
    /* CutMix on images, both on: the same batches with workers and on a resumed position */
    gdl_dataset_free(ds);
    ds = image_dataset(32, 1, 8, 8, 3);
    ASSERT_NOT_NULL(ds);
    o = gdl_loader_defaults();
    o.batch_size = 8;
    o.transform.mixup_alpha = 1;
    o.transform.cutmix_alpha = 1;
    o.transform.num_classes = 10;
    L = gdl_loader_new(ds, &o);
    ASSERT_NOT_NULL(L);
    ASSERT_EQ(0, gdl_loader_set_position(L, 3, 1));
    ASSERT_EQ(1, gdl_loader_next(L, &x0, &y));
    keep = (float *)malloc(sizeof(float) * 8 * 64 + sizeof(float) * 80);
    ASSERT_NOT_NULL(keep);
    memcpy(keep, x0->data, sizeof(float) * 8 * 64);
    memcpy(keep + 8 * 64, y->data, sizeof(float) * 80);
    gdl_loader_free(L);
    o.num_workers = 2;
    L = gdl_loader_new(ds, &o);
    ASSERT_NOT_NULL(L);
    ASSERT_EQ(0, gdl_loader_set_epoch(L, 3));
    ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
    ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
    ASSERT_EQ(0, memcmp(keep, x->data, sizeof(float) * 8 * 64));
    ASSERT_EQ(0, memcmp(keep + 8 * 64, y->data, sizeof(float) * 80));
    gdl_loader_free(L);
    free(keep);
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
}

/* Options at the edges of their types: an erase ratio of 1e-300 or 1e300 gives boxes whose sides
   overflow any integer (compared as doubles, never cast: no box, the image kept); a batch size of
   INT64_MAX is PyTorch's batch over the epoch, one short batch or none with drop_last (no overflow to
   an empty epoch). alarm(): a loader that loops is killed and the test fails. */
TEST test_loader_extreme_options(void) {
    static const double ratios[][2] = {{1e-300, 1e-300}, {1e300, 1e300}, {1e-300, 1e300}, {4.9e-324, 1e308}};
    gdl_dataset *img = image_dataset(6, 1, 6, 6, 1);
    gdl_loader_opts o;
    gdl_loader *L;
    gdl_tensor *x, *y;
    double u[23], lr[2], sc[2] = {0.02, 0.33};
    int64_t box[4];
    size_t i;
    int k;
    ASSERT_NOT_NULL(img);
#ifndef _WIN32
    alarm(120);
#endif
    for (k = 0; k < 23; k++) u[k] = k == 0 ? 0 : (k % 5) / 5.0;
    for (i = 0; i < sizeof ratios / sizeof ratios[0]; i++) {
        lr[0] = log(ratios[i][0]), lr[1] = log(ratios[i][1]);
        if (ratios[i][0] == ratios[i][1]) ASSERT_EQ(0, gdl__erase_params(6, 6, 1, sc, lr, u, box));
        o = gdl_loader_defaults();
        o.batch_size = 3;
        o.transform.erase_p = 1;
        o.transform.erase_ratio[0] = ratios[i][0], o.transform.erase_ratio[1] = ratios[i][1];
        ASSERT_NOT_NULL(L = gdl_loader_new(img, &o));
        for (k = 0; k < 2; k++) ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
        ASSERT_EQ(0, gdl_loader_next(L, &x, &y));
        gdl_loader_free(L);
    }
    for (k = 0; k < 2; k++) {
        o = gdl_loader_defaults();
        o.batch_size = INT64_MAX;
        o.drop_last = k;
        o.shuffle = 1;
        ASSERT_NOT_NULL(L = gdl_loader_new(img, &o));
        ASSERT_EQ(1 - k, gdl_loader_num_batches(L));
        if (!k) {
            ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
            ASSERT_EQ(6, x->shape[0]);
        }
        ASSERT_EQ(0, gdl_loader_next(L, &x, &y));
        ASSERT_EQ(0, gdl_loader_set_position(L, 3, 0));
        gdl_loader_free(L);
    }
    o = gdl_loader_defaults();
    o.batch_size = INT64_MAX - 1;
    o.num_replicas = 4;
    o.rank = 3;
    ASSERT_NOT_NULL(L = gdl_loader_new(img, &o));
    ASSERT_EQ(1, gdl_loader_num_batches(L));
    ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
    ASSERT_EQ(2, x->shape[0]); /* this rank's shard of ceil(6 / 4) */
    gdl_loader_free(L);
#ifndef _WIN32
    alarm(0);
#endif
    gdl_dataset_free(img);
    ASSERT_NO_LEAK();
    PASS();
}

TEST test_loader_errors(void) {
    gdl_dataset *img = image_dataset(4, 1, 6, 6, 1), *vec = indexed_dataset(4, 2);
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_tensor *x, *y;
    gdl_loader *L;
    ASSERT_NOT_NULL(img);
    ASSERT_NOT_NULL(vec);
    ASSERT_NULL(gdl_loader_new(NULL, &o));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_loader_new: ds is NULL");
    o.batch_size = 0;
    ASSERT_NULL(gdl_loader_new(img, &o));
    ASSERT_CONTAINS(gdl_last_error(), "batch_size must be >= 1, got 0");
    o = gdl_loader_defaults();
    o.num_workers = -1;
    ASSERT_NULL(gdl_loader_new(img, &o));
    ASSERT_CONTAINS(gdl_last_error(), "num_workers must be in [0, 256], got -1");
    o = gdl_loader_defaults();
    o.prefetch = -2;
    ASSERT_NULL(gdl_loader_new(img, &o));
    ASSERT_CONTAINS(gdl_last_error(), "prefetch");
    o = gdl_loader_defaults();
    o.transform.normalize = 3;
    o.transform.std[0] = o.transform.std[1] = o.transform.std[2] = 1;
    ASSERT_NULL(gdl_loader_new(img, &o));
    ASSERT_CONTAINS(gdl_last_error(), "transform.normalize has 3 channels but the samples are [1,6,6]");
    o.transform.normalize = 1;
    o.transform.std[0] = 0;
    ASSERT_NULL(gdl_loader_new(img, &o));
    ASSERT_CONTAINS(gdl_last_error(), "std must be finite and > 0");
    o = gdl_loader_defaults();
    o.transform.crop_size = 11;
    o.transform.crop_padding = 2;
    ASSERT_NULL(gdl_loader_new(img, &o));
    ASSERT_CONTAINS(gdl_last_error(), "crop size 11x11 is larger than the padded image 10x10");
    o.transform.crop_size = 0;
    o.transform.crop_padding = -1;
    ASSERT_NULL(gdl_loader_new(img, &o));
    ASSERT_CONTAINS(gdl_last_error(), "crop_padding -1");
    o = gdl_loader_defaults();
    o.transform.hflip = 1;
    ASSERT_NULL(gdl_loader_new(vec, &o));
    ASSERT_CONTAINS(gdl_last_error(), "random crop, flip, erasing and cutmix need image samples [C,H,W] (or [H,W]), got [2]");
    o = gdl_loader_defaults();
    o.transform.erase_p = 1.5;
    ASSERT_NULL(gdl_loader_new(img, &o));
    ASSERT_CONTAINS(gdl_last_error(), "transform erase_p 1.5 must be in [0, 1]");
    o.transform.erase_p = 0.5;
    o.transform.erase_scale[0] = 0.5, o.transform.erase_scale[1] = 0.2;
    ASSERT_NULL(gdl_loader_new(img, &o));
    ASSERT_CONTAINS(gdl_last_error(), "erase_scale (0.5, 0.2) must have 0 <= lo <= hi <= 1");
    o.transform.erase_scale[0] = 0;
    o.transform.erase_ratio[0] = -1, o.transform.erase_ratio[1] = 2;
    ASSERT_NULL(gdl_loader_new(img, &o));
    ASSERT_CONTAINS(gdl_last_error(), "erase_ratio (-1, 2) must have 0 < lo <= hi");
    o = gdl_loader_defaults();
    o.transform.mixup_alpha = 0.2;
    ASSERT_NULL(gdl_loader_new(img, &o));
    ASSERT_CONTAINS(gdl_last_error(), "mixup/cutmix need transform.num_classes in [1, 2^24]");
    o.transform.num_classes = 5;
    ASSERT_NULL(gdl_loader_new(img, &o));
    ASSERT_CONTAINS(gdl_last_error(), "transform.num_classes 5 is less than the dataset's 10 classes");
    o.transform.mixup_alpha = -1;
    ASSERT_NULL(gdl_loader_new(img, &o));
    ASSERT_CONTAINS(gdl_last_error(), "mixup_alpha -1, cutmix_alpha 0 must be finite and >= 0");
    o = gdl_loader_defaults();
    o.transform.cutmix_alpha = 1;
    o.transform.num_classes = 2;
    ASSERT_NULL(gdl_loader_new(vec, &o));
    ASSERT_CONTAINS(gdl_last_error(), "random crop, flip, erasing and cutmix need image samples");
    o = gdl_loader_defaults();
#ifndef GPUDL_CUDA
    o.device = gdl_cuda(0);
    o.pin_memory = 1;
    ASSERT_NULL(gdl_loader_new(img, &o));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_loader_new: ");
    ASSERT_CONTAINS(gdl_last_error(), "cuda:0 is not available");
    o = gdl_loader_defaults();
#endif
    /* pin_memory on the CPU: accepted, no effect */
    o.pin_memory = 1;
    L = gdl_loader_new(img, &o);
    ASSERT_NOT_NULL(L);
    ASSERT_EQ(-1, gdl_loader_next(L, NULL, &y));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_loader_next: x is NULL");
    ASSERT_EQ(-1, gdl_loader_next(NULL, &x, &y));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_loader_next: l is NULL");
    ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
    gdl_loader_free(L);
    gdl_loader_free(NULL);
    ASSERT_EQ(-1, gdl_loader_num_batches(NULL));
    ASSERT_EQ(-1, gdl_loader_set_epoch(NULL, 1));
    gdl_dataset_free(img);
    gdl_dataset_free(vec);
    ASSERT_NO_LEAK();
    PASS();
}

/* Every allocation of gdl_loader_new failing in turn. */
TEST test_loader_out_of_memory(void) {
    gdl_dataset *ds = image_dataset(30, 3, 4, 4, 2);
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *L = NULL;
    long k, before;
    ASSERT_NOT_NULL(ds);
    o.batch_size = 4;
    o.shuffle = 1;
    o.num_workers = 3;
    before = live;
    for (k = 0; k < 200; k++) {
        fail_after = k;
        injected = 0;
        L = gdl_loader_new(ds, &o);
        fail_after = -1;
        if (L) break;
        ASSERT(injected);
        ASSERT_CONTAINS(gdl_last_error(), "gdl_loader_new: ");
        ASSERT_CONTAINS(gdl_last_error(), "out of memory");
        ASSERT_EQm("leak after an allocation failure", before, live);
    }
    ASSERT_NOT_NULL(L);
    ASSERT_GT(k, 5);
    {
        gdl_tensor *x, *y;
        int n = 0;
        while (gdl_loader_next(L, &x, &y) == 1) n++;
        ASSERT_EQ(8, n);
    }
    gdl_loader_free(L);
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
}

/* Freeing a loader mid-epoch (workers busy, batches waiting), right after
   creation, and abandoning an epoch with set_epoch. */
TEST test_free_mid_epoch(void) {
    gdl_dataset *ds = image_dataset(200, 3, 16, 16, 3);
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *L;
    gdl_tensor *x, *y;
    int rep;
    ASSERT_NOT_NULL(ds);
    o.batch_size = 3;
    o.shuffle = 1;
    o.transform.crop_padding = 4;
    o.transform.hflip = 1;
    for (rep = 0; rep < 20; rep++) {
        int k;
        o.num_workers = 1 + rep % 4;
        o.prefetch = 1 + rep % 5;
        L = gdl_loader_new(ds, &o);
        ASSERT_NOT_NULL(L);
        for (k = 0; k < rep % 4; k++) ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
        gdl_loader_free(L);
    }
    {
        /* set_epoch mid-epoch: the next batch is the first of that epoch */
        float first[3 * 3 * 16 * 16];
        o.num_workers = 3;
        L = gdl_loader_new(ds, &o);
        ASSERT_NOT_NULL(L);
        ASSERT_EQ(0, gdl_loader_set_epoch(L, 5));
        ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
        memcpy(first, x->data, sizeof first);
        ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
        ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
        ASSERT_EQ(0, gdl_loader_set_epoch(L, 5));
        ASSERT_EQ(5, (long long)gdl_loader_epoch(L));
        ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
        ASSERT_EQ(0, memcmp(first, x->data, sizeof first));
        ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
        gdl_loader_free(L);
    }
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
}

/* Many short epochs with tiny batches: the workers race the consumer (the
   thread sanitizer's case); each epoch still holds every sample once. */
TEST test_loader_stress(void) {
    gdl_dataset *ds = indexed_dataset(97, 4);
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *L;
    int epoch;
    ASSERT_NOT_NULL(ds);
    o.batch_size = 2;
    o.shuffle = 1;
    o.num_workers = 4;
    o.prefetch = 1;
    L = gdl_loader_new(ds, &o);
    ASSERT_NOT_NULL(L);
    for (epoch = 0; epoch < 60; epoch++) {
        int count[97] = {0}, i, r, batches = 0;
        gdl_tensor *x, *y;
        if (epoch % 7 == 3) ASSERT_EQ(0, gdl_loader_set_epoch(L, (uint64_t)epoch * 3));
        while ((r = gdl_loader_next(L, &x, &y)) == 1) {
            int64_t k;
            for (k = 0; k < x->shape[0]; k++) count[(int)((float *)x->data)[2 * k]]++;
            /* abandon some epochs part-way */
            if (epoch % 11 == 5 && ++batches == 10) break;
        }
        if (epoch % 11 == 5) {
            ASSERT_EQ(0, gdl_loader_set_epoch(L, (uint64_t)epoch + 1));
            continue;
        }
        ASSERT_EQ(0, r);
        for (i = 0; i < 97; i++) ASSERT_EQ(1, count[i]);
    }
    gdl_loader_free(L);
    gdl_dataset_free(ds);
    ASSERT_NO_LEAK();
    PASS();
}

/* The batch is persistent: gdl_arena_reset and temporaries do not touch it,
   and it feeds the ops. */
TEST test_batch_survives_arena_reset(void) {
    gdl_dataset *ds = indexed_dataset(8, 2);
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *L;
    gdl_tensor *x, *y, *t;
    float keep[8];
    int i;
    ASSERT_NOT_NULL(ds);
    o.batch_size = 4;
    o.num_workers = 2;
    L = gdl_loader_new(ds, &o);
    ASSERT_NOT_NULL(L);
    ASSERT_EQ(1, gdl_loader_next(L, &x, &y));
    memcpy(keep, x->data, sizeof keep);
    gdl_arena_reset();
    for (i = 0; i < 4; i++) {
        t = gdl_mul_scalar(x, 3.0);
        ASSERT_NOT_NULL(t);
        ASSERT_IN_RANGE(3.0 * keep[2], ((float *)t->data)[2], 1e-6);
        gdl_arena_reset();
    }
    ASSERT_EQ(0, memcmp(keep, x->data, sizeof keep));
    t = gdl_sum(x);
    ASSERT_NOT_NULL(t);
    ASSERT_IN_RANGE(0.0, gdl_item(t), 1e-6); /* i + (-i) */
    gdl_arena_reset();
    gdl_loader_free(L);
    gdl_dataset_free(ds);
    gdl_shutdown(); /* the arenas' chunks */
    ASSERT_NO_LEAK();
    PASS();
}

SUITE(datasets) {
    SET_SETUP(setup, NULL);
    RUN_TEST(test_from_arrays);
    RUN_TEST(test_from_arrays_errors);
    RUN_TEST(test_idx_plain);
    RUN_TEST(test_idx_gzipped);
    RUN_TEST(test_idx_failures);
    RUN_TEST(test_idx_out_of_memory);
    RUN_TEST(test_subset);
    RUN_TEST(test_cifar10);
}

SUITE(fashion_mnist) {
    SET_SETUP(setup, NULL);
    RUN_TEST(test_fashion_locator_fake);
    RUN_TEST(test_fashion_missing_message);
    RUN_TEST(test_fashion_env_override);
    RUN_TEST(test_fashion_real);
    RUN_TEST(test_fashion_real_loader);
}

SUITE(loader) {
    SET_SETUP(setup, NULL);
    RUN_TEST(test_batch_counts);
    RUN_TEST(test_every_sample_once);
    RUN_TEST(test_shuffle_determinism);
    RUN_TEST(test_workers_identical);
    RUN_TEST(test_transform_scale);
    RUN_TEST(test_transform_normalize);
    RUN_TEST(test_transform_crop_and_flip);
    RUN_TEST(test_transform_randomness);
    RUN_TEST(test_erase_params_torchvision);
    RUN_TEST(test_mix_torchvision);
    RUN_TEST(test_loader_erase);
    RUN_TEST(test_loader_mix);
    RUN_TEST(test_loader_errors);
    RUN_TEST(test_loader_extreme_options);
    RUN_TEST(test_loader_out_of_memory);
    RUN_TEST(test_free_mid_epoch);
    RUN_TEST(test_loader_stress);
    RUN_TEST(test_batch_survives_arena_reset);
}

/* ---- text data (src/api/text.h) --------------------------------------------------- */

/* Writes the NUL-terminated s to tmp file name; its path. */
static const char *write_text(const char *name, const char *s) {
    const char *p = tpath(name);
    return write_bytes(p, s, strlen(s), 0) == 0 ? p : NULL;
}

/* Char level: a token is a code point, so multibyte characters are one id each. */
TEST test_vocab_char_roundtrip(void) {
    static const char text[] = "h\xC3\xA9llo w\xC3\xB6rld \xE2\x98\x83 \xF0\x9F\x98\x80\nll\\\t";
    gdl_vocab *v = gdl_vocab_build(text, strlen(text), NULL);
    int32_t ids[64], one[4];
    char back[128];
    int64_t n, i;
    if (!v) FAILm(gdl_last_error());
    /* h é l o ' ' w ö r d ☃ 😀 \n \ \t: 14 code points + <pad>, <unk> */
    ASSERT_EQ(16, gdl_vocab_size(v));
    ASSERT_EQ(GDL_VOCAB_CHAR, gdl_vocab_level(v));
    ASSERT_STR_EQ("<pad>", gdl_vocab_token(v, GDL_VOCAB_PAD));
    ASSERT_STR_EQ("<unk>", gdl_vocab_token(v, GDL_VOCAB_UNK));
    ASSERT_STR_EQ("l", gdl_vocab_token(v, 2)); /* the most frequent first: l x5 */
    ASSERT_STR_EQ(" ", gdl_vocab_token(v, 3)); /* then ' ' x3 */
    n = gdl_vocab_encode(v, text, strlen(text), NULL, 0);
    ASSERT_EQ(20, n); /* code points, not bytes */
    ASSERT_EQ(n, gdl_vocab_encode(v, text, strlen(text), ids, 64));
    for (i = 0; i < n; i++) ASSERT(ids[i] >= 2);
    ASSERT_EQ((int64_t)strlen(text), gdl_vocab_decode(v, ids, n, back, sizeof back));
    ASSERT_STR_EQ(text, back);
    /* one multibyte character is one id, and its token is its bytes */
    ASSERT_EQ(1, gdl_vocab_encode(v, "\xF0\x9F\x98\x80", 4, one, 4));
    ASSERT_STR_EQ("\xF0\x9F\x98\x80", gdl_vocab_token(v, one[0]));
    ASSERT_EQ(one[0], gdl_vocab_id(v, "\xF0\x9F\x98\x80"));
    /* unknown characters: <unk>, decoded as U+FFFD; <pad> decodes to nothing */
    ASSERT_EQ(2, gdl_vocab_encode(v, "z\xC3\xA9", 3, one, 4));
    ASSERT_EQ(GDL_VOCAB_UNK, one[0]);
    one[2] = GDL_VOCAB_PAD;
    ASSERT_EQ(5, gdl_vocab_decode(v, one, 3, back, sizeof back));
    ASSERT_STR_EQ("\xEF\xBF\xBD\xC3\xA9", back);
    ASSERT_EQ(GDL_VOCAB_UNK, gdl_vocab_id(v, "z"));
    /* decode truncates as snprintf does */
    ASSERT_EQ((int64_t)strlen(text), gdl_vocab_decode(v, ids, n, back, 4));
    ASSERT_STR_EQ("h\xC3\xA9", back);
    gdl_vocab_free(v);
    ASSERT_NO_LEAK();
    PASS();
}

TEST test_vocab_word(void) {
    static const char text[] = "The cat sat on the mat. the dog's mat!  \n\xC3\xA9t\xC3\xA9 the";
    gdl_vocab_opts o = gdl_vocab_defaults();
    gdl_vocab *v;
    int32_t ids[32];
    char back[128];
    int64_t n;
    o.level = GDL_VOCAB_WORD;
    v = gdl_vocab_build(text, strlen(text), &o);
    if (!v) FAILm(gdl_last_error());
    /* the x3 (The is another word), mat x2, then the singles in byte order */
    ASSERT_STR_EQ("the", gdl_vocab_token(v, 2));
    ASSERT_STR_EQ("mat", gdl_vocab_token(v, 3));
    ASSERT_STR_EQ("!", gdl_vocab_token(v, 4));
    ASSERT_EQ(12, gdl_vocab_size(v)); /* the mat ! . The cat dog's on sat été + 2 */
    n = gdl_vocab_encode(v, "the dog's \xC3\xA9t\xC3\xA9 wins.", 21, ids, 32);
    ASSERT_EQ(5, n);
    ASSERT_EQ(GDL_VOCAB_UNK, ids[3]);
    ASSERT_EQ(gdl_vocab_id(v, "dog's"), ids[1]);
    ASSERT_EQ(23, gdl_vocab_decode(v, ids, n, back, sizeof back));
    ASSERT_STR_EQ("the dog's \xC3\xA9t\xC3\xA9 <unk> .", back);
    gdl_vocab_free(v);
    /* frequency cut-off and lowercasing: only "the" (x4) and "mat" (x2) stay */
    o.min_freq = 2;
    o.lowercase = 1;
    v = gdl_vocab_build(text, strlen(text), &o);
    if (!v) FAILm(gdl_last_error());
    ASSERT_EQ(4, gdl_vocab_size(v));
    ASSERT_EQ(2, gdl_vocab_id(v, "THE"));
    ASSERT_EQ(3, gdl_vocab_encode(v, "The MAT cat", 11, ids, 32));
    ASSERT_EQ(2, ids[0]);
    ASSERT_EQ(3, ids[1]);
    ASSERT_EQ(GDL_VOCAB_UNK, ids[2]);
    gdl_vocab_free(v);
    /* max_size keeps the most frequent */
    o.min_freq = 1;
    o.max_size = 3;
    v = gdl_vocab_build(text, strlen(text), &o);
    if (!v) FAILm(gdl_last_error());
    ASSERT_EQ(3, gdl_vocab_size(v));
    ASSERT_STR_EQ("the", gdl_vocab_token(v, 2));
    gdl_vocab_free(v);
    ASSERT_NO_LEAK();
    PASS();
}

#ifndef _WIN32
/* gdl_vocab_save with symlinks planted at the names earlier versions used for its temporaries
   (path.tmp.<pid>.<n>), pointing at a victim: the temporary is created new under a random
   name, so the victim is untouched and the saved file is a regular file. */
TEST test_saves_ignore_planted_symlinks(void) {
    const char *victim = tpath("victim.keep");
    char path[600], link[700];
    gdl_vocab *v = gdl_vocab_build("a b a c", 7, NULL);
    FILE *f;
    char got[16];
    struct stat st;
    int n;
    ASSERT_NOT_NULL(v);
    ASSERT_EQ(0, write_bytes(victim, "precious", 8, 0));
    snprintf(path, sizeof path, "%s", tpath("planted.vocab"));
    for (n = 1; n <= 16; n++) {
        snprintf(link, sizeof link, "%s.tmp.%ld.%d", path, (long)getpid(), n);
        ASSERT_EQ(0, symlink(victim, link));
        remember(link);
    }
    for (n = 0; n < 3; n++) ASSERT_EQ(0, gdl_vocab_save(v, path));
    remember(path);
    ASSERT_NOT_NULL(f = fopen(victim, "rb"));
    ASSERT_EQ(8, (int)fread(got, 1, sizeof got, f));
    fclose(f);
    ASSERT_EQ(0, memcmp(got, "precious", 8));
    ASSERT_EQ(0, lstat(path, &st));
    ASSERT(S_ISREG(st.st_mode));
    gdl_vocab_free(v);
    ASSERT_NO_LEAK();
    PASS();
}
#endif

TEST test_vocab_save_load(void) {
    static const char text[] = "a\\b\nc\td\r\xD0\x96\xD0\x96 \xE2\x82\xAC<unk>";
    const char *path = tpath("v.vocab");
    gdl_vocab_opts o = gdl_vocab_defaults();
    int level;
    remember(path);
    for (level = 0; level < 2; level++) {
        gdl_vocab *v, *w;
        int32_t a[64], b[64];
        int64_t i, n;
        o.level = level;
        o.lowercase = level;
        v = gdl_vocab_build(text, strlen(text), &o);
        if (!v) FAILm(gdl_last_error());
        if (gdl_vocab_save(v, path) < 0) FAILm(gdl_last_error());
        w = gdl_vocab_load(path);
        if (!w) FAILm(gdl_last_error());
        ASSERT_EQ(gdl_vocab_size(v), gdl_vocab_size(w));
        ASSERT_EQ(level, gdl_vocab_level(w));
        for (i = 0; i < gdl_vocab_size(v); i++) ASSERT_STR_EQ(gdl_vocab_token(v, (int32_t)i), gdl_vocab_token(w, (int32_t)i));
        n = gdl_vocab_encode(v, text, strlen(text), a, 64);
        ASSERT_EQ(n, gdl_vocab_encode(w, text, strlen(text), b, 64));
        for (i = 0; i < n; i++) ASSERT_EQ(a[i], b[i]);
        if (level == 1) ASSERT_EQ(gdl_vocab_id(w, "a"), gdl_vocab_id(w, "A")); /* lowercasing survives */
        gdl_vocab_free(v);
        gdl_vocab_free(w);
    }
    /* U+0000 is a character too: escaped in the file, one byte when decoded */
    {
        gdl_vocab *v = gdl_vocab_build("a\0b", 3, NULL), *w;
        int32_t ids[3];
        char back[8];
        if (!v || gdl_vocab_save(v, path) < 0 || !(w = gdl_vocab_load(path))) FAILm(gdl_last_error());
        ASSERT_EQ(3, gdl_vocab_encode(w, "a\0b", 3, ids, 3));
        ASSERT_EQ(3, gdl_vocab_decode(w, ids, 3, back, sizeof back));
        ASSERT_EQ(0, memcmp(back, "a\0b", 4));
        gdl_vocab_free(v);
        gdl_vocab_free(w);
    }
    /* bad files */
    ASSERT_NULL(gdl_vocab_load(tpath("no-such.vocab")));
    ASSERT_CONTAINS(gdl_last_error(), "cannot open");
    ASSERT_NULL(gdl_vocab_load(write_text("bad1.vocab", "hello\n")));
    ASSERT_CONTAINS(gdl_last_error(), "not a gpudl vocabulary");
    ASSERT_NULL(gdl_vocab_load(write_text("bad2.vocab", "gpudl-vocab 1 char 0 4\n<pad>\n<unk>\na\n")));
    ASSERT_CONTAINS(gdl_last_error(), "4 tokens announced, the file ends after 3");
    /* a count no file line backs is refused before anything is allocated for it (the fuzzer's 7 GB malloc) */
    largest = 0;
    ASSERT_NULL(gdl_vocab_load(write_text("bad2b.vocab", "gpudl-vocab 1 word 1 888888888\n<pad>\n<unk>\n")));
    ASSERT_CONTAINS(gdl_last_error(), "888888888 tokens announced, the file ends after 2");
    ASSERT_LT(largest, (size_t)1 << 20);
    ASSERT_NULL(gdl_vocab_load(write_text("bad3.vocab", "gpudl-vocab 1 char 0 3\n<pad>\n<unk>\n\\x\n")));
    ASSERT_CONTAINS(gdl_last_error(), "bad escape");
    ASSERT_NULL(gdl_vocab_load(write_text("bad4.vocab", "gpudl-vocab 1 char 0 4\n<pad>\n<unk>\na\na\n")));
    ASSERT_CONTAINS(gdl_last_error(), "repeats token 2");
    ASSERT_NULL(gdl_vocab_load(write_text("bad5.vocab", "gpudl-vocab 1 word 0 3\n<unk>\n<pad>\na\n")));
    ASSERT_CONTAINS(gdl_last_error(), "tokens 0 and 1 must be <pad> and <unk>");
    ASSERT_EQ(-1, gdl_vocab_save(NULL, path));
    ASSERT_NO_LEAK();
    PASS();
}

TEST test_vocab_errors(void) {
    gdl_vocab_opts o = gdl_vocab_defaults();
    gdl_vocab *v;
    int32_t ids[4] = {0, 1, 99, -1};
    char buf[16];
    ASSERT_NULL(gdl_vocab_build("", 0, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_vocab_build: the text (0 bytes) has no tokens");
    o.level = GDL_VOCAB_WORD;
    ASSERT_NULL(gdl_vocab_build(" \n\t ", 4, &o));
    ASSERT_CONTAINS(gdl_last_error(), "has no tokens");
    ASSERT_NULL(gdl_vocab_build("ab\xC3(", 4, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "not valid UTF-8 at byte 2 of 4");
    ASSERT_NULL(gdl_vocab_build(NULL, 3, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "text is NULL");
    o = gdl_vocab_defaults();
    o.min_freq = 0;
    ASSERT_NULL(gdl_vocab_build("abc", 3, &o));
    ASSERT_CONTAINS(gdl_last_error(), "min_freq 0 must be >= 1");
    o = gdl_vocab_defaults();
    o.max_size = 2;
    ASSERT_NULL(gdl_vocab_build("abc", 3, &o));
    ASSERT_CONTAINS(gdl_last_error(), "max_size 2 0 (no cap) or >= 3");
    o = gdl_vocab_defaults();
    o.level = 7;
    ASSERT_NULL(gdl_vocab_build("abc", 3, &o));
    ASSERT_CONTAINS(gdl_last_error(), "level 7");
    v = gdl_vocab_build("abc", 3, NULL);
    if (!v) FAILm(gdl_last_error());
    ASSERT_EQ(-1, gdl_vocab_decode(v, ids, 3, buf, sizeof buf));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_vocab_decode: id 99 at 2 out of range [0, 5)");
    ASSERT_EQ(-1, gdl_vocab_encode(v, "a\xFF", 2, ids, 4));
    ASSERT_CONTAINS(gdl_last_error(), "not valid UTF-8");
    ASSERT_NULL(gdl_vocab_token(v, 5));
    ASSERT_CONTAINS(gdl_last_error(), "id 5 out of range [0, 5)");
    gdl_vocab_free(v);
    gdl_vocab_free(NULL);
    ASSERT_EQ(-1, gdl_vocab_size(NULL));
    ASSERT_NO_LEAK();
    PASS();
}

/* Every window is the stream at its offset, its target the same shifted by one, through a shuffling
   loader with workers; the i32 dtypes and [B,T] targets cross_entropy takes once flattened. */
TEST test_lm_windows(void) {
    enum { N = 103, T = 7, V = 11 };
    int32_t tok[N];
    gdl_dataset *ds, *sub;
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *L;
    gdl_tensor *x, *y;
    int64_t seen[N] = {0}, i, got = 0;
    int stride, r;
    for (i = 0; i < N; i++) tok[i] = (int32_t)(gdl_hash64(5, (uint64_t)i) % V);
    for (stride = 1; stride <= T + 3; stride += T + 2) {
        ds = gdl_dataset_lm_windows(tok, N, T, stride, V);
        if (!ds) FAILm(gdl_last_error());
        ASSERT_EQ((N - T - 1) / stride + 1, ds->n);
        ASSERT_EQ(V, ds->num_classes);
        o.batch_size = 8;
        o.shuffle = 1;
        o.num_workers = 2;
        o.seed = 3;
        L = gdl_loader_new(ds, &o);
        if (!L) FAILm(gdl_last_error());
        memset(seen, 0, sizeof seen);
        got = 0;
        while ((r = gdl_loader_next(L, &x, &y)) == 1) {
            const int32_t *xs = (const int32_t *)x->data, *ys = (const int32_t *)y->data;
            int64_t b, t;
            ASSERT_EQ(GDL_I32, x->dtype);
            ASSERT_EQ(GDL_I32, y->dtype);
            ASSERT_EQ(2, x->ndim);
            ASSERT_EQ(2, y->ndim);
            ASSERT_EQ(T, x->shape[1]);
            ASSERT_EQ(T, y->shape[1]);
            ASSERT_EQ(x->shape[0], y->shape[0]);
            for (b = 0; b < x->shape[0]; b++) {
                int64_t at = -1;
                /* find the offset: the window is tokens[at, at+T) for some multiple of stride */
                for (i = 0; i + T < N && at < 0; i += stride)
                    if (memcmp(tok + i, xs + b * T, sizeof(int32_t) * T) == 0 && seen[i] == 0) at = i;
                ASSERTm("a window that is not the stream at an unseen offset", at >= 0);
                seen[at]++;
                for (t = 0; t < T; t++) ASSERT_EQ(tok[at + t + 1], ys[b * T + t]);
                for (t = 0; t + 1 < T; t++) ASSERT_EQ(xs[b * T + t + 1], ys[b * T + t]);
            }
            got += x->shape[0];
        }
        ASSERT_EQ(0, r);
        ASSERT_EQ(ds->n, got);
        ASSERT_NULL(gdl_loader_lengths(L));
        ASSERT_CONTAINS(gdl_last_error(), "the dataset has no lengths");
        gdl_loader_free(L);
        /* a subset is the same windows */
        sub = gdl_dataset_subset(ds, 2, 3);
        if (!sub) FAILm(gdl_last_error());
        ASSERT_EQ(3, sub->n);
        ASSERT_EQ(0, memcmp(sub->tokens, tok + 2 * stride, sizeof(int32_t) * (size_t)(2 * stride + T + 1)));
        gdl_dataset_free(sub);
        /* transforms do not apply to token ids */
        o.transform.normalize = 1;
        o.transform.std[0] = 1;
        ASSERT_NULL(gdl_loader_new(ds, &o));
        ASSERT_CONTAINS(gdl_last_error(), "token ids (i32 [7]): transforms do not apply");
        memset(&o.transform, 0, sizeof o.transform);
        /* nor do the batch mixes, whose soft targets would replace the next-token targets */
        o.transform.mixup_alpha = 0.2;
        o.transform.num_classes = (int)V;
        ASSERT_NULL(gdl_loader_new(ds, &o));
        ASSERT_CONTAINS(gdl_last_error(), "token ids (i32 [7]): transforms do not apply");
        memset(&o.transform, 0, sizeof o.transform);
        gdl_dataset_free(ds);
    }
    /* errors: T larger than the stream, T < 1, a token outside the vocabulary */
    ASSERT_NULL(gdl_dataset_lm_windows(tok, 7, 7, 1, V));
    ASSERT_CONTAINS(gdl_last_error(), "a stream of 7 tokens is too short for one window of T = 7");
    ASSERT_NOT_NULL(ds = gdl_dataset_lm_windows(tok, 8, 7, 1, V)); /* exactly one window */
    ASSERT_EQ(1, ds->n);
    gdl_dataset_free(ds);
    ASSERT_NULL(gdl_dataset_lm_windows(tok, N, 0, 1, V));
    ASSERT_CONTAINS(gdl_last_error(), "T 0, stride 1 and vocab_size 11 must all be >= 1");
    ASSERT_NULL(gdl_dataset_lm_windows(tok, N, 4, 1, 3));
    ASSERT_CONTAINS(gdl_last_error(), "out of range [0, 3)");
    ASSERT_NULL(gdl_dataset_lm_windows(NULL, N, 4, 1, V));
    ASSERT_CONTAINS(gdl_last_error(), "tokens is NULL");
    ASSERT_NO_LEAK();
    PASS();
}

/* Labelled texts: padded with <pad> to max_len, cut beyond it, lengths per sample and per batch. */
TEST test_text_classes(void) {
    gdl_text_list tl;
    gdl_vocab *v;
    gdl_dataset *ds;
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *L;
    gdl_tensor *x, *y, *len;
    static const char *texts[4] = {"ab", "abcdef", "", "c\xC3\xA9"};
    int64_t i, k;
    memset(&tl, 0, sizeof tl);
    ASSERT_EQ(0, gdl_text_read_fortune_file(write_text("c0.txt", "ab\n%\nabcdef\n"), 0, "zero", &tl));
    ASSERT_EQ(0, gdl_text_read_fortune_file(write_text("c1.txt", "  \n%\nc\xC3\xA9\n%\n"), 1, "one", &tl));
    ASSERT_EQ(3, tl.n); /* the blank entry is skipped */
    ASSERT_EQ(2, tl.num_classes);
    ASSERT_STR_EQ("one", tl.class_names[1]);
    v = gdl_vocab_build("abcdef\xC3\xA9", 8, NULL);
    if (!v) FAILm(gdl_last_error());
    ds = gdl_dataset_text_classes(&tl, v, 4);
    if (!ds) FAILm(gdl_last_error());
    ASSERT_EQ(3, ds->n);
    ASSERT_EQ(GDL_I32, ds->dtype);
    ASSERT_EQ(4, ds->shape[0]);
    ASSERT_EQ(2, ds->num_classes);
    {
        static const int32_t want_len[3] = {2, 4, 2};
        static const int want_text[3] = {0, 1, 3};
        for (i = 0; i < 3; i++) {
            const int32_t *row = (const int32_t *)ds->x + i * 4;
            int32_t ids[8];
            int64_t n = gdl_vocab_encode(v, texts[want_text[i]], strlen(texts[want_text[i]]), ids, 8);
            ASSERT_EQ(want_len[i], ds->lengths[i]);
            for (k = 0; k < 4; k++) ASSERT_EQ(k < n ? ids[k] : GDL_VOCAB_PAD, row[k]);
        }
    }
    o.batch_size = 2;
    o.num_workers = 1;
    L = gdl_loader_new(ds, &o);
    if (!L) FAILm(gdl_last_error());
    ASSERT_NULL(gdl_loader_lengths(L));
    ASSERT_CONTAINS(gdl_last_error(), "call gdl_loader_next first");
    for (k = 0; gdl_loader_next(L, &x, &y) == 1; k++) {
        len = gdl_loader_lengths(L);
        if (!len) FAILm(gdl_last_error());
        ASSERT_EQ(GDL_I32, x->dtype);
        ASSERT_EQ(4, x->shape[1]);
        ASSERT_EQ(y->shape[0], len->shape[0]);
        for (i = 0; i < len->shape[0]; i++) {
            ASSERT_EQ(ds->lengths[k * 2 + i], ((int32_t *)len->data)[i]);
            ASSERT_EQ(ds->labels[k * 2 + i], ((int32_t *)y->data)[i]);
        }
    }
    ASSERT_EQ(2, k);
    gdl_loader_free(L);
    gdl_dataset_free(ds);
    ASSERT_NULL(gdl_dataset_text_classes(&tl, v, 0));
    ASSERT_CONTAINS(gdl_last_error(), "max_len 0 out of range");
    gdl_text_list_free(&tl);
    ASSERT_NULL(gdl_dataset_text_classes(&tl, v, 4));
    ASSERT_CONTAINS(gdl_last_error(), "the list has 0 texts");
    gdl_vocab_free(v);
    ASSERT_NO_LEAK();
    PASS();
}

/* strfile entries, directories read in name order, and the readers' errors. */
#ifndef _WIN32
#include <signal.h>
/* A directory of texts holding a FIFO (which would block a plain open for ever) and a link to /dev/zero
   (which would be read until memory runs out): only the regular files are read. alarm() is the test's
   timeout: a reader that blocks is killed, and the test fails. */
TEST text_dir_reads_regular_files_only(void) {
    char dir[512], p[600], q[600];
    gdl_text_list tl;
    uint64_t size = 1;
    FILE *f;
    memset(&tl, 0, sizeof tl);
    snprintf(dir, sizeof dir, "%s", tpath("hostile_dir"));
    ASSERT_EQ(0, make_dir(dir));
    snprintf(p, sizeof p, "%s/a", dir);
    ASSERT_EQ(0, write_bytes(p, "ay\n%\nbe\n", 8, 0));
    snprintf(p, sizeof p, "%s/fifo", dir);
    ASSERT_EQ(0, mkfifo(p, 0600));
    remember(p);
    snprintf(q, sizeof q, "%s/zero", dir);
    ASSERT_EQ(0, symlink("/dev/zero", q));
    remember(q);
    alarm(60);
    ASSERT_EQ(0, gdl_text_read_dir(dir, 0, "xx", &tl));
    ASSERT_EQ(2, tl.n);
    ASSERT_STR_EQ("ay", tl.texts[0]);
    ASSERT_STR_EQ("be", tl.texts[1]);
    gdl_text_list_free(&tl);
    /* the check on the open file: a FIFO and a device refused at once, without blocking */
    ASSERT_NULL(f = gdl__os_fopen_regular(p, &size));
    ASSERT_EQ(EINVAL, errno);
    ASSERT_NULL(f = gdl__os_fopen_regular(q, &size));
    ASSERT_EQ(EINVAL, errno);
    ASSERT_EQ(-1, gdl__read_fortunes("t", q, 0, "z", &tl, 1));
    ASSERT_CONTAINS(gdl_last_error(), "not a regular file");
    gdl_text_list_free(&tl);
    snprintf(p, sizeof p, "%s/a", dir);
    ASSERT_NOT_NULL(f = gdl__os_fopen_regular(p, &size));
    ASSERT_EQ(8, (int)size);
    fclose(f);
    ASSERT_EQ(0, gdl__os_file_kind(q));
    ASSERT_EQ(2, gdl__os_file_kind(dir));
    ASSERT_EQ(1, gdl__os_file_kind(p));
    alarm(0);
    PASS();
}
#endif

TEST test_fortune_reader(void) {
    gdl_text_list tl;
    const char *dir = tpath("lang"), *paths[2];
    char p[600];
    memset(&tl, 0, sizeof tl);
    ASSERT_EQ(0, gdl_text_read_fortune_file(write_text("f.txt", "one\n%\ntwo\nlines\n\n%\n%\n \n%\nlast"), 3,
                                            "f", &tl));
    ASSERT_EQ(3, tl.n);
    ASSERT_STR_EQ("one", tl.texts[0]);
    ASSERT_STR_EQ("two\nlines", tl.texts[1]);
    ASSERT_EQ(9, tl.lens[1]);
    ASSERT_STR_EQ("last", tl.texts[2]);
    ASSERT_EQ(3, tl.labels[2]);
    ASSERT_EQ(4, tl.num_classes);
    ASSERT_NULL(tl.class_names[0]);
    ASSERT_STR_EQ("f", tl.class_names[3]);
    gdl_text_list_free(&tl);
    /* a directory: regular files in name order; .dat, .u8, dot files and subdirectories left out */
    ASSERT_EQ(0, make_dir(dir));
    snprintf(p, sizeof p, "%s/b", dir);
    ASSERT_EQ(0, write_bytes(p, "bee\n%\n", 6, 0));
    snprintf(p, sizeof p, "%s/a", dir);
    ASSERT_EQ(0, write_bytes(p, "ay\n%\nay2\n", 9, 0));
    snprintf(p, sizeof p, "%s/a.dat", dir);
    ASSERT_EQ(0, write_bytes(p, "\x01\x02", 2, 0));
    snprintf(p, sizeof p, "%s/a.u8", dir);
    ASSERT_EQ(0, write_bytes(p, "no\n", 3, 0));
    snprintf(p, sizeof p, "%s/off", dir);
    ASSERT_EQ(0, make_dir(p));
    snprintf(p, sizeof p, "%s/off/x", dir);
    ASSERT_EQ(0, write_bytes(p, "offensive\n", 10, 0));
    ASSERT_EQ(0, gdl_text_read_dir(dir, 0, "xx", &tl));
    ASSERT_EQ(3, tl.n);
    ASSERT_STR_EQ("ay", tl.texts[0]);
    ASSERT_STR_EQ("ay2", tl.texts[1]);
    ASSERT_STR_EQ("bee", tl.texts[2]);
    ASSERT_STR_EQ("xx", tl.class_names[0]);
    gdl_text_list_free(&tl);
    /* one class per file */
    paths[0] = write_text("en.txt", "hello\n%\nworld\n");
    paths[1] = write_text("de.txt", "hallo\n");
    ASSERT_EQ(0, gdl_text_read_files(paths, 2, &tl));
    ASSERT_EQ(3, tl.n);
    ASSERT_EQ(2, tl.num_classes);
    ASSERT_EQ(1, tl.labels[2]);
    ASSERT_STR_EQ("de.txt", tl.class_names[1]);
    gdl_text_list_free(&tl);
    /* errors: a missing file, bad UTF-8, no entries, a missing or empty directory */
    ASSERT_EQ(-1, gdl_text_read_fortune_file(tpath("missing.txt"), 0, "m", &tl));
    ASSERT_CONTAINS(gdl_last_error(), "missing.txt: cannot open");
    ASSERT_EQ(-1, gdl_text_read_fortune_file(write_text("bad.txt", "ok\n%\n\xC3\x28\n"), 0, "m", &tl));
    ASSERT_CONTAINS(gdl_last_error(), "is not valid UTF-8 at byte 5 of 8");
    gdl_text_list_free(&tl);
    /* not "nul.txt": NUL is a device name on Windows, where that file would read as empty */
    ASSERT_EQ(0, write_bytes(tpath("nulbyte.txt"), "ab\n%\nc\0d\n", 9, 0));
    ASSERT_EQ(-1, gdl_text_read_fortune_file(tpath("nulbyte.txt"), 0, "m", &tl));
    ASSERT_CONTAINS(gdl_last_error(), "holds a NUL byte at 6: not a text file");
    gdl_text_list_free(&tl);
    ASSERT_EQ(-1, gdl_text_read_fortune_file(write_text("empty.txt", "%\n\n%\n"), 0, "m", &tl));
    ASSERT_CONTAINS(gdl_last_error(), "has no entries");
    gdl_text_list_free(&tl);
    ASSERT_EQ(-1, gdl_text_read_dir(tpath("nodir"), 0, "m", &tl));
    ASSERT_CONTAINS(gdl_last_error(), "cannot open the directory");
    ASSERT_EQ(-1, gdl_fortunes_english(tpath("nodir"), &tl));
    ASSERT_CONTAINS(gdl_last_error(), "the English fortunes are not all in");
    ASSERT_CONTAINS(gdl_last_error(), "make data-text");
    ASSERT_EQ(-1, gdl_fortunes_languages(tpath("nodir"), &tl));
    ASSERT_CONTAINS(gdl_last_error(), "fortunes-min");
    ASSERT_NO_LEAK();
    PASS();
}

/* The split: disjoint, complete, deterministic, by content (order-free, duplicates together). */
TEST test_text_split(void) {
    gdl_text_list all, rev, tr, va, tr2, va2;
    char s[32];
    int64_t i, j;
    memset(&all, 0, sizeof all);
    memset(&rev, 0, sizeof rev);
    ASSERT_EQ(0, gdl__tl_class("t", &all, 1, "b"));
    ASSERT_EQ(0, gdl__tl_class("t", &rev, 1, "b"));
    for (i = 0; i < 2000; i++) {
        int n = snprintf(s, sizeof s, "entry %d", (int)(i % 1500)); /* 500 duplicates */
        ASSERT_EQ(0, gdl__tl_push("t", &all, s, (size_t)n, (int32_t)(i & 1)));
    }
    for (i = 1999; i >= 0; i--) ASSERT_EQ(0, gdl__tl_push("t", &rev, all.texts[i], all.lens[i], all.labels[i]));
    ASSERT_EQ(0, gdl_text_split(&all, 0.2, 7, &tr, &va));
    ASSERT_EQ(2000, tr.n + va.n);
    ASSERT(va.n > 300 && va.n < 500); /* 0.2 of 2000, binomial sd ~18 (duplicates count twice) */
    ASSERT_EQ(2, va.num_classes);
    ASSERT_STR_EQ("b", va.class_names[1]);
    for (i = 0; i < va.n; i++)
        for (j = 0; j < tr.n; j++) ASSERTm("an entry on both sides", strcmp(va.texts[i], tr.texts[j]) != 0);
    ASSERT_EQ(0, gdl_text_split(&rev, 0.2, 7, &tr2, &va2));
    ASSERT_EQ(va.n, va2.n);
    for (i = 0; i < va.n; i++) ASSERT_STR_EQ(va.texts[i], va2.texts[va.n - 1 - i]);
    gdl_text_list_free(&tr2);
    gdl_text_list_free(&va2);
    /* another seed, another split */
    ASSERT_EQ(0, gdl_text_split(&all, 0.2, 8, &tr2, &va2));
    for (i = 0, j = 0; i < va.n && i < va2.n; i++) j += strcmp(va.texts[i], va2.texts[i]) != 0;
    ASSERT(j > 0);
    gdl_text_list_free(&tr2);
    gdl_text_list_free(&va2);
    ASSERT_EQ(-1, gdl_text_split(&all, 1.0, 7, &tr2, &va2));
    ASSERT_CONTAINS(gdl_last_error(), "val_fraction 1 is not in [0, 1)");
    {
        size_t len;
        char *j1 = gdl_text_join(&va, &len);
        size_t want = 0;
        ASSERT_NOT_NULL(j1);
        for (i = 0; i < va.n; i++) want += va.lens[i] + 1;
        ASSERT_EQ(want, len);
        ASSERT_EQ(0, strncmp(j1, va.texts[0], va.lens[0]));
        ASSERT_EQ('\n', j1[va.lens[0]]);
        gdl_text_free(j1);
    }
    gdl_text_list_free(&tr);
    gdl_text_list_free(&va);
    gdl_text_list_free(&all);
    gdl_text_list_free(&rev);
    ASSERT_NO_LEAK();
    PASS();
}

/* top_k = 1 and temperature 0 are the argmax (ties: the lower id); a small temperature is too. */
TEST test_sample_greedy(void) {
    enum { R = 50, V = 37 };
    float lg[R * V];
    int64_t shape[2] = {R, V};
    int32_t a[R], b[R], c[R];
    gdl_tensor *t;
    int64_t r, j;
    for (r = 0; r < R * V; r++) lg[r] = (float)(gdl_hash64(11, (uint64_t)r) % 1000) * 0.01f - 5.0f;
    lg[3 * V + 5] = lg[3 * V + 9] = 100; /* a tie: id 5 wins */
    t = gdl_from_array(lg, 2, shape, GDL_F32, gdl_cpu());
    if (!t) FAILm(gdl_last_error());
    ASSERT_EQ(0, gdl_sample_logits(t, 1.0, 1, 42, a));
    ASSERT_EQ(0, gdl_sample_logits(t, 0.0, V, 42, b));
    ASSERT_EQ(0, gdl_sample_logits(t, 1e-4, V, 43, c));
    for (r = 0; r < R; r++) {
        int32_t best = 0;
        for (j = 1; j < V; j++)
            if (lg[r * V + j] > lg[r * V + best]) best = (int32_t)j;
        ASSERT_EQ(best, a[r]);
        ASSERT_EQ(best, b[r]);
        /* the gap to the runner-up is >= 0.01 here, so exp(-gap / 1e-4) < 1e-43: the argmax */
        if (r != 3) ASSERT_EQ(best, c[r]);
    }
    ASSERT_EQ(5, a[3]);
    ASSERT_EQ(5, b[3]);
    gdl_free(t);
    /* f16 and bf16 logits, a [V] vector */
    {
        int64_t v1 = V;
        uint16_t h16[V], b16[V];
        gdl_tensor *h, *bf;
        int32_t one = -1, two = -1;
        for (j = 0; j < V; j++) {
            h16[j] = gdl_f32_to_f16(lg[j]);
            b16[j] = gdl_f32_to_bf16(lg[j]);
        }
        h = gdl_from_array(h16, 1, &v1, GDL_F16, gdl_cpu());
        bf = gdl_from_array(b16, 1, &v1, GDL_BF16, gdl_cpu());
        if (!h || !bf) FAILm(gdl_last_error());
        ASSERT_EQ(0, gdl_sample_logits(h, 0.0, 1, 0, &one));
        ASSERT_EQ(0, gdl_sample_logits(bf, 0.0, 1, 0, &two));
        ASSERT_EQ(a[0], one);
        ASSERT_EQ(a[0], two);
        gdl_free(h);
        gdl_free(bf);
    }
    ASSERT_NO_LEAK();
    PASS();
}

/* The sampled frequencies match softmax(logits / temperature) over the top k: a chi-square test
   (bound: the 0.999 quantile, so a wrong distribution fails and a right one passes but 1 run in 1000
   per seed; the seed is fixed, so the outcome is too). */
TEST test_sample_distribution(void) {
    enum { R = 20000, V = 5 };
    static const double p[V] = {0.05, 0.1, 0.15, 0.3, 0.4};
    static const struct { double temp; int k; double bound; } cases[3] = {
        {1.0, 5, 18.47},  /* chi-square 0.999, 4 degrees of freedom */
        {2.0, 5, 18.47},
        {1.0, 2, 10.83}}; /* 1 degree of freedom */
    float *lg = (float *)malloc(sizeof(float) * R * V);
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * R), *again = (int32_t *)malloc(sizeof(int32_t) * R);
    int64_t shape[2] = {R, V}, r;
    gdl_tensor *t;
    int c, j;
    ASSERT(lg && ids && again);
    for (r = 0; r < R; r++)
        for (j = 0; j < V; j++) lg[r * V + j] = (float)log(p[j]) + 3.0f; /* softmax is shift-free */
    t = gdl_from_array(lg, 2, shape, GDL_F32, gdl_cpu());
    free(lg);
    if (!t) FAILm(gdl_last_error());
    for (c = 0; c < 3; c++) {
        double q[V], z = 0, chi = 0;
        int64_t count[V] = {0};
        for (j = 0; j < V; j++) q[j] = j >= V - cases[c].k ? pow(p[j], 1.0 / cases[c].temp) : 0;
        for (j = 0; j < V; j++) z += q[j];
        ASSERT_EQ(0, gdl_sample_logits(t, cases[c].temp, cases[c].k, 1234 + (uint64_t)c, ids));
        ASSERT_EQ(0, gdl_sample_logits(t, cases[c].temp, cases[c].k, 1234 + (uint64_t)c, again));
        ASSERT_EQ(0, memcmp(ids, again, sizeof(int32_t) * R)); /* deterministic for a seed */
        for (r = 0; r < R; r++) count[ids[r]]++;
        for (j = 0; j < V; j++) {
            double e = R * q[j] / z;
            if (q[j] == 0) {
                ASSERT_EQ(0, count[j]); /* outside the top k: never */
                continue;
            }
            chi += (count[j] - e) * (count[j] - e) / e;
        }
        if (chi > cases[c].bound)
            FAILf("temperature %g, top_k %d: chi-square %.2f over the bound %.2f", cases[c].temp, cases[c].k, chi,
                  cases[c].bound);
    }
    /* another seed gives other draws */
    ASSERT_EQ(0, gdl_sample_logits(t, 1.0, V, 99, again));
    ASSERT(memcmp(ids, again, sizeof(int32_t) * R) != 0);
    gdl_free(t);
    free(ids);
    free(again);
    ASSERT_NO_LEAK();
    PASS();
}

TEST test_sample_errors(void) {
    float lg[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    int32_t out[2];
    gdl_tensor *t = gdl_from_array(lg, 2, shape, GDL_F32, gdl_cpu()), *i32;
    if (!t) FAILm(gdl_last_error());
    ASSERT_EQ(-1, gdl_sample_logits(t, 1.0, 0, 0, out));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_sample_logits: top_k 0 out of range [1, V = 3]");
    ASSERT_EQ(-1, gdl_sample_logits(t, 1.0, -2, 0, out));
    ASSERT_CONTAINS(gdl_last_error(), "top_k -2");
    ASSERT_EQ(-1, gdl_sample_logits(t, 1.0, 4, 0, out));
    ASSERT_CONTAINS(gdl_last_error(), "top_k 4 out of range [1, V = 3]");
    ASSERT_EQ(-1, gdl_sample_logits(t, -0.5, 2, 0, out));
    ASSERT_CONTAINS(gdl_last_error(), "temperature -0.5 must be finite and >= 0");
    ASSERT_EQ(-1, gdl_sample_logits(t, NAN, 2, 0, out));
    ASSERT_CONTAINS(gdl_last_error(), "temperature nan");
    ASSERT_EQ(-1, gdl_sample_logits(t, 1.0, 2, 0, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "out is NULL");
    ((float *)t->data)[4] = NAN;
    ASSERT_EQ(-1, gdl_sample_logits(t, 1.0, 2, 0, out));
    ASSERT_CONTAINS(gdl_last_error(), "logit 1 of row 1 is NaN");
    gdl_free(t);
    i32 = gdl_zeros(2, shape, GDL_I32, gdl_cpu());
    ASSERT_EQ(-1, gdl_sample_logits(i32, 1.0, 2, 0, out));
    ASSERT_CONTAINS(gdl_last_error(), "logits must be f32, f16 or bf16, got i32 [2,3]");
    gdl_free(i32);
    ASSERT_NO_LEAK();
    PASS();
}

#ifndef FORTUNES_SYS /* -DFORTUNES_SYS=\"DIR\" points the test at a copy */
#define FORTUNES_SYS "/usr/share/games/fortunes"
#endif

/* Debian's fortunes when installed (make data-text): the English corpus and the six languages. */
TEST test_fortunes_real(void) {
    gdl_text_list en, langs, tr, va;
    int64_t per[6] = {0}, i;
    size_t bytes = 0;
    int c;
    if (gdl_fortunes_languages(FORTUNES_SYS, &langs) < 0) {
        fprintf(stderr, "\n*** SKIPPED test_fortunes_real: Debian's fortunes are not installed (%s)\n"
                        "*** (make data-text installs them)\n", gdl_last_error());
        SKIPm("Debian's fortunes are not installed in " FORTUNES_SYS " (make data-text)");
    }
    if (gdl_fortunes_english(FORTUNES_SYS, &en) < 0) FAILm(gdl_last_error());
    for (i = 0; i < en.n; i++) bytes += en.lens[i];
    printf("  fortunes: English %lld entries, %zu bytes;", (long long)en.n, bytes);
    ASSERT(en.n > 10000 && bytes > 2000000);
    ASSERT_EQ(6, langs.num_classes);
    for (i = 0; i < langs.n; i++) per[langs.labels[i]]++;
    for (c = 0; c < 6; c++) {
        printf(" %s %lld", langs.class_names[c], (long long)per[c]);
        ASSERT(per[c] > 1000);
    }
    printf("\n");
    ASSERT_EQ(en.n, per[0]);
    ASSERT_EQ(0, gdl_text_split(&langs, 0.1, 0, &tr, &va));
    ASSERT(va.n > langs.n / 20 && va.n < langs.n / 5);
    gdl_text_list_free(&tr);
    gdl_text_list_free(&va);
    gdl_text_list_free(&langs);
    gdl_text_list_free(&en);
    ASSERT_NO_LEAK();
    PASS();
}

/* Every allocation of the text functions failing in turn: a clear error, nothing leaked, then success. */
enum { OOM_VOCAB, OOM_WORDS, OOM_LOAD, OOM_WINDOWS, OOM_CLASSES, OOM_DIR, OOM_SPLIT, OOM_SAMPLE, OOM_CASES };
static int text_oom_case(int c, gdl_vocab *v, const gdl_text_list *tl, gdl_tensor *lg) {
    static const char text[] = "some words, some more w\xC3\xB6rds";
    gdl_vocab_opts o = gdl_vocab_defaults();
    int32_t tok[40], out[3];
    gdl_text_list a, b;
    gdl_dataset *ds;
    gdl_vocab *w;
    int i;
    switch (c) {
    case OOM_VOCAB:
    case OOM_WORDS:
        o.level = c == OOM_WORDS ? GDL_VOCAB_WORD : GDL_VOCAB_CHAR;
        w = gdl_vocab_build(text, strlen(text), &o);
        gdl_vocab_free(w);
        return w ? 0 : -1;
    case OOM_LOAD:
        w = gdl_vocab_load(tpath("oom.vocab"));
        gdl_vocab_free(w);
        return w ? 0 : -1;
    case OOM_WINDOWS:
        for (i = 0; i < 40; i++) tok[i] = i % 5;
        ds = gdl_dataset_lm_windows(tok, 40, 8, 3, 5);
        gdl_dataset_free(ds);
        return ds ? 0 : -1;
    case OOM_CLASSES:
        ds = gdl_dataset_text_classes(tl, v, 6);
        gdl_dataset_free(ds);
        return ds ? 0 : -1;
    case OOM_DIR:
        memset(&a, 0, sizeof a);
        i = gdl_text_read_dir(tpath("oomdir"), 0, "x", &a);
        gdl_text_list_free(&a);
        return i;
    case OOM_SPLIT:
        i = gdl_text_split(tl, 0.5, 1, &a, &b);
        if (i == 0) {
            gdl_text_list_free(&a);
            gdl_text_list_free(&b);
        }
        return i;
    default:
        return gdl_sample_logits(lg, 1.0, 2, 5, out);
    }
}

TEST test_text_out_of_memory(void) {
    gdl_vocab *v = gdl_vocab_build("abcdef", 6, NULL);
    gdl_text_list tl;
    float l6[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    gdl_tensor *lg = gdl_from_array(l6, 2, shape, GDL_F32, gdl_cpu());
    int c;
    long k, before;
    memset(&tl, 0, sizeof tl);
    ASSERT(v && lg);
    ASSERT_EQ(0, gdl_vocab_save(v, tpath("oom.vocab")));
    remember(tpath("oom.vocab"));
    ASSERT_EQ(0, gdl_text_read_fortune_file(write_text("oom.txt", "abc\n%\nde\n%\nf\n"), 1, "one", &tl));
    ASSERT_EQ(0, make_dir(tpath("oomdir")));
    ASSERT(write_text("oomdir/b", "bee\n%\nbe\n") && write_text("oomdir/a", "ay\n"));
    for (c = 0; c < OOM_CASES; c++) {
        before = live;
        for (k = 0; k < 1000; k++) {
            int rc;
            fail_after = k;
            injected = 0;
            rc = text_oom_case(c, v, &tl, lg);
            fail_after = -1;
            if (rc == 0) break;
            if (!injected) FAILf("case %d: failed without an injected failure: %s", c, gdl_last_error());
            ASSERT_CONTAINS(gdl_last_error(), "out of memory");
            ASSERT_EQm("leak after an allocation failure", before, live);
        }
        if (k == 1000) FAILf("case %d never succeeded", c);
        ASSERT_EQ(before, live);
    }
    gdl_text_list_free(&tl);
    gdl_vocab_free(v);
    gdl_free(lg);
    ASSERT_NO_LEAK();
    PASS();
}

SUITE(text) {
    SET_SETUP(setup, NULL);
    RUN_TEST(test_vocab_char_roundtrip);
    RUN_TEST(test_vocab_word);
    RUN_TEST(test_vocab_save_load);
#ifndef _WIN32
    RUN_TEST(test_saves_ignore_planted_symlinks);
#endif
    RUN_TEST(test_vocab_errors);
    RUN_TEST(test_lm_windows);
    RUN_TEST(test_text_classes);
    RUN_TEST(test_fortune_reader);
#ifndef _WIN32
    RUN_TEST(text_dir_reads_regular_files_only);
#endif
    RUN_TEST(test_text_split);
    RUN_TEST(test_sample_greedy);
    RUN_TEST(test_sample_distribution);
    RUN_TEST(test_sample_errors);
    RUN_TEST(test_text_out_of_memory);
    RUN_TEST(test_fortunes_real);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/gdl_test_data_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN_SUITE(datasets);
    RUN_SUITE(fashion_mnist);
    RUN_SUITE(loader);
    RUN_SUITE(text);
    cleanup_tmp();
    gdl_shutdown();
    HARNESS_MAIN_END();
}
