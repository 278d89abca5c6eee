/* ---------------------------------------------------------------------------
   Learning-rate schedulers
   ------------------------------------------------------------------------- */

enum { GDL__SCHED_STEP, GDL__SCHED_COSINE, GDL__SCHED_ONECYCLE, GDL__SCHED_LINEAR, GDL__SCHED_WARMUP_COSINE };

struct gdl_scheduler {
    int kind;
    gdl_optimizer *opt;
    int64_t last_epoch;
    int ngroups;       /* the optimizer's groups when the scheduler was made */
    double *base_lrs;  /* per group: initial_lr */
    double *last_lr;   /* per group: the lr set last */
    int64_t n;         /* step_size, T_max, total_steps or total_iters (warm-up cosine: the warm-up's) */
    int64_t n2;        /* warm-up cosine: the cosine's T_max */
    double a, b;       /* gamma | eta_min | start_factor, end_factor | max_lr */
    double pct_start, final_div;   /* OneCycle */
    int cycle_momentum;
    double base_m, max_m;
};

/* PyTorch's _annealing_cos */
static double gdl__sched_cos(double start, double end, double pct) {
    return end + (start - end) / 2.0 * (cos(3.141592653589793 * pct) + 1);
}

/* lr (and momentum, OneCycle) of group g at step t */
static double gdl__sched_lr(const gdl_scheduler *s, int g, int64_t t, double *momentum) {
    double base = s->base_lrs[g];
    switch (s->kind) {
    case GDL__SCHED_STEP: return base * pow(s->a, (double)(t / s->n));
    case GDL__SCHED_COSINE:
        return s->a + (base - s->a) * (1 + cos(3.141592653589793 * (double)t / (double)s->n)) / 2;
    case GDL__SCHED_LINEAR:
        return base * (s->a + (s->b - s->a) * (double)(t < s->n ? t : s->n) / (double)s->n);
    case GDL__SCHED_WARMUP_COSINE: /* SequentialLR([LinearLR(a, 1, n), CosineAnnealingLR(n2, b)], [n]) */
        if (t < s->n) return base * (s->a + (1 - s->a) * (double)t / (double)s->n);
        return s->b + (base - s->b) * (1 + cos(3.141592653589793 * (double)(t - s->n) / (double)s->n2)) / 2;
    default: { /* OneCycle, two phases as PyTorch (three_phase=False) */
        double end1 = s->pct_start * (double)s->n - 1, end2 = (double)s->n - 1, pct, lr, initial = base;
        double max_lr = s->a, min_lr = initial / s->final_div;
        if ((double)t <= end1) {
            pct = (double)t / end1;
            lr = gdl__sched_cos(initial, max_lr, pct);
            *momentum = gdl__sched_cos(s->max_m, s->base_m, pct);
        } else {
            pct = ((double)t - end1) / (end2 - end1);
            lr = gdl__sched_cos(max_lr, min_lr, pct);
            *momentum = gdl__sched_cos(s->base_m, s->max_m, pct);
        }
        return lr;
    }
    }
}

static void gdl__sched_apply(gdl_scheduler *s) {
    int g;
    for (g = 0; g < s->ngroups && g < s->opt->ngroups; g++) {
        double m = 0, lr = gdl__sched_lr(s, g, s->last_epoch, &m);
        gdl__opt_group *gr = &s->opt->groups[g];
        gr->lr = lr;
        s->last_lr[g] = lr;
        if (s->kind == GDL__SCHED_ONECYCLE && s->cycle_momentum) {
            if (s->opt->kind == GDL__OPT_SGD) gr->momentum = m;
            else gr->beta1 = m;
        }
    }
    /* into the optimizer's flat blocks now (asynchronous copies); an error here shows at its next step,
       which writes what is still missing */
    if (gdl__opt_push_hyper("gdl_scheduler_step", s->opt) < 0) gdl_clear_error();
}

static gdl_scheduler *gdl__sched_new(const char *op, int kind, gdl_optimizer *opt) {
    gdl_scheduler *s;
    int g;
    if (!opt) {
        gdl__null_arg(op, "opt");
        return NULL;
    }
    if (opt->ngroups == 0) {
        gdl__set_error("%s: the optimizer has no parameter groups yet (add parameters first)", op);
        return NULL;
    }
    s = (gdl_scheduler *)gdl__zalloc(op, sizeof(gdl_scheduler));
    if (!s) return NULL;
    if (!(s->base_lrs = (double *)gdl__zalloc(op, sizeof(double) * 2 * (size_t)opt->ngroups))) {
        GPUDL_FREE(s);
        return NULL;
    }
    s->last_lr = s->base_lrs + opt->ngroups;
    s->kind = kind;
    s->opt = opt;
    s->ngroups = opt->ngroups;
    for (g = 0; g < opt->ngroups; g++) {
        /* PyTorch: group.setdefault('initial_lr', group['lr']); base_lrs = initial_lr */
        if (opt->groups[g].initial_lr < 0) opt->groups[g].initial_lr = opt->groups[g].lr;
        s->base_lrs[g] = opt->groups[g].initial_lr;
        s->last_lr[g] = opt->groups[g].lr;
    }
    return s;
}

/* a scheduler of kind with its counts (n, n2) and reals (a, b), applied to opt's groups at once */
static gdl_scheduler *gdl__sched_make(const char *op, int kind, gdl_optimizer *opt, int n, double a, int n2, double b) {
    gdl_scheduler *s = gdl__sched_new(op, kind, opt);
    if (!s) return NULL;
    s->n = n;
    s->a = a;
    s->n2 = n2;
    s->b = b;
    gdl__sched_apply(s);
    return s;
}

/* StepLR's and CosineAnnealingLR's arguments: a count n >= 1 and a finite a >= 0. 0 / -1. */
static int gdl__sched_count_and_real(const char *op, const char *n_name, int n, const char *a_name, double a) {
    if (n >= 1 && a >= 0 && a != INFINITY) return 0;
    gdl__set_error("%s: bad %s %d (must be >= 1) or %s %g (must be finite, >= 0)", op, n_name, n, a_name, a);
    return -1;
}

GPUDL_API gdl_scheduler *gdl_steplr_new(gdl_optimizer *opt, int step_size, double gamma) {
    const char *op = "gdl_steplr_new";
    if (gdl__sched_count_and_real(op, "step_size", step_size, "gamma", gamma) < 0) return NULL;
    return gdl__sched_make(op, GDL__SCHED_STEP, opt, step_size, gamma, 0, 0);
}

GPUDL_API gdl_scheduler *gdl_cosine_lr_new(gdl_optimizer *opt, int T_max, double eta_min) {
    const char *op = "gdl_cosine_lr_new";
    if (gdl__sched_count_and_real(op, "T_max", T_max, "eta_min", eta_min) < 0) return NULL;
    return gdl__sched_make(op, GDL__SCHED_COSINE, opt, T_max, eta_min, 0, 0);
}

GPUDL_API gdl_scheduler *gdl_linear_warmup_new(gdl_optimizer *opt, double start_factor, double end_factor,
                                               int total_iters) {
    if (!(start_factor > 0 && start_factor <= 1) || !(end_factor >= 0 && end_factor <= 1) || total_iters < 1) {
        gdl__set_error("gdl_linear_warmup_new: bad start_factor %g (must be in (0,1]), end_factor %g (in [0,1]) or "
                       "total_iters %d (>= 1)", start_factor, end_factor, total_iters);
        return NULL;
    }
    return gdl__sched_make("gdl_linear_warmup_new", GDL__SCHED_LINEAR, opt, total_iters, start_factor, 0, end_factor);
}

GPUDL_API gdl_scheduler *gdl_warmup_cosine_lr_new(gdl_optimizer *opt, int warmup_iters, double start_factor, int T_max,
                                                  double eta_min) {
    if (warmup_iters < 0 || !(start_factor > 0 && start_factor <= 1) || T_max < 1 || !(eta_min >= 0) ||
        eta_min == INFINITY) {
        gdl__set_error("gdl_warmup_cosine_lr_new: bad warmup_iters %d (>= 0), start_factor %g (in (0,1]), T_max %d "
                       "(>= 1) or eta_min %g (finite, >= 0)", warmup_iters, start_factor, T_max, eta_min);
        return NULL;
    }
    return gdl__sched_make("gdl_warmup_cosine_lr_new", GDL__SCHED_WARMUP_COSINE, opt, warmup_iters, start_factor, T_max,
                           eta_min);
}

GPUDL_API gdl_scheduler *gdl_onecycle_lr_new_ex(gdl_optimizer *opt, double max_lr, int total_steps, double pct_start,
                                                double div_factor, double final_div_factor, int cycle_momentum,
                                                double base_momentum, double max_momentum) {
    const char *op = "gdl_onecycle_lr_new";
    gdl_scheduler *s;
    int g;
    if (total_steps < 1 || !(max_lr > 0) || max_lr == INFINITY || !(pct_start >= 0 && pct_start <= 1) ||
        !(div_factor > 0) || !(final_div_factor > 0)) {
        gdl__set_error("%s: bad max_lr %g (> 0), total_steps %d (>= 1), pct_start %g (in [0,1]), div_factor %g or "
                       "final_div_factor %g (> 0)", op, max_lr, total_steps, pct_start, div_factor, final_div_factor);
        return NULL;
    }
    /* PyTorch divides by (pct_start*total - 1) and by the second phase's length */
    if (pct_start * total_steps - 1 <= 0 || (double)total_steps - pct_start * total_steps <= 0) {
        gdl__set_error("%s: total_steps %d with pct_start %g leaves an empty warm-up or annealing phase", op,
                       total_steps, pct_start);
        return NULL;
    }
    if (cycle_momentum && !(base_momentum >= 0 && max_momentum < 1 && base_momentum <= max_momentum)) {
        gdl__set_error("%s: bad base_momentum %g / max_momentum %g (need 0 <= base <= max < 1)", op, base_momentum,
                       max_momentum);
        return NULL;
    }
    if (!(s = gdl__sched_new(op, GDL__SCHED_ONECYCLE, opt))) return NULL;
    s->n = total_steps;
    s->a = max_lr;
    s->pct_start = pct_start;
    s->final_div = final_div_factor;
    s->cycle_momentum = cycle_momentum != 0;
    s->base_m = base_momentum;
    s->max_m = max_momentum;
    for (g = 0; g < s->ngroups; g++) { /* PyTorch overwrites initial_lr = max_lr / div_factor */
        opt->groups[g].initial_lr = max_lr / div_factor;
        s->base_lrs[g] = max_lr / div_factor;
    }
    gdl__sched_apply(s);
    return s;
}

GPUDL_API gdl_scheduler *gdl_onecycle_lr_new(gdl_optimizer *opt, double max_lr, int total_steps) {
    return gdl_onecycle_lr_new_ex(opt, max_lr, total_steps, 0.3, 25, 1e4, 1, 0.85, 0.95);
}

GPUDL_API int gdl_scheduler_set_last_epoch(gdl_scheduler *s, int64_t last_epoch) {
    if (!s) {
        gdl__null_arg("gdl_scheduler_set_last_epoch", "scheduler");
        return -1;
    }
    if (last_epoch < 0 || (s->kind == GDL__SCHED_ONECYCLE && last_epoch > s->n)) {
        if (last_epoch < 0) gdl__set_error("gdl_scheduler_set_last_epoch: last_epoch %lld must be >= 0", (long long)last_epoch);
        else
            gdl__set_error("gdl_scheduler_set_last_epoch: tried to step %lld times; the specified number of total "
                           "steps is %lld", (long long)last_epoch, (long long)s->n);
        return -1;
    }
    s->last_epoch = last_epoch;
    gdl__sched_apply(s);
    return 0;
}

GPUDL_API int gdl_scheduler_step(gdl_scheduler *s) {
    if (!s) {
        gdl__null_arg("gdl_scheduler_step", "scheduler");
        return -1;
    }
    if (s->kind == GDL__SCHED_ONECYCLE && s->last_epoch + 1 > s->n) {
        gdl__set_error("gdl_scheduler_step: OneCycleLR: tried to step %lld times; the specified number of total "
                       "steps is %lld", (long long)(s->last_epoch + 1), (long long)s->n);
        return -1;
    }
    s->last_epoch++;
    gdl__sched_apply(s);
    return 0;
}

GPUDL_API int64_t gdl_scheduler_get_last_epoch(const gdl_scheduler *s) { return s ? s->last_epoch : -1; }

GPUDL_API double gdl_scheduler_get_lr(const gdl_scheduler *s, int group) {
    if (!s) {
        gdl__null_arg("gdl_scheduler_get_lr", "scheduler");
        return NAN;
    }
    if (group < 0 || group >= s->ngroups) {
        gdl__set_error("gdl_scheduler_get_lr: group %d out of range (the scheduler covers %d groups)", group, s->ngroups);
        return NAN;
    }
    return s->last_lr[group];
}

GPUDL_API void gdl_scheduler_free(gdl_scheduler *s) {
    if (!s) return;
    GPUDL_FREE(s->base_lrs);
    GPUDL_FREE(s);
}

