/* gpudl.h — train neural networks in C on the CPU and on NVIDIA GPUs, the way
   a PyTorch user does. Single header, public domain-style (MIT, see the end).

   ===========================================================================
   MANUAL
   ===========================================================================

   Build
   -----
   In exactly ONE .c file, after any other include of gpudl.h:

       #define GPUDL_IMPLEMENTATION
       #include "gpudl.h"

       cc -O2 -march=native -fopenmp my_net.c -lm -o my_net          (CPU)
       nvcc -O3 -arch=sm_90 -DGPUDL_CUDA my_net.c gpudl_cuda.cu \
            -lcublas -o my_net                                      (CUDA)

   A training step, as in PyTorch
   ------------------------------
       gdl_tensor *W = gdl_randn(GDL_DIMS(10, 784), gdl_cpu());
       gdl_mul_scalar_(W, 0.01); gdl_set_requires_grad(W, 1);
       for (int step = 0; step < 100; step++) {
           gdl_arena_reset();                 // temporaries of the last step go
           gdl_zero_grad_tensor(W);
           gdl_tensor *logits = gdl_linear(x, W, NULL);
           gdl_tensor *loss   = gdl_cross_entropy(logits, y);
           if (!loss || gdl_backward(loss) < 0) {
               fprintf(stderr, "%s\n", gdl_last_error()); break;
           }
           gdl_sgd_update_(W, 0.1);           // or an optimizer (gdl_step)
       }

   Memory model
   ------------
   * Factory functions (gdl_empty, gdl_zeros, gdl_randn, gdl_from_array, ...)
     return PERSISTENT tensors: they live until gdl_free().
   * Every op result (gdl_add, gdl_matmul, ...) is a TEMPORARY allocated in
     the per-step arena. gdl_arena_reset() releases all temporaries at once
     and keeps the memory, so a steady-state step allocates nothing and gets
     the same addresses as the step before. gdl_free() on a temporary is a
     no-op. Keep a temporary across steps with gdl_clone() (persistent copy).
   * Gradients of persistent tensors are persistent; gradients of
     temporaries are temporaries.
   * The op layer is single-threaded: call ops from one thread at a time.

   Errors
   ------
   Functions return NULL (tensors) or a negative code (int). gdl_last_error()
   returns a thread-local message naming the op, shapes, dtypes and devices:
       "gdl_matmul: inner dimensions differ: [64,784] x [128,10]"
   Failed calls leave their inputs untouched. The library never exits.

   Table of contents (search for the tag)
   -----------------
   [types]      dtypes, devices, the tensor struct
   [api-tensor] creation, copies, printing, dtype conversion
   [api-ops]    the differentiable ops
   [api-grad]   autograd, no-grad mode, arena, anomaly mode
   [backend]    the backend interface (a table of kernels) for gpudl_cuda.cu
   [impl-*]     the implementation: errors, memory, tensors, CPU kernels,
                op table, ops, autograd

   Compile-time options
   --------------------
   GPUDL_STATIC           make every function static
   GPUDL_MALLOC/REALLOC/FREE  override the allocator (define all three or none)
   GPUDL_ASSERT(x)        override assert()
   GPUDL_CUDA             enable the CUDA backend (link gpudl_cuda.cu)
   GPUDL_CBLAS            route the CPU GEMM to cblas_sgemm (link -lopenblas)
   GPUDL_DOUBLE           compute in double precision on the CPU: the dtype
                          GDL_F32 then holds doubles. Used by the gradient
                          check tests; not for CUDA builds.
   -fopenmp               multi-threaded CPU kernels
*/
#ifndef GPUDL_H
#define GPUDL_H

#define GPUDL_VERSION_MAJOR 0
#define GPUDL_VERSION_MINOR 1
#define GPUDL_VERSION_PATCH 0
#define GPUDL_VERSION "0.1.0"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef GPUDL_STATIC
#define GPUDL_API static
#else
#define GPUDL_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
   [types]
   ------------------------------------------------------------------------- */

#ifdef GPUDL_DOUBLE
typedef double gdl_real;   /* the compute type behind GDL_F32 */
#else
typedef float gdl_real;
#endif

typedef enum gdl_dtype {
    GDL_F32 = 0, /* compute type (gdl_real) */
    GDL_I32,     /* labels, indices */
    GDL_U8,      /* raw pixels */
    GDL_F16,     /* storage only: IEEE half */
    GDL_BF16,    /* storage only: bfloat16 */
    GDL_DTYPE_COUNT
} gdl_dtype;

typedef enum gdl_device_type { GDL_DEVICE_CPU = 0, GDL_DEVICE_CUDA = 1 } gdl_device_type;

typedef struct gdl_device {
    int type;  /* gdl_device_type */
    int index; /* GPU ordinal; 0 for the CPU */
} gdl_device;

#define GDL_MAX_DIMS 6

typedef struct gdl_tensor gdl_tensor;
struct gdl_node;

/* Read the fields; change them only through the API. */
struct gdl_tensor {
    gdl_dtype dtype;
    gdl_device device;
    int ndim;                     /* 0 for a scalar */
    int64_t shape[GDL_MAX_DIMS];
    int64_t numel;
    void *data;                   /* contiguous, row-major, on `device` */
    gdl_tensor *grad;             /* filled by gdl_backward */
    int requires_grad;
    /* private */
    unsigned flags;               /* GDL__T_* */
    struct gdl_node *node;        /* the op that made it, NULL for leaves */
    const char *name;             /* optional, for messages and checkpoints */
};

/* GDL_DIMS(2, 3) expands to the (ndim, shape) argument pair (C only). */
#ifndef __cplusplus
#define GDL_DIMS(...) \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}
#endif

/* ---------------------------------------------------------------------------
   [api-tensor]
   ------------------------------------------------------------------------- */

GPUDL_API const char *gdl_last_error(void);
GPUDL_API void gdl_clear_error(void);
GPUDL_API const char *gdl_version(void);

GPUDL_API const char *gdl_dtype_name(gdl_dtype dt);
GPUDL_API size_t gdl_dtype_size(gdl_dtype dt); /* 0 for an invalid dtype */

GPUDL_API gdl_device gdl_cpu(void);
GPUDL_API gdl_device gdl_cuda(int index);
GPUDL_API int gdl_cuda_is_available(void);
GPUDL_API int gdl_cuda_device_count(void);
GPUDL_API gdl_device gdl_default_device(void); /* cuda:0 if available, else cpu */
GPUDL_API int gdl_device_equal(gdl_device a, gdl_device b);
GPUDL_API const char *gdl_device_str(gdl_device d); /* "cpu", "cuda:0" (static) */

/* Persistent tensors (free with gdl_free). */
GPUDL_API gdl_tensor *gdl_empty(int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev);
GPUDL_API gdl_tensor *gdl_zeros(int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev);
GPUDL_API gdl_tensor *gdl_ones(int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev);
GPUDL_API gdl_tensor *gdl_full(int ndim, const int64_t *shape, double value, gdl_dtype dt, gdl_device dev);
/* Copies `data` (host memory holding numel elements of dtype dt). */
GPUDL_API gdl_tensor *gdl_from_array(const void *data, int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev);
GPUDL_API gdl_tensor *gdl_arange(int64_t n, gdl_dtype dt, gdl_device dev); /* 0..n-1 */
GPUDL_API gdl_tensor *gdl_rand(int ndim, const int64_t *shape, gdl_device dev);  /* U[0,1), f32 */
GPUDL_API gdl_tensor *gdl_randn(int ndim, const int64_t *shape, gdl_device dev); /* N(0,1), f32 */
GPUDL_API gdl_tensor *gdl_uniform(int ndim, const int64_t *shape, double lo, double hi, gdl_device dev);
GPUDL_API void gdl_free(gdl_tensor *t); /* NULL and temporaries: no-op */

/* The global generator: counter-based, same seed gives the same numbers. */
GPUDL_API void gdl_manual_seed(uint64_t seed);
GPUDL_API uint64_t gdl_rng_get_state(uint64_t *counter); /* returns seed */
GPUDL_API void gdl_rng_set_state(uint64_t seed, uint64_t counter);
GPUDL_API uint64_t gdl_rng_next_u64(void);
GPUDL_API double gdl_rng_uniform(void); /* [0,1) */

/* Copies and conversions. gdl_to keeps the lifetime kind of its source:
   a persistent source gives a persistent result. */
GPUDL_API gdl_tensor *gdl_to(gdl_tensor *t, gdl_device dev);
GPUDL_API gdl_tensor *gdl_to_dtype(gdl_tensor *t, gdl_dtype dt);  /* temporary, no grad */
GPUDL_API gdl_tensor *gdl_clone(const gdl_tensor *t);            /* persistent, no grad */
GPUDL_API int gdl_copy_(gdl_tensor *dst, const gdl_tensor *src); /* same shape & dtype, any devices */
GPUDL_API int gdl_fill_(gdl_tensor *t, double value);
GPUDL_API int gdl_mul_scalar_(gdl_tensor *t, double s);          /* in place, no grad */
GPUDL_API int gdl_copy_to_host(const gdl_tensor *t, void *dst, size_t bytes);
GPUDL_API double gdl_item(const gdl_tensor *t); /* one element; NaN + error otherwise */
GPUDL_API int gdl_print(const gdl_tensor *t, FILE *f);
GPUDL_API const char *gdl_shape_str(const gdl_tensor *t); /* "[64,784]" (thread-local ring) */
GPUDL_API int gdl_same_shape(const gdl_tensor *a, const gdl_tensor *b);

/* Half-precision storage types, round to nearest even. */
GPUDL_API uint16_t gdl_f32_to_f16(float x);
GPUDL_API float gdl_f16_to_f32(uint16_t h);
GPUDL_API uint16_t gdl_f32_to_bf16(float x);
GPUDL_API float gdl_bf16_to_f32(uint16_t h);

/* Row-major GEMM on host memory: C = alpha*op(A)*op(B) + beta*C,
   op(A) is MxK, op(B) is KxN. The built-in blocked kernel (or CBLAS). */
GPUDL_API void gdl_gemm_cpu(int transA, int transB, int M, int N, int K, gdl_real alpha,
                            const gdl_real *A, int lda, const gdl_real *B, int ldb,
                            gdl_real beta, gdl_real *C, int ldc);

/* ---------------------------------------------------------------------------
   [api-ops]   Every result is a temporary. NULL + gdl_last_error() on error.
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

/* ---------------------------------------------------------------------------
   [api-grad]
   ------------------------------------------------------------------------- */

GPUDL_API int gdl_set_requires_grad(gdl_tensor *t, int on); /* float leaves only */
GPUDL_API int gdl_backward(gdl_tensor *loss);              /* loss: one element */
GPUDL_API int gdl_backward_grad(gdl_tensor *t, const gdl_tensor *grad); /* t.backward(grad) */
GPUDL_API int gdl_zero_grad_tensor(gdl_tensor *t);
GPUDL_API int gdl_sgd_update_(gdl_tensor *param, double lr); /* p -= lr*grad, no grad */
GPUDL_API int gdl_set_grad_enabled(int on);                  /* returns the previous mode */
GPUDL_API int gdl_is_grad_enabled(void);

/* Per-step arena of temporaries. */
GPUDL_API void gdl_arena_reset(void);
GPUDL_API size_t gdl_arena_used(void);     /* bytes handed out since the reset */
GPUDL_API size_t gdl_arena_reserved(void); /* bytes held */
GPUDL_API void gdl_shutdown(void);         /* frees the arenas and backends' caches */

/* Anomaly mode: every op checks its outputs (forward and backward) and
   fails with "gdl_<op>: produced NaN/Inf ..." at the first non-finite. */
GPUDL_API void gdl_set_anomaly_mode(int on);

/* ---------------------------------------------------------------------------
   [backend]   A backend is a table of kernels on raw device pointers.
   The CPU backend lives in this header; gpudl_cuda.cu provides the CUDA one
   through gdl_cuda_backend(). Kernels return 0, or -1 after gdl__set_error.
   All gdl_real pointers are contiguous row-major device memory. "+=" in a
   comment means the kernel accumulates into its output (gradients).
   ------------------------------------------------------------------------- */

enum gdl_binary_op { GDL_BIN_ADD, GDL_BIN_SUB, GDL_BIN_MUL, GDL_BIN_DIV };
enum gdl_unary_op {
    GDL_UN_RELU, GDL_UN_LEAKY_RELU, GDL_UN_SIGMOID, GDL_UN_TANH, GDL_UN_GELU_ERF,
    GDL_UN_GELU_TANH, GDL_UN_EXP, GDL_UN_LOG, GDL_UN_SCALE, GDL_UN_ADD_SCALAR,
    GDL_UN_POW
};
enum gdl_reduce_op { GDL_RED_SUM, GDL_RED_MEAN, GDL_RED_MAX };
enum gdl_pointwise_loss { GDL_LOSS_MSE, GDL_LOSS_BCE_LOGITS };

/* geometry of a 2-D convolution or pooling window */
typedef struct gdl_conv_geom {
    int N, C, H, W;        /* input */
    int KH, KW;            /* window */
    int SH, SW, PH, PW, DH, DW;
    int OH, OW;            /* output */
} gdl_conv_geom;

typedef struct gdl_backend {
    const char *name;
    /* memory, on the current device */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    /* copies between host and device or within a device; kind: 0 h2d, 1 d2h, 2 d2d */
    int (*copy)(void *dst, const void *src, size_t bytes, int kind);
    int (*memset0)(void *p, size_t bytes);
    int (*synchronize)(void);

    int (*fill)(gdl_real *x, int64_t n, gdl_real v);
    int (*cast)(void *dst, gdl_dtype dt, const void *src, gdl_dtype st, int64_t n);
    /* C[b] = alpha*op(A[b])*op(B[b]) + beta*C[b], row-major, b < batch,
       element strides sA, sB, sC between batches (0 repeats a matrix) */
    int (*gemm)(int ta, int tb, int M, int N, int K, gdl_real alpha,
                const gdl_real *A, int lda, int64_t sA, const gdl_real *B, int ldb, int64_t sB,
                gdl_real beta, gdl_real *C, int ldc, int64_t sC, int batch);
    /* out[i] = a[i·astr] op b[i·bstr] over `shape` (ndim dims, out contiguous;
       a stride of 0 broadcasts) */
    int (*binary)(int op, int ndim, const int64_t *shape, const gdl_real *a, const int64_t *astr,
                  const gdl_real *b, const int64_t *bstr, gdl_real *out);
    /* dst[i·dstr] += alpha*src[i] over `shape` (src contiguous): sums broadcast dims */
    int (*sum_to)(int ndim, const int64_t *shape, const gdl_real *src, gdl_real *dst,
                  const int64_t *dstr, gdl_real alpha);
    /* y = f(x; alpha) ; gx += f'(x)·gy (y is the forward output) */
    int (*unary)(int op, int64_t n, const gdl_real *x, gdl_real *y, gdl_real alpha);
    int (*unary_backward)(int op, int64_t n, const gdl_real *x, const gdl_real *y,
                          const gdl_real *gy, gdl_real *gx, gdl_real alpha);
    /* x viewed as [outer, n, inner]; y[o,i] = reduce_k x[o,k,i] (y += when accumulate);
       idx (MAX only) receives the arg-max k as int32 */
    int (*reduce)(int op, int64_t outer, int64_t n, int64_t inner, const gdl_real *x,
                  gdl_real *y, int32_t *idx, int accumulate);
    int (*reduce_backward)(int op, int64_t outer, int64_t n, int64_t inner, const gdl_real *gy,
                           const int32_t *idx, gdl_real *gx);
    int (*argmax)(int64_t outer, int64_t n, int64_t inner, const gdl_real *x, int32_t *out);
    /* softmax over the middle dim of [outer, n, inner]; log_ selects log_softmax */
    int (*softmax)(int log_, int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y);
    int (*softmax_backward)(int log_, int64_t outer, int64_t n, int64_t inner, const gdl_real *y,
                            const gdl_real *gy, gdl_real *gx);
    /* x [N,C,H,W] -> col [N, C*KH*KW, OH*OW]; col2im: x += (adjoint) */
    int (*im2col)(const gdl_conv_geom *g, const gdl_real *x, gdl_real *col);
    int (*col2im)(const gdl_conv_geom *g, const gdl_real *col, gdl_real *x);
    /* pooling per (n,c) plane; idx: flat h*W+w of the max; avg counts padding */
    int (*maxpool)(const gdl_conv_geom *g, const gdl_real *x, gdl_real *y, int32_t *idx);
    int (*maxpool_backward)(const gdl_conv_geom *g, const gdl_real *gy, const int32_t *idx, gdl_real *gx);
    int (*avgpool)(const gdl_conv_geom *g, const gdl_real *x, gdl_real *y);
    int (*avgpool_backward)(const gdl_conv_geom *g, const gdl_real *gy, gdl_real *gx);
    /* dst[r*dld + c] (+)= src[r*sld + c] for r < rows, c < cols */
    int (*copy2d)(int64_t rows, int64_t cols, const gdl_real *src, int64_t sld,
                  gdl_real *dst, int64_t dld, int accumulate);
    /* keep element i iff gdl_dropout_keep(seed, i, p); kept values scale by 1/(1-p) */
    int (*dropout)(int64_t n, double p, uint64_t seed, const gdl_real *x, gdl_real *y);
    int (*dropout_backward)(int64_t n, double p, uint64_t seed, const gdl_real *gy, gdl_real *gx);
    /* x [N,C,S]. Training: batch stats (biased var) -> mean, invstd (saved),
       running stats updated with unbiased var when run_mean != NULL.
       Eval: mean/invstd are computed from running stats into mean/invstd.
       gamma/beta may be NULL (1 and 0). */
    int (*batchnorm)(int64_t N, int64_t C, int64_t S, const gdl_real *x, const gdl_real *gamma,
                     const gdl_real *beta, gdl_real *y, gdl_real *mean, gdl_real *invstd,
                     gdl_real *run_mean, gdl_real *run_var, int training, double momentum, double eps);
    /* gx/ggamma/gbeta may be NULL; +=. training selects the batch-stats formula */
    int (*batchnorm_backward)(int64_t N, int64_t C, int64_t S, const gdl_real *x, const gdl_real *gy,
                              const gdl_real *gamma, const gdl_real *mean, const gdl_real *invstd,
                              int training, gdl_real *gx, gdl_real *ggamma, gdl_real *gbeta);
    /* rows of D; mean/rstd saved per row */
    int (*layernorm)(int64_t rows, int64_t D, const gdl_real *x, const gdl_real *gamma,
                     const gdl_real *beta, double eps, gdl_real *y, gdl_real *mean, gdl_real *rstd);
    int (*layernorm_backward)(int64_t rows, int64_t D, const gdl_real *x, const gdl_real *gy,
                              const gdl_real *gamma, const gdl_real *mean, const gdl_real *rstd,
                              gdl_real *gx, gdl_real *ggamma, gdl_real *gbeta);
    /* out[i,:] = W[idx[i],:]; backward gW[idx[i],:] += gy[i,:]. Indices are
       checked by the op layer on the CPU; on a GPU out-of-range rows give 0. */
    int (*embedding)(int64_t n, int64_t D, int64_t V, const int32_t *idx, const gdl_real *W, gdl_real *out);
    int (*embedding_backward)(int64_t n, int64_t D, int64_t V, const int32_t *idx, const gdl_real *gy, gdl_real *gW);
    /* cross entropy over rows of C classes. from_log_probs: x already holds
       log-probabilities (nll_loss). rows[b] = per-row loss (0 when ignored);
       out[0] = sum or mean of rows (reduction != NONE); count[0] = the number
       of non-ignored rows. Targets out of [0,C) and != ignore give NaN rows
       on a GPU; the CPU op layer rejects them first. */
    int (*xent)(int64_t B, int64_t C, const gdl_real *x, const int32_t *tgt, int ignore_index,
                double smoothing, int from_log_probs, int reduction, gdl_real *rows,
                gdl_real *out, gdl_real *count);
    /* gx += d loss / dx; gy has B elements (NONE) or 1 */
    int (*xent_backward)(int64_t B, int64_t C, const gdl_real *x, const int32_t *tgt, int ignore_index,
                         double smoothing, int from_log_probs, int reduction, const gdl_real *gy,
                         const gdl_real *count, gdl_real *gx);
    /* elementwise loss(x, y) -> out; backward gx, gy (+=, either may be NULL) */
    int (*pointwise_loss)(int kind, int64_t n, const gdl_real *x, const gdl_real *y, gdl_real *out);
    int (*pointwise_loss_backward)(int kind, int64_t n, const gdl_real *x, const gdl_real *y,
                                   const gdl_real *gout, gdl_real *gx, gdl_real *gy);
    /* optimizers over one flat parameter (PyTorch's formulas, DESIGN.md) */
    int (*sgd)(int64_t n, gdl_real *p, const gdl_real *g, gdl_real *buf, double lr, double momentum,
               double dampening, double weight_decay, int nesterov, int first_step);
    int (*adam)(int64_t n, gdl_real *p, const gdl_real *g, gdl_real *m, gdl_real *v, double lr,
                double beta1, double beta2, double eps, double weight_decay, int decoupled, int64_t step);
    /* host-visible results (synchronising) */
    int (*count_nonfinite)(int64_t n, const gdl_real *x, int64_t *out);
    int (*sum_squares)(int64_t n, const gdl_real *x, double *out);
} gdl_backend;

#ifdef __CUDACC__
#define GDL_HD __host__ __device__
#else
#define GDL_HD
#endif

/* The dropout mask both backends use: a counter-based hash, bit-identical
   on every device. */
static inline GDL_HD uint64_t gdl_hash64(uint64_t seed, uint64_t i) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline GDL_HD int gdl_dropout_keep(uint64_t seed, uint64_t i, double p) {
    /* 24 random bits against p; keep with probability 1-p */
    return (double)(gdl_hash64(seed, i) >> 40) * (1.0 / 16777216.0) >= p;
}

GPUDL_API void gdl__set_error(const char *fmt, ...);
#ifdef GPUDL_CUDA
/* defined in gpudl_cuda.cu */
const gdl_backend *gdl_cuda_backend(void);
int gdl_cuda_runtime_device_count(void);
int gdl_cuda_set_device(int index);
int gdl_cuda_device_info(int index, char *name, size_t name_len, size_t *total_mem, size_t *free_mem,
                         int *cc_major, int *cc_minor, int *sm_count, int *clock_khz);
void gdl_cuda_release_cache(void);          /* cudaFree the allocator's cached blocks */
int gdl_cuda_memory_stats(size_t *allocated, size_t *max_allocated, size_t *reserved);
void gdl_cuda_reset_peak_memory(void);
void gdl_cuda_set_tf32(int on);               /* off by default, as PyTorch's matmul */
void *gdl_cuda_host_alloc(size_t bytes);      /* pinned host memory, NULL + error */
void gdl_cuda_host_free(void *p);
void *gdl_cuda_stream_create(void);           /* a non-blocking stream, NULL + error */
void gdl_cuda_stream_destroy(void *stream);
int gdl_cuda_copy_h2d_async(void *dst, const void *src, size_t bytes, void *stream);
int gdl_cuda_stream_synchronize(void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif /* GPUDL_H */
