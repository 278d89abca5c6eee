/* src/cpu/reductions.h — the CPU's reductions over a middle dimension (sum,
   mean, max; their backward), argmax, softmax and log-softmax. */


/* Sums over N rows of S contiguous values (row n at x + n * stride), in one order whatever the thread
   count and CPU path: eight double running sums by position mod 8 over each row's first S - S % 8 values,
   the rest of each row in a ninth, the eight added pairwise and the ninth last. One running sum is a chain
   of dependent adds, 4 cycles a value: it was most of a batch norm's time, and a conv bias gradient's. With
   S < 8 all goes to the ninth: the order of the plain loop. gdl__rows_sum: sum x (sq = 0) or sum (x - mu)^2
   (sq = 1); gdl__bn_sums2 (batch norm's backward): sum gy and sum gy (x - mu) is, the same way. */
static double gdl__lanes_total(const double *l, double tail) {
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])) + tail;
}
static double gdl__rows_sum(const gdl_real *x, int64_t N, int64_t stride, int64_t S, double mu, int sq) {
    const int64_t S8 = S - S % 8;
    double l[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tail = 0;
    int64_t n, s;
    int k;
#if defined(GDL__GELU_AVX512)
    __m512d acc = _mm512_setzero_pd(), m = _mm512_set1_pd(mu);
#elif defined(GDL__GELU_AVX2)
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd(), m = _mm256_set1_pd(mu);
#endif
    for (n = 0; n < N; n++) {
        const gdl_real *r = x + n * stride;
        for (s = 0; s < S8; s += 8) {
#if defined(GDL__GELU_AVX512)
            __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(r + s));
            if (sq) v = _mm512_sub_pd(v, m), v = _mm512_mul_pd(v, v);
            acc = _mm512_add_pd(acc, v);
#elif defined(GDL__GELU_AVX2)
            __m256d v0 = _mm256_cvtps_pd(_mm_loadu_ps(r + s)), v1 = _mm256_cvtps_pd(_mm_loadu_ps(r + s + 4));
            if (sq) {
                v0 = _mm256_sub_pd(v0, m), v0 = _mm256_mul_pd(v0, v0);
                v1 = _mm256_sub_pd(v1, m), v1 = _mm256_mul_pd(v1, v1);
            }
            acc0 = _mm256_add_pd(acc0, v0), acc1 = _mm256_add_pd(acc1, v1);
#else
            for (k = 0; k < 8; k++) {
                double d = sq ? r[s + k] - mu : r[s + k];
                l[k] += sq ? d * d : d;
            }
#endif
        }
        for (; s < S; s++) {
            double d = sq ? r[s] - mu : r[s];
            tail += sq ? d * d : d;
        }
    }
#if defined(GDL__GELU_AVX512)
    _mm512_storeu_pd(l, acc);
#elif defined(GDL__GELU_AVX2)
    _mm256_storeu_pd(l, acc0), _mm256_storeu_pd(l + 4, acc1);
#endif
    (void)k;
    return gdl__lanes_total(l, tail);
}
/* [outer][n][inner] layouts: the line (o, i) is the n values at base + k * inner, base = o * n * inner + i;
   a result per line (a reduction's, an argmax's) goes to at = o * inner + i. gdl__for_lines calls
   line(a, base, at) for the lines of the outer indices [lo, hi), i fastest: one walk for the reductions,
   their backward, argmax, softmax and cumsum (src/cpu/index.h), in the order (so with the bits) of the
   loop nests each of them had. line is a static function named at each call: gcc (-O2) inlines
   gdl__for_lines there, and line with it or as a direct call, no call through a pointer. */
typedef void (*gdl__line_fn)(const gdl__args *a, int64_t base, int64_t at);
static void gdl__for_lines(const gdl__args *a, int64_t lo, int64_t hi, gdl__line_fn line) {
    const int64_t n = a->n, inner = a->inner;
    int64_t o, i;
    for (o = lo; o < hi; o++)
        for (i = 0; i < inner; i++) line(a, o * n * inner + i, o * inner + i);
}
static void gdl__reduce_line(const gdl__args *a, int64_t base, int64_t at) {
    const int64_t n = a->n, inner = a->inner;
    const gdl_real *p = a->x + base;
    gdl_real r;
    int64_t k;
    if (a->op == GDL_RED_MAX || a->op == GDL_RED_MIN) {
        /* min as the max of -x: -NaN is NaN, so NaN still wins, and the first of equal values */
        const gdl_real sg = a->op == GDL_RED_MIN ? (gdl_real)-1 : (gdl_real)1;
        int64_t best = 0;
        for (k = 1; k < n; k++)
            if (sg * p[k * inner] > sg * p[best * inner] || (p[k * inner] != p[k * inner] && p[best * inner] == p[best * inner]))
                best = k; /* first max; NaN wins as in PyTorch */
        r = n ? p[best * inner] : sg * (gdl_real)-INFINITY;
        if (a->idx) a->idx[at] = (int32_t)best;
    } else {
        double s = 0;
        if (inner == 1) s = gdl__rows_sum(p, 1, 0, n, 0, 0);
        else
            for (k = 0; k < n; k++) s += p[k * inner];
        r = (gdl_real)(a->op == GDL_RED_MEAN ? s / (double)n : s);
    }
    if (a->accumulate) a->out[at] += r;
    else a->out[at] = r;
}
static void gdl__reduce_part(gdl__args a, int64_t lo, int64_t hi) { gdl__for_lines(&a, lo, hi, gdl__reduce_line); }
/* A sum (or mean) over n with inner > 1, such as a bias gradient (outer 1, n rows, inner columns):
   gdl__reduce_part walks each column down the rows, a cache line per element, one thread when outer
   is 1. Here a task takes a block of GDL__RED_COLS columns and adds whole row segments into one double
   per column: each column's sum is still s = 0, s += x[0], s += x[1], ... (the same bits), but the
   loads are contiguous, the adds vectorise and the blocks spread over the threads. Index t of the loop
   is (outer index, column block), so the work of an index does not depend on the thread count. */
#define GDL__RED_COLS 32
static void gdl__reduce_cols_block(const gdl__args *a, int64_t o, int64_t i0) {
    const int64_t n = a->n, inner = a->inner, w = inner - i0 < GDL__RED_COLS ? inner - i0 : GDL__RED_COLS;
    const gdl_real *p = a->x + o * n * inner + i0;
    gdl_real *out = a->out + o * inner + i0;
    double s[GDL__RED_COLS];
    int64_t i, k;
    for (i = 0; i < GDL__RED_COLS; i++) s[i] = 0;
    if (w == GDL__RED_COLS) /* a constant trip count: gcc vectorises it at -O2 */
        for (k = 0; k < n; k++)
            for (i = 0; i < GDL__RED_COLS; i++) s[i] += p[k * inner + i];
    else
        for (k = 0; k < n; k++)
            for (i = 0; i < w; i++) s[i] += p[k * inner + i];
    for (i = 0; i < w; i++) {
        const gdl_real r = (gdl_real)(a->op == GDL_RED_MEAN ? s[i] / (double)n : s[i]);
        if (a->accumulate) out[i] += r;
        else out[i] = r;
    }
}
static void gdl__reduce_cols_part(gdl__args a, int64_t lo, int64_t hi) {
    const int64_t nb = (a.inner + GDL__RED_COLS - 1) / GDL__RED_COLS;
    int64_t t;
    for (t = lo; t < hi; t++) gdl__reduce_cols_block(&a, t / nb, t % nb * GDL__RED_COLS);
}
static int gdl__cpu_reduce(int op, int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y,
                           int32_t *idx, int accumulate) {
    gdl__args a = gdl__args_none();
    a.op = op; a.n = n; a.inner = inner; a.x = x; a.out = y; a.idx = idx; a.accumulate = accumulate;
    if (op != GDL_RED_MAX && op != GDL_RED_MIN && inner > 1)
        gdl__parallel_units(outer * ((inner + GDL__RED_COLS - 1) / GDL__RED_COLS), outer * n * inner,
                            gdl__reduce_cols_part, &a);
    else
        gdl__parallel_loop(outer, outer * n * inner, gdl__reduce_part, &a);
    return 0;
}


static void gdl__reduce_backward_line(const gdl__args *a, int64_t base, int64_t at) {
    const int64_t n = a->n, inner = a->inner;
    gdl_real g = a->gy[at];
    int64_t k;
    if (a->op == GDL_RED_MAX || a->op == GDL_RED_MIN) {
        a->out[base + a->argmax[at] * inner] += g;
    } else {
        if (a->op == GDL_RED_MEAN) g = (gdl_real)(g / (double)n);
        for (k = 0; k < n; k++) a->out[base + k * inner] += g;
    }
}
static void gdl__reduce_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    gdl__for_lines(&a, lo, hi, gdl__reduce_backward_line);
}
static int gdl__cpu_reduce_backward(int op, int64_t outer, int64_t n, int64_t inner, const gdl_real *gy,
                                    const int32_t *idx, gdl_real *gx) {
    gdl__args a = gdl__args_none();
    a.op = op; a.n = n; a.inner = inner; a.gy = gy; a.argmax = idx; a.out = gx;
    gdl__parallel_loop(outer, outer * n * inner, gdl__reduce_backward_part, &a);
    return 0;
}

static void gdl__argmax_line(const gdl__args *a, int64_t base, int64_t at) {
    const int64_t n = a->n, inner = a->inner;
    const gdl_real *p = a->x + base;
    int64_t best = 0, k;
    for (k = 1; k < n; k++)
        if (p[k * inner] > p[best * inner] || (p[k * inner] != p[k * inner] && p[best * inner] == p[best * inner]))
            best = k; /* first max; NaN wins, as in max_dim and PyTorch */
    a->idx[at] = (int32_t)best;
}
static int gdl__cpu_argmax(int64_t outer, int64_t n, int64_t inner, const gdl_real *x, int32_t *out) {
    gdl__args a = gdl__args_none();
    a.n = n; a.inner = inner; a.x = x; a.idx = out;
    gdl__for_lines(&a, 0, outer, gdl__argmax_line);
    return 0;
}

/* op: log_softmax */
static void gdl__softmax_line(const gdl__args *a, int64_t base, int64_t at) {
    const int64_t n = a->n, inner = a->inner;
    const gdl_real *p = a->x + base;
    gdl_real *q = a->out + base;
    double mx = -INFINITY, s = 0, lse;
    int64_t k;
    (void)at;
    for (k = 0; k < n; k++)
        if (p[k * inner] > mx) mx = p[k * inner];
    for (k = 0; k < n; k++) s += exp(p[k * inner] - mx);
    lse = mx + log(s);
    for (k = 0; k < n; k++)
        q[k * inner] = (gdl_real)(a->op ? p[k * inner] - lse : exp(p[k * inner] - lse));
}
static void gdl__softmax_part(gdl__args a, int64_t lo, int64_t hi) { gdl__for_lines(&a, lo, hi, gdl__softmax_line); }
static int gdl__cpu_softmax(int log_, int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y) {
    gdl__args a = gdl__args_none();
    a.op = log_; a.n = n; a.inner = inner; a.x = x; a.out = y;
    gdl__parallel_loop(outer, outer * n * inner, gdl__softmax_part, &a);
    return 0;
}

static void gdl__softmax_backward_line(const gdl__args *a, int64_t base, int64_t at) {
    const int64_t n = a->n, inner = a->inner;
    const gdl_real *y = a->y, *gy = a->gy;
    double s = 0;
    int64_t k;
    (void)at;
    for (k = 0; k < n; k++)
        s += a->op ? gy[base + k * inner] : gy[base + k * inner] * y[base + k * inner];
    for (k = 0; k < n; k++) {
        int64_t j = base + k * inner;
        a->out[j] += (gdl_real)(a->op ? gy[j] - exp(y[j]) * s : y[j] * (gy[j] - s));
    }
}
static void gdl__softmax_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    gdl__for_lines(&a, lo, hi, gdl__softmax_backward_line);
}
static int gdl__cpu_softmax_backward(int log_, int64_t outer, int64_t n, int64_t inner, const gdl_real *y,
                                     const gdl_real *gy, gdl_real *gx) {
    gdl__args a = gdl__args_none();
    a.op = log_; a.n = n; a.inner = inner; a.y = y; a.gy = gy; a.out = gx;
    gdl__parallel_loop(outer, outer * n * inner, gdl__softmax_backward_part, &a);
    return 0;
}
