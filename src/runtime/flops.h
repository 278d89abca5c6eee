/* ---------------------------------------------------------------------------
   src/runtime/flops.h   The model FLOPs this thread's GEMM-like ops ran
   (gdl_flops_count), and a GPU's datasheet peak (gdl_gpu_peak_gflops). The
   CPU's measured peak and the utilisation line are in src/cpu/peak.h.

   Counted at the op layer from shapes, one hook per op (its forward, and its
   backward function): linear, linear_act, matmul / bmm, conv2d (groups,
   dilation: the multiply-adds of the output's taps), the fused attention's
   two products; the LSTM / GRU gate GEMMs and the unfused attention are
   gdl_linear and gdl_matmul calls, counted there. 2 FLOPs per multiply-add.
   A backward counts each gradient GEMM it runs at the forward's cost: 2x the
   forward when both operands want gradients (llm.c's rule), 1x for the first
   layer, whose input (the data) wants none: the GEMMs that run, as PyTorch's
   FlopCounterMode counts them. Attention's backward counts its four products
   (2x the forward) and both count every query-key pair, causal or not, as
   PyTorch's FlopCounterMode does. Per thread (GDL__TLS), like the tape: a
   thread that trains its own model counts its own work. A CUDA graph's
   replay runs no op on the host and counts nothing; count an eager step.
   ------------------------------------------------------------------------- */
static GDL__TLS int64_t gdl__flops_n[2]; /* this thread's FLOPs: [0] forward, [1] backward */

/* an op's GEMM work: `macs` multiply-adds, run `times` times (a backward: once per gradient it computes) */
static void gdl__flops_add(int backward, int64_t macs, int times) { gdl__flops_n[backward != 0] += 2 * macs * times; }

GPUDL_API void gdl_flops_reset(void) { gdl__flops_n[0] = gdl__flops_n[1] = 0; }

GPUDL_API int64_t gdl_flops_count(int64_t *forward, int64_t *backward) {
    if (forward) *forward = gdl__flops_n[0];
    if (backward) *backward = gdl__flops_n[1];
    return gdl__flops_n[0] + gdl__flops_n[1];
}

/* ---- a GPU's peak: NVIDIA's datasheet figures, dense (no sparsity), TFLOP/s ----
   Matched by name (the first row whose words are all in it, so the longer names come first), the
   H100's SXM and PCIe boards also by their SM counts (132, 114). f32: the CUDA cores (gpudl's f32
   matmuls are full f32 unless gdl_cuda_set_tf32); bf16 / f16: the tensor cores with f32 sums; 0: none. */
typedef struct gdl__gpu_peak_row {
    const char *words[2]; /* both in the device's name (NULL: none) */
    int sms;              /* 0: any SM count */
    double f32, bf16, f16;
} gdl__gpu_peak_row;
static const gdl__gpu_peak_row gdl__gpu_peaks[] = {
    {{"H200", "NVL"}, 0, 60, 835.5, 835.5},
    {{"H200", NULL}, 0, 67, 989.4, 989.4},     /* H200 SXM */
    {{"GH200", NULL}, 0, 67, 989.4, 989.4},
    {{"H100", "NVL"}, 0, 60, 835.5, 835.5},
    {{"H100", "PCIe"}, 0, 51.2, 756.5, 756.5},
    {{"H100", NULL}, 114, 51.2, 756.5, 756.5}, /* a PCIe board by its SMs */
    {{"H100", NULL}, 0, 67, 989.4, 989.4},     /* H100 SXM5 ("H100 80GB HBM3") */
    {{"A100", NULL}, 0, 19.5, 312, 312},       /* SXM4 and PCIe */
    {{"A10", NULL}, 0, 31.2, 125, 125},
    {{"A30", NULL}, 0, 10.3, 165, 165},
    {{"L40S", NULL}, 0, 91.6, 362.05, 362.05},
    {{"L40", NULL}, 0, 90.5, 181, 181},
    {{"L4", NULL}, 0, 30.3, 121, 121},
    {{"V100", "PCIE"}, 0, 14, 0, 112},
    {{"V100", NULL}, 0, 15.7, 0, 125},         /* SXM2 */
    {{"T4", NULL}, 0, 8.1, 0, 65},
};

/* the table's figure for name and SM count, TFLOP/s; 0: no row (or the row has no such dtype) */
static double gdl__gpu_peak_lookup(const char *name, int sms, gdl_dtype dt) {
    size_t r;
    for (r = 0; r < sizeof gdl__gpu_peaks / sizeof gdl__gpu_peaks[0]; r++) {
        const gdl__gpu_peak_row *p = &gdl__gpu_peaks[r];
        if (!strstr(name, p->words[0]) || (p->words[1] && !strstr(name, p->words[1])) || (p->sms && p->sms != sms))
            continue;
        return dt == GDL_F32 ? p->f32 : dt == GDL_BF16 ? p->bf16 : dt == GDL_F16 ? p->f16 : 0;
    }
    return 0;
}

GPUDL_API double gdl_gpu_peak_gflops(int index, gdl_dtype dt) {
    const char *op = "gdl_gpu_peak_gflops";
    if (dt != GDL_F32 && dt != GDL_BF16 && dt != GDL_F16) {
        gdl__set_error("%s: dtype %s has no peak here (f32, bf16 or f16)", op, gdl_dtype_name(dt));
        return -1;
    }
#ifdef GPUDL_CUDA
    {
        char name[256];
        int sms = 0;
        double tf;
        if (index < 0 || index >= gdl_cuda_device_count()) {
            gdl__set_error("%s: no GPU %d (%d CUDA devices)", op, index, gdl_cuda_device_count());
            return -1;
        }
        if (gdl_cuda_device_info(index, name, sizeof name, NULL, NULL, NULL, NULL, &sms, NULL) < 0) return -1;
        if (!(tf = gdl__gpu_peak_lookup(name, sms, dt))) {
            gdl__set_error("%s: no datasheet peak for %s (%d SMs) in %s here (src/runtime/flops.h's table)", op, name,
                           sms, gdl_dtype_name(dt));
            return -1;
        }
        return 1e3 * tf;
    }
#else
    (void)gdl__gpu_peak_lookup; /* used by a CUDA build (and tests/test_flops.c) */
    gdl__set_error("%s: GPU %d: built without CUDA (GPUDL_CUDA)", op, index);
    return -1;
#endif
}
