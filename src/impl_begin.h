/* ===========================================================================
   IMPLEMENTATION
   =========================================================================== */
#ifdef GPUDL_IMPLEMENTATION
#ifndef GPUDL_IMPLEMENTATION_DONE
#define GPUDL_IMPLEMENTATION_DONE

#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdarg.h>
#include <float.h>

#if defined(GPUDL_MALLOC) && defined(GPUDL_REALLOC) && defined(GPUDL_FREE)
/* user allocator */
#elif !defined(GPUDL_MALLOC) && !defined(GPUDL_REALLOC) && !defined(GPUDL_FREE)
#define GPUDL_MALLOC(sz) malloc(sz)
#define GPUDL_REALLOC(p, sz) realloc(p, sz)
#define GPUDL_FREE(p) free(p)
#else
#error "gpudl: define all of GPUDL_MALLOC, GPUDL_REALLOC and GPUDL_FREE, or none"
#endif

#ifndef GPUDL_ASSERT
#include <assert.h>
#define GPUDL_ASSERT(x) assert(x)
#endif

#if defined(__cplusplus) && __cplusplus >= 201103L
#define GDL__TLS thread_local
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__STDC_NO_THREADS__)
#define GDL__TLS _Thread_local
#elif defined(__GNUC__) || defined(__clang__)
#define GDL__TLS __thread
#elif defined(_MSC_VER)
#define GDL__TLS __declspec(thread)
#else
#define GDL__TLS
#endif

#if defined(__cplusplus)
#define GDL__RESTRICT __restrict
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L
#define GDL__RESTRICT restrict
#else
#define GDL__RESTRICT
#endif
/* A loop over an array of SIMD registers unrolled whatever the optimisation level: at -O2 gcc 12 leaves such
   loops rolled and the array in memory, each vector op then waiting on a store and a load (the bf16 dot
   kernel's sums: char_gpt's linear layers 1.3x slower; the convolutions' 16x16 transposes) */
#if defined(__GNUC__)
#define GDL__UNROLL _Pragma("GCC unroll 16")
#else
#define GDL__UNROLL
#endif
/* The kernels' loops over n elements are written for the vectoriser, but gcc's -O2, the level most builds
   use, vectorises only loops whose trip count it knows (gcc 12's "very-cheap" cost model; before gcc 12, none):
   gdl_add ran at half of -O3's speed. So the implementation is compiled with -O3's vectoriser settings at
   -O1 and -O2 (not at -O0 or -Os); a vectorised loop gives the scalar loop's bits (gcc reassociates no sum
   without -ffast-math). Undone at the implementation's end (src/impl_end.h). clang's -O2 vectorises. */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__INTEL_COMPILER) && defined(__OPTIMIZE__) &&                \
    !defined(__OPTIMIZE_SIZE__)
#define GDL__VECTORIZE_ALL 1
#pragma GCC push_options
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif

