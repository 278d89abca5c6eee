/* test_monitor.c — GPU monitoring (gdl_gpu_count, gdl_gpu_stats) through its
   real NVML code path, dlopen included, against tests/fake_nvml.c built as a
   shared library: the figures arrive with the right units, what a GPU does
   not report is "unknown" and not an error, a bad index is refused, and a
   machine without the NVIDIA library (or whose nvmlInit fails) gets a clear
   "NVML not available"; NVML's first load from several threads at once. Also
   the CPU's memory statistics and the profiler (tests/monitor_cases.h, which
   test_cuda.c runs on the emulated GPU). Built with -DGPUDL_NVML and
   FAKE_NVML="path". */
#define _POSIX_C_SOURCE 200809L
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include "monitor_cases.h"
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef FAKE_NVML
#define FAKE_NVML "build/libfake_nvml.so"
#endif

TEST figures_from_nvml(void) {
    gdl_gpu_status s;
    ASSERT_EQ(2, gdl_gpu_count());
    ASSERT_EQ(0, gdl_gpu_stats(0, &s));
    ASSERT_STR_EQ("Fake H100 80GB HBM3", s.name);
    ASSERT_EQ(87, s.utilization);
    ASSERT_EQ(41, s.memory_utilization);
    ASSERT_EQ(12884901888ll, (long long)s.memory_used);
    ASSERT_EQ(85899345920ll, (long long)s.memory_total);
    ASSERT_EQ(64, s.temperature);
    ASSERT_IN_RANGE(312.5, s.power, 1e-9);
    ASSERT_IN_RANGE(700.0, s.power_limit, 1e-9);
    ASSERT_EQ(1980, s.sm_clock);
    ASSERT_EQ(2619, s.memory_clock);
    PASS();
}

TEST unsupported_fields_are_unknown(void) {
    gdl_gpu_status s;
    ASSERT_EQ(0, gdl_gpu_stats(1, &s));
    ASSERT_STR_EQ("Fake Orin", s.name);
    ASSERT_EQ(-1, s.utilization);
    ASSERT_EQ(-1, s.memory_utilization);
    ASSERT_EQ(-1, s.temperature);
    ASSERT(s.power != s.power);
    ASSERT(s.power_limit != s.power_limit);
    ASSERT_EQ(1300, s.sm_clock);
    ASSERT_EQ(8589934592ll, (long long)s.memory_total);
    PASS();
}

TEST bad_arguments(void) {
    gdl_gpu_status s;
    ASSERT_EQ(-1, gdl_gpu_stats(2, &s));
    ASSERT_STR_EQ("gdl_gpu_stats: no GPU 2 (NVML sees 2)", gdl_last_error());
    ASSERT_EQ(-1, gdl_gpu_stats(-1, &s));
    ASSERT_EQ(-1, gdl_gpu_stats(0, NULL));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_gpu_stats");
    PASS();
}

/* In a child (NVML is loaded once per process): the library lib, FAKE_NVML_INIT_FAIL=fail.
   0 if gdl_gpu_stats failed with a message containing want. */
static int child_fails_with(const char *lib, int fail, const char *want) {
    pid_t pid;
    int status;
    fflush(NULL);
    if ((pid = fork()) == 0) {
        gdl_gpu_status s;
        setenv("GPUDL_NVML_LIB", lib, 1);
        if (fail) setenv("FAKE_NVML_INIT_FAIL", "1", 1);
        if (gdl_gpu_stats(0, &s) == 0) _exit(1);
        if (!strstr(gdl_last_error(), want)) {
            fprintf(stderr, "got: %s\n", gdl_last_error());
            _exit(2);
        }
        _exit(gdl_gpu_count() == -1 && strstr(gdl_last_error(), "gdl_gpu_count: NVML not available") ? 0 : 3);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST without_nvml(void) {
    ASSERT_EQ(0, child_fails_with("/nonexistent/libnvidia-ml.so.1", 0,
                                  "gdl_gpu_stats: NVML not available (/nonexistent/libnvidia-ml.so.1"));
    ASSERT_EQ(0, child_fails_with(FAKE_NVML, 1, "gdl_gpu_stats: NVML not available: nvmlInit failed: Driver Not Loaded"));
    /* the override is an absolute path only: a relative one would load whatever the current directory has */
    ASSERT_EQ(0, child_fails_with("build/libfake_nvml.so", 0,
                                  "gdl_gpu_stats: NVML not available: GPUDL_NVML_LIB='build/libfake_nvml.so' is not "
                                  "an absolute path"));
    PASS();
}

/* Eight threads ask at once in a fresh process: NVML is loaded once, and each gets the figures. */
static void *stats_thread(void *arg) {
    gdl_gpu_status s;
    int i = *(int *)arg;
    return gdl_gpu_stats(i % 2, &s) == 0 && strcmp(s.name, i % 2 ? "Fake Orin" : "Fake H100 80GB HBM3") == 0
               ? arg
               : NULL;
}
TEST first_load_from_threads(void) {
    pid_t pid;
    int status;
    fflush(NULL);
    if ((pid = fork()) == 0) {
        pthread_t t[8];
        int idx[8], i, bad = 0;
        setenv("GPUDL_NVML_LIB", FAKE_NVML, 1);
        for (i = 0; i < 8; i++) {
            idx[i] = i;
            if (pthread_create(&t[i], NULL, stats_thread, &idx[i]) != 0) _exit(2);
        }
        for (i = 0; i < 8; i++) {
            void *r = NULL;
            pthread_join(t[i], &r);
            bad += r == NULL;
        }
        exit(bad ? 1 : 0); /* not _exit: ThreadSanitizer fails the exit status of a process with races at exit */
    }
    ASSERT(pid > 0);
    ASSERT_EQ(pid, waitpid(pid, &status, 0));
    ASSERT(WIFEXITED(status));
    ASSERT_EQ(0, WEXITSTATUS(status));
    PASS();
}

TEST cpu_memory_stats(void) {
    gdl_memory_status s;
    CHECK_CALL(mc_memory_pattern(gdl_cpu(), 1, 0));
    ASSERT_EQ(0, gdl_memory_stats(gdl_cpu(), &s));
    ASSERT_EQ(s.requests, s.device_mallocs); /* no cache on the CPU */
    ASSERT_EQ(0, s.cache_hits);
    ASSERT_EQ(-1, gdl_memory_stats(gdl_cpu(), NULL));
    ASSERT_EQ(-1, gdl_memory_stats(gdl_cuda(0), &s));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_memory_stats: device cuda:0 is not available in this build");
    ASSERT_NULL(gdl_memory_summary(gdl_cuda(0)));
    ASSERT_EQ(-1, gdl_memory_reset_peak(gdl_cuda(0)));
    PASS();
}

TEST profile_before_any(void) {
    const gdl_profile_row *r;
    ASSERT_EQ(-1, gdl_profile_rows(&r));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_profile_rows: no profile has ended yet");
    ASSERT_EQ(-1, gdl_profile_print(stdout));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_profile_print: no profile has ended yet");
    ASSERT_EQ(-1, gdl_profile_trace("build/never.json"));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_profile_trace: no profile has ended yet");
    PASS();
}
TEST profile_errors(void) { return mc_profile_errors(); }
TEST cpu_profile(void) { return mc_profile_sequence(gdl_cpu(), -1, harness_tmp("test_monitor_trace.json")); }

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_TEST(without_nvml); /* first: forks before this process loads NVML */
    RUN_TEST(first_load_from_threads);
    RUN_TEST(profile_before_any);
    RUN_TEST(profile_errors);
    RUN_TEST(cpu_profile);
    RUN_TEST(cpu_memory_stats);
    setenv("GPUDL_NVML_LIB", FAKE_NVML, 1);
    RUN_TEST(figures_from_nvml);
    RUN_TEST(unsupported_fields_are_unknown);
    RUN_TEST(bad_arguments);
    HARNESS_MAIN_END();
}
