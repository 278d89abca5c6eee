#!/bin/sh
# tests/test_mcu.sh — gdl_export_c end to end (make test-mcu; tests/mcu.mk):
#   1. tests/test_export_c's refusals;
#   2. it trains the Fashion-MNIST MLP and CNN briefly, quantizes them (static PTQ) and exports them, with
#      the f32 MLP again with softmax and no libm, and a fixed-seed net of the other f32 ops (zoo_f32);
#   3. each exported file, alone: warning-free under gcc and clang (-std=c99 -Wall -Wextra -Wpedantic
#      -Werror), only <stdint.h> <stddef.h> <string.h> (<math.h>) included, built freestanding and its
#      undefined symbols no more than memcpy (and expf / tanhf where libm is allowed); its arena is the
#      size the exporter printed; INT8 files hold no floating-point instruction on the Cortex-M4;
#   4. examples/mcu/main.c with each net on the PC: outputs within 1e-5 (f32, of the row's largest) or one
#      step (INT8) of gpudl's own model (test_export_c check);
#   5. the firmware for a Cortex-M4F (qemu -M mps2-an386) and a Cortex-M7 (-M mps2-an500): its
#      per-image lines (raw outputs in hex, predictions) and accuracy equal the PC's, bit for bit;
#   6. the figures: flash and RAM of each net (arm-none-eabi-size of its object), the firmware's stack
#      high-water mark, instructions per inference (qemu -icount shift=0), into $B/mcu/sizes.md.
# Usage: sh tests/test_mcu.sh [TEST_EXPORT_C [TRAIN_EXPORT]] (default build/mcu/test_export_c and
# build/mcu/train_export); B (build dir), MCU_TRAIN (training images, default 12000).
set -u
B=${B:-build}
D=$B/mcu
O=$D/out
T=${1:-$D/test_export_c}
TRAIN=${2:-$D/train_export}
CC_HOST=${CC_HOST:-cc}
pass=0
fail=0
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
upper() { echo "$1" | tr 'a-z' 'A-Z'; }
STRICT="-std=c99 -Wall -Wextra -Wpedantic -Werror -O2 -ffp-contract=off"

for tool in arm-none-eabi-gcc arm-none-eabi-size qemu-system-arm clang nm; do
    command -v $tool >/dev/null 2>&1 || { echo "FAIL test-mcu: $tool is missing (sh tools/deps.sh test)"; exit 1; }
done
rm -rf "$O" "$D/host" "$D/fw"
mkdir -p "$O" "$D/host" "$D/fw"

# 1. the refusals
if "$T" >"$D/refusals.log" 2>&1; then ok "export_c refusals ($(tail -1 "$D/refusals.log"))"
else cat "$D/refusals.log"; bad "export_c refusals"; fi

# 2. train, quantize, export
if "$TRAIN" "$O" "${MCU_TRAIN:-12000}" >"$D/make.log" 2>&1; then ok "train_export"; cat "$D/make.log"
else cat "$D/make.log"; bad "train_export"; echo "$pass passed, $fail failed"; exit 1; fi

NETS="mlp_f32 mlp_int8 mlp_f32_softmax cnn_f32 cnn_int8 zoo_f32 zoo_int8"
DEV_NETS="mlp_f32 mlp_int8 mlp_f32_softmax cnn_f32 cnn_int8 zoo_int8"

# 3. each file alone
for n in $NETS; do
    U=$(upper $n)
    f=$O/$n.h
    incs=$(grep '^#include' "$f" | sed 's/#include //' | sort -u | tr '\n' ' ')
    case "$n" in *softmax|*int8) allowed_inc="<stddef.h> <stdint.h> <string.h> "; allowed_sym="memcpy" ;;
                 *) allowed_inc="<math.h> <stddef.h> <stdint.h> <string.h> "; allowed_sym="memcpy expf tanhf" ;; esac
    extra=$(for i in $incs; do case " $allowed_inc" in *" $i "*) ;; *) echo "$i" ;; esac; done)
    [ -z "$extra" ] && ok "$n: includes $incs" || bad "$n: includes $incs (allowed: $allowed_inc)"
    for c in gcc clang; do
        if $c $STRICT -x c -c "$f" -o "$D/host/${n}_decl_$c.o" 2>"$D/host/${n}_$c.log" &&
           $c $STRICT -x c -D${U}_IMPLEMENTATION -c "$f" -o "$D/host/${n}_$c.o" 2>>"$D/host/${n}_$c.log"; then
            ok "$n: $c -std=c99 -Wall -Wextra -Wpedantic -Werror"
        else cat "$D/host/${n}_$c.log"; bad "$n: $c warnings"; fi
    done
    if gcc $STRICT -ffreestanding -nostdlib -x c -D${U}_IMPLEMENTATION -c "$f" -o "$D/host/${n}_free.o" 2>"$D/host/${n}_free.log"; then
        und=$(nm -u "$D/host/${n}_free.o" | awk '{print $2}' | tr '\n' ' ')
        extra=$(for s in $und; do case " $allowed_sym " in *" $s "*) ;; *) echo "$s";; esac; done)
        [ -z "$extra" ] && ok "$n: freestanding, undefined symbols: ${und:-none}" || bad "$n: undefined symbols $extra"
    else cat "$D/host/${n}_free.log"; bad "$n: freestanding build"; fi
    printed=$(sed -n "s/^gdl_export_c: .*\/$n\.h: .*arena \([0-9]*\) bytes.*/\1/p" "$D/make.log")
    macro=$(sed -n "s/^#define ${U}_ARENA_BYTES \([0-9]*\)/\1/p" "$f")
    sym=$(nm -S "$D/host/${n}_gcc.o" | awk -v s="${n}__arena" '$4 == s {print $2}')
    [ -n "$printed" ] && [ "$printed" = "$macro" ] && [ -n "$sym" ] && [ $((0x$sym)) -eq "$printed" ] \
        && ok "$n: arena $printed bytes (printed, macro, symbol)" || bad "$n: arena printed ${printed:-?} macro ${macro:-?} symbol 0x${sym:-?}"
done

# 4. main.c on the PC against gpudl's outputs
for n in $NETS; do
    U=$(upper $n)
    if $CC_HOST $STRICT -I"$O" -DNET_DATA="\"${n}_data.h\"" examples/mcu/main.c examples/mcu/board_host.c \
         "$D/host/${n}_gcc.o" -lm -o "$D/host/$n" 2>"$D/host/${n}_main.log" && "$D/host/$n" >"$D/host/$n.txt" &&
       "$T" check "$O/${n}_ref.txt" "$D/host/$n.txt" >"$D/host/${n}_check.log" 2>&1; then
        ok "$n on the PC: $(cat "$D/host/${n}_check.log"), $(grep '^accuracy' "$D/host/$n.txt")"
    else cat "$D/host/${n}_main.log" "$D/host/${n}_check.log" 2>/dev/null; bad "$n on the PC"; fi
done

# 5. and 6. the firmware on the two boards
printf '| net | board | flash: code + weights (B) | RAM: arena (B) | firmware stack high-water (B) | firmware text / data / bss (B) | instructions / inference | accuracy (100 images) |\n|---|---|---|---|---|---|---|---|\n' >"$D/sizes.md"
for board in m4 m7; do
    case $board in m4) what="Cortex-M4F (mps2-an386)" ;; m7) what="Cortex-M7 (mps2-an500)" ;; esac
    F="$D/fw/$board"
    for n in $DEV_NETS; do
        if ! sh examples/mcu/firmware.sh "$O" $n $board "$F" >"$F.$n.log" 2>&1; then
            cat "$F.$n.log"; bad "$n on $what: the firmware's build or run"; continue
        fi
        case $n in *int8)
            vfp=$(arm-none-eabi-objdump -d "$F/$n.o" | grep -cE '[[:space:]]v(add|sub|mul|div|fma|fms|mla|mls|cvt|neg|abs|sqrt|cmp|ldr|str|mov)\.?' || true)
            soft=$(nm -u "$F/$n.o" | grep -c '__aeabi_[fd]' || true)
            [ "$vfp" = 0 ] && [ "$soft" = 0 ] && ok "$n on $what: integer arithmetic only (no VFP instruction, no soft-float call)" \
                || bad "$n on $what: $vfp VFP instructions, $soft soft-float calls" ;;
        esac
        grep -E '^(img|accuracy) ' "$D/host/$n.txt" >"$F/$n.host_lines"
        grep -E '^(img|accuracy) ' "$F/$n.txt" >"$F/$n.dev_lines"
        if [ -s "$F/$n.dev_lines" ] && cmp -s "$F/$n.host_lines" "$F/$n.dev_lines"; then
            ok "$n on $what: $(grep -c '^img' "$F/$n.dev_lines") images' outputs equal the PC's bit for bit, $(grep '^accuracy' "$F/$n.txt")"
        else diff "$F/$n.host_lines" "$F/$n.dev_lines" | head -5; bad "$n on $what: outputs differ from the PC's"; fi
        cal=$(sed -n 's/^calibration_loop_insns 200000 measured //p' "$F/$n.txt")
        [ "$cal" -ge 199960 ] 2>/dev/null && [ "$cal" -le 200040 ] && ok "$n on $what: instruction counter calibrated ($cal for 200000)" \
            || bad "$n on $what: calibration loop measured ${cal:-?} instructions for 200000"
        set -- $(arm-none-eabi-size "$F/$n.o" | tail -1)
        nflash=$(($1 + $2)); nram=$(($2 + $3))
        set -- $(arm-none-eabi-size "$F/$n.elf" | tail -1)
        fw="$1 / $2 / $3"
        acc=$(sed -n 's/^accuracy //p' "$F/$n.txt")
        case $n in zoo_*) acc="- (random inputs)" ;; esac
        printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$n" "$what" "$nflash" "$nram" \
            "$(sed -n 's/^stack_bytes //p' "$F/$n.txt")" "$fw" "$(sed -n 's/^insns_per_inference //p' "$F/$n.txt")" \
            "$acc" >>"$D/sizes.md"
    done
done
cat "$D/sizes.md"
echo "$pass passed, $fail failed, 0 skipped"
[ $fail -eq 0 ]
