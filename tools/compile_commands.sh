#!/bin/sh
# tools/compile_commands.sh — compile_commands.json for an editor's clangd
# (make compile_commands.json): an entry for each part of src/ and cuda/, so
# that the editor compiles a part as it sits in gpudl.h or gpudl_cuda.cu.
#
#   sh tools/compile_commands.sh DIR   writes DIR/before/src/PART and
#                                      DIR/before/cuda/PART, and ./compile_commands.json
#
# A part is not a translation unit: it uses what the parts before it declare.
# Its entry compiles the part's own file (so the editor's diagnostics are in
# it) with -include DIR/before/...: the parts before it, joined as make
# dev-header joins them (a #line before each, so a message about one names
# it), then an #endif for each conditional they leave open (the header guard,
# GPUDL_IMPLEMENTATION's: their conditions are true here, so closing them
# early changes nothing). A part that itself opens or closes a conditional
# spanning parts (api/types.h, api/backend.h, impl_begin.h, impl_end.h,
# dist/process_group.h, dist/collectives.h) gets one diagnostic there, on that
# line; the rest of it compiles (dist/collectives.h's MPI code where mpicc
# is installed, below). cuda/ parts compile as the CUDA emulator
# compiles gpudl_cuda.cu (tests/cuda_emu: C++ with the emulator's header
# first; CUDA_INC is the toolkit's include directory). The prefixes are made
# when this runs: after an edit to an earlier part, run it again.
#
# POSIX sh and awk, like tools/amalgamate.sh. CC_CMD and CXX_CMD name the
# compilers in the entries (clang, clang++ by default); GPUDL_INC the
# directory of the gpudl.h that cuda/header.cu includes (the root's by default).
set -eu

[ $# -eq 1 ] || { echo "usage: sh tools/compile_commands.sh DIR" >&2; exit 2; }
case $0 in
*/*) cd "${0%/*}/.." ;;
*) cd .. ;;
esac
root=$(pwd)
dir=$1
case $dir in /*) ;; *) dir=$root/$dir ;; esac
cc=${CC_CMD:-clang}
cxx=${CXX_CMD:-clang++}
cuda_inc=${CUDA_INC:-/usr/local/cuda/include}
out=compile_commands.json
tmp=$out.tmp.$$
trap 'rm -f "$tmp" "$dir/joined.tmp"' EXIT
trap 'exit 130' INT TERM

parts() { awk '/^[ \t]*#/ || NF == 0 { next } { print $1 }' "$1/PARTS"; }
# the conditionals a file opens (positive) or closes (negative)
balance() { awk '/^[ \t]*#[ \t]*if/ { n++ } /^[ \t]*#[ \t]*endif/ { n-- } END { print n + 0 }' "$1"; }
# a JSON string of $1 (the paths and flags here have no control characters)
json() { printf '"%s"' "$(printf '%s' "$1" | sed 's/[\\"]/\\&/g')"; }

# entries for the parts of $1 (src or cuda); the rest of the arguments are the
# compiler and its options, before the -include of the part's prefix
entries() {
    from=$1
    shift
    : > "$dir/joined.tmp"
    depth=0
    for p in $(parts "$from"); do
        prefix=$dir/before/$from/$p
        mkdir -p "${prefix%/*}"
        { cat "$dir/joined.tmp"; i=0; while [ $i -lt $depth ]; do echo '#endif'; i=$((i + 1)); done; } > "$prefix"
        { printf '#line 1 "%s"\n' "$from/$p"; cat "$from/$p"; } >> "$dir/joined.tmp"
        depth=$((depth + $(balance "$from/$p")))
        [ $depth -ge 0 ] || { echo "compile_commands: $from/$p closes a conditional no part opened" >&2; exit 2; }
        [ -n "$first" ] || printf ',\n' >> "$tmp"
        first=
        printf '  {"directory": %s, "file": %s, "arguments": [' "$(json "$root")" "$(json "$from/$p")" >> "$tmp"
        for a in "$@" -include "$prefix" -fsyntax-only "$from/$p"; do
            printf '%s, ' "$(json "$a")"
        done | sed 's/, $//' >> "$tmp"
        printf ']}' >> "$tmp"
    done
}

mkdir -p "$dir/before"
printf '[\n' > "$tmp"
first=1
# (with MPI's headers where mpicc says where they are: dist/'s MPI code, a
# conditional from dist/process_group.h into dist/collectives.h, is then compiled too)
mpi=
if command -v mpicc >/dev/null 2>&1 && mpi=$(mpicc --showme:compile 2>/dev/null); then mpi="-DGPUDL_MPI $mpi"; fi
# (functions declared static before the parts that define them: no -Wundefined-internal)
# shellcheck disable=SC2086
entries src "$cc" -x c -std=c99 -Wall -Wextra -Wno-unused-function -Wno-undefined-internal -DGPUDL_IMPLEMENTATION \
    -D_POSIX_C_SOURCE=200809L $mpi
# (cuda/header.cu includes "gpudl.h": GPUDL_INC's, the dev header's where the Makefile passes it)
entries cuda "$cxx" -x c++ -std=c++17 -Wall -Wextra -Wno-unused-function -Wno-undefined-internal -Wno-unknown-pragmas "-I$cuda_inc" \
    -Itests/cuda_emu "-I${GPUDL_INC:-$root}" -DGPUDL_EMU -DGPUDL_CUDA -include tests/cuda_emu/cuda_emu.h
printf '\n]\n' >> "$tmp"
mv -f "$tmp" "$out"
echo "compile_commands: wrote $out ($(parts src | wc -l) parts of src/, $(parts cuda | wc -l) of cuda/; prefixes in $dir/before)"
