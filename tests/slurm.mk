# tests/slurm.mk — make fragment (included by the top-level Makefile): gpudl on clusters.
#
#   make test-cluster   examples/cluster/train.c as the Kubernetes controllers of examples/k8s start it
#                       (tests/test_dist_k8s.sh: an Indexed Job, a PyTorchJob, Kubeflow's PET_*, an
#                       MPIJob, each as two local processes against one; the manifests checked), then
#                       a real one-node Slurm cluster (tests/slurm/test_slurm.sh: host lists against
#                       scontrol, train_mpi.sbatch and train_nccl.sbatch against one process, the
#                       signal -> checkpoint -> requeue -> resume cycle), started once and stopped at
#                       the end; skipped loudly where Slurm cannot start (not root, not installed)
# The host list parser's unit tests and preemption in one process and on two MPI ranks are in
# tests/test_dist.c (make test-dist).

.PHONY: test-cluster

# examples/cluster/train.c: the one-process CPU build, the MPI build, the emulated-GPU (NCCL) build;
# its source defines _POSIX_C_SOURCE (sigaction), so the library objects of the posix flag set
$(B)/cluster_train: examples/cluster/train.c gpudl.h tests/api_only.h $(B)/lib/plain_posix.o | $(B)
	$(CC) $(VARIANT_plain) $(SET_posix) $(API_ONLY) $< $(B)/lib/plain_posix.o -o $@ $(LIBS)
$(B)/mpi_cluster_train: examples/cluster/train.c gpudl.h tests/api_only.h $(B)/lib/mpi_posix.o | $(B)
	$(MPICC) $(MPI_CFLAGS) $(SET_posix) $(API_ONLY) $< $(B)/lib/mpi_posix.o -o $@ $(LIBS)
$(B)/emu_cluster_train: examples/cluster/train.c gpudl.h tests/api_only.h $(EMU_B)/gpudl_host_posix.o $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o | $(B)
	$(CC) $(EMU_HOST) $(POSIX) $(API_ONLY) -c $< -o $(EMU_B)/cluster_train.o
	$(CXX) $(EMU_B)/cluster_train.o $(EMU_B)/gpudl_host_posix.o $(EMU_B)/gpudl_cuda.o $(EMU_B)/cuda_emu.o -o $@ $(EMU_LIBS)
# the tests' tools: weights compared; a host list expanded
$(B)/same_weights $(B)/hostnames: $(B)/%: tests/slurm/%.c gpudl.h tests/api_only.h $(B)/lib/plain_std.o | $(B)
	$(CC) $(VARIANT_plain) $(SET_std) $(API_ONLY) $< $(B)/lib/plain_std.o -o $@ $(LIBS)

CLUSTER_PROGS = $(B)/cluster_train $(B)/emu_cluster_train $(B)/same_weights $(B)/hostnames $(if $(HAVE_MPI),$(B)/mpi_cluster_train)
test-cluster: $(CLUSTER_PROGS)
	GPUDL_BUILD=$(B) sh tests/run.sh tests/test_dist_k8s.sh tests/slurm/test_slurm.sh

# tests/test_examples.sh checks cluster/train's flags, files and CSV with the other examples
test-examples: $(B)/cluster_train
