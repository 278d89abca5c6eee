/* 03_devices.c — where tensors live, and how to put a model, its data and
   its loss on one device. Fits y = 3x + 2 with nn.Linear(1, 1) the way
   PyTorch code does it on a GPU: one device variable, and every object
   moved to it once.

   Build and run from gpudl's repository root:
       cc -O2 docs/tutorial/programs/03_devices.c -lm -pthread -o devices && ./devices
   With a GPU build (-DGPUDL_CUDA, see chapter 2) `dev` is cuda:0 and the same
   code trains on the GPU; nothing else changes. */
#define GPUDL_IMPLEMENTATION
#include "../../../gpudl.h"

#define N 64

int main(void) {
    float xs[N], ys[N];
    gdl_device dev = gdl_default_device(); /* device = "cuda" if available else "cpu" */
    gdl_tensor *x_host, *y_host, *x = NULL, *y = NULL, *probe = NULL, *w_host = NULL;
    gdl_module *model = NULL;
    gdl_optimizer *opt = NULL;
    const gdl_tensor *seen_before;
    int i, step, rc = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    gdl_manual_seed(0);

    /* the data, made on the host: y = 3x + 2 plus a little noise */
    for (i = 0; i < N; i++) {
        xs[i] = (float)(i - N / 2) / (N / 2);
        ys[i] = 3.0f * xs[i] + 2.0f + 0.1f * (float)(gdl_rng_uniform() - 0.5);
    }
    x_host = gdl_from_array(xs, GDL_DIMS(N, 1), GDL_F32, gdl_cpu());
    y_host = gdl_from_array(ys, GDL_DIMS(N, 1), GDL_F32, gdl_cpu());
    printf("device: %s (%s)\n", gdl_device_str(dev), gdl_device_name(dev));
    printf("x_host lives on %s, shape %s\n", gdl_device_str(x_host->device), gdl_shape_str(x_host));

    /* 1. data: gdl_to makes a copy on dev (x.to(device)); the host copy stays */
    if (!(x = gdl_to(x_host, dev)) || !(y = gdl_to(y_host, dev))) goto fail;
    printf("x lives on %s\n", gdl_device_str(x->device));

    /* 2. the model: gdl_module_to moves every parameter in place (model.to(device)) */
    model = gdl_nn_linear(1, 1, 1);
    if (!model || gdl_module_to(model, dev) < 0) goto fail;
    printf("model lives on %s, %ld parameters\n", gdl_device_str(gdl_module_device(model)),
           (long)gdl_module_num_params(model));

    /* gdl_move_ moves one tensor in place: the same pointer, now on dev */
    if (!(probe = gdl_zeros(GDL_DIMS(3), GDL_F32, gdl_cpu()))) goto fail;
    seen_before = probe;
    if (gdl_move_(probe, dev) < 0) goto fail;
    printf("gdl_move_ kept the pointer: %s, now on %s\n", seen_before == probe ? "yes" : "no",
           gdl_device_str(probe->device));

    /* 3. the optimizer after the move (it holds the parameters where they are) */
    if (!(opt = gdl_sgd_new(0.1, 0.9, 0, 0, 0)) || gdl_optim_add_module(opt, model, 0) < 0) goto fail;
    for (step = 1; step <= 100; step++) {
        gdl_tensor *loss;
        gdl_arena_reset();
        gdl_zero_grad(opt);
        loss = gdl_mse_loss(gdl_forward(model, x), y, GDL_REDUCE_MEAN); /* the loss is on dev too */
        if (!loss || gdl_backward(loss) < 0 || gdl_step(opt) < 0) goto fail;
        /* gdl_item copies one number to the host (loss.item()): a wait on a GPU, so not every step */
        if (step % 25 == 0) printf("step %3d: loss %.5f (computed on %s)\n", step, gdl_item(loss), gdl_device_str(loss->device));
    }
    /* 4. results back to the host to read them (weight.cpu()) */
    if (!(w_host = gdl_to(gdl_module_tensor(model, "weight"), gdl_cpu()))) goto fail;
    printf("learned weight %.3f, bias %.3f (the data used 3 and 2)\n", ((float *)w_host->data)[0],
           gdl_item(gdl_module_tensor(model, "bias")));
    rc = 0;
fail:
    if (rc) fprintf(stderr, "devices: %s\n", gdl_last_error());
    gdl_free(w_host);
    gdl_free(probe);
    gdl_optim_free(opt);
    gdl_module_free(model);
    gdl_free(x), gdl_free(y), gdl_free(x_host), gdl_free(y_host);
    gdl_shutdown();
    return rc;
}
