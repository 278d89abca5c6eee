/* seq2seq.c — an encoder-decoder Transformer (PyTorch's nn.Transformer, pre-norm) that translates English words
   into German character by character, trained on Debian's FreeDict English-German dictionary (the package
   dict-freedict-eng-deu: /usr/share/dictd/freedict-eng-deu.index and .dict.dz, dictd's format).

   The data: every English headword the dictionary lists once (a word listed with several senses has no one
   answer), of lowercase letters, spaces and hyphens, at most --max-src characters, paired with the first German
   translation of its entry (annotations such as <masc>, [bot.] and (...) dropped), of letters, umlauts, ß,
   spaces and hyphens, at most --max-tgt characters: 184,522 pairs with the defaults, such as "railway tunnel" ->
   "Eisenbahntunnel". A fixed 95/5 split by a hash of the English word (the same on every machine, whatever the
   seed); one character vocabulary of both sides, plus <bos> and <eos>.

   The model: src_embed and tgt_embed (nn.Embedding), learned positions src_pos and tgt_pos, nn.Transformer
   (batch_first, norm_first: encoder.layers.N..., encoder.norm, decoder.layers.N..., decoder.norm) and a
   generator nn.Linear(d, V); the state-dict names are the PyTorch twin's. Training: teacher forcing (the decoder
   reads <bos> + German, predicts German + <eos>, a causal mask and padding masks), cross entropy ignoring
   padding, AdamW (betas 0.9/0.98, no decay on biases and norms), gradients clipped to norm 1, linear warm-up
   then cosine decay. Batches: a permutation of the training pairs per epoch drawn from --seed. The held-out loss
   every --eval-interval steps, and at the end translations greedily and with beam search (--beam), both on
   --eval-pairs held-out pairs (the first in a fixed shuffled order): the exact-match rate, the character accuracy
   (1 - edit distance / reference length, summed over the pairs: 1 - CER), and a few translations printed.

   bench/pytorch/seq2seq.py is its PyTorch twin: given --save-init and --dump-batches files it trains the same
   model from the same weights on the same batches and decodes the same held-out pairs
   (bench/compare_seq2seq.sh compares them).

   CPU:   cc -O2 -march=native -DGPUDL_ZLIB examples/seq2seq.c -lz -lm -pthread -o seq2seq
          (without zlib it reads a plain freedict-eng-deu.dict: GPUDL_FETCH=download make data-dict unpacks one
          into ./data/freedict)
   Run:   ./seq2seq [--steps N] [--width N] [--heads N] [--enc-layers N] [--dec-layers N] [--beam N] ...
          (--help lists them all; the data: `make data-dict`, or --data DIR holding the dictionary) */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "example_args.h"
#include <math.h>
#include <stdlib.h>
#ifdef GPUDL_ZLIB
#include <zlib.h>
#endif

#define DICT_NAME "freedict-eng-deu"
#define MAX_FILE_BYTES ((size_t)1 << 30) /* the dictionary is 80 MB; anything past 1 GiB is not it */

/* ---- the dictionary ---- */

/* A whole file into memory, NUL-terminated; gzip-compressed (dictzip is gzip) inflated when gz (then zlib is
   there: find_dict asks for it). 0 / -1 after printing why. */
static int read_whole(const char *path, int gz, char **out, size_t *len) {
    size_t cap = (size_t)1 << 20, n = 0;
    char *buf = NULL, *grown;
    long got = 0;
    FILE *f = NULL;
#ifdef GPUDL_ZLIB
    gzFile g = NULL;
    if (gz) g = gzopen(path, "rb");
    if (gz && !g) {
        fprintf(stderr, "seq2seq: %s: cannot open it: %s\n", path, strerror(errno));
        return -1;
    }
#endif
    if (!gz && !(f = fopen(path, "rb"))) {
        fprintf(stderr, "seq2seq: %s: cannot open it: %s\n", path, strerror(errno));
        return -1;
    }
    for (buf = (char *)malloc(cap + 1); buf;) {
        if (n == cap && (cap >= MAX_FILE_BYTES || !(grown = (char *)realloc(buf, 2 * cap + 1)))) {
            fprintf(stderr, "seq2seq: %s: larger than %lu MiB, or out of memory\n", path, (unsigned long)(MAX_FILE_BYTES >> 20));
            free(buf);
            buf = NULL;
            break;
        }
        if (n == cap) buf = grown, cap *= 2;
#ifdef GPUDL_ZLIB
        if (gz) got = gzread(g, buf + n, (unsigned)(cap - n));
#endif
        if (!gz) got = ferror(f) ? -1 : (long)fread(buf + n, 1, cap - n, f);
        if (got < 0 || (f && ferror(f))) {
            fprintf(stderr, "seq2seq: %s: cannot read it%s\n", path, gz ? " (not gzip, or truncated)" : "");
            free(buf);
            buf = NULL;
        } else if (got == 0) break;
        else n += (size_t)got;
    }
#ifdef GPUDL_ZLIB
    if (g) gzclose(g);
#endif
    if (f) fclose(f);
    if (!buf) return -1;
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

/* dictd's base-64 number (A-Z a-z 0-9 + /, most significant digit first) of s[0, n); -1 when it is not one or
   is past 2^48. */
static int64_t b64_number(const char *s, size_t n) {
    int64_t v = 0;
    size_t i;
    if (n == 0 || n > 8) return -1;
    for (i = 0; i < n; i++) {
        char c = s[i];
        int d = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
              : c == '+' ? 62 : c == '/' ? 63 : -1;
        if (d < 0) return -1;
        v = v * 64 + d;
    }
    return v;
}

typedef struct entry {
    const char *head; /* NUL-terminated inside the index buffer */
    int64_t off, len;
} entry;

static int cmp_entry(const void *a, const void *b) {
    const entry *x = (const entry *)a, *y = (const entry *)b;
    int c = strcmp(x->head, y->head);
    return c ? c : (x->off > y->off) - (x->off < y->off);
}

/* Whether s is a source word: a lowercase letter, then lowercase letters, spaces and hyphens, 2..max bytes. */
static int good_source(const char *s, int max) {
    size_t n = strlen(s), i;
    if (n < 2 || n > (size_t)max || s[0] < 'a' || s[0] > 'z' || s[n - 1] == ' ') return 0;
    for (i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || s[i] == ' ' || s[i] == '-')) return 0;
    return 1;
}

/* The first translation of an entry's text e[0, n) into out (cap bytes): its second line up to the first comma
   or semicolon outside brackets, the bracketed annotations (<...>, [...], (...), {...}) dropped, spaces
   collapsed. Returns its characters when it is letters (ASCII, äöüÄÖÜß), spaces and hyphens, 1..max of them;
   else 0. */
static int first_translation(const char *e, int64_t n, char *out, size_t cap, int max) {
    int64_t i = 0;
    size_t k = 0;
    int depth = 0, chars = 0;
    while (i < n && e[i] != '\n') i++; /* the headword line */
    for (i++; i < n && e[i] != '\n'; i++) {
        unsigned char c = (unsigned char)e[i];
        if (c == '<' || c == '[' || c == '(' || c == '{') depth++;
        else if (c == '>' || c == ']' || c == ')' || c == '}') {
            if (--depth < 0) return 0;
        } else if (depth == 0) {
            if (c == ',' || c == ';') break;
            if (c == ' ' && (k == 0 || out[k - 1] == ' ')) continue;
            if (k + 2 >= cap) return 0;
            if (c == 0xC3 && i + 1 < n) { /* ä ö ü Ä Ö Ü ß, the only non-ASCII letters kept */
                unsigned char d = (unsigned char)e[i + 1];
                if (d != 0xA4 && d != 0xB6 && d != 0xBC && d != 0x84 && d != 0x96 && d != 0x9C && d != 0x9F) return 0;
                out[k++] = (char)c;
                out[k++] = (char)d;
                i++;
            } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == ' ' || c == '-') out[k++] = (char)c;
            else return 0;
            chars++;
        }
    }
    while (k > 0 && out[k - 1] == ' ') k--, chars--;
    out[k] = 0;
    return chars >= 1 && chars <= max && out[0] != '-' ? chars : 0;
}

typedef struct pair_list {
    int64_t n, cap;
    char **src, **tgt; /* each malloc'ed, UTF-8 */
} pair_list;

static int pairs_add(pair_list *p, const char *s, const char *t) {
    if (p->n == p->cap) {
        int64_t c = p->cap ? 2 * p->cap : 1024;
        char **a = (char **)realloc(p->src, sizeof *a * (size_t)c), **b;
        if (!a) return -1;
        p->src = a;
        if (!(b = (char **)realloc(p->tgt, sizeof *b * (size_t)c))) return -1;
        p->tgt = b;
        p->cap = c;
    }
    if (!(p->src[p->n] = (char *)malloc(strlen(s) + 1))) return -1;
    if (!(p->tgt[p->n] = (char *)malloc(strlen(t) + 1))) {
        free(p->src[p->n]);
        return -1;
    }
    strcpy(p->src[p->n], s);
    strcpy(p->tgt[p->n], t);
    p->n++;
    return 0;
}

static void pairs_free(pair_list *p) {
    int64_t i;
    for (i = 0; i < p->n; i++) free(p->src[i]), free(p->tgt[i]);
    free(p->src);
    free(p->tgt);
    memset(p, 0, sizeof *p);
}

/* The folder holding the dictionary: dir when given; else $GPUDL_DATA/freedict when GPUDL_DATA is set; else the
   first of ./data/freedict and /usr/share/dictd that has the index. Also whether the text is the plain .dict
   (preferred: no zlib needed) or .dict.dz. 0 / -1 after printing where it looked. */
static int find_dict(const char *dir, char *index, char *text, size_t cap, int *gz) {
    const char *env = getenv("GPUDL_DATA"), *dirs[2];
    char envdir[1024];
    int nd = 0, k;
    FILE *f;
    if (dir) dirs[nd++] = dir;
    else if (env && *env) {
        snprintf(envdir, sizeof envdir, "%s/freedict", env);
        dirs[nd++] = envdir;
    } else {
        dirs[nd++] = "data/freedict";
        dirs[nd++] = "/usr/share/dictd";
    }
    for (k = 0; k < nd; k++) {
        snprintf(index, cap, "%s/" DICT_NAME ".index", dirs[k]);
        if (!(f = fopen(index, "rb"))) continue;
        fclose(f);
        snprintf(text, cap, "%s/" DICT_NAME ".dict", dirs[k]);
        if ((f = fopen(text, "rb"))) {
            fclose(f);
            *gz = 0;
            return 0;
        }
        snprintf(text, cap, "%s/" DICT_NAME ".dict.dz", dirs[k]);
#ifdef GPUDL_ZLIB
        if ((f = fopen(text, "rb"))) {
            fclose(f);
            *gz = 1;
            return 0;
        }
#else
        fprintf(stderr, "seq2seq: %s has the index but no plain " DICT_NAME ".dict, and this build has no zlib to read "
                        "the .dict.dz (build with -DGPUDL_ZLIB -lz, or unpack a plain one into ./data/freedict: "
                        "GPUDL_FETCH=download make data-dict)\n", dirs[k]);
        return -1;
#endif
    }
    fprintf(stderr, "seq2seq: the FreeDict English-German dictionary (" DICT_NAME ".index and .dict or .dict.dz) is not "
                    "in %s%s%s: `make data-dict` fetches it (Debian's dict-freedict-eng-deu)\n", dirs[0],
            nd > 1 ? " or " : "", nd > 1 ? dirs[1] : "");
    return -1;
}

/* The pairs of the dictionary (see the top of the file), sorted by English word. 0 / -1 after printing why. */
static int load_pairs(const char *dir, int max_src, int max_tgt, pair_list *out) {
    char index_path[1100], text_path[1100], tr[256], *idx = NULL, *txt = NULL, *line, *end;
    size_t idx_len = 0, txt_len = 0;
    entry *es = NULL;
    int64_t n = 0, cap = 0, i, j, bad = 0;
    int gz, rc = -1;
    memset(out, 0, sizeof *out);
    if (find_dict(dir, index_path, text_path, sizeof index_path, &gz) < 0 || read_whole(index_path, 0, &idx, &idx_len) < 0 ||
        read_whole(text_path, gz, &txt, &txt_len) < 0)
        goto out;
    for (line = idx; line < idx + idx_len; line = end + 1) { /* headword TAB offset TAB length */
        char *t1, *t2;
        int64_t off, len;
        if (!(end = strchr(line, '\n'))) end = idx + idx_len;
        *end = 0;
        if (!(t1 = strchr(line, '\t')) || !(t2 = strchr(t1 + 1, '\t'))) {
            if (*line) bad++;
            continue;
        }
        *t1 = 0;
        off = b64_number(t1 + 1, (size_t)(t2 - t1 - 1));
        len = b64_number(t2 + 1, strlen(t2 + 1));
        if (off < 0 || len < 0 || (uint64_t)off + (uint64_t)len > txt_len) {
            bad++;
            continue;
        }
        if (n == cap) {
            entry *g = (entry *)realloc(es, sizeof *es * (size_t)(cap = cap ? 2 * cap : 65536));
            if (!g) goto oom;
            es = g;
        }
        es[n].head = line;
        es[n].off = off;
        es[n].len = len;
        n++;
    }
    if (bad > n / 100 + 10) { /* a few odd lines are tolerated; many mean this is not a dictd index */
        fprintf(stderr, "seq2seq: %s: %lld of its lines are not \"headword TAB offset TAB length\" within %s\n", index_path,
                (long long)bad, text_path);
        goto out;
    }
    if (n > 0) qsort(es, (size_t)n, sizeof *es, cmp_entry);
    for (i = 0; i < n; i = j) {
        for (j = i + 1; j < n && !strcmp(es[j].head, es[i].head); j++) continue;
        if (j - i != 1 || !good_source(es[i].head, max_src) ||
            !first_translation(txt + es[i].off, es[i].len, tr, sizeof tr, max_tgt))
            continue;
        if (pairs_add(out, es[i].head, tr) < 0) goto oom;
    }
    if (out->n < 100) {
        fprintf(stderr, "seq2seq: %s gives only %lld pairs (not FreeDict's English-German dictionary?)\n", index_path,
                (long long)out->n);
        goto out;
    }
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "seq2seq: out of memory reading the dictionary\n");
out:
    if (rc) pairs_free(out);
    free(es);
    free(idx);
    free(txt);
    return rc;
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 14695981039346656037ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Held out: 1 in 20 English words, by their FNV-1a hash (fixed: the same split everywhere). */
static int held_out(const char *s) { return fnv1a(s) % 20 == 0; }

typedef struct keyed {
    uint64_t key;
    int64_t i;
} keyed;

static int cmp_keyed(const void *a, const void *b) {
    const keyed *x = (const keyed *)a, *y = (const keyed *)b;
    return x->key != y->key ? (x->key > y->key) - (x->key < y->key) : (x->i > y->i) - (x->i < y->i);
}

/* ---- the encoded data ---- */

typedef struct data {
    gdl_vocab *vocab;
    int32_t bos, eos, V; /* V: the vocabulary's tokens plus <bos> and <eos> */
    int S, T;            /* source ids per pair, target ids per pair (the German and one of <bos>/<eos>) */
    int64_t n_train, n_val;
    int32_t *train_src, *train_in, *train_out; /* [n, S], [n, T], [n, T], padded with GDL_VOCAB_PAD */
    int32_t *val_src, *val_in, *val_out;
    char **val_en, **val_de; /* the held-out pairs' text (pointers into the pair list) */
} data;

/* text into ids[0, cap), padded; the count of ids. -1 when it does not fit. */
static int encode_padded(const gdl_vocab *v, const char *text, int32_t *ids, int cap) {
    int64_t n = gdl_vocab_encode(v, text, strlen(text), NULL, 0);
    if (n < 0 || n > cap) return -1;
    memset(ids, 0, sizeof *ids * (size_t)cap);
    return (int)gdl_vocab_encode(v, text, strlen(text), ids, n);
}

/* One pair into src [S], tgt_in [T] = <bos> German, tgt_out [T] = German <eos>. 0 / -1. */
static int encode_pair(const data *d, const char *en, const char *de, int32_t *src, int32_t *in, int32_t *out) {
    int n;
    if (encode_padded(d->vocab, en, src, d->S) < 0 || (n = encode_padded(d->vocab, de, out, d->T - 1)) < 0) return -1;
    out[d->T - 1] = 0;
    in[0] = d->bos;
    memcpy(in + 1, out, sizeof *in * (size_t)(d->T - 1));
    out[n] = d->eos;
    return 0;
}

static int alloc_side(const data *d, int64_t n, int32_t **s, int32_t **i, int32_t **o) {
    *s = (int32_t *)malloc(sizeof **s * (size_t)(n * d->S + 1));
    *i = (int32_t *)malloc(sizeof **i * (size_t)(n * d->T + 1));
    *o = (int32_t *)malloc(sizeof **o * (size_t)(n * d->T + 1));
    return *s && *i && *o ? 0 : -1;
}

/* The vocabulary of all pairs, both sides encoded, the split made. 0 / -1 + error. */
static int encode_data(pair_list *p, int max_src, int max_tgt, data *d) {
    size_t total = 0, at = 0;
    int64_t i, k, nt = 0, nv = 0;
    keyed *order;
    char *all;
    int rc = 0;
    for (i = 0; i < p->n; i++) total += strlen(p->src[i]) + strlen(p->tgt[i]);
    if (!(all = (char *)malloc(total + 1))) return -1;
    for (i = 0; i < p->n; i++) {
        memcpy(all + at, p->src[i], strlen(p->src[i]));
        at += strlen(p->src[i]);
        memcpy(all + at, p->tgt[i], strlen(p->tgt[i]));
        at += strlen(p->tgt[i]);
    }
    d->vocab = gdl_vocab_build(all, total, NULL);
    free(all);
    if (!d->vocab) return -1;
    d->bos = (int32_t)gdl_vocab_size(d->vocab);
    d->eos = d->bos + 1;
    d->V = d->bos + 2;
    d->S = max_src;
    d->T = max_tgt + 1;
    for (i = 0; i < p->n; i++) d->n_val += held_out(p->src[i]);
    d->n_train = p->n - d->n_val;
    if (alloc_side(d, d->n_train, &d->train_src, &d->train_in, &d->train_out) < 0 ||
        alloc_side(d, d->n_val, &d->val_src, &d->val_in, &d->val_out) < 0 ||
        !(d->val_en = (char **)malloc(sizeof(char *) * (size_t)(d->n_val + 1))) ||
        !(d->val_de = (char **)malloc(sizeof(char *) * (size_t)(d->n_val + 1))))
        return -1;
    if (!(order = (keyed *)malloc(sizeof *order * (size_t)(d->n_val + 1)))) return -1;
    for (i = 0; i < p->n; i++) {
        if (held_out(p->src[i])) {
            order[nv].key = fnv1a(p->src[i]) / 20;
            order[nv++].i = i;
        } else if (encode_pair(d, p->src[i], p->tgt[i], d->train_src + nt * d->S, d->train_in + nt * d->T,
                               d->train_out + nt * d->T) < 0)
            rc = -1;
        else nt++;
    }
    /* the held-out pairs in the order of their hash (a fixed shuffle): the first --eval-pairs of them are a sample
       of the whole alphabet, not its beginning */
    qsort(order, (size_t)nv, sizeof *order, cmp_keyed);
    for (k = 0; k < nv && rc == 0; k++) {
        i = order[k].i;
        d->val_en[k] = p->src[i];
        d->val_de[k] = p->tgt[i];
        rc = encode_pair(d, p->src[i], p->tgt[i], d->val_src + k * d->S, d->val_in + k * d->T, d->val_out + k * d->T);
    }
    free(order);
    return rc;
}

static void data_free(data *d) {
    gdl_vocab_free(d->vocab);
    free(d->train_src), free(d->train_in), free(d->train_out);
    free(d->val_src), free(d->val_in), free(d->val_out);
    free(d->val_en), free(d->val_de);
}

/* ---- the model ---- */

typedef struct s2s_config {
    int d_model, nhead, enc_layers, dec_layers, ff, S, T, V;
    double dropout;
} s2s_config;

static gdl_module *child(gdl_module *m, const char *path) { return gdl_module_child(m, path); }

/* Adds child to m; either may be NULL after a failed constructor, whose error then stays the one shown. */
static int add(gdl_module *m, const char *name, gdl_module *c) {
    if (!m || !c) {
        gdl_module_free(c);
        return -1;
    }
    return gdl_module_add_child(m, name, c);
}

/* gdl_forward(model, src ids [N, S]): the encoder's output for sources without padding (training and decoding
   go through encode() and decode() below, which take masks). */
static gdl_tensor *s2s_forward(gdl_module *self, gdl_tensor *src) {
    gdl_tensor *x = gdl_forward(child(self, "src_pos"), gdl_forward(child(self, "src_embed"), src));
    return gdl_transformer_encode(child(self, "transformer"), x, NULL);
}

/* The model of c (which must outlive it), PyTorch's initialisation (nn.Transformer's xavier-uniform), on the
   CPU. NULL + error. */
static gdl_module *s2s_new(s2s_config *c) {
    gdl_transformer_opts o = gdl_transformer_defaults();
    gdl_module *m = gdl_nn_custom("Seq2Seq", s2s_forward, c, NULL);
    o.d_model = c->d_model;
    o.nhead = c->nhead;
    o.num_encoder_layers = c->enc_layers;
    o.num_decoder_layers = c->dec_layers;
    o.dim_feedforward = c->ff;
    o.dropout = c->dropout;
    o.batch_first = 1;
    o.norm_first = 1;
    if (add(m, "src_embed", gdl_nn_embedding(c->V, c->d_model)) < 0 || add(m, "tgt_embed", gdl_nn_embedding(c->V, c->d_model)) < 0 ||
        add(m, "src_pos", gdl_nn_learned_positional_embedding(c->S, c->d_model)) < 0 ||
        add(m, "tgt_pos", gdl_nn_learned_positional_embedding(c->T, c->d_model)) < 0 ||
        add(m, "transformer", gdl_transformer(&o)) < 0 || add(m, "generator", gdl_nn_linear(c->d_model, c->V, 1)) < 0) {
        gdl_module_free(m);
        return NULL;
    }
    return m;
}

/* The input tensors of a step or a decoding (ids and masks from host arrays: gdl_from_array's persistent
   tensors), freed together once the backward, the update or the read of the results no longer needs them. */
typedef struct inputs {
    gdl_tensor *t[8];
    int n;
} inputs;

static gdl_tensor *keep(inputs *in, gdl_tensor *t) {
    if (t && in->n == (int)(sizeof in->t / sizeof in->t[0])) { /* a bug of this file: never more than 5 */
        fprintf(stderr, "seq2seq: too many input tensors\n");
        abort();
    }
    if (t) in->t[in->n++] = t;
    return t;
}

static void inputs_free(inputs *in) {
    while (in->n > 0) gdl_free(in->t[--in->n]);
}

/* u8 [N, L]: 1 where ids are padding (left out as keys, PyTorch's bool convention) */
static gdl_tensor *pad_mask(inputs *in, const int32_t *ids, int64_t N, int64_t L, gdl_device dev) {
    int64_t shape[2] = {N, L}, i;
    uint8_t *m = (uint8_t *)malloc((size_t)(N * L));
    gdl_tensor *t;
    if (!m) {
        fprintf(stderr, "seq2seq: out of memory\n");
        return NULL;
    }
    for (i = 0; i < N * L; i++) m[i] = ids[i] == GDL_VOCAB_PAD;
    t = keep(in, gdl_from_array(m, 2, shape, GDL_U8, dev));
    free(m);
    return t;
}

static gdl_tensor *ids_tensor(inputs *in, const int32_t *ids, int64_t N, int64_t L, gdl_device dev) {
    int64_t shape[2] = {N, L};
    return keep(in, gdl_from_array(ids, 2, shape, GDL_I32, dev));
}

/* The encoder's output (memory [N, S, d]) for source ids src [N, S]; *src_pad gets its padding mask. */
static gdl_tensor *encode(gdl_module *m, inputs *in, const int32_t *src, int64_t N, int S, gdl_device dev,
                          gdl_tensor **src_pad) {
    gdl_transformer_masks mk;
    gdl_tensor *x = ids_tensor(in, src, N, S, dev);
    memset(&mk, 0, sizeof mk);
    if (!x || !(*src_pad = mk.src_key_padding_mask = pad_mask(in, src, N, S, dev))) return NULL;
    x = gdl_forward(child(m, "src_pos"), gdl_forward(child(m, "src_embed"), x));
    return gdl_transformer_encode(child(m, "transformer"), x, &mk);
}

/* The logits [N, L, V] for decoder inputs tgt [N, L] (<bos> first) over memory, causal. */
static gdl_tensor *decode(gdl_module *m, inputs *in, const int32_t *tgt, int64_t N, int L, gdl_tensor *memory,
                          gdl_tensor *src_pad, gdl_device dev) {
    gdl_transformer_masks mk;
    gdl_tensor *y = ids_tensor(in, tgt, N, L, dev);
    memset(&mk, 0, sizeof mk);
    mk.tgt_is_causal = 1;
    mk.memory_key_padding_mask = src_pad;
    if (!y || !(mk.tgt_key_padding_mask = pad_mask(in, tgt, N, L, dev))) return NULL;
    y = gdl_forward(child(m, "tgt_pos"), gdl_forward(child(m, "tgt_embed"), y));
    return gdl_forward(child(m, "generator"), gdl_transformer_decode(child(m, "transformer"), y, memory, &mk));
}

/* Mean cross entropy of a batch under teacher forcing (decoder input tgt_in, targets tgt_out), padding ignored;
   its input tensors kept in in. */
static gdl_tensor *batch_loss(gdl_module *m, inputs *in, const data *d, const int32_t *src, const int32_t *tgt_in,
                              const int32_t *tgt_out, int64_t N, gdl_device dev) {
    gdl_ce_opts co = gdl_ce_defaults();
    int64_t rows[2] = {-1, d->V}, flat = -1;
    gdl_tensor *pad = NULL, *mem = encode(m, in, src, N, d->S, dev, &pad), *y = ids_tensor(in, tgt_out, N, d->T, dev);
    co.ignore_index = GDL_VOCAB_PAD;
    if (!mem || !y) return NULL;
    return gdl_cross_entropy_ex(gdl_reshape(decode(m, in, tgt_in, N, d->T, mem, pad, dev), 2, rows),
                                gdl_reshape(y, 1, &flat), &co);
}

/* ---- decoding ---- */

/* The log-probabilities [N, V] of the next token after the prefixes ids [N, L] (row stride T), on the host. 0 / -1. */
static int next_logprobs(gdl_module *m, const data *d, const int32_t *ids, int64_t N, int L, gdl_tensor *mem,
                         gdl_tensor *pad, gdl_device dev, gdl_real *out) {
    int32_t *pre = (int32_t *)malloc(sizeof *pre * (size_t)(N * L));
    inputs in = {{NULL}, 0};
    gdl_tensor *lp;
    int64_t i;
    int rc;
    if (!pre) return -1;
    for (i = 0; i < N; i++) memcpy(pre + i * L, ids + i * d->T, sizeof *pre * (size_t)L);
    lp = gdl_log_softmax(gdl_select(decode(m, &in, pre, N, L, mem, pad, dev), 1, L - 1), 1);
    free(pre);
    rc = lp ? gdl_copy_to_host(lp, out, sizeof *out * (size_t)(N * d->V)) : -1;
    inputs_free(&in);
    return rc < 0 ? -1 : 0;
}

/* Greedy decoding of N sources: hyp [N, T] gets each one's German ids up to (not with) <eos>, padded; <pad>, <unk>
   (no pair has a character outside the vocabulary) and <bos> are never chosen. 0 / -1. */
static int greedy(gdl_module *m, const data *d, const int32_t *src, int64_t N, gdl_device dev, int32_t *hyp) {
    int32_t *ids = (int32_t *)calloc((size_t)(N * d->T), sizeof *ids);
    gdl_real *lp = (gdl_real *)malloc(sizeof *lp * (size_t)(N * d->V));
    char *done = (char *)calloc((size_t)N, 1);
    inputs in = {{NULL}, 0};
    gdl_tensor *pad = NULL, *mem;
    int64_t i, left = N;
    int L, rc = -1;
    int32_t k, best;
    if (!ids || !lp || !done || !(mem = encode(m, &in, src, N, d->S, dev, &pad))) goto out;
    memset(hyp, 0, sizeof *hyp * (size_t)(N * d->T));
    for (i = 0; i < N; i++) ids[i * d->T] = d->bos;
    for (L = 1; L < d->T && left > 0; L++) {
        if (next_logprobs(m, d, ids, N, L, mem, pad, dev, lp) < 0) goto out;
        for (i = 0; i < N; i++) {
            if (done[i]) continue;
            for (best = GDL_VOCAB_UNK + 1, k = best + 1; k < d->V; k++) /* never <pad>, <unk> or <bos> */
                if (k != d->bos && lp[i * d->V + k] > lp[i * d->V + best]) best = k;
            if (best == d->eos) done[i] = 1, left--;
            else ids[i * d->T + L] = hyp[i * d->T + L - 1] = best;
        }
    }
    rc = 0;
out:
    inputs_free(&in);
    free(ids), free(lp), free(done);
    return rc;
}

typedef struct cand {
    double score;
    int64_t row;
    int32_t token;
} cand;

/* best first; ties by row, then token (the order of PyTorch's twin) */
static int cmp_cand(const void *a, const void *b) {
    const cand *x = (const cand *)a, *y = (const cand *)b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    if (x->row != y->row) return x->row < y->row ? -1 : 1;
    return (x->token > y->token) - (x->token < y->token);
}

/* Beam search of width K for N sources, scored by the sum of log-probabilities: each step extends every live
   hypothesis by every token (not <pad>, <unk> or <bos>), keeps the K best that do not end, and records the best that
   ends with <eos>; a source is done when that scores at least as well as every live one (scores only fall), or at
   the length limit (then the best live one, unended, if none ended). hyp as greedy's. 0 / -1. */
static int beam(gdl_module *m, const data *d, const int32_t *src, int64_t N, int K, gdl_device dev, int32_t *hyp) {
    int64_t R = N * K, i, r, nc, left;
    int32_t *rsrc = (int32_t *)malloc(sizeof *rsrc * (size_t)(R * d->S)), *ids = (int32_t *)calloc((size_t)(R * d->T), 4),
            *next = (int32_t *)calloc((size_t)(R * d->T), 4);
    gdl_real *lp = (gdl_real *)malloc(sizeof *lp * (size_t)(R * d->V));
    double *score = (double *)malloc(sizeof *score * (size_t)R), *fin = (double *)malloc(sizeof *fin * (size_t)N);
    cand *cs = (cand *)malloc(sizeof *cs * (size_t)K * (size_t)d->V);
    char *done = (char *)calloc((size_t)N, 1);
    inputs in = {{NULL}, 0};
    gdl_tensor *pad = NULL, *mem;
    int L, rc = -1, k, live;
    int32_t c;
    if (!rsrc || !ids || !next || !lp || !score || !fin || !cs || !done) goto out;
    for (r = 0; r < R; r++) {
        memcpy(rsrc + r * d->S, src + (r / K) * d->S, sizeof *rsrc * (size_t)d->S);
        ids[r * d->T] = d->bos;
        score[r] = r % K ? -INFINITY : 0; /* one live hypothesis to start */
    }
    for (i = 0; i < N; i++) fin[i] = -INFINITY;
    memset(hyp, 0, sizeof *hyp * (size_t)(N * d->T));
    if (!(mem = encode(m, &in, rsrc, R, d->S, dev, &pad))) goto out;
    for (L = 1, left = N; L < d->T && left > 0; L++) {
        if (next_logprobs(m, d, ids, R, L, mem, pad, dev, lp) < 0) goto out;
        memcpy(next, ids, sizeof *ids * (size_t)(R * d->T));
        for (i = 0; i < N; i++) {
            if (done[i]) continue;
            for (nc = 0, k = 0; k < K; k++)
                for (r = i * K + k, c = GDL_VOCAB_UNK + 1; score[r] > -INFINITY && c < d->V; c++)
                    if (c != d->bos) cs[nc].score = score[r] + lp[r * d->V + c], cs[nc].row = r, cs[nc++].token = c;
            qsort(cs, (size_t)nc, sizeof *cs, cmp_cand);
            for (live = 0, k = 0; k < nc && live < K; k++) {
                r = cs[k].row;
                if (cs[k].token == d->eos) { /* ended: recorded when the best so far, not kept alive */
                    if (cs[k].score > fin[i]) {
                        fin[i] = cs[k].score;
                        memset(hyp + i * d->T, 0, sizeof *hyp * (size_t)d->T);
                        memcpy(hyp + i * d->T, ids + r * d->T + 1, sizeof *hyp * (size_t)(L - 1));
                    }
                    continue;
                }
                memcpy(next + (i * K + live) * d->T, ids + r * d->T, sizeof *ids * (size_t)d->T);
                next[(i * K + live) * d->T + L] = cs[k].token;
                score[i * K + live++] = cs[k].score; /* cs holds the scores read */
            }
            for (k = live; k < K; k++) score[i * K + k] = -INFINITY;
            if (live == 0 || fin[i] >= score[i * K]) done[i] = 1, left--;
            else if (L == d->T - 1 && fin[i] == -INFINITY) /* the limit: the best live one, unended */
                memcpy(hyp + i * d->T, next + i * K * d->T + 1, sizeof *hyp * (size_t)(d->T - 1));
        }
        memcpy(ids, next, sizeof *ids * (size_t)(R * d->T));
    }
    rc = 0;
out:
    inputs_free(&in);
    free(rsrc), free(ids), free(next), free(lp), free(score), free(fin), free(cs), free(done);
    return rc;
}

/* ids up to the first padding (or n) */
static int id_len(const int32_t *ids, int n) {
    int k = 0;
    while (k < n && ids[k] != GDL_VOCAB_PAD) k++;
    return k;
}

/* Levenshtein distance of a[0, n) and b[0, m) (m < 64) */
static int edit_distance(const int32_t *a, int n, const int32_t *b, int m) {
    int row[64], i, j, diag, up;
    for (j = 0; j <= m; j++) row[j] = j;
    for (i = 1; i <= n; i++) {
        diag = row[0];
        row[0] = i;
        for (j = 1; j <= m; j++) {
            up = row[j];
            row[j] = a[i - 1] == b[j - 1] ? diag : 1 + (diag < up ? (diag < row[j - 1] ? diag : row[j - 1]) : (up < row[j - 1] ? up : row[j - 1]));
            diag = up;
        }
    }
    return row[m];
}

typedef struct scores {
    int64_t exact, edits, ref_chars, n;
} scores;

static void score_add(scores *s, const int32_t *hyp, const int32_t *ref_out, int T, int32_t eos) {
    int n = id_len(hyp, T), m = 0;
    while (m < T && ref_out[m] != eos && ref_out[m] != GDL_VOCAB_PAD) m++;
    s->exact += n == m && !memcmp(hyp, ref_out, sizeof *hyp * (size_t)n);
    s->edits += edit_distance(hyp, n, ref_out, m);
    s->ref_chars += m;
    s->n++;
}

/* ---- training ---- */

typedef struct opts {
    int steps, d_model, nhead, enc_layers, dec_layers, ff, max_src, max_tgt, warmup, log_interval, eval_interval,
        eval_pairs, beam_width, show;
    double dropout, lr, min_lr, weight_decay, grad_clip;
    const char *save, *save_init, *dump;
} opts;

typedef struct run {
    const opts *o;
    const data *d;
    s2s_config *c;
    int B;
    gdl_device dev;
    gdl_module *model;
    gdl_optimizer *opt;
    gdl_scheduler *sched;
    gdl_tensor **params;
    int np;
    int64_t *perm; /* the epoch's order of the training pairs */
    int32_t *bsrc, *bin, *bout; /* the batch */
    double *times;
    int32_t *dump_src, *dump_in, *dump_out; /* with --dump-batches: every batch */
    FILE *csv;
} run;

/* Batch `step` (0-based) of the run: pairs perm[...] of the epoch, a new permutation (Fisher-Yates from
   gdl_hash64(seed, epoch)) each epoch. */
static void make_batch(run *r, uint64_t seed, int64_t step) {
    const data *d = r->d;
    int64_t per = d->n_train / r->B, epoch = step / per, at = (step % per) * r->B, i, j, t;
    if (step % per == 0) {
        for (i = 0; i < d->n_train; i++) r->perm[i] = i;
        for (i = d->n_train - 1; i > 0; i--) {
            j = (int64_t)(gdl_hash64(gdl_hash64(seed, (uint64_t)epoch), (uint64_t)i) % (uint64_t)(i + 1));
            t = r->perm[i], r->perm[i] = r->perm[j], r->perm[j] = t;
        }
    }
    for (i = 0; i < r->B; i++) {
        int64_t p = r->perm[at + i];
        memcpy(r->bsrc + i * d->S, d->train_src + p * d->S, sizeof(int32_t) * (size_t)d->S);
        memcpy(r->bin + i * d->T, d->train_in + p * d->T, sizeof(int32_t) * (size_t)d->T);
        memcpy(r->bout + i * d->T, d->train_out + p * d->T, sizeof(int32_t) * (size_t)d->T);
    }
}

/* The held-out loss (teacher forcing) over the first eval_pairs held-out pairs, in batches of B. 0 / -1. */
static int heldout_loss(run *r, double *mean) {
    const data *d = r->d;
    int64_t n = r->o->eval_pairs, i, b, tokens = 0, k;
    int grad = gdl_set_grad_enabled(0), rc = 0;
    double sum = 0;
    gdl_module_train(r->model, 0);
    for (i = 0; i < n && rc == 0; i += b) {
        inputs in = {{NULL}, 0};
        gdl_tensor *loss;
        int64_t tk = 0;
        b = n - i < r->B ? n - i : r->B;
        for (k = 0; k < b * d->T; k++) tk += d->val_out[i * d->T + k] != GDL_VOCAB_PAD;
        gdl_arena_reset();
        if (!(loss = batch_loss(r->model, &in, d, d->val_src + i * d->S, d->val_in + i * d->T, d->val_out + i * d->T, b,
                                r->dev)))
            rc = -1;
        else sum += gdl_item(loss) * (double)tk, tokens += tk;
        inputs_free(&in);
    }
    gdl_set_grad_enabled(grad);
    gdl_module_train(r->model, 1);
    *mean = tokens ? sum / (double)tokens : NAN;
    return rc;
}

/* the characters (code points) of UTF-8 text, for aligning columns */
static int utf8_chars(const char *s) {
    int n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* Decodes the first eval_pairs held-out pairs (width 1: greedy), in chunks; the scores, and the first `show`
   translations printed. 0 / -1. */
static int translate(run *r, int width, int show, scores *s) {
    const data *d = r->d;
    int64_t n = r->o->eval_pairs, chunk = width > 1 ? 32 : 256, i, b, k;
    int32_t *hyp = (int32_t *)malloc(sizeof *hyp * (size_t)(chunk * d->T));
    int grad = gdl_set_grad_enabled(0), rc = 0;
    char text[256];
    memset(s, 0, sizeof *s);
    gdl_module_train(r->model, 0);
    for (i = 0; hyp && i < n && rc == 0; i += b) {
        b = n - i < chunk ? n - i : chunk;
        gdl_arena_reset();
        if ((width > 1 ? beam(r->model, d, d->val_src + i * d->S, b, width, r->dev, hyp)
                       : greedy(r->model, d, d->val_src + i * d->S, b, r->dev, hyp)) < 0) {
            rc = -1;
            break;
        }
        for (k = 0; k < b; k++) {
            score_add(s, hyp + k * d->T, d->val_out + (i + k) * d->T, d->T, d->eos);
            if (i + k < show && gdl_vocab_decode(d->vocab, hyp + k * d->T, id_len(hyp + k * d->T, d->T), text, sizeof text) >= 0) {
                printf("  %-18s -> %s%*s (%s)%s\n", d->val_en[i + k], text, 22 - utf8_chars(text), "", d->val_de[i + k],
                       strcmp(text, d->val_de[i + k]) ? "" : "  right");
            }
        }
    }
    gdl_set_grad_enabled(grad);
    gdl_module_train(r->model, 1);
    free(hyp);
    return hyp ? rc : -1;
}

/* The held-out loss at a step (0: before training) with the mean training loss and speed since the last one; a
   CSV row (gdl_fit's metrics CSV, its "epoch" column numbering the --eval-interval periods, accuracy NaN: the
   exact-match figures come at the end). 0 / -1. */
static int report(run *r, int step, int rows, double sum, double secs) {
    gdl_epoch_stats st;
    memset(&st, 0, sizeof st);
    if (heldout_loss(r, &st.val_loss) < 0) return -1;
    if (step == 0) {
        printf("eval 0: held-out %.6f\n", st.val_loss);
        return 0;
    }
    st.epoch = step / r->o->eval_interval + (step % r->o->eval_interval != 0);
    st.loss = sum / rows;
    st.accuracy = st.val_accuracy = NAN;
    st.seconds = secs;
    st.samples = (int64_t)rows * r->B;
    st.samples_per_sec = st.samples / secs;
    printf("eval %d: train %.6f held-out %.6f lr %.2e, %.1f s, %.0f pairs/s\n", step, st.loss, st.val_loss,
           gdl_optim_get_lr(r->opt, 0), secs, st.samples_per_sec);
    return r->csv ? gdl_metrics_csv_row(r->csv, &st) : 0;
}

/* One step: forward, loss, backward, clipping, AdamW, the schedule. 0 / -1. */
static int train_step(run *r, double *loss_out) {
    inputs in = {{NULL}, 0};
    gdl_tensor *loss;
    int rc = 0;
    gdl_arena_reset();
    if (gdl_zero_grad(r->opt) < 0 || !(loss = batch_loss(r->model, &in, r->d, r->bsrc, r->bin, r->bout, r->B, r->dev)) ||
        gdl_backward(loss) < 0 || (r->o->grad_clip > 0 && gdl_clip_grad_norm_nosync(r->params, r->np, r->o->grad_clip) < 0) ||
        gdl_step(r->opt) < 0 || gdl_scheduler_step(r->sched) < 0)
        rc = -1;
    else *loss_out = gdl_item(loss);
    inputs_free(&in);
    return rc;
}

static int train(run *r, uint64_t seed) {
    const opts *o = r->o;
    size_t bs = (size_t)r->B * (size_t)r->d->S, bt = (size_t)r->B * (size_t)r->d->T;
    double loss, t0, flops = 0; /* flops: the training steps' (gdl_flops_count) */
    ex_steplog log = {0, 0, 0};
    int step, due;
    if (report(r, 0, 0, 0, 0) < 0) return -1;
    for (step = 1; step <= o->steps; step++) {
        make_batch(r, seed, step - 1);
        if (r->dump_src) {
            memcpy(r->dump_src + (step - 1) * bs, r->bsrc, sizeof(int32_t) * bs);
            memcpy(r->dump_in + (step - 1) * bt, r->bin, sizeof(int32_t) * bt);
            memcpy(r->dump_out + (step - 1) * bt, r->bout, sizeof(int32_t) * bt);
        }
        t0 = gdl_now();
        gdl_flops_reset();
        if (train_step(r, &loss) < 0) return -1;
        r->times[step - 1] = gdl_now() - t0;
        flops += (double)gdl_flops_count(NULL, NULL);
        due = ex_steplog_add(&log, "seq2seq", step, o->steps, loss, r->times[step - 1], o->log_interval, o->eval_interval);
        if (due < 0 || (due && report(r, step, log.rows, log.sum, log.secs) < 0)) return -1;
        if (due) memset(&log, 0, sizeof log);
    }
    ex_print_flops(flops, ex_print_median_step(r->times, o->steps) * o->steps, o->steps, r->dev, GDL_F32); /* at the median */
    return 0;
}

/* --dump-batches: every training batch (train.src [steps, B, S], train.tgt_in and train.tgt_out [steps, B, T]),
   the held-out pairs decoded at the end (val.src [n, S], val.tgt_in, val.tgt_out [n, T]) and as metadata every
   setting the twin needs. 0 / -1. */
static int dump_write(const char *path, run *r) {
    const opts *o = r->o;
    const data *d = r->d;
    int64_t ts[3] = {o->steps, r->B, d->S}, tt[3] = {o->steps, r->B, d->T}, vs[2] = {o->eval_pairs, d->S},
            vt[2] = {o->eval_pairs, d->T};
    gdl_st_tensor t[6] = {{"train.src", "I32", 3, ts, r->dump_src}, {"train.tgt_in", "I32", 3, tt, r->dump_in},
                          {"train.tgt_out", "I32", 3, tt, r->dump_out}, {"val.src", "I32", 2, vs, d->val_src},
                          {"val.tgt_in", "I32", 2, vt, d->val_in}, {"val.tgt_out", "I32", 2, vt, d->val_out}};
    const char *keys[] = {"d_model", "nhead", "enc_layers", "dec_layers", "ff", "S", "T", "V", "bos", "eos", "dropout",
                          "batch_size", "steps", "lr", "min_lr", "warmup", "beta1", "beta2", "eps", "weight_decay",
                          "grad_clip", "log_interval", "eval_interval", "eval_pairs", "beam"};
    double v[25] = {r->c->d_model, r->c->nhead, r->c->enc_layers, r->c->dec_layers, r->c->ff, d->S, d->T, d->V, d->bos,
                    d->eos, r->c->dropout, r->B, o->steps, o->lr, o->min_lr, o->warmup, 0.9, 0.98, 1e-9,
                    o->weight_decay, o->grad_clip, o->log_interval, o->eval_interval, o->eval_pairs, o->beam_width};
    char buf[25][32];
    const char *vals[25];
    int k;
    for (k = 0; k < 25; k++) {
        snprintf(buf[k], sizeof buf[k], "%.17g", v[k]);
        vals[k] = buf[k];
    }
    return gdl_st_write(path, 6, t, 25, keys, vals);
}

/* AdamW in two groups (no decay on biases and norms), the schedule (lr (t+1)/(warmup+1), then cosine to
   min_lr), the parameter list for clipping, the buffers. 0 / -1. */
static int make_training(run *r) {
    const opts *o = r->o;
    size_t bs = (size_t)r->B * (size_t)r->d->S, bt = (size_t)r->B * (size_t)r->d->T;
    if (!(r->opt = gdl_adamw_new(o->lr, 0.9, 0.98, 1e-9, o->weight_decay)) || gdl_optim_add_module(r->opt, r->model, 1) < 0 ||
        !(r->sched = gdl_warmup_cosine_lr_new(r->opt, o->warmup, 1.0 / (o->warmup + 1), o->steps - o->warmup, o->min_lr)) ||
        !(r->params = ex_param_list("seq2seq", r->model, &r->np)))
        return -1;
    r->times = (double *)malloc(sizeof *r->times * (size_t)o->steps);
    r->perm = (int64_t *)malloc(sizeof *r->perm * (size_t)r->d->n_train);
    r->bsrc = (int32_t *)malloc(sizeof(int32_t) * bs);
    r->bin = (int32_t *)malloc(sizeof(int32_t) * bt);
    r->bout = (int32_t *)malloc(sizeof(int32_t) * bt);
    if (o->dump) {
        r->dump_src = (int32_t *)malloc(sizeof(int32_t) * bs * (size_t)o->steps);
        r->dump_in = (int32_t *)malloc(sizeof(int32_t) * bt * (size_t)o->steps);
        r->dump_out = (int32_t *)malloc(sizeof(int32_t) * bt * (size_t)o->steps);
    }
    if (!r->times || !r->perm || !r->bsrc || !r->bin || !r->bout ||
        (o->dump && (!r->dump_src || !r->dump_in || !r->dump_out))) {
        fprintf(stderr, "seq2seq: out of memory\n");
        return -1;
    }
    return 0;
}

static void run_free(run *r) {
    gdl_scheduler_free(r->sched);
    gdl_optim_free(r->opt);
    gdl_module_free(r->model);
    if (r->csv) fclose(r->csv);
    free(r->params), free(r->times), free(r->perm), free(r->bsrc), free(r->bin), free(r->bout);
    free(r->dump_src), free(r->dump_in), free(r->dump_out);
}

/* The held-out figures: greedy, then beam search when --beam > 1. 0 / -1. */
static int final_figures(run *r) {
    scores g, b;
    double t0 = gdl_now();
    printf("held-out translations (greedy), english -> model (dictionary):\n");
    if (translate(r, 1, r->o->show, &g) < 0) return -1;
    printf("greedy: exact match %.2f%% (%lld of %lld), char accuracy %.2f%%, %.1f s\n", 100.0 * (double)g.exact / (double)g.n,
           (long long)g.exact, (long long)g.n, 100.0 * (1 - (double)g.edits / (double)g.ref_chars), gdl_now() - t0);
    if (r->o->beam_width < 2) return 0;
    t0 = gdl_now();
    if (translate(r, r->o->beam_width, 0, &b) < 0) return -1;
    printf("beam %d: exact match %.2f%% (%lld of %lld), char accuracy %.2f%%, %.1f s\n", r->o->beam_width,
           100.0 * (double)b.exact / (double)b.n, (long long)b.exact, (long long)b.n,
           100.0 * (1 - (double)b.edits / (double)b.ref_chars), gdl_now() - t0);
    return 0;
}

int main(int argc, char **argv) {
    ex_args a = ex_defaults(1, 64);
    opts o = {3000, 128, 4, 2, 2, 512, 16, 20, -1, 100, 500, 1000, 4, 12, 0.0, 2e-3, 1e-5, 0.01, 1.0, NULL, NULL, NULL};
    const ex_opt extra[] = {
        {"--steps", 'i', &o.steps, 1, 1e7, "training steps", "N"},
        {"--width", 'i', &o.d_model, 1, 8192, "model width (d_model), a multiple of --heads", "N"},
        {"--heads", 'i', &o.nhead, 1, 64, "attention heads (nhead)", "N"},
        {"--enc-layers", 'i', &o.enc_layers, 1, 64, "encoder layers", "N"},
        {"--dec-layers", 'i', &o.dec_layers, 1, 64, "decoder layers", "N"},
        {"--ff", 'i', &o.ff, 1, 65536, "feed-forward width (dim_feedforward)", "N"},
        {"--max-src", 'i', &o.max_src, 2, 60, "longest English word kept, in characters", "N"},
        {"--max-tgt", 'i', &o.max_tgt, 1, 60, "longest German translation kept, in characters", "N"},
        {"--dropout", 'd', &o.dropout, 0, 0.95, "dropout probability", "X"},
        {"--lr", 'd', &o.lr, 0, 10, "peak learning rate", "X"},
        {"--min-lr", 'd', &o.min_lr, 0, 10, "learning rate at the end of the cosine decay", "X"},
        {"--warmup", 'i', &o.warmup, 0, 1e7, "linear warm-up steps, fewer than --steps (default steps/20)", "N"},
        {"--weight-decay", 'd', &o.weight_decay, 0, 10, "AdamW's weight decay of the 2-D weights", "X"},
        {"--grad-clip", 'd', &o.grad_clip, 0, 1e9, "gradient norm clipping (0: off)", "X"},
        {"--log-interval", 'i', &o.log_interval, 1, 1e7, "print the step's training loss every N steps", "N"},
        {"--eval-interval", 'i', &o.eval_interval, 1, 1e7, "held-out loss every N steps and at the end", "N"},
        {"--eval-pairs", 'i', &o.eval_pairs, 1, 1e7, "held-out pairs evaluated and decoded (the first N)", "N"},
        {"--beam", 'i', &o.beam_width, 1, 64, "beam width of the second decoding (1: greedy only)", "N"},
        {"--show", 'i', &o.show, 0, 1e6, "held-out translations printed", "N"},
        {"--save", 'o', &o.save, 0, 0, "write the trained model (safetensors, PyTorch's names)", "FILE"},
        {"--save-init", 'o', &o.save_init, 0, 0, "write the initial model (for bench/pytorch/seq2seq.py)", "FILE"},
        {"--dump-batches", 'o', &o.dump, 0, 0, "write the batches' ids (for bench/pytorch/seq2seq.py)", "FILE"}};
    pair_list pairs;
    data d;
    s2s_config c;
    run r;
    int parsed, rc = 1;

    setvbuf(stdout, NULL, _IOLBF, 0);
    a.data_help = "the dictionary's folder (default: $GPUDL_DATA/freedict, ./data/freedict, /usr/share/dictd)";
    parsed = ex_parse_opts(&a, argc, argv, EX_DATA | EX_BATCH | EX_DEVICE | EX_SEED | EX_CSV | EX_PROFILE | EX_OUT_DIR |
                           EX_PRECISION,
                           "Trains an encoder-decoder Transformer to translate English words into German, character by "
                           "character, on Debian's FreeDict English-German dictionary; then decodes held-out words.",
                           extra, (int)(sizeof extra / sizeof extra[0]));
    if (parsed) return parsed == 1 ? 0 : 2;
    if (o.warmup < 0) o.warmup = o.steps / 20;
    if (o.d_model % o.nhead != 0 || o.warmup >= o.steps) {
        fprintf(stderr, "seq2seq: %s\n", o.warmup >= o.steps ? "--warmup must be below --steps"
                                                               : "--width must be a multiple of --heads");
        return 2;
    }
    memset(&d, 0, sizeof d);
    memset(&r, 0, sizeof r);
    memset(&pairs, 0, sizeof pairs);
    r.o = &o;
    r.d = &d;
    r.c = &c;
    r.B = a.batch_size;
    r.dev = a.device;
    gdl_manual_seed(a.seed);
    if (load_pairs(a.data, o.max_src, o.max_tgt, &pairs) < 0) {
        rc = 1;
        goto done;
    }
    if (encode_data(&pairs, o.max_src, o.max_tgt, &d) < 0) goto fail;
    if (d.n_train < r.B || d.n_val < 1) {
        fprintf(stderr, "seq2seq: %lld training pairs, %lld held out: too few for a batch of %d\n", (long long)d.n_train,
                (long long)d.n_val, r.B);
        goto done;
    }
    if (o.eval_pairs > d.n_val) o.eval_pairs = (int)d.n_val;
    c.d_model = o.d_model;
    c.nhead = o.nhead;
    c.enc_layers = o.enc_layers;
    c.dec_layers = o.dec_layers;
    c.ff = o.ff;
    c.S = d.S;
    c.T = d.T;
    c.V = d.V;
    c.dropout = o.dropout;
    if (!(r.model = s2s_new(&c))) goto fail;
    if (o.save_init) {
        if (gdl_save_model(r.model, o.save_init) < 0) goto fail;
        ex_wrote(o.save_init);
    }
    if (gdl_module_to(r.model, a.device) < 0 || make_training(&r) < 0 || (a.csv && !(r.csv = gdl_metrics_csv_open(a.csv))))
        goto fail;
    printf("seq2seq on %s (%s): nn.Transformer width %d, %d heads, %d+%d layers, ff %d, batch %d, %.2fM parameters, "
           "dropout %g\n", gdl_device_str(a.device), gdl_device_name(a.device), c.d_model, c.nhead, c.enc_layers,
           c.dec_layers, c.ff, r.B, gdl_module_num_params(r.model) / 1e6, c.dropout);
    printf("data: FreeDict English-German, %lld training and %lld held-out pairs (English <= %d, German <= %d "
           "characters), vocabulary %d\n", (long long)d.n_train, (long long)d.n_val, o.max_src, o.max_tgt, d.V);
    if (a.profile && gdl_profile_begin() < 0) goto fail;
    if (train(&r, a.seed) < 0 || (a.profile && ex_profile_print("the training", a.device) < 0)) goto fail;
    if (a.csv) {
        fclose(r.csv);
        r.csv = NULL;
        ex_wrote(a.csv);
    }
    if (o.dump) {
        if (dump_write(o.dump, &r) < 0) goto fail;
        ex_wrote(o.dump);
    }
    if (o.save) {
        if (gdl_save_model(r.model, o.save) < 0) goto fail;
        ex_wrote(o.save);
    }
    if (final_figures(&r) < 0) goto fail;
    rc = 0;
fail:
    if (rc == 1) fprintf(stderr, "seq2seq: %s\n", gdl_last_error());
done:
    run_free(&r);
    data_free(&d);
    pairs_free(&pairs);
    gdl_shutdown();
    return rc;
}
