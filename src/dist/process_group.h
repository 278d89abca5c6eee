/* src/dist/process_group.h — the process group: the launcher's environment
   read, gdl_dist_init / shutdown, ranks, timeouts. */

/* The communicator of CUDA device dev, made at the first collective on it (NCCL's id was handed round
   at init). The GPU backend, made current; NULL + error. */
static const gdl_backend *gdl__dist_comm(const char *op, gdl_device dev) {
    const gdl_backend *be = gdl__be(op, dev);
    if (!be) return NULL;
    if (gdl__dist.comm_dev == dev.index + 1) return be;
    if (gdl__dist.comm_dev) {
        gdl__set_error("%s: the job's NCCL communicator is on cuda:%d, the tensor on %s: one device per process", op,
                       gdl__dist.comm_dev - 1, gdl_device_str(dev));
        return NULL;
    }
    if (!gdl__dist.have_id) { /* one process: its own id */
        if (gdl__dist.world > 1) {
            gdl__set_error("%s: no NCCL id was handed round at gdl_dist_init (no GPU then?)", op);
            return NULL;
        }
        if (be->rt.comm_id(gdl__dist.id, GDL_COMM_ID_BYTES) < 0) return NULL;
        gdl__dist.have_id = 1;
    }
    if (be->rt.comm_init(dev.index, gdl__dist.id, gdl__dist.world, gdl__dist.rank) < 0) return NULL;
    gdl__dist.comm_dev = dev.index + 1;
    return be;
}

#ifdef GPUDL_MPI
static int gdl__dist_wait(const char *op, const char *what, MPI_Request *req);
#endif

/* The host is about to read the device (which waits for the compute stream, and so for the queued NCCL
   collectives it joined): the communication stream is waited for first, within the timeout, so that a
   peer that never comes gives an error rather than a read that waits for ever. 0 without a communicator. */
static int gdl__dist_settle(const char *op) {
    const gdl_backend *be;
    if (!gdl__dist.comm_dev || gdl__dist.world < 2) return 0;
    be = gdl__dist_comm(op, gdl_cuda(gdl__dist.comm_dev - 1));
    return be ? be->rt.comm_sync(0, gdl_dist_timeout()) : -1;
}

/* src/dist/cluster.h: an Indexed Job's, a PyTorchJob's or Kubeflow's PET_* rank and size (1), none (0), -1 */
static int gdl__cluster_env(const char *op, int *rank, int *world, int *local, const char **launcher);

/* gdl_dist_init's environment: the launcher's rank, world size and local rank (none: one process), and
   GPUDL_DIST_TIMEOUT. */
static int gdl__dist_env(const char *op, int *rank, int *world, int *local, const char **launcher) {
    /* the launchers' variables: rank, world size, local rank */
    static const char *const L[3][4] = {
        {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
        {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
        {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};
    const char *v;
    int k = gdl__cluster_env(op, rank, world, local, launcher); /* src/dist/cluster.h: Kubernetes' */
    if (k < 0) return -1;
    for (k = k ? 3 : 0; k < 3; k++) {
        int i;
        if (!getenv(L[k][1]) && !getenv(L[k][2])) continue;
        for (i = 1; i < 4; i++)
            if (!getenv(L[k][i])) {
                gdl__set_error("%s: %s is set (%s) but %s is not", op, getenv(L[k][1]) ? L[k][1] : L[k][2],
                               L[k][0], L[k][i]);
                return -1;
            }
        *launcher = L[k][0];
        if (gdl__env_int(op, *launcher, L[k][2], 1, 1L << 20, world) < 0 ||
            gdl__env_int(op, *launcher, L[k][1], 0, *world - 1, rank) < 0 ||
            gdl__env_int(op, *launcher, L[k][3], 0, *world - 1, local) < 0)
            return -1;
        break;
    }
    if ((v = getenv("GPUDL_DIST_TIMEOUT")) != NULL) {
        char *end;
        double t = strtod(v, &end);
        /* decimal digits (strtod also takes spaces, a sign, hex), or inf */
        if (!v[0] || *end || !(t > 0) || (strspn(v, "0123456789.eE-") != strlen(v) && strcmp(v, "inf") != 0)) {
            gdl__set_error("%s: GPUDL_DIST_TIMEOUT='%s' is not a number of seconds > 0 (how long a collective "
                           "waits for the other ranks; 'inf': for ever)", op, v);
            return -1;
        }
        if (!gdl__dist_timeout_called) gdl__dist_timeout_s = t;
    }
    return 0;
}

#ifdef GPUDL_MPI
/* MPI started (unless the program did) and its two communicators made; MPI's rank and size checked against
   the launcher's (or taken, with another MPI launcher). */
static int gdl__dist_mpi_start(const char *op, int *rank, int *world, const char **launcher) {
    int flag = 0, rc, mr, ms;
    if (MPI_Finalized(&flag) == MPI_SUCCESS && flag) {
        gdl__set_error("%s: MPI was finalised (gdl_dist_shutdown): it cannot start again in this process", op);
        return -1;
    }
    if ((rc = MPI_Initialized(&flag)) != MPI_SUCCESS) return gdl__mpi_fail(op, "MPI_Initialized", rc);
    if (!flag) {
        int provided;
        if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS)
            return gdl__mpi_fail(op, "MPI_Init_thread", rc);
        gdl__dist.mpi_ours = 1;
    }
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &gdl__dist.comm)) != MPI_SUCCESS)
        return gdl__mpi_fail(op, "MPI_Comm_dup", rc);
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &gdl__dist.ctl)) != MPI_SUCCESS) {
        MPI_Comm_free(&gdl__dist.comm);
        return gdl__mpi_fail(op, "MPI_Comm_dup", rc);
    }
    MPI_Comm_set_errhandler(gdl__dist.comm, MPI_ERRORS_RETURN); /* errors come back; nothing exits */
    MPI_Comm_set_errhandler(gdl__dist.ctl, MPI_ERRORS_RETURN);
    MPI_Comm_rank(gdl__dist.comm, &mr);
    MPI_Comm_size(gdl__dist.comm, &ms);
    if (!strcmp(*launcher, "single")) { /* another MPI launcher (mpiexec of MPICH...): MPI's word */
        *launcher = ms > 1 ? "mpi" : "single";
        *rank = mr;
        *world = ms;
    } else if (mr != *rank || ms != *world) {
        gdl__set_error("%s: the environment (%s) says rank %d of %d but MPI says rank %d of %d: were the "
                       "processes started by another launcher than the one whose variables are set?",
                       op, *launcher, *rank, *world, mr, ms);
        MPI_Comm_free(&gdl__dist.comm);
        MPI_Comm_free(&gdl__dist.ctl);
        return -1;
    }
    return 0;
}
#endif

/* NCCL's id, for collectives of CUDA tensors: made by rank 0, handed round over MPI or the rendezvous
   (gdl__dist.have_id: every rank has it). */
static int gdl__dist_share_id(const char *op, int rank, int world) {
    gdl__dist.have_id = 0;
    gdl__dist.comm_dev = 0;
#ifdef GPUDL_MPI
    if (world > 1) {
        /* rank 0 always broadcasts, with the id a status word (0: no GPU backend there, 1: the id, 2: making it
           failed), and every rank waits with the timeout: no rank is left waiting for a broadcast that never
           comes, whichever ranks have GPUs. A rank without one, or all without an id, have no NCCL (CUDA
           collectives fail then, saying so); a failed id fails every rank's init. */
        const gdl_backend *be = gdl__dist_gpu();
        unsigned char buf[1 + GDL_COMM_ID_BYTES];
        MPI_Request q;
        int rc;
        char keep[sizeof gdl__err];
        memset(buf, 0, sizeof buf);
        if (rank == 0 && be) buf[0] = be->rt.comm_id(buf + 1, GDL_COMM_ID_BYTES) == 0 ? 1 : 2;
        memcpy(keep, gdl__err, sizeof keep);
        gdl__dist.rank = rank, gdl__dist.world = world; /* for the timed wait's report */
        gdl__dist.seq = 0;
        rc = MPI_Ibcast(buf, (int)sizeof buf, MPI_BYTE, 0, gdl__dist.comm, &q);
        if (rc != MPI_SUCCESS) return gdl__mpi_fail(op, "MPI_Ibcast of NCCL's id", rc);
        if (gdl__dist_wait(op, "the broadcast of NCCL's id from rank 0", &q) < 0) return -1;
        if (buf[0] == 2) {
            if (rank == 0) {
                char why[sizeof gdl__err];
                memcpy(why, keep, sizeof why);
                gdl__set_error("%s: rank 0 could not make NCCL's id: %s", op, why);
            } else {
                gdl__set_error("%s: rank 0 could not make NCCL's id (its own error says why)", op);
            }
            return -1;
        }
        if (buf[0] == 1 && be) {
            memcpy(gdl__dist.id, buf + 1, GDL_COMM_ID_BYTES);
            gdl__dist.have_id = 1;
        }
    }
#else
    if (world > 1 && gdl__dist_gpu()) {
        const gdl_backend *be = gdl__dist_gpu();
        if (rank == 0 && be->rt.comm_id(gdl__dist.id, GDL_COMM_ID_BYTES) < 0) return -1;
#if defined(GDL__HAVE_RDV)
        if (gdl__rendezvous(op, rank, world, gdl__dist.id, gdl_dist_timeout()) < 0) return -1;
#else
        gdl__set_error("%s: %d processes without MPI need the TCP rendezvous (MASTER_ADDR, MASTER_PORT), which this "
                       "build lacks: no sockets here (on Windows: <winsock.h> was included before gpudl.h's "
                       "implementation; include <winsock2.h> first, or define WIN32_LEAN_AND_MEAN before <windows.h>)",
                       op, world);
        return -1;
#endif
        gdl__dist.have_id = 1;
    }
#endif
    return 0;
}

GPUDL_API int gdl_dist_init(void) {
    static const char op[] = "gdl_dist_init";
    int rank = 0, world = 1, local = 0;
    const char *launcher = "single";
    if (gdl__dist.init) {
        gdl__set_error("%s: already initialised (rank %d of %d)", op, gdl__dist.rank, gdl__dist.world);
        return -1;
    }
    if (gdl__dist_env(op, &rank, &world, &local, &launcher) < 0) return -1;
#ifdef GPUDL_MPI
    if (gdl__dist_mpi_start(op, &rank, &world, &launcher) < 0) return -1;
#else
#ifdef GDL__OS_NO_MPI
    if (world > 1 && !gdl__dist_gpu()) {
        gdl__set_error("%s: %d processes (%s): %s; this build is without a communication backend", op, world,
                       launcher, GDL__OS_NO_MPI);
        return -1;
    }
#endif
    if (world > 1 && !gdl__dist_gpu()) {
        gdl__set_error("%s: %d processes (%s), but this build has no communication backend: build with "
                       "-DGPUDL_MPI (mpicc ...), or with GPUDL_CUDA and NCCL on a machine with GPUs", op, world,
                       launcher);
        return -1;
    }
#endif
    if (gdl__dist_share_id(op, rank, world) < 0) goto fail;
    gdl__dist.rank = rank;
    gdl__dist.world = world;
    gdl__dist.local = local;
    gdl__dist.launcher = launcher;
    gdl__dist.seq = 0;
    gdl__dist.broken = 0;
    gdl__dist.init = 1;
    return 0;
fail:
#ifdef GPUDL_MPI
    /* no MPI_Finalize: it waits for every rank without a limit, and another may have failed otherwise (the
       launcher ends the job when the process exits) */
    MPI_Comm_free(&gdl__dist.comm);
    MPI_Comm_free(&gdl__dist.ctl);
#endif
    gdl__dist.rank = 0, gdl__dist.world = 0, gdl__dist.broken = 0, gdl__dist.have_id = 0;
    return -1;
}

GPUDL_API int gdl_dist_is_initialized(void) { return gdl__dist.init; }
GPUDL_API int gdl_dist_rank(void) { return gdl__dist.rank; }
GPUDL_API int gdl_dist_world_size(void) { return gdl__dist.init ? gdl__dist.world : 1; }
GPUDL_API int gdl_dist_local_rank(void) { return gdl__dist.local; }
GPUDL_API const char *gdl_dist_launcher(void) { return gdl__dist.init ? gdl__dist.launcher : "single"; }

GPUDL_API gdl_device gdl_dist_device(void) {
    int n = gdl_cuda_device_count();
    return n > 0 ? gdl_cuda(gdl__dist.local % n) : gdl_cpu();
}

#ifdef GPUDL_MPI
static int gdl__dist_arrive(const char *op, const char *what);
static int gdl__dist_meet(void) {
    return gdl__dist_arrive("gdl_dist_shutdown", "the meeting of every rank before MPI_Finalize");
}
#endif

GPUDL_API void gdl_dist_shutdown(void) {
    if (gdl__dist.comm_dev) { /* queued collectives end (or time out) before the communicator goes */
        const gdl_backend *be = gdl__dist_gpu();
        if (be) {
            char keep[sizeof gdl__err];
            memcpy(keep, gdl__err, sizeof keep); /* shutdown reports nothing: the caller's last error stays */
            (void)gdl__be_lookup("gdl_dist_shutdown", gdl_cuda(gdl__dist.comm_dev - 1));
            (void)be->rt.comm_sync(0, gdl_dist_timeout());
            be->rt.comm_destroy();
            memcpy(gdl__err, keep, sizeof keep);
        }
        gdl__dist.comm_dev = 0;
    }
    gdl__dist.have_id = 0;
#ifdef GPUDL_MPI
    /* MPI_Finalize waits for every rank without a limit: the ranks meet first, within the timeout, and
       after a failure (or when one does not come) MPI is left as it is; the launcher ends the job when
       the process exits */
    if (gdl__dist.init && !gdl__dist.broken && (gdl__dist.world == 1 || gdl__dist_meet() == 0)) {
        MPI_Comm_free(&gdl__dist.comm);
        MPI_Comm_free(&gdl__dist.ctl);
        if (gdl__dist.mpi_ours) MPI_Finalize();
        gdl__dist.mpi_ours = 0;
    }
#endif
    gdl__dist.init = 0;
    gdl__dist.broken = 0;
    gdl__dist.rank = gdl__dist.local = 0;
}

GPUDL_API int gdl_dist_set_timeout(double seconds) {
    if (!(seconds > 0)) {
        gdl__set_error("gdl_dist_set_timeout: %g is not a number of seconds > 0 (INFINITY: wait for ever)", seconds);
        return -1;
    }
    gdl__dist_timeout_s = seconds;
    gdl__dist_timeout_called = 1;
    return 0;
}

GPUDL_API double gdl_dist_timeout(void) { return gdl__dist_timeout_s > 0 ? gdl__dist_timeout_s : GDL__DIST_DEFAULT_TIMEOUT; }

#ifdef GPUDL_MPI
enum { GDL__TAG_ASK = 1, GDL__TAG_ANSWER = 2 };

/* An MPI call failed: nothing more can be trusted of the communicator. */
