/* ---------------------------------------------------------------------------
   src/api/quant.h  INT8 quantization: PyTorch's dynamic quantization
   (torch.ao.quantization.quantize_dynamic), static post-training
   quantization (prepare, calibrate, convert), quantization-aware training
   and the int8 GEMM under them.

   Dynamic quantization
   --------------------
       gdl_module *q = gdl_quantize_dynamic(model, NULL);   // model is kept
       gdl_evaluate(q, test_loader, NULL, NULL, &loss, &acc);
       gdl_module_summary(q, 2, (int64_t[]){1, 784}, stdout); // with its size
       gdl_quant_save(q, "mlp_int8.safetensors");
   returns a copy of the model with every Linear replaced by a
   DynamicQuantizedLinear and every LSTM / GRU by a DynamicQuantizedLSTM /
   DynamicQuantizedGRU (the other modules copied as they are), as
   quantize_dynamic(model, {nn.Linear, nn.LSTM, nn.GRU}, dtype=torch.qint8)
   with per_channel_dynamic_qconfig on the x86 engine (fbgemm):
   * weights int8 [-128, 127], symmetric (zero point 0), per output channel:
     scale = max(|min(w, 0)|, max(w, 0)) / 127.5, at least FLT_EPSILON
     (PyTorch's per_channel_symmetric observer), q = round-half-even(w *
     (1/scale)) clamped; gdl_qconfig.per_channel = 0 gives one scale for the
     tensor (quantize_dynamic's default_dynamic_qconfig);
   * activations quantized per batch, at run time: min and max over the
     whole input (widened to hold 0), u8 with 7 bits (0..127, PyTorch's
     reduce_range, which keeps the AVX2 kernel exact and fast) or 8
     (reduce_range = 0), scale and zero point as fbgemm's
     ChooseQuantizationParams (scale (max - min) / (qmax - qmin); the zero
     point from the side with the smaller error, rounded and clamped; 0.1 for
     a zero range);
   * the products summed in int32 (the int8 GEMM below); then
     y = (acc - zero_point * sum_k w_q[n][k]) * (scale_x * scale_w[n]) + bias[n]
     in f32.
   No gradient flows through a quantized module (as PyTorch's): the output is
   a temporary without a tape node. Quantized modules are made from a model
   on any device (the weights are quantized in host memory) and run where
   the model is, or where gdl_module_to puts them: on CUDA the same integer
   arithmetic and f32 epilogue give the CPU's outputs bit for bit (cuBLAS's
   int8 GEMM where the shapes are multiples of 4, a tiled kernel otherwise).
   Saving and loading take a model on any device.

   DynamicQuantizedLSTM / GRU (torch.ao.nn.quantized.dynamic.LSTM / GRU):
   per layer and direction the input and hidden projections are dynamic
   quantized Linears (children "ih_l0", "hh_l0", "ih_l0_reverse"..., with
   the biases b_ih and b_hh), the gates f32 (gdl_lstm_gates, gdl_gru_gates).
   As PyTorch's CPU path, the input projection quantizes a layer's whole
   input sequence at once (one activation scale for all its time steps),
   the hidden projection each step's h; the weights follow gdl_qconfig as
   the Linears' (per output channel by default: PyTorch's own default for
   quantize_dynamic, default_dynamic_qconfig, is per tensor: per_channel =
   0), activations 7-bit (PyTorch passes reduce_range to its LSTM cells).
   gdl_forward gives the output, gdl_nn_lstm_forward / gdl_nn_gru_forward
   the states too; the input must be f32 (batch_first, bidirectional,
   layers and unbatched inputs as nn.LSTM's). Unlike PyTorch's, bias=False
   is taken too.

   Files: gdl_quant_save writes every tensor of a quantized model to
   safetensors with names that say what they are:
       "0.weight_int8" I8 [out, in] (a convolution's [out, in, kh, kw]),
       "0.weight_scale" F32 [out] (or [1]), "0.weight_zero_point" I32 [out],
       "0.bias" F32 [out]; for static layers also "0.input_scale" F32 [1],
       "0.input_zero_point" I32 [1], "0.output_scale", "0.output_zero_point"
   and the other modules' parameters and buffers as F32 under their usual
   names; metadata "gpudl.quantized" = "int8". A tied weight
   (gdl_module_tie) is quantized and stored once: a parameter tied to
   another is written under its owner's name only (as gdl_save_model does);
   quantized layers made from one weight share one int8 copy, stored with
   the first; a quantized layer whose weight is tied to a float parameter
   that the model keeps (nanoGPT's lm_head tied to the token embedding) stores
   no int8 weight: the file holds the float values once, and loading
   quantizes them again, so the layer loads back tied. gdl_quant_load reads such
   a file into a quantized model of the same structure (strictly: names,
   dtypes and shapes), so: build the float model, gdl_quantize_dynamic it,
   gdl_quant_load the file (for static models: prepare, calibrate on any
   batch, convert, load). gdl_module_nbytes is the bytes of a model's
   tensors as stored (what the file holds, less its header); the summary
   prints it.

   Static post-training quantization (eager mode's prepare / calibrate / convert)
   ---------------------------------------------------------------------------
       gdl_module *p = gdl_quant_prepare(model, NULL);    // model is kept
       gdl_quant_calibrate(p, calib_loader, 32);         // 32 batches, eval, no grad
       gdl_module *q = gdl_quant_convert(p);              // p is kept
   prepare copies the model with every Linear and Conv2d (groups 1) made an
   observed layer (ObservedLinear, ObservedConv2d): the float layer, with an
   observer on its input and one on its output. A Linear or Conv2d followed
   by a ReLU in a Sequential is fused with it, as fuse_modules does
   (ObservedLinearReLU, ObservedConvReLU2d; the ReLU's place gets an
   Identity): its output is observed after the ReLU. Observers
   (gdl_qconfig.observer), per tensor:
   * GDL_QOBS_MINMAX (default): the running min and max (MinMaxObserver);
   * GDL_QOBS_MOVING_AVERAGE: the first batch's min and max, then
     v += averaging_constant * (batch's - v) (MovingAverageMinMaxObserver,
     0.01);
   * GDL_QOBS_HISTOGRAM: a 2048-bin histogram over the range seen (re-binned
     as it grows), the range taken between its (1 - percentile) and
     percentile quantiles (0.9999): clipping outliers. (PyTorch's
     HistogramObserver searches the range that minimises the L2 error
     instead; this is the percentile method.)
   The parameters are PyTorch's affine ones for u8 (0..127 with reduce_range,
   the x86 default, or 0..255): scale = (max - min) / (qmax - qmin) over the
   range widened to hold 0, at least FLT_EPSILON, zero point qmin -
   round(min / scale); weights as the dynamic layers' (int8 symmetric per
   output channel). Any forward pass of the prepared model in eval mode is
   calibration (gdl_quant_calibrate only loops over a loader); the summary's
   pass is not observed.
   convert replaces each observed layer by QuantizedLinear(ReLU) or
   QuantizedConv(ReLU)2d: the input quantized with its observed parameters,
   the int32 sums (a convolution through u8 columns, im2col, whose taps in
   the padding hold the zero point), then bias and ReLU in f32 and the result
   requantized with the output's parameters. Between layers the activations
   are kept as f32 values on that grid (exactly representable, so the next
   layer's quantization gets the integers back): the numerics of PyTorch's
   quint8 tensors between quantized modules, while pooling, flatten and the
   other float modules run unchanged (max pooling commutes with
   quantization). A layer not calibrated is refused at convert.

   Conv2d + BatchNorm2d (+ ReLU) in a Sequential are fused too: the
   BatchNorm is folded into the convolution with its running statistics
   (fuse_conv_bn_eval: w * gamma / sqrt(var + eps) per channel, bias
   (b - mean) * gamma / sqrt(var + eps) + beta) and its place gets an
   Identity.

   Quantization-aware training
   ---------------------------
       gdl_module *p = gdl_quant_prepare_qat(model, NULL);
       ... train p (gdl_fit, or a loop: its parameters are p's own) ...
       gdl_quant_freeze_observers(p, 1);                 // e.g. after an epoch
       ... train on ...
       gdl_module *q = gdl_quant_convert(p);
   prepare_qat is prepare with fake quantization in the observed layers
   (QATLinear, QATLinearReLU, QATConv2d, QATConvReLU2d): the input fake-
   quantized with its observer's parameters, the weight fake-quantized
   symmetric per channel from its current values, the output observed (after
   a fused ReLU) and fake-quantized, so training sees the rounding the int8
   model will do. The observers are moving-average min-max by default
   (PyTorch's default QAT qconfig); gdl_quant_freeze_observers stops their
   updates (PyTorch's disable_observer), the parameters then stay as they
   are. Fake quantization (gdl_fake_quantize, PyTorch's
   fake_quantize_per_tensor_affine) is
       y = (clamp(round(x / scale) + zp, qmin, qmax) - zp) * scale
   with the clipped straight-through estimator as gradient: 1 where
   round(x / scale) + zp lies in [qmin, qmax], 0 elsewhere; nothing is
   learnable (no LSQ). Unlike PyTorch's QAT ConvBn2d, which keeps the
   BatchNorm training and simulates the folding, a BatchNorm after a
   convolution is folded at prepare_qat, with its running statistics, and
   training goes on without it.

   A model on a GPU is prepared, calibrated (the loader's batches on its
   device), trained and converted where it is: the observers take the min
   and max there, the histogram and fake quantization's values and mask are
   computed from host copies (correct, equal to the CPU's, not fast), the
   converted layers are placed on the model's device.

   The int8 GEMM
   -------------
   gdl_gemm_u8s8_cpu: C[M,N] (int32) = A[M,K] (u8) * B[N,K]^T (s8), exact, on
   AVX-512 VNNI, AVX2, NEON (sdot where the compiler targets it) or portable
   C, chosen as the float GEMM's (src/cpu/gemm_int8.h says how; K at most
   65536 so that no sum overflows int32). The quantized layers pack their
   weight once and call its kernels directly.
   ------------------------------------------------------------------------- */

/* Activation observers of static quantization */
enum { GDL_QOBS_MINMAX = 0, GDL_QOBS_MOVING_AVERAGE = 1, GDL_QOBS_HISTOGRAM = 2 };

typedef struct gdl_qconfig {
    int per_channel;           /* 1 (default): a weight scale per output channel; 0: one per tensor */
    int reduce_range;          /* 1 (default): activations 0..127 (PyTorch's x86 default); 0: 0..255 */
    int observer;              /* static: GDL_QOBS_MINMAX (default), _MOVING_AVERAGE, _HISTOGRAM */
    double averaging_constant; /* GDL_QOBS_MOVING_AVERAGE's, in (0, 1]: default 0.01 */
    double percentile;         /* GDL_QOBS_HISTOGRAM's, in (0.5, 1]: default 0.9999 */
} gdl_qconfig;
/* PyTorch's quantize_per_tensor(x, scale, zero_point, torch.quint8) as a U8 tensor of the integers (on x's
   device, no gradient): clamp(round_half_even(x * (1/scale)) + zero_point, 0, 255); and dequantize: (q -
   zero_point) * scale in f32. x f32 / q U8; scale > 0, zero_point in [0, 255]. */
GPUDL_API gdl_tensor *gdl_quantize_per_tensor(gdl_tensor *x, float scale, int32_t zero_point);
GPUDL_API gdl_tensor *gdl_dequantize(gdl_tensor *q, float scale, int32_t zero_point);

/* per_channel 1, reduce_range 1, min-max observers (0.01, 0.9999 for the others) */
GPUDL_API gdl_qconfig gdl_qconfig_default(void);
/* A copy of m with every Linear made a DynamicQuantizedLinear (qc NULL: the default). m is not changed.
   Custom modules are refused (they cannot be copied). NULL + error. */
GPUDL_API gdl_module *gdl_quantize_dynamic(gdl_module *m, const gdl_qconfig *qc);
/* A copy of m with observed Linear and Conv2d layers (ReLU fused), for calibration. NULL + error. */
GPUDL_API gdl_module *gdl_quant_prepare(gdl_module *m, const gdl_qconfig *qc);
/* Forward passes of a prepared model over l (at most max_batches; <= 0: the rest of the epoch) in eval mode
   without gradients, so its observers see the data. Returns the batches run, -1 on error. */
GPUDL_API int64_t gdl_quant_calibrate(gdl_module *prepared, gdl_loader *l, int64_t max_batches);
/* A copy of a calibrated prepared model with its observed layers quantized (static). NULL + error (a model
   with no observed layer, a layer that has observed nothing). */
GPUDL_API gdl_module *gdl_quant_convert(gdl_module *prepared);
/* prepare for quantization-aware training (see above); qc NULL: the default with moving-average observers. The
   copy is in m's training mode. NULL + error. */
GPUDL_API gdl_module *gdl_quant_prepare_qat(gdl_module *m, const gdl_qconfig *qc);
/* on 1: the observers of every observed layer of m stop updating; 0: they update again. 0 / -1. */
GPUDL_API int gdl_quant_freeze_observers(gdl_module *m, int on);
/* y = (clamp(round(x / scale) + zero_point, qmin, qmax) - zero_point) * scale, differentiable with the clipped
   straight-through estimator. x f32 on any device. NULL + error. */
GPUDL_API gdl_tensor *gdl_fake_quantize(gdl_tensor *x, float scale, int32_t zero_point, int qmin, int qmax);
/* 1 when m or one of its descendants is a quantized module, 0 if not (or NULL). */
GPUDL_API int gdl_module_is_quantized(const gdl_module *m);
/* The bytes of m's tensors as stored: parameters and buffers at their dtype's size, quantized modules' int8
   weights, scales, zero points and bias. -1 for NULL. */
GPUDL_API int64_t gdl_module_nbytes(const gdl_module *m);
/* Saves a quantized model (see above); a model with no quantized module is refused. 0 / -1. */
GPUDL_API int gdl_quant_save(gdl_module *m, const char *path);
/* Loads gdl_quant_save's file into a quantized model of the same structure (nothing changed on error). 0 / -1. */
GPUDL_API int gdl_quant_load(gdl_module *m, const char *path);
/* PyTorch's (fbgemm's) ChooseQuantizationParams for the range [min, max] (widened to hold 0) and the integer
   range [qmin, qmax]: the dynamic layers' activation parameters. 0 / -1 (qmin >= qmax, NaN). */
GPUDL_API int gdl_choose_qparams(float min, float max, int qmin, int qmax, float *scale, int32_t *zero_point);

/* The largest K of the int8 GEMM: 65536 * 255 * 128 < 2^31, so no sum can overflow int32. */
#define GDL_GEMM_INT8_MAX_K 65536
/* C[M,N] (int32, rows ldc apart) = A[M,K] (u8, lda) * B[N,K]^T (s8, ldb): exact. 0 / -1 (sizes, K > 65536). */
GPUDL_API int gdl_gemm_u8s8_cpu(int M, int N, int K, const uint8_t *A, int lda, const int8_t *B, int ldb, int32_t *C,
                                int ldc);
/* The int8 kernel this build selected: "avx512vnni 8x32", "avx2 4x16", "neon-sdot 8x8", "neon 4x8", "portable 4x8". */
GPUDL_API const char *gdl_gemm_int8_kernel_name(void);
