# tests/launch.mk — make fragment (included by the top-level Makefile): the
# real build's kernels held against the launches the GPU suite makes
# (tests/launch_limits.sh says what is checked).
#
#   make test-launch-limits   the script's self-test on a written report;
#                   then, with nvcc, the planted kernels (tests/launch_planted.cu,
#                   compiled for sm_80: a second or so) and every kernel of
#                   gpudl_cuda.cu on sm_80, sm_87 and sm_90 against the launch
#                   log of test-emu's checks run
#
# No compile of its own for gpudl_cuda.cu: the reports are those that make
# test's builds already write beside their objects (the Makefile's
# $(B)/gpudl_cuda.o rule): sm_80 and sm_90 from test-cuda-build's
# $(B)/gpudl_cuda.o (CUDA_ARCH), sm_87 from test-aarch64's Jetson build
# ($(B)/jetson, JETSON_ARCH in tests/cpu_paths.mk); make test runs this part
# after both and after test-emu. Run alone, it builds what is missing (the
# Jetson object through the same recursive make as test-jetson-build), but
# not the launch log: run make test-emu first.

# the architectures every report together must cover (set it with a CUDA_ARCH of your own)
LL_SM ?= sm_80 sm_87 sm_90
LL_REPORTS = $(B)/gpudl_cuda.resources $(B)/jetson/gpudl_cuda.resources

.PHONY: test-launch-limits test-launch-limits-nvcc ll-jetson-report
test-launch-limits:
	sh tests/launch_limits.sh --self-test
	@if test -x "$(NVCC)"; then $(MAKE) --no-print-directory test-launch-limits-nvcc; else \
	  echo "SKIPPED: nvcc not found (set NVCC=...): the real build's launch limits were not checked"; fi

test-launch-limits-nvcc: $(B)/gpudl_cuda.resources ll-jetson-report
	@test -s $(EMU_B)/launch_log || { echo "test-launch-limits: no launch log $(EMU_B)/launch_log: run make test-emu first"; exit 1; }
	sh tests/launch_limits.sh --planted "$(NVCC)" $(B)/launch_planted
	sh tests/launch_limits.sh --archs "$(LL_SM)" $(EMU_B)/launch_log gpudl_cuda.cu $(LL_REPORTS)

# up to date after test-aarch64's test-jetson-build (a make that finds nothing to do)
ll-jetson-report:
	@$(MAKE) --no-print-directory B=$(B)/jetson CUDA_ARCH="$(JETSON_ARCH)" $(B)/jetson/gpudl_cuda.resources
