/* ---------------------------------------------------------------------------
   src/runtime/monitor.h   The allocators' counters (gdl_memory_stats), then NVML.
   ------------------------------------------------------------------------- */
GPUDL_API int gdl_memory_stats(gdl_device dev, gdl_memory_status *s) {
    const gdl_backend *be;
    if (!s) {
        gdl__null_arg("gdl_memory_stats", "s");
        return -1;
    }
    if (!(be = gdl__be("gdl_memory_stats", dev)) || be->rt.memory_stats(dev.index, s) < 0) return -1;
    if (dev.type == GDL_DEVICE_CPU) {
        s->arena_used = gdl__host_arena.used + gdl__hdr_arena[gdl__arena_gen & 1].used;
        s->arena_reserved = gdl__host_arena.reserved + gdl__hdr_arena[0].reserved + gdl__hdr_arena[1].reserved;
    } else { /* gdl__be has checked the index */
        s->arena_used = gdl__gpu_arena[dev.index].used;
        s->arena_reserved = gdl__gpu_arena[dev.index].reserved;
    }
    return 0;
}

GPUDL_API int gdl_memory_reset_peak(gdl_device dev) {
    const gdl_backend *be = gdl__be("gdl_memory_reset_peak", dev);
    return be ? be->rt.memory_reset_peak(dev.index) : -1;
}

GPUDL_API const char *gdl_memory_summary(gdl_device dev) {
    static GDL__TLS char buf[2048];
    gdl_memory_status m;
    size_t k = 0;
    const char *rule = "------------------------------------------------------------\n";
    if (gdl_memory_stats(dev, &m) < 0) return NULL;
#define GDL__SUM(...) (k += (size_t)snprintf(buf + k, k < sizeof buf ? sizeof buf - k : 0, __VA_ARGS__))
    GDL__SUM("%s", rule);
    GDL__SUM("gpudl memory summary, %s (%s)\n", gdl_device_str(dev), gdl_device_name(dev));
    GDL__SUM("%s", rule);
    GDL__SUM("%-28s %15s %15s\n", "", "current", "peak");
    GDL__SUM("%-28s %15.0f %15.0f\n", "allocated (bytes)", (double)m.allocated, (double)m.peak_allocated);
    GDL__SUM("%-28s %15.0f %15.0f\n", "reserved (bytes)", (double)m.reserved, (double)m.peak_reserved);
    GDL__SUM("%-28s %15.0f %15.0f\n", "step arena used / reserved", (double)m.arena_used,
             (double)m.arena_reserved);
    GDL__SUM("%s", rule);
    GDL__SUM("%-28s %15lld\n", "allocation requests", (long long)m.requests);
    GDL__SUM("%-28s %15lld\n", "cache hits", (long long)m.cache_hits);
    GDL__SUM("%-28s %15lld\n", dev.type == GDL_DEVICE_CPU ? "mallocs" : "cudaMalloc calls",
             (long long)m.device_mallocs);
    GDL__SUM("%-28s %15lld\n", "frees", (long long)m.frees);
    GDL__SUM("%-28s %15lld\n", "cache releases", (long long)m.cache_releases);
    GDL__SUM("%s", rule);
#undef GDL__SUM
    return buf;
}

/* NVML loaded at run time (gdl__dl_open: dlopen, LoadLibrary). Only the few entry points used are
   declared here, with NVML's documented types (nvmlDevice_t is a pointer;
   nvmlReturn_t an int, 0 is success, 3 "not supported"). */
#if defined(GDL__OS_DL)
typedef struct { unsigned int gpu, memory; } gdl__nvml_util;
typedef struct { unsigned long long total, free, used; } gdl__nvml_mem;
typedef struct gdl__nvml_dev *gdl__nvml_device;
static struct {
    int ok;
    char why[300];
    int (*init)(void);
    int (*count)(unsigned int *);
    int (*handle)(unsigned int, gdl__nvml_device *);
    int (*handle_pci)(const char *, gdl__nvml_device *);
    int (*name)(gdl__nvml_device, char *, unsigned int);
    int (*util)(gdl__nvml_device, gdl__nvml_util *);
    int (*mem)(gdl__nvml_device, gdl__nvml_mem *);
    int (*temp)(gdl__nvml_device, int, unsigned int *);
    int (*power)(gdl__nvml_device, unsigned int *);
    int (*limit)(gdl__nvml_device, unsigned int *);
    int (*clock)(gdl__nvml_device, int, unsigned int *);
    const char *(*errstr)(int);
} gdl__nvml;

/* Loads and initialises NVML, once per process (gdl__nvml_load). */
static void gdl__nvml_load_once(void) {
    {
        /* GPUDL_NVML_LIB: another NVML (tests' fake one), by absolute path only (a relative one would
           depend on the current directory), and never in a setuid/setgid process */
        const char *lib = getenv("GPUDL_NVML_LIB");
        void *h;
        int rc;
        char why[200];
        int ours = lib && lib[0] && !gdl__os_secure_exec();
        if (!ours) lib = GDL__NVML_DEFAULT_LIB;
        if (ours && !gdl__dl_absolute(lib)) {
            snprintf(gdl__nvml.why, sizeof gdl__nvml.why, "NVML not available: GPUDL_NVML_LIB='%.100s' is not an "
                     "absolute path", lib);
        } else if (!(h = gdl__dl_open(lib, why, sizeof why))) {
            snprintf(gdl__nvml.why, sizeof gdl__nvml.why, "NVML not available (%s): no NVIDIA driver here", why);
        } else {
            /* object to function pointer through memcpy: ISO C has no cast between them */
#define GDL__NVML_SYM(field, sym)                                                   \
            do {                                                                    \
                void *p_ = gdl__dl_sym(h, sym);                                     \
                if (!p_) {                                                          \
                    snprintf(gdl__nvml.why, sizeof gdl__nvml.why,                   \
                             "NVML not available: %s has no %s (driver too old?)", lib, sym); \
                    goto nvml_done;                                                 \
                }                                                                   \
                memcpy(&gdl__nvml.field, &p_, sizeof p_);                           \
            } while (0)
            GDL__NVML_SYM(init, "nvmlInit_v2");
            GDL__NVML_SYM(count, "nvmlDeviceGetCount_v2");
            GDL__NVML_SYM(handle, "nvmlDeviceGetHandleByIndex_v2");
            GDL__NVML_SYM(handle_pci, "nvmlDeviceGetHandleByPciBusId_v2");
            GDL__NVML_SYM(name, "nvmlDeviceGetName");
            GDL__NVML_SYM(util, "nvmlDeviceGetUtilizationRates");
            GDL__NVML_SYM(mem, "nvmlDeviceGetMemoryInfo");
            GDL__NVML_SYM(temp, "nvmlDeviceGetTemperature");
            GDL__NVML_SYM(power, "nvmlDeviceGetPowerUsage");
            GDL__NVML_SYM(limit, "nvmlDeviceGetEnforcedPowerLimit");
            GDL__NVML_SYM(clock, "nvmlDeviceGetClockInfo");
            GDL__NVML_SYM(errstr, "nvmlErrorString");
#undef GDL__NVML_SYM
            if ((rc = gdl__nvml.init()) != 0)
                snprintf(gdl__nvml.why, sizeof gdl__nvml.why, "NVML not available: nvmlInit failed: %s",
                         gdl__nvml.errstr(rc));
            else
                gdl__nvml.ok = 1;
        nvml_done:
            if (!gdl__nvml.ok) gdl__dl_close(h); /* kept open while in use: NVML has no clean unload */
        }
    }
}

/* 0 / -1 + error. The first call of any thread loads; the others wait for it (monitors poll from
   threads of their own). */
static int gdl__nvml_load(const char *op) {
#ifdef GDL__OS_THREADS
    static gdl__once_flag once = GDL__ONCE_INIT;
    gdl__once(&once, gdl__nvml_load_once);
#else
    static int tried;
    if (!tried) {
        tried = 1;
        gdl__nvml_load_once();
    }
#endif
    if (!gdl__nvml.ok) gdl__set_error("%s: %s", op, gdl__nvml.why);
    return gdl__nvml.ok ? 0 : -1;
}

GPUDL_API int gdl_gpu_count(void) {
    unsigned int n = 0;
    int rc;
    if (gdl__nvml_load("gdl_gpu_count") < 0) return -1;
    if (gdl_cuda_device_count() > 0) return gdl_cuda_device_count(); /* gdl_gpu_stats maps them to NVML's */
    if ((rc = gdl__nvml.count(&n)) != 0) {
        gdl__set_error("gdl_gpu_count: nvmlDeviceGetCount: %s", gdl__nvml.errstr(rc));
        return -1;
    }
    return (int)n;
}

GPUDL_API int gdl_gpu_stats(int index, gdl_gpu_status *s) {
    static const char fn[] = "gdl_gpu_stats";
    gdl__nvml_device d;
    gdl__nvml_util u;
    gdl__nvml_mem m;
    unsigned int v;
    int rc, n;
    if (!s) {
        gdl__null_arg(fn, "s");
        return -1;
    }
    if ((n = gdl_gpu_count()) < 0) {
        char why[sizeof gdl__err]; /* the message is rewritten from a copy: its buffer is gdl__set_error's */
        memcpy(why, gdl__err, sizeof why);
        gdl__set_error("%s: %s", fn, why + strlen("gdl_gpu_count: "));
        return -1;
    }
    if (gdl_cuda_device_count() > 0) {
        /* CUDA's index: NVML's device with the same PCI bus id (the orders differ under
           CUDA_VISIBLE_DEVICES, or without CUDA_DEVICE_ORDER=PCI_BUS_ID) */
        char bus[64];
        const gdl_backend *be;
        if (index < 0 || index >= n) {
            gdl__set_error("%s: no CUDA device %d (%d available)", fn, index, n);
            return -1;
        }
        if (!(be = gdl__be_lookup(fn, gdl_cuda(index)))) return -1;
        if (be->rt.pci_bus_id(index, bus, (int)sizeof bus) < 0) {
            char why[sizeof gdl__err];
            memcpy(why, gdl__err, sizeof why);
            gdl__set_error("%s: cuda:%d: no PCI bus id to find it by in NVML: %s", fn, index, why);
            return -1;
        }
        if ((rc = gdl__nvml.handle_pci(bus, &d)) != 0) {
            gdl__set_error("%s: cuda:%d (PCI %s): NVML does not list it: %s", fn, index, bus, gdl__nvml.errstr(rc));
            return -1;
        }
    } else if (index < 0 || index >= n) {
        gdl__set_error("%s: no GPU %d (NVML sees %d)", fn, index, n);
        return -1;
    } else if ((rc = gdl__nvml.handle((unsigned)index, &d)) != 0) {
        gdl__set_error("%s: GPU %d: %s", fn, index, gdl__nvml.errstr(rc));
        return -1;
    }
    if ((rc = gdl__nvml.mem(d, &m)) != 0) {
        gdl__set_error("%s: GPU %d: %s", fn, index, gdl__nvml.errstr(rc));
        return -1;
    }
    memset(s, 0, sizeof *s);
    s->memory_used = (size_t)m.used;
    s->memory_total = (size_t)m.total;
    if (gdl__nvml.name(d, s->name, sizeof s->name) != 0) snprintf(s->name, sizeof s->name, "GPU %d", index);
    s->name[sizeof s->name - 1] = 0;
    /* what a GPU does not report (3: not supported) is left unknown, not an error */
    if (gdl__nvml.util(d, &u) == 0) {
        s->utilization = (int)u.gpu;
        s->memory_utilization = (int)u.memory;
    } else {
        s->utilization = s->memory_utilization = -1;
    }
    s->temperature = gdl__nvml.temp(d, 0 /* NVML_TEMPERATURE_GPU */, &v) == 0 ? (int)v : -1;
    s->power = gdl__nvml.power(d, &v) == 0 ? v / 1000.0 : NAN;
    s->power_limit = gdl__nvml.limit(d, &v) == 0 ? v / 1000.0 : NAN;
    s->sm_clock = gdl__nvml.clock(d, 1 /* NVML_CLOCK_SM */, &v) == 0 ? (int)v : -1;
    s->memory_clock = gdl__nvml.clock(d, 2 /* NVML_CLOCK_MEM */, &v) == 0 ? (int)v : -1;
    return 0;
}
#else
GPUDL_API int gdl_gpu_count(void) {
    gdl__set_error("gdl_gpu_count: GPU monitoring is not compiled in: build with -DGPUDL_CUDA or -DGPUDL_NVML");
    return -1;
}
GPUDL_API int gdl_gpu_stats(int index, gdl_gpu_status *s) {
    (void)index;
    (void)s;
    gdl__set_error("gdl_gpu_stats: GPU monitoring is not compiled in: build with -DGPUDL_CUDA or -DGPUDL_NVML");
    return -1;
}
#endif

