#!/bin/sh
# tools/amalgamate.sh — gpudl.h and gpudl_cuda.cu are generated: joined, byte
# for byte, from their parts in src/ and cuda/, in the order of src/PARTS and
# cuda/PARTS (the one place the order lives). A part is named by its path
# below src/ or cuda/ (src/api/tensor.h is api/tensor.h in src/PARTS). Edit the parts, not the outputs;
# the outputs stay committed, so a user still takes one header (and one .cu).
#
#   sh tools/amalgamate.sh              write gpudl.h and gpudl_cuda.cu (make amalgamate);
#                                       a file is replaced only if its content changes
#   sh tools/amalgamate.sh --check      exit 1, naming the file, if a committed output is not
#                                       what its parts make (make test-amalgamation, make test)
#   sh tools/amalgamate.sh --lines DIR  development: DIR/gpudl.h and DIR/gpudl_cuda.cu with a
#                                       `#line 1 "src/NAME"` before each part, so compiler
#                                       messages and gdb name the parts (make dev-header)
#   sh tools/amalgamate.sh --force      as the first, even over an output edited by hand
#
# POSIX sh and awk, cat, cmp, find, tail, mv, rm, mkdir: nothing a Debian
# minbase lacks. Works from any directory.
set -eu

me=amalgamate
usage() { echo "usage: sh tools/amalgamate.sh [--check | --lines DIR | --force]" >&2; exit 2; }

mode='write'
dir=
case $# in
0) ;;
1) case $1 in
   --check) mode=check ;;
   --force) mode=force ;;
   *) usage ;;
   esac ;;
2) [ "$1" = --lines ] || usage
   mode=lines dir=$2
   case $dir in /*) ;; *) dir=$(pwd)/$dir ;; esac ;;
*) usage ;;
esac

# the repository root: this script's directory's parent
case $0 in
*/*) cd "${0%/*}/.." ;;
*) cd .. ;;
esac
if ! [ -f src/PARTS ] || ! [ -f cuda/PARTS ]; then
    echo "$me: no src/PARTS or cuda/PARTS in $(pwd)" >&2
    exit 2
fi

tmp=
trap '[ -z "$tmp" ] || rm -f "$tmp"' EXIT
trap 'exit 130' INT TERM

# the part files of $1 (src or cuda), in order: the first word of each line of
# $1/PARTS that is neither blank nor a comment
parts() { awk '/^[ \t]*#/ || NF == 0 { next } { print $1 }' "$1/PARTS"; }

# join $1's parts to stdout; $2 = lines: a #line directive before each
join_parts() {
    for p in $(parts "$1"); do
        f=$1/$p
        [ -f "$f" ] || { echo "$me: $1/PARTS names $p, but there is no $f" >&2; return 2; }
        [ -s "$f" ] || { echo "$me: $f is empty" >&2; return 2; }
        [ -z "$(tail -c 1 "$f")" ] || { echo "$me: $f does not end with a newline" >&2; return 2; }
        [ "$2" != lines ] || printf '#line 1 "%s"\n' "$f"
        cat "$f"
    done
}

# every part file under $1 (its name ending in $2) is listed in $1/PARTS, by
# its path below $1 (api/tensor.h)
listed() {
    for f in $(find "$1" -type f -name "*$2" | sort); do
        parts "$1" | awk -v p="${f#"$1"/}" '$0 == p { found = 1 } END { exit !found }' ||
            { echo "$me: $f is not in $1/PARTS (add it there, or remove it)" >&2; return 2; }
    done
}

# join $1's parts (lines mode per $2) into the temporary file $3, named in $tmp
build() {
    tmp=$3
    join_parts "$1" "$2" > "$tmp"
}

# replace $2 by the temporary $1 if their contents differ
install_if_changed() {
    if [ -f "$2" ] && cmp -s "$1" "$2"; then
        rm -f "$1"
        tmp=
        return 0
    fi
    # An output that differs and is newer than all of its parts was edited by
    # hand: replacing it would lose the edit (make runs this only when a part is newer).
    if [ "$mode" = write ] && [ -f "$2" ] && [ -z "$(find "$3" -type f -newer "$2")" ]; then
        echo "$me: $2 differs from what $3/PARTS makes and is newer than every part: it was edited" >&2
        echo "$me: itself. Move the edit into $3/ (or run sh tools/amalgamate.sh --force to drop it)." >&2
        return 1
    fi
    mv -f "$1" "$2"
    tmp=
    echo "$me: wrote $2"
}

listed src .h
listed cuda .cu

case $mode in
write|force)
    build src plain gpudl.h.tmp.$$
    install_if_changed "$tmp" gpudl.h src
    build cuda plain gpudl_cuda.cu.tmp.$$
    install_if_changed "$tmp" gpudl_cuda.cu cuda
    ;;
lines)
    mkdir -p "$dir"
    build src lines "$dir/gpudl.h.tmp.$$"
    install_if_changed "$tmp" "$dir/gpudl.h" src
    build cuda lines "$dir/gpudl_cuda.cu.tmp.$$"
    install_if_changed "$tmp" "$dir/gpudl_cuda.cu" cuda
    ;;
check)
    bad=0
    for pair in gpudl.h:src gpudl_cuda.cu:cuda; do
        out=${pair%%:*} from=${pair#*:}
        build "$from" plain "${TMPDIR:-/tmp}/gpudl-amalgamate.$$"
        if ! [ -f "$out" ]; then
            echo "$me: $out is missing: run make amalgamate" >&2
            bad=1
        elif ! cmp -s "$tmp" "$out"; then
            echo "$me: $out differs from what $from/PARTS makes of $from/: run make amalgamate" >&2
            echo "$me: (and commit $out). If $out itself was edited, move the edit into $from/ first." >&2
            bad=1
        fi
        rm -f "$tmp"
        tmp=
    done
    exit $bad
    ;;
esac
