/* fuzz_idx.c — libFuzzer harness for gdl_idx_load (plain and gzipped IDX):
   any input either loads with consistent dimensions or fails with a message. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static fz_file f;
    static int init;
    gdl_idx idx;
    if (!init) {
        f = fz_file_new();
        init = 1;
    }
    fz_file_set(&f, data, n);
    memset(&idx, 0x5A, sizeof idx);
    if (gdl_idx_load(f.path, &idx) == 0) {
        int64_t count = 1;
        int d;
        if (idx.ndim < 1 || idx.ndim > GDL_IDX_MAX_DIMS) abort();
        for (d = 0; d < idx.ndim; d++) {
            if (idx.dims[d] < 0) abort();
            count *= idx.dims[d];
        }
        if (count != idx.count) abort();
        if (count > 0) { /* every byte is readable: ASan checks it */
            volatile uint8_t sum = 0;
            size_t i, bytes = (size_t)count * idx.elem_size;
            for (i = 0; i < bytes; i += 1 + bytes / 64) sum ^= ((const uint8_t *)idx.data)[i];
            sum ^= ((const uint8_t *)idx.data)[bytes - 1];
        }
        gdl_idx_free(&idx);
    } else if (!gdl_last_error()[0]) {
        abort(); /* a failure must say why */
    }
    return 0;
}
