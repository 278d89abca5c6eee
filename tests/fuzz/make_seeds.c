/* make_seeds.c — writes the fuzzers' seed corpora (tests/fuzz/corpus/NAME):
   valid files of each format and edge cases (empty dims, a 0-d tensor,
   metadata, gzip, one byte short, ...), and the text parsers' inputs. Run by `make fuzz-seeds`; its output
   is committed, so the fuzzers start from the same seeds everywhere.
   Usage: make_seeds OUT_DIR */
#include "fuzz_common.h"
#include <sys/stat.h>
#include <zlib.h>

static const char *out;

static void put(const char *sub, const char *name, const void *data, size_t n) {
    char path[1024];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", out, sub);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", out, sub, name);
    if (!(f = fopen(path, "wb")) || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "make_seeds: cannot write %s\n", path);
        exit(1);
    }
}

static void put_gz(const char *sub, const char *name, const void *data, size_t n) {
    uLongf cap = compressBound((uLong)n) + 64;
    unsigned char *buf = (unsigned char *)malloc(cap);
    z_stream z;
    memset(&z, 0, sizeof z);
    /* windowBits 15 + 16: a gzip wrapper, as the real .gz files have */
    if (!buf || deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) exit(1);
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)n;
    z.next_out = buf;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) exit(1);
    put(sub, name, buf, z.total_out);
    deflateEnd(&z);
    free(buf);
}

static size_t idx_bytes(unsigned char *b, int code, int ndim, const int *dims, int esize) {
    size_t n = 4, count = 1, i;
    int d;
    b[0] = b[1] = 0;
    b[2] = (unsigned char)code;
    b[3] = (unsigned char)ndim;
    for (d = 0; d < ndim; d++) {
        b[n++] = (unsigned char)(dims[d] >> 24);
        b[n++] = (unsigned char)(dims[d] >> 16);
        b[n++] = (unsigned char)(dims[d] >> 8);
        b[n++] = (unsigned char)dims[d];
        count *= (size_t)dims[d];
    }
    for (i = 0; i < count * (size_t)esize; i++) b[n++] = (unsigned char)(i * 37 + 11);
    return n;
}

static void seeds_idx(void) {
    static unsigned char b[4096];
    int d3[3] = {3, 4, 4}, d1[1] = {5}, d2[2] = {2, 3}, d0[3] = {0, 28, 28};
    size_t n;
    n = idx_bytes(b, 0x08, 3, d3, 1);
    put("idx", "images_u8_3x4x4", b, n);
    put_gz("idx", "images_u8_3x4x4.gz", b, n);
    put("idx", "images_one_byte_short", b, n - 1);
    n = idx_bytes(b, 0x08, 1, d1, 1);
    put("idx", "labels_u8_5", b, n);
    put_gz("idx", "labels_u8_5.gz", b, n);
    n = idx_bytes(b, 0x0D, 2, d2, 4);
    put("idx", "f32_2x3", b, n);
    n = idx_bytes(b, 0x0B, 2, d2, 2);
    put("idx", "i16_2x3", b, n);
    n = idx_bytes(b, 0x0E, 1, d1, 8);
    put("idx", "f64_5", b, n);
    n = idx_bytes(b, 0x08, 3, d0, 1);
    put("idx", "empty_0x28x28", b, n);
    /* a header claiming 2 GiB followed by a few bytes: must cost a few bytes, not 2 GiB (a regression case) */
    n = idx_bytes(b, 0x08, 3, d3, 1);
    b[4] = b[8] = 0; b[5] = b[9] = 0; b[6] = b[10] = 0x7F; b[7] = b[11] = 0xFF; b[15] = 2;
    put("idx", "claims_2gib_truncated", b, n);
    put_gz("idx", "claims_2gib_truncated.gz", b, n);
}

static void seeds_cifar(void) {
    static unsigned char b[3073 * 2];
    size_t i;
    for (i = 0; i < sizeof b; i++) b[i] = (unsigned char)(i * 13 + 5);
    b[0] = 3;
    b[3073] = 9;
    put("cifar", "two_records", b, sizeof b);
    put("cifar", "one_record", b, 3073);
    put("cifar", "one_byte_short", b, 3072);
}

static void seeds_safetensors(void) {
    float w[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[2] = {0x3c00, 0xc000};
    float s = 0.5f;
    int64_t sw[2] = {2, 3}, sh[1] = {2}, se[2] = {0, 4};
    gdl_st_tensor t[4];
    const char *mk[1] = {"format"}, *mv[1] = {"pt"};
    char path[1024];
    FILE *f;
    unsigned char buf[4096];
    size_t n;
    t[0].name = "weight"; t[0].dtype = "F32"; t[0].ndim = 2; t[0].shape = sw; t[0].data = w;
    t[1].name = "half"; t[1].dtype = "F16"; t[1].ndim = 1; t[1].shape = sh; t[1].data = h;
    t[2].name = "scalar"; t[2].dtype = "F32"; t[2].ndim = 0; t[2].shape = NULL; t[2].data = &s;
    t[3].name = "empty"; t[3].dtype = "F32"; t[3].ndim = 2; t[3].shape = se; t[3].data = NULL;
    snprintf(path, sizeof path, "%s/safetensors", out);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/safetensors/four_tensors_meta.safetensors", out);
    if (gdl_st_write(path, 4, t, 1, mk, mv) < 0) exit(1);
    snprintf(path, sizeof path, "%s/safetensors/none.safetensors", out);
    if (gdl_st_write(path, 0, NULL, 0, NULL, NULL) < 0) exit(1);
    /* the first file, one byte short */
    snprintf(path, sizeof path, "%s/safetensors/four_tensors_meta.safetensors", out);
    if (!(f = fopen(path, "rb"))) exit(1);
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    put("safetensors", "one_byte_short", buf, n - 1);
}

static void seeds_checkpoints(void) {
    fz_state s = fz_state_new();
    char path[1024];
    snprintf(path, sizeof path, "%s/checkpoint", out);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/checkpoint/adam_steplr.safetensors", out);
    if (gdl_checkpoint_save(s.model, s.opt, s.sched, 3, path) < 0) exit(1);
    snprintf(path, sizeof path, "%s/checkpoint/model_only.safetensors", out);
    if (gdl_save_model(s.model, path) < 0) exit(1);
    snprintf(path, sizeof path, "%s/model", out);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/model/model.safetensors", out);
    if (gdl_save_model(s.model, path) < 0) exit(1);
    snprintf(path, sizeof path, "%s/model/checkpoint.safetensors", out);
    if (gdl_checkpoint_save(s.model, s.opt, s.sched, 3, path) < 0) exit(1);
    gdl_scheduler_free(s.sched);
    gdl_optim_free(s.opt);
    gdl_module_free(s.model);
}

/* vocabulary files (char and word, escapes), fortune files, UTF-8 text */
static void seeds_text(void) {
    static const char vchar[] = "gpudl-vocab 1 char 0 6\n<pad>\n<unk>\na\n\\n\n\\\\\n\xC3\xA9\n";
    static const char vword[] = "gpudl-vocab 1 word 1 4\n<pad>\n<unk>\nthe\ncat's\n";
    static const char vshort[] = "gpudl-vocab 1 char 0 5\n<pad>\n<unk>\na\n";
    static const char fort[] = "One fortune.\n%\nTwo\n  lines, \xD0\x96\n%\n%\n \n%\nlast";
    static const char utf8[] = "h\xC3\xA9llo w\xC3\xB6rld \xE2\x98\x83 \xF0\x9F\x98\x80\n\tThe end.";
    put("text", "vocab_char", vchar, sizeof vchar - 1);
    put("text", "vocab_word", vword, sizeof vword - 1);
    put("text", "vocab_truncated", vshort, sizeof vshort - 1);
    put("text", "fortunes", fort, sizeof fort - 1);
    put("text", "utf8", utf8, sizeof utf8 - 1);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds OUT_DIR\n");
        return 2;
    }
    out = argv[1];
    mkdir(out, 0755);
    seeds_idx();
    seeds_cifar();
    seeds_safetensors();
    seeds_checkpoints();
    seeds_text();
    gdl_shutdown();
    return 0;
}
