/* src/train/clip_grad.h — gdl_clip_grad_norm and the optimizer's clip: one
   fused backend call per device, no read back unless the norm is asked for. */
/* The gradients of params, all on one device, clipped there by one backend
   call (no read back); the norm goes to *dnorm (device memory) if given.
   0; 1 when the gradients are on several devices (the caller clips them
   the slow way); -1 + error. */
static int gdl__clip_fused(const char *op, gdl_tensor *const *params, int n, double max_norm, double *dnorm,
                           const gdl_backend **be_out) {
    gdl_real **g;
    int64_t *ns;
    int i, k = 0;
    gdl_device dev = gdl_cpu();
    const gdl_backend *be;
    if (n < 0 || (n > 0 && !params)) {
        gdl__set_error("%s: bad parameter list (n %d, params %s)", op, n, params ? "given" : "NULL");
        return -1;
    }
    if (!(max_norm >= 0)) {
        gdl__set_error("%s: max_norm %g must be >= 0", op, max_norm);
        return -1;
    }
    for (i = 0; i < n; i++) {
        if (!params[i]) {
            gdl__set_error("%s: params[%d] is NULL", op, i);
            return -1;
        }
        if (!params[i]->grad || !params[i]->grad->numel) continue;
        if (params[i]->grad->dtype != GDL_F32) { /* the kernels read f32 */
            gdl__set_error("%s: params[%d] %s has a %s gradient; gradient clipping takes f32 gradients", op, i,
                           gdl_shape_str(params[i]), gdl_dtype_name(params[i]->grad->dtype));
            return -1;
        }
        if (k++ == 0) dev = params[i]->grad->device;
        else if (!gdl_device_equal(dev, params[i]->grad->device)) return 1;
    }
    if (!(be = gdl__be(op, dev))) return -1;
    *be_out = be;
    /* the lists live in the step arena: a steady-state step stays allocation-free */
    g = (gdl_real **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_real *) * (size_t)(k + 1));
    ns = (int64_t *)gdl__arena_alloc(&gdl__host_arena, sizeof(int64_t) * (size_t)(k + 1));
    if (!g || !ns) {
        gdl__set_error("%s: out of memory", op);
        return -1;
    }
    for (i = 0, k = 0; i < n; i++)
        if (params[i]->grad && params[i]->grad->numel) {
            g[k] = GDL__R(params[i]->grad);
            ns[k++] = params[i]->grad->numel;
        }
    return be->k.clip_grad_norm(k, g, ns, max_norm, dnorm) < 0 ? -1 : 0;
}

GPUDL_API double gdl_clip_grad_norm(gdl_tensor *const *params, int n, double max_norm) {
    const char *op = "gdl_clip_grad_norm";
    double total = 0, norm, coef, *dnorm = NULL;
    const gdl_backend *fbe = NULL;
    int i, rc;
    gdl_device dev = gdl_cpu();
    for (i = 0; i < n && params; i++) /* where the norm is computed: the first gradient's device */
        if (params[i] && params[i]->grad && params[i]->grad->numel) {
            dev = params[i]->grad->device;
            break;
        }
    if (!(dnorm = (double *)gdl__scratch(op, dev, sizeof(double)))) return -1;
    rc = gdl__clip_fused(op, params, n, max_norm, dnorm, &fbe);
    if (rc < 0) return -1;
    if (rc == 0) { /* one device: one call, then the norm's one read back */
        if (fbe->rt.copy(&norm, dnorm, sizeof norm, dev.type == GDL_DEVICE_CPU ? 2 : 1) < 0) return -1;
        return norm;
    }
    /* gradients on several devices: a norm per device, added on the host */
    for (i = 0; i < n; i++) {
        const gdl_backend *be;
        double s = 0;
        if (!params[i]->grad || !params[i]->grad->numel) continue;
        if (params[i]->grad->dtype != GDL_F32) {
            gdl__set_error("%s: params[%d] %s has a %s gradient; gradient clipping takes f32 gradients", op, i,
                           gdl_shape_str(params[i]), gdl_dtype_name(params[i]->grad->dtype));
            return -1;
        }
        if (!(be = gdl__be(op, params[i]->grad->device)) || be->k.sum_squares(params[i]->grad->numel,
                                                                             GDL__R(params[i]->grad), &s) < 0)
            return -1;
        total += s;
    }
    norm = sqrt(total);
    coef = max_norm / (norm + 1e-6);
    if (!(coef >= 1)) /* PyTorch multiplies by min(coef, 1); a NaN norm spreads NaN as there */
        for (i = 0; i < n; i++) {
            const gdl_backend *be;
            gdl_tensor *g = params[i]->grad;
            if (!g || !g->numel) continue;
            if (!(be = gdl__be(op, g->device)) || be->k.unary(GDL_F32, GDL_UN_SCALE, g->numel, GDL__R(g), GDL__R(g), (gdl_real)coef) < 0)
                return -1;
        }
    return norm;
}

GPUDL_API int gdl_clip_grad_norm_nosync(gdl_tensor *const *params, int n, double max_norm) {
    const gdl_backend *be = NULL;
    int rc = gdl__clip_fused("gdl_clip_grad_norm_nosync", params, n, max_norm, NULL, &be);
    if (rc == 1) return gdl_clip_grad_norm(params, n, max_norm) < 0 ? -1 : 0; /* several devices: read back */
    return rc;
}

GPUDL_API double gdl_optim_clip_grad_norm(gdl_optimizer *opt, double max_norm) {
    gdl_tensor **ps;
    double r;
    int i;
    if (!opt) {
        gdl__null_arg("gdl_optim_clip_grad_norm", "opt");
        return -1;
    }
    if (opt->master != GDL_F32) {
        gdl__set_error("gdl_optim_clip_grad_norm: the optimizer's parameters are %s with f32 master weights "
                       "(gdl_optim_set_master_weights), so their gradients are %s; gradient clipping takes f32 "
                       "gradients", gdl_dtype_name(opt->master), gdl_dtype_name(opt->master));
        return -1;
    }
    /* the list lives in the step arena: a steady-state step stays allocation-free */
    ps = (gdl_tensor **)gdl__arena_alloc(&gdl__host_arena, sizeof(gdl_tensor *) * (size_t)(opt->nparams + 1));
    if (!ps) {
        gdl__set_error("gdl_optim_clip_grad_norm: out of memory");
        return -1;
    }
    for (i = 0; i < opt->nparams; i++) ps[i] = opt->params[i].p;
    r = gdl_clip_grad_norm(ps, opt->nparams, max_norm);
    return r;
}
