/* train_export.c — the training half of the embedded demo (examples/mcu/,
   make mcu-demo): trains a Fashion-MNIST MLP (784-128-10) and a small CNN
   on a subset (the MLP 5 epochs, the CNN 1), quantizes both to INT8
   (static post-training quantization: prepare, calibrate on 16 batches,
   convert), and exports
   each, f32 and INT8, as one C99 file with gdl_export_c. For each net NAME
   (mlp_f32, mlp_int8, cnn_f32, cnn_int8; mlp_f32_softmax: the f32 MLP with
   a softmax and no libm) it writes to OUTDIR:
     NAME.h        the exported net (gdl_export_c)
     NAME_data.h   the first 100 test images in the net's input form (f32, or
                   u8 quantized as the net's first layer does it), their
                   labels, and the names main.c uses (NET_RUN, NET_INT8...)
     NAME_ref.txt  gpudl's own outputs on them (f32, or the output's u8
                   values), which tests/test_export_c compares with the
                   microcontroller's
   and zoo_f32: a fixed-seed net of the other f32 forms (strided, dilated and
   depthwise convolutions with BatchNorm, LeakyReLU, a BasicBlock, average
   pooling, Sigmoid, Tanh, a Residual, global pooling, softmax) on 8 random
   images, for the tests.

   CPU:   cc -O2 examples/mcu/train_export.c -DGPUDL_ZLIB -lz -lm -pthread -o train_export
   Run:   ./train_export OUTDIR [TRAIN_IMAGES]     (default 12000)
   Data:  Fashion-MNIST where gdl_dataset_fashion_mnist(NULL, ...) finds it (sh tools/fetch_data.sh). */
#define GPUDL_IMPLEMENTATION
#include "../../gpudl.h"

#define NTEST 100

/* epochs of Adam (lr 2e-3) over l */
static int train(gdl_module *m, gdl_loader *l, int epochs) {
    gdl_optimizer *opt = gdl_adam_new(2e-3, 0.9, 0.999, 1e-8, 0);
    gdl_tensor *x, *y, *loss;
    int got = 0;
    if (!opt || gdl_optim_add_module(opt, m, 0) < 0) return -1;
    gdl_module_train(m, 1);
    while (epochs > 0 && (got = gdl_loader_next(l, &x, &y)) >= 0) {
        if (got == 0) { /* the end of an epoch */
            epochs--;
            continue;
        }
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
    int qz = 0, qmax = 0, oz = 0, int8 = gdl_module_is_quantized(m), correct = 0;
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
    for (i = 0; o.softmax && i < n; i++) { /* gpudl's outputs through softmax, in double */
        double mx = ys[i * nout], sum = 0;
        for (j = 1; j < nout; j++) mx = ys[i * nout + j] > mx ? ys[i * nout + j] : mx;
        for (j = 0; j < nout; j++) sum += exp(ys[i * nout + j] - mx);
        for (j = 0; j < nout; j++) ys[i * nout + j] = (float)(exp(ys[i * nout + j] - mx) / sum);
    }
    for (i = 0; labels && i < n; i++) { /* gpudl's own accuracy on these images */
        int best = 0;
        for (j = 1; j < nout; j++) best = ys[i * nout + j] > ys[i * nout + best] ? (int)j : best;
        correct += best == labels[i];
    }
    if (labels) printf("train_export: %s: gpudl's accuracy on the %d test images: %d/%d\n", name, n, correct, n);
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
   projection, average pooling with padding, Sigmoid, a Residual with Tanh, global pooling, a Linear with
   BatchNorm1d, softmax */
static gdl_module *make_zoo(void) {
    return gdl_nn_sequential(12, (gdl_module *[]){
        gdl_nn_conv2d(3, 8, 3, 2, 1, 1, 1, 1), gdl_nn_batchnorm2d(8), gdl_nn_leaky_relu(0.1),
        gdl_nn_conv2d(8, 8, 3, 1, 1, 2, 8, 0), gdl_nn_batchnorm2d(8), gdl_nn_relu(), gdl_nn_basic_block(8, 12, 2),
        gdl_nn_avgpool2d(3, 1, 1), gdl_nn_sigmoid(),
        gdl_nn_residual(gdl_nn_sequential(2, (gdl_module *[]){gdl_nn_conv2d(12, 12, 1, 1, 0, 1, 1, 1), gdl_nn_tanh()}),
                        NULL),
        gdl_nn_global_avgpool2d(), gdl_nn_sequential(3, (gdl_module *[]){gdl_nn_flatten(1), gdl_nn_linear(12, 5, 1),
                                                              gdl_nn_batchnorm1d(5)})});
}

/* the INT8 forms the MLP and CNN do not use: a strided convolution, average pooling with padding (its
   output's range differs from the next layer's input range: a requantization), a dilated convolution
   with BatchNorm, max pooling then a ReLU of its own, global pooling; quantized with one weight scale per
   tensor and activations in 0..255 */
static gdl_module *make_zoo_int8(void) {
    return gdl_nn_sequential(11, (gdl_module *[]){
        gdl_nn_conv2d(3, 8, 3, 2, 1, 1, 1, 1), gdl_nn_relu(), gdl_nn_avgpool2d(3, 1, 1),
        gdl_nn_conv2d(8, 8, 3, 1, 2, 2, 1, 1), gdl_nn_batchnorm2d(8), gdl_nn_maxpool2d(2, 2, 0), gdl_nn_relu(),
        gdl_nn_conv2d(8, 6, 1, 1, 0, 1, 1, 1), gdl_nn_global_avgpool2d(), gdl_nn_flatten(1), gdl_nn_linear(6, 5, 1)});
}

/* n forward passes of m on random images [8, 3, 16, 16] (BatchNorm's statistics in training mode, a
   prepared model's observers in eval mode) */
static void forward_random(gdl_module *m, int n) {
    while (n-- > 0) {
        gdl_tensor *x = gdl_randn(4, (int64_t[]){8, 3, 16, 16}, gdl_cpu());
        if (x) gdl_forward(m, x);
        gdl_free(x);
        gdl_arena_reset();
    }
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
        fprintf(stderr, "train_export: Fashion-MNIST: %s (sh tools/fetch_data.sh)\n", gdl_last_error());
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
        gdl_manual_seed(42);
        m = net ? make_cnn() : make_mlp();
        if (!m || train(m, l, net ? 1 : 5) < 0 || !(q = ptq(m, l))) {
            fprintf(stderr, "train_export: %s: %s\n", nm, gdl_last_error());
            return 1;
        }
        printf("train_export: %s trained (%d epoch%s of %lld images) and quantized after %.1f s\n", nm, net ? 1 : 5,
               net ? "" : "s", (long long)ntrain, gdl_now() - t0);
        snprintf(name, sizeof name, "%s_f32", nm);
        if (export_net(dir, name, m, net ? 4 : 2, net ? (int64_t[]){1, 1, 28, 28} : (int64_t[]){1, 784}, x, labels,
                       NTEST, &o) < 0)
            goto fail;
        snprintf(name, sizeof name, "%s_int8", nm);
        if (export_net(dir, name, q, net ? 4 : 2, net ? (int64_t[]){1, 1, 28, 28} : (int64_t[]){1, 784}, x, labels,
                       NTEST, &o) < 0)
            goto fail;
        o.softmax = o.no_libm = 1; /* the f32 net with softmax, exp by polynomial */
        snprintf(name, sizeof name, "%s_f32_softmax", nm);
        if (!net && export_net(dir, name, m, 2, (int64_t[]){1, 784}, x, labels, NTEST, &o) < 0) goto fail;
        o.softmax = o.no_libm = 0;
        gdl_module_free(q);
        gdl_module_free(m);
        continue;
    fail:
        fprintf(stderr, "train_export: %s: %s\n", nm, gdl_last_error());
        return 1;
    }
    { /* the zoo: fixed-seed weights, BatchNorm statistics from a few training-mode passes */
        gdl_module *z;
        gdl_manual_seed(7);
        if (!(z = make_zoo()) || !(xz = gdl_randn(4, (int64_t[]){8, 3, 16, 16}, gdl_cpu()))) return 1;
        forward_random(z, 4);
        gdl_module_train(z, 0);
        o.softmax = 1;
        o.no_libm = 0;
        if (export_net(dir, "zoo_f32", z, 4, (int64_t[]){1, 3, 16, 16}, xz, NULL, 8, &o) < 0) {
            fprintf(stderr, "train_export: zoo: %s\n", gdl_last_error());
            return 1;
        }
        gdl_module_free(z);
    }
    { /* the INT8 zoo: calibrated on random images (the 8 exported ones among them) */
        gdl_qconfig qc = gdl_qconfig_default();
        gdl_module *z, *p, *q;
        gdl_manual_seed(11);
        if (!(z = make_zoo_int8())) return 1;
        forward_random(z, 4);
        gdl_module_train(z, 0);
        qc.per_channel = 0;
        qc.reduce_range = 0;
        if (!(p = gdl_quant_prepare(z, &qc))) return 1;
        gdl_module_train(p, 0);
        forward_random(p, 4);
        gdl_forward(p, xz);
        if (!(q = gdl_quant_convert(p))) return 1;
        gdl_module_train(q, 0);
        o.softmax = 0;
        if (export_net(dir, "zoo_int8", q, 4, (int64_t[]){1, 3, 16, 16}, xz, NULL, 8, &o) < 0) {
            fprintf(stderr, "train_export: zoo_int8: %s\n", gdl_last_error());
            return 1;
        }
        gdl_module_free(q);
        gdl_module_free(p);
        gdl_module_free(z);
        gdl_arena_reset();
    }
    gdl_free(xz);
    gdl_loader_free(l);
    gdl_loader_free(lt);
    gdl_dataset_free(trs);
    gdl_dataset_free(tes);
    gdl_dataset_free(tr);
    gdl_dataset_free(te);
    printf("train_export: done in %.1f s\n", gdl_now() - t0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3 || argv[1][0] == '-') {
        fprintf(stderr, "usage: %s OUTDIR [TRAIN_IMAGES]\n", argv[0]);
        return 2;
    }
    return make(argv[1], argc > 2 ? atol(argv[2]) : 12000);
}
