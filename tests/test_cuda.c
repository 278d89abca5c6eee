/* test_cuda.c — the GPU suite: on a real GPU (`make test-cuda`) and on the
   CUDA-on-CPU emulator (`make test-emu`, tests/cuda_emu/). Every row of
   tests/op_cases.h, plain and fanned out, forward and backward on CUDA
   against the CPU on the same inputs; more rows at sizes that take every
   kernel path of gpudl_cuda.cu (one element, odd, longer than a warp and than
   a block, empty, ties, NaN/Inf); every cast; argmax; each optimizer,
   gradient clipping, anomaly mode; overlapping device copies; two devices and
   host threads; the pinned-memory loader; allocator OOM recovery and, on the
   emulator, injected allocation and launch failures; training parity of an
   MLP and a CNN on tie-free inputs; the memory statistics and the profiler
   (tests/monitor_cases.h) and, on the emulator, gdl_gpu_stats finding each
   GPU in a stand-in NVML by its PCI bus id. Without a GPU every test is
   skipped. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include "op_cases.h"
#include "monitor_cases.h"
#ifdef GPUDL_EMU
#include "cuda_emu/emu_api.h"
#endif
#ifndef GPUDL_NO_THREADS
#include <pthread.h>
#endif

#define GPU gdl_cuda(0)

static int have_gpu(void) { return gdl_cuda_is_available(); }

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
    if (!have_gpu()) SKIPm("no GPU");
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
    if (!have_gpu()) SKIPm("no GPU");
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
    if (!have_gpu()) SKIPm("no GPU");
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
    if (!have_gpu()) SKIPm("no GPU");
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
    if (!have_gpu()) SKIPm("no GPU");
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
    if (!have_gpu()) SKIPm("no GPU");
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

/* clip_grad_norm: the norm (a two-pass device reduction in double) and the
   scaled gradients. One gradient is longer than 1024 blocks x 256 threads, so
   every thread of the partial-sum kernel loops; one is a single element. */
TEST clip_grad_norm_parity(void) {
    int64_t s[3] = {262144 + 4097, 1, 333};
    gdl_tensor *p[3], *pg[3];
    double nc, ng, nc2, ng2;
    int i;
    if (!have_gpu()) SKIPm("no GPU");
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
    if (!have_gpu()) SKIPm("no GPU");
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
    if (!have_gpu()) SKIPm("no GPU");
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
    if (!have_gpu()) SKIPm("no GPU");
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
    if (!have_gpu()) SKIPm("no GPU");
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
    if (!have_gpu()) SKIPm("no GPU");
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
    if (!have_gpu()) SKIPm("no GPU");
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
   the CPU loader's. */
TEST loader_pinned_matches_cpu(void) {
    enum { N = 45, H = 6 };
    static uint8_t px[N * H * H];
    int32_t labels[N];
    int64_t sshape[3] = {1, H, H};
    gdl_dataset *ds;
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *lc, *lg;
    int i, epoch, nb;
    if (!have_gpu()) SKIPm("no GPU");
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
    ASSERT_NOT_NULL(lc = gdl_loader_new(ds, &o));
    o.device = GPU;
    o.pin_memory = 1;
    ASSERT_NOT_NULL(lg = gdl_loader_new(ds, &o));
    for (epoch = 0; epoch < 2; epoch++) {
        nb = 0;
        for (;;) {
            gdl_tensor *xc, *yc, *xg, *yg;
            int rc = gdl_loader_next(lc, &xc, &yc), rg = gdl_loader_next(lg, &xg, &yg);
            ASSERT_EQ(rc, rg);
            if (rc <= 0) break;
            ASSERT(gdl_device_equal(xg->device, GPU));
            if (!same_bytes(xc, xg) || !same_bytes(yc, yg))
                FAILf("epoch %d batch %d from the pinned GPU loader differs from the CPU loader's", epoch, nb);
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

/* ---- two devices, host threads ---- */

#define NEED_TWO_DEVICES()                                                                        \
    do {                                                                                          \
        if (!have_gpu()) SKIPm("no GPU");                                                         \
        if (gdl_cuda_device_count() < 2) SKIPm("one CUDA device (emulator: GPUDL_EMU_DEVICES=2)"); \
    } while (0)

TEST two_devices(void) {
    toy a, b;
    int s;
    int64_t sh[1] = {1000};
    gdl_tensor *x, *x1, *x0, *back;
    NEED_TWO_DEVICES();
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
    gdl_arena_reset();
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
    NEED_TWO_DEVICES();
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
    if (!have_gpu()) SKIPm("no GPU");
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

/* ---- suites ---- */

static parity_run table_runs[2 * NCASES], gpu_runs[2 * NGPU_CASES];

SUITE(ops) {
    int i;
    char name[96];
    for (i = 0; i < NCASES; i++) {
        table_runs[2 * i].c = table_runs[2 * i + 1].c = &cases[i];
        table_runs[2 * i + 1].fanout = 1;
        RUN_TEST_NAMED(cases[i].name, parity, (void *)&table_runs[2 * i]);
        snprintf(name, sizeof name, "%s_fanout", cases[i].name);
        RUN_TEST_NAMED(name, parity, (void *)&table_runs[2 * i + 1]);
    }
}
SUITE(kernel_paths) {
    int i;
    char name[96];
    for (i = 0; i < NGPU_CASES; i++) {
        gpu_runs[2 * i].c = gpu_runs[2 * i + 1].c = &gpu_cases[i];
        gpu_runs[2 * i + 1].fanout = 1;
        RUN_TEST_NAMED(gpu_cases[i].name, parity, (void *)&gpu_runs[2 * i]);
        snprintf(name, sizeof name, "%s_fanout", gpu_cases[i].name);
        RUN_TEST_NAMED(name, parity, (void *)&gpu_runs[2 * i + 1]);
    }
    RUN_TEST(casts_all_pairs);
    RUN_TEST(argmax_ties_and_nan);
    RUN_TEST(embedding_backward_exact_counts);
    RUN_TEST(gemm_k0_does_not_read_c);
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
        RUN_TEST_NAMED(kinds[i].name, optimizer_parity, (void *)&kinds[i]);
    RUN_TEST(clip_grad_norm_parity);
    RUN_TEST(anomaly_mode_parity);
}
SUITE(training) {
    static const int mlp = 0, cnn = 1;
    RUN_TEST_NAMED("mlp_steps", train_parity, (void *)&mlp);
    RUN_TEST_NAMED("cnn_steps", train_parity, (void *)&cnn);
}
SUITE(devices) {
    RUN_TEST(device_mismatch_error);
    RUN_TEST(transfers_round_trip);
    RUN_TEST(overlapping_device_copies);
    RUN_TEST(allocator_steady_state_and_oom);
    RUN_TEST(loader_pinned_matches_cpu);
    RUN_TEST(two_devices);
    RUN_TEST(host_threads_own_devices);
    RUN_TEST(injected_alloc_and_launch_failures);
}

/* ---- monitoring: the caching allocator's counters, the profiler, NVML ---- */

TEST cuda_memory_stats(void) {
    gdl_memory_status s;
    if (!have_gpu()) SKIPm("no GPU");
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

TEST cuda_profile_errors(void) {
    if (!have_gpu()) SKIPm("no GPU");
    return mc_profile_errors();
}
/* one launch per gdl_relu (the unary kernel) */
TEST cuda_profile(void) {
    if (!have_gpu()) SKIPm("no GPU");
    return mc_profile_sequence(GPU, 1, "build/test_cuda_trace.json");
}

#if defined(GPUDL_EMU) && defined(FAKE_NVML) && !defined(_WIN32)
int setenv(const char *name, const char *value, int overwrite); /* POSIX; hidden by -std=c99 */
/* The stand-in NVML lists the emulator's cuda:1 first: stats follow the PCI bus id, not the index. */
TEST gpu_stats_by_pci_bus_id(void) {
    gdl_gpu_status s;
    if (gdl_cuda_device_count() < 2) SKIPm("needs GPUDL_EMU_DEVICES=2");
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
    RUN_TEST(gpu_stats_by_pci_bus_id); /* first: NVML is loaded once per process */
#endif
    RUN_TEST(cuda_memory_stats);
    RUN_TEST(cuda_profile_errors);
    RUN_TEST(cuda_profile);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    printf("CUDA devices: %d (%s)\n", gdl_cuda_device_count(), gdl_device_name(gdl_default_device()));
    RUN_SUITE(monitor);
    RUN_SUITE(ops);
    RUN_SUITE(kernel_paths);
    RUN_SUITE(optim);
    RUN_SUITE(training);
    RUN_SUITE(devices);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
