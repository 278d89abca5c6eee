// ----------------------------------------------------------------------------
// indexing and copies: strided copies (permute, slicing), gather and
// scatter-add (index_select, gather), comparisons, where, tril/triu, cumsum.
// One thread per output element, its offsets from its row-major index; the
// selections and copies move elements as they are (exact in every dtype),
// what adds loads to f32 and rounds once (gdl__ld / gdl__st).

// offsets of element i in the two strided operands of g (after gdl__cu_coalesce)
__device__ __forceinline__ void gdl__cu_offsets2(const gdl__cu_bshape &g, int64_t i, int64_t *oa, int64_t *ob) {
    int64_t rem = i, a = 0, b = 0;
    for (int d = g.nd - 1; d >= 0; d--) {
        int64_t id = d ? rem % g.shape[d] : rem;
        rem = d ? rem / g.shape[d] : 0;
        a += id * g.as[d];
        b += id * g.bs[d];
    }
    *oa = a;
    *ob = b;
}

// T: an unsigned integer of the element's size (a copy moves bits)
template <typename T> __global__ void gdl__k_strided_copy(gdl__cu_bshape g, int64_t n, const T *src, T *dst) {
    GDL_CU_LOOP(i, n) {
        int64_t os, od;
        gdl__cu_offsets2(g, i, &os, &od);
        dst[od] = src[os];
    }
}
// T: float, __half or __nv_bfloat16; no two elements share a destination
template <typename T> __global__ void gdl__k_strided_add(gdl__cu_bshape g, int64_t n, const T *src, T *dst) {
    GDL_CU_LOOP(i, n) {
        int64_t os, od;
        gdl__cu_offsets2(g, i, &os, &od);
        dst[od] = gdl__st<T>(gdl__ld(dst[od]) + gdl__ld(src[os]));
    }
}

// one launch for either kernel, gdl__k_strided_copy<T> or gdl__k_strided_add<T> (through a pointer: the
// template's commas would split GDL_CU_LAUNCH's arguments)
template <typename T>
static int gdl__cu_strided_t(void (*gdl__k_strided)(gdl__cu_bshape, int64_t, const T *, T *), const gdl__cu_bshape &g,
                             int64_t n, const void *src, void *dst) {
    GDL_CU_LAUNCH(gdl__k_strided, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        g, n, (const T *)src, (T *)dst);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_strided_copy(gdl_dtype dt, int ndim, const int64_t *shape, const void *src, const int64_t *sstr,
                                void *dst, const int64_t *dstr, int accumulate) {
    gdl__cu_bshape g;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (n <= 0) return 0;
    gdl__cu_coalesce(ndim, shape, sstr, dstr, &g);
    if (accumulate)
        return gdl__cu_dispatch("strided_copy (accumulating)", dt, 1, [&](auto t) {
            typedef typename decltype(t)::type T;
            return gdl__cu_strided_t<T>(gdl__k_strided_add<T>, g, n, src, dst);
        });
    switch (gdl_dtype_size(dt)) {
    case 1: return gdl__cu_strided_t<uint8_t>(gdl__k_strided_copy<uint8_t>, g, n, src, dst);
    case 2: return gdl__cu_strided_t<uint16_t>(gdl__k_strided_copy<uint16_t>, g, n, src, dst);
    case 4: return gdl__cu_strided_t<uint32_t>(gdl__k_strided_copy<uint32_t>, g, n, src, dst);
    default:
        gdl__set_error("gdl_cuda: strided_copy of an invalid dtype %d", (int)dt);
        return -1;
    }
}

// gather / scatter_add: the index tensor's shape, x's (dst's) strides, the index's strides
struct gdl__cu_gshape {
    int nd, dim;
    int64_t shape[GDL_MAX_DIMS], xs[GDL_MAX_DIMS], is[GDL_MAX_DIMS];
};

// element i's offset in x, -1 for an index outside [0, xn)
__device__ __forceinline__ int64_t gdl__cu_gather_offset(const gdl__cu_gshape &g, int64_t xn, const int32_t *idx, int64_t i) {
    int64_t rem = i, xo = 0, io = 0;
    for (int d = g.nd - 1; d >= 0; d--) {
        int64_t id = rem % g.shape[d];
        rem /= g.shape[d];
        if (d != g.dim) xo += id * g.xs[d];
        io += id * g.is[d];
    }
    int32_t c = idx[io];
    return c < 0 || c >= xn ? -1 : xo + (int64_t)c * g.xs[g.dim];
}

template <typename T>
__global__ void gdl__k_gather(gdl__cu_gshape g, int64_t n, int64_t xn, const T *x, const int32_t *idx, T *out) {
    GDL_CU_LOOP(i, n) {
        int64_t o = gdl__cu_gather_offset(g, xn, idx, i);
        out[i] = o < 0 ? (T)0 : x[o];
    }
}

// indices repeat, so several threads may add into one element: atomics
template <typename T>
__global__ void gdl__k_scatter_add(gdl__cu_gshape g, int64_t n, int64_t xn, const T *src, const int32_t *idx, float *dst) {
    GDL_CU_LOOP(i, n) {
        int64_t o = gdl__cu_gather_offset(g, xn, idx, i);
        if (o >= 0) atomicAdd(&dst[o], gdl__ld(src[i]));
    }
}

static int gdl__cu_gshape_of(int ndim, const int64_t *shape, int dim, const int64_t *xstr, const int64_t *istr,
                             gdl__cu_gshape *g) {
    int64_t n = 1;
    g->nd = ndim;
    g->dim = dim;
    for (int d = 0; d < ndim; d++) {
        g->shape[d] = shape[d];
        g->xs[d] = xstr[d];
        g->is[d] = istr[d];
        n *= shape[d];
    }
    return n > 0;
}

template <typename T>
static int gdl__cu_gather_t(const gdl__cu_gshape &g, int64_t n, int64_t xn, const void *x, const int32_t *idx, void *out) {
    void (*gdl__k_gather_)(gdl__cu_gshape, int64_t, int64_t, const T *, const int32_t *, T *) = gdl__k_gather<T>;
    GDL_CU_LAUNCH(gdl__k_gather_, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        g, n, xn, (const T *)x, idx, (T *)out);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_gather(gdl_dtype dt, int ndim, const int64_t *shape, int dim, const void *x, const int64_t *xstr,
                          int64_t xn, const int32_t *idx, const int64_t *istr, void *out) {
    gdl__cu_gshape g;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (!gdl__cu_gshape_of(ndim, shape, dim, xstr, istr, &g)) return 0;
    switch (gdl_dtype_size(dt)) {
    case 1: return gdl__cu_gather_t<uint8_t>(g, n, xn, x, idx, out);
    case 2: return gdl__cu_gather_t<uint16_t>(g, n, xn, x, idx, out);
    case 4: return gdl__cu_gather_t<uint32_t>(g, n, xn, x, idx, out);
    default:
        gdl__set_error("gdl_cuda: gather of an invalid dtype %d", (int)dt);
        return -1;
    }
}

static int gdl__cu_scatter_add(gdl_dtype st, int ndim, const int64_t *shape, int dim, const void *src,
                               const int32_t *idx, const int64_t *istr, float *dst, const int64_t *dstr, int64_t dn) {
    gdl__cu_gshape g;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (!gdl__cu_gshape_of(ndim, shape, dim, dstr, istr, &g)) return 0;
    return gdl__cu_dispatch("scatter_add", st, 1, [&](auto t) {
        typedef typename decltype(t)::type T;
        void (*gdl__k_scatter_add_)(gdl__cu_gshape, int64_t, int64_t, const T *, const int32_t *, float *) =
            gdl__k_scatter_add<T>;
        GDL_CU_LAUNCH(gdl__k_scatter_add_, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            g, n, dn, (const T *)src, idx, dst);
        GDL_CU_LAUNCHED();
        return 0;
    });
}

// a compare operand of runtime dtype dt: floats as f32, integers as themselves
__device__ __forceinline__ float gdl__ld_f32_of(const void *p, int dt, int64_t i) {
    switch (dt) {
    case GDL_F32: return ((const float *)p)[i];
    case GDL_I32: return (float)((const int32_t *)p)[i];
    case GDL_U8: return (float)((const uint8_t *)p)[i];
    case GDL_F16: return gdl__f16_to_f32(((const uint16_t *)p)[i]);
    default: return gdl__bf16_to_f32(((const uint16_t *)p)[i]);
    }
}
__device__ __forceinline__ int32_t gdl__ld_i32_of(const void *p, int dt, int64_t i) {
    return dt == GDL_U8 ? (int32_t)((const uint8_t *)p)[i] : ((const int32_t *)p)[i];
}

// the dtypes' switches are uniform across the grid (as gdl__k_cast's)
__global__ void gdl__k_compare(int op, gdl__cu_bshape g, int64_t n, int at, const void *a, int bt, const void *b,
                               uint8_t *out) {
    bool ints = (at == GDL_I32 || at == GDL_U8) && (bt == GDL_I32 || bt == GDL_U8);
    GDL_CU_LOOP(i, n) {
        int64_t oa, ob;
        gdl__cu_offsets2(g, i, &oa, &ob);
        out[i] = ints ? gdl_compare1_i32(op, gdl__ld_i32_of(a, at, oa), gdl__ld_i32_of(b, bt, ob))
                      : gdl_compare1_float(op, gdl__ld_f32_of(a, at, oa), gdl__ld_f32_of(b, bt, ob));
    }
}

static int gdl__cu_compare(int op, int ndim, const int64_t *shape, gdl_dtype at, const void *a, const int64_t *astr,
                           gdl_dtype bt, const void *b, const int64_t *bstr, uint8_t *out) {
    gdl__cu_bshape g;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (n <= 0) return 0;
    if ((unsigned)at >= GDL_DTYPE_COUNT || (unsigned)bt >= GDL_DTYPE_COUNT) {
        gdl__set_error("gdl_cuda: compare of invalid dtypes %d and %d", (int)at, (int)bt);
        return -1;
    }
    gdl__cu_coalesce(ndim, shape, astr, bstr, &g);
    GDL_CU_LAUNCH(gdl__k_compare, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        op, g, n, (int)at, a, (int)bt, b, out);
    GDL_CU_LAUNCHED();
    return 0;
}

// where's three strided operands
struct gdl__cu_wshape {
    int nd;
    int64_t shape[GDL_MAX_DIMS], cs[GDL_MAX_DIMS], as[GDL_MAX_DIMS], bs[GDL_MAX_DIMS];
};

template <typename T>
__global__ void gdl__k_where(gdl__cu_wshape g, int64_t n, const uint8_t *cond, const T *a, const T *b, T *out) {
    GDL_CU_LOOP(i, n) {
        int64_t rem = i, oc = 0, oa = 0, ob = 0;
        for (int d = g.nd - 1; d >= 0; d--) {
            int64_t id = rem % g.shape[d];
            rem /= g.shape[d];
            oc += id * g.cs[d];
            oa += id * g.as[d];
            ob += id * g.bs[d];
        }
        out[i] = cond[oc] ? a[oa] : b[ob];
    }
}

static int gdl__cu_where(gdl_dtype dt, int ndim, const int64_t *shape, const uint8_t *cond, const int64_t *cstr,
                         const void *a, const int64_t *astr, const void *b, const int64_t *bstr, void *out) {
    gdl__cu_wshape g;
    int64_t n = 1;
    g.nd = ndim;
    for (int d = 0; d < ndim; d++) {
        g.shape[d] = shape[d];
        g.cs[d] = cstr[d];
        g.as[d] = astr[d];
        g.bs[d] = bstr[d];
        n *= shape[d];
    }
    if (n <= 0) return 0;
    return gdl__cu_dispatch("where", dt, 1, [&](auto t) {
        typedef typename decltype(t)::type T;
        void (*gdl__k_where_)(gdl__cu_wshape, int64_t, const uint8_t *, const T *, const T *, T *) = gdl__k_where<T>;
        GDL_CU_LAUNCH(gdl__k_where_, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            g, n, cond, (const T *)a, (const T *)b, (T *)out);
        GDL_CU_LAUNCHED();
        return 0;
    });
}

template <typename T>
__global__ void gdl__k_tri(int upper, int64_t n, int64_t R, int64_t C, int64_t k, const T *x, T *y, int accumulate) {
    GDL_CU_LOOP(i, n) {
        int64_t c = i % C, r = (i / C) % R;
        bool keep = upper ? c - r >= k : c - r <= k;
        if (accumulate) {
            if (keep) y[i] = gdl__st<T>(gdl__ld(y[i]) + gdl__ld(x[i]));
        } else {
            y[i] = keep ? x[i] : gdl__st<T>(0.0f);
        }
    }
}

static int gdl__cu_tri(gdl_dtype dt, int upper, int64_t batch, int64_t R, int64_t C, int64_t k, const void *x, void *y,
                       int accumulate) {
    int64_t n = batch * R * C;
    if (n <= 0) return 0;
    return gdl__cu_dispatch("tri", dt, 1, [&](auto t) {
        typedef typename decltype(t)::type T;
        void (*gdl__k_tri_)(int, int64_t, int64_t, int64_t, int64_t, const T *, T *, int) = gdl__k_tri<T>;
        GDL_CU_LAUNCH(gdl__k_tri_, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            upper, n, R, C, k, (const T *)x, (T *)y, accumulate);
        GDL_CU_LAUNCHED();
        return 0;
    });
}

// one thread per (outer, inner) line, scanning it in order: reads coalesced across inner
__global__ void gdl__k_cumsum(int64_t outer, int64_t n, int64_t inner, const float *x, float *y, int reverse,
                              int accumulate) {
    GDL_CU_LOOP(t, outer * inner) {
        int64_t o = t / inner, i = t - o * inner;
        const float *p = x + o * n * inner + i;
        float *q = y + o * n * inner + i, s = 0;
        for (int64_t k = 0; k < n; k++) {
            int64_t kk = reverse ? n - 1 - k : k;
            s += p[kk * inner];
            q[kk * inner] = accumulate ? q[kk * inner] + s : s;
        }
    }
}

static int gdl__cu_cumsum(int64_t outer, int64_t n, int64_t inner, const float *x, float *y, int reverse, int accumulate) {
    if (outer * n * inner <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_cumsum, gdl__cu_grid(outer * inner, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        outer, n, inner, x, y, reverse, accumulate);
    GDL_CU_LAUNCHED();
    return 0;
}
