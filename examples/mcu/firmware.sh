#!/bin/sh
# examples/mcu/firmware.sh — builds the firmware of an exported net and runs it under qemu:
#   sh examples/mcu/firmware.sh NETDIR NAME BOARD WORKDIR
# NETDIR holds NAME.h and NAME_data.h (examples/mcu/train_export.c); BOARD is m4 (a Cortex-M4F: qemu
# -M mps2-an386) or m7 (a Cortex-M7: -M mps2-an500). Writes to WORKDIR: NAME.o (the net alone: its
# flash is text + data, its RAM data + bss), NAME.elf (startup_mps2.c, board_mps2.c, main.c, the net;
# mps2.ld) and NAME.txt (what the firmware printed: one line per image, the accuracy, the arena, the
# stack's high-water mark, the instructions per inference). Exits non-zero when a step fails.
# Flags: -O2, hard float, and -ffp-contract=off, as on the PC, so that no multiply-add is fused and the
# f32 outputs are the PC's bit for bit. qemu counts instructions (-icount shift=0: 1 ns each), it does
# not model cycles.
set -u
[ $# -eq 4 ] || { echo "usage: $0 NETDIR NAME m4|m7 WORKDIR" >&2; exit 2; }
O=$1 n=$2 board=$3 F=$4
here=$(dirname "$0")
U=$(echo "$n" | tr 'a-z' 'A-Z')
case $board in
m4) machine=mps2-an386; cpu="-mcpu=cortex-m4 -mthumb -mfpu=fpv4-sp-d16 -mfloat-abi=hard" ;;
m7) machine=mps2-an500; cpu="-mcpu=cortex-m7 -mthumb -mfpu=fpv5-d16 -mfloat-abi=hard" ;;
*) echo "$0: board $board: m4 or m7" >&2; exit 2 ;;
esac
ARMF="$cpu -std=c99 -Wall -Wextra -Wpedantic -Werror -O2 -ffp-contract=off -ffunction-sections -fdata-sections"
mkdir -p "$F" || exit 1
arm-none-eabi-gcc $ARMF -c "$here/startup_mps2.c" -o "$F/startup.o" &&
arm-none-eabi-gcc $ARMF -c "$here/board_mps2.c" -o "$F/board.o" &&
arm-none-eabi-gcc $ARMF -x c -D${U}_IMPLEMENTATION -c "$O/$n.h" -o "$F/$n.o" &&
arm-none-eabi-gcc $ARMF -I"$O" -DNET_DATA="\"${n}_data.h\"" -c "$here/main.c" -o "$F/main_$n.o" &&
arm-none-eabi-gcc $ARMF -T "$here/mps2.ld" -nostartfiles --specs=nano.specs --specs=nosys.specs -Wl,--gc-sections \
    "$F/startup.o" "$F/board.o" "$F/main_$n.o" "$F/$n.o" -lm -o "$F/$n.elf" || exit 1
rm -f "$F/$n.txt"
# semihosting's output into a file (the chardev); a hung firmware is stopped by the timeout
timeout 300 qemu-system-arm -M $machine -nographic -monitor none -serial none \
    -chardev file,id=out,path="$F/$n.txt" -semihosting-config enable=on,target=native,chardev=out \
    -icount shift=0 -kernel "$F/$n.elf" </dev/null || exit 1
grep -q '^calibration' "$F/$n.txt"
