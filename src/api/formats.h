/* ---------------------------------------------------------------------------
   src/api/formats.h data and checkpoint files: IDX (MNIST, Fashion-MNIST),
   CIFAR-10 binary, safetensors. Every loader returns 0 on success and -1 with
   gdl_last_error() set ("gdl_idx_load: PATH: truncated: expected ..."); on
   failure the outputs are left untouched and nothing is leaked.
   ------------------------------------------------------------------------- */

#define GDL_IDX_MAX_DIMS 8
#define GDL_ST_MAX_DIMS 8
#define GDL_ST_NAME_MAX 256  /* tensor names are at most 255 bytes */

/* An IDX file: data in C order, already converted to host byte order. */
typedef struct gdl_idx {
    int dtype_code;               /* 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64 */
    int ndim;                     /* 1..8 */
    int64_t dims[GDL_IDX_MAX_DIMS];
    size_t elem_size;             /* bytes per element: 1, 2, 4 or 8 */
    int64_t count;                /* number of elements: the product of dims */
    void *data;                   /* count * elem_size bytes, owned; free with gdl_idx_free */
} gdl_idx;

/* Load an IDX file, plain or gzipped (gzip needs -DGPUDL_ZLIB -lz). 0 / -1. */
GPUDL_API int gdl_idx_load(const char *path, gdl_idx *out);
/* Release an IDX file's data and zero the struct (NULL-safe). */
GPUDL_API void gdl_idx_free(gdl_idx *idx);
/* Check an (images, labels) pair: u8 [n,rows,cols] and u8 [n], labels < num_classes. 0 / -1. */
GPUDL_API int gdl_idx_check_pair(const gdl_idx *images, const gdl_idx *labels, int num_classes,
                                 const char *what);

/* Load one CIFAR-10 binary file: *images u8 [n,3,32,32] (planes R,G,B), *labels u8 [n]. 0 / -1. */
GPUDL_API int gdl_cifar10_load(const char *path, uint8_t **images, uint8_t **labels, int64_t *n);
/* Load dir/data_batch_1..5.bin concatenated (train != 0) or dir/test_batch.bin. 0 / -1. */
GPUDL_API int gdl_cifar10_load_dir(const char *dir, int train, uint8_t **images, uint8_t **labels,
                                   int64_t *n);

/* One tensor of a safetensors file; its bytes are data[begin, end) of the file. */
typedef struct gdl_st_entry {
    char name[GDL_ST_NAME_MAX];   /* NUL-terminated UTF-8 */
    char dtype[8];                /* "F32", "F16", "BF16", "I64", "U8", "BOOL", ... */
    int ndim;                     /* 0 (a scalar) .. 8 */
    int64_t shape[GDL_ST_MAX_DIMS];
    uint64_t begin, end;          /* byte range in the data buffer */
} gdl_st_entry;

/* A parsed safetensors file. Tensor bytes are little-endian, C order. */
typedef struct gdl_st_file {
    int n;                        /* number of tensors */
    gdl_st_entry *entries;        /* in header order */
    int n_meta;                   /* number of __metadata__ pairs */
    char **meta_keys, **meta_vals;/* NUL-terminated UTF-8 strings */
    const unsigned char *data;    /* the data buffer: data_len bytes */
    uint64_t data_len;
    unsigned char *owned;         /* private: the file buffer (gdl_st_read) or NULL */
} gdl_st_file;

/* One tensor to write: the bytes are read in host order, written little-endian. */
typedef struct gdl_st_tensor {
    const char *name;             /* unique, valid UTF-8, < 256 bytes, not "__metadata__" */
    const char *dtype;            /* a name gdl_st_dtype_size() knows */
    int ndim;                     /* 0..8 */
    const int64_t *shape;         /* ndim dims >= 0 (may be NULL when ndim == 0) */
    const void *data;             /* dtype size * prod(shape) bytes (may be NULL when 0) */
} gdl_st_tensor;

/* Bytes per element of a safetensors dtype name ("F32" -> 4), 0 if unknown. */
GPUDL_API size_t gdl_st_dtype_size(const char *dtype);
/* Read and validate a whole .safetensors file. 0 / -1; *out untouched on failure. */
GPUDL_API int gdl_st_read(const char *path, gdl_st_file *out);
/* Validate buf[0, len) as safetensors; out->data points INTO buf (keep it alive). 0 / -1. */
GPUDL_API int gdl_st_parse(const unsigned char *buf, uint64_t len, gdl_st_file *out, const char *what);
/* Release what gdl_st_read / gdl_st_parse allocated and zero the struct (NULL-safe). */
GPUDL_API void gdl_st_free(gdl_st_file *f);
/* The entry called name, or NULL. */
GPUDL_API const gdl_st_entry *gdl_st_find(const gdl_st_file *f, const char *name);
/* Write tensors in the given order + metadata atomically (path.tmp.*, fsync, rename); path kept on failure.
   Temporaries left by saves that were killed (their process is gone) are removed first. 0 / -1. */
GPUDL_API int gdl_st_write(const char *path, int n, const gdl_st_tensor *tensors, int n_meta,
                           const char *const *meta_keys, const char *const *meta_vals);

