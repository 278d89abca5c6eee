/* ---------------------------------------------------------------------------
   src/api/ops.h   Every result is a temporary. NULL + gdl_last_error() on error.
   Float inputs may be f32, bf16 or f16; the result's dtype follows them
   (MANUAL: Dtypes).
   ------------------------------------------------------------------------- */

typedef enum gdl_reduction { GDL_REDUCE_MEAN = 0, GDL_REDUCE_SUM = 1, GDL_REDUCE_NONE = 2 } gdl_reduction;

/* views (share data) */
GPUDL_API gdl_tensor *gdl_reshape(gdl_tensor *x, int ndim, const int64_t *shape); /* one -1 allowed */
GPUDL_API gdl_tensor *gdl_flatten(gdl_tensor *x, int start_dim);
GPUDL_API gdl_tensor *gdl_slice(gdl_tensor *x, int64_t start, int64_t end); /* rows [start,end) of dim 0 */
GPUDL_API gdl_tensor *gdl_detach(gdl_tensor *x);

/* Tensors are contiguous, so what PyTorch makes a strided view is a copy here
   (one strided-copy kernel; the backward adds back through the same
   geometry): permute and transpose, and a slice or select whose elements are
   not one contiguous block. Where the result is contiguous in the input (a
   slice along a dim all of whose outer dims have size 1; a permute moving
   only size-1 dims) it is a view, as gdl_reshape. Any dtype; dims may be
   negative, as in PyTorch. */
GPUDL_API gdl_tensor *gdl_permute(gdl_tensor *x, int ndim, const int *dims);
GPUDL_API gdl_tensor *gdl_transpose(gdl_tensor *x, int dim0, int dim1);
/* x[..., start:start+length, ...] along dim (start may be negative) */
GPUDL_API gdl_tensor *gdl_narrow(gdl_tensor *x, int dim, int64_t start, int64_t length);
/* x[..., start:end:step, ...] along dim, with Python's clamping of start and end (negative ones count from
   the end; step >= 1) */
GPUDL_API gdl_tensor *gdl_slice_dim(gdl_tensor *x, int dim, int64_t start, int64_t end, int64_t step);
/* x[..., index, ...]: dim removed (index may be negative) */
GPUDL_API gdl_tensor *gdl_select(gdl_tensor *x, int dim, int64_t index);
/* pieces of split_size along dim (the last one shorter) / `chunks` pieces of ceil(size/chunks): written to
   out (room for max_out), their count returned (-1 on error); torch.split / torch.chunk */
GPUDL_API int gdl_split(gdl_tensor *x, int64_t split_size, int dim, gdl_tensor **out, int max_out);
GPUDL_API int gdl_chunk(gdl_tensor *x, int chunks, int dim, gdl_tensor **out);
/* n tensors of one shape joined along a new dim (0..ndim); gdl_concat (below) is torch.cat */
GPUDL_API gdl_tensor *gdl_stack(int n, gdl_tensor *const *xs, int dim);

/* indexing: index is i32. index_select: x's slices at index (1-D) along dim; gather: out[i][j][k] =
   x[i][index[i][j][k]][k] for dim 1 (index has x's ndim; index.size(d) <= x.size(d) off dim). Backward
   by scatter-add. The CPU rejects an index out of range; on a GPU such an element reads 0. */
GPUDL_API gdl_tensor *gdl_index_select(gdl_tensor *x, int dim, gdl_tensor *index);
GPUDL_API gdl_tensor *gdl_gather(gdl_tensor *x, int dim, gdl_tensor *index);

/* comparisons with broadcasting: a u8 tensor of 0 / 1 (PyTorch's bool). Any dtypes: two integer tensors
   compare exactly, otherwise both as f32 (an i32 rounded to f32, as PyTorch promotes); NaN is unequal to
   everything. Not differentiable. */
typedef enum gdl_compare_op { GDL_CMP_EQ, GDL_CMP_NE, GDL_CMP_LT, GDL_CMP_LE, GDL_CMP_GT, GDL_CMP_GE } gdl_compare_op;
GPUDL_API gdl_tensor *gdl_compare(gdl_tensor *a, gdl_tensor *b, gdl_compare_op op);
GPUDL_API gdl_tensor *gdl_eq(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_ne(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_lt(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_le(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_gt(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_ge(gdl_tensor *a, gdl_tensor *b);
/* x op value; the value is taken in x's dtype for a float x (x_bf16 == 0.1 compares with bf16(0.1), as
   PyTorch), as i32 for an i32/u8 x when it is an integer of at most 2^24, else as f32 */
GPUDL_API gdl_tensor *gdl_compare_scalar(gdl_tensor *x, gdl_compare_op op, double value);
/* cond (u8, a comparison's result) ? a : b, all three broadcast; the result has a and b's promoted dtype */
GPUDL_API gdl_tensor *gdl_where(gdl_tensor *cond, gdl_tensor *a, gdl_tensor *b);
/* x with value where mask (u8, broadcastable to x's shape) is non-zero */
GPUDL_API gdl_tensor *gdl_masked_fill(gdl_tensor *x, gdl_tensor *mask, double value);
/* the lower / upper triangle of the last two dims (diagonal 0: the main one; > 0 above it), the rest 0 */
GPUDL_API gdl_tensor *gdl_tril(gdl_tensor *x, int64_t diagonal);
GPUDL_API gdl_tensor *gdl_triu(gdl_tensor *x, int64_t diagonal);

/* elementwise, with NumPy broadcasting */
GPUDL_API gdl_tensor *gdl_add(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_sub(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_mul(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_div(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_add_scalar(gdl_tensor *x, double s);
GPUDL_API gdl_tensor *gdl_mul_scalar(gdl_tensor *x, double s);
GPUDL_API gdl_tensor *gdl_pow_scalar(gdl_tensor *x, double p);
GPUDL_API gdl_tensor *gdl_exp(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_log(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_sqrt(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_rsqrt(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_abs(gdl_tensor *x);
/* torch.clamp with scalar bounds: -INFINITY / INFINITY for none (a NaN bound is an error); the gradient
   passes where min <= x <= max. clamp_min / clamp_max: one bound. */
GPUDL_API gdl_tensor *gdl_clamp(gdl_tensor *x, double min, double max);
GPUDL_API gdl_tensor *gdl_clamp_min(gdl_tensor *x, double min);
GPUDL_API gdl_tensor *gdl_clamp_max(gdl_tensor *x, double max);
/* elementwise with broadcasting: torch.minimum / maximum (NaN propagates; a tie sends half the gradient
   each way) and torch.pow of tensors */
GPUDL_API gdl_tensor *gdl_minimum(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_maximum(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_pow(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_relu(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_leaky_relu(gdl_tensor *x, double negative_slope);
GPUDL_API gdl_tensor *gdl_sigmoid(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_tanh(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_gelu(gdl_tensor *x, int tanh_approximation);

/* linear algebra */
/* torch.matmul: [..., M, K] x [..., K, N] with the batch dims broadcast; a 1-D operand is a row (a) or a
   column (b) vector whose dim is removed from the result */
GPUDL_API gdl_tensor *gdl_matmul(gdl_tensor *a, gdl_tensor *b);
GPUDL_API gdl_tensor *gdl_bmm(gdl_tensor *a, gdl_tensor *b); /* [B,M,K] x [B,K,N], no broadcasting */
GPUDL_API gdl_tensor *gdl_linear(gdl_tensor *x, gdl_tensor *weight, gdl_tensor *bias); /* W [out,in]; bias may be NULL */
/* The activation fused into gdl_linear_act / gdl_conv2d_act: GELU_TANH is
   gdl_gelu(x, 1) (the tanh approximation, cuBLASLt's GELU epilogue), GELU
   is gdl_gelu(x, 0) (erf). */
typedef enum gdl_act { GDL_ACT_NONE = 0, GDL_ACT_RELU, GDL_ACT_GELU_TANH, GDL_ACT_GELU } gdl_act;
/* act(linear(x, weight, bias)) as one op: on the CPU the GEMM, then bias and
   activation in one pass over the output (bitwise linear then relu/gelu in
   f32); on CUDA one cublasLtMatmul with a bias/activation epilogue; backward
   one kernel for act' and the bias gradient, then the two GEMMs. */
GPUDL_API gdl_tensor *gdl_linear_act(gdl_tensor *x, gdl_tensor *weight, gdl_tensor *bias, gdl_act act);

/* reductions */
GPUDL_API gdl_tensor *gdl_sum(gdl_tensor *x);  /* all elements -> scalar */
GPUDL_API gdl_tensor *gdl_mean(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_sum_dim(gdl_tensor *x, int dim, int keepdim);
GPUDL_API gdl_tensor *gdl_mean_dim(gdl_tensor *x, int dim, int keepdim);
GPUDL_API gdl_tensor *gdl_max_dim(gdl_tensor *x, int dim, int keepdim);
GPUDL_API gdl_tensor *gdl_min_dim(gdl_tensor *x, int dim, int keepdim);
/* torch.max(x, dim, keepdim) / torch.min(...): *values (differentiable: the gradient goes to each index)
   and *indices (i32 temporaries, not differentiable) of the first maximum / minimum along dim (the first
   NaN where there is one, as PyTorch); either may be NULL (not wanted). 0, or -1 + error with both NULL. */
GPUDL_API int gdl_max_dim_ex(gdl_tensor *x, int dim, int keepdim, gdl_tensor **values, gdl_tensor **indices);
GPUDL_API int gdl_min_dim_ex(gdl_tensor *x, int dim, int keepdim, gdl_tensor **values, gdl_tensor **indices);
GPUDL_API gdl_tensor *gdl_argmax(gdl_tensor *x, int dim); /* i32, not differentiable */
GPUDL_API gdl_tensor *gdl_softmax(gdl_tensor *x, int dim);
GPUDL_API gdl_tensor *gdl_log_softmax(gdl_tensor *x, int dim);
GPUDL_API gdl_tensor *gdl_cumsum(gdl_tensor *x, int dim);

/* images, NCHW */
GPUDL_API gdl_tensor *gdl_conv2d(gdl_tensor *x, gdl_tensor *weight, gdl_tensor *bias,
                                 int stride, int padding, int dilation, int groups);
GPUDL_API gdl_tensor *gdl_conv2d_ex(gdl_tensor *x, gdl_tensor *weight, gdl_tensor *bias,
                                    const int stride[2], const int padding[2],
                                    const int dilation[2], int groups);
/* act(conv2d(...)): bias add and activation in one pass over the convolution's
   output, and their backward (act' and the bias gradient) in one pass too */
GPUDL_API gdl_tensor *gdl_conv2d_act(gdl_tensor *x, gdl_tensor *weight, gdl_tensor *bias,
                                     int stride, int padding, int dilation, int groups, gdl_act act);
GPUDL_API gdl_tensor *gdl_max_pool2d(gdl_tensor *x, int kernel, int stride, int padding);
GPUDL_API gdl_tensor *gdl_avg_pool2d(gdl_tensor *x, int kernel, int stride, int padding); /* count_include_pad */
GPUDL_API gdl_tensor *gdl_global_avg_pool2d(gdl_tensor *x); /* [N,C,H,W] -> [N,C,1,1] */

/* structure */
GPUDL_API gdl_tensor *gdl_concat(int n, gdl_tensor *const *xs, int dim);

/* layers as functions (PyTorch's F.*) */
GPUDL_API gdl_tensor *gdl_dropout(gdl_tensor *x, double p, int training);
/* torch.nn.functional.scaled_dot_product_attention: softmax(scale * q k^T + mask) v over q [..., L, E],
   k [..., S, E], v [..., S, Ev] -> [..., L, Ev]; the batch dims of q, k and v broadcast as in PyTorch.
   attn_mask (may be NULL), broadcastable to [..., L, S]: u8 (PyTorch's bool: non-zero takes part) or
   additive, of q's dtype. is_causal: key j takes part in query i only when j <= i (the top-left aligned
   lower triangle, as PyTorch), and an error with a mask. scale: GDL_SCALE_DEFAULT (NAN) means 1/sqrt(E),
   PyTorch's scale=None; any other value multiplies the scores as given, as PyTorch's: 0 gives uniform
   weights, a negative one is legal. dropout_p
   (in [0,1]) drops attention weights whatever the mode, as PyTorch's: pass 0 in evaluation.
   One fused kernel (online softmax over K/V tiles, flash-attention style) saves only the output and a
   log-sum-exp per query row, so memory grows linearly in L and S; the backward recomputes the weights
   tile by tile. The unfused composition (matmul, mask, softmax, dropout, matmul: L x S weights) runs
   instead when dropout_p > 0, when q, k and v have different batch dims, when E or Ev exceeds 256, or
   for an additive mask that requires a gradient. A query row that no key may attend to (a bool mask row
   all false, an additive one all -inf) gives 0 and no gradient in both paths, as PyTorch's (its math
   path's "safe softmax"), not softmax's NaN. Autocast class LOW, as in PyTorch. */
#define GDL_SCALE_DEFAULT NAN /* the attention ops' scale: 1/sqrt(E) */
GPUDL_API gdl_tensor *gdl_scaled_dot_product_attention(gdl_tensor *q, gdl_tensor *k, gdl_tensor *v, gdl_tensor *attn_mask,
                                                       double dropout_p, int is_causal, double scale);
/* torch.nn.functional.scaled_dot_product_attention(..., enable_gqa): with enable_gqa set, grouped-query attention:
   q [..., Hq, L, E], k [..., Hkv, S, E], v [..., Hkv, S, Ev] with Hq a multiple of Hkv; query head h attends with
   key/value head h / (Hq / Hkv) (PyTorch's repeat_interleave of k and v, without the copies: the fused kernels read
   each key/value head once per group and sum its gradient over the group's query heads). The mask broadcasts
   against [..., Hq, L, S]. enable_gqa 0: gdl_scaled_dot_product_attention. */
GPUDL_API gdl_tensor *gdl_scaled_dot_product_attention_ex(gdl_tensor *q, gdl_tensor *k, gdl_tensor *v,
                                                          gdl_tensor *attn_mask, double dropout_p, int is_causal,
                                                          double scale, int enable_gqa);
/* The same attention over heads packed in the last dim, as Linear layers give them, without the copies of
   splitting and joining heads: q [..., L, H*E], k [..., S, H*E], v [..., S, H*Ev] (head h: columns h*E ...
   of each row; q, k and v with the same batch dims) -> [..., L, H*Ev], the heads joined as an output
   projection reads them. The values and gradients of splitting each into [..., H, L, E] (reshape to
   [..., L, H, E], transpose(-3, -2)), gdl_scaled_dot_product_attention, and joining the result back: the
   mask broadcasts against [..., H, L, S]; scale as there (GDL_SCALE_DEFAULT: 1/sqrt(E)). The fused
   kernels read q, k and v and write the output and the gradients in place, at strides; what they do not
   take (dropout_p > 0, E or Ev over 256, a mask requiring grad) runs the composition above, copies
   included. num_heads >= 1. */
GPUDL_API gdl_tensor *gdl_sdpa_heads(gdl_tensor *q, gdl_tensor *k, gdl_tensor *v, int num_heads, gdl_tensor *attn_mask,
                                     double dropout_p, int is_causal, double scale);
/* gdl_sdpa_heads over one tensor qkv [..., L, 3*H*E] holding q, k and v side by side along the last dim (a
   fused input projection's output: nanoGPT's c_attn, MultiheadAttention's in_proj) -> [..., L, H*E]; the
   gradient lands in qkv's, in place */
GPUDL_API gdl_tensor *gdl_sdpa_qkv(gdl_tensor *qkv, int num_heads, gdl_tensor *attn_mask, double dropout_p, int is_causal,
                                   double scale);
/* x is [N,C] or [N,C,L] (1-D) or [N,C,H,W] (2-D). running_* may be NULL
   (then training statistics are used even in eval). weight/bias may be NULL. */
GPUDL_API gdl_tensor *gdl_batch_norm(gdl_tensor *x, gdl_tensor *running_mean, gdl_tensor *running_var,
                                     gdl_tensor *weight, gdl_tensor *bias, int training,
                                     double momentum, double eps);
/* relu(batch_norm(...)) as one op: the ReLU in the normalisation's pass and its backward in the batch
   norm's (one pass over the activation less each way, no intermediate tensor); bitwise gdl_batch_norm
   then gdl_relu. gdl_nn_sequential runs a BatchNorm followed by a ReLU with it. */
GPUDL_API gdl_tensor *gdl_batch_norm_relu(gdl_tensor *x, gdl_tensor *running_mean, gdl_tensor *running_var,
                                          gdl_tensor *weight, gdl_tensor *bias, int training, double momentum,
                                          double eps);
/* act(batch_norm(...)) as one op, act GDL_ACT_NONE (gdl_batch_norm), GDL_ACT_RELU (gdl_batch_norm_relu)
   or GDL_ACT_GELU (erf GELU, gdl_gelu(y, 0)); another act is an error. The GELU runs in the
   normalisation's pass and its derivative in the batch norm's backward passes; the op keeps GELU's input
   (f32, one value per element of x, as gdl_gelu keeps its input). In f32 bitwise gdl_batch_norm then
   gdl_gelu (the CPU and the GPU, each against its own two ops). bf16 / f16 x: as gdl_batch_norm_relu, the
   f32 value goes through the GELU before the one rounding (the two ops round twice). gdl_nn_sequential
   runs a BatchNorm followed by an erf GELU with it. */
GPUDL_API gdl_tensor *gdl_batch_norm_act(gdl_tensor *x, gdl_tensor *running_mean, gdl_tensor *running_var,
                                         gdl_tensor *weight, gdl_tensor *bias, int training, double momentum,
                                         double eps, gdl_act act);
/* normalises over the last dim (size D = weight's numel when given) */
GPUDL_API gdl_tensor *gdl_layer_norm(gdl_tensor *x, gdl_tensor *weight, gdl_tensor *bias, double eps);
GPUDL_API gdl_tensor *gdl_embedding(gdl_tensor *indices, gdl_tensor *weight); /* i32 [...] -> [...,D] */
/* F.embedding's options; start from gdl_embedding_defaults() (no padding row, no max_norm, norm_type 2). */
#define GDL_NO_PADDING_IDX INT64_MIN
typedef struct gdl_embedding_opts {
    int64_t padding_idx; /* GDL_NO_PADDING_IDX (PyTorch's None), or a row in [-V, V) (negative: from the
                            end): that row gets no gradient from the lookup */
    double max_norm;     /* 0 (None), or > 0: every row looked up whose norm exceeds it is first scaled in
                            place (the weight itself, outside autograd) to max_norm / (norm + 1e-7) times */
    double norm_type;    /* the p of the norm, > 0 (INFINITY: the largest |w|); default 2 */
} gdl_embedding_opts;
GPUDL_API gdl_embedding_opts gdl_embedding_defaults(void);
GPUDL_API gdl_tensor *gdl_embedding_ex(gdl_tensor *indices, gdl_tensor *weight, const gdl_embedding_opts *opts);
/* One time step of a recurrent layer's gates (what gdl_nn_lstm / gdl_nn_gru run per step), one op:
   gx = x W_ih^T + b_ih and gh = h W_hh^T + b_hh, both [B, G*H] in PyTorch's gate order.
   lstm_gates (G = 4: i, f, g, o): c' = f*c_prev + i*g, h' = o*tanh(c'), returned stacked as [2, B, H]
   (gdl_select(out, 0, 0) is h', gdl_select(out, 0, 1) is c': views).
   gru_gates (G = 3: r, z, n): n = tanh(gx_n + r*gh_n), h' = (1-z)*n + z*h_prev, returned [B, H]. */
GPUDL_API gdl_tensor *gdl_lstm_gates(gdl_tensor *gx, gdl_tensor *gh, gdl_tensor *c_prev);
GPUDL_API gdl_tensor *gdl_gru_gates(gdl_tensor *gx, gdl_tensor *gh, gdl_tensor *h_prev);

/* losses */
typedef struct gdl_ce_opts {
    gdl_reduction reduction; /* default mean */
    int ignore_index;        /* default -100 */
    double label_smoothing;  /* default 0 */
    gdl_tensor *weight;      /* default NULL; a float [C] rescaling each class, as PyTorch's weight: the
                                mean of class-index targets is then over the targets' weights */
} gdl_ce_opts;
GPUDL_API gdl_ce_opts gdl_ce_defaults(void);
/* targets: class indices i32 [B], or class probabilities [B,C] (float, as PyTorch takes them: mixup/cutmix's
   soft targets; ignore_index does not apply, label smoothing does, the mean is over B). As PyTorch, logits
   may be [B, C, d1, ...] with i32 targets [B, d1, ...] (or probabilities of the logits' shape): the mean
   is over every position, the reduction none gives [B, d1, ...]. gdl_nll_loss takes those shapes too. */
GPUDL_API gdl_tensor *gdl_cross_entropy(gdl_tensor *logits, gdl_tensor *targets);
GPUDL_API gdl_tensor *gdl_cross_entropy_ex(gdl_tensor *logits, gdl_tensor *targets, const gdl_ce_opts *opts);
GPUDL_API gdl_tensor *gdl_nll_loss(gdl_tensor *log_probs, gdl_tensor *targets, gdl_reduction r, int ignore_index);
GPUDL_API gdl_tensor *gdl_mse_loss(gdl_tensor *input, gdl_tensor *target, gdl_reduction r);
GPUDL_API gdl_tensor *gdl_bce_with_logits(gdl_tensor *input, gdl_tensor *target, gdl_reduction r);

