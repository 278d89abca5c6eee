#!/bin/sh
# tools/amalgamate.sh — gpudl.h and gpudl_cuda.cu are generated: joined, byte
# for byte, from their parts in src/ and cuda/, in the order of src/PARTS and
# cuda/PARTS (the one place the order lives). A part is named by its path
# below src/ or cuda/ (src/api/tensor.h is api/tensor.h in src/PARTS). Edit the parts, not the outputs;
# the outputs stay committed, so a user still takes one header (and one .cu).
#
#   sh tools/amalgamate.sh              write gpudl.h and gpudl_cuda.cu (make amalgamate);
#                                       a file is replaced only if its content changes
#   sh tools/amalgamate.sh --check      exit 1, naming the file, if a committed output, or a
#                                       list made from PARTS (below), is not what its
#                                       parts make (make test-amalgamation, make test)
#   sh tools/amalgamate.sh --lines DIR  development: DIR/gpudl.h and DIR/gpudl_cuda.cu with a
#                                       `#line 1 "src/NAME"` before each part, so compiler
#                                       messages and gdb name the parts (make dev-header)
#   sh tools/amalgamate.sh --force      as the first, even over an output edited by hand
#
# The lists of parts are made from PARTS too, before the join (write, force):
# the manual's section map (src/api/manual.h: the rows after the paragraph
# under "Table of contents", up to a blank line) and docs/DESIGN.md's part
# tables (the rows of the tables headed "| part (src/) | holds |" and
# "| part (cuda/) | holds |"). Each row is a PARTS line: the file, then what
# it holds.
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
ltmp=${TMPDIR:-/tmp}/gpudl-lists.$$
trap '[ -z "$tmp" ] || rm -f "$tmp"; rm -f "$ltmp".*' EXIT
trap 'exit 130' INT TERM

# the part files of $1 (src or cuda), in order: the first word of each line of
# $1/PARTS that is neither blank nor a comment
parts() { awk '/^[ \t]*#/ || NF == 0 { next } { print $1 }' "$1/PARTS"; }

# the rows of $1/PARTS as "FILE<tab>WHAT IT HOLDS"; a part without a description is an error
described() {
    awk -v f="$1/PARTS" '/^[ \t]*#/ || NF == 0 { next }
        { d = $0; sub(/^[ \t]+/, "", d); d = substr(d, length($1) + 1)
          sub(/^[ \t]+/, "", d); sub(/[ \t]+$/, "", d)
          if (d == "") { printf "amalgamate: %s: line %d: %s says nothing of what it holds\n", f, NR, $1 > "/dev/stderr"; bad = 1 }
          print $1 "\t" d }
        END { exit bad ? 2 : 0 }' "$1/PARTS"
}

# with_rows FILE ANCHOR KEEP_TO STYLE ROWS: FILE to stdout, the block of rows
# after ANCHOR (a whole line, exactly once in FILE) replaced by ROWS' (a
# described listing) in STYLE: manual (the section map's columns) or design
# (a Markdown table). The lines after ANCHOR up to and including the first
# that matches KEEP_TO stay; the old rows are the lines after it, up to a
# blank line or the end.
with_rows() {
    awk -v anchor="$2" -v keep_to="$3" -v style="$4" -v file="$1" -v rows="$5" '
        BEGIN { FS = "\t"; w = 0
                while ((getline line < rows) > 0) { n++; split(line, a, "\t"); name[n] = a[1]; what[n] = a[2]
                                                    if (length(a[1]) > w) w = length(a[1]) } }
        state == 0 && $0 == anchor { seen++; state = 1; print; next }
        state == 1 { print; if ($0 ~ keep_to) state = 2; next }
        state == 2 { if ($0 != "") next
                     emit(); state = 3; print; next }
        { if ($0 == anchor) seen++; print }
        END { if (state == 2) emit()
              if (seen != 1) { printf "amalgamate: %s: the line \"%s\" is there %d times, not once\n", file, anchor, seen > "/dev/stderr"; exit 2 }
              if (state < 2) { printf "amalgamate: %s: no list after \"%s\"\n", file, anchor > "/dev/stderr"; exit 2 } }
        function emit(   i, fmt) {
            fmt = "   %-" (w + 2) "s%s\n"
            for (i = 1; i <= n; i++)
                if (style == "manual") printf fmt, name[i], what[i]
                else printf "| `%s` | %s |\n", name[i], what[i] }' "$1"
}

# the manual's section map and DESIGN.md's part tables, from the PARTS files:
# lists FILE prints what FILE should hold (FILE: one of the two)
lists() {
    case $1 in
    src/api/manual.h)
        described src > "$ltmp.src" || return 2
        with_rows "$1" '   Table of contents (search for the file name)' '^$' manual "$ltmp.src" ;;
    docs/DESIGN.md)
        described src > "$ltmp.src" && described cuda > "$ltmp.cuda" || return 2
        with_rows "$1" '| part (src/) | holds |' '^[|] --- [|] --- [|]$' design "$ltmp.src" > "$ltmp.design" &&
            with_rows "$ltmp.design" '| part (cuda/) | holds |' '^[|] --- [|] --- [|]$' design "$ltmp.cuda" ;;
    esac
}
LISTED='src/api/manual.h docs/DESIGN.md'

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

# the lists of parts (LISTED): rewritten where they differ (write, force), or
# compared (check); a copy of the tree without a file skips it
update_lists() {
    for f in $LISTED; do
        [ -f "$f" ] || continue
        lists "$f" > "$ltmp.new" || exit 2
        cmp -s "$ltmp.new" "$f" && continue
        if [ "$1" = check ]; then
            echo "$me: $f: its list of parts is not what src/PARTS and cuda/PARTS say: run make amalgamate" >&2
            lists_bad=1
        else
            cat "$ltmp.new" > "$f"
            echo "$me: wrote $f (its list of parts, from PARTS)"
        fi
    done
}
lists_bad=0

case $mode in
write|force)
    update_lists write
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
    update_lists check
    bad=$lists_bad
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
