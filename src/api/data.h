/* ---------------------------------------------------------------------------
   src/api/data.h   Datasets, transforms and the DataLoader (PyTorch's Dataset,
   torchvision.transforms and torch.utils.data.DataLoader).

       gdl_dataset *ds = gdl_dataset_fashion_mnist(NULL, 1);   // 60000 x [1,28,28]
       gdl_loader_opts o = gdl_loader_defaults();
       o.batch_size = 128; o.shuffle = 1; o.num_workers = 2; o.device = dev;
       gdl_loader *L = gdl_loader_new(ds, &o);
       for (int epoch = 0; epoch < 10; epoch++) {
           gdl_tensor *x, *y;                 // f32 [B,1,28,28], i32 [B] on dev
           gdl_loader_set_epoch(L, epoch);
           while (gdl_loader_next(L, &x, &y) == 1) { ... a training step ... }
       }
       gdl_loader_free(L); gdl_dataset_free(ds);

   A dataset keeps its samples on the host, compactly (u8 pixels as loaded,
   or f32). The loader turns each sample into f32 when it assembles a batch:
   u8 scaled to [0,1] (ToTensor), then the transform in this order:
   Normalize(mean, std) per channel, RandomCrop(size, padding) with zero
   padding (the zeros are placed after normalisation), RandomHorizontalFlip().
   The random choices of a sample are a function of (seed, epoch, sample
   index) only, so a run is reproducible and does not depend on num_workers.
   A dataset must outlive the loaders made from it; neither is thread-safe
   (use each from one thread; the loader's workers are internal).
   ------------------------------------------------------------------------- */

/* A labelled dataset in host memory. Read the fields; do not change them. */
typedef struct gdl_dataset {
    int64_t n;                      /* number of samples, >= 1 */
    int ndim;                       /* sample dims, 1 .. GDL_MAX_DIMS-1 */
    int64_t shape[GDL_MAX_DIMS];    /* sample shape, e.g. [1,28,28], [3,32,32], [D] */
    int64_t sample_numel;           /* elements per sample */
    gdl_dtype dtype;                /* storage: GDL_U8 or GDL_F32 (gdl_real); GDL_I32: token ids, delivered
                                       as i32 unchanged (no transform) */
    int num_classes;                /* labels are in [0, num_classes) */
    void *x;                        /* n * sample_numel elements of dtype, C order; NULL for windows */
    int32_t *labels;                /* n labels; NULL for windows */
    /* text datasets (src/api/text.h) */
    int64_t target_len;             /* 0: a label per sample, y i32 [B]; T: a target sequence, y i32 [B,T] */
    int32_t *lengths;               /* NULL, or n unpadded lengths (gdl_loader_lengths hands them out) */
    int32_t *tokens;                /* windows: sample i is tokens[i*stride, +T), its target the same + 1 */
    int64_t ntokens, stride;
} gdl_dataset;

/* A copy of x (n samples of sample_shape, dtype GDL_U8, GDL_F32 = gdl_real, or GDL_I32 token ids) and
   labels. NULL + error. */
GPUDL_API gdl_dataset *gdl_dataset_from_arrays(const void *x, gdl_dtype x_dtype, int ndim,
                                               const int64_t *sample_shape, const int32_t *labels,
                                               int64_t n, int num_classes);
/* IDX images u8 [N,H,W] + labels u8 [N] (plain or gzipped), 10 classes; samples [1,H,W]. NULL + error. */
GPUDL_API gdl_dataset *gdl_dataset_from_idx(const char *images_path, const char *labels_path);
/* gdl_dataset_from_idx with num_classes (1..256) classes, e.g. 26 for EMNIST letters. NULL + error. */
GPUDL_API gdl_dataset *gdl_dataset_from_idx_ex(const char *images_path, const char *labels_path,
                                               int num_classes);
/* CIFAR-10 binary: dir/data_batch_1..5.bin (train != 0) or dir/test_batch.bin; u8 [3,32,32]. NULL + error. */
GPUDL_API gdl_dataset *gdl_dataset_from_cifar10(const char *dir, int train);
/* Fashion-MNIST train (60000) or t10k (10000) split, [1,28,28] u8, 10 classes. dir != NULL: only
   that dir; NULL: the directory in the environment variable GPUDL_DATA if it is set and not
   empty (only there), else ./data, then /usr/share/datasets/fashion-mnist (apt-get install
   dataset-fashion-mnist; in gpudl's repository `make data` installs or downloads them).
   Files *-idx?-ubyte or *-idx?-ubyte.gz (needs GPUDL_ZLIB). NULL + error. */
GPUDL_API gdl_dataset *gdl_dataset_fashion_mnist(const char *dir_or_NULL, int train);
/* A new dataset holding a copy of samples [start, start+count) of ds. NULL + error. */
GPUDL_API gdl_dataset *gdl_dataset_subset(const gdl_dataset *ds, int64_t start, int64_t count);
/* Release a dataset (NULL-safe). Free its loaders first. */
GPUDL_API void gdl_dataset_free(gdl_dataset *ds);

#define GDL_TRANSFORM_MAX_CHANNELS 16

/* Per-sample transforms; all zero (memset) means none. Crop and flip need [C,H,W] or [H,W] samples. */
typedef struct gdl_transform {
    int normalize;                  /* channels to normalise: 0 off, 1 (one mean/std for all), or shape[0] */
    double mean[GDL_TRANSFORM_MAX_CHANNELS]; /* x = (x - mean[c]) / std[c], after scaling u8 to [0,1] */
    double std[GDL_TRANSFORM_MAX_CHANNELS];  /* each > 0 */
    int crop_padding;               /* RandomCrop: zeros added on each side before cropping, >= 0 */
    int crop_size;                  /* RandomCrop output H = W (batches [B,C,size,size]); 0: the sample's H, W */
    int hflip;                      /* RandomHorizontalFlip with p = 0.5 */
    /* RandomErasing (torchvision.transforms.RandomErasing), last, on the normalised sample: with probability
       erase_p a box of area fraction ~ U(scale) and aspect ratio h/w log-uniform in ratio, at a uniform
       position, is set to erase_value (erase_random: each element ~ N(0,1), torchvision's value='random') in
       every channel; up to 10 draws for a box inside the image, else the sample is left as it is. */
    double erase_p;                 /* 0: off; in [0, 1] */
    double erase_scale[2];          /* {0, 0}: torchvision's (0.02, 0.33); else 0 <= lo <= hi <= 1 */
    double erase_ratio[2];          /* {0, 0}: torchvision's (0.3, 3.3); else 0 < lo <= hi */
    double erase_value;
    int erase_random;
    /* MixUp / CutMix (torchvision.transforms.v2), on each whole batch after the per-sample transforms:
       lambda ~ Beta(alpha, alpha); sample i is mixed with sample i-1 (batch.roll(1, 0); sample 0 with the
       last). MixUp: x = lam x_i + (1-lam) x_{i-1}; CutMix: a box of x_{i-1} (centre uniform, sides
       sqrt(1-lam) H, W, clipped) pasted into x_i, lam = 1 - box area / (H W). Targets become soft:
       y is f32 [B, num_classes], lam onehot(y_i) + (1-lam) onehot(y_{i-1}), which gdl_cross_entropy takes.
       Both set: each batch takes one of them with probability 1/2 (torchvision's RandomChoice). */
    double mixup_alpha;             /* > 0: on; 0 off */
    double cutmix_alpha;            /* > 0: on (needs image samples); 0 off */
    int num_classes;                /* needed with mixup/cutmix: the width of the soft targets */
} gdl_transform;

/* DataLoader options; start from gdl_loader_defaults(). */
typedef struct gdl_loader_opts {
    int64_t batch_size;             /* default 1, as PyTorch */
    int shuffle;                    /* a new permutation each epoch, a function of (seed, epoch); default 0 */
    int drop_last;                  /* drop the last incomplete batch; default 0 */
    int num_workers;                /* threads assembling batches ahead; 0 (default, and always under
                                       GPUDL_NO_THREADS): assembled inline in gdl_loader_next */
    int prefetch;                   /* batches assembled ahead (raised to num_workers; 0 means 2); default 2 */
    uint64_t seed;                  /* shuffle and random transforms; default 0 */
    int pin_memory;                 /* CUDA device: page-locked host buffers, copied on the loader's own stream
                                       into one of two device buffers, ordered against the compute stream with
                                       events, so the host never waits for the device; CPU: no effect */
    gdl_device device;              /* where batches are delivered; default cpu */
    gdl_transform transform;        /* default: none */
    /* DistributedSampler: deliver only this process's shard of each epoch, as PyTorch's sampler does:
       the epoch's indices (shuffled alike on every rank: same seed) are padded to a multiple of
       num_replicas by repeating the first ones, and rank r takes positions r, r + num_replicas, ...
       Every rank then has ceil(N / num_replicas) samples. 0 or 1 (default 0): the whole dataset.
       gdl_dist_world_size() and gdl_dist_rank() give the values for a distributed job. */
    int num_replicas, rank;
} gdl_loader_opts;

typedef struct gdl_loader gdl_loader;

/* batch_size 1, no shuffle, no drop_last, 0 workers, prefetch 2, seed 0, cpu, no transform. */
GPUDL_API gdl_loader_opts gdl_loader_defaults(void);
/* A loader over ds (which must outlive it); o NULL means defaults. NULL + error. */
GPUDL_API gdl_loader *gdl_loader_new(gdl_dataset *ds, const gdl_loader_opts *o);
/* 1: *x f32 [B, sample shape] (i32 for a dataset of token ids) and *y i32 [B] (i32 [B,T] with
   target_len T; with mixup/cutmix f32 [B, num_classes]) on the loader's device (owned by the loader: do not free;
   persistent, so gdl_arena_reset keeps them; valid until the next call); 0: end of the epoch, *x = *y =
   NULL (the next call starts the next epoch); -1: error. A GPU batch is copied after a device sync. */
GPUDL_API int gdl_loader_next(gdl_loader *l, gdl_tensor **x, gdl_tensor **y);
/* The unpadded lengths of the batch handed out last, i32 [B] on the loader's device (owned by the
   loader, valid until the next call), for a dataset with lengths (gdl_dataset_text_classes). NULL +
   error otherwise. */
GPUDL_API gdl_tensor *gdl_loader_lengths(gdl_loader *l);
/* Batches per epoch: floor(N/B) with drop_last, else ceil(N/B) (the last one smaller). -1 if l is NULL. */
GPUDL_API int64_t gdl_loader_num_batches(const gdl_loader *l);
/* The epoch the next batches come from (abandons an epoch in progress). 0 / -1. */
GPUDL_API int gdl_loader_set_epoch(gdl_loader *l, uint64_t epoch);
/* The current epoch number: starts at 0, +1 after each epoch's end (0 returned by next). */
GPUDL_API uint64_t gdl_loader_epoch(const gdl_loader *l);
/* Resume mid-epoch: the next batch handed out is batch `batch` (0 .. num_batches) of `epoch`, the very
   batch an uninterrupted run would get there (abandons an epoch in progress). 0 / -1. */
GPUDL_API int gdl_loader_set_position(gdl_loader *l, uint64_t epoch, int64_t batch);
/* Stop and join the workers (also mid-epoch) and free the loader and its batches (NULL-safe). */
GPUDL_API void gdl_loader_free(gdl_loader *l);

