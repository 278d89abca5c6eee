// ----------------------------------------------------------------------------
// CUDA graphs (gdl_graph_*): the compute stream recorded in global mode, so a
// synchronisation, cudaMalloc or legacy-stream work anywhere meanwhile fails
// the capture, as PyTorch's default; our allocator refuses even cache hits.

// cuBLAS's handle with its own workspace (cublasSetWorkspace after
// cublasSetStream, gdl__cu_blas) and cuBLASLt's handle, made before the
// capture: cublasCreate and the workspace's cudaMalloc inside it would fail
// the capture, and a handle without its own workspace would allocate from
// cuBLAS's pool there (cuBLASLt takes ours, gdl__cu_lt_matmul). The
// warm-up step usually made them; a step whose first GEMM is in the
// capture would not have.
static int gdl__cu_graph_handles(int dev) {
    gdl__cu_state &S = gdl__cu();
    if (!gdl__cu_blas()) return -1;
    std::lock_guard<std::mutex> lock(S.mu);
    if (!S.lt[dev]) GDL_CUBLAS_TRY(cublasLtCreate(&S.lt[dev]), -1);
    return 0;
}

static int gdl__cu_graph_begin(void) {
    int dev;
    if (gdl__cu_current(&dev) < 0) return -1;
    cudaStream_t st = gdl__cu_stream();
    if (!st) {
        gdl__set_error("gdl_cuda: cuda:%d has no compute stream to capture (the legacy stream cannot be)", dev);
        return -1;
    }
    if (gdl__cu_graph_handles(dev) < 0) return -1;
    GDL_CU_TRY(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal), -1);
    gdl__cu_capturing = dev;
    return 0;
}

static int gdl__cu_graph_end(void **graph) {
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    *graph = NULL;
    gdl__cu_capturing = -1;
    GDL_CU_TRY(cudaStreamEndCapture(gdl__cu_stream(), &g), -1);
    cudaError_t e = cudaGraphInstantiate(&x, g, 0);
    (void)cudaGraphDestroy(g); /* the instance keeps what it needs */
    GDL_CU_TRY(e, -1);
    *graph = (void *)x;
    return 0;
}

// counted as one launch (the profiler's "Launches"): the host's one call for all the graph's kernels
static int gdl__cu_graph_launch(void *graph) {
    gdl__cu_launches.fetch_add(1, std::memory_order_relaxed);
    GDL_CU_TRY(cudaGraphLaunch((cudaGraphExec_t)graph, gdl__cu_stream()), -1);
    return 0;
}

static void gdl__cu_graph_destroy(void *graph) {
    cudaError_t e = cudaGraphExecDestroy((cudaGraphExec_t)graph);
    if (e != cudaSuccess) {
        gdl__cu_report(cudaGetErrorString(e), __FILE__, __LINE__, "cudaGraphExecDestroy");
        (void)cudaGetLastError();
    }
}

