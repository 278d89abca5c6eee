#!/bin/sh
# windows_examples.sh — the examples' Windows builds as a user runs them, under
# Wine (make test-windows): each one's --help and a refused flag, the data not
# found, a short real run of each that needs no MPI, GPU or NVML, and one
# Fashion-MNIST epoch where the data is installed. (tests/test_examples.sh is
# the full Linux version; this keeps Wine's time short.)
# Usage: tests/windows_examples.sh DIR   (DIR: the programs' wrappers from
# tests/windows.mk, which run NAME.exe under Wine). Ends with
# "N passed, N failed, N skipped".
set -u
b=$1
pass=0 fail=0 skip=0
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
. "$(dirname "$0")/expect.sh" # expect STATUS PATTERN COMMAND...
echo "== the examples under Wine"
for e in mnist_mlp cnn keras_style linear_regression model_parallel ddp cpu_vs_gpu; do
    expect 0 "^usage: " "$b/$e" --help
    expect 2 "unknown option '--bogus'" "$b/$e" --bogus
done
for e in mnist_mlp cnn keras_style model_parallel ddp; do
    expect 1 "not found in $t/none (the directory given)" "$b/$e" --data "$t/none" --epochs 1
done
expect 2 "\-\-epochs '0': expected a whole number" "$b/mnist_mlp" --epochs 0
expect 0 "learned" "$b/linear_regression" --epochs 3 --device cpu
expect 0 "" "$b/device_query"
expect 1 "gpu_monitor: gdl_gpu_count: NVML not available" env GPUDL_NVML_LIB=C:/nonexistent.dll "$b/gpu_monitor" --count 1
if [ -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ]; then
    expect 0 "test accuracy [0-9]" "$b/mnist_mlp" --epochs 1 --device cpu --batch-size 128 --seed 3 --csv "$t/m.csv"
    expect 0 "^1,0\.[0-9]*,nan,0\.[0-9]*,0\.[0-9]*," sed 's/\r$//' "$t/m.csv"
else
    skip=$((skip + 2)); echo "  SKIP the Fashion-MNIST epoch: the data is not installed (sh tools/deps.sh test installs it)"
fi
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
