/* ---------------------------------------------------------------------------
   src/cpu/peak.h   The CPU's f32 FMA peak, measured (gdl_cpu_peak_gflops),
   and the utilisation line every training program prints (gdl_flops_line).

   The peak: each thread of the pool runs independent FMA chains in the
   vector width the GEMM's micro-kernel uses (AVX-512, AVX2 + FMA, NEON, or
   the portable C loop the compiler vectorises as it can: the ISA the build
   targets, src/cpu/gemm.h), all at once, for ~80 ms, timing each stretch of
   ~16k FMA instructions; the peak is the sum over the threads of each one's
   fastest stretch. 12 chains cover two FMA units' 4-6 cycle latency. The
   fastest stretch is the core's rate while the thread runs: on a machine
   that other processes keep busy the figure stays the hardware's (the
   threads are descheduled between stretches, not slowed within one), and
   the load shows where it belongs, as a lower fraction of it. Measured once
   per thread count and kept.
   With CBLAS the portable loop stands for OpenBLAS's own kernels. The bf16
   and f16 GEMMs run on the CPU through f32 copies: their peak is f32's.
   Under the bf16 precision (gdl_cpu_set_fp32_precision) the line's peak is
   that of the bf16 products, measured the same way (on AMX chains of tile
   products into 4 accumulator tiles; with AVX512-BF16 alone 12 chains of
   vdpbf16ps, 32 multiply-adds each), with the fraction of the FMA peak
   after it.
   ------------------------------------------------------------------------- */
#if defined(GDL__GEMM_AVX512)
#define GDL__PEAK_ISA "avx512 fma"
#define GDL__PEAK_V __m512
#define GDL__PEAK_SET(x) _mm512_set1_ps(x)
#define GDL__PEAK_FMA(a, m, c) _mm512_fmadd_ps(a, m, c)
#define GDL__PEAK_LANES 16
#define GDL__PEAK_SUM(v) _mm512_reduce_add_ps(v)
#elif defined(GDL__GEMM_AVX2)
#define GDL__PEAK_ISA "avx2 fma"
#define GDL__PEAK_V __m256
#define GDL__PEAK_SET(x) _mm256_set1_ps(x)
#define GDL__PEAK_FMA(a, m, c) _mm256_fmadd_ps(a, m, c)
#define GDL__PEAK_LANES 8
#define GDL__PEAK_SUM(v) _mm_cvtss_f32(_mm256_castps256_ps128(v))
#elif defined(GDL__GEMM_NEON)
#define GDL__PEAK_ISA "neon fma"
#define GDL__PEAK_V float32x4_t
#define GDL__PEAK_SET(x) vdupq_n_f32(x)
#define GDL__PEAK_FMA(a, m, c) vfmaq_f32(c, a, m)
#define GDL__PEAK_LANES 4
#define GDL__PEAK_SUM(v) vgetq_lane_f32(v, 0)
#else
#define GDL__PEAK_ISA "portable"
#endif
#define GDL__PEAK_CHAINS 12
#define GDL__PEAK_SECONDS 0.08

typedef struct gdl__peak_job {
    int bf16;                       /* the bf16 products (tile unit or vdpbf16ps), not FMAs */
    double t_end;                   /* the tasks stop at this gdl__prof_clock */
    double rate[GDL__POOL_MAX];     /* each task's fastest stretch, FLOP/s */
    volatile float sink[GDL__POOL_MAX]; /* each task's chains' sum goes here, so its loop stays */
} gdl__peak_job;

/* A stretch of `flops` FLOPs since *t0 has ended: its rate into *best if faster, *t0 the clock now; 1
   while that is before t_end */
static int gdl__peak_lap(double flops, double t_end, double *t0, double *best) {
    const double t1 = gdl__prof_clock();
    if (t1 > *t0 && flops / (t1 - *t0) > *best) *best = flops / (t1 - *t0);
    *t0 = t1;
    return t1 < t_end;
}

#if defined(GDL__GEMM_AMX)
/* The tile unit's rate on this thread: 4 accumulator tiles, each 16 x 16 sums of 32 products a step */
static double gdl__peak_bf16(double t_end, volatile float *sink) {
    static const uint16_t zeros[16 * 32] = {0}; /* the rate does not depend on the values */
    const double stretch = 1024.0 * 4 * 16 * 16 * 32 * 2;
    double best = 0, t0 = gdl__prof_clock();
    int i;
    gdl__tile_ready();
    _tile_loadd(4, zeros, 64);
    _tile_loadd(5, zeros, 64);
    _tile_loadd(6, zeros, 64);
    _tile_loadd(7, zeros, 64);
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    do {
        for (i = 0; i < 1024; i++) {
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    } while (gdl__peak_lap(stretch, t_end, &t0, &best));
    (void)sink; /* the tiles' loop has no sums in registers for the compiler to drop */
    return best;
}
#elif defined(GDL__GEMM_BF16)
/* vdpbf16ps's rate on this thread: 12 chains of 16 lanes, 32 products (64 FLOPs) an instruction; the
   pairs are (1, 0) and (0, 0): the sums stay 0; their total goes to *sink, so the loop stays */
static double gdl__peak_bf16(double t_end, volatile float *sink) {
    const double stretch = 64 * 256.0 * GDL__PEAK_CHAINS * 16 * 2 * 2;
    const __m512bh m = (__m512bh)_mm512_set1_epi32(0x3f80), z = (__m512bh)_mm512_setzero_si512();
    __m512 a[GDL__PEAK_CHAINS];
    double best = 0, t0 = gdl__prof_clock();
    float s = 0;
    int i, k;
    for (k = 0; k < GDL__PEAK_CHAINS; k++) a[k] = _mm512_setzero_ps();
    do {
        for (i = 0; i < 64 * 256; i++) { /* written out, as the FMAs' below: a loop may keep a[] in memory */
            a[0] = _mm512_dpbf16_ps(a[0], m, z); a[1] = _mm512_dpbf16_ps(a[1], m, z); a[2] = _mm512_dpbf16_ps(a[2], m, z);
            a[3] = _mm512_dpbf16_ps(a[3], m, z); a[4] = _mm512_dpbf16_ps(a[4], m, z); a[5] = _mm512_dpbf16_ps(a[5], m, z);
            a[6] = _mm512_dpbf16_ps(a[6], m, z); a[7] = _mm512_dpbf16_ps(a[7], m, z); a[8] = _mm512_dpbf16_ps(a[8], m, z);
            a[9] = _mm512_dpbf16_ps(a[9], m, z); a[10] = _mm512_dpbf16_ps(a[10], m, z); a[11] = _mm512_dpbf16_ps(a[11], m, z);
        }
    } while (gdl__peak_lap(stretch, t_end, &t0, &best));
    for (k = 0; k < GDL__PEAK_CHAINS; k++) s += _mm512_reduce_add_ps(a[k]);
    *sink = s;
    return best;
}
#endif

/* task t: FMAs on GDL__PEAK_CHAINS independent accumulators in stretches of 64 x 256 steps, each timed,
   until t_end; its fastest stretch's FLOP/s. a = a*m + c with m = 1 - c stays at 1: no overflow, no
   denormals. */
static void gdl__peak_task(void *ctx, int t, int nt) {
    gdl__peak_job *j = (gdl__peak_job *)ctx;
    double best = 0, t0 = gdl__prof_clock();
    int i, k;
#ifdef GDL__GEMM_BF16
    if (j->bf16) {
        (void)nt;
        j->rate[t] = gdl__peak_bf16(j->t_end, &j->sink[t]);
        return;
    }
#endif
#if defined(GDL__GEMM_AVX512) || defined(GDL__GEMM_AVX2) || defined(GDL__GEMM_NEON)
    const double stretch = 64 * 256.0 * GDL__PEAK_CHAINS * GDL__PEAK_LANES * 2; /* FLOPs */
    GDL__PEAK_V a[GDL__PEAK_CHAINS], m = GDL__PEAK_SET(0.9999f), c = GDL__PEAK_SET(0.0001f);
    float s = 0;
    for (k = 0; k < GDL__PEAK_CHAINS; k++) a[k] = GDL__PEAK_SET(1.0f);
    do {
        for (i = 0; i < 64 * 256; i++) {
            a[0] = GDL__PEAK_FMA(a[0], m, c); a[1] = GDL__PEAK_FMA(a[1], m, c); a[2] = GDL__PEAK_FMA(a[2], m, c);
            a[3] = GDL__PEAK_FMA(a[3], m, c); a[4] = GDL__PEAK_FMA(a[4], m, c); a[5] = GDL__PEAK_FMA(a[5], m, c);
            a[6] = GDL__PEAK_FMA(a[6], m, c); a[7] = GDL__PEAK_FMA(a[7], m, c); a[8] = GDL__PEAK_FMA(a[8], m, c);
            a[9] = GDL__PEAK_FMA(a[9], m, c); a[10] = GDL__PEAK_FMA(a[10], m, c); a[11] = GDL__PEAK_FMA(a[11], m, c);
        }
    } while (gdl__peak_lap(stretch, j->t_end, &t0, &best));
    for (k = 0; k < GDL__PEAK_CHAINS; k++) s += GDL__PEAK_SUM(a[k]);
#else
    /* 4 x 12 scalars: what the portable kernel's C becomes, vectorised by the compiler as the target allows */
    const double stretch = 64 * 256.0 * 4 * GDL__PEAK_CHAINS * 2;
    gdl_real a[4 * GDL__PEAK_CHAINS], m = (gdl_real)0.9999, c = (gdl_real)0.0001, s = 0;
    for (k = 0; k < 4 * GDL__PEAK_CHAINS; k++) a[k] = 1;
    do {
        for (i = 0; i < 64 * 256; i++)
            for (k = 0; k < 4 * GDL__PEAK_CHAINS; k++) a[k] = a[k] * m + c;
    } while (gdl__peak_lap(stretch, j->t_end, &t0, &best));
    for (k = 0; k < 4 * GDL__PEAK_CHAINS; k++) s += a[k];
#endif
    (void)nt;
    j->rate[t] = best;
    j->sink[t] = (float)s;
}

#ifdef GDL__OS_THREADS
static gdl__mutex gdl__peak_mu = GDL__MUTEX_INIT; /* one measurement at a time; guards the cache */
#define GDL__PEAK_LOCK() gdl__mutex_lock(&gdl__peak_mu)
#define GDL__PEAK_UNLOCK() gdl__mutex_unlock(&gdl__peak_mu)
#else
#define GDL__PEAK_LOCK() ((void)0)
#define GDL__PEAK_UNLOCK() ((void)0)
#endif
static double gdl__peak_cache[2][GDL__POOL_MAX + 1]; /* GFLOP/s by thread count, [bf16]; 0: not measured */

/* the measurement on `threads` of the pool (the caller holds the pool) */
static double gdl__peak_measure(int threads, int bf16) {
    gdl__peak_job *j = (gdl__peak_job *)calloc(1, sizeof *j);
    double sum = 0;
    int t;
    if (!j) return -1;
    j->bf16 = bf16;
    j->t_end = gdl__prof_clock() + GDL__PEAK_SECONDS;
    gdl__pool_run(threads, gdl__peak_task, j);
    for (t = 0; t < threads; t++) sum += j->rate[t];
    free(j);
    return sum > 0 ? sum * 1e-9 : -1;
}

/* The measured peak: the FMAs' (bf16 0) or the bf16 products' (1). */
static double gdl__cpu_peak(const char *op, int threads, int bf16) {
    double p;
    int tries;
    if (threads == 0) threads = gdl_get_num_threads();
    if (threads < 1 || threads > gdl_get_num_threads()) {
        gdl__set_error("%s: %d threads: 1 to the pool's %d (gdl_set_num_threads), or 0 for all of them", op, threads,
                       gdl_get_num_threads());
        return -1;
    }
    GDL__PEAK_LOCK();
    p = gdl__peak_cache[bf16][threads];
    for (tries = 0; p <= 0 && tries < 2000; tries++) { /* the pool may be busy with another thread's op: wait */
        if (gdl__pool_acquire()) {
            p = gdl__peak_cache[bf16][threads] = gdl__peak_measure(threads, bf16);
            gdl__pool_release();
            if (p <= 0) break;
        } else {
            gdl__os_sleep_ms(1);
        }
    }
    GDL__PEAK_UNLOCK();
    if (p <= 0) gdl__set_error("%s: could not measure: %s", op, tries >= 2000 ? "the thread pool stayed busy" : "out of memory");
    return p > 0 ? p : -1;
}
GPUDL_API double gdl_cpu_peak_gflops(int threads) { return gdl__cpu_peak("gdl_cpu_peak_gflops", threads, 0); }

/* The line, e.g. "FLOPs/step 1.43e+08, 26.4 GFLOP/s, 8.8 % of peak (300.1 GFLOP/s, 2 threads, avx512 fma)";
   the peak of dev for dt: the CPU's measured with the threads in use, a GPU's from its datasheet. */
GPUDL_API const char *gdl_flops_line(double flops_per_step, double seconds_per_step, gdl_device dev, gdl_dtype dt) {
    static GDL__TLS char buf[256];
    double rate = seconds_per_step > 0 ? flops_per_step / seconds_per_step * 1e-9 : NAN, peak;
    char how[160];
    int n;
    if (dev.type == GDL_DEVICE_CPU) {
        int threads = gdl_get_num_threads();
        peak = gdl_cpu_peak_gflops(threads);
        snprintf(how, sizeof how, "%d thread%s, %s", threads, threads == 1 ? "" : "s", GDL__PEAK_ISA);
#ifdef GDL__GEMM_BF16
        if (gdl__cpu_bf16_gemm && dt == GDL_F32 && peak > 0) { /* the bf16 products' peak, then the FMAs' share */
            const double fma = peak;
            peak = gdl__cpu_peak("gdl_flops_line", threads, 1);
            snprintf(how, sizeof how, "%d thread%s, " GDL__TILE_NAME "; %.1f %% of the avx512 fma peak %.1f", threads,
                     threads == 1 ? "" : "s", 100 * rate / fma, fma);
        }
#endif
    } else {
        peak = gdl_gpu_peak_gflops(dev.index, dt);
        /* a device name may be 255 bytes: the line keeps its first 100 */
        snprintf(how, sizeof how, "%s dense, %.100s", gdl_dtype_name(dt), gdl_device_name(dev));
    }
    n = snprintf(buf, sizeof buf, "FLOPs/step %.3g, %.1f GFLOP/s, ", flops_per_step, rate);
    if (peak > 0)
        snprintf(buf + n, sizeof buf - (size_t)n, "%.1f %% of peak (%.1f GFLOP/s, %s)", 100 * rate / peak, peak, how);
    else
        snprintf(buf + n, sizeof buf - (size_t)n, "peak unknown (%s)", gdl_last_error());
    return buf;
}
