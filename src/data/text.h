/* ---------------------------------------------------------------------------
   src/data/text.h text data: char and word vocabularies, language-modelling
   windows, padded labelled text, strfile (fortune) readers, the fixed
   content-hash split, sampling with temperature and top-k.
   ------------------------------------------------------------------------- */

/* ---- hashing and small helpers -------------------------------------------- */

static uint64_t gdl__fnv1a(const unsigned char *s, size_t n, int lower) {
    uint64_t h = 0xcbf29ce484222325ull;
    size_t i;
    for (i = 0; i < n; i++) {
        unsigned c = s[i];
        if (lower && c >= 'A' && c <= 'Z') c += 32;
        h = (h ^ c) * 0x100000001b3ull;
    }
    return h;
}

static char *gdl__text_dup(const char *s, size_t n) {
    char *d = (char *)GPUDL_MALLOC(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* 0 if text[0, len) is valid UTF-8, else -1 + an error naming fn and the offset. */
static int gdl__text_utf8(const char *fn, const char *what, const char *text, size_t len) {
    size_t bad = gdl__utf8_check((const unsigned char *)text, len);
    if (bad == len) return 0;
    gdl__set_error("%s: %s is not valid UTF-8 at byte %zu of %zu", fn, what, bad, len);
    return -1;
}

/* 0 if a text file holds no NUL byte (entries and tokens are C strings), else -1 + an error. */
static int gdl__text_no_nul(const char *fn, const char *path, const unsigned char *buf, size_t len) {
    const unsigned char *z = (const unsigned char *)memchr(buf, 0, len);
    if (!z) return 0;
    gdl__set_error("%s: %s holds a NUL byte at %zu: not a text file", fn, path, (size_t)(z - buf));
    return -1;
}

/* ---- the tokenizer ---------------------------------------------------------- */

static int gdl__word_byte(unsigned c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '\'' || c >= 0x80;
}
static int gdl__space_byte(unsigned c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* The next token of text[*pos, len) (valid UTF-8): 1 and [*start, *start + *n), or 0 at the end. */
static int gdl__tok_next(int level, const unsigned char *t, size_t len, size_t *pos, size_t *start, size_t *n) {
    size_t i = *pos;
    if (level == GDL_VOCAB_CHAR) {
        unsigned c;
        if (i >= len) return 0;
        c = t[i];
        *start = i;
        *n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        *pos = i + *n;
        return 1;
    }
    while (i < len && gdl__space_byte(t[i])) i++;
    if (i >= len) {
        *pos = i;
        return 0;
    }
    *start = i;
    if (gdl__word_byte(t[i]))
        while (i < len && gdl__word_byte(t[i])) i++;
    else
        i++;
    *n = i - *start;
    *pos = i;
    return 1;
}

/* ---- the vocabulary ------------------------------------------------------------ */

struct gdl_vocab {
    int level, lowercase;
    int64_t n;          /* tokens, specials included */
    char **tok;         /* n NUL-terminated strings */
    size_t *tlen;
    int32_t *table;     /* open addressing over tok: ids, -1 empty; tcap a power of two >= 2n */
    int64_t tcap;
};

/* a[0, an) == b[0, bn), both lowered (ASCII) when lower */
static int gdl__tok_eq(const char *a, size_t an, const unsigned char *b, size_t bn, int lower) {
    size_t i;
    if (an != bn) return 0;
    for (i = 0; i < an; i++) {
        unsigned ca = (unsigned char)a[i], cb = b[i];
        if (lower && ca >= 'A' && ca <= 'Z') ca += 32;
        if (lower && cb >= 'A' && cb <= 'Z') cb += 32;
        if (ca != cb) return 0;
    }
    return 1;
}

/* The id of s[0, n) (lowered when the vocabulary lowercases), -1 if absent. */
static int32_t gdl__vocab_find(const gdl_vocab *v, const unsigned char *s, size_t n) {
    int lower = v->lowercase && v->level == GDL_VOCAB_WORD;
    uint64_t m = (uint64_t)v->tcap - 1, h = gdl__fnv1a(s, n, lower) & m;
    for (;; h = (h + 1) & m) {
        int32_t id = v->table[h];
        if (id < 0) return -1;
        if (gdl__tok_eq(v->tok[id], v->tlen[id], s, n, lower)) return id;
    }
}

GPUDL_API void gdl_vocab_free(gdl_vocab *v) {
    if (!v) return;
    gdl__free_strings(v->tok, v->n);
    GPUDL_FREE(v->tlen);
    GPUDL_FREE(v->table);
    GPUDL_FREE(v);
}

/* An empty vocabulary of n tokens (strings NULL). NULL + error. */
static gdl_vocab *gdl__vocab_new(const char *fn, int level, int lowercase, int64_t n) {
    gdl_vocab *v = (gdl_vocab *)GPUDL_MALLOC(sizeof(gdl_vocab));
    if (v) {
        memset(v, 0, sizeof *v);
        v->level = level;
        v->lowercase = lowercase;
        v->n = n;
        for (v->tcap = 16; v->tcap < 2 * n; v->tcap *= 2) {}
        v->tok = (char **)GPUDL_MALLOC(sizeof(char *) * (size_t)n);
        v->tlen = (size_t *)GPUDL_MALLOC(sizeof(size_t) * (size_t)n);
        v->table = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)v->tcap);
        if (v->tok) memset(v->tok, 0, sizeof(char *) * (size_t)n);
    }
    if (!v || !v->tok || !v->tlen || !v->table) {
        gdl__set_error("%s: out of memory for a vocabulary of %lld tokens", fn, (long long)n);
        if (v) v->n = 0;
        gdl_vocab_free(v);
        return NULL;
    }
    return v;
}

/* Sets token id to s[0, n) and enters it in the table. 0 / -1 (out of memory, duplicate). */
static int gdl__vocab_set(const char *fn, gdl_vocab *v, int32_t id, const char *s, size_t n) {
    uint64_t m = (uint64_t)v->tcap - 1, h = gdl__fnv1a((const unsigned char *)s, n, 0) & m;
    if (!(v->tok[id] = gdl__text_dup(s, n))) {
        gdl__set_error("%s: out of memory", fn);
        return -1;
    }
    v->tlen[id] = n;
    for (;; h = (h + 1) & m) {
        int32_t o = v->table[h];
        if (o < 0) break;
        if (v->tlen[o] == n && memcmp(v->tok[o], s, n) == 0) {
            gdl__set_error("%s: token %d \"%.40s\" repeats token %d", fn, (int)id, v->tok[id], (int)o);
            return -1;
        }
    }
    v->table[h] = id;
    return 0;
}

GPUDL_API gdl_vocab_opts gdl_vocab_defaults(void) {
    gdl_vocab_opts o;
    memset(&o, 0, sizeof o);
    o.level = GDL_VOCAB_CHAR;
    o.min_freq = 1;
    return o;
}

/* A distinct token of the text being counted: its first occurrence, and how often. */
typedef struct {
    const char *s;
    size_t n;
    int64_t count;
    int lower;
} gdl__tokcount;

/* count desc, then bytes (lowered when lowercasing) asc */
static int gdl__tokcount_cmp(const void *pa, const void *pb) {
    const gdl__tokcount *a = (const gdl__tokcount *)pa, *b = (const gdl__tokcount *)pb;
    size_t i, n = a->n < b->n ? a->n : b->n;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    for (i = 0; i < n; i++) {
        unsigned ca = (unsigned char)a->s[i], cb = (unsigned char)b->s[i];
        if (a->lower && ca >= 'A' && ca <= 'Z') ca += 32;
        if (a->lower && cb >= 'A' && cb <= 'Z') cb += 32;
        if (ca != cb) return ca < cb ? -1 : 1;
    }
    return a->n < b->n ? -1 : a->n > b->n;
}

/* The distinct tokens of text with their counts (*nd of them, a new array). 0 / -1. */
static int gdl__vocab_count(const char *fn, const gdl_vocab_opts *o, const char *text, size_t len,
                            gdl__tokcount **out, int64_t *nd) {
    int lower = o->lowercase && o->level == GDL_VOCAB_WORD;
    int64_t cap = 1024, used = 0, tcap = 2048;
    gdl__tokcount *d = (gdl__tokcount *)GPUDL_MALLOC(sizeof(gdl__tokcount) * (size_t)cap);
    int32_t *tab = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)tcap);
    size_t pos = 0, st, n;
    int64_t i;
    if (!d || !tab) goto oom;
    for (i = 0; i < tcap; i++) tab[i] = -1;
    while (gdl__tok_next(o->level, (const unsigned char *)text, len, &pos, &st, &n)) {
        uint64_t m = (uint64_t)tcap - 1, h = gdl__fnv1a((const unsigned char *)text + st, n, lower) & m;
        for (;; h = (h + 1) & m) {
            int32_t id = tab[h];
            if (id < 0) break;
            if (gdl__tok_eq(d[id].s, d[id].n, (const unsigned char *)text + st, n, lower)) break;
        }
        if (tab[h] >= 0) {
            d[tab[h]].count++;
            continue;
        }
        if (used == cap) {
            gdl__tokcount *nd2 = (gdl__tokcount *)GPUDL_REALLOC(d, sizeof(gdl__tokcount) * (size_t)(cap * 2));
            if (!nd2) goto oom;
            d = nd2;
            cap *= 2;
        }
        d[used].s = text + st;
        d[used].n = n;
        d[used].count = 1;
        d[used].lower = lower;
        tab[h] = (int32_t)used++;
        if (used * 2 > tcap) { /* grow and rehash */
            int32_t *nt = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)(tcap * 2));
            if (!nt) goto oom;
            GPUDL_FREE(tab);
            tab = nt;
            tcap *= 2;
            for (i = 0; i < tcap; i++) tab[i] = -1;
            for (i = 0; i < used; i++) {
                uint64_t m2 = (uint64_t)tcap - 1;
                uint64_t h2 = gdl__fnv1a((const unsigned char *)d[i].s, d[i].n, lower) & m2;
                while (tab[h2] >= 0) h2 = (h2 + 1) & m2;
                tab[h2] = (int32_t)i;
            }
        }
        if (used >= ((int64_t)1 << 30)) {
            gdl__set_error("%s: over 2^30 distinct tokens", fn);
            GPUDL_FREE(d);
            GPUDL_FREE(tab);
            return -1;
        }
    }
    GPUDL_FREE(tab);
    *out = d;
    *nd = used;
    return 0;
oom:
    gdl__set_error("%s: out of memory counting the tokens of %zu bytes", fn, len);
    GPUDL_FREE(d);
    GPUDL_FREE(tab);
    return -1;
}

static const char gdl__pad_name[] = "<pad>", gdl__unk_name[] = "<unk>";

/* The two specials, then tokens; v->n is the final size. 0 / -1. */
static int gdl__vocab_fill(const char *fn, gdl_vocab *v, const gdl__tokcount *d) {
    int64_t i, k;
    for (i = 0; i < v->tcap; i++) v->table[i] = -1;
    if (gdl__vocab_set(fn, v, GDL_VOCAB_PAD, gdl__pad_name, 5) < 0 ||
        gdl__vocab_set(fn, v, GDL_VOCAB_UNK, gdl__unk_name, 5) < 0)
        return -1;
    for (i = 2; i < v->n; i++) {
        const gdl__tokcount *t = &d[i - 2];
        if (gdl__vocab_set(fn, v, (int32_t)i, t->s, t->n) < 0) return -1;
        if (t->lower)
            for (k = 0; k < (int64_t)t->n; k++)
                if (v->tok[i][k] >= 'A' && v->tok[i][k] <= 'Z') v->tok[i][k] += 32;
    }
    /* lowered tokens moved in the table: enter them again */
    if (v->lowercase) {
        for (i = 0; i < v->tcap; i++) v->table[i] = -1;
        for (i = 0; i < v->n; i++) {
            uint64_t m = (uint64_t)v->tcap - 1, h = gdl__fnv1a((const unsigned char *)v->tok[i], v->tlen[i], 0) & m;
            while (v->table[h] >= 0) h = (h + 1) & m;
            v->table[h] = (int32_t)i;
        }
    }
    return 0;
}

GPUDL_API gdl_vocab *gdl_vocab_build(const char *text, size_t len, const gdl_vocab_opts *opts) {
    static const char fn[] = "gdl_vocab_build";
    gdl_vocab_opts o = opts ? *opts : gdl_vocab_defaults();
    gdl__tokcount *d = NULL;
    int64_t nd = 0, keep;
    gdl_vocab *v;
    if (!text) {
        gdl__set_error("%s: text is NULL", fn);
        return NULL;
    }
    if (o.level != GDL_VOCAB_CHAR && o.level != GDL_VOCAB_WORD) {
        gdl__set_error("%s: level %d is neither GDL_VOCAB_CHAR (0) nor GDL_VOCAB_WORD (1)", fn, o.level);
        return NULL;
    }
    if (o.min_freq < 1 || o.max_size < 0 || (o.max_size > 0 && o.max_size < 3)) {
        gdl__set_error("%s: min_freq %lld must be >= 1 and max_size %lld 0 (no cap) or >= 3", fn,
                       (long long)o.min_freq, (long long)o.max_size);
        return NULL;
    }
    if (gdl__text_utf8(fn, "the text", text, len) < 0) return NULL;
    if (gdl__vocab_count(fn, &o, text, len, &d, &nd) < 0) return NULL;
    if (nd == 0) {
        gdl__set_error("%s: the text (%zu bytes) has no tokens: a vocabulary needs at least one", fn, len);
        GPUDL_FREE(d);
        return NULL;
    }
    qsort(d, (size_t)nd, sizeof *d, gdl__tokcount_cmp);
    for (keep = 0; keep < nd && d[keep].count >= o.min_freq; keep++) {}
    if (o.max_size > 0 && keep > o.max_size - 2) keep = o.max_size - 2;
    v = gdl__vocab_new(fn, o.level, o.level == GDL_VOCAB_WORD && o.lowercase, keep + 2);
    if (v && gdl__vocab_fill(fn, v, d) < 0) {
        gdl_vocab_free(v);
        v = NULL;
    }
    GPUDL_FREE(d);
    return v;
}

GPUDL_API int64_t gdl_vocab_size(const gdl_vocab *v) {
    if (!v) {
        gdl__set_error("gdl_vocab_size: v is NULL");
        return -1;
    }
    return v->n;
}

GPUDL_API int gdl_vocab_level(const gdl_vocab *v) {
    if (!v) {
        gdl__set_error("gdl_vocab_level: v is NULL");
        return -1;
    }
    return v->level;
}

GPUDL_API const char *gdl_vocab_token(const gdl_vocab *v, int32_t id) {
    if (!v) {
        gdl__set_error("gdl_vocab_token: v is NULL");
        return NULL;
    }
    if (id < 0 || id >= v->n) {
        gdl__set_error("gdl_vocab_token: id %d out of range [0, %lld)", (int)id, (long long)v->n);
        return NULL;
    }
    return v->tok[id];
}

GPUDL_API int32_t gdl_vocab_id(const gdl_vocab *v, const char *token) {
    int32_t id;
    if (!v || !token) {
        gdl__set_error("gdl_vocab_id: %s is NULL", !v ? "v" : "token");
        return -1;
    }
    id = gdl__vocab_find(v, (const unsigned char *)token, strlen(token));
    return id < 0 ? GDL_VOCAB_UNK : id;
}

GPUDL_API int64_t gdl_vocab_encode(const gdl_vocab *v, const char *text, size_t len, int32_t *ids, int64_t cap) {
    static const char fn[] = "gdl_vocab_encode";
    size_t pos = 0, st, n;
    int64_t k = 0;
    if (!v || !text) {
        gdl__set_error("%s: %s is NULL", fn, !v ? "v" : "text");
        return -1;
    }
    if (cap < 0 || (cap > 0 && !ids)) {
        gdl__set_error("%s: cap %lld with ids %s", fn, (long long)cap, ids ? "given" : "NULL");
        return -1;
    }
    if (gdl__text_utf8(fn, "the text", text, len) < 0) return -1;
    while (gdl__tok_next(v->level, (const unsigned char *)text, len, &pos, &st, &n)) {
        if (k < cap) {
            int32_t id = gdl__vocab_find(v, (const unsigned char *)text + st, n);
            ids[k] = id < 0 ? GDL_VOCAB_UNK : id;
        }
        k++;
    }
    return k;
}

GPUDL_API int64_t gdl_vocab_decode(const gdl_vocab *v, const int32_t *ids, int64_t n, char *buf, size_t cap) {
    static const char fn[] = "gdl_vocab_decode";
    static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */
    size_t out = 0;
    int64_t i;
    int words = 0;
    if (!v || (!ids && n > 0) || (!buf && cap > 0) || n < 0) {
        gdl__set_error("%s: %s", fn, !v ? "v is NULL" : n < 0 ? "n < 0" : !buf && cap ? "buf is NULL" : "ids is NULL");
        return -1;
    }
    for (i = 0; i < n; i++) {
        const char *s;
        size_t k, sl;
        if (ids[i] < 0 || ids[i] >= v->n) {
            gdl__set_error("%s: id %d at %lld out of range [0, %lld)", fn, (int)ids[i], (long long)i, (long long)v->n);
            if (cap) buf[0] = 0;
            return -1;
        }
        if (ids[i] == GDL_VOCAB_PAD) continue;
        s = ids[i] == GDL_VOCAB_UNK && v->level == GDL_VOCAB_CHAR ? replacement : v->tok[ids[i]];
        sl = s == replacement ? 3 : v->tlen[ids[i]]; /* a U+0000 token is one byte */
        if (v->level == GDL_VOCAB_WORD && words++ > 0) {
            if (out + 1 < cap) buf[out] = ' ';
            out++;
        }
        for (k = 0; k < sl; k++, out++)
            if (out + 1 < cap) buf[out] = s[k];
    }
    if (cap) buf[out < cap ? out : cap - 1] = 0;
    return (int64_t)out;
}

/* ---- the vocabulary file: "gpudl-vocab 1 LEVEL LOWERCASE N", then N escaped tokens a line ---- */

GPUDL_API int gdl_vocab_save(const gdl_vocab *v, const char *path) {
    static const char fn[] = "gdl_vocab_save";
    char *tmp;
    FILE *f;
    int64_t i;
    int ok;
    if (!v || !path) {
        gdl__set_error("%s: %s is NULL", fn, !v ? "v" : "path");
        return -1;
    }
    if (!(tmp = (char *)GPUDL_MALLOC(strlen(path) + 64))) {
        gdl__set_error("%s: %s: out of memory", fn, path);
        return -1;
    }
    if (!(f = gdl__os_create_temporary(path, tmp, strlen(path) + 64, "wb"))) {
        gdl__set_error("%s: %s: cannot create %s: %s", fn, path, tmp, gdl__strerr(errno));
        GPUDL_FREE(tmp);
        return -1;
    }
    errno = 0;
    ok = fprintf(f, "gpudl-vocab 1 %s %d %lld\n", v->level == GDL_VOCAB_CHAR ? "char" : "word", v->lowercase,
                 (long long)v->n) > 0;
    for (i = 0; ok && i < v->n; i++) {
        size_t k;
        for (k = 0; ok && k < v->tlen[i]; k++) {
            char c = v->tok[i][k];
            const char *e = c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t"
                          : c == 0 ? "\\0" : NULL;
            ok = e ? fputs(e, f) >= 0 : fputc(c, f) != EOF;
        }
        ok = ok && fputc('\n', f) != EOF;
    }
    ok = ok && fflush(f) == 0 && gdl__os_fsync(f) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || gdl__os_replace(tmp, path) != 0) {
        gdl__set_error("%s: %s: %s failed: %s", fn, path, ok ? "renaming the temporary file" : "writing",
                       gdl__strerr(errno));
        remove(tmp);
        GPUDL_FREE(tmp);
        return -1;
    }
    GPUDL_FREE(tmp);
    return 0;
}

/* Unescapes line [p, e) in place; its new length, or -1 on a bad escape. */
static int64_t gdl__vocab_unescape(char *p, char *e) {
    char *w = p, *r;
    for (r = p; r < e; r++) {
        if (*r != '\\') {
            *w++ = *r;
            continue;
        }
        if (++r == e) return -1;
        if (*r == '\\') *w++ = '\\';
        else if (*r == 'n') *w++ = '\n';
        else if (*r == 'r') *w++ = '\r';
        else if (*r == 't') *w++ = '\t';
        else if (*r == '0') *w++ = 0;
        else return -1;
    }
    return w - p;
}

GPUDL_API gdl_vocab *gdl_vocab_load(const char *path) {
    static const char fn[] = "gdl_vocab_load";
    unsigned char *buf = NULL;
    size_t len = 0;
    char level[8], *p, *end;
    int lowercase, hdr = 0;
    long long n = 0;
    int64_t i;
    gdl_vocab *v = NULL;
    if (gdl__read_file(fn, path, &buf, &len) < 0) return NULL;
    end = (char *)buf + len;
    if (sscanf((char *)buf, "gpudl-vocab 1 %7s %d %lld%n", level, &lowercase, &n, &hdr) != 3 || hdr <= 0 ||
        (size_t)hdr >= len || buf[hdr] != '\n' || (strcmp(level, "char") != 0 && strcmp(level, "word") != 0) ||
        (lowercase != 0 && lowercase != 1) || n < 2 || n > ((int64_t)1 << 30)) {
        gdl__set_error("%s: %s: not a gpudl vocabulary (the first line must be \"gpudl-vocab 1 char|word 0|1 N\", "
                       "N >= 2)", fn, path);
        goto fail;
    }
    if (gdl__text_utf8(fn, path, (const char *)buf, len) < 0 || gdl__text_no_nul(fn, path, buf, len) < 0) goto fail;
    /* the lines first: the announced count sizes the tables, so a file must back it before it is believed */
    for (i = 0, p = (char *)buf + hdr + 1; i < n && (p = (char *)memchr(p, '\n', (size_t)(end - p))) != NULL; i++) p++;
    if (i < n) {
        gdl__set_error("%s: %s: %lld tokens announced, the file ends after %lld", fn, path, n, (long long)i);
        goto fail;
    }
    if (!(v = gdl__vocab_new(fn, level[0] == 'c' ? GDL_VOCAB_CHAR : GDL_VOCAB_WORD, lowercase, (int64_t)n)))
        goto fail;
    for (i = 0; i < v->tcap; i++) v->table[i] = -1;
    p = (char *)buf + hdr + 1;
    for (i = 0; i < v->n; i++) {
        char *nl = (char *)memchr(p, '\n', (size_t)(end - p)); /* there: the lines were counted */
        int64_t k;
        if ((k = gdl__vocab_unescape(p, nl)) < 0) {
            gdl__set_error("%s: %s: token %lld has a bad escape (only \\\\ \\n \\r \\t \\0)", fn, path, (long long)i);
            goto fail;
        }
        if (gdl__vocab_set(fn, v, (int32_t)i, p, (size_t)k) < 0) goto fail;
        p = nl + 1;
    }
    if (strcmp(v->tok[0], gdl__pad_name) != 0 || strcmp(v->tok[1], gdl__unk_name) != 0 || p != end) {
        gdl__set_error("%s: %s: %s", fn, path,
                       p != end ? "text after the last token" : "tokens 0 and 1 must be <pad> and <unk>");
        goto fail;
    }
    GPUDL_FREE(buf);
    return v;
fail:
    gdl_vocab_free(v);
    GPUDL_FREE(buf);
    return NULL;
}

/* ---- datasets -------------------------------------------------------------------- */

/* A windows dataset over a copy of tokens[0, len). */
static gdl_dataset *gdl__ds_windows(const char *fn, const int32_t *tokens, int64_t len, int64_t T, int64_t stride,
                                    int num_classes) {
    gdl_dataset *ds = gdl__ds_alloc(fn, GDL_I32, 1, &T, (len - T - 1) / stride + 1, num_classes, 0);
    if (!ds) return NULL;
    GPUDL_FREE(ds->labels); /* the targets are the tokens */
    ds->labels = NULL;
    if (!(ds->tokens = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)len))) {
        gdl__set_error("%s: out of memory for %lld tokens", fn, (long long)len);
        gdl_dataset_free(ds);
        return NULL;
    }
    memcpy(ds->tokens, tokens, sizeof(int32_t) * (size_t)len);
    ds->ntokens = len;
    ds->stride = stride;
    ds->target_len = T;
    return ds;
}

GPUDL_API gdl_dataset *gdl_dataset_lm_windows(const int32_t *tokens, int64_t len, int64_t T, int64_t stride,
                                              int vocab_size) {
    static const char fn[] = "gdl_dataset_lm_windows";
    int64_t i;
    if (!tokens) {
        gdl__set_error("%s: tokens is NULL", fn);
        return NULL;
    }
    if (T < 1 || stride < 1 || vocab_size < 1) {
        gdl__set_error("%s: T %lld, stride %lld and vocab_size %d must all be >= 1", fn, (long long)T,
                       (long long)stride, vocab_size);
        return NULL;
    }
    if (len < T + 1) {
        gdl__set_error("%s: a stream of %lld tokens is too short for one window of T = %lld and its target "
                       "(needs T + 1 = %lld)", fn, (long long)len, (long long)T, (long long)T + 1);
        return NULL;
    }
    for (i = 0; i < len; i++)
        if (tokens[i] < 0 || tokens[i] >= vocab_size) {
            gdl__set_error("%s: token %d at %lld is out of range [0, %d)", fn, (int)tokens[i], (long long)i,
                           vocab_size);
            return NULL;
        }
    return gdl__ds_windows(fn, tokens, len, T, stride, vocab_size);
}

static gdl_dataset *gdl__ds_windows_subset(const char *fn, const gdl_dataset *ds, int64_t start, int64_t count) {
    int64_t first = start * ds->stride, last = (start + count - 1) * ds->stride + ds->target_len + 1;
    /* (last - first - T - 1) / stride + 1 == count */
    return gdl__ds_windows(fn, ds->tokens + first, last - first, ds->target_len, ds->stride, ds->num_classes);
}

GPUDL_API gdl_dataset *gdl_dataset_text_classes(const gdl_text_list *tl, const gdl_vocab *v, int64_t max_len) {
    static const char fn[] = "gdl_dataset_text_classes";
    gdl_dataset *ds;
    int64_t i;
    if (!tl || !v) {
        gdl__set_error("%s: %s is NULL", fn, !tl ? "texts" : "v");
        return NULL;
    }
    if (max_len < 1 || max_len > ((int64_t)1 << 24)) {
        gdl__set_error("%s: max_len %lld out of range [1, 2^24]", fn, (long long)max_len);
        return NULL;
    }
    if (tl->n < 1 || tl->num_classes < 1) {
        gdl__set_error("%s: the list has %lld texts in %d classes: a dataset needs at least one", fn,
                       (long long)tl->n, tl->num_classes);
        return NULL;
    }
    if (!(ds = gdl__ds_alloc(fn, GDL_I32, 1, &max_len, tl->n, tl->num_classes, 1))) return NULL;
    if (!(ds->lengths = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)tl->n))) {
        gdl__set_error("%s: out of memory", fn);
        goto fail;
    }
    for (i = 0; i < tl->n; i++) {
        int32_t *row = (int32_t *)ds->x + (size_t)(i * max_len);
        int64_t k, got;
        if (tl->labels[i] < 0 || tl->labels[i] >= tl->num_classes) {
            gdl__set_error("%s: label %d of text %lld is out of range [0, %d)", fn, (int)tl->labels[i],
                           (long long)i, tl->num_classes);
            goto fail;
        }
        if ((got = gdl_vocab_encode(v, tl->texts[i], tl->lens[i], row, max_len)) < 0) {
            gdl__data_wrap_error(fn);
            goto fail;
        }
        if (got > max_len) got = max_len;
        for (k = got; k < max_len; k++) row[k] = GDL_VOCAB_PAD;
        ds->lengths[i] = (int32_t)(got > 0 ? got : 1);
        ds->labels[i] = tl->labels[i];
    }
    return ds;
fail:
    gdl_dataset_free(ds);
    return NULL;
}

/* ---- text lists and the fortune readers ------------------------------------------------ */

GPUDL_API void gdl_text_list_free(gdl_text_list *l) {
    if (!l) return;
    gdl__free_strings(l->texts, l->n);
    gdl__free_strings(l->class_names, l->num_classes);
    GPUDL_FREE(l->lens);
    GPUDL_FREE(l->labels);
    memset(l, 0, sizeof *l);
}

GPUDL_API void gdl_text_free(void *p) { GPUDL_FREE(p); }

/* Makes label a class of l (named name unless it has a name). 0 / -1. */
static int gdl__tl_class(const char *fn, gdl_text_list *l, int32_t label, const char *name) {
    if (label < 0 || label >= (1 << 20)) {
        gdl__set_error("%s: label %d out of range [0, 2^20)", fn, (int)label);
        return -1;
    }
    if (label >= l->num_classes) {
        char **nn = (char **)GPUDL_REALLOC(l->class_names, sizeof(char *) * (size_t)(label + 1));
        if (!nn) {
            gdl__set_error("%s: out of memory", fn);
            return -1;
        }
        memset(nn + l->num_classes, 0, sizeof(char *) * (size_t)(label + 1 - l->num_classes));
        l->class_names = nn;
        l->num_classes = label + 1;
    }
    if (!l->class_names[label] && name && !(l->class_names[label] = gdl__text_dup(name, strlen(name)))) {
        gdl__set_error("%s: out of memory", fn);
        return -1;
    }
    return 0;
}

/* Appends a copy of s[0, n) with label (a class of l already). 0 / -1. */
static int gdl__tl_push(const char *fn, gdl_text_list *l, const char *s, size_t n, int32_t label) {
    if (l->n == 0 || (l->n >= 64 && (l->n & (l->n - 1)) == 0)) { /* full: capacity 64, 128, 256, ... */
        int64_t cap = l->n ? l->n * 2 : 64;
        char **t = (char **)GPUDL_REALLOC(l->texts, sizeof(char *) * (size_t)cap);
        size_t *ln = t ? (size_t *)GPUDL_REALLOC(l->lens, sizeof(size_t) * (size_t)cap) : NULL;
        int32_t *lb = ln ? (int32_t *)GPUDL_REALLOC(l->labels, sizeof(int32_t) * (size_t)cap) : NULL;
        if (t) l->texts = t;
        if (ln) l->lens = ln;
        if (lb) l->labels = lb;
        if (!lb) {
            gdl__set_error("%s: out of memory for %lld texts", fn, (long long)cap);
            return -1;
        }
    }
    if (!(l->texts[l->n] = gdl__text_dup(s, n))) {
        gdl__set_error("%s: out of memory", fn);
        return -1;
    }
    l->lens[l->n] = n;
    l->labels[l->n++] = label;
    return 0;
}

/* The entries of a strfile file appended to out: their number, or -1. */
static int64_t gdl__read_fortunes(const char *fn, const char *path, int32_t label, const char *name,
                                  gdl_text_list *out, int regular_only) {
    unsigned char *buf = NULL;
    size_t len = 0, i = 0, entry = 0;
    int64_t got = 0;
    if (!out) {
        gdl__set_error("%s: out is NULL", fn);
        return -1;
    }
    if ((regular_only ? gdl__read_regular_file(fn, path, &buf, &len) : gdl__read_file(fn, path, &buf, &len)) < 0)
        return -1;
    if (gdl__text_utf8(fn, path, (const char *)buf, len) < 0 || gdl__text_no_nul(fn, path, buf, len) < 0 ||
        gdl__tl_class(fn, out, label, name) < 0)
        goto fail;
    for (;;) {
        size_t eol = i;
        int sep;
        while (eol < len && buf[eol] != '\n') eol++;
        sep = eol - i == 1 && buf[i] == '%';
        if (sep || eol >= len) { /* an entry ends: [entry, stop) less its final newlines, unless blank */
            size_t stop = sep ? i : len, k;
            int blank = 1;
            while (stop > entry && buf[stop - 1] == '\n') stop--;
            for (k = entry; k < stop && blank; k++) blank = gdl__space_byte(buf[k]);
            if (!blank) {
                if (gdl__tl_push(fn, out, (const char *)buf + entry, stop - entry, label) < 0) goto fail;
                got++;
            }
            entry = eol + 1;
        }
        if (eol >= len) break;
        i = eol + 1;
    }
    GPUDL_FREE(buf);
    return got;
fail:
    GPUDL_FREE(buf);
    return -1;
}

GPUDL_API int gdl_text_read_fortune_file(const char *path, int32_t label, const char *name, gdl_text_list *out) {
    static const char fn[] = "gdl_text_read_fortune_file";
    int64_t got = gdl__read_fortunes(fn, path, label, name, out, 0);
    if (got == 0) gdl__set_error("%s: %s has no entries", fn, path);
    return got > 0 ? 0 : -1;
}

static const char *gdl__base_name(const char *p) {
    const char *b = p, *s;
    for (s = p; *s; s++)
        if (*s == '/' || *s == '\\') b = s + 1;
    return b;
}

GPUDL_API int gdl_text_read_files(const char *const *paths, int n, gdl_text_list *out) {
    int c;
    if (!paths || n < 1) {
        gdl__set_error("gdl_text_read_files: %s", !paths ? "paths is NULL" : "n must be >= 1");
        return -1;
    }
    for (c = 0; c < n; c++)
        if (gdl_text_read_fortune_file(paths[c], c, paths[c] ? gdl__base_name(paths[c]) : "", out) < 0) return -1;
    return 0;
}

static int gdl__strcmp_p(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int gdl__ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

/* The names of dir's regular files (see gdl_text_read_dir), sorted: directories, FIFOs, devices and
   sockets are passed over (gdl__os_file_kind; the read checks again on the open file). 0 / -1. */
static int gdl__list_text_files(const char *fn, const char *dir, char ***names, int *count) {
    gdl__dir d;
    const char *e;
    char **v = NULL, path[4200];
    int n = 0, cap = 0;
    if (gdl__dir_open(&d, dir) != 0) {
        gdl__set_error("%s: %s: cannot open the directory", fn, dir);
        return -1;
    }
    while ((e = gdl__dir_next(&d)) != NULL) {
        if (e[0] == '.' || gdl__ends_with(e, ".dat") || gdl__ends_with(e, ".u8")) continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e) >= sizeof path) continue;
        if (gdl__os_file_kind(path) != 1) continue; /* a directory, a FIFO, a device, a dangling link: not read */
        if (n == cap) {
            char **nv = (char **)GPUDL_REALLOC(v, sizeof(char *) * (size_t)(cap = cap ? cap * 2 : 32));
            if (!nv) break;
            v = nv;
        }
        if (!(v[n] = gdl__text_dup(e, strlen(e)))) break;
        n++;
    }
    gdl__dir_close(&d);
    if (e) {
        gdl__set_error("%s: %s: out of memory listing the directory", fn, dir);
        while (n > 0) GPUDL_FREE(v[--n]);
        GPUDL_FREE(v);
        return -1;
    }
    if (n) qsort(v, (size_t)n, sizeof *v, gdl__strcmp_p);
    *names = v;
    *count = n;
    return 0;
}

static int gdl__read_dir(const char *fn, const char *dir, int32_t label, const char *name, gdl_text_list *out) {
    char **names = NULL, path[4200];
    int n = 0, i, rc = 0;
    int64_t got = 0, k = 0;
    if (!dir || !out) {
        gdl__set_error("%s: %s is NULL", fn, !dir ? "dir" : "out");
        return -1;
    }
    if (gdl__list_text_files(fn, dir, &names, &n) < 0) return -1;
    for (i = 0; i < n && rc == 0; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if ((k = gdl__read_fortunes(fn, path, label, name, out, 1)) < 0) rc = -1;
        got += k;
    }
    gdl__free_strings(names, n);
    if (rc == 0 && got == 0) {
        gdl__set_error("%s: %s has no text entries (in %d files)", fn, dir, n);
        rc = -1;
    }
    return rc;
}

GPUDL_API int gdl_text_read_dir(const char *dir, int32_t label, const char *name, gdl_text_list *out) {
    return gdl__read_dir("gdl_text_read_dir", dir, label, name, out);
}

/* fortunes-min's and fortunes' English files (ascii-art and translate-me left out) */
static const char *const gdl__fortunes_en[] = {
    "fortunes", "literature", "riddles", "art", "computers", "cookie", "debian", "definitions", "disclaimer",
    "drugs", "education", "ethnic", "food", "goedel", "humorists", "kids", "knghtbrd", "law", "linux",
    "linuxcookie", "love", "magic", "medicine", "men-women", "miscellaneous", "news", "paradoxum", "people",
    "perl", "pets", "platitudes", "politics", "pratchett", "science", "songs-poems", "sports", "startrek", "tao",
    "wisdom", "work", "zippy"};
static const char *const gdl__fortunes_langs[] = {"de", "es", "it", "pl", "ru"};

static const char gdl__fortunes_get[] =
    "get them with `make data-text` in gpudl's repository (installs Debian's fortunes, fortunes-min, fortunes-de, "
    "fortunes-es, fortunes-it, fortunes-pl and fortunes-ru, or unpacks them into ./data/fortunes), or `apt-get "
    "install fortunes fortunes-de fortunes-es fortunes-it fortunes-pl fortunes-ru`";

/* The fortunes directory: the one given, $GPUDL_DATA/fortunes, else the first of ./data/fortunes and
   /usr/share/games/fortunes that has fortunes-min's "fortunes" file. */
static int gdl__fortunes_dir(const char *fn, const char *dir, char *buf, size_t cap) {
    const char *env = getenv("GPUDL_DATA");
    char probe[4200];
    if (dir || (env && env[0])) {
        if ((size_t)snprintf(buf, cap, dir ? "%s" : "%s/fortunes", dir ? dir : env) >= cap) {
            gdl__set_error("%s: directory name too long", fn);
            return -1;
        }
        return 0;
    }
    snprintf(buf, cap, "data/fortunes");
    snprintf(probe, sizeof probe, "%s/fortunes", buf);
    if (gdl__file_readable(probe)) return 0;
    snprintf(buf, cap, "/usr/share/games/fortunes");
    return 0;
}

static int gdl__fortunes_read_en(const char *fn, const char *dir, int32_t label, gdl_text_list *out) {
    char path[4200];
    size_t i;
    for (i = 0; i < sizeof gdl__fortunes_en / sizeof gdl__fortunes_en[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, gdl__fortunes_en[i]);
        if (!gdl__file_readable(path)) {
            gdl__set_error("%s: the English fortunes are not all in %s (%s is missing): %s", fn, dir,
                           gdl__fortunes_en[i], gdl__fortunes_get);
            return -1;
        }
        if (gdl__read_fortunes(fn, path, label, "en", out, 1) < 0) return -1;
    }
    return 0;
}

GPUDL_API int gdl_fortunes_english(const char *dir_or_NULL, gdl_text_list *out) {
    static const char fn[] = "gdl_fortunes_english";
    char dir[4096];
    if (!out) {
        gdl__set_error("%s: out is NULL", fn);
        return -1;
    }
    memset(out, 0, sizeof *out);
    if (gdl__fortunes_dir(fn, dir_or_NULL, dir, sizeof dir) < 0) return -1;
    if (gdl__fortunes_read_en(fn, dir, 0, out) < 0) {
        gdl_text_list_free(out);
        return -1;
    }
    return 0;
}

GPUDL_API int gdl_fortunes_languages(const char *dir_or_NULL, gdl_text_list *out) {
    static const char fn[] = "gdl_fortunes_languages";
    char dir[4096], sub[4200];
    size_t i;
    if (!out) {
        gdl__set_error("%s: out is NULL", fn);
        return -1;
    }
    memset(out, 0, sizeof *out);
    if (gdl__fortunes_dir(fn, dir_or_NULL, dir, sizeof dir) < 0) return -1;
    if (gdl__fortunes_read_en(fn, dir, 0, out) < 0) goto fail;
    for (i = 0; i < sizeof gdl__fortunes_langs / sizeof gdl__fortunes_langs[0]; i++) {
        gdl__dir d;
        snprintf(sub, sizeof sub, "%s/%s", dir, gdl__fortunes_langs[i]);
        if (gdl__dir_open(&d, sub) != 0) {
            gdl__set_error("%s: %s is missing (Debian's fortunes-%s): %s", fn, sub, gdl__fortunes_langs[i],
                           gdl__fortunes_get);
            goto fail;
        }
        gdl__dir_close(&d);
        if (gdl__read_dir(fn, sub, (int32_t)i + 1, gdl__fortunes_langs[i], out) < 0) goto fail;
    }
    return 0;
fail:
    gdl_text_list_free(out);
    return -1;
}

GPUDL_API int gdl_text_split(const gdl_text_list *all, double val_fraction, uint64_t seed, gdl_text_list *train,
                             gdl_text_list *val) {
    static const char fn[] = "gdl_text_split";
    int64_t i;
    int c;
    if (!all || !train || !val) {
        gdl__set_error("%s: %s is NULL", fn, !all ? "all" : !train ? "train" : "val");
        return -1;
    }
    if (!(val_fraction >= 0 && val_fraction < 1)) {
        gdl__set_error("%s: val_fraction %g is not in [0, 1)", fn, val_fraction);
        return -1;
    }
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    for (c = 0; c < all->num_classes; c++) /* both keep every class, named */
        if (gdl__tl_class(fn, train, c, all->class_names ? all->class_names[c] : NULL) < 0 ||
            gdl__tl_class(fn, val, c, all->class_names ? all->class_names[c] : NULL) < 0)
            goto fail;
    for (i = 0; i < all->n; i++) {
        uint64_t h = gdl_hash64(seed, gdl__fnv1a((const unsigned char *)all->texts[i], all->lens[i], 0));
        double u = (double)(h >> 11) * (1.0 / 9007199254740992.0);
        if (gdl__tl_push(fn, u < val_fraction ? val : train, all->texts[i], all->lens[i], all->labels[i]) < 0)
            goto fail;
    }
    return 0;
fail:
    gdl_text_list_free(train);
    gdl_text_list_free(val);
    return -1;
}

GPUDL_API char *gdl_text_join(const gdl_text_list *l, size_t *len) {
    size_t total = 0, at = 0;
    int64_t i;
    char *s;
    if (!l || !len) {
        gdl__set_error("gdl_text_join: %s is NULL", !l ? "l" : "len");
        return NULL;
    }
    for (i = 0; i < l->n; i++) total += l->lens[i] + 1;
    if (!(s = (char *)GPUDL_MALLOC(total + 1))) {
        gdl__set_error("gdl_text_join: out of memory for %zu bytes", total);
        return NULL;
    }
    for (i = 0; i < l->n; i++) {
        memcpy(s + at, l->texts[i], l->lens[i]);
        at += l->lens[i];
        s[at++] = '\n';
    }
    s[at] = 0;
    *len = at;
    return s;
}

/* ---- sampling ---------------------------------------------------------------------------- */

typedef struct {
    double v;
    int32_t id;
} gdl__logit;

/* value desc, then id asc */
static int gdl__logit_cmp(const void *pa, const void *pb) {
    const gdl__logit *a = (const gdl__logit *)pa, *b = (const gdl__logit *)pb;
    if (a->v != b->v) return a->v > b->v ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* logits as doubles on the host (rows * V of them, a new array). NULL + error. */
static double *gdl__logits_host(const char *fn, gdl_tensor *t) {
    size_t es = gdl_dtype_size(t->dtype), i;
    unsigned char *raw = (unsigned char *)GPUDL_MALLOC(es * (size_t)t->numel);
    double *d = raw ? (double *)GPUDL_MALLOC(sizeof(double) * (size_t)t->numel) : NULL;
    if (!d) {
        gdl__set_error("%s: out of memory for %lld logits", fn, (long long)t->numel);
        GPUDL_FREE(raw);
        return NULL;
    }
    if (gdl_copy_to_host(t, raw, es * (size_t)t->numel) < 0) {
        gdl__data_wrap_error(fn);
        GPUDL_FREE(raw);
        GPUDL_FREE(d);
        return NULL;
    }
    for (i = 0; i < (size_t)t->numel; i++) {
        uint16_t h;
        if (t->dtype == GDL_F32) {
            gdl_real r;
            memcpy(&r, raw + i * es, sizeof r);
            d[i] = (double)r;
            continue;
        }
        memcpy(&h, raw + i * 2, 2);
        d[i] = t->dtype == GDL_F16 ? (double)gdl_f16_to_f32(h) : (double)gdl_bf16_to_f32(h);
    }
    GPUDL_FREE(raw);
    return d;
}

/* One row's token: the top k of row[0, V) (scratch: V entries), temperature temp, uniform u. -1 + error. */
static int32_t gdl__sample_row(const char *fn, const double *row, int64_t V, int k, double temp, double u,
                               gdl__logit *sc, int64_t r) {
    double total = 0, acc = 0;
    int64_t j;
    int last = 0;
    for (j = 0; j < V; j++) {
        if (row[j] != row[j] || row[j] == HUGE_VAL) {
            gdl__set_error("%s: logit %lld of row %lld is %s", fn, (long long)j, (long long)r,
                           row[j] != row[j] ? "NaN" : "+inf");
            return -1;
        }
        sc[j].v = row[j];
        sc[j].id = (int32_t)j;
    }
    qsort(sc, (size_t)V, sizeof *sc, gdl__logit_cmp);
    if (sc[0].v == -HUGE_VAL) {
        gdl__set_error("%s: every logit of row %lld is -inf", fn, (long long)r);
        return -1;
    }
    if (temp == 0) return sc[0].id;
    for (j = 0; j < k; j++) total += exp((sc[j].v - sc[0].v) / temp);
    u *= total;
    for (j = 0; j < k; j++) {
        double w = exp((sc[j].v - sc[0].v) / temp);
        if (w > 0) last = (int)j;
        acc += w;
        if (u < acc && w > 0) return sc[j].id;
    }
    return sc[last].id; /* rounding left u at the total */
}

GPUDL_API int gdl_sample_logits(gdl_tensor *logits, double temperature, int top_k, uint64_t seed, int32_t *out) {
    static const char fn[] = "gdl_sample_logits";
    int64_t rows, V, r;
    double *h;
    gdl__logit *sc;
    int rc = 0;
    if (!logits || !out) {
        gdl__set_error("%s: %s is NULL", fn, !logits ? "logits" : "out");
        return -1;
    }
    if (logits->dtype != GDL_F32 && logits->dtype != GDL_F16 && logits->dtype != GDL_BF16) {
        gdl__set_error("%s: logits must be f32, f16 or bf16, got %s %s", fn, gdl_dtype_name(logits->dtype),
                       gdl_shape_str(logits));
        return -1;
    }
    if ((logits->ndim != 1 && logits->ndim != 2) || logits->numel < 1) {
        gdl__set_error("%s: logits must be [V] or [N,V] and not empty, got %s", fn, gdl_shape_str(logits));
        return -1;
    }
    V = logits->shape[logits->ndim - 1];
    rows = logits->ndim == 2 ? logits->shape[0] : 1;
    if (top_k < 1 || top_k > V) {
        gdl__set_error("%s: top_k %d out of range [1, V = %lld] (V: no cut) for logits %s", fn, top_k,
                       (long long)V, gdl_shape_str(logits));
        return -1;
    }
    if (!(temperature >= 0 && temperature < HUGE_VAL)) {
        gdl__set_error("%s: temperature %g must be finite and >= 0 (0: greedy)", fn, temperature);
        return -1;
    }
    if (!(h = gdl__logits_host(fn, logits))) return -1;
    if (!(sc = (gdl__logit *)GPUDL_MALLOC(sizeof(gdl__logit) * (size_t)V))) {
        gdl__set_error("%s: out of memory", fn);
        GPUDL_FREE(h);
        return -1;
    }
    for (r = 0; r < rows && rc == 0; r++) {
        double u = (double)(gdl_hash64(seed, (uint64_t)r) >> 11) * (1.0 / 9007199254740992.0);
        int32_t id = gdl__sample_row(fn, h + (size_t)(r * V), V, top_k, temperature, u, sc, r);
        if (id < 0) rc = -1;
        else out[r] = id;
    }
    GPUDL_FREE(sc);
    GPUDL_FREE(h);
    return rc;
}
