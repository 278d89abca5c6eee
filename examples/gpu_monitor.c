/* gpu_monitor.c — an nvidia-smi-like table of every GPU, refreshed every
   second: utilisation, memory, temperature, power and clocks, read through
   NVML (gdl_gpu_stats). Where there is no NVIDIA driver it says so and
   exits with status 1.

   Build: cc -O2 -DGPUDL_NVML examples/gpu_monitor.c -lm -o gpu_monitor   (glibc < 2.34: add -ldl)
          (a CUDA build, -DGPUDL_CUDA, has it too)
   Run:   ./gpu_monitor [--count N] [--interval SECONDS]
   Tutorial: docs/tutorial/09-monitoring.md (chapter 9). */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#define GPUDL_IMPLEMENTATION
#include "../gpudl.h"
#include "example_args.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void print_table(int n) {
    int i;
    printf("GPU  name                      util  mem-util  memory used / total    temp   power / limit    SM MHz  mem MHz\n");
    for (i = 0; i < n; i++) {
        gdl_gpu_status s;
        char util[16], mutil[16], temp[16], power[32], sm[16], mc[16];
        if (gdl_gpu_stats(i, &s) < 0) {
            printf("%3d  %s\n", i, gdl_last_error());
            continue;
        }
        /* what a GPU does not report shows as "-", as nvidia-smi's N/A */
        if (s.utilization >= 0) snprintf(util, sizeof util, "%3d%%", s.utilization); else snprintf(util, sizeof util, "   -");
        if (s.memory_utilization >= 0) snprintf(mutil, sizeof mutil, "%3d%%", s.memory_utilization); else snprintf(mutil, sizeof mutil, "   -");
        if (s.temperature >= 0) snprintf(temp, sizeof temp, "%3dC", s.temperature); else snprintf(temp, sizeof temp, "   -");
        if (s.power == s.power) snprintf(power, sizeof power, "%4.0fW / %4.0fW", s.power, s.power_limit);
        else snprintf(power, sizeof power, "      -");
        if (s.sm_clock >= 0) snprintf(sm, sizeof sm, "%d", s.sm_clock); else snprintf(sm, sizeof sm, "-");
        if (s.memory_clock >= 0) snprintf(mc, sizeof mc, "%d", s.memory_clock); else snprintf(mc, sizeof mc, "-");
        printf("%3d  %-24.24s  %s      %s  %7.1f / %7.1f GiB  %s  %-15s  %6s  %7s\n", i, s.name, util, mutil,
               s.memory_used / 1073741824.0, s.memory_total / 1073741824.0, temp, power, sm, mc);
    }
}

int main(int argc, char **argv) {
    int count = 0, n, k, parsed;
    double interval = 1.0;
    ex_args a; /* none of the shared flags: only --help; not ex_defaults (no CUDA probe needed) */
    const ex_opt extra[] = {{"--count", 'i', &count, 1, 1e9, "print the table N times (default: until Ctrl-C)", "N"},
                            {"--interval", 'd', &interval, 0.05, 3600, "seconds between tables", "SECONDS"}};
    setvbuf(stdout, NULL, _IOLBF, 0);
    memset(&a, 0, sizeof a);
    parsed = ex_parse_opts(&a, argc, argv, 0, "Prints every GPU's utilisation, memory, temperature, power and clocks (NVML).",
                           extra, 2);
    if (parsed) return parsed == 1 ? 0 : 2;
    if ((n = gdl_gpu_count()) < 0) {
        fprintf(stderr, "gpu_monitor: %s\n", gdl_last_error());
        return 1;
    }
    for (k = 0; count == 0 || k < count; k++) {
        struct timespec ts;
        if (k > 0) {
            ts.tv_sec = (time_t)interval;
            ts.tv_nsec = (long)((interval - (double)ts.tv_sec) * 1e9);
            nanosleep(&ts, NULL);
            printf("\n");
        }
        print_table(n);
    }
    return 0;
}
