/* ---------------------------------------------------------------------------
   src/runtime/errors.h — the thread-local error message: gdl__set_error,
   gdl_last_error, and the helpers that keep an earlier message; dtype
   names and sizes; small host-memory helpers (gdl__zalloc,
   gdl__free_strings).
   ------------------------------------------------------------------------- */

static GDL__TLS char gdl__err[1024];

GPUDL_API void gdl__set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(gdl__err, sizeof gdl__err, fmt, ap);
    va_end(ap);
}
GPUDL_API const char *gdl_last_error(void) { return gdl__err; }
GPUDL_API void gdl_clear_error(void) { gdl__err[0] = 0; }

/* bytes of zeroed host memory for the record of op's object (a module's, a scaler's, a graph's ...), or
   NULL with the error "op: out of memory (host)" */
static void *gdl__zalloc(const char *op, size_t bytes) {
    void *p = GPUDL_MALLOC(bytes);
    if (!p) {
        gdl__set_error("%s: out of memory (host)", op);
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

/* frees the n strings of s, then s (a NULL s: nothing) */
static void gdl__free_strings(char **s, int64_t n) {
    int64_t i;
    for (i = 0; s && i < n; i++) GPUDL_FREE(s[i]);
    GPUDL_FREE(s);
}

static int64_t gdl__syncs; /* host waits for a device, from every thread */
GPUDL_API void gdl__count_sync(void) {
#ifdef GDL__ATOMICS
    (void)gdl__atomic_add(&gdl__syncs, 1, GDL__MO_RELAXED);
#else
    gdl__syncs++;
#endif
}
GPUDL_API int64_t gdl_sync_count(void) {
#ifdef GDL__ATOMICS
    return gdl__atomic_load(&gdl__syncs, GDL__MO_RELAXED);
#else
    return gdl__syncs;
#endif
}
GPUDL_API const char *gdl_version(void) { return GPUDL_VERSION; }

/* The error fmt formats, the current one kept with it: "text: current" where after is 0 (a call names
   itself, or where it stood, in front of the failure of something it called), "text (after: current)"
   where after is 1 (an argument is NULL, which usually follows an earlier failure; just "text" when there
   is no current error). */
static void gdl__error_keep(int after, const char *fmt, va_list ap) {
    char prev[sizeof gdl__err], text[sizeof gdl__err];
    memcpy(prev, gdl__err, sizeof prev);
    vsnprintf(text, sizeof text, fmt, ap);
    if (!after) gdl__set_error("%s: %s", text, prev);
    else if (prev[0]) gdl__set_error("%s (after: %s)", text, prev);
    else gdl__set_error("%s", text);
}
static void gdl__error_context(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gdl__error_keep(0, fmt, ap);
    va_end(ap);
}
static void gdl__error_after(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gdl__error_keep(1, fmt, ap);
    va_end(ap);
}
static void gdl__null_arg(const char *op, const char *arg) { gdl__error_after("%s: %s is NULL", op, arg); }

static const char *const gdl__dtype_names[GDL_DTYPE_COUNT] = {"f32", "i32", "u8", "f16", "bf16"};
static const size_t gdl__dtype_sizes[GDL_DTYPE_COUNT] = {sizeof(gdl_real), 4, 1, 2, 2};

GPUDL_API const char *gdl_dtype_name(gdl_dtype dt) {
    return ((unsigned)dt < GDL_DTYPE_COUNT) ? gdl__dtype_names[dt] : "invalid";
}
GPUDL_API size_t gdl_dtype_size(gdl_dtype dt) {
    return ((unsigned)dt < GDL_DTYPE_COUNT) ? gdl__dtype_sizes[dt] : 0;
}

static const char *gdl__shape_fmt(int ndim, const int64_t *shape) {
    static GDL__TLS char ring[8][128];
    static GDL__TLS int slot;
    char *s = ring[slot++ & 7];
    size_t k = 0;
    int i;
    s[k++] = '[';
    for (i = 0; i < ndim && k < 100; i++)
        k += (size_t)snprintf(s + k, 128 - k, i ? ",%lld" : "%lld", (long long)shape[i]);
    s[k++] = ']';
    s[k] = 0;
    return s;
}
GPUDL_API const char *gdl_shape_str(const gdl_tensor *t) {
    return t ? gdl__shape_fmt(t->ndim, t->shape) : "(null)";
}

