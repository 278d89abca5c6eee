/* ---------------------------------------------------------------------------
   src/api/text.h   Text data: vocabularies, language-modelling windows, labelled
   text, Debian's fortunes, fixed splits, and sampling from logits.

       gdl_text_list all, tr, va;
       gdl_fortunes_english(NULL, &all);                  // apt-get install fortunes
       gdl_text_split(&all, 0.1, 0, &tr, &va);            // fixed: by content
       char *txt = gdl_text_join(&tr, &len);
       gdl_vocab *v = gdl_vocab_build(txt, len, NULL);    // char level
       int64_t n = gdl_vocab_encode(v, txt, len, NULL, 0);    // count, then fill
       ... ids = malloc(n * 4); gdl_vocab_encode(v, txt, len, ids, n);
       gdl_dataset *ds = gdl_dataset_lm_windows(ids, n, 64, 1, (int)gdl_vocab_size(v));
       // gdl_loader_new(ds, ...): x i32 [B,64], y i32 [B,64] (x shifted by one)

   Vocabularies. Ids 0 and 1 are always GDL_VOCAB_PAD ("<pad>") and
   GDL_VOCAB_UNK ("<unk>"); the tokens follow, most frequent first (ties:
   byte order), so a vocabulary is a function of its text and options only.
   Char level: a token is one Unicode code point (the text must be valid
   UTF-8; "é" is one token, not two bytes). Word level: a token is a maximal
   run of ASCII letters, digits, apostrophes or non-ASCII bytes (UTF-8 words
   stay whole), or any other single non-space byte (punctuation); whitespace
   separates and is dropped, so decoding joins word tokens with one space.
   Tokens seen fewer than min_freq times, and those beyond max_size, map to
   <unk>. A vocabulary saves to a UTF-8 text file (one escaped token a line,
   in id order) that gdl_vocab_load reads back to the same ids.

   Splits. gdl_text_split puts an entry in validation when a hash of its
   bytes and the seed falls under val_fraction: the split does not depend on
   the entries' order or number, and duplicate entries (fortune files have
   some) land on the same side, so validation never sees a training entry.
   ------------------------------------------------------------------------- */

#define GDL_VOCAB_PAD 0
#define GDL_VOCAB_UNK 1
#define GDL_VOCAB_CHAR 0
#define GDL_VOCAB_WORD 1

typedef struct gdl_vocab gdl_vocab;

typedef struct gdl_vocab_opts {
    int level;           /* GDL_VOCAB_CHAR (default) or GDL_VOCAB_WORD */
    int64_t min_freq;    /* >= 1 (default 1): rarer tokens are <unk> */
    int64_t max_size;    /* 0 (default): no cap; else >= 3, the most frequent kept, specials included */
    int lowercase;       /* word level: ASCII letters lowered before counting and encoding; default 0 */
} gdl_vocab_opts;

/* char level, min_freq 1, no cap, no lowercasing */
GPUDL_API gdl_vocab_opts gdl_vocab_defaults(void);
/* The vocabulary of text[0, len) (o NULL: defaults). NULL + error (empty text, bad UTF-8, bad options). */
GPUDL_API gdl_vocab *gdl_vocab_build(const char *text, size_t len, const gdl_vocab_opts *o);
GPUDL_API void gdl_vocab_free(gdl_vocab *v);                   /* NULL-safe */
GPUDL_API int64_t gdl_vocab_size(const gdl_vocab *v);          /* tokens, the two specials included; -1 */
GPUDL_API int gdl_vocab_level(const gdl_vocab *v);             /* GDL_VOCAB_CHAR / _WORD; -1 */
/* The token of id (NUL-terminated UTF-8, owned by v); NULL + error when out of range. */
GPUDL_API const char *gdl_vocab_token(const gdl_vocab *v, int32_t id);
/* The id of token (a whole token: one code point, or one word), GDL_VOCAB_UNK if absent; -1 + error. */
GPUDL_API int32_t gdl_vocab_id(const gdl_vocab *v, const char *token);
/* Encodes text[0, len): returns the number of ids (writes the first min(that, cap) to ids, which may be
   NULL with cap 0, to count); -1 + error (bad UTF-8 at char level). */
GPUDL_API int64_t gdl_vocab_encode(const gdl_vocab *v, const char *text, size_t len, int32_t *ids, int64_t cap);
/* Decodes n ids: returns the bytes of the text, NUL not counted; writes at most cap-1 of them and a NUL
   (snprintf's contract; buf may be NULL with cap 0). <pad> decodes to nothing, <unk> to U+FFFD at char
   level and "<unk>" at word level. -1 + error for an id out of range. */
GPUDL_API int64_t gdl_vocab_decode(const gdl_vocab *v, const int32_t *ids, int64_t n, char *buf, size_t cap);
/* Writes v to path (a temporary renamed over it: never half-written). 0 / -1. */
GPUDL_API int gdl_vocab_save(const gdl_vocab *v, const char *path);
GPUDL_API gdl_vocab *gdl_vocab_load(const char *path);         /* NULL + error */

/* Language-modelling windows of tokens[0, len) (copied): sample i is x = tokens[i*stride, i*stride+T),
   target y = tokens[i*stride+1, i*stride+T+1); (len - T - 1) / stride + 1 samples. Every token is in
   [0, vocab_size). Through gdl_loader: x i32 [B,T], y i32 [B,T] (flatten both for gdl_cross_entropy's
   [B*T,V] logits and i32 [B*T] targets). NULL + error (len < T + 1, T < 1, stride < 1, bad token). */
GPUDL_API gdl_dataset *gdl_dataset_lm_windows(const int32_t *tokens, int64_t len, int64_t T, int64_t stride,
                                              int vocab_size);

/* Texts with their own label. Entries are NUL-terminated too; read, do not change. */
typedef struct gdl_text_list {
    int64_t n;
    char **texts;          /* n texts, each NUL-terminated UTF-8 */
    size_t *lens;          /* their bytes */
    int32_t *labels;       /* n labels in [0, num_classes) */
    int num_classes;
    char **class_names;    /* num_classes names (e.g. "en", "de", or a file's name) */
} gdl_text_list;

/* Labelled texts encoded with v, each cut to max_len ids and padded with GDL_VOCAB_PAD: samples i32
   [max_len], the list's labels, and lengths (min(ids, max_len), at least 1: an empty text is one
   <pad>), which gdl_loader_lengths hands out per batch. NULL + error. */
GPUDL_API gdl_dataset *gdl_dataset_text_classes(const gdl_text_list *texts, const gdl_vocab *v, int64_t max_len);

/* The entries of a strfile-format text file (entries separated by lines holding a single '%', each
   entry's final newline dropped, empty entries skipped), appended to out with label `label`
   (num_classes grows to label + 1, class_names[label] set to name when NULL). out zeroed (memset)
   starts a list. 0 / -1 (unreadable file, bad UTF-8, no entry). */
GPUDL_API int gdl_text_read_fortune_file(const char *path, int32_t label, const char *name, gdl_text_list *out);
/* Each file of paths[0, n) is one class: gdl_text_read_fortune_file(paths[c], c, its base name). */
GPUDL_API int gdl_text_read_files(const char *const *paths, int n, gdl_text_list *out);
/* Every regular file in dir (no ".dat"/".u8", none starting with '.'), sorted by name, with label `label`;
   directories, FIFOs, devices and sockets are passed over, and a file is read no further than its size
   when opened (a FIFO cannot block the read, a link to /dev/zero cannot fill the memory). */
GPUDL_API int gdl_text_read_dir(const char *dir, int32_t label, const char *name, gdl_text_list *out);
/* Debian's fortunes: dir, else $GPUDL_DATA/fortunes when GPUDL_DATA is set, else ./data/fortunes, then
   /usr/share/games/fortunes (`make data-text`). English: the files of fortunes-min and fortunes (a
   fixed list, ascii-art and translate-me left out), one class "en". 0 / -1 + how to get them. */
GPUDL_API int gdl_fortunes_english(const char *dir_or_NULL, gdl_text_list *out);
/* Language identification: classes en (as above), de, es, it, pl, ru (the top files of fortunes-de,
   -es, -it, -pl, -ru; the offensive subdirectories left out). 0 / -1 + how to get them. */
GPUDL_API int gdl_fortunes_languages(const char *dir_or_NULL, gdl_text_list *out);
/* The fixed split (see above): val_fraction in [0, 1). Both outputs are new lists. 0 / -1. */
GPUDL_API int gdl_text_split(const gdl_text_list *all, double val_fraction, uint64_t seed, gdl_text_list *train,
                             gdl_text_list *val);
/* The texts concatenated, each ending in a newline (free with gdl_text_free); NULL + error. */
GPUDL_API char *gdl_text_join(const gdl_text_list *l, size_t *len);
GPUDL_API void gdl_text_list_free(gdl_text_list *l);          /* frees the contents, zeroes it */
GPUDL_API void gdl_text_free(void *p);                         /* what gdl_text_join returned */

/* One token per row of logits [N,V] (or [V]; any float dtype and device): softmax(logits / temperature)
   over the top_k largest logits only (ties: the lower id), sampled with the uniform number
   gdl_hash64(seed, row): the same seed gives the same ids. top_k in [1, V] (V: no cut); temperature 0
   is greedy (argmax, the limit as it goes to 0), else > 0 and finite. out: N ids. 0 / -1 + error. */
GPUDL_API int gdl_sample_logits(gdl_tensor *logits, double temperature, int top_k, uint64_t seed, int32_t *out);
