#!/bin/sh
# busy_cpu.sh — gpudl's CPU training with and without one other busy process
# on the machine (`yes > /dev/null`), interleaved (quiet, busy, quiet, ...),
# REPEATS times: prints each run's ms/step, the medians and the ratio
# busy/quiet, the CPU model and the load average. A thread pool that spins
# for long (libgomp's default) makes the busy run many times slower.
#
#   sh bench/busy_cpu.sh [net ...]            (default: mlp cnn)
#   THREADS=2 REPEATS=5 BENCH_TRAIN=build/bench_train   (the defaults; give
#   BENCH_TRAIN another build, e.g. an older commit's, to compare)
#   net char_gpt: examples/char_gpt.c's default model, CHAR_GPT=build/char_gpt
#   (or another build), GPT_STEPS=30 steps a run
#   THREADS="1 2": each net on 1 and on 2 threads, interleaved
#   BASE=PROGRAM: also an earlier build of bench/train.c (a copy of it), run
#   before ours in each round (quiet, busy), for before / after; a row each
#   (char_gpt: ours only)
#
# Each figure is one run of bench/train.c: its median time per step (5
# timed stretches of ~0.5 s of steps on one random batch, after warm-up);
# for char_gpt its median step time (steps 4 on). "cores": how many cores the
# OS gave the process while it timed (its CPU time over the wall time,
# bench/train.c's "cores" line; char_gpt: -): beside the busy process a
# 2-thread step that holds 1.0 ran both threads on one core.
set -e
cd "$(dirname "$0")/.."
nets=${*:-"mlp cnn"}
threads=${THREADS:-2}
reps=${REPEATS:-5}
ours=${BENCH_TRAIN:-build/bench_train}
base=${BASE:-}
gpt=${CHAR_GPT:-build/char_gpt}
for n in $nets; do
    if [ "$n" = char_gpt ]; then [ -n "${CHAR_GPT:-}" ] || make -s "$gpt"; else [ -n "${BENCH_TRAIN:-}" ] || make -s "$ours"; fi
done

# run NET THREADS [PROGRAM]: one run's "ms/step cores" (PROGRAM: bench/train.c's build, ours unless given)
run() {
    if [ "$1" = char_gpt ]; then
        GPUDL_NUM_THREADS=$2 "$gpt" --device cpu --steps "${GPT_STEPS:-30}" --eval-interval "${GPT_STEPS:-30}" \
            --sample-len 0 | sed -n 's/^median step time \([0-9.]*\) ms.*/\1 -/p'
    else
        GPUDL_NUM_THREADS=$2 OMP_NUM_THREADS=$2 "${3:-$ours}" "$1" |
            awk -v n="$1" '$1 == n {ms = $3} $1 == "cores" && $2 == n ":" {c = $3} END {print ms, (c == "" ? "-" : c)}'
    fi
}
# keep F: one run's "ms/step cores" from standard input into F (ms) and F.cores
keep() {
    read -r ms cores
    echo "$ms" >> "$1"
    echo "$cores" >> "$1.cores"
}

tmp=$(mktemp -d)
busy=
trap 'rm -rf "$tmp"; [ -z "$busy" ] || kill "$busy" 2>/dev/null' EXIT
case " $nets " in *" char_gpt "*) progs="$gpt" ;; *) progs= ;; esac
[ "$nets" = char_gpt ] || progs="$ours${progs:+, $progs}"
[ -z "$base" ] || progs="$progs, base $base"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs online; $progs, threads $threads, $reps runs each"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$reps"); do
    for n in $nets; do
        for t in $threads; do
            for who in ${base:+base} ours; do
                [ "$who" = ours ] || [ "$n" != char_gpt ] || continue
                prog=$ours
                [ "$who" = ours ] || prog=$base
                run "$n" "$t" "$prog" | keep "$tmp/quiet.$n.$t.$who"
                yes > /dev/null &
                busy=$!
                run "$n" "$t" "$prog" | keep "$tmp/busy.$n.$t.$who"
                kill "$busy"
                wait "$busy" 2>/dev/null || true
                busy=
                echo "run $r $n, $t threads${base:+, $who}: quiet $(tail -1 "$tmp/quiet.$n.$t.$who") ms/step" \
                    "($(tail -1 "$tmp/quiet.$n.$t.$who.cores") cores), busy $(tail -1 "$tmp/busy.$n.$t.$who") ms/step" \
                    "($(tail -1 "$tmp/busy.$n.$t.$who.cores") cores) (load $(cut -d' ' -f1 /proc/loadavg))"
            done
        done
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
. bench/stats.sh
echo
echo "net      threads  quiet ms/step  busy ms/step  busy/quiet  cores quiet / busy   (medians of $reps runs)"
for n in $nets; do
    for t in $threads; do
        for who in ${base:+base} ours; do
            [ -f "$tmp/quiet.$n.$t.$who" ] || continue
            cq=-
            cb=-
            grep -qv -- - "$tmp/quiet.$n.$t.$who.cores" && cq=$(median "$tmp/quiet.$n.$t.$who.cores")
            grep -qv -- - "$tmp/busy.$n.$t.$who.cores" && cb=$(median "$tmp/busy.$n.$t.$who.cores")
            awk -v n="$n${base:+ ($who)}" -v t="$t" -v a="$(median "$tmp/quiet.$n.$t.$who")" \
                -v b="$(median "$tmp/busy.$n.$t.$who")" -v cq="$cq" -v cb="$cb" \
                'BEGIN { printf "%-8s %7s %14.3f %13.3f %11.2f  %9s / %s\n", n, t, a, b, b / a, cq, cb }'
        done
    done
done
