/* amp.c — mixed precision (autocast) against f32, for bench/RESULTS.md:
   1. memory: after one forward + loss of the MLP (784-128-10, batch 64),
      of examples/cnn.c's CNN (1x28x28, batch 64) and of a CNN with batch
      norm and global average pooling (cnnb), the bytes of temporaries in
      the arena (gdl_arena_used: everything the step has made so far) and the
      bytes of the activations the tape holds for backward (every
      temporary a recorded op reads or makes, counted once), with the share
      of them in the low dtype; the step's peak: the arena after the whole
      step (forward, backward, Adam: the arena only grows until the reset)
      and the device allocator's peak_allocated during a step
      (gdl_memory_reset_peak before it; on the CPU gdl's persistent
      allocations, which the arena's blocks are among);
   2. time: a whole training step (forward, loss, backward, Adam), median of
      repeats;
   3. Fashion-MNIST: the MLP trained with gdl_fit (Adam 1e-3, batch 64, the
      given epochs) in f32, with bf16 and with f16 autocast; test accuracy.
   4. with a third argument `mw`, instead: master weights (gdl_optim_set_master_weights): the bytes of the
      parameters, their gradients and the optimizer's state (f32 masters included) after a step, the
      autocast casts of parameters, and the step time, for f32 parameters (plain, and under bf16 autocast)
      against bf16 parameters with f32 masters under bf16 autocast.
   Usage: build/bench_amp [EPOCHS (default 5; 0 skips 3)] [DEVICE cpu|cuda] [mw] */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "bench_cpu.h"
#include "../examples/nets.h"

#include <stdlib.h>
#include <string.h>


/* examples/cnn.c's net on 1x28x28 */
static gdl_module *cnn(void) { return ex_cnn_net(1, 28, 0); }

/* conv-bn-relu-pool, conv-bn-relu, global average pool, fc: the native
   low-precision batch norm and pooling */
static gdl_module *cnnb(void) {
    gdl_module *l[10];
    l[0] = gdl_nn_conv2d(1, 32, 3, 1, 1, 1, 1, 0);
    l[1] = gdl_nn_batchnorm2d(32);
    l[2] = gdl_nn_relu();
    l[3] = gdl_nn_maxpool2d(2, 2, 0);
    l[4] = gdl_nn_conv2d(32, 64, 3, 1, 1, 1, 1, 0);
    l[5] = gdl_nn_batchnorm2d(64);
    l[6] = gdl_nn_relu();
    l[7] = gdl_nn_global_avgpool2d();
    l[8] = gdl_nn_flatten(1);
    l[9] = gdl_nn_linear(64, 10, 1);
    return gdl_nn_sequential(10, l);
}

static const void *bench_input; /* the batch's memory: a view of it (flatten) is not an activation */

/* bytes of the temporaries the tape reads or makes, each once; *low: those in bf16/f16; *casts: autocast's
   casts of persistent tensors (parameters; the batch's cast has no node: it needs no gradient) */
static size_t tape_bytes(size_t *low, size_t *casts) {
    size_t total = 0, cap = 4096, n = 0, i;
    const void **seen = (const void **)malloc(sizeof(void *) * cap);
    gdl_node *nd;
    *low = *casts = 0;
    for (nd = gdl__tape; nd && seen; nd = nd->prev) {
        int k;
        for (k = -1; k < nd->nin + 2; k++) {
            const gdl_tensor *t = k < 0 ? nd->out : k < nd->nin ? nd->in[k] : nd->saved[k - nd->nin];
            size_t b;
            if (!t || gdl__is_persistent(t) || t->data == bench_input ||
                (t->node && (t->node->op == GDL_OP_RESHAPE || t->node->op == GDL_OP_SLICE)))
                continue; /* views: their memory is their base's */
            for (i = 0; i < n; i++)
                if (seen[i] == t->data) break;
            if (i < n || n == cap) continue;
            seen[n++] = t->data;
            b = (size_t)t->numel * gdl_dtype_size(t->dtype);
            total += b;
            if (t->dtype == GDL_BF16 || t->dtype == GDL_F16) *low += b;
            if (t->node && t->node->op == GDL_OP_CAST && t->node->in[0] && gdl__is_persistent(t->node->in[0])) *casts += b;
        }
    }
    free(seen);
    return total;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* what both figures' runs train: make()'s net on dev under Adam lr 1e-3 (bf16 parameters with f32 master
   weights when masters), on a batch of 64 N(0,1) 1x28x28 inputs x with labels i % 10, after seed 1 */
static int setup(gdl_module *(*make)(void), gdl_device dev, int masters, gdl_module **m, gdl_optimizer **opt,
                 gdl_tensor **x, gdl_tensor **y) {
    int64_t sx[4] = {64, 1, 28, 28}, sy = 64;
    int32_t lab[64];
    int i;
    gdl_manual_seed(1);
    for (i = 0; i < 64; i++) lab[i] = i % 10;
    if (!(*m = make()) || gdl_module_to(*m, dev) < 0) return -1;
    if (!(*opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) || gdl_optim_add_module(*opt, *m, 0) < 0) return -1;
    if (masters && gdl_optim_set_master_weights(*opt, GDL_BF16) < 0) return -1;
    *x = gdl_to(gdl_randn(4, sx, gdl_cpu()), dev);
    *x = *x ? gdl_clone(*x) : NULL;
    *y = gdl_clone(gdl_to(gdl_from_array(lab, 1, &sy, GDL_I32, gdl_cpu()), dev));
    if (!*x || !*y) return -1;
    bench_input = (*x)->data;
    return 0;
}

/* frees what setup made and resets the arena; 0 */
static int teardown(gdl_module *m, gdl_optimizer *opt, gdl_tensor *x, gdl_tensor *y) {
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_free(x);
    gdl_free(y);
    gdl_arena_reset();
    return 0;
}

static int step_figures(const char *name, gdl_module *(*make)(void), gdl_device dev, gdl_dtype dt) {
    gdl_tensor *x, *y, *loss;
    gdl_module *m;
    gdl_optimizer *opt;
    size_t arena = 0, act = 0, low = 0, pc = 0, step_arena = 0, dev_peak = 0;
    double t[21], flops = 0; /* the first step's FLOPs (gdl_flops_count) */
    int r;
    if (setup(make, dev, 0, &m, &opt, &x, &y) < 0) return -1;
    for (r = 0; r < 24; r++) {
        double t0;
        gdl_arena_reset();
        if (r == 1 && gdl_memory_reset_peak(dev) < 0) return -1;
        t0 = gdl_now();
        gdl_flops_reset();
        gdl_zero_grad(opt);
        if (dt != GDL_F32 && gdl_autocast_begin(dt) < 0) return -1;
        loss = gdl_cross_entropy(gdl_forward(m, x), y);
        if (dt != GDL_F32) gdl_autocast_end();
        if (!loss) return -1;
        if (r == 0) {
            arena = gdl_arena_used();
            act = tape_bytes(&low, &pc);
        }
        if (gdl_backward(loss) < 0 || gdl_step(opt) < 0 || gdl_item(loss) != gdl_item(loss)) return -1; /* read: waits */
        if (r == 0) flops = (double)gdl_flops_count(NULL, NULL);
        if (r == 1) {
            gdl_memory_status st;
            if (gdl_memory_stats(dev, &st) < 0) return -1;
            step_arena = gdl_arena_used();
            dev_peak = st.peak_allocated;
        }
        if (r >= 3) t[r - 3] = gdl_now() - t0;
    }
    qsort(t, 21, sizeof t[0], cmp_d);
    printf("%-4s %-5s | %10.1f | %10.1f | %10.1f | %5.1f%% | %10.1f | %10.1f | %8.3f\n", name,
           dt == GDL_F32 ? "f32" : gdl_dtype_name(dt), (double)arena / 1024, (double)act / 1024, (double)pc / 1024,
           act ? 100.0 * (double)low / (double)act : 0, (double)step_arena / 1024, (double)dev_peak / 1024, 1e3 * t[10]);
    printf("%-10s | %s\n", "", gdl_flops_line(flops, t[10], dev, dt));
    return teardown(m, opt, x, y);
}

/* mode 0: f32, 1: f32 under bf16 autocast, 2: bf16 parameters + f32 masters under bf16 autocast */
static int mw_figures(const char *name, gdl_module *(*make)(void), gdl_device dev, int mode) {
    static const char *const runs[3] = {"f32", "f32+ac", "bf16+mw"};
    gdl_tensor *x, *y, *loss, *ps[64], *st[256];
    gdl_module *m;
    gdl_optimizer *opt;
    size_t pb = 0, gb = 0, sb = 0, mb = 0, low = 0, pc = 0;
    double t[21];
    int r, i, np, ns;
    if (setup(make, dev, mode == 2, &m, &opt, &x, &y) < 0) return -1;
    for (r = 0; r < 24; r++) {
        double t0;
        gdl_arena_reset();
        t0 = gdl_now();
        gdl_zero_grad(opt);
        if (mode && gdl_autocast_begin(GDL_BF16) < 0) return -1;
        loss = gdl_cross_entropy(gdl_forward(m, x), y);
        if (mode) gdl_autocast_end();
        if (!loss) return -1;
        if (r == 0) {
            size_t act = tape_bytes(&low, &pc);
            (void)act;
        }
        if (gdl_backward(loss) < 0 || gdl_step(opt) < 0 || gdl_item(loss) != gdl_item(loss)) return -1; /* read: waits */
        if (r >= 3) t[r - 3] = gdl_now() - t0;
    }
    qsort(t, 21, sizeof t[0], cmp_d);
    np = gdl_module_named_tensors(m, GDL_PARAMS, NULL, ps, 64);
    ns = gdl_optim_state(opt, NULL, st, 256);
    if (np < 0 || np > 64 || ns < 0 || ns > 256) return -1;
    for (i = 0; i < np; i++) {
        pb += (size_t)ps[i]->numel * gdl_dtype_size(ps[i]->dtype);
        if (ps[i]->grad) gb += (size_t)ps[i]->grad->numel * gdl_dtype_size(ps[i]->grad->dtype);
        if (mode == 2) {
            gdl_tensor *mt = gdl_optim_master_weight(opt, i);
            if (!mt) return -1;
            mb += (size_t)mt->numel * gdl_dtype_size(mt->dtype);
        }
    }
    for (i = 0; i < ns; i++) sb += (size_t)st[i]->numel * gdl_dtype_size(st[i]->dtype);
    printf("%-4s %-7s | %9.1f | %9.1f | %9.1f | %9.1f | %9.1f | %10.1f | %8.3f\n", name, runs[mode],
           (double)pb / 1024, (double)gb / 1024, (double)mb / 1024, (double)sb / 1024,
           (double)(pb + gb + mb + sb) / 1024, (double)pc / 1024, 1e3 * t[10]);
    return teardown(m, opt, x, y);
}

/* gdl_step alone on one parameter of 2^20 elements (its gradient made once): median of 21 */
static int mw_step_alone(gdl_device dev) {
    int64_t n = 1 << 20;
    int kind, mode, s;
    printf("\ngdl_step alone, one parameter of 2^20 elements | f32 ms | bf16+mw ms\n");
    for (kind = 0; kind < 2; kind++) {
        double med[2];
        for (mode = 0; mode < 2; mode++) {
            gdl_tensor *p = gdl_ones(1, &n, GDL_F32, dev);
            gdl_optimizer *o = kind ? gdl_adamw_new(1e-3, 0.9, 0.999, 1e-8, 0.01) : gdl_sgd_new(0.01, 0.9, 0, 0, 0);
            double t[21];
            if (!p || !o || gdl_set_requires_grad(p, 1) < 0 || gdl_optim_add_params(o, &p, 1, -1, -1) < 0 ||
                (mode && gdl_optim_set_master_weights(o, GDL_BF16) < 0) || gdl_zero_grad(o) < 0)
                return -1;
            gdl_arena_reset();
            if (gdl_backward(gdl_sum(p)) < 0) return -1;
            for (s = 0; s < 24; s++) {
                double t0 = gdl_now();
                if (gdl_step(o) < 0 || gdl_optim_state(o, NULL, NULL, 0) < 0) return -1; /* reads the counts back: waits */
                if (s >= 3) t[s - 3] = gdl_now() - t0;
            }
            qsort(t, 21, sizeof t[0], cmp_d);
            med[mode] = t[10];
            gdl_optim_free(o);
            gdl_free(p);
            gdl_arena_reset();
        }
        printf("%-46s | %6.3f | %6.3f\n", kind ? "AdamW" : "SGD momentum 0.9", 1e3 * med[0], 1e3 * med[1]);
    }
    return 0;
}

int main(int argc, char **argv) {
    int epochs = argc > 1 ? atoi(argv[1]) : 5, k;
    gdl_device dev = argc > 2 && !strcmp(argv[2], "cuda") ? gdl_cuda(0) : gdl_cpu();
    static const gdl_dtype dts[3] = {GDL_F32, GDL_BF16, GDL_F16};
    printf("cpu: %s; device %s\n\n", bench_cpu_model(), gdl_device_str(dev));
    if (argc > 3 && !strcmp(argv[3], "mw")) {
        printf("net  run     | param KiB | grad KiB  | master KiB| state KiB | total KiB | param cast | step ms (median of 21)\n");
        for (k = 0; k < 6; k++)
            if (mw_figures(k < 3 ? "mlp" : "cnn", k < 3 ? ex_mlp_net : cnn, dev, k % 3) < 0) {
                fprintf(stderr, "bench_amp: %s\n", gdl_last_error());
                return 1;
            }
        if (mw_step_alone(dev) < 0) {
            fprintf(stderr, "bench_amp: %s\n", gdl_last_error());
            return 1;
        }
        gdl_shutdown();
        return 0;
    }
    printf("net  dtype | arena KiB  | tape KiB   | param cast | low    | step arena | dev peak   | step ms (median of 21)\n");
    for (k = 0; k < 9; k++)
        if (step_figures(k < 3 ? "mlp" : k < 6 ? "cnn" : "cnnb", k < 3 ? ex_mlp_net : k < 6 ? cnn : cnnb, dev, dts[k % 3]) < 0) {
            fprintf(stderr, "bench_amp: %s\n", gdl_last_error());
            return 1;
        }
    if (epochs > 0) {
        gdl_dataset *tr = gdl_dataset_fashion_mnist(NULL, 1), *te = gdl_dataset_fashion_mnist(NULL, 0);
        if (!tr || !te) {
            fprintf(stderr, "bench_amp: %s\n", gdl_last_error());
            return 1;
        }
        printf("\nFashion-MNIST MLP 784-128-10, Adam 1e-3, batch 64, %d epochs (gdl_fit, seed 0)\n", epochs);
        for (k = 0; k < 3; k++) {
            gdl_loader_opts lo = gdl_loader_defaults();
            gdl_loader *tl, *vl;
            gdl_module *m;
            gdl_optimizer *opt;
            gdl_fit_opts o = gdl_fit_defaults();
            gdl_epoch_stats *h = (gdl_epoch_stats *)calloc((size_t)epochs, sizeof *h);
            double t0;
            gdl_manual_seed(0);
            lo.batch_size = 64;
            lo.shuffle = 1;
            lo.device = dev;
            tl = gdl_loader_new(tr, &lo);
            lo.shuffle = 0;
            lo.batch_size = 1000;
            vl = gdl_loader_new(te, &lo);
            m = ex_mlp_net();
            if (!h || !tl || !vl || !m || gdl_module_to(m, dev) < 0 || !(opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) ||
                gdl_optim_add_module(opt, m, 0) < 0) {
                fprintf(stderr, "bench_amp: %s\n", gdl_last_error());
                return 1;
            }
            o.epochs = epochs;
            o.val = vl;
            o.verbose = 0;
            o.autocast = dts[k];
            t0 = gdl_now();
            if (gdl_fit(m, tl, opt, &o, h) < 0) {
                fprintf(stderr, "bench_amp: %s\n", gdl_last_error());
                return 1;
            }
            printf("%-5s test accuracy %.2f%% (test loss %.4f), train loss %.4f, %.1f s\n",
                   dts[k] == GDL_F32 ? "f32" : gdl_dtype_name(dts[k]), 100 * h[epochs - 1].val_accuracy,
                   h[epochs - 1].val_loss, h[epochs - 1].loss, gdl_now() - t0);
            free(h);
            gdl_optim_free(opt);
            gdl_module_free(m);
            gdl_loader_free(tl);
            gdl_loader_free(vl);
        }
        gdl_dataset_free(tr);
        gdl_dataset_free(te);
    }
    gdl_shutdown();
    return 0;
}
