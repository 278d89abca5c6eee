/*
 * harness_selftest.c -- exercises every macro of tests/harness.h.
 *
 * Some tests here fail and skip on purpose; tests/harness_selftest.sh runs
 * this program with various flags and checks its output and exit status.
 * Unfiltered, the expected summary is
 *     52 passed, 5 failed, 2 skipped
 *
 * Suites, in the order they run:
 *   assert_pass  every assertion on its passing path (8 tests, all pass)
 *   fail_paths   every assertion and outcome on its failing path, each called
 *                as a helper from a test that checks the result, the message,
 *                that the helper returned at once, and that each macro
 *                argument was evaluated exactly once (31 tests, all pass)
 *   outcomes     real outcomes: 1 pass, 4 failures, 2 skips
 *   table        RUN_TESTp and RUN_TEST_NAMED over a table; row 2 is wrong on
 *                purpose (4 pass, 1 fails)
 *   hooks        SET_SETUP / SET_TEARDOWN (3 pass)
 * and, outside any suite, 5 tests that pass (hooks at top level, RUN_TESTp).
 */
#include <float.h>
#include <stdlib.h>

#include "harness.h"

/* ------------------------------------------------------------------------ */
/* Argument counters: argument k of the macro under test is wrapped in Ik(),
 * Dk(), Sk() or Pk(), which count how often it was evaluated.              */

static int n_arg[4];
static int reached;   /* set by code after an assertion that should fail */

static void reset_counts(void) { n_arg[1] = n_arg[2] = n_arg[3] = 0; reached = 0; }

static long long I1(long long v) { n_arg[1]++; return v; }
static long long I2(long long v) { n_arg[2]++; return v; }
static long long I3(long long v) { n_arg[3]++; return v; }
static double D1(double v) { n_arg[1]++; return v; }
static double D2(double v) { n_arg[2]++; return v; }
static double D3(double v) { n_arg[3]++; return v; }
static const char *S1(const char *s) { n_arg[1]++; return s; }
static const char *S2(const char *s) { n_arg[2]++; return s; }
static const void *P1(const void *p) { n_arg[1]++; return p; }

/* 1 if the arguments were evaluated exactly a, b, c times; resets. */
static int evals(int a, int b, int c)
{
    int ok = n_arg[1] == a && n_arg[2] == b && n_arg[3] == c;
    reset_counts();
    return ok;
}

static double not_a_number(void) { return strtod("nan", NULL); }

/* ------------------------------------------------------------------------ */
/* Suite assert_pass                                                         */

TEST pass_bool(void)
{
    int x = 3;
    ASSERT(x == 3);
    ASSERTm("x is three", x == 3);
    ASSERT_FALSE(x == 4);
    ASSERT_FALSEm("x is not four", x == 4);
    PASS();
}

TEST pass_eq(void)
{
    unsigned char c = 200;
    ASSERT_EQ(4, 2 * 2);
    ASSERT_EQ(200, c);
    ASSERT_EQ(-1, -1L);
    ASSERT_EQ(9007199254740993LL, 9007199254740993LL);
    ASSERT_EQm("sizes", sizeof(int), sizeof(int));
    ASSERT_NEQ(9007199254740993LL, 9007199254740992LL);
    ASSERT_NEQ(1, 2);
    PASS();
}

TEST pass_order(void)
{
    size_t three = 3;
    ASSERT_LT(1, 2);
    ASSERT_LT(0.5, 0.9);          /* floats are not truncated */
    ASSERT_LT(-1, three);         /* no unsigned wrap-around */
    ASSERT_LE(2, 2);
    ASSERT_LE(0.25, 0.5);
    ASSERT_GT(2.5, 2);
    ASSERT_GT(three, -1);
    ASSERT_GE(2, 2);
    ASSERT_GE(1e300, 1e299);
#if LDBL_MANT_DIG >= 64
    ASSERT_GT(9007199254740993LL, 9007199254740992LL);   /* exact past 2^53 */
#endif
    PASS();
}

TEST pass_range(void)
{
    double inf = strtod("inf", NULL);
    ASSERT_IN_RANGE(1.0, 1.0005, 1e-3);
    ASSERT_IN_RANGE(1.0005, 1.0, 1e-3);
    ASSERT_IN_RANGE(0.1 + 0.2, 0.3, 1e-12);
    ASSERT_IN_RANGE(2, 2, 0);
    ASSERT_IN_RANGE(inf, inf, 0);
    ASSERT_IN_RANGE(1.0f, 1.0f + 1e-7f, 1e-6);
    PASS();
}

TEST pass_strings(void)
{
    char buf[8] = "abc";
    const char *null_str = NULL;
    ASSERT_STR_EQ("abc", buf);
    ASSERT_STR_EQ(null_str, NULL);
    ASSERT_STR_EQ("", "");
    ASSERT_CONTAINS("haystack", "st");
    ASSERT_CONTAINS(buf, "abc");
    ASSERT_CONTAINS("anything", "");
    PASS();
}

TEST pass_pointers(void)
{
    int x = 0;
    int *none = NULL;
    ASSERT_NULL(none);
    ASSERT_NULL(NULL);
    ASSERT_NOT_NULL(&x);
    ASSERT_NOT_NULL("literal");
    PASS();
}

TEST helper_that_passes(int *calls)
{
    (*calls)++;
    ASSERT(1);
    PASS();
}

TEST pass_check_call(void)
{
    int calls = 0;
    CHECK_CALL(helper_that_passes(&calls));
    CHECK_CALL(helper_that_passes(&calls));
    ASSERT_EQ(2, calls);
    PASS();
}

TEST pass_eval_once(void)
{
    int x = 0;
    reset_counts();
    ASSERT(I1(1));                              ASSERT(evals(1, 0, 0));
    ASSERTm(S1("m"), I2(1));                    ASSERT(evals(1, 1, 0));
    ASSERT_FALSE(I1(0));                        ASSERT(evals(1, 0, 0));
    ASSERT_FALSEm(S1("m"), I2(0));              ASSERT(evals(1, 1, 0));
    ASSERT_EQ(I1(3), I2(3));                    ASSERT(evals(1, 1, 0));
    ASSERT_EQm(S1("m"), I2(3), I3(3));          ASSERT(evals(1, 1, 1));
    ASSERT_NEQ(I1(3), I2(4));                   ASSERT(evals(1, 1, 0));
    ASSERT_LT(I1(3), I2(4));                    ASSERT(evals(1, 1, 0));
    ASSERT_LE(I1(3), I2(3));                    ASSERT(evals(1, 1, 0));
    ASSERT_GT(I1(4), I2(3));                    ASSERT(evals(1, 1, 0));
    ASSERT_GE(I1(3), I2(3));                    ASSERT(evals(1, 1, 0));
    ASSERT_IN_RANGE(D1(1), D2(1.5), D3(0.5));   ASSERT(evals(1, 1, 1));
    ASSERT_STR_EQ(S1("a"), S2("a"));            ASSERT(evals(1, 1, 0));
    ASSERT_CONTAINS(S1("abc"), S2("b"));        ASSERT(evals(1, 1, 0));
    ASSERT_NULL(P1(NULL));                      ASSERT(evals(1, 0, 0));
    ASSERT_NOT_NULL(P1(&x));                    ASSERT(evals(1, 0, 0));
    PASS();
}

SUITE(assert_pass)
{
    RUN_TEST(pass_bool);
    RUN_TEST(pass_eq);
    RUN_TEST(pass_order);
    RUN_TEST(pass_range);
    RUN_TEST(pass_strings);
    RUN_TEST(pass_pointers);
    RUN_TEST(pass_check_call);
    RUN_TEST(pass_eval_once);
}

/* ------------------------------------------------------------------------ */
/* Suite fail_paths: helpers that must fail (or skip), and a table of what
 * each must report.                                                         */

static char long_a[1001], long_b[1001];
static int dummy_object;

TEST h_assert(void)          { ASSERT(I1(0)); reached = 1; PASS(); }
TEST h_assertm(void)         { ASSERTm(S1("custom message"), I2(0)); reached = 1; PASS(); }
TEST h_assert_false(void)    { ASSERT_FALSE(I1(7)); reached = 1; PASS(); }
TEST h_assert_falsem(void)   { ASSERT_FALSEm(S1("should be off"), I2(7)); reached = 1; PASS(); }
TEST h_eq(void)              { ASSERT_EQ(I1(2), I2(3)); reached = 1; PASS(); }
TEST h_eqm(void)             { ASSERT_EQm(S1("sizes"), I2(2), I3(3)); reached = 1; PASS(); }
TEST h_eq_big(void)          { ASSERT_EQ(I1(9007199254740993LL), I2(9007199254740992LL)); reached = 1; PASS(); }
TEST h_neq(void)             { ASSERT_NEQ(I1(5), I2(5)); reached = 1; PASS(); }
TEST h_lt(void)              { ASSERT_LT(I1(3), I2(2)); reached = 1; PASS(); }
TEST h_le(void)              { ASSERT_LE(D1(0.75), D2(0.5)); reached = 1; PASS(); }
TEST h_gt(void)              { ASSERT_GT(I1(2), I2(2)); reached = 1; PASS(); }
TEST h_ge(void)              { ASSERT_GE(I1(-1), I2(0)); reached = 1; PASS(); }
TEST h_in_range(void)        { ASSERT_IN_RANGE(D1(1.0), D2(1.1), D3(0.01)); reached = 1; PASS(); }
TEST h_in_range_nan(void)    { ASSERT_IN_RANGE(D1(0.0), D2(not_a_number()), D3(1.0)); reached = 1; PASS(); }
TEST h_in_range_nan_tol(void){ ASSERT_IN_RANGE(D1(1.0), D2(1.0 + 1e-9), D3(not_a_number())); reached = 1; PASS(); }
TEST h_str_eq(void)          { ASSERT_STR_EQ(S1("abc"), S2("abd")); reached = 1; PASS(); }
TEST h_str_eq_null(void)     { ASSERT_STR_EQ(S1("abc"), S2(NULL)); reached = 1; PASS(); }
TEST h_str_eq_escapes(void)  { ASSERT_STR_EQ(S1("a\nb\""), S2("a\tb\x01")); reached = 1; PASS(); }
TEST h_str_eq_long(void)     { ASSERT_STR_EQ(S1(long_a), S2(long_b)); reached = 1; PASS(); }
TEST h_contains(void)        { ASSERT_CONTAINS(S1("haystack"), S2("needle")); reached = 1; PASS(); }
TEST h_contains_null(void)   { ASSERT_CONTAINS(S1(NULL), S2("x")); reached = 1; PASS(); }
TEST h_contains_null_needle(void) { ASSERT_CONTAINS(S1("abc"), S2(NULL)); reached = 1; PASS(); }
TEST h_null(void)            { ASSERT_NULL(P1(&dummy_object)); reached = 1; PASS(); }
TEST h_not_null(void)        { ASSERT_NOT_NULL(P1(NULL)); reached = 1; PASS(); }
TEST h_fail(void)            { FAIL(); }
TEST h_failm(void)           { FAILm(S1("bad thing")); }
TEST h_failf(void)           { FAILf("got %d widgets, wanted %s", (int)I1(42), "none"); }
TEST h_failf_noargs(void)    { FAILf("no arguments"); }
TEST h_check_call(void)      { CHECK_CALL(h_eq()); reached = 1; PASS(); }
TEST h_skip(void)            { SKIP(); }
TEST h_skipm(void)           { SKIPm(S1("later")); }

struct fail_case {
    const char *name;                 /* the test's name */
    enum harness_result (*fn)(void);  /* the helper */
    enum harness_result want;
    const char *text;                 /* the message must contain this */
    int evals;                        /* args 1..evals evaluated once each */
};

static struct fail_case fail_cases[] = {
    {"fails_ASSERT", h_assert, HARNESS_FAIL, "ASSERT(I1(0)): expected true, got false", 1},
    {"fails_ASSERTm", h_assertm, HARNESS_FAIL,
     "custom message (I2(0)): expected true, got false", 2},
    {"fails_ASSERT_FALSE", h_assert_false, HARNESS_FAIL,
     "ASSERT_FALSE(I1(7)): expected false, got true", 1},
    {"fails_ASSERT_FALSEm", h_assert_falsem, HARNESS_FAIL,
     "should be off (I2(7)): expected false, got true", 2},
    {"fails_ASSERT_EQ", h_eq, HARNESS_FAIL, "ASSERT_EQ(I1(2), I2(3)): expected 2, got 3", 2},
    {"fails_ASSERT_EQm", h_eqm, HARNESS_FAIL,
     "sizes (ASSERT_EQ(I2(2), I3(3))): expected 2, got 3", 3},
    {"fails_ASSERT_EQ_big", h_eq_big, HARNESS_FAIL,
     "expected 9007199254740993, got 9007199254740992", 2},
    {"fails_ASSERT_NEQ", h_neq, HARNESS_FAIL,
     "ASSERT_NEQ(I1(5), I2(5)): expected two different values, got 5 and 5", 2},
    {"fails_ASSERT_LT", h_lt, HARNESS_FAIL,
     "ASSERT_LT(I1(3), I2(2)): expected a < b, got a = 3, b = 2", 2},
    {"fails_ASSERT_LE", h_le, HARNESS_FAIL,
     "ASSERT_LE(D1(0.75), D2(0.5)): expected a <= b, got a = 0.75, b = 0.5", 2},
    {"fails_ASSERT_GT", h_gt, HARNESS_FAIL, "expected a > b, got a = 2, b = 2", 2},
    {"fails_ASSERT_GE", h_ge, HARNESS_FAIL, "expected a >= b, got a = -1, b = 0", 2},
    {"fails_ASSERT_IN_RANGE", h_in_range, HARNESS_FAIL,
     "ASSERT_IN_RANGE(D1(1.0), D2(1.1), D3(0.01)): expected 1 +/- 0.01, got 1.1 (off by 0.1", 3},
    {"fails_ASSERT_IN_RANGE_nan", h_in_range_nan, HARNESS_FAIL, "expected 0 +/- 1, got ", 3},
    {"fails_ASSERT_IN_RANGE_nan_tol", h_in_range_nan_tol, HARNESS_FAIL, "expected 1 +/- ", 3},
    {"fails_ASSERT_STR_EQ", h_str_eq, HARNESS_FAIL,
     "ASSERT_STR_EQ(S1(\"abc\"), S2(\"abd\")): expected \"abc\", got \"abd\" "
     "(they differ at offset 2)", 2},
    {"fails_ASSERT_STR_EQ_null", h_str_eq_null, HARNESS_FAIL,
     "expected \"abc\", got NULL", 2},
    {"fails_ASSERT_STR_EQ_escapes", h_str_eq_escapes, HARNESS_FAIL,
     "expected \"a\\nb\\\"\", got \"a\\tb\\x01\" (they differ at offset 1)", 2},
    {"fails_ASSERT_STR_EQ_long", h_str_eq_long, HARNESS_FAIL,
     "xxx...\" (they differ at offset 999)", 2},
    {"fails_ASSERT_CONTAINS", h_contains, HARNESS_FAIL,
     "ASSERT_CONTAINS(S1(\"haystack\"), S2(\"needle\")): "
     "expected a string containing \"needle\", got \"haystack\"", 2},
    {"fails_ASSERT_CONTAINS_null", h_contains_null, HARNESS_FAIL,
     "expected a string containing \"x\", got NULL", 2},
    {"fails_ASSERT_CONTAINS_null_needle", h_contains_null_needle, HARNESS_FAIL,
     "expected a string containing NULL, got \"abc\"", 2},
    {"fails_ASSERT_NULL", h_null, HARNESS_FAIL, "ASSERT_NULL(P1(&dummy_object)): expected NULL, got ", 1},
    {"fails_ASSERT_NOT_NULL", h_not_null, HARNESS_FAIL,
     "ASSERT_NOT_NULL(P1(NULL)): expected non-NULL, got NULL", 1},
    {"fails_FAIL", h_fail, HARNESS_FAIL, "FAIL()", 0},
    {"fails_FAILm", h_failm, HARNESS_FAIL, "bad thing", 1},
    {"fails_FAILf", h_failf, HARNESS_FAIL, "got 42 widgets, wanted none", 1},
    {"fails_FAILf_noargs", h_failf_noargs, HARNESS_FAIL, "no arguments", 0},
    {"fails_CHECK_CALL", h_check_call, HARNESS_FAIL, "ASSERT_EQ(I1(2), I2(3)): expected 2, got 3", 2},
    {"skips_SKIP", h_skip, HARNESS_SKIP, NULL, 0},
    {"skips_SKIPm", h_skipm, HARNESS_SKIP, "later", 1},
};

TEST check_fail_case(void *arg)
{
    const struct fail_case *c = (const struct fail_case *)arg;
    char msg[HARNESS_MSG_MAX];
    const char *file;
    enum harness_result r;
    int k;

    reset_counts();
    r = c->fn();
    /* copy the helper's report before any assertion here overwrites it */
    snprintf(msg, sizeof msg, "%s", harness_state_.msg);
    file = harness_state_.msg_file;

    ASSERT_EQm("result", c->want, r);
    ASSERTm("code after the failing macro ran", !reached);
    for (k = 1; k <= 3; k++)
        ASSERT_EQm("evaluations of the argument", k <= c->evals ? 1 : 0, n_arg[k]);
    ASSERT_NOT_NULL(file);
    ASSERT_CONTAINS(file, "harness_selftest.c");
    ASSERT_GT(harness_state_.msg_line, 0);
    if (c->text != NULL) ASSERT_CONTAINS(msg, c->text);
    else ASSERT_STR_EQ("", msg);
    ASSERT_LT(strlen(msg), HARNESS_MSG_MAX - 1);   /* not truncated */
    PASS();
}

SUITE(fail_paths)
{
    size_t i;
    memset(long_a, 'x', 1000);
    memcpy(long_b, long_a, sizeof long_b);
    long_b[999] = 'y';
    for (i = 0; i < sizeof fail_cases / sizeof fail_cases[0]; i++)
        RUN_TEST_NAMED(fail_cases[i].name, check_fail_case, &fail_cases[i]);
}

/* ------------------------------------------------------------------------ */
/* Suite outcomes: real failures and skips, as the user sees them            */

TEST pass_plain(void) { PASS(); }
TEST fail_plain(void) { FAIL(); }
TEST skip_plain(void) { SKIP(); }
TEST fail_msg(void) { FAILm("something broke"); }
TEST fail_fmt(void) { FAILf("got %d widgets", 42); }
TEST skip_msg(void) { SKIPm("not today"); }
TEST fail_assert(void)
{
    int four = 4;
    ASSERT_EQ(four, 2 + 3);
    PASS();
}

SUITE(outcomes)
{
    RUN_TEST(pass_plain);
    RUN_TEST(fail_plain);
    RUN_TEST(skip_plain);
    RUN_TEST(fail_msg);
    RUN_TEST(fail_fmt);
    RUN_TEST(skip_msg);
    RUN_TEST(fail_assert);
}

/* ------------------------------------------------------------------------ */
/* Suite table: one named test per row                                       */

struct square { int x, want; };

static struct square squares[] = {
    {0, 0}, {3, 9}, {4, 15} /* wrong on purpose: square_row_2 fails */, {-5, 25},
};
static struct square named_square = {9, 81};

TEST square_row(void *arg)
{
    const struct square *s = (const struct square *)arg;
    ASSERT_EQ(s->want, s->x * s->x);
    PASS();
}

/* RUN_TEST_NAMED (and RUN_TESTp) call fn(arg) directly: typed pointers work */
TEST square_typed(const struct square *s)
{
    ASSERT_EQ(s->want, s->x * s->x);
    PASS();
}

SUITE(table)
{
    size_t i;
    char name[64];
    for (i = 0; i < sizeof squares / sizeof squares[0]; i++)
        RUN_TESTp(square_row, &squares[i]);
    snprintf(name, sizeof name, "square_named_%d", named_square.x);
    RUN_TEST_NAMED(name, square_typed, &named_square);
}

/* ------------------------------------------------------------------------ */
/* Suite hooks, and hooks at top level                                       */

static int hook_token, top_token;
static int setup_calls, teardown_calls, bad_udata, top_hook_ran;

static void count_setup(void *udata)
{
    setup_calls++;
    if (udata != &hook_token) bad_udata = 1;
}

static void count_teardown(void *udata)
{
    teardown_calls++;
    if (udata != &hook_token) bad_udata = 1;
}

static void top_setup(void *udata)
{
    top_hook_ran = 1;
    if (udata != &top_token) bad_udata = 1;
}

TEST hooks_none_yet(void)
{
    ASSERTm("the outer hook must not run inside a suite", !top_hook_ran);
    ASSERT_EQ(teardown_calls, setup_calls);
    PASS();
}

TEST hooks_first(void)
{
    ASSERT_FALSE(bad_udata);
    ASSERTm("the outer hook must not run inside a suite", !top_hook_ran);
    ASSERT_EQ(teardown_calls + 1, setup_calls);
    PASS();
}

TEST hooks_second(void)
{
    ASSERT_FALSE(bad_udata);
    ASSERTm("the outer hook must not run inside a suite", !top_hook_ran);
    ASSERT_EQ(teardown_calls + 1, setup_calls);
    PASS();
}

SUITE(hooks)
{
    RUN_TEST(hooks_none_yet);     /* RUN_SUITE cleared the outer hooks */
    SET_SETUP(count_setup, &hook_token);
    SET_TEARDOWN(count_teardown, &hook_token);
    RUN_TEST(hooks_first);
    RUN_TEST(hooks_second);
}

TEST top_hook_runs(void)
{
    ASSERT(top_hook_ran);
    ASSERT_FALSE(bad_udata);
    top_hook_ran = 0;
    PASS();
}

TEST top_hook_restored(void)
{
    CHECK_CALL(top_hook_runs());
    PASS();
}

TEST top_no_hooks(void)
{
    ASSERT_FALSE(top_hook_ran);
    ASSERT_EQ(setup_calls, teardown_calls);
    PASS();
}

TEST top_param(void *arg)
{
    ASSERT_GT(*(const int *)arg, 0);
    PASS();
}

/* ------------------------------------------------------------------------ */

HARNESS_MAIN_DEFS();

int main(int argc, char **argv)
{
    static int params[2] = {1, 2};

    HARNESS_MAIN_BEGIN(argc, argv);
    RUN_SUITE(assert_pass);
    RUN_SUITE(fail_paths);
    RUN_SUITE(outcomes);
    RUN_SUITE(table);

    SET_SETUP(top_setup, &top_token);
    RUN_TEST(top_hook_runs);
    RUN_SUITE(hooks);                  /* saves, clears and restores the hook */
    RUN_TEST(top_hook_restored);
    SET_SETUP(NULL, NULL);
    RUN_TEST(top_no_hooks);

    RUN_TESTp(top_param, &params[0]);  /* top_param_0 */
    RUN_TESTp(top_param, &params[1]);  /* top_param_1 */
    HARNESS_MAIN_END();
}
