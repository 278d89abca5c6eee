# tests/dist.mk — make fragment (included by the top-level Makefile):
# multi-process training, src/api/dist.h.
#
#   make test-dist   the launchers' environments and the loader's shards in one
#                    process (plain and ASan); the TCP rendezvous without MPI
#                    against an attacker (tests/test_rendezvous.c, plain and
#                    ASan: processes on 127.0.0.1); then, where MPI is installed
#                    (mpicc, mpirun: Debian's libopenmpi-dev openmpi-bin), the
#                    collectives and 2-rank data-parallel SGD under mpirun -np 2,
#                    a rank that stalls or is killed (timeouts, never a hang),
#                    an elastic restart from 2 ranks to 1, and examples/ddp.c
#                    on 2 ranks against mnist_mlp on one

MPICC ?= mpicc
# yes where MPI is installed: then the MPI programs are prerequisites of
# test-dist and test-dist-nccl, built (make -j) along with the others
HAVE_MPI := $(shell command -v $(MPICC) >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 && echo yes)
# the headers of the distributed tests (tests/ddp_setup.h: their data-parallel set-up)
DIST_HDR = $(HDR) tests/ddp_setup.h

#   make bench-ddp   bench/ddp_scaling.c on 2 MPI ranks: step, all-reduce and
#                    overlap times, and the ring model's 8-GPU efficiency

.PHONY: test-dist test-dist-mpi test-dist-nccl bench-ddp

# test_dist (plain and ASan) links with the Makefile's library objects of its
# flag set (posix); the MPI programs with mpicc's: mpi_posix.o for
# test_dist_mpi and dist_faults (their sources define _POSIX_C_SOURCE), mpi_std.o
# (zlib) for examples/ddp.c. -Werror: gpudl.h is warning-free with MPI's
# headers too.
$(B)/test_dist: tests/test_dist.c $(DIST_HDR) tests/api_only.h $(B)/lib/plain_posix.o | $(B)
	$(CC) $(VARIANT_plain) $(SET_posix) $(API_ONLY) $< $(B)/lib/plain_posix.o -o $@ $(LIBS)
$(B)/asan_test_dist: tests/test_dist.c $(DIST_HDR) tests/api_only.h $(B)/lib/asan_posix.o | $(B)
	$(CC) $(VARIANT_asan) $(SET_posix) $(API_ONLY) $< $(B)/lib/asan_posix.o -o $@ $(LIBS)
# the rendezvous (one translation unit with the implementation: it calls the static gdl__rdv_ functions)
$(B)/test_rendezvous: tests/test_rendezvous.c $(HDR) | $(B)
	$(CC) $(VARIANT_plain) $(SET_posix) $< -o $@ $(LIBS)
$(B)/asan_test_rendezvous: tests/test_rendezvous.c $(HDR) | $(B)
	$(CC) $(VARIANT_asan) $(SET_posix) $< -o $@ $(LIBS)
MPI_CFLAGS = $(STD) $(WARN) -Werror $(CFLAGS) -DGPUDL_MPI
$(B)/lib/mpi_%.o: tests/gpudl_impl.c gpudl.h | $(B)/lib
	$(MPICC) $(MPI_CFLAGS) $(SET_$*) -c $< -o $@
.SECONDARY: $(B)/lib/mpi_std.o $(B)/lib/mpi_posix.o
$(B)/test_dist_mpi: tests/test_dist.c $(DIST_HDR) tests/api_only.h $(B)/lib/mpi_posix.o | $(B)
	$(MPICC) $(MPI_CFLAGS) $(SET_posix) $(API_ONLY) $< $(B)/lib/mpi_posix.o -o $@ $(LIBS)

test-dist: $(B)/test_dist $(B)/asan_test_dist $(B)/test_rendezvous $(B)/asan_test_rendezvous $(if $(HAVE_MPI),$(B)/test_dist_mpi $(B)/dist_faults $(B)/ddp_mpi $(B)/mnist_mlp)
	sh tests/run.sh $(B)/test_dist $(B)/asan_test_dist $(B)/test_rendezvous $(B)/asan_test_rendezvous
	@if command -v $(MPICC) >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory test-dist-mpi; else \
	  echo "SKIPPED: mpicc or mpirun not found (apt-get install libopenmpi-dev openmpi-bin): the 2-rank tests did not run"; fi

# examples/ddp.c with MPI, as its top says to build it (the library apart)
$(B)/ddp_mpi: examples/ddp.c examples/example_args.h gpudl.h tests/api_only.h $(B)/lib/mpi_std.o | $(B)
	$(MPICC) $(MPI_CFLAGS) $(SET_std) $(API_ONLY) $< $(B)/lib/mpi_std.o -o $@ $(LIBS)

# a rank that stalls or is killed, and an elastic restart on fewer ranks (tests/dist_faults.c)
$(B)/dist_faults: tests/dist_faults.c $(DIST_HDR) tests/api_only.h $(B)/lib/mpi_posix.o | $(B)
	$(MPICC) $(MPI_CFLAGS) $(SET_posix) $(API_ONLY) $< $(B)/lib/mpi_posix.o -o $@ $(LIBS)

test-dist-mpi: $(B)/test_dist_mpi $(B)/dist_faults $(B)/ddp_mpi $(B)/mnist_mlp
	GPUDL_BUILD=$(B) sh tests/run.sh tests/test_dist_mpi.sh tests/test_dist_faults.sh tests/test_ddp_example.sh

$(B)/ddp_scaling: bench/ddp_scaling.c bench/bench_cpu.h gpudl.h | $(B)
	$(MPICC) $(STD) $(WARN) -O3 -march=native -DGPUDL_MPI $< -o $@ $(LIBS)

bench-ddp: $(B)/ddp_scaling
	mpirun --oversubscribe $(if $(filter 0,$(shell id -u)),--allow-run-as-root) -np 2 $(B)/ddp_scaling

# NCCL on the CUDA emulator (tests/test_dist_nccl.c): one process (the
# rendezvous's errors, one rank, ranks as threads), then two ranks started
# torchrun-style and, where MPI is installed, under mpirun -np 2
# (tests/test_dist_nccl.sh runs them all); examples/ddp.c on two emulated
# GPUs torchrun-style against mnist_mlp on one CPU process; then
# test_dist_nccl under ASan+UBSan without the MPI run
# (test_dist_nccl: one translation unit with the implementation, as before;
# each of its three builds is the only program of its configuration, so a
# library object would save nothing. Compiled apart from the link, so that
# make -j compiles it while the emulator and the backend compile.)
$(EMU_B)/test_dist_nccl.o: tests/test_dist_nccl.c $(DIST_HDR) $(EMU_HDR) | $(EMU_B)
	$(CC) $(STD) $(WARN) -O2 -g -DGPUDL_CUDA -DGPUDL_EMU -I$(EMU_DIR) -isystem $(EMU_CUDA_INC) -c $< -o $@
$(B)/emu_test_dist_nccl: $(EMU_B)/test_dist_nccl.o $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o | $(B)
	$(CXX) $(EMU_B)/test_dist_nccl.o $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o -o $@ $(EMU_LIBS)
# with MPI: compiled by mpicc, linked by the C++ compiler with MPI's libraries
$(EMU_B)/test_dist_nccl_mpi.o: tests/test_dist_nccl.c $(DIST_HDR) $(EMU_HDR) | $(EMU_B)
	$(MPICC) $(STD) $(WARN) -O2 -g -DGPUDL_MPI -DGPUDL_CUDA -DGPUDL_EMU -I$(EMU_DIR) -isystem $(EMU_CUDA_INC) -c $< -o $@
$(B)/emu_test_dist_nccl_mpi: $(EMU_B)/test_dist_nccl_mpi.o $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o | $(B)
	$(CXX) $(EMU_B)/test_dist_nccl_mpi.o $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o -o $@ $(shell $(MPICC) --showme:link 2>/dev/null) $(EMU_LIBS)

# the same test on a real GPU (tools/gpu_session.sh): NCCL itself
$(B)/test_dist_nccl_cuda: tests/test_dist_nccl.c $(DIST_HDR) $(B)/gpudl_cuda.o | $(B)
	$(NVCC) -O2 $(CUDA_ARCH) -DGPUDL_CUDA $< $(B)/gpudl_cuda.o $(CUDA_LINK) -o $@

# under ASan+UBSan (the emulator's objects of make test-emu)
$(EMU_B)/asan_test_dist_nccl.o: tests/test_dist_nccl.c $(DIST_HDR) $(EMU_HDR) | $(EMU_B)
	$(CC) $(STD) $(EMU_SAN) -DGPUDL_CUDA -DGPUDL_EMU -I$(EMU_DIR) -isystem $(EMU_CUDA_INC) -c $< -o $@
$(B)/emu_asan_test_dist_nccl: $(EMU_B)/asan_test_dist_nccl.o $(EMU_B)/asan_gpudl_cuda.o $(EMU_B)/asan_cuda_emu.o | $(B)
	$(CXX) $(SAN) $(EMU_B)/asan_test_dist_nccl.o $(EMU_B)/asan_gpudl_cuda.o $(EMU_B)/asan_cuda_emu.o -o $@ $(EMU_LIBS)

test-dist-nccl: $(B)/emu_test_dist_nccl $(B)/emu_asan_test_dist_nccl $(B)/emu_ddp $(B)/mnist_mlp $(if $(HAVE_MPI),$(B)/emu_test_dist_nccl_mpi)
	GPUDL_BUILD=$(B) sh tests/run.sh tests/test_dist_nccl.sh tests/test_ddp_example_nccl.sh
	GPUDL_BUILD=$(B) GPUDL_NCCL_TEST=$(B)/emu_asan_test_dist_nccl ASAN_OPTIONS=detect_leaks=1 sh tests/run.sh tests/test_dist_nccl.sh
