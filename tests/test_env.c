/* test_env.c — the environment variables gpudl reads are parsed whole (src/runtime/env.h): a number
   with a suffix, an exponent or a space around it, or out of range, is refused naming the variable
   and its range; the thread count read at first use falls back to the CPU count with one warning
   line on stderr; the 0/1 switches warn on anything else. Each case runs in a child process: the
   library reads these variables once per process. (The launchers' and the rendezvous's variables:
   tests/test_dist.c; GPUDL_NVML_LIB: tests/test_monitor.c.) */
#define _POSIX_C_SOURCE 200809L
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "harness.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const thread_vars[] = {"GPUDL_NUM_THREADS", "OMP_NUM_THREADS"};

/* In a child with `name`=`value` (NULL: unset) and the thread variables otherwise unset: what read()
   returns, and what stderr got (into err). Below 0 when the child failed. */
static int in_child(const char *name, const char *value, int (*read)(void), char *err, size_t elen) {
    FILE *f = tmpfile(), *g = tmpfile(); /* stderr; the value read */
    pid_t pid;
    int status, n = -1;
    size_t got;
    if (!f || !g) return -1;
    fflush(NULL);
    if ((pid = fork()) == 0) {
        size_t i;
        for (i = 0; i < 2; i++) unsetenv(thread_vars[i]);
        if (name) setenv(name, value, 1);
        dup2(fileno(f), 2);
        fprintf(g, "%d", read());
        fflush(g);
        _exit(0);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) n = -2;
    rewind(g);
    if (n == -1 && fscanf(g, "%d", &n) != 1) n = -3;
    fclose(g);
    rewind(f);
    got = fread(err, 1, elen - 1, f);
    err[got] = 0;
    fclose(f);
    return n;
}

static int read_threads(void) { return gdl_get_num_threads(); }
static int read_fusion(void) { return gdl_nn_set_fusion(-1); }

static int threads_in_child(const char *name, const char *value, char *err, size_t elen) {
    return in_child(name, value, read_threads, err, elen);
}

TEST thread_count_parsed_whole(void) {
    static const char *const bad[] = {"4abc", "1e3", " 4", "4 ", "+4", "0", "-2", "0x10", "1048577",
                                      "99999999999999999999999"};
    char err[512], want[128];
    int def = threads_in_child(NULL, NULL, err, sizeof err);
    size_t i;
    ASSERT(def >= 1);
    ASSERT_STR_EQ("", err);
    ASSERT_EQ(3, threads_in_child("GPUDL_NUM_THREADS", "3", err, sizeof err));
    ASSERT_STR_EQ("", err);
    ASSERT_EQ(3, threads_in_child("OMP_NUM_THREADS", "3,2", err, sizeof err)); /* OpenMP's outer level */
    ASSERT_STR_EQ("", err);
    ASSERT_EQ(256, threads_in_child("GPUDL_NUM_THREADS", "1000", err, sizeof err)); /* the pool's cap */
    for (i = 0; i < sizeof bad / sizeof *bad; i++) {
        ASSERT_EQ(def, threads_in_child("GPUDL_NUM_THREADS", bad[i], err, sizeof err));
        snprintf(want, sizeof want, "gpudl: warning: ignoring GPUDL_NUM_THREADS='%s': not a whole number in "
                 "[1, 1048576]; using the CPU count\n", bad[i]);
        ASSERT_STR_EQ(want, err);
    }
    ASSERT_EQ(def, threads_in_child("OMP_NUM_THREADS", "4x,2", err, sizeof err));
    ASSERT_CONTAINS(err, "ignoring OMP_NUM_THREADS='4x,2'");
    PASS();
}

/* a 0/1 switch, GPUDL_NO_FUSION (read by gdl_nn_set_fusion), set to v in a child: fusion's state */
static int fusion_in_child(const char *v, char *err, size_t elen) {
    return in_child("GPUDL_NO_FUSION", v, read_fusion, err, elen);
}

TEST switches_are_0_or_1(void) {
    char err[512];
    ASSERT_EQ(1, fusion_in_child("", err, sizeof err));
    ASSERT_EQ(1, fusion_in_child("0", err, sizeof err));
    ASSERT_STR_EQ("", err);
    ASSERT_EQ(0, fusion_in_child("1", err, sizeof err));
    ASSERT_STR_EQ("", err);
    ASSERT_EQ(1, fusion_in_child("yes", err, sizeof err)); /* the default, with a word */
    ASSERT_STR_EQ("gpudl: warning: ignoring GPUDL_NO_FUSION='yes': not 0 or 1; using 0\n", err);
    PASS();
}

/* the shared parser itself: whole numbers in range only, the error naming the call, the variable, its
   value and the range; unset and empty are the default */
TEST env_long(void) {
    static const char *const bad[] = {"4abc", "1e3", " 4", "4 ", "+4", "-", "11", "-11", "0x1",
                                      "99999999999999999999999"};
    long x;
    size_t i;
    unsetenv("GDL_TEST_VAR");
    ASSERT_EQ(0, gdl__env_long("op", "GDL_TEST_VAR", -10, 10, 7, &x));
    ASSERT_EQ(7, x);
    setenv("GDL_TEST_VAR", "", 1);
    ASSERT_EQ(0, gdl__env_long("op", "GDL_TEST_VAR", -10, 10, 7, &x));
    ASSERT_EQ(7, x);
    setenv("GDL_TEST_VAR", "-10", 1);
    ASSERT_EQ(1, gdl__env_long("op", "GDL_TEST_VAR", -10, 10, 7, &x));
    ASSERT_EQ(-10, x);
    for (i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("GDL_TEST_VAR", bad[i], 1);
        ASSERT_EQ(-1, gdl__env_long("op", "GDL_TEST_VAR", -10, 10, 7, &x));
        ASSERT_EQ(7, x);
        ASSERT_CONTAINS(gdl_last_error(), "op: GDL_TEST_VAR='");
        ASSERT_CONTAINS(gdl_last_error(), bad[i]);
        ASSERT_CONTAINS(gdl_last_error(), "' is not a whole number in [-10, 10]");
    }
    ASSERT_EQ(-1, gdl__parse_long(bad[0], -10, 10, &x));
    unsetenv("GDL_TEST_VAR");
    PASS();
}

TEST env_str(void) {
    const char *v;
    setenv("GDL_TEST_VAR", "abcd", 1);
    ASSERT_EQ(1, gdl__env_str("op", "GDL_TEST_VAR", 4, &v));
    ASSERT_STR_EQ("abcd", v);
    ASSERT_EQ(-1, gdl__env_str("op", "GDL_TEST_VAR", 3, &v));
    ASSERT_STR_EQ("", v);
    ASSERT_CONTAINS(gdl_last_error(), "op: GDL_TEST_VAR is 4 bytes long (it starts 'abcd...'): at most 3");
    unsetenv("GDL_TEST_VAR");
    ASSERT_EQ(0, gdl__env_str("op", "GDL_TEST_VAR", 3, &v));
    ASSERT_STR_EQ("", v);
    PASS();
}

HARNESS_MAIN_DEFS();
int main(int argc, char **argv) {
    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_TEST(thread_count_parsed_whole);
    RUN_TEST(switches_are_0_or_1);
    RUN_TEST(env_long);
    RUN_TEST(env_str);
    HARNESS_MAIN_END();
}
