/* 14_deploy.c — a trained model leaves the library. Trains a 784-64-10 MLP
   for two epochs on 2,000 Fashion-MNIST images, switches it to evaluation
   mode and exports it twice:
     fmnist_mlp.onnx  with gdl_export_onnx (dynamic batch, opset 18), for
                      ONNX Runtime, TensorRT, Netron;
     fmnist_mlp.h     with gdl_export_c (float), one C99 file without malloc,
                      stdio or threads, for a microcontroller;
     fmnist_int8.h    the same after static INT8 quantization (prepare,
                      calibrate on 4 batches, convert): integer arithmetic only.
   It prints what it wrote (sizes, the C file's arena), gpudl's outputs for
   an all-zero image, and the python3 command that runs the ONNX file in
   ONNX Runtime on the same image (onnxruntime is not needed to run this).

   Build and run from gpudl's repository root (Fashion-MNIST: `sh tools/fetch_data.sh`):
       cc -O2 -DGPUDL_ZLIB docs/tutorial/programs/14_deploy.c -lz -lm -pthread -o deploy && ./deploy
   It writes both files to the current folder. On a GPU build the model
   trains on cuda:0 and both exports read its weights back to the host. */
#define GPUDL_IMPLEMENTATION
#include "../../../gpudl.h"
#include "fashion_data.h"

#define EPOCHS 2
#define TRAIN_IMAGES 2000
#define TEST_IMAGES 1000
#define ONNX_FILE "fmnist_mlp.onnx"
#define C_FILE "fmnist_mlp.h"
#define INT8_FILE "fmnist_int8.h"

/* the size of the file at path in bytes, or -1 */
static long file_bytes(const char *path) {
    FILE *f = fopen(path, "rb");
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (f) fclose(f);
    return n;
}

/* a few epochs of the chapter 4 loop; 0 / -1 */
static int train(gdl_module *model, gdl_loader *train_loader, gdl_loader *test_loader) {
    gdl_optimizer *opt = gdl_adam_new(1e-3, 0.9, 0.999, 1e-8, 0);
    double loss = 0, acc = 0;
    int epoch, got = -1;
    if (!opt || gdl_optim_add_module(opt, model, 0) < 0) goto out;
    for (epoch = 1; epoch <= EPOCHS; epoch++) {
        gdl_tensor *x, *y;
        gdl_module_train(model, 1);
        while ((got = gdl_loader_next(train_loader, &x, &y)) == 1) {
            gdl_tensor *l;
            gdl_arena_reset();
            gdl_zero_grad(opt);
            l = gdl_cross_entropy(gdl_forward(model, x), y);
            if (!l || gdl_backward(l) < 0 || gdl_step(opt) < 0) { got = -1; goto out; }
        }
        if (got < 0 || gdl_evaluate(model, test_loader, NULL, NULL, &loss, &acc) < 0) { got = -1; goto out; }
        printf("epoch %d: test loss %.4f, test accuracy %.2f%%\n", epoch, loss, 100 * acc);
    }
out:
    gdl_optim_free(opt);
    return got < 0 ? -1 : 0;
}

int main(void) {
    gdl_device dev = gdl_default_device();
    gdl_dataset *train_set = NULL, *test_set = NULL;
    gdl_loader *train_loader = NULL, *test_loader = NULL, *calib_loader = NULL;
    gdl_module *model = NULL, *layers[4], *prepared = NULL, *q = NULL;
    gdl_tensor *zero = NULL, *out;
    gdl_onnx_opts oo = gdl_onnx_defaults();
    gdl_export_c_opts co = gdl_export_c_defaults();
    gdl_export_c_info info;
    float v[10];
    double loss, acc;
    int k, rc = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    gdl_manual_seed(0);
    /* data (fashion_data.h, as in chapter 4); the calibration reads training images in order */
    if (!(train_set = fashion_slice(1, 0, TRAIN_IMAGES)) || !(test_set = fashion_slice(0, 0, TEST_IMAGES)) ||
        !(train_loader = fashion_loader(train_set, 32, 1, dev)) ||
        !(test_loader = fashion_loader(test_set, 500, 0, dev)) ||
        !(calib_loader = fashion_loader(train_set, 500, 0, dev)))
        goto fail;
    layers[0] = gdl_nn_flatten(1);
    layers[1] = gdl_nn_linear(784, 64, 1);
    layers[2] = gdl_nn_relu();
    layers[3] = gdl_nn_linear(64, 10, 1);
    if (!(model = gdl_nn_sequential(4, layers)) || gdl_module_to(model, dev) < 0) goto fail;
    printf("training a 784-64-10 MLP (%lld parameters) on %d images, on %s\n",
           (long long)gdl_module_num_params(model), TRAIN_IMAGES, gdl_device_str(dev));
    if (train(model, train_loader, test_loader) < 0) goto fail;

    /* evaluation mode first: dropout off, batch norm on its running statistics */
    gdl_module_train(model, 0);
    gdl_arena_reset();

    /* 1. ONNX: one traced forward on an example input; dimension 0 stays free ("batch") */
    if (!(zero = gdl_zeros(GDL_DIMS(1, 1, 28, 28), GDL_F32, dev))) goto fail;
    if (gdl_export_onnx(model, zero, ONNX_FILE, &oo) < 0) goto fail;
    printf("wrote %s: %ld bytes, opset %d, input 'input' [batch, 1, 28, 28], output 'output' [batch, 10]\n",
           ONNX_FILE, file_bytes(ONNX_FILE), oo.opset);

    /* 2. C for a microcontroller: float weights as const arrays, one static arena */
    co.name = "fmnist_mlp";
    co.report = NULL; /* the numbers are in info; printed below */
    if (gdl_export_c(model, 4, (int64_t[]){1, 1, 28, 28}, C_FILE, &co, &info) < 0) goto fail;
    printf("wrote %s: %ld bytes, %s, %d ops, weights %lld bytes, arena %lld bytes (FMNIST_MLP_ARENA_BYTES)\n", C_FILE,
           file_bytes(C_FILE), info.int8 ? "int8" : "float", info.nops, (long long)info.weight_bytes,
           (long long)info.arena_bytes);

    /* 3. the same in INT8: observe the activations' ranges on training data, then convert */
    if (!(prepared = gdl_quant_prepare(model, NULL)) || gdl_quant_calibrate(prepared, calib_loader, 4) < 0 ||
        !(q = gdl_quant_convert(prepared)) || gdl_evaluate(q, test_loader, NULL, NULL, &loss, &acc) < 0)
        goto fail;
    co.name = "fmnist_int8";
    if (gdl_export_c(q, 4, (int64_t[]){1, 1, 28, 28}, INT8_FILE, &co, &info) < 0) goto fail;
    printf("wrote %s: %ld bytes, %s, %d ops, weights %lld bytes, arena %lld bytes; test accuracy %.2f%%\n",
           INT8_FILE, file_bytes(INT8_FILE), info.int8 ? "int8" : "float", info.nops, (long long)info.weight_bytes,
           (long long)info.arena_bytes, 100 * acc);

    /* gpudl's answer for an all-zero image, to compare with ONNX Runtime's */
    if (!(out = gdl_forward(model, zero)) || gdl_copy_to_host(out, v, sizeof v) < 0) goto fail;
    printf("gpudl's outputs for an all-zero image:\n[[");
    for (k = 0; k < 10; k++) printf("%s%.4f", k ? " " : "", v[k]);
    printf("]]\n");
    printf("ONNX Runtime's (the same numbers, to about 1e-6):\n"
           "python3 -c \"import numpy as np, onnxruntime as ort; s = ort.InferenceSession('%s'); "
           "print(s.run(None, {'input': np.zeros((1, 1, 28, 28), np.float32)})[0])\"\n", ONNX_FILE);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "deploy: %s\n", gdl_last_error());
    gdl_free(zero);
    gdl_module_free(q);
    gdl_module_free(prepared);
    gdl_module_free(model);
    gdl_loader_free(train_loader);
    gdl_loader_free(test_loader);
    gdl_loader_free(calib_loader);
    gdl_dataset_free(train_set);
    gdl_dataset_free(test_set);
    gdl_shutdown();
    return rc;
}
