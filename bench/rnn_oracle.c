/* rnn_oracle.c — gpudl's side of the LSTM / GRU check against PyTorch (bench/pytorch/rnn_oracle.py is
   PyTorch's). Makes a 2-layer, bidirectional, batch_first LSTM(5, 4) and GRU(5, 4) from a fixed seed, runs
   them on a fixed input with given initial states, backpropagates L = sum(out*w0) + sum(h_n*w1)
   (+ sum(c_n*w2)), and writes DIR/rnn_oracle.safetensors: for each of "lstm." and "gru.": the parameters
   under their state_dict names, the input and states, the weights w0..w2, our outputs ("out", "h_n",
   "c_n") and gradients ("grad.<parameter>", "grad.x", "grad.h0", "grad.c0"). The Python side loads the
   parameters into torch.nn.LSTM / GRU, runs the same and compares.
   The same modules dynamically quantized (gdl_quantize_dynamic) with per-channel weights (gpudl's default,
   PyTorch's per_channel_dynamic_qconfig) and per-tensor ones (default_dynamic_qconfig: per_channel 0) add
   their outputs on the same input and states ("pc1.out", "pc1.h_n", "pc1.c_n"; "pc0." ...) and are saved as
   DIR/rnn_quant_<lstm|gru>_pc<1|0>.safetensors (gdl_quant_save) for bench/pytorch/quant_rnn_oracle.py.

   cc -O2 bench/rnn_oracle.c -lm -lz -pthread -o build/rnn_oracle
   build/rnn_oracle build && python3 bench/pytorch/rnn_oracle.py build
   python3 bench/pytorch/quant_rnn_oracle.py build */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"

#include <stdio.h>
#include <string.h>

#define CPU gdl_cpu()
#define MAXT 128

static gdl_st_tensor items[MAXT];
static char item_names[MAXT][160];
static int nitems;

/* t as one more f32 entry of the file, named prefix + name */
static void add(const char *prefix, const char *name, const gdl_tensor *t) {
    float *p = (float *)malloc(sizeof(float) * (size_t)(t->numel + 1));
    int64_t i;
    for (i = 0; i < t->numel; i++) p[i] = (float)((const gdl_real *)t->data)[i];
    snprintf(item_names[nitems], sizeof item_names[nitems], "%s%s", prefix, name);
    items[nitems].name = item_names[nitems];
    items[nitems].dtype = "F32";
    items[nitems].ndim = t->ndim;
    items[nitems].shape = t->shape;
    items[nitems].data = p;
    nitems++;
}

/* the quantized outputs of float module m on x, h0, c0 and the quantized models' files (see the top) */
static int run_quantized(const char *dir, gdl_module *m, int lstm, gdl_tensor *x, gdl_tensor *h0, gdl_tensor *c0) {
    gdl_tensor *out, *hn, *cn = NULL;
    char sub[32], path[512];
    int pc, rc;
    for (pc = 0; pc < 2; pc++) {
        gdl_qconfig qc = gdl_qconfig_default();
        gdl_module *q;
        qc.per_channel = pc;
        if (!(q = gdl_quantize_dynamic(m, &qc))) return -1;
        rc = lstm ? gdl_nn_lstm_forward(q, x, h0, c0, &out, &hn, &cn) : gdl_nn_gru_forward(q, x, h0, &out, &hn);
        snprintf(path, sizeof path, "%s/rnn_quant_%s_pc%d.safetensors", dir, lstm ? "lstm" : "gru", pc);
        if (rc < 0 || gdl_quant_save(q, path) < 0) return -1;
        snprintf(sub, sizeof sub, "%spc%d.", lstm ? "lstm." : "gru.", pc);
        add(sub, "out", out);
        add(sub, "h_n", hn);
        if (lstm) add(sub, "c_n", cn);
        gdl_module_free(q);
    }
    return 0;
}

static int run(const char *dir, int lstm) {
    const char *pre = lstm ? "lstm." : "gru.";
    const int64_t B = 3, T = 6, I = 5, H = 4;
    int64_t shapes[6][3] = {{B, T, I}, {4, B, H}, {4, B, H}, {B, T, 2 * H}, {4, B, H}, {4, B, H}};
    static const char *const in_names[6] = {"x", "h0", "c0", "w0", "w1", "w2"};
    gdl_module *m;
    gdl_tensor *in[6], *out, *hn, *cn = NULL, *l, *ts[20];
    const char *names[20];
    char gname[96];
    int k, n, rc;
    gdl_manual_seed(lstm ? 101 : 202);
    m = lstm ? gdl_nn_lstm(I, H, 2, 1, 1, 0, 1) : gdl_nn_gru(I, H, 2, 1, 1, 0, 1);
    if (!m) return -1;
    for (k = 0; k < 6; k++) {
        if (!(in[k] = gdl_randn(3, shapes[k], CPU))) return -1;
        if (k < 3) gdl_set_requires_grad(in[k], 1);
    }
    rc = lstm ? gdl_nn_lstm_forward(m, in[0], in[1], in[2], &out, &hn, &cn) : gdl_nn_gru_forward(m, in[0], in[1], &out, &hn);
    if (rc < 0) return -1;
    l = gdl_add(gdl_sum(gdl_mul(out, in[3])), gdl_sum(gdl_mul(hn, in[4])));
    if (lstm) l = gdl_add(l, gdl_sum(gdl_mul(cn, in[5])));
    if (!l || gdl_backward(l) < 0) return -1;
    n = gdl_module_named_tensors(m, GDL_PARAMS, names, ts, 20);
    for (k = 0; k < n; k++) {
        add(pre, names[k], ts[k]);
        snprintf(gname, sizeof gname, "grad.%s", names[k]);
        add(pre, gname, ts[k]->grad);
    }
    for (k = 0; k < 6; k++)
        if (lstm || (k != 2 && k != 5)) add(pre, in_names[k], in[k]);
    add(pre, "out", out);
    add(pre, "h_n", hn);
    add(pre, "grad.x", in[0]->grad);
    add(pre, "grad.h0", in[1]->grad);
    if (lstm) {
        add(pre, "c_n", cn);
        add(pre, "grad.c0", in[2]->grad);
    }
    return run_quantized(dir, m, lstm, in[0], in[1], in[2]);
}

int main(int argc, char **argv) {
    char path[512];
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    if (run(argv[1], 1) < 0 || run(argv[1], 0) < 0) {
        fprintf(stderr, "rnn_oracle: %s\n", gdl_last_error());
        return 1;
    }
    snprintf(path, sizeof path, "%s/rnn_oracle.safetensors", argv[1]);
    if (gdl_st_write(path, nitems, items, 0, NULL, NULL) < 0) {
        fprintf(stderr, "rnn_oracle: %s\n", gdl_last_error());
        return 1;
    }
    printf("wrote %s (%d tensors)\n", path, nitems);
    return 0;
}
