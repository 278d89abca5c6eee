/* transformer_oracle.c — gpudl's side of the Transformer check against PyTorch (bench/pytorch/transformer_oracle.py
   is PyTorch's). From fixed seeds it builds, with dropout 0:
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
   runs each on fixed inputs, backpropagates L = sum(out * w) (one weight per output), and writes
   DIR/transformer_oracle.safetensors (inputs "<case>.x<i>", weights "<case>.w<i>", outputs "<case>.out<i>",
   gradients "<case>.grad.x<i>" and "<case>.grad.<parameter>") and each module's gdl_save_model file
   DIR/transformer_<case>.safetensors, which the Python side loads with load_state_dict(strict=True).

   make build/transformer_oracle && build/transformer_oracle build && python3 bench/pytorch/transformer_oracle.py build */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"

#include <stdio.h>
#include <string.h>

#define CPU gdl_cpu()
#define MAXT 512

static gdl_st_tensor items[MAXT];
static char item_names[MAXT][160];
static int nitems;

/* t as one more f32 entry of the file, named prefix + name */
static void add(const char *prefix, const char *name, const gdl_tensor *t) {
    float *p;
    int64_t i;
    if (nitems == MAXT) return;
    p = (float *)malloc(sizeof(float) * (size_t)(t->numel + 1));
    for (i = 0; i < t->numel; i++)
        p[i] = t->dtype == GDL_U8 ? (float)((const uint8_t *)t->data)[i] : (float)((const gdl_real *)t->data)[i];
    snprintf(item_names[nitems], sizeof item_names[nitems], "%s%s", prefix, name);
    items[nitems].name = item_names[nitems];
    items[nitems].dtype = "F32";
    items[nitems].ndim = t->ndim;
    items[nitems].shape = t->shape;
    items[nitems].data = p;
    nitems++;
}

static gdl_tensor *input(int ndim, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t s[4];
    gdl_tensor *t;
    s[0] = a;
    s[1] = b;
    s[2] = c;
    s[3] = d;
    if ((t = gdl_randn(ndim, s, CPU))) gdl_set_requires_grad(t, 1);
    return t;
}

/* a u8 mask of shape [a, b] with ones at the listed flat positions (-1 ends the list) */
static gdl_tensor *bool_mask(int64_t a, int64_t b, const int *ones) {
    int64_t s[2];
    gdl_tensor *t;
    s[0] = a;
    s[1] = b;
    if (!(t = gdl_zeros(2, s, GDL_U8, CPU))) return NULL;
    for (; *ones >= 0; ones++) ((uint8_t *)t->data)[*ones] = 1;
    return t;
}

/* the loss sum(out[i] * w[i]) over n outputs, backpropagated; writes inputs, weights, outputs, the inputs' and m's
   gradients under prefix, and m's file */
static int finish(const char *dir, const char *prefix, gdl_module *m, int nx, gdl_tensor **x, int no, gdl_tensor **out) {
    gdl_tensor *l = NULL, *ts[256];
    const char *names[256];
    char nm[160];
    int k, n;
    for (k = 0; k < no; k++) {
        gdl_tensor *w = gdl_randn(out[k]->ndim, out[k]->shape, CPU);
        gdl_tensor *t = gdl_sum(gdl_mul(out[k], w));
        if (!w || !t || !(l = l ? gdl_add(l, t) : t)) return -1;
        snprintf(nm, sizeof nm, "w%d", k);
        add(prefix, nm, w);
        snprintf(nm, sizeof nm, "out%d", k);
        add(prefix, nm, out[k]);
    }
    if (gdl_backward(l) < 0) return -1;
    for (k = 0; k < nx; k++) {
        snprintf(nm, sizeof nm, "x%d", k);
        add(prefix, nm, x[k]);
        snprintf(nm, sizeof nm, "grad.x%d", k);
        if (x[k]->grad) add(prefix, nm, x[k]->grad);
    }
    if (!m) return 0;
    n = gdl_module_named_tensors(m, GDL_PARAMS, names, ts, 256);
    for (k = 0; k < n; k++) {
        snprintf(nm, sizeof nm, "grad.%s", names[k]);
        add(prefix, nm, ts[k]->grad);
    }
    snprintf(nm, sizeof nm, "%s/transformer_%.*s.safetensors", dir, (int)strlen(prefix) - 1, prefix);
    return gdl_save_model(m, nm);
}

static int case_dec(const char *dir) {
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
    if (!(m = gdl_transformer_decoder(gdl_transformer_decoder_layer(8, 2, &o), 2, gdl_nn_layernorm(8)))) return -1;
    x[0] = input(3, 2, 5, 8, 0);
    x[1] = input(3, 2, 6, 8, 0);
    memset(&mk, 0, sizeof mk);
    mk.tgt_is_causal = 1;
    mk.tgt_key_padding_mask = bool_mask(2, 5, tpad);
    mk.memory_key_padding_mask = bool_mask(2, 6, mpad);
    mk.memory_mask = gdl_mul_scalar(gdl_randn(2, ms, CPU), 0.5);
    if (!(out = gdl_transformer_decode(m, x[0], x[1], &mk))) return -1;
    add("dec.", "tgt_key_padding_mask", mk.tgt_key_padding_mask);
    add("dec.", "memory_key_padding_mask", mk.memory_key_padding_mask);
    add("dec.", "memory_mask", mk.memory_mask);
    return finish(dir, "dec.", m, 2, x, 1, &out);
}

static int case_tf(const char *dir) {
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
    if (!(m = gdl_transformer(&o))) return -1;
    x[0] = input(3, 6, 2, 8, 0); /* src [S, N, d] */
    x[1] = input(3, 5, 2, 8, 0); /* tgt [T, N, d] */
    memset(&mk, 0, sizeof mk);
    mk.tgt_is_causal = 1;
    mk.src_key_padding_mask = mk.memory_key_padding_mask = bool_mask(2, 6, spad);
    if (!(out = gdl_transformer_forward(m, x[0], x[1], &mk))) return -1;
    add("tf.", "src_key_padding_mask", mk.src_key_padding_mask);
    return finish(dir, "tf.", m, 2, x, 1, &out);
}

static int case_dl(const char *dir) {
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
    if (!(m = gdl_transformer_decoder_layer(8, 2, &o))) return -1;
    x[0] = input(2, 4, 8, 0, 0);
    x[1] = input(2, 3, 8, 0, 0);
    memset(&mk, 0, sizeof mk);
    mk.tgt_is_causal = 1;
    mk.memory_is_causal = 1;
    if (!(out = gdl_transformer_decode(m, x[0], x[1], &mk))) return -1;
    return finish(dir, "dl.", m, 2, x, 1, &out);
}

static int case_mha(const char *dir) {
    static const int am[] = {2, 7, -1}, kp[] = {3, -1};
    gdl_mha_opts o = gdl_mha_defaults();
    gdl_mha_args a;
    gdl_module *m;
    gdl_tensor *x[6], *out[5];
    gdl_manual_seed(44);
    o.kdim = 4;
    o.vdim = 5;
    if (!(m = gdl_nn_multihead_attention_ex(6, 2, &o))) return -1;
    x[0] = input(3, 3, 2, 6, 0);
    x[1] = input(3, 4, 2, 4, 0);
    x[2] = input(3, 4, 2, 5, 0);
    memset(&a, 0, sizeof a);
    a.attn_mask = bool_mask(3, 4, am);
    a.key_padding_mask = bool_mask(2, 4, kp);
    a.need_weights = 1;
    a.average_attn_weights = 1;
    if (!(out[0] = gdl_mha_forward_ex(m, x[0], x[1], x[2], &a, &out[1]))) return -1;
    a.average_attn_weights = 0;
    if (!gdl_mha_forward_ex(m, x[0], x[1], x[2], &a, &out[2])) return -1;
    add("mha.", "attn_mask", a.attn_mask);
    add("mha.", "key_padding_mask", a.key_padding_mask);
    x[3] = input(2, 3, 6, 0, 0); /* unbatched, causal, weights per head */
    x[4] = input(2, 4, 4, 0, 0);
    x[5] = input(2, 4, 5, 0, 0);
    memset(&a, 0, sizeof a);
    a.is_causal = 1;
    a.need_weights = 1;
    if (!(out[3] = gdl_mha_forward_ex(m, x[3], x[4], x[5], &a, &out[4]))) return -1;
    return finish(dir, "mha.", m, 6, x, 5, out);
}

static int case_gqa(const char *dir) {
    static const int keep[] = {0, 1, 5, 6, 7, 10, 11, 12, 13, -1};
    gdl_tensor *x[3], *out[2], *mask;
    gdl_manual_seed(55);
    x[0] = input(4, 2, 4, 3, 4);
    x[1] = input(4, 2, 2, 5, 4);
    x[2] = input(4, 2, 2, 5, 3);
    mask = bool_mask(3, 5, keep); /* non-zero: takes part (scaled_dot_product_attention's convention) */
    if (!(out[0] = gdl_scaled_dot_product_attention_ex(x[0], x[1], x[2], NULL, 0, 1, GDL_SCALE_DEFAULT, 1)) ||
        !(out[1] = gdl_scaled_dot_product_attention_ex(x[0], x[1], x[2], mask, 0, 0, 0.3, 1)))
        return -1;
    add("gqa.", "mask", mask);
    return finish(dir, "gqa.", NULL, 3, x, 2, out);
}

int main(int argc, char **argv) {
    char path[512];
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    if (case_dec(argv[1]) < 0 || case_tf(argv[1]) < 0 || case_dl(argv[1]) < 0 || case_mha(argv[1]) < 0 ||
        case_gqa(argv[1]) < 0) {
        fprintf(stderr, "transformer_oracle: %s\n", gdl_last_error());
        return 1;
    }
    snprintf(path, sizeof path, "%s/transformer_oracle.safetensors", argv[1]);
    if (gdl_st_write(path, nitems, items, 0, NULL, NULL) < 0) {
        fprintf(stderr, "transformer_oracle: %s\n", gdl_last_error());
        return 1;
    }
    printf("wrote %s (%d tensors)\n", path, nitems);
    return 0;
}
