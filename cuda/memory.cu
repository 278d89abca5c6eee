// ----------------------------------------------------------------------------
// memory, copies, fill, cast

// Copies go to the compute stream, behind the kernels that produce or
// consume their device side. A copy to the host returns once the bytes are
// there; a copy from the host returns once the host buffer may be reused
// (the caller's array may be pinned, when cudaMemcpyAsync would not wait);
// a device-to-device copy and a memset return at once.
static int gdl__cu_copy(void *dst, const void *src, size_t bytes, int kind) {
    if (!bytes || dst == src) return 0;
    cudaStream_t st = gdl__cu_stream();
    if (kind == 0 || kind == 1) {
        GDL_CU_TRY(cudaMemcpyAsync(dst, src, bytes, kind == 0 ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, st),
                   -1);
        gdl__count_sync();
        GDL_CU_TRY(cudaStreamSynchronize(st), -1);
    } else {
        // The CPU copy is a memmove; cudaMemcpy's areas must not overlap (two
        // views of one tensor, gdl_copy_ between overlapping slices): go
        // through a scratch block then
        uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
        if (d < s + bytes && s < d + bytes) {
            void *tmp = gdl__cu_alloc(bytes);
            if (!tmp) return -1;
            cudaError_t e = cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, st);
            if (e == cudaSuccess) e = cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, st);
            gdl__cu_free(tmp); /* stream order: the copies are queued before any reuse */
            GDL_CU_TRY(e, -1);
            return 0;
        }
        GDL_CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st), -1);
    }
    return 0;
}

static int gdl__cu_memset0(void *p, size_t bytes) {
    if (!bytes) return 0;
    GDL_CU_TRY(cudaMemsetAsync(p, 0, bytes, gdl__cu_stream()), -1);
    return 0;
}

static int gdl__cu_synchronize(void) {
    gdl__count_sync();
    GDL_CU_TRY(cudaDeviceSynchronize(), -1);
    return 0;
}

__global__ void gdl__k_fill(float *x, int64_t n, float v) {
    GDL_CU_LOOP(i, n) x[i] = v;
}

static int gdl__cu_fill(float *x, int64_t n, float v) {
    if (n <= 0) return 0;
    GDL_CU_LAUNCH(gdl__k_fill, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(x, n, v);
    GDL_CU_LAUNCHED();
    return 0;
}

// Half conversions round to nearest even (cuda_fp16.h / cuda_bf16.h); NaNs
// are produced bit for bit as gpudl.h's gdl_f32_to_f16 / gdl_f32_to_bf16 do.
__device__ __forceinline__ float gdl__f16_to_f32(uint16_t h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) /* NaN: keep the payload */
        return __uint_as_float(((uint32_t)(h & 0x8000u) << 16) | 0x7f800000u | ((uint32_t)(h & 0x3ffu) << 13));
    return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ uint16_t gdl__f32_to_f16(float f) {
    if (f != f) return (uint16_t)(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u);
    return __half_as_ushort(__float2half_rn(f));
}
__device__ __forceinline__ float gdl__bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ uint16_t gdl__f32_to_bf16(float f) {
    if (f != f) return (uint16_t)((__float_as_uint(f) >> 16) | 0x40u);
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

// Loads and stores of the kernels templated on the storage type T: float,
// __half or __nv_bfloat16 (the entries that take a dtype). The arithmetic
// is f32 whatever T is; for float both are the identity, so the f32
// instantiations compute exactly what the f32-only kernels did.
__device__ __forceinline__ float gdl__ld(float v) { return v; }
__device__ __forceinline__ float gdl__ld(__half v) { return gdl__f16_to_f32(__half_as_ushort(v)); }
__device__ __forceinline__ float gdl__ld(__nv_bfloat16 v) { return gdl__bf16_to_f32(__bfloat16_as_ushort(v)); }
template <typename T> __device__ __forceinline__ T gdl__st(float f);
template <> __device__ __forceinline__ float gdl__st<float>(float f) { return f; }
template <> __device__ __forceinline__ __half gdl__st<__half>(float f) { return __ushort_as_half(gdl__f32_to_f16(f)); }
template <> __device__ __forceinline__ __nv_bfloat16 gdl__st<__nv_bfloat16>(float f) {
    return __ushort_as_bfloat16(gdl__f32_to_bf16(f));
}

// The one place a runtime dtype becomes a storage type: calls
// f(gdl__cu_tag<T>()) with T = __half for f16, __nv_bfloat16 for bf16 and,
// when f32_too, float for f32; any other dtype is an error naming `what`.
// Each op is one kernel template and one launcher template (gdl__cu_X_t<T>);
// for f32 the entry calls gdl__cu_NAME_f32 (the launcher with float), else it
// dispatches:
//   return gdl__cu_dispatch("unary", dt, 0, [&](auto t) {
//       typedef typename decltype(t)::type T;
//       return gdl__cu_unary_t<T>(op, n, (const T *)x, (T *)y, alpha);
//   });
template <typename T> struct gdl__cu_tag {
    typedef T type;
};
static int gdl__cu_dtype_check(const char *what, gdl_dtype dt, int f32_too) {
    if (dt == GDL_F16 || dt == GDL_BF16 || (f32_too && dt == GDL_F32)) return 0;
    gdl__set_error("gdl_cuda: the low-precision %s takes %sf16 or bf16, not %s", what, f32_too ? "f32, " : "",
                   gdl_dtype_name(dt));
    return -1;
}
template <typename F> static int gdl__cu_dispatch(const char *what, gdl_dtype dt, int f32_too, F &&f) {
    if (gdl__cu_dtype_check(what, dt, f32_too) < 0) return -1;
    return dt == GDL_F16 ? f(gdl__cu_tag<__half>()) : dt == GDL_BF16 ? f(gdl__cu_tag<__nv_bfloat16>()) : f(gdl__cu_tag<float>());
}

// Conversions to the integer dtypes, as gpudl.h's gdl__store: truncate
// toward zero and saturate to the destination's range; NaN gives 0. (The
// float bounds are exact: 2^31 and -2^31 are floats, and no float lies
// strictly between 2^31 - 1 and 2^31.)
__device__ __forceinline__ int32_t gdl__to_i32(float v) {
    return v != v ? 0 : v >= 2147483648.0f ? INT32_MAX : v <= -2147483648.0f ? INT32_MIN : (int32_t)v;
}
__device__ __forceinline__ uint8_t gdl__to_u8(float v) {
    return v != v ? 0 : v >= 255.0f ? (uint8_t)255 : v <= 0.0f ? (uint8_t)0 : (uint8_t)v;
}

// One kernel for all 20 dtype pairs: the switches are uniform across the
// grid, so they cost nothing next to the memory traffic. Integers convert
// exactly to float and i32; float -> int and i32 -> u8 truncate toward zero
// and saturate, as on the CPU.
__global__ void gdl__k_cast(void *dst, int dt, const void *src, int st, int64_t n) {
    GDL_CU_LOOP(i, n) {
        int32_t iv = 0;
        float fv = 0;
        bool is_int = false;
        switch (st) {
        case GDL_F32: fv = ((const float *)src)[i]; break;
        case GDL_I32: iv = ((const int32_t *)src)[i]; is_int = true; break;
        case GDL_U8: iv = ((const uint8_t *)src)[i]; is_int = true; break;
        case GDL_F16: fv = gdl__f16_to_f32(((const uint16_t *)src)[i]); break;
        default: fv = gdl__bf16_to_f32(((const uint16_t *)src)[i]); break;
        }
        if (is_int) fv = (float)iv;
        switch (dt) {
        case GDL_F32: ((float *)dst)[i] = fv; break;
        case GDL_I32: ((int32_t *)dst)[i] = is_int ? iv : gdl__to_i32(fv); break;
        case GDL_U8: ((uint8_t *)dst)[i] = is_int ? (uint8_t)(iv < 0 ? 0 : iv > 255 ? 255 : iv) : gdl__to_u8(fv); break;
        case GDL_F16: ((uint16_t *)dst)[i] = gdl__f32_to_f16(fv); break;
        default: ((uint16_t *)dst)[i] = gdl__f32_to_bf16(fv); break;
        }
    }
}

static int gdl__cu_cast(void *dst, gdl_dtype dt, const void *src, gdl_dtype st, int64_t n) {
    if ((unsigned)dt >= GDL_DTYPE_COUNT || (unsigned)st >= GDL_DTYPE_COUNT) {
        gdl__set_error("gdl_cuda: cast between invalid dtypes %d and %d", (int)st, (int)dt);
        return -1;
    }
    if (n <= 0) return 0;
    if (dt == st) return gdl__cu_copy(dst, src, (size_t)n * gdl_dtype_size(dt), 2);
    GDL_CU_LAUNCH(gdl__k_cast, gdl__cu_grid(n, GDL__CU_THREADS), GDL__CU_THREADS, 0, gdl__cu_stream())(dst, (int)dt, src, (int)st, n);
    GDL_CU_LAUNCHED();
    return 0;
}

