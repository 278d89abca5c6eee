#!/bin/sh
# tools/install.sh — `make install` / `make uninstall`: puts gpudl.h, the CUDA
# backend's source, pkg-config files (gpudl, gpudl-cuda) and a CMake package
# (gpudl::gpudl, gpudl::cuda) under PREFIX, or removes exactly those files.
#   sh tools/install.sh install|uninstall PREFIX [DESTDIR]
set -eu
cd "$(dirname "$0")/.."
action=$1 prefix=$2 destdir=${3:-}
case "$prefix" in /*) ;; *) echo "install.sh: PREFIX must be an absolute path, not '$prefix'" >&2; exit 2 ;; esac
root="$destdir$prefix"
files="include/gpudl.h share/gpudl/gpudl_cuda.cu lib/pkgconfig/gpudl.pc lib/pkgconfig/gpudl-cuda.pc
lib/cmake/gpudl/gpudl-config.cmake lib/cmake/gpudl/gpudl-config-version.cmake"

if [ "$action" = uninstall ]; then
    for f in $files; do rm -f "$root/$f"; done
    rmdir "$root/share/gpudl" "$root/lib/cmake/gpudl" 2>/dev/null || true
    echo "removed gpudl from $root"
    exit 0
fi
[ "$action" = install ] || { echo "usage: sh tools/install.sh install|uninstall PREFIX [DESTDIR]" >&2; exit 2; }

version=$(sed -n 's/^#define GPUDL_VERSION "\(.*\)"$/\1/p' gpudl.h)
major=${version%%.*} rest=${version#*.} minor=${rest%%.*}
[ -n "$version" ] || { echo "install.sh: no GPUDL_VERSION in gpudl.h" >&2; exit 1; }
zlib_cflags="" zlib_requires=""
if pkg-config --exists zlib 2>/dev/null; then zlib_cflags=" -DGPUDL_ZLIB" zlib_requires="Requires: zlib"; fi
nvcc=$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
cuda_libdir=$(cd "$(dirname "$nvcc")/../lib64" 2>/dev/null && pwd || echo /usr/local/cuda/lib64)

subst() { # template -> stdout
    sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" -e "s|@MAJOR@|$major|g" -e "s|@MINOR@|$minor|g" \
        -e "s|@ZLIB_CFLAGS@|$zlib_cflags|g" -e "s|@ZLIB_REQUIRES@|$zlib_requires|g" -e "s|@CUDA_LIBDIR@|$cuda_libdir|g" "$1"
}
mkdir -p "$root/include" "$root/share/gpudl" "$root/lib/pkgconfig" "$root/lib/cmake/gpudl"
cp gpudl.h "$root/include/gpudl.h"
cp gpudl_cuda.cu "$root/share/gpudl/gpudl_cuda.cu"
subst tools/install/gpudl.pc.in > "$root/lib/pkgconfig/gpudl.pc"
subst tools/install/gpudl-cuda.pc.in > "$root/lib/pkgconfig/gpudl-cuda.pc"
subst tools/install/gpudl-config.cmake.in > "$root/lib/cmake/gpudl/gpudl-config.cmake"
subst tools/install/gpudl-config-version.cmake.in > "$root/lib/cmake/gpudl/gpudl-config-version.cmake"
chmod 644 "$root/include/gpudl.h" "$root/share/gpudl/gpudl_cuda.cu" "$root/lib/pkgconfig/"gpudl*.pc "$root/lib/cmake/gpudl/"*.cmake
echo "installed gpudl $version into $root"
