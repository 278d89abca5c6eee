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

