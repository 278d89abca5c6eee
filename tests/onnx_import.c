/* tests/onnx_import.c — PyTorch's own ONNX exports read by gdl_load_onnx (make test-onnx): runs each file of the
   committed tests/onnx_fixtures that tests/onnx_torch.py wrote by hand (both torch.onnx.export exporters; no torch
   at test time) with gdl_onnx_run on the fixed inputs saved beside them and wants PyTorch's outputs within 1e-5 relative (max |gpudl - torch| / max |torch|); fine-tunes the nets it marks with
   one SGD step on mean((out - target)^2) and wants PyTorch's loss and updated parameters within the same
   tolerance; and checks the refusals: a node of an op gdl does not run fails gdl_load_onnx with its name and op,
   an attribute it does not run fails gdl_onnx_run the same way. Then hand-made int8 files (check_int8_files): int8
   initializers read whole, refused cleanly when their data does not fit their dims or type, and the integer ops
   (QLinearConv, ...) refused at load by name; and QuantizeLinear / DequantizeLinear per axis on values worked out
   by hand (check_qdq_per_axis).

     onnx_import DIR      reads DIR/manifest.txt (its format: tests/onnx_torch.py), DIR = tests/onnx_fixtures */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5
#define MAX_IO 8
#define MAX_PARAMS 64

#define CHECK(c)                                                                                             \
    do {                                                                                                     \
        if (!(c)) {                                                                                          \
            fprintf(stderr, "onnx_import: %s:%d: %s failed: %s\n", __FILE__, __LINE__, #c, gdl_last_error()); \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

static const char *dir;
static int failures;

/* a little-endian raw file of n elements of es bytes into a new buffer */
static void *read_raw(const char *name, int64_t n, size_t es) {
    char path[1024];
    FILE *f;
    unsigned char *buf = (unsigned char *)malloc((size_t)n * es + 1);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK(buf && (f = fopen(path, "rb")) != NULL);
    CHECK(fread(buf, es, (size_t)n, f) == (size_t)n);
    fclose(f);
    return buf;
}

/* "NDIM DIMS..." from the rest of a manifest line (after *pos): the shape and element count */
static int64_t read_dims(const char *line, int *pos, int *ndim, int64_t *shape) {
    int k, used;
    int64_t n = 1;
    CHECK(sscanf(line + *pos, "%d%n", ndim, &used) == 1 && *ndim >= 0 && *ndim <= GDL_MAX_DIMS);
    *pos += used;
    for (k = 0; k < *ndim; k++) {
        long long d;
        CHECK(sscanf(line + *pos, "%lld%n", &d, &used) == 1 && d >= 0);
        *pos += used;
        n *= (shape[k] = d);
    }
    return n;
}

/* a tensor from a manifest "in"/"out"/"param" line's file: f32, or int64 ids as i32 */
static gdl_tensor *load_tensor(const char *file, const char *dtype, const char *line, int pos) {
    int ndim;
    int64_t shape[GDL_MAX_DIMS], n = read_dims(line, &pos, &ndim, shape), k;
    gdl_tensor *t;
    if (!strcmp(dtype, "i64")) {
        int64_t *v = (int64_t *)read_raw(file, n, 8);
        int32_t *w = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
        CHECK(w != NULL);
        for (k = 0; k < n; k++) w[k] = (int32_t)v[k];
        CHECK((t = gdl_from_array(w, ndim, shape, GDL_I32, gdl_cpu())) != NULL);
        free(v);
        free(w);
    } else {
        float *v = (float *)read_raw(file, n, 4);
        CHECK((t = gdl_from_array(v, ndim, shape, GDL_F32, gdl_cpu())) != NULL);
        free(v);
    }
    return t;
}

/* max |got - want| / max |want|; -1 when the shapes differ or got is not finite */
static double rel_error(const gdl_tensor *got, const gdl_tensor *want) {
    float *g, *w;
    double num = 0, den = 1e-30;
    int64_t k;
    int d;
    if (got->ndim != want->ndim || got->dtype != GDL_F32) return -1;
    for (d = 0; d < got->ndim; d++)
        if (got->shape[d] != want->shape[d]) return -1;
    g = (float *)malloc(sizeof(float) * (size_t)(got->numel + 1));
    w = (float *)malloc(sizeof(float) * (size_t)(got->numel + 1));
    CHECK(g && w && gdl_copy_to_host(got, g, sizeof(float) * (size_t)got->numel) == 0 &&
          gdl_copy_to_host(want, w, sizeof(float) * (size_t)want->numel) == 0);
    for (k = 0; k < got->numel; k++) {
        if (!isfinite(g[k])) num = INFINITY;
        if (fabs((double)g[k] - w[k]) > num) num = fabs((double)g[k] - w[k]);
        if (fabs(w[k]) > den) den = fabs(w[k]);
    }
    free(g);
    free(w);
    return num / den;
}

static void verdict(int ok, const char *what, const char *file, double err) {
    printf("%s %-22s %-28s max relative error %.2e\n", ok ? "ok  " : "FAIL", file, what, err);
    if (!ok) failures++;
}

/* one exported file: gdl_onnx_run's outputs against PyTorch's */
static void run_model(const char *file, int nin, gdl_tensor **in, int nout, gdl_tensor **want) {
    char path[1024];
    gdl_onnx_model *m;
    gdl_tensor *out[MAX_IO];
    int n = 0, k;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (!(m = gdl_load_onnx(path, gdl_cpu())) || gdl_onnx_run(m, nin, in, MAX_IO, out, &n) < 0 || n != nout) {
        printf("FAIL %-22s %s\n", file, gdl_last_error());
        failures++;
    } else {
        for (k = 0; k < nout; k++) {
            char what[32];
            double err = rel_error(out[k], want[k]);
            snprintf(what, sizeof what, "output %d %s", k, gdl_shape_str(want[k]));
            verdict(err >= 0 && err <= TOL, what, file, err);
        }
    }
    gdl_onnx_free(m);
    gdl_arena_reset();
}

/* one SGD step on the imported file against PyTorch's: the loss and every parameter after it */
static void fine_tune(const char *file, gdl_tensor *x, gdl_tensor *target, double lr, double want_loss, int np,
                      char (*pname)[128], gdl_tensor **pwant) {
    char path[1024];
    const char *names[MAX_PARAMS];
    gdl_tensor *params[MAX_PARAMS], *out[MAX_IO], *loss;
    gdl_optimizer *opt;
    gdl_onnx_model *m;
    int n = 0, cnt, k, j;
    double l, err;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    CHECK((m = gdl_load_onnx(path, gdl_cpu())) != NULL);
    CHECK((cnt = gdl_onnx_parameters(m, names, params, MAX_PARAMS)) > 0 && cnt <= MAX_PARAMS);
    CHECK((opt = gdl_sgd_new(lr, 0, 0, 0, 0)) != NULL && gdl_optim_add_params(opt, params, cnt, -1, -1) >= 0);
    CHECK(gdl_onnx_run(m, 1, &x, MAX_IO, out, &n) == 0);
    CHECK((loss = gdl_mse_loss(out[0], target, GDL_REDUCE_MEAN)) != NULL);
    l = gdl_item(loss);
    CHECK(gdl_zero_grad(opt) == 0 && gdl_backward(loss) == 0 && gdl_step(opt) == 0);
    err = fabs(l - want_loss) / fabs(want_loss);
    verdict(err <= TOL, "fine-tune: the loss", file, err);
    if (cnt != np) {
        printf("FAIL %-22s fine-tune: %d trainable initializers, PyTorch's model has %d parameters\n", file, cnt, np);
        failures++;
    }
    for (k = 0; k < np; k++) {
        char what[160];
        for (j = 0; j < cnt && strcmp(names[j], pname[k]); j++) {}
        snprintf(what, sizeof what, "fine-tune: %.127s", pname[k]);
        if (j == cnt) {
            printf("FAIL %-22s %s is not a parameter of the import\n", file, what);
            failures++;
            continue;
        }
        err = rel_error(params[j], pwant[k]);
        verdict(err >= 0 && err <= TOL, what, file, err);
    }
    gdl_arena_reset();
    gdl_optim_free(opt);
    gdl_onnx_free(m);
}

/* a file the manifest says is refused: by gdl_load_onnx (an op) or gdl_onnx_run (an attribute), with a message
   naming the node and its op */
static void refused(const char *file, const char *at, const char *node, const char *op, gdl_tensor *x) {
    char path[1024], want[256];
    gdl_onnx_model *m;
    gdl_tensor *out[MAX_IO];
    int n = -1, ok;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(want, sizeof want, "node '%s' (%s", node, op);
    m = gdl_load_onnx(path, gdl_cpu());
    if (!strcmp(at, "load")) ok = !m;
    else ok = m && gdl_onnx_run(m, 1, &x, MAX_IO, out, &n) < 0 && n == 0;
    ok = ok && strstr(gdl_last_error(), want) != NULL;
    printf("%s %-22s refused at %s: %s\n", ok ? "ok  " : "FAIL", file, at, gdl_last_error());
    if (!ok) failures++;
    gdl_onnx_free(m);
    gdl_arena_reset();
}

/* ---- hand-made files: int8 initializers and the quantized ops not run ---- */

typedef struct { unsigned char b[512]; size_t n; } pbuf;

static void pb_varint(pbuf *p, uint64_t v) {
    do {
        CHECK(p->n < sizeof p->b);
        p->b[p->n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
}
static void pb_bytes(pbuf *p, int field, const void *data, size_t n) {
    pb_varint(p, (uint64_t)field << 3 | 2);
    pb_varint(p, n);
    CHECK(p->n + n <= sizeof p->b);
    memcpy(p->b + p->n, data, n);
    p->n += n;
}
static void pb_int(pbuf *p, int field, uint64_t v) {
    pb_varint(p, (uint64_t)field << 3);
    pb_varint(p, v);
}
/* a ModelProto (IR version 8, opset 18) around the GraphProto bytes g */
static pbuf pb_model(const pbuf *g) {
    pbuf m = {{0}, 0}, o = {{0}, 0};
    pb_int(&o, 2, 18);
    pb_int(&m, 1, 8);
    pb_bytes(&m, 7, g->b, g->n);
    pb_bytes(&m, 8, o.b, o.n);
    return m;
}

/* a ModelProto (opset 18) of one initializer 'w' of ONNX type `type`, dims {dim}, with raw_data of nraw bytes
   (nraw < 0: packed int32_data from ints[0..ni)), and when op is given one node of that op reading 'w' */
static pbuf model_bytes(int type, int64_t dim, int nraw, const int64_t *ints, int ni, const char *op) {
    pbuf t = {{0}, 0}, g = {{0}, 0}, n = {{0}, 0}, v = {{0}, 0}, io = {{0}, 0};
    static const unsigned char raw[8] = {1, 0xff, 0x80, 0x7f, 2, 3, 4, 5};
    int k;
    pb_int(&t, 1, (uint64_t)dim);
    pb_int(&t, 2, (uint64_t)type);
    pb_bytes(&t, 8, "w", 1);
    if (nraw >= 0) pb_bytes(&t, 9, raw, (size_t)nraw);
    else {
        for (k = 0; k < ni; k++) pb_varint(&v, (uint64_t)ints[k]);
        pb_bytes(&t, 5, v.b, v.n);
    }
    if (op) {
        pb_bytes(&n, 1, "w", 1);
        pb_bytes(&n, 2, "y", 1);
        pb_bytes(&n, 3, "the_node", 8);
        pb_bytes(&n, 4, op, strlen(op));
        pb_bytes(&g, 1, n.b, n.n);
    }
    pb_bytes(&g, 5, t.b, t.n);
    pb_bytes(&io, 1, op ? "y" : "w", 1);
    pb_bytes(&g, 12, io.b, io.n); /* the graph's output */
    return pb_model(&g);
}

/* a TensorProto named name of ONNX type `type`, dims {d0 (, d1)}, raw little-endian bytes */
static void pb_tensor(pbuf *g, int field, const char *name, int type, int nd, const int64_t *dims, const void *raw,
                      size_t n) {
    pbuf t = {{0}, 0};
    int k;
    for (k = 0; k < nd; k++) pb_int(&t, 1, (uint64_t)dims[k]);
    pb_int(&t, 2, (uint64_t)type);
    pb_bytes(&t, 8, name, strlen(name));
    pb_bytes(&t, 9, raw, n);
    pb_bytes(g, field, t.b, t.n);
}
static void pb_node(pbuf *g, const char *op, const char *a, const char *b, const char *c, const char *out, int axis) {
    pbuf n = {{0}, 0}, at = {{0}, 0};
    pb_bytes(&n, 1, a, strlen(a));
    pb_bytes(&n, 1, b, strlen(b));
    pb_bytes(&n, 1, c, strlen(c));
    pb_bytes(&n, 2, out, strlen(out));
    pb_bytes(&n, 3, out, strlen(out));
    pb_bytes(&n, 4, op, strlen(op));
    pb_bytes(&at, 1, "axis", 4);
    pb_int(&at, 3, (uint64_t)axis);
    pb_int(&at, 20, 2); /* INT */
    pb_bytes(&n, 5, at.b, at.n);
    pb_bytes(g, 1, n.b, n.n);
}

/* QuantizeLinear and DequantizeLinear per axis (axis 1) with int8 zero points on x [2, 3], against values worked
   out by hand (ONNX Runtime 1.32 gives the same): round half to even (0.5 -> 0, 1.5 -> 2, 2.5 -> 2) and saturation
   to -128..127 both ways */
static void check_qdq_per_axis(void) {
    static const float x[6] = {0.25f, 2.5f, -300, 0.75f, -126, 250}, sc[3] = {0.5f, 1, 2};
    static const float want_q[6] = {0, -1, -128, 2, -128, 127}, want_y[6] = {0, 2, -276, 1, -125, 234};
    static const signed char zp[3] = {0, -3, 10};
    const int64_t three = 3, xs[2] = {2, 3};
    pbuf g = {{0}, 0}, m, io = {{0}, 0};
    gdl_onnx_model *om;
    gdl_tensor *in, *out[2];
    float q[6], y[6];
    int nout = 0, ok;
    pb_node(&g, "QuantizeLinear", "x", "s", "z", "q", 1);
    pb_node(&g, "DequantizeLinear", "q", "s", "z", "y", 1);
    pb_tensor(&g, 5, "s", 1, 1, &three, sc, sizeof sc);
    pb_tensor(&g, 5, "z", 3, 1, &three, zp, sizeof zp);
    pb_bytes(&io, 1, "x", 1);
    pb_bytes(&g, 11, io.b, io.n);
    io.n = 0;
    pb_bytes(&io, 1, "q", 1);
    pb_bytes(&g, 12, io.b, io.n);
    io.n = 0;
    pb_bytes(&io, 1, "y", 1);
    pb_bytes(&g, 12, io.b, io.n);
    m = pb_model(&g);
    CHECK((om = gdl_onnx_parse(m.b, m.n, gdl_cpu())) != NULL);
    CHECK((in = gdl_from_array(x, 2, xs, GDL_F32, gdl_cpu())) != NULL);
    CHECK(gdl_onnx_run(om, 1, &in, 2, out, &nout) == 0 && nout == 2);
    CHECK(gdl_copy_to_host(out[0], q, sizeof q) == 0 && gdl_copy_to_host(out[1], y, sizeof y) == 0);
    ok = !memcmp(q, want_q, sizeof q) && !memcmp(y, want_y, sizeof y) && gdl_onnx_parameters(om, NULL, NULL, 0) == 0;
    printf("%s QuantizeLinear / DequantizeLinear per axis, int8: q %g %g %g %g %g %g, y %g %g %g %g %g %g\n",
           ok ? "ok  " : "FAIL", q[0], q[1], q[2], q[3], q[4], q[5], y[0], y[1], y[2], y[3], y[4], y[5]);
    failures += !ok;
    gdl_free(in);
    gdl_onnx_free(om);
}

/* one hand-made file loads (want NULL) or is refused with an error holding want */
static void expect_load(const char *what, pbuf p, const char *want) {
    gdl_onnx_model *m = gdl_onnx_parse(p.b, p.n, gdl_cpu());
    int ok = want ? !m && strstr(gdl_last_error(), want) != NULL : m != NULL;
    printf("%s int8 file: %-44s %s\n", ok ? "ok  " : "FAIL", what, m ? "loads" : gdl_last_error());
    if (!ok) failures++;
    gdl_onnx_free(m);
}

/* int8 initializers: read whole (the graph's output is the initializer: its values come back as f32 integers,
   and gdl_onnx_parameters offers none), refused cleanly when raw_data is shorter or longer than the dims or
   int32_data leaves the type's range; the quantized ops that are not run are refused at load with the node's
   name and op */
static void check_int8_files(void) {
    static const int64_t fits[4] = {1, 0x7f, 0x80, 3}, neg[2] = {-1, 0}; /* 0x80: 128, beyond int8 */
    const int64_t negs[2] = {(int64_t)0xffffffffffffffffull, 5}; /* -1 as an int32_data varint */
    const char *const unrun[] = {"QLinearConv", "QLinearMatMul", "DynamicQuantizeLinear"};
    gdl_onnx_model *m;
    gdl_tensor *out[1], *none[1] = {NULL};
    float v[4];
    int nout = 0, k;
    pbuf whole = model_bytes(3, 4, 4, NULL, 0, NULL);
    CHECK((m = gdl_onnx_parse(whole.b, whole.n, gdl_cpu())) != NULL);
    CHECK(gdl_onnx_run(m, 0, none, 1, out, &nout) == 0 && nout == 1 && out[0]->dtype == GDL_F32);
    CHECK(gdl_copy_to_host(out[0], v, sizeof v) == 0);
    k = v[0] == 1 && v[1] == -1 && v[2] == -128 && v[3] == 127;
    printf("%s int8 file: raw_data 01 ff 80 7f read as %g %g %g %g\n", k ? "ok  " : "FAIL", v[0], v[1], v[2], v[3]);
    failures += !k;
    CHECK(gdl_onnx_parameters(m, NULL, NULL, 0) == 0); /* int8 data: no float parameter */
    gdl_onnx_free(m);
    expect_load("int8 raw_data of 4 bytes for dims [4]", whole, NULL);
    expect_load("int8 raw_data of 2 bytes for dims [4]", model_bytes(3, 4, 2, NULL, 0, NULL), "data's length");
    expect_load("int8 raw_data of 8 bytes for dims [4]", model_bytes(3, 4, 8, NULL, 0, NULL), "data's length");
    expect_load("uint8 raw_data of 3 bytes for dims [4]", model_bytes(2, 4, 3, NULL, 0, NULL), "data's length");
    expect_load("int8 raw_data for dims [2^33]", model_bytes(3, (int64_t)1 << 33, 4, NULL, 0, NULL), "dims");
    expect_load("int8 int32_data -1 5", model_bytes(3, 2, -1, negs, 2, NULL), NULL);
    expect_load("int8 int32_data 1 127 128 3", model_bytes(3, 4, -1, fits, 4, NULL), "outside");
    expect_load("uint8 int32_data 1 127 128 3", model_bytes(2, 4, -1, fits, 4, NULL), NULL);
    expect_load("uint8 int32_data -1 0", model_bytes(2, 2, -1, neg, 2, NULL), "outside");
    expect_load("int8 int32_data of 3 values for dims [4]", model_bytes(3, 4, -1, fits, 3, NULL), "data's length");
    for (k = 0; k < 3; k++) {
        char want[96];
        snprintf(want, sizeof want, "node 'the_node' (%s)", unrun[k]);
        expect_load(unrun[k], model_bytes(3, 4, 4, NULL, 0, unrun[k]), want);
    }
}

/* Runs the hand-made model m: want NULL, it must make one output of numel elements; else fail with an error
   holding want. Prints "ok"/"FAIL", what, and done or the error. */
static void check_run(const pbuf *m, const char *want, int64_t numel, const char *what, const char *done) {
    gdl_onnx_model *om;
    gdl_tensor *out[1] = {NULL}, *none[1] = {NULL};
    int nout = -1, rc, ok;
    CHECK((om = gdl_onnx_parse(m->b, m->n, gdl_cpu())) != NULL);
    rc = gdl_onnx_run(om, 0, none, 1, out, &nout);
    ok = want ? rc < 0 && nout == 0 && strstr(gdl_last_error(), want) != NULL
              : rc == 0 && nout == 1 && out[0]->numel == numel;
    printf("%s %s: %s\n", ok ? "ok  " : "FAIL", what, rc == 0 ? done : gdl_last_error());
    failures += !ok;
    gdl_onnx_free(om);
    gdl_arena_reset();
}

/* ConstantOfShape and Expand at a shape from the file: up to 2^24 elements made, more refused with the node's name
   before anything is filled (a fuzzed file asked for 2^28), a negative dim refused */
static void check_made_shapes(void) {
    static const struct { const char *op; int64_t dims[2]; const char *want; } cases[] = {
        {"ConstantOfShape", {4096, 4096}, NULL},
        {"ConstantOfShape", {4096, 4097}, "node 'y' (ConstantOfShape): a shape of over 16777216 elements"},
        {"Expand", {8192, 4096}, "node 'y' (Expand): a shape of over 16777216 elements"},
        {"Expand", {3, -2}, "node 'y' (Expand): a negative dim in the shape -2"},
    };
    const int64_t two = 2, one = 1;
    const float x1 = 1.5f;
    int c;
    for (c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        pbuf g = {{0}, 0}, m, io = {{0}, 0}, n = {{0}, 0};
        unsigned char raw[16];
        char what[64];
        int k, expand = !strcmp(cases[c].op, "Expand");
        for (k = 0; k < 16; k++) raw[k] = (unsigned char)((uint64_t)cases[c].dims[k / 8] >> (8 * (k % 8)));
        if (expand) pb_bytes(&n, 1, "x", 1);
        pb_bytes(&n, 1, "s", 1);
        pb_bytes(&n, 2, "y", 1);
        pb_bytes(&n, 3, "y", 1);
        pb_bytes(&n, 4, cases[c].op, strlen(cases[c].op));
        pb_bytes(&g, 1, n.b, n.n);
        pb_tensor(&g, 5, "s", 7, 1, &two, raw, sizeof raw); /* INT64 [2] */
        if (expand) pb_tensor(&g, 5, "x", 1, 1, &one, &x1, sizeof x1);
        pb_bytes(&io, 1, "y", 1);
        pb_bytes(&g, 12, io.b, io.n);
        m = pb_model(&g);
        snprintf(what, sizeof what, "%s at [%lld,%lld]", cases[c].op, (long long)cases[c].dims[0],
                 (long long)cases[c].dims[1]);
        check_run(&m, cases[c].want, cases[c].dims[0] * cases[c].dims[1], what, "made");
    }
}

/* A Conv whose pads enlarge its maps makes at most GDL__OI_MAX_MADE elements (a fuzzed file's pads of 2^20 would
   make terabytes): x [1, 1, 4, 4], w [1, 1, 3, 3] of ones, pads p on every side */
static void check_padded_conv(void) {
    static const struct { int64_t pad; const char *want; } cases[] = {
        {1, NULL}, {2, NULL}, {3000, "node 'y' (Conv): pads (3000, 3000) make an output of 36024004 elements"}};
    const int64_t xs[4] = {1, 1, 4, 4}, ws[4] = {1, 1, 3, 3};
    float ones[16];
    int c, k;
    for (k = 0; k < 16; k++) ones[k] = 1;
    for (c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        pbuf g = {{0}, 0}, m, io = {{0}, 0}, n = {{0}, 0}, at = {{0}, 0};
        const int64_t side = 4 + 2 * cases[c].pad - 2;
        char what[64];
        pb_bytes(&n, 1, "x", 1);
        pb_bytes(&n, 1, "w", 1);
        pb_bytes(&n, 2, "y", 1);
        pb_bytes(&n, 3, "y", 1);
        pb_bytes(&n, 4, "Conv", 4);
        pb_bytes(&at, 1, "pads", 4);
        for (k = 0; k < 4; k++) pb_int(&at, 8, (uint64_t)cases[c].pad);
        pb_int(&at, 20, 7); /* INTS */
        pb_bytes(&n, 5, at.b, at.n);
        pb_bytes(&g, 1, n.b, n.n);
        pb_tensor(&g, 5, "x", 1, 4, xs, ones, sizeof ones); /* FLOAT */
        pb_tensor(&g, 5, "w", 1, 4, ws, ones, 9 * sizeof ones[0]);
        pb_bytes(&io, 1, "y", 1);
        pb_bytes(&g, 12, io.b, io.n);
        m = pb_model(&g);
        snprintf(what, sizeof what, "Conv with pads %lld", (long long)cases[c].pad);
        check_run(&m, cases[c].want, side * side, what, "ran");
    }
}

int main(int argc, char **argv) {
    char path[1024], line[1024], file[512], kind[16], dtype[8], at[8], node[128], op[64];
    static char pname[MAX_PARAMS][128];
    gdl_tensor *in[MAX_IO], *want[MAX_IO], *pwant[MAX_PARAMS], *target = NULL;
    int nin = 0, nout = 0, np = 0, models = 0, k, pos;
    char model_file[512] = "", train_file[512] = "";
    double lr = 0, loss = 0;
    FILE *f;
    if (argc != 2) {
        fprintf(stderr, "usage: onnx_import DIR\n");
        return 2;
    }
    dir = argv[1];
    snprintf(path, sizeof path, "%s/manifest.txt", dir);
    CHECK((f = fopen(path, "r")) != NULL);
    for (;;) {
        int more = fgets(line, sizeof line, f) != NULL;
        if (!more || !strncmp(line, "model ", 6) || !strncmp(line, "refuse ", 7)) { /* the block before is whole */
            if (model_file[0]) {
                run_model(model_file, nin, in, nout, want);
                models++;
            }
            if (train_file[0]) fine_tune(train_file, in[0], target, lr, loss, np, pname, pwant);
            for (k = 0; k < np; k++) gdl_free(pwant[k]);
            for (k = 0; k < nin; k++) gdl_free(in[k]);
            for (k = 0; k < nout; k++) gdl_free(want[k]);
            gdl_free(target);
            target = NULL;
            nin = nout = np = 0;
            model_file[0] = train_file[0] = 0;
        }
        if (!more) break;
        CHECK(sscanf(line, "%15s %511s%n", kind, file, &pos) == 2);
        if (!strcmp(kind, "model")) { /* model NAME FILE NIN NOUT: the in and out lines follow */
            CHECK(sscanf(line + pos, "%511s", model_file) == 1);
        } else if (!strcmp(kind, "in")) {
            int used;
            CHECK(nin < MAX_IO && sscanf(line + pos, "%7s%n", dtype, &used) == 1);
            in[nin++] = load_tensor(file, dtype, line, pos + used);
        } else if (!strcmp(kind, "out")) {
            CHECK(nout < MAX_IO);
            want[nout++] = load_tensor(file, "f32", line, pos);
        } else if (!strcmp(kind, "train")) {
            char tfile[512];
            int ndim;
            int64_t shape[GDL_MAX_DIMS];
            CHECK(sscanf(line + pos, "%511s %lf %lf", tfile, &lr, &loss) == 3 && nout >= 1);
            for (ndim = 0; ndim < want[0]->ndim; ndim++) shape[ndim] = want[0]->shape[ndim];
            {
                float *v = (float *)read_raw(tfile, want[0]->numel, 4);
                CHECK((target = gdl_from_array(v, ndim, shape, GDL_F32, gdl_cpu())) != NULL);
                free(v);
            }
            snprintf(train_file, sizeof train_file, "%s", file);
        } else if (!strcmp(kind, "param")) {
            char pfile[512];
            int used;
            CHECK(np < MAX_PARAMS && sscanf(line + pos, "%511s%n", pfile, &used) == 1);
            snprintf(pname[np], sizeof pname[np], "%.127s", file);
            pwant[np++] = load_tensor(pfile, "f32", line, pos + used);
        } else if (!strcmp(kind, "refuse")) { /* refuse FILE load|run NODE OP NDIM DIMS (the input) */
            int used;
            gdl_tensor *x;
            CHECK(sscanf(line + pos, "%7s %127s %63s%n", at, node, op, &used) == 3);
            {
                int ndim;
                int64_t shape[GDL_MAX_DIMS];
                pos += used;
                read_dims(line, &pos, &ndim, shape);
                CHECK((x = gdl_zeros(ndim, shape, GDL_F32, gdl_cpu())) != NULL);
            }
            refused(file, at, node, op, x);
            gdl_free(x);
        } else {
            CHECK(!"a manifest line of a known kind");
        }
    }
    fclose(f);
    check_int8_files();
    check_qdq_per_axis();
    check_made_shapes();
    check_padded_conv();
    printf("onnx_import: %d PyTorch exports run by gdl_onnx_run, %d failures\n", models, failures);
    gdl_shutdown();
    return failures ? 1 : 0;
}
