/* board.h — what examples/mcu/main.c needs from a board: text out, an exit, a
   tick counter and a stack high-water mark. board_mps2.c implements it for
   qemu's MPS2 boards (semihosting, SysTick, a painted stack); board_host.c
   for a PC, so that the same main.c and exported net run on both and their
   outputs can be compared bit for bit. On a real board, write these
   functions over the vendor's HAL: board_puts over a UART, board_exit as a
   breakpoint or a reset, board_ticks over DWT->CYCCNT. */
#ifndef BOARD_H
#define BOARD_H
#include <stdint.h>

void board_init(void);              /* clocks, the tick counter */
void board_puts(const char *s);     /* text out, as it is (no newline added) */
void board_exit(int status);        /* ends the program (0: success) */
uint32_t board_ticks(void);         /* a free-running counter (0 where there is none) */
uint32_t board_ticks_since(uint32_t start); /* ticks from board_ticks() == start to now, across a wrap */
uint32_t board_ticks_to_insns(uint32_t ticks); /* qemu -icount shift=0: instructions; a real board: cycles */
uint32_t board_calibration(void);   /* the instructions measured for a loop of 200000 (0: no counter) */
void board_stack_paint(void);       /* fills the unused stack below the caller with a pattern */
uint32_t board_stack_used(void);    /* the stack's high-water mark in bytes from its top (0: not measured) */
#endif
