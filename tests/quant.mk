# tests/quant.mk — INT8 quantization: make fragment, included by
# the top-level Makefile; uses its B, CC, VARIANT_*, SET_std, API_ONLY, LIBS,
# HDR, and tests/cpu_paths.mk's CPUP_* and A64 variables.
#
#   make test-quant   tests/test_quant.c (the quantization flows, files,
#                     errors; plain and ASan+UBSan) and tests/test_gemm_int8.c
#                     (the int8 GEMM against an int32 reference) in the
#                     default build; then the int8 GEMM's paths that the CPU
#                     suite's builds do not select: AVX-512 VNNI (run where
#                     the CPU has avx512_vnni, else a SKIP line) and AArch64
#                     NEON sdot (under qemu-aarch64, when the cross tools are
#                     there).
#
# The other paths run in the CPU suite (tests/cpu_paths.sh): each x86 build
# (portable C, AVX2, and AVX-512F, which selects the AVX2 int8 kernel: VNNI
# needs -mavx512vnni) and the AArch64 build (NEON without sdot) link
# test_gemm_int8 with their library object (the Makefile's SUITE marks it
# cpup); the rules are here.

.PHONY: test-quant

QUANT_TESTS = $(B)/test_quant $(B)/asan_test_quant $(B)/test_gemm_int8

$(B)/test_quant $(B)/test_gemm_int8: $(B)/%: tests/%.c $(HDR) tests/api_only.h $(B)/lib/plain_std.o | $(B)
	$(CC) $(VARIANT_plain) $(SET_std) $(API_ONLY) $< $(B)/lib/plain_std.o -o $@ $(LIBS)
$(B)/asan_test_quant: tests/test_quant.c $(HDR) tests/api_only.h $(B)/lib/asan_std.o | $(B)
	$(CC) $(VARIANT_asan) $(SET_std) $(API_ONLY) $< $(B)/lib/asan_std.o -o $@ $(LIBS)

# --- the int8 GEMM on each CPU path ---
# the int8 kernel each x86 path of the CPU suite selects
QI8_EXPECT_portable = portable
QI8_EXPECT_avx2 = avx2
QI8_EXPECT_avx512 = avx2
$(B)/cpu-%/test_gemm_int8: tests/test_gemm_int8.c tests/harness.h gpudl.h tests/api_only.h $(B)/cpu-%/gpudl.o | $(CPUP_DIRS)
	$(CC) $(CPUP_FLAGS) -DQI8_EXPECT='"$(QI8_EXPECT_$*)"' $(API_ONLY) $< $(B)/cpu-$*/gpudl.o -o $@ $(CPUP_LIBS_$*)
$(A64)/test_gemm_int8: tests/test_gemm_int8.c tests/harness.h gpudl.h tests/api_only.h $(A64)/gpudl.o | $(A64)
	$(AARCH64_CC) $(A64_FLAGS) -DQI8_EXPECT='"neon 4x8"' $(API_ONLY) $< $(A64)/gpudl.o -o $@ -pthread -lm

# The two paths no other build selects: one translation unit each (the test
# with the implementation), -O1 (these check results, not speed).
QI8_VNNI = $(B)/cpu-vnni/test_gemm_int8
QI8_SDOT = $(B)/aarch64-sdot/test_gemm_int8
$(B)/cpu-vnni $(B)/aarch64-sdot:
	mkdir -p $@
$(QI8_VNNI): tests/test_gemm_int8.c tests/harness.h gpudl.h | $(B)/cpu-vnni
	$(CC) $(STD) $(WARN) -O1 -march=x86-64 -mavx2 -mfma -mavx512f -mavx512bw -mavx512vnni \
	  -DQI8_EXPECT='"avx512vnni"' $< -o $@ -pthread -lm
$(QI8_SDOT): tests/test_gemm_int8.c tests/harness.h gpudl.h | $(B)/aarch64-sdot
	$(AARCH64_CC) $(STD) $(WARN) -O1 -march=armv8.2-a+dotprod -DQI8_EXPECT='"neon-sdot"' $< -o $@ -pthread -lm

# examples/quantize.c (built here, run by hand: it trains on Fashion-MNIST)
$(B)/quantize: examples/quantize.c examples/example_args.h gpudl.h tests/api_only.h $(B)/lib/plain_std.o | $(B)
	$(CC) $(VARIANT_plain) $(SET_std) $(API_ONLY) $< $(B)/lib/plain_std.o -o $@ $(LIBS)

test-quant: $(QUANT_TESTS) $(QI8_VNNI) $(if $(HAVE_A64),$(QI8_SDOT)) $(B)/quantize
	@if grep -qw avx512_vnni /proc/cpuinfo 2>/dev/null; then echo '#!/bin/sh' > $(B)/cpu-vnni/run; \
	  echo 'exec $(QI8_VNNI) "$$@"' >> $(B)/cpu-vnni/run; else \
	  printf '#!/bin/sh\necho "SKIP int8 GEMM AVX-512 VNNI: this CPU lacks avx512_vnni (built, not run)"\necho "0 passed, 0 failed, 1 skipped"\n' \
	  > $(B)/cpu-vnni/run; fi; chmod +x $(B)/cpu-vnni/run
	@if test -n "$(HAVE_A64)"; then printf '#!/bin/sh\nexec %s -L %s %s "$$@"\n' "$(AARCH64_QEMU)" "$(AARCH64_SYSROOT)" \
	  "$(QI8_SDOT)" > $(B)/aarch64-sdot/run; else mkdir -p $(B)/aarch64-sdot && \
	  printf '#!/bin/sh\necho "SKIP int8 GEMM NEON sdot: no $(AARCH64_CC) / $(AARCH64_QEMU)"\necho "0 passed, 0 failed, 1 skipped"\n' \
	  > $(B)/aarch64-sdot/run; fi; chmod +x $(B)/aarch64-sdot/run
	ASAN_OPTIONS=detect_leaks=1 sh tests/run.sh $(QUANT_TESTS) $(B)/cpu-vnni/run $(B)/aarch64-sdot/run

# tests/test_examples.sh runs examples/quantize.c's CNN on a subset
test-examples: $(B)/quantize
