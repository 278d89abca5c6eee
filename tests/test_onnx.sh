#!/bin/sh
# tests/test_onnx.sh — gdl_export_onnx and gdl_load_onnx against the real runtimes (make test-onnx).
#
#   sh tests/test_onnx.sh EXPORT_PROGRAM... [-- IMPORT_PROGRAM...]
#
# Each export program (tests/onnx_export.c, built plain or with sanitizers) exports the test's nets into
# a directory of its own; tests/onnx_check.py then checks every file with onnx.checker
# (full_check) and runs it in ONNX Runtime against gpudl's outputs. Then each import program
# (tests/onnx_import.c) runs the committed PyTorch exports of tests/onnx_fixtures (written by hand with
# tests/onnx_torch.py, `make onnx-fixtures`) with gdl_onnx_run against the outputs and the SGD step
# PyTorch saved beside them: no torch here. The Python side (onnx, onnxruntime, numpy) lives in the venv
# that `sh tools/deps.sh onnx` makes (build/onnx-venv; ONNX_VENV overrides): without it the test fails
# and says so. Ends with tests/run.sh's "N passed, N failed, N skipped" line.
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${ONNX_VENV:-$root/build/onnx-venv}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_onnx.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
passed=0 failed=0
if [ $# -eq 0 ]; then echo "usage: sh tests/test_onnx.sh EXPORT_PROGRAM... [-- IMPORT_PROGRAM...]" >&2; exit 2; fi
need='import onnx, onnxruntime, numpy'
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
    for prog in "$@"; do
        echo "== $prog $root/tests/onnx_fixtures"
        if "$prog" "$root/tests/onnx_fixtures"; then
            passed=$((passed + 1))
        else
            echo "FAIL test_onnx: $prog"
            failed=$((failed + 1))
        fi
    done
fi
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" -eq 0 ]
