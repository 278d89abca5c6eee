# tests/cuda_emu/emu.mk — make fragment (included by the top-level Makefile):
# the GPU suite on the CUDA-on-CPU emulator.
#
#   make test-emu   build gpudl_cuda.cu with g++ against the emulator; run
#                   tests/test_cuda.c plainly, under ASan+UBSan, under two
#                   more schedules and under racecheck + initcheck, and the
#                   emulator's own test
#   make test-emu-race    the whole suite under racecheck + initcheck
#   make emu        the examples against the emulator: build/emu_mnist_mlp ...
#
# Only the CUDA headers are needed (no GPU, no libcudart, no libcublas).

EMU_DIR = tests/cuda_emu
EMU_CUDA_INC ?= $(firstword $(wildcard /usr/local/cuda/include $(dir $(NVCC))../include) /usr/local/cuda/include)
EMU_CXXFLAGS = -std=c++17 $(WARN) -Wno-pedantic -I$(EMU_CUDA_INC) -I$(EMU_DIR) -DGPUDL_EMU -DGPUDL_CUDA
# the backend's source, compiled as host C++ with the emulator header first
EMU_CU = -x c++ -include $(EMU_DIR)/cuda_emu.h -Wno-unknown-pragmas
EMU_HDR = $(EMU_DIR)/cuda_emu.h $(EMU_DIR)/emu_api.h
EMU_B = $(B)/emu
EMU_LIBS = -pthread -lm $(ZLIBS)
EMU_SAN = -O1 -g $(SAN)
# optimisation of the plain build; `make emu EMU_OPT="-O0 -g3"` for gdb
# (with -g3 gdb expands threadIdx, blockIdx... as the macros they are)
EMU_OPT ?= -O2 -g
EMU_EXAMPLES = $(patsubst examples/%.c,$(B)/emu_%,$(wildcard examples/*.c))

.PHONY: test-emu emu emu-build

$(EMU_B):
	mkdir -p $(EMU_B)

# plain: -O2 keeps the 200-step training tests quick
# the runtime at -O3: its GEMM loop vectorises (a third off an example's epoch)
$(EMU_B)/cuda_emu.o: $(EMU_DIR)/cuda_emu.cpp $(EMU_HDR) | $(EMU_B)
	$(CXX) $(EMU_CXXFLAGS) -O3 -g -c $< -o $@
$(EMU_B)/gpudl_cuda.o: gpudl_cuda.cu gpudl.h $(EMU_HDR) | $(EMU_B)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_OPT) $(EMU_CU) -c $< -o $@
# the stand-in NVML (tests/fake_nvml.c) lists the emulated GPUs by PCI bus id, in another order
EMU_NVML = -DFAKE_NVML='"$(CURDIR)/$(B)/libfake_nvml.so"'
# (test_cuda calls gpudl's static gdl__ functions: one translation unit with
# the implementation; its objects are targets of their own, so that make -j
# compiles them while the emulator and the backend compile)
$(EMU_B)/test_cuda.o: tests/test_cuda.c $(HDR) $(EMU_HDR) | $(EMU_B)
	$(CC) $(STD) $(WARN) -O2 -g -DGPUDL_CUDA -DGPUDL_EMU -I$(EMU_DIR) $(ZFLAGS) $(EMU_NVML) -c $< -o $@
$(B)/emu_test_cuda: $(EMU_B)/test_cuda.o $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o $(B)/libfake_nvml.so | $(B)
	$(CXX) $(EMU_B)/test_cuda.o $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o -o $@ $(EMU_LIBS)

# ASan + UBSan over the emulator, the backend and the suite
$(EMU_B)/asan_cuda_emu.o: $(EMU_DIR)/cuda_emu.cpp $(EMU_HDR) | $(EMU_B)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_SAN) -c $< -o $@
$(EMU_B)/asan_gpudl_cuda.o: gpudl_cuda.cu gpudl.h $(EMU_HDR) | $(EMU_B)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_SAN) $(EMU_CU) -c $< -o $@
$(EMU_B)/asan_test_cuda.o: tests/test_cuda.c $(HDR) $(EMU_HDR) | $(EMU_B)
	$(CC) $(STD) $(EMU_SAN) -DGPUDL_CUDA -DGPUDL_EMU -I$(EMU_DIR) $(ZFLAGS) $(EMU_NVML) -c $< -o $@
$(B)/emu_asan_test_cuda: $(EMU_B)/asan_test_cuda.o $(EMU_B)/asan_gpudl_cuda.o $(EMU_B)/asan_cuda_emu.o $(B)/libfake_nvml.so | $(B)
	$(CXX) $(SAN) $(EMU_B)/asan_test_cuda.o $(EMU_B)/asan_gpudl_cuda.o $(EMU_B)/asan_cuda_emu.o -o $@ $(EMU_LIBS)

# the emulator's own test: barriers, shuffles, atomics, streams, diagnostics
$(B)/emu_selftest: $(EMU_DIR)/test_emu.cpp tests/harness.h $(EMU_HDR) $(EMU_B)/cuda_emu.o | $(B)
	$(CXX) $(EMU_CXXFLAGS) -O1 -g $(EMU_CU) -Itests -c $< -o $(EMU_B)/test_emu.o
	$(CXX) $(EMU_B)/test_emu.o $(EMU_B)/cuda_emu.o -o $@ $(EMU_LIBS)

$(B)/emu_asan_selftest: $(EMU_DIR)/test_emu.cpp tests/harness.h $(EMU_HDR) $(EMU_B)/asan_cuda_emu.o | $(B)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_SAN) $(EMU_CU) -Itests -c $< -o $(EMU_B)/asan_test_emu.o
	$(CXX) $(SAN) $(EMU_B)/asan_test_emu.o $(EMU_B)/asan_cuda_emu.o -o $@ $(EMU_LIBS)

emu-build: $(B)/emu_test_cuda $(B)/emu_asan_test_cuda $(B)/emu_selftest $(B)/emu_asan_selftest $(B)/emu_race_test_cuda \
           $(B)/emu_race_selftest

# GPUDL_EMU_RACECHECK: the backend and the self-test compiled with GCC's
# -fsanitize=thread instrumentation, whose hooks the emulator defines (no
# TSan runtime is linked): every load and store of a kernel is checked
# against the shadow of shared memory
EMU_RACE = -O1 -g -fsanitize=thread -Wno-tsan
$(EMU_B)/race_gpudl_cuda.o: gpudl_cuda.cu gpudl.h $(EMU_HDR) | $(EMU_B)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_RACE) $(EMU_CU) -c $< -o $@
$(B)/emu_race_test_cuda: tests/test_cuda.c $(HDR) $(EMU_B)/race_gpudl_cuda.o $(EMU_B)/cuda_emu.o $(B)/libfake_nvml.so | $(B)
	$(CC) $(STD) $(WARN) -O2 -g -DGPUDL_CUDA -DGPUDL_EMU -I$(EMU_DIR) $(ZFLAGS) $(EMU_NVML) -c $< -o $(EMU_B)/race_test_cuda.o
	$(CXX) $(EMU_B)/race_test_cuda.o $(EMU_B)/race_gpudl_cuda.o $(EMU_B)/cuda_emu.o -o $@ $(EMU_LIBS)
$(B)/emu_race_selftest: $(EMU_DIR)/test_emu.cpp tests/harness.h $(EMU_HDR) $(EMU_B)/cuda_emu.o | $(B)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_RACE) $(EMU_CU) -Itests -c $< -o $(EMU_B)/race_test_emu.o
	$(CXX) $(EMU_B)/race_test_emu.o $(EMU_B)/cuda_emu.o -o $@ $(EMU_LIBS)

# The checks run (part of make test-emu, below): the suite but for
# master_weights (EMU_CHECKS_SKIP: 45 s of the checks run, and 42 s of the
# plain run, after the other suites; 4 s alone; its kernels run in the other
# suites; make test-emu-race runs it), the training, autocast and graph
# suites included (about 28 s of the run on a loaded 2-core machine): the
# suite under the
# racecheck build with GPUDL_EMU_RACECHECK=1 (shared- and global-memory
# hazards), GPUDL_EMU_INITCHECK=1 (reads of memory never written, blocks
# the caching allocator hands out again included) and
# GPUDL_EMU_GEMM=perturbed (GEMMs rounded per call configuration, as a GPU's
# heuristic picks one kernel per configuration: a bitwise comparison of two
# different GEMM calls fails here as on a GPU), with the backend's grids
# capped at 3 blocks (GPUDL_CUDA_MAX_GRID, gpudl_cuda.cu): every block then
# loops over several rows or tiles with more than one warp, where a missing
# barrier before a shared buffer is reused shows; a report makes the run exit
# 66. The self-test's planted missing barrier, uninitialised reads and
# colliding blocks run in the racecheck self-test. test-emu-race is that
# run alone; test-emu-gemm the plain build under the perturbed GEMMs.
EMU_CHECKS_ENV = GPUDL_EMU_DEVICES=2 GPUDL_EMU_RACECHECK=1 GPUDL_EMU_INITCHECK=1 GPUDL_EMU_GEMM=perturbed \
                 GPUDL_CUDA_MAX_GRID=3
# the launches' largest grids, blocks and shared memory, for
# test-launch-limits-nvcc: logged by the plain run (uncapped grids)
EMU_LAUNCH_LOG = GPUDL_EMU_LAUNCH_LOG=$(CURDIR)/$(EMU_B)/launch_log
EMU_CHECKS_SKIP = -x master_weights
.PHONY: test-emu-race test-emu-gemm
test-emu-race: $(B)/emu_race_test_cuda $(B)/emu_race_selftest
	@$(call emu_wrap,$(EMU_B)/run_checks,$(EMU_CHECKS_ENV),$(B)/emu_race_test_cuda)
	@$(call emu_wrap,$(EMU_B)/run_race_selftest,,$(B)/emu_race_selftest)
	sh tests/run.sh $(EMU_B)/run_checks $(EMU_B)/run_race_selftest
test-emu-gemm: $(B)/emu_test_cuda
	GPUDL_EMU_DEVICES=2 GPUDL_EMU_GEMM=perturbed $(B)/emu_test_cuda

# The suite five ways, each with two emulated devices: plain, ASan+UBSan,
# and the plain build under the warp-at-a-time schedule (it exposes a
# missing barrier between warps, e.g. before a shared buffer is reused) and
# the reversed-thread schedule, and the checks run (racecheck + initcheck +
# perturbed GEMMs, above); the self-test
# plainly, under ASan+UBSan (fibers, aborted blocks and the fault handler's
# jump must be clean) and under the warp-at-a-time schedule on one worker, and the racecheck
# build's self-test (its planted hazards and uninitialised reads). run.sh runs
# programs without arguments, so each configuration is a small wrapper
# script; it sums the closing lines and fails if any run fails.
# (The longest runs come first: run.sh runs two at a time, in this order.)
EMU_RUNS = $(EMU_B)/run_asan $(EMU_B)/run_checks $(EMU_B)/run_plain $(EMU_B)/run_warp $(EMU_B)/run_revthreads \
           $(EMU_B)/run_selftest $(EMU_B)/run_asan_selftest $(EMU_B)/run_selftest_warp $(EMU_B)/run_race_selftest
emu_wrap = printf '\#!/bin/sh\n%s exec "%s" %s "$$@"\n' '$(2)' '$(CURDIR)/$(3)' '$(4)' > $(1) && chmod +x $(1)

# The warp and revthreads schedules reorder the threads and warps inside
# kernels; these suites train whole models (or record graphs) through
# kernels the other suites already run under the schedules, so the
# schedule runs skip them (the plain and ASan runs take every suite).
EMU_SCHED_SKIP = -x master_weights -x training -x autocast -x graphs -x fit_graphs

test-emu: emu-build
	@$(call emu_wrap,$(EMU_B)/run_plain,GPUDL_EMU_DEVICES=2 $(EMU_LAUNCH_LOG),$(B)/emu_test_cuda)
	@$(call emu_wrap,$(EMU_B)/run_asan,GPUDL_EMU_DEVICES=2 ASAN_OPTIONS=detect_leaks=1,$(B)/emu_asan_test_cuda)
	@$(call emu_wrap,$(EMU_B)/run_warp,GPUDL_EMU_DEVICES=2 GPUDL_EMU_SCHED=warp,$(B)/emu_test_cuda,$(EMU_SCHED_SKIP))
	@$(call emu_wrap,$(EMU_B)/run_revthreads,GPUDL_EMU_DEVICES=2 GPUDL_EMU_SCHED=revthreads,$(B)/emu_test_cuda,$(EMU_SCHED_SKIP))
	@$(call emu_wrap,$(EMU_B)/run_selftest,,$(B)/emu_selftest)
	@$(call emu_wrap,$(EMU_B)/run_asan_selftest,ASAN_OPTIONS=detect_leaks=1,$(B)/emu_asan_selftest)
	@$(call emu_wrap,$(EMU_B)/run_selftest_warp,GPUDL_EMU_SCHED=warp GPUDL_EMU_WORKERS=1,$(B)/emu_selftest)
	@$(call emu_wrap,$(EMU_B)/run_checks,$(EMU_CHECKS_ENV),$(B)/emu_race_test_cuda,$(EMU_CHECKS_SKIP))
	@$(call emu_wrap,$(EMU_B)/run_race_selftest,,$(B)/emu_race_selftest)
	RUN_JOBS=2 sh tests/run.sh $(EMU_RUNS)

# the examples on the emulator (they pick the GPU when one is available):
# gpudl.h's host side compiled once (gpudl_host.o, from tests/gpudl_impl.c),
# each example with $(API_ONLY) and linked with it. (test_cuda calls gpudl's
# static gdl__ functions: one translation unit, as above.) gpu_monitor's
# source defines _POSIX_C_SOURCE: its own host object, gpudl_host_posix.o.
EMU_HOST = $(STD) $(WARN) $(CFLAGS) -DGPUDL_CUDA -DGPUDL_EMU $(ZFLAGS)
$(EMU_B)/gpudl_host.o: tests/gpudl_impl.c gpudl.h | $(EMU_B)
	$(CC) $(EMU_HOST) -c $< -o $@
$(EMU_B)/gpudl_host_posix.o: tests/gpudl_impl.c gpudl.h | $(EMU_B)
	$(CC) $(EMU_HOST) $(POSIX) -c $< -o $@
EMU_HOST_gpu_monitor = _posix
$(B)/emu_%: examples/%.c examples/example_args.h gpudl.h tests/api_only.h $(EMU_B)/gpudl_host$$(EMU_HOST_$$*).o $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o | $(B)
	$(CC) $(EMU_HOST) $(if $(EMU_HOST_$*),$(POSIX)) $(API_ONLY) -c $< -o $(EMU_B)/$*.o
	$(CXX) $(EMU_B)/$*.o $(EMU_B)/gpudl_host$(EMU_HOST_$*).o $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o -o $@ $(EMU_LIBS)
.SECONDARY: $(EMU_B)/gpudl_host.o $(EMU_B)/gpudl_host_posix.o

emu: $(EMU_EXAMPLES)

# bench/train.c on the emulator: its launches/step column counts kernel launches
# (timings mean nothing there); `GPUDL_NO_FUSION=1` for the unfused module layer
$(B)/emu_bench_train: bench/train.c bench/bench_cpu.h gpudl.h $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) -DGPUDL_CUDA -DGPUDL_EMU -c $< -o $(EMU_B)/bench_train.o
	$(CXX) $(EMU_B)/bench_train.o $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o -o $@ $(EMU_LIBS)

# bench/quant.c's MLP mode on the emulator (tools/gpu_session.sh's dry run: the GPU command works)
$(B)/emu_bench_quant: bench/quant.c $(HDR) $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o | $(B)
	$(CC) $(STD) $(WARN) $(CFLAGS) -DGPUDL_CUDA -DGPUDL_EMU -c $< -o $(EMU_B)/bench_quant.o
	$(CXX) $(EMU_B)/bench_quant.o $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o -o $@ $(EMU_LIBS)

# bench/amp.c on the emulator (memory figures of autocast on a GPU: the
# device arena and the allocator's peak; its times are the host's)
$(B)/emu_bench_amp: bench/amp.c bench/bench_cpu.h $(HDR) $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o | $(B)
	$(CC) $(STD) $(WARN) -O2 -g -DGPUDL_CUDA -DGPUDL_EMU -I$(EMU_DIR) $(ZFLAGS) -c bench/amp.c -o $(EMU_B)/bench_amp.o
	$(CXX) $(EMU_B)/bench_amp.o $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o -o $@ $(EMU_LIBS)
