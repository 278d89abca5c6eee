/* test_train.c — gdl_fit / gdl_evaluate and checkpoints: training reaches
   its target on data with a known answer, history and the metrics CSV are
   right, safetensors checkpoints round-trip with PyTorch's names, corrupt or
   mismatched files are refused without touching the model, a failed save
   leaves the previous file intact, and a run resumed from a training
   checkpoint ends bit-for-bit where the uninterrupted run ends; test-time
   flips, early stopping and the best model (also across a resume), a short
   run of the whole recipe (augmentations, mixup/cutmix, EMA, warm-up cosine)
   to a loss bound; plus one epoch of real Fashion-MNIST (10k subset) above
   75 % test accuracy. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include <stdlib.h>

#define CPU gdl_cpu()

/* three Gaussian blobs in 4-D, labels 0..2 */
static gdl_dataset *blobs(int64_t n, uint64_t seed) {
    float *x = (float *)malloc(sizeof(float) * (size_t)n * 4);
    int32_t *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    int64_t i, shape[1] = {4};
    gdl_dataset *ds;
    gdl_manual_seed(seed);
    for (i = 0; i < n; i++) {
        int c = (int)(gdl_rng_next_u64() % 3), k;
        y[i] = c;
        for (k = 0; k < 4; k++) x[i * 4 + k] = (float)((k == c ? 3.0 : 0.0) + (gdl_rng_uniform() - 0.5));
    }
    ds = gdl_dataset_from_arrays(x, GDL_F32, 1, shape, y, n, 3);
    free(x);
    free(y);
    return ds;
}

static gdl_module *small_net(uint64_t seed) {
    gdl_module *l[5];
    gdl_manual_seed(seed);
    l[0] = gdl_nn_linear(4, 16, 1);
    l[1] = gdl_nn_batchnorm1d(16);
    l[2] = gdl_nn_relu();
    l[3] = gdl_nn_dropout(0.1);
    l[4] = gdl_nn_linear(16, 3, 1);
    return gdl_nn_sequential(5, l);
}

static gdl_loader *loader(gdl_dataset *ds, int shuffle) {
    gdl_loader_opts o = gdl_loader_defaults();
    o.batch_size = 32;
    o.shuffle = shuffle;
    o.seed = 7;
    return gdl_loader_new(ds, &o);
}

static void tmp_path(char *buf, size_t n, const char *name) {
    char base[128];
    snprintf(base, sizeof base, "test_train_%s", name);
    snprintf(buf, n, "%s", harness_tmp(base));
}

TEST test_fit_learns_and_reports(void) {
    gdl_dataset *tr = blobs(600, 1), *va = blobs(200, 2);
    gdl_loader *tl = loader(tr, 1), *vl = loader(va, 0);
    gdl_module *m = small_net(3);
    gdl_optimizer *opt = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 0);
    gdl_fit_opts o = gdl_fit_defaults();
    gdl_epoch_stats h[4];
    char csv[256], line[256];
    FILE *f;
    int lines = 0;
    double loss, acc;
    ASSERT(tr && va && tl && vl && m && opt);
    ASSERT_EQ(0, gdl_optim_add_module(opt, m, 0));
    tmp_path(csv, sizeof csv, "metrics.csv");
    o.epochs = 4;
    o.val = vl;
    o.verbose = 0;
    o.csv_path = csv;
    ASSERT_EQ(0, gdl_fit(m, tl, opt, &o, h));
    ASSERT_EQ(1, h[0].epoch);
    ASSERT_EQ(600, h[0].samples);
    ASSERT_LT(h[3].loss, h[0].loss);
    ASSERT_GT(h[3].val_accuracy, 0.95);
    ASSERT_GT(h[3].samples_per_sec, 0);
    ASSERT_EQ(0, gdl_evaluate(m, vl, NULL, NULL, &loss, &acc));
    ASSERT_IN_RANGE(h[3].val_accuracy, acc, 1e-12); /* eval mode is deterministic */
    ASSERT_IN_RANGE(h[3].val_loss, loss, 1e-9);
    ASSERT_EQ(1, gdl_module_is_training(m)); /* evaluate restores the mode */
    ASSERT_NOT_NULL(f = fopen(csv, "r"));
    while (fgets(line, sizeof line, f)) {
        if (lines == 0) ASSERT_STR_EQ("epoch,loss,accuracy,val_loss,val_accuracy,seconds,samples_per_sec\n", line);
        lines++;
    }
    fclose(f);
    ASSERT_EQ(5, lines);
    remove(csv);
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_loader_free(tl);
    gdl_loader_free(vl);
    gdl_dataset_free(tr);
    gdl_dataset_free(va);
    PASS();
}

TEST test_fit_errors(void) {
    gdl_dataset *tr = blobs(40, 1);
    gdl_loader *tl = loader(tr, 0);
    gdl_module *m = small_net(1), *bad;
    gdl_optimizer *opt = gdl_sgd_new(0.1, 0, 0, 0, 0);
    gdl_fit_opts o = gdl_fit_defaults();
    gdl_optim_add_module(opt, m, 0);
    o.verbose = 0;
    ASSERT_EQ(-1, gdl_fit(NULL, tl, opt, &o, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_fit: module is NULL");
    bad = gdl_nn_linear(5, 3, 1); /* wrong input size: the error names the layer */
    ASSERT_EQ(-1, gdl_fit(bad, tl, opt, &o, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "Linear");
    o.csv_path = "/nonexistent-dir/metrics.csv";
    ASSERT_EQ(-1, gdl_fit(m, tl, opt, &o, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "cannot write the metrics CSV");
    gdl_module_free(bad);
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_loader_free(tl);
    gdl_dataset_free(tr);
    PASS();
}

TEST test_loss_objects(void) {
    float a[6] = {1, 2, 3, 1, 1, 1}, t[6] = {0, 1, 0, 1, 0, 1};
    int32_t y[2] = {2, 0};
    int64_t s[2] = {2, 3}, sy[1] = {2};
    gdl_tensor *x = gdl_from_array(a, 2, s, GDL_F32, CPU), *tt = gdl_from_array(t, 2, s, GDL_F32, CPU);
    gdl_tensor *Y = gdl_from_array(y, 1, sy, GDL_I32, CPU);
    gdl_ce_opts o = gdl_ce_defaults();
    gdl_reduction sum = GDL_REDUCE_SUM;
    o.label_smoothing = 0.1;
    ASSERT_IN_RANGE(gdl_item(gdl_cross_entropy(x, Y)), gdl_item(gdl_loss_cross_entropy(x, Y, NULL)), 0);
    ASSERT_IN_RANGE(gdl_item(gdl_cross_entropy_ex(x, Y, &o)), gdl_item(gdl_loss_cross_entropy(x, Y, &o)), 0);
    ASSERT_NULL(gdl_loss_nll(x, Y, &o));
    ASSERT_CONTAINS(gdl_last_error(), "no label smoothing");
    ASSERT_IN_RANGE(gdl_item(gdl_nll_loss(x, Y, GDL_REDUCE_MEAN, -100)), gdl_item(gdl_loss_nll(x, Y, NULL)), 0);
    ASSERT_IN_RANGE(gdl_item(gdl_mse_loss(x, tt, GDL_REDUCE_SUM)), gdl_item(gdl_loss_mse(x, tt, &sum)), 0);
    ASSERT_IN_RANGE(gdl_item(gdl_bce_with_logits(x, tt, GDL_REDUCE_MEAN)),
                    gdl_item(gdl_loss_bce_with_logits(x, tt, NULL)), 0);
    gdl_free(x);
    gdl_free(tt);
    gdl_free(Y);
    PASS();
}

static int same_params(gdl_module *a, gdl_module *b) {
    const char *na[64], *nb[64];
    gdl_tensor *ta[64], *tb[64];
    int n = gdl_module_named_tensors(a, GDL_PARAMS_AND_BUFFERS, na, ta, 64), i;
    if (n != gdl_module_named_tensors(b, GDL_PARAMS_AND_BUFFERS, nb, tb, 64)) return 0;
    for (i = 0; i < n; i++)
        if (strcmp(na[i], nb[i]) || ta[i]->numel != tb[i]->numel ||
            memcmp(ta[i]->data, tb[i]->data, sizeof(float) * (size_t)ta[i]->numel))
            return 0;
    return 1;
}

TEST test_save_load_model(void) {
    gdl_module *a = small_net(5), *b = small_net(6);
    gdl_st_file f;
    char path[256];
    tmp_path(path, sizeof path, "model.safetensors");
    ASSERT(!same_params(a, b));
    ASSERT_EQ(0, gdl_save_model(a, path));
    ASSERT_EQ(0, gdl_st_read(path, &f));
    ASSERT_NOT_NULL(gdl_st_find(&f, "0.weight"));
    ASSERT_NOT_NULL(gdl_st_find(&f, "1.running_mean"));
    ASSERT_NOT_NULL(gdl_st_find(&f, "4.bias"));
    ASSERT_STR_EQ("F32", gdl_st_find(&f, "0.weight")->dtype);
    ASSERT_EQ(16, gdl_st_find(&f, "0.weight")->shape[0]);
    gdl_st_free(&f);
    ASSERT_EQ(0, gdl_load_model(b, path));
    ASSERT(same_params(a, b));
    remove(path);
    gdl_module_free(a);
    gdl_module_free(b);
    PASS();
}

/* a model whose state must not change when a load fails */
TEST test_load_refuses_and_changes_nothing(void) {
    gdl_module *a = small_net(5), *b = small_net(6), *other, *copy;
    char path[256], path2[256];
    FILE *f;
    gdl_module *l2[2];
    tmp_path(path, sizeof path, "ref.safetensors");
    tmp_path(path2, sizeof path2, "other.safetensors");
    ASSERT_EQ(0, gdl_save_model(a, path));
    copy = small_net(6); /* b's twin, to compare against */
    /* a different architecture: shapes differ */
    l2[0] = gdl_nn_linear(4, 8, 1);
    l2[1] = gdl_nn_linear(8, 3, 1);
    other = gdl_nn_sequential(2, l2);
    ASSERT_EQ(0, gdl_save_model(other, path2));
    ASSERT_EQ(-1, gdl_load_model(b, path2));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_load_model");
    ASSERT(same_params(b, copy));
    ASSERT_EQ(-1, gdl_load_model(other, path)); /* the file has tensors the model lacks */
    ASSERT_CONTAINS(gdl_last_error(), "unexpected tensor");
    /* truncated file */
    ASSERT_NOT_NULL(f = fopen(path2, "wb"));
    fwrite("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":", 1, 13, f);
    fclose(f);
    ASSERT_EQ(-1, gdl_load_model(b, path2));
    ASSERT(same_params(b, copy));
    ASSERT_EQ(-1, gdl_load_model(b, "build/no-such-file.safetensors"));
    ASSERT(same_params(b, copy));
    remove(path);
    remove(path2);
    gdl_module_free(a);
    gdl_module_free(b);
    gdl_module_free(copy);
    gdl_module_free(other);
    PASS();
}

/* Files of the wrong kind get a message that says which kind and what to call instead. */
TEST test_load_wrong_kind_messages(void) {
    gdl_module *a = small_net(5), *b = small_net(6);
    gdl_optimizer *adam = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0), *sgd = gdl_sgd_new(0.1, 0.9, 0, 0, 0);
    char ck[256], mf[256];
    ASSERT_NOT_NULL(adam);
    ASSERT_NOT_NULL(sgd);
    ASSERT_EQ(0, gdl_optim_add_module(adam, a, 0));
    ASSERT_EQ(0, gdl_optim_add_module(sgd, b, 0));
    tmp_path(ck, sizeof ck, "adam.safetensors");
    tmp_path(mf, sizeof mf, "model.safetensors");
    ASSERT_EQ(0, gdl_checkpoint_save(a, adam, NULL, 1, ck));
    ASSERT_EQ(0, gdl_save_model(a, mf));
    /* an Adam checkpoint into SGD */
    ASSERT_EQ(-1, gdl_checkpoint_load(b, sgd, NULL, NULL, ck));
    ASSERT_CONTAINS(gdl_last_error(), "optimizer state 'optim.state.");
    ASSERT_CONTAINS(gdl_last_error(), "another kind of optimizer");
    /* a checkpoint into gdl_load_model */
    ASSERT_EQ(-1, gdl_load_model(b, ck));
    ASSERT_CONTAINS(gdl_last_error(), "this is a training checkpoint");
    ASSERT_CONTAINS(gdl_last_error(), "gdl_checkpoint_load");
    /* a model file into gdl_checkpoint_load */
    ASSERT_EQ(-1, gdl_checkpoint_load(b, NULL, NULL, NULL, mf));
    ASSERT_CONTAINS(gdl_last_error(), "not a gpudl training checkpoint (a model file saved with gdl_save_model loads "
                                      "with gdl_load_model)");
    remove(ck);
    remove(mf);
    gdl_optim_free(adam);
    gdl_optim_free(sgd);
    gdl_module_free(a);
    gdl_module_free(b);
    PASS();
}

TEST test_failed_save_keeps_previous_file(void) {
    gdl_module *a = small_net(5), *b = small_net(6), *c = small_net(7);
    char path[256];
    tmp_path(path, sizeof path, "keep.safetensors");
    ASSERT_EQ(0, gdl_save_model(a, path));
    ASSERT_EQ(-1, gdl_save_model(b, "build/no-such-dir/x.safetensors"));
    ASSERT_EQ(-1, gdl_save_model(b, "build")); /* a directory */
    ASSERT_EQ(0, gdl_load_model(c, path));
    ASSERT(same_params(a, c));
    remove(path);
    gdl_module_free(a);
    gdl_module_free(b);
    gdl_module_free(c);
    PASS();
}

/* a loss of ~64: times a scale near 2^127 it overflows */
static gdl_tensor *big_loss(gdl_tensor *out, gdl_tensor *y, void *user) {
    (void)user;
    return gdl_mul_scalar(gdl_cross_entropy(out, y), 64.0);
}

/* trains epochs [from, to) of a fixed run (with a GradScaler when sc); returns 0 */
static int run_epochs_scaled(gdl_module *m, gdl_optimizer *opt, gdl_scheduler *s, gdl_loader *l, int from, int to,
                             gdl_grad_scaler *sc) {
    gdl_fit_opts o = gdl_fit_defaults();
    o.epochs = to - from;
    o.verbose = 0;
    o.scheduler = s;
    o.scaler = sc;
    if (sc) o.loss = big_loss;
    gdl_loader_set_epoch(l, (uint64_t)from);
    return gdl_fit(m, l, opt, &o, NULL);
}
static int run_epochs(gdl_module *m, gdl_optimizer *opt, gdl_scheduler *s, gdl_loader *l, int from, int to) {
    gdl_fit_opts o = gdl_fit_defaults();
    o.epochs = to - from;
    o.verbose = 0;
    o.scheduler = s;
    gdl_loader_set_epoch(l, (uint64_t)from);
    return gdl_fit(m, l, opt, &o, NULL);
}

TEST test_resume_is_exact(void) {
    gdl_dataset *tr = blobs(200, 4);
    gdl_loader *la = loader(tr, 1), *lb = loader(tr, 1);
    gdl_module *a = small_net(9), *b = small_net(10);
    gdl_optimizer *oa = gdl_adamw_new(1e-2, 0.9, 0.999, 1e-8, 1e-2), *ob = gdl_adamw_new(1e-2, 0.9, 0.999, 1e-8, 1e-2);
    gdl_scheduler *sa, *sb;
    char path[256];
    int64_t epoch = -1;
    tmp_path(path, sizeof path, "ckpt.safetensors");
    gdl_optim_add_module(oa, a, 1);
    gdl_optim_add_module(ob, b, 1);
    sa = gdl_steplr_new(oa, 1, 0.7);
    sb = gdl_steplr_new(ob, 1, 0.7);
    /* the uninterrupted run, with a checkpoint after epoch 2 */
    gdl_manual_seed(123);
    ASSERT_EQ(0, run_epochs(a, oa, sa, la, 0, 2));
    ASSERT_EQ(0, gdl_checkpoint_save(a, oa, sa, 2, path));
    ASSERT_EQ(0, run_epochs(a, oa, sa, la, 2, 4));
    /* a fresh process's view: other weights, other RNG state; then resume */
    gdl_manual_seed(999);
    ASSERT_EQ(0, gdl_checkpoint_load(b, ob, sb, &epoch, path));
    ASSERT_EQ(2, epoch);
    ASSERT_EQ(0, run_epochs(b, ob, sb, lb, (int)epoch, 4));
    ASSERT(same_params(a, b)); /* bit for bit */
    ASSERT_IN_RANGE(gdl_optim_get_lr(oa, 0), gdl_optim_get_lr(ob, 0), 0);
    remove(path);
    gdl_scheduler_free(sa);
    gdl_scheduler_free(sb);
    gdl_optim_free(oa);
    gdl_optim_free(ob);
    gdl_module_free(a);
    gdl_module_free(b);
    gdl_loader_free(la);
    gdl_loader_free(lb);
    gdl_dataset_free(tr);
    PASS();
}

/* the same with a GradScaler whose state matters (it grows every 2 clean steps and overflows now and then: a
   resumed run with a fresh scaler ends elsewhere unless the checkpoint restores the scale and tracker) */
TEST test_resume_with_scaler_is_exact(void) {
    gdl_dataset *tr = blobs(200, 4);
    gdl_loader *la = loader(tr, 1), *lb = loader(tr, 1);
    gdl_module *a = small_net(9), *b = small_net(10);
    gdl_optimizer *oa = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 0), *ob = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 0);
    gdl_grad_scaler_opts so = gdl_grad_scaler_defaults();
    gdl_grad_scaler *ca, *cb;
    char path[256];
    int64_t epoch = -1;
    so.init_scale = 0x1p118;
    so.growth_interval = 2;
    ASSERT_NOT_NULL(ca = gdl_grad_scaler_new(&so));
    ASSERT_NOT_NULL(cb = gdl_grad_scaler_new(NULL));
    tmp_path(path, sizeof path, "ckpt_scaler.safetensors");
    gdl_optim_add_module(oa, a, 0);
    gdl_optim_add_module(ob, b, 0);
    gdl_manual_seed(123);
    ASSERT_EQ(0, run_epochs_scaled(a, oa, NULL, la, 0, 2, ca));
    ASSERT_EQ(0, gdl_checkpoint_save(a, oa, NULL, 2, path));
    ASSERT_LT(gdl_grad_scaler_get_scale(ca), 0x1p125); /* it overflowed */
    ASSERT_EQ(0, run_epochs_scaled(a, oa, NULL, la, 2, 4, ca));
    gdl_manual_seed(999);
    ASSERT_EQ(0, gdl_optim_set_grad_scaler(ob, cb));
    ASSERT_EQ(0, gdl_checkpoint_load(b, ob, NULL, &epoch, path));
    ASSERT_EQ(0, run_epochs_scaled(b, ob, NULL, lb, (int)epoch, 4, cb));
    ASSERT(same_params(a, b)); /* bit for bit */
    ASSERT_IN_RANGE(gdl_grad_scaler_get_scale(ca), gdl_grad_scaler_get_scale(cb), 0);
    ASSERT_EQ(gdl_grad_scaler_get_growth_tracker(ca), gdl_grad_scaler_get_growth_tracker(cb));
    remove(path);
    gdl_optim_free(oa);
    gdl_optim_free(ob);
    gdl_grad_scaler_free(ca);
    gdl_grad_scaler_free(cb);
    gdl_module_free(a);
    gdl_module_free(b);
    gdl_loader_free(la);
    gdl_loader_free(lb);
    gdl_dataset_free(tr);
    PASS();
}

TEST test_checkpoint_refuses_bad_scheduler_position(void) {
    /* a OneCycle position past the new schedule's end: refused before anything changes */
    gdl_module *a = small_net(9), *b = small_net(10), *copy = small_net(10);
    gdl_optimizer *oa = gdl_sgd_new(0.1, 0.9, 0, 0, 0), *ob = gdl_sgd_new(0.1, 0.9, 0, 0, 0);
    gdl_scheduler *sa, *sb;
    char path[256];
    int i;
    double lr0;
    tmp_path(path, sizeof path, "ckpt3.safetensors");
    gdl_optim_add_module(oa, a, 0);
    gdl_optim_add_module(ob, b, 0);
    sa = gdl_onecycle_lr_new(oa, 0.5, 20);
    sb = gdl_onecycle_lr_new(ob, 0.5, 10);
    for (i = 0; i < 12; i++) gdl_scheduler_step(sa);
    ASSERT_EQ(0, gdl_checkpoint_save(a, oa, sa, 1, path));
    lr0 = gdl_optim_get_lr(ob, 0);
    ASSERT_EQ(-1, gdl_checkpoint_load(b, ob, sb, NULL, path));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_checkpoint_load");
    ASSERT(same_params(b, copy));
    ASSERT_EQ(0, gdl_scheduler_get_last_epoch(sb));
    ASSERT_IN_RANGE(lr0, gdl_optim_get_lr(ob, 0), 0);
    remove(path);
    gdl_scheduler_free(sa);
    gdl_scheduler_free(sb);
    gdl_optim_free(oa);
    gdl_optim_free(ob);
    gdl_module_free(a);
    gdl_module_free(b);
    gdl_module_free(copy);
    PASS();
}

/* src rewritten to dst with metadata key's value replaced by val (a crafted, damaged checkpoint) */
static int rewrite_meta(const char *src, const char *dst, const char *key, const char *val) {
    gdl_st_file f;
    gdl_st_tensor t[64];
    const char *k[128], *v[128];
    int i, rc, found = 0;
    if (gdl_st_read(src, &f) < 0) return -1;
    if (f.n > 64 || f.n_meta > 128) {
        gdl_st_free(&f);
        return -1;
    }
    for (i = 0; i < f.n; i++) {
        t[i].name = f.entries[i].name;
        t[i].dtype = f.entries[i].dtype;
        t[i].ndim = f.entries[i].ndim;
        t[i].shape = f.entries[i].shape;
        t[i].data = f.data + f.entries[i].begin;
    }
    for (i = 0; i < f.n_meta; i++) {
        k[i] = f.meta_keys[i];
        v[i] = strcmp(k[i], key) == 0 ? (found = 1, val) : f.meta_vals[i];
    }
    rc = found ? gdl_st_write(dst, f.n, t, f.n_meta, k, v) : -1;
    gdl_st_free(&f);
    return rc;
}

/* Every metadata value of a checkpoint is checked (finite, integral where a count is meant, in its type's
   range, non-negative where it must be) before anything is cast or restored: a damaged value fails the
   load with an error naming it, and the model, optimizer, scheduler, epoch and generator are untouched. */
TEST test_checkpoint_refuses_damaged_metadata(void) {
    static const char *const bad[][2] = {
        {"epoch", "1e300"}, {"epoch", "-1e300"}, {"epoch", "nan"}, {"epoch", "2.5"},
        {"optim.step", "1e300"}, {"optim.step", "-1"}, {"optim.step", "inf"}, {"optim.step", "1.5"},
        {"optim.groups", "1e300"}, {"optim.groups", "-1e300"}, {"optim.groups", "nan"},
        {"optim.lr.0", "inf"}, {"optim.lr.0", "nan"}, {"optim.lr.0", "-1"},
        {"optim.momentum.0", "inf"}, {"optim.momentum.0", "1"},
        {"sched.last_epoch", "1e300"}, {"sched.last_epoch", "-1"}, {"sched.last_epoch", "0.5"},
        {"rng.seed", "-1"}, {"rng.counter", "99999999999999999999999"}};
    gdl_module *a = small_net(9), *b = small_net(10), *copy = small_net(10);
    gdl_optimizer *oa = gdl_sgd_new(0.1, 0.9, 0, 0, 0), *ob = gdl_sgd_new(0.3, 0.5, 0, 0, 0);
    gdl_scheduler *sa, *sb;
    char path[256], bad_path[256];
    int64_t epoch = 77;
    uint64_t seed, counter, seed2, counter2;
    size_t i;
    tmp_path(path, sizeof path, "ckpt_meta.safetensors");
    tmp_path(bad_path, sizeof bad_path, "ckpt_meta_bad.safetensors");
    gdl_optim_add_module(oa, a, 0);
    gdl_optim_add_module(ob, b, 0);
    sa = gdl_steplr_new(oa, 2, 0.5);
    sb = gdl_steplr_new(ob, 3, 0.9);
    for (i = 0; i < 5; i++) gdl_scheduler_step(sa);
    ASSERT_EQ(0, gdl_optim_set_step(oa, 12));
    ASSERT_EQ(0, gdl_optim_set_step(ob, 7));
    ASSERT_EQ(0, gdl_checkpoint_save(a, oa, sa, 4, path));
    gdl_manual_seed(4321);
    seed = gdl_rng_get_state(&counter);
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_EQ(0, rewrite_meta(path, bad_path, bad[i][0], bad[i][1]));
        ASSERT_EQ(-1, gdl_checkpoint_load(b, ob, sb, &epoch, bad_path));
        ASSERT_CONTAINS(gdl_last_error(), "gdl_checkpoint_load");
        if (strncmp(bad[i][0], "optim.", 6) != 0 || !strcmp(bad[i][0], "optim.step"))
            ASSERT_CONTAINS(gdl_last_error(), bad[i][0]);
        ASSERT(same_params(b, copy));
        ASSERT_EQ(7, gdl_optim_get_step(ob));
        ASSERT_IN_RANGE(0.3, gdl_optim_get_lr(ob, 0), 0);
        ASSERT_IN_RANGE(0.5, gdl_optim_get_momentum(ob, 0), 0);
        ASSERT_EQ(0, gdl_scheduler_get_last_epoch(sb));
        ASSERT_EQ(77, epoch);
        seed2 = gdl_rng_get_state(&counter2);
        ASSERT_EQ(seed, seed2);
        ASSERT_EQ(counter, counter2);
    }
    ASSERT_EQ(0, rewrite_meta(path, bad_path, "epoch", "5")); /* the same route with sound values loads */
    ASSERT_EQ(0, gdl_checkpoint_load(b, ob, sb, &epoch, bad_path));
    ASSERT_EQ(5, epoch);
    ASSERT_EQ(12, gdl_optim_get_step(ob));
    ASSERT_EQ(5, gdl_scheduler_get_last_epoch(sb));
    ASSERT(same_params(a, b));
    remove(path);
    remove(bad_path);
    gdl_scheduler_free(sa);
    gdl_scheduler_free(sb);
    gdl_optim_free(oa);
    gdl_optim_free(ob);
    gdl_module_free(a);
    gdl_module_free(b);
    gdl_module_free(copy);
    PASS();
}

TEST test_checkpoint_refuses_mismatch(void) {
    gdl_module *a = small_net(9), *b = small_net(10), *copy = small_net(10);
    gdl_optimizer *oa = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0), *ob = gdl_sgd_new(0.1, 0.9, 0, 0, 0);
    char path[256];
    tmp_path(path, sizeof path, "ckpt2.safetensors");
    gdl_optim_add_module(oa, a, 0);
    gdl_optim_add_module(ob, b, 0);
    ASSERT_EQ(0, gdl_checkpoint_save(a, oa, NULL, 1, path));
    ASSERT_EQ(-1, gdl_checkpoint_load(b, ob, NULL, NULL, path)); /* Adam state into SGD */
    ASSERT_CONTAINS(gdl_last_error(), "gdl_checkpoint_load");
    ASSERT(same_params(b, copy));
    ASSERT_EQ(0, gdl_save_model(a, path)); /* a model file is not a training checkpoint */
    ASSERT_EQ(-1, gdl_checkpoint_load(b, NULL, NULL, NULL, path));
    ASSERT_CONTAINS(gdl_last_error(), "missing");
    ASSERT(same_params(b, copy));
    remove(path);
    gdl_optim_free(oa);
    gdl_optim_free(ob);
    gdl_module_free(a);
    gdl_module_free(b);
    gdl_module_free(copy);
    PASS();
}

TEST test_fashion_mnist_one_epoch(void) {
    gdl_dataset *all = gdl_dataset_fashion_mnist(NULL, 1), *sub, *test;
    gdl_loader *tl, *vl;
    gdl_module *l[4], *m;
    gdl_optimizer *opt;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_fit_opts fo = gdl_fit_defaults();
    gdl_epoch_stats h[1];
    if (!all) SKIPm("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)");
    sub = gdl_dataset_subset(all, 0, 10000);
    test = gdl_dataset_fashion_mnist(NULL, 0);
    ASSERT(sub && test);
    lo.batch_size = 64;
    lo.shuffle = 1;
    tl = gdl_loader_new(sub, &lo);
    lo.batch_size = 1000;
    lo.shuffle = 0;
    vl = gdl_loader_new(test, &lo);
    gdl_manual_seed(0);
    l[0] = gdl_nn_flatten(1);
    l[1] = gdl_nn_linear(784, 128, 1);
    l[2] = gdl_nn_relu();
    l[3] = gdl_nn_linear(128, 10, 1);
    m = gdl_nn_sequential(4, l);
    opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0);
    gdl_optim_add_module(opt, m, 0);
    fo.verbose = 0;
    fo.val = vl;
    ASSERT_EQ(0, gdl_fit(m, tl, opt, &fo, h));
    printf("\n    one epoch on 10k: test accuracy %.2f%%\n", 100 * h[0].val_accuracy);
    ASSERT_GT(h[0].val_accuracy, 0.75);
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_loader_free(tl);
    gdl_loader_free(vl);
    gdl_dataset_free(all);
    gdl_dataset_free(sub);
    gdl_dataset_free(test);
    PASS();
}

static void reset(void *u) {
    (void)u;
    gdl_arena_reset();
    gdl_clear_error();
}

/* gdl_fit with a GradScaler: with a scale of 2^16 every gradient is the unscaled one times 2^16 exactly, so
   the weights equal an unscaled run's bit for bit (gradient clipping after the unscale included); a scale of
   2^127 and a loss of ~64 overflow: the steps are skipped and the scale backs off until it fits; the scaler's state is in
   gdl_fit's checkpoints */
static int fit_scaled(gdl_grad_scaler *s, float *w, const char *ckdir) {
    gdl_dataset *tr = blobs(200, 1);
    gdl_loader *tl = loader(tr, 1);
    gdl_module *m = small_net(3);
    gdl_optimizer *opt = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 0);
    gdl_fit_opts o = gdl_fit_defaults();
    gdl_tensor *p[8];
    int rc = -1, n, i;
    int64_t off = 0;
    if (!tr || !tl || !m || !opt || gdl_optim_add_module(opt, m, 0) < 0) goto out;
    o.epochs = 2;
    o.verbose = 0;
    o.clip_grad_norm = 1.0;
    o.scaler = s;
    if (ckdir) { /* a loss of ~64 times 2^127 overflows */
        o.loss = big_loss;
        o.checkpoint_dir = ckdir;
        o.checkpoint_every = 5;
    }
    if (gdl_fit(m, tl, opt, &o, NULL) < 0) goto out;
    n = gdl_module_named_tensors(m, GDL_PARAMS, NULL, p, 8);
    for (i = 0; i < n && i < 8; i++) {
        if (gdl_copy_to_host(p[i], w + off, sizeof(float) * (size_t)p[i]->numel) < 0) goto out;
        off += p[i]->numel;
    }
    rc = (int)off;
out:
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_loader_free(tl);
    gdl_dataset_free(tr);
    return rc;
}

TEST test_fit_grad_scaler(void) {
    static float a[256], b[256], c[256];
    gdl_grad_scaler_opts so = gdl_grad_scaler_defaults();
    gdl_grad_scaler *s = gdl_grad_scaler_new(NULL), *big;
    char ck[256];
    gdl_st_file f;
    int n, i, found = 0;
    ASSERT_NOT_NULL(s);
    ASSERT_GT(n = fit_scaled(NULL, a, NULL), 0);
    ASSERT(n <= 256);
    ASSERT_EQ(n, fit_scaled(s, b, NULL));
    ASSERT_EQ(0, memcmp(a, b, sizeof(float) * (size_t)n));
    ASSERT_IN_RANGE(65536.0, gdl_grad_scaler_get_scale(s), 0);
    ASSERT_EQ(14, gdl_grad_scaler_get_growth_tracker(s)); /* 2 epochs of 7 batches, no overflow */
    so.init_scale = 0x1p127;
    ASSERT_NOT_NULL(big = gdl_grad_scaler_new(&so));
    tmp_path(ck, sizeof ck, "scaler_ckpt");
    ASSERT_EQ(n, fit_scaled(big, c, ck));
    ASSERT_LT(gdl_grad_scaler_get_scale(big), 0x1p127);
    for (i = 0; i < n; i++) ASSERT(isfinite(c[i]));
    strcat(ck, "/gdl_fit.safetensors");
    ASSERT_EQ(0, gdl_st_read(ck, &f));
    for (i = 0; i < f.n_meta; i++) found += !strcmp(f.meta_keys[i], "scaler.scale") || !strcmp(f.meta_keys[i], "scaler.growth_tracker");
    gdl_st_free(&f);
    ASSERT_EQ(2, found);
    remove(ck);
    gdl_grad_scaler_free(s);
    gdl_grad_scaler_free(big);
    PASS();
}

/* n images [1,6,6] of three classes (0: a horizontal bar, 1: a vertical bar, 2: a diagonal) at random
   places, with noise; f32 */
static gdl_dataset *bars(int64_t n, uint64_t seed) {
    float *x = (float *)malloc(sizeof(float) * (size_t)n * 36);
    int32_t *y = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    int64_t i, shape[3] = {1, 6, 6};
    gdl_dataset *ds;
    gdl_manual_seed(seed);
    for (i = 0; i < n; i++) {
        int c = (int)(gdl_rng_next_u64() % 3), at = (int)(gdl_rng_next_u64() % 6), k;
        float *im = x + i * 36;
        for (k = 0; k < 36; k++) im[k] = (float)(0.3 * gdl_rng_uniform());
        for (k = 0; k < 6; k++) im[c == 0 ? at * 6 + k : c == 1 ? k * 6 + at : k * 6 + k] += 1.0f;
        y[i] = c;
    }
    ds = gdl_dataset_from_arrays(x, GDL_F32, 3, shape, y, n, 3);
    free(x);
    free(y);
    return ds;
}

static gdl_module *bars_net(uint64_t seed) {
    gdl_manual_seed(seed);
    return gdl_nn_sequential(5, (gdl_module *[]){gdl_nn_flatten(1), gdl_nn_linear(36, 32, 1), gdl_nn_batchnorm1d(32),
                                                 gdl_nn_relu(), gdl_nn_linear(32, 3, 1)});
}

/* Test-time flips: on flatten + linear, averaging the outputs on x and on x mirrored is the same as one
   pass through a linear whose weight is the mean of W and W with each row's columns mirrored. */
TEST test_evaluate_tta_hflip(void) {
    gdl_dataset *va = bars(64, 4);
    gdl_loader *vl = loader(va, 0);
    gdl_module *m, *sym;
    gdl_tensor *w, *ws, *b, *bs;
    double l0, a0, l1, a1;
    int r, c;
    gdl_manual_seed(5);
    m = gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_flatten(1), gdl_nn_linear(36, 3, 1)});
    sym = gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_flatten(1), gdl_nn_linear(36, 3, 1)});
    ASSERT(va && vl && m && sym);
    w = gdl_module_tensor(m, "1.weight"), ws = gdl_module_tensor(sym, "1.weight");
    b = gdl_module_tensor(m, "1.bias"), bs = gdl_module_tensor(sym, "1.bias");
    for (r = 0; r < 3; r++) {
        for (c = 0; c < 36; c++) {
            float *W = (float *)w->data + r * 36;
            ((float *)ws->data)[r * 36 + c] = 0.5f * (W[c] + W[c / 6 * 6 + 5 - c % 6]);
        }
        ((float *)bs->data)[r] = ((float *)b->data)[r];
    }
    ASSERT_EQ(0, gdl_evaluate_ex(m, vl, NULL, NULL, 1, &l0, &a0));
    ASSERT_EQ(0, gdl_evaluate(sym, vl, NULL, NULL, &l1, &a1));
    ASSERT_IN_RANGE(l1, l0, 1e-5);
    ASSERT_IN_RANGE(a1, a0, 1e-12);
    ASSERT_EQ(0, gdl_evaluate_ex(m, vl, NULL, NULL, 0, &l0, &a0));
    ASSERTm("without the flips the loss differs", fabs(l0 - l1) > 1e-4);
    gdl_loader_free(vl);
    gdl_dataset_free(va);
    va = blobs(40, 1);
    vl = loader(va, 0);
    gdl_module_free(sym);
    sym = small_net(1);
    ASSERT_EQ(-1, gdl_evaluate_ex(sym, vl, NULL, NULL, 1, &l0, &a0));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_evaluate: tta_hflip needs image batches [B,C,H,W] or [B,H,W], got [32,4]");
    gdl_loader_free(vl);
    gdl_dataset_free(va);
    gdl_module_free(m);
    gdl_module_free(sym);
    PASS();
}

/* Early stopping: lr 0 never improves (a linear model: no running statistics either), so patience 2 stops
   after epoch 3 and the later epochs of the history are empty; a large min_delta stops a learning run the same way; mode max on the accuracy; best_path holds
   the model of the best validation loss; bad options are refused. */
TEST test_early_stopping_and_best(void) {
    gdl_dataset *tr = blobs(300, 1), *va = blobs(100, 2);
    gdl_loader *tl = loader(tr, 1), *vl = loader(va, 0);
    gdl_module *m = small_net(3), *back = small_net(4);
    gdl_optimizer *opt = gdl_sgd_new(0, 0, 0, 0, 0), *opt2 = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 0);
    gdl_fit_opts o = gdl_fit_defaults();
    gdl_epoch_stats h[8];
    char best[256];
    double bl = HUGE_VAL, l, a;
    int e, run = 0;
    gdl_module *lin = gdl_nn_linear(4, 3, 1);
    ASSERT(tr && va && tl && vl && m && opt && opt2 && back && lin);
    ASSERT_EQ(0, gdl_optim_add_module(opt, lin, 0));
    o.epochs = 8;
    o.verbose = 0;
    o.val = vl;
    o.patience = 2;
    ASSERT_EQ(0, gdl_fit(lin, tl, opt, &o, h));
    for (e = 0; e < 8; e++) run += h[e].epoch != 0;
    ASSERT_EQ(3, run);
    ASSERT_EQ(0, h[3].epoch);
    ASSERT(isnan(h[7].val_loss));
    /* learning, but never by more than min_delta 10 */
    ASSERT_EQ(0, gdl_optim_add_module(opt2, m, 0));
    o.min_delta = 10;
    ASSERT_EQ(0, gdl_fit(m, tl, opt2, &o, h));
    ASSERT_EQ(3, h[2].epoch);
    ASSERT_EQ(0, h[3].epoch);
    /* mode max on the accuracy with no min_delta runs on while it learns; best_path keeps the best loss */
    tmp_path(best, sizeof best, "best.safetensors");
    remove(best);
    o.min_delta = 0;
    o.patience = 0;
    o.best_path = best;
    o.epochs = 5;
    ASSERT_EQ(0, gdl_fit(m, tl, opt2, &o, h));
    for (e = 0; e < 5; e++) {
        ASSERT_EQ(e + 1, h[e].epoch);
        if (h[e].val_loss < bl) bl = h[e].val_loss;
    }
    ASSERT_EQ(0, gdl_load_model(back, best));
    ASSERT_EQ(0, gdl_evaluate(back, vl, NULL, NULL, &l, &a));
    ASSERT_IN_RANGE(bl, l, 1e-6);
    remove(best);
    /* a run checkpointed at the end of epoch 2 and resumed stops after epoch 3 as the uninterrupted one did:
       the patience count is in the checkpoint (without it the resumed run would stop after epoch 4) */
    {
        char dir[256], f[300];
        gdl_module *lin2 = gdl_nn_linear(4, 3, 1);
        gdl_optimizer *o3 = gdl_sgd_new(0, 0, 0, 0, 0);
        gdl_fit_opts ro = gdl_fit_defaults();
        ASSERT(lin2 && o3);
        ASSERT_EQ(0, gdl_optim_add_module(o3, lin2, 0));
        tmp_path(dir, sizeof dir, "es_ckpt");
        snprintf(f, sizeof f, "%s/gdl_fit.safetensors", dir);
        remove(f); /* a run before this one's */
        ro.verbose = 0;
        ro.val = vl;
        ro.patience = 2;
        ro.checkpoint_dir = dir;
        ro.checkpoint_every = gdl_loader_num_batches(tl);
        ro.resume = 1;
        ro.epochs = 2;
        ASSERT_EQ(0, gdl_fit(lin2, tl, o3, &ro, h));
        ro.epochs = 8;
        ASSERT_EQ(0, gdl_fit(lin2, tl, o3, &ro, h));
        ASSERT_EQ(3, h[2].epoch);
        ASSERT_EQ(0, h[3].epoch);
        remove(f);
        gdl_optim_free(o3);
        gdl_module_free(lin2);
    }
    /* errors */
    o.best_path = NULL;
    o.patience = -1;
    ASSERT_EQ(-1, gdl_fit(m, tl, opt2, &o, h));
    ASSERT_CONTAINS(gdl_last_error(), "patience -1 (>= 0)");
    o.patience = 1;
    o.mode = 7;
    ASSERT_EQ(-1, gdl_fit(m, tl, opt2, &o, h));
    ASSERT_CONTAINS(gdl_last_error(), "mode 7 (0 auto, 1 min, 2 max)");
    o.mode = GDL_MODE_AUTO;
    o.monitor = GDL_MONITOR_VAL_ACCURACY;
    o.val = NULL;
    ASSERT_EQ(-1, gdl_fit(m, tl, opt2, &o, h));
    ASSERT_CONTAINS(gdl_last_error(), "monitor the validation accuracy, which needs a validation loader (val)");
    gdl_optim_free(opt);
    gdl_optim_free(opt2);
    gdl_module_free(m);
    gdl_module_free(back);
    gdl_module_free(lin);
    gdl_loader_free(tl);
    gdl_loader_free(vl);
    gdl_dataset_free(tr);
    gdl_dataset_free(va);
    PASS();
}

/* The recipe's tools together on a short run: random crop, flip, erasing and mixup/cutmix in the loader
   (soft targets), AdamW with no decay on biases and norm weights, linear warm-up then cosine per batch, a
   weight EMA validated with flips, early stopping and the best model: the validation loss ends below 0.3
   and the accuracy above 95 %. */
TEST test_recipe_reaches_bound(void) {
    gdl_dataset *tr = bars(1200, 11), *va = bars(300, 12);
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_loader *tl, *vl = loader(va, 0);
    gdl_module *m = bars_net(13);
    gdl_optimizer *opt = gdl_adamw_new(1e-2, 0.9, 0.999, 1e-8, 0.05);
    gdl_scheduler *sch;
    gdl_ema *ema;
    gdl_fit_opts o = gdl_fit_defaults();
    gdl_epoch_stats h[8];
    lo.batch_size = 32;
    lo.shuffle = 1;
    lo.seed = 3;
    lo.num_workers = 2;
    lo.transform.crop_padding = 1;
    lo.transform.erase_p = 0.25;
    lo.transform.erase_scale[0] = 0.02, lo.transform.erase_scale[1] = 0.1;
    lo.transform.mixup_alpha = 0.2;
    lo.transform.cutmix_alpha = 1.0;
    lo.transform.num_classes = 3;
    tl = gdl_loader_new(tr, &lo);
    ASSERT(tr && va && tl && vl && m && opt);
    ASSERT_EQ(0, gdl_optim_add_module(opt, m, 1));
    ASSERT_EQ(2, gdl_optim_num_groups(opt));
    ASSERT_NOT_NULL(sch = gdl_warmup_cosine_lr_new(opt, 38, 0.1, 8 * 38 - 38, 0));
    ASSERT_NOT_NULL(ema = gdl_ema_new(opt, m, 0.9, 1));
    o.epochs = 8;
    o.verbose = 0;
    o.val = vl;
    o.val_tta_hflip = 1;
    o.scheduler = sch;
    o.scheduler_per_batch = 1;
    o.patience = 3;
    ASSERT_EQ(0, gdl_fit(m, tl, opt, &o, h));
    ASSERT_EQ(8, h[7].epoch);
    ASSERT(isnan(h[7].accuracy)); /* soft targets: no training accuracy */
    printf("    recipe, 8 epochs: val loss %.4f, val accuracy %.2f%% (EMA weights, flips)\n", h[7].val_loss,
           100 * h[7].val_accuracy);
    ASSERT_LT(h[7].val_loss, 0.3);
    ASSERT_GT(h[7].val_accuracy, 0.95);
    ASSERT_EQ(8 * 38, gdl_ema_num_updates(ema));
    gdl_ema_free(ema);
    gdl_scheduler_free(sch);
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_loader_free(tl);
    gdl_loader_free(vl);
    gdl_dataset_free(tr);
    gdl_dataset_free(va);
    PASS();
}

SUITE(fit) {
    SET_SETUP(reset, NULL);
    RUN_TEST(test_fit_learns_and_reports);
    RUN_TEST(test_fit_errors);
    RUN_TEST(test_fit_grad_scaler);
    RUN_TEST(test_loss_objects);
    RUN_TEST(test_evaluate_tta_hflip);
    RUN_TEST(test_early_stopping_and_best);
    RUN_TEST(test_recipe_reaches_bound);
    RUN_TEST(test_fashion_mnist_one_epoch);
}
/* errors of the file calls name the call the user made, not a helper underneath (gdl_st_read, gdl_st_write) */
static enum harness_result starts_with(const char *s, const char *prefix) {
    ASSERTm(s, strncmp(s, prefix, strlen(prefix)) == 0);
    PASS();
}

TEST test_file_errors_name_the_call(void) {
    static const char missing[] = "no-such-dir-gpudl/x.safetensors";
    gdl_module *a = small_net(5), *q;
    gdl_optimizer *opt = gdl_sgd_new(0.1, 0.9, 0, 0, 0);
    char bad[256];
    FILE *f;
    ASSERT_NOT_NULL(a);
    ASSERT_NOT_NULL(opt);
    ASSERT_EQ(0, gdl_optim_add_module(opt, a, 0));
    ASSERT_EQ(-1, gdl_load_model(a, missing));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_load_model: no-such-dir-gpudl/x.safetensors: cannot open"));
    ASSERT_EQ(-1, gdl_save_model(a, missing));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_save_model: no-such-dir-gpudl/x.safetensors: "));
    ASSERT_EQ(-1, gdl_checkpoint_load(a, opt, NULL, NULL, missing));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_checkpoint_load: no-such-dir-gpudl/x.safetensors: cannot open"));
    ASSERT_EQ(-1, gdl_checkpoint_save(a, opt, NULL, 0, missing));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_checkpoint_save: no-such-dir-gpudl/x.safetensors: "));
    /* a damaged file: the parser's message under the public name */
    tmp_path(bad, sizeof bad, "short.safetensors");
    ASSERT_NOT_NULL(f = fopen(bad, "wb"));
    fputs("abc", f);
    fclose(f);
    ASSERT_EQ(-1, gdl_load_model(a, bad));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_load_model: "));
    ASSERT_CONTAINS(gdl_last_error(), "too short");
    ASSERT_EQ(-1, gdl_checkpoint_load(a, opt, NULL, NULL, bad));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_checkpoint_load: "));
    remove(bad);
    /* quantized models' files */
    ASSERT_NOT_NULL(q = gdl_quantize_dynamic(a, NULL));
    ASSERT_EQ(-1, gdl_quant_load(q, missing));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_quant_load: no-such-dir-gpudl/x.safetensors: cannot open"));
    ASSERT_EQ(-1, gdl_quant_save(q, missing));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_quant_save: "));
    gdl_module_free(q);
    gdl_optim_free(opt);
    gdl_module_free(a);
    PASS();
}

/* gdl_save_checkpoint / gdl_load_checkpoint (path first) are deprecated spellings of gdl_checkpoint_save /
   gdl_checkpoint_load: the same files both ways, their errors under their own names */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
TEST test_deprecated_checkpoint_spellings(void) {
    gdl_module *a = small_net(5), *b = small_net(6);
    gdl_optimizer *oa = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0), *ob = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0);
    gdl_tensor *ta[16], *tb[16];
    char p1[256], p2[256];
    int64_t epoch = 0;
    int n, i;
    ASSERT(a && b && oa && ob);
    ASSERT_EQ(0, gdl_optim_add_module(oa, a, 0));
    ASSERT_EQ(0, gdl_optim_add_module(ob, b, 0));
    tmp_path(p1, sizeof p1, "old_spelling.safetensors");
    tmp_path(p2, sizeof p2, "new_spelling.safetensors");
    ASSERT_EQ(0, gdl_save_checkpoint(p1, a, oa, NULL, 4));
    ASSERT_EQ(0, gdl_checkpoint_load(b, ob, NULL, &epoch, p1));
    ASSERT_EQ(4, epoch);
    n = gdl_module_named_tensors(a, GDL_PARAMS_AND_BUFFERS, NULL, ta, 16);
    ASSERT_EQ(n, gdl_module_named_tensors(b, GDL_PARAMS_AND_BUFFERS, NULL, tb, 16));
    for (i = 0; i < n; i++) ASSERT_EQ(0, memcmp(ta[i]->data, tb[i]->data, sizeof(gdl_real) * (size_t)ta[i]->numel));
    ASSERT_EQ(0, gdl_checkpoint_save(a, oa, NULL, 7, p2));
    ASSERT_EQ(0, gdl_load_checkpoint(p2, b, ob, NULL, &epoch));
    ASSERT_EQ(7, epoch);
    ASSERT_EQ(-1, gdl_load_checkpoint("no-such-dir-gpudl/x.safetensors", b, ob, NULL, NULL));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_load_checkpoint: "));
    ASSERT_EQ(-1, gdl_save_checkpoint("no-such-dir-gpudl/x.safetensors", a, oa, NULL, 0));
    CHECK_CALL(starts_with(gdl_last_error(), "gdl_save_checkpoint: "));
    remove(p1);
    remove(p2);
    gdl_optim_free(oa);
    gdl_optim_free(ob);
    gdl_module_free(a);
    gdl_module_free(b);
    PASS();
}
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic pop
#endif

SUITE(checkpoints) {
    SET_SETUP(reset, NULL);
    RUN_TEST(test_save_load_model);
    RUN_TEST(test_load_refuses_and_changes_nothing);
    RUN_TEST(test_load_wrong_kind_messages);
    RUN_TEST(test_failed_save_keeps_previous_file);
    RUN_TEST(test_resume_is_exact);
    RUN_TEST(test_resume_with_scaler_is_exact);
    RUN_TEST(test_checkpoint_refuses_mismatch);
    RUN_TEST(test_checkpoint_refuses_damaged_metadata);
    RUN_TEST(test_checkpoint_refuses_bad_scheduler_position);
    RUN_TEST(test_file_errors_name_the_call);
    RUN_TEST(test_deprecated_checkpoint_spellings);
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(fit);
    RUN_SUITE(checkpoints);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
