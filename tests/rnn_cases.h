/* rnn_cases.h — the recurrent modules as rows of tests/op_cases.h: an LSTM with proj_size, a GRU and
   nn.RNN (tanh, relu), with and without sequences of different lengths in one batch. A row's inputs
   are the input and the initial states; the module's parameters are fixed values (a sine of the element's
   index, the same on every device, so the CPU/GPU parity test compares like with like), the module made
   once per row and device and kept for the program's life (the tape refers to its parameters). The
   output is the sequence output, h_n and c_n flattened and concatenated, so the gradient check covers
   the states' gradients too, in the input's dtype (the module's parameters are f32: bf16 / f16 inputs
   run through f32 copies, and under autocast its GEMMs run in the low dtype, so autocast_cases.h counts
   the rows "rnn_module_*" as having a low op). The parameters' own gradients are checked against PyTorch by
   bench/rnn_oracle.c. Included by op_cases.h. */
#ifndef GPUDL_RNN_CASES_H
#define GPUDL_RNN_CASES_H

enum { RNN_ROW_LSTM_PROJ_LEN, RNN_ROW_GRU_LEN, RNN_ROW_RNN_TANH_LEN, RNN_ROW_RNN_RELU, RNN_ROW_LSTM_PROJ_UNBATCHED,
       RNN_ROWS };

typedef struct rnn_row {
    int kind; /* 0 LSTM, 1 GRU, 2 RNN */
    int64_t in, hidden;
    int layers, bias, batch_first, bidirectional, proj;
    const char *nonlinearity;
    int64_t lengths[4];
    int nlengths; /* 0: no lengths */
} rnn_row;

static const rnn_row rnn_rows[RNN_ROWS] = {
    {0, 3, 4, 2, 1, 1, 1, 2, NULL, {3, 1, 2}, 3}, /* max(lengths) < T: 3 output steps */
    {1, 3, 3, 1, 1, 0, 0, 0, NULL, {1, 3}, 2},
    {2, 3, 4, 2, 1, 0, 1, 0, "tanh", {2, 3, 1}, 3},
    {2, 3, 4, 1, 0, 1, 0, 0, "relu", {0}, 0},
    {0, 2, 3, 1, 1, 0, 1, 1, NULL, {0}, 0},
};

/* the row's module on dev, made on first use: parameters 0.5*sin(0.9*i + 0.37*k + 0.1) (element i of tensor k) */
static gdl_module *rnn_row_module(int r, gdl_device dev) {
    static gdl_module *made[RNN_ROWS][2];
    const rnn_row *q = &rnn_rows[r];
    gdl_module **slot = &made[r][dev.type == GDL_DEVICE_CUDA];
    gdl_rnn_opts o = gdl_rnn_defaults();
    gdl_tensor *ts[32];
    int k, n;
    int64_t i;
    if (*slot) return *slot;
    o.num_layers = q->layers;
    o.bias = q->bias;
    o.batch_first = q->batch_first;
    o.bidirectional = q->bidirectional;
    o.proj_size = q->proj;
    o.nonlinearity = q->nonlinearity;
    *slot = q->kind == 0 ? gdl_nn_lstm_ex(q->in, q->hidden, &o)
            : q->kind == 1 ? gdl_nn_gru_ex(q->in, q->hidden, &o)
                           : gdl_nn_rnn_ex(q->in, q->hidden, &o);
    if (!*slot) return NULL;
    n = gdl_module_named_tensors(*slot, GDL_PARAMS, NULL, ts, 32);
    for (k = 0; k < n; k++)
        for (i = 0; i < ts[k]->numel; i++)
            ((gdl_real *)ts[k]->data)[i] = (gdl_real)(0.5 * sin(0.9 * (double)i + 0.37 * k + 0.1));
    if (gdl_module_to(*slot, dev) < 0) return NULL;
    return *slot;
}

/* f32 (the module's dtype): the dtype-parity runs give bf16 / f16 inputs */
static gdl_tensor *rnn_row_f32(gdl_tensor *t) { return t && t->dtype != GDL_F32 ? gdl_to_dtype(t, GDL_F32) : t; }

static gdl_tensor *rnn_row_forward(int r, gdl_tensor **x) {
    const rnn_row *q = &rnn_rows[r];
    gdl_module *m = rnn_row_module(r, x[0]->device);
    gdl_forward_opts o = gdl_forward_defaults();
    gdl_tensor *outs[3], *flat[3];
    int k, n;
    if (!m) return NULL;
    o.h0 = rnn_row_f32(x[1]);
    o.c0 = q->kind == 0 ? rnn_row_f32(x[2]) : NULL;
    o.lengths = q->nlengths ? q->lengths : NULL;
    o.nlengths = q->nlengths;
    if ((n = gdl_forward_ex(m, rnn_row_f32(x[0]), &o, outs, 3)) < 0) return NULL;
    for (k = 0; k < n; k++)
        if (!(flat[k] = gdl_to_dtype(gdl_flatten(outs[k], 0), x[0]->dtype))) return NULL;
    return gdl_concat(n, flat, 0);
}
static gdl_tensor *f_lstm_proj_len(gdl_tensor **x) { return rnn_row_forward(RNN_ROW_LSTM_PROJ_LEN, x); }
static gdl_tensor *f_gru_len(gdl_tensor **x) { return rnn_row_forward(RNN_ROW_GRU_LEN, x); }
static gdl_tensor *f_rnn_tanh_len(gdl_tensor **x) { return rnn_row_forward(RNN_ROW_RNN_TANH_LEN, x); }
static gdl_tensor *f_rnn_relu(gdl_tensor **x) { return rnn_row_forward(RNN_ROW_RNN_RELU, x); }
static gdl_tensor *f_lstm_proj_unbatched(gdl_tensor **x) { return rnn_row_forward(RNN_ROW_LSTM_PROJ_UNBATCHED, x); }

#endif
