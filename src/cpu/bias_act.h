/* src/cpu/bias_act.h — the CPU's fused bias + activation and its backward. */

/* Fused bias + activation (gdl_linear_act, gdl_conv2d_act). The arithmetic is
   the unfused ops' own (binary add in f32, then gdl__unary1; the backward's
   gdl__unary_grad1 product rounded and added to zero), so the fused path is
   bitwise the unfused one. */
/* y = out in place: y + bias, its copy in pre (when asked), then the activation act (< 0: none). The
   slots in locals: read from a, gcc does not unswitch the loop on them and leaves it scalar. */
static void gdl__bias_act_part(gdl__args a, int64_t lo, int64_t hi) {
    const int act = a.op;
    const int64_t C = a.C, inner = a.inner;
    const gdl_real *bias = a.bias;
    gdl_real *y = a.out, *pre = a.pre;
    int64_t i;
    for (i = lo; i < hi; i++) {
        gdl_real v = y[i];
        if (bias) v = v + bias[(i / inner) % C];
        if (pre) pre[i] = v;
        y[i] = act < 0 || act == GDL_UN_GELU_ERF ? v : act == GDL_UN_RELU ? (v > 0 ? v : 0) : gdl__unary1(act, v, 0);
    }
    if (act == GDL_UN_GELU_ERF) gdl__gelu_rows(y + lo, y + lo, hi - lo); /* in vectors, after the pass */
}
static int gdl__cpu_bias_act(int act, int64_t outer, int64_t C, int64_t inner, const gdl_real *bias, gdl_real *y,
                             gdl_real *pre) {
    gdl__args a = gdl__args_none();
    int64_t n = outer * C * inner;
    a.op = act; a.C = C; a.inner = inner ? inner : 1; a.bias = bias; a.out = y; a.pre = pre;
    gdl__parallel_loop(n, act == GDL_UN_GELU_TANH || act == GDL_UN_GELU_ERF ? 8 * n : n, gdl__bias_act_part, &a);
    return 0;
}
static int gdl__cpu_linear_act(int act, int M, int N, int K, const gdl_real *x, const gdl_real *w, const gdl_real *bias,
                               gdl_real *y, gdl_real *pre) {
#ifndef GDL__GEMM_CBLAS
    /* bias and act in the GEMM's epilogue, on each tile as it is stored: one pass over y fewer */
    gdl__gemm_args g;
    if (M <= 0 || N <= 0) return 0;
    gdl__gemm_args_init(&g, 0, 1, M, N, K, 1, x, K, w, K, 0, y, N);
    g.bias = bias;
    g.bias_col = 1;
    g.pre = pre;
    g.act = act;
    gdl__gemm_run(&g);
    return 0;
#else
    if (gdl__cpu_gemm_f32(0, 1, M, N, K, 1, x, K, 0, w, K, 0, 0, y, N, 0, 1) < 0) return -1;
    return gdl__cpu_bias_act(act, M, N, 1, bias, y, pre);
#endif
}
/* x: the pre-activation */
static void gdl__act_backward_part(gdl__args a, int64_t lo, int64_t hi) {
    int64_t i;
    if (a.op < 0)
        for (i = lo; i < hi; i++) a.out[i] = (gdl_real)0 + a.gy[i];
    else if (a.op == GDL_UN_RELU)
        gdl__relu_grad_rows(a.x + lo, a.gy + lo, a.out + lo, hi - lo, 0);
    else if (a.op == GDL_UN_GELU_ERF)
        gdl__gelu_grad_rows(a.x + lo, a.gy + lo, a.out + lo, hi - lo, 0);
    else
        for (i = lo; i < hi; i++)
            a.out[i] = (gdl_real)0 + (gdl_real)(a.gy[i] * gdl__unary_grad1(a.op, a.x[i], 0, 0));
}
static int gdl__cpu_act_backward_reduce(int act, int64_t outer, int64_t n, int64_t inner, const gdl_real *pre,
                                        const gdl_real *gy, gdl_real *gpre, gdl_real *sum, int accumulate) {
    gdl__args a = gdl__args_none();
    int64_t total = outer * n * inner;
    a.op = act; a.x = pre; a.gy = gy; a.out = gpre;
    gdl__parallel_loop(total, act == GDL_UN_GELU_TANH || act == GDL_UN_GELU_ERF ? 8 * total : total,
                       gdl__act_backward_part, &a);
    return sum ? gdl__cpu_reduce(GDL_RED_SUM, outer, n, inner, gpre, sum, NULL, accumulate) : 0;
}
