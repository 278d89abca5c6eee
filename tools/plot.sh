#!/bin/sh
# tools/plot.sh — draws a metrics CSV (as gdl_fit and the examples write it:
# epoch,loss,accuracy,val_loss,val_accuracy,seconds,samples_per_sec) as a PNG
# of the loss and accuracy curves, train and validation, with gnuplot.
#   sh tools/plot.sh METRICS.csv [OUT.png]      (`make plot` draws make run's)
set -eu
csv=${1:?usage: sh tools/plot.sh METRICS.csv [OUT.png]}
png=${2:-${csv%.csv}.png}
[ -f "$csv" ] || { echo "plot: $csv not found (\`make run\` writes mnist_mlp_metrics.csv)" >&2; exit 1; }
[ "$(head -n 1 "$csv")" = "epoch,loss,accuracy,val_loss,val_accuracy,seconds,samples_per_sec" ] ||
    { echo "plot: $csv is not a gpudl metrics CSV (its header differs)" >&2; exit 1; }
[ "$(wc -l < "$csv")" -ge 2 ] || { echo "plot: $csv has no epochs yet" >&2; exit 1; }
command -v gnuplot >/dev/null 2>&1 || { echo "plot: gnuplot is missing: sh tools/deps.sh plot installs it" >&2; exit 1; }
# columns that are all nan (a loop that counts no training accuracy) are left out
has() { awk -F, -v c="$1" 'NR > 1 && $c != "nan" { found = 1 } END { exit !found }' "$csv"; }
loss_plot='"'"$csv"'" using 1:2 with linespoints title "train"'
acc_plot=""
has 4 && loss_plot="$loss_plot"', "'"$csv"'" using 1:4 with linespoints title "validation"'
has 3 && acc_plot='"'"$csv"'" using 1:($3*100) with linespoints title "train"'
has 5 && acc_plot="${acc_plot:+$acc_plot, }"'"'"$csv"'" using 1:($5*100) with linespoints title "validation"'
# gnuplot writes the PNG in place: draw into a temporary, then rename
tmp="$png.tmp.$$"
trap 'rm -f "$tmp"' EXIT
gnuplot <<GP
set terminal pngcairo size 1000,420 font ",10" noenhanced
set output "$tmp"
set datafile separator ","
set datafile missing "nan"
set key autotitle columnhead
set xlabel "epoch"
$( [ "$(wc -l < "$csv")" -le 21 ] && echo "set xtics 1" )
set grid
set multiplot layout 1,2 title "$(basename "$csv")"
set title "loss"
plot $loss_plot
set title "accuracy (%)"
set key bottom right
${acc_plot:+plot $acc_plot}
unset multiplot
GP
mv -f "$tmp" "$png"
echo "plot: wrote $png"
