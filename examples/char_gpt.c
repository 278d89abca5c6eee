/* char_gpt.c — a character-level GPT, Karpathy's nanoGPT (model.py) in gpudl, trained on Debian's English
   fortunes. The model: token embedding wte and learned position embedding wpe, n_layer Blocks of
   (ln_1, causal self-attention c_attn [3C, C] and c_proj, ln_2, MLP c_fc [4C, C], GELU, c_proj), ln_f,
   and a language-model head tied to wte (logits = x wte.weight^T: one parameter). nanoGPT's
   initialisation (normal 0.02, c_proj weights 0.02/sqrt(2 n_layer), zero biases) and parameter names
   (transformer.wte.weight, transformer.h.0.ln_1.weight, ...), so a --save file loads into nanoGPT's GPT
   class (lm_head.weight is transformer.wte.weight). Training as nanoGPT's shakespeare_char, scaled down:
   AdamW (lr 1e-3, betas 0.9/0.99, weight decay 0.1 on the 2-D weights), gradients clipped to norm 1,
   linear warm-up then cosine decay to --min-lr, random windows of the training text (a fixed 90/10
   split of the fortunes), the validation loss the mean over a fixed set of --eval-batches windows
   spread over the validation text. Every --eval-interval steps a line with the mean training loss since
   the last one, the validation loss and next-character accuracy, the learning rate and the speed (--csv FILE:
   gdl_fit's metrics CSV, a row per interval, its "epoch" column numbering the intervals, the training accuracy
   NaN: not measured). At the end, a sample from --prompt (characters the fortunes use). --save FILE writes the
   model; --load FILE samples from such a file without training (give the same --layers, --heads, --width and
   --context).

   bench/pytorch/char_gpt.py is its PyTorch twin: given --save-init and --dump-batches files it trains
   the same model from the same weights on the same batches (bench/compare_char_gpt.sh compares them).
   With --amp the forward and the loss run under autocast (torch.autocast's rules), f16 with a GradScaler
   as PyTorch's recipe has it; the twin takes the same --amp (and --device cuda: tools/gpu_session.sh
   compares the two sides' tokens/s on a GPU, the twin with F.scaled_dot_product_attention).

   CPU:   cc -O2 -march=native examples/char_gpt.c -lm -pthread -o char_gpt
   CUDA:  nvcc -O3 -arch=sm_90 -DGPUDL_CUDA examples/char_gpt.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl -o char_gpt
   Run:   ./char_gpt [--steps N] [--layers N] [--heads N] [--width N] [--context N] [--batch-size N]
                     [--device cpu|cuda] [--amp bf16|f16] [--csv FILE] [--temperature X] [--top-k N] [--prompt TEXT]
                     [--save FILE] [--load FILE] [--out-dir DIR] [--fp32-precision ieee|bf16] ...
          (--help lists them all; the data: `make data-text`, or --data DIR holding the fortunes) */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "example_args.h"
#include <math.h>
#include <stdlib.h>

/* ---- the model ---- */

typedef struct gpt_config {
    int n_layer, n_head, n_embd, block_size, vocab_size;
    double dropout;
} gpt_config;

static gdl_module *child(gdl_module *m, const char *path) { return gdl_module_child(m, path); }
static gdl_tensor *param(gdl_module *m, const char *name) { return gdl_module_tensor(m, name); }

/* One c_attn GEMM [B, T, 3C]: q, k and v side by side, each [B, T, H, C/H] as nanoGPT's split and view
   make them; gdl_sdpa_qkv reads the heads there and writes y [B, T, C] as c_proj reads it (no copy splits
   or joins the heads). The attention dropout is the op's own. */
static gdl_tensor *attn_forward(gdl_module *self, gdl_tensor *x) {
    const gpt_config *c = (const gpt_config *)gdl_module_user(self);
    gdl_tensor *y = gdl_sdpa_qkv(gdl_forward(child(self, "c_attn"), x), c->n_head, NULL,
                                 gdl_module_is_training(self) ? c->dropout : 0, 1, NAN);
    return gdl_forward(child(self, "resid_dropout"), gdl_forward(child(self, "c_proj"), y));
}

/* c_fc and the exact (erf) GELU, nanoGPT's nn.GELU(), as one op */
static gdl_tensor *mlp_forward(gdl_module *self, gdl_tensor *x) {
    gdl_tensor *h = gdl_linear_act(x, param(self, "c_fc.weight"), param(self, "c_fc.bias"), GDL_ACT_GELU);
    return gdl_forward(child(self, "dropout"), gdl_forward(child(self, "c_proj"), h));
}

static gdl_tensor *block_forward(gdl_module *self, gdl_tensor *x) {
    x = gdl_add(x, gdl_forward(child(self, "attn"), gdl_forward(child(self, "ln_1"), x)));
    return gdl_add(x, gdl_forward(child(self, "mlp"), gdl_forward(child(self, "ln_2"), x)));
}

/* idx i32 [B, T] -> the hidden states after ln_f, [B, T, C] */
static gdl_tensor *transformer_forward(gdl_module *self, gdl_tensor *idx) {
    gdl_tensor *x, *pos;
    if (!idx) return NULL;
    pos = gdl_narrow(param(self, "wpe.weight"), 0, 0, idx->shape[idx->ndim - 1]); /* T > block_size: an error */
    x = gdl_forward(child(self, "drop"), gdl_add(gdl_forward(child(self, "wte"), idx), pos));
    return gdl_forward(child(self, "ln_f"), gdl_forward(child(self, "h"), x));
}

/* the head tied to wte: logits [B, T, V] = hidden wte.weight^T */
static gdl_tensor *gpt_forward(gdl_module *self, gdl_tensor *idx) {
    return gdl_linear(gdl_forward(child(self, "transformer"), idx), param(self, "transformer.wte.weight"), NULL);
}

/* Adds child to m; either may be NULL after a failed constructor, whose error then stays the one shown. */
static int add(gdl_module *m, const char *name, gdl_module *c) {
    if (!m || !c) {
        gdl_module_free(c);
        return -1;
    }
    return gdl_module_add_child(m, name, c);
}

static gdl_module *custom(const char *kind, gdl_forward_fn f, gpt_config *c) { return gdl_nn_custom(kind, f, c, NULL); }

/* Each child joins its parent as soon as it is made, so on a failure freeing the root frees all. */
static gdl_module *gpt_block(gpt_config *c) {
    int64_t C = c->n_embd;
    gdl_module *b = custom("Block", block_forward, c), *attn, *mlp;
    if (add(b, "ln_1", gdl_nn_layernorm(C)) < 0 || add(b, "attn", attn = custom("CausalSelfAttention", attn_forward, c)) < 0 ||
        add(attn, "c_attn", gdl_nn_linear(C, 3 * C, 1)) < 0 || add(attn, "c_proj", gdl_nn_linear(C, C, 1)) < 0 ||
        add(attn, "resid_dropout", gdl_nn_dropout(c->dropout)) < 0 ||
        add(b, "ln_2", gdl_nn_layernorm(C)) < 0 || add(b, "mlp", mlp = custom("MLP", mlp_forward, c)) < 0 ||
        add(mlp, "c_fc", gdl_nn_linear(C, 4 * C, 1)) < 0 || add(mlp, "c_proj", gdl_nn_linear(4 * C, C, 1)) < 0 ||
        add(mlp, "dropout", gdl_nn_dropout(c->dropout)) < 0) {
        gdl_module_free(b);
        return NULL;
    }
    return b;
}

/* nanoGPT's _init_weights: Linear and Embedding weights ~ N(0, 0.02), c_proj weights ~ N(0, 0.02/sqrt(2
   n_layer)), biases 0; LayerNorms keep weight 1, bias 0. Drawn from the global generator in state_dict order. */
static int gpt_init(gdl_module *m, int n_layer) {
    const char *names[512];
    gdl_tensor *ts[512], *r;
    int n = gdl_module_named_tensors(m, GDL_PARAMS, names, ts, 512), i;
    for (i = 0; i < n && n <= 512; i++) {
        size_t len = strlen(names[i]);
        int is_bias = len > 5 && !strcmp(names[i] + len - 5, ".bias");
        if (strstr(names[i], ".ln_")) continue;
        if (is_bias) {
            if (gdl_fill_(ts[i], 0) < 0) return -1;
            continue;
        }
        if (!(r = gdl_randn(ts[i]->ndim, ts[i]->shape, gdl_cpu())) ||
            gdl_mul_scalar_(r, len > 13 && !strcmp(names[i] + len - 13, "c_proj.weight") ? 0.02 / sqrt(2.0 * n_layer)
                                                                                          : 0.02) < 0 ||
            gdl_copy_(ts[i], r) < 0) {
            gdl_free(r);
            return -1;
        }
        gdl_free(r);
    }
    return n < 0 || n > 512 ? -1 : 0;
}

/* The GPT of c (which must outlive it), initialised as nanoGPT's, on the CPU. NULL + error. */
static gdl_module *gpt_new(gpt_config *c) {
    gdl_module *gpt = custom("GPT", gpt_forward, c), *tr, *h, *blk;
    int l;
    if (add(gpt, "transformer", tr = custom("Transformer", transformer_forward, c)) < 0 ||
        add(tr, "wte", gdl_nn_embedding(c->vocab_size, c->n_embd)) < 0 ||
        add(tr, "wpe", gdl_nn_embedding(c->block_size, c->n_embd)) < 0 || add(tr, "drop", gdl_nn_dropout(c->dropout)) < 0 ||
        add(tr, "h", h = gdl_nn_sequential(0, NULL)) < 0)
        goto fail;
    for (l = 0; l < c->n_layer; l++)
        if (!(blk = gpt_block(c)) || gdl_nn_sequential_add(h, blk) < 0) goto fail;
    if (add(tr, "ln_f", gdl_nn_layernorm(c->n_embd)) < 0 || gpt_init(gpt, c->n_layer) < 0) goto fail;
    return gpt;
fail:
    gdl_module_free(gpt);
    return NULL;
}

/* ---- the data ---- */

typedef struct text_data {
    gdl_vocab *vocab;
    int32_t *train, *val; /* token ids */
    int64_t n_train, n_val;
} text_data;

/* The texts of l joined and encoded with v into a new array. 0 / -1 + error. */
static int encode_list(const gdl_vocab *v, const gdl_text_list *l, int32_t **ids, int64_t *n) {
    size_t len;
    char *txt = gdl_text_join(l, &len);
    int rc = -1;
    if (txt && (*n = gdl_vocab_encode(v, txt, len, NULL, 0)) >= 0 &&
        (*ids = (int32_t *)malloc(sizeof **ids * (size_t)(*n > 0 ? *n : 1))) != NULL)
        rc = gdl_vocab_encode(v, txt, len, *ids, *n) == *n ? 0 : -1;
    gdl_text_free(txt);
    return rc;
}

/* The English fortunes, a fixed 90/10 split of their entries (gdl_text_split: by content), a
   character vocabulary of the whole text, and both sides encoded. 0 / -1 + error. */
static int load_text(const char *dir, text_data *d) {
    gdl_text_list all, tr, va;
    char *txt = NULL;
    size_t len;
    int rc = -1;
    memset(&all, 0, sizeof all);
    memset(&tr, 0, sizeof tr);
    memset(&va, 0, sizeof va);
    if (gdl_fortunes_english(dir, &all) == 0 && gdl_text_split(&all, 0.1, 0, &tr, &va) == 0 &&
        (txt = gdl_text_join(&all, &len)) && (d->vocab = gdl_vocab_build(txt, len, NULL)) &&
        encode_list(d->vocab, &tr, &d->train, &d->n_train) == 0 && encode_list(d->vocab, &va, &d->val, &d->n_val) == 0)
        rc = 0;
    gdl_text_free(txt);
    gdl_text_list_free(&all);
    gdl_text_list_free(&tr);
    gdl_text_list_free(&va);
    return rc;
}

/* ---- training ---- */

/* char_gpt's own options */
typedef struct opts {
    int steps, layers, heads, width, context, warmup, log_interval, eval_interval, eval_batches, sample_len, top_k;
    double dropout, lr, min_lr, weight_decay, grad_clip, temperature;
    const char *prompt, *save, *save_init, *dump, *load;
} opts;

/* mean cross entropy of the logits [B, T, V] against y [B, T]; the forward and the loss under autocast to
   amp unless it is GDL_F32 (the backward outside the region, as with torch.autocast). *logits, when not
   NULL: the logits as rows [B*T, V]. */
static gdl_tensor *lm_loss(gdl_module *m, gdl_tensor *x, gdl_tensor *y, int V, gdl_dtype amp, gdl_tensor **logits) {
    int64_t rows[2] = {-1, V}, flat = -1;
    gdl_tensor *loss, *z;
    if (amp != GDL_F32 && gdl_autocast_begin(amp) < 0) return NULL;
    z = gdl_reshape(gdl_forward(m, x), 2, rows);
    loss = gdl_cross_entropy(z, gdl_reshape(y, 1, &flat));
    if (amp != GDL_F32) gdl_autocast_end();
    if (logits) *logits = z;
    return loss;
}

/* How many of the rows' likeliest characters are y's (next-character accuracy), counted on the host. -1 + error. */
static int64_t lm_correct(gdl_tensor *logits, gdl_tensor *y) {
    gdl_tensor *pred = gdl_argmax(logits, 1);
    int64_t n = y->numel, i, right = 0;
    int32_t *p = (int32_t *)malloc(sizeof(int32_t) * (size_t)n), *t = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    if (!pred || !p || !t || gdl_copy_to_host(pred, p, sizeof(int32_t) * (size_t)n) < 0 ||
        gdl_copy_to_host(y, t, sizeof(int32_t) * (size_t)n) < 0)
        right = -1;
    for (i = 0; right >= 0 && i < n; i++) right += p[i] == t[i];
    free(p);
    free(t);
    return right;
}

/* The next batch, into the next epoch at an epoch's end. 0 / -1. */
static int next_batch(gdl_loader *l, gdl_tensor **x, gdl_tensor **y) {
    int r = gdl_loader_next(l, x, y);
    if (r == 0) r = gdl_loader_next(l, x, y);
    return r == 1 ? 0 : -1;
}

/* Copies a batch's ids to the host (for --dump-batches): B*T each of x and y. 0 / -1. */
static int record_batch(gdl_tensor *x, gdl_tensor *y, int32_t *xs, int32_t *ys) {
    size_t bytes = sizeof(int32_t) * (size_t)x->numel;
    return gdl_copy_to_host(x, xs, bytes) < 0 || gdl_copy_to_host(y, ys, bytes) < 0 ? -1 : 0;
}

/* The mean loss and next-character accuracy over the first nb batches of l (always the same ones), in eval
   mode without gradients; their ids copied to xs, ys when not NULL. 0 / -1. */
static int evaluate(gdl_module *m, gdl_loader *l, int nb, int V, gdl_dtype amp, int32_t *xs, int32_t *ys,
                    double *mean, double *accuracy) {
    int grad = gdl_set_grad_enabled(0), k, rc = 0;
    double sum = 0;
    int64_t right = 0, total = 0, r;
    gdl_tensor *x, *y, *loss = NULL, *logits = NULL;
    gdl_module_train(m, 0);
    if (gdl_loader_set_epoch(l, 0) < 0) rc = -1;
    for (k = 0; k < nb && rc == 0; k++) {
        gdl_arena_reset();
        if (next_batch(l, &x, &y) < 0 || !(loss = lm_loss(m, x, y, V, amp, &logits)) ||
            (xs && record_batch(x, y, xs + k * x->numel, ys + k * x->numel) < 0) || (r = lm_correct(logits, y)) < 0)
            rc = -1;
        else {
            sum += gdl_item(loss);
            right += r;
            total += y->numel;
        }
    }
    gdl_set_grad_enabled(grad);
    gdl_module_train(m, 1);
    *mean = sum / nb;
    *accuracy = total ? (double)right / (double)total : NAN;
    return rc;
}

/* One step: forward, loss, backward, gradient clipping (clip > 0), AdamW, the schedule. With a GradScaler
   (f16) the loss is scaled before the backward and the gradients unscaled before clipping, and the step is
   skipped where they overflowed, as PyTorch's AMP recipe. 0 / -1. */
static int train_step(gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched, gdl_grad_scaler *scaler,
                      gdl_tensor *const *params, int np, double clip, gdl_dtype amp, gdl_tensor *x, gdl_tensor *y,
                      int V, double *loss_out) {
    gdl_tensor *loss;
    gdl_arena_reset();
    if (gdl_zero_grad(opt) < 0 || !(loss = lm_loss(m, x, y, V, amp, NULL)) ||
        gdl_backward(scaler ? gdl_grad_scaler_scale(scaler, loss) : loss) < 0 ||
        (scaler && gdl_grad_scaler_unscale(scaler, opt) < 0) ||
        (clip > 0 && gdl_clip_grad_norm_nosync(params, np, clip) < 0) ||
        (scaler ? gdl_grad_scaler_step(scaler, opt) < 0 || gdl_grad_scaler_update(scaler) < 0 : gdl_step(opt) < 0) ||
        gdl_scheduler_step(sched) < 0)
        return -1;
    *loss_out = gdl_item(loss);
    return 0;
}

/* ---- --dump-batches: what the PyTorch twin needs besides the initial weights ---- */

typedef struct dump {
    int32_t *train_x, *train_y; /* [steps, B, T] */
    int32_t *val_x, *val_y;     /* [eval_batches, B, T] */
} dump;

/* The batches as I32 tensors train.x, train.y [steps, B, T] and val.x, val.y [eval_batches, B, T], and the
   model's and the training's settings as metadata, so that the twin needs nothing else. 0 / -1. */
static int dump_write(const char *path, const dump *d, const opts *o, const gpt_config *c, int B) {
    int64_t ts[3] = {o->steps, B, c->block_size}, vs[3] = {o->eval_batches, B, c->block_size};
    gdl_st_tensor t[4] = {{"train.x", "I32", 3, ts, NULL}, {"train.y", "I32", 3, ts, NULL},
                          {"val.x", "I32", 3, vs, NULL}, {"val.y", "I32", 3, vs, NULL}};
    const char *keys[] = {"n_layer", "n_head", "n_embd", "block_size", "vocab_size", "dropout", "batch_size",
                          "steps", "lr", "min_lr", "warmup", "beta1", "beta2", "eps", "weight_decay", "grad_clip",
                          "log_interval", "eval_interval", "eval_batches"};
    double v[19];
    char buf[19][32];
    const char *vals[19];
    int k;
    v[0] = c->n_layer; v[1] = c->n_head; v[2] = c->n_embd; v[3] = c->block_size; v[4] = c->vocab_size;
    v[5] = c->dropout; v[6] = B; v[7] = o->steps; v[8] = o->lr; v[9] = o->min_lr; v[10] = o->warmup;
    v[11] = 0.9; v[12] = 0.99; v[13] = 1e-8; v[14] = o->weight_decay; v[15] = o->grad_clip;
    v[16] = o->log_interval; v[17] = o->eval_interval; v[18] = o->eval_batches;
    for (k = 0; k < 19; k++) {
        snprintf(buf[k], sizeof buf[k], "%.17g", v[k]);
        vals[k] = buf[k];
    }
    t[0].data = d->train_x;
    t[1].data = d->train_y;
    t[2].data = d->val_x;
    t[3].data = d->val_y;
    return gdl_st_write(path, 4, t, 19, keys, vals);
}

/* ---- sampling ---- */

/* 0 when every character of the prompt is in v; else -1 after naming the first that is not (the model knows
   only the characters of the fortunes, and anything else would be read as <unk>), or where the prompt is not
   UTF-8. */
static int check_prompt(const gdl_vocab *v, const char *prompt) {
    const unsigned char *p = (const unsigned char *)prompt;
    size_t i = 0, n = strlen(prompt);
    while (i < n) {
        size_t len = p[i] < 0x80 ? 1 : (p[i] & 0xE0) == 0xC0 ? 2 : (p[i] & 0xF0) == 0xE0 ? 3 : (p[i] & 0xF8) == 0xF0 ? 4 : 0;
        unsigned long cp = len == 1 ? p[i] : len == 2 ? p[i] & 0x1Fu : len == 3 ? p[i] & 0x0Fu : p[i] & 0x07u;
        char ch[5];
        size_t k;
        for (k = 1; len && k < len; k++) {
            if (i + k >= n || (p[i + k] & 0xC0) != 0x80) len = 0;
            else cp = cp << 6 | (p[i + k] & 0x3Fu);
        }
        if (!len) {
            fprintf(stderr, "char_gpt: --prompt is not valid UTF-8 at byte %lu\n", (unsigned long)i + 1);
            return -1;
        }
        memcpy(ch, p + i, len);
        ch[len] = 0;
        if (gdl_vocab_id(v, ch) == GDL_VOCAB_UNK) {
            fprintf(stderr, "char_gpt: --prompt: the character '%s' (U+%04lX) is not in the vocabulary: the fortunes "
                            "never use it\n", ch, cp);
            return -1;
        }
        i += len;
    }
    return 0;
}

/* Prints o->sample_len characters sampled after o->prompt (the last block_size tokens as context). 0 / -1. */
static int sample(gdl_module *m, const gdl_vocab *v, const opts *o, int T, uint64_t seed, gdl_device dev) {
    int64_t n = gdl_vocab_encode(v, o->prompt, strlen(o->prompt), NULL, 0), len, shape[2], i;
    int32_t *ids = n > 0 ? (int32_t *)malloc(sizeof *ids * (size_t)(n + o->sample_len)) : NULL;
    int grad = gdl_set_grad_enabled(0), k = o->top_k ? o->top_k : (int)gdl_vocab_size(v), rc = -1;
    char *text = NULL;
    gdl_tensor *x = NULL;
    if (!ids || gdl_vocab_encode(v, o->prompt, strlen(o->prompt), ids, n) != n) goto out;
    gdl_module_train(m, 0);
    for (i = 0; i < o->sample_len; i++, n++) {
        len = n < T ? n : T;
        shape[0] = 1;
        shape[1] = len;
        gdl_arena_reset();
        if (!(x = gdl_from_array(ids + n - len, 2, shape, GDL_I32, dev)) ||
            gdl_sample_logits(gdl_select(gdl_forward(m, x), 1, len - 1), o->temperature, k, gdl_hash64(seed, (uint64_t)i),
                              ids + n) < 0)
            goto out;
        gdl_free(x);
        x = NULL;
    }
    len = gdl_vocab_decode(v, ids, n, NULL, 0);
    if (len < 0 || !(text = (char *)malloc((size_t)len + 1)) || gdl_vocab_decode(v, ids, n, text, (size_t)len + 1) != len)
        goto out;
    printf("sample (temperature %g, top-k %d, seed %llu):\n%s\n", o->temperature, k, (unsigned long long)seed, text);
    rc = 0;
out:
    if (rc && !ids) fprintf(stderr, "char_gpt: the prompt has no token (or no memory)\n");
    gdl_free(x);
    free(ids);
    free(text);
    gdl_set_grad_enabled(grad);
    gdl_module_train(m, 1);
    return rc;
}

/* ---- the run ---- */

typedef struct run {
    const opts *o;
    gpt_config *c;
    int B;
    gdl_module *model;
    gdl_optimizer *opt;
    gdl_scheduler *sched;
    gdl_grad_scaler *scaler; /* --amp f16 */
    gdl_dtype amp;           /* --amp, GDL_F32 without */
    gdl_tensor **params;
    int np;
    gdl_loader *train, *val;
    FILE *csv;
    double *times; /* each step's seconds */
    dump d;        /* with --dump-batches */
} run;

/* The validation loss at a step (0: before training), with the training loss and speed since the last one.
   The CSV row (gdl_fit's metrics CSV) is the evaluation interval's: char_gpt trains by steps, and its
   "epoch" column numbers the --eval-interval periods (an epoch of its data would be every window of the
   text). A sample is a window of --context characters: samples_per_sec is windows a second, the console
   prints that and the characters (tokens) a second. The training accuracy is not measured (it would cost
   each step a copy to the host): NaN, as gdl_fit writes for what it does not know. */
static int report(run *r, int step, int rows, double train_sum, double seconds) {
    gdl_epoch_stats st;
    int first = step == 0;
    memset(&st, 0, sizeof st);
    if (evaluate(r->model, r->val, r->o->eval_batches, r->c->vocab_size, r->amp, first ? r->d.val_x : NULL,
                 first ? r->d.val_y : NULL, &st.val_loss, &st.val_accuracy) < 0)
        return -1;
    if (first) {
        printf("eval 0: val %.6f, val_acc %.2f%%\n", st.val_loss, 100 * st.val_accuracy);
        return 0;
    }
    st.epoch = step / r->o->eval_interval + (step % r->o->eval_interval != 0);
    st.loss = train_sum / rows;
    st.accuracy = NAN;
    st.seconds = seconds;
    st.samples = (int64_t)rows * r->B;
    st.samples_per_sec = st.samples / seconds;
    printf("eval %d: train %.6f val %.6f lr %.2e, val_acc %.2f%%, %.1f s, %.0f samples/s (%.0f tokens/s)\n", step,
           st.loss, st.val_loss, gdl_optim_get_lr(r->opt, 0), 100 * st.val_accuracy, seconds, st.samples_per_sec,
           st.samples_per_sec * r->c->block_size);
    return r->csv ? gdl_metrics_csv_row(r->csv, &st) : 0;
}

/* The training loop: steps, loss lines, reports. 0 / -1. */
static int train(run *r) {
    const opts *o = r->o;
    int64_t bt = (int64_t)r->B * r->c->block_size;
    double loss, t0, flops = 0, med; /* flops: the training steps' (gdl_flops_count) */
    ex_steplog log = {0, 0, 0};
    int step, due;
    gdl_tensor *x, *y;
    if (report(r, 0, 0, 0, 0) < 0) return -1;
    for (step = 1; step <= o->steps; step++) {
        if (next_batch(r->train, &x, &y) < 0 ||
            (r->d.train_x && record_batch(x, y, r->d.train_x + (step - 1) * bt, r->d.train_y + (step - 1) * bt) < 0))
            return -1;
        t0 = gdl_now();
        gdl_flops_reset();
        if (train_step(r->model, r->opt, r->sched, r->scaler, r->params, r->np, o->grad_clip, r->amp, x, y,
                       r->c->vocab_size, &loss) < 0)
            return -1;
        r->times[step - 1] = gdl_now() - t0;
        flops += (double)gdl_flops_count(NULL, NULL);
        due = ex_steplog_add(&log, "char_gpt", step, o->steps, loss, r->times[step - 1], o->log_interval, o->eval_interval);
        if (due < 0 || (due && report(r, step, log.rows, log.sum, log.secs) < 0)) return -1;
        if (due) memset(&log, 0, sizeof log);
    }
    med = ex_print_median_step(r->times, o->steps);
    if (r->np > 0) ex_print_flops(flops, med * o->steps, o->steps, r->params[0]->device, r->amp); /* at the median */
    return 0;
}

/* Random windows of the training text (a new permutation each epoch), and eval_batches fixed batches of
   windows spread evenly over the validation text. 0 / -1. */
static int make_loaders(run *r, const text_data *d, gdl_device dev, uint64_t seed, gdl_dataset **ds) {
    gdl_loader_opts lo = gdl_loader_defaults();
    int64_t T = r->c->block_size, want = (int64_t)r->o->eval_batches * r->B, stride;
    stride = want > 1 && d->n_val - T - 1 >= want - 1 ? (d->n_val - T - 1) / (want - 1) : 1;
    if (!(ds[0] = gdl_dataset_lm_windows(d->train, d->n_train, T, 1, r->c->vocab_size)) ||
        !(ds[1] = gdl_dataset_lm_windows(d->val, d->n_val, T, stride, r->c->vocab_size)))
        return -1;
    if ((d->n_val - T - 1) / stride + 1 < want) {
        fprintf(stderr, "char_gpt: the validation text (%lld characters) is too short for %d batches of %d windows\n",
                (long long)d->n_val, r->o->eval_batches, r->B);
        return -1;
    }
    lo.batch_size = r->B;
    lo.drop_last = 1;
    lo.device = dev;
    lo.pin_memory = 1;
    if (!(r->val = gdl_loader_new(ds[1], &lo))) return -1;
    lo.shuffle = 1;
    lo.seed = seed;
    lo.num_workers = 1;
    return (r->train = gdl_loader_new(ds[0], &lo)) ? 0 : -1;
}

/* The optimizer (two groups: no decay on biases and norms, as nanoGPT's configure_optimizers), the
   schedule (nanoGPT's get_lr: lr (t+1)/(warmup+1), then cosine to min_lr), the parameter list for
   clipping, and the buffers of times and dumps. 0 / -1. */
static int make_training(run *r) {
    const opts *o = r->o;
    size_t bt = (size_t)r->B * (size_t)r->c->block_size;
    if (!(r->opt = gdl_adamw_new(o->lr, 0.9, 0.99, 1e-8, o->weight_decay)) ||
        gdl_optim_add_module(r->opt, r->model, 1) < 0 ||
        !(r->sched = gdl_warmup_cosine_lr_new(r->opt, o->warmup, 1.0 / (o->warmup + 1), o->steps - o->warmup, o->min_lr)) ||
        !(r->params = ex_param_list("char_gpt", r->model, &r->np)))
        return -1;
    if (r->amp == GDL_F16) {
        gdl_grad_scaler_opts so = gdl_grad_scaler_defaults();
        if (!(r->scaler = gdl_grad_scaler_new(&so))) return -1;
    }
    r->times = (double *)malloc(sizeof *r->times * (size_t)o->steps);
    if (o->dump) {
        r->d.train_x = (int32_t *)malloc(sizeof(int32_t) * bt * (size_t)o->steps);
        r->d.train_y = (int32_t *)malloc(sizeof(int32_t) * bt * (size_t)o->steps);
        r->d.val_x = (int32_t *)malloc(sizeof(int32_t) * bt * (size_t)o->eval_batches);
        r->d.val_y = (int32_t *)malloc(sizeof(int32_t) * bt * (size_t)o->eval_batches);
    }
    if (!r->times || (o->dump && (!r->d.train_x || !r->d.train_y || !r->d.val_x || !r->d.val_y))) {
        fprintf(stderr, "char_gpt: out of memory\n");
        return -1;
    }
    return 0;
}

static void run_free(run *r) {
    gdl_scheduler_free(r->sched);
    gdl_grad_scaler_free(r->scaler);
    gdl_optim_free(r->opt);
    gdl_module_free(r->model);
    gdl_loader_free(r->train);
    gdl_loader_free(r->val);
    if (r->csv) fclose(r->csv);
    free(r->params);
    free(r->times);
    free(r->d.train_x);
    free(r->d.train_y);
    free(r->d.val_x);
    free(r->d.val_y);
}

int main(int argc, char **argv) {
    ex_args a = ex_defaults(1, 12);
    opts o = {2000, 4, 4, 128, 64, -1, 50, 250, 20, 300, 0, 0.0, 1e-3, 1e-4, 0.1, 1.0, 0.8, "\n", NULL, NULL, NULL, NULL};
    const ex_opt extra[] = {
        {"--steps", 'i', &o.steps, 1, 1e7, "training steps", "N"},
        {"--layers", 'i', &o.layers, 1, 64, "transformer blocks (n_layer)", "N"},
        {"--heads", 'i', &o.heads, 1, 64, "attention heads (n_head)", "N"},
        {"--width", 'i', &o.width, 1, 8192, "embedding width (n_embd), a multiple of --heads", "N"},
        {"--context", 'i', &o.context, 1, 8192, "context in characters (block_size)", "N"},
        {"--dropout", 'd', &o.dropout, 0, 0.95, "dropout probability", "X"},
        {"--lr", 'd', &o.lr, 0, 10, "peak learning rate", "X"},
        {"--min-lr", 'd', &o.min_lr, 0, 10, "learning rate at the end of the cosine decay", "X"},
        {"--warmup", 'i', &o.warmup, 0, 1e7, "linear warm-up steps, fewer than --steps (default steps/20)", "N"},
        {"--weight-decay", 'd', &o.weight_decay, 0, 10, "AdamW's weight decay of the 2-D weights", "X"},
        {"--grad-clip", 'd', &o.grad_clip, 0, 1e9, "gradient norm clipping (0: off)", "X"},
        {"--log-interval", 'i', &o.log_interval, 1, 1e7, "print the step's training loss every N steps", "N"},
        {"--eval-interval", 'i', &o.eval_interval, 1, 1e7, "validation loss every N steps and at the end", "N"},
        {"--eval-batches", 'i', &o.eval_batches, 1, 1e5, "validation batches (a fixed set)", "N"},
        {"--sample-len", 'i', &o.sample_len, 0, 1e6, "characters sampled at the end", "N"},
        {"--temperature", 'd', &o.temperature, 0, 100, "sampling temperature (0: greedy)", "X"},
        {"--top-k", 'i', &o.top_k, 0, 1e6, "sample among the k likeliest characters (0: all)", "N"},
        {"--prompt", 's', &o.prompt, 0, 0, "the sample's beginning, characters of the fortunes (default: a newline)", "TEXT"},
        {"--save", 'o', &o.save, 0, 0, "write the trained model (safetensors, nanoGPT's names)", "FILE"},
        {"--load", 's', &o.load, 0, 0, "sample from a model --save wrote (the same --layers, --heads, --width, --context), "
                                       "no training", "FILE"},
        {"--save-init", 'o', &o.save_init, 0, 0, "write the initial model (for bench/pytorch/char_gpt.py)", "FILE"},
        {"--dump-batches", 'o', &o.dump, 0, 0, "write the batches' ids (for bench/pytorch/char_gpt.py)", "FILE"}};
    text_data d;
    gpt_config c;
    run r;
    gdl_dataset *ds[2] = {NULL, NULL};
    int parsed, rc = 1;

    setvbuf(stdout, NULL, _IOLBF, 0); /* status lines and errors in the order they happen, also when piped */
    a.data_help = "the fortunes' folder (default: $GPUDL_DATA/fortunes, ./data/fortunes, /usr/share/games/fortunes)";
    parsed = ex_parse_opts(&a, argc, argv, EX_DATA | EX_BATCH | EX_DEVICE | EX_SEED | EX_CSV | EX_PROFILE | EX_AMP | EX_OUT_DIR |
                           EX_PRECISION,
                           "Trains a character-level GPT (nanoGPT's) on Debian's English fortunes, then samples from it.",
                           extra, (int)(sizeof extra / sizeof extra[0]));
    if (parsed) return parsed == 1 ? 0 : 2;
    if (o.warmup < 0) o.warmup = o.steps / 20;
    if (o.load && (a.csv || o.save || o.save_init || o.dump || a.profile)) {
        fprintf(stderr, "char_gpt: --load trains nothing: --csv, --save, --save-init, --dump-batches and --profile need "
                        "a training run\n");
        return 2;
    }
    if (o.width % o.heads != 0 || o.warmup >= o.steps) {
        fprintf(stderr, "char_gpt: %s\n", o.warmup >= o.steps ? "--warmup must be below --steps"
                                                                : "--width must be a multiple of --heads");
        return 2;
    }
    memset(&d, 0, sizeof d);
    memset(&r, 0, sizeof r);
    r.o = &o;
    r.c = &c;
    r.B = a.batch_size;
    r.amp = a.amp;
    gdl_manual_seed(a.seed);
    if (load_text(a.data, &d) < 0) goto fail;
    if (check_prompt(d.vocab, o.prompt) < 0) {
        rc = 2;
        goto done;
    }
    c.n_layer = o.layers;
    c.n_head = o.heads;
    c.n_embd = o.width;
    c.block_size = o.context;
    c.vocab_size = (int)gdl_vocab_size(d.vocab);
    c.dropout = o.dropout;
    if (!(r.model = gpt_new(&c))) goto fail;
    if (o.load) { /* a saved model: straight to the sample */
        if (gdl_load_model(r.model, o.load) < 0 || gdl_module_to(r.model, a.device) < 0) goto fail;
        printf("char_gpt on %s: %s loaded (%d layers, %d heads, width %d, context %d)\n", gdl_device_str(a.device), o.load,
               c.n_layer, c.n_head, c.n_embd, c.block_size);
        if (o.sample_len > 0 && sample(r.model, d.vocab, &o, c.block_size, a.seed, a.device) < 0) goto fail;
        rc = 0;
        goto done;
    }
    if (o.save_init) {
        if (gdl_save_model(r.model, o.save_init) < 0) goto fail;
        ex_wrote(o.save_init);
    }
    if (gdl_module_to(r.model, a.device) < 0 || make_loaders(&r, &d, a.device, a.seed, ds) < 0 || make_training(&r) < 0 ||
        (a.csv && !(r.csv = gdl_metrics_csv_open(a.csv))))
        goto fail;
    printf("char_gpt on %s (%s): %d layers, %d heads, width %d, context %d, batch %d, %.2fM parameters, dropout %g\n",
           gdl_device_str(a.device), gdl_device_name(a.device), c.n_layer, c.n_head, c.n_embd, c.block_size, r.B,
           gdl_module_num_params(r.model) / 1e6, c.dropout);
    if (r.amp != GDL_F32) printf("mixed precision: autocast to %s%s\n", gdl_dtype_name(r.amp), r.scaler ? ", GradScaler" : "");
    if (strcmp(gdl_cpu_get_fp32_precision(), "ieee") && a.device.type == GDL_DEVICE_CPU)
        printf("fp32 precision: %s (the CPU's matrix products; PyTorch's twin runs ieee)\n", gdl_cpu_get_fp32_precision());
    printf("data: English fortunes, %lld training and %lld validation characters, vocabulary %d (ln %d = %.3f)\n",
           (long long)d.n_train, (long long)d.n_val, c.vocab_size, c.vocab_size, log((double)c.vocab_size));
    if (a.profile && gdl_profile_begin() < 0) goto fail;
    if (train(&r) < 0 || (a.profile && ex_profile_print("the training", a.device) < 0)) goto fail;
    if (a.csv) {
        fclose(r.csv);
        r.csv = NULL;
        ex_wrote(a.csv);
    }
    if (o.dump) {
        if (dump_write(o.dump, &r.d, &o, &c, r.B) < 0) goto fail;
        ex_wrote(o.dump);
    }
    if (o.save) {
        if (gdl_save_model(r.model, o.save) < 0) goto fail;
        ex_wrote(o.save);
    }
    if (o.sample_len > 0 && sample(r.model, d.vocab, &o, c.block_size, a.seed, a.device) < 0) goto fail;
    rc = 0;
fail:
    if (rc == 1) fprintf(stderr, "char_gpt: %s\n", gdl_last_error());
done:
    run_free(&r);
    gdl_dataset_free(ds[0]);
    gdl_dataset_free(ds[1]);
    gdl_vocab_free(d.vocab);
    free(d.train);
    free(d.val);
    gdl_shutdown();
    return rc;
}
