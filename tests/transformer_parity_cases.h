/* transformer_parity_cases.h — the Transformer cases checked against PyTorch, written once for both sides that
   run them: bench/transformer_oracle.c (fresh random modules and inputs, gpudl's results written for
   bench/pytorch/transformer_oracle.py and make seq-fixtures) and tests/torch_parity.h (the modules given
   tests/torch_fixtures/transformer.safetensors' parameters and inputs, gpudl's results compared with
   PyTorch's). With dropout 0:
     dec.  TransformerDecoder(TransformerDecoderLayer(8, 2, 16, relu, batch_first), 2, LayerNorm(8)); causal tgt
           (tgt_is_causal), tgt and memory key padding masks, an additive memory_mask
     tf.   Transformer(d_model 8, nhead 2, 2 + 2 layers, ff 16, "gelu_tanh", norm_first, sequence-first); causal tgt,
           src and memory key padding masks
     dl.   an unbatched TransformerDecoderLayer(8, 2, 12, activation_fn gdl_tanh, norm_first, bias 0) with tgt and
           memory causal (memory_is_causal: the top-left [T, S] triangle)
     mha.  MultiheadAttention(6, 2, kdim 4, vdim 5): need_weights averaged and per head, an attn_mask and a key padding
           mask; then unbatched with is_causal
     gqa.  scaled_dot_product_attention with enable_gqa: q [2, 4, 3, 4], k [2, 2, 5, 4], v [2, 2, 5, 3]; causal, and a
           bool mask
   The loss is L = sum(out_k * w_k) (one weight per output). Names: inputs "<case>.x<i>", weights "<case>.w<k>",
   outputs "<case>.out<k>", gradients "<case>.grad.x<i>" and "<case>.grad.<parameter>", masks by their option's
   name. The side including this defines the hooks of tf_io. */
#ifndef GPUDL_TRANSFORMER_PARITY_CASES_H
#define GPUDL_TRANSFORMER_PARITY_CASES_H

#include <string.h>

typedef struct tf_io tf_io;
struct tf_io {
    gdl_device dev;
    /* the tensor pre+name of shape [ndim] (an input, weight or float mask): fresh randn, or the fixture's */
    gdl_tensor *(*input)(tf_io *io, const char *pre, const char *name, int ndim, const int64_t *shape, int grad);
    /* a u8 mask made by the case (pre+name): recorded, or checked against the fixture's; returns it */
    gdl_tensor *(*mask)(tf_io *io, const char *pre, const char *name, gdl_tensor *mask);
    /* module m of case pre made: saved later, or given the fixture's parameters; 0 / -1 */
    int (*module)(tf_io *io, const char *pre, gdl_module *m);
    /* the loss sum(out[k] * w[k]) backpropagated, then gpudl's results written or compared; 0 / -1 */
    int (*finish)(tf_io *io, const char *pre, gdl_module *m, int nx, gdl_tensor **x, int no, gdl_tensor **out);
    void *user;
};

static gdl_tensor *tf_input(tf_io *io, const char *pre, int k, int ndim, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t s[4];
    char name[16];
    s[0] = a;
    s[1] = b;
    s[2] = c;
    s[3] = d;
    snprintf(name, sizeof name, "x%d", k);
    return io->input(io, pre, name, ndim, s, 1);
}

/* a u8 mask of shape [a, b] on io->dev with ones at the listed flat positions (-1 ends the list) */
static gdl_tensor *tf_bool_mask(tf_io *io, const char *pre, const char *name, int64_t a, int64_t b, const int *ones) {
    uint8_t v[64] = {0};
    int64_t s[2];
    s[0] = a;
    s[1] = b;
    for (; *ones >= 0; ones++) v[*ones] = 1;
    return io->mask(io, pre, name, gdl_from_array(v, 2, s, GDL_U8, io->dev));
}

static int tf_case_dec(tf_io *io) {
    static const int tpad[] = {9, -1}, mpad[] = {4, 5, 11, -1};
    gdl_transformer_decoder_layer_opts o = gdl_transformer_decoder_layer_defaults();
    gdl_transformer_masks mk;
    gdl_module *m;
    gdl_tensor *x[2], *out;
    int64_t ms[2] = {5, 6};
    gdl_manual_seed(11);
    o.dim_feedforward = 16;
    o.dropout = 0;
    o.batch_first = 1;
    if (!(m = gdl_transformer_decoder(gdl_transformer_decoder_layer(8, 2, &o), 2, gdl_nn_layernorm(8))) ||
        io->module(io, "dec.", m) < 0)
        return -1;
    x[0] = tf_input(io, "dec.", 0, 3, 2, 5, 8, 0);
    x[1] = tf_input(io, "dec.", 1, 3, 2, 6, 8, 0);
    memset(&mk, 0, sizeof mk);
    mk.tgt_is_causal = 1;
    mk.tgt_key_padding_mask = tf_bool_mask(io, "dec.", "tgt_key_padding_mask", 2, 5, tpad);
    mk.memory_key_padding_mask = tf_bool_mask(io, "dec.", "memory_key_padding_mask", 2, 6, mpad);
    mk.memory_mask = io->input(io, "dec.", "memory_mask", 2, ms, 0);
    if (!x[0] || !x[1] || !mk.tgt_key_padding_mask || !mk.memory_key_padding_mask || !mk.memory_mask ||
        !(out = gdl_transformer_decode(m, x[0], x[1], &mk)))
        return -1;
    return io->finish(io, "dec.", m, 2, x, 1, &out);
}

static int tf_case_tf(tf_io *io) {
    static const int spad[] = {5, 10, 11, -1};
    gdl_transformer_opts o = gdl_transformer_defaults();
    gdl_transformer_masks mk;
    gdl_module *m;
    gdl_tensor *x[2], *out;
    gdl_manual_seed(22);
    o.d_model = 8;
    o.nhead = 2;
    o.num_encoder_layers = o.num_decoder_layers = 2;
    o.dim_feedforward = 16;
    o.dropout = 0;
    o.activation_name = "gelu_tanh";
    o.norm_first = 1;
    if (!(m = gdl_transformer(&o)) || io->module(io, "tf.", m) < 0) return -1;
    x[0] = tf_input(io, "tf.", 0, 3, 6, 2, 8, 0); /* src [S, N, d] */
    x[1] = tf_input(io, "tf.", 1, 3, 5, 2, 8, 0); /* tgt [T, N, d] */
    memset(&mk, 0, sizeof mk);
    mk.tgt_is_causal = 1;
    mk.src_key_padding_mask = mk.memory_key_padding_mask = tf_bool_mask(io, "tf.", "src_key_padding_mask", 2, 6, spad);
    if (!x[0] || !x[1] || !mk.src_key_padding_mask || !(out = gdl_transformer_forward(m, x[0], x[1], &mk))) return -1;
    return io->finish(io, "tf.", m, 2, x, 1, &out);
}

static int tf_case_dl(tf_io *io) {
    gdl_transformer_decoder_layer_opts o = gdl_transformer_decoder_layer_defaults();
    gdl_transformer_masks mk;
    gdl_module *m;
    gdl_tensor *x[2], *out;
    gdl_manual_seed(33);
    o.dim_feedforward = 12;
    o.dropout = 0;
    o.activation_fn = gdl_tanh;
    o.norm_first = 1;
    o.bias = 0;
    if (!(m = gdl_transformer_decoder_layer(8, 2, &o)) || io->module(io, "dl.", m) < 0) return -1;
    x[0] = tf_input(io, "dl.", 0, 2, 4, 8, 0, 0);
    x[1] = tf_input(io, "dl.", 1, 2, 3, 8, 0, 0);
    memset(&mk, 0, sizeof mk);
    mk.tgt_is_causal = 1;
    mk.memory_is_causal = 1;
    if (!x[0] || !x[1] || !(out = gdl_transformer_decode(m, x[0], x[1], &mk))) return -1;
    return io->finish(io, "dl.", m, 2, x, 1, &out);
}

static int tf_case_mha(tf_io *io) {
    static const int am[] = {2, 7, -1}, kp[] = {3, -1};
    gdl_mha_opts o = gdl_mha_defaults();
    gdl_mha_args a;
    gdl_module *m;
    gdl_tensor *x[6], *out[5];
    int k;
    gdl_manual_seed(44);
    o.kdim = 4;
    o.vdim = 5;
    if (!(m = gdl_nn_multihead_attention_ex(6, 2, &o)) || io->module(io, "mha.", m) < 0) return -1;
    x[0] = tf_input(io, "mha.", 0, 3, 3, 2, 6, 0);
    x[1] = tf_input(io, "mha.", 1, 3, 4, 2, 4, 0);
    x[2] = tf_input(io, "mha.", 2, 3, 4, 2, 5, 0);
    a = gdl_mha_args_defaults();
    a.attn_mask = tf_bool_mask(io, "mha.", "attn_mask", 3, 4, am);
    a.key_padding_mask = tf_bool_mask(io, "mha.", "key_padding_mask", 2, 4, kp);
    a.need_weights = 1;
    a.average_attn_weights = 1;
    if (!x[0] || !x[1] || !x[2] || !a.attn_mask || !a.key_padding_mask ||
        !(out[0] = gdl_mha_forward_ex(m, x[0], x[1], x[2], &a, &out[1])))
        return -1;
    a.average_attn_weights = 0;
    if (!gdl_mha_forward_ex(m, x[0], x[1], x[2], &a, &out[2])) return -1;
    x[3] = tf_input(io, "mha.", 3, 2, 3, 6, 0, 0); /* unbatched, causal, weights per head */
    x[4] = tf_input(io, "mha.", 4, 2, 4, 4, 0, 0);
    x[5] = tf_input(io, "mha.", 5, 2, 4, 5, 0, 0);
    for (k = 3; k < 6; k++)
        if (!x[k]) return -1;
    a = gdl_mha_args_defaults();
    a.is_causal = 1;
    a.need_weights = 1;
    a.average_attn_weights = 0;
    if (!(out[3] = gdl_mha_forward_ex(m, x[3], x[4], x[5], &a, &out[4]))) return -1;
    return io->finish(io, "mha.", m, 6, x, 5, out);
}

static int tf_case_gqa(tf_io *io) {
    static const int keep[] = {0, 1, 5, 6, 7, 10, 11, 12, 13, -1};
    gdl_tensor *x[3], *out[2], *mask;
    gdl_manual_seed(55);
    x[0] = tf_input(io, "gqa.", 0, 4, 2, 4, 3, 4);
    x[1] = tf_input(io, "gqa.", 1, 4, 2, 2, 5, 4);
    x[2] = tf_input(io, "gqa.", 2, 4, 2, 2, 5, 3);
    mask = tf_bool_mask(io, "gqa.", "mask", 3, 5, keep); /* non-zero: takes part (scaled_dot_product_attention's) */
    if (!x[0] || !x[1] || !x[2] || !mask ||
        !(out[0] = gdl_scaled_dot_product_attention_ex(x[0], x[1], x[2], NULL, 0, 1, GDL_SCALE_DEFAULT, 1)) ||
        !(out[1] = gdl_scaled_dot_product_attention_ex(x[0], x[1], x[2], mask, 0, 0, 0.3, 1)))
        return -1;
    return io->finish(io, "gqa.", NULL, 3, x, 2, out);
}

/* the cases in order, each with its prefix */
typedef struct tf_case {
    const char *prefix;
    int (*run)(tf_io *io);
} tf_case;
static const tf_case tf_cases[] = {
    {"dec.", tf_case_dec}, {"tf.", tf_case_tf}, {"dl.", tf_case_dl}, {"mha.", tf_case_mha}, {"gqa.", tf_case_gqa},
};
#define TF_NCASES ((int)(sizeof tf_cases / sizeof tf_cases[0]))

#endif
