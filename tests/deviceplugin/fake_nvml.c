/* A stand-in libnvidia-ml.so.1 for tests: the NVML entry points the plugin dlopen()s, with the
 * same ABI (MIG state: fake_nvml_mig.c; telemetry: fake_nvml_telemetry.c; fault state:
 * fake_nvml_faults.c). Events come from a file named by TESSERA_FAKE_NVML_EVENTS, one per line:
 *   <PCI address> <xid> [gi=<g>] [ci=<c>]   a critical Xid (nvmlEventTypeXidCriticalError), with
 *                                           the MIG instance it names (none: 0xFFFFFFFF)
 *   <PCI address> ecc                       a double-bit ECC error (nvmlEventTypeDoubleBitEccError)
 * Each event set delivers each line once, in order, through nvmlEventSetWait_v2, when its type
 * was registered on the set. The first set a process makes starts at the file's first line; a
 * set made later starts after the last line any earlier set of the process delivered, as NVML
 * hands a new set only what happens after it (kept across the library's unloading, so NVML shut
 * down and started again does not deliver the same events twice). Each nvmlInit_v2 appends a
 * line to the file named by TESSERA_FAKE_NVML_INITS, so tests see whether NVML was started at
 * all. While NVML is started in a process (from its first nvmlInit_v2 to the nvmlShutdown that
 * balances it), a file named by its PID lies in the folder named by TESSERA_FAKE_NVML_HOLDERS:
 * the stand-in nvidia-smi refuses a reset while another process holds NVML, as the real one
 * does. */
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

#define MAX_EVENT_SETS 16
#define EVENT_XID 0x8ULL
#define EVENT_DOUBLE_BIT_ECC 0x2ULL

typedef struct {
  int used;
  long consumed;            /* lines of the events file this set has passed */
  unsigned long long types; /* registered event types */
} EventSet;

static FakeDevice devices[64];
static int device_count;
static EventSet event_sets[MAX_EVENT_SETS];

void FakeNvmlMigLoad(void);        /* fake_nvml_mig.c: reads the MIG state file */
int FakeNvmlLost(const char* pci); /* fake_nvml_faults.c: lost=1 in the fault state */

/* The process's high-water mark of delivered lines of one events file, in its environment
 * (which outlives the library's unloading); the variable names the PID and the file, so child
 * processes and other files start afresh. */
static void DeliveredName(char* name, size_t size) {
  const char* path = getenv("TESSERA_FAKE_NVML_EVENTS");
  unsigned int h = 2166136261u;
  for (const char* c = path ? path : ""; *c; ++c)
    h = (h ^ (unsigned char)*c) * 16777619u;
  snprintf(name, size, "TESSERA_FAKE_NVML_EVENTS_DELIVERED_%ld_%08x", (long)getpid(), h);
}
static long DeliveredSoFar(void) {
  char name[80];
  DeliveredName(name, sizeof name);
  const char* value = getenv(name);
  return value ? strtol(value, NULL, 10) : 0;
}
/* Made when a set is, so later changes only replace its value: adding a variable may move the
 * environment, under other threads' getenv. */
static void NoteDelivered(long lines, int always) {
  const long so_far = DeliveredSoFar();
  if (!always && lines <= so_far) return;
  char name[80], value[32];
  DeliveredName(name, sizeof name);
  snprintf(value, sizeof value, "%ld", lines > so_far ? lines : so_far);
  setenv(name, value, 1);
}

static int init_count; /* nvmlInit_v2 calls not yet balanced by nvmlShutdown */

static void HolderPath(char* path, size_t size) {
  const char* holders = getenv("TESSERA_FAKE_NVML_HOLDERS");
  if (holders)
    snprintf(path, size, "%s/%ld", holders, (long)getpid());
  else
    path[0] = 0;
}

int nvmlInit_v2(void) {
  const char* inits = getenv("TESSERA_FAKE_NVML_INITS");
  FILE* f = inits ? fopen(inits, "ae") : NULL;
  if (f) {
    fprintf(f, "nvmlInit_v2 pid=%ld\n", (long)getpid());
    fclose(f);
  }
  char holder[4096];
  HolderPath(holder, sizeof holder);
  if (init_count++ == 0 && holder[0] && (f = fopen(holder, "we")) != NULL) fclose(f);
  FakeNvmlMigLoad();
  return 0;
}
int nvmlShutdown(void) {
  if (init_count == 0) return 1; /* NVML_ERROR_UNINITIALIZED */
  char holder[4096];
  HolderPath(holder, sizeof holder);
  if (--init_count == 0 && holder[0]) unlink(holder);
  return 0;
}
int nvmlEventSetCreate(void** set) {
  for (int i = 0; i < MAX_EVENT_SETS; ++i) {
    if (event_sets[i].used) continue;
    event_sets[i].used = 1;
    event_sets[i].consumed = DeliveredSoFar();
    NoteDelivered(event_sets[i].consumed, 1);
    event_sets[i].types = 0;
    *set = &event_sets[i];
    return 0;
  }
  return 23; /* NVML_ERROR_INSUFFICIENT_RESOURCES */
}
static EventSet* AsEventSet(void* set) {
  EventSet* s = (EventSet*)set;
  return s >= event_sets && s < event_sets + MAX_EVENT_SETS && s->used ? s : NULL;
}
int nvmlEventSetFree(void* set) {
  EventSet* s = AsEventSet(set);
  if (!s) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  s->used = 0;
  return 0;
}
int nvmlDeviceRegisterEvents(void* device, unsigned long long types, void* set) {
  EventSet* s = AsEventSet(set);
  if (!s || !device) return 2;
  if (FakeNvmlLost((const char*)device)) return 15;          /* NVML_ERROR_GPU_IS_LOST */
  if (types & ~(EVENT_XID | EVENT_DOUBLE_BIT_ECC)) return 3; /* NVML_ERROR_NOT_SUPPORTED */
  s->types |= types;
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
  if (FakeNvmlLost(pci)) return 15; /* NVML_ERROR_GPU_IS_LOST */
  *device = Find(pci);
  return *device ? 0 : 6; /* NVML_ERROR_NOT_FOUND */
}

int nvmlDeviceGetPciInfo_v3(void* device, PciInfo* info) {
  if (FakeNvmlLost((const char*)device)) return 15;
  memset(info, 0, sizeof *info);
  /* NVML spells the domain with 8 digits, upper case. */
  snprintf(info->bus_id, sizeof info->bus_id, "0000%s", ((FakeDevice*)device)->pci);
  for (char* p = info->bus_id; *p; ++p)
    if (*p >= 'a' && *p <= 'f') *p -= 32;
  return 0;
}

/* One line of the events file as an event (1), or 0 for a line of another shape. */
static int ParseEvent(const char* line, EventData* data) {
  char pci[64], what[32];
  if (sscanf(line, "%63s %31s", pci, what) != 2) return 0;
  memset(data, 0, sizeof *data);
  data->device = Find(pci);
  data->gpu_instance_id = 0xFFFFFFFFu;
  data->compute_instance_id = 0xFFFFFFFFu;
  if (strcmp(what, "ecc") == 0) {
    data->event_type = EVENT_DOUBLE_BIT_ECC;
    return data->device != NULL;
  }
  char* end = NULL;
  data->event_type = EVENT_XID;
  data->event_data = strtoull(what, &end, 10);
  if (!end || *end) return 0;
  const char* gi = strstr(line, " gi=");
  const char* ci = strstr(line, " ci=");
  if (gi) data->gpu_instance_id = (unsigned int)strtoul(gi + 4, NULL, 10);
  if (ci) data->compute_instance_id = (unsigned int)strtoul(ci + 4, NULL, 10);
  return data->device != NULL;
}

/* The set's next event of a registered type (1), passing over the others. */
static int NextEvent(EventSet* s, const char* path, EventData* data) {
  FILE* f = path ? fopen(path, "re") : NULL;
  if (!f) return 0;
  char text[512];
  long line = 0;
  int found = 0;
  while (!found && fgets(text, sizeof text, f)) {
    if (!strchr(text, '\n')) break; /* a line still being written */
    if (line++ < s->consumed) continue;
    s->consumed = line;
    EventData event;
    if (ParseEvent(text, &event) && (event.event_type & s->types)) {
      *data = event;
      found = 1;
    }
  }
  fclose(f);
  NoteDelivered(s->consumed, 0);
  return found;
}

int nvmlEventSetWait_v2(void* set, EventData* data, unsigned int timeout_ms) {
  EventSet* s = AsEventSet(set);
  if (!s || !data) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  const char* path = getenv("TESSERA_FAKE_NVML_EVENTS");
  for (unsigned int waited = 0; waited <= timeout_ms; waited += 20) {
    if (NextEvent(s, path, data)) return 0;
    if (waited + 20 > timeout_ms) break; /* a timeout of 0 looks once, without sleeping */
    usleep(20000);
  }
  return 10; /* NVML_ERROR_TIMEOUT */
}
