/* ---------------------------------------------------------------------------
   src/api/export.h  A trained model as one self-contained C99 file for a
   microcontroller: the last step of an embedded demo (examples/mcu/).

       gdl_module_train(model, 0);                     // eval mode: required
       gdl_export_c_opts o = gdl_export_c_defaults();
       o.name = "fmnist";
       if (gdl_export_c(model, 2, (int64_t[]){1, 784}, "fmnist.h", &o, NULL) < 0)
           fprintf(stderr, "%s\n", gdl_last_error());
   prints
       gdl_export_c: fmnist.h: fmnist, f32, 2 ops, input 784, output 10, weights 407080 bytes,
       arena 552 bytes (FMNIST_ARENA_BYTES)
   and writes an stb-style file: the declarations, and behind
   `#define FMNIST_IMPLEMENTATION` (in one C file) the code:
       #define FMNIST_IMPLEMENTATION
       #include "fmnist.h"
       float out[FMNIST_OUTPUT_SIZE];
       fmnist_run(image, out);                          // image: FMNIST_INPUT_SIZE floats
   The file includes <stdint.h>, <stddef.h> and <string.h>, and <math.h>
   only where an op needs libm (sigmoid, tanh, softmax's exp) and
   opts.no_libm is 0. It calls no malloc, no stdio, no threads: NAME_run
   computes the forward in one static arena of NAME_ARENA_BYTES (the
   exporter places every intermediate in it, reusing the space of values no
   longer needed), so it is not reentrant. Weights are `static const`
   arrays (flash on a microcontroller).

   The model: in eval mode (every module: dropout is the identity, BatchNorm
   uses its running statistics), on any device, a tree of
   * Sequential, Linear, Conv2d (any stride, padding, dilation, groups:
     depthwise too), BatchNorm1d/2d directly after a Linear / Conv2d (folded
     into it: w * gamma / sqrt(var + eps), (b - mean) * gamma / sqrt(var + eps)
     + beta), ReLU, LeakyReLU, Sigmoid, Tanh (these two need libm), MaxPool2d,
     AvgPool2d (count_include_pad), GlobalAvgPool2d, Flatten, Identity,
     Dropout, Residual (gdl_nn_residual) and BasicBlock (gdl_nn_basic_block)
     for f32 models;
   * the static quantized models of gdl_quant_convert (post-training or QAT):
     QuantizedLinear(ReLU), QuantizedConv(ReLU)2d, with MaxPool2d, AvgPool2d,
     GlobalAvgPool2d, ReLU, Flatten, Identity, Dropout between them.
   Anything else is refused by name (gdl_last_error: "LayerNorm '2' has no
   form in the C export ..."), as are dynamic quantized layers (their
   activation scale is computed at run time from the data), observed (not
   yet converted) layers and a float layer inside a quantized model.

   f32: NAME_run(const float *input, float *output), the forward in f32 with
   the layers' sums in a plain loop (within 1e-5 relative of gdl_forward,
   not bit for bit: the summation order differs). opts.softmax appends a
   softmax over the output (with no_libm, exp by a polynomial: x = n ln 2 + r,
   e^r by its degree-7 Taylor polynomial, 2^n in the exponent bits; relative
   error at most 1.1e-7 over [-87, 0], about one float ulp).

   INT8: NAME_run(const uint8_t *input, uint8_t *output), integer
   arithmetic only. The input is the image quantized as the first quantized
   layer does it: q = clamp(round(x / NAME_INPUT_SCALE) + NAME_INPUT_ZERO_POINT,
   0, NAME_INPUT_QMAX); the output the last layer's u8 values, real value
   (q - NAME_OUTPUT_ZERO_POINT) * NAME_OUTPUT_SCALE. Each layer sums
   (x - zero point) * w in int32 and requantizes with the fixed-point scheme
   of CMSIS-NN and TensorFlow Lite Micro: the bias rounded to the sum's scale
   s_x * s_w, the multiplier s_x * s_w / s_y (per output channel with
   per-channel weights) as an int32 fraction and a shift, one 64-bit product
   rounded once, half away from zero, then the output's zero point and the
   clamp (ReLU: the zero point as the floor). The weights' scales appear only
   in these multipliers. The result was within one quantization step of the
   gpudl model's output (which computes that step in f32) on every output the
   tests check; a step's difference in an early layer could in principle
   grow through later ones. Where a layer's input parameters differ from
   the previous layer's output parameters a requantization is emitted.
   Softmax (opts.softmax) is refused for INT8 models.
   ------------------------------------------------------------------------- */

typedef struct gdl_export_c_opts {
    const char *name; /* the C prefix of every symbol (NAME_run, NAME_ARENA_BYTES in upper case): a C
                         identifier of letters, digits and '_'; default "model" */
    int no_libm;      /* 1: no <math.h>: Sigmoid / Tanh refused, softmax's exp by a polynomial; default 0 */
    int softmax;      /* 1: a softmax over the output appended (f32 models); default 0 */
    FILE *report;     /* where the one-line summary (ops, weights, arena bytes) goes; default stdout; NULL: none */
} gdl_export_c_opts;

/* What gdl_export_c made (also printed to opts.report). */
typedef struct gdl_export_c_info {
    int int8;                  /* 1: the integer path */
    int nops;                  /* kernels called by NAME_run */
    int64_t input_size, output_size;
    int64_t weight_bytes;      /* the const arrays: weights, biases, multipliers */
    int64_t arena_bytes;       /* NAME_ARENA_BYTES */
} gdl_export_c_info;

/* name "model", libm allowed, no softmax, report stdout */
GPUDL_API gdl_export_c_opts gdl_export_c_defaults(void);
/* Writes the model m (eval mode; see above) for an input of shape input_shape (ndim dims, batch first,
   batch 1: {1, 784}, {1, 1, 28, 28}) as one C99 file at path: written to a temporary beside it and renamed
   over it, so nothing half-written is left. o NULL: the defaults; info may be NULL. 0 / -1 + error. */
GPUDL_API int gdl_export_c(gdl_module *m, int ndim, const int64_t *input_shape, const char *path,
                           const gdl_export_c_opts *o, gdl_export_c_info *info);
