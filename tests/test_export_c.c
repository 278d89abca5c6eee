/* test_export_c.c — gdl_export_c (a model as one C99 file for a microcontroller).
   Two uses (tests/test_mcu.sh runs both, with examples/mcu/train_export.c, which makes the nets):
     test_export_c                the refusals (harness tests): an op without a C form named, a model in
                                  training mode, an unwritable path, INT8 softmax, libm ops under no_libm,
                                  dynamic and observed layers; nothing left at the path by a failure
     test_export_c check REF RUN  compares RUN (main.c's output: the raw outputs in hex) with REF: f32 within
                                  1e-5 of the row's largest |output|, INT8 within one quantization step */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

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
    CHECK_CALL(refused(m, 2, (int64_t[]){1, 5}, NULL, "Linear '0' expects an input [..., 4], gets [1,5] here"));
    m = seq_eval(2, (gdl_module *[]){gdl_nn_flatten(1), gdl_nn_conv2d(3, 4, 3, 1, 0, 1, 1, 1)});
    CHECK_CALL(refused(m, 4, (int64_t[]){1, 3, 8, 8}, NULL, "Conv2d '1' expects an input [1,3,H,W], gets [1,192] here"));
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
    gdl_free(x);
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

/* a module name holding comment delimiters cannot end the comment that names it in the file */
TEST module_names_stay_in_comments(void) {
    gdl_export_c_opts o = gdl_export_c_defaults();
    const char *path = harness_tmp("names.h");
    char cmd[1200], line[512];
    int found = 0;
    gdl_module *m = seq_eval(1, (gdl_module *[]){gdl_nn_linear(4, 2, 1)});
    FILE *f;
    ASSERT_EQ(0, gdl_module_add_child(m, "x*/y/*z", gdl_nn_sigmoid()));
    gdl_module_train(m, 0);
    o.report = NULL;
    o.name = "names";
    ASSERT_EQ(0, gdl_export_c(m, 2, (int64_t[]){1, 4}, path, &o, NULL));
    ASSERT(f = fopen(path, "r"));
    while (fgets(line, sizeof line, f)) {
        ASSERT(strstr(line, "*/y") == NULL && strstr(line, "/*z") == NULL);
        found += strstr(line, "Sigmoid 'x*|y|*z'") != NULL;
    }
    fclose(f);
    ASSERT_EQ(1, found);
    snprintf(cmd, sizeof cmd, "cc -std=c99 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -x c -DNAMES_IMPLEMENTATION '%s'",
             path);
    ASSERT_EQ(0, system(cmd));
    gdl_module_free(m);
    remove(path);
    PASS();
}

/* a QAT model converts to the same static layers: it exports as INT8 */
TEST exports_qat_model(void) {
    gdl_export_c_info inf;
    gdl_export_c_opts o = gdl_export_c_defaults();
    const char *path = harness_tmp("qat.h");
    gdl_module *f = seq_eval(3, (gdl_module *[]){gdl_nn_linear(4, 8, 1), gdl_nn_relu(), gdl_nn_linear(8, 2, 1)});
    gdl_module *p = gdl_quant_prepare_qat(f, NULL), *q;
    gdl_tensor *x = gdl_randn(2, (int64_t[]){8, 4}, gdl_cpu());
    ASSERT(p && x);
    gdl_module_train(p, 1);
    ASSERT(gdl_forward(p, x) != NULL);
    gdl_free(x);
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_quant_freeze_observers(p, 1));
    ASSERT(q = gdl_quant_convert(p));
    gdl_module_train(q, 0);
    o.report = NULL;
    ASSERT_EQ(0, gdl_export_c(q, 2, (int64_t[]){1, 4}, path, &o, &inf));
    ASSERT_EQ(1, inf.int8);
    ASSERT_EQ(2, inf.nops);
    ASSERT_EQ(12, inf.arena_bytes); /* 8 + 2 u8 values, rounded up to a multiple of 4 bytes */
    remove(path);
    gdl_module_free(q);
    gdl_module_free(p);
    gdl_module_free(f);
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
    { /* a long chain of activations: in place, one slot; the value list grows (reallocated) as it goes */
        int k;
        m = seq_eval(1, (gdl_module *[]){gdl_nn_linear(4, 4, 1)});
        for (k = 0; k < 40; k++) ASSERT_EQ(0, gdl_nn_sequential_add(m, k % 2 ? gdl_nn_sigmoid() : gdl_nn_tanh()));
        gdl_module_train(m, 0);
        ASSERT_EQ(0, gdl_export_c(m, 2, (int64_t[]){1, 4}, path, &o, &inf));
        ASSERT_EQ(41, inf.nops);
        ASSERT_EQ(16, inf.arena_bytes);
        gdl_module_free(m);
    }
    m = seq_eval(1, (gdl_module *[]){gdl_nn_basic_block(4, 4, 1)});
    ASSERT_EQ(0, gdl_export_c(m, 4, (int64_t[]){1, 4, 5, 5}, path, &o, &inf));
    ASSERT_EQ(3, inf.nops);
    ASSERT_EQ(4 * 100 * 2, inf.arena_bytes); /* conv1's output, conv2's; the add over conv2's, input apart */
    gdl_module_free(m);
    remove(path);
    PASS();
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
    if (argc == 4 && !strcmp(argv[1], "check")) return check(argv[2], argv[3]);
    {
        HARNESS_MAIN_BEGIN(argc, argv);
        RUN_TEST(refuses_unsupported_op);
        RUN_TEST(refuses_training_mode);
        RUN_TEST(refuses_bad_arguments);
        RUN_TEST(refuses_quantized_forms);
        RUN_TEST(exports_qat_model);
        RUN_TEST(module_names_stay_in_comments);
        RUN_TEST(unwritable_paths_leave_nothing);
        RUN_TEST(arena_sizes);
        HARNESS_MAIN_END();
    }
}
