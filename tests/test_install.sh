#!/bin/sh
# test_install.sh — `make install` into a temporary prefix, then a program
# outside the repository (tests/install/consumer.c) built against it through
# pkg-config and through CMake's find_package(gpudl), with nvcc and gpudl::cuda
# too where the CUDA toolkit is; each build must run (on the CPU here) and
# train. Then `make uninstall` must leave the prefix empty.
# Ends with "N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/.." || exit 1
pass=0 fail=0 skip=0
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
step() { # name command... : runs it quietly, shows its output when it fails
    name=$1; shift
    if "$@" >"$t/log" 2>&1; then pass=$((pass + 1)); echo "  ok   $name"
    else fail=$((fail + 1)); echo "  FAIL $name:"; tail -n 15 "$t/log" | sed 's/^/       /'
    fi
}
p="$t/prefix"
nvcc=$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
cp tests/install/consumer.c tests/install/CMakeLists.txt "$t/" || exit 1
step "make install PREFIX=<tmp>" make --no-print-directory install PREFIX="$p"
step "installed files" test -f "$p/include/gpudl.h" -a -f "$p/share/gpudl/gpudl_cuda.cu" -a -f "$p/lib/pkgconfig/gpudl.pc" \
    -a -f "$p/lib/cmake/gpudl/gpudl-config.cmake"
export PKG_CONFIG_PATH="$p/lib/pkgconfig"
v=$(sed -n 's/^#define GPUDL_VERSION "\(.*\)"$/\1/p' gpudl.h) # the one place the version is written
step "GPUDL_VERSION is MAJOR.MINOR.PATCH" sh -c "echo '$v' | grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+\$'"
step "pkg-config --modversion gpudl = GPUDL_VERSION" test "$(pkg-config --modversion gpudl)" = "$v"
# shellcheck disable=SC2046
step "cc via pkg-config, and it trains" sh -c "cd '$t' && cc -std=c99 -O1 consumer.c \$(pkg-config --cflags --libs gpudl) -o c_pc && ./c_pc"
step "the installed gdl_version() = GPUDL_VERSION" sh -c "'$t/c_pc' | grep -q '^gpudl $v on '"
step "cmake find_package(gpudl GPUDL_VERSION EXACT), and it trains" sh -c "cmake -S '$t' -B '$t/b' -DCMAKE_PREFIX_PATH='$p' \
    -DGPUDL_EXPECT_VERSION='$v' && cmake --build '$t/b' && '$t/b/consumer'"
mkdir -p "$t/v9" && printf 'cmake_minimum_required(VERSION 3.18)\nproject(v C)\nfind_package(gpudl 9.0 REQUIRED)\n' > "$t/v9/CMakeLists.txt"
step "find_package(gpudl 9.0) refuses version 0.x" sh -c "! cmake -S '$t/v9' -B '$t/v9/b' -DCMAKE_PREFIX_PATH='$p'"
if [ -x "$nvcc" ] && [ "${GPUDL_INSTALL_TEST_CUDA:-1}" = 1 ]; then
    step "nvcc via pkg-config gpudl-cuda (builds; runs on the CPU without a GPU)" sh -c "cd '$t' && '$nvcc' -O1 \$(pkg-config --cflags gpudl-cuda) consumer.c \
        \$(pkg-config --variable=cuda_source gpudl-cuda) \$(pkg-config --libs gpudl-cuda) -o c_cuda && ./c_cuda"
    step "cmake gpudl::cuda (builds; runs on the CPU without a GPU)" sh -c "cmake -S '$t' -B '$t/bc' -DCMAKE_PREFIX_PATH='$p' -DGPUDL_EXPECT_VERSION='$v' -DWITH_CUDA=ON \
        -DCMAKE_CUDA_COMPILER='$nvcc' -DCMAKE_CUDA_ARCHITECTURES=80 && cmake --build '$t/bc' && '$t/bc/consumer_cuda'"
else
    skip=$((skip + 2)); echo "  SKIP the CUDA consumers: nvcc not found"
fi
step "make uninstall leaves nothing" sh -c "make --no-print-directory uninstall PREFIX='$p' && test -z \"\$(find '$p' -type f)\""
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
