/* fuzz_checkpoint.c — libFuzzer harness for gdl_checkpoint_load (and, with
   -DFZ_MODEL_ONLY, gdl_load_model) into a small model with Adam and StepLR.
   The property: an input either loads, or fails with a message and leaves
   the model, the optimizer and the scheduler bitwise as they were. "As they
   were" is checked by saving the whole training state before and after the
   attempt and comparing the two files byte for byte. After a successful
   load, every F32 tensor of the input that names a model tensor must now be
   that tensor's value; then the reference state is loaded back, so every
   input starts from the same state. */
#include "fuzz_common.h"

#ifdef FZ_MODEL_ONLY
#define FZ_LOAD(path) gdl_load_model(st.model, (path))
#else
#define FZ_LOAD(path) gdl_checkpoint_load(st.model, st.opt, st.sched, &epoch, (path))
#endif

static fz_state st;
static fz_file in;
static char snap[512], ref[512];

static uint8_t *fz_snapshot(size_t *n) {
    FILE *f;
    uint8_t *buf;
    long len;
    if (gdl_checkpoint_save(st.model, st.opt, st.sched, 7, snap) < 0) {
        fprintf(stderr, "fuzz: save failed: %s\n", gdl_last_error());
        abort();
    }
    if (!(f = fopen(snap, "rb")) || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0 || !(buf = (uint8_t *)malloc((size_t)len + 1)) ||
        fread(buf, 1, (size_t)len, f) != (size_t)len)
        abort();
    fclose(f);
    *n = (size_t)len;
    return buf;
}

/* The input's F32 tensors that name model tensors hold the model's values now. */
static void fz_check_loaded(const uint8_t *data, size_t n) {
    gdl_st_file sf;
    int i;
    if (gdl_st_parse(data, n, &sf, "input") < 0) abort(); /* it loaded, so it parses */
    for (i = 0; i < sf.n; i++) {
        const gdl_st_entry *e = &sf.entries[i];
#ifdef FZ_MODEL_ONLY
        gdl_tensor *t = gdl_module_tensor(st.model, e->name);
#else
        gdl_tensor *t = strncmp(e->name, "model.", 6) ? NULL : gdl_module_tensor(st.model, e->name + 6);
#endif
        float *host;
        if (!t || strcmp(e->dtype, "F32") || e->end - e->begin != sizeof(float) * (uint64_t)t->numel) continue;
        if (!(host = (float *)malloc(sizeof(float) * (size_t)(t->numel + 1)))) abort();
        if (gdl_copy_to_host(t, host, sizeof(float) * (size_t)t->numel) < 0) abort();
        if (memcmp(host, sf.data + e->begin, sizeof(float) * (size_t)t->numel)) abort();
        free(host);
    }
    gdl_st_free(&sf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static int init;
    uint8_t *before, *after;
    size_t nb, na;
    int64_t epoch = -1;
    int rc;
    if (!init) {
        st = fz_state_new();
        in = fz_file_new();
        snprintf(snap, sizeof snap, "%s", fz_tmp_path("snapshot.safetensors"));
        snprintf(ref, sizeof ref, "%s", fz_tmp_path("reference.safetensors"));
        if (gdl_checkpoint_save(st.model, st.opt, st.sched, 7, ref) < 0) abort();
        init = 1;
    }
    before = fz_snapshot(&nb);
    fz_file_set(&in, data, n);
    rc = FZ_LOAD(in.path);
    if (rc < 0) {
        if (!gdl_last_error()[0]) abort();
        after = fz_snapshot(&na);
        if (na != nb || memcmp(before, after, nb)) {
            fprintf(stderr, "fuzz: a failed load changed the state: %s\n", gdl_last_error());
            abort();
        }
        free(after);
    } else {
        fz_check_loaded(data, n);
        if (gdl_checkpoint_load(st.model, st.opt, st.sched, &epoch, ref) < 0) abort();
    }
    free(before);
    gdl_arena_reset();
    return 0;
}
