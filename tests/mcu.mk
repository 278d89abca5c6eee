# tests/mcu.mk — the embedded demo (gdl_export_c, examples/mcu/): make
# fragment, included by the top-level Makefile; uses its B, CC, VARIANT_plain,
# SET_std, API_ONLY, LIBS and HDR.
#
#   make test-mcu   tests/test_export_c.c under ASan+UBSan, then
#                   tests/test_mcu.sh: the export's refusals
#                   (tests/test_export_c.c); examples/mcu/train_export trains
#                   and quantizes the Fashion-MNIST MLP and a CNN briefly and
#                   exports them; each file is checked alone (gcc and clang
#                   -Werror, freestanding symbols, its arena), run on the PC
#                   against gpudl's outputs and as firmware under qemu on a
#                   Cortex-M4F and a Cortex-M7 against the PC's, bit for bit;
#                   the sizes table is left in $(B)/mcu/sizes.md
#   make mcu-demo   trains, quantizes and exports the MLP, builds the firmware
#                   for the Cortex-M4F and runs it under qemu: predictions,
#                   accuracy, flash and RAM
# Needs arm-none-eabi-gcc, newlib and qemu-system-arm (sh tools/deps.sh test).

.PHONY: test-mcu mcu-demo

$(B)/mcu:
	mkdir -p $@
$(B)/mcu/test_export_c: tests/test_export_c.c $(HDR) tests/api_only.h $(B)/lib/plain_std.o | $(B)/mcu
	$(CC) $(VARIANT_plain) -Werror $(SET_std) $(API_ONLY) $< $(B)/lib/plain_std.o -o $@ $(LIBS)
$(B)/mcu/asan_test_export_c: tests/test_export_c.c $(HDR) tests/api_only.h $(B)/lib/asan_std.o | $(B)/mcu
	$(CC) $(VARIANT_asan) $(SET_std) $(API_ONLY) $< $(B)/lib/asan_std.o -o $@ $(LIBS)
$(B)/mcu/train_export: examples/mcu/train_export.c gpudl.h tests/api_only.h $(B)/lib/plain_std.o | $(B)/mcu
	$(CC) $(VARIANT_plain) -Werror $(SET_std) $(API_ONLY) $< $(B)/lib/plain_std.o -o $@ $(LIBS)

test-mcu: $(B)/mcu/test_export_c $(B)/mcu/asan_test_export_c $(B)/mcu/train_export
	ASAN_OPTIONS=detect_leaks=1 B=$(B) sh tests/run.sh $(B)/mcu/asan_test_export_c tests/test_mcu.sh

mcu-demo: $(B)/mcu/test_export_c $(B)/mcu/train_export
	B=$(B) sh examples/mcu/demo.sh
