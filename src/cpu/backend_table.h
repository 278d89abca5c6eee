/* src/cpu/backend_table.h — the CPU backend's table (gdl__cpu_table), the
   entries a CPU has nothing for (timing events, graphs, collectives), and
   gdl_shutdown: here because it frees the kernels' caches (the GEMM's packing
   buffers) with the arenas, and the layers below the kernels cannot see them. */

/* The profiler's and the monitor's entries that a CPU has nothing for: its
   ops are timed with the host clock, it launches no kernels, it has no PCI
   bus id. */
static void *gdl__cpu_timing_event(void) { return NULL; }
static int gdl__cpu_event_elapsed(void *start, void *end, double *ms) {
    (void)start;
    (void)end;
    (void)ms;
    gdl__set_error("gdl: the CPU has no timing events (its ops are timed with the host clock)");
    return -1;
}
static int64_t gdl__cpu_launch_count(void) { return -1; }
static int gdl__cpu_pci_bus_id(int device, char *buf, int len) {
    (void)device;
    if (buf && len > 0) buf[0] = 0;
    gdl__set_error("gdl: the CPU has no PCI bus id");
    return -1;
}

/* No graphs on the CPU: gdl_graph_* call the step itself there. */
static int gdl__cpu_graph_begin(void) {
    gdl__set_error("gdl: the CPU has no CUDA graphs");
    return -1;
}
static int gdl__cpu_graph_end(void **graph) {
    *graph = NULL;
    return gdl__cpu_graph_begin();
}
static int gdl__cpu_graph_launch(void *graph) {
    (void)graph;
    return gdl__cpu_graph_begin();
}
static void gdl__cpu_graph_destroy(void *graph) { (void)graph; }

/* Collectives of CPU tensors are MPI's (src/dist/), not the backend's. */
static int gdl__cpu_no_comm(void) {
    gdl__set_error("gdl: the CPU backend has no communicator: collectives of CPU tensors go through MPI");
    return -1;
}
static int gdl__cpu_comm_id(void *id, int bytes) {
    (void)id;
    (void)bytes;
    return gdl__cpu_no_comm();
}
static int gdl__cpu_comm_init(int device, const void *id, int world, int rank) {
    (void)device, (void)id, (void)world, (void)rank;
    return gdl__cpu_no_comm();
}
static int gdl__cpu_collective(int kind, const void *send, void *recv, int64_t count, gdl_dtype dt, int avg,
                               int root, int join) {
    (void)kind, (void)send, (void)recv, (void)count, (void)dt, (void)avg, (void)root, (void)join;
    return gdl__cpu_no_comm();
}
static int gdl__cpu_comm_join(void) { return gdl__cpu_no_comm(); }
static int gdl__cpu_comm_sync(int barrier, double timeout_s) {
    (void)barrier, (void)timeout_s;
    return gdl__cpu_no_comm();
}
static void gdl__cpu_comm_destroy(void) {}

/* The table is the lists' entries in the lists' order (the structs are made
   from the same lists): a constant, ready before any thread asks for it. */
#define GDL__BACKEND_INIT_CPU(ret, entry, params) gdl__cpu_##entry,
static const gdl_backend gdl__cpu_table = {"cpu", {GDL_RUNTIME_ENTRIES(GDL__BACKEND_INIT_CPU)},
                                           {GDL_KERNEL_ENTRIES(GDL__BACKEND_INIT_CPU)}};
#undef GDL__BACKEND_INIT_CPU
static const gdl_backend *gdl__cpu_backend(void) { return &gdl__cpu_table; }

/* Gives back what the library keeps between steps: the calling thread's
   arenas' chunks, the GEMM packing buffers (unless another thread's GEMM
   holds them) and the CUDA allocator's cached blocks (gdl_fit's
   out-of-memory retry; gdl_shutdown). Between steps only: temporaries die. */
static void gdl__release_thread_arenas(void) {
    int i;
    gdl__arena_release(&gdl__host_arena);
    gdl__arena_release(&gdl__hdr_arena[0]);
    gdl__arena_release(&gdl__hdr_arena[1]);
    for (i = 0; i < GDL__MAX_GPUS; i++) gdl__arena_release(&gdl__gpu_arena[i]);
    gdl__tape = NULL;
    gdl__gemm_release_own();
}
static void gdl__release_cached_memory(void) {
    if (!gdl__prof_on) gdl__prof_free(); /* its GPU events go before the devices' memory */
    gdl__release_thread_arenas();
    if (gdl__pool_acquire()) { /* the packing buffers: not while another thread's GEMM uses them */
        gdl__gemm_release();
        gdl__pool_release();
    }
    if (gdl_cuda_device_count() > 0) gdl__cuda_registry->release_cache();
}
GPUDL_API void gdl_shutdown(void) { gdl__release_cached_memory(); }
GPUDL_API void gdl_thread_cleanup(void) { gdl__release_thread_arenas(); }
