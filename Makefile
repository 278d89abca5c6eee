# Makefile — builds gpudl's tests, examples and benchmarks.
#
#   make run         train the Fashion-MNIST MLP (examples/mnist_mlp); on a fresh
#                    machine it first installs a compiler and zlib's headers if
#                    missing, and gets Fashion-MNIST (`make data`)
#   make test        everything CI checks; first installs what the suite needs
#                    (tools/deps.sh test): the test suite (plain and under
#                    ASan/UBSan), warning-free builds (gcc, clang; C99, C11,
#                    C++17), the harness self-test, the data download test, the
#                    CUDA builds with nvcc, the GPU suite on the CUDA emulator, and
#                    the CPU suite on every CPU code path
#   make deps        install what `make test` needs (tools/deps.sh, the one list)
#   make test-fresh  CI's .ci/run and `make run` in a fresh minimal Debian root
#                    (tools/fresh_check.sh; root only; not part of make test)
#   make plot        draw make run's metrics CSV (mnist_mlp_metrics.csv) as a PNG
#   make data        get Fashion-MNIST: Debian's package, else a checked download
#                    into ./data (tools/fetch_data.sh)
#   make             build the tests, examples and benchmarks (CPU)
#   make test-cuda   the GPU suite (needs a GPU)
#   make bench       CPU benchmarks
#   make cuda        CUDA builds of the examples
#   make clean
#   make amalgamate  join src/ and cuda/ (order: src/PARTS, cuda/PARTS) into gpudl.h and
#                    gpudl_cuda.cu: edit the parts, not those two (make test checks they match)
#   make dev-header  the same into build/dev/ with #line, so errors and gdb name src/ files; tests
#                    include "../gpudl.h", so build a copy from there: cp tests/test_core.c
#                    build/dev/tests/ && cc -std=c99 -Itests build/dev/tests/test_core.c -lm -pthread
#
# Override CC, CXX, CFLAGS, NVCC, CUDA_ARCH as usual.

CC ?= cc
CXX ?= c++
CFLAGS ?= -O2 -g -march=native
NVCC ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
STD = -std=c99
WARN = -Wall -Wextra -Wpedantic
B = build

# gpudl's CPU kernels use its own thread pool (-pthread), not OpenMP: no
# -fopenmp (harmless if given). Kept empty for the rules that still name it.
OPENMP =
# zlib when the toolchain has it
ZLIB := $(shell test -f /usr/include/zlib.h && echo yes)
ifeq ($(ZLIB),yes)
ZFLAGS = -DGPUDL_ZLIB
ZLIBS = -lz
endif
LIBS = -pthread -lm $(ZLIBS)

TESTS = $(B)/test_core $(B)/test_gradcheck $(B)/test_alloc $(B)/test_formats $(B)/test_data $(B)/test_nn $(B)/test_train $(B)/test_crash $(B)/test_resume $(B)/test_monitor $(B)/test_pool $(B)/test_dtype
ASAN_TESTS = $(B)/asan_test_core $(B)/asan_test_gradcheck $(B)/asan_test_alloc $(B)/asan_test_formats $(B)/asan_test_data $(B)/tsan_test_data $(B)/asan_test_nn $(B)/asan_test_train $(B)/asan_test_crash $(B)/asan_test_resume $(B)/asan_test_monitor $(B)/tsan_test_monitor $(B)/asan_test_pool $(B)/tsan_test_pool $(B)/asan_test_dtype
SAN = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

HDR = gpudl.h tests/harness.h tests/op_cases.h tests/monitor_cases.h tests/dtype_parity.h tests/autocast_cases.h \
      tests/gradscaler_cases.h tests/master_cases.h tests/fusion_cases.h

# the examples compiled with nvcc (CUDA builds) are part of `make test`
.PHONY: all test test-all test-unit test-asan test-warnings test-harness test-fetch test-examples test-install test-fuzz test-cuda-build test-cuda-build-nvcc test-cuda test-fresh run deps data plot mutate-cuda install uninstall bench cuda clean

EXAMPLES = $(B)/mnist_mlp $(B)/cnn $(B)/keras_style $(B)/linear_regression $(B)/cpu_vs_gpu $(B)/device_query $(B)/gpu_monitor $(B)/ddp $(B)/model_parallel
CUDA_EXAMPLES = $(B)/cuda_mnist_mlp $(B)/cuda_cnn $(B)/cuda_keras_style $(B)/cuda_linear_regression $(B)/cuda_device_query \
                $(B)/cuda_gpu_monitor $(B)/cuda_model_parallel $(B)/cuda_cpu_vs_gpu $(B)/cuda_ddp

all: $(TESTS) $(EXAMPLES)

$(B)/%: examples/%.c examples/example_args.h gpudl.h | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) $(OPENMP) $(ZFLAGS) $< -o $@ $(LIBS)

# the monitor reads NVML in a CPU build too; a stand-in NVML library for its tests
$(B)/gpu_monitor: examples/gpu_monitor.c gpudl.h | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) -DGPUDL_NVML $< -o $@ $(LIBS)
$(B)/libfake_nvml.so: tests/fake_nvml.c | $(B)
	$(CC) $(STD) -O1 -shared -fPIC $< -o $@

# one nvcc command per example, as README gives them
$(B)/cuda_%: examples/%.c examples/example_args.h gpudl.h $(B)/gpudl_cuda.o | $(B)
	$(NVCC) -O3 $(CUDA_ARCH) -DGPUDL_CUDA $(ZFLAGS) $< $(B)/gpudl_cuda.o -lcublas -lcublasLt -lnccl $(ZLIBS) -o $@

$(B)/gpudl_cuda.o: gpudl_cuda.cu gpudl.h | $(B)
	$(NVCC) -std=c++17 -O3 $(CUDA_ARCH) -Xcompiler -Wall,-Wextra -DGPUDL_CUDA -c gpudl_cuda.cu -o $@

$(B)/cuda_bench_train: bench/train.c bench/bench_cpu.h gpudl.h $(B)/gpudl_cuda.o | $(B)
	$(NVCC) -O3 $(CUDA_ARCH) -DGPUDL_CUDA $< $(B)/gpudl_cuda.o -lcublas -lcublasLt -lnccl -o $@

cuda: $(CUDA_EXAMPLES) $(B)/cuda_bench_train $(B)/cuda_fmnist92

# Set-up first, then a make of its own: the compiler probes above (zlib,
# OpenMP) must see what the set-up installed.
run:
	@sh tools/deps.sh run
	@sh tools/fetch_data.sh
	@$(MAKE) --no-print-directory $(B)/mnist_mlp
	$(B)/mnist_mlp

deps:
	@sh tools/deps.sh test

# .ci/run and make run on a fresh minimal Debian (FRESH_ARGS=--new remakes its root)
test-fresh:
	@sh tools/fresh_check.sh $(FRESH_ARGS)

# the GPU suite's mutation check: 42 planted kernel bugs, one at a time, on the emulator (minutes)
mutate-cuda:
	sh tests/mutate_cuda.sh

# the loss and accuracy curves of make run's metrics CSV, as a PNG
plot:
	@sh tools/deps.sh plot
	@sh tools/plot.sh mnist_mlp_metrics.csv mnist_mlp_metrics.png

# gpudl.h, gpudl_cuda.cu (as source), gpudl.pc, gpudl-cuda.pc and a CMake package
PREFIX ?= /usr/local
install:
	@sh tools/install.sh install "$(PREFIX)" "$(DESTDIR)"
uninstall:
	@sh tools/install.sh uninstall "$(PREFIX)" "$(DESTDIR)"

data:
	@sh tools/fetch_data.sh

$(B):
	mkdir -p $(B)

$(B)/test_core: tests/test_core.c $(HDR) | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) $(OPENMP) $(ZFLAGS) $< -o $@ $(LIBS)
$(B)/test_gradcheck: tests/test_gradcheck.c $(HDR) | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) $(OPENMP) -DGPUDL_DOUBLE $< -o $@ $(LIBS)
$(B)/test_alloc: tests/test_alloc.c $(HDR) | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) $(ZFLAGS) $< -o $@ $(LIBS)

$(B)/test_formats: tests/test_formats.c $(HDR) | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) $(ZFLAGS) $< -o $@ $(LIBS)
$(B)/asan_test_formats: tests/test_formats.c $(HDR) | $(B)
	$(CC) $(STD) -O1 -g $(SAN) $(ZFLAGS) $< -o $@ $(LIBS)

$(B)/test_data: tests/test_data.c $(HDR) | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) $(ZFLAGS) $< -o $@ $(LIBS)
$(B)/asan_test_data: tests/test_data.c $(HDR) | $(B)
	$(CC) $(STD) -O1 -g $(SAN) $(ZFLAGS) $< -o $@ $(LIBS)
# the loader's worker threads, under ThreadSanitizer
$(B)/tsan_test_data: tests/test_data.c $(HDR) | $(B)
	$(CC) $(STD) -O1 -g -fsanitize=thread $(ZFLAGS) $< -o $@ $(LIBS)

$(B)/test_nn: tests/test_nn.c $(HDR) | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) $(OPENMP) $(ZFLAGS) $< -o $@ $(LIBS)
$(B)/asan_test_nn: tests/test_nn.c $(HDR) | $(B)
	$(CC) $(STD) -O1 -g $(SAN) $(ZFLAGS) $< -o $@ $(LIBS)
$(B)/test_dtype: tests/test_dtype.c tests/dtype_parity.h tests/op_cases.h $(HDR) | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) $(OPENMP) $(ZFLAGS) $< -o $@ $(LIBS)
$(B)/asan_test_dtype: tests/test_dtype.c tests/dtype_parity.h tests/op_cases.h $(HDR) | $(B)
	$(CC) $(STD) -O1 -g $(SAN) $(ZFLAGS) $< -o $@ $(LIBS)
$(B)/test_train: tests/test_train.c $(HDR) | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) $(OPENMP) $(ZFLAGS) $< -o $@ $(LIBS)
$(B)/asan_test_train: tests/test_train.c $(HDR) | $(B)
	$(CC) $(STD) -O1 -g $(SAN) $(ZFLAGS) $< -o $@ $(LIBS)

# checkpoints against SIGKILL mid-save and a full disk (POSIX)
$(B)/test_crash: tests/test_crash.c $(HDR) | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) $< -o $@ $(LIBS)
$(B)/asan_test_crash: tests/test_crash.c $(HDR) | $(B)
	$(CC) $(STD) -O1 -g $(SAN) $< -o $@ $(LIBS)
# gdl_fit killed mid-epoch and resumed: the weights of an uninterrupted run (POSIX)
$(B)/test_resume: tests/test_resume.c $(HDR) | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) $(OPENMP) $< -o $@ $(LIBS)
$(B)/asan_test_resume: tests/test_resume.c $(HDR) | $(B)
	$(CC) $(STD) -O1 -g $(SAN) $< -o $@ $(LIBS)

# the CPU thread pool: plain, ASan+UBSan (workers joined at exit), ThreadSanitizer
$(B)/test_pool: tests/test_pool.c $(HDR) | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) $< -o $@ $(LIBS)
$(B)/asan_test_pool: tests/test_pool.c $(HDR) | $(B)
	$(CC) $(STD) -O1 -g $(SAN) $< -o $@ $(LIBS)
$(B)/tsan_test_pool: tests/test_pool.c $(HDR) | $(B)
	$(CC) $(STD) -O1 -g -fsanitize=thread $< -o $@ $(LIBS)

# GPU monitoring through NVML's real code path, on the stand-in library
$(B)/test_monitor: tests/test_monitor.c $(HDR) $(B)/libfake_nvml.so | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) -DGPUDL_NVML -DFAKE_NVML='"$(B)/libfake_nvml.so"' $< -o $@ $(LIBS)
$(B)/asan_test_monitor: tests/test_monitor.c $(HDR) $(B)/libfake_nvml.so | $(B)
	$(CC) $(STD) -O1 -g $(SAN) -DGPUDL_NVML -DFAKE_NVML='"$(B)/libfake_nvml.so"' $< -o $@ $(LIBS)
# NVML's first load from several threads, under ThreadSanitizer
$(B)/tsan_test_monitor: tests/test_monitor.c $(HDR) $(B)/libfake_nvml.so | $(B)
	$(CC) $(STD) -O1 -g -fsanitize=thread -DGPUDL_NVML -DFAKE_NVML='"$(B)/libfake_nvml.so"' $< -o $@ $(LIBS)

$(B)/asan_test_core: tests/test_core.c $(HDR) | $(B)
	$(CC) $(STD) -O1 -g $(SAN) $(ZFLAGS) $< -o $@ $(LIBS)
$(B)/asan_test_gradcheck: tests/test_gradcheck.c $(HDR) | $(B)
	$(CC) $(STD) -O1 -g $(SAN) -DGPUDL_DOUBLE $< -o $@ $(LIBS)
$(B)/asan_test_alloc: tests/test_alloc.c $(HDR) | $(B)
	$(CC) $(STD) -O1 -g $(SAN) $(ZFLAGS) $< -o $@ $(LIBS)

# Parts of `make test` that live in their own fragments:
#   tests/cuda_emu/emu.mk   test-emu (the GPU suite on the CUDA-on-CPU emulator), emu
#   tests/cpu_paths.mk      test-cpu-paths (AVX-512 / AVX2 / portable C), test-aarch64 (qemu)
#   tests/fuzz/fuzz.mk      fuzz (libFuzzer harnesses for every parser), fuzz-seeds
#   tests/dist.mk           test-dist (launch environments, sharding; 2 MPI ranks)
-include tests/cuda_emu/emu.mk
-include tests/dist.mk
-include tests/cpu_paths.mk
-include tests/fuzz/fuzz.mk

test: test-amalgamation
	@sh tools/deps.sh test
	@$(MAKE) --no-print-directory test-all

test-all: test-warnings test-harness test-fetch test-examples test-install test-fuzz test-cuda-build test-unit test-dist test-emu test-dist-nccl test-cpu-paths test-aarch64

test-unit: $(TESTS) $(ASAN_TESTS)
	ASAN_OPTIONS=detect_leaks=1 sh tests/run.sh $(TESTS) $(ASAN_TESTS)

test-asan: $(ASAN_TESTS)
	sh tests/run.sh $(ASAN_TESTS)

# The header (implementation included) must build warning-free everywhere.
test-warnings: | $(B)
	@set -e; for c in "gcc -std=c99" "gcc -std=c11" "clang -std=c99" "clang -std=c11" "gcc -std=c99 -fopenmp" \
	    "gcc -std=c99 -O2" "gcc -std=c99 -O3 -march=native -fopenmp" "clang -std=c99 -O3" \
	    "gcc -std=c99 -DGPUDL_STATIC" "clang -std=c11 -DGPUDL_STATIC" "gcc -std=c99 -DGPUDL_CBLAS" \
	    "gcc -std=c99 -DGPUDL_DOUBLE" "gcc -std=c99 -DGPUDL_ZLIB" "gcc -std=c99 -O2 -DGPUDL_NVML" "clang -std=c11 -DGPUDL_NVML"; do \
	  echo "warnings: $$c"; $$c $(WARN) -Werror -c tests/build_check.c -o $(B)/build_check.o; done; \
	echo "warnings: gcc -std=c99 -DGPUDL_NO_THREADS"; gcc -std=c99 $(WARN) -Werror -DGPUDL_NO_THREADS -c tests/build_check.c -o $(B)/build_check.o; \
	for c in "g++ -std=c++17" "clang++ -std=c++17"; do \
	  echo "warnings: $$c"; $$c $(WARN) -Werror -x c++ -c tests/build_check.c -o $(B)/build_check.o; done; \
	for f in tests/test_core.c tests/test_alloc.c tests/test_formats.c tests/test_data.c tests/test_nn.c tests/test_train.c \
	    tests/test_crash.c tests/test_resume.c tests/test_pool.c tests/test_dtype.c examples/mnist_mlp.c bench/fmnist92.c; do echo "warnings: clang $$f"; \
	  clang -std=c99 $(WARN) -Werror -c $$f -o $(B)/w.o; done; \
	clang -std=c99 $(WARN) -Werror -DGPUDL_DOUBLE -c tests/test_gradcheck.c -o $(B)/w.o

test-harness:
	CC=$(CC) sh tests/harness_selftest.sh

# tools/fetch_data.sh's download path, on a local file:// mirror
test-fetch:
	sh tests/run.sh tests/test_fetch.sh

# make install into a temporary prefix; programs built through pkg-config and CMake
test-install:
	sh tests/run.sh tests/test_install.sh

# every parser under libFuzzer for a short while (`make fuzz` for longer)
TEST_FUZZ_SECONDS ?= 30
test-fuzz:
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(TEST_FUZZ_SECONDS)

# the examples as a user runs them: flags, errors, a short training run
test-examples: $(EXAMPLES) $(B)/libfake_nvml.so
	GPUDL_BUILD=$(B) sh tests/run.sh tests/test_examples.sh

# CI has no GPU: the CUDA backend and the CUDA builds must still compile and link.
# Without nvcc (no CUDA toolkit) this part is skipped, loudly.
test-cuda-build: | $(B)
	@if test -x "$(NVCC)"; then $(MAKE) --no-print-directory test-cuda-build-nvcc; else \
	  echo "SKIPPED: nvcc not found (not in PATH, not /usr/local/cuda/bin/nvcc; set NVCC=...): the CUDA builds were not checked"; fi

test-cuda-build-nvcc: | $(B)
	$(MAKE) --no-print-directory $(B)/gpudl_cuda.o $(CUDA_EXAMPLES) $(B)/cuda_bench_train $(B)/cuda_fmnist92
	$(B)/cuda_device_query
	GPUDL_BUILD=$(B) sh tests/run.sh tests/test_cuda_fallback.sh
	$(NVCC) -O2 $(CUDA_ARCH) -DGPUDL_CUDA tests/cuda_link_check.c $(B)/gpudl_cuda.o -lcublas -lcublasLt -lnccl -o $(B)/cuda_link_check
	$(B)/cuda_link_check
	$(NVCC) -O2 $(CUDA_ARCH) -DGPUDL_CUDA tests/test_cuda.c $(B)/gpudl_cuda.o -lcublas -lcublasLt -lnccl -o $(B)/test_cuda_build
	sh tests/run.sh $(B)/test_cuda_build

test-cuda: | $(B)
	$(NVCC) -std=c++17 -O2 -arch=sm_90 -DGPUDL_CUDA -c gpudl_cuda.cu -o $(B)/gpudl_cuda_sm90.o
	$(NVCC) -O2 -arch=sm_90 -DGPUDL_CUDA tests/test_cuda.c $(B)/gpudl_cuda_sm90.o -lcublas -lcublasLt -lnccl -o $(B)/test_cuda
	$(B)/test_cuda

$(B)/bench_train: bench/train.c bench/bench_cpu.h gpudl.h | $(B)
	$(CC) $(STD) -O3 -march=native bench/train.c -o $@ $(LIBS)

# Fashion-MNIST to 92 % end to end (issue 10's target; bench/pytorch/fmnist92.py is PyTorch's side)
$(B)/fmnist92: bench/fmnist92.c examples/example_args.h gpudl.h | $(B)
	$(CC) $(STD) $(WARN) -O3 -march=native $(OPENMP) $(ZFLAGS) $< -o $@ $(LIBS)
$(B)/cuda_fmnist92: bench/fmnist92.c examples/example_args.h gpudl.h $(B)/gpudl_cuda.o | $(B)
	$(NVCC) -O3 $(CUDA_ARCH) -DGPUDL_CUDA $(ZFLAGS) $< $(B)/gpudl_cuda.o -lcublas -lcublasLt -lnccl $(ZLIBS) -o $@

# mixed precision against f32: memory, step time, Fashion-MNIST accuracy (bench/RESULTS.md)
$(B)/bench_amp: bench/amp.c bench/bench_cpu.h gpudl.h | $(B)
	$(CC) $(STD) $(WARN) -O3 -march=native $(ZFLAGS) bench/amp.c -o $@ $(LIBS)

# bench/compare_cpu.sh: ours against PyTorch on the CPU; bench/busy_cpu.sh:
# with and without another busy process
bench: $(B)/bench_train
	$(B)/bench_train mlp cnn fc10 fc50
	$(CC) $(STD) -O3 -march=native $(OPENMP) bench/gemm.c -o $(B)/bench_gemm $(LIBS) \
	  $(shell (test -f /usr/include/cblas.h || test -f /usr/include/x86_64-linux-gnu/cblas.h) && echo -DGPUDL_BENCH_OPENBLAS -lopenblas)
	$(B)/bench_gemm

clean:
	rm -rf $(B)

# ---- gpudl.h and gpudl_cuda.cu, joined from src/ and cuda/ (tools/amalgamate.sh) ----
.PHONY: amalgamate dev-header test-amalgamation
amalgamate:
	sh tools/amalgamate.sh

# A build that needs gpudl.h (or gpudl_cuda.cu) regenerates it when a part is
# newer. The script replaces a file only when its bytes change, and the recipe
# does not touch it: when the parts make the same bytes (after a checkout the
# parts may be newer), the file keeps its mtime, so nothing built from it is
# rebuilt (make compares the mtime after the recipe); make just re-runs the
# script, silent and a few milliseconds, while the parts stay newer. A touch
# would rebuild every test and example once for nothing. No loop either way.
# (Only where the parts are: a copy of the tree without src/ builds as before.)
ifneq ($(wildcard src/PARTS),)
gpudl.h: src/PARTS $(wildcard src/*.h)
	@sh tools/amalgamate.sh
endif
ifneq ($(wildcard cuda/PARTS),)
gpudl_cuda.cu: cuda/PARTS $(wildcard cuda/*.cu*)
	@sh tools/amalgamate.sh
endif

# build/dev/gpudl.h and build/dev/gpudl_cuda.cu with #line directives (see the top)
dev-header:
	sh tools/amalgamate.sh --lines $(B)/dev
	@mkdir -p $(B)/dev/tests

# the committed gpudl.h and gpudl_cuda.cu are what their parts make (make test's first check)
test-amalgamation:
	@sh tools/amalgamate.sh --check
