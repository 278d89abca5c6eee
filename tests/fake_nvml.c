/* fake_nvml.c — a stand-in for NVIDIA's libnvidia-ml.so.1 with the entry
   points gpudl's monitor loads, built as a shared library so that the NVML
   code path (dlopen, dlsym, the figures, the "not supported" cases) runs in
   tests on machines with no NVIDIA driver. Two GPUs: cuda:0 reports
   everything; cuda:1 reports no utilisation, temperature or power (as some
   boards do). FAKE_NVML_INIT_FAIL=1 makes nvmlInit fail. Their PCI bus ids are
   those the CUDA emulator gives its cuda:1 and cuda:0, in that order: NVML's
   order is not CUDA's, as under CUDA_VISIBLE_DEVICES. */
#include <stdlib.h>
#include <string.h>

typedef struct { unsigned int gpu, memory; } util_t;
typedef struct { unsigned long long total, free, used; } mem_t;
typedef struct dev { int index; } *device_t;
static struct dev devs[2] = {{0}, {1}};

int nvmlInit_v2(void) { return getenv("FAKE_NVML_INIT_FAIL") ? 9 /* NVML_ERROR_DRIVER_NOT_LOADED */ : 0; }
int nvmlDeviceGetCount_v2(unsigned int *n) { *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, device_t *d) {
    if (i > 1) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *d = &devs[i];
    return 0;
}
/* NVML accepts "0000:10:00.0" and "00000000:10:00.0": compare from the bus on */
int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, device_t *d) {
    static const char *const ids[2] = {"20:00.0", "10:00.0"};
    const char *c = bus ? strchr(bus, ':') : NULL;
    int i;
    if (!c) return 2;
    for (i = 0; i < 2; i++)
        if (strcmp(c + 1, ids[i]) == 0) {
            *d = &devs[i];
            return 0;
        }
    return 6; /* NVML_ERROR_NOT_FOUND */
}
int nvmlDeviceGetName(device_t d, char *name, unsigned int len) {
    const char *n = d->index == 0 ? "Fake H100 80GB HBM3" : "Fake Orin";
    if (len <= strlen(n)) return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    strcpy(name, n);
    return 0;
}
int nvmlDeviceGetUtilizationRates(device_t d, util_t *u) {
    if (d->index == 1) return 3; /* NVML_ERROR_NOT_SUPPORTED */
    u->gpu = 87;
    u->memory = 41;
    return 0;
}
int nvmlDeviceGetMemoryInfo(device_t d, mem_t *m) {
    m->total = d->index == 0 ? 85899345920ull : 8589934592ull;
    m->used = d->index == 0 ? 12884901888ull : 1073741824ull;
    m->free = m->total - m->used;
    return 0;
}
int nvmlDeviceGetTemperature(device_t d, int sensor, unsigned int *t) {
    if (d->index == 1 || sensor != 0) return 3;
    *t = 64;
    return 0;
}
int nvmlDeviceGetPowerUsage(device_t d, unsigned int *mw) {
    if (d->index == 1) return 3;
    *mw = 312500;
    return 0;
}
int nvmlDeviceGetEnforcedPowerLimit(device_t d, unsigned int *mw) {
    if (d->index == 1) return 3;
    *mw = 700000;
    return 0;
}
int nvmlDeviceGetClockInfo(device_t d, int type, unsigned int *mhz) {
    if (type == 1) *mhz = d->index == 0 ? 1980 : 1300;
    else if (type == 2) *mhz = d->index == 0 ? 2619 : 3200;
    else return 3;
    return 0;
}
const char *nvmlErrorString(int rc) {
    return rc == 9 ? "Driver Not Loaded" : rc == 3 ? "Not Supported" : rc == 6 ? "Not Found" : "Unknown Error";
}
