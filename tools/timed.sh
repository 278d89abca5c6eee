#!/bin/sh
# tools/timed.sh — the time each part of `make test` takes (the Makefile's test-all).
#
#   sh tools/timed.sh run FILE PART COMMAND...
#       runs COMMAND, appends "PART SECONDS ok CPU" (or FAILED) to FILE and
#       exits with COMMAND's status. SECONDS: wall-clock; CPU: the CPU seconds
#       (user + system) of COMMAND and every process under it, which other
#       work on the machine hardly changes.
#   sh tools/timed.sh table FILE PART...
#       prints the PARTs' times from FILE as a table, in that order, with the
#       total; a PART that FILE does not name is "not run" (after a failure)
set -u

# cpu FILE: the user + system seconds of this shell's finished children, from
# the second line of `times` written to FILE (times must run in this shell:
# in $(...) or a pipe it would see a subshell's children only)
cpu() {
    tail -n 1 "$1" | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); t += a[1] * 60 + a[2] } printf "%d\n", t + 0.5 }'
}
case "${1:-}" in
run)
    [ $# -ge 4 ] || { echo "usage: sh tools/timed.sh run FILE PART COMMAND..." >&2; exit 2; }
    file=$2 part=$3
    shift 3
    mkdir -p "$(dirname "$file")" || exit 1
    tf=$(mktemp "${TMPDIR:-/tmp}/timed.XXXXXX") || exit 1
    start=$(date +%s)
    times >"$tf"
    c0=$(cpu "$tf")
    "$@"
    rc=$?
    times >"$tf"
    c1=$(cpu "$tf")
    rm -f "$tf"
    st=ok
    [ $rc -eq 0 ] || st=FAILED
    echo "$part $(($(date +%s) - start)) $st $((c1 - c0))" >>"$file"
    exit $rc
    ;;
table)
    [ $# -ge 2 ] || { echo "usage: sh tools/timed.sh table FILE PART..." >&2; exit 2; }
    file=$2
    shift 2
    total=0 ctotal=0 failed=
    echo
    echo "make test: the time of each part ($file)"
    printf '  %-18s %7s %8s %8s  %s\n' part seconds "min:s" "CPU s" result
    for part in "$@"; do
        line=$(grep "^$part " "$file" 2>/dev/null | tail -n 1)
        if [ -z "$line" ]; then
            printf '  %-18s %7s %8s %8s  %s\n' "$part" - - - "not run"
            continue
        fi
        secs=$(echo "$line" | cut -d' ' -f2)
        st=$(echo "$line" | cut -d' ' -f3)
        c=$(echo "$line" | cut -d' ' -f4)
        total=$((total + secs)) ctotal=$((ctotal + ${c:-0}))
        [ "$st" = ok ] || { st="FAILED <--"; failed="$failed $part"; }
        printf '  %-18s %7d %5d:%02d %8s  %s\n' "$part" "$secs" $((secs / 60)) $((secs % 60)) "${c:--}" "$st"
    done
    printf '  %-18s %7d %5d:%02d %8d  %s\n' total "$total" $((total / 60)) $((total % 60)) "$ctotal" "${failed:+failed:$failed}"
    if [ -r /proc/loadavg ]; then
        echo "  load average at the end (1, 5, 15 min): $(cut -d' ' -f1-3 /proc/loadavg)"
    fi
    ;;
*)
    echo "usage: sh tools/timed.sh run FILE PART COMMAND... | table FILE PART..." >&2
    exit 2
    ;;
esac
