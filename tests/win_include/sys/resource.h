/* sys/resource.h for the MinGW-w64 builds of the POSIX-written tests
   (tests/win_compat.h): Windows has no resource limits of this kind, so
   getrlimit and setrlimit fail with ENOSYS and a test that needs them skips. */
#ifndef GPUDL_WIN_SYS_RESOURCE_H
#define GPUDL_WIN_SYS_RESOURCE_H
#include <errno.h>
typedef unsigned long long rlim_t;
struct rlimit {
    rlim_t rlim_cur, rlim_max;
};
#define RLIMIT_FSIZE 1
static inline int getrlimit(int resource, struct rlimit *r) {
    (void)resource;
    r->rlim_cur = r->rlim_max = ~(rlim_t)0;
    return 0;
}
static inline int setrlimit(int resource, const struct rlimit *r) {
    (void)resource, (void)r;
    errno = ENOSYS;
    return -1;
}
#endif
