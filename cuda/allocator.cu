// ----------------------------------------------------------------------------
// per-process state: the allocator's tables, cuBLAS handles, device info

#define GDL__CU_MAX_DEVICES 16 /* as GDL__MAX_GPUS in gpudl.h */
#define GDL__CU_GRANULE 512    /* allocation sizes are multiples of this */

struct gdl__cu_block {
    size_t size; /* rounded size, the bytes reserved by cudaMalloc */
    int device;
};

struct gdl__cu_state {
    std::mutex mu; /* guards everything below */
    std::unordered_map<void *, gdl__cu_block> live;      /* handed out: pointer -> block */
    std::multimap<size_t, void *> cache[GDL__CU_MAX_DEVICES]; /* freed blocks by size */
    size_t allocated, max_allocated, reserved; /* over all devices */
    gdl_memory_status mem[GDL__CU_MAX_DEVICES]; /* per device (gdl_memory_stats); arena fields unused */
    cublasHandle_t blas[GDL__CU_MAX_DEVICES];
    cublasLtHandle_t lt[GDL__CU_MAX_DEVICES]; /* cuBLASLt (fused epilogues), sharing cuBLAS's workspace and stream */
    void *blas_ws[GDL__CU_MAX_DEVICES];      /* cuBLAS's workspace, ours (graph capture must not allocate) */
    std::atomic<cudaStream_t> stream[GDL__CU_MAX_DEVICES]; /* the compute stream per device, made on first use */
    int stream_failed[GDL__CU_MAX_DEVICES];  /* its creation failed: the device stays on the legacy stream */
    int tf32;
    cudaDeviceProp prop[GDL__CU_MAX_DEVICES];
    int have_prop[GDL__CU_MAX_DEVICES];
};

// Created on first use and never destroyed: the state must outlive any
// static destructor or atexit handler that might still free device memory.
static gdl__cu_state &gdl__cu(void) {
    static gdl__cu_state *s = [] {
        gdl__cu_state *p = new gdl__cu_state;
        for (int i = 0; i < GDL__CU_MAX_DEVICES; i++) {
            p->blas[i] = NULL;
            p->lt[i] = NULL;
            p->blas_ws[i] = NULL;
            p->stream[i].store(NULL);
            p->stream_failed[i] = 0;
            p->have_prop[i] = 0;
            memset(&p->mem[i], 0, sizeof p->mem[i]);
        }
        p->allocated = p->max_allocated = p->reserved = 0;
        p->tf32 = 0;
        return p;
    }();
    return *s;
}

static int gdl__cu_current(int *dev) {
    GDL_CU_TRY(cudaGetDevice(dev), -1);
    if (*dev < 0 || *dev >= GDL__CU_MAX_DEVICES) {
        gdl__set_error("gdl_cuda: device %d is beyond the %d this build supports", *dev, GDL__CU_MAX_DEVICES);
        return -1;
    }
    return 0;
}

// The current device's compute stream, created on first use. Every kernel,
// cuBLAS call, copy and memset of the device goes to it, so they run in
// issue order and a freed block can be handed out again at once. Should its
// creation fail (no context), the device keeps to the legacy stream for all
// its work, which is ordered just as well; the failure is reported once.
static cudaStream_t gdl__cu_stream(void) {
    gdl__cu_state &S = gdl__cu();
    int dev;
    if (gdl__cu_current(&dev) < 0) return 0;
    cudaStream_t made = S.stream[dev].load(std::memory_order_acquire);
    if (made) return made; /* every launch asks: no lock once it exists */
    std::lock_guard<std::mutex> lock(S.mu);
    if (!S.stream[dev].load() && !S.stream_failed[dev]) {
        cudaStream_t s;
        cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            gdl__cu_report(cudaGetErrorString(e), __FILE__, __LINE__, "cudaStreamCreateWithFlags(compute stream)");
            (void)cudaGetLastError();
            S.stream_failed[dev] = 1;
            return 0;
        }
        S.stream[dev].store(s, std::memory_order_release);
    }
    return S.stream[dev].load();
}

// ----------------------------------------------------------------------------
// caching allocator
//
// cudaMalloc and cudaFree synchronise the device and cost tens of
// microseconds, so freed blocks are kept per device and handed out again:
// the smallest cached block that fits is taken if it is at most twice the
// request (so a small tensor cannot pin a huge block). In steady-state
// training the same sizes come back every step and nothing reaches the
// driver. Blocks are never split.

static double gdl__gib(size_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

// cudaFree every cached block of one device; the caller holds the lock and
// has made `dev` current.
static void gdl__cu_release_device_locked(gdl__cu_state &S, int dev) {
    for (auto it = S.cache[dev].begin(); it != S.cache[dev].end(); ++it) {
        cudaError_t e = cudaFree(it->second);
        if (e != cudaSuccess) {
            gdl__cu_report(cudaGetErrorString(e), __FILE__, __LINE__, "cudaFree(cached block)");
            (void)cudaGetLastError();
        }
        S.reserved -= it->first;
        S.mem[dev].reserved -= it->first;
    }
    if (!S.cache[dev].empty()) S.mem[dev].cache_releases++;
    S.cache[dev].clear();
}

// the device whose compute stream this thread is capturing (gdl_graph_*), -1: none
static thread_local int gdl__cu_capturing = -1;

static void *gdl__cu_alloc(size_t bytes) {
    gdl__cu_state &S = gdl__cu();
    int dev;
    size_t size;
    void *p = NULL;
    if (gdl__cu_current(&dev) < 0) return NULL;
    if (gdl__cu_capturing == dev) {
        // even a cached block: the graph would write into it on every replay,
        // long after its owner may have given it back
        gdl__set_error("gdl_cuda: %s allocates device memory (%.0f bytes) inside a CUDA graph capture on cuda:%d",
                       gdl__backend_op(), (double)bytes, dev);
        return NULL;
    }
    if (bytes == 0) bytes = 1;
#ifdef GPUDL_EMU
    cudaStream_t st = gdl__cu_stream(); /* before the lock: it takes it too */
#endif
    size = (bytes + GDL__CU_GRANULE - 1) / GDL__CU_GRANULE * GDL__CU_GRANULE;
    if (size < bytes) {
        gdl__set_error("gdl_cuda: allocation of %.0f bytes is too large", (double)bytes);
        return NULL;
    }
    std::lock_guard<std::mutex> lock(S.mu);
    gdl_memory_status &M = S.mem[dev];
    M.requests++;
    auto it = S.cache[dev].lower_bound(size);
    if (it != S.cache[dev].end() && it->first / 2 <= size) {
        p = it->second;
        size = it->first;
        S.cache[dev].erase(it);
        M.cache_hits++;
#ifdef GPUDL_EMU
        // the emulator's initcheck tracks whole cudaMalloc blocks: without
        // this, bytes the block's last owner wrote would pass for
        // initialised (a read past a tensor's end went unseen). In stream
        // order: the last owner's queued kernels still see their own writes.
        (void)gdl_emu_mark_uninit(p, size, (void *)st);
#endif
    } else {
        M.device_mallocs++;
        cudaError_t e = cudaMalloc(&p, size);
        if (e == cudaErrorMemoryAllocation && !S.cache[dev].empty()) { /* give the cache back, try once more */
            (void)cudaGetLastError();
            gdl__cu_release_device_locked(S, dev);
            M.device_mallocs++;
            e = cudaMalloc(&p, size);
        }
        if (e != cudaSuccess) {
            size_t fr = 0, tot = 0;
            (void)cudaGetLastError();
            if (e == cudaErrorMemoryAllocation) {
                if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) (void)cudaGetLastError();
                gdl__set_error("gdl_cuda: out of memory allocating %.2f GiB on cuda:%d (free %.2f GiB of %.1f GiB)",
                               gdl__gib(bytes), dev, gdl__gib(fr), gdl__gib(tot));
            } else {
                gdl__cu_report(cudaGetErrorString(e), __FILE__, __LINE__, "cudaMalloc(&p, size)");
            }
            return NULL;
        }
        S.reserved += size;
        M.reserved += size;
        if (M.reserved > M.peak_reserved) M.peak_reserved = M.reserved;
    }
    gdl__cu_block b;
    b.size = size;
    b.device = dev;
    try { /* a C caller cannot take an exception */
        S.live[p] = b;
    } catch (...) {
        if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError(); /* in neither table now: give it back */
        S.reserved -= size;
        M.reserved -= size;
        gdl__set_error("gdl_cuda: out of host memory for the allocator's table");
        return NULL;
    }
    S.allocated += size;
    if (S.allocated > S.max_allocated) S.max_allocated = S.allocated;
    M.allocated += size;
    if (M.allocated > M.peak_allocated) M.peak_allocated = M.allocated;
    return p;
}

static void gdl__cu_free(void *p) {
    gdl__cu_state &S = gdl__cu();
    if (!p) return;
    std::lock_guard<std::mutex> lock(S.mu);
    auto it = S.live.find(p);
    if (it == S.live.end()) {
        gdl__set_error("gdl_cuda: free of %p, which this allocator did not hand out", p);
        return;
    }
    gdl__cu_block b = it->second;
    S.live.erase(it);
    S.allocated -= b.size;
    S.mem[b.device].allocated -= b.size;
    S.mem[b.device].frees++;
    try {
        S.cache[b.device].insert(std::make_pair(b.size, p));
    } catch (...) { /* no host memory to remember it: return it to the driver */
        if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
        S.reserved -= b.size;
        S.mem[b.device].reserved -= b.size;
    }
}

static void gdl__cu_clip_release(void);
static void gdl__cu_fold_release(void);

void gdl_cuda_release_cache(void) {
    gdl__cu_clip_release(); /* the clipping's kept tables and the GEMM's fold workspace go back into the cache first */
    gdl__cu_fold_release();
    gdl__cu_state &S = gdl__cu();
    std::lock_guard<std::mutex> lock(S.mu);
    int cur = -1;
    for (int d = 0; d < GDL__CU_MAX_DEVICES; d++) {
        if (S.cache[d].empty()) continue;
        if (cur < 0) GDL_CU_TRY(cudaGetDevice(&cur), );
        if (d != cur) GDL_CU_TRY(cudaSetDevice(d), );
        gdl__cu_release_device_locked(S, d);
        if (d != cur) GDL_CU_TRY(cudaSetDevice(cur), );
    }
}

// Over all devices, like PyTorch's memory_allocated / max_memory_allocated /
// memory_reserved summed over GPUs. Sizes are the rounded block sizes.
int gdl_cuda_memory_stats(size_t *allocated, size_t *max_allocated, size_t *reserved) {
    gdl__cu_state &S = gdl__cu();
    std::lock_guard<std::mutex> lock(S.mu);
    if (allocated) *allocated = S.allocated;
    if (max_allocated) *max_allocated = S.max_allocated;
    if (reserved) *reserved = S.reserved;
    return 0;
}

void gdl_cuda_reset_peak_memory(void) {
    gdl__cu_state &S = gdl__cu();
    std::lock_guard<std::mutex> lock(S.mu);
    S.max_allocated = S.allocated;
    for (int d = 0; d < GDL__CU_MAX_DEVICES; d++) {
        S.mem[d].peak_allocated = S.mem[d].allocated;
        S.mem[d].peak_reserved = S.mem[d].reserved;
    }
}

// One device's figures (the backend's memory_stats entry; the front end has
// checked the index).
static int gdl__cu_memory_stats(int device, gdl_memory_status *s) {
    gdl__cu_state &S = gdl__cu();
    std::lock_guard<std::mutex> lock(S.mu);
    *s = S.mem[device];
    return 0;
}

static int gdl__cu_memory_reset_peak(int device) {
    gdl__cu_state &S = gdl__cu();
    std::lock_guard<std::mutex> lock(S.mu);
    S.mem[device].peak_allocated = S.mem[device].allocated;
    S.mem[device].peak_reserved = S.mem[device].reserved;
    return 0;
}

