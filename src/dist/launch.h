/* ---------------------------------------------------------------------------
   src/dist/launch.h — the state of the process group, the launcher's integer
   variables, MPI's errors. The other parts of src/dist/: the rendezvous, the
   process group, the collectives, DDP, the workload managers.
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
    long x;
    if (!v) return 0;
    if (gdl__parse_long(v, lo, hi, &x) < 0) {
        gdl__set_error("%s: %s='%.64s' (%s) is not a whole number in [%ld, %ld]", op, name, v, launcher, lo, hi);
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
