/* src/nn/rnn.h — the recurrent modules: nn.LSTM (with proj_size), nn.GRU and nn.RNN, their forwards over
   padded batches of sequences of different lengths, and gdl_forward_ex (any module's outputs, PyTorch's tuple).
   Per layer and direction, one GEMM projects every time step's input at once ([T*B, in] x W_ih^T, b_ih in,
   and an LSTM's or RNN's b_hh), then each step runs the hidden GEMM (a GRU's b_hh in) and the fused gate op (gdl_lstm_gates / gdl_gru_gates; an
   RNN's tanh or relu of the sum; an LSTM with proj_size then projects h by weight_hr). Lengths are masks:
   past a sequence's end its state is kept (gdl_where) and its output zeroed (gdl_masked_fill), only at
   the steps past the shortest sequence, so the ops' own backwards give PyTorch's gradients.
   Work is time-major ([T, B, *]): a step's slice of the projection is then a view, not a copy. A batch_first
   input is made time-major by one concat of its samples and the last layer's steps are put side by side
   along dim 1: row copies, where permutes would move element by element.
   gdl_quantize_dynamic's copies (DynamicQuantizedLSTM / GRU, src/quant/) run here too: flagged
   GDL__RNN_QUANT, they hold no parameters but, per layer and direction, the two projections as int8
   children (ih, hh), which take the place of the two gdl_linear calls. */

enum { GDL__RNN_IN, GDL__RNN_H, GDL__RNN_LAYERS, GDL__RNN_BIAS, GDL__RNN_BATCH_FIRST, GDL__RNN_BIDIR, GDL__RNN_G,
       GDL__RNN_QUANT, GDL__RNN_PROJ, GDL__RNN_RELU };
enum { GDL__RNN_DROPOUT = 0 }; /* the one real slot (fa) */

/* the features of h (proj_size when the LSTM projects, else hidden_size) */
static int64_t gdl__nn_rnn_hout(const gdl_module *m) {
    return m->ia[GDL__RNN_PROJ] ? m->ia[GDL__RNN_PROJ] : m->ia[GDL__RNN_H];
}
/* the tensors of one layer and direction: weight_ih, weight_hh, bias_ih, bias_hh, weight_hr (those there) */
static int gdl__nn_rnn_per(const gdl_module *m) { return (m->ia[GDL__RNN_BIAS] ? 4 : 2) + (m->ia[GDL__RNN_PROJ] > 0); }

static gdl_module *gdl__nn_rnn(const char *op, int kind, const char *kind_name, int G, int64_t input_size,
                               int64_t hidden_size, const gdl_rnn_opts *o) {
    static const char *const names[5] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"};
    gdl_module *m;
    const int num_layers = o->num_layers, bias = o->bias != 0, D = o->bidirectional ? 2 : 1;
    const int64_t P = o->proj_size, Hout = P ? P : hidden_size;
    int l, d, k, relu = 0;
    if (input_size < 1 || hidden_size < 1 || num_layers < 1 || hidden_size > INT64_MAX / 4 / (G > 0 ? G : 1)) {
        gdl__set_error("%s: input_size %lld, hidden_size %lld and num_layers %d must be positive", op,
                       (long long)input_size, (long long)hidden_size, num_layers);
        return NULL;
    }
    if (!(o->dropout >= 0 && o->dropout <= 1)) {
        gdl__set_error("%s: dropout %g is not in [0,1]", op, o->dropout);
        return NULL;
    }
    if (P < 0 || P >= hidden_size || (P && kind != GDL__M_LSTM)) {
        gdl__set_error("%s: proj_size %lld: %s", op, (long long)P,
                       kind != GDL__M_LSTM ? "only an LSTM projects its hidden state (proj_size 0)"
                                           : "must be >= 0 and smaller than hidden_size");
        return NULL;
    }
    if (o->nonlinearity && kind != GDL__M_RNN) {
        gdl__set_error("%s: nonlinearity \"%s\" is an RNN's option (leave it NULL)", op, o->nonlinearity);
        return NULL;
    }
    if (o->nonlinearity && strcmp(o->nonlinearity, "tanh") != 0) {
        if (strcmp(o->nonlinearity, "relu") != 0) {
            gdl__set_error("%s: unknown nonlinearity \"%s\" (\"tanh\" or \"relu\")", op, o->nonlinearity);
            return NULL;
        }
        relu = 1;
    }
    if (!(m = gdl__nn_new(op, kind, kind_name))) return NULL;
    m->ia[GDL__RNN_IN] = input_size;
    m->ia[GDL__RNN_H] = hidden_size;
    m->ia[GDL__RNN_LAYERS] = num_layers;
    m->ia[GDL__RNN_BIAS] = bias;
    m->ia[GDL__RNN_BATCH_FIRST] = o->batch_first != 0;
    m->ia[GDL__RNN_BIDIR] = D == 2;
    m->ia[GDL__RNN_G] = G;
    m->ia[GDL__RNN_PROJ] = P;
    m->ia[GDL__RNN_RELU] = relu;
    m->fa[GDL__RNN_DROPOUT] = o->dropout;
    /* PyTorch's order (and its reset_parameters: every tensor U(±1/sqrt(H)), in that order) */
    for (l = 0; l < num_layers; l++)
        for (d = 0; d < D; d++)
            for (k = 0; k < 5; k++) {
                char nm[48];
                int64_t shape[2];
                if ((k == 2 || k == 3) && !bias) continue;
                if (k == 4 && !P) continue;
                shape[0] = k == 4 ? P : G * hidden_size;
                shape[1] = k == 0 ? (l == 0 ? input_size : D * Hout) : k == 1 ? Hout : hidden_size;
                snprintf(nm, sizeof nm, "%s_l%d%s", names[k], l, d ? "_reverse" : "");
                if (gdl__nn_add_tensor(op, m, nm, gdl__nn_uniform_init(k == 2 || k == 3 ? 1 : 2, shape, hidden_size),
                                       0) < 0) {
                    gdl__nn_free_tree(m);
                    return NULL;
                }
            }
    return m;
}

/* the options of the positional constructors (PyTorch's arguments, in their order) */
static gdl_rnn_opts gdl__rnn_positional(int num_layers, int bias, int batch_first, double dropout, int bidirectional,
                                        const char *nonlinearity) {
    gdl_rnn_opts o = gdl_rnn_defaults();
    o.num_layers = num_layers, o.bias = bias, o.batch_first = batch_first, o.dropout = dropout;
    o.bidirectional = bidirectional, o.nonlinearity = nonlinearity;
    return o;
}
GPUDL_API gdl_module *gdl_nn_lstm(int64_t input_size, int64_t hidden_size, int num_layers, int bias, int batch_first,
                                  double dropout, int bidirectional) {
    gdl_rnn_opts o = gdl__rnn_positional(num_layers, bias, batch_first, dropout, bidirectional, NULL);
    return gdl__nn_rnn("gdl_nn_lstm", GDL__M_LSTM, "LSTM", 4, input_size, hidden_size, &o);
}
GPUDL_API gdl_module *gdl_nn_gru(int64_t input_size, int64_t hidden_size, int num_layers, int bias, int batch_first,
                                 double dropout, int bidirectional) {
    gdl_rnn_opts o = gdl__rnn_positional(num_layers, bias, batch_first, dropout, bidirectional, NULL);
    return gdl__nn_rnn("gdl_nn_gru", GDL__M_GRU, "GRU", 3, input_size, hidden_size, &o);
}
GPUDL_API gdl_module *gdl_nn_rnn(int64_t input_size, int64_t hidden_size, int num_layers, const char *nonlinearity,
                                 int bias, int batch_first, double dropout, int bidirectional) {
    gdl_rnn_opts o = gdl__rnn_positional(num_layers, bias, batch_first, dropout, bidirectional, nonlinearity);
    return gdl__nn_rnn("gdl_nn_rnn", GDL__M_RNN, "RNN", 1, input_size, hidden_size, &o);
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
    return gdl__nn_rnn("gdl_nn_lstm_ex", GDL__M_LSTM, "LSTM", 4, input_size, hidden_size, &d);
}
GPUDL_API gdl_module *gdl_nn_gru_ex(int64_t input_size, int64_t hidden_size, const gdl_rnn_opts *o) {
    gdl_rnn_opts d = o ? *o : gdl_rnn_defaults();
    return gdl__nn_rnn("gdl_nn_gru_ex", GDL__M_GRU, "GRU", 3, input_size, hidden_size, &d);
}
GPUDL_API gdl_module *gdl_nn_rnn_ex(int64_t input_size, int64_t hidden_size, const gdl_rnn_opts *o) {
    gdl_rnn_opts d = o ? *o : gdl_rnn_defaults();
    return gdl__nn_rnn("gdl_nn_rnn_ex", GDL__M_RNN, "RNN", 1, input_size, hidden_size, &d);
}

/* nn.LSTM's extra_repr: "10, 20, num_layers=2, batch_first=True" (defaults left out) */
static void gdl__nn_rnn_config(const gdl_module *m, char *s, size_t n) {
    const int64_t *a = m->ia;
    int k = snprintf(s, n, "%lld, %lld", (long long)a[GDL__RNN_IN], (long long)a[GDL__RNN_H]);
    if (a[GDL__RNN_LAYERS] != 1 && k >= 0 && (size_t)k < n)
        k += snprintf(s + k, n - (size_t)k, ", num_layers=%lld", (long long)a[GDL__RNN_LAYERS]);
    if (a[GDL__RNN_RELU] && k >= 0 && (size_t)k < n) k += snprintf(s + k, n - (size_t)k, ", nonlinearity=relu");
    if (!a[GDL__RNN_BIAS] && k >= 0 && (size_t)k < n) k += snprintf(s + k, n - (size_t)k, ", bias=False");
    if (a[GDL__RNN_BATCH_FIRST] && k >= 0 && (size_t)k < n) k += snprintf(s + k, n - (size_t)k, ", batch_first=True");
    if (m->fa[GDL__RNN_DROPOUT] != 0 && k >= 0 && (size_t)k < n)
        k += snprintf(s + k, n - (size_t)k, ", dropout=%g", m->fa[GDL__RNN_DROPOUT]);
    if (a[GDL__RNN_BIDIR] && k >= 0 && (size_t)k < n) k += snprintf(s + k, n - (size_t)k, ", bidirectional=True");
    if (a[GDL__RNN_PROJ] && k >= 0 && (size_t)k < n)
        snprintf(s + k, n - (size_t)k, ", proj_size=%lld", (long long)a[GDL__RNN_PROJ]);
}

/* an initial state h0 / c0 checked against [L*D, B, F] ([L*D, F] unbatched; F: h's features for h0,
   hidden_size for c0); NULL: zeros. Returns it as [L*D, B, F], or NULL after the error. */
static gdl_tensor *gdl__nn_rnn_state(const char *op, gdl_module *m, const char *name, gdl_tensor *s, gdl_tensor *x,
                                     int unbatched, int64_t B) {
    int64_t shape[3];
    shape[0] = m->ia[GDL__RNN_LAYERS] * (m->ia[GDL__RNN_BIDIR] ? 2 : 1);
    shape[1] = B;
    shape[2] = name[0] == 'c' ? m->ia[GDL__RNN_H] : gdl__nn_rnn_hout(m);
    if (!s) {
        gdl_tensor *z = gdl__tmp(op, 3, shape, GDL_F32, x->device);
        return z && gdl_fill_(z, 0) == 0 ? z : NULL;
    }
    if (gdl__check_in(op, name, s, 0) < 0 || gdl__check_dev(op, x, s) < 0) return NULL;
    if (unbatched ? s->ndim != 2 || s->shape[0] != shape[0] || s->shape[1] != shape[2]
                  : s->ndim != 3 || s->shape[0] != shape[0] || s->shape[1] != B || s->shape[2] != shape[2]) {
        const char *feat = m->ia[GDL__RNN_PROJ] && name[0] == 'h' ? "proj_size" : "hidden_size";
        if (unbatched)
            gdl__set_error("%s: %s: %s must be [%lld, %lld] (num_layers*directions, %s) for an unbatched "
                           "input %s, got %s", op, gdl__nn_label(m), name, (long long)shape[0], (long long)shape[2],
                           feat, gdl_shape_str(x), gdl_shape_str(s));
        else
            gdl__set_error("%s: %s: %s must be [%lld, %lld, %lld] (num_layers*directions, batch, %s) for "
                           "input %s, got %s", op, gdl__nn_label(m), name, (long long)shape[0], (long long)B,
                           (long long)shape[2], feat, gdl_shape_str(x), gdl_shape_str(s));
        return NULL;
    }
    return unbatched ? gdl_reshape(s, 3, shape) : s;
}

/* the sequences' lengths, for the masks of the steps some sequences have passed: len [B, 1] on the
   input's device, the host copy lens, and the shortest length (steps before it need no mask) */
typedef struct {
    const int64_t *lens; /* NULL: every sequence has all T steps */
    gdl_tensor *len;     /* [B, 1], f32 */
    int64_t shortest;
} gdl__rnn_lengths;

/* where[b] = step t still inside sequence b: the new state; past it the old one (which then passes
   through unchanged, so h_n is the state at the sequence's last step, and a reverse direction starts at
   the sequence's own end) */
static gdl_tensor *gdl__nn_rnn_keep(const gdl__rnn_lengths *L, int64_t t, gdl_tensor *next, gdl_tensor *prev) {
    gdl_tensor *inside;
    if (!L->lens || t < L->shortest) return next;
    inside = gdl_compare_scalar(L->len, GDL_CMP_GT, (double)t);
    return inside ? gdl_where(inside, next, prev) : NULL;
}
/* a step's output: zeros (and no gradient) where t is past the sequence's end */
static gdl_tensor *gdl__nn_rnn_pad(const gdl__rnn_lengths *L, int64_t t, gdl_tensor *h) {
    gdl_tensor *past;
    if (!L->lens || t < L->shortest) return h;
    past = gdl_compare_scalar(L->len, GDL_CMP_LE, (double)t);
    return past ? gdl_masked_fill(h, past, 0) : NULL;
}

/* whether b_hh goes into each step's hidden GEMM: a GRU's (r multiplies the hidden side of n, its bias
   included). An LSTM's and an RNN's only ever add to gx, so gdl__nn_rnn_dir adds both biases once, to the
   input projection: one bias gradient over all T·B rows instead of a reduction over B at every step.
   Traced for gdl_export_onnx (gdl__tracing), a layer keeps the plain form throughout (b_hh in the hidden
   GEMM, a batch_first input permuted, the steps stacked): the exporter recognises a layer by that tape,
   and a concat of the batch's samples would fix the batch size in the graph. */
static int gdl__nn_rnn_hh_bias(const gdl_module *m) { return m->kind == GDL__M_GRU || gdl__tracing; }

/* one time step of layer / direction k's cell: gx the step's input projection, *h and *c (an LSTM's) the
   state, replaced by the new one */
static int gdl__nn_rnn_cell(gdl_module *m, int k, gdl_tensor *gx, const gdl__rnn_lengths *L, int64_t t,
                            gdl_tensor **h, gdl_tensor **c, gdl_tensor **out) {
    const int base = k * gdl__nn_rnn_per(m);
    gdl_module *const *q = m->ia[GDL__RNN_QUANT] ? m->child + 2 * k : NULL; /* ih, hh */
    gdl_tensor *w_hh = gdl__nn_param(m, base + 1);
    /* an LSTM's or RNN's b_hh is in gx already (gdl__nn_rnn_dir); a quantized copy's hh child adds its own */
    gdl_tensor *b_hh = m->ia[GDL__RNN_BIAS] && gdl__nn_rnn_hh_bias(m) ? gdl__nn_param(m, base + 3) : NULL;
    gdl_tensor *gh = q ? gdl_forward(q[1], *h) : gdl_linear(*h, w_hh, b_hh), *hn, *cn = NULL;
    if (!gh) return -1;
    if (m->kind == GDL__M_LSTM) {
        gdl_tensor *hc = gdl_lstm_gates(gx, gh, *c);
        if (!hc || !(hn = gdl_select(hc, 0, 0)) || !(cn = gdl_select(hc, 0, 1))) return -1;
        if (m->ia[GDL__RNN_PROJ] &&
            !(hn = gdl_linear(hn, gdl__nn_param(m, base + (m->ia[GDL__RNN_BIAS] ? 4 : 2)), NULL)))
            return -1;
        if (!(*c = gdl__nn_rnn_keep(L, t, cn, *c))) return -1;
    } else if (m->kind == GDL__M_GRU) {
        if (!(hn = gdl_gru_gates(gx, gh, *h))) return -1;
    } else {
        gdl_tensor *v = gdl_add(gx, gh);
        if (!v || !(hn = m->ia[GDL__RNN_RELU] ? gdl_relu(v) : gdl_tanh(v))) return -1;
    }
    if (!(*out = gdl__nn_rnn_pad(L, t, hn)) || !(*h = gdl__nn_rnn_keep(L, t, hn, *h))) return -1;
    return 0;
}

/* one direction of one layer over the time-major input xs [T, B, in]: the outputs [T, B, F], or [B, T, F]
   when batch_first (the steps side by side along dim 1: one copy, not a stack and a permute); *h, *c (c for an
   LSTM) hold the initial state on entry and the final one on return */
static gdl_tensor *gdl__nn_rnn_dir(gdl_module *m, int layer, int dir, gdl_tensor *xs, const gdl__rnn_lengths *L,
                                   int batch_first, gdl_tensor **h, gdl_tensor **c) {
    const int bias = (int)m->ia[GDL__RNN_BIAS], D = m->ia[GDL__RNN_BIDIR] ? 2 : 1, k = layer * D + dir;
    const int base = k * gdl__nn_rnn_per(m);
    const int64_t T = xs->shape[0];
    gdl_module *const *q = m->ia[GDL__RNN_QUANT] ? m->child + 2 * k : NULL; /* ih, hh */
    gdl_tensor *w_ih = gdl__nn_param(m, base), *b_ih = bias ? gdl__nn_param(m, base + 2) : NULL, *gx, **outs, *all;
    int64_t s, shape[3];
    if (bias && !q && !gdl__nn_rnn_hh_bias(m) && !(b_ih = gdl_add(b_ih, gdl__nn_param(m, base + 3)))) return NULL;
    if (!(gx = q ? gdl_forward(q[0], xs) : gdl_linear(xs, w_ih, b_ih))) return NULL;
    if (!(outs = (gdl_tensor **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor *) * (size_t)T))) {
        gdl__set_error("gdl_forward: %s: out of host memory", gdl__nn_label(m));
        return NULL;
    }
    for (s = 0; s < T; s++) {
        int64_t t = dir ? T - 1 - s : s;
        gdl_tensor *gxt = gdl_select(gx, 0, t);
        if (!gxt || gdl__nn_rnn_cell(m, k, gxt, L, t, h, c, &outs[t]) < 0) return NULL;
    }
    if (gdl__tracing) return gdl_stack((int)T, outs, 0); /* the exporter's form (gdl__nn_rnn_hh_bias) */
    /* the [B, F] steps side by side: [T·B, F] is [T, B, F], [B, T·F] is [B, T, F] (one copy; a stack would add
       a reshape node, a zeroed gradient and a copy per step) */
    shape[0] = batch_first ? outs[0]->shape[0] : T;
    shape[1] = batch_first ? T : outs[0]->shape[0];
    shape[2] = outs[0]->shape[1];
    return (all = gdl_concat((int)T, outs, batch_first)) ? gdl_reshape(all, 3, shape) : NULL;
}

/* a batch_first input x [B, T, in] as time-major [T, B, in]: the B samples, each one block [T, in], side by
   side as [T, B·in] (gdl_concat: a row copy per sample, where a permute moves element by element) */
static gdl_tensor *gdl__nn_rnn_time_major(gdl_module *m, gdl_tensor *x) {
    const int64_t B = x->shape[0], shape[3] = {x->shape[1], x->shape[0], x->shape[2]};
    gdl_tensor *all;
    gdl_tensor **v = (gdl_tensor **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor *) * (size_t)B);
    int64_t b;
    if (B > INT_MAX) return gdl_transpose(x, 0, 1);
    if (!v) {
        gdl__set_error("gdl_forward: %s: out of host memory", gdl__nn_label(m));
        return NULL;
    }
    for (b = 0; b < B; b++)
        if (!(v[b] = gdl_select(x, 0, b))) return NULL;
    all = gdl_concat((int)B, v, 1);
    return all ? gdl_reshape(all, 3, shape) : NULL;
}

/* the layers over x (checked): out, h_n, c_n as gdl_nn_rnn_forward returns them */
static int gdl__nn_rnn_layers(gdl_module *m, gdl_tensor *x, gdl_tensor *h0, gdl_tensor *c0, int unbatched,
                              const gdl__rnn_lengths *L, gdl_tensor **out, gdl_tensor **hn, gdl_tensor **cn) {
    const int lstm = m->kind == GDL__M_LSTM, D = m->ia[GDL__RNN_BIDIR] ? 2 : 1, L_ = (int)m->ia[GDL__RNN_LAYERS];
    const int bf = !unbatched && m->ia[GDL__RNN_BATCH_FIRST];
    gdl_tensor *xs = !bf ? x : gdl__tracing ? gdl_transpose(x, 0, 1) : gdl__nn_rnn_time_major(m, x), **hs, **cs;
    int l, d;
    if (!xs) return -1;
    if (!(hs = (gdl_tensor **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor *) * (size_t)(2 * L_ * D)))) {
        gdl__set_error("gdl_forward: %s: out of host memory", gdl__nn_label(m));
        return -1;
    }
    cs = hs + L_ * D;
    for (l = 0; l < L_; l++) {
        gdl_tensor *dirs[2];
        if (l > 0 && m->fa[GDL__RNN_DROPOUT] > 0 && m->training &&
            !(xs = gdl_dropout(xs, m->fa[GDL__RNN_DROPOUT], 1)))
            return -1;
        for (d = 0; d < D; d++) {
            int k = l * D + d;
            if (!(hs[k] = gdl_select(h0, 0, k)) || (lstm && !(cs[k] = gdl_select(c0, 0, k))) ||
                !(dirs[d] = gdl__nn_rnn_dir(m, l, d, xs, L, bf && l == L_ - 1 && !gdl__tracing, &hs[k],
                                            lstm ? &cs[k] : NULL)))
                return -1;
        }
        if (!(xs = D == 2 ? gdl_concat(2, dirs, 2) : dirs[0])) return -1;
    }
    if (out || gdl__nn_nrows) { /* the output's layout; a summary records its shape even when it is not wanted */
        if (bf && gdl__tracing) xs = gdl_transpose(xs, 0, 1);
        else if (unbatched) /* (a batch_first output is [B, T, F] already) */ xs = gdl_select(xs, 1, 0);
        if (!xs) return -1;
        gdl__nn_record(m, xs);
        if (out) *out = xs;
    }
    if (hn && !(*hn = gdl_stack(L_ * D, hs, 0))) return -1;
    if (lstm && cn && !(*cn = gdl_stack(L_ * D, cs, 0))) return -1;
    if (unbatched && hn && !(*hn = gdl_select(*hn, 1, 0))) return -1;
    if (unbatched && lstm && cn && !(*cn = gdl_select(*cn, 1, 0))) return -1;
    return 0;
}

static const char *gdl__nn_rnn_kind_name(int kind) {
    return kind == GDL__M_LSTM ? "LSTM" : kind == GDL__M_GRU ? "GRU" : "RNN";
}

/* the lengths checked against the batch (B of them, each in [1, T]); *L filled, its device tensor made
   when some sequence is shorter than T, and the input narrowed to the longest (PyTorch's
   pad_packed_sequence gives max(lengths) steps) */
static int gdl__nn_rnn_lengths(const char *op, gdl_module *m, const int64_t *lens, int64_t nlens, gdl_tensor **x,
                               int unbatched, int64_t B, gdl__rnn_lengths *L) {
    const int bf = (int)m->ia[GDL__RNN_BATCH_FIRST];
    const int64_t T = (*x)->shape[bf ? 1 : 0];
    int64_t b, longest = 0, shape[2];
    gdl_real *v;
    memset(L, 0, sizeof *L);
    if (!lens) return 0;
    if (unbatched || nlens != B) {
        gdl__set_error("%s: %s: %lld lengths for input %s: one per sequence of the batch (%lld%s)", op,
                       gdl__nn_label(m), (long long)nlens, gdl_shape_str(*x), (long long)B,
                       unbatched ? "; an unbatched input takes no lengths" : "");
        return -1;
    }
    L->shortest = T;
    for (b = 0; b < B; b++) {
        if (lens[b] < 1 || lens[b] > T) {
            gdl__set_error("%s: %s: lengths[%lld] = %lld is not in [1, %lld] (the steps of input %s)", op,
                           gdl__nn_label(m), (long long)b, (long long)lens[b], (long long)T, gdl_shape_str(*x));
            return -1;
        }
        if (lens[b] < L->shortest) L->shortest = lens[b];
        if (lens[b] > longest) longest = lens[b];
    }
    if (longest < T && !(*x = gdl_narrow(*x, bf ? 1 : 0, 0, longest))) return -1;
    if (L->shortest == longest) return 0; /* one length: the narrowed input alone */
    shape[0] = B;
    shape[1] = 1;
    if (!(v = (gdl_real *)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_real) * (size_t)B)) ||
        !(L->len = gdl__tmp(op, 2, shape, GDL_F32, (*x)->device))) {
        if (!v) gdl__set_error("%s: out of host memory", op);
        return -1;
    }
    for (b = 0; b < B; b++) v[b] = (gdl_real)lens[b];
    if (gdl__be(op, (*x)->device)->rt.copy(L->len->data, v, sizeof(gdl_real) * (size_t)B, 0) < 0) return -1;
    L->lens = lens;
    return 0;
}

/* checks the input and the states, then runs the layers; every result NULL on failure */
static int gdl__nn_rnn_forward(const char *op, gdl_module *m, int kind, gdl_tensor *x, gdl_tensor *h0, gdl_tensor *c0,
                               const int64_t *lens, int64_t nlens, gdl_tensor **out, gdl_tensor **hn,
                               gdl_tensor **cn) {
    int unbatched, rc;
    int64_t B, shape[3];
    gdl_device dev;
    gdl__rnn_lengths L;
    if (out) *out = NULL;
    if (hn) *hn = NULL;
    if (cn) *cn = NULL;
    if (!m || !x) {
        gdl__null_arg(op, !m ? "module" : "input");
        return -1;
    }
    if (kind >= 0 ? m->kind != kind : m->kind != GDL__M_LSTM && m->kind != GDL__M_GRU && m->kind != GDL__M_RNN) {
        gdl__set_error("%s: %s is not an %s", op, gdl__nn_label(m), kind >= 0 ? gdl__nn_rnn_kind_name(kind)
                                                                              : "LSTM, a GRU or an RNN");
        return -1;
    }
    if (c0 && m->kind != GDL__M_LSTM) {
        gdl__set_error("%s: %s takes no c0 (an LSTM's cell state)", op, gdl__nn_label(m));
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
    if (gdl__nn_rnn_lengths(op, m, lens, nlens, &x, unbatched, B, &L) < 0) return -1;
    if (unbatched) { /* as [T, 1, in] */
        shape[0] = x->shape[0];
        shape[1] = 1;
        shape[2] = x->shape[1];
        if (!(x = gdl_reshape(x, 3, shape))) return -1;
    }
    if (!(h0 = gdl__nn_rnn_state(op, m, "h0", h0, x, unbatched, B)) ||
        (m->kind == GDL__M_LSTM && !(c0 = gdl__nn_rnn_state(op, m, "c0", c0, x, unbatched, B))))
        return -1;
    rc = gdl__nn_rnn_layers(m, x, h0, c0, unbatched, &L, out, hn, cn);
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
    return gdl__nn_rnn_forward("gdl_nn_lstm_forward", m, GDL__M_LSTM, x, h0, c0, NULL, 0, out, h_n, c_n);
}
GPUDL_API int gdl_nn_gru_forward(gdl_module *m, gdl_tensor *x, gdl_tensor *h0, gdl_tensor **out, gdl_tensor **h_n) {
    return gdl__nn_rnn_forward("gdl_nn_gru_forward", m, GDL__M_GRU, x, h0, NULL, NULL, 0, out, h_n, NULL);
}
GPUDL_API int gdl_nn_rnn_forward(gdl_module *m, gdl_tensor *x, gdl_tensor *h0, gdl_tensor *c0, const int64_t *lengths,
                                 int64_t nlengths, gdl_tensor **out, gdl_tensor **h_n, gdl_tensor **c_n) {
    if (c_n && m && m->kind != GDL__M_LSTM) *c_n = NULL;
    return gdl__nn_rnn_forward("gdl_nn_rnn_forward", m, -1, x, h0, c0, lengths, nlengths, out, h_n,
                               m && m->kind == GDL__M_LSTM ? c_n : NULL);
}

/* ---- the forward with every output: PyTorch's tuple, flattened ---- */

GPUDL_API gdl_forward_opts gdl_forward_defaults(void) {
    gdl_forward_opts o;
    memset(&o, 0, sizeof o);
    return o;
}

GPUDL_API int gdl_module_num_outputs(const gdl_module *m) {
    if (!m) return 0;
    return m->kind == GDL__M_LSTM ? 3 : m->kind == GDL__M_GRU || m->kind == GDL__M_RNN ? 2 : 1;
}

/* the lengths tensor's values on the host: i32 [B], any device */
static const int64_t *gdl__nn_lengths_host(const char *op, const gdl_tensor *t, int64_t *n) {
    int32_t *v;
    int64_t *w, i;
    if (gdl__check_in(op, "lengths_tensor", t, 0) < 0) return NULL;
    if (t->dtype != GDL_I32 || t->ndim != 1) {
        gdl__set_error("%s: lengths_tensor must be i32 [B] (one length per sequence), got %s %s", op,
                       gdl_dtype_name(t->dtype), gdl_shape_str(t));
        return NULL;
    }
    v = (int32_t *)gdl__arena_alloc(&gdl__host_arena, sizeof(int32_t) * (size_t)(t->numel + 1));
    w = (int64_t *)gdl__arena_alloc(&gdl__host_arena, sizeof(int64_t) * (size_t)(t->numel + 1));
    if (!v || !w) {
        gdl__set_error("%s: out of host memory", op);
        return NULL;
    }
    if (t->numel && gdl_copy_to_host(t, v, sizeof(int32_t) * (size_t)t->numel) < 0) return NULL;
    for (i = 0; i < t->numel; i++) w[i] = v[i];
    *n = t->numel;
    return w;
}

GPUDL_API int gdl_forward_ex(gdl_module *m, gdl_tensor *x, const gdl_forward_opts *o, gdl_tensor **outs,
                             int max_outs) {
    const char *op = "gdl_forward_ex";
    gdl_forward_opts d = o ? *o : gdl_forward_defaults();
    gdl_tensor *r[3] = {NULL, NULL, NULL};
    const int64_t *lens = d.lengths;
    int64_t nlens = d.nlengths;
    int k, n;
    for (k = 0; outs && k < max_outs; k++) outs[k] = NULL;
    if (!m || !x || (!outs && max_outs > 0) || max_outs < 0) {
        if (max_outs < 0) gdl__set_error("%s: max_outs %d is negative", op, max_outs);
        else gdl__null_arg(op, !m ? "module" : !x ? "input" : "outs");
        return -1;
    }
    n = gdl_module_num_outputs(m);
    if (n == 1) {
        if (d.h0 || d.c0 || d.lengths || d.lengths_tensor) {
            gdl__set_error("%s: %s takes no states or lengths (those are a recurrent module's)", op,
                           gdl__nn_label(m));
            return -1;
        }
        if (!(r[0] = gdl_forward(m, x))) return -1;
    } else {
        if (d.lengths && d.lengths_tensor) {
            gdl__set_error("%s: %s: give lengths or lengths_tensor, not both", op, gdl__nn_label(m));
            return -1;
        }
        if (d.lengths_tensor && !(lens = gdl__nn_lengths_host(op, d.lengths_tensor, &nlens))) return -1;
        if (gdl__nn_rnn_forward(op, m, m->kind, x, d.h0, d.c0, lens, nlens, &r[0], &r[1], n == 3 ? &r[2] : NULL) < 0)
            return -1;
    }
    for (k = 0; k < n && k < max_outs; k++) outs[k] = r[k];
    return n;
}
