/* ---- safetensors: dtypes, UTF-8, a strict JSON parser --------------------- */

#define GDL__ST_MAX_HEADER 100000000ull
#define GDL__JSON_MAX_DEPTH 64

GPUDL_API size_t gdl_st_dtype_size(const char *dtype) {
    static const struct { const char *name; size_t size; } tab[] = {
        {"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
        {"I16", 2},  {"U16", 2}, {"F16", 2},  {"BF16", 2},    {"I32", 4},     {"U32", 4},
        {"F32", 4},  {"I64", 8}, {"U64", 8},  {"F64", 8},     {"C64", 8}};
    size_t i;
    if (!dtype) return 0;
    for (i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(dtype, tab[i].name) == 0) return tab[i].size;
    return 0;
}

/* n if s[0, n) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF), else the bad offset. */
static size_t gdl__utf8_check(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k, need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else return i;
        if (n - i <= need) return i;
        for (k = 1; k <= need; k++) {
            unsigned b = s[i + k];
            if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return i;
        }
        i += need + 1;
    }
    return n;
}

typedef struct gdl__json {
    const unsigned char *s;
    size_t n, i;
    int depth;
    char *str;          /* the last decoded string, NUL-terminated */
    size_t slen, scap;
    const char *tok;    /* the last number token */
    size_t toklen;
    char err[1024];
} gdl__json;

static int gdl__js_fail(gdl__json *J, const char *what) {
    if (!J->err[0]) {
        if (J->i >= J->n)
            snprintf(J->err, sizeof J->err, "invalid JSON: unexpected end of header: %s", what);
        else
            snprintf(J->err, sizeof J->err, "invalid JSON at header byte %zu ('%c'): %s", J->i,
                     J->s[J->i] >= 0x20 && J->s[J->i] < 0x7F ? J->s[J->i] : '?', what);
    }
    return -1;
}

static void gdl__js_ws(gdl__json *J) {
    while (J->i < J->n && (J->s[J->i] == ' ' || J->s[J->i] == '\t' || J->s[J->i] == '\n' || J->s[J->i] == '\r'))
        J->i++;
}

static int gdl__js_peek(gdl__json *J) {
    gdl__js_ws(J);
    return J->i < J->n ? J->s[J->i] : -1;
}

static int gdl__js_putc(gdl__json *J, unsigned char c) {
    if (J->slen + 1 >= J->scap) {
        size_t nc = J->scap ? J->scap * 2 : 64;
        char *ns = (char *)GPUDL_REALLOC(J->str, nc);
        if (!ns) {
            snprintf(J->err, sizeof J->err, "out of memory parsing the header");
            return -1;
        }
        J->str = ns;
        J->scap = nc;
    }
    J->str[J->slen++] = (char)c;
    J->str[J->slen] = 0;
    return 0;
}

static int gdl__js_hex4(gdl__json *J, unsigned *out) {
    unsigned v = 0;
    int k;
    for (k = 0; k < 4; k++) {
        int c = J->i < J->n ? J->s[J->i] : -1, d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return gdl__js_fail(J, "\\u needs 4 hex digits");
        v = v * 16 + (unsigned)d;
        J->i++;
    }
    *out = v;
    return 0;
}

/* Parse a string at J->i (which is '"') into J->str / J->slen. */
static int gdl__js_string(gdl__json *J) {
    J->slen = 0;
    if (gdl__js_putc(J, 0) < 0) return -1;
    J->slen = 0;
    if (J->i >= J->n || J->s[J->i] != '"') return gdl__js_fail(J, "expected a string");
    J->i++;
    for (;;) {
        unsigned c;
        if (J->i >= J->n) return gdl__js_fail(J, "unterminated string");
        c = J->s[J->i];
        if (c == '"') {
            J->i++;
            return 0;
        }
        if (c < 0x20) return gdl__js_fail(J, "control character in string");
        if (c != '\\') {
            if (gdl__js_putc(J, (unsigned char)c) < 0) return -1;
            J->i++;
            continue;
        }
        J->i++;
        if (J->i >= J->n) return gdl__js_fail(J, "unterminated escape");
        c = J->s[J->i++];
        switch (c) {
        case '"': case '\\': case '/': break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u': {
            unsigned cp = 0, lo = 0;
            unsigned char u[4];
            int nu, k;
            if (gdl__js_hex4(J, &cp) < 0) return -1;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return gdl__js_fail(J, "lone low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (J->i + 1 >= J->n || J->s[J->i] != '\\' || J->s[J->i + 1] != 'u')
                    return gdl__js_fail(J, "high surrogate not followed by a \\u low surrogate");
                J->i += 2;
                if (gdl__js_hex4(J, &lo) < 0) return -1;
                if (lo < 0xDC00 || lo > 0xDFFF) return gdl__js_fail(J, "high surrogate not followed by a low surrogate");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp < 0x80) { u[0] = (unsigned char)cp; nu = 1; }
            else if (cp < 0x800) { u[0] = (unsigned char)(0xC0 | (cp >> 6)); u[1] = (unsigned char)(0x80 | (cp & 0x3F)); nu = 2; }
            else if (cp < 0x10000) {
                u[0] = (unsigned char)(0xE0 | (cp >> 12)); u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                u[2] = (unsigned char)(0x80 | (cp & 0x3F)); nu = 3;
            } else {
                u[0] = (unsigned char)(0xF0 | (cp >> 18)); u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
                u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (unsigned char)(0x80 | (cp & 0x3F)); nu = 4;
            }
            for (k = 0; k < nu; k++)
                if (gdl__js_putc(J, u[k]) < 0) return -1;
            continue;
        }
        default:
            J->i--;
            return gdl__js_fail(J, "invalid escape");
        }
        if (gdl__js_putc(J, (unsigned char)c) < 0) return -1;
    }
}

/* Parse a number; *is_uint says it is a plain non-negative integer that fits in *val. */
static int gdl__js_number(gdl__json *J, int *is_uint, uint64_t *val) {
    size_t st = J->i;
    int neg = 0, frac = 0, ovf = 0;
    uint64_t v = 0;
    if (J->i < J->n && J->s[J->i] == '-') { neg = 1; J->i++; }
    if (J->i >= J->n || J->s[J->i] < '0' || J->s[J->i] > '9') return gdl__js_fail(J, "invalid number");
    if (J->s[J->i] == '0') {
        J->i++;
        if (J->i < J->n && J->s[J->i] >= '0' && J->s[J->i] <= '9') return gdl__js_fail(J, "leading zero in number");
    } else {
        while (J->i < J->n && J->s[J->i] >= '0' && J->s[J->i] <= '9') {
            unsigned d = (unsigned)(J->s[J->i] - '0');
            if (v > (UINT64_MAX - d) / 10) ovf = 1;
            else v = v * 10 + d;
            J->i++;
        }
    }
    if (J->i < J->n && J->s[J->i] == '.') {
        frac = 1;
        J->i++;
        if (J->i >= J->n || J->s[J->i] < '0' || J->s[J->i] > '9') return gdl__js_fail(J, "digit expected after '.'");
        while (J->i < J->n && J->s[J->i] >= '0' && J->s[J->i] <= '9') J->i++;
    }
    if (J->i < J->n && (J->s[J->i] == 'e' || J->s[J->i] == 'E')) {
        frac = 1;
        J->i++;
        if (J->i < J->n && (J->s[J->i] == '+' || J->s[J->i] == '-')) J->i++;
        if (J->i >= J->n || J->s[J->i] < '0' || J->s[J->i] > '9') return gdl__js_fail(J, "digit expected in exponent");
        while (J->i < J->n && J->s[J->i] >= '0' && J->s[J->i] <= '9') J->i++;
    }
    J->tok = (const char *)J->s + st;
    J->toklen = J->i - st;
    *is_uint = !neg && !frac && !ovf;
    *val = v;
    return 0;
}

static int gdl__js_skip(gdl__json *J);

static int gdl__js_literal(gdl__json *J, const char *lit) {
    size_t k = strlen(lit);
    if (J->n - J->i < k || memcmp(J->s + J->i, lit, k) != 0) return gdl__js_fail(J, "invalid literal");
    J->i += k;
    return 0;
}

/* An object's key (J->str, J->slen) and the ':' after it. 0 / -1. */
static int gdl__js_key(gdl__json *J) {
    if (gdl__js_peek(J) != '"') return gdl__js_fail(J, "expected a string key");
    if (gdl__js_string(J) < 0) return -1;
    if (gdl__js_peek(J) != ':') return gdl__js_fail(J, "expected ':'");
    J->i++;
    return 0;
}

/* Skip over any JSON value (validating it). */
static int gdl__js_skip(gdl__json *J) {
    int c = gdl__js_peek(J), is_uint;
    uint64_t v;
    switch (c) {
    case '{': case '[': {
        int close = c == '{' ? '}' : ']', first = 1;
        if (++J->depth > GDL__JSON_MAX_DEPTH) return gdl__js_fail(J, "nesting too deep");
        J->i++;
        for (;;) {
            c = gdl__js_peek(J);
            if (c == close && first) break;
            if (close == '}' && gdl__js_key(J) < 0) return -1;
            if (gdl__js_skip(J) < 0) return -1;
            first = 0;
            c = gdl__js_peek(J);
            if (c == ',') { J->i++; continue; }
            if (c == close) break;
            return gdl__js_fail(J, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
        }
        J->i++;
        J->depth--;
        return 0;
    }
    case '"': return gdl__js_string(J);
    case 't': return gdl__js_literal(J, "true");
    case 'f': return gdl__js_literal(J, "false");
    case 'n': return gdl__js_literal(J, "null");
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return gdl__js_number(J, &is_uint, &v);
        return gdl__js_fail(J, "expected a value");
    }
}

/* Parse [uint, uint, ...] into vals (at most maxn); *count gets the length.
   A non-integer or negative element fails with a message naming field. */
static int gdl__js_uint_array(gdl__json *J, const char *name, const char *field, uint64_t *vals, int maxn,
                              int *count, uint64_t maxval) {
    int c = gdl__js_peek(J), k = 0;
    if (c != '[') {
        snprintf(J->err, sizeof J->err, "tensor '%s': \"%s\" must be an array of non-negative integers", name, field);
        return -1;
    }
    J->i++;
    if (gdl__js_peek(J) == ']') {
        J->i++;
        *count = 0;
        return 0;
    }
    for (;;) {
        int is_uint;
        uint64_t v;
        c = gdl__js_peek(J);
        if (c != '-' && (c < '0' || c > '9')) {
            if (c == -1 || c == '"' || c == '{' || c == '[' || c == 't' || c == 'f' || c == 'n') {
                if (c != -1 && gdl__js_skip(J) < 0) return -1;
                snprintf(J->err, sizeof J->err, "tensor '%s': \"%s\" must be an array of non-negative integers", name, field);
                return -1;
            }
            return gdl__js_fail(J, "expected a value");
        }
        if (gdl__js_number(J, &is_uint, &v) < 0) return -1;
        if (!is_uint || v > maxval) {
            snprintf(J->err, sizeof J->err, "tensor '%s': \"%s\"[%d] is %.*s: %s", name, field, k,
                     (int)(J->toklen > 40 ? 40 : J->toklen), J->tok,
                     is_uint ? "out of range" : "not a non-negative integer");
            return -1;
        }
        if (k >= maxn) {
            snprintf(J->err, sizeof J->err, "tensor '%s': \"%s\" has more than %d elements", name, field, maxn);
            return -1;
        }
        vals[k++] = v;
        c = gdl__js_peek(J);
        if (c == ',') { J->i++; continue; }
        if (c == ']') { J->i++; break; }
        return gdl__js_fail(J, "expected ',' or ']'");
    }
    *count = k;
    return 0;
}

/* The shortest a tensor's entry can be in a header: "":{"dtype":"U8","shape":[],"data_offsets":[0,0]}
   (every key required, no space), 49 bytes, and a comma before the next. A header of N bytes holds at
   most (N + 1) / 50 entries: the entry array never grows past that, so that a header of many empty
   tensors costs memory in proportion to its size (an entry is sizeof(gdl_st_entry), about 350 bytes,
   for at least 50 bytes of header: the public struct's fixed name and shape set that ratio). */
#define GDL__ST_MIN_ENTRY 49

/* Dynamic arrays of entries and metadata while parsing. */
typedef struct gdl__st_build {
    gdl_st_entry *e;
    int n, cap;
    char **mk, **mv;
    int nm, mcap;
} gdl__st_build;

/* n strings and their array */
static void gdl__st_build_free(gdl__st_build *b) {
    gdl__free_strings(b->mk, b->nm);
    gdl__free_strings(b->mv, b->nm);
    GPUDL_FREE(b->e);
    memset(b, 0, sizeof *b);
}

static char *gdl__strdup_n(const char *s, size_t n) {
    char *p = (char *)GPUDL_MALLOC(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* Format a shape as "[2, 3]" into buf. */
static const char *gdl__shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t o = 0;
    int d;
    o += (size_t)snprintf(buf, cap, "[");
    for (d = 0; d < ndim && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}

/* Byte size of dtype x shape into *bytes; 0 if it fits in uint64 (and size_t), else -1. */
static int gdl__st_nbytes(size_t esize, int ndim, const int64_t *shape, uint64_t *bytes) {
    uint64_t b = esize;
    int d, zero = 0;
    for (d = 0; d < ndim; d++)
        if (shape[d] == 0) zero = 1;
    if (zero) {
        *bytes = 0;
        return 0;
    }
    for (d = 0; d < ndim; d++) {
        uint64_t v = (uint64_t)shape[d];
        if (v && b > UINT64_MAX / v) return -1;
        b *= v;
    }
    if (b > (uint64_t)((size_t)-1)) return -1;
    *bytes = b;
    return 0;
}

static int gdl__st_entry_parse(gdl__json *J, gdl_st_entry *e) {
    int seen_dtype = 0, seen_shape = 0, seen_off = 0, c, cnt, d;
    uint64_t vals[GDL_ST_MAX_DIMS], offs[2], bytes;
    size_t esize;
    char sh[200];
    if (gdl__js_peek(J) != '{') {
        if (gdl__js_skip(J) < 0) return -1;
        snprintf(J->err, sizeof J->err, "tensor '%s': expected an object with dtype, shape, data_offsets", e->name);
        return -1;
    }
    if (++J->depth > GDL__JSON_MAX_DEPTH) return gdl__js_fail(J, "nesting too deep");
    J->i++;
    c = gdl__js_peek(J);
    if (c == '}') J->i++;
    else
        for (;;) {
            if (gdl__js_key(J) < 0) return -1;
            if (strcmp(J->str, "dtype") == 0 && J->slen == 5) {
                if (seen_dtype++) {
                    snprintf(J->err, sizeof J->err, "tensor '%s': duplicate key \"dtype\"", e->name);
                    return -1;
                }
                if (gdl__js_peek(J) != '"') {
                    if (gdl__js_skip(J) < 0) return -1;
                    snprintf(J->err, sizeof J->err, "tensor '%s': \"dtype\" must be a string", e->name);
                    return -1;
                }
                if (gdl__js_string(J) < 0) return -1;
                if (J->slen >= sizeof e->dtype || strlen(J->str) != J->slen || !gdl_st_dtype_size(J->str)) {
                    snprintf(J->err, sizeof J->err, "tensor '%s': unknown dtype \"%.40s\"", e->name, J->str);
                    return -1;
                }
                memcpy(e->dtype, J->str, J->slen + 1);
            } else if (strcmp(J->str, "shape") == 0 && J->slen == 5) {
                if (seen_shape++) {
                    snprintf(J->err, sizeof J->err, "tensor '%s': duplicate key \"shape\"", e->name);
                    return -1;
                }
                if (gdl__js_uint_array(J, e->name, "shape", vals, GDL_ST_MAX_DIMS, &cnt, (uint64_t)INT64_MAX) < 0)
                    return -1;
                e->ndim = cnt;
                for (d = 0; d < cnt; d++) e->shape[d] = (int64_t)vals[d];
            } else if (strcmp(J->str, "data_offsets") == 0 && J->slen == 12) {
                if (seen_off++) {
                    snprintf(J->err, sizeof J->err, "tensor '%s': duplicate key \"data_offsets\"", e->name);
                    return -1;
                }
                if (gdl__js_uint_array(J, e->name, "data_offsets", offs, 2, &cnt, UINT64_MAX) < 0) return -1;
                if (cnt != 2) {
                    snprintf(J->err, sizeof J->err, "tensor '%s': \"data_offsets\" must have 2 elements, has %d",
                             e->name, cnt);
                    return -1;
                }
                e->begin = offs[0];
                e->end = offs[1];
            } else if (gdl__js_skip(J) < 0) /* unknown keys are allowed, as in the reference reader */
                return -1;
            c = gdl__js_peek(J);
            if (c == ',') { J->i++; continue; }
            if (c == '}') { J->i++; break; }
            return gdl__js_fail(J, "expected ',' or '}'");
        }
    J->depth--;
    if (!seen_dtype || !seen_shape || !seen_off) {
        snprintf(J->err, sizeof J->err, "tensor '%s': missing \"%s\"", e->name,
                 !seen_dtype ? "dtype" : !seen_shape ? "shape" : "data_offsets");
        return -1;
    }
    if (e->end < e->begin) {
        snprintf(J->err, sizeof J->err, "tensor '%s': data_offsets [%llu, %llu]: end < begin", e->name,
                 (unsigned long long)e->begin, (unsigned long long)e->end);
        return -1;
    }
    esize = gdl_st_dtype_size(e->dtype);
    if (gdl__st_nbytes(esize, e->ndim, e->shape, &bytes) < 0) {
        snprintf(J->err, sizeof J->err, "tensor '%s': byte size of %s x %s overflows", e->name, e->dtype,
                 gdl__shape_str(sh, sizeof sh, e->ndim, e->shape));
        return -1;
    }
    if (bytes != e->end - e->begin) {
        snprintf(J->err, sizeof J->err,
                 "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but %s x %s needs %llu", e->name,
                 (unsigned long long)e->begin, (unsigned long long)e->end,
                 (unsigned long long)(e->end - e->begin), e->dtype, gdl__shape_str(sh, sizeof sh, e->ndim, e->shape),
                 (unsigned long long)bytes);
        return -1;
    }
    return 0;
}

static int gdl__st_meta_parse(gdl__json *J, gdl__st_build *b) {
    int c;
    if (gdl__js_peek(J) != '{') {
        if (gdl__js_skip(J) < 0) return -1;
        snprintf(J->err, sizeof J->err, "__metadata__ must be an object of string -> string");
        return -1;
    }
    if (++J->depth > GDL__JSON_MAX_DEPTH) return gdl__js_fail(J, "nesting too deep");
    J->i++;
    if (gdl__js_peek(J) == '}') {
        J->i++;
        J->depth--;
        return 0;
    }
    for (;;) {
        char *key, *val;
        size_t klen;
        if (gdl__js_peek(J) != '"') return gdl__js_fail(J, "expected a string key");
        if (gdl__js_string(J) < 0) return -1;
        klen = J->slen;
        if (strlen(J->str) != klen) {
            snprintf(J->err, sizeof J->err, "__metadata__ key contains a NUL character");
            return -1;
        }
        key = gdl__strdup_n(J->str, klen);
        if (!key) {
            snprintf(J->err, sizeof J->err, "out of memory parsing the header");
            return -1;
        }
        if (gdl__js_peek(J) != ':') {
            GPUDL_FREE(key);
            return gdl__js_fail(J, "expected ':'");
        }
        J->i++;
        if (gdl__js_peek(J) != '"') {
            int rc = gdl__js_skip(J);
            if (rc == 0)
                snprintf(J->err, sizeof J->err, "__metadata__[\"%.100s\"] must be a string", key);
            GPUDL_FREE(key);
            return -1;
        }
        if (gdl__js_string(J) < 0 || strlen(J->str) != J->slen) {
            if (!J->err[0]) snprintf(J->err, sizeof J->err, "__metadata__[\"%.100s\"] contains a NUL character", key);
            GPUDL_FREE(key);
            return -1;
        }
        val = gdl__strdup_n(J->str, J->slen);
        if (!val) {
            GPUDL_FREE(key);
            snprintf(J->err, sizeof J->err, "out of memory parsing the header");
            return -1;
        }
        if (b->nm == b->mcap) {
            int nc = b->mcap ? b->mcap * 2 : 8;
            char **nk = (char **)GPUDL_REALLOC(b->mk, (size_t)nc * sizeof(char *)), **nv;
            if (nk) b->mk = nk;
            nv = nk ? (char **)GPUDL_REALLOC(b->mv, (size_t)nc * sizeof(char *)) : NULL;
            if (nv) b->mv = nv;
            if (!nk || !nv) {
                GPUDL_FREE(key);
                GPUDL_FREE(val);
                snprintf(J->err, sizeof J->err, "out of memory parsing the header");
                return -1;
            }
            b->mcap = nc;
        }
        b->mk[b->nm] = key;
        b->mv[b->nm] = val;
        b->nm++;
        c = gdl__js_peek(J);
        if (c == ',') { J->i++; continue; }
        if (c == '}') { J->i++; break; }
        return gdl__js_fail(J, "expected ',' or '}'");
    }
    J->depth--;
    return 0;
}

static int gdl__cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first duplicate among n strings, or NULL (allocation failure: *oom = 1). */
static const char *gdl__find_dup(const char *const *strs, int n, int *oom) {
    const char **s;
    const char *dup = NULL;
    int k;
    *oom = 0;
    if (n < 2) return NULL;
    s = (const char **)GPUDL_MALLOC((size_t)n * sizeof *s);
    if (!s) {
        *oom = 1;
        return NULL;
    }
    memcpy(s, strs, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, gdl__cmp_str_ptr);
    for (k = 1; k < n && !dup; k++)
        if (strcmp(s[k - 1], s[k]) == 0) dup = s[k];
    GPUDL_FREE(s);
    return dup;
}

/* a tensor's byte range and its index: what the tiling check sorts (not the 350-byte entries) */
typedef struct gdl__st_span {
    uint64_t begin, end;
    int k;
} gdl__st_span;

static int gdl__cmp_entry_off(const void *a, const void *b) {
    const gdl__st_span *x = (const gdl__st_span *)a, *y = (const gdl__st_span *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* The file's first 8 bytes: the header's length (*N), checked against the limit and the file, and the header
   valid UTF-8. */
static int gdl__st_prefix(const char *fn, const char *what, const unsigned char *buf, uint64_t len, uint64_t *N) {
    size_t bad;
    int k;
    if (!buf && len) {
        gdl__set_error("%s: %s: buffer is NULL", fn, what);
        return -1;
    }
    if (len < 8) {
        gdl__set_error("%s: %s: file is %llu bytes, too short for the 8-byte header length", fn, what,
                       (unsigned long long)len);
        return -1;
    }
    *N = 0;
    for (k = 7; k >= 0; k--) *N = (*N << 8) | buf[k];
    if (*N > GDL__ST_MAX_HEADER) {
        gdl__set_error("%s: %s: header length %llu exceeds the limit of 100000000 bytes", fn, what,
                       (unsigned long long)*N);
        return -1;
    }
    if (*N > len - 8) {
        gdl__set_error("%s: %s: header length %llu runs past the end of the file (%llu bytes)", fn, what,
                       (unsigned long long)*N, (unsigned long long)len);
        return -1;
    }
    bad = gdl__utf8_check(buf + 8, (size_t)*N);
    if (bad != (size_t)*N) {
        gdl__set_error("%s: %s: header is not valid UTF-8 (bad byte 0x%02X at header byte %zu)", fn, what,
                       buf[8 + bad], bad);
        return -1;
    }
    return 0;
}

/* The header's JSON object: __metadata__ and the tensors' entries into b. -1: J->err says why. */
static int gdl__st_parse_top(gdl__json *J, gdl__st_build *b) {
    int c = gdl__js_peek(J), seen_meta = 0;
    if (c != '{') {
        if (c == -1) snprintf(J->err, sizeof J->err, "header is empty");
        else if (gdl__js_skip(J) == 0) snprintf(J->err, sizeof J->err, "header's top level is not a JSON object");
        return -1;
    }
    J->i++;
    J->depth = 1;
    if (gdl__js_peek(J) == '}') J->i++;
    else
        for (;;) {
            if (gdl__js_key(J) < 0) return -1;
            if (J->slen == 12 && strcmp(J->str, "__metadata__") == 0) {
                if (seen_meta++) {
                    snprintf(J->err, sizeof J->err, "duplicate \"__metadata__\"");
                    return -1;
                }
                if (gdl__st_meta_parse(J, b) < 0) return -1;
            } else {
                gdl_st_entry *e;
                if (J->slen >= GDL_ST_NAME_MAX) {
                    snprintf(J->err, sizeof J->err, "tensor name '%.60s...' is %zu bytes, longer than %d", J->str,
                             J->slen, GDL_ST_NAME_MAX - 1);
                    return -1;
                }
                if (strlen(J->str) != J->slen) {
                    snprintf(J->err, sizeof J->err, "tensor name '%s' contains a NUL character", J->str);
                    return -1;
                }
                if (b->n == b->cap) {
                    size_t most = (J->n + 1) / (GDL__ST_MIN_ENTRY + 1) + 1, nc = b->cap ? (size_t)b->cap * 2 : 16;
                    gdl_st_entry *ne;
                    if (nc > most) nc = most;
                    if (nc <= (size_t)b->cap || nc > (size_t)INT32_MAX) { /* past what the header's size can hold */
                        snprintf(J->err, sizeof J->err, "more tensor entries than a %zu-byte header can hold", J->n);
                        return -1;
                    }
                    ne = (gdl_st_entry *)GPUDL_REALLOC(b->e, nc * sizeof *ne);
                    if (!ne) {
                        snprintf(J->err, sizeof J->err, "out of memory parsing the header");
                        return -1;
                    }
                    b->e = ne;
                    b->cap = (int)nc;
                }
                e = &b->e[b->n++];
                memset(e, 0, sizeof *e);
                memcpy(e->name, J->str, J->slen + 1);
                if (gdl__st_entry_parse(J, e) < 0) return -1;
            }
            c = gdl__js_peek(J);
            if (c == ',') { J->i++; continue; }
            if (c == '}') { J->i++; break; }
            return gdl__js_fail(J, "expected ',' or '}'");
        }
    if (gdl__js_peek(J) != -1) return gdl__js_fail(J, "trailing characters after the JSON object");
    return 0;
}

/* No tensor name and no __metadata__ key twice. -1: J->err says why. */
static int gdl__st_check_dups(gdl__json *J, const gdl__st_build *b) {
    const char **names;
    const char *dup;
    int k, oom = 0;
    if (b->n > 1) {
        names = (const char **)GPUDL_MALLOC((size_t)b->n * sizeof *names);
        if (!names) {
            snprintf(J->err, sizeof J->err, "out of memory");
            return -1;
        }
        for (k = 0; k < b->n; k++) names[k] = b->e[k].name;
        dup = gdl__find_dup(names, b->n, &oom);
        GPUDL_FREE(names);
        if (dup || oom) {
            snprintf(J->err, sizeof J->err, oom ? "out of memory" : "duplicate tensor name '%s'", dup);
            return -1;
        }
    }
    if (b->nm > 1) {
        dup = gdl__find_dup((const char *const *)b->mk, b->nm, &oom);
        if (dup || oom) {
            snprintf(J->err, sizeof J->err, oom ? "out of memory" : "duplicate __metadata__ key '%.100s'", dup);
            return -1;
        }
    }
    return 0;
}

/* The tensors must tile [0, data_len) exactly: no tensor past the end, no hole, no overlap, nothing after. */
static int gdl__st_check_tiling(const char *fn, const char *what, const gdl__st_build *b, uint64_t data_len) {
    gdl__st_span *sorted = NULL;
    uint64_t pos = 0;
    int k, rc = 0;
    for (k = 0; k < b->n; k++)
        if (b->e[k].end > data_len) {
            gdl__set_error("%s: %s: truncated: tensor '%s' data_offsets [%llu, %llu] go past the end of the "
                           "%llu-byte data buffer", fn, what, b->e[k].name, (unsigned long long)b->e[k].begin,
                           (unsigned long long)b->e[k].end, (unsigned long long)data_len);
            return -1;
        }
    if (b->n > 0) {
        sorted = (gdl__st_span *)GPUDL_MALLOC((size_t)b->n * sizeof *sorted);
        if (!sorted) {
            gdl__set_error("%s: %s: header: %s", fn, what, "out of memory");
            return -1;
        }
        for (k = 0; k < b->n; k++) sorted[k].begin = b->e[k].begin, sorted[k].end = b->e[k].end, sorted[k].k = k;
        qsort(sorted, (size_t)b->n, sizeof *sorted, gdl__cmp_entry_off);
        for (k = 0; k < b->n && rc == 0; k++) {
            if (sorted[k].begin > pos) {
                gdl__set_error("%s: %s: hole in the data buffer: bytes [%llu, %llu) belong to no tensor (next is "
                               "'%s')", fn, what, (unsigned long long)pos, (unsigned long long)sorted[k].begin,
                               b->e[sorted[k].k].name);
                rc = -1;
            } else if (sorted[k].begin < pos) {
                gdl__set_error("%s: %s: tensor '%s' data_offsets [%llu, %llu] overlap '%s', which ends at %llu", fn,
                               what, b->e[sorted[k].k].name, (unsigned long long)sorted[k].begin,
                               (unsigned long long)sorted[k].end, b->e[sorted[k - 1].k].name, (unsigned long long)pos);
                rc = -1;
            } else {
                pos = sorted[k].end;
            }
        }
        GPUDL_FREE(sorted);
    }
    if (rc == 0 && pos != data_len) {
        gdl__set_error("%s: %s: %llu trailing bytes after the last tensor (data buffer %llu bytes, tensors end "
                       "at %llu)", fn, what, (unsigned long long)(data_len - pos), (unsigned long long)data_len,
                       (unsigned long long)pos);
        rc = -1;
    }
    return rc;
}

static int gdl__st_parse_impl(const char *fn, const char *what, const unsigned char *buf, uint64_t len,
                              gdl_st_file *out) {
    gdl__json J;
    gdl__st_build b;
    uint64_t N, data_len;

    memset(&J, 0, sizeof J);
    memset(&b, 0, sizeof b);
    if (gdl__st_prefix(fn, what, buf, len, &N) < 0) return -1;
    data_len = len - 8 - N;
    J.s = buf + 8;
    J.n = (size_t)N;
    if (gdl__st_parse_top(&J, &b) < 0 || gdl__st_check_dups(&J, &b) < 0) {
        gdl__set_error("%s: %s: header: %s", fn, what, J.err[0] ? J.err : "invalid");
        goto fail;
    }
    if (gdl__st_check_tiling(fn, what, &b, data_len) < 0) goto fail;
    if (b.n > 0 && b.n < b.cap) { /* no spare entries kept (a shrinking realloc that fails keeps the block) */
        gdl_st_entry *e = (gdl_st_entry *)GPUDL_REALLOC(b.e, (size_t)b.n * sizeof *e);
        if (e) b.e = e;
    }
    GPUDL_FREE(J.str);
    memset(out, 0, sizeof *out);
    out->n = b.n;
    out->entries = b.e;
    out->n_meta = b.nm;
    out->meta_keys = b.mk;
    out->meta_vals = b.mv;
    out->data = buf + 8 + N;
    out->data_len = data_len;
    return 0;
fail:
    GPUDL_FREE(J.str);
    gdl__st_build_free(&b);
    return -1;
}

GPUDL_API int gdl_st_parse(const unsigned char *buf, uint64_t len, gdl_st_file *out, const char *what) {
    if (!out) {
        gdl__set_error("gdl_st_parse: out is NULL");
        return -1;
    }
    return gdl__st_parse_impl("gdl_st_parse", what ? what : "(buffer)", buf, len, out);
}

/* gdl_st_read with its errors prefixed by fn, the public call the user made (gdl_load_model, ...) */
static int gdl__st_read(const char *fn, const char *path, gdl_st_file *out) {
    unsigned char *buf;
    size_t len;
    gdl_st_file f;
    if (!out) {
        gdl__set_error("%s: out is NULL", fn);
        return -1;
    }
    if (gdl__read_file(fn, path, &buf, &len) < 0) return -1;
    if (gdl__st_parse_impl(fn, path, buf, (uint64_t)len, &f) < 0) {
        GPUDL_FREE(buf);
        return -1;
    }
    f.owned = buf;
    *out = f;
    return 0;
}
GPUDL_API int gdl_st_read(const char *path, gdl_st_file *out) { return gdl__st_read("gdl_st_read", path, out); }

GPUDL_API void gdl_st_free(gdl_st_file *f) {
    if (!f) return;
    gdl__free_strings(f->meta_keys, f->n_meta);
    gdl__free_strings(f->meta_vals, f->n_meta);
    GPUDL_FREE(f->entries);
    GPUDL_FREE(f->owned);
    memset(f, 0, sizeof *f);
}

GPUDL_API const gdl_st_entry *gdl_st_find(const gdl_st_file *f, const char *name) {
    int k;
    if (!f || !name) return NULL;
    for (k = 0; k < f->n; k++)
        if (strcmp(f->entries[k].name, name) == 0) return &f->entries[k];
    return NULL;
}

