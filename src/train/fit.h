/* ---------------------------------------------------------------------------
   src/train/fit.h   fit / evaluate with progress output, and gdl_fit's CUDA graphs.
   ------------------------------------------------------------------------- */
static int gdl__isatty(FILE *f) { return gdl__os_isatty(f); }

GPUDL_API gdl_fit_opts gdl_fit_defaults(void) {
    gdl_fit_opts o;
    memset(&o, 0, sizeof o);
    o.epochs = 1;
    o.accumulate = 1;
    o.verbose = 1;
    o.oom_retry = 1;
    o.cuda_graph = 1;
    return o;
}

GPUDL_API gdl_tensor *gdl_loss_cross_entropy(gdl_tensor *output, gdl_tensor *target, void *user) {
    return gdl_cross_entropy_ex(output, target, (const gdl_ce_opts *)user);
}
GPUDL_API gdl_tensor *gdl_loss_nll(gdl_tensor *output, gdl_tensor *target, void *user) {
    gdl_ce_opts o = user ? *(const gdl_ce_opts *)user : gdl_ce_defaults();
    if (o.label_smoothing != 0) {
        gdl__set_error("gdl_loss_nll: nll_loss has no label smoothing (got %g)", o.label_smoothing);
        return NULL;
    }
    return gdl_nll_loss(output, target, o.reduction, o.ignore_index);
}
GPUDL_API gdl_tensor *gdl_loss_mse(gdl_tensor *output, gdl_tensor *target, void *user) {
    return gdl_mse_loss(output, target, user ? *(const gdl_reduction *)user : GDL_REDUCE_MEAN);
}
GPUDL_API gdl_tensor *gdl_loss_bce_with_logits(gdl_tensor *output, gdl_tensor *target, void *user) {
    return gdl_bce_with_logits(output, target, user ? *(const gdl_reduction *)user : GDL_REDUCE_MEAN);
}

/* Running sums of one pass: loss weighted by batch size, and correct
   predictions when the output is [B,C] logits against i32 labels [B]. */
/* A pass's running metrics. The per-batch sums stay on the device (the
   backend's fit_metrics), so a step reads nothing back; gdl__pass_sync adds
   them into the host fields where they are shown or saved. */
typedef struct gdl__pass {
    double loss_sum;
    int64_t samples, correct, counted; /* as of the last gdl__pass_sync */
    const gdl_backend *be;
    gdl_device dev;
    double *dacc; /* on dev: [0..3] loss_sum, samples, correct, counted since the sync; [4..7] a snapshot */
} gdl__pass;

static int gdl__pass_init(gdl__pass *p, const char *op, gdl_device dev) {
    if (p->dacc) {
        if (gdl_device_equal(p->dev, dev)) return gdl__be(op, dev) ? 0 : -1;
        gdl__set_error("%s: a batch on %s after batches on %s", op, gdl_device_str(dev), gdl_device_str(p->dev));
        return -1;
    }
    if (!(p->be = gdl__be(op, dev))) return -1;
    if (!(p->dacc = (double *)p->be->rt.alloc(8 * sizeof(double)))) return -1;
    p->dev = dev;
    return p->be->rt.memset0(p->dacc, 8 * sizeof(double));
}

static int gdl__pass_batch(gdl__pass *p, gdl_tensor *out, gdl_tensor *y, gdl_tensor *loss) {
    int64_t B = y->ndim >= 1 ? y->shape[0] : 1;
    int cls = out->ndim == 2 && y->dtype == GDL_I32 && y->ndim == 1 && out->shape[0] == B &&
              gdl_device_equal(out->device, y->device);
    if (loss->numel != 1 || loss->dtype != GDL_F32) {
        gdl__set_error("gdl_fit: the loss function returned %s %s, not one f32 value", gdl_dtype_name(loss->dtype),
                       gdl_shape_str(loss));
        return -1;
    }
    const gdl_real *o = (const gdl_real *)out->data;
    if (gdl__pass_init(p, "gdl_fit", loss->device) < 0) return -1;
    if (cls && out->dtype != GDL_F32) { /* bf16/f16 logits (autocast): the metrics kernel reads f32 */
        gdl_real *f;
        if (!gdl__is_float(out->dtype)) cls = 0;
        else if (!(f = (gdl_real *)gdl__scratch("gdl_fit", out->device, sizeof(gdl_real) * (size_t)out->numel)) ||
                 p->be->k.cast(f, GDL_F32, out->data, out->dtype, out->numel) < 0)
            return -1;
        else o = f;
    }
    return p->be->k.fit_metrics(GDL__R(loss), B, cls ? out->shape[1] : 0, cls ? o : NULL,
                              cls ? (const int32_t *)y->data : NULL, p->dacc);
}

/* The device's sums into the host fields: the one read of the device. */
static int gdl__pass_sync(gdl__pass *p) {
    double h[4];
    if (!p->dacc) return 0;
    if (gdl__dist_settle("gdl_fit") < 0) return -1; /* DDP's queued NCCL all-reduces end, or time out, first */
    if (!gdl__be("gdl_fit", p->dev) || p->be->rt.copy(h, p->dacc, sizeof h, 1) < 0 ||
        p->be->rt.memset0(p->dacc, sizeof h) < 0)
        return -1;
    p->loss_sum += h[0];
    p->samples += (int64_t)h[1];
    p->correct += (int64_t)h[2];
    p->counted += (int64_t)h[3];
    return 0;
}

/* Snapshot (save != 0) or put back the device's sums, around a batch that may be retried. */
static int gdl__pass_snapshot(gdl__pass *p, int save) {
    if (!p->dacc) return 0;
    if (!gdl__be("gdl_fit", p->dev)) return -1;
    return p->be->rt.copy(save ? p->dacc + 4 : p->dacc, save ? p->dacc : p->dacc + 4, 4 * sizeof(double), 2);
}

static void gdl__pass_free(gdl__pass *p) {
    if (p->dacc && gdl__be("gdl_fit", p->dev)) p->be->rt.free(p->dacc);
    memset(p, 0, sizeof *p);
}

static double gdl__pass_acc(const gdl__pass *p) { return p->counted ? (double)p->correct / (double)p->counted : NAN; }

/* The model's output on x, averaged with its output on x flipped along the last dim when *flip (indices
   W-1 .. 0, made on x's device at the first batch of its width). */
static gdl_tensor *gdl__eval_forward(gdl_module *m, gdl_tensor *x, int hflip, gdl_tensor **flip) {
    gdl_tensor *out = gdl_forward(m, x), *xf;
    int64_t W, i;
    if (!out || !hflip) return out;
    if (x->ndim < 3) {
        gdl__set_error("gdl_evaluate: tta_hflip needs image batches [B,C,H,W] or [B,H,W], got %s", gdl_shape_str(x));
        return NULL;
    }
    W = x->shape[x->ndim - 1];
    if (!*flip || (*flip)->numel != W || !gdl_device_equal((*flip)->device, x->device)) {
        gdl_tensor *h = gdl_empty(1, &W, GDL_I32, gdl_cpu());
        gdl_free(*flip);
        *flip = NULL;
        if (!h) return NULL;
        for (i = 0; i < W; i++) ((int32_t *)h->data)[i] = (int32_t)(W - 1 - i);
        *flip = gdl_to(h, x->device);
        gdl_free(h);
        if (!*flip) return NULL;
    }
    if (!(xf = gdl_index_select(x, x->ndim - 1, *flip))) return NULL;
    return gdl_mul_scalar(gdl_add(out, gdl_forward(m, xf)), 0.5);
}

GPUDL_API int gdl_evaluate(gdl_module *m, gdl_loader *l, gdl_loss_fn loss, void *user, double *loss_out,
                           double *accuracy_out) {
    return gdl_evaluate_ex(m, l, loss, user, 0, loss_out, accuracy_out);
}

GPUDL_API int gdl_evaluate_ex(gdl_module *m, gdl_loader *l, gdl_loss_fn loss, void *user, int tta_hflip,
                              double *loss_out, double *accuracy_out) {
    gdl__pass p;
    gdl_tensor *x, *y, *flip = NULL;
    int was_training, grad, rc;
    if (!m || !l) {
        gdl__null_arg("gdl_evaluate", !m ? "module" : "loader");
        return -1;
    }
    if (!loss) loss = gdl_loss_cross_entropy;
    memset(&p, 0, sizeof p);
    was_training = gdl_module_is_training(m);
    gdl_module_train(m, 0);
    grad = gdl_set_grad_enabled(0);
    while ((rc = gdl_loader_next(l, &x, &y)) == 1) {
        gdl_tensor *out, *lt;
        gdl_arena_reset();
        if (!(out = gdl__eval_forward(m, x, tta_hflip, &flip)) || !(lt = loss(out, y, user)) ||
            gdl__pass_batch(&p, out, y, lt) < 0) {
            rc = -1;
            break;
        }
    }
    gdl_free(flip);
    gdl_set_grad_enabled(grad);
    gdl_module_train(m, was_training);
    if (rc == 0 && gdl__pass_sync(&p) < 0) rc = -1;
    if (rc == 0) {
        if (loss_out) *loss_out = p.samples ? p.loss_sum / (double)p.samples : NAN;
        if (accuracy_out) *accuracy_out = gdl__pass_acc(&p);
    }
    gdl__pass_free(&p);
    return rc < 0 ? -1 : 0;
}

static GDL__TLS double gdl__last_draw; /* one bar at a time: a terminal shows one (per thread: no data race) */

/* Would gdl_progress_bar draw now? (gdl_fit reads the device only then.) */
static int gdl__progress_due(FILE *f, int64_t b, int64_t nb) {
    return f && gdl__isatty(f) && !(b != nb && b > 1 && gdl_now() - gdl__last_draw < 0.1);
}

GPUDL_API int gdl_progress_bar(FILE *f, int epoch, int epochs, int64_t b, int64_t nb, double loss,
                               double accuracy, int64_t samples, double t0) {
    double now = gdl_now(), el = now - t0, rate = el > 0 ? (double)samples / el : 0;
    double eta = b > 0 ? el * (double)(nb - b) / (double)b : 0;
    int width = 24, filled = nb > 0 ? (int)(width * b / nb) : width, i;
    if (!gdl__progress_due(f, b, nb)) return 0;
    gdl__last_draw = now;
    fprintf(f, "\repoch %d/%d [", epoch, epochs);
    for (i = 0; i < width; i++) fputc(i < filled ? '=' : (i == filled ? '>' : ' '), f);
    fprintf(f, "] %lld/%lld loss %.4f", (long long)b, (long long)nb, loss);
    if (accuracy == accuracy) fprintf(f, " acc %.2f%%", 100 * accuracy);
    fprintf(f, " %.0f samples/s ETA %.0fs   ", rate, eta);
    fflush(f);
    return 1;
}

/* After the bar, on CUDA: the GPU's load, as nvidia-smi would show it. NVML's index is taken to be CUDA's
   (true with one GPU, or with CUDA_DEVICE_ORDER=PCI_BUS_ID). Silent without NVML. */
static void gdl__progress_gpu(FILE *f, gdl_device dev) {
    gdl_gpu_status s;
    char saved[sizeof gdl__err];
    if (dev.type != GDL_DEVICE_CUDA) return;
    memcpy(saved, gdl__err, sizeof saved); /* a missing NVML is no error of the training */
    if (gdl_gpu_stats(dev.index, &s) < 0) {
        gdl__set_error("%s", saved);
        return;
    }
    if (s.utilization >= 0) fprintf(f, "| GPU %d%% ", s.utilization);
    else fprintf(f, "| GPU ");
    fprintf(f, "%.1f/%.0f GiB   ", s.memory_used / 1073741824.0, s.memory_total / 1073741824.0);
    fflush(f);
}

GPUDL_API void gdl_print_epoch(FILE *f, int epochs, const gdl_epoch_stats *st) {
    int tty = gdl__isatty(f);
    if (tty) fputc('\r', f);
    fprintf(f, "epoch %d/%d: loss %.4f", st->epoch, epochs, st->loss);
    if (st->accuracy == st->accuracy) fprintf(f, " acc %.2f%%", 100 * st->accuracy);
    /* a diverged validation (NaN loss, a counted accuracy) still shows its loss */
    if (st->val_loss == st->val_loss || st->val_accuracy == st->val_accuracy) fprintf(f, " val_loss %.4f", st->val_loss);
    if (st->val_accuracy == st->val_accuracy) fprintf(f, " val_acc %.2f%%", 100 * st->val_accuracy);
    fprintf(f, " %.2fs %.0f samples/s%s\n", st->seconds, st->samples_per_sec, tty ? "                    " : "");
    fflush(f);
}

GPUDL_API FILE *gdl_metrics_csv_open(const char *path) {
    FILE *f;
    if (!path) {
        gdl__null_arg("gdl_metrics_csv_open", "path");
        return NULL;
    }
    if (!(f = fopen(path, "w")) ||
        fprintf(f, "epoch,loss,accuracy,val_loss,val_accuracy,seconds,samples_per_sec\n") < 0 || fflush(f) != 0) {
        if (f) fclose(f);
        gdl__set_error("gdl_metrics_csv_open: cannot write the metrics CSV %s", path);
        return NULL;
    }
    return f;
}

GPUDL_API int gdl_metrics_csv_row(FILE *f, const gdl_epoch_stats *st) {
    if (!f || !st) {
        gdl__null_arg("gdl_metrics_csv_row", !f ? "file" : "stats");
        return -1;
    }
    if (fprintf(f, "%d,%.6f,%.6f,%.6f,%.6f,%.4f,%.1f\n", st->epoch, st->loss, st->accuracy, st->val_loss,
                st->val_accuracy, st->seconds, st->samples_per_sec) < 0 || fflush(f) != 0) {
        gdl__set_error("gdl_metrics_csv_row: cannot write the metrics CSV (disk full?)");
        return -1;
    }
    return 0;
}

/* Where gdl_fit is inside a run, saved with its checkpoints (metadata fit.*). */
typedef struct gdl__fit_state {
    int64_t epoch;        /* gdl_fit's epoch, 1-based */
    int64_t batch;        /* batches of it done */
    int64_t loader_epoch; /* the train loader's epoch number */
    int64_t num_batches;  /* the loader's batches per epoch, checked on resume */
    int64_t val_epoch;    /* the validation loader's epoch number (its transforms depend on it); -1 without */
    double loss_sum;      /* the epoch's running metrics (gdl__pass) */
    double seconds;       /* the epoch's training time so far */
    int64_t samples, correct, counted; /* under DDP: the sums over every rank */
    int64_t replicas, batch_size; /* the train loader's shards (world size) and per-rank batch size */
    double es_best, best; /* early stopping's and best_path's best figures so far (NaN: none) */
    int64_t es_wait;      /* epochs since es_best improved */
} gdl__fit_state;
static int gdl__fit_save(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                         const gdl__fit_state *fs);
static int gdl__fit_load(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                         gdl__fit_state *fs, const gdl_loader *train, int epochs, int ddp);

/* The metrics CSV of a resumed run: the rows of epochs before `from` are kept (rewritten atomically), the
   rest dropped, and the file is opened for appending. A missing file is started anew. NULL + error. */
static FILE *gdl__csv_resume(const char *path, int64_t from) {
    FILE *in = fopen(path, "r"), *out;
    char line[1024], *tmp;
    size_t tl = strlen(path) + 64;
    if (!in) return gdl_metrics_csv_open(path);
    if (!(tmp = (char *)GPUDL_MALLOC(tl))) {
        fclose(in);
        gdl__set_error("gdl_fit: out of memory (host)");
        return NULL;
    }
    if (!(out = gdl__os_create_temporary(path, tmp, tl, "w"))) {
        fclose(in);
        gdl__set_error("gdl_fit: cannot write a temporary next to %s: %s", path, gdl__strerr(errno));
        GPUDL_FREE(tmp);
        return NULL;
    }
    /* the header always (a run killed early may have left an empty file), then the rows kept */
    fputs("epoch,loss,accuracy,val_loss,val_accuracy,seconds,samples_per_sec\n", out);
    while (fgets(line, sizeof line, in)) {
        char *end;
        long long e = strtoll(line, &end, 10);
        if (end != line && *end == ',' && e < from) fputs(line, out);
    }
    fclose(in);
    if (fclose(out) != 0 || gdl__os_replace(tmp, path) != 0) {
        gdl__set_error("gdl_fit: cannot rewrite the metrics CSV %s", path);
        remove(tmp);
        GPUDL_FREE(tmp);
        return NULL;
    }
    GPUDL_FREE(tmp);
    if (!(out = fopen(path, "a"))) gdl__set_error("gdl_fit: cannot append to the metrics CSV %s", path);
    return out;
}

static int gdl__error_is_oom(void) { return strstr(gdl__err, "out of memory") != NULL; }

/* a pass's sums over every rank (in double) */
static int gdl__dist_pass_sum(gdl__pass *p) {
    double v[4];
    v[0] = p->loss_sum, v[1] = (double)p->samples, v[2] = (double)p->correct, v[3] = (double)p->counted;
    if (gdl__dist_reduce_f64("gdl_fit", "the all-reduce of the epoch's loss and accuracy sums", v, 4, 0) < 0)
        return -1;
    p->loss_sum = v[0], p->samples = (int64_t)v[1], p->correct = (int64_t)v[2], p->counted = (int64_t)v[3];
    return 0;
}

/* Forward and backward of one batch in `parts` micro-batches, each loss
   weighted by its share of the batch and by 1/accumulate; the metrics go to
   p. Then, when `step`, gradient clipping and the optimizer step. */
static int gdl__fit_batch(gdl_module *m, gdl_tensor *x, gdl_tensor *y, gdl_optimizer *opt, const gdl_fit_opts *o,
                          gdl_loss_fn loss, int64_t parts, int step, gdl__pass *p) {
    int64_t B = x->shape[0], k;
    if (o->scaler && gdl__scaler_rearm(o->scaler, opt) < 0) return -1; /* after a failed attempt */
    for (k = 0; k < parts; k++) {
        int64_t lo = B * k / parts, hi = B * (k + 1) / parts;
        gdl_tensor *xs = x, *ys = y, *out, *lt;
        double scale = (double)(hi - lo) / (double)B / o->accumulate;
        if (hi == lo) continue;
        gdl_arena_reset();
        if (parts > 1 && (!(xs = gdl_slice(x, lo, hi)) || !(ys = gdl_slice(y, lo, hi)))) return -1;
        /* the region opens after the reset: its cached casts are this step's temporaries */
        if (o->autocast != GDL_F32 && gdl_autocast_begin(o->autocast) < 0) return -1;
        out = o->ddp ? gdl_ddp_forward(o->ddp, xs) : gdl_forward(m, xs);
        lt = out ? loss(out, ys, o->loss_user) : NULL;
        if (o->autocast != GDL_F32) gdl_autocast_end();
        if (!lt) return -1;
        if (gdl__pass_batch(p, out, ys, lt) < 0) return -1; /* on the device: no read back */
        if (scale != 1) lt = gdl_mul_scalar(lt, scale);
        if (lt && o->scaler) lt = gdl_grad_scaler_scale(o->scaler, lt);
        if (!lt) return -1;
        if (o->ddp) { /* the ranks' gradients are averaged once per optimizer step: at its last backward */
            gdl_ddp_set_no_sync(o->ddp, !(step && k == parts - 1));
            if (gdl_ddp_backward(o->ddp, lt) < 0) return -1;
        } else if (gdl_backward(lt) < 0) {
            return -1;
        }
    }
    if (!step) return 0;
    if (o->scaler && o->clip_grad_norm > 0 && gdl_grad_scaler_unscale(o->scaler, opt) < 0) return -1;
    if (o->clip_grad_norm > 0) { /* clipped on the device: nothing read back */
        gdl_tensor **ps = (gdl_tensor **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor *) *
                                                                                 (size_t)(opt->nparams + 1));
        int i;
        if (!ps) {
            gdl__set_error("gdl_fit: out of memory");
            return -1;
        }
        for (i = 0; i < opt->nparams; i++) ps[i] = opt->params[i].p;
        if (gdl_clip_grad_norm_nosync(ps, opt->nparams, o->clip_grad_norm) < 0) return -1;
    }
    if (o->scaler) return gdl_grad_scaler_step(o->scaler, opt) < 0 ? -1 : gdl_grad_scaler_update(o->scaler);
    return gdl_step(opt);
}

/* gdl_fit's CUDA graphs (src/api/graph.h): one per input buffer and batch shape.
   The loader delivers a GPU's batches into two fixed device buffers in turn
   (gdl__loader_deliver: its events order each copy after the steps that read
   the buffer before), so a graph recorded on each buffer reads the batch
   where the loader wrote it, and a replay copies nothing: two buffers times
   two shapes (the full batches and the last, partial one). */
#define GDL__FIT_GRAPHS 4
static gdl_graph *gdl__graph_record(const char *op, gdl_device dev, int (*step)(void *ctx), void *ctx);

typedef struct gdl__fit_step { /* what a recorded step works on */
    gdl_module *m;
    gdl_optimizer *opt;
    const gdl_fit_opts *o;
    gdl_loss_fn loss;
    gdl__pass *p;
    gdl_tensor *x, *y;
} gdl__fit_step;

typedef struct gdl__fit_graph {
    int used;           /* 0: a free slot */
    gdl_graph *g;       /* NULL (used): the step could not be captured, so batches of this shape run eagerly */
    const void *xd, *yd; /* the input buffers it reads ... */
    int ndim;           /* ... and the batch's shape and dtypes */
    int64_t shape[GDL_MAX_DIMS], ny, ny1; /* y: [ny] labels, or [ny, ny1] soft targets (mixup/cutmix) */
    gdl_dtype xdt, ydt;
    gdl__fit_step ctx;
} gdl__fit_graph;

/* x and y have the shapes and dtypes fg was recorded for (same_buffers: and are its buffers) */
static int gdl__fit_graph_fits(const gdl__fit_graph *fg, const gdl_tensor *x, const gdl_tensor *y, int same_buffers) {
    if (!fg->used || fg->xdt != x->dtype || fg->ydt != y->dtype || fg->ndim != x->ndim || y->ndim < 1 ||
        y->ndim > 2 || fg->ny != y->shape[0] || fg->ny1 != (y->ndim == 2 ? y->shape[1] : 0) || memcmp(fg->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) != 0)
        return 0;
    return !same_buffers || (fg->xd == x->data && fg->yd == y->data);
}

/* The graph slot for the batch (x, y), and what to do with it: *capture 0: replay it (or, with a NULL
   graph, run eagerly: this shape's capture failed before); 1: run this step eagerly, then record the
   next one (the shape's first step: it makes what the step allocates); 2: record now and replay (another
   buffer of a shape recorded already: everything is made). NULL: eagerly (no slot left). */
static gdl__fit_graph *gdl__fit_graph_find(gdl__fit_graph *graphs, const gdl_tensor *x, const gdl_tensor *y,
                                           int *capture) {
    int k, warm = 0;
    *capture = 0;
    if (x->ndim > GDL_MAX_DIMS || y->ndim < 1 || y->ndim > 2) return NULL;
    for (k = 0; k < GDL__FIT_GRAPHS; k++)
        if (gdl__fit_graph_fits(&graphs[k], x, y, 1)) return &graphs[k];
    for (k = 0; k < GDL__FIT_GRAPHS; k++)
        if (gdl__fit_graph_fits(&graphs[k], x, y, 0)) {
            if (!graphs[k].g) return &graphs[k]; /* this shape cannot be captured: eager, no new attempt */
            warm = 1;
        }
    for (k = 0; k < GDL__FIT_GRAPHS; k++)
        if (!graphs[k].used) {
            *capture = warm ? 2 : 1;
            return &graphs[k];
        }
    return NULL;
}

/* what the graph holds: the eager path's step of one whole batch and its zero_grad */
static int gdl__fit_graph_step(void *c) {
    gdl__fit_step *s = (gdl__fit_step *)c;
    if (gdl__fit_batch(s->m, s->x, s->y, s->opt, s->o, s->loss, 1, 1, s->p) < 0) return -1;
    return gdl_zero_grad(s->opt);
}

/* Records the step on the batch (x, y) in the buffers where it lies, after a step of this shape has run
   (so its memory exists). A failure is not an error: the slot stays eager and *why says why. */
static void gdl__fit_graph_capture(gdl__fit_graph *fg, gdl_tensor *x, gdl_tensor *y, gdl_module *m,
                                   gdl_optimizer *opt, const gdl_fit_opts *o, gdl_loss_fn loss, gdl__pass *p,
                                   char *why, size_t whylen) {
    int64_t steps = opt->steps;
    fg->used = 1;
    fg->xd = x->data;
    fg->yd = y->data;
    fg->ndim = x->ndim;
    memset(fg->shape, 0, sizeof fg->shape);
    memcpy(fg->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    fg->ny = y->shape[0];
    fg->ny1 = y->ndim == 2 ? y->shape[1] : 0;
    fg->xdt = x->dtype;
    fg->ydt = y->dtype;
    fg->ctx.m = m;
    fg->ctx.opt = opt;
    fg->ctx.o = o;
    fg->ctx.loss = loss;
    fg->ctx.p = p;
    fg->ctx.x = x; /* read while recording only: a replay runs the kernels on the buffers */
    fg->ctx.y = y;
    fg->g = gdl__graph_record("gdl_fit", x->device, gdl__fit_graph_step, &fg->ctx);
    opt->steps = steps; /* the recorded gdl_step counted a step that did not run */
    if (!fg->g) snprintf(why, whylen, "%s", gdl_last_error());
}

static void gdl__fit_graphs_free(gdl__fit_graph *fg) {
    int k;
    for (k = 0; k < GDL__FIT_GRAPHS; k++) gdl_graph_free(fg[k].g);
    memset(fg, 0, sizeof(gdl__fit_graph) * GDL__FIT_GRAPHS);
}

/* gdl_fit's run: the options as applied, where it is, and what it holds. */
typedef struct gdl__fit_run {
    gdl_module *m;
    gdl_loader *train;
    gdl_optimizer *opt;
    gdl_fit_opts o;
    gdl_loss_fn loss;
    FILE *log, *csv;
    int rank0, tty, resumed, start_epoch, graph_notice;
    int64_t nb, parts; /* the loader's batches per epoch; micro-batches per batch (oom_split_batch) */
    char *ckpath;      /* the checkpoint file; NULL without checkpoint_dir */
    gdl__fit_state fs; /* as loaded on resume, as saved at a checkpoint */
    gdl__pass p;
    gdl__fit_graph graphs[GDL__FIT_GRAPHS];
    int epoch, micro; /* the epoch under way; micro-batches of the optimizer step so far */
    int64_t b;        /* its batches so far */
    int preempted;    /* opts.preempt: the signal that stopped the run (src/dist/cluster.h) */
    double t0;        /* when it started (earlier on resume: its time before the checkpoint counts) */
    double es_best, best; /* the monitored figure: best by more than min_delta (early stopping), best at all */
    int es_wait, stopped; /* epochs since es_best improved; early stopping ended the run */
} gdl__fit_run;

/* Records fg on the batch (x, y); a failure leaves the step eager and says so once. */
static void gdl__fit_graph_try(gdl__fit_run *r, gdl__fit_graph *fg, gdl_tensor *x, gdl_tensor *y) {
    char why[sizeof gdl__err];
    why[0] = 0;
    gdl__fit_graph_capture(fg, x, y, r->m, r->opt, &r->o, r->loss, &r->p, why, sizeof why);
    if (!fg->g && r->o.verbose && !r->graph_notice++)
        fprintf(r->log, "%sgdl_fit: the step runs eagerly, not as a CUDA graph: %s\n", r->tty ? "\n" : "", why);
}

/* The arguments and options checked and applied (r->o: as gdl_fit runs them). */
static int gdl__fit_check(gdl__fit_run *r, gdl_module *m, gdl_loader *train, gdl_optimizer *opt,
                          const gdl_fit_opts *opts) {
    gdl_fit_opts *o = &r->o;
    memset(r, 0, sizeof *r);
    *o = opts ? *opts : gdl_fit_defaults();
    r->m = m;
    r->train = train;
    r->opt = opt;
    r->loss = o->loss ? o->loss : gdl_loss_cross_entropy;
    r->log = o->log ? o->log : stdout;
    r->rank0 = !o->ddp || gdl_dist_rank() == 0;
    r->start_epoch = 1;
    r->nb = train ? gdl_loader_num_batches(train) : 0;
    r->parts = 1;
    if (!m || !train || !opt) {
        gdl__null_arg("gdl_fit", !m ? "module" : !train ? "train loader" : "optimizer");
        return -1;
    }
    if (o->autocast != GDL_F32 && o->autocast != GDL_BF16 && o->autocast != GDL_F16) {
        gdl__set_error("gdl_fit: the autocast option must be bf16, f16 or f32 (off), got %s", gdl_dtype_name(o->autocast));
        return -1;
    }
    if (o->epochs < 0 || o->accumulate < 0 || o->checkpoint_every < 0) {
        gdl__set_error("gdl_fit: bad epochs %d, accumulate %d or checkpoint_every %lld", o->epochs, o->accumulate,
                       (long long)o->checkpoint_every);
        return -1;
    }
    if ((o->checkpoint_every > 0 || o->resume) && !o->checkpoint_dir) {
        gdl__set_error("gdl_fit: checkpoint_every and resume need checkpoint_dir");
        return -1;
    }
    if (o->accumulate == 0) o->accumulate = 1;
    if (o->preempt && !o->checkpoint_dir) {
        gdl__set_error("gdl_fit: preempt needs checkpoint_dir: a signal stops the run after a checkpoint there");
        return -1;
    }
    if (o->monitor < GDL_MONITOR_VAL_LOSS || o->monitor > GDL_MONITOR_LOSS || o->mode < GDL_MODE_AUTO ||
        o->mode > GDL_MODE_MAX || o->patience < 0 || !(o->min_delta >= 0 && o->min_delta < HUGE_VAL)) {
        gdl__set_error("gdl_fit: bad monitor %d (0 val_loss, 1 val_accuracy, 2 loss), mode %d (0 auto, 1 min, 2 max), "
                       "patience %d (>= 0) or min_delta %g (finite, >= 0)", o->monitor, o->mode, o->patience,
                       o->min_delta);
        return -1;
    }
    if ((o->patience > 0 || o->best_path) && o->monitor != GDL_MONITOR_LOSS && !o->val) {
        gdl__set_error("gdl_fit: early stopping and best_path monitor the %s, which needs a validation loader (val)",
                       o->monitor == GDL_MONITOR_VAL_LOSS ? "validation loss" : "validation accuracy");
        return -1;
    }
    r->es_best = r->best = NAN;
    if (o->ddp && gdl_ddp_module(o->ddp) != m) {
        gdl__set_error("gdl_fit: opts.ddp wraps another module than the one given");
        return -1;
    }
    /* the scaler's state goes into the checkpoints and comes back on resume */
    if (o->scaler && opt->scaler != o->scaler && gdl_optim_set_grad_scaler(opt, o->scaler) < 0) return -1;
    if (!r->rank0) { /* under DDP only rank 0 shows and writes */
        o->verbose = 0;
        o->csv_path = NULL;
    }
    r->tty = o->verbose && gdl__isatty(r->log);
    return 0;
}

/* checkpoint_dir: the checkpoint's path, the directory made, and with resume whether to resume (r->resumed).
   On failure nothing is left to free. */
static int gdl__fit_checkpoint_dir(gdl__fit_run *r) {
    const gdl_fit_opts *o = &r->o;
    size_t cl = strlen(o->checkpoint_dir) + 32;
    FILE *probe;
    double have = 0;
    if (!(r->ckpath = (char *)GPUDL_MALLOC(cl))) {
        gdl__set_error("gdl_fit: out of memory (host)");
        return -1;
    }
    snprintf(r->ckpath, cl, "%s/gdl_fit.safetensors", o->checkpoint_dir);
    if (gdl__os_mkdir(o->checkpoint_dir) != 0 && errno != EEXIST) {
        gdl__set_error("gdl_fit: cannot create checkpoint_dir %s: %s", o->checkpoint_dir, gdl__strerr(errno));
        GPUDL_FREE(r->ckpath);
        return -1;
    }
    if (!o->resume) return 0;
    if (r->rank0 && (probe = fopen(r->ckpath, "rb")) != NULL) {
        fclose(probe);
        have = 1;
    }
    /* under DDP rank 0's word: every rank resumes, or none does */
    if (o->ddp && gdl__dist_reduce_f64("gdl_fit", "the look for a checkpoint to resume from", &have, 1, 1) < 0) {
        GPUDL_FREE(r->ckpath);
        return -1;
    }
    r->resumed = have > 0;
    return 0;
}

/* Resume: model, optimizer, scheduler and generator from the checkpoint, the loaders where it was taken. */
static int gdl__fit_resume(gdl__fit_run *r) {
    const gdl_fit_opts *o = &r->o;
    gdl__fit_state *fs = &r->fs;
    /* checked before anything changes (on every rank, under DDP); then model, optimizer, scheduler
       and generator at once */
    if (gdl__fit_load(r->ckpath, r->m, r->opt, o->scheduler, fs, r->train, o->epochs, o->ddp != NULL) < 0) return -1;
    /* cannot fail: the position was checked against this loader */
    gdl_loader_set_position(r->train, (uint64_t)fs->loader_epoch, fs->batch);
    if (o->val && fs->val_epoch >= 0) gdl_loader_set_epoch(o->val, (uint64_t)fs->val_epoch);
    if (!r->rank0) /* the checkpoint's running sums are the job's: rank 0 carries them */
        fs->loss_sum = 0, fs->samples = fs->correct = fs->counted = 0;
    r->start_epoch = (int)fs->epoch;
    r->es_best = fs->es_best, r->best = fs->best, r->es_wait = (int)fs->es_wait;
    if (o->verbose)
        fprintf(r->log, "resuming from %s: epoch %d, batch %lld of %lld\n", r->ckpath, r->start_epoch,
                (long long)fs->batch, (long long)r->nb);
    return 0;
}

/* Everything before the first epoch: checks, the checkpoint directory, resume, the metrics CSV, and the
   history of the epochs a resumed run finished before its checkpoint. Nothing to free on failure. */
static int gdl__fit_begin(gdl__fit_run *r, gdl_module *m, gdl_loader *train, gdl_optimizer *opt,
                          const gdl_fit_opts *opts, gdl_epoch_stats *history) {
    int epoch;
    if (gdl__fit_check(r, m, train, opt, opts) < 0) return -1;
    if (r->o.checkpoint_dir && gdl__fit_checkpoint_dir(r) < 0) return -1;
    if (r->resumed && gdl__fit_resume(r) < 0) {
        GPUDL_FREE(r->ckpath);
        return -1;
    }
    if (r->o.csv_path && !(r->csv = r->resumed ? gdl__csv_resume(r->o.csv_path, r->start_epoch)
                                               : gdl_metrics_csv_open(r->o.csv_path))) {
        GPUDL_FREE(r->ckpath); /* the error says which file and why */
        return -1;
    }
    if (history)
        for (epoch = 1; epoch < r->start_epoch; epoch++) { /* finished before the checkpoint: not known here */
            memset(&history[epoch - 1], 0, sizeof history[0]);
            history[epoch - 1].epoch = epoch;
            history[epoch - 1].loss = history[epoch - 1].accuracy = NAN;
            history[epoch - 1].val_loss = history[epoch - 1].val_accuracy = NAN;
            history[epoch - 1].seconds = history[epoch - 1].samples_per_sec = NAN;
        }
    return 0;
}

/* What a failed attempt at a batch may have changed, to put back before the next. */
typedef struct gdl__fit_undo {
    double loss_sum;
    int64_t samples, correct, counted;
    uint64_t rng_seed, rng_counter;
} gdl__fit_undo;

static int gdl__fit_undo_save(gdl__fit_run *r, gdl__fit_undo *u, gdl_device dev) {
    u->loss_sum = r->p.loss_sum;
    u->samples = r->p.samples, u->correct = r->p.correct, u->counted = r->p.counted;
    u->rng_seed = gdl_rng_get_state(&u->rng_counter);
    return gdl__pass_init(&r->p, "gdl_fit", dev) < 0 || gdl__pass_snapshot(&r->p, 1) < 0 ? -1 : 0;
}

/* Back to before the attempt, with the cached memory given back. */
static int gdl__fit_undo_apply(gdl__fit_run *r, const gdl__fit_undo *u) {
    r->p.loss_sum = u->loss_sum;
    r->p.samples = u->samples, r->p.correct = u->correct, r->p.counted = u->counted;
    if (gdl__pass_snapshot(&r->p, 0) < 0) return -1;
    gdl_rng_set_state(u->rng_seed, u->rng_counter);
    gdl_arena_reset();
    gdl__fit_graphs_free(r->graphs); /* their kernels write into the memory given back next */
    gdl__release_cached_memory();
    return gdl_zero_grad(r->opt);
}

/* After an out-of-memory failure of an attempt: try again? (retried: an attempt was retried already.) From the
   second retry on, or the first without oom_retry, the batch runs in twice as many micro-batches. */
static int gdl__fit_oom_again(gdl__fit_run *r, const gdl_tensor *x, int retried) {
    if (retried && (!r->o.oom_split_batch || 2 * r->parts > x->shape[0])) return 0;
    if (!retried && !r->o.oom_retry && !r->o.oom_split_batch) return 0;
    if (retried || !r->o.oom_retry) { /* the same batch in twice as many parts, from now on */
        r->parts *= 2;
        if (r->o.verbose)
            fprintf(r->log, "%sgdl_fit: out of memory at epoch %d, batch %lld; running each batch as %lld "
                    "micro-batches from now on (%s)\n", r->tty ? "\n" : "", r->epoch, (long long)r->b,
                    (long long)r->parts, gdl__err);
    }
    return 1;
}

/* One batch eagerly (forward, backward and, when last, the optimizer step); an out of memory on the first
   micro-batch of a step is retried and split as the options allow, and the error says where it stopped. */
static int gdl__fit_eager(gdl__fit_run *r, gdl_tensor *x, gdl_tensor *y, int first, int last) {
    gdl__fit_undo u;
    int rc, retried = 0;
    if (gdl__fit_undo_save(r, &u, x->device) < 0) return -1;
    while ((rc = gdl__fit_batch(r->m, x, y, r->opt, &r->o, r->loss, r->parts, last, &r->p)) < 0 && first &&
           gdl__error_is_oom()) {
        if (!gdl__fit_oom_again(r, x, retried)) break;
        retried = 1;
        if (gdl__fit_undo_apply(r, &u) < 0) break;
    }
    if (rc < 0 && gdl__error_is_oom())
        gdl__error_context("gdl_fit: epoch %d, batch %lld of %lld (the model and optimizer are as after the "
                           "last completed step%s)", r->epoch, (long long)r->b, (long long)r->nb,
                           !first ? "; an out-of-memory failure is retried only on the first micro-batch "
                                    "of an optimizer step"
                           : retried ? ", after retrying with the cached memory given back"
                                     : "; oom_retry and oom_split_batch can recover");
    return rc;
}

/* A recorded step of this batch's buffers and shape: one launch. */
static int gdl__fit_replay(gdl__fit_run *r, gdl__fit_graph *fg) {
    if (gdl_graph_replay(fg->g) < 0) return -1;
    r->opt->steps++;
    r->micro = 0;
    return r->o.scheduler && r->o.scheduler_per_batch && gdl_scheduler_step(r->o.scheduler) < 0 ? -1 : 0;
}

/* The checkpoint after an optimizer step: the running figures (under DDP: the job's, over every rank) and
   where the run is, saved by rank 0; every rank learns whether the save worked. */
static int gdl__fit_checkpoint(gdl__fit_run *r) {
    gdl__fit_state *fs = &r->fs;
    gdl__pass *p = &r->p;
    double v[5];
    int rc = 0;
    if (gdl__pass_sync(p) < 0) rc = -1;
    fs->epoch = r->epoch;
    fs->batch = r->b;
    fs->loader_epoch = (int64_t)gdl_loader_epoch(r->train);
    fs->num_batches = r->nb;
    fs->val_epoch = r->o.val ? (int64_t)gdl_loader_epoch(r->o.val) : -1;
    fs->seconds = gdl_now() - r->t0;
    fs->loss_sum = p->loss_sum;
    fs->samples = p->samples;
    fs->correct = p->correct;
    fs->counted = p->counted;
    fs->replicas = r->train->o.num_replicas > 1 ? r->train->o.num_replicas : 1;
    fs->batch_size = r->train->B;
    fs->es_best = r->es_best, fs->best = r->best, fs->es_wait = r->es_wait;
    if (!r->o.ddp) return rc == 0 && gdl__fit_save(r->ckpath, r->m, r->opt, r->o.scheduler, fs) < 0 ? -1 : rc;
    /* under DDP the checkpoint holds the job's running figures (every rank's), so that a
       restart with another number of ranks counts them once */
    v[0] = rc < 0, v[1] = p->loss_sum, v[2] = (double)p->samples, v[3] = (double)p->correct;
    v[4] = (double)p->counted;
    if (gdl__dist_reduce_f64("gdl_fit", "the checkpoint's running sums", v, 5, 0) != 0) return -1;
    if (v[0] > 0 && rc == 0)
        gdl__set_error("gdl_fit: %.0f rank(s) failed at the checkpoint of step %lld", v[0],
                       (long long)gdl_optim_get_step(r->opt));
    if (v[0] > 0) rc = -1;
    fs->loss_sum = v[1], fs->samples = (int64_t)v[2], fs->correct = (int64_t)v[3];
    fs->counted = (int64_t)v[4];
    if (rc == 0 && r->rank0 && gdl__fit_save(r->ckpath, r->m, r->opt, r->o.scheduler, fs) < 0) rc = -1;
    /* every rank learns whether rank 0's save worked, and none goes on before the file
       is whole (a barrier): a later resume on any rank reads the complete checkpoint */
    if (gdl__dist_agree("gdl_fit", "saving the checkpoint (rank 0)", rc == 0) < 0) rc = -1;
    return rc;
}

/* gdl_fit after an optimizer step, with opts.preempt: a signal caught on any rank (the ranks agree) stops
   the run here, after a checkpoint of this step (unless checkpoint_every just wrote it). 0: go on; 1:
   stopped, saved; -1 + error. */
static int gdl__fit_preempt(gdl__fit_run *r) {
    int sig = r->o.ddp ? gdl_preempt_check() : gdl_preempt_signal();
    if (sig <= 0) return sig;
    if (!(r->o.checkpoint_every > 0 && gdl_optim_get_step(r->opt) % r->o.checkpoint_every == 0) &&
        gdl__fit_checkpoint(r) < 0)
        return -1;
    r->preempted = sig;
    if (r->o.verbose)
        fprintf(r->log, "%sgdl_fit: signal %d at epoch %d, batch %lld of %lld (step %lld): checkpoint saved to %s; "
                "stopping (resume = 1 continues from it)\n", r->tty ? "\n" : "", sig, r->epoch, (long long)r->b,
                (long long)r->nb, (long long)gdl_optim_get_step(r->opt), r->ckpath);
    return 1;
}

/* The progress bar, when one is due: the only read of the device in a step. */
static int gdl__fit_progress(gdl__fit_run *r, const gdl_tensor *x) {
    gdl__pass *p = &r->p;
    if (!r->tty || !gdl__progress_due(r->log, r->b, r->nb)) return 0;
    if (gdl__pass_sync(p) < 0) return -1;
    if (gdl_progress_bar(r->log, r->epoch, r->o.epochs, r->b, r->nb, p->samples ? p->loss_sum / (double)p->samples : 0.0,
                         gdl__pass_acc(p), p->samples, r->t0))
        gdl__progress_gpu(r->log, x->device);
    return 0;
}

/* One batch of the loader: the step (replayed as a CUDA graph where one is recorded, else eagerly, with the
   graph recorded after the first step of its shape), then the checkpoint and the progress bar. */
static int gdl__fit_train_batch(gdl__fit_run *r, gdl_tensor *x, gdl_tensor *y) {
    const gdl_fit_opts *o = &r->o;
    gdl__fit_graph *fg = NULL;
    int first, last, capture = 0, stop;
    r->b++;
    first = r->micro == 0;
    last = ++r->micro == o->accumulate || r->b == r->nb;
    if (o->cuda_graph && x->device.type == GDL_DEVICE_CUDA && o->accumulate == 1 && r->parts == 1 && !o->ddp)
        fg = gdl__fit_graph_find(r->graphs, x, y, &capture);
    if (fg && capture == 2) gdl__fit_graph_try(r, fg, x, y); /* the other buffer of a recorded shape: record it now */
    if (fg && fg->g) {
        if (gdl__fit_replay(r, fg) < 0) return -1;
    } else {
        if (gdl__fit_eager(r, x, y, first, last) < 0) return -1;
        if (last) {
            r->micro = 0;
            if (gdl_zero_grad(r->opt) < 0) return -1;
            if (o->scheduler && o->scheduler_per_batch && gdl_scheduler_step(o->scheduler) < 0) return -1;
            if (fg && capture == 1) gdl__fit_graph_try(r, fg, x, y); /* this shape's first step ran: record it */
        }
    }
    if (last && o->checkpoint_every > 0 && gdl_optim_get_step(r->opt) % o->checkpoint_every == 0 &&
        gdl__fit_checkpoint(r) < 0)
        return -1;
    if (last && o->preempt && (stop = gdl__fit_preempt(r)) != 0) return stop; /* 1: stopped by a signal */
    return gdl__fit_progress(r, x);
}

/* Early stopping and the best model after an epoch's figures st (with an EMA, while its weights are swapped in,
   so the best model is the one validated): r->stopped set when patience runs out. 0 / -1. */
static int gdl__fit_monitor(gdl__fit_run *r, const gdl_epoch_stats *st) {
    const gdl_fit_opts *o = &r->o;
    double v = o->monitor == GDL_MONITOR_VAL_LOSS ? st->val_loss : o->monitor == GDL_MONITOR_VAL_ACCURACY
                                                                       ? st->val_accuracy : st->loss;
    int maxi = o->mode == GDL_MODE_MAX || (o->mode == GDL_MODE_AUTO && o->monitor == GDL_MONITOR_VAL_ACCURACY);
    double sign = maxi ? 1 : -1; /* improvements are increases of sign * v; NaN never improves */
    int rc = 0, stop;
    if (o->patience <= 0 && !o->best_path) return 0;
    if (o->ddp) { /* each rank's figure is its shard's: every rank decides on their mean, so all decide alike */
        if (gdl__dist_reduce_f64("gdl_fit", "the monitored figure", &v, 1, 0) != 0) return -1;
        v /= (double)gdl_dist_world_size();
    }
    if (o->best_path && v == v && !(sign * v <= sign * r->best)) {
        r->best = v;
        if (r->rank0 && gdl_save_model(r->m, o->best_path) < 0) rc = -1;
        if (o->ddp && gdl__dist_agree("gdl_fit", "saving the best model (rank 0)", rc == 0) < 0) rc = -1;
        if (rc < 0) return -1;
    }
    if (o->patience <= 0) return 0;
    if (v == v && (r->es_best != r->es_best || sign * (v - r->es_best) > o->min_delta)) {
        r->es_best = v;
        r->es_wait = 0;
    } else {
        r->es_wait++;
    }
    stop = r->es_wait >= o->patience;
    r->stopped = stop;
    if (stop && o->verbose) fprintf(r->log, "gdl_fit: early stopping after epoch %d: no improvement in %d epochs\n",
                                    r->epoch, o->patience);
    return 0;
}

/* The end of an epoch: the scheduler's epoch step, the epoch's figures, validation, history, output, CSV. */
static int gdl__fit_epoch_metrics(gdl__fit_run *r, gdl_epoch_stats *history) {
    const gdl_fit_opts *o = &r->o;
    const gdl__pass *p = &r->p;
    gdl_epoch_stats st;
    if (o->scheduler && !o->scheduler_per_batch && gdl_scheduler_step(o->scheduler) < 0) return -1;
    memset(&st, 0, sizeof st);
    st.epoch = r->epoch;
    st.seconds = gdl_now() - r->t0;
    st.samples = p->samples;
    st.loss = p->samples ? p->loss_sum / (double)p->samples : NAN;
    st.accuracy = gdl__pass_acc(p);
    st.samples_per_sec = st.seconds > 0 ? (double)p->samples / st.seconds : 0;
    st.val_loss = st.val_accuracy = NAN;
    if (o->val) {
        int erc;
        gdl_ema *ema = r->opt->ema; /* validated with the averaged weights, swapped in and back */
        if (ema && gdl_ema_swap(ema) < 0) return -1;
        if (o->autocast != GDL_F32 && gdl_autocast_begin(o->autocast) < 0) erc = -1;
        else {
            erc = gdl_evaluate_ex(r->m, o->val, o->loss, o->loss_user, o->val_tta_hflip, &st.val_loss,
                                  &st.val_accuracy);
            if (o->autocast != GDL_F32) gdl_autocast_end();
        }
        if (erc == 0 && gdl__fit_monitor(r, &st) < 0) erc = -1;
        if (ema && gdl_ema_swap(ema) < 0) erc = -1;
        if (erc < 0) return -1;
    } else if (gdl__fit_monitor(r, &st) < 0) {
        return -1;
    }
    if (history) history[r->epoch - 1] = st;
    if (o->verbose) gdl_print_epoch(r->log, o->epochs, &st);
    return r->csv && gdl_metrics_csv_row(r->csv, &st) < 0 ? -1 : 0;
}

/* One epoch: its batches (the first epoch of a resumed run from where the checkpoint was taken), then the
   epoch's figures (under DDP over every rank) and the metrics. */
static int gdl__fit_epoch(gdl__fit_run *r, int epoch, gdl_epoch_stats *history) {
    gdl__pass *p = &r->p;
    gdl_tensor *x, *y;
    int rc = 0, got;
    r->epoch = epoch;
    r->b = 0;
    r->micro = 0;
    r->t0 = gdl_now();
    p->loss_sum = 0;
    p->samples = p->correct = p->counted = 0;
    if (r->resumed && epoch == r->start_epoch) { /* the epoch the checkpoint was taken in, part done */
        r->b = r->fs.batch;
        r->t0 -= r->fs.seconds; /* its time so far counts, for the rate and the CSV */
        p->loss_sum = r->fs.loss_sum;
        p->samples = r->fs.samples;
        p->correct = r->fs.correct;
        p->counted = r->fs.counted;
    }
    gdl_module_train(r->m, 1);
    if (gdl_zero_grad(r->opt) < 0) rc = -1;
    while (rc == 0 && (got = gdl_loader_next(r->train, &x, &y)) != 0)
        rc = got < 0 ? -1 : gdl__fit_train_batch(r, x, y);
    if (rc > 0) return 1; /* preempted: a checkpoint of this step is saved */
    if (rc == 0 && gdl__pass_sync(p) < 0) rc = -1;
    if (rc == 0 && r->o.ddp && gdl__dist_pass_sum(p) < 0) rc = -1; /* the epoch's figures over every rank */
    if (rc < 0) return -1;
    return gdl__fit_epoch_metrics(r, history);
}

GPUDL_API int gdl_fit(gdl_module *m, gdl_loader *train, gdl_optimizer *opt, const gdl_fit_opts *opts,
                      gdl_epoch_stats *history) {
    gdl__fit_run r;
    int epoch, rc = 0, catching = opts && opts->preempt;
    if (catching && gdl_preempt_catch(1) < 0) return -1; /* src/dist/cluster.h */
    if (gdl__fit_begin(&r, m, train, opt, opts, history) < 0) {
        if (catching) gdl_preempt_catch(0);
        return -1;
    }
    for (epoch = r.start_epoch; epoch <= r.o.epochs && rc == 0 && !r.stopped; epoch++)
        rc = gdl__fit_epoch(&r, epoch, history);
    for (; rc == 0 && history && epoch <= r.o.epochs; epoch++) { /* stopped early: the epochs not run */
        memset(&history[epoch - 1], 0, sizeof *history);
        history[epoch - 1].loss = history[epoch - 1].accuracy = NAN;
        history[epoch - 1].val_loss = history[epoch - 1].val_accuracy = NAN;
    }
    gdl__fit_graphs_free(r.graphs);
    gdl__pass_free(&r.p);
    if (r.csv) fclose(r.csv);
    GPUDL_FREE(r.ckpath);
    if (rc < 0 && r.tty) fputc('\n', r.log);
    if (catching) gdl_preempt_catch(0);
    return rc < 0 ? -1 : rc > 0 ? GDL_FIT_PREEMPTED : 0;
}
