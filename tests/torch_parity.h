/* torch_parity.h — the recurrent modules, the sequence ops and the Transformer modules against PyTorch's
   values, without torch: each case of tests/torch_fixtures/{rnn,seq_ops}.safetensors (written by make
   seq-fixtures from the cases of bench/rnn_oracle.c and bench/seq_ops_oracle.c, PyTorch's results in float64)
   is rebuilt from its "cfg" entry (transformer.safetensors: the cases of transformer_parity_cases.h) on a
   device, given the fixture's parameters (state_dict names), inputs, lengths and loss weights,
   run forward and backward, and every output and gradient compared with PyTorch's: |got - want| <= tol *
   (1 + |want|), NaN where PyTorch has NaN, indices exactly, and no gradient of PyTorch's left out. Included by tests/test_torch_parity.c (the CPU,
   float64) and tests/test_cuda.c (the GPU, f32); include after gpudl.h and harness.h. */
#ifndef GPUDL_TORCH_PARITY_H
#define GPUDL_TORCH_PARITY_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transformer_parity_cases.h"

#define TP_FIXTURE_DIR "tests/torch_fixtures/"
#define TP_MAX_PARAMS 256

typedef struct tp_ctx {
    const gdl_st_file *f;
    gdl_device dev;
    double tol;
    double worst;     /* the largest |got - want| / (1 + |want|) seen */
    char worst_at[160];
    int compared;     /* tensors compared */
    int failed;       /* tensors over tol, missing or misshapen (each printed) */
    int grads;        /* gradients compared in the case running */
    gdl_tensor *owned[32]; /* the case's tensors made from the fixture, freed after it */
    int nowned;
} tp_ctx;

static const gdl_st_entry *tp_entry(const tp_ctx *c, const char *pre, const char *name) {
    char full[2 * GDL_ST_NAME_MAX];
    return (size_t)snprintf(full, sizeof full, "%s%s", pre, name) < sizeof full ? gdl_st_find(c->f, full) : NULL;
}

/* entry e's values as doubles (F64 or I32); NULL when it is neither */
static double *tp_values(const tp_ctx *c, const gdl_st_entry *e, int64_t *n) {
    const unsigned char *p = c->f->data + e->begin;
    int is_f64 = strcmp(e->dtype, "F64") == 0, is_i32 = strcmp(e->dtype, "I32") == 0;
    size_t es = is_f64 ? 8 : 4;
    int64_t i, k = (int64_t)((e->end - e->begin) / es);
    double *v;
    if ((!is_f64 && !is_i32) || !(v = (double *)malloc(sizeof(double) * (size_t)(k + 1)))) return NULL;
    for (i = 0; i < k; i++) {
        if (is_f64) {
            memcpy(&v[i], p + 8 * i, 8);
        } else {
            int32_t q;
            memcpy(&q, p + 4 * i, 4);
            v[i] = q;
        }
    }
    *n = k;
    return v;
}

/* the entry pre+name as a persistent tensor on c->dev: F64 as the real dtype, I32 as i32; NULL if absent */
static gdl_tensor *tp_tensor(tp_ctx *c, const char *pre, const char *name, int requires_grad) {
    const gdl_st_entry *e = tp_entry(c, pre, name);
    gdl_tensor *t = NULL;
    int64_t n = 0, i;
    double *v;
    if (!e || !(v = tp_values(c, e, &n))) return NULL;
    if (strcmp(e->dtype, "I32") == 0) {
        int32_t *q = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
        for (i = 0; q && i < n; i++) q[i] = (int32_t)v[i];
        if (q) t = gdl_from_array(q, e->ndim, e->shape, GDL_I32, c->dev);
        free(q);
    } else {
        gdl_real *r = (gdl_real *)malloc(sizeof(gdl_real) * (size_t)(n + 1));
        for (i = 0; r && i < n; i++) r[i] = (gdl_real)v[i];
        if (r) t = gdl_from_array(r, e->ndim, e->shape, GDL_F32, c->dev);
        free(r);
    }
    free(v);
    if (t && c->nowned == (int)(sizeof c->owned / sizeof c->owned[0])) {
        gdl_free(t);
        return NULL;
    }
    if (t) c->owned[c->nowned++] = t;
    if (t && requires_grad) gdl_set_requires_grad(t, 1);
    return t;
}

static void tp_fail(tp_ctx *c, const char *pre, const char *name, const char *why) {
    printf("    torch parity: %s%s: %s\n", pre, name, why);
    c->failed++;
}

/* got (any device) against PyTorch's pre+name */
static void tp_compare(tp_ctx *c, const char *pre, const char *name, gdl_tensor *got) {
    const gdl_st_entry *e = tp_entry(c, pre, name);
    gdl_tensor *h = NULL, *hf = NULL;
    double *want = NULL, worst = 0;
    char why[200];
    int64_t n = 0, i;
    int k;
    c->compared++;
    if (strncmp(name, "grad.", 5) == 0) c->grads++;
    if (!e || !got) {
        tp_fail(c, pre, name, !e ? "not in the fixture" : "gpudl gave none");
        return;
    }
    if (e->ndim != got->ndim) {
        snprintf(why, sizeof why, "%d dims, torch's %d", got->ndim, e->ndim);
        tp_fail(c, pre, name, why);
        return;
    }
    for (k = 0; k < e->ndim; k++)
        if (e->shape[k] != got->shape[k]) {
            tp_fail(c, pre, name, "shape differs from torch's");
            return;
        }
    if (!(h = gdl_to(got, gdl_cpu())) || !(hf = got->dtype == GDL_F32 ? h : gdl_to_dtype(h, GDL_F32)) ||
        !(want = tp_values(c, e, &n)) || n != got->numel) {
        tp_fail(c, pre, name, "could not be read back");
    } else {
        for (i = 0; i < n; i++) {
            double g = (double)((const gdl_real *)hf->data)[i], w = want[i], d;
            if (isnan(w) || isnan(g)) {
                d = isnan(w) && isnan(g) ? 0 : INFINITY;
            } else {
                d = fabs(g - w) / (1 + fabs(w));
            }
            if (strcmp(e->dtype, "I32") == 0 && g != w) d = INFINITY; /* indices: exactly */
            if (d > worst) worst = d;
        }
        if (worst > c->worst) {
            c->worst = worst;
            snprintf(c->worst_at, sizeof c->worst_at, "%s%s", pre, name);
        }
        if (!(worst <= c->tol)) {
            snprintf(why, sizeof why, "|gpudl - torch| / (1 + |torch|) up to %.3g, over %.3g", worst, c->tol);
            tp_fail(c, pre, name, why);
        }
    }
    free(want);
    if (hf != h) gdl_free(hf);
    if (h != got) gdl_free(h);
}

/* the fixture's values copied into m's parameters, found under their state_dict names */
static int tp_load_params(tp_ctx *c, const char *pre, gdl_module *m) {
    const char *names[TP_MAX_PARAMS];
    gdl_tensor *ts[TP_MAX_PARAMS];
    int n = gdl_module_named_tensors(m, GDL_PARAMS, names, ts, TP_MAX_PARAMS), k;
    if (n > TP_MAX_PARAMS) {
        tp_fail(c, pre, "", "more parameters than TP_MAX_PARAMS");
        return -1;
    }
    for (k = 0; k < n; k++) {
        gdl_tensor *src = tp_tensor(c, pre, names[k], 0);
        if (!src || src->numel != ts[k]->numel) {
            tp_fail(c, pre, names[k], "parameter missing or misshapen in the fixture");
            return -1;
        }
        if (gdl_copy_(ts[k], src) < 0) return -1;
        gdl_free(c->owned[--c->nowned]); /* src, made last */
    }
    return n;
}

static void tp_compare_param_grads(tp_ctx *c, const char *pre, gdl_module *m) {
    const char *names[TP_MAX_PARAMS];
    gdl_tensor *ts[TP_MAX_PARAMS];
    char g[96];
    int n = gdl_module_named_tensors(m, GDL_PARAMS, names, ts, TP_MAX_PARAMS), k;
    if (n > TP_MAX_PARAMS) n = TP_MAX_PARAMS; /* tp_load_params failed the case already */
    for (k = 0; k < n; k++) {
        snprintf(g, sizeof g, "grad.%s", names[k]);
        tp_compare(c, pre, g, ts[k]->grad);
    }
}

/* cfg: kind (0 LSTM, 1 GRU, 2 RNN), input_size, hidden_size, num_layers, bias, batch_first, bidirectional,
   proj_size, relu; loss sum(out * w0) + sum(h_n * w1) (+ sum(c_n * w2)) */
static int tp_rnn_case(tp_ctx *c, const char *pre, const double *cfg) {
    static const char *const out_names[3] = {"out", "h_n", "c_n"};
    gdl_rnn_opts o = gdl_rnn_defaults();
    gdl_forward_opts fo = gdl_forward_defaults();
    const int kind = (int)cfg[0];
    const gdl_st_entry *le = tp_entry(c, pre, "lengths");
    gdl_tensor *x, *h0, *c0 = NULL, *outs[3] = {0}, *l = NULL;
    gdl_module *m;
    int64_t lengths[16];
    int k, nout, rc = -1;
    o.num_layers = (int)cfg[3];
    o.bias = (int)cfg[4];
    o.batch_first = (int)cfg[5];
    o.bidirectional = (int)cfg[6];
    o.proj_size = (int64_t)cfg[7];
    o.nonlinearity = kind == 2 ? (cfg[8] != 0 ? "relu" : "tanh") : NULL;
    m = kind == 0 ? gdl_nn_lstm_ex((int64_t)cfg[1], (int64_t)cfg[2], &o)
        : kind == 1 ? gdl_nn_gru_ex((int64_t)cfg[1], (int64_t)cfg[2], &o)
                    : gdl_nn_rnn_ex((int64_t)cfg[1], (int64_t)cfg[2], &o);
    if (!m || gdl_module_to(m, c->dev) < 0 || tp_load_params(c, pre, m) < 0) goto done;
    x = tp_tensor(c, pre, "x", 1);
    h0 = tp_tensor(c, pre, "h0", 1);
    if (kind == 0) c0 = tp_tensor(c, pre, "c0", 1);
    if (!x || !h0 || (kind == 0 && !c0)) goto done;
    fo.h0 = h0;
    fo.c0 = c0;
    if (le) {
        int64_t n = 0;
        double *v = tp_values(c, le, &n);
        if (!v || n > 16) goto done;
        for (k = 0; k < n; k++) lengths[k] = (int64_t)v[k];
        free(v);
        fo.lengths = lengths;
        fo.nlengths = n;
    }
    if ((nout = gdl_forward_ex(m, x, &fo, outs, 3)) < 0) goto done;
    for (k = 0; k < nout; k++) {
        char wn[8];
        gdl_tensor *w, *t;
        snprintf(wn, sizeof wn, "w%d", k);
        if (!(w = tp_tensor(c, pre, wn, 0)) || !(t = gdl_sum(gdl_mul(outs[k], w)))) goto done;
        l = l ? gdl_add(l, t) : t;
    }
    if (!l || gdl_backward(l) < 0) goto done;
    for (k = 0; k < nout; k++) tp_compare(c, pre, out_names[k], outs[k]);
    tp_compare(c, pre, "grad.x", x->grad);
    tp_compare(c, pre, "grad.h0", h0->grad);
    if (c0) tp_compare(c, pre, "grad.c0", c0->grad);
    tp_compare_param_grads(c, pre, m);
    rc = 0;
done:
    gdl_module_free(m);
    return rc;
}

/* the gradient of sum(out * w) of the fixture's loss weight w */
static int tp_backward_weighted(tp_ctx *c, const char *pre, gdl_tensor *out) {
    gdl_tensor *w = tp_tensor(c, pre, "w", 0);
    return w && out ? gdl_backward(gdl_sum(gdl_mul(out, w))) : -1;
}

/* torch.max / torch.min with a dim; cfg: is_min, dim, keepdim */
static int tp_extreme_case(tp_ctx *c, const char *pre, const double *cfg) {
    gdl_tensor *x = tp_tensor(c, pre, "x", 1), *v = NULL, *idx = NULL;
    if (!x || (cfg[0] != 0 ? gdl_min_dim_ex : gdl_max_dim_ex)(x, (int)cfg[1], (int)cfg[2], &v, &idx) < 0 ||
        tp_backward_weighted(c, pre, v) < 0)
        return -1;
    tp_compare(c, pre, "out", v);
    tp_compare(c, pre, "idx", idx);
    tp_compare(c, pre, "grad.x", x->grad);
    return 0;
}

/* F.cross_entropy / F.nll_loss; cfg: nll, soft targets, weighted, label_smoothing, reduction */
static int tp_ce_case(tp_ctx *c, const char *pre, const double *cfg) {
    gdl_ce_opts o = gdl_ce_defaults();
    gdl_tensor *x = tp_tensor(c, pre, "x", 1), *t = tp_tensor(c, pre, "target", 0), *out;
    if (!x || !t) return -1;
    o.reduction = (gdl_reduction)(int)cfg[4];
    o.label_smoothing = cfg[3];
    if (cfg[2] != 0 && !(o.weight = tp_tensor(c, pre, "weight", 0))) return -1;
    out = cfg[0] != 0 ? gdl_nll_loss(x, t, o.reduction, -100) : gdl_cross_entropy_ex(x, t, &o);
    if (tp_backward_weighted(c, pre, out) < 0) return -1;
    tp_compare(c, pre, "out", out);
    tp_compare(c, pre, "grad.x", x->grad);
    return 0;
}

/* F.embedding; cfg: padding_idx (NaN: None), max_norm (0: None), norm_type */
static int tp_embedding_case(tp_ctx *c, const char *pre, const double *cfg) {
    gdl_embedding_opts o = gdl_embedding_defaults();
    gdl_tensor *w = tp_tensor(c, pre, "weight", 1), *idx = tp_tensor(c, pre, "idx", 0), *out;
    if (!w || !idx) return -1;
    o.padding_idx = isnan(cfg[0]) ? GDL_NO_PADDING_IDX : (int64_t)cfg[0];
    o.max_norm = cfg[1];
    o.norm_type = cfg[2];
    if (!(out = gdl_embedding_ex(idx, w, &o)) || tp_backward_weighted(c, pre, out) < 0) return -1;
    tp_compare(c, pre, "out", out);
    tp_compare(c, pre, "grad.weight", w->grad);
    tp_compare(c, pre, "weight_after", w);
    return 0;
}

/* after case pre: every gradient PyTorch has was compared (a parameter gpudl lacks fails here), and the
   case's tensors freed */
static void tp_case_done(tp_ctx *c, const char *pre) {
    size_t len = strlen(pre);
    int i, want = 0;
    for (i = 0; i < c->f->n; i++)
        if (strncmp(c->f->entries[i].name, pre, len) == 0 && strncmp(c->f->entries[i].name + len, "grad.", 5) == 0)
            want++;
    if (want != c->grads) {
        char why[96];
        snprintf(why, sizeof why, "%d gradients compared, torch has %d", c->grads, want);
        tp_fail(c, pre, "grad.*", why);
    }
    c->grads = 0;
    while (c->nowned > 0) gdl_free(c->owned[--c->nowned]);
    gdl_arena_reset();
}

/* every case (a prefix with a "cfg" entry) of the parsed fixture f of kind base ("rnn" or "seq_ops") on
   c->dev; the number of cases run (a case that could not run is counted in c->failed, printed) */
static int tp_run_parsed(tp_ctx *c, const gdl_st_file *f, const char *base) {
    int i, cases = 0;
    c->f = f;
    for (i = 0; i < f->n; i++) {
        const gdl_st_entry *e = &f->entries[i];
        size_t len = strlen(e->name);
        char pre[GDL_ST_NAME_MAX];
        double *cfg;
        int64_t n = 0;
        int rc;
        if (len < 4 || strcmp(e->name + len - 4, ".cfg") != 0) continue;
        memcpy(pre, e->name, len - 3);
        pre[len - 3] = 0;
        if (!(cfg = tp_values(c, e, &n)) || n < 3) {
            free(cfg);
            tp_fail(c, pre, "cfg", "unreadable");
            continue;
        }
        rc = strcmp(base, "rnn") == 0     ? (n == 9 ? tp_rnn_case(c, pre, cfg) : -1)
             : tp_entry(c, pre, "target") ? (n == 5 ? tp_ce_case(c, pre, cfg) : -1)
             : tp_entry(c, pre, "x")      ? tp_extreme_case(c, pre, cfg)
                                          : (n == 4 ? tp_embedding_case(c, pre, cfg) : -1);
        if (rc < 0) tp_fail(c, pre, "(the case)", gdl_last_error());
        free(cfg);
        tp_case_done(c, pre);
        cases++;
    }
    c->f = NULL;
    return cases;
}

/* ---- the Transformer cases (transformer_parity_cases.h) given the fixture's values ---- */

static gdl_tensor *tp_tf_input(tf_io *io, const char *pre, const char *name, int ndim, const int64_t *shape, int grad) {
    tp_ctx *c = (tp_ctx *)io->user;
    gdl_tensor *t = tp_tensor(c, pre, name, grad);
    int k;
    if (t && t->ndim != ndim) t = NULL;
    for (k = 0; t && k < ndim; k++)
        if (t->shape[k] != shape[k]) t = NULL;
    if (!t) tp_fail(c, pre, name, "missing or not of the case's shape in the fixture");
    return t;
}

static gdl_tensor *tp_tf_mask(tf_io *io, const char *pre, const char *name, gdl_tensor *mask) {
    tp_ctx *c = (tp_ctx *)io->user;
    (void)pre, (void)name;
    if (mask && c->nowned < (int)(sizeof c->owned / sizeof c->owned[0])) c->owned[c->nowned++] = mask;
    return mask;
}

static int tp_tf_module(tf_io *io, const char *pre, gdl_module *m) {
    tp_ctx *c = (tp_ctx *)io->user;
    return gdl_module_to(m, c->dev) < 0 || tp_load_params(c, pre, m) < 0 ? -1 : 0;
}

static int tp_tf_finish(tf_io *io, const char *pre, gdl_module *m, int nx, gdl_tensor **x, int no, gdl_tensor **out) {
    tp_ctx *c = (tp_ctx *)io->user;
    gdl_tensor *l = NULL;
    char nm[32];
    int k, rc = -1;
    for (k = 0; k < no; k++) {
        gdl_tensor *w, *t;
        snprintf(nm, sizeof nm, "w%d", k);
        if (!(w = tp_tensor(c, pre, nm, 0)) || !(t = gdl_sum(gdl_mul(out[k], w)))) goto done;
        l = l ? gdl_add(l, t) : t;
    }
    if (!l || gdl_backward(l) < 0) goto done;
    for (k = 0; k < no; k++) {
        snprintf(nm, sizeof nm, "out%d", k);
        tp_compare(c, pre, nm, out[k]);
    }
    for (k = 0; k < nx; k++) {
        snprintf(nm, sizeof nm, "grad.x%d", k);
        tp_compare(c, pre, nm, x[k]->grad);
    }
    if (m) tp_compare_param_grads(c, pre, m);
    rc = 0;
done:
    gdl_module_free(m);
    return rc;
}

/* every case of transformer_parity_cases.h with the fixture f's values on c->dev; the number run */
static int tp_run_transformer(tp_ctx *c, const gdl_st_file *f) {
    tf_io io;
    int i;
    memset(&io, 0, sizeof io);
    io.dev = c->dev;
    io.input = tp_tf_input;
    io.mask = tp_tf_mask;
    io.module = tp_tf_module;
    io.finish = tp_tf_finish;
    io.user = c;
    c->f = f;
    for (i = 0; i < TF_NCASES; i++) {
        if (tf_cases[i].run(&io) < 0) tp_fail(c, tf_cases[i].prefix, "(the case)", gdl_last_error());
        tp_case_done(c, tf_cases[i].prefix);
    }
    c->f = NULL;
    return TF_NCASES;
}

/* tests/torch_fixtures/<base>.safetensors through tp_run_parsed (tp_run_transformer for "transformer"); -1 when it cannot be read (printed) */
static int tp_run_file(tp_ctx *c, const char *base) {
    char path[256];
    gdl_st_file f;
    int cases;
    snprintf(path, sizeof path, TP_FIXTURE_DIR "%s.safetensors", base);
    if (gdl_st_read(path, &f) < 0) {
        printf("    torch parity: %s\n", gdl_last_error());
        return -1;
    }
    cases = strcmp(base, "transformer") == 0 ? tp_run_transformer(c, &f) : tp_run_parsed(c, &f, base);
    gdl_st_free(&f);
    return cases;
}

/* a TEST body: every case of fixture base on dev within tol; at least min_cases of them */
#define TP_CHECK_FILE(base, device, tolerance, min_cases)                                              \
    do {                                                                                               \
        tp_ctx c_;                                                                                     \
        int n_;                                                                                        \
        memset(&c_, 0, sizeof c_);                                                                     \
        c_.dev = (device);                                                                             \
        c_.tol = (tolerance);                                                                          \
        n_ = tp_run_file(&c_, base);                                                                   \
        printf("    %s: %d cases, %d tensors, largest |gpudl - torch| / (1 + |torch|) %.3g (%s)\n", base, n_, \
               c_.compared, c_.worst, c_.worst_at);                                                    \
        ASSERT_GE(n_, (min_cases));                                                                    \
        ASSERT_EQ(0, c_.failed);                                                                       \
    } while (0)

#endif
