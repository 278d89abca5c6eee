/* test_emu.cpp — the CUDA-on-CPU emulator's own test: barriers, warp
   exchanges, atomics, dynamic shared memory, asynchronous streams, events and
   the legacy stream's ordering, cuBLAS, fault injection, and that every
   diagnostic (barrier, warp, memory, launch, copy, cuBLAS) fires. Compiled
   like gpudl_cuda.cu: g++ -include cuda_emu.h. */
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "harness.h"

#define LAUNCH(k, grid, block, shmem, stream) gdl_emu_launch(#k, k, grid, block, shmem, stream)

static void *dmalloc(size_t n) {
    void *p = NULL;
    return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
}

// a launch that must fail inside the kernel: the diagnostic names the kernel
// and thread; the error is sticky until cudaDeviceReset
static enum harness_result expect_kernel_failure(const char *needle, cudaError_t want) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e != want) FAILf("expected %s, got %s (%s)", cudaGetErrorName(want), cudaGetErrorName(e), gdl_emu_last_diagnostic());
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), needle);
    ASSERT_EQ((int)want, (int)cudaGetLastError()); /* sticky: not cleared */
    ASSERT_EQ((int)want, (int)cudaGetLastError());
    ASSERT_EQ(0, (int)cudaDeviceReset());
    ASSERT_EQ(0, (int)cudaGetLastError());
    return HARNESS_PASS;
}

// ---------------------------------------------------------------------------
// kernels

__global__ void k_block_reverse(const int *in, int *out, int n) {
    __shared__ int sh[1024];
    int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    if (base + t < n) sh[t] = in[base + t];
    __syncthreads();
    int src = blockDim.x - 1 - t;
    if (base + t < n && base + src < n) out[base + t] = sh[src];
}

// the same without the barrier: a race the emulator turns into wrong output
__global__ void k_block_reverse_racy(const int *in, int *out, int n) {
    __shared__ int sh[1024];
    int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    if (base + t < n) sh[t] = in[base + t];
    int src = blockDim.x - 1 - t;
    if (base + t < n && base + src < n) out[base + t] = sh[src];
}

__global__ void k_shuffles(int *out) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int *o = out + (w * 32 + lane) * 8;
    o[0] = __shfl_xor_sync(0xffffffffu, lane * 10, 5);
    o[1] = __shfl_up_sync(0xffffffffu, lane * 10, 3);
    o[2] = __shfl_down_sync(0xffffffffu, lane * 10, 3);
    o[3] = __shfl_sync(0xffffffffu, lane * 10, 7);
    o[4] = __shfl_sync(0xffffffffu, lane * 10, 2, 8); /* width 8: lane 2 of each group of 8 */
    o[5] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
    o[6] = __any_sync(0xffffffffu, lane == 17) + 2 * __all_sync(0xffffffffu, lane < 32);
    double d = __shfl_xor_sync(0xffffffffu, (double)lane + 0.5, 1);
    o[7] = (int)(d * 2);
}

__global__ void k_warp_sum_half(float *out) { /* only lanes 0..15 take part, with a matching mask */
    int lane = threadIdx.x;
    if (lane >= 16) return;
    float v = (float)lane;
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0x0000ffffu, v, o);
    out[lane] = v;
}

__global__ void k_atomics(float *f, int *i, unsigned long long *u, int n) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    atomicAdd(f, 1.0f);
    atomicAdd(i, 1);
    atomicAdd(u, 2ull);
    atomicMax(i + 1, t);
}

__global__ void k_dyn_shared(int *out) {
    int *sh = (int *)gdl_emu_dynamic_shared();
    int t = threadIdx.x;
    out[blockDim.x + t] = sh[t]; /* fresh per block: all bits set */
    __syncthreads();
    sh[t] = t * 3;
    __syncthreads();
    out[t] = sh[blockDim.x - 1 - t];
}

// GPUDL_EMU_RACECHECK's planted bug: a block sum, then the shared buffer
// reused for a second sum. `fixed` 0 leaves out the barrier between reading
// the first sum (s[0], every thread) and refilling s (thread 0 writes s[0]).
__global__ void k_reduce_reuse(const float *x, float *out, int fixed) {
    __shared__ float s_red[64];
    int t = threadIdx.x;
    s_red[t] = x[t];
    __syncthreads();
    for (int h = 32; h > 0; h >>= 1) {
        if (t < h) s_red[t] += s_red[t + h];
        __syncthreads();
    }
    float first = s_red[0];
    if (fixed) __syncthreads();
    s_red[t] = x[t] * 2.0f; /* reuse */
    __syncthreads();
    for (int h = 32; h > 0; h >>= 1) {
        if (t < h) s_red[t] += s_red[t + h];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = first + s_red[0];
}

// GPUDL_EMU_INITCHECK's planted bugs. `past` 1: each thread reads one
// element past the n that were written; shared: block 0 fills the tile, the
// other blocks read it without writing (the previous block's values)
__global__ void k_read_past(const float *x, float *out, int n, int past) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i + past];
}
// a plain read of n elements (a report's location is the kernel and code
// offset, reported once: a kernel of its own for gdl_emu_mark_uninit)
__global__ void k_read_again(const float *x, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i];
}
__global__ void k_shared_stale(float *out, int fill_every_block) {
    __shared__ float s_tile[32];
    if (fill_every_block || blockIdx.x == 0) s_tile[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[blockIdx.x * 32 + threadIdx.x] = s_tile[31 - threadIdx.x];
}
// the global-memory half of GPUDL_EMU_RACECHECK: every block writes out[0]
// (mode 0), or reads its neighbour's output (mode 1); mode 2 is the "last
// block" pattern that fences and counts with an atomic (ordered: clean)
__global__ void k_blocks_collide(float *out, unsigned *done, int mode) {
    __shared__ int s_last;
    if (threadIdx.x != 0) return;
    if (mode == 0) out[0] = 1.0f;
    if (mode == 1) out[blockIdx.x] = 1.0f + out[(blockIdx.x + 1) % gridDim.x];
    if (mode == 2) {
        out[blockIdx.x] = (float)blockIdx.x;
        __threadfence();
        s_last = atomicAdd(done, 1u) == gridDim.x - 1;
        if (s_last) {
            __threadfence();
            float t = 0;
            for (unsigned b = 0; b < gridDim.x; b++) t += out[b];
            out[gridDim.x] = t;
        }
    }
}

// lanes exchange through dynamic shared memory: ordered by __syncwarp or not
__global__ void k_warp_exchange_dyn(int *out, int with_syncwarp) {
    int *sh = (int *)gdl_emu_dynamic_shared();
    int t = threadIdx.x;
    sh[t] = t * 5;
    if (with_syncwarp) __syncwarp();
    out[t] = sh[t ^ 1];
}

// waits until the host sets *flag (pinned memory), then writes v
__global__ void k_wait_then_write(volatile int *flag, int *x, int n, int v) {
    if (threadIdx.x == 0 && blockIdx.x == 0)
        while (__atomic_load_n((const int *)flag, __ATOMIC_ACQUIRE) == 0) sched_yield();
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = v;
}

__global__ void k_copy(const int *a, int *b, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) b[i] = a[i];
}

__global__ void k_divergent_barrier(int *x) {
    if (threadIdx.x < 16) __syncthreads();
    else __syncthreads();
    x[threadIdx.x] = 1;
}

__global__ void k_barrier_after_exit(int *x) {
    if (threadIdx.x == 0) return;
    __syncthreads();
    x[threadIdx.x] = 1;
}

__global__ void k_mask_leaves_out_caller(int *x) {
    x[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, (int)threadIdx.x, 1);
}

__global__ void k_reads_lane_outside_mask(int *x) {
    if (threadIdx.x >= 16) return;
    x[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, (int)threadIdx.x, 16);
}

__global__ void k_mask_names_exited_lane(int *x) {
    if (threadIdx.x >= 16) return;
    x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

__global__ void k_deadlock(int *x) {
    if (threadIdx.x == 0) x[0] = __shfl_sync(0xffffffffu, 1, 0);
    else __syncthreads();
}

__global__ void k_write_at(float *p, long i, float v) {
    if (threadIdx.x == 0) p[i] = v;
}

__global__ void k_write_byte(char *p, long i) {
    if (threadIdx.x == 0) p[i] = 1;
}

__global__ void k_nop(const float *) {}

__global__ void k_spin(volatile int *x) {
    while (x[0] != 12345) {
    }
}

// ---------------------------------------------------------------------------
// execution model

TEST barrier_block_reverse(void) {
    const int n = 1000;
    std::vector<int> h(n), r(n);
    for (int i = 0; i < n; i++) h[i] = i * 7 + 1;
    int *a = (int *)dmalloc(n * 4), *b = (int *)dmalloc(n * 4);
    ASSERT(a && b);
    ASSERT_EQ(0, (int)cudaMemcpy(a, h.data(), n * 4, cudaMemcpyHostToDevice));
    LAUNCH(k_block_reverse, 4, 250, 0, 0)(a, b, n);
    ASSERT_EQ(0, (int)cudaGetLastError());
    ASSERT_EQ(0, (int)cudaMemcpy(r.data(), b, n * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) ASSERT_EQ(h[(i / 250) * 250 + 249 - i % 250], r[i]);
    // without the barrier every schedule gets it wrong: a thread reads its
    // partner's slot before the partner has run
    LAUNCH(k_block_reverse_racy, 4, 250, 0, 0)(a, b, n);
    ASSERT_EQ(0, (int)cudaMemcpy(r.data(), b, n * 4, cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < n; i++) wrong += r[i] != h[(i / 250) * 250 + 249 - i % 250];
    ASSERT_GT(wrong, 0);
    cudaFree(a);
    cudaFree(b);
    PASS();
}

TEST warp_exchanges(void) {
    int *d = (int *)dmalloc(64 * 8 * 4);
    std::vector<int> h(64 * 8);
    ASSERT(d);
    LAUNCH(k_shuffles, 1, 64, 0, 0)(d);
    ASSERT_EQ(0, (int)cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost));
    unsigned ballot = 0;
    for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
    for (int t = 0; t < 64; t++) {
        int l = t & 31, *o = &h[t * 8];
        ASSERT_EQ((l ^ 5) * 10, o[0]);
        ASSERT_EQ((l >= 3 ? l - 3 : l) * 10, o[1]);
        ASSERT_EQ((l + 3 < 32 ? l + 3 : l) * 10, o[2]);
        ASSERT_EQ(70, o[3]);
        ASSERT_EQ(((l & ~7) + 2) * 10, o[4]);
        ASSERT_EQ((long long)ballot, (long long)(unsigned)o[5]);
        ASSERT_EQ(3, o[6]);
        ASSERT_EQ(2 * (l ^ 1) + 1, o[7]);
    }
    float *f = (float *)dmalloc(16 * 4);
    float hf[16];
    LAUNCH(k_warp_sum_half, 1, 32, 0, 0)(f);
    ASSERT_EQ(0, (int)cudaMemcpy(hf, f, sizeof hf, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 16; i++) ASSERT_IN_RANGE(120.0, hf[i], 0);
    cudaFree(d);
    cudaFree(f);
    PASS();
}

TEST atomics_across_workers(void) {
    const int n = 1 << 16;
    float *f = (float *)dmalloc(4);
    int *i = (int *)dmalloc(8);
    unsigned long long *u = (unsigned long long *)dmalloc(8);
    ASSERT(f && i && u);
    ASSERT_EQ(0, (int)cudaMemset(f, 0, 4));
    ASSERT_EQ(0, (int)cudaMemset(i, 0, 8));
    ASSERT_EQ(0, (int)cudaMemset(u, 0, 8));
    LAUNCH(k_atomics, n / 128, 128, 0, 0)(f, i, u, n);
    float hf;
    int hi[2];
    unsigned long long hu;
    ASSERT_EQ(0, (int)cudaMemcpy(&hf, f, 4, cudaMemcpyDeviceToHost));
    ASSERT_EQ(0, (int)cudaMemcpy(hi, i, 8, cudaMemcpyDeviceToHost));
    ASSERT_EQ(0, (int)cudaMemcpy(&hu, u, 8, cudaMemcpyDeviceToHost));
    ASSERT_IN_RANGE((double)n, hf, 0);
    ASSERT_EQ(n, hi[0]);
    ASSERT_EQ(n - 1, hi[1]);
    ASSERT_EQ(2LL * n, (long long)hu);
    cudaFree(f);
    cudaFree(i);
    cudaFree(u);
    PASS();
}

TEST dynamic_shared_memory(void) {
    int *d = (int *)dmalloc(2 * 64 * 4);
    std::vector<int> h(128);
    LAUNCH(k_dyn_shared, 3, 64, 64 * sizeof(int), 0)(d);
    ASSERT_EQ(0, (int)cudaMemcpy(h.data(), d, 128 * 4, cudaMemcpyDeviceToHost));
    for (int t = 0; t < 64; t++) {
        ASSERT_EQ((63 - t) * 3, h[t]);
        ASSERT_EQ(-1, h[64 + t]);
    }
    cudaFree(d);
    PASS();
}

TEST fresh_memory_is_nan(void) {
    float *d = (float *)dmalloc(1000 * 4), h[1000];
    ASSERT_NOT_NULL(d);
    ASSERT_EQ(0, (int)cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 1000; i++) ASSERT(h[i] != h[i]);
    cudaFree(d);
    PASS();
}

// GPUDL_EMU_RACECHECK: the planted missing barrier is caught, naming the
// kernel, the buffer and the threads; the fixed kernel and a __syncwarp-ordered
// exchange are clean. Needs this file compiled with -fsanitize=thread (the
// emulator's hooks; the racecheck build of emu.mk); skipped otherwise.
TEST racecheck_missing_barrier(void) {
#ifndef __SANITIZE_THREAD__
    SKIPm("this build is not instrumented (-fsanitize=thread)");
#else
    ASSERT_EQ(0, gdl_emu_racecheck(1));
    float hx[64], *x = (float *)dmalloc(sizeof hx), *out = (float *)dmalloc(2 * sizeof(float)), ho[2];
    int *io = (int *)dmalloc(64 * sizeof(int));
    ASSERT(x && out && io);
    for (int i = 0; i < 64; i++) hx[i] = (float)i;
    ASSERT_EQ(0, (int)cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice));
    long r0 = gdl_emu_count("race");
    LAUNCH(k_reduce_reuse, 2, 64, 0, 0)(x, out, 1);
    ASSERT_EQ(0, (int)cudaMemcpy(ho, out, sizeof ho, cudaMemcpyDeviceToHost));
    ASSERT_IN_RANGE(3.0 * 2016, ho[0], 0);
    ASSERT_EQ(r0, gdl_emu_count("race")); /* with the barrier: clean */
    LAUNCH(k_warp_exchange_dyn, 1, 64, 64 * sizeof(int), 0)(io, 1);
    ASSERT_EQ(0, (int)cudaDeviceSynchronize());
    ASSERT_EQ(r0, gdl_emu_count("race")); /* ordered by __syncwarp */
    LAUNCH(k_reduce_reuse, 2, 64, 0, 0)(x, out, 0);
    ASSERT_EQ(0, (int)cudaDeviceSynchronize()); /* a report, not a failed launch */
    ASSERT_GT(gdl_emu_count("race"), r0);
    const char *d = gdl_emu_last_diagnostic();
    ASSERT_CONTAINS(d, "racecheck: ");
    ASSERT_CONTAINS(d, "kernel k_reduce_reuse");
    ASSERT_CONTAINS(d, "s_red");
    ASSERT_CONTAINS(d, "byte offset 0");
    /* both blocks race; which one's report is the last depends on the workers' timing */
    ASSERTm(d, strstr(d, "block (0,0,0)") || strstr(d, "block (1,0,0)"));
    ASSERT_CONTAINS(d, "thread (0,0,0)");
    long r1 = gdl_emu_count("race");
    LAUNCH(k_warp_exchange_dyn, 1, 64, 64 * sizeof(int), 0)(io, 0);
    ASSERT_EQ(0, (int)cudaDeviceSynchronize());
    ASSERT_GT(gdl_emu_count("race"), r1); /* no __syncwarp: a hazard in dynamic shared memory */
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "dynamic shared memory");
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "k_warp_exchange_dyn");
    ASSERT_EQ(0, gdl_emu_racecheck(0));
    cudaFree(x);
    cudaFree(out);
    cudaFree(io);
    PASS();
#endif
}

// GPUDL_EMU_INITCHECK: reads of never-written device memory (one past the
// written end, a device-to-host copy) and of static __shared__ memory that
// this block did not write are reported, naming kernel, buffer, offset and
// thread; writes by kernels, copies and memsets initialise.
TEST initcheck_planted(void) {
#ifndef __SANITIZE_THREAD__
    SKIPm("this build is not instrumented (-fsanitize=thread)");
#else
    ASSERT_EQ(0, gdl_emu_initcheck(1));
    float hx[64], ho[128];
    for (int i = 0; i < 64; i++) hx[i] = (float)i;
    float *x = (float *)dmalloc(65 * sizeof(float)), *out = (float *)dmalloc(128 * sizeof(float));
    ASSERT(x && out);
    ASSERT_EQ(0, (int)cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice));
    long u0 = gdl_emu_count("uninit");
    LAUNCH(k_read_past, 2, 32, 0, 0)(x, out, 64, 0);
    ASSERT_EQ(0, (int)cudaMemcpy(ho, out, 64 * sizeof(float), cudaMemcpyDeviceToHost));
    ASSERT_EQ(u0, gdl_emu_count("uninit")); /* everything read was written */
    LAUNCH(k_read_past, 2, 32, 0, 0)(x, out, 64, 1);
    ASSERT_EQ(0, (int)cudaDeviceSynchronize()); /* a report, not a failed launch */
    ASSERT_EQ(u0 + 1, gdl_emu_count("uninit"));
    const char *d = gdl_emu_last_diagnostic();
    ASSERT_CONTAINS(d, "initcheck: ");
    ASSERT_CONTAINS(d, "kernel k_read_past");
    ASSERT_CONTAINS(d, "byte offset 256");
    ASSERT_CONTAINS(d, "block (1,0,0), thread (31,0,0)");
    /* a device-to-host copy of bytes never written */
    ASSERT_EQ(0, (int)cudaMemcpy(ho, out, 128 * sizeof(float), cudaMemcpyDeviceToHost));
    ASSERT_EQ(u0 + 2, gdl_emu_count("uninit"));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "at byte offset 256");
    ASSERT_EQ(0, (int)cudaMemset(out, 0, 128 * sizeof(float))); /* initialises */
    ASSERT_EQ(0, (int)cudaMemcpy(ho, out, 128 * sizeof(float), cudaMemcpyDeviceToHost));
    ASSERT_EQ(u0 + 2, gdl_emu_count("uninit"));
    /* static __shared__: uninitialised at the start of every block */
    LAUNCH(k_shared_stale, 4, 32, 0, 0)(out, 1);
    ASSERT_EQ(0, (int)cudaDeviceSynchronize());
    ASSERT_EQ(u0 + 2, gdl_emu_count("uninit"));
    LAUNCH(k_shared_stale, 4, 32, 0, 0)(out, 0);
    ASSERT_EQ(0, (int)cudaDeviceSynchronize());
    ASSERT_EQ(u0 + 3, gdl_emu_count("uninit"));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "__shared__ k_shared_stale(float*, int)::s_tile");
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "kernel k_shared_stale");
    /* a suballocator's block handed out again (gdl_emu_mark_uninit): in
       stream order, the kernel queued before still reads x's 64 written
       floats; the one after finds the last 32 never written */
    cudaStream_t st;
    ASSERT_EQ(0, (int)cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    LAUNCH(k_read_again, 2, 32, 0, st)(x, out, 64);
    ASSERT_EQ(0, gdl_emu_mark_uninit((const char *)x + 32 * sizeof(float), 32 * sizeof(float), (void *)st));
    ASSERT_EQ(0, (int)cudaStreamSynchronize(st));
    ASSERT_EQ(u0 + 3, gdl_emu_count("uninit"));
    LAUNCH(k_read_again, 2, 32, 0, st)(x, out, 64);
    ASSERT_EQ(0, (int)cudaStreamSynchronize(st));
    ASSERT_EQ(u0 + 4, gdl_emu_count("uninit"));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "byte offset 128");
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "block (1,0,0), thread (0,0,0)");
    ASSERT_EQ(-1, gdl_emu_mark_uninit(x, 4, (void *)&st)); /* not a stream */
    cudaStreamDestroy(st);
    ASSERT_EQ(0, gdl_emu_initcheck(0));
    cudaFree(x);
    cudaFree(out);
    PASS();
#endif
}

// GPUDL_EMU_RACECHECK on global memory: two blocks of one launch writing one
// address, or one reading what another writes, are reported with both
// blocks; the fenced "last block" pattern is not.
TEST racecheck_global_memory(void) {
#ifndef __SANITIZE_THREAD__
    SKIPm("this build is not instrumented (-fsanitize=thread)");
#else
    ASSERT_EQ(0, gdl_emu_racecheck(1));
    float *out = (float *)dmalloc(16 * sizeof(float));
    unsigned *done = (unsigned *)dmalloc(sizeof(unsigned));
    ASSERT(out && done);
    ASSERT_EQ(0, (int)cudaMemset(out, 0, 16 * sizeof(float)));
    ASSERT_EQ(0, (int)cudaMemset(done, 0, sizeof(unsigned)));
    long r0 = gdl_emu_count("race");
    LAUNCH(k_blocks_collide, 8, 32, 0, 0)(out, done, 2);
    ASSERT_EQ(0, (int)cudaDeviceSynchronize());
    ASSERT_EQ(r0, gdl_emu_count("race"));
    float t = 0;
    ASSERT_EQ(0, (int)cudaMemcpy(&t, out + 8, sizeof t, cudaMemcpyDeviceToHost));
    ASSERT_IN_RANGE(28.0, t, 0);
    LAUNCH(k_blocks_collide, 8, 32, 0, 0)(out, done, 0);
    ASSERT_EQ(0, (int)cudaDeviceSynchronize());
    ASSERT_EQ(r0 + 1, gdl_emu_count("race"));
    const char *d = gdl_emu_last_diagnostic();
    ASSERT_CONTAINS(d, "global-memory write-write hazard");
    ASSERT_CONTAINS(d, "byte offset 0");
    ASSERT_CONTAINS(d, "kernel k_blocks_collide");
    ASSERT_CONTAINS(d, ") and block (");
    LAUNCH(k_blocks_collide, 8, 32, 0, 0)(out, done, 1);
    ASSERT_EQ(0, (int)cudaDeviceSynchronize());
    ASSERT_GT(gdl_emu_count("race"), r0 + 1);
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "hazard on device allocation");
    ASSERT_EQ(0, gdl_emu_racecheck(0));
    cudaFree(out);
    cudaFree(done);
    PASS();
#endif
}

// GPUDL_EMU_GEMM: this program again (see main) under each mode; the child
// runs one Sgemm 4 times (m = n = 8, k = 999) and exits with bit 0 set when
// every result is within 1e-5 (relative) of a double sum and bit 1 when all
// four are bitwise equal
static int gemm_mode_child(const char *mode) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("GPUDL_EMU_GEMM", mode, 1);
        setenv("GDL_EMU_SELFTEST_GEMM", "1", 1);
        execl("/proc/self/exe", "test_emu", (char *)NULL);
        _exit(99);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
static int gemm_mode_main(void) {
    const int m = 8, n = 8, k = 999;
    std::vector<float> A(m * k), B(k * n), C(4 * m * n);
    for (int i = 0; i < m * k; i++) A[i] = (float)((i * 7919) % 1000) / 997.0f - 0.5f;
    for (int i = 0; i < k * n; i++) B[i] = (float)((i * 104729) % 1000) / 991.0f - 0.4f;
    float *dA = (float *)dmalloc(A.size() * 4), *dB = (float *)dmalloc(B.size() * 4), *dC = (float *)dmalloc(C.size() * 4);
    cublasHandle_t h;
    if (!dA || !dB || !dC || cublasCreate(&h)) return 98;
    cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B.data(), B.size() * 4, cudaMemcpyHostToDevice);
    float one = 1, zero = 0;
    if (strcmp(gdl_emu_gemm_mode(), getenv("GPUDL_EMU_GEMM"))) return 96;

    for (int r = 0; r < 4; r++)
        if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA, m, dB, k, &zero, dC + r * m * n, m)) return 97;
    cudaMemcpy(C.data(), dC, C.size() * 4, cudaMemcpyDeviceToHost);
    int close = 1, same = 1;
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double s = 0, a = 0;
                for (int p = 0; p < k; p++) s += (double)A[p * m + i] * B[j * k + p], a += fabs((double)A[p * m + i] * B[j * k + p]);
                float v = C[r * m * n + j * m + i];
                if (fabs(v - s) > 1e-5 * a) close = 0;
                if (memcmp(&v, &C[j * m + i], 4)) same = 0;
            }
    return close | same << 1;
}

TEST gemm_modes(void) {
    ASSERT_EQ(3, gemm_mode_child("plain"));     /* close, and the same bits every call */
    ASSERT_EQ(3, gemm_mode_child("perturbed")); /* close; one order per configuration: the same call repeats */
    ASSERT_EQ(1, gemm_mode_child("percall"));   /* close, in other orders per call */
    PASS();
}

// ---------------------------------------------------------------------------
// streams and events

TEST streams_run_asynchronously(void) {
    int *flag, *pinned, *x = (int *)dmalloc(256 * 4);
    cudaStream_t s;
    ASSERT_EQ(0, (int)cudaMallocHost((void **)&flag, 4));
    ASSERT_EQ(0, (int)cudaMallocHost((void **)&pinned, 256 * 4));
    *flag = 0;
    for (int i = 0; i < 256; i++) pinned[i] = -5;
    ASSERT_EQ(0, (int)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    LAUNCH(k_wait_then_write, 1, 64, 0, s)(flag, x, 256, 42);
    ASSERT_EQ(0, (int)cudaMemcpyAsync(pinned, x, 256 * 4, cudaMemcpyDeviceToHost, s));
    ASSERT_EQ((int)cudaErrorNotReady, (int)cudaStreamQuery(s));
    ASSERT_EQ(-5, pinned[0]); /* the host got here first: the copy has not run */
    __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    ASSERT_EQ(0, (int)cudaStreamSynchronize(s));
    for (int i = 0; i < 256; i++) ASSERT_EQ(42, pinned[i]);
    ASSERT_EQ(0, (int)cudaStreamDestroy(s));
    cudaFreeHost(flag);
    cudaFreeHost(pinned);
    cudaFree(x);
    PASS();
}

TEST events_order_streams(void) {
    int *flag, *a = (int *)dmalloc(64 * 4), *b = (int *)dmalloc(64 * 4), h[64];
    cudaStream_t s1, s2;
    cudaEvent_t e;
    ASSERT_EQ(0, (int)cudaMallocHost((void **)&flag, 4));
    *flag = 0;
    ASSERT_EQ(0, (int)cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    ASSERT_EQ(0, (int)cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    ASSERT_EQ(0, (int)cudaEventCreate(&e));
    LAUNCH(k_wait_then_write, 1, 32, 0, s1)(flag, a, 64, 7);
    ASSERT_EQ(0, (int)cudaEventRecord(e, s1));
    ASSERT_EQ(0, (int)cudaStreamWaitEvent(s2, e, 0));
    LAUNCH(k_copy, 1, 32, 0, s2)(a, b, 64);
    ASSERT_EQ((int)cudaErrorNotReady, (int)cudaEventQuery(e));
    __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    ASSERT_EQ(0, (int)cudaStreamSynchronize(s2));
    ASSERT_EQ(0, (int)cudaEventQuery(e));
    ASSERT_EQ(0, (int)cudaMemcpy(h, b, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++) ASSERT_EQ(7, h[i]);
    float ms = -1;
    cudaEvent_t e2;
    ASSERT_EQ(0, (int)cudaEventCreate(&e2));
    ASSERT_EQ(0, (int)cudaEventRecord(e2, s2));
    ASSERT_EQ(0, (int)cudaEventSynchronize(e2));
    ASSERT_EQ(0, (int)cudaEventElapsedTime(&ms, e, e2));
    ASSERT_GE(ms, 0);
    cudaEventDestroy(e);
    cudaEventDestroy(e2);
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    cudaFreeHost(flag);
    cudaFree(a);
    cudaFree(b);
    PASS();
}

TEST legacy_stream_waits_for_blocking_streams(void) {
    int *flag, *a = (int *)dmalloc(64 * 4), *b = (int *)dmalloc(64 * 4), h[64];
    cudaStream_t s;
    ASSERT_EQ(0, (int)cudaMallocHost((void **)&flag, 4));
    *flag = 0;
    ASSERT_EQ(0, (int)cudaStreamCreate(&s)); /* blocking: ordered with the legacy stream */
    LAUNCH(k_wait_then_write, 1, 32, 0, s)(flag, a, 64, 9);
    LAUNCH(k_copy, 1, 32, 0, 0)(a, b, 64);
    __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    ASSERT_EQ(0, (int)cudaMemcpy(h, b, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++) ASSERT_EQ(9, h[i]);
    cudaStreamDestroy(s);
    cudaFreeHost(flag);
    cudaFree(a);
    cudaFree(b);
    PASS();
}

TEST pageable_async_copy_is_staged(void) {
    int *x = (int *)dmalloc(64 * 4), h[64], r[64];
    for (int i = 0; i < 64; i++) h[i] = i;
    ASSERT_EQ(0, (int)cudaMemcpyAsync(x, h, sizeof h, cudaMemcpyHostToDevice, 0));
    for (int i = 0; i < 64; i++) h[i] = -1; /* pageable: CUDA has copied it already */
    ASSERT_EQ(0, (int)cudaMemcpy(r, x, sizeof r, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++) ASSERT_EQ(i, r[i]);
    cudaFree(x);
    PASS();
}

__global__ void k_add_one(int *x, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] += 1;
}

TEST graph_capture_and_replay(void) {
    int *x = (int *)dmalloc(64 * 4), *y = (int *)dmalloc(64 * 4), h[64];
    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaStreamCaptureStatus cs;
    ASSERT_EQ(0, (int)cudaMemset(x, 0, 64 * 4));
    ASSERT_EQ(0, (int)cudaDeviceSynchronize());
    ASSERT_EQ(0, (int)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    ASSERT_EQ((int)cudaErrorStreamCaptureUnsupported, (int)cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal));
    ASSERT_EQ(0, (int)cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ASSERT_EQ(0, (int)cudaStreamIsCapturing(s, &cs));
    ASSERT_EQ((int)cudaStreamCaptureStatusActive, (int)cs);
    LAUNCH(k_add_one, 1, 32, 0, s)(x, 64);
    LAUNCH(k_add_one, 1, 32, 0, s)(x, 64);
    ASSERT_EQ(0, (int)cudaMemcpyAsync(y, x, 64 * 4, cudaMemcpyDeviceToDevice, s));
    ASSERT_EQ(0, (int)cudaStreamEndCapture(s, &g));
    ASSERT_EQ(0, (int)cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost));
    ASSERT_EQ(0, h[0]); /* captured, not run */
    ASSERT_EQ(0, (int)cudaGraphInstantiate(&ge, g, 0));
    long g0 = gdl_emu_count("graph");
    for (int r = 0; r < 3; r++) ASSERT_EQ(0, (int)cudaGraphLaunch(ge, s));
    ASSERT_EQ(g0 + 3, gdl_emu_count("graph"));
    ASSERT_EQ(0, (int)cudaStreamSynchronize(s));
    ASSERT_EQ(0, (int)cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++) ASSERT_EQ(6, h[i]);
    ASSERT_EQ(0, (int)cudaGraphExecDestroy(ge));
    ASSERT_EQ(0, (int)cudaGraphDestroy(g));
    // CUDA's rules: no cudaMalloc, no legacy-stream work, no synchronisation
    // of the capturing stream, no pageable copies during a global capture;
    // each ends the capture as invalidated
    void *p = NULL;
    ASSERT_EQ(0, (int)cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ASSERT_EQ((int)cudaErrorStreamCaptureUnsupported, (int)cudaMalloc(&p, 16));
    ASSERT_EQ((int)cudaErrorStreamCaptureInvalidated, (int)cudaStreamEndCapture(s, &g));
    ASSERT_EQ(0, (int)cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    LAUNCH(k_add_one, 1, 32, 0, 0)(x, 64);
    ASSERT_EQ((int)cudaErrorStreamCaptureImplicit, (int)cudaGetLastError());
    ASSERT_EQ((int)cudaErrorStreamCaptureInvalidated, (int)cudaStreamEndCapture(s, &g));
    ASSERT_EQ(0, (int)cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ASSERT_EQ((int)cudaErrorStreamCaptureUnsupported, (int)cudaStreamSynchronize(s));
    ASSERT_EQ((int)cudaErrorStreamCaptureInvalidated, (int)cudaStreamEndCapture(s, &g));
    ASSERT_EQ(0, (int)cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ASSERT_EQ((int)cudaErrorStreamCaptureUnsupported, (int)cudaMemcpyAsync(x, h, 16, cudaMemcpyHostToDevice, s));
    ASSERT_EQ((int)cudaErrorStreamCaptureInvalidated, (int)cudaStreamEndCapture(s, &g));
    (void)cudaGetLastError();
    // relaxed mode allows cudaMalloc
    ASSERT_EQ(0, (int)cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    ASSERT_EQ(0, (int)cudaMalloc(&p, 16));
    ASSERT_EQ(0, (int)cudaStreamEndCapture(s, &g));
    ASSERT_EQ(0, (int)cudaGraphDestroy(g));
    cudaFree(p);
    cudaStreamDestroy(s);
    cudaFree(x);
    cudaFree(y);
    PASS();
}

// ---------------------------------------------------------------------------
// diagnostics: each one fires

TEST diag_divergent_barrier(void) {
    int *x = (int *)dmalloc(128);
    LAUNCH(k_divergent_barrier, 1, 32, 0, 0)(x);
    CHECK_CALL(expect_kernel_failure("divergent __syncthreads", cudaErrorLaunchFailure));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "k_divergent_barrier");
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "thread (");
    PASS();
}

TEST diag_barrier_after_exit(void) {
    int *x = (int *)dmalloc(128);
    LAUNCH(k_barrier_after_exit, 1, 32, 0, 0)(x);
    cudaError_t e = cudaDeviceSynchronize();
    ASSERT_EQ((int)cudaErrorLaunchFailure, (int)e);
    const char *m = gdl_emu_last_diagnostic();
    if (!strstr(m, "after thread 0 of the block exited") && !strstr(m, "exited while"))
        FAILf("unexpected diagnostic: %s", m);
    ASSERT_EQ(0, (int)cudaDeviceReset());
    PASS();
}

TEST diag_mask_leaves_out_caller(void) {
    int *x = (int *)dmalloc(128);
    LAUNCH(k_mask_leaves_out_caller, 1, 32, 0, 0)(x);
    CHECK_CALL(expect_kernel_failure("leaves out the calling lane", cudaErrorLaunchFailure));
    PASS();
}

TEST diag_reads_lane_outside_mask(void) {
    int *x = (int *)dmalloc(128);
    LAUNCH(k_reads_lane_outside_mask, 1, 32, 0, 0)(x);
    CHECK_CALL(expect_kernel_failure("which mask 0x0000ffff leaves out", cudaErrorLaunchFailure));
    PASS();
}

TEST diag_mask_names_exited_lane(void) {
    int *x = (int *)dmalloc(128);
    LAUNCH(k_mask_names_exited_lane, 1, 32, 0, 0)(x);
    CHECK_CALL(expect_kernel_failure("exited", cudaErrorLaunchFailure));
    PASS();
}

TEST diag_deadlock(void) {
    int *x = (int *)dmalloc(128);
    LAUNCH(k_deadlock, 1, 32, 0, 0)(x);
    CHECK_CALL(expect_kernel_failure("deadlock", cudaErrorLaunchFailure));
    PASS();
}

TEST diag_out_of_bounds_write(void) {
    float *p = (float *)dmalloc(1024 * 4);
    LAUNCH(k_write_at, 1, 32, 0, 0)(p, 1024L, 1.0f); /* one past the end: the guard page */
    CHECK_CALL(expect_kernel_failure("past the end", cudaErrorIllegalAddress));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "k_write_at");
    p = (float *)dmalloc(4096 * 4);
    LAUNCH(k_write_at, 1, 32, 0, 0)(p, -1L, 1.0f); /* a page-sized block starts at the leading guard page */
    CHECK_CALL(expect_kernel_failure("before the", cudaErrorIllegalAddress));
    PASS();
}

TEST diag_write_into_rounding_slop(void) {
    char *p = (char *)dmalloc(100);
    LAUNCH(k_write_byte, 1, 32, 0, 0)(p, 150L);
    ASSERT_EQ((int)cudaErrorIllegalAddress, (int)cudaFree(p));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "were written");
    CHECK_CALL(expect_kernel_failure("were written", cudaErrorIllegalAddress));
    PASS();
}

TEST diag_use_after_free(void) {
    float *p = (float *)dmalloc(4096), *q = (float *)dmalloc(4096);
    ASSERT_EQ(0, (int)cudaFree(p));
    LAUNCH(k_nop, 1, 32, 0, 0)(p);
    ASSERT_EQ((int)cudaErrorInvalidValue, (int)cudaGetLastError());
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "freed device memory");
    ASSERT_EQ(0, (int)cudaGetLastError()); /* not sticky */
    // a kernel reaching freed memory through arithmetic faults on the quarantine
    long off = (long)((char *)p - (char *)q) / 4;
    LAUNCH(k_write_at, 1, 32, 0, 0)(q, off, 1.0f);
    CHECK_CALL(expect_kernel_failure("use after cudaFree", cudaErrorIllegalAddress));
    PASS();
}

TEST diag_host_access_to_device_memory(void) {
    float *p = (float *)dmalloc(4096);
    ASSERT_EQ(0, (int)cudaDeviceSynchronize()); /* idle: device memory is protected now */
    int fd[2];
    ASSERT_EQ(0, pipe(fd));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        volatile float v = p[3]; /* a host dereference of a device pointer */
        (void)v;
        _exit(0);
    }
    close(fd[1]);
    char buf[1024] = {0};
    ssize_t n = read(fd[0], buf, sizeof buf - 1), k;
    while (n >= 0 && n < (ssize_t)sizeof buf - 1 && (k = read(fd[0], buf + n, sizeof buf - 1 - n)) > 0) n += k;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    ASSERT(WIFSIGNALED(st));
    ASSERT_CONTAINS(buf, "host code read device memory");
    ASSERT_CONTAINS(buf, "12 bytes into a live 4096-byte device allocation");
    cudaFree(p);
    PASS();
}

// runs this program again in "hang" mode (see main) under a 1 s watchdog
TEST diag_watchdog_ends_a_hung_kernel(void) {
    int fd[2];
    ASSERT_EQ(0, pipe(fd));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        setenv("GPUDL_EMU_TIMEOUT", "1", 1);
        setenv("GDL_EMU_SELFTEST_HANG", "1", 1);
        execl("/proc/self/exe", "test_emu", (char *)NULL);
        _exit(3);
    }
    close(fd[1]);
    char buf[1024] = {0};
    ssize_t n = 0, k;
    while (n < (ssize_t)sizeof buf - 1 && (k = read(fd[0], buf + n, sizeof buf - 1 - n)) > 0) n += k;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    ASSERT(WIFSIGNALED(st));
    ASSERT_CONTAINS(buf, "kernel k_spin (launch #1) has run for");
    PASS();
}

TEST diag_launch_checks(void) {
    float *p = (float *)dmalloc(64), host[4];
    LAUNCH(k_nop, 1, 2048, 0, 0)(p);
    ASSERT_EQ((int)cudaErrorInvalidConfiguration, (int)cudaGetLastError());
    LAUNCH(k_nop, dim3(1, 70000), 32, 0, 0)(p);
    ASSERT_EQ((int)cudaErrorInvalidConfiguration, (int)cudaGetLastError());
    LAUNCH(k_nop, 1, 32, 64 * 1024, 0)(p);
    ASSERT_EQ((int)cudaErrorInvalidValue, (int)cudaGetLastError());
    LAUNCH(k_nop, 1, 32, 0, 0)(host);
    ASSERT_EQ((int)cudaErrorInvalidValue, (int)cudaGetLastError());
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "not device memory");
    LAUNCH(k_nop, 1, 32, 0, 0)((const float *)NULL); /* NULL is fine: optional arguments */
    ASSERT_EQ(0, (int)cudaGetLastError());
    int ndev = 0;
    cudaGetDeviceCount(&ndev);
    if (ndev > 1) {
        ASSERT_EQ(0, (int)cudaSetDevice(1));
        LAUNCH(k_nop, 1, 32, 0, 0)(p);
        ASSERT_EQ((int)cudaErrorInvalidValue, (int)cudaGetLastError());
        ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "memory of cuda:0");
        ASSERT_EQ(0, (int)cudaSetDevice(0));
    }
    cudaFree(p);
    PASS();
}

TEST diag_copy_checks(void) {
    char *d = (char *)dmalloc(1000), h[2000];
    ASSERT_EQ((int)cudaErrorInvalidValue, (int)cudaMemcpy(h, d, 100, cudaMemcpyHostToDevice)); /* wrong way */
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "the destination is host memory");
    ASSERT_EQ((int)cudaErrorInvalidValue, (int)cudaMemcpy(d, h, 1001, cudaMemcpyHostToDevice)); /* too long */
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "beyond the end");
    ASSERT_EQ((int)cudaErrorInvalidValue, (int)cudaMemcpy(d + 10, d, 100, cudaMemcpyDeviceToDevice));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "overlap");
    ASSERT_EQ((int)cudaErrorInvalidValue, (int)cudaMemset(h, 0, 10));
    ASSERT_EQ(0, (int)cudaMemcpy(d + 500, d, 100, cudaMemcpyDeviceToDevice));
    ASSERT_EQ((int)cudaErrorInvalidValue, (int)cudaGetLastError()); /* the last failure, */
    ASSERT_EQ(0, (int)cudaGetLastError());                          /* not sticky: cleared by the read */
    cudaFree(d);
    PASS();
}

// ---------------------------------------------------------------------------
// cuBLAS

TEST cublas_column_major_and_checks(void) {
    const int m = 5, n = 3, k = 4;
    float A[k * m], B[k * n], C[m * n], R[m * n]; /* A stored k x m (used as op T), B k x n */
    for (int i = 0; i < k * m; i++) A[i] = (float)(i % 7) - 3;
    for (int i = 0; i < k * n; i++) B[i] = (float)(i % 5) * 0.5f;
    float *dA = (float *)dmalloc(sizeof A), *dB = (float *)dmalloc(sizeof B), *dC = (float *)dmalloc(sizeof C);
    cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice);
    cublasHandle_t h;
    ASSERT_EQ(0, (int)cublasCreate(&h));
    float one = 1, zero = 0;
    // C = A^T B with C's fresh NaN contents ignored (beta 0)
    ASSERT_EQ(0, (int)cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, dA, k, dB, k, &zero, dC, m));
    ASSERT_EQ(0, (int)cudaMemcpy(R, dC, sizeof R, cudaMemcpyDeviceToHost));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) s += (double)A[i * k + p] * B[j * k + p];
            ASSERT_IN_RANGE(s, R[j * m + i], 1e-5);
        }
    // argument checks
    ASSERT_EQ((int)CUBLAS_STATUS_INVALID_VALUE,
              (int)cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, dA, k - 1, dB, k, &zero, dC, m));
    ASSERT_EQ((int)CUBLAS_STATUS_INVALID_VALUE,
              (int)cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n + 1, k, &one, dA, k, dB, k, &zero, dC, m));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "not inside its allocation");
    ASSERT_EQ((int)CUBLAS_STATUS_INVALID_VALUE,
              (int)cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, A, k, dB, k, &zero, dC, m));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "not device memory");
    int ndev = 0;
    cudaGetDeviceCount(&ndev);
    if (ndev > 1) {
        cudaSetDevice(1);
        ASSERT_EQ((int)CUBLAS_STATUS_INVALID_VALUE,
                  (int)cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, dA, k, dB, k, &zero, dC, m));
        ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "handle made on cuda:0");
        cudaSetDevice(0);
    }
    // TF32 rounds the inputs: 1 + 2^-12 becomes 1
    float a1 = 1.0f + 1.0f / 4096, b1 = 1.0f, c1;
    cudaMemcpy(dA, &a1, 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, &b1, 4, cudaMemcpyHostToDevice);
    ASSERT_EQ(0, (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, dA, 1, dB, 1, &zero, dC, 1));
    cudaMemcpy(&c1, dC, 4, cudaMemcpyDeviceToHost);
    ASSERT_EQ(1, c1 == a1);
    ASSERT_EQ(0, (int)cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
    ASSERT_EQ(0, (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, dA, 1, dB, 1, &zero, dC, 1));
    cudaMemcpy(&c1, dC, 4, cudaMemcpyDeviceToHost);
    ASSERT_EQ(1, c1 == 1.0f);
    cublasDestroy(h);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    PASS();
}

// Workspaces under stream capture, as the libraries behave: cuBLAS's
// default workspace pool allocates inside a capture (it fails), a workspace
// of cublasSetWorkspace does not, and cublasSetStream resets it to the pool;
// cublasCreate allocates too. cuBLASLt never allocates: cublasLtMatmul
// refuses less workspace than its algorithm asked for.
TEST blas_workspace_under_capture(void) {
    const int n = 8;
    float hA[n * n], R[n * n], one = 1, zero = 0;
    for (int i = 0; i < n * n; i++) hA[i] = (float)(i % 5);
    float *dA = (float *)dmalloc(sizeof hA), *dC = (float *)dmalloc(sizeof hA);
    void *ws = dmalloc(1 << 16);
    ASSERT(dA && dC && ws);
    ASSERT_EQ(0, (int)cudaMemcpy(dA, hA, sizeof hA, cudaMemcpyHostToDevice));
    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cublasHandle_t h, h2;
    ASSERT_EQ(0, (int)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    ASSERT_EQ(0, (int)cublasCreate(&h));
    ASSERT_EQ(0, (int)cublasSetStream(h, s));
    /* the default pool: fine outside a capture, an allocation inside one */
    ASSERT_EQ(0, (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n, dA, n, &zero, dC, n));
    ASSERT_EQ(0, (int)cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ASSERT_EQ((int)CUBLAS_STATUS_ALLOC_FAILED,
              (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n, dA, n, &zero, dC, n));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "default workspace pool");
    ASSERT_EQ((int)cudaErrorStreamCaptureInvalidated, (int)cudaStreamEndCapture(s, &g));
    (void)cudaGetLastError();
    /* its own workspace: captured and replayed */
    ASSERT_EQ(0, (int)cublasSetWorkspace(h, ws, 1 << 16));
    ASSERT_EQ(0, (int)cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ASSERT_EQ(0, (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n, dA, n, &zero, dC, n));
    ASSERT_EQ((int)CUBLAS_STATUS_ALLOC_FAILED, (int)cublasCreate(&h2)); /* a handle made in a global capture */
    ASSERT_EQ((int)cudaErrorStreamCaptureInvalidated, (int)cudaStreamEndCapture(s, &g));
    (void)cudaGetLastError();
    ASSERT_EQ(0, (int)cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ASSERT_EQ(0, (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n, dA, n, &zero, dC, n));
    ASSERT_EQ(0, (int)cudaStreamEndCapture(s, &g));
    ASSERT_EQ(0, (int)cudaGraphInstantiate(&ge, g, 0));
    ASSERT_EQ(0, (int)cudaMemsetAsync(dC, 0, sizeof hA, s)); /* on s: a non-blocking stream ignores the legacy one */
    ASSERT_EQ(0, (int)cudaGraphLaunch(ge, s));
    ASSERT_EQ(0, (int)cudaStreamSynchronize(s));
    ASSERT_EQ(0, (int)cudaMemcpy(R, dC, sizeof R, cudaMemcpyDeviceToHost));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            double t = 0;
            for (int p = 0; p < n; p++) t += (double)hA[p * n + i] * hA[j * n + p];
            ASSERT_IN_RANGE(t, R[j * n + i], 1e-4);
        }
    ASSERT_EQ(0, (int)cudaGraphExecDestroy(ge));
    ASSERT_EQ(0, (int)cudaGraphDestroy(g));
    /* cublasSetStream puts the handle back on the pool */
    ASSERT_EQ(0, (int)cublasSetStream(h, s));
    ASSERT_EQ(0, (int)cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ASSERT_EQ((int)CUBLAS_STATUS_ALLOC_FAILED,
              (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n, dA, n, &zero, dC, n));
    ASSERT_EQ((int)cudaErrorStreamCaptureInvalidated, (int)cudaStreamEndCapture(s, &g));
    (void)cudaGetLastError();
    ASSERT_EQ(0, (int)cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed)); /* allows cudaMalloc */
    ASSERT_EQ(0, (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n, dA, n, &zero, dC, n));
    ASSERT_EQ(0, (int)cudaStreamEndCapture(s, &g));
    ASSERT_EQ(0, (int)cudaGraphDestroy(g));
    /* cuBLASLt: the algorithm takes the workspace the preference allows */
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t lay;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    uint64_t wsmax = 1 << 16;
    ASSERT_EQ(0, (int)cublasLtCreate(&lt));
    ASSERT_EQ(0, (int)cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    ASSERT_EQ(0, (int)cublasLtMatrixLayoutCreate(&lay, CUDA_R_32F, n, n, n));
    ASSERT_EQ(0, (int)cublasLtMatmulPreferenceCreate(&pref));
    ASSERT_EQ(0, (int)cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsmax,
                                                           sizeof wsmax));
    ASSERT_EQ(0, (int)cublasLtMatmulAlgoGetHeuristic(lt, desc, lay, lay, lay, lay, pref, 1, &heur, &found));
    ASSERT_EQ(1, found);
    ASSERT_EQ(1 << 16, (int)heur.workspaceSize);
    ASSERT_EQ(0, (int)cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    ASSERT_EQ((int)CUBLAS_STATUS_INVALID_VALUE, (int)cublasLtMatmul(lt, desc, &one, dA, lay, dA, lay, &zero, dC, lay,
                                                                    dC, lay, &heur.algo, NULL, 0, s));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "its algorithm needs 65536");
    ASSERT_EQ(0, (int)cublasLtMatmul(lt, desc, &one, dA, lay, dA, lay, &zero, dC, lay, dC, lay, &heur.algo, ws,
                                     1 << 16, s));
    ASSERT_EQ(0, (int)cudaStreamEndCapture(s, &g));
    ASSERT_EQ(0, (int)cudaGraphDestroy(g));
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lay);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(lt);
    cublasDestroy(h);
    cudaStreamDestroy(s);
    cudaFree(ws);
    cudaFree(dA);
    cudaFree(dC);
    PASS();
}

// GemmEx / GemmStridedBatchedEx on 16-bit matrices: products summed in f32
// (257 terms of 1 and 2^-8 give 2; a bf16 sum would stay at 1), C rounded
// once, beta read in f32; mixed or unsupported types refused.
TEST cublas_gemm_ex_16bit(void) {
    const int k = 257;
    uint16_t A[k], B[k], C[2], R[2];
    for (int i = 0; i < k; i++) {
        A[i] = 0x3F80;                      /* bf16 1.0 */
        B[i] = i == 0 ? 0x3F80 : 0x3B80;    /* 1.0, then 2^-8 */
    }
    uint16_t *dA = (uint16_t *)dmalloc(sizeof A), *dB = (uint16_t *)dmalloc(sizeof B), *dC = (uint16_t *)dmalloc(sizeof C);
    cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice);
    cublasHandle_t h;
    ASSERT_EQ(0, (int)cublasCreate(&h));
    float one = 1, zero = 0;
    ASSERT_EQ(0, (int)cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 1, 1, k, &one, dA, CUDA_R_16BF, k, dB, CUDA_R_16BF, k,
                                   &zero, dC, CUDA_R_16BF, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    cudaMemcpy(R, dC, 2, cudaMemcpyDeviceToHost);
    ASSERT_EQ(0x4000, (int)R[0]); /* bf16 2.0 */
    /* bf16 A and B into an f32 C: the f32 sum itself (1 + 256 * 2^-8 + 2^-9 would round away in bf16) */
    {
        float *dF = (float *)dmalloc(sizeof(float)), fr = 0.5f / 256, f;
        cudaMemcpy(dF, &fr, sizeof fr, cudaMemcpyHostToDevice);
        ASSERT_EQ(0, (int)cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 1, 1, k, &one, dA, CUDA_R_16BF, k, dB, CUDA_R_16BF,
                                       k, &one, dF, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        cudaMemcpy(&f, dF, sizeof f, cudaMemcpyDeviceToHost);
        ASSERT_EQ(2.0f + 0.5f / 256, f);
        ASSERT_EQ((int)CUBLAS_STATUS_NOT_SUPPORTED, /* f32 A and B go through cublasSgemm */
                  (int)cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, dF, CUDA_R_32F, 1, dF, CUDA_R_32F, 1,
                                    &zero, dF, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        cudaFree(dF);
    }
    /* f16, two batches, beta = 1: C[b] = A[b] * B[b] + C[b] */
    uint16_t a2[2] = {0x4200, 0x3C00}, b2[2] = {0x3800, 0x3800}; /* 3, 1 and 0.5, 0.5 */
    C[0] = 0x3C00;                                                /* 1 */
    C[1] = 0x0000;
    cudaMemcpy(dA, a2, sizeof a2, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, b2, sizeof b2, cudaMemcpyHostToDevice);
    cudaMemcpy(dC, C, sizeof C, cudaMemcpyHostToDevice);
    ASSERT_EQ(0, (int)cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, dA, CUDA_R_16F, 1, 1, dB,
                                                 CUDA_R_16F, 1, 1, &one, dC, CUDA_R_16F, 1, 1, 2, CUBLAS_COMPUTE_32F,
                                                 CUBLAS_GEMM_DEFAULT));
    cudaMemcpy(R, dC, sizeof R, cudaMemcpyDeviceToHost);
    ASSERT_EQ(0x4100, (int)R[0]); /* 3 * 0.5 + 1 = 2.5 */
    ASSERT_EQ(0x3800, (int)R[1]); /* 0.5 */
    ASSERT_EQ((int)CUBLAS_STATUS_NOT_SUPPORTED,
              (int)cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, dA, CUDA_R_16F, 1, dB, CUDA_R_16BF, 1, &zero,
                                dC, CUDA_R_16F, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "cublasGemmEx: the emulator runs A and B of one type");
    ASSERT_EQ((int)CUBLAS_STATUS_INVALID_VALUE, /* C spans 2 x 2 16-bit elements: past its allocation */
              (int)cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 1, &one, dA, CUDA_R_16F, 2, dB, CUDA_R_16F, 1, &zero,
                                dC, CUDA_R_16F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "not inside its allocation");
    cublasDestroy(h);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    PASS();
}

// GemmEx's integer path: s8 x s8 into int32, exact at the extremes (k = 4096 products of -128 * -128 and
// 127 * -128), beta 1 accumulating; its documented conditions refused with CUBLAS_STATUS_NOT_SUPPORTED
TEST cublas_gemm_ex_int8(void) {
    const int m = 4, n = 4, k = 4096;
    std::vector<int8_t> A((size_t)m * k), B((size_t)n * k);
    std::vector<int32_t> C((size_t)m * n, 5), R((size_t)m * n);
    for (int i = 0; i < m * k; i++) A[i] = (int8_t)(i / k % 2 ? 127 : -128);
    for (int i = 0; i < n * k; i++) B[i] = (int8_t)(i / k == 3 ? (i % 7) - 3 : -128);
    int8_t *dA = (int8_t *)dmalloc(A.size()), *dB = (int8_t *)dmalloc(B.size());
    int32_t *dC = (int32_t *)dmalloc(4 * C.size());
    cudaMemcpy(dA, A.data(), A.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B.data(), B.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(dC, C.data(), 4 * C.size(), cudaMemcpyHostToDevice);
    cublasHandle_t h;
    ASSERT_EQ(0, (int)cublasCreate(&h));
    int32_t one = 1, zero = 0, two = 2;
    /* column-major C (m x n) = A^T (A stored k x m) * B (k x n), + C */
    ASSERT_EQ(0, (int)cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, dA, CUDA_R_8I, k, dB, CUDA_R_8I, k, &one,
                                   dC, CUDA_R_32I, m, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT));
    cudaMemcpy(R.data(), dC, 4 * R.size(), cudaMemcpyDeviceToHost);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            long long s = 5;
            for (int p = 0; p < k; p++) s += (long long)A[(size_t)i * k + p] * B[(size_t)j * k + p];
            ASSERT_EQ(s, (long long)R[(size_t)j * m + i]);
        }
    ASSERT_EQ(67108869LL, (long long)R[0]); /* 4096 * 16384 + 5 */
    /* refused: alpha 2, lda not a multiple of 4, A not 32-bit aligned */
    ASSERT_EQ((int)CUBLAS_STATUS_NOT_SUPPORTED,
              (int)cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &two, dA, CUDA_R_8I, k, dB, CUDA_R_8I, k, &zero,
                                dC, CUDA_R_32I, m, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "the int8 path takes alpha and beta 0 or 1 (got 2, 0)");
    ASSERT_EQ((int)CUBLAS_STATUS_NOT_SUPPORTED,
              (int)cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, 6, &one, dA, CUDA_R_8I, 6, dB, CUDA_R_8I, 8, &zero,
                                dC, CUDA_R_32I, m, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "lda and ldb multiples of 4 (6, 8)");
    ASSERT_EQ((int)CUBLAS_STATUS_NOT_SUPPORTED,
              (int)cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, 8, &one, dA + 1, CUDA_R_8I, 8, dB, CUDA_R_8I, 8,
                                &zero, dC, CUDA_R_32I, m, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT));
    ASSERT_CONTAINS(gdl_emu_last_diagnostic(), "A and B 32-bit aligned");
    ASSERT_EQ((int)CUBLAS_STATUS_NOT_SUPPORTED, /* int8 into an f32 C: not the integer path */
              (int)cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, dA, CUDA_R_8I, k, dB, CUDA_R_8I, k, &zero,
                                dC, CUDA_R_32F, m, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT));
    cublasDestroy(h);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    PASS();
}

// ---------------------------------------------------------------------------
// fault injection, counters, errors

TEST fault_injection_and_counts(void) {
    long a0 = gdl_emu_count("alloc"), l0 = gdl_emu_count("launch"), s0 = gdl_emu_count("sync");
    gdl_emu_fail_alloc(2);
    void *p = dmalloc(16), *q = dmalloc(16), *r = dmalloc(16);
    ASSERT(p && !q && r);
    ASSERT_EQ((int)cudaErrorMemoryAllocation, (int)cudaGetLastError());
    ASSERT_EQ(0, (int)cudaGetLastError());
    ASSERT_EQ(a0 + 3, gdl_emu_count("alloc"));
    gdl_emu_fail_launch(1);
    LAUNCH(k_nop, 1, 32, 0, 0)((const float *)p);
    ASSERT_EQ((int)cudaErrorLaunchOutOfResources, (int)cudaGetLastError());
    LAUNCH(k_nop, 1, 32, 0, 0)((const float *)p);
    ASSERT_EQ(0, (int)cudaGetLastError());
    ASSERT_EQ(l0 + 2, gdl_emu_count("launch"));
    ASSERT_EQ(0, (int)cudaDeviceSynchronize());
    ASSERT_EQ(s0 + 1, gdl_emu_count("sync"));
    ASSERT_EQ(-1, gdl_emu_count("nonsense"));
    // the second GEMM from now fails without touching C; the third runs
    {
        float one = 1, zero = 0, x = 2, c = 0;
        long c0 = gdl_emu_count("cublas");
        cublasHandle_t h;
        ASSERT_EQ(0, (int)cublasCreate(&h));
        cudaMemcpy(p, &x, 4, cudaMemcpyHostToDevice);
        cudaMemcpy(r, &c, 4, cudaMemcpyHostToDevice);
        gdl_emu_fail_cublas(2);
        ASSERT_EQ(0, (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, (float *)p, 1, (float *)p, 1, &zero,
                                      (float *)r, 1));
        cudaMemcpy(r, &c, 4, cudaMemcpyHostToDevice); /* back to 0 */
        ASSERT_EQ((int)CUBLAS_STATUS_EXECUTION_FAILED,
                  (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, (float *)p, 1, (float *)p, 1, &zero,
                                   (float *)r, 1));
        cudaMemcpy(&c, r, 4, cudaMemcpyDeviceToHost);
        ASSERT_EQ(1, c == 0.0f);
        ASSERT_EQ(0, (int)cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, (float *)p, 1, (float *)p, 1, &zero,
                                      (float *)r, 1));
        cudaMemcpy(&c, r, 4, cudaMemcpyDeviceToHost);
        ASSERT_EQ(1, c == 4.0f);
        ASSERT_EQ(c0 + 3, gdl_emu_count("cublas"));
        cublasDestroy(h);
    }
    cudaFree(p);
    cudaFree(r);
    PASS();
}

TEST device_properties(void) {
    cudaDeviceProp pr;
    int n = 0, v = 0;
    ASSERT_EQ(0, (int)cudaGetDeviceCount(&n));
    ASSERT_GE(n, 1);
    ASSERT_EQ(0, (int)cudaGetDeviceProperties(&pr, 0));
    ASSERT_EQ(9, pr.major);
    ASSERT_EQ(0, pr.minor);
    ASSERT_EQ(0, (int)cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, 0));
    ASSERT_GT(v, 0);
    ASSERT_EQ((int)cudaErrorInvalidDevice, (int)cudaSetDevice(n));
    ASSERT_EQ((int)cudaErrorInvalidDevice, (int)cudaGetLastError());
    PASS();
}

SUITE(model) {
    RUN_TEST(barrier_block_reverse);
    RUN_TEST(warp_exchanges);
    RUN_TEST(atomics_across_workers);
    RUN_TEST(dynamic_shared_memory);
    RUN_TEST(fresh_memory_is_nan);
    RUN_TEST(racecheck_missing_barrier);
    RUN_TEST(initcheck_planted);
    RUN_TEST(racecheck_global_memory);
}
SUITE(streams) {
    RUN_TEST(streams_run_asynchronously);
    RUN_TEST(events_order_streams);
    RUN_TEST(legacy_stream_waits_for_blocking_streams);
    RUN_TEST(pageable_async_copy_is_staged);
    RUN_TEST(graph_capture_and_replay);
}
SUITE(diagnostics) {
    RUN_TEST(diag_divergent_barrier);
    RUN_TEST(diag_barrier_after_exit);
    RUN_TEST(diag_mask_leaves_out_caller);
    RUN_TEST(diag_reads_lane_outside_mask);
    RUN_TEST(diag_mask_names_exited_lane);
    RUN_TEST(diag_deadlock);
    RUN_TEST(diag_out_of_bounds_write);
    RUN_TEST(diag_write_into_rounding_slop);
    RUN_TEST(diag_use_after_free);
    RUN_TEST(diag_host_access_to_device_memory);
    RUN_TEST(diag_watchdog_ends_a_hung_kernel);
    RUN_TEST(diag_launch_checks);
    RUN_TEST(diag_copy_checks);
}
SUITE(blas) {
    RUN_TEST(cublas_column_major_and_checks);
    RUN_TEST(cublas_gemm_ex_16bit);
    RUN_TEST(cublas_gemm_ex_int8);
    RUN_TEST(blas_workspace_under_capture);
    RUN_TEST(gemm_modes);
}
SUITE(runtime) {
    RUN_TEST(fault_injection_and_counts);
    RUN_TEST(device_properties);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    if (getenv("GDL_EMU_SELFTEST_HANG")) { /* for diag_watchdog_ends_a_hung_kernel: never returns */
        int *x = (int *)dmalloc(4);
        LAUNCH(k_spin, 1, 32, 0, 0)(x);
        cudaDeviceSynchronize();
        return 0;
    }
    if (getenv("GDL_EMU_SELFTEST_GEMM")) return gemm_mode_main(); /* for gemm_modes */
    setenv("GPUDL_EMU_DEVICES", "2", 0); /* the cross-device checks need two */
    setenv("GPUDL_EMU_QUIET", "1", 0);   /* the diagnostics are expected here */
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(model);
    RUN_SUITE(streams);
    RUN_SUITE(diagnostics);
    RUN_SUITE(blas);
    RUN_SUITE(runtime);
    HARNESS_MAIN_END();
}
