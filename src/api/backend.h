/* ---------------------------------------------------------------------------
   src/api/backend.h   A backend is a table of functions on raw device
   pointers in two halves: the runtime (memory, copies, streams, events,
   graphs, collectives, device queries) and the compute kernels. The CPU
   backend lives in this header; gpudl_cuda.cu provides the CUDA one through
   gdl_cuda_backend(). Entries return 0, or -1 after gdl__set_error.
   All gdl_real pointers are contiguous row-major device memory. "+=" in a
   comment means the kernel accumulates into its output (gradients).
   ------------------------------------------------------------------------- */

enum gdl_reduce_op { GDL_RED_SUM, GDL_RED_MEAN, GDL_RED_MAX, GDL_RED_MIN };
enum gdl_pointwise_loss { GDL_LOSS_MSE, GDL_LOSS_BCE_LOGITS };

/* geometry of a 2-D convolution or pooling window */
typedef struct gdl_conv_geom {
    int N, C, H, W;        /* input */
    int KH, KW;            /* window */
    int SH, SW, PH, PW, DH, DW;
    int OH, OW;            /* output */
} gdl_conv_geom;

/* scaled dot-product attention (gdl_scaled_dot_product_attention's fused path): q [B, L, E], k [B, S, E],
   v [B, S, Ev], out [B, L, Ev], B the batch dims flattened (nb of them, bshape). Each of q, k, v and out
   (whose gradient gout shares its layout, as gq, gk, gv share q's, k's, v's) is read at element strides:
   along the batch dims (qstr, kstr, vstr, ostr), along L or S (qrow, krow, vrow, orow), 1 along E / Ev;
   so heads packed in a Linear's output ([N, L, H*E], or q, k and v side by side in [N, L, 3*H*E]) are read
   and written in place, without a permute copy. The mask (optional) is read at its element strides along
   the batch dims (mstr; 0 where it is broadcast), along L (mrow) and along S (mcol). */
#define GDL_ATTN_MAX_HEAD 256 /* E and Ev of the fused kernels; longer heads run the unfused composition */
typedef struct gdl_attn_geom {
    int64_t B, L, S, E, Ev;
    double scale;        /* the scores are scale * q.k */
    int causal;          /* key j > query i takes no part (is_causal: top-left aligned) */
    int mask;            /* 0 none; 1 u8 (non-zero: takes part); 2 additive, of dtype mdt */
    gdl_dtype mdt;
    int nb;              /* batch dims (their product is B) */
    int64_t group;       /* grouped-query attention: group query heads (the innermost batch dim, of that size, along
                            which kstr and vstr are 0) share one key/value head; 0 or 1 otherwise */
    int64_t bshape[GDL_MAX_DIMS], mstr[GDL_MAX_DIMS], mrow, mcol;
    int64_t qstr[GDL_MAX_DIMS], kstr[GDL_MAX_DIMS], vstr[GDL_MAX_DIMS], ostr[GDL_MAX_DIMS], qrow, krow, vrow, orow;
} gdl_attn_geom;

/* A parameter group's hyper-parameters as the optimizer kernels read them:
   in the device's memory (the optimizer's flat block), written by
   gdl_optim_set_lr / set_momentum and the schedulers with an asynchronous
   copy, so a captured step reads the current values. */
typedef struct gdl_opt_hyper {
    double lr, weight_decay;
    double momentum, dampening; /* SGD */
    double beta1, beta2, eps;   /* Adam */
    int32_t nesterov, pad_;     /* SGD */
} gdl_opt_hyper;

/* One parameter of a multi-tensor optimizer table (gdl_backend.opt_table_new): device pointers, fixed
   while the parameter set stays the same. */
typedef struct gdl_opt_tensor {
    int64_t n;
    gdl_real *p;                /* updated in place */
    const gdl_real *g;
    gdl_real *s1, *s2;          /* SGD: s1 the momentum buffer (NULL: no momentum); Adam: exp_avg, exp_avg_sq */
    const gdl_opt_hyper *hyper; /* its group's hyper-parameters (device memory) */
    int32_t *step;              /* its step count (device memory; NULL: not counted): SGD's buffer starts as the
                                   gradient when it is 0; Adam corrects the bias for step + 1. Each call adds 1
                                   (saturating at INT32_MAX) once every element is updated. */
    const gdl_real *skip;       /* NULL, or a device flag (GradScaler's found_inf): non-zero, the call changes
                                   nothing, step counts included. One flag per table: the first entry's is read. */
    /* master weights (gdl_optim_set_master_weights): p is the f32 master and g is NULL; the gradient is read
       from glow (dtype low) and, after p's update, plow (dtype low) is set to p rounded to nearest even.
       low is GDL_F32 (0) without master weights (plow, glow NULL). */
    void *plow;
    const void *glow;
    int32_t low, pad_;
} gdl_opt_tensor;

/* The epilogue of a quantized layer (backend entry qepilogue): int32 sums acc [rows, N] of u8 activations
   (scale sa, zero point za) times int8 weights (symmetric, scale w_scale per channel or one) to f32:
   y = (acc - za * colsum[n]) * (sa * w_scale[n]) + bias[n], ReLU when relu; when requant (static layers)
   y rounded onto the output's u8 grid (out_scale, out_zp, [0, qmax]) and dequantized back. pos 0: y [rows, N];
   pos > 0: a convolution's rows are one sample's pos output positions and y is [N, pos]. The pointers are
   memory of the backend's device. */
typedef struct gdl_qepi {
    int64_t N, pos;
    const int32_t *colsum;  /* [N]: sum over k of the weights of channel n */
    const float *w_scale;   /* [N], or [1] when per_channel is 0 */
    const float *bias;      /* [N] or NULL */
    float sa, out_scale;
    int32_t za, out_zp;
    int per_channel, relu, requant, qmax;
} gdl_qepi;

/* batchnorm's act for a fused GELU whose input is not kept (the CPU's f32, S > 1): pre holds 4 doubles a
   channel (the mean, invstd, weight and bias the forward normalised with), from which the backward
   rebuilds the input, bit for bit, instead of writing it out and reading it back */
#define GDL__ACT_GELU_RECIPE 64

/* the collectives of the backend entry `collective`; an id of comm_id has at most GDL_COMM_ID_BYTES */
enum gdl_collective { GDL_COLL_ALL_REDUCE, GDL_COLL_BROADCAST, GDL_COLL_ALL_GATHER, GDL_COLL_REDUCE_SCATTER };
#define GDL_COMM_ID_BYTES 128

/* The backend's entries, one line each: X(return type, name, (parameters)), in two halves.
   GDL_RUNTIME_ENTRIES is the runtime: memory, copies, streams and events, the allocator's counters,
   timing events, the PCI bus id, graphs and collectives -- everything that is not a compute kernel.
   GDL_KERNEL_ENTRIES are the compute kernels; a kernel that runs on more than one float dtype takes
   it as a `gdl_dtype dt` argument (GDL_F32 the f32 code, GDL_BF16 / GDL_F16 the low-precision one).
   The lists make the structs gdl_runtime and gdl_kernels, the two halves of gdl_backend (be->rt.copy,
   be->k.gemm), and both backends' tables (the CPU one in this header, gdl__cpu_NAME; the CUDA one in
   gpudl_cuda.cu, gdl__cu_NAME), so an entry a backend does not define does not compile. */
#define GDL_RUNTIME_ENTRIES(X) \
    /* memory, on the current device */ \
    X(void *, alloc, (size_t bytes)) \
    X(void, free, (void *p)) \
    /* copies between host and device or within a device; kind: 0 h2d, 1 d2h, 2 d2d */ \
    X(int, copy, (void *dst, const void *src, size_t bytes, int kind)) \
    X(int, memset0, (void *p, size_t bytes)) \
    X(int, synchronize, (void)) \
    /* page-locked host memory where the device has it (fast, asynchronous \
       copies), plain host memory on the CPU */ \
    X(void *, host_alloc, (size_t bytes)) \
    X(void, host_free, (void *p)) \
    /* streams and events order copies against the compute stream without \
       the host waiting. A NULL stream is the device's compute stream; the \
       CPU's are stand-ins (work on the CPU is done when the call returns). */ \
    X(void *, stream_create, (void)) \
    X(void, stream_destroy, (void *stream)) \
    X(int, copy_async, (void *dst, const void *src, size_t bytes, int kind, void *stream)) \
    X(void *, event_create, (void)) \
    X(void, event_destroy, (void *event)) \
    X(int, event_record, (void *event, void *stream)) \
    X(int, stream_wait_event, (void *stream, void *event)) \
    /* waits (counted by gdl_sync_count) only if the event is not reached yet */ \
    X(int, event_synchronize, (void *event)) \
    /* the allocator's counters for one device (gdl_memory_stats; the arena fields are left to the \
       front end) and the restart of its peaks */ \
    X(int, memory_stats, (int device, gdl_memory_status *s)) \
    X(int, memory_reset_peak, (int device)) \
    /* the profiler (gdl_profile_*): a timing marker recorded in the current device's compute stream \
       (NULL without an error where the device has none: the CPU, whose ops the host clock times; freed \
       with event_destroy); the milliseconds between two markers, waiting for the second; the kernels \
       launched so far (-1: not counted) */ \
    X(void *, timing_event, (void)) \
    X(int, event_elapsed, (void *start, void *end, double *ms)) \
    X(int64_t, launch_count, (void)) \
    /* a device's PCI bus id ("0000:65:00.0"), which NVML's devices are matched by; -1 + error: none */ \
    X(int, pci_bus_id, (int device, char *buf, int len)) \
    /* CUDA graphs (gdl_graph_*): record the current device's compute stream instead of running it \
       (device allocations are refused meanwhile), stop into a ready-to-launch graph (also after a \
       failure, which leaves *graph NULL), launch one on the compute stream, free one. The CPU has none. */ \
    X(int, graph_begin, (void)) \
    X(int, graph_end, (void **graph)) \
    X(int, graph_launch, (void *graph)) \
    X(void, graph_destroy, (void *graph)) \
    /* collectives among the processes of a job, one device per process (src/dist/; NCCL on a GPU; \
       the CPU's collectives are MPI's, in the front end, so its entries refuse). comm_id: the job's id \
       (at most GDL_COMM_ID_BYTES), made by rank 0, which the front end hands to every rank; comm_init: \
       this rank joins on `device` (returns once every rank has); collective: kind (GDL_COLL_*) on the \
       device's communication stream, after the compute stream's work so far; count is per rank (all-gather: \
       sent, reduce-scatter: received); avg divides the sum by the world size; join: the compute stream \
       waits for it now, else at the next comm_join (DDP's buckets overlap the rest of backward); \
       comm_sync: the host waits for the communication stream (barrier: an all-reduce of one element \
       first) at most timeout_s seconds; a timeout or a peer's error aborts the communicator and every \
       later call fails; comm_destroy frees it (nothing to do when none was made) */ \
    X(int, comm_id, (void *id, int bytes)) \
    X(int, comm_init, (int device, const void *id, int world, int rank)) \
    X(int, collective, (int kind, const void *send, void *recv, int64_t count, gdl_dtype dt, int avg, int root, \
        int join)) \
    X(int, comm_join, (void)) \
    X(int, comm_sync, (int barrier, double timeout_s)) \
    X(void, comm_destroy, (void))

#define GDL_KERNEL_ENTRIES(X) \
    /* x[i] = v; cast: n elements of dtype st to dtype dt */ \
    X(int, fill, (gdl_real *x, int64_t n, gdl_real v)) \
    X(int, cast, (void *dst, gdl_dtype dt, const void *src, gdl_dtype st, int64_t n)) \
    /* C[b] = alpha*op(A[b])*op(B[b]) + beta*C[b], row-major, b < batch, matrices of dtype dt, \
       element strides sA, sB, sC between batches (0 repeats a matrix; sC 0: every batch in turn into \
       the one C, so beta 1 sums the products -- a GPU sums a chunk of them in f32 first). f16 / bf16: \
       products summed in f32, C = alpha*AB + beta*C formed in f32 and rounded once to dt (cuBLAS: \
       GemmEx, CUBLAS_COMPUTE_32F; the CPU: f32 copies, the f32 kernel) */ \
    X(int, gemm, (gdl_dtype dt, int ta, int tb, int M, int N, int K, gdl_real alpha, const void *A, int lda, \
        int64_t sA, const void *B, int ldb, int64_t sB, gdl_real beta, void *C, int ldc, int64_t sC, int batch)) \
    /* The elementwise kernels take a dtype (binary and sum_to one per operand: f32, or one low dtype \
       with f32). bf16 / f16: every element is loaded to f32, computed with the f32 kernel's formula and \
       rounded once on store; "+=" loads the accumulator, adds in f32 and rounds once. */ \
    /* out[i] = a[i·astr] op b[i·bstr] over `shape` (ndim dims, out contiguous; a stride of 0 \
       broadcasts); out may be a itself (same strides: an in-place add) */ \
    X(int, binary, (int op, int ndim, const int64_t *shape, gdl_dtype at, const void *a, const int64_t *astr, \
        gdl_dtype bt, const void *b, const int64_t *bstr, gdl_dtype ot, void *out)) \
    /* dst[i·dstr] += alpha*src[i] over `shape` (src contiguous): sums broadcast dims. Not all f32: each \
       destination's sources summed in f32 first (from 0, as the f32 sum_to into a zeroed buffer), then \
       added to dst and rounded */ \
    X(int, sum_to, (int ndim, const int64_t *shape, gdl_dtype st, const void *src, gdl_dtype dt, void *dst, \
        const int64_t *dstr, gdl_real alpha)) \
    /* y = f(x; alpha) ; gx = (accumulate ? gx : 0) + f'(x)·gy (y is the forward output; accumulate 0: \
       gx was unset, its old contents are not read) */ \
    X(int, unary, (gdl_dtype dt, int op, int64_t n, const void *x, void *y, gdl_real alpha)) \
    X(int, unary_backward, (gdl_dtype dt, int op, int64_t n, const void *x, const void *y, const void *gy, \
        void *gx, gdl_real alpha, int accumulate)) \
    /* fused bias + activation; act: GDL_UN_RELU, GDL_UN_GELU_TANH, GDL_UN_GELU_ERF, or -1 (none). \
       bias_act: y viewed as [outer, C, inner], in place: pre = y + bias[c] (bias NULL: y), kept in `pre` \
       when not NULL, and y = act(pre), in one pass, with unary's and binary's arithmetic. linear_act: \
       y[M,N] = act(x[M,K]·w[N,K]^T + bias) the same way (cuBLASLt's epilogues on CUDA). \
       act_backward_reduce over [outer, n, inner]: gpre = 0 + act'(pre)·gy (set, as unary_backward adds \
       to zeros; ReLU's pre may be its output), and when sum != NULL, sum[o,i] (+= when accumulate) = \
       the sum over k of gpre[o,k,i], in reduce's order */ \
    X(int, bias_act, (int act, int64_t outer, int64_t C, int64_t inner, const gdl_real *bias, gdl_real *y, \
        gdl_real *pre)) \
    X(int, linear_act, (int act, int M, int N, int K, const gdl_real *x, const gdl_real *w, const gdl_real *bias, \
        gdl_real *y, gdl_real *pre)) \
    X(int, act_backward_reduce, (int act, int64_t outer, int64_t n, int64_t inner, const gdl_real *pre, \
        const gdl_real *gy, gdl_real *gpre, gdl_real *sum, int accumulate)) \
    /* x viewed as [outer, n, inner]; y[o,i] = reduce_k x[o,k,i] (y += when accumulate); \
       idx (MAX only) receives the arg-max k as int32 */ \
    X(int, reduce, (int op, int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y, \
        int32_t *idx, int accumulate)) \
    X(int, reduce_backward, (int op, int64_t outer, int64_t n, int64_t inner, const gdl_real *gy, \
        const int32_t *idx, gdl_real *gx)) \
    X(int, argmax, (int64_t outer, int64_t n, int64_t inner, const gdl_real *x, int32_t *out)) \
    /* softmax over the middle dim of [outer, n, inner]; log_ selects log_softmax */ \
    X(int, softmax, (int log_, int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y)) \
    X(int, softmax_backward, (int log_, int64_t outer, int64_t n, int64_t inner, const gdl_real *y, \
        const gdl_real *gy, gdl_real *gx)) \
    /* x [N,C,H,W] -> col [N, C*KH*KW, OH*OW]; col2im: x += (adjoint); elements of dt (bf16 / f16: \
       im2col copies, col2im sums in f32 and rounds once: the old value plus the sum) */ \
    X(int, im2col, (gdl_dtype dt, const gdl_conv_geom *g, const void *x, void *col)) \
    X(int, col2im, (gdl_dtype dt, const gdl_conv_geom *g, const void *col, void *x)) \
    /* a convolution's GEMMs without the column matrix (the CPU's implicit GEMM), the bits of im2col + gemm \
       (+ col2im); w [OC, C/groups, KH, KW]. pass 0: out [N,OC,OH,OW] = conv(x, w), then + bias (NULL: none), \
       pre and act as bias_act's; pass 1: out (gw) += the weight gradient of x and gy; pass 2: out (gx) += the \
       input gradient of w and gy; pass 3: pass 2 into an unset out (written, not added). Returns 1, having \
       done nothing, where the backend has no such path (CUDA) or im2col is the faster for the shape: the \
       caller then runs im2col, gemm, col2im (pass 3: zeroes out, then pass 2 or those). */ \
    X(int, conv_implicit, (int pass, const gdl_conv_geom *g, int groups, int OC, int act, const gdl_real *x, \
        const gdl_real *w, const gdl_real *gy, const gdl_real *bias, gdl_real *out, gdl_real *pre)) \
    /* pooling per (n,c) plane, elements of dt; idx: flat h*W+w of the max; avg counts padding; \
       maxpool_backward: gx = (beta ? gx : 0) + the gradient, avgpool_backward: gx +=. bf16 / f16: the \
       backwards and avgpool sum in f32 and round each result once (gx: the old value plus the sum, \
       rounded once); max pooling is exact */ \
    X(int, maxpool, (gdl_dtype dt, const gdl_conv_geom *g, const void *x, void *y, int32_t *idx)) \
    X(int, maxpool_backward, (gdl_dtype dt, const gdl_conv_geom *g, const void *gy, const int32_t *idx, void *gx, \
        int beta)) \
    X(int, avgpool, (gdl_dtype dt, const gdl_conv_geom *g, const void *x, void *y)) \
    X(int, avgpool_backward, (gdl_dtype dt, const gdl_conv_geom *g, const void *gy, void *gx)) \
    /* dst[r*dld + c] (+)= src[r*sld + c] for r < rows, c < cols, elements of dt (a copy is exact; \
       accumulate on bf16 / f16 adds in f32 and rounds once) */ \
    X(int, copy2d, (gdl_dtype dt, int64_t rows, int64_t cols, const void *src, int64_t sld, void *dst, \
        int64_t dld, int accumulate)) \
    /* indexing and copies. strided_copy: dst[i·dstr] (+)= src[i·sstr] over `shape` (i its row-major \
       multi-index), elements of any dtype dt; accumulate (a float dt, no two i sharing a destination): \
       the destination loaded, the source added in f32, rounded once */ \
    X(int, strided_copy, (gdl_dtype dt, int ndim, const int64_t *shape, const void *src, const int64_t *sstr, \
        void *dst, const int64_t *dstr, int accumulate)) \
    /* gather: out[i] = x at i·xstr with the `dim` coordinate replaced by idx[i·istr], over `shape` (out \
       contiguous, any dtype dt; x's dim has xn elements: an index outside [0,xn) gives 0 -- the op layer \
       rejects it first on the CPU); scatter_add, its adjoint: dst (f32) at those places += src[i] (src \
       contiguous, dtype st: f32, bf16 or f16; on a GPU with atomics, so sums in any order) */ \
    X(int, gather, (gdl_dtype dt, int ndim, const int64_t *shape, int dim, const void *x, const int64_t *xstr, \
        int64_t xn, const int32_t *idx, const int64_t *istr, void *out)) \
    X(int, scatter_add, (gdl_dtype st, int ndim, const int64_t *shape, int dim, const void *src, \
        const int32_t *idx, const int64_t *istr, gdl_real *dst, const int64_t *dstr, int64_t dn)) \
    /* out[i] = a[i·astr] op b[i·bstr] as 1 or 0 (op: gdl_compare_op) over `shape`, out contiguous; at, bt \
       any dtypes: two integer ones compare exactly, else both as f32 (NaN: only NE holds) */ \
    X(int, compare, (int op, int ndim, const int64_t *shape, gdl_dtype at, const void *a, const int64_t *astr, \
        gdl_dtype bt, const void *b, const int64_t *bstr, uint8_t *out)) \
    /* out[i] = cond[i·cstr] ? a[i·astr] : b[i·bstr] over `shape` (cond u8; a, b and the contiguous out of \
       one float dtype dt: an exact selection) */ \
    X(int, where, (gdl_dtype dt, int ndim, const int64_t *shape, const uint8_t *cond, const int64_t *cstr, \
        const void *a, const int64_t *astr, const void *b, const int64_t *bstr, void *out)) \
    /* x, y viewed as [batch, R, C] (float dtype dt): y (+)= x where col - row <= k (upper 0: tril) or \
       col - row >= k (upper 1: triu), else y = 0 (nothing added) */ \
    X(int, tri, (gdl_dtype dt, int upper, int64_t batch, int64_t R, int64_t C, int64_t k, const void *x, \
        void *y, int accumulate)) \
    /* inclusive prefix sums over the middle dim of [outer, n, inner], from the end when reverse (cumsum's \
       backward); y (+)= them */ \
    X(int, cumsum, (int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y, int reverse, \
        int accumulate)) \
    /* scaled dot-product attention (gdl_attn_geom), q, k, v, out and the gradients of one float dtype dt, \
       computed in f32 (gdl_real), rounded once on store. Forward: online softmax over tiles of K/V, \
       out = softmax(scale q k^T + mask) v and lse[b,i] = the log-sum-exp of row i's scores (+inf for a row \
       no key takes part in: its output is 0), nothing of L x S kept. Backward: the probabilities \
       recomputed tile by tile from lse; gq, gk, gv += (each may be NULL); delta: scratch of B*L reals \
       (rowsum(gout * out)) */ \
    X(int, attention, (gdl_dtype dt, const gdl_attn_geom *g, const void *q, const void *k, const void *v, \
        const void *mask, void *out, gdl_real *lse)) \
    X(int, attention_backward, (gdl_dtype dt, const gdl_attn_geom *g, const void *q, const void *k, \
        const void *v, const void *mask, const void *out, const void *gout, const gdl_real *lse, \
        gdl_real *delta, void *gq, void *gk, void *gv)) \
    /* keep element i iff gdl_dropout_keep(seed, i, p); kept values scale by 1/(1-p); elements of dt \
       (bf16 / f16: computed in f32, rounded once); the backward: gx += */ \
    X(int, dropout, (gdl_dtype dt, int64_t n, double p, uint64_t seed, const void *x, void *y)) \
    X(int, dropout_backward, (gdl_dtype dt, int64_t n, double p, uint64_t seed, const void *gy, void *gx)) \
    /* x [N,C,S], and y, gy, gx, of dtype dt; the rest f32 (bf16 / f16: cuDNN's under torch.autocast, \
       f32 arithmetic, y and gx rounded once). Training: batch stats (biased var) -> mean, invstd (saved), \
       running stats updated with unbiased var when run_mean != NULL. \
       Eval: mean/invstd are computed from running stats into mean/invstd. \
       gamma/beta may be NULL (1 and 0). act (a gdl_act) GDL_ACT_RELU: y = relu(y) in the same pass \
       (gdl_batch_norm_relu; the normalised value rounded to y's dtype first, then x > 0 ? x : 0, as the \
       two ops); GDL_ACT_GELU (the CPU, f32 only): the normalised value into pre (kept for the backward), \
       y = GELU(pre) by gdl_gelu's arithmetic (GDL__ACT_GELU_RECIPE: pre [4C doubles] its recipe); pre is \
       NULL otherwise. */ \
    X(int, batchnorm, (gdl_dtype dt, int64_t N, int64_t C, int64_t S, const void *x, const gdl_real *gamma, \
        const gdl_real *beta, void *y, gdl_real *mean, gdl_real *invstd, gdl_real *run_mean, gdl_real *run_var, \
        int training, double momentum, double eps, int act, gdl_real *pre)) \
    /* gx/ggamma/gbeta may be NULL; ggamma and gbeta +=, gx too when accumulate (0: gx was unset, its old \
       contents are not read). training selects the batch-stats formula. act GDL_ACT_RELU: y is the fused \
       ReLU's output, whose backward comes first (gy taken as 0 + (y > 0 ? gy : 0), ReLU's backward into an \
       unset gradient); GDL_ACT_GELU: y is the forward's pre, gy taken as 0 + gy GELU'(y), gdl_gelu's \
       backward into an unset gradient (GDL__ACT_GELU_RECIPE: y is pre's recipe); GDL_ACT_NONE: y NULL */ \
    X(int, batchnorm_backward, (gdl_dtype dt, int64_t N, int64_t C, int64_t S, const void *x, const void *gy, \
        const void *y, const gdl_real *gamma, const gdl_real *mean, const gdl_real *invstd, int training, void *gx, \
        gdl_real *ggamma, gdl_real *gbeta, int accumulate, int act)) \
    /* rows of D; mean/rstd saved per row */ \
    X(int, layernorm, (int64_t rows, int64_t D, const gdl_real *x, const gdl_real *gamma, \
        const gdl_real *beta, double eps, gdl_real *y, gdl_real *mean, gdl_real *rstd)) \
    X(int, layernorm_backward, (int64_t rows, int64_t D, const gdl_real *x, const gdl_real *gy, \
        const gdl_real *gamma, const gdl_real *mean, const gdl_real *rstd, gdl_real *gx, gdl_real *ggamma, \
        gdl_real *gbeta)) \
    /* out[i,:] = W[idx[i],:]; backward gW[idx[i],:] += gy[i,:]. Indices are \
       checked by the op layer on the CPU; on a GPU out-of-range rows give 0. */ \
    X(int, embedding, (int64_t n, int64_t D, int64_t V, const int32_t *idx, const gdl_real *W, \
        gdl_real *out)) \
    X(int, embedding_backward, (int64_t n, int64_t D, int64_t V, const int32_t *idx, const gdl_real *gy, \
        gdl_real *gW)) \
    /* nn.Embedding's max_norm: each row W[idx[i],:] (in the order of idx) whose norm_type-norm exceeds \
       max_norm scaled in place by max_norm / (norm + 1e-7), as torch.embedding_renorm_ */ \
    X(int, embedding_renorm, (int64_t n, int64_t D, int64_t V, const int32_t *idx, gdl_real *W, double max_norm, \
        double norm_type)) \
    /* cross entropy over rows of C classes. from_log_probs: x already holds \
       log-probabilities (nll_loss). rows[b] = per-row loss (0 when ignored); \
       out[0] = sum or mean of rows (reduction != NONE); count[0] = the number \
       of non-ignored rows. Targets out of [0,C) and != ignore give NaN rows \
       on a GPU; the CPU op layer rejects them first. */ \
    X(int, xent, (int64_t B, int64_t C, const gdl_real *x, const int32_t *tgt, int ignore_index, \
        double smoothing, int from_log_probs, int reduction, gdl_real *rows, gdl_real *out, \
        gdl_real *count)) \
    /* gx += d loss / dx; gy has B elements (NONE) or 1 */ \
    X(int, xent_backward, (int64_t B, int64_t C, const gdl_real *x, const int32_t *tgt, int ignore_index, \
        double smoothing, int from_log_probs, int reduction, const gdl_real *gy, const gdl_real *count, \
        gdl_real *gx)) \
    /* elementwise loss(x, y) -> out; backward gx, gy (+=, either may be NULL) */ \
    X(int, pointwise_loss, (int kind, int64_t n, const gdl_real *x, const gdl_real *y, gdl_real *out)) \
    X(int, pointwise_loss_backward, (int kind, int64_t n, const gdl_real *x, const gdl_real *y, \
        const gdl_real *gout, gdl_real *gx, gdl_real *gy)) \
    /* optimizers (PyTorch's formulas: docs/DESIGN.md) over the `count` parameters of a table at once, as \
       PyTorch's foreach / multi_tensor_apply: one call, one kernel launch on a GPU, so a failure \
       updates nothing. The table is built once (one copy to the device) and kept while the parameters \
       stay the same; lr, the step counts and the bias corrections are read from device memory at each \
       call, so a captured call stays right when they change. decoupled: AdamW's weight decay. */ \
    X(void *, opt_table_new, (int count, const gdl_opt_tensor *t)) \
    X(void, opt_table_free, (void *table)) \
    X(int, sgd_multi, (const void *table)) \
    X(int, adam_multi, (const void *table, int decoupled)) \
    /* weight EMA (torch.lerp_ in f32): avg[i] += w (x[i] - avg[i]) for w < 0.5, else avg[i] = x[i] - \
       (x[i] - avg[i]) (1 - w) (w = 1: a copy); n elements, nothing read back */ \
    X(int, ema_lerp, (int64_t n, gdl_real *avg, const gdl_real *x, gdl_real w)) \
    /* GradScaler, nothing read back (PyTorch's _amp_foreach_non_finite_check_and_unscale_ and \
       _amp_update_scale_): g[i] *= (float)(1 / (double)*scale) (left as is when that is 1), and *found_inf \
       and *found_inf2 (when not NULL) set to 1 when some g[i] was inf or NaN before; update, one element: \
       *found_inf non-zero: scale *= backoff, tracker 0; else tracker + 1, at `interval` scale *= growth \
       (kept when that is not finite) and tracker 0; then *found_inf = 0 (scale rounded to float) */ \
    X(int, amp_unscale, (int64_t n, gdl_real *g, const gdl_real *scale, gdl_real *found_inf, gdl_real *found_inf2)) \
    X(int, amp_update_scale, (gdl_real *scale, int32_t *tracker, gdl_real *found_inf, double growth, double backoff, \
        int interval)) \
    /* training metrics kept on the device, so a step reads nothing back: acc[0] += loss[0]*B, acc[1] += B; \
       with logits [B,C] and i32 labels y: acc[2] += rows whose argmax (gdl_argmax's rule) is y, acc[3] += B */ \
    X(int, fit_metrics, (const gdl_real *loss, int64_t B, int64_t C, const gdl_real *logits, const int32_t *y, \
        double *acc)) \
    /* clip_grad_norm_ without reading anything back: the global L2 norm of `count` gradients (g[i], n[i] \
       elements), written to *norm (device memory, may be NULL), and when max_norm / (norm + 1e-6) < 1 (or \
       NaN) every gradient scaled by it; the sum of squares in double, tensor by tensor in order */ \
    X(int, clip_grad_norm, (int count, gdl_real *const *g, const int64_t *n, double max_norm, double *norm)) \
    /* host-visible results (synchronising) */ \
    X(int, count_nonfinite, (int64_t n, const gdl_real *x, int64_t *out)) \
    X(int, sum_squares, (int64_t n, const gdl_real *x, double *out)) \
    /* the fused gate step of a recurrent layer at one time step (gdl_lstm_gates, gdl_gru_gates): gx, gh \
       [B, G·H] the input and hidden pre-activations with their biases in, gate blocks of H in PyTorch's \
       order. LSTM (G = 4: i, f, g, o): hc [2, B, H] gets h' = o·tanh(c') then c' = f·c_prev + i·g. GRU \
       (G = 3: r, z, n): h [B, H] gets (1−z)·n + z·h_prev with n = tanh(gx_n + r·gh_n). Arithmetic in \
       f32, the CPU's and CUDA's alike to the bit (src/cpu/rnn.h; double in a GPUDL_DOUBLE build). The backwards recompute the gates from the same inputs (nothing \
       saved) and take the gradient of the output (dhc [2, B, H]: of h' then c'; dh [B, H]); dgx, dgh \
       [B, G·H] and dc_prev / dh_prev [B, H] +=, each may be NULL (gx and gh may be one tensor) */ \
    X(int, lstm_gates, (int64_t B, int64_t H, const gdl_real *gx, const gdl_real *gh, const gdl_real *c_prev, \
        gdl_real *hc)) \
    X(int, lstm_gates_backward, (int64_t B, int64_t H, const gdl_real *gx, const gdl_real *gh, \
        const gdl_real *c_prev, const gdl_real *dhc, gdl_real *dgx, gdl_real *dgh, gdl_real *dc_prev)) \
    X(int, gru_gates, (int64_t B, int64_t H, const gdl_real *gx, const gdl_real *gh, const gdl_real *h_prev, \
        gdl_real *h)) \
    X(int, gru_gates_backward, (int64_t B, int64_t H, const gdl_real *gx, const gdl_real *gh, \
        const gdl_real *h_prev, const gdl_real *dh, gdl_real *dgx, gdl_real *dgh, gdl_real *dh_prev)) \
    /* INT8 (src/api/quant.h). qweight_new: an int8 weight w [N, K] (host memory; colsum [N] its row sums) made \
       ready for qgemm on the device (the CPU packs it; CUDA keeps a copy, K padded to a multiple of 4); NULL \
       + error. qgemm: C [M, N] (int32, rows ldc apart) = A [M, K] (u8, rows lda apart) times w^T, exact \
       (K <= GDL_GEMM_INT8_MAX_K). quantize: x [rows, k] (f32) to 8 bits, rows ldq bytes apart (the padding \
       0): clamp(round_half_even(x * (1/s)) + z, qmin, qmax) as u8, or as s8 when qmin < 0 (PyTorch's \
       quantize_per_tensor). dequantize: y = (q - z) * s of n u8 (s8 when is_signed) values. qminmax: the \
       min and max of x and whether it holds a NaN, into host out[3]. qim2col: the u8 columns of one sample \
       x [C, H, W] (g's N ignored): row p = output position, KP bytes (the padding 0), taps outside the \
       image za. qepilogue: see gdl_qepi. */ \
    X(void *, qweight_new, (int N, int K, const int8_t *w, const int32_t *colsum)) \
    X(void, qweight_free, (void *qw)) \
    X(int, qgemm, (int M, const uint8_t *A, int lda, const void *qw, int32_t *C, int ldc)) \
    X(int, quantize, (int64_t rows, int64_t k, const gdl_real *x, float s, int32_t z, int qmin, int qmax, void *q, \
        int64_t ldq)) \
    X(int, dequantize, (int64_t n, const void *q, int is_signed, float s, int32_t z, gdl_real *y)) \
    X(int, qminmax, (int64_t n, const gdl_real *x, float *out)) \
    X(int, qim2col, (const gdl_conv_geom *g, const uint8_t *x, int32_t za, uint8_t *cols, int64_t KP)) \
    X(int, qepilogue, (const gdl_qepi *e, int64_t rows, const int32_t *acc, gdl_real *y))

#define GDL__BACKEND_MEMBER(ret, entry, params) ret(*entry) params;
typedef struct gdl_runtime {
    GDL_RUNTIME_ENTRIES(GDL__BACKEND_MEMBER)
} gdl_runtime;
typedef struct gdl_kernels {
    GDL_KERNEL_ENTRIES(GDL__BACKEND_MEMBER)
} gdl_kernels;
typedef struct gdl_backend {
    const char *name;
    gdl_runtime rt; /* memory, copies, streams, events, graphs, collectives, device queries */
    gdl_kernels k;  /* the compute kernels */
} gdl_backend;

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

/* INT8 arithmetic, one definition for the CPU and the CUDA kernels (bit-identical results). Rounding half
   to even by adding and taking away big = 1.5 * 2^23 (exact where |v| < 2^22; larger values come back
   within 1 of v, and every caller clamps into 8 bits); the CPU passes big from a volatile so that no
   compiler flag can fold the two away. Products and quotients are rounded on their own (no FMA
   contraction: nvcc contracts a*b + c unless told, hence the _rn intrinsics on the device). */
#if defined(__CUDA_ARCH__)
#define GDL_Q_MUL(a, b) __fmul_rn((a), (b))
#define GDL_Q_DIV(a, b) __fdiv_rn((a), (b))
#else
#define GDL_Q_MUL(a, b) ((a) * (b))
#define GDL_Q_DIV(a, b) ((a) / (b))
#endif
static inline GDL_HD float gdl_q_round(float v, float big) {
    const float t = v + big; /* an assignment: rounded to float also where float maths is wider (x87) */
    return t - big;
}
/* x quantized with 1/scale inv and zero point z, clamped to [qmin, qmax] (an integer, as a float) */
static inline GDL_HD float gdl_q_quantize1(float x, float inv, float z, float qmin, float qmax, float big) {
    const float r = gdl_q_round(GDL_Q_MUL(x, inv), big) + z;
    return r < qmin ? qmin : r > qmax ? qmax : r;
}
/* one output of gdl_qepi e from its int32 sum acc, channel n */
static inline GDL_HD float gdl_q_epilogue1(const gdl_qepi *e, int32_t acc, int64_t n, float big) {
    const int32_t v = acc - e->za * e->colsum[n];
    const float sc = GDL_Q_MUL(e->sa, e->w_scale[e->per_channel ? n : 0]);
    const float m = GDL_Q_MUL((float)v, sc);
    float y = m + (e->bias ? e->bias[n] : 0.0f), r;
    if (e->relu && y < 0) y = 0;
    if (!e->requant) return y;
    r = gdl_q_round(GDL_Q_DIV(y, e->out_scale), big) + (float)e->out_zp;
    r = r < 0 ? 0 : r > (float)e->qmax ? (float)e->qmax : r;
    return GDL_Q_MUL(r - (float)e->out_zp, e->out_scale);
}

/* the element offset of batch b in an attention operand of batch strides str (gdl_attn_geom: the batch
   dims as an odometer) */
static inline GDL_HD int64_t gdl_attn_base(const gdl_attn_geom *g, int64_t b, const int64_t *str) {
    int64_t off = 0;
    int d;
    for (d = g->nb - 1; d >= 0; d--) {
        off += (b % g->bshape[d]) * str[d];
        b /= g->bshape[d];
    }
    return off;
}
static inline GDL_HD int64_t gdl_attn_mask_base(const gdl_attn_geom *g, int64_t b) { return gdl_attn_base(g, b, g->mstr); }

GPUDL_API void gdl__set_error(const char *fmt, ...);
/* a backend calls it each time the host waits for its device (gdl_sync_count) */
GPUDL_API void gdl__count_sync(void);
/* The op that last chose a backend (gdl__be), for backends' error messages; "" before any. */
GPUDL_API const char *gdl__backend_op(void);
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
#endif

#ifdef __cplusplus
}
#endif
#endif /* GPUDL_H */

