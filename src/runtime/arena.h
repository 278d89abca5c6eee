/* ---------------------------------------------------------------------------
   src/runtime/arena.h   The per-step arenas: one for the host (tensor structs, tape
   nodes and CPU data) and one per GPU. An arena is a list of chunks; a reset
   rewinds to the first chunk and keeps them all, so the next step, making
   the same requests in the same order, lands at the same addresses and
   allocates nothing.
   ------------------------------------------------------------------------- */

typedef struct gdl__chunk {
    struct gdl__chunk *next;
    char *base;
    size_t size, used;
} gdl__chunk;

typedef struct gdl__arena {
    gdl__chunk *head, *cur;
    size_t used, reserved;
    const gdl_backend *be; /* NULL: host memory from GPUDL_MALLOC */
} gdl__arena;

#define GDL__ALIGN 64
/* This state is per thread (GDL__TLS): each thread that calls ops has its own
   arenas, tape, grad mode, anomaly mode and capture flag, as PyTorch keeps
   grad mode per thread, so two threads training two models do not reset or
   record into each other's steps. A temporary belongs to the thread that
   made it; gdl_shutdown on a thread gives back that thread's arenas. */
static GDL__TLS gdl__arena gdl__host_arena;
static GDL__TLS gdl__arena gdl__gpu_arena[GDL__MAX_GPUS];
/* Temporaries' headers live in two arenas used in turn, one per arena
   generation: a header made before the last gdl_arena_reset is not written
   over during this step, so its generation still shows that it is stale
   (its data has been reused). One kept across two resets is caught unless a
   new header took its place; both cost one comparison per op input. */
static GDL__TLS gdl__arena gdl__hdr_arena[2];
static GDL__TLS unsigned gdl__arena_gen = 1; /* never 0: persistent tensors have gen 0 */
static GDL__TLS struct gdl_node *gdl__tape;  /* last recorded node */
static GDL__TLS int gdl__grad_enabled = 1;
static GDL__TLS int gdl__anomaly = 0;
static GDL__TLS int gdl__capturing = 0; /* gdl_graph_capture is recording a step (src/train/graph.h) */

static void *gdl__arena_alloc(gdl__arena *a, size_t bytes) {
    size_t need = (bytes + GDL__ALIGN - 1) / GDL__ALIGN * GDL__ALIGN;
    gdl__chunk *c;
    if (need == 0) need = GDL__ALIGN;
    if (need < bytes) return NULL; /* overflow */
    for (c = a->cur; c; c = c->next) {
        if (c->size - c->used >= need) {
            void *p = c->base + c->used;
            c->used += need;
            a->cur = c;
            a->used += need;
            return p;
        }
        if (c->next && c->next->used == 0 && c->next->size < need) break; /* insert a bigger one here */
    }
    {
        /* a new chunk after the current one: at least 1 MiB, at least double the last */
        size_t size = need, last = a->cur ? a->cur->size : 0;
        gdl__chunk *nc = (gdl__chunk *)GPUDL_MALLOC(sizeof(gdl__chunk));
        if (size < ((size_t)1 << 20)) size = (size_t)1 << 20;
        if (size < 2 * last && 2 * last <= ((size_t)1 << 30)) size = 2 * last;
        if (!nc) return NULL;
        nc->base = a->be ? (char *)a->be->rt.alloc(size) : (char *)GPUDL_MALLOC(size);
        if (!nc->base && size > need) { /* retry with what is needed */
            size = need;
            nc->base = a->be ? (char *)a->be->rt.alloc(size) : (char *)GPUDL_MALLOC(size);
        }
        if (!nc->base) {
            GPUDL_FREE(nc);
            return NULL;
        }
        nc->size = size;
        nc->used = need;
        if (a->cur) {
            /* the current chunk is full for this request: it stays in the list */
            nc->next = a->cur->next;
            a->cur->next = nc;
        } else {
            nc->next = a->head;
            a->head = nc;
        }
        a->cur = nc;
        a->used += need;
        a->reserved += size;
        return nc->base;
    }
}

static void gdl__arena_reset(gdl__arena *a) {
    gdl__chunk *c;
    for (c = a->head; c; c = c->next) c->used = 0;
    a->cur = a->head;
    a->used = 0;
}

static void gdl__arena_release(gdl__arena *a) {
    gdl__chunk *c = a->head;
    while (c) {
        gdl__chunk *n = c->next;
        if (a->be) a->be->rt.free(c->base);
        else GPUDL_FREE(c->base);
        GPUDL_FREE(c);
        c = n;
    }
    a->head = a->cur = NULL;
    a->used = a->reserved = 0;
}

GPUDL_API void gdl_arena_reset(void) {
    int i;
    if (++gdl__arena_gen == 0) gdl__arena_gen = 2; /* never 0, and the parity keeps alternating */
    gdl__arena_reset(&gdl__hdr_arena[gdl__arena_gen & 1]);
    gdl__arena_reset(&gdl__host_arena);
    for (i = 0; i < GDL__MAX_GPUS; i++) gdl__arena_reset(&gdl__gpu_arena[i]);
    gdl__tape = NULL;
}
GPUDL_API size_t gdl_arena_used(void) {
    size_t s = gdl__host_arena.used + gdl__hdr_arena[gdl__arena_gen & 1].used; /* this step's headers only */
    int i;
    for (i = 0; i < GDL__MAX_GPUS; i++) s += gdl__gpu_arena[i].used;
    return s;
}
GPUDL_API size_t gdl_arena_reserved(void) {
    size_t s = gdl__host_arena.reserved + gdl__hdr_arena[0].reserved + gdl__hdr_arena[1].reserved;
    int i;
    for (i = 0; i < GDL__MAX_GPUS; i++) s += gdl__gpu_arena[i].reserved;
    return s;
}

/* Temporary device memory for op scratch and outputs. */
static void *gdl__scratch(const char *op, gdl_device dev, size_t bytes) {
    gdl__arena *a;
    void *p;
    if (dev.type == GDL_DEVICE_CPU) {
        a = &gdl__host_arena;
    } else {
        if (dev.index < 0 || dev.index >= GDL__MAX_GPUS) {
            gdl__set_error("%s: device %s out of range", op, gdl_device_str(dev));
            return NULL;
        }
        a = &gdl__gpu_arena[dev.index];
        if (!(a->be = gdl__be(op, dev))) return NULL; /* also makes dev current */
    }
    p = gdl__arena_alloc(a, bytes);
    if (!p)
        gdl__set_error("%s: out of memory: %.0f bytes for temporaries on %s", op, (double)bytes,
                       gdl_device_str(dev));
    return p;
}

