/* seq_ops_oracle.c — gpudl's side of the sequence ops' check against PyTorch (bench/pytorch/seq_ops_oracle.py
   is PyTorch's): torch.max / torch.min along a dim with indices (ties, a NaN, keepdim), cross entropy over
   [B, C, d1, ...] logits (ignore_index, label_smoothing, class weights, probability targets, each
   reduction), nll_loss over [B, C, d] and F.embedding's padding_idx and max_norm (norm_type 2, 1.5, inf).
   Each case "<name>." writes its inputs, a loss weight "w" shaped as the output, the output ("out"; "idx"
   for the indices), the gradients of sum(out * w) ("grad.<input>") and, for max_norm, the weight after the
   forward ("weight_after"), to DIR/seq_ops_oracle.safetensors (DIR/seq_ops_oracle_f64.safetensors when
   built with -DGPUDL_DOUBLE, in float64). The Python side runs the same through torch and compares.

   cc -O2 bench/seq_ops_oracle.c -lm -lz -pthread -o build/seq_ops_oracle
   cc -O2 -DGPUDL_DOUBLE bench/seq_ops_oracle.c -lm -lz -pthread -o build/seq_ops_oracle_f64
   build/seq_ops_oracle build && build/seq_ops_oracle_f64 build && python3 bench/pytorch/seq_ops_oracle.py build
   make seq-fixtures turns the float64 build's cases into tests/torch_fixtures/seq_ops.safetensors (PyTorch's
   values for tests/test_torch_parity.c). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"

#include "oracle_st.h"

#include <math.h>

#define CPU gdl_cpu()

/* i32 targets in [0, C), every 5th ignored (-100) when ignore */
static gdl_tensor *targets(int ndim, const int64_t *shape, int C, int ignore) {
    int64_t n = 1, i;
    int32_t *v;
    gdl_tensor *t;
    int k;
    for (k = 0; k < ndim; k++) n *= shape[k];
    if (!(v = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1)))) return NULL;
    for (i = 0; i < n; i++) v[i] = ignore && i % 5 == 1 ? -100 : (int32_t)(gdl_rng_next_u64() % (uint64_t)C);
    t = gdl_from_array(v, ndim, shape, GDL_I32, CPU);
    free(v);
    return t;
}

/* out's loss weight, sum(out * w) backpropagated; out, w and the gradients of the inputs saved */
static int finish(const char *pre, gdl_tensor *out, int nin, gdl_tensor **in, const char *const *names) {
    gdl_tensor *w = gdl_randn(out->ndim, out->shape, CPU);
    char g[64];
    int k;
    if (!w || gdl_backward(gdl_sum(gdl_mul(out, w))) < 0) return -1;
    oracle_add(pre, "w", w);
    oracle_add(pre, "out", out);
    for (k = 0; k < nin; k++)
        if (in[k]->requires_grad) {
            snprintf(g, sizeof g, "grad.%s", names[k]);
            oracle_add(pre, g, in[k]->grad);
        }
    return 0;
}

/* torch.max / torch.min (x, dim, keepdim): x has exact ties and, with nan, one NaN */
static int run_extreme(const char *name, int is_min, int dim, int keepdim, int nan) {
    static const char *const names[1] = {"x"};
    char pre[64];
    int64_t shape[3] = {3, 5, 4}, i;
    gdl_tensor *x = gdl_randn(3, shape, CPU), *v, *idx;
    gdl_real cfg[3];
    snprintf(pre, sizeof pre, "%s.", name);
    if (!x) return -1;
    for (i = 0; i < x->numel; i++) ((gdl_real *)x->data)[i] = (gdl_real)floor(((gdl_real *)x->data)[i] * 1.5);
    if (nan) ((gdl_real *)x->data)[7] = (gdl_real)NAN;
    gdl_set_requires_grad(x, 1);
    oracle_add(pre, "x", x);
    if ((is_min ? gdl_min_dim_ex : gdl_max_dim_ex)(x, dim, keepdim, &v, &idx) < 0) return -1;
    oracle_add(pre, "idx", idx);
    cfg[0] = is_min, cfg[1] = dim, cfg[2] = keepdim;
    oracle_add_values(pre, "cfg", cfg, 3);
    return finish(pre, v, 1, &x, names);
}

/* cross entropy: logits [2, 4, 3, 5] (or 2-D), targets with ignored positions or probabilities */
static int run_ce(const char *name, int nd, int soft, int weighted, double ls, gdl_reduction red, int nll) {
    static const char *const names[2] = {"x", "weight"};
    int64_t xs[4] = {2, 4, 3, 5}, ts[3] = {2, 3, 5}, ws = 4, x2[2] = {7, 4};
    gdl_tensor *in[2], *t, *out;
    gdl_ce_opts o = gdl_ce_defaults();
    gdl_real cfg[5];
    char pre[64];
    snprintf(pre, sizeof pre, "%s.", name);
    in[0] = nd ? gdl_randn(4, xs, CPU) : gdl_randn(2, x2, CPU);
    in[1] = gdl_rand(1, &ws, CPU);
    if (!in[0] || !in[1]) return -1;
    if (soft) {
        t = gdl_softmax(gdl_randn(in[0]->ndim, in[0]->shape, CPU), 1);
        t = t ? gdl_clone(t) : NULL;
    } else {
        t = nd ? targets(3, ts, 4, 1) : targets(1, x2, 4, 1);
    }
    if (!t) return -1;
    gdl_set_requires_grad(in[0], 1);
    oracle_add(pre, "x", in[0]);
    oracle_add(pre, "target", t);
    if (weighted) oracle_add(pre, "weight", in[1]);
    o.reduction = red;
    o.label_smoothing = ls;
    o.weight = weighted ? in[1] : NULL;
    out = nll ? gdl_nll_loss(in[0], t, red, -100) : gdl_cross_entropy_ex(in[0], t, &o);
    if (!out) return -1;
    cfg[0] = nll, cfg[1] = soft, cfg[2] = weighted, cfg[3] = (gdl_real)ls, cfg[4] = (gdl_real)red;
    oracle_add_values(pre, "cfg", cfg, 5);
    return finish(pre, out, 1, in, names);
}

/* F.embedding(idx, weight, padding_idx, max_norm, norm_type); padding_idx GDL_NO_PADDING_IDX: None */
static int run_embedding(const char *name, int64_t padding_idx, double max_norm, double norm_type) {
    static const char *const names[1] = {"weight"};
    int64_t ws[2] = {6, 4}, is[2] = {3, 5};
    gdl_tensor *w = gdl_randn(2, ws, CPU), *idx = targets(2, is, 6, 0), *out;
    gdl_embedding_opts o = gdl_embedding_defaults();
    gdl_real cfg[4];
    char pre[64];
    snprintf(pre, sizeof pre, "%s.", name);
    if (!w || !idx) return -1;
    ((int32_t *)idx->data)[3] = 2; /* the padding row and a repeat */
    ((int32_t *)idx->data)[8] = 2;
    gdl_set_requires_grad(w, 1);
    oracle_add(pre, "weight", w);
    oracle_add(pre, "idx", idx);
    o.padding_idx = padding_idx;
    o.max_norm = max_norm;
    o.norm_type = norm_type;
    if (!(out = gdl_embedding_ex(idx, w, &o))) return -1;
    oracle_add(pre, "weight_after", w);
    cfg[0] = padding_idx == GDL_NO_PADDING_IDX ? (gdl_real)NAN : (gdl_real)padding_idx;
    cfg[1] = (gdl_real)max_norm, cfg[2] = (gdl_real)norm_type, cfg[3] = 0;
    oracle_add_values(pre, "cfg", cfg, 4);
    return finish(pre, out, 1, &w, names);
}

int main(int argc, char **argv) {
    int rc = 0;
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    gdl_manual_seed(7);
    rc |= run_extreme("max_dim1", 0, 1, 0, 0);
    rc |= run_extreme("max_last_keepdim_nan", 0, -1, 1, 1);
    rc |= run_extreme("min_dim0_keepdim", 1, 0, 1, 0);
    rc |= run_extreme("min_dim1_nan", 1, 1, 0, 1);
    rc |= run_ce("ce_nd_mean", 1, 0, 0, 0, GDL_REDUCE_MEAN, 0);
    rc |= run_ce("ce_nd_smooth_none", 1, 0, 0, 0.2, GDL_REDUCE_NONE, 0);
    rc |= run_ce("ce_nd_weighted_smooth_mean", 1, 0, 1, 0.15, GDL_REDUCE_MEAN, 0);
    rc |= run_ce("ce_nd_weighted_sum", 1, 0, 1, 0, GDL_REDUCE_SUM, 0);
    rc |= run_ce("ce_nd_weighted_smooth_none", 1, 0, 1, 0.3, GDL_REDUCE_NONE, 0);
    rc |= run_ce("ce_2d_weighted_smooth_mean", 0, 0, 1, 0.1, GDL_REDUCE_MEAN, 0);
    rc |= run_ce("ce_nd_soft_weighted_smooth", 1, 1, 1, 0.1, GDL_REDUCE_MEAN, 0);
    rc |= run_ce("ce_nd_soft_none", 1, 1, 0, 0, GDL_REDUCE_NONE, 0);
    rc |= run_ce("nll_nd_mean", 1, 0, 0, 0, GDL_REDUCE_MEAN, 1);
    rc |= run_embedding("embedding_padding", 2, 0, 2);
    rc |= run_embedding("embedding_padding_negative", -4, 0, 2);
    rc |= run_embedding("embedding_max_norm", GDL_NO_PADDING_IDX, 1.0, 2);
    rc |= run_embedding("embedding_max_norm_p1_5_padding", 2, 0.7, 1.5);
    rc |= run_embedding("embedding_max_norm_inf", GDL_NO_PADDING_IDX, 0.5, INFINITY);
    if (rc) {
        fprintf(stderr, "seq_ops_oracle: %s\n", gdl_last_error());
        return 1;
    }
    return oracle_write("seq_ops_oracle", argv[1], "seq_ops_oracle");
}
