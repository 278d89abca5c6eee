/* src/cpu/index.h — the CPU's indexing kernels (strided copies, gather and
   scatter-add, comparisons, where, tril / triu, cumsum). */


/* ---- indexing and copies: strided copies, gather / scatter-add, comparisons, where, tril/triu, cumsum ----
   Elements of any dtype move as bytes (a copy or a selection is exact in every dtype); what adds, adds in
   f32 (the f32 kernels' type) and rounds once. */

/* the offsets of element i (row-major over shape) in k strided operands */
static void gdl__elem_offsets(int ndim, const int64_t *shape, int64_t i, int k, const int64_t *const *str, int64_t *off) {
    int d, j;
    for (j = 0; j < k; j++) off[j] = 0;
    for (d = ndim - 1; d >= 0; d--) {
        int64_t id = i % shape[d];
        i /= shape[d];
        for (j = 0; j < k; j++) off[j] += id * str[j][d];
    }
}
static int64_t gdl__numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    int d;
    for (d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

/* the arguments of the strided loops below, through a.ctx */
typedef struct {
    int ndim, dim, op;
    const int64_t *shape, *s0, *s1, *s2;
    gdl_dtype t0, t1, dt;
    const void *p0, *p1, *p2;
    void *out;
    int64_t xn;
} gdl__strided_job;

/* part over the n elements of j's shape, on the pool (accumulate: gdl__args') */
static int gdl__strided_run(const gdl__strided_job *j, gdl__loop_fn part, int accumulate) {
    gdl__args a = gdl__args_none();
    const int64_t n = gdl__numel_of(j->ndim, j->shape);
    a.ctx = j;
    a.accumulate = accumulate;
    gdl__parallel_loop(n, n, part, &a);
    return 0;
}

static void gdl__strided_copy_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__strided_job *j = (const gdl__strided_job *)a.ctx;
    const int64_t *str[2] = {j->s0, j->s1};
    size_t es = gdl_dtype_size(j->dt);
    int64_t i, off[2];
    for (i = lo; i < hi; i++) {
        const char *src;
        char *dst;
        gdl__elem_offsets(j->ndim, j->shape, i, 2, str, off);
        src = (const char *)j->p0 + (size_t)off[0] * es;
        dst = (char *)j->out + (size_t)off[1] * es;
        if (!a.accumulate) memcpy(dst, src, es);
        else if (j->dt == GDL_F32) *(gdl_real *)dst += *(const gdl_real *)src;
        else gdl__store(dst, j->dt, (double)(float)(gdl__load(dst, j->dt) + gdl__load(src, j->dt)));
    }
}
static int gdl__cpu_strided_copy(gdl_dtype dt, int ndim, const int64_t *shape, const void *src, const int64_t *sstr,
                                 void *dst, const int64_t *dstr, int accumulate) {
    gdl__strided_job j;
    memset(&j, 0, sizeof j);
    j.ndim = ndim; j.shape = shape; j.s0 = sstr; j.s1 = dstr; j.dt = dt; j.p0 = src; j.out = dst;
    return gdl__strided_run(&j, gdl__strided_copy_part, accumulate);
}

/* gather's and scatter_add's element i: the offset in x (dim's coordinate from the index) and the index;
   -1 for an index outside [0, xn) */
static int64_t gdl__gather_offset(const gdl__strided_job *j, int64_t i) {
    int64_t rem = i, xo = 0, io = 0, c;
    int d;
    for (d = j->ndim - 1; d >= 0; d--) {
        int64_t id = rem % j->shape[d];
        rem /= j->shape[d];
        if (d != j->dim) xo += id * j->s0[d];
        io += id * j->s1[d];
    }
    c = ((const int32_t *)j->p1)[io];
    return c < 0 || c >= j->xn ? -1 : xo + c * j->s0[j->dim];
}
static void gdl__gather_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__strided_job *j = (const gdl__strided_job *)a.ctx;
    size_t es = gdl_dtype_size(j->dt);
    int64_t i;
    for (i = lo; i < hi; i++) {
        int64_t o = gdl__gather_offset(j, i);
        if (o < 0) memset((char *)j->out + (size_t)i * es, 0, es);
        else memcpy((char *)j->out + (size_t)i * es, (const char *)j->p0 + (size_t)o * es, es);
    }
}
static int gdl__cpu_gather(gdl_dtype dt, int ndim, const int64_t *shape, int dim, const void *x, const int64_t *xstr,
                           int64_t xn, const int32_t *idx, const int64_t *istr, void *out) {
    gdl__strided_job j;
    memset(&j, 0, sizeof j);
    j.ndim = ndim; j.dim = dim; j.shape = shape; j.s0 = xstr; j.s1 = istr; j.dt = dt; j.p0 = x; j.p1 = idx;
    j.out = out; j.xn = xn;
    return gdl__strided_run(&j, gdl__gather_part, 0);
}
/* serial: destinations repeat, and the sums keep one order (the same bits for any thread count) */
static int gdl__cpu_scatter_add(gdl_dtype st, int ndim, const int64_t *shape, int dim, const void *src,
                                const int32_t *idx, const int64_t *istr, gdl_real *dst, const int64_t *dstr, int64_t dn) {
    gdl__strided_job j;
    int64_t i, n = gdl__numel_of(ndim, shape);
    size_t es = gdl_dtype_size(st);
    memset(&j, 0, sizeof j);
    j.ndim = ndim; j.dim = dim; j.shape = shape; j.s0 = dstr; j.s1 = istr; j.p1 = idx; j.xn = dn;
    for (i = 0; i < n; i++) {
        int64_t o = gdl__gather_offset(&j, i);
        if (o >= 0)
            dst[o] += st == GDL_F32 ? ((const gdl_real *)src)[i] : (gdl_real)gdl__load((const char *)src + (size_t)i * es, st);
    }
    return 0;
}

/* a compare operand: integers exactly; an integer facing a float is rounded to f32 (PyTorch's promotion) */
static double gdl__cmp_load(const void *p, gdl_dtype dt, int64_t i, int as_float) {
    double v = gdl__load((const char *)p + (size_t)i * gdl_dtype_size(dt), dt);
    return as_float && dt == GDL_I32 ? (double)(float)v : v;
}
static void gdl__compare_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__strided_job *j = (const gdl__strided_job *)a.ctx;
    const int64_t *str[2] = {j->s0, j->s1};
    int64_t i, off[2];
    int as_float = !((j->t0 == GDL_I32 || j->t0 == GDL_U8) && (j->t1 == GDL_I32 || j->t1 == GDL_U8));
    for (i = lo; i < hi; i++) {
        gdl__elem_offsets(j->ndim, j->shape, i, 2, str, off);
        ((uint8_t *)j->out)[i] = (uint8_t)gdl_compare1_double(j->op, gdl__cmp_load(j->p0, j->t0, off[0], as_float),
                                                              gdl__cmp_load(j->p1, j->t1, off[1], as_float));
    }
}
static int gdl__cpu_compare(int op, int ndim, const int64_t *shape, gdl_dtype at, const void *a, const int64_t *astr,
                            gdl_dtype bt, const void *b, const int64_t *bstr, uint8_t *out) {
    gdl__strided_job j;
    memset(&j, 0, sizeof j);
    j.op = op; j.ndim = ndim; j.shape = shape; j.s0 = astr; j.s1 = bstr; j.t0 = at; j.t1 = bt; j.p0 = a; j.p1 = b;
    j.out = out;
    return gdl__strided_run(&j, gdl__compare_part, 0);
}

static void gdl__where_part(gdl__args a, int64_t lo, int64_t hi) {
    const gdl__strided_job *j = (const gdl__strided_job *)a.ctx;
    const int64_t *str[3] = {j->s0, j->s1, j->s2};
    size_t es = gdl_dtype_size(j->dt);
    int64_t i, off[3];
    for (i = lo; i < hi; i++) {
        gdl__elem_offsets(j->ndim, j->shape, i, 3, str, off);
        memcpy((char *)j->out + (size_t)i * es,
               ((const uint8_t *)j->p0)[off[0]] ? (const char *)j->p1 + (size_t)off[1] * es
                                                : (const char *)j->p2 + (size_t)off[2] * es,
               es);
    }
}
static int gdl__cpu_where(gdl_dtype dt, int ndim, const int64_t *shape, const uint8_t *cond, const int64_t *cstr,
                          const void *a, const int64_t *astr, const void *b, const int64_t *bstr, void *out) {
    gdl__strided_job j;
    memset(&j, 0, sizeof j);
    j.ndim = ndim; j.shape = shape; j.s0 = cstr; j.s1 = astr; j.s2 = bstr; j.dt = dt;
    j.p0 = cond; j.p1 = a; j.p2 = b; j.out = out;
    return gdl__strided_run(&j, gdl__where_part, 0);
}

static int gdl__cpu_tri(gdl_dtype dt, int upper, int64_t batch, int64_t R, int64_t C, int64_t k, const void *x, void *y,
                        int accumulate) {
    size_t es = gdl_dtype_size(dt);
    int64_t b, r, c;
    for (b = 0; b < batch; b++)
        for (r = 0; r < R; r++)
            for (c = 0; c < C; c++) {
                int64_t i = (b * R + r) * C + c;
                int keep = upper ? c - r >= k : c - r <= k;
                char *q = (char *)y + (size_t)i * es;
                const char *p = (const char *)x + (size_t)i * es;
                if (accumulate) {
                    if (!keep) continue;
                    if (dt == GDL_F32) *(gdl_real *)q += *(const gdl_real *)p;
                    else gdl__store(q, dt, (double)(float)(gdl__load(q, dt) + gdl__load(p, dt)));
                } else if (keep) {
                    memcpy(q, p, es);
                } else {
                    memset(q, 0, es);
                }
            }
    return 0;
}

/* sums in double, as the reductions */
static void gdl__cumsum_line(const gdl__args *a, int64_t base, int64_t at) {
    const int64_t n = a->n, inner = a->inner;
    const gdl_real *p = a->x + base;
    gdl_real *q = a->out + base;
    double s = 0;
    int64_t k;
    (void)at;
    for (k = 0; k < n; k++) {
        int64_t kk = a->op ? n - 1 - k : k;
        s += p[kk * inner];
        if (a->accumulate) q[kk * inner] += (gdl_real)s;
        else q[kk * inner] = (gdl_real)s;
    }
}
static void gdl__cumsum_part(gdl__args a, int64_t lo, int64_t hi) { gdl__for_lines(&a, lo, hi, gdl__cumsum_line); }
static int gdl__cpu_cumsum(int64_t outer, int64_t n, int64_t inner, const gdl_real *x, gdl_real *y, int reverse,
                           int accumulate) {
    gdl__args a = gdl__args_none();
    a.op = reverse; a.n = n; a.inner = inner; a.x = x; a.out = y; a.accumulate = accumulate;
    gdl__parallel_loop(outer, outer * n * inner, gdl__cumsum_part, &a);
    return 0;
}
