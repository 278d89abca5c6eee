/* build_check.c — the whole header, implementation included, in one
   translation unit: `make test-warnings` builds it as C99, C11 and C++17
   with gcc and clang and -Werror. It also compiles the sample code from the
   manual at the top of gpudl.h. */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"

int main(void) {
    int64_t sw[2] = {10, 784}, sx[2] = {64, 784}, sy[1] = {64};
    gdl_tensor *W = gdl_randn(2, sw, gdl_cpu()), *x = gdl_randn(2, sx, gdl_cpu());
    gdl_tensor *y = gdl_zeros(1, sy, GDL_I32, gdl_cpu());
    int step;
    gdl_mul_scalar_(W, 0.01);
    gdl_set_requires_grad(W, 1);
    for (step = 0; step < 3; step++) {
        gdl_tensor *logits, *loss;
        gdl_arena_reset();
        gdl_zero_grad_tensor(W);
        logits = gdl_linear(x, W, NULL);
        loss = gdl_cross_entropy(logits, y);
        if (!loss || gdl_backward(loss) < 0) {
            fprintf(stderr, "%s\n", gdl_last_error());
            break;
        }
        gdl_sgd_update_(W, 0.1);
    }
    gdl_free(W);
    gdl_free(x);
    gdl_free(y);
    gdl_shutdown();
    return 0;
}
