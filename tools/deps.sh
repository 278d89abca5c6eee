#!/bin/sh
# tools/deps.sh — the one list of gpudl's prerequisites, and their installer.
#
#   sh tools/deps.sh run     what `make run` needs: a C compiler, make, zlib's headers
#   sh tools/deps.sh plot    what `make plot` needs: gnuplot
#   sh tools/deps.sh data    Debian's Fashion-MNIST package (tools/fetch_data.sh
#                            tries it first, then downloads)
#   sh tools/deps.sh test    what `make test` needs: also g++, clang and its libFuzzer, OpenBLAS's cblas.h,
#                            the aarch64 cross compiler and qemu-user, curl, cmake,
#                            pkg-config, gnuplot, OpenMPI (mpicc, mpirun), and the Fashion-MNIST package (the
#                            suite trains on it)
#
# Each prerequisite is probed (a command or a header on disk); only missing ones
# are installed, so a second run prints nothing and does nothing. Installing
# uses apt-get, as root or through `sudo -n`; it never asks a question. Where it
# cannot install, it prints the one command to run and exits 1.
# The CUDA toolkit (nvcc) is not an apt package here: it is looked for, not
# installed (see `nvcc_note` below).
set -u

what=${1:-test}
case "$what" in run|plot|data|test) ;; *) echo "usage: sh tools/deps.sh run|plot|data|test" >&2; exit 2 ;; esac

# probe kind, probe, Debian package
# kinds: cmd (a command on PATH), file (one of the '|'-separated paths exists),
#        glob (a shell pattern that matches a file)
run_list='
cmd  cc          gcc
cmd  make        make
file /usr/include/zlib.h  zlib1g-dev
'
plot_list='
cmd  gnuplot     gnuplot-nox
'
test_list='
cmd  g++         g++
cmd  cmake       cmake
cmd  pkg-config  pkgconf
cmd  clang       clang
glob /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a  libclang-rt-dev
cmd  curl        curl
file /usr/include/x86_64-linux-gnu/cblas.h|/usr/include/cblas.h|/usr/include/openblas/cblas.h  libopenblas-dev
cmd  aarch64-linux-gnu-gcc  gcc-aarch64-linux-gnu
cmd  qemu-aarch64           qemu-user
cmd  mpicc       libopenmpi-dev
cmd  mpirun      openmpi-bin
'
data_list='
file /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz  dataset-fashion-mnist
'
list=$run_list
[ "$what" = plot ] && list="$plot_list"
[ "$what" = data ] && list="$data_list"
[ "$what" = test ] && list="$run_list$plot_list$test_list$data_list"

missing=""
probe() { # kind probe -> 0 if present
    case "$1" in
    cmd) command -v "$2" >/dev/null 2>&1 ;;
    file) old_ifs=$IFS; IFS='|'
          for f in $2; do if [ -e "$f" ]; then IFS=$old_ifs; return 0; fi; done
          IFS=$old_ifs; return 1 ;;
    glob) # shellcheck disable=SC2086
          set -- $2; [ -e "$1" ] ;;
    esac
}
# shellcheck disable=SC2086
while read -r kind p pkg; do
    [ -n "$kind" ] || continue
    probe "$kind" "$p" || missing="$missing $pkg"
done <<LIST
$list
LIST

if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ]; then sudo=""
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"
    else sudo="none"
    fi
    if [ "$sudo" = none ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "gpudl: missing prerequisites for \`make $what\`:$missing" >&2
        if command -v apt-get >/dev/null 2>&1; then
            echo "gpudl: install them with:  sudo apt-get install -y$missing" >&2
        else
            echo "gpudl: these are Debian package names; install the equivalents with your system's package manager" >&2
        fi
        exit 1
    fi
    echo "gpudl: installing what \`make $what\` needs:$missing"
    export DEBIAN_FRONTEND=noninteractive
    # an old or empty package list makes installs fail: refresh it once
    $sudo apt-get -o DPkg::Lock::Timeout=300 update -qq || { echo "gpudl: apt-get update failed" >&2; exit 1; }
    # shellcheck disable=SC2086
    $sudo apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends $missing >/dev/null ||
        { echo "gpudl: apt-get install$missing failed (the messages above say why)" >&2; exit 1; }
fi

# nvcc: `make test` compiles the CUDA backend with it; it comes with NVIDIA's
# CUDA toolkit (usually /usr/local/cuda), which is not installed from here.
if [ "$what" = test ] && ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ] &&
   [ -z "${NVCC:-}" ]; then
    echo "gpudl: nvcc not found (not in PATH, not /usr/local/cuda/bin/nvcc): the nvcc builds of \`make test\`" \
         "will be skipped; install NVIDIA's CUDA toolkit or set NVCC=/path/to/nvcc to include them" >&2
fi
exit 0
