// ----------------------------------------------------------------------------
// the backend table

// The entries in the order of the lists in gpudl.h, which also make the
// structs: an entry without a gdl__cu_ function does not compile.
#define GDL__BACKEND_INIT_CUDA(ret, entry, params) gdl__cu_##entry,
static const gdl_backend gdl__cu_table = {"cuda", {GDL_RUNTIME_ENTRIES(GDL__BACKEND_INIT_CUDA)},
                                         {GDL_KERNEL_ENTRIES(GDL__BACKEND_INIT_CUDA)}};
#undef GDL__BACKEND_INIT_CUDA

const gdl_backend *gdl_cuda_backend(void) { return &gdl__cu_table; }
