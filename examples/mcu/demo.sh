#!/bin/sh
# examples/mcu/demo.sh — make mcu-demo: train here, run on a microcontroller. Trains the Fashion-MNIST
# MLP and CNN briefly (train_export), quantizes and exports them, builds the INT8 MLP's firmware for a
# Cortex-M4F and runs it under qemu; prints its predictions, accuracy and sizes.
set -u
B=${B:-build}
O=$B/mcu/demo
F=$O/m4
mkdir -p "$O"
"$B/mcu/train_export" "$O" 12000 || exit 1
sh examples/mcu/firmware.sh "$O" mlp_int8 m4 "$F" || { echo "mcu-demo: the firmware failed" >&2; exit 1; }
echo "--- the firmware's output (qemu -M mps2-an386, a Cortex-M4F) ---"
head -10 "$F/mlp_int8.txt"
echo "... ($(grep -c '^img' "$F/mlp_int8.txt") images)"
grep -v '^img' "$F/mlp_int8.txt"
echo "--- sizes (arm-none-eabi-size): the net alone (flash: text + data, RAM: data + bss = the arena), the firmware ---"
arm-none-eabi-size "$F/mlp_int8.o" "$F/mlp_int8.elf"
echo "(the firmware's text holds its 100 test images: $((100 * 784)) bytes)"
