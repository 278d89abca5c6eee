/* test_flops.c — the model-FLOP counter (gdl_flops_count) against figures
   worked out by hand from the shapes, forward and backward, op by op (linear,
   linear_act, matmul with broadcast batches, conv2d with groups, stride and
   dilation, the fused and the unfused attention, an LSTM's gate GEMMs, a
   bf16 linear and one under autocast); a second thread's ops count on its
   own counter; the CPU peak (measured, cached, its errors), the GPU table and
   the utilisation line. One translation unit with the implementation: it
   reads the GPU table (gdl__gpu_peak_lookup) and starts a thread
   (gdl__thread_start) the same way on POSIX and Windows. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include <string.h>

static gdl_tensor *randn_grad(int nd, const int64_t *shape, int grad) {
    gdl_tensor *t = gdl_randn(nd, shape, gdl_cpu());
    if (t && grad && gdl_set_requires_grad(t, 1) < 0) return NULL;
    return t;
}

/* the counts so far: forward and backward */
static void counts(int64_t *f, int64_t *b) { gdl_flops_count(f, b); }

/* x [4,6] (the data: no gradient) -> linear 6->5 -> relu -> linear_act 5->3 (ReLU) -> sum.
   Forward 2*4*6*5 + 2*4*5*3 = 360. Backward: layer 1 wants only its weight's gradient (240), layer 2
   both its input's and its weight's (2 * 120). */
TEST linear_net(void) {
    int64_t xs[2] = {4, 6}, w1s[2] = {5, 6}, w2s[2] = {3, 5}, b1s[1] = {5}, f, b;
    gdl_tensor *x = randn_grad(2, xs, 0), *w1 = randn_grad(2, w1s, 1), *b1 = randn_grad(1, b1s, 1);
    gdl_tensor *w2 = randn_grad(2, w2s, 1), *loss;
    gdl_flops_reset();
    loss = gdl_sum(gdl_linear_act(gdl_relu(gdl_linear(x, w1, b1)), w2, NULL, GDL_ACT_RELU));
    ASSERT_NOT_NULL(loss);
    counts(&f, &b);
    ASSERT_EQ(360, f);
    ASSERT_EQ(0, b);
    ASSERT_EQ(0, gdl_backward(loss));
    counts(&f, &b);
    ASSERT_EQ(360, f);
    ASSERT_EQ(240 + 240, b);
    ASSERT_EQ(360 + 480, gdl_flops_count(NULL, NULL));
    gdl_flops_reset();
    ASSERT_EQ(0, gdl_flops_count(NULL, NULL));
    gdl_arena_reset();
    gdl_free(x); gdl_free(w1); gdl_free(b1); gdl_free(w2);
    PASS();
}

/* a [2,3,4] x b [4,5] (b broadcast over the batch: one GEMM of 6 rows): 2*2*3*4*5 = 240 forward, and
   both gradients 480; gdl_bmm [2,3,4] x [2,4,5] with only a wanting a gradient: 240 and 240 */
TEST matmul_batched(void) {
    int64_t as[3] = {2, 3, 4}, bs[2] = {4, 5}, bbs[3] = {2, 4, 5}, f, b;
    gdl_tensor *a = randn_grad(3, as, 1), *m = randn_grad(2, bs, 1), *mb = randn_grad(3, bbs, 0);
    gdl_flops_reset();
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_matmul(a, m))));
    counts(&f, &b);
    ASSERT_EQ(240, f);
    ASSERT_EQ(480, b);
    gdl_flops_reset();
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_bmm(a, mb))));
    counts(&f, &b);
    ASSERT_EQ(240, f);
    ASSERT_EQ(240, b);
    gdl_arena_reset();
    gdl_free(a); gdl_free(m); gdl_free(mb);
    PASS();
}

/* x [2,4,7,7], w [6,2,3,3], groups 2, stride 1, padding 1, dilation 2: OH = OW = (7 + 2 - 2*2 - 1) + 1 = 5,
   so 2*6*5*5 = 300 outputs of 2*3*3 = 18 taps (C/groups x KH x KW): 2*300*18 = 10800 forward, each
   gradient as much. Stride 2, padding 0, dilation 1 on the data (no input gradient): OH = OW = 3,
   2*6*9 = 108 outputs: 2*108*18 = 3888 forward, 3888 backward (the weight's). */
static enum harness_result conv_case(int x_grad, int s, int p, int d, int64_t side, int64_t fwd, int64_t bwd) {
    int64_t xs[4] = {2, 4, 7, 7}, ws[4] = {6, 2, 3, 3}, f, b;
    int stride[2], pad[2], dil[2];
    gdl_tensor *x = randn_grad(4, xs, x_grad), *w = randn_grad(4, ws, 1), *y;
    stride[0] = stride[1] = s;
    pad[0] = pad[1] = p;
    dil[0] = dil[1] = d;
    gdl_flops_reset();
    y = gdl_conv2d_ex(x, w, NULL, stride, pad, dil, 2);
    ASSERT_NOT_NULL(y);
    ASSERT_EQ(side, y->shape[2]);
    ASSERT_EQ(0, gdl_backward(gdl_sum(y)));
    counts(&f, &b);
    ASSERT_EQ(fwd, f);
    ASSERT_EQ(bwd, b);
    gdl_arena_reset();
    gdl_free(x); gdl_free(w);
    PASS();
}
TEST conv_groups_dilation(void) { return conv_case(1, 1, 1, 2, 5, 10800, 21600); }
TEST conv_stride_data(void) { return conv_case(0, 2, 0, 1, 3, 3888, 3888); }

/* q [2,3,4,8], k and v [2,3,6,8]: 6 heads of 4 queries x 6 keys, the two products 2*6*4*6*8 each: 4608
   forward, the backward's four 9216; causal or not (every query-key pair, as FlopCounterMode). With
   dropout the op runs as matmuls (the unfused composition), which count the same. */
static enum harness_result attention_case(int causal, double dropout) {
    int64_t qs[4] = {2, 3, 4, 8}, ks[4] = {2, 3, 6, 8}, f, b;
    gdl_tensor *q = randn_grad(4, qs, 1), *k = randn_grad(4, ks, 1), *v = randn_grad(4, ks, 1), *o;
    gdl_flops_reset();
    o = gdl_scaled_dot_product_attention(q, k, v, NULL, dropout, causal, GDL_SCALE_DEFAULT);
    ASSERT_NOT_NULL(o);
    ASSERT_EQ(0, gdl_backward(gdl_sum(o)));
    counts(&f, &b);
    ASSERT_EQ(4608, f);
    ASSERT_EQ(9216, b);
    gdl_arena_reset();
    gdl_free(q); gdl_free(k); gdl_free(v);
    PASS();
}
TEST attention_fused(void) { return attention_case(0, 0); }
TEST attention_fused_causal(void) { return attention_case(1, 0); }
TEST attention_unfused(void) { return attention_case(0, 0.25); }

/* nn.LSTM(4, 5) over x [T=3, B=2, 4] (no gradient), h0 = c0 = 0: the input GEMM once over the sequence,
   2*3*2*4*20 = 960, and the hidden one per step, 2*2*5*20 = 400 each: 960 + 3*400 = 2160 forward.
   Backward: the input GEMM's weight gradient (960); step 0's h0 wants none (400), steps 1 and 2 both
   (800 each): 2960. */
TEST lstm_gates(void) {
    int64_t xs[3] = {3, 2, 4}, f, b;
    gdl_module *m = gdl_nn_lstm(4, 5, 1, 1, 0, 0, 0);
    gdl_tensor *x = randn_grad(3, xs, 0), *out = NULL;
    ASSERT_NOT_NULL(m);
    gdl_flops_reset();
    ASSERT_EQ(0, gdl_nn_lstm_forward(m, x, NULL, NULL, &out, NULL, NULL));
    ASSERT_EQ(0, gdl_backward(gdl_sum(out)));
    counts(&f, &b);
    ASSERT_EQ(2160, f);
    ASSERT_EQ(2960, b);
    gdl_arena_reset();
    gdl_free(x);
    gdl_module_free(m);
    PASS();
}

/* the low dtypes count once: a native bf16 linear, and an f32 one under bf16 autocast (which runs the
   op again on bf16 copies): 2*4*6*5 = 240 forward, 480 backward (x and w both want gradients) */
TEST low_precision_once(void) {
    int64_t xs[2] = {4, 6}, ws[2] = {5, 6}, f, b;
    gdl_tensor *x = randn_grad(2, xs, 1), *w = randn_grad(2, ws, 1), *xb, *wb;
    gdl_set_grad_enabled(0); /* bf16 leaves of their own */
    xb = gdl_to_dtype(x, GDL_BF16);
    wb = gdl_to_dtype(w, GDL_BF16);
    gdl_set_grad_enabled(1);
    ASSERT(xb && wb);
    ASSERT_EQ(0, gdl_set_requires_grad(xb, 1));
    ASSERT_EQ(0, gdl_set_requires_grad(wb, 1));
    gdl_flops_reset();
    ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_to_dtype(gdl_linear(xb, wb, NULL), GDL_F32))));
    counts(&f, &b);
    ASSERT_EQ(240, f);
    ASSERT_EQ(480, b);
    gdl_flops_reset();
    ASSERT_EQ(0, gdl_autocast_begin(GDL_BF16));
    {
        gdl_tensor *y = gdl_linear(x, w, NULL);
        gdl_autocast_end();
        ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_to_dtype(y, GDL_F32))));
    }
    counts(&f, &b);
    ASSERT_EQ(240, f);
    ASSERT_EQ(480, b);
    gdl_arena_reset();
    gdl_free(x); gdl_free(w); gdl_free(xb); gdl_free(wb);
    PASS();
}

#ifdef GDL__OS_THREADS /* (the minimal build, GPUDL_NO_THREADS, has one thread) */
/* another thread: its linear (2*8*16*16 = 4096 forward) counts on its own counter, not on the caller's */
typedef struct {
    int64_t fwd, mine_before;
    int ok;
} thread_case;
static void *other_thread(void *p) {
    thread_case *c = (thread_case *)p;
    int64_t xs[2] = {8, 16}, ws[2] = {16, 16};
    gdl_tensor *x = gdl_randn(2, xs, gdl_cpu()), *w = gdl_randn(2, ws, gdl_cpu());
    c->mine_before = gdl_flops_count(NULL, NULL); /* a new thread starts at 0 */
    c->ok = x && w && gdl_linear(x, w, NULL) != NULL;
    gdl_flops_count(&c->fwd, NULL);
    gdl_arena_reset();
    gdl_free(x);
    gdl_free(w);
    gdl_thread_cleanup();
    return NULL;
}
TEST per_thread(void) {
    int64_t xs[2] = {2, 3}, ws[2] = {4, 3};
    gdl_tensor *x = gdl_randn(2, xs, gdl_cpu()), *w = gdl_randn(2, ws, gdl_cpu());
    thread_case c;
    gdl__thread th;
    memset(&c, 0, sizeof c);
    gdl_flops_reset();
    ASSERT_NOT_NULL(gdl_linear(x, w, NULL)); /* 2*2*3*4 = 48 here */
    ASSERT_EQ(0, gdl__thread_start(&th, other_thread, &c));
    gdl__thread_join(&th);
    ASSERT(c.ok);
    ASSERT_EQ(0, c.mine_before);
    ASSERT_EQ(4096, c.fwd);
    ASSERT_EQ(48, gdl_flops_count(NULL, NULL));
    gdl_arena_reset();
    gdl_free(x);
    gdl_free(w);
    PASS();
}
#endif

/* the measured peak: positive, kept (the second call returns the same figure at once), a thread count
   out of range is an error naming the call */
TEST cpu_peak(void) {
    double p1 = gdl_cpu_peak_gflops(1), pa = gdl_cpu_peak_gflops(0), t0;
    ASSERT_GT(p1, 0);
    ASSERT_GT(pa, 0);
    t0 = gdl_now();
    ASSERT_IN_RANGE(pa, gdl_cpu_peak_gflops(gdl_get_num_threads()), 0);
    ASSERT_LT(gdl_now() - t0, 0.05);
    ASSERT_IN_RANGE(-1, gdl_cpu_peak_gflops(-1), 0);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_cpu_peak_gflops");
    ASSERT_IN_RANGE(-1, gdl_cpu_peak_gflops(gdl_get_num_threads() + 1), 0);
    ASSERT_CONTAINS(gdl_last_error(), "threads");
    PASS();
}

/* the datasheet table: the boards by name (and the H100 PCIe by its SM count), dtypes a board lacks,
   names it lacks; on a build without CUDA the public call says so */
TEST gpu_table(void) {
    ASSERT_IN_RANGE(989.4, gdl__gpu_peak_lookup("NVIDIA H100 80GB HBM3", 132, GDL_BF16), 0);
    ASSERT_IN_RANGE(67, gdl__gpu_peak_lookup("NVIDIA H100 80GB HBM3", 132, GDL_F32), 0);
    ASSERT_IN_RANGE(51.2, gdl__gpu_peak_lookup("NVIDIA H100 PCIe", 114, GDL_F32), 0);
    ASSERT_IN_RANGE(756.5, gdl__gpu_peak_lookup("NVIDIA H100", 114, GDL_F16), 0);
    ASSERT_IN_RANGE(835.5, gdl__gpu_peak_lookup("NVIDIA H100 NVL", 132, GDL_BF16), 0);
    ASSERT_IN_RANGE(989.4, gdl__gpu_peak_lookup("NVIDIA H200", 132, GDL_BF16), 0);
    ASSERT_IN_RANGE(19.5, gdl__gpu_peak_lookup("NVIDIA A100-SXM4-80GB", 108, GDL_F32), 0);
    ASSERT_IN_RANGE(125, gdl__gpu_peak_lookup("NVIDIA A10", 72, GDL_BF16), 0);
    ASSERT_IN_RANGE(362.05, gdl__gpu_peak_lookup("NVIDIA L40S", 142, GDL_BF16), 0);
    ASSERT_IN_RANGE(121, gdl__gpu_peak_lookup("NVIDIA L4", 58, GDL_F16), 0);
    ASSERT_IN_RANGE(112, gdl__gpu_peak_lookup("Tesla V100-PCIE-16GB", 80, GDL_F16), 0);
    ASSERT_IN_RANGE(0, gdl__gpu_peak_lookup("Tesla T4", 40, GDL_BF16), 0);
    ASSERT_IN_RANGE(0, gdl__gpu_peak_lookup("Some Other GPU", 10, GDL_F32), 0);
#ifndef GPUDL_CUDA
    ASSERT_IN_RANGE(-1, gdl_gpu_peak_gflops(0, GDL_F32), 0);
    ASSERT_CONTAINS(gdl_last_error(), "without CUDA");
#endif
    ASSERT_IN_RANGE(-1, gdl_gpu_peak_gflops(0, GDL_I32), 0);
    ASSERT_CONTAINS(gdl_last_error(), "gdl_gpu_peak_gflops");
    PASS();
}

/* the line: the step's FLOPs, the rate, the fraction of the peak that gdl_cpu_peak_gflops gives */
TEST flops_line(void) {
    double peak = gdl_cpu_peak_gflops(0);
    char want[64];
    const char *s = gdl_flops_line(2e9, 0.5, gdl_cpu(), GDL_F32);
    ASSERT_CONTAINS(s, "FLOPs/step 2e+09, 4.0 GFLOP/s, ");
    snprintf(want, sizeof want, "%.1f %% of peak (%.1f GFLOP/s, ", 400 / peak, peak);
    ASSERT_CONTAINS(s, want);
    ASSERT_CONTAINS(s, "thread");
    PASS();
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_TEST(linear_net);
    RUN_TEST(matmul_batched);
    RUN_TEST(conv_groups_dilation);
    RUN_TEST(conv_stride_data);
    RUN_TEST(attention_fused);
    RUN_TEST(attention_fused_causal);
    RUN_TEST(attention_unfused);
    RUN_TEST(lstm_gates);
    RUN_TEST(low_precision_once);
#ifdef GDL__OS_THREADS
    RUN_TEST(per_thread);
#endif
    RUN_TEST(cpu_peak);
    RUN_TEST(gpu_table);
    RUN_TEST(flops_line);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
