/* win_compat.h — force-included (-include) into the MinGW-w64 builds of the
   POSIX-written tests (test_formats, test_data) by tests/windows.mk: the few
   POSIX calls their scaffolding makes (temporary directories, mkdir with a
   mode, setenv), done with the C runtime's Windows equivalents. gpudl itself
   needs none of this: its own system calls go through src/runtime/platform.h.
   getrlimit / setrlimit (tests/win_include/sys/resource.h) fail there, so the
   file-size-limit test skips itself, as it does where setrlimit is refused. */
#ifndef GPUDL_WIN_COMPAT_H
#define GPUDL_WIN_COMPAT_H
#ifdef _WIN32
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <io.h>
#include <direct.h>
#include <process.h>
#include <sys/stat.h>
#include <unistd.h> /* MinGW's: rmdir, unlink, access */
#include <signal.h>

/* mkdir(path, mode): Windows has no modes */
#define mkdir(path, mode) _mkdir(path)

/* Windows has no SIGXFSZ; the one test that sets it ignores the signal only while a setrlimit that fails
   here would be in force, and restores the old handler */
#ifndef SIGXFSZ
#define SIGXFSZ SIGTERM
#endif

/* the template's trailing XXXXXX replaced by the process id and a counter until _mkdir succeeds */
static inline char *mkdtemp(char *tmpl) {
    static unsigned counter;
    size_t n = strlen(tmpl);
    int tries;
    if (n < 6 || strcmp(tmpl + n - 6, "XXXXXX") != 0) {
        errno = EINVAL;
        return NULL;
    }
    for (tries = 0; tries < 1000; tries++) {
        char six[16];
        snprintf(six, sizeof six, "%06u", (unsigned)(_getpid() * 131u + ++counter) % 1000000u);
        memcpy(tmpl + n - 6, six, 6);
        if (_mkdir(tmpl) == 0) return tmpl;
        if (errno != EEXIST) return NULL;
    }
    return NULL;
}

static inline int setenv(const char *name, const char *value, int overwrite) {
    if (!overwrite && getenv(name)) return 0;
    return _putenv_s(name, value) == 0 ? 0 : -1;
}
static inline int unsetenv(const char *name) { return _putenv_s(name, "") == 0 ? 0 : -1; } /* "" removes it */
#endif
#endif
