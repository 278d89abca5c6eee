/*
gpudl_cuda.cu — the CUDA backend of gpudl: every kernel of `struct gdl_backend`
(see the [backend] section of gpudl.h), the cuBLAS GEMM path, and a caching
device allocator.

Build: one .c file of the program defines GPUDL_IMPLEMENTATION and includes
gpudl.h; this file includes gpudl.h for the declarations only and is compiled
as CUDA C++ (gpudl.h wraps its declarations in extern "C"):

    nvcc -O3 -arch=sm_90 -DGPUDL_CUDA examples/x.c gpudl_cuda.cu -lcublas -o x

The CPU backend in gpudl.h (functions gdl__cpu_*) is the reference: each
kernel here computes what its CPU twin computes, in float (the CPU
accumulates some sums in double, so results agree to rounding). Backward
kernels accumulate (+=) into their outputs, as on the CPU.

Choices that matter for reproducibility:
- no floating-point atomics except in embedding_backward (the CPU order is
  kept by gathering instead: col2im, pooling backward, sum_to, layernorm's
  gamma/beta gradients), so a run gives the same bits every time;
- reductions over long rows use block reductions with a fixed block size
  for a given shape, so they are deterministic too;
- all work goes to the legacy default stream, in order, which is what makes
  handing a freed block to the next request safe without synchronising.

Every CUDA runtime and cuBLAS call is checked; a failure sets gdl_last_error()
to "gdl_cuda: <what> at <file>:<line> (<call>)" and the function returns -1
or NULL. Nothing here calls exit().
*/

#ifdef GPUDL_DOUBLE
#error "gpudl_cuda.cu: the CUDA backend computes in float; build without GPUDL_DOUBLE"
#endif
#ifndef GPUDL_CUDA
#define GPUDL_CUDA /* the declarations of gdl_cuda_* in gpudl.h need it */
#endif

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>

#include "gpudl.h"

// ----------------------------------------------------------------------------
// error checking

static void gdl__cu_report(const char *what, const char *file, int line, const char *call) {
    gdl__set_error("gdl_cuda: %s at %s:%d (%s)", what, file, line, call);
}

// On failure: record the message, clear the (non-sticky) error state so the
// next call does not report it again, and return `fail` (-1 or NULL; empty in
// a void function).
#define GDL_CU_TRY(call, fail)                                                       \
    do {                                                                             \
        cudaError_t e_ = (call);                                                     \
        if (e_ != cudaSuccess) {                                                     \
            gdl__cu_report(cudaGetErrorString(e_), __FILE__, __LINE__, #call);       \
            (void)cudaGetLastError();                                                \
            return fail;                                                             \
        }                                                                            \
    } while (0)

#define GDL_CUBLAS_TRY(call, fail)                                                   \
    do {                                                                             \
        cublasStatus_t s_ = (call);                                                  \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                           \
            gdl__cu_report(cublasGetStatusString(s_), __FILE__, __LINE__, #call);    \
            return fail;                                                             \
        }                                                                            \
    } while (0)

// After a kernel launch: a bad configuration shows up here; a fault inside
// the kernel shows up at the next synchronising call.
#define GDL_CU_LAUNCHED() GDL_CU_TRY(cudaGetLastError(), -1)

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
    size_t reserved_dev[GDL__CU_MAX_DEVICES];
    size_t allocated, max_allocated, reserved;
    cublasHandle_t blas[GDL__CU_MAX_DEVICES];
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
            p->reserved_dev[i] = 0;
            p->blas[i] = NULL;
            p->have_prop[i] = 0;
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
        S.reserved_dev[dev] -= it->first;
    }
    S.cache[dev].clear();
}

static void *gdl__cu_alloc(size_t bytes) {
    gdl__cu_state &S = gdl__cu();
    int dev;
    size_t size;
    void *p = NULL;
    if (gdl__cu_current(&dev) < 0) return NULL;
    if (bytes == 0) bytes = 1;
    size = (bytes + GDL__CU_GRANULE - 1) / GDL__CU_GRANULE * GDL__CU_GRANULE;
    if (size < bytes) {
        gdl__set_error("gdl_cuda: allocation of %.0f bytes is too large", (double)bytes);
        return NULL;
    }
    std::lock_guard<std::mutex> lock(S.mu);
    auto it = S.cache[dev].lower_bound(size);
    if (it != S.cache[dev].end() && it->first / 2 <= size) {
        p = it->second;
        size = it->first;
        S.cache[dev].erase(it);
    } else {
        cudaError_t e = cudaMalloc(&p, size);
        if (e == cudaErrorMemoryAllocation) { /* give the cache back to the driver, try once more */
            (void)cudaGetLastError();
            gdl__cu_release_device_locked(S, dev);
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
        S.reserved_dev[dev] += size;
    }
    gdl__cu_block b;
    b.size = size;
    b.device = dev;
    S.live[p] = b;
    S.allocated += size;
    if (S.allocated > S.max_allocated) S.max_allocated = S.allocated;
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
    S.allocated -= it->second.size;
    S.cache[it->second.device].insert(std::make_pair(it->second.size, p));
    S.live.erase(it);
}

void gdl_cuda_release_cache(void) {
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
}

// ----------------------------------------------------------------------------
// devices

int gdl_cuda_runtime_device_count(void) {
    // Asked before every op (gdl__be), so asked of the driver once. With no
    // driver or no GPU, cudaGetDeviceCount fails: that means 0 devices, and
    // the error is cleared so that it cannot surface later.
    static std::atomic<int> cached(-1);
    int n = cached.load();
    if (n >= 0) return n;
    n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    if (n > GDL__CU_MAX_DEVICES) n = GDL__CU_MAX_DEVICES;
    cached.store(n);
    return n;
}

static int gdl__cu_check_index(const char *fn, int index) {
    int n = gdl_cuda_runtime_device_count();
    if (index < 0 || index >= n) {
        gdl__set_error("%s: no CUDA device %d (%d available)", fn, index, n);
        return -1;
    }
    return 0;
}

int gdl_cuda_set_device(int index) {
    if (gdl__cu_check_index("gdl_cuda_set_device", index) < 0) return -1;
    GDL_CU_TRY(cudaSetDevice(index), -1);
    return 0;
}

int gdl_cuda_device_info(int index, char *name, size_t name_len, size_t *total_mem, size_t *free_mem,
                         int *cc_major, int *cc_minor, int *sm_count, int *clock_khz) {
    gdl__cu_state &S = gdl__cu();
    cudaDeviceProp prop;
    if (gdl__cu_check_index("gdl_cuda_device_info", index) < 0) return -1;
    {
        // the properties do not change: ask once (gdl_device_name calls this often)
        std::lock_guard<std::mutex> lock(S.mu);
        if (!S.have_prop[index]) {
            GDL_CU_TRY(cudaGetDeviceProperties(&S.prop[index], index), -1);
            S.have_prop[index] = 1;
        }
        prop = S.prop[index];
    }
    if (name && name_len) {
        strncpy(name, prop.name, name_len - 1);
        name[name_len - 1] = 0;
    }
    if (total_mem) *total_mem = prop.totalGlobalMem;
    if (cc_major) *cc_major = prop.major;
    if (cc_minor) *cc_minor = prop.minor;
    if (sm_count) *sm_count = prop.multiProcessorCount;
    if (clock_khz) {
        // cudaDeviceProp.clockRate is gone in CUDA 13; the attribute stays
        int v = 0;
        GDL_CU_TRY(cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, index), -1);
        *clock_khz = v;
    }
    if (free_mem) {
        // cudaMemGetInfo answers for the current device
        int cur = 0;
        size_t fr = 0, tot = 0;
        GDL_CU_TRY(cudaGetDevice(&cur), -1);
        if (cur != index) GDL_CU_TRY(cudaSetDevice(index), -1);
        cudaError_t e = cudaMemGetInfo(&fr, &tot);
        if (cur != index) GDL_CU_TRY(cudaSetDevice(cur), -1);
        GDL_CU_TRY(e, -1);
        *free_mem = fr;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// cuBLAS handles: one per device, made on first use

void gdl_cuda_set_tf32(int on) {
    gdl__cu_state &S = gdl__cu();
    std::lock_guard<std::mutex> lock(S.mu);
    S.tf32 = on != 0;
    for (int d = 0; d < GDL__CU_MAX_DEVICES; d++)
        if (S.blas[d])
            GDL_CUBLAS_TRY(cublasSetMathMode(S.blas[d], S.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), );
}

static cublasHandle_t gdl__cu_blas(void) {
    gdl__cu_state &S = gdl__cu();
    int dev;
    if (gdl__cu_current(&dev) < 0) return NULL;
    std::lock_guard<std::mutex> lock(S.mu);
    if (!S.blas[dev]) {
        cublasHandle_t h;
        GDL_CUBLAS_TRY(cublasCreate(&h), NULL);
        // PyTorch's default: full fp32 matmuls unless TF32 is asked for
        cublasStatus_t st = cublasSetMathMode(h, S.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
        if (st != CUBLAS_STATUS_SUCCESS) {
            cublasDestroy(h);
            GDL_CUBLAS_TRY(st, NULL);
        }
        S.blas[dev] = h;
    }
    return S.blas[dev];
}

// ----------------------------------------------------------------------------
// pinned memory and streams (for the data loader)

void *gdl_cuda_host_alloc(size_t bytes) {
    void *p = NULL;
    GDL_CU_TRY(cudaMallocHost(&p, bytes ? bytes : 1), NULL);
    return p;
}

void gdl_cuda_host_free(void *p) {
    if (p) GDL_CU_TRY(cudaFreeHost(p), );
}

void *gdl_cuda_stream_create(void) {
    cudaStream_t s;
    // non-blocking: copies on it overlap the kernels on the legacy stream
    GDL_CU_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), NULL);
    return (void *)s;
}

void gdl_cuda_stream_destroy(void *stream) {
    if (stream) GDL_CU_TRY(cudaStreamDestroy((cudaStream_t)stream), );
}

int gdl_cuda_copy_h2d_async(void *dst, const void *src, size_t bytes, void *stream) {
    if (!bytes) return 0;
    GDL_CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream), -1);
    return 0;
}

int gdl_cuda_stream_synchronize(void *stream) {
    GDL_CU_TRY(cudaStreamSynchronize((cudaStream_t)stream), -1);
    return 0;
}

// ----------------------------------------------------------------------------
// kernel helpers

#define GDL__CU_THREADS 256

// grid-stride loop: correct for any grid size, so grids can be capped
#define GDL_CU_LOOP(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)blockDim.x * gridDim.x)

// the same over blocks: block b takes rows b, b + gridDim.x, ...
#define GDL_CU_ROWS(r, n) for (int64_t r = blockIdx.x; r < (n); r += gridDim.x)

static unsigned gdl__cu_grid(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b > (1 << 20)) b = 1 << 20;
    return (unsigned)(b < 1 ? 1 : b);
}
static unsigned gdl__cu_row_grid(int64_t rows) { return (unsigned)(rows < 1 ? 1 : rows > 65535 * 8 ? 65535 * 8 : rows); }

// threads for one block per row of n elements: a multiple of 32, not more
// than the row needs, at most 512
static int gdl__cu_row_threads(int64_t n) {
    int t = 32;
    while (t < n && t < 512) t *= 2;
    return t;
}

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

// Sum over the block (blockDim.x a multiple of 32); every thread gets the
// result. The leading barrier lets a kernel call it repeatedly. The order of
// additions depends only on blockDim, so results are reproducible.
template <typename T> __device__ T gdl__block_sum(T v) {
    __shared__ T sh[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = gdl__warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (T)0;
    return gdl__warp_sum(v);
}

// max ignoring NaN (fmaxf), as the CPU's "if (v > mx) mx = v"
__device__ float gdl__block_max(float v) {
    __shared__ float sh[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = gdl__warp_max(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -GDL__CU_INF;
    return gdl__warp_max(v);
}

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

// ----------------------------------------------------------------------------
// memory, copies, fill, cast

static int gdl__cu_copy(void *dst, const void *src, size_t bytes, int kind) {
    if (!bytes || dst == src) return 0;
    if (kind == 0) GDL_CU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), -1);
    else if (kind == 1) GDL_CU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), -1);
    else GDL_CU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), -1);
    return 0;
}

static int gdl__cu_memset0(void *p, size_t bytes) {
    if (!bytes) return 0;
    GDL_CU_TRY(cudaMemsetAsync(p, 0, bytes, 0), -1);
    return 0;
}

static int gdl__cu_sync(void) {
    GDL_CU_TRY(cudaDeviceSynchronize(), -1);
    return 0;
}

__global__ void gdl__k_fill(float *x, int64_t n, float v) {
    GDL_CU_LOOP(i, n) x[i] = v;
}

static int gdl__cu_fill(float *x, int64_t n, float v) {
    if (n <= 0) return 0;
    gdl__k_fill<<<gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS>>>(x, n, v);
    GDL_CU_LAUNCHED();
    return 0;
}

// Half conversions round to nearest even (cuda_fp16.h / cuda_bf16.h); NaNs
// are produced bit for bit as gpudl.h's gdl_f32_to_f16 / gdl_f32_to_bf16 do.
__device__ __forceinline__ float gdl__f16_to_f32(uint16_t h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) /* NaN: keep the payload */
        return __uint_as_float(((uint32_t)(h & 0x8000u) << 16) | 0x7f800000u | ((uint32_t)(h & 0x3ffu) << 13));
    return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ uint16_t gdl__f32_to_f16(float f) {
    if (f != f) return (uint16_t)(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u);
    return __half_as_ushort(__float2half_rn(f));
}
__device__ __forceinline__ float gdl__bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ uint16_t gdl__f32_to_bf16(float f) {
    if (f != f) return (uint16_t)((__float_as_uint(f) >> 16) | 0x40u);
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

// One kernel for all 20 dtype pairs: the switches are uniform across the
// grid, so they cost nothing next to the memory traffic. Integers convert
// exactly; float -> int truncates toward zero as C does (u8 via int32, as
// x86 does for the C cast).
__global__ void gdl__k_cast(void *dst, int dt, const void *src, int st, int64_t n) {
    GDL_CU_LOOP(i, n) {
        int32_t iv = 0;
        float fv = 0;
        bool is_int = false;
        switch (st) {
        case GDL_F32: fv = ((const float *)src)[i]; break;
        case GDL_I32: iv = ((const int32_t *)src)[i]; is_int = true; break;
        case GDL_U8: iv = ((const uint8_t *)src)[i]; is_int = true; break;
        case GDL_F16: fv = gdl__f16_to_f32(((const uint16_t *)src)[i]); break;
        default: fv = gdl__bf16_to_f32(((const uint16_t *)src)[i]); break;
        }
        if (is_int) fv = (float)iv;
        switch (dt) {
        case GDL_F32: ((float *)dst)[i] = fv; break;
        case GDL_I32: ((int32_t *)dst)[i] = is_int ? iv : (int32_t)fv; break;
        case GDL_U8: ((uint8_t *)dst)[i] = (uint8_t)(is_int ? iv : (int32_t)fv); break;
        case GDL_F16: ((uint16_t *)dst)[i] = gdl__f32_to_f16(fv); break;
        default: ((uint16_t *)dst)[i] = gdl__f32_to_bf16(fv); break;
        }
    }
}

static int gdl__cu_cast(void *dst, gdl_dtype dt, const void *src, gdl_dtype st, int64_t n) {
    if ((unsigned)dt >= GDL_DTYPE_COUNT || (unsigned)st >= GDL_DTYPE_COUNT) {
        gdl__set_error("gdl_cuda: cast between invalid dtypes %d and %d", (int)st, (int)dt);
        return -1;
    }
    if (n <= 0) return 0;
    if (dt == st) return gdl__cu_copy(dst, src, (size_t)n * gdl_dtype_size(dt), 2);
    gdl__k_cast<<<gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS>>>(dst, (int)dt, src, (int)st, n);
    GDL_CU_LAUNCHED();
    return 0;
}

// ----------------------------------------------------------------------------
// GEMM through cuBLAS
//
// cuBLAS is column-major. A row-major matrix read as column-major is its
// transpose, so row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ:
// call cuBLAS with the operands swapped (B first, N and M swapped) and the
// transpose flags kept.

// C = beta*C over M x N (ldc), for K == 0 where cuBLAS would reject lda
__global__ void gdl__k_scale2d(float *C, int M, int N, int ldc, int64_t sC, int batch, float beta) {
    GDL_CU_LOOP(t, (int64_t)batch * M * N) {
        int64_t b = t / ((int64_t)M * N), r = t % ((int64_t)M * N);
        float *c = C + b * sC + (r / N) * ldc + r % N;
        *c = beta == 0 ? 0.0f : beta * *c;
    }
}

static int gdl__cu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, int64_t sA,
                        const float *B, int ldb, int64_t sB, float beta, float *C, int ldc, int64_t sC, int batch) {
    if (M <= 0 || N <= 0 || batch <= 0) return 0;
    if (K <= 0) {
        int64_t total = (int64_t)batch * M * N;
        gdl__k_scale2d<<<gdl__cu_grid(total, GDL__CU_THREADS), GDL__CU_THREADS>>>(C, M, N, ldc, sC, batch, beta);
        GDL_CU_LAUNCHED();
        return 0;
    }
    cublasHandle_t h = gdl__cu_blas();
    if (!h) return -1;
    cublasOperation_t opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLAS's first operand: our B */
    cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1 || sC == 0) {
        // sC == 0 with several batches accumulates into one C: run them in
        // order, as the CPU does, instead of racing inside one batched call
        for (int b = 0; b < batch; b++)
            GDL_CUBLAS_TRY(cublasSgemm(h, opB, opA, N, M, K, &alpha, B + b * sB, ldb, A + b * sA, lda, &beta,
                                       C + b * sC, ldc),
                           -1);
    } else {
        GDL_CUBLAS_TRY(cublasSgemmStridedBatched(h, opB, opA, N, M, K, &alpha, B, ldb, (long long)sB, A, lda,
                                                 (long long)sA, &beta, C, ldc, (long long)sC, batch),
                       -1);
    }
    return 0;
}
