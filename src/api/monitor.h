/* ---------------------------------------------------------------------------
   src/api/monitor.h   What nvidia-smi shows, from NVIDIA's management library
   (NVML), loaded at run time with dlopen: no link dependency, and a program
   without the NVIDIA driver (CI, the CUDA emulator, a CPU-only machine)
   gets a clear "NVML not available" error instead. GPUDL_NVML_LIB in the
   environment names another library file by absolute path (tests use a
   stand-in; ignored in a setuid/setgid process; the manual's table).
   Enabled with GPUDL_CUDA or GPUDL_NVML; otherwise the calls fail with a
   message saying how to enable them.
       gdl_gpu_status s;
       if (gdl_gpu_stats(0, &s) == 0) printf("%s %d%% %.1f GiB\n", s.name, s.utilization, s.memory_used / 1073741824.0);
   ------------------------------------------------------------------------- */
typedef struct gdl_gpu_status {
    char name[96];
    int utilization;            /* % of the last sample period a kernel ran; -1 if the GPU does not say */
    int memory_utilization;     /* % of it device memory was read or written; -1 likewise */
    size_t memory_used, memory_total; /* bytes */
    int temperature;            /* degrees C; -1 if unknown */
    double power, power_limit;  /* watts; NaN if unknown */
    int sm_clock, memory_clock; /* MHz; -1 if unknown */
} gdl_gpu_status;

/* The GPUs gdl_gpu_stats takes (indices 0..count-1): CUDA's where CUDA sees a GPU, else NVML's.
   -1 + error (NVML not available). */
GPUDL_API int gdl_gpu_count(void);
/* The current figures of GPU index. 0 / -1 + error (NVML not available, no such GPU).
   Where CUDA sees a GPU (GPUDL_CUDA), index is CUDA's (gdl_cuda(index)): the NVML device with the
   same PCI bus id, right under CUDA_VISIBLE_DEVICES too. Elsewhere (a CPU build with GPUDL_NVML, or
   a CUDA build that found no GPU) index is NVML's own (the order of nvidia-smi). */
GPUDL_API int gdl_gpu_stats(int index, gdl_gpu_status *s);

/* What gpudl's own allocators hold on a device, like torch.cuda.memory_stats / memory_summary /
   reset_peak_memory_stats. Counted by the allocator of the device's backend since the program started
   (peaks since the last gdl_memory_reset_peak); sizes in bytes.
   CUDA: the caching allocator. Sizes are its rounded block sizes (multiples of 512 bytes);
   reserved = handed out + cached; a request is served from the cache (a hit) or by cudaMalloc.
   CPU: malloc for persistent tensors' data; nothing is cached, so reserved = allocated and every
   request is a malloc. Arena: the per-step arena of temporaries (CPU: with their headers and the tape).
       printf("%s", gdl_memory_summary(gdl_cuda(0)));                                                  */
typedef struct gdl_memory_status {
    size_t allocated, peak_allocated; /* handed out and not yet freed */
    size_t reserved, peak_reserved;   /* held from the system (CUDA: allocated + the cache) */
    int64_t requests;                 /* allocations asked of the allocator */
    int64_t cache_hits;               /* served from the cache (CUDA) */
    int64_t device_mallocs;           /* cudaMalloc (CUDA) or malloc (CPU) calls */
    int64_t frees;
    int64_t cache_releases;           /* times the cache went back to the driver (an out-of-memory retry,
                                         gdl_shutdown) */
    size_t arena_used, arena_reserved;
} gdl_memory_status;
GPUDL_API int gdl_memory_stats(gdl_device dev, gdl_memory_status *s); /* 0 / -1 + error */
/* peak_allocated and peak_reserved restart from the current figures. 0 / -1 + error. */
GPUDL_API int gdl_memory_reset_peak(gdl_device dev);
/* gdl_memory_stats as a table (a thread-local buffer, valid until the next call; NULL + error). */
GPUDL_API const char *gdl_memory_summary(gdl_device dev);

/* The profiler, like torch.profiler's key_averages().table(): between gdl_profile_begin and
   gdl_profile_end every op (gdl_matmul, ...), every backward function ("gdl_matmul backward"),
   gdl_step, gdl_copy_ (and so gdl_to) and gdl_loader_next (its wait for a batch) is timed per call.
       gdl_profile_begin();
       ... some training steps ...
       gdl_profile_end();
       gdl_profile_print(stdout);              (Name, Device, Calls, Total, Avg, Max, %, Launches)
       gdl_profile_trace("trace.json");        (open in Perfetto or chrome://tracing)
   The CPU is timed with the host's monotonic clock around the op (gdl_now, microseconds,
   where -std=c99 hides clock_gettime). A CUDA op is timed on the GPU by events
   recorded in its stream before and after it; they are read at gdl_profile_end (one wait
   there, none per op), and "Launches" counts its kernels (a cuBLAS call counts as one).
   An op's time starts after its argument checks and ends when it returns its result; an op
   that fails is not counted. The op layer's thread is profiled (ops are single-threaded).
   With the profiler off an op pays an untaken branch where it starts and one where it ends.
   gdl_profile_begin while it runs, or gdl_profile_end while it does not: -1 + error. */
typedef struct gdl_profile_row {
    const char *name;       /* "gdl_linear", "gdl_linear backward", "gdl_step", ... */
    gdl_device device;      /* where it ran (CUDA rows are timed on the GPU) */
    int64_t calls;
    double total_ms, avg_ms, max_ms, percent; /* percent of all rows' total */
    int64_t launches;       /* kernels launched; -1 on the CPU (not counted) */
} gdl_profile_row;
GPUDL_API int gdl_profile_begin(void);
GPUDL_API int gdl_profile_end(void);
/* The last profile's rows, sorted by total time (longest first): their count, *rows valid until
   the next gdl_profile_begin. -1 + error before any profile has ended. */
GPUDL_API int gdl_profile_rows(const gdl_profile_row **rows);
GPUDL_API int gdl_profile_print(FILE *f); /* the rows as a table. 0 / -1 + error */
/* The last profile in Chrome's Trace Event Format: one "X" event per call, in microseconds
   from gdl_profile_begin; host times on tid 1, GPU times on tid 2 + the device index. 0 / -1. */
GPUDL_API int gdl_profile_trace(const char *path);


/* Model FLOPs and utilisation (llm.c's MFU): the FLOPs of the GEMM-like ops (linear, matmul / bmm,
   conv2d with groups and dilation, attention's two products; the LSTM / GRU gates through linear)
   that this thread ran since gdl_flops_reset, counted from their shapes, 2 FLOPs per multiply-add;
   a backward counts each gradient GEMM it runs (2x the forward where both operands want gradients,
   the data's layer 1x: as PyTorch's FlopCounterMode). Per thread; a CUDA graph's replay counts
   nothing (count an eager step).
       gdl_flops_reset(); ... a step ...; int64_t f = gdl_flops_count(NULL, NULL);
       printf("%s\n", gdl_flops_line((double)f, seconds, dev, GDL_F32));
   gdl_flops_line: "FLOPs/step X, Y GFLOP/s, Z % of peak (P GFLOP/s, N threads, ISA)" (a GPU:
   "(P GFLOP/s, bf16 dense, <name>)"), in a per-thread buffer valid until the next call. The
   peaks: gdl_cpu_peak_gflops(threads) runs an FMA loop in the GEMM's ISA on that many of the
   pool's threads (0: all) for ~80 ms, once per count, and adds up each thread's fastest timed
   stretch: the cores' rate while they run, so another process's load shows as a lower fraction;
   gdl_gpu_peak_gflops(index, dtype) is NVIDIA's datasheet figure (dense; f32 on the CUDA cores,
   bf16 / f16 on the tensor cores) for the H200, H100 (SXM, PCIe, NVL), A100, A10, A30, L40S, L40,
   L4, V100 and T4. Both -1 + error. */
GPUDL_API void gdl_flops_reset(void);
GPUDL_API int64_t gdl_flops_count(int64_t *forward, int64_t *backward); /* forward + backward */
GPUDL_API double gdl_cpu_peak_gflops(int threads);
GPUDL_API double gdl_gpu_peak_gflops(int index, gdl_dtype dt);
GPUDL_API const char *gdl_flops_line(double flops_per_step, double seconds_per_step, gdl_device dev, gdl_dtype dt);
