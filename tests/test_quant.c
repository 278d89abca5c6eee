/* test_quant.c — INT8 quantization (src/api/quant.h): PyTorch's quantization
   parameters (fbgemm's ChooseQuantizationParams, the symmetric weight
   observers) on hand-worked values; DynamicQuantizedLinear against an
   independent reference of the documented arithmetic (weights per channel
   and per tensor, 7- and 8-bit activations) and within the quantization
   error of the float layer; bitwise across thread counts; a small MLP
   trained, quantized and evaluated with gdl_evaluate (accuracy bound); the
   summary and sizes; the safetensors round trip; the errors (float models,
   bad inputs, shapes the int8 GEMM cannot take, mismatched files). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CPU gdl_cpu()

static void reset(void *u) {
    (void)u;
    gdl_arena_reset();
    gdl_clear_error();
    gdl_set_grad_enabled(1);
}

static gdl_real *R(const gdl_tensor *t) { return (gdl_real *)t->data; }

/* ---- quantization parameters ---- */

TEST test_choose_qparams(void) {
    float s;
    int32_t z;
    /* [-1, 3] on 0..255: scale 4/255; zero point 63.75 from either side -> 64 */
    ASSERT_EQ(0, gdl_choose_qparams(-1, 3, 0, 255, &s, &z));
    ASSERT_IN_RANGE((double)(float)(4.0 / 255.0), (double)s, 0);
    ASSERT_EQ(64, z);
    /* a positive range is widened to hold 0: [0, 2] on 0..127 */
    ASSERT_EQ(0, gdl_choose_qparams(0.5f, 2, 0, 127, &s, &z));
    ASSERT_IN_RANGE((double)(float)(2.0 / 127.0), (double)s, 0);
    ASSERT_EQ(0, z);
    /* all negative: the zero point is qmax */
    ASSERT_EQ(0, gdl_choose_qparams(-2, -1, 0, 127, &s, &z));
    ASSERT_EQ(127, z);
    /* a zero range: scale 0.1 (fbgemm's), zero point 0 */
    ASSERT_EQ(0, gdl_choose_qparams(0, 0, 0, 255, &s, &z));
    ASSERT_IN_RANGE((double)0.1f, (double)s, 0);
    ASSERT_EQ(0, z);
    /* below fbgemm's smallest scale 6.1e-5 the range is widened */
    ASSERT_EQ(0, gdl_choose_qparams(0, 1e-4f, 0, 255, &s, &z));
    ASSERT_IN_RANGE((double)6.1e-5f, (double)s, 0);
    ASSERT_EQ(-1, gdl_choose_qparams(1, 0, 0, 255, &s, &z));
    ASSERT_CONTAINS(gdl_last_error(), "bad range");
    ASSERT_EQ(-1, gdl_choose_qparams(0, 1, 5, 5, &s, &z));
    PASS();
}

/* ---- the dynamic layer against the documented arithmetic ---- */

/* y of a dynamic quantized Linear, recomputed: weights by the symmetric
   observer's formula, activations by gdl_choose_qparams (checked above),
   integer sums in 64 bits, the dequantization in float. */
static void reference(const float *x, int rows, int in, const float *W, const float *b, int out, int per_channel,
                      int qmax, float *y) {
    int8_t *wq = (int8_t *)malloc((size_t)in * out);
    float *ws = (float *)malloc(sizeof(float) * out);
    uint8_t *xq = (uint8_t *)malloc((size_t)rows * in);
    float lo = 0, hi = 0, sa;
    int32_t za;
    int i, n, k;
    for (n = 0; n < out; n++) {
        float amax = 0;
        int first = per_channel ? n : 0, last = per_channel ? n : out - 1, r;
        for (r = first; r <= last; r++)
            for (k = 0; k < in; k++) amax = fabsf(W[r * in + k]) > amax ? fabsf(W[r * in + k]) : amax;
        ws[n] = amax / 127.5f;
        if (ws[n] < FLT_EPSILON) ws[n] = FLT_EPSILON;
        for (k = 0; k < in; k++) {
            float q = nearbyintf(W[n * in + k] * (1.0f / ws[n]));
            wq[n * in + k] = (int8_t)(q < -128 ? -128 : q > 127 ? 127 : q);
        }
    }
    for (i = 0; i < rows * in; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    gdl_choose_qparams(lo, hi, 0, qmax, &sa, &za);
    for (i = 0; i < rows * in; i++) {
        float q = nearbyintf(x[i] * (1.0f / sa)) + (float)za;
        xq[i] = (uint8_t)(q < 0 ? 0 : q > qmax ? qmax : q);
    }
    for (i = 0; i < rows; i++)
        for (n = 0; n < out; n++) {
            long long acc = 0;
            for (k = 0; k < in; k++) acc += ((long long)xq[i * in + k] - za) * wq[n * in + k];
            y[i * out + n] = (float)acc * (sa * ws[n]) + (b ? b[n] : 0.0f);
        }
    free(wq);
    free(ws);
    free(xq);
}

static enum harness_result dynamic_case(int rows, int in, int out, int bias, int per_channel, int reduce_range) {
    gdl_module *lin = gdl_nn_linear(in, out, bias), *q;
    gdl_qconfig qc = gdl_qconfig_default();
    gdl_tensor *x = gdl_randn(GDL_DIMS(rows, in), CPU), *yq, *yf;
    float *xf = (float *)malloc(sizeof(float) * rows * in), *Wf = (float *)malloc(sizeof(float) * in * out);
    float *bf = (float *)malloc(sizeof(float) * out), *yr = (float *)malloc(sizeof(float) * rows * out);
    double maxerr = 0, maxabs = 0, bound = 0;
    int i;
    qc.per_channel = per_channel;
    qc.reduce_range = reduce_range;
    ASSERT_NOT_NULL(lin);
    ASSERT_NOT_NULL(q = gdl_quantize_dynamic(lin, &qc));
    ASSERT_STR_EQ("DynamicQuantizedLinear", gdl_module_kind(q));
    for (i = 0; i < rows * in; i++) xf[i] = (float)R(x)[i] * (i % 7 == 0 ? 3.0f : 1.0f); /* some outliers */
    for (i = 0; i < rows * in; i++) R(x)[i] = xf[i];
    for (i = 0; i < in * out; i++) Wf[i] = (float)R(gdl_module_tensor(lin, "weight"))[i];
    for (i = 0; i < out; i++) bf[i] = bias ? (float)R(gdl_module_tensor(lin, "bias"))[i] : 0;
    ASSERT_NOT_NULL(yq = gdl_forward(q, x));
    ASSERT_NOT_NULL(yf = gdl_forward(lin, x));
    ASSERT_EQ(2, yq->ndim);
    ASSERT_EQ(out, yq->shape[1]);
    ASSERT_NULL(yq->node);
    reference(xf, rows, in, Wf, bias ? bf : NULL, out, per_channel, reduce_range ? 127 : 255, yr);
    for (i = 0; i < rows * out; i++) {
        const double e = fabs((double)R(yq)[i] - (double)R(yf)[i]);
        if (!(fabs((double)R(yq)[i] - yr[i]) <= 1e-5 * (1 + fabs(yr[i]))))
            FAILf("rows %d in %d out %d bias %d per_channel %d reduce_range %d: y[%d] = %.9g, reference %.9g", rows,
                  in, out, bias, per_channel, reduce_range, i, (double)R(yq)[i], (double)yr[i]);
        if (e > maxerr) maxerr = e;
        if (fabs((double)R(yf)[i]) > maxabs) maxabs = fabs((double)R(yf)[i]);
    }
    /* against the float layer: each product's error is at most half a step of x times |w| plus half a step
       of w times |x|; with |x| <= 16 (a range of at most 32) and |w| <= 1/sqrt(in) a loose bound of the sum is */
    bound = (double)in * (0.5 * 32.0 / (reduce_range ? 127 : 255) / sqrt((double)in) + 0.5 * 16.0 / 127.5 / sqrt((double)in));
    ASSERTm("the quantized output is too far from the float one", maxerr <= bound);
    gdl_module_free(lin);
    gdl_module_free(q);
    gdl_free(x);
    free(xf);
    free(Wf);
    free(bf);
    free(yr);
    PASS();
}

TEST test_dynamic_linear_reference(void) {
    gdl_manual_seed(1);
    CHECK_CALL(dynamic_case(1, 1, 1, 1, 1, 1));
    CHECK_CALL(dynamic_case(5, 7, 3, 1, 1, 1));
    CHECK_CALL(dynamic_case(33, 64, 17, 0, 1, 1));
    CHECK_CALL(dynamic_case(9, 130, 40, 1, 0, 1));
    CHECK_CALL(dynamic_case(9, 130, 40, 1, 1, 0)); /* 8-bit activations */
    CHECK_CALL(dynamic_case(64, 784, 128, 1, 1, 1));
    PASS();
}

/* a batch of rows [..., in] (3-d input) and the same bits for 1 and 3 threads */
TEST test_dynamic_linear_threads_and_shapes(void) {
    gdl_module *lin = gdl_nn_linear(300, 100, 1), *q = gdl_quantize_dynamic(lin, NULL);
    gdl_tensor *x = gdl_randn(GDL_DIMS(4, 20, 300), CPU), *y1, *y3;
    int same;
    ASSERT_NOT_NULL(q);
    gdl_set_num_threads(1);
    y1 = gdl_forward(q, x);
    gdl_set_num_threads(3);
    y3 = gdl_forward(q, x);
    gdl_set_num_threads(0);
    ASSERT_NOT_NULL(y1);
    ASSERT_NOT_NULL(y3);
    ASSERT_EQ(3, y1->ndim);
    ASSERT_EQ(100, y1->shape[2]);
    same = memcmp(y1->data, y3->data, sizeof(gdl_real) * (size_t)y1->numel) == 0;
    ASSERTm("1 and 3 threads give different outputs", same);
    gdl_module_free(lin);
    gdl_module_free(q);
    gdl_free(x);
    PASS();
}

/* ---- a model end to end ---- */

/* 4 Gaussian blobs in 16 dimensions */
static gdl_dataset *blobs(int n, uint64_t seed) {
    float *x = (float *)malloc(sizeof(float) * n * 16);
    int32_t *y = (int32_t *)malloc(sizeof(int32_t) * n);
    int64_t shape[1] = {16};
    gdl_dataset *ds;
    int i, k;
    gdl_manual_seed(seed);
    for (i = 0; i < n; i++) {
        y[i] = i % 4;
        for (k = 0; k < 16; k++) {
            const double c = ((k + y[i]) % 4 == 0) ? 2.0 : (k % 4 == y[i]) ? -1.0 : 0.0;
            x[i * 16 + k] = (float)(0.6 * c + 2.0 * (gdl_rng_uniform() + gdl_rng_uniform() + gdl_rng_uniform() - 1.5));
        }
    }
    ds = gdl_dataset_from_arrays(x, GDL_F32, 1, shape, y, n, 4);
    free(x);
    free(y);
    return ds;
}

static gdl_module *mlp(void) {
    return gdl_nn_sequential(5, (gdl_module *[]){gdl_nn_linear(16, 64, 1), gdl_nn_relu(), gdl_nn_linear(64, 32, 1),
                                                 gdl_nn_relu(), gdl_nn_linear(32, 4, 1)});
}

/* the model, trained once for the tests that need one */
static gdl_module *trained;
static gdl_dataset *train_ds, *test_ds;
static gdl_loader *test_loader;

static enum harness_result train_once(void) {
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts fo = gdl_fit_defaults();
    gdl_loader *tl;
    gdl_optimizer *opt;
    if (trained) PASS();
    ASSERT_NOT_NULL(train_ds = blobs(800, 11));
    ASSERT_NOT_NULL(test_ds = blobs(400, 12));
    gdl_manual_seed(3);
    ASSERT_NOT_NULL(trained = mlp());
    lo.batch_size = 32;
    lo.shuffle = 1;
    ASSERT_NOT_NULL(tl = gdl_loader_new(train_ds, &lo));
    lo.shuffle = 0;
    lo.batch_size = 100;
    ASSERT_NOT_NULL(test_loader = gdl_loader_new(test_ds, &lo));
    ASSERT_NOT_NULL(opt = gdl_sgd_new(0.05, 0.9, 0, 0, 0));
    ASSERT_EQ(0, gdl_optim_add_module(opt, trained, 0));
    fo.epochs = 4;
    fo.verbose = 0;
    ASSERT_EQ(0, gdl_fit(trained, tl, opt, &fo, NULL));
    gdl_optim_free(opt);
    gdl_loader_free(tl);
    PASS();
}

TEST test_dynamic_mlp_accuracy(void) {
    gdl_module *q;
    double lf, af, lq, aq;
    CHECK_CALL(train_once());
    ASSERT_EQ(0, gdl_evaluate(trained, test_loader, NULL, NULL, &lf, &af));
    ASSERT_NOT_NULL(q = gdl_quantize_dynamic(trained, NULL));
    ASSERT_EQ(0, gdl_evaluate(q, test_loader, NULL, NULL, &lq, &aq));
    printf("\n  blobs MLP: f32 accuracy %.2f%% loss %.4f, dynamic int8 %.2f%% loss %.4f\n", 100 * af, lf, 100 * aq, lq);
    ASSERT_GE(af, 0.85);
    ASSERTm("dynamic quantization lost more than 1.5 points", aq >= af - 0.015);
    ASSERT_IN_RANGE(lf, lq, 0.05);
    ASSERT_EQ(1, gdl_module_is_quantized(q));
    ASSERT_EQ(0, gdl_module_is_quantized(trained));
    gdl_module_free(q);
    PASS();
}

TEST test_summary_and_size(void) {
    gdl_module *m = gdl_nn_sequential(3, (gdl_module *[]){gdl_nn_linear(784, 128, 1), gdl_nn_relu(),
                                                          gdl_nn_linear(128, 10, 1)}), *q;
    FILE *f = tmpfile();
    char buf[4096];
    size_t n;
    int64_t fb, qb;
    ASSERT_NOT_NULL(m);
    ASSERT_NOT_NULL(q = gdl_quantize_dynamic(m, NULL));
    fb = gdl_module_nbytes(m);
    qb = gdl_module_nbytes(q);
    ASSERT_EQ(4 * (784 * 128 + 128 + 128 * 10 + 10), fb);
    /* int8 weights, an f32 scale and an i32 zero point per row, f32 bias */
    ASSERT_EQ(784 * 128 + 128 * 12 + 128 * 10 + 10 * 12, qb);
    ASSERT_LE((double)qb, 0.3 * (double)fb);
    ASSERT_NOT_NULL(f);
    ASSERT_EQ(0, gdl_module_summary(q, 2, (int64_t[]){1, 784}, f));
    rewind(f);
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    ASSERT_CONTAINS(buf, "0 (DynamicQuantizedLinear)");
    ASSERT_CONTAINS(buf, "100,480"); /* its parameters: int8 weights and bias */
    ASSERT_CONTAINS(buf, "Size: 103,288 bytes");
    ASSERT_CONTAINS(buf, "int8 weights");
    gdl_module_free(m);
    gdl_module_free(q);
    PASS();
}

/* ---- files ---- */

TEST test_safetensors_round_trip(void) {
    const char *path = "build/test_quant_rt.safetensors";
    gdl_module *q, *other, *q2;
    gdl_qconfig pt = gdl_qconfig_default();
    gdl_st_file f;
    const gdl_st_entry *e;
    gdl_tensor *x, *y1, *y2;
    int same;
    CHECK_CALL(train_once());
    ASSERT_NOT_NULL(q = gdl_quantize_dynamic(trained, NULL));
    ASSERT_EQ(0, gdl_quant_save(q, path));
    ASSERT_EQ(0, gdl_st_read(path, &f));
    ASSERT_EQ(12, f.n);
    ASSERT_NOT_NULL(e = gdl_st_find(&f, "0.weight_int8"));
    ASSERT_STR_EQ("I8", e->dtype);
    ASSERT_EQ(64, e->shape[0]);
    ASSERT_EQ(16, e->shape[1]);
    ASSERT_NOT_NULL(e = gdl_st_find(&f, "0.weight_scale"));
    ASSERT_STR_EQ("F32", e->dtype);
    ASSERT_EQ(64, e->shape[0]);
    ASSERT_NOT_NULL(e = gdl_st_find(&f, "4.weight_zero_point"));
    ASSERT_STR_EQ("I32", e->dtype);
    ASSERT_NOT_NULL(e = gdl_st_find(&f, "2.bias"));
    ASSERT_STR_EQ("F32", e->dtype);
    gdl_st_free(&f);
    /* into a quantized copy of another model: the same outputs, bit for bit */
    gdl_manual_seed(99);
    ASSERT_NOT_NULL(other = mlp());
    ASSERT_NOT_NULL(q2 = gdl_quantize_dynamic(other, NULL));
    ASSERT_NOT_NULL(x = gdl_randn(GDL_DIMS(10, 16), CPU));
    ASSERT_EQ(0, gdl_quant_load(q2, path));
    ASSERT_NOT_NULL(y1 = gdl_forward(q, x));
    ASSERT_NOT_NULL(y2 = gdl_forward(q2, x));
    same = memcmp(y1->data, y2->data, sizeof(gdl_real) * (size_t)y1->numel) == 0;
    ASSERTm("the loaded model computes other outputs", same);
    /* a per-tensor model has other shapes: refused, nothing changed */
    gdl_module_free(q2);
    pt.per_channel = 0;
    ASSERT_NOT_NULL(q2 = gdl_quantize_dynamic(other, &pt));
    ASSERT_EQ(-1, gdl_quant_load(q2, path));
    ASSERT_CONTAINS(gdl_last_error(), "tensor '0.weight_scale' is F32 [64] in the file but F32 [1] in the model");
    /* a float model is neither saved nor loaded this way */
    ASSERT_EQ(-1, gdl_quant_save(other, path));
    ASSERT_CONTAINS(gdl_last_error(), "holds no quantized module");
    ASSERT_EQ(-1, gdl_quant_load(other, path));
    ASSERT_CONTAINS(gdl_last_error(), "holds no quantized module");
    gdl_module_free(q);
    gdl_module_free(q2);
    gdl_module_free(other);
    gdl_free(x);
    remove(path);
    PASS();
}

/* ---- static quantization ---- */

/* a file's one-element tensor (F32 or I32) as a double */
static double st_scalar(const gdl_st_file *f, const char *name) {
    const gdl_st_entry *e = gdl_st_find(f, name);
    float v;
    int32_t z;
    if (!e) return NAN;
    if (!strcmp(e->dtype, "I32")) {
        memcpy(&z, f->data + e->begin, 4);
        return z;
    }
    memcpy(&v, f->data + e->begin, 4);
    return v;
}

/* a 1-layer Linear(4, 3) prepared with qc, fed the batches, converted; its input scale and zero point */
static enum harness_result observe_case(const gdl_qconfig *qc, int nb, const float *const *batches, const int *rows,
                                        double *scale, double *zp) {
    const char *path = "build/test_quant_obs.safetensors";
    gdl_module *lin = gdl_nn_linear(4, 3, 1), *p, *q;
    gdl_st_file f;
    int b;
    ASSERT_NOT_NULL(p = gdl_quant_prepare(lin, qc));
    ASSERT_STR_EQ("ObservedLinear", gdl_module_kind(p));
    for (b = 0; b < nb; b++) {
        int64_t n = rows[b];
        gdl_tensor *x = gdl_from_array(batches[b], 2, (int64_t[]){n, 4}, GDL_F32, CPU);
        ASSERT_NOT_NULL(gdl_forward(p, x));
        gdl_free(x);
    }
    ASSERT_NOT_NULL(q = gdl_quant_convert(p));
    ASSERT_STR_EQ("QuantizedLinear", gdl_module_kind(q));
    ASSERT_EQ(0, gdl_quant_save(q, path));
    ASSERT_EQ(0, gdl_st_read(path, &f));
    *scale = st_scalar(&f, "input_scale");
    *zp = st_scalar(&f, "input_zero_point");
    ASSERT_EQ(1, (int)st_scalar(&f, "weight_zero_point") == 0);
    gdl_st_free(&f);
    remove(path);
    gdl_module_free(lin);
    gdl_module_free(p);
    gdl_module_free(q);
    PASS();
}

TEST test_observers(void) {
    static const float b1[8] = {-1, 0.5f, 2, 0, 0, 0, 1, 1}, b2[8] = {-3, 1, 0, 0, 0.25f, 0, 0, 0};
    static const float b3[8] = {-3, 4, 0, 0, 0, 0, 0, 0};
    const float *mm[2] = {b1, b2}, *ma[2] = {b1, b3};
    int rows[2] = {2, 2};
    gdl_qconfig qc = gdl_qconfig_default();
    double s, z;
    float *h;
    int i;
    /* min-max over both batches: [-3, 2] on 0..127: scale 5/127, zero point round(3 / scale) = 76 */
    CHECK_CALL(observe_case(&qc, 2, mm, rows, &s, &z));
    ASSERT_IN_RANGE((double)(5.0f / 127.0f), s, 0);
    ASSERT_EQ(76, (int)z);
    /* 8 bits: 0..255 */
    qc.reduce_range = 0;
    CHECK_CALL(observe_case(&qc, 2, mm, rows, &s, &z));
    ASSERT_IN_RANGE((double)(5.0f / 255.0f), s, 0);
    ASSERT_EQ(153, (int)z);
    /* moving average, constant 0.5: [-1, 2] then [-3, 4] -> [-2, 3] */
    qc = gdl_qconfig_default();
    qc.observer = GDL_QOBS_MOVING_AVERAGE;
    qc.averaging_constant = 0.5;
    CHECK_CALL(observe_case(&qc, 2, ma, rows, &s, &z));
    ASSERT_IN_RANGE((double)(5.0f / 127.0f), s, 1e-9);
    ASSERT_EQ(51, (int)z);
    /* histogram with the 99.9th percentile: an outlier of 100 among 4000 values in [0, 1] is clipped */
    h = (float *)malloc(sizeof(float) * 4000);
    for (i = 0; i < 4000; i++) h[i] = (float)(i % 1000) / 1000.0f;
    h[17] = 100;
    {
        const float *hb[1] = {h};
        int hr[1] = {1000};
        qc = gdl_qconfig_default();
        qc.observer = GDL_QOBS_HISTOGRAM;
        qc.percentile = 0.999;
        CHECK_CALL(observe_case(&qc, 1, hb, hr, &s, &z));
        ASSERT_LT(s, 1.1 / 127);
        ASSERT_GT(s, 0.9 / 127);
        qc.observer = GDL_QOBS_MINMAX; /* min-max keeps the outlier */
        CHECK_CALL(observe_case(&qc, 1, hb, hr, &s, &z));
        ASSERT_IN_RANGE((double)(100.0f / 127.0f), s, 0);
    }
    free(h);
    PASS();
}

/* A static quantized Conv2d (+ReLU) against the documented arithmetic, computed here by direct convolution:
   the input quantized with its observed parameters (taps in the padding are the zero point, i.e. 0.0), int64
   sums, bias, ReLU, requantized onto the output grid. */
TEST test_static_conv_reference(void) {
    const char *path = "build/test_quant_conv.safetensors";
    const int N = 2, C = 3, H = 7, W = 6, OC = 5, K = 3, S = 2, P = 1;
    const int OH = (H + 2 * P - K) / S + 1, OW = (W + 2 * P - K) / S + 1;
    gdl_module *m, *p, *q;
    gdl_tensor *x, *y;
    gdl_st_file f;
    const gdl_st_entry *e;
    float si, so, ws[5];
    int32_t zi, zo;
    int n, oc, oy, ox, c, i, j, relu;
    for (relu = 0; relu < 2; relu++) {
        gdl_manual_seed(5 + relu);
        m = relu ? gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_conv2d(C, OC, K, S, P, 1, 1, 1), gdl_nn_relu()})
                 : gdl_nn_sequential(1, (gdl_module *[]){gdl_nn_conv2d(C, OC, K, S, P, 1, 1, 1)});
        ASSERT_NOT_NULL(m);
        ASSERT_NOT_NULL(p = gdl_quant_prepare(m, NULL));
        ASSERT_STR_EQ(relu ? "ObservedConvReLU2d" : "ObservedConv2d", gdl_module_kind(gdl_module_child(p, "0")));
        if (relu) ASSERT_STR_EQ("Identity", gdl_module_kind(gdl_module_child(p, "1")));
        ASSERT_NOT_NULL(x = gdl_randn(GDL_DIMS(N, C, H, W), CPU));
        ASSERT_NOT_NULL(gdl_forward(p, x));
        ASSERT_NOT_NULL(q = gdl_quant_convert(p));
        ASSERT_STR_EQ(relu ? "QuantizedConvReLU2d" : "QuantizedConv2d", gdl_module_kind(gdl_module_child(q, "0")));
        ASSERT_NOT_NULL(y = gdl_forward(q, x));
        ASSERT_EQ(OH, y->shape[2]);
        ASSERT_EQ(OW, y->shape[3]);
        ASSERT_EQ(0, gdl_quant_save(q, path));
        ASSERT_EQ(0, gdl_st_read(path, &f));
        ASSERT_NOT_NULL(e = gdl_st_find(&f, "0.weight_int8"));
        ASSERT_EQ(4, e->ndim);
        ASSERT_EQ(K, e->shape[3]);
        si = (float)st_scalar(&f, "0.input_scale");
        zi = (int32_t)st_scalar(&f, "0.input_zero_point");
        so = (float)st_scalar(&f, "0.output_scale");
        zo = (int32_t)st_scalar(&f, "0.output_zero_point");
        if (relu) ASSERT_EQ(0, zo);
        gdl_st_free(&f);
        remove(path);
        {
            const gdl_real *Wt = R(gdl_module_tensor(m, "0.weight")), *bt = R(gdl_module_tensor(m, "0.bias"));
            const int KK = C * K * K;
            for (oc = 0; oc < OC; oc++) {
                float amax = 0;
                for (i = 0; i < KK; i++) amax = fabsf((float)Wt[oc * KK + i]) > amax ? fabsf((float)Wt[oc * KK + i]) : amax;
                ws[oc] = amax / 127.5f;
            }
            for (n = 0; n < N; n++)
                for (oc = 0; oc < OC; oc++)
                    for (oy = 0; oy < OH; oy++)
                        for (ox = 0; ox < OW; ox++) {
                            long long acc = 0;
                            float v, r, got;
                            for (c = 0; c < C; c++)
                                for (i = 0; i < K; i++)
                                    for (j = 0; j < K; j++) {
                                        const int yy = oy * S - P + i, xx = ox * S - P + j;
                                        float qx, qw;
                                        if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
                                        qx = nearbyintf((float)R(x)[((n * C + c) * H + yy) * W + xx] * (1.0f / si)) + (float)zi;
                                        qx = qx < 0 ? 0 : qx > 127 ? 127 : qx;
                                        qw = nearbyintf((float)Wt[oc * KK + (c * K + i) * K + j] * (1.0f / ws[oc]));
                                        qw = qw < -128 ? -128 : qw > 127 ? 127 : qw;
                                        acc += ((long long)qx - zi) * (long long)qw;
                                    }
                            v = (float)acc * (si * ws[oc]) + (float)bt[oc];
                            if (relu && v < 0) v = 0;
                            r = nearbyintf(v / so) + (float)zo;
                            r = r < 0 ? 0 : r > 127 ? 127 : r;
                            v = (r - (float)zo) * so;
                            got = (float)R(y)[((n * OC + oc) * OH + oy) * OW + ox];
                            if (!(fabsf(got - v) <= 1e-6f * (1 + fabsf(v))))
                                FAILf("relu %d: y[%d][%d][%d][%d] = %.9g, reference %.9g", relu, n, oc, oy, ox,
                                      (double)got, (double)v);
                        }
        }
        gdl_module_free(m);
        gdl_module_free(p);
        gdl_module_free(q);
        gdl_free(x);
    }
    PASS();
}

/* tiny images: a bright 3x3 square in one of 4 quadrants of 1x8x8, plus noise; label = quadrant */
static gdl_dataset *squares(int n, uint64_t seed) {
    float *x = (float *)malloc(sizeof(float) * n * 64);
    int32_t *y = (int32_t *)malloc(sizeof(int32_t) * n);
    int64_t shape[3] = {1, 8, 8};
    gdl_dataset *ds;
    int i, k;
    gdl_manual_seed(seed);
    for (i = 0; i < n; i++) {
        const int qd = i % 4, oy = (qd / 2) * 4 + (int)(gdl_rng_uniform() * 2), ox = (qd % 2) * 4 + (int)(gdl_rng_uniform() * 2);
        y[i] = qd;
        for (k = 0; k < 64; k++) x[i * 64 + k] = (float)(1.0 * gdl_rng_uniform());
        for (k = 0; k < 9; k++) x[i * 64 + (oy + k / 3) * 8 + ox + k % 3] += 0.5f;
    }
    ds = gdl_dataset_from_arrays(x, GDL_F32, 3, shape, y, n, 4);
    free(x);
    free(y);
    return ds;
}

TEST test_static_cnn_and_mlp_accuracy(void) {
    gdl_dataset *tr = squares(400, 21), *te = squares(200, 22);
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts fo = gdl_fit_defaults();
    gdl_loader *tl, *vl;
    gdl_optimizer *opt;
    gdl_module *cnn, *p, *q, *pm, *qm;
    double af, aq, am, lf, lq;
    int obs;
    ASSERT_NOT_NULL(tr);
    ASSERT_NOT_NULL(te);
    gdl_manual_seed(4);
    cnn = gdl_nn_sequential(7, (gdl_module *[]){gdl_nn_conv2d(1, 8, 3, 1, 1, 1, 1, 1), gdl_nn_relu(),
                                                gdl_nn_maxpool2d(2, 2, 0), gdl_nn_conv2d(8, 8, 3, 1, 1, 1, 1, 1),
                                                gdl_nn_relu(), gdl_nn_flatten(1), gdl_nn_linear(8 * 4 * 4, 4, 1)});
    ASSERT_NOT_NULL(cnn);
    lo.batch_size = 20;
    lo.shuffle = 1;
    ASSERT_NOT_NULL(tl = gdl_loader_new(tr, &lo));
    lo.shuffle = 0;
    lo.batch_size = 50;
    ASSERT_NOT_NULL(vl = gdl_loader_new(te, &lo));
    ASSERT_NOT_NULL(opt = gdl_adam_new(0.01, 0.9, 0.999, 1e-8, 0));
    ASSERT_EQ(0, gdl_optim_add_module(opt, cnn, 0));
    fo.epochs = 3;
    fo.verbose = 0;
    ASSERT_EQ(0, gdl_fit(cnn, tl, opt, &fo, NULL));
    ASSERT_EQ(0, gdl_evaluate(cnn, vl, NULL, NULL, &lf, &af));
    for (obs = GDL_QOBS_MINMAX; obs <= GDL_QOBS_HISTOGRAM; obs++) {
        gdl_qconfig qc = gdl_qconfig_default();
        qc.observer = obs;
        qc.averaging_constant = 0.1;
        ASSERT_NOT_NULL(p = gdl_quant_prepare(cnn, &qc));
        ASSERT_EQ(5, gdl_quant_calibrate(p, tl, 5));
        ASSERT_NOT_NULL(q = gdl_quant_convert(p));
        ASSERT_EQ(0, gdl_evaluate(q, vl, NULL, NULL, &lq, &aq));
        printf("\n  squares CNN: f32 %.2f%%, static int8 (observer %d) %.2f%%", 100 * af, obs, 100 * aq);
        ASSERT_GE(af, 0.9);
        ASSERTm("static quantization of the CNN lost more than 2 points", aq >= af - 0.02);
        gdl_module_free(p);
        gdl_module_free(q);
    }
    printf("\n");
    /* the blobs MLP (Linear+ReLU fused) */
    CHECK_CALL(train_once());
    ASSERT_NOT_NULL(pm = gdl_quant_prepare(trained, NULL));
    ASSERT_STR_EQ("ObservedLinearReLU", gdl_module_kind(gdl_module_child(pm, "2")));
    ASSERT_STR_EQ("ObservedLinear", gdl_module_kind(gdl_module_child(pm, "4")));
    ASSERT_LT(0, gdl_quant_calibrate(pm, test_loader, 0));
    ASSERT_NOT_NULL(qm = gdl_quant_convert(pm));
    ASSERT_EQ(0, gdl_evaluate(trained, test_loader, NULL, NULL, &lf, &af));
    ASSERT_EQ(0, gdl_evaluate(qm, test_loader, NULL, NULL, &lq, &am));
    ASSERTm("static quantization of the MLP lost more than 1.5 points", am >= af - 0.015);
    gdl_module_free(pm);
    gdl_module_free(qm);
    gdl_optim_free(opt);
    gdl_module_free(cnn);
    gdl_loader_free(tl);
    gdl_loader_free(vl);
    gdl_dataset_free(tr);
    gdl_dataset_free(te);
    PASS();
}

TEST test_static_errors_and_round_trip(void) {
    const char *path = "build/test_quant_static.safetensors";
    gdl_module *m = gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_linear(6, 5, 1), gdl_nn_relu()}), *p, *q, *p2, *q2;
    gdl_module *g = gdl_nn_conv2d(4, 4, 3, 1, 1, 1, 2, 1);
    gdl_tensor *x = gdl_randn(GDL_DIMS(3, 6), CPU), *y1, *y2;
    gdl_qconfig bad = gdl_qconfig_default();
    int same;
    ASSERT_NOT_NULL(p = gdl_quant_prepare(m, NULL));
    /* convert before calibration, of a float model; calibrate a float model */
    ASSERT_NULL(gdl_quant_convert(p));
    ASSERT_CONTAINS(gdl_last_error(), "ObservedLinearReLU '0' has observed no data: calibrate");
    ASSERT_NULL(gdl_quant_convert(m));
    ASSERT_CONTAINS(gdl_last_error(), "has no observed layer");
    ASSERT_EQ(-1, gdl_quant_calibrate(m, test_loader ? test_loader : NULL, 1));
    ASSERT_NULL(gdl_quant_prepare(g, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "groups=2");
    bad.observer = 7;
    ASSERT_NULL(gdl_quant_prepare(m, &bad));
    ASSERT_CONTAINS(gdl_last_error(), "bad qconfig");
    /* a round trip through a file: another model, prepared, calibrated on other data, converted, loaded */
    ASSERT_NOT_NULL(gdl_forward(p, x));
    ASSERT_NOT_NULL(q = gdl_quant_convert(p));
    ASSERT_NULL(gdl_quant_prepare(q, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "(already quantized)");
    ASSERT_EQ(0, gdl_quant_save(q, path));
    gdl_manual_seed(77);
    {
        gdl_module *m2 = gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_linear(6, 5, 1), gdl_nn_relu()});
        gdl_tensor *x2 = gdl_randn(GDL_DIMS(2, 6), CPU);
        ASSERT_NOT_NULL(p2 = gdl_quant_prepare(m2, NULL));
        ASSERT_NOT_NULL(gdl_forward(p2, x2));
        ASSERT_NOT_NULL(q2 = gdl_quant_convert(p2));
        ASSERT_EQ(0, gdl_quant_load(q2, path));
        gdl_module_free(m2);
        gdl_free(x2);
    }
    ASSERT_NOT_NULL(y1 = gdl_forward(q, x));
    ASSERT_NOT_NULL(y2 = gdl_forward(q2, x));
    same = memcmp(y1->data, y2->data, sizeof(gdl_real) * (size_t)y1->numel) == 0;
    ASSERTm("the loaded static model computes other outputs", same);
    remove(path);
    gdl_module_free(m);
    gdl_module_free(g);
    gdl_module_free(p);
    gdl_module_free(q);
    gdl_module_free(p2);
    gdl_module_free(q2);
    gdl_free(x);
    PASS();
}

/* ---- quantization-aware training ---- */

/* values on the grid, and the clipped straight-through gradient: the finite differences of its surrogate
   clamp(x, (qmin - zp - 1/2) * s, (qmax - zp + 1/2) * s) (the identity where x rounds into the range) away
   from the clipping points */
TEST test_fake_quantize(void) {
    const float s = 0.25f;
    const int32_t z = 3;
    static const float xs[] = {-1.3f, -0.74f, -0.1f, 0, 0.3f, 1.1f, 2.9f, 3.05f, 7.0f, -5.0f};
    const int n = (int)(sizeof xs / sizeof *xs);
    gdl_tensor *x = gdl_from_array(xs, 1, (int64_t[]){n}, GDL_F32, CPU), *y, *l;
    int i;
    ASSERT_NOT_NULL(x);
    gdl_set_requires_grad(x, 1);
    ASSERT_NOT_NULL(y = gdl_fake_quantize(x, s, z, 0, 15));
    ASSERT_NOT_NULL(l = gdl_sum(y));
    ASSERT_EQ(0, gdl_backward(l));
    for (i = 0; i < n; i++) {
        const double q = nearbyint(xs[i] / s) + z, qc = q < 0 ? 0 : q > 15 ? 15 : q;
        const double lo = (0 - z - 0.5) * s, hi = (15 - z + 0.5) * s, h = 1e-3; /* where rounding stays in range */
        const double fd = ((xs[i] + h < lo ? lo : xs[i] + h > hi ? hi : xs[i] + h) -
                           (xs[i] - h < lo ? lo : xs[i] - h > hi ? hi : xs[i] - h)) / (2 * h);
        ASSERT_IN_RANGE((qc - z) * s, (double)R(y)[i], 0);
        ASSERT_IN_RANGE(q >= 0 && q <= 15 ? 1.0 : 0.0, (double)R(x->grad)[i], 0);
        ASSERT_IN_RANGE(fd, (double)R(x->grad)[i], 1e-6);
    }
    ASSERT_NULL(gdl_fake_quantize(x, 0, z, 0, 15));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_fake_quantize: bad scale 0");
    gdl_free(x);
    PASS();
}

/* Conv2d + BatchNorm2d + ReLU: the BatchNorm folded at prepare computes what the eval-mode model does */
TEST test_conv_bn_folding(void) {
    gdl_module *m = gdl_nn_sequential(3, (gdl_module *[]){gdl_nn_conv2d(2, 4, 3, 1, 1, 1, 1, 0), gdl_nn_batchnorm2d(4),
                                                          gdl_nn_relu()}), *p;
    gdl_tensor *x = gdl_randn(GDL_DIMS(3, 2, 5, 5), CPU), *y0, *y1;
    int64_t i;
    ASSERT_NOT_NULL(m);
    ASSERT_NOT_NULL(gdl_forward(m, x)); /* training mode: running statistics move away from 0 / 1 */
    ASSERT_NOT_NULL(gdl_forward(m, gdl_mul_scalar(x, 2)));
    gdl_module_train(m, 0);
    for (i = 0; i < 4; i++) R(gdl_module_tensor(m, "1.weight"))[i] = (gdl_real)(0.5 + 0.3 * (double)i);
    ASSERT_NOT_NULL(y0 = gdl_forward(m, x));
    ASSERT_NOT_NULL(p = gdl_quant_prepare(m, NULL));
    ASSERT_STR_EQ("ObservedConvReLU2d", gdl_module_kind(gdl_module_child(p, "0")));
    ASSERT_STR_EQ("Identity", gdl_module_kind(gdl_module_child(p, "1")));
    ASSERT_STR_EQ("Identity", gdl_module_kind(gdl_module_child(p, "2")));
    ASSERT_NOT_NULL(gdl_module_tensor(p, "0.bias")); /* added by the folding */
    ASSERT_NOT_NULL(y1 = gdl_forward(p, x));
    for (i = 0; i < y0->numel; i++) ASSERT_IN_RANGE((double)R(y0)[i], (double)R(y1)[i], 1e-5);
    gdl_module_free(m);
    gdl_module_free(p);
    gdl_free(x);
    PASS();
}

TEST test_qat_mlp(void) {
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts fo = gdl_fit_defaults();
    gdl_loader *tl;
    gdl_optimizer *opt;
    gdl_module *p, *q, *q2;
    gdl_tensor *big;
    double af, aq, lf, lq;
    const char *path = "build/test_quant_qat.safetensors";
    gdl_st_file f;
    double s_before, s_after;
    CHECK_CALL(train_once());
    ASSERT_NOT_NULL(p = gdl_quant_prepare_qat(trained, NULL));
    ASSERT_STR_EQ("QATLinearReLU", gdl_module_kind(gdl_module_child(p, "0")));
    ASSERT_STR_EQ("QATLinear", gdl_module_kind(gdl_module_child(p, "4")));
    lo.batch_size = 32;
    lo.shuffle = 1;
    lo.seed = 5;
    ASSERT_NOT_NULL(tl = gdl_loader_new(train_ds, &lo));
    ASSERT_NOT_NULL(opt = gdl_sgd_new(0.01, 0.9, 0, 0, 0));
    ASSERT_EQ(0, gdl_optim_add_module(opt, p, 0));
    fo.epochs = 1;
    fo.verbose = 0;
    ASSERT_EQ(0, gdl_fit(p, tl, opt, &fo, NULL)); /* observers and weights move together */
    ASSERT_EQ(0, gdl_quant_freeze_observers(p, 1));
    ASSERT_EQ(0, gdl_fit(p, tl, opt, &fo, NULL)); /* the quantization parameters stay */
    ASSERT_NOT_NULL(q = gdl_quant_convert(p));
    ASSERT_EQ(0, gdl_quant_save(q, path));
    ASSERT_EQ(0, gdl_st_read(path, &f));
    s_before = st_scalar(&f, "0.input_scale");
    gdl_st_free(&f);
    /* frozen: a batch far outside the range changes nothing */
    ASSERT_NOT_NULL(big = gdl_full(2, (int64_t[]){2, 16}, 1000.0, GDL_F32, CPU));
    ASSERT_NOT_NULL(gdl_forward(p, big));
    ASSERT_NOT_NULL(q2 = gdl_quant_convert(p));
    ASSERT_EQ(0, gdl_quant_save(q2, path));
    ASSERT_EQ(0, gdl_st_read(path, &f));
    s_after = st_scalar(&f, "0.input_scale");
    gdl_st_free(&f);
    ASSERT_IN_RANGE(s_before, s_after, 0);
    ASSERT_EQ(0, gdl_evaluate(trained, test_loader, NULL, NULL, &lf, &af));
    ASSERT_EQ(0, gdl_evaluate(q, test_loader, NULL, NULL, &lq, &aq));
    printf("\n  blobs MLP: f32 %.2f%%, QAT int8 %.2f%%\n", 100 * af, 100 * aq);
    ASSERTm("QAT lost more than 1.5 points", aq >= af - 0.015);
    ASSERT_EQ(-1, gdl_quant_freeze_observers(trained, 1));
    ASSERT_CONTAINS(gdl_last_error(), "has no observed layer");
    remove(path);
    gdl_optim_free(opt);
    gdl_loader_free(tl);
    gdl_module_free(p);
    gdl_module_free(q);
    gdl_module_free(q2);
    gdl_free(big);
    PASS();
}

/* ---- weight tying (gdl_module_tie) ---- */

static int cmp_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* the names of a saved file, sorted, joined with spaces (for exact comparisons) */
static enum harness_result file_names(const char *path, char *out, size_t n) {
    gdl_st_file f;
    const char *v[64];
    int i;
    ASSERT_EQ(0, gdl_st_read(path, &f));
    ASSERT_LE(f.n, 64);
    for (i = 0; i < f.n; i++) v[i] = f.entries[i].name;
    qsort(v, (size_t)f.n, sizeof *v, cmp_name);
    out[0] = 0;
    for (i = 0; i < f.n; i++) {
        ASSERT_LT(strlen(out) + strlen(v[i]) + 2, n);
        if (i) strcat(out, " ");
        strcat(out, v[i]);
    }
    gdl_st_free(&f);
    PASS();
}

/* outputs of two models on x: equal bit for bit */
static enum harness_result same_outputs(gdl_module *a, gdl_module *b, gdl_tensor *x, const char *what) {
    gdl_tensor *ya, *yb;
    ASSERT_NOT_NULL(ya = gdl_forward(a, x));
    ASSERT_NOT_NULL(yb = gdl_forward(b, x));
    ASSERT_EQ(ya->numel, yb->numel);
    if (memcmp(ya->data, yb->data, sizeof(gdl_real) * (size_t)ya->numel)) FAILf("%s: the outputs differ", what);
    PASS();
}

/* a copy of model m (built by make from the same seed) with the values of m's tensors and no tie */
static gdl_module *untied_twin(gdl_module *(*make)(void), gdl_module *m) {
    gdl_module *u = make();
    const char *names[16];
    gdl_tensor *ts[16];
    int n = gdl_module_named_tensors(u, GDL_PARAMS, names, ts, 16), i;
    for (i = 0; i < n; i++) {
        const gdl_tensor *src = gdl_module_tensor(m, names[i]);
        if (!src || gdl_copy_(ts[i], src) < 0) return NULL;
    }
    return u;
}

static gdl_module *emb_head(void) { /* an embedding and the head that reads it back (nanoGPT's tying) */
    return gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_embedding(12, 8), gdl_nn_linear(8, 12, 1)});
}
static gdl_module *two_linears(void) {
    return gdl_nn_sequential(3, (gdl_module *[]){gdl_nn_linear(6, 6, 1), gdl_nn_relu(), gdl_nn_linear(6, 6, 1)});
}
static gdl_module *two_norms(void) {
    return gdl_nn_sequential(4, (gdl_module *[]){gdl_nn_linear(4, 4, 1), gdl_nn_layernorm(4), gdl_nn_linear(4, 4, 1),
                                                 gdl_nn_layernorm(4)});
}

/* model made by make, tie name -> target, dynamically quantized: the file holds the names want (the tied
   weight once); its size; outputs equal those of an untied twin with the same values; a file loaded into
   another tied model (other values) gives the same outputs again, so the weight loads back tied */
static enum harness_result tied_case(gdl_module *(*make)(void), const char *name, const char *target, gdl_tensor *x,
                                     const char *want, int64_t bytes) {
    const char *path = harness_tmp("test_quant_tied.safetensors");
    gdl_module *m, *q, *u, *qu, *m2, *q2;
    char names[512];
    int64_t i;
    gdl_manual_seed(31);
    ASSERT_NOT_NULL(m = make());
    ASSERT_EQ(0, gdl_module_tie(m, name, target));
    for (i = 0; i < gdl_module_tensor(m, target)->numel; i++) /* LayerNorm's ones: something else */
        R(gdl_module_tensor(m, target))[i] = (gdl_real)(0.3 + 0.05 * (double)(i % 7) - 0.02 * (double)i);
    ASSERT_NOT_NULL(q = gdl_quantize_dynamic(m, NULL));
    ASSERT_EQ(bytes, gdl_module_nbytes(q));
    ASSERT_EQ(0, gdl_quant_save(q, path));
    CHECK_CALL(file_names(path, names, sizeof names));
    ASSERT_STR_EQ(want, names);
    ASSERT_NOT_NULL(u = untied_twin(make, m));
    ASSERT_NOT_NULL(qu = gdl_quantize_dynamic(u, NULL));
    CHECK_CALL(same_outputs(q, qu, x, "tied against untied"));
    gdl_manual_seed(32);
    ASSERT_NOT_NULL(m2 = make());
    ASSERT_EQ(0, gdl_module_tie(m2, name, target));
    ASSERT_NOT_NULL(q2 = gdl_quantize_dynamic(m2, NULL));
    ASSERT_EQ(0, gdl_quant_load(q2, path));
    CHECK_CALL(same_outputs(q, q2, x, "loaded"));
    if (gdl_module_tensor(q2, name) && gdl_module_tensor(q2, target))
        ASSERT(gdl_module_tensor(q2, name) == gdl_module_tensor(q2, target));
    remove(path);
    gdl_module_free(m), gdl_module_free(q), gdl_module_free(u), gdl_module_free(qu);
    gdl_module_free(m2), gdl_module_free(q2);
    PASS();
}

TEST test_tied_weights(void) {
    gdl_tensor *idx = gdl_from_array((int32_t[]){3, 0, 11, 5, 5, 7}, 2, (int64_t[]){2, 3}, GDL_I32, CPU);
    gdl_tensor *x6 = gdl_randn(GDL_DIMS(5, 6), CPU), *x4 = gdl_randn(GDL_DIMS(5, 4), CPU);
    const char *path = harness_tmp("test_quant_tied_static.safetensors");
    gdl_module *m, *p, *q;
    char names[512];
    ASSERT(idx && x6 && x4);
    /* a head tied to the float embedding: the embedding stored, the head's int8 weight derived from it */
    CHECK_CALL(tied_case(emb_head, "1.weight", "0.weight", idx, "0.weight 1.bias", 12 * 8 * 4 + 12 * 4));
    /* two quantized layers, one weight: quantized and stored once */
    CHECK_CALL(tied_case(two_linears, "2.weight", "0.weight", x6,
                         "0.bias 0.weight_int8 0.weight_scale 0.weight_zero_point 2.bias", 36 + 6 * 8 + 2 * 6 * 4));
    /* two float parameters */
    CHECK_CALL(tied_case(two_norms, "3.weight", "1.weight", x4,
                         "0.bias 0.weight_int8 0.weight_scale 0.weight_zero_point 1.bias 1.weight 2.bias "
                         "2.weight_int8 2.weight_scale 2.weight_zero_point 3.bias",
                         2 * (16 + 4 * 8 + 4 * 4) + 3 * 4 * 4));
    /* static: the observed layers keep one tensor (one gradient in QAT), the converted ones one int8 weight */
    gdl_manual_seed(33);
    ASSERT_NOT_NULL(m = two_linears());
    ASSERT_EQ(0, gdl_module_tie(m, "2.weight", "0.weight"));
    ASSERT_NOT_NULL(p = gdl_quant_prepare_qat(m, NULL));
    ASSERT(gdl_module_tensor(p, "0.weight") == gdl_module_tensor(p, "2.weight"));
    ASSERT_EQ(36 + 12, gdl_module_num_params(p));
    ASSERT_NOT_NULL(gdl_forward(p, x6));
    ASSERT_NOT_NULL(q = gdl_quant_convert(p));
    ASSERT_EQ(0, gdl_quant_save(q, path));
    CHECK_CALL(file_names(path, names, sizeof names));
    ASSERT_STR_EQ("0.bias 0.input_scale 0.input_zero_point 0.output_scale 0.output_zero_point 0.weight_int8 "
                  "0.weight_scale 0.weight_zero_point 2.bias 2.input_scale 2.input_zero_point 2.output_scale "
                  "2.output_zero_point", names);
    remove(path);
    gdl_module_free(m), gdl_module_free(p), gdl_module_free(q);
    gdl_free(idx), gdl_free(x6), gdl_free(x4);
    PASS();
}

/* ---- dynamic LSTM / GRU ---- */

static double sigm(double v) { return 1 / (1 + exp(-v)); }

/* One layer, one direction of a float LSTM (G 4: gates i, f, g, o) or GRU (G 3: r, z, n), batch_first x [B, T,
   I], computed here in double. With tf (the quantized module's output [B, T, D*H]) each step starts from the
   quantized module's previous hidden state (teacher forcing: a step's error does not feed the next one's
   through h, so the bound stays that of one step), and beside the result comes a bound on how far the
   quantized step can be: a projection's error is at most sum_k |x_k| sw/2 + |w_k| e + e sw/2, with sw the
   row's weight scale (rounding: half a step) and e a whole activation step of its input (the nudged zero
   point can move the grid by half a step); sigmoid moves at most 1/4 and tanh 1 per unit; an LSTM's cell
   state, not seen, carries its error (ec) on. h0, c0: the initial states [D, B, H] (exact), or NULL: zeros.
   Fills ref [B, T, D*H] (this direction's columns) and bound. */
static void rnn_ref_dir(int lstm, int dir, int D, int B, int T, int I, int H, const float *x, const gdl_real *Wih,
                        const gdl_real *Whh, const gdl_real *bih, const gdl_real *bhh, int per_channel, int qmax,
                        const gdl_real *tf, const gdl_real *h0, const gdl_real *c0, double *ref, double *bound) {
    const int G = lstm ? 4 : 3;
    double *h = calloc((size_t)B * H, sizeof(double)), *c = calloc((size_t)B * H, sizeof(double));
    double *eh = calloc((size_t)B * H, sizeof(double)), *ec = calloc((size_t)B * H, sizeof(double));
    double *swi = malloc(sizeof(double) * G * H), *swh = malloc(sizeof(double) * G * H);
    double *gx = malloc(sizeof(double) * G * H), *gh = malloc(sizeof(double) * G * H);
    double *Ex = malloc(sizeof(double) * G * H), *Eh = malloc(sizeof(double) * G * H);
    double *nh = malloc(sizeof(double) * B * H), *nc = malloc(sizeof(double) * B * H);
    double *neh = malloc(sizeof(double) * B * H), *nec = malloc(sizeof(double) * B * H);
    double lo = 0, hi = 0, sx;
    int n, k, b, st, j, w;
    for (k = 0; k < B * H; k++) {
        h[k] = h0 ? (double)h0[dir * B * H + k] : 0;
        c[k] = c0 ? (double)c0[dir * B * H + k] : 0;
    }
    for (w = 0; w < 2; w++) { /* the weight scales, as the observers take them */
        const gdl_real *W = w ? Whh : Wih;
        const int K = w ? H : I;
        double *sw = w ? swh : swi, all = 0;
        for (n = 0; n < G * H; n++) {
            double a = 0;
            for (k = 0; k < K; k++) a = fabs((double)W[n * K + k]) > a ? fabs((double)W[n * K + k]) : a;
            sw[n] = a / 127.5;
            all = a > all ? a : all;
        }
        for (n = 0; !per_channel && n < G * H; n++) sw[n] = all / 127.5;
    }
    for (k = 0; k < B * T * I; k++) { /* the input's activation scale: one for the whole sequence */
        lo = x[k] < lo ? x[k] : lo;
        hi = x[k] > hi ? x[k] : hi;
    }
    sx = (hi - lo) / qmax;
    for (st = 0; st < T; st++) {
        const int t = dir ? T - 1 - st : st;
        double hlo = 0, hhi = 0, sh;
        for (k = 0; tf && st > 0 && k < B * H; k++) { /* the quantized module's h of the step before */
            h[k] = (double)tf[((size_t)(k / H) * T + (dir ? t + 1 : t - 1)) * D * H + dir * H + k % H];
            eh[k] = 0;
        }
        for (k = 0; k < B * H; k++) { /* this step's hidden activation scale, over the batch (quantized h) */
            hlo = h[k] - eh[k] < hlo ? h[k] - eh[k] : hlo;
            hhi = h[k] + eh[k] > hhi ? h[k] + eh[k] : hhi;
        }
        sh = (hhi - hlo) / qmax;
        for (b = 0; b < B; b++) {
            const float *xt = x + ((size_t)b * T + t) * I;
            const double *hb = h + b * H, *ehb = eh + b * H;
            for (n = 0; n < G * H; n++) {
                gx[n] = bih ? (double)bih[n] : 0;
                gh[n] = bhh ? (double)bhh[n] : 0;
                Ex[n] = Eh[n] = 0;
                for (k = 0; k < I; k++) {
                    gx[n] += (double)Wih[n * I + k] * xt[k];
                    Ex[n] += fabs((double)xt[k]) * swi[n] / 2 + fabs((double)Wih[n * I + k]) * sx + sx * swi[n] / 2;
                }
                for (k = 0; k < H; k++) {
                    const double e = ehb[k] + (sh > 0 ? sh : 0);
                    gh[n] += (double)Whh[n * H + k] * hb[k];
                    Eh[n] += fabs(hb[k]) * swh[n] / 2 + fabs((double)Whh[n * H + k]) * e + e * swh[n] / 2;
                }
            }
            for (j = 0; j < H; j++) {
                const int o = b * H + j;
                if (lstm) {
                    const double ig = sigm(gx[j] + gh[j]), fg = sigm(gx[H + j] + gh[H + j]);
                    const double gg = tanh(gx[2 * H + j] + gh[2 * H + j]), og = sigm(gx[3 * H + j] + gh[3 * H + j]);
                    const double Ei = Ex[j] + Eh[j], Ef = Ex[H + j] + Eh[H + j], Eg = Ex[2 * H + j] + Eh[2 * H + j];
                    const double Eo = Ex[3 * H + j] + Eh[3 * H + j];
                    nc[o] = fg * c[o] + ig * gg;
                    nec[o] = Ef / 4 * (fabs(c[o]) + ec[o]) + ec[o] + Ei / 4 + Eg;
                    nh[o] = og * tanh(nc[o]);
                    neh[o] = Eo / 4 + nec[o];
                } else {
                    const double r = sigm(gx[j] + gh[j]), z = sigm(gx[H + j] + gh[H + j]);
                    const double nn = tanh(gx[2 * H + j] + r * gh[2 * H + j]);
                    const double Er = (Ex[j] + Eh[j]) / 4, Ez = (Ex[H + j] + Eh[H + j]) / 4;
                    const double En = Ex[2 * H + j] + Er * (fabs(gh[2 * H + j]) + Eh[2 * H + j]) + Eh[2 * H + j];
                    nh[o] = (1 - z) * nn + z * h[o];
                    neh[o] = Ez * (fabs(nn) + fabs(h[o])) + En + eh[o];
                    nc[o] = nec[o] = 0;
                }
                ref[((size_t)b * T + t) * D * H + dir * H + j] = nh[o];
                bound[((size_t)b * T + t) * D * H + dir * H + j] = neh[o];
            }
        }
        memcpy(h, nh, sizeof(double) * B * H);
        memcpy(c, nc, sizeof(double) * B * H);
        memcpy(eh, neh, sizeof(double) * B * H);
        memcpy(ec, nec, sizeof(double) * B * H);
    }
    free(h), free(c), free(eh), free(ec), free(swi), free(swh), free(gx), free(gh), free(Ex), free(Eh);
    free(nh), free(nc), free(neh), free(nec);
}

/* a bidirectional, batch_first, one-layer LSTM / GRU and its dynamic quantization: the float module against
   the double reference (1e-5), the quantized one against it within the carried bound */
static enum harness_result rnn_bound_case(int lstm, int bias, int per_channel, int reduce_range) {
    const int B = 3, T = 7, I = 5, H = 6, D = 2, qmax = reduce_range ? 127 : 255;
    gdl_module *m = lstm ? gdl_nn_lstm(I, H, 1, bias, 1, 0, 1) : gdl_nn_gru(I, H, 1, bias, 1, 0, 1), *q;
    gdl_qconfig qc = gdl_qconfig_default();
    gdl_tensor *x = gdl_randn(GDL_DIMS(B, T, I), CPU), *yf, *yq;
    double *ref = malloc(sizeof(double) * B * T * D * H), *bnd = malloc(sizeof(double) * B * T * D * H);
    double *fl = malloc(sizeof(double) * B * T * D * H);
    float *xf = malloc(sizeof(float) * B * T * I);
    double maxerr = 0, maxbound = 0, maxq = 0, steperr = 0, stepbound = 0;
    const gdl_real *w[2][4];
    int i, d, t;
    ASSERT(m && x && ref && bnd && xf && fl);
    qc.per_channel = per_channel;
    qc.reduce_range = reduce_range;
    for (i = 0; i < B * T * I; i++) xf[i] = (float)(R(x)[i] *= 1.5);
    ASSERT_NOT_NULL(q = gdl_quantize_dynamic(m, &qc));
    ASSERT_STR_EQ(lstm ? "DynamicQuantizedLSTM" : "DynamicQuantizedGRU", gdl_module_kind(q));
    ASSERT_STR_EQ("DynamicQuantizedLinear", gdl_module_kind(gdl_module_child(q, "hh_l0_reverse")));
    ASSERT_NOT_NULL(yf = gdl_forward(m, x));
    ASSERT_NOT_NULL(yq = gdl_forward(q, x));
    ASSERT_EQ(B * T * D * H, yq->numel);
    ASSERT_EQ(3, yq->ndim);
    ASSERT_EQ(T, yq->shape[1]);
    ASSERT_NULL(yq->node);
    for (d = 0; d < D; d++) {
        char n[4][32];
        snprintf(n[0], 32, "weight_ih_l0%s", d ? "_reverse" : "");
        snprintf(n[1], 32, "weight_hh_l0%s", d ? "_reverse" : "");
        snprintf(n[2], 32, "bias_ih_l0%s", d ? "_reverse" : "");
        snprintf(n[3], 32, "bias_hh_l0%s", d ? "_reverse" : "");
        for (i = 0; i < 4; i++) w[d][i] = i < 2 || bias ? R(gdl_module_tensor(m, n[i])) : NULL;
        rnn_ref_dir(lstm, d, D, B, T, I, H, xf, w[d][0], w[d][1], w[d][2], w[d][3], per_channel, qmax, NULL, NULL,
                    NULL, fl, bnd);
        rnn_ref_dir(lstm, d, D, B, T, I, H, xf, w[d][0], w[d][1], w[d][2], w[d][3], per_channel, qmax, R(yq), NULL,
                    NULL, ref, bnd);
    }
    for (i = 0; i < B * T * D * H; i++) {
        const double e = fabs((double)R(yq)[i] - ref[i]);
        ASSERT_IN_RANGE(fl[i], (double)R(yf)[i], 1e-5);
        if (!(e <= bnd[i] + 1e-5))
            FAILf("%s bias %d per_channel %d reduce_range %d: out[%d] = %.6g, float %.6g: off by %.3g > bound %.3g",
                  lstm ? "LSTM" : "GRU", bias, per_channel, reduce_range, i, (double)R(yq)[i], ref[i], e, bnd[i]);
        maxerr = e > maxerr ? e : maxerr;
        maxbound = bnd[i] > maxbound ? bnd[i] : maxbound;
        maxq = fabs((double)R(yq)[i] - (double)R(yf)[i]) > maxq ? fabs((double)R(yq)[i] - (double)R(yf)[i]) : maxq;
    }
    ASSERTm("the quantized output equals the float one: nothing was quantized", maxq > 0);
    printf("\n  %s bias %d per_channel %d reduce_range %d: max |int8 - f32| %.3g over the sequence; a step from the "
           "int8 state: max error %.3g, largest bound %.3g", lstm ? "LSTM" : "GRU", bias, per_channel, reduce_range, maxq,
           maxerr, maxbound);
    /* step by step (T = 1, the states passed on): each step checked from the quantized states, the cell state
       included, within one step's bound */
    if (lstm) {
        gdl_tensor *hs = NULL, *cs = NULL, *xt, *o, *hn, *cn;
        float *xs = malloc(sizeof(float) * B * I);
        ASSERT_NOT_NULL(xs);
        for (t = 0; t < T; t++) {
            for (i = 0; i < B * I; i++) xs[i] = xf[(i / I) * T * I + t * I + i % I];
            ASSERT_NOT_NULL(xt = gdl_from_array(xs, 3, (int64_t[]){B, 1, I}, GDL_F32, CPU));
            ASSERT_EQ(0, gdl_nn_lstm_forward(q, xt, hs, cs, &o, &hn, &cn));
            for (d = 0; d < D; d++)
                rnn_ref_dir(1, d, D, B, 1, I, H, xs, w[d][0], w[d][1], w[d][2], w[d][3], per_channel, qmax, NULL,
                            hs ? R(hs) : NULL, cs ? R(cs) : NULL, ref, bnd);
            for (i = 0; i < B * D * H; i++) {
                const double e = fabs((double)R(o)[i] - ref[i]);
                if (!(e <= bnd[i] + 1e-5))
                    FAILf("LSTM step %d: out[%d] = %.6g, float %.6g: off by %.3g > bound %.3g", t, i, (double)R(o)[i],
                          ref[i], e, bnd[i]);
                steperr = e > steperr ? e : steperr;
                stepbound = bnd[i] > stepbound ? bnd[i] : stepbound;
            }
            gdl_free(xt);
            hs = hn;
            cs = cn;
        }
        free(xs);
        printf("; step by step: max error %.3g, largest bound %.3g", steperr, stepbound);
    }
    gdl_module_free(m), gdl_module_free(q);
    gdl_free(x);
    free(ref), free(bnd), free(xf), free(fl);
    PASS();
}

TEST test_dynamic_rnn_against_float(void) {
    int lstm;
    for (lstm = 1; lstm >= 0; lstm--) {
        gdl_manual_seed(60 + lstm);
        CHECK_CALL(rnn_bound_case(lstm, 1, 1, 1));
        CHECK_CALL(rnn_bound_case(lstm, 1, 0, 1));
        CHECK_CALL(rnn_bound_case(lstm, 0, 1, 0));
    }
    printf("\n");
    PASS();
}

/* two layers, states in and out, sizes and the summary, a file round trip, the errors */
TEST test_dynamic_rnn_states_files_errors(void) {
    const char *path = harness_tmp("test_quant_rnn.safetensors");
    const int64_t I = 5, H = 4, G = 4;
    gdl_module *m = gdl_nn_lstm(I, H, 2, 1, 0, 0, 0), *q, *m2, *q2, *g, *qg;
    gdl_tensor *x = gdl_randn(GDL_DIMS(6, 3, 5), CPU), *h0 = gdl_randn(GDL_DIMS(2, 3, 4), CPU);
    gdl_tensor *c0 = gdl_randn(GDL_DIMS(2, 3, 4), CPU), *out, *hn, *cn, *out2, *hn2, *cn2, *bad;
    FILE *f = tmpfile();
    char buf[8192], names[1024];
    size_t nr;
    int64_t per_proj_in, per_proj_h;
    ASSERT(m && x && h0 && c0 && f);
    ASSERT_NOT_NULL(q = gdl_quantize_dynamic(m, NULL));
    /* states: the final h is the output's last step, and given states change the result */
    ASSERT_EQ(0, gdl_nn_lstm_forward(q, x, h0, c0, &out, &hn, &cn));
    ASSERT_EQ(3, out->ndim);
    ASSERT_EQ(4, out->shape[2]);
    ASSERT_EQ(0, memcmp(R(out) + 5 * 3 * 4, R(hn) + 3 * 4, sizeof(gdl_real) * 3 * 4));
    ASSERT_EQ(0, gdl_nn_lstm_forward(q, x, NULL, NULL, &out2, &hn2, &cn2));
    ASSERT(memcmp(out->data, out2->data, sizeof(gdl_real) * (size_t)out->numel) != 0);
    /* sizes: int8 weights, a scale and zero point per row, f32 biases; no float parameter left */
    per_proj_in = G * H * I + G * H * 8 + G * H * 4;
    per_proj_h = G * H * H + G * H * 8 + G * H * 4;
    ASSERT_EQ(per_proj_in + 3 * per_proj_h, gdl_module_nbytes(q));
    ASSERT_EQ(0, gdl_module_num_params(q)); /* no float tensor: the int8 layers' own count is in the summary */
    ASSERT_EQ(0, gdl_module_summary(q, 3, (int64_t[]){6, 3, 5}, f));
    rewind(f);
    nr = fread(buf, 1, sizeof buf - 1, f);
    buf[nr] = 0;
    fclose(f);
    ASSERT_CONTAINS(buf, "DynamicQuantizedLSTM");
    ASSERT_CONTAINS(buf, "ih_l1 (DynamicQuantizedLinear)");
    ASSERT_CONTAINS(buf, "[6,3,4]");
    ASSERT_CONTAINS(buf, "Total params: 336"); /* G*H*(5 + 4 + 4 + 4) weights, 4 biases of G*H */
    /* the file: names that say what they are; into another model, the same outputs and states */
    ASSERT_EQ(0, gdl_quant_save(q, path));
    CHECK_CALL(file_names(path, names, sizeof names));
    ASSERT_STR_EQ("hh_l0.bias hh_l0.weight_int8 hh_l0.weight_scale hh_l0.weight_zero_point hh_l1.bias "
                  "hh_l1.weight_int8 hh_l1.weight_scale hh_l1.weight_zero_point ih_l0.bias ih_l0.weight_int8 "
                  "ih_l0.weight_scale ih_l0.weight_zero_point ih_l1.bias ih_l1.weight_int8 ih_l1.weight_scale "
                  "ih_l1.weight_zero_point", names);
    gdl_manual_seed(71);
    ASSERT_NOT_NULL(m2 = gdl_nn_lstm(I, H, 2, 1, 0, 0, 0));
    ASSERT_NOT_NULL(q2 = gdl_quantize_dynamic(m2, NULL));
    ASSERT_EQ(0, gdl_quant_load(q2, path));
    ASSERT_EQ(0, gdl_nn_lstm_forward(q2, x, h0, c0, &out2, &hn2, &cn2));
    ASSERT_EQ(0, memcmp(out->data, out2->data, sizeof(gdl_real) * (size_t)out->numel));
    ASSERT_EQ(0, memcmp(cn->data, cn2->data, sizeof(gdl_real) * (size_t)cn->numel));
    /* errors: input width, dtype, a GRU's file, a GRU given to the LSTM forward, float models */
    ASSERT_NOT_NULL(bad = gdl_zeros(GDL_DIMS(6, 3, 4), GDL_F32, CPU));
    ASSERT_EQ(-1, gdl_nn_lstm_forward(q, bad, NULL, NULL, &out, NULL, NULL));
    gdl_free(bad);
    ASSERT_CONTAINS(gdl_last_error(), "DynamicQuantizedLSTM (5, 4, num_layers=2): expected input [T, B, input_size]");
    ASSERT_CONTAINS(gdl_last_error(), "got [6,3,4]");
    ASSERT_NOT_NULL(bad = gdl_to_dtype(x, GDL_BF16));
    ASSERT_NULL(gdl_forward(q, bad));
    ASSERT_CONTAINS(gdl_last_error(), "DynamicQuantizedLSTM (dtype=qint8): expected an f32 input, got bf16 [6,3,5]");
    ASSERT_NOT_NULL(g = gdl_nn_gru(I, H, 2, 1, 0, 0, 0));
    ASSERT_NOT_NULL(qg = gdl_quantize_dynamic(g, NULL));
    ASSERT_EQ(-1, gdl_quant_load(qg, path));
    ASSERT_CONTAINS(gdl_last_error(), "tensor 'ih_l0.weight_int8' is I8 [16,5] in the file but I8 [12,5] in the model");
    ASSERT_EQ(-1, gdl_nn_lstm_forward(qg, x, NULL, NULL, &out, NULL, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "DynamicQuantizedGRU is not an LSTM");
    ASSERT_EQ(-1, gdl_quant_load(m2, path));
    ASSERT_CONTAINS(gdl_last_error(), "LSTM holds no quantized module");
    ASSERT_EQ(-1, gdl_quant_save(g, path));
    ASSERT_CONTAINS(gdl_last_error(), "GRU holds no quantized module");
    ASSERT_NULL(gdl_quantize_dynamic(q, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "(already quantized)");
    remove(path);
    gdl_module_free(m), gdl_module_free(q), gdl_module_free(m2), gdl_module_free(q2);
    gdl_module_free(g), gdl_module_free(qg);
    gdl_free(x), gdl_free(h0), gdl_free(c0);
    PASS();
}

/* ---- errors ---- */

static gdl_tensor *custom_fwd(gdl_module *self, gdl_tensor *x) {
    (void)self;
    return x;
}

TEST test_errors(void) {
    gdl_module *lin = gdl_nn_linear(16, 4, 1), *q = gdl_quantize_dynamic(lin, NULL), *big, *c, *seq;
    gdl_tensor *x = gdl_randn(GDL_DIMS(2, 16), CPU), *bad, *narrow;
    ASSERT_NOT_NULL(q);
    /* inputs: another dtype, another width, NaN */
    ASSERT_NOT_NULL(bad = gdl_to_dtype(x, GDL_BF16));
    ASSERT_NULL(gdl_forward(q, bad));
    ASSERT_CONTAINS(gdl_last_error(), "DynamicQuantizedLinear");
    ASSERT_CONTAINS(gdl_last_error(), "expected input f32 [..., 16] on the CPU, got bf16 [2,16]");
    ASSERT_NOT_NULL(narrow = gdl_zeros(GDL_DIMS(2, 15), GDL_F32, CPU));
    ASSERT_NULL(gdl_forward(q, narrow));
    ASSERT_CONTAINS(gdl_last_error(), "got f32 [2,15]");
    gdl_free(narrow);
    R(x)[3] = (gdl_real)NAN;
    ASSERT_NULL(gdl_forward(q, x));
    ASSERT_CONTAINS(gdl_last_error(), "NaN or inf");
    /* a quantized model or a custom module cannot be quantized (again) */
    ASSERT_NULL(gdl_quantize_dynamic(q, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "is a custom module (already quantized)");
    ASSERT_NOT_NULL(c = gdl_nn_custom("Mine", custom_fwd, NULL, NULL));
    ASSERT_NOT_NULL(seq = gdl_nn_sequential(1, (gdl_module *[]){c}));
    ASSERT_NULL(gdl_quantize_dynamic(seq, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "Mine '0'");
    /* a layer wider than the int8 GEMM takes */
    ASSERT_NOT_NULL(big = gdl_nn_linear(GDL_GEMM_INT8_MAX_K + 1, 1, 0));
    ASSERT_NULL(gdl_quantize_dynamic(big, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "cannot take");
    ASSERT_CONTAINS(gdl_last_error(), "K=65537");
    ASSERT_NULL(gdl_quantize_dynamic(NULL, NULL));
    gdl_module_free(lin);
    gdl_module_free(q);
    gdl_module_free(big);
    gdl_module_free(seq);
    gdl_free(x);
    PASS();
}

SUITE(quant) {
    SET_SETUP(reset, NULL);
    RUN_TEST(test_choose_qparams);
    RUN_TEST(test_dynamic_linear_reference);
    RUN_TEST(test_dynamic_linear_threads_and_shapes);
    RUN_TEST(test_dynamic_mlp_accuracy);
    RUN_TEST(test_summary_and_size);
    RUN_TEST(test_safetensors_round_trip);
    RUN_TEST(test_observers);
    RUN_TEST(test_static_conv_reference);
    RUN_TEST(test_static_cnn_and_mlp_accuracy);
    RUN_TEST(test_static_errors_and_round_trip);
    RUN_TEST(test_fake_quantize);
    RUN_TEST(test_conv_bn_folding);
    RUN_TEST(test_qat_mlp);
    RUN_TEST(test_tied_weights);
    RUN_TEST(test_dynamic_rnn_against_float);
    RUN_TEST(test_dynamic_rnn_states_files_errors);
    RUN_TEST(test_errors);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(quant);
    gdl_module_free(trained);
    gdl_loader_free(test_loader);
    gdl_dataset_free(train_ds);
    gdl_dataset_free(test_ds);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
