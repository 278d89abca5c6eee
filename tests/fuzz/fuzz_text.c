/* fuzz_text.c — libFuzzer harness for the text parsers: any input either loads as a
   vocabulary file (and saves and loads back to the same tokens) or fails with a message;
   read as a fortune file, its entries hold no separator line; and where it is UTF-8, the
   char vocabulary built from it encodes and decodes it back byte for byte, the word
   vocabulary encodes it without error. */
#include "fuzz_common.h"

static void check_vocab_file(const fz_file *f) {
    gdl_vocab *v = gdl_vocab_load(f->path), *w;
    int64_t i;
    if (!v) {
        if (!gdl_last_error()[0]) abort();
        return;
    }
    if (gdl_vocab_save(v, fz_tmp_path("v.vocab")) < 0 || !(w = gdl_vocab_load(fz_tmp_path("v.vocab")))) abort();
    if (gdl_vocab_size(v) != gdl_vocab_size(w) || gdl_vocab_level(v) != gdl_vocab_level(w)) abort();
    for (i = 0; i < gdl_vocab_size(v); i++)
        if (strcmp(gdl_vocab_token(v, (int32_t)i), gdl_vocab_token(w, (int32_t)i)) != 0) abort();
    gdl_vocab_free(v);
    gdl_vocab_free(w);
}

static void check_fortunes(const fz_file *f) {
    gdl_text_list tl;
    int64_t i;
    memset(&tl, 0, sizeof tl);
    if (gdl_text_read_fortune_file(f->path, 0, "x", &tl) == 0) {
        if (tl.n < 1 || tl.num_classes != 1) abort();
        for (i = 0; i < tl.n; i++)
            if (strlen(tl.texts[i]) != tl.lens[i] || strstr(tl.texts[i], "\n%\n") || tl.lens[i] == 0) abort();
    } else if (!gdl_last_error()[0]) {
        abort();
    }
    gdl_text_list_free(&tl);
}

static void check_round_trip(const uint8_t *data, size_t n) {
    gdl_vocab_opts o = gdl_vocab_defaults();
    gdl_vocab *v = gdl_vocab_build((const char *)data, n, &o);
    int32_t *ids;
    char *back;
    int64_t k;
    if (!v) {
        if (!gdl_last_error()[0]) abort();
        return;
    }
    k = gdl_vocab_encode(v, (const char *)data, n, NULL, 0);
    ids = (int32_t *)malloc(sizeof(int32_t) * (size_t)(k + 1));
    back = (char *)malloc(n + 1);
    if (k < 1 || !ids || !back || gdl_vocab_encode(v, (const char *)data, n, ids, k) != k) abort();
    if (gdl_vocab_decode(v, ids, k, back, n + 1) != (int64_t)n || memcmp(back, data, n) != 0) abort();
    free(ids);
    free(back);
    gdl_vocab_free(v);
    o.level = GDL_VOCAB_WORD;
    o.lowercase = 1;
    if ((v = gdl_vocab_build((const char *)data, n, &o)) != NULL) {
        if (gdl_vocab_encode(v, (const char *)data, n, NULL, 0) < 1) abort();
        gdl_vocab_free(v);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static fz_file f;
    static int init;
    if (!init) {
        f = fz_file_new();
        init = 1;
    }
    fz_file_set(&f, data, n);
    check_vocab_file(&f);
    check_fortunes(&f);
    check_round_trip(data, n);
    return 0;
}
