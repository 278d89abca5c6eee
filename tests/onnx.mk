# tests/onnx.mk — ONNX export (gdl_export_onnx) checked against the real runtimes: make fragment,
# included by the top-level Makefile; uses its B, CC, VARIANT_*, SET_std, API_ONLY, LIBS and HDR.
#
#   make test-onnx   tests/onnx_export.c (plain, and under ASan+UBSan) exports the test's nets
#                    (examples/' MLP and CNN, examples/recipe.h's nets with resnet10, custom
#                    modules) and writes gpudl's outputs at batch 1 and 3; tests/onnx_check.py
#                    checks each file with onnx.checker (full_check) and runs it in ONNX Runtime;
#                    the C program also reads each file back (gdl_load_onnx, gdl_onnx_run), the int8
#                    (QDQ) nets too, bit for bit.
#                    Then tests/onnx_import.c (plain and under ASan+UBSan) runs the committed PyTorch
#                    exports of tests/onnx_fixtures (both torch.onnx.export exporters) with gdl_onnx_run
#                    against the outputs PyTorch saved beside them, and fine-tunes two of them one SGD
#                    step against PyTorch's loss and updated weights; and loads hand-made int8 files
#                    (truncated raw_data refused, QLinear ops refused by name).
#                    The reader's libFuzzer harness, tests/fuzz/fuzz_onnx.c, builds with
#                    tests/fuzz/fuzz.mk's pattern rule once FUZZ_NAMES has onnx.
#                    Needs the venv of `sh tools/deps.sh onnx` (build/onnx-venv with onnx, onnxruntime
#                    and numpy; ONNX_VENV overrides): no torch.
#   make onnx-fixtures  rewrites tests/onnx_fixtures with tests/onnx_torch.py (run by hand, then commit the
#                    files): needs torch, onnxscript, onnx and onnxruntime in $(TORCH_VENV)
#                    (default build/torch-venv, bench/torch_venv.sh's).

.PHONY: test-onnx onnx-fixtures

$(B)/test_onnx_export: tests/onnx_export.c $(HDR) tests/api_only.h examples/recipe.h examples/example_args.h \
                  $(B)/lib/plain_std.o | $(B)
	$(CC) $(VARIANT_plain) $(SET_std) $(API_ONLY) $< $(B)/lib/plain_std.o -o $@ $(LIBS)
$(B)/asan_test_onnx_export: tests/onnx_export.c $(HDR) tests/api_only.h examples/recipe.h examples/example_args.h \
                       $(B)/lib/asan_std.o | $(B)
	$(CC) $(VARIANT_asan) $(SET_std) $(API_ONLY) $< $(B)/lib/asan_std.o -o $@ $(LIBS)

$(B)/test_onnx_import: tests/onnx_import.c $(HDR) tests/api_only.h $(B)/lib/plain_std.o | $(B)
	$(CC) $(VARIANT_plain) $(SET_std) $(API_ONLY) $< $(B)/lib/plain_std.o -o $@ $(LIBS)
$(B)/asan_test_onnx_import: tests/onnx_import.c $(HDR) tests/api_only.h $(B)/lib/asan_std.o | $(B)
	$(CC) $(VARIANT_asan) $(SET_std) $(API_ONLY) $< $(B)/lib/asan_std.o -o $@ $(LIBS)

test-onnx: $(B)/test_onnx_export $(B)/asan_test_onnx_export $(B)/test_onnx_import $(B)/asan_test_onnx_import
	sh tests/test_onnx.sh $(B)/test_onnx_export $(B)/asan_test_onnx_export -- $(B)/test_onnx_import \
	    $(B)/asan_test_onnx_import

onnx-fixtures:
	$${TORCH_VENV:-build/torch-venv}/bin/python tests/onnx_torch.py tests/onnx_fixtures
