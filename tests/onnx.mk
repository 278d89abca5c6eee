# tests/onnx.mk — ONNX export (gdl_export_onnx) checked against the real runtimes: make fragment,
# included by the top-level Makefile; uses its B, CC, VARIANT_*, SET_std, API_ONLY, LIBS and HDR.
#
#   make test-onnx   tests/onnx_export.c (plain, and under ASan+UBSan) exports the test's nets
#                    (examples/' MLP and CNN, examples/recipe.h's nets with resnet10, custom
#                    modules) and writes gpudl's outputs at batch 1 and 3; tests/onnx_check.py
#                    checks each file with onnx.checker (full_check) and runs it in ONNX Runtime;
#                    the C program also reads each file back (gdl_load_onnx, gdl_onnx_run).
#                    The reader's libFuzzer harness, tests/fuzz/fuzz_onnx.c, builds with
#                    tests/fuzz/fuzz.mk's pattern rule once FUZZ_NAMES has onnx.
#                    Needs the venv of `sh tools/deps.sh onnx` (build/onnx-venv; ONNX_VENV
#                    overrides).

.PHONY: test-onnx

$(B)/test_onnx_export: tests/onnx_export.c $(HDR) tests/api_only.h examples/recipe.h examples/example_args.h \
                  $(B)/lib/plain_std.o | $(B)
	$(CC) $(VARIANT_plain) $(SET_std) $(API_ONLY) $< $(B)/lib/plain_std.o -o $@ $(LIBS)
$(B)/asan_test_onnx_export: tests/onnx_export.c $(HDR) tests/api_only.h examples/recipe.h examples/example_args.h \
                       $(B)/lib/asan_std.o | $(B)
	$(CC) $(VARIANT_asan) $(SET_std) $(API_ONLY) $< $(B)/lib/asan_std.o -o $@ $(LIBS)

test-onnx: $(B)/test_onnx_export $(B)/asan_test_onnx_export
	sh tests/test_onnx.sh $(B)/test_onnx_export $(B)/asan_test_onnx_export
