/* test_ownership.c — the manual's "Ownership" section, done: every object
   kind made and freed in every way the manual and the header comments
   document (containers taking their children also on failure, optimizers
   freed before or after their EMA, scaler and schedulers, loader batches
   across arena resets, ...). The assertions check what stays usable; the
   leaks, double frees and uses after free it would catch show under
   AddressSanitizer and its leak checker, which the suite runs it under:
       cc -std=c99 -O1 -g -fsanitize=address,undefined -D_POSIX_C_SOURCE=200809L \
          tests/test_ownership.c -lm -pthread -o build/asan_test_ownership */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#define CPU gdl_cpu()

static void reset(void *u) {
    (void)u;
    gdl_arena_reset();
    gdl_clear_error();
}

static gdl_real *R(const gdl_tensor *t) { return (gdl_real *)t->data; }

/* Tensors: factories are the caller's until gdl_free; op results are the arena's (gdl_free is a no-op on
   them) until gdl_arena_reset; gdl_clone keeps one; a parameter's grad is freed with it. */
TEST tensors(void) {
    int64_t s[2] = {2, 3};
    gdl_tensor *a = gdl_ones(2, s, GDL_F32, CPU), *w = gdl_randn(2, s, CPU), *t, *kept, *loss;
    ASSERT(a && w);
    gdl_free(NULL);
    ASSERT_NOT_NULL(t = gdl_add(a, a));
    gdl_free(t); /* a temporary: no-op, still readable in this step */
    ASSERT_IN_RANGE(2.0, R(t)[5], 0);
    ASSERT_NOT_NULL(kept = gdl_clone(t));
    gdl_arena_reset();
    ASSERT_IN_RANGE(2.0, R(kept)[0], 0); /* the clone outlives the reset */
    ASSERT_EQ(0, gdl_set_requires_grad(w, 1));
    ASSERT_NOT_NULL(loss = gdl_sum(gdl_mul(w, a)));
    ASSERT_EQ(0, gdl_backward(loss));
    ASSERT_NOT_NULL(w->grad); /* persistent, freed with w */
    gdl_free(kept);
    gdl_free(w);
    gdl_free(a);
    PASS();
}

static int freed_user;
static void count_free(void *p) {
    free(p);
    freed_user++;
}
static gdl_tensor *custom_fwd(gdl_module *self, gdl_tensor *x) { return gdl_forward(gdl_module_child(self, "inner"), x); }

/* Modules: a root frees its tree; containers take their children, also when they fail; a child is never
   freed alone; add_param / add_buffer take the tensor, also on failure; a custom module's user data is freed
   by its free_user. */
TEST modules(void) {
    int64_t s[1] = {4};
    gdl_module *mods[3], *seq, *res, *m, *child, *c;
    /* gdl_nn_sequential takes mods[], also when one of them is NULL (a failed constructor) */
    mods[0] = gdl_nn_linear(4, 4, 1);
    mods[1] = NULL;
    mods[2] = gdl_nn_relu();
    ASSERT_NULL(gdl_nn_sequential(3, mods));
    mods[1] = gdl_nn_linear(4, 2, 0);
    mods[0] = gdl_nn_linear(4, 4, 1);
    mods[2] = gdl_nn_relu();
    ASSERT_NOT_NULL(seq = gdl_nn_sequential(3, mods));
    ASSERT_EQ(0, gdl_nn_sequential_add(seq, gdl_nn_relu()));
    /* a child is refused by gdl_module_free: it stays in its tree, freed once with the root */
    child = gdl_module_child(seq, "0");
    ASSERT_NOT_NULL(child);
    gdl_module_free(child);
    ASSERT_CONTAINS(gdl_last_error(), "belongs to a parent module");
    ASSERT_GT(gdl_module_num_params(child), 0);
    /* gdl_nn_residual takes body and shortcut */
    ASSERT_NOT_NULL(res = gdl_nn_residual(gdl_nn_linear(4, 4, 1), gdl_nn_identity()));
    /* gdl_module_add_child takes the child, also when the name is refused */
    ASSERT_EQ(0, gdl_module_add_child(seq, "res", res));
    ASSERT_EQ(-1, gdl_module_add_child(seq, "a.b", gdl_nn_linear(2, 2, 1)));
    ASSERT_EQ(-1, gdl_module_add_child(seq, "res", gdl_nn_relu())); /* a second "res" */
    /* add_param / add_buffer take the tensor, also on failure */
    ASSERT_NOT_NULL(m = gdl_nn_custom("Holder", custom_fwd, malloc(16), count_free));
    ASSERT_EQ(0, gdl_module_add_param(m, "p", gdl_zeros(1, s, GDL_F32, CPU)));
    ASSERT_EQ(0, gdl_module_add_buffer(m, "b", gdl_zeros(1, s, GDL_F32, CPU)));
    ASSERT_EQ(-1, gdl_module_add_param(m, "p", gdl_zeros(1, s, GDL_F32, CPU))); /* the name is taken */
    ASSERT_EQ(-1, gdl_module_add_param(m, "i", gdl_zeros(1, s, GDL_I32, CPU))); /* not f32 */
    ASSERT_EQ(-1, gdl_module_add_buffer(m, "b", gdl_zeros(1, s, GDL_F32, CPU)));
    ASSERT_EQ(0, gdl_module_add_child(m, "inner", gdl_nn_linear(4, 4, 1)));
    freed_user = 0;
    gdl_module_free(m);
    ASSERT_EQ(1, freed_user); /* the user pointer went to free_user */
    gdl_module_free(seq);
    gdl_module_free(NULL);
    /* gdl_nn_transformer_encoder takes encoder_layer and norm, also on failure */
    ASSERT_NULL(gdl_nn_transformer_encoder(gdl_nn_transformer_encoder_layer_ex(4, 2, NULL), 0, gdl_nn_layernorm(4)));
    ASSERT_NOT_NULL(c = gdl_nn_transformer_encoder(gdl_nn_transformer_encoder_layer_ex(4, 2, NULL), 2,
                                                   gdl_nn_layernorm(4)));
    gdl_module_free(c);
    PASS();
}

static gdl_tensor *tied_fwd(gdl_module *self, gdl_tensor *x) {
    return gdl_forward(gdl_module_child(self, "head"), gdl_forward(gdl_module_child(self, "emb"), x));
}

/* Weight tying frees the tied parameter's own tensor; the shared one is freed once, with the root.
   Quantized copies are new roots: the float model stays the caller's. */
TEST tying_and_copies(void) {
    gdl_module *m = gdl_nn_custom("Tied", tied_fwd, NULL, NULL), *q, *f, *mods[2];
    ASSERT_NOT_NULL(m);
    ASSERT_EQ(0, gdl_module_add_child(m, "emb", gdl_nn_embedding(8, 4)));
    ASSERT_EQ(0, gdl_module_add_child(m, "head", gdl_nn_linear(4, 8, 0)));
    ASSERT_EQ(0, gdl_module_tie(m, "head.weight", "emb.weight"));
    gdl_module_free(m);
    mods[0] = gdl_nn_linear(4, 4, 1);
    mods[1] = gdl_nn_linear(4, 2, 1);
    ASSERT_NOT_NULL(f = gdl_nn_sequential(2, mods));
    ASSERT_NOT_NULL(q = gdl_quantize_dynamic(f, NULL));
    gdl_module_free(f); /* the copy does not share its tensors */
    gdl_module_free(q);
    PASS();
}

/* Optimizers keep pointers to the parameters and own their state. The documented order (schedulers, EMA,
   scaler, optimizer, model) and the other order (the optimizer first: EMA and scaler detach) both free
   everything once. */
static gdl_module *stepped(gdl_optimizer **opt, gdl_ema **ema, gdl_grad_scaler **sc, gdl_scheduler **sched) {
    int64_t xs[2] = {3, 4};
    gdl_module *m = gdl_nn_linear(4, 2, 1);
    gdl_tensor *x = gdl_randn(2, xs, CPU), *loss;
    *opt = gdl_adamw_new(1e-3, 0.9, 0.999, 1e-8, 1e-2);
    if (!m || !x || !*opt || gdl_optim_add_module(*opt, m, 1) < 0) return NULL;
    *sched = gdl_steplr_new(*opt, 1, 0.5);
    *ema = gdl_ema_new(*opt, m, 0.9, 0);
    *sc = gdl_grad_scaler_new(NULL);
    if (!*sched || !*ema || !*sc) return NULL;
    loss = gdl_grad_scaler_scale(*sc, gdl_sum(gdl_forward(m, x)));
    if (!loss || gdl_backward(loss) < 0 || gdl_grad_scaler_step(*sc, *opt) < 0 || gdl_grad_scaler_update(*sc) < 0 ||
        gdl_scheduler_step(*sched) < 0)
        return NULL;
    gdl_free(x);
    return m;
}

TEST optimizers(void) {
    gdl_optimizer *opt;
    gdl_ema *ema;
    gdl_grad_scaler *sc;
    gdl_scheduler *sched;
    gdl_module *m = stepped(&opt, &ema, &sc, &sched);
    ASSERTm(gdl_last_error(), m != NULL);
    gdl_scheduler_free(sched); /* the documented order */
    gdl_ema_free(ema);
    gdl_grad_scaler_free(sc);
    gdl_optim_free(opt);
    gdl_module_free(m);
    m = stepped(&opt, &ema, &sc, &sched);
    ASSERTm(gdl_last_error(), m != NULL);
    gdl_scheduler_free(sched);
    gdl_optim_free(opt); /* first: the EMA and the scaler detach, the parameters stay the model's */
    ASSERT_EQ(-1, gdl_ema_num_updates(ema));
    gdl_ema_free(ema);
    gdl_grad_scaler_free(sc);
    ASSERT_EQ(0, gdl_module_to(m, CPU)); /* the parameters outlived the optimizer */
    gdl_module_free(m);
    gdl_optim_free(NULL);
    gdl_ema_free(NULL);
    gdl_grad_scaler_free(NULL);
    gdl_scheduler_free(NULL);
    PASS();
}

/* Data: the loader does not own its dataset (free the loader first); it owns its batches, which persist across
   gdl_arena_reset and stay valid until the next gdl_loader_next. */
TEST datasets_and_loaders(void) {
    static const float xs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    static const int32_t ys[4] = {0, 1, 0, 1};
    int64_t shape[1] = {2};
    gdl_dataset *ds = gdl_dataset_from_arrays(xs, GDL_F32, 1, shape, ys, 4, 2), *sub;
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *l, *l2;
    gdl_tensor *x, *y;
    ASSERT_NOT_NULL(ds);
    o.batch_size = 2;
    ASSERT_NOT_NULL(l = gdl_loader_new(ds, &o));
    ASSERT_NOT_NULL(l2 = gdl_loader_new(ds, NULL)); /* two loaders over one dataset */
    ASSERT_EQ(1, gdl_loader_next(l, &x, &y));
    gdl_arena_reset();
    ASSERT_IN_RANGE(3.0, R(x)[3], 0); /* the batch survives the reset; the loader's: never gdl_free it */
    ASSERT_EQ(1, gdl_loader_next(l, &x, &y));
    ASSERT_IN_RANGE(7.0, R(x)[3], 0);
    gdl_loader_free(l); /* mid-epoch: frees its batches */
    gdl_loader_free(l2);
    ASSERT_NOT_NULL(sub = gdl_dataset_subset(ds, 1, 2)); /* a copy, freed on its own */
    gdl_dataset_free(ds);
    gdl_dataset_free(sub);
    gdl_loader_free(NULL);
    gdl_dataset_free(NULL);
    PASS();
}

/* Files' structs: gdl_st_read / gdl_idx_load fill structs released with gdl_st_free / gdl_idx_free (also
   zeroed, twice); gdl_cifar10_load's arrays are plain malloc'd memory. */
TEST file_structs(void) {
    const char *p = harness_tmp("test_ownership.safetensors");
    int64_t shape[1] = {2};
    float v[2] = {1, 2};
    gdl_st_tensor t;
    gdl_st_file f;
    gdl_idx idx;
    t.name = "v", t.dtype = "F32", t.ndim = 1, t.shape = shape, t.data = v;
    ASSERT_EQ(0, gdl_st_write(p, 1, &t, 0, NULL, NULL));
    ASSERT_EQ(0, gdl_st_read(p, &f));
    ASSERT_EQ(1, f.n);
    gdl_st_free(&f);
    gdl_st_free(&f); /* zeroed by the first */
    gdl_st_free(NULL);
    memset(&idx, 0, sizeof idx);
    gdl_idx_free(&idx);
    gdl_idx_free(NULL);
    remove(p);
    PASS();
}

/* Four fortunes written to the file p, read into *all (zeroed first); 0 / -1 */
static int four_fortunes(const char *p, gdl_text_list *all) {
    FILE *fp = fopen(p, "wb");
    memset(all, 0, sizeof *all);
    if (!fp) return -1;
    fputs("one fortune\n%\nanother one\n%\na third\n%\nand a fourth\n", fp);
    fclose(fp);
    return gdl_text_read_fortune_file(p, 0, "test", all);
}

/* Vocabularies and text lists: each freed by its own call; gdl_text_join's string by gdl_text_free; a
   dataset made from them copies what it needs. */
TEST text(void) {
    const char *p = harness_tmp("test_ownership.fortunes");
    gdl_text_list all, tr, va;
    gdl_vocab *v;
    gdl_dataset *ds;
    char *joined;
    size_t len = 0;
    ASSERT_EQ(0, four_fortunes(p, &all));
    ASSERT_EQ(4, all.n);
    ASSERT_EQ(0, gdl_text_split(&all, 0.25, 1, &tr, &va));
    ASSERT_NOT_NULL(joined = gdl_text_join(&all, &len));
    ASSERT_NOT_NULL(v = gdl_vocab_build(joined, len, NULL));
    ASSERT_NOT_NULL(gdl_vocab_token(v, 3)); /* the vocabulary's string: not freed */
    ASSERT_NOT_NULL(ds = gdl_dataset_text_classes(&tr, v, 8));
    gdl_text_free(joined);
    gdl_text_list_free(&all);
    gdl_text_list_free(&all); /* zeroed by the first */
    gdl_text_list_free(&tr);
    gdl_text_list_free(&va);
    gdl_vocab_free(v);
    ASSERT_EQ(8, ds->shape[0]); /* the dataset outlives the texts and the vocabulary */
    gdl_dataset_free(ds);
    gdl_vocab_free(NULL);
    remove(p);
    PASS();
}

/* A CPU "graph" replays its step; gdl_graph_free frees it, the step's tensors stay the caller's. */
typedef struct graph_step {
    gdl_module *m;
    gdl_tensor *x, *loss;
} graph_step;
static int run_step(void *c) {
    graph_step *s = (graph_step *)c;
    s->loss = gdl_sum(gdl_forward(s->m, s->x));
    return s->loss && gdl_backward(s->loss) == 0 ? 0 : -1;
}
TEST graphs(void) {
    int64_t xs[2] = {2, 4};
    graph_step s;
    gdl_graph *g;
    s.m = gdl_nn_linear(4, 1, 1);
    s.x = gdl_randn(2, xs, CPU);
    ASSERT(s.m && s.x);
    ASSERTm(gdl_last_error(), (g = gdl_graph_capture(CPU, run_step, &s)) != NULL);
    ASSERT_EQ(0, gdl_graph_replay(g));
    gdl_graph_free(g);
    gdl_graph_free(NULL);
    gdl_free(s.x);
    gdl_module_free(s.m);
    PASS();
}

/* gdl_free on a tensor the library owns is refused: the error names gdl_free and what releases the tensor, and
   the tensor is left as it was (its data read here: freed, AddressSanitizer would stop at this read, at the
   owner's next use or at its release, which would free it twice). */
static int refused_free(gdl_tensor *t, const char *releaser) {
    void *data = t->data;
    int64_t numel = t->numel;
    int kept;
    gdl_clear_error();
    gdl_free(t);
    kept = t->data == data && t->numel == numel && numel > 0 && memcmp(t->data, data, 1) == 0; /* reads first */
    return kept && strncmp(gdl_last_error(), "gdl_free: ", 10) == 0 && strstr(gdl_last_error(), "not yours to free") &&
           strstr(gdl_last_error(), releaser);
}
#define ASSERT_REFUSED(t, releaser) ASSERTm(gdl_last_error(), (t) && refused_free((t), (releaser)))

/* A module's parameters and buffers, their gradients, the optimizer's state and an EMA's averages: each refused
   by gdl_free; training goes on, and each owner's own release frees them once. */
TEST borrowed_training_tensors(void) {
    int64_t xs[2] = {3, 4};
    gdl_module *mods[2], *m;
    gdl_optimizer *opt;
    gdl_ema *ema;
    gdl_tensor *x = gdl_randn(2, xs, CPU), *w, *named[8], *state[16], *loss;
    gdl_real w0;
    int n, i;
    mods[0] = gdl_nn_linear(4, 4, 1);
    mods[1] = gdl_nn_batchnorm1d(4);
    ASSERT_NOT_NULL(m = gdl_nn_sequential(2, mods));
    ASSERT_NOT_NULL(opt = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 0));
    ASSERT_EQ(0, gdl_optim_add_module(opt, m, 0));
    ASSERT_NOT_NULL(ema = gdl_ema_new(opt, m, 0.5, 1));
    /* parameters and buffers, by name and by list */
    ASSERT_NOT_NULL(w = gdl_module_tensor(m, "0.weight"));
    ASSERT_REFUSED(w, "a parameter or buffer of a module; gdl_module_free");
    ASSERT_REFUSED(gdl_module_tensor(m, "1.running_mean"), "gdl_module_free");
    n = gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, NULL, named, 8);
    ASSERT_EQ(6, n); /* weight, bias; weight, bias, running_mean, running_var */
    for (i = 0; i < n; i++) ASSERT_REFUSED(named[i], "gdl_module_free");
    /* a borrowed tensor is not the caller's to give to a module either: refused, not taken */
    ASSERT_EQ(-1, gdl_module_add_param(mods[0], "again", w));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_module_add_param: \"again\" f32 [4,4] is not the caller's to give");
    ASSERT_EQ(2, gdl_module_named_tensors(mods[0], GDL_PARAMS, NULL, NULL, 0));
    /* a step, then the gradients, the optimizer's state and the EMA's averages */
    ASSERT_NOT_NULL(loss = gdl_sum(gdl_mul(gdl_forward(m, x), gdl_forward(m, x))));
    ASSERT_EQ(0, gdl_backward(loss));
    ASSERT_EQ(0, gdl_step(opt));
    ASSERT_REFUSED(w->grad, "the gradient (.grad) of another tensor");
    n = gdl_optim_state(opt, NULL, state, 16);
    ASSERT_EQ(12, n); /* step, exp_avg, exp_avg_sq of each of the 4 parameters */
    for (i = 0; i < n; i++) ASSERT_REFUSED(state[i], "an optimizer; gdl_optim_free");
    ASSERT_REFUSED(gdl_ema_tensor(ema, w), "a weight EMA; gdl_ema_free");
    ASSERT_REFUSED(gdl_ema_tensor(ema, gdl_module_tensor(m, "1.running_var")), "gdl_ema_free");
    /* all of it still in use: a second step changes the weight */
    w0 = R(w)[0];
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_zero_grad(opt));
    ASSERT_NOT_NULL(loss = gdl_sum(gdl_mul(gdl_forward(m, x), gdl_forward(m, x))));
    ASSERT_EQ(0, gdl_backward(loss));
    ASSERT_EQ(0, gdl_step(opt));
    ASSERT(R(w)[0] != w0);
    ASSERT_EQ(2, gdl_ema_num_updates(ema));
    ASSERT_EQ(0, gdl_zero_grad_ex(opt, 1)); /* frees the gradients: their owners' release */
    ASSERT_NULL(w->grad);
    gdl_ema_free(ema);
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_free(x);
    PASS();
}

/* A parameter's master weight and a gradient made outside any flat block (a parameter of no optimizer) */
TEST borrowed_master_and_grad(void) {
    int64_t s[1] = {3};
    gdl_tensor *p = gdl_ones(1, s, GDL_F32, CPU), *q = gdl_ones(1, s, GDL_F32, CPU), *loss;
    gdl_optimizer *opt = gdl_sgd_new(0.5, 0, 0, 0, 0);
    ASSERT(p && q && opt);
    ASSERT_EQ(0, gdl_set_requires_grad(p, 1));
    ASSERT_EQ(0, gdl_set_requires_grad(q, 1));
    ASSERT_GE(gdl_optim_add_params(opt, &p, 1, -1, -1), 0);
    ASSERT_EQ(0, gdl_optim_set_master_weights(opt, GDL_BF16));
    ASSERT_NOT_NULL(loss = gdl_sum(gdl_mul(p, q)));
    ASSERT_EQ(0, gdl_backward(loss));
    ASSERT_REFUSED(gdl_optim_master_weight(opt, 0), "a master weight of an optimizer; gdl_optim_free");
    ASSERT_REFUSED(q->grad, ".grad");
    ASSERT_REFUSED(p->grad, ".grad");
    ASSERT_EQ(0, gdl_step(opt));
    ASSERT_IN_RANGE(0.5, gdl_bf16_to_f32(((uint16_t *)p->data)[2]), 0);
    ASSERT_IN_RANGE(1.0, R(q->grad)[2], 0);
    gdl_optim_free(opt);
    gdl_free(p); /* the caller's: freed with their gradients */
    gdl_free(q);
    PASS();
}

/* A DataLoader's batches (x, y and the lengths): refused; the next batches come as before, and the loader frees
   them, mid-epoch or after the last */
TEST borrowed_batches(void) {
    static const float xs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    static const int32_t ys[4] = {0, 1, 0, 1};
    int64_t shape[1] = {2};
    gdl_dataset *ds = gdl_dataset_from_arrays(xs, GDL_F32, 1, shape, ys, 4, 2);
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *l;
    gdl_tensor *x, *y;
    int epoch;
    ASSERT_NOT_NULL(ds);
    o.batch_size = 2;
    o.num_workers = 1;
    ASSERT_NOT_NULL(l = gdl_loader_new(ds, &o));
    for (epoch = 0; epoch < 2; epoch++) {
        ASSERT_EQ(1, gdl_loader_next(l, &x, &y));
        ASSERT_REFUSED(x, "a batch of a DataLoader; the next gdl_loader_next or gdl_loader_free releases it");
        ASSERT_REFUSED(y, "gdl_loader_free");
        ASSERT_EQ(1, gdl_loader_next(l, &x, &y));
        ASSERT_IN_RANGE(7.0, R(x)[3], 0);
        ASSERT_EQ(1, ((int32_t *)y->data)[1]);
        ASSERT_REFUSED(x, "gdl_loader_free");
        ASSERT_EQ(0, gdl_loader_next(l, &x, &y));
    }
    ASSERT_EQ(1, gdl_loader_next(l, &x, &y));
    gdl_loader_free(l);
    gdl_dataset_free(ds);
    PASS();
}

/* The lengths of a text loader's batch */
TEST borrowed_lengths(void) {
    const char *p = harness_tmp("test_ownership_lengths.fortunes");
    gdl_text_list all;
    gdl_vocab *v;
    gdl_dataset *ds;
    gdl_loader_opts o = gdl_loader_defaults();
    gdl_loader *l;
    gdl_tensor *x, *y, *len;
    char *joined;
    size_t n = 0;
    ASSERT_EQ(0, four_fortunes(p, &all));
    ASSERT_NOT_NULL(joined = gdl_text_join(&all, &n));
    ASSERT_NOT_NULL(v = gdl_vocab_build(joined, n, NULL));
    ASSERT_NOT_NULL(ds = gdl_dataset_text_classes(&all, v, 32));
    o.batch_size = 2;
    ASSERT_NOT_NULL(l = gdl_loader_new(ds, &o));
    ASSERT_EQ(1, gdl_loader_next(l, &x, &y));
    ASSERT_NOT_NULL(len = gdl_loader_lengths(l));
    ASSERT_REFUSED(len, "gdl_loader_free");
    ASSERT_EQ(11, ((int32_t *)len->data)[0]); /* "one fortune": 11 bytes */
    ASSERT_EQ(1, gdl_loader_next(l, &x, &y));
    ASSERT_EQ(7, ((int32_t *)gdl_loader_lengths(l)->data)[0]); /* "a third" */
    gdl_loader_free(l);
    gdl_dataset_free(ds);
    gdl_text_free(joined);
    gdl_text_list_free(&all);
    gdl_vocab_free(v);
    remove(p);
    PASS();
}

/* An imported ONNX model's initializers (gdl_onnx_parameters): refused; the model runs on, fine-tunes, frees them */
TEST borrowed_onnx_initializers(void) {
    const char *p = harness_tmp("test_ownership.onnx");
    int64_t xs[2] = {2, 4};
    gdl_module *m = gdl_nn_linear(4, 3, 1);
    gdl_tensor *x = gdl_randn(2, xs, CPU), *params[4], *out[1], *in[1];
    gdl_onnx_model *om;
    int n, i, nout = 0;
    ASSERT(m && x);
    ASSERTm(gdl_last_error(), gdl_export_onnx(m, x, p, NULL) == 0);
    ASSERTm(gdl_last_error(), (om = gdl_load_onnx(p, CPU)) != NULL);
    n = gdl_onnx_parameters(om, NULL, params, 4);
    ASSERT_EQ(2, n);
    for (i = 0; i < n; i++) ASSERT_REFUSED(params[i], "an initializer of an ONNX model; gdl_onnx_free");
    in[0] = x;
    ASSERT_EQ(0, gdl_onnx_run(om, 1, in, 1, out, &nout));
    ASSERT_EQ(1, nout);
    ASSERT_IN_RANGE(R(gdl_forward(m, x))[5], R(out[0])[5], 1e-6);
    gdl_onnx_free(om);
    gdl_module_free(m);
    gdl_free(x);
    remove(p);
    PASS();
}

/* What stays as it was: gdl_free(NULL) and gdl_free on a temporary or a view set no error; the caller's own
   tensors (a clone of a parameter among them) free as before */
TEST own_tensors_free(void) {
    int64_t s[2] = {2, 2};
    gdl_module *m = gdl_nn_linear(2, 2, 1);
    gdl_tensor *w, *c, *t;
    ASSERT_NOT_NULL(m);
    w = gdl_module_tensor(m, "weight");
    gdl_clear_error();
    gdl_free(NULL);
    ASSERT_STR_EQ("", gdl_last_error());
    ASSERT_NOT_NULL(t = gdl_reshape(w, 1, (int64_t[]){4})); /* a view of a parameter: a temporary */
    gdl_free(t);
    ASSERT_NOT_NULL(t = gdl_detach(w));
    gdl_free(t);
    ASSERT_STR_EQ("", gdl_last_error());
    ASSERT_NOT_NULL(c = gdl_clone(w)); /* a copy is the caller's */
    ASSERT_EQ(0, gdl_module_add_param(m, "extra", c)); /* and may be given to the module */
    ASSERT_REFUSED(c, "gdl_module_free");
    gdl_clear_error();
    ASSERT_NOT_NULL(c = gdl_clone(w));
    gdl_free(c);
    ASSERT_NOT_NULL(t = gdl_zeros(2, s, GDL_F32, CPU));
    gdl_free(t);
    ASSERT_STR_EQ("", gdl_last_error());
    gdl_module_free(m);
    PASS();
}

/* The library's strings are never freed by the caller */
TEST strings(void) {
    int64_t s[1] = {3};
    gdl_tensor *t = gdl_zeros(1, s, GDL_F32, CPU);
    ASSERT_NOT_NULL(t);
    ASSERT_STR_EQ(GPUDL_VERSION, gdl_version());
    ASSERT_STR_EQ("[3]", gdl_shape_str(t));
    ASSERT_STR_EQ("cpu", gdl_device_str(CPU));
    ASSERT_NOT_NULL(gdl_last_error());
    gdl_free(t);
    PASS();
}

SUITE(ownership) {
    SET_SETUP(reset, NULL);
    RUN_TEST(tensors);
    RUN_TEST(modules);
    RUN_TEST(tying_and_copies);
    RUN_TEST(optimizers);
    RUN_TEST(datasets_and_loaders);
    RUN_TEST(file_structs);
    RUN_TEST(text);
    RUN_TEST(graphs);
    RUN_TEST(strings);
    RUN_TEST(borrowed_training_tensors);
    RUN_TEST(borrowed_master_and_grad);
    RUN_TEST(borrowed_batches);
    RUN_TEST(borrowed_lengths);
    RUN_TEST(borrowed_onnx_initializers);
    RUN_TEST(own_tensors_free);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(ownership);
    gdl_shutdown(); /* last: the arenas and the backends' caches */
    HARNESS_MAIN_END();
}
