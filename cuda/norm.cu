// ----------------------------------------------------------------------------
// normalisation: batchnorm (one block per channel), layernorm (one block per row)

#define GDL__CU_NORM_THREADS 256

// element m of channel c in x [N,C,S], m = n*S + s
__device__ __forceinline__ int64_t gdl__bn_at(int64_t m, int64_t C, int64_t S, int64_t c) {
    int64_t n = m / S;
    return (n * C + c) * S + (m - n * S);
}

// Two passes over the channel (mean, then squared deviations) as the CPU.
// Per-channel scalars are kept in double, as the CPU keeps them. act GDL_ACT_RELU: a
// fused ReLU on the f32 value before the rounding to T (the same as after it: rounding
// keeps the sign); GDL_ACT_GELU: the f32 value kept in pre, y = GELU of it
// (gdl_unary1_float, the unary kernel's), rounded once to T.
template <typename T>
__global__ void gdl__k_batchnorm(int64_t N, int64_t C, int64_t S, const T *x, const float *gamma,
                                 const float *beta, T *y, float *mean, float *invstd, float *run_mean,
                                 float *run_var, int training, double momentum, double eps, int act, float *pre) {
    GDL_CU_ROWS(c, C) {
        int64_t M = N * S;
        double mu, var;
        if (training) {
            float s = 0, q = 0;
            for (int64_t m = threadIdx.x; m < M; m += blockDim.x) s += gdl__ld(x[gdl__bn_at(m, C, S, c)]);
            mu = (double)gdl__block_sum(s) / (double)M;
            float muf = (float)mu;
            for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
                float d = gdl__ld(x[gdl__bn_at(m, C, S, c)]) - muf;
                q += d * d;
            }
            double sq = (double)gdl__block_sum(q);
            var = sq / (double)M;
            if (run_mean && threadIdx.x == 0) {
                run_mean[c] = (float)((1 - momentum) * run_mean[c] + momentum * mu);
                run_var[c] = (float)((1 - momentum) * run_var[c] + momentum * (M > 1 ? sq / (double)(M - 1) : var));
            }
        } else {
            mu = run_mean[c];
            var = run_var[c];
        }
        double is = 1.0 / sqrt(var + eps);
        if (threadIdx.x == 0) {
            mean[c] = (float)mu;
            invstd[c] = (float)is;
        }
        float muf = (float)mu, isf = (float)is, gm = gamma ? gamma[c] : 1.0f, bt = beta ? beta[c] : 0.0f;
        for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
            int64_t j = gdl__bn_at(m, C, S, c);
            float v = (gdl__ld(x[j]) - muf) * isf * gm + bt;
            if (act == GDL_ACT_GELU) {
                pre[j] = v;
                v = gdl_unary1_float(GDL_UN_GELU_ERF, v, 0.0f);
            }
            y[j] = gdl__st<T>(act == GDL_ACT_RELU && !(v > 0) ? 0.0f : v);
        }
    }
}

template <typename T>
static int gdl__cu_batchnorm_t(int64_t N, int64_t C, int64_t S, const T *x, const float *gamma, const float *beta,
                               T *y, float *mean, float *invstd, float *run_mean, float *run_var, int training,
                               double momentum, double eps, int act, float *pre) {
    if (C <= 0) return 0;
    if (act != GDL_ACT_NONE && act != GDL_ACT_RELU && (act != GDL_ACT_GELU || !pre)) {
        gdl__set_error("gdl_cuda: batchnorm: fused activation %d%s (GDL_ACT_NONE, GDL_ACT_RELU, or GDL_ACT_GELU with pre)",
                       act, act == GDL_ACT_GELU ? " without pre" : "");
        return -1;
    }
    if (!training && (!run_mean || !run_var)) {
        gdl__set_error("gdl_cuda: batchnorm in eval mode needs running statistics");
        return -1;
    }
    GDL_CU_LAUNCH(gdl__k_batchnorm<T>, gdl__cu_row_grid(C), GDL__CU_NORM_THREADS, 0, gdl__cu_stream())(N, C, S, x, gamma, beta, y, mean, invstd,
                                                                    run_mean, run_var, training, momentum, eps, act, pre);
    GDL_CU_LAUNCHED();
    return 0;
}

// training: gx += gamma*invstd/M * (M*gy - sum(gy) - xhat*sum(gy*xhat))
// eval:     gx += gy*gamma*invstd (the statistics are constants)
// (gx = 0 + ... when acc is 0: gx unset, not read). ry: a fused ReLU's output; gy is then
// taken as ReLU's backward gives it, 0 + (ry > 0 ? gy : 0). pre: a fused GELU's input (f32);
// gy is then taken as the unary kernel's GELU backward gives it, 0 + gy GELU'(pre) (for f32
// nvcc may fuse the product into that add: an FMA with 0, the same value).
template <typename T>
__device__ __forceinline__ float gdl__bn_gy(const T *gy, const T *ry, const float *pre, int64_t j) {
    if (pre) return 0.0f + gdl__ld(gy[j]) * gdl_unary_grad1_float(GDL_UN_GELU_ERF, pre[j], 0.0f, 0.0f);
    return ry ? 0.0f + (gdl__ld(ry[j]) > 0 ? gdl__ld(gy[j]) : 0.0f) : gdl__ld(gy[j]);
}
template <typename T>
__global__ void gdl__k_batchnorm_backward(int64_t N, int64_t C, int64_t S, const T *x, const T *gy, const T *ry,
                                          const float *pre, const float *gamma, const float *mean,
                                          const float *invstd, int training, T *gx, float *ggamma, float *gbeta,
                                          int acc) {
    GDL_CU_ROWS(c, C) {
        int64_t M = N * S;
        float mu = mean[c], is = invstd[c], gm = gamma ? gamma[c] : 1.0f, sg = 0, sgx = 0;
        for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
            int64_t j = gdl__bn_at(m, C, S, c);
            float gj = gdl__bn_gy(gy, ry, pre, j);
            sg += gj;
            sgx += gj * (gdl__ld(x[j]) - mu) * is;
        }
        sg = gdl__block_sum(sg);
        sgx = gdl__block_sum(sgx);
        if (threadIdx.x == 0) {
            if (ggamma) ggamma[c] += sgx;
            if (gbeta) gbeta[c] += sg;
        }
        if (!gx) continue;
        float k = gm * is / (float)M, Mf = (float)M;
        for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
            int64_t j = gdl__bn_at(m, C, S, c);
            float old = acc ? gdl__ld(gx[j]) : 0.0f;
            float gj = gdl__bn_gy(gy, ry, pre, j);
            if (training) gx[j] = gdl__st<T>(old + k * (Mf * gj - sg - (gdl__ld(x[j]) - mu) * is * sgx));
            else gx[j] = gdl__st<T>(old + gj * gm * is);
        }
    }
}

template <typename T>
static int gdl__cu_batchnorm_backward_t(int64_t N, int64_t C, int64_t S, const T *x, const T *gy, const T *ry,
                                        const float *pre, const float *gamma, const float *mean, const float *invstd,
                                        int training, T *gx, float *ggamma, float *gbeta, int acc) {
    if (C <= 0 || (!gx && !ggamma && !gbeta)) return 0;
    GDL_CU_LAUNCH(gdl__k_batchnorm_backward<T>, gdl__cu_row_grid(C), GDL__CU_NORM_THREADS, 0, gdl__cu_stream())(N, C, S, x, gy, ry, pre, gamma,
                                                                             mean, invstd, training, gx, ggamma, gbeta, acc);
    GDL_CU_LAUNCHED();
    return 0;
}

static int gdl__cu_batchnorm_f32(int64_t N, int64_t C, int64_t S, const float *x, const float *gamma, const float *beta,
                             float *y, float *mean, float *invstd, float *run_mean, float *run_var, int training,
                             double momentum, double eps, int act, float *pre) {
    return gdl__cu_batchnorm_t<float>(N, C, S, x, gamma, beta, y, mean, invstd, run_mean, run_var, training, momentum, eps,
                                      act, pre);
}
static int gdl__cu_batchnorm_backward_f32(int64_t N, int64_t C, int64_t S, const float *x, const float *gy, const float *y,
                                      const float *pre, const float *gamma, const float *mean, const float *invstd,
                                      int training, float *gx, float *ggamma, float *gbeta, int accumulate) {
    return gdl__cu_batchnorm_backward_t<float>(N, C, S, x, gy, y, pre, gamma, mean, invstd, training, gx, ggamma, gbeta,
                                               accumulate);
}
static int gdl__cu_batchnorm(gdl_dtype dt, int64_t N, int64_t C, int64_t S, const void *x, const float *gamma,
                             const float *beta, void *y, float *mean, float *invstd, float *run_mean, float *run_var,
                             int training, double momentum, double eps, int act, float *pre) {
    if (dt == GDL_F32)
        return gdl__cu_batchnorm_f32(N, C, S, (const float *)x, gamma, beta, (float *)y, mean, invstd, run_mean, run_var,
                                     training, momentum, eps, act, pre);
    return gdl__cu_dispatch("batchnorm", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_batchnorm_t(N, C, S, (const T *)x, gamma, beta, (T *)y, mean, invstd, run_mean, run_var, training,
                                   momentum, eps, act, pre);
    });
}
static int gdl__cu_batchnorm_backward(gdl_dtype dt, int64_t N, int64_t C, int64_t S, const void *x, const void *gy,
                                      const void *y, const float *gamma, const float *mean, const float *invstd,
                                      int training, void *gx, float *ggamma, float *gbeta, int accumulate, int act) {
    // act GDL_ACT_GELU: y is the forward's pre, f32 whatever dt is
    const float *pre = act == GDL_ACT_GELU ? (const float *)y : NULL;
    if (act != GDL_ACT_NONE && ((act != GDL_ACT_RELU && act != GDL_ACT_GELU) || !y)) {
        gdl__set_error("gdl_cuda: batchnorm_backward: fused activation %d%s (GDL_ACT_NONE, or GDL_ACT_RELU / "
                       "GDL_ACT_GELU with y)", act, y ? "" : " without y");
        return -1;
    }
    if (act != GDL_ACT_RELU) y = NULL;
    if (dt == GDL_F32)
        return gdl__cu_batchnorm_backward_f32(N, C, S, (const float *)x, (const float *)gy, (const float *)y, pre, gamma,
                                              mean, invstd, training, (float *)gx, ggamma, gbeta, accumulate);
    return gdl__cu_dispatch("batchnorm_backward", dt, 0, [&](auto t) {
        typedef typename decltype(t)::type T;
        return gdl__cu_batchnorm_backward_t(N, C, S, (const T *)x, (const T *)gy, (const T *)y, pre, gamma, mean,
                                            invstd, training, (T *)gx, ggamma, gbeta, accumulate);
    });
}

__global__ void gdl__k_layernorm(int64_t rows, int64_t D, const float *x, const float *gamma, const float *beta,
                                 float eps, float *y, float *mean, float *rstd) {
    GDL_CU_ROWS(r, rows) {
        const float *p = x + r * D;
        float s = 0, q = 0;
        for (int64_t k = threadIdx.x; k < D; k += blockDim.x) s += p[k];
        float mu = gdl__block_sum(s) / (float)D;
        for (int64_t k = threadIdx.x; k < D; k += blockDim.x) q += (p[k] - mu) * (p[k] - mu);
        float rs = 1.0f / sqrtf(gdl__block_sum(q) / (float)D + eps);
        if (threadIdx.x == 0) {
            mean[r] = mu;
            rstd[r] = rs;
        }
        for (int64_t k = threadIdx.x; k < D; k += blockDim.x)
            y[r * D + k] = (p[k] - mu) * rs * (gamma ? gamma[k] : 1.0f) + (beta ? beta[k] : 0.0f);
    }
}

static int gdl__cu_layernorm(int64_t rows, int64_t D, const float *x, const float *gamma, const float *beta,
                             double eps, float *y, float *mean, float *rstd) {
    if (rows <= 0 || D <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_layernorm, gdl__cu_row_grid(rows), gdl__cu_row_threads(D), 0, gdl__cu_stream())(rows, D, x, gamma, beta, (float)eps, y,
                                                                         mean, rstd);
    GDL_CU_LAUNCHED();
    return 0;
}

// gx += rstd * (gh - mean(gh) - xhat*mean(gh*xhat)), gh = gy*gamma
__global__ void gdl__k_layernorm_backward_x(int64_t rows, int64_t D, const float *x, const float *gy,
                                            const float *gamma, const float *mean, const float *rstd, float *gx) {
    GDL_CU_ROWS(r, rows) {
        const float *p = x + r * D, *g = gy + r * D;
        float mu = mean[r], rs = rstd[r], s1 = 0, s2 = 0;
        for (int64_t k = threadIdx.x; k < D; k += blockDim.x) {
            float gh = g[k] * (gamma ? gamma[k] : 1.0f);
            s1 += gh;
            s2 += gh * (p[k] - mu) * rs;
        }
        s1 = gdl__block_sum(s1) / (float)D;
        s2 = gdl__block_sum(s2) / (float)D;
        for (int64_t k = threadIdx.x; k < D; k += blockDim.x) {
            float xh = (p[k] - mu) * rs, gh = g[k] * (gamma ? gamma[k] : 1.0f);
            gx[r * D + k] += rs * (gh - s1 - xh * s2);
        }
    }
}

// ggamma[k] += sum_r gy*xhat, gbeta[k] += sum_r gy. Blocks of 32 columns x
// 16 row groups: reads are coalesced along the row, each row group sums its
// rows in order, and the 16 partial sums are added in a fixed order.
#define GDL__CU_LN_ROWGROUPS 16
__global__ void gdl__k_layernorm_backward_params(int64_t rows, int64_t D, const float *x, const float *gy,
                                                 const float *mean, const float *rstd, float *ggamma,
                                                 float *gbeta) {
    __shared__ float sg[GDL__CU_LN_ROWGROUPS][33], sb[GDL__CU_LN_ROWGROUPS][33];
    for (int64_t k0 = (int64_t)blockIdx.x * 32; k0 < D; k0 += (int64_t)gridDim.x * 32) {
        int64_t k = k0 + threadIdx.x;
        float pg = 0, pb = 0;
        if (k < D)
            for (int64_t r = threadIdx.y; r < rows; r += GDL__CU_LN_ROWGROUPS) {
                float g = gy[r * D + k];
                pg += g * (x[r * D + k] - mean[r]) * rstd[r];
                pb += g;
            }
        __syncthreads(); /* the previous column tile is done with sg/sb */
        sg[threadIdx.y][threadIdx.x] = pg;
        sb[threadIdx.y][threadIdx.x] = pb;
        __syncthreads();
        if (threadIdx.y == 0 && k < D) {
            float tg = 0, tb = 0;
            for (int j = 0; j < GDL__CU_LN_ROWGROUPS; j++) {
                tg += sg[j][threadIdx.x];
                tb += sb[j][threadIdx.x];
            }
            if (ggamma) ggamma[k] += tg;
            if (gbeta) gbeta[k] += tb;
        }
    }
}

static int gdl__cu_layernorm_backward(int64_t rows, int64_t D, const float *x, const float *gy, const float *gamma,
                                      const float *mean, const float *rstd, float *gx, float *ggamma, float *gbeta) {
    if (rows <= 0 || D <= 0) return 0;
    if (gx) {
        GDL_CU_LAUNCH(gdl__k_layernorm_backward_x, gdl__cu_row_grid(rows), gdl__cu_row_threads(D), 0, gdl__cu_stream())(rows, D, x, gy, gamma, mean,
                                                                                        rstd, gx);
        GDL_CU_LAUNCHED();
    }
    if (ggamma || gbeta) {
        dim3 block(32, GDL__CU_LN_ROWGROUPS);
        GDL_CU_LAUNCH(gdl__k_layernorm_backward_params, gdl__cu_row_grid((D + 31) / 32), block, 0, gdl__cu_stream())(rows, D, x, gy, mean, rstd,
                                                                                     ggamma, gbeta);
        GDL_CU_LAUNCHED();
    }
    return 0;
}

