#!/bin/sh
# test_tutorial.sh — keeps docs/tutorial/ true: every program builds with the
# command its chapter shows and prints what the chapter says it prints, in the
# English chapters and in the Chinese ones (docs/tutorial/zh/).
#
# Usage: sh tests/test_tutorial.sh   (from anywhere; or through tests/run.sh)
# Ends with "N passed, N failed, N skipped"; exit status 1 on any failure.
#
# What a chapter (docs/tutorial/NN-name.md, docs/tutorial/zh/NN-name.md) holds:
#   ```sh build=PROGRAM
#   cc -O2 docs/tutorial/programs/NN_name.c -lm -pthread -o NAME
#   ```
#       its build command, one line, run from the repository root; PROGRAM is
#       the program's path relative to the chapter (programs/NN_name.c, or
#       ../programs/NN_name.c from zh/). Both editions show the same command.
#   ```text output=PROGRAM
#   $ ./NAME ARGS
#   what the program prints (stdout and stderr together)
#   ```
#       an output block: the first line is what the reader types (NAME is the
#       -o of the build command; ARGS are split at spaces), the rest must be
#       the program's output line for line.
# Machine-dependent numbers (times, speeds, thread counts) are written with a
# `~` in front of them in an output block, e.g. `epoch 1 (~0.37 s)`: any
# number matches there, and on such a line each run of spaces matches any
# run of spaces (a wider number shifts the columns). Everything else must
# match exactly: change a shown digit and this script fails.
#
# It also fails on: a relative link to a file that is not there (any .md
# under docs/tutorial/); a program under docs/tutorial/programs/ that no
# chapter of either edition builds; a chapter without a build block, or whose
# program is missing; an output block of a program its chapter does not
# build; an edition whose build command differs from the other's.
#
# Speed (CI runs this on 2 cores): each distinct set of -D options in the
# commands compiles gpudl.h's implementation once (tests/gpudl_impl.c, as the
# Makefile does) and every program is compiled with -O1 and
# -include tests/api_only.h and linked with it; each program runs once per
# distinct ARGS, and every block showing that run is compared with it.
# TUTORIAL_VERBATIM=1 builds each program with its chapter's command exactly
# (slower). Fashion-MNIST: looked for where the programs look ($GPUDL_DATA,
# the repository's data/, /usr/share/datasets/fashion-mnist); without it
# the programs that read it are skipped (sh tools/fetch_data.sh gets it).
set -u
here=$(cd "$(dirname "$0")/.." && pwd) || exit 1
cd "$here" || exit 1
tut=docs/tutorial
pass=0 fail=0 skip=0
t=$(mktemp -d "${TMPDIR:-/tmp}/tutorial.XXXXXX") || exit 1
trap 'rm -rf "$t"' EXIT
trap 'exit 130' INT TERM
start=$(date +%s)
ok() { pass=$((pass + 1)); echo "  ok   $*"; }
bad() { fail=$((fail + 1)); echo "  FAIL $*"; }

chapters=$(ls $tut/[0-9][0-9]-*.md $tut/zh/[0-9][0-9]-*.md 2>/dev/null)
[ -n "$chapters" ] || { bad "no chapters in $tut"; echo "$pass passed, $fail failed, $skip skipped"; exit 1; }

# ---- 1. relative links in every page ----
for md in $(find $tut -name '*.md' | sort); do
    dir=$(dirname "$md")
    nl=0 nbad=0
    # every ](target) of the page, one a line; web addresses and in-page anchors are not files
    grep -o '\]([^) ]*)' "$md" | sed 's/^](//; s/)$//' >"$t/links"
    while read -r target; do
        case $target in http://*|https://*|mailto:*|'#'*) continue ;; esac
        path=${target%%#*}
        nl=$((nl + 1))
        if [ ! -e "$dir/$path" ]; then bad "$md: broken link '$target'"; nbad=$((nbad + 1)); fi
    done <"$t/links"
    [ $nbad -eq 0 ] && ok "$md: $nl relative links resolve"
done

# ---- 2. the blocks of every chapter ----
# blocks.txt: one line per block: KIND CHAPTER LINE PROGRAM (KIND build or output); its body in $t/b/N
mkdir -p "$t/b" "$t/bin" "$t/run" "$t/lib"
n=0
for md in $chapters; do
    awk -v md="$md" -v out="$t/b" -v start="$n" '
        BEGIN { n = start }
        !inb && /^```(sh|text) (build|output)=/ {
            inb = 1; n++
            split($2, kv, "="); kind = kv[1]; prog = kv[2]
            print kind, md, NR, prog
            body = out "/" n; printf "" > body; next
        }
        inb && /^```[ \t]*$/ { inb = 0; close(body); next }
        inb { print > body }
        END { if (inb) { print "unclosed", md, NR, "-" } }
    ' "$md" >>"$t/blocks.txt"
    n=$(wc -l <"$t/blocks.txt")
done
[ -f "$t/blocks.txt" ] || : >"$t/blocks.txt"

# resolve PROGRAM against the chapter's folder: docs/tutorial/programs/NAME.c
resolve() { (cd "$(dirname "$1")" && cd "$(dirname "$2")" 2>/dev/null && printf '%s/%s\n' "$(pwd)" "$(basename "$2")") | sed "s|^$here/||"; }

i=0
while read -r kind md line prog; do
    i=$((i + 1))
    if [ "$kind" = unclosed ]; then bad "$md: a block opened before line $line is never closed"; continue; fi
    src=$(resolve "$md" "$prog")
    printf '%s %s %s %s %s\n' "$kind" "$md" "$line" "$src" "$i" >>"$t/resolved.txt"
done <"$t/blocks.txt"
[ -f "$t/resolved.txt" ] || : >"$t/resolved.txt"

# every chapter builds exactly one program, which exists; both editions show one command for it
for md in $chapters; do
    nb=$(awk -v md="$md" '$1 == "build" && $2 == md' "$t/resolved.txt" | wc -l)
    if [ "$nb" -ne 1 ]; then bad "$md: $nb build blocks (one expected: \`\`\`sh build=programs/NN_name.c)"; continue; fi
    bline=$(awk -v md="$md" '$1 == "build" && $2 == md { print $4, $5 }' "$t/resolved.txt")
    src=${bline% *} bidx=${bline##* }
    if [ ! -f "$src" ]; then bad "$md: its program $src is missing"; continue; fi
    cmd=$(cat "$t/b/$bidx")
    case $cmd in *" $src "*) ;; *) bad "$md: the build command does not compile $src: $cmd"; continue ;; esac
    if [ -f "$t/cmd_$(basename "$src")" ]; then
        if [ "$(cat "$t/cmd_$(basename "$src")")" != "$cmd" ]; then
            bad "$md: its build command differs from the other edition's: $cmd"
            continue
        fi
    else
        printf '%s\n' "$cmd" >"$t/cmd_$(basename "$src")"
    fi
    ok "$md builds $src"
done
# every program is some chapter's, in both editions
for p in "$tut"/programs/*.c; do
    for ed in en zh; do
        if [ $ed = en ]; then pat="^build $tut/[0-9][0-9]-[^ ]* [0-9]* $p "; else pat="^build $tut/zh/[0-9][0-9]-[^ ]* [0-9]* $p "; fi
        if grep -q "$pat" "$t/resolved.txt"; then ok "$p is used by the $ed edition"
        else bad "$p is not built by any chapter of the $ed edition"; fi
    done
done

# ---- 3. build ----
have_fmnist=0
for d in "${GPUDL_DATA:-}" "$here/data" /usr/share/datasets/fashion-mnist; do
    if [ -n "$d" ] && ls "$d"/t10k-labels-idx1-ubyte* >/dev/null 2>&1; then
        have_fmnist=1
        [ -z "${GPUDL_DATA:-}" ] && [ "$d" = "$here/data" ] && GPUDL_DATA=$d && export GPUDL_DATA
        break
    fi
    [ -n "${GPUDL_DATA:-}" ] && break # GPUDL_DATA set: only there, as the programs look
done
for cmdfile in "$t"/cmd_*.c; do
    [ -f "$cmdfile" ] || continue
    name=$(basename "$cmdfile"); name=${name#cmd_}
    src=$tut/programs/$name
    cmd=$(cat "$cmdfile")
    # the binary's name: the word after -o
    bin=$(printf '%s\n' "$cmd" | sed -n 's/.* -o \([^ ]*\).*/\1/p')
    if [ -z "$bin" ]; then bad "$src: its build command has no -o NAME: $cmd"; continue; fi
    printf '%s\n' "$bin" >"$t/bin_$name"
    if [ "${TUTORIAL_VERBATIM:-0}" = 1 ]; then
        build=$(printf '%s\n' "$cmd" | sed "s| -o $bin| -o $t/bin/$bin|")
    else
        # the program alone at -O1, linked with the implementation compiled once for its -D options
        defs=$(printf '%s\n' "$cmd" | tr ' ' '\n' | grep '^-D' | sort | tr '\n' ' ')
        key=$(printf '%s' "$defs" | tr -c 'A-Za-z0-9_\n' '_')
        lib=$t/lib/impl_$key.o
        if [ ! -f "$lib" ]; then
            # shellcheck disable=SC2086 # defs: options, split on purpose
            if ! ${CC:-cc} -O1 $defs -c tests/gpudl_impl.c -o "$lib" 2>"$t/lib/err"; then
                bad "gpudl.h's implementation with '$defs' does not compile:"; sed 's/^/       /' "$t/lib/err" | head -n 8
                continue
            fi
        fi
        build=$(printf '%s\n' "$cmd" | sed "s|^cc -O2 |${CC:-cc} -O1 -include tests/api_only.h |; s| $src | $src $lib |; s| -o $bin| -o $t/bin/$bin|")
    fi
    if sh -c "$build" >"$t/build.out" 2>&1; then ok "$src builds: $cmd"
    else bad "$src does not build with: $build"; sed 's/^/       /' "$t/build.out" | head -n 12; fi
done

# ---- 4. run, and compare the output blocks ----
# compare EXPECTED ACTUAL: line for line; `~NUMBER` matches any number, and on its line runs of spaces any run
compare() {
    awk 'function pattern(s,    r, i, c, n) {
            r = "^"; n = length(s)
            for (i = 1; i <= n; i++) {
                c = substr(s, i, 1)
                if (c == "~" && substr(s, i + 1, 1) ~ /[0-9]/) {
                    r = r "[0-9][0-9.]*([eE][-+]?[0-9]+)?"
                    while (substr(s, i + 1, 1) ~ /[0-9.]/) i++
                    if (substr(s, i + 1, 1) ~ /[eE]/ && substr(s, i + 2) ~ /^[-+]?[0-9]/) {
                        i++; if (substr(s, i + 1, 1) ~ /[-+]/) i++
                        while (substr(s, i + 1, 1) ~ /[0-9]/) i++
                    }
                } else if (c == " ") { r = r " +"; while (substr(s, i + 1, 1) == " ") i++ }
                else if (c == "\\") r = r "\\\\"
                else if (c == "^") r = r "\\^"
                else if (index(".[]()*+?{}|$", c)) r = r "[" c "]"
                else r = r c
            }
            return r "$"
        }
        NR == FNR { want[++nw] = $0; next }
        { got[++ng] = $0 }
        END {
            for (i = 1; i <= (nw > ng ? nw : ng); i++) {
                w = (i <= nw) ? want[i] : "(nothing)"; g = (i <= ng) ? got[i] : "(nothing)"
                same = (i <= nw && i <= ng) && (index(w, "~") ? (g ~ pattern(w)) : (g == w))
                if (!same) { printf "line %d:\n         shown: %s\n       printed: %s\n", i, w, g; exit 1 }
            }
        }' "$1" "$2"
}
# shellcheck disable=SC2094 # resolved.txt is only read, here and by the grep inside
while read -r kind md line src idx; do
    [ "$kind" = output ] || continue
    name=$(basename "$src")
    where="$md:$line ($name)"
    if ! grep -q "^build $md [0-9]* $src " "$t/resolved.txt" || [ ! -f "$t/bin_$name" ]; then
        bad "$where: an output block of a program this chapter does not build"; continue
    fi
    bin=$(cat "$t/bin_$name")
    typed=$(head -n 1 "$t/b/$idx")
    case $typed in
    "\$ ./$bin"|"\$ ./$bin "*) args=${typed#"\$ ./$bin"} ;;
    *) bad "$where: the block's first line must be '\$ ./$bin [ARGS]', not '$typed'"; continue ;;
    esac
    if [ $have_fmnist = 0 ] && grep -q gdl_dataset_fashion_mnist "$src"; then
        skip=$((skip + 1)); echo "  SKIP $where: Fashion-MNIST is not here (sh tools/fetch_data.sh)"; continue
    fi
    if [ ! -x "$t/bin/$bin" ]; then bad "$where: not built"; continue; fi
    key=$(printf '%s%s' "$bin" "$args" | tr -c 'A-Za-z0-9_\n' '_')
    if [ ! -f "$t/run/$key.out" ]; then
        mkdir -p "$t/run/$key.d"
        # shellcheck disable=SC2086 # args: split at spaces, as documented
        (cd "$t/run/$key.d" && "$t/bin/$bin" $args) >"$t/run/$key.out" 2>&1
        echo $? >"$t/run/$key.rc"
    fi
    sed 1d "$t/b/$idx" >"$t/want"
    if [ "$(cat "$t/run/$key.rc")" -ne 0 ]; then
        bad "$where: ./$bin$args exited with status $(cat "$t/run/$key.rc"):"; sed 's/^/       /' "$t/run/$key.out" | tail -n 6
    elif compare "$t/want" "$t/run/$key.out" >"$t/diff"; then
        ok "$where: ./$bin$args prints what is shown"
    else
        bad "$where: ./$bin$args prints something else than shown:"; sed 's/^/       /' "$t/diff"
    fi
done <"$t/resolved.txt"

# verdict DESC FILE STATUS PATTERN...: ok when STATUS is 0 and FILE has a line matching each PATTERN, else
# a FAIL showing FILE's end
verdict() {
    desc=$1 file=$2 st=$3 status=$3
    shift 3
    if [ "$st" -eq 0 ]; then
        for pat in "$@"; do grep -q -e "$pat" "$file" || { st=1; break; }; done
    fi
    if [ "$st" -eq 0 ]; then ok "$desc"; else bad "$desc (exit status $status):"; sed 's/^/       /' "$file" | tail -n 8; fi
}

# ---- 5. the CIFAR-10 path of the CNN chapter, on a stand-in (the real set is not offline) ----
# zero-filled records (label 0, black images) in CIFAR-10's binary format: the program must find, load and
# train on them. (Its skip message without CIFAR-10 is the chapter's output block: the run folders have no data/.)
if [ -x "$t/bin/cnn" ] && [ $have_fmnist = 1 ]; then
    mkdir -p "$t/cifar"
    for f in data_batch_1 data_batch_2 data_batch_3 data_batch_4 data_batch_5 test_batch; do
        head -c $((3073 * 64)) /dev/zero >"$t/cifar/$f.bin"
    done
    (cd "$t/run" && "$t/bin/cnn" "$t/cifar") >"$t/cifar.out" 2>&1
    verdict "cnn trains on a folder in CIFAR-10's format" "$t/cifar.out" $? \
        "^CIFAR-10: 320 training and 64 test images of 3x32x32" "^  epoch 2: loss "
else
    skip=$((skip + 1)); echo "  SKIP cnn on a stand-in CIFAR-10: cnn not built or no Fashion-MNIST"
fi

# ---- 6. chapter 11's data-parallel run on 2 MPI processes, where OpenMPI is installed ----
# the chapter quotes its launcher line and rank 0's shard (2,000 of the 4,000 images: 63 batches of 32)
if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 && [ $have_fmnist = 1 ]; then
    root=
    [ "$(id -u)" = 0 ] && root=--allow-run-as-root
    {
        mpicc -O1 -DGPUDL_MPI -DGPUDL_ZLIB -c tests/gpudl_impl.c -o "$t/lib/impl_mpi.o" &&
            mpicc -O1 -DGPUDL_MPI -DGPUDL_ZLIB -include tests/api_only.h $tut/programs/11_multi_gpu.c \
                "$t/lib/impl_mpi.o" -lz -lm -pthread -o "$t/bin/multi_gpu_mpi" &&
            (cd "$t/run" && GPUDL_DIST_TIMEOUT=120 mpirun $root --oversubscribe -np 2 "$t/bin/multi_gpu_mpi")
    } >"$t/mpi.out" 2>&1
    verdict "multi_gpu on 2 MPI processes prints what chapter 11 says" "$t/mpi.out" $? \
        "^launcher: mpirun, world size 2, GPUs here: 0$" \
        "^data parallel: 2 processes on cpu, 63 batches of 32 on rank 0, mean loss "
else
    skip=$((skip + 1)); echo "  SKIP multi_gpu on 2 MPI processes: no mpicc and mpirun (OpenMPI), or no Fashion-MNIST"
fi

echo "took $(($(date +%s) - start)) s"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
