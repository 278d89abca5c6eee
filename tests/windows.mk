# tests/windows.mk — make fragment (included by the top-level Makefile): the
# platforms besides Linux.
#
#   make test-windows      the MinGW-w64 cross build (Debian's gcc-mingw-w64-x86-64,
#                          zlib from libz-mingw-w64-dev) of the CPU suite, the
#                          platform test and the examples, with -Wall -Wextra
#                          -Wpedantic -Werror, run under Wine (Debian's wine64):
#                          one prefix under build/win, the library compiled once
#                          per flag set as for Linux. Each part left out says
#                          SKIPPED and why. Without MinGW or Wine: one SKIPPED line.
#   make test-portability  tests/msvc_check.sh (what MSVC rejects: we have no MSVC);
#                          the header under clang and gcc with -std=c99
#                          -D_POSIX_C_SOURCE=200809L and no _GNU_SOURCE (what a
#                          strict POSIX system such as macOS offers; -Werror); and
#                          tests/test_platform.c natively

MINGW_CC ?= x86_64-w64-mingw32-gcc
WINE ?= wine
WB = $(B)/win
HAVE_MINGW := $(shell command -v $(MINGW_CC) >/dev/null 2>&1 && echo yes)
HAVE_WINE := $(shell command -v $(WINE) >/dev/null 2>&1 && echo yes)
# zlib for MinGW (IDX .gz files: the examples' Fashion-MNIST)
WIN_ZLIB := $(shell test -f /usr/x86_64-w64-mingw32/include/zlib.h && echo yes)
WIN_Z = $(if $(WIN_ZLIB),-DGPUDL_ZLIB)
# (-lpthread: the tests' harness times with clock_gettime, which MinGW has in winpthreads; gpudl uses
# Win32 threads and needs it not)
WIN_LIBS = -static $(if $(WIN_ZLIB),-lz) -lpthread
# -O2 without -march: the portable GEMM kernel (GCC does not align the stack
# for AVX spills on Windows x64, so an AVX build is a user's own risk there)
# __USE_MINGW_ANSI_STDIO: printf with C99's %zu and %lld (MinGW's default is msvcrt's, without them)
WIN_CFLAGS = $(STD) $(WARN) -Werror -O2 -D__USE_MINGW_ANSI_STDIO=1
WIN_SET_std = $(WIN_Z)
WIN_SET_posix = $(POSIX) $(WIN_Z)
WIN_SET_double = -DGPUDL_DOUBLE
WIN_SET_nvml = -DGPUDL_NVML $(POSIX)
WIN_SET_none =
# the parts of the Linux suite built and run here; those left out, and why
# (the programs with the win attribute in the Makefile's SUITE)
WIN_LINKED = $(call suite_with,win linked)
WIN_WHOLE = $(call suite_with,win whole)
WIN_EXAMPLES = mnist_mlp cnn keras_style linear_regression cpu_vs_gpu device_query gpu_monitor ddp model_parallel
# (test_pool's fork test skips itself here: no fork on Windows; test_resume starts its child with _spawnv
# and kills it with TerminateProcess in place of fork and SIGKILL)
WIN_SKIPPED = \
  "test_crash, test_dist, test_monitor, test_alloc, test_dtype: POSIX-only tests (fork, signals, a fake NVML .so, \
MPI); not in the Windows list" \
  "MPI: no Windows version yet; gdl_dist_init with several CPU processes says so at run time (the TCP \
rendezvous runs: test_platform, two processes)" \
  "the GPU suite: CUDA on Windows is not built here (no nvcc for Windows)"

WIN_TESTS = $(WIN_LINKED:%=$(WB)/%.exe) $(WIN_WHOLE:%=$(WB)/%.exe) $(WB)/test_platform_interlocked.exe
WIN_EXES = $(WIN_TESTS) $(WIN_EXAMPLES:%=$(WB)/%.exe)
.PHONY: test-windows test-windows-run test-portability
.SECONDARY: $(foreach s,std posix double nvml none,$(WB)/lib/$(s).o)

$(WB)/lib:
	mkdir -p $@
$(WB)/lib/%.o: tests/gpudl_impl.c gpudl.h | $(WB)/lib
	$(MINGW_CC) $(WIN_CFLAGS) $(WIN_SET_$*) -c $< -o $@
# test_resume's scaffolding is POSIX-written too (mkdir with a mode, mkdtemp): tests/win_compat.h
WIN_OPTS_test_resume = $(WIN_COMPAT)
$(WB)/test_resume.exe: tests/win_compat.h
$(WIN_LINKED:%=$(WB)/%.exe): $(WB)/%.exe: tests/%.c $(HDR) tests/api_only.h $(WB)/lib/$$(call set_of,$$*).o | $(WB)/lib
	$(MINGW_CC) $(WIN_CFLAGS) $(WIN_OPTS_$*) $(WIN_SET_$(call set_of,$*)) $(API_ONLY) $< $(WB)/lib/$(call set_of,$*).o -o $@ $(WIN_LIBS)
# (test_formats and test_data are written for POSIX: tests/win_compat.h maps their scaffolding's calls)
WIN_COMPAT = -include tests/win_compat.h -Itests/win_include
$(WIN_WHOLE:%=$(WB)/%.exe): $(WB)/%.exe: tests/%.c $(HDR) tests/win_compat.h tests/win_include/sys/resource.h | $(WB)/lib
	$(MINGW_CC) $(WIN_CFLAGS) $(WIN_SET_$(call set_of,$*)) $(WIN_COMPAT) $< -o $@ $(WIN_LIBS)
# the Win32 Interlocked atomics (MSVC's path) in place of GCC's builtins
$(WB)/test_platform_interlocked.exe: tests/test_platform.c $(HDR) | $(WB)/lib
	$(MINGW_CC) $(WIN_CFLAGS) -DGDL__ATOMICS_INTERLOCKED $< -o $@ $(WIN_LIBS)
$(WIN_EXAMPLES:%=$(WB)/%.exe): $(WB)/%.exe: examples/%.c examples/example_args.h gpudl.h tests/api_only.h $(WB)/lib/$$(call set_of,$$*).o | $(WB)/lib
	$(MINGW_CC) $(WIN_CFLAGS) $(WIN_SET_$(call set_of,$*)) $(API_ONLY) $< $(WB)/lib/$(call set_of,$*).o -o $@ $(WIN_LIBS)
$(WB)/mnist_mlp.exe: examples/recipe.h examples/nets.h
$(WB)/cnn.exe: examples/nets.h

test-windows: | $(B)
	@if test -z "$(HAVE_MINGW)" || test -z "$(HAVE_WINE)"; then \
	  echo "SKIPPED: test-windows: $(if $(HAVE_MINGW),,$(MINGW_CC) not found )$(if $(HAVE_WINE),,$(WINE) not found )(sh tools/deps.sh test installs them)"; \
	else $(MAKE) --no-print-directory test-windows-run; fi

# One Wine prefix, one wineserver kept up between the programs (a Wine start
# costs seconds). wineboot -i returns before the server has written the new
# prefix's registry: wineboot -s ends the prefix's services and
# wineserver -w waits for the server to write it and exit. A prefix left half-made
# once had no TEMP, and tmpfile() failed in its programs; .gpudl-ready marks
# a whole one. Each program runs through a wrapper that strips Windows'
# CRs, so tests/run.sh reads the summary lines as on Linux.
WINE_ENV = WINEPREFIX=$(abspath $(WB)/prefix) WINEDEBUG=-all WINEDLLOVERRIDES='mscoree,mshtml=' DISPLAY=
test-windows-run: $(WIN_EXES)
	@for s in $(WIN_SKIPPED); do echo "SKIPPED: $$s"; done
	@mkdir -p $(WB)/run $(WB)/tmp
	@export $(WINE_ENV); test -f $(WB)/prefix/.gpudl-ready || { rm -rf $(WB)/prefix; echo "wine: making the prefix $(WB)/prefix"; \
	  wineboot -i >/dev/null 2>&1; wineboot -s >/dev/null 2>&1; timeout 120 wineserver -w; \
	  grep -q '^"TEMP"=' $(WB)/prefix/user.reg || { echo "wine: the prefix $(WB)/prefix is incomplete (no TEMP in user.reg)"; exit 1; }; \
	  touch $(WB)/prefix/.gpudl-ready; }; \
	  wineserver -p 30; \
	  for e in $(WIN_TESTS) $(WIN_EXAMPLES:%=$(WB)/%.exe); do \
	    n=$$(basename $$e .exe); \
	    printf '#!/bin/sh\n%s "%s" "$$@" >"%s" 2>&1; rc=$$?; tr -d "\\r" <"%s"; exit $$rc\n' \
	      "$(WINE)" "$$e" "$(WB)/run/$$n.out" "$(WB)/run/$$n.out" >$(WB)/run/$$n; \
	    chmod +x $(WB)/run/$$n; \
	  done; \
	  TMPDIR=$(abspath $(WB)/tmp) GPUDL_TEST_DIR=$(WB)/tmp sh tests/run.sh $(WIN_TESTS:$(WB)/%.exe=$(WB)/run/%) && \
	  sh tests/windows_examples.sh $(WB)/run; rc=$$?; wineserver -k 2>/dev/null; exit $$rc

# ---- portability without the platforms themselves ----
STRICT_POSIX = -std=c99 $(WARN) -Werror -D_POSIX_C_SOURCE=200809L
test-portability: $(B)/test_platform | $(B)/warn
	sh tests/msvc_check.sh
	clang $(STRICT_POSIX) -c tests/build_check.c -o $(B)/warn/strict_posix_clang.o
	clang $(STRICT_POSIX) -DGPUDL_NVML -c tests/build_check.c -o $(B)/warn/strict_posix_clang_nvml.o
	gcc $(STRICT_POSIX) -c tests/build_check.c -o $(B)/warn/strict_posix_gcc.o
	GPUDL_TEST_DIR=$(B) sh tests/run.sh $(B)/test_platform
$(B)/test_platform: tests/test_platform.c $(HDR) | $(B)
	$(CC) $(VARIANT_plain) $< -o $@ $(LIBS)
