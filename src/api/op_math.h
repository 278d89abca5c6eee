/* ---------------------------------------------------------------------------
   src/api/op_math.h   The elementwise ops (enum gdl_binary_op, gdl_unary_op)
   and their scalar math, and the comparisons (gdl_compare_op), written once
   for both backends: the CPU kernels (src/cpu/elementwise.h, lowp.h,
   bias_act.h, index.h, the GEMM's epilogue) and the CUDA kernels
   (cuda/elementwise.cu, bias_act.cu, index.cu) call the functions below,
   __host__ __device__ under nvcc.
   ------------------------------------------------------------------------- */

/* MIN, MAX, POW: torch.minimum, maximum and pow (NaN propagates through min and max); the rest are their
   derivatives, for the backwards: MAX_DA = d max(a,b)/da (1 where a > b, 1/2 on a tie, 0 where a < b, 1
   where unordered; MIN_DA the same for min; d/db is the same code with a and b swapped), POW_DA = d a^b/da
   (0 where b == 0), POW_DB = d a^b/db (0 where a == 0 and b >= 0), GRAD_SCALE = a * b but exactly 0 where
   b == 0 (PyTorch masks such gradients: an infinite one does not become NaN) */
enum gdl_binary_op {
    GDL_BIN_ADD, GDL_BIN_SUB, GDL_BIN_MUL, GDL_BIN_DIV, GDL_BIN_MIN, GDL_BIN_MAX, GDL_BIN_POW,
    GDL_BIN_MAX_DA, GDL_BIN_MIN_DA, GDL_BIN_POW_DA, GDL_BIN_POW_DB, GDL_BIN_GRAD_SCALE
};
/* CLAMP_MIN / CLAMP_MAX: max(x, alpha) / min(x, alpha), NaN kept, the gradient passing where x >= alpha /
   x <= alpha (torch.clamp_min / clamp_max) */
enum gdl_unary_op {
    GDL_UN_RELU, GDL_UN_LEAKY_RELU, GDL_UN_SIGMOID, GDL_UN_TANH, GDL_UN_GELU_ERF,
    GDL_UN_GELU_TANH, GDL_UN_EXP, GDL_UN_LOG, GDL_UN_SCALE, GDL_UN_ADD_SCALAR,
    GDL_UN_POW, GDL_UN_SQRT, GDL_UN_RSQRT, GDL_UN_ABS, GDL_UN_CLAMP_MIN, GDL_UN_CLAMP_MAX
};

/* GDL_HD: a function both backends compile (host and device under nvcc). The op math is forced inline on
   the device, as the kernels' own functions were: nvcc then sees, and contracts, the same expressions. */
#ifdef __CUDACC__
#define GDL_HD __host__ __device__
#define GDL__OPM_FN static __host__ __device__ __forceinline__
#else
#define GDL_HD
#define GDL__OPM_FN static inline
#endif

/* GDL__OP_MATH(N, T, G, F) defines, with F the suffix of the libm functions and the literals (f, or nothing:
   double's):
     T gdl_unary1_N(op, T x, T alpha)            y = f(x; alpha)
     G gdl_unary_grad1_N(op, G x, G y, G alpha)  dy/dx at x, the forward's output y given
     T gdl_binary1_N(op, T a, T b)               a op b
   Each switch names every code of its enum and has no default: a code without a case fails the build
   (-Wswitch, an error here under GCC and Clang); a value outside the enum gives NaN.

   Two definitions, one per backend, since every result is pinned bit for bit (tests/train_trace.c, the
   CPU/GPU parity tables) and the backends' precisions differ:
     gdl_*_float  the CUDA kernels': float arithmetic, CUDA's float functions (expf, tanhf, powf ...);
     gdl_*_real   the CPU's: gdl_real arithmetic (f32, or f64 under GPUDL_DOUBLE) where an op is a selection
                  or one operation (relu, clamp, scale, min, a + b ...), and where it takes a libm function or
                  a literal, double (libm's exp, tanh, pow ... and double constants), the result rounded once
                  to gdl_real; the derivatives all in double.
   One case stays apart: in f32 builds the CPU's GELU (erf) is its own polynomial, gdl__gelu_f32
   (src/cpu/elementwise.h: the erf formula below in double was a fifth of a GPT's step); the CPU calls it
   instead of the GELU_ERF case, whose formula the GPU and the GPUDL_DOUBLE build compute. Apart too, as
   loops of their own for speed, with their bits pinned as they are: the CPU's vectorised ReLU and GELU
   rows, its loops for the cheap ops in gdl__cpu_unary / gdl__cpu_unary_backward and their bf16/f16 twins
   (src/cpu/lowp.h; their sigmoid and tanh backwards multiply in gdl_real, gy * y * (1 - y), not in double),
   and the CUDA backward's selection of gy for ReLU and clamp. An op without such a loop needs none. */
#define GDL__OP_MATH(N, T, G, F) \
    GDL__OPM_FN T gdl_unary1_##N(enum gdl_unary_op op, T x, T alpha) { \
        switch (op) { \
        case GDL_UN_RELU: return x > 0 ? x : (T)0; \
        case GDL_UN_LEAKY_RELU: return x > 0 ? x : alpha * x; \
        case GDL_UN_SIGMOID: return (T)(1.0##F / (1.0##F + exp##F(-x))); \
        case GDL_UN_TANH: return (T)tanh##F(x); \
        case GDL_UN_GELU_ERF: return (T)(0.5##F * x * (1.0##F + erf##F(x * 0.7071067811865476##F))); \
        case GDL_UN_GELU_TANH: \
            return (T)(0.5##F * x * (1.0##F + tanh##F(0.7978845608028654##F * (x + 0.044715##F * x * x * x)))); \
        case GDL_UN_EXP: return (T)exp##F(x); \
        case GDL_UN_LOG: return (T)log##F(x); \
        case GDL_UN_SCALE: return alpha * x; \
        case GDL_UN_ADD_SCALAR: return x + alpha; \
        case GDL_UN_POW: return (T)pow##F(x, alpha); \
        case GDL_UN_SQRT: return (T)sqrt##F(x); \
        case GDL_UN_RSQRT: return (T)(1.0##F / sqrt##F(x)); \
        case GDL_UN_ABS: return (T)fabs##F(x); \
        case GDL_UN_CLAMP_MIN: return x < alpha ? alpha : x; \
        case GDL_UN_CLAMP_MAX: return x > alpha ? alpha : x; \
        } \
        return (x - x) / (x - x); \
    } \
    GDL__OPM_FN G gdl_unary_grad1_##N(enum gdl_unary_op op, G x, G y, G alpha) { \
        switch (op) { \
        case GDL_UN_RELU: return x > 0 ? (G)1 : (G)0; \
        case GDL_UN_LEAKY_RELU: return x > 0 ? (G)1 : alpha; \
        case GDL_UN_SIGMOID: return y * (1.0##F - y); \
        case GDL_UN_TANH: return 1.0##F - y * y; \
        case GDL_UN_GELU_ERF: \
            return 0.5##F * (1.0##F + erf##F(x * 0.7071067811865476##F)) + \
                   x * exp##F(-0.5##F * x * x) * 0.3989422804014327##F; \
        case GDL_UN_GELU_TANH: { \
            const G u = 0.7978845608028654##F * (x + 0.044715##F * x * x * x), th = tanh##F(u); \
            return 0.5##F * (1.0##F + th) + \
                   0.5##F * x * (1.0##F - th * th) * 0.7978845608028654##F * (1.0##F + 3.0##F * 0.044715##F * x * x); \
        } \
        case GDL_UN_EXP: return y; \
        case GDL_UN_LOG: return 1.0##F / x; \
        case GDL_UN_SCALE: return alpha; \
        case GDL_UN_ADD_SCALAR: return (G)1; \
        case GDL_UN_POW: return alpha * pow##F(x, alpha - 1.0##F); \
        case GDL_UN_SQRT: return 0.5##F / y;          /* PyTorch: grad / (2 * result) */ \
        case GDL_UN_RSQRT: return -0.5##F * y * y * y; /* -0.5 * grad * result^3 */ \
        case GDL_UN_ABS: return x > 0 ? (G)1 : x < 0 ? (G)-1 : (G)0; /* sgn: 0 at 0 and NaN */ \
        case GDL_UN_CLAMP_MIN: return x >= alpha ? (G)1 : (G)0; \
        case GDL_UN_CLAMP_MAX: return x <= alpha ? (G)1 : (G)0; \
        } \
        return (x - x) / (x - x); \
    } \
    GDL__OPM_FN T gdl_binary1_##N(enum gdl_binary_op op, T a, T b) { \
        switch (op) { \
        case GDL_BIN_ADD: return a + b; \
        case GDL_BIN_SUB: return a - b; \
        case GDL_BIN_MUL: return a * b; \
        case GDL_BIN_DIV: return a / b; \
        case GDL_BIN_MIN: return a != a ? a : b != b ? b : a < b ? a : b; \
        case GDL_BIN_MAX: return a != a ? a : b != b ? b : a > b ? a : b; \
        case GDL_BIN_POW: return (T)pow##F(a, b); \
        case GDL_BIN_MAX_DA: return a > b ? (T)1 : a == b ? (T)0.5##F : a < b ? (T)0 : (T)1; \
        case GDL_BIN_MIN_DA: return a < b ? (T)1 : a == b ? (T)0.5##F : a > b ? (T)0 : (T)1; \
        case GDL_BIN_POW_DA: return b == 0 ? (T)0 : (T)(b * pow##F(a, b - 1.0##F)); \
        case GDL_BIN_POW_DB: return a == 0 && b >= 0 ? (T)0 : (T)(pow##F(a, b) * log##F(a)); \
        case GDL_BIN_GRAD_SCALE: return b == 0 ? (T)0 : a * b; \
        } \
        return (a - a) / (a - a); \
    }

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"
#endif
GDL__OP_MATH(float, float, float, f)
GDL__OP_MATH(real, gdl_real, double, )
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* gdl_compare1_N(op, a, b): a op b for one gdl_compare_op, 1 or 0 (NaN compares unequal to all, as in
   PyTorch). The CPU compares in double (integers exactly, floats as loaded), the GPU integer pairs in int32
   and the rest in float. */
#define GDL__COMPARE1(N, T) \
    GDL__OPM_FN int gdl_compare1_##N(int op, T a, T b) { \
        switch (op) { \
        case GDL_CMP_EQ: return a == b; \
        case GDL_CMP_NE: return a != b; \
        case GDL_CMP_LT: return a < b; \
        case GDL_CMP_LE: return a <= b; \
        case GDL_CMP_GT: return a > b; \
        default: return a >= b; /* GDL_CMP_GE */ \
        } \
    }
GDL__COMPARE1(double, double)
GDL__COMPARE1(float, float)
GDL__COMPARE1(i32, int32_t)
