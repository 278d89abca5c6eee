// launch_planted.cu — planted kernels for tests/launch_limits.sh --planted:
// compiled by nvcc (-cubin, one architecture, --resource-usage) so that the
// check is proven on ptxas's real report, not only on a text written into
// the script. Each kernel breaks one limit for the launch the script pairs it
// with (ll_fits and ll_spill_said break none); nothing here is ever run.

// 80 accumulators live across a loop: ptxas needs about 90 registers a
// thread, more than 64, so 1024 threads ask for more than a block's 65536
#define LL_ACC 80
#define LL_HOG_BODY                                                                                 \
    float acc[LL_ACC];                                                                              \
    _Pragma("unroll") for (int j = 0; j < LL_ACC; j++) acc[j] = x[j * n + threadIdx.x];             \
    for (int k = 0; k < n; k++) {                                                                   \
        _Pragma("unroll") for (int j = 0; j < LL_ACC; j++) acc[j] = fmaf(acc[j], x[k], acc[(j + 1) % LL_ACC]); \
    }                                                                                               \
    float s = 0;                                                                                    \
    _Pragma("unroll") for (int j = 0; j < LL_ACC; j++) s += acc[j] * (float)(j + 1);                \
    y[threadIdx.x] = s;

__global__ void ll_fits(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

__global__ void ll_regs_hog(const float *x, float *y, int n) { LL_HOG_BODY }

// the same body held to 32 registers (two blocks of 1024 threads an SM): it spills
__global__ void __launch_bounds__(1024, 2) ll_spiller(const float *x, float *y, int n) { LL_HOG_BODY }

// spills: planted, and said here, so the check lets it pass
__global__ void __launch_bounds__(1024, 2) ll_spill_said(const float *x, float *y, int n) { LL_HOG_BODY }

// a 2 KiB array indexed at run time lives in local memory: a stack frame
// over the 1 KiB a thread gets without cudaDeviceSetLimit
__global__ void ll_stack(const int *idx, float *y, int n) {
    float buf[512];
    for (int j = 0; j < 512; j++) buf[j] = (float)(j * n);
    y[threadIdx.x] = buf[idx[threadIdx.x] & 511];
}

// 32 KiB of static shared memory; with 20 KiB dynamic, over 48 KiB
__global__ void ll_smem(const float *x, float *y, int n) {
    __shared__ float tile[8192];
    extern __shared__ float dyn[];
    for (int j = threadIdx.x; j < 8192; j += blockDim.x) tile[j] = x[j];
    dyn[threadIdx.x] = x[n];
    __syncthreads();
    y[threadIdx.x] = tile[(threadIdx.x * 7) & 8191] + dyn[(threadIdx.x + 1) % blockDim.x];
}
