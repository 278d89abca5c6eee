/* ---- checkpoints ---- */

#define GDL__CKPT_MAX 4096 /* tensors in one checkpoint */

typedef struct gdl__ckpt {
    int n;
    const char *names[GDL__CKPT_MAX]; /* the names in the file */
    gdl_tensor *tensors[GDL__CKPT_MAX];
    char *owned[GDL__CKPT_MAX];       /* prefixed names we allocated */
    gdl_module *m;                    /* the model, for its tied parameters' other names */
    int prefixed;                     /* model names carry "model." */
} gdl__ckpt;

/* (src/nn/transformer.h) the tensor a tied parameter's name refers to, NULL when name is not one */
static gdl_tensor *gdl__nn_tied_tensor(gdl_module *root, const char *name);

/* the tensor file name `name` refers to under a tied parameter's name, NULL when none */
static gdl_tensor *gdl__ckpt_tied(const gdl__ckpt *c, const char *name) {
    if (c->prefixed && strncmp(name, "model.", 6)) return NULL;
    return gdl__nn_tied_tensor(c->m, c->prefixed ? name + 6 : name);
}

static void gdl__ckpt_free(gdl__ckpt *c) {
    int i;
    for (i = 0; i < c->n; i++) GPUDL_FREE(c->owned[i]);
    GPUDL_FREE(c);
}

/* Collects model (and optimizer) tensors with their file names. */
static gdl__ckpt *gdl__ckpt_collect(const char *op, gdl_module *m, gdl_optimizer *opt, int prefixed) {
    gdl__ckpt *c = (gdl__ckpt *)gdl__zalloc(op, sizeof(gdl__ckpt));
    const char *names[GDL__CKPT_MAX];
    gdl_tensor *ts[GDL__CKPT_MAX];
    int k, part;
    if (!c) return NULL;
    c->m = m;
    c->prefixed = prefixed;
    /* master weights: the masters are made (or moved) first, and saved under their parameters' names (f32), so a
       resume is bit for bit and a plain f32 model loads them as its parameters */
    if (opt && opt->master != GDL_F32 && gdl__opt_layout(op, opt) < 0) {
        gdl__ckpt_free(c);
        return NULL;
    }
    for (part = 0; part < (opt ? opt->ema ? 3 : 2 : 1); part++) {
        int n = part != 1 ? gdl_module_named_tensors(m, GDL_PARAMS_AND_BUFFERS, names, ts, GDL__CKPT_MAX)
                          : gdl_optim_state(opt, names, ts, GDL__CKPT_MAX);
        if (part == 2 && n > 0 && n <= GDL__CKPT_MAX) { /* the EMA's averages, under their tensors' names */
            int j = 0;
            for (k = 0; k < n; k++)
                if ((ts[j] = gdl__ema_of(opt->ema, ts[k])) != NULL) names[j++] = names[k];
            n = j;
        }
        if (part == 0 && opt && opt->master != GDL_F32 && n > 0 && n <= GDL__CKPT_MAX) {
            int j;
            for (k = 0; k < n; k++)
                for (j = 0; j < opt->nparams; j++)
                    if (opt->params[j].p == ts[k] && opt->params[j].master) {
                        ts[k] = opt->params[j].master;
                        break;
                    }
        }
        const char *prefix = part == 0 ? "model." : part == 1 ? "optim." : "ema.";
        if (n < 0 || c->n + n > GDL__CKPT_MAX) {
            if (n >= 0) gdl__set_error("%s: more than %d tensors", op, GDL__CKPT_MAX);
            gdl__ckpt_free(c);
            return NULL;
        }
        for (k = 0; k < n; k++) {
            c->tensors[c->n] = ts[k];
            if (prefixed) {
                size_t len = strlen(prefix) + strlen(names[k]) + 1;
                char *s = (char *)GPUDL_MALLOC(len);
                if (!s) {
                    gdl__set_error("%s: out of memory (host)", op);
                    gdl__ckpt_free(c);
                    return NULL;
                }
                snprintf(s, len, "%s%s", prefix, names[k]);
                c->owned[c->n] = s;
                c->names[c->n] = s;
            } else {
                c->names[c->n] = names[k];
            }
            c->n++;
        }
    }
    return c;
}

static int gdl__ckpt_write(const char *op, const char *path, gdl__ckpt *c, int n_meta, const char *const *keys,
                           const char *const *vals) {
    gdl_st_tensor *st = (gdl_st_tensor *)GPUDL_MALLOC(sizeof(gdl_st_tensor) * (size_t)(c->n + 1));
    void **host = (void **)GPUDL_MALLOC(sizeof(void *) * (size_t)(c->n + 1));
    int i, rc = 0;
    if (!st || !host) {
        GPUDL_FREE(st);
        GPUDL_FREE(host);
        gdl__set_error("%s: out of memory (host)", op);
        return -1;
    }
    memset(host, 0, sizeof(void *) * (size_t)(c->n + 1));
    for (i = 0; i < c->n && rc == 0; i++) {
        gdl_tensor *t = c->tensors[i];
        size_t bytes = (size_t)t->numel * gdl_dtype_size(t->dtype);
        if (t->dtype != GDL_F32 && t->dtype != GDL_I32 && t->dtype != GDL_F16 && t->dtype != GDL_BF16) {
            gdl__set_error("%s: tensor %s is %s; checkpoints hold f32 and i32 tensors (f16/bf16 saved as f32)", op,
                           c->names[i], gdl_dtype_name(t->dtype));
            rc = -1;
            break;
        }
        if (t->dtype == GDL_F16 || t->dtype == GDL_BF16) { /* widened exactly, so every file holds one float type */
            uint16_t *h = (uint16_t *)GPUDL_MALLOC(bytes + 1);
            gdl_real *w = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)t->numel + 1);
            int64_t j;
            host[i] = w;
            if (!h || !w || gdl_copy_to_host(t, h, bytes) < 0) {
                if (!h || !w) gdl__set_error("%s: out of memory (host)", op);
                GPUDL_FREE(h);
                rc = -1;
                break;
            }
            for (j = 0; j < t->numel; j++)
                w[j] = (gdl_real)(t->dtype == GDL_F16 ? gdl_f16_to_f32(h[j]) : gdl_bf16_to_f32(h[j]));
            GPUDL_FREE(h);
        } else if (t->device.type == GDL_DEVICE_CPU) {
            host[i] = NULL;
        } else if (!(host[i] = GPUDL_MALLOC(bytes + 1)) || gdl_copy_to_host(t, host[i], bytes) < 0) {
            if (!host[i]) gdl__set_error("%s: out of memory (host)", op);
            rc = -1;
            break;
        }
        st[i].name = c->names[i];
        st[i].dtype = t->dtype == GDL_I32 ? "I32" : sizeof(gdl_real) == 8 ? "F64" : "F32";
        st[i].ndim = t->ndim;
        st[i].shape = t->shape;
        st[i].data = host[i] ? host[i] : t->data;
    }
    if (rc == 0) rc = gdl__st_write(op, path, c->n, st, n_meta, keys, vals);
    for (i = 0; i < c->n; i++) GPUDL_FREE(host[i]);
    GPUDL_FREE(host);
    GPUDL_FREE(st);
    return rc;
}

GPUDL_API int gdl_save_model(gdl_module *m, const char *path) {
    static const char *const keys[2] = {"format", "gpudl"};
    static const char *const vals[2] = {"pt", GPUDL_VERSION};
    gdl__ckpt *c;
    int rc;
    if (!m || !path) {
        gdl__null_arg("gdl_save_model", !m ? "module" : "path");
        return -1;
    }
    if (!(c = gdl__ckpt_collect("gdl_save_model", m, NULL, 0))) return -1;
    rc = gdl__ckpt_write("gdl_save_model", path, c, 2, keys, vals);
    gdl__ckpt_free(c);
    return rc;
}

/* Checks every tensor of c against the file (names, dtypes, shapes, nothing
   extra) and converts each into a new host buffer of gdl_real: bufs[i]. */
static int gdl__ckpt_check(const char *op, const char *path, const gdl__ckpt *c, const gdl_st_file *f, void **bufs) {
    int i, k;
    for (k = 0; k < f->n; k++) {
        for (i = 0; i < c->n; i++)
            if (strcmp(f->entries[k].name, c->names[i]) == 0) break;
        if (i == c->n && gdl__ckpt_tied(c, f->entries[k].name)) continue; /* read below when the owner's name is missing */
        if (i == c->n) {
            const char *name = f->entries[k].name;
            int is_ckpt = strncmp(name, "model.", 6) == 0 || strncmp(name, "optim.", 6) == 0;
            if (is_ckpt && strcmp(op, "gdl_load_model") == 0)
                gdl__set_error("%s: %s: this is a training checkpoint (it holds '%s'): load it with "
                               "gdl_checkpoint_load, or save the model alone with gdl_save_model", op, path, name);
            else if (strncmp(name, "ema.", 4) == 0)
                gdl__set_error("%s: %s: the file holds a weight EMA ('%s'): attach one to the optimizer "
                               "(gdl_ema_new) before loading, or save without", op, path, name);
            else if (strncmp(name, "optim.", 6) == 0)
                gdl__set_error("%s: %s: the file holds optimizer state '%s' that this optimizer has no place for: "
                               "it was saved from another kind of optimizer (Adam's exp_avg into SGD?) or with "
                               "other parameters", op, path, name);
            else if (!is_ckpt && (strcmp(op, "gdl_checkpoint_load") == 0 || strcmp(op, "gdl_load_checkpoint") == 0))
                gdl__set_error("%s: %s: unexpected tensor '%s': this looks like a model file (gdl_save_model): "
                               "load it with gdl_load_model", op, path, name);
            else
                gdl__set_error("%s: %s: unexpected tensor '%s' (not in the model)", op, path, name);
            return -1;
        }
    }
    for (i = 0; i < c->n; i++) {
        const gdl_st_entry *e = gdl_st_find(f, c->names[i]);
        const gdl_tensor *t = c->tensors[i];
        const unsigned char *src;
        gdl_real *dst;
        int64_t j;
        for (k = 0; !e && k < f->n; k++) /* a tied parameter saved under its other name (PyTorch may keep that one) */
            if (gdl__ckpt_tied(c, f->entries[k].name) == t) e = &f->entries[k];
        if (!e) {
            if (strncmp(c->names[i], "optim.", 6) == 0)
                gdl__set_error("%s: %s: missing optimizer state '%s' (saved from another kind of optimizer, or "
                               "without one?)", op, path, c->names[i]);
            else if (strncmp(c->names[i], "ema.", 4) == 0)
                gdl__set_error("%s: %s: missing the weight EMA's '%s' (saved without an EMA, or with "
                               "use_buffers off?)", op, path, c->names[i]);
            else
                gdl__set_error("%s: %s: missing tensor '%s'", op, path, c->names[i]);
            return -1;
        }
        if (e->ndim != t->ndim || (t->ndim && memcmp(e->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim))) {
            gdl__set_error("%s: %s: tensor '%s' has shape %s in the file but %s in the model", op, path, c->names[i],
                           gdl__shape_fmt(e->ndim, e->shape), gdl_shape_str(t));
            return -1;
        }
        if (t->dtype == GDL_I32) { /* integer state (step counts): stored as I32, taken as is */
            if (strcmp(e->dtype, "I32")) {
                gdl__set_error("%s: %s: tensor '%s' has dtype %s; expected I32", op, path, c->names[i], e->dtype);
                return -1;
            }
            if (!(bufs[i] = GPUDL_MALLOC(4 * (size_t)t->numel + 1))) {
                gdl__set_error("%s: out of memory (host)", op);
                return -1;
            }
            src = f->data + e->begin;
            for (j = 0; j < t->numel; j++)
                ((int32_t *)bufs[i])[j] = (int32_t)((uint32_t)src[4 * j] | (uint32_t)src[4 * j + 1] << 8 |
                                                    (uint32_t)src[4 * j + 2] << 16 | (uint32_t)src[4 * j + 3] << 24);
            continue;
        }
        if (strcmp(e->dtype, "F32") && strcmp(e->dtype, "F64") && strcmp(e->dtype, "F16") && strcmp(e->dtype, "BF16")) {
            gdl__set_error("%s: %s: tensor '%s' has dtype %s; expected F32, F64, F16 or BF16", op, path, c->names[i],
                           e->dtype);
            return -1;
        }
        if (!(bufs[i] = GPUDL_MALLOC(sizeof(gdl_real) * (size_t)t->numel + 1))) {
            gdl__set_error("%s: out of memory (host)", op);
            return -1;
        }
        dst = (gdl_real *)bufs[i];
        src = f->data + e->begin;
        {
            int kind = !strcmp(e->dtype, "F32") ? 0 : !strcmp(e->dtype, "F64") ? 1 : !strcmp(e->dtype, "F16") ? 2 : 3;
            for (j = 0; j < t->numel; j++) { /* little-endian in the file */
                if (kind == 0) {
                    uint32_t u = (uint32_t)src[4 * j] | (uint32_t)src[4 * j + 1] << 8 | (uint32_t)src[4 * j + 2] << 16 |
                                 (uint32_t)src[4 * j + 3] << 24;
                    dst[j] = (gdl_real)gdl__bits_f32(u);
                } else if (kind == 1) {
                    uint64_t u = 0;
                    double d;
                    int b;
                    for (b = 7; b >= 0; b--) u = u << 8 | src[8 * j + b];
                    memcpy(&d, &u, 8);
                    dst[j] = (gdl_real)d;
                } else {
                    uint16_t h = (uint16_t)(src[2 * j] | src[2 * j + 1] << 8);
                    dst[j] = (gdl_real)(kind == 2 ? gdl_f16_to_f32(h) : gdl_bf16_to_f32(h));
                }
            }
            if (t->dtype == GDL_F16 || t->dtype == GDL_BF16) /* rounded in place (2j <= j's element, read before) */
                for (j = 0; j < t->numel; j++) {
                    float v = (float)dst[j];
                    ((uint16_t *)bufs[i])[j] = t->dtype == GDL_F16 ? gdl_f32_to_f16(v) : gdl_f32_to_bf16(v);
                }
        }
    }
    return 0;
}

static int gdl__ckpt_apply(const char *op, const gdl__ckpt *c, void **bufs) {
    int i;
    for (i = 0; i < c->n; i++)
        if (gdl__copy_bytes(op, c->tensors[i]->data, c->tensors[i]->device, bufs[i], gdl_cpu(),
                            gdl_dtype_size(c->tensors[i]->dtype) * (size_t)c->tensors[i]->numel) < 0)
            return -1;
    return 0;
}

static void gdl__free_bufs(void **bufs, int n) {
    int i;
    if (!bufs) return;
    for (i = 0; i < n; i++) GPUDL_FREE(bufs[i]);
    GPUDL_FREE(bufs);
}

static void **gdl__alloc_bufs(const char *op, int n) { return (void **)gdl__zalloc(op, sizeof(void *) * (size_t)(n + 1)); }

/* A load's start: the arguments checked, m's (and opt's) tensors collected, the file read. NULL + error. */
static gdl__ckpt *gdl__ckpt_open(const char *op, const char *path, gdl_module *m, gdl_optimizer *opt, int prefixed,
                                 gdl_st_file *f) {
    gdl__ckpt *c;
    if (!m || !path) {
        gdl__null_arg(op, !m ? "module" : "path");
        return NULL;
    }
    if (!(c = gdl__ckpt_collect(op, m, opt, prefixed))) return NULL;
    if (gdl__st_read(op, path, f) < 0) {
        gdl__ckpt_free(c);
        return NULL;
    }
    return c;
}

GPUDL_API int gdl_load_model(gdl_module *m, const char *path) {
    const char *op = "gdl_load_model";
    gdl_st_file f;
    gdl__ckpt *c;
    void **bufs;
    int rc;
    if (!(c = gdl__ckpt_open(op, path, m, NULL, 0, &f))) return -1;
    bufs = gdl__alloc_bufs(op, c->n);
    rc = bufs && gdl__ckpt_check(op, path, c, &f, bufs) == 0 ? gdl__ckpt_apply(op, c, bufs) : -1;
    gdl__free_bufs(bufs, c->n);
    gdl__ckpt_free(c);
    gdl_st_free(&f);
    return rc;
}

/* gdl_fit's position in a checkpoint: the fields of gdl__fit_state as metadata "fit.FIELD", written in this order
   by gdl__checkpoint_save and read by gdl__fit_load (the first 10 in every checkpoint; replicas and batch_size,
   then the early-stopping three, absent from older ones) */
typedef struct gdl__fit_key {
    const char *key;
    size_t off;
    int real; /* a double, written exactly (%.17g); else an int64_t */
} gdl__fit_key;
#define GDL__FIT_KEY(field, real) {"fit." #field, offsetof(gdl__fit_state, field), real}
static const gdl__fit_key gdl__fit_keys[15] = {
    GDL__FIT_KEY(epoch, 0),   GDL__FIT_KEY(batch, 0),    GDL__FIT_KEY(loader_epoch, 0), GDL__FIT_KEY(num_batches, 0),
    GDL__FIT_KEY(val_epoch, 0), GDL__FIT_KEY(loss_sum, 1), GDL__FIT_KEY(seconds, 1),    GDL__FIT_KEY(samples, 0),
    GDL__FIT_KEY(correct, 0), GDL__FIT_KEY(counted, 0),  GDL__FIT_KEY(replicas, 0),     GDL__FIT_KEY(batch_size, 0),
    GDL__FIT_KEY(es_best, 1), GDL__FIT_KEY(best, 1),     GDL__FIT_KEY(es_wait, 0)};
#undef GDL__FIT_KEY

/* metadata of a training checkpoint */
#define GDL__META_MAX 96 /* 6 + 2 per group (32 at most) + 1 + 12 fit.* keys, with room */
typedef struct gdl__meta {
    int n;
    char keys[GDL__META_MAX][48];
    char vals[GDL__META_MAX][48];
    const char *kp[GDL__META_MAX], *vp[GDL__META_MAX];
} gdl__meta;

static void gdl__meta_add(gdl__meta *md, const char *key, const char *fmt, ...) {
    va_list ap;
    if (md->n >= GDL__META_MAX) return;
    snprintf(md->keys[md->n], sizeof md->keys[0], "%s", key);
    va_start(ap, fmt);
    vsnprintf(md->vals[md->n], sizeof md->vals[0], fmt, ap);
    va_end(ap);
    md->kp[md->n] = md->keys[md->n];
    md->vp[md->n] = md->vals[md->n];
    md->n++;
}

/* the metadata value of key in f, NULL + error when missing */
static const char *gdl__meta_find(const char *op, const char *path, const gdl_st_file *f, const char *key) {
    int i;
    for (i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    gdl__set_error("%s: %s: metadata '%s' is missing: not a gpudl training checkpoint (a model file saved with "
                   "gdl_save_model loads with gdl_load_model)", op, path, key);
    return NULL;
}

/* a metadata value of f as a number; 0 / -1 */
static int gdl__meta_get(const char *op, const char *path, const gdl_st_file *f, const char *key, double *out) {
    const char *v = gdl__meta_find(op, path, f, key);
    char *end;
    if (!v) return -1;
    *out = strtod(v, &end);
    if (end != v && *end == 0) return 0;
    gdl__set_error("%s: %s: metadata '%s' is not a number: '%s'", op, path, key, v);
    return -1;
}

static int gdl__meta_get_u64(const char *op, const char *path, const gdl_st_file *f, const char *key, uint64_t *out) {
    const char *v = gdl__meta_find(op, path, f, key);
    char *end;
    if (!v) return -1;
    errno = 0;
    *out = (uint64_t)strtoull(v, &end, 10);
    if (end != v && *end == 0 && errno != ERANGE && v[strspn(v, " \t")] != '-') return 0;
    gdl__set_error("%s: %s: metadata '%s' is not an integer: '%s'", op, path, key, v);
    return -1;
}

/* The one door from a number read from a file to an integer: v (metadata `key`) must be finite, integral
   and within [lo, hi] (bounds exactly representable, |bound| <= 9e15 < 2^53), checked before the cast
   (a cast of 1e300 or NaN is undefined behaviour). 0 and *out, or -1 + error. */
static int gdl__meta_int(const char *op, const char *path, const char *key, double v, double lo, double hi,
                         int64_t *out) {
    if (!(v >= lo && v <= hi && v == floor(v))) {
        gdl__set_error("%s: %s: metadata '%s' is %g: not an integer in [%.0f, %.0f] (a damaged file?)", op, path,
                       key, v, lo, hi);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}
#define GDL__META_INT_MAX 9e15 /* every count a checkpoint holds; doubles are exact integers up to 2^53 */

/* gdl_checkpoint_save, plus gdl_fit's position (fs, may be NULL) as metadata fit.* */
static int gdl__checkpoint_save(const char *op, const char *path, gdl_module *m, gdl_optimizer *opt,
                                gdl_scheduler *sched, int64_t epoch, const gdl__fit_state *fs) {
    gdl__meta *md;
    gdl__ckpt *c;
    uint64_t seed, counter;
    int g, rc;
    if (!m || !path) {
        gdl__null_arg(op, !m ? "module" : "path");
        return -1;
    }
    if (!(md = (gdl__meta *)gdl__zalloc(op, sizeof(gdl__meta)))) return -1;
    seed = gdl_rng_get_state(&counter);
    gdl__meta_add(md, "gpudl.checkpoint", "%s", GPUDL_VERSION);
    gdl__meta_add(md, "epoch", "%lld", (long long)epoch);
    gdl__meta_add(md, "rng.seed", "%llu", (unsigned long long)seed);
    gdl__meta_add(md, "rng.counter", "%llu", (unsigned long long)counter);
    if (opt && gdl_optim_num_groups(opt) > 32) {
        gdl__set_error("%s: the optimizer has %d parameter groups; checkpoints hold at most 32", op,
                       gdl_optim_num_groups(opt));
        GPUDL_FREE(md);
        return -1;
    }
    if (opt) {
        gdl__meta_add(md, "optim.step", "%lld", (long long)gdl_optim_get_step(opt));
        gdl__meta_add(md, "optim.groups", "%d", gdl_optim_num_groups(opt));
        for (g = 0; g < gdl_optim_num_groups(opt) && g < 32; g++) {
            char k[48];
            snprintf(k, sizeof k, "optim.lr.%d", g);
            gdl__meta_add(md, k, "%.17g", gdl_optim_get_lr(opt, g));
            snprintf(k, sizeof k, "optim.momentum.%d", g);
            gdl__meta_add(md, k, "%.17g", gdl_optim_get_momentum(opt, g));
        }
    }
    if (sched) gdl__meta_add(md, "sched.last_epoch", "%lld", (long long)gdl_scheduler_get_last_epoch(sched));
    if (opt && opt->ema) gdl__meta_add(md, "ema.n_averaged", "%lld", (long long)gdl_ema_num_updates(opt->ema));
    if (opt && opt->scaler && opt->scaler->o.enabled) { /* PyTorch's GradScaler.state_dict() */
        double sc = gdl_grad_scaler_get_scale(opt->scaler);
        int64_t tr = gdl_grad_scaler_get_growth_tracker(opt->scaler);
        if (sc != sc || tr < 0) {
            GPUDL_FREE(md);
            return -1;
        }
        gdl__meta_add(md, "scaler.scale", "%.17g", sc);
        gdl__meta_add(md, "scaler.growth_tracker", "%lld", (long long)tr);
        gdl__meta_add(md, "scaler.growth_factor", "%.17g", opt->scaler->o.growth_factor);
        gdl__meta_add(md, "scaler.backoff_factor", "%.17g", opt->scaler->o.backoff_factor);
        gdl__meta_add(md, "scaler.growth_interval", "%d", opt->scaler->o.growth_interval);
    }
    if (fs) {
        for (g = 0; g < 15; g++) {
            const char *p = (const char *)fs + gdl__fit_keys[g].off;
            if (gdl__fit_keys[g].real) gdl__meta_add(md, gdl__fit_keys[g].key, "%.17g", *(const double *)p);
            else gdl__meta_add(md, gdl__fit_keys[g].key, "%lld", (long long)*(const int64_t *)p);
        }
    }
    if (!(c = gdl__ckpt_collect(op, m, opt, 1))) {
        GPUDL_FREE(md);
        return -1;
    }
    rc = gdl__ckpt_write(op, path, c, md->n, md->kp, md->vp);
    gdl__ckpt_free(c);
    GPUDL_FREE(md);
    return rc;
}

GPUDL_API int gdl_checkpoint_save(gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched, int64_t epoch,
                                  const char *path) {
    return gdl__checkpoint_save("gdl_checkpoint_save", path, m, opt, sched, epoch, NULL);
}
/* the spelling before gdl_checkpoint_save (path first); deprecated, kept for one release */
GPUDL_API int gdl_save_checkpoint(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                                  int64_t epoch) {
    return gdl__checkpoint_save("gdl_save_checkpoint", path, m, opt, sched, epoch, NULL);
}

static int gdl__fit_save(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                         const gdl__fit_state *fs) {
    return gdl__checkpoint_save("gdl_fit", path, m, opt, sched, fs->epoch, fs);
}

static int gdl__checkpoint_load(const char *op, const char *path, gdl_module *m, gdl_optimizer *opt,
                                gdl_scheduler *sched, int64_t *epoch, int ddp);

/* gdl_fit's position from the checkpoint at path, checked against this run (the train loader, epochs)
   before anything changes; then the checkpoint itself (all or nothing; under DDP on every rank or on none).
   A checkpoint taken with other shards (world size) or another batch size is resumed where the same
   samples of the epoch are done: its position in samples over every rank (batch x batch size x world
   size) must be a whole number of this run's batches, or the epoch's end. 0 / -1. */
static int gdl__fit_load(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                         gdl__fit_state *fs, const gdl_loader *train, int epochs, int ddp) {
    static const char op[] = "gdl_fit";
    double v[12], es[3] = {NAN, NAN, 0};
    int64_t iv[12], es_wait = 0;
    gdl_st_file f;
    int i, rc = 0, nk = 10, has_es = 0;
    int64_t num_batches = train->nb, W = train->o.num_replicas > 1 ? train->o.num_replicas : 1, B = train->B;
    if (gdl__st_read(op, path, &f) < 0) goto fail;
    for (i = 0; i < f.n_meta && strncmp(f.meta_keys[i], "fit.", 4) != 0; i++) {
    }
    if (i == f.n_meta) {
        gdl__set_error("%s: cannot resume from %s: it holds no gdl_fit position (fit.* metadata); only checkpoints "
                       "written by gdl_fit's checkpoint_every can be resumed from", op, path);
        gdl_st_free(&f);
        goto fail;
    }
    for (i = 0; i < f.n_meta; i++) { /* the shards and batch size, early stopping: absent from older checkpoints */
        if (strcmp(f.meta_keys[i], gdl__fit_keys[10].key) == 0) nk = 12;
        if (strcmp(f.meta_keys[i], gdl__fit_keys[14].key) == 0) has_es = 1;
    }
    for (i = 0; i < nk && rc == 0; i++) rc = gdl__meta_get(op, path, &f, gdl__fit_keys[i].key, &v[i]);
    for (i = 0; i < 3 && has_es && rc == 0; i++) rc = gdl__meta_get(op, path, &f, gdl__fit_keys[12 + i].key, &es[i]);
    gdl_st_free(&f);
    if (rc < 0) goto fail;
    if (nk == 10) v[10] = (double)W, v[11] = (double)B; /* taken as this run's */
    /* integers in range before they are cast (a damaged file may hold anything, NaN included) */
    for (i = 0; i < nk; i++)
        if (!gdl__fit_keys[i].real &&
            gdl__meta_int(op, path, gdl__fit_keys[i].key, v[i], -1, GDL__META_INT_MAX, &iv[i]) < 0)
            goto fail;
    if (nk == 10) iv[10] = W, iv[11] = B;
    if (gdl__meta_int(op, path, gdl__fit_keys[14].key, es[2], 0, 1e9, &es_wait) < 0) goto fail;
    if (!(v[5] == v[5] && v[6] >= 0)) {
        gdl__set_error("%s: %s: damaged fit.loss_sum or fit.seconds", op, path);
        goto fail;
    }
    if (v[0] < 1 || v[0] > epochs || v[1] < 0 || v[1] > v[3] || v[2] < 0 || v[7] < 0 || v[8] < 0 || v[9] < 0 ||
        v[10] < 1 || v[11] < 1) {
        gdl__set_error("%s: cannot resume from %s: it was taken at epoch %.0f, batch %.0f of %.0f; this run has %d "
                       "epochs", op, path, v[0], v[1], v[3], epochs);
        goto fail;
    }
    fs->batch = iv[1];
    if (iv[10] == W && iv[11] == B) {
        if (iv[3] != num_batches) {
            gdl__set_error("%s: cannot resume from %s: it was taken at epoch %.0f, batch %.0f of a loader with %.0f "
                           "batches per epoch; this run's has %lld (another dataset?)", op, path, v[0], v[1], v[3],
                           (long long)num_batches);
            goto fail;
        }
    } else if (iv[1] == iv[3]) { /* taken at the end of an epoch */
        fs->batch = num_batches;
    } else { /* the same samples done: the sampler re-shards the epoch for this run's world size */
        int64_t done;
        if ((double)iv[1] * (double)iv[10] * (double)iv[11] > GDL__META_INT_MAX) { /* no overflow below */
            gdl__set_error("%s: %s: its position (batch %.0f of batch size %.0f on %.0f ranks) is out of range", op,
                           path, v[1], v[11], v[10]);
            goto fail;
        }
        done = iv[1] * iv[10] * iv[11];
        if (done % (W * B) != 0 || done / (W * B) > num_batches) {
            gdl__set_error("%s: cannot resume from %s: it was taken in epoch %.0f after %lld samples (batch %.0f of "
                           "batch size %.0f on %.0f ranks); with batch size %lld on %lld ranks (%lld samples a step) "
                           "that is not a whole number of batches: resume from a checkpoint at an epoch's end, or "
                           "keep the samples per step", op, path, v[0], (long long)done, v[1], v[11], v[10],
                           (long long)B, (long long)W, (long long)(W * B));
            goto fail;
        }
        fs->batch = done / (W * B);
    }
    fs->epoch = iv[0];
    fs->loader_epoch = iv[2];
    fs->num_batches = num_batches;
    fs->val_epoch = iv[4];
    fs->loss_sum = v[5]; /* printed with %.17g: exact */
    fs->seconds = v[6];
    fs->samples = iv[7];
    fs->correct = iv[8];
    fs->counted = iv[9];
    fs->replicas = W;
    fs->batch_size = B;
    fs->es_best = es[0], fs->best = es[1], fs->es_wait = es_wait;
    return gdl__checkpoint_load(op, path, m, opt, sched, NULL, ddp);
fail:
    if (ddp) gdl__dist_agree(op, "loading the checkpoint to resume from", 0);
    return -1;
}

/* ddp: every rank loads, or none: the ranks agree once everything is checked, before anything changes
   (*agreed says it was done) */
static int gdl__checkpoint_load_(const char *op, const char *path, gdl_module *m, gdl_optimizer *opt,
                                 gdl_scheduler *sched, int64_t *epoch, int ddp, int *agreed) {
    gdl_st_file f;
    gdl__ckpt *c;
    void **bufs = NULL;
    double ep = 0, step = 0, groups = 0, last = 0, lr[32], mom[32], sc_scale = 0, sc_tracker = 0, sc_opt[3], nav = 0;
    int64_t i_ep = 0, i_step = 0, i_groups = 0, i_last = 0, i_nav = 0, i_tracker = 0, i_interval = 0;
    uint64_t seed = 0, counter = 0;
    int g, ng = 0, rc = -1, has_scaler = 0;
    if (!(c = gdl__ckpt_open(op, path, m, opt, 1, &f))) return -1;
    /* read and check everything before changing anything */
    if (gdl__meta_get(op, path, &f, "epoch", &ep) < 0 || gdl__meta_get_u64(op, path, &f, "rng.seed", &seed) < 0 ||
        gdl__meta_get_u64(op, path, &f, "rng.counter", &counter) < 0 ||
        gdl__meta_int(op, path, "epoch", ep, -GDL__META_INT_MAX, GDL__META_INT_MAX, &i_ep) < 0)
        goto done;
    if (opt) {
        ng = gdl_optim_num_groups(opt);
        if (gdl__meta_get(op, path, &f, "optim.step", &step) < 0 || gdl__meta_get(op, path, &f, "optim.groups", &groups) < 0 ||
            gdl__meta_int(op, path, "optim.step", step, 0, GDL__META_INT_MAX, &i_step) < 0 ||
            gdl__meta_int(op, path, "optim.groups", groups, 0, 32, &i_groups) < 0)
            goto done;
        if (i_groups != ng || ng > 32) {
            gdl__set_error("%s: %s: the file has %d parameter groups, the optimizer %d", op, path, (int)i_groups, ng);
            goto done;
        }
        for (g = 0; g < ng; g++) {
            char k[48];
            snprintf(k, sizeof k, "optim.lr.%d", g);
            if (gdl__meta_get(op, path, &f, k, &lr[g]) < 0) goto done;
            snprintf(k, sizeof k, "optim.momentum.%d", g);
            if (gdl__meta_get(op, path, &f, k, &mom[g]) < 0) goto done;
        }
    }
    if (sched && (gdl__meta_get(op, path, &f, "sched.last_epoch", &last) < 0 ||
                  gdl__meta_int(op, path, "sched.last_epoch", last, 0, GDL__META_INT_MAX, &i_last) < 0))
        goto done;
    if (opt && opt->ema && gdl__meta_get(op, path, &f, "ema.n_averaged", &nav) < 0) goto done;
    if (opt && opt->ema && !(nav >= 0 && nav <= step)) {
        gdl__set_error("%s: %s: ema.n_averaged %g is not a count within the optimizer's %g steps", op, path, nav, step);
        goto done;
    }
    if (opt && opt->ema && gdl__meta_int(op, path, "ema.n_averaged", nav, 0, GDL__META_INT_MAX, &i_nav) < 0) goto done;
    if (opt && opt->scaler) { /* older checkpoints and runs without a scaler have none: the scaler is left as is */
        for (g = 0; g < f.n_meta && strcmp(f.meta_keys[g], "scaler.scale") != 0; g++) {
        }
        has_scaler = g < f.n_meta;
        if (has_scaler && (gdl__meta_get(op, path, &f, "scaler.scale", &sc_scale) < 0 ||
                           gdl__meta_get(op, path, &f, "scaler.growth_tracker", &sc_tracker) < 0 ||
                           gdl__meta_get(op, path, &f, "scaler.growth_factor", &sc_opt[0]) < 0 ||
                           gdl__meta_get(op, path, &f, "scaler.backoff_factor", &sc_opt[1]) < 0 ||
                           gdl__meta_get(op, path, &f, "scaler.growth_interval", &sc_opt[2]) < 0))
            goto done;
        if (has_scaler && (!(sc_scale > 0 && sc_scale <= FLT_MAX) || !(sc_tracker >= 0 && sc_tracker <= INT32_MAX) ||
                           sc_tracker != floor(sc_tracker) || !(sc_opt[0] > 1) || sc_opt[0] - sc_opt[0] != 0 ||
                           !(sc_opt[1] > 0 && sc_opt[1] < 1) || !(sc_opt[2] >= 1 && sc_opt[2] <= INT32_MAX) ||
                           sc_opt[2] != floor(sc_opt[2]))) {
            gdl__set_error("%s: %s: the scaler's state is out of range (scale %g, growth_tracker %g, growth_factor %g, "
                           "backoff_factor %g, growth_interval %g)", op, path, sc_scale, sc_tracker, sc_opt[0],
                           sc_opt[1], sc_opt[2]);
            goto done;
        }
        if (has_scaler) i_tracker = (int64_t)sc_tracker, i_interval = (int64_t)sc_opt[2]; /* in range: above */
    }
    if (opt) {
        for (g = 0; g < ng; g++)
            if (!(lr[g] >= 0 && lr[g] < INFINITY) || !(mom[g] >= 0 && mom[g] < 1)) {
                gdl__set_error("%s: %s: group %d has lr %g or momentum %g out of range", op, path, g, lr[g], mom[g]);
                goto done;
            }
    }
    if (!(bufs = gdl__alloc_bufs(op, c->n)) || gdl__ckpt_check(op, path, c, &f, bufs) < 0) goto done;
    if (ddp) {
        *agreed = 1;
        if (gdl__dist_agree("gdl_fit", "loading the checkpoint to resume from", 1) < 0) goto done;
    }
    /* apply: the scheduler first, since it may refuse the position (OneCycle past its total
       steps); it changes only the learning rates, which are set again below */
    if (sched) {
        int64_t before = gdl_scheduler_get_last_epoch(sched);
        if (gdl_scheduler_set_last_epoch(sched, i_last) < 0) {
            char why[sizeof gdl__err];
            memcpy(why, gdl__err, sizeof why);
            gdl_scheduler_set_last_epoch(sched, before);
            gdl__set_error("%s: %s: %s", op, path, why);
            goto done;
        }
    }
    if (gdl__ckpt_apply(op, c, bufs) < 0) goto done;
    if (opt && opt->master != GDL_F32 && gdl__opt_round_params(op, opt) < 0) goto done; /* from the masters loaded */
    if (opt) {
        gdl_optim_set_step(opt, i_step);
        if (opt->ema) opt->ema->step0 = i_step - i_nav;
        for (g = 0; g < ng; g++) { /* in range: checked above */
            gdl_optim_set_lr(opt, g, lr[g]);
            gdl_optim_set_momentum(opt, g, mom[g]);
        }
        if (has_scaler) { /* as GradScaler.load_state_dict: the factors and interval too */
            if (gdl_grad_scaler_set_state(opt->scaler, sc_scale, i_tracker) < 0) goto done;
            opt->scaler->o.growth_factor = sc_opt[0];
            opt->scaler->o.backoff_factor = sc_opt[1];
            opt->scaler->o.growth_interval = (int)i_interval;
        }
    }
    gdl_rng_set_state(seed, counter);
    if (epoch) *epoch = i_ep;
    rc = 0;
done:
    gdl__free_bufs(bufs, c->n);
    gdl__ckpt_free(c);
    gdl_st_free(&f);
    return rc;
}

static int gdl__checkpoint_load(const char *op, const char *path, gdl_module *m, gdl_optimizer *opt,
                                gdl_scheduler *sched, int64_t *epoch, int ddp) {
    int agreed = 0, rc = gdl__checkpoint_load_(op, path, m, opt, sched, epoch, ddp, &agreed);
    if (ddp && !agreed) gdl__dist_agree("gdl_fit", "loading the checkpoint to resume from", 0);
    return rc;
}

GPUDL_API int gdl_checkpoint_load(gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched, int64_t *epoch,
                                  const char *path) {
    return gdl__checkpoint_load("gdl_checkpoint_load", path, m, opt, sched, epoch, 0);
}
/* the spelling before gdl_checkpoint_load (path first); deprecated, kept for one release */
GPUDL_API int gdl_load_checkpoint(const char *path, gdl_module *m, gdl_optimizer *opt, gdl_scheduler *sched,
                                  int64_t *epoch) {
    return gdl__checkpoint_load("gdl_load_checkpoint", path, m, opt, sched, epoch, 0);
}

