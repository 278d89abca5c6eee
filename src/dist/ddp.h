/* ---- DistributedDataParallel ---- */

typedef struct gdl__bucket {
    int first, count;   /* params[first .. first+count-1] of the reversed list */
    int64_t numel;
    int pending;        /* gradients not complete yet in this backward */
    int started;
    gdl_real *buf;      /* the bucket's gradients, flat */
#ifdef GPUDL_MPI
    MPI_Request req;
#endif
} gdl__bucket;

struct gdl_ddp {
    gdl_module *m;
    gdl_ddp_opts o;
    int np, nbuckets, no_sync, failed;
    gdl_tensor **params;  /* the module's parameters, last first */
    int *bucket_of;       /* bucket of params[i] */
    gdl__bucket *b;
    int nbuf;
    gdl_tensor **bufs;    /* buffers, broadcast at each forward */
    const gdl_backend *gpu; /* CUDA parameters: the buckets are device memory, all-reduced by NCCL */
    gdl_device dev;
};

GPUDL_API gdl_ddp_opts gdl_ddp_defaults(void) {
    gdl_ddp_opts o;
    o.bucket_cap_mb = 25;
    o.first_bucket_mb = 1;
    o.broadcast_buffers = 1;
    return o;
}

GPUDL_API void gdl_ddp_free(gdl_ddp *d) {
    int i;
    if (!d) return;
    if (d->gpu && d->b) { /* the buckets' last all-reduce is queued on the device before their memory goes back */
        if (gdl__be_lookup("gdl_ddp_free", d->dev)) (void)d->gpu->rt.comm_join();
        for (i = 0; i < d->nbuckets; i++) d->gpu->rt.free(d->b[i].buf);
    }
    for (i = 0; d->b && !d->gpu && i < d->nbuckets; i++) {
#ifdef GPUDL_MPI
        /* an all-reduce left in flight by a timeout may still write its bucket: leaked, deliberately */
        if (d->b[i].req != MPI_REQUEST_NULL && d->b[i].started && gdl__dist.broken) continue;
#endif
        GPUDL_FREE(d->b[i].buf);
    }
    GPUDL_FREE(d->b);
    GPUDL_FREE(d->bucket_of);
    GPUDL_FREE(d->params);
    GPUDL_FREE(d->bufs);
    GPUDL_FREE(d);
}

GPUDL_API gdl_ddp *gdl_ddp_new(gdl_module *m, const gdl_ddp_opts *o) {
    static const char fn[] = "gdl_ddp_new";
    gdl_ddp *d;
    gdl_tensor **tmp = NULL;
    int i, n, nb;
    double cap;
    int64_t bytes;
    if (!gdl__dist.init) {
        gdl__set_error("%s: call gdl_dist_init first", fn);
        return NULL;
    }
    if (!m) {
        gdl__null_arg(fn, "module");
        return NULL;
    }
    if (!(d = (gdl_ddp *)gdl__zalloc(fn, sizeof *d))) return NULL;
    d->m = m;
    d->o = o ? *o : gdl_ddp_defaults();
    if (!(d->o.bucket_cap_mb > 0) || !(d->o.first_bucket_mb > 0)) {
        gdl__set_error("%s: bucket sizes must be > 0 MB (bucket_cap_mb %g, first_bucket_mb %g)", fn,
                       d->o.bucket_cap_mb, d->o.first_bucket_mb);
        goto fail;
    }
    if ((n = gdl_module_named_tensors(m, GDL_PARAMS, NULL, NULL, 0)) < 0 ||
        (d->nbuf = gdl_module_named_tensors(m, GDL_BUFFERS, NULL, NULL, 0)) < 0)
        goto fail;
    d->np = n;
    tmp = (gdl_tensor **)GPUDL_MALLOC(sizeof(gdl_tensor *) * (size_t)(n + 1));
    d->params = (gdl_tensor **)GPUDL_MALLOC(sizeof(gdl_tensor *) * (size_t)(n + 1));
    d->bucket_of = (int *)GPUDL_MALLOC(sizeof(int) * (size_t)(n + 1));
    d->bufs = (gdl_tensor **)GPUDL_MALLOC(sizeof(gdl_tensor *) * (size_t)(d->nbuf + 1));
    d->b = (gdl__bucket *)GPUDL_MALLOC(sizeof(gdl__bucket) * (size_t)(n + 1));
    if (!tmp || !d->params || !d->bucket_of || !d->bufs || !d->b) {
        gdl__set_error("%s: out of memory", fn);
        goto fail;
    }
    memset(d->b, 0, sizeof(gdl__bucket) * (size_t)(n + 1));
    if (gdl_module_named_tensors(m, GDL_PARAMS, NULL, tmp, n) != n ||
        gdl_module_named_tensors(m, GDL_BUFFERS, NULL, d->bufs, d->nbuf) != d->nbuf)
        goto fail;
    for (i = 0; i < n; i++) d->params[i] = tmp[n - 1 - i]; /* backward meets the last layers first */
    for (i = 0; i < n; i++) {
        gdl_device pd = d->params[i]->device, d0 = d->params[0]->device;
        if (gdl__dist_check(fn, "a parameter", d->params[i], 0) < 0) goto fail;
        if (pd.type != d0.type || pd.index != d0.index) {
            gdl__set_error("%s: parameters on %s and %s: DDP takes a module on one device", fn, gdl_device_str(d0),
                           gdl_device_str(pd));
            goto fail;
        }
    }
    if (n > 0 && d->params[0]->device.type == GDL_DEVICE_CUDA) {
        d->dev = d->params[0]->device;
        if (!(d->gpu = gdl__dist_comm(fn, d->dev))) goto fail;
    }
    /* buckets: fill up to the cap, the first one to first_bucket_mb */
    nb = 0;
    bytes = 0;
    cap = d->o.first_bucket_mb * 1048576.0;
    for (i = 0; i < n; i++) {
        int64_t pb = d->params[i]->numel * (int64_t)sizeof(gdl_real);
        if (nb == 0 || (d->b[nb - 1].count > 0 && (double)(bytes + pb) > cap)) {
            if (nb > 0) cap = d->o.bucket_cap_mb * 1048576.0;
            d->b[nb].first = i;
            nb++;
            bytes = 0;
        }
        d->b[nb - 1].count++;
        d->b[nb - 1].numel += d->params[i]->numel;
        d->bucket_of[i] = nb - 1;
        bytes += pb;
    }
    d->nbuckets = nb;
    for (i = 0; i < nb; i++)
        if (d->b[i].numel > INT32_MAX ||
            !(d->b[i].buf = (gdl_real *)(d->gpu ? d->gpu->rt.alloc(sizeof(gdl_real) * (size_t)(d->b[i].numel + 1))
                                                : GPUDL_MALLOC(sizeof(gdl_real) * (size_t)(d->b[i].numel + 1))))) {
            gdl__set_error("%s: out of memory for a bucket of %lld gradients", fn, (long long)d->b[i].numel);
            goto fail;
        }
    /* the same start on every rank */
    for (i = 0; i < n; i++)
        if (gdl_dist_broadcast(d->params[i], 0) < 0) goto fail;
    for (i = 0; i < d->nbuf; i++)
        if (gdl_dist_broadcast(d->bufs[i], 0) < 0) goto fail;
    GPUDL_FREE(tmp);
    return d;
fail:
    GPUDL_FREE(tmp);
    gdl_ddp_free(d);
    return NULL;
}

GPUDL_API int gdl_ddp_num_buckets(const gdl_ddp *d) { return d ? d->nbuckets : 0; }
GPUDL_API gdl_module *gdl_ddp_module(const gdl_ddp *d) { return d ? d->m : NULL; }

/* v[0..n-1] summed (max: the largest) over every rank, within the timeout; as is in one process */
static int gdl__dist_reduce_f64(const char *op, const char *what, double *v, int n, int max) {
#ifdef GPUDL_MPI
    if (gdl__dist.init && gdl__dist.world > 1) {
        MPI_Request q;
        if (gdl__dist_ready(op) < 0) return -1;
        gdl__dist.seq++;
        return gdl__dist_run(op, "MPI_Iallreduce", what,
                             MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, max ? MPI_MAX : MPI_SUM, gdl__dist.comm,
                                            &q), &q);
    }
#else
    if (gdl__dist.init && gdl__dist.world > 1) {
        /* NCCL is the transport: every rank's doubles gathered bit for bit (as pairs of i32), then summed
           (or the max taken) in rank order on the host, so every rank gets the same exact figures; the
           host waits with the timeout before it reads, so a missing peer fails here, never hangs */
        gdl_device dev = gdl__dist.comm_dev ? gdl_cuda(gdl__dist.comm_dev - 1) : gdl_dist_device();
        int64_t s1[1], sw[1];
        gdl_tensor *in = NULL, *all = NULL, *h = NULL;
        const gdl_backend *be;
        int rc = -1, r, k;
        if (gdl__dist_ready(op) < 0) return -1;
        s1[0] = 2 * (int64_t)n, sw[0] = 2 * (int64_t)n * gdl__dist.world;
        if ((in = gdl_from_array(v, 1, s1, GDL_I32, dev)) && (all = gdl_empty(1, sw, GDL_I32, dev)) &&
            gdl_dist_all_gather(all, in) == 0 && (be = gdl__dist_comm(op, dev)) &&
            be->rt.comm_sync(0, gdl_dist_timeout()) == 0 && (h = gdl_to(all, gdl_cpu()))) {
            const double *g = (const double *)h->data;
            for (k = 0; k < n; k++) {
                double a = g[k];
                for (r = 1; r < gdl__dist.world; r++) a = max ? (g[r * n + k] > a ? g[r * n + k] : a) : a + g[r * n + k];
                v[k] = a;
            }
            rc = 0;
        }
        if (rc < 0) {
            char why[sizeof gdl__err];
            memcpy(why, gdl__err, sizeof why);
            gdl__set_error("%s: %s over NCCL: %s", op, what, why);
        }
        gdl_free(h), gdl_free(all), gdl_free(in);
        return rc;
    }
#endif
    return 0;
}

/* every rank says whether its part (what) worked: 0 when all did. A rank that failed keeps its own
   error; the others get one saying how many failed. */
static int gdl__dist_agree(const char *op, const char *what, int ok) {
    double bad = ok ? 0 : 1;
    char keep[sizeof gdl__err];
    memcpy(keep, gdl__err, sizeof keep);
    if (gdl__dist_reduce_f64(op, what, &bad, 1, 0) < 0) {
        if (!ok) memcpy(gdl__err, keep, sizeof keep); /* this rank's own failure says more */
        return -1;
    }
    if (!ok) return -1;
    if (bad > 0) {
        gdl__set_error("%s: %.0f of %d ranks failed %s (their own errors say why)", op,
                       bad, gdl_dist_world_size(), what);
        return -1;
    }
    return 0;
}

GPUDL_API void gdl_ddp_set_no_sync(gdl_ddp *d, int on) {
    if (d) d->no_sync = on != 0;
}

GPUDL_API gdl_tensor *gdl_ddp_forward(gdl_ddp *d, gdl_tensor *x) {
    int i;
    if (!d) {
        gdl__null_arg("gdl_ddp_forward", "ddp");
        return NULL;
    }
    if (d->o.broadcast_buffers && gdl__dist.world > 1)
        for (i = 0; i < d->nbuf; i++)
            if (gdl_dist_broadcast(d->bufs[i], 0) < 0) return NULL;
    return gdl_forward(d->m, x);
}

/* A bucket's gradients are complete: gather them and start the all-reduce. On a GPU the copies are
   queued on the compute stream, and NCCL's all-reduce (the mean) on the communication stream after
   them: backward goes on while it runs. */
static void gdl__ddp_start(gdl_ddp *d, gdl__bucket *b) {
    int64_t off = 0;
    int i;
    if (d->gpu) {
        for (i = b->first; i < b->first + b->count && !d->failed; i++) {
            gdl_tensor *p = d->params[i];
            size_t bytes = sizeof(gdl_real) * (size_t)p->numel;
            if ((p->grad ? d->gpu->rt.copy(b->buf + off, p->grad->data, bytes, 2) : d->gpu->rt.memset0(b->buf + off, bytes)) < 0)
                d->failed = 1;
            off += p->numel;
        }
        if (!d->failed && d->gpu->rt.collective(GDL_COLL_ALL_REDUCE, b->buf, b->buf, b->numel, GDL_F32, 1, 0, 0) < 0)
            d->failed = 1;
        b->started = !d->failed;
        return;
    }
    for (i = b->first; i < b->first + b->count; i++) {
        gdl_tensor *p = d->params[i];
        if (p->grad) memcpy(b->buf + off, p->grad->data, sizeof(gdl_real) * (size_t)p->numel);
        else memset(b->buf + off, 0, sizeof(gdl_real) * (size_t)p->numel); /* unused this step: adds nothing */
        off += p->numel;
    }
    b->started = 1;
#ifdef GPUDL_MPI
    if (gdl__dist.world > 1) {
        int rc;
        gdl__dist.seq++;
        rc = MPI_Iallreduce(MPI_IN_PLACE, b->buf, (int)b->numel, gdl__mpi_type(GDL_F32), MPI_SUM, gdl__dist.comm,
                            &b->req);
        if (rc != MPI_SUCCESS) {
            gdl__dist_fail("gdl_ddp_backward", "MPI_Iallreduce", rc);
            b->started = 0;
            d->failed = 1;
        }
    }
#endif
}

static void gdl__ddp_ready(gdl_tensor *leaf, void *user) {
    gdl_ddp *d = (gdl_ddp *)user;
    int i;
    for (i = 0; i < d->np; i++)
        if (d->params[i] == leaf) {
            gdl__bucket *b = &d->b[d->bucket_of[i]];
            if (--b->pending == 0 && !d->failed) gdl__ddp_start(d, b);
            return;
        }
}

GPUDL_API int gdl_ddp_backward(gdl_ddp *d, gdl_tensor *loss) {
    static const char fn[] = "gdl_ddp_backward";
    int i, rc;
    if (!d) {
        gdl__null_arg(fn, "ddp");
        return -1;
    }
    for (i = 0; i < d->np; i++)
        if (d->params[i]->dtype != GDL_F32) { /* master weights turned on after gdl_ddp_new */
            gdl__set_error("%s: parameter %s is %s (an optimizer's master weights?); DDP all-reduces f32 gradients",
                           fn, gdl_shape_str(d->params[i]), gdl_dtype_name(d->params[i]->dtype));
            return -1;
        }
    if (d->no_sync) return gdl_backward(loss);
    if (gdl__dist_ready(fn) < 0) return -1;
    d->failed = 0;
    for (i = 0; i < d->nbuckets; i++) {
        d->b[i].pending = d->b[i].count;
        d->b[i].started = 0;
    }
    gdl_set_grad_ready_hook(gdl__ddp_ready, d);
    rc = gdl_backward(loss);
    gdl_set_grad_ready_hook(NULL, NULL);
    /* parameters backward did not reach (unused this step): their buckets go now, with zeros */
    for (i = 0; i < d->nbuckets && !d->failed; i++)
        if (!d->b[i].started) gdl__ddp_start(d, &d->b[i]);
#ifdef GPUDL_MPI
    /* every request started must complete, error or not; after a timeout or an MPI error no MPI call is
       made again, and the requests still in flight keep their buckets (see gdl_ddp_free) */
    for (i = 0; i < d->nbuckets; i++)
        if (d->b[i].started && gdl__dist.world > 1 && !d->gpu && !gdl__dist.broken) {
            char what[96];
            snprintf(what, sizeof what, "the all-reduce of gradient bucket %d of %d (%lld values)", i + 1,
                     d->nbuckets, (long long)d->b[i].numel);
            if (gdl__dist_wait(fn, what, &d->b[i].req) < 0) d->failed = 1;
        }
#endif
    if (d->gpu) { /* the compute stream waits for the all-reduces, then takes the means back */
        if (rc < 0 || d->failed || !gdl__be(fn, d->dev) || d->gpu->rt.comm_join() < 0) return -1;
        for (i = 0; i < d->nbuckets; i++) {
            gdl__bucket *b = &d->b[i];
            int64_t off = 0;
            int k;
            for (k = b->first; k < b->first + b->count; k++) {
                gdl_tensor *p = d->params[k];
                if (gdl__ensure_grad(p) < 0) return -1; /* a flat block's parameter: its slot, as on the CPU */
                if (d->gpu->rt.copy(p->grad->data, b->buf + off, sizeof(gdl_real) * (size_t)p->numel, 2) < 0) return -1;
                off += p->numel;
            }
        }
        return 0;
    }
    if (rc < 0 || d->failed) return -1;
    for (i = 0; i < d->nbuckets; i++) { /* the mean over the ranks, back into the gradients */
        gdl__bucket *b = &d->b[i];
        int64_t off = 0, j;
        gdl_real w = (gdl_real)gdl__dist.world;
        int k;
        for (k = b->first; k < b->first + b->count; k++) {
            gdl_tensor *p = d->params[k];
            if (gdl__ensure_grad(p) < 0) return -1;
            for (j = 0; j < p->numel; j++) ((gdl_real *)p->grad->data)[j] = b->buf[off + j] / w;
            off += p->numel;
        }
    }
    return 0;
}

GPUDL_API int gdl_dist_barrier(void) {
    if (gdl__dist_ready("gdl_dist_barrier") < 0) return -1;
#ifdef GPUDL_MPI
    if (gdl__dist.comm_dev) { /* NCCL's queued collectives done first, with the timeout: a missing peer
                                 fails here rather than leave MPI_Barrier waiting */
        const gdl_backend *be = gdl__dist_comm("gdl_dist_barrier", gdl_cuda(gdl__dist.comm_dev - 1));
        if (!be || be->rt.comm_sync(0, gdl_dist_timeout()) < 0) return -1;
    }
    if (gdl__dist.world > 1) {
        MPI_Request q;
        gdl__dist.seq++;
        return gdl__dist_run("gdl_dist_barrier", "MPI_Ibarrier", "the barrier", MPI_Ibarrier(gdl__dist.comm, &q),
                             &q);
    }
#else
    if (gdl__dist.world > 1) { /* NCCL is the transport: an all-reduce, waited for with the timeout */
        const gdl_backend *be = gdl__dist_comm("gdl_dist_barrier", gdl__dist.comm_dev ? gdl_cuda(gdl__dist.comm_dev - 1)
                                                                                     : gdl_dist_device());
        if (!be || be->rt.comm_sync(1, gdl_dist_timeout()) < 0) return -1;
    }
#endif
    return 0;
}

