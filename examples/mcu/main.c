/* main.c — runs a net exported by gdl_export_c on the test images compiled
   in with it, on a microcontroller (board_mps2.c, under qemu) or a PC
   (board_host.c). For each image it prints the prediction and the raw
   outputs (f32 as the hex of their bits, INT8 as the u8 values in hex), so
   that the two runs can be compared bit for bit; then the accuracy, the
   arena, the stack's high-water mark and the instructions an inference took.

   Build: NET_DATA names the data header that train_export.c writes (it
   includes the net's header and says which net: NET_RUN, NET_INT8...); the
   net's implementation is compiled on its own (-DNAME_IMPLEMENTATION), so
   that its flash and RAM can be measured apart:
       cc -x c -DMLP_INT8_IMPLEMENTATION -c build/mcu/out/mlp_int8.h -o net.o
       cc -DNET_DATA='"mlp_int8_data.h"' -Ibuild/mcu/out main.c board_host.c net.o
   firmware.sh does the same for a Cortex-M; `make mcu-demo` does it all. No printf: the numbers are
   formatted here, so the firmware links no stdio. */
#include <stdint.h>
#include "board.h"
#include NET_DATA

static char line[64 + 12 * NET_OUTPUT_SIZE];

/* appends s at *p */
static char *put_str(char *p, const char *s) {
    while (*s) *p++ = *s++;
    return p;
}
static char *put_dec(char *p, uint32_t v) {
    char t[10];
    int n = 0;
    do t[n++] = (char)('0' + v % 10); while ((v /= 10) != 0);
    while (n) *p++ = t[--n];
    return p;
}
static char *put_hex(char *p, uint32_t v, int digits) {
    while (digits--) *p++ = "0123456789abcdef"[(v >> (4 * digits)) & 15];
    return p;
}
static void put_line(char *p) {
    *p++ = '\n';
    *p = 0;
    board_puts(line);
}

/* the raw value of output k */
static uint32_t raw(const net_value *out, int k, int *digits) {
#if NET_INT8
    *digits = 2;
    return out[k];
#else
    union { float f; uint32_t u; } v;
    v.f = out[k];
    *digits = 8;
    return v.u;
#endif
}

int main(void) {
    static net_value out[NET_OUTPUT_SIZE];
    uint32_t correct = 0, stack = 0, t;
    uint64_t ticks = 0;
    int i, k;
    char *p;
    board_init();
    board_stack_paint();
    for (i = 0; i < TEST_N; i++) {
        int pred = 0, digits;
        t = board_ticks();
        NET_RUN(test_x[i], out);
        t = board_ticks_since(t);
        ticks += t;
        for (k = 1; k < NET_OUTPUT_SIZE; k++)
            if (out[k] > out[pred]) pred = k;
        correct += pred == test_y[i];
        p = put_dec(put_str(line, "img "), (uint32_t)i);
        p = put_dec(put_str(p, " label "), test_y[i]);
        p = put_dec(put_str(p, " pred "), (uint32_t)pred);
        p = put_str(p, " out");
        for (k = 0; k < NET_OUTPUT_SIZE; k++) {
            uint32_t v = raw(out, k, &digits);
            p = put_hex(put_str(p, " "), v, digits);
        }
        put_line(p);
    }
    p = put_dec(put_str(line, "accuracy "), correct);
    put_line(put_dec(put_str(p, "/"), TEST_N));
    p = put_str(put_str(line, "net "), NET_NAME);
    put_line(put_dec(put_str(p, " arena_bytes "), NET_ARENA_BYTES));
    stack = board_stack_used();
    put_line(put_dec(put_str(line, "stack_bytes "), stack));
    put_line(put_dec(put_str(line, "insns_per_inference "), board_ticks_to_insns((uint32_t)(ticks / TEST_N))));
    put_line(put_dec(put_str(line, "calibration_loop_insns 200000 measured "), board_calibration()));
    return 0;
}
