/*
gpudl_cuda.cu — the CUDA backend of gpudl: every kernel of `struct gdl_backend`
(see the src/api/backend.h section of gpudl.h), the cuBLAS GEMM path, and a caching
device allocator.

Build: one .c file of the program defines GPUDL_IMPLEMENTATION and includes
gpudl.h; this file includes gpudl.h for the declarations only and is compiled
as CUDA C++ (gpudl.h wraps its declarations in extern "C"):

    nvcc -O3 -arch=sm_90 -DGPUDL_CUDA examples/x.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl -o x

(-DGPUDL_NO_NCCL builds without NCCL: CUDA tensors then have no collectives.)

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
- all work of a device (kernels, cuBLAS, copies, memsets) goes to one
  non-blocking compute stream of that device, in order, which is what makes
  handing a freed block to the next request safe without synchronising. The
  legacy default stream is not used: it cannot be captured into a CUDA graph
  and it would serialise against every other stream.

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
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef GPUDL_NO_NCCL
#include <nccl.h>
#endif
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gpudl.h"

// ----------------------------------------------------------------------------
// error checking

// names the gpudl op that chose this backend last (gdl_linear, gdl_backward, gdl_step ...)
static void gdl__cu_report(const char *what, const char *file, int line, const char *call) {
    gdl__set_error("gdl_cuda: %s in %s at %s:%d (%s)", what, gdl__backend_op(), file, line, call);
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
            (void)cudaGetLastError(); /* a failed launch inside cuBLAS */            \
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

// cuBLAS's workspace per handle, as PyTorch sizes it: 32 MiB on Hopper and
// later, 4 MiB before. Given by us, cuBLAS allocates nothing inside a call,
// which stream capture requires.
static size_t gdl__cu_blas_ws_bytes(int dev) {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        major = 0;
    }
    return (size_t)(major >= 9 ? 32 : 4) << 20;
}

// The current device's handle, bound to its compute stream and workspace.
static cublasHandle_t gdl__cu_blas(void) {
    gdl__cu_state &S = gdl__cu();
    int dev;
    if (gdl__cu_current(&dev) < 0) return NULL;
    cudaStream_t st = gdl__cu_stream(); /* before the lock: it takes it too */
    std::lock_guard<std::mutex> lock(S.mu);
    if (!S.blas[dev]) {
        cublasHandle_t h;
        size_t wsb = gdl__cu_blas_ws_bytes(dev);
        void *ws = NULL;
        GDL_CU_TRY(cudaMalloc(&ws, wsb), NULL);
        cublasStatus_t st2 = cublasCreate(&h);
        // PyTorch's default: full fp32 matmuls unless TF32 is asked for
        if (st2 == CUBLAS_STATUS_SUCCESS) {
            st2 = cublasSetMathMode(h, S.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
            if (st2 == CUBLAS_STATUS_SUCCESS) st2 = cublasSetStream(h, st);
            if (st2 == CUBLAS_STATUS_SUCCESS) st2 = cublasSetWorkspace(h, ws, wsb);
            if (st2 != CUBLAS_STATUS_SUCCESS) cublasDestroy(h);
        }
        if (st2 != CUBLAS_STATUS_SUCCESS) {
            if (cudaFree(ws) != cudaSuccess) (void)cudaGetLastError();
            GDL_CUBLAS_TRY(st2, NULL);
        }
        S.blas[dev] = h;
        S.blas_ws[dev] = ws;
    }
    return S.blas[dev];
}

// ----------------------------------------------------------------------------
// pinned memory, streams and events (the data loader orders its copies with
// them); a NULL stream is the current device's compute stream

static cudaStream_t gdl__cu_resolve(void *stream) { return stream ? (cudaStream_t)stream : gdl__cu_stream(); }

static void *gdl__cu_host_alloc(size_t bytes) {
    void *p = NULL;
    GDL_CU_TRY(cudaMallocHost(&p, bytes ? bytes : 1), NULL);
    return p;
}

static void gdl__cu_host_free(void *p) {
    if (p) GDL_CU_TRY(cudaFreeHost(p), );
}

// gdl__cu_NAME_create / gdl__cu_NAME_destroy: a handle of TYPE made by CREATE(&h, FLAGS) and released by
// DESTROY (a NULL handle: nothing to release)
#define GDL__CU_HANDLE(NAME, TYPE, CREATE, FLAGS, DESTROY) \
    static void *gdl__cu_##NAME##_create(void) {          \
        TYPE h;                                           \
        GDL_CU_TRY(CREATE(&h, FLAGS), NULL);              \
        return (void *)h;                                 \
    }                                                     \
    static void gdl__cu_##NAME##_destroy(void *h) {       \
        if (h) GDL_CU_TRY(DESTROY((TYPE)h), );            \
    }
// streams non-blocking: copies on one overlap the kernels on the compute stream; events without timing
GDL__CU_HANDLE(stream, cudaStream_t, cudaStreamCreateWithFlags, cudaStreamNonBlocking, cudaStreamDestroy)
GDL__CU_HANDLE(event, cudaEvent_t, cudaEventCreateWithFlags, cudaEventDisableTiming, cudaEventDestroy)
#undef GDL__CU_HANDLE

static int gdl__cu_copy_async(void *dst, const void *src, size_t bytes, int kind, void *stream) {
    static const cudaMemcpyKind kinds[3] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice};
    if (!bytes) return 0;
    GDL_CU_TRY(cudaMemcpyAsync(dst, src, bytes, kinds[kind], gdl__cu_resolve(stream)), -1);
    return 0;
}

static int gdl__cu_event_record(void *event, void *stream) {
    GDL_CU_TRY(cudaEventRecord((cudaEvent_t)event, gdl__cu_resolve(stream)), -1);
    return 0;
}

static int gdl__cu_stream_wait_event(void *stream, void *event) {
    GDL_CU_TRY(cudaStreamWaitEvent(gdl__cu_resolve(stream), (cudaEvent_t)event, 0), -1);
    return 0;
}

// A wait only if the event is not reached yet: in a steady state the copy a
// slot waits for finished long ago, and asking costs no synchronisation.
static int gdl__cu_event_synchronize(void *event) {
    cudaError_t q = cudaEventQuery((cudaEvent_t)event);
    if (q == cudaSuccess) return 0;
    if (q != cudaErrorNotReady) GDL_CU_TRY(q, -1);
    (void)cudaGetLastError(); /* cudaErrorNotReady is not an error */
    gdl__count_sync();
    GDL_CU_TRY(cudaEventSynchronize((cudaEvent_t)event), -1);
    return 0;
}

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

// ----------------------------------------------------------------------------
// memory, copies, fill, cast

// Copies go to the compute stream, behind the kernels that produce or
// consume their device side. A copy to the host returns once the bytes are
// there; a copy from the host returns once the host buffer may be reused
// (the caller's array may be pinned, when cudaMemcpyAsync would not wait);
// a device-to-device copy and a memset return at once.
static int gdl__cu_copy(void *dst, const void *src, size_t bytes, int kind) {
    if (!bytes || dst == src) return 0;
    cudaStream_t st = gdl__cu_stream();
    if (kind == 0 || kind == 1) {
        GDL_CU_TRY(cudaMemcpyAsync(dst, src, bytes, kind == 0 ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, st),
                   -1);
        gdl__count_sync();
        GDL_CU_TRY(cudaStreamSynchronize(st), -1);
    } else {
        // The CPU copy is a memmove; cudaMemcpy's areas must not overlap (two
        // views of one tensor, gdl_copy_ between overlapping slices): go
        // through a scratch block then
        uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
        if (d < s + bytes && s < d + bytes) {
            void *tmp = gdl__cu_alloc(bytes);
            if (!tmp) return -1;
            cudaError_t e = cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, st);
            if (e == cudaSuccess) e = cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, st);
            gdl__cu_free(tmp); /* stream order: the copies are queued before any reuse */
            GDL_CU_TRY(e, -1);
            return 0;
        }
        GDL_CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st), -1);
    }
    return 0;
}

static int gdl__cu_memset0(void *p, size_t bytes) {
    if (!bytes) return 0;
    GDL_CU_TRY(cudaMemsetAsync(p, 0, bytes, gdl__cu_stream()), -1);
    return 0;
}

static int gdl__cu_synchronize(void) {
    gdl__count_sync();
    GDL_CU_TRY(cudaDeviceSynchronize(), -1);
    return 0;
}

__global__ void gdl__k_fill(float *x, int64_t n, float v) {
    GDL_CU_LOOP(i, n) x[i] = v;
}

static int gdl__cu_fill(float *x, int64_t n, float v) {
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_fill, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(x, n, v);
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

// Loads and stores of the kernels templated on the storage type T: float,
// __half or __nv_bfloat16 (the entries that take a dtype). The arithmetic
// is f32 whatever T is; for float both are the identity, so the f32
// instantiations compute exactly what the f32-only kernels did.
__device__ __forceinline__ float gdl__ld(float v) { return v; }
__device__ __forceinline__ float gdl__ld(__half v) { return gdl__f16_to_f32(__half_as_ushort(v)); }
__device__ __forceinline__ float gdl__ld(__nv_bfloat16 v) { return gdl__bf16_to_f32(__bfloat16_as_ushort(v)); }
template <typename T> __device__ __forceinline__ T gdl__st(float f);
template <> __device__ __forceinline__ float gdl__st<float>(float f) { return f; }
template <> __device__ __forceinline__ __half gdl__st<__half>(float f) { return __ushort_as_half(gdl__f32_to_f16(f)); }
template <> __device__ __forceinline__ __nv_bfloat16 gdl__st<__nv_bfloat16>(float f) {
    return __ushort_as_bfloat16(gdl__f32_to_bf16(f));
}

// The one place a runtime dtype becomes a storage type: calls
// f(gdl__cu_tag<T>()) with T = __half for f16, __nv_bfloat16 for bf16 and,
// when f32_too, float for f32; any other dtype is an error naming `what`.
// Each op is one kernel template and one launcher template (gdl__cu_X_t<T>);
// for f32 the entry calls gdl__cu_NAME_f32 (the launcher with float), else it
// dispatches:
//   return gdl__cu_dispatch("unary", dt, 0, [&](auto t) {
//       typedef typename decltype(t)::type T;
//       return gdl__cu_unary_t<T>(op, n, (const T *)x, (T *)y, alpha);
//   });
template <typename T> struct gdl__cu_tag {
    typedef T type;
};
static int gdl__cu_dtype_check(const char *what, gdl_dtype dt, int f32_too) {
    if (dt == GDL_F16 || dt == GDL_BF16 || (f32_too && dt == GDL_F32)) return 0;
    gdl__set_error("gdl_cuda: the low-precision %s takes %sf16 or bf16, not %s", what, f32_too ? "f32, " : "",
                   gdl_dtype_name(dt));
    return -1;
}
template <typename F> static int gdl__cu_dispatch(const char *what, gdl_dtype dt, int f32_too, F &&f) {
    if (gdl__cu_dtype_check(what, dt, f32_too) < 0) return -1;
    return dt == GDL_F16 ? f(gdl__cu_tag<__half>()) : dt == GDL_BF16 ? f(gdl__cu_tag<__nv_bfloat16>()) : f(gdl__cu_tag<float>());
}

// Conversions to the integer dtypes, as gpudl.h's gdl__store: truncate
// toward zero and saturate to the destination's range; NaN gives 0. (The
// float bounds are exact: 2^31 and -2^31 are floats, and no float lies
// strictly between 2^31 - 1 and 2^31.)
__device__ __forceinline__ int32_t gdl__to_i32(float v) {
    return v != v ? 0 : v >= 2147483648.0f ? INT32_MAX : v <= -2147483648.0f ? INT32_MIN : (int32_t)v;
}
__device__ __forceinline__ uint8_t gdl__to_u8(float v) {
    return v != v ? 0 : v >= 255.0f ? (uint8_t)255 : v <= 0.0f ? (uint8_t)0 : (uint8_t)v;
}

// One kernel for all 20 dtype pairs: the switches are uniform across the
// grid, so they cost nothing next to the memory traffic. Integers convert
// exactly to float and i32; float -> int and i32 -> u8 truncate toward zero
// and saturate, as on the CPU.
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
        case GDL_I32: ((int32_t *)dst)[i] = is_int ? iv : gdl__to_i32(fv); break;
        case GDL_U8: ((uint8_t *)dst)[i] = is_int ? (uint8_t)(iv < 0 ? 0 : iv > 255 ? 255 : iv) : gdl__to_u8(fv); break;
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
    GDL_CU_LAUNCH(gdl__k_cast, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(dst, (int)dt, src, (int)st, n);
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

// C = beta*C over M x N (ldc), for K == 0 where cuBLAS would reject lda.
// sC == 0: every batch scales the one C in turn, as the CPU's loop does, so
// one thread owns each element and applies beta `reps` times (no two threads
// may read-modify-write the same element). A 16-bit C is scaled in f32 and
// rounded once.
template <typename T>
__global__ void gdl__k_scale2d(T *C, int M, int N, int ldc, int64_t sC, int64_t nb, int reps, float beta) {
    GDL_CU_LOOP(t, nb * M * N) {
        int64_t b = t / ((int64_t)M * N), r = t % ((int64_t)M * N);
        T *c = C + b * sC + (r / N) * ldc + r % N;
        float v = gdl__ld(*c);
        for (int k = 0; k < reps; k++) v = beta == 0 ? 0.0f : beta * v;
        *c = gdl__st<T>(v);
    }
}

template <typename T>
static int gdl__cu_scale2d_t(T *C, int M, int N, int ldc, int64_t sC, int batch, float beta) {
    int64_t nb = sC == 0 ? 1 : batch, total = nb * M * N;
    GDL_CU_LAUNCH(gdl__k_scale2d<T>, gdl__cu_grid(total, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        C, M, N, ldc, sC, nb, sC == 0 ? batch : 1, beta);
    GDL_CU_LAUNCHED();
    return 0;
}

// a GEMM whose batches all sum into one C (sC == 0), in chunks (below): 1 done, 0 not taken, -1 error
static int gdl__cu_gemm_sum(gdl_dtype dt, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
                            int64_t sA, const void *B, int ldb, int64_t sB, float beta, void *C, int ldc, int batch);

static int gdl__cu_gemm_f32(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, int64_t sA,
                        const float *B, int ldb, int64_t sB, float beta, float *C, int ldc, int64_t sC, int batch) {
    if (M <= 0 || N <= 0 || batch <= 0) return 0;
    if (K <= 0) return gdl__cu_scale2d_t<float>(C, M, N, ldc, sC, batch, beta);
    cublasHandle_t h = gdl__cu_blas();
    if (!h) return -1;
    cublasOperation_t opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLAS's first operand: our B */
    cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (sC == 0 && batch > 1) { /* one C for every batch: summed in chunks, not raced on by one batched call */
        int r = gdl__cu_gemm_sum(GDL_F32, ta, tb, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, batch);
        if (r != 0) return r < 0 ? -1 : 0;
    }
    if (batch == 1 || sC == 0) {
        // what gdl__cu_gemm_sum leaves (a product too large to chunk): the
        // batches in order, as the CPU does
        for (int b = 0; b < batch; b++) {
            gdl__cu_launches.fetch_add(1, std::memory_order_relaxed); /* cuBLAS: counted as one kernel */
            GDL_CUBLAS_TRY(cublasSgemm(h, opB, opA, N, M, K, &alpha, B + b * sB, ldb, A + b * sA, lda, &beta,
                                       C + b * sC, ldc),
                           -1);
        }
    } else {
        gdl__cu_launches.fetch_add(1, std::memory_order_relaxed);
        GDL_CUBLAS_TRY(cublasSgemmStridedBatched(h, opB, opA, N, M, K, &alpha, B, ldb, (long long)sB, A, lda,
                                                 (long long)sA, &beta, C, ldc, (long long)sC, batch),
                       -1);
    }
    return 0;
}

// the GEMM entry: f32 runs gdl__cu_gemm_f32; f16 / bf16 operands and C,
// f32 accumulation (CUBLAS_COMPUTE_32F), alpha and beta as floats; C is
// formed in f32 and rounded once. K == 0 scales C by beta in a kernel, as
// gdl__cu_gemm_f32 does.
static int gdl__cu_gemm(gdl_dtype dt, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
                        int64_t sA, const void *B, int ldb, int64_t sB, float beta, void *C, int ldc, int64_t sC,
                        int batch) {
    if (dt == GDL_F32)
        return gdl__cu_gemm_f32(ta, tb, M, N, K, alpha, (const float *)A, lda, sA, (const float *)B, ldb, sB, beta,
                                (float *)C, ldc, sC, batch);
    if (gdl__cu_dtype_check("GEMM", dt, 0) < 0) return -1;
    if (M <= 0 || N <= 0 || batch <= 0) return 0;
    if (K <= 0)
        return gdl__cu_dispatch("GEMM", dt, 0, [&](auto t) {
            typedef typename decltype(t)::type T;
            return gdl__cu_scale2d_t<T>((T *)C, M, N, ldc, sC, batch, beta);
        });
    cublasHandle_t h = gdl__cu_blas();
    if (!h) return -1;
    cudaDataType t = dt == GDL_F16 ? CUDA_R_16F : CUDA_R_16BF;
    size_t es = 2;
    cublasOperation_t opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* swapped operands: see gdl__cu_gemm */
    cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (sC == 0 && batch > 1) { /* f32 sums of the chunk's products, C rounded once a chunk */
        int r = gdl__cu_gemm_sum(dt, ta, tb, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, batch);
        if (r != 0) return r < 0 ? -1 : 0;
    }
    if (batch == 1 || sC == 0) {
        for (int b = 0; b < batch; b++) {
            gdl__cu_launches.fetch_add(1, std::memory_order_relaxed);
            GDL_CUBLAS_TRY(cublasGemmEx(h, opB, opA, N, M, K, &alpha, (const char *)B + b * sB * es, t, ldb,
                                        (const char *)A + b * sA * es, t, lda, &beta, (char *)C + b * sC * es, t, ldc,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           -1);
        }
    } else {
        gdl__cu_launches.fetch_add(1, std::memory_order_relaxed);
        GDL_CUBLAS_TRY(cublasGemmStridedBatchedEx(h, opB, opA, N, M, K, &alpha, B, t, ldb, (long long)sB, A, t, lda,
                                                  (long long)sA, &beta, C, t, ldc, (long long)sC, batch,
                                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       -1);
    }
    return 0;
}

// ----------------------------------------------------------------------------
// the batch-summing GEMM (f32 and the low-precision GEMM's)

// A GEMM whose batches all sum into one C (sC == 0: the weight
// gradient of a convolution, a broadcast operand's gradient)
// One call per sample would be `batch` launches (1024 per conv layer at
// batch 1024), and one strided-batched call would race on C. Instead a
// chunk of the products goes into an f32 workspace with one batched call
// (beta 0), and one kernel folds them into C in batch order with the
// per-sample calls' recurrence c = P_b + beta*c, in f32: two launches a
// chunk, and a low-precision C is rounded once a chunk instead of once a
// sample. The workspace is kept per device (a capture must not allocate;
// the eager step before it grows it). A graph recorded before it grew
// still writes into the smaller one, so that one is kept too, until
// gdl_cuda_release_cache gives them all back.
#define GDL__CU_FOLD_BYTES ((size_t)64 << 20)

template <typename T> __global__ void gdl__k_gemm_fold(T *C, int M, int N, int ldc, const float *W, int nb, float beta) {
    int64_t mn = (int64_t)M * N;
    GDL_CU_LOOP(t, mn) {
        int64_t i = (t / N) * ldc + t % N;
        float acc = beta == 0 ? 0.0f : gdl__ld(C[i]);
        for (int b = 0; b < nb; b++) acc = beta == 0 ? W[b * mn + t] : W[b * mn + t] + beta * acc;
        C[i] = gdl__st<T>(acc);
    }
}

struct gdl__cu_fold {
    void *ws;
    size_t bytes;
    std::vector<void *> retired; /* smaller ones it replaced, which recorded graphs may still use */
};
static gdl__cu_fold gdl__cu_folds[GDL__CU_MAX_DEVICES];

static void gdl__cu_fold_release(void) {
    for (int d = 0; d < GDL__CU_MAX_DEVICES; d++) {
        gdl__cu_fold &F = gdl__cu_folds[d];
        for (void *p : F.retired) gdl__cu_free(p); /* stream order: the folds queued before run first */
        F.retired.clear();
        gdl__cu_free(F.ws);
        F.ws = NULL;
        F.bytes = 0;
    }
}

static int gdl__cu_gemm_sum(gdl_dtype dt, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
                            int64_t sA, const void *B, int ldb, int64_t sB, float beta, void *C, int ldc, int batch) {
    int64_t mn = (int64_t)M * N, chunk = (int64_t)(GDL__CU_FOLD_BYTES / (sizeof(float) * (size_t)mn));
    size_t es = dt == GDL_F32 ? sizeof(float) : 2, need;
    float zero = 0;
    int dev;
    if (chunk > batch) chunk = batch;
    if (chunk < 2) return 0; /* one product fills the budget: a call per sample, no workspace */
    if (gdl__cu_current(&dev) < 0) return -1;
    need = sizeof(float) * (size_t)(chunk * mn);
    if (gdl__cu_folds[dev].bytes < need) {
        gdl__cu_fold &F = gdl__cu_folds[dev];
        void *p = gdl__cu_alloc(need); /* refused inside a capture, naming the op */
        if (!p) return -1;
        if (F.ws) {
            try {
                F.retired.push_back(F.ws);
            } catch (...) {
                gdl__cu_free(p);
                gdl__set_error("gdl_cuda: out of host memory for the GEMM's workspaces");
                return -1;
            }
        }
        F.ws = p;
        F.bytes = need;
    }
    cublasHandle_t h = gdl__cu_blas();
    if (!h) return -1;
    float *W = (float *)gdl__cu_folds[dev].ws;
    cublasOperation_t opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* swapped operands: see gdl__cu_gemm */
    cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType t = dt == GDL_F16 ? CUDA_R_16F : CUDA_R_16BF;
    for (int64_t b0 = 0; b0 < batch; b0 += chunk) {
        int nb = (int)(batch - b0 < chunk ? batch - b0 : chunk);
        const char *a = (const char *)A + b0 * sA * (int64_t)es, *b = (const char *)B + b0 * sB * (int64_t)es;
        gdl__cu_launches.fetch_add(1, std::memory_order_relaxed);
        if (dt == GDL_F32)
            GDL_CUBLAS_TRY(cublasSgemmStridedBatched(h, opB, opA, N, M, K, &alpha, (const float *)b, ldb, (long long)sB,
                                                     (const float *)a, lda, (long long)sA, &zero, W, N, (long long)mn, nb),
                           -1);
        else
            GDL_CUBLAS_TRY(cublasGemmStridedBatchedEx(h, opB, opA, N, M, K, &alpha, b, t, ldb, (long long)sB, a, t, lda,
                                                      (long long)sA, &zero, W, CUDA_R_32F, N, (long long)mn, nb,
                                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           -1);
        if (gdl__cu_dispatch("GEMM", dt, 1, [&](auto t) {
                typedef typename decltype(t)::type T;
                GDL_CU_LAUNCH(gdl__k_gemm_fold<T>, gdl__cu_grid(mn, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
                    (T *)C, M, N, ldc, W, nb, beta);
                GDL_CU_LAUNCHED();
                return 0;
            }) < 0)
            return -1;
    }
    return 1;
}
// ----------------------------------------------------------------------------
// elementwise: binary with broadcasting, sum_to, unary

// Shape and strides travel to the kernel by value. Before launch, size-1
// dims are dropped and neighbours that are contiguous in both inputs are
// merged, so [64,128] + [128] becomes 2 dims and [64,128] + [64,128] one.
struct gdl__cu_bshape {
    int nd;
    int64_t shape[GDL_MAX_DIMS], as[GDL_MAX_DIMS], bs[GDL_MAX_DIMS];
};

static void gdl__cu_coalesce(int ndim, const int64_t *shape, const int64_t *astr, const int64_t *bstr,
                             gdl__cu_bshape *g) {
    int k = 0; /* dims kept so far, innermost first, reversed below */
    int64_t sh[GDL_MAX_DIMS], as[GDL_MAX_DIMS], bs[GDL_MAX_DIMS];
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] == 1) continue;
        if (k > 0 && astr[d] == as[k - 1] * sh[k - 1] && bstr[d] == bs[k - 1] * sh[k - 1]) {
            sh[k - 1] *= shape[d]; /* merge into the inner neighbour */
            continue;
        }
        sh[k] = shape[d];
        as[k] = astr[d];
        bs[k] = bstr[d];
        k++;
    }
    g->nd = k;
    for (int i = 0; i < k; i++) {
        g->shape[i] = sh[k - 1 - i];
        g->as[i] = as[k - 1 - i];
        g->bs[i] = bs[k - 1 - i];
    }
}

// ND: the number of dims after coalescing (0: a scalar op), as a template
// argument so the index arithmetic unrolls. TA, TB, TO: the storage types of
// a, b and out, each float, __half or __nv_bfloat16 (any mix: the entry's
// operand dtypes); the operation is in f32 and out rounded once.
template <int ND, typename TA, typename TB, typename TO>
__global__ void gdl__k_binary(int op, gdl__cu_bshape g, int64_t n, const TA *a, const TB *b, TO *out) {
    GDL_CU_LOOP(i, n) {
        int64_t rem = i, oa = 0, ob = 0;
#pragma unroll
        for (int d = ND - 1; d >= 0; d--) {
            int64_t id = d ? rem % g.shape[d] : rem;
            rem = d ? rem / g.shape[d] : 0;
            oa += id * g.as[d];
            ob += id * g.bs[d];
        }
        out[i] = gdl__st<TO>(gdl_binary1_float((enum gdl_binary_op)op, gdl__ld(a[oa]), gdl__ld(b[ob])));
    }
}

// (through a pointer: the template's commas would split GDL_CU_LAUNCH's arguments)
template <int ND, typename TA, typename TB, typename TO>
static void gdl__cu_binary_nd(unsigned grid, int op, const gdl__cu_bshape &g, int64_t n, const TA *a, const TB *b,
                              TO *out) {
    void (*gdl__k_binary_nd)(int, gdl__cu_bshape, int64_t, const TA *, const TB *, TO *) = gdl__k_binary<ND, TA, TB, TO>;
    GDL_CU_LAUNCH(gdl__k_binary_nd, grid, GDL__CU_THREADS, 0, gdl__cu_stream())(op, g, n, a, b, out);
}

template <typename TA, typename TB, typename TO>
static int gdl__cu_binary_t(int op, int ndim, const int64_t *shape, const TA *a, const int64_t *astr, const TB *b,
                            const int64_t *bstr, TO *out) {
    int64_t n = 1;
    gdl__cu_bshape g;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (n <= 0) return 0;
    gdl__cu_coalesce(ndim, shape, astr, bstr, &g);
    unsigned grid = gdl__cu_grid(n, GDL__CU_THREADS);
    switch (g.nd) {
    case 0: gdl__cu_binary_nd<0>(grid, op, g, n, a, b, out); break;
    case 1: gdl__cu_binary_nd<1>(grid, op, g, n, a, b, out); break;
    case 2: gdl__cu_binary_nd<2>(grid, op, g, n, a, b, out); break;
    case 3: gdl__cu_binary_nd<3>(grid, op, g, n, a, b, out); break;
    case 4: gdl__cu_binary_nd<4>(grid, op, g, n, a, b, out); break;
    case 5: gdl__cu_binary_nd<5>(grid, op, g, n, a, b, out); break;
    default: gdl__cu_binary_nd<GDL_MAX_DIMS>(grid, op, g, n, a, b, out); break;
    }
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_binary_f32(int op, int ndim, const int64_t *shape, const float *a, const int64_t *astr,
                          const float *b, const int64_t *bstr, float *out) {
    return gdl__cu_binary_t(op, ndim, shape, a, astr, b, bstr, out);
}

static int gdl__cu_binary(int op, int ndim, const int64_t *shape, gdl_dtype at, const void *a, const int64_t *astr,
                          gdl_dtype bt, const void *b, const int64_t *bstr, gdl_dtype ot, void *out) {
    if (at == GDL_F32 && bt == GDL_F32 && ot == GDL_F32)
        return gdl__cu_binary_f32(op, ndim, shape, (const float *)a, astr, (const float *)b, bstr, (float *)out);
    return gdl__cu_dispatch("binary", at, 1, [&](auto ta) {
        return gdl__cu_dispatch("binary", bt, 1, [&](auto tb) {
            return gdl__cu_dispatch("binary", ot, 1, [&](auto to) {
                typedef typename decltype(ta)::type TA;
                typedef typename decltype(tb)::type TB;
                typedef typename decltype(to)::type TO;
                return gdl__cu_binary_t(op, ndim, shape, (const TA *)a, astr, (const TB *)b, bstr, (TO *)out);
            });
        });
    });
}

// sum_to: dst[i·dstr] += alpha*src[i]. A dim is "reduced" when dst does not
// move along it (dstr 0, size > 1); the others are "kept". Each destination
// element is owned by one thread (or one block), which loops over the source
// elements that map to it: no atomics, the same bits every run.
struct gdl__cu_sumto {
    int nk, nr;
    int64_t kshape[GDL_MAX_DIMS], kdst[GDL_MAX_DIMS], ksrc[GDL_MAX_DIMS]; /* kept dims */
    int64_t rshape[GDL_MAX_DIMS], rsrc[GDL_MAX_DIMS];                     /* reduced dims */
};

// dst and src offsets of destination element t
__device__ __forceinline__ void gdl__sumto_base(const gdl__cu_sumto &g, int64_t t, int64_t *od, int64_t *os) {
    int64_t rem = t, a = 0, b = 0;
    for (int d = g.nk - 1; d >= 0; d--) {
        int64_t id = rem % g.kshape[d];
        rem /= g.kshape[d];
        a += id * g.kdst[d];
        b += id * g.ksrc[d];
    }
    *od = a;
    *os = b;
}

// one thread per destination element; it visits its sources in row-major
// order (an odometer), the order of the CPU loop. into_dst (all f32):
// the sum starts from dst[o] and is stored, as the CPU adds into dst;
// otherwise (a low dtype) it starts from 0 in f32 (the f32 path's
// zeroed gradient of an f32 copy), then is added to dst[o] and rounded once
// (that copy's cast). TS, TD: the storage types of src and dst.
template <typename TS, typename TD>
__global__ void gdl__k_sum_to_thread(gdl__cu_sumto g, int64_t nout, int64_t nred, const TS *src, TD *dst, float alpha,
                                     int into_dst) {
    GDL_CU_LOOP(t, nout) {
        int64_t od, so, idx[GDL_MAX_DIMS] = {};
        gdl__sumto_base(g, t, &od, &so);
        float acc = into_dst ? gdl__ld(dst[od]) : 0.0f;
        for (int64_t j = 0; j < nred; j++) {
            acc += alpha * gdl__ld(src[so]);
            for (int d = g.nr - 1; d >= 0; d--) {
                so += g.rsrc[d];
                if (++idx[d] < g.rshape[d]) break;
                so -= g.rsrc[d] * g.rshape[d];
                idx[d] = 0;
            }
        }
        dst[od] = gdl__st<TD>(into_dst ? acc : gdl__ld(dst[od]) + acc);
    }
}

// one block per destination element, for few outputs with long reductions
// (a bias gradient over a big batch, a sum to a scalar)
template <typename TS, typename TD>
__global__ void gdl__k_sum_to_block(gdl__cu_sumto g, int64_t nout, int64_t nred, const TS *src, TD *dst, float alpha) {
    GDL_CU_ROWS(t, nout) {
        int64_t od, os;
        gdl__sumto_base(g, t, &od, &os);
        float s = 0;
        for (int64_t j = threadIdx.x; j < nred; j += blockDim.x) {
            int64_t rem = j, so = os;
            for (int d = g.nr - 1; d >= 0; d--) {
                int64_t id = rem % g.rshape[d];
                rem /= g.rshape[d];
                so += id * g.rsrc[d];
            }
            s += gdl__ld(src[so]);
        }
        s = gdl__block_sum(s);
        if (threadIdx.x == 0) dst[od] = gdl__st<TD>(gdl__ld(dst[od]) + alpha * s);
    }
}

// the kept and reduced dims of a sum_to, outer to inner; 0 when there is nothing to do
static int gdl__cu_sumto_plan(int ndim, const int64_t *shape, const int64_t *dstr, gdl__cu_sumto *g, int64_t *nout_,
                              int64_t *nred_, int *block) {
    int64_t n = 1, nout = 1, nred = 1, sstr = 1;
    int inner_reduced = 0, seen_inner = 0;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (n <= 0) return 0;
    g->nk = g->nr = 0;
    // walk from the innermost dim to compute the contiguous source strides,
    // then put the kept and reduced dims back in outer-to-inner order
    int64_t ks[GDL_MAX_DIMS], kd[GDL_MAX_DIMS], kss[GDL_MAX_DIMS], rs[GDL_MAX_DIMS], rss[GDL_MAX_DIMS];
    int nk = 0, nr = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] != 1) {
            int reduced = dstr[d] == 0;
            if (!seen_inner) {
                inner_reduced = reduced;
                seen_inner = 1;
            }
            if (reduced) {
                rs[nr] = shape[d];
                rss[nr] = sstr;
                nr++;
                nred *= shape[d];
            } else {
                ks[nk] = shape[d];
                kd[nk] = dstr[d];
                kss[nk] = sstr;
                nk++;
                nout *= shape[d];
            }
        }
        sstr *= shape[d];
    }
    for (int i = 0; i < nk; i++) {
        g->kshape[i] = ks[nk - 1 - i];
        g->kdst[i] = kd[nk - 1 - i];
        g->ksrc[i] = kss[nk - 1 - i];
    }
    for (int i = 0; i < nr; i++) {
        g->rshape[i] = rs[nr - 1 - i];
        g->rsrc[i] = rss[nr - 1 - i];
    }
    g->nk = nk;
    g->nr = nr;
    *nout_ = nout;
    *nred_ = nred;
    // A block per output reads runs of the innermost dim when that dim is
    // reduced, and keeps the GPU busy when outputs are few; a thread per
    // output reads coalesced across threads when the innermost dim is kept.
    *block = nr > 0 && nred >= 64 && (inner_reduced || nout < 2048);
    return 1;
}

template <typename TS, typename TD>
static int gdl__cu_sum_to_t(int ndim, const int64_t *shape, const TS *src, TD *dst, const int64_t *dstr, float alpha,
                            int into_dst) {
    gdl__cu_sumto g;
    int64_t nout, nred;
    int block;
    if (!gdl__cu_sumto_plan(ndim, shape, dstr, &g, &nout, &nred, &block)) return 0;
    if (block) {
        int threads = gdl__cu_row_threads(nred > 256 ? 256 : nred);
        void (*gdl__k_sum_to_block_)(gdl__cu_sumto, int64_t, int64_t, const TS *, TD *, float) = gdl__k_sum_to_block<TS, TD>;
        GDL_CU_LAUNCH(gdl__k_sum_to_block_, gdl__cu_row_grid(nout), threads, 0, gdl__cu_stream())(g, nout, nred, src, dst, alpha);
    } else {
        void (*gdl__k_sum_to_thread_)(gdl__cu_sumto, int64_t, int64_t, const TS *, TD *, float, int) =
            gdl__k_sum_to_thread<TS, TD>;
        GDL_CU_LAUNCH(gdl__k_sum_to_thread_, gdl__cu_grid(nout, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            g, nout, nred, src, dst, alpha, into_dst);
    }
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_sum_to_f32(int ndim, const int64_t *shape, const float *src, float *dst, const int64_t *dstr,
                          float alpha) {
    return gdl__cu_sum_to_t(ndim, shape, src, dst, dstr, alpha, 1);
}

static int gdl__cu_sum_to(int ndim, const int64_t *shape, gdl_dtype st, const void *src, gdl_dtype dt, void *dst,
                          const int64_t *dstr, float alpha) {
    if (st == GDL_F32 && dt == GDL_F32)
        return gdl__cu_sum_to_f32(ndim, shape, (const float *)src, (float *)dst, dstr, alpha);
    return gdl__cu_dispatch("sum_to", st, 1, [&](auto ts) {
        return gdl__cu_dispatch("sum_to", dt, 1, [&](auto td) {
            typedef typename decltype(ts)::type TS;
            typedef typename decltype(td)::type TD;
            return gdl__cu_sum_to_t(ndim, shape, (const TS *)src, (TD *)dst, dstr, alpha, 0);
        });
    });
}

// The op math (gdl_unary1_float, gdl_unary_grad1_float, gdl_binary1_float) is gpudl.h's
// (src/api/op_math.h), the CPU's in f32: one definition for both backends.

template <typename T> __global__ void gdl__k_unary(int op, int64_t n, const T *x, T *y, float alpha) {
    GDL_CU_LOOP(i, n) y[i] = gdl__st<T>(gdl_unary1_float((enum gdl_unary_op)op, gdl__ld(x[i]), alpha));
}

// ReLU (and clamp) selects gy as the CPU does (x > 0 ? gy : 0) rather than multiplying
// by a 0/1 derivative: an Inf or NaN gradient at x <= 0 must not become NaN.
// The accumulator is loaded (0 when acc is 0: gx unset, not read), the term added in f32, the sum
// rounded once.
// The term gy * f'(x): for f32 nvcc fuses it into the add (an FMA), for a
// 16-bit T it is rounded first (gdl__mul_rn), as the CPU does and as the
// separate low-precision kernel did.
template <typename T>
__global__ void gdl__k_unary_backward(int op, int64_t n, const T *x, const T *y, const T *gy, T *gx, float alpha,
                                      int acc) {
    if (op == GDL_UN_RELU || op == GDL_UN_CLAMP_MIN || op == GDL_UN_CLAMP_MAX) {
        GDL_CU_LOOP(i, n) {
            float v = gdl__ld(x[i]);
            bool pass = op == GDL_UN_RELU ? v > 0 : op == GDL_UN_CLAMP_MIN ? v >= alpha : v <= alpha;
            gx[i] = gdl__st<T>((acc ? gdl__ld(gx[i]) : 0.0f) + (pass ? gdl__ld(gy[i]) : 0.0f));
        }
        return;
    }
    GDL_CU_LOOP(i, n) {
        float g = gdl__ld(gy[i]), d = gdl_unary_grad1_float((enum gdl_unary_op)op, gdl__ld(x[i]), gdl__ld(y[i]), alpha);
        gx[i] = gdl__st<T>((acc ? gdl__ld(gx[i]) : 0.0f) + (sizeof(T) == 2 ? gdl__mul_rn(g, d) : g * d));
    }
}

template <typename T> static int gdl__cu_unary_t(int op, int64_t n, const T *x, T *y, float alpha) {
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_unary<T>, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(op, n, x, y, alpha);
    GDL_CU_LAUNCHED();
    return 0;
}

template <typename T>
static int gdl__cu_unary_backward_t(int op, int64_t n, const T *x, const T *y, const T *gy, T *gx, float alpha,
                                    int acc) {
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_unary_backward<T>, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        op, n, x, y, gy, gx, alpha, acc);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_unary_f32(int op, int64_t n, const float *x, float *y, float alpha) {
    return gdl__cu_unary_t(op, n, x, y, alpha);
}

static int gdl__cu_unary_backward_f32(int op, int64_t n, const float *x, const float *y, const float *gy, float *gx,
                                  float alpha, int accumulate) {
    return gdl__cu_unary_backward_t(op, n, x, y, gy, gx, alpha, accumulate);
}

static int gdl__cu_unary(gdl_dtype dt, int op, int64_t n, const void *x, void *y, float alpha) {
    if (dt == GDL_F32) return gdl__cu_unary_f32(op, n, (const float *)x, (float *)y, alpha);
    return gdl__cu_dispatch("unary", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_unary_t(op, n, (const T *)x, (T *)y, alpha);
    });
}

static int gdl__cu_unary_backward(gdl_dtype dt, int op, int64_t n, const void *x, const void *y, const void *gy,
                                  void *gx, float alpha, int accumulate) {
    if (dt == GDL_F32)
        return gdl__cu_unary_backward_f32(op, n, (const float *)x, (const float *)y, (const float *)gy, (float *)gx,
                                          alpha, accumulate);
    return gdl__cu_dispatch("unary_backward", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_unary_backward_t(op, n, (const T *)x, (const T *)y, (const T *)gy, (T *)gx, alpha, accumulate);
    });
}
// ----------------------------------------------------------------------------
// indexing and copies: strided copies (permute, slicing), gather and
// scatter-add (index_select, gather), comparisons, where, tril/triu, cumsum.
// One thread per output element, its offsets from its row-major index; the
// selections and copies move elements as they are (exact in every dtype),
// what adds loads to f32 and rounds once (gdl__ld / gdl__st).

// offsets of element i in the two strided operands of g (after gdl__cu_coalesce)
__device__ __forceinline__ void gdl__cu_offsets2(const gdl__cu_bshape &g, int64_t i, int64_t *oa, int64_t *ob) {
    int64_t rem = i, a = 0, b = 0;
    for (int d = g.nd - 1; d >= 0; d--) {
        int64_t id = d ? rem % g.shape[d] : rem;
        rem = d ? rem / g.shape[d] : 0;
        a += id * g.as[d];
        b += id * g.bs[d];
    }
    *oa = a;
    *ob = b;
}

// T: an unsigned integer of the element's size (a copy moves bits)
template <typename T> __global__ void gdl__k_strided_copy(gdl__cu_bshape g, int64_t n, const T *src, T *dst) {
    GDL_CU_LOOP(i, n) {
        int64_t os, od;
        gdl__cu_offsets2(g, i, &os, &od);
        dst[od] = src[os];
    }
}
// T: float, __half or __nv_bfloat16; no two elements share a destination
template <typename T> __global__ void gdl__k_strided_add(gdl__cu_bshape g, int64_t n, const T *src, T *dst) {
    GDL_CU_LOOP(i, n) {
        int64_t os, od;
        gdl__cu_offsets2(g, i, &os, &od);
        dst[od] = gdl__st<T>(gdl__ld(dst[od]) + gdl__ld(src[os]));
    }
}

// one launch for either kernel, gdl__k_strided_copy<T> or gdl__k_strided_add<T> (through a pointer: the
// template's commas would split GDL_CU_LAUNCH's arguments)
template <typename T>
static int gdl__cu_strided_t(void (*gdl__k_strided)(gdl__cu_bshape, int64_t, const T *, T *), const gdl__cu_bshape &g,
                             int64_t n, const void *src, void *dst) {
    GDL_CU_LAUNCH(gdl__k_strided, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        g, n, (const T *)src, (T *)dst);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_strided_copy(gdl_dtype dt, int ndim, const int64_t *shape, const void *src, const int64_t *sstr,
                                void *dst, const int64_t *dstr, int accumulate) {
    gdl__cu_bshape g;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (n <= 0) return 0;
    gdl__cu_coalesce(ndim, shape, sstr, dstr, &g);
    if (accumulate)
        return gdl__cu_dispatch("strided_copy (accumulating)", dt, 1, [&](auto t) {
            typedef typename decltype(t)::type T;
            return gdl__cu_strided_t<T>(gdl__k_strided_add<T>, g, n, src, dst);
        });
    switch (gdl_dtype_size(dt)) {
    case 1: return gdl__cu_strided_t<uint8_t>(gdl__k_strided_copy<uint8_t>, g, n, src, dst);
    case 2: return gdl__cu_strided_t<uint16_t>(gdl__k_strided_copy<uint16_t>, g, n, src, dst);
    case 4: return gdl__cu_strided_t<uint32_t>(gdl__k_strided_copy<uint32_t>, g, n, src, dst);
    default:
        gdl__set_error("gdl_cuda: strided_copy of an invalid dtype %d", (int)dt);
        return -1;
    }
}

// gather / scatter_add: the index tensor's shape, x's (dst's) strides, the index's strides
struct gdl__cu_gshape {
    int nd, dim;
    int64_t shape[GDL_MAX_DIMS], xs[GDL_MAX_DIMS], is[GDL_MAX_DIMS];
};

// element i's offset in x, -1 for an index outside [0, xn)
__device__ __forceinline__ int64_t gdl__cu_gather_offset(const gdl__cu_gshape &g, int64_t xn, const int32_t *idx, int64_t i) {
    int64_t rem = i, xo = 0, io = 0;
    for (int d = g.nd - 1; d >= 0; d--) {
        int64_t id = rem % g.shape[d];
        rem /= g.shape[d];
        if (d != g.dim) xo += id * g.xs[d];
        io += id * g.is[d];
    }
    int32_t c = idx[io];
    return c < 0 || c >= xn ? -1 : xo + (int64_t)c * g.xs[g.dim];
}

template <typename T>
__global__ void gdl__k_gather(gdl__cu_gshape g, int64_t n, int64_t xn, const T *x, const int32_t *idx, T *out) {
    GDL_CU_LOOP(i, n) {
        int64_t o = gdl__cu_gather_offset(g, xn, idx, i);
        out[i] = o < 0 ? (T)0 : x[o];
    }
}

// indices repeat, so several threads may add into one element: atomics
template <typename T>
__global__ void gdl__k_scatter_add(gdl__cu_gshape g, int64_t n, int64_t xn, const T *src, const int32_t *idx, float *dst) {
    GDL_CU_LOOP(i, n) {
        int64_t o = gdl__cu_gather_offset(g, xn, idx, i);
        if (o >= 0) atomicAdd(&dst[o], gdl__ld(src[i]));
    }
}

static int gdl__cu_gshape_of(int ndim, const int64_t *shape, int dim, const int64_t *xstr, const int64_t *istr,
                             gdl__cu_gshape *g) {
    int64_t n = 1;
    g->nd = ndim;
    g->dim = dim;
    for (int d = 0; d < ndim; d++) {
        g->shape[d] = shape[d];
        g->xs[d] = xstr[d];
        g->is[d] = istr[d];
        n *= shape[d];
    }
    return n > 0;
}

template <typename T>
static int gdl__cu_gather_t(const gdl__cu_gshape &g, int64_t n, int64_t xn, const void *x, const int32_t *idx, void *out) {
    void (*gdl__k_gather_)(gdl__cu_gshape, int64_t, int64_t, const T *, const int32_t *, T *) = gdl__k_gather<T>;
    GDL_CU_LAUNCH(gdl__k_gather_, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        g, n, xn, (const T *)x, idx, (T *)out);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_gather(gdl_dtype dt, int ndim, const int64_t *shape, int dim, const void *x, const int64_t *xstr,
                          int64_t xn, const int32_t *idx, const int64_t *istr, void *out) {
    gdl__cu_gshape g;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (!gdl__cu_gshape_of(ndim, shape, dim, xstr, istr, &g)) return 0;
    switch (gdl_dtype_size(dt)) {
    case 1: return gdl__cu_gather_t<uint8_t>(g, n, xn, x, idx, out);
    case 2: return gdl__cu_gather_t<uint16_t>(g, n, xn, x, idx, out);
    case 4: return gdl__cu_gather_t<uint32_t>(g, n, xn, x, idx, out);
    default:
        gdl__set_error("gdl_cuda: gather of an invalid dtype %d", (int)dt);
        return -1;
    }
}

static int gdl__cu_scatter_add(gdl_dtype st, int ndim, const int64_t *shape, int dim, const void *src,
                               const int32_t *idx, const int64_t *istr, float *dst, const int64_t *dstr, int64_t dn) {
    gdl__cu_gshape g;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (!gdl__cu_gshape_of(ndim, shape, dim, dstr, istr, &g)) return 0;
    return gdl__cu_dispatch("scatter_add", st, 1, [&](auto t) {
        typedef typename decltype(t)::type T;
        void (*gdl__k_scatter_add_)(gdl__cu_gshape, int64_t, int64_t, const T *, const int32_t *, float *) =
            gdl__k_scatter_add<T>;
        GDL_CU_LAUNCH(gdl__k_scatter_add_, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            g, n, dn, (const T *)src, idx, dst);
        GDL_CU_LAUNCHED();
        return 0;
    });
}

// a compare operand of runtime dtype dt: floats as f32, integers as themselves
__device__ __forceinline__ float gdl__ld_f32_of(const void *p, int dt, int64_t i) {
    switch (dt) {
    case GDL_F32: return ((const float *)p)[i];
    case GDL_I32: return (float)((const int32_t *)p)[i];
    case GDL_U8: return (float)((const uint8_t *)p)[i];
    case GDL_F16: return gdl__f16_to_f32(((const uint16_t *)p)[i]);
    default: return gdl__bf16_to_f32(((const uint16_t *)p)[i]);
    }
}
__device__ __forceinline__ int32_t gdl__ld_i32_of(const void *p, int dt, int64_t i) {
    return dt == GDL_U8 ? (int32_t)((const uint8_t *)p)[i] : ((const int32_t *)p)[i];
}

// the dtypes' switches are uniform across the grid (as gdl__k_cast's)
__global__ void gdl__k_compare(int op, gdl__cu_bshape g, int64_t n, int at, const void *a, int bt, const void *b,
                               uint8_t *out) {
    bool ints = (at == GDL_I32 || at == GDL_U8) && (bt == GDL_I32 || bt == GDL_U8);
    GDL_CU_LOOP(i, n) {
        int64_t oa, ob;
        gdl__cu_offsets2(g, i, &oa, &ob);
        out[i] = ints ? gdl_compare1_i32(op, gdl__ld_i32_of(a, at, oa), gdl__ld_i32_of(b, bt, ob))
                      : gdl_compare1_float(op, gdl__ld_f32_of(a, at, oa), gdl__ld_f32_of(b, bt, ob));
    }
}

static int gdl__cu_compare(int op, int ndim, const int64_t *shape, gdl_dtype at, const void *a, const int64_t *astr,
                           gdl_dtype bt, const void *b, const int64_t *bstr, uint8_t *out) {
    gdl__cu_bshape g;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (n <= 0) return 0;
    if ((unsigned)at >= GDL_DTYPE_COUNT || (unsigned)bt >= GDL_DTYPE_COUNT) {
        gdl__set_error("gdl_cuda: compare of invalid dtypes %d and %d", (int)at, (int)bt);
        return -1;
    }
    gdl__cu_coalesce(ndim, shape, astr, bstr, &g);
    GDL_CU_LAUNCH(gdl__k_compare, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        op, g, n, (int)at, a, (int)bt, b, out);
    GDL_CU_LAUNCHED();
    return 0;
}

// where's three strided operands
struct gdl__cu_wshape {
    int nd;
    int64_t shape[GDL_MAX_DIMS], cs[GDL_MAX_DIMS], as[GDL_MAX_DIMS], bs[GDL_MAX_DIMS];
};

template <typename T>
__global__ void gdl__k_where(gdl__cu_wshape g, int64_t n, const uint8_t *cond, const T *a, const T *b, T *out) {
    GDL_CU_LOOP(i, n) {
        int64_t rem = i, oc = 0, oa = 0, ob = 0;
        for (int d = g.nd - 1; d >= 0; d--) {
            int64_t id = rem % g.shape[d];
            rem /= g.shape[d];
            oc += id * g.cs[d];
            oa += id * g.as[d];
            ob += id * g.bs[d];
        }
        out[i] = cond[oc] ? a[oa] : b[ob];
    }
}

static int gdl__cu_where(gdl_dtype dt, int ndim, const int64_t *shape, const uint8_t *cond, const int64_t *cstr,
                         const void *a, const int64_t *astr, const void *b, const int64_t *bstr, void *out) {
    gdl__cu_wshape g;
    int64_t n = 1;
    g.nd = ndim;
    for (int d = 0; d < ndim; d++) {
        g.shape[d] = shape[d];
        g.cs[d] = cstr[d];
        g.as[d] = astr[d];
        g.bs[d] = bstr[d];
        n *= shape[d];
    }
    if (n <= 0) return 0;
    return gdl__cu_dispatch("where", dt, 1, [&](auto t) {
        typedef typename decltype(t)::type T;
        void (*gdl__k_where_)(gdl__cu_wshape, int64_t, const uint8_t *, const T *, const T *, T *) = gdl__k_where<T>;
        GDL_CU_LAUNCH(gdl__k_where_, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            g, n, cond, (const T *)a, (const T *)b, (T *)out);
        GDL_CU_LAUNCHED();
        return 0;
    });
}

template <typename T>
__global__ void gdl__k_tri(int upper, int64_t n, int64_t R, int64_t C, int64_t k, const T *x, T *y, int accumulate) {
    GDL_CU_LOOP(i, n) {
        int64_t c = i % C, r = (i / C) % R;
        bool keep = upper ? c - r >= k : c - r <= k;
        if (accumulate) {
            if (keep) y[i] = gdl__st<T>(gdl__ld(y[i]) + gdl__ld(x[i]));
        } else {
            y[i] = keep ? x[i] : gdl__st<T>(0.0f);
        }
    }
}

static int gdl__cu_tri(gdl_dtype dt, int upper, int64_t batch, int64_t R, int64_t C, int64_t k, const void *x, void *y,
                       int accumulate) {
    int64_t n = batch * R * C;
    if (n <= 0) return 0;
    return gdl__cu_dispatch("tri", dt, 1, [&](auto t) {
        typedef typename decltype(t)::type T;
        void (*gdl__k_tri_)(int, int64_t, int64_t, int64_t, int64_t, const T *, T *, int) = gdl__k_tri<T>;
        GDL_CU_LAUNCH(gdl__k_tri_, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            upper, n, R, C, k, (const T *)x, (T *)y, accumulate);
        GDL_CU_LAUNCHED();
        return 0;
    });
}

// one thread per (outer, inner) line, scanning it in order: reads coalesced across inner
__global__ void gdl__k_cumsum(int64_t outer, int64_t n, int64_t inner, const float *x, float *y, int reverse,
                              int accumulate) {
    GDL_CU_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner;
        const float *p = x + o * n * inner + i;
        float *q = y + o * n * inner + i, s = 0;
        for (int64_t k = 0; k < n; k++) {
            int64_t kk = reverse ? n - 1 - k : k;
            s += p[kk * inner];
            q[kk * inner] = accumulate ? q[kk * inner] + s : s;
        }
    }
}

static int gdl__cu_cumsum(int64_t outer, int64_t n, int64_t inner, const float *x, float *y, int reverse, int accumulate) {
    if (outer * n * inner <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_cumsum, gdl__cu_grid(outer * inner, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        outer, n, inner, x, y, reverse, accumulate);
    GDL_CU_LAUNCHED();
    return 0;
}
// ----------------------------------------------------------------------------
// reductions over the middle dim of [outer, n, inner]; softmax

// one thread per output (o, i): reads are coalesced across i when inner is
// large. MAX follows the CPU's scan: first maximum, first NaN wins.
__global__ void gdl__k_reduce_thread(int op, int64_t outer, int64_t n, int64_t inner, const float *x, float *y,
                                     int32_t *idx, int accumulate) {
    GDL_CU_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner;
        const float *p = x + o * n * inner + i;
        float r;
        if (op == GDL_RED_MAX || op == GDL_RED_MIN) { // min: the max of -x (-NaN is NaN: NaN still wins)
            const float sg = op == GDL_RED_MIN ? -1.0f : 1.0f;
            int64_t best = 0;
            float bv = n ? sg * p[0] : 0.0f;
            for (int64_t k = 1; k < n; k++) {
                float v = sg * p[k * inner];
                if (v > bv || (v != v && bv == bv)) {
                    best = k;
                    bv = v;
                }
            }
            r = n ? sg * bv : -GDL__CU_INF * sg;
            if (idx) idx[t] = (int32_t)best;
        } else {
            float s = 0;
            for (int64_t k = 0; k < n; k++) s += p[k * inner];
            r = op == GDL_RED_MEAN ? s / (float)n : s;
        }
        y[t] = accumulate ? y[t] + r : r;
    }
}

// one block per output, for long reductions over few outputs (n > 0)
__global__ void gdl__k_reduce_block(int op, int64_t outer, int64_t n, int64_t inner, const float *x, float *y,
                                    int32_t *idx, int accumulate) {
    GDL_CU_ROWS(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner;
        const float *p = x + o * n * inner + i;
        float r;
        if (op == GDL_RED_MAX || op == GDL_RED_MIN) {
            const float sg = op == GDL_RED_MIN ? -1.0f : 1.0f;
            float bv = 0;
            long long bk = -1;
            for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
                float v = sg * p[k * inner];
                if (gdl__max_better(v, k, bv, bk)) {
                    bv = v;
                    bk = k;
                }
            }
            gdl__block_argmax(bv, bk);
            r = sg * bv;
            if (idx && threadIdx.x == 0) idx[t] = (int32_t)bk;
        } else {
            float s = 0;
            for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += p[k * inner];
            s = gdl__block_sum(s);
            r = op == GDL_RED_MEAN ? s / (float)n : s;
        }
        if (threadIdx.x == 0) y[t] = accumulate ? y[t] + r : r;
    }
}

static int gdl__cu_reduce(int op, int64_t outer, int64_t n, int64_t inner, const float *x, float *y, int32_t *idx,
                          int accumulate) {
    int64_t nout = outer * inner;
    if (nout <= 0) return 0;
    if (n >= 64 && (inner == 1 || nout < 1024)) {
        GDL_CU_LAUNCH(gdl__k_reduce_block, gdl__cu_row_grid(nout), gdl__cu_row_threads(n), 0, gdl__cu_stream())(op, outer, n, inner, x, y, idx,
                                                                               accumulate);
    } else {
        GDL_CU_LAUNCH(gdl__k_reduce_thread, gdl__cu_grid(nout, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(op, outer, n, inner, x, y,
                                                                                       idx, accumulate);
    }
    GDL_CU_LAUNCHED();
    return 0;
}

// SUM/MEAN: one thread per input element, each owning its gx; MAX, MIN: one
// thread per output, each writing the one element its index names
__global__ void gdl__k_reduce_backward_spread(int op, int64_t outer, int64_t n, int64_t inner, const float *gy,
                                              float *gx) {
    GDL_CU_LOOP(t, outer * n * inner) {
        int64_t o = t / (n * inner), i = t % inner;
        float g = gy[o * inner + i];
        if (op == GDL_RED_MEAN) g = g / (float)n;
        gx[t] += g;
    }
}

__global__ void gdl__k_reduce_backward_max(int64_t outer, int64_t n, int64_t inner, const float *gy,
                                           const int32_t *idx, float *gx) {
    GDL_CU_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner;
        gx[(o * n + idx[t]) * inner + i] += gy[t];
    }
}

static int gdl__cu_reduce_backward(int op, int64_t outer, int64_t n, int64_t inner, const float *gy,
                                   const int32_t *idx, float *gx) {
    if (outer * n * inner <= 0) return 0;
    if (op == GDL_RED_MAX || op == GDL_RED_MIN)
        GDL_CU_LAUNCH(gdl__k_reduce_backward_max, gdl__cu_grid(outer * inner, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(outer, n, inner,
                                                                                                    gy, idx, gx);
    else
        GDL_CU_LAUNCH(gdl__k_reduce_backward_spread, gdl__cu_grid(outer * n * inner, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            op, outer, n, inner, gy, gx);
    GDL_CU_LAUNCHED();
    return 0;
}

// the largest power of two (up to 256) dividing a pointer: cuBLASLt's heuristic
// assumes 256-byte operands unless told
static uint32_t gdl__cu_align(const void *p) {
    uint32_t a = 256;
    while (a > 4 && (uintptr_t)p % a) a /= 2;
    return a;
}

// One cublasLtMatmul computing y = act(x w^T + bias) (see gdl__cu_linear_act):
// 0 done, -1 error, 1 cuBLASLt has no algorithm for it (nothing ran).
static int gdl__cu_lt_matmul(int act, int M, int N, int K, const float *x, const float *w, const float *bias,
                             float *y, float *pre) {
    gdl__cu_state &S = gdl__cu();
    int dev;
    if (!gdl__cu_blas() || gdl__cu_current(&dev) < 0) return -1; /* the workspace is cuBLAS's */
    cudaStream_t st = gdl__cu_stream();
    size_t wsb = gdl__cu_blas_ws_bytes(dev);
    cublasLtHandle_t lt;
    void *ws;
    {
        std::lock_guard<std::mutex> lock(S.mu);
        if (!S.lt[dev]) GDL_CUBLAS_TRY(cublasLtCreate(&S.lt[dev]), -1);
        lt = S.lt[dev];
        ws = S.blas_ws[dev];
    }
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t heur;
    cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    cublasLtEpilogue_t epi;
    if (act == GDL_UN_RELU) epi = bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    else if (act == GDL_UN_GELU_TANH)
        epi = pre ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                  : (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
    else epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    int64_t auxld = N;
    uint64_t wsmax = wsb;
    uint32_t al[4] = {gdl__cu_align(w), gdl__cu_align(x), gdl__cu_align(y), gdl__cu_align(y)};
    float alpha = 1.0f, beta = 0.0f;
    int found = 0, rc = -1;
    memset(&heur, 0, sizeof heur);
    cublasStatus_t e = cublasLtMatmulDescCreate(&desc, S.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                                CUDA_R_32F);
    if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT);
    if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN);
    if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (e == CUBLAS_STATUS_SUCCESS && bias)
        e = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (e == CUBLAS_STATUS_SUCCESS && pre)
        e = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof pre);
    if (e == CUBLAS_STATUS_SUCCESS && pre)
        e = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &auxld, sizeof auxld);
    if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, (uint64_t)K, (uint64_t)N, K);
    if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, (uint64_t)K, (uint64_t)M, K);
    if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, (uint64_t)N, (uint64_t)M, N);
    if (e == CUBLAS_STATUS_SUCCESS) e = cublasLtMatmulPreferenceCreate(&pref);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsmax, sizeof wsmax);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof al[3]);
    if (e == CUBLAS_STATUS_SUCCESS) {
        cublasStatus_t h = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &heur, &found);
        if (h != CUBLAS_STATUS_SUCCESS || found < 1 || heur.state != CUBLAS_STATUS_SUCCESS) {
            rc = 1; /* not this shape or alignment: the caller's GEMM + bias_act */
        } else {
            gdl__cu_launches.fetch_add(1, std::memory_order_relaxed); /* one kernel, epilogue included */
            e = cublasLtMatmul(lt, desc, &alpha, w, la, x, lb, &beta, y, ld, y, ld, &heur.algo, ws, wsb, st);
            if (e == CUBLAS_STATUS_SUCCESS) rc = 0;
        }
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (rc < 0) GDL_CUBLAS_TRY(e, -1);
    return rc;
}

// ----------------------------------------------------------------------------
// fused bias + activation (gdl_linear_act, gdl_conv2d_act): the arithmetic of
// the unfused kernels (the binary add, gdl_unary1_float, unary_backward adding to a
// zeroed gradient, reduce's summation order), so fused and unfused agree bit
// for bit wherever the GEMMs do

__device__ __forceinline__ float gdl__act1(int act, float v) {
    return act < 0 ? v : act == GDL_UN_RELU ? (v > 0 ? v : 0.0f) : gdl_unary1_float((enum gdl_unary_op)act, v, 0.0f);
}

// ReLU selects (as unary_backward does); pre may be ReLU's output
__device__ __forceinline__ float gdl__act_grad(int act, float pre, float gy) {
    return 0.0f + (act < 0 ? gy
                   : act == GDL_UN_RELU ? (pre > 0 ? gy : 0.0f)
                   : gy * gdl_unary_grad1_float((enum gdl_unary_op)act, pre, 0.0f, 0.0f));
}

__global__ void gdl__k_bias_act(int act, int64_t n, int64_t C, int64_t inner, const float *bias, float *y, float *pre) {
    GDL_CU_LOOP(i, n) {
        float v = y[i];
        if (bias) v = v + bias[(i / inner) % C];
        if (pre) pre[i] = v;
        y[i] = gdl__act1(act, v);
    }
}

static int gdl__cu_bias_act(int act, int64_t outer, int64_t C, int64_t inner, const float *bias, float *y, float *pre) {
    int64_t n = outer * C * inner;
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_bias_act, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        act, n, C, inner ? inner : 1, bias, y, pre);
    GDL_CU_LAUNCHED();
    return 0;
}

__global__ void gdl__k_act_backward(int act, int64_t n, const float *pre, const float *gy, float *gpre) {
    GDL_CU_LOOP(i, n) gpre[i] = gdl__act_grad(act, pre[i], gy[i]);
}

// gdl__k_reduce_thread / _block with act' applied to each element read (and written to gpre)
__global__ void gdl__k_act_reduce_thread(int act, int64_t outer, int64_t n, int64_t inner, const float *pre,
                                         const float *gy, float *gpre, float *sum, int accumulate) {
    GDL_CU_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner, base = o * n * inner + i;
        float s = 0;
        for (int64_t k = 0; k < n; k++) {
            float g = gdl__act_grad(act, pre[base + k * inner], gy[base + k * inner]);
            gpre[base + k * inner] = g;
            s += g;
        }
        sum[t] = accumulate ? sum[t] + s : s;
    }
}

__global__ void gdl__k_act_reduce_block(int act, int64_t outer, int64_t n, int64_t inner, const float *pre,
                                        const float *gy, float *gpre, float *sum, int accumulate) {
    GDL_CU_ROWS(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner, base = o * n * inner + i;
        float s = 0;
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
            float g = gdl__act_grad(act, pre[base + k * inner], gy[base + k * inner]);
            gpre[base + k * inner] = g;
            s += g;
        }
        s = gdl__block_sum(s);
        if (threadIdx.x == 0) sum[t] = accumulate ? sum[t] + s : s;
    }
}

static int gdl__cu_act_backward_reduce(int act, int64_t outer, int64_t n, int64_t inner, const float *pre,
                                       const float *gy, float *gpre, float *sum, int accumulate) {
    int64_t nout = outer * inner;
    if (nout <= 0 || n < 0) return 0;
    if (!sum) {
        if (nout * n > 0)
            GDL_CU_LAUNCH(gdl__k_act_backward, gdl__cu_grid(nout * n, GDL__CU_THREADS), GDL__CU_THREADS, 0,
                          gdl__cu_stream())(act, nout * n, pre, gy, gpre);
    } else if (n >= 64 && (inner == 1 || nout < 1024)) { /* gdl__cu_reduce's choice */
        GDL_CU_LAUNCH(gdl__k_act_reduce_block, gdl__cu_row_grid(nout), gdl__cu_row_threads(n), 0, gdl__cu_stream())(
            act, outer, n, inner, pre, gy, gpre, sum, accumulate);
    } else {
        GDL_CU_LAUNCH(gdl__k_act_reduce_thread, gdl__cu_grid(nout, GDL__CU_THREADS), GDL__CU_THREADS, 0,
                      gdl__cu_stream())(act, outer, n, inner, pre, gy, gpre, sum, accumulate);
    }
    GDL_CU_LAUNCHED();
    return 0;
}

// y[M,N] = act(x[M,K]·w[N,K]^T + bias) as one cublasLtMatmul with a bias /
// activation epilogue (llm.c's matmul_cublaslt). cuBLASLt is column-major:
// our row-major y is its N x M matrix D = op(A)·B with A = w (K x N, ld K,
// transposed) and B = x (K x M, ld K); the bias runs along D's rows, as
// cuBLASLt's bias vector does. GELU keeps its input in the aux buffer (ld N,
// which cuBLASLt wants divisible by 8). Where cuBLASLt cannot (erf GELU, K 0,
// misaligned bias or aux, no algorithm): the GEMM, then one bias_act pass.
// With GPUDL_VERBOSE=1 the first such fallback in a process says why on
// stderr (a notice once, not a log: a model falls back on every step).
static void gdl__cu_lt_fallback_notice(const char *why, int M, int N, int K) {
    static std::atomic<int> told(0);
    const char *v = getenv("GPUDL_VERBOSE"); // 0 or 1: anything else warns (once) and counts as 0
    if (!v || !v[0] || strcmp(v, "0") == 0 || told.exchange(1)) return;
    if (strcmp(v, "1") != 0) {
        fprintf(stderr, "gpudl: warning: ignoring GPUDL_VERBOSE='%.64s': not 0 or 1; using 0\n", v);
        return;
    }
    fprintf(stderr, "gpudl: fused linear %d x %d x %d without cuBLASLt's epilogue (%s): the GEMM, then the "
                    "bias/activation kernel (said once per process)\n", M, N, K, why);
}

static int gdl__cu_linear_act(int act, int M, int N, int K, const float *x, const float *w, const float *bias,
                              float *y, float *pre) {
    if (M <= 0 || N <= 0) return 0;
    const char *why = K <= 0                                                   ? "K is 0"
                      : act == GDL_UN_GELU_ERF                                 ? "erf GELU has no epilogue"
                      : bias && (uintptr_t)bias % 16                           ? "bias not 16-byte aligned"
                      : pre && (N % 8 || (uintptr_t)pre % 16)                  ? "aux not 16-byte aligned or N % 8"
                      : (uintptr_t)y % 16                                      ? "output not 16-byte aligned"
                                                                               : NULL;
    if (!why) {
        int rc = gdl__cu_lt_matmul(act, M, N, K, x, w, bias, y, pre);
        if (rc <= 0) return rc; /* 1: no algorithm for it, take the other way */
        why = "the heuristic found no algorithm";
    }
    gdl__cu_lt_fallback_notice(why, M, N, K);
    if (gdl__cu_gemm_f32(0, 1, M, N, K, 1.0f, x, K, 0, w, K, 0, 0.0f, y, N, 0, 1) < 0) return -1;
    if (!bias && act < 0) return 0;
    return gdl__cu_bias_act(act, M, N, 1, bias, y, pre);
}

// argmax by the CPU's rule, gdl__max_better's, as max_dim's: the first
// maximum, and the first NaN wins (0 for an empty row). Rows are short
// (classes): a thread per row is enough
__global__ void gdl__k_argmax(int64_t outer, int64_t n, int64_t inner, const float *x, int32_t *out) {
    GDL_CU_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner;
        const float *p = x + o * n * inner + i;
        float bv = 0;
        long long bk = -1;
        for (int64_t k = 0; k < n; k++) {
            float v = p[k * inner];
            if (gdl__max_better(v, k, bv, bk)) {
                bv = v;
                bk = k;
            }
        }
        out[t] = (int32_t)(bk < 0 ? 0 : bk);
    }
}

static int gdl__cu_argmax(int64_t outer, int64_t n, int64_t inner, const float *x, int32_t *out) {
    if (outer * inner <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_argmax, gdl__cu_grid(outer * inner, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(outer, n, inner, x, out);
    GDL_CU_LAUNCHED();
    return 0;
}

// softmax over contiguous rows (inner == 1): one block per row. The max
// ignores NaN as the CPU's "if (v > mx)" does; lse = max + log(sum exp).
__global__ void gdl__k_softmax_rows(int log_, int64_t rows, int64_t n, const float *x, float *y) {
    GDL_CU_ROWS(r, rows) {
        const float *p = x + r * n;
        float *q = y + r * n;
        float mx = -GDL__CU_INF, s = 0;
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) mx = fmaxf(mx, p[k]);
        mx = gdl__block_max(mx);
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += expf(p[k] - mx);
        s = gdl__block_sum(s);
        float lse = mx + logf(s);
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) q[k] = log_ ? p[k] - lse : expf(p[k] - lse);
    }
}

// strided rows (inner > 1): one thread per (o, i), coalesced across i
__global__ void gdl__k_softmax_strided(int log_, int64_t outer, int64_t n, int64_t inner, const float *x, float *y) {
    GDL_CU_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner;
        const float *p = x + o * n * inner + i;
        float *q = y + o * n * inner + i;
        float mx = -GDL__CU_INF, s = 0;
        for (int64_t k = 0; k < n; k++) mx = fmaxf(mx, p[k * inner]);
        for (int64_t k = 0; k < n; k++) s += expf(p[k * inner] - mx);
        float lse = mx + logf(s);
        for (int64_t k = 0; k < n; k++) q[k * inner] = log_ ? p[k * inner] - lse : expf(p[k * inner] - lse);
    }
}

static int gdl__cu_softmax(int log_, int64_t outer, int64_t n, int64_t inner, const float *x, float *y) {
    if (outer * n * inner <= 0) return 0;
    if (inner == 1)
        GDL_CU_LAUNCH(gdl__k_softmax_rows, gdl__cu_row_grid(outer), gdl__cu_row_threads(n), 0, gdl__cu_stream())(log_, outer, n, x, y);
    else
        GDL_CU_LAUNCH(gdl__k_softmax_strided, gdl__cu_grid(outer * inner, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(log_, outer, n,
                                                                                                  inner, x, y);
    GDL_CU_LAUNCHED();
    return 0;
}

// softmax:     gx += y * (gy - sum(gy * y))
// log_softmax: gx += gy - exp(y) * sum(gy)
__global__ void gdl__k_softmax_backward_rows(int log_, int64_t rows, int64_t n, const float *y, const float *gy,
                                             float *gx) {
    GDL_CU_ROWS(r, rows) {
        int64_t base = r * n;
        float s = 0;
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += log_ ? gy[base + k] : gy[base + k] * y[base + k];
        s = gdl__block_sum(s);
        for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
            int64_t j = base + k;
            gx[j] += log_ ? gy[j] - expf(y[j]) * s : y[j] * (gy[j] - s);
        }
    }
}

__global__ void gdl__k_softmax_backward_strided(int log_, int64_t outer, int64_t n, int64_t inner, const float *y,
                                                const float *gy, float *gx) {
    GDL_CU_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner, base = o * n * inner + i;
        float s = 0;
        for (int64_t k = 0; k < n; k++) {
            int64_t j = base + k * inner;
            s += log_ ? gy[j] : gy[j] * y[j];
        }
        for (int64_t k = 0; k < n; k++) {
            int64_t j = base + k * inner;
            gx[j] += log_ ? gy[j] - expf(y[j]) * s : y[j] * (gy[j] - s);
        }
    }
}

static int gdl__cu_softmax_backward(int log_, int64_t outer, int64_t n, int64_t inner, const float *y,
                                    const float *gy, float *gx) {
    if (outer * n * inner <= 0) return 0;
    if (inner == 1)
        GDL_CU_LAUNCH(gdl__k_softmax_backward_rows, gdl__cu_row_grid(outer), gdl__cu_row_threads(n), 0, gdl__cu_stream())(log_, outer, n, y, gy, gx);
    else
        GDL_CU_LAUNCH(gdl__k_softmax_backward_strided, gdl__cu_grid(outer * inner, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            log_, outer, n, inner, y, gy, gx);
    GDL_CU_LAUNCHED();
    return 0;
}

// ----------------------------------------------------------------------------
// scaled dot-product attention: fused forward and backward, flash-attention style
//
// A block takes one batch and a tile of `tile` query rows (forward, dq) or key rows (dk, dv), one thread
// per row, and walks the other side in tiles staged in shared memory, so nothing of L x S is stored:
// the forward keeps a running max m, sum l and weighted sum of V per query row (online softmax) and
// saves lse = m + log l; the backward recomputes each probability as exp(score - lse). The backward is
// two kernels without atomics: dq (which also writes delta = rowsum(gout * out)), then dk and dv (which
// read delta). Storage in T (float, __half, __nv_bfloat16), arithmetic in f32, one rounding on store.
// The tile shrinks as the head grows, so a block's rows and tiles fit GDL__CU_ATTN_SMEM floats. q, k, v
// and out (gout with it) are addressed at gdl_attn_geom's strides: packed heads are read in place.

#define GDL__CU_ATTN_ROWS 1024 // tile * max(E, Ev)
#define GDL__CU_ATTN_SMEM (6 * GDL__CU_ATTN_ROWS + 64)

static int gdl__cu_attn_tile(const gdl_attn_geom *g) {
    int64_t d = g->E > g->Ev ? g->E : g->Ev;
    int t = 32;
    while (t > 4 && (int64_t)t * d > GDL__CU_ATTN_ROWS) t /= 2;
    return t;
}

// the term added to the score of key j in query row i (mask offset mb): 0, -inf, or the additive mask
__device__ __forceinline__ float gdl__cu_attn_bias(const gdl_attn_geom &g, const void *mask, int64_t mb, int64_t i,
                                                   int64_t j) {
    if (g.causal && j > i) return -GDL__CU_INF;
    if (!g.mask) return 0.0f;
    int64_t off = mb + i * g.mrow + j * g.mcol;
    if (g.mask == 1) return ((const uint8_t *)mask)[off] ? 0.0f : -GDL__CU_INF;
    if (g.mdt == GDL_F16) return gdl__f16_to_f32(((const uint16_t *)mask)[off]);
    if (g.mdt == GDL_BF16) return gdl__bf16_to_f32(((const uint16_t *)mask)[off]);
    return ((const float *)mask)[off];
}

__device__ __forceinline__ float gdl__cu_attn_dot(const float *a, const float *b, int64_t n) {
    float s = 0;
    for (int64_t e = 0; e < n; e++) s += a[e] * b[e];
    return s;
}

template <typename T>
__global__ void gdl__k_attn_fwd(gdl_attn_geom g, int tile, const T *q, const T *k, const T *v, const void *mask, T *out,
                                float *lse) {
    __shared__ float sm[GDL__CU_ATTN_SMEM];
    const int64_t E = g.E, Ev = g.Ev, L = g.L, S = g.S, nqt = (L + tile - 1) / tile;
    const int r = threadIdx.x;
    const float scale = (float)g.scale;
    float *ks = sm, *vs = ks + tile * E, *qr = vs + tile * Ev + r * E, *ar = sm + tile * (E + Ev) + tile * E + r * Ev;
    float *sr = sm + tile * (2 * E + 2 * Ev) + r * tile;
    for (int64_t blk = blockIdx.x; blk < g.B * nqt; blk += gridDim.x) {
        const int64_t b = blk / nqt, i0 = (blk % nqt) * tile, nq = L - i0 < tile ? L - i0 : tile, i = i0 + r;
        const int64_t mb = g.mask ? gdl_attn_mask_base(&g, b) : 0, send = g.causal && i0 + nq < S ? i0 + nq : S;
        const int64_t ko = gdl_attn_base(&g, b, g.kstr), vo = gdl_attn_base(&g, b, g.vstr);
        const bool live = r < nq;
        float m = -GDL__CU_INF, l = 0;
        if (live) {
            const int64_t qo = gdl_attn_base(&g, b, g.qstr) + i * g.qrow;
            for (int64_t e = 0; e < E; e++) qr[e] = gdl__ld(q[qo + e]);
            for (int64_t e = 0; e < Ev; e++) ar[e] = 0;
        }
        for (int64_t j0 = 0; j0 < send; j0 += tile) {
            const int64_t nk = send - j0 < tile ? send - j0 : tile;
            __syncthreads(); // the last tile's readers are done
            for (int64_t x = r; x < nk * E; x += tile) ks[x] = gdl__ld(k[ko + (j0 + x / E) * g.krow + x % E]);
            for (int64_t x = r; x < nk * Ev; x += tile) vs[x] = gdl__ld(v[vo + (j0 + x / Ev) * g.vrow + x % Ev]);
            __syncthreads();
            if (!live) continue;
            float mt = -GDL__CU_INF;
            for (int64_t j = 0; j < nk; j++) {
                sr[j] = scale * gdl__cu_attn_dot(qr, ks + j * E, E) + gdl__cu_attn_bias(g, mask, mb, i, j0 + j);
                if (sr[j] > mt) mt = sr[j];
            }
            if (mt == -GDL__CU_INF) continue; // no key of this tile takes part
            float mn = m > mt ? m : mt, alpha = expf(m - mn);
            l *= alpha;
            if (alpha != 1.0f)
                for (int64_t e = 0; e < Ev; e++) ar[e] *= alpha;
            for (int64_t j = 0; j < nk; j++) {
                float p = expf(sr[j] - mn);
                l += p;
                for (int64_t e = 0; e < Ev; e++) ar[e] += p * vs[j * Ev + e];
            }
            m = mn;
        }
        if (live) {
            float inv = l > 0 ? 1.0f / l : 0.0f;
            const int64_t oo = gdl_attn_base(&g, b, g.ostr) + i * g.orow;
            for (int64_t e = 0; e < Ev; e++) out[oo + e] = gdl__st<T>(ar[e] * inv);
            lse[b * L + i] = l > 0 ? m + logf(l) : GDL__CU_INF;
        }
        __syncthreads(); // the next tile's loads overwrite what this one's rows read
    }
}

// dq (+= into gq when not NULL) and delta, one thread per query row
template <typename T>
__global__ void gdl__k_attn_dq(gdl_attn_geom g, int tile, const T *q, const T *k, const T *v, const void *mask,
                               const T *out, const T *gout, const float *lse, float *delta, T *gq) {
    __shared__ float sm[GDL__CU_ATTN_SMEM];
    const int64_t E = g.E, Ev = g.Ev, L = g.L, S = g.S, nqt = (L + tile - 1) / tile;
    const int r = threadIdx.x;
    const float scale = (float)g.scale;
    float *ks = sm, *vs = ks + tile * E, *qr = vs + tile * Ev + r * E;
    float *gr = sm + tile * (2 * E + Ev) + r * Ev, *dq = sm + tile * (2 * E + 2 * Ev) + r * E;
    for (int64_t blk = blockIdx.x; blk < g.B * nqt; blk += gridDim.x) {
        const int64_t b = blk / nqt, i0 = (blk % nqt) * tile, nq = L - i0 < tile ? L - i0 : tile, i = i0 + r;
        const int64_t mb = g.mask ? gdl_attn_mask_base(&g, b) : 0, send = g.causal && i0 + nq < S ? i0 + nq : S;
        const int64_t ko = gdl_attn_base(&g, b, g.kstr), vo = gdl_attn_base(&g, b, g.vstr);
        const int64_t qo = gdl_attn_base(&g, b, g.qstr) + i * g.qrow, oo = gdl_attn_base(&g, b, g.ostr) + i * g.orow;
        const bool live = r < nq;
        float D = 0, ls = 0;
        if (live) {
            for (int64_t e = 0; e < Ev; e++) {
                gr[e] = gdl__ld(gout[oo + e]);
                D += gr[e] * gdl__ld(out[oo + e]);
            }
            delta[b * L + i] = D;
            ls = lse[b * L + i];
            for (int64_t e = 0; e < E; e++) {
                qr[e] = gdl__ld(q[qo + e]);
                dq[e] = 0;
            }
        }
        if (!gq) continue; // block-uniform: delta only
        for (int64_t j0 = 0; j0 < send; j0 += tile) {
            const int64_t nk = send - j0 < tile ? send - j0 : tile;
            __syncthreads();
            for (int64_t x = r; x < nk * E; x += tile) ks[x] = gdl__ld(k[ko + (j0 + x / E) * g.krow + x % E]);
            for (int64_t x = r; x < nk * Ev; x += tile) vs[x] = gdl__ld(v[vo + (j0 + x / Ev) * g.vrow + x % Ev]);
            __syncthreads();
            if (!live) continue;
            for (int64_t j = 0; j < nk; j++) {
                float s = scale * gdl__cu_attn_dot(qr, ks + j * E, E) + gdl__cu_attn_bias(g, mask, mb, i, j0 + j);
                float p = expf(s - ls);
                if (p == 0.0f) continue;
                float ds = scale * p * (gdl__cu_attn_dot(gr, vs + j * Ev, Ev) - D);
                for (int64_t e = 0; e < E; e++) dq[e] += ds * ks[j * E + e];
            }
        }
        if (live)
            for (int64_t e = 0; e < E; e++) gq[qo + e] = gdl__st<T>(gdl__ld(gq[qo + e]) + dq[e]);
        __syncthreads();
    }
}

// dk and dv (+= into gk, gv when not NULL), one thread per key row, walking the query tiles that see it; a block
// per (key/value entry, key tile): grouped-query, the group's query heads in turn
template <typename T>
__global__ void gdl__k_attn_dkv(gdl_attn_geom g, int tile, const T *q, const T *k, const T *v, const void *mask,
                                const T *gout, const float *lse, const float *delta, T *gk, T *gv) {
    __shared__ float sm[GDL__CU_ATTN_SMEM];
    const int64_t E = g.E, Ev = g.Ev, L = g.L, S = g.S, nkt = (S + tile - 1) / tile, G = g.group > 1 ? g.group : 1;
    const int r = threadIdx.x;
    const float scale = (float)g.scale;
    float *qs = sm, *gs = qs + tile * E, *kr = gs + tile * Ev + r * E, *vr = sm + tile * (2 * E + Ev) + r * Ev;
    float *dk = sm + tile * (2 * E + 2 * Ev) + r * E, *dv = sm + tile * (3 * E + 2 * Ev) + r * Ev;
    float *ls = sm + tile * (3 * E + 3 * Ev), *ds_ = ls + tile;
    for (int64_t blk = blockIdx.x; blk < g.B / G * nkt; blk += gridDim.x) {
        const int64_t kb = blk / nkt, j0 = (blk % nkt) * tile, nk = S - j0 < tile ? S - j0 : tile, j = j0 + r;
        const int64_t ko = gdl_attn_base(&g, kb * G, g.kstr) + j * g.krow, vo = gdl_attn_base(&g, kb * G, g.vstr) + j * g.vrow;
        const bool live = r < nk;
        if (live) {
            for (int64_t e = 0; e < E; e++) {
                kr[e] = gdl__ld(k[ko + e]);
                dk[e] = 0;
            }
            for (int64_t e = 0; e < Ev; e++) {
                vr[e] = gdl__ld(v[vo + e]);
                dv[e] = 0;
            }
        }
        for (int64_t b = kb * G; b < (kb + 1) * G; b++) {
            const int64_t mb = g.mask ? gdl_attn_mask_base(&g, b) : 0;
            const int64_t qo = gdl_attn_base(&g, b, g.qstr), oo = gdl_attn_base(&g, b, g.ostr);
            for (int64_t i0 = g.causal ? j0 / tile * tile : 0; i0 < L; i0 += tile) { // causal: rows i >= j0 only
                const int64_t nq = L - i0 < tile ? L - i0 : tile;
                __syncthreads();
                for (int64_t x = r; x < nq * E; x += tile) qs[x] = gdl__ld(q[qo + (i0 + x / E) * g.qrow + x % E]);
                for (int64_t x = r; x < nq * Ev; x += tile) gs[x] = gdl__ld(gout[oo + (i0 + x / Ev) * g.orow + x % Ev]);
                if (r < nq) {
                    ls[r] = lse[b * L + i0 + r];
                    ds_[r] = delta[b * L + i0 + r];
                }
                __syncthreads();
                if (!live) continue;
                for (int64_t x = 0; x < nq; x++) {
                    const float *qx = qs + x * E, *gx = gs + x * Ev;
                    float s = scale * gdl__cu_attn_dot(qx, kr, E) + gdl__cu_attn_bias(g, mask, mb, i0 + x, j);
                    float p = expf(s - ls[x]);
                    if (p == 0.0f) continue;
                    for (int64_t e = 0; e < Ev; e++) dv[e] += p * gx[e];
                    float d = scale * p * (gdl__cu_attn_dot(gx, vr, Ev) - ds_[x]);
                    for (int64_t e = 0; e < E; e++) dk[e] += d * qx[e];
                }
            }
        }
        if (live) { // one thread adds both, so gk and gv may be one buffer (k is v)
            if (gk)
                for (int64_t e = 0; e < E; e++) gk[ko + e] = gdl__st<T>(gdl__ld(gk[ko + e]) + dk[e]);
            if (gv)
                for (int64_t e = 0; e < Ev; e++) gv[vo + e] = gdl__st<T>(gdl__ld(gv[vo + e]) + dv[e]);
        }
        __syncthreads();
    }
}

static int gdl__cu_attn_check(const gdl_attn_geom *g) {
    if (g->E > GDL_ATTN_MAX_HEAD || g->Ev > GDL_ATTN_MAX_HEAD) {
        gdl__set_error("gdl_cuda: attention takes heads of at most %d, got E %lld and Ev %lld", GDL_ATTN_MAX_HEAD,
                       (long long)g->E, (long long)g->Ev);
        return -1;
    }
    return 0;
}

static int gdl__cu_attention(gdl_dtype dt, const gdl_attn_geom *g, const void *q, const void *k, const void *v,
                             const void *mask, void *out, float *lse) {
    const int tile = gdl__cu_attn_tile(g);
    const int64_t tiles = g->B * ((g->L + tile - 1) / tile);
    if (gdl__cu_attn_check(g) < 0) return -1;
    if (tiles <= 0) return 0;
    return gdl__cu_dispatch("attention", dt, 1, [&](auto t) {
        typedef typename decltype(t)::type T;
        GDL_CU_LAUNCH(gdl__k_attn_fwd<T>, gdl__cu_row_grid(tiles), tile, 0, gdl__cu_stream())(
            *g, tile, (const T *)q, (const T *)k, (const T *)v, mask, (T *)out, lse);
        GDL_CU_LAUNCHED();
        return 0;
    });
}

static int gdl__cu_attention_backward(gdl_dtype dt, const gdl_attn_geom *g, const void *q, const void *k, const void *v,
                                      const void *mask, const void *out, const void *gout, const float *lse,
                                      float *delta, void *gq, void *gk, void *gv) {
    const int tile = gdl__cu_attn_tile(g);
    const int64_t qtiles = g->B * ((g->L + tile - 1) / tile);
    const int64_t ktiles = g->B / (g->group > 1 ? g->group : 1) * ((g->S + tile - 1) / tile);
    if (gdl__cu_attn_check(g) < 0) return -1;
    if (qtiles <= 0) return 0;
    return gdl__cu_dispatch("attention_backward", dt, 1, [&](auto t) {
        typedef typename decltype(t)::type T;
        GDL_CU_LAUNCH(gdl__k_attn_dq<T>, gdl__cu_row_grid(qtiles), tile, 0, gdl__cu_stream())(
            *g, tile, (const T *)q, (const T *)k, (const T *)v, mask, (const T *)out, (const T *)gout, lse, delta, (T *)gq);
        GDL_CU_LAUNCHED();
        if ((gk || gv) && ktiles > 0) {
            GDL_CU_LAUNCH(gdl__k_attn_dkv<T>, gdl__cu_row_grid(ktiles), tile, 0, gdl__cu_stream())(
                *g, tile, (const T *)q, (const T *)k, (const T *)v, mask, (const T *)gout, lse, delta, (T *)gk, (T *)gv);
            GDL_CU_LAUNCHED();
        }
        return 0;
    });
}
// ----------------------------------------------------------------------------
// the fused LSTM / GRU gate steps (gdl_lstm_gates, gdl_gru_gates) and their
// backwards: one thread per (row, unit), reading the unit's G pre-activations
// from gx and gh and writing the new state; the backward recomputes the gates
// (nothing saved). Each thread owns its G gradient slots, so the += need no
// atomics, and gx and gh may share one gradient buffer. The arithmetic is the
// CPU's f32 code (src/cpu/rnn.h: gdl__rnn_exp_m, gdl__lstm_row, gdl__gru_row)
// op for op, its constants copied: every a*b+c an explicit fmaf and no product
// added by a plain + (nvcc would contract it), IEEE division, so the two agree
// bit for bit.

#define GDL__CU_RNN_EXP_LO -87.0f
#define GDL__CU_RNN_EXP_HI 88.0f
#define GDL__CU_RNN_TANH_T 0.5625f

// e^x = the result times *scale (2^k, exact); the polynomial is the GELU's of e^-r
__device__ __forceinline__ float gdl__cu_rnn_exp_m(float x, float *scale) {
    x = x < GDL__CU_RNN_EXP_HI ? x : GDL__CU_RNN_EXP_HI;
    x = x > GDL__CU_RNN_EXP_LO ? x : GDL__CU_RNN_EXP_LO;
    float kf = rintf(x * 1.44269502f), r = fmaf(-kf, 0.693147182f, x), p = -0.000197402551f;
    r = -fmaf(-kf, -1.90465421e-09f, r);
    p = fmaf(p, r, 0.00139350793f);
    p = fmaf(p, r, -0.00833357032f);
    p = fmaf(p, r, 0.041666463f);
    p = fmaf(p, r, -0.166666657f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, -1.0f);
    *scale = __int_as_float(((int)kf + 127) << 23);
    return fmaf(p, r, 1.0f);
}
__device__ __forceinline__ float gdl__cu_rnn_sigm(float v) {
    float s, m = gdl__cu_rnn_exp_m(-v, &s);
    return v != v ? v : 1.0f / fmaf(m, s, 1.0f);
}
__device__ __forceinline__ float gdl__cu_rnn_tanh(float v) {
    float a = fabsf(v);
    if (v != v) return v;
    if (a < GDL__CU_RNN_TANH_T) {
        float v2 = v * v, p = -0.00616940018f;
        p = fmaf(p, v2, 0.0209991485f);
        p = fmaf(p, v2, -0.0538351126f);
        p = fmaf(p, v2, 0.133324265f);
        p = fmaf(p, v2, -0.333333135f);
        return v * fmaf(v2, p, 1.0f);
    }
    float s, m = gdl__cu_rnn_exp_m(-2.0f * a, &s), t = fmaf(-m, s, 1.0f) / fmaf(m, s, 1.0f);
    return v < 0 ? -t : t;
}

__global__ void gdl__k_lstm_gates(int64_t B, int64_t H, const float *gx, const float *gh, const float *c_prev,
                                  float *hc, const float *dhc, float *dgx, float *dgh, float *dc_prev) {
    GDL_CU_LOOP(t, B * H) {
        int64_t b = t / H, j = t - b * H, base = b * 4 * H + j;
        float gi = gdl__cu_rnn_sigm(gx[base] + gh[base]);
        float gf = gdl__cu_rnn_sigm(gx[base + H] + gh[base + H]);
        float gg = gdl__cu_rnn_tanh(gx[base + 2 * H] + gh[base + 2 * H]);
        float go = gdl__cu_rnn_sigm(gx[base + 3 * H] + gh[base + 3 * H]);
        float cp = c_prev[t], c = fmaf(gf, cp, gi * gg), tc = gdl__cu_rnn_tanh(c);
        if (!dhc) { // forward
            hc[t] = go * tc;
            hc[B * H + t] = c;
            continue;
        }
        float dh = dhc[t], dc = fmaf(dh * go, fmaf(-tc, tc, 1.0f), dhc[B * H + t]);
        float a[4] = {dc * gg, dc * cp, dc * gi, dh * tc};
        float m[4] = {gi * (1.0f - gi), gf * (1.0f - gf), fmaf(-gg, gg, 1.0f), go * (1.0f - go)};
        for (int k = 0; k < 4; k++) {
            if (dgx) dgx[base + k * H] = fmaf(a[k], m[k], dgx[base + k * H]);
            if (dgh) dgh[base + k * H] = fmaf(a[k], m[k], dgh[base + k * H]);
        }
        if (dc_prev) dc_prev[t] = fmaf(dc, gf, dc_prev[t]);
    }
}

__global__ void gdl__k_gru_gates(int64_t B, int64_t H, const float *gx, const float *gh, const float *h_prev,
                                 float *h, const float *dh, float *dgx, float *dgh, float *dh_prev) {
    GDL_CU_LOOP(t, B * H) {
        int64_t b = t / H, j = t - b * H, base = b * 3 * H + j;
        float r = gdl__cu_rnn_sigm(gx[base] + gh[base]);
        float z = gdl__cu_rnn_sigm(gx[base + H] + gh[base + H]);
        float hn = gh[base + 2 * H], n = gdl__cu_rnn_tanh(fmaf(r, hn, gx[base + 2 * H])), hp = h_prev[t];
        if (!dh) { // forward
            h[t] = fmaf(z, hp, (1.0f - z) * n);
            continue;
        }
        float g = dh[t], a[3], m[3];
        a[2] = g * (1.0f - z), m[2] = fmaf(-n, n, 1.0f);
        a[0] = a[2] * m[2] * hn, m[0] = r * (1.0f - r);
        a[1] = g * (hp - n), m[1] = z * (1.0f - z);
        for (int k = 0; k < 3; k++) {
            if (dgx) dgx[base + k * H] = fmaf(a[k], m[k], dgx[base + k * H]);
            // r scales gh_n only
            if (dgh) dgh[base + k * H] = fmaf(k == 2 ? a[2] * m[2] : a[k], k == 2 ? r : m[k], dgh[base + k * H]);
        }
        if (dh_prev) dh_prev[t] = fmaf(g, z, dh_prev[t]);
    }
}

static int gdl__cu_lstm_gates(int64_t B, int64_t H, const float *gx, const float *gh, const float *c_prev, float *hc) {
    if (B * H <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_lstm_gates, gdl__cu_grid(B * H, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        B, H, gx, gh, c_prev, hc, (const float *)NULL, (float *)NULL, (float *)NULL, (float *)NULL);
    GDL_CU_LAUNCHED();
    return 0;
}
static int gdl__cu_lstm_gates_backward(int64_t B, int64_t H, const float *gx, const float *gh, const float *c_prev,
                                       const float *dhc, float *dgx, float *dgh, float *dc_prev) {
    if (B * H <= 0 || (!dgx && !dgh && !dc_prev)) return 0;
    GDL_CU_LAUNCH(gdl__k_lstm_gates, gdl__cu_grid(B * H, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        B, H, gx, gh, c_prev, (float *)NULL, dhc, dgx, dgh, dc_prev);
    GDL_CU_LAUNCHED();
    return 0;
}
static int gdl__cu_gru_gates(int64_t B, int64_t H, const float *gx, const float *gh, const float *h_prev, float *h) {
    if (B * H <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_gru_gates, gdl__cu_grid(B * H, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        B, H, gx, gh, h_prev, h, (const float *)NULL, (float *)NULL, (float *)NULL, (float *)NULL);
    GDL_CU_LAUNCHED();
    return 0;
}
static int gdl__cu_gru_gates_backward(int64_t B, int64_t H, const float *gx, const float *gh, const float *h_prev,
                                      const float *dh, float *dgx, float *dgh, float *dh_prev) {
    if (B * H <= 0 || (!dgx && !dgh && !dh_prev)) return 0;
    GDL_CU_LAUNCH(gdl__k_gru_gates, gdl__cu_grid(B * H, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        B, H, gx, gh, h_prev, (float *)NULL, dh, dgx, dgh, dh_prev);
    GDL_CU_LAUNCHED();
    return 0;
}
// ----------------------------------------------------------------------------
// INT8 (the quantized layers of src/api/quant.h): the int8 GEMM, quantize,
// dequantize, min / max, the u8 columns of a convolution, the epilogue. The
// arithmetic of quantize and the epilogue is gpudl.h's gdl_q_* (the CPU's).
//
// The GEMM, C [M, N] (int32) = A [M, K] (u8) x W [N, K]^T (s8), exact. cuBLAS's
// int8 GEMM is s8 x s8 (cublasGemmEx: CUDA_R_8I operands, CUDA_R_32I C,
// CUBLAS_COMPUTE_32I), so A is shifted to s8 (a - 128) and 128 * colsum[n]
// (W's row sums) added back, exact in int32 (K <= GDL_GEMM_INT8_MAX_K). The
// rules cuBLAS documents for that path: alpha and beta 0 or 1, A and B
// 32-bit aligned, lda and ldb multiples of 4; gpudl also keeps m, n, k and ldc
// multiples of 4 (the shapes of the integer tensor-core kernels; others may be
// refused). W is kept with K padded by zeros to KP (a multiple of 4), so the
// GEMM runs over KP and a row's bytes past K (any value) meet zeros. Any
// other shape, and any call cuBLAS refuses with CUBLAS_STATUS_NOT_SUPPORTED,
// runs the fallback: a tiled int32 kernel, exact for any shape.

struct gdl__cu_qweight {
    int N, K, KP;
    int8_t *w;       // [N, KP], the padding 0
    int32_t *colsum; // [N]
};

static void gdl__cu_qweight_free(void *p) {
    gdl__cu_qweight *q = (gdl__cu_qweight *)p;
    if (!q) return;
    gdl__cu_free(q->w);
    gdl__cu_free(q->colsum);
    free(q);
}

static void *gdl__cu_qweight_new(int N, int K, const int8_t *w, const int32_t *colsum) {
    gdl__cu_qweight *q = (gdl__cu_qweight *)calloc(1, sizeof *q);
    int KP = (K + 3) / 4 * 4;
    size_t bytes = (size_t)N * KP;
    std::vector<int8_t> pad(bytes ? bytes : 1, 0);
    if (!q) {
        gdl__set_error("%s: out of memory", gdl__backend_op());
        return NULL;
    }
    q->N = N;
    q->K = K;
    q->KP = KP;
    for (int n = 0; n < N; n++)
        if (K) memcpy(&pad[(size_t)n * KP], w + (size_t)n * K, (size_t)K);
    q->w = (int8_t *)gdl__cu_alloc(bytes ? bytes : 1);
    q->colsum = (int32_t *)gdl__cu_alloc(sizeof(int32_t) * (size_t)(N ? N : 1));
    if (!q->w || !q->colsum || gdl__cu_copy(q->w, pad.data(), bytes, 0) < 0 ||
        gdl__cu_copy(q->colsum, colsum, sizeof(int32_t) * (size_t)N, 0) < 0) {
        gdl__cu_qweight_free(q);
        return NULL;
    }
    return q;
}

#define GDL__QT 16 // the fallback's tile: 16 x 16 outputs, K in steps of 16

// C = A x W^T over any shape, one output per thread; tile rows loop over
// gridDim.y (capped) so any M runs.
__global__ void gdl__k_qgemm_tiled(int M, int N, int K, const uint8_t *A, int lda, const int8_t *W, int ldw,
                                   int32_t *C, int ldc) {
    __shared__ int32_t sa[GDL__QT][GDL__QT + 1], sw[GDL__QT][GDL__QT + 1];
    const int tx = threadIdx.x % GDL__QT, ty = threadIdx.x / GDL__QT;
    const int n = blockIdx.x * GDL__QT + tx;
    for (int64_t r0 = (int64_t)blockIdx.y * GDL__QT; r0 < M; r0 += (int64_t)gridDim.y * GDL__QT) {
        const int64_t m = r0 + ty;
        int32_t acc = 0;
        for (int k0 = 0; k0 < K; k0 += GDL__QT) {
            const int64_t wn = (int64_t)blockIdx.x * GDL__QT + ty; // the W row this thread loads
            sa[ty][tx] = m < M && k0 + tx < K ? (int32_t)A[m * lda + k0 + tx] : 0;
            sw[ty][tx] = wn < N && k0 + tx < K ? (int32_t)W[wn * ldw + k0 + tx] : 0;
            __syncthreads();
            for (int k = 0; k < GDL__QT; k++) acc += sa[ty][k] * sw[tx][k];
            __syncthreads();
        }
        if (m < M && n < N) C[m * ldc + n] = acc;
    }
}

// s8 copy of A's rows: a - 128, KP bytes a row (lda apart in A)
__global__ void gdl__k_q_shift(int64_t M, int KP, const uint8_t *A, int lda, int8_t *S) {
    GDL_CU_LOOP(t, M * KP) S[t] = (int8_t)((int)A[(t / KP) * lda + t % KP] - 128);
}

// C[m][n] += 128 * colsum[n]: the shift taken back
__global__ void gdl__k_q_unshift(int64_t M, int N, const int32_t *colsum, int32_t *C, int ldc) {
    GDL_CU_LOOP(t, M * N) C[(t / N) * ldc + t % N] += 128 * colsum[t % N];
}

// the fallback over the whole of C
static int gdl__cu_qgemm_tiled(int M, const uint8_t *A, int lda, const gdl__cu_qweight *q, int32_t *C, int ldc) {
    dim3 grid((unsigned)((q->N + GDL__QT - 1) / GDL__QT), (unsigned)gdl__cu_cap(std::min(65535, (M + GDL__QT - 1) / GDL__QT)));
    GDL_CU_LAUNCH(gdl__k_qgemm_tiled, grid, GDL__QT * GDL__QT, 0, gdl__cu_stream())(M, q->N, q->K, A, lda, q->w, q->KP,
                                                                                    C, ldc);
    GDL_CU_LAUNCHED();
    return 0;
}

// cuBLAS on the shifted A: 1 done, 0 refused (NOT_SUPPORTED: the fallback runs), -1 error
static int gdl__cu_qgemm_blas(int M, const uint8_t *A, int lda, const gdl__cu_qweight *q, int32_t *C, int ldc) {
    cublasHandle_t h = gdl__cu_blas();
    if (!h) return -1;
    int8_t *S = (int8_t *)gdl__cu_alloc((size_t)M * q->KP);
    if (!S) return -1;
    GDL_CU_LAUNCH(gdl__k_q_shift, gdl__cu_grid((int64_t)M * q->KP, GDL__CU_THREADS), GDL__CU_THREADS, 0,
                  gdl__cu_stream())((int64_t)M, q->KP, A, lda, S);
    cudaError_t le = cudaGetLastError();
    const int32_t one = 1, zero = 0;
    cublasStatus_t st = CUBLAS_STATUS_EXECUTION_FAILED;
    if (le == cudaSuccess) { // row-major C = A W^T is column-major C^T = W^T(op T) A (see cuda/gemm.cu)
        gdl__cu_launches.fetch_add(1, std::memory_order_relaxed);
        st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, q->N, M, q->KP, &one, q->w, CUDA_R_8I, q->KP, S, CUDA_R_8I,
                          q->KP, &zero, C, CUDA_R_32I, ldc, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
    }
    gdl__cu_free(S); // stream order: the GEMM is queued before any reuse
    GDL_CU_TRY(le, -1);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) return 0;
    GDL_CUBLAS_TRY(st, -1);
    GDL_CU_LAUNCH(gdl__k_q_unshift, gdl__cu_grid((int64_t)M * q->N, GDL__CU_THREADS), GDL__CU_THREADS, 0,
                  gdl__cu_stream())((int64_t)M, q->N, q->colsum, C, ldc);
    GDL_CU_LAUNCHED();
    return 1;
}

static int gdl__cu_qgemm(int M, const uint8_t *A, int lda, const void *qw, int32_t *C, int ldc) {
    const gdl__cu_qweight *q = (const gdl__cu_qweight *)qw;
    if (M < 0 || lda < q->KP || ldc < q->N) {
        gdl__set_error("%s: the int8 GEMM cannot take M=%d (>= 0), lda=%d (>= %d: K=%d rounded up to 4), "
                       "ldc=%d (>= N=%d)", gdl__backend_op(), M, lda, q->KP, q->K, ldc, q->N);
        return -1;
    }
    if (M == 0 || q->N == 0) return 0;
    bool blas = q->K > 0 && M % 4 == 0 && q->N % 4 == 0 && lda % 4 == 0 && ldc % 4 == 0 &&
                (uintptr_t)A % 4 == 0 && (uintptr_t)C % 4 == 0;
    if (blas) {
        int r = gdl__cu_qgemm_blas(M, A, lda, q, C, ldc);
        if (r != 0) return r < 0 ? -1 : 0;
    }
    return gdl__cu_qgemm_tiled(M, A, lda, q, C, ldc);
}

#define GDL__Q_BIG 12582912.0f // 1.5 * 2^23: gdl_q_round's constant (nvcc keeps x + big - big without fast-math)

__global__ void gdl__k_quantize(int64_t rows, int64_t k, const float *x, float inv, float z, float qmin, float qmax,
                                int sgn, uint8_t *q, int64_t ldq) {
    GDL_CU_LOOP(t, rows * ldq) {
        const int64_t i = t / ldq, j = t % ldq;
        const float r = j < k ? gdl_q_quantize1(x[i * k + j], inv, z, qmin, qmax, GDL__Q_BIG) : 0.0f;
        q[t] = sgn ? (uint8_t)(int8_t)r : (uint8_t)r;
    }
}

static int gdl__cu_quantize(int64_t rows, int64_t k, const float *x, float s, int32_t z, int qmin, int qmax, void *q,
                            int64_t ldq) {
    int64_t n = rows * ldq;
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_quantize, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        rows, k, x, 1.0f / s, (float)z, (float)qmin, (float)qmax, qmin < 0, (uint8_t *)q, ldq);
    GDL_CU_LAUNCHED();
    return 0;
}

__global__ void gdl__k_dequantize(int64_t n, const uint8_t *q, int sgn, float s, int32_t z, float *y) {
    GDL_CU_LOOP(i, n) {
        const int32_t v = sgn ? (int32_t)(int8_t)q[i] : (int32_t)q[i];
        y[i] = GDL_Q_MUL((float)(v - z), s);
    }
}

static int gdl__cu_dequantize(int64_t n, const void *q, int is_signed, float s, int32_t z, float *y) {
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_dequantize, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        n, (const uint8_t *)q, is_signed, s, z, y);
    GDL_CU_LAUNCHED();
    return 0;
}

#define GDL__QMM_BLOCKS 64 // min / max: partial results per block, combined on the host

// part[3b..3b+2] = block b's min, max (NaN left out) and NaN count
__global__ void gdl__k_qminmax(int64_t n, const float *x, float *part) {
    float lo = GDL__CU_INF, hi = -GDL__CU_INF;
    int bad = 0;
    GDL_CU_LOOP(i, n) {
        const float v = x[i];
        if (v != v) bad = 1;
        else {
            lo = fminf(lo, v);
            hi = fmaxf(hi, v);
        }
    }
    lo = -gdl__block_max(-lo);
    hi = gdl__block_max(hi);
    bad = gdl__block_sum(bad);
    if (threadIdx.x == 0) {
        part[3 * blockIdx.x] = lo;
        part[3 * blockIdx.x + 1] = hi;
        part[3 * blockIdx.x + 2] = (float)bad;
    }
}

static int gdl__cu_qminmax(int64_t n, const float *x, float *out) {
    float part[3 * GDL__QMM_BLOCKS];
    unsigned g = std::min(gdl__cu_grid(n, GDL__CU_THREADS), (unsigned)GDL__QMM_BLOCKS);
    out[0] = out[1] = out[2] = 0;
    if (n <= 0) return 0; // as the CPU: 0, 0 for nothing
    float *d = (float *)gdl__cu_alloc(sizeof part);
    if (!d) return -1;
    GDL_CU_LAUNCH(gdl__k_qminmax, g, GDL__CU_THREADS, 0, gdl__cu_stream())(n, x, d);
    cudaError_t le = cudaGetLastError();
    int rc = le == cudaSuccess ? gdl__cu_copy(part, d, sizeof(float) * 3 * g, 1) : -1;
    gdl__cu_free(d);
    GDL_CU_TRY(le, -1);
    if (rc < 0) return -1;
    out[0] = part[0];
    out[1] = part[1];
    for (unsigned b = 0; b < g; b++) {
        out[0] = std::min(out[0], part[3 * b]);
        out[1] = std::max(out[1], part[3 * b + 1]);
        out[2] += part[3 * b + 2];
    }
    return 0;
}

// one sample's u8 columns: row p (output position) of KP bytes, taps outside the image za
__global__ void gdl__k_qim2col(gdl_conv_geom g, const uint8_t *x, uint8_t za, uint8_t *cols, int64_t KP) {
    const int64_t taps = (int64_t)g.C * g.KH * g.KW;
    GDL_CU_LOOP(t, (int64_t)g.OH * g.OW * KP) {
        const int64_t p = t / KP, col = t % KP;
        uint8_t v = 0;
        if (col < taps) {
            const int c = (int)(col / (g.KH * g.KW)), i = (int)(col / g.KW % g.KH), j = (int)(col % g.KW);
            const int64_t y = p / g.OW * g.SH - g.PH + i * g.DH, xx = p % g.OW * g.SW - g.PW + j * g.DW;
            v = (y < 0 || y >= g.H || xx < 0 || xx >= g.W) ? za : x[((int64_t)c * g.H + y) * g.W + xx];
        }
        cols[t] = v;
    }
}

static int gdl__cu_qim2col(const gdl_conv_geom *g, const uint8_t *x, int32_t za, uint8_t *cols, int64_t KP) {
    int64_t n = (int64_t)g->OH * g->OW * KP;
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_qim2col, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        *g, x, (uint8_t)za, cols, KP);
    GDL_CU_LAUNCHED();
    return 0;
}

__global__ void gdl__k_qepilogue(gdl_qepi e, int64_t rows, const int32_t *acc, float *y) {
    GDL_CU_LOOP(t, rows * e.N) {
        const int64_t i = t / e.N, n = t % e.N;
        y[e.pos ? n * e.pos + i : t] = gdl_q_epilogue1(&e, acc[t], n, GDL__Q_BIG);
    }
}

static int gdl__cu_qepilogue(const gdl_qepi *e, int64_t rows, const int32_t *acc, float *y) {
    int64_t n = rows * e->N;
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_qepilogue, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        *e, rows, acc, y);
    GDL_CU_LAUNCHED();
    return 0;
}
// ----------------------------------------------------------------------------
// convolution columns and pooling (NCHW, one (n,c) plane after another)

// im2col: one thread per column element [n][c*KH*KW + kh*KW + kw][oh*OW + ow];
// writes are coalesced along ow
template <typename T> __global__ void gdl__k_im2col(gdl_conv_geom g, const T *x, T *col) {
    int64_t OHW = (int64_t)g.OH * g.OW, total = (int64_t)g.N * g.C * g.KH * g.KW * OHW;
    GDL_CU_LOOP(t, total) {
        int64_t row = t / OHW; /* (nc, kh, kw) */
        int ohw = (int)(t - row * OHW), oh = ohw / g.OW, ow = ohw - oh * g.OW;
        int kk = (int)(row % (g.KH * g.KW)), kh = kk / g.KW, kw = kk - kh * g.KW;
        int64_t nc = row / (g.KH * g.KW);
        int ih = oh * g.SH - g.PH + kh * g.DH, iw = ow * g.SW - g.PW + kw * g.DW;
        col[t] = (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) ? x[(nc * g.H + ih) * g.W + iw] : gdl__st<T>(0.0f);
    }
}

// col2im: one thread per input pixel gathers the column entries that read
// it: for each (kh, kw) at most one output position. Visiting (kh, kw) in
// order and adding into x[...] repeats the CPU's sums exactly, with no atomics.
template <typename T> __global__ void gdl__k_col2im(gdl_conv_geom g, const T *col, T *x) {
    int64_t OHW = (int64_t)g.OH * g.OW, HW = (int64_t)g.H * g.W, total = (int64_t)g.N * g.C * HW;
    GDL_CU_LOOP(t, total) {
        int64_t nc = t / HW;
        int hw = (int)(t - nc * HW), ih = hw / g.W, iw = hw - ih * g.W;
        const T *cp = col + nc * g.KH * g.KW * OHW;
        float acc = gdl__ld(x[t]);
        for (int kh = 0; kh < g.KH; kh++) {
            int h = ih + g.PH - kh * g.DH;
            if (h < 0 || h % g.SH) continue;
            int oh = h / g.SH;
            if (oh >= g.OH) continue;
            for (int kw = 0; kw < g.KW; kw++) {
                int w = iw + g.PW - kw * g.DW;
                if (w < 0 || w % g.SW) continue;
                int ow = w / g.SW;
                if (ow >= g.OW) continue;
                acc += gdl__ld(cp[(int64_t)(kh * g.KW + kw) * OHW + oh * g.OW + ow]);
            }
        }
        x[t] = gdl__st<T>(acc);
    }
}

// Launches a kernel of one thread per output, total of them, that reads `in` and writes `out` by the geometry
// g; nothing where total or `terms` (what each output sums) is 0. Through a pointer: the template's commas
// would split GDL_CU_LAUNCH's arguments.
template <typename T>
static int gdl__cu_geom_launch(void (*gdl__k_geom)(gdl_conv_geom, const T *, T *), const gdl_conv_geom *g, int64_t total,
                               int64_t terms, const T *in, T *out) {
    if (total <= 0 || terms <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_geom, gdl__cu_grid(total, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(*g, in, out);
    GDL_CU_LAUNCHED();
    return 0;
}

template <typename T> static int gdl__cu_im2col_t(const gdl_conv_geom *g, const T *x, T *col) {
    return gdl__cu_geom_launch<T>(gdl__k_im2col<T>, g, (int64_t)g->N * g->C * g->KH * g->KW * g->OH * g->OW, 1, x, col);
}
template <typename T> static int gdl__cu_col2im_t(const gdl_conv_geom *g, const T *col, T *x) {
    return gdl__cu_geom_launch<T>(gdl__k_col2im<T>, g, (int64_t)g->N * g->C * g->H * g->W,
                                  (int64_t)g->KH * g->KW * g->OH * g->OW, col, x);
}

static int gdl__cu_im2col_f32(const gdl_conv_geom *g, const float *x, float *col) { return gdl__cu_im2col_t<float>(g, x, col); }
static int gdl__cu_col2im_f32(const gdl_conv_geom *g, const float *col, float *x) { return gdl__cu_col2im_t<float>(g, col, x); }
// No implicit GEMM here: cuBLAS wants its operands in memory, so the op layer runs im2col + cuBLAS (+ col2im).
static int gdl__cu_conv_implicit(int, const gdl_conv_geom *, int, int, int, const float *, const float *, const float *,
                                 const float *, float *, float *) {
    return 1;
}

// gdl__cu_NAME(dt, g, in, out): a gdl_conv_geom op on one tensor (im2col, col2im, avgpool and its backward)
// in any dtype: gdl__cu_NAME_f32 for f32, else gdl__cu_NAME_t<T> for the dtype's storage type
#define GDL__CU_GEOM_DTYPES(NAME)                                                                     \
    static int gdl__cu_##NAME(gdl_dtype dt, const gdl_conv_geom *g, const void *in, void *out) {       \
        if (dt == GDL_F32) return gdl__cu_##NAME##_f32(g, (const float *)in, (float *)out);            \
        return gdl__cu_dispatch(#NAME, dt, 0, [&](auto t) {                                            \
            typedef typename decltype(t)::type T;                                                      \
            return gdl__cu_##NAME##_t(g, (const T *)in, (T *)out);                                     \
        });                                                                                            \
    }
GDL__CU_GEOM_DTYPES(im2col)
GDL__CU_GEOM_DTYPES(col2im)

// max pooling: one thread per output, the CPU's scan (first max, first NaN)
template <typename T> __global__ void gdl__k_maxpool(gdl_conv_geom g, const T *x, T *y, int32_t *idx) {
    int64_t OHW = (int64_t)g.OH * g.OW, total = (int64_t)g.N * g.C * OHW;
    GDL_CU_LOOP(t, total) {
        int64_t p = t / OHW;
        int o = (int)(t - p * OHW), oh = o / g.OW, ow = o - oh * g.OW;
        const T *xp = x + p * g.H * g.W;
        float best = -GDL__CU_INF;
        int bi = -1;
        for (int kh = 0; kh < g.KH; kh++) {
            int ih = oh * g.SH - g.PH + kh * g.DH;
            if (ih < 0 || ih >= g.H) continue;
            for (int kw = 0; kw < g.KW; kw++) {
                int iw = ow * g.SW - g.PW + kw * g.DW;
                if (iw < 0 || iw >= g.W) continue;
                float v = gdl__ld(xp[ih * g.W + iw]);
                if (bi < 0 || v > best || (v != v && best == best)) {
                    best = v;
                    bi = ih * g.W + iw;
                }
            }
        }
        y[t] = gdl__st<T>(best); /* exact: one of x's values */
        idx[t] = bi < 0 ? 0 : bi;
    }
}

// Backward by gathering: one thread per input pixel looks at the outputs
// whose window covers it and adds gy where the saved index names it. kh and
// kw run downwards so that outputs come in ascending order, the CPU's order.
// beta 0: gx is unset and written, not read (no memset before it).
template <typename T>
__global__ void gdl__k_maxpool_backward(gdl_conv_geom g, const T *gy, const int32_t *idx, T *gx, int beta) {
    int64_t OHW = (int64_t)g.OH * g.OW, HW = (int64_t)g.H * g.W, total = (int64_t)g.N * g.C * HW;
    GDL_CU_LOOP(t, total) {
        int64_t p = t / HW;
        int hw = (int)(t - p * HW), ih = hw / g.W, iw = hw - ih * g.W;
        const T *gp = gy + p * OHW;
        const int32_t *ip = idx + p * OHW;
        float acc = beta ? gdl__ld(gx[t]) : 0.0f;
        for (int kh = g.KH - 1; kh >= 0; kh--) {
            int h = ih + g.PH - kh * g.DH;
            if (h < 0 || h % g.SH) continue;
            int oh = h / g.SH;
            if (oh >= g.OH) continue;
            for (int kw = g.KW - 1; kw >= 0; kw--) {
                int w = iw + g.PW - kw * g.DW;
                if (w < 0 || w % g.SW) continue;
                int ow = w / g.SW;
                if (ow >= g.OW) continue;
                if (ip[oh * g.OW + ow] == hw) acc += gdl__ld(gp[oh * g.OW + ow]);
            }
        }
        gx[t] = gdl__st<T>(acc);
    }
}

template <typename T> static int gdl__cu_maxpool_t(const gdl_conv_geom *g, const T *x, T *y, int32_t *idx) {
    int64_t total = (int64_t)g->N * g->C * g->OH * g->OW;
    if (total <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_maxpool<T>, gdl__cu_grid(total, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(*g, x, y, idx);
    GDL_CU_LAUNCHED();
    return 0;
}

template <typename T>
static int gdl__cu_maxpool_backward_t(const gdl_conv_geom *g, const T *gy, const int32_t *idx, T *gx, int beta) {
    int64_t total = (int64_t)g->N * g->C * g->H * g->W;
    if (total <= 0 || (int64_t)g->OH * g->OW <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_maxpool_backward<T>, gdl__cu_grid(total, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(*g, gy, idx, gx, beta);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_maxpool_f32(const gdl_conv_geom *g, const float *x, float *y, int32_t *idx) {
    return gdl__cu_maxpool_t<float>(g, x, y, idx);
}
static int gdl__cu_maxpool_backward_f32(const gdl_conv_geom *g, const float *gy, const int32_t *idx, float *gx, int beta) {
    return gdl__cu_maxpool_backward_t<float>(g, gy, idx, gx, beta);
}
static int gdl__cu_maxpool(gdl_dtype dt, const gdl_conv_geom *g, const void *x, void *y, int32_t *idx) {
    if (dt == GDL_F32) return gdl__cu_maxpool_f32(g, (const float *)x, (float *)y, idx);
    return gdl__cu_dispatch("maxpool", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_maxpool_t(g, (const T *)x, (T *)y, idx);
    });
}
static int gdl__cu_maxpool_backward(gdl_dtype dt, const gdl_conv_geom *g, const void *gy, const int32_t *idx, void *gx,
                                    int beta) {
    if (dt == GDL_F32) return gdl__cu_maxpool_backward_f32(g, (const float *)gy, idx, (float *)gx, beta);
    return gdl__cu_dispatch("maxpool_backward", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_maxpool_backward_t(g, (const T *)gy, idx, (T *)gx, beta);
    });
}

// average pooling counts the padding: always divide by KH*KW. Like the CPU,
// no dilation (pooling windows are dense).
template <typename T> __global__ void gdl__k_avgpool(gdl_conv_geom g, const T *x, T *y) {
    int64_t OHW = (int64_t)g.OH * g.OW, total = (int64_t)g.N * g.C * OHW;
    GDL_CU_LOOP(t, total) {
        int64_t p = t / OHW;
        int o = (int)(t - p * OHW), oh = o / g.OW, ow = o - oh * g.OW;
        const T *xp = x + p * g.H * g.W;
        float s = 0;
        for (int kh = 0; kh < g.KH; kh++) {
            int ih = oh * g.SH - g.PH + kh;
            if (ih < 0 || ih >= g.H) continue;
            for (int kw = 0; kw < g.KW; kw++) {
                int iw = ow * g.SW - g.PW + kw;
                if (iw >= 0 && iw < g.W) s += gdl__ld(xp[ih * g.W + iw]);
            }
        }
        y[t] = gdl__st<T>(s / (float)(g.KH * g.KW));
    }
}

// gathering, in the CPU's order (ascending outputs), as maxpool_backward
template <typename T> __global__ void gdl__k_avgpool_backward(gdl_conv_geom g, const T *gy, T *gx) {
    int64_t OHW = (int64_t)g.OH * g.OW, HW = (int64_t)g.H * g.W, total = (int64_t)g.N * g.C * HW;
    float area = (float)(g.KH * g.KW);
    GDL_CU_LOOP(t, total) {
        int64_t p = t / HW;
        int hw = (int)(t - p * HW), ih = hw / g.W, iw = hw - ih * g.W;
        const T *gp = gy + p * OHW;
        float acc = gdl__ld(gx[t]);
        for (int kh = g.KH - 1; kh >= 0; kh--) {
            int h = ih + g.PH - kh;
            if (h < 0 || h % g.SH) continue;
            int oh = h / g.SH;
            if (oh >= g.OH) continue;
            for (int kw = g.KW - 1; kw >= 0; kw--) {
                int w = iw + g.PW - kw;
                if (w < 0 || w % g.SW) continue;
                int ow = w / g.SW;
                if (ow >= g.OW) continue;
                acc += gdl__ld(gp[oh * g.OW + ow]) / area;
            }
        }
        gx[t] = gdl__st<T>(acc);
    }
}

template <typename T> static int gdl__cu_avgpool_t(const gdl_conv_geom *g, const T *x, T *y) {
    return gdl__cu_geom_launch<T>(gdl__k_avgpool<T>, g, (int64_t)g->N * g->C * g->OH * g->OW, 1, x, y);
}
template <typename T> static int gdl__cu_avgpool_backward_t(const gdl_conv_geom *g, const T *gy, T *gx) {
    return gdl__cu_geom_launch<T>(gdl__k_avgpool_backward<T>, g, (int64_t)g->N * g->C * g->H * g->W,
                                  (int64_t)g->OH * g->OW, gy, gx);
}

static int gdl__cu_avgpool_f32(const gdl_conv_geom *g, const float *x, float *y) { return gdl__cu_avgpool_t<float>(g, x, y); }
static int gdl__cu_avgpool_backward_f32(const gdl_conv_geom *g, const float *gy, float *gx) {
    return gdl__cu_avgpool_backward_t<float>(g, gy, gx);
}
GDL__CU_GEOM_DTYPES(avgpool)
GDL__CU_GEOM_DTYPES(avgpool_backward)

// ----------------------------------------------------------------------------
// copy2d, dropout

// A copy moves the elements' bits as they are; accumulate adds in f32 and
// rounds once.
template <typename T>
__global__ void gdl__k_copy2d(int64_t rows, int64_t cols, const T *src, int64_t sld, T *dst, int64_t dld, int accumulate) {
    GDL_CU_LOOP(t, rows * cols) {
        int64_t r = t / cols, c = t - r * cols;
        T v = src[r * sld + c];
        if (accumulate) dst[r * dld + c] = gdl__st<T>(gdl__ld(dst[r * dld + c]) + gdl__ld(v));
        else dst[r * dld + c] = v;
    }
}

template <typename T>
static int gdl__cu_copy2d_t(int64_t rows, int64_t cols, const T *src, int64_t sld, T *dst, int64_t dld, int accumulate) {
    if (rows <= 0 || cols <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_copy2d<T>, gdl__cu_grid(rows * cols, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        rows, cols, src, sld, dst, dld, accumulate);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_copy2d_f32(int64_t rows, int64_t cols, const float *src, int64_t sld, float *dst, int64_t dld,
                          int accumulate) {
    return gdl__cu_copy2d_t(rows, cols, src, sld, dst, dld, accumulate);
}

static int gdl__cu_copy2d(gdl_dtype dt, int64_t rows, int64_t cols, const void *src, int64_t sld, void *dst,
                          int64_t dld, int accumulate) {
    if (dt == GDL_F32) return gdl__cu_copy2d_f32(rows, cols, (const float *)src, sld, (float *)dst, dld, accumulate);
    return gdl__cu_dispatch("copy2d", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_copy2d_t(rows, cols, (const T *)src, sld, (T *)dst, dld, accumulate);
    });
}

// the mask is gdl_dropout_keep from gpudl.h: the same bits as on the CPU
template <typename T> __global__ void gdl__k_dropout(int64_t n, double p, uint64_t seed, float scale, const T *x, T *y) {
    GDL_CU_LOOP(i, n) y[i] = gdl__st<T>(gdl_dropout_keep(seed, (uint64_t)i, p) ? gdl__ld(x[i]) * scale : 0.0f);
}

// gx += (kept ? gy * scale : 0), rounded once. A dropped element leaves an
// f32 gx alone (the CPU's f32 loop skips it); a 16-bit gx gets + 0 in f32,
// as the f32 path's zeroed gradient of an f32 copy (-0 becomes +0).
template <typename T>
__global__ void gdl__k_dropout_backward(int64_t n, double p, uint64_t seed, float scale, const T *gy, T *gx) {
    GDL_CU_LOOP(i, n) {
        bool keep = gdl_dropout_keep(seed, (uint64_t)i, p);
        if (sizeof(T) == 2) gx[i] = gdl__st<T>(gdl__ld(gx[i]) + (keep ? gdl__ld(gy[i]) * scale : 0.0f));
        else if (keep) gx[i] = gdl__st<T>(gdl__ld(gx[i]) + gdl__ld(gy[i]) * scale);
    }
}

template <typename T>
static int gdl__cu_dropout_t(int64_t n, double p, uint64_t seed, const T *x, T *y, int backward) {
    float scale = p < 1 ? (float)(1.0 / (1.0 - p)) : 0.0f;
    if (n <= 0) return 0;
    if (backward)
        GDL_CU_LAUNCH(gdl__k_dropout_backward<T>, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            n, p, seed, scale, x, y);
    else
        GDL_CU_LAUNCH(gdl__k_dropout<T>, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            n, p, seed, scale, x, y);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_dropout_f32(int64_t n, double p, uint64_t seed, const float *x, float *y) {
    return gdl__cu_dropout_t(n, p, seed, x, y, 0);
}
static int gdl__cu_dropout_backward_f32(int64_t n, double p, uint64_t seed, const float *gy, float *gx) {
    return gdl__cu_dropout_t(n, p, seed, gy, gx, 1);
}
static int gdl__cu_dropout(gdl_dtype dt, int64_t n, double p, uint64_t seed, const void *x, void *y) {
    if (dt == GDL_F32) return gdl__cu_dropout_f32(n, p, seed, (const float *)x, (float *)y);
    return gdl__cu_dispatch("dropout", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_dropout_t(n, p, seed, (const T *)x, (T *)y, 0);
    });
}
static int gdl__cu_dropout_backward(gdl_dtype dt, int64_t n, double p, uint64_t seed, const void *gy, void *gx) {
    if (dt == GDL_F32) return gdl__cu_dropout_backward_f32(n, p, seed, (const float *)gy, (float *)gx);
    return gdl__cu_dispatch("dropout_backward", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_dropout_t(n, p, seed, (const T *)gy, (T *)gx, 1);
    });
}
// ----------------------------------------------------------------------------
// normalisation: batchnorm (one block per channel), layernorm (one block per row)

#define GDL__CU_NORM_THREADS 256

// element m of channel c in x [N,C,S], m = n*S + s
__device__ __forceinline__ int64_t gdl__bn_at(int64_t m, int64_t C, int64_t S, int64_t c) {
    int64_t n = m / S;
    return (n * C + c) * S + (m - n * S);
}

// Two passes over the channel (mean, then squared deviations) as the CPU.
// Per-channel scalars are kept in double, as the CPU keeps them. act GDL_ACT_RELU: a
// fused ReLU on the f32 value before the rounding to T (the same as after it: rounding
// keeps the sign); GDL_ACT_GELU: the f32 value kept in pre, y = GELU of it
// (gdl_unary1_float, the unary kernel's), rounded once to T.
template <typename T>
__global__ void gdl__k_batchnorm(int64_t N, int64_t C, int64_t S, const T *x, const float *gamma,
                                 const float *beta, T *y, float *mean, float *invstd, float *run_mean,
                                 float *run_var, int training, double momentum, double eps, int act, float *pre) {
    GDL_CU_ROWS(c, C) {
        int64_t M = N * S;
        double mu, var;
        if (training) {
            float s = 0, q = 0;
            for (int64_t m = threadIdx.x; m < M; m += blockDim.x) s += gdl__ld(x[gdl__bn_at(m, C, S, c)]);
            mu = (double)gdl__block_sum(s) / (double)M;
            float muf = (float)mu;
            for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
                float d = gdl__ld(x[gdl__bn_at(m, C, S, c)]) - muf;
                q += d * d;
            }
            double sq = (double)gdl__block_sum(q);
            var = sq / (double)M;
            if (run_mean && threadIdx.x == 0) {
                run_mean[c] = (float)((1 - momentum) * run_mean[c] + momentum * mu);
                run_var[c] = (float)((1 - momentum) * run_var[c] + momentum * (M > 1 ? sq / (double)(M - 1) : var));
            }
        } else {
            mu = run_mean[c];
            var = run_var[c];
        }
        double is = 1.0 / sqrt(var + eps);
        if (threadIdx.x == 0) {
            mean[c] = (float)mu;
            invstd[c] = (float)is;
        }
        float muf = (float)mu, isf = (float)is, gm = gamma ? gamma[c] : 1.0f, bt = beta ? beta[c] : 0.0f;
        for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
            int64_t j = gdl__bn_at(m, C, S, c);
            float v = (gdl__ld(x[j]) - muf) * isf * gm + bt;
            if (act == GDL_ACT_GELU) {
                pre[j] = v;
                v = gdl_unary1_float(GDL_UN_GELU_ERF, v, 0.0f);
            }
            y[j] = gdl__st<T>(act == GDL_ACT_RELU && !(v > 0) ? 0.0f : v);
        }
    }
}

template <typename T>
static int gdl__cu_batchnorm_t(int64_t N, int64_t C, int64_t S, const T *x, const float *gamma, const float *beta,
                               T *y, float *mean, float *invstd, float *run_mean, float *run_var, int training,
                               double momentum, double eps, int act, float *pre) {
    if (C <= 0) return 0;
    if (act != GDL_ACT_NONE && act != GDL_ACT_RELU && (act != GDL_ACT_GELU || !pre)) {
        gdl__set_error("gdl_cuda: batchnorm: fused activation %d%s (GDL_ACT_NONE, GDL_ACT_RELU, or GDL_ACT_GELU with pre)",
                       act, act == GDL_ACT_GELU ? " without pre" : "");
        return -1;
    }
    if (!training && (!run_mean || !run_var)) {
        gdl__set_error("gdl_cuda: batchnorm in eval mode needs running statistics");
        return -1;
    }
    GDL_CU_LAUNCH(gdl__k_batchnorm<T>, gdl__cu_row_grid(C), GDL__CU_NORM_THREADS, 0, gdl__cu_stream())(N, C, S, x, gamma, beta, y, mean, invstd,
                                                                    run_mean, run_var, training, momentum, eps, act, pre);
    GDL_CU_LAUNCHED();
    return 0;
}

// training: gx += gamma*invstd/M * (M*gy - sum(gy) - xhat*sum(gy*xhat))
// eval:     gx += gy*gamma*invstd (the statistics are constants)
// (gx = 0 + ... when acc is 0: gx unset, not read). ry: a fused ReLU's output; gy is then
// taken as ReLU's backward gives it, 0 + (ry > 0 ? gy : 0). pre: a fused GELU's input (f32);
// gy is then taken as the unary kernel's GELU backward gives it, 0 + gy GELU'(pre) (for f32
// nvcc may fuse the product into that add: an FMA with 0, the same value).
template <typename T>
__device__ __forceinline__ float gdl__bn_gy(const T *gy, const T *ry, const float *pre, int64_t j) {
    if (pre) return 0.0f + gdl__ld(gy[j]) * gdl_unary_grad1_float(GDL_UN_GELU_ERF, pre[j], 0.0f, 0.0f);
    return ry ? 0.0f + (gdl__ld(ry[j]) > 0 ? gdl__ld(gy[j]) : 0.0f) : gdl__ld(gy[j]);
}
template <typename T>
__global__ void gdl__k_batchnorm_backward(int64_t N, int64_t C, int64_t S, const T *x, const T *gy, const T *ry,
                                          const float *pre, const float *gamma, const float *mean,
                                          const float *invstd, int training, T *gx, float *ggamma, float *gbeta,
                                          int acc) {
    GDL_CU_ROWS(c, C) {
        int64_t M = N * S;
        float mu = mean[c], is = invstd[c], gm = gamma ? gamma[c] : 1.0f, sg = 0, sgx = 0;
        for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
            int64_t j = gdl__bn_at(m, C, S, c);
            float gj = gdl__bn_gy(gy, ry, pre, j);
            sg += gj;
            sgx += gj * (gdl__ld(x[j]) - mu) * is;
        }
        sg = gdl__block_sum(sg);
        sgx = gdl__block_sum(sgx);
        if (threadIdx.x == 0) {
            if (ggamma) ggamma[c] += sgx;
            if (gbeta) gbeta[c] += sg;
        }
        if (!gx) continue;
        float k = gm * is / (float)M, Mf = (float)M;
        for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
            int64_t j = gdl__bn_at(m, C, S, c);
            float old = acc ? gdl__ld(gx[j]) : 0.0f;
            float gj = gdl__bn_gy(gy, ry, pre, j);
            if (training) gx[j] = gdl__st<T>(old + k * (Mf * gj - sg - (gdl__ld(x[j]) - mu) * is * sgx));
            else gx[j] = gdl__st<T>(old + gj * gm * is);
        }
    }
}

template <typename T>
static int gdl__cu_batchnorm_backward_t(int64_t N, int64_t C, int64_t S, const T *x, const T *gy, const T *ry,
                                        const float *pre, const float *gamma, const float *mean, const float *invstd,
                                        int training, T *gx, float *ggamma, float *gbeta, int acc) {
    if (C <= 0 || (!gx && !ggamma && !gbeta)) return 0;
    GDL_CU_LAUNCH(gdl__k_batchnorm_backward<T>, gdl__cu_row_grid(C), GDL__CU_NORM_THREADS, 0, gdl__cu_stream())(N, C, S, x, gy, ry, pre, gamma,
                                                                             mean, invstd, training, gx, ggamma, gbeta, acc);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_batchnorm_f32(int64_t N, int64_t C, int64_t S, const float *x, const float *gamma, const float *beta,
                             float *y, float *mean, float *invstd, float *run_mean, float *run_var, int training,
                             double momentum, double eps, int act, float *pre) {
    return gdl__cu_batchnorm_t<float>(N, C, S, x, gamma, beta, y, mean, invstd, run_mean, run_var, training, momentum, eps,
                                      act, pre);
}
static int gdl__cu_batchnorm_backward_f32(int64_t N, int64_t C, int64_t S, const float *x, const float *gy, const float *y,
                                      const float *pre, const float *gamma, const float *mean, const float *invstd,
                                      int training, float *gx, float *ggamma, float *gbeta, int accumulate) {
    return gdl__cu_batchnorm_backward_t<float>(N, C, S, x, gy, y, pre, gamma, mean, invstd, training, gx, ggamma, gbeta,
                                               accumulate);
}
static int gdl__cu_batchnorm(gdl_dtype dt, int64_t N, int64_t C, int64_t S, const void *x, const float *gamma,
                             const float *beta, void *y, float *mean, float *invstd, float *run_mean, float *run_var,
                             int training, double momentum, double eps, int act, float *pre) {
    if (dt == GDL_F32)
        return gdl__cu_batchnorm_f32(N, C, S, (const float *)x, gamma, beta, (float *)y, mean, invstd, run_mean, run_var,
                                     training, momentum, eps, act, pre);
    return gdl__cu_dispatch("batchnorm", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_batchnorm_t(N, C, S, (const T *)x, gamma, beta, (T *)y, mean, invstd, run_mean, run_var, training,
                                   momentum, eps, act, pre);
    });
}
static int gdl__cu_batchnorm_backward(gdl_dtype dt, int64_t N, int64_t C, int64_t S, const void *x, const void *gy,
                                      const void *y, const float *gamma, const float *mean, const float *invstd,
                                      int training, void *gx, float *ggamma, float *gbeta, int accumulate, int act) {
    // act GDL_ACT_GELU: y is the forward's pre, f32 whatever dt is
    const float *pre = act == GDL_ACT_GELU ? (const float *)y : NULL;
    if (act != GDL_ACT_NONE && ((act != GDL_ACT_RELU && act != GDL_ACT_GELU) || !y)) {
        gdl__set_error("gdl_cuda: batchnorm_backward: fused activation %d%s (GDL_ACT_NONE, or GDL_ACT_RELU / "
                       "GDL_ACT_GELU with y)", act, y ? "" : " without y");
        return -1;
    }
    if (act != GDL_ACT_RELU) y = NULL;
    if (dt == GDL_F32)
        return gdl__cu_batchnorm_backward_f32(N, C, S, (const float *)x, (const float *)gy, (const float *)y, pre, gamma,
                                              mean, invstd, training, (float *)gx, ggamma, gbeta, accumulate);
    return gdl__cu_dispatch("batchnorm_backward", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_batchnorm_backward_t(N, C, S, (const T *)x, (const T *)gy, (const T *)y, pre, gamma, mean,
                                            invstd, training, (T *)gx, ggamma, gbeta, accumulate);
    });
}

__global__ void gdl__k_layernorm(int64_t rows, int64_t D, const float *x, const float *gamma, const float *beta,
                                 float eps, float *y, float *mean, float *rstd) {
    GDL_CU_ROWS(r, rows) {
        const float *p = x + r * D;
        float s = 0, q = 0;
        for (int64_t k = threadIdx.x; k < D; k += blockDim.x) s += p[k];
        float mu = gdl__block_sum(s) / (float)D;
        for (int64_t k = threadIdx.x; k < D; k += blockDim.x) q += (p[k] - mu) * (p[k] - mu);
        float rs = 1.0f / sqrtf(gdl__block_sum(q) / (float)D + eps);
        if (threadIdx.x == 0) {
            mean[r] = mu;
            rstd[r] = rs;
        }
        for (int64_t k = threadIdx.x; k < D; k += blockDim.x)
            y[r * D + k] = (p[k] - mu) * rs * (gamma ? gamma[k] : 1.0f) + (beta ? beta[k] : 0.0f);
    }
}

static int gdl__cu_layernorm(int64_t rows, int64_t D, const float *x, const float *gamma, const float *beta,
                             double eps, float *y, float *mean, float *rstd) {
    if (rows <= 0 || D <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_layernorm, gdl__cu_row_grid(rows), gdl__cu_row_threads(D), 0, gdl__cu_stream())(rows, D, x, gamma, beta, (float)eps, y,
                                                                         mean, rstd);
    GDL_CU_LAUNCHED();
    return 0;
}

// gx += rstd * (gh - mean(gh) - xhat*mean(gh*xhat)), gh = gy*gamma
__global__ void gdl__k_layernorm_backward_x(int64_t rows, int64_t D, const float *x, const float *gy,
                                            const float *gamma, const float *mean, const float *rstd, float *gx) {
    GDL_CU_ROWS(r, rows) {
        const float *p = x + r * D, *g = gy + r * D;
        float mu = mean[r], rs = rstd[r], s1 = 0, s2 = 0;
        for (int64_t k = threadIdx.x; k < D; k += blockDim.x) {
            float gh = g[k] * (gamma ? gamma[k] : 1.0f);
            s1 += gh;
            s2 += gh * (p[k] - mu) * rs;
        }
        s1 = gdl__block_sum(s1) / (float)D;
        s2 = gdl__block_sum(s2) / (float)D;
        for (int64_t k = threadIdx.x; k < D; k += blockDim.x) {
            float xh = (p[k] - mu) * rs, gh = g[k] * (gamma ? gamma[k] : 1.0f);
            gx[r * D + k] += rs * (gh - s1 - xh * s2);
        }
    }
}

// ggamma[k] += sum_r gy*xhat, gbeta[k] += sum_r gy. Blocks of 32 columns x
// 16 row groups: reads are coalesced along the row, each row group sums its
// rows in order, and the 16 partial sums are added in a fixed order.
#define GDL__CU_LN_ROWGROUPS 16
__global__ void gdl__k_layernorm_backward_params(int64_t rows, int64_t D, const float *x, const float *gy,
                                                 const float *mean, const float *rstd, float *ggamma,
                                                 float *gbeta) {
    __shared__ float sg[GDL__CU_LN_ROWGROUPS][33], sb[GDL__CU_LN_ROWGROUPS][33];
    for (int64_t k0 = (int64_t)blockIdx.x * 32; k0 < D; k0 += (int64_t)gridDim.x * 32) {
        int64_t k = k0 + threadIdx.x;
        float pg = 0, pb = 0;
        if (k < D)
            for (int64_t r = threadIdx.y; r < rows; r += GDL__CU_LN_ROWGROUPS) {
                float g = gy[r * D + k];
                pg += g * (x[r * D + k] - mean[r]) * rstd[r];
                pb += g;
            }
        __syncthreads(); /* the previous column tile is done with sg/sb */
        sg[threadIdx.y][threadIdx.x] = pg;
        sb[threadIdx.y][threadIdx.x] = pb;
        __syncthreads();
        if (threadIdx.y == 0 && k < D) {
            float tg = 0, tb = 0;
            for (int j = 0; j < GDL__CU_LN_ROWGROUPS; j++) {
                tg += sg[j][threadIdx.x];
                tb += sb[j][threadIdx.x];
            }
            if (ggamma) ggamma[k] += tg;
            if (gbeta) gbeta[k] += tb;
        }
    }
}

static int gdl__cu_layernorm_backward(int64_t rows, int64_t D, const float *x, const float *gy, const float *gamma,
                                      const float *mean, const float *rstd, float *gx, float *ggamma, float *gbeta) {
    if (rows <= 0 || D <= 0) return 0;
    if (gx) {
        GDL_CU_LAUNCH(gdl__k_layernorm_backward_x, gdl__cu_row_grid(rows), gdl__cu_row_threads(D), 0, gdl__cu_stream())(rows, D, x, gy, gamma, mean,
                                                                                        rstd, gx);
        GDL_CU_LAUNCHED();
    }
    if (ggamma || gbeta) {
        dim3 block(32, GDL__CU_LN_ROWGROUPS);
        GDL_CU_LAUNCH(gdl__k_layernorm_backward_params, gdl__cu_row_grid((D + 31) / 32), block, 0, gdl__cu_stream())(rows, D, x, gy, mean, rstd,
                                                                                     ggamma, gbeta);
        GDL_CU_LAUNCHED();
    }
    return 0;
}

// ----------------------------------------------------------------------------
// embedding

__global__ void gdl__k_embedding(int64_t n, int64_t D, int64_t V, const int32_t *idx, const float *W, float *out) {
    GDL_CU_LOOP(t, n * D) {
        int64_t i = t / D, k = t - i * D;
        int32_t row = idx[i];
        out[t] = (row >= 0 && row < V) ? W[(int64_t)row * D + k] : 0.0f;
    }
}

// rows repeat in idx, so several threads may add into one gW row: atomics
__global__ void gdl__k_embedding_backward(int64_t n, int64_t D, int64_t V, const int32_t *idx, const float *gy,
                                          float *gW) {
    GDL_CU_LOOP(t, n * D) {
        int64_t i = t / D, k = t - i * D;
        int32_t row = idx[i];
        if (row >= 0 && row < V) atomicAdd(&gW[(int64_t)row * D + k], gy[t]);
    }
}

static int gdl__cu_embedding(int64_t n, int64_t D, int64_t V, const int32_t *idx, const float *W, float *out) {
    if (n <= 0 || D <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_embedding, gdl__cu_grid(n * D, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(n, D, V, idx, W, out);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_embedding_backward(int64_t n, int64_t D, int64_t V, const int32_t *idx, const float *gy,
                                      float *gW) {
    if (n <= 0 || D <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_embedding_backward, gdl__cu_grid(n * D, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(n, D, V, idx, gy, gW);
    GDL_CU_LAUNCHED();
    return 0;
}

// max_norm: one block walks idx in order (a repeated row is seen after its
// renormalisation, as on the CPU); its threads share a row's norm
__global__ void gdl__k_embedding_renorm(int64_t n, int64_t D, int64_t V, const int32_t *idx, float *W, float max_norm,
                                        float norm_type) {
    const bool inf = isinf(norm_type);
    for (int64_t i = 0; i < n; i++) {
        int32_t row = idx[i];
        if (row < 0 || row >= V) continue;
        float *w = W + (int64_t)row * D;
        float s = 0;
        for (int64_t k = threadIdx.x; k < D; k += blockDim.x) {
            float a = fabsf(w[k]);
            s = inf ? fmaxf(s, a) : s + (norm_type == 1.0f ? a : norm_type == 2.0f ? a * a : powf(a, norm_type));
        }
        s = inf ? gdl__block_max(s) : gdl__block_sum(s);
        float nrm = inf || norm_type == 1.0f ? s : norm_type == 2.0f ? sqrtf(s) : powf(s, 1.0f / norm_type);
        if (nrm > max_norm) {
            float scale = max_norm / (nrm + 1e-7f);
            for (int64_t k = threadIdx.x; k < D; k += blockDim.x) w[k] *= scale;
        }
        __syncthreads(); // every thread's writes before the next row (which may be this one) is read
    }
}

static int gdl__cu_embedding_renorm(int64_t n, int64_t D, int64_t V, const int32_t *idx, float *W, double max_norm,
                                    double norm_type) {
    if (n <= 0 || D <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_embedding_renorm, 1, GDL__CU_THREADS, 0, gdl__cu_stream())(n, D, V, idx, W, (float)max_norm,
                                                                                  (float)norm_type);
    GDL_CU_LAUNCHED();
    return 0;
}

// ----------------------------------------------------------------------------
// losses

// log-sum-exp of a row, by the whole block (every thread gets it)
__device__ float gdl__block_lse(const float *p, int64_t C) {
    float mx = -GDL__CU_INF, s = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = fmaxf(mx, p[c]);
    mx = gdl__block_max(mx);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += expf(p[c] - mx);
    return mx + logf(gdl__block_sum(s));
}

// rows[b] = -((1-eps)*logp[t] + eps/C * sum_c logp[c]), 0 when ignored; a
// target outside [0,C) gives NaN (the CPU op layer rejects it first)
__global__ void gdl__k_xent_rows(int64_t B, int64_t C, const float *x, const int32_t *tgt, int ignore_index,
                                 float smoothing, int from_log_probs, float *rows) {
    GDL_CU_ROWS(b, B) {
        const float *p = x + b * C;
        int32_t t = tgt[b];
        if (t == ignore_index) { /* uniform across the block */
            if (threadIdx.x == 0) rows[b] = 0;
            continue;
        }
        float lse = from_log_probs ? 0.0f : gdl__block_lse(p, C), sum_lp = 0;
        if (smoothing > 0) {
            for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum_lp += p[c] - lse;
            sum_lp = gdl__block_sum(sum_lp);
        }
        if (threadIdx.x == 0)
            rows[b] = (t < 0 || t >= C) ? GDL__CU_NAN
                                         : -((1 - smoothing) * (p[t] - lse) + smoothing / (float)C * sum_lp);
    }
}

// one block: the sum of the rows and the count of non-ignored rows, left on
// the device (count[0] for the backward pass, out[0] the reduced loss)
__global__ void gdl__k_xent_total(int64_t B, const int32_t *tgt, int ignore_index, const float *rows, int reduction,
                                  float *out, float *count) {
    double s = 0, n = 0;
    for (int64_t b = threadIdx.x; b < B; b += blockDim.x) {
        s += rows[b]; /* ignored rows hold 0 */
        n += tgt[b] != ignore_index;
    }
    s = gdl__block_sum(s);
    n = gdl__block_sum(n);
    if (threadIdx.x == 0) {
        if (count) count[0] = (float)n;
        if (reduction == GDL_REDUCE_SUM) out[0] = (float)s;
        else if (reduction == GDL_REDUCE_MEAN) out[0] = (float)(s / n); /* 0/0 = NaN as PyTorch */
    }
}

static int gdl__cu_xent(int64_t B, int64_t C, const float *x, const int32_t *tgt, int ignore_index,
                        double smoothing, int from_log_probs, int reduction, float *rows, float *out, float *count) {
    if (B > 0 && C > 0) {
        GDL_CU_LAUNCH(gdl__k_xent_rows, gdl__cu_row_grid(B), gdl__cu_row_threads(C), 0, gdl__cu_stream())(B, C, x, tgt, ignore_index,
                                                                          (float)smoothing, from_log_probs, rows);
        GDL_CU_LAUNCHED();
    }
    if (count || reduction != GDL_REDUCE_NONE) {
        GDL_CU_LAUNCH(gdl__k_xent_total, 1, 512, 0, gdl__cu_stream())(B < 0 ? 0 : B, tgt, ignore_index, rows, reduction, out, count);
        GDL_CU_LAUNCHED();
    }
    return 0;
}

// gx[b,c] += g * (softmax(x)[c] - target[c]); from log-probs: g * -target[c].
// g is gy[b] (NONE), gy[0] (SUM) or gy[0]/count[0] (MEAN, count read on the
// device: no host round trip).
__global__ void gdl__k_xent_backward(int64_t B, int64_t C, const float *x, const int32_t *tgt, int ignore_index,
                                     float on, float off, int from_log_probs, int reduction, const float *gy,
                                     const float *count, float *gx) {
    GDL_CU_ROWS(b, B) {
        const float *p = x + b * C;
        int32_t t = tgt[b];
        if (t == ignore_index) continue;
        float g = reduction == GDL_REDUCE_NONE ? gy[b] : reduction == GDL_REDUCE_SUM ? gy[0] : gy[0] / count[0];
        if (t < 0 || t >= C) g = GDL__CU_NAN; /* as the forward pass: a bad target poisons its row */
        float lse = from_log_probs ? 0.0f : gdl__block_lse(p, C);
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            float target = c == t ? on : off;
            float d = from_log_probs ? -target : expf(p[c] - lse) - target;
            gx[b * C + c] += g * d;
        }
    }
}

static int gdl__cu_xent_backward(int64_t B, int64_t C, const float *x, const int32_t *tgt, int ignore_index,
                                 double smoothing, int from_log_probs, int reduction, const float *gy,
                                 const float *count, float *gx) {
    if (B <= 0 || C <= 0) return 0;
    if (reduction == GDL_REDUCE_MEAN && !count) {
        gdl__set_error("gdl_cuda: xent_backward with mean reduction needs the count");
        return -1;
    }
    float on = (float)((1 - smoothing) + smoothing / (double)C), off = (float)(smoothing / (double)C);
    GDL_CU_LAUNCH(gdl__k_xent_backward, gdl__cu_row_grid(B), gdl__cu_row_threads(C), 0, gdl__cu_stream())(B, C, x, tgt, ignore_index, on, off,
                                                                          from_log_probs, reduction, gy, count, gx);
    GDL_CU_LAUNCHED();
    return 0;
}

// MSE: (x-y)^2; BCE with logits, stable: max(x,0) - x*y + log1p(exp(-|x|))
__global__ void gdl__k_pointwise_loss(int kind, int64_t n, const float *x, const float *y, float *out) {
    GDL_CU_LOOP(i, n) {
        float a = x[i], t = y[i];
        out[i] = kind == GDL_LOSS_MSE ? (a - t) * (a - t) : fmaxf(a, 0.0f) - a * t + log1pf(expf(-fabsf(a)));
    }
}

__global__ void gdl__k_pointwise_loss_backward(int kind, int64_t n, const float *x, const float *y, const float *gout,
                                               float *gx, float *gy) {
    GDL_CU_LOOP(i, n) {
        float a = x[i], t = y[i], g = gout[i];
        if (kind == GDL_LOSS_MSE) {
            float d = 2.0f * (a - t) * g;
            if (gx) gx[i] += d;
            if (gy) gy[i] -= d;
        } else {
            if (gx) gx[i] += (1.0f / (1.0f + expf(-a)) - t) * g;
            if (gy) gy[i] -= a * g;
        }
    }
}

static int gdl__cu_pointwise_loss(int kind, int64_t n, const float *x, const float *y, float *out) {
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_pointwise_loss, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(kind, n, x, y, out);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_pointwise_loss_backward(int kind, int64_t n, const float *x, const float *y, const float *gout,
                                           float *gx, float *gy) {
    if (n <= 0 || (!gx && !gy)) return 0;
    GDL_CU_LAUNCH(gdl__k_pointwise_loss_backward, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(kind, n, x, y, gout, gx,
                                                                                          gy);
    GDL_CU_LAUNCHED();
    return 0;
}

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

// ----------------------------------------------------------------------------
// GradScaler: the CPU's formulas; the scale, found_inf and the tracker stay
// in device memory (nothing read back, so a captured step replays right).
// found_inf is only ever set to 1 by the unscale kernel (a benign race).

__global__ void gdl__k_amp_unscale(int64_t n, float *g, const float *scale, float *found_inf, float *found_inf2) {
    float inv = (float)(1.0 / (double)*scale); // PyTorch: scale.double().reciprocal().float()
    int found = 0;
    GDL_CU_LOOP(i, n) {
        float v = g[i];
        found |= !(v - v == 0.0f);
        if (inv != 1.0f) g[i] = v * inv;
    }
    if (found) {
        *found_inf = 1.0f;
        if (found_inf2) *found_inf2 = 1.0f;
    }
}

static int gdl__cu_amp_unscale(int64_t n, float *g, const float *scale, float *found_inf, float *found_inf2) {
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_amp_unscale, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        n, g, scale, found_inf, found_inf2);
    GDL_CU_LAUNCHED();
    return 0;
}

__global__ void gdl__k_amp_update_scale(float *scale, int32_t *tracker, float *found_inf, double growth,
                                        double backoff, int interval) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    if (*found_inf != 0.0f) {
        *scale = (float)(*scale * backoff);
        *tracker = 0;
    } else if (*tracker + 1 >= interval) {
        float grown = (float)(*scale * growth);
        if (grown - grown == 0.0f) *scale = grown;
        *tracker = 0;
    } else {
        *tracker += 1;
    }
    *found_inf = 0.0f;
}

static int gdl__cu_amp_update_scale(float *scale, int32_t *tracker, float *found_inf, double growth, double backoff,
                                    int interval) {
    GDL_CU_LAUNCH(gdl__k_amp_update_scale, 1, 32, 0, gdl__cu_stream())(scale, tracker, found_inf, growth, backoff,
                                                                       interval);
    GDL_CU_LAUNCHED();
    return 0;
}

// ----------------------------------------------------------------------------
// training metrics on the device (gdl_fit reads them at its progress refresh)

// one block: the threads take rows, the row's argmax by gdl__k_argmax's rule;
// the correct count is summed in a fixed order, thread 0 adds it all
__global__ void gdl__k_fit_metrics(const float *loss, int64_t B, int64_t C, const float *logits, const int32_t *y,
                                   double *acc) {
    unsigned long long correct = 0;
    if (logits)
        for (int64_t r = threadIdx.x; r < B; r += blockDim.x) {
            const float *p = logits + r * C;
            int64_t best = 0;
            float bv = C ? p[0] : 0.0f;
            for (int64_t k = 1; k < C; k++) {
                float v = p[k];
                if (v > bv || (v != v && bv == bv)) {
                    best = k;
                    bv = v;
                }
            }
            correct += best == y[r];
        }
    correct = gdl__block_sum(correct);
    if (threadIdx.x == 0) {
        acc[0] += (double)loss[0] * (double)B;
        acc[1] += (double)B;
        if (logits) {
            acc[2] += (double)correct;
            acc[3] += (double)B;
        }
    }
}

static int gdl__cu_fit_metrics(const float *loss, int64_t B, int64_t C, const float *logits, const int32_t *y,
                               double *acc) {
    GDL_CU_LAUNCH(gdl__k_fit_metrics, 1, GDL__CU_THREADS, 0, gdl__cu_stream())(loss, B, C, logits, y, acc);
    GDL_CU_LAUNCHED();
    return 0;
}

// ----------------------------------------------------------------------------
// host-visible results: two passes (per-block partials, then one block sums
// them in order), so the result does not depend on scheduling; then one
// synchronising copy to the host

#define GDL__CU_PARTIALS 1024

__global__ void gdl__k_nonfinite_partial(int64_t n, const float *x, unsigned long long *part) {
    unsigned long long c = 0;
    GDL_CU_LOOP(i, n) c += !isfinite(x[i]);
    c = gdl__block_sum(c);
    if (threadIdx.x == 0) part[blockIdx.x] = c;
}

__global__ void gdl__k_sum_squares_partial(int64_t n, const float *x, double *part) {
    double s = 0;
    GDL_CU_LOOP(i, n) s += (double)x[i] * x[i];
    s = gdl__block_sum(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

template <typename T> __global__ void gdl__k_sum_partials(int nb, const T *part, T *out) {
    T s = 0;
    for (int i = threadIdx.x; i < nb; i += blockDim.x) s += part[i];
    s = gdl__block_sum(s);
    if (threadIdx.x == 0) *out = s;
}

// partials then total, both in one scratch block: [nb partials][total]
template <typename T, typename K>
static int gdl__cu_reduce_to_host(int64_t n, const float *x, T *out, K partial_kernel) {
    unsigned nb = gdl__cu_grid(n, GDL__CU_THREADS);
    if (nb > GDL__CU_PARTIALS) nb = GDL__CU_PARTIALS;
    T *buf = (T *)gdl__cu_alloc(sizeof(T) * (nb + 1));
    if (!buf) return -1;
    GDL_CU_LAUNCH(partial_kernel, nb, GDL__CU_THREADS, 0, gdl__cu_stream())(n, x, buf);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        GDL_CU_LAUNCH(gdl__k_sum_partials<T>, 1, GDL__CU_THREADS, 0, gdl__cu_stream())((int)nb, buf, buf + nb);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(out, buf + nb, sizeof(T), cudaMemcpyDeviceToHost, gdl__cu_stream());
    if (e == cudaSuccess) {
        gdl__count_sync();
        e = cudaStreamSynchronize(gdl__cu_stream());
    }
    gdl__cu_free(buf);
    GDL_CU_TRY(e, -1);
    return 0;
}

static int gdl__cu_count_nonfinite(int64_t n, const float *x, int64_t *out) {
    unsigned long long c = 0;
    if (n > 0 && gdl__cu_reduce_to_host(n, x, &c, gdl__k_nonfinite_partial) < 0) return -1;
    *out = (int64_t)c;
    return 0;
}

static int gdl__cu_sum_squares(int64_t n, const float *x, double *out) {
    double s = 0;
    if (n > 0 && gdl__cu_reduce_to_host(n, x, &s, gdl__k_sum_squares_partial) < 0) return -1;
    *out = s;
    return 0;
}

// ----------------------------------------------------------------------------
// CUDA graphs (gdl_graph_*): the compute stream recorded in global mode, so a
// synchronisation, cudaMalloc or legacy-stream work anywhere meanwhile fails
// the capture, as PyTorch's default; our allocator refuses even cache hits.

// cuBLAS's handle with its own workspace (cublasSetWorkspace after
// cublasSetStream, gdl__cu_blas) and cuBLASLt's handle, made before the
// capture: cublasCreate and the workspace's cudaMalloc inside it would fail
// the capture, and a handle without its own workspace would allocate from
// cuBLAS's pool there (cuBLASLt takes ours, gdl__cu_lt_matmul). The
// warm-up step usually made them; a step whose first GEMM is in the
// capture would not have.
static int gdl__cu_graph_handles(int dev) {
    gdl__cu_state &S = gdl__cu();
    if (!gdl__cu_blas()) return -1;
    std::lock_guard<std::mutex> lock(S.mu);
    if (!S.lt[dev]) GDL_CUBLAS_TRY(cublasLtCreate(&S.lt[dev]), -1);
    return 0;
}

static int gdl__cu_graph_begin(void) {
    int dev;
    if (gdl__cu_current(&dev) < 0) return -1;
    cudaStream_t st = gdl__cu_stream();
    if (!st) {
        gdl__set_error("gdl_cuda: cuda:%d has no compute stream to capture (the legacy stream cannot be)", dev);
        return -1;
    }
    if (gdl__cu_graph_handles(dev) < 0) return -1;
    GDL_CU_TRY(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), -1);
    gdl__cu_capturing = dev;
    return 0;
}

static int gdl__cu_graph_end(void **graph) {
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    *graph = NULL;
    gdl__cu_capturing = -1;
    GDL_CU_TRY(cudaStreamEndCapture(gdl__cu_stream(), &g), -1);
    cudaError_t e = cudaGraphInstantiate(&x, g, 0);
    (void)cudaGraphDestroy(g); /* the instance keeps what it needs */
    GDL_CU_TRY(e, -1);
    *graph = (void *)x;
    return 0;
}

// counted as one launch (the profiler's "Launches"): the host's one call for all the graph's kernels
static int gdl__cu_graph_launch(void *graph) {
    gdl__cu_launches.fetch_add(1, std::memory_order_relaxed);
    GDL_CU_TRY(cudaGraphLaunch((cudaGraphExec_t)graph, gdl__cu_stream()), -1);
    return 0;
}

static void gdl__cu_graph_destroy(void *graph) {
    cudaError_t e = cudaGraphExecDestroy((cudaGraphExec_t)graph);
    if (e != cudaSuccess) {
        gdl__cu_report(cudaGetErrorString(e), __FILE__, __LINE__, "cudaGraphExecDestroy");
        (void)cudaGetLastError();
    }
}

// ----------------------------------------------------------------------------
// NCCL: one communicator per process, on one device (the rank's), with a
// communication stream of its own. A collective's stream first waits for an
// event recorded on the compute stream (the operands are ready: a gradient
// bucket has been filled); the compute stream waits for an event recorded
// after it (at once, or at comm_join for DDP's buckets, which overlap the
// rest of backward), so the optimiser reads reduced gradients and memory
// freed after a collective is reused only after it. The host never waits
// except in comm_sync, which polls with a deadline, as PyTorch's NCCL
// watchdog: a missing peer ends in ncclCommAbort and an error, not a hang.

#ifndef GPUDL_NO_NCCL
static struct {
    ncclComm_t comm;
    int dev, world, rank;
    cudaStream_t stream;
    cudaEvent_t ready, done;
    float *scratch;   /* comm_sync's barrier element */
    int broken;       /* aborted: every later call fails with why */
    char why[400];
} gdl__nc;

#define GDL_NCCL_TRY(call, fail)                                                     \
    do {                                                                             \
        ncclResult_t r_ = (call);                                                    \
        if (r_ != ncclSuccess) {                                                     \
            gdl__cu_report(ncclGetErrorString(r_), __FILE__, __LINE__, #call);       \
            return fail;                                                             \
        }                                                                            \
    } while (0)

// The communicator's device made current for the call; the caller's back after.
struct gdl__cu_on_device {
    int prev = -1, ok = 0;
    explicit gdl__cu_on_device(int dev) {
        if (cudaGetDevice(&prev) == cudaSuccess && (prev == dev || cudaSetDevice(dev) == cudaSuccess)) ok = 1;
        (void)cudaGetLastError();
    }
    ~gdl__cu_on_device() {
        if (ok && prev >= 0) (void)cudaSetDevice(prev);
    }
};

static int gdl__cu_comm_ready(void) {
    if (gdl__nc.broken) {
        gdl__set_error("gdl_cuda: NCCL in %s: the communicator was aborted: %s", gdl__backend_op(), gdl__nc.why);
        return -1;
    }
    if (!gdl__nc.comm) {
        gdl__set_error("gdl_cuda: NCCL in %s: no communicator (gdl_dist_init makes one for a job of several "
                       "processes)", gdl__backend_op());
        return -1;
    }
    return 0;
}

// Ends the communicator after an error, keeping the reason for every later call.
static int gdl__cu_comm_break(const char *why) {
    snprintf(gdl__nc.why, sizeof gdl__nc.why, "%s", why);
    gdl__nc.broken = 1;
    if (gdl__nc.comm) (void)ncclCommAbort(gdl__nc.comm);
    gdl__nc.comm = NULL;
    gdl__set_error("gdl_cuda: NCCL in %s: %s", gdl__backend_op(), why);
    return -1;
}

// a peer's failure, without waiting: NCCL reports it here, not to CUDA
static int gdl__cu_comm_check(void) {
    ncclResult_t e = ncclSuccess;
    GDL_NCCL_TRY(ncclCommGetAsyncError(gdl__nc.comm, &e), -1);
    if (e != ncclSuccess && e != ncclInProgress) {
        char why[300];
        snprintf(why, sizeof why, "rank %d of %d: a collective failed (%s); the communicator is aborted",
                 gdl__nc.rank, gdl__nc.world, ncclGetErrorString(e));
        return gdl__cu_comm_break(why);
    }
    return 0;
}

static void gdl__cu_comm_destroy(void);

static int gdl__cu_comm_id(void *id, int bytes) {
    ncclUniqueId u;
    if (bytes < (int)sizeof u) {
        gdl__set_error("gdl_cuda: NCCL's unique id has %d bytes; the buffer %d", (int)sizeof u, bytes);
        return -1;
    }
    GDL_NCCL_TRY(ncclGetUniqueId(&u), -1);
    memset(id, 0, (size_t)bytes);
    memcpy(id, &u, sizeof u);
    return 0;
}

static int gdl__cu_comm_init(int device, const void *id, int world, int rank) {
    ncclUniqueId u;
    if (gdl__nc.comm || gdl__nc.broken) {
        gdl__set_error("gdl_cuda: NCCL: this process has a communicator already (on cuda:%d)", gdl__nc.dev);
        return -1;
    }
    if (gdl__cu_check_index("gdl_dist_init", device) < 0) return -1;
    gdl__cu_on_device on(device);
    if (!on.ok) GDL_CU_TRY(cudaSetDevice(device), -1);
    memcpy(&u, id, sizeof u);
    gdl__nc.dev = device, gdl__nc.world = world, gdl__nc.rank = rank;
    if (cudaStreamCreateWithFlags(&gdl__nc.stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&gdl__nc.ready, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&gdl__nc.done, cudaEventDisableTiming) != cudaSuccess ||
        !(gdl__nc.scratch = (float *)gdl__cu_alloc(sizeof(float)))) {
        (void)cudaGetLastError();
        gdl__cu_comm_destroy();
        gdl__set_error("gdl_cuda: NCCL: no stream, events or memory for the communicator on cuda:%d", device);
        return -1;
    }
    ncclResult_t r = ncclCommInitRank(&gdl__nc.comm, world, u, rank);
    if (r != ncclSuccess) { /* nothing is left half made: a later call may try again */
        gdl__nc.comm = NULL;
        gdl__cu_comm_destroy();
        gdl__set_error("gdl_cuda: NCCL: ncclCommInitRank (rank %d of %d on cuda:%d): %s", rank, world, device,
                       ncclGetErrorString(r));
        return -1;
    }
    return 0;
}

static int gdl__cu_collective(int kind, const void *send, void *recv, int64_t count, gdl_dtype dt, int avg,
                              int root, int join) {
    ncclDataType_t t = dt == GDL_I32 ? ncclInt32 : dt == GDL_BF16 ? ncclBfloat16 : dt == GDL_F16 ? ncclFloat16
                                                                                                : ncclFloat32;
    ncclRedOp_t op = avg ? ncclAvg : ncclSum;
    size_t n = (size_t)count;
    if (gdl__cu_comm_ready() < 0 || gdl__cu_comm_check() < 0) return -1;
    gdl__cu_on_device on(gdl__nc.dev);
    cudaStream_t compute = gdl__cu_stream(), s = gdl__nc.stream;
    GDL_CU_TRY(cudaEventRecord(gdl__nc.ready, compute), -1);
    GDL_CU_TRY(cudaStreamWaitEvent(s, gdl__nc.ready, 0), -1);
    switch (kind) {
    case GDL_COLL_ALL_REDUCE: GDL_NCCL_TRY(ncclAllReduce(send, recv, n, t, op, gdl__nc.comm, s), -1); break;
    case GDL_COLL_BROADCAST: GDL_NCCL_TRY(ncclBroadcast(send, recv, n, t, root, gdl__nc.comm, s), -1); break;
    case GDL_COLL_ALL_GATHER: GDL_NCCL_TRY(ncclAllGather(send, recv, n, t, gdl__nc.comm, s), -1); break;
    case GDL_COLL_REDUCE_SCATTER: GDL_NCCL_TRY(ncclReduceScatter(send, recv, n, t, op, gdl__nc.comm, s), -1); break;
    default: gdl__set_error("gdl_cuda: collective %d is not one of GDL_COLL_*", kind); return -1;
    }
    if (join) {
        GDL_CU_TRY(cudaEventRecord(gdl__nc.done, s), -1);
        GDL_CU_TRY(cudaStreamWaitEvent(compute, gdl__nc.done, 0), -1);
    }
    return 0;
}

static int gdl__cu_comm_join(void) {
    if (gdl__cu_comm_ready() < 0) return -1;
    gdl__cu_on_device on(gdl__nc.dev);
    GDL_CU_TRY(cudaEventRecord(gdl__nc.done, gdl__nc.stream), -1);
    GDL_CU_TRY(cudaStreamWaitEvent(gdl__cu_stream(), gdl__nc.done, 0), -1);
    return gdl__cu_comm_check();
}

static int gdl__cu_comm_sync(int barrier, double timeout_s) {
    if (gdl__cu_comm_ready() < 0) return -1;
    if (barrier && gdl__cu_collective(GDL_COLL_ALL_REDUCE, gdl__nc.scratch, gdl__nc.scratch, 1, GDL_F32, 0, 0, 0) < 0)
        return -1;
    gdl__cu_on_device on(gdl__nc.dev);
    GDL_CU_TRY(cudaEventRecord(gdl__nc.done, gdl__nc.stream), -1);
    gdl__count_sync();
    auto t0 = std::chrono::steady_clock::now();
    for (int polls = 0;; polls++) {
        cudaError_t q = cudaEventQuery(gdl__nc.done);
        if (q == cudaSuccess) break;
        if (q != cudaErrorNotReady) GDL_CU_TRY(q, -1);
        (void)cudaGetLastError();
        if (gdl__cu_comm_check() < 0) return -1;
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
            char why[300];
            snprintf(why, sizeof why, "rank %d of %d: the collectives did not finish within %g s (GPUDL_DIST_TIMEOUT): "
                     "a peer never came or hangs; the communicator is aborted", gdl__nc.rank, gdl__nc.world,
                     timeout_s);
            return gdl__cu_comm_break(why);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(polls < 100 ? 50 : 1000));
    }
    return gdl__cu_comm_check();
}

static void gdl__cu_comm_destroy(void) {
    if (gdl__nc.comm || gdl__nc.stream) {
        gdl__cu_on_device on(gdl__nc.dev);
        if (gdl__nc.comm) (void)ncclCommDestroy(gdl__nc.comm);
        if (gdl__nc.ready) (void)cudaEventDestroy(gdl__nc.ready);
        if (gdl__nc.done) (void)cudaEventDestroy(gdl__nc.done);
        if (gdl__nc.stream) (void)cudaStreamDestroy(gdl__nc.stream);
        if (gdl__nc.scratch) gdl__cu_free(gdl__nc.scratch);
        (void)cudaGetLastError();
    }
    memset(&gdl__nc, 0, sizeof gdl__nc);
}
#else
static int gdl__cu_no_nccl(void) {
    gdl__set_error("gdl_cuda: built with GPUDL_NO_NCCL: CUDA tensors have no collectives");
    return -1;
}
static int gdl__cu_comm_id(void *, int) { return gdl__cu_no_nccl(); }
static int gdl__cu_comm_init(int, const void *, int, int) { return gdl__cu_no_nccl(); }
static int gdl__cu_collective(int, const void *, void *, int64_t, gdl_dtype, int, int, int) { return gdl__cu_no_nccl(); }
static int gdl__cu_comm_join(void) { return gdl__cu_no_nccl(); }
static int gdl__cu_comm_sync(int, double) { return gdl__cu_no_nccl(); }
static void gdl__cu_comm_destroy(void) {}
#endif

// ----------------------------------------------------------------------------
// the backend table

// The entries in the order of the lists in gpudl.h, which also make the
// structs: an entry without a gdl__cu_ function does not compile.
#define GDL__BACKEND_INIT_CUDA(ret, entry, params) gdl__cu_##entry,
static const gdl_backend gdl__cu_table = {"cuda", {GDL_RUNTIME_ENTRIES(GDL__BACKEND_INIT_CUDA)},
                                         {GDL_KERNEL_ENTRIES(GDL__BACKEND_INIT_CUDA)}};
#undef GDL__BACKEND_INIT_CUDA

const gdl_backend *gdl_cuda_backend(void) { return &gdl__cu_table; }
