/* same_weights.c — the cluster tests' judge: do two weight files (gdl_save_model's safetensors) hold the
   same tensors? `same_weights A B` bit for bit; `same_weights A B TOL` each F32 value u of A within
   TOL * (1 + |v|) of B's v (NaN never is). Prints what it found; exit 0 same, 1 different, 2 unreadable. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define GPUDL_IMPLEMENTATION
#include "../../gpudl.h"

int main(int argc, char **argv) {
    gdl_st_file a, b;
    double tol = argc > 3 ? atof(argv[3]) : -1, worst = 0;
    int i, same = 1;
    if (argc < 3) {
        fprintf(stderr, "usage: same_weights A.safetensors B.safetensors [TOL]\n");
        return 2;
    }
    if (gdl_st_read(argv[1], &a) < 0 || gdl_st_read(argv[2], &b) < 0) {
        fprintf(stderr, "same_weights: %s\n", gdl_last_error());
        return 2;
    }
    if (a.n != b.n || a.n == 0) {
        printf("different: %d tensors against %d\n", a.n, b.n);
        return 1;
    }
    for (i = 0; i < a.n && same; i++) {
        const gdl_st_entry *e = &a.entries[i], *f = NULL;
        int k;
        for (k = 0; k < b.n; k++)
            if (!strcmp(b.entries[k].name, e->name)) f = &b.entries[k];
        if (!f || strcmp(e->dtype, f->dtype) || e->end - e->begin != f->end - f->begin) {
            printf("different: tensor %s is missing or of another dtype or size in %s\n", e->name, argv[2]);
            same = 0;
        } else if (tol < 0 || strcmp(e->dtype, "F32")) {
            if (memcmp(a.data + e->begin, b.data + f->begin, e->end - e->begin)) {
                printf("different: tensor %s is not the same bits\n", e->name);
                same = 0;
            }
        } else {
            uint64_t j, n = (e->end - e->begin) / 4;
            for (j = 0; j < n && same; j++) {
                float u, v;
                double d;
                memcpy(&u, a.data + e->begin + 4 * j, 4);
                memcpy(&v, b.data + f->begin + 4 * j, 4);
                d = fabs((double)u - v) / (1 + fabs(v));
                if (!(d <= tol)) {
                    printf("different: %s[%llu] %.9g against %.9g\n", e->name, (unsigned long long)j, u, v);
                    same = 0;
                } else if (d > worst) {
                    worst = d;
                }
            }
        }
    }
    if (same) {
        if (tol < 0) printf("same: %d tensors, bit for bit\n", a.n);
        else printf("same: %d tensors, largest difference %.3g (relative, tolerance %g)\n", a.n, worst, tol);
    }
    gdl_st_free(&a);
    gdl_st_free(&b);
    return same ? 0 : 1;
}
