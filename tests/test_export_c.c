/* test_export_c.c — gdl_export_c (a model as one C99 file for a microcontroller).
   Three uses, tests/test_mcu.sh runs them all:
     test_export_c                the refusals (harness tests): an op without a C form named, a model in
                                  training mode, an unwritable path, INT8 softmax, libm ops under no_libm,
                                  dynamic and observed layers; nothing left at the path by a failure
     test_export_c make DIR [N]   trains the Fashion-MNIST MLP (784-128-10) and a small CNN on N training
                                  images (default 6000), quantizes both (static PTQ), and writes to DIR for
                                  each of mlp_f32, mlp_int8, cnn_f32, cnn_int8: the exported NAME.h, NAME_data.h
                                  (100 test images in the net's input form, their labels, glue macros for
                                  examples/mcu/main.c) and NAME_ref.txt (gpudl's own outputs); and zoo_f32,
                                  a fixed-seed net of every other f32 op (depthwise and strided convolutions,
                                  BatchNorm, LeakyReLU, Sigmoid, average pooling, a residual BasicBlock,
                                  softmax by polynomial), whose images are random
     test_export_c check REF RUN  compares RUN (main.c's output: the raw outputs in hex) with REF: f32 within
                                  1e-5 of the row's largest |output|, INT8 within one quantization step */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

#define NTEST 100

/* ---- the refusals ---- */

static int file_exists(const char *p) {
    FILE *f = fopen(p, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* eval-mode Sequential of n modules */
static gdl_module *seq_eval(int n, gdl_module *const *mods) {
    gdl_module *m = gdl_nn_sequential(n, mods);
    if (m) gdl_module_train(m, 0);
    return m;
}

/* the export of m must fail with an error holding want, and leave path as it was (absent) */
static enum harness_result refused(gdl_module *m, int ndim, const int64_t *shape, const gdl_export_c_opts *o,
                                   const char *want) {
    const char *path = harness_tmp("refused.h");
    int rc;
    remove(path);
    rc = gdl_export_c(m, ndim, shape, path, o, NULL);
    gdl_module_free(m);
    ASSERT_EQ(-1, rc);
    ASSERT_CONTAINS(gdl_last_error(), want);
    ASSERT_FALSE(file_exists(path));
    PASS();
}

TEST refuses_unsupported_op(void) {
    gdl_module *m = seq_eval(3, (gdl_module *[]){gdl_nn_linear(4, 8, 1), gdl_nn_layernorm(8), gdl_nn_linear(8, 2, 1)});
    CHECK_CALL(refused(m, 2, (int64_t[]){1, 4}, NULL, "LayerNorm '1' has no form in the C export"));
    m = seq_eval(2, (gdl_module *[]){gdl_nn_embedding(10, 4), gdl_nn_flatten(1)});
    CHECK_CALL(refused(m, 2, (int64_t[]){1, 3}, NULL, "Embedding '0'"));
    m = seq_eval(2, (gdl_module *[]){gdl_nn_batchnorm1d(4), gdl_nn_linear(4, 2, 1)});
    CHECK_CALL(refused(m, 2, (int64_t[]){1, 4}, NULL, "BatchNorm1d '0' has no form"));
    PASS();
}

TEST refuses_training_mode(void) {
    gdl_module *m = gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_linear(4, 8, 1), gdl_nn_dropout(0.5)});
    CHECK_CALL(refused(m, 2, (int64_t[]){1, 4}, NULL, "in training mode"));
    m = seq_eval(2, (gdl_module *[]){gdl_nn_linear(4, 8, 1), gdl_nn_batchnorm1d(8)});
    gdl_module_train(gdl_module_child(m, "1"), 1); /* one child left training */
    CHECK_CALL(refused(m, 2, (int64_t[]){1, 4}, NULL, "BatchNorm1d '1' is in training mode"));
    PASS();
}

TEST refuses_bad_arguments(void) {
    gdl_export_c_opts o = gdl_export_c_defaults();
    gdl_module *m = seq_eval(1, (gdl_module *[]){gdl_nn_linear(4, 2, 1)});
    CHECK_CALL(refused(m, 2, (int64_t[]){2, 4}, NULL, "batch other than 1"));
    o.name = "9lives";
    m = seq_eval(1, (gdl_module *[]){gdl_nn_linear(4, 2, 1)});
    CHECK_CALL(refused(m, 2, (int64_t[]){1, 4}, &o, "C identifier"));
    m = seq_eval(1, (gdl_module *[]){gdl_nn_linear(4, 2, 1)});
    CHECK_CALL(refused(m, 2, (int64_t[]){1, 5}, NULL, "Linear '0' expects an input [..., 4]"));
    m = seq_eval(1, (gdl_module *[]){gdl_nn_sigmoid()});
    o = gdl_export_c_defaults();
    o.no_libm = 1;
    CHECK_CALL(refused(m, 2, (int64_t[]){1, 4}, &o, "Sigmoid '0' has no form in the C export: it needs libm"));
    m = seq_eval(1, (gdl_module *[]){gdl_nn_identity()});
    CHECK_CALL(refused(m, 2, (int64_t[]){1, 4}, NULL, "computes nothing"));
    PASS();
}

/* a calibrated static INT8 copy of m (random calibration data of shape [8, in]) */
static gdl_module *static_int8(gdl_module *m, int64_t in) {
    gdl_module *p = gdl_quant_prepare(m, NULL), *q;
    gdl_tensor *x = gdl_randn(2, (int64_t[]){8, in}, gdl_cpu());
    gdl_module_train(p, 0);
    gdl_forward(p, x);
    q = gdl_quant_convert(p);
    gdl_module_free(p);
    gdl_arena_reset();
    if (q) gdl_module_train(q, 0);
    return q;
}

TEST refuses_quantized_forms(void) {
    gdl_export_c_opts o = gdl_export_c_defaults();
    gdl_module *f = seq_eval(3, (gdl_module *[]){gdl_nn_linear(4, 8, 1), gdl_nn_relu(), gdl_nn_linear(8, 2, 1)});
    gdl_module *d = gdl_quantize_dynamic(f, NULL), *p = gdl_quant_prepare(f, NULL), *q = static_int8(f, 4);
    ASSERT(d && p && q);
    gdl_module_train(d, 0);
    gdl_module_train(p, 0);
    CHECK_CALL(refused(d, 2, (int64_t[]){1, 4}, NULL, "DynamicQuantizedLinear '0' has no form"));
    CHECK_CALL(refused(p, 2, (int64_t[]){1, 4}, NULL, "gdl_quant_convert first"));
    o.softmax = 1;
    CHECK_CALL(refused(q, 2, (int64_t[]){1, 4}, &o, "softmax (opts.softmax) has no INT8 form"));
    gdl_module_free(f);
    { /* a float Linear left in a quantized model */
        gdl_module *mix = seq_eval(3, (gdl_module *[]){gdl_nn_linear(4, 8, 1), gdl_nn_relu(), gdl_nn_linear(8, 2, 1)});
        gdl_module *qm = static_int8(mix, 4);
        ASSERT(qm);
        ASSERT_EQ(0, gdl_nn_sequential_add(qm, gdl_nn_linear(2, 2, 1)));
        gdl_module_train(qm, 0);
        gdl_module_free(mix);
        CHECK_CALL(refused(qm, 2, (int64_t[]){1, 4}, NULL, "Linear '3' has no form in the C export: a float layer"));
    }
    PASS();
}

/* nothing half-written: a path in a missing directory, and a path that is a directory (the rename fails
   after the temporary is written: it is removed), and a file already there is kept when an export fails */
TEST unwritable_paths_leave_nothing(void) {
    const char *dir = harness_tmp("export_c_dir");
    char path[1024], cmd[1200];
    gdl_module *m = seq_eval(1, (gdl_module *[]){gdl_nn_linear(4, 2, 1)});
    FILE *f;
    snprintf(path, sizeof path, "%s/missing/net.h", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/isdir/net.h'", dir, dir);
    ASSERT_EQ(0, system(cmd));
    ASSERT_EQ(-1, gdl_export_c(m, 2, (int64_t[]){1, 4}, path, NULL, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "cannot create the temporary");
    snprintf(path, sizeof path, "%s/isdir/net.h", dir);
    ASSERT_EQ(-1, gdl_export_c(m, 2, (int64_t[]){1, 4}, path, NULL, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "cannot rename");
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s/isdir' | grep -v '^net.h$')\"", dir);
    ASSERT_EQ(0, system(cmd)); /* no temporary left beside it */
    snprintf(path, sizeof path, "%s/kept.h", dir);
    ASSERT(f = fopen(path, "w"));
    fputs("old\n", f);
    fclose(f);
    gdl_module_train(m, 1);
    ASSERT_EQ(-1, gdl_export_c(m, 2, (int64_t[]){1, 4}, path, NULL, NULL));
    ASSERT(f = fopen(path, "r"));
    ASSERT(fgets(cmd, sizeof cmd, f) != NULL);
    fclose(f);
    ASSERT_STR_EQ("old\n", cmd);
    gdl_module_free(m);
    PASS();
}

/* the arena: a residual block keeps its input alive beside the body; a plain chain reuses the space */
TEST arena_sizes(void) {
    gdl_export_c_info inf;
    gdl_export_c_opts o = gdl_export_c_defaults();
    const char *path = harness_tmp("arena.h");
    gdl_module *m = seq_eval(4, (gdl_module *[]){gdl_nn_linear(16, 32, 1), gdl_nn_relu(), gdl_nn_linear(32, 8, 1),
                                                 gdl_nn_sigmoid()});
    o.report = NULL;
    ASSERT_EQ(0, gdl_export_c(m, 2, (int64_t[]){1, 16}, path, &o, &inf));
    ASSERT_EQ(0, inf.int8);
    ASSERT_EQ(3, inf.nops);
    ASSERT_EQ(4 * (32 + 8), inf.arena_bytes); /* the sigmoid in place */
    ASSERT_EQ(4 * (16 * 32 + 32 + 32 * 8 + 8), inf.weight_bytes);
    gdl_module_free(m);
    m = seq_eval(1, (gdl_module *[]){gdl_nn_basic_block(4, 4, 1)});
    ASSERT_EQ(0, gdl_export_c(m, 4, (int64_t[]){1, 4, 5, 5}, path, &o, &inf));
    ASSERT_EQ(3, inf.nops);
    ASSERT_EQ(4 * 100 * 2, inf.arena_bytes); /* conv1's output, conv2's; the add over conv2's, input apart */
    gdl_module_free(m);
    remove(path);
    PASS();
}

/* ---- make: the nets, their exports and data ---- */

static int train_epoch(gdl_module *m, gdl_loader *l) {
    gdl_optimizer *opt = gdl_adam_new(2e-3, 0.9, 0.999, 1e-8, 0);
    gdl_tensor *x, *y;
    int got;
    if (!opt || gdl_optim_add_module(opt, m, 0) < 0) return -1;
    gdl_module_train(m, 1);
    while ((got = gdl_loader_next(l, &x, &y)) == 1) {
        gdl_tensor *loss;
        gdl_arena_reset();
        gdl_zero_grad(opt);
        loss = gdl_cross_entropy(gdl_forward(m, x), y);
        if (!loss || gdl_backward(loss) < 0 || gdl_step(opt) < 0) {
            got = -1;
            break;
        }
    }
    gdl_optim_free(opt);
    gdl_module_train(m, 0);
    return got < 0 ? -1 : 0;
}

static FILE *open_out(const char *dir, const char *name, const char *suffix) {
    char p[1024];
    FILE *f;
    snprintf(p, sizeof p, "%s/%s%s", dir, name, suffix);
    if (!(f = fopen(p, "w"))) fprintf(stderr, "cannot write %s\n", p);
    return f;
}

/* x [n, in] quantized as the first static layer does it: clamp(round_half_even(x * (1/s)) + z, 0, qmax) */
static uint8_t quantize1(float x, float s, int z, int qmax) {
    const volatile float big = 12582912.0f;
    const float inv = 1.0f / s, t = x * inv + big, r = (t - big) + (float)z;
    return (uint8_t)(r < 0 ? 0 : r > (float)qmax ? qmax : r);
}

/* the export of m as DIR/NAME.h, its data header and gpudl's outputs on x ([n, ...] f32) */
static int export_net(const char *dir, const char *name, gdl_module *m, int ndim, const int64_t *shape,
                      gdl_tensor *x, const int32_t *labels, int n, const gdl_export_c_opts *base) {
    gdl_export_c_opts o = *base;
    gdl_export_c_info inf;
    char path[1024], *up;
    int64_t in, i, j, k, nout;
    float *xs, *ys, qs = 0, os = 0;
    int qz = 0, qmax = 0, oz = 0, int8 = gdl_module_is_quantized(m);
    gdl_tensor *y;
    FILE *f;
    size_t c;
    snprintf(path, sizeof path, "%s/%s.h", dir, name);
    o.name = name;
    if (gdl_export_c(m, ndim, shape, path, &o, &inf) < 0) return -1;
    in = inf.input_size, nout = inf.output_size;
    if (!(y = gdl_forward(m, x))) return -1;
    xs = (float *)malloc(sizeof(float) * (size_t)(n * in));
    ys = (float *)malloc(sizeof(float) * (size_t)(n * nout));
    if (!xs || !ys || gdl_copy_to_host(x, xs, sizeof(float) * (size_t)(n * in)) < 0 ||
        gdl_copy_to_host(y, ys, sizeof(float) * (size_t)(n * nout)) < 0)
        return -1;
    if (!(up = (char *)malloc(strlen(name) + 1))) return -1;
    for (c = 0; (up[c] = name[c]) != 0; c++)
        if (up[c] >= 'a' && up[c] <= 'z') up[c] = (char)(up[c] - 'a' + 'A');
    if (int8) { /* the parameters the file declares: read back from it */
        char line[256];
        FILE *h = fopen(path, "r");
        while (h && fgets(line, sizeof line, h)) {
            char key[128];
            double v;
            if (sscanf(line, "#define %127s %lf", key, &v) != 2) continue;
            if (strstr(key, "_INPUT_SCALE")) qs = (float)v;
            if (strstr(key, "_INPUT_ZERO_POINT")) qz = (int)v;
            if (strstr(key, "_INPUT_QMAX")) qmax = (int)v;
            if (strstr(key, "_OUTPUT_SCALE")) os = (float)v;
            if (strstr(key, "_OUTPUT_ZERO_POINT")) oz = (int)v;
        }
        if (h) fclose(h);
        if (!(qs > 0) || !(os > 0)) return -1;
    }
    if (!(f = open_out(dir, name, "_data.h"))) return -1;
    fprintf(f, "/* %s_data.h: %d test images for %s.h (written by tests/test_export_c.c), and the names\n"
               "   examples/mcu/main.c uses */\n#include \"%s.h\"\n#define NET_NAME \"%s\"\n#define NET_RUN %s_run\n"
               "#define NET_INPUT_SIZE %s_INPUT_SIZE\n#define NET_OUTPUT_SIZE %s_OUTPUT_SIZE\n#define NET_ARENA_BYTES %s_ARENA_BYTES\n"
               "#define NET_INT8 %d\n#define TEST_N %d\ntypedef %s net_value;\n",
            name, n, name, name, name, name, up, up, up, int8, n, int8 ? "uint8_t" : "float");
    fprintf(f, "static const net_value test_x[TEST_N][NET_INPUT_SIZE] = {\n");
    for (i = 0; i < n; i++) {
        fprintf(f, "{");
        for (k = 0; k < in; k++) {
            if (int8) fprintf(f, "%d", quantize1(xs[i * in + k], qs, qz, qmax));
            else fprintf(f, "%.8ef", (double)xs[i * in + k]);
            fprintf(f, k + 1 < in ? (k % 16 == 15 ? ",\n" : ",") : "},\n");
        }
    }
    fprintf(f, "};\nstatic const uint8_t test_y[TEST_N] = {");
    for (i = 0; i < n; i++) fprintf(f, "%d%s", labels ? (int)labels[i] : 0, i + 1 < n ? "," : "};\n");
    fclose(f);
    if (!(f = open_out(dir, name, "_ref.txt"))) return -1;
    for (i = 0; i < n; i++) { /* one line per image: f32 outputs, or the output's u8 values */
        fprintf(f, "%s %lld", int8 ? "int8" : "f32", (long long)i);
        for (j = 0; j < nout; j++) {
            const float v = ys[i * nout + j];
            if (int8) fprintf(f, " %d", (int)lrint((double)v / (double)os) + oz);
            else fprintf(f, " %.9g", (double)v);
        }
        fprintf(f, "\n");
    }
    fclose(f);
    free(xs);
    free(ys);
    free(up);
    gdl_arena_reset();
    return 0;
}

static gdl_module *make_mlp(void) {
    return gdl_nn_sequential(4, (gdl_module *[]){gdl_nn_flatten(1), gdl_nn_linear(784, 128, 1), gdl_nn_relu(),
                                                 gdl_nn_linear(128, 10, 1)});
}
/* conv 8 + BN + ReLU + pool, conv 16 + BN + ReLU + pool, linear 784 -> 10 */
static gdl_module *make_cnn(void) {
    return gdl_nn_sequential(11, (gdl_module *[]){
        gdl_nn_conv2d(1, 8, 3, 1, 1, 1, 1, 1), gdl_nn_batchnorm2d(8), gdl_nn_relu(), gdl_nn_maxpool2d(2, 2, 0),
        gdl_nn_conv2d(8, 16, 3, 1, 1, 1, 1, 1), gdl_nn_batchnorm2d(16), gdl_nn_relu(), gdl_nn_maxpool2d(2, 2, 0),
        gdl_nn_flatten(1), gdl_nn_dropout(0.1), gdl_nn_linear(16 * 7 * 7, 10, 1)});
}
/* every other f32 form: strided and depthwise convolutions with BatchNorm, LeakyReLU, a BasicBlock with a
   projection, average pooling with padding, Sigmoid, global pooling, a Residual, softmax */
static gdl_module *make_zoo(void) {
    return gdl_nn_sequential(12, (gdl_module *[]){
        gdl_nn_conv2d(3, 8, 3, 2, 1, 1, 1, 1), gdl_nn_batchnorm2d(8), gdl_nn_leaky_relu(0.1),
        gdl_nn_conv2d(8, 8, 3, 1, 1, 2, 8, 0), gdl_nn_batchnorm2d(8), gdl_nn_relu(), gdl_nn_basic_block(8, 12, 2),
        gdl_nn_avgpool2d(3, 1, 1), gdl_nn_sigmoid(),
        gdl_nn_residual(gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_conv2d(12, 12, 1, 1, 0, 1, 1, 1), gdl_nn_tanh()}),
                        NULL),
        gdl_nn_global_avgpool2d(), gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_flatten(1), gdl_nn_linear(12, 5, 1)})});
}

/* gdl's static INT8 model of m, calibrated on the first batches of l */
static gdl_module *ptq(gdl_module *m, gdl_loader *l) {
    gdl_module *p = gdl_quant_prepare(m, NULL), *q;
    if (!p || gdl_quant_calibrate(p, l, 16) < 0) return NULL;
    q = gdl_quant_convert(p);
    gdl_module_free(p);
    if (q) gdl_module_train(q, 0);
    return q;
}

static int make(const char *dir, int64_t ntrain) {
    gdl_dataset *tr = gdl_dataset_fashion_mnist(NULL, 1), *te = gdl_dataset_fashion_mnist(NULL, 0), *trs, *tes;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_loader *l, *lt;
    gdl_tensor *x, *y, *xz;
    gdl_export_c_opts o = gdl_export_c_defaults();
    int32_t labels[NTEST];
    int net;
    double t0 = gdl_now();
    if (!tr || !te || !(trs = gdl_dataset_subset(tr, 0, ntrain)) || !(tes = gdl_dataset_subset(te, 0, NTEST))) {
        fprintf(stderr, "make: Fashion-MNIST: %s (sh tools/fetch_data.sh)\n", gdl_last_error());
        return 1;
    }
    lo.batch_size = 64;
    lo.shuffle = 1;
    lo.seed = 1;
    l = gdl_loader_new(trs, &lo);
    lo.batch_size = NTEST;
    lo.shuffle = 0;
    lt = gdl_loader_new(tes, &lo);
    if (!l || !lt || gdl_loader_next(lt, &x, &y) != 1 || gdl_copy_to_host(y, labels, sizeof labels) < 0) return 1;
    for (net = 0; net < 2; net++) {
        const char *nm = net ? "cnn" : "mlp";
        char name[32];
        gdl_module *m, *q;
        double acc;
        gdl_manual_seed(42);
        m = net ? make_cnn() : make_mlp();
        if (!m || train_epoch(m, l) < 0 || !(q = ptq(m, l))) {
            fprintf(stderr, "make: %s: %s\n", nm, gdl_last_error());
            return 1;
        }
        if (gdl_evaluate(m, lt, NULL, NULL, NULL, &acc) == 0)
            printf("make: %s trained on %lld images in %.1f s: gpudl's f32 accuracy on the %d test images %.0f %%\n",
                   nm, (long long)ntrain, gdl_now() - t0, NTEST, 100 * acc);
        snprintf(name, sizeof name, "%s_f32", nm);
        if (export_net(dir, name, m, net ? 4 : 2, net ? (int64_t[]){1, 1, 28, 28} : (int64_t[]){1, 784}, x, labels,
                       NTEST, &o) < 0)
            goto fail;
        snprintf(name, sizeof name, "%s_int8", nm);
        if (export_net(dir, name, q, net ? 4 : 2, net ? (int64_t[]){1, 1, 28, 28} : (int64_t[]){1, 784}, x, labels,
                       NTEST, &o) < 0)
            goto fail;
        gdl_module_free(q);
        gdl_module_free(m);
        continue;
    fail:
        fprintf(stderr, "make: %s: %s\n", nm, gdl_last_error());
        return 1;
    }
    { /* the zoo: fixed-seed weights, BatchNorm statistics from a few training-mode passes */
        gdl_module *z;
        int k;
        gdl_manual_seed(7);
        if (!(z = make_zoo()) || !(xz = gdl_randn(4, (int64_t[]){8, 3, 16, 16}, gdl_cpu()))) return 1;
        for (k = 0; k < 4; k++) gdl_forward(z, gdl_randn(4, (int64_t[]){8, 3, 16, 16}, gdl_cpu()));
        gdl_module_train(z, 0);
        o.softmax = 1;
        o.no_libm = 0;
        if (export_net(dir, "zoo_f32", z, 4, (int64_t[]){1, 3, 16, 16}, xz, NULL, 8, &o) < 0) {
            fprintf(stderr, "make: zoo: %s\n", gdl_last_error());
            return 1;
        }
        gdl_module_free(z);
    }
    gdl_loader_free(l);
    gdl_loader_free(lt);
    gdl_dataset_free(trs);
    gdl_dataset_free(tes);
    gdl_dataset_free(tr);
    gdl_dataset_free(te);
    printf("make: done in %.1f s\n", gdl_now() - t0);
    return 0;
}

/* ---- check: main.c's output against gpudl's ---- */

static int check(const char *ref_path, const char *run_path) {
    FILE *r = fopen(ref_path, "r"), *u = fopen(run_path, "r");
    char a[8192], b[8192];
    int rows = 0, bad = 0, int8 = 0, maxq = 0;
    double worst = 0;
    if (!r || !u) {
        fprintf(stderr, "check: cannot read %s or %s\n", ref_path, run_path);
        return 1;
    }
    while (fgets(a, sizeof a, r)) {
        char *p = a, *q, kind[8];
        int idx, n = 0, nr = 0, k;
        double ref[64], big = 0;
        if (sscanf(p, "%7s %d%n", kind, &idx, &n) != 2) continue;
        int8 = kind[0] == 'i';
        p += n;
        while (nr < 64 && (ref[nr] = strtod(p, &q), q != p)) p = q, nr++;
        do /* the run's line of this image: "img IDX label L pred P out HEX..." */
            if (!fgets(b, sizeof b, u)) {
                fprintf(stderr, "check: %s ends before image %d\n", run_path, idx);
                return 1;
            }
        while (strncmp(b, "img ", 4) != 0);
        p = strstr(b, " out ");
        if (!p) return fprintf(stderr, "check: bad line %s", b), 1;
        p += 5;
        for (k = 0; k < nr; k++) big = fabs(ref[k]) > big ? fabs(ref[k]) : big;
        for (k = 0; k < nr; k++) {
            unsigned long h = strtoul(p, &q, 16);
            double v;
            if (q == p) return fprintf(stderr, "check: image %d: %d outputs, want %d\n", idx, k, nr), 1;
            p = q;
            if (int8) {
                const int d = abs((int)h - (int)ref[k]);
                maxq = d > maxq ? d : maxq;
                bad += d > 1;
            } else {
                uint32_t bits = (uint32_t)h;
                float f;
                memcpy(&f, &bits, 4);
                v = fabs((double)f - ref[k]) / (big > 0 ? big : 1);
                worst = v > worst ? v : worst;
                bad += !(v <= 1e-5);
            }
        }
        rows++;
    }
    if (int8) printf("check: %s: %d images, INT8 outputs at most %d step%s from gpudl's (%d over 1)\n", run_path, rows,
                     maxq, maxq == 1 ? "" : "s", bad);
    else printf("check: %s: %d images, f32 outputs within %.2g of the row's largest |output| of gpudl's (%d over 1e-5)\n",
                run_path, rows, worst, bad);
    return rows == 0 || bad ? 1 : 0;
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "make")) return make(argv[2], argc > 3 ? atol(argv[3]) : 6000);
    if (argc == 4 && !strcmp(argv[1], "check")) return check(argv[2], argv[3]);
    {
        HARNESS_MAIN_BEGIN(argc, argv);
        RUN_TEST(refuses_unsupported_op);
        RUN_TEST(refuses_training_mode);
        RUN_TEST(refuses_bad_arguments);
        RUN_TEST(refuses_quantized_forms);
        RUN_TEST(unwritable_paths_leave_nothing);
        RUN_TEST(arena_sizes);
        HARNESS_MAIN_END();
    }
}
