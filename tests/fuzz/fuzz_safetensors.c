/* fuzz_safetensors.c — libFuzzer harness for gdl_st_parse (in memory) and
   gdl_st_read (from a file): both agree, and an accepted file's entries lie
   inside its data buffer with sizes that match their dtypes and shapes. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static fz_file f;
    static int init;
    gdl_st_file a, b;
    int ra, rb, i, d;
    if (!init) {
        f = fz_file_new();
        init = 1;
    }
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    ra = gdl_st_parse(data, n, &a, "fuzz input");
    fz_file_set(&f, data, n);
    rb = gdl_st_read(f.path, &b);
    if (ra != rb) abort();
    if (ra == 0) {
        if (a.n != b.n || a.n_meta != b.n_meta || a.data_len != b.data_len) abort();
        for (i = 0; i < a.n; i++) {
            const gdl_st_entry *e = &a.entries[i];
            uint64_t elems = 1;
            size_t es = gdl_st_dtype_size(e->dtype);
            if (es == 0 || e->ndim < 0 || e->ndim > GDL_ST_MAX_DIMS) abort();
            for (d = 0; d < e->ndim; d++) {
                if (e->shape[d] < 0) abort();
                elems *= (uint64_t)e->shape[d];
            }
            if (e->begin > e->end || e->end > a.data_len || e->end - e->begin != elems * es) abort();
            if (gdl_st_find(&a, e->name) == NULL) abort();
            if (strcmp(e->name, b.entries[i].name) || e->begin != b.entries[i].begin) abort();
            if (e->end > e->begin && a.data[e->end - 1] != b.data[e->end - 1]) abort();
        }
        for (i = 0; i < a.n_meta; i++)
            if (strcmp(a.meta_keys[i], b.meta_keys[i]) || strcmp(a.meta_vals[i], b.meta_vals[i])) abort();
    } else if (!gdl_last_error()[0]) {
        abort();
    }
    gdl_st_free(&a);
    gdl_st_free(&b);
    return 0;
}
