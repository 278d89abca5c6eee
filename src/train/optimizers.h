/* ---------------------------------------------------------------------------
   Optimizers
   ------------------------------------------------------------------------- */

enum { GDL__OPT_SGD, GDL__OPT_ADAM, GDL__OPT_ADAMW };

typedef struct gdl__opt_group {
    double lr, weight_decay;
    double momentum, dampening; /* SGD */
    double beta1, beta2, eps;   /* Adam */
    int nesterov;
    double initial_lr;          /* set by the first scheduler (PyTorch's group['initial_lr']); < 0 unset */
} gdl__opt_group;

typedef struct gdl__opt_param {
    gdl_tensor *p;
    int group;
    gdl_tensor *step;  /* i32 scalar on the CPU: this parameter's step count as of the last read back (the
                          count itself is in the flat block, where the kernels add to it) */
    gdl_tensor *s1;    /* SGD momentum_buffer, Adam exp_avg */
    gdl_tensor *s2;    /* Adam exp_avg_sq */
    char *names[3];
    int dev;           /* its flat block: index in the optimizer's devs */
    size_t off;        /* bytes from the start of each f32 region of that block to its slot */
    size_t off_lo;     /* ... of the parameter and gradient regions (off without master weights) */
    gdl_tensor *master; /* master weights: the f32 master (a view of its slot), NULL without */
    int32_t step_seen; /* the count gdl_optim_state read back into `step`: a different value was written */
} gdl__opt_param;

/* One device's flat block (llm.c's malloc_and_point_parameters), one
   allocation: the parameters, then their gradients, momentum buffers or
   exp_avg, exp_avg_sq (regions of `region` bytes, slots in parameter order,
   64-byte aligned), then each group's hyper-parameters, the GradScaler's
   skip flag (found_inf) and each parameter's step count (int32, indexed by
   parameter). One allocation means one memset
   for zero_grad, contiguous gradients (a bucketed all-reduce can take views
   of them), and one place the kernels read their scalars from. */
typedef struct gdl__opt_dev {
    gdl_device device;
    gdl__flat *flat;
    size_t region;             /* bytes of an f32 region */
    size_t region_lo;          /* bytes of the parameter and gradient regions: `region`, or with master weights
                                  half of it (slots of 2-byte elements) */
    gdl_dtype low;             /* master weights: the parameters' dtype (then an f32 region of masters follows
                                  the gradients); GDL_F32 without */
    int nregions;              /* 2: SGD without momentum, 3: SGD, 4: Adam (the masters not counted) */
    gdl_opt_hyper *hyper;      /* device: [ngroups] */
    gdl_real *skip;            /* device: GradScaler's found_inf for this optimizer (0: step; the kernels skip
                                  the step when it is set) */
    int32_t *steps;            /* device: [nsteps], by parameter index */
    int nsteps;
    gdl_opt_hyper *hyper_seen; /* host: what `hyper` holds (or will once the queued copies run) */
    void *table;               /* the backend's table of the last step ... */
    gdl_opt_tensor *tab;       /* ... and the entries it was made from */
    int ntab;
} gdl__opt_dev;

struct gdl_optimizer {
    int kind;
    gdl__opt_group defaults;
    int ngroups, cap_groups;
    gdl__opt_group *groups;
    int nparams, cap_params;
    gdl__opt_param *params;
    int64_t steps;
    int ndevs;
    gdl__opt_dev *devs;        /* the flat blocks, in the order their devices first appear */
    int layout_dirty;          /* parameters were added: make the blocks again */
    gdl_grad_scaler *scaler;   /* attached: its state goes into checkpoints (gdl_optim_set_grad_scaler) */
    struct gdl_ema *ema;       /* attached (gdl_ema_new): updated after each step, saved in checkpoints */
    gdl_dtype master;          /* gdl_optim_set_master_weights: the parameters' dtype (f32 masters kept in the
                                  blocks); GDL_F32: off */
    int steps_dirty;           /* 1: the blocks are new, every host step count goes up; 2: gdl_optim_state
                                  handed the step tensors out, those written since (a checkpoint load) go up
                                  (the others may be behind the blocks': replayed graphs step on the device) */
    int stepping;              /* atomic: 1 while gdl_step runs, so a step from a second thread at once fails */
};

static const char *gdl__opt_kind_name(int kind) {
    return kind == GDL__OPT_SGD ? "SGD" : kind == GDL__OPT_ADAM ? "Adam" : "AdamW";
}

/* a group's settings: those every optimizer has, the rest zero; initial_lr unset (a scheduler sets it) */
static void gdl__opt_group_init(gdl__opt_group *d, double lr, double weight_decay) {
    memset(d, 0, sizeof *d);
    d->lr = lr;
    d->weight_decay = weight_decay;
    d->initial_lr = -1;
}

static gdl_optimizer *gdl__opt_new(const char *op, int kind, const gdl__opt_group *d) {
    gdl_optimizer *o = (gdl_optimizer *)gdl__zalloc(op, sizeof(gdl_optimizer));
    if (!o) return NULL;
    o->kind = kind;
    o->defaults = *d;
    return o;
}

GPUDL_API gdl_optimizer *gdl_sgd_new(double lr, double momentum, double dampening, double weight_decay, int nesterov) {
    gdl__opt_group d;
    if (!(lr >= 0) || lr == INFINITY) {
        gdl__set_error("gdl_sgd_new: invalid learning rate %g (must be >= 0)", lr);
        return NULL;
    }
    if (!(momentum >= 0) || momentum == INFINITY || !(weight_decay >= 0) || weight_decay == INFINITY ||
        dampening != dampening) {
        gdl__set_error("gdl_sgd_new: invalid momentum %g, weight_decay %g or dampening %g (momentum and weight_decay "
                       "must be >= 0)", momentum, weight_decay, dampening);
        return NULL;
    }
    if (nesterov && (momentum <= 0 || dampening != 0)) {
        gdl__set_error("gdl_sgd_new: nesterov momentum requires a momentum > 0 and zero dampening (got momentum %g, "
                       "dampening %g)", momentum, dampening);
        return NULL;
    }
    gdl__opt_group_init(&d, lr, weight_decay);
    d.momentum = momentum;
    d.dampening = dampening;
    d.nesterov = nesterov != 0;
    return gdl__opt_new("gdl_sgd_new", GDL__OPT_SGD, &d);
}

static gdl_optimizer *gdl__adam_new(const char *op, int kind, double lr, double beta1, double beta2, double eps,
                                    double weight_decay) {
    gdl__opt_group d;
    if (!(lr >= 0) || lr == INFINITY) {
        gdl__set_error("%s: invalid learning rate %g (must be >= 0)", op, lr);
        return NULL;
    }
    if (!(eps >= 0)) {
        gdl__set_error("%s: invalid epsilon %g (must be >= 0)", op, eps);
        return NULL;
    }
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1)) {
        gdl__set_error("%s: invalid beta parameters (%g, %g) (each must be in [0,1))", op, beta1, beta2);
        return NULL;
    }
    if (!(weight_decay >= 0)) {
        gdl__set_error("%s: invalid weight_decay %g (must be >= 0)", op, weight_decay);
        return NULL;
    }
    gdl__opt_group_init(&d, lr, weight_decay);
    d.beta1 = beta1;
    d.beta2 = beta2;
    d.eps = eps;
    return gdl__opt_new(op, kind, &d);
}

GPUDL_API gdl_optimizer *gdl_adam_new(double lr, double beta1, double beta2, double eps, double weight_decay) {
    return gdl__adam_new("gdl_adam_new", GDL__OPT_ADAM, lr, beta1, beta2, eps, weight_decay);
}
GPUDL_API gdl_optimizer *gdl_adamw_new(double lr, double beta1, double beta2, double eps, double weight_decay) {
    return gdl__adam_new("gdl_adamw_new", GDL__OPT_ADAMW, lr, beta1, beta2, eps, weight_decay);
}

static void gdl__opt_free_state(gdl__opt_param *pp) {
    int k;
    gdl__free(pp->step);
    gdl__free(pp->s1);
    gdl__free(pp->s2);
    for (k = 0; k < 3; k++) GPUDL_FREE(pp->names[k]);
}

/* Lets go of the flat blocks (the tensors viewing them keep them alive) and the tables. */
static void gdl__opt_release_devs(gdl_optimizer *opt) {
    int d;
    for (d = 0; d < opt->ndevs; d++) {
        gdl__opt_dev *dv = &opt->devs[d];
        const gdl_backend *be = dv->table ? gdl__be("gdl_optim", dv->device) : NULL;
        if (be) be->k.opt_table_free(dv->table);
        gdl__flat_unref(dv->flat);
        GPUDL_FREE(dv->hyper_seen);
        GPUDL_FREE(dv->tab);
    }
    GPUDL_FREE(opt->devs);
    opt->devs = NULL;
    opt->ndevs = 0;
}

static void gdl__scaler_forget(gdl_grad_scaler *s, gdl_optimizer *opt);
static void gdl__ema_detach(struct gdl_ema *e); /* src/train/ema.h */
GPUDL_API void gdl_optim_free(gdl_optimizer *opt) {
    int i;
    if (!opt) return;
    if (opt->scaler) gdl__scaler_forget(opt->scaler, opt);
    if (opt->ema) gdl__ema_detach(opt->ema); /* it stays the user's to free; its updates now fail */
    gdl__opt_release_devs(opt);
    for (i = 0; i < opt->nparams; i++) {
        gdl__opt_free_state(&opt->params[i]);
        gdl__free(opt->params[i].master);
    }
    GPUDL_FREE(opt->params);
    GPUDL_FREE(opt->groups);
    GPUDL_FREE(opt);
}

GPUDL_API int gdl_optim_add_params(gdl_optimizer *opt, gdl_tensor *const *params, int n, double lr,
                                   double weight_decay) {
    const char *op = "gdl_optim_add_params";
    gdl__opt_group g, *gv;
    gdl__opt_param *pv;
    int i, j;
    if (!opt) {
        gdl__null_arg(op, "opt");
        return -1;
    }
    if (n < 0 || (n > 0 && !params)) {
        gdl__set_error("%s: bad parameter list (n %d, params %s)", op, n, params ? "given" : "NULL");
        return -1;
    }
    if (lr == INFINITY || lr != lr || weight_decay != weight_decay || weight_decay == INFINITY) {
        gdl__set_error("%s: invalid learning rate %g or weight_decay %g", op, lr, weight_decay);
        return -1;
    }
    for (i = 0; i < n; i++) {
        gdl_tensor *p = params[i];
        if (!p) {
            char what[32];
            snprintf(what, sizeof what, "params[%d]", i);
            gdl__null_arg(op, what);
            return -1;
        }
        if ((p->dtype != GDL_F32 && p->dtype != opt->master) || !gdl__is_persistent(p) || p->node) {
            gdl__set_error("%s: params[%d] %s %s must be a persistent f32 leaf tensor (a parameter)%s%s", op, i,
                           gdl_dtype_name(p->dtype), gdl_shape_str(p),
                           opt->master != GDL_F32 ? " or one of the master weights' dtype " : "",
                           opt->master != GDL_F32 ? gdl_dtype_name(opt->master) : "");
            return -1;
        }
        for (j = 0; j < opt->nparams; j++)
            if (opt->params[j].p == p) {
                gdl__set_error("%s: params[%d] %s is already in parameter group %d (a parameter may appear in "
                               "only one group)", op, i, gdl_shape_str(p), opt->params[j].group);
                return -1;
            }
        for (j = 0; j < i; j++)
            if (params[j] == p) {
                gdl__set_error("%s: params[%d] and params[%d] are the same tensor", op, j, i);
                return -1;
            }
    }
    if (!(gv = (gdl__opt_group *)gdl__nn_reserve(opt->groups, &opt->cap_groups, opt->ngroups, sizeof(gdl__opt_group)))) {
        gdl__set_error("%s: out of memory", op);
        return -1;
    }
    opt->groups = gv;
    if (n > 0) {
        if (!(pv = (gdl__opt_param *)gdl__nn_reserve(opt->params, &opt->cap_params, opt->nparams + n - 1,
                                                     sizeof(gdl__opt_param)))) {
            gdl__set_error("%s: out of memory", op);
            return -1;
        }
        opt->params = pv;
    }
    g = opt->defaults;
    if (lr >= 0) g.lr = lr;
    if (weight_decay >= 0) g.weight_decay = weight_decay;
    for (i = 0; i < n; i++) {
        gdl__opt_param *pp = &opt->params[opt->nparams++];
        memset(pp, 0, sizeof *pp);
        pp->p = params[i];
        pp->group = opt->ngroups;
    }
    opt->groups[opt->ngroups] = g;
    opt->layout_dirty = 1; /* a new group (and its parameters): the blocks are made again at the next use */
    return opt->ngroups++;
}

GPUDL_API int gdl_optim_add_module(gdl_optimizer *opt, gdl_module *m, int no_decay) {
    const char *op = "gdl_optim_add_module";
    gdl_tensor **ps, **nd;
    int n, i, k = 0, j = 0, rc = 0;
    if (!opt || !m) {
        gdl__null_arg(op, !opt ? "opt" : "module");
        return -1;
    }
    if ((n = gdl_module_named_tensors(m, GDL_PARAMS, NULL, NULL, 0)) < 0) return -1;
    ps = (gdl_tensor **)GPUDL_MALLOC(sizeof(gdl_tensor *) * (size_t)(2 * n + 1));
    if (!ps) {
        gdl__set_error("%s: out of memory", op);
        return -1;
    }
    nd = ps + n;
    gdl_module_named_tensors(m, GDL_PARAMS, NULL, ps, n);
    if (!no_decay) {
        rc = gdl_optim_add_params(opt, ps, n, -1, -1);
    } else {
        for (i = 0; i < n; i++) {
            if (ps[i]->ndim >= 2) ps[k++] = ps[i];
            else nd[j++] = ps[i];
        }
        if (k && gdl_optim_add_params(opt, ps, k, -1, -1) < 0) rc = -1;
        if (rc == 0 && j && gdl_optim_add_params(opt, nd, j, -1, 0) < 0) rc = -1;
    }
    GPUDL_FREE(ps);
    return rc < 0 ? -1 : 0;
}

static int gdl__opt_has_state(const gdl_optimizer *opt, const gdl__opt_param *pp) {
    return opt->kind != GDL__OPT_SGD || opt->groups[pp->group].momentum != 0 || pp->s1;
}

/* ---- the flat blocks ---- */

#define GDL__FLAT_ALIGN 64 /* bytes: every slot starts on a cache line (and a GPU's 128-bit loads) */
static size_t gdl__flat_round(size_t b) { return (b + GDL__FLAT_ALIGN - 1) / GDL__FLAT_ALIGN * GDL__FLAT_ALIGN; }

/* region: 0 the parameter, 1 its gradient, 2 and 3 the state (momentum_buffer; exp_avg, exp_avg_sq), 4 its f32
   master. The block: parameters, gradients (region_lo bytes each), then the masters if any, s1, s2 (region). */
static char *gdl__opt_slot(const gdl_optimizer *opt, const gdl__opt_param *pp, int region) {
    const gdl__opt_dev *dv = &opt->devs[pp->dev];
    size_t f32_at = dv->region_lo * 2;
    if (region < 2) return dv->flat->base + dv->region_lo * (size_t)region + pp->off_lo;
    if (region == 4) return dv->flat->base + f32_at + pp->off;
    return dv->flat->base + f32_at + dv->region * (size_t)(region - 2 + (dv->low != GDL_F32)) + pp->off;
}
/* bytes of the f32 regions after the gradients (masters, state) */
static size_t gdl__opt_f32_bytes(const gdl__opt_dev *dv) {
    return dv->region * (size_t)(dv->nregions - 2 + (dv->low != GDL_F32));
}

/* Moves t's elements into `slot` of block f and lets go of its old storage
   (an allocation, or a slot of another block): the same gdl_tensor* now
   views the block, so every pointer to it stays valid. */
static int gdl__flat_rehome_as(const char *op, gdl_tensor *t, gdl__flat *f, void *slot, gdl_dtype dt,
                               const gdl_tensor *src);
static int gdl__flat_rehome(const char *op, gdl_tensor *t, gdl__flat *f, void *slot) {
    return gdl__flat_rehome_as(op, t, f, slot, t->dtype, t);
}
/* The same, t becoming dtype dt with src's values (t itself, or a master weight's f32 copy; converted, rounding
   to nearest even, on the block's device, where a conversion needs src). */
static int gdl__flat_rehome_as(const char *op, gdl_tensor *t, gdl__flat *f, void *slot, gdl_dtype dt,
                               const gdl_tensor *src) {
    if (t->flat == f && t->data == slot && t->dtype == dt && src == t) return 0;
    if (src->dtype == dt) {
        if (gdl__copy_bytes(op, slot, f->device, src->data, src->device, (size_t)t->numel * gdl_dtype_size(dt)) < 0)
            return -1;
    } else {
        const gdl_backend *be = gdl__be(op, f->device);
        if (!gdl_device_equal(src->device, f->device)) {
            gdl__set_error("%s: cannot convert %s %s on %s to %s on %s (the optimizer's master weights convert on "
                           "one device)", op, gdl_dtype_name(src->dtype), gdl_shape_str(src),
                           gdl_device_str(src->device), gdl_dtype_name(dt), gdl_device_str(f->device));
            return -1;
        }
        if (!be || be->k.cast(slot, dt, src->data, src->dtype, t->numel) < 0) return -1;
    }
    if (t->flat == f && t->data == slot) { /* converted in place: the dtype is all that changes */
        t->dtype = dt;
        return 0;
    }
    if (t->flags & GDL__T_OWNS_DATA) {
        const gdl_backend *be = gdl__be(op, t->device);
        if (be) be->rt.free(t->data);
        t->flags &= ~(unsigned)GDL__T_OWNS_DATA;
    } else {
        gdl__flat_unref(t->flat);
    }
    t->data = slot;
    t->device = f->device;
    t->flat = f;
    t->dtype = dt;
    f->refs++;
    return 0;
}

/* a grad the flat block can take: the parameter's dtype, size and device, storage of its own */
static int gdl__opt_grad_fits(const gdl_tensor *p) {
    const gdl_tensor *g = p->grad;
    return g && g->dtype == p->dtype && g->numel == p->numel && gdl_device_equal(g->device, p->device) &&
           gdl__own_storage(g);
}

static int gdl__opt_needs_s1(const gdl_optimizer *opt) {
    int i;
    if (opt->kind != GDL__OPT_SGD) return 1;
    for (i = 0; i < opt->ngroups; i++)
        if (opt->groups[i].momentum != 0) return 1;
    for (i = 0; i < opt->nparams; i++)
        if (opt->params[i].s1) return 1;
    return 0;
}

static void gdl__opt_hyper_of(const gdl__opt_group *g, gdl_opt_hyper *h) {
    memset(h, 0, sizeof *h);
    h->lr = g->lr;
    h->weight_decay = g->weight_decay;
    h->momentum = g->momentum;
    h->dampening = g->dampening;
    h->beta1 = g->beta1;
    h->beta2 = g->beta2;
    h->eps = g->eps;
    h->nesterov = g->nesterov;
}

/* Writes the groups' hyper-parameters that changed into every block: an
   asynchronous copy each on the device's compute stream (from pageable
   memory the copy takes the bytes before it returns), so the kernels of
   the next step read them and nothing waits. */
static int gdl__opt_push_hyper(const char *op, gdl_optimizer *opt) {
    int d, g;
    /* new groups: the blocks are made again at the next use, and every group's values go up then */
    if (opt->layout_dirty) return 0;
    for (d = 0; d < opt->ndevs; d++) {
        gdl__opt_dev *dv = &opt->devs[d];
        const gdl_backend *be = NULL;
        for (g = 0; g < opt->ngroups; g++) {
            gdl_opt_hyper h;
            gdl__opt_hyper_of(&opt->groups[g], &h);
            if (!memcmp(&h, &dv->hyper_seen[g], sizeof h)) continue;
            if (gdl__capturing) { /* a copy from the host cannot be recorded: say so before it is lost */
                gdl__set_error("%s: the optimizer's hyper-parameters cannot change inside a CUDA graph capture "
                               "(change them between replays)", op);
                return -1;
            }
            if (!be && !(be = gdl__be(op, dv->device))) return -1;
            if (be->rt.copy_async(&dv->hyper[g], &h, sizeof h, 0, NULL) < 0) return -1;
            dv->hyper_seen[g] = h;
        }
    }
    return 0;
}

/* The blocks' step counts into the host step tensors (waits for the device). */
static int gdl__opt_steps_down(const char *op, gdl_optimizer *opt) {
    int d, i;
    int32_t *buf;
    if (opt->steps_dirty == 1 || !opt->ndevs) return 0; /* the host's are the newer */
    buf = (int32_t *)gdl__arena_alloc(&gdl__host_arena, sizeof(int32_t) * (size_t)(opt->nparams + 1));
    if (!buf) {
        gdl__set_error("%s: out of memory (host)", op);
        return -1;
    }
    for (d = 0; d < opt->ndevs; d++) {
        gdl__opt_dev *dv = &opt->devs[d];
        if (gdl__copy_bytes(op, buf, gdl_cpu(), dv->steps, dv->device, sizeof(int32_t) * (size_t)dv->nsteps) < 0)
            return -1;
        for (i = 0; i < dv->nsteps; i++) {
            gdl__opt_param *pp = &opt->params[i];
            /* a count written since the last read (not sent up yet) is kept */
            if (pp->dev != d || !pp->step || (opt->steps_dirty == 2 && *(int32_t *)pp->step->data != pp->step_seen))
                continue;
            *(int32_t *)pp->step->data = pp->step_seen = buf[i];
        }
    }
    return 0;
}

/* The host step tensors into the blocks (asynchronous copies). */
static int gdl__opt_steps_up(const char *op, gdl_optimizer *opt) {
    int d, i;
    int32_t *buf;
    if (!opt->steps_dirty || opt->layout_dirty) return 0; /* a new layout takes them all up */
    if (gdl__capturing) {
        gdl__set_error("%s: the optimizer's step counts were set from the host (a checkpoint load) and cannot be "
                       "sent inside a CUDA graph capture: take a step first", op);
        return -1;
    }
    if (opt->steps_dirty == 2) { /* only the counts written since gdl_optim_state read them */
        for (i = 0; i < opt->nparams; i++) {
            gdl__opt_param *pp = &opt->params[i];
            const gdl_backend *be;
            if (!pp->step || *(const int32_t *)pp->step->data == pp->step_seen) continue;
            if (!(be = gdl__be(op, opt->devs[pp->dev].device)) ||
                be->rt.copy_async(&opt->devs[pp->dev].steps[i], pp->step->data, sizeof(int32_t), 0, NULL) < 0)
                return -1;
            pp->step_seen = *(const int32_t *)pp->step->data;
        }
        opt->steps_dirty = 0;
        return 0;
    }
    buf = (int32_t *)gdl__arena_alloc(&gdl__host_arena, sizeof(int32_t) * (size_t)(opt->nparams + 1));
    if (!buf) {
        gdl__set_error("%s: out of memory (host)", op);
        return -1;
    }
    for (i = 0; i < opt->nparams; i++) {
        const gdl_tensor *st = opt->params[i].step;
        buf[i] = st ? *(const int32_t *)st->data : 0;
    }
    for (d = 0; d < opt->ndevs; d++) {
        const gdl_backend *be = gdl__be(op, opt->devs[d].device);
        if (!be || be->rt.copy_async(opt->devs[d].steps, buf, sizeof(int32_t) * (size_t)opt->nparams, 0, NULL) < 0)
            return -1;
    }
    opt->steps_dirty = 0;
    return 0;
}

/* A parameter into its slots of block f (the layout is opt->devs): with master weights its f32 master
   (made from the parameter the first time, which then becomes dtype opt->master, rounded to nearest even),
   and without, the parameter back to f32 from its master if it had one (the master is let go). */
static int gdl__opt_move_param(const char *op, gdl_optimizer *opt, gdl__opt_param *pp, gdl__flat *f) {
    gdl_tensor *p = pp->p;
    if (opt->master == GDL_F32) {
        if (pp->master) {
            if (gdl__flat_rehome_as(op, p, f, gdl__opt_slot(opt, pp, 0), GDL_F32, pp->master) < 0) return -1;
            gdl__free(pp->master);
            pp->master = NULL;
            return 0;
        }
        return gdl__flat_rehome_as(op, p, f, gdl__opt_slot(opt, pp, 0), GDL_F32, p);
    }
    if (pp->master) {
        if (gdl__flat_rehome(op, pp->master, f, gdl__opt_slot(opt, pp, 4)) < 0) return -1;
    } else {
        gdl_tensor *m = gdl__flat_view(op, f, gdl__opt_slot(opt, pp, 4), p->ndim, p->shape, GDL_F32, 0);
        if (!m) return -1;
        m->name = "master"; /* never in a file: checkpoints save it under the parameter's name */
        m->owner = GDL__OWN_OPTIM;
        /* f32 -> f32: a copy; a parameter of the low dtype (added as one) widens exactly */
        if (gdl__flat_rehome_as(op, m, f, m->data, GDL_F32, p) < 0) {
            gdl__free(m);
            return -1;
        }
        pp->master = m;
    }
    return gdl__flat_rehome_as(op, p, f, gdl__opt_slot(opt, pp, 0), opt->master, pp->master);
}

/* Makes the blocks: one per device the parameters are on, each parameter,
   gradient and state tensor moved into its slot. On an error before the
   moves (out of memory) nothing has changed. */
static int gdl__opt_rebuild(const char *op, gdl_optimizer *opt) {
    gdl__opt_dev *devs;
    int nd = 0, i, d, nregions, *where_dev;
    size_t *where_off, *where_lo;
    size_t lo_size = gdl_dtype_size(opt->master);
    size_t hyper_bytes = gdl__flat_round(sizeof(gdl_opt_hyper) * (size_t)(opt->ngroups ? opt->ngroups : 1));
    if (gdl__opt_steps_down(op, opt) < 0) return -1;
    nregions = opt->kind != GDL__OPT_SGD ? 4 : gdl__opt_needs_s1(opt) ? 3 : 2;
    /* the new slots go to the parameters only once the blocks are made: until then the old ones hold */
    where_off = (size_t *)gdl__arena_alloc(&gdl__host_arena, (2 * sizeof(size_t) + sizeof(int)) * (size_t)(opt->nparams + 1));
    devs = (gdl__opt_dev *)GPUDL_MALLOC(sizeof(gdl__opt_dev) * (size_t)(opt->nparams + 1));
    if (!devs || !where_off) {
        GPUDL_FREE(devs);
        gdl__set_error("%s: out of memory (host)", op);
        return -1;
    }
    where_lo = where_off + opt->nparams + 1;
    where_dev = (int *)(where_lo + opt->nparams + 1);
    memset(devs, 0, sizeof(gdl__opt_dev) * (size_t)(opt->nparams + 1));
    for (i = 0; i < opt->nparams; i++) { /* the devices in order of first appearance, the slots */
        const gdl_tensor *p = opt->params[i].p;
        for (d = 0; d < nd && !gdl_device_equal(devs[d].device, p->device); d++) {}
        if (d == nd) devs[nd++].device = p->device;
        where_dev[i] = d;
        where_off[i] = devs[d].region;
        where_lo[i] = devs[d].region_lo;
        devs[d].region += gdl__flat_round((size_t)p->numel * sizeof(gdl_real));
        devs[d].region_lo += gdl__flat_round((size_t)p->numel * lo_size);
    }
    for (d = 0; d < nd; d++) {
        gdl__opt_dev *dv = &devs[d];
        size_t bytes;
        const gdl_backend *be = gdl__be(op, dv->device);
        int ok = 0;
        dv->nregions = nregions;
        dv->low = opt->master;
        bytes = dv->region_lo * 2 + gdl__opt_f32_bytes(dv) + hyper_bytes + GDL__FLAT_ALIGN +
                sizeof(int32_t) * (size_t)(opt->nparams + 1);
        if (be && (dv->flat = (gdl__flat *)GPUDL_MALLOC(sizeof(gdl__flat))) != NULL) {
            memset(dv->flat, 0, sizeof *dv->flat);
            dv->flat->refs = 1;
            dv->flat->device = dv->device;
            dv->flat->bytes = bytes;
            dv->flat->params_bytes = dv->region_lo;
            dv->flat->grad_shift = dv->region_lo;
            dv->hyper_seen = (gdl_opt_hyper *)GPUDL_MALLOC(hyper_bytes);
            if (dv->hyper_seen && (dv->flat->data = be->rt.alloc(bytes + GDL__FLAT_ALIGN)) != NULL) {
                uintptr_t a = (uintptr_t)dv->flat->data;
                dv->flat->base = (char *)dv->flat->data + (GDL__FLAT_ALIGN - a % GDL__FLAT_ALIGN) % GDL__FLAT_ALIGN;
                /* zeros for the state slots; NaN bits in the host copy, so every group is written below */
                memset(dv->hyper_seen, 0xff, hyper_bytes);
                ok = be->rt.memset0(dv->flat->base, bytes) == 0;
            }
        }
        if (!ok) {
            char prev[sizeof gdl__err];
            gdl_device where = dv->device;
            memcpy(prev, gdl__err, sizeof prev);
            for (i = 0; i <= d; i++) {
                if (devs[i].flat && devs[i].flat->data) gdl__be(op, devs[i].device)->rt.free(devs[i].flat->data);
                GPUDL_FREE(devs[i].flat);
                GPUDL_FREE(devs[i].hyper_seen);
            }
            GPUDL_FREE(devs);
            gdl__set_error("%s: cannot make the flat parameter buffer of %.0f bytes on %s: %s", op, (double)bytes,
                           gdl_device_str(where), prev[0] ? prev : "out of memory");
            return -1;
        }
        dv->hyper = (gdl_opt_hyper *)(dv->flat->base + dv->region_lo * 2 + gdl__opt_f32_bytes(dv));
        dv->skip = (gdl_real *)((char *)dv->hyper + hyper_bytes);
        dv->steps = (int32_t *)((char *)dv->skip + GDL__FLAT_ALIGN);
        dv->nsteps = opt->nparams;
    }
    /* the blocks are made: move everything in, then let go of the old ones */
    {
        gdl__opt_dev *old = opt->devs;
        int nold = opt->ndevs, rc = 0;
        opt->devs = devs;
        opt->ndevs = nd;
        for (i = 0; i < opt->nparams; i++) {
            opt->params[i].dev = where_dev[i];
            opt->params[i].off = where_off[i];
            opt->params[i].off_lo = where_lo[i];
        }
        for (i = 0; i < opt->nparams && rc == 0; i++) {
            gdl__opt_param *pp = &opt->params[i];
            gdl__flat *f = devs[pp->dev].flat;
            int gfits = gdl__opt_grad_fits(pp->p);
            if (gdl__opt_move_param(op, opt, pp, f) < 0) rc = -1;
            else if (gfits && gdl__flat_rehome_as(op, pp->p->grad, f, gdl__opt_slot(opt, pp, 1), pp->p->dtype,
                                                  pp->p->grad) < 0)
                rc = -1;
            else if (pp->s1 && gdl__flat_rehome(op, pp->s1, f, gdl__opt_slot(opt, pp, 2)) < 0) rc = -1;
            else if (pp->s2 && gdl__flat_rehome(op, pp->s2, f, gdl__opt_slot(opt, pp, 3)) < 0) rc = -1;
        }
        opt->devs = old;
        opt->ndevs = nold;
        gdl__opt_release_devs(opt);
        opt->devs = devs;
        opt->ndevs = nd;
        opt->layout_dirty = 0;
        opt->steps_dirty = 1;
        if (rc < 0) {
            opt->layout_dirty = 1; /* some tensors moved, some not: made again at the next use */
            return -1;
        }
    }
    if (gdl__opt_push_hyper(op, opt) < 0 || gdl__opt_steps_up(op, opt) < 0) return -1;
    return 0;
}

/* Makes sure every parameter (and its state) is in its slot, making the
   blocks again when the parameters changed: added, moved (gdl_module_to),
   or momentum turned on for an SGD that had no buffers. A gradient made
   outside the block (before it existed, by hand) is moved into its slot. */
static int gdl__opt_layout(const char *op, gdl_optimizer *opt) {
    int i, ok = !opt->layout_dirty && opt->ndevs > 0;
    if (!opt->nparams) return 0;
    if (ok && opt->kind == GDL__OPT_SGD && opt->devs[0].nregions < 3 && gdl__opt_needs_s1(opt)) ok = 0;
    if (ok && opt->devs[0].low != opt->master) ok = 0; /* master weights turned on or off */
    for (i = 0; i < opt->nparams && ok; i++) {
        gdl__opt_param *pp = &opt->params[i];
        const gdl_tensor *p = pp->p;
        if (p->dtype != opt->master || (opt->master != GDL_F32 && (!pp->master ||
                                                                    pp->master->data != gdl__opt_slot(opt, pp, 4))))
            ok = 0;
        else if (p->flat != opt->devs[pp->dev].flat || p->data != gdl__opt_slot(opt, pp, 0) ||
            (pp->s1 && pp->s1->data != gdl__opt_slot(opt, pp, 2)) || (pp->s2 && pp->s2->data != gdl__opt_slot(opt, pp, 3)))
            ok = 0;
    }
    if (!ok) return gdl__opt_rebuild(op, opt);
    for (i = 0; i < opt->nparams; i++) {
        gdl__opt_param *pp = &opt->params[i];
        if (gdl__opt_grad_fits(pp->p) && pp->p->grad->data != gdl__opt_slot(opt, pp, 1) &&
            gdl__flat_rehome(op, pp->p->grad, opt->devs[pp->dev].flat, gdl__opt_slot(opt, pp, 1)) < 0)
            return -1;
    }
    return 0;
}

GPUDL_API int gdl_zero_grad_ex(gdl_optimizer *opt, int set_to_none) {
    int i, d;
    if (!opt) {
        gdl__null_arg("gdl_zero_grad", "opt");
        return -1;
    }
    if (set_to_none) {
        for (i = 0; i < opt->nparams; i++) {
            gdl_tensor *p = opt->params[i].p;
            gdl__free(p->grad);
            p->grad = NULL;
        }
        return 0;
    }
    /* the gradients are one region per block: one memset each (slots of parameters without a grad
       included: backward zeroes a slot when it gives it out) */
    if (gdl__opt_layout("gdl_zero_grad", opt) < 0) return -1;
    for (d = 0; d < opt->ndevs; d++) {
        const gdl_backend *be = gdl__be("gdl_zero_grad", opt->devs[d].device);
        if (!be || be->rt.memset0(opt->devs[d].flat->base + opt->devs[d].region_lo, opt->devs[d].region_lo) < 0)
            return -1;
    }
    for (i = 0; i < opt->nparams; i++) { /* a grad the block could not take (another device or size) */
        gdl__opt_param *pp = &opt->params[i];
        if (pp->p->grad && pp->p->grad->data != gdl__opt_slot(opt, pp, 1) && gdl_zero_grad_tensor(pp->p) < 0)
            return -1;
    }
    return 0;
}
GPUDL_API int gdl_zero_grad(gdl_optimizer *opt) { return gdl_zero_grad_ex(opt, 0); }

/* Makes this parameter's state (zeros, step 0) in its slots; the layout is made. */
static int gdl__opt_ensure_state(const char *op, gdl_optimizer *opt, gdl__opt_param *pp, int index) {
    gdl_tensor *p = pp->p;
    int adam = opt->kind != GDL__OPT_SGD, k;
    char nm[64];
    const char *suffix[3];
    gdl__flat *f;
    if (pp->step) return 0;
    f = opt->devs[pp->dev].flat;
    suffix[0] = "step";
    suffix[1] = adam ? "exp_avg" : "momentum_buffer";
    suffix[2] = "exp_avg_sq";
    pp->step = gdl_zeros(0, NULL, GDL_I32, gdl_cpu()); /* the checkpoint's copy of the count */
    pp->s1 = gdl__flat_view(op, f, gdl__opt_slot(opt, pp, 2), p->ndim, p->shape, GDL_F32, 1);
    if (adam) pp->s2 = gdl__flat_view(op, f, gdl__opt_slot(opt, pp, 3), p->ndim, p->shape, GDL_F32, 1);
    for (k = 0; k < (adam ? 3 : 2); k++) {
        snprintf(nm, sizeof nm, "state.%d.%s", index, suffix[k]);
        pp->names[k] = gdl__nn_strdup(nm);
    }
    if (!pp->step || !pp->s1 || (adam && !pp->s2) || !pp->names[0] || !pp->names[1] || (adam && !pp->names[2])) {
        char prev[sizeof gdl__err];
        memcpy(prev, gdl__err, sizeof prev);
        gdl__opt_free_state(pp);
        pp->step = pp->s1 = pp->s2 = NULL;
        pp->names[0] = pp->names[1] = pp->names[2] = NULL;
        gdl__set_error("%s: cannot make the optimizer state of parameter %d %s: %s", op, index, gdl_shape_str(p),
                       prev[0] ? prev : "out of memory");
        return -1;
    }
    pp->step->name = pp->names[0];
    pp->s1->name = pp->names[1];
    pp->step->owner = pp->s1->owner = GDL__OWN_OPTIM;
    if (adam) pp->s2->name = pp->names[2], pp->s2->owner = GDL__OWN_OPTIM;
    { /* its count in the block starts at 0 too (an asynchronous write: nothing is read back) */
        static const int32_t zero = 0;
        const gdl_backend *be = gdl__be(op, p->device);
        if (!be || be->rt.copy_async(&opt->devs[pp->dev].steps[index], &zero, sizeof zero, 0, NULL) < 0) return -1;
    }
    return 0;
}

/* All or nothing, as one foreach step in PyTorch: every parameter and grad is
   checked and every missing state tensor made (a failure frees what this call
   made) before anything is updated; then one multi-tensor backend call per
   device updates them all (on a GPU one kernel launch, so a failed launch
   updates nothing), and the step counts (in the blocks) advance in that same
   call. With parameters on several devices a failure on a later device
   leaves the earlier devices' parameters updated and counted.
   A steady-state step copies nothing to the device: the table of a device
   is kept while its entries stay the same, and lr changes reach the block
   when they are made (gdl_optim_set_lr, the schedulers). */
static int gdl__step(gdl_optimizer *opt);
GPUDL_API int gdl_step(gdl_optimizer *opt) {
    int span, rc;
    if (!opt) {
        gdl__null_arg("gdl_step", "opt");
        return -1;
    }
    if (opt->nparams == 0) { /* PyTorch refuses at construction: "optimizer got an empty parameter list" */
        gdl__set_error("gdl_step: the %s optimizer has no parameters: add them first (gdl_optim_add_module, "
                       "gdl_optim_add_params)", gdl__opt_kind_name(opt->kind));
        return -1;
    }
#ifdef GDL__ATOMICS
    { /* a model is trained by one thread at a time (MANUAL "Threads"): two steps at once would race */
        int idle = 0;
        if (!gdl__atomic_cas(&opt->stepping, &idle, 1, 0, GDL__MO_ACQUIRE, GDL__MO_RELAXED)) {
            gdl__set_error("gdl_step: the %s optimizer is in a step on another thread: a model is trained by "
                           "one thread at a time", gdl__opt_kind_name(opt->kind));
            return -1;
        }
    }
#endif
    /* the profiler times the whole step on the first parameter's device */
    span = gdl__prof_on && opt->nparams ? gdl__prof_push("gdl_step", opt->params[0].p->device) : 0;
    rc = gdl__step(opt);
    gdl__prof_pop(span, rc == 0);
#ifdef GDL__ATOMICS
    gdl__atomic_store(&opt->stepping, 0, GDL__MO_RELEASE);
#endif
    return rc;
}
/* gdl_step's parts, in order. Every parameter's grad matches it (device, size, dtype), on a usable device. */
static int gdl__step_check_grads(const char *op, gdl_optimizer *opt) {
    int i;
    for (i = 0; i < opt->nparams; i++) {
        gdl_tensor *p = opt->params[i].p, *g = p->grad;
        if (!g) continue; /* as PyTorch: parameters without a grad are skipped */
        if (!gdl_device_equal(p->device, g->device) || g->numel != p->numel || g->dtype != p->dtype) {
            gdl__set_error("%s: %s parameter %d %s %s on %s has a grad %s %s on %s that does not match", op,
                           gdl__opt_kind_name(opt->kind), i, gdl_dtype_name(p->dtype), gdl_shape_str(p),
                           gdl_device_str(p->device), gdl_dtype_name(g->dtype), gdl_shape_str(g),
                           gdl_device_str(g->device));
            return -1;
        }
        if (!gdl__be(op, p->device)) return -1;
    }
    return 0;
}

/* The state of every parameter the step updates (fresh[i]: made now); on failure none is made. */
static int gdl__step_ensure_states(const char *op, gdl_optimizer *opt, char *fresh) {
    int i;
    for (i = 0; i < opt->nparams; i++) {
        gdl__opt_param *pp = &opt->params[i];
        fresh[i] = 0;
        if (!pp->p->grad || !pp->p->numel) continue;
        if (opt->kind == GDL__OPT_SGD && opt->groups[pp->group].momentum == 0 && !pp->s1) continue;
        fresh[i] = !pp->step;
        if (gdl__opt_ensure_state(op, opt, pp, i) < 0) {
            int j;
            for (j = 0; j < i; j++)
                if (fresh[j]) { /* back to no state, as before this call */
                    gdl__opt_param *q = &opt->params[j];
                    gdl__opt_free_state(q);
                    q->step = q->s1 = q->s2 = NULL;
                    q->names[0] = q->names[1] = q->names[2] = NULL;
                }
            return -1;
        }
    }
    return 0;
}

/* Each device's entries, contiguous in t, in parameter order (count[d] of device d). */
static void gdl__step_entries(gdl_optimizer *opt, gdl_opt_tensor *t, int *count) {
    int n = 0, d, i;
    for (d = 0; d < opt->ndevs; d++) {
        gdl__opt_dev *dv = &opt->devs[d];
        count[d] = 0;
        for (i = 0; i < opt->nparams; i++) {
            gdl__opt_param *pp = &opt->params[i];
            gdl_opt_tensor *e;
            if (pp->dev != d || !pp->p->grad || !pp->p->numel) continue;
            e = &t[n + count[d]++];
            memset(e, 0, sizeof *e);
            e->n = pp->p->numel;
            if (pp->master) { /* the f32 master is updated, the parameter rounded from it */
                e->p = GDL__R(pp->master);
                e->plow = pp->p->data;
                e->glow = pp->p->grad->data;
                e->low = (int32_t)pp->p->dtype;
            } else {
                e->p = GDL__R(pp->p);
                e->g = GDL__R(pp->p->grad);
            }
            e->s1 = pp->s1 ? GDL__R(pp->s1) : NULL;
            e->s2 = pp->s2 ? GDL__R(pp->s2) : NULL;
            e->hyper = &dv->hyper[pp->group];
            e->step = pp->step ? &dv->steps[i] : NULL;
            e->skip = dv->skip;
        }
        n += count[d];
    }
}

/* The devices' tables: kept while the entries stay the same (a steady-state step copies nothing). */
static int gdl__step_tables(const char *op, gdl_optimizer *opt, const gdl_opt_tensor *t, const int *count) {
    int d, i;
    for (d = 0, i = 0; d < opt->ndevs; i += count[d], d++) {
        gdl__opt_dev *dv = &opt->devs[d];
        const gdl_backend *be;
        void *tab;
        gdl_opt_tensor *keep;
        if (dv->table && dv->ntab == count[d] && !memcmp(dv->tab, t + i, sizeof(gdl_opt_tensor) * (size_t)count[d]))
            continue;
        if (!(be = gdl__be(op, dv->device))) return -1;
        keep = (gdl_opt_tensor *)GPUDL_MALLOC(sizeof(gdl_opt_tensor) * (size_t)(count[d] + 1));
        if (!keep || !(tab = be->k.opt_table_new(count[d], t + i))) {
            char prev[sizeof gdl__err];
            memcpy(prev, gdl__err, sizeof prev);
            gdl__set_error("%s: cannot make the %s table of %d parameter%s on %s, nothing was updated: %s", op,
                           gdl__opt_kind_name(opt->kind), count[d], count[d] == 1 ? "" : "s",
                           gdl_device_str(dv->device), keep ? prev : "out of memory (host)");
            GPUDL_FREE(keep);
            return -1;
        }
        if (count[d]) memcpy(keep, t + i, sizeof(gdl_opt_tensor) * (size_t)count[d]);
        if (dv->table) be->k.opt_table_free(dv->table);
        GPUDL_FREE(dv->tab);
        dv->table = tab;
        dv->tab = keep;
        dv->ntab = count[d];
    }
    return 0;
}

/* The update: one backend call per device. */
static int gdl__step_update(const char *op, gdl_optimizer *opt) {
    int d, adam = opt->kind != GDL__OPT_SGD;
    for (d = 0; d < opt->ndevs; d++) {
        gdl__opt_dev *dv = &opt->devs[d];
        const gdl_backend *be;
        int rc;
        if (!dv->ntab) continue;
        if (!(be = gdl__be(op, dv->device))) return -1;
        rc = adam ? be->k.adam_multi(dv->table, opt->kind == GDL__OPT_ADAMW) : be->k.sgd_multi(dv->table);
        if (rc < 0) {
            char prev[sizeof gdl__err];
            memcpy(prev, gdl__err, sizeof prev);
            gdl__set_error("%s: the %s update of %d parameter%s on %s failed%s: %s", op, gdl__opt_kind_name(opt->kind),
                           dv->ntab, dv->ntab == 1 ? "" : "s", gdl_device_str(dv->device),
                           d ? " (the parameters of the devices before it were updated)" : ", nothing was updated",
                           prev);
            return -1;
        }
    }
    return 0;
}

static int gdl__ema_step(const char *op, struct gdl_ema *e); /* src/train/ema.h */
static int gdl__step(gdl_optimizer *opt) {
    const char *op = "gdl_step";
    gdl_opt_tensor *t;
    int *count;
    if (gdl__step_check_grads(op, opt) < 0 || gdl__opt_layout(op, opt) < 0) return -1;
    /* the step's lists live in the step arena: a steady-state step stays allocation-free */
    t = (gdl_opt_tensor *)gdl__arena_alloc(&gdl__host_arena, (sizeof(gdl_opt_tensor) + sizeof(int) + 1) *
                                                                 (size_t)(opt->nparams + 1));
    if (!t) {
        gdl__set_error("%s: out of memory (host) for the step's table of %d parameters", op, opt->nparams);
        return -1;
    }
    count = (int *)(t + opt->nparams + 1);
    if (gdl__step_ensure_states(op, opt, (char *)(count + opt->nparams + 1)) < 0 ||
        gdl__opt_push_hyper(op, opt) < 0 || gdl__opt_steps_up(op, opt) < 0)
        return -1;
    gdl__step_entries(opt, t, count);
    if (gdl__step_tables(op, opt, t, count) < 0 || gdl__step_update(op, opt) < 0) return -1;
    if (opt->ema && gdl__ema_step(op, opt->ema) < 0) return -1;
    opt->steps++;
    return 0;
}

