/* ---------------------------------------------------------------------------
   src/api/dist.h   Several processes training one model (data parallel), as
   launched by torchrun, Slurm's srun or OpenMPI's mpirun:

       gdl_dist_init();                          // reads the launcher's variables
       gdl_device dev = gdl_dist_device();       // cuda:(local rank) or cpu
       o.num_replicas = gdl_dist_world_size();   // the loader's shard (DistributedSampler)
       o.rank = gdl_dist_rank();
       ... forward, backward, then for every parameter:
       gdl_dist_all_reduce(p->grad, GDL_AVG);    // the same gradient on every rank
       ... gdl_step(opt); and at the end gdl_dist_shutdown();

   The environment, first match wins:
     torchrun   RANK, WORLD_SIZE, LOCAL_RANK (MASTER_ADDR, MASTER_PORT)
     mpirun     OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
     srun       SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (start the processes with
                srun: inside an sbatch script without srun, SLURM_NTASKS counts
                processes that were never started)
     Kubernetes Indexed Job   JOB_COMPLETION_INDEX (without RANK), WORLD_SIZE (set in the
                manifest), LOCAL_RANK optional (0)
     Kubeflow PyTorchJob      RANK, WORLD_SIZE (one process per pod; LOCAL_RANK optional, 0),
                with its PET_* variables (PET_NPROC_PER_NODE must be 1)
     Kubeflow PET_* alone     PET_NNODES (N, or an elastic N:N), PET_NODE_RANK, PET_NPROC_PER_NODE
                1 (TrainJob; torchrun's variables): rank PET_NODE_RANK of PET_NNODES
   none: a single process (rank 0 of 1). A variable missing, not a whole
   number or out of range is an error naming it. The rendezvous without MPI
   reads MASTER_ADDR and MASTER_PORT, else PET_MASTER_ADDR and PET_MASTER_PORT;
   in a process srun started, an unset MASTER_ADDR is the first host of
   SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST, SLURM_NODELIST: Slurm's host
   list syntax, gdl_hostlist_host below), where srun starts rank 0, and an
   unset MASTER_PORT is 20000 + SLURM_JOB_ID mod 20000.

   Transports: collectives of CPU tensors go through MPI; collectives of CUDA
   tensors (and gdl_ddp over a module on a GPU) through NCCL, one GPU per
   process (cuda:(local rank)), on a communication stream of that device:
   it starts after the compute stream's work so far (a gradient bucket is
   complete), and the compute stream waits for it before what comes next
   (DDP: before the gradients are taken back, so the optimizer reads
   averaged gradients); the host does not wait. NCCL's unique id (128 bytes)
   is made by rank 0 at gdl_dist_init and handed round over MPI (MPI_Bcast)
   when built with -DGPUDL_MPI, otherwise over TCP: rank 0 listens at
   MASTER_PORT, the others connect to MASTER_ADDR:MASTER_PORT (retrying
   until rank 0 is up) and receive it, once both sides have proved that they
   know the job's token (HMAC-SHA-256 over the other side's fresh nonce; the
   id travels masked): GPUDL_DIST_TOKEN, else GPUDL_JOB_UID (a Kubernetes
   Job's uid, through the downward API), else the launcher's job id
   (TORCHELASTIC_RUN_ID, SLURM_JOB_ID + SLURM_STEP_ID, OMPI_MCA_orte_ess_jobid,
   PMIX_NAMESPACE); none: anyone may join (rank 0 says so on stderr). Rank 0
   serves every connection at once; one that does not prove the token, or
   says another WORLD_SIZE, is logged on stderr and dropped. Rank 0 listens
   on every IPv4 address, or at GPUDL_DIST_BIND_ADDR (an address, or
   MASTER_ADDR for its address), or at MASTER_ADDR when that is localhost or
   127.x.y.z. Launchers' job ids are not secrets: on an untrusted network set
   GPUDL_DIST_TOKEN from a secret (docs/security.md). The communicator itself is made at
   the first collective of a CUDA tensor (gdl_ddp_new's broadcast), which
   returns once every rank has made its own. gdl_fit's epoch figures under
   DDP are summed over MPI, or without MPI through NCCL. Builds:
     CPU, MPI:    mpicc -O2 -DGPUDL_MPI app.c -lm -pthread -o app
     GPU, NCCL:   nvcc -O3 -arch=sm_90 -DGPUDL_CUDA app.c gpudl_cuda.cu -lcublas -lcublasLt -lnccl -o app
     both (CPU tensors over MPI, CUDA tensors over NCCL, the id over MPI):
                  nvcc -O3 -arch=sm_90 -DGPUDL_CUDA -c gpudl_cuda.cu
                  mpicc -O2 -DGPUDL_MPI -DGPUDL_CUDA -c app.c
                  mpicc app.o gpudl_cuda.o -L/usr/local/cuda/lib64 -lcudart -lcublas -lcublasLt -lnccl -lstdc++ -lm \
                      -pthread -o app
   Launch (2 GPUs on one machine):
     mpirun -np 2 ./app                                         (MPI build)
     torchrun-style, no MPI: one process per GPU, e.g.
       for r in 0 1; do RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
                        MASTER_PORT=29500 ./app & done; wait
     srun -n 2 ./app        (MPI build; or set MASTER_ADDR/MASTER_PORT too)
   Without MPI, a job of several processes needs a GPU (NCCL) and its
   collectives of CPU tensors are refused (they say to build with
   -DGPUDL_MPI); without MPI or a GPU it is refused at gdl_dist_init. One
   process on a GPU goes through NCCL too (a communicator of one rank).

   A rank that stalls or dies: gpudl's waits for the other ranks last at
   most gdl_dist_timeout() seconds, like the timeout of PyTorch's
   init_process_group: GPUDL_DIST_TIMEOUT=<seconds> (read at gdl_dist_init;
   'inf': for ever), or gdl_dist_set_timeout, which wins over the variable
   from its first call on (a later gdl_dist_init still checks the variable
   but keeps the call's value); default 600 (PyTorch's for NCCL; tests use 1 or 2). Bounded:
   - with MPI, every collective of CPU tensors, gdl_ddp_backward's gradient
     all-reduces, gdl_dist_barrier, the meeting in gdl_dist_shutdown and the
     broadcast of NCCL's id at gdl_dist_init. The collectives first meet in a
     non-blocking barrier, then run MPI's blocking collective (faster than
     its non-blocking one; a failed call leaves its tensors as they were);
     gdl_ddp_backward's buckets are non-blocking all-reduces. Either wait
     polls MPI_Test (yielding the processor between tests for 0.1 s, then
     napping a millisecond); on timeout it returns -1 with an error naming
     the collective, the ranks that did not arrive (the waiting ranks ask
     each other where they are, for a quarter of the timeout, 0.5 to 5 s:
     those that answer are named as waiting, and in which collective), the
     timeout and the variable;
   - with NCCL (CUDA tensors), the TCP rendezvous without MPI (a rank that
     never comes: an error naming MASTER_ADDR, MASTER_PORT and the missing
     rank; a different WORLD_SIZE: that rank's error says so at once, rank 0
     names it at its timeout), and every place
     where the host waits for NCCL's queued collectives: gdl_dist_barrier,
     gdl_dist_shutdown, gdl_fit's reads of its loss and accuracy sums (each
     epoch's end, a checkpoint, the progress bar) and its agreements between
     ranks (resume, checkpoint saves). A peer that left or never comes: the
     communicator is aborted, and every later collective fails.
   Not bounded: collectives of CUDA tensors (gdl_dist_all_reduce...,
   gdl_ddp_backward's buckets) do not wait on the host; an error of NCCL
   shows at the next collective, barrier or shutdown, and a program's own
   read of a CUDA tensor after them (gdl_item, gdl_to) waits for the device
   without a limit: call gdl_dist_barrier first where a peer may be gone.
   NCCL's own ncclCommInitRank (at the first collective of CUDA tensors)
   waits for every rank without a limit of gpudl's (NCCL's non-blocking
   mode, which would bound it, makes every later NCCL call a poll; not done
   yet); a rank that never comes past the rendezvous hangs the others there.
   gdl_fit returns the
   error of a wait that timed out. The library never exits: the process
   group is unusable after a timeout or an MPI error (later collectives fail
   at once, no further MPI call is made, gdl_dist_shutdown skips MPI's
   finalisation, which would wait for ever), so the program should end with
   a non-zero status: the launcher (mpirun, srun, torchrun) then ends the
   other ranks. A rank killed outright usually ends the job sooner, by the
   launcher's teardown (mpirun's, when a rank exits on a signal).

   gdl_fit under DDP (gdl_fit_opts.ddp) with checkpoint_every and resume:
   rank 0 writes checkpoint_dir/gdl_fit.safetensors (atomically) with the
   model, the optimizer's state and step, the scheduler, rank 0's generator,
   the epoch, the batch, the loader's epoch, the epoch's running loss and
   accuracy summed over every rank, the world size (the loader's
   num_replicas) and the batch size per rank; no rank goes on before the file
   is whole, and a failed save fails every rank. checkpoint_dir must be the
   same directory for every rank (one machine, or a shared file system). On
   resume rank 0 says whether a checkpoint is there; every rank loads it, all
   or none (checked everywhere before anything changes), and the run goes on
   as the uninterrupted one would, bit for bit on every rank (per-rank random
   streams, e.g. dropout seeded by rank, restart from rank 0's generator).
   Elastic restarts (torchrun's, or the job started again on fewer or more
   ranks, or with another batch size per rank, one process too): the
   checkpoint's position is counted in samples of the epoch, batch x batch
   size x world size, and the sampler shards the rest of the epoch for the
   new world size. A checkpoint at an epoch's end always
   resumes; one mid-epoch needs its samples to be a whole number of the new
   steps (batch size x world size), else the error says so. With the same
   samples per step (2 ranks x 32 then 1 x 64) the run continues on the same
   global batches: equal to the uninterrupted run to rounding (the mean of two
   half-batch means against one mean: about 1e-7 relative), not bit for bit.
   ------------------------------------------------------------------------- */

typedef enum gdl_dist_op { GDL_SUM = 0, GDL_AVG = 1 } gdl_dist_op;

/* 0 / -1 + error. Once per process: a second call is an error (MPI cannot start twice). */
GPUDL_API int gdl_dist_init(void);
GPUDL_API int gdl_dist_is_initialized(void);
GPUDL_API int gdl_dist_rank(void);       /* 0 when not initialised */
GPUDL_API int gdl_dist_world_size(void); /* 1 when not initialised */
GPUDL_API int gdl_dist_local_rank(void); /* the rank among this machine's processes; 0 */
/* "torchrun", "mpirun", "srun", "k8s-indexed-job", "pytorchjob", "kubeflow-pet", "mpi" (another MPI launcher),
   "single" */
GPUDL_API const char *gdl_dist_launcher(void);
/* cuda:(local rank mod the GPUs this process sees) where CUDA has a GPU, else cpu */
GPUDL_API gdl_device gdl_dist_device(void);
GPUDL_API int gdl_dist_barrier(void); /* 0 / -1 */
/* How long a wait for the other ranks lasts, in seconds (what is bounded: src/api/dist.h above): what
   gdl_dist_set_timeout set last once it has been called (> 0; INFINITY waits for ever), else
   GPUDL_DIST_TIMEOUT as it was at the last gdl_dist_init ('inf' too), else 600 (PyTorch's default for
   NCCL). 0 / -1 + error. */
GPUDL_API int gdl_dist_set_timeout(double seconds);
GPUDL_API double gdl_dist_timeout(void);
/* In place, on every rank: t = sum (or mean) over the ranks of t. f32 or i32 (GDL_SUM only); CPU (MPI) or
   CUDA (NCCL, ordered on the device's streams). */
GPUDL_API int gdl_dist_all_reduce(gdl_tensor *t, gdl_dist_op op);
/* t on every rank = t of rank root. */
GPUDL_API int gdl_dist_broadcast(gdl_tensor *t, int root);
/* out (world_size x in's elements, same dtype) = every rank's in, in rank order. */
GPUDL_API int gdl_dist_all_gather(gdl_tensor *out, const gdl_tensor *in);
/* out = rank r's slice of the sum (or mean) over ranks of in (world_size x out's elements). */
GPUDL_API int gdl_dist_reduce_scatter(gdl_tensor *out, const gdl_tensor *in, gdl_dist_op op);
GPUDL_API void gdl_dist_shutdown(void);
/* Slurm's host list syntax, as `scontrol show hostnames` expands it: names separated by commas, each with
   any number of bracket groups of numbers and ranges, zero-padded to the lower bound's width, the last
   group varying fastest ("node[01-03,07],gpu-a[1-2]": node01 node02 node03 node07 gpu-a1 gpu-a2). Returns
   the number of hosts of list, with host n (0-based) in out (len bytes) when n is below it; -1 + error
   naming what is wrong and where (unclosed or nested brackets, a range going down, an empty name...). */
GPUDL_API int64_t gdl_hostlist_host(const char *list, int64_t n, char *out, size_t len);

/* DistributedDataParallel over a module whose tensors are on the CPU (MPI) or on one GPU (NCCL): the
   parameters and buffers are broadcast from rank 0 when it is made; the
   gradients are grouped in buckets (the parameters in reverse order, the
   first bucket first_bucket_mb, the others bucket_cap_mb, as PyTorch), and
   each bucket's all-reduce starts as soon as its gradients are complete,
   while backward goes on; gdl_ddp_backward returns with every gradient the
   mean over the ranks. */
typedef struct gdl_ddp gdl_ddp;
typedef struct gdl_ddp_opts {
    double bucket_cap_mb;   /* default 25 */
    double first_bucket_mb; /* default 1 */
    int broadcast_buffers;  /* default 1: buffers (BatchNorm's running statistics) from rank 0 at each forward */
} gdl_ddp_opts;
GPUDL_API gdl_ddp_opts gdl_ddp_defaults(void);
GPUDL_API gdl_ddp *gdl_ddp_new(gdl_module *m, const gdl_ddp_opts *o); /* NULL + error */
GPUDL_API gdl_tensor *gdl_ddp_forward(gdl_ddp *d, gdl_tensor *x);
GPUDL_API int gdl_ddp_backward(gdl_ddp *d, gdl_tensor *loss); /* 0 / -1 */
/* on != 0: backward accumulates the local gradients without communicating (PyTorch's no_sync, for
   gradient accumulation); the next backward with it off averages what was accumulated. */
GPUDL_API void gdl_ddp_set_no_sync(gdl_ddp *d, int on);
GPUDL_API int gdl_ddp_num_buckets(const gdl_ddp *d);
GPUDL_API gdl_module *gdl_ddp_module(const gdl_ddp *d); /* the module it wraps */
GPUDL_API void gdl_ddp_free(gdl_ddp *d);

