/* transformer_oracle.c — gpudl's side of the Transformer check against PyTorch (bench/pytorch/transformer_oracle.py
   is PyTorch's). Runs the cases of tests/transformer_parity_cases.h (a decoder, nn.Transformer, an unbatched decoder
   layer, MultiheadAttention's options, grouped-query attention) from fixed seeds on fresh random inputs and writes
   DIR/transformer_oracle.safetensors (inputs "<case>.x<i>", masks, weights "<case>.w<i>", outputs "<case>.out<i>",
   gradients "<case>.grad.x<i>" and "<case>.grad.<parameter>"; masks as 0/1 floats) and each module's
   gdl_save_model file DIR/transformer_<case>.safetensors, which the Python side loads with
   load_state_dict(strict=True). Built with -DGPUDL_DOUBLE (make seq-fixtures) it writes the same in float64 as
   DIR/transformer_oracle_f64.safetensors and DIR/transformer_<case>_f64.safetensors.

   make build/transformer_oracle && build/transformer_oracle build && python3 bench/pytorch/transformer_oracle.py build */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"

#include "oracle_st.h"
#include "../tests/transformer_parity_cases.h"

#define SUFFIX (sizeof(gdl_real) == 8 ? "_f64" : "")

static gdl_tensor *oracle_input(tf_io *io, const char *pre, const char *name, int ndim, const int64_t *shape, int grad) {
    gdl_tensor *t = gdl_randn(ndim, shape, io->dev);
    if (t && grad) gdl_set_requires_grad(t, 1);
    if (t && !grad) oracle_add(pre, name, t); /* an additive mask: written now (inputs: after the backward) */
    return t;
}

/* inputs are written after the backward (finish); masks as they are made, as 0/1 reals */
static gdl_tensor *oracle_mask(tf_io *io, const char *pre, const char *name, gdl_tensor *mask) {
    gdl_tensor *r = mask ? gdl_to_dtype(mask, GDL_F32) : NULL;
    (void)io;
    if (r) oracle_add(pre, name, r);
    return r ? mask : NULL;
}

static int oracle_module(tf_io *io, const char *pre, gdl_module *m) {
    (void)io, (void)pre, (void)m;
    return 0;
}

static int oracle_finish(tf_io *io, const char *pre, gdl_module *m, int nx, gdl_tensor **x, int no, gdl_tensor **out) {
    gdl_tensor *l = NULL, *ts[256];
    const char *names[256];
    char nm[160];
    int k, n;
    for (k = 0; k < no; k++) {
        gdl_tensor *w = gdl_randn(out[k]->ndim, out[k]->shape, io->dev);
        gdl_tensor *t = gdl_sum(gdl_mul(out[k], w));
        if (!w || !t || !(l = l ? gdl_add(l, t) : t)) return -1;
        snprintf(nm, sizeof nm, "w%d", k);
        oracle_add(pre, nm, w);
        snprintf(nm, sizeof nm, "out%d", k);
        oracle_add(pre, nm, out[k]);
    }
    if (gdl_backward(l) < 0) return -1;
    for (k = 0; k < nx; k++) {
        snprintf(nm, sizeof nm, "x%d", k);
        oracle_add(pre, nm, x[k]);
        snprintf(nm, sizeof nm, "grad.x%d", k);
        if (x[k]->grad) oracle_add(pre, nm, x[k]->grad);
    }
    if (!m) return 0;
    n = gdl_module_named_tensors(m, GDL_PARAMS, names, ts, 256);
    for (k = 0; k < n; k++) {
        snprintf(nm, sizeof nm, "grad.%s", names[k]);
        oracle_add(pre, nm, ts[k]->grad);
    }
    snprintf(nm, sizeof nm, "%s/transformer_%.*s%s.safetensors", (const char *)io->user, (int)strlen(pre) - 1, pre,
             SUFFIX);
    return gdl_save_model(m, nm);
}

int main(int argc, char **argv) {
    tf_io io;
    int i;
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    (void)oracle_add_values; /* oracle_st.h's, for the other oracles */
    io.dev = gdl_cpu();
    io.input = oracle_input;
    io.mask = oracle_mask;
    io.module = oracle_module;
    io.finish = oracle_finish;
    io.user = argv[1];
    for (i = 0; i < TF_NCASES; i++)
        if (tf_cases[i].run(&io) < 0) {
            fprintf(stderr, "transformer_oracle: %s: %s\n", tf_cases[i].prefix, gdl_last_error());
            return 1;
        }
    return oracle_write("transformer_oracle", argv[1], "transformer_oracle");
}
