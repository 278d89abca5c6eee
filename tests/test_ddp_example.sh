#!/bin/sh
# test_ddp_example.sh — examples/ddp.c as a user runs it: two MPI ranks at
# batch 32 each must train exactly what one process at batch 64 trains
# (the sampler interleaves each global batch across the ranks, and the
# averaged gradient is the global batch's), so the first epoch's loss and
# test accuracy printed by both agree. Needs Fashion-MNIST.
# Usage: tests/test_ddp_example.sh [BUILD_DIR] (default build)
b=${1:-${GPUDL_BUILD:-build}}
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
pass=0 fail=0
two=$(timeout 300 mpirun --oversubscribe $root -np 2 "$b/ddp_mpi" --epochs 1 --batch-size 32 2>&1)
one=$("$b/mnist_mlp" --epochs 1 --batch-size 64 --device cpu --csv /dev/null 2>&1)
printf '%s\n' "$two" | tail -n 3
l2=$(printf '%s\n' "$two" | sed -n 's/^epoch 1\/1: loss \([0-9.]*\) over 60000 samples, test accuracy \([0-9.]*\)%.*/\1 \2/p')
# mnist_mlp's epoch line: "epoch 1/1: loss L val_loss V val_acc A% ..."
l1=$(printf '%s\n' "$one" | sed -n 's/^epoch 1\/1: loss \([0-9.]*\) val_loss [0-9.]* val_acc \([0-9.]*\)%.*/\1 \2/p')
if [ -n "$l2" ] && [ "$l2" = "$l1" ]; then
    pass=$((pass + 1))
    echo "ok: 2 ranks x 32 and 1 process x 64 agree: loss, test accuracy $l2"
else
    fail=$((fail + 1))
    echo "FAIL: 2 ranks x 32 printed '$l2', 1 process x 64 printed '$l1'"
    printf '%s\n' "$one" | tail -n 5
fi
# rank 0's utilisation line after the epoch: its share of each step, its FLOPs and time
if printf '%s\n' "$two" | grep -q '^utilisation: FLOPs/step [0-9.e+]*, [0-9.]* GFLOP/s, [0-9.]* % of peak'; then
    pass=$((pass + 1)); echo "ok: rank 0 prints its utilisation"
else
    fail=$((fail + 1)); echo "FAIL: no utilisation line from rank 0"
fi
echo "$pass passed, $fail failed, 0 skipped"
[ $fail -eq 0 ]
