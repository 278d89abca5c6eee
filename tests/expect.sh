# expect.sh — the check the examples' scripts share (tests/test_examples.sh,
# tests/windows_examples.sh), sourced by them. The sourcing script sets
# pass=0 fail=0 and a scratch directory $t.
# expect STATUS PATTERN COMMAND...: runs it, checks its exit status and that its output has PATTERN
expect() {
    want=$1 pat=$2; shift 2
    "$@" >"$t/out" 2>&1
    rc=$?
    if [ $rc -eq "$want" ] && { [ -z "$pat" ] || grep -q -e "$pat" "$t/out"; }; then pass=$((pass + 1)); echo "  ok   $*"
    else fail=$((fail + 1)); echo "  FAIL $* (exit $rc, wanted $want and '$pat'):"; sed 's/^/       /' "$t/out" | head -n 8
    fi
}
