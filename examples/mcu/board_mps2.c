/* board_mps2.c — board.h for qemu's ARM MPS2 boards (mps2-an386: Cortex-M4F,
   mps2-an500: Cortex-M7): output and exit by semihosting, SysTick as the
   tick counter, the stack's high-water mark by painting it.

   Semihosting: the debugger (here qemu, -semihosting-config enable=on)
   serves a `bkpt 0xab` with r0 the operation and r1 its argument. On a real
   board without a debugger attached that breakpoint faults: write board_puts
   over the vendor's UART driver instead (e.g. HAL_UART_Transmit), and
   board_exit as a loop or NVIC_SystemReset(). */
#include "board.h"

#define SYS_WRITE0 0x04                   /* r1: a NUL-terminated string */
#define SYS_EXIT 0x18                     /* r1: the reason */
#define ADP_STOPPED_APPLICATION_EXIT 0x20026 /* qemu exits 0 */
#define ADP_STOPPED_RUNTIME_ERROR 0x20023 /* qemu exits 1 */

static int semihost(int op, const void *arg) {
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

void board_puts(const char *s) { semihost(SYS_WRITE0, s); }

void board_exit(int status) {
    semihost(SYS_EXIT, (const void *)(status ? ADP_STOPPED_RUNTIME_ERROR : ADP_STOPPED_APPLICATION_EXIT));
    for (;;) {}
}

/* SysTick: 24 bits counting down on the processor clock (MPS2: 25 MHz). qemu does not model cycles; under
   -icount shift=0 it advances its virtual clock 1 ns per instruction, so a tick is 40 instructions. On a
   real Cortex-M4/M7 use the cycle counter instead: DWT->CYCCNT (CoreDebug->DEMCR |= TRCENA, DWT->CTRL |= 1). */
#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
#define MPS2_CPU_HZ 25000000u

void board_init(void) {
    SYST_RVR = 0xFFFFFFu;
    SYST_CVR = 0;
    SYST_CSR = 5; /* enabled, processor clock, no interrupt */
}
uint32_t board_ticks(void) { return (0xFFFFFFu - SYST_CVR) & 0xFFFFFFu; } /* counts up, wraps at 2^24 */
uint32_t board_ticks_since(uint32_t start) { return (board_ticks() - start) & 0xFFFFFFu; } /* < 2^24 ticks */
uint32_t board_ticks_to_insns(uint32_t ticks) { return ticks * (1000000000u / MPS2_CPU_HZ); }

/* the counter checked against a loop of known length: 100000 turns of 2 instructions */
uint32_t board_calibration(void) {
    uint32_t n = 100000, t = board_ticks();
    __asm__ volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(n) : : "cc");
    return board_ticks_to_insns(board_ticks_since(t));
}

/* The stack (startup_mps2.c, mps2.ld): painted from its limit up to just below the caller's frame; the
   high-water mark is then the distance from the top of the stack to the lowest word no longer painted: all
   the firmware's frames (main's, the net's, the output's), what the stack must be sized for. */
extern uint32_t __stack_limit[], __stack_top[];
#define STACK_PAINT 0xC0FFEE11u

void board_stack_paint(void) {
    volatile uint32_t here = 0;
    uint32_t *p = __stack_limit, *end = (uint32_t *)(uintptr_t)(((uintptr_t)&here - 64) & ~(uintptr_t)3);
    while (p < end) *p++ = STACK_PAINT;
}
uint32_t board_stack_used(void) {
    const uint32_t *p = __stack_limit;
    while (p < __stack_top && *p == STACK_PAINT) p++;
    return (uint32_t)((uintptr_t)__stack_top - (uintptr_t)p);
}
