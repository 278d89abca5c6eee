/* ---------------------------------------------------------------------------
   src/data/loader.h datasets, transforms, the DataLoader and its worker threads.

   Loader design. A batch b of an epoch goes to slot b % nslots of a ring of
   host buffers. Slot states: FREE -> FILLING (a worker claimed it) -> READY
   -> HELD (handed out by gdl_loader_next) -> FREE (at the next call). The
   workers claim batches in order, fill them outside the lock, and may run up
   to nslots-1 batches ahead of the consumer. One mutex guards the states and
   the claim counter; cv_work wakes workers (a slot was freed, an epoch
   started, shutdown), cv_ready wakes the consumer (a batch is READY). The
   permutation and the epoch's transform key are written only while no batch
   can be claimed or filled, and published by the mutex. A batch's contents
   depend only on (seed, epoch, batch index), never on the worker.
   GPUDL_NO_THREADS: no threads; batches are always assembled inline.
   ------------------------------------------------------------------------- */

/* Prefixes the current error message with "fn: ". */
static void gdl__data_wrap_error(const char *fn) {
    char prev[1024];
    size_t k = strlen(gdl_last_error());
    if (k >= sizeof prev) k = sizeof prev - 1;
    memcpy(prev, gdl_last_error(), k);
    prev[k] = 0;
    gdl__set_error("%s: %s", fn, prev);
}

/* ---- datasets ------------------------------------------------------------ */

/* Validates the geometry and allocates the struct and the labels (and x when
   alloc_x). NULL + error. */
static gdl_dataset *gdl__ds_alloc(const char *fn, gdl_dtype dt, int ndim, const int64_t *shape, int64_t n,
                                  int num_classes, int alloc_x) {
    gdl_dataset *ds;
    int64_t numel = 1;
    int i;
    if (dt != GDL_U8 && dt != GDL_F32 && dt != GDL_I32) {
        gdl__set_error("%s: sample dtype must be u8, f32 or i32 (token ids), got %s", fn, gdl_dtype_name(dt));
        return NULL;
    }
    if (ndim < 1 || ndim > GDL_MAX_DIMS - 1) {
        gdl__set_error("%s: sample ndim %d out of range [1,%d]", fn, ndim, GDL_MAX_DIMS - 1);
        return NULL;
    }
    if (!shape) {
        gdl__set_error("%s: sample_shape is NULL", fn);
        return NULL;
    }
    for (i = 0; i < ndim; i++) {
        if (shape[i] < 1) {
            gdl__set_error("%s: sample shape %s has a dimension < 1", fn, gdl__shape_fmt(ndim, shape));
            return NULL;
        }
        if (numel > ((int64_t)1 << 40) / shape[i]) {
            gdl__set_error("%s: sample shape %s is too large", fn, gdl__shape_fmt(ndim, shape));
            return NULL;
        }
        numel *= shape[i];
    }
    if (n < 1) {
        gdl__set_error("%s: %lld samples: a dataset needs at least one", fn, (long long)n);
        return NULL;
    }
    if (num_classes < 1) {
        gdl__set_error("%s: num_classes %d must be >= 1", fn, num_classes);
        return NULL;
    }
    if (n > ((int64_t)1 << 46) / numel ||
        (uint64_t)(n * numel) > (uint64_t)((size_t)-1) / 2 / gdl_dtype_size(dt)) {
        gdl__set_error("%s: %lld samples of %s %s are too large for this machine", fn, (long long)n,
                       gdl_dtype_name(dt), gdl__shape_fmt(ndim, shape));
        return NULL;
    }
    ds = (gdl_dataset *)gdl__zalloc(fn, sizeof(gdl_dataset));
    if (!ds) return NULL;
    ds->n = n;
    ds->ndim = ndim;
    memcpy(ds->shape, shape, sizeof(int64_t) * (size_t)ndim);
    ds->sample_numel = numel;
    ds->dtype = dt;
    ds->num_classes = num_classes;
    ds->labels = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)n);
    if (ds->labels && alloc_x) ds->x = GPUDL_MALLOC((size_t)(n * numel) * gdl_dtype_size(dt));
    if (!ds->labels || (alloc_x && !ds->x)) {
        gdl__set_error("%s: out of memory for %lld samples of %s %s", fn, (long long)n, gdl_dtype_name(dt),
                       gdl__shape_fmt(ndim, shape));
        GPUDL_FREE(ds->labels);
        GPUDL_FREE(ds->x);
        GPUDL_FREE(ds);
        return NULL;
    }
    return ds;
}

GPUDL_API void gdl_dataset_free(gdl_dataset *ds) {
    if (!ds) return;
    GPUDL_FREE(ds->x);
    GPUDL_FREE(ds->labels);
    GPUDL_FREE(ds->lengths);
    GPUDL_FREE(ds->tokens);
    GPUDL_FREE(ds);
}

GPUDL_API gdl_dataset *gdl_dataset_from_arrays(const void *x, gdl_dtype x_dtype, int ndim,
                                               const int64_t *sample_shape, const int32_t *labels,
                                               int64_t n, int num_classes) {
    static const char fn[] = "gdl_dataset_from_arrays";
    gdl_dataset *ds;
    int64_t i;
    if (!x || !labels) {
        gdl__set_error("%s: %s is NULL", fn, !x ? "x" : "labels");
        return NULL;
    }
    if (!(ds = gdl__ds_alloc(fn, x_dtype, ndim, sample_shape, n, num_classes, 1))) return NULL;
    for (i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= num_classes) {
            gdl__set_error("%s: label %ld at index %lld is out of range [0, %d)", fn, (long)labels[i],
                           (long long)i, num_classes);
            gdl_dataset_free(ds);
            return NULL;
        }
    memcpy(ds->labels, labels, sizeof(int32_t) * (size_t)n);
    memcpy(ds->x, x, (size_t)(n * ds->sample_numel) * gdl_dtype_size(x_dtype));
    return ds;
}

/* An (images, labels) IDX pair, errors prefixed with fn. expect_hw > 0
   requires expect_hw x expect_hw images. */
static gdl_dataset *gdl__ds_from_idx(const char *fn, const char *images_path, const char *labels_path,
                                     int num_classes, int expect_hw) {
    gdl_idx im, lb;
    gdl_dataset *ds;
    char what[600];
    int64_t shape[3], i;
    const uint8_t *src;
    if (!images_path || !labels_path) {
        gdl__set_error("%s: %s is NULL", fn, !images_path ? "images_path" : "labels_path");
        return NULL;
    }
    memset(&im, 0, sizeof im);
    memset(&lb, 0, sizeof lb);
    if (gdl_idx_load(images_path, &im) < 0) {
        gdl__data_wrap_error(fn);
        return NULL;
    }
    if (gdl_idx_load(labels_path, &lb) < 0) {
        gdl__data_wrap_error(fn);
        gdl_idx_free(&im);
        return NULL;
    }
    snprintf(what, sizeof what, "%.280s with %.280s", images_path, labels_path);
    if (gdl_idx_check_pair(&im, &lb, num_classes, what) < 0) {
        gdl__data_wrap_error(fn);
        goto fail;
    }
    if (expect_hw > 0 && (im.dims[1] != expect_hw || im.dims[2] != expect_hw)) {
        gdl__set_error("%s: %s: images are %lldx%lld, expected %dx%d", fn, images_path, (long long)im.dims[1],
                       (long long)im.dims[2], expect_hw, expect_hw);
        goto fail;
    }
    shape[0] = 1;
    shape[1] = im.dims[1];
    shape[2] = im.dims[2];
    if (!(ds = gdl__ds_alloc(fn, GDL_U8, 3, shape, im.dims[0], num_classes, 0))) goto fail;
    ds->x = im.data; /* the dataset takes the pixel buffer over */
    im.data = NULL;
    src = (const uint8_t *)lb.data;
    for (i = 0; i < ds->n; i++) ds->labels[i] = (int32_t)src[i];
    gdl_idx_free(&lb);
    return ds;
fail:
    gdl_idx_free(&im);
    gdl_idx_free(&lb);
    return NULL;
}

GPUDL_API gdl_dataset *gdl_dataset_from_idx_ex(const char *images_path, const char *labels_path,
                                               int num_classes) {
    return gdl__ds_from_idx("gdl_dataset_from_idx", images_path, labels_path, num_classes, 0);
}

GPUDL_API gdl_dataset *gdl_dataset_from_idx(const char *images_path, const char *labels_path) {
    return gdl__ds_from_idx("gdl_dataset_from_idx", images_path, labels_path, 10, 0);
}

GPUDL_API gdl_dataset *gdl_dataset_from_cifar10(const char *dir, int train) {
    static const char fn[] = "gdl_dataset_from_cifar10";
    static const int64_t shape[3] = {3, 32, 32};
    uint8_t *img = NULL, *lab = NULL;
    int64_t n = 0, i;
    gdl_dataset *ds;
    if (!dir) {
        gdl__set_error("%s: dir is NULL", fn);
        return NULL;
    }
    if (gdl_cifar10_load_dir(dir, train, &img, &lab, &n) < 0) {
        gdl__data_wrap_error(fn);
        return NULL;
    }
    if (!(ds = gdl__ds_alloc(fn, GDL_U8, 3, shape, n, 10, 0))) {
        GPUDL_FREE(img);
        GPUDL_FREE(lab);
        return NULL;
    }
    ds->x = img;
    for (i = 0; i < n; i++) ds->labels[i] = (int32_t)lab[i];
    GPUDL_FREE(lab);
    return ds;
}

/* Where gdl_dataset_fashion_mnist(NULL, ...) looks, in order. */
static const char *gdl__fmnist_dirs[2] = {"data", "/usr/share/datasets/fashion-mnist"};

static int gdl__file_readable(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fclose(f);
    return 1;
}

/* dir/base, else dir/base.gz, into buf: 1 if one is readable, 0 if not, -1 if the path is too long. */
static int gdl__find_data_file(const char *dir, const char *base, char *buf, size_t cap) {
    size_t dl = strlen(dir);
    const char *sep = (dl > 0 && dir[dl - 1] == '/') ? "" : "/";
    int k = snprintf(buf, cap, "%s%s%s.gz", dir, sep, base);
    if (k < 0 || (size_t)k >= cap) return -1;
    buf[k - 3] = 0; /* first without ".gz" */
    if (gdl__file_readable(buf)) return 1;
    buf[k - 3] = '.';
    return gdl__file_readable(buf);
}

GPUDL_API gdl_dataset *gdl_dataset_fashion_mnist(const char *dir_or_NULL, int train) {
    static const char fn[] = "gdl_dataset_fashion_mnist";
    static const char get[] =
        "get them with `make data` in gpudl's repository (installs Debian's dataset-fashion-mnist, or "
        "downloads and checks the four official files into ./data), or `apt-get install "
        "dataset-fashion-mnist`, or put train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
        "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz from the official Fashion-MNIST page "
        "(https://github.com/zalandoresearch/fashion-mnist) in one of those places";
    const char *split = train ? "train" : "t10k";
    const char *env = getenv("GPUDL_DATA");
    const char *dirs[2];
    char ibase[64], lbase[64], ipath[4096], lpath[4096], where[700];
    int nd, d;
    if (dir_or_NULL) {
        dirs[0] = dir_or_NULL;
        nd = 1;
    } else if (env && env[0]) {
        dirs[0] = env; /* an explicit choice: searching elsewhere too would hide a typo */
        nd = 1;
    } else {
        dirs[0] = gdl__fmnist_dirs[0];
        dirs[1] = gdl__fmnist_dirs[1];
        nd = 2;
    }
    snprintf(ibase, sizeof ibase, "%s-images-idx3-ubyte", split);
    snprintf(lbase, sizeof lbase, "%s-labels-idx1-ubyte", split);
    for (d = 0; d < nd; d++) {
        int hi = gdl__find_data_file(dirs[d], ibase, ipath, sizeof ipath);
        int hl = gdl__find_data_file(dirs[d], lbase, lpath, sizeof lpath);
        if (hi < 0 || hl < 0) {
            gdl__set_error("%s: directory name too long: %.200s...", fn, dirs[d]);
            return NULL;
        }
        if (hi && hl) {
            gdl_dataset *ds = gdl__ds_from_idx(fn, ipath, lpath, 10, 28);
            return ds;
        }
        if (hi || hl) {
            gdl__set_error("%s: %.300s has %s but not %s[.gz]: %s", fn, dirs[d], hi ? ipath : lpath,
                           hi ? lbase : ibase, get);
            return NULL;
        }
    }
    if (dir_or_NULL)
        snprintf(where, sizeof where, "%.300s (the directory given)", dir_or_NULL);
    else if (env && env[0])
        snprintf(where, sizeof where, "%.300s (from GPUDL_DATA)", env);
    else
        snprintf(where, sizeof where, "./%.200s or %.300s (set GPUDL_DATA=DIR to look elsewhere)",
                 gdl__fmnist_dirs[0], gdl__fmnist_dirs[1]);
    gdl__set_error("%s: Fashion-MNIST %s files (%s[.gz], %s[.gz]) not found in %s: %s", fn, split, ibase,
                   lbase, where, get);
    return NULL;
}

/* A windows dataset is defined by its tokens: the subset keeps the tokens its windows cover
   (src/api/text.h, src/data/text.h). */
static gdl_dataset *gdl__ds_windows_subset(const char *fn, const gdl_dataset *ds, int64_t start, int64_t count);

GPUDL_API gdl_dataset *gdl_dataset_subset(const gdl_dataset *ds, int64_t start, int64_t count) {
    static const char fn[] = "gdl_dataset_subset";
    gdl_dataset *s;
    size_t es;
    if (!ds) {
        gdl__set_error("%s: ds is NULL", fn);
        return NULL;
    }
    if (start < 0 || count < 1 || start > ds->n || count > ds->n - start) {
        gdl__set_error("%s: samples [%lld, %lld) out of range for a dataset of %lld (count must be >= 1)", fn,
                       (long long)start, (long long)start + (long long)count, (long long)ds->n);
        return NULL;
    }
    if (ds->tokens) return gdl__ds_windows_subset(fn, ds, start, count);
    if (!(s = gdl__ds_alloc(fn, ds->dtype, ds->ndim, ds->shape, count, ds->num_classes, 1))) return NULL;
    s->target_len = ds->target_len;
    if (ds->lengths) {
        if (!(s->lengths = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)count))) {
            gdl__set_error("%s: out of memory", fn);
            gdl_dataset_free(s);
            return NULL;
        }
        memcpy(s->lengths, ds->lengths + start, sizeof(int32_t) * (size_t)count);
    }
    es = gdl_dtype_size(ds->dtype);
    memcpy(s->x, (const char *)ds->x + (size_t)(start * ds->sample_numel) * es,
           (size_t)(count * ds->sample_numel) * es);
    memcpy(s->labels, ds->labels + start, sizeof(int32_t) * (size_t)count);
    return s;
}

/* ---- the loader ---------------------------------------------------------- */

enum { GDL__SLOT_FREE = 0, GDL__SLOT_FILLING, GDL__SLOT_READY, GDL__SLOT_HELD };

typedef struct gdl__slot {
    void *x;              /* host buffer: batch_size samples of out_numel (f32, or i32 token ids) */
    int32_t *y;           /* host buffer: batch_size x y_numel targets (i32; mix: f32 soft targets) */
    int32_t *len;         /* host buffer: batch_size lengths (a dataset with lengths), else NULL */
    int32_t *lab;         /* mix: the batch's labels */
    gdl_real *spare;      /* mix: one sample */
    gdl_tensor *tx, *ty, *tl; /* CPU device: the batch tensors, owning x, y and len */
    void *copied;         /* pinned: reached when the copy out of x and y is done */
    int state;            /* GDL__SLOT_*, under the mutex */
    int64_t batch;        /* the batch it holds or is filling */
} gdl__slot;

struct gdl_loader {
    gdl_dataset *ds;
    gdl_loader_opts o;
    int64_t n;                           /* samples per epoch: the dataset's, or this rank's shard's */
    int64_t B, nb;                       /* batch size, batches per epoch */
    int out_ndim;                        /* batch dims, with the batch dim */
    int64_t out_shape[GDL_MAX_DIMS];
    int64_t out_numel;                   /* elements of one transformed sample */
    gdl_dtype out_dtype;                 /* f32, or i32 for token ids */
    int64_t y_numel;                     /* targets per sample: 1, the dataset's target_len, or (mix) num_classes */
    gdl_tensor *lengths_out;             /* the lengths of the batch handed out last */
    /* the transform plan */
    int norm;                            /* 0, or the number of mean/std channels */
    int64_t norm_plane;                  /* fast path: elements per normalisation channel */
    int64_t planes_per_channel;          /* spatial path: H x W planes per channel */
    gdl_real mean[GDL_TRANSFORM_MAX_CHANNELS], stdv[GDL_TRANSFORM_MAX_CHANNELS];
    int spatial, crop, hflip;            /* crop and/or flip: the per-plane path */
    int64_t planes, H, W, OH, OW, pad;   /* set for crop, flip, erasing and cutmix */
    int erase;                           /* RandomErasing: erase_p > 0 */
    double erase_scale[2], erase_logratio[2];
    int mix;                             /* 1 mixup, 2 cutmix, 3 either (a coin per batch); 0 off */
    /* the epoch */
    int64_t *perm;                       /* shuffle: sample of position i; NULL: identity */
    uint64_t epoch, tkey;
    int running;                         /* an epoch is in progress */
    int64_t cons;                        /* the next batch to hand out */
    int64_t start_batch;                 /* where the next epoch starts (gdl_loader_set_position), else 0 */
    int held;                            /* the slot handed out last, -1 */
    int nslots;
    gdl__slot *slots;
    /* delivery to a GPU: pinned, batches alternate between two device buffers
       (batch b in buffer b & 1), so the copy of a batch overlaps the step
       before it; otherwise one buffer, copied on the compute stream */
    int pinned;
    const gdl_backend *be;
    gdl_tensor *dx[2], *dy[2], *dl[2];
    void *used[2];                       /* reached when the steps reading buffer k were done */
    int64_t delivered;                   /* batches delivered to the device, ever */
    void *stream;
    /* workers */
    int nthreads, started;
#ifndef GPUDL_NO_THREADS
    gdl__thread *threads;
    gdl__mutex mu;
    gdl__cond cv_work, cv_ready;
    int sync_init;                       /* mutex and conditions initialised */
    int active, shutdown;                /* under mu */
    int64_t next_claim;                  /* under mu */
#endif
};

GPUDL_API gdl_loader_opts gdl_loader_defaults(void) {
    gdl_loader_opts o;
    memset(&o, 0, sizeof o);
    o.batch_size = 1;
    o.shuffle = 0;
    o.drop_last = 0;
    o.num_workers = 0;
    o.prefetch = 2;
    o.seed = 0;
    o.pin_memory = 0;
    o.device = gdl_cpu();
    return o;
}

/* ---- the random transforms' draws: counters of a hash stream, so any worker
   makes the same ones ---- */

/* uniform in [0, 1), 53 bits */
static double gdl__tf_unif(uint64_t key, uint64_t *ctr) {
    return (double)(gdl_hash64(key, (*ctr)++) >> 11) * (1.0 / 9007199254740992.0);
}
/* N(0, 1), Box-Muller */
static double gdl__tf_normal(uint64_t key, uint64_t *ctr) {
    double u1 = 1.0 - gdl__tf_unif(key, ctr), u2 = gdl__tf_unif(key, ctr);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
/* Gamma(a, 1) by Marsaglia and Tsang; a < 1 as Gamma(a + 1) U^(1/a) */
static double gdl__tf_gamma(double a, uint64_t key, uint64_t *ctr) {
    double boost = 1, d, c;
    if (a < 1) {
        boost = pow(1.0 - gdl__tf_unif(key, ctr), 1.0 / a);
        a += 1;
    }
    d = a - 1.0 / 3;
    c = 1 / sqrt(9 * d);
    for (;;) {
        double x = gdl__tf_normal(key, ctr), v = 1 + c * x, u;
        if (v <= 0) continue;
        v = v * v * v;
        u = 1.0 - gdl__tf_unif(key, ctr);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return d * v * boost;
    }
}
/* Beta(a, a) as G1 / (G1 + G2) */
static double gdl__tf_beta(double a, uint64_t key, uint64_t *ctr) {
    double g1 = gdl__tf_gamma(a, key, ctr), g2 = gdl__tf_gamma(a, key, ctr);
    if (!(g1 + g2 > 0)) return gdl__tf_unif(key, ctr) < 0.5 ? 0.0 : 1.0; /* both underflowed (a tiny alpha) */
    return g1 / (g1 + g2);
}

/* RandomErasing.get_params on an H x W image, from the uniforms u[0..22] in torchvision's order of draws:
   u[0] < p erases; then up to 10 tries of (area fraction, log aspect ratio) at u[1+2t], u[2+2t]; the
   first box inside the image takes its top and left from the next two. h = round(sqrt(area ratio)),
   w = round(sqrt(area / ratio)), Python's round (half to even: rint). 1 and box = {top, left, h, w};
   0: no erasing. */
static int gdl__erase_params(int64_t H, int64_t W, double p, const double scale[2], const double logratio[2],
                             const double *u, int64_t box[4]) {
    int t, k = 1;
    if (!(u[0] < p)) return 0;
    for (t = 0; t < 10; t++) {
        double area = (double)(H * W) * (scale[0] + u[k] * (scale[1] - scale[0]));
        double ar = exp(logratio[0] + u[k + 1] * (logratio[1] - logratio[0]));
        double hd = rint(sqrt(area * ar)), wd = rint(sqrt(area / ar)); /* inf or NaN for an extreme ratio */
        int64_t h, w;
        k += 2;
        if (!(hd < (double)H && wd < (double)W)) continue; /* compared as doubles, cast only when inside */
        h = (int64_t)hd, w = (int64_t)wd;
        box[0] = (int64_t)(u[k] * (double)(H - h + 1));
        box[1] = (int64_t)(u[k + 1] * (double)(W - w + 1));
        box[2] = h;
        box[3] = w;
        return 1;
    }
    return 0;
}

/* RandomErasing on one transformed sample (planes x OH x OW), its draws from key. */
static void gdl__loader_erase(const gdl_loader *l, uint64_t key, gdl_real *out) {
    double u[23];
    uint64_t ctr = 0;
    int64_t box[4], p, y, x;
    const gdl_transform *t = &l->o.transform;
    int i;
    for (i = 0; i < 23; i++) u[i] = gdl__tf_unif(key, &ctr);
    if (!gdl__erase_params(l->OH, l->OW, t->erase_p, l->erase_scale, l->erase_logratio, u, box)) return;
    for (p = 0; p < l->planes; p++)
        for (y = box[0]; y < box[0] + box[2]; y++)
            for (x = box[1]; x < box[1] + box[3]; x++)
                out[(p * l->OH + y) * l->OW + x] =
                    t->erase_random ? (gdl_real)gdl__tf_normal(key, &ctr) : (gdl_real)t->erase_value;
}

/* One sample, transformed, into out (out_numel elements). */
static void gdl__loader_sample_geom(const gdl_loader *l, int64_t idx, gdl_real *out);
static void gdl__loader_sample(const gdl_loader *l, int64_t idx, gdl_real *out) {
    gdl__loader_sample_geom(l, idx, out);
    if (l->erase) gdl__loader_erase(l, gdl_hash64(gdl_hash64(l->tkey, (uint64_t)idx), 3), out);
}

/* Normalisation, crop and flip. */
static void gdl__loader_sample_geom(const gdl_loader *l, int64_t idx, gdl_real *out) {
    const gdl_dataset *ds = l->ds;
    const int64_t sn = ds->sample_numel;
    const uint8_t *xu = ds->dtype == GDL_U8 ? (const uint8_t *)ds->x + (size_t)(idx * sn) : NULL;
    const gdl_real *xf = ds->dtype == GDL_U8 ? NULL : (const gdl_real *)ds->x + (size_t)(idx * sn);
    const gdl_real k255 = (gdl_real)255;
    if (!l->spatial) {
        int64_t e;
        if (!l->norm) {
            if (xu)
                for (e = 0; e < sn; e++) out[e] = (gdl_real)xu[e] / k255;
            else
                memcpy(out, xf, sizeof(gdl_real) * (size_t)sn);
        } else {
            for (e = 0; e < sn; e++) {
                int c = l->norm == 1 ? 0 : (int)(e / l->norm_plane);
                gdl_real v = xu ? (gdl_real)xu[e] / k255 : xf[e];
                out[e] = (v - l->mean[c]) / l->stdv[c];
            }
        }
        return;
    } else {
        /* RandomCrop: top/left of the window in the padded image, shifted
           back by the padding; RandomHorizontalFlip mirrors the window. */
        uint64_t key = gdl_hash64(l->tkey, (uint64_t)idx);
        int64_t top = 0, left = 0, p, y, x;
        int flip = 0;
        if (l->crop) {
            top = (int64_t)(gdl_hash64(key, 0) % (uint64_t)(l->H + 2 * l->pad - l->OH + 1)) - l->pad;
            left = (int64_t)(gdl_hash64(key, 1) % (uint64_t)(l->W + 2 * l->pad - l->OW + 1)) - l->pad;
        }
        if (l->hflip) flip = (int)(gdl_hash64(key, 2) >> 63);
        for (p = 0; p < l->planes; p++) {
            int c = l->norm > 1 ? (int)(p / l->planes_per_channel) : 0;
            gdl_real m = l->norm ? l->mean[c] : (gdl_real)0, s = l->norm ? l->stdv[c] : (gdl_real)1;
            int64_t base = p * l->H * l->W;
            gdl_real *o = out + p * l->OH * l->OW;
            for (y = 0; y < l->OH; y++) {
                int64_t sy = y + top;
                for (x = 0; x < l->OW; x++) {
                    int64_t sx = (flip ? l->OW - 1 - x : x) + left;
                    gdl_real v;
                    if (sy < 0 || sy >= l->H || sx < 0 || sx >= l->W) {
                        v = 0; /* zero padding, placed after normalisation */
                    } else {
                        int64_t e = base + sy * l->W + sx;
                        v = xu ? (gdl_real)xu[e] / k255 : xf[e];
                        if (l->norm) v = (v - m) / s;
                    }
                    o[y * l->OW + x] = v;
                }
            }
        }
    }
}

static int64_t gdl__loader_bsz(const gdl_loader *l, int64_t b) {
    int64_t start = b * l->B, left = l->n - start;
    return left < l->B ? left : l->B;
}

/* The dataset index at position pos of this epoch. Sharded: position pos of
   rank r is position r + pos*W of the epoch's list padded to a multiple of W
   by repeating it from its start, which is the list's element (r + pos*W) mod N. */
static int64_t gdl__loader_index(const gdl_loader *l, int64_t pos) {
    if (l->o.num_replicas > 1) pos = (l->o.rank + pos * (int64_t)l->o.num_replicas) % l->ds->n;
    return l->perm ? l->perm[pos] : pos;
}

/* Key domains of the loader's random streams. */
#define GDL__PERM_DOMAIN 0x7065726d75746521ull /* "permute!" */
#define GDL__TF_DOMAIN 0x7472616e73666f72ull   /* "transfor" */
#define GDL__MIX_DOMAIN 0x6d69787570637574ull  /* "mixupcut" */

/* CutMix.make_params: the box {x1, y1, x2, y2} of centre (rx, ry) and half sides int(r W), int(r H),
   r = sqrt(1 - lam) / 2, clipped to the image; returns the adjusted lam, 1 - box area / (H W). */
static double gdl__cutmix_box(int64_t H, int64_t W, double lam, int64_t rx, int64_t ry, int64_t box[4]) {
    double r = 0.5 * sqrt(1.0 - lam);
    int64_t hw = (int64_t)(r * (double)W), hh = (int64_t)(r * (double)H);
    box[0] = rx - hw < 0 ? 0 : rx - hw;
    box[1] = ry - hh < 0 ? 0 : ry - hh;
    box[2] = rx + hw > W ? W : rx + hw;
    box[3] = ry + hh > H ? H : ry + hh;
    return 1.0 - (double)((box[2] - box[0]) * (box[3] - box[1])) / (double)(W * H);
}

/* The mix of a batch of bsz samples of planes x H x W in place (x), with lam and (cut) the CutMix box
   {x1, y1, x2, y2}: sample i is paired with i - 1 (sample 0 with the last), read before it is mixed, as
   torchvision's batch.roll(1, 0) is; labels lab become the soft targets ys [bsz, K]. first: one sample. */
static void gdl__mix_apply(int64_t bsz, int64_t planes, int64_t H, int64_t W, int64_t K, int cut, double lam,
                           const int64_t box[4], gdl_real *x, const int32_t *lab, gdl_real *ys, gdl_real *first) {
    int64_t n = planes * H * W, i, e, p, yy, xx;
    gdl_real lm = (gdl_real)lam, lo = (gdl_real)(1.0 - lam);
    /* from the last sample down, so x_{i-1} is still unmixed; sample 0 pairs with the saved last one */
    memcpy(first, x + (size_t)((bsz - 1) * n), sizeof(gdl_real) * (size_t)n);
    for (i = bsz - 1; i >= 0; i--) {
        gdl_real *xi = x + (size_t)(i * n);
        const gdl_real *xp = i ? x + (size_t)((i - 1) * n) : first;
        int32_t ci = lab[i], cp = lab[i ? i - 1 : bsz - 1];
        if (!cut)
            for (e = 0; e < n; e++) xi[e] = xp[e] * lo + xi[e] * lm; /* torchvision: roll * (1-lam) + x * lam */
        else
            for (p = 0; p < planes; p++)
                for (yy = box[1]; yy < box[3]; yy++)
                    for (xx = box[0]; xx < box[2]; xx++) xi[(p * H + yy) * W + xx] = xp[(p * H + yy) * W + xx];
        for (e = 0; e < K; e++) ys[i * K + e] = 0;
        ys[i * K + cp] += lo;
        ys[i * K + ci] += lm;
    }
}

/* MixUp or CutMix (torchvision.transforms.v2) on batch b: its draws from (seed, epoch, b). */
static void gdl__loader_mix(const gdl_loader *l, int64_t b, int64_t bsz, gdl__slot *s) {
    const gdl_transform *t = &l->o.transform;
    uint64_t key = gdl_hash64(l->tkey ^ GDL__MIX_DOMAIN, (uint64_t)b), ctr = 0;
    int cut = l->mix == 2 || (l->mix == 3 && gdl__tf_unif(key, &ctr) < 0.5);
    double lam = gdl__tf_beta(cut ? t->cutmix_alpha : t->mixup_alpha, key, &ctr);
    int64_t box[4] = {0, 0, 0, 0};
    if (cut) {
        int64_t rx = (int64_t)(gdl__tf_unif(key, &ctr) * (double)l->OW);
        int64_t ry = (int64_t)(gdl__tf_unif(key, &ctr) * (double)l->OH);
        lam = gdl__cutmix_box(l->OH, l->OW, lam, rx, ry, box);
    }
    gdl__mix_apply(bsz, cut ? l->planes : 1, cut ? l->OH : 1, cut ? l->OW : l->out_numel, l->y_numel, cut, lam, box,
                   (gdl_real *)s->x, s->lab, (gdl_real *)s->y, s->spare);
}

/* Batch b of the current epoch into slot s's host buffers. */
static void gdl__loader_fill(const gdl_loader *l, int64_t b, gdl__slot *s) {
    const gdl_dataset *ds = l->ds;
    int64_t start = b * l->B, bsz = gdl__loader_bsz(l, b), k;
    int32_t *lab = l->mix ? s->lab : s->y;
    for (k = 0; k < bsz; k++) {
        int64_t idx = gdl__loader_index(l, start + k);
        if (s->len) s->len[k] = ds->lengths[idx];
        if (ds->tokens) { /* a window and its next-token targets */
            const int32_t *w = ds->tokens + (size_t)(idx * ds->stride);
            memcpy((int32_t *)s->x + (size_t)(k * l->out_numel), w, sizeof(int32_t) * (size_t)l->out_numel);
            memcpy(s->y + (size_t)(k * l->y_numel), w + 1, sizeof(int32_t) * (size_t)l->y_numel);
            continue;
        }
        lab[k] = ds->labels[idx];
        if (l->out_dtype == GDL_I32)
            memcpy((int32_t *)s->x + (size_t)(k * l->out_numel), (const int32_t *)ds->x + (size_t)(idx * l->out_numel),
                   sizeof(int32_t) * (size_t)l->out_numel);
        else
            gdl__loader_sample(l, idx, (gdl_real *)s->x + (size_t)(k * l->out_numel));
    }
    if (l->mix) gdl__loader_mix(l, b, bsz, s);
}

/* The permutation and transform key of l->epoch. Workers are idle. */
static void gdl__loader_begin_epoch(gdl_loader *l) {
    l->tkey = gdl_hash64(l->o.seed ^ GDL__TF_DOMAIN, l->epoch);
    if (l->perm) {
        uint64_t pkey = gdl_hash64(l->o.seed ^ GDL__PERM_DOMAIN, l->epoch);
        int64_t n = l->ds->n, i;
        for (i = 0; i < n; i++) l->perm[i] = i;
        for (i = n - 1; i > 0; i--) { /* Fisher-Yates */
            int64_t j = (int64_t)(gdl_hash64(pkey, (uint64_t)i) % (uint64_t)(i + 1)), t = l->perm[i];
            l->perm[i] = l->perm[j];
            l->perm[j] = t;
        }
    }
    l->cons = l->start_batch;
    l->start_batch = 0;
    l->held = -1;
    l->running = 1;
}

#ifndef GPUDL_NO_THREADS
static void *gdl__loader_worker(void *arg) {
    gdl_loader *l = (gdl_loader *)arg;
    gdl__mutex_lock(&l->mu);
    for (;;) {
        int64_t b;
        gdl__slot *s;
        while (!l->shutdown &&
               !(l->active && l->next_claim < l->nb &&
                 l->slots[l->next_claim % l->nslots].state == GDL__SLOT_FREE))
            gdl__cond_wait(&l->cv_work, &l->mu);
        if (l->shutdown) break;
        b = l->next_claim++;
        s = &l->slots[b % l->nslots];
        s->state = GDL__SLOT_FILLING;
        s->batch = b;
        gdl__mutex_unlock(&l->mu);
        gdl__loader_fill(l, b, s);
        gdl__mutex_lock(&l->mu);
        s->state = GDL__SLOT_READY;
        gdl__cond_broadcast(&l->cv_ready);
    }
    gdl__mutex_unlock(&l->mu);
    return NULL;
}
#endif

/* Abandons the epoch in progress: no new claims, waits for the batches being
   filled, frees every slot. */
static int gdl__loader_release(gdl_loader *l, gdl__slot *s);

static void gdl__loader_stop_epoch(gdl_loader *l) {
    int k;
    /* workers refill any slot next epoch: no copy may still read one (a
       failure here is the device's and shows at its next call) */
    for (k = 0; l->pinned && k < l->nslots; k++) (void)gdl__loader_release(l, &l->slots[k]);
#ifndef GPUDL_NO_THREADS
    if (l->started > 0) {
        int i, busy;
        gdl__mutex_lock(&l->mu);
        l->active = 0;
        do {
            busy = 0;
            for (i = 0; i < l->nslots; i++) busy |= l->slots[i].state == GDL__SLOT_FILLING;
            if (busy) gdl__cond_wait(&l->cv_ready, &l->mu);
        } while (busy);
        for (i = 0; i < l->nslots; i++) l->slots[i].state = GDL__SLOT_FREE;
        gdl__mutex_unlock(&l->mu);
    }
#endif
    l->running = 0;
    l->held = -1;
}

static void gdl__loader_destroy(gdl_loader *l) {
    int i;
    if (!l) return;
#ifndef GPUDL_NO_THREADS
    if (l->sync_init) {
        gdl__loader_stop_epoch(l);
        gdl__mutex_lock(&l->mu);
        l->shutdown = 1;
        gdl__cond_broadcast(&l->cv_work);
        gdl__mutex_unlock(&l->mu);
        for (i = 0; i < l->started; i++) gdl__thread_join(&l->threads[i]);
        gdl__cond_destroy(&l->cv_work);
        gdl__cond_destroy(&l->cv_ready);
        gdl__mutex_destroy(&l->mu);
    }
    GPUDL_FREE(l->threads);
#endif
    if (l->slots) {
        for (i = 0; i < l->nslots; i++) {
            gdl__slot *s = &l->slots[i];
            GPUDL_FREE(s->lab);
            GPUDL_FREE(s->spare);
            if (s->tx || s->ty) { /* CPU delivery: the tensors own the buffers */
                gdl__free(s->tx);
                gdl__free(s->ty);
                gdl__free(s->tl);
                continue;
            }
            GPUDL_FREE(s->len);
            if (l->pinned) {
                /* no copy may still read them */
                if (s->copied && l->be->rt.event_synchronize(s->copied) < 0) l->be->rt.synchronize();
                if (s->copied) l->be->rt.event_destroy(s->copied);
                if (s->x) l->be->rt.host_free(s->x);
                if (s->y) l->be->rt.host_free(s->y);
            } else {
                GPUDL_FREE(s->x);
                GPUDL_FREE(s->y);
            }
        }
        GPUDL_FREE(l->slots);
    }
    for (i = 0; i < 2; i++) {
        gdl__free(l->dx[i]);
        gdl__free(l->dy[i]);
        gdl__free(l->dl[i]);
        if (l->used[i]) l->be->rt.event_destroy(l->used[i]);
    }
    if (l->stream) l->be->rt.stream_destroy(l->stream);
    GPUDL_FREE(l->perm);
    GPUDL_FREE(l);
}

GPUDL_API void gdl_loader_free(gdl_loader *l) { gdl__loader_destroy(l); }

/* Validates the random erasing and mixup/cutmix options; fills their plan. 0 / -1. */
static int gdl__loader_plan_random(const char *fn, gdl_loader *l) {
    const gdl_transform *t = &l->o.transform;
    const double *sc = t->erase_scale, *ra = t->erase_ratio;
    int dsc = sc[0] == 0 && sc[1] == 0, dra = ra[0] == 0 && ra[1] == 0;
    if (!(t->erase_p >= 0 && t->erase_p <= 1)) {
        gdl__set_error("%s: transform erase_p %g must be in [0, 1]", fn, t->erase_p);
        return -1;
    }
    l->erase = t->erase_p > 0;
    if (!dsc && !(sc[0] >= 0 && sc[0] <= sc[1] && sc[1] <= 1)) {
        gdl__set_error("%s: transform erase_scale (%g, %g) must have 0 <= lo <= hi <= 1", fn, sc[0], sc[1]);
        return -1;
    }
    if (!dra && !(ra[0] > 0 && ra[0] <= ra[1] && ra[1] < HUGE_VAL)) {
        gdl__set_error("%s: transform erase_ratio (%g, %g) must have 0 < lo <= hi, finite", fn, ra[0], ra[1]);
        return -1;
    }
    if (!(t->erase_value > -HUGE_VAL && t->erase_value < HUGE_VAL)) {
        gdl__set_error("%s: transform erase_value %g must be finite", fn, t->erase_value);
        return -1;
    }
    l->erase_scale[0] = dsc ? 0.02 : sc[0];
    l->erase_scale[1] = dsc ? 0.33 : sc[1];
    l->erase_logratio[0] = log(dra ? 0.3 : ra[0]);
    l->erase_logratio[1] = log(dra ? 3.3 : ra[1]);
    /* written so that NaN fails too */
    if (!(t->mixup_alpha >= 0 && t->mixup_alpha < HUGE_VAL) || !(t->cutmix_alpha >= 0 && t->cutmix_alpha < HUGE_VAL)) {
        gdl__set_error("%s: transform mixup_alpha %g, cutmix_alpha %g must be finite and >= 0 (0: off)", fn,
                       t->mixup_alpha, t->cutmix_alpha);
        return -1;
    }
    l->mix = (t->mixup_alpha > 0 ? 1 : 0) | (t->cutmix_alpha > 0 ? 2 : 0);
    if (l->mix && (t->num_classes < 1 || t->num_classes > (1 << 24))) {
        gdl__set_error("%s: mixup/cutmix need transform.num_classes in [1, 2^24] (the soft targets' width), got %d",
                       fn, t->num_classes);
        return -1;
    }
    if (l->mix && l->ds->num_classes > t->num_classes) {
        gdl__set_error("%s: transform.num_classes %d is less than the dataset's %d classes", fn, t->num_classes,
                       l->ds->num_classes);
        return -1;
    }
    return 0;
}

/* Validates the transform against the samples; fills the plan. 0 / -1. */
static int gdl__loader_plan(const char *fn, gdl_loader *l) {
    const gdl_dataset *ds = l->ds;
    const gdl_transform *t = &l->o.transform;
    const char *ss = gdl__shape_fmt(ds->ndim, ds->shape);
    int i;
    l->out_ndim = ds->ndim + 1;
    l->out_shape[0] = l->B < l->n ? l->B : l->n; /* no buffer holds more than an epoch */
    memcpy(l->out_shape + 1, ds->shape, sizeof(int64_t) * (size_t)ds->ndim);
    l->out_numel = ds->sample_numel;
    l->out_dtype = ds->dtype == GDL_I32 ? GDL_I32 : GDL_F32;
    l->y_numel = ds->target_len ? ds->target_len : 1;
    if (ds->dtype == GDL_I32 && (t->normalize || t->crop_padding || t->crop_size || t->hflip || t->erase_p != 0 ||
                                 t->mixup_alpha != 0 || t->cutmix_alpha != 0)) {
        gdl__set_error("%s: the samples are token ids (i32 %s): transforms do not apply to them", fn, ss);
        return -1;
    }
    if (t->normalize) {
        if (t->normalize < 0 || t->normalize > GDL_TRANSFORM_MAX_CHANNELS ||
            (t->normalize != 1 && (ds->ndim < 2 || t->normalize != ds->shape[0]))) {
            if (ds->ndim >= 2)
                gdl__set_error("%s: transform.normalize has %d channels but the samples are %s (expected 1, or "
                               "%lld channels = dim 0, at most %d)", fn, t->normalize, ss, (long long)ds->shape[0],
                               GDL_TRANSFORM_MAX_CHANNELS);
            else
                gdl__set_error("%s: transform.normalize has %d channels but the samples are %s (expected 1)", fn,
                               t->normalize, ss);
            return -1;
        }
        for (i = 0; i < t->normalize; i++) {
            /* written so that NaN fails too */
            if (!(t->std[i] > 0 && t->std[i] < HUGE_VAL) || !(t->mean[i] > -HUGE_VAL && t->mean[i] < HUGE_VAL)) {
                gdl__set_error("%s: transform channel %d: mean %g, std %g (std must be finite and > 0, mean finite)",
                               fn, i, t->mean[i], t->std[i]);
                return -1;
            }
            l->mean[i] = (gdl_real)t->mean[i];
            l->stdv[i] = (gdl_real)t->std[i];
        }
        l->norm = t->normalize;
        l->norm_plane = ds->sample_numel / ds->shape[0];
    }
    if (t->crop_padding < 0 || t->crop_size < 0 || t->crop_padding > (1 << 20) || t->crop_size > (1 << 20)) {
        gdl__set_error("%s: transform crop_padding %d, crop_size %d: both must be in [0, 2^20]", fn,
                       t->crop_padding, t->crop_size);
        return -1;
    }
    l->crop = t->crop_padding > 0 || t->crop_size > 0;
    l->hflip = t->hflip != 0;
    l->spatial = l->crop || l->hflip;
    if (gdl__loader_plan_random(fn, l) < 0) return -1;
    if (l->mix) l->y_numel = t->num_classes;
    if (l->spatial || l->erase || (l->mix & 2)) {
        if (ds->ndim < 2) {
            gdl__set_error("%s: random crop, flip, erasing and cutmix need image samples [C,H,W] (or [H,W]), "
                           "got %s", fn, ss);
            return -1;
        }
        l->H = ds->shape[ds->ndim - 2];
        l->W = ds->shape[ds->ndim - 1];
        l->planes = ds->sample_numel / (l->H * l->W);
        l->planes_per_channel = l->norm > 1 ? l->planes / ds->shape[0] : 1;
        l->pad = t->crop_padding;
        l->OH = t->crop_size ? t->crop_size : l->H;
        l->OW = t->crop_size ? t->crop_size : l->W;
        if (l->OH > l->H + 2 * l->pad || l->OW > l->W + 2 * l->pad) {
            gdl__set_error("%s: crop size %lldx%lld is larger than the padded image %lldx%lld (samples %s, "
                           "padding %d)", fn, (long long)l->OH, (long long)l->OW, (long long)(l->H + 2 * l->pad),
                           (long long)(l->W + 2 * l->pad), ss, t->crop_padding);
            return -1;
        }
        l->out_shape[l->out_ndim - 2] = l->OH;
        l->out_shape[l->out_ndim - 1] = l->OW;
        l->out_numel = l->planes * l->OH * l->OW;
    }
    if (l->out_numel > ((int64_t)1 << 46) / l->out_shape[0]) {
        gdl__set_error("%s: a batch of %lld samples of %s is too large", fn, (long long)l->out_shape[0], ss);
        return -1;
    }
    return 0;
}

/* gdl_loader_new's options checked. */
static int gdl__loader_check_opts(const char *fn, const gdl_dataset *ds, const gdl_loader_opts *o) {
    if (!ds) {
        gdl__set_error("%s: ds is NULL", fn);
        return -1;
    }
    if (o->batch_size < 1) {
        gdl__set_error("%s: batch_size must be >= 1, got %lld", fn, (long long)o->batch_size);
        return -1;
    }
    if (o->num_workers < 0 || o->num_workers > 256) {
        gdl__set_error("%s: num_workers must be in [0, 256], got %d", fn, o->num_workers);
        return -1;
    }
    if (o->prefetch < 0 || o->prefetch > 1024) {
        gdl__set_error("%s: prefetch must be in [0, 1024] (0: the default 2), got %d", fn, o->prefetch);
        return -1;
    }
    if (o->device.type != GDL_DEVICE_CPU && o->device.type != GDL_DEVICE_CUDA) {
        gdl__set_error("%s: invalid device type %d", fn, o->device.type);
        return -1;
    }
    if (o->num_replicas < 0 || (o->num_replicas > 1 && (o->rank < 0 || o->rank >= o->num_replicas)) ||
        (o->num_replicas <= 1 && o->rank != 0)) {
        gdl__set_error("%s: rank %d is not in [0, num_replicas %d)", fn, o->rank, o->num_replicas);
        return -1;
    }
    return 0;
}

/* A batch's targets on the loader's device: i32 [B], i32 [B, T] for target sequences, or (mix) f32
   [B, num_classes] soft targets. */
static gdl_tensor *gdl__loader_ytensor(const gdl_loader *l) {
    int64_t shape[2];
    shape[0] = l->out_shape[0];
    shape[1] = l->y_numel;
    return gdl_empty(l->mix || l->ds->target_len ? 2 : 1, shape, l->mix ? GDL_F32 : GDL_I32, l->o.device);
}

/* A GPU loader's device batch buffers (two with pin_memory, with their events and copy stream). */
static int gdl__loader_device_buffers(const char *fn, gdl_loader *l) {
    int i;
    if (!(l->be = gdl__be(fn, l->o.device))) return -1;
    for (i = 0; i < (l->pinned ? 2 : 1); i++) {
        l->dx[i] = gdl_empty(l->out_ndim, l->out_shape, l->out_dtype, l->o.device);
        l->dy[i] = l->dx[i] ? gdl__loader_ytensor(l) : NULL;
        if (l->dy[i] && l->ds->lengths && !(l->dl[i] = gdl_empty(1, l->out_shape, GDL_I32, l->o.device))) {
            gdl__data_wrap_error(fn);
            return -1;
        }
        if (!l->dy[i] || (l->pinned && !(l->used[i] = l->be->rt.event_create()))) {
            gdl__data_wrap_error(fn);
            return -1;
        }
    }
    /* the buffers' blocks may come from the cache with kernels still
       queued on them: the first copies wait for those too */
    if (l->pinned && (!(l->stream = l->be->rt.stream_create()) || l->be->rt.event_record(l->used[0], NULL) < 0 ||
                      l->be->rt.event_record(l->used[1], NULL) < 0)) {
        gdl__data_wrap_error(fn);
        return -1;
    }
    return 0;
}

/* The slots' host batch buffers: CPU tensors (a CPU loader), pinned memory, or plain memory. */
static int gdl__loader_slots(const char *fn, gdl_loader *l) {
    int64_t bmax;
    size_t xbytes, ybytes;
    int i, is_cpu = l->o.device.type == GDL_DEVICE_CPU;
    l->slots = (gdl__slot *)GPUDL_MALLOC(sizeof(gdl__slot) * (size_t)l->nslots);
    if (!l->slots) {
        gdl__set_error("%s: out of memory", fn);
        return -1;
    }
    memset(l->slots, 0, sizeof(gdl__slot) * (size_t)l->nslots);
    bmax = l->out_shape[0];
    xbytes = gdl_dtype_size(l->out_dtype) * (size_t)(bmax * l->out_numel);
    ybytes = (l->mix ? sizeof(gdl_real) : sizeof(int32_t)) * (size_t)(bmax * l->y_numel);
    for (i = 0; i < l->nslots; i++) {
        gdl__slot *s = &l->slots[i];
        if (l->mix && (!(s->lab = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)bmax)) ||
                       !(s->spare = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)l->out_numel)))) {
            gdl__set_error("%s: out of memory for the mixup/cutmix buffers", fn);
            return -1;
        }
        if (is_cpu) {
            s->tx = gdl_empty(l->out_ndim, l->out_shape, l->out_dtype, l->o.device);
            s->ty = s->tx ? gdl__loader_ytensor(l) : NULL;
            if (s->ty && l->ds->lengths) s->tl = gdl_empty(1, l->out_shape, GDL_I32, l->o.device);
            if (!s->ty || (l->ds->lengths && !s->tl)) {
                gdl__data_wrap_error(fn);
                return -1;
            }
            s->x = s->tx->data;
            s->y = (int32_t *)s->ty->data;
            if (s->tl) s->len = (int32_t *)s->tl->data;
            continue;
        }
        if (l->ds->lengths && !(s->len = (int32_t *)GPUDL_MALLOC(sizeof(int32_t) * (size_t)bmax))) {
            gdl__set_error("%s: out of memory", fn);
            return -1;
        }
        if (l->pinned) {
            s->x = l->be->rt.host_alloc(xbytes);
            s->y = s->x ? (int32_t *)l->be->rt.host_alloc(ybytes) : NULL;
            if (!s->y || !(s->copied = l->be->rt.event_create())) {
                gdl__data_wrap_error(fn);
                return -1;
            }
            continue;
        }
        s->x = GPUDL_MALLOC(xbytes);
        s->y = (int32_t *)GPUDL_MALLOC(ybytes);
        if (!s->x || !s->y) {
            gdl__set_error("%s: out of memory for %d host batch buffers of %s", fn, l->nslots,
                           gdl__shape_fmt(l->out_ndim, l->out_shape));
            return -1;
        }
    }
    return 0;
}

#ifndef GPUDL_NO_THREADS
/* The worker threads and what they share (l->sync_init once the mutex and conditions exist). */
static int gdl__loader_start_workers(const char *fn, gdl_loader *l) {
    int i;
    l->threads = (gdl__thread *)GPUDL_MALLOC(sizeof(gdl__thread) * (size_t)l->nthreads);
    if (!l->threads) {
        gdl__set_error("%s: out of memory", fn);
        return -1;
    }
    if (gdl__mutex_init(&l->mu) != 0) {
        gdl__set_error("%s: cannot make a mutex", fn);
        return -1;
    }
    if (gdl__cond_init(&l->cv_work) != 0) {
        gdl__mutex_destroy(&l->mu);
        gdl__set_error("%s: cannot make a condition variable", fn);
        return -1;
    }
    if (gdl__cond_init(&l->cv_ready) != 0) {
        gdl__cond_destroy(&l->cv_work);
        gdl__mutex_destroy(&l->mu);
        gdl__set_error("%s: cannot make a condition variable", fn);
        return -1;
    }
    l->sync_init = 1;
    for (i = 0; i < l->nthreads; i++) {
        int rc = gdl__thread_start(&l->threads[i], gdl__loader_worker, l);
        if (rc != 0) {
            gdl__set_error("%s: cannot start worker thread %d of %d: %s", fn, i + 1, l->nthreads, strerror(rc));
            return -1;
        }
        l->started++;
    }
    return 0;
}
#endif

GPUDL_API gdl_loader *gdl_loader_new(gdl_dataset *ds, const gdl_loader_opts *opts) {
    static const char fn[] = "gdl_loader_new";
    gdl_loader_opts o = opts ? *opts : gdl_loader_defaults();
    gdl_loader *l;
    int ahead;
    if (gdl__loader_check_opts(fn, ds, &o) < 0) return NULL;
    if (o.prefetch == 0) o.prefetch = 2;
    l = (gdl_loader *)gdl__zalloc(fn, sizeof(gdl_loader));
    if (!l) return NULL;
    l->ds = ds;
    l->o = o;
    l->n = o.num_replicas > 1 ? (ds->n + o.num_replicas - 1) / o.num_replicas : ds->n;
    /* PyTorch's count: a batch size over the epoch gives one short batch, or none with drop_last (no
       n + B - 1 that overflows); the batch size is then capped by the epoch, so that no product of it
       (positions, samples per step) can overflow either */
    l->nb = o.drop_last ? l->n / o.batch_size : l->n / o.batch_size + (l->n % o.batch_size != 0);
    l->B = o.batch_size < l->n ? o.batch_size : l->n > 0 ? l->n : 1;
    l->held = -1;
    if (gdl__loader_plan(fn, l) < 0) goto fail; /* out_shape[0]: min(B, N), the buffers' batch */
#ifdef GPUDL_NO_THREADS
    l->nthreads = 0;
#else
    l->nthreads = o.num_workers;
#endif
    ahead = o.prefetch > l->nthreads ? o.prefetch : l->nthreads;
    l->nslots = l->nthreads ? ahead + 1 : 1;
    l->pinned = o.pin_memory && o.device.type != GDL_DEVICE_CPU;
    /* the device first: an unusable one fails fast */
    if (o.device.type != GDL_DEVICE_CPU && gdl__loader_device_buffers(fn, l) < 0) goto fail;
    if (o.shuffle) {
        l->perm = (int64_t *)GPUDL_MALLOC(sizeof(int64_t) * (size_t)ds->n);
        if (!l->perm) {
            gdl__set_error("%s: out of memory for a permutation of %lld", fn, (long long)ds->n);
            goto fail;
        }
    }
    if (gdl__loader_slots(fn, l) < 0) goto fail;
#ifndef GPUDL_NO_THREADS
    if (l->nthreads > 0 && gdl__loader_start_workers(fn, l) < 0) goto fail;
#endif
    return l;
fail:
    gdl__loader_destroy(l);
    return NULL;
}

/* Hands slot s (batch of bsz samples) out on the loader's device. 0 / -1. */
/* Pinned delivery of batch b into buffer k = b & 1, with no host wait:
   mark on the compute stream that everything issued so far (all of batch
   b-1's step) is queued before buffer k^1 is reused; make the copy stream
   wait for the mark of buffer k (set when batch b-1 was delivered, so the
   copy overlaps batch b-1's step; for the first two batches, set when the
   loader was made, after any queued kernel on the buffers' cached blocks);
   copy; make the compute stream wait for the copy. The host buffers are reused only after their copy is done
   (gdl__loader_release). */
static int gdl__loader_copy_pinned(gdl_loader *l, gdl__slot *s, int k, size_t xb, size_t yb) {
    const gdl_backend *be = l->be;
    if (be->rt.event_record(l->used[k ^ 1], NULL) < 0) return -1;
    if (be->rt.stream_wait_event(l->stream, l->used[k]) < 0) return -1;
    if (be->rt.copy_async(l->dx[k]->data, s->x, xb, 0, l->stream) < 0 ||
        be->rt.copy_async(l->dy[k]->data, s->y, yb, 0, l->stream) < 0)
        return -1;
    if (be->rt.event_record(s->copied, l->stream) < 0) return -1;
    return be->rt.stream_wait_event(NULL, s->copied);
}

static int gdl__loader_deliver(gdl_loader *l, gdl__slot *s, int64_t bsz, gdl_tensor **x, gdl_tensor **y) {
    static const char fn[] = "gdl_loader_next";
    int k = l->pinned ? (int)(l->delivered & 1) : 0;
    gdl_tensor *tx = s->tx ? s->tx : l->dx[k], *ty = s->ty ? s->ty : l->dy[k];
    gdl_tensor *tl = s->tx ? s->tl : l->dl[k];
    tx->shape[0] = bsz;
    tx->numel = bsz * l->out_numel;
    ty->shape[0] = bsz;
    ty->numel = bsz * l->y_numel;
    if (tl) {
        tl->shape[0] = bsz;
        tl->numel = bsz;
    }
    l->lengths_out = tl;
    tx->owner = ty->owner = GDL__OWN_LOADER; /* handed out: the caller must not gdl_free them */
    if (tl) tl->owner = GDL__OWN_LOADER;
    if (!s->tx) {
        size_t xb = gdl_dtype_size(l->out_dtype) * (size_t)tx->numel;
        size_t yb = (l->mix ? sizeof(gdl_real) : sizeof(int32_t)) * (size_t)ty->numel;
        /* lengths: a plain copy, which is done with s->len when it returns */
        if (tl && (!gdl__be(fn, l->o.device) || l->be->rt.copy(tl->data, s->len, sizeof(int32_t) * (size_t)bsz, 0) < 0)) {
            gdl__data_wrap_error(fn);
            return -1;
        }
        /* makes the device current; a plain copy runs on the compute stream,
           after the kernels that still read the buffer */
        if (!gdl__be(fn, l->o.device) ||
            (l->pinned ? gdl__loader_copy_pinned(l, s, k, xb, yb)
                       : l->be->rt.copy(tx->data, s->x, xb, 0) < 0 || l->be->rt.copy(ty->data, s->y, yb, 0)) < 0) {
            gdl__data_wrap_error(fn);
            return -1;
        }
        l->delivered++;
    }
    *x = tx;
    *y = ty;
    return 0;
}

/* A slot's host buffers may be refilled once the copy out of them is done:
   in a steady state it is, and asking costs no wait. */
static int gdl__loader_release(gdl_loader *l, gdl__slot *s) {
    if (!l->pinned) return 0;
    if (!gdl__be("gdl_loader_next", l->o.device) || l->be->rt.event_synchronize(s->copied) < 0) { /* device current */
        gdl__data_wrap_error("gdl_loader_next");
        return -1;
    }
    return 0;
}

static int gdl__loader_next(gdl_loader *l, gdl_tensor **x, gdl_tensor **y);
GPUDL_API int gdl_loader_next(gdl_loader *l, gdl_tensor **x, gdl_tensor **y) {
    int span, rc;
    if (!l || !x || !y) {
        gdl__set_error("gdl_loader_next: %s is NULL", !l ? "l" : !x ? "x" : "y");
        return -1;
    }
    /* the profiler: all the consumer's time in here (waiting for a worker, handing the batch over) */
    span = gdl__prof_on ? gdl__prof_push("gdl_loader_next", gdl_cpu()) : 0; /* host time, on any device */
    rc = gdl__loader_next(l, x, y);
    gdl__prof_pop(span, rc >= 0);
    return rc;
}
static int gdl__loader_next(gdl_loader *l, gdl_tensor **x, gdl_tensor **y) {
    int64_t b;
    gdl__slot *s;
    *x = NULL;
    *y = NULL;
    l->lengths_out = NULL;
#ifndef GPUDL_NO_THREADS
    if (l->started > 0 && l->held >= 0) { /* the batch handed out last goes back to the workers */
        if (gdl__loader_release(l, &l->slots[l->held]) < 0) return -1;
        gdl__mutex_lock(&l->mu);
        l->slots[l->held].state = GDL__SLOT_FREE;
        gdl__cond_broadcast(&l->cv_work);
        gdl__mutex_unlock(&l->mu);
    }
#endif
    l->held = -1;
    if (!l->running) {
        gdl__loader_begin_epoch(l);
#ifndef GPUDL_NO_THREADS
        if (l->started > 0) {
            gdl__mutex_lock(&l->mu);
            l->next_claim = l->cons;
            l->active = 1;
            gdl__cond_broadcast(&l->cv_work);
            gdl__mutex_unlock(&l->mu);
        }
#endif
    }
    if (l->cons >= l->nb) { /* end of the epoch */
        gdl__loader_stop_epoch(l);
        l->epoch++;
        return 0;
    }
    b = l->cons++;
#ifndef GPUDL_NO_THREADS
    if (l->started > 0) {
        s = &l->slots[b % l->nslots];
        gdl__mutex_lock(&l->mu);
        while (!(s->state == GDL__SLOT_READY && s->batch == b)) gdl__cond_wait(&l->cv_ready, &l->mu);
        s->state = GDL__SLOT_HELD;
        gdl__mutex_unlock(&l->mu);
        l->held = (int)(b % l->nslots);
    } else
#endif
    {
        s = &l->slots[0];
        if (gdl__loader_release(l, s) < 0) return -1;
        gdl__loader_fill(l, b, s);
    }
    return gdl__loader_deliver(l, s, gdl__loader_bsz(l, b), x, y) < 0 ? -1 : 1;
}

GPUDL_API gdl_tensor *gdl_loader_lengths(gdl_loader *l) {
    if (!l) {
        gdl__set_error("gdl_loader_lengths: l is NULL");
        return NULL;
    }
    if (!l->ds->lengths) {
        gdl__set_error("gdl_loader_lengths: the dataset has no lengths (only padded text datasets have them)");
        return NULL;
    }
    if (!l->lengths_out) {
        gdl__set_error("gdl_loader_lengths: no batch is handed out (call gdl_loader_next first)");
        return NULL;
    }
    return l->lengths_out;
}

GPUDL_API int64_t gdl_loader_num_batches(const gdl_loader *l) {
    if (!l) {
        gdl__set_error("gdl_loader_num_batches: l is NULL");
        return -1;
    }
    return l->nb;
}

GPUDL_API int gdl_loader_set_epoch(gdl_loader *l, uint64_t epoch) {
    if (!l) {
        gdl__set_error("gdl_loader_set_epoch: l is NULL");
        return -1;
    }
    if (l->running) gdl__loader_stop_epoch(l);
    l->epoch = epoch;
    l->start_batch = 0;
    return 0;
}

GPUDL_API uint64_t gdl_loader_epoch(const gdl_loader *l) { return l ? l->epoch : 0; }

GPUDL_API int gdl_loader_set_position(gdl_loader *l, uint64_t epoch, int64_t batch) {
    if (!l) {
        gdl__set_error("gdl_loader_set_position: l is NULL");
        return -1;
    }
    if (batch < 0 || batch > l->nb) {
        gdl__set_error("gdl_loader_set_position: batch %lld out of range [0, %lld]", (long long)batch,
                       (long long)l->nb);
        return -1;
    }
    if (l->running) gdl__loader_stop_epoch(l);
    l->epoch = epoch;
    l->start_batch = batch;
    return 0;
}

#undef GDL__PERM_DOMAIN
#undef GDL__TF_DOMAIN

