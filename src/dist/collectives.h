/* src/dist/collectives.h — the collectives (MPI for CPU tensors, NCCL for
   CUDA tensors), their checks and timeouts. */

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
/* gdl__dist_arrive before collective coll ("all-reduce") of t */
static int gdl__dist_arrive_for(const char *op, const char *coll, const gdl_tensor *t) {
    char what[96];
    snprintf(what, sizeof what, "the %s of %s %s", coll, gdl_dtype_name(t->dtype), gdl_shape_str(t));
    return gdl__dist_arrive(op, what);
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
    return be ? be->rt.collective(kind, send->data, recv->data, count, recv->dtype, avg, root, 1) : -1;
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
        int rc;
        if (gdl__dist_arrive_for(fn, "all-reduce", t) < 0) return -1;
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
        int rc;
        if (gdl__dist_arrive_for(fn, "all-gather", in) < 0) return -1;
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
        int rc;
        if (gdl__dist_arrive_for(fn, "reduce-scatter", in) < 0) return -1;
        rc = MPI_Reduce_scatter_block(in->data, out->data, (int)out->numel, gdl__mpi_type(in->dtype), MPI_SUM,
                                      gdl__dist.comm);
        if (rc != MPI_SUCCESS) return gdl__dist_fail(fn, "MPI_Reduce_scatter_block", rc);
    } else
#endif
        memcpy(out->data, in->data, (size_t)out->numel * gdl_dtype_size(out->dtype));
    if (op == GDL_AVG) gdl__dist_divide(out);
    return 0;
}
