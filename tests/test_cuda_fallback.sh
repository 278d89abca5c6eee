#!/bin/sh
# test_cuda_fallback.sh — a CUDA build run where there is no GPU falls back to
# the CPU and says so once on stderr; GPUDL_QUIET=1 silences it. Where a GPU
# is present there is nothing to fall back from: skipped.
# Usage: tests/test_cuda_fallback.sh BUILD_DIR (with cuda_device_query built)
set -u
b=${1:-${GPUDL_BUILD:-build}}
out=$("$b/cuda_device_query" 2>&1 >/dev/null)
if "$b/cuda_device_query" 2>/dev/null | grep -q 'CUDA available: yes'; then
    echo "SKIP: a GPU is present"; echo "0 passed, 0 failed, 1 skipped"; exit 0
fi
pass=0 fail=0
n=$(printf '%s\n' "$out" | grep -c 'gpudl: no CUDA device found')
if [ "$n" -eq 1 ]; then pass=$((pass + 1)); echo "  ok   one fallback notice on stderr"
else fail=$((fail + 1)); echo "  FAIL expected one fallback notice, got $n:"; printf '%s\n' "$out"; fi
q=$(GPUDL_QUIET=1 "$b/cuda_device_query" 2>&1 >/dev/null)
if [ -z "$q" ]; then pass=$((pass + 1)); echo "  ok   GPUDL_QUIET=1: nothing on stderr"
else fail=$((fail + 1)); echo "  FAIL GPUDL_QUIET=1 still printed:"; printf '%s\n' "$q"; fi
echo "$pass passed, $fail failed, 0 skipped"
[ $fail -eq 0 ]
