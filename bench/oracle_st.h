/* oracle_st.h — the file the PyTorch oracles (bench/rnn_oracle.c, bench/seq_ops_oracle.c) write: their
   tensors gathered by name, then one safetensors file. Floats are written as gdl_real is (F32, or F64 in
   a -DGPUDL_DOUBLE build), i32 as I32. Include after gpudl.h. */
#ifndef GPUDL_ORACLE_ST_H
#define GPUDL_ORACLE_ST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ORACLE_MAX 512

static gdl_st_tensor oracle_items[ORACLE_MAX];
static char oracle_names[ORACLE_MAX][160];
static int oracle_n;

/* a copy of t's values (on the CPU) as one more entry, named prefix + name */
static void oracle_add(const char *prefix, const char *name, const gdl_tensor *t) {
    size_t bytes = (size_t)t->numel * gdl_dtype_size(t->dtype);
    void *p = malloc(bytes + 8);
    int64_t *sh = (int64_t *)malloc(sizeof(int64_t) * (size_t)(t->ndim + 1));
    if (!p || !sh || oracle_n == ORACLE_MAX) {
        fprintf(stderr, "oracle: out of memory or entries\n");
        exit(1);
    }
    memcpy(p, t->data, bytes);
    memcpy(sh, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    snprintf(oracle_names[oracle_n], sizeof oracle_names[oracle_n], "%s%s", prefix, name);
    oracle_items[oracle_n].name = oracle_names[oracle_n];
    oracle_items[oracle_n].dtype = t->dtype == GDL_I32 ? "I32" : sizeof(gdl_real) == 8 ? "F64" : "F32";
    oracle_items[oracle_n].ndim = t->ndim;
    oracle_items[oracle_n].shape = sh;
    oracle_items[oracle_n].data = p;
    oracle_n++;
}

/* n host values as a 1-D entry (a case's configuration) */
static void oracle_add_values(const char *prefix, const char *name, const gdl_real *v, int64_t n) {
    gdl_tensor *t = gdl_from_array(v, 1, &n, GDL_F32, gdl_cpu());
    if (!t) {
        fprintf(stderr, "oracle: %s\n", gdl_last_error());
        exit(1);
    }
    oracle_add(prefix, name, t);
    gdl_free(t);
}

/* DIR/<base>.safetensors, or DIR/<base>_f64.safetensors from a -DGPUDL_DOUBLE build; 0, or 1 after the message */
static int oracle_write(const char *prog, const char *dir, const char *base) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s%s.safetensors", dir, base, sizeof(gdl_real) == 8 ? "_f64" : "");
    if (gdl_st_write(path, oracle_n, oracle_items, 0, NULL, NULL) < 0) {
        fprintf(stderr, "%s: %s\n", prog, gdl_last_error());
        return 1;
    }
    printf("wrote %s (%d tensors)\n", path, oracle_n);
    return 0;
}

#endif
