/* fuzz_onnx.c — libFuzzer harness for gdl_onnx_parse (gdl_load_onnx's reader) and gdl_onnx_run: any input
   either parses or fails with a message; a model that parses is run on a small input of each shape the
   seeds take ([2,1,28,28], [2,12], [2,6,5], [2,7,6]), and the run either gives its outputs or fails with a message.
   The seeds: gdl_export_onnx's files and PyTorch's exports (torch_*.onnx: tests/onnx_torch.py's MLP with both
   exporters, its bidirectional LSTM / GRU net with the TorchScript one), a QDQ Gemm with an int8 per-axis weight
   (qdq_gemm_opset18.onnx) and an int8 initializer whose raw_data is shorter than its dims. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static const int64_t shapes[4][4] = {{2, 1, 28, 28}, {2, 12, 0, 0}, {2, 6, 5, 0}, {2, 7, 6, 0}};
    static const int ndims[4] = {4, 2, 3, 3};
    gdl_onnx_model *m = gdl_onnx_parse(data, n, gdl_cpu());
    int s;
    if (!m) {
        if (!gdl_last_error()[0]) abort(); /* a failure must say why */
        return 0;
    }
    for (s = 0; s < 4; s++) {
        gdl_tensor *x = gdl_zeros(ndims[s], shapes[s], GDL_F32, gdl_cpu()), *out[8];
        int nout = -1, k;
        if (!x) abort();
        if (gdl_onnx_run(m, 1, &x, 8, out, &nout) == 0) {
            if (nout < 1 || nout > 8) abort();
            for (k = 0; k < nout; k++)
                if (!out[k] || out[k]->numel < 0) abort();
        } else if (!gdl_last_error()[0] || nout != 0) {
            abort();
        }
        gdl_free(x);
        gdl_arena_reset();
    }
    gdl_onnx_free(m);
    return 0;
}
