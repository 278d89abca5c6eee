/* ---------------------------------------------------------------------------
   src/api/tensor.h — tensor creation, copies between devices, printing,
   dtype conversion, the CPU thread count.
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
/* cuda:0 if available, else cpu. A CUDA build (GPUDL_CUDA) that finds no GPU says so once on stderr
   ("gpudl: no CUDA device ...: using the CPU"); GPUDL_QUIET=1 in the environment silences it. */
GPUDL_API gdl_device gdl_default_device(void);
GPUDL_API int gdl_device_equal(gdl_device a, gdl_device b);
GPUDL_API const char *gdl_device_str(gdl_device d); /* "cpu", "cuda:0" (static) */
GPUDL_API const char *gdl_device_name(gdl_device d); /* "CPU" or the GPU's name */
/* How many times so far the host waited for a device: copies to the host
   (gdl_item, gdl_copy_to_host), synchronisations, a wait for an event not
   yet reached. A steady-state training step should make none. */
GPUDL_API int64_t gdl_sync_count(void);

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
GPUDL_API void gdl_free(gdl_tensor *t); /* NULL and temporaries: no-op; a tensor the library owns: refused (error) */

/* The generator: counter-based, same seed gives the same numbers. One per thread: gdl_manual_seed sets the
   calling thread's to (seed, 0) and makes seed the process seed, where a thread that never set its own
   starts at its first draw (MANUAL "Threads"). */
GPUDL_API void gdl_manual_seed(uint64_t seed);
GPUDL_API uint64_t gdl_rng_get_state(uint64_t *counter); /* returns seed */
GPUDL_API void gdl_rng_set_state(uint64_t seed, uint64_t counter);
GPUDL_API uint64_t gdl_rng_next_u64(void);
GPUDL_API double gdl_rng_uniform(void); /* [0,1) */

/* Copies and conversions. gdl_to keeps the lifetime kind of its source: a
   persistent source gives a persistent copy (a new leaf); a temporary gives
   a temporary that passes gradients back to its source, as PyTorch's .to(). */
GPUDL_API gdl_tensor *gdl_to(gdl_tensor *t, gdl_device dev);
/* a temporary; between float dtypes it passes gradients back (rounded to t's dtype) */
GPUDL_API gdl_tensor *gdl_to_dtype(gdl_tensor *t, gdl_dtype dt);
GPUDL_API gdl_tensor *gdl_clone(const gdl_tensor *t);            /* persistent, no grad */
/* Moves a persistent tensor (and its grad) to dev in place: the same
   gdl_tensor* now lives on dev, so pointers to it (optimizers) stay valid. */
GPUDL_API int gdl_move_(gdl_tensor *t, gdl_device dev);
GPUDL_API int gdl_copy_(gdl_tensor *dst, const gdl_tensor *src); /* same shape & dtype, any devices */
GPUDL_API int gdl_fill_(gdl_tensor *t, double value);
GPUDL_API int gdl_mul_scalar_(gdl_tensor *t, double s);          /* in place, no grad */
GPUDL_API int gdl_copy_to_host(const gdl_tensor *t, void *dst, size_t bytes);
/* The one element of a tensor as a double (a wait for a device). NaN + error otherwise, which a NaN loss cannot
   be told from: gdl_item_ex tells them apart. */
GPUDL_API double gdl_item(const gdl_tensor *t);
/* The one element in *out and 0; -1 + error (no element, a stale temporary, inside a graph capture, a
   failed copy) with *out untouched. A NaN element is a success: 0 with *out NaN. */
GPUDL_API int gdl_item_ex(const gdl_tensor *t, double *out);
GPUDL_API int gdl_print(const gdl_tensor *t, FILE *f);
GPUDL_API const char *gdl_shape_str(const gdl_tensor *t); /* "[64,784]" (thread-local ring) */
GPUDL_API int gdl_same_shape(const gdl_tensor *a, const gdl_tensor *b);

/* Half-precision conversions, round to nearest even. */
GPUDL_API uint16_t gdl_f32_to_f16(float x);
GPUDL_API float gdl_f16_to_f32(uint16_t h);
GPUDL_API uint16_t gdl_f32_to_bf16(float x);
GPUDL_API float gdl_bf16_to_f32(uint16_t h);

/* Row-major GEMM on host memory: C = alpha*op(A)*op(B) + beta*C,
   op(A) is MxK, op(B) is KxN. The built-in blocked kernel (or CBLAS). */
GPUDL_API void gdl_gemm_cpu(int transA, int transB, int M, int N, int K, gdl_real alpha,
                            const gdl_real *A, int lda, const gdl_real *B, int ldb,
                            gdl_real beta, gdl_real *C, int ldc);
/* The GEMM micro-kernel compiled in, e.g. "avx512 8x32", "avx2 6x16",
   "neon 8x12", "portable 4x8" or "cblas" (chosen at compile time). */
GPUDL_API const char *gdl_gemm_kernel_name(void);

/* Threads of the CPU kernels (gpudl's own pool; see src/runtime/thread_pool.h). The
   default is the environment's GPUDL_NUM_THREADS, else OMP_NUM_THREADS,
   else the CPUs this process may run on (sched_getaffinity). n <= 0 goes
   back to that default. Results are bitwise the same for any count. A
   GPUDL_NO_THREADS build always has 1. The pool and this count are shared by
   every thread that calls ops; the pool runs one parallel job at a time, and
   a kernel that finds it busy with another thread's job runs on its caller's
   thread alone, in the same bits (MANUAL "Threads"). */
GPUDL_API void gdl_set_num_threads(int n);
GPUDL_API int gdl_get_num_threads(void);

/* The internal precision of the CPU backend's f32 matrix products
   (PyTorch's torch.backends.mkldnn fp32_precision). "ieee", the default:
   f32 products and sums, bitwise the same on every CPU path and thread
   count. "bf16" allows the tile unit of AMX (Sapphire Rapids and later,
   built with -march=native, Linux 5.16 and later), or without AMX the
   dot products of AVX512-BF16 (Zen 4 and later, -march=native), where it
   has a path:
   every GEMM (linear, matmul, attention, the RNNs, 1x1 convolutions, the
   input gradients of the others) and the stride-1 one-group convolutions
   with at least 8 input and 16 output channels (their three passes; with
   AVX512-BF16 only those whose padding to blocks of 32 channels and
   positions leaves half the products or more: not 3x3 maps); the other
   convolutions' forward and weight gradient stay f32. Operands are
   rounded to bf16 (nearest even; subnormals to zero), the products summed
   in f32: up to ~20x the FMA rate a core on AMX, 2x with AVX512-BF16.
   Results keep their f32 dtype but not "ieee"'s bits, nor another CPU's;
   on one machine they are the same for any thread count. Returns 0 when
   set; -1 (gdl_last_error) for another string, or for "bf16" where the
   build or the CPU has neither: the precision then stays as it was. Set
   it between steps. */
GPUDL_API int gdl_cpu_set_fp32_precision(const char *precision);
GPUDL_API const char *gdl_cpu_get_fp32_precision(void);

