/* src/train/optimizer_state.h — an optimizer's state from outside: master
   weights, its state tensors, the step, the groups' learning rate and momentum. */
GPUDL_API int gdl_optim_set_master_weights(gdl_optimizer *opt, gdl_dtype dt) {
    const char *op = "gdl_optim_set_master_weights";
    gdl_dtype was;
    if (!opt) {
        gdl__null_arg(op, "opt");
        return -1;
    }
    if (dt != GDL_F32 && dt != GDL_BF16 && dt != GDL_F16) {
        gdl__set_error("%s: dtype %s: the parameters can be bf16 or f16 (with f32 master weights), or f32 (off)", op,
                       gdl_dtype_name(dt));
        return -1;
    }
    if (dt == opt->master) return 0;
    if (gdl__capturing) {
        gdl__set_error("%s: the parameters' dtype (%s to %s) cannot change inside a CUDA graph capture", op,
                       gdl_dtype_name(opt->master), gdl_dtype_name(dt));
        return -1;
    }
    if (dt != GDL_F32 && opt->scaler && opt->scaler->o.enabled) {
        gdl__set_error("%s: the optimizer has a GradScaler, which unscales f32 gradients; %s parameters with master "
                       "weights have %s gradients (bf16 needs no loss scaling)", op, gdl_dtype_name(dt),
                       gdl_dtype_name(dt));
        return -1;
    }
    was = opt->master;
    opt->master = dt;
    opt->layout_dirty = 1;
    if (opt->nparams && gdl__opt_layout(op, opt) < 0) {
        opt->master = was; /* the next use moves what did move back */
        opt->layout_dirty = 1;
        return -1;
    }
    return 0;
}

GPUDL_API gdl_dtype gdl_optim_master_weights(const gdl_optimizer *opt) { return opt ? opt->master : GDL_F32; }

/* opt not NULL, and i one of its parameter groups (groups) or parameters. 0 / -1. */
static int gdl__opt_index_ok(const char *op, const gdl_optimizer *opt, int groups, int i) {
    const char *what = groups ? "group" : "parameter";
    int n;
    if (!opt) {
        gdl__null_arg(op, "opt");
        return -1;
    }
    n = groups ? opt->ngroups : opt->nparams;
    if (i >= 0 && i < n) return 0;
    gdl__set_error("%s: %s %d out of range (the optimizer has %d %ss)", op, what, i, n, what);
    return -1;
}

GPUDL_API gdl_tensor *gdl_optim_master_weight(gdl_optimizer *opt, int i) {
    const char *op = "gdl_optim_master_weight";
    if (gdl__opt_index_ok(op, opt, 0, i) < 0) return NULL;
    if (opt->master == GDL_F32) {
        gdl__set_error("%s: the optimizer keeps no master weights (gdl_optim_set_master_weights)", op);
        return NULL;
    }
    if (gdl__opt_layout(op, opt) < 0) return NULL;
    return opt->params[i].master;
}

/* Master weights into the parameters (rounded to nearest even), after they were written (a checkpoint load). */
static int gdl__opt_round_params(const char *op, gdl_optimizer *opt) {
    int i;
    for (i = 0; i < opt->nparams; i++) {
        gdl__opt_param *pp = &opt->params[i];
        const gdl_backend *be;
        if (!pp->master) continue;
        if (!(be = gdl__be(op, pp->p->device)) ||
            be->k.cast(pp->p->data, pp->p->dtype, pp->master->data, GDL_F32, pp->p->numel) < 0)
            return -1;
    }
    return 0;
}

GPUDL_API int gdl_optim_state(gdl_optimizer *opt, const char **names, gdl_tensor **tensors, int max) {
    int i, k, count = 0;
    if (!opt) {
        gdl__null_arg("gdl_optim_state", "opt");
        return -1;
    }
    if (max < 0) {
        gdl__set_error("gdl_optim_state: max %d must be >= 0", max);
        return -1;
    }
    /* the state lives in the flat blocks; the step counts are read back from there (the one wait), and
       a count written into its step tensor afterwards (a checkpoint load) goes up at the next step */
    if (gdl__opt_layout("gdl_optim_state", opt) < 0 || gdl__opt_steps_down("gdl_optim_state", opt) < 0) return -1;
    if (opt->steps_dirty != 1) opt->steps_dirty = 2;
    for (i = 0; i < opt->nparams; i++) {
        gdl__opt_param *pp = &opt->params[i];
        gdl_tensor *ts[3];
        if (!gdl__opt_has_state(opt, pp)) continue;
        if (gdl__opt_ensure_state("gdl_optim_state", opt, pp, i) < 0) return -1;
        ts[0] = pp->step;
        ts[1] = pp->s1;
        ts[2] = pp->s2;
        for (k = 0; k < 3; k++) {
            if (!ts[k]) continue;
            if (count < max) {
                if (names) names[count] = pp->names[k];
                if (tensors) tensors[count] = ts[k];
            }
            count++;
        }
    }
    return count;
}

GPUDL_API int64_t gdl_optim_get_step(const gdl_optimizer *opt) { return opt ? opt->steps : -1; }
GPUDL_API int gdl_optim_set_step(gdl_optimizer *opt, int64_t step) {
    if (!opt || step < 0) {
        if (!opt) gdl__null_arg("gdl_optim_set_step", "opt");
        else gdl__set_error("gdl_optim_set_step: step %lld must be >= 0", (long long)step);
        return -1;
    }
    opt->steps = step;
    return 0;
}
GPUDL_API int gdl_optim_num_groups(const gdl_optimizer *opt) { return opt ? opt->ngroups : -1; }
GPUDL_API int gdl_optim_num_params(const gdl_optimizer *opt) { return opt ? opt->nparams : -1; }

static gdl__opt_group *gdl__opt_group_at(const char *op, const gdl_optimizer *opt, int group) {
    return gdl__opt_index_ok(op, opt, 1, group) < 0 ? NULL : &opt->groups[group];
}

GPUDL_API double gdl_optim_get_lr(const gdl_optimizer *opt, int group) {
    const gdl__opt_group *g = gdl__opt_group_at("gdl_optim_get_lr", opt, group);
    return g ? g->lr : NAN;
}
GPUDL_API int gdl_optim_set_lr(gdl_optimizer *opt, int group, double lr) {
    gdl__opt_group *g = gdl__opt_group_at("gdl_optim_set_lr", opt, group);
    if (!g) return -1;
    if (!(lr >= 0) || lr == INFINITY) {
        gdl__set_error("gdl_optim_set_lr: invalid learning rate %g (must be >= 0)", lr);
        return -1;
    }
    g->lr = lr;
    return gdl__opt_push_hyper("gdl_optim_set_lr", opt); /* into the flat blocks, asynchronously */
}
GPUDL_API double gdl_optim_get_momentum(const gdl_optimizer *opt, int group) {
    const gdl__opt_group *g = gdl__opt_group_at("gdl_optim_get_momentum", opt, group);
    return g ? (opt->kind == GDL__OPT_SGD ? g->momentum : g->beta1) : NAN;
}
GPUDL_API int gdl_optim_set_momentum(gdl_optimizer *opt, int group, double momentum) {
    gdl__opt_group *g = gdl__opt_group_at("gdl_optim_set_momentum", opt, group);
    if (!g) return -1;
    if (!(momentum >= 0 && momentum < 1)) {
        gdl__set_error("gdl_optim_set_momentum: %s %g must be in [0,1)",
                       opt->kind == GDL__OPT_SGD ? "momentum" : "beta1", momentum);
        return -1;
    }
    if (opt->kind == GDL__OPT_SGD) g->momentum = momentum;
    else g->beta1 = momentum;
    return gdl__opt_push_hyper("gdl_optim_set_momentum", opt);
}
