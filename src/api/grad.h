/* ---------------------------------------------------------------------------
   src/api/grad.h — autograd, no-grad mode, the per-step arena, anomaly mode,
   autocast, and GDL_OP_LIST (the one list of ops).
   ------------------------------------------------------------------------- */

GPUDL_API int gdl_set_requires_grad(gdl_tensor *t, int on); /* float leaves only */
GPUDL_API int gdl_backward(gdl_tensor *loss);              /* loss: one element */
/* Called by gdl_backward for every leaf that requires grad as soon as its gradient is complete
   (after the last op of the walk that adds to it), while the rest of backward still runs: the
   signal a bucketed all-reduce starts on (gdl_ddp). NULL removes it. Per thread. */
typedef void (*gdl_grad_ready_fn)(gdl_tensor *leaf, void *user);
GPUDL_API void gdl_set_grad_ready_hook(gdl_grad_ready_fn fn, void *user);
GPUDL_API int gdl_backward_grad(gdl_tensor *t, const gdl_tensor *grad); /* t.backward(grad) */
GPUDL_API int gdl_zero_grad_tensor(gdl_tensor *t);
GPUDL_API int gdl_sgd_update_(gdl_tensor *param, double lr); /* p -= lr*grad, no grad */
GPUDL_API int gdl_set_grad_enabled(int on);                  /* this thread's; returns the previous mode */
GPUDL_API int gdl_is_grad_enabled(void);

/* Per-step arena of temporaries, and the tape: the calling thread's (each thread has its own). */
GPUDL_API void gdl_arena_reset(void);
GPUDL_API size_t gdl_arena_used(void);     /* bytes handed out since the reset */
GPUDL_API size_t gdl_arena_reserved(void); /* bytes held */
GPUDL_API void gdl_shutdown(void); /* frees this thread's arenas, the backends' caches and the last profile */
/* Frees the calling thread's arenas (its temporaries die): a thread that ran ops, other than the one that
   calls gdl_shutdown, calls it before it ends, or its arenas stay held until the process exits. */
GPUDL_API void gdl_thread_cleanup(void);

/* The op list: every op the autograd tape records, one line each, as
   X(ID, name, backward function, backend kernel code, autocast class).
   It makes the gdl_op enum (GDL_OP_ID), gdl_op_name, the op table with each
   op's backward (the functions gdl__bw_* in src/ops/) and the autocast
   class (torch.autocast's CUDA lists: matmul, linear, conv and attention run in the low
   dtype; softmax, losses, layer norm, sum, cumsum, exp, log, rsqrt and pow
   in f32; every other op in its inputs' widest dtype). The manual says how to add an op. */
#define GDL_OP_LIST(X) \
    X(RESHAPE, "reshape", gdl__bw_view, 0, GDL_AUTOCAST_PROMOTE) \
    X(SLICE, "slice", gdl__bw_view, 0, GDL_AUTOCAST_PROMOTE) \
    X(ADD, "add", gdl__bw_binary, GDL_BIN_ADD, GDL_AUTOCAST_PROMOTE) \
    X(SUB, "sub", gdl__bw_binary, GDL_BIN_SUB, GDL_AUTOCAST_PROMOTE) \
    X(MUL, "mul", gdl__bw_binary, GDL_BIN_MUL, GDL_AUTOCAST_PROMOTE) \
    X(DIV, "div", gdl__bw_binary, GDL_BIN_DIV, GDL_AUTOCAST_PROMOTE) \
    X(ADD_SCALAR, "add_scalar", gdl__bw_unary, GDL_UN_ADD_SCALAR, GDL_AUTOCAST_PROMOTE) \
    X(MUL_SCALAR, "mul_scalar", gdl__bw_unary, GDL_UN_SCALE, GDL_AUTOCAST_PROMOTE) \
    X(POW_SCALAR, "pow_scalar", gdl__bw_unary, GDL_UN_POW, GDL_AUTOCAST_F32) \
    X(EXP, "exp", gdl__bw_unary, GDL_UN_EXP, GDL_AUTOCAST_F32) \
    X(LOG, "log", gdl__bw_unary, GDL_UN_LOG, GDL_AUTOCAST_F32) \
    X(RELU, "relu", gdl__bw_unary, GDL_UN_RELU, GDL_AUTOCAST_PROMOTE) \
    X(LEAKY_RELU, "leaky_relu", gdl__bw_unary, GDL_UN_LEAKY_RELU, GDL_AUTOCAST_PROMOTE) \
    X(SIGMOID, "sigmoid", gdl__bw_unary, GDL_UN_SIGMOID, GDL_AUTOCAST_PROMOTE) \
    X(TANH, "tanh", gdl__bw_unary, GDL_UN_TANH, GDL_AUTOCAST_PROMOTE) \
    X(GELU, "gelu", gdl__bw_unary, GDL_UN_GELU_ERF, GDL_AUTOCAST_PROMOTE) \
    X(GELU_TANH, "gelu_tanh", gdl__bw_unary, GDL_UN_GELU_TANH, GDL_AUTOCAST_PROMOTE) \
    X(MATMUL, "matmul", gdl__bw_matmul, 0, GDL_AUTOCAST_LOW) \
    X(LINEAR, "linear", gdl__bw_linear, 0, GDL_AUTOCAST_LOW) \
    X(LINEAR_ACT, "linear_act", gdl__bw_linear_act, 0, GDL_AUTOCAST_LOW) \
    X(SUM, "sum", gdl__bw_reduce, GDL_RED_SUM, GDL_AUTOCAST_F32) \
    X(MEAN, "mean", gdl__bw_reduce, GDL_RED_MEAN, GDL_AUTOCAST_PROMOTE) \
    X(MAX, "max", gdl__bw_reduce, GDL_RED_MAX, GDL_AUTOCAST_PROMOTE) \
    X(MIN, "min", gdl__bw_reduce, GDL_RED_MIN, GDL_AUTOCAST_PROMOTE) \
    X(SOFTMAX, "softmax", gdl__bw_softmax, 0, GDL_AUTOCAST_F32) \
    X(LOG_SOFTMAX, "log_softmax", gdl__bw_softmax, 0, GDL_AUTOCAST_F32) \
    X(CONV2D, "conv2d", gdl__bw_conv2d, 0, GDL_AUTOCAST_LOW) \
    X(CONV2D_ACT, "conv2d_act", gdl__bw_conv2d, 0, GDL_AUTOCAST_LOW) \
    X(MAX_POOL2D, "max_pool2d", gdl__bw_pool, 0, GDL_AUTOCAST_PROMOTE) \
    X(AVG_POOL2D, "avg_pool2d", gdl__bw_pool, 0, GDL_AUTOCAST_PROMOTE) \
    X(GLOBAL_AVG_POOL2D, "global_avg_pool2d", gdl__bw_reduce, GDL_RED_MEAN, GDL_AUTOCAST_PROMOTE) \
    X(CONCAT, "concat", gdl__bw_concat, 0, GDL_AUTOCAST_PROMOTE) \
    X(SQRT, "sqrt", gdl__bw_unary, GDL_UN_SQRT, GDL_AUTOCAST_PROMOTE) \
    X(RSQRT, "rsqrt", gdl__bw_unary, GDL_UN_RSQRT, GDL_AUTOCAST_F32) \
    X(ABS, "abs", gdl__bw_unary, GDL_UN_ABS, GDL_AUTOCAST_PROMOTE) \
    X(CLAMP_MIN, "clamp_min", gdl__bw_unary, GDL_UN_CLAMP_MIN, GDL_AUTOCAST_PROMOTE) \
    X(CLAMP_MAX, "clamp_max", gdl__bw_unary, GDL_UN_CLAMP_MAX, GDL_AUTOCAST_PROMOTE) \
    X(MINIMUM, "minimum", gdl__bw_binary, GDL_BIN_MIN, GDL_AUTOCAST_PROMOTE) \
    X(MAXIMUM, "maximum", gdl__bw_binary, GDL_BIN_MAX, GDL_AUTOCAST_PROMOTE) \
    X(POW, "pow", gdl__bw_binary, GDL_BIN_POW, GDL_AUTOCAST_F32) \
    X(PERMUTE, "permute", gdl__bw_strided, 0, GDL_AUTOCAST_PROMOTE) \
    X(NARROW, "narrow", gdl__bw_strided, 0, GDL_AUTOCAST_PROMOTE) \
    X(INDEX_SELECT, "index_select", gdl__bw_gather, 0, GDL_AUTOCAST_PROMOTE) \
    X(GATHER, "gather", gdl__bw_gather, 0, GDL_AUTOCAST_PROMOTE) \
    X(WHERE, "where", gdl__bw_where, 0, GDL_AUTOCAST_PROMOTE) \
    X(MASKED_FILL, "masked_fill", gdl__bw_where, 0, GDL_AUTOCAST_PROMOTE) \
    X(TRIL, "tril", gdl__bw_tri, 0, GDL_AUTOCAST_PROMOTE) \
    X(TRIU, "triu", gdl__bw_tri, 0, GDL_AUTOCAST_PROMOTE) \
    X(CUMSUM, "cumsum", gdl__bw_cumsum, 0, GDL_AUTOCAST_F32) \
    X(DROPOUT, "dropout", gdl__bw_dropout, 0, GDL_AUTOCAST_PROMOTE) \
    X(SDPA, "scaled_dot_product_attention", gdl__bw_sdpa, 0, GDL_AUTOCAST_LOW) \
    X(BATCH_NORM, "batch_norm", gdl__bw_batch_norm, 0, GDL_AUTOCAST_PROMOTE) \
    X(BATCH_NORM_RELU, "batch_norm_relu", gdl__bw_batch_norm, 0, GDL_AUTOCAST_PROMOTE) \
    X(BATCH_NORM_GELU, "batch_norm_gelu", gdl__bw_batch_norm, 0, GDL_AUTOCAST_PROMOTE) \
    X(LAYER_NORM, "layer_norm", gdl__bw_layer_norm, 0, GDL_AUTOCAST_F32) \
    X(EMBEDDING, "embedding", gdl__bw_embedding, 0, GDL_AUTOCAST_PROMOTE) \
    X(CROSS_ENTROPY, "cross_entropy", gdl__bw_xent, 0, GDL_AUTOCAST_F32) \
    X(NLL_LOSS, "nll_loss", gdl__bw_xent, 0, GDL_AUTOCAST_F32) \
    X(MSE, "mse_loss", gdl__bw_pointwise_loss, 0, GDL_AUTOCAST_F32) \
    X(BCE_WITH_LOGITS, "bce_with_logits", gdl__bw_pointwise_loss, 0, GDL_AUTOCAST_F32) \
    X(TO, "to", gdl__bw_to, 0, GDL_AUTOCAST_PROMOTE) \
    X(CAST, "cast", gdl__bw_cast, 0, GDL_AUTOCAST_PROMOTE) \
    X(LSTM_GATES, "lstm_gates", gdl__bw_lstm_gates, 0, GDL_AUTOCAST_PROMOTE) \
    X(GRU_GATES, "gru_gates", gdl__bw_gru_gates, 0, GDL_AUTOCAST_PROMOTE)

typedef enum gdl_autocast_class {
    GDL_AUTOCAST_PROMOTE = 0, /* the inputs' widest floating dtype */
    GDL_AUTOCAST_LOW,         /* the autocast dtype (bf16 / f16), accumulating in f32 */
    GDL_AUTOCAST_F32          /* f32 */
} gdl_autocast_class;

#define GDL__OP_ENUM(id, name, backward, kernel, autocast) GDL_OP_##id,
typedef enum gdl_op { GDL_OP_LIST(GDL__OP_ENUM) GDL_OP_COUNT } gdl_op;
#undef GDL__OP_ENUM
GPUDL_API const char *gdl_op_name(int op);
GPUDL_API int gdl_op_autocast_class(int op); /* gdl_autocast_class; -1 for an invalid op */

/* Autocast (MANUAL: Mixed precision), torch.autocast's regions: per host
   thread, nestable (gdl_autocast_end restores the enclosing region's state). */
GPUDL_API int gdl_autocast_begin(gdl_dtype dt); /* GDL_BF16 or GDL_F16; -1 + error otherwise */
GPUDL_API int gdl_autocast_end(void);           /* -1 + error without an open region */
GPUDL_API int gdl_autocast_enabled(void);       /* 1 inside a region on this thread */
GPUDL_API gdl_dtype gdl_autocast_dtype(void);   /* the region's dtype; GDL_F32 outside */
/* this thread's counts since it started: casts autocast made, and casts of parameters taken from its cache */
GPUDL_API void gdl_autocast_stats(int64_t *casts, int64_t *cache_hits);
GPUDL_API int gdl_tensor_op(const gdl_tensor *t); /* the op that made t, -1 for a leaf */

/* Anomaly mode: every op checks its outputs (forward and backward) and
   fails with "gdl_<op>: produced NaN/Inf ..." at the first non-finite. Per thread. */
GPUDL_API void gdl_set_anomaly_mode(int on);

