/* ---------------------------------------------------------------------------
   src/runtime/tensor.h — storage, tensors, the generator, half precision,
   copies.
   ------------------------------------------------------------------------- */

/* GDL__T_UNSET, on a gradient: its contents are undefined and stand for zeros (src/ops/autograd.h) */
enum { GDL__T_PERSISTENT = 1, GDL__T_OWNS_DATA = 2, GDL__T_UNSET = 4 };

static int gdl__is_persistent(const gdl_tensor *t) { return (t->flags & GDL__T_PERSISTENT) != 0; }

/* Who owns a persistent tensor the library hands out but the caller must not free (gdl_tensor.owner). gdl_free
   refuses such a tensor with an error saying who releases it; the owner's own code frees it with gdl__free. */
enum {
    GDL__OWN_CALLER, /* the caller's: gdl_free */
    GDL__OWN_MODULE, /* a parameter or buffer of a module */
    GDL__OWN_GRAD,   /* a persistent tensor's .grad */
    GDL__OWN_LOADER, /* a DataLoader's batch */
    GDL__OWN_OPTIM,  /* an optimizer's state or master weight */
    GDL__OWN_EMA,    /* a weight EMA's average */
    GDL__OWN_ONNX,   /* an imported ONNX model's initializer */
    GDL__OWN_COUNT
};
/* what an owned tensor is and what releases it, by owner (the error of gdl_free) */
static const char *const gdl__owner_text[GDL__OWN_COUNT] = {
    "the caller's",
    "a parameter or buffer of a module; gdl_module_free (of the root module) releases it",
    "the gradient (.grad) of another tensor; released with that tensor, or by gdl_zero_grad_ex(opt, 1)",
    "a batch of a DataLoader; the next gdl_loader_next or gdl_loader_free releases it",
    "the state or a master weight of an optimizer; gdl_optim_free releases it",
    "an average of a weight EMA; gdl_ema_free releases it",
    "an initializer of an ONNX model; gdl_onnx_free releases it",
};

/* One allocation of a device holding parameters, gradients and optimizer
   state as views (llm.c's malloc_and_point_parameters; made by an optimizer,
   src/nn/). Reference counted: every tensor viewing it holds a reference
   and so does the optimizer, so tensors and optimizer may be freed in any
   order. data: the allocation; base: its first 64-byte boundary, where the
   slots start (whatever the backend's alignment). grad_shift: bytes from a
   parameter's data to its gradient's slot (the gradients mirror the
   parameters); params_bytes: the parameters' region, at base. */
typedef struct gdl__flat {
    int refs;
    gdl_device device;
    void *data;
    char *base;
    size_t bytes, params_bytes, grad_shift;
} gdl__flat;

static void gdl__flat_unref(gdl__flat *f) {
    if (!f || --f->refs > 0) return;
    {
        const gdl_backend *be = gdl__be("gdl_free", f->device);
        if (be) be->rt.free(f->data);
    }
    GPUDL_FREE(f);
}
/* persistent tensors whose storage is their own: an allocation or a slot of a flat block */
static int gdl__own_storage(const gdl_tensor *t) {
    return gdl__is_persistent(t) && ((t->flags & GDL__T_OWNS_DATA) || t->flat);
}

/* A temporary made before the last gdl_arena_reset: its memory holds this step's data now. -1 + error. */
static int gdl__stale(const char *op, const char *arg, const gdl_tensor *t) {
    if (gdl__is_persistent(t) || t->gen == gdl__arena_gen) return 0;
    gdl__set_error("%s: %s is a temporary from before the last gdl_arena_reset(), whose memory now holds newer "
                   "data: read what you need before the reset (gdl_item), or keep the tensor with gdl_clone()",
                   op, arg);
    return -1;
}

/* Validates and computes numel; 0 on success. */
static int gdl__check_shape(const char *op, int ndim, const int64_t *shape, int64_t *numel) {
    int64_t n = 1;
    int i;
    if (ndim < 0 || ndim > GDL_MAX_DIMS) {
        gdl__set_error("%s: ndim %d out of range [0,%d]", op, ndim, GDL_MAX_DIMS);
        return -1;
    }
    if (ndim > 0 && !shape) {
        gdl__set_error("%s: shape is NULL", op);
        return -1;
    }
    for (i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            gdl__set_error("%s: negative dimension in shape %s", op, gdl__shape_fmt(ndim, shape));
            return -1;
        }
        if (shape[i] > 0 && n > ((int64_t)1 << 46) / shape[i]) {
            gdl__set_error("%s: shape %s is too large", op, gdl__shape_fmt(ndim, shape));
            return -1;
        }
        n *= shape[i];
    }
    *numel = n;
    return 0;
}

/* A tensor header (and its data unless `data` is given). persistent: heap,
   else the per-step arenas. */
static gdl_tensor *gdl__make(const char *op, int ndim, const int64_t *shape, gdl_dtype dt,
                             gdl_device dev, int persistent, void *data) {
    int64_t numel;
    gdl_tensor *t;
    const gdl_backend *be;
    size_t bytes;
    if ((unsigned)dt >= GDL_DTYPE_COUNT) {
        gdl__set_error("%s: invalid dtype %d", op, (int)dt);
        return NULL;
    }
    if (gdl__check_shape(op, ndim, shape, &numel) < 0) return NULL;
    if (!(be = gdl__be(op, dev))) return NULL;
    bytes = (size_t)numel * gdl_dtype_size(dt);
    if (persistent) {
        t = (gdl_tensor *)GPUDL_MALLOC(sizeof(gdl_tensor));
        if (!t) {
            gdl__set_error("%s: out of memory for a tensor header", op);
            return NULL;
        }
    } else {
        t = (gdl_tensor *)gdl__arena_alloc(&gdl__hdr_arena[gdl__arena_gen & 1], sizeof(gdl_tensor));
        if (!t) {
            gdl__set_error("%s: out of memory in the step arena", op);
            return NULL;
        }
    }
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->device = dev;
    t->ndim = ndim;
    if (ndim) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    t->numel = numel;
    t->flags = persistent ? GDL__T_PERSISTENT : 0;
    t->gen = persistent ? 0 : gdl__arena_gen;
    if (data) {
        t->data = data;
    } else if (persistent) {
        t->data = be->rt.alloc(bytes ? bytes : 1);
        if (!t->data) {
            if (dev.type == GDL_DEVICE_CPU)
                gdl__set_error("%s: out of memory allocating %.0f bytes for %s %s on %s", op,
                               (double)bytes, gdl_dtype_name(dt), gdl__shape_fmt(ndim, shape),
                               gdl_device_str(dev));
            GPUDL_FREE(t);
            return NULL;
        }
        t->flags |= GDL__T_OWNS_DATA;
    } else {
        t->data = gdl__scratch(op, dev, bytes);
        if (!t->data) return NULL;
    }
    return t;
}

static gdl_tensor *gdl__tmp(const char *op, int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev) {
    return gdl__make(op, ndim, shape, dt, dev, 0, NULL);
}

/* Frees a persistent tensor whoever owns it: the owners' own release (module, loader, optimizer ... free). */
static void gdl__free(gdl_tensor *t) {
    if (!t || !gdl__is_persistent(t)) return;
    if (t->grad) gdl__free(t->grad);
    if (t->flags & GDL__T_OWNS_DATA) {
        const gdl_backend *be = gdl__be("gdl_free", t->device);
        if (be) be->rt.free(t->data);
    }
    gdl__flat_unref(t->flat);
    GPUDL_FREE(t);
}

GPUDL_API void gdl_free(gdl_tensor *t) {
    if (t && gdl__is_persistent(t) && t->owner != GDL__OWN_CALLER) {
        /* freeing it would leave its owner a dangling pointer: refuse here, not crash later far away */
        gdl__set_error("gdl_free: %s %s%s%s%s is not yours to free: it is %s (the tensor is left as it was)",
                       gdl_dtype_name(t->dtype), gdl_shape_str(t), t->name ? " \"" : "", t->name ? t->name : "",
                       t->name ? "\"" : "", t->owner < GDL__OWN_COUNT ? gdl__owner_text[t->owner] : "the library's");
        return;
    }
    gdl__free(t);
}

GPUDL_API gdl_tensor *gdl_empty(int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev) {
    return gdl__make("gdl_empty", ndim, shape, dt, dev, 1, NULL);
}

/* Converts one double to dtype dt at dst (host memory). */
static void gdl__store(void *dst, gdl_dtype dt, double v) {
    switch (dt) {
    case GDL_F32: *(gdl_real *)dst = (gdl_real)v; break;
    /* integers: truncate toward zero and saturate (an out-of-range cast is undefined in C); NaN gives 0 */
    case GDL_I32: *(int32_t *)dst = v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v; break;
    case GDL_U8: *(uint8_t *)dst = v != v ? 0 : v >= 255.0 ? 255 : v <= 0.0 ? 0 : (uint8_t)v; break;
    case GDL_F16: *(uint16_t *)dst = gdl_f32_to_f16((float)v); break;
    case GDL_BF16: *(uint16_t *)dst = gdl_f32_to_bf16((float)v); break;
    default: break;
    }
}
static double gdl__load(const void *src, gdl_dtype dt) {
    switch (dt) {
    case GDL_F32: return (double)*(const gdl_real *)src;
    case GDL_I32: return (double)*(const int32_t *)src;
    case GDL_U8: return (double)*(const uint8_t *)src;
    case GDL_F16: return (double)gdl_f16_to_f32(*(const uint16_t *)src);
    case GDL_BF16: return (double)gdl_bf16_to_f32(*(const uint16_t *)src);
    default: return 0;
    }
}

GPUDL_API int gdl_fill_(gdl_tensor *t, double value) {
    const gdl_backend *be;
    if (!t) {
        gdl__null_arg("gdl_fill_", "t");
        return -1;
    }
    if (!(be = gdl__be("gdl_fill_", t->device))) return -1;
    if (t->dtype == GDL_F32) return be->k.fill((gdl_real *)t->data, t->numel, (gdl_real)value);
    {
        /* other dtypes: fill one f32 scratch value then cast elementwise on host */
        size_t es = gdl_dtype_size(t->dtype);
        unsigned char one[8];
        int64_t i;
        gdl__store(one, t->dtype, value);
        if (t->device.type == GDL_DEVICE_CPU) {
            for (i = 0; i < t->numel; i++) memcpy((char *)t->data + (size_t)i * es, one, es);
            return 0;
        } else {
            unsigned char *h = (unsigned char *)GPUDL_MALLOC((size_t)t->numel * es + 1);
            int rc;
            if (!h) {
                gdl__set_error("gdl_fill_: out of memory (host)");
                return -1;
            }
            for (i = 0; i < t->numel; i++) memcpy(h + (size_t)i * es, one, es);
            rc = be->rt.copy(t->data, h, (size_t)t->numel * es, 0);
            GPUDL_FREE(h);
            return rc;
        }
    }
}

GPUDL_API gdl_tensor *gdl_full(int ndim, const int64_t *shape, double value, gdl_dtype dt, gdl_device dev) {
    gdl_tensor *t = gdl__make("gdl_full", ndim, shape, dt, dev, 1, NULL);
    if (t && gdl_fill_(t, value) < 0) {
        gdl_free(t);
        return NULL;
    }
    return t;
}
GPUDL_API gdl_tensor *gdl_zeros(int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev) {
    return gdl_full(ndim, shape, 0.0, dt, dev);
}
GPUDL_API gdl_tensor *gdl_ones(int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev) {
    return gdl_full(ndim, shape, 1.0, dt, dev);
}

GPUDL_API gdl_tensor *gdl_from_array(const void *data, int ndim, const int64_t *shape, gdl_dtype dt,
                                     gdl_device dev) {
    gdl_tensor *t;
    if (!data) {
        gdl__null_arg("gdl_from_array", "data");
        return NULL;
    }
    t = gdl__make("gdl_from_array", ndim, shape, dt, dev, 1, NULL);
    if (!t) return NULL;
    if (gdl__be("gdl_from_array", dev)->rt.copy(t->data, data, (size_t)t->numel * gdl_dtype_size(dt), 0) < 0) {
        gdl_free(t);
        return NULL;
    }
    return t;
}

/* Persistent tensor filled on the host by fn(i) then copied to dev. */
static gdl_tensor *gdl__host_fill(const char *op, int ndim, const int64_t *shape, gdl_dtype dt,
                                  gdl_device dev, double (*fn)(int64_t, const double *), const double *arg) {
    int64_t numel, i;
    size_t es = gdl_dtype_size(dt);
    unsigned char *h;
    gdl_tensor *t;
    if (gdl__check_shape(op, ndim, shape, &numel) < 0) return NULL;
    if ((unsigned)dt >= GDL_DTYPE_COUNT) {
        gdl__set_error("%s: invalid dtype %d", op, (int)dt);
        return NULL;
    }
    h = (unsigned char *)GPUDL_MALLOC((size_t)numel * es + 1);
    if (!h) {
        gdl__set_error("%s: out of memory (host)", op);
        return NULL;
    }
    for (i = 0; i < numel; i++) gdl__store(h + (size_t)i * es, dt, fn(i, arg));
    t = gdl_from_array(h, ndim, shape, dt, dev);
    GPUDL_FREE(h);
    if (!t) gdl__error_context("%s", op);
    return t;
}

/* ---- the generator: counter-based (splitmix64 of seed and a counter) ----
   Each thread has its own generator (seed, counter), so a model trained on a
   thread draws the same numbers as it would alone. gdl_manual_seed(s) sets the
   calling thread's generator to (s, 0) and makes s the process seed; a thread
   whose generator was never set starts from (process seed, 0) at its first
   use. The process seed is 0x5eed until gdl_manual_seed is called. */
static uint64_t gdl__rng_process_seed = 0x5eed; /* atomic where there are atomics */
static GDL__TLS uint64_t gdl__rng_seed;
static GDL__TLS uint64_t gdl__rng_counter;
static GDL__TLS int gdl__rng_set; /* this thread's generator was set or used */

static void gdl__rng_init(void) {
    if (gdl__rng_set) return;
#ifdef GDL__ATOMICS
    gdl__rng_seed = gdl__atomic_load(&gdl__rng_process_seed, GDL__MO_RELAXED);
#else
    gdl__rng_seed = gdl__rng_process_seed;
#endif
    gdl__rng_counter = 0;
    gdl__rng_set = 1;
}
GPUDL_API void gdl_manual_seed(uint64_t seed) {
#ifdef GDL__ATOMICS
    gdl__atomic_store(&gdl__rng_process_seed, seed, GDL__MO_RELAXED);
#else
    gdl__rng_process_seed = seed;
#endif
    gdl__rng_seed = seed;
    gdl__rng_counter = 0;
    gdl__rng_set = 1;
}
GPUDL_API uint64_t gdl_rng_get_state(uint64_t *counter) {
    gdl__rng_init();
    if (counter) *counter = gdl__rng_counter;
    return gdl__rng_seed;
}
GPUDL_API void gdl_rng_set_state(uint64_t seed, uint64_t counter) {
    gdl__rng_seed = seed;
    gdl__rng_counter = counter;
    gdl__rng_set = 1;
}
GPUDL_API uint64_t gdl_rng_next_u64(void) {
    gdl__rng_init();
    return gdl_hash64(gdl__rng_seed, gdl__rng_counter++);
}
GPUDL_API double gdl_rng_uniform(void) { return (double)(gdl_rng_next_u64() >> 11) * (1.0 / 9007199254740992.0); }
static double gdl__rng_normal(void) {
    /* Box-Muller; 1-u keeps the log finite */
    double u1 = 1.0 - gdl_rng_uniform(), u2 = gdl_rng_uniform();
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static double gdl__fill_arange(int64_t i, const double *a) { (void)a; return (double)i; }
static double gdl__fill_uniform(int64_t i, const double *a) { (void)i; return a[0] + (a[1] - a[0]) * gdl_rng_uniform(); }
static double gdl__fill_normal(int64_t i, const double *a) { (void)i; (void)a; return gdl__rng_normal(); }

GPUDL_API gdl_tensor *gdl_arange(int64_t n, gdl_dtype dt, gdl_device dev) {
    return gdl__host_fill("gdl_arange", 1, &n, dt, dev, gdl__fill_arange, NULL);
}
GPUDL_API gdl_tensor *gdl_uniform(int ndim, const int64_t *shape, double lo, double hi, gdl_device dev) {
    double a[2];
    a[0] = lo;
    a[1] = hi;
    return gdl__host_fill("gdl_uniform", ndim, shape, GDL_F32, dev, gdl__fill_uniform, a);
}
GPUDL_API gdl_tensor *gdl_rand(int ndim, const int64_t *shape, gdl_device dev) {
    return gdl_uniform(ndim, shape, 0.0, 1.0, dev);
}
GPUDL_API gdl_tensor *gdl_randn(int ndim, const int64_t *shape, gdl_device dev) {
    return gdl__host_fill("gdl_randn", ndim, shape, GDL_F32, dev, gdl__fill_normal, NULL);
}

/* ---- half precision, round to nearest even ---- */
static uint32_t gdl__f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float gdl__bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

GPUDL_API uint16_t gdl_f32_to_f16(float f) {
    uint32_t x = gdl__f32_bits(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu, h, rem;
    if (a >= 0x7f800000u) return (uint16_t)(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (a < 0x38800000u) {                                  /* below 2^-14: subnormal or 0 */
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift, half;
        if (a < 0x33000000u) return (uint16_t)sign;         /* below 2^-25 */
        shift = 126 - e;
        h = m >> shift;
        rem = m & ((1u << shift) - 1);
        half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    h = (a - 0x38000000u) >> 13;
    rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* a carry may reach inf: correct */
    return (uint16_t)(sign | h);
}
GPUDL_API float gdl_f16_to_f32(uint16_t hv) {
    uint32_t sign = (uint32_t)(hv & 0x8000u) << 16, e = (hv >> 10) & 0x1fu, m = hv & 0x3ffu, bits;
    if (e == 0) {
        if (m == 0) {
            bits = sign;
        } else {
            int ee = 1;
            while (!(m & 0x400u)) {
                m <<= 1;
                ee--;
            }
            m &= 0x3ffu;
            bits = sign | ((uint32_t)(ee + 112) << 23) | (m << 13);
        }
    } else if (e == 31) {
        bits = sign | 0x7f800000u | (m << 13);
    } else {
        bits = sign | ((e + 112) << 23) | (m << 13);
    }
    return gdl__bits_f32(bits);
}
GPUDL_API uint16_t gdl_f32_to_bf16(float f) {
    uint32_t x = gdl__f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
GPUDL_API float gdl_bf16_to_f32(uint16_t h) { return gdl__bits_f32((uint32_t)h << 16); }

/* ---- copies ---- */
static int gdl__copy_kind(gdl_device dst, gdl_device src) {
    if (src.type == GDL_DEVICE_CPU) return dst.type == GDL_DEVICE_CPU ? 2 : 0;
    return dst.type == GDL_DEVICE_CPU ? 1 : 2;
}

/* Raw byte copy between any two devices. */
static int gdl__copy_bytes(const char *op, void *dst, gdl_device ddev, const void *src, gdl_device sdev, size_t bytes) {
    const gdl_backend *be;
    int kind = gdl__copy_kind(ddev, sdev);
    if (ddev.type == GDL_DEVICE_CUDA && sdev.type == GDL_DEVICE_CUDA && ddev.index != sdev.index) {
        /* through the host: simple, and rare */
        void *h = GPUDL_MALLOC(bytes + 1);
        int rc;
        if (!h) {
            gdl__set_error("%s: out of memory (host)", op);
            return -1;
        }
        rc = gdl__be(op, sdev) && gdl__be(op, sdev)->rt.copy(h, src, bytes, 1) == 0 && gdl__be(op, ddev) &&
                     gdl__be(op, ddev)->rt.copy(dst, h, bytes, 0) == 0
                 ? 0
                 : -1;
        GPUDL_FREE(h);
        return rc;
    }
    be = gdl__be(op, ddev.type == GDL_DEVICE_CUDA ? ddev : sdev);
    if (!be) return -1;
    return be->rt.copy(dst, src, bytes, kind);
}

GPUDL_API int gdl_copy_(gdl_tensor *dst, const gdl_tensor *src) {
    if (!dst || !src) {
        gdl__null_arg("gdl_copy_", dst ? "src" : "dst");
        return -1;
    }
    if (gdl__stale("gdl_copy_", "dst", dst) < 0 || gdl__stale("gdl_copy_", "src", src) < 0) return -1;
    if (dst->dtype != src->dtype || dst->numel != src->numel) {
        gdl__set_error("gdl_copy_: %s %s into %s %s: shapes or dtypes differ", gdl_dtype_name(src->dtype),
                       gdl_shape_str(src), gdl_dtype_name(dst->dtype), gdl_shape_str(dst));
        return -1;
    }
    {
        int span = gdl__prof_on ? gdl__prof_push("gdl_copy_", dst->device.type != GDL_DEVICE_CPU ? dst->device
                                                                                                 : src->device)
                                : 0;
        int rc = gdl__copy_bytes("gdl_copy_", dst->data, dst->device, src->data, src->device,
                                 (size_t)src->numel * gdl_dtype_size(src->dtype));
        gdl__prof_pop(span, rc == 0);
        return rc;
    }
}

GPUDL_API gdl_tensor *gdl_clone(const gdl_tensor *t) {
    gdl_tensor *r;
    if (!t) {
        gdl__null_arg("gdl_clone", "t");
        return NULL;
    }
    if (gdl__stale("gdl_clone", "t", t) < 0) return NULL;
    r = gdl__make("gdl_clone", t->ndim, t->shape, t->dtype, t->device, 1, NULL);
    if (r && gdl_copy_(r, t) < 0) {
        gdl_free(r);
        return NULL;
    }
    return r;
}

GPUDL_API int gdl_move_(gdl_tensor *t, gdl_device dev) {
    gdl_tensor *copy;
    if (!t) {
        gdl__null_arg("gdl_move_", "t");
        return -1;
    }
    if (!gdl__own_storage(t)) {
        gdl__set_error("gdl_move_: %s is a temporary or a view; only persistent tensors move in place", gdl_shape_str(t));
        return -1;
    }
    if (gdl_device_equal(t->device, dev)) return 0;
    if (t->grad && gdl_move_(t->grad, dev) < 0) return -1;
    if (!(copy = gdl__make("gdl_move_", t->ndim, t->shape, t->dtype, dev, 1, NULL))) return -1;
    if (gdl_copy_(copy, t) < 0) {
        gdl_free(copy);
        return -1;
    }
    { /* swap the storage: t takes the new data, copy takes the old (an allocation or a flat slot) and is freed */
        void *old = t->data;
        gdl_device od = t->device;
        gdl__flat *of = t->flat;
        unsigned oflags = t->flags;
        t->data = copy->data;
        t->device = dev;
        t->flat = NULL;
        t->flags |= GDL__T_OWNS_DATA;
        copy->data = old;
        copy->device = od;
        copy->flat = of;
        copy->flags = oflags;
        gdl_free(copy);
    }
    return 0;
}

/* A host read of a GPU tensor cannot be part of a CUDA graph (it would wait
   for work that is only being recorded): say so before CUDA does. */
static int gdl__no_capture(const char *op, gdl_device d) {
    if (!gdl__capturing || d.type == GDL_DEVICE_CPU) return 0;
    gdl__set_error("%s: reads %s inside a CUDA graph capture (read the step's results after gdl_graph_replay)", op,
                   gdl_device_str(d));
    return -1;
}

GPUDL_API int gdl_copy_to_host(const gdl_tensor *t, void *dst, size_t bytes) {
    size_t need;
    if (!t || !dst) {
        gdl__null_arg("gdl_copy_to_host", t ? "dst" : "t");
        return -1;
    }
    if (gdl__stale("gdl_copy_to_host", "t", t) < 0 || gdl__no_capture("gdl_copy_to_host", t->device) < 0) return -1;
    need = (size_t)t->numel * gdl_dtype_size(t->dtype);
    if (bytes < need) {
        gdl__set_error("gdl_copy_to_host: buffer of %.0f bytes is too small for %s %s (%.0f bytes)",
                       (double)bytes, gdl_dtype_name(t->dtype), gdl_shape_str(t), (double)need);
        return -1;
    }
    return gdl__copy_bytes("gdl_copy_to_host", dst, gdl_cpu(), t->data, t->device, need);
}

/* gdl_item / gdl_item_ex: the one element in *out, 0; -1 + error (errors named op) */
static int gdl__item(const char *op, const gdl_tensor *t, double *out) {
    unsigned char buf[8];
    if (!t) {
        gdl__null_arg(op, "t");
        return -1;
    }
    if (gdl__stale(op, "t", t) < 0 || gdl__no_capture(op, t->device) < 0) return -1;
    if (t->numel != 1) {
        gdl__set_error("%s: tensor %s has %lld elements, expected 1", op, gdl_shape_str(t), (long long)t->numel);
        return -1;
    }
    if (gdl_copy_to_host(t, buf, sizeof buf) < 0) return -1;
    *out = gdl__load(buf, t->dtype);
    return 0;
}
GPUDL_API double gdl_item(const gdl_tensor *t) {
    double v;
    return gdl__item("gdl_item", t, &v) < 0 ? NAN : v;
}
GPUDL_API int gdl_item_ex(const gdl_tensor *t, double *out) {
    if (!out) {
        gdl__null_arg("gdl_item_ex", "out");
        return -1;
    }
    return gdl__item("gdl_item_ex", t, out);
}

GPUDL_API int gdl_same_shape(const gdl_tensor *a, const gdl_tensor *b) {
    return a && b && a->ndim == b->ndim &&
           (a->ndim == 0 || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0);
}

/* prints one dim; long dims show 3 items each end */
static void gdl__print_rec(FILE *f, const unsigned char *h, const gdl_tensor *t, int d, int64_t off, int64_t stride) {
    int64_t n = t->shape[d], i, inner = stride / (n ? n : 1);
    int summarize = t->numel > 1000 && n > 6;
    fputc('[', f);
    for (i = 0; i < n; i++) {
        if (summarize && i == 3) {
            fputs(d == t->ndim - 1 ? " ...," : "\n ...,", f);
            i = n - 3;
        }
        if (d == t->ndim - 1) {
            double v = gdl__load(h + (size_t)(off + i) * gdl_dtype_size(t->dtype), t->dtype);
            if (t->dtype == GDL_I32 || t->dtype == GDL_U8) fprintf(f, "%s%.0f", i ? ", " : "", v);
            else fprintf(f, "%s%.4f", i ? ", " : "", v);
        } else {
            if (i) fprintf(f, ",\n%*s", d + 8, "");
            gdl__print_rec(f, h, t, d + 1, off + i * inner, inner);
        }
    }
    fputc(']', f);
}

GPUDL_API int gdl_print(const gdl_tensor *t, FILE *f) {
    unsigned char *h;
    size_t bytes;
    if (!t || !f) {
        gdl__null_arg("gdl_print", t ? "f" : "t");
        return -1;
    }
    if (gdl__stale("gdl_print", "t", t) < 0) return -1;
    bytes = (size_t)t->numel * gdl_dtype_size(t->dtype);
    h = (unsigned char *)GPUDL_MALLOC(bytes + 1);
    if (!h) {
        gdl__set_error("gdl_print: out of memory (host)");
        return -1;
    }
    if (gdl_copy_to_host(t, h, bytes) < 0) {
        GPUDL_FREE(h);
        return -1;
    }
    fputs("tensor(", f);
    if (t->ndim == 0) fprintf(f, "%.4f", gdl__load(h, t->dtype));
    else if (t->numel == 0) fputs("[]", f);
    else gdl__print_rec(f, h, t, 0, 0, t->numel);
    fprintf(f, ", shape=%s, dtype=%s, device=%s%s)\n", gdl_shape_str(t), gdl_dtype_name(t->dtype),
            gdl_device_str(t->device), t->requires_grad ? ", requires_grad" : "");
    GPUDL_FREE(h);
    return 0;
}

