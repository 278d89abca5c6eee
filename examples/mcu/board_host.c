/* board_host.c — board.h on a PC (stdio), for the bit-for-bit comparison
   with the firmware: main.c's per-image lines must be the same. */
#include <stdio.h>
#include <stdlib.h>
#include "board.h"

void board_init(void) {}
void board_puts(const char *s) { fputs(s, stdout); }
void board_exit(int status) { exit(status); }
uint32_t board_ticks(void) { return 0; }
uint32_t board_ticks_since(uint32_t start) { (void)start; return 0; }
uint32_t board_ticks_to_insns(uint32_t ticks) { return ticks; }
uint32_t board_calibration(void) { return 0; }
void board_stack_paint(void) {}
uint32_t board_stack_used(void) { return 0; }
