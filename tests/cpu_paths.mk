# tests/cpu_paths.mk — every CPU code path of gpudl.h built and run.
# Included by the top-level Makefile; uses its B, CC, STD, WARN, ZFLAGS,
# LIBS, NVCC and HDR, and tests/gpudl_impl.c.
#
#   make test-cpu-paths  the CPU suite built three ways on x86-64 and run on
#                        each path the CPU has: AVX-512 (skipped, with a SKIP
#                        line, on a CPU without it), AVX2+FMA, portable C
#   make test-aarch64    the CPU suite cross-compiled for AArch64 (NEON GEMM
#                        kernel) and run under qemu-aarch64; gpudl.h
#                        warning-free for AArch64 (gcc, clang); and the CUDA
#                        backend compiled for Jetson Orin (sm_87)
#
# The CPU suite on each path (SUITE's cpup programs): test_core, test_gradcheck,
# test_nn, test_train, test_gemm_int8 (the int8 GEMM kernel the path selects;
# its rules in tests/quant.mk), test_gemm_kernels (the selected GEMM kernel against the portable one and a
# double reference), test_conv (the implicit-GEMM convolution against im2col
# bit for bit: its column packing differs per kernel's NR), test_gelu (the f32
# exact GELU and its derivative against double erfc, its vector loops against
# its scalar code) and train_trace (a deterministic training run compared
# across paths: bit for bit among AVX-512, AVX2 and NEON, within 1e-5
# relative for portable C; see tests/cpu_paths.sh). The portable path is
# also the minimal build for small boards: -DGPUDL_NO_THREADS, no
# zlib, so its test_train (one epoch of Fashion-MNIST, unpacked into
# $(B)/fmnist-raw) shows that such a build trains the MLP.
#
# Needs (Debian): gcc-aarch64-linux-gnu, qemu-user (qemu-aarch64), and for
# the Fashion-MNIST test dataset-fashion-mnist or `make data`.

# no -g: it adds ~20 % to the compile time that dominates these targets
CPUP_OPT ?= -O2
CPUP_DIRS = $(B)/cpu-avx512 $(B)/cpu-avx2 $(B)/cpu-portable
# the programs: those with the cpup attribute in the Makefile's SUITE
CPUP_PROGS = $(call suite_with,cpup)
CPUP_HDR = gpudl.h tests/harness.h tests/op_cases.h

# Per path: the target flags, the options, the libraries. AVX-512 here is
# AVX-512F and DQ on an x86-64 base (all the kernels need: DQ for dropout's
# 64-bit multiply; every AVX-512 CPU but Knights Landing has both), not
# -march=native.
CPUP_ARCH_avx512 = -march=x86-64 -mavx2 -mfma -mavx512f -mavx512dq
CPUP_ARCH_avx2 = -march=x86-64 -mavx2 -mfma -mno-avx512f
CPUP_ARCH_portable = -march=x86-64
CPUP_OPTS_avx512 = $(ZFLAGS)
CPUP_OPTS_avx2 = $(ZFLAGS)
CPUP_OPTS_portable = -DGPUDL_NO_THREADS
CPUP_LIBS_avx512 = $(LIBS)
CPUP_LIBS_avx2 = $(LIBS)
CPUP_LIBS_portable = -lm

CPUP_X86_BINS = $(foreach d,$(CPUP_DIRS),$(addprefix $(d)/,$(CPUP_PROGS)))

# AArch64: Debian's cross compiler; the binaries run under qemu-aarch64 with
# the cross libc as its root. No zlib there (no arm64 zlib1g-dev), so the
# Fashion-MNIST test reads the unpacked files, as on the portable path.
AARCH64_CC ?= aarch64-linux-gnu-gcc
AARCH64_QEMU ?= qemu-aarch64
AARCH64_SYSROOT ?= /usr/aarch64-linux-gnu
A64 = $(B)/aarch64
AARCH64_BINS = $(addprefix $(A64)/,$(CPUP_PROGS))

# Jetson Orin: the CUDA backend and the main example for sm_87, through the
# Makefile's own CUDA_ARCH override (the README's Jetson line).
JETSON_ARCH = -gencode arch=compute_87,code=sm_87

.PHONY: test-cpu-paths test-aarch64 test-jetson-build cpu-paths aarch64

cpu-paths: $(CPUP_X86_BINS)
aarch64: $(AARCH64_BINS)

test-cpu-paths: cpu-paths
	CPUP_PROGS='$(CPUP_PROGS)' sh tests/cpu_paths.sh x86 $(B)

# The AArch64 builds, gpudl.h's warning checks for AArch64 and the Jetson
# build are prerequisites, built together under make -j (make test); the
# tools' check comes first where they are missing.
HAVE_A64 := $(shell command -v $(AARCH64_CC) >/dev/null 2>&1 && command -v $(AARCH64_QEMU) >/dev/null 2>&1 && echo yes)
test-aarch64: test-jetson-build $(B)/cpu-avx2/train_trace $(B)/cpu-portable/train_trace $(if $(HAVE_A64),aarch64-warnings aarch64)
	@test -n "$(HAVE_A64)" || { \
	  echo "test-aarch64: needs $(AARCH64_CC) and $(AARCH64_QEMU):" \
	       "apt-get install gcc-aarch64-linux-gnu qemu-user (tools/deps.sh installs them)"; exit 1; }
	CPUP_PROGS='$(CPUP_PROGS)' AARCH64_QEMU=$(AARCH64_QEMU) AARCH64_SYSROOT=$(AARCH64_SYSROOT) sh tests/cpu_paths.sh aarch64 $(B)

# gpudl.h (tests/build_check.c) warning-free for AArch64 (-Werror): each a target of its own, run every time
A64_WARN = c99 c11-static double $(if $(shell command -v clang 2>/dev/null),clang)
A64CC_c99 = $(AARCH64_CC) -std=c99 -O2 -fopenmp
A64CC_c11-static = $(AARCH64_CC) -std=c11 -O3 -DGPUDL_STATIC
A64CC_double = $(AARCH64_CC) -std=c99 -DGPUDL_DOUBLE
A64CC_clang = clang --target=aarch64-linux-gnu -std=c99 -O2
.PHONY: aarch64-warnings $(A64_WARN:%=warn-aarch64-%)
aarch64-warnings: $(A64_WARN:%=warn-aarch64-%)
$(A64_WARN:%=warn-aarch64-%): warn-aarch64-%: | $(A64)
	@echo "warnings (aarch64): $(A64CC_$*)"; $(A64CC_$*) $(WARN) -Werror -c tests/build_check.c -o $(A64)/warn-$*.o

test-jetson-build:
	@if ! test -x "$(NVCC)"; then \
	  echo "SKIPPED: nvcc not found (set NVCC=...): the sm_87 (Jetson) build was not checked"; exit 0; fi; \
	$(MAKE) --no-print-directory B=$(B)/jetson CUDA_ARCH="$(JETSON_ARCH)" $(B)/jetson/gpudl_cuda.o $(B)/jetson/cuda_mnist_mlp && \
	{ grep -qa sm_87 $(B)/jetson/gpudl_cuda.o && grep -qa sm_87 $(B)/jetson/cuda_mnist_mlp || \
	  { echo "test-jetson-build: no sm_87 code in $(B)/jetson"; exit 1; }; } && \
	echo "jetson: gpudl_cuda.cu and cuda_mnist_mlp compiled for sm_87 (Orin): 1 passed, 0 failed, 0 skipped"

# Each path compiles gpudl.h's implementation twice (tests/gpudl_impl.c):
# gpudl.o in its float build, gpudl_double.o in the double build of
# test_gradcheck (portable GEMM: the path changes the rest of the code).
# The programs SUITE marks linked (test_core, test_nn, test_train,
# train_trace) are compiled with $(API_ONLY) (the Makefile's) and linked with
# gpudl.o, test_gradcheck with gpudl_double.o. test_gemm_kernels calls gpudl's static GEMM kernels: one
# translation unit with the implementation (plus tgk_portable.o, the
# portable kernel's), as before.
# (kept, so that a second `make` finds everything up to date)
.SECONDARY: $(foreach d,$(CPUP_DIRS) $(A64),$(d)/tgk_portable.o $(d)/gpudl.o $(d)/gpudl_double.o)

$(CPUP_DIRS) $(A64):
	mkdir -p $@

# --- x86-64 paths: $* is avx512, avx2 or portable ---
CPUP_FLAGS = $(STD) $(WARN) $(CPUP_OPT) $(CPUP_ARCH_$*) $(CPUP_OPTS_$*)
CPUP_DFLAGS = $(STD) $(WARN) $(CPUP_OPT) $(CPUP_ARCH_$*) $(filter-out $(ZFLAGS),$(CPUP_OPTS_$*)) -DGPUDL_DOUBLE
$(B)/cpu-%/gpudl.o: tests/gpudl_impl.c gpudl.h | $(CPUP_DIRS)
	$(CC) $(CPUP_FLAGS) -c $< -o $@
$(B)/cpu-%/gpudl_double.o: tests/gpudl_impl.c gpudl.h | $(CPUP_DIRS)
	$(CC) $(CPUP_DFLAGS) -c $< -o $@
$(B)/cpu-%/tgk_portable.o: tests/test_gemm_kernels.c gpudl.h | $(CPUP_DIRS)
	$(CC) $(CPUP_FLAGS) -DTGK_PORTABLE_TU -c $< -o $@
$(B)/cpu-%/test_gemm_kernels: tests/test_gemm_kernels.c $(B)/cpu-%/tgk_portable.o tests/harness.h gpudl.h | $(CPUP_DIRS)
	$(CC) $(CPUP_FLAGS) -DTGK_EXPECT='"$*"' $< $(B)/cpu-$*/tgk_portable.o -o $@ $(CPUP_LIBS_$*)

# --- AArch64 ---
A64_FLAGS = $(STD) $(WARN) $(CPUP_OPT)
$(A64)/gpudl.o: tests/gpudl_impl.c gpudl.h | $(A64)
	$(AARCH64_CC) $(A64_FLAGS) -c $< -o $@
$(A64)/gpudl_double.o: tests/gpudl_impl.c gpudl.h | $(A64)
	$(AARCH64_CC) $(A64_FLAGS) -DGPUDL_DOUBLE -c $< -o $@
$(A64)/tgk_portable.o: tests/test_gemm_kernels.c gpudl.h | $(A64)
	$(AARCH64_CC) $(A64_FLAGS) -DTGK_PORTABLE_TU -c $< -o $@
$(A64)/test_gemm_kernels: tests/test_gemm_kernels.c $(A64)/tgk_portable.o tests/harness.h gpudl.h | $(A64)
	$(AARCH64_CC) $(A64_FLAGS) -DTGK_EXPECT='"neon"' $< $(A64)/tgk_portable.o -o $@ -pthread -lm

# --- the suite's programs on every path: their rules, from SUITE ---
# Linked ones with the path's library object (gpudl_double.o for the double
# set), whole ones alone; $(1) the program, $(2) linked or empty, $(3) the object.
cpup_double = $(filter double,$(call set_of,$(1)))
define cpup_rule
$$(B)/cpu-%/$(1): tests/$(1).c $$(CPUP_HDR) $(if $(2),tests/api_only.h $$(B)/cpu-%/$(3)) | $$(CPUP_DIRS)
	$$(CC) $$(CPUP_$(if $(call cpup_double,$(1)),D)FLAGS) $(if $(2),$$(API_ONLY)) $$< $(if $(2),$$(B)/cpu-$$*/$(3)) -o $$@ $$(CPUP_LIBS_$$*)
$$(A64)/$(1): tests/$(1).c $$(CPUP_HDR) $(if $(2),tests/api_only.h $$(A64)/$(3)) | $$(A64)
	$$(AARCH64_CC) $$(A64_FLAGS) $(if $(call cpup_double,$(1)),-DGPUDL_DOUBLE) $(if $(2),$$(API_ONLY)) $$< $(if $(2),$$(A64)/$(3)) -o $$@ -pthread -lm
endef
$(foreach p,$(call suite_with,cpup linked),$(eval $(call cpup_rule,$(p),linked,gpudl$(if $(call cpup_double,$(p)),_double).o)))
$(foreach p,$(call suite_with,cpup whole),$(eval $(call cpup_rule,$(p))))
