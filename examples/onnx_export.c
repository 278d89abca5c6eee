/* onnx_export.c — a model that leaves the library: trains examples/mnist_mlp.c's MLP (784-128-10, Adam)
   briefly on Fashion-MNIST with gdl_fit, exports it with gdl_export_onnx (dynamic batch, opset 18) and prints
   gpudl's outputs for an all-zero image next to the one-line command that runs the file in ONNX Runtime on the
   same image (docs/onnx.md: the op table, the TensorRT route).

   CPU:   cc -O2 -march=native examples/onnx_export.c -DGPUDL_ZLIB -lz -lm -pthread -o onnx_export
   Run:   ./onnx_export [--out FILE] [--data DIR] [--epochs N] [--batch-size N] [--device cpu|cuda] [--seed N]
   Then:  the printed python3 -c ... (needs onnxruntime and numpy: `sh tools/deps.sh onnx` puts them in
          build/onnx-venv; use build/onnx-venv/bin/python there)
   Data:  as examples/mnist_mlp.c's. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "example_args.h"

int main(int argc, char **argv) {
    ex_args a = ex_defaults(1, 64);
    const char *out = "mnist_mlp.onnx";
    const ex_opt extra[] = {{"--out", 's', &out, 0, 0, "the ONNX file to write", "FILE"}};
    gdl_dataset *train = NULL, *test = NULL;
    gdl_loader *train_loader = NULL, *test_loader = NULL;
    gdl_module *model = NULL;
    gdl_optimizer *opt = NULL;
    gdl_tensor *zero = NULL, *y;
    gdl_loader_opts lo = gdl_loader_defaults();
    gdl_onnx_opts o = gdl_onnx_defaults();
    gdl_fit_opts fo = gdl_fit_defaults();
    double t0;
    int k, rc = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    switch (ex_parse_opts(&a, argc, argv, EX_DATA | EX_EPOCHS | EX_BATCH | EX_DEVICE | EX_SEED,
                          "Trains an MLP on Fashion-MNIST briefly, exports it to ONNX and prints the command that "
                          "runs the file in ONNX Runtime.", extra, 1)) {
    case 1: return 0;
    case 2: return 2;
    }
    gdl_manual_seed(a.seed);
    if (!(train = gdl_dataset_fashion_mnist(a.data, 1)) || !(test = gdl_dataset_fashion_mnist(a.data, 0))) goto fail;
    lo.batch_size = a.batch_size;
    lo.shuffle = 1;
    lo.device = a.device;
    if (!(train_loader = gdl_loader_new(train, &lo))) goto fail;
    lo.shuffle = 0;
    lo.batch_size = 1000;
    if (!(test_loader = gdl_loader_new(test, &lo))) goto fail;
    if (!(model = gdl_nn_sequential(4, (gdl_module *[]){gdl_nn_flatten(1), gdl_nn_linear(784, 128, 1), gdl_nn_relu(),
                                                         gdl_nn_linear(128, 10, 1)})) ||
        gdl_module_to(model, a.device) < 0 || !(opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0)) ||
        gdl_optim_add_module(opt, model, 0) < 0)
        goto fail;
    fo.epochs = a.epochs; /* the training itself is examples/mnist_mlp.c's; here gdl_fit runs it */
    fo.val = test_loader;
    if (gdl_fit(model, train_loader, opt, &fo, NULL) < 0) goto fail;

    /* the export: traced on one image; the batch dimension stays free ("batch") */
    gdl_arena_reset();
    if (!(zero = gdl_zeros(GDL_DIMS(1, 1, 28, 28), GDL_F32, a.device))) goto fail;
    t0 = gdl_now();
    if (gdl_export_onnx(model, zero, out, &o) < 0) goto fail;
    printf("wrote %s (opset %d, %lld parameters) in %.1f ms\n", out, o.opset, (long long)gdl_module_num_params(model),
           1e3 * (gdl_now() - t0));

    /* gpudl's outputs for an all-zero image, and the command that gives ONNX Runtime's */
    gdl_module_train(model, 0);
    if (!(y = gdl_forward(model, zero))) goto fail;
    {
        float v[10];
        if (gdl_copy_to_host(y, v, sizeof v) < 0) goto fail;
        printf("gpudl's outputs for an all-zero image:\n[[");
        for (k = 0; k < 10; k++) printf("%s%.6g", k ? " " : "", v[k]);
        printf("]]\n");
    }
    printf("ONNX Runtime's (the same numbers, to about 1e-6):\n"
           "python3 -c \"import numpy as np, onnxruntime as ort; s = ort.InferenceSession('%s'); "
           "print(s.run(None, {'input': np.zeros((1, 1, 28, 28), np.float32)})[0])\"\n", out);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "onnx_export: %s\n", gdl_last_error());
    gdl_free(zero);
    ex_free_training(NULL, opt, model, train_loader, test_loader, train, test);
    gdl_shutdown();
    return rc;
}
