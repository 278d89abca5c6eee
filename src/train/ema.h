/* ---------------------------------------------------------------------------
   Weight EMA (torch.optim.swa_utils.AveragedModel with get_ema_multi_avg_fn):
   an average of the optimizer's parameters kept in blocks that mirror its
   flat parameter region slot for slot, so that the update after each
   gdl_step is one launch per device over the whole region (plus one per
   averaged buffer).
   ------------------------------------------------------------------------- */

struct gdl_ema {
    gdl_optimizer *opt;     /* NULL once the optimizer is freed */
    double decay;
    int use_buffers;
    int64_t step0;          /* the optimizer's step count when the average started: n_averaged = steps - step0 */
    int ndevs, nparams;
    gdl__flat **shadow;     /* [ndevs]: the averages, laid out as the optimizer's parameter region */
    size_t *bytes;          /* [ndevs]: that region's bytes */
    gdl_tensor **avg;       /* [nparams]: views of the shadow slots, by the optimizer's parameter index */
    int nbuf;
    gdl_tensor **buf, **bavg; /* use_buffers: the module's f32 buffers and their averages */
};

/* A flat block of `bytes` on dev, its base 64-byte aligned, a copy of src. NULL + error. */
static gdl__flat *gdl__ema_block(const char *op, gdl_device dev, const void *src, size_t bytes) {
    const gdl_backend *be = gdl__be(op, dev);
    gdl__flat *f;
    if (!be) return NULL;
    if (!(f = (gdl__flat *)gdl__zalloc(op, sizeof(gdl__flat)))) return NULL;
    f->refs = 1;
    f->device = dev;
    f->bytes = f->params_bytes = bytes;
    if (!(f->data = be->rt.alloc(bytes + GDL__FLAT_ALIGN))) {
        GPUDL_FREE(f);
        gdl__set_error("%s: cannot allocate the average's %.0f bytes on %s", op, (double)bytes, gdl_device_str(dev));
        return NULL;
    }
    f->base = (char *)f->data + (GDL__FLAT_ALIGN - (uintptr_t)f->data % GDL__FLAT_ALIGN) % GDL__FLAT_ALIGN;
    if (gdl__copy_bytes(op, f->base, dev, src, dev, bytes) < 0) {
        gdl__flat_unref(f);
        return NULL;
    }
    return f;
}

static void gdl__ema_detach(gdl_ema *e) { e->opt = NULL; }

GPUDL_API void gdl_ema_free(gdl_ema *e) {
    int i;
    if (!e) return;
    if (e->opt && e->opt->ema == e) e->opt->ema = NULL;
    for (i = 0; e->avg && i < e->nparams; i++) gdl__free(e->avg[i]);
    for (i = 0; e->bavg && i < e->nbuf; i++) gdl__free(e->bavg[i]);
    for (i = 0; e->shadow && i < e->ndevs; i++) gdl__flat_unref(e->shadow[i]);
    GPUDL_FREE(e->shadow);
    GPUDL_FREE(e->bytes);
    GPUDL_FREE(e->avg);
    GPUDL_FREE(e->buf);
    GPUDL_FREE(e->bavg);
    GPUDL_FREE(e);
}

/* use_buffers: m's f32 buffers and a copy of each. 0 / -1. */
static int gdl__ema_buffers(const char *op, gdl_ema *e, gdl_module *m) {
    int n = gdl_module_named_tensors(m, GDL_BUFFERS, NULL, NULL, 0), i;
    if (n < 0) return -1;
    e->buf = (gdl_tensor **)GPUDL_MALLOC(sizeof(gdl_tensor *) * (size_t)(n + 1));
    e->bavg = (gdl_tensor **)GPUDL_MALLOC(sizeof(gdl_tensor *) * (size_t)(n + 1));
    if (!e->buf || !e->bavg) {
        gdl__set_error("%s: out of memory (host)", op);
        return -1;
    }
    gdl_module_named_tensors(m, GDL_BUFFERS, NULL, e->buf, n);
    for (i = 0; i < n; i++) {
        if (e->buf[i]->dtype != GDL_F32) {
            gdl__set_error("%s: use_buffers averages f32 buffers; buffer %d is %s %s", op, i,
                           gdl_dtype_name(e->buf[i]->dtype), gdl_shape_str(e->buf[i]));
            return -1;
        }
        if (!(e->bavg[i] = gdl_empty(e->buf[i]->ndim, e->buf[i]->shape, GDL_F32, e->buf[i]->device))) return -1;
        e->bavg[i]->owner = GDL__OWN_EMA;
        e->nbuf++;
        if (gdl__copy_bytes(op, e->bavg[i]->data, e->bavg[i]->device, e->buf[i]->data, e->buf[i]->device,
                            sizeof(gdl_real) * (size_t)e->buf[i]->numel) < 0)
            return -1;
    }
    return 0;
}

GPUDL_API gdl_ema *gdl_ema_new(gdl_optimizer *opt, gdl_module *m, double decay, int use_buffers) {
    static const char op[] = "gdl_ema_new";
    gdl_ema *e;
    int d, i;
    if (!opt || !m) {
        gdl__null_arg(op, !opt ? "opt" : "module");
        return NULL;
    }
    if (!(decay >= 0 && decay <= 1)) {
        gdl__set_error("%s: decay %g must be in [0, 1]", op, decay);
        return NULL;
    }
    if (opt->ema) {
        gdl__set_error("%s: the optimizer already has an EMA (gdl_ema_free it first)", op);
        return NULL;
    }
    if (opt->master != GDL_F32 || !opt->nparams) {
        gdl__set_error("%s: %s", op, opt->nparams ? "the optimizer keeps master weights; the EMA averages f32 parameters"
                                                  : "the optimizer has no parameters yet (add them first)");
        return NULL;
    }
    if (gdl__opt_layout(op, opt) < 0) return NULL; /* the blocks whose parameter regions are mirrored */
    if (!(e = (gdl_ema *)gdl__zalloc(op, sizeof(gdl_ema)))) return NULL;
    e->decay = decay;
    e->use_buffers = use_buffers != 0;
    e->shadow = (gdl__flat **)GPUDL_MALLOC(sizeof(gdl__flat *) * (size_t)opt->ndevs);
    e->bytes = (size_t *)GPUDL_MALLOC(sizeof(size_t) * (size_t)opt->ndevs);
    e->avg = (gdl_tensor **)GPUDL_MALLOC(sizeof(gdl_tensor *) * (size_t)opt->nparams);
    if (!e->shadow || !e->bytes || !e->avg) {
        gdl__set_error("%s: out of memory (host)", op);
        goto fail;
    }
    memset(e->avg, 0, sizeof(gdl_tensor *) * (size_t)opt->nparams);
    for (d = 0; d < opt->ndevs; d++) {
        gdl__opt_dev *dv = &opt->devs[d];
        if (!(e->shadow[d] = gdl__ema_block(op, dv->device, dv->flat->base, dv->region_lo))) goto fail;
        e->bytes[d] = dv->region_lo;
        e->ndevs++;
    }
    for (i = 0; i < opt->nparams; i++) {
        gdl__opt_param *pp = &opt->params[i];
        if (!(e->avg[i] = gdl__flat_view(op, e->shadow[pp->dev], e->shadow[pp->dev]->base + pp->off_lo, pp->p->ndim,
                                         pp->p->shape, GDL_F32, 0)))
            goto fail;
        e->avg[i]->owner = GDL__OWN_EMA;
        e->nparams++;
    }
    if (e->use_buffers && gdl__ema_buffers(op, e, m) < 0) goto fail;
    e->opt = opt;
    e->step0 = opt->steps;
    opt->ema = e;
    return e;
fail:
    gdl_ema_free(e);
    return NULL;
}

/* The optimizer's parameter regions are still the ones mirrored (blocks made again for other state keep
   the parameters' slots; added parameters move them). 0 / -1. */
static int gdl__ema_check(const char *op, const gdl_ema *e) {
    const gdl_optimizer *opt = e->opt;
    int d, ok = opt && opt->master == GDL_F32 && opt->nparams == e->nparams && opt->ndevs == e->ndevs;
    for (d = 0; ok && d < e->ndevs; d++)
        ok = opt->devs[d].region_lo == e->bytes[d] && gdl_device_equal(opt->devs[d].device, e->shadow[d]->device);
    if (!ok)
        gdl__set_error("%s: the EMA's optimizer %s since gdl_ema_new (make the EMA after adding every parameter "
                       "and moving the model)", op, !opt ? "was freed" : "changed its parameters, devices or master weights");
    return ok ? 0 : -1;
}

/* AveragedModel.update_parameters, from gdl__step after the update: the first (n_averaged 0) copies, as
   lerp with weight 1 does exactly; then weight 1 - decay. */
static int gdl__ema_step(const char *op, gdl_ema *e) {
    gdl_optimizer *opt = e->opt;
    gdl_real w = (gdl_real)(opt->steps == e->step0 ? 1.0 : 1.0 - e->decay);
    int d, i;
    if (gdl__ema_check(op, e) < 0) return -1; /* gdl__step made the layout */
    for (d = 0; d < e->ndevs; d++) {
        const gdl_backend *be = gdl__be(op, opt->devs[d].device);
        if (!be || be->k.ema_lerp((int64_t)(e->bytes[d] / sizeof(gdl_real)), (gdl_real *)e->shadow[d]->base,
                                (const gdl_real *)opt->devs[d].flat->base, w) < 0)
            return -1;
    }
    for (i = 0; i < e->nbuf; i++) {
        const gdl_backend *be = gdl__be(op, e->buf[i]->device);
        if (!gdl_device_equal(e->buf[i]->device, e->bavg[i]->device) || !gdl_same_shape(e->buf[i], e->bavg[i])) {
            gdl__set_error("%s: buffer %d is now %s on %s; its average is %s on %s", op, i, gdl_shape_str(e->buf[i]),
                           gdl_device_str(e->buf[i]->device), gdl_shape_str(e->bavg[i]),
                           gdl_device_str(e->bavg[i]->device));
            return -1;
        }
        if (!be || be->k.ema_lerp(e->buf[i]->numel, GDL__R(e->bavg[i]), GDL__R(e->buf[i]), w) < 0) return -1;
    }
    return 0;
}

/* Exchanges n bytes at a and b on dev through a scratch block. */
static int gdl__ema_exchange(const char *op, gdl_device dev, void *a, void *b, size_t n) {
    void *t = gdl__scratch(op, dev, n);
    if (!t) return -1;
    if (gdl__copy_bytes(op, t, dev, a, dev, n) < 0 || gdl__copy_bytes(op, a, dev, b, dev, n) < 0 ||
        gdl__copy_bytes(op, b, dev, t, dev, n) < 0)
        return -1;
    return 0;
}

GPUDL_API int gdl_ema_swap(gdl_ema *e) {
    static const char op[] = "gdl_ema_swap";
    int d, i;
    if (!e) {
        gdl__null_arg(op, "ema");
        return -1;
    }
    if (gdl__ema_check(op, e) < 0 || gdl__opt_layout(op, e->opt) < 0 || gdl__ema_check(op, e) < 0) return -1;
    for (d = 0; d < e->ndevs; d++)
        if (gdl__ema_exchange(op, e->opt->devs[d].device, e->shadow[d]->base, e->opt->devs[d].flat->base,
                              e->bytes[d]) < 0)
            return -1;
    for (i = 0; i < e->nbuf; i++)
        if (gdl__ema_exchange(op, e->buf[i]->device, e->bavg[i]->data, e->buf[i]->data,
                              sizeof(gdl_real) * (size_t)e->buf[i]->numel) < 0)
            return -1;
    return 0;
}

GPUDL_API int64_t gdl_ema_num_updates(const gdl_ema *e) { return e && e->opt ? e->opt->steps - e->step0 : -1; }

/* The average of t (a parameter of the optimizer or an averaged buffer), NULL when it has none. */
static gdl_tensor *gdl__ema_of(const gdl_ema *e, const gdl_tensor *t) {
    int i;
    for (i = 0; e->opt && i < e->nparams; i++)
        if (e->opt->params[i].p == t) return e->avg[i];
    for (i = 0; i < e->nbuf; i++)
        if (e->buf[i] == t) return e->bavg[i];
    return NULL;
}

GPUDL_API gdl_tensor *gdl_ema_tensor(gdl_ema *e, const gdl_tensor *t) {
    gdl_tensor *a;
    if (!e || !t) {
        gdl__null_arg("gdl_ema_tensor", !e ? "ema" : "tensor");
        return NULL;
    }
    if (!(a = gdl__ema_of(e, t))) gdl__set_error("gdl_ema_tensor: %s %s is not averaged by this EMA", gdl_dtype_name(t->dtype), gdl_shape_str(t));
    return a;
}
