/* src/cpu/memory.h — the CPU backend's memory entries: allocation with its
   counters, copies, the stream and event stand-ins (a CPU runs in order),
   fill and dtype casts.

   The CPU kernels (this folder): their reductions accumulate in double and
   run serially over the reduced dimension, so results do not depend on the
   thread count or the CPU path (AVX-512, AVX2, portable C). */

/* The loops worth threads run through gdl__parallel_loop (src/runtime/thread_pool.h): the
   loop over a range [lo, hi) in a _part function, its arguments in the
   slots of a gdl__args. */

/* Each block starts with its size, so that a free knows what it gives back (gdl_memory_stats). 64 bytes
   keep the alignment malloc gave. */
#define GDL__CPU_HDR 64
/* Counted from every thread that allocates (two threads may each train a model): atomic where the
   platform has atomics, the peak by compare-and-swap. */
static gdl_memory_status gdl__cpu_mem;
#ifdef GDL__ATOMICS
#define GDL__CPU_MEM_ADD(field, v) gdl__atomic_add(&gdl__cpu_mem.field, v, GDL__MO_RELAXED)
#define GDL__CPU_MEM_GET(field) gdl__atomic_load(&gdl__cpu_mem.field, GDL__MO_RELAXED)
#else
#define GDL__CPU_MEM_ADD(field, v) (gdl__cpu_mem.field += (v))
#define GDL__CPU_MEM_GET(field) (gdl__cpu_mem.field)
#endif
static void gdl__cpu_mem_peak(size_t now) {
#ifdef GDL__ATOMICS
    size_t peak = (size_t)GDL__CPU_MEM_GET(peak_allocated);
    while (now > peak && !gdl__atomic_cas(&gdl__cpu_mem.peak_allocated, &peak, now, 1, GDL__MO_RELAXED, GDL__MO_RELAXED)) {}
#else
    if (now > gdl__cpu_mem.peak_allocated) gdl__cpu_mem.peak_allocated = now;
#endif
}
static void *gdl__cpu_alloc(size_t bytes) {
    char *p = bytes <= SIZE_MAX - GDL__CPU_HDR ? (char *)GPUDL_MALLOC(GDL__CPU_HDR + (bytes ? bytes : 1)) : NULL;
    (void)GDL__CPU_MEM_ADD(requests, 1);
    if (!p) {
        gdl__set_error("gdl: out of memory allocating %.0f bytes on the host", (double)bytes);
        return NULL;
    }
    memcpy(p, &bytes, sizeof bytes);
    (void)GDL__CPU_MEM_ADD(device_mallocs, 1);
    gdl__cpu_mem_peak((size_t)GDL__CPU_MEM_ADD(allocated, bytes));
    return p + GDL__CPU_HDR;
}
static void gdl__cpu_free(void *p) {
    size_t bytes;
    if (!p) return;
    memcpy(&bytes, (char *)p - GDL__CPU_HDR, sizeof bytes);
    (void)GDL__CPU_MEM_ADD(allocated, (size_t)0 - bytes);
    (void)GDL__CPU_MEM_ADD(frees, 1);
    GPUDL_FREE((char *)p - GDL__CPU_HDR);
}
static int gdl__cpu_memory_stats(int device, gdl_memory_status *s) {
    (void)device;
    memset(s, 0, sizeof *s);
    s->allocated = (size_t)GDL__CPU_MEM_GET(allocated);
    s->peak_allocated = (size_t)GDL__CPU_MEM_GET(peak_allocated);
    s->requests = GDL__CPU_MEM_GET(requests);
    s->device_mallocs = GDL__CPU_MEM_GET(device_mallocs);
    s->frees = GDL__CPU_MEM_GET(frees);
    s->reserved = s->allocated; /* nothing is cached */
    s->peak_reserved = s->peak_allocated;
    return 0;
}
static int gdl__cpu_memory_reset_peak(int device) {
    (void)device;
#ifdef GDL__ATOMICS
    gdl__atomic_store(&gdl__cpu_mem.peak_allocated, GDL__CPU_MEM_GET(allocated), GDL__MO_RELAXED);
#else
    gdl__cpu_mem.peak_allocated = gdl__cpu_mem.allocated;
#endif
    return 0;
}
static int gdl__cpu_copy(void *dst, const void *src, size_t bytes, int kind) {
    (void)kind;
    if (bytes && dst != src) memmove(dst, src, bytes);
    return 0;
}
static int gdl__cpu_memset0(void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
    return 0;
}
static int gdl__cpu_synchronize(void) { return 0; }
static void *gdl__cpu_host_alloc(size_t bytes) { return gdl__cpu_alloc(bytes); }
static void gdl__cpu_host_free(void *p) { GPUDL_FREE(p); }
/* CPU work is finished when its call returns: streams and events are
   stand-ins that order nothing, distinct non-NULL handles so that callers
   can tell them from a failure */
static char gdl__cpu_stream_token, gdl__cpu_event_token;
static void *gdl__cpu_stream_create(void) { return &gdl__cpu_stream_token; }
static void gdl__cpu_stream_destroy(void *stream) { (void)stream; }
static int gdl__cpu_copy_async(void *dst, const void *src, size_t bytes, int kind, void *stream) {
    (void)stream;
    return gdl__cpu_copy(dst, src, bytes, kind);
}
static void *gdl__cpu_event_create(void) { return &gdl__cpu_event_token; }
static void gdl__cpu_event_destroy(void *event) { (void)event; }
static int gdl__cpu_event_record(void *event, void *stream) {
    (void)event;
    (void)stream;
    return 0;
}
static int gdl__cpu_stream_wait_event(void *stream, void *event) {
    (void)stream;
    (void)event;
    return 0;
}
static int gdl__cpu_event_synchronize(void *event) {
    (void)event;
    return 0;
}

static void gdl__fill_part(gdl__args a, int64_t lo, int64_t hi) {
    int64_t i;
    for (i = lo; i < hi; i++) a.out[i] = a.alpha;
}
static int gdl__cpu_fill(gdl_real *x, int64_t n, gdl_real v) {
    gdl__args a = gdl__args_none();
    a.out = x; a.alpha = v;
    gdl__parallel_loop(n, n, gdl__fill_part, &a);
    return 0;
}

static int gdl__cpu_cast(void *dst, gdl_dtype dt, const void *src, gdl_dtype st, int64_t n) {
    int64_t i;
    size_t ds = gdl_dtype_size(dt), ss = gdl_dtype_size(st);
    if (dt == st) {
        memmove(dst, src, (size_t)n * ds);
        return 0;
    }
    if (dt == GDL_F32 && (st == GDL_F16 || st == GDL_BF16)) { /* the low-precision ops' inputs: a tight loop */
        const uint16_t *h = (const uint16_t *)src;
        gdl_real *f = (gdl_real *)dst;
        if (st == GDL_F16)
            for (i = 0; i < n; i++) f[i] = (gdl_real)gdl_f16_to_f32(h[i]);
        else
            for (i = 0; i < n; i++) f[i] = (gdl_real)gdl_bf16_to_f32(h[i]);
        return 0;
    }
    for (i = 0; i < n; i++) {
        const void *s = (const char *)src + (size_t)i * ss;
        void *d = (char *)dst + (size_t)i * ds;
        if (st == GDL_F32 && (dt == GDL_F16 || dt == GDL_BF16)) {
            /* direct, so the float rounds once */
            float v = (float)*(const gdl_real *)s;
            *(uint16_t *)d = dt == GDL_F16 ? gdl_f32_to_f16(v) : gdl_f32_to_bf16(v);
        } else {
            gdl__store(d, dt, gdl__load(s, st));
        }
    }
    return 0;
}
