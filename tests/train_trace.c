/* train_trace.c — a short, fully deterministic training run whose every
   loss and final parameter is printed bit-exactly (C99 hex floats), so that
   builds for different CPU paths (AVX-512, AVX2, portable C, AArch64 NEON)
   can be compared with one another.

   Two nets on synthetic data: an MLP (Linear-ReLU-Dropout-Linear, Adam) and
   a small CNN (Conv-BatchNorm-ReLU-MaxPool-Conv-ReLU-GlobalAvgPool-Linear,
   SGD with Nesterov momentum and weight decay).

     train_trace                       print the trace
     train_trace --against REF [--tol T]
                                       run, then compare with the trace REF
                                       (written by another build): bitwise
                                       when T is 0 (the default), else every
                                       number within relative error T; ends
                                       with the harness's summary line. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINES 512
#define LINE_LEN 160

static char lines[MAX_LINES][LINE_LEN];
static int nlines;

#if defined(__GNUC__) || defined(__clang__)
static void emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#endif

static void emit(const char *fmt, ...) {
    va_list ap;
    if (nlines == MAX_LINES) return;
    va_start(ap, fmt);
    vsnprintf(lines[nlines++], LINE_LEN, fmt, ap);
    va_end(ap);
}

/* FNV-1a over the bytes of every parameter and buffer, and their sum. */
static void emit_params(const char *net, gdl_module *m) {
    gdl_tensor *t[64];
    int n = gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, NULL, t, 64), i;
    uint64_t h = 1469598103934665603ULL;
    double sum = 0;
    int64_t k;
    for (i = 0; i < n && i < 64; i++) {
        const unsigned char *b = (const unsigned char *)t[i]->data;
        size_t j, nb = (size_t)t[i]->numel * sizeof(float);
        if (t[i]->dtype != GDL_F32) continue;
        for (j = 0; j < nb; j++) h = (h ^ b[j]) * 1099511628211ULL;
        for (k = 0; k < t[i]->numel; k++) sum += ((const float *)t[i]->data)[k];
    }
    emit("%s params fnv %016llx sum %a", net, (unsigned long long)h, sum);
}

static gdl_tensor *labels(const int32_t *y, int64_t n) {
    return gdl_from_array(y, 1, &n, GDL_I32, gdl_cpu());
}

static int run_mlp(void) {
    enum { N = 256, D = 96, H = 64, C = 10, B = 32, STEPS = 40 };
    static float x[N * D], proj[D * C];
    static int32_t y[N];
    gdl_module *l[5], *m;
    gdl_optimizer *opt;
    int i, j, s;
    gdl_manual_seed(1234);
    for (i = 0; i < N * D; i++) x[i] = (float)(2 * gdl_rng_uniform() - 1);
    for (i = 0; i < D * C; i++) proj[i] = (float)(2 * gdl_rng_uniform() - 1);
    for (i = 0; i < N; i++) { /* a random linear teacher, so there is something to learn */
        float best = -1e30f;
        for (j = 0; j < C; j++) {
            float v = 0;
            int k;
            for (k = 0; k < D; k++) v += x[i * D + k] * proj[k * C + j];
            if (v > best) best = v, y[i] = j;
        }
    }
    l[0] = gdl_nn_linear(D, H, 1);
    l[1] = gdl_nn_relu();
    l[2] = gdl_nn_dropout(0.1);
    l[3] = gdl_nn_linear(H, C, 1);
    l[4] = gdl_nn_identity();
    m = gdl_nn_sequential(5, l);
    opt = gdl_adam_new(1e-2, 0.9, 0.999, 1e-8, 1e-4);
    if (!m || !opt || gdl_optim_add_module(opt, m, 0) < 0) return -1;
    for (s = 0; s < STEPS; s++) {
        const int b0 = (s * B) % N;
        const int64_t xs[2] = {B, D};
        gdl_tensor *xb, *yb, *loss;
        gdl_arena_reset();
        xb = gdl_from_array(x + (size_t)b0 * D, 2, xs, GDL_F32, gdl_cpu());
        yb = labels(y + b0, B);
        gdl_zero_grad(opt);
        loss = gdl_cross_entropy(gdl_forward(m, xb), yb);
        if (!loss || gdl_backward(loss) < 0 || gdl_step(opt) < 0) return -1;
        emit("mlp step %d loss %a", s, gdl_item(loss));
    }
    emit_params("mlp", m);
    gdl_optim_free(opt);
    gdl_module_free(m);
    return 0;
}

static int run_cnn(void) {
    enum { N = 48, CI = 3, HW = 10, C = 4, B = 16, STEPS = 15 };
    static float x[N * CI * HW * HW];
    static int32_t y[N];
    gdl_module *l[9], *m;
    gdl_optimizer *opt;
    int i, s;
    gdl_manual_seed(99);
    for (i = 0; i < N; i++) {
        int k;
        y[i] = (int32_t)(gdl_rng_next_u64() % C);
        for (k = 0; k < CI * HW * HW; k++) /* the class shifts one channel's mean */
            x[(size_t)i * CI * HW * HW + k] =
                (float)(gdl_rng_uniform() - 0.5 + (k / (HW * HW) == y[i] % CI ? 0.3 * (1 + y[i] / CI) : 0));
    }
    l[0] = gdl_nn_conv2d(CI, 8, 3, 1, 1, 1, 1, 1);
    l[1] = gdl_nn_batchnorm2d(8);
    l[2] = gdl_nn_relu();
    l[3] = gdl_nn_maxpool2d(2, 0, 0);
    l[4] = gdl_nn_conv2d(8, 8, 3, 1, 0, 1, 1, 0);
    l[5] = gdl_nn_relu();
    l[6] = gdl_nn_global_avgpool2d();
    l[7] = gdl_nn_flatten(1);
    l[8] = gdl_nn_linear(8, C, 1);
    m = gdl_nn_sequential(9, l);
    opt = gdl_sgd_new(0.05, 0.9, 0, 1e-3, 1);
    if (!m || !opt || gdl_optim_add_module(opt, m, 0) < 0) return -1;
    for (s = 0; s < STEPS; s++) {
        const int b0 = (s * B) % N;
        const int64_t xs[4] = {B, CI, HW, HW};
        gdl_tensor *xb, *yb, *loss;
        gdl_arena_reset();
        xb = gdl_from_array(x + (size_t)b0 * CI * HW * HW, 4, xs, GDL_F32, gdl_cpu());
        yb = labels(y + b0, B);
        gdl_zero_grad(opt);
        loss = gdl_cross_entropy(gdl_forward(m, xb), yb);
        if (!loss || gdl_backward(loss) < 0 || gdl_step(opt) < 0) return -1;
        emit("cnn step %d loss %a", s, gdl_item(loss));
    }
    emit_params("cnn", m);
    gdl_optim_free(opt);
    gdl_module_free(m);
    return 0;
}

/* Compares our lines with the file's: same words; numbers (hex floats)
   equal, or within relative error tol; fnv hashes only when tol is 0. */
static int compare(const char *path, double tol, int *passed, int *failed) {
    char buf[LINE_LEN];
    FILE *f = fopen(path, "r");
    int i = 0;
    if (!f) {
        printf("cannot read the reference trace %s\n", path);
        return -1;
    }
    while (fgets(buf, sizeof buf, f)) {
        char w1[4][48], w2[4][48];
        int n1, n2, k, ok = 1;
        buf[strcspn(buf, "\n")] = 0;
        if (i >= nlines) {
            printf("FAIL: the reference has more lines (%s)\n", buf);
            ++*failed;
            break;
        }
        n1 = sscanf(buf, "%47s %47s %47s %47s", w1[0], w1[1], w1[2], w1[3]);
        n2 = sscanf(lines[i], "%47s %47s %47s %47s", w2[0], w2[1], w2[2], w2[3]);
        if (n1 != n2) ok = 0;
        for (k = 0; ok && k < n1; k++) {
            int is_num = strchr(w1[k], 'p') && (strstr(w1[k], "0x") != NULL);
            if (strcmp(w1[k], w2[k]) == 0) continue;
            if (tol > 0 && is_num) {
                const double a = strtod(w1[k], NULL), b = strtod(w2[k], NULL);
                if (fabs(a - b) <= tol * fabs(a)) continue;
            }
            if (tol > 0 && k > 0 && strcmp(w1[k - 1], "fnv") == 0) continue; /* hashes are bitwise only */
            ok = 0;
        }
        if (ok) {
            ++*passed;
        } else {
            printf("FAIL: line %d: expected \"%s\", got \"%s\"\n", i + 1, buf, lines[i]);
            ++*failed;
        }
        i++;
    }
    fclose(f);
    if (i < nlines) {
        printf("FAIL: the reference ends after %d of %d lines\n", i, nlines);
        ++*failed;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *against = NULL;
    double tol = 0;
    int i, passed = 0, failed = 0;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--against") == 0 && i + 1 < argc) against = argv[++i];
        else if (strcmp(argv[i], "--tol") == 0 && i + 1 < argc) tol = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--against REF [--tol T]]\n", argv[0]);
            return 2;
        }
    }
    if (run_mlp() < 0 || run_cnn() < 0) {
        printf("train_trace: %s\n0 passed, 1 failed, 0 skipped\n", gdl_last_error());
        return 1;
    }
    gdl_shutdown();
    if (!against) {
        for (i = 0; i < nlines; i++) printf("%s\n", lines[i]);
        return 0;
    }
    printf("kernel %s; comparing with %s, %s\n", gdl_gemm_kernel_name(), against,
           tol > 0 ? "relative tolerance" : "bitwise");
    if (tol > 0) printf("tolerance %g\n", tol);
    if (compare(against, tol, &passed, &failed) < 0) failed++;
    printf("%d passed, %d failed, 0 skipped\n", passed, failed);
    return failed != 0;
}
