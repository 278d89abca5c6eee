// ----------------------------------------------------------------------------
// kernel helpers

// Every launch goes through GDL_CU_LAUNCH(kernel, grid, block, shmem,
// stream)(args...): exactly kernel<<<grid, block, shmem, stream>>>(args...)
// under nvcc; under the CUDA-on-CPU emulator (tests/cuda_emu, -DGPUDL_EMU)
// a call into its launcher, so the emulator needs no source rewriting.
// Each launch is counted for the profiler (gdl_profile_*: launches per op).
static std::atomic<long long> gdl__cu_launches(0);
#ifdef GPUDL_EMU
#define GDL_CU_LAUNCH(kernel, grid, block, shmem, stream) \
    gdl__cu_launches.fetch_add(1, std::memory_order_relaxed), gdl_emu_launch(#kernel, kernel, grid, block, shmem, stream)
#else
#define GDL_CU_LAUNCH(kernel, grid, block, shmem, stream) \
    gdl__cu_launches.fetch_add(1, std::memory_order_relaxed), kernel<<<grid, block, shmem, stream>>>
#endif

static int64_t gdl__cu_launch_count(void) { return (int64_t)gdl__cu_launches.load(std::memory_order_relaxed); }

// The profiler's markers: timing events in the device's compute stream,
// where all its work goes, read once at gdl_profile_end (freed with
// gdl__cu_event_destroy).
static void *gdl__cu_timing_event(void) {
    cudaEvent_t e;
    GDL_CU_TRY(cudaEventCreate(&e), NULL);
    cudaError_t r = cudaEventRecord(e, gdl__cu_stream());
    if (r != cudaSuccess) {
        (void)cudaEventDestroy(e);
        GDL_CU_TRY(r, NULL);
    }
    return (void *)e;
}

static int gdl__cu_event_elapsed(void *start, void *end, double *ms) {
    float f = 0;
    gdl__count_sync();
    GDL_CU_TRY(cudaEventSynchronize((cudaEvent_t)end), -1);
    GDL_CU_TRY(cudaEventElapsedTime(&f, (cudaEvent_t)start, (cudaEvent_t)end), -1);
    *ms = f;
    return 0;
}

// "0000:65:00.0": how NVML finds the GPU that CUDA calls `device`
static int gdl__cu_pci_bus_id(int device, char *buf, int len) {
    GDL_CU_TRY(cudaDeviceGetPCIBusId(buf, len, device), -1);
    return 0;
}

#define GDL__CU_THREADS 256

// grid-stride loop: correct for any grid size, so grids can be capped
#define GDL_CU_LOOP(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)blockDim.x * gridDim.x)

// the same over blocks: block b takes rows b, b + gridDim.x, ...
#define GDL_CU_ROWS(r, n) for (int64_t r = blockIdx.x; r < (n); r += gridDim.x)

// The grids' caps: 2^20 blocks for a grid over elements, 65535 * 8 for one
// over rows (gdl__cu_cap(limit)). GPUDL_CUDA_MAX_GRID=n (read once) lowers
// both, and the optimizers' grids over chunks, to n blocks: then every block
// loops over several rows or tiles, as only inputs too large to test make it
// loop otherwise. The emulator's checks run (tests/cuda_emu/emu.mk) uses it,
// so that a missing barrier before a block reuses its shared memory for its
// next row shows; it changes only the order of a reduction's partial sums.
// The value is a whole number in [1, 2^31 - 1]; anything else (read where no
// call can fail) is one warning line on stderr, and the caps stay.
static int64_t gdl__cu_cap(int64_t limit) {
    static const int64_t env = [] {
        const char *e = getenv("GPUDL_CUDA_MAX_GRID");
        char *end = NULL;
        long long v;
        if (!e || !e[0]) return (int64_t)0;
        errno = 0;
        v = e[0] >= '0' && e[0] <= '9' ? strtoll(e, &end, 10) : 0;
        if (!end || *end || errno == ERANGE || v < 1 || v > 2147483647LL) {
            fprintf(stderr, "gpudl: warning: ignoring GPUDL_CUDA_MAX_GRID='%.64s': not a whole number in "
                            "[1, 2147483647]; using the default grid caps\n", e);
            return (int64_t)0;
        }
        return (int64_t)v;
    }();
    return env > 0 && env < limit ? env : limit;
}
static unsigned gdl__cu_grid(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads, cap = gdl__cu_cap((int64_t)1 << 20);
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}
static unsigned gdl__cu_row_grid(int64_t rows) {
    int64_t cap = gdl__cu_cap(65535 * 8);
    return (unsigned)(rows < 1 ? 1 : rows > cap ? cap : rows);
}

// threads for one block per row of n elements: a multiple of 32, not more
// than the row needs, at most 512
static int gdl__cu_row_threads(int64_t n) {
    int t = 32;
    while (t < n && t < 512) t *= 2;
    return t;
}

// a product rounded to f32 on its own, never fused into a following add
// (nvcc contracts a * b + c into an FMA, not __fmul_rn(a, b) + c); the
// emulator's host compiler does not contract (-std=c++17: -ffp-contract=off)
#ifdef GPUDL_EMU
#define gdl__mul_rn(a, b) ((a) * (b))
#else
#define gdl__mul_rn(a, b) __fmul_rn((a), (b))
#endif

#define GDL__CU_INF __int_as_float(0x7f800000)
#define GDL__CU_NAN __int_as_float(0x7fffffff)

template <typename T> __device__ __forceinline__ T gdl__warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float gdl__warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Reduce over the block (blockDim.x a multiple of 32) with a warp
// reduction WARP whose identity is `none`; every thread gets the result. The
// leading barrier lets a kernel call it repeatedly. The order of the
// operations depends only on blockDim, so results are reproducible.
template <typename T, T (*WARP)(T)> __device__ T gdl__block_reduce(T v, T none) {
    __shared__ T sh[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = WARP(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : none;
    return WARP(v);
}
template <typename T> __device__ T gdl__block_sum(T v) { return gdl__block_reduce<T, gdl__warp_sum<T> >(v, (T)0); }
// max ignoring NaN (fmaxf), as the CPU's "if (v > mx) mx = v"
__device__ float gdl__block_max(float v) { return gdl__block_reduce<float, gdl__warp_max>(v, -GDL__CU_INF); }

// Is (v, k) preferred to (bv, bk) as the max? The CPU's rule: the first NaN
// if there is one, else the first maximal element. k < 0 marks "none yet".
// A total order, so a tree reduction finds the same element as a scan.
__device__ __forceinline__ bool gdl__max_better(float v, long long k, float bv, long long bk) {
    if (k < 0) return false;
    if (bk < 0) return true;
    bool vn = v != v, bn = bv != bv;
    if (vn || bn) return vn && (!bn || k < bk);
    return v > bv || (v == bv && k < bk);
}

__device__ void gdl__block_argmax(float &v, long long &k) {
    __shared__ float sv[32];
    __shared__ long long sk[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        long long ok = __shfl_xor_sync(0xffffffffu, k, o);
        if (gdl__max_better(ov, ok, v, k)) { v = ov; k = ok; }
    }
    __syncthreads();
    if (lane == 0) { sv[wid] = v; sk[wid] = k; }
    __syncthreads();
    v = lane < nw ? sv[lane] : 0.0f;
    k = lane < nw ? sk[lane] : -1;
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        long long ok = __shfl_xor_sync(0xffffffffu, k, o);
        if (gdl__max_better(ov, ok, v, k)) { v = ov; k = ok; }
    }
}

