// ----------------------------------------------------------------------------
// NCCL: one communicator per process, on one device (the rank's), with a
// communication stream of its own. A collective's stream first waits for an
// event recorded on the compute stream (the operands are ready: a gradient
// bucket has been filled); the compute stream waits for an event recorded
// after it (at once, or at comm_join for DDP's buckets, which overlap the
// rest of backward), so the optimiser reads reduced gradients and memory
// freed after a collective is reused only after it. The host never waits
// except in comm_sync, which polls with a deadline, as PyTorch's NCCL
// watchdog: a missing peer ends in ncclCommAbort and an error, not a hang.

#ifndef GPUDL_NO_NCCL
static struct {
    ncclComm_t comm;
    int dev, world, rank;
    cudaStream_t stream;
    cudaEvent_t ready, done;
    float *scratch;   /* comm_sync's barrier element */
    int broken;       /* aborted: every later call fails with why */
    char why[400];
} gdl__nc;

#define GDL_NCCL_TRY(call, fail)                                                     \
    do {                                                                             \
        ncclResult_t r_ = (call);                                                    \
        if (r_ != ncclSuccess) {                                                     \
            gdl__cu_report(ncclGetErrorString(r_), __FILE__, __LINE__, #call);       \
            return fail;                                                             \
        }                                                                            \
    } while (0)

// The communicator's device made current for the call; the caller's back after.
struct gdl__cu_on_device {
    int prev = -1, ok = 0;
    explicit gdl__cu_on_device(int dev) {
        if (cudaGetDevice(&prev) == cudaSuccess && (prev == dev || cudaSetDevice(dev) == cudaSuccess)) ok = 1;
        (void)cudaGetLastError();
    }
    ~gdl__cu_on_device() {
        if (ok && prev >= 0) (void)cudaSetDevice(prev);
    }
};

static int gdl__cu_comm_ready(void) {
    if (gdl__nc.broken) {
        gdl__set_error("gdl_cuda: NCCL in %s: the communicator was aborted: %s", gdl__backend_op(), gdl__nc.why);
        return -1;
    }
    if (!gdl__nc.comm) {
        gdl__set_error("gdl_cuda: NCCL in %s: no communicator (gdl_dist_init makes one for a job of several "
                       "processes)", gdl__backend_op());
        return -1;
    }
    return 0;
}

// Ends the communicator after an error, keeping the reason for every later call.
static int gdl__cu_comm_break(const char *why) {
    snprintf(gdl__nc.why, sizeof gdl__nc.why, "%s", why);
    gdl__nc.broken = 1;
    if (gdl__nc.comm) (void)ncclCommAbort(gdl__nc.comm);
    gdl__nc.comm = NULL;
    gdl__set_error("gdl_cuda: NCCL in %s: %s", gdl__backend_op(), why);
    return -1;
}

// a peer's failure, without waiting: NCCL reports it here, not to CUDA
static int gdl__cu_comm_check(void) {
    ncclResult_t e = ncclSuccess;
    GDL_NCCL_TRY(ncclCommGetAsyncError(gdl__nc.comm, &e), -1);
    if (e != ncclSuccess && e != ncclInProgress) {
        char why[300];
        snprintf(why, sizeof why, "rank %d of %d: a collective failed (%s); the communicator is aborted",
                 gdl__nc.rank, gdl__nc.world, ncclGetErrorString(e));
        return gdl__cu_comm_break(why);
    }
    return 0;
}

static void gdl__cu_comm_destroy(void);

static int gdl__cu_comm_id(void *id, int bytes) {
    ncclUniqueId u;
    if (bytes < (int)sizeof u) {
        gdl__set_error("gdl_cuda: NCCL's unique id has %d bytes; the buffer %d", (int)sizeof u, bytes);
        return -1;
    }
    GDL_NCCL_TRY(ncclGetUniqueId(&u), -1);
    memset(id, 0, (size_t)bytes);
    memcpy(id, &u, sizeof u);
    return 0;
}

static int gdl__cu_comm_init(int device, const void *id, int world, int rank) {
    ncclUniqueId u;
    if (gdl__nc.comm || gdl__nc.broken) {
        gdl__set_error("gdl_cuda: NCCL: this process has a communicator already (on cuda:%d)", gdl__nc.dev);
        return -1;
    }
    if (gdl__cu_check_index("gdl_dist_init", device) < 0) return -1;
    gdl__cu_on_device on(device);
    if (!on.ok) GDL_CU_TRY(cudaSetDevice(device), -1);
    memcpy(&u, id, sizeof u);
    gdl__nc.dev = device, gdl__nc.world = world, gdl__nc.rank = rank;
    if (cudaStreamCreateWithFlags(&gdl__nc.stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&gdl__nc.ready, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&gdl__nc.done, cudaEventDisableTiming) != cudaSuccess ||
        !(gdl__nc.scratch = (float *)gdl__cu_alloc(sizeof(float)))) {
        (void)cudaGetLastError();
        gdl__cu_comm_destroy();
        gdl__set_error("gdl_cuda: NCCL: no stream, events or memory for the communicator on cuda:%d", device);
        return -1;
    }
    ncclResult_t r = ncclCommInitRank(&gdl__nc.comm, world, u, rank);
    if (r != ncclSuccess) { /* nothing is left half made: a later call may try again */
        gdl__nc.comm = NULL;
        gdl__cu_comm_destroy();
        gdl__set_error("gdl_cuda: NCCL: ncclCommInitRank (rank %d of %d on cuda:%d): %s", rank, world, device,
                       ncclGetErrorString(r));
        return -1;
    }
    return 0;
}

static int gdl__cu_collective(int kind, const void *send, void *recv, int64_t count, gdl_dtype dt, int avg,
                              int root, int join) {
    ncclDataType_t t = dt == GDL_I32 ? ncclInt32 : dt == GDL_BF16 ? ncclBfloat16 : dt == GDL_F16 ? ncclFloat16
                                                                                                : ncclFloat32;
    ncclRedOp_t op = avg ? ncclAvg : ncclSum;
    size_t n = (size_t)count;
    if (gdl__cu_comm_ready() < 0 || gdl__cu_comm_check() < 0) return -1;
    gdl__cu_on_device on(gdl__nc.dev);
    cudaStream_t compute = gdl__cu_stream(), s = gdl__nc.stream;
    GDL_CU_TRY(cudaEventRecord(gdl__nc.ready, compute), -1);
    GDL_CU_TRY(cudaStreamWaitEvent(s, gdl__nc.ready, 0), -1);
    switch (kind) {
    case GDL_COLL_ALL_REDUCE: GDL_NCCL_TRY(ncclAllReduce(send, recv, n, t, op, gdl__nc.comm, s), -1); break;
    case GDL_COLL_BROADCAST: GDL_NCCL_TRY(ncclBroadcast(send, recv, n, t, root, gdl__nc.comm, s), -1); break;
    case GDL_COLL_ALL_GATHER: GDL_NCCL_TRY(ncclAllGather(send, recv, n, t, gdl__nc.comm, s), -1); break;
    case GDL_COLL_REDUCE_SCATTER: GDL_NCCL_TRY(ncclReduceScatter(send, recv, n, t, op, gdl__nc.comm, s), -1); break;
    default: gdl__set_error("gdl_cuda: collective %d is not one of GDL_COLL_*", kind); return -1;
    }
    if (join) {
        GDL_CU_TRY(cudaEventRecord(gdl__nc.done, s), -1);
        GDL_CU_TRY(cudaStreamWaitEvent(compute, gdl__nc.done, 0), -1);
    }
    return 0;
}

static int gdl__cu_comm_join(void) {
    if (gdl__cu_comm_ready() < 0) return -1;
    gdl__cu_on_device on(gdl__nc.dev);
    GDL_CU_TRY(cudaEventRecord(gdl__nc.done, gdl__nc.stream), -1);
    GDL_CU_TRY(cudaStreamWaitEvent(gdl__cu_stream(), gdl__nc.done, 0), -1);
    return gdl__cu_comm_check();
}

static int gdl__cu_comm_sync(int barrier, double timeout_s) {
    if (gdl__cu_comm_ready() < 0) return -1;
    if (barrier && gdl__cu_collective(GDL_COLL_ALL_REDUCE, gdl__nc.scratch, gdl__nc.scratch, 1, GDL_F32, 0, 0, 0) < 0)
        return -1;
    gdl__cu_on_device on(gdl__nc.dev);
    GDL_CU_TRY(cudaEventRecord(gdl__nc.done, gdl__nc.stream), -1);
    gdl__count_sync();
    auto t0 = std::chrono::steady_clock::now();
    for (int polls = 0;; polls++) {
        cudaError_t q = cudaEventQuery(gdl__nc.done);
        if (q == cudaSuccess) break;
        if (q != cudaErrorNotReady) GDL_CU_TRY(q, -1);
        (void)cudaGetLastError();
        if (gdl__cu_comm_check() < 0) return -1;
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
            char why[300];
            snprintf(why, sizeof why, "rank %d of %d: the collectives did not finish within %g s (GPUDL_DIST_TIMEOUT): "
                     "a peer never came or hangs; the communicator is aborted", gdl__nc.rank, gdl__nc.world,
                     timeout_s);
            return gdl__cu_comm_break(why);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(polls < 100 ? 50 : 1000));
    }
    return gdl__cu_comm_check();
}

static void gdl__cu_comm_destroy(void) {
    if (gdl__nc.comm || gdl__nc.stream) {
        gdl__cu_on_device on(gdl__nc.dev);
        if (gdl__nc.comm) (void)ncclCommDestroy(gdl__nc.comm);
        if (gdl__nc.ready) (void)cudaEventDestroy(gdl__nc.ready);
        if (gdl__nc.done) (void)cudaEventDestroy(gdl__nc.done);
        if (gdl__nc.stream) (void)cudaStreamDestroy(gdl__nc.stream);
        if (gdl__nc.scratch) gdl__cu_free(gdl__nc.scratch);
        (void)cudaGetLastError();
    }
    memset(&gdl__nc, 0, sizeof gdl__nc);
}
#else
static int gdl__cu_no_nccl(void) {
    gdl__set_error("gdl_cuda: built with GPUDL_NO_NCCL: CUDA tensors have no collectives");
    return -1;
}
static int gdl__cu_comm_id(void *, int) { return gdl__cu_no_nccl(); }
static int gdl__cu_comm_init(int, const void *, int, int) { return gdl__cu_no_nccl(); }
static int gdl__cu_collective(int, const void *, void *, int64_t, gdl_dtype, int, int, int) { return gdl__cu_no_nccl(); }
static int gdl__cu_comm_join(void) { return gdl__cu_no_nccl(); }
static int gdl__cu_comm_sync(int, double) { return gdl__cu_no_nccl(); }
static void gdl__cu_comm_destroy(void) {}
#endif

