#!/bin/sh
# harness_selftest.sh -- proves that tests/harness.h works.
#
# Builds tests/harness_selftest.c three ways, each with
# -Wall -Wextra -Wpedantic -Werror:
#   c99        $CC -std=c99                          (timer falls back to clock())
#   c99posix   $CC -std=c99 -D_POSIX_C_SOURCE=200809L (clock_gettime)
#   cxx17      $CXX -std=c++17 -x c++
# then runs every build with various flags and checks the output and the exit
# status: the exact last line, exit 1 on failures, 0 when all pass, 2 on a bad
# flag, and what -t, -s, -x, -l, -f and -v do.
#
# Usage: tests/harness_selftest.sh
#   CC              C compiler (default cc)
#   CXX             C++ compiler (default c++; the C++ build is skipped, with a
#                   note, if it is not installed)
#   HARNESS_CFLAGS  extra flags for every build, e.g.
#                   HARNESS_CFLAGS=-fsanitize=address,undefined
# Prints "harness selftest: ok" and exits 0 if every check passes; otherwise
# shows the output of the run that broke, names the check, and exits 1.
# Builds in a temporary directory (mktemp -d) that it removes afterwards.

set -u

here=$(cd "$(dirname "$0")" && pwd) || exit 1
src=$here/harness_selftest.c
CC=${CC:-cc}
CXX=${CXX:-c++}
WARN="-Wall -Wextra -Wpedantic -Werror"
EXTRA=${HARNESS_CFLAGS:-}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/harness_selftest.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM          # the EXIT trap then cleans up

die() { echo "harness selftest: FAILED: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------
# run BIN ARGS...: stdout to $tmp/out, stderr to $tmp/err, exit status to $rc

run() {
    bin=$1
    shift
    what="$(basename "$bin") $*"
    "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}

show() {
    {
        echo "--- stdout of [$what]:"
        cat "$tmp/out"
        echo "--- stderr of [$what]:"
        cat "$tmp/err"
        echo "---"
    } >&2
}

check_rc() {
    [ "$rc" -eq "$1" ] || { show; die "[$what] exit status $rc, expected $1"; }
}

# The run's last stdout line is exactly $1, the output ends there (with a
# newline), and nothing went to stderr.
check_last() {
    last=$(tail -n 1 "$tmp/out")
    [ "$last" = "$1" ] || { show; die "[$what] last line is '$last', expected '$1'"; }
    [ -z "$(tail -c 1 "$tmp/out")" ] || { show; die "[$what] stdout does not end with a newline"; }
    [ ! -s "$tmp/err" ] || { show; die "[$what] unexpected output on stderr"; }
}

has() {
    grep -E -q -- "$1" "$tmp/out" || { show; die "[$what] stdout has no line matching /$1/"; }
}

lacks() {
    if grep -E -q -- "$1" "$tmp/out"; then
        show
        die "[$what] stdout has a line matching /$1/, which it should not"
    fi
}

err_has() {
    grep -E -q -- "$1" "$tmp/err" || { show; die "[$what] stderr has no line matching /$1/"; }
}

# stdout is exactly the lines given as arguments
out_is() {
    printf '%s\n' "$@" >"$tmp/want"
    cmp -s "$tmp/want" "$tmp/out" || {
        show
        echo "--- expected:" >&2
        cat "$tmp/want" >&2
        die "[$what] stdout differs from what was expected"
    }
}

count_of() { grep -E -c -- "$1" "$tmp/out"; }

# ---------------------------------------------------------------------------
# The checks, for one build. Expected numbers follow harness_selftest.c:
# 59 tests = 52 pass + 5 fail + 2 skip, in 5 suites.

check_binary() {
    b=$1
    timer=$2

    # everything, default output
    run "$b"
    check_rc 1
    check_last "52 passed, 5 failed, 2 skipped"
    has '^\* Suite assert_pass:$'
    has '^\* assert_pass: 8 passed, 0 failed, 0 skipped \([0-9]+\.[0-9]{3} ms\)$'
    has '^\* fail_paths: 31 passed, 0 failed, 0 skipped '
    has '^\* outcomes: 1 passed, 4 failed, 2 skipped '
    has '^\* table: 4 passed, 1 failed, 0 skipped '
    has '^\* hooks: 3 passed, 0 failed, 0 skipped '
    has '^\.F$'
    has '^sF$'
    has '^FAIL fail_plain: .*harness_selftest\.c:[0-9]+: FAIL\(\)$'
    has '^FAIL fail_msg: .*harness_selftest\.c:[0-9]+: something broke$'
    has '^FAIL fail_fmt: .*harness_selftest\.c:[0-9]+: got 42 widgets$'
    has '^FAIL fail_assert: .*harness_selftest\.c:[0-9]+: ASSERT_EQ\(four, 2 \+ 3\): expected 4, got 5$'
    has '^FAIL square_row_2: .*harness_selftest\.c:[0-9]+: ASSERT_EQ\(s->want, s->x \* s->x\): expected 15, got 16$'
    [ "$(count_of '^FAIL ')" -eq 5 ] || { show; die "[$what] expected 5 FAIL lines"; }
    marks=$(grep -E '^[.sF]+$' "$tmp/out" | tr -d '\n')
    [ "${#marks}" -eq 59 ] || { show; die "[$what] expected 59 progress marks, got ${#marks}"; }
    lacks '^  PASS '
    lacks 'no tests ran'

    # verbose
    run "$b" -v
    check_rc 1
    check_last "52 passed, 5 failed, 2 skipped"
    has '^  PASS pass_plain \([0-9]+\.[0-9]{3} ms\)$'
    has '^  SKIP skip_plain \([0-9]+\.[0-9]{3} ms\)$'
    has '^  SKIP skip_msg \([0-9]+\.[0-9]{3} ms\): .*harness_selftest\.c:[0-9]+: not today$'
    has '^  FAIL fail_fmt \([0-9]+\.[0-9]{3} ms\): .*harness_selftest\.c:[0-9]+: got 42 widgets$'
    has '^  PASS fails_ASSERT_STR_EQ_long '
    has '^  PASS square_row_3 '
    has '^  PASS square_named_9 '
    has '^  PASS top_hook_restored '
    has '^  PASS top_param_0 '
    has '^  PASS top_param_1 '
    has "^ran 59 tests in [0-9]+\\.[0-9]{3} ms \\(timer: ($timer)\\)\$"
    [ "$(count_of '^  (PASS|FAIL|SKIP) ')" -eq 59 ] || { show; die "[$what] expected 59 result lines"; }
    lacks '^[.sF]+$'

    # -t: only tests whose name contains NAME
    run "$b" -t fails_
    check_rc 0
    check_last "29 passed, 0 failed, 0 skipped"
    lacks '^FAIL '

    run "$b" -t fail_
    check_rc 1
    check_last "0 passed, 4 failed, 0 skipped"

    run "$b" -v -t square_row
    check_rc 1
    check_last "3 passed, 1 failed, 0 skipped"
    has '^  FAIL square_row_2 '
    lacks 'square_named'
    lacks 'pass_plain'
    lacks 'Suite outcomes'          # suites with nothing to run stay quiet

    run "$b" -v -t square_row_3     # RUN_TESTp names do not shift under filters
    check_rc 0
    check_last "1 passed, 0 failed, 0 skipped"
    has '^  PASS square_row_3 '

    run "$b" -t pass_plain -t skip_
    check_rc 0
    check_last "1 passed, 0 failed, 2 skipped"

    run "$b" -t no_such_test
    check_rc 0
    check_last "0 passed, 0 failed, 0 skipped"
    has '^no tests ran'

    # -x: exclude tests and suites whose name contains NAME
    run "$b" -x outcomes
    check_rc 1
    check_last "51 passed, 1 failed, 0 skipped"
    lacks 'outcomes'

    run "$b" -x fail_ -x square_row_2   # fail_ also drops the suite fail_paths
    check_rc 0
    check_last "21 passed, 0 failed, 2 skipped"
    lacks 'fail_paths'

    run "$b" -x outcomes -x square_row_2
    check_rc 0
    check_last "51 passed, 0 failed, 0 skipped"

    run "$b" -v -x square_row_2
    check_rc 1
    check_last "52 passed, 4 failed, 2 skipped"
    has '^  PASS square_row_3 '
    lacks 'square_row_2'

    run "$b" -x top_
    check_rc 1
    check_last "47 passed, 5 failed, 2 skipped"

    # -s: only suites whose name contains NAME (top-level tests left out)
    run "$b" -v -s table
    check_rc 1
    check_last "4 passed, 1 failed, 0 skipped"
    has '^\* Suite table:$'
    lacks 'Suite outcomes'
    lacks 'top_'

    run "$b" -s assert_pass
    check_rc 0
    check_last "8 passed, 0 failed, 0 skipped"

    run "$b" -s hooks               # the hooks suite passes on its own too
    check_rc 0
    check_last "3 passed, 0 failed, 0 skipped"

    run "$b" -s table -s hooks
    check_rc 1
    check_last "7 passed, 1 failed, 0 skipped"

    run "$b" -s table -t named
    check_rc 0
    check_last "1 passed, 0 failed, 0 skipped"

    # -l: list, run nothing
    run "$b" -l
    check_rc 0
    [ ! -s "$tmp/err" ] || { show; die "[$what] unexpected output on stderr"; }
    has '^outcomes:$'
    has '^  fail_plain$'
    has '^  fails_ASSERT_EQ$'
    has '^  square_row_2$'
    has '^top_no_hooks$'
    has '^top_param_1$'
    lacks 'passed'
    lacks '^FAIL'
    [ "$(wc -l <"$tmp/out")" -eq 64 ] || { show; die "[$what] expected 64 lines (5 suites, 59 tests)"; }

    run "$b" -l -t square
    check_rc 0
    out_is "table:" "  square_row_0" "  square_row_1" "  square_row_2" "  square_row_3" \
        "  square_named_9"

    run "$b" -l -s hooks -x second
    check_rc 0
    out_is "hooks:" "  hooks_none_yet" "  hooks_first"

    # -f: stop at the first failure (outcomes/fail_plain, after 40 passes)
    run "$b" -f
    check_rc 1
    check_last "40 passed, 1 failed, 0 skipped"
    has '^FAIL fail_plain: '
    has '^stopped at the first failure'
    lacks 'fail_msg'
    lacks 'table'

    run "$b" -v -f -x outcomes
    check_rc 1
    check_last "41 passed, 1 failed, 0 skipped"
    has '^  FAIL square_row_2 '
    lacks 'square_row_3'
    lacks 'hooks'

    run "$b" -f -s assert_pass
    check_rc 0
    check_last "8 passed, 0 failed, 0 skipped"
    lacks 'stopped'

    # bad command lines: usage on stderr, status 2, nothing run
    run "$b" -z
    check_rc 2
    err_has '^Usage: '
    lacks 'passed'

    run "$b" -t
    check_rc 2
    err_has '^Usage: '

    run "$b" extra_argument
    check_rc 2
    err_has '^Usage: '

    run "$b" -h
    check_rc 0
    has '^Usage: '
    has '-t NAME'
    lacks 'passed'
}

# ---------------------------------------------------------------------------

build() {
    name=$1
    shift
    "$@" "$src" -o "$tmp/$name" || die "building $name failed: $*"
}

build c99 $CC -std=c99 $WARN $EXTRA
build c99posix $CC -std=c99 -D_POSIX_C_SOURCE=200809L $WARN $EXTRA
check_binary "$tmp/c99" 'clock\(\)'
check_binary "$tmp/c99posix" 'clock_gettime\(CLOCK_MONOTONIC\)'

cxx_cmd=${CXX%% *}
if command -v "$cxx_cmd" >/dev/null 2>&1; then
    build cxx17 $CXX -std=c++17 -x c++ $WARN $EXTRA
    check_binary "$tmp/cxx17" 'clock_gettime\(CLOCK_MONOTONIC\)|clock\(\)'
else
    echo "harness selftest: note: C++ compiler '$cxx_cmd' not found, C++ build skipped"
fi

echo "harness selftest: ok"
