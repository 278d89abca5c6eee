/* src/ops/rnn.h — the recurrent gate ops behind gdl_nn_lstm / gdl_nn_gru: one time step's gate arithmetic after
   the two GEMMs, as one op (one kernel forward, one backward) instead of a dozen elementwise ops, each
   with its own output and tape node. bf16 / f16 inputs run on f32 copies (the GDL__LOWP hook),
   the result in gx's dtype. */

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

/* the op's output made and recorded: gates(B, H, gx, gh, prev, out) fills it */
static gdl_tensor *gdl__rnn_gates(const char *op, int opid, int ndim, const int64_t *shape, gdl_tensor *gx,
                                  gdl_tensor *gh, gdl_tensor *prev, int64_t B, int64_t H) {
    const gdl_backend *be;
    gdl_tensor *out, *in[3];
    int err, rc;
    if (!(be = gdl__be(op, gx->device)) || !(out = gdl__tmp(op, ndim, shape, GDL_F32, gx->device))) return NULL;
    if (out->numel) {
        rc = opid == GDL_OP_LSTM_GATES ? be->k.lstm_gates(B, H, GDL__R(gx), GDL__R(gh), GDL__R(prev), GDL__R(out))
                                       : be->k.gru_gates(B, H, GDL__R(gx), GDL__R(gh), GDL__R(prev), GDL__R(out));
        if (rc < 0) return NULL;
    }
    in[0] = gx;
    in[1] = gh;
    in[2] = prev;
    gdl__record(op, opid, out, 3, in, &err);
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

static int gdl__bw_lstm_gates(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *gx = n->in[0], *gh = n->in[1], *cp = n->in[2];
    if (!n->out->numel) return 0;
    return be->k.lstm_gates_backward(cp->shape[0], cp->shape[1], GDL__R(gx), GDL__R(gh), GDL__R(cp),
                                   GDL__R(n->out->grad), GDL__G(gx), GDL__G(gh), GDL__G(cp));
}

static int gdl__bw_gru_gates(gdl_node *n, const gdl_backend *be) {
    gdl_tensor *gx = n->in[0], *gh = n->in[1], *hp = n->in[2];
    if (!n->out->numel) return 0;
    return be->k.gru_gates_backward(hp->shape[0], hp->shape[1], GDL__R(gx), GDL__R(gh), GDL__R(hp),
                                  GDL__R(n->out->grad), GDL__G(gx), GDL__G(gh), GDL__G(hp));
}
