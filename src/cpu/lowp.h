/* ---- the elementwise entries that take a dtype: native bf16/f16 kernels ----
   f32 operands run the f32 kernels (src/cpu/elementwise.h). For bf16/f16,
   chunks of GDL__LP_CHUNK elements are loaded to f32 on the stack, computed
   with the f32 kernels' formulas (the same expressions, so a result equals
   the f32 kernel's on the same values, then rounded once) and stored. */
#define GDL__LP_CHUNK 256

/* x86's F16C converts 8 halves at a time, rounding to nearest even as
   gdl_f32_to_f16 does; groups holding an infinity or NaN take the scalar
   functions, so every bit (NaN payloads included) stays theirs. (MSVC has no __F16C__: its /arch:AVX2
   implies F16C.) */
#if (defined(__F16C__) || (defined(_MSC_VER) && defined(__AVX2__))) && defined(__AVX__) && !defined(GPUDL_DOUBLE)
#include <immintrin.h>
#define GDL__F16C 1
#endif

/* n elements of src (dtype st: f32 or low) from element off, s apart, as f32 */
static void gdl__lp_get(gdl_dtype st, const void *src, int64_t off, int64_t s, int64_t n, gdl_real *buf) {
    int64_t i = 0, k;
    if (st == GDL_F32) {
        const gdl_real *p = (const gdl_real *)src + off;
        for (i = 0; i < n; i++) buf[i] = p[i * s];
    } else if (st == GDL_F16) {
        const uint16_t *h = (const uint16_t *)src + off;
#ifdef GDL__F16C
        if (s == 1)
            for (; i + 8 <= n; i += 8) {
                __m128i hv = _mm_loadu_si128((const __m128i *)(const void *)(h + i)), e = _mm_set1_epi16(0x7c00);
                if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(hv, e), e)) == 0)
                    _mm256_storeu_ps(buf + i, _mm256_cvtph_ps(hv));
                else
                    for (k = i; k < i + 8; k++) buf[k] = gdl_f16_to_f32(h[k]);
            }
#endif
        for (k = i; k < n; k++) buf[k] = (gdl_real)gdl_f16_to_f32(h[k * s]);
    } else {
        const uint16_t *h = (const uint16_t *)src + off;
        for (i = 0; i < n; i++) buf[i] = (gdl_real)gdl_bf16_to_f32(h[i * s]);
    }
}
/* n contiguous elements of dst (dtype dt) from element off, rounded once from buf */
static void gdl__lp_put(gdl_dtype dt, void *dst, int64_t off, int64_t n, const gdl_real *buf) {
    int64_t i;
    if (dt == GDL_F32) {
        memcpy((gdl_real *)dst + off, buf, sizeof(gdl_real) * (size_t)n);
    } else if (dt == GDL_F16) {
        uint16_t *h = (uint16_t *)dst + off;
        i = 0;
#ifdef GDL__F16C
        for (; i + 8 <= n; i += 8) {
            __m256 v = _mm256_loadu_ps(buf + i);
            /* |v| < inf for all 8 (false for NaN) */
            __m256 fin = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v), _mm256_set1_ps(INFINITY), _CMP_LT_OQ);
            if (_mm256_movemask_ps(fin) == 0xff) {
                _mm_storeu_si128((__m128i *)(void *)(h + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            } else {
                int64_t k;
                for (k = i; k < i + 8; k++) h[k] = gdl_f32_to_f16(buf[k]);
            }
        }
#endif
        for (; i < n; i++) h[i] = gdl_f32_to_f16((float)buf[i]);
    } else {
        uint16_t *h = (uint16_t *)dst + off;
        for (i = 0; i < n; i++) h[i] = gdl_f32_to_bf16((float)buf[i]);
    }
}

/* The parts below read and write a.dt's lx, ly, lgy, lout. */
static void gdl__unary_lp_part(gdl__args a, int64_t lo, int64_t hi) {
    gdl_real xb[GDL__LP_CHUNK], ob[GDL__LP_CHUNK], alpha = a.alpha;
    int64_t c, i, m;
    for (c = lo; c < hi; c += m) {
        m = hi - c < GDL__LP_CHUNK ? hi - c : GDL__LP_CHUNK;
        gdl__lp_get(a.dt, a.lx, c, 1, m, xb);
        switch (a.op) { /* gdl__cpu_unary's loops */
        case GDL_UN_RELU: for (i = 0; i < m; i++) ob[i] = xb[i] > 0 ? xb[i] : 0; break;
        case GDL_UN_SCALE: for (i = 0; i < m; i++) ob[i] = alpha * xb[i]; break;
        case GDL_UN_ADD_SCALAR: for (i = 0; i < m; i++) ob[i] = xb[i] + alpha; break;
        case GDL_UN_GELU_ERF: gdl__gelu_rows(xb, ob, m); break;
        default: for (i = 0; i < m; i++) ob[i] = gdl__unary1(a.op, xb[i], alpha); break;
        }
        gdl__lp_put(a.dt, a.lout, c, m, ob);
    }
}
static int gdl__cpu_unary(gdl_dtype dt, int op, int64_t n, const void *x, void *y, gdl_real alpha) {
    gdl__args a = gdl__args_none();
    if (dt == GDL_F32) return gdl__cpu_unary_f32(op, n, (const gdl_real *)x, (gdl_real *)y, alpha);
    a.dt = dt; a.op = op; a.lx = x; a.lout = y; a.alpha = (gdl_real)alpha;
    gdl__parallel_loop(n, op == GDL_UN_RELU || op == GDL_UN_SCALE || op == GDL_UN_ADD_SCALAR ? n : 8 * n,
                       gdl__unary_lp_part, &a);
    return 0;
}

static void gdl__unary_backward_lp_part(gdl__args a, int64_t lo, int64_t hi) {
    gdl_real xb[GDL__LP_CHUNK], yb[GDL__LP_CHUNK], gyb[GDL__LP_CHUNK], gb[GDL__LP_CHUNK], alpha = a.alpha;
    int64_t c, i, m;
    int op = a.op, need_y = op == GDL_UN_SIGMOID || op == GDL_UN_TANH || op == GDL_UN_EXP || op == GDL_UN_SQRT ||
                            op == GDL_UN_RSQRT;
    for (c = lo; c < hi; c += m) {
        m = hi - c < GDL__LP_CHUNK ? hi - c : GDL__LP_CHUNK;
        gdl__lp_get(a.dt, a.lx, c, 1, m, xb);
        if (need_y) gdl__lp_get(a.dt, a.ly, c, 1, m, yb);
        else for (i = 0; i < m; i++) yb[i] = 0;
        gdl__lp_get(a.dt, a.lgy, c, 1, m, gyb);
        gdl__lp_get(a.dt, a.lout, c, 1, m, gb);
        switch (op) { /* gdl__cpu_unary_backward's loops */
        case GDL_UN_RELU: for (i = 0; i < m; i++) gb[i] += xb[i] > 0 ? gyb[i] : 0; break;
        case GDL_UN_LEAKY_RELU: for (i = 0; i < m; i++) gb[i] += xb[i] > 0 ? gyb[i] : alpha * gyb[i]; break;
        case GDL_UN_CLAMP_MIN: for (i = 0; i < m; i++) gb[i] += xb[i] >= alpha ? gyb[i] : 0; break;
        case GDL_UN_CLAMP_MAX: for (i = 0; i < m; i++) gb[i] += xb[i] <= alpha ? gyb[i] : 0; break;
        case GDL_UN_SCALE: for (i = 0; i < m; i++) gb[i] += alpha * gyb[i]; break;
        case GDL_UN_ADD_SCALAR: for (i = 0; i < m; i++) gb[i] += gyb[i]; break;
        case GDL_UN_SIGMOID: for (i = 0; i < m; i++) gb[i] += gyb[i] * yb[i] * (1 - yb[i]); break;
        case GDL_UN_TANH: for (i = 0; i < m; i++) gb[i] += gyb[i] * (1 - yb[i] * yb[i]); break;
        case GDL_UN_GELU_ERF: gdl__gelu_grad_rows(xb, gyb, gb, m, 1); break;
        default:
            for (i = 0; i < m; i++) gb[i] += (gdl_real)(gyb[i] * gdl__unary_grad1(op, xb[i], yb[i], alpha));
            break;
        }
        gdl__lp_put(a.dt, a.lout, c, m, gb);
    }
}
static int gdl__cpu_unary_backward(gdl_dtype dt, int op, int64_t n, const void *x, const void *y, const void *gy,
                                   void *gx, gdl_real alpha, int accumulate) {
    gdl__args a = gdl__args_none();
    if (dt == GDL_F32)
        return gdl__cpu_unary_backward_f32(op, n, (const gdl_real *)x, (const gdl_real *)y, (const gdl_real *)gy,
                                           (gdl_real *)gx, alpha, accumulate);
    if (!accumulate && n > 0) memset(gx, 0, (size_t)n * gdl_dtype_size(dt)); /* then += onto zeros */
    a.dt = dt; a.op = op; a.lx = x; a.ly = y; a.lgy = gy; a.lout = gx; a.alpha = (gdl_real)alpha;
    gdl__parallel_loop(n, 8 * n, gdl__unary_backward_lp_part, &a);
    return 0;
}

/* the offsets of row r (all dims but the last, row-major) in two strided operands */
static void gdl__row_offsets(int ndim, const int64_t *shape, int64_t r, const int64_t *astr, int64_t *oa,
                             const int64_t *bstr, int64_t *ob) {
    int d;
    *oa = *ob = 0;
    for (d = ndim - 2; d >= 0; d--) {
        int64_t id = r % shape[d];
        r /= shape[d];
        *oa += id * astr[d];
        *ob += id * bstr[d];
    }
}

/* rows [lo, hi); a.ctx: the arguments (their own kinds: strides, three dtypes) */
typedef struct {
    int op, ndim;
    const int64_t *shape, *astr, *bstr;
    gdl_dtype at, bt, ot;
    const void *a, *b;
    void *out;
} gdl__binary_lp_job;
static void gdl__binary_lp_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__binary_lp_job *j = (const gdl__binary_lp_job *)a.ctx;
    int nd = j->ndim;
    int64_t inner = nd ? j->shape[nd - 1] : 1, sa = nd ? j->astr[nd - 1] : 0, sb = nd ? j->bstr[nd - 1] : 0, r, c, m;
    gdl_real ab[GDL__LP_CHUNK], bb[GDL__LP_CHUNK], ob[GDL__LP_CHUNK];
    for (r = lo; r < hi; r++) {
        int64_t oa, ob_;
        gdl__row_offsets(nd, j->shape, r, j->astr, &oa, j->bstr, &ob_);
        for (c = 0; c < inner; c += m) {
            m = inner - c < GDL__LP_CHUNK ? inner - c : GDL__LP_CHUNK;
            gdl__lp_get(j->at, j->a, oa + c * sa, sa, m, ab);
            gdl__lp_get(j->bt, j->b, ob_ + c * sb, sb, m, bb);
            gdl__bin_row(j->op, m, ab, 1, bb, 1, ob);
            gdl__lp_put(j->ot, j->out, r * inner + c, m, ob);
        }
    }
}
static int gdl__cpu_binary(int op, int ndim, const int64_t *shape, gdl_dtype at, const void *a, const int64_t *astr,
                           gdl_dtype bt, const void *b, const int64_t *bstr, gdl_dtype ot, void *out) {
    int64_t rows = 1, inner = ndim ? shape[ndim - 1] : 1;
    int d;
    gdl__binary_lp_job j;
    gdl__args args = gdl__args_none();
    if (at == GDL_F32 && bt == GDL_F32 && ot == GDL_F32)
        return gdl__cpu_binary_f32(op, ndim, shape, (const gdl_real *)a, astr, (const gdl_real *)b, bstr,
                                   (gdl_real *)out);
    for (d = 0; d + 1 < ndim; d++) rows *= shape[d];
    if (inner == 0 || rows == 0) return 0;
    j.op = op; j.ndim = ndim; j.shape = shape; j.astr = astr; j.bstr = bstr;
    j.at = at; j.bt = bt; j.ot = ot; j.a = a; j.b = b; j.out = out;
    args.ctx = &j;
    gdl__parallel_loop(rows, rows * inner, gdl__binary_lp_part, &args);
    return 0;
}

/* all f32: gdl__cpu_sum_to_f32 into dst; else into a zeroed f32 buffer over
   dst's elements, then added to dst and rounded: the f32 path's gradient of
   an f32 copy, then its cast */
static int gdl__cpu_sum_to(int ndim, const int64_t *shape, gdl_dtype st, const void *src, gdl_dtype dt, void *dst,
                           const int64_t *dstr, gdl_real alpha_) {
    int64_t rows = 1, inner = ndim ? shape[ndim - 1] : 1, r, i, c, m, o = 0, unused = 0, span = 1, idx[GDL_MAX_DIMS] = {0};
    int64_t ds = ndim ? dstr[ndim - 1] : 0, zero[GDL_MAX_DIMS] = {0};
    gdl_real *acc, buf[GDL__LP_CHUNK], db[GDL__LP_CHUNK], alpha = (gdl_real)alpha_;
    int d;
    if (st == GDL_F32 && dt == GDL_F32)
        return gdl__cpu_sum_to_f32(ndim, shape, (const gdl_real *)src, (gdl_real *)dst, dstr, alpha_);
    for (d = 0; d < ndim; d++) {
        if (shape[d] == 0) return 0;
        span += (shape[d] - 1) * dstr[d];
    }
    for (d = 0; d + 1 < ndim; d++) rows *= shape[d];
    if (!(acc = (gdl_real *)GPUDL_MALLOC(sizeof(gdl_real) * (size_t)span))) {
        gdl__set_error("%s: out of host memory for a %s gradient's f32 sums", gdl__be_op, gdl_dtype_name(dt));
        return -1;
    }
    memset(acc, 0, sizeof(gdl_real) * (size_t)span);
    for (r = 0; r < rows; r++) {
        gdl_real *q = acc + o, racc = 0;
        for (c = 0; c < inner; c += m) {
            m = inner - c < GDL__LP_CHUNK ? inner - c : GDL__LP_CHUNK;
            gdl__lp_get(st, src, r * inner + c, 1, m, buf);
            if (ds == 0) for (i = 0; i < m; i++) racc += buf[i];
            else if (ds == 1) for (i = 0; i < m; i++) q[c + i] += alpha * buf[i];
            else for (i = 0; i < m; i++) q[(c + i) * ds] += alpha * buf[i];
        }
        if (ds == 0) q[0] += alpha * racc;
        gdl__odometer_step(ndim, shape, idx, &o, dstr, &unused, zero);
    }
    for (c = 0; c < span; c += m) {
        m = span - c < GDL__LP_CHUNK ? span - c : GDL__LP_CHUNK;
        gdl__lp_get(dt, dst, c, 1, m, db);
        for (i = 0; i < m; i++) db[i] += acc[c + i];
        gdl__lp_put(dt, dst, c, m, db);
    }
    GPUDL_FREE(acc);
    return 0;
}

static void gdl__dropout_lp_part(gdl__args a, int64_t lo, int64_t hi) {
    gdl_real xb[GDL__LP_CHUNK], ob[GDL__LP_CHUNK], scale = a.p < 1 ? (gdl_real)(1.0 / (1.0 - a.p)) : 0;
    int64_t c, i, m;
    for (c = lo; c < hi; c += m) {
        m = hi - c < GDL__LP_CHUNK ? hi - c : GDL__LP_CHUNK;
        gdl__lp_get(a.dt, a.lx, c, 1, m, xb);
        if (a.lgy) { /* backward: gx += kept gy * scale (a dropped element adds 0, as the cast path's f32 gradient) */
            gdl__lp_get(a.dt, a.lout, c, 1, m, ob);
            for (i = 0; i < m; i++) ob[i] += gdl_dropout_keep(a.seed, (uint64_t)(c + i), a.p) ? xb[i] * scale : 0;
        } else {
            for (i = 0; i < m; i++) ob[i] = gdl_dropout_keep(a.seed, (uint64_t)(c + i), a.p) ? xb[i] * scale : 0;
        }
        gdl__lp_put(a.dt, a.lout, c, m, ob);
    }
}
static int gdl__cpu_dropout(gdl_dtype dt, int64_t n, double p, uint64_t seed, const void *x, void *y) {
    gdl__args a = gdl__args_none();
    if (dt == GDL_F32) return gdl__cpu_dropout_f32(n, p, seed, (const gdl_real *)x, (gdl_real *)y);
    a.dt = dt; a.lx = x; a.lout = y; a.p = p; a.seed = seed;
    gdl__parallel_loop(n, n, gdl__dropout_lp_part, &a);
    return 0;
}
static int gdl__cpu_dropout_backward(gdl_dtype dt, int64_t n, double p, uint64_t seed, const void *gy, void *gx) {
    gdl__args a = gdl__args_none();
    if (dt == GDL_F32) return gdl__cpu_dropout_backward_f32(n, p, seed, (const gdl_real *)gy, (gdl_real *)gx);
    a.dt = dt; a.lx = gy; a.lgy = gy; a.lout = gx; a.p = p; a.seed = seed;
    gdl__parallel_loop(n, n, gdl__dropout_lp_part, &a);
    return 0;
}

static int gdl__cpu_copy2d(gdl_dtype dt, int64_t rows, int64_t cols, const void *src, int64_t sld, void *dst,
                           int64_t dld, int accumulate) {
    size_t es = gdl_dtype_size(dt);
    gdl_real sb[GDL__LP_CHUNK], db[GDL__LP_CHUNK];
    int64_t r, c, i, m;
    if (dt == GDL_F32)
        return gdl__cpu_copy2d_f32(rows, cols, (const gdl_real *)src, sld, (gdl_real *)dst, dld, accumulate);
    for (r = 0; r < rows; r++) {
        if (!accumulate) {
            memmove((char *)dst + (size_t)(r * dld) * es, (const char *)src + (size_t)(r * sld) * es, es * (size_t)cols);
            continue;
        }
        for (c = 0; c < cols; c += m) {
            m = cols - c < GDL__LP_CHUNK ? cols - c : GDL__LP_CHUNK;
            gdl__lp_get(dt, src, r * sld + c, 1, m, sb);
            gdl__lp_get(dt, dst, r * dld + c, 1, m, db);
            for (i = 0; i < m; i++) db[i] += sb[i];
            gdl__lp_put(dt, dst, r * dld + c, m, db);
        }
    }
    return 0;
}

