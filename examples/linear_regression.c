/* linear_regression.c — the first gpudl program: fit y = x·w + b with
   nn.Linear(10, 1), the mean squared error and SGD (lr 0.01) on seeded
   random data, printing the loss every few epochs and then the learned
   against the true weights. The PyTorch equivalent is in the comments.

   Build and run (from the repository root):
       cc -O2 examples/linear_regression.c -lm -o linear_regression && ./linear_regression
   Options: [--epochs N] [--device cpu|cuda] [--seed N] (--help lists them)
   Tutorial: docs/tutorial/03-devices.md (chapter 3).
*/
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "example_args.h"

#define N 1000      /* samples */
#define D 10        /* features */
#define BATCH 50

static int fail(const char *what) {
    fprintf(stderr, "linear_regression: %s: %s\n", what, gdl_last_error());
    return 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* status lines and errors in the order they happen, also when piped */
    int64_t xs[2] = {N, D}, ws[2] = {D, 1}, ys[2] = {N, 1};
    ex_args a = ex_defaults(40, BATCH);
    int parsed = ex_parse(&a, argc, argv, EX_EPOCHS | EX_DEVICE | EX_SEED,
                          "Fits y = x.w + b with nn.Linear(10, 1), MSE and SGD on seeded random data.");
    gdl_device dev = a.device;
    gdl_tensor *X, *w_true, *noise, *Y;
    gdl_module *model;
    gdl_optimizer *opt;
    float w[D], w_ref[D], b, b_true = 0.5f;
    int epoch, i;

    if (parsed) return parsed == 1 ? 0 : 2;

    /* data: y = x·w_true + b_true + N(0, 0.01²) noise */
    gdl_manual_seed(a.seed);                             /* torch.manual_seed(0) */
    X = gdl_randn(2, xs, gdl_cpu());                     /* X = torch.randn(N, D) */
    w_true = gdl_randn(2, ws, gdl_cpu());
    noise = gdl_randn(2, ys, gdl_cpu());
    if (!X || !w_true || !noise || gdl_mul_scalar_(noise, 0.01) < 0) return fail("data");
    Y = gdl_clone(gdl_add_scalar(gdl_add(gdl_matmul(X, w_true), noise), b_true)); /* keep across steps */
    if (!Y || gdl_move_(X, dev) < 0 || gdl_move_(Y, dev) < 0) return fail("data");
    gdl_arena_reset();

    /* model = nn.Linear(D, 1).to(device); opt = torch.optim.SGD(model.parameters(), lr=0.01) */
    model = gdl_nn_linear(D, 1, 1);
    opt = gdl_sgd_new(0.01, 0, 0, 0, 0);
    if (!model || !opt || gdl_module_to(model, dev) < 0 || gdl_optim_add_module(opt, model, 0) < 0)
        return fail("model");
    printf("training Linear(%d, 1) on %d samples on %s\n", D, N, gdl_device_str(dev));

    for (epoch = 1; epoch <= a.epochs; epoch++) {
        double total = 0;
        for (i = 0; i < N; i += BATCH) {
            gdl_tensor *out, *loss;
            gdl_arena_reset();                           /* the last step's temporaries go */
            gdl_zero_grad(opt);                          /* optimizer.zero_grad() */
            out = gdl_forward(model, gdl_slice(X, i, i + BATCH));
            loss = gdl_mse_loss(out, gdl_slice(Y, i, i + BATCH), GDL_REDUCE_MEAN);
            if (!loss || gdl_backward(loss) < 0 || gdl_step(opt) < 0) return fail("training step");
            total += gdl_item(loss);
        }
        if (epoch == 1 || epoch % 5 == 0) printf("epoch %3d  loss %.6f\n", epoch, total / (N / BATCH));
    }

    /* learned against true weights */
    if (gdl_copy_to_host(gdl_module_tensor(model, "weight"), w, sizeof w) < 0 ||
        gdl_copy_to_host(gdl_module_tensor(model, "bias"), &b, sizeof b) < 0 ||
        gdl_copy_to_host(w_true, w_ref, sizeof w_ref) < 0)
        return fail("reading the weights");
    printf("\n        learned      true\n");
    for (i = 0; i < D; i++) printf("w[%d]  %9.5f  %9.5f\n", i, w[i], w_ref[i]);
    printf("b     %9.5f  %9.5f\n", b, b_true);

    gdl_optim_free(opt);
    gdl_module_free(model);
    gdl_free(X);
    gdl_free(Y);
    gdl_free(w_true);
    gdl_free(noise);
    gdl_shutdown();
    return 0;
}
