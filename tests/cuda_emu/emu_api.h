/* emu_api.h — test controls of the CUDA-on-CPU emulator (tests/cuda_emu/):
   fault injection and event counters. C and C++; the functions exist only in
   emulator builds (-DGPUDL_EMU), so callers guard their use with
   #ifdef GPUDL_EMU. */
#ifndef GDL_EMU_API_H
#define GDL_EMU_API_H
#ifdef __cplusplus
extern "C" {
#endif

/* The k-th device allocation from now (1 = the next) fails with
   cudaErrorMemoryAllocation; 0 disarms. Returns 0. */
int gdl_emu_fail_alloc(long k);
/* The k-th kernel launch from now fails at launch time with
   cudaErrorLaunchOutOfResources (non-sticky, as a bad configuration); 0
   disarms. Returns 0. */
int gdl_emu_fail_launch(long k);
/* The k-th cuBLAS compute call from now (a GEMM; handle and mode calls are
   not counted) returns CUBLAS_STATUS_EXECUTION_FAILED without running; 0
   disarms. Returns 0. */
int gdl_emu_fail_cublas(long k);
/* The k-th cublasLtMatmulAlgoGetHeuristic call from now (1 = the next)
   finds no algorithm (CUBLAS_STATUS_NOT_SUPPORTED, count 0), as the real
   library may for a configuration; 0 disarms. Returns 0. */
int gdl_emu_lt_no_algo(long k);
/* Counts since the start of the process: "alloc" (cudaMalloc calls),
   "free" (cudaFree calls), "launch" (kernel launches, cuBLAS calls not
   included), "cublas" (cuBLAS compute calls), "memcpy" (calls of cudaMemcpy, cudaMemcpyAsync, cudaMemset, cudaMemsetAsync), "h2d" (those of them
   copying host memory to a device), "d2d" (those copying within or between devices), "memset" (cudaMemset, cudaMemsetAsync calls), "sync" (calls that made
   the host wait for the device: cudaDeviceSynchronize, cudaStreamSynchronize,
   cudaEventSynchronize, synchronous copies, cudaFree), "graph" (cudaGraphLaunch
   calls), "legacy" (kernels, copies and memsets queued on the legacy default
   stream), "race" (distinct shared- and global-memory hazards GPUDL_EMU_RACECHECK reported), "uninit"
   (distinct reads of uninitialised memory GPUDL_EMU_INITCHECK reported), "lt_no_algo" (cuBLASLt
   heuristic calls that returned no algorithm). -1 for an unknown name. */
long gdl_emu_count(const char *what);
/* Waits until every device has finished all its queued work, as the test's
   own wait: neither gpudl's gdl_sync_count nor the "sync" count sees it, so
   a test can make the device catch up without counting a synchronisation.
   Returns 0 (-1 without devices). */
int gdl_emu_drain(void);
/* The seconds an emulated NCCL collective (or ncclCommInitRank) waits for
   its peers before it breaks the communicator (ncclCommGetAsyncError then
   says ncclRemoteError); <= 0 restores the environment's: GPUDL_EMU_NCCL_TIMEOUT,
   else GPUDL_DIST_TIMEOUT (gpudl's, as the process has it at each wait),
   else 120 s. Returns 0. */
int gdl_emu_nccl_timeout(double seconds);
/* GPUDL_EMU_RACECHECK from a test: 1 turns the shared-memory hazard check on,
   0 off (for the code compiled with -fsanitize=thread; see cuda_emu.h).
   Returns 0, or -1 when no code of the program is instrumented (the check
   cannot see any access). Hazards found are counted as "race". */
int gdl_emu_racecheck(int on);
/* GPUDL_EMU_INITCHECK from a test: 1 turns the check of reads of
   uninitialised device and shared memory on, 0 off (kernels: the code
   compiled with -fsanitize=thread; copies, cuBLAS and NCCL operands: every
   build). Device memory allocated while no check was on has no shadow and
   is not checked. Returns 0, or -1 as gdl_emu_racecheck. Counted as "uninit". */
int gdl_emu_initcheck(int on);
/* For a suballocator (gpudl's caching allocator) that hands a block of a
   device allocation out again: bytes [p, p + n) count as never written for
   GPUDL_EMU_INITCHECK, and carry no writer or reader block for
   GPUDL_EMU_RACECHECK, from the point `stream` (a cudaStream_t; NULL the
   legacy stream) has reached: work queued before still sees the old state.
   Without a check on, or for memory with no shadow, nothing happens.
   Returns 0; -1 for an unknown stream or one that is capturing. */
int gdl_emu_mark_uninit(const void *p, size_t n, void *stream);
/* GPUDL_EMU_GEMM's mode: "plain", "perturbed" or "percall" (see cuda_emu.h).
   A test that expects two different GEMM calls to agree bitwise (true of the
   plain loop, not of a GPU) can ask for a tolerance unless "plain". */
const char *gdl_emu_gemm_mode(void);
/* The message of the last diagnostic the emulator reported (a kernel fault,
   a barrier or warp error, a bad copy or launch), "" if none. */
const char *gdl_emu_last_diagnostic(void);

#ifdef __cplusplus
}
#endif
#endif
