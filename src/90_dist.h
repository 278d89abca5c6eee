/* ---------------------------------------------------------------------------
   [impl-dist]   The launcher's environment and the collectives (MPI).
   ------------------------------------------------------------------------- */

#ifdef GPUDL_MPI
#include <mpi.h>
#endif

#define GDL__DIST_DEFAULT_TIMEOUT 600.0 /* seconds, PyTorch's default for NCCL process groups */

static struct {
    int init, rank, world, local;
    const char *launcher;
    int64_t seq;     /* collectives this rank has started: the ranks are in step when theirs agree */
    int broken;      /* a collective timed out or failed: no further MPI call is made */
    char broken_why[160];
    int have_id;         /* NCCL's id of the job was handed round at init */
    unsigned char id[GDL_COMM_ID_BYTES];
    int comm_dev;        /* the communicator's CUDA device + 1; 0: none made yet */
#ifdef GPUDL_MPI
    MPI_Comm comm;   /* a duplicate of MPI_COMM_WORLD whose errors return */
    MPI_Comm ctl;    /* another: "where are you?" between waiting ranks, never mixed with the data */
    int mpi_ours;    /* gdl_dist_init started MPI: shutdown ends it */
#endif
} gdl__dist; /* zero: not initialised (rank 0 of 1, "single") */

static double gdl__dist_timeout_s; /* 0: GDL__DIST_DEFAULT_TIMEOUT */
static int gdl__dist_timeout_called; /* gdl_dist_set_timeout was called: GPUDL_DIST_TIMEOUT no longer counts */

/* The variable `name` as a whole number in [lo, hi]: 1 set, 0 unset, -1 bad. */
static int gdl__env_int(const char *op, const char *launcher, const char *name, long lo, long hi, int *out) {
    const char *v = getenv(name);
    char *end;
    long x;
    if (!v) return 0;
    x = strtol(v, &end, 10);
    if (!v[0] || *end || x < lo || x > hi) {
        gdl__set_error("%s: %s='%s' (%s) is not a whole number in [%ld, %ld]", op, name, v, launcher, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 1;
}

#ifdef GPUDL_MPI
static int gdl__mpi_fail(const char *op, const char *call, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    gdl__set_error("%s: %s failed: %s", op, call, msg);
    return -1;
}
#endif

/* The GPU backend that carries collectives of CUDA tensors (NCCL), NULL when this build or machine has none. */
static const gdl_backend *gdl__dist_gpu(void) {
    return gdl__cuda_registry && gdl_cuda_device_count() > 0 ? gdl__cuda_registry->backend() : NULL;
}

/* ---- the rendezvous without MPI: NCCL's id from rank 0 over TCP, as torchrun's
   env:// store. Rank 0 listens at MASTER_PORT; every other rank connects to
   MASTER_ADDR:MASTER_PORT (retrying while rank 0 is not up yet), says its rank
   and world size, and receives the id once every rank has come. Each side
   gives up after the timeout with an error naming the address. */
#if !defined(GPUDL_MPI) && defined(GDL__OS_SOCKETS)
#define GDL__HAVE_RDV 1

enum { GDL__RDV_HELLO = 12, GDL__RDV_REPLY = 12 + GDL_COMM_ID_BYTES };

static void gdl__put32(unsigned char *b, uint32_t v) {
    b[0] = (unsigned char)(v >> 24), b[1] = (unsigned char)(v >> 16), b[2] = (unsigned char)(v >> 8),
    b[3] = (unsigned char)v;
}
static uint32_t gdl__get32(const unsigned char *b) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/* gdl__rendezvous on rank 0: waits for every other rank at MASTER_PORT (until deadline), then sends each the id. */
static int gdl__rdv_serve(const char *op, int world, const unsigned char *id, double timeout, double deadline,
                          const char *addr, long port) {
    unsigned char hello[GDL__RDV_HELLO], reply[GDL__RDV_REPLY];
    int got = 0, i, rc = -1;
    gdl__sock lfd, *fds;
    char *seen;
    if (!(fds = (gdl__sock *)GPUDL_MALLOC(sizeof(gdl__sock) * (size_t)world)) ||
        !(seen = (char *)GPUDL_MALLOC((size_t)world))) {
        GPUDL_FREE(fds);
        gdl__set_error("%s: out of memory", op);
        return -1;
    }
    memset(seen, 0, (size_t)world);
    for (i = 0; i < world; i++) fds[i] = GDL__SOCK_NONE; /* by rank */
    if (gdl__os_sock_listen(&lfd, (int)port, world) != 0) {
        gdl__set_error("%s: rank 0 cannot listen at MASTER_PORT=%ld: %s", op, port, gdl__os_sock_strerror(errno));
        GPUDL_FREE(fds), GPUDL_FREE(seen);
        return -1;
    }
    while (got < world - 1) {
        gdl__sock fd = GDL__SOCK_NONE;
        int r, w;
        if (gdl_now() >= deadline) {
            char missing[200];
            size_t k = 0;
            for (i = 1; i < world && k + 12 < sizeof missing; i++)
                if (!seen[i]) k += (size_t)snprintf(missing + k, sizeof missing - k, "%s%d", k ? ", " : "", i);
            gdl__set_error("%s: rank 0 waited %g s (GPUDL_DIST_TIMEOUT) at MASTER_ADDR=%s MASTER_PORT=%ld: %d of "
                           "%d ranks came; missing: rank %s", op, timeout, addr, port, got + 1, world, missing);
            goto done;
        }
        if (gdl__os_sock_accept(lfd, &fd, deadline) != 0) continue;
        if (gdl__os_sock_io(fd, hello, sizeof hello, 0, gdl_now() + 10 < deadline ? gdl_now() + 10 : deadline) < 0 ||
            memcmp(hello, "gdlR", 4) != 0) {
            gdl__os_sock_close(fd); /* not one of ours (a port scan, a stale job): wait on */
            continue;
        }
        r = (int)gdl__get32(hello + 4), w = (int)gdl__get32(hello + 8);
        if (w != world || r <= 0 || r >= world) {
            memset(reply, 0, sizeof reply);
            gdl__put32(reply, 1);
            gdl__put32(reply + 4, (uint32_t)world);
            (void)gdl__os_sock_io(fd, reply, sizeof reply, 1, gdl_now() + 1);
            gdl__os_sock_close(fd);
            if (w != world) {
                gdl__set_error("%s: rank %d says WORLD_SIZE=%d, rank 0 says %d (MASTER_ADDR=%s MASTER_PORT=%ld)",
                               op, r, w, world, addr, port);
                goto done;
            }
            continue; /* no rank of this job (its launcher checks RANK < WORLD_SIZE): wait on */
        }
        if (seen[r]) { /* a rank that came again (restarted): its newer connection is the one to answer */
            gdl__os_sock_close(fds[r]);
        } else {
            seen[r] = 1;
            got++;
        }
        fds[r] = fd;
        if (got == world - 1) /* a rank that went away since it came (EOF: readable) comes again */
            for (i = 1; i < world; i++)
                if (gdl__os_sock_readable(fds[i])) {
                    gdl__os_sock_close(fds[i]);
                    fds[i] = GDL__SOCK_NONE, seen[i] = 0, got--;
                }
    }
    memset(reply, 0, sizeof reply);
    gdl__put32(reply + 4, (uint32_t)world);
    memcpy(reply + 12, id, GDL_COMM_ID_BYTES);
    rc = 0;
    for (i = 1; i < world; i++)
        if (gdl__os_sock_io(fds[i], reply, sizeof reply, 1, deadline) < 0 && rc == 0) {
            gdl__set_error("%s: rank 0 could not send the job's id to rank %d: %s", op, i,
                           gdl__os_sock_strerror(errno));
            rc = -1;
        }
done:
    for (i = 1; i < world; i++)
        if (fds[i] != GDL__SOCK_NONE) gdl__os_sock_close(fds[i]);
    gdl__os_sock_close(lfd);
    GPUDL_FREE(fds), GPUDL_FREE(seen);
    return rc;
}

/* gdl__rendezvous on the other ranks: reaches rank 0 (until deadline), says who it is, receives the id. */
static int gdl__rdv_join(const char *op, int rank, int world, unsigned char *id, double timeout, double deadline,
                         const char *addr, long port) {
    unsigned char hello[GDL__RDV_HELLO], reply[GDL__RDV_REPLY];
    gdl__sock fd = GDL__SOCK_NONE;
    int rc, e = 0;
    while ((rc = gdl__os_sock_connect(&fd, addr, (int)port, deadline)) != 0) { /* rank 0 may not listen yet */
        e = rc == -2 ? 0 : errno;
        if (gdl_now() + 0.1 > deadline) {
            gdl__set_error("%s: rank %d could not reach rank 0 at MASTER_ADDR=%s MASTER_PORT=%ld within %g s "
                           "(GPUDL_DIST_TIMEOUT): %s", op, rank, addr, port, timeout,
                           rc == -2 ? "MASTER_ADDR does not resolve to an address"
#ifdef GDL__OS_SOCK_NUMERIC_ONLY
                                      " (this build takes numeric IPv4 addresses only: define _POSIX_C_SOURCE "
                                      "200112L or more for host names)"
#endif
                                    : gdl__os_sock_strerror(e));
            return -1;
        }
        gdl__os_sleep_ms(100);
    }
    memcpy(hello, "gdlR", 4);
    gdl__put32(hello + 4, (uint32_t)rank);
    gdl__put32(hello + 8, (uint32_t)world);
    if (gdl__os_sock_io(fd, hello, sizeof hello, 1, deadline) < 0 ||
        gdl__os_sock_io(fd, reply, sizeof reply, 0, deadline) < 0) {
        e = errno;
        gdl__os_sock_close(fd);
        gdl__set_error("%s: rank %d reached MASTER_ADDR=%s MASTER_PORT=%ld but got no answer within %g s "
                       "(GPUDL_DIST_TIMEOUT): %s", op, rank, addr, port, timeout,
                       e == EPIPE ? "rank 0 gave up (some rank never came)" : gdl__os_sock_strerror(e));
        return -1;
    }
    gdl__os_sock_close(fd);
    if (gdl__get32(reply) != 0) {
        gdl__set_error("%s: rank 0 at MASTER_ADDR=%s MASTER_PORT=%ld refused rank %d: it says WORLD_SIZE=%u, this "
                       "rank %d", op, addr, port, rank, gdl__get32(reply + 4), world);
        return -1;
    }
    memcpy(id, reply + 12, GDL_COMM_ID_BYTES);
    return 0;
}

/* [impl-cluster]: MASTER_ADDR / MASTER_PORT, or what Kubeflow or srun's node list give ("" unset); 0 / -1 */
static int gdl__cluster_master(const char *op, char *addr, size_t alen, char *port, size_t plen);

/* Rank 0 hands `id` to every rank; the others receive it. 0 / -1 + error naming MASTER_ADDR, MASTER_PORT. */
static int gdl__rendezvous(const char *op, int rank, int world, unsigned char *id, double timeout) {
    char addr[256], ps[32], *end;
    long port;
    double deadline = gdl_now() + timeout;
    if (gdl__cluster_master(op, addr, sizeof addr, ps, sizeof ps) < 0) return -1;
    if (!addr[0] || !ps[0]) {
        gdl__set_error("%s: %s is not set: the %d processes of a job without MPI meet at MASTER_ADDR:MASTER_PORT "
                       "(rank 0's host and a free port, as torchrun sets them)", op, !addr[0] ?
                       "MASTER_ADDR" : "MASTER_PORT", world);
        return -1;
    }
    port = strtol(ps, &end, 10);
    if (!ps[0] || *end || port < 1 || port > 65535) {
        gdl__set_error("%s: MASTER_PORT='%s' is not a port number in [1, 65535]", op, ps);
        return -1;
    }
    return rank == 0 ? gdl__rdv_serve(op, world, id, timeout, deadline, addr, port)
                     : gdl__rdv_join(op, rank, world, id, timeout, deadline, addr, port);
}
#endif

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
        if (be->comm_id(gdl__dist.id, GDL_COMM_ID_BYTES) < 0) return NULL;
        gdl__dist.have_id = 1;
    }
    if (be->comm_init(dev.index, gdl__dist.id, gdl__dist.world, gdl__dist.rank) < 0) return NULL;
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
    return be ? be->comm_sync(0, gdl_dist_timeout()) : -1;
}

/* [impl-cluster]: an Indexed Job's, a PyTorchJob's or Kubeflow's PET_* rank and size (1), none (0), -1 */
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
    int k = gdl__cluster_env(op, rank, world, local, launcher); /* [impl-cluster]: Kubernetes' */
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
        if (!v[0] || *end || !(t > 0)) {
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
        if (rank == 0 && be) buf[0] = be->comm_id(buf + 1, GDL_COMM_ID_BYTES) == 0 ? 1 : 2;
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
        if (rank == 0 && be->comm_id(gdl__dist.id, GDL_COMM_ID_BYTES) < 0) return -1;
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
            (void)be->comm_sync(0, gdl_dist_timeout());
            be->comm_destroy();
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
static int gdl__dist_fail(const char *op, const char *call, int rc) {
    gdl__mpi_fail(op, call, rc);
    gdl__dist.broken = 1;
    snprintf(gdl__dist.broken_why, sizeof gdl__dist.broken_why, "%s: %s failed", op, call);
    return -1;
}

/* Answers the ranks asking where this one is: its collective number and what it is. The answers go
   from a ring of buffers: an answer is short and sent eagerly, long gone before its buffer comes back. */
static void gdl__dist_answer(const char *what) {
    static char ring[16][128];
    static int next;
    int flag = 0;
    MPI_Status st;
    while (MPI_Iprobe(MPI_ANY_SOURCE, GDL__TAG_ASK, gdl__dist.ctl, &flag, &st) == MPI_SUCCESS && flag) {
        char c;
        char *a = ring[next++ & 15];
        MPI_Request r;
        if (MPI_Recv(&c, 1, MPI_CHAR, st.MPI_SOURCE, GDL__TAG_ASK, gdl__dist.ctl, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return;
        snprintf(a, sizeof ring[0], "%lld %s", (long long)gdl__dist.seq, what);
        if (MPI_Isend(a, (int)strlen(a) + 1, MPI_CHAR, st.MPI_SOURCE, GDL__TAG_ANSWER, gdl__dist.ctl, &r) ==
            MPI_SUCCESS)
            MPI_Request_free(&r);
    }
}

static void gdl__dist_nap(int ms) { gdl__os_sleep_ms(ms); }

/* The wait of `what` (a collective of op) ran out of time: ask the other ranks where they are for a
   moment (those waiting in a collective answer), and say who did not arrive. Always -1. */
static int gdl__dist_timed_out(const char *op, const char *what, double waited) {
    static const char ask = 1;
    int W = gdl__dist.world, me = gdl__dist.rank, r, heard = 0, nmiss = 0, nwait = 0;
    char *seen = (char *)GPUDL_MALLOC((size_t)W + 1);
    char miss[256] = "", wait[512] = "", buf[128];
    double t = gdl_dist_timeout(), grace = t / 4 < 0.5 ? 0.5 : t / 4 > 5 ? 5 : t / 4, until;
    size_t km = 0, kw = 0;
    gdl__dist.broken = 1;
    snprintf(gdl__dist.broken_why, sizeof gdl__dist.broken_why, "%s timed out: %s", op, what);
    if (seen) memset(seen, 0, (size_t)W + 1);
    for (r = 0; seen && r < W; r++)
        if (r != me) {
            MPI_Request q;
            if (MPI_Isend((void *)&ask, 1, MPI_CHAR, r, GDL__TAG_ASK, gdl__dist.ctl, &q) == MPI_SUCCESS)
                MPI_Request_free(&q);
        }
    until = MPI_Wtime() + grace;
    while (seen && heard < W - 1 && MPI_Wtime() < until) {
        int flag = 0;
        MPI_Status st;
        gdl__dist_answer(what); /* those that time out at the same moment ask too */
        if (MPI_Iprobe(MPI_ANY_SOURCE, GDL__TAG_ANSWER, gdl__dist.ctl, &flag, &st) != MPI_SUCCESS) break;
        if (!flag) {
            gdl__dist_nap(1);
            continue;
        }
        if (MPI_Recv(buf, (int)sizeof buf, MPI_CHAR, st.MPI_SOURCE, GDL__TAG_ANSWER, gdl__dist.ctl,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
            break;
        buf[sizeof buf - 1] = 0;
        if (st.MPI_SOURCE < 0 || st.MPI_SOURCE >= W || seen[st.MPI_SOURCE]) continue;
        seen[st.MPI_SOURCE] = 1;
        heard++;
        if (nwait++ < 4 && kw < sizeof wait) {
            char *sp = strchr(buf, ' ');
            long long s2 = strtoll(buf, NULL, 10);
            kw += (size_t)snprintf(wait + kw, sizeof wait - kw, "%srank %d waits in %s (%lld started%s)",
                                   kw ? "; " : "", st.MPI_SOURCE, sp ? sp + 1 : "?", s2,
                                   s2 == gdl__dist.seq ? "" : ": the ranks are out of step, they did not call "
                                                              "the same collectives in the same order");
        }
    }
    for (r = 0; seen && r < W; r++)
        if (r != me && !seen[r] && nmiss++ < 8 && km < sizeof miss)
            km += (size_t)snprintf(miss + km, sizeof miss - km, "%s%d", km ? ", " : "", r);
    if (nmiss > 8 && km < sizeof miss) snprintf(miss + km, sizeof miss - km, " and %d more", nmiss - 8);
    gdl__set_error("%s: %s: timed out after %.3g s waiting for the other ranks (this is rank %d of %d, %lld "
                   "collectives started): %s%s%s%s%s. Set GPUDL_DIST_TIMEOUT (seconds, now %g) or call "
                   "gdl_dist_set_timeout if a rank is only slow. The process group is unusable now: end this "
                   "process with a non-zero status and the launcher ends the others",
                   op, what, waited, me, W, (long long)gdl__dist.seq, nmiss > 1 ? "ranks " : nmiss ? "rank " : "",
                   miss, nmiss ? " did not arrive (no answer: stalled, dead, or busy outside gpudl's collectives)"
                               : seen ? "every other rank answered" : "(out of memory: the others were not asked)",
                   kw ? "; " : "", wait, t);
    GPUDL_FREE(seen);
    return -1;
}

/* Waits for req within the timeout, polling: a rank that stalls or dies makes this one fail with an error
   instead of hanging. For the first 0.1 s it tests and yields the processor by turns (as MPI's own waits
   spin: the latency stays; a rank sharing the core runs), then naps a millisecond between tests, answering
   the ranks that ask where this one is. 0 / -1. */
static int gdl__dist_wait(const char *op, const char *what, MPI_Request *req) {
    double t0 = MPI_Wtime(), limit = gdl_dist_timeout(), now;
    for (;;) {
        int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return gdl__dist_fail(op, "MPI_Test", rc);
        if (done) return 0;
        now = MPI_Wtime();
        if (now - t0 >= limit) return gdl__dist_timed_out(op, what, now - t0);
        if (now - t0 > 0.1) {
            gdl__dist_answer(what);
            gdl__dist_nap(1);
        } else {
            gdl__dist_nap(0);
        }
    }
}

/* Starting a collective: rc is what its MPI_I... call returned. Then the timed wait. 0 / -1. */
static int gdl__dist_run(const char *op, const char *call, const char *what, int rc, MPI_Request *req) {
    if (rc != MPI_SUCCESS) return gdl__dist_fail(op, call, rc);
    return gdl__dist_wait(op, what, req);
}

/* Before a blocking collective: every rank has arrived (a barrier within the timeout). MPI's blocking
   collectives are faster than its non-blocking ones (OpenMPI's tuned algorithms: about half the time of
   MPI_Iallreduce on 0.4 and 40 MB here), and once every rank is there they complete; a barrier of a
   few microseconds buys the timeout. 0 / -1. */
static int gdl__dist_arrive(const char *op, const char *what) {
    MPI_Request q;
    gdl__dist.seq++;
    return gdl__dist_run(op, "MPI_Ibarrier", what, MPI_Ibarrier(gdl__dist.comm, &q), &q);
}
#endif

/* Every collective first: initialised, and no earlier failure. */
static int gdl__dist_ready(const char *op) {
    if (!gdl__dist.init) {
        gdl__set_error("%s: call gdl_dist_init first", op);
        return -1;
    }
    if (gdl__dist.broken) {
        gdl__set_error("%s: the process group is unusable after an earlier failure (%s): end the process with a "
                       "non-zero status", op, gdl__dist.broken_why);
        return -1;
    }
    return 0;
}

/* A collective's tensor: initialised, a CPU tensor of f32 (or i32 where
   the op allows it). */
static int gdl__dist_check(const char *op, const char *what, const gdl_tensor *t, int i32_ok) {
    if (gdl__dist_ready(op) < 0) return -1;
    if (!t) {
        gdl__null_arg(op, what);
        return -1;
    }
    if (t->dtype != GDL_F32 && !(i32_ok && t->dtype == GDL_I32)) {
        gdl__set_error("%s: %s is %s %s; expected f32%s", op, what, gdl_dtype_name(t->dtype), gdl_shape_str(t),
                       i32_ok ? " or i32" : "");
        return -1;
    }
#ifndef GPUDL_MPI
    if (t->device.type == GDL_DEVICE_CPU && gdl__dist.world > 1) {
        gdl__set_error("%s: %s %s is on the CPU: collectives of CPU tensors among %d processes go through MPI: "
                       "build with -DGPUDL_MPI (mpicc ...); NCCL (this build's transport) takes CUDA tensors", op,
                       what, gdl_shape_str(t), gdl__dist.world);
        return -1;
    }
#endif
    return 0;
}

/* A collective of CUDA tensors: NCCL on the device's communication stream, ordered after the compute
   stream's work and before what the compute stream does next; the host does not wait. */
static int gdl__dist_nccl(const char *op, int kind, const gdl_tensor *send, gdl_tensor *recv, int64_t count,
                          int avg, int root) {
    const gdl_backend *be = gdl__dist_comm(op, recv->device);
    return be ? be->collective(kind, send->data, recv->data, count, recv->dtype, avg, root, 1) : -1;
}

#ifdef GPUDL_MPI
static MPI_Datatype gdl__mpi_type(gdl_dtype dt) {
    if (dt == GDL_I32) return MPI_INT;
    return sizeof(gdl_real) == sizeof(double) ? MPI_DOUBLE : MPI_FLOAT;
}
#endif

/* x /= world: the mean, as NCCL's and PyTorch's AVG (sum, then divide) */
static void gdl__dist_divide(gdl_tensor *t) {
    gdl_real *x = (gdl_real *)t->data, w = (gdl_real)gdl__dist.world;
    int64_t i;
    if (gdl__dist.world == 1) return;
    for (i = 0; i < t->numel; i++) x[i] /= w;
}

GPUDL_API int gdl_dist_all_reduce(gdl_tensor *t, gdl_dist_op op) {
    static const char fn[] = "gdl_dist_all_reduce";
    if (gdl__dist_check(fn, "t", t, op == GDL_SUM) < 0) return -1;
    if (op != GDL_SUM && op != GDL_AVG) {
        gdl__set_error("%s: op %d is neither GDL_SUM nor GDL_AVG", fn, (int)op);
        return -1;
    }
    if (t->numel > INT32_MAX) {
        gdl__set_error("%s: %s has more than 2^31 elements", fn, gdl_shape_str(t));
        return -1;
    }
    if (t->device.type == GDL_DEVICE_CUDA) return gdl__dist_nccl(fn, GDL_COLL_ALL_REDUCE, t, t, t->numel, op == GDL_AVG, 0);
#ifdef GPUDL_MPI
    if (gdl__dist.world > 1) {
        char what[96];
        int rc;
        snprintf(what, sizeof what, "the all-reduce of %s %s", gdl_dtype_name(t->dtype), gdl_shape_str(t));
        if (gdl__dist_arrive(fn, what) < 0) return -1;
        rc = MPI_Allreduce(MPI_IN_PLACE, t->data, (int)t->numel, gdl__mpi_type(t->dtype), MPI_SUM, gdl__dist.comm);
        if (rc != MPI_SUCCESS) return gdl__dist_fail(fn, "MPI_Allreduce", rc);
    }
#endif
    if (op == GDL_AVG) gdl__dist_divide(t);
    return 0;
}

GPUDL_API int gdl_dist_broadcast(gdl_tensor *t, int root) {
    static const char fn[] = "gdl_dist_broadcast";
    if (gdl__dist_check(fn, "t", t, 1) < 0) return -1;
    if (root < 0 || root >= gdl__dist.world) {
        gdl__set_error("%s: root %d is not a rank (world size %d)", fn, root, gdl__dist.world);
        return -1;
    }
    if (t->numel > INT32_MAX) {
        gdl__set_error("%s: %s has more than 2^31 elements", fn, gdl_shape_str(t));
        return -1;
    }
    if (t->device.type == GDL_DEVICE_CUDA) return gdl__dist_nccl(fn, GDL_COLL_BROADCAST, t, t, t->numel, 0, root);
#ifdef GPUDL_MPI
    if (gdl__dist.world > 1) {
        char what[96];
        int rc;
        snprintf(what, sizeof what, "the broadcast of %s %s from rank %d", gdl_dtype_name(t->dtype),
                 gdl_shape_str(t), root);
        if (gdl__dist_arrive(fn, what) < 0) return -1;
        rc = MPI_Bcast(t->data, (int)t->numel, gdl__mpi_type(t->dtype), root, gdl__dist.comm);
        if (rc != MPI_SUCCESS) return gdl__dist_fail(fn, "MPI_Bcast", rc);
    }
#endif
    return 0;
}

/* big = world x small elements, one dtype */
static int gdl__dist_pair(const char *fn, const char *bn, const gdl_tensor *big, const char *sn,
                          const gdl_tensor *small, int i32_ok) {
    if (gdl__dist_check(fn, bn, big, i32_ok) < 0 || gdl__dist_check(fn, sn, small, i32_ok) < 0) return -1;
    if (big->dtype != small->dtype || big->numel != small->numel * gdl__dist.world || big->numel > INT32_MAX) {
        gdl__set_error("%s: %s %s %s must have world size (%d) x the elements of %s %s %s, in one dtype", fn, bn,
                       gdl_dtype_name(big->dtype), gdl_shape_str(big), gdl__dist.world, sn,
                       gdl_dtype_name(small->dtype), gdl_shape_str(small));
        return -1;
    }
    if (big->data == small->data) {
        gdl__set_error("%s: %s and %s are the same memory", fn, bn, sn);
        return -1;
    }
    if (big->device.type != small->device.type || big->device.index != small->device.index) {
        gdl__set_error("%s: %s is on %s, %s on %s: one device", fn, bn, gdl_device_str(big->device), sn,
                       gdl_device_str(small->device));
        return -1;
    }
    return 0;
}

GPUDL_API int gdl_dist_all_gather(gdl_tensor *out, const gdl_tensor *in) {
    static const char fn[] = "gdl_dist_all_gather";
    if (gdl__dist_pair(fn, "out", out, "in", in, 1) < 0) return -1;
    if (in->device.type == GDL_DEVICE_CUDA) return gdl__dist_nccl(fn, GDL_COLL_ALL_GATHER, in, out, in->numel, 0, 0);
#ifdef GPUDL_MPI
    if (gdl__dist.world > 1) {
        MPI_Datatype ty = gdl__mpi_type(in->dtype);
        char what[96];
        int rc;
        snprintf(what, sizeof what, "the all-gather of %s %s", gdl_dtype_name(in->dtype), gdl_shape_str(in));
        if (gdl__dist_arrive(fn, what) < 0) return -1;
        rc = MPI_Allgather(in->data, (int)in->numel, ty, out->data, (int)in->numel, ty, gdl__dist.comm);
        return rc != MPI_SUCCESS ? gdl__dist_fail(fn, "MPI_Allgather", rc) : 0;
    }
#endif
    memcpy(out->data, in->data, (size_t)in->numel * gdl_dtype_size(in->dtype));
    return 0;
}

GPUDL_API int gdl_dist_reduce_scatter(gdl_tensor *out, const gdl_tensor *in, gdl_dist_op op) {
    static const char fn[] = "gdl_dist_reduce_scatter";
    if (gdl__dist_pair(fn, "in", in, "out", out, op == GDL_SUM) < 0) return -1;
    if (op != GDL_SUM && op != GDL_AVG) {
        gdl__set_error("%s: op %d is neither GDL_SUM nor GDL_AVG", fn, (int)op);
        return -1;
    }
    if (in->device.type == GDL_DEVICE_CUDA)
        return gdl__dist_nccl(fn, GDL_COLL_REDUCE_SCATTER, in, out, out->numel, op == GDL_AVG, 0);
#ifdef GPUDL_MPI
    if (gdl__dist.world > 1) {
        char what[96];
        int rc;
        snprintf(what, sizeof what, "the reduce-scatter of %s %s", gdl_dtype_name(in->dtype), gdl_shape_str(in));
        if (gdl__dist_arrive(fn, what) < 0) return -1;
        rc = MPI_Reduce_scatter_block(in->data, out->data, (int)out->numel, gdl__mpi_type(in->dtype), MPI_SUM,
                                      gdl__dist.comm);
        if (rc != MPI_SUCCESS) return gdl__dist_fail(fn, "MPI_Reduce_scatter_block", rc);
    } else
#endif
        memcpy(out->data, in->data, (size_t)out->numel * gdl_dtype_size(out->dtype));
    if (op == GDL_AVG) gdl__dist_divide(out);
    return 0;
}

