/* ---------------------------------------------------------------------------
   src/runtime/devices.h — devices, the GPU registry, and the backend a
   device selects (gdl__be).
   ------------------------------------------------------------------------- */

GPUDL_API gdl_device gdl_cpu(void) {
    gdl_device d;
    d.type = GDL_DEVICE_CPU;
    d.index = 0;
    return d;
}
GPUDL_API gdl_device gdl_cuda(int index) {
    gdl_device d;
    d.type = GDL_DEVICE_CUDA;
    d.index = index;
    return d;
}
GPUDL_API int gdl_device_equal(gdl_device a, gdl_device b) {
    return a.type == b.type && (a.type == GDL_DEVICE_CPU || a.index == b.index);
}
GPUDL_API const char *gdl_device_str(gdl_device d) {
    static const char *const names[8] = {"cuda:0", "cuda:1", "cuda:2", "cuda:3",
                                         "cuda:4", "cuda:5", "cuda:6", "cuda:7"};
    if (d.type == GDL_DEVICE_CPU) return "cpu";
    if (d.type == GDL_DEVICE_CUDA) return (d.index >= 0 && d.index < 8) ? names[d.index] : "cuda:?";
    return "invalid-device";
}
/* The GPU backends of this build: a table of what the front end asks of a
   device runtime, the one place that names GPUDL_CUDA. NULL: not built in
   (the CPU backend is always there). */
typedef struct gdl__gpu_kind {
    int (*count)(void);
    int (*set_device)(int index);
    int (*name)(int index, char *buf, size_t len);
    void (*release_cache)(void);
    const gdl_backend *(*backend)(void);
} gdl__gpu_kind;
#ifdef GPUDL_CUDA
static int gdl__cuda_name(int index, char *buf, size_t len) {
    return gdl_cuda_device_info(index, buf, len, NULL, NULL, NULL, NULL, NULL, NULL);
}
static const gdl__gpu_kind gdl__cuda_kind = {gdl_cuda_runtime_device_count, gdl_cuda_set_device, gdl__cuda_name,
                                             gdl_cuda_release_cache, gdl_cuda_backend};
static const gdl__gpu_kind *const gdl__cuda_registry = &gdl__cuda_kind;
#else
static const gdl__gpu_kind *const gdl__cuda_registry = NULL;
#endif

GPUDL_API int gdl_cuda_device_count(void) { return gdl__cuda_registry ? gdl__cuda_registry->count() : 0; }
GPUDL_API int gdl_cuda_is_available(void) { return gdl_cuda_device_count() > 0; }
GPUDL_API gdl_device gdl_default_device(void) {
    static int told; /* once per process: a notice, not a log */
    if (!gdl__cuda_registry) return gdl_cpu();
    if (gdl_cuda_is_available()) return gdl_cuda(0);
    if (!told) {
        told = 1;
        if (!gdl__env_flag("GPUDL_QUIET", 0))
            fprintf(stderr, "gpudl: no CUDA device found (no GPU, or no driver): using the CPU "
                            "(GPUDL_QUIET=1 hides this notice)\n");
    }
    return gdl_cpu();
}
GPUDL_API const char *gdl_device_name(gdl_device d) {
    static GDL__TLS char name[256];
    if (d.type == GDL_DEVICE_CUDA && gdl__cuda_registry)
        return gdl__cuda_registry->name(d.index, name, sizeof name) < 0 ? "unknown CUDA device" : name;
    return d.type == GDL_DEVICE_CPU ? "CPU" : "unavailable";
}

static const gdl_backend *gdl__cpu_backend(void);

#define GDL__MAX_GPUS 16
/* The profiler's switch (its state and code: src/runtime/profiler.h). */
static int gdl__prof_on;
static void gdl__prof_open(const char *op, gdl_device d, const gdl_backend *be);

static GDL__TLS const char *gdl__be_op = "";
GPUDL_API const char *gdl__backend_op(void) { return gdl__be_op; }

static const gdl_backend *gdl__be_lookup(const char *op, gdl_device d);
/* The backend of a device, made current. NULL + error if unusable. Every op asks here once its
   arguments are checked, so this is where the profiler starts timing it (gdl__finish stops), and
   where backends learn which op their error messages are about (gdl__backend_op). */
static const gdl_backend *gdl__be(const char *op, gdl_device d) {
    const gdl_backend *be;
    gdl__be_op = op;
    be = gdl__be_lookup(op, d);
    if (gdl__prof_on && be) gdl__prof_open(op, d, be);
    return be;
}
static const gdl_backend *gdl__be_lookup(const char *op, gdl_device d) {
    if (d.type == GDL_DEVICE_CPU) return gdl__cpu_backend();
    if (d.type == GDL_DEVICE_CUDA && gdl__cuda_registry) {
        static GDL__TLS int current = -1; /* CUDA's current device is per host thread */
        if (d.index < 0 || d.index >= gdl_cuda_device_count()) {
            gdl__set_error("%s: device %s is not available (%d CUDA devices)", op, gdl_device_str(d),
                           gdl_cuda_device_count());
            return NULL;
        }
        if (d.index != current) {
            if (gdl__cuda_registry->set_device(d.index) < 0) return NULL;
            current = d.index;
        }
        return gdl__cuda_registry->backend();
    }
    gdl__set_error("%s: device %s is not available in this build (built without GPUDL_CUDA)", op,
                   gdl_device_str(d));
    return NULL;
}

