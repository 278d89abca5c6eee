/*
 * harness.h -- a small single-header unit-test harness for gpudl's tests.
 *
 * Written for this project in the style of the C library "greatest": tests
 * are functions that return a result, suites are functions that run tests,
 * and main() parses the command line and prints a summary. Standard C only
 * (C99 or later, or C++11 or later); all state is `static`, so each test
 * program must be a single translation unit that includes this header once.
 *
 * Usage:
 *
 *     #include "harness.h"
 *
 *     TEST add_works(void) { ASSERT_EQ(2, 1 + 1); PASS(); }
 *     TEST row_ok(void *arg) { const int *v = (const int *)arg; ASSERT_GT(*v, 0); PASS(); }
 *
 *     SUITE(math) {
 *         static int rows[] = {1, 2, 3};
 *         int i;
 *         RUN_TEST(add_works);
 *         for (i = 0; i < 3; i++) RUN_TESTp(row_ok, &rows[i]);   (row_ok_0 ..)
 *         RUN_TEST_NAMED("row_ok_three", row_ok, &rows[2]);      (any name)
 *     }
 *
 *     HARNESS_MAIN_DEFS();
 *     int main(int argc, char **argv) {
 *         HARNESS_MAIN_BEGIN(argc, argv);
 *         RUN_SUITE(math);
 *         RUN_TEST(add_works);       (tests may also run outside a suite)
 *         HARNESS_MAIN_END();        (prints the summary, returns the exit code)
 *     }
 *
 * A test is `TEST name(void)` or `TEST name(T *arg)` (for RUN_TESTp and
 * RUN_TEST_NAMED) and must end in PASS(), FAIL*() or SKIP*(); TEST is a
 * non-void return type, so falling off the end is a compiler warning.
 *
 * Outcomes:   PASS()  FAIL()  FAILm(msg)  FAILf(fmt, ...)  SKIP()  SKIPm(msg)
 * Assertions (a failing one records file:line and a message with the expected
 * and actual values, then returns HARNESS_FAIL from the test; every macro
 * argument is evaluated exactly once, left to right):
 *   ASSERT(c)  ASSERTm(msg, c)  ASSERT_FALSE(c)  ASSERT_FALSEm(msg, c)
 *   ASSERT_EQ(exp, got)  ASSERT_EQm(msg, exp, got)  ASSERT_NEQ(a, b)
 *       -- integers, compared and printed as long long (use ASSERT_IN_RANGE
 *          for floating point)
 *   ASSERT_LT(a, b)  ASSERT_LE  ASSERT_GT  ASSERT_GE
 *       -- compared as long double, so both integers and floats work (and
 *          -1 < (size_t)3 holds); exact for 64-bit integers only where long
 *          double has a 64-bit mantissa (x86, not MSVC)
 *   ASSERT_IN_RANGE(exp, got, tol)   doubles, |exp - got| <= tol; NaN fails
 *   ASSERT_STR_EQ(exp, got)          strcmp; NULL equals only NULL
 *   ASSERT_CONTAINS(haystack, needle)  strstr; NULL never contains/is found
 *   ASSERT_NULL(p)  ASSERT_NOT_NULL(p)  (object pointers)
 *   CHECK_CALL(helper(args))  run a helper that returns enum harness_result
 *       (and may use the assertions); return from the test unless it passed
 * Scratch files: harness_tmp("x.json") is a path in the program's own
 *   directory when tests/run.sh runs it ($HARNESS_TMPDIR), else build/x.json.
 * Hooks: SET_SETUP(fn, udata) / SET_TEARDOWN(fn, udata), fn is
 *   void fn(void *udata); called around every test that runs after it, up to
 *   the end of the current suite (RUN_SUITE saves the outer hooks, clears
 *   them for the suite, and restores them afterwards).
 * RUN_TESTp(fn, arg) names the test "fn_N", where N counts the RUN_TESTp
 *   calls of that fn so far in the current suite (or at top level), starting
 *   at 0 -- whether or not they run, so names are stable under filters.
 * RUN_TEST_NAMED(name, fn, arg) runs fn(arg) under a name built at run time
 *   (the name is copied, so one buffer may be reused per row; names longer
 *   than HARNESS_NAME_MAX - 1 are cut). Suites do not nest.
 *
 * Command line (parsed by HARNESS_MAIN_BEGIN; -t, -s and -x may be repeated,
 * a name matches if it contains any of the given strings):
 *   -t NAME  run only tests whose name contains NAME
 *   -s NAME  run only suites whose name contains NAME (with -s, tests run
 *            outside any suite are left out)
 *   -x NAME  exclude tests and suites whose name contains NAME
 *   -v       verbose: each test's result and time
 *   -l       list the suites and tests (after filtering) without running them:
 *            "suite:" lines, each followed by its "  test" lines; tests
 *            outside a suite unindented, with no colon. No summary line.
 *   -f       stop at the first failure
 *   -h       usage. An unknown flag prints usage and exits with status 2.
 *
 * Output goes to stdout: a '.' per pass, 's' per skip, 'F' per failure
 * followed by a line "FAIL test: file:line: message", a line per suite with
 * its counts, and last, with nothing after it, exactly
 *     N passed, N failed, N skipped
 * HARNESS_MAIN_END returns 0 if nothing failed, else 1.
 *
 * Timing uses clock_gettime(CLOCK_MONOTONIC) when <time.h> declares it, else
 * clock() (CPU time, which over-counts multi-threaded tests); -v names the
 * one in use (HARNESS_TIMER). Under strict -std=c99/c11, glibc hides
 * CLOCK_MONOTONIC: put
 *     #define _POSIX_C_SOURCE 200809L
 * before any #include in the test program (or pass -D_POSIX_C_SOURCE=200809L)
 * to get wall-clock timing.
 */
#ifndef HARNESS_H
#define HARNESS_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------ */
/* Types and state                                                           */

enum harness_result { HARNESS_PASS = 0, HARNESS_FAIL = 1, HARNESS_SKIP = 2 };

typedef void (*harness_hook_fn)(void *udata);

#define HARNESS_MAX_FILTERS 16   /* per kind of flag (-t, -s, -x) */
#define HARNESS_NAME_MAX 256     /* longest test name kept (truncated) */
#define HARNESS_MSG_MAX 2048     /* longest failure message kept (truncated) */
#define HARNESS_QUOTE_MAX 300    /* longest string quoted in a message */
#define HARNESS_PARAM_FNS 64     /* distinct fns counted by RUN_TESTp per scope */
#define HARNESS_DOTS_PER_LINE 64

struct harness_counts {
    unsigned long passed, failed, skipped;
};

struct harness_param_count {
    const char *fn;   /* the #fn string literal */
    unsigned next;    /* index the next RUN_TESTp(fn, ...) gets */
};

struct harness_state {
    /* options */
    const char *only_tests[HARNESS_MAX_FILTERS];
    const char *only_suites[HARNESS_MAX_FILTERS];
    const char *excludes[HARNESS_MAX_FILTERS];
    int n_only_tests, n_only_suites, n_excludes;
    int verbose, list, stop_at_fail;
    const char *prog;

    /* progress */
    int stopped;                  /* -f and a test failed */
    int col;                      /* characters on the current progress line */
    struct harness_counts total, suite;
    double total_ms, suite_ms;
    const char *suite_name;       /* NULL outside RUN_SUITE */
    int suite_announced;          /* suite header printed (lazily) */

    /* the running test */
    char test_name[HARNESS_NAME_MAX];
    double test_start_ms;
    const char *msg_file;
    int msg_line;
    char msg[HARNESS_MSG_MAX];

    /* hooks */
    harness_hook_fn setup, teardown;
    void *setup_udata, *teardown_udata;

    /* RUN_TESTp indices: [0] top level, [1] current suite */
    struct harness_param_count params[2][HARNESS_PARAM_FNS];
    int n_params[2];
};

static struct harness_state harness_state_;

#if defined(__MINGW32__) && defined(__USE_MINGW_ANSI_STDIO) && __USE_MINGW_ANSI_STDIO
/* MinGW's gcc takes plain "printf" to mean msvcrt's, which knows no %zu; the harness prints through
   MinGW's C99 stdio there (tests/windows.mk), whose format checks are gnu_printf's */
#define HARNESS_PRINTF_(f, a) __attribute__((format(gnu_printf, f, a)))
#elif defined(__GNUC__) || defined(__clang__)
#define HARNESS_PRINTF_(f, a) __attribute__((format(printf, f, a)))
#else
#define HARNESS_PRINTF_(f, a)
#endif

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */

#if defined(CLOCK_MONOTONIC)
#define HARNESS_TIMER "clock_gettime(CLOCK_MONOTONIC)"
#else
#define HARNESS_TIMER "clock()"
#endif

static inline double harness_now_ms_(void)
{
#if defined(CLOCK_MONOTONIC)
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) == 0)
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
    return 0.0;
#else
    return (double)clock() * 1e3 / (double)CLOCKS_PER_SEC;
#endif
}

/* harness_tmp(name): the path of a scratch file NAME: in $HARNESS_TMPDIR when
   it is set, else in build/. tests/run.sh gives each program it runs a
   directory of its own, so that two programs running at once (a test and its
   ASan build, or one binary under two schedules) never share a file. The
   result is one of 8 static buffers, reused round-robin. */
static inline const char *harness_tmp(const char *name)
{
    static char bufs[8][512];
    static unsigned next;
    const char *dir = getenv("HARNESS_TMPDIR");
    char *p = bufs[next++ % 8];
    snprintf(p, sizeof bufs[0], "%s/%s", dir && dir[0] ? dir : "build", name);
    return p;
}

static inline int harness_matches_any_(const char *name, const char *const *pats, int n)
{
    int i;
    for (i = 0; i < n; i++)
        if (strstr(name, pats[i]) != NULL)
            return 1;
    return 0;
}

/* Ends a line of progress characters, if one is open. */
static inline void harness_end_line_(void)
{
    if (harness_state_.col > 0) {
        putchar('\n');
        harness_state_.col = 0;
    }
}

/* Writes s into buf as a C-like quoted string (escaping control characters,
 * cut at HARNESS_QUOTE_MAX characters), or NULL. */
static inline void harness_quote_(char *buf, size_t cap, const char *s)
{
    size_t n = 0, shown = 0;
    if (cap < 8) {
        if (cap > 0) buf[0] = '\0';
        return;
    }
    if (s == NULL) {
        snprintf(buf, cap, "NULL");
        return;
    }
    buf[n++] = '"';
    for (; *s != '\0'; s++, shown++) {
        unsigned char c = (unsigned char)*s;
        char tmp[8];
        size_t len;
        if (shown >= HARNESS_QUOTE_MAX) break;
        if (c == '\n') snprintf(tmp, sizeof tmp, "\\n");
        else if (c == '\t') snprintf(tmp, sizeof tmp, "\\t");
        else if (c == '\r') snprintf(tmp, sizeof tmp, "\\r");
        else if (c == '"') snprintf(tmp, sizeof tmp, "\\\"");
        else if (c == '\\') snprintf(tmp, sizeof tmp, "\\\\");
        else if (c < 0x20 || c == 0x7f) snprintf(tmp, sizeof tmp, "\\x%02x", (unsigned)c);
        else { tmp[0] = (char)c; tmp[1] = '\0'; }
        len = strlen(tmp);
        if (n + len + 5 >= cap) break;    /* room for `..."` and NUL */
        memcpy(buf + n, tmp, len);
        n += len;
    }
    if (*s != '\0') {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n++] = '"';
    buf[n] = '\0';
}

/* Shortest of %.15Lg / %.21Lg that reads back as the same value. */
static inline void harness_fmt_ld_(char *buf, size_t cap, long double v)
{
    snprintf(buf, cap, "%.15Lg", v);
    if (v == v && strtold(buf, NULL) != v)
        snprintf(buf, cap, "%.21Lg", v);
}

static inline void harness_fmt_d_(char *buf, size_t cap, double v)
{
    snprintf(buf, cap, "%.15g", v);
    if (v == v && strtod(buf, NULL) != v)
        snprintf(buf, cap, "%.17g", v);
}

static inline const char *harness_str_(const char *s)
{
    return s != NULL ? s : "(null)";
}

/* ------------------------------------------------------------------------ */
/* Recording outcomes (what the macros return)                               */

static inline enum harness_result harness_vrecord_(enum harness_result r, const char *file,
                                                   int line, const char *fmt, va_list ap)
{
    harness_state_.msg_file = file;
    harness_state_.msg_line = line;
    if (fmt != NULL)
        vsnprintf(harness_state_.msg, sizeof harness_state_.msg, fmt, ap);
    else
        harness_state_.msg[0] = '\0';
    return r;
}

static inline enum harness_result harness_fail_(const char *file, int line,
                                                const char *fmt, ...) HARNESS_PRINTF_(3, 4);
static inline enum harness_result harness_fail_(const char *file, int line,
                                                const char *fmt, ...)
{
    enum harness_result r;
    va_list ap;
    va_start(ap, fmt);
    r = harness_vrecord_(HARNESS_FAIL, file, line, fmt, ap);
    va_end(ap);
    return r;
}

static inline enum harness_result harness_skip_(const char *file, int line, const char *msg)
{
    harness_state_.msg_file = file;
    harness_state_.msg_line = line;
    snprintf(harness_state_.msg, sizeof harness_state_.msg, "%s", msg != NULL ? msg : "");
    return HARNESS_SKIP;
}

static inline enum harness_result harness_fail_str_eq_(const char *file, int line,
                                                       const char *label, const char *exp,
                                                       const char *got)
{
    char qe[HARNESS_QUOTE_MAX * 2 + 16], qg[HARNESS_QUOTE_MAX * 2 + 16];
    size_t at = 0;
    harness_quote_(qe, sizeof qe, exp);
    harness_quote_(qg, sizeof qg, got);
    if (exp == NULL || got == NULL)
        return harness_fail_(file, line, "%s: expected %s, got %s", label, qe, qg);
    while (exp[at] != '\0' && exp[at] == got[at])
        at++;
    return harness_fail_(file, line, "%s: expected %s, got %s (they differ at offset %lu)",
                         label, qe, qg, (unsigned long)at);
}

static inline enum harness_result harness_fail_contains_(const char *file, int line,
                                                         const char *label, const char *hay,
                                                         const char *needle)
{
    char qh[HARNESS_QUOTE_MAX * 2 + 16], qn[HARNESS_QUOTE_MAX * 2 + 16];
    harness_quote_(qh, sizeof qh, hay);
    harness_quote_(qn, sizeof qn, needle);
    return harness_fail_(file, line, "%s: expected a string containing %s, got %s",
                         label, qn, qh);
}

static inline enum harness_result harness_fail_cmp_(const char *file, int line,
                                                    const char *label, const char *rel,
                                                    long double a, long double b)
{
    char sa[64], sb[64];
    harness_fmt_ld_(sa, sizeof sa, a);
    harness_fmt_ld_(sb, sizeof sb, b);
    return harness_fail_(file, line, "%s: expected a %s b, got a = %s, b = %s",
                         label, rel, sa, sb);
}

static inline enum harness_result harness_fail_range_(const char *file, int line,
                                                      const char *label, double exp,
                                                      double got, double tol)
{
    char se[64], sg[64], st[64], sd[64];
    double d = exp - got;
    if (d < 0) d = -d;
    harness_fmt_d_(se, sizeof se, exp);
    harness_fmt_d_(sg, sizeof sg, got);
    harness_fmt_d_(st, sizeof st, tol);
    harness_fmt_d_(sd, sizeof sd, d);
    return harness_fail_(file, line, "%s: expected %s +/- %s, got %s (off by %s)",
                         label, se, st, sg, sd);
}

static inline int harness_in_range_(double exp, double got, double tol)
{
    double d;
    if (exp == got) return 1;     /* also equal infinities */
    d = exp - got;
    if (d < 0) d = -d;
    return d <= tol;              /* NaN anywhere: false */
}

static inline int harness_contains_(const char *hay, const char *needle)
{
    return hay != NULL && needle != NULL && strstr(hay, needle) != NULL;
}

static inline int harness_str_eq_(const char *a, const char *b)
{
    if (a == NULL || b == NULL) return a == b;
    return strcmp(a, b) == 0;
}

/* ------------------------------------------------------------------------ */
/* Running tests and suites                                                  */

static inline void harness_announce_suite_(void)
{
    struct harness_state *st = &harness_state_;
    if (st->suite_name == NULL || st->suite_announced) return;
    st->suite_announced = 1;
    if (st->list) {
        printf("%s:\n", st->suite_name);
    } else {
        harness_end_line_();
        printf("* Suite %s:\n", st->suite_name);
    }
}

/* Decides whether the test `name` runs; if so, calls the setup hook and
 * starts its clock. Returns 1 to run it. */
static inline int harness_pre_test_(const char *name)
{
    struct harness_state *st = &harness_state_;
    if (name == NULL) name = "(null)";
    if (st->stopped) return 0;
    if (st->suite_name == NULL && st->n_only_suites > 0) return 0;
    if (st->n_only_tests > 0 && !harness_matches_any_(name, st->only_tests, st->n_only_tests))
        return 0;
    if (harness_matches_any_(name, st->excludes, st->n_excludes)) return 0;

    harness_announce_suite_();
    if (st->list) {
        printf("%s%s\n", st->suite_name != NULL ? "  " : "", name);
        return 0;
    }
    snprintf(st->test_name, sizeof st->test_name, "%s", name);
    st->msg_file = NULL;
    st->msg_line = 0;
    st->msg[0] = '\0';
    if (st->setup != NULL) st->setup(st->setup_udata);
    st->test_start_ms = harness_now_ms_();
    return 1;
}

/* RUN_TESTp: the test is named fn_N (see the top of the file). */
static inline int harness_pre_test_p_(const char *fn)
{
    struct harness_state *st = &harness_state_;
    int scope = st->suite_name != NULL ? 1 : 0, i;
    unsigned idx = 0;
    char name[HARNESS_NAME_MAX];
    for (i = 0; i < st->n_params[scope]; i++)
        if (strcmp(st->params[scope][i].fn, fn) == 0) break;
    if (i == st->n_params[scope] && i < HARNESS_PARAM_FNS) {
        st->params[scope][i].fn = fn;
        st->params[scope][i].next = 0;
        st->n_params[scope]++;
    }
    if (i < HARNESS_PARAM_FNS) idx = st->params[scope][i].next++;
    snprintf(name, sizeof name, "%s_%u", fn, idx);
    return harness_pre_test_(name);
}

/* Prints where and why the current test failed or was skipped. */
static inline void harness_print_detail_(void)
{
    const struct harness_state *st = &harness_state_;
    if (st->msg_file != NULL)
        printf("%s:%d: %s", st->msg_file, st->msg_line, st->msg);
    else
        printf("%s", st->msg);
}

/* Stops the clock, calls the teardown hook, counts and reports the result. */
static inline void harness_post_test_(enum harness_result r)
{
    struct harness_state *st = &harness_state_;
    double ms = harness_now_ms_() - st->test_start_ms;
    const char *tag;
    char mark;

    if (st->teardown != NULL) st->teardown(st->teardown_udata);
    if (ms < 0) ms = 0;
    st->total_ms += ms;
    st->suite_ms += ms;

    if (r != HARNESS_PASS && r != HARNESS_SKIP && r != HARNESS_FAIL) {
        snprintf(st->msg, sizeof st->msg, "test returned an invalid result (%d)", (int)r);
        st->msg_file = NULL;
        r = HARNESS_FAIL;
    }
    if (r == HARNESS_FAIL && st->msg_file == NULL && st->msg[0] == '\0')
        snprintf(st->msg, sizeof st->msg, "test returned HARNESS_FAIL");
    if (r == HARNESS_SKIP && st->msg[0] == '\0')
        st->msg_file = NULL;              /* plain SKIP(): nothing to say */

    switch (r) {
    case HARNESS_PASS: st->total.passed++; st->suite.passed++; tag = "PASS"; mark = '.'; break;
    case HARNESS_SKIP: st->total.skipped++; st->suite.skipped++; tag = "SKIP"; mark = 's'; break;
    default:           st->total.failed++; st->suite.failed++; tag = "FAIL"; mark = 'F'; break;
    }

    if (st->verbose) {
        harness_end_line_();
        printf("  %s %s (%.3f ms)", tag, st->test_name, ms);
        if (r != HARNESS_PASS && (st->msg_file != NULL || st->msg[0] != '\0')) {
            printf(": ");
            harness_print_detail_();
        }
        putchar('\n');
    } else {
        putchar(mark);
        st->col++;
        if (r == HARNESS_FAIL) {
            harness_end_line_();
            printf("FAIL %s: ", st->test_name);
            harness_print_detail_();
            putchar('\n');
        } else if (st->col >= HARNESS_DOTS_PER_LINE) {
            harness_end_line_();
        }
    }
    fflush(stdout);
    if (r == HARNESS_FAIL && st->stop_at_fail) st->stopped = 1;
}

static inline void harness_run_suite_(const char *name, void (*suite)(void))
{
    struct harness_state *st = &harness_state_;
    harness_hook_fn outer_setup = st->setup, outer_teardown = st->teardown;
    void *outer_setup_udata = st->setup_udata, *outer_teardown_udata = st->teardown_udata;

    if (name == NULL) name = "(null)";
    if (st->stopped || st->suite_name != NULL) return;   /* no nesting */
    if (st->n_only_suites > 0 && !harness_matches_any_(name, st->only_suites, st->n_only_suites))
        return;
    if (harness_matches_any_(name, st->excludes, st->n_excludes)) return;

    st->suite_name = name;
    st->suite_announced = 0;
    st->suite.passed = st->suite.failed = st->suite.skipped = 0;
    st->suite_ms = 0;
    st->n_params[1] = 0;
    st->setup = NULL;
    st->teardown = NULL;
    st->setup_udata = st->teardown_udata = NULL;

    suite();

    if (st->suite_announced && !st->list) {
        harness_end_line_();
        printf("* %s: %lu passed, %lu failed, %lu skipped (%.3f ms)\n", name,
               st->suite.passed, st->suite.failed, st->suite.skipped, st->suite_ms);
    }
    fflush(stdout);
    st->suite_name = NULL;
    st->setup = outer_setup;
    st->teardown = outer_teardown;
    st->setup_udata = outer_setup_udata;
    st->teardown_udata = outer_teardown_udata;
}

static inline void harness_set_setup_(harness_hook_fn fn, void *udata)
{
    harness_state_.setup = fn;
    harness_state_.setup_udata = udata;
}

static inline void harness_set_teardown_(harness_hook_fn fn, void *udata)
{
    harness_state_.teardown = fn;
    harness_state_.teardown_udata = udata;
}

/* ------------------------------------------------------------------------ */
/* main()                                                                    */

static inline void harness_usage_(FILE *out)
{
    fprintf(out,
            "Usage: %s [-t NAME] [-s NAME] [-x NAME] [-v] [-l] [-f] [-h]\n"
            "  -t NAME  run only tests whose name contains NAME\n"
            "  -s NAME  run only suites whose name contains NAME\n"
            "  -x NAME  exclude tests and suites whose name contains NAME\n"
            "  -v       verbose: print each test's result and time\n"
            "  -l       list suites and tests without running them\n"
            "  -f       stop at the first failure\n"
            "  -h       print this help\n"
            "-t, -s and -x may be repeated (a name matches if it contains any).\n",
            harness_str_(harness_state_.prog));
}

static inline void harness_usage_error_(const char *what, const char *arg)
{
    fprintf(stderr, "%s: %s '%s'\n", harness_str_(harness_state_.prog), what, harness_str_(arg));
    harness_usage_(stderr);
    fflush(stdout);
    exit(2);
}

static inline void harness_main_begin_(int argc, char **argv)
{
    struct harness_state *st = &harness_state_;
    int i;
    memset(st, 0, sizeof *st);
    st->prog = argc > 0 && argv[0] != NULL ? argv[0] : "test";
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-t") == 0 || strcmp(a, "-s") == 0 || strcmp(a, "-x") == 0) {
            const char **list;
            int *n;
            if (i + 1 >= argc) harness_usage_error_("option requires an argument", a);
            if (a[1] == 't') { list = st->only_tests; n = &st->n_only_tests; }
            else if (a[1] == 's') { list = st->only_suites; n = &st->n_only_suites; }
            else { list = st->excludes; n = &st->n_excludes; }
            if (*n >= HARNESS_MAX_FILTERS) harness_usage_error_("too many uses of", a);
            list[(*n)++] = argv[++i];
        } else if (strcmp(a, "-v") == 0) {
            st->verbose = 1;
        } else if (strcmp(a, "-l") == 0) {
            st->list = 1;
        } else if (strcmp(a, "-f") == 0) {
            st->stop_at_fail = 1;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            harness_usage_(stdout);
            fflush(stdout);
            exit(0);
        } else {
            harness_usage_error_("unknown option", a);
        }
    }
}

static inline int harness_main_end_(void)
{
    struct harness_state *st = &harness_state_;
    unsigned long ran = st->total.passed + st->total.failed + st->total.skipped;
    if (st->list) {
        fflush(stdout);
        return 0;
    }
    harness_end_line_();
    if (st->stopped) printf("stopped at the first failure (-f)\n");
    if (ran == 0) printf("no tests ran (do the filters match any?)\n");
    if (st->verbose) printf("ran %lu tests in %.3f ms (timer: %s)\n", ran, st->total_ms, HARNESS_TIMER);
    printf("%lu passed, %lu failed, %lu skipped\n",
           st->total.passed, st->total.failed, st->total.skipped);
    fflush(stdout);
    return st->total.failed > 0 ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* Public macros                                                             */

#define TEST static enum harness_result
#define SUITE(name) static void name(void)

#define HARNESS_MAIN_DEFS() extern int harness_main_defs_unused_
#define HARNESS_MAIN_BEGIN(argc, argv) harness_main_begin_((argc), (argv))
#define HARNESS_MAIN_END() return harness_main_end_()

#define RUN_SUITE(name) harness_run_suite_(#name, name)
#define RUN_TEST(fn) \
    do { if (harness_pre_test_(#fn)) harness_post_test_(fn()); } while (0)
#define RUN_TESTp(fn, arg) \
    do { if (harness_pre_test_p_(#fn)) harness_post_test_(fn(arg)); } while (0)
#define RUN_TEST_NAMED(name, fn, arg) \
    do { if (harness_pre_test_(name)) harness_post_test_(fn(arg)); } while (0)

#define SET_SETUP(fn, udata) harness_set_setup_((fn), (udata))
#define SET_TEARDOWN(fn, udata) harness_set_teardown_((fn), (udata))

#define PASS() return HARNESS_PASS
#define FAIL() return harness_fail_(__FILE__, __LINE__, "%s", "FAIL()")
#define FAILm(msg) return harness_fail_(__FILE__, __LINE__, "%s", harness_str_(msg))
#define FAILf(...) return harness_fail_(__FILE__, __LINE__, __VA_ARGS__)
#define SKIP() return harness_skip_(__FILE__, __LINE__, NULL)
#define SKIPm(msg) return harness_skip_(__FILE__, __LINE__, (msg))

#define CHECK_CALL(call)                                                     \
    do {                                                                     \
        enum harness_result harness_r_ = (call);                             \
        if (harness_r_ != HARNESS_PASS) return harness_r_;                   \
    } while (0)

#define ASSERT(c)                                                            \
    do {                                                                     \
        if (!((c) ? 1 : 0))                                                  \
            return harness_fail_(__FILE__, __LINE__, "%s: expected true, got false", \
                                 "ASSERT(" #c ")");                          \
    } while (0)

#define ASSERTm(msg, c)                                                      \
    do {                                                                     \
        const char *harness_m_ = (msg);                                      \
        if (!((c) ? 1 : 0))                                                  \
            return harness_fail_(__FILE__, __LINE__, "%s (%s): expected true, got false", \
                                 harness_str_(harness_m_), #c);              \
    } while (0)

#define ASSERT_FALSE(c)                                                      \
    do {                                                                     \
        if ((c) ? 1 : 0)                                                     \
            return harness_fail_(__FILE__, __LINE__, "%s: expected false, got true", \
                                 "ASSERT_FALSE(" #c ")");                    \
    } while (0)

#define ASSERT_FALSEm(msg, c)                                                \
    do {                                                                     \
        const char *harness_m_ = (msg);                                      \
        if ((c) ? 1 : 0)                                                     \
            return harness_fail_(__FILE__, __LINE__, "%s (%s): expected false, got true", \
                                 harness_str_(harness_m_), #c);              \
    } while (0)

#define HARNESS_EQ_(label, exp, got)                                         \
    do {                                                                     \
        long long harness_e_ = (long long)(exp);                             \
        long long harness_g_ = (long long)(got);                             \
        if (harness_e_ != harness_g_)                                        \
            return harness_fail_(__FILE__, __LINE__, "%s: expected %lld, got %lld", \
                                 (label), harness_e_, harness_g_);           \
    } while (0)

#define ASSERT_EQ(exp, got) HARNESS_EQ_("ASSERT_EQ(" #exp ", " #got ")", exp, got)

#define ASSERT_EQm(msg, exp, got)                                            \
    do {                                                                     \
        const char *harness_m_ = (msg);                                      \
        long long harness_e_ = (long long)(exp);                             \
        long long harness_g_ = (long long)(got);                             \
        if (harness_e_ != harness_g_)                                        \
            return harness_fail_(__FILE__, __LINE__, "%s (%s): expected %lld, got %lld", \
                                 harness_str_(harness_m_),                   \
                                 "ASSERT_EQ(" #exp ", " #got ")",            \
                                 harness_e_, harness_g_);                    \
    } while (0)

#define ASSERT_NEQ(a, b)                                                     \
    do {                                                                     \
        long long harness_a_ = (long long)(a);                               \
        long long harness_b_ = (long long)(b);                               \
        if (harness_a_ == harness_b_)                                        \
            return harness_fail_(__FILE__, __LINE__,                         \
                                 "%s: expected two different values, got %lld and %lld", \
                                 "ASSERT_NEQ(" #a ", " #b ")", harness_a_, harness_b_); \
    } while (0)

#define HARNESS_CMP_(name, op, a, b)                                         \
    do {                                                                     \
        long double harness_a_ = (long double)(a);                           \
        long double harness_b_ = (long double)(b);                           \
        if (!(harness_a_ op harness_b_))                                     \
            return harness_fail_cmp_(__FILE__, __LINE__,                     \
                                     name "(" #a ", " #b ")", #op,           \
                                     harness_a_, harness_b_);                \
    } while (0)

#define ASSERT_LT(a, b) HARNESS_CMP_("ASSERT_LT", <, a, b)
#define ASSERT_LE(a, b) HARNESS_CMP_("ASSERT_LE", <=, a, b)
#define ASSERT_GT(a, b) HARNESS_CMP_("ASSERT_GT", >, a, b)
#define ASSERT_GE(a, b) HARNESS_CMP_("ASSERT_GE", >=, a, b)

#define ASSERT_IN_RANGE(exp, got, tol)                                       \
    do {                                                                     \
        double harness_e_ = (double)(exp);                                   \
        double harness_g_ = (double)(got);                                   \
        double harness_t_ = (double)(tol);                                   \
        if (!harness_in_range_(harness_e_, harness_g_, harness_t_))          \
            return harness_fail_range_(__FILE__, __LINE__,                   \
                                       "ASSERT_IN_RANGE(" #exp ", " #got ", " #tol ")", \
                                       harness_e_, harness_g_, harness_t_);  \
    } while (0)

#define ASSERT_STR_EQ(exp, got)                                              \
    do {                                                                     \
        const char *harness_e_ = (exp);                                      \
        const char *harness_g_ = (got);                                      \
        if (!harness_str_eq_(harness_e_, harness_g_))                        \
            return harness_fail_str_eq_(__FILE__, __LINE__,                  \
                                        "ASSERT_STR_EQ(" #exp ", " #got ")", \
                                        harness_e_, harness_g_);             \
    } while (0)

#define ASSERT_CONTAINS(haystack, needle)                                    \
    do {                                                                     \
        const char *harness_h_ = (haystack);                                 \
        const char *harness_n_ = (needle);                                   \
        if (!harness_contains_(harness_h_, harness_n_))                      \
            return harness_fail_contains_(__FILE__, __LINE__,                \
                                          "ASSERT_CONTAINS(" #haystack ", " #needle ")", \
                                          harness_h_, harness_n_);           \
    } while (0)

#define ASSERT_NULL(p)                                                       \
    do {                                                                     \
        const void *harness_p_ = (p);                                        \
        if (harness_p_ != NULL)                                              \
            return harness_fail_(__FILE__, __LINE__, "%s: expected NULL, got %p", \
                                 "ASSERT_NULL(" #p ")", harness_p_); \
    } while (0)

#define ASSERT_NOT_NULL(p)                                                   \
    do {                                                                     \
        const void *harness_p_ = (p);                                        \
        if (harness_p_ == NULL)                                              \
            return harness_fail_(__FILE__, __LINE__, "%s: expected non-NULL, got NULL", \
                                 "ASSERT_NOT_NULL(" #p ")");                 \
    } while (0)

#endif /* HARNESS_H */
