/* monitor_cases.h — the checks of gdl_memory_stats / gdl_memory_summary and of
   the profiler that run on every device: tests/test_monitor.c runs them on the
   CPU, tests/test_cuda.c on the (emulated) GPU. Include after gpudl.h and
   harness.h. */
#ifndef GPUDL_MONITOR_CASES_H
#define GPUDL_MONITOR_CASES_H
#include <stdlib.h>
#include <string.h>

/* The number after `label` on its line of the summary, NaN if absent. */
static double mc_summary_value(const char *sum, const char *label, int column) {
    const char *p = strstr(sum, label);
    double a = NAN, b = NAN;
    if (!p) return NAN;
    p += strlen(label);
    if (sscanf(p, "%lf %lf", &a, &b) < 1) return NAN;
    return column == 0 ? a : b;
}

/* Known allocations on dev: 1000 then 3000 floats, both freed, 1000 again. granule: the allocator's
   rounding (CUDA 512, CPU 1); cached: freed blocks stay reserved and serve the next request (the
   caller has emptied the cache). */
static enum harness_result mc_memory_pattern(gdl_device dev, size_t granule, int cached) {
    gdl_memory_status b, s;
    size_t A = (4000 + granule - 1) / granule * granule, B = (12000 + granule - 1) / granule * granule;
    gdl_tensor *x, *y, *z;
    const char *sum;
    ASSERT_EQ(0, gdl_memory_reset_peak(dev));
    ASSERT_EQ(0, gdl_memory_stats(dev, &b));
    ASSERT_EQ((long long)b.allocated, (long long)b.peak_allocated);
    ASSERT_NOT_NULL(x = gdl_empty(GDL_DIMS(1000), GDL_F32, dev));
    ASSERT_NOT_NULL(y = gdl_empty(GDL_DIMS(3000), GDL_F32, dev));
    ASSERT_EQ(0, gdl_memory_stats(dev, &s));
    ASSERT_EQ((long long)(b.allocated + A + B), (long long)s.allocated);
    ASSERT_EQ((long long)(b.allocated + A + B), (long long)s.peak_allocated);
    ASSERT_EQ((long long)(b.reserved + A + B), (long long)s.reserved);
    ASSERT_EQ(b.requests + 2, s.requests);
    ASSERT_EQ(b.device_mallocs + 2, s.device_mallocs);
    ASSERT_EQ(b.cache_hits, s.cache_hits);
    gdl_free(x);
    gdl_free(y);
    ASSERT_EQ(0, gdl_memory_stats(dev, &s));
    ASSERT_EQ((long long)b.allocated, (long long)s.allocated);
    ASSERT_EQ((long long)(b.allocated + A + B), (long long)s.peak_allocated); /* the peak stays */
    ASSERT_EQ((long long)(b.reserved + (cached ? A + B : 0)), (long long)s.reserved);
    ASSERT_EQ(b.frees + 2, s.frees);
    ASSERT_NOT_NULL(z = gdl_empty(GDL_DIMS(1000), GDL_F32, dev));
    ASSERT_EQ(0, gdl_memory_stats(dev, &s));
    ASSERT_EQ(b.requests + 3, s.requests);
    ASSERT_EQ(b.cache_hits + (cached ? 1 : 0), s.cache_hits);         /* the freed block of x */
    ASSERT_EQ(b.device_mallocs + (cached ? 2 : 3), s.device_mallocs);
    ASSERT_EQ((long long)(b.allocated + A), (long long)s.allocated);
    ASSERT_EQ(0, gdl_memory_reset_peak(dev));
    ASSERT_EQ(0, gdl_memory_stats(dev, &s));
    ASSERT_EQ((long long)(b.allocated + A), (long long)s.peak_allocated);
    ASSERT_EQ((long long)s.reserved, (long long)s.peak_reserved);
    /* the table shows these figures */
    ASSERT_NOT_NULL(sum = gdl_memory_summary(dev));
    ASSERT_CONTAINS(sum, "gpudl memory summary, ");
    ASSERT_CONTAINS(sum, gdl_device_str(dev));
    ASSERT_IN_RANGE((double)s.allocated, mc_summary_value(sum, "allocated (bytes)", 0), 0);
    ASSERT_IN_RANGE((double)s.peak_allocated, mc_summary_value(sum, "allocated (bytes)", 1), 0);
    ASSERT_IN_RANGE((double)s.reserved, mc_summary_value(sum, "reserved (bytes)", 0), 0);
    ASSERT_IN_RANGE((double)s.requests, mc_summary_value(sum, "allocation requests", 0), 0);
    ASSERT_IN_RANGE((double)s.cache_hits, mc_summary_value(sum, "cache hits", 0), 0);
    ASSERT_IN_RANGE((double)s.frees, mc_summary_value(sum, "frees", 0), 0);
    ASSERT_IN_RANGE((double)s.device_mallocs,
                    mc_summary_value(sum, dev.type == GDL_DEVICE_CPU ? "mallocs" : "cudaMalloc calls", 0), 0);
    gdl_free(z);
    /* the step arena: a temporary of 1000 floats is in it until the reset */
    gdl_arena_reset();
    ASSERT_EQ(0, gdl_memory_stats(dev, &b));
    ASSERT_NOT_NULL(x = gdl_zeros(GDL_DIMS(1000), GDL_F32, dev));
    ASSERT_NOT_NULL(gdl_add_scalar(x, 1));
    ASSERT_EQ(0, gdl_memory_stats(dev, &s));
    ASSERT_GE(s.arena_used, b.arena_used + 4000);
    ASSERT_GE(s.arena_reserved, s.arena_used);
    gdl_free(x);
    gdl_arena_reset();
    PASS();
}

static const gdl_profile_row *mc_row(const gdl_profile_row *r, int n, const char *name) {
    int k;
    for (k = 0; k < n; k++)
        if (strcmp(r[k].name, name) == 0) return &r[k];
    return NULL;
}

/* Three steps of linear -> relu -> sum -> backward, one optimizer step, one clone: the rows and their
   calls exactly; times that add up. kernels: the launches of one gdl_relu (-1 on the CPU). */
static enum harness_result mc_profile_sequence(gdl_device dev, int64_t relu_launches, const char *trace) {
    static const char *const names[] = {"gdl_linear", "gdl_relu", "gdl_sum", "gdl_linear backward",
                                        "gdl_relu backward", "gdl_sum backward"};
    gdl_tensor *W = gdl_randn(GDL_DIMS(3, 4), dev), *x = gdl_randn(GDL_DIMS(8, 4), dev), *c;
    gdl_optimizer *opt = gdl_sgd_new(0.1, 0, 0, 0, 0);
    const gdl_profile_row *r;
    double total = 0, pct = 0;
    int n, k, step;
    int64_t calls = 0;
    ASSERT(W && x && opt);
    ASSERT_EQ(0, gdl_set_requires_grad(W, 1));
    ASSERT_EQ(0, gdl_optim_add_params(opt, &W, 1, -1, -1));
    ASSERT_EQ(0, gdl_profile_begin());
    for (step = 0; step < 3; step++) {
        gdl_tensor *l;
        gdl_arena_reset();
        ASSERT_EQ(0, gdl_zero_grad_tensor(W));
        ASSERT_NOT_NULL(l = gdl_sum(gdl_relu(gdl_linear(x, W, NULL))));
        ASSERT_EQ(0, gdl_backward(l));
    }
    ASSERT_EQ(0, gdl_step(opt));
    ASSERT_NOT_NULL(c = gdl_clone(W));
    ASSERT_EQ(0, gdl_profile_end());
    n = gdl_profile_rows(&r);
    if (n != 8) {
        gdl_profile_print(stderr);
        ASSERT_EQ(8, n);
    }
    for (k = 0; k < 6; k++) {
        const gdl_profile_row *w = mc_row(r, n, names[k]);
        ASSERTm(names[k], w != NULL);
        ASSERT_EQm(names[k], 3, w->calls);
    }
    ASSERT_EQ(1, mc_row(r, n, "gdl_step")->calls);
    ASSERT_EQ(1, mc_row(r, n, "gdl_copy_")->calls);
    ASSERT_EQ(relu_launches < 0 ? -1 : 3 * relu_launches, mc_row(r, n, "gdl_relu")->launches);
    for (k = 0; k < n; k++) {
        ASSERT(gdl_device_equal(r[k].device, dev));
        ASSERT_GE(r[k].total_ms, 0);
        ASSERT_GE(r[k].max_ms, r[k].avg_ms);
        ASSERT_LE(r[k].max_ms, r[k].total_ms);
        ASSERT_IN_RANGE(r[k].total_ms, r[k].avg_ms * (double)r[k].calls, 1e-9);
        if (k) ASSERT_GE(r[k - 1].total_ms, r[k].total_ms); /* sorted, longest first */
        total += r[k].total_ms;
        pct += r[k].percent;
        calls += r[k].calls;
    }
    if (total > 0) ASSERT_IN_RANGE(100.0, pct, 1e-6);
    ASSERT_EQ(0, gdl_profile_print(stdout));
    /* the Chrome trace: valid JSON with one host event per call, and on a GPU as many on its row */
    ASSERT_EQ(0, gdl_profile_trace(trace));
    if (system("python3 -c '' 2>/dev/null") == 0) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "python3 -c 'import json,sys; e=[v for v in json.load(open(sys.argv[1]))[\"traceEvents\"] "
                 "if v[\"ph\"]==\"X\"]; assert all(v[\"dur\"]>=0 and v[\"ts\"]>=0 for v in e); "
                 "h=[v for v in e if v[\"tid\"]==1]; g=[v for v in e if v[\"tid\"]==%d]; "
                 "sys.exit(0 if len(h)==%lld and len(g)==%lld and len(e)==len(h)+len(g) else 1)' %s",
                 2 + dev.index, (long long)calls, dev.type == GDL_DEVICE_CPU ? 0ll : (long long)calls, trace);
        ASSERT_EQm("the trace is not the JSON expected", 0, system(cmd));
    }
    remove(trace);
    gdl_free(c);
    gdl_optim_free(opt);
    gdl_free(W);
    gdl_free(x);
    gdl_arena_reset();
    PASS();
}

static enum harness_result mc_profile_errors(void) {
    const gdl_profile_row *r;
    ASSERT_EQ(-1, gdl_profile_end());
    ASSERT_STR_EQ("gdl_profile_end: the profiler is not running (call gdl_profile_begin first)", gdl_last_error());
    ASSERT_EQ(0, gdl_profile_begin());
    ASSERT_EQ(-1, gdl_profile_begin());
    ASSERT_STR_EQ("gdl_profile_begin: the profiler is already running (call gdl_profile_end first)",
                  gdl_last_error());
    ASSERT_EQ(0, gdl_profile_end());
    ASSERT_EQ(0, gdl_profile_rows(&r)); /* nothing ran */
    ASSERT_EQ(-1, gdl_profile_rows(NULL));
    ASSERT_EQ(-1, gdl_profile_print(NULL));
    ASSERT_CONTAINS(gdl_last_error(), "gdl_profile_print: f is NULL");
    ASSERT_EQ(-1, gdl_profile_trace(NULL));
    ASSERT_EQ(-1, gdl_profile_trace("/nonexistent-dir/trace.json"));
    ASSERT_STR_EQ("gdl_profile_trace: cannot write /nonexistent-dir/trace.json", gdl_last_error());
    PASS();
}
#endif
