/* cuda_emu.h — the CUDA-on-CPU emulator's kernel-side header. Force-included
   (g++ -include tests/cuda_emu/cuda_emu.h -DGPUDL_EMU) before gpudl_cuda.cu so
   that g++ compiles the unchanged CUDA source as host C++; cuda_emu.cpp is the
   runtime (the cuda* and cublas* entry points, streams, fibers, checks).

   The real CUDA headers supply the types, enums and declarations; this file
   supplies what nvcc would: threadIdx & co., __shared__, __syncthreads, warp
   intrinsics, atomics, the bit-cast intrinsics, and the launch: gpudl_cuda.cu
   launches through GDL_CU_LAUNCH(kernel, grid, block, shmem, stream)(args),
   which is kernel<<<grid, block, shmem, stream>>>(args) under nvcc and
   gdl_emu_launch(...)(args) here.

   Model: a launch is queued on its stream; a worker thread per stream runs it
   when the stream reaches it, handing blocks to GPUDL_EMU_WORKERS OS threads
   (default 2). A block runs on one OS thread as cooperative fibers: threads
   run to completion one after another on one fiber, and a thread gets a fiber
   of its own only when it waits at __syncthreads or a warp operation. Static
   __shared__ variables are `static thread_local`, hence shared by the block.

   Environment: GPUDL_EMU_DEVICES (1), GPUDL_EMU_SCHED (rr | warp | revthreads
   | revblocks), GPUDL_EMU_WORKERS (2), GPUDL_EMU_MEM_MB (16384 per device),
   GPUDL_EMU_FAIL_ALLOC=k, GPUDL_EMU_FAIL_LAUNCH=k, GPUDL_EMU_FAIL_CUBLAS=k
   (the k-th cudaMalloc, kernel launch or cuBLAS GEMM call fails; the same
   as gdl_emu_fail_alloc / _launch / _cublas of emu_api.h), GPUDL_EMU_QUIET=1 (no
   diagnostics on stderr), GPUDL_EMU_PROTECT=0 (no host-access protection),
   GPUDL_EMU_TIMEOUT=s (600: a launch running longer ends the process with
   a report naming the kernel; 0 disables), GPUDL_EMU_LAUNCH_LOG=path (at
   exit, each kernel's largest block, dynamic shared memory and grid:
   "name threads shmem gx gy gz" lines, for tests/launch_limits.sh).
   GPUDL_EMU_GEMM=plain | perturbed | percall (plain): how cuBLAS/cuBLASLt
   calls sum. plain: the loop below. perturbed: each call sums in an order
   drawn from its configuration (API, sizes, ops, leading dims, strides,
   batch, types, math mode, epilogue, the operands' alignment mod 16 bytes)
   and GPUDL_EMU_GEMM_SEED (default 1): K cut into 1-4 split-K slices, each
   summed over blocks of 0 (one chain), 1, 2, ... 64 products as fmaf
   chains, the slices added in order or pairwise, alpha * sum + beta * C
   fused or not, and TF32 (where the call asks for it: Sgemm* under
   CUBLAS_TF32_TENSOR_OP_MATH, cuBLASLt with CUBLAS_COMPUTE_32F_FAST_TF32;
   not GemmEx's CUBLAS_COMPUTE_32F) rounding to nearest or truncating.
   Why per configuration: that is what a GPU guarantees. cuBLAS's heuristic
   picks one kernel for one configuration, and that kernel is bitwise
   deterministic (gpudl asks for no atomics-based split-K), so the same
   call on the same stream repeats its bits; another shape, leading
   dimension, alignment or API may get another kernel and other last bits.
   So two different GEMM calls must be compared with a tolerance, and two
   identical ones may be compared bit for bit. (`shape`, its former name,
   is the same mode.) percall: an order per call (a call counter and the
   seed): also breaks identical calls, which a GPU does not: an audit of
   which comparisons are bitwise, not a gate.
   GPUDL_EMU_RACECHECK=1: hazard check for code compiled with
   -fsanitize=thread (the emulator supplies the TSan hooks; no TSan runtime
   is linked; uninstrumented code is not checked, and a note says so).
   Shared memory: per byte of static __shared__ and dynamic shared memory,
   the last writer and barrier interval, and up to two readers in the
   interval; a write-write, write-read or read-write pair of two threads of
   one block in one interval is reported (kernel, buffer and byte offset,
   block, both threads and code offsets for addr2line); lanes of one warp
   ordered by a __syncwarp are exempt, as are atomics. Global memory: per
   byte of device memory, the block that last wrote it and the last block
   that read it (tags unique per block of every launch); a byte written by
   one block and written or read by another block of the same launch is
   reported (kernel, allocation and byte offset, both blocks), unless both
   blocks ran a __threadfence (the "last block" pattern: fence, atomic
   counter, the last block reads the others' results). Each distinct hazard
   is reported once and counted (gdl_emu_count("race")); a process that
   reported hazards exits with status 66. gdl_emu_racecheck(on) switches it
   from a test.
   GPUDL_EMU_INITCHECK=1: reads of memory never written, as
   compute-sanitizer's initcheck. Every device allocation gets a shadow (per
   byte: written or not), set by kernel stores and atomics (instrumented
   code, as above), copies (a device-to-device copy carries the source's
   state), memsets, cuBLAS/cuBLASLt outputs and NCCL outputs; checked at
   every kernel load and atomic, every device-to-host copy, every cuBLAS
   operand (A and B, C where beta != 0, the bias) and every NCCL send
   buffer. Static __shared__ and dynamic shared memory are uninitialised at
   the start of every block. A report names the kernel, the buffer (device
   allocation #id or the __shared__ variable) and byte offset, the block
   and thread; counted as gdl_emu_count("uninit"); exit status 66 as above.
   gdl_emu_initcheck(on) switches it from a test. The shadows cost 4 bytes
   per byte of device memory touched (8 with racecheck). A suballocator
   that hands a block out again calls gdl_emu_mark_uninit (emu_api.h): in
   its stream's order the block's bytes become never written again, with
   no writer or reader block (gpudl's caching allocator does, under
   GPUDL_EMU, for every cache hit), so a read past a tensor into bytes an
   earlier tenant of the block wrote is reported.
   gpudl_cuda.cu's own GPUDL_CUDA_MAX_GRID=n caps its grids at n blocks:
   the checks run of make test-emu sets 3, so that blocks loop over several
   rows or tiles (grid-stride loops) with more than one warp, where a
   missing barrier before a block reuses its shared memory shows.

   Limits (what the emulator does not model):
   - timing: no warp lockstep, no memory coalescing or bank conflicts, no
     occupancy; performance figures mean nothing; event times are host times.
   - cuBLAS: a plain column-major loop accumulating in float (TF32 mode rounds
     the inputs to 10-bit mantissas, nearest-even); the last bits differ from
     cuBLAS's own blocked, FMA-ordered sums. GPUDL_EMU_GEMM=perturbed/percall
     vary the order within one family of orders (split-K, block FMA chains);
     they do not reproduce any real kernel's bits, tensor-core internal
     precision, or split-K's atomics (nondeterministic on a GPU only with
     special algorithms, which gpudl does not request).
   - cuBLASLt: cublasLtMatmul with f32 matrices and the DEFAULT, RELU, BIAS,
     RELU_BIAS, GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS epilogues only (the
     GEMM above, then the epilogue with gpudl's own ReLU / tanh-GELU formulas);
     the heuristic returns one algorithm for every configuration it runs,
     and none (CUBLAS_STATUS_NOT_SUPPORTED, counted as
     gdl_emu_count("lt_no_algo")) where the real library may find none: a
     MIN_ALIGNMENT preference below the element size, a bias vector not
     16-byte aligned, an aux output not 16-byte aligned or with an ld not
     divisible by 8. Its algorithm assumes the promised alignments (at
     most 16 bytes; 256 when no preference is set), and cublasLtMatmul
     refuses pointers less aligned than that. The real heuristic's other
     reasons to find nothing (workspace too small, a shape no kernel
     covers) are not modelled. Its algorithm asks for the workspace the
     preference allows (CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, 0 by
     default), up to 1 MiB, as the heuristic's workspaceSize (a real one
     asks for anything from 0 up to the maximum), and cublasLtMatmul refuses
     less (CUBLAS_STATUS_INVALID_VALUE: cuBLASLt never allocates).
   - cuBLAS workspaces: a handle uses the library's default pool until
     cublasSetWorkspace, and cublasSetStream puts it back on the pool (as
     the cuBLAS documentation says). A GEMM from the pool on a capturing
     stream, and cublasCreate during a global-mode capture on its device,
     would allocate inside the capture: they fail (CUBLAS_STATUS_ALLOC_FAILED)
     and invalidate it, as cudaMalloc does (CUDA before 12.2; since 12.2
     cuBLAS's pool uses cudaMallocAsync, and the capture would succeed with
     a memory node in the graph, which gpudl wants no more than a failure).
     (Relaxed-mode captures allow it.) A queued or replayed GEMM checks
     that its workspace is still device memory (a diagnostic, not an
     error); the workspace's size is not held against what an algorithm
     would want, and two streams sharing one workspace are not reported.
   - races between threads that use neither barriers nor atomics are only
     exposed as far as the schedules (GPUDL_EMU_SCHED) reorder them; within a
     block, threads interleave only at barriers and warp operations.
     GPUDL_EMU_RACECHECK and INITCHECK see only code compiled with
     -fsanitize=thread (memcpy/memset inside a kernel are not seen). Shared
     memory: a warp's lanes are taken as unordered unless a __syncwarp
     separates them (shuffles, ballots do not order shared-memory
     accesses); a thread that read a byte is remembered only for the two
     first readers of an interval; atomics are not checked against plain
     accesses. Global memory: races between threads of one block are not
     checked (only between blocks), nor between launches on different
     streams, nor between a kernel and a copy; one reader per byte is
     remembered (the last); any __threadfence in both blocks is taken to
     order them (a real GPU needs the fence before the publishing atomic
     and after the observing one); pinned host memory is not shadowed.
     Initcheck: bytes are initialised or not, not per bit; padding that
     a kernel copies whole counts as read; memory is tracked per
     cudaMalloc, and a suballocator's block is fresh again only where the
     suballocator says so (gdl_emu_mark_uninit; gpudl's caching allocator
     does); compute-sanitizer on a GPU has the same blind spot unless the
     allocator annotates its blocks (gpudl's does not), so a read past a
     tensor into an earlier tenant's bytes is found here, not there.
     Hazards that need a block to loop over rows are seen only where it
     does (the checks run's GPUDL_CUDA_MAX_GRID=3; other runs use the
     backend's caps, reached only by inputs larger than the suite's).
   - __shared__ is not refilled with garbage between blocks: without
     GPUDL_EMU_INITCHECK a read before the first write sees the previous
     block's (or zero) values, not NaN. Dynamic shared memory
     (gdl_emu_dynamic_shared()) is filled with NaN per block.
   - host access to device memory faults only while the device is idle (memory
     is protected at every host synchronisation and unprotected when work is
     queued); an access while kernels are queued or running is not caught.
   - out-of-bounds accesses fault at the guard page after each allocation
     (allocations end at a page boundary, rounded to 256 bytes); a write into
     the < 256-byte rounding slop is found at cudaFree, a read is not; an
     access that jumps over the guard page into other memory is not caught.
   - stream capture covers one stream (cudaStreamBeginCapture/EndCapture,
     cudaGraphInstantiate/Launch/Destroy) with CUDA's main rules (no
     cudaMalloc/cudaFree, legacy-stream work or synchronisation during a
     global-mode capture; no pageable copies); fork/join of other streams
     into a capture via events is refused, graphs are not editable, and
     pointers are checked at capture time, not at replay.
   - no cudaStreamPerThread semantics (it is the legacy stream), no peer
     access, no texture/constant memory, no cooperative groups.
   - cudaStreamDestroy waits for the stream's queued work (CUDA returns at
     once and lets it finish).
   - device math is the host libm's: expf/logf/tanhf... may differ from CUDA's
     in the last ulp.

   NCCL (cuda_emu.cpp, the end): ncclGetUniqueId, ncclCommInitRank,
   ncclAllReduce, ncclBroadcast, ncclAllGather, ncclReduceScatter,
   ncclCommDestroy, ncclCommAbort, ncclCommGetAsyncError, ncclGetErrorString.
   Design: the unique id holds a random key that names a POSIX shared-memory
   segment (/dev/shm/gdl-emu-nccl-<key>); every rank maps it, so the ranks
   may be processes (each with its emulated devices, taking one) or threads
   of one process (each with its current device), or both. The segment holds
   a barrier (atomic counter and generation, process-shared), each rank's
   description of its current call, and one 1 MiB slot per rank.
   ncclCommInitRank returns once every rank has mapped the segment (rank 0
   then unlinks its name). A collective checks its arguments (the buffers
   must be memory of the communicator's device, the current device must be
   its device) and is queued on its stream, so it runs in CUDA's stream
   order and after the events the stream waits for. When the stream
   reaches it, every rank writes the call's description (kind, count,
   type, op, root, sequence number) and checks that all ranks make the
   same call (a mismatch is a diagnostic and ncclInvalidUsage, where NCCL
   would hang or corrupt), then, 1 MiB per rank per round: writes its part
   into its slot, waits at the barrier, computes its result from the slots,
   waits again. Sums add the ranks' values in rank order (so every rank
   has the same bits; ncclAvg then divides by the rank count, as the CPU
   path's sum-then-divide). Timeout: a barrier not filled within
   GPUDL_EMU_NCCL_TIMEOUT seconds (else GPUDL_DIST_TIMEOUT, else 120;
   gdl_emu_nccl_timeout() overrides both) breaks the
   communicator for every rank: the collective's output stays untouched,
   ncclCommGetAsyncError returns ncclRemoteError, a diagnostic names the
   waiting rank, and later collectives do nothing. ncclCommInitRank fails
   (ncclRemoteError) the same way when a rank never comes.
   Limits: float32, float64, int32 and int64 for reductions (any type for
   broadcast and all-gather), ncclSum and ncclAvg only; at most 64 ranks;
   no ncclGroupStart/End, no ncclCommInitAll or split, no stream capture of
   collectives, no in-kernel NCCL; the stream's worker thread blocks while
   it waits for peers (a real GPU's kernel would spin), so a rank's other
   work on that stream waits too; slow (two barriers per MiB); a segment
   left behind by a killed job stays in /dev/shm until removed. */
#ifndef GDL_CUDA_EMU_H
#define GDL_CUDA_EMU_H
#ifndef __cplusplus
#error "cuda_emu.h is for g++ builds of .cu files"
#endif

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <tuple>
#include <type_traits>
#include <utility>

#include "emu_api.h"

// ---------------------------------------------------------------------------
// coordinates: per OS thread; the block scheduler rewrites threadIdx at every
// fiber switch, so reads are plain TLS loads

inline thread_local uint3 gdl_emu_threadIdx_, gdl_emu_blockIdx_;
inline thread_local dim3 gdl_emu_blockDim_, gdl_emu_gridDim_;
#define threadIdx gdl_emu_threadIdx_
#define blockIdx gdl_emu_blockIdx_
#define blockDim gdl_emu_blockDim_
#define gridDim gdl_emu_gridDim_
static constexpr int warpSize = 32;

// one block at a time per OS thread: a thread-local static is block-shared
#undef __shared__
#define __shared__ static thread_local

extern "C" {
void gdl_emu_syncthreads_at(const char *file, int line);
unsigned long long gdl_emu_warp_op(int kind, unsigned mask, unsigned long long v, int arg, int width,
                                   const char *file, int line);
void *gdl_emu_dynamic_shared(void);
}

enum { GDL_EMU_SHFL_IDX, GDL_EMU_SHFL_UP, GDL_EMU_SHFL_DOWN, GDL_EMU_SHFL_XOR, GDL_EMU_BALLOT, GDL_EMU_ANY,
       GDL_EMU_ALL, GDL_EMU_SYNCWARP };

static inline void __syncthreads(const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    gdl_emu_syncthreads_at(file, line);
}

template <class T> static inline T gdl_emu_shfl_(int kind, unsigned mask, T v, int arg, int width, const char *f, int l) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type wider than 8 bytes");
    unsigned long long b = 0;
    memcpy(&b, &v, sizeof v);
    b = gdl_emu_warp_op(kind, mask, b, arg, width, f, l);
    memcpy(&v, &b, sizeof v);
    return v;
}
template <class T>
static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, const char *f = __builtin_FILE(),
                            int l = __builtin_LINE()) {
    return gdl_emu_shfl_(GDL_EMU_SHFL_IDX, mask, v, src, width, f, l);
}
template <class T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32, const char *f = __builtin_FILE(),
                               int l = __builtin_LINE()) {
    return gdl_emu_shfl_(GDL_EMU_SHFL_UP, mask, v, (int)d, width, f, l);
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32, const char *f = __builtin_FILE(),
                                 int l = __builtin_LINE()) {
    return gdl_emu_shfl_(GDL_EMU_SHFL_DOWN, mask, v, (int)d, width, f, l);
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lm, int width = 32, const char *f = __builtin_FILE(),
                                int l = __builtin_LINE()) {
    return gdl_emu_shfl_(GDL_EMU_SHFL_XOR, mask, v, lm, width, f, l);
}
static inline unsigned __ballot_sync(unsigned mask, int pred, const char *f = __builtin_FILE(), int l = __builtin_LINE()) {
    return (unsigned)gdl_emu_warp_op(GDL_EMU_BALLOT, mask, pred != 0, 0, 32, f, l);
}
static inline int __any_sync(unsigned mask, int pred, const char *f = __builtin_FILE(), int l = __builtin_LINE()) {
    return (int)gdl_emu_warp_op(GDL_EMU_ANY, mask, pred != 0, 0, 32, f, l);
}
static inline int __all_sync(unsigned mask, int pred, const char *f = __builtin_FILE(), int l = __builtin_LINE()) {
    return (int)gdl_emu_warp_op(GDL_EMU_ALL, mask, pred != 0, 0, 32, f, l);
}
static inline void __syncwarp(unsigned mask = 0xffffffffu, const char *f = __builtin_FILE(), int l = __builtin_LINE()) {
    (void)gdl_emu_warp_op(GDL_EMU_SYNCWARP, mask, 0, 0, 32, f, l);
}

// ---------------------------------------------------------------------------
// atomics: atomic across the worker threads that run blocks in parallel

template <class T> static inline T gdl_emu_atomic_update_(T *p, T v, T (*op)(T, T)) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomic on an odd size");
    typedef typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type U;
    U *u = (U *)(void *)p, old = __atomic_load_n(u, __ATOMIC_RELAXED), nu;
    for (;;) {
        T o, n;
        memcpy(&o, &old, sizeof o);
        n = op(o, v);
        memcpy(&nu, &n, sizeof nu);
        if (__atomic_compare_exchange_n(u, &old, nu, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return o;
    }
}
static inline float atomicAdd(float *p, float v) {
    return gdl_emu_atomic_update_<float>(p, v, [](float a, float b) { return a + b; });
}
static inline double atomicAdd(double *p, double v) {
    return gdl_emu_atomic_update_<double>(p, v, [](double a, double b) { return a + b; });
}
static inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
static inline int atomicSub(int *p, int v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
static inline unsigned atomicSub(unsigned *p, unsigned v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
static inline int atomicExch(int *p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
static inline unsigned atomicExch(unsigned *p, unsigned v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
static inline float atomicExch(float *p, float v) {
    return gdl_emu_atomic_update_<float>(p, v, [](float, float b) { return b; });
}
template <class T> static inline T gdl_emu_cas_(T *p, T cmp, T v) {
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
static inline int atomicCAS(int *p, int c, int v) { return gdl_emu_cas_(p, c, v); }
static inline unsigned atomicCAS(unsigned *p, unsigned c, unsigned v) { return gdl_emu_cas_(p, c, v); }
static inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long c, unsigned long long v) {
    return gdl_emu_cas_(p, c, v);
}
static inline int atomicMax(int *p, int v) {
    return gdl_emu_atomic_update_<int>(p, v, [](int a, int b) { return a > b ? a : b; });
}
static inline unsigned atomicMax(unsigned *p, unsigned v) {
    return gdl_emu_atomic_update_<unsigned>(p, v, [](unsigned a, unsigned b) { return a > b ? a : b; });
}
static inline int atomicMin(int *p, int v) {
    return gdl_emu_atomic_update_<int>(p, v, [](int a, int b) { return a < b ? a : b; });
}
static inline unsigned atomicMin(unsigned *p, unsigned v) {
    return gdl_emu_atomic_update_<unsigned>(p, v, [](unsigned a, unsigned b) { return a < b ? a : b; });
}
static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ---------------------------------------------------------------------------
// bit casts and fast-math intrinsics, with their host meanings

template <class To, class From> static inline To gdl_emu_bits_(From f) {
    static_assert(sizeof(To) == sizeof(From), "bit cast between sizes");
    To t;
    memcpy(&t, &f, sizeof t);
    return t;
}
static inline float __int_as_float(int x) { return gdl_emu_bits_<float>(x); }
static inline float __uint_as_float(unsigned x) { return gdl_emu_bits_<float>(x); }
static inline int __float_as_int(float x) { return gdl_emu_bits_<int>(x); }
static inline unsigned __float_as_uint(float x) { return gdl_emu_bits_<unsigned>(x); }
static inline double __longlong_as_double(long long x) { return gdl_emu_bits_<double>(x); }
static inline long long __double_as_longlong(double x) { return gdl_emu_bits_<long long>(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __saturatef(float x) { return x != x ? 0.0f : x < 0 ? 0.0f : x > 1 ? 1.0f : x; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
template <class T> static inline T __ldg(const T *p) { return *p; }

// ---------------------------------------------------------------------------
// launch: kernel<<<grid, block, shmem, stream>>>(args) becomes
// gdl_emu_launch("kernel", kernel, grid, block, shmem, stream)(args). The
// arguments are converted to the kernel's parameter types and copied, as
// CUDA does; pointer arguments are checked at launch.

extern "C" void gdl_emu_submit(const char *name, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
                               void *ctx, void (*run)(void *), void (*destroy)(void *), const void *const *ptrs,
                               int nptrs);

template <class T> static inline void gdl_emu_ptr_arg_(const T &v, const void **out, int &n) {
    if constexpr (std::is_pointer<T>::value) out[n++] = (const void *)v;
    else (void)v, (void)out, (void)n;
}

template <class... P> struct gdl_emu_launcher {
    void (*k)(P...);
    const char *name;
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
    typedef std::tuple<typename std::decay<P>::type...> args_t;
    struct ctx {
        void (*k)(P...);
        args_t args;
    };
    static void run(void *c) {
        ctx *x = (ctx *)c;
        std::apply(x->k, x->args);
    }
    static void destroy(void *c) { delete (ctx *)c; }
    template <class... A> void operator()(A &&...a) const {
        static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
        ctx *c = new ctx{k, args_t(std::forward<A>(a)...)};
        const void *ptrs[sizeof...(P) + 1];
        int n = 0;
        std::apply([&](const auto &...v) { (gdl_emu_ptr_arg_(v, ptrs, n), ...); }, c->args);
        gdl_emu_submit(name, grid, block, shmem, stream, c, &run, &destroy, ptrs, n);
    }
};

template <class... P>
static inline gdl_emu_launcher<P...> gdl_emu_launch(const char *name, void (*k)(P...), dim3 grid, dim3 block,
                                                    size_t shmem, cudaStream_t stream) {
    gdl_emu_launcher<P...> l;
    l.k = k;
    l.name = name;
    l.grid = grid;
    l.block = block;
    l.shmem = shmem;
    l.stream = stream;
    return l;
}

#endif
