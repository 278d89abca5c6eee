/* src/nn/rnn.h — the recurrent modules: nn.LSTM and nn.GRU (gdl_nn_lstm, gdl_nn_gru and their forwards).
   Per layer and direction, one GEMM projects every time step's input at once ([T*B, in] x W_ih^T, b_ih in),
   then each step runs the hidden GEMM (b_hh in) and the fused gate op (gdl_lstm_gates / gdl_gru_gates).
   Work is time-major ([T, B, *]): a step's slice of the projection is then a view, not a copy.
   gdl_quantize_dynamic's copies (DynamicQuantizedLSTM / GRU, src/quant/) run here too: flagged
   GDL__RNN_QUANT, they hold no parameters but, per layer and direction, the two projections as int8
   children (ih, hh), which take the place of the two gdl_linear calls. */

enum { GDL__RNN_IN, GDL__RNN_H, GDL__RNN_LAYERS, GDL__RNN_BIAS, GDL__RNN_BATCH_FIRST, GDL__RNN_BIDIR, GDL__RNN_G,
       GDL__RNN_QUANT };
enum { GDL__RNN_DROPOUT = 0 }; /* the one real slot (fa) */

static gdl_module *gdl__nn_rnn(const char *op, int kind, const char *kind_name, int G, int64_t input_size,
                               int64_t hidden_size, int num_layers, int bias, int batch_first, double dropout,
                               int bidirectional) {
    static const char *const names[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    gdl_module *m;
    int l, d, k, D = bidirectional ? 2 : 1;
    if (input_size < 1 || hidden_size < 1 || num_layers < 1 || hidden_size > INT64_MAX / 4 / (G > 0 ? G : 1)) {
        gdl__set_error("%s: input_size %lld, hidden_size %lld and num_layers %d must be positive", op,
                       (long long)input_size, (long long)hidden_size, num_layers);
        return NULL;
    }
    if (!(dropout >= 0 && dropout <= 1)) {
        gdl__set_error("%s: dropout %g is not in [0,1]", op, dropout);
        return NULL;
    }
    if (!(m = gdl__nn_new(op, kind, kind_name))) return NULL;
    m->ia[GDL__RNN_IN] = input_size;
    m->ia[GDL__RNN_H] = hidden_size;
    m->ia[GDL__RNN_LAYERS] = num_layers;
    m->ia[GDL__RNN_BIAS] = bias != 0;
    m->ia[GDL__RNN_BATCH_FIRST] = batch_first != 0;
    m->ia[GDL__RNN_BIDIR] = D == 2;
    m->ia[GDL__RNN_G] = G;
    m->fa[GDL__RNN_DROPOUT] = dropout;
    /* PyTorch's order (and its reset_parameters: every tensor U(±1/sqrt(H)), in that order) */
    for (l = 0; l < num_layers; l++)
        for (d = 0; d < D; d++)
            for (k = 0; k < (bias ? 4 : 2); k++) {
                char nm[48];
                int64_t shape[2];
                shape[0] = G * hidden_size;
                shape[1] = k == 0 ? (l == 0 ? input_size : D * hidden_size) : hidden_size;
                snprintf(nm, sizeof nm, "%s_l%d%s", names[k], l, d ? "_reverse" : "");
                if (gdl__nn_add_tensor(op, m, nm, gdl__nn_uniform_init(k < 2 ? 2 : 1, shape, hidden_size), 0) < 0) {
                    gdl__nn_free_tree(m);
                    return NULL;
                }
            }
    return m;
}

GPUDL_API gdl_module *gdl_nn_lstm(int64_t input_size, int64_t hidden_size, int num_layers, int bias, int batch_first,
                                  double dropout, int bidirectional) {
    return gdl__nn_rnn("gdl_nn_lstm", GDL__M_LSTM, "LSTM", 4, input_size, hidden_size, num_layers, bias, batch_first,
                       dropout, bidirectional);
}
GPUDL_API gdl_module *gdl_nn_gru(int64_t input_size, int64_t hidden_size, int num_layers, int bias, int batch_first,
                                 double dropout, int bidirectional) {
    return gdl__nn_rnn("gdl_nn_gru", GDL__M_GRU, "GRU", 3, input_size, hidden_size, num_layers, bias, batch_first,
                       dropout, bidirectional);
}

GPUDL_API gdl_rnn_opts gdl_rnn_defaults(void) {
    gdl_rnn_opts o;
    memset(&o, 0, sizeof o);
    o.num_layers = 1;
    o.bias = 1;
    return o;
}
GPUDL_API gdl_module *gdl_nn_lstm_ex(int64_t input_size, int64_t hidden_size, const gdl_rnn_opts *o) {
    gdl_rnn_opts d = o ? *o : gdl_rnn_defaults();
    return gdl__nn_rnn("gdl_nn_lstm_ex", GDL__M_LSTM, "LSTM", 4, input_size, hidden_size, d.num_layers, d.bias,
                       d.batch_first, d.dropout, d.bidirectional);
}
GPUDL_API gdl_module *gdl_nn_gru_ex(int64_t input_size, int64_t hidden_size, const gdl_rnn_opts *o) {
    gdl_rnn_opts d = o ? *o : gdl_rnn_defaults();
    return gdl__nn_rnn("gdl_nn_gru_ex", GDL__M_GRU, "GRU", 3, input_size, hidden_size, d.num_layers, d.bias,
                       d.batch_first, d.dropout, d.bidirectional);
}

/* nn.LSTM's extra_repr: "10, 20, num_layers=2, batch_first=True" (defaults left out) */
static void gdl__nn_rnn_config(const gdl_module *m, char *s, size_t n) {
    const int64_t *a = m->ia;
    int k = snprintf(s, n, "%lld, %lld", (long long)a[GDL__RNN_IN], (long long)a[GDL__RNN_H]);
    if (a[GDL__RNN_LAYERS] != 1 && k >= 0 && (size_t)k < n)
        k += snprintf(s + k, n - (size_t)k, ", num_layers=%lld", (long long)a[GDL__RNN_LAYERS]);
    if (!a[GDL__RNN_BIAS] && k >= 0 && (size_t)k < n) k += snprintf(s + k, n - (size_t)k, ", bias=False");
    if (a[GDL__RNN_BATCH_FIRST] && k >= 0 && (size_t)k < n) k += snprintf(s + k, n - (size_t)k, ", batch_first=True");
    if (m->fa[GDL__RNN_DROPOUT] != 0 && k >= 0 && (size_t)k < n)
        k += snprintf(s + k, n - (size_t)k, ", dropout=%g", m->fa[GDL__RNN_DROPOUT]);
    if (a[GDL__RNN_BIDIR] && k >= 0 && (size_t)k < n) snprintf(s + k, n - (size_t)k, ", bidirectional=True");
}

/* an initial state h0 / c0 checked against [L*D, B, H] ([L*D, H] unbatched); NULL: zeros. Returns it as
   [L*D, B, H], or NULL after the error. */
static gdl_tensor *gdl__nn_rnn_state(const char *op, gdl_module *m, const char *name, gdl_tensor *s, gdl_tensor *x,
                                     int unbatched, int64_t B) {
    int64_t shape[3];
    shape[0] = m->ia[GDL__RNN_LAYERS] * (m->ia[GDL__RNN_BIDIR] ? 2 : 1);
    shape[1] = B;
    shape[2] = m->ia[GDL__RNN_H];
    if (!s) {
        gdl_tensor *z = gdl__tmp(op, 3, shape, GDL_F32, x->device);
        return z && gdl_fill_(z, 0) == 0 ? z : NULL;
    }
    if (gdl__check_in(op, name, s, 0) < 0 || gdl__check_dev(op, x, s) < 0) return NULL;
    if (unbatched ? s->ndim != 2 || s->shape[0] != shape[0] || s->shape[1] != shape[2]
                  : s->ndim != 3 || s->shape[0] != shape[0] || s->shape[1] != B || s->shape[2] != shape[2]) {
        if (unbatched)
            gdl__set_error("%s: %s: %s must be [%lld, %lld] (num_layers*directions, hidden_size) for an unbatched "
                           "input %s, got %s", op, gdl__nn_label(m), name, (long long)shape[0], (long long)shape[2],
                           gdl_shape_str(x), gdl_shape_str(s));
        else
            gdl__set_error("%s: %s: %s must be [%lld, %lld, %lld] (num_layers*directions, batch, hidden_size) for "
                           "input %s, got %s", op, gdl__nn_label(m), name, (long long)shape[0], (long long)B,
                           (long long)shape[2], gdl_shape_str(x), gdl_shape_str(s));
        return NULL;
    }
    return unbatched ? gdl_reshape(s, 3, shape) : s;
}

/* one direction of one layer over the time-major input xs [T, B, in]: the outputs [T, B, H]; *h, *c (c for
   an LSTM) hold the initial state on entry and the final one on return */
static gdl_tensor *gdl__nn_rnn_dir(gdl_module *m, int layer, int dir, gdl_tensor *xs, gdl_tensor **h,
                                   gdl_tensor **c) {
    const int lstm = m->kind == GDL__M_LSTM, bias = (int)m->ia[GDL__RNN_BIAS];
    const int D = m->ia[GDL__RNN_BIDIR] ? 2 : 1, per = bias ? 4 : 2, base = (layer * D + dir) * per;
    const int64_t T = xs->shape[0];
    gdl_module *const *q = m->ia[GDL__RNN_QUANT] ? m->child + 2 * (layer * D + dir) : NULL; /* ih, hh */
    gdl_tensor *w_ih = gdl__nn_param(m, base), *w_hh = gdl__nn_param(m, base + 1);
    gdl_tensor *b_ih = bias ? gdl__nn_param(m, base + 2) : NULL, *b_hh = bias ? gdl__nn_param(m, base + 3) : NULL;
    gdl_tensor *gx = q ? gdl_forward(q[0], xs) : gdl_linear(xs, w_ih, b_ih), **outs;
    int64_t s;
    if (!gx) return NULL;
    if (!(outs = (gdl_tensor **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor *) * (size_t)T))) {
        gdl__set_error("gdl_forward: %s: out of host memory", gdl__nn_label(m));
        return NULL;
    }
    for (s = 0; s < T; s++) {
        int64_t t = dir ? T - 1 - s : s;
        gdl_tensor *gh = q ? gdl_forward(q[1], *h) : gdl_linear(*h, w_hh, b_hh), *gxt = gdl_select(gx, 0, t);
        if (!gh || !gxt) return NULL;
        if (lstm) {
            gdl_tensor *hc = gdl_lstm_gates(gxt, gh, *c);
            if (!hc || !(*h = gdl_select(hc, 0, 0)) || !(*c = gdl_select(hc, 0, 1))) return NULL;
        } else if (!(*h = gdl_gru_gates(gxt, gh, *h))) {
            return NULL;
        }
        outs[t] = *h;
    }
    return gdl_stack((int)T, outs, 0);
}

/* the layers over x (checked): out, h_n, c_n as gdl_nn_lstm_forward returns them */
static int gdl__nn_rnn_layers(gdl_module *m, gdl_tensor *x, gdl_tensor *h0, gdl_tensor *c0, int unbatched,
                              gdl_tensor **out, gdl_tensor **hn, gdl_tensor **cn) {
    const int lstm = m->kind == GDL__M_LSTM, D = m->ia[GDL__RNN_BIDIR] ? 2 : 1, L = (int)m->ia[GDL__RNN_LAYERS];
    const int bf = !unbatched && m->ia[GDL__RNN_BATCH_FIRST];
    gdl_tensor *xs = bf ? gdl_transpose(x, 0, 1) : x, **hs, **cs;
    int l, d;
    if (!xs) return -1;
    if (!(hs = (gdl_tensor **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor *) * (size_t)(2 * L * D)))) {
        gdl__set_error("gdl_forward: %s: out of host memory", gdl__nn_label(m));
        return -1;
    }
    cs = hs + L * D;
    for (l = 0; l < L; l++) {
        gdl_tensor *dirs[2];
        if (l > 0 && m->fa[GDL__RNN_DROPOUT] > 0 && m->training &&
            !(xs = gdl_dropout(xs, m->fa[GDL__RNN_DROPOUT], 1)))
            return -1;
        for (d = 0; d < D; d++) {
            int k = l * D + d;
            if (!(hs[k] = gdl_select(h0, 0, k)) || (lstm && !(cs[k] = gdl_select(c0, 0, k))) ||
                !(dirs[d] = gdl__nn_rnn_dir(m, l, d, xs, &hs[k], lstm ? &cs[k] : NULL)))
                return -1;
        }
        if (!(xs = D == 2 ? gdl_concat(2, dirs, 2) : dirs[0])) return -1;
    }
    if (out || gdl__nn_nrows) { /* the output's layout; a summary records its shape even when it is not wanted */
        if (bf) xs = gdl_transpose(xs, 0, 1);
        else if (unbatched) xs = gdl_select(xs, 1, 0);
        if (!xs) return -1;
        gdl__nn_record(m, xs);
        if (out) *out = xs;
    }
    if (hn && !(*hn = gdl_stack(L * D, hs, 0))) return -1;
    if (lstm && cn && !(*cn = gdl_stack(L * D, cs, 0))) return -1;
    if (unbatched && hn && !(*hn = gdl_select(*hn, 1, 0))) return -1;
    if (unbatched && lstm && cn && !(*cn = gdl_select(*cn, 1, 0))) return -1;
    return 0;
}

/* checks the input and the states, then runs the layers; every result NULL on failure */
static int gdl__nn_rnn_forward(const char *op, gdl_module *m, int kind, gdl_tensor *x, gdl_tensor *h0, gdl_tensor *c0,
                               gdl_tensor **out, gdl_tensor **hn, gdl_tensor **cn) {
    int unbatched, rc;
    int64_t B, shape[3];
    gdl_device dev;
    if (out) *out = NULL;
    if (hn) *hn = NULL;
    if (cn) *cn = NULL;
    if (!m || !x) {
        gdl__null_arg(op, !m ? "module" : "input");
        return -1;
    }
    if (m->kind != kind) {
        gdl__set_error("%s: %s is not an %s", op, gdl__nn_label(m), kind == GDL__M_LSTM ? "LSTM" : "GRU");
        return -1;
    }
    if (gdl__check_in(op, "input", x, 0) < 0) return -1;
    dev = gdl_module_device(m);
    if ((x->ndim != 2 && x->ndim != 3) || x->shape[x->ndim - 1] != m->ia[GDL__RNN_IN] || x->shape[0] == 0 ||
        (x->ndim == 3 && x->shape[1] == 0)) {
        char cfg[200];
        gdl__nn_config(m, cfg, sizeof cfg);
        gdl__set_error("%s: %s (%s): expected input %s or unbatched [T, %lld] (T and B >= 1), got %s", op,
                       gdl__nn_label(m), cfg, m->ia[GDL__RNN_BATCH_FIRST] ? "[B, T, input_size]" : "[T, B, input_size]",
                       (long long)m->ia[GDL__RNN_IN], gdl_shape_str(x));
        return -1;
    }
    if (!gdl_device_equal(x->device, dev)) {
        gdl__set_error("%s: %s: input %s is on %s but the parameters are on %s (gdl_module_to)", op, gdl__nn_label(m),
                       gdl_shape_str(x), gdl_device_str(x->device), gdl_device_str(dev));
        return -1;
    }
    if (m->ia[GDL__RNN_QUANT] && x->dtype != GDL_F32) {
        gdl__set_error("%s: %s (dtype=qint8): expected an f32 input, got %s %s", op, gdl__nn_label(m),
                       gdl_dtype_name(x->dtype), gdl_shape_str(x));
        return -1;
    }
    unbatched = x->ndim == 2;
    B = unbatched ? 1 : x->shape[m->ia[GDL__RNN_BATCH_FIRST] ? 0 : 1];
    if (unbatched) { /* as [T, 1, in] */
        shape[0] = x->shape[0];
        shape[1] = 1;
        shape[2] = x->shape[1];
        if (!(x = gdl_reshape(x, 3, shape))) return -1;
    }
    if (!(h0 = gdl__nn_rnn_state(op, m, "h0", h0, x, unbatched, B)) ||
        (kind == GDL__M_LSTM && !(c0 = gdl__nn_rnn_state(op, m, "c0", c0, x, unbatched, B))))
        return -1;
    rc = gdl__nn_rnn_layers(m, x, h0, c0, unbatched, out, hn, cn);
    if (rc < 0) {
        char prev[sizeof gdl__err];
        memcpy(prev, gdl__err, sizeof prev);
        gdl__set_error("%s: %s: %s", op, gdl__nn_label(m), prev); /* an op inside failed: say where */
        if (out) *out = NULL;
        if (hn) *hn = NULL;
        if (cn) *cn = NULL;
    }
    return rc;
}

GPUDL_API int gdl_nn_lstm_forward(gdl_module *m, gdl_tensor *x, gdl_tensor *h0, gdl_tensor *c0, gdl_tensor **out,
                                  gdl_tensor **h_n, gdl_tensor **c_n) {
    return gdl__nn_rnn_forward("gdl_nn_lstm_forward", m, GDL__M_LSTM, x, h0, c0, out, h_n, c_n);
}
GPUDL_API int gdl_nn_gru_forward(gdl_module *m, gdl_tensor *x, gdl_tensor *h0, gdl_tensor **out, gdl_tensor **h_n) {
    return gdl__nn_rnn_forward("gdl_nn_gru_forward", m, GDL__M_GRU, x, h0, NULL, out, h_n, NULL);
}
