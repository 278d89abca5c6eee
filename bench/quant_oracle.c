/* quant_oracle.c — gpudl's side of the INT8 oracle (bench/pytorch/quant_oracle.py
   is PyTorch's): makes a Linear(64, 32), a Conv2d(3, 8, 3, padding 1) and
   their inputs and calibration batches from a fixed seed, quantizes them with
   gdl_quantize_dynamic (per-channel weights) and with static PTQ (min-max
   observers, 7-bit activations: PyTorch's x86 engine), and writes into DIR:
     oracle_inputs.safetensors  the float weights, biases, inputs, calibration
                                batches, and our outputs ("dyn.y", "lin.y",
                                "conv.y")
     oracle_dynamic.safetensors, oracle_linear.safetensors,
     oracle_conv.safetensors    the quantized models (gdl_quant_save: int8
                                weights, scales, zero points)
   Then the Python script runs torch.ao.quantization on the same weights and
   data and compares the scales, zero points, int8 weights and outputs.

   cc -O2 -march=native bench/quant_oracle.c -lm -pthread -o build/quant_oracle
   mkdir -p build/oracle && build/quant_oracle build/oracle &&
   build/torch-venv/bin/python bench/pytorch/quant_oracle.py build/oracle
   (both sides run on 2026-11-27 with torch 2.15: 20 comparisons, 0 failed; bench/RESULTS.md) */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"

#include <stdio.h>
#include <string.h>

#define CPU gdl_cpu()
#define NCAL 4

static int fail(const char *what) {
    fprintf(stderr, "quant_oracle: %s: %s\n", what, gdl_last_error());
    return 1;
}

/* a persistent copy of t as f32 bytes for the file */
static float *f32(const gdl_tensor *t) {
    float *p = (float *)malloc(sizeof(float) * (size_t)t->numel);
    int64_t i;
    for (i = 0; i < t->numel; i++) p[i] = (float)((const gdl_real *)t->data)[i];
    return p;
}

int main(int argc, char **argv) {
    char path[1024];
    const char *dir = argc > 1 ? argv[1] : "build/oracle";
    gdl_module *lin, *conv, *dq, *lp, *lq, *cp, *cq;
    gdl_tensor *x, *img, *cal[NCAL], *ical[NCAL], *ydyn, *ylin, *yconv;
    gdl_st_tensor st[8 + 2 * NCAL];
    float *bufs[8 + 2 * NCAL];
    char names[2 * NCAL][32];
    int i, n = 0;
    if (argc > 2) {
        fprintf(stderr, "usage: quant_oracle [DIR]\n");
        return 2;
    }
    gdl_manual_seed(2024);
    lin = gdl_nn_sequential(1, (gdl_module *[]){gdl_nn_linear(64, 32, 1)});
    conv = gdl_nn_sequential(1, (gdl_module *[]){gdl_nn_conv2d(3, 8, 3, 1, 1, 1, 1, 1)});
    x = gdl_randn(GDL_DIMS(16, 64), CPU);
    img = gdl_randn(GDL_DIMS(2, 3, 8, 8), CPU);
    if (!lin || !conv || !x || !img) return fail("set-up");
    gdl_mul_scalar_(x, 2.0);
    for (i = 0; i < NCAL; i++) {
        cal[i] = gdl_randn(GDL_DIMS(16, 64), CPU);
        ical[i] = gdl_randn(GDL_DIMS(2, 3, 8, 8), CPU);
        if (!cal[i] || !ical[i]) return fail("set-up");
        gdl_mul_scalar_(cal[i], 1.0 + 0.5 * i);
    }
    gdl_set_grad_enabled(0);
    /* dynamic */
    if (!(dq = gdl_quantize_dynamic(lin, NULL)) || !(ydyn = gdl_forward(dq, x))) return fail("dynamic");
    /* static: calibrate on the batches, then the outputs on x and img */
    if (!(lp = gdl_quant_prepare(lin, NULL)) || !(cp = gdl_quant_prepare(conv, NULL))) return fail("prepare");
    for (i = 0; i < NCAL; i++)
        if (!gdl_forward(lp, cal[i]) || !gdl_forward(cp, ical[i])) return fail("calibrate");
    if (!(lq = gdl_quant_convert(lp)) || !(cq = gdl_quant_convert(cp))) return fail("convert");
    if (!(ylin = gdl_forward(lq, x)) || !(yconv = gdl_forward(cq, img))) return fail("static forward");

#define ADD(nm, t)                                                                        \
    do {                                                                                  \
        bufs[n] = f32(t);                                                                 \
        st[n].name = (nm); st[n].dtype = "F32"; st[n].ndim = (t)->ndim;                   \
        st[n].shape = (t)->shape; st[n].data = bufs[n];                                   \
        n++;                                                                              \
    } while (0)
    ADD("lin.weight", gdl_module_tensor(lin, "0.weight"));
    ADD("lin.bias", gdl_module_tensor(lin, "0.bias"));
    ADD("conv.weight", gdl_module_tensor(conv, "0.weight"));
    ADD("conv.bias", gdl_module_tensor(conv, "0.bias"));
    ADD("x", x);
    ADD("img", img);
    for (i = 0; i < NCAL; i++) {
        snprintf(names[2 * i], sizeof names[0], "cal.%d", i);
        snprintf(names[2 * i + 1], sizeof names[0], "ical.%d", i);
        ADD(names[2 * i], cal[i]);
        ADD(names[2 * i + 1], ical[i]);
    }
    ADD("dyn.y", ydyn);
    ADD("lin.y", ylin);
#undef ADD
    snprintf(path, sizeof path, "%s/oracle_inputs.safetensors", dir);
    {
        gdl_st_tensor all[9 + 2 * NCAL];
        float *yc = f32(yconv);
        memcpy(all, st, sizeof(gdl_st_tensor) * (size_t)n);
        all[n].name = "conv.y"; all[n].dtype = "F32"; all[n].ndim = yconv->ndim;
        all[n].shape = yconv->shape; all[n].data = yc;
        if (gdl_st_write(path, n + 1, all, 0, NULL, NULL) < 0) return fail(path);
        free(yc);
    }
    snprintf(path, sizeof path, "%s/oracle_dynamic.safetensors", dir);
    if (gdl_quant_save(dq, path) < 0) return fail(path);
    snprintf(path, sizeof path, "%s/oracle_linear.safetensors", dir);
    if (gdl_quant_save(lq, path) < 0) return fail(path);
    snprintf(path, sizeof path, "%s/oracle_conv.safetensors", dir);
    if (gdl_quant_save(cq, path) < 0) return fail(path);
    for (i = 0; i < n; i++) free(bufs[i]);
    printf("quant_oracle: wrote %s/oracle_*.safetensors (int8 kernel %s)\n", dir, gdl_gemm_int8_kernel_name());
    gdl_module_free(lin);
    gdl_module_free(conv);
    gdl_module_free(dq);
    gdl_module_free(lp);
    gdl_module_free(lq);
    gdl_module_free(cp);
    gdl_module_free(cq);
    gdl_shutdown();
    return 0;
}
