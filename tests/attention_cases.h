/* attention_cases.h — gdl_scaled_dot_product_attention on one device (the CPU in tests/test_dtype.c, the
   emulated GPU in tests/test_cuda.c):
   * the fused kernels against the unfused composition (matmul, mask, softmax, matmul, written here with
     the public ops, in f32) at sequence lengths that take every tile edge of both backends (1, 31, 32,
     33, several tiles, L != S), with no mask, is_causal, a u8 mask and an additive mask with -inf
     entries, in f32, bf16 and f16, forward and the three gradients;
   * gdl_sdpa_heads / gdl_sdpa_qkv (heads read and written in place, at strides) against the contiguous
     path on copies, bit for bit, and their error paths;
   * the error paths (shapes, dtypes, masks, is_causal with a mask, dropout_p, devices);
   * the memory a step saves grows linearly in T (the step arena's bytes, T = 64 ... 1024), where the
     unfused composition's grows as T^2.
   * PyTorch's semantics on the fused kernels and the unfused composition alike, against a reference in
     double: a query row no key may attend to gives 0 and no gradient; an explicit scale (-0.5, 0) is
     applied as given, GDL_SCALE_DEFAULT is 1/sqrt(E).
   Needs dtype_parity.h (dtype_compare, dtype_tol) first. */
#ifndef GPUDL_ATTENTION_CASES_H
#define GPUDL_ATTENTION_CASES_H

enum { ATTN_NONE, ATTN_CAUSAL, ATTN_BOOL, ATTN_ADDITIVE };

static float attn_round(gdl_dtype dt, float v) {
    return dt == GDL_BF16 ? gdl_bf16_to_f32(gdl_f32_to_bf16(v)) : dt == GDL_F16 ? gdl_f16_to_f32(gdl_f32_to_f16(v)) : v;
}

/* a persistent tensor on dev of dtype dt holding v (already rounded to dt) */
static gdl_tensor *attn_put(const float *v, int ndim, const int64_t *shape, gdl_dtype dt, gdl_device dev, int grad) {
    gdl_tensor *f = gdl_from_array(v, ndim, shape, GDL_F32, gdl_cpu()), *t, *r;
    if (!f) return NULL;
    t = dt == GDL_F32 ? f : gdl_clone(gdl_to_dtype(f, dt));
    r = t ? gdl_to(t, dev) : NULL;
    if (t != f) gdl_free(t);
    gdl_free(f);
    if (r && grad && gdl_set_requires_grad(r, 1) < 0) return NULL;
    return r;
}

/* the unfused composition in f32; excl: u8 [L, S], 1 where a key takes no part (causal), or NULL */
static gdl_tensor *attn_reference(gdl_tensor *q, gdl_tensor *k, gdl_tensor *v, gdl_tensor *mask, gdl_tensor *excl,
                                  double scale) {
    gdl_tensor *s = gdl_mul_scalar(gdl_matmul(q, gdl_transpose(k, -2, -1)), scale);
    if (excl) s = gdl_masked_fill(s, excl, -INFINITY);
    else if (mask && mask->dtype == GDL_U8) s = gdl_masked_fill(s, gdl_compare_scalar(mask, GDL_CMP_EQ, 0), -INFINITY);
    else if (mask) s = gdl_add(s, mask);
    return gdl_matmul(gdl_softmax(s, -1), v);
}

static double attn_normal(void) { /* Box-Muller */
    double u = gdl_rng_uniform(), w = gdl_rng_uniform();
    return sqrt(-2 * log(1 - u)) * cos(6.283185307179586 * w);
}

static float *attn_randn(int64_t n, gdl_dtype dt, double mul) {
    float *v = (float *)malloc(sizeof(float) * (size_t)(n + 1));
    int64_t i;
    if (!v) return NULL;
    for (i = 0; i < n; i++) v[i] = attn_round(dt, (float)(mul * attn_normal()));
    return v;
}

/* one configuration: 0 when the fused run matches the reference, else a message in msg */
static int attn_parity_one(gdl_device dev, gdl_dtype dt, int L, int S, int kind, char *msg, size_t msz) {
    enum { B0 = 2, H = 3, E = 8, EV = 12 };
    int64_t sq[4] = {B0, H, L, E}, sk[4] = {B0, H, S, E}, sv[4] = {B0, H, S, EV}, sm2[2] = {L, S}, sm4[4] = {B0, 1, L, S};
    int64_t nq = (int64_t)B0 * H * L * E, nk = (int64_t)B0 * H * S * E, nv = (int64_t)B0 * H * S * EV, i, j;
    int64_t nw = (int64_t)B0 * H * L * EV, nm = kind == ATTN_ADDITIVE ? (int64_t)B0 * L * S : (int64_t)L * S;
    float *hq = attn_randn(nq, dt, 1), *hk = attn_randn(nk, dt, 1), *hv = attn_randn(nv, dt, 1), *hw = attn_randn(nw, dt, 1);
    float *hm = (float *)malloc(sizeof(float) * (size_t)(nm + 1));
    uint8_t *hb = (uint8_t *)malloc((size_t)(L * S + 1));
    gdl_tensor *lo[3] = {0}, *ref[3] = {0}, *mlo = NULL, *mref = NULL, *excl = NULL, *out, *oref, *w, *wr;
    const double scale = kind == ATTN_CAUSAL ? 0.3 : 1 / sqrt((double)E);
    double tol = dt == GDL_F32 ? 1e-5 : 2 * dtype_tol(dt), rel;
    int k, bad = 1;
    msg[0] = 0;
    if (!hq || !hk || !hv || !hw || !hm || !hb) goto done;
    for (i = 0; i < L; i++) /* every row keeps key i % S, so no row is all masked (the composition's NaN) */
        for (j = 0; j < S; j++) {
            double u = gdl_rng_uniform();
            hb[i * S + j] = kind == ATTN_CAUSAL ? (uint8_t)(j > i) : (uint8_t)(u > 0.25 || j == i % S);
            hm[i * S + j] = (float)hb[i * S + j];
        }
    if (kind == ATTN_ADDITIVE)
        for (i = 0; i < nm; i++) {
            int64_t r = i / S % L, c = i % S;
            hm[i] = gdl_rng_uniform() < 0.15 && c != r % S ? -INFINITY : attn_round(dt, (float)(1.5 * attn_normal()));
        }
    gdl_arena_reset();
    if (!(lo[0] = attn_put(hq, 4, sq, dt, dev, 1)) || !(lo[1] = attn_put(hk, 4, sk, dt, dev, 1)) ||
        !(lo[2] = attn_put(hv, 4, sv, dt, dev, 1)) || !(ref[0] = attn_put(hq, 4, sq, GDL_F32, dev, 1)) ||
        !(ref[1] = attn_put(hk, 4, sk, GDL_F32, dev, 1)) || !(ref[2] = attn_put(hv, 4, sv, GDL_F32, dev, 1)))
        goto done;
    if (kind == ATTN_BOOL || kind == ATTN_CAUSAL) {
        gdl_tensor *u = gdl_from_array(hb, 2, sm2, GDL_U8, gdl_cpu());
        if (!u) goto done;
        if (kind == ATTN_CAUSAL) excl = gdl_to(u, dev);
        else { /* hb holds 1 where a key takes part */
            mlo = gdl_to(u, dev);
            mref = mlo;
        }
        gdl_free(u);
        if (!excl && !mlo) goto done;
    } else if (kind == ATTN_ADDITIVE) {
        if (!(mlo = attn_put(hm, 4, sm4, dt, dev, 0)) || !(mref = attn_put(hm, 4, sm4, GDL_F32, dev, 0))) goto done;
    }
    out = gdl_scaled_dot_product_attention(lo[0], lo[1], lo[2], mlo, 0, kind == ATTN_CAUSAL, kind == ATTN_CAUSAL ? scale : NAN);
    oref = attn_reference(ref[0], ref[1], ref[2], mref, excl, scale);
    if (!out || !oref) {
        snprintf(msg, msz, "forward failed: %.200s", gdl_last_error());
        goto done;
    }
    if (gdl_tensor_op(out) != GDL_OP_SDPA || out->dtype != dt) {
        snprintf(msg, msz, "the output (%s) is not the fused op's", gdl_dtype_name(out->dtype));
        goto done;
    }
    if (!(w = attn_put(hw, 4, out->shape, dt, dev, 0)) || !(wr = attn_put(hw, 4, out->shape, GDL_F32, dev, 0))) goto done;
    if (gdl_backward_grad(out, w) < 0 || gdl_backward_grad(oref, wr) < 0) {
        snprintf(msg, msz, "backward failed: %.200s", gdl_last_error());
        gdl_free(w);
        gdl_free(wr);
        goto done;
    }
    gdl_free(w);
    gdl_free(wr);
    if (dtype_compare(out, oref, tol, &rel)) {
        snprintf(msg, msz, "output differs from the composition by %.3g (relative to its max)", rel);
        goto done;
    }
    for (k = 0; k < 3; k++)
        if (!lo[k]->grad || dtype_compare(lo[k]->grad, ref[k]->grad, tol, &rel)) {
            snprintf(msg, msz, "the gradient of %s differs from the composition's by %.3g", k == 0 ? "q" : k == 1 ? "k" : "v",
                     rel);
            goto done;
        }
    bad = 0;
done:
    if (bad && !msg[0]) snprintf(msg, msz, "setup failed: %.200s", gdl_last_error());
    for (k = 0; k < 3; k++) {
        gdl_free(lo[k]);
        gdl_free(ref[k]);
    }
    if (mref != mlo) gdl_free(mref);
    gdl_free(mlo);
    gdl_free(excl);
    free(hq); free(hk); free(hv); free(hw); free(hm); free(hb);
    gdl_arena_reset();
    return bad;
}

/* the tile edges: both backends' tiles are 32 rows at these head sizes (the GPU's shrinks for longer heads) */
TEST attn_tile_edges(void *arg) {
    static const int sizes[][2] = {{1, 1}, {31, 32}, {32, 33}, {33, 31}, {97, 40}, {5, 97}, {64, 1}};
    static const gdl_dtype dts[3] = {GDL_F32, GDL_BF16, GDL_F16};
    static const char *kinds[4] = {"no mask", "is_causal", "a u8 mask", "an additive mask"};
    const gdl_device dev = *(const gdl_device *)arg;
    char msg[300];
    int s, d, kind;
    gdl_manual_seed(2718);
    for (d = 0; d < 3; d++)
        for (s = 0; s < (int)(sizeof sizes / sizeof sizes[0]); s++)
            for (kind = 0; kind < 4; kind++)
                if (attn_parity_one(dev, dts[d], sizes[s][0], sizes[s][1], kind, msg, sizeof msg))
                    FAILf("%s, L %d, S %d, %s: %s", gdl_dtype_name(dts[d]), sizes[s][0], sizes[s][1], kinds[kind], msg);
    PASS();
}

/* ---- heads read in place (gdl_sdpa_heads, gdl_sdpa_qkv): the strided kernels against the contiguous
   ones on the heads split by the copies (reshape, transpose; narrow for qkv's thirds), which compute the
   same sums in the same order, so the output and every gradient must be equal bit for bit ---- */

/* 0 when a and b (same shape, any float dtype) hold the same values */
static int attn_same(gdl_tensor *a, gdl_tensor *b) {
    double *x = a && b && a->numel == b->numel ? dtype_host_values(a) : NULL, *y = x ? dtype_host_values(b) : NULL;
    int64_t i;
    int bad = !x || !y;
    for (i = 0; !bad && i < a->numel; i++) bad = x[i] != y[i];
    free(x);
    free(y);
    return bad;
}

/* [N, L, H*E] -> [N, H, L, E] by the copies */
static gdl_tensor *attn_split(gdl_tensor *x, int H) {
    int64_t s[4];
    if (!x) return NULL;
    s[0] = x->shape[0]; s[1] = x->shape[1]; s[2] = H; s[3] = x->shape[2] / H;
    return gdl_transpose(gdl_reshape(x, 4, s), 1, 2);
}

/* one configuration (packed: one qkv tensor, S = L); 0 when it matches, else a message in msg */
static int attn_heads_one(gdl_device dev, gdl_dtype dt, int L, int S, int kind, int packed, char *msg, size_t msz) {
    enum { N = 2, H = 3, E = 8 };
    const int Ev = packed ? E : 12, W = packed ? 3 * H * E : H * E;
    int64_t sq[3] = {N, L, W}, sk[3] = {N, S, H * E}, sv[3] = {N, S, H * Ev}, sm2[2] = {L, S}, sm4[4] = {N, 1, L, S};
    int64_t nq = (int64_t)N * L * W, nk = (int64_t)N * S * H * E, nv = (int64_t)N * S * H * Ev;
    int64_t nw = (int64_t)N * L * H * Ev, nm = (int64_t)N * L * S, i, j, so[3] = {N, L, H * Ev};
    float *hq = attn_randn(nq, dt, 1), *hk = attn_randn(nk, dt, 1), *hv = attn_randn(nv, dt, 1), *hw = attn_randn(nw, dt, 1);
    float *hm = (float *)malloc(sizeof(float) * (size_t)(nm + 1));
    uint8_t *hb = (uint8_t *)malloc((size_t)(L * S + 1));
    gdl_tensor *a[3] = {0}, *r[3] = {0}, *mask = NULL, *out, *oref, *qh[3], *w;
    const double scale = kind == ATTN_CAUSAL ? 0.3 : NAN;
    int k, nt = packed ? 1 : 3, bad = 1;
    msg[0] = 0;
    if (!hq || !hk || !hv || !hw || !hm || !hb) goto done;
    for (i = 0; i < L; i++)
        for (j = 0; j < S; j++) hb[i * S + j] = (uint8_t)(gdl_rng_uniform() > 0.25 || j == i % S);
    for (i = 0; i < nm; i++)
        hm[i] = gdl_rng_uniform() < 0.15 && i % S != i / S % L % S ? -INFINITY : attn_round(dt, (float)(1.5 * attn_normal()));
    gdl_arena_reset();
    for (k = 0; k < nt; k++) {
        const float *h = k == 0 ? hq : k == 1 ? hk : hv;
        const int64_t *sh = k == 0 ? sq : k == 1 ? sk : sv;
        if (!(a[k] = attn_put(h, 3, sh, dt, dev, 1)) || !(r[k] = attn_put(h, 3, sh, dt, dev, 1))) goto done;
    }
    if (kind == ATTN_BOOL) {
        gdl_tensor *u = gdl_from_array(hb, 2, sm2, GDL_U8, gdl_cpu());
        mask = u ? gdl_to(u, dev) : NULL;
        gdl_free(u);
        if (!mask) goto done;
    } else if (kind == ATTN_ADDITIVE && !(mask = attn_put(hm, 4, sm4, dt, dev, 0))) {
        goto done;
    }
    out = packed ? gdl_sdpa_qkv(a[0], H, mask, 0, kind == ATTN_CAUSAL, scale)
                 : gdl_sdpa_heads(a[0], a[1], a[2], H, mask, 0, kind == ATTN_CAUSAL, scale);
    if (packed) {
        qh[0] = attn_split(gdl_narrow(r[0], 2, 0, H * E), H);
        qh[1] = attn_split(gdl_narrow(r[0], 2, H * E, H * E), H);
        qh[2] = attn_split(gdl_narrow(r[0], 2, 2 * H * E, H * E), H);
    } else {
        for (k = 0; k < 3; k++) qh[k] = attn_split(r[k], H);
    }
    oref = gdl_reshape(gdl_transpose(gdl_scaled_dot_product_attention(qh[0], qh[1], qh[2], mask, 0, kind == ATTN_CAUSAL,
                                                                      scale), 1, 2), 3, so);
    if (!out || !oref) {
        snprintf(msg, msz, "forward failed: %.200s", gdl_last_error());
        goto done;
    }
    if (gdl_tensor_op(out) != GDL_OP_SDPA || out->dtype != dt || out->ndim != 3 || out->shape[2] != H * Ev) {
        snprintf(msg, msz, "the output (%s %s) is not the fused op's [N, L, H*Ev]", gdl_dtype_name(out->dtype),
                 gdl_shape_str(out));
        goto done;
    }
    if (!(w = attn_put(hw, 3, so, dt, dev, 0))) goto done;
    if (gdl_backward_grad(out, w) < 0 || gdl_backward_grad(oref, w) < 0) {
        snprintf(msg, msz, "backward failed: %.200s", gdl_last_error());
        gdl_free(w);
        goto done;
    }
    gdl_free(w);
    if (attn_same(out, oref)) {
        snprintf(msg, msz, "the output differs from the contiguous path's");
        goto done;
    }
    for (k = 0; k < nt; k++)
        if (!a[k]->grad || attn_same(a[k]->grad, r[k]->grad)) {
            snprintf(msg, msz, "the gradient of %s differs from the contiguous path's",
                     packed ? "qkv" : k == 0 ? "q" : k == 1 ? "k" : "v");
            goto done;
        }
    bad = 0;
done:
    if (bad && !msg[0]) snprintf(msg, msz, "setup failed: %.200s", gdl_last_error());
    for (k = 0; k < 3; k++) {
        gdl_free(a[k]);
        gdl_free(r[k]);
    }
    gdl_free(mask);
    free(hq); free(hk); free(hv); free(hw); free(hm); free(hb);
    gdl_arena_reset();
    return bad;
}

/* the strided kernels at tile edges, every mask kind and dtype, heads in three tensors and in one */
TEST attn_heads_strided(void *arg) {
    static const int sizes[][2] = {{1, 1}, {31, 33}, {33, 32}, {70, 40}};
    static const gdl_dtype dts[3] = {GDL_F32, GDL_BF16, GDL_F16};
    static const char *kinds[4] = {"no mask", "is_causal", "a u8 mask", "an additive mask"};
    const gdl_device dev = *(const gdl_device *)arg;
    char msg[300];
    int s, d, kind, packed;
    gdl_manual_seed(1414);
    for (d = 0; d < 3; d++)
        for (s = 0; s < (int)(sizeof sizes / sizeof sizes[0]); s++)
            for (kind = 0; kind < 4; kind++)
                for (packed = 0; packed < 2; packed++) {
                    const int L = sizes[s][0], S = packed ? L : sizes[s][1];
                    if (attn_heads_one(dev, dts[d], L, S, kind, packed, msg, sizeof msg))
                        FAILf("%s, %s, L %d, S %d, %s: %s", packed ? "gdl_sdpa_qkv" : "gdl_sdpa_heads",
                              gdl_dtype_name(dts[d]), L, S, kinds[kind], msg);
                }
    PASS();
}

/* the packed forms' bad arguments: NULL and a message naming the op and what is wrong */
TEST attn_heads_errors(void *arg) {
    const gdl_device dev = *(const gdl_device *)arg;
    int64_t sq[3] = {2, 5, 12}, sk[3] = {2, 7, 12}, sv[3] = {2, 7, 9}, skb[3] = {3, 7, 12}, sv7[3] = {2, 7, 10};
    int64_t sqkv[3] = {2, 5, 18}, s1[1] = {12}, sm[2] = {4, 7}, s6[6] = {1, 1, 1, 1, 2, 12};
    gdl_tensor *q = gdl_randn(3, sq, dev), *k = gdl_randn(3, sk, dev), *v = gdl_randn(3, sv, dev), *t;
    gdl_tensor *kb = gdl_randn(3, skb, dev), *v7 = gdl_randn(3, sv7, dev), *qkv = gdl_randn(3, sqkv, dev);
    gdl_tensor *q1 = gdl_randn(1, s1, dev), *m = gdl_zeros(2, sm, GDL_U8, dev), *qi = gdl_zeros(3, sqkv, GDL_I32, dev);
    gdl_tensor *q6 = gdl_randn(6, s6, dev), *kh = gdl_clone(gdl_to_dtype(k, GDL_F16));
    ASSERT(q && k && v && kb && v7 && qkv && q1 && m && qi && q6 && kh);
#define ATTN_BAD(opname, call, what)                                                                       \
    do {                                                                                                   \
        gdl_arena_reset();                                                                                 \
        t = call;                                                                                          \
        if (t) FAILf("%s succeeded", #call);                                                               \
        if (strncmp(gdl_last_error(), opname ": ", strlen(opname) + 2) != 0 || !strstr(gdl_last_error(), what)) \
            FAILf("%s: the error \"%s\" does not say \"%s\"", #call, gdl_last_error(), what);               \
    } while (0)
    ATTN_BAD("gdl_sdpa_heads", gdl_sdpa_heads(q, k, v, 0, NULL, 0, 0, 0), "num_heads 0");
    ATTN_BAD("gdl_sdpa_heads", gdl_sdpa_heads(q, k, v, 5, NULL, 0, 0, 0), "num_heads 5");
    ATTN_BAD("gdl_sdpa_heads", gdl_sdpa_heads(q1, k, v, 3, NULL, 0, 0, 0), "expected query [..., L, num_heads*E]");
    ATTN_BAD("gdl_sdpa_heads", gdl_sdpa_heads(q6, k, v, 3, NULL, 0, 0, 0), "of 2 to 5 dims");
    ATTN_BAD("gdl_sdpa_heads", gdl_sdpa_heads(q, kb, v, 3, NULL, 0, 0, 0), "the same batch dims");
    ATTN_BAD("gdl_sdpa_heads", gdl_sdpa_heads(q, k, v7, 3, NULL, 0, 0, 0), "value [..., S, H*Ev]");
    ATTN_BAD("gdl_sdpa_heads", gdl_sdpa_heads(q, kh, v, 3, NULL, 0, 0, 0), "one float dtype");
    ATTN_BAD("gdl_sdpa_heads", gdl_sdpa_heads(q, k, v, 3, m, 0, 0, 0), "cannot be broadcast to the scores' shape");
    ATTN_BAD("gdl_sdpa_heads", gdl_sdpa_heads(q, k, v, 3, NULL, -0.5, 0, 0), "dropout_p -0.5");
    ATTN_BAD("gdl_sdpa_qkv", gdl_sdpa_qkv(q, 3, NULL, 0, 0, 0), "expected qkv [..., L, 3*num_heads*E]");
    ATTN_BAD("gdl_sdpa_qkv", gdl_sdpa_qkv(qi, 3, NULL, 0, 0, 0), "qkv must be a float tensor");
    ATTN_BAD("gdl_sdpa_qkv", gdl_sdpa_qkv(NULL, 3, NULL, 0, 0, 0), "qkv");
#undef ATTN_BAD
    gdl_arena_reset(); /* the good calls, to show the inputs above differ from them only where named */
    ASSERT_NOT_NULL(gdl_sdpa_heads(q, k, v, 3, NULL, 0, 0, GDL_SCALE_DEFAULT));
    ASSERT_NOT_NULL(gdl_sdpa_qkv(qkv, 3, NULL, 0, 1, GDL_SCALE_DEFAULT));
    gdl_free(q); gdl_free(k); gdl_free(v); gdl_free(kb); gdl_free(v7); gdl_free(qkv); gdl_free(q1); gdl_free(m);
    gdl_free(qi); gdl_free(q6); gdl_free(kh);
    gdl_arena_reset();
    PASS();
}

/* every bad argument gets NULL and a message naming the op and what is wrong */
TEST attn_errors(void *arg) {
    const gdl_device dev = *(const gdl_device *)arg;
    int64_t s3[3] = {2, 3, 4}, s5[3] = {2, 5, 4}, sv[3] = {2, 5, 3}, s1[1] = {4}, sk3[3] = {2, 5, 3}, sv4[3] = {2, 4, 3};
    int64_t sm[2] = {3, 5}, sbad[2] = {3, 4}, s5d[2] = {1, 3}, sb3[3] = {3, 5, 4}, sbv[3] = {3, 5, 3}, s6[5] = {1, 1, 2, 3, 5};
    gdl_tensor *q = gdl_randn(3, s3, dev), *k = gdl_randn(3, s5, dev), *v = gdl_randn(3, sv, dev), *t;
    gdl_tensor *m = gdl_zeros(2, sm, GDL_U8, dev), *mi = gdl_zeros(2, sm, GDL_I32, dev), *mb = gdl_zeros(2, sbad, GDL_U8, dev);
    gdl_tensor *m5 = gdl_zeros(5, s6, GDL_U8, dev), *q1 = gdl_randn(1, s1, dev), *kE = gdl_randn(3, sk3, dev);
    gdl_tensor *vS = gdl_randn(3, sv4, dev), *kb = gdl_clone(gdl_to_dtype(k, GDL_BF16)), *qi = gdl_zeros(3, s3, GDL_I32, dev);
    gdl_tensor *kB = gdl_randn(3, sb3, dev), *vB = gdl_randn(3, sbv, dev), *mf = gdl_randn(2, s5d, dev);
    const char *op = "gdl_scaled_dot_product_attention: ";
    ASSERT(q && k && v && m && mi && mb && m5 && q1 && kE && vS && kb && qi && kB && vB && mf);
#define ATTN_BAD(call, what)                                                                       \
    do {                                                                                           \
        gdl_arena_reset();                                                                         \
        t = call;                                                                                  \
        if (t) FAILf("%s succeeded", #call);                                                       \
        if (strncmp(gdl_last_error(), op, strlen(op)) != 0 || !strstr(gdl_last_error(), what))     \
            FAILf("%s: the error \"%s\" does not say \"%s\"", #call, gdl_last_error(), what);       \
    } while (0)
    ATTN_BAD(gdl_scaled_dot_product_attention(NULL, k, v, NULL, 0, 0, 0), "query");
    ATTN_BAD(gdl_scaled_dot_product_attention(q1, k, v, NULL, 0, 0, 0), "expected query [..., L, E]");
    ATTN_BAD(gdl_scaled_dot_product_attention(q, kE, v, NULL, 0, 0, 0), "key [..., S, E]");
    ATTN_BAD(gdl_scaled_dot_product_attention(q, k, vS, NULL, 0, 0, 0), "value [..., S, Ev]");
    ATTN_BAD(gdl_scaled_dot_product_attention(q, kb, v, NULL, 0, 0, 0), "one float dtype");
    ATTN_BAD(gdl_scaled_dot_product_attention(qi, k, v, NULL, 0, 0, 0), "one float dtype");
    ATTN_BAD(gdl_scaled_dot_product_attention(q, k, v, mi, 0, 0, 0), "attn_mask must be u8 (bool) or of the query's dtype");
    ATTN_BAD(gdl_scaled_dot_product_attention(q, k, v, mb, 0, 0, 0), "cannot be broadcast to the scores' shape");
    ATTN_BAD(gdl_scaled_dot_product_attention(q, k, v, m5, 0, 0, 0), "more dims than the scores");
    ATTN_BAD(gdl_scaled_dot_product_attention(q, k, v, mf, 0, 0, 0), "cannot be broadcast to the scores' shape");
    ATTN_BAD(gdl_scaled_dot_product_attention(q, k, v, m, 0, 1, 0), "is_causal");
    ATTN_BAD(gdl_scaled_dot_product_attention(q, k, v, NULL, 1.5, 0, 0), "dropout_p 1.5");
    ATTN_BAD(gdl_scaled_dot_product_attention(q, k, v, NULL, NAN, 0, 0), "dropout_p");
    ATTN_BAD(gdl_scaled_dot_product_attention(q, kB, vB, NULL, 0, 0, 0), "cannot be broadcast");
    if (dev.type != GDL_DEVICE_CPU) {
        gdl_tensor *kc = gdl_to(k, gdl_cpu()), *mc = gdl_to(m, gdl_cpu());
        ASSERT(kc && mc);
        ATTN_BAD(gdl_scaled_dot_product_attention(q, kc, v, NULL, 0, 0, 0), "same device");
        ATTN_BAD(gdl_scaled_dot_product_attention(q, k, v, mc, 0, 0, 0), "same device");
        gdl_free(kc);
        gdl_free(mc);
    }
#undef ATTN_BAD
    /* the good call, to show the inputs above differ from it only where named */
    gdl_arena_reset();
    ASSERT_NOT_NULL(gdl_scaled_dot_product_attention(q, k, v, m, 0, 0, GDL_SCALE_DEFAULT));
    gdl_free(q); gdl_free(k); gdl_free(v); gdl_free(m); gdl_free(mi); gdl_free(mb); gdl_free(m5); gdl_free(q1);
    gdl_free(kE); gdl_free(vS); gdl_free(kb); gdl_free(qi); gdl_free(kB); gdl_free(vB); gdl_free(mf);
    gdl_arena_reset();
    PASS();
}

/* The step arena's bytes after a causal forward (what is saved for backward) and after the backward, at
   T = 64 ... 1024 (B 1, 2 heads, E 16): each doubling of T adds twice the bytes the one before added
   (within 1 %), so the growth is linear;
   the unfused composition at T = 256 holds T x T weights, several times the fused step's bytes. */
static size_t attn_step_bytes(gdl_device dev, int64_t T, int fused, size_t *after_backward) {
    int64_t s[4] = {1, 2, T, 16};
    gdl_tensor *q = gdl_randn(4, s, dev), *k = gdl_randn(4, s, dev), *v = gdl_randn(4, s, dev), *out;
    size_t used = 0;
    if (q && k && v && gdl_set_requires_grad(q, 1) == 0 && gdl_set_requires_grad(k, 1) == 0 &&
        gdl_set_requires_grad(v, 1) == 0) {
        gdl_arena_reset();
        out = fused ? gdl_scaled_dot_product_attention(q, k, v, NULL, 0, 1, GDL_SCALE_DEFAULT)
                    : gdl_scaled_dot_product_attention(q, k, v, NULL, 0.1, 1, GDL_SCALE_DEFAULT); /* dropout: the composition */
        used = out ? gdl_arena_used() : 0;
        if (after_backward) *after_backward = out && gdl_backward(gdl_sum(out)) == 0 ? gdl_arena_used() : 0;
    }
    gdl_free(q);
    gdl_free(k);
    gdl_free(v);
    gdl_arena_reset();
    return used;
}

TEST attn_memory_linear(void *arg) {
    const gdl_device dev = *(const gdl_device *)arg;
    size_t fwd[5], bwd[5], unfused;
    int i;
    for (i = 0; i < 5; i++) {
        fwd[i] = attn_step_bytes(dev, 64 << i, 1, &bwd[i]);
        ASSERTm(gdl_last_error(), fwd[i] > 0 && bwd[i] > 0);
    }
    unfused = attn_step_bytes(dev, 256, 0, NULL);
    printf("    attention step arena bytes on %s, T = 64 128 256 512 1024: forward %zu %zu %zu %zu %zu, with backward "
           "%zu %zu %zu %zu %zu; unfused forward at T = 256: %zu\n",
           gdl_device_name(dev), fwd[0], fwd[1], fwd[2], fwd[3], fwd[4], bwd[0], bwd[1], bwd[2], bwd[3], bwd[4], unfused);
    for (i = 2; i < 5; i++) { /* bytes = a + b T: each doubling of T adds twice what the last one added */
        double f = (double)(fwd[i] - fwd[i - 1]) / (double)(fwd[i - 1] - fwd[i - 2]);
        double b = (double)(bwd[i] - bwd[i - 1]) / (double)(bwd[i - 1] - bwd[i - 2]);
        if (f > 2.02 || f < 1.98 || b > 2.02 || b < 1.98)
            FAILf("T = %d: %zu forward / %zu backward bytes; the step from T = %d added %.3f / %.3f times the one "
                  "before (linear: 2)", 64 << i, fwd[i], bwd[i], 32 << i, f, b);
    }
    ASSERT(unfused > 8 * fwd[2]);
    PASS();
}

/* ---- PyTorch's semantics on both paths: a query row that no key may attend to gives 0 and no gradient
   (PyTorch's safe softmax), and an explicit scale is applied as given, 0 and negative ones too. Each
   path against a reference computed here in double: the fused kernels (a u8 mask; an additive one), and
   the unfused composition (an additive mask that requires a gradient; a head of 300, over the kernels'
   256, with either mask). ---- */

/* softmax(scale q k^T, rows masked by keep) v and its three gradients for the output gradient go, over
   BH heads of L x S, in double; a row with no kept key: 0, no gradient */
static void attn_hand(const float *q, const float *k, const float *v, const float *go, const uint8_t *keep, int BH,
                      int L, int S, int E, int Ev, double scale, double *o, double *gq, double *gk, double *gv) {
    double p[8], dp[8];
    int b, i, j, e;
    memset(gq, 0, sizeof(double) * (size_t)(BH * L * E));
    memset(gk, 0, sizeof(double) * (size_t)(BH * S * E));
    memset(gv, 0, sizeof(double) * (size_t)(BH * S * Ev));
    for (b = 0; b < BH; b++)
        for (i = 0; i < L; i++) {
            const float *qi = q + (b * L + i) * E, *goi = go + (b * L + i) * Ev;
            double m = -INFINITY, sum = 0, dot = 0;
            for (j = 0; j < S; j++) {
                double x = 0;
                for (e = 0; e < E; e++) x += (double)qi[e] * k[(b * S + j) * E + e];
                p[j] = keep[i * S + j] ? scale * x : -INFINITY;
                if (p[j] > m) m = p[j];
            }
            for (j = 0; j < S; j++) sum += p[j] = m == -INFINITY ? 0 : exp(p[j] - m);
            for (j = 0; j < S; j++) p[j] = sum > 0 ? p[j] / sum : 0;
            for (e = 0; e < Ev; e++) {
                double x = 0;
                for (j = 0; j < S; j++) x += p[j] * v[(b * S + j) * Ev + e];
                o[(b * L + i) * Ev + e] = x;
            }
            for (j = 0; j < S; j++) {
                dp[j] = 0;
                for (e = 0; e < Ev; e++) {
                    dp[j] += (double)goi[e] * v[(b * S + j) * Ev + e];
                    gv[(b * S + j) * Ev + e] += p[j] * goi[e];
                }
                dot += p[j] * dp[j];
            }
            for (j = 0; j < S; j++) {
                double ds = scale * p[j] * (dp[j] - dot);
                for (e = 0; e < E; e++) {
                    gq[(b * L + i) * E + e] += ds * k[(b * S + j) * E + e];
                    gk[(b * S + j) * E + e] += ds * qi[e];
                }
            }
        }
}

/* 0 when t (any device, f32) holds want within 1e-4 (relative above 1), else a message */
static int attn_near(gdl_tensor *t, const double *want, const char *what, char *msg, size_t msz) {
    gdl_tensor *c = t ? gdl_to(t, gdl_cpu()) : NULL;
    int64_t i;
    if (!c) {
        snprintf(msg, msz, "%s: none (%.200s)", what, gdl_last_error());
        return 1;
    }
    for (i = 0; i < c->numel; i++) {
        double x = ((const float *)c->data)[i];
        if (!(fabs(x - want[i]) <= 1e-4 * (1 + fabs(want[i])))) {
            snprintf(msg, msz, "%s[%lld] = %.7g, expected %.7g", what, (long long)i, x, want[i]);
            if (c != t) gdl_free(c);
            return 1;
        }
    }
    if (c != t) gdl_free(c);
    return 0;
}

enum { ATTN_MASK_NONE, ATTN_MASK_BOOL, ATTN_MASK_ADD, ATTN_MASK_ADD_GRAD };

/* one run: heads of E (over 256: the composition), the mask kind (its row 1 keeps no key when dead),
   scale (GDL_SCALE_DEFAULT: 1/sqrt(E)); 0 when the output and gradients match attn_hand */
static int attn_semantics_one(gdl_device dev, int E, int mkind, int dead, double scale, char *msg, size_t msz) {
    enum { BH = 2, L = 3, S = 5, EV = 3 };
    int64_t sq[3] = {BH, L, E}, sk[3] = {BH, S, E}, sv[3] = {BH, S, EV}, so[3] = {BH, L, EV}, sm[2] = {L, S};
    uint8_t keep[L * S];
    float hm[L * S], *h[4];
    double *want[4], eff = scale == scale ? scale : 1 / sqrt((double)E);
    gdl_tensor *t[4] = {NULL, NULL, NULL, NULL}, *mask = NULL, *o = NULL;
    int i, bad = 1;
    const int64_t n[4] = {BH * L * E, BH * S * E, BH * S * EV, BH * L * EV};
    for (i = 0; i < L * S; i++) {
        keep[i] = (uint8_t)(mkind == ATTN_MASK_NONE || (!(dead && i / S == 1) && (i % S != 2 || i / S == 0)));
        hm[i] = keep[i] ? 0.0f : -INFINITY;
    }
    for (i = 0; i < 4; i++) h[i] = attn_randn(n[i], GDL_F32, 1);
    for (i = 0; i < 4; i++) want[i] = (double *)malloc(sizeof(double) * (size_t)n[i]); /* gq, gk, gv, o */
    if (!h[0] || !h[1] || !h[2] || !h[3] || !want[0] || !want[1] || !want[2] || !want[3]) {
        snprintf(msg, msz, "out of memory");
        goto done;
    }
    attn_hand(h[0], h[1], h[2], h[3], keep, BH, L, S, E, EV, eff, want[3], want[0], want[1], want[2]);
    gdl_arena_reset();
    if (!(t[0] = attn_put(h[0], 3, sq, GDL_F32, dev, 1)) || !(t[1] = attn_put(h[1], 3, sk, GDL_F32, dev, 1)) ||
        !(t[2] = attn_put(h[2], 3, sv, GDL_F32, dev, 1)) || !(t[3] = attn_put(h[3], 3, so, GDL_F32, dev, 0)))
        goto fail;
    if (mkind == ATTN_MASK_BOOL) {
        gdl_tensor *u = gdl_from_array(keep, 2, sm, GDL_U8, gdl_cpu());
        mask = u ? gdl_to(u, dev) : NULL;
        if (mask != u) gdl_free(u);
    } else if (mkind != ATTN_MASK_NONE) {
        mask = attn_put(hm, 2, sm, GDL_F32, dev, mkind == ATTN_MASK_ADD_GRAD);
    }
    if ((mkind != ATTN_MASK_NONE && !mask) || !(o = gdl_scaled_dot_product_attention(t[0], t[1], t[2], mask, 0, 0, scale)) ||
        gdl_backward_grad(o, t[3]) < 0)
        goto fail;
    bad = attn_near(o, want[3], "the output", msg, msz) || attn_near(t[0]->grad, want[0], "query's gradient", msg, msz) ||
          attn_near(t[1]->grad, want[1], "key's gradient", msg, msz) ||
          attn_near(t[2]->grad, want[2], "value's gradient", msg, msz);
    if (!bad && mkind == ATTN_MASK_ADD_GRAD) { /* the mask's gradient: finite, 0 where no weight is */
        gdl_tensor *c = mask->grad ? gdl_to(mask->grad, gdl_cpu()) : NULL;
        for (i = 0; c && i < L * S && !bad; i++) {
            float g = ((const float *)c->data)[i];
            if (!(g == g) || (!keep[i] && g != 0)) {
                snprintf(msg, msz, "the mask's gradient [%d] = %g", i, (double)g);
                bad = 1;
            }
        }
        if (!c) {
            snprintf(msg, msz, "the mask has no gradient");
            bad = 1;
        }
        if (c && c != mask->grad) gdl_free(c);
    }
    goto done;
fail:
    snprintf(msg, msz, "failed: %.200s", gdl_last_error());
done:
    for (i = 0; i < 4; i++) {
        gdl_free(t[i]);
        free(h[i]);
        free(want[i]);
    }
    gdl_free(mask);
    gdl_arena_reset();
    return bad;
}

TEST attn_fully_masked_rows(void *arg) {
    static const char *kinds[4] = {"no mask", "a u8 mask (fused)", "an additive mask (fused)",
                                   "an additive mask requiring grad (unfused)"};
    const gdl_device dev = *(const gdl_device *)arg;
    char msg[300];
    int E, kind;
    gdl_manual_seed(31);
    for (E = 4; E <= 300; E += 296) /* 300: over the kernels' 256, the composition with every mask */
        for (kind = ATTN_MASK_BOOL; kind <= ATTN_MASK_ADD_GRAD; kind++)
            if (attn_semantics_one(dev, E, kind, 1, GDL_SCALE_DEFAULT, msg, sizeof msg))
                FAILf("E %d, %s, a row with no key: %s", E, kinds[kind], msg);
    PASS();
}

TEST attn_explicit_scale(void *arg) {
    static const double scales[4] = {-0.5, 0, 0.75, GDL_SCALE_DEFAULT};
    const gdl_device dev = *(const gdl_device *)arg;
    char msg[300];
    int s, kind;
    gdl_manual_seed(37);
    for (s = 0; s < 4; s++)
        for (kind = ATTN_MASK_NONE; kind <= ATTN_MASK_ADD_GRAD; kind += 3) /* fused; the composition */
            if (attn_semantics_one(dev, 4, kind, 0, scales[s], msg, sizeof msg))
                FAILf("scale %g, %s: %s", scales[s], kind ? "the composition" : "fused", msg);
    PASS();
}

#endif
