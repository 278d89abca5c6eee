/*
gpudl_cuda.cu — the CUDA backend of gpudl: every kernel of `struct gdl_backend`
(see the src/api/backend.h section of gpudl.h), the cuBLAS GEMM path, and a caching
device allocator.

Build: one .c file of the program defines GPUDL_IMPLEMENTATION and includes
gpudl.h; this file includes gpudl.h for the declarations only and is compiled
as CUDA C++ (gpudl.h wraps its declarations in extern "C"):

    nvcc -O3 -arch=sm_90 -DGPUDL_CUDA examples/x.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl -o x

(-DGPUDL_NO_NCCL builds without NCCL: CUDA tensors then have no collectives.)

The CPU backend in gpudl.h (functions gdl__cpu_*) is the reference: each
kernel here computes what its CPU twin computes, in float (the CPU
accumulates some sums in double, so results agree to rounding). Backward
kernels accumulate (+=) into their outputs, as on the CPU.

Choices that matter for reproducibility:
- no floating-point atomics except in embedding_backward (the CPU order is
  kept by gathering instead: col2im, pooling backward, sum_to, layernorm's
  gamma/beta gradients), so a run gives the same bits every time;
- reductions over long rows use block reductions with a fixed block size
  for a given shape, so they are deterministic too;
- all work of a device (kernels, cuBLAS, copies, memsets) goes to one
  non-blocking compute stream of that device, in order, which is what makes
  handing a freed block to the next request safe without synchronising. The
  legacy default stream is not used: it cannot be captured into a CUDA graph
  and it would serialise against every other stream.

Every CUDA runtime and cuBLAS call is checked; a failure sets gdl_last_error()
to "gdl_cuda: <what> at <file>:<line> (<call>)" and the function returns -1
or NULL. Nothing here calls exit().
*/

#ifdef GPUDL_DOUBLE
#error "gpudl_cuda.cu: the CUDA backend computes in float; build without GPUDL_DOUBLE"
#endif
#ifndef GPUDL_CUDA
#define GPUDL_CUDA /* the declarations of gdl_cuda_* in gpudl.h need it */
#endif

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef GPUDL_NO_NCCL
#include <nccl.h>
#endif
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gpudl.h"

// ----------------------------------------------------------------------------
// error checking

// names the gpudl op that chose this backend last (gdl_linear, gdl_backward, gdl_step ...)
static void gdl__cu_report(const char *what, const char *file, int line, const char *call) {
    gdl__set_error("gdl_cuda: %s in %s at %s:%d (%s)", what, gdl__backend_op(), file, line, call);
}

// On failure: record the message, clear the (non-sticky) error state so the
// next call does not report it again, and return `fail` (-1 or NULL; empty in
// a void function).
#define GDL_CU_TRY(call, fail)                                                       \
    do {                                                                             \
        cudaError_t e_ = (call);                                                     \
        if (e_ != cudaSuccess) {                                                     \
            gdl__cu_report(cudaGetErrorString(e_), __FILE__, __LINE__, #call);       \
            (void)cudaGetLastError();                                                \
            return fail;                                                             \
        }                                                                            \
    } while (0)

#define GDL_CUBLAS_TRY(call, fail)                                                   \
    do {                                                                             \
        cublasStatus_t s_ = (call);                                                  \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                           \
            gdl__cu_report(cublasGetStatusString(s_), __FILE__, __LINE__, #call);    \
            (void)cudaGetLastError(); /* a failed launch inside cuBLAS */            \
            return fail;                                                             \
        }                                                                            \
    } while (0)

// After a kernel launch: a bad configuration shows up here; a fault inside
// the kernel shows up at the next synchronising call.
#define GDL_CU_LAUNCHED() GDL_CU_TRY(cudaGetLastError(), -1)

