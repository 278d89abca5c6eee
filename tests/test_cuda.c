/* test_cuda.c — the GPU suite: on a real GPU (`make test-cuda`) and on the
   CUDA-on-CPU emulator (`make test-emu`, tests/cuda_emu/). Every row of
   tests/op_cases.h, plain and fanned out, forward and backward on CUDA
   against the CPU on the same inputs; more rows at sizes that take every
   kernel path of gpudl_cuda.cu (one element, odd, longer than a warp and than
   a block, empty, ties, NaN/Inf); every cast; argmax; each optimizer,
   gradient clipping, anomaly mode; overlapping device copies; two devices and
   host threads; the pinned-memory loader; allocator OOM recovery and, on the
   emulator, injected allocation, launch and cuBLAS failures at every point
   of a training step (nothing changes; the optimizer step is one launch and
   all or nothing) and gdl_fit's out-of-memory retry and batch split;
   training parity of an MLP and a CNN on tie-free inputs; the memory
   statistics and the profiler (tests/monitor_cases.h) and, on the emulator,
   gdl_gpu_stats finding each GPU in a stand-in NVML by its PCI bus id; scaled dot-product attention's
   fused kernels at every tile edge in three dtypes, its errors and its linear memory.
   Without a GPU every test is skipped. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include "op_cases.h"
#include "dtype_parity.h"
#include "autocast_cases.h"
#include "monitor_cases.h"
#include "gradscaler_cases.h"
#include "master_cases.h"
#include "fusion_cases.h"
#include "attention_cases.h"
#include "torch_parity.h"
#ifdef GPUDL_EMU
#include "cuda_emu/emu_api.h"
#endif
#ifndef GPUDL_NO_THREADS
#include <pthread.h>
#endif

#define GPU gdl_cuda(0)

/* ---- cases that need a GPU ----

   Every case here needs a CUDA device (graph_replay_equals_eager's CPU half
   aside): without one (the nvcc build on a machine with no GPU, or the
   emulator with GPUDL_EMU_DEVICES=0) it is skipped, and the cases that need
   two devices are skipped where there is one. No case checks that itself:
   the suites register them through gpu_case_run, which does, and then runs

     RUN_GPU(fn), RUN_GPU2(fn)       fn(), named fn; RUN_GPU2: two devices
     RUN_GPU_AS(name, fn)            fn(), named name
     RUN_GPU_NAMED(name, fn, arg)    fn(arg)
     RUN_GPU_ON(name, fn)            fn(GPU): the cases of the shared tables
                                     (the tests/..._cases.h headers) that take
                                     the device */
typedef struct gpu_case {
    enum harness_result (*fn)(void);
    enum harness_result (*fn_arg)(void *);
    enum harness_result (*fn_dev)(gdl_device);
    void *arg;
    int devices; /* the CUDA devices the case needs */
} gpu_case;

TEST gpu_case_run(void *arg) {
    const gpu_case *c = (const gpu_case *)arg;
    if (!gdl_cuda_is_available()) SKIPm("no GPU");
    if (gdl_cuda_device_count() < c->devices) SKIPm("needs two CUDA devices (emulator: GPUDL_EMU_DEVICES=2)");
    return c->fn ? c->fn() : c->fn_arg ? c->fn_arg(c->arg) : c->fn_dev(GPU);
}

#define RUN_GPU_CASE_(name, devices, fn, fn_arg, fn_dev, arg)                      \
    do {                                                                           \
        gpu_case gpu_case_ = {fn, fn_arg, fn_dev, (void *)(arg), devices};         \
        RUN_TEST_NAMED(name, gpu_case_run, (void *)&gpu_case_);                    \
    } while (0)
#define RUN_GPU(fn) RUN_GPU_CASE_(#fn, 1, fn, 0, 0, 0)
#define RUN_GPU2(fn) RUN_GPU_CASE_(#fn, 2, fn, 0, 0, 0)
#define RUN_GPU_AS(name, fn) RUN_GPU_CASE_(name, 1, fn, 0, 0, 0)
#define RUN_GPU_NAMED(name, fn, arg) RUN_GPU_CASE_(name, 1, 0, fn, 0, arg)
#define RUN_GPU_ON(name, fn) RUN_GPU_CASE_(name, 1, 0, 0, fn, 0)

/* ---- comparing CPU and GPU results ---- */

/* Largest |a-b| over largest finite |a| (norm-wise relative error). NaN
   matches NaN and an infinity the same infinity; any other disagreement
   about non-finite values is an infinite error. */
static double rel_err_host(const float *a, const float *b, int64_t n) {
    double num = 0, den = 1e-30;
    int64_t i;
    for (i = 0; i < n; i++) {
        double x = a[i], y = b[i], d;
        if (x != x || y != y || isinf(x) || isinf(y)) {
            if ((x != x && y != y) || x == y) continue;
            return INFINITY;
        }
        d = fabs(x - y);
        if (d > num) num = d;
        if (fabs(x) > den) den = fabs(x);
    }
    return num / den;
}

/* cpu: a host f32 tensor; gpu: an f32 tensor anywhere */
static double rel_err(const gdl_tensor *cpu, const gdl_tensor *gpu) {
    float *h;
    double e;
    if (!cpu || !gpu || cpu->numel != gpu->numel) return INFINITY;
    if (cpu->numel == 0) return 0;
    h = (float *)malloc(sizeof(float) * (size_t)gpu->numel);
    if (!h || gdl_copy_to_host(gpu, h, sizeof(float) * (size_t)gpu->numel) < 0) {
        free(h);
        return INFINITY;
    }
    e = rel_err_host((const float *)cpu->data, h, cpu->numel);
    free(h);
    return e;
}

/* byte-exact comparison of a host tensor and a tensor anywhere */
static int same_bytes(const gdl_tensor *cpu, const gdl_tensor *gpu) {
    size_t bytes;
    unsigned char *h;
    int same;
    if (!cpu || !gpu || cpu->numel != gpu->numel || cpu->dtype != gpu->dtype) return 0;
    bytes = (size_t)cpu->numel * gdl_dtype_size(cpu->dtype);
    if (!bytes) return 1;
    h = (unsigned char *)malloc(bytes);
    same = h && gdl_copy_to_host(gpu, h, bytes) == 0 && memcmp(h, cpu->data, bytes) == 0;
    free(h);
    return same;
}

/* ---- op parity: the shared table and the GPU-only rows below ---- */

/* forwards only the GPU rows use */
static gdl_tensor *f_softmax_m1(gdl_tensor **x) { return gdl_softmax(x[0], -1); }
static gdl_tensor *f_sum_dim0(gdl_tensor **x) { return gdl_sum_dim(x[0], 0, 0); }
static gdl_tensor *f_sum_dim1(gdl_tensor **x) { return gdl_sum_dim(x[0], 1, 0); }
static gdl_tensor *f_mean_dim0(gdl_tensor **x) { return gdl_mean_dim(x[0], 0, 1); }
static gdl_tensor *f_max_dim0(gdl_tensor **x) { return gdl_max_dim(x[0], 0, 0); }
static gdl_tensor *f_max_last(gdl_tensor **x) { return gdl_max_dim(x[0], -1, 0); }
static gdl_tensor *f_min_last(gdl_tensor **x) { return gdl_min_dim(x[0], -1, 0); }
static gdl_tensor *f_min_dim0(gdl_tensor **x) { return gdl_min_dim(x[0], 0, 0); }
static gdl_tensor *f_ce_smooth_mean(gdl_tensor **x) {
    gdl_ce_opts o = gdl_ce_defaults();
    o.label_smoothing = 0.05;
    return gdl_cross_entropy_ex(x[0], x[1], &o);
}
static gdl_tensor *f_mse_sum(gdl_tensor **x) { return gdl_mse_loss(x[0], x[1], GDL_REDUCE_SUM); }
static gdl_tensor *f_bce_mean(gdl_tensor **x) { return gdl_bce_with_logits(x[0], x[1], GDL_REDUCE_MEAN); }
static gdl_tensor *f_dropout_half(gdl_tensor **x) { return gdl_dropout(x[0], 0.5, 1); }
static gdl_tensor *f_maxpool3s1p1(gdl_tensor **x) { return gdl_max_pool2d(x[0], 3, 1, 1); }
static gdl_tensor *f_conv_s2p2(gdl_tensor **x) { return gdl_conv2d(x[0], x[1], x[2], 2, 2, 1, 1); }

#define R5(a, b, c, d, e) 5, {a, b, c, d, e}

/* Thresholds in gpudl_cuda.cu these rows straddle: block-per-row kernels use
   gdl__cu_row_threads(n) threads (32..512, so n = 1, 33, 64, 700, 1300 take
   one warp, several warps, and several passes of a full block); reductions
   go block-per-output when n >= 64 and (inner == 1 or outputs < 1024);
   sum_to goes block-per-output when nred >= 64 and (innermost dim reduced or
   outputs < 2048); softmax is row-wise when inner == 1, else strided; the
   grid-stride loops cap grids at 2^20 blocks (not reached: too slow on the
   emulator) and row grids at 65535*8. */
static const gc_case gpu_cases[] = {
    /* softmax family: rows of 1, 33 (two warps), 700 (> a 512-thread block), strided */
    {"softmax_row1", GDL_OP_SOFTMAX, f_softmax1, 1, {{R2(5, 1), IN_RANDN, 0}}},
    {"softmax_row33", GDL_OP_SOFTMAX, f_softmax1, 1, {{R2(4, 33), IN_RANDN, 0}}},
    {"softmax_row700", GDL_OP_SOFTMAX, f_softmax_m1, 1, {{R2(3, 700), IN_RANDN, 0}}},
    {"softmax_strided_long", GDL_OP_SOFTMAX, f_softmax1, 1, {{R3(3, 90, 5), IN_RANDN, 0}}},
    {"log_softmax_row1300", GDL_OP_LOG_SOFTMAX, f_log_softmaxm1, 1, {{R2(2, 1300), IN_RANDN, 0}}},
    {"log_softmax_row64", GDL_OP_LOG_SOFTMAX, f_log_softmaxm1, 1, {{R2(3, 64), IN_RANDN, 0}}},
    {"log_softmax_strided", GDL_OP_LOG_SOFTMAX, f_log_softmax1, 1, {{R3(2, 40, 7), IN_RANDN, 0}}},
    {"softmax_nan_rows", GDL_OP_SOFTMAX, f_softmax_m1, 1, {{R2(3, 100), IN_NAN, 0}}},
    /* reductions: block per output (contiguous and strided), thread per output */
    {"sum_all_3001", GDL_OP_SUM, f_sum, 1, {{R1(3001), IN_RANDN, 0}}},
    {"sum_all_1", GDL_OP_SUM, f_sum, 1, {{R1(1), IN_RANDN, 0}}},
    {"mean_all_64", GDL_OP_MEAN, f_mean, 1, {{R2(1, 64), IN_RANDN, 0}}},
    {"sum_dim_row1300", GDL_OP_SUM, f_sum_dim1, 1, {{R2(2, 1300), IN_RANDN, 0}}},
    {"sum_dim0_strided_block", GDL_OP_SUM, f_sum_dim0, 1, {{R2(700, 3), IN_RANDN, 0}}},
    {"sum_dim_thread_path", GDL_OP_SUM, f_sum_dim1, 1, {{R3(2, 70, 600), IN_RANDN, 0}}},
    {"mean_dim_63", GDL_OP_MEAN, f_mean_dimm1, 1, {{R2(5, 63), IN_RANDN, 0}}},
    {"mean_dim0_keepdim_block", GDL_OP_MEAN, f_mean_dim0, 1, {{R3(300, 2, 3), IN_RANDN, 0}}},
    {"max_row700", GDL_OP_MAX, f_max_last, 1, {{R2(3, 700), IN_RANDN, 0}}},
    {"min_row700_ties", GDL_OP_MIN, f_min_last, 1, {{R2(4, 700), IN_TIES, 0}}},
    {"min_row_nan_block", GDL_OP_MIN, f_min_last, 1, {{R2(5, 300), IN_NAN, 0}}},
    {"min_nan_thread", GDL_OP_MIN, f_min_dim0, 1, {{R2(40, 3), IN_NAN, 0}}},
    {"max_row700_ties", GDL_OP_MAX, f_max_last, 1, {{R2(4, 700), IN_TIES, 0}}},
    {"max_dim0_strided_ties", GDL_OP_MAX, f_max_dim0, 1, {{R2(300, 4), IN_TIES, 0}}},
    {"max_thread_path_ties", GDL_OP_MAX, f_max_dim1, 1, {{R3(2, 70, 600), IN_TIES, 0}}},
    {"max_short_ties", GDL_OP_MAX, f_max_last, 1, {{R2(9, 5), IN_TIES, 0}}},
    {"max_row700_distinct", GDL_OP_MAX, f_max_last, 1, {{R2(3, 700), IN_PERM, 0}}},
    {"max_row_nan_block", GDL_OP_MAX, f_max_last, 1, {{R2(5, 300), IN_NAN, 0}}},
    {"max_nan_thread", GDL_OP_MAX, f_max_dim0, 1, {{R2(40, 3), IN_NAN, 0}}},
    {"max_nan_strided_block", GDL_OP_MAX, f_max_dim1, 1, {{R3(2, 100, 3), IN_NAN, 0}}},
    /* broadcasting: the sum_to paths of the backward */
    {"add_bias_block", GDL_OP_ADD, f_add, 2, {{R2(300, 7), IN_RANDN, 0}, {R1(7), IN_RANDN, 0}}},
    {"add_col_inner_reduced", GDL_OP_ADD, f_add, 2, {{R2(7, 300), IN_RANDN, 0}, {R2(7, 1), IN_RANDN, 0}}},
    {"mul_two_reduced_dims", GDL_OP_MUL, f_mul, 2, {{R3(10, 20, 9), IN_RANDN, 0}, {R2(20, 1), IN_RANDN, 0}}},
    {"sub_sum_to_thread", GDL_OP_SUB, f_sub, 2, {{R2(70, 2100), IN_RANDN, 0}, {R1(2100), IN_RANDN, 0}}},
    {"div_scalar_block", GDL_OP_DIV, f_div, 2, {{R2(33, 40), IN_RANDN, 0}, {R1(1), IN_POS, 0}}},
    {"add_5d", GDL_OP_ADD, f_add, 2, {{R5(2, 3, 1, 4, 5), IN_RANDN, 0}, {R5(1, 3, 2, 1, 5), IN_RANDN, 0}}},
    {"relu_1000", GDL_OP_RELU, f_relu, 1, {{R1(1000), IN_RANDN, 0}}},
    {"gelu_513", GDL_OP_GELU, f_gelu, 1, {{R1(513), IN_RANDN, 0}}},
    /* GEMM shapes and the batched / shared-operand paths */
    {"matmul_33x65x17", GDL_OP_MATMUL, f_matmul, 2, {{R2(33, 65), IN_RANDN, 0}, {R2(65, 17), IN_RANDN, 0}}},
    {"matmul_batched_big", GDL_OP_MATMUL, f_matmul, 2, {{R3(3, 20, 30), IN_RANDN, 0}, {R3(3, 30, 10), IN_RANDN, 0}}},
    {"matmul_3d_2d_big", GDL_OP_MATMUL, f_matmul, 2, {{R3(4, 9, 33), IN_RANDN, 0}, {R2(33, 6), IN_RANDN, 0}}},
    {"matmul_2d_3d_big", GDL_OP_MATMUL, f_matmul, 2, {{R2(9, 33), IN_RANDN, 0}, {R3(4, 33, 6), IN_RANDN, 0}}},
    {"linear_70x33", GDL_OP_LINEAR, f_linear, 3, {{R2(70, 33), IN_RANDN, 0}, {R2(20, 33), IN_RANDN, 0}, {R1(20), IN_RANDN, 0}}},
    /* fused bias + activation: cuBLASLt's RELU_BIAS and GELU_AUX_BIAS epilogues (24 outputs: aux ld
       divisible by 8), the GEMM + bias_act way (erf GELU, 20 outputs with an aux), the block (rows >= 64)
       and thread (>= 1024 outputs) bias reductions, a big convolution plane */
    {"linear_act_relu_130x33", GDL_OP_LINEAR_ACT, f_linear_relu, 3, {{R2(130, 33), IN_RANDN, 0}, {R2(20, 33), IN_RANDN, 0}, {R1(20), IN_RANDN, 0}}},
    {"linear_act_gelu_tanh_70x33", GDL_OP_LINEAR_ACT, f_linear_gelu_tanh, 3, {{R2(70, 33), IN_RANDN, 0}, {R2(24, 33), IN_RANDN, 0}, {R1(24), IN_RANDN, 0}}},
    {"linear_act_gelu_tanh_20out", GDL_OP_LINEAR_ACT, f_linear_gelu_tanh, 3, {{R2(70, 33), IN_RANDN, 0}, {R2(20, 33), IN_RANDN, 0}, {R1(20), IN_RANDN, 0}}},
    {"linear_act_gelu_erf_70x33", GDL_OP_LINEAR_ACT, f_linear_gelu_nb, 2, {{R2(70, 33), IN_RANDN, 0}, {R2(20, 33), IN_RANDN, 0}}},
    {"linear_act_relu_1030out", GDL_OP_LINEAR_ACT, f_linear_relu, 3, {{R2(70, 5), IN_RANDN, 0}, {R2(1030, 5), IN_RANDN, 0}, {R1(1030), IN_RANDN, 0}}},
    {"conv2d_act_relu_big", GDL_OP_CONV2D_ACT, f_conv_relu, 3, {{R4(2, 3, 20, 19), IN_RANDN, 0}, {R4(8, 3, 3, 3), IN_RANDN, 0}, {R1(8), IN_RANDN, 0}}},
    /* convolution and pooling, bigger planes; ties and NaN in max pooling */
    {"conv2d_big", GDL_OP_CONV2D, f_conv_s1p1, 3, {{R4(2, 3, 20, 19), IN_RANDN, 0}, {R4(8, 3, 3, 3), IN_RANDN, 0}, {R1(8), IN_RANDN, 0}}},
    {"conv2d_s2p2", GDL_OP_CONV2D, f_conv_s2p2, 3, {{R4(2, 2, 11, 9), IN_RANDN, 0}, {R4(3, 2, 5, 3), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}}},
    {"max_pool2d_ties", GDL_OP_MAX_POOL2D, f_maxpool3s2p1, 1, {{R4(2, 3, 9, 9), IN_TIES, 0}}},
    {"max_pool2d_overlap_ties", GDL_OP_MAX_POOL2D, f_maxpool3s1p1, 1, {{R4(1, 2, 8, 7), IN_TIES, 0}}},
    {"max_pool2d_nan", GDL_OP_MAX_POOL2D, f_maxpool2, 1, {{R4(2, 3, 6, 7), IN_NAN, 0}}},
    {"max_pool2d_distinct", GDL_OP_MAX_POOL2D, f_maxpool3s2p1, 1, {{R4(2, 3, 9, 9), IN_PERM, 0}}},
    {"avg_pool2d_big", GDL_OP_AVG_POOL2D, f_avgpool3s2p1, 1, {{R4(2, 3, 17, 16), IN_RANDN, 0}}},
    {"global_avg_pool2d_big", GDL_OP_GLOBAL_AVG_POOL2D, f_gap, 1, {{R4(2, 3, 20, 20), IN_RANDN, 0}}},
    /* normalisation: channels longer than the 256-thread block, rows past a block */
    {"batch_norm_2d_big", GDL_OP_BATCH_NORM, f_bn_train, 5,
     {{R4(4, 3, 10, 10), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}, {R1(3), IN_CONST, 0}, {R1(3), IN_CONST_POS, 0}}},
    {"batch_norm_1d_300", GDL_OP_BATCH_NORM, f_bn_train, 5,
     {{R2(300, 5), IN_RANDN, 0}, {R1(5), IN_RANDN, 0}, {R1(5), IN_RANDN, 0}, {R1(5), IN_CONST, 0}, {R1(5), IN_CONST_POS, 0}}},
    {"batch_norm_relu_2d_big", GDL_OP_BATCH_NORM_RELU, f_bnr_train, 5,
     {{R4(4, 3, 10, 10), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}, {R1(3), IN_CONST, 0}, {R1(3), IN_CONST_POS, 0}}},
    {"batch_norm_gelu_2d_big", GDL_OP_BATCH_NORM_GELU, f_bng_train, 5,
     {{R4(4, 3, 10, 10), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}, {R1(3), IN_CONST, 0}, {R1(3), IN_CONST_POS, 0}}},
    {"batch_norm_eval_big", GDL_OP_BATCH_NORM, f_bn_eval, 5,
     {{R3(30, 2, 13), IN_RANDN, 0}, {R1(2), IN_RANDN, 0}, {R1(2), IN_RANDN, 0}, {R1(2), IN_CONST, 0}, {R1(2), IN_CONST_POS, 0}}},
    {"layer_norm_D1", GDL_OP_LAYER_NORM, f_ln, 3, {{R2(3, 1), IN_RANDN, 0}, {R1(1), IN_RANDN, 0}, {R1(1), IN_RANDN, 0}}},
    {"layer_norm_D33_rows40", GDL_OP_LAYER_NORM, f_ln, 3, {{R2(40, 33), IN_RANDN, 0}, {R1(33), IN_RANDN, 0}, {R1(33), IN_RANDN, 0}}},
    {"layer_norm_D70", GDL_OP_LAYER_NORM, f_ln, 3, {{R2(19, 70), IN_RANDN, 0}, {R1(70), IN_RANDN, 0}, {R1(70), IN_RANDN, 0}}},
    {"layer_norm_D700", GDL_OP_LAYER_NORM, f_ln, 3, {{R2(2, 700), IN_RANDN, 0}, {R1(700), IN_RANDN, 0}, {R1(700), IN_RANDN, 0}}},
    /* embedding with many repeated rows (atomics), dropout */
    {"embedding_repeats", GDL_OP_EMBEDDING, f_embedding, 2, {{R2(8, 10), IN_TARGET, 5}, {R2(5, 70), IN_RANDN, 0}}},
    /* 4000 lookups of two rows: 63 blocks add into the same 8 floats at once */
    {"embedding_hot_rows", GDL_OP_EMBEDDING, f_embedding, 2, {{R1(4000), IN_TARGET, 2}, {R2(2, 4), IN_RANDN, 0}}},
    {"dropout_1000", GDL_OP_DROPOUT, f_dropout_half, 1, {{R1(1000), IN_RANDN, 0}}},
    /* losses: classes past a block, one class, batch past the 512-thread total */
    {"cross_entropy_C700", GDL_OP_CROSS_ENTROPY, f_ce_smooth_mean, 2, {{R2(3, 700), IN_RANDN, 0}, {R1(3), IN_TARGET, 700}}},
    {"cross_entropy_C1", GDL_OP_CROSS_ENTROPY, f_ce, 2, {{R2(5, 1), IN_RANDN, 0}, {R1(5), IN_TARGET, 1}}},
    {"cross_entropy_B600", GDL_OP_CROSS_ENTROPY, f_ce, 2, {{R2(600, 3), IN_RANDN, 0}, {R1(600), IN_TARGET_IGNORE, 3}}},
    {"cross_entropy_B600_sum", GDL_OP_CROSS_ENTROPY, f_ce_smooth_sum, 2, {{R2(600, 5), IN_RANDN, 0}, {R1(600), IN_TARGET, 5}}},
    {"nll_loss_C100", GDL_OP_NLL_LOSS, f_nll, 2, {{R2(4, 100), IN_RANDN, 0}, {R1(4), IN_TARGET_IGNORE, 100}}},
    {"mse_sum_1000", GDL_OP_SUM, f_mse_sum, 2, {{R1(1000), IN_RANDN, 0}, {R1(1000), IN_RANDN, 0}}},
    {"bce_mean_1000", GDL_OP_MEAN, f_bce_mean, 2, {{R1(1000), IN_RANDN, 0}, {R1(1000), IN_RANDN, 0}}},
    /* empty tensors: every op must do nothing, and do it without touching memory */
    {"empty_add", GDL_OP_ADD, f_add, 2, {{R2(0, 5), IN_RANDN, 0}, {R1(5), IN_RANDN, 0}}},
    {"empty_relu", GDL_OP_RELU, f_relu, 1, {{R1(0), IN_RANDN, 0}}},
    {"empty_sum", GDL_OP_SUM, f_sum, 1, {{R2(0, 3), IN_RANDN, 0}}},
    {"empty_sum_dim", GDL_OP_SUM, f_sum_dim0, 1, {{R2(0, 3), IN_RANDN, 0}}},
    {"empty_matmul_M0", GDL_OP_MATMUL, f_matmul, 2, {{R2(0, 4), IN_RANDN, 0}, {R2(4, 3), IN_RANDN, 0}}},
    {"empty_matmul_K0", GDL_OP_MATMUL, f_matmul, 2, {{R2(3, 0), IN_RANDN, 0}, {R2(0, 4), IN_RANDN, 0}}},
    {"empty_linear_in0", GDL_OP_LINEAR, f_linear, 3, {{R2(3, 0), IN_RANDN, 0}, {R2(4, 0), IN_RANDN, 0}, {R1(4), IN_RANDN, 0}}},
    {"empty_linear_act_in0", GDL_OP_LINEAR_ACT, f_linear_relu, 3, {{R2(3, 0), IN_RANDN, 0}, {R2(4, 0), IN_RANDN, 0}, {R1(4), IN_RANDN, 0}}},
    {"empty_linear_act_rows0", GDL_OP_LINEAR_ACT, f_linear_gelu_tanh, 3, {{R2(0, 4), IN_RANDN, 0}, {R2(8, 4), IN_RANDN, 0}, {R1(8), IN_RANDN, 0}}},
    {"empty_softmax", GDL_OP_SOFTMAX, f_softmax1, 1, {{R2(0, 5), IN_RANDN, 0}}},
    {"empty_concat_piece", GDL_OP_CONCAT, f_concat0, 3, {{R2(2, 3), IN_RANDN, 0}, {R2(0, 3), IN_RANDN, 0}, {R2(1, 3), IN_RANDN, 0}}},
    {"empty_layer_norm_rows", GDL_OP_LAYER_NORM, f_ln_plain, 1, {{R2(0, 5), IN_RANDN, 0}}},
};
#define NGPU_CASES ((int)(sizeof gpu_cases / sizeof gpu_cases[0]))

typedef struct parity_run {
    const gc_case *c;
    int fanout;
} parity_run;

TEST parity(void *arg) {
    const parity_run *r = (const parity_run *)arg;
    const gc_case *c = r->c;
    gdl_tensor *in[5] = {0}, *ing[5] = {0}, *out, *outg, *w, *wg;
    int k;
    double e, tol = 1e-5;
    gdl_manual_seed(1234);
    for (k = 0; k < c->nin; k++) {
        ASSERT_NOT_NULL(in[k] = make_input(&c->in[k]));
        ASSERT_NOT_NULL(ing[k] = gdl_to(in[k], GPU));
    }
    gdl_arena_reset();
    gdl_manual_seed(99);
    out = r->fanout ? fanout_forward(c, in) : c->forward(in);
    gdl_manual_seed(99); /* the same dropout mask */
    outg = r->fanout ? fanout_forward(c, ing) : c->forward(ing);
    if (!out || !outg) FAILf("%s: forward failed: %s", c->name, gdl_last_error());
    ASSERT(gdl_same_shape(out, outg));
    ASSERT_EQm("the output comes from the op this row names", r->fanout ? GDL_OP_ADD : c->op, gdl_tensor_op(outg));
    e = rel_err(out, outg);
    if (!(e < tol)) FAILf("%s: forward differs: relative error %.3g", c->name, e);
    w = gdl_randn(out->ndim, out->shape, gdl_cpu());
    wg = gdl_to(w, GPU);
    if (gdl_backward_grad(out, w) < 0 || gdl_backward_grad(outg, wg) < 0)
        FAILf("%s: backward failed: %s", c->name, gdl_last_error());
    for (k = 0; k < c->nin; k++) {
        if (!in[k]->requires_grad) continue;
        if (!in[k]->grad || !ing[k]->grad) FAILf("%s: input %d has no gradient", c->name, k);
        e = rel_err(in[k]->grad, ing[k]->grad);
        if (!(e < tol)) FAILf("%s: gradient of input %d differs: relative error %.3g", c->name, k, e);
    }
    /* buffers an op updates in place: batch norm's running statistics */
    for (k = 0; k < c->nin; k++) {
        if (c->in[k].kind != IN_CONST && c->in[k].kind != IN_CONST_POS) continue;
        e = rel_err(in[k], ing[k]);
        if (!(e < tol)) FAILf("%s: input %d (a buffer the op updates) differs: relative error %.3g", c->name, k, e);
    }
    for (k = 0; k < c->nin; k++) {
        gdl_free(in[k]);
        gdl_free(ing[k]);
    }
    gdl_free(w);
    gdl_free(wg);
    gdl_arena_reset();
    PASS();
}

/* ---- casts, argmax ---- */

/* every dtype pair, bit for bit the CPU's conversion, on values at every edge:
   signed zeros, halves (rounding), u8 and i32 saturation, f16 overflow and
   subnormals, bf16 rounding, infinities, NaN */
TEST casts_all_pairs(void) {
    static const float edge[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 254.5f, 255.0f, 255.9f,
                                 256.0f, 300.0f, -300.0f, 65504.0f, 65519.0f, 65520.0f, 70000.0f, -70000.0f, 1e-8f,
                                 6e-8f, 3e-5f, 1.0009765625f, 1.00048828125f, 3.0e38f, -3.0e38f, 2147483520.0f,
                                 2147483648.0f, 3e9f, -2147483648.0f, -2147483904.0f, -3e9f, 16777217.0f, 0.1f,
                                 1.0f / 3.0f};
    const gdl_dtype dts[5] = {GDL_F32, GDL_F16, GDL_BF16, GDL_I32, GDL_U8};
    int64_t n = 777, i, shape[1];
    float *v;
    gdl_tensor *f, *src, *srcg, *a, *b;
    int s, d, nedge = (int)(sizeof edge / sizeof edge[0]);
    v = (float *)malloc(sizeof(float) * (size_t)n);
    ASSERT_NOT_NULL(v);
    gdl_manual_seed(11);
    for (i = 0; i < n; i++) {
        if (i < nedge) v[i] = edge[i];
        else if (i == nedge) v[i] = INFINITY;
        else if (i == nedge + 1) v[i] = -INFINITY;
        else if (i == nedge + 2) v[i] = NAN;
        else if (i == nedge + 3) v[i] = -NAN;
        else v[i] = (float)((gdl_rng_uniform() - 0.4) * (i % 3 == 0 ? 600.0 : i % 3 == 1 ? 3.0 : 1e6));
    }
    shape[0] = n;
    f = gdl_from_array(v, 1, shape, GDL_F32, gdl_cpu());
    ASSERT_NOT_NULL(f);
    for (s = 0; s < 5; s++) {
        gdl_arena_reset();
        src = dts[s] == GDL_F32 ? f : gdl_to_dtype(f, dts[s]); /* the source values, made by the CPU */
        ASSERT_NOT_NULL(src);
        srcg = gdl_to(src, GPU);
        ASSERT_NOT_NULL(srcg);
        for (d = 0; d < 5; d++) {
            a = gdl_to_dtype(src, dts[d]);
            b = gdl_to_dtype(srcg, dts[d]);
            if (!a || !b) FAILf("cast %s -> %s failed: %s", gdl_dtype_name(dts[s]), gdl_dtype_name(dts[d]), gdl_last_error());
            if (!same_bytes(a, b)) {
                /* name the first differing element */
                size_t es = gdl_dtype_size(dts[d]);
                unsigned char *h = (unsigned char *)malloc(es * (size_t)n);
                int64_t j = 0;
                if (h && gdl_copy_to_host(b, h, es * (size_t)n) == 0)
                    while (j < n && memcmp(h + j * es, (unsigned char *)a->data + j * es, es) == 0) j++;
                free(h);
                FAILf("cast %s -> %s differs from the CPU's at element %lld (f32 source value %.9g)",
                      gdl_dtype_name(dts[s]), gdl_dtype_name(dts[d]), (long long)j, j < n ? (double)v[j] : 0.0);
            }
        }
        if (src != f) gdl_free(src);
        gdl_free(srcg);
    }
    gdl_free(f);
    free(v);
    gdl_arena_reset();
    PASS();
}

/* argmax (not differentiable, so not an op row): ties and NaN/Inf, rows
   short and long, contiguous and strided */
TEST argmax_ties_and_nan(void) {
    static const int64_t shapes[4][2] = {{5, 40}, {40, 5}, {3, 700}, {1, 1}};
    static const int kinds[2] = {IN_TIES, IN_NAN};
    int s, k, dim;
    for (s = 0; s < 4; s++)
        for (k = 0; k < 2; k++)
            for (dim = 0; dim < 2; dim++) {
                gc_input d;
                gdl_tensor *x, *xg, *a, *b;
                memset(&d, 0, sizeof d);
                d.ndim = 2;
                d.shape[0] = shapes[s][0];
                d.shape[1] = shapes[s][1];
                d.kind = kinds[k];
                gdl_manual_seed(77 + (uint64_t)s);
                ASSERT_NOT_NULL(x = make_input(&d));
                ASSERT_NOT_NULL(xg = gdl_to(x, GPU));
                a = gdl_argmax(x, dim);
                b = gdl_argmax(xg, dim);
                if (!a || !b) FAILf("argmax failed: %s", gdl_last_error());
                if (!same_bytes(a, b))
                    FAILf("argmax over dim %d of %s (%s) differs from the CPU's", dim, gdl_shape_str(x),
                          k ? "NaN/Inf" : "ties");
                gdl_free(x);
                gdl_free(xg);
                gdl_arena_reset();
            }
    PASS();
}

/* Embedding's backward adds rows that repeat, with atomics. Gradients of
   ones make every sum an exact integer in any order, so one lost update
   (a plain += racing between blocks) shows as a wrong count. Only blocks on
   different emulator workers can race, so the kernel is made long enough
   for them to overlap. */
TEST embedding_backward_exact_counts(void) {
    enum { N = 2000000, V = 3, D = 4 };
    int64_t si[1] = {N}, sw[2] = {V, D};
    int32_t *idx;
    float g[V * D];
    int64_t count[V] = {0};
    gdl_tensor *ti, *w;
    int i, v, k;
    ASSERT_NOT_NULL(idx = (int32_t *)malloc(sizeof(int32_t) * N));
    for (i = 0; i < N; i++) count[idx[i] = (int32_t)((i * 7 + i / 5) % V)]++;
    ASSERT_NOT_NULL(ti = gdl_from_array(idx, 1, si, GDL_I32, GPU));
    ASSERT_NOT_NULL(w = gdl_zeros(2, sw, GDL_F32, GPU));
    ASSERT_EQ(0, gdl_set_requires_grad(w, 1));
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_embedding(ti, w))));
    ASSERT_EQ(0, gdl_copy_to_host(w->grad, g, sizeof g));
    for (v = 0; v < V; v++)
        for (k = 0; k < D; k++)
            if (g[v * D + k] != (float)count[v])
                FAILf("row %d column %d: gradient %.1f, the row occurs %lld times", v, k, (double)g[v * D + k],
                      (long long)count[v]);
    gdl_free(ti);
    gdl_free(w);
    free(idx);
    gdl_arena_reset();
    PASS();
}

/* A GEMM with K = 0 sets C = beta*C with beta = 0: C must become 0 without
   being read, or NaN left in reused memory (0 * NaN = NaN) leaks through.
   The step arena hands out the same addresses after a reset, so the output
   lands where a NaN-filled temporary was. */
TEST gemm_k0_does_not_read_c(void) {
    int64_t sn[1] = {4096}, sa[2] = {3, 0}, sb[2] = {0, 4}, sx[2] = {5, 0}, sw[2] = {6, 0}, sbias[1] = {6};
    gdl_tensor *neg, *a, *b, *x, *w, *bias, *c;
    float h[30];
    int i, round;
    ASSERT_NOT_NULL(neg = gdl_full(1, sn, -1.0, GDL_F32, GPU));
    ASSERT_NOT_NULL(a = gdl_zeros(2, sa, GDL_F32, GPU));
    ASSERT_NOT_NULL(b = gdl_zeros(2, sb, GDL_F32, GPU));
    ASSERT_NOT_NULL(x = gdl_zeros(2, sx, GDL_F32, GPU));
    ASSERT_NOT_NULL(w = gdl_zeros(2, sw, GDL_F32, GPU));
    ASSERT_NOT_NULL(bias = gdl_full(1, sbias, 0.5, GDL_F32, GPU));
    for (round = 0; round < 2; round++) {
        gdl_arena_reset();
        ASSERT_NOT_NULL(gdl_log(neg)); /* 16 KiB of NaN at the start of the arena */
        gdl_arena_reset();
        c = round == 0 ? gdl_matmul(a, b) : gdl_linear(x, w, bias);
        ASSERT_NOT_NULL(c);
        ASSERT_EQ(0, gdl_copy_to_host(c, h, sizeof(float) * (size_t)c->numel));
        for (i = 0; i < c->numel; i++)
            if (h[i] != (round == 0 ? 0.0f : 0.5f))
                FAILf("%s with an empty inner dimension: element %d is %g", round ? "linear" : "matmul", i, (double)h[i]);
    }
    gdl_free(neg); gdl_free(a); gdl_free(b); gdl_free(x); gdl_free(w); gdl_free(bias);
    gdl_arena_reset();
    PASS();
}

/* The backend's GEMM with sC == 0, every batch into one C (a convolution's
   weight gradient): on the GPU a chunk of the products goes into an f32
   workspace with one batched call and one kernel folds them into C in
   order, where one call per sample took `batch` launches. Against the CPU
   backend on the same data: one chunk, several chunks (80 MB of products
   against the 64 MiB workspace), a product too large to chunk (one call a
   sample), beta 1 (a sum), 0.5 and 0 (the last product), a transposed B,
   and bf16 (summed in f32, rounded once: per-sample rounding would be an
   error growing with the batch). */
#ifdef GPUDL_EMU
typedef struct gemm_sum_case {
    int tb, M, N, K, batch;
    float beta;
    gdl_dtype dt;
    int chunks; /* the fold kernels expected (0: per-sample calls) */
} gemm_sum_case;

TEST gemm_sums_batches(void) {
    static const gemm_sum_case cases[] = {
        {1, 37, 29, 13, 5, 1.0f, GDL_F32, 1},     {0, 37, 29, 13, 70, 0.5f, GDL_F32, 1},
        {1, 8, 8, 3, 3, 0.0f, GDL_F32, 1},        {1, 1024, 1024, 2, 20, 1.0f, GDL_F32, 2},
        {1, 3000, 3000, 1, 2, 1.0f, GDL_F32, 0},  {1, 64, 288, 196, 64, 1.0f, GDL_BF16, 1},
        {0, 37, 29, 13, 70, 1.0f, GDL_F16, 1},
    };
    const gdl_backend *gb = gdl_cuda_backend(), *cb = &gdl__cpu_table;
    size_t k;
    for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const gemm_sum_case *c = &cases[k];
        int64_t sa[1], sb[1], sc[1], sA = (int64_t)c->M * c->K, sB = (int64_t)c->K * c->N;
        gdl_tensor *a, *b, *cc, *ga, *gbt, *gc, *back, *ref = NULL, *got = NULL;
        float *h1, *h2;
        long l0, b0, launches, blas;
        double err, tol = c->dt == GDL_F32 ? 1e-5 : c->dt == GDL_BF16 ? 1e-2 : 2e-3;
        sa[0] = sA * c->batch;
        sb[0] = sB * c->batch;
        sc[0] = (int64_t)c->M * c->N;
        gdl_manual_seed(40 + k);
        ASSERT_NOT_NULL(a = gdl_randn(1, sa, gdl_cpu()));
        ASSERT_NOT_NULL(b = gdl_randn(1, sb, gdl_cpu()));
        ASSERT_NOT_NULL(cc = gdl_randn(1, sc, gdl_cpu()));
        if (c->dt != GDL_F32) { /* the data in dt on both devices */
            gdl_tensor *f[3];
            f[0] = a, f[1] = b, f[2] = cc;
            ASSERT_NOT_NULL(a = gdl_clone(gdl_to_dtype(f[0], c->dt)));
            ASSERT_NOT_NULL(b = gdl_clone(gdl_to_dtype(f[1], c->dt)));
            ASSERT_NOT_NULL(cc = gdl_clone(gdl_to_dtype(f[2], c->dt)));
            gdl_free(f[0]), gdl_free(f[1]), gdl_free(f[2]);
        }
        ASSERT_NOT_NULL(ga = gdl_to(a, GPU));
        ASSERT_NOT_NULL(gbt = gdl_to(b, GPU));
        ASSERT_NOT_NULL(gc = gdl_to(cc, GPU));
        ASSERT_EQ(0, gdl_cuda_set_device(0));
        l0 = gdl_emu_count("launch");
        b0 = gdl_emu_count("cublas");
        if (c->dt == GDL_F32) {
            ASSERT_EQ(0, gb->k.gemm(GDL_F32, 0, c->tb, c->M, c->N, c->K, 1.0f, (float *)ga->data, c->K, sA, (float *)gbt->data,
                                  c->tb ? c->K : c->N, sB, c->beta, (float *)gc->data, c->N, 0, c->batch));
            ASSERT_EQ(0, cb->k.gemm(GDL_F32, 0, c->tb, c->M, c->N, c->K, 1.0f, (float *)a->data, c->K, sA, (float *)b->data,
                                  c->tb ? c->K : c->N, sB, c->beta, (float *)cc->data, c->N, 0, c->batch));
        } else {
            ASSERT_EQ(0, gb->k.gemm(c->dt, 0, c->tb, c->M, c->N, c->K, 1.0f, ga->data, c->K, sA, gbt->data,
                                     c->tb ? c->K : c->N, sB, c->beta, gc->data, c->N, 0, c->batch));
            ASSERT_EQ(0, cb->k.gemm(c->dt, 0, c->tb, c->M, c->N, c->K, 1.0f, a->data, c->K, sA, b->data,
                                     c->tb ? c->K : c->N, sB, c->beta, cc->data, c->N, 0, c->batch));
        }
        launches = gdl_emu_count("launch") - l0;
        blas = gdl_emu_count("cublas") - b0;
        if (c->chunks ? launches != c->chunks || blas != c->chunks : launches != 0 || blas != c->batch)
            FAILf("case %d: %ld kernels and %ld cuBLAS calls for %d batches (expected %d chunks)", (int)k, launches, blas,
                  c->batch, c->chunks);
        ASSERT_NOT_NULL(back = gdl_to(gc, gdl_cpu()));
        ASSERT_NOT_NULL(got = gdl_to_dtype(back, GDL_F32));
        ASSERT_NOT_NULL(ref = gdl_to_dtype(cc, GDL_F32));
        h1 = (float *)got->data;
        h2 = (float *)ref->data;
        err = rel_err_host(h1, h2, sc[0]);
        if (!(err <= tol)) FAILf("case %d (%s, batch %d, beta %g): GPU against CPU %.3g > %.3g", (int)k,
                                 gdl_dtype_name(c->dt), c->batch, (double)c->beta, err, tol);
        gdl_free(a), gdl_free(b), gdl_free(cc), gdl_free(ga), gdl_free(gbt), gdl_free(gc), gdl_free(back);
        gdl_arena_reset();
    }
    PASS();
}
#endif

/* ---- optimizers, clipping, anomaly mode ---- */

/* Both devices get the same parameters and, each step, the same gradients
   (a fixed function of the parameters); after 6 steps (momentum buffers and
   Adam's moments in play) the parameters must agree. */
typedef struct opt_kind {
    const char *name;
    int kind; /* 0 SGD, 1 Adam, 2 AdamW */
    double lr, momentum, dampening, weight_decay;
    int nesterov;
} opt_kind;

static gdl_optimizer *make_opt(const opt_kind *k) {
    if (k->kind == 0) return gdl_sgd_new(k->lr, k->momentum, k->dampening, k->weight_decay, k->nesterov);
    if (k->kind == 1) return gdl_adam_new(k->lr, 0.9, 0.99, 1e-8, k->weight_decay);
    return gdl_adamw_new(k->lr, 0.8, 0.95, 1e-6, k->weight_decay);
}

/* loss = sum(p0^2 * w0) + sum(tanh(p1) * w1): gradients that change with p */
static int opt_grads(gdl_tensor **p, gdl_tensor **w) {
    gdl_tensor *l = gdl_add(gdl_sum(gdl_mul(gdl_mul(p[0], p[0]), w[0])), gdl_sum(gdl_mul(gdl_tanh(p[1]), w[1])));
    return l ? gdl_backward(l) : -1;
}

TEST optimizer_parity(void *arg) {
    const opt_kind *k = (const opt_kind *)arg;
    int64_t s0[1] = {1001}, s1[2] = {3, 7};
    gdl_tensor *p[2], *pg[2], *w[2], *wg[2];
    gdl_optimizer *oc, *og;
    int i, step;
    gdl_manual_seed(21);
    p[0] = gdl_randn(1, s0, gdl_cpu());
    p[1] = gdl_randn(2, s1, gdl_cpu());
    w[0] = gdl_randn(1, s0, gdl_cpu());
    w[1] = gdl_randn(2, s1, gdl_cpu());
    for (i = 0; i < 2; i++) {
        ASSERT_EQ(0, gdl_set_requires_grad(p[i], 1));
        ASSERT_NOT_NULL(pg[i] = gdl_to(p[i], GPU));
        ASSERT_NOT_NULL(wg[i] = gdl_to(w[i], GPU));
    }
    ASSERT_NOT_NULL(oc = make_opt(k));
    ASSERT_NOT_NULL(og = make_opt(k));
    ASSERT(gdl_optim_add_params(oc, p, 2, -1, -1) >= 0);
    ASSERT(gdl_optim_add_params(og, pg, 2, -1, -1) >= 0);
    for (step = 0; step < 6; step++) {
        gdl_arena_reset();
        ASSERT_EQ(0, gdl_zero_grad(oc));
        ASSERT_EQ(0, gdl_zero_grad(og));
        ASSERT_EQ(0, opt_grads(p, w));
        ASSERT_EQ(0, opt_grads(pg, wg));
        ASSERT_EQ(0, gdl_step(oc));
        ASSERT_EQ(0, gdl_step(og));
        for (i = 0; i < 2; i++) {
            double e = rel_err(p[i], pg[i]);
            if (!(e < 1e-6)) FAILf("%s step %d: parameter %d differs: relative error %.3g", k->name, step, i, e);
        }
    }
    gdl_optim_free(oc);
    gdl_optim_free(og);
    for (i = 0; i < 2; i++) {
        gdl_free(p[i]); gdl_free(pg[i]); gdl_free(w[i]); gdl_free(wg[i]);
    }
    gdl_arena_reset();
    PASS();
}

/* ---- the flat parameter buffer on the GPU (the emulator counts) ---- */

/* The same parameters and gradients (the gradient of sum(p * c) is c,
   exactly) on the CPU and the GPU, 12 steps with lr and momentum (beta1)
   changed on the way: the GPU's parameters bitwise the CPU's. Parameters,
   gradients and state are views of one device allocation; in a steady-state
   step, zero_grad is one memset, gdl_step one launch with nothing copied to
   the device and no host wait; gdl_optim_set_lr is one small copy to the
   device (the group's scalars), and the table is not copied again. */
#define FLATG_NP 4
TEST flat_buffer_gpu(void *arg) {
#ifndef GPUDL_EMU
    (void)arg;
    SKIPm("counting launches and copies needs the emulator (GPUDL_EMU)");
#else
    const opt_kind *k = (const opt_kind *)arg;
    static const int64_t sizes[FLATG_NP] = {5, 5000, 37, 64}; /* 5000: several chunks of the kernel */
    gdl_tensor *p[FLATG_NP], *pg[FLATG_NP], *c[FLATG_NP], *cg[FLATG_NP];
    gdl_optimizer *oc, *og;
    float *h = (float *)malloc(sizeof(float) * 5000);
    int j, s;
    ASSERT_NOT_NULL(h);
    gdl_manual_seed(8);
    for (j = 0; j < FLATG_NP; j++) {
        ASSERT_NOT_NULL(p[j] = gdl_randn(1, &sizes[j], gdl_cpu()));
        ASSERT_NOT_NULL(c[j] = gdl_randn(1, &sizes[j], gdl_cpu()));
        ASSERT_EQ(0, gdl_set_requires_grad(p[j], 1));
        ASSERT_NOT_NULL(pg[j] = gdl_to(p[j], GPU));
        ASSERT_NOT_NULL(cg[j] = gdl_to(c[j], GPU));
    }
    ASSERT_NOT_NULL(oc = make_opt(k));
    ASSERT_NOT_NULL(og = make_opt(k));
    ASSERT(gdl_optim_add_params(oc, p, FLATG_NP, -1, -1) >= 0);
    ASSERT(gdl_optim_add_params(og, pg, FLATG_NP, -1, -1) >= 0);
    for (s = 0; s < 12; s++) {
        gdl_tensor *lc = NULL, *lg = NULL;
        long m0, l0, h0, launches;
        int64_t sy0;
        int rebuilt = s == 8 && k->kind == 0 && k->momentum == 0; /* plain SGD gets momentum: buffers appear */
        if (s == 5) {
            h0 = gdl_emu_count("h2d");
            ASSERT_EQ(0, gdl_optim_set_lr(og, 0, k->lr * 0.5));
            ASSERT_EQ(1, gdl_emu_count("h2d") - h0);
            ASSERT_EQ(0, gdl_optim_set_lr(oc, 0, k->lr * 0.5));
        }
        if (s == 8) {
            ASSERT_EQ(0, gdl_optim_set_momentum(og, 0, 0.5));
            ASSERT_EQ(0, gdl_optim_set_momentum(oc, 0, 0.5));
        }
        gdl_arena_reset();
        ASSERT_EQ(0, gdl_zero_grad(oc));
        m0 = gdl_emu_count("memset");
        l0 = gdl_emu_count("launch");
        ASSERT_EQ(0, gdl_zero_grad(og));
        if (s >= 2 && !rebuilt && (gdl_emu_count("memset") - m0 != 1 || gdl_emu_count("launch") != l0))
            FAILf("%s step %d: zero_grad made %ld memsets and %ld launches, expected one memset", k->name, s,
                  gdl_emu_count("memset") - m0, gdl_emu_count("launch") - l0);
        for (j = 0; j < FLATG_NP; j++) {
            lc = lc ? gdl_add(lc, gdl_sum(gdl_mul(p[j], c[j]))) : gdl_sum(gdl_mul(p[j], c[j]));
            lg = lg ? gdl_add(lg, gdl_sum(gdl_mul(pg[j], cg[j]))) : gdl_sum(gdl_mul(pg[j], cg[j]));
        }
        ASSERT_EQ(0, gdl_backward(lc));
        ASSERT_EQ(0, gdl_backward(lg));
        ASSERT_EQ(0, gdl_step(oc));
        l0 = gdl_emu_count("launch");
        h0 = gdl_emu_count("h2d");
        sy0 = gdl_sync_count();
        ASSERT_EQ(0, gdl_step(og));
        launches = gdl_emu_count("launch") - l0;
        if (s >= 1 && launches != 1) FAILf("%s step %d: %ld launches, expected one", k->name, s, launches);
        /* from the second step (the first makes the table) on, with lr or momentum changes between */
        if (s >= 1 && !rebuilt && gdl_emu_count("h2d") != h0)
            FAILf("%s step %d: %ld copies to the device in a steady-state step", k->name, s, gdl_emu_count("h2d") - h0);
        if (s >= 1 && gdl_sync_count() != sy0) FAILf("%s step %d: the step waited for the device", k->name, s);
        for (j = 0; j < FLATG_NP; j++) {
            ASSERT_EQ(0, gdl_copy_to_host(pg[j], h, sizeof(float) * (size_t)sizes[j]));
            if (memcmp(h, p[j]->data, sizeof(float) * (size_t)sizes[j]) != 0)
                FAILf("%s step %d: parameter %d: the GPU's bits differ from the CPU's", k->name, s, j);
        }
    }
    { /* one device allocation: parameters, then gradients and state at fixed distances */
        const char *names[16];
        gdl_tensor *ts[16];
        int n = gdl_optim_state(og, names, ts, 16), i;
        char *base = (char *)pg[0]->data;
        ptrdiff_t region = (char *)pg[0]->grad->data - base, off = 0;
        ASSERT(n > 0 && n <= 16);
        for (j = 0; j < FLATG_NP; j++) {
            ASSERT_EQ(off, (char *)pg[j]->data - base);
            ASSERT_EQ(off + region, (char *)pg[j]->grad->data - base);
            off += (ptrdiff_t)((sizes[j] * 4 + 63) / 64 * 64);
        }
        ASSERT_EQ(off, region);
        for (i = 0; i < n; i++) {
            int idx = atoi(names[i] + 6);
            if (strstr(names[i], ".step")) /* read back; plain SGD has had buffers since step 8 */
                ASSERT_EQ(k->kind == 0 && k->momentum == 0 ? 4 : 12, ((int32_t *)ts[i]->data)[0]);
            else ASSERT_EQ((char *)pg[idx]->data - base + (strstr(names[i], "exp_avg_sq") ? 3 : 2) * region,
                           (char *)ts[i]->data - base);
        }
    }
    gdl_optim_free(oc);
    gdl_optim_free(og);
    for (j = 0; j < FLATG_NP; j++) {
        gdl_free(p[j]); gdl_free(pg[j]); gdl_free(c[j]); gdl_free(cg[j]);
    }
    free(h);
    gdl_arena_reset();
    PASS();
#endif
}

/* The flat buffer follows the model: 3 Adam steps on cuda:0, gdl_module_to(cuda:1), 3 more, bitwise a
   reference that stays on cuda:0 (the state and the step counts move with the parameters); then a
   checkpoint saved from cuda:1 and loaded into a fresh model and optimizer on cuda:0 steps the same. */
static gdl_module *flat_net(void) {
    gdl_manual_seed(31);
    return gdl_nn_sequential(3, (gdl_module *[]){gdl_nn_linear(6, 9, 1), gdl_nn_tanh(), gdl_nn_linear(9, 3, 1)});
}
static int flat_net_step(gdl_module *m, gdl_optimizer *opt, gdl_tensor *x, gdl_tensor *y) {
    gdl_tensor *xd, *yd, *loss;
    int rc;
    gdl_arena_reset();
    if (gdl_zero_grad(opt) < 0) return -1;
    xd = gdl_to(x, gdl_module_device(m)); /* persistent copies of persistent tensors */
    yd = gdl_to(y, gdl_module_device(m));
    loss = xd && yd ? gdl_cross_entropy(gdl_forward(m, xd), yd) : NULL;
    rc = !loss || gdl_backward(loss) < 0 ? -1 : gdl_step(opt);
    gdl_free(xd);
    gdl_free(yd);
    return rc;
}
static int flat_nets_equal(gdl_module *a, gdl_module *b) {
    gdl_tensor *ta[8], *tb[8];
    float ha[64], hb[64];
    int n = gdl_module_named_tensors(a, GDL_PARAMS, NULL, ta, 8), i;
    if (n != gdl_module_named_tensors(b, GDL_PARAMS, NULL, tb, 8)) return 0;
    for (i = 0; i < n; i++) {
        size_t bytes = sizeof(float) * (size_t)ta[i]->numel;
        if (bytes > sizeof ha || gdl_copy_to_host(ta[i], ha, bytes) < 0 || gdl_copy_to_host(tb[i], hb, bytes) < 0 ||
            memcmp(ha, hb, bytes) != 0)
            return 0;
    }
    return 1;
}
/* Weight EMA on the GPU (the ema_lerp kernel over the flat parameter region): the averages of a model trained
   on cuda:0 match the CPU twin's to rounding, swap exchanges them on the device, and moving the model to another
   device makes the next step fail with a clear error instead of averaging stale memory. */
TEST ema_gpu_parity(void) {
    int64_t xs[2] = {5, 6}, ys[1] = {5};
    int32_t labels[5] = {0, 2, 1, 1, 0};
    gdl_module *a, *b;
    gdl_optimizer *oa, *ob;
    gdl_ema *ea, *eb;
    gdl_tensor *x, *y, *ta[8], *tb[8];
    float ha[64], hb[64];
    int s, n, i, j;
    gdl_manual_seed(5);
    ASSERT_NOT_NULL(x = gdl_randn(2, xs, gdl_cpu()));
    ASSERT_NOT_NULL(y = gdl_from_array(labels, 1, ys, GDL_I32, gdl_cpu()));
    ASSERT_NOT_NULL(a = flat_net());
    ASSERT_NOT_NULL(b = flat_net());
    ASSERT_EQ(0, gdl_module_to(b, GPU));
    ASSERT_NOT_NULL(oa = gdl_sgd_new(0.1, 0.9, 0, 0, 0));
    ASSERT_NOT_NULL(ob = gdl_sgd_new(0.1, 0.9, 0, 0, 0));
    ASSERT_EQ(0, gdl_optim_add_module(oa, a, 0));
    ASSERT_EQ(0, gdl_optim_add_module(ob, b, 0));
    ASSERT_NOT_NULL(ea = gdl_ema_new(oa, a, 0.9, 0));
    ASSERT_NOT_NULL(eb = gdl_ema_new(ob, b, 0.9, 0));
    for (s = 0; s < 5; s++) {
        ASSERT_EQ(0, flat_net_step(a, oa, x, y));
        ASSERT_EQ(0, flat_net_step(b, ob, x, y));
    }
    ASSERT_EQ(5, gdl_ema_num_updates(eb));
    n = gdl_module_named_tensors(a, GDL_PARAMS, NULL, ta, 8);
    ASSERT_EQ(n, gdl_module_named_tensors(b, GDL_PARAMS, NULL, tb, 8));
    ASSERT_EQ(0, gdl_ema_swap(eb));
    for (i = 0; i < n; i++) {
        size_t bytes = sizeof(float) * (size_t)ta[i]->numel;
        gdl_tensor *avg = gdl_ema_tensor(ea, ta[i]);
        ASSERT_NOT_NULL(avg);
        ASSERT_EQ(0, gdl_copy_to_host(tb[i], hb, bytes)); /* swapped in: b's parameters are its averages */
        for (j = 0; j < ta[i]->numel; j++) ASSERT_IN_RANGE(((float *)avg->data)[j], hb[j], 1e-5);
        ASSERT_EQ(0, gdl_copy_to_host(gdl_ema_tensor(eb, tb[i]), ha, bytes)); /* and its averages the weights */
        for (j = 0; j < ta[i]->numel; j++) ASSERT_IN_RANGE(((float *)ta[i]->data)[j], ha[j], 1e-5);
    }
    ASSERT_EQ(0, gdl_ema_swap(eb));
    if (gdl_cuda_device_count() > 1) {
        ASSERT_EQ(0, gdl_module_to(b, gdl_cuda(1)));
        ASSERT_EQ(-1, flat_net_step(b, ob, x, y));
        ASSERT_CONTAINS(gdl_last_error(), "make the EMA after adding every parameter");
    }
    gdl_ema_free(ea);
    gdl_ema_free(eb);
    gdl_optim_free(oa);
    gdl_optim_free(ob);
    gdl_module_free(a);
    gdl_module_free(b);
    gdl_free(x);
    gdl_free(y);
    PASS();
}
TEST flat_buffer_follows_module_to(void) {
    int64_t xs[2] = {5, 6}, ys[1] = {5};
    int32_t labels[5] = {0, 2, 1, 1, 0};
    gdl_module *a, *b, *c;
    gdl_optimizer *oa, *ob, *oc;
    gdl_tensor *x, *y, *w;
    const char *path = harness_tmp("flat_buffer_ckpt.safetensors");
    int s;
    gdl_manual_seed(3);
    ASSERT_NOT_NULL(x = gdl_randn(2, xs, gdl_cpu()));
    ASSERT_NOT_NULL(y = gdl_from_array(labels, 1, ys, GDL_I32, gdl_cpu()));
    ASSERT_NOT_NULL(a = flat_net());
    ASSERT_NOT_NULL(b = flat_net());
    ASSERT_EQ(0, gdl_module_to(a, gdl_cuda(0)));
    ASSERT_EQ(0, gdl_module_to(b, gdl_cuda(0)));
    ASSERT_NOT_NULL(oa = gdl_adam_new(0.05, 0.9, 0.999, 1e-8, 0.01));
    ASSERT_NOT_NULL(ob = gdl_adam_new(0.05, 0.9, 0.999, 1e-8, 0.01));
    ASSERT_EQ(0, gdl_optim_add_module(oa, a, 1));
    ASSERT_EQ(0, gdl_optim_add_module(ob, b, 1));
    for (s = 0; s < 6; s++) {
        if (s == 3) ASSERT_EQ(0, gdl_module_to(b, gdl_cuda(1)));
        ASSERT_EQ(0, flat_net_step(a, oa, x, y));
        ASSERT_EQ(0, flat_net_step(b, ob, x, y));
        if (!flat_nets_equal(a, b)) FAILf("step %d: the moved model differs from the one that stayed", s);
    }
    ASSERT_NOT_NULL(w = gdl_module_tensor(b, "0.weight"));
    ASSERT_EQ(GDL_DEVICE_CUDA, w->device.type);
    ASSERT_EQ(1, w->device.index);
    ASSERT_EQ(1, w->grad->device.index);
    /* the checkpoint: from cuda:1 into a fresh pair on cuda:0 */
    ASSERT_EQ(0, gdl_checkpoint_save(b, ob, NULL, 0, path));
    ASSERT_NOT_NULL(c = flat_net());
    ASSERT_EQ(0, gdl_module_to(c, gdl_cuda(0)));
    ASSERT_NOT_NULL(oc = gdl_adam_new(0.05, 0.9, 0.999, 1e-8, 0.01));
    ASSERT_EQ(0, gdl_optim_add_module(oc, c, 1));
    ASSERT_EQ(0, gdl_checkpoint_load(c, oc, NULL, NULL, path));
    ASSERT_EQ(6, gdl_optim_get_step(oc));
    for (s = 0; s < 2; s++) {
        ASSERT_EQ(0, flat_net_step(a, oa, x, y));
        ASSERT_EQ(0, flat_net_step(c, oc, x, y));
        if (!flat_nets_equal(a, c)) FAILf("step %d after the checkpoint: differs", s);
    }
    remove(path);
    gdl_optim_free(oa);
    gdl_optim_free(ob);
    gdl_optim_free(oc);
    gdl_module_free(a);
    gdl_module_free(b);
    gdl_module_free(c);
    gdl_free(x);
    gdl_free(y);
    gdl_arena_reset();
    PASS();
}

/* clip_grad_norm: the norm (a two-pass device reduction in double) and the
   scaled gradients. One gradient is longer than 1024 blocks x 256 threads, so
   every thread of the partial-sum kernel loops; one is a single element. */
TEST clip_grad_norm_parity(void) {
    int64_t s[3] = {262144 + 4097, 1, 333};
    gdl_tensor *p[3], *pg[3];
    double nc, ng, nc2, ng2;
    int i;
    gdl_manual_seed(31);
    for (i = 0; i < 3; i++) { /* grad = g through the backward of sum(p * g) */
        gdl_tensor *g, *gg;
        p[i] = gdl_zeros(1, &s[i], GDL_F32, gdl_cpu());
        ASSERT_EQ(0, gdl_set_requires_grad(p[i], 1));
        pg[i] = gdl_to(p[i], GPU);
        g = gdl_randn(1, &s[i], gdl_cpu());
        if (i == 1) ((float *)g->data)[0] = 1000.0f; /* one large component */
        gg = gdl_to(g, GPU);
        ASSERT_NOT_NULL(gg);
        gdl_arena_reset();
        ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(p[i], g))));
        ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(pg[i], gg))));
        ASSERT(same_bytes(p[i]->grad, pg[i]->grad));
        gdl_free(g);
        gdl_free(gg);
    }
    nc = gdl_clip_grad_norm(p, 3, 1e9); /* no clipping: the norm only */
    ng = gdl_clip_grad_norm(pg, 3, 1e9);
    ASSERT(nc > 0);
    ASSERT_IN_RANGE(nc, ng, 1e-9 * nc);
    nc2 = gdl_clip_grad_norm(p, 3, 2.5);
    ng2 = gdl_clip_grad_norm(pg, 3, 2.5);
    ASSERT_IN_RANGE(nc, nc2, 1e-9 * nc);
    ASSERT_IN_RANGE(nc2, ng2, 1e-9 * nc2);
    for (i = 0; i < 3; i++) {
        double e = rel_err(p[i]->grad, pg[i]->grad);
        if (!(e < 1e-6)) FAILf("clipped gradient %d differs: relative error %.3g", i, e);
    }
    nc = gdl_clip_grad_norm(p, 3, 1e9);
    ng = gdl_clip_grad_norm(pg, 3, 1e9);
    ASSERT_IN_RANGE(2.5, nc, 1e-4);
    ASSERT_IN_RANGE(2.5, ng, 1e-4);
    { /* without reading the norm back: nothing synchronises, the same gradients */
        int64_t before = gdl_sync_count();
        ASSERT_EQ(0, gdl_clip_grad_norm_nosync(p, 3, 0.5));
        ASSERT_EQ(0, gdl_clip_grad_norm_nosync(pg, 3, 0.5));
        if (gdl_sync_count() != before)
            FAILf("gdl_clip_grad_norm_nosync made %lld host synchronisations", (long long)(gdl_sync_count() - before));
        for (i = 0; i < 3; i++) {
            double e = rel_err(p[i]->grad, pg[i]->grad);
            if (!(e < 1e-6)) FAILf("gradient %d clipped without a read differs: relative error %.3g", i, e);
        }
        ASSERT_IN_RANGE(0.5, gdl_clip_grad_norm(pg, 3, 1e9), 1e-4);
    }
    for (i = 0; i < 3; i++) {
        gdl_free(p[i]);
        gdl_free(pg[i]);
    }
    PASS();
}

/* Anomaly mode names the op and counts the non-finite values; the counts come
   from the device's two-pass reduction, so the messages must be the CPU's. */
TEST anomaly_mode_parity(void) {
    int64_t n[1] = {262144 + 999}, i;
    gdl_tensor *x, *xg, *y;
    char cpu_msg[1024];
    float *v;
    gdl_manual_seed(41);
    x = gdl_rand(1, n, gdl_cpu());
    v = (float *)x->data;
    for (i = 5; i < n[0]; i += 1013) v[i] = -v[i] - 0.5f; /* log of these is NaN */
    v[n[0] - 1] = 0.0f;                                    /* log 0 = -Inf */
    ASSERT_EQ(0, gdl_set_requires_grad(x, 1));
    xg = gdl_to(x, GPU);
    gdl_set_anomaly_mode(1);
    ASSERT_NULL(gdl_log(x));
    snprintf(cpu_msg, sizeof cpu_msg, "%s", gdl_last_error());
    ASSERT_CONTAINS(cpu_msg, "NaN/Inf");
    gdl_clear_error();
    ASSERT_NULL(gdl_log(xg));
    ASSERT_STR_EQ(cpu_msg, gdl_last_error());
    /* a finite forward with a non-finite backward: d/dx x^0.5 at 0 */
    for (i = 0; i < n[0]; i++) v[i] = fabsf(v[i]);
    for (i = 7; i < n[0]; i += 5003) v[i] = 0.0f;
    ASSERT_EQ(0, gdl_copy_(xg, x));
    gdl_arena_reset();
    y = gdl_sum(gdl_pow_scalar(x, 0.5));
    ASSERT_NOT_NULL(y);
    ASSERT_EQ(-1, gdl_backward(y));
    snprintf(cpu_msg, sizeof cpu_msg, "%s", gdl_last_error());
    ASSERT_CONTAINS(cpu_msg, "anomaly mode");
    gdl_clear_error();
    y = gdl_sum(gdl_pow_scalar(xg, 0.5));
    ASSERT_NOT_NULL(y);
    ASSERT_EQ(-1, gdl_backward(y));
    ASSERT_STR_EQ(cpu_msg, gdl_last_error());
    /* finite everywhere: no complaint (the gradient so far holds Inf: clear it) */
    for (i = 0; i < n[0]; i++) v[i] += 0.25f;
    ASSERT_EQ(0, gdl_copy_(xg, x));
    ASSERT_EQ(0, gdl_zero_grad_tensor(xg));
    gdl_arena_reset();
    y = gdl_sum(gdl_pow_scalar(xg, 0.5));
    ASSERT_NOT_NULL(y);
    ASSERT_EQ(0, gdl_backward(y));
    gdl_set_anomaly_mode(0);
    gdl_free(x);
    gdl_free(xg);
    gdl_arena_reset();
    PASS();
}

/* ---- devices, transfers, memory ---- */

TEST device_mismatch_error(void) {
    int64_t s[1] = {4};
    gdl_tensor *a, *b;
    a = gdl_ones(1, s, GDL_F32, gdl_cpu());
    b = gdl_ones(1, s, GDL_F32, GPU);
    ASSERT_NULL(gdl_add(a, b));
    ASSERT_CONTAINS(gdl_last_error(), "expected all tensors on the same device");
    ASSERT_CONTAINS(gdl_last_error(), "cuda:0");
    gdl_free(a);
    gdl_free(b);
    PASS();
}

TEST transfers_round_trip(void) {
    int64_t s[2] = {33, 17};
    gdl_tensor *a, *g, *back, *h16;
    uint16_t *hh;
    int64_t i;
    gdl_manual_seed(3);
    a = gdl_randn(2, s, gdl_cpu());
    g = gdl_to(a, GPU);
    back = gdl_to(g, gdl_cpu());
    ASSERT(memcmp(a->data, back->data, sizeof(float) * 33 * 17) == 0);
    h16 = gdl_to_dtype(g, GDL_F16); /* the GPU's conversion, bit for bit the CPU's */
    hh = (uint16_t *)malloc(2 * 33 * 17);
    ASSERT_EQ(0, gdl_copy_to_host(h16, hh, 2 * 33 * 17));
    for (i = 0; i < a->numel; i++) ASSERT_EQ(gdl_f32_to_f16(((float *)a->data)[i]), hh[i]);
    free(hh);
    gdl_free(a); gdl_free(g); gdl_free(back);
    gdl_arena_reset();
    PASS();
}

/* gdl_copy_ between overlapping views of one tensor is a memmove on the CPU;
   the device must give the same, in both directions of overlap */
TEST overlapping_device_copies(void) {
    int64_t s[2] = {300, 3};
    int dir;
    for (dir = 0; dir < 2; dir++) {
        gdl_tensor *x, *xg;
        gdl_manual_seed(5);
        x = gdl_randn(2, s, gdl_cpu());
        xg = gdl_to(x, GPU);
        ASSERT_NOT_NULL(xg);
        gdl_arena_reset();
        /* rows [2,290) <- rows [0,288) (dir 0) or rows [0,288) <- rows [2,290) (dir 1) */
        ASSERT_EQ(0, gdl_copy_(gdl_slice(x, dir ? 0 : 2, dir ? 288 : 290), gdl_slice(x, dir ? 2 : 0, dir ? 290 : 288)));
        ASSERT_EQ(0, gdl_copy_(gdl_slice(xg, dir ? 0 : 2, dir ? 288 : 290), gdl_slice(xg, dir ? 2 : 0, dir ? 290 : 288)));
        if (!same_bytes(x, xg)) FAILf("overlapping copy (direction %d) differs from the CPU's memmove", dir);
        /* one element onto itself, shifted by one */
        ASSERT_EQ(0, gdl_copy_(gdl_slice(x, 1, 300), gdl_slice(x, 0, 299)));
        ASSERT_EQ(0, gdl_copy_(gdl_slice(xg, 1, 300), gdl_slice(xg, 0, 299)));
        if (!same_bytes(x, xg)) FAILf("copy shifted by one row (direction %d) differs", dir);
        gdl_free(x);
        gdl_free(xg);
        gdl_arena_reset();
    }
    PASS();
}

/* ---- training parity ---- */

/* Small nets from identical weights on both devices. The inputs and the
   architecture are chosen so no comparison sits on a rounding knife-edge:
   max pooling comes before the ReLU (after it, windows of exact zeros tie,
   and a pre-activation that is +1e-9 on one device and -1e-9 on the other
   flips the argmax), the inputs are continuous, and the horizon is short
   enough that one-ulp differences cannot grow past the tolerance. The final
   accuracies must agree, except for samples whose two best logits are
   closer than any real bug would leave them. */
#define TRAIN_STEPS 40
#define TRAIN_B 32

typedef struct toy {
    gdl_tensor *p[8];
    int np;
    gdl_tensor *x, *y;
} toy;

static gdl_tensor *toy_forward(toy *t, int cnn) {
    if (!cnn)
        return gdl_linear(gdl_relu(gdl_linear(t->x, t->p[0], t->p[1])), t->p[2], t->p[3]);
    {
        gdl_tensor *h = gdl_relu(gdl_max_pool2d(gdl_conv2d(t->x, t->p[0], t->p[1], 1, 1, 1, 1), 2, 2, 0));
        h = gdl_relu(gdl_max_pool2d(gdl_conv2d(h, t->p[2], t->p[3], 1, 1, 1, 1), 2, 2, 0));
        return gdl_linear(gdl_flatten(h, 1), t->p[4], t->p[5]);
    }
}

static void toy_make(toy *t, int cnn) {
    int64_t mlp_shapes[4][2] = {{64, 196}, {64, 0}, {10, 64}, {10, 0}};
    int64_t cnn_shapes[6][4] = {{8, 1, 3, 3}, {8}, {16, 8, 3, 3}, {16}, {10, 16 * 3 * 3}, {10}};
    int cnn_nd[6] = {4, 1, 4, 1, 2, 1};
    int64_t sx_mlp[2] = {TRAIN_B, 196}, sx_cnn[4] = {TRAIN_B, 1, 14, 14}, sy[1] = {TRAIN_B};
    int32_t labels[TRAIN_B];
    int i;
    gdl_manual_seed(5);
    t->np = cnn ? 6 : 4;
    for (i = 0; i < t->np; i++) {
        if (cnn) t->p[i] = gdl_uniform(cnn_nd[i], cnn_shapes[i], -0.3, 0.3, gdl_cpu());
        else t->p[i] = gdl_uniform(mlp_shapes[i][1] ? 2 : 1, mlp_shapes[i], -0.1, 0.1, gdl_cpu());
        gdl_set_requires_grad(t->p[i], 1);
    }
    t->x = cnn ? gdl_rand(4, sx_cnn, gdl_cpu()) : gdl_rand(2, sx_mlp, gdl_cpu());
    for (i = 0; i < TRAIN_B; i++) labels[i] = (int32_t)(gdl_rng_next_u64() % 10);
    t->y = gdl_from_array(labels, 1, sy, GDL_I32, gdl_cpu());
}

static void toy_free(toy *t) {
    int i;
    for (i = 0; i < t->np; i++) gdl_free(t->p[i]);
    gdl_free(t->x);
    gdl_free(t->y);
}

static int toy_to(toy *t, gdl_device dev) {
    int i;
    for (i = 0; i < t->np; i++)
        if (gdl_move_(t->p[i], dev) < 0) return -1;
    return gdl_move_(t->x, dev) < 0 || gdl_move_(t->y, dev) < 0 ? -1 : 0;
}

static double toy_step(toy *t, int cnn) {
    gdl_tensor *loss;
    double l;
    int i;
    for (i = 0; i < t->np; i++) gdl_zero_grad_tensor(t->p[i]);
    loss = gdl_cross_entropy(toy_forward(t, cnn), t->y);
    if (!loss || gdl_backward(loss) < 0) return NAN;
    l = gdl_item(loss);
    for (i = 0; i < t->np; i++)
        if (gdl_sgd_update_(t->p[i], 0.1) < 0) return NAN;
    return l;
}

/* correct predictions on the training batch; logits copied to host in *out */
static int toy_logits(toy *t, int cnn, float *out) {
    gdl_tensor *z;
    gdl_arena_reset();
    z = toy_forward(t, cnn);
    if (!z || gdl_copy_to_host(z, out, sizeof(float) * TRAIN_B * 10) < 0) return -1;
    return 0;
}

static int argmax10(const float *z, float *gap) {
    int j, b = 0, s = -1;
    for (j = 1; j < 10; j++)
        if (z[j] > z[b]) b = j;
    for (j = 0; j < 10; j++)
        if (j != b && (s < 0 || z[j] > z[s])) s = j;
    if (gap) *gap = z[b] - z[s];
    return b;
}

TEST train_parity(void *arg) {
    int cnn = *(const int *)arg, s, i, correct_a = 0, correct_b = 0, near = 0;
    toy a, b;
    float za[TRAIN_B * 10], zb[TRAIN_B * 10];
    double first = 0, last = 0;
    toy_make(&a, cnn);
    toy_make(&b, cnn);
    ASSERT_EQ(0, toy_to(&b, GPU));
    for (s = 0; s < TRAIN_STEPS; s++) {
        double la, lb;
        gdl_arena_reset();
        la = toy_step(&a, cnn);
        lb = toy_step(&b, cnn);
        if (!(fabs(la - lb) <= 1e-4 * (fabs(la) > 1 ? fabs(la) : 1)))
            FAILf("step %d: CPU loss %.7f, GPU loss %.7f (%s)", s, la, lb, gdl_last_error());
        if (s == 0) first = la;
        last = la;
    }
    ASSERTm("the net learns (else the comparison says little)", last < 0.9 * first);
    for (i = 0; i < a.np; i++) {
        double e = rel_err(a.p[i], b.p[i]);
        if (!(e < 1e-3)) FAILf("parameter %d after %d steps: relative error %.3g", i, TRAIN_STEPS, e);
    }
    ASSERT_EQ(0, toy_logits(&a, cnn, za));
    ASSERT_EQ(0, toy_logits(&b, cnn, zb));
    for (i = 0; i < TRAIN_B; i++) {
        float gap;
        int pa = argmax10(za + 10 * i, &gap), pb = argmax10(zb + 10 * i, NULL);
        int32_t y = ((const int32_t *)a.y->data)[i];
        correct_a += pa == y;
        correct_b += pb == y;
        if (pa != pb && gap > 1e-4f)
            FAILf("sample %d: CPU predicts %d, GPU %d, with a margin of %g", i, pa, pb, (double)gap);
        near += pa != pb;
    }
    if (abs(correct_a - correct_b) > near)
        FAILf("accuracy on the batch: CPU %d/%d, GPU %d/%d", correct_a, TRAIN_B, correct_b, TRAIN_B);
    toy_free(&a);
    toy_free(&b);
    gdl_arena_reset();
    PASS();
}

TEST allocator_steady_state_and_oom(void) {
#ifndef GPUDL_CUDA
    SKIPm("built without GPUDL_CUDA");
#else
    size_t alloc0, peak0, res0, alloc1, peak1, res1;
    int64_t huge[2] = {1 << 20, 1 << 20}; /* 4 TiB */
    toy t, ref;
    int s;
    double lt, lr;
    toy_make(&t, 0);
    toy_make(&ref, 0);
    ASSERT_EQ(0, toy_to(&t, GPU));
    for (s = 0; s < 3; s++) {
        gdl_arena_reset();
        toy_step(&t, 0);
        toy_step(&ref, 0);
    }
    gdl_cuda_memory_stats(&alloc0, &peak0, &res0);
    for (s = 0; s < 10; s++) {
        gdl_arena_reset();
        toy_step(&t, 0);
        toy_step(&ref, 0);
    }
    gdl_cuda_memory_stats(&alloc1, &peak1, &res1);
    ASSERT_EQ((long long)res0, (long long)res1); /* nothing new reserved in steady state */
    ASSERT_EQ((long long)alloc0, (long long)alloc1);
    ASSERT_NULL(gdl_empty(2, huge, GDL_F32, GPU));
    ASSERT_CONTAINS(gdl_last_error(), "out of memory");
    gdl_cuda_memory_stats(&alloc1, NULL, NULL);
    ASSERT_EQ((long long)alloc0, (long long)alloc1); /* the failed request left nothing behind */
    gdl_arena_reset();
    lt = toy_step(&t, 0); /* still usable, and still right */
    lr = toy_step(&ref, 0);
    ASSERT_IN_RANGE(lr, lt, 1e-5 * (fabs(lr) > 1 ? fabs(lr) : 1));
    toy_free(&t);
    toy_free(&ref);
    gdl_arena_reset();
    PASS();
#endif
}

/* ---- the pinned-memory loader ---- */

/* A loader to a CUDA device with pin_memory stages batches in page-locked
   buffers copied on its own stream; a buffer reused before its copy finished,
   or a batch handed out before the copy, shows as a batch that differs from
   the CPU loader's. recipe: random erasing and MixUp/CutMix too, whose soft
   targets f32 [B, 10] travel in the label buffers (pinned or not). */
static enum harness_result loader_gpu_matches_cpu(int recipe, int pin) {
    enum { N = 45, H = 6 };
    static uint8_t px[N * H * H];
    int32_t labels[N];
    int64_t sshape[3] = {1, H, H};
    gdl_dataset *ds;
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *lc, *lg;
    int i, epoch, nb;
    for (i = 0; i < N * H * H; i++) px[i] = (uint8_t)((i * 37 + i / 7) & 255);
    for (i = 0; i < N; i++) labels[i] = i % 10;
    ds = gdl_dataset_from_arrays(px, GDL_U8, 3, sshape, labels, N, 10);
    ASSERT_NOT_NULL(ds);
    o.batch_size = 8;
    o.shuffle = 1;
    o.seed = 9;
    o.num_workers = 2;
    o.prefetch = 3;
    o.transform.normalize = 1;
    o.transform.mean[0] = 0.5;
    o.transform.std[0] = 0.25;
    o.transform.hflip = 1;
    if (recipe) {
        o.transform.erase_p = 0.5;
        o.transform.erase_random = 1;
        o.transform.mixup_alpha = 0.4;
        o.transform.cutmix_alpha = 1;
        o.transform.num_classes = 10;
    }
    ASSERT_NOT_NULL(lc = gdl_loader_new(ds, &o));
    o.device = GPU;
    o.pin_memory = pin;
    ASSERT_NOT_NULL(lg = gdl_loader_new(ds, &o));
    for (epoch = 0; epoch < 2; epoch++) {
        nb = 0;
        for (;;) {
            gdl_tensor *xc, *yc, *xg, *yg;
            int rc = gdl_loader_next(lc, &xc, &yc), rg = gdl_loader_next(lg, &xg, &yg);
            ASSERT_EQ(rc, rg);
            if (rc <= 0) break;
            ASSERT(gdl_device_equal(xg->device, GPU));
            ASSERT_EQ(recipe ? 2 : 1, yg->ndim);
            if (!same_bytes(xc, xg) || !same_bytes(yc, yg))
                FAILf("epoch %d batch %d from the GPU loader (pin %d) differs from the CPU loader's (%s)", epoch, nb,
                      pin, gdl_last_error());
            /* use the device batch while the next one is being staged */
            gdl_arena_reset();
            ASSERT_NOT_NULL(gdl_sum(gdl_relu(xg)));
            nb++;
        }
        ASSERT_EQ(6, nb);
    }
    gdl_loader_free(lc);
    gdl_loader_free(lg);
    gdl_dataset_free(ds);
    gdl_arena_reset();
    PASS();
}
TEST loader_pinned_matches_cpu(void) { return loader_gpu_matches_cpu(0, 1); }
TEST loader_recipe_matches_cpu(void) {
    CHECK_CALL(loader_gpu_matches_cpu(1, 0));
    return loader_gpu_matches_cpu(1, 1);
}

/* Token datasets to a CUDA device, pinned and not: i32 windows with [B,T] targets, and padded labelled
   text with its lengths (gdl_loader_lengths), equal to the CPU loader's batches. */
TEST loader_text_matches_cpu(void) {
    enum { N = 200, T = 9, V = 13 };
    int32_t tok[N];
    gdl_text_list tl;
    gdl_vocab *v;
    gdl_dataset *ds[2];
    int i, k, pinned;
    memset(&tl, 0, sizeof tl);
    for (i = 0; i < N; i++) tok[i] = (int32_t)((i * 7 + i / 5) % V);
    ASSERT_NOT_NULL(ds[0] = gdl_dataset_lm_windows(tok, N, T, 2, V));
    ASSERT_NOT_NULL(v = gdl_vocab_build("abcdefgh", 8, NULL));
    ASSERT_EQ(0, gdl__tl_class("t", &tl, 2, "c"));
    /* texts of 1..7 characters (some padded, some cut to max_len 5), inside "abcdefgh" */
    for (i = 0; i < 37; i++) ASSERT_EQ(0, gdl__tl_push("t", &tl, "abcdefgh" + i % 2, (size_t)(1 + i % 7), i % 3));
    ASSERT_NOT_NULL(ds[1] = gdl_dataset_text_classes(&tl, v, 5));
    for (k = 0; k < 2; k++)
        for (pinned = 0; pinned < 2; pinned++) {
            gdl_loader_opts o = gdl_loader_defaults();
            gdl_loader *lc, *lg;
            int nb = 0;
            o.batch_size = 8;
            o.shuffle = 1;
            o.seed = 4;
            o.num_workers = 2;
            ASSERT_NOT_NULL(lc = gdl_loader_new(ds[k], &o));
            o.device = GPU;
            o.pin_memory = pinned;
            ASSERT_NOT_NULL(lg = gdl_loader_new(ds[k], &o));
            for (;;) {
                gdl_tensor *xc, *yc, *xg, *yg;
                int rc = gdl_loader_next(lc, &xc, &yc), rg = gdl_loader_next(lg, &xg, &yg);
                ASSERT_EQ(rc, rg);
                if (rc <= 0) break;
                ASSERT_EQ(GDL_I32, xg->dtype);
                ASSERT(gdl_device_equal(yg->device, GPU));
                if (!same_bytes(xc, xg) || !same_bytes(yc, yg) ||
                    (k == 1 && !same_bytes(gdl_loader_lengths(lc), gdl_loader_lengths(lg))))
                    FAILf("dataset %d (pinned %d) batch %d on the GPU differs from the CPU's", k, pinned, nb);
                nb++;
            }
            ASSERT_EQ(k == 0 ? 12 : 5, nb);
            gdl_loader_free(lc);
            gdl_loader_free(lg);
        }
    gdl_dataset_free(ds[0]);
    gdl_dataset_free(ds[1]);
    gdl_vocab_free(v);
    gdl_text_list_free(&tl);
    PASS();
}

/* ---- two devices, host threads ---- */

/* A training loop fed by a pinned GPU loader makes no host synchronisation
   in a steady-state step (gdl_sync_count): the batch copy is ordered against
   the compute stream with events. The loss is read after each measured step
   (outside the window) and must equal the CPU's; a second pass reads nothing
   until the end, so the host runs ahead of the device and the double-buffered
   batches must still arrive in order (the final weights equal the CPU's). */
typedef struct sync_net {
    gdl_tensor *w1, *b1, *w2;
} sync_net;

static void sync_net_make(sync_net *m, gdl_device dev) {
    int64_t s1[2] = {16, 36}, sb[1] = {16}, s2[2] = {10, 16};
    gdl_manual_seed(5);
    m->w1 = gdl_uniform(2, s1, -0.3, 0.3, gdl_cpu());
    m->b1 = gdl_uniform(1, sb, -0.1, 0.1, gdl_cpu());
    m->w2 = gdl_uniform(2, s2, -0.3, 0.3, gdl_cpu());
    gdl_move_(m->w1, dev);
    gdl_move_(m->b1, dev);
    gdl_move_(m->w2, dev);
    gdl_set_requires_grad(m->w1, 1);
    gdl_set_requires_grad(m->b1, 1);
    gdl_set_requires_grad(m->w2, 1);
}

/* one step on the loader's next batch; NULL at the end of the epoch */
static gdl_tensor *sync_net_step(sync_net *m, gdl_loader *l) {
    gdl_tensor *x, *y, *loss;
    int64_t flat[2] = {-1, 36};
    if (gdl_loader_next(l, &x, &y) <= 0) return NULL;
    gdl_zero_grad_tensor(m->w1);
    gdl_zero_grad_tensor(m->b1);
    gdl_zero_grad_tensor(m->w2);
    loss = gdl_cross_entropy(gdl_linear(gdl_relu(gdl_linear(gdl_reshape(x, 2, flat), m->w1, m->b1)), m->w2, NULL), y);
    if (!loss || gdl_backward(loss) < 0 || gdl_sgd_update_(m->w1, 0.1) < 0 || gdl_sgd_update_(m->b1, 0.1) < 0 ||
        gdl_sgd_update_(m->w2, 0.1) < 0)
        return NULL;
    return loss;
}

TEST loader_steps_without_host_waits(void *arg) {
    enum { N = 96, H = 6 };
    static uint8_t px[N * H * H];
    int32_t labels[N];
    int64_t sshape[3] = {1, H, H};
    int workers = *(const int *)arg, pass, step;
    gdl_dataset *ds;
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *lc, *lg;
    sync_net mc, mg;
    for (step = 0; step < N * H * H; step++) px[step] = (uint8_t)((step * 53 + step / 5) & 255);
    for (step = 0; step < N; step++) labels[step] = (step * 7) % 10;
    ASSERT_NOT_NULL(ds = gdl_dataset_from_arrays(px, GDL_U8, 3, sshape, labels, N, 10));
    o.batch_size = 8;
    o.shuffle = 1;
    o.seed = 3;
    o.num_workers = workers;
    o.transform.normalize = 1;
    o.transform.mean[0] = 0.5;
    o.transform.std[0] = 0.25;
    ASSERT_NOT_NULL(lc = gdl_loader_new(ds, &o));
    o.device = GPU;
    o.pin_memory = 1;
    ASSERT_NOT_NULL(lg = gdl_loader_new(ds, &o));
    sync_net_make(&mc, gdl_cpu());
    sync_net_make(&mg, GPU);
    for (pass = 0; pass < 2; pass++) {
        for (step = 0;; step++) {
            gdl_tensor *lcpu, *lgpu;
            int64_t before;
            gdl_arena_reset();
            lcpu = sync_net_step(&mc, lc);
            before = gdl_sync_count();
            lgpu = sync_net_step(&mg, lg);
            if (pass == 0 && step >= 2 && gdl_sync_count() != before)
                FAILf("step %d: %lld host synchronisations (%d workers)", step, (long long)(gdl_sync_count() - before),
                      workers);
            if (!lcpu || !lgpu) {
                ASSERT(!lcpu && !lgpu);
                break;
            }
            if (pass == 0 && fabs(gdl_item(lcpu) - gdl_item(lgpu)) > 1e-5)
                FAILf("step %d: loss CPU %.7f GPU %.7f", step, gdl_item(lcpu), gdl_item(lgpu));
        }
        ASSERT_EQ(12, step);
    }
    ASSERT(rel_err(mc.w1, mg.w1) < 1e-5);
    ASSERT(rel_err(mc.b1, mg.b1) < 1e-5);
    ASSERT(rel_err(mc.w2, mg.w2) < 1e-5);
    gdl_free(mc.w1), gdl_free(mc.b1), gdl_free(mc.w2);
    gdl_free(mg.w1), gdl_free(mg.b1), gdl_free(mg.w2);
    gdl_loader_free(lc);
    gdl_loader_free(lg);
    gdl_dataset_free(ds);
    gdl_arena_reset();
    PASS();
}

/* Model parallel: the first layer on cuda:0, the second on cuda:1, the
   activation moved between them with gdl_to; trained GPipe-style on two
   micro-batches (loss / 2 each, gradients accumulating), it must match one
   CPU run on the whole batch. */
TEST model_parallel_two_devices(void) {
    enum { B = 8, D = 12, H = 9, C = 4 };
    int64_t sx[2] = {B, D}, sy[1] = {B}, s1[2] = {H, D}, sb[1] = {H}, s2[2] = {C, H};
    int64_t hx[2] = {B / 2, D}, hy[1] = {B / 2};
    float xs[B * D];
    int32_t ys[B];
    gdl_tensor *p[2][3]; /* [cpu, split][w1, b1, w2] */
    int i, k, step, mb;
    for (i = 0; i < B * D; i++) xs[i] = (float)sin(0.5 * i);
    for (i = 0; i < B; i++) ys[i] = (i * 3) % C;
    for (k = 0; k < 2; k++) {
        gdl_manual_seed(4);
        p[k][0] = gdl_uniform(2, s1, -0.3, 0.3, gdl_cpu());
        p[k][1] = gdl_uniform(1, sb, -0.1, 0.1, gdl_cpu());
        p[k][2] = gdl_uniform(2, s2, -0.3, 0.3, gdl_cpu());
        if (k == 1) {
            ASSERT_EQ(0, gdl_move_(p[1][0], gdl_cuda(0)));
            ASSERT_EQ(0, gdl_move_(p[1][1], gdl_cuda(0)));
            ASSERT_EQ(0, gdl_move_(p[1][2], gdl_cuda(1)));
        }
        for (i = 0; i < 3; i++) gdl_set_requires_grad(p[k][i], 1);
    }
    for (step = 0; step < 5; step++) {
        gdl_tensor *x, *y, *loss;
        gdl_arena_reset();
        for (k = 0; k < 2; k++)
            for (i = 0; i < 3; i++) gdl_zero_grad_tensor(p[k][i]);
        x = gdl_from_array(xs, 2, sx, GDL_F32, gdl_cpu());
        y = gdl_from_array(ys, 1, sy, GDL_I32, gdl_cpu());
        loss = gdl_cross_entropy(gdl_linear(gdl_relu(gdl_linear(x, p[0][0], p[0][1])), p[0][2], NULL), y);
        ASSERT_EQ(0, gdl_backward(loss));
        gdl_free(x), gdl_free(y);
        for (mb = 0; mb < 2; mb++) { /* micro-batch mb: layer 1 on cuda:0, layer 2 on cuda:1 */
            gdl_tensor *h;
            x = gdl_from_array(xs + mb * (B / 2) * D, 2, hx, GDL_F32, gdl_cuda(0));
            y = gdl_from_array(ys + mb * (B / 2), 1, hy, GDL_I32, gdl_cuda(1));
            h = gdl_to(gdl_relu(gdl_linear(x, p[1][0], p[1][1])), gdl_cuda(1));
            loss = gdl_mul_scalar(gdl_cross_entropy(gdl_linear(h, p[1][2], NULL), y), 0.5);
            if (!loss || gdl_backward(loss) < 0) FAILf("micro-batch %d: %s", mb, gdl_last_error());
            gdl_free(x), gdl_free(y);
        }
        for (i = 0; i < 3; i++) {
            if (!gdl_device_equal(p[1][i]->grad->device, p[1][i]->device))
                FAILf("parameter %d's gradient is on %s, the parameter on %s", i,
                      gdl_device_str(p[1][i]->grad->device), gdl_device_str(p[1][i]->device));
            if (rel_err(p[0][i]->grad, p[1][i]->grad) > 1e-5)
                FAILf("step %d: parameter %d's gradient differs from the one-device run by %g", step, i,
                      rel_err(p[0][i]->grad, p[1][i]->grad));
            ASSERT_EQ(0, gdl_sgd_update_(p[0][i], 0.2));
            ASSERT_EQ(0, gdl_sgd_update_(p[1][i], 0.2));
        }
    }
    for (i = 0; i < 3; i++) ASSERT(rel_err(p[0][i], p[1][i]) < 1e-5);
    for (k = 0; k < 2; k++)
        for (i = 0; i < 3; i++) gdl_free(p[k][i]);
    gdl_arena_reset();
    PASS();
}

/* gdl_fit on the GPU with a pinned loader reads nothing back in a steady
   step: the loss and accuracy are summed on the device and read at the
   epoch's end. The count of host synchronisations of a whole fit does not
   grow with the number of steps (64 and 128 samples give the same count),
   and the epoch's loss and accuracy equal the CPU's (with gradient clipping,
   which stays on the device as well). The loss function lets
   the device catch up first with the emulator's own wait (not counted), so
   that no wait for a loader buffer can happen: the host never runs ahead. */
#ifdef GPUDL_EMU
static gdl_tensor *drained_xent(gdl_tensor *out, gdl_tensor *y, void *user) {
    gdl_emu_drain();
    return gdl_loss_cross_entropy(out, y, user);
}
#endif

static int fit_count_syncs(int n, gdl_device dev, int64_t *syncs, gdl_epoch_stats *hist) {
    enum { H = 6 };
    static uint8_t px[128 * H * H];
    int32_t labels[128];
    int64_t sshape[3] = {1, H, H};
    gdl_dataset *ds;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts fo = gdl_fit_defaults();
    gdl_loader *l;
    gdl_module *m, *layers[4];
    gdl_optimizer *opt;
    int i, rc;
    int64_t before;
    for (i = 0; i < n * H * H; i++) px[i] = (uint8_t)((i * 29 + i / 11) & 255);
    for (i = 0; i < n; i++) labels[i] = (i * 3 + i / 7) % 10;
    if (!(ds = gdl_dataset_from_arrays(px, GDL_U8, 3, sshape, labels, n, 10))) return -1;
    lo.batch_size = 8;
    lo.shuffle = 1;
    lo.seed = 2;
    lo.transform.normalize = 1;
    lo.transform.mean[0] = 0.5;
    lo.transform.std[0] = 0.25;
    lo.device = dev;
    lo.pin_memory = dev.type == GDL_DEVICE_CUDA;
    gdl_manual_seed(6);
    layers[0] = gdl_nn_flatten(1);
    layers[1] = gdl_nn_linear(H * H, 16, 1);
    layers[2] = gdl_nn_relu();
    layers[3] = gdl_nn_linear(16, 10, 1);
    m = gdl_nn_sequential(4, layers);
    opt = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 0);
    if (!(l = gdl_loader_new(ds, &lo)) || !m || gdl_module_to(m, dev) < 0 || !opt ||
        gdl_optim_add_module(opt, m, 0) < 0)
        return -1;
    fo.epochs = 2;
    fo.verbose = 0;
    fo.clip_grad_norm = 0.5; /* clipped on the device too */
    /* eager steps: the loss below lets the device catch up at each step, so a wait counted is the step's
       own; replayed graphs do not call the loss, the host runs ahead and the loader's two buffers then make
       it wait for the device (back-pressure, not a step's synchronisation) */
    fo.cuda_graph = 0;
#ifdef GPUDL_EMU
    if (dev.type == GDL_DEVICE_CUDA) fo.loss = drained_xent;
#endif
    before = gdl_sync_count();
    rc = gdl_fit(m, l, opt, &fo, hist);
    *syncs = gdl_sync_count() - before;
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_loader_free(l);
    gdl_dataset_free(ds);
    gdl_arena_reset();
    return rc;
}

TEST fit_steps_without_host_sync(void) {
#ifndef GPUDL_EMU
    SKIPm("the device's own wait (gdl_emu_drain) needs the emulator");
#else
    gdl_epoch_stats hc[2], hg[2];
    int64_t sc, sg[2];
    int k, e;
    for (k = 0; k < 2; k++) {
        int n = 64 * (k + 1);
        if (fit_count_syncs(n, gdl_cpu(), &sc, hc) < 0 || fit_count_syncs(n, GPU, &sg[k], hg) < 0)
            FAILf("%d samples: %s", n, gdl_last_error());
        for (e = 0; e < 2; e++)
            if (fabs(hc[e].loss - hg[e].loss) > 1e-5 || hc[e].accuracy != hg[e].accuracy)
                FAILf("%d samples, epoch %d: CPU loss %.7f acc %.4f, GPU loss %.7f acc %.4f", n, e + 1, hc[e].loss,
                      hc[e].accuracy, hg[e].loss, hg[e].accuracy);
    }
    if (sg[0] != sg[1])
        FAILf("a fit of 16 steps made %lld host synchronisations, one of 32 steps %lld: steps synchronise",
              (long long)sg[0], (long long)sg[1]);
    PASS();
#endif
}

TEST two_devices(void) {
    toy a, b;
    int s;
    int64_t sh[1] = {1000};
    gdl_tensor *x, *x1, *x0, *back;
    /* training on cuda:1 */
    toy_make(&a, 0);
    toy_make(&b, 0);
    ASSERT_EQ(0, toy_to(&b, gdl_cuda(1)));
    for (s = 0; s < 3; s++) {
        double la, lb;
        gdl_arena_reset();
        la = toy_step(&a, 0);
        lb = toy_step(&b, 0);
        if (!(fabs(la - lb) <= 1e-5 * (fabs(la) > 1 ? fabs(la) : 1)))
            FAILf("cuda:1 step %d: CPU loss %.7f, GPU loss %.7f (%s)", s, la, lb, gdl_last_error());
    }
    /* device to device, both ways, then mixing them is an error */
    gdl_manual_seed(8);
    x = gdl_randn(1, sh, gdl_cpu());
    ASSERT_NOT_NULL(x1 = gdl_to(x, gdl_cuda(1)));
    ASSERT_NOT_NULL(x0 = gdl_to(x1, gdl_cuda(0)));
    ASSERT_NOT_NULL(back = gdl_to(x0, gdl_cpu()));
    ASSERT(memcmp(x->data, back->data, sizeof(float) * 1000) == 0);
    ASSERT_EQ(0, gdl_mul_scalar_(x1, 2.0));
    ASSERT_EQ(0, gdl_copy_(x0, x1));
    ASSERT_EQ(0, gdl_mul_scalar_(x, 2.0));
    ASSERT(same_bytes(x, x0));
    gdl_arena_reset();
    ASSERT_NULL(gdl_add(x0, x1));
    ASSERT_CONTAINS(gdl_last_error(), "cuda:1");
    gdl_free(x); gdl_free(x0); gdl_free(x1); gdl_free(back);
    toy_free(&a);
    toy_free(&b);
    gdl_arena_reset();
    PASS();
}

#ifndef GPUDL_NO_THREADS
typedef struct dev_job {
    int dev, rounds;
    int ok;
    char err[256];
    toy a, b; /* job_train: the CPU and device copies, left for the main thread */
} dev_job;

static int steps_agree(toy *a, toy *b, int n, char *err, size_t len, const char *who) {
    int s;
    for (s = 0; s < n; s++) {
        double la, lb;
        gdl_arena_reset();
        la = toy_step(a, 0);
        lb = toy_step(b, 0);
        if (!(fabs(la - lb) <= 1e-5 * (fabs(la) > 1 ? fabs(la) : 1))) {
            snprintf(err, len, "%s step %d: CPU %.7f GPU %.7f (%.120s)", who, s, la, lb, gdl_last_error());
            return 0;
        }
    }
    return 1;
}

/* The op layer (tape, arenas) is single-threaded, so a thread running a
   training step must run alone; the device it uses is its own. */
static void *job_train(void *arg) {
    dev_job *j = (dev_job *)arg;
    j->ok = 1;
    toy_make(&j->a, 0);
    toy_make(&j->b, 0);
    if (toy_to(&j->b, gdl_cuda(j->dev)) < 0) {
        j->ok = 0;
        snprintf(j->err, sizeof j->err, "%.200s", gdl_last_error());
    }
    if (j->ok) j->ok = steps_agree(&j->a, &j->b, 2, j->err, sizeof j->err, "in the thread");
    gdl_thread_cleanup(); /* this thread's arenas are its own: given back before it ends */
    return NULL;
}

/* Persistent tensors, in-place ops and copies touch no arena: two threads
   run them at the same time, each on its own device. */
static void *job_concurrent(void *arg) {
    dev_job *j = (dev_job *)arg;
    int64_t sh[1] = {4099};
    float *h = (float *)malloc(sizeof(float) * 4099);
    int r, i;
    j->ok = h != NULL;
    for (r = 0; r < j->rounds && j->ok; r++) {
        gdl_tensor *t = gdl_full(1, sh, 1.0 + j->dev, GDL_F32, gdl_cuda(j->dev));
        if (!t || gdl_mul_scalar_(t, 3.0) < 0 || gdl_copy_to_host(t, h, sizeof(float) * 4099) < 0) {
            j->ok = 0;
            snprintf(j->err, sizeof j->err, "cuda:%d round %d: %.160s", j->dev, r, gdl_last_error());
        }
        for (i = 0; i < 4099 && j->ok; i++)
            if (h[i] != 3.0f * (float)(1 + j->dev)) {
                j->ok = 0;
                snprintf(j->err, sizeof j->err, "cuda:%d round %d element %d: %g", j->dev, r, i, (double)h[i]);
            }
        gdl_free(t);
    }
    free(h);
    return NULL;
}
#endif

/* CUDA's current device belongs to the host thread: a thread that starts
   using cuda:1 after another thread did must still get cuda:1 (memory
   allocated for a cuda:1 tensor on device 0 fails later, when a thread that
   really is on device 1 launches a kernel on it). */
TEST host_threads_own_devices(void) {
#ifdef GPUDL_NO_THREADS
    SKIPm("built with GPUDL_NO_THREADS");
#else
    dev_job j[2];
    pthread_t th[2];
    int64_t sh[1] = {7};
    gdl_tensor *t;
    int i;
    /* this thread uses cuda:1 last, then fresh threads use cuda:1 and cuda:0 in turn */
    ASSERT_NOT_NULL(t = gdl_ones(1, sh, GDL_F32, gdl_cuda(1)));
    ASSERT_EQ(0, gdl_mul_scalar_(t, 2.0));
    memset(j, 0, sizeof j);
    for (i = 0; i < 2; i++) {
        j[i].dev = 1 - i;
        ASSERT_EQ(0, pthread_create(&th[i], NULL, job_train, &j[i]));
        ASSERT_EQ(0, pthread_join(th[i], NULL));
        if (!j[i].ok) FAILf("thread on cuda:%d: %s", j[i].dev, j[i].err);
    }
    for (i = 0; i < 2; i++) { /* the main thread goes on with what the threads made */
        char err[256];
        if (!steps_agree(&j[i].a, &j[i].b, 1, err, sizeof err, "main thread"))
            FAILf("tensors made on cuda:%d by another thread: %s", j[i].dev, err);
        toy_free(&j[i].a);
        toy_free(&j[i].b);
    }
    gdl_free(t);
    /* both at once */
    for (i = 0; i < 2; i++) {
        j[i].dev = i;
        j[i].rounds = 20;
        ASSERT_EQ(0, pthread_create(&th[i], NULL, job_concurrent, &j[i]));
    }
    for (i = 0; i < 2; i++) ASSERT_EQ(0, pthread_join(th[i], NULL));
    for (i = 0; i < 2; i++)
        if (!j[i].ok) FAILf("concurrent thread on cuda:%d: %s", j[i].dev, j[i].err);
    PASS();
#endif
}

/* ---- injected failures (the emulator only) ---- */

TEST injected_alloc_and_launch_failures(void) {
#ifndef GPUDL_EMU
    SKIPm("fault injection needs the emulator (GPUDL_EMU)");
#else
    toy t, ref;
    int s, i;
    double lt, lr;
    float before[10], after[10];
    toy_make(&t, 0);
    toy_make(&ref, 0);
    ASSERT_EQ(0, toy_to(&t, GPU));
    for (s = 0; s < 2; s++) {
        gdl_arena_reset();
        toy_step(&t, 0);
        toy_step(&ref, 0);
    }
    /* a failed launch: the op reports it, nothing changes, the next step works */
    ASSERT_EQ(0, gdl_copy_to_host(t.p[3], before, sizeof before));
    gdl_arena_reset();
    gdl_emu_fail_launch(1);
    ASSERT(isnan(toy_step(&t, 0)));
    ASSERT(strlen(gdl_last_error()) > 0);
    ASSERT_EQ(0, gdl_copy_to_host(t.p[3], after, sizeof after));
    ASSERT(memcmp(before, after, sizeof before) == 0);
    for (s = 0; s < 2; s++) {
        gdl_arena_reset();
        lt = toy_step(&t, 0);
        lr = toy_step(&ref, 0);
        if (!(fabs(lt - lr) <= 1e-5 * (fabs(lr) > 1 ? fabs(lr) : 1)))
            FAILf("after a failed launch, step %d: CPU %.7f GPU %.7f (%s)", s, lr, lt, gdl_last_error());
    }
    /* a failed cudaMalloc with a block cached: the allocator gives the cache
       back to the driver and retries, so the request succeeds */
    gdl_cuda_release_cache();
    {
        int64_t s1[1] = {100000}, s2[1] = {200000};
        size_t res0, res1;
        gdl_tensor *x = gdl_zeros(1, s1, GDL_F32, GPU), *y;
        ASSERT_NOT_NULL(x);
        gdl_free(x); /* 400000 bytes cached; the next request is too big for it */
        gdl_cuda_memory_stats(NULL, NULL, &res0);
        gdl_emu_fail_alloc(1);
        y = gdl_full(1, s2, 3.0, GDL_F32, GPU);
        if (!y) FAILf("the allocator did not recover from one failed cudaMalloc: %s", gdl_last_error());
        gdl_cuda_memory_stats(NULL, NULL, &res1);
        ASSERT_EQ((long long)(res0 - 400384 + 800256), (long long)res1); /* the cache went back, rounded sizes */
        ASSERT_IN_RANGE(600000.0, gdl_item(gdl_sum(y)), 0.5);
        gdl_free(y);
    }
    gdl_arena_reset();
    lt = toy_step(&t, 0);
    lr = toy_step(&ref, 0);
    if (!(fabs(lt - lr) <= 1e-5 * (fabs(lr) > 1 ? fabs(lr) : 1)))
        FAILf("after a recovered allocation failure: CPU %.7f GPU %.7f (%s)", lr, lt, gdl_last_error());
    for (i = 0; i < t.np; i++) ASSERT(rel_err(ref.p[i], t.p[i]) < 1e-5);
    toy_free(&t);
    toy_free(&ref);
    gdl_arena_reset();
    PASS();
#endif
}

/* Every kernel, cuBLAS call, copy and memset goes to the device's own
   non-blocking compute stream, never to the legacy default stream (which
   cannot be captured into a graph and serialises against every stream).
   Run last, this also covers everything the suites before it did: every op,
   the optimizers, training, the loader, two devices and two host threads. */
TEST compute_stream_only(void) {
#ifndef GPUDL_EMU
    SKIPm("counting legacy-stream work needs the emulator (GPUDL_EMU)");
#else
    toy t;
    int s, d, n = gdl_cuda_device_count();
    for (d = 0; d < n && d < 2; d++) {
        toy_make(&t, 1);
        ASSERT_EQ(0, toy_to(&t, gdl_cuda(d)));
        for (s = 0; s < 2; s++) {
            gdl_arena_reset();
            ASSERT(!isnan(toy_step(&t, 1)));
        }
        ASSERT(isfinite(gdl_item(gdl_sum(t.p[0])))); /* a copy to the host */
        toy_free(&t);
        gdl_arena_reset();
    }
    if (gdl_emu_count("legacy") != 0)
        FAILf("%ld operations went to the legacy default stream", gdl_emu_count("legacy"));
    PASS();
#endif
}

/* ---- CUDA graphs: a captured step replayed (gdl_graph_*) ---- */

typedef struct graph_ctx {
    toy *t;
    int cnn;
    gdl_optimizer *opt; /* NULL: plain SGD through gdl_sgd_update_ */
    int misuse;         /* 1: reads the loss, 2: makes a persistent tensor, 3: dropout, 4: sets lr */
    gdl_tensor *loss;
} graph_ctx;

/* one training step on the toy's fixed input tensors, with no host read */
static int graph_step(void *c) {
    graph_ctx *g = (graph_ctx *)c;
    toy *t = g->t;
    gdl_tensor *z;
    int i;
    if (g->opt ? gdl_zero_grad(g->opt) < 0 : 0) return -1;
    for (i = 0; !g->opt && i < t->np; i++)
        if (gdl_zero_grad_tensor(t->p[i]) < 0) return -1;
    z = toy_forward(t, g->cnn);
    if (g->misuse == 3 && gdl_graph_is_capturing()) z = gdl_dropout(z, 0.5, 1);
    g->loss = gdl_cross_entropy(z, t->y);
    if (!g->loss || gdl_backward(g->loss) < 0) return -1;
    if (g->misuse == 1 && gdl_graph_is_capturing() && isnan(gdl_item(g->loss))) return -1;
    if (g->misuse == 4 && gdl_graph_is_capturing() && gdl_optim_set_lr(g->opt, 0, 1e-4) < 0) return -1;
    if (g->misuse == 2 && gdl_graph_is_capturing()) {
        gdl_tensor *keep = gdl_clone(g->loss);
        if (!keep) return -1;
        gdl_free(keep);
    }
    if (g->opt) return gdl_step(g->opt);
    for (i = 0; i < t->np; i++)
        if (gdl_sgd_update_(t->p[i], 0.1) < 0) return -1;
    return 0;
}

#define GRAPH_STEPS 50

/* `steps` batches on dev, eagerly or through a graph (captured on batch 0,
   replayed for the rest), the MLP with Adam or the CNN with SGD (momentum,
   nesterov, weight decay); halfway the learning rate drops to a third (a
   scheduler's work, which a replay must see). The parameters, the last loss. */
static int graph_run(int cnn, gdl_device dev, int use_graph, int steps, float *params, int64_t *np, float *loss) {
    toy t;
    graph_ctx c;
    gdl_tensor *xs[GRAPH_STEPS], *ys[GRAPH_STEPS];
    gdl_graph *g = NULL;
    int s, i, rc = -1;
    int64_t off = 0;
    toy_make(&t, cnn);
    memset(&c, 0, sizeof c);
    c.t = &t;
    c.cnn = cnn;
    gdl_manual_seed(77);
    for (s = 0; s < steps; s++) { /* the batches, made on the host in the same order either way */
        int32_t lab[TRAIN_B];
        for (i = 0; i < TRAIN_B; i++) lab[i] = (int32_t)(gdl_rng_next_u64() % 10);
        xs[s] = gdl_rand(t.x->ndim, t.x->shape, gdl_cpu());
        ys[s] = gdl_from_array(lab, 1, t.y->shape, GDL_I32, gdl_cpu());
    }
    if (toy_to(&t, dev) < 0) goto out;
    c.opt = cnn ? gdl_sgd_new(0.05, 0.9, 0, 1e-3, 1) : gdl_adam_new(3e-3, 0.9, 0.999, 1e-8, 0);
    if (!c.opt || gdl_optim_add_params(c.opt, t.p, t.np, -1, -1) < 0) goto out;
    for (s = 0; s < steps; s++) {
        if (gdl_copy_(t.x, xs[s]) < 0 || gdl_copy_(t.y, ys[s]) < 0) goto out;
        if (s == steps / 2 && gdl_optim_set_lr(c.opt, 0, cnn ? 0.05 / 3 : 1e-3) < 0) goto out;
        if (use_graph && s == 0) {
            if (!(g = gdl_graph_capture(dev, graph_step, &c))) goto out;
        } else if (use_graph) {
            if (gdl_graph_replay(g) < 0) goto out;
        } else {
            gdl_arena_reset();
            if (graph_step(&c) < 0) goto out;
        }
    }
    *loss = (float)gdl_item(c.loss);
    for (i = 0; i < t.np; i++) {
        if (gdl_copy_to_host(t.p[i], params + off, sizeof(float) * (size_t)t.p[i]->numel) < 0) goto out;
        off += t.p[i]->numel;
    }
    *np = off;
    rc = 0;
out:
    gdl_graph_free(g);
    gdl_optim_free(c.opt);
    for (s = 0; s < steps; s++) {
        gdl_free(xs[s]);
        gdl_free(ys[s]);
    }
    toy_free(&t);
    gdl_arena_reset();
    return rc;
}

/* 50 replayed steps equal 50 eager steps bit for bit (MLP, and the CNN for
   fewer steps), on the GPU and on the CPU (where a replay calls the step) */
TEST graph_replay_equals_eager(void) {
    static float a[20000], b[20000];
    int cnn, d;
    for (d = 0; d < 2; d++)
        for (cnn = 0; cnn < 2; cnn++) {
            gdl_device dev = d ? GPU : gdl_cpu();
            int steps = cnn ? 12 : GRAPH_STEPS;
            int64_t na = 0, nb = 0;
            long graphs0;
            float la, lb;
            if (d && !gdl_cuda_is_available()) SKIPm("no GPU"); /* the CPU half ran */
            ASSERT_EQ(0, graph_run(cnn, dev, 0, steps, a, &na, &la));
#ifdef GPUDL_EMU
            graphs0 = gdl_emu_count("graph");
#else
            graphs0 = 0;
#endif
            if (graph_run(cnn, dev, 1, steps, b, &nb, &lb) < 0) FAILf("%s: %s", gdl_device_str(dev), gdl_last_error());
#ifdef GPUDL_EMU
            if (d && gdl_emu_count("graph") - graphs0 != steps - 1)
                FAILf("%ld graph launches for %d replays", gdl_emu_count("graph") - graphs0, steps - 1);
#else
            (void)graphs0;
#endif
            ASSERT_EQ(na, nb);
            ASSERT(na <= 20000);
            if (memcmp(a, b, sizeof(float) * (size_t)na) || la != lb)
                FAILf("%s %s: %d replayed steps differ from eager ones (loss %.9g vs %.9g)", gdl_device_str(dev),
                      cnn ? "CNN" : "MLP", steps, lb, la);
        }
    PASS();
}

/* what cannot be captured fails with an error naming it, the device's memory
   is as after the warm-up step, and the device goes on working */
TEST graph_capture_errors(void) {
    static const char *const want[4] = {NULL, "gdl_item", "allocates device memory", "dropout"};
    int misuse;
    for (misuse = 1; misuse <= 3; misuse++) {
        toy t, ref;
        graph_ctx c, cr;
        gdl_graph *g;
        float p[64 * 196], q[64 * 196];
        toy_make(&t, 0);
        toy_make(&ref, 0);
        ASSERT_EQ(0, toy_to(&t, GPU));
        ASSERT_EQ(0, toy_to(&ref, GPU));
        memset(&c, 0, sizeof c);
        c.t = &t;
        c.misuse = misuse;
        cr = c;
        cr.t = &ref;
        cr.misuse = 0;
        g = gdl_graph_capture(GPU, graph_step, &c);
        if (g) FAILf("misuse %d was captured", misuse);
        if (!strstr(gdl_last_error(), want[misuse]) || !strstr(gdl_last_error(), "gdl_graph_capture"))
            FAILf("misuse %d: the error does not name '%s': %s", misuse, want[misuse], gdl_last_error());
        ASSERT_EQ(0, gdl_graph_is_capturing());
        /* the warm-up was the only step that ran: as one eager step */
        gdl_arena_reset();
        ASSERT_EQ(0, graph_step(&cr));
        ASSERT_EQ(0, gdl_copy_to_host(t.p[0], p, sizeof p));
        ASSERT_EQ(0, gdl_copy_to_host(ref.p[0], q, sizeof q));
        if (memcmp(p, q, sizeof p)) FAILf("misuse %d: the failed capture changed the weights", misuse);
        /* and the device still trains */
        gdl_arena_reset();
        ASSERT_EQ(0, graph_step(&cr));
        ASSERT(isfinite(gdl_item(cr.loss)));
        toy_free(&t);
        toy_free(&ref);
        gdl_arena_reset();
    }
    ASSERT(gdl_graph_capture(GPU, NULL, NULL) == NULL);
    ASSERT(strstr(gdl_last_error(), "step") != NULL);
    ASSERT_EQ(-1, gdl_graph_replay(NULL));
    gdl_graph_free(NULL);
    PASS();
}

/* the optimizer's step counts are the device's: a read of them (a
   checkpoint's gdl_optim_state) between replays does not send stale counts
   back at the next eager step; an lr set inside a capture is refused and
   reaches the device at the next eager step */
static int32_t graph_adam_step_count(gdl_optimizer *opt) {
    const char *names[32];
    gdl_tensor *ts[32];
    int n = gdl_optim_state(opt, names, ts, 32), i;
    for (i = 0; i < n && i < 32; i++)
        if (strstr(names[i], ".step")) return *(const int32_t *)ts[i]->data;
    return -1;
}

TEST graph_step_counts_and_lr(void) {
    toy t, ref;
    graph_ctx c, cr;
    gdl_graph *g;
    float p[64 * 196], q[64 * 196];
    int i;
    toy_make(&t, 0);
    toy_make(&ref, 0);
    ASSERT_EQ(0, toy_to(&t, GPU));
    ASSERT_EQ(0, toy_to(&ref, GPU));
    memset(&c, 0, sizeof c);
    c.t = &t;
    c.opt = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 0);
    ASSERT(c.opt && gdl_optim_add_params(c.opt, t.p, t.np, -1, -1) == 0);
    cr = c;
    cr.t = &ref;
    cr.opt = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 0);
    ASSERT(cr.opt && gdl_optim_add_params(cr.opt, ref.p, ref.np, -1, -1) == 0);
    ASSERT((g = gdl_graph_capture(GPU, graph_step, &c)) != NULL); /* step 1 (the warm-up) */
    for (i = 0; i < 3; i++) ASSERT_EQ(0, gdl_graph_replay(g));
    ASSERT_EQ(4, graph_adam_step_count(c.opt));
    for (i = 0; i < 3; i++) ASSERT_EQ(0, gdl_graph_replay(g));
    gdl_arena_reset();
    ASSERT_EQ(0, graph_step(&c)); /* eager: step 8 */
    ASSERT_EQ(8, graph_adam_step_count(c.opt));
    for (i = 0; i < 8; i++) { /* the same 8 steps eagerly */
        gdl_arena_reset();
        ASSERT_EQ(0, graph_step(&cr));
    }
    ASSERT_EQ(0, gdl_copy_to_host(t.p[0], p, sizeof p));
    ASSERT_EQ(0, gdl_copy_to_host(ref.p[0], q, sizeof q));
    ASSERTm("replays around a state read equal eager steps", memcmp(p, q, sizeof p) == 0);
    gdl_graph_free(g);
    /* set_lr inside a capture: refused, then sent by the next eager step */
    c.misuse = 4;
    ASSERT(gdl_graph_capture(GPU, graph_step, &c) == NULL); /* its warm-up is step 9 */
    ASSERT_CONTAINS(gdl_last_error(), "inside a CUDA graph capture");
    c.misuse = 0;
    cr.misuse = 0;
    gdl_arena_reset();
    ASSERT_EQ(0, graph_step(&cr)); /* step 9 of the reference */
    ASSERT_EQ(0, gdl_optim_set_lr(cr.opt, 0, 1e-4));
    gdl_arena_reset();
    ASSERT_EQ(0, graph_step(&c));
    gdl_arena_reset();
    ASSERT_EQ(0, graph_step(&cr));
    ASSERT_EQ(0, gdl_copy_to_host(t.p[0], p, sizeof p));
    ASSERT_EQ(0, gdl_copy_to_host(ref.p[0], q, sizeof q));
    ASSERTm("the lr set in the failed capture is the one the next step used", memcmp(p, q, sizeof p) == 0);
    gdl_optim_free(c.opt);
    gdl_optim_free(cr.opt);
    toy_free(&t);
    toy_free(&ref);
    gdl_arena_reset();
    PASS();
}

/* Two graphs whose steps need different amounts of the GEMM's fold
   workspace (a conv's weight gradient, summed over the batch): recording
   the larger grows the workspace, and the first graph, which still writes
   into the smaller one, must not be given memory that is handed out again
   (16 new tensors of zeros stay zeros after its replay, and its result is
   the eager step's). */
typedef struct fold_step {
    gdl_tensor *x, *w;
} fold_step;
static int fold_graph_step(void *c) {
    fold_step *s = (fold_step *)c;
    gdl_tensor *y = gdl_conv2d(s->x, s->w, NULL, 1, 0, 1, 1), *l = y ? gdl_sum(y) : NULL;
    if (s->w->grad && gdl_zero_grad_tensor(s->w) < 0) return -1;
    return l && gdl_backward(l) == 0 ? 0 : -1;
}
TEST graph_outlives_workspace_growth(void) {
    int64_t xs[4] = {4, 1, 8, 8}, wa[4] = {2, 1, 3, 3}, wb[4] = {8, 1, 3, 3}, n1 = 72;
    fold_step a, b;
    gdl_graph *ga, *gb;
    gdl_tensor *t[16];
    float h[72], want[18], got[18];
    int i, j;
    gdl_cuda_release_cache(); /* the workspace starts small: from this test's first conv */
    gdl_manual_seed(77);
    ASSERT_NOT_NULL(a.x = gdl_randn(4, xs, GPU));
    ASSERT_NOT_NULL(a.w = gdl_randn(4, wa, GPU));
    ASSERT_NOT_NULL(b.x = gdl_randn(4, xs, GPU));
    ASSERT_NOT_NULL(b.w = gdl_randn(4, wb, GPU));
    ASSERT_EQ(0, gdl_set_requires_grad(a.w, 1));
    ASSERT_EQ(0, gdl_set_requires_grad(b.w, 1));
    ASSERT_NOT_NULL(ga = gdl_graph_capture(GPU, fold_graph_step, &a));
    ASSERT_EQ(0, gdl_copy_to_host(a.w->grad, want, sizeof want)); /* the warm-up's: eager */
    ASSERT_NOT_NULL(gb = gdl_graph_capture(GPU, fold_graph_step, &b));
    for (i = 0; i < 16; i++) ASSERT_NOT_NULL(t[i] = gdl_zeros(1, &n1, GDL_F32, GPU));
    ASSERT_EQ(0, gdl_graph_replay(ga));
    for (i = 0; i < 16; i++) {
        ASSERT_EQ(0, gdl_copy_to_host(t[i], h, sizeof h));
        for (j = 0; j < 72; j++)
            if (h[j] != 0) FAILf("tensor %d of zeros holds %g at %d after the first graph's replay", i, (double)h[j], j);
    }
    ASSERT_EQ(0, gdl_copy_to_host(a.w->grad, got, sizeof got));
    ASSERTm("the replay's weight gradient is the eager one", memcmp(want, got, sizeof want) == 0);
    gdl_graph_free(ga);
    gdl_graph_free(gb);
    for (i = 0; i < 16; i++) gdl_free(t[i]);
    gdl_free(a.x), gdl_free(a.w), gdl_free(b.x), gdl_free(b.w);
    gdl_arena_reset();
    PASS();
}

/* A graph that clips one set of gradients keeps its clipping table while
   another set of the same sizes is clipped eagerly (the backend keeps a
   table per set): the replay clips its own tensors, not the other set's. */
typedef struct clip_step {
    gdl_tensor *src[2], *p[2]; /* the step clips p's gradients, copied from src */
} clip_step;
static int clip_graph_step(void *c) {
    clip_step *s = (clip_step *)c;
    if (gdl_copy_(s->p[0]->grad, s->src[0]) < 0 || gdl_copy_(s->p[1]->grad, s->src[1]) < 0) return -1;
    return gdl_clip_grad_norm_nosync(s->p, 2, 0.5);
}
static gdl_tensor *clip_param(int64_t n) { /* a parameter with a gradient of random values */
    gdl_tensor *p = gdl_zeros(1, &n, GDL_F32, GPU);
    if (!p || gdl_set_requires_grad(p, 1) < 0 || !(p->grad = gdl_randn(1, &n, GPU))) return NULL;
    return p;
}
TEST graph_keeps_its_clip_table(void) {
    int64_t n = 300;
    clip_step a;
    gdl_tensor *other[2];
    gdl_graph *g;
    float want[2][300], got[300], o0[300], src0[300];
    int k;
    gdl_manual_seed(78);
    for (k = 0; k < 2; k++) {
        ASSERT_NOT_NULL(a.src[k] = gdl_randn(1, &n, GPU));
        ASSERT_NOT_NULL(a.p[k] = clip_param(n));
        ASSERT_NOT_NULL(other[k] = clip_param(n));
    }
    ASSERT_NOT_NULL(g = gdl_graph_capture(GPU, clip_graph_step, &a));
    for (k = 0; k < 2; k++) ASSERT_EQ(0, gdl_copy_to_host(a.p[k]->grad, want[k], sizeof want[k])); /* the warm-up's */
    ASSERT_EQ(0, gdl_copy_to_host(a.src[0], src0, sizeof src0));
    ASSERTm("the step clips", memcmp(want[0], src0, sizeof src0) != 0);
    ASSERT_EQ(0, gdl_clip_grad_norm_nosync(other, 2, 0.25)); /* another set, eagerly */
    ASSERT_EQ(0, gdl_copy_to_host(other[0]->grad, o0, sizeof o0));
    for (k = 0; k < 2; k++) ASSERT_EQ(0, gdl_fill_(a.p[k]->grad, 7.0));
    ASSERT_EQ(0, gdl_graph_replay(g));
    for (k = 0; k < 2; k++) {
        ASSERT_EQ(0, gdl_copy_to_host(a.p[k]->grad, got, sizeof got));
        ASSERTm("the replay clipped its own gradients as the eager step did", memcmp(got, want[k], sizeof got) == 0);
    }
    ASSERT_EQ(0, gdl_copy_to_host(other[0]->grad, got, sizeof got));
    ASSERTm("the replay left the other set alone", memcmp(got, o0, sizeof got) == 0);
    gdl_graph_free(g);
    for (k = 0; k < 2; k++) gdl_free(a.src[k]), gdl_free(a.p[k]), gdl_free(other[k]);
    gdl_arena_reset();
    PASS();
}

/* ---- fused Linear/Conv2d + activation (tests/fusion_cases.h; its cases are registered in SUITE(graphs)) ---- */

/* Every way the fused linear can miss cuBLASLt's epilogue: odd sizes (N not a multiple of 8: no aux ld for
   GELU's saved input), views at odd offsets, erf GELU, and, on the emulator, its heuristic refusing the call
   (as the real library may: gdl_emu_lt_no_algo). Views: 1, x, w and the bias each one row (one float) in, so
   the misaligned bias makes the backend fall back before cuBLASLt is asked; 2, x and w one row in (28 bytes
   past an aligned address: K is 7, so promised MIN_ALIGNMENT 4) with an aligned bias, so the call reaches
   the heuristic, which per the emulator's documented rules (cuda_emu.h: a matrix alignment at least its
   element size) takes it. Each way must compute what the CPU does, and what the unfused GPU ops do (bit for
   bit under the emulator's plain GEMM, which both paths share). */
static gdl_tensor *lt_unfused(gdl_tensor *x, gdl_tensor *w, gdl_tensor *b, gdl_act act) {
    gdl_tensor *y = gdl_linear(x, w, b);
    return act == GDL_ACT_RELU ? gdl_relu(y) : gdl_gelu(y, act == GDL_ACT_GELU_TANH);
}
static enum harness_result lt_fallback_case(gdl_act act, int64_t N, int view, int refuse) {
    int64_t K = 7, M = 37, xs[2] = {M + 1, K}, ws[2] = {N + 1, K}, bs = N + 1;
    int xo = view ? 1 : 0, bo = view == 1; /* the views' first row (element) */
    gdl_tensor *x = gdl_randn(2, xs, GPU), *w = gdl_randn(2, ws, GPU), *b = gdl_randn(1, &bs, GPU);
    gdl_tensor *xv, *wv, *bv, *xc, *wc, *bc, *y, *yc, *yu;
    double e;
    /* the backend's own checks (cuda/bias_act.cu) before it asks the heuristic: erf GELU has no epilogue, the
       bias must be 16-byte aligned, GELU's aux output (w needs a gradient) an ld N divisible by 8 */
    int reaches = act != GDL_ACT_GELU && !bo && !(act == GDL_ACT_GELU_TANH && N % 8);
#ifdef GPUDL_EMU
    long refused0, cublas0, launch0;
#endif
    ASSERT(x && w && b);
    gdl_set_requires_grad(w, 1); /* the forward keeps GELU's input: cuBLASLt's aux output */
    xv = gdl_slice(x, xo, M + xo);
    wv = gdl_slice(w, xo, N + xo);
    bv = gdl_slice(b, bo, N + bo);
    ASSERT(xv && wv && bv);
    ASSERT((xc = gdl_to(xv, gdl_cpu())) && (wc = gdl_to(wv, gdl_cpu())) && (bc = gdl_to(bv, gdl_cpu())));
#ifdef GPUDL_EMU
    if (refuse) gdl_emu_lt_no_algo(1);
    refused0 = gdl_emu_count("lt_no_algo");
    cublas0 = gdl_emu_count("cublas");
    launch0 = gdl_emu_count("launch");
#else
    (void)reaches, (void)refuse; /* refusals are the emulator's (gdl_emu_lt_no_algo) */
#endif
    y = gdl_linear_act(xv, wv, bv, act);
    ASSERT(y != NULL);
#ifdef GPUDL_EMU
    gdl_emu_lt_no_algo(0);
    /* refusing: the heuristic was asked (and said no) exactly where the backend's checks let the call through;
       not refusing: never a refusal (alignment 4 is a float's), and a call that reaches it runs as one cuBLASLt
       call and no kernel (no copy of the views, no bias/activation pass) */
    if (gdl_emu_count("lt_no_algo") - refused0 != (refuse && reaches))
        FAILf("act %d, N %lld, view %d, refusing %d: %ld heuristic refusals, expected %d", (int)act, (long long)N, view,
              refuse, gdl_emu_count("lt_no_algo") - refused0, refuse && reaches);
    if (!refuse && reaches && (gdl_emu_count("cublas") - cublas0 != 1 || gdl_emu_count("launch") - launch0 != 0))
        FAILf("act %d, N %lld, view %d: %ld cuBLAS calls and %ld launches where cuBLASLt's epilogue takes it (1 and 0)",
              (int)act, (long long)N, view, gdl_emu_count("cublas") - cublas0, gdl_emu_count("launch") - launch0);
#endif
    yc = gdl_linear_act(xc, wc, bc, act);
    if (!((e = rel_err(yc, y)) < 1e-5))
        FAILf("act %d, N %lld, view %d, heuristic refusing %d: relative error %g against the CPU", (int)act,
              (long long)N, view, refuse, e);
    ASSERT((yu = gdl_to(lt_unfused(xv, wv, bv, act), gdl_cpu())) != NULL);
#ifdef GPUDL_EMU
    if (!strcmp(gdl_emu_gemm_mode(), "plain") && !same_bytes(yu, y))
        FAILf("act %d, N %lld, view %d, refusing %d: not the unfused ops' bits", (int)act, (long long)N, view, refuse);
#endif
    if (!((e = rel_err(yu, y)) < 1e-5))
        FAILf("act %d, N %lld, view %d, refusing %d: relative error %g against the unfused ops", (int)act,
              (long long)N, view, refuse, e);
    gdl_free(x), gdl_free(w), gdl_free(b);
    gdl_free(xc), gdl_free(wc), gdl_free(bc), gdl_free(yu);
    gdl_arena_reset();
    PASS();
}
TEST fusion_lt_fallbacks(void) {
    static const gdl_act acts[] = {GDL_ACT_RELU, GDL_ACT_GELU_TANH, GDL_ACT_GELU};
    static const int64_t Ns[] = {16, 19};
    int a, n, view, refuse;
    gdl_manual_seed(11);
    for (a = 0; a < 3; a++)
        for (n = 0; n < 2; n++)
            for (view = 0; view < 3; view++)
                for (refuse = 0; refuse < 2; refuse++) {
                    enum harness_result r;
#ifndef GPUDL_EMU
                    if (refuse) continue;
#endif
                    if ((r = lt_fallback_case(acts[a], Ns[n], view, refuse)) != HARNESS_PASS) return r;
                }
    PASS();
}

#ifndef _WIN32
/* POSIX, hidden by -std=c99: the notice test sends the process's stderr (fd 2, where the backend's C++ writes
   too) to a scratch file */
int dup(int fd);
int dup2(int fd, int fd2);
int close(int fd);
int fileno(FILE *f);
int setenv(const char *name, const char *value, int overwrite);
int unsetenv(const char *name);
/* fd 2 to a fresh file PATH; returns the saved fd (-1 on failure) */
static int stderr_to(const char *path) {
    FILE *f = fopen(path, "w");
    int saved;
    if (!f) return -1;
    fflush(stderr);
    saved = dup(2);
    if (saved < 0 || dup2(fileno(f), 2) < 0) saved = -1;
    fclose(f);
    return saved;
}
/* fd 2 back; what was written to PATH meanwhile (malloc'd, NUL-terminated; NULL on failure) */
static char *stderr_back(int saved, const char *path) {
    FILE *f;
    char *text = (char *)calloc(1, 65536);
    size_t n = 0;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    if (!text || !(f = fopen(path, "r"))) return text;
    n = fread(text, 1, 65535, f);
    text[n] = 0;
    fclose(f);
    return text;
}
static int count_of(const char *text, const char *what) {
    int n = 0;
    for (; text && (text = strstr(text, what)) != NULL; text++) n++;
    return n;
}
#endif

/* The fallback's notice (cuda/bias_act.cu): with GPUDL_VERBOSE=1 the first fallback in the process says why,
   with the sizes, on stderr, and no later one does; without it nothing is said. (Once per process: the case
   needs a process in which no fallback ran under GPUDL_VERBOSE, so it is skipped where that is set.) */
TEST fusion_lt_notice(void) {
#ifdef _WIN32
    SKIPm("sends stderr to a file with POSIX dup2");
#else
    const char *v = getenv("GPUDL_VERBOSE"), *path = harness_tmp("fusion_lt_notice.txt");
    int64_t xs[2] = {37, 16}, ws[2] = {24, 16}, bs = 25;
    gdl_tensor *x, *w, *b, *bmis, *bok;
    char *quiet, *said;
    int saved, ran;
    if (v && v[0] && strcmp(v, "0")) SKIPm("GPUDL_VERBOSE is set: an earlier fallback may have said it already");
    gdl_manual_seed(23);
    ASSERT((x = gdl_randn(2, xs, GPU)) && (w = gdl_randn(2, ws, GPU)) && (b = gdl_randn(1, &bs, GPU)));
    ASSERT((bmis = gdl_slice(b, 1, 25)) && (bok = gdl_slice(b, 0, 24))); /* 4 bytes past an aligned address; aligned */
    /* not verbose: a misaligned bias and erf GELU fall back without a word */
    ASSERT((saved = stderr_to(path)) >= 0);
    ran = gdl_linear_act(x, w, bmis, GDL_ACT_RELU) && gdl_linear_act(x, w, bok, GDL_ACT_GELU);
    quiet = stderr_back(saved, path);
    ASSERTm("the fused linears ran", ran);
    ASSERT(quiet != NULL);
    if (count_of(quiet, "fused linear")) FAILf("a notice without GPUDL_VERBOSE: %s", quiet);
    free(quiet);
    /* verbose: the first fallback says why; the second (another reason) and third say nothing */
    setenv("GPUDL_VERBOSE", "1", 1);
    ASSERT((saved = stderr_to(path)) >= 0);
    ran = gdl_linear_act(x, w, bmis, GDL_ACT_RELU) && gdl_linear_act(x, w, bok, GDL_ACT_GELU) &&
          gdl_linear_act(x, w, bmis, GDL_ACT_GELU_TANH);
    said = stderr_back(saved, path);
    unsetenv("GPUDL_VERBOSE");
    ASSERTm("the fused linears ran", ran);
    ASSERT(said != NULL);
    if (count_of(said, "gpudl: fused linear") != 1) FAILf("%d notices, not 1: %s", count_of(said, "gpudl: fused linear"), said);
    ASSERT_CONTAINS(said, "fused linear 37 x 24 x 16 ");
    ASSERT_CONTAINS(said, "(bias not 16-byte aligned)");
    ASSERT_CONTAINS(said, "said once per process");
    free(said);
    gdl_free(x), gdl_free(w), gdl_free(b);
    gdl_arena_reset();
    PASS();
#endif
}

/* Max pooling stores the unset gradient of an intermediate input (gdl__bw_fresh_ok): no memset before its
   backward (as many as a ReLU in its place), and the same bytes as the CPU with the pool's backward the
   first or the second to reach t: 2x2 pools of an odd-sized plane (the last row and column in no window)
   and 3x3 stride-2 padded ones (overlapping windows). The ReLU (k 2) runs first: its counts are the bar. */
TEST maxpool_unset_grad(void) {
#ifndef GPUDL_EMU
    SKIPm("needs the emulator's memset count");
#else
    int64_t s4[4] = {2, 3, 7, 5};
    int k, order, dev;
    long relu_mem[2] = {0, 0};
    for (k = 2; k >= 0; k--)
        for (order = 0; order < 2; order++) {
            gdl_tensor *x[2], *g[2];
            long mem = 0;
            ASSERT_NOT_NULL(x[0] = gdl_randn(4, s4, gdl_cpu()));
            ASSERT_NOT_NULL(x[1] = gdl_to(x[0], GPU));
            for (dev = 0; dev < 2; dev++) {
                gdl_tensor *t, *p = NULL, *u = NULL;
                gdl_set_requires_grad(x[dev], 1);
                ASSERT_NOT_NULL(t = gdl_mul_scalar(x[dev], 2));
                if (order == 0) u = gdl_mul_scalar(t, 0.25); /* later on the tape: the pool's backward is first */
                p = k == 0 ? gdl_max_pool2d(t, 2, 0, 0) : k == 1 ? gdl_max_pool2d(t, 3, 2, 1) : gdl_relu(t);
                if (order == 1) u = gdl_mul_scalar(t, 0.25);
                ASSERT(p && u);
                mem = gdl_emu_count("memset");
                ASSERT_EQ(0, gdl_backward(gdl_add(gdl_mul_scalar(gdl_sum(p), 1.5), gdl_sum(u))));
                mem = gdl_emu_count("memset") - mem;
                g[dev] = x[dev]->grad;
            }
            if (k == 2) relu_mem[order] = mem;
            else if (mem != relu_mem[order])
                FAILf("pool %d, order %d: %ld memsets in the GPU backward, a ReLU's %ld", k, order, mem, relu_mem[order]);
            ASSERT(same_bytes(g[0], g[1]));
            gdl_arena_reset();
            gdl_free(x[0]);
            gdl_free(x[1]);
        }
    PASS();
#endif
}

/* the launches the fusion saves: linear + bias + ReLU forward is one cuBLASLt call and no kernel (three
   launches unfused); erf GELU (no cuBLASLt epilogue) the GEMM and one pass; a misaligned bias (a view one
   float in) the same; backward one kernel before the GEMMs */
TEST fusion_launch_counts(void) {
#ifndef GPUDL_EMU
    SKIPm("counts cuBLAS calls on the emulator (GPUDL_EMU)");
#else
    int64_t xs[2] = {70, 33}, ws[2] = {24, 33}, bs = 25;
    gdl_tensor *x, *w, *b, *bv, *y;
    long c0, l0;
    gdl_manual_seed(5);
    x = gdl_randn(2, xs, GPU);
    w = gdl_randn(2, ws, GPU);
    b = gdl_randn(1, &bs, GPU);
    ASSERT(x && w && b);
    bv = gdl_slice(b, 1, 25); /* 4 bytes past a 256-byte boundary */
    ASSERT(bv != NULL);
    c0 = gdl_emu_count("cublas");
    l0 = gdl_emu_count("launch");
    ASSERT((y = gdl_linear_act(x, w, gdl_slice(b, 0, 24), GDL_ACT_RELU)) != NULL);
    ASSERT_EQ(1, gdl_emu_count("cublas") - c0);
    ASSERT_EQ(0, gdl_emu_count("launch") - l0);
    c0 = gdl_emu_count("cublas");
    l0 = gdl_emu_count("launch");
    ASSERT(gdl_linear_act(x, w, gdl_slice(b, 0, 24), GDL_ACT_GELU_TANH) != NULL);
    ASSERT_EQ(1, gdl_emu_count("cublas") - c0);
    ASSERT_EQ(0, gdl_emu_count("launch") - l0);
    c0 = gdl_emu_count("cublas");
    l0 = gdl_emu_count("launch");
    ASSERT(gdl_linear_act(x, w, gdl_slice(b, 0, 24), GDL_ACT_GELU) != NULL);
    ASSERT_EQ(1, gdl_emu_count("cublas") - c0);
    ASSERT_EQ(1, gdl_emu_count("launch") - l0);
    c0 = gdl_emu_count("cublas");
    l0 = gdl_emu_count("launch");
    ASSERT(gdl_linear_act(x, w, bv, GDL_ACT_RELU) != NULL);
    ASSERT_EQ(1, gdl_emu_count("cublas") - c0);
    ASSERT_EQ(1, gdl_emu_count("launch") - l0);
    c0 = gdl_emu_count("cublas");
    l0 = gdl_emu_count("launch");
    ASSERT(gdl_relu(gdl_linear(x, w, gdl_slice(b, 0, 24))) != NULL);
    ASSERT_EQ(1, gdl_emu_count("cublas") - c0);
    ASSERT_EQ(2, gdl_emu_count("launch") - l0);
    /* batch norm + ReLU: one kernel against two; its backward stores the unset gradient of an intermediate
       input as batch norm's does, with no memset first (gdl__bw_fresh_ok) */
    {
        int64_t s4[4] = {3, 4, 5, 6};
        long mem[2];
        int fused;
        for (fused = 0; fused < 2; fused++) {
            gdl_tensor *xb = gdl_randn(4, s4, GPU), *t, *o;
            ASSERT(xb != NULL);
            gdl_set_requires_grad(xb, 1);
            ASSERT((t = gdl_mul_scalar(xb, 2)) != NULL);
            l0 = gdl_emu_count("launch");
            o = fused ? gdl_batch_norm_relu(t, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5)
                      : gdl_relu(gdl_batch_norm(t, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5));
            ASSERT(o != NULL);
            ASSERT_EQ(fused ? 1 : 2, gdl_emu_count("launch") - l0);
            mem[fused] = gdl_emu_count("memset");
            ASSERT_EQ(0, gdl_backward(gdl_sum(o)));
            mem[fused] = gdl_emu_count("memset") - mem[fused];
            gdl_arena_reset();
            gdl_free(xb);
        }
        ASSERT_EQ(mem[0], mem[1]);
    }
    /* backward of a fused op whose output gradient is given: one kernel (act' + bias gradient), two GEMMs */
    {
        gdl_tensor *xg = gdl_randn(2, xs, GPU), *wg = gdl_randn(2, ws, GPU), *bg = gdl_randn(1, &ws[0], GPU), *o, *s;
        ASSERT(xg && wg && bg);
        gdl_set_requires_grad(xg, 1);
        gdl_set_requires_grad(wg, 1);
        gdl_set_requires_grad(bg, 1);
        ASSERT((o = gdl_linear_act(xg, wg, bg, GDL_ACT_GELU_TANH)) != NULL);
        ASSERT((s = gdl_sum(o)) != NULL);
        ASSERT_EQ(0, gdl_backward(s)); /* makes the leaves' gradients */
        gdl_zero_grad_tensor(xg);
        gdl_zero_grad_tensor(wg);
        gdl_zero_grad_tensor(bg);
        c0 = gdl_emu_count("cublas");
        l0 = gdl_emu_count("launch");
        ASSERT_EQ(0, gdl_backward(s));
        ASSERT_EQ(2, gdl_emu_count("cublas") - c0);
        /* the seed (fill + add), sum's backward, the intermediate's memset, act' + bias gradient */
        if (gdl_emu_count("launch") - l0 > 5) FAILf("%ld launches in the backward", gdl_emu_count("launch") - l0);
        gdl_free(xg);
        gdl_free(wg);
        gdl_free(bg);
    }
    gdl_arena_reset();
    gdl_free(x);
    gdl_free(w);
    gdl_free(b);
    PASS();
#endif
}

/* ---- GradScaler on the GPU (tests/gradscaler_cases.h) ---- */

TEST grad_scaler_matches_pytorch(void) {
    double rel;
    CHECK_CALL(gs_ref_case(GPU, &rel));
    printf("    GradScaler vs PyTorch on %s: weights within %.2g relative\n", gdl_device_str(GPU), rel);
    PASS();
}

/* captured and replayed == eager bitwise with overflows during the replays; no host wait in a step */
TEST grad_scaler_graph_equals_eager(void) {
#ifdef GPUDL_EMU
    long graphs0 = gdl_emu_count("graph");
#endif
    CHECK_CALL(gs_graph_case(GPU));
#ifdef GPUDL_EMU
    if (gdl_emu_count("graph") - graphs0 != GS_STEPS - 1)
        FAILf("%ld graph launches for %d replays", gdl_emu_count("graph") - graphs0, GS_STEPS - 1);
#endif
    PASS();
}

TEST grad_scaler_clip_checkpoint(void) {
    return gs_clip_and_checkpoint_case(GPU, harness_tmp("test_cuda_scaler.safetensors"));
}

/* the same weights on the GPU and the CPU (the same kernels' formulas) */
TEST grad_scaler_gpu_equals_cpu(void) {
    float a[GS_N1 + 9], b[GS_N1 + 9];
    int64_t sa, sb;
    int i;
    ASSERT_EQ(0, gs_run(gdl_cpu(), 0, a, &sa));
    ASSERT_EQ(0, gs_run(GPU, 0, b, &sb));
    for (i = 0; i < GS_N1 + 9; i++)
        if (!(fabs(a[i] - b[i]) <= 1e-6 * fabs(a[i]) + 1e-7)) FAILf("value %d: GPU %.9g, CPU %.9g", i, b[i], a[i]);
    PASS();
}

/* parameters on two devices with one scaler: refused, naming both devices, nothing changed */
TEST grad_scaler_two_devices_refused(void) {
    gdl_tensor *w0, *w1, *ps[2];
    gdl_optimizer *opt;
    gdl_grad_scaler *s;
    float before[3], after[3];
    w0 = gdl_ones(GDL_DIMS(3), GDL_F32, gdl_cuda(0));
    w1 = gdl_ones(GDL_DIMS(3), GDL_F32, gdl_cuda(1));
    opt = gdl_sgd_new(0.1, 0, 0, 0, 0);
    s = gdl_grad_scaler_new(NULL);
    ASSERT(w0 && w1 && opt && s);
    ps[0] = w0;
    ps[1] = w1;
    ASSERT_EQ(0, gdl_set_requires_grad(w0, 1));
    ASSERT_EQ(0, gdl_set_requires_grad(w1, 1));
    ASSERT_EQ(0, gdl_optim_add_params(opt, ps, 2, -1, -1));
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_zero_grad(opt));
    ASSERT_EQ(0, gdl_backward(gdl_grad_scaler_scale(s, gdl_sum(gdl_mul(w0, w0)))));
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(w1, w1))));
    ASSERT_NULL(gdl_grad_scaler_scale(s, gdl_sum(w1)));
    ASSERT_CONTAINS(gdl_last_error(), "not supported");
    ASSERT_EQ(0, gdl_copy_to_host(w0->grad, before, sizeof before));
    ASSERT_EQ(-1, gdl_grad_scaler_step(s, opt));
    ASSERT_CONTAINS(gdl_last_error(), "cuda:1");
    ASSERT_CONTAINS(gdl_last_error(), "several devices is not supported");
    ASSERT_EQ(0, gdl_copy_to_host(w0->grad, after, sizeof after));
    ASSERT_EQ(0, memcmp(before, after, sizeof before));
    gdl_grad_scaler_free(s);
    gdl_optim_free(opt);
    gdl_free(w0);
    gdl_free(w1);
    gdl_arena_reset();
    PASS();
}

SUITE(graphs) {
    RUN_TEST(graph_replay_equals_eager); /* the CPU half runs without a GPU */
    RUN_GPU(graph_capture_errors);
    RUN_GPU(graph_step_counts_and_lr);
    RUN_GPU(graph_outlives_workspace_growth);
    RUN_GPU(graph_keeps_its_clip_table);
    RUN_GPU_ON("fusion_train_bitwise", fz_train_bitwise_case);
    RUN_GPU_ON("fusion_when", fz_when_fused_case);
    RUN_GPU_ON("fusion_errors", fz_errors_case);
    RUN_GPU_ON("fusion_bn_act_bitwise", fz_bn_act_bitwise_case);
    RUN_GPU_ON("fusion_bn_gelu_long", fz_bn_gelu_long_case);
    RUN_GPU(fusion_launch_counts);
    RUN_GPU(maxpool_unset_grad);
    RUN_GPU(fusion_lt_fallbacks);
    RUN_GPU(fusion_lt_notice);
    RUN_GPU(grad_scaler_matches_pytorch);
    RUN_GPU(grad_scaler_graph_equals_eager);
    RUN_GPU(grad_scaler_clip_checkpoint);
    RUN_GPU_ON("grad_scaler_errors", gs_errors_case);
    RUN_GPU_ON("grad_scaler_stale_slot", gs_stale_slot_case);
    RUN_GPU(grad_scaler_gpu_equals_cpu);
    RUN_GPU2(grad_scaler_two_devices_refused);
}

/* ---- all-or-nothing training steps under injected faults (the emulator only) ---- */

#ifdef GPUDL_EMU
/* the MLP of the training tests on the GPU with an optimizer over its 4 parameters */
typedef struct rig {
    toy t;
    gdl_optimizer *opt;
} rig;

static int rig_make(rig *r, const opt_kind *k) {
    toy_make(&r->t, 0);
    if (toy_to(&r->t, GPU) < 0 || !(r->opt = make_opt(k))) return -1;
    return gdl_optim_add_params(r->opt, r->t.p, r->t.np, -1, -1) < 0 ? -1 : 0;
}

static void rig_free(rig *r) {
    gdl_optim_free(r->opt);
    toy_free(&r->t);
}

/* zero_grad, forward, backward; -1 at the first failure */
static int rig_grads(rig *r) {
    gdl_tensor *loss;
    gdl_arena_reset();
    if (gdl_zero_grad(r->opt) < 0) return -1;
    loss = gdl_cross_entropy(toy_forward(&r->t, 0), r->t.y);
    return loss ? gdl_backward(loss) : -1;
}

static int rig_step(rig *r) { return rig_grads(r) < 0 ? -1 : gdl_step(r->opt); }

/* The bytes of every parameter and, once a step was taken, every optimizer
   state tensor (moments, momentum buffers, per-parameter step counts) and
   the step count: equal snapshots mean bitwise equal training states.
   malloc'd; NULL on failure. */
static unsigned char *rig_snapshot(rig *r, size_t *len) {
    gdl_tensor *ts[32];
    int n = r->t.np, i;
    int64_t steps = gdl_optim_get_step(r->opt);
    size_t total = sizeof steps, off;
    unsigned char *buf;
    for (i = 0; i < n; i++) ts[i] = r->t.p[i];
    if (steps > 0) {
        int m = gdl_optim_state(r->opt, NULL, ts + n, 32 - n);
        if (m < 0 || m > 32 - n) return NULL;
        n += m;
    }
    for (i = 0; i < n; i++) total += (size_t)ts[i]->numel * gdl_dtype_size(ts[i]->dtype);
    if (!(buf = (unsigned char *)malloc(total))) return NULL;
    memcpy(buf, &steps, sizeof steps);
    for (i = 0, off = sizeof steps; i < n; i++) {
        size_t b = (size_t)ts[i]->numel * gdl_dtype_size(ts[i]->dtype);
        if (gdl_copy_to_host(ts[i], buf + off, b) < 0) {
            free(buf);
            return NULL;
        }
        off += b;
    }
    *len = total;
    return buf;
}

/* 1 if both snapshots exist and are equal */
static int same_snapshot(unsigned char *a, size_t la, unsigned char *b, size_t lb) {
    int same = a && b && la == lb && memcmp(a, b, la) == 0;
    free(a);
    free(b);
    return same;
}
static int rigs_equal(rig *a, rig *b) {
    size_t la = 0, lb = 0;
    unsigned char *sa = rig_snapshot(a, &la), *sb = rig_snapshot(b, &lb);
    return same_snapshot(sa, la, sb, lb);
}
#endif

static const opt_kind fault_kinds[] = {
    {"sgd", 0, 0.1, 0, 0, 0, 0},
    {"sgd_momentum_nesterov", 0, 0.05, 0.9, 0, 0.01, 1},
    {"adam", 1, 0.01, 0, 0, 0.05, 0},
    {"adamw", 2, 0.01, 0, 0, 0.1, 0},
};

/* One optimizer launch per step whatever the number of parameters; a launch
   failure at that launch (on the first step, while the state is new, and on
   a later one) updates nothing, and the retried step equals a reference's. */
TEST optimizer_step_one_launch_all_or_nothing(void *arg) {
#ifndef GPUDL_EMU
    (void)arg;
    SKIPm("fault injection needs the emulator (GPUDL_EMU)");
#else
    const opt_kind *k = (const opt_kind *)arg;
    rig a, b;
    int s;
    ASSERT_EQ(0, rig_make(&a, k));
    ASSERT_EQ(0, rig_make(&b, k));
    for (s = 0; s < 4; s++) {
        long l0, launches;
        ASSERT_EQ(0, rig_grads(&b));
        l0 = gdl_emu_count("launch");
        ASSERT_EQ(0, gdl_step(b.opt));
        launches = gdl_emu_count("launch") - l0; /* the first step also fills the new state with zeros */
        if (s > 0 && launches != 1) FAILf("%s step %d: %ld launches, expected one", k->name, s, launches);
        ASSERT_EQ(0, rig_grads(&a));
        if (s == 0 || s == 2) {
            size_t l1 = 0, l2 = 0;
            unsigned char *s1 = rig_snapshot(&a, &l1), *s2;
            gdl_emu_fail_launch(launches); /* the optimizer's own launch, the last */
            ASSERT_EQ(-1, gdl_step(a.opt));
            ASSERT_CONTAINS(gdl_last_error(), "gdl_step");
            ASSERT_CONTAINS(gdl_last_error(), "nothing was updated");
            s2 = rig_snapshot(&a, &l2);
            if (!same_snapshot(s1, l1, s2, l2)) FAILf("%s step %d: a failed launch changed the state", k->name, s);
        }
        ASSERT_EQ(0, gdl_step(a.opt));
        if (!rigs_equal(&a, &b)) FAILf("%s step %d: differs from the reference", k->name, s);
    }
    rig_free(&a);
    rig_free(&b);
    gdl_arena_reset();
    PASS();
#endif
}

/* A cuBLAS call failing at each GEMM of a training step (forward, backward):
   an error naming the op, parameters and optimizer state bitwise unchanged,
   and the next step equal to a reference's. */
TEST cublas_failure_mid_step(void) {
#ifndef GPUDL_EMU
    SKIPm("fault injection needs the emulator (GPUDL_EMU)");
#else
    rig a, b;
    long calls, c0, k;
    ASSERT_EQ(0, rig_make(&a, &fault_kinds[2]));
    ASSERT_EQ(0, rig_make(&b, &fault_kinds[2]));
    ASSERT_EQ(0, rig_step(&a));
    c0 = gdl_emu_count("cublas");
    ASSERT_EQ(0, rig_step(&b));
    calls = gdl_emu_count("cublas") - c0;
    ASSERT(calls >= 4); /* two linear layers forward, their grads backward */
    for (k = 1; k <= calls; k++) {
        size_t l1 = 0, l2 = 0;
        unsigned char *s1 = rig_snapshot(&a, &l1), *s2;
        gdl_emu_fail_cublas(k);
        ASSERT_EQ(-1, rig_step(&a));
        ASSERT_CONTAINS(gdl_last_error(), "CUBLAS_STATUS_EXECUTION_FAILED");
        ASSERT_CONTAINS(gdl_last_error(), "linear"); /* gdl_linear, or the backward of linear */
        s2 = rig_snapshot(&a, &l2);
        if (!same_snapshot(s1, l1, s2, l2)) FAILf("a failure at cuBLAS call %ld of %ld changed the state", k, calls);
        ASSERT_EQ(0, rig_step(&a));
        ASSERT_EQ(0, rig_step(&b));
        if (!rigs_equal(&a, &b)) FAILf("after a failure at cuBLAS call %ld: differs from the reference", k);
    }
    rig_free(&a);
    rig_free(&b);
    gdl_arena_reset();
    PASS();
#endif
}

/* Device OOM at every cudaMalloc of a training step from a cold cache (the
   arenas and the allocator's cache released: gdl_shutdown), on the first
   step, when the optimizer state is made, and on a later one: an error
   saying out of memory and nothing changed, or, where the allocator could
   give cached blocks back and retry, a step that is right; either way the
   next step equals the reference's. */
TEST oom_at_every_allocation_of_a_step(void) {
#ifndef GPUDL_EMU
    SKIPm("fault injection needs the emulator (GPUDL_EMU)");
#else
    int phase;
    for (phase = 0; phase < 2; phase++) {
        rig a, b;
        long allocs, a0, k, failed = 0;
        ASSERT_EQ(0, rig_make(&b, &fault_kinds[2]));
        if (phase) ASSERT_EQ(0, rig_step(&b));
        gdl_shutdown();
        a0 = gdl_emu_count("alloc");
        ASSERT_EQ(0, rig_step(&b));
        allocs = gdl_emu_count("alloc") - a0;
        ASSERT(allocs >= 1);
        for (k = 1; k <= allocs; k++) {
            size_t l1 = 0, l2 = 0;
            unsigned char *s1, *s2;
            int rc;
            ASSERT_EQ(0, rig_make(&a, &fault_kinds[2]));
            if (phase) ASSERT_EQ(0, rig_step(&a));
            s1 = rig_snapshot(&a, &l1);
            gdl_shutdown();
            gdl_emu_fail_alloc(k);
            rc = rig_step(&a);
            gdl_emu_fail_alloc(0);
            if (rc < 0) {
                failed++;
                ASSERT_CONTAINS(gdl_last_error(), "out of memory");
                s2 = rig_snapshot(&a, &l2);
                if (!same_snapshot(s1, l1, s2, l2))
                    FAILf("phase %d: OOM at allocation %ld of %ld changed the state (%s)", phase, k, allocs,
                          gdl_last_error());
                ASSERT_EQ(0, rig_step(&a));
            } else {
                free(s1);
            }
            if (!rigs_equal(&a, &b)) FAILf("phase %d: after OOM at allocation %ld of %ld: differs", phase, k, allocs);
            rig_free(&a);
        }
        /* with nothing cached, the first allocation of the first step cannot be rescued; a later step
           allocates only an arena chunk, which a retry with the size needed rescues */
        if (phase == 0) ASSERT(failed > 0);
        rig_free(&b);
    }
    gdl_arena_reset();
    PASS();
#endif
}

/* ---- gdl_fit's out-of-memory recovery (the emulator only) ---- */

#define FIT_N 96
#define FIT_B 32
#define FIT_W 131 /* parameters of Linear(4,16) ReLU Linear(16,3) */

#ifdef GPUDL_EMU
/* Which calls of the loss run out of memory; the loss is called once per
   batch attempt, so a retry is a later call. */
typedef struct fit_inject {
    int calls;
    int fail_at;        /* this call fails (0: none) */
    int fail_full_from; /* every call from this one with a whole batch of FIT_B rows fails (0: none) */
    int fail_after;     /* this call arms a failure of the step's next cudaMalloc (on the first step the
                           optimizer's table, after the backward) */
    int snap_at;        /* this call copies the parameters (as the step sees them) into snap */
    float snap[FIT_W];
    gdl_module *m;
    gdl_grad_scaler *scaler; /* gdl_fit_opts.scaler */
} fit_inject;

static int fit_weights(gdl_module *m, float *w) {
    gdl_tensor *ts[8];
    int n = gdl_module_named_tensors(m, GDL_PARAMS, NULL, ts, 8), i, off = 0;
    for (i = 0; i < n; i++) {
        if (off + ts[i]->numel > FIT_W || gdl_copy_to_host(ts[i], w + off, sizeof(float) * (size_t)ts[i]->numel) < 0)
            return -1;
        off += (int)ts[i]->numel;
    }
    return off == FIT_W ? 0 : -1;
}

/* cross entropy after a scratch block of the device, as a loss needing
   memory would take: with the allocator's cache given back and the next
   cudaMalloc failing, the step runs out of memory for real */
static gdl_tensor *fit_loss(gdl_tensor *out, gdl_tensor *y, void *user) {
    fit_inject *f = (fit_inject *)user;
    int n = ++f->calls;
    if (n == f->snap_at && fit_weights(f->m, f->snap) < 0) return NULL;
    if (n == f->fail_after) {
        gdl_cuda_release_cache();
        gdl_emu_fail_alloc(1);
    }
    if (n == f->fail_at || (f->fail_full_from && n >= f->fail_full_from && y->shape[0] == FIT_B)) {
        int64_t s[1] = {1 << 16};
        gdl_tensor *scratch;
        gdl_cuda_release_cache();
        gdl_emu_fail_alloc(1);
        scratch = gdl_empty(1, s, GDL_F32, GPU);
        gdl_emu_fail_alloc(0);
        if (!scratch) return NULL;
        gdl_free(scratch);
    }
    return gdl_cross_entropy(out, y);
}

/* n samples of 4 features in 3 classes: feature k is about 2 where k is the class */
static gdl_dataset *fit_dataset(int n, uint64_t seed) {
    float x[128 * 4];
    int32_t y[128];
    int64_t shape[1] = {4};
    int i, k;
    if (n > 128) return NULL;
    gdl_manual_seed(seed);
    for (i = 0; i < n; i++) {
        y[i] = (int32_t)(gdl_rng_next_u64() % 3);
        for (k = 0; k < 4; k++) x[i * 4 + k] = (float)((k == y[i] ? 2.0 : 0.0) + gdl_rng_uniform() - 0.5);
    }
    return gdl_dataset_from_arrays(x, GDL_F32, 1, shape, y, n, 3);
}

/* two epochs of 3 batches on the GPU with Adam; the final weights in w */
static int fit_run(fit_inject *f, int oom_retry, int oom_split_batch, FILE *log, float *w) {
    int rc = -1;
    gdl_dataset *ds = fit_dataset(FIT_N, 17);
    gdl_loader *l = NULL;
    gdl_module *layers[3], *m;
    gdl_optimizer *opt = NULL;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts o = gdl_fit_defaults();
    layers[0] = gdl_nn_linear(4, 16, 1);
    layers[1] = gdl_nn_relu();
    layers[2] = gdl_nn_linear(16, 3, 1);
    m = gdl_nn_sequential(3, layers);
    lo.batch_size = FIT_B;
    lo.shuffle = 1;
    lo.seed = 3;
    lo.device = GPU;
    if (ds && m && gdl_module_to(m, GPU) == 0 && (l = gdl_loader_new(ds, &lo)) &&
        (opt = gdl_adam_new(0.05, 0.9, 0.999, 1e-8, 0)) && gdl_optim_add_module(opt, m, 0) == 0) {
        f->m = m;
        o.epochs = 2;
        o.verbose = log != NULL;
        o.log = log;
        o.loss = fit_loss;
        o.loss_user = f;
        o.oom_retry = oom_retry;
        o.oom_split_batch = oom_split_batch;
        o.cuda_graph = 0; /* the loss injects its faults when it is called: every step eagerly */
        o.scaler = f->scaler;
        rc = gdl_fit(m, l, opt, &o, NULL);
        if (fit_weights(m, w) < 0) rc = -2;
    }
    gdl_optim_free(opt);
    gdl_loader_free(l);
    gdl_module_free(m);
    gdl_dataset_free(ds);
    return rc;
}
#endif

#ifdef GPUDL_EMU
/* gdl_fit with and without CUDA graphs: 3 epochs of 80 samples in batches
   of 32 (two full ones and a partial one: two graphs), Adam with OneCycle
   stepped per batch (lr changes between replays). drop: a dropout layer,
   which cannot be captured (the fit then runs eagerly, with one notice).
   pin: the loader's pinned delivery, into two device buffers in turn (a
   graph per buffer and batch size), else into one. */
static int fit_graph_run(int graph, int drop, double clip, int pin, FILE *log, float *w, gdl_epoch_stats *hist,
                         int *calls) {
    int rc = -1, nl = 0;
    gdl_dataset *ds = fit_dataset(80, 23);
    gdl_loader *l = NULL;
    gdl_module *layers[4], *m;
    gdl_optimizer *opt = NULL;
    gdl_scheduler *sched = NULL;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts o = gdl_fit_defaults();
    fit_inject f;
    memset(&f, 0, sizeof f);
    layers[nl++] = gdl_nn_linear(4, 16, 1);
    layers[nl++] = gdl_nn_relu();
    if (drop) layers[nl++] = gdl_nn_dropout(0.25);
    layers[nl++] = gdl_nn_linear(16, 3, 1);
    m = gdl_nn_sequential(nl, layers);
    lo.batch_size = FIT_B;
    lo.shuffle = 1;
    lo.seed = 5;
    lo.device = GPU;
    lo.pin_memory = pin;
    if (ds && m && gdl_module_to(m, GPU) == 0 && (l = gdl_loader_new(ds, &lo)) &&
        (opt = gdl_adam_new(0.05, 0.9, 0.999, 1e-8, 0)) && gdl_optim_add_module(opt, m, 0) == 0 &&
        (sched = gdl_onecycle_lr_new(opt, 0.05, 9))) {
        f.m = m;
        o.epochs = 3;
        o.verbose = log != NULL;
        o.log = log;
        o.loss = fit_loss; /* counts its calls: a replayed step does not call it */
        o.loss_user = &f;
        o.scheduler = sched;
        o.scheduler_per_batch = 1;
        o.cuda_graph = graph;
        o.clip_grad_norm = clip;
        rc = gdl_fit(m, l, opt, &o, hist);
        if (fit_weights(m, w) < 0) rc = -2;
        if (gdl_optim_get_step(opt) != 9) rc = -3;
    }
    *calls = f.calls;
    gdl_scheduler_free(sched);
    gdl_optim_free(opt);
    gdl_loader_free(l);
    gdl_module_free(m);
    gdl_dataset_free(ds);
    return rc;
}

/* gdl_fit on the GPU with a weight EMA (its update inside the captured step) and mixup's soft targets from a
   pinned loader, validated (the averages swapped in and back): with and without CUDA graphs the weights and
   the averages agree bit for bit, and n_averaged counts the replayed steps too. */
static int ema_fit_run(int graph, float *w, float *avg, double *val_loss) {
    int rc = -1, k, n;
    gdl_dataset *ds = fit_dataset(80, 23), *vs = fit_dataset(40, 24);
    gdl_loader *l = NULL, *vl = NULL;
    gdl_module *m = gdl_nn_sequential(3, (gdl_module *[]){gdl_nn_linear(4, 16, 1), gdl_nn_relu(), gdl_nn_linear(16, 3, 1)});
    gdl_optimizer *opt = NULL;
    gdl_ema *ema = NULL;
    gdl_tensor *ts[8];
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts o = gdl_fit_defaults();
    gdl_epoch_stats h[3];
    lo.batch_size = FIT_B;
    lo.device = GPU;
    if (ds && vs && m && gdl_module_to(m, GPU) == 0 && (vl = gdl_loader_new(vs, &lo))) {
        lo.shuffle = 1;
        lo.seed = 5;
        lo.pin_memory = 1;
        lo.transform.mixup_alpha = 0.4;
        lo.transform.num_classes = 3;
        if ((l = gdl_loader_new(ds, &lo)) && (opt = gdl_adam_new(0.05, 0.9, 0.999, 1e-8, 0)) &&
            gdl_optim_add_module(opt, m, 0) == 0 && (ema = gdl_ema_new(opt, m, 0.8, 0))) {
            o.epochs = 3;
            o.verbose = 0;
            o.val = vl;
            o.cuda_graph = graph;
            rc = gdl_fit(m, l, opt, &o, h);
            *val_loss = h[2].val_loss;
            if (fit_weights(m, w) < 0) rc = -2;
            n = gdl_module_named_tensors(m, GDL_PARAMS, NULL, ts, 8);
            for (k = 0; k < n; k++) {
                gdl_tensor *a = gdl_ema_tensor(ema, ts[k]);
                if (!a || gdl_copy_to_host(a, avg, sizeof(float) * (size_t)a->numel) < 0) rc = -4;
                else avg += a->numel;
            }
            if (gdl_ema_num_updates(ema) != 9) rc = -3;
        }
    }
    gdl_ema_free(ema);
    gdl_optim_free(opt);
    gdl_loader_free(l);
    gdl_loader_free(vl);
    gdl_module_free(m);
    gdl_dataset_free(ds);
    gdl_dataset_free(vs);
    return rc;
}

TEST fit_graph_ema(void) {
    float we[FIT_W], wg[FIT_W], ae[FIT_W], ag[FIT_W];
    double le, lg;
    long graphs0 = gdl_emu_count("graph");
    ASSERT_EQ(0, ema_fit_run(0, we, ae, &le));
    ASSERT_EQ(0, gdl_emu_count("graph") - graphs0);
    ASSERT_EQ(0, ema_fit_run(1, wg, ag, &lg));
    ASSERTm("the step was replayed as a graph", gdl_emu_count("graph") - graphs0 > 0);
    ASSERTm("the graphs' weights equal the eager ones bit for bit", memcmp(we, wg, sizeof we) == 0);
    ASSERTm("the graphs' averages equal the eager ones bit for bit", memcmp(ae, ag, sizeof ae) == 0);
    ASSERTm("the averages are not the weights", memcmp(ae, we, sizeof ae) != 0);
    ASSERT_EQ(le, lg);
    PASS();
}

/* the graphs give the eager run's weights and epoch figures bit for bit, with
   the loss called only for the steps run eagerly or recorded, and a replay
   reading its batch where the loader put it (no copy) */
TEST fit_graph_equals_eager(void) {
    float we[FIT_W], wg[FIT_W], wu[FIT_W];
    gdl_epoch_stats he[3], hg[3];
    int ce, cg, e, pin;
    long graphs0, copies_e, copies_g;
    char line[512];
    FILE *log;
    int clip;
    for (pin = 0; pin < 2; pin++)
        for (clip = 0; clip < 2; clip++) { /* and with the gradient clipped (0.5: most steps clip) */
            copies_e = gdl_emu_count("d2d");
            ASSERT_EQ(0, fit_graph_run(0, 0, clip * 0.5, pin, NULL, we, he, &ce));
            copies_e = gdl_emu_count("d2d") - copies_e;
            if (clip) ASSERTm("clipping changed the training", memcmp(we, wu, sizeof we) != 0);
            else memcpy(wu, we, sizeof wu);
            graphs0 = gdl_emu_count("graph");
            copies_g = gdl_emu_count("d2d");
            ASSERT_EQ(0, fit_graph_run(1, 0, clip * 0.5, pin, NULL, wg, hg, &cg));
            copies_g = gdl_emu_count("d2d") - copies_g;
            ASSERT_EQ(9, ce);
            /* batches 32, 32, 16 per epoch. One buffer: each size's first step eagerly, then its capture
               (4 calls). Two buffers, in turn (32 in 0, 32 in 1, 16 in 0, then 32 in 1 ...): a size's first
               step eagerly and its capture, and its first batch in the other buffer recorded and replayed
               at once (6 calls) */
            ASSERT_EQ(pin ? 6 : 4, cg);
            ASSERT_EQ(7, gdl_emu_count("graph") - graphs0); /* the 7 steps not run eagerly */
            if (copies_g > copies_e)
                FAILf("pin %d: the graphs' fit made %ld device-to-device copies, the eager one %ld: a replay must "
                      "read the loader's buffer, not a copy of it", pin, copies_g, copies_e);
            ASSERTm("the graphs' weights equal the eager ones bit for bit", memcmp(we, wg, sizeof we) == 0);
            for (e = 0; e < 3; e++)
                if (he[e].loss != hg[e].loss || he[e].accuracy != hg[e].accuracy || he[e].samples != hg[e].samples)
                    FAILf("pin %d, clip %d, epoch %d: eager loss %.9g acc %.4f, graphs %.9g %.4f", pin, clip, e + 1,
                          he[e].loss, he[e].accuracy, hg[e].loss, hg[e].accuracy);
        }
    /* dropout cannot be captured: eager, the same as cuda_graph 0, one notice */
    ASSERT_EQ(0, fit_graph_run(0, 1, 0, 1, NULL, we, he, &ce));
    log = tmpfile();
    ASSERT(log != NULL);
    ASSERT_EQ(0, fit_graph_run(1, 1, 0, 1, log, wg, hg, &cg));
    ASSERT_EQ(ce, 9);
    ASSERTm("a fit that fell back to eager equals the eager one", memcmp(we, wg, sizeof we) == 0);
    rewind(log);
    e = 0;
    while (fgets(line, sizeof line, log))
        if (strstr(line, "not as a CUDA graph")) {
            e++;
            ASSERT_CONTAINS(line, "dropout");
        }
    fclose(log);
    ASSERT_EQ(1, e);
    PASS();
}

/* gdl_fit under bf16 autocast with master weights, with and without CUDA graphs: the flat buffer's addresses
   stay fixed, so the replays give the eager run's masters and bf16 weights bit for bit */
static int mw_fit_run(int graph, float *masters, uint16_t *w, int *calls) {
    int rc = -1, k, n;
    gdl_dataset *ds = fit_dataset(80, 23);
    gdl_loader *l = NULL;
    gdl_module *m = gdl_nn_sequential(3, (gdl_module *[]){gdl_nn_linear(4, 16, 1), gdl_nn_relu(), gdl_nn_linear(16, 3, 1)});
    gdl_optimizer *opt = NULL;
    gdl_scheduler *sched = NULL;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts o = gdl_fit_defaults();
    fit_inject f;
    memset(&f, 0, sizeof f);
    lo.batch_size = FIT_B;
    lo.shuffle = 1;
    lo.seed = 5;
    lo.device = GPU;
    if (ds && m && gdl_module_to(m, GPU) == 0 && (l = gdl_loader_new(ds, &lo)) &&
        (opt = gdl_adamw_new(0.05, 0.9, 0.999, 1e-8, 0.01)) && gdl_optim_add_module(opt, m, 0) == 0 &&
        gdl_optim_set_master_weights(opt, GDL_BF16) == 0 && (sched = gdl_onecycle_lr_new(opt, 0.05, 9))) {
        f.m = m;
        o.epochs = 3;
        o.loss = fit_loss;
        o.loss_user = &f;
        o.scheduler = sched;
        o.scheduler_per_batch = 1;
        o.cuda_graph = graph;
        o.autocast = GDL_BF16;
        o.verbose = 0;
        rc = gdl_fit(m, l, opt, &o, NULL);
        for (k = 0, n = 0; rc == 0 && k < 4; k++) {
            gdl_tensor *mt = gdl_optim_master_weight(opt, k);
            if (!mt || gdl_copy_to_host(mt, masters + n, sizeof(float) * (size_t)mt->numel) < 0) rc = -2;
            else n += (int)mt->numel;
        }
        if (rc == 0) {
            gdl_tensor *ps[4];
            gdl_module_named_tensors(m, GDL_PARAMS, NULL, ps, 4);
            for (k = 0, n = 0; k < 4; k++) {
                if (ps[k]->dtype != GDL_BF16 || gdl_copy_to_host(ps[k], w + n, 2 * (size_t)ps[k]->numel) < 0) rc = -3;
                n += (int)ps[k]->numel;
            }
        }
        if (gdl_optim_get_step(opt) != 9) rc = -4;
    }
    *calls = f.calls;
    gdl_scheduler_free(sched);
    gdl_optim_free(opt);
    gdl_loader_free(l);
    gdl_module_free(m);
    gdl_dataset_free(ds);
    return rc;
}
TEST fit_graph_master_weights(void) {
    float me[FIT_W], mg[FIT_W];
    uint16_t we[FIT_W], wg[FIT_W];
    int ce, cg;
    long graphs0;
    ASSERT_EQ(0, mw_fit_run(0, me, we, &ce));
    graphs0 = gdl_emu_count("graph");
    ASSERT_EQ(0, mw_fit_run(1, mg, wg, &cg));
    ASSERT_EQ(9, ce);
    ASSERT_EQ(4, cg);
    ASSERT_EQ(7, gdl_emu_count("graph") - graphs0);
    ASSERTm("masters: graphs == eager bit for bit", memcmp(me, mg, sizeof me) == 0);
    ASSERTm("bf16 weights: graphs == eager bit for bit", memcmp(we, wg, sizeof we) == 0);
    PASS();
}

#endif
SUITE(fit_graphs) {
#ifdef GPUDL_EMU
    RUN_GPU(fit_graph_equals_eager);
    RUN_GPU(fit_graph_master_weights);
    RUN_GPU(fit_graph_ema);
#endif
}

/* An OOM at a chosen step: the retry gives the uninjected run's weights bit for
   bit; without the options, an error saying where, and the weights of the
   last completed step; an OOM that a whole batch always meets: the split
   into micro-batches ends near the uninjected run, with one notice. */
TEST fit_recovers_from_oom(void) {
#ifndef GPUDL_EMU
    SKIPm("fault injection needs the emulator (GPUDL_EMU)");
#else
    static fit_inject ref, f;
    float w_ref[FIT_W], w_init[FIT_W], w[FIT_W];
    char line[512];
    FILE *log;
    int notices = 0, i;
    memset(&ref, 0, sizeof ref);
    ref.snap_at = 1;
    ASSERT_EQ(0, fit_run(&ref, 1, 0, NULL, w_ref));
    memcpy(w_init, ref.snap, sizeof w_init);
    memset(&ref, 0, sizeof ref);
    ref.snap_at = 4; /* epoch 2, batch 1: the weights after 3 steps */
    ASSERT_EQ(0, fit_run(&ref, 1, 0, NULL, w));
    ASSERT(memcmp(w, w_ref, sizeof w) == 0); /* deterministic */
    ASSERT(memcmp(w_init, w_ref, sizeof w) != 0);
    /* the retry */
    memset(&f, 0, sizeof f);
    f.fail_at = 4;
    ASSERT_EQ(0, fit_run(&f, 1, 0, NULL, w));
    ASSERT_EQ(7, f.calls); /* 6 batches and one retry */
    ASSERTm("a retried step gives the uninjected weights bitwise", memcmp(w, w_ref, sizeof w) == 0);
    memset(&f, 0, sizeof f);
    /* the first step: the one that allocates (the optimizer's table; a steady-state step allocates nothing) */
    f.fail_after = 1; /* the gradients are made when it fails */
    ASSERT_EQ(0, fit_run(&f, 1, 0, NULL, w));
    ASSERT_EQ(7, f.calls);
    ASSERT(memcmp(w, w_ref, sizeof w) == 0);
    /* with a GradScaler (2^16: the unscaled weights bitwise): the retry of a step that failed after the
       unscale (in the optimizer's first step) starts the scaler's step again */
    for (i = 0; i < 2; i++) {
        memset(&f, 0, sizeof f);
        ASSERT_NOT_NULL(f.scaler = gdl_grad_scaler_new(NULL));
        if (i) {
            f.fail_at = 4;
        } else { /* the scale made first, so the first step's table is the allocation that fails */
            gdl_tensor *one = gdl_ones(0, NULL, GDL_F32, GPU);
            ASSERT_NOT_NULL(gdl_grad_scaler_scale(f.scaler, one));
            gdl_free(one);
            gdl_arena_reset();
            f.fail_after = 1;
        }
        if (fit_run(&f, 1, 0, NULL, w) != 0) FAILf("with a scaler, failure %d: %s", i, gdl_last_error());
        ASSERT_EQ(7, f.calls);
        ASSERT(memcmp(w, w_ref, sizeof w) == 0);
        ASSERT_EQ(6, gdl_grad_scaler_get_growth_tracker(f.scaler)); /* 6 steps, none skipped or counted twice */
        gdl_grad_scaler_free(f.scaler);
    }
    memset(&f, 0, sizeof f);
    f.fail_after = 1;
    ASSERT_EQ(-1, fit_run(&f, 0, 0, NULL, w));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_step");
    ASSERT(memcmp(w, w_init, sizeof w) == 0);
    /* without the options: the error, and the model as the failing step found it */
    memset(&f, 0, sizeof f);
    f.fail_at = 4;
    ASSERT_EQ(-1, fit_run(&f, 0, 0, NULL, w));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_fit: epoch 2, batch 1 of 3");
    ASSERT_CONTAINS(gdl_last_error(), "out of memory");
    ASSERT_CONTAINS(gdl_last_error(), "oom_retry");
    ASSERT(memcmp(w, ref.snap, sizeof w) == 0);
    /* the retry runs out of memory too, without oom_split_batch */
    memset(&f, 0, sizeof f);
    f.fail_full_from = 4;
    ASSERT_EQ(-1, fit_run(&f, 1, 0, NULL, w));
    ASSERT_CONTAINS(gdl_last_error(), "after retrying");
    ASSERT(memcmp(w, ref.snap, sizeof w) == 0);
    /* the split */
    memset(&f, 0, sizeof f);
    f.fail_full_from = 4;
    ASSERT_NOT_NULL(log = tmpfile());
    ASSERT_EQ(0, fit_run(&f, 1, 1, log, w));
    rewind(log);
    while (fgets(line, sizeof line, log))
        if (strstr(line, "running each batch as 2 micro-batches")) notices++;
    fclose(log);
    ASSERT_EQ(1, notices);
    ASSERT_EQ(4 + 1 + 2 * 3, f.calls); /* 3 whole batches, the failed attempt and retry, 3 batches in halves */
    for (i = 0; i < FIT_W; i++)
        if (!(fabs(w[i] - w_ref[i]) <= 1e-5 * (fabs(w_ref[i]) > 1 ? fabs(w_ref[i]) : 1)))
            FAILf("after the split, weight %d is %.9g, uninjected %.9g", i, (double)w[i], (double)w_ref[i]);
    PASS();
#endif
}

/* ---- the sequence-model ops (their rows in tests/op_cases.h run in the suites above): comparisons of
   every dtype pair against the CPU bit for bit, and the indexing and copy kernels at sizes past one block,
   with many repeated indices (scatter-add's atomics) ---- */
static const gc_case seq_gpu_cases[] = {
    {"seq_index_select_hot_rows", GDL_OP_INDEX_SELECT, f_index_select0, 2, {{R2(3, 70), IN_RANDN, 0}, {R1(600), IN_TARGET, 3}}},
    {"seq_gather_big", GDL_OP_GATHER, f_gather1, 2, {{R2(40, 30), IN_RANDN, 0}, {R2(40, 50), IN_TARGET, 30}}},
    {"seq_permute_big", GDL_OP_PERMUTE, f_permute3, 1, {{R3(9, 40, 7), IN_RANDN, 0}}},
    {"seq_slice_step_big", GDL_OP_NARROW, f_slice_step, 1, {{R2(30, 90), IN_RANDN, 0}}},
    {"seq_where_big", GDL_OP_WHERE, f_where, 3, {{R2(30, 40), IN_RANDN, 0}, {R2(30, 1), IN_RANDN, 0}, {R1(40), IN_CONST, 0}}},
    {"seq_tril_big", GDL_OP_TRIL, f_tril1, 1, {{R3(3, 30, 31), IN_RANDN, 0}}},
    {"seq_cumsum_long", GDL_OP_CUMSUM, f_cumsum1, 1, {{R2(3, 700), IN_RANDN, 0}}},
    {"seq_maximum_nan", GDL_OP_MAXIMUM, f_maximum, 2, {{R2(20, 30), IN_NAN, 0}, {R1(30), IN_TIES, 0}}},
    /* attention with longer heads: the GPU's tile shrinks to 16 (E 40) and 8 (Ev 70) rows; E 300 runs the
       unfused composition */
    {"seq_sdpa_causal_tile8", GDL_OP_SDPA, f_sdpa_causal, 3, {{R3(2, 19, 40), IN_RANDN, 0}, {R3(2, 17, 40), IN_RANDN, 0}, {R3(2, 17, 70), IN_RANDN, 0}}},
    {"seq_sdpa_bool_mask_tile16", GDL_OP_SDPA, f_sdpa_bool, 4,
     {{R3(3, 21, 40), IN_RANDN, 0}, {R3(3, 35, 40), IN_RANDN, 0}, {R3(3, 35, 20), IN_RANDN, 0}, {R2(21, 35), IN_CONST, 0}}},
    /* heads read in place at strides, with the shrunken tiles: 2 heads of E 40 / Ev 70 (tile 8); qkv, E 40 */
    {"seq_sdpa_heads_tile8", GDL_OP_SDPA, f_sdpa_heads, 3, {{R3(2, 19, 80), IN_RANDN, 0}, {R3(2, 17, 80), IN_RANDN, 0}, {R3(2, 17, 140), IN_RANDN, 0}}},
    {"seq_sdpa_qkv_causal_tile16", GDL_OP_SDPA, f_sdpa_qkv_causal, 1, {{R3(2, 37, 240), IN_RANDN, 0}}},
    {"seq_sdpa_head300_unfused", GDL_OP_MATMUL, f_sdpa, 3, {{R3(1, 3, 300), IN_RANDN, 0}, {R3(1, 4, 300), IN_RANDN, 0}, {R3(1, 4, 5), IN_RANDN, 0}}},
    {"seq_matmul_broadcast_big", GDL_OP_MATMUL, f_matmul, 2, {{R4(3, 1, 9, 33), IN_RANDN, 0}, {R3(4, 33, 6), IN_RANDN, 0}}},
};
#define NSEQ_GPU_CASES ((int)(sizeof seq_gpu_cases / sizeof seq_gpu_cases[0]))
static parity_run seq_gpu_runs[2 * NSEQ_GPU_CASES];

TEST seq_compare_all_pairs(void) {
    static const gdl_dtype dts[5] = {GDL_F32, GDL_F16, GDL_BF16, GDL_I32, GDL_U8};
    int64_t sa[2] = {5, 40}, sb[1] = {40};
    gc_input da, db;
    gdl_tensor *fa, *fb;
    int i, j, op;
    memset(&da, 0, sizeof da);
    memset(&db, 0, sizeof db);
    da.ndim = 2; da.shape[0] = sa[0]; da.shape[1] = sa[1]; da.kind = IN_NAN;
    db.ndim = 1; db.shape[0] = sb[0]; db.kind = IN_TIES;
    gdl_manual_seed(31);
    ASSERT_NOT_NULL(fa = make_input(&da));
    ASSERT_NOT_NULL(fb = make_input(&db));
    for (i = 0; i < 40 * 5; i += 3) ((float *)fa->data)[i] = (float)((i / 3) % 5 - 2); /* ties with b */
    for (i = 0; i < 5; i++)
        for (j = 0; j < 5; j++) {
            gdl_tensor *a, *b, *ag, *bg, *c, *cg;
            gdl_arena_reset();
            ASSERT_NOT_NULL(a = gdl_to_dtype(fa, dts[i]));
            ASSERT_NOT_NULL(b = gdl_to_dtype(fb, dts[j]));
            ASSERT_NOT_NULL(ag = gdl_to(a, GPU));
            ASSERT_NOT_NULL(bg = gdl_to(b, GPU));
            for (op = GDL_CMP_EQ; op <= GDL_CMP_GE; op++) {
                c = gdl_compare(a, b, (gdl_compare_op)op);
                cg = gdl_compare(bg, ag, (gdl_compare_op)op); /* b op a: the broadcast operand first */
                if (!c || !cg) FAILf("compare failed: %s", gdl_last_error());
                if (!same_bytes(gdl_compare(b, a, (gdl_compare_op)op), cg) || !same_bytes(c, gdl_compare(ag, bg, (gdl_compare_op)op)))
                    FAILf("comparison %d of %s and %s differs from the CPU's", op, gdl_dtype_name(dts[i]), gdl_dtype_name(dts[j]));
            }
            if (!same_bytes(gdl_compare_scalar(a, GDL_CMP_LE, 1), gdl_compare_scalar(ag, GDL_CMP_LE, 1)))
                FAILf("compare_scalar of %s differs from the CPU's", gdl_dtype_name(dts[i]));
        }
    gdl_free(fa);
    gdl_free(fb);
    gdl_arena_reset();
    PASS();
}

/* nn.MultiheadAttention on the GPU against the CPU: the same initialisation (seed), key padding and
   [N*heads, L, S] masks, the output and every parameter's gradient of sum(out) */
TEST mha_parity(void) {
    int64_t sq[3] = {3, 7, 16}, skv[3] = {3, 9, 16}, sk[2] = {3, 9}, sa[3] = {12, 7, 9};
    gdl_module *mc, *mg;
    gdl_tensor *q, *kv, *kpm, *am, *qg, *kvg, *kpmg, *amg, *oc, *og, *tc[4], *tg[4];
    uint8_t kb[27], ab[12 * 63];
    int i;
    for (i = 0; i < 27; i++) kb[i] = (uint8_t)(i % 9 == 4 || i == 17);
    for (i = 0; i < 12 * 63; i++) ab[i] = (uint8_t)(i % 9 != i / 9 % 7 && (i * 7) % 5 == 0);
    gdl_manual_seed(5);
    ASSERT_NOT_NULL(mc = gdl_nn_multihead_attention(16, 4, 0, 1, 1));
    gdl_manual_seed(5);
    ASSERT_NOT_NULL(mg = gdl_nn_multihead_attention(16, 4, 0, 1, 1));
    ASSERT_EQ(0, gdl_module_to(mg, GPU));
    ASSERT_NOT_NULL(q = gdl_randn(3, sq, gdl_cpu()));
    ASSERT_NOT_NULL(kv = gdl_randn(3, skv, gdl_cpu()));
    ASSERT_NOT_NULL(kpm = gdl_from_array(kb, 2, sk, GDL_U8, gdl_cpu()));
    ASSERT_NOT_NULL(am = gdl_from_array(ab, 3, sa, GDL_U8, gdl_cpu()));
    ASSERT(!!(qg = gdl_to(q, GPU)) & !!(kvg = gdl_to(kv, GPU)) & !!(kpmg = gdl_to(kpm, GPU)) & !!(amg = gdl_to(am, GPU)));
    gdl_arena_reset();
    ASSERT_NOT_NULL(oc = gdl_mha_forward(mc, q, kv, kv, kpm, am));
    ASSERT_NOT_NULL(og = gdl_mha_forward(mg, qg, kvg, kvg, kpmg, amg));
    ASSERT(rel_err(oc, og) < 1e-5);
    ASSERT_EQ(0, gdl_backward(gdl_sum(oc)));
    ASSERT_EQ(0, gdl_backward(gdl_sum(og)));
    ASSERT_EQ(4, gdl_module_named_tensors(mc, GDL_PARAMS, NULL, tc, 4));
    ASSERT_EQ(4, gdl_module_named_tensors(mg, GDL_PARAMS, NULL, tg, 4));
    for (i = 0; i < 4; i++)
        if (!(rel_err(tc[i]->grad, tg[i]->grad) < 1e-5)) FAILf("parameter %d's gradient differs from the CPU's", i);
    gdl_module_free(mc);
    gdl_module_free(mg);
    gdl_free(q); gdl_free(kv); gdl_free(kpm); gdl_free(am); gdl_free(qg); gdl_free(kvg); gdl_free(kpmg); gdl_free(amg);
    gdl_arena_reset();
    PASS();
}

/* nn.TransformerEncoderLayer on the GPU against the CPU (the same initialisation), post-norm ReLU and pre-norm
   GELU, a key padding mask and the causal mask: the output and every parameter's gradient of sum(out * r), r
   random (LayerNorm's output has a constant sum of squares: sum(out * out) would leave the gradients noise);
   a tied parameter (gdl_module_tie) moves with its module once and keeps one tensor */
TEST tfm_parity(void) {
    int64_t sx[3] = {3, 9, 16}, sk[2] = {3, 9};
    uint8_t kb[27];
    int i, k, pre;
    for (i = 0; i < 27; i++) kb[i] = (uint8_t)(i % 9 >= 9 - i / 9 * 2); /* 0, 2 and 4 padded positions */
    for (pre = 0; pre < 2; pre++) {
        gdl_module *mc, *mg;
        gdl_tensor *x, *r, *kpm, *xg, *rg, *kpmg, *oc, *og, *tc[16], *tg[16];
        int n;
        gdl_manual_seed(7);
        ASSERT_NOT_NULL(mc = gdl_nn_transformer_encoder_layer(16, 4, 32, 0, pre, 1e-5, 1, pre, 1));
        gdl_manual_seed(7);
        ASSERT_NOT_NULL(mg = gdl_nn_transformer_encoder_layer(16, 4, 32, 0, pre, 1e-5, 1, pre, 1));
        ASSERT_EQ(0, gdl_module_to(mg, GPU));
        ASSERT_NOT_NULL(x = gdl_randn(3, sx, gdl_cpu()));
        ASSERT_NOT_NULL(r = gdl_randn(3, sx, gdl_cpu()));
        ASSERT_NOT_NULL(kpm = gdl_from_array(kb, 2, sk, GDL_U8, gdl_cpu()));
        ASSERT(!!(xg = gdl_to(x, GPU)) & !!(rg = gdl_to(r, GPU)) & !!(kpmg = gdl_to(kpm, GPU)));
        gdl_arena_reset();
        ASSERT_NOT_NULL(oc = gdl_transformer_encoder_forward(mc, x, NULL, kpm, 1));
        ASSERT_NOT_NULL(og = gdl_transformer_encoder_forward(mg, xg, NULL, kpmg, 1));
        ASSERT(rel_err(oc, og) < 1e-5);
        ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(oc, r))));
        ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(og, rg))));
        ASSERT_EQ(12, n = gdl_module_named_tensors(mc, GDL_PARAMS, NULL, tc, 16));
        ASSERT_EQ(12, gdl_module_named_tensors(mg, GDL_PARAMS, NULL, tg, 16));
        for (k = 0; k < n; k++)
            if (!(rel_err(tc[k]->grad, tg[k]->grad) < 1e-5)) FAILf("%s: parameter %d's gradient differs from the CPU's", pre ? "pre-norm" : "post-norm", k);
        gdl_module_free(mc);
        gdl_module_free(mg);
        gdl_free(x); gdl_free(r); gdl_free(kpm); gdl_free(xg); gdl_free(rg); gdl_free(kpmg);
        gdl_arena_reset();
    }
    {
        gdl_module *m = gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_embedding(6, 4), gdl_nn_linear(4, 6, 0)});
        gdl_tensor *w;
        ASSERT_NOT_NULL(m);
        ASSERT_EQ(0, gdl_module_tie(m, "1.weight", "0.weight"));
        ASSERT_EQ(0, gdl_module_to(m, GPU));
        ASSERT_NOT_NULL(w = gdl_module_tensor(m, "0.weight"));
        ASSERT(w == gdl_module_tensor(m, "1.weight") && w->device.type == GDL_DEVICE_CUDA);
        gdl_module_free(m);
    }
    PASS();
}

/* nn.Transformer (pre-norm, gelu_tanh, sequence-first) on the GPU against the CPU: the same initialisation, causal
   tgt, src / memory key padding masks; the output and every parameter's gradient of sum(out * r). Then
   MultiheadAttention with kdim / vdim and need_weights (per head): the output, the weights and the gradients. */
TEST decoder_parity(void) {
    int64_t ss[3] = {7, 2, 8}, st[3] = {5, 2, 8}, sk[2] = {2, 7};
    uint8_t kb[14] = {0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1};
    gdl_transformer_opts o = gdl_transformer_defaults();
    gdl_transformer_masks mc, mg;
    gdl_module *tc, *tg;
    gdl_tensor *src, *tgt, *r, *kpm, *srcg, *tgtg, *rg, *kpmg, *oc, *og, *pc[128], *pg[128];
    int k, n;
    o.d_model = 8;
    o.nhead = 2;
    o.num_encoder_layers = o.num_decoder_layers = 2;
    o.dim_feedforward = 16;
    o.dropout = 0;
    o.norm_first = 1;
    o.activation_name = "gelu_tanh";
    gdl_manual_seed(9);
    ASSERT_NOT_NULL(tc = gdl_transformer(&o));
    gdl_manual_seed(9);
    ASSERT_NOT_NULL(tg = gdl_transformer(&o));
    ASSERT_EQ(0, gdl_module_to(tg, GPU));
    ASSERT_NOT_NULL(src = gdl_randn(3, ss, gdl_cpu()));
    ASSERT_NOT_NULL(tgt = gdl_randn(3, st, gdl_cpu()));
    ASSERT_NOT_NULL(r = gdl_randn(3, st, gdl_cpu()));
    ASSERT_NOT_NULL(kpm = gdl_from_array(kb, 2, sk, GDL_U8, gdl_cpu()));
    ASSERT(!!(srcg = gdl_to(src, GPU)) & !!(tgtg = gdl_to(tgt, GPU)) & !!(rg = gdl_to(r, GPU)) & !!(kpmg = gdl_to(kpm, GPU)));
    memset(&mc, 0, sizeof mc);
    mc.tgt_is_causal = 1;
    mg = mc;
    mc.src_key_padding_mask = mc.memory_key_padding_mask = kpm;
    mg.src_key_padding_mask = mg.memory_key_padding_mask = kpmg;
    gdl_arena_reset();
    ASSERT_NOT_NULL(oc = gdl_transformer_forward(tc, src, tgt, &mc));
    ASSERT_NOT_NULL(og = gdl_transformer_forward(tg, srcg, tgtg, &mg));
    ASSERT(rel_err(oc, og) < 1e-5);
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(oc, r))));
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(og, rg))));
    ASSERT_EQ(n = gdl_module_named_tensors(tc, GDL_PARAMS, NULL, pc, 128), gdl_module_named_tensors(tg, GDL_PARAMS, NULL, pg, 128));
    ASSERT(n > 0 && n <= 128);
    for (k = 0; k < n; k++)
        if (!(rel_err(pc[k]->grad, pg[k]->grad) < 1e-5)) FAILf("Transformer: parameter %d's gradient differs from the CPU's", k);
    gdl_module_free(tc);
    gdl_module_free(tg);
    gdl_free(src); gdl_free(tgt); gdl_free(r); gdl_free(kpm); gdl_free(srcg); gdl_free(tgtg); gdl_free(rg); gdl_free(kpmg);
    gdl_arena_reset();
    {
        int64_t sq[3] = {2, 3, 6}, skk[3] = {2, 4, 4}, sv[3] = {2, 4, 5};
        gdl_mha_opts mo = gdl_mha_defaults();
        gdl_mha_args a;
        gdl_module *ac, *ag;
        gdl_tensor *q = gdl_randn(3, sq, gdl_cpu()), *kk = gdl_randn(3, skk, gdl_cpu()), *v = gdl_randn(3, sv, gdl_cpu());
        gdl_tensor *qg, *kg, *vg, *wc, *wg;
        ASSERT(q && kk && v);
        ASSERT(!!(qg = gdl_to(q, GPU)) & !!(kg = gdl_to(kk, GPU)) & !!(vg = gdl_to(v, GPU)));
        mo.kdim = 4;
        mo.vdim = 5;
        mo.batch_first = 1;
        gdl_manual_seed(10);
        ASSERT_NOT_NULL(ac = gdl_nn_multihead_attention_ex(6, 2, &mo));
        gdl_manual_seed(10);
        ASSERT_NOT_NULL(ag = gdl_nn_multihead_attention_ex(6, 2, &mo));
        ASSERT_EQ(0, gdl_module_to(ag, GPU));
        a = gdl_mha_args_defaults();
        a.need_weights = 1;
        a.is_causal = 1;
        ASSERT_NOT_NULL(oc = gdl_mha_forward_ex(ac, q, kk, v, &a, &wc));
        ASSERT_NOT_NULL(og = gdl_mha_forward_ex(ag, qg, kg, vg, &a, &wg));
        ASSERT(rel_err(oc, og) < 1e-5 && rel_err(wc, wg) < 1e-5);
        ASSERT_EQ(0, gdl_backward(gdl_add(gdl_sum(oc), gdl_sum(gdl_mul(wc, wc)))));
        ASSERT_EQ(0, gdl_backward(gdl_add(gdl_sum(og), gdl_sum(gdl_mul(wg, wg)))));
        ASSERT_EQ(6, n = gdl_module_named_tensors(ac, GDL_PARAMS, NULL, pc, 128));
        ASSERT_EQ(6, gdl_module_named_tensors(ag, GDL_PARAMS, NULL, pg, 128));
        for (k = 0; k < n; k++)
            if (!(rel_err(pc[k]->grad, pg[k]->grad) < 1e-5)) FAILf("MultiheadAttention: parameter %d's gradient differs", k);
        gdl_module_free(ac);
        gdl_module_free(ag);
        gdl_free(q); gdl_free(kk); gdl_free(v); gdl_free(qg); gdl_free(kg); gdl_free(vg);
        gdl_arena_reset();
    }
    PASS();
}

SUITE(seq_ops) {
    int i;
    char name[96];
    for (i = 0; i < NSEQ_GPU_CASES; i++) {
        seq_gpu_runs[2 * i].c = seq_gpu_runs[2 * i + 1].c = &seq_gpu_cases[i];
        seq_gpu_runs[2 * i + 1].fanout = 1;
        RUN_GPU_NAMED(seq_gpu_cases[i].name, parity, &seq_gpu_runs[2 * i]);
        snprintf(name, sizeof name, "%s_fanout", seq_gpu_cases[i].name);
        RUN_GPU_NAMED(name, parity, &seq_gpu_runs[2 * i + 1]);
    }
    RUN_GPU(seq_compare_all_pairs);
    { /* scaled dot-product attention's fused kernels (tests/attention_cases.h) */
        static gdl_device dev;
        dev = GPU;
        RUN_GPU_NAMED("attention_tile_edges", attn_tile_edges, &dev);
        RUN_GPU_NAMED("attention_errors", attn_errors, &dev);
        RUN_GPU_NAMED("attention_heads_strided", attn_heads_strided, &dev);
        RUN_GPU_NAMED("attention_heads_errors", attn_heads_errors, &dev);
        RUN_GPU_NAMED("attention_memory_linear_in_T", attn_memory_linear, &dev);
        RUN_GPU_NAMED("attention_fully_masked_rows", attn_fully_masked_rows, &dev);
        RUN_GPU_NAMED("attention_explicit_scale", attn_explicit_scale, &dev);
    }
    RUN_GPU(mha_parity);
    RUN_GPU(tfm_parity);
    RUN_GPU(decoder_parity);
}

/* ---- the recurrent gate kernels and modules: rows of B*H past one 256-thread block (two blocks, the
   last one partly idle), each gradient output absent in turn (the kernels' NULL paths), gx and gh as one
   tensor; then whole LSTM / GRU modules (2 layers, bidirectional, batch_first, dropout, given states) on
   the GPU against the same module on the CPU, forward and every gradient ---- */
static const gc_case rnn_gpu_cases[] = {
    {"lstm_gates_2blocks", GDL_OP_LSTM_GATES, f_lstm_gates, 3, {{R2(7, 180), IN_RANDN, 0}, {R2(7, 180), IN_RANDN, 0}, {R2(7, 45), IN_RANDN, 0}}},
    {"lstm_gates_const_gx_state", GDL_OP_LSTM_GATES, f_lstm_gates, 3, {{R2(3, 400), IN_CONST, 0}, {R2(3, 400), IN_RANDN, 0}, {R2(3, 100), IN_CONST, 0}}},
    {"lstm_gates_const_gh", GDL_OP_LSTM_GATES, f_lstm_gates, 3, {{R2(5, 240), IN_RANDN, 0}, {R2(5, 240), IN_CONST, 0}, {R2(5, 60), IN_RANDN, 0}}},
    {"lstm_gates_self_big", GDL_OP_LSTM_GATES, f_lstm_gates_self, 2, {{R2(9, 132), IN_RANDN, 0}, {R2(9, 33), IN_RANDN, 0}}},
    {"gru_gates_2blocks", GDL_OP_GRU_GATES, f_gru_gates, 3, {{R2(5, 210), IN_RANDN, 0}, {R2(5, 210), IN_RANDN, 0}, {R2(5, 70), IN_RANDN, 0}}},
    {"gru_gates_const_gx_state", GDL_OP_GRU_GATES, f_gru_gates, 3, {{R2(4, 270), IN_CONST, 0}, {R2(4, 270), IN_RANDN, 0}, {R2(4, 90), IN_CONST, 0}}},
    {"gru_gates_const_gh", GDL_OP_GRU_GATES, f_gru_gates, 3, {{R2(3, 300), IN_RANDN, 0}, {R2(3, 300), IN_CONST, 0}, {R2(3, 100), IN_RANDN, 0}}},
    {"gru_gates_self_big", GDL_OP_GRU_GATES, f_gru_gates_self, 2, {{R2(11, 99), IN_RANDN, 0}, {R2(11, 33), IN_RANDN, 0}}},
};
#define NRNN_GPU_CASES ((int)(sizeof rnn_gpu_cases / sizeof rnn_gpu_cases[0]))
static parity_run rnn_gpu_runs[2 * NRNN_GPU_CASES];

/* the module's loss on dev: sum(out*w0) + sum(h_n*w1) (+ sum(c_n*w2)), its backward run */
static int rnn_gpu_step(gdl_module *m, int lstm, gdl_tensor *const *in, gdl_tensor **out) {
    gdl_tensor *hn, *cn = NULL, *l;
    int rc;
    gdl_manual_seed(21); /* one dropout mask on both devices */
    rc = lstm ? gdl_nn_lstm_forward(m, in[0], in[1], in[2], out, &hn, &cn) : gdl_nn_gru_forward(m, in[0], in[1], out, &hn);
    if (rc < 0) return -1;
    l = gdl_add(gdl_sum(gdl_mul(*out, in[3])), gdl_sum(gdl_mul(hn, in[4])));
    if (lstm) l = gdl_add(l, gdl_sum(gdl_mul(cn, in[5])));
    return l ? gdl_backward(l) : -1;
}

TEST rnn_module_parity(void *arg) {
    const int lstm = arg != NULL;
    const int64_t B = 3, T = 5, I = 7, H = 90;
    int64_t shapes[6][3] = {{B, T, I}, {4, B, H}, {4, B, H}, {B, T, 2 * H}, {4, B, H}, {4, B, H}};
    gdl_module *mc, *mg;
    gdl_tensor *in[6], *ing[6], *outc, *outg, *tc[20], *tg[20];
    const char *names[20];
    int k, n;
    double e;
    gdl_manual_seed(8);
    mc = lstm ? gdl_nn_lstm(I, H, 2, 1, 1, 0.3, 1) : gdl_nn_gru(I, H, 2, 1, 1, 0.3, 1);
    gdl_manual_seed(8);
    mg = lstm ? gdl_nn_lstm(I, H, 2, 1, 1, 0.3, 1) : gdl_nn_gru(I, H, 2, 1, 1, 0.3, 1);
    ASSERT_NOT_NULL(mc);
    ASSERT_NOT_NULL(mg);
    ASSERT_EQ(0, gdl_module_to(mg, GPU));
    for (k = 0; k < 6; k++) {
        ASSERT_NOT_NULL(in[k] = gdl_randn(3, shapes[k], gdl_cpu()));
        if (k < 3) gdl_set_requires_grad(in[k], 1);
        ASSERT_NOT_NULL(ing[k] = gdl_to(in[k], GPU));
    }
    /* a CPU input to the GPU module: refused, naming both devices */
    gdl_arena_reset();
    ASSERT_EQ(-1, lstm ? gdl_nn_lstm_forward(mg, in[0], NULL, NULL, &outg, NULL, NULL) : gdl_nn_gru_forward(mg, in[0], NULL, &outg, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "is on cpu but the parameters are on cuda:0");
    ASSERT_EQ(-1, lstm ? gdl_nn_lstm_forward(mg, ing[0], in[1], NULL, &outg, NULL, NULL) : gdl_nn_gru_forward(mg, ing[0], in[1], &outg, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "expected all tensors on the same device");
    gdl_arena_reset();
    if (rnn_gpu_step(mc, lstm, in, &outc) < 0 || rnn_gpu_step(mg, lstm, ing, &outg) < 0)
        FAILf("step failed: %s", gdl_last_error());
    if (!((e = rel_err(outc, outg)) < 1e-5)) FAILf("output differs: relative error %.3g", e);
    n = gdl_module_named_tensors(mc, GDL_PARAMS, names, tc, 20);
    ASSERT_EQ(16, n);
    ASSERT_EQ(n, gdl_module_named_tensors(mg, GDL_PARAMS, NULL, tg, 20));
    for (k = 0; k < n; k++) {
        if (!tc[k]->grad || !tg[k]->grad) FAILf("%s has no gradient", names[k]);
        if (!((e = rel_err(tc[k]->grad, tg[k]->grad)) < 1e-5)) FAILf("gradient of %s differs: relative error %.3g", names[k], e);
    }
    for (k = 0; k < (lstm ? 3 : 2); k++)
        if (!((e = rel_err(in[k]->grad, ing[k]->grad)) < 1e-5)) FAILf("gradient of input %d differs: relative error %.3g", k, e);
    for (k = 0; k < 6; k++) {
        gdl_free(in[k]);
        gdl_free(ing[k]);
    }
    gdl_module_free(mc);
    gdl_module_free(mg);
    gdl_arena_reset();
    PASS();
}

/* an LSTM with proj_size over sequences of different lengths, the lengths an i32 tensor on the GPU (read
   back to the host): the GPU module's outputs, states and every gradient against the CPU's */
TEST rnn_lengths_parity(void) {
    const int32_t lens[3] = {5, 2, 4};
    gdl_rnn_opts o = gdl_rnn_defaults();
    gdl_module *m[2];
    gdl_tensor *x[2], *lt[2], *outs[2][3], *tc[24], *tg[24], *lc = NULL;
    gdl_forward_opts fo = gdl_forward_defaults();
    int d, k, n;
    double e;
    o.num_layers = 2, o.bidirectional = 1, o.batch_first = 1, o.proj_size = 40;
    for (d = 0; d < 2; d++) {
        gdl_manual_seed(9);
        ASSERT_NOT_NULL(m[d] = gdl_nn_lstm_ex(7, 90, &o));
    }
    ASSERT_EQ(0, gdl_module_to(m[1], GPU));
    ASSERT_NOT_NULL(x[0] = gdl_randn(GDL_DIMS(3, 6, 7), gdl_cpu()));
    gdl_set_requires_grad(x[0], 1);
    ASSERT_NOT_NULL(x[1] = gdl_to(x[0], GPU));
    ASSERT_NOT_NULL(lc = gdl_from_array(lens, GDL_DIMS(3), GDL_I32, gdl_cpu()));
    lt[0] = lc;
    ASSERT_NOT_NULL(lt[1] = gdl_to(lc, GPU));
    gdl_arena_reset();
    for (d = 0; d < 2; d++) {
        gdl_tensor *l;
        fo.lengths_tensor = lt[d];
        ASSERT_EQ(3, gdl_forward_ex(m[d], x[d], &fo, outs[d], 3));
        l = gdl_add(gdl_sum(gdl_mul(outs[d][0], outs[d][0])), gdl_add(gdl_sum(outs[d][1]), gdl_sum(outs[d][2])));
        ASSERT_EQ(0, gdl_backward(l));
    }
    ASSERT_EQ(5, outs[1][0]->shape[1]); /* max(lengths) steps */
    for (k = 0; k < 3; k++)
        if (!((e = rel_err(outs[0][k], outs[1][k])) < 1e-5)) FAILf("output %d differs: relative error %.3g", k, e);
    n = gdl_module_named_tensors(m[0], GDL_PARAMS, NULL, tc, 24);
    ASSERT_EQ(20, n);
    ASSERT_EQ(n, gdl_module_named_tensors(m[1], GDL_PARAMS, NULL, tg, 24));
    for (k = 0; k < n; k++)
        if (!((e = rel_err(tc[k]->grad, tg[k]->grad)) < 1e-5)) FAILf("gradient %d differs: relative error %.3g", k, e);
    if (!((e = rel_err(x[0]->grad, x[1]->grad)) < 1e-5)) FAILf("the input's gradient differs: relative error %.3g", e);
    for (d = 0; d < 2; d++) {
        gdl_free(x[d]);
        gdl_free(lt[d]);
        gdl_module_free(m[d]);
    }
    PASS();
}

SUITE(rnn) {
    int i;
    char name[96];
    for (i = 0; i < NRNN_GPU_CASES; i++) {
        rnn_gpu_runs[2 * i].c = rnn_gpu_runs[2 * i + 1].c = &rnn_gpu_cases[i];
        rnn_gpu_runs[2 * i + 1].fanout = 1;
        RUN_GPU_NAMED(rnn_gpu_cases[i].name, parity, &rnn_gpu_runs[2 * i]);
        snprintf(name, sizeof name, "%s_fanout", rnn_gpu_cases[i].name);
        RUN_GPU_NAMED(name, parity, &rnn_gpu_runs[2 * i + 1]);
    }
    RUN_GPU_NAMED("lstm_module_parity", rnn_module_parity, (void *)"lstm");
    RUN_GPU_NAMED("gru_module_parity", rnn_module_parity, NULL);
    RUN_GPU(rnn_lengths_parity);
}

/* ---- suites ---- */

static parity_run table_runs[2 * NCASES], gpu_runs[2 * NGPU_CASES];

SUITE(ops) {
    int i;
    char name[96];
    for (i = 0; i < NCASES; i++) {
        table_runs[2 * i].c = table_runs[2 * i + 1].c = &cases[i];
        table_runs[2 * i + 1].fanout = 1;
        RUN_GPU_NAMED(cases[i].name, parity, &table_runs[2 * i]);
        snprintf(name, sizeof name, "%s_fanout", cases[i].name);
        RUN_GPU_NAMED(name, parity, &table_runs[2 * i + 1]);
    }
}
SUITE(kernel_paths) {
    int i;
    char name[96];
    for (i = 0; i < NGPU_CASES; i++) {
        gpu_runs[2 * i].c = gpu_runs[2 * i + 1].c = &gpu_cases[i];
        gpu_runs[2 * i + 1].fanout = 1;
        RUN_GPU_NAMED(gpu_cases[i].name, parity, &gpu_runs[2 * i]);
        snprintf(name, sizeof name, "%s_fanout", gpu_cases[i].name);
        RUN_GPU_NAMED(name, parity, &gpu_runs[2 * i + 1]);
    }
    RUN_GPU(casts_all_pairs);
    RUN_GPU(argmax_ties_and_nan);
    RUN_GPU(embedding_backward_exact_counts);
    RUN_GPU(gemm_k0_does_not_read_c);
#ifdef GPUDL_EMU
    RUN_GPU(gemm_sums_batches);
#endif
}
/* run-time dtypes (tests/dtype_parity.h): every op_cases row in bf16 and f16 against f32; matmul and linear
   in bf16 / f16 through cublasGemmEx / GemmStridedBatchedEx, off the block sizes; promotion; the native
   bf16 / f16 elementwise kernels (the cast path's bits, half of f32's arena bytes, autocast); conv2d,
   pooling and batch_norm natively in bf16 / f16 */
static dtype_run dtype_runs[4 * NCASES];
static dtype_run cnn_runs[2 * DTYPE_NCNN];
/* The CUDA backend's bf16 backwards that take accumulate (unary_backward, maxpool_backward's beta): with
   0, a gradient holding old values comes out as the one accumulated into zeros, bit for bit. */
TEST lowp_backwards_set_gpu(void) {
    const gdl_backend *gb = gdl_cuda_backend();
    enum { n = 48 };
    const size_t bytes = n * sizeof(uint16_t);
    uint16_t h[n], set[n], added[n];
    gdl_conv_geom g = {1, 3, 4, 4, 2, 2, 2, 2, 0, 0, 1, 1, 2, 2};
    void *x, *y, *gy, *gs, *ga, *idx;
    int i, which;
    ASSERT_EQ(0, gdl_cuda_set_device(0));
    x = gb->rt.alloc(bytes), y = gb->rt.alloc(bytes), gy = gb->rt.alloc(bytes);
    gs = gb->rt.alloc(bytes), ga = gb->rt.alloc(bytes), idx = gb->rt.alloc(n * sizeof(int32_t));
    ASSERT(x && y && gy && gs && ga && idx);
    for (i = 0; i < n; i++) h[i] = gdl_f32_to_bf16((float)((i * 7) % 11) - 5.25f);
    ASSERT_EQ(0, gb->rt.copy(x, h, bytes, 0));
    for (i = 0; i < n; i++) h[i] = gdl_f32_to_bf16(0.5f + (float)(i % 5));
    ASSERT_EQ(0, gb->rt.copy(gy, h, bytes, 0));
    for (which = 0; which < 2; which++) {
        for (i = 0; i < n; i++) h[i] = gdl_f32_to_bf16(2.0f);
        ASSERT(gb->rt.copy(gs, h, bytes, 0) == 0 && gb->rt.memset0(ga, bytes) == 0);
        if (which == 0) {
            ASSERT_EQ(0, gb->k.unary(GDL_BF16, GDL_UN_SIGMOID, n, x, y, 0));
            ASSERT_EQ(0, gb->k.unary_backward(GDL_BF16, GDL_UN_SIGMOID, n, x, y, gy, gs, 0, 0));
            ASSERT_EQ(0, gb->k.unary_backward(GDL_BF16, GDL_UN_SIGMOID, n, x, y, gy, ga, 0, 1));
        } else { /* 3 planes of 4 x 4, windows 2 x 2 */
            ASSERT_EQ(0, gb->k.maxpool(GDL_BF16, &g, x, y, (int32_t *)idx));
            ASSERT_EQ(0, gb->k.maxpool_backward(GDL_BF16, &g, gy, (const int32_t *)idx, gs, 0));
            ASSERT_EQ(0, gb->k.maxpool_backward(GDL_BF16, &g, gy, (const int32_t *)idx, ga, 1));
        }
        ASSERT(gb->rt.copy(set, gs, bytes, 1) == 0 && gb->rt.copy(added, ga, bytes, 1) == 0);
        for (i = 0; i < n; i++)
            if (set[i] != added[i]) FAILf("entry %d: gx[%d] 0x%04x set, 0x%04x added to zeros", which, i, set[i], added[i]);
    }
    gb->rt.free(x), gb->rt.free(y), gb->rt.free(gy), gb->rt.free(gs), gb->rt.free(ga), gb->rt.free(idx);
    PASS();
}

SUITE(dtypes) {
    static gdl_device dev;
    int i, j;
    char name[128];
    dev = GPU;
    for (i = 0; i < NCASES; i++)
        for (j = 0; j < 4; j++) {
            dtype_run *r = &dtype_runs[4 * i + j];
            r->c = i;
            r->dt = j < 2 ? GDL_BF16 : GDL_F16;
            r->fanout = j & 1;
            r->dev = GPU;
            snprintf(name, sizeof name, "%s_%s%s", cases[i].name, gdl_dtype_name(r->dt), r->fanout ? "_fanout" : "");
            RUN_GPU_NAMED(name, dtype_parity, r);
        }
    RUN_GPU_NAMED("dtype_gemm_sizes_gpu", dtype_gemm_sizes, &dev);
    RUN_GPU_NAMED("dtype_promotion_gpu", dtype_promotion, &dev);
    RUN_GPU_NAMED("dtype_native_elementwise_gpu", dtype_native_elementwise, &dev);
    RUN_GPU(lowp_backwards_set_gpu);
    for (i = 0; i < DTYPE_NCNN; i++)
        for (j = 0; j < 2; j++) {
            dtype_run *r = &cnn_runs[2 * i + j];
            r->c = i;
            r->dt = j ? GDL_F16 : GDL_BF16;
            r->dev = GPU;
            snprintf(name, sizeof name, "native_%s_%s", dtype_cnn_cases[i].name, gdl_dtype_name(r->dt));
            RUN_GPU_NAMED(name, dtype_native_cnn, r);
        }
}
/* autocast on the GPU (tests/autocast_cases.h): each op's dtype by its class, the cast cache, nesting, loss
   curves (fewer steps than the CPU's 200: 30 on the emulator, where every kernel runs on the host) */
SUITE(autocast) {
#ifdef GPUDL_EMU
    enum { STEPS = 30 };
#else
    enum { STEPS = 200 };
#endif
    static ac_run ac[] = {{GDL_BF16, {GDL_DEVICE_CPU, 0}, 0}, {GDL_F16, {GDL_DEVICE_CPU, 0}, 0},
                          {GDL_BF16, {GDL_DEVICE_CPU, 0}, 0}, {GDL_BF16, {GDL_DEVICE_CPU, 0}, 0},
                          {GDL_BF16, {GDL_DEVICE_CPU, 0}, STEPS}, {GDL_F16, {GDL_DEVICE_CPU, 0}, STEPS}};
    static const char *names[] = {"ops_bf16", "ops_f16", "cache_bf16", "nesting_errors", "training_bf16", "training_f16"};
    static enum harness_result (*const fns[])(void *) = {autocast_ops, autocast_ops, autocast_cache,
                                                         autocast_nesting_errors, autocast_training, autocast_training};
    int i;
    for (i = 0; i < 6; i++) {
        ac[i].dev = GPU;
        RUN_GPU_NAMED(names[i], fns[i], &ac[i]);
    }
}
SUITE(optim) {
    static const opt_kind kinds[] = {
        {"sgd", 0, 0.1, 0, 0, 0, 0},
        {"sgd_momentum_dampening_wd", 0, 0.05, 0.9, 0.3, 0.01, 0},
        {"sgd_nesterov_wd", 0, 0.05, 0.8, 0, 0.02, 1},
        {"adam_l2", 1, 0.01, 0, 0, 0.05, 0},
        {"adamw", 2, 0.01, 0, 0, 0.1, 0},
    };
    int i;
    for (i = 0; i < (int)(sizeof kinds / sizeof kinds[0]); i++)
        RUN_GPU_NAMED(kinds[i].name, optimizer_parity, &kinds[i]);
    for (i = 0; i < (int)(sizeof kinds / sizeof kinds[0]); i++) {
        char name[64];
        snprintf(name, sizeof name, "flat_buffer_gpu_%s", kinds[i].name);
        RUN_GPU_NAMED(name, flat_buffer_gpu, &kinds[i]);
    }
    RUN_GPU2(flat_buffer_follows_module_to);
    RUN_GPU2(ema_gpu_parity);
    RUN_GPU(clip_grad_norm_parity);
    RUN_GPU(anomaly_mode_parity);
}
/* ---- master weights on the GPU (tests/master_cases.h): the kernels' low paths bitwise, one launch a step ---- */
TEST master_weights_bitwise(void *arg) {
    const mw_kind *k = (const mw_kind *)arg;
    return mw_bitwise_case(GPU, k);
}
/* a steady-state step with master weights: zero_grad one memset, the step one launch, no copy, no wait */
TEST master_weights_one_launch(void) {
#ifdef GPUDL_EMU
    int64_t n = 3000, sy0;
    long l0, m0, h0;
    gdl_tensor *p, *q, *loss, *ps[2];
    gdl_optimizer *opt;
    int s;
    ASSERT_NOT_NULL(p = gdl_ones(1, &n, GDL_F32, GPU));
    ASSERT_NOT_NULL(q = gdl_ones(1, &n, GDL_F32, GPU));
    ASSERT_EQ(0, gdl_set_requires_grad(p, 1));
    ASSERT_EQ(0, gdl_set_requires_grad(q, 1));
    ps[0] = p, ps[1] = q;
    ASSERT_NOT_NULL(opt = gdl_adamw_new(1e-3, 0.9, 0.999, 1e-8, 0.01));
    ASSERT_EQ(0, gdl_optim_add_params(opt, ps, 2, -1, -1));
    ASSERT_EQ(0, gdl_optim_set_master_weights(opt, GDL_BF16));
    for (s = 0; s < 4; s++) {
        gdl_arena_reset();
        m0 = gdl_emu_count("memset");
        l0 = gdl_emu_count("launch");
        ASSERT_EQ(0, gdl_zero_grad(opt));
        if (s > 0) ASSERT_EQ(1, gdl_emu_count("memset") - m0);
        if (s > 0) ASSERT_EQ(0, gdl_emu_count("launch") - l0);
        ASSERT_NOT_NULL(loss = gdl_add(gdl_sum(p), gdl_sum(q)));
        ASSERT_EQ(0, gdl_backward(loss));
        l0 = gdl_emu_count("launch");
        h0 = gdl_emu_count("h2d");
        sy0 = gdl_sync_count();
        ASSERT_EQ(0, gdl_step(opt));
        if (s > 0) {
            ASSERT_EQ(1, gdl_emu_count("launch") - l0);
            ASSERT_EQ(0, gdl_emu_count("h2d") - h0);
            ASSERT_EQ(0, gdl_sync_count() - sy0);
        }
    }
    gdl_optim_free(opt);
    gdl_free(p);
    gdl_free(q);
    PASS();
#else
    SKIPm("counts launches on the emulator");
#endif
}
/* masters follow the model: 3 steps on cuda:0, gdl_module_to(cuda:1), 3 more, bitwise (masters and bf16
   parameters) a reference that stays on cuda:0 */
TEST master_weights_follow_module_to(void) {
    int64_t xs[2] = {5, 6}, ys[1] = {5};
    int32_t labels[5] = {0, 2, 1, 1, 0};
    gdl_module *a, *b;
    gdl_optimizer *oa, *ob;
    gdl_tensor *x, *y, *ta[4], *tb[4];
    int s, k;
    gdl_manual_seed(3);
    ASSERT_NOT_NULL(x = gdl_randn(2, xs, gdl_cpu()));
    ASSERT_NOT_NULL(y = gdl_from_array(labels, 1, ys, GDL_I32, gdl_cpu()));
    ASSERT_NOT_NULL(a = flat_net());
    ASSERT_NOT_NULL(b = flat_net());
    ASSERT_EQ(0, gdl_module_to(a, gdl_cuda(0)));
    ASSERT_EQ(0, gdl_module_to(b, gdl_cuda(0)));
    ASSERT_NOT_NULL(oa = gdl_adamw_new(0.02, 0.9, 0.999, 1e-8, 0.01));
    ASSERT_NOT_NULL(ob = gdl_adamw_new(0.02, 0.9, 0.999, 1e-8, 0.01));
    ASSERT_EQ(0, gdl_optim_add_module(oa, a, 0));
    ASSERT_EQ(0, gdl_optim_add_module(ob, b, 0));
    ASSERT_EQ(0, gdl_optim_set_master_weights(oa, GDL_BF16));
    ASSERT_EQ(0, gdl_optim_set_master_weights(ob, GDL_BF16));
    for (s = 0; s < 6; s++) {
        if (s == 3) ASSERT_EQ(0, gdl_module_to(b, gdl_cuda(1)));
        ASSERT_EQ(0, flat_net_step(a, oa, x, y));
        ASSERT_EQ(0, flat_net_step(b, ob, x, y));
    }
    ASSERT_EQ(4, gdl_module_named_tensors(a, GDL_PARAMS, NULL, ta, 4));
    ASSERT_EQ(4, gdl_module_named_tensors(b, GDL_PARAMS, NULL, tb, 4));
    for (k = 0; k < 4; k++) {
        float fa[64], fb[64];
        uint16_t ha[64], hb[64];
        gdl_tensor *ma = gdl_optim_master_weight(oa, k), *mb = gdl_optim_master_weight(ob, k);
        ASSERT(ma && mb && ma->numel <= 64);
        ASSERT(gdl_device_equal(mb->device, gdl_cuda(1)));
        ASSERT(gdl_device_equal(tb[k]->device, gdl_cuda(1)));
        ASSERT_EQ(GDL_BF16, tb[k]->dtype);
        ASSERT_EQ(0, gdl_copy_to_host(ma, fa, sizeof(float) * (size_t)ma->numel));
        ASSERT_EQ(0, gdl_copy_to_host(mb, fb, sizeof(float) * (size_t)ma->numel));
        ASSERT_EQ(0, gdl_copy_to_host(ta[k], ha, 2 * (size_t)ma->numel));
        ASSERT_EQ(0, gdl_copy_to_host(tb[k], hb, 2 * (size_t)ma->numel));
        ASSERTm("masters bitwise after the move", !memcmp(fa, fb, sizeof(float) * (size_t)ma->numel));
        ASSERTm("bf16 parameters bitwise after the move", !memcmp(ha, hb, 2 * (size_t)ma->numel));
    }
    gdl_optim_free(oa);
    gdl_optim_free(ob);
    gdl_module_free(a);
    gdl_module_free(b);
    gdl_free(x);
    gdl_free(y);
    PASS();
}
TEST master_weights_mlp(void) {
    return mw_mlp_case(GPU, 50);
}
TEST master_weights_checkpoint(void) {
    return mw_checkpoint_case(GPU, harness_tmp("test_cuda_master.safetensors"));
}
SUITE(master_weights) {
    size_t i;
    for (i = 0; i < sizeof mw_kinds / sizeof mw_kinds[0]; i++)
        RUN_GPU_NAMED(mw_kinds[i].name, master_weights_bitwise, &mw_kinds[i]);
    RUN_GPU(master_weights_one_launch);
    RUN_GPU2(master_weights_follow_module_to);
    RUN_GPU_ON("master_weights_memory", mw_memory_case);
    RUN_GPU(master_weights_mlp);
    RUN_GPU(master_weights_checkpoint);
    RUN_GPU_ON("master_weights_errors", mw_errors_case);
    RUN_GPU_ON("master_weights_special_values", mw_special_values_case);
}

SUITE(training) {
    static const int mlp = 0, cnn = 1;
    RUN_GPU_NAMED("mlp_steps", train_parity, &mlp);
    RUN_GPU_NAMED("cnn_steps", train_parity, &cnn);
}
SUITE(devices) {
    RUN_GPU(device_mismatch_error);
    RUN_GPU(transfers_round_trip);
    RUN_GPU(overlapping_device_copies);
    RUN_GPU(allocator_steady_state_and_oom);
    RUN_GPU(loader_pinned_matches_cpu);
    RUN_GPU(loader_text_matches_cpu);
    RUN_GPU(loader_recipe_matches_cpu);
    {
        static const int inline_, two = 2;
        RUN_GPU_NAMED("loader_steps_without_host_waits_inline", loader_steps_without_host_waits, &inline_);
        RUN_GPU_NAMED("loader_steps_without_host_waits_2_workers", loader_steps_without_host_waits, &two);
    }
    RUN_GPU2(two_devices);
    RUN_GPU2(model_parallel_two_devices);
    RUN_GPU(fit_steps_without_host_sync);
    RUN_GPU2(host_threads_own_devices);
    RUN_GPU(injected_alloc_and_launch_failures);
}

/* the recurrent modules, the sequence ops and the Transformer modules against PyTorch's float64
   values (tests/torch_parity.h; the CPU's float64 twin is tests/test_torch_parity.c), on the GPU in
   f32: within 2e-5 of (1 + |torch's|) (the largest seen on the emulator is 2.2e-6, f32's rounding
   over these small sums); indices exact */
#define TORCH_PARITY_TOL_F32 2e-5
TEST torch_parity_rnn(void) {
    TP_CHECK_FILE("rnn", GPU, TORCH_PARITY_TOL_F32, 9);
    PASS();
}
TEST torch_parity_seq_ops(void) {
    TP_CHECK_FILE("seq_ops", GPU, TORCH_PARITY_TOL_F32, 18);
    PASS();
}
TEST torch_parity_transformer(void) {
    TP_CHECK_FILE("transformer", GPU, TORCH_PARITY_TOL_F32, TF_NCASES);
    PASS();
}
SUITE(torch_parity) {
    RUN_GPU(torch_parity_rnn);
    RUN_GPU(torch_parity_seq_ops);
    RUN_GPU(torch_parity_transformer);
}

SUITE(streams) { RUN_GPU(compute_stream_only); }
SUITE(faults) {
    int i;
    for (i = 0; i < (int)(sizeof fault_kinds / sizeof fault_kinds[0]); i++)
        RUN_GPU_NAMED(fault_kinds[i].name, optimizer_step_one_launch_all_or_nothing, &fault_kinds[i]);
    RUN_GPU(cublas_failure_mid_step);
    RUN_GPU(oom_at_every_allocation_of_a_step);
    RUN_GPU(fit_recovers_from_oom);
}

/* ---- monitoring: the caching allocator's counters, the profiler, NVML ---- */

TEST cuda_memory_stats(void) {
    gdl_memory_status s;
    gdl_arena_reset();
    gdl_cuda_release_cache(); /* no cached block may serve the pattern's first requests */
    ASSERT_EQ(0, gdl_memory_stats(GPU, &s));
    ASSERT_EQ((long long)s.allocated, (long long)s.reserved); /* nothing cached now */
    CHECK_CALL(mc_memory_pattern(GPU, 512, 1));
    /* an emptied cache is one release, and leaves reserved = allocated */
    ASSERT_EQ(0, gdl_memory_stats(GPU, &s));
    {
        int64_t rel = s.cache_releases;
        gdl_cuda_release_cache();
        ASSERT_EQ(0, gdl_memory_stats(GPU, &s));
        ASSERT_EQ(rel + 1, s.cache_releases);
        ASSERT_EQ((long long)s.allocated, (long long)s.reserved);
    }
    ASSERT_EQ(-1, gdl_memory_stats(gdl_cuda(gdl_cuda_device_count()), &s));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_memory_stats: device cuda:");
    PASS();
}

/* one launch per gdl_relu (the unary kernel) */
TEST cuda_profile(void) {
    return mc_profile_sequence(GPU, 1, harness_tmp("test_cuda_trace.json"));
}

#if defined(GPUDL_EMU) && defined(FAKE_NVML) && !defined(_WIN32)
int setenv(const char *name, const char *value, int overwrite); /* POSIX; hidden by -std=c99 */
/* The stand-in NVML lists the emulator's cuda:1 first: stats follow the PCI bus id, not the index. */
TEST gpu_stats_by_pci_bus_id(void) {
    gdl_gpu_status s;
    setenv("GPUDL_NVML_LIB", FAKE_NVML, 1);
    ASSERT_EQ(gdl_cuda_device_count(), gdl_gpu_count()); /* the indices gdl_gpu_stats takes are CUDA's */
    ASSERT_EQ(0, gdl_gpu_stats(0, &s));
    ASSERT_STR_EQ("Fake Orin", s.name); /* NVML's device 1, bus 0000:10:00.0 */
    ASSERT_EQ(0, gdl_gpu_stats(1, &s));
    ASSERT_STR_EQ("Fake H100 80GB HBM3", s.name);
    ASSERT_EQ(-1, gdl_gpu_stats(2, &s));
    ASSERT_STR_EQ("gdl_gpu_stats: no CUDA device 2 (2 available)", gdl_last_error());
    PASS();
}
#endif

SUITE(monitor) {
#if defined(GPUDL_EMU) && defined(FAKE_NVML) && !defined(_WIN32)
    RUN_GPU2(gpu_stats_by_pci_bus_id); /* first: NVML is loaded once per process */
#endif
    RUN_GPU(cuda_memory_stats);
    RUN_GPU_AS("cuda_profile_errors", mc_profile_errors);
    RUN_GPU(cuda_profile);
}

/* ---- INT8: the int8 kernels of gpudl_cuda.cu against host integer references, quantized
   models on the GPU against the CPU ---- */

/* the int8 GEMM C = A W^T of the CUDA backend's entries (a cuBLAS shape, or the fallback's) against an int64
   host sum and the CPU's int8 GEMM, A and W filled by `fill` (0 random, 1 the extremes: 255 x -128 rows and 0 /
   127 rows); the launches it took (cuBLAS: shift, GEMM, unshift = 3; the fallback: 1) */
static enum harness_result q8_gemm_one(int M, int N, int K, int fill, int want_launches) {
    const gdl_backend *gb = gdl_cuda_backend();
    const int KP = (K + 3) / 4 * 4;
    uint8_t *A = (uint8_t *)malloc((size_t)M * KP + 1);
    int8_t *W = (int8_t *)malloc((size_t)N * K + 1);
    int32_t *C = (int32_t *)malloc(sizeof(int32_t) * (size_t)M * N + 4), *R = (int32_t *)malloc(sizeof(int32_t) * (size_t)M * N + 4);
    int32_t *colsum = (int32_t *)calloc((size_t)N + 1, sizeof(int32_t));
    void *dA, *dC, *qw;
    int64_t i, n, k, l0;
    uint32_t r = 12345u + (uint32_t)(M * 131 + N * 7 + K);
    ASSERT(A && W && C && R && colsum);
    for (i = 0; i < (int64_t)M * KP; i++) {
        r = r * 1664525u + 1013904223u;
        A[i] = fill ? (uint8_t)((i / KP) % 2 ? 255 : 0) : (uint8_t)(r >> 24);
    }
    for (i = 0; i < (int64_t)N * K; i++) {
        r = r * 1664525u + 1013904223u;
        W[i] = fill ? (int8_t)((i / K) % 3 == 0 ? -128 : (i / K) % 3 == 1 ? 127 : (int8_t)(r >> 24)) : (int8_t)(r >> 24);
        colsum[i / K] += W[i];
    }
    for (i = 0; i < M; i++)
        for (n = 0; n < N; n++) {
            int64_t s = 0;
            for (k = 0; k < K; k++) s += (int64_t)A[i * KP + k] * W[n * K + k];
            ASSERT(s >= INT32_MIN && s <= INT32_MAX);
            R[i * N + n] = (int32_t)s;
        }
    ASSERT_NOT_NULL(gdl__be("test", GPU));
    ASSERT_NOT_NULL(qw = gb->k.qweight_new(N, K, W, colsum));
    ASSERT_NOT_NULL(dA = gb->rt.alloc((size_t)M * KP + 1));
    ASSERT_NOT_NULL(dC = gb->rt.alloc(sizeof(int32_t) * (size_t)M * N + 4));
    ASSERT_EQ(0, gb->rt.copy(dA, A, (size_t)M * KP, 0));
    l0 = gb->rt.launch_count();
    ASSERT_EQ(0, gb->k.qgemm(M, (const uint8_t *)dA, KP, qw, (int32_t *)dC, N));
    ASSERT_EQ(want_launches, (int)(gb->rt.launch_count() - l0));
    ASSERT_EQ(0, gb->rt.copy(C, dC, sizeof(int32_t) * (size_t)M * N, 1));
    ASSERTm("int8 GEMM on the GPU equals the int64 sums", !memcmp(C, R, sizeof(int32_t) * (size_t)M * N));
    ASSERT_EQ(0, gdl_gemm_u8s8_cpu(M, N, K, A, KP, W, K, C, N));
    ASSERTm("the CPU's int8 GEMM equals the int64 sums", !memcmp(C, R, sizeof(int32_t) * (size_t)M * N));
    gb->k.qweight_free(qw);
    gb->rt.free(dA);
    gb->rt.free(dC);
    free(A), free(W), free(C), free(R), free(colsum);
    PASS();
}

TEST q8_gemm_paths(void) {
    /* M, N, K, fill, launches: multiples of 4 take cuBLAS (K padded to 4 inside), the rest the fallback */
    static const int cases[][5] = {{8, 8, 16, 0, 3},    {4, 12, 13, 0, 3},  {5, 7, 13, 0, 1},   {3, 8, 8, 0, 1},
                                   {8, 6, 8, 0, 1},     {1, 1, 1, 0, 1},    {33, 20, 40, 0, 1}, {36, 20, 40, 0, 3},
                                   {8, 12, 65536, 1, 3}, {6, 5, 65536, 1, 1}, {4, 4, 4096, 0, 3}, {8, 4, 0, 0, 1}};
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_CALL(q8_gemm_one(cases[i][0], cases[i][1], cases[i][2], cases[i][3], cases[i][4]));
    PASS();
}

/* quantize: ties (scale 0.5: x / s exactly k + 1/2), saturation at both ends, zero points 0 and 255, u8 and s8,
   on the GPU against nearbyintf on the host; dequantize back; gdl_quantize_per_tensor / gdl_dequantize on the
   GPU equal to the CPU's */
TEST q8_quantize_ties(void) {
    const gdl_backend *gb = gdl_cuda_backend();
    float x[64], back[64], yc[64];
    uint8_t q[64], qc[64];
    static const int32_t zps[3] = {0, 3, 255};
    static const int ranges[2][2] = {{0, 255}, {-128, 127}};
    const int n = 64;
    void *dx, *dq, *dy;
    int i, zi, ri;
    for (i = 0; i < n; i++) x[i] = (float)(i - 32) * 0.25f; /* -8 .. 7.75: every other one a tie */
    x[0] = -1000.0f, x[1] = 1000.0f, x[2] = 63.75f, x[3] = 64.25f, x[4] = -64.25f;
    ASSERT_NOT_NULL(gdl__be("test", GPU));
    ASSERT_NOT_NULL(dx = gb->rt.alloc(sizeof x));
    ASSERT_NOT_NULL(dq = gb->rt.alloc(sizeof q));
    ASSERT_NOT_NULL(dy = gb->rt.alloc(sizeof back));
    ASSERT_EQ(0, gb->rt.copy(dx, x, sizeof x, 0));
    for (ri = 0; ri < 2; ri++)
        for (zi = 0; zi < 3; zi++) {
            const int qmin = ranges[ri][0], qmax = ranges[ri][1], z = ri ? zps[zi] - 128 : zps[zi];
            ASSERT_EQ(0, gb->k.quantize(1, n, (const float *)dx, 0.5f, z, qmin, qmax, dq, n));
            ASSERT_EQ(0, gb->rt.copy(q, dq, sizeof q, 1));
            ASSERT_EQ(0, gb->k.dequantize(n, dq, qmin < 0, 0.5f, z, (float *)dy));
            ASSERT_EQ(0, gb->rt.copy(back, dy, sizeof back, 1));
            for (i = 0; i < n; i++) {
                float r = nearbyintf(x[i] * 2.0f) + (float)z;
                int v = qmin < 0 ? (int)(int8_t)q[i] : (int)q[i];
                r = r < qmin ? (float)qmin : r > qmax ? (float)qmax : r;
                if (v != (int)r) FAILm("quantize: a value off round-half-even / saturation");
                if (back[i] != (float)(v - z) * 0.5f) FAILm("dequantize: not (q - z) * s");
            }
        }
    {
        gdl_tensor *xc = gdl_from_array(x, 1, (int64_t[]){n}, GDL_F32, gdl_cpu()), *xg = gdl_to(xc, GPU), *t;
        ASSERT(xc && xg);
        ASSERT_NOT_NULL(t = gdl_quantize_per_tensor(xc, 0.3f, 7));
        memcpy(qc, t->data, sizeof qc);
        ASSERT_NOT_NULL(t = gdl_dequantize(t, 0.3f, 7));
        memcpy(yc, t->data, sizeof yc);
        ASSERT_NOT_NULL(t = gdl_quantize_per_tensor(xg, 0.3f, 7));
        ASSERT_EQ(GDL_U8, t->dtype);
        ASSERT_EQ(0, gdl_copy_to_host(t, q, sizeof q));
        ASSERTm("quantize_per_tensor: GPU == CPU", !memcmp(q, qc, sizeof q));
        ASSERT_NOT_NULL(t = gdl_dequantize(t, 0.3f, 7));
        ASSERT_EQ(0, gdl_copy_to_host(t, back, sizeof back));
        ASSERTm("dequantize: GPU == CPU", !memcmp(back, yc, sizeof back));
        gdl_free(xc);
        gdl_free(xg);
    }
    gb->rt.free(dx), gb->rt.free(dq), gb->rt.free(dy);
    gdl_arena_reset();
    PASS();
}

/* the largest |a - b| of two f32 tensors on any devices (INFINITY when the shapes differ) */
static double q8_max_diff(const gdl_tensor *a, const gdl_tensor *b) {
    float *ha = (float *)malloc(sizeof(float) * (size_t)a->numel + 4), *hb = (float *)malloc(sizeof(float) * (size_t)b->numel + 4);
    double m = a->numel == b->numel ? 0 : INFINITY;
    int64_t i;
    if (!ha || !hb || gdl_copy_to_host(a, ha, sizeof(float) * (size_t)a->numel) < 0 ||
        gdl_copy_to_host(b, hb, sizeof(float) * (size_t)b->numel) < 0)
        m = INFINITY;
    for (i = 0; m < INFINITY && i < a->numel; i++) m = fabs((double)ha[i] - hb[i]) > m ? fabs((double)ha[i] - hb[i]) : m;
    free(ha), free(hb);
    return m;
}

/* model m (quantized, on the CPU) on x [rows...] on the CPU and then moved to the GPU: the same bits (tol 0) or
   within tol; back on the CPU, the same bits */
static enum harness_result q8_model_cpu_gpu(gdl_module *q, gdl_tensor *x, double tol) {
    gdl_tensor *yc, *yg, *xg;
    float *h;
    ASSERT_NOT_NULL(yc = gdl_forward(q, x));
    ASSERT_EQ(0, gdl_module_to(q, GPU));
    ASSERT(gdl_device_equal(gdl_module_device(q), GPU));
    ASSERT_NOT_NULL(xg = gdl_to(x, GPU));
    ASSERT_NOT_NULL(yg = gdl_forward(q, xg));
    ASSERT(gdl_device_equal(yg->device, GPU));
    ASSERT_EQ(yc->numel, yg->numel);
    h = (float *)malloc(sizeof(float) * (size_t)yg->numel + 4);
    ASSERT_NOT_NULL(h);
    ASSERT_EQ(0, gdl_copy_to_host(yg, h, sizeof(float) * (size_t)yg->numel));
    if (tol == 0 ? memcmp(h, yc->data, sizeof(float) * (size_t)yg->numel) != 0 : !(q8_max_diff(yc, yg) <= tol)) {
        free(h);
        FAILf("quantized model: GPU output differs from the CPU's (by %.3g; allowed: %.3g)", q8_max_diff(yc, yg), tol);
    }
    free(h);
    ASSERT_EQ(0, gdl_module_to(q, gdl_cpu())); /* and back: the CPU path again */
    ASSERT_NOT_NULL(yg = gdl_forward(q, x));
    ASSERTm("back on the CPU: the same", !memcmp(yg->data, yc->data, sizeof(float) * (size_t)yg->numel));
    gdl_free(xg);
    gdl_arena_reset();
    PASS();
}

/* a dynamically quantized MLP: batches on (8) and off (6) cuBLAS's multiples of 4, 7 and 8-bit activations */
TEST q8_dynamic_mlp(void) {
    int rr, b;
    for (rr = 0; rr < 2; rr++)
        for (b = 0; b < 2; b++) {
            gdl_qconfig qc = gdl_qconfig_default();
            gdl_module *m, *q;
            gdl_tensor *x;
            qc.reduce_range = rr;
            gdl_manual_seed(40 + rr);
            m = gdl_nn_sequential(3, (gdl_module *[]){gdl_nn_linear(13, 32, 1), gdl_nn_relu(), gdl_nn_linear(32, 8, 1)});
            ASSERT_NOT_NULL(m);
            ASSERT_NOT_NULL(q = gdl_quantize_dynamic(m, &qc));
            ASSERT_NOT_NULL(x = gdl_randn(GDL_DIMS(b ? 8 : 6, 13), gdl_cpu()));
            CHECK_CALL(q8_model_cpu_gpu(q, x, 0));
            gdl_free(x);
            gdl_module_free(q);
            gdl_module_free(m);
        }
    PASS();
}

/* a static-PTQ conv net (Conv+BN+ReLU fused, a strided conv, a Linear), calibrated, converted, on the GPU */
TEST q8_static_convnet(void) {
    gdl_module *m, *p, *q;
    gdl_tensor *x;
    int i;
    gdl_manual_seed(7);
    m = gdl_nn_sequential(7, (gdl_module *[]){gdl_nn_conv2d(3, 8, 3, 1, 1, 1, 1, 1), gdl_nn_batchnorm2d(8), gdl_nn_relu(),
                                             gdl_nn_conv2d(8, 4, 3, 2, 1, 1, 1, 1), gdl_nn_relu(), gdl_nn_flatten(1),
                                             gdl_nn_linear(4 * 4 * 3, 5, 1)});
    ASSERT_NOT_NULL(m);
    gdl_module_train(m, 0);
    ASSERT_NOT_NULL(p = gdl_quant_prepare(m, NULL));
    for (i = 0; i < 3; i++) {
        ASSERT_NOT_NULL(x = gdl_randn(GDL_DIMS(2, 3, 7, 6), gdl_cpu()));
        ASSERT_NOT_NULL(gdl_forward(p, x));
        gdl_free(x);
    }
    ASSERT_NOT_NULL(q = gdl_quant_convert(p));
    ASSERT_NOT_NULL(x = gdl_randn(GDL_DIMS(3, 3, 7, 6), gdl_cpu()));
    CHECK_CALL(q8_model_cpu_gpu(q, x, 0));
    gdl_free(x);
    gdl_module_free(q);
    gdl_module_free(p);
    gdl_module_free(m);
    PASS();
}

TEST q8_errors(void) {
    const gdl_backend *gb = gdl_cuda_backend();
    gdl_module *m = gdl_nn_linear(13, 8, 1), *q;
    gdl_tensor *x = gdl_randn(GDL_DIMS(4, 13), gdl_cpu()), *xg, *u;
    int8_t w[8 * 13] = {0};
    int32_t cs[8] = {0};
    void *qw;
    ASSERT(m && x);
    ASSERT_NOT_NULL(xg = gdl_to(x, GPU));
    /* a float tensor given to an int8 op; an int8 one to a float op */
    ASSERT_NULL(gdl_dequantize(xg, 0.1f, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_dequantize: expected a u8 tensor, got f32 [4,13] on cuda:0");
    ASSERT_NOT_NULL(u = gdl_quantize_per_tensor(xg, 0.1f, 128));
    ASSERT_NULL(gdl_quantize_per_tensor(u, 0.1f, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_quantize_per_tensor: expected a f32 tensor, got u8 [4,13] on cuda:0");
    ASSERT_NULL(gdl_quantize_per_tensor(xg, 0.0f, 0));
    ASSERT_CONTAINS(gdl_last_error(), "bad scale 0 or zero point 0");
    /* devices mismatched: the layer on the GPU, the input on the CPU, and the other way */
    ASSERT_NOT_NULL(q = gdl_quantize_dynamic(m, NULL));
    ASSERT_EQ(0, gdl_module_to(q, GPU));
    ASSERT_NULL(gdl_forward(q, x));
    ASSERT_CONTAINS(gdl_last_error(), "expected input f32 [..., 13] on cuda:0, got f32 [4,13] on cpu (the layer "
                                      "moves with gdl_module_to)");
    ASSERT_EQ(0, gdl_module_to(q, gdl_cpu()));
    ASSERT_NULL(gdl_forward(q, xg));
    ASSERT_CONTAINS(gdl_last_error(), "expected input f32 [..., 13] on the CPU, got f32 [4,13] on cuda:0");
    /* a shape the GEMM cannot take: rows closer than K rounded up to 4 */
    ASSERT_NOT_NULL(gdl__be("test", GPU));
    ASSERT_NOT_NULL(qw = gb->k.qweight_new(8, 13, w, cs));
    ASSERT_EQ(-1, gb->k.qgemm(4, (const uint8_t *)u->data, 13, qw, (int32_t *)xg->data, 8));
    ASSERT_CONTAINS(gdl_last_error(), "the int8 GEMM cannot take M=4 (>= 0), lda=13 (>= 16: K=13 rounded up to 4)");
    gb->k.qweight_free(qw);
    gdl_module_free(q);
    gdl_module_free(m);
    gdl_free(x);
    gdl_free(xg);
    gdl_arena_reset();
    PASS();
}

/* The bounds of GPU against CPU where float arithmetic comes in: none on the emulator with its plain GEMMs,
   whose float kernels give the CPU's bits in these tests; on a GPU (cuBLAS sums in another order; the gates'
   maths), and on the emulator under GPUDL_EMU_GEMM=perturbed, which sums as a GPU would, a last bit can
   differ, and where it crosses a rounding of a (fake) quantization the result moves by a step. */
static int q8_exact(void) {
#ifdef GPUDL_EMU
    return strcmp(gdl_emu_gemm_mode(), "plain") == 0;
#else
    return 0;
#endif
}
#define Q8_FLOAT_TOL (q8_exact() ? 0.0 : 1e-5)
#define Q8_FQ_TOL (q8_exact() ? 0.0 : 0.05) /* a step of a fake quantization's grid */
#define Q8_RNN_TOL (q8_exact() ? 0.0 : 0.02) /* a 7-bit step of a hidden state (0.016) times a weight, and more */

/* dynamically quantized LSTM / GRU (2 layers, bidirectional, batch_first) on the GPU: an int8 projection gives
   the CPU's bits; the whole recurrence too on the emulator, within Q8_RNN_TOL on a GPU; quantized from a
   model living on the GPU, the same bits as quantized on the CPU and moved */
TEST q8_dynamic_rnn(void) {
    int lstm;
    for (lstm = 1; lstm >= 0; lstm--) {
        gdl_module *m, *q, *mg, *qg;
        gdl_tensor *x, *xg, *h0, *yg, *yg2, *out;
        gdl_manual_seed(50 + lstm);
        m = lstm ? gdl_nn_lstm(7, 12, 2, 1, 1, 0, 1) : gdl_nn_gru(7, 12, 2, 1, 1, 0, 1);
        ASSERT_NOT_NULL(m);
        ASSERT_NOT_NULL(q = gdl_quantize_dynamic(m, NULL));
        ASSERT_NOT_NULL(x = gdl_randn(GDL_DIMS(3, 5, 7), gdl_cpu()));
        CHECK_CALL(q8_model_cpu_gpu(gdl_module_child(q, "ih_l0"), x, 0));
        CHECK_CALL(q8_model_cpu_gpu(q, x, Q8_RNN_TOL));
        ASSERT_EQ(0, gdl_module_to(q, GPU));
        ASSERT_NOT_NULL(xg = gdl_to(x, GPU));
        ASSERT_NOT_NULL(yg = gdl_forward(q, xg));
        /* the devices mixed: refused, naming both */
        ASSERT_NULL(gdl_forward(q, x));
        ASSERT_CONTAINS(gdl_last_error(), "is on cpu but the parameters are on cuda:0");
        ASSERT_NOT_NULL(h0 = gdl_zeros(GDL_DIMS(4, 3, 12), GDL_F32, gdl_cpu()));
        ASSERT_EQ(-1, lstm ? gdl_nn_lstm_forward(q, xg, h0, NULL, &out, NULL, NULL) : gdl_nn_gru_forward(q, xg, h0, &out, NULL));
        ASSERT_CONTAINS(gdl_last_error(), "expected all tensors on the same device");
        /* made from a model on the GPU: placed there, the same bits */
        ASSERT_NOT_NULL(mg = lstm ? gdl_nn_lstm(7, 12, 2, 1, 1, 0, 1) : gdl_nn_gru(7, 12, 2, 1, 1, 0, 1));
        {
            const char *names[16];
            gdl_tensor *src[16], *dst[16];
            int n = gdl_module_named_tensors(m, GDL_PARAMS, names, src, 16), k;
            ASSERT_EQ(n, gdl_module_named_tensors(mg, GDL_PARAMS, NULL, dst, 16));
            for (k = 0; k < n; k++) ASSERT_EQ(0, gdl_copy_(dst[k], src[k]));
        }
        ASSERT_EQ(0, gdl_module_to(mg, GPU));
        ASSERT_NOT_NULL(qg = gdl_quantize_dynamic(mg, NULL));
        ASSERT(gdl_device_equal(gdl_module_device(qg), GPU));
        ASSERT_NOT_NULL(yg2 = gdl_forward(qg, xg));
        ASSERTm("quantized on the GPU: the bits of the model quantized on the CPU", q8_max_diff(yg, yg2) == 0);
        gdl_free(x), gdl_free(xg), gdl_free(h0);
        gdl_module_free(m), gdl_module_free(q), gdl_module_free(mg), gdl_module_free(qg);
        gdl_arena_reset();
    }
    PASS();
}

/* Two saved quantized models compared tensor by tensor: every name in both with the same dtype and shape;
   int8 weights: *wdiff the count of values that differ, *wmax the largest difference; F32 tensors (scales,
   biases): *frel the largest relative difference, except act (a name) whose values must be equal. */
static enum harness_result q8_files(const char *pa, const char *pb, const char *act, int64_t *wdiff, int *wmax,
                                    double *frel) {
    gdl_st_file a, b;
    int i;
    int64_t k;
    *wdiff = 0;
    *wmax = 0;
    *frel = 0;
    ASSERT_EQ(0, gdl_st_read(pa, &a));
    ASSERT_EQ(0, gdl_st_read(pb, &b));
    ASSERT_EQ(a.n, b.n);
    for (i = 0; i < a.n; i++) {
        const gdl_st_entry *ea = &a.entries[i], *eb = gdl_st_find(&b, ea->name);
        const unsigned char *da = a.data + ea->begin, *db;
        if (!eb) FAILf("%s is in one file only", ea->name);
        db = b.data + eb->begin;
        ASSERT_STR_EQ(ea->dtype, eb->dtype);
        ASSERT_EQ(ea->end - ea->begin, eb->end - eb->begin);
        if (!strcmp(ea->dtype, "I8")) {
            for (k = 0; k < (int64_t)(ea->end - ea->begin); k++) {
                const int d = abs((int)(int8_t)da[k] - (int)(int8_t)db[k]);
                *wdiff += d != 0;
                *wmax = d > *wmax ? d : *wmax;
            }
        } else if (!strcmp(ea->dtype, "F32")) {
            for (k = 0; k < (int64_t)(ea->end - ea->begin) / 4; k++) {
                float va, vb;
                double r;
                memcpy(&va, da + 4 * k, 4);
                memcpy(&vb, db + 4 * k, 4);
                r = fabs((double)va - vb) / (fabs((double)va) > 1e-30 ? fabs((double)va) : 1e-30);
                if (act && !strcmp(ea->name, act) && va != vb) FAILf("%s: %.9g and %.9g", ea->name, (double)va, (double)vb);
                *frel = r > *frel ? r : *frel;
            }
        }
    }
    gdl_st_free(&a);
    gdl_st_free(&b);
    PASS();
}

/* 240 samples of 12 features, 3 classes (a fixed rule plus a little noise) */
static gdl_dataset *q8_data(void) {
    float x[240 * 12];
    int32_t y[240];
    uint32_t r = 99u;
    int i, k;
    for (i = 0; i < 240; i++) {
        y[i] = i % 3;
        for (k = 0; k < 12; k++) {
            r = r * 1664525u + 1013904223u;
            x[i * 12 + k] = (float)((k % 3 == y[i] ? 1.5 : -0.5) + ((double)(r >> 8) / 16777216.0 - 0.5));
        }
    }
    return gdl_dataset_from_arrays(x, GDL_F32, 1, (int64_t[]){12}, y, 240, 3);
}

static gdl_module *q8_mlp(gdl_device dev) {
    gdl_module *m;
    gdl_manual_seed(9);
    m = gdl_nn_sequential(3, (gdl_module *[]){gdl_nn_linear(12, 16, 1), gdl_nn_relu(), gdl_nn_linear(16, 3, 1)});
    return m && gdl_module_to(m, dev) == 0 ? m : NULL;
}

/* Static PTQ and QAT of a model living on the GPU, its loader delivering there, against the same flows on the
   CPU: the first layer's input parameters equal (the same data, exact minima and maxima), the int8 weights
   equal for PTQ; the rest is float arithmetic: on the emulator, whose float kernels give the CPU's bits
   here, everything is equal (PTQ's observed ranges, a QAT forward and gradient, the whole QAT flow); on a GPU
   (cuBLAS sums in another order) the scales within 1e-5, a fake-quantized output or gradient within 0.05
   (a step of its grid), and after QAT (16 steps of
   float training on each, where a last-bit difference that crosses a rounding of the fake quantization moves
   a value by a step) the int8 weights at most one apart in at most 10% of them, the f32 tensors within 5%;
   the accuracies within 2 points. Saved on the GPU, loaded on the CPU, the CPU's outputs bit for bit, and
   back. */
TEST q8_flows_on_gpu(void) {
    const char *pc = harness_tmp("q8_flow_cpu.safetensors"), *pg = harness_tmp("q8_flow_gpu.safetensors");
    gdl_dataset *ds = q8_data();
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts fo = gdl_fit_defaults();
    gdl_loader *lc, *lg;
    gdl_module *mc = q8_mlp(gdl_cpu()), *mg = q8_mlp(GPU), *prc, *prg, *qc, *qg, *qc2;
    gdl_optimizer *oc, *og;
    gdl_tensor *x, *xg, *y1, *y2;
    int64_t wdiff;
    int wmax, qat;
    double frel, ac, ag, l;
    ASSERT(ds && mc && mg);
    lo.batch_size = 32;
    ASSERT_NOT_NULL(lc = gdl_loader_new(ds, &lo));
    lo.device = GPU;
    ASSERT_NOT_NULL(lg = gdl_loader_new(ds, &lo));
    ASSERT_NOT_NULL(x = gdl_randn(GDL_DIMS(10, 12), gdl_cpu()));
    ASSERT_NOT_NULL(xg = gdl_to(x, GPU));
    fo.epochs = 1;
    fo.verbose = 0;
    /* fo.cuda_graph stays 1: QAT reads the device (observers, fake quantization), so gdl_fit's capture of a
       step fails cleanly and the steps run eagerly, saying so on the log */
    ASSERT_NOT_NULL(fo.log = tmpfile());
    fo.verbose = 1;
    for (qat = 0; qat < 2; qat++) {
        ASSERT_NOT_NULL(prc = qat ? gdl_quant_prepare_qat(mc, NULL) : gdl_quant_prepare(mc, NULL));
        ASSERT_NOT_NULL(prg = qat ? gdl_quant_prepare_qat(mg, NULL) : gdl_quant_prepare(mg, NULL));
        ASSERT(gdl_device_equal(gdl_module_device(prg), GPU));
        if (qat) { /* the same state: a fake-quantized forward gives the same bits, the gradients agree */
            int k;
            for (k = 0; k < 2; k++) { /* the second with the observers' parameters */
                ASSERT_NOT_NULL(y1 = gdl_forward(prc, x));
                ASSERT_NOT_NULL(y2 = gdl_forward(prg, xg));
                ASSERTm("QAT forward: the GPU's outputs are the CPU's", q8_max_diff(y1, y2) <= Q8_FQ_TOL);
            }
            ASSERT_EQ(0, gdl_backward(gdl_sum(y1)));
            ASSERT_EQ(0, gdl_backward(gdl_sum(y2)));
            {
                const gdl_tensor *gc = gdl_module_tensor(prc, "0.weight")->grad, *gg = gdl_module_tensor(prg, "0.weight")->grad;
                ASSERT(gc && gg);
                frel = q8_max_diff(gc, gg);
                printf("\n    QAT gradient of 0.weight: GPU - CPU at most %.3g", frel);
                ASSERT_LE(frel, Q8_FQ_TOL);
            }
            ASSERT_EQ(0, gdl_module_zero_grad(prc));
            ASSERT_EQ(0, gdl_module_zero_grad(prg));
            /* plain SGD: the backends' momentum updates differ in the last bit, and over 16 steps such a bit
               can cross a rounding of the fake quantization and grow */
            ASSERT_NOT_NULL(oc = gdl_sgd_new(0.02, 0, 0, 0, 0));
            ASSERT_NOT_NULL(og = gdl_sgd_new(0.02, 0, 0, 0, 0));
            ASSERT_EQ(0, gdl_optim_add_module(oc, prc, 0));
            ASSERT_EQ(0, gdl_optim_add_module(og, prg, 0));
            ASSERT_EQ(0, gdl_fit(prc, lc, oc, &fo, NULL));
            ASSERT_EQ(0, gdl_fit(prg, lg, og, &fo, NULL));
            {
                char logbuf[8192];
                size_t nr;
                rewind(fo.log);
                nr = fread(logbuf, 1, sizeof logbuf - 1, fo.log);
                logbuf[nr] = 0;
                ASSERT_CONTAINS(logbuf, "the step runs eagerly, not as a CUDA graph");
                ASSERT_CONTAINS(logbuf, "inside a CUDA graph capture");
            }
            ASSERT_EQ(0, gdl_quant_freeze_observers(prc, 1));
            ASSERT_EQ(0, gdl_quant_freeze_observers(prg, 1));
            ASSERT_EQ(0, gdl_fit(prc, lc, oc, &fo, NULL));
            ASSERT_EQ(0, gdl_fit(prg, lg, og, &fo, NULL));
            gdl_optim_free(oc);
            gdl_optim_free(og);
        } else {
            ASSERT_EQ(4, gdl_quant_calibrate(prc, lc, 4));
            ASSERT_EQ(4, gdl_quant_calibrate(prg, lg, 4));
        }
        ASSERT_NOT_NULL(qc = gdl_quant_convert(prc));
        ASSERT_NOT_NULL(qg = gdl_quant_convert(prg));
        ASSERT(gdl_device_equal(gdl_module_device(qg), GPU));
        ASSERT_EQ(0, gdl_quant_save(qc, pc));
        ASSERT_EQ(0, gdl_quant_save(qg, pg)); /* saved from the GPU */
        CHECK_CALL(q8_files(pc, pg, "0.input_scale", &wdiff, &wmax, &frel));
        printf("\n    %s: int8 weights differing %lld (largest %d), largest relative difference of the f32 tensors %.3g",
               qat ? "QAT" : "PTQ", (long long)wdiff, wmax, frel);
        if (qat) {
            if (q8_exact()) {
                ASSERT_EQ(0, wdiff);
                ASSERT_IN_RANGE(0, frel, 0);
            } else { /* float training apart: a last-bit difference can cross a fake quantization's rounding */
                ASSERT_LE(wmax, 1);
                ASSERT_LE(wdiff, (12 * 16 + 16 * 3) / 10);
                ASSERT_LE(frel, 0.05);
            }
            ASSERT_EQ(0, gdl_evaluate(qc, lc, NULL, NULL, &l, &ac));
            ASSERT_EQ(0, gdl_evaluate(qg, lg, NULL, NULL, &l, &ag));
            ASSERT_GE(ac, 0.9);
            ASSERT_IN_RANGE(ac, ag, 0.02);
        } else {
            ASSERT_EQ(0, wdiff);
            ASSERT_LE(frel, Q8_FLOAT_TOL);
        }
        /* the GPU's file on the CPU: the GPU model's outputs; the CPU's file on the GPU: the CPU model's */
        ASSERT_NOT_NULL(qc2 = gdl_quant_convert(prc));
        ASSERT_EQ(0, gdl_quant_load(qc2, pg));
        ASSERT_NOT_NULL(y1 = gdl_forward(qc2, x));
        ASSERT_NOT_NULL(y2 = gdl_forward(qg, xg));
        ASSERTm("loaded on the CPU from the GPU's file: the GPU's outputs", q8_max_diff(y1, y2) == 0);
        ASSERT_EQ(0, gdl_module_to(qc2, GPU));
        ASSERT_EQ(0, gdl_quant_load(qc2, pc));
        ASSERT_NOT_NULL(y1 = gdl_forward(qc2, xg));
        ASSERT_NOT_NULL(y2 = gdl_forward(qc, x));
        ASSERTm("loaded on the GPU from the CPU's file: the CPU's outputs", q8_max_diff(y1, y2) == 0);
        gdl_module_free(prc), gdl_module_free(prg), gdl_module_free(qc), gdl_module_free(qg), gdl_module_free(qc2);
        gdl_arena_reset();
    }
    printf("\n");
    remove(pc);
    remove(pg);
    fclose(fo.log);
    gdl_free(x), gdl_free(xg);
    gdl_loader_free(lc), gdl_loader_free(lg);
    gdl_dataset_free(ds);
    gdl_module_free(mc), gdl_module_free(mg);
    PASS();
}

SUITE(quant) {
    RUN_GPU(q8_gemm_paths);
    RUN_GPU(q8_quantize_ties);
    RUN_GPU(q8_dynamic_mlp);
    RUN_GPU(q8_static_convnet);
    RUN_GPU(q8_dynamic_rnn);
    RUN_GPU(q8_flows_on_gpu);
    RUN_GPU(q8_errors);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    printf("CUDA devices: %d (%s)\n", gdl_cuda_device_count(), gdl_device_name(gdl_default_device()));
    RUN_SUITE(monitor);
    RUN_SUITE(ops);
    RUN_SUITE(dtypes);
    RUN_SUITE(autocast);
    RUN_SUITE(kernel_paths);
    RUN_SUITE(seq_ops);
    RUN_SUITE(rnn);
    RUN_SUITE(optim);
    RUN_SUITE(master_weights);
    RUN_SUITE(training);
    RUN_SUITE(devices);
    RUN_SUITE(faults);
    RUN_SUITE(graphs);
    RUN_SUITE(fit_graphs);
    RUN_SUITE(quant);
    RUN_SUITE(torch_parity);
    RUN_SUITE(streams); /* last: it checks what every suite before it did */
    gdl_shutdown();
    HARNESS_MAIN_END();
}
