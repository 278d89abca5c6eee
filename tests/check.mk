# tests/check.mk — make check, the fast loop (a make fragment, included by
# the top-level Makefile; uses its B, CC, CXX, STD, WARN, LIBS, SET_*,
# API_ONLY, SUITE and tests/cuda_emu/emu.mk's EMU_* variables).
#
#   make check   the op table and what hangs on it, in minutes: on the CPU
#                the programs SUITE marks check (the values of the ops, the
#                gradient check of every op-table row in double precision,
#                every row in bf16 and f16 against f32, autocast), then on
#                the CUDA emulator the CPU/GPU parity of every row, in f32
#                and in bf16 / f16 (test_cuda's suites ops and dtypes).
#                Without the CUDA toolkit's headers the emulator part is
#                SKIPPED, and says so. make test is everything else.
#
# It builds against the dev header ($(B)/dev/gpudl.h, gpudl_cuda.cu: a #line
# directive before each part, as make dev-header), so a compiler message, a
# failed assert and gdb name src/PART:LINE, not gpudl.h:LINE. The tests
# include "../gpudl.h", which the compiler looks for beside the source first:
# each source is compiled from a copy in $(B)/dev/tests/ that starts with
# `#line 1 "tests/NAME.c"` (messages still name the test's own file), with
# -Itests for the headers beside it. Objects in $(B)/check/, at -O0: the
# compiles are most of its time, and the suites run a few seconds slower
# (the emulator's runtime is emu.mk's object, at -O3).

CHK = $(B)/check
DEV = $(B)/dev
CHECK_OPT ?= -O0 -g
CHECK_CFLAGS = $(STD) $(WARN) $(CHECK_OPT) -Itests
CHECK_PROGS = $(call suite_with,check)
CHECK_EMU_SUITES = ops dtypes
# the CUDA toolkit's headers, which the emulator compiles against (tests/cuda_emu/emu.mk finds them)
HAVE_EMU_HDRS := $(if $(wildcard $(EMU_CUDA_INC)/cuda_runtime.h),$(if $(wildcard $(EMU_CUDA_INC)/cublasLt.h),yes))

.PHONY: check
.SECONDARY: $(DEV)/tests/gpudl_impl.c $(CHECK_PROGS:%=$(DEV)/tests/%.c) $(DEV)/tests/test_cuda.c

$(CHK) $(DEV)/tests:
	mkdir -p $@

# the dev header: rewritten only when its bytes change (as gpudl.h, the Makefile)
$(DEV)/gpudl.h $(DEV)/gpudl_cuda.cu: src/PARTS cuda/PARTS $(wildcard src/*.h src/*/*.h cuda/*.cu)
	@sh tools/amalgamate.sh --lines $(DEV)
# a source's copy beside it, naming the source
$(DEV)/tests/%.c: tests/%.c | $(DEV)/tests
	@{ printf '#line 1 "%s"\n' '$<'; cat '$<'; } > $@

# the library object of each flag set; a program of SUITE linked with it or whole
$(CHK)/lib_%.o: $(DEV)/tests/gpudl_impl.c $(DEV)/gpudl.h | $(CHK)
	$(CC) $(CHECK_CFLAGS) $(SET_$*) -c $< -o $@
check_linked = $(filter linked,$(call attrs_of,$(1)))
$(CHECK_PROGS:%=$(CHK)/%): $(CHK)/%: $(DEV)/tests/%.c $(DEV)/gpudl.h $(filter-out gpudl.h,$(HDR)) tests/api_only.h \
                           $$(if $$(call check_linked,$$*),$(CHK)/lib_$$(call set_of,$$*).o) | $(CHK)
	$(CC) $(CHECK_CFLAGS) $(SET_$(call set_of,$*)) $(OPTS_$*) $(if $(call check_linked,$*),$(API_ONLY)) $< \
	  $(if $(call check_linked,$*),$(CHK)/lib_$(call set_of,$*).o) -o $@ $(LIBS)

# the emulator's build of the GPU suite (tests/cuda_emu/emu.mk's, from the dev
# header); the emulator's runtime is emu.mk's own object
$(CHK)/gpudl_cuda.o: $(DEV)/gpudl_cuda.cu $(DEV)/gpudl.h $(EMU_HDR) | $(CHK)
	$(CXX) $(EMU_CXXFLAGS) $(CHECK_OPT) $(EMU_CU) -c $< -o $@
$(CHK)/test_cuda.o: $(DEV)/tests/test_cuda.c $(DEV)/gpudl.h $(filter-out gpudl.h,$(HDR)) $(EMU_HDR) | $(CHK)
	$(CC) $(CHECK_CFLAGS) -DGPUDL_CUDA -DGPUDL_EMU -I$(EMU_DIR) $(ZFLAGS) $(EMU_NVML) -c $< -o $@
$(CHK)/emu_test_cuda: $(CHK)/test_cuda.o $(CHK)/gpudl_cuda.o $(EMU_B)/cuda_emu.o $(B)/libfake_nvml.so
	$(CXX) $(CHK)/test_cuda.o $(CHK)/gpudl_cuda.o $(EMU_B)/cuda_emu.o -o $@ $(EMU_LIBS)

# Its builds first, two at a time ($(TEST_JOBS), as make test's parts), then
# the runs, two at a time. run.sh runs programs without arguments: the
# emulator's run is a wrapper.
CHECK_BUILDS = $(CHECK_PROGS:%=$(CHK)/%) $(if $(HAVE_EMU_HDRS),$(CHK)/emu_test_cuda)
.PHONY: check-build
check-build: $(CHECK_BUILDS)
check:
	@$(MAKE) --no-print-directory $(TEST_JOBS) check-build
	@$(if $(HAVE_EMU_HDRS),$(call emu_wrap,$(CHK)/run_emu,,$(CHK)/emu_test_cuda,$(CHECK_EMU_SUITES:%=-s %) -x seq_ops))
	@status=0; RUN_JOBS=2 sh tests/run.sh $(CHECK_PROGS:%=$(CHK)/%) $(if $(HAVE_EMU_HDRS),$(CHK)/run_emu) || status=1; \
	$(if $(HAVE_EMU_HDRS),,echo "SKIPPED: make check: no CUDA toolkit headers ($(EMU_CUDA_INC)/cuda_runtime.h, cublasLt.h;" \
	  "set NVCC= or EMU_CUDA_INC=): the op table did not run on the CUDA emulator";) exit $$status

# compile_commands.json for an editor's clangd: each part of src/ and cuda/
# compiled with the parts before it (tools/compile_commands.sh); remade
# when a part changes
compile_commands.json: tools/compile_commands.sh $(DEV)/gpudl.h $(DEV)/gpudl_cuda.cu
	@GPUDL_INC=$(CURDIR)/$(DEV) CUDA_INC=$(EMU_CUDA_INC) sh tools/compile_commands.sh $(DEV)/clangd
