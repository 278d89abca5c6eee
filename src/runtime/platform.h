/* ---------------------------------------------------------------------------
   src/runtime/platform.h  The one part that talks to the operating system, with a
   POSIX version (Linux, macOS, the BSDs) and a Win32 one (MinGW-w64, MSVC):
   threads, mutexes, condition variables, once-only initialisation, atomics,
   clocks, sleeping, directory listing, processes, files (atomic replace,
   temporaries, fsync), the CPU count, dynamic loading and the sockets of the
   TCP rendezvous. The parts after this one call only what is here: no other
   part includes a POSIX-only or Windows header (tests/msvc_check.sh, run by
   make test, greps for that).

   What Windows lacks yet compiles out, and says so when it is used:
     - MPI: GPUDL_MPI is ignored there; gdl_dist_init with several processes
       fails with an error naming MPI and Windows;
     - the TCP rendezvous works there (Winsock 2, loaded at its first use:
       no -lws2_32), except in a translation unit that included Winsock 1
       (<winsock.h>, which a <windows.h> without WIN32_LEAN_AND_MEAN brings)
       before gpudl.h: GDL__OS_SOCKETS is not defined then, and gdl_dist_init
       says the build lacks the rendezvous.
   A platform that is neither POSIX nor Windows gets one thread
   (GPUDL_NO_THREADS), wall-clock time from clock(), no directory listing and
   no dynamic loading; it still compiles.

   Win32 needs Windows Vista or later (slim reader/writer locks, condition
   variables, InitOnceExecuteOnce).
   ------------------------------------------------------------------------- */

#if defined(_WIN32)
#define GDL__OS_WIN 1
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#define NOMINMAX /* windows.h's min / max macros would rewrite any later min( or max( */
#endif
#if !defined(_WIN32_WINNT) || _WIN32_WINNT < 0x0600
#undef _WIN32_WINNT
#define _WIN32_WINNT 0x0600
#endif
#if !defined(_WINSOCKAPI_) || defined(_WINSOCK2API_) /* Winsock 1 first: no sockets (they cannot mix) */
#include <winsock2.h> /* before windows.h, which would bring Winsock 1 without WIN32_LEAN_AND_MEAN */
#include <ws2tcpip.h> /* getaddrinfo */
#define GDL__OS_SOCKETS 1 /* the TCP rendezvous (src/dist/) */
#endif
#include <windows.h>
#include <process.h>  /* _beginthreadex */
#include <io.h>       /* _commit, _isatty, _open_osfhandle */
#include <fcntl.h>    /* _O_RDONLY, _O_BINARY */
#include <direct.h>   /* _mkdir */
#include <errno.h>
#include <time.h>
#elif defined(__unix__) || defined(__APPLE__)
#define GDL__OS_POSIX 1
#define GDL__HAVE_POSIX 1
#include <errno.h>
#include <time.h>
#include <sys/types.h> /* pid_t, which -std=c99 hides in unistd.h */
#include <unistd.h>    /* getpid, fsync, isatty, sysconf */
#include <dirent.h>    /* opendir: stale temporaries of killed saves */
#include <sys/stat.h>  /* mkdir: gdl_fit's checkpoint_dir */
#include <sys/time.h>  /* gettimeofday */
#include <signal.h>    /* kill(pid, 0): is a process alive */
#include <fcntl.h>     /* a save locks its temporary: a live writer's is never removed */
#include <poll.h>      /* poll(NULL, 0, ms): a millisecond's sleep that -std=c99 does not hide */
#include <sched.h>     /* sched_yield; sched_getaffinity */
#if !defined(GPUDL_NO_THREADS)
#include <pthread.h>
#endif
#if defined(GPUDL_CUDA) || defined(GPUDL_NVML)
#include <dlfcn.h>
#endif
#if !defined(GPUDL_MPI)
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <netdb.h>
#define GDL__OS_SOCKETS 1 /* the TCP rendezvous (src/dist/) */
#endif
#if !defined(__cplusplus) && !defined(__APPLE__)
/* POSIX headers declare them, but a bare -std=c99 hides them (glibc, musl); the declarations are identical.
   (macOS shows them in any mode, with its own asm names.) */
#ifndef fileno
int fileno(FILE *stream);
#endif
int kill(pid_t pid, int sig);
#endif
#if defined(__linux__) && defined(__GLIBC__) && !defined(__USE_GNU)
extern int sched_getaffinity(pid_t, size_t, cpu_set_t *); /* -std=c99 hides it; the symbol is in every glibc */
#endif
#if defined(__linux__) && (defined(__x86_64__) || defined(__i386__))
#include <sys/syscall.h> /* SYS_arch_prctl: AMX's tile data (gdl__os_amx_grant) */
#if defined(__GLIBC__) && !defined(__USE_MISC)
extern long syscall(long number, ...); /* -std=c99 hides it; the symbol is in every glibc */
#endif
#endif
#else
#include <errno.h>
#include <time.h>
#ifndef GPUDL_NO_THREADS
#define GPUDL_NO_THREADS 1 /* no thread API known here */
#endif
#endif

/* The functions below: static inline, so that a configuration that uses only some of them gets no
   "defined but not used" warning. */
#if defined(__cplusplus) || (defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L)
#define GDL__OSFN static inline
#elif defined(_MSC_VER) || defined(__GNUC__)
#define GDL__OSFN static __inline
#else
#define GDL__OSFN static
#endif

/* MPI has no Windows version here yet: compiled out, gdl_dist_init says so (GDL__OS_NO_MPI). */
#if defined(GDL__OS_WIN) && defined(GPUDL_MPI)
#undef GPUDL_MPI
#define GDL__OS_NO_MPI "MPI (GPUDL_MPI) has no Windows version in gpudl yet"
#endif

/* One spelling for alignment, what every compiler accepts (MSVC rejects _Alignas in C before C11 and
   GCC's attribute everywhere). */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define GDL__ALIGNAS(n) alignas(n)
#elif defined(_MSC_VER)
#define GDL__ALIGNAS(n) __declspec(align(n))
#elif defined(__GNUC__) || defined(__clang__)
#define GDL__ALIGNAS(n) __attribute__((aligned(n)))
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define GDL__ALIGNAS(n) _Alignas(n)
#else
#define GDL__ALIGNAS(n)
#endif

/* ---- atomics ----
   gdl__atomic_load / store / add (returns the new value) / cas (on failure *expected becomes the value
   seen) on int, int64_t and uint64_t objects, with C11's memory orders. GCC and clang: their __atomic
   builtins. Windows otherwise (MSVC; -DGDL__ATOMICS_INTERLOCKED takes this path under MinGW, which is how
   make test-windows checks it): the Interlocked functions, full barriers, so at least the order asked
   for. GDL__ATOMICS is left undefined where there are neither: no thread pool then. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(GDL__ATOMICS_INTERLOCKED)
#define GDL__ATOMICS 1
#define GDL__MO_RELAXED __ATOMIC_RELAXED
#define GDL__MO_ACQUIRE __ATOMIC_ACQUIRE
#define GDL__MO_RELEASE __ATOMIC_RELEASE
#define GDL__MO_ACQ_REL __ATOMIC_ACQ_REL
#define GDL__MO_SEQ_CST __ATOMIC_SEQ_CST
#define gdl__atomic_load(p, mo) __atomic_load_n(p, mo)
#define gdl__atomic_store(p, v, mo) __atomic_store_n(p, v, mo)
#define gdl__atomic_add(p, v, mo) __atomic_add_fetch(p, v, mo)
#define gdl__atomic_cas(p, expected, desired, weak, mo_ok, mo_fail) \
    __atomic_compare_exchange_n(p, expected, desired, weak, mo_ok, mo_fail)
#elif defined(GDL__OS_WIN)
#define GDL__ATOMICS 1
#define GDL__ATOMICS_INTERLOCKED 1
#define GDL__MO_RELAXED 0
#define GDL__MO_ACQUIRE 0
#define GDL__MO_RELEASE 0
#define GDL__MO_ACQ_REL 0
#define GDL__MO_SEQ_CST 0
/* the object's size picks the 32- or 64-bit function; the value travels as int64_t */
GDL__OSFN int64_t gdl__il_load(volatile void *p, size_t size) {
    if (size == 8) return (int64_t)InterlockedOr64((volatile LONG64 *)p, 0);
    return (int64_t)InterlockedOr((volatile LONG *)p, 0);
}
GDL__OSFN void gdl__il_store(volatile void *p, size_t size, int64_t v) {
    if (size == 8) (void)InterlockedExchange64((volatile LONG64 *)p, (LONG64)v);
    else (void)InterlockedExchange((volatile LONG *)p, (LONG)v);
}
GDL__OSFN int64_t gdl__il_add(volatile void *p, size_t size, int64_t v) {
    if (size == 8) return (int64_t)InterlockedExchangeAdd64((volatile LONG64 *)p, (LONG64)v) + v;
    return (int64_t)(LONG)((LONG)InterlockedExchangeAdd((volatile LONG *)p, (LONG)v) + (LONG)v);
}
GDL__OSFN int gdl__il_cas(volatile void *p, size_t size, void *expected, int64_t desired) {
    if (size == 8) {
        LONG64 e, seen;
        memcpy(&e, expected, 8);
        if ((seen = InterlockedCompareExchange64((volatile LONG64 *)p, (LONG64)desired, e)) == e) return 1;
        memcpy(expected, &seen, 8);
    } else {
        LONG e, seen;
        memcpy(&e, expected, 4);
        if ((seen = InterlockedCompareExchange((volatile LONG *)p, (LONG)desired, e)) == e) return 1;
        memcpy(expected, &seen, 4);
    }
    return 0;
}
#define gdl__atomic_load(p, mo) ((void)(mo), gdl__il_load((volatile void *)(p), sizeof *(p)))
#define gdl__atomic_store(p, v, mo) ((void)(mo), gdl__il_store((volatile void *)(p), sizeof *(p), (int64_t)(v)))
#define gdl__atomic_add(p, v, mo) ((void)(mo), gdl__il_add((volatile void *)(p), sizeof *(p), (int64_t)(v)))
#define gdl__atomic_cas(p, expected, desired, weak, mo_ok, mo_fail) \
    ((void)(weak), (void)(mo_ok), (void)(mo_fail),                  \
     gdl__il_cas((volatile void *)(p), sizeof *(p), (void *)(expected), (int64_t)(desired)))
#endif

/* a spin-wait's pause */
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define GDL__CPU_PAUSE() __builtin_ia32_pause()
#elif (defined(__GNUC__) || defined(__clang__)) && (defined(__aarch64__) || defined(__arm__))
#define GDL__CPU_PAUSE() __asm__ __volatile__("yield")
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
#define GDL__CPU_PAUSE() _mm_pause()
#elif defined(_MSC_VER) && (defined(_M_ARM64) || defined(_M_ARM))
#define GDL__CPU_PAUSE() __yield()
#else
#define GDL__CPU_PAUSE() ((void)0)
#endif

/* ---- threads, mutexes, condition variables, once ----
   Defined unless GPUDL_NO_THREADS. gdl__thread_start runs fn(arg) on a new thread: 0, or an errno value.
   *t must stay where it is until the thread is joined (Windows' start reads fn and arg from it). */
#if !defined(GPUDL_NO_THREADS) && defined(GDL__OS_POSIX)
#define GDL__OS_THREADS 1
typedef pthread_t gdl__thread;
typedef pthread_mutex_t gdl__mutex;
typedef pthread_cond_t gdl__cond;
typedef pthread_once_t gdl__once_flag;
#define GDL__MUTEX_INIT PTHREAD_MUTEX_INITIALIZER
#define GDL__COND_INIT PTHREAD_COND_INITIALIZER
#define GDL__ONCE_INIT PTHREAD_ONCE_INIT
GDL__OSFN int gdl__thread_start(gdl__thread *t, void *(*fn)(void *), void *arg) {
    return pthread_create(t, NULL, fn, arg);
}
GDL__OSFN void gdl__thread_join(gdl__thread *t) { pthread_join(*t, NULL); }
GDL__OSFN int gdl__mutex_init(gdl__mutex *m) { return pthread_mutex_init(m, NULL); }
GDL__OSFN void gdl__mutex_destroy(gdl__mutex *m) { pthread_mutex_destroy(m); }
GDL__OSFN void gdl__mutex_lock(gdl__mutex *m) { pthread_mutex_lock(m); }
GDL__OSFN void gdl__mutex_unlock(gdl__mutex *m) { pthread_mutex_unlock(m); }
GDL__OSFN int gdl__cond_init(gdl__cond *c) { return pthread_cond_init(c, NULL); }
GDL__OSFN void gdl__cond_destroy(gdl__cond *c) { pthread_cond_destroy(c); }
GDL__OSFN void gdl__cond_wait(gdl__cond *c, gdl__mutex *m) { pthread_cond_wait(c, m); }
GDL__OSFN void gdl__cond_signal(gdl__cond *c) { pthread_cond_signal(c); }
GDL__OSFN void gdl__cond_broadcast(gdl__cond *c) { pthread_cond_broadcast(c); }
GDL__OSFN void gdl__once(gdl__once_flag *o, void (*fn)(void)) { pthread_once(o, fn); }
/* fn runs in the child of a fork() */
GDL__OSFN void gdl__os_after_fork(void (*fn)(void)) { pthread_atfork(NULL, NULL, fn); }
#elif !defined(GPUDL_NO_THREADS) && defined(GDL__OS_WIN)
#define GDL__OS_THREADS 1
typedef struct {
    HANDLE h;
    void *(*fn)(void *);
    void *arg;
} gdl__thread;
typedef SRWLOCK gdl__mutex;
typedef CONDITION_VARIABLE gdl__cond;
typedef INIT_ONCE gdl__once_flag;
#define GDL__MUTEX_INIT SRWLOCK_INIT
#define GDL__COND_INIT CONDITION_VARIABLE_INIT
#define GDL__ONCE_INIT INIT_ONCE_STATIC_INIT
GDL__OSFN unsigned __stdcall gdl__thread_entry(void *p) {
    gdl__thread *t = (gdl__thread *)p;
    (void)t->fn(t->arg);
    return 0;
}
GDL__OSFN int gdl__thread_start(gdl__thread *t, void *(*fn)(void *), void *arg) {
    t->fn = fn;
    t->arg = arg;
    t->h = (HANDLE)_beginthreadex(NULL, 0, gdl__thread_entry, t, 0, NULL);
    return t->h ? 0 : errno ? errno : EAGAIN;
}
GDL__OSFN void gdl__thread_join(gdl__thread *t) {
    WaitForSingleObject(t->h, INFINITE);
    CloseHandle(t->h);
}
GDL__OSFN int gdl__mutex_init(gdl__mutex *m) {
    InitializeSRWLock(m);
    return 0;
}
GDL__OSFN void gdl__mutex_destroy(gdl__mutex *m) { (void)m; } /* an SRW lock holds no resources */
GDL__OSFN void gdl__mutex_lock(gdl__mutex *m) { AcquireSRWLockExclusive(m); }
GDL__OSFN void gdl__mutex_unlock(gdl__mutex *m) { ReleaseSRWLockExclusive(m); }
GDL__OSFN int gdl__cond_init(gdl__cond *c) {
    InitializeConditionVariable(c);
    return 0;
}
GDL__OSFN void gdl__cond_destroy(gdl__cond *c) { (void)c; }
GDL__OSFN void gdl__cond_wait(gdl__cond *c, gdl__mutex *m) { SleepConditionVariableSRW(c, m, INFINITE, 0); }
GDL__OSFN void gdl__cond_signal(gdl__cond *c) { WakeConditionVariable(c); }
GDL__OSFN void gdl__cond_broadcast(gdl__cond *c) { WakeAllConditionVariable(c); }
typedef struct {
    void (*fn)(void);
} gdl__once_call;
GDL__OSFN BOOL CALLBACK gdl__once_entry(PINIT_ONCE o, PVOID p, PVOID *ctx) {
    (void)o, (void)ctx;
    ((const gdl__once_call *)p)->fn();
    return TRUE;
}
GDL__OSFN void gdl__once(gdl__once_flag *o, void (*fn)(void)) {
    gdl__once_call c;
    c.fn = fn;
    InitOnceExecuteOnce(o, gdl__once_entry, &c, NULL);
}
GDL__OSFN void gdl__os_after_fork(void (*fn)(void)) { (void)fn; } /* no fork() on Windows */
#endif

/* ---- clocks, sleeping ---- */

/* wall-clock seconds (gdl_now): microseconds on POSIX, 100 ns on Windows, else clock() */
GDL__OSFN double gdl__os_wall_seconds(void) {
#if defined(GDL__OS_POSIX)
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
#elif defined(GDL__OS_WIN)
    FILETIME ft;
    ULARGE_INTEGER u;
    GetSystemTimeAsFileTime(&ft);
    u.LowPart = ft.dwLowDateTime;
    u.HighPart = ft.dwHighDateTime;
    return (double)(u.QuadPart - 116444736000000000ULL) * 1e-7; /* 100 ns since 1601 -> s since 1970 */
#else
    return (double)clock() / CLOCKS_PER_SEC;
#endif
}

/* monotonic seconds with nanoseconds where the platform offers it (POSIX's CLOCK_MONOTONIC, which a
   bare -std=c99 hides; Windows' performance counter); -1 where not */
GDL__OSFN double gdl__os_monotonic_seconds(void) {
#if defined(GDL__OS_POSIX) && defined(CLOCK_MONOTONIC)
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) == 0) return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#elif defined(GDL__OS_WIN)
    LARGE_INTEGER c, f;
    if (QueryPerformanceCounter(&c) && QueryPerformanceFrequency(&f) && f.QuadPart > 0)
        return (double)c.QuadPart / (double)f.QuadPart;
#endif
    return -1;
}

/* sleeps ms milliseconds; 0: gives the CPU to another thread */
GDL__OSFN void gdl__os_sleep_ms(int ms) {
#if defined(GDL__OS_POSIX)
    if (ms > 0) poll(NULL, 0, ms);
    else sched_yield();
#elif defined(GDL__OS_WIN)
    if (ms > 0) Sleep((DWORD)ms);
    else SwitchToThread();
#else
    (void)ms;
#endif
}

/* ---- the CPU count ----
   The CPUs this process may run on: its affinity on Linux (glibc) and Windows (the first 64: one
   processor group), else the online CPUs; 0 when unknown. */
/* Asks Linux for the tile data state of AMX (the bf16 precision's GEMMs and convolutions, src/cpu/gemm.h):
   0 when granted (Linux 5.16 and later, a CPU that has it), -1 elsewhere. */
GDL__OSFN int gdl__os_amx_grant(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0 ? 0 : -1;
#else
    return -1;
#endif
}

GDL__OSFN long gdl__os_cpu_count(void) {
    long n = 0;
#if defined(GDL__OS_POSIX)
#if defined(__linux__) && defined(__GLIBC__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const unsigned char *b = (const unsigned char *)&set;
        size_t i;
        for (i = 0; i < sizeof set; i++) n += __builtin_popcount(b[i]);
    }
#endif
#ifdef _SC_NPROCESSORS_ONLN /* macOS hides it under a strict _POSIX_C_SOURCE */
    if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
#endif
#elif defined(GDL__OS_WIN)
    DWORD_PTR mine, sys;
    if (GetProcessAffinityMask(GetCurrentProcess(), &mine, &sys))
        for (; mine; mine &= mine - 1) n++;
    if (n <= 0) {
        SYSTEM_INFO si;
        GetSystemInfo(&si);
        n = (long)si.dwNumberOfProcessors;
    }
#endif
    return n > 0 ? n : 0;
}

/* ---- processes ---- */

GDL__OSFN long gdl__os_pid(void) {
#if defined(GDL__OS_POSIX)
    return (long)getpid();
#elif defined(GDL__OS_WIN)
    return (long)GetCurrentProcessId();
#else
    return 0;
#endif
}

/* 1 when no process `pid` exists here for sure; 0 when it lives, or nobody can tell */
GDL__OSFN int gdl__os_pid_gone(long pid) {
#if defined(GDL__OS_POSIX)
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
#elif defined(GDL__OS_WIN)
    HANDLE h = OpenProcess(SYNCHRONIZE, FALSE, (DWORD)pid);
    int gone;
    if (!h) return GetLastError() == ERROR_INVALID_PARAMETER; /* no such process (else: not ours to open) */
    gone = WaitForSingleObject(h, 0) == WAIT_OBJECT_0;       /* it exited; a handle somewhere keeps its id */
    CloseHandle(h);
    return gone;
#else
    (void)pid;
    return 0;
#endif
}

/* ---- directory listing: gdl__dir_open (0 / -1), gdl__dir_next (a name, "." and ".." included; NULL at
   the end), gdl__dir_close ---- */
typedef struct {
#if defined(GDL__OS_POSIX)
    DIR *d;
#elif defined(GDL__OS_WIN)
    HANDLE h;
    WIN32_FIND_DATAA e;
    int pending; /* e holds an entry not yet returned (FindFirstFile's) */
#else
    int none;
#endif
} gdl__dir;

GDL__OSFN int gdl__dir_open(gdl__dir *d, const char *path) {
#if defined(GDL__OS_POSIX)
    return (d->d = opendir(path)) ? 0 : -1;
#elif defined(GDL__OS_WIN)
    char pattern[4200];
    if (strlen(path) + 3 > sizeof pattern) return -1;
    snprintf(pattern, sizeof pattern, "%s\\*", path);
    d->h = FindFirstFileA(pattern, &d->e);
    d->pending = 1;
    return d->h == INVALID_HANDLE_VALUE ? -1 : 0;
#else
    (void)d, (void)path;
    return -1;
#endif
}
GDL__OSFN const char *gdl__dir_next(gdl__dir *d) {
#if defined(GDL__OS_POSIX)
    struct dirent *e = readdir(d->d);
    return e ? e->d_name : NULL;
#elif defined(GDL__OS_WIN)
    if (!d->pending && !FindNextFileA(d->h, &d->e)) return NULL;
    d->pending = 0;
    return d->e.cFileName;
#else
    (void)d;
    return NULL;
#endif
}
GDL__OSFN void gdl__dir_close(gdl__dir *d) {
#if defined(GDL__OS_POSIX)
    closedir(d->d);
#elif defined(GDL__OS_WIN)
    FindClose(d->h);
#else
    (void)d;
#endif
}

/* ---- files ---- */

/* 0, or -1 with errno (EEXIST when it is there already); 0 where directories cannot be made from here */
GDL__OSFN int gdl__os_mkdir(const char *path) {
#if defined(GDL__OS_POSIX)
    return mkdir(path, 0777);
#elif defined(GDL__OS_WIN)
    return _mkdir(path);
#else
    (void)path;
    return 0;
#endif
}

GDL__OSFN int gdl__os_isatty(FILE *f) {
#if defined(GDL__OS_POSIX)
    return isatty(fileno(f));
#elif defined(GDL__OS_WIN)
    return _isatty(_fileno(f));
#else
    (void)f;
    return 0;
#endif
}

/* f's data on the disk (after fflush): 0 / -1 with errno */
GDL__OSFN int gdl__os_fsync(FILE *f) {
#if defined(GDL__OS_POSIX)
    int fd = fileno(f);
    return fd < 0 ? -1 : fsync(fd);
#elif defined(GDL__OS_WIN)
    return _commit(_fileno(f));
#else
    (void)f; /* fflush already done; no portable fsync */
    return 0;
#endif
}

/* A file opened for reading ("rb"). On Windows with FILE_SHARE_DELETE too, so that others may delete or
   rename it meanwhile. Windows (and Wine) still refuse to replace a file that is open: a save over a
   checkpoint being read fails there with "cannot rename", the old file intact (tests/test_platform.c). */
GDL__OSFN FILE *gdl__os_fopen_read(const char *path) {
#if defined(GDL__OS_WIN)
    HANDLE h = CreateFileA(path, GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                           OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    int fd;
    FILE *f;
    if (h == INVALID_HANDLE_VALUE) {
        DWORD e = GetLastError();
        errno = e == ERROR_FILE_NOT_FOUND || e == ERROR_PATH_NOT_FOUND ? ENOENT
              : e == ERROR_ACCESS_DENIED || e == ERROR_SHARING_VIOLATION ? EACCES : EIO;
        return NULL;
    }
    if ((fd = _open_osfhandle((intptr_t)h, _O_RDONLY | _O_BINARY)) < 0) {
        CloseHandle(h);
        return NULL;
    }
    if (!(f = _fdopen(fd, "rb"))) _close(fd);
    return f;
#else
    return fopen(path, "rb");
#endif
}

/* Replaces `to` by `from` in one step: a reader sees the old file or the new one, never a mix or
   none. POSIX: rename. Windows: MoveFileExW with MOVEFILE_REPLACE_EXISTING (rename refuses an existing
   target there), write-through; the names are converted as fopen converts them (the ANSI code page:
   UTF-8 where the program declares it). 0, or -1 with errno. */
GDL__OSFN int gdl__os_replace(const char *from, const char *to) {
#if defined(GDL__OS_WIN)
    wchar_t wf[4096], wt[4096];
    DWORD e;
    if (!MultiByteToWideChar(CP_ACP, 0, from, -1, wf, 4096) || !MultiByteToWideChar(CP_ACP, 0, to, -1, wt, 4096)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (MoveFileExW(wf, wt, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH)) return 0;
    e = GetLastError();
    errno = e == ERROR_FILE_NOT_FOUND || e == ERROR_PATH_NOT_FOUND ? ENOENT
          : e == ERROR_ACCESS_DENIED || e == ERROR_SHARING_VIOLATION || e == ERROR_LOCK_VIOLATION ? EACCES
          : e == ERROR_NOT_SAME_DEVICE ? EXDEV : EIO;
    return -1;
#else
    return rename(from, to);
#endif
}

/* A save writes to a temporary next to its target (gdl__os_create_temporary), and replaces the
   target with it (gdl__os_replace). While it writes, the temporary is locked, so that a later process
   that finds it (gdl__os_remove_if_unlocked) leaves a live writer's file alone: on POSIX an advisory
   write lock, which the kernel drops when the writer dies (no lock taken: NFS without lockd; harmless);
   on Windows nothing is needed, since a file open in stdio's sharing mode cannot be deleted. */
GDL__OSFN void gdl__os_lock_temporary(FILE *f) {
#if defined(GDL__OS_POSIX)
    struct flock lk;
    memset(&lk, 0, sizeof lk);
    lk.l_type = F_WRLCK;
    lk.l_whence = SEEK_SET;
    (void)fcntl(fileno(f), F_SETLK, &lk);
#else
    (void)f;
#endif
}
GDL__OSFN void gdl__os_remove_if_unlocked(const char *path) {
#if defined(GDL__OS_POSIX)
    struct flock lk;
    int fd = open(path, O_RDWR);
    if (fd < 0) return;
    memset(&lk, 0, sizeof lk);
    lk.l_type = F_WRLCK;
    lk.l_whence = SEEK_SET;
    if (fcntl(fd, F_SETLK, &lk) == 0) remove(path); /* nobody writes it */
    close(fd);
#else
    remove(path); /* fails while its writer has it open */
#endif
}

/* ---- hostile files: a save's temporary under a name nobody can guess; regular files only ---- */

/* n bytes of the operating system's random source (/dev/urandom; RtlGenRandom on Windows): 0, or -1 with
   errno (none there: a chroot without /dev, ...) */
GDL__OSFN int gdl__os_random(void *buf, size_t n) {
#if defined(GDL__OS_POSIX)
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got;
    if (!f) return -1;
    setvbuf(f, NULL, _IONBF, 0); /* no buffer of its bytes left behind in memory */
    got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) errno = EIO;
    return got == n ? 0 : -1;
#elif defined(GDL__OS_WIN)
    typedef BOOLEAN(WINAPI * gen_fn)(PVOID, ULONG);
    HMODULE h = LoadLibraryA("advapi32.dll");
    FARPROC f = h ? GetProcAddress(h, "SystemFunction036") : NULL; /* RtlGenRandom */
    gen_fn gen;
    int ok;
    if (!f) {
        if (h) FreeLibrary(h);
        errno = ENOSYS;
        return -1;
    }
    memcpy(&gen, &f, sizeof gen); /* ISO C has no cast between unrelated function pointers */
    ok = n <= 0xffffffffu && gen(buf, (ULONG)n);
    FreeLibrary(h);
    if (!ok) errno = EIO;
    return ok ? 0 : -1;
#else
    (void)buf, (void)n;
    errno = ENOSYS;
    return -1;
#endif
}

#if defined(GDL__OS_POSIX) && !defined(__cplusplus) && !defined(__APPLE__)
FILE *fdopen(int fd, const char *mode); /* POSIX; hidden by a bare -std=c99 (the declaration is identical) */
#endif

/* Every save (safetensors, checkpoints, gdl_fit's CSV, quantized models, vocabularies, the C exporter)
   writes a temporary next to path and renames it over path (gdl__os_replace). The temporary is
   path.tmp.<pid>.<16 hex digits from gdl__os_random>, created new: O_CREAT|O_EXCL|O_NOFOLLOW on POSIX,
   CREATE_NEW with FILE_FLAG_OPEN_REPARSE_POINT on Windows. A name planted there beforehand (a symlink to
   someone's file) makes the open fail, so it is never followed or written through; the random part makes
   such a plant hopeless anyway, and another try takes a fresh name. The mode is the one fopen gives
   (0666 less the umask). The file is locked while written (gdl__os_lock_temporary). tmp (cap bytes,
   strlen(path) + 64 suffice) receives the name. Without a random source (a chroot without /dev) the
   suffix comes from the clocks: guessable, but O_EXCL still refuses whatever is planted. The stream
   ("wb", or "w" for text), or NULL with errno. */
GDL__OSFN FILE *gdl__os_create_temporary(const char *path, char *tmp, size_t cap, const char *mode) {
    static unsigned counter = 0;
    int attempt;
    FILE *f = NULL;
    for (attempt = 0; attempt < 16; attempt++) {
        unsigned char r[8];
        unsigned long long x = 0;
        int i, n;
        if (gdl__os_random(r, sizeof r) < 0) {
            double us = gdl__os_wall_seconds() * 1e6; /* about 1.8e15 now: far inside the type's range */
            unsigned long long c = (us >= 0 && us < 1e18 ? (unsigned long long)us : 0) ^
                                   (unsigned long long)++counter * 0x9e3779b97f4a7c15ull;
            for (i = 0; i < 8; i++) r[i] = (unsigned char)(c >> (8 * i));
        }
        for (i = 0; i < 8; i++) x = x << 8 | r[i];
        n = snprintf(tmp, cap, "%s.tmp.%ld.%016llx", path, gdl__os_pid(), x);
        if (n < 0 || (size_t)n >= cap) {
            errno = ENAMETOOLONG;
            return NULL;
        }
        {
#if defined(GDL__OS_POSIX)
            int flags = O_WRONLY | O_CREAT | O_EXCL, fd;
#if defined(O_NOFOLLOW)
            flags |= O_NOFOLLOW;
#elif defined(__O_NOFOLLOW) /* glibc under a bare -std=c99 hides the name, not the flag */
            flags |= __O_NOFOLLOW;
#endif
#if defined(O_CLOEXEC)
            flags |= O_CLOEXEC;
#elif defined(__O_CLOEXEC)
            flags |= __O_CLOEXEC;
#endif
            do fd = open(tmp, flags, 0666);
            while (fd < 0 && errno == EINTR);
            if (fd < 0) {
                if (errno == EEXIST) continue;
                return NULL;
            }
            if (!(f = fdopen(fd, mode))) {
                int e = errno;
                close(fd);
                remove(tmp);
                errno = e;
                return NULL;
            }
#elif defined(GDL__OS_WIN)
            HANDLE h = CreateFileA(tmp, GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE, NULL, CREATE_NEW,
                                   FILE_ATTRIBUTE_NORMAL | FILE_FLAG_OPEN_REPARSE_POINT, NULL);
            int fd;
            if (h == INVALID_HANDLE_VALUE) {
                DWORD e = GetLastError();
                if (e == ERROR_FILE_EXISTS || e == ERROR_ALREADY_EXISTS) continue;
                errno = e == ERROR_PATH_NOT_FOUND || e == ERROR_FILE_NOT_FOUND ? ENOENT
                      : e == ERROR_ACCESS_DENIED || e == ERROR_SHARING_VIOLATION ? EACCES : EIO;
                return NULL;
            }
            if ((fd = _open_osfhandle((intptr_t)h, _O_WRONLY | (mode[1] == 'b' ? _O_BINARY : _O_TEXT))) < 0) {
                CloseHandle(h);
                DeleteFileA(tmp);
                errno = EIO;
                return NULL;
            }
            if (!(f = _fdopen(fd, mode))) {
                _close(fd);
                DeleteFileA(tmp);
                errno = EIO;
                return NULL;
            }
#else
            FILE *probe = fopen(tmp, "rb"); /* no exclusive create in ISO C before C11's "wx" */
            if (probe) {
                fclose(probe);
                continue;
            }
            if (!(f = fopen(tmp, mode))) return NULL;
#endif
        }
        gdl__os_lock_temporary(f); /* held until the file is closed: see gdl__os_remove_if_unlocked */
        return f;
    }
    errno = EEXIST;
    return NULL;
}

/* What path is, following symlinks: 1 a regular file, 2 a directory, 0 anything else (a FIFO, a device,
   a socket), -1 with errno when it cannot be told (gone, no permission). Readers of a directory's files
   take the regular ones only: a FIFO would block them, a link to /dev/zero feed them for ever. */
GDL__OSFN int gdl__os_file_kind(const char *path) {
#if defined(GDL__OS_POSIX)
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    return S_ISREG(st.st_mode) ? 1 : S_ISDIR(st.st_mode) ? 2 : 0;
#elif defined(GDL__OS_WIN)
    DWORD a = GetFileAttributesA(path);
    if (a == INVALID_FILE_ATTRIBUTES) {
        errno = ENOENT;
        return -1;
    }
    return a & FILE_ATTRIBUTE_DIRECTORY ? 2 : a & FILE_ATTRIBUTE_DEVICE ? 0 : 1;
#else
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fclose(f);
    return 1;
#endif
}

/* path opened for reading ("rb") if it is a regular file when opened (checked on the open file, so a
   name swapped for a FIFO meanwhile is still refused): the stream and *size, its size then. POSIX opens
   with O_NONBLOCK, so that a FIFO cannot block the open, and clears it after the check. NULL with errno;
   EINVAL: not a regular file. */
GDL__OSFN FILE *gdl__os_fopen_regular(const char *path, uint64_t *size) {
#if defined(GDL__OS_POSIX)
    struct stat st;
    FILE *f;
    int fd, flags = O_RDONLY | O_NONBLOCK;
#ifdef O_CLOEXEC
    flags |= O_CLOEXEC;
#endif
    do fd = open(path, flags);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) return NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0 ||
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
        int e = errno;
        if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) e = EINVAL;
        close(fd);
        errno = e;
        return NULL;
    }
    if (!(f = fdopen(fd, "rb"))) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    *size = (uint64_t)st.st_size;
    return f;
#else
    FILE *f;
    long end;
    if (gdl__os_file_kind(path) != 1) {
        if (errno != ENOENT) errno = EINVAL;
        return NULL;
    }
#if defined(GDL__OS_WIN)
    f = gdl__os_fopen_read(path);
#else
    f = fopen(path, "rb");
#endif
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (end = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        errno = EINVAL;
        return NULL;
    }
    *size = (uint64_t)end;
    return f;
#endif
}
/* ---- (end of hostile files) ---- */

/* ---- dynamic loading (NVML): gdl__dl_open (NULL + why), gdl__dl_sym (the symbol's address as an
   object pointer: the caller memcpys it into a function pointer), gdl__dl_close. GDL__OS_DL where it
   exists. gdl__dl_open takes a system library's bare name (Windows: looked for in the system directory
   only, never the current one) or an absolute path (gdl__dl_absolute). gdl__os_secure_exec: the process
   runs with privileges its user lacks (setuid, setgid), where the environment must not pick a library.
   ---- */
#if defined(GDL__OS_POSIX) && (defined(GPUDL_CUDA) || defined(GPUDL_NVML))
#define GDL__OS_DL 1
#define GDL__NVML_DEFAULT_LIB "libnvidia-ml.so.1"
GDL__OSFN int gdl__dl_absolute(const char *path) { return path[0] == '/'; }
GDL__OSFN int gdl__os_secure_exec(void) { return getuid() != geteuid() || getgid() != getegid(); }
GDL__OSFN void *gdl__dl_open(const char *name, char *why, size_t why_size) {
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, why_size, "%s", e ? e : name);
    }
    return h;
}
GDL__OSFN void *gdl__dl_sym(void *h, const char *sym) { return dlsym(h, sym); }
GDL__OSFN void gdl__dl_close(void *h) { dlclose(h); }
#elif defined(GDL__OS_WIN) && (defined(GPUDL_CUDA) || defined(GPUDL_NVML))
#define GDL__OS_DL 1
#define GDL__NVML_DEFAULT_LIB "nvml.dll"
#ifndef LOAD_LIBRARY_SEARCH_SYSTEM32
#define LOAD_LIBRARY_SEARCH_SYSTEM32 0x00000800
#endif
GDL__OSFN int gdl__dl_absolute(const char *p) {
    return ((p[0] | 32) >= 'a' && (p[0] | 32) <= 'z' && p[1] == ':' && (p[2] == '\\' || p[2] == '/')) ||
           ((p[0] == '\\' || p[0] == '/') && (p[1] == '\\' || p[1] == '/'));
}
GDL__OSFN int gdl__os_secure_exec(void) { return 0; }
GDL__OSFN void *gdl__dl_open(const char *name, char *why, size_t why_size) {
    HMODULE h = gdl__dl_absolute(name) ? LoadLibraryExA(name, NULL, 0)
                                       : LoadLibraryExA(name, NULL, LOAD_LIBRARY_SEARCH_SYSTEM32);
    if (!h) snprintf(why, why_size, "%s: LoadLibrary failed, error %lu", name, (unsigned long)GetLastError());
    return (void *)h;
}
GDL__OSFN void *gdl__dl_sym(void *h, const char *sym) {
    FARPROC f = GetProcAddress((HMODULE)h, sym);
    void *p;
    memcpy(&p, &f, sizeof p); /* ISO C has no cast between function and object pointers */
    return p;
}
GDL__OSFN void gdl__dl_close(void *h) { FreeLibrary((HMODULE)h); }
#endif

/* ---- sockets: TCP for the rendezvous (src/dist/), where GDL__OS_SOCKETS is defined ----
   gdl__sock is a connection or a listening socket (an int on POSIX, a SOCKET on Windows). Deadlines are
   gdl_now seconds (gdl__os_wall_seconds); an infinite one waits for ever. Errors are -1 with errno set to
   POSIX's codes (Winsock's WSAE... codes are mapped onto the same names: ECONNREFUSED, ETIMEDOUT...);
   gdl__os_sock_strerror words them, also where the C library has no text for them (Windows).
   Connections are blocking, closed on exec (POSIX) and not inherited (Windows). */
#if defined(GDL__OS_SOCKETS)
#if defined(GDL__OS_POSIX)
typedef int gdl__sock;
#define GDL__SOCK_NONE (-1)
#if !defined(AI_PASSIVE) /* getaddrinfo: POSIX 2001, hidden by a bare -std=c99 */
#define GDL__OS_SOCK_NUMERIC_ONLY 1 /* numeric IPv4 addresses and "localhost" only */
#endif
#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0 /* macOS: SO_NOSIGPIPE on the socket instead */
#endif
#else
typedef SOCKET gdl__sock;
#define GDL__SOCK_NONE INVALID_SOCKET
#endif

/* a port into / out of a sockaddr_in, in network byte order without htons (a ws2_32 function on Windows) */
GDL__OSFN void gdl__os_sock_put_port(struct sockaddr_in *sa, int port) {
    unsigned char *b = (unsigned char *)&sa->sin_port;
    b[0] = (unsigned char)(port >> 8), b[1] = (unsigned char)port;
}
GDL__OSFN int gdl__os_sock_get_port(const struct sockaddr_in *sa) {
    const unsigned char *b = (const unsigned char *)&sa->sin_port;
    return b[0] << 8 | b[1];
}

/* a wait's milliseconds for `left` seconds: at most an hour at a time (the callers wait again while time
   is left), so a long or infinite deadline never overflows an int */
GDL__OSFN int gdl__os_sock_wait_ms(double left) {
    return left >= 3600 ? 3600000 : left <= 0 ? 0 : (int)(left * 1000) + 1;
}

#if defined(GDL__OS_WIN)
/* Winsock 2, loaded from ws2_32.dll at the first socket call (once; WSAStartup then): a program that
   never meets the rendezvous needs no -lws2_32, and the header stays one to drop in. Waits use
   select(), not WSAPoll, which does not report a refused connect on Windows before 10 2004. The sets
   hold one socket and are read by their count: FD_ISSET is a ws2_32 function under MSVC. */
typedef struct {
    int err; /* 0: loaded and started; else the errno of the failure */
    int(WSAAPI *startup)(WORD, LPWSADATA);
    int(WSAAPI *last_error)(void);
    SOCKET(WSAAPI *socket_)(int, int, int);
    int(WSAAPI *close_)(SOCKET);
    int(WSAAPI *getsockopt_)(SOCKET, int, int, char *, int *);
    int(WSAAPI *getsockname_)(SOCKET, struct sockaddr *, int *);
    int(WSAAPI *bind_)(SOCKET, const struct sockaddr *, int);
    int(WSAAPI *listen_)(SOCKET, int);
    SOCKET(WSAAPI *accept_)(SOCKET, struct sockaddr *, int *);
    int(WSAAPI *connect_)(SOCKET, const struct sockaddr *, int);
    int(WSAAPI *send_)(SOCKET, const char *, int, int);
    int(WSAAPI *recv_)(SOCKET, char *, int, int);
    int(WSAAPI *select_)(int, fd_set *, fd_set *, fd_set *, const struct timeval *);
    int(WSAAPI *ioctl_)(SOCKET, long, u_long *);
    int(WSAAPI *getaddrinfo_)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
    void(WSAAPI *freeaddrinfo_)(struct addrinfo *);
} gdl__ws_api;
static gdl__ws_api gdl__ws;

GDL__OSFN void gdl__ws_load(void) {
    static const struct {
        const char *name;
        size_t at; /* the field of gdl__ws that takes it */
    } fns[] = {{"WSAStartup", offsetof(gdl__ws_api, startup)},
               {"WSAGetLastError", offsetof(gdl__ws_api, last_error)},
               {"socket", offsetof(gdl__ws_api, socket_)},
               {"closesocket", offsetof(gdl__ws_api, close_)},
               {"getsockopt", offsetof(gdl__ws_api, getsockopt_)},
               {"getsockname", offsetof(gdl__ws_api, getsockname_)},
               {"bind", offsetof(gdl__ws_api, bind_)},
               {"listen", offsetof(gdl__ws_api, listen_)},
               {"accept", offsetof(gdl__ws_api, accept_)},
               {"connect", offsetof(gdl__ws_api, connect_)},
               {"send", offsetof(gdl__ws_api, send_)},
               {"recv", offsetof(gdl__ws_api, recv_)},
               {"select", offsetof(gdl__ws_api, select_)},
               {"ioctlsocket", offsetof(gdl__ws_api, ioctl_)},
               {"getaddrinfo", offsetof(gdl__ws_api, getaddrinfo_)},
               {"freeaddrinfo", offsetof(gdl__ws_api, freeaddrinfo_)}};
    HMODULE h = LoadLibraryA("ws2_32.dll");
    WSADATA wd;
    size_t i;
    gdl__ws.err = ENOSYS;
    if (!h) return;
    for (i = 0; i < sizeof fns / sizeof *fns; i++) {
        FARPROC f = GetProcAddress(h, fns[i].name);
        if (!f) return;
        /* every field is a function pointer of FARPROC's size; ISO C has no cast between unrelated ones */
        memcpy((char *)&gdl__ws + fns[i].at, &f, sizeof f);
    }
    gdl__ws.err = gdl__ws.startup(MAKEWORD(2, 2), &wd) == 0 ? 0 : ENOSYS;
}

/* 0 once Winsock is up; else -1 with errno (ENOSYS: no ws2_32.dll, or it would not start) */
GDL__OSFN int gdl__ws_ready(void) {
#if defined(GDL__OS_THREADS)
    static gdl__once_flag once = GDL__ONCE_INIT;
    gdl__once(&once, gdl__ws_load);
#else
    static int loaded;
    if (!loaded) gdl__ws_load(), loaded = 1;
#endif
    if (gdl__ws.err) errno = gdl__ws.err;
    return gdl__ws.err ? -1 : 0;
}

/* errno from Winsock's last error, returning -1 */
GDL__OSFN int gdl__ws_fail(int wsa) {
    switch (wsa) {
    case WSAECONNREFUSED: errno = ECONNREFUSED; break;
    case WSAETIMEDOUT: errno = ETIMEDOUT; break;
    case WSAEADDRINUSE: errno = EADDRINUSE; break;
    case WSAEADDRNOTAVAIL: errno = EADDRNOTAVAIL; break;
    case WSAEACCES: errno = EACCES; break;
    case WSAECONNRESET: errno = ECONNRESET; break;
    case WSAECONNABORTED: errno = ECONNABORTED; break;
    case WSAESHUTDOWN: errno = EPIPE; break;
    case WSAENETUNREACH: case WSAENETDOWN: errno = ENETUNREACH; break;
    case WSAEHOSTUNREACH: case WSAEHOSTDOWN: errno = EHOSTUNREACH; break;
    case WSAEWOULDBLOCK: errno = EWOULDBLOCK; break;
    case WSAEINPROGRESS: case WSAEALREADY: errno = EINPROGRESS; break;
    case WSAEINTR: errno = EINTR; break;
    case WSAEMFILE: errno = EMFILE; break;
    case WSAENOBUFS: errno = ENOBUFS; break;
    case WSAEAFNOSUPPORT: errno = EAFNOSUPPORT; break;
    case WSAEINVAL: errno = EINVAL; break;
    default: errno = EIO; break;
    }
    return -1;
}
#endif

/* what errno e says, for the socket errors too (Windows' C library has no text for ETIMEDOUT & co.) */
GDL__OSFN const char *gdl__os_sock_strerror(int e) {
#if defined(GDL__OS_WIN)
    switch (e) {
    case ECONNREFUSED: return "Connection refused";
    case ETIMEDOUT: return "Connection timed out";
    case EADDRINUSE: return "Address already in use";
    case EADDRNOTAVAIL: return "Cannot assign requested address";
    case ECONNRESET: return "Connection reset by peer";
    case ECONNABORTED: return "Software caused connection abort";
    case ENETUNREACH: return "Network is unreachable";
    case EHOSTUNREACH: return "No route to host";
    case ENOSYS: return "Winsock 2 (ws2_32.dll) is not available";
    default: break;
    }
#endif
    return strerror(e);
}

GDL__OSFN void gdl__os_sock_close(gdl__sock s) {
#if defined(GDL__OS_POSIX)
    close(s);
#else
    gdl__ws.close_(s);
#endif
}

/* a new TCP socket of family af, closed on exec / not inherited by child processes; GDL__SOCK_NONE + errno */
GDL__OSFN gdl__sock gdl__os_sock_new(int af) {
#if defined(GDL__OS_POSIX)
    gdl__sock s = socket(af, SOCK_STREAM, 0);
    if (s < 0) return GDL__SOCK_NONE;
    (void)fcntl(s, F_SETFD, FD_CLOEXEC);
#ifdef SO_NOSIGPIPE /* macOS, the BSDs: no MSG_NOSIGNAL; a write to a closed peer fails instead of a signal */
    {
        int one = 1;
        (void)setsockopt(s, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
    }
#endif
    return s;
#else
    gdl__sock s;
    if (gdl__ws_ready() < 0) return GDL__SOCK_NONE;
    if ((s = gdl__ws.socket_(af, SOCK_STREAM, IPPROTO_TCP)) == INVALID_SOCKET) {
        gdl__ws_fail(gdl__ws.last_error());
        return GDL__SOCK_NONE;
    }
    (void)SetHandleInformation((HANDLE)s, HANDLE_FLAG_INHERIT, 0);
    return s;
#endif
}

/* Waits until s is writable (out) or readable, or the deadline: 0, or -1 with errno (ETIMEDOUT). */
GDL__OSFN int gdl__os_sock_wait(gdl__sock s, int out, double deadline) {
    for (;;) {
        double left = deadline - gdl__os_wall_seconds();
        int r, ms;
#if defined(GDL__OS_POSIX)
        struct pollfd pf;
#else
        fd_set rw, ex;
        struct timeval tv;
#endif
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        ms = gdl__os_sock_wait_ms(left);
#if defined(GDL__OS_POSIX)
        pf.fd = s, pf.events = (short)(out ? POLLOUT : POLLIN), pf.revents = 0;
        if ((r = poll(&pf, 1, ms)) > 0) return 0;
        if (r < 0 && errno != EINTR) return -1;
#else
        rw.fd_count = ex.fd_count = 1; /* a connect that failed shows in ex */
        rw.fd_array[0] = ex.fd_array[0] = s;
        tv.tv_sec = ms / 1000, tv.tv_usec = ms % 1000 * 1000;
        if ((r = gdl__ws.select_(0, out ? NULL : &rw, out ? &rw : NULL, &ex, &tv)) > 0) return 0;
        if (r < 0) return gdl__ws_fail(gdl__ws.last_error());
#endif
    }
}

/* 1 when s can be read at once: for a connection that owes nothing more, its peer closed it */
GDL__OSFN int gdl__os_sock_readable(gdl__sock s) {
#if defined(GDL__OS_POSIX)
    struct pollfd pf;
    pf.fd = s, pf.events = POLLIN, pf.revents = 0;
    return poll(&pf, 1, 0) > 0;
#else
    fd_set rd;
    struct timeval tv = {0, 0};
    rd.fd_count = 1, rd.fd_array[0] = s;
    return gdl__ws.select_(0, &rd, NULL, NULL, &tv) > 0;
#endif
}

/* host's IPv4 address into sa->sin_addr (family and port untouched): 0, or -2 when host is no IPv4
   address (it does not resolve, or only to IPv6) */
GDL__OSFN int gdl__os_sock_ipv4(const char *host, struct sockaddr_in *sa) {
#if defined(GDL__OS_SOCK_NUMERIC_ONLY)
    in_addr_t a = !strcmp(host, "localhost") ? inet_addr("127.0.0.1") : inet_addr(host);
    if (a == (in_addr_t)-1) return -2;
    sa->sin_addr.s_addr = a;
    return 0;
#else
    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
#if defined(GDL__OS_POSIX)
    if (getaddrinfo(host, NULL, &hints, &res) != 0) return -2;
#else
    if (gdl__ws_ready() < 0 || gdl__ws.getaddrinfo_(host, NULL, &hints, &res) != 0) return -2;
#endif
    if ((size_t)res->ai_addrlen >= sizeof *sa)
        sa->sin_addr = ((const struct sockaddr_in *)(void *)res->ai_addr)->sin_addr;
#if defined(GDL__OS_POSIX)
    freeaddrinfo(res);
#else
    gdl__ws.freeaddrinfo_(res);
#endif
    return 0;
#endif
}

/* "a.b.c.d:port" of an IPv4 socket address into buf (len >= 22) */
GDL__OSFN void gdl__os_sock_addr_str(const struct sockaddr_in *sa, char *buf, size_t len) {
    const unsigned char *b = (const unsigned char *)&sa->sin_addr;
    snprintf(buf, len, "%u.%u.%u.%u:%d", b[0], b[1], b[2], b[3], gdl__os_sock_get_port(sa));
}

/* Waits until one of the n (at most GDL__OS_SOCK_POLL_MAX) sockets s[i] is writable (out[i]) or readable
   (a connection that closed or failed counts as readable: its read says so), or the deadline: the count
   of those ready, each marked in ready[i] (1 / 0); 0 at the deadline; -1 with errno. One wait for many
   connections: the rendezvous serves them all at once. */
#define GDL__OS_SOCK_POLL_MAX 128
GDL__OSFN int gdl__os_sock_poll(const gdl__sock *s, const unsigned char *out, unsigned char *ready, int n,
                                double deadline) {
    int i, r = 0;
    if (n < 0 || n > GDL__OS_SOCK_POLL_MAX) {
        errno = EINVAL;
        return -1;
    }
    for (;;) {
        double left = deadline - gdl__os_wall_seconds();
        int ms = gdl__os_sock_wait_ms(left);
#if defined(GDL__OS_POSIX)
        struct pollfd pf[GDL__OS_SOCK_POLL_MAX];
        for (i = 0; i < n; i++) pf[i].fd = s[i], pf[i].events = (short)(out[i] ? POLLOUT : POLLIN), pf[i].revents = 0;
        r = poll(pf, (nfds_t)n, left <= 0 ? 0 : ms);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        for (i = 0; i < n; i++) ready[i] = pf[i].revents != 0;
#else
        /* Winsock's select reads fd_count sockets from the array: a set larger than FD_SETSIZE (64) */
        struct {
            u_int fd_count;
            SOCKET fd_array[GDL__OS_SOCK_POLL_MAX];
        } rd, wr, ex;
        struct timeval tv;
        int k;
        rd.fd_count = wr.fd_count = ex.fd_count = 0;
        for (i = 0; i < n; i++) {
            if (out[i]) wr.fd_array[wr.fd_count++] = s[i];
            else rd.fd_array[rd.fd_count++] = s[i];
            ex.fd_array[ex.fd_count++] = s[i];
        }
        if (left <= 0) ms = 0;
        tv.tv_sec = ms / 1000, tv.tv_usec = ms % 1000 * 1000;
        r = n ? gdl__ws.select_(0, (fd_set *)(void *)&rd, (fd_set *)(void *)&wr, (fd_set *)(void *)&ex, &tv) : 0;
        if (!n) gdl__os_sleep_ms(ms);
        if (r < 0) return gdl__ws_fail(gdl__ws.last_error());
        for (i = 0; i < n; i++) { /* select leaves the ready sockets in each set */
            ready[i] = 0;
            for (k = 0; k < (int)rd.fd_count; k++) ready[i] |= !out[i] && rd.fd_array[k] == s[i];
            for (k = 0; k < (int)wr.fd_count; k++) ready[i] |= out[i] && wr.fd_array[k] == s[i];
            for (k = 0; k < (int)ex.fd_count; k++) ready[i] |= ex.fd_array[k] == s[i];
        }
#endif
        if (r > 0) {
            for (r = i = 0; i < n; i++) r += ready[i];
            return r;
        }
        if (left <= 0 || gdl__os_wall_seconds() >= deadline) return 0;
    }
}

/* One read of at most n bytes from s, which poll found readable (so it does not block): the count read
   (> 0); 0: the peer closed the connection; -1 with errno */
GDL__OSFN long gdl__os_sock_read_some(gdl__sock s, void *buf, size_t n) {
    long r;
    size_t want = n < 1u << 30 ? n : 1u << 30;
#if defined(GDL__OS_POSIX)
    do r = (long)recv(s, buf, want, 0);
    while (r < 0 && errno == EINTR);
#else
    r = gdl__ws.recv_(s, (char *)buf, (int)want, 0);
    if (r < 0) return gdl__ws_fail(gdl__ws.last_error());
#endif
    return r;
}

/* A listening TCP socket at port (0: one the system picks) on the IPv4 address host (NULL or "": every
   one): 0 and *out; -1 with errno (EADDRINUSE: another socket listens there; EADDRNOTAVAIL: host is not
   an address of this machine); -2: host is no IPv4 address. POSIX: SO_REUSEADDR, so that a port whose last
   job's connections linger in TIME_WAIT is free again. Windows: neither option; TIME_WAIT does not block
   a bind there by default, its SO_REUSEADDR would let two jobs share the port, and SO_EXCLUSIVEADDRUSE
   would keep the port blocked while connections linger. */
GDL__OSFN int gdl__os_sock_listen_at(gdl__sock *out, const char *host, int port, int backlog) {
    struct sockaddr_in sa;
    gdl__sock s;
    int e;
#if defined(GDL__OS_POSIX)
    const int one = 1;
#endif
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    gdl__os_sock_put_port(&sa, port);
    sa.sin_addr.s_addr = 0; /* INADDR_ANY */
    if (host && host[0] && gdl__os_sock_ipv4(host, &sa) != 0) return -2;
    if ((s = gdl__os_sock_new(AF_INET)) == GDL__SOCK_NONE) return -1;
#if defined(GDL__OS_POSIX)
    if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
        bind(s, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(s, backlog) == 0) {
        *out = s;
        return 0;
    }
    e = errno;
#else
    if (gdl__ws.bind_(s, (struct sockaddr *)&sa, sizeof sa) == 0 && gdl__ws.listen_(s, backlog) == 0) {
        *out = s;
        return 0;
    }
    gdl__ws_fail(gdl__ws.last_error());
    e = errno;
#endif
    gdl__os_sock_close(s);
    errno = e;
    return -1;
}

/* gdl__os_sock_listen_at on every IPv4 address */
GDL__OSFN int gdl__os_sock_listen(gdl__sock *out, int port, int backlog) {
    return gdl__os_sock_listen_at(out, NULL, port, backlog);
}

/* the local port of s; 0 when unknown */
GDL__OSFN int gdl__os_sock_port(gdl__sock s) {
    struct sockaddr_in sa;
#if defined(GDL__OS_POSIX)
    socklen_t len = sizeof sa;
    return getsockname(s, (struct sockaddr *)&sa, &len) == 0 ? gdl__os_sock_get_port(&sa) : 0;
#else
    int len = (int)sizeof sa;
    return gdl__ws.getsockname_(s, (struct sockaddr *)&sa, &len) == 0 ? gdl__os_sock_get_port(&sa) : 0;
#endif
}

/* A connection from the listening socket l (IPv4), waiting until the deadline: 0 and *out, the peer's
   "address:port" in peer (len >= 22; NULL: not wanted); or -1 with errno (ETIMEDOUT) */
GDL__OSFN int gdl__os_sock_accept_from(gdl__sock l, gdl__sock *out, char *peer, size_t len, double deadline) {
    gdl__sock s;
    struct sockaddr_in sa;
#if defined(GDL__OS_POSIX)
    socklen_t sl = sizeof sa;
#else
    int sl = (int)sizeof sa;
#endif
    memset(&sa, 0, sizeof sa);
    if (gdl__os_sock_wait(l, 0, deadline) < 0) return -1;
#if defined(GDL__OS_POSIX)
    if ((s = accept(l, (struct sockaddr *)&sa, &sl)) < 0) return -1;
    (void)fcntl(s, F_SETFD, FD_CLOEXEC);
#else
    if ((s = gdl__ws.accept_(l, (struct sockaddr *)&sa, &sl)) == INVALID_SOCKET)
        return gdl__ws_fail(gdl__ws.last_error());
    (void)SetHandleInformation((HANDLE)s, HANDLE_FLAG_INHERIT, 0);
#endif
    if (peer) gdl__os_sock_addr_str(&sa, peer, len);
    *out = s;
    return 0;
}

/* gdl__os_sock_accept_from without the peer's address */
GDL__OSFN int gdl__os_sock_accept(gdl__sock l, gdl__sock *out, double deadline) {
    return gdl__os_sock_accept_from(l, out, NULL, 0, deadline);
}

/* connect() that gives up at the deadline: a host that does not answer would otherwise hold a blocking
   connect for the kernel's SYN retries (minutes). s is blocking again afterwards. 0, or -1 with errno. */
GDL__OSFN int gdl__os_sock_connect_by(gdl__sock s, const struct sockaddr *sa, int len, double deadline) {
#if defined(GDL__OS_POSIX)
    int fl = fcntl(s, F_GETFL, 0), err = 0;
    socklen_t el = sizeof err;
    if (fl < 0 || fcntl(s, F_SETFL, fl | O_NONBLOCK) < 0) return connect(s, sa, (socklen_t)len);
    if (connect(s, sa, (socklen_t)len) != 0) {
        if (errno != EINPROGRESS || gdl__os_sock_wait(s, 1, deadline) < 0) return -1;
        if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el) != 0) return -1;
        if (err) {
            errno = err;
            return -1;
        }
    }
    (void)fcntl(s, F_SETFL, fl);
    return 0;
#else
    u_long on = 1, off = 0;
    int err = 0, el = (int)sizeof err;
    if (gdl__ws.ioctl_(s, (long)FIONBIO, &on) != 0) return gdl__ws_fail(gdl__ws.last_error());
    if (gdl__ws.connect_(s, sa, len) != 0) {
        int w = gdl__ws.last_error();
        if (w != WSAEWOULDBLOCK) return gdl__ws_fail(w);
        if (gdl__os_sock_wait(s, 1, deadline) < 0) return -1;
        if (gdl__ws.getsockopt_(s, SOL_SOCKET, SO_ERROR, (char *)&err, &el) != 0)
            return gdl__ws_fail(gdl__ws.last_error());
        if (err) return gdl__ws_fail(err);
    }
    if (gdl__ws.ioctl_(s, (long)FIONBIO, &off) != 0) return gdl__ws_fail(gdl__ws.last_error());
    return 0;
#endif
}

/* A TCP connection to host:port by the deadline: 0 and *out; -1 with errno; -2: host is no address (it
   does not resolve) */
GDL__OSFN int gdl__os_sock_connect(gdl__sock *out, const char *host, int port, double deadline) {
#if defined(GDL__OS_SOCK_NUMERIC_ONLY)
    struct sockaddr_in sa;
    gdl__sock s;
    int e;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    gdl__os_sock_put_port(&sa, port);
    sa.sin_addr.s_addr = !strcmp(host, "localhost") ? inet_addr("127.0.0.1") : inet_addr(host);
    if (sa.sin_addr.s_addr == (in_addr_t)-1) return -2;
    if ((s = gdl__os_sock_new(AF_INET)) == GDL__SOCK_NONE) return -1;
    if (gdl__os_sock_connect_by(s, (struct sockaddr *)&sa, (int)sizeof sa, deadline) != 0) {
        e = errno;
        gdl__os_sock_close(s);
        errno = e;
        return -1;
    }
    *out = s;
    return 0;
#else
    struct addrinfo hints, *res, *a;
    char ps[16];
    gdl__sock s = GDL__SOCK_NONE;
    int e = ECONNREFUSED;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(ps, sizeof ps, "%d", port);
#if defined(GDL__OS_POSIX)
    if (getaddrinfo(host, ps, &hints, &res) != 0) return -2;
#else
    if (gdl__ws_ready() < 0) return -1;
    if (gdl__ws.getaddrinfo_(host, ps, &hints, &res) != 0) return -2;
#endif
    for (a = res; a; a = a->ai_next) {
        if ((s = gdl__os_sock_new(a->ai_family)) == GDL__SOCK_NONE) continue;
        if (gdl__os_sock_connect_by(s, a->ai_addr, (int)a->ai_addrlen, deadline) == 0) break;
        e = errno;
        gdl__os_sock_close(s);
        s = GDL__SOCK_NONE;
    }
#if defined(GDL__OS_POSIX)
    freeaddrinfo(res);
#else
    gdl__ws.freeaddrinfo_(res);
#endif
    if (s == GDL__SOCK_NONE) {
        errno = e;
        return -1;
    }
    *out = s;
    return 0;
#endif
}

/* n bytes sent (out) or received on s before the deadline: 0, or -1 with errno (ETIMEDOUT; EPIPE: the
   peer closed the connection) */
GDL__OSFN int gdl__os_sock_io(gdl__sock s, void *buf, size_t n, int out, double deadline) {
    unsigned char *b = (unsigned char *)buf;
    size_t k = 0;
    while (k < n) {
        size_t want = n - k < 1u << 30 ? n - k : 1u << 30; /* Winsock counts in int */
        long r;
        if (gdl__os_sock_wait(s, out, deadline) < 0) return -1;
#if defined(GDL__OS_POSIX)
        r = (long)(out ? send(s, b + k, want, MSG_NOSIGNAL) : recv(s, b + k, want, 0));
        if (r < 0 && errno == EINTR) continue;
#else
        r = out ? gdl__ws.send_(s, (const char *)b + k, (int)want, 0) : gdl__ws.recv_(s, (char *)b + k, (int)want, 0);
        if (r < 0) return gdl__ws_fail(gdl__ws.last_error());
#endif
        if (r == 0) errno = EPIPE;
        if (r <= 0) return -1;
        k += (size_t)r;
    }
    return 0;
}
#endif
