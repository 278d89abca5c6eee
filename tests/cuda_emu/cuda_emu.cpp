/* cuda_emu.cpp — the CUDA-on-CPU emulator's runtime: the CUDA runtime and
   cuBLAS entry points gpudl_cuda.cu uses (without libcudart or libcublas),
   strict device memory, asynchronous streams, events, the block scheduler
   with fibers, barrier/warp diagnostics, schedules and fault injection. See
   cuda_emu.h for the model and its limits. */
#include "cuda_emu.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define GDL_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GDL_EMU_ASAN 1
#endif
#endif
#ifdef GDL_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// ---------------------------------------------------------------------------
// configuration, counters, diagnostics

namespace {

enum { EMU_SCHED_RR, EMU_SCHED_WARP, EMU_SCHED_REVTHREADS, EMU_SCHED_REVBLOCKS };

struct Config {
    int devices = 1, sched = EMU_SCHED_RR, workers = 2, quiet = 0, protect = 1;
    int racecheck = 0;      /* GPUDL_EMU_RACECHECK */
    int initcheck = 0;      /* GPUDL_EMU_INITCHECK */
    int gemm = 0;           /* GPUDL_EMU_GEMM: 0 plain, 1 perturbed (per call configuration; `shape` the same), 3 percall */
    uint64_t gemm_seed = 1; /* GPUDL_EMU_GEMM_SEED */
    double timeout = 600; /* seconds a launch may run before the watchdog ends the process */
    size_t mem = (size_t)16384 << 20;
    size_t quarantine = (size_t)256 << 20;
};

Config &cfg() {
    static Config c = [] {
        Config k;
        const char *e;
        if ((e = getenv("GPUDL_EMU_DEVICES")) && *e) k.devices = atoi(e);
        if (k.devices < 0) k.devices = 0;
        if (k.devices > 16) k.devices = 16;
        if ((e = getenv("GPUDL_EMU_WORKERS")) && *e) k.workers = atoi(e);
        if (k.workers < 1) k.workers = 1;
        if (k.workers > 64) k.workers = 64;
        if ((e = getenv("GPUDL_EMU_MEM_MB")) && *e) k.mem = (size_t)atoll(e) << 20;
        if ((e = getenv("GPUDL_EMU_QUIET")) && *e) k.quiet = atoi(e);
        if ((e = getenv("GPUDL_EMU_PROTECT")) && *e) k.protect = atoi(e);
        if ((e = getenv("GPUDL_EMU_TIMEOUT")) && *e) k.timeout = atof(e);
        if ((e = getenv("GPUDL_EMU_SCHED")) && *e) {
            if (!strcmp(e, "rr") || !strcmp(e, "round-robin")) k.sched = EMU_SCHED_RR;
            else if (!strcmp(e, "warp")) k.sched = EMU_SCHED_WARP;
            else if (!strcmp(e, "revthreads")) k.sched = EMU_SCHED_REVTHREADS;
            else if (!strcmp(e, "revblocks")) k.sched = EMU_SCHED_REVBLOCKS;
            else {
                fprintf(stderr, "gpudl emu: unknown GPUDL_EMU_SCHED '%s' (rr, warp, revthreads, revblocks)\n", e);
                abort();
            }
        }
        if ((e = getenv("GPUDL_EMU_GEMM")) && *e) {
            if (!strcmp(e, "plain")) k.gemm = 0;
            else if (!strcmp(e, "perturbed")) k.gemm = 1;
            else if (!strcmp(e, "shape")) k.gemm = 1; /* its former name */
            else if (!strcmp(e, "percall")) k.gemm = 3;
            else {
                fprintf(stderr, "gpudl emu: unknown GPUDL_EMU_GEMM '%s' (plain, perturbed, percall)\n", e);
                abort();
            }
        }
        if ((e = getenv("GPUDL_EMU_RACECHECK")) && *e) k.racecheck = atoi(e);
        if ((e = getenv("GPUDL_EMU_INITCHECK")) && *e) k.initcheck = atoi(e);
        if ((e = getenv("GPUDL_EMU_GEMM_SEED")) && *e) k.gemm_seed = strtoull(e, NULL, 0);
        return k;
    }();
    return c;
}

std::atomic<long> n_alloc{0}, n_free{0}, n_launch{0}, n_memcpy{0}, n_sync{0}, n_graph{0}, n_cublas{0}, n_legacy{0};
std::atomic<long> n_h2d{0}, n_d2d{0}, n_memset{0}, n_race{0}, n_uninit{0};
std::atomic<long> lt_no_algo{0}; /* cuBLASLt heuristic calls that found no algorithm */
std::atomic<long> lt_refuse_at{-1}, lt_heur_calls{0}; /* gdl_emu_lt_no_algo: the heuristic call that refuses */
std::atomic<long> fail_alloc_at{-1}, fail_launch_at{-1}, fail_cublas_at{-1}; /* counter value that fails; -1 none */

std::mutex &diag_mu = *new std::mutex;   /* never destroyed, as G() below */
std::string &last_diag = *new std::string;

void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void diag(const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    {
        std::lock_guard<std::mutex> l(diag_mu);
        last_diag = buf;
    }
    if (!cfg().quiet) fprintf(stderr, "gpudl emu: %s\n", buf);
}

// per host thread: current device and the last (non-sticky) error
thread_local int tl_dev = 0;
thread_local cudaError_t tl_err = cudaSuccess;

cudaError_t set_err(cudaError_t e) {
    if (e != cudaSuccess) tl_err = e;
    return e;
}

// ---------------------------------------------------------------------------
// device memory: every allocation its own mapping with a guard page on each
// side, its end against the trailing guard; freed mappings stay PROT_NONE in
// a quarantine

size_t page_size() {
    static size_t p = (size_t)sysconf(_SC_PAGESIZE);
    return p;
}

enum { MEM_DEVICE, MEM_PINNED };

struct Alloc {
    char *map;
    size_t map_len;
    char *ptr;
    size_t size, rounded; /* requested; usable bytes rounded to 256 */
    int device, kind;
    long id;
};

struct MemState {
    std::mutex mu;
    std::map<uintptr_t, Alloc> live;   /* by ptr */
    std::deque<Alloc> quarantine;      /* oldest first */
    size_t quarantined = 0;
    size_t used[16] = {};
    bool protected_ = false;           /* live device memory is PROT_NONE */
};
MemState &mem() {
    static MemState *m = new MemState;
    return *m;
}

// the allocation whose [ptr, ptr + size] holds p (one past the end counts),
// or NULL; caller holds mem().mu
const Alloc *find_live(const void *p) {
    MemState &M = mem();
    uintptr_t a = (uintptr_t)p;
    auto it = M.live.upper_bound(a);
    if (it == M.live.begin()) return NULL;
    --it;
    const Alloc &A = it->second;
    if (a >= (uintptr_t)A.ptr && a <= (uintptr_t)A.ptr + A.size) return &A;
    return NULL;
}

void protect_locked(bool on) {
    MemState &M = mem();
    if (!cfg().protect || M.protected_ == on) return;
    size_t ps = page_size();
    for (auto &kv : M.live) {
        const Alloc &A = kv.second;
        if (A.kind != MEM_DEVICE) continue;
        size_t body = (A.rounded + ps - 1) / ps * ps;
        mprotect(A.map + ps, body, on ? PROT_NONE : PROT_READ | PROT_WRITE);
    }
    M.protected_ = on;
}

// ---------------------------------------------------------------------------
// devices, streams, events

struct Stream;

struct Device {
    cudaError_t sticky = cudaSuccess;
    Stream *legacy = nullptr;
    std::vector<Stream *> streams; /* all, legacy included */
};

struct Op {
    std::function<void()> fn;
    std::vector<std::pair<Stream *, uint64_t>> waits;
};

struct Graph {
    int dev;
    std::vector<std::function<void()>> nodes; /* one captured stream: a chain */
};

struct Stream {
    int dev;
    unsigned flags;
    bool legacy;
    std::deque<Op> q;
    uint64_t enq = 0, done = 0;
    bool stop = false;
    std::thread th;
    Graph *cap = nullptr; /* capturing into it */
    cudaStreamCaptureMode cap_mode = cudaStreamCaptureModeGlobal;
    bool cap_invalid = false;
};

struct Event {
    int dev;
    Stream *s = nullptr;
    uint64_t seq = 0;
    double t = 0; /* host seconds when it completed */
    bool recorded = false;
};

// Never destroyed: stream threads still wait on these when exit() runs the
// static destructors (destroying a waited-on condition variable hangs).
struct Globals {
    std::mutex mu; /* streams, events, devices */
    std::condition_variable cv;
    Device devs[16];
    std::set<Stream *> streams;
    std::set<Event *> events;
    std::set<Graph *> graphs, execs;
};
Globals &G() {
    static Globals *g = new Globals;
    return *g;
}
#define g_mu (G().mu)
#define g_cv (G().cv)
#define g_devs (G().devs)
#define g_streams (G().streams)
#define g_events (G().events)
#define g_graphs (G().graphs)
#define g_execs (G().execs)

double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void stream_main(Stream *s);
void install_signals();

Stream *new_stream_locked(int dev, unsigned flags, bool legacy) {
    Stream *s = new Stream;
    s->dev = dev;
    s->flags = flags;
    s->legacy = legacy;
    g_devs[dev].streams.push_back(s);
    g_streams.insert(s);
    s->th = std::thread(stream_main, s);
    return s;
}

Stream *legacy_locked(int dev) {
    if (!g_devs[dev].legacy) g_devs[dev].legacy = new_stream_locked(dev, 0, true);
    return g_devs[dev].legacy;
}

// the stream a handle names for the calling thread, NULL if invalid
Stream *resolve_locked(cudaStream_t st) {
    if (st == 0 || st == cudaStreamLegacy || st == cudaStreamPerThread) return legacy_locked(tl_dev);
    Stream *s = (Stream *)st;
    return g_streams.count(s) ? s : nullptr;
}

bool idle_locked() {
    for (Stream *s : g_streams)
        if (s->done != s->enq) return false;
    return true;
}

const uint64_t CAPTURED = ~(uint64_t)0; /* enqueue_locked's answer when it recorded into a graph */

// Is a capture in global mode running (on dev, or anywhere with dev < 0)?
// Then calls that may synchronise, and the legacy stream, are illegal.
bool global_capture_locked(int dev) {
    for (Stream *o : g_streams)
        if (o->cap && o->cap_mode != cudaStreamCaptureModeRelaxed && (dev < 0 || o->dev == dev)) return true;
    return false;
}

// an illegal call during capture ends every such capture as invalid
cudaError_t capture_violation_locked(int dev, cudaError_t e, const char *what) {
    for (Stream *o : g_streams)
        if (o->cap && o->cap_mode != cudaStreamCaptureModeRelaxed && (dev < 0 || o->dev == dev)) {
            o->cap_invalid = true;
            diag("%s during stream capture: the capture is invalidated", what);
        }
    return e;
}

// queue fn on s with CUDA's legacy-stream ordering; returns its sequence
// number, or CAPTURED when s is capturing (fn became a graph node)
uint64_t enqueue_locked(Stream *s, std::function<void()> fn, std::vector<std::pair<Stream *, uint64_t>> waits = {}) {
    Device &D = g_devs[s->dev];
    if (s->cap) {
        s->cap->nodes.push_back(std::move(fn));
        return CAPTURED;
    }
    if (s->legacy) {
        ++n_legacy;
        for (Stream *o : D.streams)
            if (o != s && !(o->flags & cudaStreamNonBlocking) && o->enq > o->done) waits.push_back({o, o->enq});
    } else if (!(s->flags & cudaStreamNonBlocking) && D.legacy && D.legacy->enq > D.legacy->done) {
        waits.push_back({D.legacy, D.legacy->enq});
    }
    {
        std::lock_guard<std::mutex> l(mem().mu);
        protect_locked(false);
    }
    Op op;
    op.fn = std::move(fn);
    op.waits = std::move(waits);
    s->q.push_back(std::move(op));
    s->enq++;
    g_cv.notify_all();
    return s->enq;
}

void wait_seq_locked(std::unique_lock<std::mutex> &lk, Stream *s, uint64_t seq) {
    g_cv.wait(lk, [&] { return s->done >= seq; });
}

// after a host synchronisation: with nothing queued anywhere, device memory
// becomes inaccessible to the host until work is queued again
void maybe_protect_locked() {
    if (!idle_locked()) return;
    std::lock_guard<std::mutex> l(mem().mu);
    protect_locked(true);
}

void wait_device_locked(std::unique_lock<std::mutex> &lk, int dev) {
    for (Stream *s : g_devs[dev].streams) wait_seq_locked(lk, s, s->enq);
}

void stream_main(Stream *s) {
    std::unique_lock<std::mutex> lk(g_mu);
    for (;;) {
        g_cv.wait(lk, [&] { return s->stop || !s->q.empty(); });
        if (s->q.empty()) break;
        Op &op = s->q.front();
        g_cv.wait(lk, [&] {
            for (auto &w : op.waits)
                if (w.first->done < w.second) return false;
            return true;
        });
        bool dead = g_devs[s->dev].sticky != cudaSuccess;
        std::function<void()> fn = std::move(op.fn);
        lk.unlock();
        if (!dead) fn();
        fn = nullptr;
        lk.lock();
        s->q.pop_front();
        s->done++;
        g_cv.notify_all();
    }
}

void set_sticky(int dev, cudaError_t e) {
    std::lock_guard<std::mutex> l(g_mu);
    if (g_devs[dev].sticky == cudaSuccess) g_devs[dev].sticky = e;
}

// the error every call reports once the current device's context is broken
cudaError_t sticky_now() {
    std::lock_guard<std::mutex> l(g_mu);
    return g_devs[tl_dev].sticky;
}

bool init_ok() {
    static bool once = [] {
        install_signals();
        return true;
    }();
    return once && cfg().devices > 0;
}

#define EMU_ENTER()                                                                                    \
    do {                                                                                               \
        if (!init_ok()) return set_err(cudaErrorNoDevice);                                             \
        cudaError_t st_ = sticky_now();                                                                \
        if (st_ != cudaSuccess) return set_err(st_);                                                   \
    } while (0)

} // namespace

// ---------------------------------------------------------------------------
// fibers

namespace {

struct Fiber {
    void *sp = nullptr;
    char *stack = nullptr; /* lowest usable byte (a guard page below) */
    size_t size = 0;
    bool idle = true;      /* not holding a thread */
    void *asan_fake = nullptr;
};

const size_t FIBER_STACK =
#ifdef GDL_EMU_ASAN
    (size_t)512 << 10;
#else
    (size_t)128 << 10;
#endif

#if defined(__x86_64__)
// gdl_emu_swap(save, to): push the callee-saved registers and the SSE/x87
// control words, store rsp in *save, load `to`, pop, return into the other
// context. Nothing else needs saving across a call under the SysV ABI.
extern "C" void gdl_emu_swap(void **save, void *to);
asm(".text\n"
    ".globl gdl_emu_swap\n"
    ".type gdl_emu_swap,@function\n"
    "gdl_emu_swap:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size gdl_emu_swap, .-gdl_emu_swap\n");

void fiber_entry();

void fiber_prepare(Fiber *f) {
#ifdef GDL_EMU_ASAN
    // frames abandoned on this stack (an aborted block), or of an earlier
    // mapping at this address, left their redzones in the shadow
    __asan_unpoison_memory_region(f->stack, f->size);
#endif
    uintptr_t top = ((uintptr_t)f->stack + f->size) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)top;
    *--sp = 0;                        /* fake return address of fiber_entry */
    *--sp = (uint64_t)&fiber_entry;   /* where gdl_emu_swap returns */
    for (int i = 0; i < 6; i++) *--sp = 0;
    --sp;
    uint32_t ctl[2] = {0x1f80, 0x037f}; /* default MXCSR, x87 control word */
    memcpy(sp, ctl, 8);
    f->sp = sp;
}
#else
// portable fallback: ucontext (one sigprocmask per switch: slower)
extern "C" void gdl_emu_swap(void **save, void *to) {
    swapcontext((ucontext_t *)*save, (ucontext_t *)to);
}
void fiber_entry();
void fiber_prepare(Fiber *f) {
#ifdef GDL_EMU_ASAN
    __asan_unpoison_memory_region(f->stack, f->size);
#endif
    ucontext_t *uc = new ucontext_t;
    getcontext(uc);
    uc->uc_stack.ss_sp = f->stack;
    uc->uc_stack.ss_size = f->size;
    uc->uc_link = nullptr;
    makecontext(uc, fiber_entry, 0);
    f->sp = uc;
}
#endif

} // namespace

// ---------------------------------------------------------------------------
// kernels: launches, blocks, the scheduler

namespace {

struct Launch {
    std::string name;
    dim3 grid, block;
    size_t shmem;
    int dev;
    void *ctx;
    void (*run)(void *);
    void (*destroy)(void *);
    uint64_t nblocks;
    unsigned nthreads;
    long number; /* launch count at submission, for messages */
    uint32_t tag0 = 0;          /* global-memory racecheck: block b's writer tag is tag0 + b */
    std::vector<uint8_t> fenced; /* per block: it ran a __threadfence (orders its global accesses) */
};

enum { T_UNSTARTED, T_RUNNING, T_BAR, T_WARP, T_READY, T_DONE };

struct TState {
    uint8_t state;
    Fiber *f;
    const char *file;
    int line;
    int kind, arg, width;
    unsigned mask;
    unsigned long long val, res;
    uint32_t epoch, wsync; /* barriers (__syncthreads) and __syncwarps entered: for GPUDL_EMU_RACECHECK */
};

const char *op_name(int kind) {
    static const char *n[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                              "__ballot_sync", "__any_sync", "__all_sync", "__syncwarp"};
    return kind >= 0 && kind < 8 ? n[kind] : "?";
}

struct Block {
    const Launch *L;
    uint64_t linear;
    unsigned n;
    unsigned next_claim = 0, ndone = 0, nbar = 0;
    const char *bar_file = nullptr;
    int bar_line = 0;
    std::deque<unsigned> runq;
    bool abort = false;
    int sched = 0;
    std::string msg;
    unsigned pending[32], exited[32]; /* per warp: lanes waiting at a warp op, lanes exited */
    TState t[1024];
};

// GPUDL_EMU_RACECHECK's shadow of one shared byte: its last write and the
// (up to two) threads that read it in the current barrier interval; valid
// while gen is the worker's current block generation
struct RaceCell {
    uint32_t gen, wep, rep;      /* block generation; barrier interval (+1, 0: none) of the write / the reads */
    uint16_t w, r1, r2;          /* writer, readers (0xffff: none) */
    uint32_t wsy, r1sy, r2sy;    /* their __syncwarp counts at the access */
    const void *wpc, *rpc;       /* code addresses of the write and the first read */
};

struct Worker {
    void *sched_sp = nullptr;
#if !defined(__x86_64__)
    ucontext_t sched_uc;
#endif
    std::vector<Fiber *> fibers;
    std::vector<Fiber *> free_fibers; /* idle ones */
    Fiber *cur = nullptr;
    Block *block = nullptr;
    int cur_thread = -1;
    std::vector<char> dyn_shared;
    sigjmp_buf jb;
    volatile bool in_kernel = false;
    const void *main_stack_bottom = nullptr;
    size_t main_stack_size = 0;
    std::string fault_msg;
    char *altstack = nullptr;
    // GPUDL_EMU_RACECHECK: shadow of the static __shared__ (TLS) and dynamic shared bytes
    std::vector<struct RaceCell> rc_tls, rc_dyn;
    char *rc_tls_lo = nullptr;
    uint32_t rc_gen = 0;
    // GPUDL_EMU_INITCHECK: per shared byte, the block generation that wrote it
    std::vector<uint32_t> ic_tls, ic_dyn;
};

thread_local Worker *tl_worker = nullptr;

void free_fiber(Fiber *f);

// frees the thread's Worker when a thread that ran blocks ends (a destroyed
// stream's thread)
struct WorkerOwner {
    ~WorkerOwner() {
        Worker *W = tl_worker;
        if (!W) return;
        tl_worker = nullptr;
        for (Fiber *f : W->fibers) free_fiber(f);
        if (W->altstack) {
            stack_t ss;
            memset(&ss, 0, sizeof ss);
            ss.ss_flags = SS_DISABLE;
            sigaltstack(&ss, NULL);
            free(W->altstack);
        }
        delete W;
    }
};
thread_local WorkerOwner tl_worker_owner;

Worker *worker() {
    if (!tl_worker) {
        (void)&tl_worker_owner; /* odr-use: constructs it, so its destructor runs at thread exit */
        tl_worker = new Worker; /* one per OS thread that runs blocks */
        // a fault report runs on an alternate stack (a fiber's stack may be
        // the thing that overflowed); keep one already there (ASan's)
        stack_t ss, old;
        if (sigaltstack(NULL, &old) == 0 && (old.ss_flags & SS_DISABLE)) {
            size_t n = 1 << 16;
            tl_worker->altstack = (char *)malloc(n);
            ss.ss_sp = tl_worker->altstack;
            ss.ss_size = n;
            ss.ss_flags = 0;
            sigaltstack(&ss, NULL);
        }
    }
    return tl_worker;
}

Fiber *new_fiber() {
    Fiber *f = new Fiber;
    size_t ps = page_size();
    char *m = (char *)mmap(NULL, FIBER_STACK + ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                           -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "gpudl emu: out of memory for a fiber stack\n");
        abort();
    }
    mprotect(m, ps, PROT_NONE); /* overflow guard */
    f->stack = m + ps;
    f->size = FIBER_STACK;
    fiber_prepare(f);
    return f;
}

void free_fiber(Fiber *f) {
#if !defined(__x86_64__)
    delete (ucontext_t *)f->sp;
#endif
    munmap(f->stack - page_size(), f->size + page_size());
    delete f;
}

void fiber_reset(Fiber *f) {
#ifdef GDL_EMU_ASAN
    __asan_unpoison_memory_region(f->stack, f->size);
#endif
#if !defined(__x86_64__)
    delete (ucontext_t *)f->sp;
#endif
    fiber_prepare(f);
    f->idle = true;
    f->asan_fake = nullptr;
}

// switch from the scheduler (on the worker's own stack) into fiber f
void switch_to_fiber(Worker *W, Fiber *f) {
    W->cur = f;
#ifdef GDL_EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f->stack, f->size);
#endif
#if defined(__x86_64__)
    gdl_emu_swap(&W->sched_sp, f->sp);
#else
    void *save = &W->sched_uc;
    gdl_emu_swap(&save, f->sp);
#endif
#ifdef GDL_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
    W->cur = nullptr;
}

// switch from the running fiber back to the scheduler
void switch_to_sched(Worker *W) {
    Fiber *f = W->cur;
#ifdef GDL_EMU_ASAN
    __sanitizer_start_switch_fiber(&f->asan_fake, W->main_stack_bottom, W->main_stack_size);
#endif
#if defined(__x86_64__)
    gdl_emu_swap(&f->sp, W->sched_sp);
#else
    swapcontext((ucontext_t *)f->sp, &W->sched_uc);
#endif
#ifdef GDL_EMU_ASAN
    __sanitizer_finish_switch_fiber(f->asan_fake, &W->main_stack_bottom, &W->main_stack_size);
#endif
}

void set_coords(Worker *W, unsigned t) {
    const dim3 &b = W->block->L->block;
    W->cur_thread = (int)t;
    gdl_emu_threadIdx_.x = t % b.x;
    gdl_emu_threadIdx_.y = t / b.x % b.y;
    gdl_emu_threadIdx_.z = t / (b.x * b.y);
}

// the thread index that the k-th claim starts, per schedule
unsigned claim_order(const Block *B, unsigned k) { return B->sched == EMU_SCHED_REVTHREADS ? B->n - 1 - k : k; }

std::string where(const Block *B, unsigned t) {
    const Launch *L = B->L;
    char buf[256];
    unsigned bx = (unsigned)(B->linear % L->grid.x), by = (unsigned)(B->linear / L->grid.x % L->grid.y),
             bz = (unsigned)(B->linear / ((uint64_t)L->grid.x * L->grid.y));
    snprintf(buf, sizeof buf, "kernel %s (launch #%ld), block (%u,%u,%u), thread (%u,%u,%u)", L->name.c_str(),
             L->number, bx, by, bz, t % L->block.x, t / L->block.x % L->block.y, t / (L->block.x * L->block.y));
    return buf;
}

// a barrier or warp misuse: the launch fails; the fiber never resumes
// (no object with a destructor may be alive in this frame at the switch:
// the frame is abandoned)
[[noreturn]] void fail_in_fiber(Worker *W, const char *msg) {
    Block *B = W->block;
    B->abort = true;
    B->msg = where(B, (unsigned)W->cur_thread);
    B->msg += ": ";
    B->msg += msg;
    switch_to_sched(W);
    abort(); /* unreachable: an aborted fiber is reset, never resumed */
}

// park the current thread until a barrier or warp operation releases it
void park(Worker *W) {
    switch_to_sched(W);
    Block *B = W->block;
    (void)B;
}

void release_locked_order(Block *B, std::vector<unsigned> &who) {
    if (B->sched == EMU_SCHED_REVTHREADS) std::reverse(who.begin(), who.end());
    for (unsigned u : who) {
        B->t[u].state = T_READY;
        B->runq.push_back(u);
    }
}

void thread_exited(Worker *W, unsigned t) {
    Block *B = W->block;
    B->t[t].state = T_DONE;
    B->ndone++;
    if (B->nbar > 0) {
        char m[256];
        snprintf(m, sizeof m, "exited while %u thread(s) wait at __syncthreads (%s:%d)", B->nbar, B->bar_file,
                 B->bar_line);
        fail_in_fiber(W, m);
    }
    // a lane of this warp waiting on a mask that names the exiting lane
    unsigned base = t & ~31u, lane = t & 31u;
    B->exited[t >> 5] |= 1u << lane;
    if (B->pending[t >> 5])
        for (unsigned j = base; j < base + 32 && j < B->n; j++)
        if (B->t[j].state == T_WARP && (B->t[j].mask >> lane & 1)) {
            char m[256];
            snprintf(m, sizeof m, "exited while lane %u waits at %s (%s:%d) with mask 0x%08x naming it", j & 31,
                     op_name(B->t[j].kind), B->t[j].file, B->t[j].line, B->t[j].mask);
            fail_in_fiber(W, m);
        }
}

void fiber_entry() {
    Worker *W = tl_worker;
#ifdef GDL_EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &W->main_stack_bottom, &W->main_stack_size);
#endif
    for (;;) {
        Fiber *f = W->cur;
        Block *B = W->block;
        f->idle = false;
        while (B->next_claim < B->n) {
            unsigned t = claim_order(B, B->next_claim++);
            B->t[t].state = T_RUNNING;
            B->t[t].f = f;
            set_coords(W, t);
            B->L->run(B->L->ctx);
            thread_exited(W, t);
        }
        f->idle = true;
        W->free_fibers.push_back(f);
        switch_to_sched(W);
    }
}

Fiber *idle_fiber(Worker *W) {
    if (!W->free_fibers.empty()) {
        Fiber *f = W->free_fibers.back();
        W->free_fibers.pop_back();
        return f;
    }
    Fiber *f = new_fiber();
    W->fibers.push_back(f);
    return f;
}

void run_block(Worker *W, Block *B) {
    W->block = B;
    for (;;) {
        if (B->abort) break;
        Fiber *next = nullptr;
        bool prefer_ready = B->sched == EMU_SCHED_WARP;
        if (!B->runq.empty() && (prefer_ready || B->next_claim >= B->n)) {
            unsigned t = B->runq.front();
            if (B->sched == EMU_SCHED_WARP) { /* the lowest warp first */
                auto best = B->runq.begin();
                for (auto it = B->runq.begin(); it != B->runq.end(); ++it)
                    if ((*it >> 5) < (*best >> 5)) best = it;
                t = *best;
                B->runq.erase(best);
            } else {
                B->runq.pop_front();
            }
            B->t[t].state = T_RUNNING;
            set_coords(W, t);
            next = B->t[t].f;
        } else if (B->next_claim < B->n) {
            next = idle_fiber(W);
        } else if (B->ndone == B->n) {
            break;
        } else { /* nobody can run: deadlock */
            std::string m = "deadlock: no thread can proceed;";
            int shown = 0;
            for (unsigned t = 0; t < B->n && shown < 4; t++) {
                char buf[200];
                if (B->t[t].state == T_BAR)
                    snprintf(buf, sizeof buf, " thread %u waits at __syncthreads (%s:%d);", t, B->t[t].file,
                             B->t[t].line);
                else if (B->t[t].state == T_WARP)
                    snprintf(buf, sizeof buf, " thread %u waits at %s mask 0x%08x (%s:%d);", t,
                             op_name(B->t[t].kind), B->t[t].mask, B->t[t].file, B->t[t].line);
                else continue;
                m += buf;
                shown++;
            }
            B->abort = true;
            B->msg = where(B, 0) + ": " + m;
            break;
        }
        switch_to_fiber(W, next);
    }
    if (B->abort) {
        W->free_fibers.clear();
        for (Fiber *f : W->fibers) {
            if (!f->idle) fiber_reset(f);
            W->free_fibers.push_back(f);
        }
    }
    W->block = nullptr;
    W->cur_thread = -1;
}

// one launch being executed: blocks handed out to the stream thread and
// the pool
struct Job {
    const Launch *L;
    std::atomic<uint64_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex mu;
    std::string msg;
    int active = 0; /* pool threads inside; guarded by pool mutex */
};

void set_block_coords(const Launch *L, uint64_t b) {
    gdl_emu_blockIdx_.x = (unsigned)(b % L->grid.x);
    gdl_emu_blockIdx_.y = (unsigned)(b / L->grid.x % L->grid.y);
    gdl_emu_blockIdx_.z = (unsigned)(b / ((uint64_t)L->grid.x * L->grid.y));
    gdl_emu_blockDim_ = L->block;
    gdl_emu_gridDim_ = L->grid;
}

void run_blocks(Job *J) {
    Worker *W = worker();
    const Launch *L = J->L;
    static thread_local std::unique_ptr<Block> Bp(new Block); /* big: one per OS thread */
    Block *B = Bp.get();
    if (sigsetjmp(W->jb, 1)) { /* a memory fault inside the kernel: the signal handler jumped here */
#ifdef GDL_EMU_ASAN
        __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
        W->in_kernel = false;
        W->free_fibers.clear();
        for (Fiber *f : W->fibers) {
            fiber_reset(f);
            W->free_fibers.push_back(f);
        }
        W->block = nullptr;
        W->cur = nullptr;
        std::lock_guard<std::mutex> l(J->mu);
        if (!J->failed.exchange(true)) J->msg = W->fault_msg;
        return;
    }
    if (L->shmem) W->dyn_shared.resize(L->shmem);
    for (;;) {
        if (J->failed.load()) return;
        uint64_t k = J->next.fetch_add(1);
        if (k >= L->nblocks) return;
        uint64_t b = cfg().sched == EMU_SCHED_REVBLOCKS ? L->nblocks - 1 - k : k;
        B->L = L;
        B->linear = b;
        B->n = L->nthreads;
        B->next_claim = B->ndone = B->nbar = 0;
        B->runq.clear();
        B->abort = false;
        B->sched = cfg().sched;
        for (unsigned t = 0; t < B->n; t++) B->t[t].state = T_UNSTARTED, B->t[t].epoch = B->t[t].wsync = 0;
        W->rc_gen++;
        memset(B->pending, 0, sizeof B->pending);
        memset(B->exited, 0, sizeof B->exited);
        set_block_coords(L, b);
        if (L->shmem) memset(W->dyn_shared.data(), 0xff, L->shmem);
        W->in_kernel = true;
        run_block(W, B);
        W->in_kernel = false;
        if (B->abort) {
            std::lock_guard<std::mutex> l(J->mu);
            if (!J->failed.exchange(true)) J->msg = B->msg;
            return;
        }
    }
}

// the pool: GPUDL_EMU_WORKERS - 1 threads that join the stream thread on
// launches with several blocks
struct Pool {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Job *> jobs;
    std::vector<std::thread> th;
};
Pool &pool() {
    static Pool *p = [] {
        Pool *q = new Pool;
        for (int i = 1; i < cfg().workers; i++)
            q->th.emplace_back([q] {
                std::unique_lock<std::mutex> lk(q->mu);
                for (;;) {
                    q->cv.wait(lk, [&] { return !q->jobs.empty(); });
                    Job *J = q->jobs.front();
                    J->active++;
                    lk.unlock();
                    run_blocks(J);
                    lk.lock();
                    J->active--;
                    if (J->next.load() >= J->L->nblocks || J->failed.load()) {
                        auto it = std::find(q->jobs.begin(), q->jobs.end(), J);
                        if (it != q->jobs.end()) q->jobs.erase(it);
                    }
                    q->cv.notify_all();
                }
            });
        for (auto &t : q->th) t.detach();
        return q;
    }();
    return *p;
}

// The watchdog: a kernel that never ends (a spin on a flag nobody sets, a
// loop that does not advance) would hang the test run; as a GPU's launch
// timeout, end the process with a report naming the kernel.
struct Running {
    const Launch *L;
    double t0;
};
std::mutex &run_mu = *new std::mutex;
std::vector<Running> &running = *new std::vector<Running>;

void watchdog_start() {
    static bool once = [] {
        if (cfg().timeout <= 0) return true;
        std::thread([] {
            for (;;) {
                std::this_thread::sleep_for(std::chrono::milliseconds(500));
                std::lock_guard<std::mutex> l(run_mu);
                double now = now_s();
                for (auto &r : running)
                    if (now - r.t0 > cfg().timeout) {
                        fprintf(stderr, "gpudl emu: kernel %s (launch #%ld) has run for %.0f s "
                                "(GPUDL_EMU_TIMEOUT): a hang; ending the process\n",
                                r.L->name.c_str(), r.L->number, now - r.t0);
                        fflush(stderr);
                        abort();
                    }
            }
        }).detach();
        return true;
    }();
    (void)once;
}

void race_resolve();
void sh_launch(Launch *L);

void execute_launch(Launch *L) {
    watchdog_start();
    race_resolve();
    sh_launch(L);
    {
        std::lock_guard<std::mutex> l(run_mu);
        running.push_back({L, now_s()});
    }
    struct Done {
        const Launch *L;
        ~Done() {
            std::lock_guard<std::mutex> l(run_mu);
            for (size_t i = 0; i < running.size(); i++)
                if (running[i].L == L) {
                    running.erase(running.begin() + (long)i);
                    break;
                }
        }
    } done{L};
    Job J;
    J.L = L;
    bool par = L->nblocks > 1 && cfg().workers > 1;
    Pool &P = pool();
    if (par) {
        std::lock_guard<std::mutex> l(P.mu);
        P.jobs.push_back(&J);
        P.cv.notify_all();
    }
    run_blocks(&J);
    if (par) {
        std::unique_lock<std::mutex> lk(P.mu);
        auto it = std::find(P.jobs.begin(), P.jobs.end(), &J);
        if (it != P.jobs.end()) P.jobs.erase(it);
        P.cv.wait(lk, [&] { return J.active == 0; });
    }
    if (J.failed.load()) {
        diag("%s", J.msg.c_str());
        set_sticky(L->dev, J.msg.find("illegal address") != std::string::npos ? cudaErrorIllegalAddress
                                                                               : cudaErrorLaunchFailure);
    }
}

} // namespace

extern "C" void *gdl_emu_dynamic_shared(void) {
    Worker *W = tl_worker;
    return W && W->block && W->block->L->shmem ? (void *)W->dyn_shared.data() : NULL;
}

extern "C" void gdl_emu_syncthreads_at(const char *file, int line) {
    Worker *W = tl_worker;
    if (!W || !W->block) {
        diag("__syncthreads called outside a kernel (%s:%d)", file, line);
        abort();
    }
    Block *B = W->block;
    unsigned t = (unsigned)W->cur_thread;
    if (B->ndone > 0) {
        char m[300];
        unsigned who = 0;
        for (unsigned u = 0; u < B->n; u++)
            if (B->t[u].state == T_DONE) { who = u; break; }
        snprintf(m, sizeof m, "__syncthreads (%s:%d) after thread %u of the block exited", file, line, who);
        fail_in_fiber(W, m);
    }
    if (B->nbar == 0) {
        B->bar_file = file;
        B->bar_line = line;
    } else if (B->bar_line != line || (B->bar_file != file && strcmp(B->bar_file, file) != 0)) {
        char m[400];
        unsigned other = 0;
        for (unsigned u = 0; u < B->n; u++)
            if (B->t[u].state == T_BAR) { other = u; break; }
        snprintf(m, sizeof m, "divergent __syncthreads: this thread is at %s:%d, thread %u waits at %s:%d", file,
                 line, other, B->bar_file, B->bar_line);
        fail_in_fiber(W, m);
    }
    B->t[t].epoch++;
    B->t[t].state = T_BAR;
    B->t[t].file = file;
    B->t[t].line = line;
    if (++B->nbar == B->n) {
        std::vector<unsigned> who;
        for (unsigned u = 0; u < B->n; u++)
            if (u != t) who.push_back(u);
        B->nbar = 0;
        release_locked_order(B, who);
        B->t[t].state = T_RUNNING;
        return;
    }
    park(W);
}

extern "C" unsigned long long gdl_emu_warp_op(int kind, unsigned mask, unsigned long long v, int arg, int width,
                                              const char *file, int line) {
    Worker *W = tl_worker;
    if (!W || !W->block) {
        diag("%s called outside a kernel (%s:%d)", op_name(kind), file, line);
        abort();
    }
    Block *B = W->block;
    unsigned t = (unsigned)W->cur_thread, lane = t & 31u, base = t & ~31u;
    unsigned nlanes = B->n - base < 32 ? B->n - base : 32;
    char m[400];
    if (!(mask >> lane & 1)) {
        snprintf(m, sizeof m, "%s (%s:%d) with mask 0x%08x, which leaves out the calling lane %u", op_name(kind),
                 file, line, mask, lane);
        fail_in_fiber(W, m);
    }
    if (nlanes < 32 && (mask >> nlanes)) {
        snprintf(m, sizeof m, "%s (%s:%d) with mask 0x%08x naming lanes beyond the %u of this warp", op_name(kind),
                 file, line, mask, nlanes);
        fail_in_fiber(W, m);
    }
    if (kind <= GDL_EMU_SHFL_XOR && (width <= 0 || width > 32 || (width & (width - 1)))) {
        snprintf(m, sizeof m, "%s (%s:%d) with width %d (a power of two up to 32)", op_name(kind), file, line,
                 width);
        fail_in_fiber(W, m);
    }
    TState &me = B->t[t];
    unsigned w = t >> 5, *pend = &B->pending[w];
    if (B->exited[w] & mask) {
        snprintf(m, sizeof m, "%s (%s:%d) with mask 0x%08x naming lane %d, which has exited", op_name(kind), file,
                 line, mask, __builtin_ctz(B->exited[w] & mask));
        fail_in_fiber(W, m);
    }
    // the lanes already waiting in my mask must be at the same operation with
    // the same mask: checking one suffices, as each checked one before it
    unsigned others = *pend & mask;
    if (others) {
        TState &o = B->t[base + (unsigned)__builtin_ctz(others)];
        if (o.kind != kind || o.mask != mask) {
            snprintf(m, sizeof m, "%s (%s:%d) mask 0x%08x while lane %d is at %s (%s:%d) mask 0x%08x", op_name(kind),
                     file, line, mask, __builtin_ctz(others), op_name(o.kind), o.file, o.line, o.mask);
            fail_in_fiber(W, m);
        }
    }
    if (kind == GDL_EMU_SYNCWARP) me.wsync++;
    me.state = T_WARP;
    me.kind = kind;
    me.mask = mask;
    me.val = v;
    me.arg = arg;
    me.width = width;
    me.file = file;
    me.line = line;
    *pend |= 1u << lane;
    if ((*pend & mask) != mask) {
        park(W);
        return me.res;
    }
    *pend &= ~mask;
    // everyone named is here: exchange
    unsigned long long ballot = 0;
    for (unsigned j = 0; j < 32; j++)
        if ((mask >> j & 1) && B->t[base + j].val) ballot |= 1ull << j;
    for (unsigned j = 0; j < 32; j++) {
        if (!(mask >> j & 1)) continue;
        TState &o = B->t[base + j];
        unsigned long long r = o.val;
        if (kind <= GDL_EMU_SHFL_XOR) {
            int w = o.width, seg = (int)j & ~(w - 1), src;
            bool ok;
            switch (kind) {
            case GDL_EMU_SHFL_IDX: src = seg + (o.arg & (w - 1)); ok = true; break;
            case GDL_EMU_SHFL_UP: src = (int)j - o.arg; ok = src >= seg; break;
            case GDL_EMU_SHFL_DOWN: src = (int)j + o.arg; ok = src < seg + w; break;
            default: src = (int)j ^ o.arg; ok = src >= 0 && src < seg + w; break;
            }
            if (ok) {
                if (src < 0 || src > 31 || !(mask >> src & 1)) {
                    snprintf(m, sizeof m, "%s (%s:%d): lane %u reads lane %d, which mask 0x%08x leaves out",
                             op_name(kind), file, line, j, src, mask);
                    fail_in_fiber(W, m);
                }
                r = B->t[base + (unsigned)src].val;
            }
        } else if (kind == GDL_EMU_BALLOT) {
            r = ballot;
        } else if (kind == GDL_EMU_ANY) {
            r = ballot != 0;
        } else if (kind == GDL_EMU_ALL) {
            r = ballot == (unsigned long long)mask;
        } else {
            r = 0;
        }
        o.res = r;
    }
    std::vector<unsigned> who;
    for (unsigned j = 0; j < 32; j++)
        if ((mask >> j & 1) && base + j != t) who.push_back(base + j);
    release_locked_order(B, who);
    me.state = T_RUNNING;
    return me.res;
}

// ---------------------------------------------------------------------------
// ---------------------------------------------------------------------------
// GPUDL_EMU_RACECHECK: shared-memory hazards between the threads of a block.
// Code compiled with -fsanitize=thread calls __tsan_readN / __tsan_writeN
// before every load and store; the emulator defines those hooks (below; no
// TSan runtime is linked). With the check on, an access by a thread of a
// running block to static __shared__ storage (the main program's TLS block,
// where `__shared__` = `static thread_local` lives) or to the block's dynamic
// shared memory is checked against the byte's shadow (RaceCell): a write
// and a write, or a write and a read, by two threads in the same barrier
// interval (the same count of __syncthreads entered) is a hazard unless the
// two are lanes of one warp and the later access follows a __syncwarp the
// earlier one preceded. Atomics are not checked. Each distinct hazard
// (kernel, buffer, kind, code addresses) is reported once, counted in
// gdl_emu_count("race"); at exit, a process that saw hazards under
// GPUDL_EMU_RACECHECK=1 prints their count and exits with status 66.

#include <cxxabi.h>
#include <elf.h>
#include <fcntl.h>
#include <dlfcn.h>

namespace {

std::atomic<bool> rc_instrumented{false}; /* __tsan_init ran: some code is instrumented */
/* -1 unresolved, else the checks on: */
enum { RC_SHARED = 1, RC_INIT = 2, RC_GLOBAL = 4 };
std::atomic<int> rc_on{-1};

struct TlsSym {
    uint64_t off, size;
    std::string name;
};
struct RaceInfo {
    bool ok = false;
    uint64_t tls_size = 0, base_sym_off = 0; /* PT_TLS size; gdl_emu_threadIdx_'s offset in it */
    std::vector<TlsSym> syms;                /* STT_TLS symbols of the program, by offset */
};
RaceInfo &race_info() {
    static RaceInfo *R = [] {
        RaceInfo *r = new RaceInfo;
        int fd = open("/proc/self/exe", O_RDONLY);
        if (fd < 0) return r;
        off_t n = lseek(fd, 0, SEEK_END);
        void *m = n > 0 ? mmap(NULL, (size_t)n, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
        close(fd);
        if (m == MAP_FAILED) return r;
        const char *b = (const char *)m;
        const Elf64_Ehdr *eh = (const Elf64_Ehdr *)b;
        bool found_base = false;
        if (memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64) {
            const Elf64_Phdr *ph = (const Elf64_Phdr *)(b + eh->e_phoff);
            for (int i = 0; i < eh->e_phnum; i++)
                if (ph[i].p_type == PT_TLS) r->tls_size = ph[i].p_memsz;
            const Elf64_Shdr *sh = (const Elf64_Shdr *)(b + eh->e_shoff);
            for (int i = 0; i < eh->e_shnum; i++) {
                if (sh[i].sh_type != SHT_SYMTAB) continue;
                const Elf64_Sym *sy = (const Elf64_Sym *)(b + sh[i].sh_offset);
                const char *str = b + sh[sh[i].sh_link].sh_offset;
                size_t ns = sh[i].sh_size / sizeof(Elf64_Sym);
                for (size_t j = 0; j < ns; j++) {
                    if (ELF64_ST_TYPE(sy[j].st_info) != STT_TLS) continue;
                    const char *nm = str + sy[j].st_name;
                    if (!strcmp(nm, "gdl_emu_threadIdx_")) r->base_sym_off = sy[j].st_value, found_base = true;
                    if (sy[j].st_size == 0) continue;
                    int st = 0;
                    char *d = abi::__cxa_demangle(nm, NULL, NULL, &st);
                    r->syms.push_back({sy[j].st_value, sy[j].st_size, st == 0 && d ? d : nm});
                    free(d);
                }
            }
        }
        munmap(m, (size_t)n);
        std::sort(r->syms.begin(), r->syms.end(), [](const TlsSym &a, const TlsSym &c) { return a.off < c.off; });
        r->ok = found_base && r->tls_size > 0;
        return r;
    }();
    return *R;
}

// the static TLS block of this OS thread (worker), set up on its first checked access
bool race_tls(Worker *W) {
    if (W->rc_tls_lo) return true;
    RaceInfo &R = race_info();
    if (!R.ok) return false;
    W->rc_tls_lo = (char *)&gdl_emu_threadIdx_ - R.base_sym_off;
    W->rc_tls.assign(R.tls_size, RaceCell());
    return true;
}

std::string race_buffer(bool dyn, size_t off, size_t *sym_off) {
    if (dyn) {
        *sym_off = off;
        return "dynamic shared memory";
    }
    RaceInfo &R = race_info();
    for (const TlsSym &y : R.syms)
        if (off >= y.off && off < y.off + y.size) {
            *sym_off = off - y.off;
            return "__shared__ " + y.name;
        }
    *sym_off = off;
    return "static __shared__ storage (TLS offset)";
}

std::string thread_coords(const Block *B, unsigned t) {
    const Launch *L = B->L;
    char buf[64];
    snprintf(buf, sizeof buf, "(%u,%u,%u)", t % L->block.x, t / L->block.x % L->block.y, t / (L->block.x * L->block.y));
    return buf;
}

std::mutex &race_mu = *new std::mutex;
std::set<std::string> &race_seen = *new std::set<std::string>;

std::string pc_name(const void *pc) {
    Dl_info di;
    char buf[300];
    snprintf(buf, sizeof buf, "%p", pc);
    std::string r = buf;
    if (pc && dladdr(pc, &di) && di.dli_fbase) { /* as addr2line takes it: the offset in the binary */
        snprintf(buf, sizeof buf, "%s+0x%lx", di.dli_fname && *di.dli_fname ? di.dli_fname : "?",
                 (unsigned long)((const char *)pc - (const char *)di.dli_fbase));
        r = buf;
    }
    if (pc && dladdr(pc, &di) && di.dli_sname) {
        int st = 0;
        char *d = abi::__cxa_demangle(di.dli_sname, NULL, NULL, &st);
        std::string f = st == 0 && d ? d : di.dli_sname;
        free(d);
        size_t paren = f.find('(');
        if (paren != std::string::npos) f = f.substr(0, paren);
        r += " in " + f;
    }
    return r;
}

void race_report(Worker *W, const char *kind, bool dyn, size_t off, unsigned other, const void *opc, unsigned t,
                 const void *pc, unsigned epoch) {
    Block *B = W->block;
    size_t so;
    std::string buf = race_buffer(dyn, off, &so);
    std::string key = B->L->name + "|" + buf + "|" + kind + "|" + std::to_string((uintptr_t)opc) + "|" +
                      std::to_string((uintptr_t)pc);
    {
        std::lock_guard<std::mutex> l(race_mu);
        if (!race_seen.insert(key).second) return;
    }
    n_race++;
    std::string blk = where(B, t);
    size_t cut = blk.find(", thread ");
    if (cut != std::string::npos) blk = blk.substr(0, cut);
    diag("racecheck: %s hazard on %s, byte offset %zu: %s: thread %s (at %s) and thread %s (at %s) of that block, "
         "in one barrier interval (%u __syncthreads passed) with no barrier between them"
         " (addr2line -f -C -e <binary> <offset> names the lines)",
         kind, buf.c_str(), so, blk.c_str(), thread_coords(B, other).c_str(), pc_name(opc).c_str(),
         thread_coords(B, t).c_str(), pc_name(pc).c_str(), epoch);
}

inline bool warp_ordered(unsigned a, uint32_t a_sync, unsigned b, uint32_t b_sync_now) {
    return (a >> 5) == (b >> 5) && b_sync_now > a_sync;
}

void dev_access(Worker *W, char *a, size_t n, bool write, const void *pc, int on);
void shared_init_access(Worker *W, bool dyn, size_t off, size_t n, bool write, const void *pc);

__attribute__((noinline)) void race_access(void *addr, size_t n, bool write, const void *pc, int on) {
    Worker *W = tl_worker;
    if (!W || !W->block || !W->in_kernel || W->cur_thread < 0) return;
    char *a = (char *)addr;
    RaceCell *cells;
    size_t off;
    bool dyn;
    Block *B = W->block;
    if (B->L->shmem && a >= W->dyn_shared.data() && a < W->dyn_shared.data() + B->L->shmem) {
        dyn = true;
        if (W->rc_dyn.size() < W->dyn_shared.size()) W->rc_dyn.assign(W->dyn_shared.size(), RaceCell());
        off = (size_t)(a - W->dyn_shared.data());
        if (off + n > B->L->shmem) n = B->L->shmem - off;
        cells = W->rc_dyn.data();
    } else {
        if (!race_tls(W)) return;
        if (a < W->rc_tls_lo || a >= W->rc_tls_lo + W->rc_tls.size()) {
            if (on & (RC_INIT | RC_GLOBAL)) dev_access(W, a, n, write, pc, on);
            return;
        }
        if (a >= (char *)&gdl_emu_threadIdx_ && a < (char *)&gdl_emu_threadIdx_ + sizeof gdl_emu_threadIdx_) return;
        if (a >= (char *)&gdl_emu_blockIdx_ && a < (char *)&gdl_emu_blockIdx_ + sizeof gdl_emu_blockIdx_) return;
        if (a >= (char *)&gdl_emu_blockDim_ && a < (char *)&gdl_emu_blockDim_ + sizeof gdl_emu_blockDim_) return;
        if (a >= (char *)&gdl_emu_gridDim_ && a < (char *)&gdl_emu_gridDim_ + sizeof gdl_emu_gridDim_) return;
        dyn = false;
        off = (size_t)(a - W->rc_tls_lo);
        if (off + n > W->rc_tls.size()) n = W->rc_tls.size() - off;
        cells = W->rc_tls.data();
    }
    if (on & RC_INIT) shared_init_access(W, dyn, off, n, write, pc);
    if (!(on & RC_SHARED)) return;
    unsigned t = (unsigned)W->cur_thread;
    uint32_t ep = B->t[t].epoch + 1, ws = B->t[t].wsync, gen = W->rc_gen;
    bool reported = false;
    for (size_t i = 0; i < n; i++) {
        RaceCell &c = cells[off + i];
        if (c.gen != gen) {
            c.gen = gen;
            c.wep = c.rep = 0;
            c.w = c.r1 = c.r2 = 0xffff;
        }
        if (write) {
            if (!reported && c.wep == ep && c.w != t && !warp_ordered(c.w, c.wsy, t, ws)) {
                race_report(W, "write-write", dyn, off + i, c.w, c.wpc, t, pc, ep - 1);
                reported = true;
            }
            if (!reported && c.rep == ep) {
                if (c.r1 != 0xffff && c.r1 != t && !warp_ordered(c.r1, c.r1sy, t, ws)) {
                    race_report(W, "read-write", dyn, off + i, c.r1, c.rpc, t, pc, ep - 1);
                    reported = true;
                } else if (c.r2 != 0xffff && c.r2 != t && !warp_ordered(c.r2, c.r2sy, t, ws)) {
                    race_report(W, "read-write", dyn, off + i, c.r2, c.rpc, t, pc, ep - 1);
                    reported = true;
                }
            }
            c.w = (uint16_t)t;
            c.wep = ep;
            c.wsy = ws;
            c.wpc = pc;
        } else {
            if (!reported && c.wep == ep && c.w != t && !warp_ordered(c.w, c.wsy, t, ws)) {
                race_report(W, "write-read", dyn, off + i, c.w, c.wpc, t, pc, ep - 1);
                reported = true;
            }
            if (c.rep != ep) {
                c.rep = ep;
                c.r1 = (uint16_t)t, c.r1sy = ws, c.rpc = pc;
                c.r2 = 0xffff;
            } else if (c.r1 == t) {
                c.r1sy = ws;
            } else if (c.r2 == 0xffff || c.r2 == t) {
                c.r2 = (uint16_t)t, c.r2sy = ws;
            }
        }
    }
}

void race_at_exit() {
    long n = n_race.load(), u = n_uninit.load();
    if ((n > 0 && cfg().racecheck) || (u > 0 && cfg().initcheck)) {
        fflush(stdout);
        if (n) fprintf(stderr, "gpudl emu: racecheck: %ld hazard(s) reported; exit status 66\n", n);
        if (u) fprintf(stderr, "gpudl emu: initcheck: %ld read(s) of uninitialised memory reported; exit status 66\n", u);
        fflush(stderr);
        _exit(66);
    }
}

void race_resolve() {
    if (rc_on.load(std::memory_order_relaxed) >= 0) return; /* resolved: the launches' fast path */
    static std::mutex mu;
    std::lock_guard<std::mutex> l(mu);
    if (rc_on.load() >= 0) return;
    int want = (cfg().racecheck ? RC_SHARED | RC_GLOBAL : 0) | (cfg().initcheck ? RC_INIT : 0);
    if (want && !rc_instrumented.load()) {
        fprintf(stderr, "gpudl emu: GPUDL_EMU_RACECHECK or GPUDL_EMU_INITCHECK is set but no code was compiled "
                        "with -fsanitize=thread: kernels are not checked\n");
        want = 0;
    }
    if (want && !race_info().ok) {
        fprintf(stderr, "gpudl emu: GPUDL_EMU_RACECHECK/INITCHECK: the program's TLS layout is unreadable (no symbol "
                        "table?): kernels are not checked\n");
        want = 0;
    }
    if (cfg().racecheck || cfg().initcheck) atexit(race_at_exit); /* copies are checked without instrumentation */
    rc_on.store(want);
}

// ---------------------------------------------------------------------------
// GPUDL_EMU_INITCHECK and the global-memory half of GPUDL_EMU_RACECHECK: a
// shadow of every device allocation (made while either is set), found from
// an address through a two-level table of pages (lock-free: a kernel's every
// load and store looks it up). Per byte, `w` holds the writer's tag: 0 never
// written, 1 a host-side operation (copy, memset, cuBLAS, NCCL), else the
// tag of the block that last wrote it (a launch's blocks have the tags
// tag0 .. tag0 + nblocks - 1, unique over the process); `r` (racecheck) the
// tag of the last block that read it. Initcheck: a kernel read of a byte
// whose w is 0, a device-to-host copy of one, or a cuBLAS/NCCL operand that
// holds one is reported. Racecheck: a byte written by one block and written
// or read by another of the same launch (w or r in the launch's tag range)
// is a hazard, unless both blocks ran a __threadfence (the "last block"
// pattern: fence, atomic counter, the last block reads what the others
// wrote); atomics are not checked. Static and dynamic shared bytes carry
// the block generation that wrote them (Worker::ic_tls / ic_dyn): a read of
// one not written by the running block is reported.

struct Shadow {
    char *ptr;
    size_t size, rounded;
    long id;
    int dev;
    uint32_t *w, *r; /* per byte of [ptr, ptr + rounded); r NULL unless racecheck */
    size_t wlen, rlen;
};

std::atomic<bool> sh_wanted{false}; /* a test turned a check on: shadow new allocations */
const int SH_L2 = 18;               /* 4 KiB pages: 35 bits of page number, 17 + 18 */
std::atomic<Shadow **> sh_top[1u << 17];
std::atomic<uint32_t> sh_next_tag{16};

bool sh_enabled() { return cfg().initcheck || cfg().racecheck || sh_wanted.load(); }

Shadow *sh_find(const void *p) {
    uintptr_t pn = (uintptr_t)p >> 12;
    if (pn >> (17 + SH_L2)) return nullptr;
    Shadow **l2 = sh_top[pn >> SH_L2].load(std::memory_order_acquire);
    return l2 ? l2[pn & ((1u << SH_L2) - 1)] : nullptr;
}

void sh_set_pages(const char *lo, size_t n, Shadow *S) {
    for (uintptr_t pn = (uintptr_t)lo >> 12; pn <= ((uintptr_t)lo + n - 1) >> 12; pn++) {
        std::atomic<Shadow **> &t = sh_top[pn >> SH_L2];
        Shadow **l2 = t.load(std::memory_order_acquire);
        if (!l2) {
            Shadow **fresh = (Shadow **)mmap(NULL, sizeof(Shadow *) << SH_L2, PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (fresh == MAP_FAILED) return;
            if (!t.compare_exchange_strong(l2, fresh)) munmap(fresh, sizeof(Shadow *) << SH_L2);
            else l2 = fresh;
        }
        l2[pn & ((1u << SH_L2) - 1)] = S;
    }
}

uint32_t *sh_map(size_t n) {
    void *m = mmap(NULL, n * 4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return m == MAP_FAILED ? nullptr : (uint32_t *)m;
}

// a new device allocation: its shadow, all bytes never written
void sh_register(const Alloc &A) {
    if (A.kind != MEM_DEVICE || !sh_enabled()) return;
    Shadow *S = new Shadow{A.ptr, A.size, A.rounded, A.id, A.device, nullptr, nullptr, A.rounded, 0};
    S->w = sh_map(A.rounded);
    if (cfg().racecheck || sh_wanted.load()) S->r = sh_map(S->rlen = A.rounded);
    if (!S->w) {
        delete S;
        return;
    }
    sh_set_pages(A.ptr, A.rounded, S);
}

// a freed one (the device is idle: no kernel looks it up)
void sh_unregister(const Alloc &A) {
    Shadow *S = sh_find(A.ptr);
    if (!S || S->ptr != A.ptr) return;
    sh_set_pages(A.ptr, A.rounded, nullptr);
    munmap(S->w, S->wlen * 4);
    if (S->r) munmap(S->r, S->rlen * 4);
    delete S;
}

std::string sh_name(const Shadow *S) {
    char b[128];
    snprintf(b, sizeof b, "device allocation #%ld (%zu bytes, cuda:%d)", S->id, S->size, S->dev);
    return b;
}

std::string block_coords(const Launch *L, uint64_t lin) {
    char b[64];
    snprintf(b, sizeof b, "(%u,%u,%u)", (unsigned)(lin % L->grid.x), (unsigned)(lin / L->grid.x % L->grid.y),
             (unsigned)(lin / ((uint64_t)L->grid.x * L->grid.y)));
    return b;
}

// once per distinct key; false when already reported
bool sh_first(const std::string &key) {
    std::lock_guard<std::mutex> l(race_mu);
    return race_seen.insert(key).second;
}

void init_report(Worker *W, const std::string &buf, size_t off, size_t nbytes, const void *pc) {
    Block *B = W->block;
    if (!sh_first("init|" + B->L->name + "|" + std::to_string((uintptr_t)pc))) return;
    n_uninit++;
    diag("initcheck: read of %zu uninitialised byte(s) of %s at byte offset %zu: %s (at %s); never written "
         "since its allocation%s (addr2line -f -C -e <binary> <offset> names the line)",
         nbytes, buf.c_str(), off, where(B, (unsigned)W->cur_thread).c_str(), pc_name(pc).c_str(),
         buf.find("shared") != std::string::npos ? " or the start of this block" : "");
}

void global_race_report(Worker *W, const char *kind, const Shadow *S, size_t off, uint32_t other, const void *pc) {
    Block *B = W->block;
    const Launch *L = B->L;
    if (!sh_first(std::string("grace|") + kind + "|" + L->name + "|" + std::to_string((uintptr_t)pc))) return;
    n_race++;
    diag("racecheck: global-memory %s hazard on %s, byte offset %zu: kernel %s (launch #%ld): block %s and block "
         "%s (thread %s, at %s) of that launch, with neither atomics nor fences ordering them",
         kind, sh_name(S).c_str(), off, L->name.c_str(), L->number, block_coords(L, other - L->tag0).c_str(),
         block_coords(L, B->linear).c_str(), thread_coords(B, (unsigned)W->cur_thread).c_str(), pc_name(pc).c_str());
}

// a kernel's access to memory outside shared memory: device memory is checked
void dev_access(Worker *W, char *a, size_t n, bool write, const void *pc, int on) {
    Shadow *S = sh_find(a);
    if (!S || a < S->ptr) return;
    size_t off = (size_t)(a - S->ptr);
    if (off >= S->rounded) return;
    if (off + n > S->rounded) n = S->rounded - off;
    const Launch *L = W->block->L;
    uint32_t me = L->tag0 ? L->tag0 + (uint32_t)W->block->linear : 1, n_blk = (uint32_t)L->fenced.size();
    bool race = (on & RC_GLOBAL) && S->r && L->tag0, init = on & RC_INIT;
    auto other_block = [&](uint32_t tag) {
        return tag - L->tag0 < n_blk && tag != me &&
               !(L->fenced[tag - L->tag0] && L->fenced[W->block->linear]);
    };
    if (write) {
        for (size_t i = 0; i < n; i++) {
            if (race && other_block(S->w[off + i])) global_race_report(W, "write-write", S, off + i, S->w[off + i], pc);
            else if (race && other_block(S->r[off + i])) global_race_report(W, "read-write", S, off + i, S->r[off + i], pc);
            S->w[off + i] = me;
        }
        return;
    }
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t w = S->w[off + i];
        if (init && w == 0 && !bad++) first = off + i;
        if (race) {
            if (other_block(w)) global_race_report(W, "write-read", S, off + i, w, pc);
            S->r[off + i] = me;
        }
    }
    if (bad) init_report(W, sh_name(S), first, bad, pc);
}

// initcheck of static (TLS) or dynamic shared memory
void shared_init_access(Worker *W, bool dyn, size_t off, size_t n, bool write, const void *pc) {
    std::vector<uint32_t> &v = dyn ? W->ic_dyn : W->ic_tls;
    size_t need = dyn ? W->dyn_shared.size() : W->rc_tls.size();
    if (v.size() < need) v.resize(need, 0);
    if (off + n > v.size()) n = v.size() - off;
    uint32_t gen = W->rc_gen;
    if (write) {
        for (size_t i = 0; i < n; i++) v[off + i] = gen;
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (v[off + i] != gen) {
            size_t so;
            std::string buf = race_buffer(dyn, off + i, &so);
            init_report(W, buf, so, 1, pc);
            return;
        }
}

// atomics (not race-checked): a read-modify-write or load needs initialised
// memory, a store or read-modify-write initialises it
void atomic_access(const volatile void *p, size_t n, bool reads, bool writes, const void *pc) {
    int on = rc_on.load(std::memory_order_relaxed);
    if (on <= 0 || !(on & RC_INIT)) return;
    Worker *W = tl_worker;
    if (!W || !W->block || !W->in_kernel || W->cur_thread < 0) return;
    Shadow *S = sh_find((const void *)p);
    char *a = (char *)p;
    if (!S || a < S->ptr || (size_t)(a - S->ptr) + n > S->rounded) return;
    size_t off = (size_t)(a - S->ptr);
    for (size_t i = 0; i < n; i++) {
        if (reads && S->w[off + i] == 0) {
            init_report(W, sh_name(S), off + i, n - i, pc);
            break;
        }
    }
    if (writes)
        for (size_t i = 0; i < n; i++) S->w[off + i] = 1; /* not a block's plain write: no race pairs */
}

// host-side operations on device memory (queued copies, memsets, cuBLAS,
// NCCL): `what` names the operation in reports. Returns the count of bytes
// of [p, p + n) never written (checking), or marks them written.
size_t sh_check_host(const char *what, const void *p, size_t n) {
    int on = rc_on.load(std::memory_order_relaxed);
    if (!cfg().initcheck && !(on > 0 && (on & RC_INIT))) return 0;
    Shadow *S = sh_find(p);
    if (!S || (const char *)p < S->ptr) return 0;
    size_t off = (size_t)((const char *)p - S->ptr), bad = 0, first = 0;
    if (off + n > S->rounded) n = S->rounded - off;
    for (size_t i = 0; i < n; i++)
        if (S->w[off + i] == 0 && !bad++) first = off + i;
    if (bad && sh_first(std::string("hinit|") + what + "|" + std::to_string(S->id) + "|" + std::to_string(first))) {
        n_uninit++;
        diag("initcheck: %s reads %zu uninitialised byte(s) of %s (%zu bytes at byte offset %zu; the first never "
             "written at byte offset %zu)", what, bad, sh_name(S).c_str(), n, off, first);
    }
    return bad;
}

void sh_mark_host(const void *p, size_t n, const void *from = nullptr) {
    Shadow *S = sh_find(p);
    if (!S || (const char *)p < S->ptr) return;
    size_t off = (size_t)((const char *)p - S->ptr);
    if (off + n > S->rounded) n = S->rounded - off;
    Shadow *F = from ? sh_find(from) : nullptr; /* device-to-device: the source's state travels */
    size_t foff = F && (const char *)from >= F->ptr ? (size_t)((const char *)from - F->ptr) : 0;
    for (size_t i = 0; i < n; i++)
        S->w[off + i] = !F || foff + i >= F->rounded || F->w[foff + i] ? 1 : 0;
    if (S->r) memset(S->r + off, 0, n * 4);
}

// n shadow words zeroed: whole pages given back to the kernel (they read
// as zero again), so that forgetting a large block costs no page faults
void zero_shadow(uint32_t *w, size_t n) {
    const uintptr_t pg = 4096;
    uintptr_t lo = ((uintptr_t)w + pg - 1) & ~(pg - 1), hi = ((uintptr_t)(w + n)) & ~(pg - 1);
    if (hi <= lo || madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0) {
        memset(w, 0, n * 4);
        return;
    }
    memset(w, 0, lo - (uintptr_t)w);
    memset((void *)hi, 0, (uintptr_t)(w + n) - hi);
}

// a block of a device allocation that a suballocator hands out again: its
// bytes count as never written, with no writer or reader block, as in a
// fresh allocation (gdl_emu_mark_uninit)
void sh_forget(const void *p, size_t n) {
    Shadow *S = sh_find(p);
    if (!S || (const char *)p < S->ptr) return;
    size_t off = (size_t)((const char *)p - S->ptr);
    if (off >= S->rounded) return;
    if (off + n > S->rounded) n = S->rounded - off;
    zero_shadow(S->w + off, n);
    if (S->r) zero_shadow(S->r + off, n);
}

// a column-major operand of a host-side GEMM: rows x cols elements of es bytes, ld apart
void sh_matrix(const char *what, const void *p, long long rows, long long cols, long long ld, size_t es, bool write) {
    if (!p || rows <= 0 || cols <= 0 || !sh_find(p)) return;
    for (long long j = 0; j < cols; j++) {
        const char *c = (const char *)p + (size_t)(j * ld) * es;
        if (write) sh_mark_host(c, (size_t)rows * es);
        else if (sh_check_host(what, c, (size_t)rows * es)) return;
    }
}

// a launch's block tags (and its blocks' fence flags) under the global check
void sh_launch(Launch *L) {
    int on = rc_on.load(std::memory_order_relaxed);
    if (on <= 0 || !(on & (RC_GLOBAL | RC_INIT))) return;
    uint32_t n = L->nblocks > 0xfffffff ? 0xfffffff : (uint32_t)L->nblocks;
    L->tag0 = sh_next_tag.fetch_add(n);
    if (L->tag0 < 16) L->tag0 = sh_next_tag.fetch_add(n); /* wrapped past 2^32: skip the reserved tags */
    L->fenced.assign(n, 0);
}

void sh_fence() {
    Worker *W = tl_worker;
    if (!W || !W->block || !W->in_kernel || W->cur_thread < 0) return;
    const Launch *L = W->block->L;
    if (W->block->linear < L->fenced.size()) const_cast<Launch *>(L)->fenced[W->block->linear] = 1;
}

inline void race_hook(void *a, size_t n, bool w, const void *pc) {
    int on = rc_on.load(std::memory_order_relaxed);
    if (__builtin_expect(on > 0, 0)) race_access(a, n, w, pc, on);
}

} // namespace

extern "C" {

// turns the check on (1) or off (0) from a test; -1 when no code is instrumented
int gdl_emu_racecheck(int on) {
    race_resolve();
    if (!rc_instrumented.load() || !race_info().ok) return -1;
    sh_wanted.store(true);
    rc_on.store((rc_on.load() & RC_INIT) | (on ? RC_SHARED | RC_GLOBAL : 0));
    return 0;
}

// the same for GPUDL_EMU_INITCHECK
int gdl_emu_initcheck(int on) {
    race_resolve();
    if (!rc_instrumented.load() || !race_info().ok) return -1;
    sh_wanted.store(true);
    rc_on.store((rc_on.load() & ~RC_INIT) | (on ? RC_INIT : 0));
    return 0;
}

// the hooks of GCC's -fsanitize=thread instrumentation (the TSan runtime's ABI)
void __tsan_init(void) {
    rc_instrumented.store(true);
}
void __tsan_func_entry(void *) {}
void __tsan_func_exit(void) {}
#define GDL_RC_RW(n)                                                                                     \
    void __tsan_read##n(void *a) { race_hook(a, n, false, __builtin_return_address(0)); }               \
    void __tsan_write##n(void *a) { race_hook(a, n, true, __builtin_return_address(0)); }               \
    void __tsan_unaligned_read##n(void *a) { race_hook(a, n, false, __builtin_return_address(0)); }     \
    void __tsan_unaligned_write##n(void *a) { race_hook(a, n, true, __builtin_return_address(0)); }     \
    void __tsan_volatile_read##n(void *a) { race_hook(a, n, false, __builtin_return_address(0)); }      \
    void __tsan_volatile_write##n(void *a) { race_hook(a, n, true, __builtin_return_address(0)); }
GDL_RC_RW(1)
GDL_RC_RW(2)
GDL_RC_RW(4)
GDL_RC_RW(8)
GDL_RC_RW(16)
#undef GDL_RC_RW
void __tsan_read_range(void *a, unsigned long n) { race_hook(a, n, false, __builtin_return_address(0)); }
void __tsan_write_range(void *a, unsigned long n) { race_hook(a, n, true, __builtin_return_address(0)); }
void __tsan_vptr_update(void **, void *) {}
void __tsan_vptr_read(void **) {}
void __tsan_atomic_thread_fence(int) {
    if (rc_on.load(std::memory_order_relaxed) > 0) sh_fence();
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
// atomics: performed sequentially consistent; not checked for hazards
// initcheck sees them (atomic_access); racecheck does not
#define GDL_RC_AA(a, rd, wr) atomic_access(a, sizeof *(a), rd, wr, __builtin_return_address(0))
#define GDL_RC_AT(n, T)                                                                                           \
    T __tsan_atomic##n##_load(const volatile T *a, int) {                                                          \
        GDL_RC_AA(a, 1, 0);                                                                                        \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                               \
    }                                                                                                              \
    void __tsan_atomic##n##_store(volatile T *a, T v, int) {                                                      \
        GDL_RC_AA(a, 0, 1);                                                                                        \
        __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                                  \
    }                                                                                                              \
    T __tsan_atomic##n##_exchange(volatile T *a, T v, int) {                                                      \
        GDL_RC_AA(a, 0, 1);                                                                                        \
        return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                        \
    }                                                                                                              \
    T __tsan_atomic##n##_fetch_add(volatile T *a, T v, int) {                                                     \
        GDL_RC_AA(a, 1, 1);                                                                                        \
        return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                                         \
    }                                                                                                              \
    T __tsan_atomic##n##_fetch_sub(volatile T *a, T v, int) {                                                     \
        GDL_RC_AA(a, 1, 1);                                                                                        \
        return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                                         \
    }                                                                                                              \
    T __tsan_atomic##n##_fetch_and(volatile T *a, T v, int) {                                                     \
        GDL_RC_AA(a, 1, 1);                                                                                        \
        return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                                         \
    }                                                                                                              \
    T __tsan_atomic##n##_fetch_or(volatile T *a, T v, int) {                                                      \
        GDL_RC_AA(a, 1, 1);                                                                                        \
        return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                                          \
    }                                                                                                              \
    T __tsan_atomic##n##_fetch_xor(volatile T *a, T v, int) {                                                     \
        GDL_RC_AA(a, 1, 1);                                                                                        \
        return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                                         \
    }                                                                                                              \
    T __tsan_atomic##n##_fetch_nand(volatile T *a, T v, int) {                                                    \
        GDL_RC_AA(a, 1, 1);                                                                                        \
        return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                        \
    }                                                                                                              \
    int __tsan_atomic##n##_compare_exchange_strong(volatile T *a, T *c, T v, int, int) {                          \
        GDL_RC_AA(a, 1, 1);                                                                                        \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                    \
    }                                                                                                              \
    int __tsan_atomic##n##_compare_exchange_weak(volatile T *a, T *c, T v, int, int) {                            \
        GDL_RC_AA(a, 1, 1);                                                                                        \
        return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                     \
    }                                                                                                              \
    T __tsan_atomic##n##_compare_exchange_val(volatile T *a, T c, T v, int, int) {                                \
        GDL_RC_AA(a, 1, 1);                                                                                        \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                          \
        return c;                                                                                                  \
    }
GDL_RC_AT(8, uint8_t)
GDL_RC_AT(16, uint16_t)
GDL_RC_AT(32, uint32_t)
GDL_RC_AT(64, uint64_t)
#undef GDL_RC_AT
#undef GDL_RC_AA

} // extern "C"

// signals: a fault on device memory, a guard page or a quarantined block

namespace {

struct sigaction old_segv, old_bus;

// what lies at address a (called in the signal handler: try-lock only)
std::string describe_addr(uintptr_t a, bool *known) {
    MemState &M = mem();
    char buf[400];
    *known = false;
    if (!M.mu.try_lock()) return "(allocation table busy)";
    std::string r;
    size_t ps = page_size();
    for (auto &kv : M.live) {
        const Alloc &A = kv.second;
        uintptr_t lo = (uintptr_t)A.map, hi = lo + A.map_len, p = (uintptr_t)A.ptr;
        if (a < lo || a >= hi) continue;
        *known = true;
        if (a >= p && a < p + A.size)
            snprintf(buf, sizeof buf, "%zu bytes into a live %zu-byte %s allocation #%ld of cuda:%d at %p",
                     (size_t)(a - p), A.size, A.kind == MEM_DEVICE ? "device" : "pinned", A.id, A.device, A.ptr);
        else if (a >= p + A.size)
            snprintf(buf, sizeof buf, "%zu bytes past the end of the %zu-byte device allocation #%ld of cuda:%d at %p",
                     (size_t)(a - p - A.size), A.size, A.id, A.device, A.ptr);
        else
            snprintf(buf, sizeof buf, "%zu bytes before the %zu-byte device allocation #%ld of cuda:%d at %p",
                     (size_t)(p - a), A.size, A.id, A.device, A.ptr);
        r = buf;
        break;
    }
    if (!*known)
        for (auto &A : M.quarantine) {
            uintptr_t lo = (uintptr_t)A.map, hi = lo + A.map_len, p = (uintptr_t)A.ptr;
            if (a < lo || a >= hi) continue;
            *known = true;
            snprintf(buf, sizeof buf, "%ld bytes into the freed %zu-byte device allocation #%ld of cuda:%d at %p "
                     "(use after cudaFree)", (long)(a - p), A.size, A.id, A.device, A.ptr);
            r = buf;
            break;
        }
    (void)ps;
    M.mu.unlock();
    return r;
}

void on_fault(int sig, siginfo_t *si, void *uc) {
    uintptr_t a = (uintptr_t)si->si_addr;
    bool known = false;
    std::string what = describe_addr(a, &known);
    Worker *W = tl_worker;
    bool is_write = false;
#if defined(__x86_64__) && defined(REG_ERR)
    is_write = (((ucontext_t *)uc)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
    (void)uc;
#endif
    if (!known && W && W->in_kernel && W->cur) {
        Fiber *f = W->cur;
        if (a >= (uintptr_t)f->stack - page_size() && a < (uintptr_t)f->stack) {
            known = true;
            what = "the guard page below the thread's stack (stack overflow)";
        }
    }
    if (known && W && W->in_kernel && W->block) {
        W->fault_msg = where(W->block, (unsigned)W->cur_thread) + ": illegal address: " +
                       (is_write ? "write" : "read") + " at " + std::to_string((unsigned long long)a) + ", " + what;
#ifdef GDL_EMU_ASAN
        __sanitizer_start_switch_fiber(NULL, W->main_stack_bottom, W->main_stack_size);
#endif
        siglongjmp(W->jb, 1);
    }
    if (known) {
        char buf[700];
        int n = snprintf(buf, sizeof buf, "gpudl emu: host code %s device memory at %p outside kernels and copies: %s\n",
                         is_write ? "wrote" : "read", (void *)a, what.c_str());
        if (n > 0) (void)!write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
        signal(SIGABRT, SIG_DFL);
        abort();
    }
    // not ours: hand on to whoever was there before (ASan's handler, or the default)
    struct sigaction *o = sig == SIGSEGV ? &old_segv : &old_bus;
    if (o->sa_flags & SA_SIGINFO) {
        if (o->sa_sigaction) {
            o->sa_sigaction(sig, si, uc);
            return;
        }
    } else if (o->sa_handler != SIG_DFL && o->sa_handler != SIG_IGN) {
        o->sa_handler(sig);
        return;
    }
    signal(sig, SIG_DFL); /* re-fault with the default action */
}

void install_signals() {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
}

} // namespace

// ---------------------------------------------------------------------------
// launch submission

namespace {
// GPUDL_EMU_LAUNCH_LOG=path: each kernel's largest launch configurations,
// written at exit for tests/launch_limits.sh (held against the real build's
// registers and shared memory): "name threads dynamic_shmem grid_x grid_y grid_z"
struct LaunchMax {
    unsigned threads = 0, gx = 0, gy = 0, gz = 0;
    size_t shmem = 0;
};
std::mutex &ll_mu = *new std::mutex;
std::map<std::string, LaunchMax> &ll_map = *new std::map<std::string, LaunchMax>;
void launch_log_write() {
    const char *path = getenv("GPUDL_EMU_LAUNCH_LOG");
    FILE *f = path ? fopen(path, "w") : nullptr;
    if (!f) return;
    std::lock_guard<std::mutex> l(ll_mu);
    for (auto &kv : ll_map)
        fprintf(f, "%s %u %zu %u %u %u\n", kv.first.c_str(), kv.second.threads, kv.second.shmem, kv.second.gx,
                kv.second.gy, kv.second.gz);
    fclose(f);
}
void launch_log(const char *name, dim3 grid, dim3 block, size_t shmem) {
    static bool on = [] {
        const char *e = getenv("GPUDL_EMU_LAUNCH_LOG");
        if (e && *e) atexit(launch_log_write);
        return e && *e;
    }();
    if (!on) return;
    std::string n = name; /* "gdl__k_x<T>" as written at the launch: the template's name */
    size_t lt = n.find('<');
    if (lt != std::string::npos) n.resize(lt);
    std::lock_guard<std::mutex> l(ll_mu);
    LaunchMax &m = ll_map[n];
    m.threads = std::max(m.threads, block.x * block.y * block.z);
    m.shmem = std::max(m.shmem, shmem);
    m.gx = std::max(m.gx, grid.x), m.gy = std::max(m.gy, grid.y), m.gz = std::max(m.gz, grid.z);
}
} // namespace

extern "C" void gdl_emu_submit(const char *name, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream, void *ctx,
                               void (*run)(void *), void (*destroy)(void *), const void *const *ptrs, int nptrs) {
    cudaError_t e = cudaSuccess;
    long num = ++n_launch;
    if (!init_ok()) e = cudaErrorNoDevice;
    if (e == cudaSuccess) e = sticky_now();
    uint64_t nthreads = (uint64_t)block.x * block.y * block.z;
    if (e == cudaSuccess && (block.x < 1 || block.y < 1 || block.z < 1 || block.x > 1024 || block.y > 1024 ||
                             block.z > 64 || nthreads > 1024)) {
        diag("launch #%ld of %s: block (%u,%u,%u) exceeds the limits (1024 threads, dims 1024x1024x64)", num, name,
             block.x, block.y, block.z);
        e = cudaErrorInvalidConfiguration;
    }
    if (e == cudaSuccess && (grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.x > 2147483647u || grid.y > 65535 ||
                             grid.z > 65535)) {
        diag("launch #%ld of %s: grid (%u,%u,%u) exceeds the limits", num, name, grid.x, grid.y, grid.z);
        e = cudaErrorInvalidConfiguration;
    }
    if (e == cudaSuccess && shmem > 48 * 1024) {
        diag("launch #%ld of %s: %zu bytes of dynamic shared memory (at most 49152)", num, name, shmem);
        e = cudaErrorInvalidValue;
    }
    if (e == cudaSuccess) launch_log(name, grid, block, shmem);
    long fl = fail_launch_at.load();
    if (e == cudaSuccess && fl >= 0 && num == fl) {
        fail_launch_at.store(-1);
        e = cudaErrorLaunchOutOfResources;
    }
    Stream *s = nullptr;
    if (e == cudaSuccess) {
        std::lock_guard<std::mutex> l(g_mu);
        s = resolve_locked(stream);
        if (!s) {
            diag("launch #%ld of %s: invalid stream %p", num, name, (void *)stream);
            e = cudaErrorInvalidResourceHandle;
        }
    }
    // pointer arguments must be device (or pinned) memory of this device
    for (int i = 0; e == cudaSuccess && i < nptrs; i++) {
        if (!ptrs[i]) continue;
        std::lock_guard<std::mutex> l(mem().mu);
        const Alloc *A = find_live(ptrs[i]);
        if (!A) {
            bool freed = false;
            for (auto &q : mem().quarantine)
                if ((uintptr_t)ptrs[i] >= (uintptr_t)q.ptr && (uintptr_t)ptrs[i] <= (uintptr_t)q.ptr + q.size)
                    freed = true;
            diag("launch #%ld of %s: pointer argument %d (%p) is %s", num, name, i + 1, ptrs[i],
                 freed ? "freed device memory" : "not device memory");
            e = cudaErrorInvalidValue;
        } else if (A->kind == MEM_DEVICE && A->device != s->dev) {
            diag("launch #%ld of %s on cuda:%d: pointer argument %d (%p) is memory of cuda:%d", num, name, s->dev,
                 i + 1, ptrs[i], A->device);
            e = cudaErrorInvalidValue;
        }
    }
    if (e != cudaSuccess) {
        destroy(ctx);
        set_err(e);
        return;
    }
    std::shared_ptr<Launch> L(new Launch, [](Launch *l) {
        l->destroy(l->ctx);
        delete l;
    });
    L->name = name;
    L->grid = grid;
    L->block = block;
    L->shmem = shmem;
    L->dev = s->dev;
    L->ctx = ctx;
    L->run = run;
    L->destroy = destroy;
    L->nblocks = (uint64_t)grid.x * grid.y * grid.z;
    L->nthreads = (unsigned)nthreads;
    L->number = num;
    std::lock_guard<std::mutex> l(g_mu);
    if (s->legacy && global_capture_locked(s->dev)) {
        set_err(capture_violation_locked(s->dev, cudaErrorStreamCaptureImplicit, "a launch on the legacy stream"));
        return;
    }
    enqueue_locked(s, [L] { execute_launch(L.get()); });
}

// ---------------------------------------------------------------------------
// the runtime API

namespace {

// the kind of [p, p + n): device memory of which device (>= 0), pinned (-2)
// or other host memory (-1); *bad set when it straddles an allocation's end
int classify(const void *p, size_t n, bool *bad, const Alloc **out = nullptr) {
    std::lock_guard<std::mutex> l(mem().mu);
    const Alloc *A = find_live(p);
    *bad = false;
    if (out) *out = A;
    if (!A) {
        for (auto &q : mem().quarantine)
            if ((uintptr_t)p >= (uintptr_t)q.ptr && (uintptr_t)p < (uintptr_t)q.ptr + q.size) {
                *bad = true; /* freed device memory */
                return q.device;
            }
        return -1;
    }
    if ((uintptr_t)p + n > (uintptr_t)A->ptr + A->size) *bad = true;
    return A->kind == MEM_PINNED ? -2 : A->device;
}

const char *kind_name(cudaMemcpyKind k) {
    switch (k) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    default: return "Default";
    }
}

// checks of a copy; returns the error (and reports it) or success
cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind, const char *fn) {
    bool bd, bs;
    int kd = classify(dst, n, &bd), ks = classify(src, n, &bs);
    bool dev_d = kd >= 0, dev_s = ks >= 0;
    if (bd || bs) {
        diag("%s(%p, %p, %zu, %s): the %s range is %s", fn, dst, (void *)src, n, kind_name(kind),
             bd ? "destination" : "source",
             (bd ? kd : ks) >= 0 && !find_live(bd ? dst : src) ? "in freed device memory"
                                                               : "beyond the end of its allocation");
        return cudaErrorInvalidValue;
    }
    bool want_d = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool want_s = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind != cudaMemcpyDefault && (kind < 0 || kind > 4)) {
        diag("%s: invalid copy kind %d", fn, (int)kind);
        return cudaErrorInvalidMemcpyDirection;
    }
    if (kind != cudaMemcpyDefault && ((want_d && !dev_d) || (!want_d && dev_d) || (want_s && !dev_s) ||
                                      (!want_s && dev_s))) {
        diag("%s(%p, %p, %zu, %s): the destination is %s and the source is %s", fn, dst, (void *)src, n,
             kind_name(kind), dev_d ? "device memory" : "host memory", dev_s ? "device memory" : "host memory");
        return cudaErrorInvalidValue;
    }
    if (dev_d && dev_s && (uintptr_t)dst < (uintptr_t)src + n && (uintptr_t)src < (uintptr_t)dst + n) {
        diag("%s(%p, %p, %zu, %s): source and destination overlap", fn, dst, (void *)src, n, kind_name(kind));
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

bool is_pinned(const void *p) {
    bool b;
    return classify(p, 0, &b) == -2;
}

// returns false when a kernel wrote outside the allocation (into the
// rounding slop that no guard page covers)
bool free_alloc_locked(const Alloc &A, bool quarantine) {
    MemState &M = mem();
    size_t ps = page_size();
    bool clean = true;
    sh_unregister(A);
    if (A.kind == MEM_DEVICE) {
        M.used[A.device] -= A.rounded;
        size_t body = (A.rounded + ps - 1) / ps * ps;
        // a write into the rounding slop or the gap before the block
        mprotect(A.map + ps, body, PROT_READ);
        const unsigned char *b = (const unsigned char *)A.map + ps, *e = (const unsigned char *)A.map + ps + body;
        for (const unsigned char *p = b; p < e; p++) {
            if (p == (const unsigned char *)A.ptr) p += A.size;
            if (p >= e) break;
            if (*p != 0xff) {
                diag("cudaFree(%p): illegal address: bytes outside the %zu-byte allocation #%ld of cuda:%d were "
                     "written (%ld bytes from its start)", A.ptr, A.size, A.id, A.device,
                     (long)((const char *)p - A.ptr));
                clean = false;
                break;
            }
        }
    }
    if (!quarantine || A.kind != MEM_DEVICE) {
        munmap(A.map, A.map_len);
        return clean;
    }
    mprotect(A.map, A.map_len, PROT_NONE);
    M.quarantine.push_back(A);
    M.quarantined += A.map_len;
    while (M.quarantined > cfg().quarantine && !M.quarantine.empty()) {
        Alloc &o = M.quarantine.front();
        munmap(o.map, o.map_len);
        M.quarantined -= o.map_len;
        M.quarantine.pop_front();
    }
    return clean;
}

Alloc *map_alloc(size_t size, int kind, int dev, long id) {
    size_t ps = page_size(), rounded = (size + 255) / 256 * 256, body = (rounded + ps - 1) / ps * ps;
    if (rounded < size || body < rounded) return nullptr;
    size_t len = body + 2 * ps;
    char *m = (char *)mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    mprotect(m + ps, body, PROT_READ | PROT_WRITE);
    memset(m + ps, 0xff, body); /* fresh memory reads as NaN */
    static thread_local Alloc a;
    a.map = m;
    a.map_len = len;
    a.ptr = m + ps + (body - rounded);
    a.size = size;
    a.rounded = rounded;
    a.device = dev;
    a.kind = kind;
    a.id = id;
    return &a;
}

} // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int *count) {
    if (!count) return set_err(cudaErrorInvalidValue);
    *count = cfg().devices;
    if (!init_ok()) return set_err(cudaErrorNoDevice);
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) {
    if (!init_ok()) return set_err(cudaErrorNoDevice);
    if (d < 0 || d >= cfg().devices) return set_err(cudaErrorInvalidDevice);
    tl_dev = d;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d) {
    if (!d) return set_err(cudaErrorInvalidValue);
    if (!init_ok()) return set_err(cudaErrorNoDevice);
    *d = tl_dev;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t s = init_ok() ? sticky_now() : cudaSuccess;
    if (s != cudaSuccess) return s;
    cudaError_t e = tl_err;
    tl_err = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) {
    cudaError_t s = init_ok() ? sticky_now() : cudaSuccess;
    return s != cudaSuccess ? s : tl_err;
}

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    default: return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorIllegalState: return "the operation is not permitted in the current state";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    default: return "unknown error";
    }
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (!init_ok()) return set_err(cudaErrorNoDevice);
    if (!p) return set_err(cudaErrorInvalidValue);
    if (d < 0 || d >= cfg().devices) return set_err(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "gpudl CUDA emulator (sm_90, %d worker threads)", cfg().workers);
    p->totalGlobalMem = cfg().mem;
    p->sharedMemPerBlock = 48 * 1024;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024;
    p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = 65535;
    p->maxGridSize[2] = 65535;
    p->totalConstMem = 65536;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 132;
    p->maxThreadsPerMultiProcessor = 2048;
    p->sharedMemPerMultiprocessor = 228 * 1024;
    p->unifiedAddressing = 1;
    p->concurrentKernels = 1;
    p->asyncEngineCount = 2;
    p->l2CacheSize = 50 << 20;
    p->memoryBusWidth = 5120;
    p->pciDeviceID = d;
    p->pciBusID = 0x10 * (d + 1); /* as cudaDeviceGetPCIBusId says */
    return cudaSuccess;
}

// Each emulated device has its own bus: 0000:10:00.0, 0000:20:00.0, ...
// (tests/fake_nvml.c lists the first two in the other order).
cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int d) {
    if (!init_ok()) return set_err(cudaErrorNoDevice);
    if (!buf || len <= 0) return set_err(cudaErrorInvalidValue);
    if (d < 0 || d >= cfg().devices) return set_err(cudaErrorInvalidDevice);
    if (snprintf(buf, (size_t)len, "0000:%02x:00.0", 0x10 * (d + 1)) >= len) return set_err(cudaErrorInvalidValue);
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d) {
    if (!init_ok()) return set_err(cudaErrorNoDevice);
    if (!v) return set_err(cudaErrorInvalidValue);
    if (d < 0 || d >= cfg().devices) return set_err(cudaErrorInvalidDevice);
    switch (a) {
    case cudaDevAttrClockRate: *v = 1980000; break;
    case cudaDevAttrMemoryClockRate: *v = 2619000; break;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMultiProcessorCount: *v = 132; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = 48 * 1024; break;
    case cudaDevAttrMaxBlockDimX: *v = 1024; break;
    case cudaDevAttrMaxGridDimX: *v = 2147483647; break;
    default:
        diag("cudaDeviceGetAttribute: attribute %d is not emulated", (int)a);
        return set_err(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *fr, size_t *tot) {
    EMU_ENTER();
    std::lock_guard<std::mutex> l(mem().mu);
    size_t u = mem().used[tl_dev];
    if (fr) *fr = cfg().mem > u ? cfg().mem - u : 0;
    if (tot) *tot = cfg().mem;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t size) {
    long id = ++n_alloc;
    if (!p) return set_err(cudaErrorInvalidValue);
    *p = NULL;
    EMU_ENTER();
    {
        std::lock_guard<std::mutex> l(g_mu);
        if (global_capture_locked(-1))
            return set_err(capture_violation_locked(-1, cudaErrorStreamCaptureUnsupported, "cudaMalloc"));
    }
    long fa = fail_alloc_at.load();
    if (fa >= 0 && id == fa) {
        fail_alloc_at.store(-1);
        return set_err(cudaErrorMemoryAllocation);
    }
    if (size == 0) return cudaSuccess; /* CUDA hands out NULL for 0 bytes */
    MemState &M = mem();
    {
        std::lock_guard<std::mutex> l(M.mu);
        size_t r = (size + 255) / 256 * 256;
        if (r < size || r > cfg().mem || M.used[tl_dev] > cfg().mem - r) return set_err(cudaErrorMemoryAllocation);
        M.used[tl_dev] += r;
    }
    Alloc *A = map_alloc(size, MEM_DEVICE, tl_dev, id);
    std::lock_guard<std::mutex> l(M.mu);
    if (!A) {
        M.used[tl_dev] -= (size + 255) / 256 * 256;
        return set_err(cudaErrorMemoryAllocation);
    }
    M.live[(uintptr_t)A->ptr] = *A;
    sh_register(*A);
    if (M.protected_ && cfg().protect) mprotect(A->map + page_size(), A->map_len - 2 * page_size(), PROT_NONE);
    *p = A->ptr;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    ++n_free;
    EMU_ENTER();
    if (!p) return cudaSuccess;
    std::unique_lock<std::mutex> lk(g_mu);
    if (global_capture_locked(-1))
        return set_err(capture_violation_locked(-1, cudaErrorStreamCaptureUnsupported, "cudaFree"));
    Alloc A;
    {
        std::lock_guard<std::mutex> l(mem().mu);
        auto it = mem().live.find((uintptr_t)p);
        if (it == mem().live.end() || it->second.kind != MEM_DEVICE) {
            diag("cudaFree(%p): not the start of a live device allocation", p);
            return set_err(cudaErrorInvalidDevicePointer);
        }
        A = it->second;
    }
    // cudaFree synchronises the device
    ++n_sync;
    wait_device_locked(lk, A.device);
    std::lock_guard<std::mutex> l(mem().mu);
    mem().live.erase((uintptr_t)p);
    if (!free_alloc_locked(A, true)) { /* found late, but the same fault as a guard-page hit: sticky */
        if (g_devs[A.device].sticky == cudaSuccess) g_devs[A.device].sticky = cudaErrorIllegalAddress;
        return set_err(cudaErrorIllegalAddress);
    }
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t size) {
    if (!p) return set_err(cudaErrorInvalidValue);
    *p = NULL;
    EMU_ENTER();
    Alloc *A = map_alloc(size ? size : 1, MEM_PINNED, -1, 0);
    if (!A) return set_err(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> l(mem().mu);
    mem().live[(uintptr_t)A->ptr] = *A;
    *p = A->ptr;
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int) { return cudaMallocHost(p, size); }

cudaError_t cudaFreeHost(void *p) {
    EMU_ENTER();
    if (!p) return cudaSuccess;
    std::unique_lock<std::mutex> lk(g_mu);
    Alloc A;
    {
        std::lock_guard<std::mutex> l(mem().mu);
        auto it = mem().live.find((uintptr_t)p);
        if (it == mem().live.end() || it->second.kind != MEM_PINNED) {
            diag("cudaFreeHost(%p): not pinned memory from cudaMallocHost", p);
            return set_err(cudaErrorInvalidValue);
        }
        A = it->second;
    }
    // queued copies may still read or write it
    for (int d = 0; d < cfg().devices; d++) wait_device_locked(lk, d);
    std::lock_guard<std::mutex> l(mem().mu);
    mem().live.erase((uintptr_t)p);
    free_alloc_locked(A, false);
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p) {
    EMU_ENTER();
    if (!a) return set_err(cudaErrorInvalidValue);
    bool bad;
    int k = classify(p, 0, &bad);
    memset(a, 0, sizeof *a);
    a->type = k >= 0 ? cudaMemoryTypeDevice : k == -2 ? cudaMemoryTypeHost : cudaMemoryTypeUnregistered;
    a->device = k >= 0 ? k : 0;
    a->devicePointer = k != -1 ? (void *)p : NULL;
    a->hostPointer = k < 0 && k != -1 ? (void *)p : NULL;
    return cudaSuccess;
}

// ---- copies and memset

static cudaError_t memcpy_impl(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t st,
                               bool async, const char *fn) {
    ++n_memcpy;
    EMU_ENTER();
    if (!n) return cudaSuccess;
    cudaError_t e = check_copy(dst, src, n, kind, fn);
    if (e != cudaSuccess) return set_err(e);
    bool b;
    int kd = classify(dst, n, &b), ks = classify(src, n, &b);
    bool to_host = kd < 0, from_host = ks < 0;
    if (from_host && !to_host) ++n_h2d;
    if (!from_host && !to_host) ++n_d2d;
    std::unique_lock<std::mutex> lk(g_mu);
    Stream *s = resolve_locked(st);
    if (!s) return set_err(cudaErrorInvalidResourceHandle);
    if (s->legacy && global_capture_locked(s->dev))
        return set_err(capture_violation_locked(s->dev, cudaErrorStreamCaptureImplicit, fn));
    if (s->cap && (!async || (from_host && !is_pinned(src)) || (to_host && !is_pinned(dst)))) {
        s->cap_invalid = true;
        diag("%s of pageable host memory, or synchronous, on a capturing stream: the capture is invalidated", fn);
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    std::shared_ptr<std::vector<char>> stage;
    const void *from = src;
    if (from_host && !is_pinned(src) && async) {
        // pageable source: CUDA stages it before returning; later changes do not matter
        stage = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
        from = stage->data();
    }
    bool shadow = sh_enabled(); /* copies check and update the shadows */
    uint64_t seq = enqueue_locked(s, [dst, from, n, stage, fn, to_host, from_host, shadow] {
        if (shadow && to_host && !from_host) sh_check_host(fn, from, n);
        if (shadow && !to_host) sh_mark_host(dst, n, from_host ? nullptr : from);
        memcpy(dst, from, n);
    });
    // synchronous unless device to device, or async with pinned (or staged) host memory
    bool wait = !async ? !(kd >= 0 && ks >= 0) : (to_host && !is_pinned(dst));
    if (wait && seq != CAPTURED) {
        ++n_sync;
        wait_seq_locked(lk, s, seq);
        maybe_protect_locked();
        return set_err(g_devs[s->dev].sticky);
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    return memcpy_impl(dst, src, n, kind, 0, false, "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t st) {
    return memcpy_impl(dst, src, n, kind, st, true, "cudaMemcpyAsync");
}

static cudaError_t memset_impl(void *p, int v, size_t n, cudaStream_t st, const char *fn) {
    ++n_memcpy;
    ++n_memset;
    EMU_ENTER();
    if (!n) return cudaSuccess;
    bool bad;
    int k = classify(p, n, &bad);
    if (k < 0 || bad) {
        diag("%s(%p, %d, %zu): %s", fn, p, v, n, k < 0 ? "not device memory" : "beyond the end of its allocation");
        return set_err(cudaErrorInvalidValue);
    }
    std::lock_guard<std::mutex> lk(g_mu);
    Stream *s = resolve_locked(st);
    if (!s) return set_err(cudaErrorInvalidResourceHandle);
    if (s->legacy && global_capture_locked(s->dev))
        return set_err(capture_violation_locked(s->dev, cudaErrorStreamCaptureImplicit, fn));
    bool shadow = sh_enabled();
    enqueue_locked(s, [p, v, n, shadow] {
        if (shadow) sh_mark_host(p, n);
        memset(p, v, n);
    });
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n) { return memset_impl(p, v, n, 0, "cudaMemset"); }
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st) {
    return memset_impl(p, v, n, st, "cudaMemsetAsync");
}

// ---- synchronisation, streams, events

cudaError_t cudaDeviceSynchronize(void) {
    if (!init_ok()) return set_err(cudaErrorNoDevice);
    ++n_sync;
    std::unique_lock<std::mutex> lk(g_mu);
    for (Stream *o : g_devs[tl_dev].streams)
        if (o->cap)
            return set_err(capture_violation_locked(tl_dev, cudaErrorStreamCaptureUnsupported,
                                                    "cudaDeviceSynchronize"));
    wait_device_locked(lk, tl_dev);
    maybe_protect_locked();
    return set_err(g_devs[tl_dev].sticky);
}

cudaError_t cudaDeviceReset(void) {
    if (!init_ok()) return set_err(cudaErrorNoDevice);
    std::unique_lock<std::mutex> lk(g_mu);
    wait_device_locked(lk, tl_dev);
    g_devs[tl_dev].sticky = cudaSuccess;
    std::lock_guard<std::mutex> l(mem().mu);
    for (auto it = mem().live.begin(); it != mem().live.end();) {
        if (it->second.kind == MEM_DEVICE && it->second.device == tl_dev) {
            free_alloc_locked(it->second, true);
            it = mem().live.erase(it);
        } else {
            ++it;
        }
    }
    tl_err = cudaSuccess;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *ps, unsigned int flags) {
    EMU_ENTER();
    if (!ps || (flags & ~(unsigned)cudaStreamNonBlocking)) return set_err(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> l(g_mu);
    *ps = (cudaStream_t)new_stream_locked(tl_dev, flags, false);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *ps) { return cudaStreamCreateWithFlags(ps, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t st) {
    if (!init_ok()) return set_err(cudaErrorNoDevice);
    std::unique_lock<std::mutex> lk(g_mu);
    Stream *s = (Stream *)st;
    if (!st || st == cudaStreamLegacy || st == cudaStreamPerThread || !g_streams.count(s) || s->legacy)
        return set_err(cudaErrorInvalidResourceHandle);
    // CUDA lets queued work finish after the call returns; here the call waits for it
    wait_seq_locked(lk, s, s->enq);
    // CUDA lets events recorded on it, and waits queued elsewhere on them, outlive it: all of its work
    // is done, so they refer to nothing any more
    for (Event *e : g_events)
        if (e->s == s) e->s = nullptr;
    for (Stream *o : g_streams)
        for (Op &op : o->q)
            op.waits.erase(std::remove_if(op.waits.begin(), op.waits.end(),
                                          [s](const std::pair<Stream *, uint64_t> &w) { return w.first == s; }),
                           op.waits.end());
    s->stop = true;
    g_cv.notify_all();
    g_streams.erase(s);
    auto &v = g_devs[s->dev].streams;
    v.erase(std::find(v.begin(), v.end(), s));
    lk.unlock();
    s->th.join();
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t st) {
    if (!init_ok()) return set_err(cudaErrorNoDevice);
    ++n_sync;
    std::unique_lock<std::mutex> lk(g_mu);
    Stream *s = resolve_locked(st);
    if (!s) return set_err(cudaErrorInvalidResourceHandle);
    if (s->cap || (s->legacy && global_capture_locked(s->dev))) {
        s->cap_invalid = s->cap != nullptr;
        return set_err(capture_violation_locked(s->dev, cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize"));
    }
    wait_seq_locked(lk, s, s->enq);
    maybe_protect_locked();
    return set_err(g_devs[s->dev].sticky);
}

cudaError_t cudaStreamQuery(cudaStream_t st) {
    EMU_ENTER();
    std::lock_guard<std::mutex> l(g_mu);
    Stream *s = resolve_locked(st);
    if (!s) return set_err(cudaErrorInvalidResourceHandle);
    if (s->cap) {
        s->cap_invalid = true;
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    return s->done == s->enq ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *pe, unsigned int) {
    EMU_ENTER();
    if (!pe) return set_err(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> l(g_mu);
    Event *e = new Event;
    e->dev = tl_dev;
    g_events.insert(e);
    *pe = (cudaEvent_t)e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *pe) { return cudaEventCreateWithFlags(pe, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    if (!init_ok()) return set_err(cudaErrorNoDevice);
    std::unique_lock<std::mutex> lk(g_mu);
    Event *e = (Event *)ev;
    if (!g_events.count(e)) return set_err(cudaErrorInvalidResourceHandle);
    if (e->s) wait_seq_locked(lk, e->s, e->seq); /* its timestamp op refers to it */
    g_events.erase(e);
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st) {
    EMU_ENTER();
    std::lock_guard<std::mutex> l(g_mu);
    Event *e = (Event *)ev;
    Stream *s = resolve_locked(st);
    if (!g_events.count(e) || !s) return set_err(cudaErrorInvalidResourceHandle);
    if (s->cap) { /* a marker inside the graph; fork/join across streams is not emulated */
        enqueue_locked(s, [] {});
        return cudaSuccess;
    }
    e->recorded = false;
    e->s = s;
    e->seq = enqueue_locked(s, [e] {
        e->t = now_s();
        e->recorded = true;
    });
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    if (!init_ok()) return set_err(cudaErrorNoDevice);
    ++n_sync;
    std::unique_lock<std::mutex> lk(g_mu);
    Event *e = (Event *)ev;
    if (!g_events.count(e)) return set_err(cudaErrorInvalidResourceHandle);
    if (e->s) wait_seq_locked(lk, e->s, e->seq);
    maybe_protect_locked();
    return set_err(g_devs[e->dev].sticky);
}

cudaError_t cudaEventQuery(cudaEvent_t ev) {
    EMU_ENTER();
    std::lock_guard<std::mutex> l(g_mu);
    Event *e = (Event *)ev;
    if (!g_events.count(e)) return set_err(cudaErrorInvalidResourceHandle);
    return !e->s || e->s->done >= e->seq ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    EMU_ENTER();
    std::lock_guard<std::mutex> l(g_mu);
    Event *x = (Event *)a, *y = (Event *)b;
    if (!ms || !g_events.count(x) || !g_events.count(y)) return set_err(cudaErrorInvalidResourceHandle);
    /* s is null when never recorded, or when its stream was destroyed (all done) */
    if ((x->s ? x->s->done < x->seq : !x->recorded) || (y->s ? y->s->done < y->seq : !y->recorded))
        return set_err(cudaErrorNotReady);
    *ms = (float)((y->t - x->t) * 1e3);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned int) {
    EMU_ENTER();
    std::lock_guard<std::mutex> l(g_mu);
    Event *e = (Event *)ev;
    Stream *s = resolve_locked(st);
    if (!g_events.count(e) || !s) return set_err(cudaErrorInvalidResourceHandle);
    if (!e->s) return cudaSuccess; /* never recorded: no wait, as CUDA */
    if (s->cap) { /* joining another stream into the capture */
        s->cap_invalid = true;
        diag("cudaStreamWaitEvent into a capturing stream: cross-stream capture is not emulated");
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    enqueue_locked(s, [] {}, {{e->s, e->seq}});
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
    if (!v) return set_err(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
    if (!v) return set_err(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

// ---- stream capture and graphs: one stream's work recorded as a chain of
// nodes, replayed in order by cudaGraphLaunch

cudaError_t cudaStreamBeginCapture(cudaStream_t st, cudaStreamCaptureMode mode) {
    EMU_ENTER();
    std::lock_guard<std::mutex> l(g_mu);
    Stream *s = resolve_locked(st);
    if (!s) return set_err(cudaErrorInvalidResourceHandle);
    if (s->legacy) {
        diag("cudaStreamBeginCapture: the legacy stream cannot be captured");
        return set_err(cudaErrorStreamCaptureUnsupported);
    }
    if (s->cap) return set_err(cudaErrorIllegalState);
    s->cap = new Graph;
    s->cap->dev = s->dev;
    s->cap_mode = mode;
    s->cap_invalid = false;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *pg) {
    if (!init_ok()) return set_err(cudaErrorNoDevice);
    std::lock_guard<std::mutex> l(g_mu);
    Stream *s = resolve_locked(st);
    if (!s || !pg) return set_err(!s ? cudaErrorInvalidResourceHandle : cudaErrorInvalidValue);
    if (!s->cap) return set_err(cudaErrorIllegalState);
    Graph *g = s->cap;
    s->cap = nullptr;
    *pg = NULL;
    if (s->cap_invalid) {
        delete g;
        return set_err(cudaErrorStreamCaptureInvalidated);
    }
    g_graphs.insert(g);
    *pg = (cudaGraph_t)g;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t st, cudaStreamCaptureStatus *status) {
    EMU_ENTER();
    std::lock_guard<std::mutex> l(g_mu);
    Stream *s = resolve_locked(st);
    if (!s || !status) return set_err(!s ? cudaErrorInvalidResourceHandle : cudaErrorInvalidValue);
    *status = !s->cap ? cudaStreamCaptureStatusNone
              : s->cap_invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pe, cudaGraph_t graph, unsigned long long) {
    EMU_ENTER();
    std::lock_guard<std::mutex> l(g_mu);
    Graph *g = (Graph *)graph;
    if (!pe || !g_graphs.count(g)) return set_err(cudaErrorInvalidValue);
    Graph *x = new Graph(*g);
    g_execs.insert(x);
    *pe = (cudaGraphExec_t)x;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t ge, cudaStream_t st) {
    EMU_ENTER();
    ++n_graph;
    std::lock_guard<std::mutex> l(g_mu);
    Graph *x = (Graph *)ge;
    Stream *s = resolve_locked(st);
    if (!g_execs.count(x)) return set_err(cudaErrorInvalidValue);
    if (!s) return set_err(cudaErrorInvalidResourceHandle);
    if (s->dev != x->dev) {
        diag("cudaGraphLaunch: a graph of cuda:%d launched on a stream of cuda:%d", x->dev, s->dev);
        return set_err(cudaErrorInvalidValue);
    }
    if (s->legacy && global_capture_locked(s->dev))
        return set_err(capture_violation_locked(s->dev, cudaErrorStreamCaptureImplicit, "cudaGraphLaunch"));
    auto nodes = std::make_shared<std::vector<std::function<void()>>>(x->nodes);
    int dev = s->dev;
    enqueue_locked(s, [nodes, dev] {
        for (auto &f : *nodes) {
            {
                std::lock_guard<std::mutex> k(g_mu);
                if (g_devs[dev].sticky != cudaSuccess) return; /* a node faulted */
            }
            f();
        }
    });
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t ge) {
    if (!init_ok()) return set_err(cudaErrorNoDevice);
    std::lock_guard<std::mutex> l(g_mu);
    Graph *x = (Graph *)ge;
    if (!g_execs.erase(x)) return set_err(cudaErrorInvalidValue);
    delete x; /* a queued launch holds its own copy of the nodes */
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    if (!init_ok()) return set_err(cudaErrorNoDevice);
    std::lock_guard<std::mutex> l(g_mu);
    Graph *g = (Graph *)graph;
    if (!g_graphs.erase(g)) return set_err(cudaErrorInvalidValue);
    delete g;
    return cudaSuccess;
}

// ---- test controls (emu_api.h)

int gdl_emu_fail_alloc(long k) {
    fail_alloc_at.store(k > 0 ? n_alloc.load() + k : -1);
    return 0;
}

int gdl_emu_fail_launch(long k) {
    fail_launch_at.store(k > 0 ? n_launch.load() + k : -1);
    return 0;
}

int gdl_emu_drain(void) {
    if (!init_ok()) return -1;
    std::unique_lock<std::mutex> lk(g_mu);
    for (int d = 0; d < cfg().devices; d++) wait_device_locked(lk, d);
    maybe_protect_locked();
    return 0;
}

// queued on the stream, so that work queued before (the block's last owner's
// kernels) still sees the old state and the new owner's work the fresh one
int gdl_emu_mark_uninit(const void *p, size_t n, void *stream) {
    if (!init_ok()) return -1;
    if (!p || !n || !sh_enabled()) return 0;
    std::lock_guard<std::mutex> lk(g_mu);
    Stream *s = resolve_locked((cudaStream_t)stream);
    // no CUDA error (the hook must not disturb cudaGetLastError); not into a
    // capture: a graph node would forget writes on every replay
    if (!s || s->cap) return -1;
    enqueue_locked(s, [p, n] { sh_forget(p, n); });
    return 0;
}

int gdl_emu_lt_no_algo(long k) {
    lt_refuse_at.store(k > 0 ? lt_heur_calls.load() + k : -1);
    return 0;
}

int gdl_emu_fail_cublas(long k) {
    fail_cublas_at.store(k > 0 ? n_cublas.load() + k : -1);
    return 0;
}

long gdl_emu_count(const char *what) {
    if (!what) return -1;
    if (!strcmp(what, "alloc")) return n_alloc.load();
    if (!strcmp(what, "free")) return n_free.load();
    if (!strcmp(what, "launch")) return n_launch.load();
    if (!strcmp(what, "memcpy")) return n_memcpy.load();
    if (!strcmp(what, "h2d")) return n_h2d.load();
    if (!strcmp(what, "d2d")) return n_d2d.load();
    if (!strcmp(what, "memset")) return n_memset.load();
    if (!strcmp(what, "sync")) return n_sync.load();
    if (!strcmp(what, "graph")) return n_graph.load();
    if (!strcmp(what, "legacy")) return n_legacy.load();
    if (!strcmp(what, "cublas")) return n_cublas.load();
    if (!strcmp(what, "race")) return n_race.load();
    if (!strcmp(what, "uninit")) return n_uninit.load();
    if (!strcmp(what, "lt_no_algo")) return lt_no_algo.load();
    return -1;
}

const char *gdl_emu_gemm_mode(void) {
    return cfg().gemm == 1 ? "perturbed" : cfg().gemm == 3 ? "percall" : "plain";
}

const char *gdl_emu_last_diagnostic(void) {
    static thread_local std::string copy;
    std::lock_guard<std::mutex> l(diag_mu);
    copy = last_diag;
    return copy.c_str();
}

} // extern "C"

// fault injection from the environment, armed before main
__attribute__((constructor)) static void gdl_emu_env_faults(void) {
    const char *e;
    if ((e = getenv("GPUDL_EMU_FAIL_ALLOC")) && atol(e) > 0) gdl_emu_fail_alloc(atol(e));
    if ((e = getenv("GPUDL_EMU_FAIL_LAUNCH")) && atol(e) > 0) gdl_emu_fail_launch(atol(e));
    if ((e = getenv("GPUDL_EMU_FAIL_CUBLAS")) && atol(e) > 0) gdl_emu_fail_cublas(atol(e));
}

// ---------------------------------------------------------------------------
// cuBLAS

namespace {

// ws / user_ws: the workspace of cublasSetWorkspace; cublasSetStream
// resets it to the library's default pool (user_ws false), as the cuBLAS
// documentation says, and a call from the pool during a capture would
// allocate (gemm_common)
struct BlasHandle {
    int dev;
    cudaStream_t stream = 0;
    cublasMath_t mode = CUBLAS_DEFAULT_MATH;
    void *ws = nullptr;
    size_t wsbytes = 0;
    bool user_ws = false;
};
std::mutex &blas_mu = *new std::mutex;
std::set<BlasHandle *> &blas_handles = *new std::set<BlasHandle *>;

BlasHandle *blas_get(cublasHandle_t h) {
    std::lock_guard<std::mutex> l(blas_mu);
    BlasHandle *b = (BlasHandle *)h;
    return blas_handles.count(b) ? b : nullptr;
}

// Every GEMM call's start: counted, failed when gdl_emu_fail_cublas picked it (nothing runs) or when
// the device has a sticky error. CUBLAS_STATUS_SUCCESS: go on.
static cublasStatus_t blas_call_start() {
    long num = ++n_cublas, fc = fail_cublas_at.load();
    if (fc >= 0 && num == fc) { /* injected (gdl_emu_fail_cublas): nothing runs */
        fail_cublas_at.store(-1);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    return sticky_now() != cudaSuccess ? CUBLAS_STATUS_EXECUTION_FAILED : CUBLAS_STATUS_SUCCESS;
}

// blas_call_start for a cuBLAS handle h, which must be live and belong to the current device: *H.
static cublasStatus_t blas_handle_call_start(const char *fn, cublasHandle_t h, BlasHandle **H) {
    cublasStatus_t st;
    if (!(*H = blas_get(h))) return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((st = blas_call_start()) != CUBLAS_STATUS_SUCCESS) return st;
    if (tl_dev != (*H)->dev) {
        diag("%s: handle made on cuda:%d used while cuda:%d is current", fn, (*H)->dev, tl_dev);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

// A library call on a capturing stream that would allocate device memory
// (cuBLAS's default workspace pool, a handle's creation): cudaMalloc
// during a capture not in relaxed mode invalidates it (cudaMallocAsync, where the library uses
// it, puts a memory node into every graph instead, which gpudl does not
// want either). The caller holds g_mu. True when it was such a call.
bool blas_alloc_in_capture_locked(const char *fn, Stream *s, int dev, const char *what) {
    bool cap = s ? s->cap && s->cap_mode != cudaStreamCaptureModeRelaxed : global_capture_locked(dev);
    if (!cap) return false;
    if (s) s->cap_invalid = true;
    else capture_violation_locked(dev, cudaErrorStreamCaptureUnsupported, fn);
    diag("%s during a stream capture %s: the library would allocate device memory inside the capture; the capture is "
         "invalidated", fn, what);
    return true;
}

// the workspace a queued (or captured) GEMM runs with must still be device
// memory of its device when it runs (a graph replays long after capture)
void blas_ws_live(const char *fn, const void *ws, size_t n, int dev) {
    bool bad;
    if (ws && n && (classify(ws, n, &bad) != dev || bad))
        diag("%s: its workspace %p (%zu bytes) is no longer device memory of cuda:%d when it runs (freed after "
             "cublasSetWorkspace, or after the capture that recorded it?)", fn, ws, n, dev);
}

float tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) { /* finite: round the low 13 bits away, ties to even */
        u += 0xfffu + ((u >> 13) & 1u);
        u &= ~0x1fffu;
    }
    memcpy(&x, &u, 4);
    return x;
}
// TF32 as tensor cores take raw f32 registers: the low 13 bits dropped
float tf32_trunc(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u &= ~0x1fffu;
    memcpy(&x, &u, 4);
    return x;
}

// GPUDL_EMU_GEMM=perturbed | percall: how one GEMM call sums its dot products,
// standing in for the blocked, FMA-fused and split-K orders of cuBLAS's
// kernels. Every dot product of the call: K cut into `split` slices
// (split-K); each slice accumulated over blocks of `kb` products (an FMA
// chain per block, the block's sum then added to the slice's sum; kb 0: one
// FMA chain over the slice); the slices' sums added in order or pairwise;
// then alpha * sum + beta * C as one FMA. TF32 (where the call asks for it)
// rounds to nearest-even or truncates. `perturbed` draws these from the
// call's configuration (sizes, ops, leading dims, batch, types, math mode,
// operand alignment, seed), as a real GPU's heuristic picks one kernel per
// configuration: the same call repeats its bits, another call does not.
// `percall` draws per call (a call counter and GPUDL_EMU_GEMM_SEED): an
// audit that also breaks identical calls, which a GPU repeats bit for bit.
struct GemmOrder {
    int kb = 0, split = 1;
    bool pairwise = false, trunc = false, fused_epilogue = true;
};
std::atomic<uint64_t> gemm_calls{0};
uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}
// key: the call's configuration, hashed by the caller (`perturbed`)
GemmOrder gemm_order(uint64_t key) {
    static const int kbs[] = {0, 1, 2, 4, 8, 16, 32, 64};
    uint64_t h = mix64((cfg().gemm == 3 ? gemm_calls.fetch_add(1) : key) ^ mix64(cfg().gemm_seed));
    GemmOrder o;
    o.kb = kbs[h & 7];
    o.split = 1 + (int)((h >> 3) % 4);
    o.pairwise = (h >> 5) & 1;
    o.trunc = (h >> 6) & 1;
    o.fused_epilogue = (h >> 7) & 1;
    return o;
}
uint64_t gemm_key(std::initializer_list<long long> v) {
    uint64_t h = 0x6a09e667f3bcc909ull;
    for (long long x : v) h = mix64(h ^ (uint64_t)x);
    return h;
}

// one dot product of a[0..k) and b[0..k) in the order `o` (see GemmOrder)
float dot_ordered(const float *a, const float *b, int k, const GemmOrder &o) {
    float part[4] = {0, 0, 0, 0};
    int split = o.split < k ? o.split : (k > 0 ? k : 1);
    for (int s = 0; s < split; s++) {
        int p0 = (int)((long long)k * s / split), p1 = (int)((long long)k * (s + 1) / split);
        float acc = 0;
        if (o.kb == 0) {
            for (int p = p0; p < p1; p++) acc = fmaf(a[p], b[p], acc);
        } else {
            for (int q = p0; q < p1; q += o.kb) {
                int qe = q + o.kb < p1 ? q + o.kb : p1;
                float blk = 0;
                for (int p = q; p < qe; p++) blk = fmaf(a[p], b[p], blk);
                acc += blk;
            }
        }
        part[s] = acc;
    }
    if (split == 1) return part[0];
    if (o.pairwise) {
        float x = part[0] + part[1], y = split > 2 ? part[2] + (split > 3 ? part[3] : 0.0f) : 0.0f;
        return split > 2 ? x + y : x;
    }
    float t = part[0];
    for (int s = 1; s < split; s++) t += part[s];
    return t;
}

// sgemm_cpu in the order `o`: op(A) rows and op(B) columns gathered (TF32 applied), then dot_ordered
void sgemm_ordered(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                   float beta, float *C, int ldc, bool round, const GemmOrder &o) {
    bool use_ab = alpha != 0 && k > 0;
    std::vector<float> a(use_ab ? (size_t)m * k : 0), b(use_ab ? (size_t)k : 0);
    auto cv = [&](float v) { return !round ? v : o.trunc ? tf32_trunc(v) : tf32(v); };
    if (use_ab)
        for (int i = 0; i < m; i++)
            for (int p = 0; p < k; p++) a[(size_t)i * k + p] = cv(ta ? A[(size_t)i * lda + p] : A[(size_t)p * lda + i]);
    for (int j = 0; j < n; j++) {
        if (use_ab)
            for (int p = 0; p < k; p++) b[p] = cv(tb ? B[(size_t)p * ldb + j] : B[(size_t)j * ldb + p]);
        float *c = C + (size_t)j * ldc;
        for (int i = 0; i < m; i++) {
            float d = use_ab ? dot_ordered(&a[(size_t)i * k], b.data(), k, o) : 0.0f;
            if (beta == 0) c[i] = alpha * d;
            else if (o.fused_epilogue) c[i] = fmaf(alpha, d, beta * c[i]);
            else c[i] = alpha * d + beta * c[i];
        }
    }
}

// C (m x n, ldc) = alpha * op(A) * op(B) + beta * C, column-major, one batch;
// with `o` (GPUDL_EMU_GEMM=perturbed | percall) in that order, else a plain loop
void sgemm_cpu(bool ta, bool tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc, bool round, const GemmOrder *o = nullptr) {
    if (o) {
        sgemm_ordered(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, round, *o);
        return;
    }
    std::vector<float> a((size_t)m * k), acc(m);
    bool use_ab = alpha != 0 && k > 0;
    if (use_ab)
        for (int p = 0; p < k; p++)
            for (int i = 0; i < m; i++) {
                float v = ta ? A[(size_t)i * lda + p] : A[(size_t)p * lda + i];
                a[(size_t)p * m + i] = round ? tf32(v) : v;
            }
    for (int j = 0; j < n; j++) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        if (use_ab)
            for (int p = 0; p < k; p++) {
                float b = tb ? B[(size_t)p * ldb + j] : B[(size_t)j * ldb + p];
                if (round) b = tf32(b);
                const float *ap = &a[(size_t)p * m];
                for (int i = 0; i < m; i++) acc[i] += ap[i] * b;
            }
        float *c = C + (size_t)j * ldc;
        for (int i = 0; i < m; i++) c[i] = beta == 0 ? alpha * acc[i] : alpha * acc[i] + beta * c[i];
    }
}

// an operand of `rows` x `cols` (ld) per batch, `batch` batches `stride`
// apart, must lie inside one device allocation of the handle's device
bool blas_operand_ok(const char *fn, const char *what, const void *p, int rows, int cols, int ld, long long stride,
                     int batch, int dev, size_t esize = sizeof(float)) {
    if (rows == 0 || cols == 0 || batch == 0) return true;
    long long last = (long long)(cols - 1) * ld + rows; /* elements spanned by one batch */
    long long lo = 0, hi = last;
    if (batch > 1) {
        long long e = (long long)(batch - 1) * stride;
        if (e < 0) lo = e;
        else hi += e;
    }
    bool bad;
    const Alloc *A = nullptr;
    int k = classify((const char *)p + lo * (long long)esize, (size_t)(hi - lo) * esize, &bad, &A);
    if (k < 0 || bad || (A && A->device != dev)) {
        diag("%s: operand %s (%p, %d x %d, ld %d%s) is %s", fn, what, p, rows, cols, ld, batch > 1 ? ", batched" : "",
             k < 0 ? "not device memory" : bad ? "not inside its allocation" : "memory of another device");
        return false;
    }
    return true;
}

// 16-bit floats as cuBLAS stores them, round to nearest even (NaN stays NaN)
float half_to_float(uint16_t h, bool bf) {
    uint32_t u;
    float f;
    if (bf) {
        u = (uint32_t)h << 16;
    } else {
        uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff;
        if (e == 0x1f) u = sign | 0x7f800000u | (m << 13);
        else if (e) u = sign | ((e + 112) << 23) | (m << 13);
        else if (!m) u = sign;
        else { /* subnormal: m * 2^-24 exactly */
            f = (float)m * 5.9604644775390625e-8f;
            return sign ? -f : f;
        }
    }
    memcpy(&f, &u, 4);
    return f;
}
uint16_t float_to_half(float f, bool bf) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (bf) {
        if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
        return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    float a = std::fabs(f);
    if (a != a) return (uint16_t)(sign | 0x7e00u);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00u); /* rounds past the largest half */
    if (a < 6.103515625e-05f) { /* subnormal or zero: units of 2^-24, ties to even */
        float q = a * 16777216.0f;
        return (uint16_t)(sign | (uint16_t)std::nearbyint(q));
    }
    uint32_t au;
    memcpy(&au, &a, 4);
    uint32_t r = au + 0xfffu + ((au >> 13) & 1u); /* round the low 13 bits, ties to even */
    return (uint16_t)(sign | (uint16_t)((((r >> 23) - 112) << 10) | ((r >> 13) & 0x3ff)));
}

// one batch of a GemmEx on 16-bit matrices: f32 copies, the f32 GEMM (accumulating in f32), C rounded once
// f16/bf16 A and B into an f32 C
void hgemm_cpu_c32(bool ta, bool tb, int m, int n, int k, float alpha, const uint16_t *A, int lda, const uint16_t *B,
                   int ldb, float beta, float *C, int ldc, bool bf, const GemmOrder *o) {
    int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    bool use_ab = alpha != 0 && k > 0;
    std::vector<float> a(use_ab ? (size_t)lda * ac : 0), b(use_ab ? (size_t)ldb * bc : 0);
    if (use_ab) {
        for (int j = 0; j < ac; j++)
            for (int i = 0; i < ar; i++) a[(size_t)j * lda + i] = half_to_float(A[(size_t)j * lda + i], bf);
        for (int j = 0; j < bc; j++)
            for (int i = 0; i < br; i++) b[(size_t)j * ldb + i] = half_to_float(B[(size_t)j * ldb + i], bf);
    }
    sgemm_cpu(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, C, ldc, false, o);
}

void hgemm_cpu(bool ta, bool tb, int m, int n, int k, float alpha, const uint16_t *A, int lda, const uint16_t *B,
               int ldb, float beta, uint16_t *C, int ldc, bool bf, const GemmOrder *o) {
    int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    bool use_ab = alpha != 0 && k > 0;
    std::vector<float> a(use_ab ? (size_t)lda * ac : 0), b(use_ab ? (size_t)ldb * bc : 0), c((size_t)ldc * n);
    if (use_ab) {
        for (int j = 0; j < ac; j++)
            for (int i = 0; i < ar; i++) a[(size_t)j * lda + i] = half_to_float(A[(size_t)j * lda + i], bf);
        for (int j = 0; j < bc; j++)
            for (int i = 0; i < br; i++) b[(size_t)j * ldb + i] = half_to_float(B[(size_t)j * ldb + i], bf);
    }
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) c[(size_t)j * ldc + i] = half_to_float(C[(size_t)j * ldc + i], bf);
    sgemm_cpu(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc, false, o);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) C[(size_t)j * ldc + i] = float_to_half(c[(size_t)j * ldc + i], bf);
}

// elem: 0 for f32 (cublasSgemm*), else CUDA_R_16F or CUDA_R_16BF (cublasGemm*Ex), with C of that type or
// (c32) f32
cublasStatus_t gemm_common(const char *fn, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           int k, const float *alpha, const void *A, int lda, long long sA, const void *B, int ldb,
                           long long sB, const float *beta, void *C, int ldc, long long sC, int batch, int elem = 0,
                           bool c32 = false) {
    size_t es = elem ? 2 : sizeof(float), ces = elem && !c32 ? 2 : sizeof(float);
    BlasHandle *H;
    cublasStatus_t st0 = blas_handle_call_start(fn, h, &H);
    if (st0 != CUBLAS_STATUS_SUCCESS) return st0;
    bool TA = ta != CUBLAS_OP_N, TB = tb != CUBLAS_OP_N;
    int ar = TA ? k : m, ac = TA ? m : k, br = TB ? n : k, bc = TB ? k : n;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || m < 0 || n < 0 ||
        k < 0 || batch < 0 || !alpha || !beta || lda < std::max(1, ar) || ldb < std::max(1, br) ||
        ldc < std::max(1, m)) {
        diag("%s: invalid arguments (m %d n %d k %d, lda %d ldb %d ldc %d, ops %d %d, batch %d)", fn, m, n, k, lda,
             ldb, ldc, (int)ta, (int)tb, batch);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    float al = *alpha, be = *beta;
    bool need_ab = al != 0 && k > 0;
    if ((need_ab && (!blas_operand_ok(fn, "A", A, ar, ac, lda, sA, batch, H->dev, es) ||
                     !blas_operand_ok(fn, "B", B, br, bc, ldb, sB, batch, H->dev, es))) ||
        !blas_operand_ok(fn, "C", C, m, n, ldc, sC, batch, H->dev, ces))
        return CUBLAS_STATUS_INVALID_VALUE;
    bool round = H->mode == CUBLAS_TF32_TENSOR_OP_MATH;
    /* GemmEx with CUBLAS_COMPUTE_32F: no TF32 (16-bit inputs are exact in it anyway) */
    bool ordered = cfg().gemm != 0;
    GemmOrder ord;
    if (ordered)
        ord = gemm_order(gemm_key({1, (long long)ta, (long long)tb, m, n, k, lda, ldb, ldc, sA, sB, sC, batch, elem,
                                   (long long)c32, (long long)(round && !elem), (long long)((uintptr_t)A % 16),
                                   (long long)((uintptr_t)B % 16), (long long)((uintptr_t)C % 16)}));
    std::lock_guard<std::mutex> l(g_mu);
    Stream *s = resolve_locked(H->stream);
    if (!s) return CUBLAS_STATUS_INVALID_VALUE;
    if (s->legacy && global_capture_locked(s->dev)) {
        capture_violation_locked(s->dev, cudaErrorStreamCaptureImplicit, fn);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (!H->user_ws && blas_alloc_in_capture_locked(fn, s, s->dev,
                                                    "with cuBLAS's default workspace pool (no cublasSetWorkspace "
                                                    "since the handle's creation or its last cublasSetStream)"))
        return CUBLAS_STATUS_ALLOC_FAILED;
    void *ws = H->ws;
    size_t wsbytes = H->wsbytes;
    int wsdev = H->dev;
    enqueue_locked(s, [=] {
        blas_ws_live(fn, ws, wsbytes, wsdev);
        const GemmOrder *o = ordered ? &ord : nullptr;
        for (int b = 0; b < batch; b++) {
            if (need_ab) {
                sh_matrix(fn, (const char *)A + b * sA * (long long)es, ar, ac, lda, es, false);
                sh_matrix(fn, (const char *)B + b * sB * (long long)es, br, bc, ldb, es, false);
            }
            if (be != 0) sh_matrix(fn, (const char *)C + b * sC * (long long)ces, m, n, ldc, ces, false);
            sh_matrix(fn, (const char *)C + b * sC * (long long)ces, m, n, ldc, ces, true);
            if (elem && c32)
                hgemm_cpu_c32(TA, TB, m, n, k, al, (const uint16_t *)A + b * sA, lda, (const uint16_t *)B + b * sB, ldb,
                              be, (float *)C + b * sC, ldc, elem == CUDA_R_16BF, o);
            else if (elem)
                hgemm_cpu(TA, TB, m, n, k, al, (const uint16_t *)A + b * sA, lda, (const uint16_t *)B + b * sB, ldb, be,
                          (uint16_t *)C + b * sC, ldc, elem == CUDA_R_16BF, o);
            else
                sgemm_cpu(TA, TB, m, n, k, al, (const float *)A + b * sA, lda, (const float *)B + b * sB, ldb, be,
                          (float *)C + b * sC, ldc, round && !elem, o);
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    if (!init_ok()) return CUBLAS_STATUS_NOT_INITIALIZED;
    {
        std::lock_guard<std::mutex> g(g_mu);
        if (blas_alloc_in_capture_locked("cublasCreate", nullptr, tl_dev, "(global mode, on its device)"))
            return CUBLAS_STATUS_ALLOC_FAILED;
    }
    BlasHandle *b = new BlasHandle;
    b->dev = tl_dev;
    std::lock_guard<std::mutex> l(blas_mu);
    blas_handles.insert(b);
    *h = (cublasHandle_t)b;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    BlasHandle *b = blas_get(h);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    {
        std::lock_guard<std::mutex> l(blas_mu);
        blas_handles.erase(b);
    }
    delete b;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    BlasHandle *b = blas_get(h);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    b->mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t *mode) {
    BlasHandle *b = blas_get(h);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = b->mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
    BlasHandle *b = blas_get(h);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    b->stream = s;
    b->ws = nullptr; /* "unconditionally resets the cuBLAS library workspace back to the default workspace pool" */
    b->wsbytes = 0;
    b->user_ws = false;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t h, cudaStream_t *s) {
    BlasHandle *b = blas_get(h);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!s) return CUBLAS_STATUS_INVALID_VALUE;
    *s = b->stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t bytes) {
    BlasHandle *b = blas_get(h);
    if (!b) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (ws && bytes) {
        bool bad;
        if (classify(ws, bytes, &bad) != b->dev || bad) {
            diag("cublasSetWorkspace: %p (%zu bytes) is not device memory of cuda:%d", ws, bytes, b->dev);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    b->ws = bytes ? ws : nullptr; /* NULL or 0 bytes: algorithms that need no workspace */
    b->wsbytes = ws ? bytes : 0;
    b->user_ws = true;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                              float *C, int ldc) {
    return gemm_common("cublasSgemm", h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, long long sA,
                                         const float *B, int ldb, long long sB, const float *beta, float *C, int ldc,
                                         long long sC, int batch) {
    return gemm_common("cublasSgemmStridedBatched", h, ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc,
                       sC, batch);
}

// GemmEx on f16 / bf16 matrices with f32 accumulation, the one form gpudl
// uses: A, B and C of one 16-bit type, CUBLAS_COMPUTE_32F (float alpha and
// beta); and the integer path (igemm_ex above). Anything else is CUBLAS_STATUS_NOT_SUPPORTED with a
// diagnostic.
// elem: A's and B's type; *c32: C is f32 (cuBLAS's f16/bf16 x f16/bf16 -> f32 with CUBLAS_COMPUTE_32F)
static cublasStatus_t gemm_ex_types(const char *fn, cudaDataType at, cudaDataType bt, cudaDataType ct,
                                    cublasComputeType_t comp, int *elem, bool *c32) {
    if (at != bt || (ct != at && ct != CUDA_R_32F) || (at != CUDA_R_16F && at != CUDA_R_16BF) ||
        comp != CUBLAS_COMPUTE_32F) {
        diag("%s: the emulator runs A and B of one type, f16 or bf16, into C of that type or f32, with "
             "CUBLAS_COMPUTE_32F (got types %d %d %d, compute %d)", fn, (int)at, (int)bt, (int)ct, (int)comp);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    *elem = (int)at;
    *c32 = ct == CUDA_R_32F;
    return CUBLAS_STATUS_SUCCESS;
}

// GemmEx's integer path: s8 A and B (CUDA_R_8I) into int32 C (CUDA_R_32I) with CUBLAS_COMPUTE_32I, int32
// alpha and beta, summed exactly in int32 (what the integer kernels compute; integer sums do not depend on
// their order, so GPUDL_EMU_GEMM's orders do not apply). The documented conditions of that path are
// checked and their breach refused as cuBLAS refuses an unsupported combination, with
// CUBLAS_STATUS_NOT_SUPPORTED: alpha and beta 0 or 1, A and B 32-bit aligned, lda and ldb multiples of 4.
static cublasStatus_t igemm_ex(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                        const void *alpha, const void *A, int lda, const void *B, int ldb, const void *beta, void *C,
                        int ldc) {
    const char *fn = "cublasGemmEx (CUDA_R_8I)";
    BlasHandle *H;
    cublasStatus_t st0 = blas_handle_call_start(fn, h, &H);
    if (st0 != CUBLAS_STATUS_SUCCESS) return st0;
    bool TA = ta != CUBLAS_OP_N, TB = tb != CUBLAS_OP_N;
    int ar = TA ? k : m, ac = TA ? m : k, br = TB ? n : k, bc = TB ? k : n;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || m < 0 || n < 0 ||
        k < 0 || !alpha || !beta || lda < std::max(1, ar) || ldb < std::max(1, br) || ldc < std::max(1, m)) {
        diag("%s: invalid arguments (m %d n %d k %d, lda %d ldb %d ldc %d, ops %d %d)", fn, m, n, k, lda, ldb, ldc,
             (int)ta, (int)tb);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    int32_t al = *(const int32_t *)alpha, be = *(const int32_t *)beta;
    if ((al != 0 && al != 1) || (be != 0 && be != 1) || (uintptr_t)A % 4 || (uintptr_t)B % 4 || lda % 4 ||
        ldb % 4) {
        diag("%s: not supported: the int8 path takes alpha and beta 0 or 1 (got %d, %d), A and B 32-bit aligned "
             "(%p, %p), lda and ldb multiples of 4 (%d, %d)", fn, (int)al, (int)be, A, B, lda, ldb);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    bool need_ab = al != 0 && k > 0;
    if ((need_ab && (!blas_operand_ok(fn, "A", A, ar, ac, lda, 0, 1, H->dev, 1) ||
                     !blas_operand_ok(fn, "B", B, br, bc, ldb, 0, 1, H->dev, 1))) ||
        !blas_operand_ok(fn, "C", C, m, n, ldc, 0, 1, H->dev, 4))
        return CUBLAS_STATUS_INVALID_VALUE;
    std::lock_guard<std::mutex> l(g_mu);
    Stream *s = resolve_locked(H->stream);
    if (!s) return CUBLAS_STATUS_INVALID_VALUE;
    if (s->legacy && global_capture_locked(s->dev)) {
        capture_violation_locked(s->dev, cudaErrorStreamCaptureImplicit, fn);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    enqueue_locked(s, [=] {
        if (need_ab) {
            sh_matrix(fn, A, ar, ac, lda, 1, false);
            sh_matrix(fn, B, br, bc, ldb, 1, false);
        }
        if (be != 0) sh_matrix(fn, C, m, n, ldc, 4, false);
        sh_matrix(fn, C, m, n, ldc, 4, true);
        const int8_t *a = (const int8_t *)A, *b = (const int8_t *)B;
        int32_t *c = (int32_t *)C;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                int32_t acc = 0;
                if (need_ab)
                    for (int p = 0; p < k; p++)
                        acc += (int32_t)(TA ? a[(size_t)i * lda + p] : a[(size_t)p * lda + i]) *
                               (int32_t)(TB ? b[(size_t)p * ldb + j] : b[(size_t)j * ldb + p]);
                int32_t *cij = &c[(size_t)j * ldc + i];
                *cij = (be ? *cij : 0) + (al ? acc : 0);
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t comp,
                            cublasGemmAlgo_t algo) {
    int elem = 0;
    bool c32 = false;
    if (at == CUDA_R_8I && bt == CUDA_R_8I && ct == CUDA_R_32I && comp == CUBLAS_COMPUTE_32I)
        return igemm_ex(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    cublasStatus_t st = gemm_ex_types("cublasGemmEx", at, bt, ct, comp, &elem, &c32);
    (void)algo;
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    return gemm_common("cublasGemmEx", h, ta, tb, m, n, k, (const float *)alpha, A, lda, 0, B, ldb, 0,
                       (const float *)beta, C, ldc, 0, 1, elem, c32);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          long long sA, const void *B, cudaDataType bt, int ldb, long long sB,
                                          const void *beta, void *C, cudaDataType ct, int ldc, long long sC, int batch,
                                          cublasComputeType_t comp, cublasGemmAlgo_t algo) {
    int elem = 0;
    bool c32 = false;
    cublasStatus_t st = gemm_ex_types("cublasGemmStridedBatchedEx", at, bt, ct, comp, &elem, &c32);
    (void)algo;
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    return gemm_common("cublasGemmStridedBatchedEx", h, ta, tb, m, n, k, (const float *)alpha, A, lda, sA, B, ldb, sB,
                       (const float *)beta, C, ldc, sC, batch, elem, c32);
}

} // extern "C"

// ---------------------------------------------------------------------------
// cuBLASLt: the matmul with bias / activation epilogues, the part gpudl uses
// (llm.c's matmul_cublaslt): f32 A, B, C, D with CUBLAS_COMPUTE_32F (or
// _FAST_TF32, rounding as TF32 mode does) and f32 scales; D = alpha op(A)
// op(B) + beta C computed by sgemm_cpu, as cublasSgemm is, then the
// epilogue per element of D: + bias[row], the pre-activation to the aux
// buffer (GELU_AUX), then ReLU or tanh-GELU with the formulas of gpudl's own
// kernels (0.5 v (1 + tanhf(0.7978845608028654 (v + 0.044715 v^3))): the
// last bits of real cuBLASLt's GELU may differ). Descriptors are checked
// (live handles and descriptors, attribute sizes, shapes, device memory of
// every operand, aux ld divisible by 8 and >= the rows of D, C == D or
// beta 0); other types, epilogues and attributes are
// CUBLAS_STATUS_NOT_SUPPORTED with a diagnostic.

struct cublasLtContext {
    int dev;
};

namespace {

struct LtDesc {
    cublasComputeType_t comp;
    cudaDataType_t scale;
    int32_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    uint32_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
    void *aux = nullptr;
    int64_t auxld = 0;
};
struct LtLayout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};
const size_t LT_ALGO_WS = (size_t)1 << 20; /* the most workspace an emulated cuBLASLt algorithm asks for */
struct LtPref {
    uint64_t ws = 0;
    uint32_t align[4] = {256, 256, 256, 256}; /* MIN_ALIGNMENT_A/B/C/D_BYTES; cuBLASLt's default is 256 */
};
std::mutex &lt_mu = *new std::mutex;
std::set<cublasLtContext *> &lt_handles = *new std::set<cublasLtContext *>;
std::map<const void *, LtDesc> &lt_descs = *new std::map<const void *, LtDesc>;
std::map<const void *, LtLayout> &lt_layouts = *new std::map<const void *, LtLayout>;
std::map<const void *, LtPref> &lt_prefs = *new std::map<const void *, LtPref>;

bool lt_epilogue(uint32_t e, bool *bias, bool *relu, bool *gelu, bool *aux) {
    *bias = *relu = *gelu = *aux = false;
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return true;
    case CUBLASLT_EPILOGUE_RELU: *relu = true; return true;
    case CUBLASLT_EPILOGUE_BIAS: *bias = true; return true;
    case CUBLASLT_EPILOGUE_RELU_BIAS: *bias = *relu = true; return true;
    case CUBLASLT_EPILOGUE_GELU: *gelu = true; return true;
    case CUBLASLT_EPILOGUE_GELU_BIAS: *gelu = *bias = true; return true;
    case CUBLASLT_EPILOGUE_GELU_AUX: *gelu = *aux = true; return true;
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: *gelu = *aux = *bias = true; return true;
    default: return false;
    }
}

// the checks shared by the heuristic and the matmul; pointers are checked by the matmul only
cublasStatus_t lt_check(const char *fn, cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                        cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl, LtDesc *D,
                        LtLayout *L) {
    std::lock_guard<std::mutex> l(lt_mu);
    if (!lt_handles.count(h)) {
        diag("%s: not a live cuBLASLt handle (%p)", fn, (void *)h);
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    if (!lt_descs.count(d) || !lt_layouts.count(a) || !lt_layouts.count(b) || !lt_layouts.count(c) ||
        !lt_layouts.count(dl)) {
        diag("%s: a matmul descriptor or matrix layout is not live (destroyed or never created)", fn);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    *D = lt_descs[d];
    L[0] = lt_layouts[a]; L[1] = lt_layouts[b]; L[2] = lt_layouts[c]; L[3] = lt_layouts[dl];
    if (tl_dev != h->dev) {
        diag("%s: handle made on cuda:%d used while cuda:%d is current", fn, h->dev, tl_dev);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if ((D->comp != CUBLAS_COMPUTE_32F && D->comp != CUBLAS_COMPUTE_32F_FAST_TF32) || D->scale != CUDA_R_32F ||
        L[0].type != CUDA_R_32F || L[1].type != CUDA_R_32F || L[2].type != CUDA_R_32F || L[3].type != CUDA_R_32F) {
        diag("%s: the emulator runs f32 matrices with CUBLAS_COMPUTE_32F(_FAST_TF32) and f32 scales only", fn);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    bool bias, relu, gelu, aux;
    if (!lt_epilogue(D->epi, &bias, &relu, &gelu, &aux)) {
        diag("%s: epilogue %u is not emulated (DEFAULT, RELU, BIAS, RELU_BIAS, GELU, GELU_BIAS, GELU_AUX, "
             "GELU_AUX_BIAS are)", fn, D->epi);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    bool TA = D->ta != CUBLAS_OP_N, TB = D->tb != CUBLAS_OP_N;
    uint64_t m = L[3].rows, n = L[3].cols, k = TA ? L[0].rows : L[0].cols;
    uint64_t am = TA ? L[0].cols : L[0].rows, bk = TB ? L[1].cols : L[1].rows, bn = TB ? L[1].rows : L[1].cols;
    if ((D->ta != CUBLAS_OP_N && D->ta != CUBLAS_OP_T) || (D->tb != CUBLAS_OP_N && D->tb != CUBLAS_OP_T) || am != m ||
        bk != k || bn != n || L[2].rows != m || L[2].cols != n || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) {
        diag("%s: shapes do not match: op(A) %llux%llu, op(B) %llux%llu, C %llux%llu, D %llux%llu", fn,
             (unsigned long long)am, (unsigned long long)k, (unsigned long long)bk, (unsigned long long)bn,
             (unsigned long long)L[2].rows, (unsigned long long)L[2].cols, (unsigned long long)m,
             (unsigned long long)n);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    for (int i = 0; i < 4; i++)
        if (L[i].ld < (int64_t)std::max<uint64_t>(1, L[i].rows) || L[i].ld > INT32_MAX) {
            diag("%s: matrix %d: ld %lld below its %llu rows", fn, i, (long long)L[i].ld,
                 (unsigned long long)L[i].rows);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    if (aux && (D->auxld < (int64_t)m || D->auxld % 8 != 0)) {
        diag("%s: GELU aux ld %lld must be divisible by 8 and at least the %llu rows of D", fn, (long long)D->auxld,
             (unsigned long long)m);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    if (!init_ok()) return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasLtContext *c = new cublasLtContext;
    c->dev = tl_dev;
    std::lock_guard<std::mutex> l(lt_mu);
    lt_handles.insert(c);
    *h = c;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    std::lock_guard<std::mutex> l(lt_mu);
    if (!lt_handles.erase(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t comp, cudaDataType_t scale) {
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulDescOpaque_t *o = new cublasLtMatmulDescOpaque_t();
    LtDesc v;
    v.comp = comp;
    v.scale = scale;
    std::lock_guard<std::mutex> l(lt_mu);
    lt_descs[o] = v;
    *d = o;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    std::lock_guard<std::mutex> l(lt_mu);
    if (!lt_descs.erase(d)) return CUBLAS_STATUS_INVALID_VALUE;
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
    std::lock_guard<std::mutex> l(lt_mu);
    auto it = lt_descs.find(d);
    if (it == lt_descs.end() || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    LtDesc &v = it->second;
    size_t want;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: case CUBLASLT_MATMUL_DESC_TRANSB: want = sizeof(int32_t); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: want = sizeof(uint32_t); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: want = sizeof(void *); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: want = sizeof(int64_t); break;
    default:
        diag("cublasLtMatmulDescSetAttribute: attribute %d is not emulated", (int)attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (size != want) {
        diag("cublasLtMatmulDescSetAttribute: attribute %d takes %zu bytes, got %zu", (int)attr, want, size);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: memcpy(&v.ta, buf, 4); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: memcpy(&v.tb, buf, 4); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: memcpy(&v.epi, buf, 4); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: memcpy(&v.bias, buf, sizeof(void *)); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: memcpy(&v.aux, buf, sizeof(void *)); break;
    default: memcpy(&v.auxld, buf, 8); break;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *m, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if (!m) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatrixLayoutOpaque_t *o = new cublasLtMatrixLayoutOpaque_t();
    LtLayout v;
    v.type = type; v.rows = rows; v.cols = cols; v.ld = ld;
    std::lock_guard<std::mutex> l(lt_mu);
    lt_layouts[o] = v;
    *m = o;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t m) {
    std::lock_guard<std::mutex> l(lt_mu);
    if (!lt_layouts.erase(m)) return CUBLAS_STATUS_INVALID_VALUE;
    delete m;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulPreferenceOpaque_t *o = new cublasLtMatmulPreferenceOpaque_t();
    std::lock_guard<std::mutex> l(lt_mu);
    lt_prefs[o] = LtPref();
    *p = o;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    std::lock_guard<std::mutex> l(lt_mu);
    if (!lt_prefs.erase(p)) return CUBLAS_STATUS_INVALID_VALUE;
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size) {
    std::lock_guard<std::mutex> l(lt_mu);
    auto it = lt_prefs.find(p);
    if (it == lt_prefs.end() || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        if (size != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&it->second.ws, buf, 8);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
        if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&it->second.align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    default:
        diag("cublasLtMatmulPreferenceSetAttribute: attribute %d is not emulated", (int)attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

// one algorithm for every configuration the matmul runs; none (NOT_SUPPORTED) for the rest
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *count) {
    LtDesc D;
    LtLayout L[4];
    if (!results || !count || requested <= 0) return CUBLAS_STATUS_INVALID_VALUE;
    {
        std::lock_guard<std::mutex> l(lt_mu);
        if (!lt_prefs.count(p)) return CUBLAS_STATUS_INVALID_VALUE;
    }
    *count = 0;
    cublasStatus_t st = lt_check("cublasLtMatmulAlgoGetHeuristic", h, d, a, b, c, dl, &D, L);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    // As the real library may: no algorithm when the caller says a matrix
    // is less aligned than its element (4 bytes for f32), when the
    // epilogue's bias vector is not 16-byte aligned, or its aux output is
    // not 16-byte aligned or has a leading dimension not divisible by 8 (the
    // cuBLASLt documentation's rule for EPILOGUE_AUX_LD).
    LtPref P;
    {
        std::lock_guard<std::mutex> l(lt_mu);
        P = lt_prefs[p];
    }
    bool bias, relu, gelu, aux;
    lt_epilogue(D.epi, &bias, &relu, &gelu, &aux);
    const char *why = nullptr;
    for (int i = 0; i < 4 && !why; i++)
        if (P.align[i] < 4 || (P.align[i] & (P.align[i] - 1))) why = "a matrix alignment below its element size";
    if (!why && bias && (uintptr_t)D.bias % 16) why = "a bias vector not aligned to 16 bytes";
    if (!why && aux && ((uintptr_t)D.aux % 16 || D.auxld % 8)) why = "an aux output not aligned to 16 bytes or its ld not divisible by 8";
    long hc = ++lt_heur_calls, ra = lt_refuse_at.load();
    if (!why && ra >= 0 && hc == ra) {
        lt_refuse_at.store(-1);
        why = "refused on request (gdl_emu_lt_no_algo)";
    }
    if (why) {
        lt_no_algo++;
        diag("cublasLtMatmulAlgoGetHeuristic: no algorithm: %s", why);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = 0x656d75u; /* "emu" */
    // the alignments it assumes: those promised, at most 16 bytes (cublasLtMatmul checks them)
    for (int i = 0; i < 4; i++) results[0].algo.data[1 + i] = P.align[i] < 16 ? P.align[i] : 16;
    // it uses the workspace the preference allows (MAX_WORKSPACE_BYTES, 0
    // by default), up to LT_ALGO_WS: cublasLtMatmul must be given as much
    results[0].workspaceSize = P.ws < LT_ALGO_WS ? (size_t)P.ws : LT_ALGO_WS;
    results[0].algo.data[5] = results[0].workspaceSize;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *count = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
                              const void *C, cublasLtMatrixLayout_t c, void *Dp, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsbytes, cudaStream_t stream) {
    const char *fn = "cublasLtMatmul";
    LtDesc D;
    LtLayout L[4];
    cublasStatus_t st = lt_check(fn, h, d, a, b, c, dl, &D, L);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    // an algorithm from the heuristic runs only on pointers as aligned as it was told
    // (NULL: cuBLASLt picks one for the actual pointers)
    const void *ptrs[4] = {A, B, C, Dp};
    for (int i = 0; algo && algo->data[0] == 0x656d75u && i < 4; i++)
        if (algo->data[1 + i] && (uintptr_t)ptrs[i] % algo->data[1 + i]) {
            diag("%s: matrix %c (%p) is not aligned to the %u bytes its algorithm was chosen for "
                 "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES)", fn, "ABCD"[i], ptrs[i],
                 (unsigned)algo->data[1 + i], "ABCD"[i]);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    // cuBLASLt never allocates: the algorithm's workspace comes from the caller or it does not run
    if (algo && algo->data[0] == 0x656d75u && (wsbytes < algo->data[5] || (algo->data[5] && !ws))) {
        diag("%s: workspace %p of %zu bytes, and its algorithm needs %llu (the heuristic's workspaceSize for the "
             "preference's CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)", fn, ws, wsbytes,
             (unsigned long long)algo->data[5]);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    cublasStatus_t st0 = blas_call_start();
    if (st0 != CUBLAS_STATUS_SUCCESS) return st0;
    if (!alpha || !beta) {
        diag("%s: alpha or beta is NULL", fn);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    bool bias, relu, gelu, aux;
    lt_epilogue(D.epi, &bias, &relu, &gelu, &aux);
    bool TA = D.ta != CUBLAS_OP_N, TB = D.tb != CUBLAS_OP_N;
    int m = (int)L[3].rows, n = (int)L[3].cols, k = (int)(TA ? L[0].rows : L[0].cols);
    float al = *(const float *)alpha, be = *(const float *)beta;
    if (C != Dp && be != 0) {
        diag("%s: the emulator runs C == D (in place) or beta 0", fn);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (C == Dp && (L[2].ld != L[3].ld)) {
        diag("%s: C and D are one matrix with two layouts (ld %lld and %lld)", fn, (long long)L[2].ld,
             (long long)L[3].ld);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    int dev = h->dev;
    if ((al != 0 && k > 0 &&
         (!blas_operand_ok(fn, "A", A, (int)L[0].rows, (int)L[0].cols, (int)L[0].ld, 0, 1, dev) ||
          !blas_operand_ok(fn, "B", B, (int)L[1].rows, (int)L[1].cols, (int)L[1].ld, 0, 1, dev))) ||
        (be != 0 && !blas_operand_ok(fn, "C", C, m, n, (int)L[2].ld, 0, 1, dev)) ||
        !blas_operand_ok(fn, "D", Dp, m, n, (int)L[3].ld, 0, 1, dev) ||
        (bias && !blas_operand_ok(fn, "bias", D.bias, m, 1, m, 0, 1, dev)) ||
        (aux && !blas_operand_ok(fn, "aux", D.aux, m, n, (int)D.auxld, 0, 1, dev)))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (wsbytes) {
        bool bad;
        if (!ws || classify(ws, wsbytes, &bad) != dev || bad) {
            diag("%s: workspace %p (%zu bytes) is not device memory of cuda:%d", fn, ws, wsbytes, dev);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    bool round = D.comp == CUBLAS_COMPUTE_32F_FAST_TF32;
    int lda = (int)L[0].ld, ldb = (int)L[1].ld, ldd = (int)L[3].ld;
    const float *bp = (const float *)D.bias;
    float *xp = (float *)D.aux, *dp = (float *)Dp;
    int64_t auxld = D.auxld;
    bool ordered = cfg().gemm != 0;
    GemmOrder ord;
    if (ordered)
        ord = gemm_order(gemm_key({2, (long long)D.ta, (long long)D.tb, m, n, k, lda, ldb, ldd, (long long)D.epi,
                                   (long long)round, (long long)((uintptr_t)A % 16), (long long)((uintptr_t)B % 16),
                                   (long long)((uintptr_t)Dp % 16)}));
    std::lock_guard<std::mutex> l(g_mu);
    Stream *s = resolve_locked(stream);
    if (!s) return CUBLAS_STATUS_INVALID_VALUE;
    if (s->legacy && global_capture_locked(s->dev)) {
        capture_violation_locked(s->dev, cudaErrorStreamCaptureImplicit, fn);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    int64_t arows = L[0].rows, acols = L[0].cols, brows = L[1].rows, bcols = L[1].cols;
    enqueue_locked(s, [=] {
        blas_ws_live(fn, ws, wsbytes, dev);
        if (al != 0 && k > 0) {
            sh_matrix(fn, A, arows, acols, lda, 4, false);
            sh_matrix(fn, B, brows, bcols, ldb, 4, false);
        }
        if (be != 0) sh_matrix(fn, dp, m, n, ldd, 4, false);
        if (bias) sh_matrix(fn, bp, m, 1, m, 4, false);
        sh_matrix(fn, dp, m, n, ldd, 4, true);
        if (aux) sh_matrix(fn, xp, m, n, auxld, 4, true);
        sgemm_cpu(TA, TB, m, n, k, al, (const float *)A, lda, (const float *)B, ldb, be, dp, ldd, round,
                  ordered ? &ord : nullptr);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float v = dp[(size_t)j * ldd + i];
                if (bias) v = v + bp[i];
                if (aux) xp[(size_t)j * auxld + i] = v;
                if (relu) v = v > 0 ? v : 0.0f;
                if (gelu) v = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
                dp[(size_t)j * ldd + i] = v;
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"

// ---------------------------------------------------------------------------
// NCCL: communicators over a POSIX shared-memory segment named by the unique
// id, so the ranks may be processes (one emulated device each) or threads of
// one process (the design and its limits: cuda_emu.h). A collective is a
// stream operation: when its stream reaches it, the rank copies its part into
// its slot of the segment, waits at a process-shared barrier, computes its
// result from every slot (reductions add the ranks' values in rank order, so
// every rank gets the same bits), and waits again before the slots are
// reused; large buffers go through in chunks. A barrier that does not fill
// within the timeout breaks the communicator for every rank: the collective
// leaves its output untouched and ncclCommGetAsyncError reports the error.

#include <fcntl.h>
#include <sys/stat.h>
#include <nccl.h>

namespace {

const uint64_t NCCL_MAGIC = 0x6c6363656e756d65ull; /* "emuncccl" */
const size_t NCCL_CHUNK = (size_t)1 << 20;         /* bytes per rank and round */
const int NCCL_MAX_RANKS = 64;

struct NcclSlot {                 /* what a rank says it is doing, checked by every rank */
    uint32_t kind, dtype, op, root;
    uint64_t count, seq;
};

struct NcclSeg {
    std::atomic<uint32_t> nranks; /* set by the first rank to arrive; 0: not yet */
    std::atomic<uint32_t> arrived, gen, broken;
    std::atomic<uint32_t> joined; /* ranks past ncclCommInitRank's opening */
    NcclSlot slot[NCCL_MAX_RANKS];
};

size_t nccl_seg_bytes(int n) { return (sizeof(NcclSeg) + 255) / 256 * 256 + (size_t)n * NCCL_CHUNK; }

std::atomic<double> nccl_timeout_s{-1};
double nccl_timeout(void) {
    double t = nccl_timeout_s.load();
    if (t >= 0) return t;
    // the emulator's own setting first, then gpudl's (NCCL itself has no such limit: gpudl's waits bound it)
    const char *e = getenv("GPUDL_EMU_NCCL_TIMEOUT");
    if (e && atof(e) > 0) return atof(e);
    e = getenv("GPUDL_DIST_TIMEOUT");
    return e && atof(e) > 0 ? atof(e) : 120.0;
}

} // namespace

struct ncclComm {
    int nranks, rank, dev;
    NcclSeg *seg;
    char *data;                     /* nranks slots of NCCL_CHUNK bytes */
    size_t bytes;
    std::atomic<int> async_err{ncclSuccess};
    std::atomic<int> aborted{0};
    std::atomic<int> inflight{0};   /* queued collectives not done yet */
    uint64_t seq = 0;               /* collectives issued (host side) */
    char name[64];
};

namespace {

std::mutex nccl_mu;
std::set<ncclComm *> nccl_comms;

// The process-shared barrier: the last rank to arrive starts a new
// generation. false when it broke (a peer gave up or this rank timed out).
bool nccl_barrier(ncclComm *c, const char *what) {
    NcclSeg *S = c->seg;
    uint32_t g = S->gen.load();
    if (S->broken.load() || c->aborted.load()) return false;
    if (S->arrived.fetch_add(1) + 1 == (uint32_t)c->nranks) {
        S->arrived.store(0);
        S->gen.fetch_add(1);
        return true;
    }
    double t0 = now_s(), limit = nccl_timeout();
    for (int spin = 0; S->gen.load() == g; spin++) {
        if (S->broken.load() || c->aborted.load()) return false;
        if (now_s() - t0 > limit) {
            S->broken.store(1);
            diag("%s: rank %d of %d waited %.3g s (GPUDL_EMU_NCCL_TIMEOUT or GPUDL_DIST_TIMEOUT) for its peers on communicator %s: "
                 "a rank never arrived; the communicator is broken", what, c->rank, c->nranks, limit, c->name);
            return false;
        }
        if (spin < 100) sched_yield();
        else {
            struct timespec ts = {0, spin < 1000 ? 50000 : 500000};
            nanosleep(&ts, nullptr);
        }
    }
    return true; /* it filled: a break after that is the next barrier's */
}

size_t nccl_type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

// acc[i] (op)= x[i] for the types gpudl uses; the first rank's values are copied
template <typename T> void nccl_add(void *acc, const void *x, size_t n, bool first) {
    T *a = (T *)acc;
    const T *b = (const T *)x;
    for (size_t i = 0; i < n; i++) a[i] = first ? b[i] : (T)(a[i] + b[i]);
}
template <typename T> void nccl_div(void *acc, size_t n, int w) {
    T *a = (T *)acc;
    for (size_t i = 0; i < n; i++) a[i] = (T)(a[i] / (T)w);
}
bool nccl_reduce(ncclDataType_t t, void *acc, const void *x, size_t n, bool first) {
    switch (t) {
    case ncclFloat32: nccl_add<float>(acc, x, n, first); return true;
    case ncclFloat64: nccl_add<double>(acc, x, n, first); return true;
    case ncclInt32: nccl_add<int32_t>(acc, x, n, first); return true;
    case ncclInt64: nccl_add<int64_t>(acc, x, n, first); return true;
    default: return false;
    }
}
void nccl_average(ncclDataType_t t, void *acc, size_t n, int w) {
    switch (t) {
    case ncclFloat32: nccl_div<float>(acc, n, w); break;
    case ncclFloat64: nccl_div<double>(acc, n, w); break;
    case ncclInt32: nccl_div<int32_t>(acc, n, w); break;
    case ncclInt64: nccl_div<int64_t>(acc, n, w); break;
    default: break;
    }
}

enum { NK_ALLREDUCE = 1, NK_BROADCAST, NK_ALLGATHER, NK_REDUCESCATTER, NK_BARRIER };
const char *nccl_kind_name(int k) {
    static const char *const n[] = {"?", "ncclAllReduce", "ncclBroadcast", "ncclAllGather", "ncclReduceScatter",
                                    "ncclCommInitRank"};
    return k >= 0 && k <= 5 ? n[k] : "?";
}

void nccl_fail(ncclComm *c, ncclResult_t r) {
    int ok = ncclSuccess;
    c->async_err.compare_exchange_strong(ok, (int)r);
    c->seg->broken.store(1);
}

// One collective, run by the stream's thread when the stream reaches it.
// count: elements per rank (all-gather: sent; reduce-scatter: received).
void nccl_run(ncclComm *c, int kind, const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
              int root, uint64_t seq) {
    const char *what = nccl_kind_name(kind);
    size_t es = nccl_type_size(dt), per = NCCL_CHUNK / es;
    NcclSeg *S = c->seg;
    int W = c->nranks, me = c->rank;
    if (c->async_err.load() != ncclSuccess || S->broken.load()) return;
    NcclSlot mine = {(uint32_t)kind, (uint32_t)dt, (uint32_t)op, (uint32_t)root, (uint64_t)count, seq};
    S->slot[me] = mine;
    if (!nccl_barrier(c, what)) return nccl_fail(c, ncclRemoteError);
    for (int r = 0; r < W; r++) { /* NCCL hangs or corrupts on mismatched calls; the emulator says so */
        const NcclSlot &o = S->slot[r];
        if (o.kind != mine.kind || o.dtype != mine.dtype || o.op != mine.op || o.root != mine.root ||
            o.count != mine.count || o.seq != mine.seq) {
            diag("%s: rank %d's call #%llu (count %llu, type %u, op %u, root %u) does not match rank %d's call #%llu "
                 "(%s, count %llu, type %u, op %u, root %u) on communicator %s", what, me, (unsigned long long)seq,
                 (unsigned long long)count, (unsigned)dt, (unsigned)op, (unsigned)root, r,
                 (unsigned long long)o.seq, nccl_kind_name((int)o.kind), (unsigned long long)o.count, o.dtype, o.op,
                 o.root, c->name);
            return nccl_fail(c, ncclInvalidUsage);
        }
    }
    if (!nccl_barrier(c, what)) return nccl_fail(c, ncclRemoteError);
    // every round: write my part, barrier, read, barrier (the slots are reused)
    auto slot = [&](int r) { return c->data + (size_t)r * NCCL_CHUNK; };
    std::vector<char> acc;
    int rounds_per = kind == NK_REDUCESCATTER ? W : 1;
    for (int dst = 0; dst < rounds_per; dst++)
        for (size_t off = 0; off < count; off += per) {
            size_t n = std::min(per, count - off), nb = n * es;
            const char *src = (const char *)send;
            if (kind == NK_REDUCESCATTER) src += ((size_t)dst * count + off) * es;
            else src += off * es;
            if (kind != NK_BROADCAST || me == root) memcpy(slot(me), src, nb);
            if (!nccl_barrier(c, what)) return nccl_fail(c, ncclRemoteError);
            char *out = (char *)recv;
            switch (kind) {
            case NK_ALLREDUCE:
            case NK_REDUCESCATTER:
                if (kind == NK_REDUCESCATTER && dst != me) break;
                acc.resize(nb);
                for (int r = 0; r < W; r++) nccl_reduce(dt, acc.data(), slot(r), n, r == 0);
                if (op == ncclAvg) nccl_average(dt, acc.data(), n, W);
                memcpy(out + off * es, acc.data(), nb);
                break;
            case NK_BROADCAST: memcpy(out + off * es, slot(root), nb); break;
            case NK_ALLGATHER:
                for (int r = 0; r < W; r++) memcpy(out + ((size_t)r * count + off) * es, slot(r), nb);
                break;
            }
            if (!nccl_barrier(c, what)) return nccl_fail(c, ncclRemoteError);
        }
}

ncclResult_t nccl_enqueue(const char *fn, int kind, const void *send, void *recv, size_t count,
                          ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t st) {
    {
        std::lock_guard<std::mutex> l(nccl_mu);
        if (!nccl_comms.count(c)) {
            diag("%s: not a communicator (%p)", fn, (void *)c);
            return ncclInvalidArgument;
        }
    }
    if (!init_ok()) return ncclUnhandledCudaError;
    if (tl_dev != c->dev) {
        diag("%s: communicator of cuda:%d used while cuda:%d is current", fn, c->dev, tl_dev);
        return ncclInvalidUsage;
    }
    if (!nccl_type_size(dt) || (kind != NK_BROADCAST && !(dt == ncclFloat32 || dt == ncclFloat64 ||
                                                           dt == ncclInt32 || dt == ncclInt64))) {
        diag("%s: data type %d is not one the emulator reduces", fn, (int)dt);
        return ncclInvalidArgument;
    }
    if ((kind == NK_ALLREDUCE || kind == NK_REDUCESCATTER) && op != ncclSum && op != ncclAvg) {
        diag("%s: reduction %d: the emulator has ncclSum and ncclAvg", fn, (int)op);
        return ncclInvalidArgument;
    }
    if (root < 0 || root >= c->nranks) {
        diag("%s: root %d of %d ranks", fn, root, c->nranks);
        return ncclInvalidArgument;
    }
    size_t es = nccl_type_size(dt);
    size_t sn = kind == NK_REDUCESCATTER ? count * c->nranks : count;
    size_t rn = kind == NK_ALLGATHER ? count * c->nranks : count;
    bool bad;
    if (count && ((kind != NK_BROADCAST || c->rank == root) && (classify(send, sn * es, &bad) != c->dev || bad))) {
        diag("%s: the send buffer %p (%zu bytes) is not memory of cuda:%d", fn, send, sn * es, c->dev);
        return ncclInvalidArgument;
    }
    if (count && (classify(recv, rn * es, &bad) != c->dev || bad)) {
        diag("%s: the receive buffer %p (%zu bytes) is not memory of cuda:%d", fn, recv, rn * es, c->dev);
        return ncclInvalidArgument;
    }
    std::lock_guard<std::mutex> lk(g_mu);
    Stream *s = resolve_locked(st);
    if (!s || s->dev != c->dev) {
        diag("%s: not a stream of cuda:%d", fn, c->dev);
        return ncclInvalidArgument;
    }
    if (s->cap) {
        diag("%s: stream capture of collectives is not emulated", fn);
        return ncclInvalidUsage;
    }
    uint64_t seq = ++c->seq;
    c->inflight.fetch_add(1);
    enqueue_locked(s, [=] {
        if (count && (kind != NK_BROADCAST || c->rank == root)) sh_check_host(fn, send, sn * es);
        if (count) sh_mark_host(recv, rn * es);
        nccl_run(c, kind, send, recv, count, dt, op, root, seq);
        c->inflight.fetch_sub(1);
    });
    return ncclSuccess;
}

} // namespace

extern "C" {

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

// GPUDL_EMU_NCCL_FAIL_ID=1: fails (ncclSystemError), as NCCL does without network interfaces: a test's
// rank 0 that cannot make the id
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return ncclInvalidArgument;
    if (getenv("GPUDL_EMU_NCCL_FAIL_ID") && atoi(getenv("GPUDL_EMU_NCCL_FAIL_ID")) == 1) return ncclSystemError;
    uint64_t r = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&r, sizeof r, 1, f) != 1) r = (uint64_t)now_s() * 1000003u ^ (uint64_t)getpid() << 20;
    if (f) fclose(f);
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &NCCL_MAGIC, 8);
    memcpy(id->internal + 8, &r, 8);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
    uint64_t magic, key;
    if (!out || nranks < 1 || nranks > NCCL_MAX_RANKS || rank < 0 || rank >= nranks) {
        diag("ncclCommInitRank: rank %d of %d ranks (the emulator has at most %d)", rank, nranks, NCCL_MAX_RANKS);
        return ncclInvalidArgument;
    }
    memcpy(&magic, id.internal, 8);
    memcpy(&key, id.internal + 8, 8);
    if (magic != NCCL_MAGIC) {
        diag("ncclCommInitRank: the unique id was not made by ncclGetUniqueId");
        return ncclInvalidArgument;
    }
    if (!init_ok()) return ncclUnhandledCudaError;
    ncclComm *c = new ncclComm;
    c->nranks = nranks;
    c->rank = rank;
    c->dev = tl_dev;
    snprintf(c->name, sizeof c->name, "/gdl-emu-nccl-%016llx", (unsigned long long)key);
    c->bytes = nccl_seg_bytes(nranks);
    int fd = shm_open(c->name, O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)c->bytes) != 0) {
        diag("ncclCommInitRank: shared memory %s: %s", c->name, strerror(errno));
        if (fd >= 0) close(fd);
        delete c;
        return ncclSystemError;
    }
    void *p = mmap(nullptr, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        diag("ncclCommInitRank: mmap of %s: %s", c->name, strerror(errno));
        delete c;
        return ncclSystemError;
    }
    c->seg = (NcclSeg *)p;
    c->data = (char *)p + (sizeof(NcclSeg) + 255) / 256 * 256;
    uint32_t zero = 0;
    if (!c->seg->nranks.compare_exchange_strong(zero, (uint32_t)nranks) && zero != (uint32_t)nranks) {
        diag("ncclCommInitRank: rank %d says %d ranks, an earlier rank said %u", rank, nranks, zero);
        c->seg->broken.store(1);
        munmap(p, c->bytes);
        delete c;
        return ncclInvalidUsage;
    }
    // every rank has opened the segment past this barrier: its name can go
    bool ok = nccl_barrier(c, "ncclCommInitRank");
    if (rank == 0 || !ok) shm_unlink(c->name);
    if (!ok) {
        munmap(p, c->bytes);
        delete c;
        return ncclRemoteError;
    }
    {
        std::lock_guard<std::mutex> l(nccl_mu);
        nccl_comms.insert(c);
    }
    *out = c;
    return ncclSuccess;
}

static ncclResult_t nccl_release(ncclComm_t c, bool abort) {
    {
        std::lock_guard<std::mutex> l(nccl_mu);
        if (!nccl_comms.erase(c)) return ncclInvalidArgument;
    }
    if (abort) c->aborted.store(1);
    while (c->inflight.load() > 0) { /* queued collectives end (an aborted one at its next barrier) */
        struct timespec ts = {0, 200000};
        nanosleep(&ts, nullptr);
    }
    munmap(c->seg, c->bytes);
    delete c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) { return nccl_release(c, false); }
ncclResult_t ncclCommAbort(ncclComm_t c) { return nccl_release(c, true); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) {
    std::lock_guard<std::mutex> l(nccl_mu);
    if (!e || !nccl_comms.count(c)) return ncclInvalidArgument;
    *e = (ncclResult_t)c->async_err.load();
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t st) {
    return nccl_enqueue("ncclAllReduce", NK_ALLREDUCE, send, recv, count, dt, op, 0, c, st);
}
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root, ncclComm_t c,
                           cudaStream_t st) {
    return nccl_enqueue("ncclBroadcast", NK_BROADCAST, send, recv, count, dt, ncclSum, root, c, st);
}
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclComm_t c,
                           cudaStream_t st) {
    return nccl_enqueue("ncclAllGather", NK_ALLGATHER, send, recv, count, dt, ncclSum, 0, c, st);
}
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t st) {
    return nccl_enqueue("ncclReduceScatter", NK_REDUCESCATTER, send, recv, count, dt, op, 0, c, st);
}

int gdl_emu_nccl_timeout(double seconds) {
    nccl_timeout_s.store(seconds > 0 ? seconds : -1);
    return 0;
}

} // extern "C"
