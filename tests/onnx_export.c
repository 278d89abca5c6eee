/* tests/onnx_export.c — builds the nets of the ONNX test (tests/test_onnx.sh) with fixed seeds, exports
   each with gdl_export_onnx (traced at batch 5, a fixed batch at 2) into DIR, and writes the inputs and gpudl's outputs at
   batch 1 and 3 as .npy files for tests/onnx_check.py, which runs the files in ONNX Runtime. Also checks
   here: each file read back with gdl_load_onnx and run by gdl_onnx_run against gpudl's outputs; the export's errors (an op without an ONNX form
   names the op and leaves nothing at the path, bad options and dynamically quantized models are refused; statically quantized ones export as QuantizeLinear /
   DequantizeLinear around the float ops and read back exactly, their int8 weights no parameters); truncated and
   corrupted copies of a model load or fail with a message.

     onnx_export DIR      writes DIR/<net>.onnx, DIR/<net>.b<N>.in.npy, DIR/<net>.b<N>.out.npy and
                          DIR/nets.txt (one line a run: the net's name, the batch size, and for a
                          forward of several inputs or outputs their counts, whose files are then
                          DIR/<net>.b<N>.in<k>.npy and .out<k>.npy) */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "../examples/example_args.h"
#include "../examples/recipe.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define CHECK(c)                                                                                    \
    do {                                                                                            \
        if (!(c)) {                                                                                 \
            fprintf(stderr, "onnx_export: %s:%d: %s failed: %s\n", __FILE__, __LINE__, #c, gdl_last_error()); \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

/* a float32 or int32 array as a .npy file (format 1.0, C order) */
static void write_npy(const char *path, const gdl_tensor *t) {
    char hdr[256], shape[160];
    size_t len = 0, bytes = (size_t)t->numel * gdl_dtype_size(t->dtype);
    int k, h;
    void *buf = malloc(bytes ? bytes : 1);
    FILE *f = fopen(path, "wb");
    CHECK(buf && f);
    for (k = 0; k < t->ndim; k++) len += (size_t)snprintf(shape + len, sizeof shape - len, "%lld,", (long long)t->shape[k]);
    shape[len] = 0;
    h = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                 t->dtype == GDL_I32 ? "<i4" : "<f4", shape);
    while ((10 + h + 1) % 64) hdr[h++] = ' ';
    hdr[h++] = '\n';
    CHECK(gdl_copy_to_host(t, buf, bytes) == 0);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(h & 0xff, f);
    fputc(h >> 8, f);
    fwrite(hdr, 1, (size_t)h, f);
    fwrite(buf, 1, bytes, f);
    CHECK(fclose(f) == 0);
    free(buf);
}

/* ---- the custom modules: forwards written with gdl ops ---- */

/* [B,4,12,12] -> [B,24]: grouped, strided and dilated convolutions, leaky ReLU, sigmoid, average / max /
   global pooling, a permute, reshapes, layer norm, both GELUs, matmul, softmax, log-softmax, mean, tanh,
   concat, a scalar multiply and a residual add */
static gdl_tensor *custom_conv_forward(gdl_module *self, gdl_tensor *x) {
    static const int s2[2] = {2, 2}, p1[2] = {1, 1}, p2[2] = {2, 2}, d1[2] = {1, 1}, d2[2] = {2, 2};
    static const int perm[4] = {0, 2, 3, 1};
    gdl_tensor *a, *c, *s, *p, *q, *g, *h, *t, *u, *parts[4];
    int64_t shp[3];
    a = gdl_leaky_relu(gdl_conv2d_ex(x, gdl_module_tensor(self, "w1"), gdl_module_tensor(self, "b1"), s2, p1, d1, 2), 0.1);
    c = gdl_conv2d_ex(x, gdl_module_tensor(self, "w2"), NULL, s2, p2, d2, 1);
    s = gdl_add(a, gdl_sigmoid(c));                           /* [B,8,6,6] */
    p = gdl_avg_pool2d(s, 3, 1, 1);                           /* [B,8,6,6] */
    q = gdl_max_pool2d(s, 3, 2, 1);                           /* [B,8,3,3] */
    g = gdl_flatten(gdl_global_avg_pool2d(p), 1);             /* [B,8] */
    h = gdl_tanh(gdl_linear(g, gdl_module_tensor(self, "fc.weight"), gdl_module_tensor(self, "fc.bias"))); /* [B,6] */
    if (!p) return NULL;
    shp[0] = p->shape[0]; shp[1] = 36; shp[2] = 8;
    t = gdl_reshape(gdl_permute(p, 4, perm), 3, shp);         /* [B,36,8] */
    t = gdl_layer_norm(t, gdl_module_tensor(self, "ln.weight"), gdl_module_tensor(self, "ln.bias"), 1e-5);
    u = gdl_add(t, gdl_mul_scalar(gdl_gelu(t, 1), 0.5));      /* a residual */
    u = gdl_matmul(u, gdl_module_tensor(self, "proj"));       /* [B,36,4] */
    parts[0] = h;
    parts[1] = gdl_mean_dim(gdl_softmax(u, 2), 1, 0);         /* [B,4] */
    parts[2] = gdl_log_softmax(gdl_mean_dim(gdl_gelu(u, 0), 1, 0), 1); /* [B,4] */
    parts[3] = gdl_flatten(gdl_mean_dim(q, 1, 1), 1);        /* [B,9]... [B,1,3,3] -> [B,9] */
    if (!parts[0] || !parts[1] || !parts[2] || !parts[3]) return NULL;
    return gdl_concat(4, parts, 1);                           /* [B,23] */
}

static gdl_module *custom_conv_net(void) {
    gdl_module *m = gdl_nn_custom("CustomConv", custom_conv_forward, NULL, NULL);
    CHECK(m);
    CHECK(gdl_module_add_param(m, "w1", gdl_randn(GDL_DIMS(8, 2, 3, 3), gdl_cpu())) == 0);
    CHECK(gdl_module_add_param(m, "b1", gdl_randn(GDL_DIMS(8), gdl_cpu())) == 0);
    CHECK(gdl_module_add_param(m, "w2", gdl_randn(GDL_DIMS(8, 4, 3, 3), gdl_cpu())) == 0);
    CHECK(gdl_module_add_child(m, "fc", gdl_nn_linear(8, 6, 1)) == 0);
    CHECK(gdl_module_add_child(m, "ln", gdl_nn_layernorm(8)) == 0);
    CHECK(gdl_module_add_param(m, "proj", gdl_randn(GDL_DIMS(8, 4), gdl_cpu())) == 0);
    return m;
}

/* i32 tokens [B,10] -> [B,5]: an embedding (Gather), a residual block with GELU, layer norm, mean, linear */
static gdl_tensor *custom_embed_forward(gdl_module *self, gdl_tensor *x) {
    gdl_tensor *e = gdl_forward(gdl_module_child(self, "emb"), x), *r;
    r = gdl_add(e, gdl_forward(gdl_module_child(self, "mlp"), e));
    r = gdl_forward(gdl_module_child(self, "norm"), r);
    return gdl_forward(gdl_module_child(self, "head"), gdl_mean_dim(r, 1, 0));
}

static gdl_module *custom_embed_net(void) {
    gdl_module *m = gdl_nn_custom("CustomEmbed", custom_embed_forward, NULL, NULL);
    CHECK(m);
    CHECK(gdl_module_add_child(m, "emb", gdl_nn_embedding(50, 16)) == 0);
    CHECK(gdl_module_add_child(m, "mlp", gdl_nn_sequential(3, (gdl_module *[]){gdl_nn_linear(16, 32, 1),
                                          gdl_nn_gelu(0), gdl_nn_linear(32, 16, 1)})) == 0);
    CHECK(gdl_module_add_child(m, "norm", gdl_nn_layernorm(16)) == 0);
    CHECK(gdl_module_add_child(m, "head", gdl_nn_linear(16, 5, 1)) == 0);
    return m;
}

/* [B,6,5] -> [B,6,48] (+ [B,6,2] gathered with gdl_module_user set: its index has the traced batch): the
   remaining ops, each once: exp, log, sqrt, rsqrt, abs, the scalar ops, clamps, minimum, maximum, pow, sub,
   tril / triu, cumsum, index_select, gather, where and masked_fill on comparisons, casts through f16, a
   copy to the device (gdl_to), a strided narrow, max over a dim */
static gdl_tensor *custom_misc_forward(gdl_module *self, gdl_tensor *x) {
    gdl_tensor *p[11], *a, *b, *e, *r;
    int n = 0;
    a = gdl_exp(gdl_mul_scalar(x, 0.3));
    b = gdl_log(gdl_add_scalar(a, 1.0));
    e = gdl_abs(x);
    p[n++] = gdl_maximum(gdl_sqrt(b), gdl_rsqrt(gdl_add_scalar(b, 0.5)));
    p[n++] = gdl_sub(gdl_minimum(e, gdl_clamp_max(x, 0.5)), gdl_pow_scalar(e, 1.5));
    p[n++] = gdl_pow(gdl_add_scalar(e, 1.0), gdl_clamp_min(b, 0.1));
    p[n++] = gdl_add(gdl_tril(x, 0), gdl_triu(x, 2));
    p[n++] = gdl_cumsum(x, 2);
    p[n++] = gdl_where(gdl_compare_scalar(x, GDL_CMP_GT, 0), x, gdl_mul_scalar(x, 0.1));
    p[n++] = gdl_masked_fill(x, gdl_compare(x, gdl_exp(gdl_mul_scalar(x, 0.1)), GDL_CMP_LE), -2.0);
    p[n++] = gdl_to_dtype(gdl_to_dtype(x, GDL_F16), GDL_F32);
    p[n++] = gdl_narrow(gdl_to(e, gdl_cpu()), 2, 1, 3);                /* [B,6,3] */
    p[n++] = gdl_add(gdl_max_dim(x, 2, 1), gdl_max_dim(x, 1, 1));     /* [B,6,1] + [B,1,5] */
    r = gdl_concat(n, p, 2); /* [B,6,48] */
    r = r ? gdl_add(r, gdl_sum_dim(gdl_index_select(r, 1, gdl_module_tensor(self, "pick")), 1, 1)) : NULL;
    if (r && gdl_module_user(self) && x->shape[0] == 2) { /* a fixed batch: the index is [2,6,2] */
        p[0] = r;
        p[1] = gdl_gather(x, 2, gdl_module_tensor(self, "gather_index"));
        r = gdl_concat(2, p, 2);
    }
    return r;
}
static int misc_static_flag;
static gdl_module *misc_net(void *user) { /* the indices are buffers: what the forward reads must outlive it */
    static const int32_t pick[3] = {4, 0, 2};
    int32_t g[24];
    int k;
    gdl_module *m = gdl_nn_custom("CustomMisc", custom_misc_forward, user, NULL);
    for (k = 0; k < 24; k++) g[k] = (int32_t)((k * 7) % 5);
    CHECK(m && gdl_module_add_buffer(m, "pick", gdl_from_array(pick, GDL_DIMS(3), GDL_I32, gdl_cpu())) == 0 &&
          gdl_module_add_buffer(m, "gather_index", gdl_from_array(g, GDL_DIMS(2, 6, 2), GDL_I32, gdl_cpu())) == 0);
    return m;
}
static gdl_module *custom_misc_net(void) { return misc_net(NULL); }
static gdl_module *custom_misc_static_net(void) { return misc_net(&misc_static_flag); }

/* examples/char_gpt.c's GPT, small: causal self-attention over q, k, v side by side (gdl_sdpa_qkv), the
   exact GELU fused into c_fc (gdl_linear_act), pre-norm blocks, learned positions cut to T (gdl_narrow),
   the head tied to the token embedding. i32 tokens [B,10] -> logits [B,10,20] */
enum { GPT_HEADS = 2, GPT_EMBD = 16, GPT_BLOCK = 12, GPT_VOCAB = 20 };

static gdl_tensor *gpt_attn_forward(gdl_module *self, gdl_tensor *x) {
    gdl_tensor *y = gdl_sdpa_qkv(gdl_forward(gdl_module_child(self, "c_attn"), x), GPT_HEADS, NULL, 0, 1, NAN);
    return gdl_forward(gdl_module_child(self, "c_proj"), y);
}
static gdl_tensor *gpt_mlp_forward(gdl_module *self, gdl_tensor *x) {
    gdl_tensor *h = gdl_linear_act(x, gdl_module_tensor(self, "c_fc.weight"), gdl_module_tensor(self, "c_fc.bias"),
                                   GDL_ACT_GELU);
    return gdl_forward(gdl_module_child(self, "c_proj"), h);
}
static gdl_tensor *gpt_block_forward(gdl_module *self, gdl_tensor *x) {
    x = gdl_add(x, gdl_forward(gdl_module_child(self, "attn"), gdl_forward(gdl_module_child(self, "ln_1"), x)));
    return gdl_add(x, gdl_forward(gdl_module_child(self, "mlp"), gdl_forward(gdl_module_child(self, "ln_2"), x)));
}
static gdl_tensor *gpt_forward(gdl_module *self, gdl_tensor *idx) {
    gdl_tensor *pos = gdl_narrow(gdl_module_tensor(self, "wpe.weight"), 0, 0, idx->shape[idx->ndim - 1]), *x;
    x = gdl_add(gdl_forward(gdl_module_child(self, "wte"), idx), pos);
    x = gdl_forward(gdl_module_child(self, "ln_f"), gdl_forward(gdl_module_child(self, "h"), x));
    return gdl_linear(x, gdl_module_tensor(self, "wte.weight"), NULL);
}

static gdl_module *gpt_block(void) {
    gdl_module *b = gdl_nn_custom("Block", gpt_block_forward, NULL, NULL), *attn, *mlp;
    CHECK(b && (attn = gdl_nn_custom("CausalSelfAttention", gpt_attn_forward, NULL, NULL)) &&
          (mlp = gdl_nn_custom("MLP", gpt_mlp_forward, NULL, NULL)));
    CHECK(gdl_module_add_child(attn, "c_attn", gdl_nn_linear(GPT_EMBD, 3 * GPT_EMBD, 1)) == 0 &&
          gdl_module_add_child(attn, "c_proj", gdl_nn_linear(GPT_EMBD, GPT_EMBD, 1)) == 0 &&
          gdl_module_add_child(mlp, "c_fc", gdl_nn_linear(GPT_EMBD, 4 * GPT_EMBD, 1)) == 0 &&
          gdl_module_add_child(mlp, "c_proj", gdl_nn_linear(4 * GPT_EMBD, GPT_EMBD, 1)) == 0);
    CHECK(gdl_module_add_child(b, "ln_1", gdl_nn_layernorm(GPT_EMBD)) == 0 && gdl_module_add_child(b, "attn", attn) == 0 &&
          gdl_module_add_child(b, "ln_2", gdl_nn_layernorm(GPT_EMBD)) == 0 && gdl_module_add_child(b, "mlp", mlp) == 0);
    return b;
}

static gdl_module *gpt_net(void) {
    gdl_module *g = gdl_nn_custom("GPT", gpt_forward, NULL, NULL);
    CHECK(g);
    CHECK(gdl_module_add_child(g, "wte", gdl_nn_embedding(GPT_VOCAB, GPT_EMBD)) == 0 &&
          gdl_module_add_child(g, "wpe", gdl_nn_embedding(GPT_BLOCK, GPT_EMBD)) == 0 &&
          gdl_module_add_child(g, "h", gdl_nn_sequential(2, (gdl_module *[]){gpt_block(), gpt_block()})) == 0 &&
          gdl_module_add_child(g, "ln_f", gdl_nn_layernorm(GPT_EMBD)) == 0);
    return g;
}

/* examples/text_classify.c's classifiers, small: ids [B,12] with trailing <pad>s (id 0) -> logits [B,3];
   the GRU has two layers, both directions;
   the padding mask and the mean-pooling weights computed from the ids (comparisons, dtype casts: traced),
   then an LSTM (or a GRU), or learned positions and a pre-norm Transformer encoder with the key padding
   mask */
enum { TC_V = 30, TC_D = 16, TC_H = 12 };

static gdl_tensor *tc_forward(gdl_module *self, gdl_tensor *x) {
    gdl_tensor *keep = gdl_to_dtype(gdl_compare_scalar(x, GDL_CMP_NE, GDL_VOCAB_PAD), GDL_F32), *w, *h;
    int64_t s[3];
    w = gdl_div(keep, gdl_clamp_min(gdl_sum_dim(keep, 1, 1), 1));
    h = gdl_forward(gdl_module_child(self, "embedding"), x);
    if (gdl_module_child(self, "rnn")) {
        h = gdl_forward(gdl_module_child(self, "rnn"), h);
    } else {
        h = gdl_forward(gdl_module_child(self, "pos"), h);
        h = gdl_transformer_encoder_forward(gdl_module_child(self, "encoder"), h, NULL,
                                            gdl_compare_scalar(x, GDL_CMP_EQ, GDL_VOCAB_PAD), 0);
    }
    if (!w || !h) return NULL;
    s[0] = w->shape[0];
    s[1] = w->shape[1];
    s[2] = 1;
    h = gdl_sum_dim(gdl_mul(h, gdl_reshape(w, 3, s)), 1, 0);
    return gdl_forward(gdl_module_child(self, "head"), h);
}

static gdl_module *tc_net(int kind) { /* 0 LSTM, 1 GRU, 2 Transformer */
    gdl_module *m = gdl_nn_custom("TextClassifier", tc_forward, NULL, NULL);
    CHECK(m && gdl_module_add_child(m, "embedding", gdl_nn_embedding(TC_V, TC_D)) == 0);
    if (kind == 0) CHECK(gdl_module_add_child(m, "rnn", gdl_nn_lstm(TC_D, TC_H, 1, 1, 1, 0, 0)) == 0);
    if (kind == 1) CHECK(gdl_module_add_child(m, "rnn", gdl_nn_gru(TC_D, TC_H, 2, 1, 1, 0, 1)) == 0);
    if (kind == 2)
        CHECK(gdl_module_add_child(m, "pos", gdl_nn_learned_positional_embedding(32, TC_D)) == 0 &&
              gdl_module_add_child(m, "encoder", gdl_nn_transformer_encoder(gdl_nn_transformer_encoder_layer(
                                                     TC_D, 4, 2 * TC_D, 0.1, 1, 1e-5, 1, 1, 1),
                                                 2, gdl_nn_layernorm(TC_D))) == 0);
    CHECK(gdl_module_add_child(m, "head", gdl_nn_linear(kind == 2 ? TC_D : kind == 1 ? 2 * TC_H : TC_H, 3, 1)) == 0);
    return m;
}
static gdl_module *tc_lstm_net(void) { return tc_net(0); }
static gdl_module *tc_gru_net(void) { return tc_net(1); }
static gdl_module *tc_transformer_net(void) { return tc_net(2); }

/* ---- the nets ---- */

/* examples/mnist_mlp.c's net */
static gdl_module *mnist_mlp_net(void) {
    return gdl_nn_sequential(4, (gdl_module *[]){gdl_nn_flatten(1), gdl_nn_linear(784, 128, 1), gdl_nn_relu(),
                                                 gdl_nn_linear(128, 10, 1)});
}

/* examples/cnn.c's net (28x28, one channel) */
static gdl_module *cnn_net(void) {
    return gdl_nn_sequential(11, (gdl_module *[]){gdl_nn_conv2d(1, 32, 3, 1, 1, 1, 1, 1), gdl_nn_relu(),
                                                  gdl_nn_maxpool2d(2, 2, 0), gdl_nn_conv2d(32, 64, 3, 1, 1, 1, 1, 1),
                                                  gdl_nn_relu(), gdl_nn_maxpool2d(2, 2, 0), gdl_nn_flatten(1),
                                                  gdl_nn_linear(64 * 7 * 7, 128, 1), gdl_nn_relu(),
                                                  gdl_nn_dropout(0.25), gdl_nn_linear(128, 10, 1)});
}

/* a small net of the remaining modules: sigmoid, tanh, leaky ReLU, GELU (tanh), unfused batch norm */
static gdl_module *act_mix_net(void) {
    return gdl_nn_sequential(9, (gdl_module *[]){gdl_nn_linear(12, 16, 1), gdl_nn_sigmoid(), gdl_nn_linear(16, 16, 0),
                                                 gdl_nn_tanh(), gdl_nn_batchnorm1d(16), gdl_nn_leaky_relu(0.2),
                                                 gdl_nn_linear(16, 16, 1), gdl_nn_gelu(1), gdl_nn_linear(16, 3, 1)});
}

/* batch norm fused with the erf GELU after it (gdl_batch_norm_act: BatchNormalization then Gelu, or erf's
   form before opset 20), after a conv and after the global pooling */
static gdl_module *bn_gelu_net(void) {
    return gdl_nn_sequential(8, (gdl_module *[]){gdl_nn_conv2d(3, 8, 3, 1, 1, 1, 1, 0), gdl_nn_batchnorm2d(8),
                                                 gdl_nn_gelu(0), gdl_nn_global_avgpool2d(), gdl_nn_flatten(1),
                                                 gdl_nn_batchnorm1d(8), gdl_nn_gelu(0), gdl_nn_linear(8, 3, 1)});
}

/* the batch the dynamic-batch exports trace at: one no other dim of the nets has (an RNN's zero state
   [layers, B, H] has to say which dim is the batch) */
enum { TRACE_BATCH = 5 };

typedef struct net_case {
    const char *name;
    gdl_module *(*make)(void);
    const char *recipe; /* a net of examples/recipe.h instead */
    int ndim;
    int64_t shape[4];   /* the input's shape after the batch */
    int tokens;         /* i32 tokens below this, not floats */
    int opset, dynamic, external;
    int int8;           /* statically quantized before the export: 1 per channel, 7-bit activations (the
                           default); 2 per tensor, 8-bit activations */
} net_case;

static const net_case cases[] = {
    {"mnist_mlp", mnist_mlp_net, NULL, 4, {1, 28, 28}, 0, 18, 1, 0, 0},
    {"cnn", cnn_net, NULL, 4, {1, 28, 28}, 0, 18, 1, 0, 0},
    {"recipe_mlp", NULL, "mlp", 4, {1, 28, 28}, 0, 18, 1, 0, 0},
    {"recipe_cnn", NULL, "cnn", 4, {1, 28, 28}, 0, 17, 1, 0, 0},
    {"resnet10", NULL, "resnet10", 4, {1, 28, 28}, 0, 18, 1, 1, 0},
    {"act_mix", act_mix_net, NULL, 2, {12}, 0, 17, 1, 0, 0},
    {"act_mix_opset20", act_mix_net, NULL, 2, {12}, 0, 20, 1, 0, 0},
    {"bn_gelu", bn_gelu_net, NULL, 4, {3, 9, 7}, 0, 18, 1, 0, 0},
    {"bn_gelu_opset20", bn_gelu_net, NULL, 4, {3, 9, 7}, 0, 20, 1, 0, 0},
    {"custom_conv", custom_conv_net, NULL, 4, {4, 12, 12}, 0, 18, 1, 0, 0},
    {"custom_conv_opset20", custom_conv_net, NULL, 4, {4, 12, 12}, 0, 20, 1, 0, 0},
    {"custom_conv_static", custom_conv_net, NULL, 4, {4, 12, 12}, 0, 18, 0, 0, 0},
    {"custom_embed", custom_embed_net, NULL, 2, {10}, 50, 18, 1, 0, 0},
    {"custom_misc", custom_misc_net, NULL, 3, {6, 5}, 0, 18, 1, 0, 0},
    {"custom_misc_static", custom_misc_static_net, NULL, 3, {6, 5}, 0, 18, 0, 0, 0},
    {"char_gpt", gpt_net, NULL, 2, {10}, GPT_VOCAB, 18, 1, 0, 0},
    {"text_lstm", tc_lstm_net, NULL, 2, {12}, TC_V, 18, 1, 0, 0},
    {"text_gru", tc_gru_net, NULL, 2, {12}, TC_V, 18, 1, 0, 0},
    {"text_transformer", tc_transformer_net, NULL, 2, {12}, TC_V, 18, 1, 0, 0},
    {"int8_mlp", mnist_mlp_net, NULL, 4, {1, 28, 28}, 0, 18, 1, 0, 1},
    {"int8_mlp_tensor", mnist_mlp_net, NULL, 4, {1, 28, 28}, 0, 18, 1, 0, 2},
    {"int8_cnn", cnn_net, NULL, 4, {1, 28, 28}, 0, 18, 1, 0, 1},
};

/* an input of batch b: N(0,1) floats, or tokens in [0, tokens) */
static gdl_tensor *make_input(const net_case *c, int64_t b) {
    int64_t shape[5];
    int k;
    shape[0] = b;
    for (k = 1; k < c->ndim; k++) shape[k] = c->shape[k - 1];
    if (c->tokens) {
        int64_t n = b, i;
        int32_t *v;
        gdl_tensor *t;
        for (k = 1; k < c->ndim; k++) n *= shape[k];
        v = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        CHECK(v);
        for (i = 0; i < n; i++) v[i] = (int32_t)(gdl_rng_next_u64() % (uint64_t)c->tokens);
        for (i = 0; i < b; i++) { /* row i ends in i % 4 <pad>s (id 0; one row at least keeps some ids) */
            int64_t T = n / b, t;
            for (t = T - i % 4; t < T; t++) v[i * T + t] = GDL_VOCAB_PAD;
        }
        t = gdl_from_array(v, c->ndim, shape, GDL_I32, gdl_cpu());
        free(v);
        return t;
    }
    return gdl_randn(c->ndim, shape, gdl_cpu());
}

/* got[k] within 1e-5 relative of want[k] (f32, one shape each): max |got - want| / max |want|; returns the
   largest of these */
static double check_close(gdl_tensor *const *got, gdl_tensor *const *want, int n) {
    double worst = 0;
    int j;
    for (j = 0; j < n; j++) {
        const gdl_tensor *y = want[j];
        float *a = (float *)malloc(sizeof(float) * (size_t)(y->numel + 1)), *b = (float *)malloc(sizeof(float) * (size_t)(y->numel + 1));
        double dmax = 0, ymax = 0;
        int64_t k;
        CHECK(a && b && gdl_same_shape(got[j], y) && got[j]->dtype == GDL_F32 && y->dtype == GDL_F32 &&
              gdl_copy_to_host(got[j], a, sizeof(float) * (size_t)y->numel) == 0 &&
              gdl_copy_to_host(y, b, sizeof(float) * (size_t)y->numel) == 0);
        for (k = 0; k < y->numel; k++) {
            double d = fabs((double)a[k] - b[k]);
            dmax = d > dmax ? d : dmax;
            ymax = fabs(b[k]) > ymax ? fabs(b[k]) : ymax;
        }
        CHECK(dmax <= 1e-5 * ymax);
        if (dmax > worst * ymax) worst = ymax > 0 ? dmax / ymax : 0;
        free(a);
        free(b);
    }
    return worst;
}

/* The file read back with gdl_load_onnx and run by gdl_onnx_run on x: within 1e-5 relative of y (*err: the
   largest relative error); returns the seconds gdl_load_onnx took (reading and checking the file, the weights
   copied in). An int8 net's trainable parameters are its f32 biases only: the int8 weights, scales and zero
   points are constants. */
static double check_import(const char *path, gdl_tensor *x, gdl_tensor *y, int int8, double *err) {
    double t0 = gdl_now(), load;
    gdl_onnx_model *om = gdl_load_onnx(path, gdl_cpu());
    gdl_tensor *out[1];
    int nout = 0;
    load = gdl_now() - t0;
    CHECK(om);
    CHECK(gdl_onnx_run(om, 1, &x, 1, out, &nout) == 0 && nout == 1);
    *err = check_close(out, &y, 1);
    if (int8) {
        const char *names[64];
        int np = gdl_onnx_parameters(om, names, NULL, 64), k;
        CHECK(np > 0 && np <= 64);
        for (k = 0; k < np; k++) CHECK(strstr(names[k], ".bias") != NULL);
    }
    gdl_onnx_free(om);
    return load;
}

/* m statically quantized (gdl_quant_prepare, calibrate on 64 inputs like the test's, convert), in training
   mode like the float nets; m is freed */
static gdl_module *quantize_static(const net_case *c, gdl_module *m) {
    gdl_qconfig qc = gdl_qconfig_default();
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_tensor *x = make_input(c, 64);
    float *host = (float *)malloc(sizeof(float) * (size_t)x->numel);
    int32_t *labels = (int32_t *)calloc(64, sizeof(int32_t));
    gdl_dataset *ds;
    gdl_loader *l;
    gdl_module *p, *q;
    CHECK(host && labels && gdl_copy_to_host(x, host, sizeof(float) * (size_t)x->numel) == 0);
    qc.per_channel = c->int8 == 1;
    qc.reduce_range = c->int8 == 1;
    lo.batch_size = 16;
    CHECK((ds = gdl_dataset_from_arrays(host, GDL_F32, c->ndim - 1, c->shape, labels, 64, 2)) != NULL);
    CHECK((l = gdl_loader_new(ds, &lo)) != NULL);
    gdl_module_train(m, 0);
    CHECK((p = gdl_quant_prepare(m, &qc)) != NULL && gdl_quant_calibrate(p, l, 4) == 4);
    CHECK((q = gdl_quant_convert(p)) != NULL && gdl_module_is_quantized(q) > 0);
    gdl_module_train(q, 1);
    gdl_loader_free(l);
    gdl_dataset_free(ds);
    gdl_module_free(p);
    gdl_module_free(m);
    gdl_free(x);
    free(host);
    free(labels);
    return q;
}

static void run_case(const net_case *c, const char *dir, FILE *list, int idx) {
    char path[512];
    gdl_module *m;
    gdl_tensor *x, *y;
    gdl_onnx_opts o = gdl_onnx_defaults();
    int64_t batches[2] = {1, 3};
    double t0, load = 0, err = 0, worst = 0;
    int k;
    gdl_manual_seed(1000 + (uint64_t)idx);
    m = c->make ? c->make() : ex_recipe_net(ex_recipe_find(c->recipe));
    CHECK(m);
    /* a few training-mode forwards: batch norm's running statistics move away from 0 and 1 */
    for (k = 0; k < 3 && !c->tokens; k++) {
        gdl_arena_reset();
        x = make_input(c, 8);
        CHECK(x && gdl_forward(m, x));
        gdl_free(x);
    }
    gdl_arena_reset();
    if (c->int8) m = quantize_static(c, m);
    o.opset = c->opset;
    o.dynamic_batch = c->dynamic;
    o.external_data = c->external;
    snprintf(path, sizeof path, "%s/%s.onnx", dir, c->name);
    x = make_input(c, c->dynamic ? TRACE_BATCH : 2);
    t0 = gdl_now();
    CHECK(x && gdl_export_onnx(m, x, path, &o) == 0);
    printf("onnx_export: %-20s exported in %6.1f ms (%lld parameters)\n", c->name, 1e3 * (gdl_now() - t0),
           (long long)gdl_module_num_params(m));
    gdl_free(x);
    CHECK(gdl_module_is_training(m)); /* the export restores the training flags */
    gdl_module_train(m, 0);
    for (k = 0; k < (c->dynamic ? 2 : 1); k++) {
        int64_t b = c->dynamic ? batches[k] : 2;
        gdl_arena_reset();
        x = make_input(c, b);
        CHECK(x && (y = gdl_forward(m, x)));
        snprintf(path, sizeof path, "%s/%s.b%lld.in.npy", dir, c->name, (long long)b);
        write_npy(path, x);
        snprintf(path, sizeof path, "%s/%s.b%lld.out.npy", dir, c->name, (long long)b);
        write_npy(path, y);
        snprintf(path, sizeof path, "%s/%s.onnx", dir, c->name);
        load = check_import(path, x, y, c->int8, &err); /* int8 nets: QuantizeLinear / DequantizeLinear */
        if (err > worst) worst = err;
        fprintf(list, "%s %lld\n", c->name, (long long)b);
        gdl_free(x);
    }
    printf("onnx_export: %-20s read back by gdl_load_onnx (loaded in %.1f ms): gdl_onnx_run's outputs match "
           "(max relative error %.1e)\n", c->name, 1e3 * load, worst);
    gdl_arena_reset();
    gdl_module_free(m);
}

/* gdl_onnx_parse on every prefix of a model and on copies with bytes changed: each loads or fails with a
   message (the ASan build checks the reads) */
static void check_malformed(const char *path) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf, *cp;
    long n, k;
    CHECK(f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0);
    CHECK((buf = (unsigned char *)malloc((size_t)n)) && (cp = (unsigned char *)malloc((size_t)n)) &&
          fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    for (k = 0; k < n; k += 1 + n / 400) {
        gdl_onnx_model *m = gdl_onnx_parse(buf, (size_t)k, gdl_cpu());
        CHECK(m || gdl_last_error()[0]);
        gdl_onnx_free(m);
    }
    for (k = 0; k < 2000; k++) {
        gdl_onnx_model *m;
        memcpy(cp, buf, (size_t)n);
        cp[gdl_rng_next_u64() % (uint64_t)n] = (unsigned char)gdl_rng_next_u64();
        cp[gdl_rng_next_u64() % (uint64_t)n] ^= 0x80;
        m = gdl_onnx_parse(cp, (size_t)n, gdl_cpu());
        CHECK(m || gdl_last_error()[0]);
        gdl_onnx_free(m);
    }
    CHECK(!gdl_onnx_parse("\x08\x08\x3a\xff\xff\xff\xff\x0f", 8, gdl_cpu()) && strstr(gdl_last_error(), "malformed"));
    CHECK(!gdl_load_onnx("/nonexistent/model.onnx", gdl_cpu()) && strstr(gdl_last_error(), "cannot open"));
    free(buf);
    free(cp);
}

/* ---- gdl_export_onnx_fn: a forward of two inputs and three outputs ----
   An LSTM with its states: ids x [B,8] i32 and a scale s [B,1] -> the outputs' mean over time times s,
   h_n and c_n, under the names given in the options. */
static int lstm_states_forward(void *user, int nin, gdl_tensor *const *in, int max_out, gdl_tensor **out, int *nout) {
    gdl_module *m = (gdl_module *)user;
    gdl_tensor *seq, *h, *c;
    (void)nin;
    (void)max_out;
    if (gdl_nn_lstm_forward(gdl_module_child(m, "lstm"), gdl_forward(gdl_module_child(m, "emb"), in[0]), NULL, NULL,
                            &seq, &h, &c) < 0)
        return -1;
    out[0] = gdl_mul(gdl_mean_dim(seq, 1, 0), in[1]);
    out[1] = h;
    out[2] = c;
    *nout = 3;
    return out[0] ? 0 : -1;
}

static gdl_tensor *lstm_seq_forward(gdl_module *self, gdl_tensor *x) { /* gdl_forward's: the sequence only */
    return gdl_forward(gdl_module_child(self, "lstm"), gdl_forward(gdl_module_child(self, "emb"), x));
}

static void run_fn_case(const char *dir, FILE *list) {
    static const char *const in_names[2] = {"ids", "scale"}, *const out_names[3] = {"pooled", "h_n", "c_n"};
    char path[512];
    gdl_module *m = gdl_nn_custom("LSTMStates", lstm_seq_forward, NULL, NULL);
    gdl_onnx_opts o = gdl_onnx_defaults();
    int64_t batches[2] = {1, 3};
    int k, j, nout;
    gdl_manual_seed(77);
    CHECK(m && gdl_module_add_child(m, "emb", gdl_nn_embedding(TC_V, TC_D)) == 0 &&
          gdl_module_add_child(m, "lstm", gdl_nn_lstm(TC_D, TC_H, 2, 1, 1, 0, 0)) == 0);
    o.input_names = in_names;
    o.output_names = out_names;
    snprintf(path, sizeof path, "%s/lstm_states.onnx", dir);
    { /* traced at batch 2 = num_layers: the zero state [2, 2, 12] cannot say which dim is the batch */
        net_case c = {"lstm_states", NULL, NULL, 2, {8}, TC_V, 18, 1, 0, 0};
        gdl_tensor *in[2];
        in[0] = make_input(&c, 2);
        in[1] = gdl_randn(GDL_DIMS(2, 1), gdl_cpu());
        CHECK(gdl_export_onnx_fn(m, lstm_states_forward, m, 2, in, path, &o) < 0 &&
              strstr(gdl_last_error(), "2 dims of the traced batch's size 2"));
        gdl_free(in[0]);
        gdl_free(in[1]);
    }
    for (k = -1; k < 2; k++) { /* k -1: the export at batch 2; then the runs at batch 1 and 3 */
        net_case c = {"lstm_states", NULL, NULL, 2, {8}, TC_V, 18, 1, 0, 0};
        int64_t b = k < 0 ? TRACE_BATCH : batches[k];
        gdl_tensor *in[2], *out[3];
        gdl_arena_reset();
        in[0] = make_input(&c, b);
        in[1] = gdl_randn(GDL_DIMS(b, 1), gdl_cpu());
        if (k < 0) {
            CHECK(gdl_export_onnx_fn(m, lstm_states_forward, m, 2, in, path, &o) == 0);
        } else {
            gdl_onnx_model *om = gdl_load_onnx(path, gdl_cpu());
            gdl_tensor *back[3];
            gdl_module_train(m, 0);
            CHECK(lstm_states_forward(m, 2, in, 3, out, &nout) == 0 && nout == 3);
            CHECK(om && gdl_onnx_run(om, 2, in, 3, back, &nout) == 0 && nout == 3);
            for (j = 0; j < 2; j++) {
                snprintf(path, sizeof path, "%s/lstm_states.b%lld.in%d.npy", dir, (long long)b, j);
                write_npy(path, in[j]);
            }
            for (j = 0; j < 3; j++) {
                CHECK(gdl_same_shape(back[j], out[j]));
                snprintf(path, sizeof path, "%s/lstm_states.b%lld.out%d.npy", dir, (long long)b, j);
                write_npy(path, out[j]);
            }
            check_close(back, out, 3);
            gdl_onnx_free(om);
            fprintf(list, "lstm_states %lld 2 3\n", (long long)b);
            snprintf(path, sizeof path, "%s/lstm_states.onnx", dir);
        }
        gdl_free(in[0]);
        gdl_free(in[1]);
    }
    printf("onnx_export: lstm_states (gdl_export_onnx_fn: 2 inputs, 3 outputs) read back: outputs match\n");
    gdl_arena_reset();
    gdl_module_free(m);
}

/* ---- the errors ---- */

static gdl_tensor *loss_forward(gdl_module *self, gdl_tensor *x) { /* a loss has no ONNX form */
    (void)self;
    return gdl_relu(gdl_mse_loss(gdl_relu(x), x, GDL_REDUCE_MEAN));
}
static gdl_tensor *train_dropout_forward(gdl_module *self, gdl_tensor *x) {
    (void)self;
    return gdl_dropout(x, 0.5, 1);
}

static int exists(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

static void check_errors(const char *dir) {
    char path[512];
    gdl_module *m;
    gdl_tensor *x = gdl_randn(GDL_DIMS(2, 5), gdl_cpu()), *img = gdl_randn(GDL_DIMS(2, 1, 28, 28), gdl_cpu());
    gdl_onnx_opts o = gdl_onnx_defaults();
    snprintf(path, sizeof path, "%s/error.onnx", dir);
    remove(path);
    m = gdl_nn_custom("Loss", loss_forward, NULL, NULL);
    CHECK(m && gdl_export_onnx(m, x, path, NULL) < 0);
    CHECK(strstr(gdl_last_error(), "gdl_export_onnx: op \"mse_loss\" has no ONNX form"));
    CHECK(strstr(gdl_last_error(), "(node 1 of "));
    CHECK(!exists(path));
    printf("onnx_export: error as expected: %s\n", gdl_last_error());
    gdl_module_free(m);
    m = gdl_nn_custom("TrainDropout", train_dropout_forward, NULL, NULL);
    CHECK(m && gdl_export_onnx(m, x, path, NULL) < 0 && strstr(gdl_last_error(), "op \"dropout\"") && !exists(path));
    gdl_module_free(m);
    m = mnist_mlp_net();
    o.opset = 16;
    CHECK(gdl_export_onnx(m, img, path, &o) < 0 &&
          strstr(gdl_last_error(), "opset 16 is not supported"));
    CHECK(gdl_export_onnx(m, NULL, path, NULL) < 0 && strstr(gdl_last_error(), "example input 0 is NULL"));
    CHECK(gdl_export_onnx(m, x, path, NULL) < 0 && strstr(gdl_last_error(), "the traced forward failed") &&
          !exists(path));
    snprintf(path, sizeof path, "%s/no-such-dir/model.onnx", dir);
    CHECK(gdl_export_onnx(m, img, path, NULL) < 0 && strstr(gdl_last_error(), "cannot create temporary file"));
    {
        gdl_module *q = gdl_quantize_dynamic(m, NULL); /* dynamic int8 layers: refused, not exported as constants */
        snprintf(path, sizeof path, "%s/error.onnx", dir);
        CHECK(q && gdl_export_onnx(q, img, path, NULL) < 0 &&
              strstr(gdl_last_error(), "DynamicQuantizedLinear: its activations are quantized per batch") &&
              !exists(path) && gdl_module_is_quantized(q) > 0); /* and its layers unwrapped again */
        gdl_module_free(q);
    }
    gdl_module_free(m);
    gdl_free(x);
    gdl_free(img);
    gdl_arena_reset();
}

int main(int argc, char **argv) {
    char path[512];
    FILE *list;
    size_t k;
    (void)ex_defaults; /* examples/example_args.h's, which recipe.h needs the types of */
    if (argc != 2) {
        fprintf(stderr, "usage: onnx_export DIR\n");
        return 2;
    }
    snprintf(path, sizeof path, "%s/nets.txt", argv[1]);
    CHECK((list = fopen(path, "w")) != NULL);
    for (k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(&cases[k], argv[1], list, (int)k);
    run_fn_case(argv[1], list);
    CHECK(fclose(list) == 0);
    check_errors(argv[1]);
    snprintf(path, sizeof path, "%s/custom_misc.onnx", argv[1]);
    check_malformed(path);
    printf("onnx_export: %d nets exported to %s\n", (int)(sizeof cases / sizeof cases[0]), argv[1]);
    gdl_shutdown();
    return 0;
}
