// ----------------------------------------------------------------------------
// devices

int gdl_cuda_runtime_device_count(void) {
    // Asked before every op (gdl__be), so asked of the driver once. With no
    // driver or no GPU, cudaGetDeviceCount fails: that means 0 devices, and
    // the error is cleared so that it cannot surface later.
    static std::atomic<int> cached(-1);
    int n = cached.load();
    if (n >= 0) return n;
    n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    if (n > GDL__CU_MAX_DEVICES) n = GDL__CU_MAX_DEVICES;
    cached.store(n);
    return n;
}

static int gdl__cu_check_index(const char *fn, int index) {
    int n = gdl_cuda_runtime_device_count();
    if (index < 0 || index >= n) {
        gdl__set_error("%s: no CUDA device %d (%d available)", fn, index, n);
        return -1;
    }
    return 0;
}

int gdl_cuda_set_device(int index) {
    if (gdl__cu_check_index("gdl_cuda_set_device", index) < 0) return -1;
    GDL_CU_TRY(cudaSetDevice(index), -1);
    return 0;
}

int gdl_cuda_device_info(int index, char *name, size_t name_len, size_t *total_mem, size_t *free_mem,
                         int *cc_major, int *cc_minor, int *sm_count, int *clock_khz) {
    gdl__cu_state &S = gdl__cu();
    cudaDeviceProp prop;
    if (gdl__cu_check_index("gdl_cuda_device_info", index) < 0) return -1;
    {
        // the properties do not change: ask once (gdl_device_name calls this often)
        std::lock_guard<std::mutex> lock(S.mu);
        if (!S.have_prop[index]) {
            GDL_CU_TRY(cudaGetDeviceProperties(&S.prop[index], index), -1);
            S.have_prop[index] = 1;
        }
        prop = S.prop[index];
    }
    if (name && name_len) {
        strncpy(name, prop.name, name_len - 1);
        name[name_len - 1] = 0;
    }
    if (total_mem) *total_mem = prop.totalGlobalMem;
    if (cc_major) *cc_major = prop.major;
    if (cc_minor) *cc_minor = prop.minor;
    if (sm_count) *sm_count = prop.multiProcessorCount;
    if (clock_khz) {
        // cudaDeviceProp.clockRate is gone in CUDA 13; the attribute stays
        int v = 0;
        GDL_CU_TRY(cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, index), -1);
        *clock_khz = v;
    }
    if (free_mem) {
        // cudaMemGetInfo answers for the current device
        int cur = 0;
        size_t fr = 0, tot = 0;
        GDL_CU_TRY(cudaGetDevice(&cur), -1);
        if (cur != index) GDL_CU_TRY(cudaSetDevice(index), -1);
        cudaError_t e = cudaMemGetInfo(&fr, &tot);
        if (cur != index) GDL_CU_TRY(cudaSetDevice(cur), -1);
        GDL_CU_TRY(e, -1);
        *free_mem = fr;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// cuBLAS handles: one per device, made on first use

void gdl_cuda_set_tf32(int on) {
    gdl__cu_state &S = gdl__cu();
    std::lock_guard<std::mutex> lock(S.mu);
    S.tf32 = on != 0;
    for (int d = 0; d < GDL__CU_MAX_DEVICES; d++)
        if (S.blas[d])
            GDL_CUBLAS_TRY(cublasSetMathMode(S.blas[d], S.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), );
}

// cuBLAS's workspace per handle, as PyTorch sizes it: 32 MiB on Hopper and
// later, 4 MiB before. Given by us, cuBLAS allocates nothing inside a call,
// which stream capture requires.
static size_t gdl__cu_blas_ws_bytes(int dev) {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        major = 0;
    }
    return (size_t)(major >= 9 ? 32 : 4) << 20;
}

// The current device's handle, bound to its compute stream and workspace.
static cublasHandle_t gdl__cu_blas(void) {
    gdl__cu_state &S = gdl__cu();
    int dev;
    if (gdl__cu_current(&dev) < 0) return NULL;
    cudaStream_t st = gdl__cu_stream(); /* before the lock: it takes it too */
    std::lock_guard<std::mutex> lock(S.mu);
    if (!S.blas[dev]) {
        cublasHandle_t h;
        size_t wsb = gdl__cu_blas_ws_bytes(dev);
        void *ws = NULL;
        GDL_CU_TRY(cudaMalloc(&ws, wsb), NULL);
        cublasStatus_t st2 = cublasCreate(&h);
        // PyTorch's default: full fp32 matmuls unless TF32 is asked for
        if (st2 == CUBLAS_STATUS_SUCCESS) {
            st2 = cublasSetMathMode(h, S.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
            if (st2 == CUBLAS_STATUS_SUCCESS) st2 = cublasSetStream(h, st);
            if (st2 == CUBLAS_STATUS_SUCCESS) st2 = cublasSetWorkspace(h, ws, wsb);
            if (st2 != CUBLAS_STATUS_SUCCESS) cublasDestroy(h);
        }
        if (st2 != CUBLAS_STATUS_SUCCESS) {
            if (cudaFree(ws) != cudaSuccess) (void)cudaGetLastError();
            GDL_CUBLAS_TRY(st2, NULL);
        }
        S.blas[dev] = h;
        S.blas_ws[dev] = ws;
    }
    return S.blas[dev];
}

// ----------------------------------------------------------------------------
// pinned memory, streams and events (the data loader orders its copies with
// them); a NULL stream is the current device's compute stream

static cudaStream_t gdl__cu_resolve(void *stream) { return stream ? (cudaStream_t)stream : gdl__cu_stream(); }

static void *gdl__cu_host_alloc(size_t bytes) {
    void *p = NULL;
    GDL_CU_TRY(cudaMallocHost(&p, bytes ? bytes : 1), NULL);
    return p;
}

static void gdl__cu_host_free(void *p) {
    if (p) GDL_CU_TRY(cudaFreeHost(p), );
}

// gdl__cu_NAME_create / gdl__cu_NAME_destroy: a handle of TYPE made by CREATE(&h, FLAGS) and released by
// DESTROY (a NULL handle: nothing to release)
#define GDL__CU_HANDLE(NAME, TYPE, CREATE, FLAGS, DESTROY) \
    static void *gdl__cu_##NAME##_create(void) {          \
        TYPE h;                                           \
        GDL_CU_TRY(CREATE(&h, FLAGS), NULL);              \
        return (void *)h;                                 \
    }                                                     \
    static void gdl__cu_##NAME##_destroy(void *h) {       \
        if (h) GDL_CU_TRY(DESTROY((TYPE)h), );            \
    }
// streams non-blocking: copies on one overlap the kernels on the compute stream; events without timing
GDL__CU_HANDLE(stream, cudaStream_t, cudaStreamCreateWithFlags, cudaStreamNonBlocking, cudaStreamDestroy)
GDL__CU_HANDLE(event, cudaEvent_t, cudaEventCreateWithFlags, cudaEventDisableTiming, cudaEventDestroy)
#undef GDL__CU_HANDLE

static int gdl__cu_copy_async(void *dst, const void *src, size_t bytes, int kind, void *stream) {
    static const cudaMemcpyKind kinds[3] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice};
    if (!bytes) return 0;
    GDL_CU_TRY(cudaMemcpyAsync(dst, src, bytes, kinds[kind], gdl__cu_resolve(stream)), -1);
    return 0;
}

static int gdl__cu_event_record(void *event, void *stream) {
    GDL_CU_TRY(cudaEventRecord((cudaEvent_t)event, gdl__cu_resolve(stream)), -1);
    return 0;
}

static int gdl__cu_stream_wait_event(void *stream, void *event) {
    GDL_CU_TRY(cudaStreamWaitEvent(gdl__cu_resolve(stream), (cudaEvent_t)event, 0), -1);
    return 0;
}

// A wait only if the event is not reached yet: in a steady state the copy a
// slot waits for finished long ago, and asking costs no synchronisation.
static int gdl__cu_event_synchronize(void *event) {
    cudaError_t q = cudaEventQuery((cudaEvent_t)event);
    if (q == cudaSuccess) return 0;
    if (q != cudaErrorNotReady) GDL_CU_TRY(q, -1);
    (void)cudaGetLastError(); /* cudaErrorNotReady is not an error */
    gdl__count_sync();
    GDL_CU_TRY(cudaEventSynchronize((cudaEvent_t)event), -1);
    return 0;
}

