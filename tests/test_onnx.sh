#!/bin/sh
# tests/test_onnx.sh — gdl_export_onnx and gdl_load_onnx against the real runtimes (make test-onnx).
#
#   sh tests/test_onnx.sh EXPORT_PROGRAM... [-- IMPORT_PROGRAM...]
#
# Each export program (tests/onnx_export.c, built plain or with sanitizers) exports the test's nets into
# a directory of its own; tests/onnx_check.py then checks every file with onnx.checker
# (full_check) and runs it in ONNX Runtime against gpudl's outputs. Then tests/onnx_torch.py exports
# small PyTorch nets with both torch.onnx.export exporters (once), and each import program
# (tests/onnx_import.c) runs them with gdl_onnx_run against PyTorch's outputs. The Python side lives in
# the venv that `sh tools/deps.sh onnx` makes (build/onnx-venv; ONNX_VENV overrides): without it the
# test fails and says so. Ends with tests/run.sh's "N passed, N failed, N skipped" line.
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${ONNX_VENV:-$root/build/onnx-venv}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_onnx.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
passed=0 failed=0
if [ $# -eq 0 ]; then echo "usage: sh tests/test_onnx.sh EXPORT_PROGRAM... [-- IMPORT_PROGRAM...]" >&2; exit 2; fi
need='import onnx, onnxruntime, numpy'
case " $* " in *" -- "*) need="$need, torch, onnxscript" ;; esac
if ! "$venv/bin/python" -c "$need" 2>/dev/null; then
    echo "FAIL test_onnx: $venv cannot '$need': run sh tools/deps.sh onnx"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
fi
n=0
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    prog=$1
    shift
    n=$((n + 1))
    dir="$tmp/$n"
    mkdir -p "$dir"
    echo "== $prog"
    if "$prog" "$dir" && "$venv/bin/python" "$root/tests/onnx_check.py" "$dir"; then
        passed=$((passed + 1))
    else
        echo "FAIL test_onnx: $prog"
        failed=$((failed + 1))
    fi
done
if [ "${1:-}" = "--" ]; then
    shift
    echo "== tests/onnx_torch.py"
    mkdir -p "$tmp/torch"
    # the exporters' progress and warnings go to a log, shown when the export fails
    if "$venv/bin/python" "$root/tests/onnx_torch.py" "$tmp/torch" 2>"$tmp/torch.log"; then
        for prog in "$@"; do
            echo "== $prog"
            if "$prog" "$tmp/torch"; then
                passed=$((passed + 1))
            else
                echo "FAIL test_onnx: $prog"
                failed=$((failed + 1))
            fi
        done
    else
        tail -n 30 "$tmp/torch.log"
        echo "FAIL test_onnx: tests/onnx_torch.py"
        failed=$((failed + 1))
    fi
fi
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" -eq 0 ]
