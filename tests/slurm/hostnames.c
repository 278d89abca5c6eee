/* hostnames.c — prints the hosts of a Slurm host list one per line, as `scontrol show hostnames LIST`
   does, through gdl_hostlist_host (tests/slurm/test_slurm.sh compares the two). Exit 1 + the error on a
   bad list. */
#include <stdio.h>
#define GPUDL_IMPLEMENTATION
#include "../../gpudl.h"

int main(int argc, char **argv) {
    char h[256];
    int64_t n, i;
    if (argc != 2) {
        fprintf(stderr, "usage: hostnames LIST\n");
        return 2;
    }
    if ((n = gdl_hostlist_host(argv[1], 0, h, sizeof h)) < 0) {
        fprintf(stderr, "%s\n", gdl_last_error());
        return 1;
    }
    for (i = 0; i < n; i++) {
        if (gdl_hostlist_host(argv[1], i, h, sizeof h) < 0) {
            fprintf(stderr, "%s\n", gdl_last_error());
            return 1;
        }
        puts(h);
    }
    return 0;
}
