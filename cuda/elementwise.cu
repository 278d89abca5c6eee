// ----------------------------------------------------------------------------
// elementwise: binary with broadcasting, sum_to, unary

// Shape and strides travel to the kernel by value. Before launch, size-1
// dims are dropped and neighbours that are contiguous in both inputs are
// merged, so [64,128] + [128] becomes 2 dims and [64,128] + [64,128] one.
struct gdl__cu_bshape {
    int nd;
    int64_t shape[GDL_MAX_DIMS], as[GDL_MAX_DIMS], bs[GDL_MAX_DIMS];
};

static void gdl__cu_coalesce(int ndim, const int64_t *shape, const int64_t *astr, const int64_t *bstr,
                             gdl__cu_bshape *g) {
    int k = 0; /* dims kept so far, innermost first, reversed below */
    int64_t sh[GDL_MAX_DIMS], as[GDL_MAX_DIMS], bs[GDL_MAX_DIMS];
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] == 1) continue;
        if (k > 0 && astr[d] == as[k - 1] * sh[k - 1] && bstr[d] == bs[k - 1] * sh[k - 1]) {
            sh[k - 1] *= shape[d]; /* merge into the inner neighbour */
            continue;
        }
        sh[k] = shape[d];
        as[k] = astr[d];
        bs[k] = bstr[d];
        k++;
    }
    g->nd = k;
    for (int i = 0; i < k; i++) {
        g->shape[i] = sh[k - 1 - i];
        g->as[i] = as[k - 1 - i];
        g->bs[i] = bs[k - 1 - i];
    }
}

// ND: the number of dims after coalescing (0: a scalar op), as a template
// argument so the index arithmetic unrolls. TA, TB, TO: the storage types of
// a, b and out, each float, __half or __nv_bfloat16 (any mix: the entry's
// operand dtypes); the operation is in f32 and out rounded once.
template <int ND, typename TA, typename TB, typename TO>
__global__ void gdl__k_binary(int op, gdl__cu_bshape g, int64_t n, const TA *a, const TB *b, TO *out) {
    GDL_CU_LOOP(i, n) {
        int64_t rem = i, oa = 0, ob = 0;
#pragma unroll
        for (int d = ND - 1; d >= 0; d--) {
            int64_t id = d ? rem % g.shape[d] : rem;
            rem = d ? rem / g.shape[d] : 0;
            oa += id * g.as[d];
            ob += id * g.bs[d];
        }
        out[i] = gdl__st<TO>(gdl_binary1_float((enum gdl_binary_op)op, gdl__ld(a[oa]), gdl__ld(b[ob])));
    }
}

// (through a pointer: the template's commas would split GDL_CU_LAUNCH's arguments)
template <int ND, typename TA, typename TB, typename TO>
static void gdl__cu_binary_nd(unsigned grid, int op, const gdl__cu_bshape &g, int64_t n, const TA *a, const TB *b,
                              TO *out) {
    void (*gdl__k_binary_nd)(int, gdl__cu_bshape, int64_t, const TA *, const TB *, TO *) = gdl__k_binary<ND, TA, TB, TO>;
    GDL_CU_LAUNCH(gdl__k_binary_nd, grid, GDL__CU_THREADS, 0, gdl__cu_stream())(op, g, n, a, b, out);
}

template <typename TA, typename TB, typename TO>
static int gdl__cu_binary_t(int op, int ndim, const int64_t *shape, const TA *a, const int64_t *astr, const TB *b,
                            const int64_t *bstr, TO *out) {
    int64_t n = 1;
    gdl__cu_bshape g;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (n <= 0) return 0;
    gdl__cu_coalesce(ndim, shape, astr, bstr, &g);
    unsigned grid = gdl__cu_grid(n, GDL__CU_THREADS);
    switch (g.nd) {
    case 0: gdl__cu_binary_nd<0>(grid, op, g, n, a, b, out); break;
    case 1: gdl__cu_binary_nd<1>(grid, op, g, n, a, b, out); break;
    case 2: gdl__cu_binary_nd<2>(grid, op, g, n, a, b, out); break;
    case 3: gdl__cu_binary_nd<3>(grid, op, g, n, a, b, out); break;
    case 4: gdl__cu_binary_nd<4>(grid, op, g, n, a, b, out); break;
    case 5: gdl__cu_binary_nd<5>(grid, op, g, n, a, b, out); break;
    default: gdl__cu_binary_nd<GDL_MAX_DIMS>(grid, op, g, n, a, b, out); break;
    }
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_binary_f32(int op, int ndim, const int64_t *shape, const float *a, const int64_t *astr,
                          const float *b, const int64_t *bstr, float *out) {
    return gdl__cu_binary_t(op, ndim, shape, a, astr, b, bstr, out);
}

static int gdl__cu_binary(int op, int ndim, const int64_t *shape, gdl_dtype at, const void *a, const int64_t *astr,
                          gdl_dtype bt, const void *b, const int64_t *bstr, gdl_dtype ot, void *out) {
    if (at == GDL_F32 && bt == GDL_F32 && ot == GDL_F32)
        return gdl__cu_binary_f32(op, ndim, shape, (const float *)a, astr, (const float *)b, bstr, (float *)out);
    return gdl__cu_dispatch("binary", at, 1, [&](auto ta) {
        return gdl__cu_dispatch("binary", bt, 1, [&](auto tb) {
            return gdl__cu_dispatch("binary", ot, 1, [&](auto to) {
                typedef typename decltype(ta)::type TA;
                typedef typename decltype(tb)::type TB;
                typedef typename decltype(to)::type TO;
                return gdl__cu_binary_t(op, ndim, shape, (const TA *)a, astr, (const TB *)b, bstr, (TO *)out);
            });
        });
    });
}

// sum_to: dst[i·dstr] += alpha*src[i]. A dim is "reduced" when dst does not
// move along it (dstr 0, size > 1); the others are "kept". Each destination
// element is owned by one thread (or one block), which loops over the source
// elements that map to it: no atomics, the same bits every run.
struct gdl__cu_sumto {
    int nk, nr;
    int64_t kshape[GDL_MAX_DIMS], kdst[GDL_MAX_DIMS], ksrc[GDL_MAX_DIMS]; /* kept dims */
    int64_t rshape[GDL_MAX_DIMS], rsrc[GDL_MAX_DIMS];                     /* reduced dims */
};

// dst and src offsets of destination element t
__device__ __forceinline__ void gdl__sumto_base(const gdl__cu_sumto &g, int64_t t, int64_t *od, int64_t *os) {
    int64_t rem = t, a = 0, b = 0;
    for (int d = g.nk - 1; d >= 0; d--) {
        int64_t id = rem % g.kshape[d];
        rem /= g.kshape[d];
        a += id * g.kdst[d];
        b += id * g.ksrc[d];
    }
    *od = a;
    *os = b;
}

// one thread per destination element; it visits its sources in row-major
// order (an odometer), the order of the CPU loop. into_dst (all f32):
// the sum starts from dst[o] and is stored, as the CPU adds into dst;
// otherwise (a low dtype) it starts from 0 in f32 (the f32 path's
// zeroed gradient of an f32 copy), then is added to dst[o] and rounded once
// (that copy's cast). TS, TD: the storage types of src and dst.
template <typename TS, typename TD>
__global__ void gdl__k_sum_to_thread(gdl__cu_sumto g, int64_t nout, int64_t nred, const TS *src, TD *dst, float alpha,
                                     int into_dst) {
    GDL_CU_LOOP(t, nout) {
        int64_t od, so, idx[GDL_MAX_DIMS] = {};
        gdl__sumto_base(g, t, &od, &so);
        float acc = into_dst ? gdl__ld(dst[od]) : 0.0f;
        for (int64_t j = 0; j < nred; j++) {
            acc += alpha * gdl__ld(src[so]);
            for (int d = g.nr - 1; d >= 0; d--) {
                so += g.rsrc[d];
                if (++idx[d] < g.rshape[d]) break;
                so -= g.rsrc[d] * g.rshape[d];
                idx[d] = 0;
            }
        }
        dst[od] = gdl__st<TD>(into_dst ? acc : gdl__ld(dst[od]) + acc);
    }
}

// one block per destination element, for few outputs with long reductions
// (a bias gradient over a big batch, a sum to a scalar)
template <typename TS, typename TD>
__global__ void gdl__k_sum_to_block(gdl__cu_sumto g, int64_t nout, int64_t nred, const TS *src, TD *dst, float alpha) {
    GDL_CU_ROWS(t, nout) {
        int64_t od, os;
        gdl__sumto_base(g, t, &od, &os);
        float s = 0;
        for (int64_t j = threadIdx.x; j < nred; j += blockDim.x) {
            int64_t rem = j, so = os;
            for (int d = g.nr - 1; d >= 0; d--) {
                int64_t id = rem % g.rshape[d];
                rem /= g.rshape[d];
                so += id * g.rsrc[d];
            }
            s += gdl__ld(src[so]);
        }
        s = gdl__block_sum(s);
        if (threadIdx.x == 0) dst[od] = gdl__st<TD>(gdl__ld(dst[od]) + alpha * s);
    }
}

// the kept and reduced dims of a sum_to, outer to inner; 0 when there is nothing to do
static int gdl__cu_sumto_plan(int ndim, const int64_t *shape, const int64_t *dstr, gdl__cu_sumto *g, int64_t *nout_,
                              int64_t *nred_, int *block) {
    int64_t n = 1, nout = 1, nred = 1, sstr = 1;
    int inner_reduced = 0, seen_inner = 0;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (n <= 0) return 0;
    g->nk = g->nr = 0;
    // walk from the innermost dim to compute the contiguous source strides,
    // then put the kept and reduced dims back in outer-to-inner order
    int64_t ks[GDL_MAX_DIMS], kd[GDL_MAX_DIMS], kss[GDL_MAX_DIMS], rs[GDL_MAX_DIMS], rss[GDL_MAX_DIMS];
    int nk = 0, nr = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] != 1) {
            int reduced = dstr[d] == 0;
            if (!seen_inner) {
                inner_reduced = reduced;
                seen_inner = 1;
            }
            if (reduced) {
                rs[nr] = shape[d];
                rss[nr] = sstr;
                nr++;
                nred *= shape[d];
            } else {
                ks[nk] = shape[d];
                kd[nk] = dstr[d];
                kss[nk] = sstr;
                nk++;
                nout *= shape[d];
            }
        }
        sstr *= shape[d];
    }
    for (int i = 0; i < nk; i++) {
        g->kshape[i] = ks[nk - 1 - i];
        g->kdst[i] = kd[nk - 1 - i];
        g->ksrc[i] = kss[nk - 1 - i];
    }
    for (int i = 0; i < nr; i++) {
        g->rshape[i] = rs[nr - 1 - i];
        g->rsrc[i] = rss[nr - 1 - i];
    }
    g->nk = nk;
    g->nr = nr;
    *nout_ = nout;
    *nred_ = nred;
    // A block per output reads runs of the innermost dim when that dim is
    // reduced, and keeps the GPU busy when outputs are few; a thread per
    // output reads coalesced across threads when the innermost dim is kept.
    *block = nr > 0 && nred >= 64 && (inner_reduced || nout < 2048);
    return 1;
}

template <typename TS, typename TD>
static int gdl__cu_sum_to_t(int ndim, const int64_t *shape, const TS *src, TD *dst, const int64_t *dstr, float alpha,
                            int into_dst) {
    gdl__cu_sumto g;
    int64_t nout, nred;
    int block;
    if (!gdl__cu_sumto_plan(ndim, shape, dstr, &g, &nout, &nred, &block)) return 0;
    if (block) {
        int threads = gdl__cu_row_threads(nred > 256 ? 256 : nred);
        void (*gdl__k_sum_to_block_)(gdl__cu_sumto, int64_t, int64_t, const TS *, TD *, float) = gdl__k_sum_to_block<TS, TD>;
        GDL_CU_LAUNCH(gdl__k_sum_to_block_, gdl__cu_row_grid(nout), threads, 0, gdl__cu_stream())(g, nout, nred, src, dst, alpha);
    } else {
        void (*gdl__k_sum_to_thread_)(gdl__cu_sumto, int64_t, int64_t, const TS *, TD *, float, int) =
            gdl__k_sum_to_thread<TS, TD>;
        GDL_CU_LAUNCH(gdl__k_sum_to_thread_, gdl__cu_grid(nout, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
            g, nout, nred, src, dst, alpha, into_dst);
    }
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_sum_to_f32(int ndim, const int64_t *shape, const float *src, float *dst, const int64_t *dstr,
                          float alpha) {
    return gdl__cu_sum_to_t(ndim, shape, src, dst, dstr, alpha, 1);
}

static int gdl__cu_sum_to(int ndim, const int64_t *shape, gdl_dtype st, const void *src, gdl_dtype dt, void *dst,
                          const int64_t *dstr, float alpha) {
    if (st == GDL_F32 && dt == GDL_F32)
        return gdl__cu_sum_to_f32(ndim, shape, (const float *)src, (float *)dst, dstr, alpha);
    return gdl__cu_dispatch("sum_to", st, 1, [&](auto ts) {
        return gdl__cu_dispatch("sum_to", dt, 1, [&](auto td) {
            typedef typename decltype(ts)::type TS;
            typedef typename decltype(td)::type TD;
            return gdl__cu_sum_to_t(ndim, shape, (const TS *)src, (TD *)dst, dstr, alpha, 0);
        });
    });
}

// The op math (gdl_unary1_float, gdl_unary_grad1_float, gdl_binary1_float) is gpudl.h's
// (src/api/op_math.h), the CPU's in f32: one definition for both backends.

template <typename T> __global__ void gdl__k_unary(int op, int64_t n, const T *x, T *y, float alpha) {
    GDL_CU_LOOP(i, n) y[i] = gdl__st<T>(gdl_unary1_float((enum gdl_unary_op)op, gdl__ld(x[i]), alpha));
}

// ReLU (and clamp) selects gy as the CPU does (x > 0 ? gy : 0) rather than multiplying
// by a 0/1 derivative: an Inf or NaN gradient at x <= 0 must not become NaN.
// The accumulator is loaded (0 when acc is 0: gx unset, not read), the term added in f32, the sum
// rounded once.
// The term gy * f'(x): for f32 nvcc fuses it into the add (an FMA), for a
// 16-bit T it is rounded first (gdl__mul_rn), as the CPU does and as the
// separate low-precision kernel did.
template <typename T>
__global__ void gdl__k_unary_backward(int op, int64_t n, const T *x, const T *y, const T *gy, T *gx, float alpha,
                                      int acc) {
    if (op == GDL_UN_RELU || op == GDL_UN_CLAMP_MIN || op == GDL_UN_CLAMP_MAX) {
        GDL_CU_LOOP(i, n) {
            float v = gdl__ld(x[i]);
            bool pass = op == GDL_UN_RELU ? v > 0 : op == GDL_UN_CLAMP_MIN ? v >= alpha : v <= alpha;
            gx[i] = gdl__st<T>((acc ? gdl__ld(gx[i]) : 0.0f) + (pass ? gdl__ld(gy[i]) : 0.0f));
        }
        return;
    }
    GDL_CU_LOOP(i, n) {
        float g = gdl__ld(gy[i]), d = gdl_unary_grad1_float((enum gdl_unary_op)op, gdl__ld(x[i]), gdl__ld(y[i]), alpha);
        gx[i] = gdl__st<T>((acc ? gdl__ld(gx[i]) : 0.0f) + (sizeof(T) == 2 ? gdl__mul_rn(g, d) : g * d));
    }
}

template <typename T> static int gdl__cu_unary_t(int op, int64_t n, const T *x, T *y, float alpha) {
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_unary<T>, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(op, n, x, y, alpha);
    GDL_CU_LAUNCHED();
    return 0;
}

template <typename T>
static int gdl__cu_unary_backward_t(int op, int64_t n, const T *x, const T *y, const T *gy, T *gx, float alpha,
                                    int acc) {
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_unary_backward<T>, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(
        op, n, x, y, gy, gx, alpha, acc);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_unary_f32(int op, int64_t n, const float *x, float *y, float alpha) {
    return gdl__cu_unary_t(op, n, x, y, alpha);
}

static int gdl__cu_unary_backward_f32(int op, int64_t n, const float *x, const float *y, const float *gy, float *gx,
                                  float alpha, int accumulate) {
    return gdl__cu_unary_backward_t(op, n, x, y, gy, gx, alpha, accumulate);
}

static int gdl__cu_unary(gdl_dtype dt, int op, int64_t n, const void *x, void *y, float alpha) {
    if (dt == GDL_F32) return gdl__cu_unary_f32(op, n, (const float *)x, (float *)y, alpha);
    return gdl__cu_dispatch("unary", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_unary_t(op, n, (const T *)x, (T *)y, alpha);
    });
}

static int gdl__cu_unary_backward(gdl_dtype dt, int op, int64_t n, const void *x, const void *y, const void *gy,
                                  void *gx, float alpha, int accumulate) {
    if (dt == GDL_F32)
        return gdl__cu_unary_backward_f32(op, n, (const float *)x, (const float *)y, (const float *)gy, (float *)gx,
                                          alpha, accumulate);
    return gdl__cu_dispatch("unary_backward", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_unary_backward_t(op, n, (const T *)x, (const T *)y, (const T *)gy, (T *)gx, alpha, accumulate);
    });
}
