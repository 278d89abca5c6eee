#ifndef GPUDL_H
#define GPUDL_H

#define GPUDL_VERSION_MAJOR 0
#define GPUDL_VERSION_MINOR 1
#define GPUDL_VERSION_PATCH 0
#define GPUDL_VERSION "0.1.0"

#if defined(__MINGW32__) && !defined(__USE_MINGW_ANSI_STDIO)
#define __USE_MINGW_ANSI_STDIO 1 /* C99's printf (%zu, %lld), not msvcrt's: gpudl's messages use them */
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h> /* the elementwise ops' scalar math (src/api/op_math.h); here, outside extern "C" */

#ifdef GPUDL_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define GPUDL_API static __attribute__((unused)) /* a program uses only some of them */
#else
#define GPUDL_API static
#endif
#else
#define GPUDL_API extern
#endif

/* GDL_DEPRECATED(msg) marks a call kept for one release under an older spelling: the compiler warns where a
   program calls it (-Wdeprecated-declarations; MSVC C4996). Define GPUDL_NO_DEPRECATED_WARNINGS before
   including gpudl.h to silence it. */
#if defined(GPUDL_NO_DEPRECATED_WARNINGS)
#define GDL_DEPRECATED(msg)
#elif defined(__GNUC__) || defined(__clang__)
#define GDL_DEPRECATED(msg) __attribute__((deprecated(msg)))
#elif defined(_MSC_VER)
#define GDL_DEPRECATED(msg) __declspec(deprecated(msg))
#else
#define GDL_DEPRECATED(msg)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
   src/api/types.h
   ------------------------------------------------------------------------- */

#ifdef GPUDL_DOUBLE
typedef double gdl_real;   /* the compute type behind GDL_F32 */
#else
typedef float gdl_real;
#endif

/* The float dtypes are all computed on, in f32 arithmetic (MANUAL: Dtypes). */
typedef enum gdl_dtype {
    GDL_F32 = 0, /* float (gdl_real), the kernels' compute type */
    GDL_I32,     /* labels, indices */
    GDL_U8,      /* raw pixels */
    GDL_F16,     /* IEEE half: ops compute in f32 and round their result to f16 */
    GDL_BF16,    /* bfloat16: likewise */
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
struct gdl__flat;

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
    unsigned gen;                 /* a temporary's arena generation (gdl_arena_reset count); 0 if persistent */
    unsigned owner;               /* GDL__OWN_*: who frees it, 0 the caller (gdl_free refuses the others) */
    struct gdl_node *node;        /* the op that made it, NULL for leaves */
    struct gdl_node *last_use;    /* during gdl_backward with a gradient-ready hook: the oldest node reading it */
    const char *name;             /* optional, for messages and checkpoints */
    struct gdl__flat *flat;       /* data is a view into an optimizer's flat block (one reference held) */
};

/* GDL_DIMS(2, 3) expands to the (ndim, shape) argument pair (C only). */
#ifndef __cplusplus
#define GDL_DIMS(...) \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}
#endif

