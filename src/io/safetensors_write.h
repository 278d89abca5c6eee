/* ---- safetensors writer ----------------------------------------------------- */

typedef struct gdl__sb {
    char *p;
    size_t len, cap;
    int oom;
} gdl__sb;

static void gdl__sb_put(gdl__sb *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        char *np;
        while (nc < b->len + n + 1) nc *= 2;
        np = (char *)GPUDL_REALLOC(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void gdl__sb_puts(gdl__sb *b, const char *s) { gdl__sb_put(b, s, strlen(s)); }

static void gdl__sb_u64(gdl__sb *b, unsigned long long v) {
    char t[32];
    snprintf(t, sizeof t, "%llu", v);
    gdl__sb_puts(b, t);
}

/* A JSON string literal; s must be valid UTF-8. */
static void gdl__sb_json_str(gdl__sb *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    gdl__sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        switch (c) {
        case '"': gdl__sb_put(b, "\\\"", 2); break;
        case '\\': gdl__sb_put(b, "\\\\", 2); break;
        case '\b': gdl__sb_put(b, "\\b", 2); break;
        case '\f': gdl__sb_put(b, "\\f", 2); break;
        case '\n': gdl__sb_put(b, "\\n", 2); break;
        case '\r': gdl__sb_put(b, "\\r", 2); break;
        case '\t': gdl__sb_put(b, "\\t", 2); break;
        default:
            if (c < 0x20) {
                memcpy(esc, "\\u00", 4);
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 15];
                gdl__sb_put(b, esc, 6);
            } else
                gdl__sb_put(b, (const char *)&c, 1);
        }
    }
    gdl__sb_put(b, "\"", 1);
}

/* A save killed mid-write leaves path.tmp.<pid>.<hex> behind (gdl__os_create_temporary). Before writing,
   remove those whose process is gone, so that killed saves do not pile up.
   Only names of exactly that form are touched; this process's own are left
   alone, and so are those of live processes: gdl__os_pid_gone says whether
   the pid lives here, and since a pid from another PID namespace or host (a
   shared volume) means nothing here, a temporary is removed only if its
   write lock can also be taken (a writer holds one while it writes; the
   kernel drops it when the writer dies). A pid reused since keeps its file:
   harmless, only not removed. */
static void gdl__st_remove_stale_temporaries(const char *path) {
    char dirname[4096], full[4352];
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    size_t bl = strlen(base);
    gdl__dir d;
    const char *e;
    if (slash) {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dirname) return;
        memcpy(dirname, path, n);
        dirname[n] = 0;
        if (n == 0) strcpy(dirname, "/");
    } else {
        strcpy(dirname, ".");
    }
    if (gdl__dir_open(&d, dirname) < 0) return;
    while ((e = gdl__dir_next(&d)) != NULL) {
        const char *rest;
        char *end;
        long pid;
        if (strncmp(e, base, bl) != 0 || strncmp(e + bl, ".tmp.", 5) != 0) continue;
        rest = e + bl + 5;
        pid = strtol(rest, &end, 10);
        if (end == rest || *end != '.' || pid <= 0 || pid > 0x7fffffffL || pid == gdl__os_pid()) continue;
        rest = end + 1; /* the random part: hex digits to the end of the name */
        if (!*rest || rest[strspn(rest, "0123456789abcdef")] != 0) continue;
        if (!gdl__os_pid_gone(pid)) continue;
        snprintf(full, sizeof full, "%s/%s", dirname, e);
        gdl__os_remove_if_unlocked(full);
    }
    gdl__dir_close(&d);
}

/* gdl_st_write's names (what: "tensor name", "metadata key"): none twice. 0 / -1. */
static int gdl__st_no_dup(const char *fn, const char *path, const char *const *strs, int n, const char *what) {
    int oom;
    const char *dup = gdl__find_dup(strs, n, &oom);
    if (oom) gdl__set_error("%s: %s: out of memory", fn, path);
    else if (dup) gdl__set_error("%s: %s: duplicate %s '%s'", fn, path, what, dup);
    return dup || oom ? -1 : 0;
}

/* gdl_st_write's tensors checked before anything is written: names, dtypes, shapes, data; their byte sizes
   (sizes[k]) and names (names[k]). */
static int gdl__st_check_tensors(const char *fn, const char *path, int n, const gdl_st_tensor *tensors,
                                 uint64_t *sizes, const char **names) {
    uint64_t off = 0;
    int k, d;
    for (k = 0; k < n; k++) {
        const gdl_st_tensor *t = &tensors[k];
        size_t es, nl;
        if (!t->name) {
            gdl__set_error("%s: %s: tensor %d has no name", fn, path, k);
            return -1;
        }
        nl = strlen(t->name);
        if (nl >= GDL_ST_NAME_MAX || gdl__utf8_check((const unsigned char *)t->name, nl) != nl ||
            strcmp(t->name, "__metadata__") == 0) {
            gdl__set_error("%s: %s: tensor %d: name '%.60s' must be valid UTF-8, shorter than %d bytes and not "
                           "__metadata__", fn, path, k, t->name, GDL_ST_NAME_MAX);
            return -1;
        }
        es = gdl_st_dtype_size(t->dtype);
        if (!es) {
            gdl__set_error("%s: %s: tensor '%s': unknown dtype \"%s\"", fn, path, t->name,
                           t->dtype ? t->dtype : "(null)");
            return -1;
        }
        if (t->ndim < 0 || t->ndim > GDL_ST_MAX_DIMS || (t->ndim > 0 && !t->shape)) {
            gdl__set_error("%s: %s: tensor '%s': ndim %d must be 0..%d (with a shape)", fn, path, t->name, t->ndim,
                           GDL_ST_MAX_DIMS);
            return -1;
        }
        for (d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0) {
                gdl__set_error("%s: %s: tensor '%s': shape[%d] = %lld is negative", fn, path, t->name, d,
                               (long long)t->shape[d]);
                return -1;
            }
        if (gdl__st_nbytes(es, t->ndim, t->shape, &sizes[k]) < 0 || sizes[k] > UINT64_MAX - off) {
            gdl__set_error("%s: %s: tensor '%s': byte size overflows", fn, path, t->name);
            return -1;
        }
        if (sizes[k] > 0 && !t->data) {
            gdl__set_error("%s: %s: tensor '%s': data is NULL", fn, path, t->name);
            return -1;
        }
        off += sizes[k];
        names[k] = t->name;
    }
    return gdl__st_no_dup(fn, path, names, n, "tensor name");
}

/* gdl_st_write's metadata checked: keys and values valid UTF-8, no key twice. */
static int gdl__st_check_meta(const char *fn, const char *path, int n_meta, const char *const *meta_keys,
                              const char *const *meta_vals) {
    int k;
    for (k = 0; k < n_meta; k++) {
        const char *mk = meta_keys[k], *mv = meta_vals[k];
        if (!mk || !mv || gdl__utf8_check((const unsigned char *)mk, strlen(mk)) != strlen(mk) ||
            gdl__utf8_check((const unsigned char *)mv, strlen(mv)) != strlen(mv)) {
            gdl__set_error("%s: %s: metadata %d: key and value must be non-NULL valid UTF-8", fn, path, k);
            return -1;
        }
    }
    return gdl__st_no_dup(fn, path, meta_keys, n_meta, "metadata key");
}

/* The JSON header into h (h->oom on failure), padded with spaces to a multiple of 8 bytes. */
static void gdl__st_header(gdl__sb *h, int n, const gdl_st_tensor *tensors, const uint64_t *sizes, int n_meta,
                           const char *const *meta_keys, const char *const *meta_vals) {
    uint64_t off = 0;
    int k, d;
    gdl__sb_put(h, "{", 1);
    if (n_meta > 0) {
        gdl__sb_puts(h, "\"__metadata__\":{");
        for (k = 0; k < n_meta; k++) {
            if (k) gdl__sb_put(h, ",", 1);
            gdl__sb_json_str(h, meta_keys[k]);
            gdl__sb_put(h, ":", 1);
            gdl__sb_json_str(h, meta_vals[k]);
        }
        gdl__sb_put(h, "}", 1);
    }
    for (k = 0; k < n; k++) {
        const gdl_st_tensor *t = &tensors[k];
        if (k || n_meta > 0) gdl__sb_put(h, ",", 1);
        gdl__sb_json_str(h, t->name);
        gdl__sb_puts(h, ":{\"dtype\":");
        gdl__sb_json_str(h, t->dtype);
        gdl__sb_puts(h, ",\"shape\":[");
        for (d = 0; d < t->ndim; d++) {
            if (d) gdl__sb_put(h, ",", 1);
            gdl__sb_u64(h, (unsigned long long)t->shape[d]);
        }
        gdl__sb_puts(h, "],\"data_offsets\":[");
        gdl__sb_u64(h, (unsigned long long)off);
        gdl__sb_put(h, ",", 1);
        gdl__sb_u64(h, (unsigned long long)(off + sizes[k]));
        gdl__sb_puts(h, "]}");
        off += sizes[k];
    }
    gdl__sb_put(h, "}", 1);
    while (!h->oom && h->len % 8 != 0) gdl__sb_put(h, " ", 1);
}

/* The tensors' bytes to f, little-endian; -1 (errno set) when a write fails. */
static int gdl__st_write_data(FILE *f, int n, const gdl_st_tensor *tensors, const uint64_t *sizes) {
    int k;
    for (k = 0; k < n; k++) {
        const unsigned char *src = (const unsigned char *)tensors[k].data;
        size_t es = gdl_st_dtype_size(tensors[k].dtype), left = (size_t)sizes[k];
        if (!left) continue;
        if (es == 1 || gdl__host_is_le() || strcmp(tensors[k].dtype, "C64") == 0) {
            if (fwrite(src, 1, left, f) != left) return -1;
            /* C64 on a big-endian host would need per-component swaps: written as is */
        } else {
            unsigned char chunk[4096];
            while (left > 0) {
                size_t m = left < sizeof chunk ? left : sizeof chunk;
                memcpy(chunk, src, m);
                gdl__bswap(chunk, es, m / es);
                if (fwrite(chunk, 1, m, f) != m) return -1;
                src += m;
                left -= m;
            }
        }
    }
    return 0;
}

/* gdl_st_write with its errors prefixed by fn, the public call the user made (gdl_save_model, ...) */
static int gdl__st_write(const char *fn, const char *path, int n, const gdl_st_tensor *tensors, int n_meta,
                         const char *const *meta_keys, const char *const *meta_vals) {
    gdl__sb h;
    uint64_t *sizes = NULL;
    const char **names = NULL;
    char *tmp = NULL;
    FILE *f = NULL;
    int k;
    unsigned char lenb[8];

    memset(&h, 0, sizeof h);
    if (!path || n < 0 || (n > 0 && !tensors) || n_meta < 0 || (n_meta > 0 && (!meta_keys || !meta_vals))) {
        gdl__set_error("%s: %s: bad arguments (path, n=%d, tensors, n_meta=%d, meta arrays)", fn,
                       path ? path : "(null)", n, n_meta);
        return -1;
    }
    if (n > 0) {
        sizes = (uint64_t *)GPUDL_MALLOC((size_t)n * sizeof *sizes);
        names = (const char **)GPUDL_MALLOC((size_t)n * sizeof *names);
        if (!sizes || !names) {
            gdl__set_error("%s: %s: out of memory", fn, path);
            goto fail;
        }
    }
    /* validate everything before touching the file system */
    if (gdl__st_check_tensors(fn, path, n, tensors, sizes, names) < 0 ||
        gdl__st_check_meta(fn, path, n_meta, meta_keys, meta_vals) < 0)
        goto fail;

    /* the header */
    gdl__st_header(&h, n, tensors, sizes, n_meta, meta_keys, meta_vals);
    if (h.oom) {
        gdl__set_error("%s: %s: out of memory building the header", fn, path);
        goto fail;
    }
    if (h.len > GDL__ST_MAX_HEADER) {
        gdl__set_error("%s: %s: header is %zu bytes, over the 100000000-byte limit readers accept", fn, path, h.len);
        goto fail;
    }
    for (k = 0; k < 8; k++) lenb[k] = (unsigned char)((uint64_t)h.len >> (8 * k));

    /* write a new temporary next to path, flush, fsync, rename over path */
    tmp = (char *)GPUDL_MALLOC(strlen(path) + 64);
    if (!tmp) {
        gdl__set_error("%s: %s: out of memory", fn, path);
        goto fail;
    }
    gdl__st_remove_stale_temporaries(path);
    if (!(f = gdl__os_create_temporary(path, tmp, strlen(path) + 64, "wb"))) {
        gdl__set_error("%s: %s: cannot create temporary file %s: %s", fn, path, tmp, gdl__strerr(errno));
        GPUDL_FREE(tmp);
        tmp = NULL; /* nothing to remove */
        goto fail;
    }
    errno = 0;
    if (fwrite(lenb, 1, 8, f) != 8 || fwrite(h.p, 1, h.len, f) != h.len) goto io_fail;
    if (gdl__st_write_data(f, n, tensors, sizes) < 0) goto io_fail;
    if (fflush(f) != 0 || gdl__os_fsync(f) != 0) goto io_fail;
    {
        FILE *g = f;
        f = NULL;
        if (fclose(g) != 0) goto io_fail;
    }
    if (gdl__os_replace(tmp, path) != 0) {
        gdl__set_error("%s: %s: cannot rename %s over it: %s", fn, path, tmp, gdl__strerr(errno));
        goto fail;
    }
    GPUDL_FREE(tmp);
    GPUDL_FREE(h.p);
    GPUDL_FREE(sizes);
    GPUDL_FREE(names);
    return 0;
io_fail:
    gdl__set_error("%s: %s: writing temporary file %s failed: %s", fn, path, tmp, gdl__strerr(errno));
fail:
    if (f) fclose(f);
    if (tmp) {
        remove(tmp);
        GPUDL_FREE(tmp);
    }
    GPUDL_FREE(h.p);
    GPUDL_FREE(sizes);
    GPUDL_FREE(names);
    return -1;
}


GPUDL_API int gdl_st_write(const char *path, int n, const gdl_st_tensor *tensors, int n_meta,
                           const char *const *meta_keys, const char *const *meta_vals) {
    return gdl__st_write("gdl_st_write", path, n, tensors, n_meta, meta_keys, meta_vals);
}
