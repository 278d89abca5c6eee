/* test_gradcheck.c — every differentiable op's backward against central finite
   differences, in double precision (built with -DGPUDL_DOUBLE).

   The cases are the rows of tests/op_cases.h. Each row names the gdl_op its
   output must come from, so test_every_op_has_a_case() fails when an op is
   added to the op table without a row. Inputs are random (seeded), never
   zero, with odd sizes (1, 3, 17, 33). The check: L = sum(out * w) for a
   random w; dL/dx from gdl_backward_grad(out, w) against
   (L(x + h e_j) - L(x - h e_j)) / 2h for every element j of every input.
   Every row runs twice: as written, and through fanout_forward() (each
   differentiable input used again after the row's ops), which fails when a
   backward assigns its gradient instead of adding to it. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"

#ifndef GPUDL_DOUBLE
#error "test_gradcheck.c must be built with -DGPUDL_DOUBLE"
#endif

#include "op_cases.h"

/* ---- the check ---- */

/* L = sum(out * w), forward only */
typedef struct gc_run {
    const gc_case *c;
    int fanout;
} gc_run;

static gdl_tensor *run_forward(const gc_run *r, gdl_tensor **in) {
    return r->fanout ? fanout_forward(r->c, in) : r->c->forward(in);
}

static double loss_of(const gc_run *r, gdl_tensor **in, const double *w, int64_t n) {
    gdl_tensor *out;
    double L = 0;
    int64_t i;
    gdl_arena_reset();
    gdl_manual_seed(99); /* the same dropout mask in every evaluation */
    out = run_forward(r, in);
    if (!out || out->numel != n) return NAN;
    for (i = 0; i < n; i++) L += ((double *)out->data)[i] * w[i];
    return L;
}

TEST gradcheck(void *arg) {
    const gc_run *r = (const gc_run *)arg;
    const gc_case *c = r->c;
    gdl_tensor *in[5] = {0}, *out, *wt;
    double *w = NULL, *ana[5] = {0}, worst = 0;
    int64_t n, j;
    int k, rc = HARNESS_PASS;
    char msg[512] = "";
    gdl_manual_seed(1234);
    for (k = 0; k < c->nin; k++) ASSERT_NOT_NULL(in[k] = make_input(&c->in[k]));
    gdl_arena_reset();
    gdl_manual_seed(99);
    gdl_set_grad_enabled(1);
    out = run_forward(r, in);
    if (!out) FAILf("%s: forward failed: %s", c->name, gdl_last_error());
    ASSERT_EQm("the output comes from the op this row names", r->fanout ? GDL_OP_ADD : c->op, gdl_tensor_op(out));
    n = out->numel;
    wt = gdl_randn(out->ndim, out->shape, gdl_cpu());
    ASSERT_NOT_NULL(wt);
    w = (double *)wt->data;
    if (gdl_backward_grad(out, wt) < 0) FAILf("%s: backward failed: %s", c->name, gdl_last_error());
    for (k = 0; k < c->nin; k++) {
        if (!in[k]->requires_grad) continue;
        ASSERT_NOT_NULL(in[k]->grad);
        ana[k] = (double *)malloc(sizeof(double) * (size_t)in[k]->numel);
        memcpy(ana[k], in[k]->grad->data, sizeof(double) * (size_t)in[k]->numel);
    }
    gdl_set_grad_enabled(0);
    for (k = 0; k < c->nin && rc == HARNESS_PASS; k++) {
        double *x = (double *)in[k]->data;
        if (!ana[k]) continue;
        for (j = 0; j < in[k]->numel; j++) {
            const double h = 1e-6;
            double x0 = x[j], lp, lm, num, err;
            x[j] = x0 + h;
            lp = loss_of(r, in, w, n);
            x[j] = x0 - h;
            lm = loss_of(r, in, w, n);
            x[j] = x0;
            num = (lp - lm) / (2 * h);
            err = fabs(num - ana[k][j]) / (1e-6 + 1e-5 * fabs(num));
            if (err > worst) worst = err;
            if (!(err <= 1.0)) {
                snprintf(msg, sizeof msg, "%s%s: input %d element %lld: numeric %.10g vs analytic %.10g", c->name,
                         r->fanout ? " (fan-out)" : "", k, (long long)j, num, ana[k][j]);
                rc = HARNESS_FAIL;
                break;
            }
        }
    }
    gdl_set_grad_enabled(1);
    for (k = 0; k < c->nin; k++) {
        free(ana[k]);
        gdl_free(in[k]);
    }
    gdl_free(wt);
    gdl_arena_reset();
    if (rc != HARNESS_PASS) FAILm(msg);
    PASS();
}

TEST test_every_op_has_a_case(void) {
    int op, i;
    for (op = 0; op < GDL_OP_COUNT; op++) {
        int found = 0;
        for (i = 0; i < NCASES; i++) found |= cases[i].op == op;
        if (!found) FAILf("op %s (%d) has no gradient-check case", gdl_op_name(op), op);
    }
    PASS();
}

TEST test_op_names_unique(void) {
    int a, b;
    for (a = 0; a < GDL_OP_COUNT; a++) {
        ASSERT(strcmp(gdl_op_name(a), "invalid-op") != 0);
        for (b = a + 1; b < GDL_OP_COUNT; b++) ASSERT(strcmp(gdl_op_name(a), gdl_op_name(b)) != 0);
    }
    ASSERT_STR_EQ("invalid-op", gdl_op_name(GDL_OP_COUNT));
    PASS();
}

/* The op list's autocast classes against torch.autocast's CUDA op lists
   (docs/DESIGN.md): only matmul/linear/conv go to the low dtype; the f32 list's
   ops that gpudl has go to f32; every other op keeps its inputs' dtype. The
   fused linear_act / conv2d_act follow linear / conv2d, which they begin with. */
TEST test_op_list_autocast_classes(void) {
    static const char *low[] = {"matmul", "linear", "conv2d", "linear_act", "conv2d_act", "scaled_dot_product_attention"};
    static const char *f32[] = {"softmax", "log_softmax", "cross_entropy", "nll_loss", "layer_norm", "mse_loss",
                                "bce_with_logits", "sum", "exp", "log", "pow_scalar", "rsqrt", "pow", "cumsum"};
    int op;
    size_t k;
    for (op = 0; op < GDL_OP_COUNT; op++) {
        int want = GDL_AUTOCAST_PROMOTE;
        for (k = 0; k < sizeof low / sizeof *low; k++)
            if (!strcmp(gdl_op_name(op), low[k])) want = GDL_AUTOCAST_LOW;
        for (k = 0; k < sizeof f32 / sizeof *f32; k++)
            if (!strcmp(gdl_op_name(op), f32[k])) want = GDL_AUTOCAST_F32;
        if (gdl_op_autocast_class(op) != want)
            FAILf("op %s: autocast class %d, torch.autocast's is %d", gdl_op_name(op), gdl_op_autocast_class(op), want);
    }
    ASSERT_EQ(-1, gdl_op_autocast_class(GDL_OP_COUNT));
    ASSERT_EQ(-1, gdl_op_autocast_class(-1));
    PASS();
}

/* ---- the recurrent modules: a 2-layer, bidirectional, batch_first LSTM / GRU with given initial states,
   L = sum(out*w1) + sum(h_n*w2) (+ sum(c_n*w3)); every parameter, the input and the states against central
   differences. The dropout between layers is on (p 0.5, the same mask in every evaluation). */
typedef struct rnn_gc {
    gdl_module *m;
    int lstm;
    gdl_tensor *x, *h0, *c0, *w[3];
} rnn_gc;

static gdl_tensor *rnn_gc_loss(rnn_gc *g) {
    gdl_tensor *out, *hn, *cn = NULL, *l;
    int rc;
    gdl_manual_seed(7); /* the dropout mask */
    rc = g->lstm ? gdl_nn_lstm_forward(g->m, g->x, g->h0, g->c0, &out, &hn, &cn)
                 : gdl_nn_gru_forward(g->m, g->x, g->h0, &out, &hn);
    if (rc < 0) return NULL;
    l = gdl_add(gdl_sum(gdl_mul(out, g->w[0])), gdl_sum(gdl_mul(hn, g->w[1])));
    return g->lstm ? gdl_add(l, gdl_sum(gdl_mul(cn, g->w[2]))) : l;
}

TEST rnn_module_gradcheck(void *arg) {
    const int lstm = arg != NULL;
    const int64_t B = 2, T = 3, I = 3, H = 2;
    int64_t xs[3] = {B, T, I}, ss[3] = {4, B, H}, os[3] = {B, T, 2 * H};
    rnn_gc g;
    gdl_tensor *ts[40], *l;
    const char *names[40];
    double *ana[40] = {0}, worst = 0;
    int n, k, checked = 0, rc = HARNESS_PASS;
    char msg[512] = "";
    memset(&g, 0, sizeof g);
    gdl_manual_seed(5);
    g.lstm = lstm;
    g.m = lstm ? gdl_nn_lstm(I, H, 2, 1, 1, 0.5, 1) : gdl_nn_gru(I, H, 2, 1, 1, 0.5, 1);
    ASSERT_NOT_NULL(g.m);
    ASSERT_NOT_NULL(g.x = gdl_randn(3, xs, gdl_cpu()));
    ASSERT_NOT_NULL(g.h0 = gdl_randn(3, ss, gdl_cpu()));
    ASSERT_NOT_NULL(g.c0 = gdl_randn(3, ss, gdl_cpu()));
    ASSERT_NOT_NULL(g.w[0] = gdl_randn(3, os, gdl_cpu()));
    ASSERT_NOT_NULL(g.w[1] = gdl_randn(3, ss, gdl_cpu()));
    ASSERT_NOT_NULL(g.w[2] = gdl_randn(3, ss, gdl_cpu()));
    gdl_set_requires_grad(g.x, 1);
    gdl_set_requires_grad(g.h0, 1);
    gdl_set_requires_grad(g.c0, 1);
    n = gdl_module_named_tensors(g.m, GDL_PARAMS, names, ts, 36);
    ASSERT_EQ(16, n);
    ts[n] = g.x; names[n++] = "input";
    ts[n] = g.h0; names[n++] = "h0";
    if (lstm) { ts[n] = g.c0; names[n++] = "c0"; }
    gdl_arena_reset();
    gdl_set_grad_enabled(1);
    ASSERT_NOT_NULL(l = rnn_gc_loss(&g));
    if (gdl_backward(l) < 0) FAILf("backward failed: %s", gdl_last_error());
    for (k = 0; k < n; k++) {
        if (!ts[k]->grad) FAILf("%s has no gradient", names[k]);
        ana[k] = (double *)malloc(sizeof(double) * (size_t)ts[k]->numel);
        memcpy(ana[k], ts[k]->grad->data, sizeof(double) * (size_t)ts[k]->numel);
    }
    gdl_set_grad_enabled(0);
    for (k = 0; k < n && rc == HARNESS_PASS; k++) {
        double *x = (double *)ts[k]->data;
        int64_t j;
        for (j = 0; j < ts[k]->numel; j++) {
            const double h = 1e-6;
            double x0 = x[j], lp, lm, num, err;
            gdl_arena_reset();
            x[j] = x0 + h;
            lp = gdl_item(rnn_gc_loss(&g));
            x[j] = x0 - h;
            lm = gdl_item(rnn_gc_loss(&g));
            x[j] = x0;
            num = (lp - lm) / (2 * h);
            err = fabs(num - ana[k][j]) / (1e-6 + 1e-5 * fabs(num));
            if (err > worst) worst = err;
            checked += fabs(ana[k][j]) > 1e-3;
            if (!(err <= 1.0)) {
                snprintf(msg, sizeof msg, "%s: %s element %lld: numeric %.10g vs analytic %.10g", lstm ? "LSTM" : "GRU",
                         names[k], (long long)j, num, ana[k][j]);
                rc = HARNESS_FAIL;
                break;
            }
        }
    }
    gdl_set_grad_enabled(1);
    for (k = 0; k < n; k++) free(ana[k]);
    gdl_module_free(g.m);
    for (k = 0; k < 3; k++) gdl_free(g.w[k]);
    gdl_free(g.x);
    gdl_free(g.h0);
    gdl_free(g.c0);
    gdl_arena_reset();
    if (rc != HARNESS_PASS) FAILm(msg);
    /* most gradients are far from zero (a check of zeros against zeros proves little) */
    if (checked < (lstm ? 270 : 200)) FAILf("only %d gradient elements above 1e-3", checked);
    PASS();
}

static gc_run runs[2 * NCASES];

SUITE(gradients) {
    int i;
    char name[96];
    RUN_TEST(test_every_op_has_a_case);
    RUN_TEST(test_op_names_unique);
    RUN_TEST(test_op_list_autocast_classes);
    RUN_TEST_NAMED("lstm_module_2layer_bidirectional", rnn_module_gradcheck, (void *)"lstm");
    RUN_TEST_NAMED("gru_module_2layer_bidirectional", rnn_module_gradcheck, NULL);
    for (i = 0; i < NCASES; i++) {
        runs[2 * i].c = runs[2 * i + 1].c = &cases[i];
        runs[2 * i + 1].fanout = 1;
        RUN_TEST_NAMED(cases[i].name, gradcheck, (void *)&runs[2 * i]);
        snprintf(name, sizeof name, "%s_fanout", cases[i].name);
        RUN_TEST_NAMED(name, gradcheck, (void *)&runs[2 * i + 1]);
    }
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(gradients);
    gdl_shutdown();
    HARNESS_MAIN_END();
}
