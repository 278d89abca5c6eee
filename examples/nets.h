/* nets.h — the nets that the examples and the benchmarks both train, defined once:
     ex_mlp_net      examples/mnist_mlp.c's net (also bench/amp.c's "mlp"): flatten, linear 784-128,
                     ReLU, linear 128-10
     ex_cnn_net      examples/cnn.c's net (also bench/train.c's and bench/amp.c's "cnn"): two
                     conv3x3-ReLU-maxpool blocks (32, 64 channels), flatten, linear 128, ReLU,
                     dropout (when given), linear 10
     ex_bn_cnn_layers bench/fmnist92.c's batch-normed net (also examples/recipe.h's "cnn"), as layers
                     appended to an array, for a Sequential
   Not part of gpudl's API: a helper of the programs. inline: no warning where unused. */
#ifndef GPUDL_EXAMPLE_NETS_H
#define GPUDL_EXAMPLE_NETS_H

/* on 1x28x28 inputs. NULL on error (gdl_last_error says why). */
static inline gdl_module *ex_mlp_net(void) {
    gdl_module *l[4];
    l[0] = gdl_nn_flatten(1);
    l[1] = gdl_nn_linear(784, 128, 1);
    l[2] = gdl_nn_relu();
    l[3] = gdl_nn_linear(128, 10, 1);
    return gdl_nn_sequential(4, l);
}

/* on channels x side x side inputs (side a multiple of 4); dropout 0: no Dropout layer. NULL on error
   (gdl_last_error says why). */
static inline gdl_module *ex_cnn_net(int channels, int side, double dropout) {
    gdl_module *l[11];
    int k = 0;
    l[k++] = gdl_nn_conv2d(channels, 32, 3, 1, 1, 1, 1, 1);
    l[k++] = gdl_nn_relu();
    l[k++] = gdl_nn_maxpool2d(2, 2, 0);
    l[k++] = gdl_nn_conv2d(32, 64, 3, 1, 1, 1, 1, 1);
    l[k++] = gdl_nn_relu();
    l[k++] = gdl_nn_maxpool2d(2, 2, 0);
    l[k++] = gdl_nn_flatten(1);
    l[k++] = gdl_nn_linear(64 * (int64_t)(side / 4) * (side / 4), 128, 1);
    l[k++] = gdl_nn_relu();
    if (dropout > 0) l[k++] = gdl_nn_dropout(dropout);
    l[k++] = gdl_nn_linear(128, 10, 1);
    return gdl_nn_sequential(k, l);
}

/* conv32-BN-ReLU-pool, conv64-BN-ReLU-pool, conv128-BN-ReLU, linear 6272-10 on 1x28x28, appended at
   l[k]; returns the new count (k + 13) */
static inline int ex_bn_cnn_layers(gdl_module **l, int k) {
    l[k++] = gdl_nn_conv2d(1, 32, 3, 1, 1, 1, 1, 1);
    l[k++] = gdl_nn_batchnorm2d(32);
    l[k++] = gdl_nn_relu();
    l[k++] = gdl_nn_maxpool2d(2, 2, 0);
    l[k++] = gdl_nn_conv2d(32, 64, 3, 1, 1, 1, 1, 1);
    l[k++] = gdl_nn_batchnorm2d(64);
    l[k++] = gdl_nn_relu();
    l[k++] = gdl_nn_maxpool2d(2, 2, 0);
    l[k++] = gdl_nn_conv2d(64, 128, 3, 1, 1, 1, 1, 1);
    l[k++] = gdl_nn_batchnorm2d(128);
    l[k++] = gdl_nn_relu();
    l[k++] = gdl_nn_flatten(1);
    l[k++] = gdl_nn_linear(128 * 7 * 7, 10, 1);
    return k;
}

#endif
