# Makefile — builds gpudl's tests, examples and benchmarks.
#
#   make run         train the Fashion-MNIST MLP with its recipe (examples/recipe.h)
#                    (examples/mnist_mlp --recipe: 12 epochs, ~89 %); on a fresh
#                    machine it first installs a compiler and zlib's headers if
#                    missing, and gets Fashion-MNIST (`make data`)
#   make test        everything CI checks; first installs what the suite needs
#                    (tools/deps.sh test): the test suite (plain and under
#                    ASan/UBSan), warning-free builds (gcc, clang; C99, C11,
#                    C++17), the harness self-test, the data download test, the
#                    CUDA builds with nvcc, the GPU suite on the CUDA emulator, and
#                    the CPU suite on every CPU code path; at the end a table of
#                    the time each part took (see test-all below)
#   make deps        install what `make test` needs (tools/deps.sh, the one list)
#   make test-fresh  CI's .ci/run and `make run` in a fresh minimal Debian root
#                    (tools/fresh_check.sh; root only; not part of make test)
#   make plot        draw make run's metrics CSV (mnist_mlp_metrics.csv) as a PNG
#   make data        get Fashion-MNIST: Debian's package, else a checked download
#                    into ./data (tools/fetch_data.sh)
#   make data-text   get the text data, Debian's fortunes (en, de, es, it, pl, ru):
#                    the packages, else unpacked into ./data/fortunes
#   make data-dict   get Debian's FreeDict English-German dictionary (examples/seq2seq.c)
#   make             build the tests, examples and benchmarks (CPU)
#   make test-cuda   the GPU suite (needs a GPU)
#   make bench       CPU benchmarks
#   make cuda        CUDA builds of the examples
#   make clean
#   make amalgamate  join src/ and cuda/ (order: src/PARTS, cuda/PARTS) into gpudl.h and
#                    gpudl_cuda.cu: edit the parts, not those two (make test checks they match)
#   make dev-header  the same into build/dev/ with #line, so errors and gdb name src/ files
#   make check       the fast loop, a few minutes: the op table on the CPU (values, gradient
#                    checks, bf16/f16) and on the CUDA emulator, built against the dev header
#                    (tests/check.mk); make test is the whole suite
#   make compile_commands.json  for an editor's clangd: each part of src/ and cuda/ compiled
#                    with the parts before it (tools/compile_commands.sh)
#   make speedrun    Fashion-MNIST to 93.5 % in the least wall time, 5 seeds (SPEEDRUN_SEEDS=N), each
#                    timed end to end (examples/speedrun.c)
#   make mcu-demo    train, quantize and export the MLP as one C file, run it on a Cortex-M
#                    under qemu (examples/mcu/, docs/mcu.md)
#   make suite-lists the test programs of SUITE (below) and the builds made of them
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

# zlib when the toolchain has it
ZLIB := $(shell test -f /usr/include/zlib.h && echo yes)
ifeq ($(ZLIB),yes)
ZFLAGS = -DGPUDL_ZLIB
ZLIBS = -lz
endif
LIBS = -pthread -lm $(ZLIBS)

# The CPU suite's programs, each once, with what it is built as and where it
# runs: NAME:ATTRIBUTE:... (tests/NAME.c). Every list of test programs below
# and in tests/cpu_paths.mk and tests/windows.mk is made from this one.
#   linked    compiled with $(API_ONLY), linked with its configuration's library object
#   whole     one translation unit with the implementation (gpudl's internal
#             gdl__ functions, or its own allocator); with neither, the
#             fragment that builds it has a rule of its own
#   posix double nvml none   its flag set (below); std when none is named
#   plain     $(B)/NAME (make test-unit)
#   asan      $(B)/asan_NAME, under ASan + UBSan (make test-unit, test-asan)
#   tsan      $(B)/tsan_NAME, under ThreadSanitizer (make test-unit, test-asan)
#   cpup      on every CPU code path (tests/cpu_paths.mk: make test-cpu-paths, test-aarch64)
#   win       MinGW-w64 under Wine (tests/windows.mk: make test-windows)
#   warn      its source warning-free under clang (make test-warnings)
#   check     in the fast loop (make check)
SUITE = test_core:linked:plain:asan:cpup:win:warn:check \
        test_gradcheck:linked:double:plain:asan:cpup:win:warn:check \
        test_alloc:whole:plain:asan:warn \
        test_formats:whole:plain:asan:win:warn \
        test_data:whole:plain:asan:tsan:win:warn \
        test_nn:linked:plain:asan:cpup:win:warn \
        test_train:linked:plain:asan:cpup:win:warn \
        test_crash:linked:posix:plain:asan:warn \
        test_resume:linked:posix:plain:asan:win:warn \
        test_monitor:linked:nvml:plain:asan:tsan \
        test_env:whole:posix:plain:asan:warn \
        test_pool:whole:none:plain:asan:tsan:win:warn \
        test_threads:whole:plain:asan:tsan:warn \
        test_dtype:linked:plain:asan:warn:check \
        test_seq:linked:plain:asan:warn:check \
        test_ownership:linked:plain:asan:warn \
        test_conv:whole:plain:asan:cpup:warn \
        test_flops:whole:plain:asan:tsan:cpup:win:warn \
        test_gemm_kernels:cpup \
        test_fp32_precision:whole:plain:asan:cpup:warn \
        test_gelu:whole:cpup \
        test_rnn_gates:whole:plain:cpup \
        test_gemm_int8:cpup \
        test_transformer:linked:plain:asan:warn \
        test_torch_parity:linked:double:plain:asan:warn \
        train_trace:linked:cpup \
        test_platform:whole:win
# the attributes of program $(1) (its name first)
attrs_of = $(subst :, ,$(filter $(1):%,$(SUITE)))
# the programs that have every attribute in $(1), in the list's order
suite_with = $(strip $(foreach r,$(SUITE),$(if $(filter-out $(subst :, ,$(r)),$(1)),,$(firstword $(subst :, ,$(r))))))
TESTS = $(addprefix $(B)/,$(call suite_with,plain))
# the sanitizer builds (test-unit, test-asan): ASan + UBSan, and ThreadSanitizer's beside it
ASAN_TESTS = $(strip $(foreach p,$(call suite_with,asan),$(B)/asan_$(p) $(if $(filter tsan,$(call attrs_of,$(p))),$(B)/tsan_$(p))))
SAN = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

HDR = gpudl.h tests/harness.h tests/op_cases.h tests/rnn_cases.h tests/monitor_cases.h tests/dtype_parity.h tests/autocast_cases.h \
      tests/gradscaler_cases.h tests/master_cases.h tests/fusion_cases.h tests/attention_cases.h \
      tests/torch_parity.h tests/transformer_parity_cases.h

# the examples compiled with nvcc (CUDA builds) are part of `make test`
.PHONY: all test test-gpu-session-dry test-all test-unit test-asan test-warnings test-harness test-fetch test-examples test-install test-fuzz test-cuda-build test-cuda-build-nvcc test-cuda test-fresh run deps data data-text plot mutate-cuda install uninstall bench cuda clean

EXAMPLES = $(B)/mnist_mlp $(B)/cnn $(B)/keras_style $(B)/linear_regression $(B)/cpu_vs_gpu $(B)/device_query $(B)/gpu_monitor $(B)/ddp $(B)/model_parallel $(B)/resnet \
           $(B)/char_gpt $(B)/text_classify $(B)/onnx_export $(B)/seq2seq
CUDA_EXAMPLES = $(B)/cuda_mnist_mlp $(B)/cuda_cnn $(B)/cuda_keras_style $(B)/cuda_linear_regression $(B)/cuda_device_query \
                $(B)/cuda_gpu_monitor $(B)/cuda_model_parallel $(B)/cuda_cpu_vs_gpu $(B)/cuda_ddp $(B)/cuda_resnet $(B)/cuda_char_gpt \
                $(B)/cuda_text_classify

all: $(TESTS) $(EXAMPLES)

# ---- gpudl.h's implementation, compiled once per configuration ----
# tests/gpudl_impl.c is the implementation alone. Each configuration (a variant
# and a flag set) compiles it once, into $(B)/lib/VARIANT_SET.o; each test and
# example of that configuration is compiled with $(API_ONLY) and linked with
# that object. tests/api_only.h defines GPUDL_IMPLEMENTATION_DONE (the
# program's own #define GPUDL_IMPLEMENTATION then gets gpudl.h's declarations
# only, with no edit to its source) and includes the system headers that the
# implementation would have brought (NAN, fabs, memcpy...: the programs rely
# on them). Before, each program compiled the whole library itself.
#   variants   plain  $(WARN) $(CFLAGS)
#              asan   -O1 -g, ASan + UBSan
#              tsan   -O1 -g, ThreadSanitizer
#   flag sets  std    $(ZFLAGS) (zlib where there is one): most programs
#              posix  -D_POSIX_C_SOURCE=200809L: test_crash, test_resume, test_dist
#              double -DGPUDL_DOUBLE: test_gradcheck
#              nvml   -DGPUDL_NVML -D_POSIX_C_SOURCE=200809L: test_monitor, gpu_monitor
#              none   nothing: test_pool
# Each set is exactly what the program's own build had before: its -D options,
# and the _POSIX_C_SOURCE its source defines before including gpudl.h, which
# the implementation must see too (with it, gdl_now and the profiler use
# clock_gettime and the rendezvous resolves host names; a bare -std=c99 hides
# them). tests/dist.mk adds MPI's (mpicc) and tests/cpu_paths.mk each CPU code
# path's.
API_ONLY = -include tests/api_only.h
VARIANT_plain = $(STD) $(WARN) $(CFLAGS)
VARIANT_asan = $(STD) -O1 -g $(SAN)
VARIANT_tsan = $(STD) -O1 -g -fsanitize=thread
POSIX = -D_POSIX_C_SOURCE=200809L
SET_std = $(ZFLAGS)
SET_posix = $(POSIX)
SET_double = -DGPUDL_DOUBLE
SET_nvml = -DGPUDL_NVML $(POSIX)
SET_none =
# the flag set of a program (its name without the variant's prefix): the one
# SUITE names, else the one named here (programs outside SUITE), else std
FLAG_SETS = std posix double nvml none
SET_OF_test_dist = posix
SET_OF_gpu_monitor = nvml
set_of = $(or $(firstword $(filter $(FLAG_SETS),$(call attrs_of,$(1)))),$(SET_OF_$(1)),std)
LIB_OBJS = $(foreach v,plain asan tsan,$(foreach s,std posix double nvml,$(B)/lib/$(v)_$(s).o))
.SECONDARY: $(LIB_OBJS)

$(B)/lib:
	mkdir -p $@
$(B)/lib/plain_%.o: tests/gpudl_impl.c gpudl.h | $(B)/lib
	$(CC) $(VARIANT_plain) $(SET_$*) -c $< -o $@
$(B)/lib/asan_%.o: tests/gpudl_impl.c gpudl.h | $(B)/lib
	$(CC) $(VARIANT_asan) $(SET_$*) -c $< -o $@
$(B)/lib/tsan_%.o: tests/gpudl_impl.c gpudl.h | $(B)/lib
	$(CC) $(VARIANT_tsan) $(SET_$*) -c $< -o $@

# The programs' rules name their library object through $$(...) (second expansion).
.SECONDEXPANSION:

# The examples, linked with the library (gpu_monitor reads NVML in a CPU build too).
$(EXAMPLES): $(B)/%: examples/%.c examples/example_args.h gpudl.h tests/api_only.h $(B)/lib/plain_$$(call set_of,$$*).o | $(B)
	$(CC) $(VARIANT_plain) $(SET_$(call set_of,$*)) $(API_ONLY) $< $(B)/lib/plain_$(call set_of,$*).o -o $@ $(LIBS)
# the recipes' nets and training set-up, shared with bench/recipes.c
$(B)/resnet $(B)/cuda_resnet $(B)/emu_resnet $(B)/mnist_mlp $(B)/cuda_mnist_mlp $(B)/emu_mnist_mlp: examples/recipe.h examples/nets.h
# the nets shared by the examples and the benchmarks (examples/nets.h)
$(B)/cnn $(B)/cuda_cnn $(B)/emu_cnn $(B)/fmnist92 $(B)/cuda_fmnist92 $(B)/recipes $(B)/cuda_recipes: examples/nets.h
$(B)/bench_train $(B)/cuda_bench_train.o $(B)/bench_amp: examples/nets.h examples/recipe.h examples/example_args.h
# a stand-in NVML library for the monitor's tests
$(B)/libfake_nvml.so: tests/fake_nvml.c | $(B)
	$(CC) $(STD) -O1 -shared -fPIC $< -o $@

# The CUDA builds of the examples. nvcc compiles a .c file as C with the host
# compiler: gpudl.h's host side once (tests/gpudl_impl.c: $(B)/lib/cuda_std.o;
# cuda_posix.o for gpu_monitor, whose source defines _POSIX_C_SOURCE), while
# gpudl_cuda.cu compiles; each example with $(API_ONLY), linked
# with it and gpudl_cuda.o. README's way, the implementation in the program's
# own file, is still built: cuda_link_check below, tests/test_install.sh's consumer.
CUDA_HOST = -O3 -DGPUDL_CUDA $(ZFLAGS)
# NCCL_LIBS= CUDA_DEFS=-DGPUDL_NO_NCCL builds without NCCL (tools/gpu_session.sh
# does so on a machine without libnccl)
NCCL_LIBS ?= -lnccl
CUDA_DEFS ?=
CUDA_LINK = -lcublas -lcublasLt $(NCCL_LIBS)
$(B)/lib/cuda_std.o: tests/gpudl_impl.c gpudl.h | $(B)/lib
	$(NVCC) $(CUDA_HOST) -c $< -o $@
$(B)/lib/cuda_posix.o: tests/gpudl_impl.c gpudl.h | $(B)/lib
	$(NVCC) $(CUDA_HOST) $(POSIX) -c $< -o $@
.SECONDARY: $(B)/lib/cuda_std.o $(B)/lib/cuda_posix.o
cuda_set = $(if $(filter gpu_monitor,$(1)),posix,std)
$(B)/cuda_%: examples/%.c examples/example_args.h gpudl.h tests/api_only.h $(B)/lib/cuda_$$(call cuda_set,$$*).o $(B)/gpudl_cuda.o | $(B)
	$(NVCC) $(CUDA_HOST) $(if $(filter posix,$(call cuda_set,$*)),$(POSIX)) $(CUDA_ARCH) $(API_ONLY) $< $(B)/lib/cuda_$(call cuda_set,$*).o $(B)/gpudl_cuda.o $(CUDA_LINK) $(ZLIBS) -o $@

# ptxas's resource report of each kernel (registers, spills, shared memory,
# stack) is kept in gpudl_cuda.resources, beside the object: the launch-limit
# check reads it (tests/launch.mk). The object's compile writes both; a build
# from before the report (no report, or one older than the object) is compiled again.
CUDA_OBJ = sh tests/launch_limits.sh --compile $(B)/gpudl_cuda.resources $(NVCC) -std=c++17 -O3 $(CUDA_ARCH) \
           -Xcompiler -Wall,-Wextra -DGPUDL_CUDA $(CUDA_DEFS) -c gpudl_cuda.cu -o $(B)/gpudl_cuda.o
$(B)/gpudl_cuda.o: gpudl_cuda.cu gpudl.h | $(B)
	$(CUDA_OBJ)
$(B)/gpudl_cuda.resources: $(B)/gpudl_cuda.o
	@test -s $@ && ! test $< -nt $@ || { echo '$(CUDA_OBJ)'; $(CUDA_OBJ); }

# (compiled apart from the link, so that the host compile does not wait for gpudl_cuda.o)
$(B)/cuda_bench_train.o: bench/train.c bench/bench_cpu.h gpudl.h | $(B)
	$(NVCC) -O3 -DGPUDL_CUDA -c $< -o $@
$(B)/cuda_bench_train: $(B)/cuda_bench_train.o $(B)/gpudl_cuda.o
	$(NVCC) $(CUDA_ARCH) $^ $(CUDA_LINK) -o $@
$(B)/cuda_bench_quant.o: bench/quant.c gpudl.h | $(B)
	$(NVCC) -O3 -DGPUDL_CUDA -c $< -o $@
$(B)/cuda_bench_quant: $(B)/cuda_bench_quant.o $(B)/gpudl_cuda.o
	$(NVCC) $(CUDA_ARCH) $^ $(CUDA_LINK) -o $@

cuda: $(CUDA_EXAMPLES) $(B)/cuda_bench_train $(B)/cuda_fmnist92 $(B)/cuda_recipes

# Set-up first, then a make of its own: the compiler probe above (zlib) must
# see what the set-up installed.
run:
	@sh tools/deps.sh run
	@sh tools/fetch_data.sh
	@$(MAKE) --no-print-directory $(B)/mnist_mlp
	$(B)/mnist_mlp --recipe

deps:
	@sh tools/deps.sh test

# .ci/run and make run on a fresh minimal Debian (FRESH_ARGS=--new remakes its root)
test-fresh:
	@sh tools/fresh_check.sh $(FRESH_ARGS)

# the GPU suite's mutation check: planted kernel bugs (sh tests/mutate_cuda.sh -l lists them), one at a time, on the emulator (minutes)
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

data-text:
	@sh tools/fetch_data.sh text

# Debian's FreeDict English-German dictionary, examples/seq2seq.c's data
.PHONY: data-dict
data-dict:
	@sh tools/fetch_data.sh dict

$(B):
	mkdir -p $(B)

# ---- the CPU suite: plain, ASan + UBSan (asan_), ThreadSanitizer (tsan_) ----
# Most tests use only gpudl's API and link with their configuration's library
# object. These stay one translation unit each, the implementation compiled
# into them: test_data, test_pool and test_conv call gpudl's internal static gdl__
# functions, and test_alloc, test_formats and test_data replace its allocator
# (GPUDL_MALLOC...), which the library object cannot see. (So do
# test_gemm_kernels in tests/cpu_paths.mk and test_cuda in tests/cuda_emu/emu.mk;
# test_dist_nccl in tests/dist.mk stays whole too, see there.)
#   test_crash     checkpoints against SIGKILL mid-save and a full disk (POSIX)
#   test_resume    gdl_fit killed mid-epoch and resumed: the weights of an uninterrupted run (POSIX)
#   test_monitor   GPU monitoring through NVML's real code path, on the stand-in library;
#                  tsan_: NVML's first load from several threads
#   tsan_test_data the loader's worker threads; tsan_test_pool the CPU thread pool
#                  (asan_test_pool: its workers joined at exit)
#   test_conv      the CPU convolution's implicit GEMM against im2col, bit for bit (sets gdl__conv_path)
LINKED_TESTS = $(call suite_with,linked plain)
WHOLE_TESTS = $(call suite_with,whole plain)

# (the options of one test beyond its variant and flag set)
OPTS_test_monitor = -DFAKE_NVML='"$(abspath $(B))/libfake_nvml.so"'
$(B)/test_monitor $(B)/asan_test_monitor $(B)/tsan_test_monitor: $(B)/libfake_nvml.so

# $(1): the variant; the rules take the program's name ($*) from the target
linked_test = $(CC) $(VARIANT_$(1)) $(SET_$(call set_of,$*)) $(OPTS_$*) $(API_ONLY) $< $(B)/lib/$(1)_$(call set_of,$*).o -o $@ $(LIBS)
whole_test = $(CC) $(VARIANT_$(1)) $(SET_$(call set_of,$*)) $(OPTS_$*) $< -o $@ $(LIBS)

$(LINKED_TESTS:%=$(B)/%): $(B)/%: tests/%.c $(HDR) tests/api_only.h $(B)/lib/plain_$$(call set_of,$$*).o | $(B)
	$(call linked_test,plain)
$(LINKED_TESTS:%=$(B)/asan_%): $(B)/asan_%: tests/%.c $(HDR) tests/api_only.h $(B)/lib/asan_$$(call set_of,$$*).o | $(B)
	$(call linked_test,asan)
$(LINKED_TESTS:%=$(B)/tsan_%): $(B)/tsan_%: tests/%.c $(HDR) tests/api_only.h $(B)/lib/tsan_$$(call set_of,$$*).o | $(B)
	$(call linked_test,tsan)
$(WHOLE_TESTS:%=$(B)/%): $(B)/%: tests/%.c $(HDR) | $(B)
	$(call whole_test,plain)
$(WHOLE_TESTS:%=$(B)/asan_%): $(B)/asan_%: tests/%.c $(HDR) | $(B)
	$(call whole_test,asan)
$(WHOLE_TESTS:%=$(B)/tsan_%): $(B)/tsan_%: tests/%.c $(HDR) | $(B)
	$(call whole_test,tsan)

# Parts of `make test` that live in their own fragments:
#   tests/cuda_emu/emu.mk   test-emu (the GPU suite on the CUDA-on-CPU emulator), emu
#   tests/check.mk          check (the fast loop: the op table on the CPU and the emulator)
#   tests/cpu_paths.mk      test-cpu-paths (AVX-512 / AVX2 / portable C), test-aarch64 (qemu)
#   tests/launch.mk         test-launch-limits (the real build's kernels against the suite's launches)
#   tests/fuzz/fuzz.mk      fuzz (libFuzzer harnesses for every parser), fuzz-seeds
#   tests/dist.mk           test-dist (launch environments, sharding; 2 MPI ranks)
#   tests/slurm.mk          test-cluster (Kubernetes' environments; a real one-node Slurm cluster)
#   tests/quant.mk          test-quant (INT8 quantization; the int8 GEMM's VNNI and sdot paths)
#   tests/mcu.mk            test-mcu (gdl_export_c, the Cortex-M firmware under qemu), mcu-demo
#   tests/onnx.mk           test-onnx (gdl_export_onnx against onnx.checker and ONNX Runtime, gdl_load_onnx)
#   tests/windows.mk        test-windows (MinGW-w64 builds under Wine), test-portability (MSVC, strict POSIX)
-include tests/cuda_emu/emu.mk
-include tests/check.mk
-include tests/dist.mk
-include tests/slurm.mk
-include tests/cpu_paths.mk
-include tests/launch.mk
-include tests/fuzz/fuzz.mk
-include tests/quant.mk
-include tests/mcu.mk
-include tests/onnx.mk
-include tests/windows.mk

test: test-amalgamation
	@sh tools/deps.sh test
	@$(MAKE) --no-print-directory test-all

# test-all: the parts one after the other, each a make of its own, timed by
# tools/timed.sh; then a table of their times (also in $(B)/test-times). A
# failed part stops it (make -k: the other parts still run), the table marks
# it, and make exits non-zero. Each part builds what it needs with
# $(TEST_JOBS): two jobs (the CI machine has 2 cores; under make -jN, N), the
# output of each compile printed whole (--output-sync), so a part's test output
# shows when its run ends (TEST_JOBS= for one job and output as it comes).
# The tests themselves still run one at a time, once their part's builds are
# done: some measure time, and the plain and ASan builds of a test share file
# names. (Only the fuzzers run two at a time: each for a fixed time, on its own
# files.)
TEST_PARTS = test-warnings test-harness test-fetch test-examples test-install test-fuzz test-cuda-build \
             test-unit test-dist test-emu test-dist-nccl test-cluster test-gpu-session-dry \
             test-cpu-paths test-aarch64 test-launch-limits test-quant test-mcu test-onnx test-tutorial test-portability test-windows
TEST_JOBS ?= $(if $(filter -j%,$(MAKEFLAGS)),,-j2) --output-sync=target
# make -k (k among make's one-letter flags)
keep_going = $(findstring k,$(filter-out -%,$(firstword $(MAKEFLAGS))))

test-all: | $(B)
	@rm -f $(B)/test-times; status=0; \
	for p in $(TEST_PARTS); do \
	  sh tools/timed.sh run $(B)/test-times $$p $(MAKE) --no-print-directory $(TEST_JOBS) $$p || \
	    { status=1; test -n "$(keep_going)" || break; }; \
	done; \
	sh tools/timed.sh table $(B)/test-times $(TEST_PARTS); exit $$status

# tools/gpu_session.sh, the plan for a real GPU, run on the emulator so that
# the script itself is tested (its builds made here, outside its time limits)
GPU_SESSION_DRY_BUILDS = $(B)/emu_test_cuda $(B)/emu_device_query $(B)/emu_gpu_monitor $(B)/emu_mnist_mlp \
                         $(B)/emu_bench_train $(B)/emu_test_dist_nccl $(B)/libfake_nvml.so $(B)/emu_char_gpt \
                         $(B)/emu_bench_quant
test-gpu-session-dry: $(GPU_SESSION_DRY_BUILDS)
	GPU_SESSION_DRY=1 OUT=$(B)/gpu_session_dry_out sh tools/gpu_session.sh

test-unit: $(TESTS) $(ASAN_TESTS)
	ASAN_OPTIONS=detect_leaks=1 RUN_JOBS=2 sh tests/run.sh $(TESTS) $(ASAN_TESTS)

test-asan: $(ASAN_TESTS)
	sh tests/run.sh $(ASAN_TESTS)

# what SUITE makes: each list of programs, one a line
.PHONY: suite-lists
suite-lists:
	@printf '%s\n' "plain: $(TESTS)" "asan, tsan: $(ASAN_TESTS)" "linked: $(LINKED_TESTS)" "whole: $(WHOLE_TESTS)" \
	  "cpu paths: $(CPUP_PROGS)" "windows: $(WIN_LINKED) $(WIN_WHOLE)" "warnings: $(WARN_SRCS)" "check: $(CHECK_PROGS)"

# The header (implementation included) must build warning-free everywhere:
# tests/build_check.c with each of these compilers and options (-Werror; with
# -fopenmp too, which gpudl does not use but a user may pass), then
# each test and example source under clang. Each check is a target of its own
# (two at a time under make test) and runs every time.
WARN_CHECKS = gcc-c99 gcc-c11 gcc-O1 clang-c99 clang-c11 gcc-openmp gcc-O2 gcc-O3-openmp clang-O3 gcc-static clang-static \
              gcc-cblas gcc-double gcc-zlib gcc-nvml clang-nvml gcc-nothreads g++ clang++ clang-avx2 clang++-avx512
WCC_gcc-c99 = gcc -std=c99
WCC_gcc-c11 = gcc -std=c11
WCC_clang-c99 = clang -std=c99
WCC_clang-c11 = clang -std=c11
WCC_gcc-openmp = gcc -std=c99 -fopenmp
WCC_gcc-O1 = gcc -std=c99 -O1
WCC_gcc-O2 = gcc -std=c99 -O2
WCC_gcc-O3-openmp = gcc -std=c99 -O3 -march=native -fopenmp
WCC_clang-O3 = clang -std=c99 -O3
WCC_gcc-static = gcc -std=c99 -DGPUDL_STATIC
WCC_clang-static = clang -std=c11 -DGPUDL_STATIC
WCC_gcc-cblas = gcc -std=c99 -DGPUDL_CBLAS
WCC_gcc-double = gcc -std=c99 -DGPUDL_DOUBLE
WCC_gcc-zlib = gcc -std=c99 -DGPUDL_ZLIB
WCC_gcc-nvml = gcc -std=c99 -O2 -DGPUDL_NVML
WCC_clang-nvml = clang -std=c11 -DGPUDL_NVML
WCC_gcc-nothreads = gcc -std=c99 -DGPUDL_NO_THREADS
WCC_g++ = g++ -std=c++17 -x c++
WCC_clang++ = clang++ -std=c++17 -x c++
# the vector kernels (GEMM, GELU, batch norm, dropout ...) under clang and as C++; not g++ with AVX-512: gcc
# 12's own AVX-512 headers warn there (-Wmaybe-uninitialized in their intrinsics' self-initialised locals)
WCC_clang-avx2 = clang -std=c99 -O2 -mavx2 -mfma
WCC_clang++-avx512 = clang++ -std=c++17 -x c++ -O2 -mavx2 -mfma -mavx512f -mavx512dq
# The sources under clang -std=c99. Those that use gpudl's API only are
# checked with $(API_ONLY), their own code: the implementation
# in their context is checked already (clang-c99 above; with _POSIX_C_SOURCE,
# which test_crash and test_resume define, by test_pool). The others bring
# their own (allocator, internal functions, -DGPUDL_DOUBLE) and are checked whole.
# (a test's flags follow from SUITE: $(API_ONLY) if linked, but for the
# double build, which is checked whole; its set's _POSIX_C_SOURCE, after
# api_only.h as in the source; -DGPUDL_DOUBLE.) The examples and benchmarks
# are all checked with $(API_ONLY).
WARN_OTHER = examples/mnist_mlp.c bench/fmnist92.c examples/resnet.c bench/recipes.c examples/char_gpt.c examples/onnx_export.c examples/seq2seq.c
WARN_SRCS = $(patsubst %,tests/%.c,$(call suite_with,warn)) $(WARN_OTHER)
warn_flags = $(if $(filter linked,$(call attrs_of,$(1))),$(if $(filter double,$(call set_of,$(1))),,$$(API_ONLY))) \
             $(if $(filter posix,$(call set_of,$(1))),$$(POSIX)) $(if $(filter double,$(call set_of,$(1))),-DGPUDL_DOUBLE)
$(foreach t,$(call suite_with,warn),$(eval WFL_tests/$(t).c = $(strip $(call warn_flags,$(t)))))
$(foreach f,$(WARN_OTHER),$(eval WFL_$(f) = $$(API_ONLY)))
.PHONY: $(WARN_CHECKS:%=warn-%) $(WARN_SRCS:%=warn-%)

test-warnings: $(WARN_CHECKS:%=warn-%) $(WARN_SRCS:%=warn-%)
$(WARN_CHECKS:%=warn-%): warn-%: | $(B)/warn
	@echo "warnings: $(WCC_$*)"; $(WCC_$*) $(WARN) -Werror -c tests/build_check.c -o $(B)/warn/$*.o
$(WARN_SRCS:%=warn-%): warn-%: | $(B)/warn
	@echo "warnings: $(strip clang $(WFL_$*) $*)"; clang -std=c99 $(WARN) -Werror $(WFL_$*) -c $* -o $(B)/warn/$(notdir $*).o
$(B)/warn:
	mkdir -p $@

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

# the tutorial (docs/tutorial/, English and Chinese): every chapter's program built with the
# command the chapter shows and run; the outputs the chapters show compared; links checked
.PHONY: test-tutorial
test-tutorial:
	sh tests/run.sh tests/test_tutorial.sh

# the examples as a user runs them: flags, errors, a short training run
test-examples: $(EXAMPLES) $(B)/libfake_nvml.so
	GPUDL_BUILD=$(B) sh tests/run.sh tests/test_examples.sh
# char_gpt's CUDA path on the emulator, against its CPU losses (its objects are test-emu's too)
test-examples: $(B)/emu_char_gpt
# mnist_mlp --recipe's hand-written loop against gdl_fit's run of the same recipe
test-examples: $(B)/recipes

# CI has no GPU: the CUDA backend and the CUDA builds must still compile and link.
# Without nvcc (no CUDA toolkit) this part is skipped, loudly.
test-cuda-build: | $(B)
	@if test -x "$(NVCC)"; then $(MAKE) --no-print-directory test-cuda-build-nvcc; else \
	  echo "SKIPPED: nvcc not found (not in PATH, not /usr/local/cuda/bin/nvcc; set NVCC=...): the CUDA builds were not checked"; fi

test-cuda-build-nvcc: | $(B)
	$(MAKE) --no-print-directory $(B)/gpudl_cuda.o $(CUDA_EXAMPLES) $(B)/cuda_bench_train $(B)/cuda_fmnist92 \
	  $(B)/cuda_link_check $(B)/test_cuda_build
	$(B)/cuda_device_query
	GPUDL_BUILD=$(B) sh tests/run.sh tests/test_cuda_fallback.sh
	$(B)/cuda_link_check
	sh tests/run.sh $(B)/test_cuda_build

# cuda_link_check: README's way (the implementation in the program's own
# file); test_cuda calls gpudl's static gdl__ functions: one translation unit.
# Each compiled apart from its link, so that these host compiles run while
# gpudl_cuda.cu compiles.
$(B)/cuda_link_check.o: tests/cuda_link_check.c gpudl.h | $(B)
	$(NVCC) -O2 -DGPUDL_CUDA -c $< -o $@
$(B)/test_cuda_build.o: tests/test_cuda.c $(HDR) | $(B)
	$(NVCC) -O2 -DGPUDL_CUDA -c $< -o $@
$(B)/cuda_link_check $(B)/test_cuda_build: $(B)/%: $(B)/%.o $(B)/gpudl_cuda.o
	$(NVCC) $(CUDA_ARCH) $^ $(CUDA_LINK) -o $@

test-cuda: | $(B)
	$(NVCC) -std=c++17 -O2 -arch=sm_90 -DGPUDL_CUDA -c gpudl_cuda.cu -o $(B)/gpudl_cuda_sm90.o
	$(NVCC) -O2 -arch=sm_90 -DGPUDL_CUDA tests/test_cuda.c $(B)/gpudl_cuda_sm90.o $(CUDA_LINK) -o $(B)/test_cuda
	$(B)/test_cuda

$(B)/bench_train: bench/train.c bench/bench_cpu.h gpudl.h | $(B)
	$(CC) $(STD) -O3 -march=native bench/train.c -o $@ $(LIBS)

# the convolution kernels pass by pass (forward, input and weight gradients) against the FMA peak
$(B)/bench_conv: bench/conv.c bench/bench_cpu.h gpudl.h | $(B)
	$(CC) $(STD) -O3 -march=native bench/conv.c -o $@ $(LIBS)

# the memory-bound ops of a CNN step against the time their bytes take at gdl_add's bandwidth
$(B)/bench_passes: bench/passes.c bench/bench_cpu.h gpudl.h | $(B)
	$(CC) $(STD) -O3 -march=native bench/passes.c -o $@ $(LIBS)

# the LSTM / GRU of examples/text_classify.c, one training step (bench/compare_rnn.sh: beside PyTorch's)
$(B)/bench_rnn_train: bench/rnn_train.c bench/bench_cpu.h gpudl.h | $(B)
	$(CC) $(STD) -O3 -march=native bench/rnn_train.c -o $@ $(LIBS)

# Fashion-MNIST to 92 % end to end (bench/pytorch/fmnist92.py is PyTorch's side)
$(B)/fmnist92: bench/fmnist92.c examples/example_args.h gpudl.h | $(B)
	$(CC) $(STD) $(WARN) -O3 -march=native $(ZFLAGS) $< -o $@ $(LIBS)
$(B)/cuda_fmnist92: bench/fmnist92.c examples/example_args.h gpudl.h tests/api_only.h $(B)/lib/cuda_std.o $(B)/gpudl_cuda.o | $(B)
	$(NVCC) $(CUDA_HOST) $(CUDA_ARCH) $(API_ONLY) $< $(B)/lib/cuda_std.o $(B)/gpudl_cuda.o $(CUDA_LINK) $(ZLIBS) -o $@

# the speedrun: Fashion-MNIST to 93.5 % in the least wall time, SPEEDRUN_SEEDS runs (default 5), each timed end to
# end (bench/pytorch/speedrun.py is PyTorch's side, bench/compare_speedrun.sh runs both); one translation
# unit at -O3, as the benchmarks
.PHONY: speedrun
SPEEDRUN_SEEDS ?= 5
speedrun:
	@sh tools/fetch_data.sh
	@$(MAKE) --no-print-directory $(B)/speedrun
	$(B)/speedrun --seeds $(SPEEDRUN_SEEDS)
$(B)/speedrun: examples/speedrun.c examples/example_args.h gpudl.h | $(B)
	$(CC) $(STD) $(WARN) -O3 -march=native $(ZFLAGS) $< -o $@ $(LIBS)
test-examples: $(B)/speedrun

# the training recipes (mlp, cnn, resnet) end to end; bench/pytorch/recipes.py is PyTorch's side
$(B)/recipes: bench/recipes.c examples/recipe.h examples/example_args.h gpudl.h | $(B)
	$(CC) $(STD) $(WARN) -O3 -march=native $(ZFLAGS) $< -o $@ $(LIBS)
$(B)/cuda_recipes: bench/recipes.c examples/recipe.h examples/example_args.h gpudl.h tests/api_only.h $(B)/lib/cuda_std.o $(B)/gpudl_cuda.o | $(B)
	$(NVCC) $(CUDA_HOST) $(CUDA_ARCH) $(API_ONLY) $< $(B)/lib/cuda_std.o $(B)/gpudl_cuda.o $(CUDA_LINK) $(ZLIBS) -o $@

# mixed precision against f32: memory, step time, Fashion-MNIST accuracy (bench/RESULTS.md)
$(B)/bench_amp: bench/amp.c bench/bench_cpu.h gpudl.h | $(B)
	$(CC) $(STD) $(WARN) -O3 -march=native $(ZFLAGS) bench/amp.c -o $@ $(LIBS)

# bench/compare_cpu.sh: ours against PyTorch on the CPU; bench/busy_cpu.sh:
# with and without another busy process
bench: $(B)/bench_train
	$(B)/bench_train mlp cnn fc10 fc50
	$(CC) $(STD) -O3 -march=native bench/gemm.c -o $(B)/bench_gemm $(LIBS) \
	  $(shell (test -f /usr/include/cblas.h || test -f /usr/include/x86_64-linux-gnu/cblas.h) && echo -DGPUDL_BENCH_OPENBLAS -lopenblas)
	$(B)/bench_gemm

# tests/torch_fixtures (tests/test_torch_parity.c's PyTorch values, committed): the cases of the float64
# builds of bench/rnn_oracle.c, bench/seq_ops_oracle.c and bench/transformer_oracle.c, run through
# PyTorch by bench/pytorch/seq_fixtures.py; PyTorch from $(TORCH_VENV)
.PHONY: seq-fixtures
seq-fixtures: $(B)/rnn_oracle_f64 $(B)/seq_ops_oracle_f64 $(B)/transformer_oracle_f64
	$(B)/rnn_oracle_f64 $(B) && $(B)/seq_ops_oracle_f64 $(B) && $(B)/transformer_oracle_f64 $(B)
	$${TORCH_VENV:-build/torch-venv}/bin/python bench/pytorch/seq_fixtures.py $(B) tests/torch_fixtures
$(B)/rnn_oracle_f64 $(B)/seq_ops_oracle_f64 $(B)/transformer_oracle_f64: $(B)/%_f64: bench/%.c bench/oracle_st.h \
  tests/transformer_parity_cases.h gpudl.h | $(B)
	$(CC) $(VARIANT_plain) $(SET_double) $< -o $@ $(LIBS)

# the Transformer modules (decoder, nn.Transformer, MultiheadAttention's options, grouped-query attention) against
# PyTorch in float64, their files through load_state_dict(strict=True); PyTorch from $(TORCH_VENV)
.PHONY: transformer-oracle
transformer-oracle: $(B)/transformer_oracle
	$(B)/transformer_oracle $(B)
	$${TORCH_VENV:-build/torch-venv}/bin/python bench/pytorch/transformer_oracle.py $(B)
$(B)/transformer_oracle: bench/transformer_oracle.c bench/oracle_st.h tests/transformer_parity_cases.h gpudl.h | $(B)
	$(CC) $(VARIANT_plain) $(SET_std) $< -o $@ $(LIBS)

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
gpudl.h: src/PARTS $(wildcard src/*.h src/*/*.h)
	@sh tools/amalgamate.sh
endif
ifneq ($(wildcard cuda/PARTS),)
gpudl_cuda.cu: cuda/PARTS $(wildcard cuda/*.cu)
	@sh tools/amalgamate.sh
endif

# build/dev/gpudl.h and build/dev/gpudl_cuda.cu with #line directives (see the top)
dev-header:
	sh tools/amalgamate.sh --lines $(B)/dev
	@mkdir -p $(B)/dev/tests

# the committed gpudl.h and gpudl_cuda.cu are what their parts make, and each planted
# kernel bug of tests/mutate_cuda.sh still finds its text (make test's first check)
test-amalgamation:
	@sh tools/amalgamate.sh --check
	@sh tests/mutate_cuda.sh -c
