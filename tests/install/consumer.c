/* consumer.c — a program outside the repository that uses an installed gpudl
   (`#include <gpudl.h>`), built by tests/test_install.sh through pkg-config and
   through CMake: a few SGD steps of a linear layer on random data, on the
   default device, must lower the loss. */
#define GPUDL_IMPLEMENTATION
#include <gpudl.h>

int main(void) {
    int64_t xs[2] = {64, 8}, ys[2] = {64, 1};
    gdl_device dev = gdl_default_device();
    gdl_tensor *x, *y;
    gdl_module *m;
    gdl_optimizer *opt;
    double first = 0, last = 0;
    int i;
    gdl_manual_seed(7);
    x = gdl_randn(2, xs, gdl_cpu());
    y = gdl_randn(2, ys, gdl_cpu());
    m = gdl_nn_linear(8, 1, 1);
    opt = gdl_sgd_new(0.1, 0, 0, 0, 0);
    if (!x || !y || !m || !opt || gdl_move_(x, dev) < 0 || gdl_move_(y, dev) < 0 || gdl_module_to(m, dev) < 0 ||
        gdl_optim_add_module(opt, m, 0) < 0) {
        fprintf(stderr, "consumer: %s\n", gdl_last_error());
        return 1;
    }
    for (i = 0; i < 20; i++) {
        gdl_tensor *loss;
        gdl_arena_reset();
        gdl_zero_grad(opt);
        loss = gdl_mse_loss(gdl_forward(m, x), y, GDL_REDUCE_MEAN);
        if (!loss || gdl_backward(loss) < 0 || gdl_step(opt) < 0) {
            fprintf(stderr, "consumer: %s\n", gdl_last_error());
            return 1;
        }
        if (i == 0) first = gdl_item(loss);
        last = gdl_item(loss);
    }
    printf("gpudl %s on %s: loss %.4f -> %.4f\n", gdl_version(), gdl_device_str(dev), first, last);
    gdl_optim_free(opt);
    gdl_module_free(m);
    gdl_free(x);
    gdl_free(y);
    gdl_shutdown();
    return last < first ? 0 : 1;
}
