/* test_seq.c — the sequence API beside the op table's rows: the recurrent modules' options (proj_size's
   weight_hr under PyTorch's names and shapes, nn.RNN's configuration), sequences of different lengths
   (each sequence alone gives the same output and states as inside the padded batch; padded steps are zero
   and pass no gradient; the lengths as an array and as a tensor agree), gdl_forward_ex on every kind of
   module, max/min's indices, cross entropy's [B, C, d1, ...] form against its [N, C] rows, the
   embedding's padding row and max_norm, and the errors of each (the public call, shapes, the bad value).
   The values themselves are compared with PyTorch by bench/rnn_oracle.c and bench/seq_ops_oracle.c. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

#include <math.h>
#include <string.h>
#include <stdlib.h>

#define CPU gdl_cpu()
#define R(t) ((const gdl_real *)(t)->data)

static void reset(void *u) {
    (void)u;
    gdl_arena_reset();
    gdl_manual_seed(5);
}

/* tensors made inline as arguments of the error checks, freed after each test */
static gdl_tensor *kept[16];
static int nkept;
static gdl_tensor *Z(gdl_tensor *t) {
    if (nkept < 16) kept[nkept++] = t;
    return t;
}
static void free_kept(void *u) {
    (void)u;
    while (nkept > 0) gdl_free(kept[--nkept]);
}

/* a persistent copy on the host (for values that outlive the next op) */
static double max_abs_diff(const gdl_tensor *a, const gdl_tensor *b) {
    double d = 0;
    int64_t i;
    if (a->numel != b->numel) return INFINITY;
    for (i = 0; i < a->numel; i++) {
        double e = fabs((double)R(a)[i] - (double)R(b)[i]);
        if (!(e <= d)) d = e;
    }
    return d;
}

/* ---- the recurrent modules ---- */

TEST test_proj_size_params(void) {
    static const char *const names[] = {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_hr_l0",
                                        "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse",
                                        "bias_hh_l0_reverse", "weight_hr_l0_reverse", "weight_ih_l1"};
    static const int64_t shapes[][2] = {{24, 5}, {24, 3}, {24, 0}, {24, 0}, {3, 6}, {24, 5}, {24, 3}, {24, 0},
                                        {24, 0}, {3, 6}, {24, 6}};
    gdl_rnn_opts o = gdl_rnn_defaults();
    gdl_module *m;
    const char *nm[32];
    gdl_tensor *ts[32], *bad;
    int k, n;
    o.num_layers = 2;
    o.bidirectional = 1;
    o.proj_size = 3;
    m = gdl_nn_lstm_ex(5, 6, &o);
    ASSERT_NOT_NULL(m);
    n = gdl_module_named_tensors(m, GDL_PARAMS, nm, ts, 32);
    ASSERT_EQ(20, n);
    for (k = 0; k < 11; k++) {
        ASSERT_STR_EQ(names[k], nm[k]);
        ASSERT_EQ(shapes[k][0], ts[k]->shape[0]);
        if (shapes[k][1]) ASSERT_EQ(shapes[k][1], ts[k]->shape[1]);
        else ASSERT_EQ(1, ts[k]->ndim);
    }
    ASSERT_STR_EQ("LSTM", gdl_module_kind(m));
    ASSERT_NULL(gdl_forward(m, bad = gdl_zeros(GDL_DIMS(2, 7), GDL_F32, CPU))); /* the error shows the configuration */
    ASSERT_CONTAINS(gdl_last_error(), "LSTM (5, 6, num_layers=2, bidirectional=True, proj_size=3)");
    gdl_free(bad);
    gdl_module_free(m);
    PASS();
}

TEST test_rnn_module_config(void) {
    gdl_module *m = gdl_nn_rnn(4, 3, 2, "relu", 0, 1, 0, 1), *t = gdl_nn_rnn(4, 3, 1, NULL, 1, 0, 0, 0);
    const char *nm[16];
    gdl_tensor *ts[16];
    gdl_tensor *x = gdl_randn(GDL_DIMS(2, 5, 4), CPU), *outs[3], *bad = gdl_zeros(GDL_DIMS(2, 7), GDL_F32, CPU);
    ASSERT_NOT_NULL(m);
    ASSERT_NOT_NULL(t);
    ASSERT_STR_EQ("RNN", gdl_module_kind(m));
    ASSERT_NULL(gdl_forward(m, bad));
    ASSERT_CONTAINS(gdl_last_error(),
                    "RNN (4, 3, num_layers=2, nonlinearity=relu, bias=False, batch_first=True, bidirectional=True)");
    gdl_free(bad);
    ASSERT_EQ(8, gdl_module_named_tensors(m, GDL_PARAMS, nm, ts, 16));
    ASSERT_STR_EQ("weight_hh_l1_reverse", nm[7]);
    ASSERT_EQ(3, ts[0]->shape[0]);
    ASSERT_EQ(6, ts[4]->shape[1]); /* layer 1's input: both directions */
    ASSERT_EQ(4, gdl_module_named_tensors(t, GDL_PARAMS, nm, ts, 16));
    /* relu: the output is never negative */
    ASSERT_EQ(2, gdl_forward_ex(m, x, NULL, outs, 3));
    ASSERT_EQ(2, outs[0]->shape[0]);
    ASSERT_EQ(5, outs[0]->shape[1]);
    ASSERT_EQ(6, outs[0]->shape[2]);
    {
        int64_t i;
        for (i = 0; i < outs[0]->numel; i++) ASSERT(R(outs[0])[i] >= 0);
    }
    gdl_free(x);
    gdl_module_free(m);
    gdl_module_free(t);
    PASS();
}

/* x [B, T, I] batch-first; sequence b alone (its first lengths[b] steps, batch 1) must give the padded
   batch's row b: the output's first steps, zeros after, and h_n / c_n */
static enum harness_result lengths_match_alone(int kind, int bidir, int64_t proj) {
    const int64_t B = 3, T = 5, I = 4, H = 6, lengths[3] = {5, 2, 3};
    gdl_rnn_opts o = gdl_rnn_defaults();
    gdl_module *m;
    gdl_tensor *x, *outs[3], *keep[3];
    gdl_forward_opts fo = gdl_forward_defaults();
    int64_t b, t, j;
    int n, k;
    o.batch_first = 1;
    o.bidirectional = bidir;
    o.num_layers = 2;
    o.proj_size = proj;
    m = kind == 0 ? gdl_nn_lstm_ex(I, H, &o) : kind == 1 ? gdl_nn_gru_ex(I, H, &o) : gdl_nn_rnn_ex(I, H, &o);
    ASSERT_NOT_NULL(m);
    x = gdl_randn(GDL_DIMS(B, T, I), CPU);
    fo.lengths = lengths;
    fo.nlengths = B;
    n = gdl_forward_ex(m, x, &fo, outs, 3);
    ASSERT_EQ(kind == 0 ? 3 : 2, n);
    for (k = 0; k < n; k++) keep[k] = gdl_clone(outs[k]);
    for (b = 0; b < B; b++) {
        gdl_tensor *xb = gdl_narrow(gdl_narrow(x, 0, b, 1), 1, 0, lengths[b]), *ob[3];
        const int64_t F = keep[0]->shape[2], L = keep[0]->shape[1];
        ASSERT_EQ(5, L); /* max(lengths) */
        ASSERT_EQ(n, gdl_forward_ex(m, xb, NULL, ob, 3));
        for (t = 0; t < L; t++)
            for (j = 0; j < F; j++) {
                double got = R(keep[0])[(b * L + t) * F + j];
                ASSERT_IN_RANGE(t < lengths[b] ? (double)R(ob[0])[t * F + j] : 0.0, got, 1e-6);
            }
        for (k = 1; k < n; k++) { /* states [L*D, B, F] against [L*D, 1, F] */
            const int64_t S = keep[k]->shape[0], Fs = keep[k]->shape[2];
            int64_t s;
            for (s = 0; s < S; s++)
                for (j = 0; j < Fs; j++)
                    ASSERT_IN_RANGE(R(ob[k])[s * Fs + j], R(keep[k])[(s * B + b) * Fs + j], 1e-6);
        }
    }
    for (k = 0; k < n; k++) gdl_free(keep[k]);
    gdl_free(x);
    gdl_module_free(m);
    PASS();
}
TEST test_lengths_lstm_proj_bidir(void) { return lengths_match_alone(0, 1, 2); }
TEST test_lengths_gru(void) { return lengths_match_alone(1, 0, 0); }
TEST test_lengths_rnn_bidir(void) { return lengths_match_alone(2, 1, 0); }

/* the padded steps of x get no gradient; lengths as an i32 tensor give what the array gives */
TEST test_lengths_gradient_and_tensor(void) {
    const int64_t lengths[2] = {2, 4};
    const int32_t lengths32[2] = {2, 4};
    gdl_module *m = gdl_nn_gru(3, 4, 1, 1, 0, 0, 1);
    gdl_tensor *x = gdl_randn(GDL_DIMS(4, 2, 3), CPU), *lt = gdl_from_array(lengths32, GDL_DIMS(2), GDL_I32, CPU);
    gdl_tensor *a[2], *b[2], *ka;
    gdl_forward_opts fo = gdl_forward_defaults();
    int64_t t, j;
    ASSERT_NOT_NULL(m);
    ASSERT_NOT_NULL(lt);
    gdl_set_requires_grad(x, 1);
    fo.lengths = lengths;
    fo.nlengths = 2;
    ASSERT_EQ(2, gdl_forward_ex(m, x, &fo, a, 2));
    ka = gdl_clone(a[0]);
    ASSERT_EQ(0, gdl_backward(gdl_add(gdl_sum(a[0]), gdl_sum(a[1]))));
    for (t = 2; t < 4; t++) /* sequence 0 (length 2), time-major: x[t, 0, :] */
        for (j = 0; j < 3; j++) ASSERT_IN_RANGE(0.0, R(x->grad)[(t * 2 + 0) * 3 + j], 0.0);
    for (j = 0; j < 3; j++) ASSERT(R(x->grad)[(3 * 2 + 1) * 3 + j] != 0);
    fo = gdl_forward_defaults();
    fo.lengths_tensor = lt;
    ASSERT_EQ(2, gdl_forward_ex(m, x, &fo, b, 2));
    ASSERT_IN_RANGE(0.0, max_abs_diff(ka, b[0]), 0.0);
    gdl_free(ka);
    gdl_free(x);
    gdl_free(lt);
    gdl_module_free(m);
    PASS();
}

/* gdl_forward_ex: PyTorch's tuple, any module; fewer outputs asked for than made */
TEST test_forward_ex(void) {
    gdl_module *lin = gdl_nn_linear(3, 2, 1), *lstm = gdl_nn_lstm(3, 2, 1, 1, 0, 0, 0);
    gdl_tensor *x = gdl_randn(GDL_DIMS(4, 3), CPU), *outs[3] = {NULL, NULL, NULL}, *h0;
    gdl_forward_opts fo = gdl_forward_defaults();
    ASSERT_EQ(1, gdl_module_num_outputs(lin));
    ASSERT_EQ(3, gdl_module_num_outputs(lstm));
    ASSERT_EQ(0, gdl_module_num_outputs(NULL));
    ASSERT_EQ(1, gdl_forward_ex(lin, x, NULL, outs, 3));
    ASSERT_EQ(2, outs[0]->shape[1]);
    ASSERT_NULL(outs[1]);
    ASSERT_EQ(3, gdl_forward_ex(lstm, x, NULL, outs, 2)); /* unbatched [T, I]: h_n [1, H] */
    ASSERT_EQ(2, outs[1]->ndim);
    ASSERT_NULL(outs[2]);
    h0 = gdl_zeros(GDL_DIMS(1, 2), GDL_F32, CPU);
    fo.h0 = h0;
    ASSERT_EQ(-1, gdl_forward_ex(lin, x, &fo, outs, 3));
    ASSERT_STR_EQ("gdl_forward_ex: Linear takes no states or lengths (those are a recurrent module's)", gdl_last_error());
    ASSERT_NULL(outs[0]);
    ASSERT_EQ(-1, gdl_forward_ex(NULL, x, NULL, outs, 3));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_forward_ex");
    gdl_free(x);
    gdl_free(h0);
    gdl_module_free(lin);
    gdl_module_free(lstm);
    PASS();
}

TEST test_rnn_option_errors(void) {
    gdl_rnn_opts o = gdl_rnn_defaults();
    gdl_module *m = gdl_nn_lstm(3, 4, 1, 1, 1, 0, 0), *g = gdl_nn_gru(3, 4, 1, 1, 0, 0, 0);
    gdl_tensor *x = gdl_zeros(GDL_DIMS(2, 5, 3), GDL_F32, CPU), *out, *hn, *cn, *c0 = gdl_zeros(GDL_DIMS(1, 2, 4), GDL_F32, CPU);
    gdl_tensor *lt = gdl_zeros(GDL_DIMS(2, 1), GDL_F32, CPU), *outs[3];
    gdl_forward_opts fo = gdl_forward_defaults();
    const int64_t bad_hi[2] = {3, 6}, bad_lo[2] = {0, 2};
    o.proj_size = 4;
    ASSERT_NULL(gdl_nn_lstm_ex(3, 4, &o));
    ASSERT_STR_EQ("gdl_nn_lstm_ex: proj_size 4: must be >= 0 and smaller than hidden_size", gdl_last_error());
    o.proj_size = 2;
    ASSERT_NULL(gdl_nn_gru_ex(3, 4, &o));
    ASSERT_STR_EQ("gdl_nn_gru_ex: proj_size 2: only an LSTM projects its hidden state (proj_size 0)", gdl_last_error());
    o = gdl_rnn_defaults();
    o.nonlinearity = "sigmoid";
    ASSERT_NULL(gdl_nn_rnn_ex(3, 4, &o));
    ASSERT_STR_EQ("gdl_nn_rnn_ex: unknown nonlinearity \"sigmoid\" (\"tanh\" or \"relu\")", gdl_last_error());
    o.nonlinearity = "relu";
    ASSERT_NULL(gdl_nn_lstm_ex(3, 4, &o));
    ASSERT_CONTAINS(gdl_last_error(), "nonlinearity \"relu\" is an RNN's option");
    /* lengths: count, range, both forms, an unbatched input */
    ASSERT_EQ(-1, gdl_nn_rnn_forward(m, x, NULL, NULL, bad_hi, 2, &out, &hn, &cn));
    ASSERT_STR_EQ("gdl_nn_rnn_forward: LSTM: lengths[1] = 6 is not in [1, 5] (the steps of input [2,5,3])",
                  gdl_last_error());
    ASSERT_NULL(out);
    ASSERT_EQ(-1, gdl_nn_rnn_forward(m, x, NULL, NULL, bad_lo, 2, &out, &hn, &cn));
    ASSERT_CONTAINS(gdl_last_error(), "lengths[0] = 0 is not in [1, 5]");
    ASSERT_EQ(-1, gdl_nn_rnn_forward(m, x, NULL, NULL, bad_hi, 3, &out, &hn, &cn));
    ASSERT_STR_EQ("gdl_nn_rnn_forward: LSTM: 3 lengths for input [2,5,3]: one per sequence of the batch (2)",
                  gdl_last_error());
    fo.lengths = bad_lo;
    fo.nlengths = 2;
    fo.lengths_tensor = lt;
    ASSERT_EQ(-1, gdl_forward_ex(m, x, &fo, outs, 3));
    ASSERT_CONTAINS(gdl_last_error(), "give lengths or lengths_tensor, not both");
    fo.lengths = NULL;
    ASSERT_EQ(-1, gdl_forward_ex(m, x, &fo, outs, 3));
    ASSERT_STR_EQ("gdl_forward_ex: lengths_tensor must be i32 [B] (one length per sequence), got f32 [2,1]",
                  gdl_last_error());
    ASSERT_EQ(-1, gdl_nn_rnn_forward(g, Z(gdl_zeros(GDL_DIMS(5, 3), GDL_F32, CPU)), NULL, NULL, bad_hi, 1, &out, &hn, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "an unbatched input takes no lengths");
    /* c0 for a GRU */
    ASSERT_EQ(-1, gdl_nn_rnn_forward(g, x, NULL, c0, NULL, 0, &out, &hn, &cn));
    ASSERT_STR_EQ("gdl_nn_rnn_forward: GRU takes no c0 (an LSTM's cell state)", gdl_last_error());
    ASSERT_NULL(cn);
    /* proj_size: h0 has proj_size features */
    o = gdl_rnn_defaults();
    o.proj_size = 2;
    {
        gdl_module *p = gdl_nn_lstm_ex(3, 4, &o);
        gdl_tensor *x2 = gdl_zeros(GDL_DIMS(5, 2, 3), GDL_F32, CPU);
        ASSERT_NOT_NULL(p);
        ASSERT_EQ(-1, gdl_nn_lstm_forward(p, x2, c0, NULL, &out, &hn, &cn));
        ASSERT_STR_EQ("gdl_nn_lstm_forward: LSTM: h0 must be [1, 2, 2] (num_layers*directions, batch, proj_size) "
                      "for input [5,2,3], got [1,2,4]", gdl_last_error());
        ASSERT_EQ(0, gdl_nn_lstm_forward(p, x2, NULL, c0, &out, &hn, &cn));
        ASSERT_EQ(2, out->shape[2]);
        ASSERT_EQ(2, hn->shape[2]);
        ASSERT_EQ(4, cn->shape[2]);
        ASSERT_NULL(gdl_quantize_dynamic(p, NULL));
        ASSERT_CONTAINS(gdl_last_error(), "proj_size=2: a dynamically quantized LSTM has no projection");
        gdl_free(x2);
        gdl_module_free(p);
    }
    gdl_free(x);
    gdl_free(c0);
    gdl_free(lt);
    gdl_module_free(m);
    gdl_module_free(g);
    PASS();
}

/* ---- max / min with indices ---- */

TEST test_max_min_indices(void) {
    const gdl_real v[8] = {1, 3, 3, -2, 0, -2, 5, -2};
    gdl_tensor *x = gdl_from_array(v, GDL_DIMS(2, 4), GDL_F32, CPU);
    gdl_tensor *val, *idx;
    ASSERT_NOT_NULL(x);
    gdl_set_requires_grad(x, 1);
    ASSERT_EQ(0, gdl_max_dim_ex(x, 1, 0, &val, &idx));
    ASSERT_EQ(1, idx->ndim);
    ASSERT_EQ(GDL_I32, idx->dtype);
    ASSERT_EQ(1, ((const int32_t *)idx->data)[0]); /* the first of the tied 3s */
    ASSERT_EQ(2, ((const int32_t *)idx->data)[1]);
    ASSERT_EQ(0, gdl_min_dim_ex(x, -1, 1, &val, &idx));
    ASSERT_EQ(2, idx->ndim);
    ASSERT_EQ(3, ((const int32_t *)idx->data)[0]);
    ASSERT_EQ(1, ((const int32_t *)idx->data)[1]); /* the first of the tied -2s */
    ASSERT_IN_RANGE(-2.0, R(val)[1], 0.0);
    ASSERT_EQ(0, gdl_backward(gdl_sum(val)));
    ASSERT_IN_RANGE(1.0, R(x->grad)[3], 0.0);
    ASSERT_IN_RANGE(1.0, R(x->grad)[5], 0.0);
    ASSERT_IN_RANGE(0.0, R(x->grad)[7], 0.0);
    ASSERT_EQ(0, gdl_max_dim_ex(x, 0, 0, NULL, &idx)); /* the indices alone */
    ASSERT_EQ(4, idx->shape[0]);
    ASSERT_EQ(-1, gdl_max_dim_ex(x, 2, 0, &val, &idx));
    ASSERT_STR_EQ("gdl_max_dim_ex: dim 2 out of range for [2,4] (ndim 2)", gdl_last_error());
    ASSERT_NULL(val);
    ASSERT_NULL(idx);
    ASSERT_EQ(-1, gdl_min_dim_ex(x, 0, 0, NULL, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_min_dim_ex");
    ASSERT_NULL(gdl_min_dim(Z(gdl_zeros(GDL_DIMS(2, 0), GDL_F32, CPU)), 1, 0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_min_dim: cannot take the min over an empty dimension 1 of [2,0]");
    gdl_free(x);
    PASS();
}

/* ---- cross entropy over [B, C, d1, ...] ---- */

/* the [B, C, d1, d2] loss equals the loss of its rows [B*d1*d2, C] (the classes moved last) */
TEST test_cross_entropy_nd_is_rows(void) {
    gdl_tensor *x = gdl_randn(GDL_DIMS(2, 3, 2, 2), CPU), *w = gdl_rand(GDL_DIMS(3), CPU), *t, *rows, *a, *b;
    int32_t tv[8] = {0, 2, 1, -100, 2, 2, 0, 1};
    int64_t rs[2] = {8, 3};
    const int perm[4] = {0, 2, 3, 1};
    gdl_ce_opts o = gdl_ce_defaults();
    int red;
    t = gdl_from_array(tv, 3, (const int64_t[]){2, 2, 2}, GDL_I32, CPU);
    ASSERT_NOT_NULL(t);
    rows = gdl_clone(gdl_reshape(gdl_permute(x, 4, perm), 2, rs));
    o.label_smoothing = 0.25;
    o.weight = w;
    for (red = 0; red < 3; red++) {
        gdl_tensor *t1 = gdl_reshape(t, 1, (const int64_t[]){8});
        o.reduction = (gdl_reduction)red;
        a = gdl_cross_entropy_ex(x, t, &o);
        b = gdl_cross_entropy_ex(rows, t1, &o);
        ASSERT_NOT_NULL(a);
        ASSERT_NOT_NULL(b);
        ASSERT_IN_RANGE(0.0, max_abs_diff(a, b), 1e-6);
        if (red == GDL_REDUCE_NONE) {
            ASSERT_EQ(3, a->ndim);
            ASSERT_IN_RANGE(0.0, R(a)[3], 0.0); /* ignored */
        }
    }
    /* shapes that do not fit */
    ASSERT_NULL(gdl_cross_entropy(x, Z(gdl_zeros(GDL_DIMS(2, 2, 3), GDL_I32, CPU))));
    ASSERT_STR_EQ("gdl_cross_entropy: expected input [B, C, d1, ...] with i32 target [B, d1, ...] (or probabilities "
                  "of the input's shape), got f32 [2,3,2,2] and i32 [2,2,3]", gdl_last_error());
    o.weight = gdl_rand(GDL_DIMS(4), CPU);
    ASSERT_NULL(gdl_cross_entropy_ex(x, t, &o));
    ASSERT_STR_EQ("gdl_cross_entropy: weight must be f32 [C] = [3] for input [2,3,2,2], got f32 [4]", gdl_last_error());
    gdl_free(o.weight);
    tv[2] = 3;
    gdl_free(t);
    t = gdl_from_array(tv, 3, (const int64_t[]){2, 2, 2}, GDL_I32, CPU);
    o.weight = w;
    ASSERT_NULL(gdl_cross_entropy_ex(x, t, &o));
    ASSERT_CONTAINS(gdl_last_error(), "index 3 at position 2 is out of range [0,3)");
    gdl_free(t);
    gdl_free(rows);
    gdl_free(x);
    gdl_free(w);
    PASS();
}

/* ---- embedding ---- */

TEST test_embedding_padding_and_max_norm(void) {
    gdl_embedding_opts o = gdl_embedding_defaults();
    gdl_module *m;
    gdl_tensor *w, *idx, *y;
    const int32_t iv[5] = {1, 3, 1, 0, 3};
    const char *nm[2];
    gdl_tensor *ts[2], *bad = gdl_zeros(GDL_DIMS(2), GDL_F32, CPU);
    int64_t j;
    o.padding_idx = -3; /* row 1 of 4 */
    o.max_norm = 0.5;
    m = gdl_nn_embedding_ex(4, 3, &o);
    ASSERT_NOT_NULL(m);
    ASSERT_NULL(gdl_forward(m, bad));
    ASSERT_CONTAINS(gdl_last_error(), "4, 3, padding_idx=1, max_norm=0.5");
    gdl_free(bad);
    ASSERT_EQ(1, gdl_module_named_tensors(m, GDL_PARAMS, nm, ts, 2));
    w = ts[0];
    for (j = 0; j < 3; j++) ASSERT_IN_RANGE(0.0, R(w)[3 + j], 0.0); /* the padding row starts at zero */
    idx = gdl_from_array(iv, GDL_DIMS(5), GDL_I32, CPU);
    y = gdl_forward(m, idx);
    ASSERT_NOT_NULL(y);
    {
        double n3 = 0, n2 = 0;
        for (j = 0; j < 3; j++) n3 += (double)R(w)[9 + j] * R(w)[9 + j], n2 += (double)R(w)[6 + j] * R(w)[6 + j];
        ASSERT_LE(sqrt(n3), 0.5); /* looked up: renormalised in place */
        ASSERT_GT(sqrt(n2), 0.5); /* row 2 was not looked up (randn rows of 3 are rarely that short) */
    }
    ASSERT_EQ(0, gdl_backward(gdl_sum(y)));
    for (j = 0; j < 3; j++) {
        ASSERT_IN_RANGE(0.0, R(w->grad)[3 + j], 0.0); /* padding: no gradient */
        ASSERT_IN_RANGE(2.0, R(w->grad)[9 + j], 0.0);
    }
    o = gdl_embedding_defaults();
    o.padding_idx = 4;
    ASSERT_NULL(gdl_embedding_ex(idx, w, &o));
    ASSERT_STR_EQ("gdl_embedding_ex: padding_idx 4 is not in [-4, 4) (num_embeddings 4)", gdl_last_error());
    o.padding_idx = GDL_NO_PADDING_IDX;
    o.max_norm = -1;
    ASSERT_NULL(gdl_embedding_ex(idx, w, &o));
    ASSERT_CONTAINS(gdl_last_error(), "max_norm -1 must be >= 0");
    o.max_norm = 1;
    o.norm_type = 0;
    ASSERT_NULL(gdl_nn_embedding_ex(4, 3, &o));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_nn_embedding_ex: max_norm 1 must be >= 0 (0: none) and norm_type 0 positive");
    gdl_free(idx);
    gdl_module_free(m);
    PASS();
}

SUITE(recurrent) {
    SET_SETUP(reset, NULL);
    SET_TEARDOWN(free_kept, NULL);
    RUN_TEST(test_proj_size_params);
    RUN_TEST(test_rnn_module_config);
    RUN_TEST(test_lengths_lstm_proj_bidir);
    RUN_TEST(test_lengths_gru);
    RUN_TEST(test_lengths_rnn_bidir);
    RUN_TEST(test_lengths_gradient_and_tensor);
    RUN_TEST(test_forward_ex);
    RUN_TEST(test_rnn_option_errors);
}

SUITE(ops) {
    SET_SETUP(reset, NULL);
    SET_TEARDOWN(free_kept, NULL);
    RUN_TEST(test_max_min_indices);
    RUN_TEST(test_cross_entropy_nd_is_rows);
    RUN_TEST(test_embedding_padding_and_max_norm);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(recurrent);
    RUN_SUITE(ops);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
