/* src/ops/rnn.h — the recurrent gate ops behind gdl_nn_lstm / gdl_nn_gru: one time step's gate arithmetic after
   the two GEMMs, as one op (one kernel forward, one backward) instead of a dozen elementwise ops, each
   with its own output and tape node. bf16 / f16 inputs run on f32 copies (the GDL__LOWP hook),
   the result in gx's dtype. An input that is a row block of a larger tensor is recorded as that tensor
   (gdl__rnn_base), so that its gradient is added in place. */

/* gx, gh [B, G·H] and prev [B, H] checked (f32, one device): 0 with B and H, or -1 after the error */
static int gdl__rnn_gates_check(const char *op, int G, const gdl_tensor *gx, const gdl_tensor *gh,
                                const gdl_tensor *prev, const char *prev_name, int64_t *B, int64_t *H) {
    if (gdl__check_two(op, "gx", gx, 1, "gh", gh, 1) < 0 || gdl__check_in(op, prev_name, prev, 1) < 0 ||
        gdl__check_dev(op, gx, prev) < 0)
        return -1;
    if (prev->ndim != 2 || gx->ndim != 2 || !gdl_same_shape(gx, gh) || gx->shape[0] != prev->shape[0] ||
        gx->shape[1] != G * prev->shape[1]) {
        gdl__set_error("%s: expected gx and gh [B, %d*H] and %s [B, H], got gx %s, gh %s and %s %s", op, G,
                       prev_name, gdl_shape_str(gx), gdl_shape_str(gh), prev_name, gdl_shape_str(prev));
        return -1;
    }
    *B = prev->shape[0];
    *H = prev->shape[1];
    return 0;
}

/* An input that is a block of a larger f32 tensor (views: gdl_nn_lstm's gdl_select(gx, 0, t) and
   gdl_select(hc, 0, 1) at every step) is recorded as that tensor, the block's element offset in *off: the
   backward then adds into the tensor's gradient in place, where the view's own gradient would be zeroed
   at every step and then added into it by the view's backward. Not while gdl_export_onnx traces: it
   recognises a layer by the views. */
static gdl_tensor *gdl__rnn_base(gdl_tensor *t, int64_t *off) {
    gdl_tensor *p = t;
    int64_t o = 0;
    *off = 0;
    if (gdl__tracing || t->dtype != GDL_F32) return t;
    /* through the views gdl_select makes (a SLICE, then a RESHAPE dropping the dim) */
    while (p->node && (p->node->op == GDL_OP_SLICE || p->node->op == GDL_OP_RESHAPE) && p->node->in[0] &&
           p->node->in[0]->dtype == GDL_F32) {
        if (p->node->op == GDL_OP_SLICE) o += p->node->i[0];
        p = p->node->in[0];
    }
    if (p == t || (char *)p->data + (size_t)o * sizeof(gdl_real) != (char *)t->data) return t;
    *off = o;
    return p;
}

/* the op's output made and recorded: gates(B, H, gx, gh, prev, out) fills it */
static gdl_tensor *gdl__rnn_gates(const char *op, int opid, int ndim, const int64_t *shape, gdl_tensor *gx,
                                  gdl_tensor *gh, gdl_tensor *prev, int64_t B, int64_t H) {
    const gdl_backend *be;
    gdl_tensor *out, *in[3];
    gdl_node *n;
    int64_t gx_off, prev_off;
    int err, rc;
    if (!(be = gdl__be(op, gx->device)) || !(out = gdl__tmp(op, ndim, shape, GDL_F32, gx->device))) return NULL;
    if (out->numel) {
        rc = opid == GDL_OP_LSTM_GATES ? be->k.lstm_gates(B, H, GDL__R(gx), GDL__R(gh), GDL__R(prev), GDL__R(out))
                                       : be->k.gru_gates(B, H, GDL__R(gx), GDL__R(gh), GDL__R(prev), GDL__R(out));
        if (rc < 0) return NULL;
    }
    in[0] = gdl__rnn_base(gx, &gx_off);
    in[1] = gh;
    in[2] = gdl__rnn_base(prev, &prev_off);
    if ((n = gdl__record(op, opid, out, 3, in, &err))) {
        n->i[0] = gx_off;
        n->i[1] = prev_off;
    }
    return err ? NULL : gdl__finish(op, out);
}

GPUDL_API gdl_tensor *gdl_lstm_gates(gdl_tensor *gx, gdl_tensor *gh, gdl_tensor *c_prev) {
    const char *op = "gdl_lstm_gates";
    int64_t B, H, shape[3];
    GDL__LOWP3_FIRST(op, GDL_OP_LSTM_GATES, gdl_lstm_gates(gx, gh, c_prev), gx, gh, c_prev);
    if (gdl__rnn_gates_check(op, 4, gx, gh, c_prev, "c_prev", &B, &H) < 0) return NULL;
    shape[0] = 2;
    shape[1] = B;
    shape[2] = H;
    return gdl__rnn_gates(op, GDL_OP_LSTM_GATES, 3, shape, gx, gh, c_prev, B, H);
}

GPUDL_API gdl_tensor *gdl_gru_gates(gdl_tensor *gx, gdl_tensor *gh, gdl_tensor *h_prev) {
    const char *op = "gdl_gru_gates";
    int64_t B, H;
    GDL__LOWP3_FIRST(op, GDL_OP_GRU_GATES, gdl_gru_gates(gx, gh, h_prev), gx, gh, h_prev);
    if (gdl__rnn_gates_check(op, 3, gx, gh, h_prev, "h_prev", &B, &H) < 0) return NULL;
    return gdl__rnn_gates(op, GDL_OP_GRU_GATES, 2, h_prev->shape, gx, gh, h_prev, B, H);
}

/* input k's values and gradient at its block (gdl__rnn_base's offset in n->i[0] for gx, n->i[1] for prev) */
#define GDL__RNN_AT(n, k, off) (GDL__R((n)->in[k]) + (off))
#define GDL__RNN_GRAD_AT(n, k, off) (GDL__G((n)->in[k]) ? GDL__G((n)->in[k]) + (off) : NULL)

static int gdl__bw_lstm_gates(gdl_node *n, const gdl_backend *be) {
    const int64_t B = n->out->shape[1], H = n->out->shape[2]; /* out: [2, B, H] */
    if (!n->out->numel) return 0;
    return be->k.lstm_gates_backward(B, H, GDL__RNN_AT(n, 0, n->i[0]), GDL__R(n->in[1]), GDL__RNN_AT(n, 2, n->i[1]),
                                   GDL__R(n->out->grad), GDL__RNN_GRAD_AT(n, 0, n->i[0]), GDL__G(n->in[1]),
                                   GDL__RNN_GRAD_AT(n, 2, n->i[1]));
}

static int gdl__bw_gru_gates(gdl_node *n, const gdl_backend *be) {
    const int64_t B = n->out->shape[0], H = n->out->shape[1]; /* out: [B, H] */
    if (!n->out->numel) return 0;
    return be->k.gru_gates_backward(B, H, GDL__RNN_AT(n, 0, n->i[0]), GDL__R(n->in[1]), GDL__RNN_AT(n, 2, n->i[1]),
                                  GDL__R(n->out->grad), GDL__RNN_GRAD_AT(n, 0, n->i[0]), GDL__G(n->in[1]),
                                  GDL__RNN_GRAD_AT(n, 2, n->i[1]));
}
