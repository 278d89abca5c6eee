/* api_only.h — force-included (cc -include tests/api_only.h) into a test or
   example that the Makefile links with a library object (tests/gpudl_impl.c)
   instead of compiling gpudl's implementation into it.

   It defines GPUDL_IMPLEMENTATION_DONE, so the program's own
   `#define GPUDL_IMPLEMENTATION` + `#include "gpudl.h"` gives it the
   declarations only, with no edit to its source. And it includes the system
   headers that the implementation includes, on the same conditions: compiled
   with the implementation, the program's code sees them (NAN, fabs, memcpy,
   fork...) and some of it relies on that. A feature macro such as
   _POSIX_C_SOURCE that the source defines must also be on the command line
   (the Makefile's POSIX), since this file comes first. */
#ifndef GPUDL_API_ONLY_H
#define GPUDL_API_ONLY_H
#define GPUDL_IMPLEMENTATION_DONE 1

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdarg.h>
#include <float.h>
#include <assert.h>
#include <time.h>
#include <errno.h>
#if !defined(GPUDL_NO_THREADS) && (defined(__GNUC__) || defined(__clang__))
#include <pthread.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <sys/types.h>
#include <sched.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/stat.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/time.h>
#include <poll.h>
#if !defined(__cplusplus)
/* as the implementation declares them: hidden by a bare -std=c99 */
#ifndef fileno
int fileno(FILE *stream);
#endif
int kill(pid_t pid, int sig);
#endif
#endif
#ifdef GPUDL_ZLIB
#include <zlib.h>
#endif
#ifdef GPUDL_MPI
#include <mpi.h>
#endif
#endif
