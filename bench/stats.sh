# stats.sh — sourced by the bench/ scripts that sum their runs up (from the repository root):
#   median FILE   the median of FILE's numbers, one a line (the mean of the middle two when even)
median() { sort -g "$1" | awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
