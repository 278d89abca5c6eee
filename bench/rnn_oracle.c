/* rnn_oracle.c — gpudl's side of the recurrent modules' check against PyTorch (bench/pytorch/rnn_oracle.py
   is PyTorch's). Makes each case of the table below (LSTM, LSTM with proj_size, GRU, nn.RNN with tanh and
   relu; batch-first or time-major, one or two directions and layers, with and without bias) from a fixed
   seed, runs it on a fixed input with given initial states, with sequences of different lengths where the
   case gives them (gdl_forward_ex's lengths: PyTorch's pack_padded_sequence(enforce_sorted=False) + the
   module + pad_packed_sequence), backpropagates L = sum(out*w0) + sum(h_n*w1) (+ sum(c_n*w2)), and writes
   DIR/rnn_oracle.safetensors (DIR/rnn_oracle_f64.safetensors when built with -DGPUDL_DOUBLE, in float64):
   for each case "<name>.": its configuration "cfg" (kind 0 LSTM / 1 GRU / 2 RNN, input_size, hidden_size,
   num_layers, bias, batch_first, bidirectional, proj_size, relu), "lengths" where it has them, the
   parameters under their state_dict names, the input and states, the weights w0..w2, our outputs ("out",
   "h_n", "c_n") and gradients ("grad.<parameter>", "grad.x", "grad.h0", "grad.c0"). The Python side loads
   the parameters into torch.nn.LSTM / GRU / RNN, runs the same and compares.
   In the f32 build the cases "lstm" and "gru" dynamically quantized (gdl_quantize_dynamic) with
   per-channel weights (gpudl's default, PyTorch's per_channel_dynamic_qconfig) and per-tensor ones
   (default_dynamic_qconfig: per_channel 0) add their outputs on the same input and states ("pc1.out",
   "pc1.h_n", "pc1.c_n"; "pc0." ...) and are saved as DIR/rnn_quant_<lstm|gru>_pc<1|0>.safetensors
   (gdl_quant_save) for bench/pytorch/quant_rnn_oracle.py.

   cc -O2 bench/rnn_oracle.c -lm -lz -pthread -o build/rnn_oracle
   cc -O2 -DGPUDL_DOUBLE bench/rnn_oracle.c -lm -lz -pthread -o build/rnn_oracle_f64
   build/rnn_oracle build && build/rnn_oracle_f64 build && python3 bench/pytorch/rnn_oracle.py build
   python3 bench/pytorch/quant_rnn_oracle.py build
   make seq-fixtures turns the float64 build's cases into tests/torch_fixtures/rnn.safetensors (PyTorch's values
   for tests/test_torch_parity.c). */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"

#include "oracle_st.h"

#define CPU gdl_cpu()

typedef struct oracle_case {
    const char *name;
    int kind; /* 0 LSTM, 1 GRU, 2 RNN */
    int64_t in, hidden;
    int layers, bias, batch_first, bidirectional;
    int64_t proj;
    int relu;
    int64_t B, T;
    int64_t lengths[4]; /* B of them, or none (lengths[0] 0) */
    int quantized;      /* also dynamically quantized (f32 build) */
} oracle_case;

static const oracle_case oracle_cases[] = {
    {"lstm", 0, 5, 4, 2, 1, 1, 1, 0, 0, 3, 6, {0}, 1},
    {"gru", 1, 5, 4, 2, 1, 1, 1, 0, 0, 3, 6, {0}, 1},
    {"lstm_proj_lengths", 0, 5, 6, 2, 1, 1, 1, 3, 0, 3, 6, {6, 2, 4}, 0},
    {"lstm_proj_short_time_major", 0, 4, 5, 1, 1, 0, 1, 2, 0, 4, 6, {3, 5, 1, 4}, 0},
    {"lstm_lengths", 0, 5, 4, 1, 1, 1, 0, 0, 0, 3, 6, {2, 6, 4}, 0},
    {"gru_lengths_no_bias", 1, 5, 4, 2, 0, 0, 1, 0, 0, 3, 6, {1, 6, 3}, 0},
    {"rnn_tanh_lengths", 2, 5, 4, 2, 1, 1, 1, 0, 0, 3, 6, {6, 2, 5}, 0},
    {"rnn_relu", 2, 5, 4, 1, 0, 0, 0, 0, 1, 3, 6, {0}, 0},
    {"rnn_relu_bidir_lengths", 2, 3, 5, 2, 1, 0, 1, 0, 1, 2, 4, {4, 3}, 0},
};

#ifndef GPUDL_DOUBLE
/* the quantized outputs of float module m on x, h0, c0 and the quantized models' files (see the top) */
static int run_quantized(const char *dir, const char *pre, gdl_module *m, int lstm, gdl_tensor *x, gdl_tensor *h0,
                         gdl_tensor *c0) {
    gdl_tensor *out, *hn, *cn = NULL;
    char sub[80], path[512];
    int pc, rc;
    for (pc = 0; pc < 2; pc++) {
        gdl_qconfig qc = gdl_qconfig_default();
        gdl_module *q;
        qc.per_channel = pc;
        if (!(q = gdl_quantize_dynamic(m, &qc))) return -1;
        rc = lstm ? gdl_nn_lstm_forward(q, x, h0, c0, &out, &hn, &cn) : gdl_nn_gru_forward(q, x, h0, &out, &hn);
        snprintf(path, sizeof path, "%s/rnn_quant_%s_pc%d.safetensors", dir, lstm ? "lstm" : "gru", pc);
        if (rc < 0 || gdl_quant_save(q, path) < 0) return -1;
        snprintf(sub, sizeof sub, "%spc%d.", pre, pc);
        oracle_add(sub, "out", out);
        oracle_add(sub, "h_n", hn);
        if (lstm) oracle_add(sub, "c_n", cn);
        gdl_module_free(q);
    }
    return 0;
}
#endif

static gdl_module *make_module(const oracle_case *c) {
    gdl_rnn_opts o = gdl_rnn_defaults();
    o.num_layers = c->layers;
    o.bias = c->bias;
    o.batch_first = c->batch_first;
    o.bidirectional = c->bidirectional;
    o.proj_size = c->proj;
    o.nonlinearity = c->kind == 2 ? (c->relu ? "relu" : "tanh") : NULL;
    return c->kind == 0 ? gdl_nn_lstm_ex(c->in, c->hidden, &o)
           : c->kind == 1 ? gdl_nn_gru_ex(c->in, c->hidden, &o)
                          : gdl_nn_rnn_ex(c->in, c->hidden, &o);
}

static int run(const char *dir, int ci) {
    const oracle_case *c = &oracle_cases[ci];
    const int lstm = c->kind == 0, D = c->bidirectional ? 2 : 1;
    const int64_t S = c->layers * D, F = c->proj ? c->proj : c->hidden;
    int64_t xs[3], hs[3] = {S, c->B, F}, cs[3] = {S, c->B, c->hidden};
    static const char *const in_names[6] = {"x", "h0", "c0", "w0", "w1", "w2"};
    char pre[64], gname[96];
    gdl_module *m;
    gdl_forward_opts fo = gdl_forward_defaults();
    gdl_tensor *in[6] = {0}, *outs[3] = {0}, *l, *ts[40];
    const char *names[40];
    gdl_real cfg[9], lens[4];
    int k, n, nout;
    snprintf(pre, sizeof pre, "%s.", c->name);
    xs[0] = c->batch_first ? c->B : c->T;
    xs[1] = c->batch_first ? c->T : c->B;
    xs[2] = c->in;
    gdl_manual_seed(101 + 7 * (uint64_t)ci);
    if (!(m = make_module(c))) return -1;
    if (!(in[0] = gdl_randn(3, xs, CPU)) || !(in[1] = gdl_randn(3, hs, CPU)) || (lstm && !(in[2] = gdl_randn(3, cs, CPU))))
        return -1;
    for (k = 0; k < 3; k++)
        if (in[k]) gdl_set_requires_grad(in[k], 1);
    fo.h0 = in[1];
    fo.c0 = in[2];
    if (c->lengths[0]) {
        fo.lengths = c->lengths;
        fo.nlengths = c->B;
    }
    if ((nout = gdl_forward_ex(m, in[0], &fo, outs, 3)) < 0) return -1;
    for (k = 0; k < nout; k++) /* the loss's weights, shaped as the outputs */
        if (!(in[3 + k] = gdl_randn(outs[k]->ndim, outs[k]->shape, CPU))) return -1;
    l = gdl_add(gdl_sum(gdl_mul(outs[0], in[3])), gdl_sum(gdl_mul(outs[1], in[4])));
    if (lstm) l = gdl_add(l, gdl_sum(gdl_mul(outs[2], in[5])));
    if (!l || gdl_backward(l) < 0) return -1;
    cfg[0] = c->kind, cfg[1] = (gdl_real)c->in, cfg[2] = (gdl_real)c->hidden, cfg[3] = c->layers, cfg[4] = c->bias;
    cfg[5] = c->batch_first, cfg[6] = c->bidirectional, cfg[7] = (gdl_real)c->proj, cfg[8] = c->relu;
    oracle_add_values(pre, "cfg", cfg, 9);
    if (c->lengths[0]) {
        for (k = 0; k < c->B; k++) lens[k] = (gdl_real)c->lengths[k];
        oracle_add_values(pre, "lengths", lens, c->B);
    }
    n = gdl_module_named_tensors(m, GDL_PARAMS, names, ts, 40);
    for (k = 0; k < n; k++) {
        oracle_add(pre, names[k], ts[k]);
        snprintf(gname, sizeof gname, "grad.%s", names[k]);
        oracle_add(pre, gname, ts[k]->grad);
    }
    for (k = 0; k < 6; k++)
        if (in[k]) oracle_add(pre, in_names[k], in[k]);
    oracle_add(pre, "out", outs[0]);
    oracle_add(pre, "h_n", outs[1]);
    oracle_add(pre, "grad.x", in[0]->grad);
    oracle_add(pre, "grad.h0", in[1]->grad);
    if (lstm) {
        oracle_add(pre, "c_n", outs[2]);
        oracle_add(pre, "grad.c0", in[2]->grad);
    }
#ifndef GPUDL_DOUBLE
    if (c->quantized && run_quantized(dir, pre, m, lstm, in[0], in[1], in[2]) < 0) return -1;
#else
    (void)dir;
#endif
    return 0;
}

int main(int argc, char **argv) {
    int i;
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    for (i = 0; i < (int)(sizeof oracle_cases / sizeof oracle_cases[0]); i++)
        if (run(argv[1], i) < 0) {
            fprintf(stderr, "rnn_oracle: %s: %s\n", oracle_cases[i].name, gdl_last_error());
            return 1;
        }
    return oracle_write("rnn_oracle", argv[1], "rnn_oracle");
}
