/* fuzz_cifar.c — libFuzzer harness for gdl_cifar10_load: any input either
   loads as whole 3073-byte records with labels 0..9 or fails with a message. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static fz_file f;
    static int init;
    uint8_t *img = NULL, *lab = NULL;
    int64_t count = -1, i;
    if (!init) {
        f = fz_file_new();
        init = 1;
    }
    fz_file_set(&f, data, n);
    if (gdl_cifar10_load(f.path, &img, &lab, &count) == 0) {
        if (count < 1 || (size_t)count * 3073 != n) abort();
        for (i = 0; i < count; i++) {
            if (lab[i] > 9 || lab[i] != data[i * 3073]) abort();
            if (memcmp(img + i * 3072, data + i * 3073 + 1, 3072)) abort();
        }
        free(img);
        free(lab);
    } else if (!gdl_last_error()[0]) {
        abort();
    }
    return 0;
}
