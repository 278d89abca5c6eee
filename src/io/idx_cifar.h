/* ---------------------------------------------------------------------------
   src/io/idx_cifar.h — the file helpers that src/io/ shares, IDX files and
   CIFAR-10 binary batches. Every function of src/io/ fails with -1 and a message that
   names the function, the file and the problem; outputs are written only on
   success, and every error path frees what it allocated.
   ------------------------------------------------------------------------- */
#ifdef GPUDL_ZLIB
#include <zlib.h>
#endif

/* ---- shared helpers ---------------------------------------------------- */

static int gdl__host_is_le(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static void gdl__bswap(unsigned char *p, size_t elem, size_t count) {
    size_t i, j;
    for (i = 0; i < count; i++, p += elem)
        for (j = 0; j < elem / 2; j++) {
            unsigned char t = p[j];
            p[j] = p[elem - 1 - j];
            p[elem - 1 - j] = t;
        }
}

static const char *gdl__strerr(int e) { return e ? strerror(e) : "unknown error"; }

/* Read the open file f (path) to its end, or its first max bytes, into a fresh buffer (NUL-terminated for
   convenience); f is closed. */
static int gdl__read_stream(const char *fn, const char *path, FILE *f, size_t max, unsigned char **out,
                            size_t *out_len) {
    unsigned char *buf;
    size_t len = 0, cap = (size_t)1 << 16, hint = 0;
    long end;
    /* the size, as a hint only: trusted once the first chunk reads fine */
    if (fseek(f, 0, SEEK_END) == 0 && (end = ftell(f)) > 0 && (uint64_t)end < (uint64_t)(((size_t)-1) / 2))
        hint = (size_t)end;
    if (fseek(f, 0, SEEK_SET) != 0) {
        gdl__set_error("%s: %s: cannot seek: %s", fn, path, gdl__strerr(errno));
        fclose(f);
        return -1;
    }
    buf = (unsigned char *)GPUDL_MALLOC(cap + 1);
    if (!buf) {
        gdl__set_error("%s: %s: out of memory", fn, path);
        fclose(f);
        return -1;
    }
    for (;;) {
        size_t k;
        if (len >= max) break;
        if (len == cap) {
            size_t want = cap * 2;
            unsigned char *nb;
            if (cap > ((size_t)-1) / 4) {
                gdl__set_error("%s: %s: file too large", fn, path);
                goto fail;
            }
            if (hint >= want) want = hint + 1; /* +1: EOF is seen without another regrow */
            nb = (unsigned char *)GPUDL_REALLOC(buf, want + 1);
            if (!nb) {
                gdl__set_error("%s: %s: out of memory reading %zu bytes", fn, path, want);
                goto fail;
            }
            buf = nb;
            cap = want;
        }
        k = fread(buf + len, 1, cap - len < max - len ? cap - len : max - len, f);
        len += k;
        if (k == 0) {
            if (ferror(f)) {
                gdl__set_error("%s: %s: read error: %s", fn, path, gdl__strerr(errno));
                goto fail;
            }
            break;
        }
    }
    fclose(f);
    buf[len] = 0;
    *out = buf;
    *out_len = len;
    return 0;
fail:
    GPUDL_FREE(buf);
    fclose(f);
    return -1;
}

/* Read a whole file into a fresh buffer (NUL-terminated for convenience). */
static int gdl__read_file(const char *fn, const char *path, unsigned char **out, size_t *out_len) {
    FILE *f;
    if (!path) {
        gdl__set_error("%s: path is NULL", fn);
        return -1;
    }
    f = gdl__os_fopen_read(path);
    if (!f) {
        gdl__set_error("%s: %s: cannot open: %s", fn, path, gdl__strerr(errno));
        return -1;
    }
    return gdl__read_stream(fn, path, f, (size_t)-1, out, out_len);
}

/* A regular file only (gdl__os_fopen_regular: no FIFO, no device), and no more of it than its size when
   opened: what a reader of every file in a directory takes. */
static int gdl__read_regular_file(const char *fn, const char *path, unsigned char **out, size_t *out_len) {
    uint64_t size = 0;
    FILE *f = gdl__os_fopen_regular(path, &size);
    if (!f) {
        if (errno == EINVAL) gdl__set_error("%s: %s: not a regular file (a FIFO, a device, a socket): not read", fn, path);
        else gdl__set_error("%s: %s: cannot open: %s", fn, path, gdl__strerr(errno));
        return -1;
    }
    if (size > (uint64_t)(((size_t)-1) / 4)) {
        gdl__set_error("%s: %s: file too large (%llu bytes)", fn, path, (unsigned long long)size);
        fclose(f);
        return -1;
    }
    return gdl__read_stream(fn, path, f, (size_t)size, out, out_len);
}

/* ---- IDX ---------------------------------------------------------------- */

/* A byte source: a plain FILE, or a gzFile; two peeked bytes are replayed. */
typedef struct gdl__rd {
    FILE *f;
#ifdef GPUDL_ZLIB
    gzFile gz;
#endif
    unsigned char pb[2];
    size_t npb, ipb;
    int gz_err; /* a zlib error was seen */
    int gz_corrupt; /* ... and it was bad data (a CRC or format error), not the stream ending early */
    int io_errno; /* a stdio read error was seen: its errno */
    char gz_msg[128];
} gdl__rd;

static int gdl__rd_open(const char *fn, const char *path, gdl__rd *r) {
    memset(r, 0, sizeof *r);
    r->f = fopen(path, "rb");
    if (!r->f) {
        gdl__set_error("%s: %s: cannot open: %s", fn, path, gdl__strerr(errno));
        return -1;
    }
    r->npb = fread(r->pb, 1, 2, r->f);
    if (ferror(r->f)) {
        gdl__set_error("%s: %s: read error: %s", fn, path, gdl__strerr(errno));
        fclose(r->f);
        r->f = NULL;
        return -1;
    }
    if (r->npb == 2 && r->pb[0] == 0x1f && r->pb[1] == 0x8b) {
#ifdef GPUDL_ZLIB
        fclose(r->f);
        r->f = NULL;
        r->npb = 0;
        r->gz = gzopen(path, "rb");
        if (!r->gz) {
            gdl__set_error("%s: %s: gzopen failed: %s", fn, path, gdl__strerr(errno));
            return -1;
        }
        gzbuffer(r->gz, 1 << 18);
#else
        gdl__set_error("%s: %s: file is gzip-compressed: build with -DGPUDL_ZLIB and link -lz, "
                       "or gunzip it first", fn, path);
        fclose(r->f);
        r->f = NULL;
        return -1;
#endif
    }
    return 0;
}

static void gdl__rd_close(gdl__rd *r) {
    if (r->f) fclose(r->f);
#ifdef GPUDL_ZLIB
    if (r->gz) gzclose(r->gz);
#endif
    memset(r, 0, sizeof *r);
}

/* Read up to n bytes; fewer means end of data or an error (*err set). */
static size_t gdl__rd_read(gdl__rd *r, void *dst, size_t n, int *err) {
    unsigned char *d = (unsigned char *)dst;
    size_t got = 0;
    while (got < n && r->ipb < r->npb) d[got++] = r->pb[r->ipb++];
#ifdef GPUDL_ZLIB
    if (r->gz) {
        while (got < n) {
            size_t want = n - got;
            int k = gzread(r->gz, d + got, (unsigned)(want > (1u << 30) ? (1u << 30) : want));
            if (k <= 0) {
                int zerr = Z_OK;
                const char *m = gzerror(r->gz, &zerr);
                if (k < 0 || (zerr != Z_OK && zerr != Z_STREAM_END)) {
                    r->gz_err = 1;
                    r->gz_corrupt = zerr == Z_DATA_ERROR;
                    snprintf(r->gz_msg, sizeof r->gz_msg, "%s", m ? m : "gzip error");
                    *err = 1;
                }
                break;
            }
            got += (size_t)k;
        }
        return got;
    }
#endif
    if (got < n) {
        got += fread(d + got, 1, n - got, r->f);
        if (got < n && ferror(r->f)) {
            r->io_errno = errno ? errno : EIO;
            *err = 1;
        }
    }
    return got;
}

/* " (gzip: unexpected end of file)", " (read error: ...)" or "" */
/* A damaged gzip file is not a short one: say so (1), or leave the message to the caller (0). */
static int gdl__rd_corrupt(const char *fn, const char *path, const gdl__rd *r) {
    const char *m = r->gz_msg;
    size_t pl = strlen(path);
    if (!r->gz_corrupt) return 0;
    if (strncmp(m, path, pl) == 0 && m[pl] == ':' && m[pl + 1] == ' ') m += pl + 2; /* zlib names the file too */
    gdl__set_error("%s: %s: corrupt gzip data (zlib: %s): the file is damaged; fetch it again", fn, path, m);
    return 1;
}

static const char *gdl__rd_why(const gdl__rd *r, char *buf, size_t cap) {
    if (r->gz_err) snprintf(buf, cap, " (gzip: %s)", r->gz_msg);
    else if (r->io_errno) snprintf(buf, cap, " (read error: %s)", gdl__strerr(r->io_errno));
    else buf[0] = 0;
    return buf;
}

/* gdl_idx_load's header: the magic (dtype, ndim) and the dims into res; its length (*hlen) and the data's
   size (*bytes). */
static int gdl__idx_header(const char *fn, const char *path, gdl__rd *r, gdl_idx *res, size_t *hlen,
                           uint64_t *bytes, int *err) {
    const uint64_t limit = (uint64_t)1 << 31; /* 2 GiB of data */
    unsigned char hdr[4 + 4 * GDL_IDX_MAX_DIMS];
    char why[160];
    size_t got;
    int d;
    got = gdl__rd_read(r, hdr, 4, err);
    if (got < 4) {
        if (!gdl__rd_corrupt(fn, path, r))
            gdl__set_error("%s: %s: truncated: expected a 4-byte magic number, got %zu bytes%s", fn, path,
                           got, gdl__rd_why(r, why, sizeof why));
        return -1;
    }
    if (hdr[0] != 0 || hdr[1] != 0) {
        gdl__set_error("%s: %s: bad magic 0x%02X%02X%02X%02X: the first two bytes must be zero "
                       "(not an IDX file?)", fn, path, hdr[0], hdr[1], hdr[2], hdr[3]);
        return -1;
    }
    res->dtype_code = hdr[2];
    switch (hdr[2]) {
    case 0x08: case 0x09: res->elem_size = 1; break;
    case 0x0B: res->elem_size = 2; break;
    case 0x0C: case 0x0D: res->elem_size = 4; break;
    case 0x0E: res->elem_size = 8; break;
    default:
        gdl__set_error("%s: %s: unknown type byte 0x%02X in magic 0x%02X%02X%02X%02X (expected 0x08, "
                       "0x09, 0x0B, 0x0C, 0x0D or 0x0E)", fn, path, hdr[2], hdr[0], hdr[1], hdr[2], hdr[3]);
        return -1;
    }
    res->ndim = hdr[3];
    if (res->ndim < 1 || res->ndim > GDL_IDX_MAX_DIMS) {
        gdl__set_error("%s: %s: bad number of dimensions %d in magic (expected 1..%d)", fn, path,
                       res->ndim, GDL_IDX_MAX_DIMS);
        return -1;
    }
    *hlen = 4 + 4 * (size_t)res->ndim;
    got = gdl__rd_read(r, hdr + 4, *hlen - 4, err);
    if (got < *hlen - 4) {
        if (!gdl__rd_corrupt(fn, path, r))
            gdl__set_error("%s: %s: truncated header: expected %zu bytes, got %zu%s", fn, path, *hlen,
                           4 + got, gdl__rd_why(r, why, sizeof why));
        return -1;
    }
    *bytes = res->elem_size;
    res->count = 1;
    for (d = 0; d < res->ndim; d++) {
        const unsigned char *p = hdr + 4 + 4 * d;
        uint64_t v = ((uint64_t)p[0] << 24) | ((uint64_t)p[1] << 16) | ((uint64_t)p[2] << 8) | p[3];
        if (v == 0) {
            gdl__set_error("%s: %s: dimension %d is 0", fn, path, d);
            return -1;
        }
        if (v > limit / *bytes) {
            gdl__set_error("%s: %s: data size exceeds 2 GiB (dimension %d is %llu)", fn, path, d,
                           (unsigned long long)v);
            return -1;
        }
        *bytes *= v;
        res->dims[d] = (int64_t)v;
        res->count *= (int64_t)v;
    }
    return 0;
}

/* The data (bytes of it, into *data) and the end of the file: nothing may follow. */
static int gdl__idx_data(const char *fn, const char *path, gdl__rd *r, size_t hlen, uint64_t bytes,
                         unsigned char **data, int *err) {
    char why[160];
    size_t got = 0, k_read;
    /* The buffer grows with the data read, so that a few bytes claiming 2 GiB
       (a gzip stream's size is not known before it is read) cost a few bytes. */
    {
        size_t cap = 0, want;
        do {
            unsigned char *grown;
            want = (size_t)bytes - got;
            if (cap - got < want) {
                size_t ncap = cap ? cap * 2 : (size_t)1 << 16;
                if (ncap > (size_t)bytes) ncap = (size_t)bytes;
                if (!(grown = (unsigned char *)GPUDL_REALLOC(*data, ncap))) {
                    gdl__set_error("%s: %s: out of memory allocating %llu bytes", fn, path,
                                   (unsigned long long)ncap);
                    return -1;
                }
                *data = grown;
                cap = ncap;
                want = cap - got;
            }
            k_read = gdl__rd_read(r, *data + got, want, err);
            got += k_read;
        } while (k_read == want && got < bytes && !*err);
    }
    if (got < bytes) {
        if (!gdl__rd_corrupt(fn, path, r))
            gdl__set_error("%s: %s: truncated: expected %llu bytes, got %llu%s", fn, path,
                           (unsigned long long)(hlen + bytes),
                           (unsigned long long)(hlen + got), gdl__rd_why(r, why, sizeof why));
        return -1;
    }
    {
        unsigned char extra[4096];
        uint64_t more = 0;
        size_t k;
        while ((k = gdl__rd_read(r, extra, sizeof extra, err)) > 0) more += k;
        if (*err) {
            if (!gdl__rd_corrupt(fn, path, r))
                gdl__set_error("%s: %s: read error after the data%s", fn, path, gdl__rd_why(r, why, sizeof why));
            return -1;
        }
        if (more) {
            gdl__set_error("%s: %s: %llu trailing bytes: expected %llu bytes, got %llu", fn, path,
                           (unsigned long long)more, (unsigned long long)(hlen + bytes),
                           (unsigned long long)(hlen + bytes + more));
            return -1;
        }
    }
    if (*err) {
        if (!gdl__rd_corrupt(fn, path, r))
            gdl__set_error("%s: %s: read error%s", fn, path, gdl__rd_why(r, why, sizeof why));
        return -1;
    }
    return 0;
}

GPUDL_API int gdl_idx_load(const char *path, gdl_idx *out) {
    static const char fn[] = "gdl_idx_load";
    gdl__rd r;
    gdl_idx res;
    int err = 0;
    size_t hlen = 0;
    uint64_t bytes = 0;
    unsigned char *data = NULL;

    if (!path || !out) {
        gdl__set_error("%s: path or out is NULL", fn);
        return -1;
    }
    if (gdl__rd_open(fn, path, &r) < 0) return -1;
    memset(&res, 0, sizeof res);
    if (gdl__idx_header(fn, path, &r, &res, &hlen, &bytes, &err) < 0 ||
        gdl__idx_data(fn, path, &r, hlen, bytes, &data, &err) < 0)
        goto fail;
    if (res.elem_size > 1 && gdl__host_is_le()) gdl__bswap(data, res.elem_size, (size_t)res.count);
    gdl__rd_close(&r);
    res.data = data;
    *out = res;
    return 0;
fail:
    GPUDL_FREE(data);
    gdl__rd_close(&r);
    return -1;
}

GPUDL_API void gdl_idx_free(gdl_idx *idx) {
    if (!idx) return;
    GPUDL_FREE(idx->data);
    memset(idx, 0, sizeof *idx);
}

GPUDL_API int gdl_idx_check_pair(const gdl_idx *images, const gdl_idx *labels, int num_classes,
                                 const char *what) {
    static const char fn[] = "gdl_idx_check_pair";
    const uint8_t *lab;
    int64_t i;
    if (!what) what = "dataset";
    if (!images || !labels || !images->data || !labels->data) {
        gdl__set_error("%s: %s: images or labels not loaded", fn, what);
        return -1;
    }
    if (num_classes < 1 || num_classes > 256) {
        gdl__set_error("%s: %s: num_classes %d must be in 1..256 for u8 labels", fn, what, num_classes);
        return -1;
    }
    if (images->dtype_code != 0x08 || images->ndim != 3) {
        gdl__set_error("%s: %s: images must be u8 (type 0x08) with 3 dims (count, rows, cols), got "
                       "type 0x%02X with %d dims", fn, what, images->dtype_code, images->ndim);
        return -1;
    }
    if (labels->dtype_code != 0x08 || labels->ndim != 1) {
        gdl__set_error("%s: %s: labels must be u8 (type 0x08) with 1 dim, got type 0x%02X with %d dims",
                       fn, what, labels->dtype_code, labels->ndim);
        return -1;
    }
    if (images->dims[0] != labels->dims[0]) {
        gdl__set_error("%s: %s: %lld images but %lld labels", fn, what, (long long)images->dims[0],
                       (long long)labels->dims[0]);
        return -1;
    }
    lab = (const uint8_t *)labels->data;
    for (i = 0; i < labels->dims[0]; i++)
        if (lab[i] >= num_classes) {
            gdl__set_error("%s: %s: label %d at index %lld is out of range [0, %d)", fn, what, lab[i],
                           (long long)i, num_classes);
            return -1;
        }
    return 0;
}

/* ---- CIFAR-10 binary ------------------------------------------------------ */

#define GDL__CIFAR_REC 3073 /* 1 label byte + 3 x 32 x 32 pixel bytes */

/* gdl_cifar10_load with its errors prefixed by fn, the public call the user made */
static int gdl__cifar10_load(const char *fn, const char *path, uint8_t **images, uint8_t **labels, int64_t *n) {
    unsigned char *buf, *shrunk;
    uint8_t *lab;
    size_t len, cnt, i;
    if (!images || !labels || !n) {
        gdl__set_error("%s: %s: an output pointer is NULL", fn, path ? path : "(null)");
        return -1;
    }
    if (gdl__read_file(fn, path, &buf, &len) < 0) return -1;
    if (len == 0 || len % GDL__CIFAR_REC != 0) {
        gdl__set_error("%s: %s: size %zu bytes is not a positive multiple of %d (1 label byte + 3072 "
                       "pixel bytes per record)", fn, path, len, GDL__CIFAR_REC);
        GPUDL_FREE(buf);
        return -1;
    }
    cnt = len / GDL__CIFAR_REC;
    for (i = 0; i < cnt; i++)
        if (buf[i * GDL__CIFAR_REC] >= 10) {
            gdl__set_error("%s: %s: record %zu has label %d, out of range [0, 10)", fn, path, i,
                           buf[i * GDL__CIFAR_REC]);
            GPUDL_FREE(buf);
            return -1;
        }
    lab = (uint8_t *)GPUDL_MALLOC(cnt);
    if (!lab) {
        gdl__set_error("%s: %s: out of memory", fn, path);
        GPUDL_FREE(buf);
        return -1;
    }
    /* compact in place: the destination never passes the source */
    for (i = 0; i < cnt; i++) {
        lab[i] = buf[i * GDL__CIFAR_REC];
        memmove(buf + i * 3072, buf + i * GDL__CIFAR_REC + 1, 3072);
    }
    shrunk = (unsigned char *)GPUDL_REALLOC(buf, cnt * 3072);
    if (shrunk) buf = shrunk;
    *images = buf;
    *labels = lab;
    *n = (int64_t)cnt;
    return 0;
}
GPUDL_API int gdl_cifar10_load(const char *path, uint8_t **images, uint8_t **labels, int64_t *n) {
    return gdl__cifar10_load("gdl_cifar10_load", path, images, labels, n);
}

GPUDL_API int gdl_cifar10_load_dir(const char *dir, int train, uint8_t **images, uint8_t **labels,
                                   int64_t *n) {
    static const char fn[] = "gdl_cifar10_load_dir";
    static const char *const train_names[5] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                               "data_batch_4.bin", "data_batch_5.bin"};
    static const char *const test_names[1] = {"test_batch.bin"};
    const char *const *names = train ? train_names : test_names;
    int nfiles = train ? 5 : 1, k;
    uint8_t *all_img = NULL, *all_lab = NULL;
    int64_t total = 0;
    size_t dlen;
    if (!dir || !images || !labels || !n) {
        gdl__set_error("%s: dir or an output pointer is NULL", fn);
        return -1;
    }
    dlen = strlen(dir);
    for (k = 0; k < nfiles; k++) {
        uint8_t *img = NULL, *lab = NULL;
        int64_t cnt = 0;
        int sep = dlen > 0 && dir[dlen - 1] != '/' && dir[dlen - 1] != '\\';
        char *p = (char *)GPUDL_MALLOC(dlen + (size_t)sep + strlen(names[k]) + 1);
        int rc;
        if (!p) {
            gdl__set_error("%s: %s: out of memory", fn, dir);
            goto fail;
        }
        memcpy(p, dir, dlen);
        if (sep) p[dlen] = '/';
        strcpy(p + dlen + (size_t)sep, names[k]);
        rc = gdl__cifar10_load(fn, p, &img, &lab, &cnt); /* its message names the file */
        GPUDL_FREE(p);
        if (rc < 0) goto fail;
        if (!all_img) {
            all_img = img;
            all_lab = lab;
        } else {
            uint8_t *ni = (uint8_t *)GPUDL_REALLOC(all_img, (size_t)(total + cnt) * 3072);
            uint8_t *nl;
            if (ni) all_img = ni;
            nl = ni ? (uint8_t *)GPUDL_REALLOC(all_lab, (size_t)(total + cnt)) : NULL;
            if (nl) all_lab = nl;
            if (!ni || !nl) {
                gdl__set_error("%s: %s: out of memory concatenating %s", fn, dir, names[k]);
                GPUDL_FREE(img);
                GPUDL_FREE(lab);
                goto fail;
            }
            memcpy(all_img + (size_t)total * 3072, img, (size_t)cnt * 3072);
            memcpy(all_lab + (size_t)total, lab, (size_t)cnt);
            GPUDL_FREE(img);
            GPUDL_FREE(lab);
        }
        total += cnt;
    }
    *images = all_img;
    *labels = all_lab;
    *n = total;
    return 0;
fail:
    GPUDL_FREE(all_img);
    GPUDL_FREE(all_lab);
    return -1;
}

