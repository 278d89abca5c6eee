#!/bin/sh
# tests/msvc_check.sh — what we can check of portability without MSVC or a Mac:
# greps gpudl.h's parts (src/) for what MSVC rejects or Windows lacks. We have
# no MSVC here: this is the stand-in (README says so); the MinGW-w64 builds of
# make test-windows check the Win32 code itself.
#
#   1. system headers: outside the platform part (src/runtime/platform.h) a part
#      includes only ISO C headers and the optional libraries' (zlib, MPI,
#      CBLAS, the SIMD intrinsics): no POSIX-only or Windows header;
#   2. GCC extensions only under a guard: __attribute__, __builtin_*,
#      __atomic_*, __sync_*, __asm__, typeof, __int128, __extension__ only
#      inside an #if / #ifdef whose condition names __GNUC__ or __clang__
#      (or __GLIBC__, which only they compile);
#   3. no GNU statement expressions ("({"), case ranges or range designators
#      ("..." outside a comment or string);
#   4. alignment only through GDL__ALIGNAS (no bare _Alignas, alignas,
#      __declspec(align));
#   5. SIMD guards that MSVC meets: a condition naming __FMA__ or __F16C__
#      (MSVC defines neither) also names _MSC_VER; one naming __aarch64__ or
#      __ARM_NEON also names _M_ARM64 (or is GCC-only: __GNUC__);
#   6. no variable-length arrays: the header compiled with gcc -Wvla -Werror
#      (also done by the MinGW build; here without it).
# Usage: sh tests/msvc_check.sh   (from the repository root; exit 1 on a finding)
set -u
status=0
fail() { echo "msvc_check: $*" >&2; status=1; }

parts=$(awk '/^[ \t]*#/ || NF == 0 { next } { print "src/" $1 }' src/PARTS)

# 1. system headers outside the platform part
allowed='stddef.h stdint.h stdio.h stdlib.h string.h math.h stdarg.h float.h assert.h errno.h time.h limits.h signal.h
         zlib.h mpi.h cblas.h immintrin.h arm_neon.h'
for f in $parts; do
    [ "$f" = src/runtime/platform.h ] && continue
    for h in $(sed -n 's/^[ \t]*#[ \t]*include[ \t]*<\([^>]*\)>.*/\1/p' "$f"); do
        case " $(echo $allowed) " in
        *" $h "*) ;;
        *) fail "$f includes <$h>: system headers other than ISO C's belong in src/runtime/platform.h" ;;
        esac
    done
done

# 2-5: one pass per part over its preprocessor structure. Comments and string
# literals are blanked first (a comment may well say "__attribute__").
for f in $parts; do
    awk -v file="$f" '
    function strip(s,    out, i, c, n) {
        # blank comments (state carried across lines) and string / char literals
        out = ""; n = length(s)
        for (i = 1; i <= n; i++) {
            c = substr(s, i, 1)
            if (incomment) {
                if (c == "*" && substr(s, i + 1, 1) == "/") { incomment = 0; i++ }
                continue
            }
            if (c == "/" && substr(s, i + 1, 1) == "*") { incomment = 1; i++; continue }
            if (c == "/" && substr(s, i + 1, 1) == "/") break
            if (c == "\"" || c == "\047") {
                q = c; i++
                while (i <= n && substr(s, i, 1) != q) { if (substr(s, i, 1) == "\\") i++; i++ }
                out = out q q; continue
            }
            out = out c
        }
        return out
    }
    function gnu_guarded(    k) {
        for (k = 1; k <= depth; k++) if (cond[k] ~ /__GNUC__|__clang__|__GLIBC__/ && !neg[k]) return 1
        return 0
    }
    function bad(msg) { printf "msvc_check: %s:%d: %s\n", file, NR, msg > "/dev/stderr"; found = 1 }
    {
        line = strip($0)
        if (line ~ /^[ \t]*#[ \t]*(if|ifdef|ifndef)[ \t(]/) {
            depth++; cond[depth] = line; neg[depth] = line ~ /^[ \t]*#[ \t]*ifndef/
        } else if (line ~ /^[ \t]*#[ \t]*elif/) {
            cond[depth] = line; neg[depth] = 0
        } else if (line ~ /^[ \t]*#[ \t]*else/) {
            neg[depth] = 1
        } else if (line ~ /^[ \t]*#[ \t]*endif/) {
            depth--
        }
        if (line ~ /^[ \t]*#[ \t]*(if|elif)/) {
            if (line ~ /__FMA__|__F16C__/ && line !~ /_MSC_VER/)
                bad("a SIMD guard on __FMA__ / __F16C__ without _MSC_VER (MSVC defines neither)")
            # (a guard on an ACLE feature macro, e.g. __ARM_FEATURE_DOTPROD, picks an extra kernel
            # that MSVC builds go without; the plain NEON guard after it must name _M_ARM64)
            if (line ~ /__aarch64__|__ARM_NEON/ && line !~ /_M_ARM64|__GNUC__|__ARM_FEATURE_/)
                bad("an AArch64 guard without _M_ARM64 (MSVC does not define __aarch64__ / __ARM_NEON)")
        }
        if (line ~ /(^|[^A-Za-z0-9_])(__attribute__|__builtin_[a-z0-9_]*|__atomic_[a-z_]*|__sync_[a-z_]*|__asm__|typeof|__typeof__|__int128|__extension__)([^A-Za-z0-9_]|$)/ &&
            !gnu_guarded())
            bad("a GCC extension outside #if defined(__GNUC__) / __clang__: " $0)
        if (line ~ /\([ \t]*\{/ && line !~ /^[ \t]*#/)
            bad("a GNU statement expression \"({\": " $0)
        if (line ~ /\.\.\./ && line !~ /^[ \t]*#[ \t]*define/ && line !~ /\([^)]*\.\.\.[ \t]*\)/)
            bad("a case range or range designator (...): " $0)
        if (line ~ /(^|[^A-Za-z0-9_])(_Alignas|alignas)[ \t]*\(|__declspec[ \t]*\([ \t]*align/ && file != "src/runtime/platform.h")
            bad("alignment outside GDL__ALIGNAS: " $0)
    }
    END { exit found }' "$f" || status=1
done

# 6. variable-length arrays
cc=${CC:-cc}
if command -v "$cc" >/dev/null 2>&1; then
    "$cc" -std=c99 -Wvla -Werror -fsyntax-only tests/build_check.c ||
        fail "gpudl.h has a variable-length array (MSVC has none): see $cc's message above"
fi

if [ $status = 0 ]; then echo "msvc_check: gpudl.h's parts pass (headers, GCC extensions, statement expressions, alignment, SIMD guards, VLAs)"; fi
exit $status
