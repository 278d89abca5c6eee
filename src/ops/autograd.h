/* ---------------------------------------------------------------------------
   src/ops/autograd.h   The tape is a list of nodes in creation order, so a walk
   from the newest node back visits every tensor after all its consumers.
   ------------------------------------------------------------------------- */

GPUDL_API int gdl_set_requires_grad(gdl_tensor *t, int on) {
    if (gdl__check_in("gdl_set_requires_grad", "t", t, 0) < 0) return -1;
    if (on && !gdl__is_float(t->dtype)) {
        gdl__set_error("gdl_set_requires_grad: only float tensors (f32, bf16, f16) can require grad, got %s %s",
                       gdl_dtype_name(t->dtype), gdl_shape_str(t));
        return -1;
    }
    if (t->node) {
        gdl__set_error("gdl_set_requires_grad: %s is the result of %s, not a leaf", gdl_shape_str(t),
                       gdl_op_name(t->node->op));
        return -1;
    }
    t->requires_grad = on != 0;
    return 0;
}

GPUDL_API int gdl_zero_grad_tensor(gdl_tensor *t) {
    const gdl_backend *be;
    if (gdl__check_in("gdl_zero_grad_tensor", "t", t, 0) < 0) return -1;
    if (!t->grad) return 0;
    if (!(be = gdl__be("gdl_zero_grad_tensor", t->device))) return -1;
    return be->rt.memset0(t->grad->data, (size_t)t->grad->numel * gdl_dtype_size(t->grad->dtype));
}

GPUDL_API int gdl_sgd_update_(gdl_tensor *p, double lr) {
    const char *op = "gdl_sgd_update_";
    const gdl_backend *be;
    gdl_opt_tensor t;
    gdl_opt_hyper h, *dh;
    void *tab;
    int rc;
    if (gdl__check_in(op, "param", p, 1) < 0) return -1;
    if (!p->grad) return 0;
    if (!(be = gdl__be(op, p->device))) return -1;
    /* a one-off table: the optimizers keep theirs */
    memset(&h, 0, sizeof h);
    h.lr = lr;
    if (!(dh = (gdl_opt_hyper *)gdl__scratch(op, p->device, sizeof h)) || be->rt.copy_async(dh, &h, sizeof h, 0, NULL) < 0)
        return -1;
    memset(&t, 0, sizeof t);
    t.n = p->numel;
    t.p = GDL__R(p);
    t.g = GDL__R(p->grad);
    t.hyper = dh;
    if (p->device.type == GDL_DEVICE_CPU) { /* the CPU's table is the entries: one on the stack allocates nothing */
        gdl__cpu_opt_table one;
        one.count = 1;
        one.t[0] = t;
        return be->k.sgd_multi(&one);
    }
    if (!(tab = be->k.opt_table_new(1, &t))) return -1;
    rc = be->k.sgd_multi(tab);
    be->k.opt_table_free(tab);
    return rc;
}

/* A persistent tensor of dtype dt at `slot` of flat block f (zeroed when zero is set). */
static gdl_tensor *gdl__flat_view(const char *op, gdl__flat *f, void *slot, int ndim, const int64_t *shape,
                                  gdl_dtype dt, int zero) {
    const gdl_backend *be;
    gdl_tensor *v = gdl__make(op, ndim, shape, dt, f->device, 1, slot);
    if (!v) return NULL;
    if (zero && (!(be = gdl__be(op, f->device)) ||
                 be->rt.memset0(slot, (size_t)v->numel * gdl_dtype_size(dt)) < 0)) {
        GPUDL_FREE(v);
        return NULL;
    }
    v->flat = f;
    f->refs++;
    return v;
}

/* The gradient buffer of t, zeroed; lazy: an intermediate's left unset (GDL__T_UNSET, gdl__grad_beta) */
static int gdl__ensure_grad_as(gdl_tensor *t, int lazy) {
    const gdl_backend *be;
    if (t->grad) return 0;
    if (gdl__is_persistent(t)) {
        gdl__flat *f = t->flat;
        /* a parameter in a flat block: its gradient (its dtype: f32, or bf16/f16 with master weights) is the
           slot mirroring it, so the gradients stay one buffer */
        if (f && f->grad_shift && (size_t)((char *)t->data - f->base) < f->params_bytes)
            t->grad = gdl__flat_view("gdl_backward", f, (char *)t->data + f->grad_shift, t->ndim, t->shape, t->dtype,
                                     1);
        else
            t->grad = gdl_zeros(t->ndim, t->shape, t->dtype, t->device);
        if (!t->grad) return -1;
        t->grad->owner = GDL__OWN_GRAD; /* freed with t */
        return 0;
    }
    /* in the tensor's dtype, as PyTorch */
    if (!(t->grad = gdl__tmp("gdl_backward", t->ndim, t->shape, t->dtype, t->device))) return -1;
    if (lazy) {
        t->grad->flags |= GDL__T_UNSET;
        return 0;
    }
    if (!(be = gdl__be("gdl_backward", t->device))) return -1;
    return be->rt.memset0(t->grad->data, (size_t)t->numel * gdl_dtype_size(t->dtype));
}

static int gdl__ensure_grad(gdl_tensor *t) { return gdl__ensure_grad_as(t, 0); }

/* The ops whose backward writes its inputs' unset gradients itself (gdl__grad_beta, gdl__grad_zero); the
   others get them zeroed first. f32 only (the low-precision paths add). */
static int gdl__bw_fresh_ok(const gdl_node *n) {
    int k;
    if (n->op != GDL_OP_LINEAR && n->op != GDL_OP_LINEAR_ACT && n->op != GDL_OP_ADD && n->op != GDL_OP_SUB &&
        n->op != GDL_OP_BATCH_NORM && n->op != GDL_OP_BATCH_NORM_RELU && n->op != GDL_OP_BATCH_NORM_GELU &&
        n->op != GDL_OP_MAX_POOL2D && n->op != GDL_OP_CONV2D && n->op != GDL_OP_CONV2D_ACT &&
        gdl__op(n->op)->backward != gdl__bw_unary)
        return 0;
    if (n->out->dtype != GDL_F32) return 0;
    for (k = 0; k < n->nin; k++)
        if (n->in[k] && n->in[k]->requires_grad && n->in[k]->grad->dtype != GDL_F32) return 0;
    return 1;
}

static int gdl__check_grad(const gdl_node *n, int k, const gdl_backend *be) {
    int64_t bad = 0;
    gdl_tensor *t = n->in[k];
    if (!gdl__anomaly || !t || !t->requires_grad || t->grad->dtype != GDL_F32) return 0; /* low: its f32 source is checked */
    if (be->k.count_nonfinite(t->numel, GDL__R(t->grad), &bad) < 0) return -1;
    if (bad) {
        gdl__set_error("gdl_backward: the gradient of %s's input %d %s has %lld NaN/Inf values (anomaly mode)",
                       gdl__op(n->op)->name, k, gdl_shape_str(t), (long long)bad);
        return -1;
    }
    return 0;
}

static GDL__TLS gdl_grad_ready_fn gdl__ready_fn;
static GDL__TLS void *gdl__ready_user;
GPUDL_API void gdl_set_grad_ready_hook(gdl_grad_ready_fn fn, void *user) {
    gdl__ready_fn = fn;
    gdl__ready_user = user;
}

/* With a gradient-ready hook: mark each leaf with the oldest node that reads
   it (the walk goes from the newest node back, so that node adds to the
   leaf's gradient last); after that node, the hook gets the leaf. */
static void gdl__mark_last_uses(void) {
    gdl_node *n;
    int k;
    for (n = gdl__tape; n; n = n->prev)
        for (k = 0; k < n->nin; k++)
            if (n->in[k] && n->in[k]->requires_grad && !n->in[k]->node) n->in[k]->last_use = n;
}
static void gdl__signal_ready(gdl_node *n) {
    int k;
    for (k = 0; k < n->nin; k++) {
        gdl_tensor *t = n->in[k];
        if (t && t->last_use == n) {
            t->last_use = NULL; /* once, even when a node reads it twice */
            if (t->grad) gdl__ready_fn(t, gdl__ready_user);
        }
    }
}

/* a backward function's span name, "gdl_<op> backward", made once per op in the profiler's table */
static const char *gdl__prof_bw_name(int op) {
    char *b = gdl__prof.bw_names[op];
    if (!b[0]) snprintf(b, sizeof gdl__prof.bw_names[op], "gdl_%s backward", gdl_op_name(op));
    return b;
}

static int gdl__backward(const char *op, gdl_tensor *root, const gdl_tensor *seed) {
    gdl_node *n;
    const gdl_backend *be;
    int prev, rc = 0, k;
    if (!root->requires_grad) {
        gdl__set_error("%s: tensor %s does not require grad (no input of the ops that made it requires grad, "
                       "or it was made in no-grad mode)", op, gdl_shape_str(root));
        return -1;
    }
    if (!(be = gdl__be(op, root->device))) return -1;
    /* an optimizer step usually follows: casts of the weights made so far would be stale */
    gdl__ac_ncache = 0;
    /* gradients of intermediates from an earlier backward over the same tape start again */
    for (n = gdl__tape; n; n = n->prev) n->out->grad = NULL;
    if (gdl__ensure_grad(root) < 0) return -1;
    if (root->dtype != GDL_F32 || (seed && seed->dtype != GDL_F32)) {
        gdl_real *one = NULL;
        if (!seed && (!(one = (gdl_real *)gdl__scratch(op, root->device, sizeof(gdl_real))) || be->k.fill(one, 1, 1) < 0))
            return -1;
        if (gdl__acc_any(op, be, root->device, root->grad->data, root->dtype, seed ? seed->data : (void *)one,
                         seed ? seed->dtype : GDL_F32, root->numel) < 0)
            return -1;
    } else if (seed) {
        if (be->k.copy2d(GDL_F32, 1, root->numel, GDL__R(seed), 0, GDL__R(root->grad), 0, 1) < 0)
            return -1;
    } else if (be->k.unary(GDL_F32, GDL_UN_ADD_SCALAR, root->numel, GDL__R(root->grad), GDL__R(root->grad), 1) < 0) {
        return -1;
    }
    if (!root->node) return 0;
    prev = gdl_set_grad_enabled(0);
    if (gdl__ready_fn) gdl__mark_last_uses();
    for (n = gdl__tape; n && rc == 0; n = n->prev) {
        if (n->out->grad) {
            for (k = 0; k < n->nin && rc == 0; k++)
                if (n->in[k] && n->in[k]->requires_grad) rc = gdl__ensure_grad_as(n->in[k], 1);
            if (rc == 0 && !(be = gdl__be(op, n->out->device))) rc = -1;
            for (k = 0; k < n->nin && rc == 0 && !gdl__bw_fresh_ok(n); k++) rc = gdl__grad_zero(n->in[k], be);
            if (rc == 0) {
                int span = gdl__prof_on ? gdl__prof_push(gdl__prof_bw_name(n->op), n->out->device) : 0;
                rc = gdl__op(n->op)->backward(n, be);
                /* a gradient the backward did not write (an empty tensor ...) holds zeros */
                for (k = 0; k < n->nin && rc == 0; k++) rc = gdl__grad_zero(n->in[k], be);
                if (rc < 0 && strncmp(gdl__err, op, strlen(op)) != 0) {
                    char prev[sizeof gdl__err];
                    memcpy(prev, gdl__err, sizeof prev);
                    gdl__set_error("%s: the backward of %s %s failed: %s", op, gdl__op(n->op)->name,
                                   gdl_shape_str(n->out), prev);
                }
                for (k = 0; k < n->nin && rc == 0; k++) rc = gdl__check_grad(n, k, be);
                gdl__prof_pop(span, rc == 0);
            }
        }
        if (rc == 0 && gdl__ready_fn) gdl__signal_ready(n);
    }
    if (gdl__ready_fn) /* after an error: no stale marks */
        for (n = gdl__tape; n; n = n->prev)
            for (k = 0; k < n->nin; k++)
                if (n->in[k]) n->in[k]->last_use = NULL;
    gdl_set_grad_enabled(prev);
    return rc < 0 ? -1 : 0;
}

GPUDL_API int gdl_backward(gdl_tensor *loss) {
    if (gdl__check_in("gdl_backward", "loss", loss, 0) < 0) return -1;
    if (!gdl__is_float(loss->dtype)) {
        gdl__set_error("gdl_backward: the loss must be a float tensor, got %s %s", gdl_dtype_name(loss->dtype),
                       gdl_shape_str(loss));
        return -1;
    }
    if (loss->numel != 1) {
        gdl__set_error("gdl_backward: the loss must have one element, got %s (use gdl_backward_grad)", gdl_shape_str(loss));
        return -1;
    }
    return gdl__backward("gdl_backward", loss, NULL);
}

GPUDL_API int gdl_backward_grad(gdl_tensor *t, const gdl_tensor *grad) {
    if (gdl__check_two("gdl_backward_grad", "t", t, 0, "grad", grad, 0) < 0) return -1;
    if (!gdl__is_float(t->dtype) || !gdl__is_float(grad->dtype)) {
        gdl__set_error("gdl_backward_grad: expected float tensors, got %s %s and grad %s %s", gdl_dtype_name(t->dtype),
                       gdl_shape_str(t), gdl_dtype_name(grad->dtype), gdl_shape_str(grad));
        return -1;
    }
    if (grad->numel != t->numel) {
        gdl__set_error("gdl_backward_grad: grad %s does not match tensor %s", gdl_shape_str(grad), gdl_shape_str(t));
        return -1;
    }
    return gdl__backward("gdl_backward_grad", t, grad);
}

