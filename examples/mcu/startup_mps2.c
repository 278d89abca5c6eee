/* startup_mps2.c — the reset path of a Cortex-M firmware: the vector table
   (the initial stack pointer, then the handlers), and Reset_Handler, which
   copies .data from flash to RAM, zeroes .bss, turns the FPU on and calls
   main. This is what a vendor's startup file (startup_stm32f407xx.s,
   startup_ARMCM4.c from CMSIS) does; on a real board use the vendor's, which
   also sets the clocks (SystemInit) and lists every peripheral interrupt. */
#include <stdint.h>
#include <string.h>

extern uint32_t __data_load[], __data_start[], __data_end[], __bss_start[], __bss_end[], __stack_top[];
int main(void);
void board_exit(int status);

void Reset_Handler(void);
static void Default_Handler(void) {
    for (;;) {} /* a fault: qemu keeps running, its -icount timeout (tests) ends it */
}

/* 16 system exceptions; MPS2's peripheral interrupts are not used here */
__attribute__((section(".vectors"), used)) static void (*const vectors[16])(void) = {
    (void (*)(void))(uintptr_t)__stack_top, Reset_Handler,
    Default_Handler, Default_Handler, Default_Handler, Default_Handler, Default_Handler, 0, 0, 0, 0,
    Default_Handler, Default_Handler, 0, Default_Handler, Default_Handler};

void Reset_Handler(void) {
    memcpy(__data_start, __data_load, (size_t)((char *)__data_end - (char *)__data_start));
    memset(__bss_start, 0, (size_t)((char *)__bss_end - (char *)__bss_start));
#if defined(__ARM_FP)
    /* CP10 and CP11 full access (CPACR), before any floating-point instruction */
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
    board_exit(main());
}
