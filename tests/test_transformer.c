/* test_transformer.c — nn.TransformerDecoderLayer, nn.TransformerDecoder, nn.Transformer, MultiheadAttention's
   need_weights / kdim / vdim / is_causal / unbatched input, grouped-query attention and the activations by name, on
   the CPU: PyTorch's names, counts and defaults (the numbers below are PyTorch's, printed by torch 2.15), the
   identities between the calls (a flag and its mask, unbatched and a batch of one, the whole forward and
   encode + decode, grouped-query and its repeat_interleave composition, values and gradients), and the errors.
   The values themselves against PyTorch in float64: bench/transformer_oracle.c with
   bench/pytorch/transformer_oracle.py (make transformer-oracle). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

#include <math.h>
#include <string.h>

#define CPU gdl_cpu()

static gdl_tensor *randn3(int64_t a, int64_t b, int64_t c) {
    int64_t s[3];
    s[0] = a;
    s[1] = b;
    s[2] = c;
    return gdl_randn(3, s, CPU);
}

static double max_diff(const gdl_tensor *a, const gdl_tensor *b) {
    double m = 0;
    int64_t i;
    if (!a || !b || a->numel != b->numel) return INFINITY;
    for (i = 0; i < a->numel; i++) {
        double d = fabs((double)((const float *)a->data)[i] - (double)((const float *)b->data)[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

/* a small decoder layer, dropout 0 */
static gdl_module *small_layer(int batch_first, int norm_first) {
    gdl_transformer_decoder_layer_opts o = gdl_transformer_decoder_layer_defaults();
    o.dim_feedforward = 12;
    o.dropout = 0;
    o.batch_first = batch_first;
    o.norm_first = norm_first;
    return gdl_transformer_decoder_layer(8, 2, &o);
}

TEST decoder_layer_names_and_defaults(void) {
    static const char *const names[18] = {"self_attn.in_proj_weight", "self_attn.in_proj_bias",
        "self_attn.out_proj.weight", "self_attn.out_proj.bias", "multihead_attn.in_proj_weight",
        "multihead_attn.in_proj_bias", "multihead_attn.out_proj.weight", "multihead_attn.out_proj.bias",
        "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight", "norm1.bias",
        "norm2.weight", "norm2.bias", "norm3.weight", "norm3.bias"};
    gdl_transformer_decoder_layer_opts d = gdl_transformer_decoder_layer_defaults();
    const char *got[32];
    gdl_module *m;
    int i;
    ASSERT_EQ(2048, d.dim_feedforward);
    ASSERT_IN_RANGE(0.1, d.dropout, 0);
    ASSERT_EQ(GDL_ACT_RELU, d.activation);
    ASSERT_IN_RANGE(1e-5, d.layer_norm_eps, 0);
    ASSERT_EQ(0, d.batch_first);
    ASSERT_EQ(0, d.norm_first);
    ASSERT_EQ(1, d.bias);
    ASSERT(d.activation_name == NULL && d.activation_fn == NULL);
    ASSERT_NOT_NULL(m = gdl_transformer_decoder_layer(8, 2, NULL));
    ASSERT_STR_EQ("TransformerDecoderLayer", gdl_module_kind(m));
    ASSERT_EQ(18, gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, got, NULL, 32));
    for (i = 0; i < 18; i++) ASSERT_STR_EQ(names[i], got[i]);
    ASSERT_EQ(2048 * 8, gdl_module_tensor(m, "linear1.weight")->numel);
    gdl_module_free(m);
    d.bias = 0; /* no Linear, attention or LayerNorm bias: 9 tensors */
    ASSERT_NOT_NULL(m = gdl_transformer_decoder_layer(8, 2, &d));
    ASSERT_EQ(9, gdl_module_named_tensors(m, GDL_PARAMS, got, NULL, 32));
    ASSERT_STR_EQ("norm3.weight", got[8]);
    gdl_module_free(m);
    PASS();
}

/* nn.Transformer(): PyTorch's 44140544 parameters in 184 state-dict entries, encoder.norm and decoder.norm */
TEST transformer_defaults(void) {
    gdl_transformer_opts d = gdl_transformer_defaults();
    const char *names[200];
    gdl_module *m;
    ASSERT_EQ(512, d.d_model);
    ASSERT_EQ(8, d.nhead);
    ASSERT_EQ(6, d.num_encoder_layers);
    ASSERT_EQ(6, d.num_decoder_layers);
    ASSERT_EQ(2048, d.dim_feedforward);
    ASSERT_IN_RANGE(0.1, d.dropout, 0);
    gdl_manual_seed(1);
    ASSERT_NOT_NULL(m = gdl_transformer(NULL));
    ASSERT_STR_EQ("Transformer", gdl_module_kind(m));
    ASSERT_EQ(44140544, gdl_module_num_params(m));
    ASSERT_EQ(184, gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, names, NULL, 200));
    ASSERT_STR_EQ("encoder.layers.0.self_attn.in_proj_weight", names[0]);
    ASSERT_STR_EQ("encoder.layers.5.norm2.bias", names[71]);
    ASSERT_STR_EQ("encoder.norm.weight", names[72]);
    ASSERT_STR_EQ("encoder.norm.bias", names[73]);
    ASSERT_STR_EQ("decoder.layers.0.multihead_attn.in_proj_weight", names[78]);
    ASSERT_STR_EQ("decoder.layers.5.norm3.bias", names[181]);
    ASSERT_STR_EQ("decoder.norm.weight", names[182]);
    ASSERT_STR_EQ("decoder.norm.bias", names[183]);
    { /* _reset_parameters: linear1.weight xavier-uniform, bound sqrt(6 / (512 + 2048)), not Linear's 1/sqrt(512) */
        gdl_tensor *w = gdl_module_tensor(m, "decoder.layers.3.linear1.weight");
        double a = sqrt(6.0 / 2560), mx = 0;
        int64_t i;
        ASSERT_NOT_NULL(w);
        for (i = 0; i < w->numel; i++)
            if (fabs(((float *)w->data)[i]) > mx) mx = fabs(((float *)w->data)[i]);
        ASSERT(mx <= a && mx > 0.95 * a);
    }
    gdl_module_free(m);
    PASS();
}

/* the stack: copies start equal, layers.<i>, norm; gdl_forward says to call gdl_transformer_decode */
TEST decoder_stack(void) {
    gdl_module *m, *l;
    gdl_tensor *t[64], *tgt, *mem, *a, *b;
    const char *names[64];
    gdl_manual_seed(2);
    ASSERT_NOT_NULL(m = gdl_transformer_decoder(small_layer(1, 0), 3, gdl_nn_layernorm(8)));
    ASSERT_STR_EQ("TransformerDecoder", gdl_module_kind(m));
    ASSERT_EQ(56, gdl_module_named_tensors(m, GDL_PARAMS, names, t, 64));
    ASSERT_STR_EQ("layers.2.multihead_attn.out_proj.bias", names[43]);
    ASSERT_STR_EQ("norm.bias", names[55]);
    ASSERT_EQ(0, memcmp(t[8]->data, t[26]->data, sizeof(float) * (size_t)t[8]->numel));
    ASSERT_NOT_NULL(tgt = randn3(2, 4, 8));
    ASSERT_NOT_NULL(mem = randn3(2, 5, 8));
    ASSERT_NULL(gdl_forward(m, tgt));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_transformer_decode");
    /* one layer as a stack of one without norm: the same as the layer */
    ASSERT_NOT_NULL(l = small_layer(1, 0));
    ASSERT_NOT_NULL(a = gdl_transformer_decode(l, tgt, mem, NULL));
    ASSERT_NOT_NULL(m = gdl_transformer_decoder(l, 1, NULL));
    ASSERT_NOT_NULL(b = gdl_transformer_decode(m, tgt, mem, NULL));
    ASSERT_IN_RANGE(0, max_diff(a, b), 0);
    gdl_module_free(m);
    gdl_free(tgt);
    gdl_free(mem);
    gdl_arena_reset();
    PASS();
}

/* tgt_is_causal and memory_is_causal equal their explicit masks; a u8 mask equals its additive form */
TEST causal_flags_and_masks(void) {
    gdl_module *m;
    gdl_tensor *tgt, *mem, *a, *b, *c, *sq;
    gdl_transformer_masks mk;
    int64_t i, j, s[2] = {4, 5};
    gdl_tensor *mm = gdl_zeros(2, s, GDL_U8, CPU);
    gdl_manual_seed(3);
    ASSERT_NOT_NULL(m = gdl_transformer_decoder(small_layer(0, 1), 2, gdl_nn_layernorm(8)));
    ASSERT_NOT_NULL(tgt = randn3(4, 2, 8));
    ASSERT_NOT_NULL(mem = randn3(5, 2, 8));
    ASSERT_NOT_NULL(sq = gdl_generate_square_subsequent_mask(4));
    for (i = 0; i < 4; i++)
        for (j = 0; j < 4; j++) ASSERT_EQ(j > i, isinf(((float *)sq->data)[i * 4 + j]) != 0);
    for (i = 0; i < 4; i++)
        for (j = i + 1; j < 5; j++) ((uint8_t *)mm->data)[i * 5 + j] = 1;
    memset(&mk, 0, sizeof mk);
    mk.tgt_is_causal = mk.memory_is_causal = 1;
    ASSERT_NOT_NULL(a = gdl_transformer_decode(m, tgt, mem, &mk));
    mk.tgt_mask = sq;
    mk.memory_mask = mm;
    ASSERT_NOT_NULL(b = gdl_transformer_decode(m, tgt, mem, &mk));
    mk.tgt_is_causal = mk.memory_is_causal = 0; /* with the masks given, the flags are hints */
    ASSERT_NOT_NULL(c = gdl_transformer_decode(m, tgt, mem, &mk));
    ASSERT_LT(max_diff(a, b), 1e-6);
    ASSERT_IN_RANGE(0, max_diff(b, c), 0);
    memset(&mk, 0, sizeof mk); /* no mask differs */
    ASSERT_NOT_NULL(c = gdl_transformer_decode(m, tgt, mem, &mk));
    ASSERT_GT(max_diff(a, c), 1e-3);
    ASSERT_NULL(gdl_generate_square_subsequent_mask(0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_generate_square_subsequent_mask: T 0");
    gdl_module_free(m);
    gdl_free(tgt);
    gdl_free(mem);
    gdl_free(sq);
    gdl_free(mm);
    gdl_arena_reset();
    PASS();
}

/* nn.Transformer.forward = decode(tgt, encode(src)), and unbatched input equals a batch of one */
TEST transformer_forward_encode_decode(void) {
    gdl_transformer_opts o = gdl_transformer_defaults();
    gdl_transformer_masks mk;
    gdl_module *m;
    gdl_tensor *src, *tgt, *a, *mem, *b, *s1, *t1, *u;
    int64_t s2[2] = {6, 8}, t2[2] = {4, 8}, s3[3] = {1, 6, 8}, t3[3] = {1, 4, 8};
    gdl_manual_seed(4);
    o.d_model = 8;
    o.nhead = 2;
    o.num_encoder_layers = 2;
    o.num_decoder_layers = 1;
    o.dim_feedforward = 16;
    o.dropout = 0;
    o.batch_first = 1;
    ASSERT_NOT_NULL(m = gdl_transformer(&o));
    ASSERT_NOT_NULL(src = randn3(2, 6, 8));
    ASSERT_NOT_NULL(tgt = randn3(2, 4, 8));
    memset(&mk, 0, sizeof mk);
    mk.tgt_is_causal = 1;
    ASSERT_NOT_NULL(a = gdl_transformer_forward(m, src, tgt, &mk));
    ASSERT_EQ(3, a->ndim);
    ASSERT(a->shape[0] == 2 && a->shape[1] == 4 && a->shape[2] == 8);
    ASSERT_NOT_NULL(mem = gdl_transformer_encode(m, src, &mk));
    ASSERT_NOT_NULL(b = gdl_transformer_decode(m, tgt, mem, &mk));
    ASSERT_IN_RANGE(0, max_diff(a, b), 0);
    /* unbatched: [S, d] and [T, d] -> [T, d], the batch of one's values */
    ASSERT_NOT_NULL(s1 = gdl_narrow(src, 0, 0, 1));
    ASSERT_NOT_NULL(t1 = gdl_narrow(tgt, 0, 0, 1));
    ASSERT_NOT_NULL(a = gdl_transformer_forward(m, gdl_reshape(s1, 2, s2), gdl_reshape(t1, 2, t2), &mk));
    ASSERT_EQ(2, a->ndim);
    ASSERT_NOT_NULL(b = gdl_transformer_forward(m, gdl_reshape(s1, 3, s3), gdl_reshape(t1, 3, t3), &mk));
    ASSERT_LT(max_diff(a, b), 1e-6);
    ASSERT_NOT_NULL(u = gdl_narrow(b, 0, 0, 1));
    /* errors name the call, the shapes */
    ASSERT_NULL(gdl_transformer_forward(m, src, gdl_reshape(t1, 3, t3), &mk));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_transformer_forward: src [2,6,8] and tgt [1,4,8] must agree in batch");
    ASSERT_NULL(gdl_transformer_decode(m, tgt, gdl_reshape(s1, 2, s2), &mk));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_transformer_decode: memory must be [N, T, 8]");
    ASSERT_NULL(gdl_transformer_encode(m, randn3(2, 6, 5), NULL));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_transformer_encode: src must be [N, T, 8] (d_model 8), got [2,6,5]");
    ASSERT_NULL(gdl_transformer_forward(gdl_transformer_decoder_layer(8, 2, NULL), src, tgt, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_transformer_forward: expected a module made by gdl_transformer");
    o.nhead = 3;
    ASSERT_NULL(gdl_transformer(&o));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_transformer: d_model 8 must be a positive multiple of nhead 3");
    o.nhead = 2;
    o.activation_name = "swish";
    ASSERT_NULL(gdl_transformer(&o));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_transformer: activation \"swish\"");
    gdl_module_free(m);
    gdl_free(src);
    gdl_free(tgt);
    gdl_arena_reset();
    PASS();
}

static gdl_tensor *my_relu(gdl_tensor *x) { return gdl_relu(x); }

/* the activation by enum, by name and as a callable: the same relu three ways; gelu_tanh is not gelu */
TEST activations(void) {
    gdl_transformer_encoder_layer_opts o = gdl_transformer_encoder_layer_defaults();
    gdl_tensor *x, *y[5];
    gdl_module *m;
    int k;
    gdl_manual_seed(5);
    ASSERT_NOT_NULL(x = randn3(3, 2, 8));
    o.dim_feedforward = 16;
    o.dropout = 0;
    for (k = 0; k < 5; k++) {
        gdl_transformer_encoder_layer_opts c = o;
        if (k == 1) c.activation_name = "relu";
        if (k == 2) c.activation_fn = my_relu;
        if (k == 3) c.activation_name = "gelu";
        if (k == 4) c.activation = GDL_ACT_GELU_TANH;
        gdl_manual_seed(6);
        ASSERT_NOT_NULL(m = gdl_nn_transformer_encoder_layer_ex(8, 2, &c));
        ASSERT_NOT_NULL(y[k] = gdl_forward(m, x));
        gdl_module_free(m);
    }
    ASSERT_IN_RANGE(0, max_diff(y[0], y[1]), 0);
    ASSERT_IN_RANGE(0, max_diff(y[0], y[2]), 0);
    ASSERT_GT(max_diff(y[0], y[3]), 1e-3);
    ASSERT_GT(max_diff(y[3], y[4]), 1e-6);
    ASSERT_LT(max_diff(y[3], y[4]), 1e-2);
    o.activation_name = "tanh";
    ASSERT_NULL(gdl_nn_transformer_encoder_layer_ex(8, 2, &o));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_nn_transformer_encoder_layer_ex: activation \"tanh\" must be");
    gdl_free(x);
    gdl_arena_reset();
    PASS();
}

/* need_weights: rows sum to one (zero where every key is masked), the average is the mean of the heads, the output
   is the fused path's; kdim / vdim: PyTorch's separate weights */
TEST mha_weights_and_kdim(void) {
    gdl_mha_opts o = gdl_mha_defaults();
    gdl_mha_args a;
    gdl_module *m;
    gdl_tensor *q, *k, *v, *o1, *o2, *wa, *wh, *t[8];
    const char *names[8];
    int64_t n, l, s, h, ms[2] = {2, 4};
    gdl_tensor *kpm = gdl_zeros(2, ms, GDL_U8, CPU);
    gdl_manual_seed(7);
    o.kdim = 4;
    o.vdim = 5;
    o.batch_first = 1;
    ASSERT_NOT_NULL(m = gdl_nn_multihead_attention_ex(6, 2, &o));
    ASSERT_EQ(6, gdl_module_named_tensors(m, GDL_PARAMS, names, t, 8));
    ASSERT_STR_EQ("q_proj_weight", names[0]);
    ASSERT_STR_EQ("k_proj_weight", names[1]);
    ASSERT_STR_EQ("v_proj_weight", names[2]);
    ASSERT_STR_EQ("in_proj_bias", names[3]);
    ASSERT(t[1]->shape[0] == 6 && t[1]->shape[1] == 4 && t[2]->shape[1] == 5 && t[3]->numel == 18);
    ASSERT_NOT_NULL(q = randn3(2, 3, 6));
    ASSERT_NOT_NULL(k = randn3(2, 4, 4));
    ASSERT_NOT_NULL(v = randn3(2, 4, 5));
    memset(((uint8_t *)kpm->data) + 4, 1, 4); /* batch 1: every key masked */
    memset(&a, 0, sizeof a);
    a.key_padding_mask = kpm;
    ASSERT_NOT_NULL(o1 = gdl_mha_forward_ex(m, q, k, v, &a, NULL));
    a.need_weights = 1;
    a.average_attn_weights = 1;
    ASSERT_NOT_NULL(o2 = gdl_mha_forward_ex(m, q, k, v, &a, &wa));
    ASSERT_LT(max_diff(o1, o2), 1e-6);
    a.average_attn_weights = 0;
    ASSERT_NOT_NULL(gdl_mha_forward_ex(m, q, k, v, &a, &wh));
    ASSERT(wa->ndim == 3 && wa->shape[0] == 2 && wa->shape[1] == 3 && wa->shape[2] == 4);
    ASSERT(wh->ndim == 4 && wh->shape[1] == 2);
    for (n = 0; n < 2; n++)
        for (l = 0; l < 3; l++) {
            double sum = 0, hm;
            for (s = 0; s < 4; s++) {
                hm = 0;
                for (h = 0; h < 2; h++) hm += ((float *)wh->data)[((n * 2 + h) * 3 + l) * 4 + s] / 2;
                ASSERT_IN_RANGE(hm, ((float *)wa->data)[(n * 3 + l) * 4 + s], 1e-6);
                sum += ((float *)wa->data)[(n * 3 + l) * 4 + s];
            }
            ASSERT_IN_RANGE(n ? 0 : 1, sum, 1e-5);
        }
    ASSERT_NULL(gdl_mha_forward_ex(m, q, k, v, &a, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_mha_forward_ex");
    ASSERT_NULL(gdl_mha_forward_ex(m, q, v, v, NULL, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_mha_forward_ex: query, key and value must be [N, L, 6], [N, S, 4] and [N, S, 5]");
    gdl_module_free(m);
    gdl_free(q);
    gdl_free(k);
    gdl_free(v);
    gdl_free(kpm);
    gdl_arena_reset();
    PASS();
}

/* enable_gqa: the values and gradients of PyTorch's definition, k and v repeat_interleave'd over the groups (here:
   concatenated copies of each head); Hq not a multiple of Hkv is an error */
TEST gqa_matches_repeat_interleave(void) {
    int64_t qs[4] = {2, 6, 5, 4}, ks[4] = {2, 3, 7, 4}, vs[4] = {2, 3, 7, 3};
    gdl_tensor *q, *k, *v, *q2, *k2, *v2, *o1, *o2, *kr, *vr, *ks2[6], *vs2[6], *w;
    int h, causal, trial;
    for (trial = 0; trial < 2; trial++) {
        causal = trial;
        gdl_manual_seed(8 + trial);
        ASSERT_NOT_NULL(q = gdl_randn(4, qs, CPU));
        ASSERT_NOT_NULL(k = gdl_randn(4, ks, CPU));
        ASSERT_NOT_NULL(v = gdl_randn(4, vs, CPU));
        ASSERT_NOT_NULL(q2 = gdl_clone(q));
        ASSERT_NOT_NULL(k2 = gdl_clone(k));
        ASSERT_NOT_NULL(v2 = gdl_clone(v));
        gdl_set_requires_grad(q, 1);
        gdl_set_requires_grad(k, 1);
        gdl_set_requires_grad(v, 1);
        gdl_set_requires_grad(q2, 1);
        gdl_set_requires_grad(k2, 1);
        gdl_set_requires_grad(v2, 1);
        ASSERT_NOT_NULL(o1 = gdl_scaled_dot_product_attention_ex(q, k, v, NULL, 0, causal, GDL_SCALE_DEFAULT, 1));
        for (h = 0; h < 6; h++) { /* query head h sees key/value head h / 2 */
            ks2[h] = gdl_narrow(k2, 1, h / 2, 1);
            vs2[h] = gdl_narrow(v2, 1, h / 2, 1);
        }
        ASSERT_NOT_NULL(kr = gdl_concat(6, ks2, 1));
        ASSERT_NOT_NULL(vr = gdl_concat(6, vs2, 1));
        ASSERT_NOT_NULL(o2 = gdl_scaled_dot_product_attention(q2, kr, vr, NULL, 0, causal, GDL_SCALE_DEFAULT));
        ASSERT_LT(max_diff(o1, o2), 1e-6);
        ASSERT_NOT_NULL(w = gdl_randn(4, o1->shape, CPU));
        ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(o1, w))));
        ASSERT_EQ(0, gdl_backward(gdl_sum(gdl_mul(o2, w))));
        ASSERT_LT(max_diff(q->grad, q2->grad), 1e-5);
        ASSERT_LT(max_diff(k->grad, k2->grad), 1e-5);
        ASSERT_LT(max_diff(v->grad, v2->grad), 1e-5);
        gdl_free(q);
        gdl_free(k);
        gdl_free(v);
        gdl_free(q2);
        gdl_free(k2);
        gdl_free(v2);
        gdl_free(w);
        gdl_arena_reset();
    }
    qs[1] = 5;
    ASSERT_NOT_NULL(q = gdl_randn(4, qs, CPU));
    ASSERT_NOT_NULL(k = gdl_randn(4, ks, CPU));
    ASSERT_NULL(gdl_scaled_dot_product_attention_ex(q, k, k, NULL, 0, 0, GDL_SCALE_DEFAULT, 1));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_scaled_dot_product_attention_ex: enable_gqa expects");
    ASSERT_CONTAINS(gdl_last_error(), "[2,5,5,4]");
    gdl_free(q);
    gdl_free(k);
    gdl_arena_reset();
    PASS();
}

SUITE(decoder) {
    RUN_TEST(decoder_layer_names_and_defaults);
    RUN_TEST(transformer_defaults);
    RUN_TEST(decoder_stack);
    RUN_TEST(causal_flags_and_masks);
    RUN_TEST(transformer_forward_encode_decode);
    RUN_TEST(activations);
    RUN_TEST(mha_weights_and_kdim);
    RUN_TEST(gqa_matches_repeat_interleave);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(decoder);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
