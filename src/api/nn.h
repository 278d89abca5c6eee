/* ---------------------------------------------------------------------------
   src/api/nn.h   Modules (PyTorch's nn.Module), optimizers (torch.optim) and
   learning-rate schedulers (torch.optim.lr_scheduler).

   Modules
   -------
   A gdl_module is a tree: a kind ("Linear", "Sequential", ...), child modules
   (named "0","1",... in a Sequential, "body"/"shortcut" in a Residual), and
   persistent parameters and buffers. Modules are made on the CPU and moved
   with gdl_module_to(). Containers (gdl_nn_sequential, gdl_nn_residual,
   gdl_module_add_child) TAKE OWNERSHIP of the modules given to them, also
   when they fail, so constructors nest without leaks:

       gdl_module *mlp = gdl_nn_sequential(3, (gdl_module *[]){
           gdl_nn_linear(784, 128, 1), gdl_nn_relu(), gdl_nn_linear(128, 10, 1)});
       if (!mlp) fprintf(stderr, "%s\n", gdl_last_error());
       ...
       gdl_module_free(mlp);      // frees the children and every tensor

   Parameters and buffers have PyTorch's state_dict names ("0.weight",
   "1.running_mean", "3.body.0.weight"). Default initialisation is PyTorch's:
   Linear and Conv2d weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))
   (fan_in = in_features, or in_channels/groups*kh*kw), weight first, drawn
   from the global generator (gdl_manual_seed); BatchNorm gamma 1, beta 0,
   running mean 0, running var 1, eps 1e-5, momentum 0.1; LayerNorm gamma 1,
   beta 0, eps 1e-5; Embedding N(0,1). PyTorch's BatchNorm also has an int64
   `num_batches_tracked` buffer, only used when momentum=None; gdl has no
   int64 dtype and always uses the momentum, so it is left out.

   Modules start in training mode; gdl_module_train(m, 0) is PyTorch's
   .eval() (dropout becomes the identity, BatchNorm uses its running stats).

   Optimizers and schedulers
   -------------------------
       gdl_optimizer *opt = gdl_sgd_new(0.1, 0.9, 0, 5e-4, 0);
       gdl_optim_add_module(opt, model, 1);   // no weight decay on biases/norms
       gdl_scheduler *sched = gdl_cosine_lr_new(opt, epochs, 0);
       for each epoch { for each batch {
           gdl_arena_reset(); gdl_zero_grad(opt);
           loss = gdl_cross_entropy(gdl_forward(model, x), y);
           gdl_backward(loss); gdl_step(opt); }
         gdl_scheduler_step(sched); }
       gdl_scheduler_free(sched); gdl_optim_free(opt); gdl_module_free(model);

   The optimizer keeps pointers to the parameters (they must outlive the
   optimizer's use) and persistent state tensors made lazily (zeros) at a
   parameter's first step or by gdl_optim_state. The formulas are
   PyTorch's, step for step (docs/DESIGN.md). Schedulers compute each group's
   lr in closed form from their step count (last_epoch), as PyTorch's
   _get_closed_form_lr does, so a restored scheduler continues exactly; one
   scheduler per optimizer (a second one overwrites the lr of the first).
   Free schedulers before their optimizer, the optimizer before the model.

   The flat parameter buffer
   -------------------------
   At its first gdl_zero_grad, gdl_step or gdl_optim_state an optimizer
   makes one allocation per device its parameters are on, and moves into it
   (in parameter order, every slot 64-byte aligned) the parameters, then
   their gradients in the same layout, then SGD's momentum buffers or Adam's
   exp_avg and exp_avg_sq, then its per-group hyper-parameters and
   per-parameter step counts. The same gdl_tensor pointers now view the
   buffer, so modules, checkpoints and user code see no change; backward
   gives a parameter its gradient slot; the buffer lives as long as any
   tensor viewing it (parameters may outlive the optimizer). Consequences:
   * gdl_zero_grad is one memset per device; gdl_step is one backend call
     (one kernel launch) per device over a table of the parameters that is
     made once and kept while they stay the same;
   * the kernels read lr, the other hyper-parameters and the step counts
     (hence Adam's bias corrections) from the buffer, and advance the counts
     themselves: a steady-state step copies nothing to the device and waits
     for nothing, and a captured step stays right when lr changes.
     gdl_optim_set_lr, set_momentum and the schedulers write the new values
     into the buffer at once (an asynchronous copy on the compute stream);
   * the host's step tensors of gdl_optim_state ("state.<i>.step") are read
     back from the buffer by gdl_optim_state (a wait, for checkpoints), and
     written back to it by the next step (so a checkpoint load sets them);
   * the buffer is made again (values, state and counts kept) when
     parameters are added (gdl_optim_add_params) or moved (gdl_module_to to
     another device), or when an SGD without momentum gets some
     (gdl_optim_set_momentum, OneCycle): a step that does so copies and
     allocates. A gradient made outside the buffer (by hand, before it
     existed) is moved into its slot at the next zero_grad or step.
   Two optimizers over the same parameters each take them into their own
   buffer in turn (right, but each switch copies).
   ------------------------------------------------------------------------- */

typedef struct gdl_module gdl_module;       /* opaque: a layer or a tree of layers */
typedef struct gdl_optimizer gdl_optimizer; /* opaque: SGD, Adam or AdamW with param groups */
typedef struct gdl_scheduler gdl_scheduler; /* opaque: a learning-rate schedule */

/* The forward of a custom module (gdl_nn_custom): returns a tensor or NULL + error. */
typedef gdl_tensor *(*gdl_forward_fn)(gdl_module *self, gdl_tensor *x);

/* Which tensors gdl_module_named_tensors lists. */
typedef enum gdl_tensor_set { GDL_PARAMS = 1, GDL_BUFFERS = 2, GDL_PARAMS_AND_BUFFERS = 3 } gdl_tensor_set;

/* ---- layers (NULL + gdl_last_error() on bad arguments) ---- */
/* nn.Linear: y = x W^T + b, W [out,in], b [out] (bias != 0). Input [..., in]. */
GPUDL_API gdl_module *gdl_nn_linear(int64_t in_features, int64_t out_features, int bias);
/* nn.Conv2d, square kernel/stride/padding/dilation; W [out, in/groups, k, k]. Input [N,in,H,W]. */
GPUDL_API gdl_module *gdl_nn_conv2d(int in_channels, int out_channels, int kernel, int stride, int padding,
                                    int dilation, int groups, int bias);
/* nn.Conv2d with separate (h, w) kernel, stride, padding and dilation; NULL stride/padding/dilation = 1/0/1. */
GPUDL_API gdl_module *gdl_nn_conv2d_ex(int in_channels, int out_channels, const int kernel[2], const int stride[2],
                                       const int padding[2], const int dilation[2], int groups, int bias);
/* nn.BatchNorm1d(C): input [N,C] or [N,C,L]; eps 1e-5, momentum 0.1, affine, running stats. */
GPUDL_API gdl_module *gdl_nn_batchnorm1d(int64_t num_features);
/* nn.BatchNorm2d(C): input [N,C,H,W]; eps 1e-5, momentum 0.1, affine, running stats. */
GPUDL_API gdl_module *gdl_nn_batchnorm2d(int64_t num_features);
/* BatchNorm with every option: spatial_dims 1 (BatchNorm1d) or 2 (BatchNorm2d). */
GPUDL_API gdl_module *gdl_nn_batchnorm_ex(int spatial_dims, int64_t num_features, double eps, double momentum,
                                          int affine, int track_running_stats);
/* nn.LayerNorm(D) over the last dim: eps 1e-5, weight 1, bias 0. */
GPUDL_API gdl_module *gdl_nn_layernorm(int64_t normalized_dim);
/* nn.Dropout(p): zeroes with probability p and scales by 1/(1-p) in training; identity in eval. */
GPUDL_API gdl_module *gdl_nn_dropout(double p);
/* nn.Embedding(V, D): i32 indices [...] -> [..., D]; weight [V,D] ~ N(0,1). */
GPUDL_API gdl_module *gdl_nn_embedding(int64_t num_embeddings, int64_t embedding_dim);
/* nn.Embedding(V, D, padding_idx, max_norm, norm_type) (gdl_embedding_ex's options; o NULL: defaults):
   the padding row starts at zero and gets no gradient. */
GPUDL_API gdl_module *gdl_nn_embedding_ex(int64_t num_embeddings, int64_t embedding_dim, const gdl_embedding_opts *o);
/* nn.ReLU() */
GPUDL_API gdl_module *gdl_nn_relu(void);
/* nn.LeakyReLU(negative_slope) (PyTorch's default slope is 0.01) */
GPUDL_API gdl_module *gdl_nn_leaky_relu(double negative_slope);
/* nn.Sigmoid() */
GPUDL_API gdl_module *gdl_nn_sigmoid(void);
/* nn.Tanh() */
GPUDL_API gdl_module *gdl_nn_tanh(void);
/* nn.GELU(approximate = tanh_approx ? "tanh" : "none") */
GPUDL_API gdl_module *gdl_nn_gelu(int tanh_approx);
/* nn.Identity() */
GPUDL_API gdl_module *gdl_nn_identity(void);
/* nn.MaxPool2d(kernel, stride, padding); stride 0 means stride = kernel (PyTorch's None). */
GPUDL_API gdl_module *gdl_nn_maxpool2d(int kernel, int stride, int padding);
/* nn.AvgPool2d(kernel, stride, padding), count_include_pad; stride 0 means kernel. */
GPUDL_API gdl_module *gdl_nn_avgpool2d(int kernel, int stride, int padding);
/* nn.AdaptiveAvgPool2d(1): [N,C,H,W] -> [N,C,1,1]. */
GPUDL_API gdl_module *gdl_nn_global_avgpool2d(void);
/* nn.Flatten(start_dim) (end_dim -1); PyTorch's default start_dim is 1. */
GPUDL_API gdl_module *gdl_nn_flatten(int start_dim);
/* nn.LSTM / nn.GRU (PyTorch's semantics and state_dict): per layer l and direction, weight_ih_l<l> [G*H, in]
   (in: input_size for layer 0, H * directions above), weight_hh_l<l> [G*H, H], bias_ih_l<l>, bias_hh_l<l>
   [G*H] (bias != 0), "_reverse" appended for the backward direction; G = 4 gates i, f, g, o (LSTM) or 3
   gates r, z, n (GRU, n = tanh(W_in x + b_in + r*(W_hn h + b_hn))); all ~ U(-1/sqrt(H), 1/sqrt(H)).
   Input [T, B, input_size] ([B, T, input_size] with batch_first), or unbatched [T, input_size]. Output
   [T, B, D*H] (batch_first: [B, T, D*H]; the directions concatenated on the last dim, D = 2 when
   bidirectional); dropout on every layer's output but the last, in training mode only. gdl_forward gives
   the output only; gdl_forward_ex the states too. */
/* nn.LSTM / nn.GRU's keyword arguments under PyTorch's names; start from gdl_rnn_defaults(). */
typedef struct gdl_rnn_opts {
    int num_layers;    /* default 1; >= 1 */
    int bias;          /* default 1: bias_ih_l<l> and bias_hh_l<l> */
    int batch_first;   /* default 0: input and output [T, B, *]; 1: [B, T, *] */
    double dropout;    /* default 0; in [0,1]: on every layer's output but the last, in training mode */
    int bidirectional; /* default 0 */
    int64_t proj_size; /* default 0; an LSTM's h projected to proj_size < hidden_size features by
                          weight_hr_l<l> [proj_size, hidden_size] (no bias); h0, h_n and the output then
                          have proj_size features, c0 and c_n hidden_size, weight_hh [4H, proj_size] */
    const char *nonlinearity; /* an RNN's: NULL or "tanh" (default), "relu"; NULL for an LSTM or GRU */
} gdl_rnn_opts;
/* num_layers 1, bias 1, batch_first 0, dropout 0, bidirectional 0, proj_size 0, tanh (PyTorch's). */
GPUDL_API gdl_rnn_opts gdl_rnn_defaults(void);
/* nn.LSTM(input_size, hidden_size, **o) / nn.GRU(...); o NULL means defaults. NULL + error. */
GPUDL_API gdl_module *gdl_nn_lstm_ex(int64_t input_size, int64_t hidden_size, const gdl_rnn_opts *o);
GPUDL_API gdl_module *gdl_nn_gru_ex(int64_t input_size, int64_t hidden_size, const gdl_rnn_opts *o);
/* nn.RNN(input_size, hidden_size, **o): h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh), act tanh or relu
   (o->nonlinearity); weight_ih_l<l> [H, in], weight_hh_l<l> [H, H], biases [H] as LSTM's (G = 1). */
GPUDL_API gdl_module *gdl_nn_rnn_ex(int64_t input_size, int64_t hidden_size, const gdl_rnn_opts *o);
/* The same with every option given, in PyTorch's positional order. */
GPUDL_API gdl_module *gdl_nn_lstm(int64_t input_size, int64_t hidden_size, int num_layers, int bias, int batch_first,
                                  double dropout, int bidirectional);
GPUDL_API gdl_module *gdl_nn_gru(int64_t input_size, int64_t hidden_size, int num_layers, int bias, int batch_first,
                                 double dropout, int bidirectional);
GPUDL_API gdl_module *gdl_nn_rnn(int64_t input_size, int64_t hidden_size, int num_layers, const char *nonlinearity,
                                 int bias, int batch_first, double dropout, int bidirectional);
/* The forward with states: h0, c0 [num_layers*D, B, H] ([num_layers*D, H] unbatched; never batch-first),
   NULL for zeros; *out as gdl_forward's, *h_n and *c_n the final states in h0's layout (the forward
   direction's at the last step, the reverse one's at the first). Any of out, h_n, c_n may be NULL (not
   wanted). 0, or -1 + error with every result NULL. */
GPUDL_API int gdl_nn_lstm_forward(gdl_module *m, gdl_tensor *x, gdl_tensor *h0, gdl_tensor *c0, gdl_tensor **out,
                                  gdl_tensor **h_n, gdl_tensor **c_n);
GPUDL_API int gdl_nn_gru_forward(gdl_module *m, gdl_tensor *x, gdl_tensor *h0, gdl_tensor **out, gdl_tensor **h_n);
/* The forward of an LSTM, GRU or RNN with states and sequences of different lengths in one padded batch:
   lengths (nlengths = B values, each in [1, T]; NULL: all T) as PyTorch's
   pack_padded_sequence(x, lengths, batch_first, enforce_sorted=False), the module, then
   pad_packed_sequence: each sequence's states stop at its last step (h_n, c_n are the states there; the
   reverse direction starts at the sequence's own end), the output has max(lengths) steps and is zero
   (no gradient) past each sequence's end. c0 and c_n are an LSTM's only (c_n set NULL otherwise). 0, or
   -1 + error with every result NULL. */
GPUDL_API int gdl_nn_rnn_forward(gdl_module *m, gdl_tensor *x, gdl_tensor *h0, gdl_tensor *c0, const int64_t *lengths,
                                 int64_t nlengths, gdl_tensor **out, gdl_tensor **h_n, gdl_tensor **c_n);
/* nn.Sequential of n modules (children "0".."n-1"); takes ownership of mods[], also on failure. */
GPUDL_API gdl_module *gdl_nn_sequential(int n, gdl_module *const *mods);
/* Appends m to a Sequential as child "<count>"; takes ownership of m (freed on failure unless it has a parent). 0 / -1. */
GPUDL_API int gdl_nn_sequential_add(gdl_module *seq, gdl_module *m);
/* Fusion in Sequential's forward: a Linear followed by ReLU or GELU (either
   form), a Conv2d followed by ReLU, or a BatchNorm followed by ReLU or erf
   GELU, runs as one gdl_linear_act / gdl_conv2d_act / gdl_batch_norm_relu /
   gdl_batch_norm_act op (a
   BasicBlock's bn1 and its ReLU too; fewer kernel launches and memory passes; the same
   outputs and gradients bit for bit in f32 on the CPU). Not fused: under
   anomaly mode, during gdl_module_summary, under autocast or with non-f32
   inputs or parameters. On by default; the environment variable
   GPUDL_NO_FUSION=1 turns it off at start. on: 1 / 0 sets it, -1 only asks;
   returns the previous setting. Process-wide. */
GPUDL_API int gdl_nn_set_fusion(int on);
/* relu(body(x) + shortcut(x)), shortcut NULL = identity (a ResNet basic block); takes ownership of both. */
GPUDL_API gdl_module *gdl_nn_residual(gdl_module *body, gdl_module *shortcut);
/* torchvision's ResNet BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), 3x3 convolutions
   without bias (conv1 with the stride, padding 1); the shortcut is x, or where the stride is not 1 or the
   channels change a projection "downsample" (1x1 convolution with the stride, no bias, then BatchNorm2d).
   Its tensors carry torchvision's names (conv1.weight, bn1.running_mean, downsample.0.weight, ...). */
GPUDL_API gdl_module *gdl_nn_basic_block(int in_channels, int out_channels, int stride);

/* ---- custom modules ---- */
/* A module of kind `kind` whose forward is `forward`; user data is freed with free_user (may be NULL). */
GPUDL_API gdl_module *gdl_nn_custom(const char *kind, gdl_forward_fn forward, void *user, void (*free_user)(void *));
/* The user pointer given to gdl_nn_custom (NULL for built-in modules). */
GPUDL_API void *gdl_module_user(const gdl_module *m);
/* Adds a named child (no '.' in the name); takes ownership of child, also on failure. 0 / -1. */
GPUDL_API int gdl_module_add_child(gdl_module *m, const char *name, gdl_module *child);
/* Adds a persistent f32 leaf as a parameter (sets requires_grad); takes ownership, also on failure. 0 / -1. */
GPUDL_API int gdl_module_add_param(gdl_module *m, const char *name, gdl_tensor *t);
/* Adds a persistent tensor as a buffer (saved, moved, not trained); takes ownership, also on failure. 0 / -1. */
GPUDL_API int gdl_module_add_buffer(gdl_module *m, const char *name, gdl_tensor *t);
/* (Both refuse, and leave alone, a tensor the library owns: another module's parameter, a .grad, a batch ...) */

/* ---- using modules ---- */
/* The module's forward on x (a temporary, recorded on the tape); errors name the module ("Linear '0'"). */
GPUDL_API gdl_tensor *gdl_forward(gdl_module *m, gdl_tensor *x);
/* The extra inputs of gdl_forward_ex (start from gdl_forward_defaults(): all NULL): a recurrent module's
   initial states (PyTorch's hx: h0, and c0 for an LSTM) and its sequences' lengths, as a host array
   (lengths, nlengths) or an i32 [B] tensor on any device (lengths_tensor), as gdl_nn_rnn_forward's. */
typedef struct gdl_forward_opts {
    gdl_tensor *h0, *c0;
    const int64_t *lengths;
    int64_t nlengths;
    gdl_tensor *lengths_tensor;
} gdl_forward_opts;
GPUDL_API gdl_forward_opts gdl_forward_defaults(void);
/* How many tensors m's forward gives (PyTorch's output tuple, flattened): 3 for an LSTM (output, h_n,
   c_n), 2 for a GRU or RNN (output, h_n), 1 for every other module; 0 for NULL. */
GPUDL_API int gdl_module_num_outputs(const gdl_module *m);
/* m's forward on x with every output: outs[0..] get the first max_outs of PyTorch's tuple (the rest are
   not made into outs; outs[0] is gdl_forward's). o NULL: no states, no lengths; a module that is not
   recurrent takes none. Returns gdl_module_num_outputs(m), or -1 + error with outs[] NULL. */
GPUDL_API int gdl_forward_ex(gdl_module *m, gdl_tensor *x, const gdl_forward_opts *o, gdl_tensor **outs,
                             int max_outs);
/* Sets training mode (on != 0) or eval mode on m and all its descendants, like .train()/.eval(). 0 / -1. */
GPUDL_API int gdl_module_train(gdl_module *m, int on);
/* 1 if m is in training mode, 0 in eval mode (or m NULL). */
GPUDL_API int gdl_module_is_training(const gdl_module *m);
/* Moves every parameter (with its grad) and buffer to dev in place (gdl_move_), like model.to(dev). 0 / -1.
   Parameters leave their optimizer's flat buffer; the optimizer makes one on dev at its next use, with the
   state and step counts. */
GPUDL_API int gdl_module_to(gdl_module *m, gdl_device dev);
/* The device of the module's first parameter or buffer (the CPU when it has none). */
GPUDL_API gdl_device gdl_module_device(const gdl_module *m);
/* Frees a root module, its descendants and all their tensors (NULL: no-op; a child: refused). */
GPUDL_API void gdl_module_free(gdl_module *m);
/* Zeroes the grads of all parameters in place (those without a grad are left alone). 0 / -1. */
GPUDL_API int gdl_module_zero_grad(gdl_module *m);

/* ---- introspection and state_dict names ---- */
/* Lists parameters and/or buffers (which: GDL_PARAMS, GDL_BUFFERS or both) in state_dict order with
   their dotted names; fills at most max entries of names/tensors (either may be NULL) and returns the
   total count (max 0 counts), -1 on error. Names stay valid while the module lives. */
GPUDL_API int gdl_module_named_tensors(gdl_module *m, int which, const char **names, gdl_tensor **tensors, int max);
/* The parameter or buffer with state_dict name `name` ("3.body.0.weight"), NULL + error if none. */
GPUDL_API gdl_tensor *gdl_module_tensor(gdl_module *m, const char *name);
/* The descendant at dotted path `path` ("3.body"), NULL + error if none. */
GPUDL_API gdl_module *gdl_module_child(gdl_module *m, const char *path);
/* Number of direct children (0 for NULL). */
GPUDL_API int gdl_module_num_children(const gdl_module *m);
/* The i-th direct child, NULL + error when out of range. */
GPUDL_API gdl_module *gdl_module_child_at(gdl_module *m, int i);
/* The kind: "Linear", "Conv2d", "BatchNorm2d", "Sequential", "Residual", ... ("" for NULL). */
GPUDL_API const char *gdl_module_kind(const gdl_module *m);
/* The name in the parent ("0", "body"); "" for a root. */
GPUDL_API const char *gdl_module_name(const gdl_module *m);
/* Total number of parameter elements, recursively (-1 for NULL). */
GPUDL_API int64_t gdl_module_num_params(const gdl_module *m);
/* Keras-style summary: runs a no-grad eval-mode forward on zeros of input_shape (i32 zeros when the
   first layer is an Embedding) on the module's device, then prints layer, output shape and parameter
   count per module and the totals to f. Training flags are restored after. 0 / -1. */
GPUDL_API int gdl_module_summary(gdl_module *m, int ndim, const int64_t *input_shape, FILE *f);

/* ---- optimizers (NULL + error on bad hyperparameters) ---- */
/* torch.optim.SGD(lr, momentum, dampening, weight_decay, nesterov); nesterov needs momentum > 0, dampening 0. */
GPUDL_API gdl_optimizer *gdl_sgd_new(double lr, double momentum, double dampening, double weight_decay, int nesterov);
/* torch.optim.Adam (PyTorch defaults: 1e-3, 0.9, 0.999, 1e-8, 0); L2 weight decay added to the gradient. */
GPUDL_API gdl_optimizer *gdl_adam_new(double lr, double beta1, double beta2, double eps, double weight_decay);
/* torch.optim.AdamW (PyTorch defaults: 1e-3, 0.9, 0.999, 1e-8, 1e-2); decoupled weight decay. */
GPUDL_API gdl_optimizer *gdl_adamw_new(double lr, double beta1, double beta2, double eps, double weight_decay);
/* Adds a parameter group (persistent f32 leaves, or of the master weights' dtype, each in one group only); lr or
   weight_decay < 0 takes the optimizer's default. Returns the group index, -1 on error. */
GPUDL_API int gdl_optim_add_params(gdl_optimizer *opt, gdl_tensor *const *params, int n, double lr, double weight_decay);
/* Master weights (llm.c's, for memory): dt GDL_BF16 or GDL_F16 makes every parameter of opt a dt tensor (the same
   gdl_tensor pointers, rounded to nearest even) with dt gradients, while the optimizer keeps an f32 master copy of
   each in its flat buffer, with its state in f32; a step reads the dt gradient, updates master and state by the
   same f32 formulas and writes the parameter rounded from the master (one launch). GDL_F32 turns it off: the
   parameters become f32 again, with their masters' values. Parameters added later convert at the optimizer's
   next use. Gradients present are converted too. See MANUAL "Master weights". 0 / -1. */
GPUDL_API int gdl_optim_set_master_weights(gdl_optimizer *opt, gdl_dtype dt);
/* The parameters' dtype with master weights, GDL_F32 when off (or opt NULL). */
GPUDL_API gdl_dtype gdl_optim_master_weights(const gdl_optimizer *opt);
/* Parameter i's f32 master (a view of the flat buffer; owned by opt), NULL + error without master weights. */
GPUDL_API gdl_tensor *gdl_optim_master_weight(gdl_optimizer *opt, int i);
/* Adds m's parameters: one group, or with no_decay_on_bias_and_norm two groups, the 2-D+ weights with the
   default weight decay and the 0-D/1-D ones (biases, norm weights) with 0 (empty groups are skipped). 0 / -1. */
GPUDL_API int gdl_optim_add_module(gdl_optimizer *opt, gdl_module *m, int no_decay_on_bias_and_norm);
/* Zeroes every parameter's grad in place (PyTorch's zero_grad(set_to_none=False)): one memset per device
   over the flat gradient buffer (made here if not yet). 0 / -1. */
GPUDL_API int gdl_zero_grad(gdl_optimizer *opt);
/* set_to_none != 0: frees the grads instead (PyTorch's default), so untouched parameters are skipped by gdl_step;
   the next backward gives each parameter its slot of the flat buffer again (zeroed). */
GPUDL_API int gdl_zero_grad_ex(gdl_optimizer *opt, int set_to_none);
/* One optimizer step over every parameter that has a grad (others are skipped, as in PyTorch). 0 / -1.
   All or nothing: everything is checked and all missing state made first, then one multi-tensor update per
   device (one kernel launch on a GPU, as PyTorch's foreach optimizers); on an error (out of memory, a failed
   launch) no parameter, state tensor or step count has changed, so the step can be retried. In steady state
   nothing is copied to the device, allocated or waited for (see "The flat parameter buffer"). */
GPUDL_API int gdl_step(gdl_optimizer *opt);
/* torch.nn.utils.clip_grad_norm_: global L2 norm of the grads; if max_norm/(norm+1e-6) < 1 the grads are
   scaled by it. Returns the norm before clipping, -1 on error. */
GPUDL_API double gdl_clip_grad_norm(gdl_tensor *const *params, int n, double max_norm);
/* gdl_clip_grad_norm over all of the optimizer's parameters. */
GPUDL_API double gdl_optim_clip_grad_norm(gdl_optimizer *opt, double max_norm);
/* The same clipping without reading the norm back (0 / -1): on a GPU the norm and the scaling stay on
   the device (three kernel launches, no host synchronisation), as gdl_fit's clip_grad_norm does. */
GPUDL_API int gdl_clip_grad_norm_nosync(gdl_tensor *const *params, int n, double max_norm);
/* Lists the optimizer state for checkpoints, creating missing state (zeros, step 0): per parameter index i
   (in the order added) "state.<i>.step" (i32 scalar on the CPU) and "state.<i>.momentum_buffer" (SGD with
   momentum) or "state.<i>.exp_avg", "state.<i>.exp_avg_sq" (Adam, AdamW; views of the flat buffer). Fills at
   most max entries (names or tensors may be NULL), returns the total count, -1 on error. Names live as long
   as opt. The step tensors are read back from the device here (a wait); values written into them reach the
   device at the next step. */
GPUDL_API int gdl_optim_state(gdl_optimizer *opt, const char **names, gdl_tensor **tensors, int max);
/* Number of gdl_step calls made, steps a GradScaler skipped on the device included (-1 for NULL). */
GPUDL_API int64_t gdl_optim_get_step(const gdl_optimizer *opt);
/* Sets that count (for checkpoints; the per-parameter steps are in gdl_optim_state). 0 / -1. */
GPUDL_API int gdl_optim_set_step(gdl_optimizer *opt, int64_t step);
/* Number of parameter groups (-1 for NULL). */
GPUDL_API int gdl_optim_num_groups(const gdl_optimizer *opt);
/* Number of parameters over all groups (-1 for NULL). */
GPUDL_API int gdl_optim_num_params(const gdl_optimizer *opt);
/* The learning rate of a group (NaN + error if out of range). */
GPUDL_API double gdl_optim_get_lr(const gdl_optimizer *opt, int group);
/* Sets the learning rate of a group (lr >= 0), also in the flat buffer (an asynchronous copy). 0 / -1. */
GPUDL_API int gdl_optim_set_lr(gdl_optimizer *opt, int group, double lr);
/* A group's momentum (SGD) or beta1 (Adam, AdamW) (NaN + error if out of range). */
GPUDL_API double gdl_optim_get_momentum(const gdl_optimizer *opt, int group);
/* Sets a group's momentum (SGD) or beta1 (Adam, AdamW), in [0,1). 0 / -1. */
GPUDL_API int gdl_optim_set_momentum(gdl_optimizer *opt, int group, double momentum);
/* Frees the optimizer and its state (not the parameters). NULL: no-op. */
GPUDL_API void gdl_optim_free(gdl_optimizer *opt);

/* ---- weight EMA: torch.optim.swa_utils.AveragedModel(m, multi_avg_fn=get_ema_multi_avg_fn(decay),
   use_buffers) ---- */
typedef struct gdl_ema gdl_ema;
/* An average of opt's parameters (and with use_buffers of m's buffers, BatchNorm's running statistics;
   without, evaluation uses the model's own, as AveragedModel keeps them in sync), attached to opt: every
   gdl_step then updates it on the device after the update, one launch per device over the optimizer's flat
   parameter region and one per averaged buffer, nothing read back (so a CUDA graph of the step holds it):
   the first step copies (AveragedModel's n_averaged == 0), later ones avg = lerp(avg, p, 1 - decay).
   It starts as a copy of the parameters. Make it after every parameter is added (f32, no master weights).
   Checkpoints of opt (gdl_checkpoint_save, gdl_fit's) hold the averages as "ema.<name>"; gdl_fit's
   validation runs with the averaged weights. NULL + error. */
GPUDL_API gdl_ema *gdl_ema_new(gdl_optimizer *opt, gdl_module *m, double decay, int use_buffers);
/* Exchanges the model's parameters (and averaged buffers) with the averages: call, evaluate, call again. 0 / -1. */
GPUDL_API int gdl_ema_swap(gdl_ema *e);
/* AveragedModel.n_averaged: the optimizer's steps since gdl_ema_new (-1: NULL, or the optimizer was freed). */
GPUDL_API int64_t gdl_ema_num_updates(const gdl_ema *e);
/* The average of a parameter of the optimizer or an averaged buffer (a view, persistent). NULL + error. */
GPUDL_API gdl_tensor *gdl_ema_tensor(gdl_ema *e, const gdl_tensor *t);
/* Detaches it from its optimizer and frees it (NULL-safe). An optimizer freed first leaves it detached. */
GPUDL_API void gdl_ema_free(gdl_ema *e);

/* ---- learning-rate schedulers: each sets lr = f(last_epoch, base lr of the group) on creation
   (last_epoch 0) and on every gdl_scheduler_step ---- */
/* StepLR: lr = base * gamma^floor(last_epoch / step_size). */
GPUDL_API gdl_scheduler *gdl_steplr_new(gdl_optimizer *opt, int step_size, double gamma);
/* CosineAnnealingLR: lr = eta_min + (base - eta_min) * (1 + cos(pi * last_epoch / T_max)) / 2. */
GPUDL_API gdl_scheduler *gdl_cosine_lr_new(gdl_optimizer *opt, int T_max, double eta_min);
/* OneCycleLR(max_lr, total_steps): pct_start 0.3, div_factor 25, final_div_factor 1e4, cosine annealing,
   cycle_momentum on (momentum or beta1 0.95 -> 0.85 -> 0.95, as PyTorch; plain SGD gets momentum too). */
GPUDL_API gdl_scheduler *gdl_onecycle_lr_new(gdl_optimizer *opt, double max_lr, int total_steps);
/* OneCycleLR with every option (PyTorch's defaults: 0.3, 25, 1e4, 1, 0.85, 0.95). */
GPUDL_API gdl_scheduler *gdl_onecycle_lr_new_ex(gdl_optimizer *opt, double max_lr, int total_steps, double pct_start,
                                                double div_factor, double final_div_factor, int cycle_momentum,
                                                double base_momentum, double max_momentum);
/* LinearLR: lr = base * (start + (end - start) * min(last_epoch, total_iters) / total_iters). */
GPUDL_API gdl_scheduler *gdl_linear_warmup_new(gdl_optimizer *opt, double start_factor, double end_factor,
                                               int total_iters);
/* Linear warm-up then cosine annealing, PyTorch's SequentialLR([LinearLR(start_factor, 1.0, warmup_iters),
   CosineAnnealingLR(T_max, eta_min)], milestones=[warmup_iters]): lr = base * (start + (1 - start) t / warmup)
   for t < warmup_iters, then eta_min + (base - eta_min) (1 + cos(pi (t - warmup_iters) / T_max)) / 2.
   warmup_iters 0: cosine only. For a run of N steps (or epochs), T_max = N - warmup_iters. */
GPUDL_API gdl_scheduler *gdl_warmup_cosine_lr_new(gdl_optimizer *opt, int warmup_iters, double start_factor, int T_max,
                                                  double eta_min);
/* Advances last_epoch by one and sets the groups' lr (OneCycle refuses to pass total_steps). 0 / -1. */
GPUDL_API int gdl_scheduler_step(gdl_scheduler *s);
/* The scheduler's step count, last_epoch (0 after creation; -1 for NULL). */
GPUDL_API int64_t gdl_scheduler_get_last_epoch(const gdl_scheduler *s);
/* Sets last_epoch (for checkpoints) and applies the lr (and momentum) for it. 0 / -1. */
GPUDL_API int gdl_scheduler_set_last_epoch(gdl_scheduler *s, int64_t last_epoch);
/* The lr the scheduler last set for a group (NaN + error if out of range). */
GPUDL_API double gdl_scheduler_get_lr(const gdl_scheduler *s, int group);
/* Frees the scheduler (not the optimizer). NULL: no-op. */
GPUDL_API void gdl_scheduler_free(gdl_scheduler *s);

/* ---- GradScaler (torch.amp.GradScaler; MANUAL: "GradScaler"): the loss scaled before backward, the gradients
   unscaled and checked for inf/NaN, the step skipped and the scale backed off on an overflow, all on the device
   with no host synchronisation ---- */
typedef struct gdl_grad_scaler gdl_grad_scaler;
typedef struct gdl_grad_scaler_opts {
    double init_scale;     /* default 65536 (2^16); > 0 */
    double growth_factor;  /* default 2; > 1 */
    double backoff_factor; /* default 0.5; in (0,1) */
    int growth_interval;   /* default 2000 clean steps before the scale grows; >= 1 */
    int enabled;           /* default 1; 0: scale returns the loss, unscale and update do nothing, step is gdl_step */
} gdl_grad_scaler_opts;
GPUDL_API gdl_grad_scaler_opts gdl_grad_scaler_defaults(void);
/* NULL opts: the defaults. NULL + error on bad options. The scale lives on the device of the first loss scaled. */
GPUDL_API gdl_grad_scaler *gdl_grad_scaler_new(const gdl_grad_scaler_opts *o);
/* loss * scale (differentiable; the scale is read from device memory, nothing is waited for). A temporary. */
GPUDL_API gdl_tensor *gdl_grad_scaler_scale(gdl_grad_scaler *s, gdl_tensor *loss);
/* unscale_: every gradient of opt times (float)(1/(double)scale), and the step's found_inf flag set when one
   was inf or NaN. At most once per optimizer between updates, before gdl_grad_scaler_step. 0 / -1. */
GPUDL_API int gdl_grad_scaler_unscale(gdl_grad_scaler *s, gdl_optimizer *opt);
/* Unscales (if not done yet), then gdl_step, which the optimizer's kernels skip on the device when found_inf is
   set (no parameter, state or step count changes). 0 / -1. */
GPUDL_API int gdl_grad_scaler_step(gdl_grad_scaler *s, gdl_optimizer *opt);
/* _amp_update_scale_: after an overflow scale *= backoff_factor and the tracker restarts; else the tracker
   counts, and at growth_interval scale *= growth_factor (if finite) and the tracker restarts. Clears found_inf
   for the next step. 0 / -1 (also when no optimizer was unscaled or stepped since the last update). */
GPUDL_API int gdl_grad_scaler_update(gdl_grad_scaler *s);
/* The current scale (reads the device: a wait). 1.0 when disabled; NaN + error for NULL. */
GPUDL_API double gdl_grad_scaler_get_scale(gdl_grad_scaler *s);
/* The clean steps counted towards the next growth (reads the device). -1 + error for NULL. */
GPUDL_API int64_t gdl_grad_scaler_get_growth_tracker(gdl_grad_scaler *s);
/* Sets the scale (> 0, finite) and the growth tracker (>= 0), as load_state_dict. 0 / -1. */
GPUDL_API int gdl_grad_scaler_set_state(gdl_grad_scaler *s, double scale, int64_t growth_tracker);
/* Attaches s to opt (NULL detaches) so gdl_checkpoint_save / gdl_checkpoint_load with opt save and restore its
   state ("scaler.scale", "scaler.growth_tracker", the factors and the interval: PyTorch's state_dict); gdl_grad_scaler_unscale attaches it too. An optimizer has
   at most one scaler. 0 / -1. */
GPUDL_API int gdl_optim_set_grad_scaler(gdl_optimizer *opt, gdl_grad_scaler *s);
/* Frees the scaler (detaching it from its optimizers). NULL: no-op. */
GPUDL_API void gdl_grad_scaler_free(gdl_grad_scaler *s);

