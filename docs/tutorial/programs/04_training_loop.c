/* 04_training_loop.c — the training loop written out, step by step, as in
   PyTorch: zero_grad, forward, loss, backward, step. A 784-128-10 MLP on
   the first 6,000 Fashion-MNIST training images, tested on 2,000 test
   images; batches come from gdl_loader (chapter 6 looks at it closely).

   Build and run from gpudl's repository root (Fashion-MNIST: `sh tools/fetch_data.sh`):
       cc -O2 -DGPUDL_ZLIB docs/tutorial/programs/04_training_loop.c -lz -lm -pthread -o training_loop && ./training_loop
   On a GPU build `dev` is cuda:0: the loader delivers batches there and the
   loop is the same. */
#define GPUDL_IMPLEMENTATION
#include "../../../gpudl.h"
#include "fashion_data.h"

#define EPOCHS 3
#define TRAIN_IMAGES 6000
#define TEST_IMAGES 2000

int main(void) {
    gdl_device dev = gdl_default_device();
    gdl_dataset *train = NULL, *test = NULL;
    gdl_loader *train_loader = NULL, *test_loader = NULL;
    gdl_module *model = NULL, *layers[4];
    gdl_optimizer *opt = NULL;
    int epoch, rc = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    gdl_manual_seed(0);
    printf("device: %s\n", gdl_device_str(dev));

    /* data (fashion_data.h): the first images of the training and test sets, a loader over each */
    if (!(train = fashion_slice(1, 0, TRAIN_IMAGES)) || !(test = fashion_slice(0, 0, TEST_IMAGES)) ||
        !(train_loader = fashion_loader(train, 64, 1, dev)) || !(test_loader = fashion_loader(test, 500, 0, dev)))
        goto fail;

    /* the model: nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)) */
    layers[0] = gdl_nn_flatten(1);
    layers[1] = gdl_nn_linear(784, 128, 1);
    layers[2] = gdl_nn_relu();
    layers[3] = gdl_nn_linear(128, 10, 1);
    if (!(model = gdl_nn_sequential(4, layers)) || gdl_module_to(model, dev) < 0) goto fail;
    if (!(opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) || gdl_optim_add_module(opt, model, 0) < 0) goto fail;

    for (epoch = 1; epoch <= EPOCHS; epoch++) {
        gdl_tensor *x, *y;
        double loss_sum = 0;
        int64_t seen = 0, correct = 0, total = 0;
        int got;
        gdl_module_train(model, 1); /* model.train() */
        while ((got = gdl_loader_next(train_loader, &x, &y)) == 1) {
            gdl_tensor *loss;
            gdl_arena_reset();                                   /* free the last step's temporaries */
            gdl_zero_grad(opt);                                  /* optimizer.zero_grad() */
            loss = gdl_cross_entropy(gdl_forward(model, x), y);  /* loss = criterion(model(x), y) */
            if (!loss || gdl_backward(loss) < 0) goto fail;      /* loss.backward() */
            if (gdl_step(opt) < 0) goto fail;                    /* optimizer.step() */
            loss_sum += gdl_item(loss) * (double)y->shape[0];
            seen += y->shape[0];
        }
        if (got < 0) goto fail;

        gdl_module_train(model, 0); /* model.eval(); with torch.no_grad(): */
        gdl_set_grad_enabled(0);
        while ((got = gdl_loader_next(test_loader, &x, &y)) == 1) {
            gdl_tensor *pred, *hits;
            gdl_arena_reset();
            pred = gdl_argmax(gdl_forward(model, x), 1);
            if (!pred || !(hits = gdl_eq(pred, y))) goto fail;
            correct += (int64_t)gdl_item(gdl_sum(gdl_to_dtype(hits, GDL_F32)));
            total += y->shape[0];
        }
        gdl_set_grad_enabled(1);
        if (got < 0) goto fail;
        printf("epoch %d: train loss %.4f, test accuracy %.2f%% (%ld of %ld)\n", epoch, loss_sum / (double)seen,
               100.0 * (double)correct / (double)total, (long)correct, (long)total);
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "training_loop: %s\n", gdl_last_error());
    gdl_optim_free(opt);
    gdl_module_free(model);
    gdl_loader_free(train_loader);
    gdl_loader_free(test_loader);
    gdl_dataset_free(train), gdl_dataset_free(test);
    gdl_shutdown();
    return rc;
}
