# stats.sh — sourced by the bench/ scripts that sum their runs up (from the repository root):
#   median FILE   the median of FILE's numbers, one a line (the mean of the middle two when even)
median() { sort -g "$1" | awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
#   util_env FILE the C side's last utilisation line in FILE (gdl_flops_line) as the PyTorch twin's
#                 environment (bench/pytorch/flops.py): BENCH_FLOPS_PER_STEP=X BENCH_PEAK_GFLOPS=P; nothing
#                 where FILE has none
util_env() {
    sed -n 's/.*FLOPs\/step \([0-9.e+-]*\), .* of peak (\([0-9.]*\) GFLOP\/s.*/BENCH_FLOPS_PER_STEP=\1 BENCH_PEAK_GFLOPS=\2/p' "$1" |
        tail -n 1
}
#   util FILE     the last utilisation line's "Y GFLOP/s, Z % of peak" in FILE ("-" where none)
util() { sed -n 's/.*FLOPs\/step [^,]*, \([0-9.]* GFLOP\/s, [0-9.]* % of peak\).*/\1/p' "$1" | tail -n 1 | grep . || echo -; }
