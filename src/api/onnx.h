/* ---------------------------------------------------------------------------
   src/api/onnx.h   ONNX export by tracing (torch.onnx.export's way): one forward
   in evaluation mode on example inputs, every op it runs recorded on the tape,
   written as an ONNX model whose initializers are the module's parameters and
   buffers under their state_dict names. docs/onnx.md has the op table.

       gdl_onnx_opts o = gdl_onnx_defaults();   // opset 18, dynamic batch
       if (gdl_export_onnx(model, x, "model.onnx", &o) < 0)
           fprintf(stderr, "%s\n", gdl_last_error());

   The trace records what the forward did for these inputs: branches taken on
   values, loop counts and shapes other than the batch dimension are frozen
   into the file. With dynamic_batch every input's and output's dimension 0 is
   the symbolic "batch"; a tensor of the batch's size made inside the forward
   from numbers (not from the input) stays at the traced size. Dropout is the
   identity and batch norm uses its running statistics (evaluation mode); the
   module's training flags and the grad mode are restored afterwards. The
   file is written to a temporary and renamed: a failed export leaves nothing
   at path. An op without an ONNX form fails the export with an error naming
   the op and the node. A recurrent layer (gdl_nn_lstm / gdl_nn_gru) becomes
   one ONNX LSTM / GRU node per layer and direction (PyTorch's gate order
   converted to ONNX's). A statically quantized (int8) layer becomes
   QuantizeLinear / DequantizeLinear nodes around its float op; dynamically
   quantized layers are refused.
   ------------------------------------------------------------------------- */

#define GDL_ONNX_OPSET_MIN 17 /* LayerNormalization */
#define GDL_ONNX_OPSET_MAX 23
#define GDL_ONNX_OPSET_DEFAULT 18

typedef struct gdl_onnx_opts {
    int opset;                       /* default GDL_ONNX_OPSET_DEFAULT; GDL_ONNX_OPSET_MIN..GDL_ONNX_OPSET_MAX */
    int dynamic_batch;               /* default 1: dimension 0 of the inputs and outputs is "batch"; 0: fixed */
    const char *const *input_names;  /* one per input; NULL: "input" (one input) or "input0", "input1", ... */
    const char *const *output_names; /* one per output; NULL: "output" or "output0", ... */
    int external_data;               /* default 0: weights inside the file; 1: in <path without .onnx>.bin
                                        beside it (ONNX's external data: needed past protobuf's 2 GiB) */
    int64_t external_min_bytes;      /* with external_data: tensors under this many bytes stay inside (default 1024) */
} gdl_onnx_opts;
GPUDL_API gdl_onnx_opts gdl_onnx_defaults(void);

/* Exports model with the example input x (on the model's device). opts NULL: the defaults. 0 / -1 + error. */
GPUDL_API int gdl_export_onnx(gdl_module *model, gdl_tensor *x, const char *path, const gdl_onnx_opts *opts);

/* A forward of several inputs or outputs: fills out[0..*nout) (at most max_out) from in[0..nin), with gdl ops;
   0 / -1 + error. */
typedef int (*gdl_onnx_forward_fn)(void *user, int nin, gdl_tensor *const *in, int max_out, gdl_tensor **out,
                                   int *nout);
/* Exports fn's forward on the example inputs; the parameters and buffers of model (may be NULL: then every
   tensor the forward reads that is not an input is a constant named const_<k>) get their state_dict names,
   and model is put in evaluation mode during the trace. 0 / -1 + error. */
GPUDL_API int gdl_export_onnx_fn(gdl_module *model, gdl_onnx_forward_fn fn, void *user, int nin,
                                 gdl_tensor *const *inputs, const char *path, const gdl_onnx_opts *opts);

/* ---- import: an ONNX file run with gdl's ops ----
   gdl_load_onnx reads the file (untrusted: every length, count, shape and external-data range is checked;
   external data only from the file's directory) with its initializers on dev; gdl_onnx_run runs the graph
   on inputs (in the graph's input order; int64 ids as i32 tensors) with gdl's ops, giving temporaries (valid
   until the next gdl_arena_reset). It runs the files gdl_export_onnx writes and PyTorch's exports of the ops
   docs/onnx.md lists (both torch.onnx.export exporters: Gemm, Constant and Shape chains, LSTM / GRU nodes, ...;
   Erf, which GELU below opset 20 uses, as an approximation within 1.5e-7; quantized QDQ graphs: int8 / uint8 /
   int32 initializers, QuantizeLinear and DequantizeLinear per tensor and per axis on f32 tensors holding the
   integers, bit for bit gdl's own int8 arithmetic). A node of another op (QLinearConv, ...) is refused by
   gdl_load_onnx, an attribute it does not run by gdl_onnx_run, each with the node's name and op type. The run
   records the tape like any gdl forward: with gdl_onnx_parameters' tensors in an optimizer, a loss on its
   outputs trains the imported model (fine-tuning). */
typedef struct gdl_onnx_model gdl_onnx_model;
GPUDL_API gdl_onnx_model *gdl_load_onnx(const char *path, gdl_device dev);          /* NULL + error */
GPUDL_API gdl_onnx_model *gdl_onnx_parse(const void *data, size_t len, gdl_device dev); /* from memory: no external data */
GPUDL_API int gdl_onnx_run(gdl_onnx_model *m, int nin, gdl_tensor *const *inputs, int max_out, gdl_tensor **outputs,
                           int *nout); /* 0 / -1 + error */
GPUDL_API void gdl_onnx_free(gdl_onnx_model *m); /* NULL: no-op */
/* The model's trainable initializers (every f32 one but batch norm's running statistics and the constants of
   quantization: int8 / uint8 weights, the scales and zero points of QuantizeLinear / DequantizeLinear, Clip's
   bounds), in the file's order:
   marks each requires_grad and fills at most max names / params (either may be NULL; names live as long as m).
   Returns the total count (max 0 counts), -1 + error. The tensors are the model's: an optimizer's step changes
   what the next gdl_onnx_run computes. */
GPUDL_API int gdl_onnx_parameters(gdl_onnx_model *m, const char **names, gdl_tensor **params, int max);
