#!/bin/sh
# compare_rnn.sh — gpudl's LSTM and GRU training step against PyTorch's on the CPU at the shapes of
# examples/text_classify.c (bench/rnn_train.c and its twin bench/pytorch/rnn_train.py), interleaved
# (ours, PyTorch, ours, ...) on THREADS threads, REPEATS times: bench/compare_cpu.sh with that pair of
# programs, so it prints the same (each run, the medians, the ratio ours/PyTorch, below 1: gpudl is
# faster; the utilisation lines; the load average before and after).
#   sh bench/compare_rnn.sh [lstm] [gru]     THREADS=1 REPEATS=3 TORCH_VENV=build/torch-venv (the defaults)
#   BASE=PROGRAM: also an earlier build of bench/rnn_train.c (a copy of build/bench_rnn_train), interleaved
#   with the two, for before / after on one busy machine
set -e
cd "$(dirname "$0")/.."
# shellcheck disable=SC2048,SC2086 # the nets: words, split on purpose
OURS=build/bench_rnn_train TWIN=bench/pytorch/rnn_train.py THREADS=${THREADS:-1} REPEATS=${REPEATS:-3} \
    exec sh bench/compare_cpu.sh ${*:-lstm gru}
