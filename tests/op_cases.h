/* op_cases.h — the table of op test cases, shared by the gradient check
   (tests/test_gradcheck.c, double precision) and the CPU/GPU parity test
   (tests/test_cuda.c). One row per op configuration; each row names the
   gdl_op its output must come from, and every op in the op table must have a
   row (test_every_op_has_a_case). Inputs: random, seeded, odd sizes.

   Fan-out: a tensor used by two ops must get the sum of both gradients, so
   every backward must add into the gradient, never assign. Each row is also
   run through fanout_forward() (below), which uses every differentiable input
   a second time after the row's own ops; and the rows named *_self feed one
   tensor to both operands of an op. */
#ifndef GPUDL_OP_CASES_H
#define GPUDL_OP_CASES_H

/* kinds of input */
enum { IN_RANDN, IN_POS, IN_TARGET, IN_TARGET_IGNORE, IN_CONST, IN_CONST_POS,
       IN_TIES, /* small integers (-2..2): many exact ties, for max and pooling */
       IN_NAN,  /* randn with NaN at every 7th element (from element 3) and +-Inf at some */
       IN_PERM  /* a random permutation of distinct values: no ties anywhere, well separated */
};

typedef struct gc_input {
    int ndim;
    int64_t shape[5];
    int kind;
    int range; /* targets: number of classes */
} gc_input;

typedef gdl_tensor *(*gc_forward)(gdl_tensor **in);

typedef struct gc_case {
    const char *name;
    int op; /* the gdl_op that must make the output */
    gc_forward forward;
    int nin;
    gc_input in[5];
} gc_case;

/* ---- forwards ---- */
static gdl_tensor *f_reshape(gdl_tensor **x) { int64_t s[2] = {4, -1}; return gdl_reshape(x[0], 2, s); }
static gdl_tensor *f_flatten(gdl_tensor **x) { return gdl_flatten(x[0], 1); }
static gdl_tensor *f_slice(gdl_tensor **x) { return gdl_slice(x[0], 1, 4); }
static gdl_tensor *f_add(gdl_tensor **x) { return gdl_add(x[0], x[1]); }
static gdl_tensor *f_sub(gdl_tensor **x) { return gdl_sub(x[0], x[1]); }
static gdl_tensor *f_mul(gdl_tensor **x) { return gdl_mul(x[0], x[1]); }
static gdl_tensor *f_div(gdl_tensor **x) { return gdl_div(x[0], x[1]); }
static gdl_tensor *f_add_scalar(gdl_tensor **x) { return gdl_add_scalar(x[0], 0.7); }
static gdl_tensor *f_mul_scalar(gdl_tensor **x) { return gdl_mul_scalar(x[0], -1.3); }
static gdl_tensor *f_pow(gdl_tensor **x) { return gdl_pow_scalar(x[0], 2.5); }
static gdl_tensor *f_exp(gdl_tensor **x) { return gdl_exp(x[0]); }
static gdl_tensor *f_log(gdl_tensor **x) { return gdl_log(x[0]); }
static gdl_tensor *f_relu(gdl_tensor **x) { return gdl_relu(x[0]); }
static gdl_tensor *f_leaky(gdl_tensor **x) { return gdl_leaky_relu(x[0], 0.1); }
static gdl_tensor *f_sigmoid(gdl_tensor **x) { return gdl_sigmoid(x[0]); }
static gdl_tensor *f_tanh(gdl_tensor **x) { return gdl_tanh(x[0]); }
static gdl_tensor *f_gelu(gdl_tensor **x) { return gdl_gelu(x[0], 0); }
static gdl_tensor *f_gelu_tanh(gdl_tensor **x) { return gdl_gelu(x[0], 1); }
static gdl_tensor *f_matmul(gdl_tensor **x) { return gdl_matmul(x[0], x[1]); }
static gdl_tensor *f_linear(gdl_tensor **x) { return gdl_linear(x[0], x[1], x[2]); }
static gdl_tensor *f_linear_nb(gdl_tensor **x) { return gdl_linear(x[0], x[1], NULL); }
static gdl_tensor *f_linear_relu(gdl_tensor **x) { return gdl_linear_act(x[0], x[1], x[2], GDL_ACT_RELU); }
static gdl_tensor *f_linear_gelu_tanh(gdl_tensor **x) { return gdl_linear_act(x[0], x[1], x[2], GDL_ACT_GELU_TANH); }
static gdl_tensor *f_linear_gelu_nb(gdl_tensor **x) { return gdl_linear_act(x[0], x[1], NULL, GDL_ACT_GELU); }
static gdl_tensor *f_linear_act_none(gdl_tensor **x) { return gdl_linear_act(x[0], x[1], x[2], GDL_ACT_NONE); }
static gdl_tensor *f_linear_relu_self(gdl_tensor **x) { return gdl_linear_act(x[0], x[0], NULL, GDL_ACT_RELU); }
static gdl_tensor *f_conv_relu(gdl_tensor **x) { return gdl_conv2d_act(x[0], x[1], x[2], 1, 1, 1, 1, GDL_ACT_RELU); }
static gdl_tensor *f_conv_gelu_g3(gdl_tensor **x) { return gdl_conv2d_act(x[0], x[1], x[2], 1, 1, 1, 3, GDL_ACT_GELU_TANH); }
static gdl_tensor *f_conv_gelu_1x1(gdl_tensor **x) { return gdl_conv2d_act(x[0], x[1], NULL, 1, 0, 1, 1, GDL_ACT_GELU); }
static gdl_tensor *f_conv_act_none(gdl_tensor **x) { return gdl_conv2d_act(x[0], x[1], x[2], 2, 0, 2, 1, GDL_ACT_NONE); }
static gdl_tensor *f_sum(gdl_tensor **x) { return gdl_sum(x[0]); }
static gdl_tensor *f_mean(gdl_tensor **x) { return gdl_mean(x[0]); }
static gdl_tensor *f_sum_dim1k(gdl_tensor **x) { return gdl_sum_dim(x[0], 1, 1); }
static gdl_tensor *f_mean_dimm1(gdl_tensor **x) { return gdl_mean_dim(x[0], -1, 0); }
static gdl_tensor *f_max_dim1(gdl_tensor **x) { return gdl_max_dim(x[0], 1, 0); }
static gdl_tensor *f_max_dim0k(gdl_tensor **x) { return gdl_max_dim(x[0], 0, 1); }
static gdl_tensor *f_min_dim1(gdl_tensor **x) { return gdl_min_dim(x[0], 1, 0); }
/* torch.min(x, dim, keepdim=True)'s values, and its indices gathered back from x: the two must agree */
static gdl_tensor *f_min_dim_ex(gdl_tensor **x) {
    gdl_tensor *v, *i;
    return gdl_min_dim_ex(x[0], -1, 1, &v, &i) < 0 ? NULL : gdl_add(v, gdl_gather(x[0], -1, i));
}
static gdl_tensor *f_max_dim_ex(gdl_tensor **x) {
    gdl_tensor *v, *i;
    return gdl_max_dim_ex(x[0], 0, 1, &v, &i) < 0 ? NULL : gdl_sub(gdl_gather(x[0], 0, i), gdl_mul_scalar(v, 2));
}
static gdl_tensor *f_softmax1(gdl_tensor **x) { return gdl_softmax(x[0], 1); }
static gdl_tensor *f_softmax0(gdl_tensor **x) { return gdl_softmax(x[0], 0); }
static gdl_tensor *f_log_softmaxm1(gdl_tensor **x) { return gdl_log_softmax(x[0], -1); }
static gdl_tensor *f_log_softmax1(gdl_tensor **x) { return gdl_log_softmax(x[0], 1); }
static gdl_tensor *f_conv_s1p1(gdl_tensor **x) { return gdl_conv2d(x[0], x[1], x[2], 1, 1, 1, 1); }
static gdl_tensor *f_conv_s2d2(gdl_tensor **x) { return gdl_conv2d(x[0], x[1], x[2], 2, 0, 2, 1); }
static gdl_tensor *f_conv_g3(gdl_tensor **x) { return gdl_conv2d(x[0], x[1], x[2], 1, 1, 1, 3); }
static gdl_tensor *f_conv_1x1(gdl_tensor **x) { return gdl_conv2d(x[0], x[1], NULL, 1, 0, 1, 1); }
static gdl_tensor *f_conv_ex(gdl_tensor **x) {
    int s[2] = {2, 1}, p[2] = {1, 0}, d[2] = {1, 2};
    return gdl_conv2d_ex(x[0], x[1], x[2], s, p, d, 1);
}
static gdl_tensor *f_maxpool2(gdl_tensor **x) { return gdl_max_pool2d(x[0], 2, 0, 0); }
static gdl_tensor *f_maxpool3s2p1(gdl_tensor **x) { return gdl_max_pool2d(x[0], 3, 2, 1); }
static gdl_tensor *f_avgpool2(gdl_tensor **x) { return gdl_avg_pool2d(x[0], 2, 0, 0); }
static gdl_tensor *f_avgpool3s2p1(gdl_tensor **x) { return gdl_avg_pool2d(x[0], 3, 2, 1); }
static gdl_tensor *f_gap(gdl_tensor **x) { return gdl_global_avg_pool2d(x[0]); }
static gdl_tensor *f_concat0(gdl_tensor **x) { return gdl_concat(3, x, 0); }
static gdl_tensor *f_concat1(gdl_tensor **x) { return gdl_concat(2, x, 1); }
static gdl_tensor *f_dropout(gdl_tensor **x) { return gdl_dropout(x[0], 0.3, 1); }
static gdl_tensor *f_bn_train(gdl_tensor **x) { return gdl_batch_norm(x[0], x[3], x[4], x[1], x[2], 1, 0.1, 1e-5); }
static gdl_tensor *f_bn_eval(gdl_tensor **x) { return gdl_batch_norm(x[0], x[3], x[4], x[1], x[2], 0, 0.1, 1e-5); }
static gdl_tensor *f_bn_plain(gdl_tensor **x) { return gdl_batch_norm(x[0], NULL, NULL, NULL, NULL, 1, 0.1, 1e-5); }
static gdl_tensor *f_bnr_train(gdl_tensor **x) { return gdl_batch_norm_relu(x[0], x[3], x[4], x[1], x[2], 1, 0.1, 1e-5); }
static gdl_tensor *f_bnr_eval(gdl_tensor **x) { return gdl_batch_norm_relu(x[0], x[3], x[4], x[1], x[2], 0, 0.1, 1e-5); }
static gdl_tensor *f_bnr_plain(gdl_tensor **x) { return gdl_batch_norm_relu(x[0], NULL, NULL, NULL, NULL, 1, 0.1, 1e-5); }
static gdl_tensor *f_bng_train(gdl_tensor **x) {
    return gdl_batch_norm_act(x[0], x[3], x[4], x[1], x[2], 1, 0.1, 1e-5, GDL_ACT_GELU);
}
static gdl_tensor *f_bng_eval(gdl_tensor **x) {
    return gdl_batch_norm_act(x[0], x[3], x[4], x[1], x[2], 0, 0.1, 1e-5, GDL_ACT_GELU);
}
static gdl_tensor *f_bng_plain(gdl_tensor **x) {
    return gdl_batch_norm_act(x[0], NULL, NULL, NULL, NULL, 1, 0.1, 1e-5, GDL_ACT_GELU);
}
static gdl_tensor *f_ln(gdl_tensor **x) { return gdl_layer_norm(x[0], x[1], x[2], 1e-5); }
static gdl_tensor *f_ln_plain(gdl_tensor **x) { return gdl_layer_norm(x[0], NULL, NULL, 1e-5); }
static gdl_tensor *f_embedding(gdl_tensor **x) { return gdl_embedding(x[0], x[1]); }
/* padding_idx -2 (row 1 of 3): the output's positions that look it up are zeroed, so its true gradient is 0
   too, and the row's fan-out gradient (added before the lookup's backward) must survive */
static gdl_tensor *f_embedding_padding(gdl_tensor **x) {
    gdl_embedding_opts o = gdl_embedding_defaults();
    int64_t s[3];
    o.padding_idx = -2;
    s[0] = x[0]->shape[0], s[1] = x[0]->shape[1], s[2] = 1;
    return gdl_masked_fill(gdl_embedding_ex(x[0], x[1], &o), gdl_reshape(gdl_compare_scalar(x[0], GDL_CMP_EQ, 1), 3, s), 0);
}
/* max_norm renormalises a copy of a constant weight (in place, outside autograd, as PyTorch's); the
   values reach the gradient of x[2] (in x[2]'s dtype: the constant stays f32 in the bf16 / f16 runs) */
static gdl_tensor *f_embedding_max_norm(gdl_tensor **x) {
    gdl_embedding_opts o = gdl_embedding_defaults();
    o.max_norm = 1.1;
    return gdl_mul(gdl_to_dtype(gdl_embedding_ex(x[0], gdl_mul_scalar(x[1], 1.0), &o), x[2]->dtype), x[2]);
}
static gdl_tensor *f_embedding_max_norm_p(gdl_tensor **x) {
    gdl_embedding_opts o = gdl_embedding_defaults();
    o.max_norm = 0.8;
    o.norm_type = 1.5;
    return gdl_mul(gdl_to_dtype(gdl_embedding_ex(x[0], gdl_mul_scalar(x[1], 1.0), &o), x[2]->dtype), x[2]);
}
static gdl_tensor *f_ce(gdl_tensor **x) { return gdl_cross_entropy(x[0], x[1]); }
static gdl_tensor *f_ce_smooth_sum(gdl_tensor **x) {
    gdl_ce_opts o = gdl_ce_defaults();
    o.label_smoothing = 0.1;
    o.reduction = GDL_REDUCE_SUM;
    return gdl_cross_entropy_ex(x[0], x[1], &o);
}
static gdl_tensor *f_ce_none(gdl_tensor **x) {
    gdl_ce_opts o = gdl_ce_defaults();
    o.reduction = GDL_REDUCE_NONE;
    o.label_smoothing = 0.2;
    return gdl_cross_entropy_ex(x[0], x[1], &o);
}
/* probability targets [B,C] (mixup/cutmix's soft targets), smoothed */
static gdl_tensor *f_ce_soft(gdl_tensor **x) {
    gdl_ce_opts o = gdl_ce_defaults();
    o.label_smoothing = 0.1;
    return gdl_cross_entropy_ex(x[0], x[1], &o);
}
/* class weights (x[2]) with a reduction and label smoothing; the same over [B, C, d1, ...] logits */
static gdl_tensor *ce_weighted(gdl_tensor **x, gdl_reduction r, double label_smoothing) {
    gdl_ce_opts o = gdl_ce_defaults();
    o.reduction = r;
    o.label_smoothing = label_smoothing;
    o.weight = x[2];
    return gdl_cross_entropy_ex(x[0], x[1], &o);
}
static gdl_tensor *f_ce_weighted_smooth(gdl_tensor **x) { return ce_weighted(x, GDL_REDUCE_MEAN, 0.1); }
static gdl_tensor *f_ce_weighted_sum(gdl_tensor **x) { return ce_weighted(x, GDL_REDUCE_SUM, 0); }
static gdl_tensor *f_ce_weighted_none(gdl_tensor **x) { return ce_weighted(x, GDL_REDUCE_NONE, 0.3); }
static gdl_tensor *f_nll(gdl_tensor **x) { return gdl_nll_loss(x[0], x[1], GDL_REDUCE_MEAN, -100); }
static gdl_tensor *f_nll_sum(gdl_tensor **x) { return gdl_nll_loss(x[0], x[1], GDL_REDUCE_SUM, -100); }
static gdl_tensor *f_mse_none(gdl_tensor **x) { return gdl_mse_loss(x[0], x[1], GDL_REDUCE_NONE); }
static gdl_tensor *f_mse_mean(gdl_tensor **x) { return gdl_mse_loss(x[0], x[1], GDL_REDUCE_MEAN); }
static gdl_tensor *f_bce_none(gdl_tensor **x) { return gdl_bce_with_logits(x[0], x[1], GDL_REDUCE_NONE); }
static gdl_tensor *f_bce_sum(gdl_tensor **x) { return gdl_bce_with_logits(x[0], x[1], GDL_REDUCE_SUM); }
/* a copy to the input's own device (the parity test runs it on the GPU) */
static gdl_tensor *f_to(gdl_tensor **x) { return gdl_to(gdl_mul_scalar(x[0], 1.5), x[0]->device); }
/* a differentiable dtype conversion (f32 to f32 here: the double build has no exact low dtype) */
static gdl_tensor *f_cast(gdl_tensor **x) { return gdl_to_dtype(gdl_mul_scalar(x[0], 1.5), GDL_F32); }
/* one tensor as both operands */
static gdl_tensor *f_add_self(gdl_tensor **x) { return gdl_add(x[0], x[0]); }
static gdl_tensor *f_sub_self(gdl_tensor **x) { return gdl_sub(x[0], x[0]); }
static gdl_tensor *f_mul_self(gdl_tensor **x) { return gdl_mul(x[0], x[0]); }
static gdl_tensor *f_div_self(gdl_tensor **x) { return gdl_div(x[0], x[0]); }
static gdl_tensor *f_matmul_self(gdl_tensor **x) { return gdl_matmul(x[0], x[0]); }
static gdl_tensor *f_linear_self(gdl_tensor **x) { return gdl_linear(x[0], x[0], NULL); }
static gdl_tensor *f_conv_self(gdl_tensor **x) { return gdl_conv2d(x[0], x[0], NULL, 1, 1, 1, 1); }
static gdl_tensor *f_concat_self(gdl_tensor **x) {
    gdl_tensor *xs[2];
    xs[0] = xs[1] = x[0];
    return gdl_concat(2, xs, 1);
}
static gdl_tensor *f_bce_self(gdl_tensor **x) { return gdl_bce_with_logits(x[0], x[0], GDL_REDUCE_NONE); }
/* the affine weight doubles as the bias: both parameter gradients land in one tensor */
static gdl_tensor *f_ln_wb_self(gdl_tensor **x) { return gdl_layer_norm(x[0], x[1], x[1], 1e-5); }
static gdl_tensor *f_bn_wb_self(gdl_tensor **x) { return gdl_batch_norm(x[0], NULL, NULL, x[1], x[1], 1, 0.1, 1e-5); }
/* the sequence-model ops: elementwise, structure (permute, slicing, split, stack), indexing, masks */
static gdl_tensor *f_sqrt(gdl_tensor **x) { return gdl_sqrt(x[0]); }
static gdl_tensor *f_rsqrt(gdl_tensor **x) { return gdl_rsqrt(x[0]); }
static gdl_tensor *f_abs(gdl_tensor **x) { return gdl_abs(x[0]); }
static gdl_tensor *f_clamp(gdl_tensor **x) { return gdl_clamp(x[0], -0.5, 0.7); }
static gdl_tensor *f_clamp_min(gdl_tensor **x) { return gdl_clamp_min(x[0], 0.2); }
static gdl_tensor *f_minimum(gdl_tensor **x) { return gdl_minimum(x[0], x[1]); }
static gdl_tensor *f_maximum(gdl_tensor **x) { return gdl_maximum(x[0], x[1]); }
static gdl_tensor *f_maximum_self(gdl_tensor **x) { return gdl_maximum(x[0], x[0]); }
static gdl_tensor *f_pow_t(gdl_tensor **x) { return gdl_pow(x[0], x[1]); }
static gdl_tensor *f_permute3(gdl_tensor **x) { const int d[3] = {2, 0, 1}; return gdl_permute(x[0], 3, d); }
static gdl_tensor *f_permute4(gdl_tensor **x) { const int d[4] = {1, 0, -1, 2}; return gdl_permute(x[0], 4, d); }
static gdl_tensor *f_transpose(gdl_tensor **x) { return gdl_transpose(x[0], 0, -1); }
static gdl_tensor *f_narrow1(gdl_tensor **x) { return gdl_narrow(x[0], 1, 1, 3); }
static gdl_tensor *f_narrow_view(gdl_tensor **x) { return gdl_narrow(x[0], 1, -3, 2); }
static gdl_tensor *f_slice_step(gdl_tensor **x) { return gdl_slice_dim(x[0], 1, 1, 100, 2); }
static gdl_tensor *f_select(gdl_tensor **x) { return gdl_select(x[0], 1, -2); }
static gdl_tensor *f_split(gdl_tensor **x) {
    gdl_tensor *p[2], *q[2];
    if (gdl_split(x[0], 3, 1, p, 2) != 2) return NULL;
    q[0] = p[1];
    q[1] = p[0];
    return gdl_concat(2, q, 1);
}
static gdl_tensor *f_chunk(gdl_tensor **x) {
    gdl_tensor *p[3], *q[2];
    if (gdl_chunk(x[0], 3, 0, p) != 3) return NULL;
    q[0] = p[2];
    q[1] = p[0];
    return gdl_concat(2, q, 0);
}
static gdl_tensor *f_stack1(gdl_tensor **x) { return gdl_stack(3, x, 1); }
static gdl_tensor *f_index_select0(gdl_tensor **x) { return gdl_index_select(x[0], 0, x[1]); }
static gdl_tensor *f_index_select1(gdl_tensor **x) { return gdl_index_select(x[0], 1, x[1]); }
static gdl_tensor *f_gather1(gdl_tensor **x) { return gdl_gather(x[0], 1, x[1]); }
static gdl_tensor *f_gather0(gdl_tensor **x) { return gdl_gather(x[0], 0, x[1]); }
/* cond from a constant input (no gradient crosses a comparison) */
static gdl_tensor *f_where(gdl_tensor **x) { return gdl_where(gdl_gt(x[0], x[2]), x[0], x[1]); }
static gdl_tensor *f_where_self(gdl_tensor **x) { return gdl_where(gdl_compare_scalar(x[1], GDL_CMP_LE, 0.1), x[0], x[0]); }
static gdl_tensor *f_where_ge_ne(gdl_tensor **x) {
    return gdl_where(gdl_ge(x[2], x[0]), gdl_where(gdl_ne(x[2], x[2]), x[1], x[0]), x[1]);
}
static gdl_tensor *f_masked_fill(gdl_tensor **x) { return gdl_masked_fill(x[0], gdl_compare_scalar(x[1], GDL_CMP_LT, 0), -1.5); }
static gdl_tensor *f_masked_fill_eq(gdl_tensor **x) { return gdl_masked_fill(x[0], gdl_eq(x[1], gdl_tril(x[1], 0)), 3); }
static gdl_tensor *f_tril1(gdl_tensor **x) { return gdl_tril(x[0], 1); }
static gdl_tensor *f_triu_m1(gdl_tensor **x) { return gdl_triu(x[0], -1); }
static gdl_tensor *f_cumsum1(gdl_tensor **x) { return gdl_cumsum(x[0], 1); }
static gdl_tensor *f_cumsum0(gdl_tensor **x) { return gdl_cumsum(x[0], 0); }
static gdl_tensor *f_bmm(gdl_tensor **x) { return gdl_bmm(x[0], x[1]); }
/* scaled dot-product attention: the fused kernels (none, causal, a u8 mask, an additive mask of the query's
   dtype, q = k = v) and the unfused composition (dropout, broadcast batch dims) */
static gdl_tensor *f_sdpa(gdl_tensor **x) { return gdl_scaled_dot_product_attention(x[0], x[1], x[2], NULL, 0, 0, NAN); }
static gdl_tensor *f_sdpa_causal(gdl_tensor **x) { return gdl_scaled_dot_product_attention(x[0], x[1], x[2], NULL, 0, 1, 0.7); }
static gdl_tensor *f_sdpa_bool(gdl_tensor **x) {
    return gdl_scaled_dot_product_attention(x[0], x[1], x[2], gdl_compare_scalar(x[3], GDL_CMP_GT, -0.8), 0, 0, GDL_SCALE_DEFAULT);
}
static gdl_tensor *f_sdpa_additive(gdl_tensor **x) {
    return gdl_scaled_dot_product_attention(x[0], x[1], x[2], gdl_to_dtype(x[3], x[0]->dtype), 0, 0, NAN);
}
static gdl_tensor *f_sdpa_self(gdl_tensor **x) { return gdl_scaled_dot_product_attention(x[0], x[0], x[0], NULL, 0, 1, GDL_SCALE_DEFAULT); }
static gdl_tensor *f_sdpa_dropout(gdl_tensor **x) { return gdl_scaled_dot_product_attention(x[0], x[1], x[2], NULL, 0.3, 0, GDL_SCALE_DEFAULT); }
/* heads packed in the last dim, read and written at strides: three tensors (2 heads), 4-D with an additive
   mask, one qkv tensor with is_causal, and dropout (the composition on copies) */
static gdl_tensor *f_sdpa_heads(gdl_tensor **x) { return gdl_sdpa_heads(x[0], x[1], x[2], 2, NULL, 0, 0, NAN); }
static gdl_tensor *f_sdpa_heads_additive(gdl_tensor **x) {
    return gdl_sdpa_heads(x[0], x[1], x[2], 2, gdl_to_dtype(x[3], x[0]->dtype), 0, 0, NAN);
}
static gdl_tensor *f_sdpa_qkv_causal(gdl_tensor **x) { return gdl_sdpa_qkv(x[0], 2, NULL, 0, 1, 0.6); }
/* grouped-query attention (enable_gqa): query heads 4 and 6 over key/value heads 2; the output is the fused op's
   reshaped back to [..., Hq, L, Ev]; a 5-D q [N, Hkv, G, L, E] against k and v [N, Hkv, 1, S, E] is the fused op's
   group itself */
static gdl_tensor *f_sdpa_gqa_causal(gdl_tensor **x) { return gdl_scaled_dot_product_attention_ex(x[0], x[1], x[2], NULL, 0, 1, NAN, 1); }
static gdl_tensor *f_sdpa_gqa_mask(gdl_tensor **x) {
    return gdl_scaled_dot_product_attention_ex(x[0], x[1], x[2], gdl_to_dtype(x[3], x[0]->dtype), 0, 0, 0.8, 1);
}
static gdl_tensor *f_sdpa_gqa_dropout(gdl_tensor **x) {
    return gdl_scaled_dot_product_attention_ex(x[0], x[1], x[2], NULL, 0.3, 0, GDL_SCALE_DEFAULT, 1);
}
static gdl_tensor *f_sdpa_heads_dropout(gdl_tensor **x) { return gdl_sdpa_heads(x[0], x[1], x[2], 2, NULL, 0.3, 0, GDL_SCALE_DEFAULT); }
static gdl_tensor *f_lstm_gates(gdl_tensor **x) { return gdl_lstm_gates(x[0], x[1], x[2]); }
static gdl_tensor *f_lstm_gates_self(gdl_tensor **x) { return gdl_lstm_gates(x[0], x[0], x[1]); }
static gdl_tensor *f_gru_gates(gdl_tensor **x) { return gdl_gru_gates(x[0], x[1], x[2]); }
static gdl_tensor *f_gru_gates_self(gdl_tensor **x) { return gdl_gru_gates(x[0], x[0], x[1]); }

#include "rnn_cases.h"

/* a small net: every op's gradient flows through others */
static gdl_tensor *f_mlp(gdl_tensor **x) {
    return gdl_cross_entropy(gdl_linear(gdl_relu(gdl_linear(x[0], x[1], x[2])), x[3], NULL), x[4]);
}

#define R1(a) 1, {a}
#define R2(a, b) 2, {a, b}
#define R3(a, b, c) 3, {a, b, c}
#define R4(a, b, c, d) 4, {a, b, c, d}
#define R5(a, b, c, d, e) 5, {a, b, c, d, e}

static const gc_case cases[] = {
    {"reshape", GDL_OP_RESHAPE, f_reshape, 1, {{R2(3, 4), IN_RANDN, 0}}},
    {"flatten", GDL_OP_RESHAPE, f_flatten, 1, {{R3(2, 3, 5), IN_RANDN, 0}}},
    {"slice", GDL_OP_SLICE, f_slice, 1, {{R2(5, 3), IN_RANDN, 0}}},
    {"add_broadcast", GDL_OP_ADD, f_add, 2, {{R3(3, 1, 5), IN_RANDN, 0}, {R2(4, 5), IN_RANDN, 0}}},
    {"add_same_17", GDL_OP_ADD, f_add, 2, {{R1(17), IN_RANDN, 0}, {R1(17), IN_RANDN, 0}}},
    {"sub_broadcast", GDL_OP_SUB, f_sub, 2, {{R2(2, 3), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}}},
    {"mul_outer", GDL_OP_MUL, f_mul, 2, {{R2(4, 1), IN_RANDN, 0}, {R2(1, 5), IN_RANDN, 0}}},
    {"mul_scalar_tensor", GDL_OP_MUL, f_mul, 2, {{R2(3, 3), IN_RANDN, 0}, {R1(1), IN_RANDN, 0}}},
    {"div_broadcast", GDL_OP_DIV, f_div, 2, {{R2(3, 4), IN_RANDN, 0}, {R1(4), IN_POS, 0}}},
    {"add_scalar", GDL_OP_ADD_SCALAR, f_add_scalar, 1, {{R1(33), IN_RANDN, 0}}},
    {"mul_scalar", GDL_OP_MUL_SCALAR, f_mul_scalar, 1, {{R1(3), IN_RANDN, 0}}},
    {"pow_scalar", GDL_OP_POW_SCALAR, f_pow, 1, {{R1(17), IN_POS, 0}}},
    {"exp", GDL_OP_EXP, f_exp, 1, {{R2(3, 5), IN_RANDN, 0}}},
    {"log", GDL_OP_LOG, f_log, 1, {{R1(17), IN_POS, 0}}},
    {"relu", GDL_OP_RELU, f_relu, 1, {{R1(33), IN_RANDN, 0}}},
    {"leaky_relu", GDL_OP_LEAKY_RELU, f_leaky, 1, {{R1(33), IN_RANDN, 0}}},
    {"sigmoid", GDL_OP_SIGMOID, f_sigmoid, 1, {{R1(17), IN_RANDN, 0}}},
    {"tanh", GDL_OP_TANH, f_tanh, 1, {{R1(17), IN_RANDN, 0}}},
    {"gelu", GDL_OP_GELU, f_gelu, 1, {{R1(17), IN_RANDN, 0}}},
    {"gelu_tanh", GDL_OP_GELU_TANH, f_gelu_tanh, 1, {{R1(17), IN_RANDN, 0}}},
    {"matmul_2d", GDL_OP_MATMUL, f_matmul, 2, {{R2(3, 4), IN_RANDN, 0}, {R2(4, 5), IN_RANDN, 0}}},
    {"matmul_1x17x3", GDL_OP_MATMUL, f_matmul, 2, {{R2(1, 17), IN_RANDN, 0}, {R2(17, 3), IN_RANDN, 0}}},
    {"matmul_batched", GDL_OP_MATMUL, f_matmul, 2, {{R3(2, 3, 4), IN_RANDN, 0}, {R3(2, 4, 5), IN_RANDN, 0}}},
    {"matmul_3d_2d", GDL_OP_MATMUL, f_matmul, 2, {{R3(2, 3, 4), IN_RANDN, 0}, {R2(4, 5), IN_RANDN, 0}}},
    {"matmul_2d_3d", GDL_OP_MATMUL, f_matmul, 2, {{R2(3, 4), IN_RANDN, 0}, {R3(2, 4, 5), IN_RANDN, 0}}},
    {"linear", GDL_OP_LINEAR, f_linear, 3, {{R2(5, 7), IN_RANDN, 0}, {R2(3, 7), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}}},
    {"linear_3d_input", GDL_OP_LINEAR, f_linear, 3, {{R3(2, 3, 4), IN_RANDN, 0}, {R2(5, 4), IN_RANDN, 0}, {R1(5), IN_RANDN, 0}}},
    {"linear_no_bias", GDL_OP_LINEAR, f_linear_nb, 2, {{R2(1, 17), IN_RANDN, 0}, {R2(3, 17), IN_RANDN, 0}}},
    /* fused bias + activation: 70 rows / 72 pixels take the block-per-column bias reduction on a GPU, 16
       outputs the cuBLASLt GELU_AUX epilogue (aux ld divisible by 8), 3 outputs or erf GELU the GEMM + one pass */
    {"linear_act_relu", GDL_OP_LINEAR_ACT, f_linear_relu, 3, {{R2(5, 7), IN_RANDN, 0}, {R2(3, 7), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}}},
    {"linear_act_relu_70rows", GDL_OP_LINEAR_ACT, f_linear_relu, 3, {{R2(70, 9), IN_RANDN, 0}, {R2(5, 9), IN_RANDN, 0}, {R1(5), IN_RANDN, 0}}},
    {"linear_act_gelu_tanh_3d", GDL_OP_LINEAR_ACT, f_linear_gelu_tanh, 3, {{R3(2, 3, 4), IN_RANDN, 0}, {R2(8, 4), IN_RANDN, 0}, {R1(8), IN_RANDN, 0}}},
    {"linear_act_gelu_tanh_70rows", GDL_OP_LINEAR_ACT, f_linear_gelu_tanh, 3, {{R2(70, 5), IN_RANDN, 0}, {R2(16, 5), IN_RANDN, 0}, {R1(16), IN_RANDN, 0}}},
    {"linear_act_gelu_tanh_odd", GDL_OP_LINEAR_ACT, f_linear_gelu_tanh, 3, {{R2(5, 7), IN_RANDN, 0}, {R2(3, 7), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}}},
    {"linear_act_gelu_no_bias", GDL_OP_LINEAR_ACT, f_linear_gelu_nb, 2, {{R2(1, 17), IN_RANDN, 0}, {R2(3, 17), IN_RANDN, 0}}},
    {"linear_act_none", GDL_OP_LINEAR_ACT, f_linear_act_none, 3, {{R2(5, 7), IN_RANDN, 0}, {R2(3, 7), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}}},
    {"linear_act_relu_self", GDL_OP_LINEAR_ACT, f_linear_relu_self, 1, {{R2(5, 5), IN_RANDN, 0}}},
    {"conv2d_act_relu", GDL_OP_CONV2D_ACT, f_conv_relu, 3, {{R4(2, 3, 7, 6), IN_RANDN, 0}, {R4(4, 3, 3, 3), IN_RANDN, 0}, {R1(4), IN_RANDN, 0}}},
    {"conv2d_act_relu_72px", GDL_OP_CONV2D_ACT, f_conv_relu, 3, {{R4(2, 2, 9, 8), IN_RANDN, 0}, {R4(3, 2, 3, 3), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}}},
    {"conv2d_act_gelu_tanh_groups3", GDL_OP_CONV2D_ACT, f_conv_gelu_g3, 3, {{R4(2, 3, 5, 5), IN_RANDN, 0}, {R4(6, 1, 3, 3), IN_RANDN, 0}, {R1(6), IN_RANDN, 0}}},
    {"conv2d_act_gelu_1x1_no_bias", GDL_OP_CONV2D_ACT, f_conv_gelu_1x1, 2, {{R4(2, 3, 4, 3), IN_RANDN, 0}, {R4(5, 3, 1, 1), IN_RANDN, 0}}},
    {"conv2d_act_none", GDL_OP_CONV2D_ACT, f_conv_act_none, 3, {{R4(1, 2, 9, 8), IN_RANDN, 0}, {R4(3, 2, 3, 2), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}}},
    {"sum", GDL_OP_SUM, f_sum, 1, {{R2(3, 4), IN_RANDN, 0}}},
    {"sum_dim_keepdim", GDL_OP_SUM, f_sum_dim1k, 1, {{R3(3, 4, 5), IN_RANDN, 0}}},
    {"mean", GDL_OP_MEAN, f_mean, 1, {{R1(17), IN_RANDN, 0}}},
    {"mean_dim_last", GDL_OP_MEAN, f_mean_dimm1, 1, {{R3(2, 3, 5), IN_RANDN, 0}}},
    {"max_dim", GDL_OP_MAX, f_max_dim1, 1, {{R3(2, 5, 3), IN_RANDN, 0}}},
    {"max_dim0_keepdim", GDL_OP_MAX, f_max_dim0k, 1, {{R2(17, 3), IN_RANDN, 0}}},
    {"min_dim", GDL_OP_MIN, f_min_dim1, 1, {{R3(2, 5, 3), IN_RANDN, 0}}},
    {"min_dim_ex_indices", GDL_OP_ADD, f_min_dim_ex, 1, {{R3(3, 2, 5), IN_PERM, 0}}},
    {"max_dim_ex_indices", GDL_OP_SUB, f_max_dim_ex, 1, {{R2(6, 4), IN_PERM, 0}}},
    {"softmax_dim1", GDL_OP_SOFTMAX, f_softmax1, 1, {{R2(3, 5), IN_RANDN, 0}}},
    {"softmax_dim0", GDL_OP_SOFTMAX, f_softmax0, 1, {{R3(4, 2, 3), IN_RANDN, 0}}},
    {"log_softmax_last", GDL_OP_LOG_SOFTMAX, f_log_softmaxm1, 1, {{R3(2, 3, 4), IN_RANDN, 0}}},
    {"log_softmax_mid", GDL_OP_LOG_SOFTMAX, f_log_softmax1, 1, {{R3(2, 3, 4), IN_RANDN, 0}}},
    {"conv2d_s1p1", GDL_OP_CONV2D, f_conv_s1p1, 3, {{R4(2, 3, 7, 6), IN_RANDN, 0}, {R4(4, 3, 3, 3), IN_RANDN, 0}, {R1(4), IN_RANDN, 0}}},
    {"conv2d_s2_dil2", GDL_OP_CONV2D, f_conv_s2d2, 3, {{R4(1, 2, 9, 8), IN_RANDN, 0}, {R4(3, 2, 3, 2), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}}},
    {"conv2d_groups3", GDL_OP_CONV2D, f_conv_g3, 3, {{R4(2, 3, 5, 5), IN_RANDN, 0}, {R4(6, 1, 3, 3), IN_RANDN, 0}, {R1(6), IN_RANDN, 0}}},
    {"conv2d_1x1", GDL_OP_CONV2D, f_conv_1x1, 2, {{R4(2, 3, 4, 3), IN_RANDN, 0}, {R4(5, 3, 1, 1), IN_RANDN, 0}}},
    {"conv2d_ex", GDL_OP_CONV2D, f_conv_ex, 3, {{R4(1, 2, 7, 7), IN_RANDN, 0}, {R4(3, 2, 3, 3), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}}},
    {"max_pool2d_k2", GDL_OP_MAX_POOL2D, f_maxpool2, 1, {{R4(2, 3, 6, 7), IN_RANDN, 0}}},
    {"max_pool2d_k3s2p1", GDL_OP_MAX_POOL2D, f_maxpool3s2p1, 1, {{R4(1, 2, 7, 5), IN_RANDN, 0}}},
    {"avg_pool2d_k2", GDL_OP_AVG_POOL2D, f_avgpool2, 1, {{R4(2, 3, 6, 7), IN_RANDN, 0}}},
    {"avg_pool2d_k3s2p1", GDL_OP_AVG_POOL2D, f_avgpool3s2p1, 1, {{R4(1, 2, 7, 5), IN_RANDN, 0}}},
    {"global_avg_pool2d", GDL_OP_GLOBAL_AVG_POOL2D, f_gap, 1, {{R4(2, 3, 4, 5), IN_RANDN, 0}}},
    {"concat_dim0", GDL_OP_CONCAT, f_concat0, 3, {{R2(2, 3), IN_RANDN, 0}, {R2(1, 3), IN_RANDN, 0}, {R2(3, 3), IN_RANDN, 0}}},
    {"concat_dim1", GDL_OP_CONCAT, f_concat1, 2, {{R3(2, 3, 2), IN_RANDN, 0}, {R3(2, 1, 2), IN_RANDN, 0}}},
    {"dropout", GDL_OP_DROPOUT, f_dropout, 1, {{R1(33), IN_RANDN, 0}}},
    {"batch_norm_2d_train", GDL_OP_BATCH_NORM, f_bn_train, 5,
     {{R4(3, 2, 3, 3), IN_RANDN, 0}, {R1(2), IN_RANDN, 0}, {R1(2), IN_RANDN, 0}, {R1(2), IN_CONST, 0}, {R1(2), IN_CONST_POS, 0}}},
    /* rows of 21 pixels: two groups of the CPU's 8 running sums and a tail of 5 (gdl__rows_sum) */
    {"batch_norm_2d_train_wide", GDL_OP_BATCH_NORM, f_bn_train, 5,
     {{R4(2, 3, 3, 7), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}, {R1(3), IN_CONST, 0}, {R1(3), IN_CONST_POS, 0}}},
    /* [N, C] (S 1): a block of 8 channels and a tail of 3 (in the f32 builds the block runs in vector lanes,
       as in the CPU/GPU parity rows; test_gradcheck's double build has only the scalar loop) */
    {"batch_norm_1d_train", GDL_OP_BATCH_NORM, f_bn_train, 5,
     {{R2(5, 11), IN_RANDN, 0}, {R1(11), IN_RANDN, 0}, {R1(11), IN_RANDN, 0}, {R1(11), IN_CONST, 0}, {R1(11), IN_CONST_POS, 0}}},
    {"batch_norm_1d_eval", GDL_OP_BATCH_NORM, f_bn_eval, 5,
     {{R2(4, 11), IN_RANDN, 0}, {R1(11), IN_RANDN, 0}, {R1(11), IN_RANDN, 0}, {R1(11), IN_CONST, 0}, {R1(11), IN_CONST_POS, 0}}},
    {"batch_norm_eval", GDL_OP_BATCH_NORM, f_bn_eval, 5,
     {{R3(3, 2, 4), IN_RANDN, 0}, {R1(2), IN_RANDN, 0}, {R1(2), IN_RANDN, 0}, {R1(2), IN_CONST, 0}, {R1(2), IN_CONST_POS, 0}}},
    {"batch_norm_no_affine", GDL_OP_BATCH_NORM, f_bn_plain, 1, {{R3(4, 3, 2), IN_RANDN, 0}}},
    /* the fused ReLU: rows of 21 again (vector lanes and a tail, the mask in both), 1-D, eval, no affine */
    {"batch_norm_relu_2d_train", GDL_OP_BATCH_NORM_RELU, f_bnr_train, 5,
     {{R4(2, 3, 3, 7), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}, {R1(3), IN_CONST, 0}, {R1(3), IN_CONST_POS, 0}}},
    {"batch_norm_relu_1d_train", GDL_OP_BATCH_NORM_RELU, f_bnr_train, 5,
     {{R2(5, 11), IN_RANDN, 0}, {R1(11), IN_RANDN, 0}, {R1(11), IN_RANDN, 0}, {R1(11), IN_CONST, 0}, {R1(11), IN_CONST_POS, 0}}},
    {"batch_norm_relu_eval", GDL_OP_BATCH_NORM_RELU, f_bnr_eval, 5,
     {{R3(3, 2, 9), IN_RANDN, 0}, {R1(2), IN_RANDN, 0}, {R1(2), IN_RANDN, 0}, {R1(2), IN_CONST, 0}, {R1(2), IN_CONST_POS, 0}}},
    {"batch_norm_relu_no_affine", GDL_OP_BATCH_NORM_RELU, f_bnr_plain, 1, {{R3(4, 3, 2), IN_RANDN, 0}}},
    /* the fused GELU (erf): the same shapes; 1-D with 11 channels (a block of 8 and a tail of 3) */
    {"batch_norm_gelu_2d_train", GDL_OP_BATCH_NORM_GELU, f_bng_train, 5,
     {{R4(2, 3, 3, 7), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}, {R1(3), IN_CONST, 0}, {R1(3), IN_CONST_POS, 0}}},
    {"batch_norm_gelu_1d_train", GDL_OP_BATCH_NORM_GELU, f_bng_train, 5,
     {{R2(5, 11), IN_RANDN, 0}, {R1(11), IN_RANDN, 0}, {R1(11), IN_RANDN, 0}, {R1(11), IN_CONST, 0}, {R1(11), IN_CONST_POS, 0}}},
    {"batch_norm_gelu_eval", GDL_OP_BATCH_NORM_GELU, f_bng_eval, 5,
     {{R3(3, 2, 9), IN_RANDN, 0}, {R1(2), IN_RANDN, 0}, {R1(2), IN_RANDN, 0}, {R1(2), IN_CONST, 0}, {R1(2), IN_CONST_POS, 0}}},
    {"batch_norm_gelu_no_affine", GDL_OP_BATCH_NORM_GELU, f_bng_plain, 1, {{R3(4, 3, 2), IN_RANDN, 0}}},
    {"layer_norm", GDL_OP_LAYER_NORM, f_ln, 3, {{R2(3, 5), IN_RANDN, 0}, {R1(5), IN_RANDN, 0}, {R1(5), IN_RANDN, 0}}},
    {"layer_norm_no_affine", GDL_OP_LAYER_NORM, f_ln_plain, 1, {{R3(2, 2, 17), IN_RANDN, 0}}},
    {"embedding", GDL_OP_EMBEDDING, f_embedding, 2, {{R2(2, 3), IN_TARGET, 7}, {R2(7, 4), IN_RANDN, 0}}},
    {"embedding_padding_idx", GDL_OP_MASKED_FILL, f_embedding_padding, 2, {{R2(3, 4), IN_TARGET, 3}, {R2(3, 5), IN_RANDN, 0}}},
    {"embedding_max_norm", GDL_OP_MUL, f_embedding_max_norm, 3,
     {{R2(2, 3), IN_TARGET, 5}, {R2(5, 4), IN_CONST, 0}, {R2(3, 4), IN_RANDN, 0}}},
    {"embedding_max_norm_p1_5", GDL_OP_MUL, f_embedding_max_norm_p, 3,
     {{R2(4, 3), IN_TARGET, 4}, {R2(4, 6), IN_CONST, 0}, {R2(3, 6), IN_RANDN, 0}}},
    {"cross_entropy", GDL_OP_CROSS_ENTROPY, f_ce, 2, {{R2(4, 5), IN_RANDN, 0}, {R1(4), IN_TARGET, 5}}},
    {"cross_entropy_ignore", GDL_OP_CROSS_ENTROPY, f_ce, 2, {{R2(5, 3), IN_RANDN, 0}, {R1(5), IN_TARGET_IGNORE, 3}}},
    {"cross_entropy_smooth_sum", GDL_OP_CROSS_ENTROPY, f_ce_smooth_sum, 2, {{R2(3, 17), IN_RANDN, 0}, {R1(3), IN_TARGET, 17}}},
    {"cross_entropy_soft", GDL_OP_MEAN, f_ce_soft, 2, {{R2(4, 5), IN_RANDN, 0}, {R2(4, 5), IN_POS, 0}}},
    {"cross_entropy_none", GDL_OP_CROSS_ENTROPY, f_ce_none, 2, {{R2(5, 3), IN_RANDN, 0}, {R1(5), IN_TARGET_IGNORE, 3}}},
    {"cross_entropy_nd", GDL_OP_CROSS_ENTROPY, f_ce, 2, {{R3(2, 3, 4), IN_RANDN, 0}, {R2(2, 4), IN_TARGET_IGNORE, 3}}},
    {"cross_entropy_nd_none_smooth", GDL_OP_RESHAPE, f_ce_none, 2, {{R4(2, 4, 3, 2), IN_RANDN, 0}, {R3(2, 3, 2), IN_TARGET_IGNORE, 4}}},
    {"cross_entropy_weighted_smooth", GDL_OP_DIV, f_ce_weighted_smooth, 3,
     {{R2(5, 4), IN_RANDN, 0}, {R1(5), IN_TARGET_IGNORE, 4}, {R1(4), IN_CONST_POS, 0}}},
    {"cross_entropy_nd_weighted_sum", GDL_OP_SUM, f_ce_weighted_sum, 3,
     {{R3(2, 3, 5), IN_RANDN, 0}, {R2(2, 5), IN_TARGET_IGNORE, 3}, {R1(3), IN_CONST_POS, 0}}},
    {"cross_entropy_nd_weighted_none", GDL_OP_RESHAPE, f_ce_weighted_none, 3,
     {{R3(3, 4, 2), IN_RANDN, 0}, {R2(3, 2), IN_TARGET_IGNORE, 4}, {R1(4), IN_CONST_POS, 0}}},
    {"cross_entropy_soft_nd_weighted", GDL_OP_MEAN, f_ce_weighted_smooth, 3,
     {{R3(2, 3, 4), IN_RANDN, 0}, {R3(2, 3, 4), IN_POS, 0}, {R1(3), IN_CONST_POS, 0}}},
    {"nll_loss_nd", GDL_OP_NLL_LOSS, f_nll, 2, {{R3(2, 5, 3), IN_RANDN, 0}, {R2(2, 3), IN_TARGET_IGNORE, 5}}},
    {"nll_loss", GDL_OP_NLL_LOSS, f_nll, 2, {{R2(4, 5), IN_RANDN, 0}, {R1(4), IN_TARGET_IGNORE, 5}}},
    {"nll_loss_sum", GDL_OP_NLL_LOSS, f_nll_sum, 2, {{R2(1, 3), IN_RANDN, 0}, {R1(1), IN_TARGET, 3}}},
    {"mse_none", GDL_OP_MSE, f_mse_none, 2, {{R2(3, 5), IN_RANDN, 0}, {R2(3, 5), IN_RANDN, 0}}},
    {"mse_mean", GDL_OP_MEAN, f_mse_mean, 2, {{R1(17), IN_RANDN, 0}, {R1(17), IN_RANDN, 0}}},
    {"bce_with_logits_none", GDL_OP_BCE_WITH_LOGITS, f_bce_none, 2, {{R2(3, 5), IN_RANDN, 0}, {R2(3, 5), IN_RANDN, 0}}},
    {"bce_with_logits_sum", GDL_OP_SUM, f_bce_sum, 2, {{R1(17), IN_RANDN, 0}, {R1(17), IN_RANDN, 0}}},
    {"to", GDL_OP_TO, f_to, 1, {{R2(3, 5), IN_RANDN, 0}}},
    {"cast", GDL_OP_CAST, f_cast, 1, {{R2(3, 5), IN_RANDN, 0}}},
    {"add_self", GDL_OP_ADD, f_add_self, 1, {{R2(3, 5), IN_RANDN, 0}}},
    {"sub_self", GDL_OP_SUB, f_sub_self, 1, {{R2(3, 5), IN_RANDN, 0}}},
    {"mul_self", GDL_OP_MUL, f_mul_self, 1, {{R2(3, 5), IN_RANDN, 0}}},
    {"div_self", GDL_OP_DIV, f_div_self, 1, {{R1(7), IN_POS, 0}}},
    {"matmul_self", GDL_OP_MATMUL, f_matmul_self, 1, {{R2(4, 4), IN_RANDN, 0}}},
    {"linear_self", GDL_OP_LINEAR, f_linear_self, 1, {{R2(5, 5), IN_RANDN, 0}}},
    {"conv2d_self", GDL_OP_CONV2D, f_conv_self, 1, {{R4(2, 2, 3, 3), IN_RANDN, 0}}},
    {"concat_self", GDL_OP_CONCAT, f_concat_self, 1, {{R2(3, 2), IN_RANDN, 0}}},
    {"bce_with_logits_self", GDL_OP_BCE_WITH_LOGITS, f_bce_self, 1, {{R2(3, 5), IN_RANDN, 0}}},
    {"layer_norm_weight_is_bias", GDL_OP_LAYER_NORM, f_ln_wb_self, 2, {{R2(3, 5), IN_RANDN, 0}, {R1(5), IN_RANDN, 0}}},
    {"batch_norm_weight_is_bias", GDL_OP_BATCH_NORM, f_bn_wb_self, 2, {{R3(4, 3, 2), IN_RANDN, 0}, {R1(3), IN_RANDN, 0}}},
    {"sqrt", GDL_OP_SQRT, f_sqrt, 1, {{R1(17), IN_POS, 0}}},
    {"rsqrt", GDL_OP_RSQRT, f_rsqrt, 1, {{R2(3, 5), IN_POS, 0}}},
    {"abs", GDL_OP_ABS, f_abs, 1, {{R1(17), IN_RANDN, 0}}},
    {"clamp", GDL_OP_CLAMP_MAX, f_clamp, 1, {{R2(3, 11), IN_RANDN, 0}}},
    {"clamp_min", GDL_OP_CLAMP_MIN, f_clamp_min, 1, {{R1(17), IN_RANDN, 0}}},
    {"minimum_broadcast", GDL_OP_MINIMUM, f_minimum, 2, {{R3(2, 1, 4), IN_RANDN, 0}, {R2(3, 4), IN_RANDN, 0}}},
    {"maximum_broadcast", GDL_OP_MAXIMUM, f_maximum, 2, {{R2(3, 4), IN_RANDN, 0}, {R1(4), IN_RANDN, 0}}},
    /* ties send half the gradient each way: the central difference agrees */
    {"maximum_ties", GDL_OP_MAXIMUM, f_maximum, 2, {{R2(3, 5), IN_TIES, 0}, {R2(3, 5), IN_TIES, 0}}},
    {"minimum_ties_broadcast", GDL_OP_MINIMUM, f_minimum, 2, {{R2(4, 3), IN_TIES, 0}, {R2(4, 1), IN_TIES, 0}}},
    {"maximum_self", GDL_OP_MAXIMUM, f_maximum_self, 1, {{R1(7), IN_RANDN, 0}}},
    {"pow_tensors", GDL_OP_POW, f_pow_t, 2, {{R2(3, 4), IN_POS, 0}, {R1(4), IN_RANDN, 0}}},
    {"permute_3d", GDL_OP_PERMUTE, f_permute3, 1, {{R3(2, 3, 4), IN_RANDN, 0}}},
    {"permute_4d", GDL_OP_PERMUTE, f_permute4, 1, {{R4(2, 3, 2, 5), IN_RANDN, 0}}},
    {"transpose", GDL_OP_PERMUTE, f_transpose, 1, {{R3(3, 2, 5), IN_RANDN, 0}}},
    {"narrow_dim1", GDL_OP_NARROW, f_narrow1, 1, {{R3(3, 5, 2), IN_RANDN, 0}}},
    {"narrow_view", GDL_OP_SLICE, f_narrow_view, 1, {{R3(1, 5, 3), IN_RANDN, 0}}},
    {"slice_step2", GDL_OP_NARROW, f_slice_step, 1, {{R2(4, 7), IN_RANDN, 0}}},
    {"select", GDL_OP_RESHAPE, f_select, 1, {{R3(3, 4, 2), IN_RANDN, 0}}},
    {"split", GDL_OP_CONCAT, f_split, 1, {{R2(3, 4), IN_RANDN, 0}}},
    {"chunk", GDL_OP_CONCAT, f_chunk, 1, {{R2(7, 2), IN_RANDN, 0}}},
    {"stack", GDL_OP_CONCAT, f_stack1, 3, {{R2(2, 3), IN_RANDN, 0}, {R2(2, 3), IN_RANDN, 0}, {R2(2, 3), IN_RANDN, 0}}},
    {"index_select_dim0", GDL_OP_INDEX_SELECT, f_index_select0, 2, {{R2(5, 3), IN_RANDN, 0}, {R1(7), IN_TARGET, 5}}},
    {"index_select_dim1", GDL_OP_INDEX_SELECT, f_index_select1, 2, {{R3(2, 4, 3), IN_RANDN, 0}, {R1(5), IN_TARGET, 4}}},
    {"gather_dim1", GDL_OP_GATHER, f_gather1, 2, {{R2(3, 5), IN_RANDN, 0}, {R2(3, 6), IN_TARGET, 5}}},
    {"gather_dim0_smaller", GDL_OP_GATHER, f_gather0, 2, {{R2(4, 3), IN_RANDN, 0}, {R2(5, 2), IN_TARGET, 4}}},
    {"where_broadcast", GDL_OP_WHERE, f_where, 3, {{R2(3, 4), IN_RANDN, 0}, {R2(3, 1), IN_RANDN, 0}, {R1(4), IN_CONST, 0}}},
    {"where_self", GDL_OP_WHERE, f_where_self, 2, {{R2(3, 4), IN_RANDN, 0}, {R1(4), IN_CONST, 0}}},
    {"where_ge_ne", GDL_OP_WHERE, f_where_ge_ne, 3, {{R2(2, 5), IN_RANDN, 0}, {R1(5), IN_RANDN, 0}, {R2(2, 5), IN_CONST, 0}}},
    {"masked_fill", GDL_OP_MASKED_FILL, f_masked_fill, 2, {{R2(3, 4), IN_RANDN, 0}, {R1(4), IN_CONST, 0}}},
    {"masked_fill_eq", GDL_OP_MASKED_FILL, f_masked_fill_eq, 2, {{R3(2, 3, 3), IN_RANDN, 0}, {R2(3, 3), IN_CONST, 0}}},
    {"tril", GDL_OP_TRIL, f_tril1, 1, {{R3(2, 4, 5), IN_RANDN, 0}}},
    {"triu", GDL_OP_TRIU, f_triu_m1, 1, {{R2(4, 3), IN_RANDN, 0}}},
    {"cumsum_dim1", GDL_OP_CUMSUM, f_cumsum1, 1, {{R2(3, 5), IN_RANDN, 0}}},
    {"cumsum_dim0", GDL_OP_CUMSUM, f_cumsum0, 1, {{R3(4, 2, 3), IN_RANDN, 0}}},
    {"bmm", GDL_OP_MATMUL, f_bmm, 2, {{R3(2, 3, 4), IN_RANDN, 0}, {R3(2, 4, 5), IN_RANDN, 0}}},
    /* batch broadcasting: a repeats over b's batch (a GEMM summing into a's gradient), b over a's */
    {"matmul_broadcast_4d", GDL_OP_MATMUL, f_matmul, 2, {{R4(2, 1, 3, 4), IN_RANDN, 0}, {R3(3, 4, 2), IN_RANDN, 0}}},
    {"matmul_4d_4d", GDL_OP_MATMUL, f_matmul, 2, {{R4(2, 2, 3, 4), IN_RANDN, 0}, {R4(2, 2, 4, 2), IN_RANDN, 0}}},
    {"matmul_2d_4d", GDL_OP_MATMUL, f_matmul, 2, {{R2(3, 4), IN_RANDN, 0}, {R4(2, 2, 4, 3), IN_RANDN, 0}}},
    {"matmul_vec_mat", GDL_OP_RESHAPE, f_matmul, 2, {{R1(4), IN_RANDN, 0}, {R3(2, 4, 3), IN_RANDN, 0}}},
    {"matmul_mat_vec", GDL_OP_RESHAPE, f_matmul, 2, {{R3(2, 3, 4), IN_RANDN, 0}, {R1(4), IN_RANDN, 0}}},
    {"matmul_dot", GDL_OP_RESHAPE, f_matmul, 2, {{R1(5), IN_RANDN, 0}, {R1(5), IN_RANDN, 0}}},
    {"sdpa", GDL_OP_SDPA, f_sdpa, 3, {{R3(2, 3, 4), IN_RANDN, 0}, {R3(2, 5, 4), IN_RANDN, 0}, {R3(2, 5, 3), IN_RANDN, 0}}},
    {"sdpa_causal_4d", GDL_OP_SDPA, f_sdpa_causal, 3, {{R4(1, 2, 5, 3), IN_RANDN, 0}, {R4(1, 2, 4, 3), IN_RANDN, 0}, {R4(1, 2, 4, 2), IN_RANDN, 0}}},
    {"sdpa_bool_mask", GDL_OP_SDPA, f_sdpa_bool, 4,
     {{R3(2, 3, 4), IN_RANDN, 0}, {R3(2, 5, 4), IN_RANDN, 0}, {R3(2, 5, 3), IN_RANDN, 0}, {R2(3, 5), IN_CONST, 0}}},
    {"sdpa_additive_mask", GDL_OP_SDPA, f_sdpa_additive, 4,
     {{R3(2, 4, 3), IN_RANDN, 0}, {R3(2, 3, 3), IN_RANDN, 0}, {R3(2, 3, 5), IN_RANDN, 0}, {R3(2, 1, 3), IN_CONST, 0}}},
    {"sdpa_self_causal", GDL_OP_SDPA, f_sdpa_self, 1, {{R3(2, 4, 4), IN_RANDN, 0}}},
    {"sdpa_heads", GDL_OP_SDPA, f_sdpa_heads, 3, {{R3(2, 3, 6), IN_RANDN, 0}, {R3(2, 4, 6), IN_RANDN, 0}, {R3(2, 4, 4), IN_RANDN, 0}}},
    {"sdpa_heads_4d_additive_mask", GDL_OP_SDPA, f_sdpa_heads_additive, 4,
     {{R4(2, 2, 3, 4), IN_RANDN, 0}, {R4(2, 2, 5, 4), IN_RANDN, 0}, {R4(2, 2, 5, 6), IN_RANDN, 0}, {R2(3, 5), IN_CONST, 0}}},
    {"sdpa_qkv_causal", GDL_OP_SDPA, f_sdpa_qkv_causal, 1, {{R3(2, 4, 12), IN_RANDN, 0}}},
    {"sdpa_heads_dropout_unfused", GDL_OP_RESHAPE, f_sdpa_heads_dropout, 3,
     {{R3(2, 3, 6), IN_RANDN, 0}, {R3(2, 4, 6), IN_RANDN, 0}, {R3(2, 4, 4), IN_RANDN, 0}}},
    {"sdpa_dropout_unfused", GDL_OP_MATMUL, f_sdpa_dropout, 3, {{R3(2, 3, 4), IN_RANDN, 0}, {R3(2, 5, 4), IN_RANDN, 0}, {R3(2, 5, 3), IN_RANDN, 0}}},
    {"sdpa_broadcast_unfused", GDL_OP_MATMUL, f_sdpa, 3, {{R4(2, 2, 3, 4), IN_RANDN, 0}, {R3(2, 5, 4), IN_RANDN, 0}, {R4(1, 2, 5, 3), IN_RANDN, 0}}},
    {"sdpa_gqa_causal", GDL_OP_RESHAPE, f_sdpa_gqa_causal, 3, {{R4(2, 4, 3, 4), IN_RANDN, 0}, {R4(2, 2, 5, 4), IN_RANDN, 0}, {R4(2, 2, 5, 3), IN_RANDN, 0}}},
    {"sdpa_gqa_head_mask", GDL_OP_RESHAPE, f_sdpa_gqa_mask, 4,
     {{R4(1, 6, 3, 4), IN_RANDN, 0}, {R4(1, 2, 4, 4), IN_RANDN, 0}, {R4(1, 2, 4, 2), IN_RANDN, 0}, {R3(6, 3, 4), IN_CONST, 0}}},
    {"sdpa_group_fused", GDL_OP_SDPA, f_sdpa, 3, {{R5(1, 2, 3, 3, 4), IN_RANDN, 0}, {R5(1, 2, 1, 5, 4), IN_RANDN, 0}, {R5(1, 2, 1, 5, 3), IN_RANDN, 0}}},
    {"sdpa_gqa_dropout_unfused", GDL_OP_RESHAPE, f_sdpa_gqa_dropout, 3, {{R4(1, 4, 3, 4), IN_RANDN, 0}, {R4(1, 2, 5, 4), IN_RANDN, 0}, {R4(1, 2, 5, 3), IN_RANDN, 0}}},
    /* the recurrent gate ops: gx and gh [B, G*H], the previous state [B, H]; one tensor as both
       pre-activations (its gradient gets both adds); a constant state or gh (no gradient for it) */
    {"lstm_gates", GDL_OP_LSTM_GATES, f_lstm_gates, 3, {{R2(3, 20), IN_RANDN, 0}, {R2(3, 20), IN_RANDN, 0}, {R2(3, 5), IN_RANDN, 0}}},
    {"lstm_gates_self", GDL_OP_LSTM_GATES, f_lstm_gates_self, 2, {{R2(2, 12), IN_RANDN, 0}, {R2(2, 3), IN_RANDN, 0}}},
    {"lstm_gates_const_state", GDL_OP_LSTM_GATES, f_lstm_gates, 3, {{R2(2, 8), IN_RANDN, 0}, {R2(2, 8), IN_RANDN, 0}, {R2(2, 2), IN_CONST, 0}}},
    {"gru_gates", GDL_OP_GRU_GATES, f_gru_gates, 3, {{R2(3, 15), IN_RANDN, 0}, {R2(3, 15), IN_RANDN, 0}, {R2(3, 5), IN_RANDN, 0}}},
    {"gru_gates_self", GDL_OP_GRU_GATES, f_gru_gates_self, 2, {{R2(2, 9), IN_RANDN, 0}, {R2(2, 3), IN_RANDN, 0}}},
    {"gru_gates_const_gh", GDL_OP_GRU_GATES, f_gru_gates, 3, {{R2(4, 6), IN_RANDN, 0}, {R2(4, 6), IN_CONST, 0}, {R2(4, 2), IN_RANDN, 0}}},
    /* the recurrent modules (tests/rnn_cases.h): inputs x, h0 (and c0); lengths end some sequences early */
    {"rnn_module_lstm_proj_lengths", GDL_OP_CONCAT, f_lstm_proj_len, 3, {{R3(3, 4, 3), IN_RANDN, 0}, {R3(4, 3, 2), IN_RANDN, 0}, {R3(4, 3, 4), IN_RANDN, 0}}},
    {"rnn_module_gru_lengths", GDL_OP_CONCAT, f_gru_len, 2, {{R3(3, 2, 3), IN_RANDN, 0}, {R3(1, 2, 3), IN_RANDN, 0}}},
    {"rnn_module_rnn_tanh_lengths", GDL_OP_CONCAT, f_rnn_tanh_len, 2, {{R3(3, 3, 3), IN_RANDN, 0}, {R3(4, 3, 4), IN_RANDN, 0}}},
    {"rnn_module_rnn_relu_no_bias", GDL_OP_CONCAT, f_rnn_relu, 2, {{R3(2, 4, 3), IN_RANDN, 0}, {R3(1, 2, 4), IN_RANDN, 0}}},
    {"rnn_module_lstm_proj_unbatched", GDL_OP_CONCAT, f_lstm_proj_unbatched, 3, {{R2(4, 2), IN_RANDN, 0}, {R2(2, 1), IN_RANDN, 0}, {R2(2, 3), IN_RANDN, 0}}},
    {"mlp_chain", GDL_OP_CROSS_ENTROPY, f_mlp, 5,
     {{R2(3, 4), IN_RANDN, 0}, {R2(5, 4), IN_RANDN, 0}, {R1(5), IN_RANDN, 0}, {R2(3, 5), IN_RANDN, 0}, {R1(3), IN_TARGET, 3}}},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* Makes input d of a case on the CPU (seeded by the caller). */
static gdl_tensor *make_input(const gc_input *d) {
    gdl_tensor *t;
    gdl_real *v;
    int64_t i, n = 1;
    int k;
    for (k = 0; k < d->ndim; k++) n *= d->shape[k];
    if (d->kind == IN_TARGET || d->kind == IN_TARGET_IGNORE) {
        int32_t *tv = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
        if (!tv) return NULL;
        for (i = 0; i < n; i++) tv[i] = (int32_t)(gdl_rng_next_u64() % (uint64_t)d->range);
        if (d->kind == IN_TARGET_IGNORE && n > 1) tv[1] = -100;
        t = gdl_from_array(tv, d->ndim, d->shape, GDL_I32, gdl_cpu());
        free(tv);
        return t;
    }
    t = gdl_randn(d->ndim, d->shape, gdl_cpu());
    if (!t) return NULL;
    v = (gdl_real *)t->data;
    if (d->kind == IN_POS || d->kind == IN_CONST_POS)
        for (i = 0; i < n; i++) v[i] = (gdl_real)(0.5 + fabs((double)v[i]));
    if (d->kind == IN_TIES)
        for (i = 0; i < n; i++) v[i] = (gdl_real)((int64_t)(gdl_rng_next_u64() % 5) - 2);
    if (d->kind == IN_NAN)
        for (i = 3; i < n; i += 7) v[i] = (gdl_real)(i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY);
    if (d->kind == IN_PERM) { /* distinct multiples of 1/8 around 0, shuffled (Fisher-Yates) */
        for (i = 0; i < n; i++) v[i] = (gdl_real)((double)(i - n / 2) / 8.0);
        for (i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)(gdl_rng_next_u64() % (uint64_t)(i + 1));
            gdl_real tmp = v[i];
            v[i] = v[j];
            v[j] = tmp;
        }
    }
    if (d->kind != IN_CONST && d->kind != IN_CONST_POS) gdl_set_requires_grad(t, 1);
    return t;
}

/* The row's output plus c_k * sum(x_k) for every differentiable input x_k.
   The extra ops are made after the row's, so on the tape their backward runs
   first and the row's backward must add to what is there (an "=" in place of
   "+=" loses c_k * sum(w) from every element of x_k's gradient). */
static gdl_tensor *fanout_forward(const gc_case *c, gdl_tensor **in) {
    gdl_tensor *out = c->forward(in);
    int k;
    for (k = 0; k < c->nin && out; k++)
        if (in[k]->requires_grad) out = gdl_add(out, gdl_mul_scalar(gdl_sum(in[k]), 0.75 + 0.5 * k));
    return out;
}

#endif
