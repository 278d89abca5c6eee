/* ---------------------------------------------------------------------------
   [api-ops]   Every result is a temporary. NULL + gdl_last_error() on error.
   Float inputs may be f32, bf16 or f16; the result's dtype follows them
   (MANUAL: Dtypes).
   ------------------------------------------------------------------------- */

typedef enum gdl_reduction { GDL_REDUCE_MEAN = 0, GDL_REDUCE_SUM = 1, GDL_REDUCE_NONE = 2 } gdl_reduction;

/* views (share data) */
GPUDL_API gdl_tensor *gdl_reshape(gdl_tensor *x, int ndim, const int64_t *shape); /* one -1 allowed */
GPUDL_API gdl_tensor *gdl_flatten(gdl_tensor *x, int start_dim);
GPUDL_API gdl_tensor *gdl_slice(gdl_tensor *x, int64_t start, int64_t end); /* rows [start,end) of dim 0 */
GPUDL_API gdl_tensor *gdl_detach(gdl_tensor *x);

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
GPUDL_API gdl_tensor *gdl_relu(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_leaky_relu(gdl_tensor *x, double negative_slope);
GPUDL_API gdl_tensor *gdl_sigmoid(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_tanh(gdl_tensor *x);
GPUDL_API gdl_tensor *gdl_gelu(gdl_tensor *x, int tanh_approximation);

/* linear algebra */
GPUDL_API gdl_tensor *gdl_matmul(gdl_tensor *a, gdl_tensor *b); /* [M,K]x[K,N], [B,M,K]x[B,K,N] or x[K,N] */
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
GPUDL_API gdl_tensor *gdl_argmax(gdl_tensor *x, int dim); /* i32, not differentiable */
GPUDL_API gdl_tensor *gdl_softmax(gdl_tensor *x, int dim);
GPUDL_API gdl_tensor *gdl_log_softmax(gdl_tensor *x, int dim);

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
/* x is [N,C] or [N,C,L] (1-D) or [N,C,H,W] (2-D). running_* may be NULL
   (then training statistics are used even in eval). weight/bias may be NULL. */
GPUDL_API gdl_tensor *gdl_batch_norm(gdl_tensor *x, gdl_tensor *running_mean, gdl_tensor *running_var,
                                     gdl_tensor *weight, gdl_tensor *bias, int training,
                                     double momentum, double eps);
/* normalises over the last dim (size D = weight's numel when given) */
GPUDL_API gdl_tensor *gdl_layer_norm(gdl_tensor *x, gdl_tensor *weight, gdl_tensor *bias, double eps);
GPUDL_API gdl_tensor *gdl_embedding(gdl_tensor *indices, gdl_tensor *weight); /* i32 [...] -> [...,D] */

/* losses */
typedef struct gdl_ce_opts {
    gdl_reduction reduction; /* default mean */
    int ignore_index;        /* default -100 */
    double label_smoothing;  /* default 0 */
} gdl_ce_opts;
GPUDL_API gdl_ce_opts gdl_ce_defaults(void);
GPUDL_API gdl_tensor *gdl_cross_entropy(gdl_tensor *logits, gdl_tensor *targets); /* [B,C], i32 [B] */
GPUDL_API gdl_tensor *gdl_cross_entropy_ex(gdl_tensor *logits, gdl_tensor *targets, const gdl_ce_opts *opts);
GPUDL_API gdl_tensor *gdl_nll_loss(gdl_tensor *log_probs, gdl_tensor *targets, gdl_reduction r, int ignore_index);
GPUDL_API gdl_tensor *gdl_mse_loss(gdl_tensor *input, gdl_tensor *target, gdl_reduction r);
GPUDL_API gdl_tensor *gdl_bce_with_logits(gdl_tensor *input, gdl_tensor *target, gdl_reduction r);

