# tests/fuzz/fuzz.mk — libFuzzer harnesses for every parser (included by the
# top-level Makefile; uses its B).
#
#   make fuzz                  each harness for FUZZ_SECONDS (default 60) from
#                              the seed corpora in tests/fuzz/corpus/NAME
#   make fuzz FUZZ_SECONDS=3600 FUZZ_JOBS=2   a long run
#   make fuzz-seeds            rewrite the seed corpora (make_seeds.c)
#
# New inputs go to $(B)/fuzz/corpus-NAME, crashes to $(B)/fuzz/crash-NAME-*;
# a crash's input, once fixed, is copied into tests/fuzz/corpus/NAME so that
# every later run replays it first.

FUZZ_NAMES = idx cifar safetensors checkpoint model text onnx
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= 1
FUZZ_CC ?= clang
FUZZ_SAN = -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_FLAGS = -std=c99 -g -O1 -DGPUDL_ZLIB
FUZZ_BINS = $(addprefix $(B)/fuzz/fuzz_,$(FUZZ_NAMES))
FUZZ_DEPS = tests/fuzz/fuzz_common.h gpudl.h $(B)/fuzz/gpudl_impl.o
FUZZ_LINK = $(B)/fuzz/gpudl_impl.o -lz -lm -pthread

.PHONY: fuzz fuzz-build fuzz-seeds $(FUZZ_NAMES:%=fuzz-run-%)

fuzz-build: $(FUZZ_BINS)

# One target per harness (tests/fuzz/run.sh NAME), so that make -j2 (as make
# test runs it) fuzzes two at a time: each for its FUZZ_SECONDS, on its own
# corpus, log and crash files. Its lines go to $(B)/fuzz/result-NAME; fuzz
# prints them in order with their sum (run.sh's closing line) and fails if a
# harness failed or did not finish.
fuzz: $(FUZZ_NAMES:%=fuzz-run-%)
	@cat $(FUZZ_NAMES:%=$(B)/fuzz/result-%) | awk '/^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$$/ { p += $$1; f += $$3; s += $$5; n++; next } \
	  { print } END { f += $(words $(FUZZ_NAMES)) - n; print p " passed, " f " failed, " s " skipped"; exit f > 0 }'
$(FUZZ_NAMES:%=fuzz-run-%): fuzz-run-%: $(B)/fuzz/fuzz_%
	@rm -f $(B)/fuzz/result-$*; sh tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_JOBS) $(B)/fuzz $* >$(B)/fuzz/result-$* 2>&1 || true

$(B)/fuzz:
	mkdir -p $@

# the header's implementation once, instrumented for coverage, shared by every harness
$(B)/fuzz/gpudl_impl.o: tests/fuzz/gpudl_impl.c gpudl.h | $(B)/fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link $(FUZZ_SAN) -c $< -o $@
$(B)/fuzz/fuzz_model: tests/fuzz/fuzz_checkpoint.c $(FUZZ_DEPS) | $(B)/fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer $(FUZZ_SAN) -DFZ_MODEL_ONLY $< -o $@ $(FUZZ_LINK)
$(B)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_DEPS) | $(B)/fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer $(FUZZ_SAN) $< -o $@ $(FUZZ_LINK)

fuzz-seeds: | $(B)/fuzz
	$(CC) $(STD) $(WARN) -O1 -g -DGPUDL_ZLIB tests/fuzz/make_seeds.c tests/fuzz/gpudl_impl.c -o $(B)/fuzz/make_seeds -lz -lm -pthread
	$(B)/fuzz/make_seeds tests/fuzz/corpus
