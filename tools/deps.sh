#!/bin/sh
# tools/deps.sh — the one list of gpudl's prerequisites, and their installer.
#
#   sh tools/deps.sh run     what `make run` needs: a C compiler that links zlib, make
#   sh tools/deps.sh plot    what `make plot` needs: gnuplot
#   sh tools/deps.sh data    Debian's Fashion-MNIST package (tools/fetch_data.sh
#                            tries it first, then downloads)
#   sh tools/deps.sh data-text  Debian's fortunes in English, German, Spanish, Italian,
#                            Polish and Russian (the text data; tools/fetch_data.sh
#                            text tries them first, then unpacks them into ./data)
#   sh tools/deps.sh data-dict  Debian's FreeDict English-German dictionary (examples/seq2seq.c;
#                            tools/fetch_data.sh dict tries it first, then unpacks it into ./data)
#   sh tools/deps.sh test    what `make test` needs: also g++, gcc's sanitizers,
#                            clang with libFuzzer, OpenBLAS, the aarch64 cross
#                            compiler with its C library and qemu-user, OpenMPI,
#                            MinGW-w64 (with zlib) and Wine (make test-windows),
#                            curl, cmake, pkg-config, gnuplot, the Fashion-MNIST
#                            package, the fortunes packages and the dictionary (the
#                            suite trains on them), python3's yaml, arm-none-eabi-gcc with newlib
#                            and qemu-system-arm (make test-mcu's firmware), and as
#                            root Slurm and munge
#                            (make test-cluster's cluster)
#   sh tools/deps.sh mcu     what `make mcu-demo` needs: a C compiler, make, the Fashion-MNIST
#                            package, and the Cortex-M tools: arm-none-eabi-gcc with newlib and
#                            qemu-system-arm (`make test` needs them too: make test-mcu)
#   sh tools/deps.sh fresh   what tools/fresh_check.sh (make test-fresh) needs: debootstrap
#   sh tools/deps.sh onnx    what make test-onnx needs: python3's venv, and in the project's
#                            venv build/onnx-venv (ONNX_VENV overrides) the PyPI packages
#                            onnx, onnxruntime and numpy (pip, not apt: Debian has no
#                            onnxruntime; no torch: gdl_load_onnx is checked on the committed
#                            PyTorch exports of tests/onnx_fixtures); `make test` needs them too
#
# Each prerequisite is a capability, probed by doing what the suite does with
# it: compile and link a small program, run it (under qemu, under mpirun -np 2).
# A command that merely exists proves nothing: the aarch64 cross compiler
# without its C library was once "there" and failed 25 minutes into the suite.
# Only failing capabilities are installed, so a second run prints nothing. After
# an install every one of them is probed again, and one that still fails stops
# here with what it tried and what it printed: `make test` fails in its first
# minute, not in its last. Installing uses apt-get, as root or through `sudo -n`,
# and never asks a question. Where it cannot install, it prints the one command
# to run and exits 1.
# The CUDA toolkit (nvcc) is not an apt package here: it is looked for, not
# installed (see the end of this file).
set -u

what=${1:-test}
case "$what" in run|plot|data|data-text|data-dict|test|mcu|fresh|onnx) ;;
*) echo "usage: sh tools/deps.sh run|plot|data|data-text|data-dict|test|mcu|fresh|onnx" >&2; exit 2 ;; esac

# the venv of the ONNX test (tests/test_onnx.sh reads the same default)
root=$(cd "$(dirname "$0")/.." && pwd)
ONNX_VENV=${ONNX_VENV:-$root/build/onnx-venv}

# capability: the Debian packages it needs (all of them, not only the one that
# pulls the others in, since we install without Recommends)
packages() {
    case "$1" in
    cc)         echo "gcc libc6-dev zlib1g-dev" ;;
    make)       echo "make" ;;
    gnuplot)    echo "gnuplot-nox" ;;
    fmnist)     echo "dataset-fashion-mnist" ;;
    fortunes)   echo "fortunes-min fortunes fortunes-de fortunes-es fortunes-it fortunes-pl fortunes-ru" ;;
    freedict)   echo "dict-freedict-eng-deu" ;;
    cxx)        echo "g++" ;;
    sanitizers) echo "gcc g++" ;;
    fuzzer)     echo "clang libclang-rt-dev" ;;
    openblas)   echo "libopenblas-dev" ;;
    aarch64)    echo "gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user" ;;
    mpi)        echo "libopenmpi-dev openmpi-bin" ;;
    curl)       echo "curl" ;;
    cmake)      echo "cmake" ;;
    pkgconfig)  echo "pkgconf" ;;
    debootstrap) echo "debootstrap" ;;
    slurm)      echo "slurm-wlm munge" ;;
    yaml)       echo "python3-yaml" ;;
    mingw)      echo "gcc-mingw-w64-x86-64 libz-mingw-w64-dev" ;;
    wine)       echo "wine wine64" ;;
    mcu)        echo "gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm" ;;
    venv)       echo "python3 python3-venv" ;;
    esac
}

# capability: what it is, for messages
describe() {
    case "$1" in
    cc)         echo "cc compiles and links a C program with zlib (-lz)" ;;
    make)       echo "make" ;;
    gnuplot)    echo "gnuplot" ;;
    fmnist)     echo "Fashion-MNIST in /usr/share/datasets/fashion-mnist" ;;
    fortunes)   echo "the fortunes (en, de, es, it, pl, ru) in /usr/share/games/fortunes" ;;
    freedict)   echo "FreeDict's English-German dictionary in /usr/share/dictd (an index entry, the .dict.dz inflating)" ;;
    cxx)        echo "g++ compiles and links a C++17 program" ;;
    sanitizers) echo "gcc links with -fsanitize=address,undefined and -fsanitize=thread" ;;
    fuzzer)     echo "clang links a libFuzzer program (-fsanitize=fuzzer,address,undefined)" ;;
    openblas)   echo "cc links a program against OpenBLAS's cblas.h (-lopenblas)" ;;
    aarch64)    echo "aarch64-linux-gnu-gcc links a program against the cross C library, and qemu-aarch64 runs it" ;;
    mpi)        echo "mpicc links an MPI program, and mpirun -np 2 runs it" ;;
    curl)       echo "curl" ;;
    cmake)      echo "cmake" ;;
    pkgconfig)  echo "pkg-config" ;;
    debootstrap) echo "debootstrap" ;;
    slurm)      echo "Slurm's daemons and commands (munged, slurmctld, slurmd, sbatch, srun, scontrol) run" ;;
    yaml)       echo "python3 reads YAML (the Kubernetes manifests' check)" ;;
    mingw)      echo "x86_64-w64-mingw32-gcc links a Windows program with zlib (-static -lz)" ;;
    wine)       echo "wine runs a Windows program (a MinGW-w64 hello.exe)" ;;
    mcu)        echo "arm-none-eabi-gcc links a Cortex-M4F and a Cortex-M7 firmware with newlib, and qemu-system-arm runs them (semihosting)" ;;
    venv)       echo "python3 makes a virtual environment with pip (python3 -m venv)" ;;
    onnx)       echo "$ONNX_VENV's python checks and runs an ONNX model (onnx, onnxruntime, numpy) " ;;
    esac
}

case "$what" in
run)   caps="cc make" ;;
plot)  caps="gnuplot" ;;
data)  caps="fmnist" ;;
data-text) caps="fortunes" ;;
data-dict) caps="freedict" ;;
fresh) caps="debootstrap" ;;
mcu)   caps="cc make fmnist mcu" ;;
onnx)  caps="cc venv onnx" ;;
test)  caps="cc make gnuplot cxx sanitizers fuzzer openblas aarch64 mpi curl cmake pkgconfig fmnist fortunes freedict yaml mingw wine mcu venv onnx" ;;
esac
# the one-node Slurm cluster of make test-cluster runs its daemons as root: elsewhere it is skipped
# (loudly), so Slurm is a prerequisite only for root
if [ "$what" = test ] && [ "$(id -u)" = 0 ]; then caps="$caps slurm"; fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpudl-deps.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP

have() { command -v "$1" >/dev/null 2>&1; }

# probe CAP: 0 when the capability works; what it ran and printed goes to $tmp/CAP.log
probe() {
    log="$tmp/$1.log"
    : >"$log"
    (cd "$tmp" && "probe_$1") >>"$log" 2>&1
}

probe_cc() {
    have cc || { echo "no cc"; return 1; }
    printf '#include <stdio.h>\n#include <zlib.h>\nint main(void){printf("%%lu\\n",(unsigned long)crc32(0L,Z_NULL,0));return 0;}\n' >z.c
    cc -std=c99 z.c -o z -lz -lm -pthread && ./z
}
probe_make() { have make || { echo "no make"; return 1; }; }
probe_gnuplot() { have gnuplot || { echo "no gnuplot"; return 1; }; }
probe_curl() { have curl || { echo "no curl"; return 1; }; }
probe_cmake() { have cmake && cmake --version >/dev/null || { echo "no working cmake"; return 1; }; }
probe_pkgconfig() { have pkg-config || { echo "no pkg-config"; return 1; }; }
probe_debootstrap() { have debootstrap || { echo "no debootstrap"; return 1; }; }
probe_fmnist() {
    [ -e /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ] ||
        { echo "no /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"; return 1; }
}
# a file of each package, as gdl_fortunes_english / gdl_fortunes_languages read them: fortunes-min's
# and fortunes' English files, and a UTF-8 text file in each language's directory
probe_fortunes() {
    d=/usr/share/games/fortunes
    for f in fortunes riddles cookie zippy de/anekdoten es/refranes.fortunes it/italia pl/7thguard ru/2001.03; do
        [ -s "$d/$f" ] || { echo "no $d/$f"; return 1; }
    done
}
# what seq2seq does with the dictionary: an index line "headword TAB offset TAB length" for "house", and the
# .dict.dz inflating whole (dictzip is gzip) to text that holds the entry
probe_freedict() {
    d=/usr/share/dictd/freedict-eng-deu
    grep -q "$(printf '^house\t[A-Za-z0-9+/]*\t[A-Za-z0-9+/]*$')" "$d.index" || { echo "no entry for house in $d.index"; return 1; }
    gzip -dc "$d.dict.dz" | grep -q '^Haus <neut>' || { echo "$d.dict.dz does not inflate to the entries"; return 1; }
}
probe_cxx() {
    have g++ || { echo "no g++"; return 1; }
    printf '#include <vector>\nint main(){std::vector<int> v{1,2};return v[1]==2?0:1;}\n' >x.cpp
    g++ -std=c++17 x.cpp -o x && ./x
}
probe_sanitizers() {
    have gcc || { echo "no gcc"; return 1; }
    printf '#include <stdlib.h>\nint main(void){int *p=malloc(4);*p=0;free(p);return 0;}\n' >s.c
    gcc -std=c99 -fsanitize=address,undefined s.c -o s_asan && ./s_asan &&
    gcc -std=c99 -fsanitize=thread s.c -o s_tsan -pthread
}
probe_fuzzer() {
    have clang || { echo "no clang"; return 1; }
    printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n){(void)d;(void)n;return 0;}\n' >f.c
    clang -fsanitize=fuzzer,address,undefined f.c -o f && ./f -runs=1 >/dev/null 2>&1
}
probe_openblas() {
    have cc || { echo "no cc"; return 1; }
    printf '#include <cblas.h>\nint main(void){float a=2,b=3,c=0;cblas_sgemm(CblasRowMajor,CblasNoTrans,CblasNoTrans,1,1,1,1.f,&a,1,&b,1,0.f,&c,1);return c==6.f?0:1;}\n' >b.c
    cc -std=c99 b.c -o b -lopenblas && ./b
}
probe_aarch64() {
    have aarch64-linux-gnu-gcc || { echo "no aarch64-linux-gnu-gcc"; return 1; }
    have qemu-aarch64 || { echo "no qemu-aarch64"; return 1; }
    # the headers and libraries the suite's cross builds use
    printf '#include <stdio.h>\n#include <stdint.h>\n#include <math.h>\n#include <pthread.h>\nint main(void){printf("%%d\\n",(int)sqrt(16.0));return 0;}\n' >a.c
    aarch64-linux-gnu-gcc -std=c99 -O2 a.c -o a -pthread -lm &&
    test "$(qemu-aarch64 -L /usr/aarch64-linux-gnu ./a)" = 4 || return 1
    # clang's cross build of the header (tests/cpu_paths.mk) uses the same C library
    if have clang; then clang --target=aarch64-linux-gnu -std=c99 -c a.c -o a.o || return 1; fi
}
probe_slurm() {
    PATH=$PATH:/usr/sbin:/sbin
    for p in munged slurmctld slurmd sbatch srun scontrol squeue scancel sinfo; do have "$p" || { echo "no $p"; return 1; }; done
    slurmd -V && munged --version
}
probe_yaml() { have python3 && python3 -c 'import yaml; yaml.safe_load("a: [1]")' || { echo "no python3 yaml module"; return 1; }; }
probe_mpi() {
    have mpicc || { echo "no mpicc"; return 1; }
    have mpirun || { echo "no mpirun"; return 1; }
    printf '#include <mpi.h>\n#include <stdio.h>\nint main(int c,char**v){int n=0;MPI_Init(&c,&v);MPI_Comm_size(MPI_COMM_WORLD,&n);MPI_Finalize();return n==2?0:1;}\n' >m.c
    mpicc m.c -o m || return 1
    root=""; [ "$(id -u)" = 0 ] && root=--allow-run-as-root
    timeout 120 mpirun --oversubscribe $root -np 2 ./m
}
probe_mingw() {
    have x86_64-w64-mingw32-gcc || { echo "no x86_64-w64-mingw32-gcc"; return 1; }
    printf '#include <stdio.h>\n#include <zlib.h>\nint main(void){printf("%%lu\\n",(unsigned long)crc32(0L,Z_NULL,0));return 0;}\n' >w.c
    x86_64-w64-mingw32-gcc -std=c99 w.c -o w.exe -static -lz
}
# wine runs the exe in a throw-away prefix (made on the first run: some seconds)
probe_wine() {
    have wine || { echo "no wine"; return 1; }
    have x86_64-w64-mingw32-gcc || { echo "no x86_64-w64-mingw32-gcc to build hello.exe"; return 1; }
    printf '#include <stdio.h>\nint main(void){printf("hello\\n");return 0;}\n' >h.c
    x86_64-w64-mingw32-gcc h.c -o h.exe || return 1
    out=$(WINEPREFIX="$tmp/wineprefix" WINEDEBUG=-all WINEDLLOVERRIDES='mscoree,mshtml=' DISPLAY= timeout 300 wine h.exe)
    WINEPREFIX="$tmp/wineprefix" wineserver -k 2>/dev/null
    [ "$(printf '%s' "$out" | tr -d '\r')" = hello ] || { echo "wine h.exe printed '$out'"; return 1; }
}
# a firmware as make test-mcu builds them (examples/mcu/firmware.sh): hard float, newlib's memcpy and
# expf, a vector table, semihosting's SYS_WRITE0 and SYS_EXIT; run on both boards, its output checked
probe_mcu() {
    have arm-none-eabi-gcc || { echo "no arm-none-eabi-gcc"; return 1; }
    have qemu-system-arm || { echo "no qemu-system-arm"; return 1; }
    cat >fw.c <<'EOF_FW'
#include <math.h>
#include <stdint.h>
#include <string.h>
static int semihost(int op, const void *arg) {
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}
extern uint32_t __stack_top[];
void reset(void) {
    volatile float x = 0.0f;
    char s[8];
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
    __asm__ volatile("dsb\n\tisb" ::: "memory");
    memcpy(s, "mcu ok\n", 8);
    if (expf(x) == 1.0f) semihost(4, s);
    semihost(0x18, (const void *)0x20026);
}
__attribute__((section(".vectors"), used)) static void (*const vectors[2])(void) = {
    (void (*)(void))(uintptr_t)__stack_top, reset};
EOF_FW
    printf 'MEMORY { FLASH (rx) : ORIGIN = 0, LENGTH = 4M\n RAM (rwx) : ORIGIN = 0x20000000, LENGTH = 4M }\nSECTIONS { .text : { KEEP(*(.vectors)) *(.text*) *(.rodata*) } > FLASH\n .data : { *(.data*) } > RAM AT > FLASH\n .bss : { *(.bss*) *(COMMON) . = ALIGN(8); . += 0x1000; __stack_top = .; } > RAM }\n' >fw.ld
    for b in "mps2-an386 -mcpu=cortex-m4 -mfpu=fpv4-sp-d16" "mps2-an500 -mcpu=cortex-m7 -mfpu=fpv5-d16"; do
        set -- $b
        arm-none-eabi-gcc $2 $3 -mthumb -mfloat-abi=hard -O2 -std=c99 -T fw.ld -nostartfiles --specs=nano.specs \
            --specs=nosys.specs fw.c -lm -o fw.elf || return 1
        out=$(timeout 60 qemu-system-arm -M "$1" -nographic -monitor none -serial none -chardev file,id=o,path=fw.txt \
              -semihosting-config enable=on,target=native,chardev=o -icount shift=0 -kernel fw.elf </dev/null && cat fw.txt)
        [ "$out" = "mcu ok" ] || { echo "qemu-system-arm -M $1 printed '$out'"; return 1; }
    done
}

probe_venv() {
    have python3 || { echo "no python3"; return 1; }
    python3 -m venv "$tmp/venv-probe" && "$tmp/venv-probe/bin/python" -m pip --version
}
# what tests/onnx_check.py does: check a model (full_check) and run it in ONNX Runtime
probe_onnx() {
    [ -x "$ONNX_VENV/bin/python" ] || { echo "no $ONNX_VENV/bin/python"; return 1; }
    "$ONNX_VENV/bin/python" -c '
import numpy as np, onnx, onnxruntime as ort
from onnx import helper, TensorProto
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
m.ir_version = 8
onnx.checker.check_model(m, full_check=True)
s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
y = s.run(None, {"x": np.array([[-1, 2]], np.float32)})[0]
assert y.tolist() == [[0, 2]], y
print("onnx", onnx.__version__, "onnxruntime", ort.__version__)'
}
# the venv and its PyPI packages: pip, not apt (probe_onnx says whether it worked)
install_onnx() {
    echo "gpudl: making $ONNX_VENV with onnx, onnxruntime and numpy (pip)"
    { [ -x "$ONNX_VENV/bin/python" ] || python3 -m venv "$ONNX_VENV"; } &&
        "$ONNX_VENV/bin/python" -m pip install -q onnx onnxruntime numpy >"$tmp/pip.log" 2>&1 ||
        { tail -n 20 "$tmp/pip.log" >&2 2>/dev/null;
          echo "gpudl: pip install onnx onnxruntime numpy failed" >&2; }
}

failing=""
for c in $caps; do probe "$c" || failing="$failing $c"; done
# onnx is pip's: installed at the end, once venv (apt) works
pip_failing=""
case " $failing " in *" onnx "*) pip_failing=onnx; failing=$(echo "$failing" | sed 's/ onnx//') ;; esac

pkgs_of() { # caps -> their packages, each once
    out=""
    for c in "$@"; do
        for p in $(packages "$c"); do
            case " $out " in *" $p "*) ;; *) out="$out $p" ;; esac
        done
    done
    echo "$out"
}

report() { # caps that fail -> stderr
    for c in "$@"; do
        if [ -s "$tmp/$c.log" ]; then
            echo "gpudl:   $(describe "$c"): fails (packages:$(pkgs_of "$c")); the last lines it printed:" >&2
            tail -n 8 "$tmp/$c.log" | sed -e 's/^/gpudl:     /' >&2
        else
            echo "gpudl:   $(describe "$c"): fails (packages:$(pkgs_of "$c")), printing nothing" >&2
        fi
    done
}

if [ -n "$failing" ]; then
    # shellcheck disable=SC2086
    missing=$(pkgs_of $failing)
    if [ "$(id -u)" = 0 ]; then sudo=""
    elif have sudo && sudo -n true 2>/dev/null; then sudo="sudo -n"
    else sudo="none"
    fi
    if [ "$sudo" = none ] || ! have apt-get; then
        echo "gpudl: missing prerequisites for \`make $what\`:" >&2
        # shellcheck disable=SC2086
        report $failing
        if have apt-get; then
            echo "gpudl: install them with:  sudo apt-get install -y --no-install-recommends$missing" >&2
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
    $sudo apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends $missing >"$tmp/apt.log" 2>&1 ||
        { tail -n 20 "$tmp/apt.log" >&2; echo "gpudl: apt-get install$missing failed (the messages above say why)" >&2; exit 1; }
    still=""
    for c in $failing; do probe "$c" || still="$still $c"; done
    if [ -n "$still" ]; then
        echo "gpudl: installed$missing, but these still fail:" >&2
        # shellcheck disable=SC2086
        report $still
        exit 1
    fi
fi

if [ -n "$pip_failing" ]; then
    install_onnx
    if ! probe onnx; then
        report onnx
        exit 1
    fi
fi

# nvcc: `make test` compiles the CUDA backend with it; it comes with NVIDIA's
# CUDA toolkit (usually /usr/local/cuda), which is not installed from here.
if [ "$what" = test ] && ! have nvcc && [ ! -x /usr/local/cuda/bin/nvcc ] && [ -z "${NVCC:-}" ]; then
    echo "gpudl: nvcc not found (not in PATH, not /usr/local/cuda/bin/nvcc): the nvcc builds of \`make test\`" \
         "will be skipped; install NVIDIA's CUDA toolkit or set NVCC=/path/to/nvcc to include them" >&2
fi
exit 0
