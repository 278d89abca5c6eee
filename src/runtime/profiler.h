/* ---------------------------------------------------------------------------
   src/runtime/profiler.h   Spans: an op's opens in gdl__be and closes in gdl__finish
   (an op that asks for a backend but never finishes — a factory, gdl_free, a
   view — leaves its span open until the next one replaces it, uncounted).
   Explicit spans (backward functions, gdl_step, copies, loader waits) cover
   everything inside them. Each closed span is a record; gdl_profile_end
   reads the GPU's events and sums the records per (name, device). The
   clocks are here too: gdl_now (the wall clock) and the profiler's own.
   ------------------------------------------------------------------------- */
typedef struct gdl__prof_rec {
    const char *name;
    gdl_device dev;
    double t0, t1;          /* host seconds (gdl__prof_clock) */
    void *e0, *e1;          /* GPU events; NULL on the CPU */
    double gpu_t0, gpu_ms;  /* from the device's first event, and the duration (ms) */
    int64_t launches;       /* -1: not counted */
    int gpu;                /* timed on the GPU */
} gdl__prof_rec;

static struct {
    int ended;              /* rows hold a finished profile */
    double begin;           /* gdl__prof_clock at gdl_profile_begin */
    gdl__prof_rec *rec;
    size_t n, cap;
    gdl__prof_rec cur;      /* the open span (cur.name != NULL) */
    const gdl_backend *cur_be;
    int explicit_;          /* the open span is explicit: ops inside it belong to it */
    void *base[GDL__MAX_GPUS];     /* each device's first event, the origin of its GPU times */
    const gdl_backend *base_be[GDL__MAX_GPUS];
    double base_t[GDL__MAX_GPUS];  /* host time when it was recorded */
    gdl_profile_row *rows;
    int nrows;
    char bw_names[GDL_OP_COUNT][48];   /* "gdl_<op> backward" */
} gdl__prof;

/* The wall clock in seconds (gdl_now: gdl_fit's times, timeouts, the profiler's fallback). */
GPUDL_API double gdl_now(void) { return gdl__os_wall_seconds(); }

/* The profiler's host clock in seconds: monotonic with nanoseconds where the platform offers it
   (gdl__os_monotonic_seconds), else gdl_now (microseconds). */
static double gdl__prof_clock(void) {
    double t = gdl__os_monotonic_seconds();
    return t >= 0 ? t : gdl_now();
}

static void gdl__prof_drop(gdl__prof_rec *r, const gdl_backend *be) {
    if (be && be->rt.event_destroy) {
        be->rt.event_destroy(r->e0);
        be->rt.event_destroy(r->e1);
    }
    r->e0 = r->e1 = NULL;
}

static void gdl__prof_start(const char *name, gdl_device d, const gdl_backend *be) {
    gdl__prof_rec *c = &gdl__prof.cur;
    if (c->name) gdl__prof_drop(c, gdl__prof.cur_be); /* an open span that never closed */
    memset(c, 0, sizeof *c);
    c->name = name;
    c->dev = d;
    c->launches = be->rt.launch_count();
    gdl__prof.cur_be = be;
    if (d.type != GDL_DEVICE_CPU && d.index >= 0 && d.index < GDL__MAX_GPUS) { /* the CPU: the host clock */
        if (!gdl__prof.base[d.index]) {
            gdl__prof.base[d.index] = be->rt.timing_event();
            gdl__prof.base_be[d.index] = be;
            gdl__prof.base_t[d.index] = gdl__prof_clock();
        }
        if (gdl__prof.base[d.index]) c->e0 = be->rt.timing_event(); /* NULL on failure: host time only */
    }
    c->t0 = gdl__prof_clock();
}

static void gdl__prof_stop(void) {
    gdl__prof_rec *c = &gdl__prof.cur;
    const gdl_backend *be = gdl__prof.cur_be;
    c->t1 = gdl__prof_clock();
    if (c->e0) c->e1 = be->rt.timing_event();
    if (c->launches >= 0) c->launches = be->rt.launch_count() - c->launches;
    if (gdl__prof.n == gdl__prof.cap) {
        size_t cap = gdl__prof.cap ? 2 * gdl__prof.cap : 1024;
        gdl__prof_rec *r = (gdl__prof_rec *)GPUDL_REALLOC(gdl__prof.rec, cap * sizeof *r);
        if (!r) { /* out of memory: this call goes uncounted rather than failing the op */
            gdl__prof_drop(c, be);
            c->name = NULL;
            return;
        }
        gdl__prof.rec = r;
        gdl__prof.cap = cap;
    }
    gdl__prof.rec[gdl__prof.n++] = *c;
    c->name = NULL;
}

static void gdl__prof_open(const char *op, gdl_device d, const gdl_backend *be) {
    const char *cur = gdl__prof.cur.name;
    if (gdl__prof.explicit_ || (cur && (cur == op || strcmp(cur, op) == 0))) return; /* inside a span */
    gdl__prof_start(op, d, be);
}
/* gdl__finish: the op named op returns its result */
static void gdl__prof_close(const char *op) {
    const char *cur = gdl__prof.cur.name;
    if (!gdl__prof.explicit_ && cur && (cur == op || strcmp(cur, op) == 0)) gdl__prof_stop();
}
/* an explicit span around work that is not one op; 1 if it opened one (pass it to _pop) */
static int gdl__prof_push(const char *name, gdl_device d) {
    const gdl_backend *be;
    if (!gdl__prof_on || gdl__prof.explicit_) return 0;
    if (!(be = gdl__be_lookup(name, d))) return 0;
    gdl__prof_start(name, d, be);
    gdl__prof.explicit_ = 1;
    return 1;
}
static void gdl__prof_pop(int opened, int ok) {
    if (!opened) return;
    gdl__prof.explicit_ = 0;
    if (!gdl__prof_on) return;
    if (ok) {
        gdl__prof_stop();
    } else {
        gdl__prof_drop(&gdl__prof.cur, gdl__prof.cur_be);
        gdl__prof.cur.name = NULL;
    }
}

static void gdl__prof_free(void) {
    size_t i;
    int d;
    for (i = 0; i < gdl__prof.n; i++) {
        gdl__prof_rec *r = &gdl__prof.rec[i];
        if (r->e0 || r->e1) {
            const gdl_backend *be = gdl__prof.base_be[r->dev.index];
            gdl__prof_drop(r, be);
        }
    }
    for (d = 0; d < GDL__MAX_GPUS; d++) {
        if (gdl__prof.base[d]) gdl__prof.base_be[d]->rt.event_destroy(gdl__prof.base[d]);
        gdl__prof.base[d] = NULL;
    }
    GPUDL_FREE(gdl__prof.rec);
    GPUDL_FREE(gdl__prof.rows);
    gdl__prof.rec = NULL;
    gdl__prof.rows = NULL;
    gdl__prof.n = gdl__prof.cap = 0;
    gdl__prof.nrows = 0;
    gdl__prof.ended = 0;
}

GPUDL_API int gdl_profile_begin(void) {
    if (gdl__prof_on) {
        gdl__set_error("gdl_profile_begin: the profiler is already running (call gdl_profile_end first)");
        return -1;
    }
    gdl__prof_free();
    gdl__prof.cur.name = NULL;
    gdl__prof.explicit_ = 0;
    gdl__prof.begin = gdl__prof_clock();
    gdl__prof_on = 1;
    return 0;
}

static int gdl__prof_row_cmp(const void *a, const void *b) {
    const gdl_profile_row *x = (const gdl_profile_row *)a, *y = (const gdl_profile_row *)b;
    if (x->total_ms != y->total_ms) return x->total_ms > y->total_ms ? -1 : 1;
    return strcmp(x->name, y->name);
}

GPUDL_API int gdl_profile_end(void) {
    size_t i;
    int k, rc = 0;
    double all = 0;
    if (!gdl__prof_on) {
        gdl__set_error("gdl_profile_end: the profiler is not running (call gdl_profile_begin first)");
        return -1;
    }
    gdl__prof_on = 0;
    if (gdl__prof.cur.name) gdl__prof_drop(&gdl__prof.cur, gdl__prof.cur_be);
    gdl__prof.cur.name = NULL;
    gdl__prof.explicit_ = 0;
    /* the GPU times: the first read waits for the device, the rest are done by then */
    for (i = 0; i < gdl__prof.n; i++) {
        gdl__prof_rec *r = &gdl__prof.rec[i];
        const gdl_backend *be;
        double ms = 0, at = 0;
        if (!r->e0) continue;
        be = gdl__prof.base_be[r->dev.index];
        if (!r->e1 || be->rt.event_elapsed(r->e0, r->e1, &ms) < 0 ||
            be->rt.event_elapsed(gdl__prof.base[r->dev.index], r->e0, &at) < 0) {
            rc = -1;
            break;
        }
        r->gpu_ms = ms < 0 ? 0 : ms;
        r->gpu = 1;
        r->gpu_t0 = gdl__prof.base_t[r->dev.index] - gdl__prof.begin + at / 1e3;
        gdl__prof_drop(r, be);
    }
    if (rc < 0) {
        char why[sizeof gdl__err];
        memcpy(why, gdl__err, sizeof why);
        gdl__prof_free();
        gdl__set_error("gdl_profile_end: cannot read the GPU's timings: %s", why);
        return -1;
    }
    /* one row per (name, device) */
    gdl__prof.rows = (gdl_profile_row *)GPUDL_MALLOC((gdl__prof.n ? gdl__prof.n : 1) * sizeof(gdl_profile_row));
    if (!gdl__prof.rows) {
        gdl__prof_free();
        gdl__set_error("gdl_profile_end: out of memory for %lu records", (unsigned long)gdl__prof.n);
        return -1;
    }
    for (i = 0; i < gdl__prof.n; i++) {
        const gdl__prof_rec *r = &gdl__prof.rec[i];
        double ms = r->gpu ? r->gpu_ms : (r->t1 - r->t0) * 1e3;
        gdl_profile_row *w = NULL;
        if (ms < 0) ms = 0; /* the host clock stepped back */
        for (k = 0; k < gdl__prof.nrows; k++)
            if (gdl_device_equal(gdl__prof.rows[k].device, r->dev) && strcmp(gdl__prof.rows[k].name, r->name) == 0) {
                w = &gdl__prof.rows[k];
                break;
            }
        if (!w) {
            w = &gdl__prof.rows[gdl__prof.nrows++];
            memset(w, 0, sizeof *w);
            w->name = r->name;
            w->device = r->dev;
            w->launches = r->launches < 0 ? -1 : 0;
        }
        w->calls++;
        w->total_ms += ms;
        if (ms > w->max_ms) w->max_ms = ms;
        if (w->launches >= 0 && r->launches >= 0) w->launches += r->launches;
        all += ms;
    }
    for (k = 0; k < gdl__prof.nrows; k++) {
        gdl_profile_row *w = &gdl__prof.rows[k];
        w->avg_ms = w->total_ms / (double)w->calls;
        w->percent = all > 0 ? 100.0 * w->total_ms / all : 0;
    }
    qsort(gdl__prof.rows, (size_t)gdl__prof.nrows, sizeof(gdl_profile_row), gdl__prof_row_cmp);
    gdl__prof.ended = 1;
    return 0;
}

/* The readers of a profile: their argument is there, and so is a finished profile. 0 / -1 + error. */
static int gdl__prof_ready(const char *fn, const char *arg, const void *p) {
    if (!p) {
        gdl__null_arg(fn, arg);
        return -1;
    }
    if (!gdl__prof.ended) {
        gdl__set_error("%s: no profile has ended yet (gdl_profile_begin ... gdl_profile_end)", fn);
        return -1;
    }
    return 0;
}

GPUDL_API int gdl_profile_rows(const gdl_profile_row **rows) {
    if (gdl__prof_ready("gdl_profile_rows", "rows", rows) < 0) return -1;
    *rows = gdl__prof.rows;
    return gdl__prof.nrows;
}

GPUDL_API int gdl_profile_print(FILE *f) {
    const gdl_profile_row *r;
    double all = 0;
    int n, k;
    if (gdl__prof_ready("gdl_profile_print", "f", f) < 0) return -1;
    n = gdl_profile_rows(&r);
    for (k = 0; k < n; k++) all += r[k].total_ms;
    fprintf(f, "%-28s %-7s %8s %12s %12s %12s %7s %9s\n", "Name", "Device", "Calls", "Total (ms)", "Avg (ms)",
            "Max (ms)", "%", "Launches");
    for (k = 0; k < n; k++) {
        char l[24];
        if (r[k].launches < 0) snprintf(l, sizeof l, "-");
        else snprintf(l, sizeof l, "%lld", (long long)r[k].launches);
        fprintf(f, "%-28s %-7s %8lld %12.3f %12.4f %12.4f %6.2f%% %9s\n", r[k].name, gdl_device_str(r[k].device),
                (long long)r[k].calls, r[k].total_ms, r[k].avg_ms, r[k].max_ms, r[k].percent, l);
    }
    fprintf(f, "%-28s %-7s %8s %12.3f\n", "Total", "", "", all);
    return ferror(f) ? -1 : 0;
}

GPUDL_API int gdl_profile_trace(const char *path) {
    FILE *f;
    size_t i;
    if (gdl__prof_ready("gdl_profile_trace", "path", path) < 0) return -1;
    if (!(f = fopen(path, "w"))) {
        gdl__set_error("gdl_profile_trace: cannot write %s", path);
        return -1;
    }
    /* names are gpudl's own ("gdl_x backward"): nothing to escape in JSON */
    fprintf(f, "{\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"host\"}}");
    for (i = 0; i < gdl__prof.n; i++) {
        const gdl__prof_rec *r = &gdl__prof.rec[i];
        fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":1}",
                r->name, gdl_device_str(r->dev), (r->t0 - gdl__prof.begin) * 1e6, (r->t1 - r->t0) * 1e6);
        if (r->gpu)
            fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":%d}",
                    r->name, gdl_device_str(r->dev), r->gpu_t0 * 1e6, r->gpu_ms * 1e3, 2 + r->dev.index);
    }
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\"}\n");
    if (ferror(f) | fclose(f)) {
        gdl__set_error("gdl_profile_trace: write error on %s", path);
        return -1;
    }
    return 0;
}

