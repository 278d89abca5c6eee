/* src/train/gradscaler.h — GradScaler (torch.amp.GradScaler). */

/* ---- GradScaler (torch.amp.GradScaler) ----
   The scale, the growth tracker and found_inf are tensors on the device of
   the first loss scaled; every call queues work on that device and reads
   nothing back, so a captured step with the scaler replays right. Each
   optimizer has a skip flag in its flat block that its kernels read (a
   skipped step changes nothing, step counts included): unscale sets it
   with found_inf, update clears it. Per optimizer, as PyTorch's
   _per_optimizer_states: READY, UNSCALED, STEPPED between updates. */
enum { GDL__SC_READY = 0, GDL__SC_UNSCALED, GDL__SC_STEPPED };

typedef struct gdl__scaler_opt {
    gdl_optimizer *opt;
    int stage;
} gdl__scaler_opt;

struct gdl_grad_scaler {
    gdl_grad_scaler_opts o;
    gdl_tensor *scale, *found_inf, *tracker; /* f32, f32, i32 scalars on dev; NULL until the first scale */
    gdl_device dev;
    double pending_scale;                    /* the state until then */
    int64_t pending_tracker;
    int nopts, cap_opts;
    gdl__scaler_opt *opts;                   /* the optimizers attached (opt->scaler == this) */
};

GPUDL_API gdl_grad_scaler_opts gdl_grad_scaler_defaults(void) {
    gdl_grad_scaler_opts o;
    o.init_scale = 65536.0;
    o.growth_factor = 2.0;
    o.backoff_factor = 0.5;
    o.growth_interval = 2000;
    o.enabled = 1;
    return o;
}

GPUDL_API gdl_grad_scaler *gdl_grad_scaler_new(const gdl_grad_scaler_opts *opts) {
    const char *op = "gdl_grad_scaler_new";
    gdl_grad_scaler_opts o = opts ? *opts : gdl_grad_scaler_defaults();
    gdl_grad_scaler *s;
    if (!(o.init_scale > 0) || o.init_scale - o.init_scale != 0 || (float)o.init_scale - (float)o.init_scale != 0) {
        gdl__set_error("%s: init_scale %g must be > 0 and finite as a float", op, o.init_scale);
        return NULL;
    }
    if (!(o.growth_factor > 1) || o.growth_factor - o.growth_factor != 0) {
        gdl__set_error("%s: growth_factor %g must be > 1 and finite", op, o.growth_factor);
        return NULL;
    }
    if (!(o.backoff_factor > 0 && o.backoff_factor < 1)) {
        gdl__set_error("%s: backoff_factor %g must be in (0,1)", op, o.backoff_factor);
        return NULL;
    }
    if (o.growth_interval < 1) {
        gdl__set_error("%s: growth_interval %d must be >= 1", op, o.growth_interval);
        return NULL;
    }
    if (!(s = (gdl_grad_scaler *)gdl__zalloc(op, sizeof *s))) return NULL;
    s->o = o;
    s->o.enabled = o.enabled != 0;
    s->pending_scale = (double)(float)o.init_scale;
    return s;
}

static gdl__scaler_opt *gdl__scaler_find(gdl_grad_scaler *s, const gdl_optimizer *opt) {
    int i;
    for (i = 0; i < s->nopts; i++)
        if (s->opts[i].opt == opt) return &s->opts[i];
    return NULL;
}

/* clears opt's skip flags (queued on its devices) */
static int gdl__scaler_clear_skip(const char *op, gdl_optimizer *opt) {
    int d;
    for (d = 0; d < opt->ndevs; d++) {
        const gdl_backend *be = gdl__be(op, opt->devs[d].device);
        if (!be || be->rt.memset0(opt->devs[d].skip, sizeof(gdl_real)) < 0) return -1;
    }
    return 0;
}

static void gdl__scaler_forget(gdl_grad_scaler *s, gdl_optimizer *opt) {
    gdl__scaler_opt *r = gdl__scaler_find(s, opt);
    if (r) *r = s->opts[--s->nopts];
    opt->scaler = NULL;
}

GPUDL_API int gdl_optim_set_grad_scaler(gdl_optimizer *opt, gdl_grad_scaler *s) {
    const char *op = "gdl_optim_set_grad_scaler";
    if (!opt) {
        gdl__null_arg(op, "opt");
        return -1;
    }
    if (opt->scaler == s) return 0;
    if (s && s->o.enabled && opt->master != GDL_F32) { /* as gdl_optim_set_master_weights refuses the other order */
        gdl__set_error("%s: the optimizer keeps %s parameters with f32 master weights, so its gradients are %s; a "
                       "GradScaler unscales f32 gradients (bf16 needs no loss scaling)", op,
                       gdl_dtype_name(opt->master), gdl_dtype_name(opt->master));
        return -1;
    }
    if (s && s->nopts == s->cap_opts) {
        int cap = s->cap_opts ? 2 * s->cap_opts : 4;
        gdl__scaler_opt *v = (gdl__scaler_opt *)GPUDL_REALLOC(s->opts, sizeof(gdl__scaler_opt) * (size_t)cap);
        if (!v) {
            gdl__set_error("%s: out of memory", op);
            return -1;
        }
        s->opts = v;
        s->cap_opts = cap;
    }
    if (opt->scaler) { /* a skip flag the old scaler set must not outlive it */
        if (gdl__scaler_clear_skip(op, opt) < 0) return -1;
        gdl__scaler_forget(opt->scaler, opt);
    }
    if (s) {
        s->opts[s->nopts].opt = opt;
        s->opts[s->nopts++].stage = GDL__SC_READY;
        opt->scaler = s;
    }
    return 0;
}

GPUDL_API void gdl_grad_scaler_free(gdl_grad_scaler *s) {
    if (!s) return;
    while (s->nopts > 0) {
        gdl_optimizer *opt = s->opts[0].opt;
        gdl__scaler_clear_skip("gdl_grad_scaler_free", opt);
        gdl__scaler_forget(s, opt);
    }
    gdl_free(s->scale);
    gdl_free(s->found_inf);
    gdl_free(s->tracker);
    GPUDL_FREE(s->opts);
    GPUDL_FREE(s);
}

/* the state tensors on dev, at the first scale (PyTorch's _lazy_init_scale_growth_tracker) */
static int gdl__scaler_init(const char *op, gdl_grad_scaler *s, gdl_device dev) {
    int32_t tr = (int32_t)s->pending_tracker;
    if (s->scale) return 0;
    s->scale = gdl_full(0, NULL, s->pending_scale, GDL_F32, dev);
    s->found_inf = gdl_zeros(0, NULL, GDL_F32, dev);
    s->tracker = gdl_from_array(&tr, 0, NULL, GDL_I32, dev);
    if (!s->scale || !s->found_inf || !s->tracker) {
        char prev[sizeof gdl__err];
        memcpy(prev, gdl__err, sizeof prev);
        gdl_free(s->scale);
        gdl_free(s->found_inf);
        gdl_free(s->tracker);
        s->scale = s->found_inf = s->tracker = NULL;
        gdl__set_error("%s: cannot make the scaler's state on %s: %s", op, gdl_device_str(dev), prev);
        return -1;
    }
    s->dev = dev;
    return 0;
}

static int gdl__scaler_ready(const char *op, gdl_grad_scaler *s) {
    if (s->scale) return 0;
    gdl__set_error("%s: no loss has been scaled by this GradScaler yet (call gdl_grad_scaler_scale first: the scale "
                   "lives on the loss's device)", op);
    return -1;
}

GPUDL_API gdl_tensor *gdl_grad_scaler_scale(gdl_grad_scaler *s, gdl_tensor *loss) {
    const char *op = "gdl_grad_scaler_scale";
    if (!s || !loss) {
        gdl__null_arg(op, !s ? "s" : "loss");
        return NULL;
    }
    if (!s->o.enabled) return loss;
    if (loss->dtype != GDL_F32 && loss->dtype != GDL_BF16 && loss->dtype != GDL_F16) {
        gdl__set_error("%s: the loss %s is %s; a float loss is scaled", op, gdl_shape_str(loss),
                       gdl_dtype_name(loss->dtype));
        return NULL;
    }
    if (gdl__scaler_init(op, s, loss->device) < 0) return NULL;
    if (!gdl_device_equal(s->dev, loss->device)) {
        gdl__set_error("%s: the loss is on %s but the scaler's scale is on %s; one GradScaler over several devices "
                       "is not supported (use one scaler per device)", op, gdl_device_str(loss->device),
                       gdl_device_str(s->dev));
        return NULL;
    }
    return gdl_mul(loss, s->scale);
}

/* unscale_ on one optimizer; the record exists and is READY */
static int gdl__scaler_unscale(const char *op, gdl_grad_scaler *s, gdl_optimizer *opt, gdl__scaler_opt *r) {
    const gdl_backend *be;
    int i, d;
    for (i = 0; i < opt->nparams; i++) { /* everything checked before anything changes */
        const gdl_tensor *p = opt->params[i].p;
        if (!p->grad) continue;
        if (!gdl_device_equal(p->grad->device, s->dev)) {
            gdl__set_error("%s: parameter %d %s has its gradient on %s but the scaler's scale is on %s; one GradScaler "
                           "over several devices is not supported", op, i, gdl_shape_str(p),
                           gdl_device_str(p->grad->device), gdl_device_str(s->dev));
            return -1;
        }
        if (p->grad->dtype != GDL_F32) {
            gdl__set_error("%s: parameter %d %s has a %s gradient; the scaler unscales f32 gradients", op, i,
                           gdl_shape_str(p), gdl_dtype_name(p->grad->dtype));
            return -1;
        }
    }
    if (!(be = gdl__be(op, s->dev)) || gdl__opt_layout(op, opt) < 0) return -1;
    /* one call per run of consecutive parameters whose gradients are in their slots: the whole gradient
       region in the usual case (the padding between slots is zero: the block starts zeroed and nothing
       writes there, and a zero stays finite). A slot without a gradient (zero_grad set_to_none) may hold
       an old one, so it ends a run; a gradient outside the block is a call of its own. */
    for (d = 0; d < opt->ndevs; d++) {
        gdl__opt_dev *dv = &opt->devs[d];
        char *lo = NULL, *hi = NULL;
        for (i = 0; i <= opt->nparams; i++) {
            gdl__opt_param *pp = i < opt->nparams ? &opt->params[i] : NULL;
            gdl_tensor *g = pp && pp->dev == d ? pp->p->grad : NULL;
            char *slot = pp && pp->dev == d ? gdl__opt_slot(opt, pp, 1) : NULL;
            if (pp && pp->dev != d) continue;
            if (g && g->numel && (char *)g->data == slot) {
                if (!lo) lo = slot;
                hi = slot + (size_t)g->numel * sizeof(gdl_real);
                continue;
            }
            if (lo && be->k.amp_unscale((int64_t)((size_t)(hi - lo) / sizeof(gdl_real)), (gdl_real *)lo,
                                      GDL__R(s->scale), GDL__R(s->found_inf), dv->skip) < 0)
                return -1;
            lo = hi = NULL;
            if (g && g->numel &&
                be->k.amp_unscale(g->numel, GDL__R(g), GDL__R(s->scale), GDL__R(s->found_inf), dv->skip) < 0)
                return -1;
        }
    }
    r->stage = GDL__SC_UNSCALED;
    return 0;
}

/* the record of opt in s, attaching s to opt when it has no scaler */
static gdl__scaler_opt *gdl__scaler_record(const char *op, gdl_grad_scaler *s, gdl_optimizer *opt) {
    if (opt->scaler && opt->scaler != s) {
        gdl__set_error("%s: the optimizer is attached to another GradScaler (gdl_optim_set_grad_scaler)", op);
        return NULL;
    }
    if (!opt->scaler && gdl_optim_set_grad_scaler(opt, s) < 0) return NULL;
    return gdl__scaler_find(s, opt);
}

/* unscale's and step's start: the arguments checked, opt's record (*r). 1; 0 when s is disabled; -1 + error. */
static int gdl__scaler_begin(const char *op, gdl_grad_scaler *s, gdl_optimizer *opt, gdl__scaler_opt **r) {
    if (!s || !opt) {
        gdl__null_arg(op, !s ? "s" : "opt");
        return -1;
    }
    if (!s->o.enabled) return 0;
    return gdl__scaler_ready(op, s) < 0 || !(*r = gdl__scaler_record(op, s, opt)) ? -1 : 1;
}

GPUDL_API int gdl_grad_scaler_unscale(gdl_grad_scaler *s, gdl_optimizer *opt) {
    const char *op = "gdl_grad_scaler_unscale";
    gdl__scaler_opt *r = NULL;
    const int rc = gdl__scaler_begin(op, s, opt, &r);
    if (rc <= 0) return rc;
    if (r->stage == GDL__SC_UNSCALED) {
        gdl__set_error("%s: already called for this optimizer since the last update (PyTorch: unscale_() has "
                       "already been called on this optimizer since the last update())", op);
        return -1;
    }
    if (r->stage == GDL__SC_STEPPED) {
        gdl__set_error("%s: called after gdl_grad_scaler_step for this optimizer; call gdl_grad_scaler_update first",
                       op);
        return -1;
    }
    return gdl__scaler_unscale(op, s, opt, r);
}

GPUDL_API int gdl_grad_scaler_step(gdl_grad_scaler *s, gdl_optimizer *opt) {
    const char *op = "gdl_grad_scaler_step";
    gdl__scaler_opt *r = NULL;
    const int rc = gdl__scaler_begin(op, s, opt, &r);
    if (rc <= 0) return rc < 0 ? -1 : gdl_step(opt);
    if (r->stage == GDL__SC_STEPPED) {
        gdl__set_error("%s: already called for this optimizer since the last update (call gdl_grad_scaler_update "
                       "after each step)", op);
        return -1;
    }
    if (r->stage == GDL__SC_READY && gdl__scaler_unscale(op, s, opt, r) < 0) return -1;
    /* the kernels read the skip flag: an overflow skips the update on the device */
    if (gdl_step(opt) < 0) return -1;
    r->stage = GDL__SC_STEPPED;
    return 0;
}

GPUDL_API int gdl_grad_scaler_update(gdl_grad_scaler *s) {
    const char *op = "gdl_grad_scaler_update";
    const gdl_backend *be;
    int i, any = 0;
    if (!s) {
        gdl__null_arg(op, "s");
        return -1;
    }
    if (!s->o.enabled) return 0;
    if (gdl__scaler_ready(op, s) < 0) return -1;
    for (i = 0; i < s->nopts; i++) any |= s->opts[i].stage != GDL__SC_READY;
    if (!any) {
        gdl__set_error("%s: no optimizer was unscaled or stepped with this scaler since the last update (PyTorch: "
                       "No inf checks were recorded prior to update)", op);
        return -1;
    }
    if (!(be = gdl__be(op, s->dev)) ||
        be->k.amp_update_scale(GDL__R(s->scale), (int32_t *)s->tracker->data, GDL__R(s->found_inf),
                             s->o.growth_factor, s->o.backoff_factor, s->o.growth_interval) < 0)
        return -1;
    for (i = 0; i < s->nopts; i++)
        if (s->opts[i].stage != GDL__SC_READY) {
            if (gdl__scaler_clear_skip(op, s->opts[i].opt) < 0) return -1;
            s->opts[i].stage = GDL__SC_READY;
        }
    return 0;
}

/* gdl_fit's retry of a step that failed (out of memory) after the unscale: back to the step's start (found_inf
   and the skip flag cleared: the retry computes them again). Nothing is queued when the last step ended. */
static int gdl__scaler_rearm(gdl_grad_scaler *s, gdl_optimizer *opt) {
    gdl__scaler_opt *r = s->o.enabled && s->scale ? gdl__scaler_find(s, opt) : NULL;
    const gdl_backend *be;
    if (!r || r->stage == GDL__SC_READY) return 0;
    if (!(be = gdl__be("gdl_fit", s->dev)) || be->rt.memset0(s->found_inf->data, sizeof(gdl_real)) < 0 ||
        gdl__scaler_clear_skip("gdl_fit", opt) < 0)
        return -1;
    r->stage = GDL__SC_READY;
    return 0;
}

GPUDL_API double gdl_grad_scaler_get_scale(gdl_grad_scaler *s) {
    if (!s) {
        gdl__null_arg("gdl_grad_scaler_get_scale", "s");
        return NAN;
    }
    if (!s->o.enabled) return 1.0;
    return s->scale ? gdl_item(s->scale) : s->pending_scale;
}

GPUDL_API int64_t gdl_grad_scaler_get_growth_tracker(gdl_grad_scaler *s) {
    if (!s) {
        gdl__null_arg("gdl_grad_scaler_get_growth_tracker", "s");
        return -1;
    }
    return s->tracker ? (int64_t)gdl_item(s->tracker) : s->pending_tracker;
}

GPUDL_API int gdl_grad_scaler_set_state(gdl_grad_scaler *s, double scale, int64_t growth_tracker) {
    const char *op = "gdl_grad_scaler_set_state";
    if (!s) {
        gdl__null_arg(op, "s");
        return -1;
    }
    if (!(scale > 0) || (float)scale - (float)scale != 0 || growth_tracker < 0 || growth_tracker > INT32_MAX) {
        gdl__set_error("%s: scale %g must be > 0 and finite as a float, growth_tracker %lld in [0, 2^31)", op, scale,
                       (long long)growth_tracker);
        return -1;
    }
    if (s->scale) {
        gdl_real v = (gdl_real)(float)scale;
        int32_t t = (int32_t)growth_tracker;
        if (gdl__copy_bytes(op, s->scale->data, s->dev, &v, gdl_cpu(), sizeof v) < 0 ||
            gdl__copy_bytes(op, s->tracker->data, s->dev, &t, gdl_cpu(), sizeof t) < 0)
            return -1;
    }
    s->pending_scale = (double)(float)scale;
    s->pending_tracker = growth_tracker;
    return 0;
}
