/* A stand-in libnvidia-ml.so.1 for tests: the NVML entry points the plugin dlopen()s, with the
 * same ABI (MIG state: fake_nvml_mig.c; telemetry: fake_nvml_telemetry.c). Xid events come from a
 * file named by TESSERA_FAKE_NVML_EVENTS: each line
 * "<PCI address> <xid>" is delivered once, in order, by nvmlEventSetWait_v2. Each nvmlInit_v2
 * appends a line to the file named by TESSERA_FAKE_NVML_INITS, so tests see whether NVML was
 * started at all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  char pci[24];
} FakeDevice;

typedef struct {
  void* device;
  unsigned long long event_type;
  unsigned long long event_data;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
} EventData;

typedef struct {
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
} PciInfo;

static FakeDevice devices[64];
static int device_count;
static long events_consumed; /* lines of the events file already delivered */
static int event_set;

void FakeNvmlMigLoad(void); /* fake_nvml_mig.c: reads the MIG state file */

int nvmlInit_v2(void) {
  const char* inits = getenv("TESSERA_FAKE_NVML_INITS");
  FILE* f = inits ? fopen(inits, "a") : NULL;
  if (f) {
    fprintf(f, "nvmlInit_v2 pid=%ld\n", (long)getpid());
    fclose(f);
  }
  FakeNvmlMigLoad();
  return 0;
}
int nvmlShutdown(void) {
  return 0;
}
int nvmlEventSetCreate(void** set) {
  *set = &event_set;
  return 0;
}
int nvmlEventSetFree(void* set) {
  return 0;
}
int nvmlDeviceRegisterEvents(void* device, unsigned long long types, void* set) {
  return 0;
}

static FakeDevice* Find(const char* pci) {
  for (int i = 0; i < device_count; ++i)
    if (strcmp(devices[i].pci, pci) == 0) return &devices[i];
  if (device_count == 64) return NULL;
  snprintf(devices[device_count].pci, sizeof devices[0].pci, "%s", pci);
  return &devices[device_count++];
}

int nvmlDeviceGetHandleByPciBusId_v2(const char* pci, void** device) {
  *device = Find(pci);
  return *device ? 0 : 6; /* NVML_ERROR_NOT_FOUND */
}

int nvmlDeviceGetPciInfo_v3(void* device, PciInfo* info) {
  memset(info, 0, sizeof *info);
  /* NVML spells the domain with 8 digits, upper case. */
  snprintf(info->bus_id, sizeof info->bus_id, "0000%s", ((FakeDevice*)device)->pci);
  for (char* p = info->bus_id; *p; ++p)
    if (*p >= 'a' && *p <= 'f') *p -= 32;
  return 0;
}

int nvmlEventSetWait_v2(void* set, EventData* data, unsigned int timeout_ms) {
  const char* path = getenv("TESSERA_FAKE_NVML_EVENTS");
  for (unsigned int waited = 0; waited <= timeout_ms; waited += 20) {
    FILE* f = path ? fopen(path, "r") : NULL;
    if (f) {
      char pci[64];
      unsigned long long xid;
      long line = 0;
      while (fscanf(f, "%63s %llu", pci, &xid) == 2) {
        if (line++ < events_consumed) continue;
        ++events_consumed;
        fclose(f);
        memset(data, 0, sizeof *data);
        data->device = Find(pci);
        data->event_type = 0x8; /* nvmlEventTypeXidCriticalError */
        data->event_data = xid;
        return 0;
      }
      fclose(f);
    }
    if (waited + 20 > timeout_ms) break; /* a timeout of 0 looks once, without sleeping */
    usleep(20000);
  }
  return 10; /* NVML_ERROR_TIMEOUT */
}
