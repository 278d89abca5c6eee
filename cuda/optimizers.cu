// ----------------------------------------------------------------------------
// optimizers: the CPU's formulas, in double per element as the CPU computes
// them (memory-bound either way). One launch updates every parameter of the
// device (PyTorch's multi_tensor_apply): a table of per-tensor pointers and
// sizes, made once in device memory and kept by the optimizer while its
// parameters stay the same, and block b of the grid takes chunk b -
// first_block of the tensor whose range of chunks holds b. lr and the other
// hyper-parameters, the step counts and so the bias corrections are read
// from device memory (the optimizer's flat block), so a captured launch stays
// right when a scheduler changes lr; the last block to finish advances the
// step counts. A failed launch therefore updates nothing.

#define GDL__CU_OPT_CHUNK (GDL__CU_THREADS * 8) /* elements per chunk */

struct gdl__cu_opt_entry {
    float *p, *s1, *s2;
    const float *g;
    int64_t n, first_chunk;
    const gdl_opt_hyper *h;
    int32_t *step;
    uint16_t *plow;       // master weights: p is the f32 master, plow its rounding (dtype low), read
    const uint16_t *glow; // the gradient from glow (dtype low); low 0 (GDL_F32): none
    int low;
};

// master weights: a low gradient element in f32, an f32 master rounded to nearest even
__device__ __forceinline__ float gdl__cu_opt_lowf(int low, uint16_t h) {
    return low == GDL_F16 ? gdl__f16_to_f32(h) : gdl__bf16_to_f32(h);
}
__device__ __forceinline__ uint16_t gdl__cu_opt_round(int low, float f) {
    return low == GDL_F16 ? gdl__f32_to_f16(f) : gdl__f32_to_bf16(f);
}

// the host's handle of a table: entries in device memory, then the counter
// of finished blocks (0 between launches)
struct gdl__cu_opt_table {
    gdl__cu_opt_entry *tab;
    unsigned *done;
    const float *skip; // GradScaler's found_inf (NULL: none): set, every block returns at once
    int count;
    int64_t chunks;
};

// the entry whose chunks hold chunk c: entries are in order of first_chunk
__device__ static const gdl__cu_opt_entry *gdl__cu_opt_find(const gdl__cu_opt_entry *tab, int count, int64_t c) {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (tab[mid].first_chunk <= c) lo = mid;
        else hi = mid - 1;
    }
    return &tab[lo];
}

// After the block's work: the last block of the grid to get here (every
// other block has read its step counts) adds one to every count and
// re-arms the counter. `last` is the kernel's __shared__ flag.
__device__ static void gdl__cu_opt_count(const gdl__cu_opt_entry *tab, int count, unsigned *done, int *last) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        *last = atomicAdd(done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (*last) {
        __threadfence();
        for (int k = threadIdx.x; k < count; k += blockDim.x)
            if (tab[k].step && *tab[k].step < 2147483647) *tab[k].step += 1;
        if (threadIdx.x == 0) *done = 0;
    }
}

__global__ void gdl__k_sgd_multi(const gdl__cu_opt_entry *tab, int count, int64_t chunks, unsigned *done,
                                 const float *skip) {
    __shared__ int last;
    if (skip && *skip != 0) return; // every block reads the same flag: none counts, none updates
    GDL_CU_ROWS(c, chunks) {
        const gdl__cu_opt_entry *e = gdl__cu_opt_find(tab, count, c);
        const gdl_opt_hyper *h = e->h;
        float *p = e->p, *buf = e->s1;
        const float *g = e->g;
        double lr = h->lr, momentum = buf ? h->momentum : 0, dampening = h->dampening, weight_decay = h->weight_decay;
        int nesterov = h->nesterov, first_step = !e->step || *e->step == 0;
        int64_t lo = (c - e->first_chunk) * GDL__CU_OPT_CHUNK, hi = lo + GDL__CU_OPT_CHUNK < e->n ? lo + GDL__CU_OPT_CHUNK : e->n;
        int low = e->low;
        for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            double d = (double)(low ? gdl__cu_opt_lowf(low, e->glow[i]) : g[i]) + weight_decay * p[i];
            if (momentum != 0) {
                double b = first_step ? d : momentum * buf[i] + (1 - dampening) * d;
                buf[i] = (float)b;
                d = nesterov ? d + momentum * b : b;
            }
            p[i] = (float)(p[i] - lr * d);
            if (low) e->plow[i] = gdl__cu_opt_round(low, p[i]);
        }
    }
    gdl__cu_opt_count(tab, count, done, &last);
}

__global__ void gdl__k_adam_multi(const gdl__cu_opt_entry *tab, int count, int64_t chunks, int decoupled,
                                  unsigned *done, const float *skip) {
    __shared__ int last;
    if (skip && *skip != 0) return;
    GDL_CU_ROWS(c, chunks) {
        const gdl__cu_opt_entry *e = gdl__cu_opt_find(tab, count, c);
        const gdl_opt_hyper *h = e->h;
        float *p = e->p, *m = e->s1, *v = e->s2;
        const float *g = e->g;
        double lr = h->lr, beta1 = h->beta1, beta2 = h->beta2, eps = h->eps, weight_decay = h->weight_decay;
        int64_t stp = e->step ? *e->step : 0;
        double step = (double)(stp < 2147483647 ? stp + 1 : stp);
        double bc1 = 1 - pow(beta1, step), bc2 = 1 - pow(beta2, step);
        int64_t lo = (c - e->first_chunk) * GDL__CU_OPT_CHUNK, hi = lo + GDL__CU_OPT_CHUNK < e->n ? lo + GDL__CU_OPT_CHUNK : e->n;
        int low = e->low;
        for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            double gi = low ? gdl__cu_opt_lowf(low, e->glow[i]) : g[i], pi = p[i];
            if (decoupled) pi -= lr * weight_decay * pi;
            else gi += weight_decay * pi;
            float mi = (float)(beta1 * m[i] + (1 - beta1) * gi);
            float vi = (float)(beta2 * v[i] + (1 - beta2) * gi * gi);
            m[i] = mi;
            v[i] = vi;
            p[i] = (float)(pi - lr * (mi / bc1) / (sqrt(vi / bc2) + eps));
            if (low) e->plow[i] = gdl__cu_opt_round(low, p[i]);
        }
    }
    gdl__cu_opt_count(tab, count, done, &last);
}

// The table goes to a block of the caching allocator with one copy (from
// pageable memory: staged, so `host` may go when it returns) and the block
// counter is zeroed; both in stream order on the compute stream.
static void *gdl__cu_opt_table_new(int count, const gdl_opt_tensor *t) {
    std::vector<gdl__cu_opt_entry> host;
    int64_t chunks = 0;
    int used = 0;
    try {
        host.resize((size_t)(count > 0 ? count : 1));
    } catch (...) {
        gdl__set_error("gdl_cuda: out of host memory for the optimizer's table of %d tensors", count);
        return NULL;
    }
    for (int k = 0; k < count; k++) {
        if (t[k].n <= 0) continue;
        gdl__cu_opt_entry &e = host[(size_t)used++];
        memset(&e, 0, sizeof e);
        e.p = t[k].p;
        e.g = t[k].g;
        e.s1 = t[k].s1;
        e.s2 = t[k].s2;
        e.n = t[k].n;
        e.first_chunk = chunks;
        e.h = t[k].hyper;
        e.step = t[k].step;
        e.low = t[k].low == GDL_F16 || t[k].low == GDL_BF16 ? (int)t[k].low : 0;
        e.plow = e.low ? (uint16_t *)t[k].plow : NULL;
        e.glow = e.low ? (const uint16_t *)t[k].glow : NULL;
        chunks += (t[k].n + GDL__CU_OPT_CHUNK - 1) / GDL__CU_OPT_CHUNK;
    }
    gdl__cu_opt_table *h = new (std::nothrow) gdl__cu_opt_table;
    if (!h) {
        gdl__set_error("gdl_cuda: out of host memory for the optimizer's table");
        return NULL;
    }
    size_t tb = sizeof(gdl__cu_opt_entry) * (size_t)(used > 0 ? used : 1);
    char *block = (char *)gdl__cu_alloc(tb + sizeof(unsigned));
    if (!block) {
        delete h;
        return NULL;
    }
    h->tab = (gdl__cu_opt_entry *)block;
    h->done = (unsigned *)(block + tb);
    h->count = used;
    h->chunks = chunks;
    h->skip = count > 0 ? t[0].skip : NULL;
    cudaStream_t st = gdl__cu_stream();
    cudaError_t e = used ? cudaMemcpyAsync(h->tab, host.data(), sizeof(gdl__cu_opt_entry) * (size_t)used,
                                           cudaMemcpyHostToDevice, st)
                         : cudaSuccess;
    if (e == cudaSuccess) e = cudaMemsetAsync(h->done, 0, sizeof(unsigned), st);
    if (e != cudaSuccess) {
        gdl__cu_report(cudaGetErrorString(e), __FILE__, __LINE__, "the optimizer table's copy");
        (void)cudaGetLastError();
        gdl__cu_free(block);
        delete h;
        return NULL;
    }
    return h;
}

static void gdl__cu_opt_table_free(void *table) {
    gdl__cu_opt_table *h = (gdl__cu_opt_table *)table;
    if (!h) return;
    gdl__cu_free(h->tab); /* stream order: the launches queued before are done before any reuse */
    delete h;
}

static int gdl__cu_opt_multi(const void *table, int adam, int decoupled) {
    const gdl__cu_opt_table *h = (const gdl__cu_opt_table *)table;
    if (!h || !h->count) return 0;
    cudaStream_t st = gdl__cu_stream();
    int64_t cap = gdl__cu_cap(1 << 20);
    unsigned grid = (unsigned)(h->chunks < cap ? h->chunks : cap);
    if (adam)
        GDL_CU_LAUNCH(gdl__k_adam_multi, grid, GDL__CU_THREADS, 0, st)(h->tab, h->count, h->chunks, decoupled, h->done,
                                                                        h->skip);
    else GDL_CU_LAUNCH(gdl__k_sgd_multi, grid, GDL__CU_THREADS, 0, st)(h->tab, h->count, h->chunks, h->done, h->skip);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        gdl__cu_report(cudaGetErrorString(e), __FILE__, __LINE__, adam ? "gdl__k_adam_multi" : "gdl__k_sgd_multi");
        return -1;
    }
    return 0;
}

// clip_grad_norm_ on the device: per-chunk sums of squares (double), one
// block adding them in chunk order, then the scaling, which reads the
// coefficient from device memory: three launches, nothing read back. The
// table is the optimizer's (only p, n and first_chunk are used).
__global__ void gdl__k_sumsq_chunks(const gdl__cu_opt_entry *tab, int count, int64_t chunks, double *part) {
    GDL_CU_ROWS(c, chunks) {
        const gdl__cu_opt_entry *e = gdl__cu_opt_find(tab, count, c);
        int64_t lo = (c - e->first_chunk) * GDL__CU_OPT_CHUNK, hi = lo + GDL__CU_OPT_CHUNK < e->n ? lo + GDL__CU_OPT_CHUNK : e->n;
        double s = 0;
        for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) s += (double)e->p[i] * e->p[i];
        s = gdl__block_sum(s);
        if (threadIdx.x == 0) part[c] = s;
    }
}

__global__ void gdl__k_clip_coef(int64_t chunks, const double *part, double max_norm, double *norm, double *coef) {
    double s = 0;
    for (int64_t i = threadIdx.x; i < chunks; i += blockDim.x) s += part[i];
    s = gdl__block_sum(s);
    if (threadIdx.x == 0) {
        double nrm = sqrt(s);
        if (norm) *norm = nrm;
        *coef = max_norm / (nrm + 1e-6);
    }
}

__global__ void gdl__k_clip_scale(const gdl__cu_opt_entry *tab, int count, int64_t chunks, const double *coef) {
    double cf = *coef;
    if (cf >= 1) return; /* PyTorch multiplies by min(coef, 1); a NaN coefficient scales, spreading NaN */
    float f = (float)cf;
    GDL_CU_ROWS(c, chunks) {
        const gdl__cu_opt_entry *e = gdl__cu_opt_find(tab, count, c);
        int64_t lo = (c - e->first_chunk) * GDL__CU_OPT_CHUNK, hi = lo + GDL__CU_OPT_CHUNK < e->n ? lo + GDL__CU_OPT_CHUNK : e->n;
        for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) e->p[i] = f * e->p[i];
    }
}

// The clipping's tables and scratch per device, one per set of gradients
// clipped (an optimizer's flat slots stay the same), kept: a steady-state
// clip copies nothing to the device, so a step with clipping can be
// captured, and a graph recorded with one set keeps its table while another
// set is clipped. At most GDL__CU_CLIP_SETS per device: past that the
// oldest goes (a graph still using it must not be replayed), so a program
// clipping ever-new tensors does not grow without bound.
#define GDL__CU_CLIP_SETS 16
struct gdl__cu_clip_cache {
    std::vector<gdl__cu_opt_entry> host; /* what the device table holds */
    char *block;                         /* [table][chunk sums][coefficient] */
    size_t bytes;
};
static std::vector<gdl__cu_clip_cache> gdl__cu_clips[GDL__CU_MAX_DEVICES];

static void gdl__cu_clip_release(void) {
    for (int d = 0; d < GDL__CU_MAX_DEVICES; d++) {
        for (gdl__cu_clip_cache &C : gdl__cu_clips[d])
            gdl__cu_free(C.block); /* stream order: launches queued before it run first */
        gdl__cu_clips[d].clear();
    }
}

static int gdl__cu_clip_grad_norm(int count, float *const *g, const int64_t *n, double max_norm, double *norm) {
    std::vector<gdl__cu_opt_entry> host;
    int64_t chunks = 0;
    int used = 0, dev;
    if (gdl__cu_current(&dev) < 0) return -1;
    try {
        host.resize((size_t)(count > 0 ? count : 1));
    } catch (...) {
        gdl__set_error("gdl_cuda: out of host memory for the clipping's table of %d tensors", count);
        return -1;
    }
    for (int k = 0; k < count; k++) {
        if (n[k] <= 0) continue;
        gdl__cu_opt_entry &e = host[(size_t)used++];
        memset(&e, 0, sizeof e);
        e.p = g[k];
        e.n = n[k];
        e.first_chunk = chunks;
        chunks += (n[k] + GDL__CU_OPT_CHUNK - 1) / GDL__CU_OPT_CHUNK;
    }
    size_t tb = sizeof(gdl__cu_opt_entry) * (size_t)(used > 0 ? used : 1);
    size_t need = tb + sizeof(double) * (size_t)(chunks + 1);
    std::vector<gdl__cu_clip_cache> &sets = gdl__cu_clips[dev];
    cudaStream_t st = gdl__cu_stream();
    cudaError_t e = cudaSuccess;
    size_t k;
    host.resize((size_t)used);
    for (k = 0; k < sets.size(); k++)
        if (sets[k].bytes == need && sets[k].host.size() == host.size() &&
            (!used || !memcmp(sets[k].host.data(), host.data(), sizeof(gdl__cu_opt_entry) * (size_t)used)))
            break;
    if (k == sets.size()) { /* a new set: its table, copied once */
        gdl__cu_clip_cache C;
        if (!(C.block = (char *)gdl__cu_alloc(need))) return -1; /* refused inside a capture */
        C.bytes = need;
        e = used ? cudaMemcpyAsync(C.block, host.data(), sizeof(gdl__cu_opt_entry) * (size_t)used,
                                   cudaMemcpyHostToDevice, st)
                 : cudaSuccess;
        if (e != cudaSuccess) {
            gdl__cu_free(C.block);
        } else {
            try {
                if (sets.size() == GDL__CU_CLIP_SETS) {
                    gdl__cu_free(sets[0].block);
                    sets.erase(sets.begin());
                }
                C.host.swap(host);
                sets.push_back(C);
                k = sets.size() - 1;
            } catch (...) {
                gdl__cu_free(C.block);
                gdl__set_error("gdl_cuda: out of host memory for the clipping's table");
                return -1;
            }
        }
    }
    char *block = e == cudaSuccess ? sets[k].block : NULL;
    gdl__cu_opt_entry *tab = (gdl__cu_opt_entry *)block;
    double *part = block ? (double *)(block + tb) : NULL, *coef = part ? part + chunks : NULL;
    if (e == cudaSuccess) {
        int64_t cap = gdl__cu_cap(1 << 20);
        unsigned grid = (unsigned)(chunks < cap ? (chunks > 0 ? chunks : 1) : cap);
        if (chunks > 0) GDL_CU_LAUNCH(gdl__k_sumsq_chunks, grid, GDL__CU_THREADS, 0, st)(tab, used, chunks, part);
        GDL_CU_LAUNCH(gdl__k_clip_coef, 1, GDL__CU_THREADS, 0, st)(chunks, part, max_norm, norm, coef);
        if (chunks > 0) GDL_CU_LAUNCH(gdl__k_clip_scale, grid, GDL__CU_THREADS, 0, st)(tab, used, chunks, coef);
        e = cudaGetLastError();
    }
    if (e != cudaSuccess) {
        gdl__cu_report(cudaGetErrorString(e), __FILE__, __LINE__, "gdl__cu_clip_grad_norm's copy or kernels");
        (void)cudaGetLastError();
        return -1;
    }
    return 0;
}

// torch.lerp_'s two forms (see the ema_lerp entry)
__global__ void gdl__k_ema_lerp(int64_t n, float *avg, const float *x, float w) {
    if (w < 0.5f) {
        GDL_CU_LOOP(i, n) avg[i] = avg[i] + w * (x[i] - avg[i]);
    } else {
        GDL_CU_LOOP(i, n) avg[i] = x[i] - (x[i] - avg[i]) * (1.0f - w);
    }
}

static int gdl__cu_ema_lerp(int64_t n, float *avg, const float *x, float w) {
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_ema_lerp, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(n, avg, x, w);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_sgd_multi(const void *table) { return gdl__cu_opt_multi(table, 0, 0); }
static int gdl__cu_adam_multi(const void *table, int decoupled) { return gdl__cu_opt_multi(table, 1, decoupled); }

