/* ---------------------------------------------------------------------------
   src/runtime/thread_pool.h  The CPU thread pool: gpudl's own workers run the GEMM and the
   parallel loops of the CPU kernels (OpenMP is not used).

   Why our own: libgomp's idle threads spin for milliseconds before they
   sleep, and OMP_WAIT_POLICY is read before main (too late for a library to
   set), so one other busy process on the machine made training 6-15x
   slower. Here an idle worker spins for GDL__POOL_SPIN (tens of
   microseconds: back-to-back ops find it awake), then sleeps on a condition
   variable.

   A job is nt tasks fn(ctx, t, nt), 0 <= t < nt. The calling thread and the
   workers claim tasks from one counter, so a worker that the OS has
   descheduled holds nobody up: the caller takes its task. What a task
   computes depends only on t and nt, never on the thread that runs it, so
   results are bitwise the same for any thread count and any timing.

   Beside another busy process on a machine with as many CPUs as threads,
   the OS keeps the caller and a worker on one CPU and the other process
   alone on the other (Linux 6.18, 2 CPUs, one `yes`: bench/train.c's
   "cores" line reads 1.1): a step then takes about its one-thread time.
   Pinning the threads one to a CPU (tried) gives them 1.5 cores, but the
   thread that shares its CPU is descheduled mid-task for whole time slices
   and the other waits for it at each job's end: no faster, so nothing is
   pinned.

   One job at a time. The pool (and the GEMM's packing buffers) belong to the
   thread that acquired it; a parallel region entered while the pool is held
   (from inside a task, or from another thread: a DataLoader worker, or a
   second thread that calls ops) runs serially on its own thread, in the
   same bits, so two threads that train at once get what each gets alone. After fork() the child starts with no
   workers and makes new ones when it needs them (gdl__os_after_fork). At exit
   the workers are stopped and joined (atexit).

   Thread count: gdl_set_num_threads(n); else the environment's
   GPUDL_NUM_THREADS, else OMP_NUM_THREADS (its first number), else the CPUs
   this process may run on (gdl__os_cpu_count). GPUDL_NO_THREADS (or a
   compiler without atomics, src/runtime/platform.h): no pool, one thread.
   ------------------------------------------------------------------------- */

#if defined(GDL__OS_THREADS) && defined(GDL__ATOMICS)
#define GDL__POOL 1
#endif

typedef void (*gdl__task_fn)(void *ctx, int t, int nt);

#define GDL__POOL_MAX 256     /* threads, the caller included */
#ifdef GDL__POOL
static int gdl__nthreads_want; /* gdl_set_num_threads; 0: from the environment */
static int gdl__nthreads_env;  /* the environment's choice, once read; 0: not yet */

/* GPUDL_NUM_THREADS, else OMP_NUM_THREADS ("4", or "4,2": its outer level), each a whole number >= 1;
   read at first use, where nothing can fail: a bad value is one warning line and the default (the
   CPUs), as PyTorch does with OMP_NUM_THREADS */
static int gdl__env_threads(void) {
    const char *name = "GPUDL_NUM_THREADS", *s = getenv(name);
    char first[24];
    long n = 0;
    int omp = !s || !*s;
    if (omp) s = getenv(name = "OMP_NUM_THREADS");
    if (s && *s) {
        size_t len = strcspn(s, omp ? "," : "");
        snprintf(first, sizeof first, "%.*s", (int)(len < sizeof first ? len : sizeof first - 1), s);
        if (len >= sizeof first || gdl__parse_long(first, 1, 1L << 20, &n) < 0) {
            gdl__env_warn(name, s, omp ? "a whole number in [1, 1048576] (or a list: 4,2)" : "a whole number in [1, 1048576]",
                          "the CPU count");
            n = 0;
        }
    }
    if (n <= 0) n = gdl__os_cpu_count();
    if (n < 1) n = 1;
    return n > GDL__POOL_MAX ? GDL__POOL_MAX : (int)n;
}
#endif

GPUDL_API int gdl_get_num_threads(void) {
#ifdef GDL__POOL
    int n = gdl__atomic_load(&gdl__nthreads_want, GDL__MO_RELAXED);
    if (n > 0) return n;
    n = gdl__atomic_load(&gdl__nthreads_env, GDL__MO_RELAXED);
    if (n > 0) return n;
    n = gdl__env_threads();
    gdl__atomic_store(&gdl__nthreads_env, n, GDL__MO_RELAXED);
    return n;
#else
    return 1;
#endif
}

GPUDL_API void gdl_set_num_threads(int n) {
#ifdef GDL__POOL
    gdl__atomic_store(&gdl__nthreads_want, n <= 0 ? 0 : n > GDL__POOL_MAX ? GDL__POOL_MAX : n, GDL__MO_RELAXED);
#else
    (void)n;
#endif
}

#ifdef GDL__POOL
#define GDL__POOL_PAUSE() GDL__CPU_PAUSE()
#ifndef GDL__POOL_SPIN
#define GDL__POOL_SPIN 1000 /* pause instructions, ~5-50 us: then sleep */
#endif

static gdl__mutex gdl__pool_mu = GDL__MUTEX_INIT;
static gdl__cond gdl__pool_work_cv = GDL__COND_INIT; /* a new job, or stop */
static gdl__cond gdl__pool_done_cv = GDL__COND_INIT; /* the last task finished */
static gdl__thread gdl__pool_th[GDL__POOL_MAX];
static int gdl__pool_nworkers;     /* started; changed by the pool's holder only */
static int gdl__pool_busy;         /* atomic: 1 while a thread holds the pool */
static uint64_t gdl__pool_state;   /* atomic: generation << 32 | tasks not yet claimed */
static int gdl__pool_ndone;        /* atomic: tasks of this generation finished */
static int gdl__pool_sleepers;     /* atomic: workers asleep (or about to be) */
static int gdl__pool_stop;         /* atomic: workers exit */
static int gdl__pool_waiting;      /* under mu: the holder sleeps on done_cv */
static int gdl__pool_hooks;        /* atexit / after-fork hook registered */
static gdl__task_fn gdl__pool_fn;  /* the job: written before its generation is published */
static void *gdl__pool_ctx;
static int gdl__pool_nt;
static int gdl__pool_active;       /* atomic: workers 0 .. active-1 take part in this job */
static uint32_t gdl__pool_gen0[GDL__POOL_MAX]; /* a new worker's generation before its first job */
static GDL__TLS int gdl__pool_slot; /* 0 on the holder's thread, 1 + index on a worker: whose buffers */

static int gdl__pool_acquire(void) {
    int free_ = 0;
    return gdl__atomic_cas(&gdl__pool_busy, &free_, 1, 0, GDL__MO_ACQUIRE, GDL__MO_RELAXED);
}
static void gdl__pool_release(void) { gdl__atomic_store(&gdl__pool_busy, 0, GDL__MO_RELEASE); }

/* Claims and runs tasks of generation gen until none is left. A successful
   claim means the job is still in flight, so its fields are stable. */
static void gdl__pool_claim(uint32_t gen) {
    uint64_t s = gdl__atomic_load(&gdl__pool_state, GDL__MO_ACQUIRE);
    while ((uint32_t)(s >> 32) == gen && (uint32_t)s > 0) {
        if (gdl__atomic_cas(&gdl__pool_state, &s, s - 1, 1, GDL__MO_ACQ_REL, GDL__MO_ACQUIRE)) {
            const int nt = gdl__pool_nt;
            gdl__pool_fn(gdl__pool_ctx, nt - (int)(uint32_t)s, nt);
            if (gdl__atomic_add(&gdl__pool_ndone, 1, GDL__MO_ACQ_REL) == nt) {
                gdl__mutex_lock(&gdl__pool_mu);
                if (gdl__pool_waiting) gdl__cond_signal(&gdl__pool_done_cv);
                gdl__mutex_unlock(&gdl__pool_mu);
            }
            s = gdl__atomic_load(&gdl__pool_state, GDL__MO_ACQUIRE);
        }
    }
}

static void *gdl__pool_worker(void *arg) {
    const int index = (int)(intptr_t)arg;
    uint32_t seen = gdl__pool_gen0[index];
    gdl__pool_slot = 1 + index;
    for (;;) {
        uint32_t gen;
        int spin = 0;
        while ((gen = (uint32_t)(gdl__atomic_load(&gdl__pool_state, GDL__MO_ACQUIRE) >> 32)) == seen &&
               !gdl__atomic_load(&gdl__pool_stop, GDL__MO_ACQUIRE)) {
            if (spin++ < GDL__POOL_SPIN) {
                GDL__POOL_PAUSE();
                continue;
            }
            gdl__mutex_lock(&gdl__pool_mu);
            gdl__atomic_add(&gdl__pool_sleepers, 1, GDL__MO_SEQ_CST);
            while ((uint32_t)(gdl__atomic_load(&gdl__pool_state, GDL__MO_SEQ_CST) >> 32) == seen &&
                   !gdl__atomic_load(&gdl__pool_stop, GDL__MO_SEQ_CST))
                gdl__cond_wait(&gdl__pool_work_cv, &gdl__pool_mu);
            gdl__atomic_add(&gdl__pool_sleepers, -1, GDL__MO_SEQ_CST);
            gdl__mutex_unlock(&gdl__pool_mu);
        }
        if (gdl__atomic_load(&gdl__pool_stop, GDL__MO_ACQUIRE)) return NULL;
        seen = gen;
        /* workers past the thread count (it was lowered) sit this job out */
        if (index < gdl__atomic_load(&gdl__pool_active, GDL__MO_ACQUIRE)) gdl__pool_claim(gen);
    }
}

/* Stops and joins the workers (at exit). Skipped while another thread holds
   the pool: the process is ending anyway. */
static void gdl__pool_shutdown(void) {
    int i;
    if (!gdl__pool_acquire()) return;
    gdl__atomic_store(&gdl__pool_stop, 1, GDL__MO_SEQ_CST);
    gdl__mutex_lock(&gdl__pool_mu);
    gdl__cond_broadcast(&gdl__pool_work_cv);
    gdl__mutex_unlock(&gdl__pool_mu);
    for (i = 0; i < gdl__pool_nworkers; i++) gdl__thread_join(&gdl__pool_th[i]);
    gdl__pool_nworkers = 0;
    gdl__atomic_store(&gdl__pool_stop, 0, GDL__MO_SEQ_CST);
    gdl__pool_release();
}

/* In the child of fork(): only the forking thread exists. Forget the
   parent's workers (new ones start on demand) and reset the locks, which a
   parent thread may have held at the fork. */
static void gdl__pool_after_fork(void) {
    gdl__mutex_init(&gdl__pool_mu);
    gdl__cond_init(&gdl__pool_work_cv);
    gdl__cond_init(&gdl__pool_done_cv);
    gdl__pool_nworkers = 0;
    gdl__pool_sleepers = 0;
    gdl__pool_waiting = 0;
    gdl__pool_stop = 0;
    gdl__pool_busy = 0;
}

/* Runs the job on the holder's thread and up to threads - 1 workers, so
   that a task's gdl__pool_slot is below threads (the per-thread buffers the
   caller sized for that many). The caller holds the pool
   (gdl__pool_acquire). */
static void gdl__pool_run_on(int nt, int threads, gdl__task_fn fn, void *ctx) {
    uint32_t gen;
    int spin = 0, workers = (nt < threads ? nt : threads) - 1;
    if (nt <= 1) {
        if (nt == 1) fn(ctx, 0, 1);
        return;
    }
    if (!gdl__pool_hooks) {
        gdl__pool_hooks = 1;
        atexit(gdl__pool_shutdown);
        gdl__os_after_fork(gdl__pool_after_fork);
    }
    gen = (uint32_t)(gdl__atomic_load(&gdl__pool_state, GDL__MO_RELAXED) >> 32);
    while (gdl__pool_nworkers < workers && gdl__pool_nworkers < GDL__POOL_MAX - 1) {
        gdl__pool_gen0[gdl__pool_nworkers] = gen;
        if (gdl__thread_start(&gdl__pool_th[gdl__pool_nworkers], gdl__pool_worker,
                              (void *)(intptr_t)gdl__pool_nworkers) != 0)
            break; /* if one can't start, the caller claims its tasks */
        gdl__pool_nworkers++;
    }
    gdl__atomic_store(&gdl__pool_active, workers, GDL__MO_RELAXED); /* published with the state below */
    gdl__pool_fn = fn;
    gdl__pool_ctx = ctx;
    gdl__pool_nt = nt;
    gdl__atomic_store(&gdl__pool_ndone, 0, GDL__MO_RELAXED);
    gen++;
    gdl__atomic_store(&gdl__pool_state, ((uint64_t)gen << 32) | (uint32_t)nt, GDL__MO_SEQ_CST);
    if (gdl__atomic_load(&gdl__pool_sleepers, GDL__MO_SEQ_CST)) {
        gdl__mutex_lock(&gdl__pool_mu);
        gdl__cond_broadcast(&gdl__pool_work_cv);
        gdl__mutex_unlock(&gdl__pool_mu);
    }
    gdl__pool_claim(gen);
    while (gdl__atomic_load(&gdl__pool_ndone, GDL__MO_ACQUIRE) != nt) {
        if (spin++ < GDL__POOL_SPIN) {
            GDL__POOL_PAUSE();
            continue;
        }
        gdl__mutex_lock(&gdl__pool_mu);
        gdl__pool_waiting = 1;
        while (gdl__atomic_load(&gdl__pool_ndone, GDL__MO_ACQUIRE) != nt)
            gdl__cond_wait(&gdl__pool_done_cv, &gdl__pool_mu);
        gdl__pool_waiting = 0;
        gdl__mutex_unlock(&gdl__pool_mu);
    }
}
/* ... on up to gdl_get_num_threads() threads */
static void gdl__pool_run(int nt, gdl__task_fn fn, void *ctx) { gdl__pool_run_on(nt, gdl_get_num_threads(), fn, ctx); }
#else
static int gdl__pool_acquire(void) { return 1; }
static void gdl__pool_release(void) {}
static void gdl__pool_run(int nt, gdl__task_fn fn, void *ctx) {
    int t;
    for (t = 0; t < nt; t++) fn(ctx, t, nt);
}
#endif /* GDL__POOL */

/* A loop over [0, n) cut into one contiguous range per thread. work (the
   element count the loop touches) below GDL__PAR_MIN stays on the calling
   thread: there waking the workers costs more than it saves. Each index is
   computed the same way whatever range it falls in. */
#ifndef GDL__PAR_MIN
#define GDL__PAR_MIN 32768
#endif
/* Tasks per thread of a parallel loop: with more tasks than threads, the
   others take over the work of a thread the OS has descheduled (another
   busy process on the machine) instead of waiting for it. (The GEMM cuts
   its own cells: GDL__GEMM_SPLIT, src/cpu/gemm.h.) */
#ifndef GDL__POOL_SPLIT
#define GDL__POOL_SPLIT 4
#endif
typedef void (*gdl__range_fn)(const void *ctx, int64_t lo, int64_t hi);

/* The CPU kernels' parallel loops: the loop body is a function over a range
   [lo, hi) of the loop's indices, and its arguments travel in one shared
   struct, gdl__args, with a slot per role, so a kernel needs no struct of
   its own and its body reads a.x, a.out ... directly:

       static void gdl__scale_part(gdl__args a, int64_t lo, int64_t hi) {
           int64_t i;
           for (i = lo; i < hi; i++) a.out[i] = a.alpha * a.x[i];
       }
       ...
       gdl__args a = gdl__args_none();
       a.x = x; a.out = y; a.alpha = alpha;
       gdl__parallel_loop(n, n, gdl__scale_part, &a);

   A kernel sets only the slots its body reads; the rest stay 0 / NULL. A
   kernel whose arguments fit no slot points ctx at a struct of them. The
   body takes the struct by value: its own copy, which no store through
   a.out can change, so the compiler keeps the slots in registers. A loop
   that branches on slots reads them from locals (gdl__bias_act_part):
   gcc unswitches loops on those (a vectorised version per case), not on
   a's fields. */
typedef struct gdl__args {
    int op;                            /* the variant the body switches on: an op or activation, log_, decoupled */
    int accumulate;                    /* add into the output instead of overwriting it */
    int64_t n, inner, C;               /* sizes besides the loop's own: [outer][n][inner]; channels */
    const gdl_real *x, *y, *gy, *bias; /* f32 inputs */
    gdl_real *out, *pre;               /* f32 outputs */
    int32_t *idx;                      /* argmax indices written (reduce, maxpool) */
    const int32_t *argmax;             /* ... and read back (reduce_backward) */
    gdl_real alpha;                    /* a scalar operand: unary's alpha, fill's value */
    double p;                          /* dropout's probability ... */
    uint64_t seed;                     /* ... and seed */
    gdl_dtype dt;                      /* the low-precision kernels' dtype: of lx, ly, lgy, lout */
    const void *lx, *ly, *lgy;
    void *lout;
    const gdl_conv_geom *g;            /* convolution and pooling */
    const gdl_opt_tensor *t;           /* an optimizer's tensor */
    const void *ctx;                   /* anything else: a struct of the caller's */
} gdl__args;
typedef void (*gdl__loop_fn)(gdl__args a, int64_t lo, int64_t hi);

/* every slot 0 / NULL */
static gdl__args gdl__args_none(void) {
    gdl__args a;
    memset(&a, 0, sizeof a);
    return a;
}

typedef struct {
    gdl__range_fn fn;
    const void *ctx;
    int64_t n;
    int units; /* boundaries at any index (gdl__parallel_units) */
} gdl__pfor_job;

/* Range boundaries are multiples of 16 (but the last): a kernel with a
   vector body and a scalar tail then treats each index the same way for
   any thread count. */
static int64_t gdl__pfor_bound(int64_t n, int t, int nt) { return t == nt ? n : n * t / nt / 16 * 16; }
static void gdl__pfor_task(void *p, int t, int nt) {
    const gdl__pfor_job *j = (const gdl__pfor_job *)p;
    const int64_t lo = j->units ? j->n * t / nt : gdl__pfor_bound(j->n, t, nt);
    const int64_t hi = j->units ? j->n * (t + 1) / nt : gdl__pfor_bound(j->n, t + 1, nt);
    if (hi > lo) j->fn(j->ctx, lo, hi);
}

/* The tasks a loop over [0, n) of `work` elements is cut into: 1 (run it on
   the calling thread) below GDL__PAR_MIN */
static int gdl__pfor_tasks(int64_t n, int64_t work) {
    int64_t nt = work > GDL__PAR_MIN ? (int64_t)GDL__POOL_SPLIT * gdl_get_num_threads() : 1;
    return (int)(nt > n ? n : nt);
}

static void gdl__pfor_run(int64_t n, int64_t work, gdl__range_fn fn, const void *ctx, int units) {
    const int nt = gdl__pfor_tasks(n, work);
    if (n <= 0) return;
    if (nt > 1 && gdl__pool_acquire()) {
        gdl__pfor_job j;
        j.fn = fn;
        j.ctx = ctx;
        j.n = n;
        j.units = units;
        gdl__pool_run(nt, gdl__pfor_task, &j);
        gdl__pool_release();
    } else {
        fn(ctx, 0, n);
    }
}
/* fn(ctx, lo, hi) over the ranges of [0, n) */
static void gdl__parallel_for(int64_t n, int64_t work, gdl__range_fn fn, const void *ctx) {
    gdl__pfor_run(n, work, fn, ctx, 0);
}
/* ... the ranges' boundaries at any index (gdl__parallel_units below) */
static void gdl__parallel_units_for(int64_t n, int64_t work, gdl__range_fn fn, const void *ctx) {
    gdl__pfor_run(n, work, fn, ctx, 1);
}

/* body(*a, lo, hi) over the ranges of [0, n): the CPU kernels' form. On one
   thread, body is called here, directly, so that the compiler can inline
   it into the kernel, as it would the loop written out there. */
typedef struct {
    gdl__loop_fn body;
    const gdl__args *a;
} gdl__loop_job;
static void gdl__loop_range(const void *p, int64_t lo, int64_t hi) {
    const gdl__loop_job *j = (const gdl__loop_job *)p;
    j->body(*j->a, lo, hi);
}
static void gdl__parallel_loop_as(int64_t n, int64_t work, gdl__loop_fn body, const gdl__args *a, int units) {
    if (n <= 0) return;
    if (gdl__pfor_tasks(n, work) > 1) {
        gdl__loop_job j;
        j.body = body;
        j.a = a;
        gdl__pfor_run(n, work, gdl__loop_range, &j, units);
    } else {
        body(*a, 0, n);
    }
}
static void gdl__parallel_loop(int64_t n, int64_t work, gdl__loop_fn body, const gdl__args *a) {
    gdl__parallel_loop_as(n, work, body, a, 0);
}
/* As gdl__parallel_loop, but the ranges' boundaries fall on any index: for a
   loop over a few large units of work (blocks of columns, say) that each
   compute the same whatever range holds them, so few that boundaries at
   multiples of 16 would leave them all to one task. */
static void gdl__parallel_units(int64_t n, int64_t work, gdl__loop_fn body, const gdl__args *a) {
    gdl__parallel_loop_as(n, work, body, a, 1);
}
