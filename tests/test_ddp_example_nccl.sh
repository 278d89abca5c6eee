#!/bin/sh
# test_ddp_example_nccl.sh — examples/ddp.c on two emulated GPUs, started
# torchrun-style without MPI (NCCL over the emulator, the id over the TCP
# rendezvous): two ranks at batch 32 must print the first epoch's loss and
# test accuracy that one process at batch 64 prints (mnist_mlp on the CPU).
# Needs Fashion-MNIST (skipped without it).
# Usage: tests/test_ddp_example_nccl.sh [BUILD_DIR] (default build)
b=${1:-${GPUDL_BUILD:-build}}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
found=
for d in "${GPUDL_DATA:-}" data /usr/share/datasets/fashion-mnist; do
    [ -n "$d" ] && ls "$d"/train-images-idx3-ubyte* >/dev/null 2>&1 && found=$d
done
if [ -z "$found" ]; then
    echo "SKIPPED: no Fashion-MNIST"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
       echo $((20000 + $$ % 20000)))
for r in 0 1; do
    GPUDL_EMU_DEVICES=2 RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port GPUDL_DIST_TIMEOUT=60 \
        timeout 300 "$b/emu_ddp" --epochs 1 --batch-size 32 >"$tmp/rank.$r" 2>&1 &
done
wait
one=$("$b/mnist_mlp" --epochs 1 --batch-size 64 --device cpu --csv /dev/null 2>&1)
tail -n 3 "$tmp/rank.0"
tail -n 1 "$tmp/rank.1"
l2=$(sed -n 's/^epoch 1\/1: loss \([0-9.]*\) over 60000 samples, test accuracy \([0-9.]*\)%.*/\1 \2/p' "$tmp/rank.0")
l1=$(printf '%s\n' "$one" | sed -n 's/^epoch 1\/1: loss \([0-9.]*\) val_loss [0-9.]* val_acc \([0-9.]*\)%.*/\1 \2/p')
if [ -n "$l2" ] && [ "$l2" = "$l1" ]; then
    echo "ok: 2 emulated GPUs x 32 (NCCL, torchrun-style) and 1 CPU process x 64 agree: loss, test accuracy $l2"
    echo "1 passed, 0 failed, 0 skipped"
else
    echo "FAIL: 2 emulated GPUs x 32 printed '$l2', 1 CPU process x 64 printed '$l1'"
    cat "$tmp/rank.1"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
fi
