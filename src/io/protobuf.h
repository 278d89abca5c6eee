/* src/io/protobuf.h — a small protocol-buffers encoder (the wire format: varints, length-delimited
   fields, fixed 32-bit floats) into a growable byte buffer; gdl_export_onnx writes its ONNX files with it.
   A nested message is opened with a 5-byte room for its length and closed by writing the length and
   moving the body back over the room it did not use, so a message is built in one pass. */

typedef struct gdl__pb {
    unsigned char *p;
    size_t n, cap;
    int oom; /* an allocation failed: every later write is dropped, the caller checks once at the end */
} gdl__pb;

enum { GDL__PB_VARINT = 0, GDL__PB_FIXED64 = 1, GDL__PB_BYTES = 2, GDL__PB_FIXED32 = 5 };

static void gdl__pb_free(gdl__pb *b) {
    GPUDL_FREE(b->p);
    memset(b, 0, sizeof *b);
}

static int gdl__pb_reserve(gdl__pb *b, size_t more) {
    size_t cap;
    unsigned char *q;
    if (b->oom) return -1;
    if (b->n + more <= b->cap) return 0;
    cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more) {
        if (cap > ((size_t)-1) / 2) {
            b->oom = 1;
            return -1;
        }
        cap *= 2;
    }
    if (!(q = (unsigned char *)GPUDL_REALLOC(b->p, cap))) {
        b->oom = 1;
        return -1;
    }
    b->p = q;
    b->cap = cap;
    return 0;
}

static void gdl__pb_raw(gdl__pb *b, const void *data, size_t len) {
    if (!len || gdl__pb_reserve(b, len) < 0) return;
    memcpy(b->p + b->n, data, len);
    b->n += len;
}

static void gdl__pb_varint(gdl__pb *b, uint64_t v) {
    unsigned char tmp[10];
    size_t k = 0;
    do {
        tmp[k++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    gdl__pb_raw(b, tmp, k);
}

static void gdl__pb_tag(gdl__pb *b, int field, int wire) { gdl__pb_varint(b, ((uint64_t)field << 3) | (uint64_t)wire); }

/* int32 / int64 / enum fields: negative values as their 64-bit two's complement (10 bytes), as protobuf does */
static void gdl__pb_int(gdl__pb *b, int field, int64_t v) {
    gdl__pb_tag(b, field, GDL__PB_VARINT);
    gdl__pb_varint(b, (uint64_t)v);
}

static void gdl__pb_bytes(gdl__pb *b, int field, const void *data, size_t len) {
    gdl__pb_tag(b, field, GDL__PB_BYTES);
    gdl__pb_varint(b, (uint64_t)len);
    gdl__pb_raw(b, data, len);
}

static void gdl__pb_str(gdl__pb *b, int field, const char *s) { gdl__pb_bytes(b, field, s, strlen(s)); }

static void gdl__pb_float(gdl__pb *b, int field, float f) {
    unsigned char le[4];
    uint32_t u;
    int k;
    memcpy(&u, &f, 4);
    for (k = 0; k < 4; k++) le[k] = (unsigned char)(u >> (8 * k));
    gdl__pb_tag(b, field, GDL__PB_FIXED32);
    gdl__pb_raw(b, le, 4);
}

/* Opens a nested message in field `field`: returns where its body starts (after a 5-byte room for the
   length, enough for any length below 2^35). */
static size_t gdl__pb_open(gdl__pb *b, int field) {
    gdl__pb_tag(b, field, GDL__PB_BYTES);
    if (gdl__pb_reserve(b, 5) < 0) return 0;
    b->n += 5;
    return b->n;
}

/* Closes the message opened at start: its length in front, the body moved back next to it. */
static void gdl__pb_close(gdl__pb *b, size_t start) {
    unsigned char len[10];
    size_t body, k = 0;
    uint64_t v;
    if (b->oom) return;
    body = b->n - start;
    v = body;
    do {
        len[k++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    memcpy(b->p + start - 5, len, k);
    if (k < 5) memmove(b->p + start - 5 + k, b->p + start, body);
    b->n -= 5 - k;
}

/* ---- the reader: untrusted bytes, every length checked against what is left ---- */

typedef struct gdl__pbr {
    const unsigned char *p, *end;
} gdl__pbr;

/* one field of the message r holds: its number and wire type; a varint's or a fixed field's value in
   *v, a length-delimited field's bytes in *sub. 1: read, 0: the message's end, -1: malformed. */
static int gdl__pbr_next(gdl__pbr *r, int *field, int *wire, uint64_t *v, gdl__pbr *sub) {
    uint64_t key = 0, x = 0;
    int shift, k;
    if (r->p >= r->end) return 0;
    for (shift = 0;; shift += 7) { /* the key: a varint of at most 10 bytes */
        if (r->p >= r->end || shift > 63) return -1;
        key |= (uint64_t)(*r->p & 0x7f) << shift;
        if (!(*r->p++ & 0x80)) break;
    }
    if ((key >> 3) == 0 || (key >> 3) > 0x1fffffff) return -1;
    *field = (int)(key >> 3);
    *wire = (int)(key & 7);
    switch (*wire) {
    case GDL__PB_VARINT:
    case GDL__PB_BYTES:
        for (shift = 0;; shift += 7) {
            if (r->p >= r->end || shift > 63) return -1;
            x |= (uint64_t)(*r->p & 0x7f) << shift;
            if (!(*r->p++ & 0x80)) break;
        }
        if (*wire == GDL__PB_VARINT) {
            *v = x;
            return 1;
        }
        if (x > (uint64_t)(r->end - r->p)) return -1;
        sub->p = r->p;
        sub->end = r->p + x;
        r->p += x;
        return 1;
    case GDL__PB_FIXED32:
    case GDL__PB_FIXED64:
        k = *wire == GDL__PB_FIXED32 ? 4 : 8;
        if (r->end - r->p < k) return -1;
        for (shift = 0; shift < k; shift++) x |= (uint64_t)r->p[shift] << (8 * shift);
        r->p += k;
        *v = x;
        return 1;
    default: return -1; /* groups (3, 4) and the undefined types */
    }
}

/* a varint from r (a packed repeated field's element): 0 / -1 */
static int gdl__pbr_varint(gdl__pbr *r, uint64_t *v) {
    int shift;
    *v = 0;
    for (shift = 0;; shift += 7) {
        if (r->p >= r->end || shift > 63) return -1;
        *v |= (uint64_t)(*r->p & 0x7f) << shift;
        if (!(*r->p++ & 0x80)) return 0;
    }
}
