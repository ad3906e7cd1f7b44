/* The telemetry half of the stand-in libnvidia-ml.so.1: per-GPU figures (utilisation, memory,
 * power, total energy, temperature), per-process memory (compute and MPS lists, on the GPU and
 * on its MIG device handles), per-process utilisation samples with timestamps, accounting, GPM
 * and injected errors, with NVML's types, constants and error codes. Built into the same library
 * as fake_nvml.c and fake_nvml_mig.c.
 *
 * A test drives it with a scenario file named by TESSERA_FAKE_NVML_SCENARIO, which it may
 * rewrite while the library is in use (atomically: write a temporary file, rename it); the file
 * is read again whenever it changed. One line per fact:
 *   device <pci> [util=<%>] [mem_util=<%>] [memory_used=<B>] [memory_total=<B>] [power_mw=<mW>]
 *          [energy_mj=<mJ>] [energy_rate_mw=<mW> energy_from_us=<us>] [temp=<C>] [lost=1]
 *          [gpm=1] [accounting=1] [name=<NVML name, '_' for ' '>] [power_limit_mw=<mW>]
 *          [util_period_ms=<ms> util_from_us=<us>]
 *       util_period_ms: the driver's GPU utilisation samples (nvmlDeviceGetSamples), one every
 *       period from util_from_us (exclusive) up to now, the last 120 kept
 *   process <pci> pid=<pid> memory=<B|na> [gi=<g> ci=<c>] [mps=1] [late=1]
 *       late=1: left out of the sizing call (count 0), listed by the fill: the list grew
 *   busy <pci> pid=<pid> sm=<%> [mem=<%>] period_ms=<ms> from_us=<t0> [to_us=<t1>]
 *       a utilisation sample every period from t0 (exclusive) up to now or t1 (the driver
 *       keeps the last 120 of each line)
 *   sample <pci> pid=<pid> ts=<us> sm=<%> [mem=<%>]
 *   accounting <pci> pid=<pid> gpu=<%> max_memory=<B> time_ms=<ms> start_us=<us> running=<0|1>
 *   gpm <pci> [gi=<g>] sm=<%>              GPM SM utilisation of the GPU or of one GPU instance
 *   fail <function> <nvml error> [<pci>]   that function answers the error (for one GPU)
 * Energy counters: energy_mj + energy_rate_mw * (now - energy_from_us) / 1e6.
 *
 * What it served goes to the file named by TESSERA_FAKE_NVML_SERVED, when set:
 *   sample <pci> <pid> <timestamp us> <sm %>   each process utilisation sample handed out
 *   energy <pci> <mJ>                          each energy counter reading */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)

typedef struct {
  unsigned int gpu, memory;
} Utilization;
typedef struct {
  unsigned long long total, free, used;
} Memory;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
} ProcessInfo;
typedef struct {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil, memUtil, encUtil, decUtil;
} ProcessUtilizationSample;
typedef struct {
  unsigned int gpuUtilization, memoryUtilization;
  unsigned long long maxMemoryUsage, time, startTime;
  unsigned int isRunning;
  unsigned int reserved[5];
} AccountingStats;
typedef struct {
  unsigned int version, isSupportedDevice;
} GpmSupport;
typedef struct {
  unsigned int metricId;
  int nvmlReturn;
  double value;
  struct {
    char *shortName, *longName, *unit;
  } metricInfo;
} GpmMetric;
typedef struct {
  unsigned int version, numMetrics;
  void* sample1;
  void* sample2;
  GpmMetric metrics[98];
} GpmMetricsGet;

/* fake_nvml_mig.c: whether a handle is a MIG device handle, and its GPU and instance IDs. */
int FakeNvmlMigHandle(void* handle, const char** pci, unsigned int* gi, unsigned int* ci);

#define MAX_LINES 4096
#define MAX_SAMPLES_PER_LINE 120

typedef struct {
  char kind[16];
  char pci[24];
  char function[80];
  int code;
  unsigned int pid, gi, ci, sm, mem;
  int has_gi, mps, late, lost, gpm, accounting, running;
  unsigned long long memory, period_us, from_us, to_us, ts, time_ms, start_us;
  int memory_na;
  /* device figures */
  long long util, mem_util, power_mw, temp, power_limit_mw;
  char name[96];
  unsigned long long util_period_us, util_from_us;
  unsigned long long memory_used, memory_total, energy_mj, energy_rate_mw, energy_from_us;
  int has_memory;
} Line;

static Line lines[MAX_LINES];
static int line_count;
static struct stat loaded_stat;
static int scenario_loaded;

static unsigned long long NowUs(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (unsigned long long)tv.tv_sec * 1000000ULL + (unsigned long long)tv.tv_usec;
}

/* fake_nvml_faults.c: lost=1 in the fault state. */
int FakeNvmlLost(const char* pci);

/* fake_nvml_mig.c: the value of " key=" in a line. */
const char* FakeNvmlValue(const char* line, const char* key, char* out, size_t size);

static unsigned long long U64(const char* line, const char* key, unsigned long long fallback) {
  char buffer[40];
  return FakeNvmlValue(line, key, buffer, sizeof buffer) ? strtoull(buffer, NULL, 10) : fallback;
}
static long long I64(const char* line, const char* key, long long fallback) {
  char buffer[40];
  return FakeNvmlValue(line, key, buffer, sizeof buffer) ? strtoll(buffer, NULL, 10) : fallback;
}

static void Load(void) {
  const char* path = getenv("TESSERA_FAKE_NVML_SCENARIO");
  struct stat st;
  if (!path || stat(path, &st) != 0) {
    line_count = 0;
    scenario_loaded = 0;
    return;
  }
  if (scenario_loaded && st.st_ino == loaded_stat.st_ino && st.st_size == loaded_stat.st_size &&
      st.st_mtim.tv_sec == loaded_stat.st_mtim.tv_sec &&
      st.st_mtim.tv_nsec == loaded_stat.st_mtim.tv_nsec)
    return;
  FILE* f = fopen(path, "re");
  if (!f) return;
  line_count = 0;
  char text[512];
  while (line_count < MAX_LINES && fgets(text, sizeof text, f)) {
    Line* l = &lines[line_count];
    memset(l, 0, sizeof *l);
    char pci[64] = "";
    if (sscanf(text, "%15s %63s", l->kind, pci) < 1) continue;
    if (strcmp(l->kind, "fail") == 0) {
      char where[64] = "";
      if (sscanf(text, "%*s %79s %d %63s", l->function, &l->code, where) < 2) continue;
      snprintf(l->pci, sizeof l->pci, "%s", where);
      ++line_count;
      continue;
    }
    snprintf(l->pci, sizeof l->pci, "%s", pci);
    l->pid = (unsigned int)U64(text, "pid", 0);
    l->has_gi = strstr(text, " gi=") != NULL;
    l->gi = (unsigned int)U64(text, "gi", 0);
    l->ci = (unsigned int)U64(text, "ci", 0);
    l->sm = (unsigned int)U64(text, "sm", 0);
    l->mem = (unsigned int)U64(text, "mem", 0);
    l->mps = (int)U64(text, "mps", 0);
    l->late = (int)U64(text, "late", 0);
    l->lost = (int)U64(text, "lost", 0);
    l->gpm = (int)U64(text, "gpm", 0);
    l->accounting = (int)U64(text, "accounting", 0);
    char memory[40];
    l->memory_na =
        FakeNvmlValue(text, "memory", memory, sizeof memory) && strcmp(memory, "na") == 0;
    l->memory = U64(text, "memory", 0);
    l->period_us = U64(text, "period_ms", 1000) * 1000ULL;
    l->from_us = U64(text, "from_us", 0);
    l->to_us = U64(text, "to_us", 0);
    l->ts = U64(text, "ts", 0);
    l->time_ms = U64(text, "time_ms", 0);
    l->start_us = U64(text, "start_us", 0);
    l->running = (int)U64(text, "running", 0);
    l->util = I64(text, "util", -1);
    l->mem_util = I64(text, "mem_util", -1);
    l->power_mw = I64(text, "power_mw", -1);
    l->temp = I64(text, "temp", -1);
    l->power_limit_mw = I64(text, "power_limit_mw", -1);
    if (FakeNvmlValue(text, "name", l->name, sizeof l->name))
      for (char* c = l->name; *c; ++c)
        if (*c == '_') *c = ' ';
    l->util_period_us = U64(text, "util_period_ms", 0) * 1000ULL;
    l->util_from_us = U64(text, "util_from_us", 0);
    l->has_memory = strstr(text, " memory_total=") != NULL;
    l->memory_used = U64(text, "memory_used", 0);
    l->memory_total = U64(text, "memory_total", 0);
    l->energy_mj = U64(text, "energy_mj", NVML_VALUE_NOT_AVAILABLE);
    l->energy_rate_mw = U64(text, "energy_rate_mw", 0);
    l->energy_from_us = U64(text, "energy_from_us", 0);
    if (strcmp(l->kind, "accounting") == 0) {
      l->sm = (unsigned int)U64(text, "gpu", 0);
      l->memory = U64(text, "max_memory", 0);
    }
    ++line_count;
  }
  fclose(f);
  loaded_stat = st;
  scenario_loaded = 1;
}

static void Served(const char* format_line) {
  const char* path = getenv("TESSERA_FAKE_NVML_SERVED");
  FILE* f = path ? fopen(path, "ae") : NULL;
  if (!f) return;
  fputs(format_line, f);
  fclose(f);
}

/* The GPU a handle belongs to, and the MIG instance when it is a MIG device handle. */
typedef struct {
  const char* pci;
  int mig;
  unsigned int gi, ci;
} Target;

static Target TargetOf(void* device) {
  Target t = {NULL, 0, 0, 0};
  if (!device) return t;
  if (FakeNvmlMigHandle(device, &t.pci, &t.gi, &t.ci)) {
    t.mig = 1;
    return t;
  }
  t.pci = (const char*)device; /* fake_nvml.c: a GPU handle starts with its PCI address */
  return t;
}

static const Line* DeviceLine(const char* pci) {
  for (int i = 0; i < line_count; ++i)
    if (strcmp(lines[i].kind, "device") == 0 && strcmp(lines[i].pci, pci) == 0) return &lines[i];
  return NULL;
}

/* An injected error for `function` on this GPU, NVML_GPU_IS_LOST for a lost GPU, else 0. */
static int Injected(const char* function, const char* pci) {
  Load();
  for (int i = 0; i < line_count; ++i) {
    const Line* l = &lines[i];
    if (strcmp(l->kind, "fail") == 0 && strcmp(l->function, function) == 0 &&
        (l->pci[0] == 0 || (pci && strcmp(l->pci, pci) == 0)))
      return l->code;
  }
  const Line* device = pci ? DeviceLine(pci) : NULL;
  if (device && device->lost) return NVML_ERROR_GPU_IS_LOST;
  if (pci && FakeNvmlLost(pci)) return NVML_ERROR_GPU_IS_LOST; /* fake_nvml_faults.c */
  return NVML_SUCCESS;
}

/* Whether the scenario says anything about this GPU's processes (otherwise fake_nvml_mig.c's
 * process count from the MIG state answers). */
int FakeNvmlScenarioHasProcesses(const char* pci);
int FakeNvmlScenarioHasProcesses(const char* pci) {
  Load();
  for (int i = 0; i < line_count; ++i)
    if (strcmp(lines[i].kind, "process") == 0 && strcmp(lines[i].pci, pci) == 0) return 1;
  return 0;
}

static int ProcessMatches(const Line* l, Target t, int mps) {
  if (strcmp(l->kind, "process") != 0 || strcmp(l->pci, t.pci) != 0 || l->mps != mps) return 0;
  return !t.mig || (l->has_gi && l->gi == t.gi && l->ci == t.ci);
}

/* nvmlDeviceGetComputeRunningProcesses_v3 / the MPS variant over the scenario's processes. */
static int ListProcesses(void* device, unsigned int* count, ProcessInfo* infos, int mps,
                         const char* function) {
  Target t = TargetOf(device);
  if (!t.pci || !count) return NVML_ERROR_INVALID_ARGUMENT;
  int rc = Injected(function, t.pci);
  if (rc) return rc;
  const int sizing = *count == 0;
  unsigned int n = 0;
  for (int i = 0; i < line_count; ++i) {
    const Line* l = &lines[i];
    if (!ProcessMatches(l, t, mps) || (sizing && l->late)) continue;
    if (infos && n < *count) {
      infos[n].pid = l->pid;
      infos[n].usedGpuMemory = l->memory_na ? NVML_VALUE_NOT_AVAILABLE : l->memory;
      infos[n].gpuInstanceId = l->has_gi ? l->gi : 0xFFFFFFFFu;
      infos[n].computeInstanceId = l->has_gi ? l->ci : 0xFFFFFFFFu;
    }
    ++n;
  }
  const int fits = *count >= n;
  *count = n;
  return n == 0 || (fits && infos) ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}

int FakeNvmlScenarioProcesses(void* device, unsigned int* count, void* infos);
int FakeNvmlScenarioProcesses(void* device, unsigned int* count, void* infos) {
  return ListProcesses(device, count, (ProcessInfo*)infos, 0,
                       "nvmlDeviceGetComputeRunningProcesses_v3");
}

int nvmlDeviceGetMPSComputeRunningProcesses_v3(void* device, unsigned int* count,
                                               ProcessInfo* infos) {
  return ListProcesses(device, count, infos, 1, "nvmlDeviceGetMPSComputeRunningProcesses_v3");
}

/* Memory of a GPU handle from its device line, or of a MIG device from its processes
 * (`total` is filled in by fake_nvml_mig.c from the profile). */
int FakeNvmlScenarioMemory(void* device, Memory* memory);
int FakeNvmlScenarioMemory(void* device, Memory* memory) {
  Target t = TargetOf(device);
  if (!t.pci) return NVML_ERROR_INVALID_ARGUMENT;
  int rc = Injected("nvmlDeviceGetMemoryInfo", t.pci);
  if (rc) return rc;
  if (t.mig) {
    unsigned long long used = 0;
    for (int i = 0; i < line_count; ++i) {
      const Line* l = &lines[i];
      if ((ProcessMatches(l, t, 0) || ProcessMatches(l, t, 1)) && !l->memory_na) used += l->memory;
    }
    memory->used = used;
    memory->free = memory->total > used ? memory->total - used : 0;
    return NVML_SUCCESS;
  }
  const Line* d = DeviceLine(t.pci);
  if (!d || !d->has_memory) return NVML_ERROR_NOT_SUPPORTED;
  memory->total = d->memory_total;
  memory->used = d->memory_used;
  memory->free = d->memory_total > d->memory_used ? d->memory_total - d->memory_used : 0;
  return NVML_SUCCESS;
}

/* A figure of a GPU's device line, or NOT_SUPPORTED when the line does not give it. */
static int DeviceFigure(void* device, const char* function, const Line** out) {
  Target t = TargetOf(device);
  if (!t.pci) return NVML_ERROR_INVALID_ARGUMENT;
  int rc = Injected(function, t.pci);
  if (rc) return rc;
  if (t.mig) return NVML_ERROR_NOT_SUPPORTED; /* no such figure per MIG device */
  *out = DeviceLine(t.pci);
  return *out ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

int nvmlDeviceGetUtilizationRates(void* device, Utilization* utilization) {
  const Line* d = NULL;
  int rc = DeviceFigure(device, "nvmlDeviceGetUtilizationRates", &d);
  if (rc) return rc;
  if (d->util < 0) return NVML_ERROR_NOT_SUPPORTED;
  utilization->gpu = (unsigned int)d->util;
  utilization->memory = d->mem_util < 0 ? 0 : (unsigned int)d->mem_util;
  return NVML_SUCCESS;
}

int nvmlDeviceGetPowerUsage(void* device, unsigned int* milliwatts) {
  const Line* d = NULL;
  int rc = DeviceFigure(device, "nvmlDeviceGetPowerUsage", &d);
  if (rc) return rc;
  if (d->power_mw < 0) return NVML_ERROR_NOT_SUPPORTED;
  *milliwatts = (unsigned int)d->power_mw;
  return NVML_SUCCESS;
}

int nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  const Line* d = NULL;
  if (!name || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
  int rc = DeviceFigure(device, "nvmlDeviceGetName", &d);
  if (rc) return rc;
  if (!d->name[0]) return NVML_ERROR_NOT_SUPPORTED;
  if (strlen(d->name) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  snprintf(name, length, "%s", d->name);
  return NVML_SUCCESS;
}

int nvmlDeviceGetEnforcedPowerLimit(void* device, unsigned int* milliwatts) {
  const Line* d = NULL;
  int rc = DeviceFigure(device, "nvmlDeviceGetEnforcedPowerLimit", &d);
  if (rc) return rc;
  if (d->power_limit_mw < 0) return NVML_ERROR_NOT_SUPPORTED;
  *milliwatts = (unsigned int)d->power_limit_mw;
  return NVML_SUCCESS;
}

typedef struct {
  unsigned long long timeStamp;
  unsigned long long value; /* nvmlValue_t */
} NvmlSample;

/* nvmlDeviceGetSamples: the GPU utilisation samples of a device line with util_period_ms. */
int nvmlDeviceGetSamples(void* device, unsigned int type, unsigned long long last_seen,
                         unsigned int* value_type, unsigned int* count, NvmlSample* samples) {
  const Line* d = NULL;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  int rc = DeviceFigure(device, "nvmlDeviceGetSamples", &d);
  if (rc) return rc;
  if (type != 1 || d->util_period_us == 0) return NVML_ERROR_NOT_SUPPORTED;
  unsigned long long now = NowUs();
  if (now <= d->util_from_us) return NVML_ERROR_NOT_FOUND;
  unsigned long long last_k = (now - d->util_from_us) / d->util_period_us;
  unsigned long long first_k =
      last_k > MAX_SAMPLES_PER_LINE ? last_k - MAX_SAMPLES_PER_LINE + 1 : 1;
  unsigned int n = 0;
  for (unsigned long long k = first_k; k <= last_k; ++k) {
    unsigned long long ts = d->util_from_us + k * d->util_period_us;
    if (ts <= last_seen) continue;
    if (samples && n < *count) {
      samples[n].timeStamp = ts;
      samples[n].value = d->util < 0 ? 0 : (unsigned long long)d->util;
    }
    ++n;
  }
  if (n == 0) return NVML_ERROR_NOT_FOUND;
  if (value_type) *value_type = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
  const int fits = *count >= n;
  if (!samples || !fits) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  *count = n;
  return NVML_SUCCESS;
}

int nvmlDeviceGetTemperature(void* device, unsigned int sensor, unsigned int* celsius) {
  const Line* d = NULL;
  if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
  int rc = DeviceFigure(device, "nvmlDeviceGetTemperature", &d);
  if (rc) return rc;
  if (d->temp < 0) return NVML_ERROR_NOT_SUPPORTED;
  *celsius = (unsigned int)d->temp;
  return NVML_SUCCESS;
}

int nvmlDeviceGetTotalEnergyConsumption(void* device, unsigned long long* millijoules) {
  const Line* d = NULL;
  int rc = DeviceFigure(device, "nvmlDeviceGetTotalEnergyConsumption", &d);
  if (rc) return rc;
  if (d->energy_mj == NVML_VALUE_NOT_AVAILABLE) return NVML_ERROR_NOT_SUPPORTED;
  unsigned long long value = d->energy_mj;
  unsigned long long now = NowUs();
  if (d->energy_rate_mw && now > d->energy_from_us)
    value += d->energy_rate_mw * (now - d->energy_from_us) / 1000000ULL;
  *millijoules = value;
  char served[96];
  snprintf(served, sizeof served, "energy %s %llu\n", d->pci, value);
  Served(served);
  return NVML_SUCCESS;
}

/* ---- process utilisation samples ---- */

typedef struct {
  unsigned int pid;
  unsigned long long ts;
  unsigned int sm, mem;
} Sample;

/* Every sample of this GPU newer than last_seen, into out (at most max; the count either way). */
static unsigned int Samples(const char* pci, unsigned long long last_seen, Sample* out,
                            unsigned int max) {
  unsigned long long now = NowUs();
  unsigned int n = 0;
  for (int i = 0; i < line_count; ++i) {
    const Line* l = &lines[i];
    if (strcmp(l->pci, pci) != 0) continue;
    if (strcmp(l->kind, "sample") == 0) {
      if (l->ts > last_seen && l->ts <= now) {
        if (n < max) out[n] = (Sample){l->pid, l->ts, l->sm, l->mem};
        ++n;
      }
    } else if (strcmp(l->kind, "busy") == 0 && l->period_us > 0) {
      unsigned long long end = l->to_us && l->to_us < now ? l->to_us : now;
      if (end <= l->from_us) continue;
      unsigned long long last_k = (end - l->from_us) / l->period_us;
      unsigned long long first_k =
          last_k > MAX_SAMPLES_PER_LINE ? last_k - MAX_SAMPLES_PER_LINE + 1 : 1;
      for (unsigned long long k = first_k; k <= last_k; ++k) {
        unsigned long long ts = l->from_us + k * l->period_us;
        if (ts <= last_seen) continue;
        if (n < max) out[n] = (Sample){l->pid, ts, l->sm, l->mem};
        ++n;
      }
    }
  }
  return n;
}

int nvmlDeviceGetProcessUtilization(void* device, ProcessUtilizationSample* utilization,
                                    unsigned int* count, unsigned long long last_seen) {
  Target t = TargetOf(device);
  if (!t.pci || !count) return NVML_ERROR_INVALID_ARGUMENT;
  int rc = Injected("nvmlDeviceGetProcessUtilization", t.pci);
  if (rc) return rc;
  if (t.mig) return NVML_ERROR_NOT_SUPPORTED; /* per-process utilisation is not kept per slice */
  static Sample buffer[MAX_LINES];
  unsigned int n = Samples(t.pci, last_seen, buffer, MAX_LINES);
  if (n == 0) return NVML_ERROR_NOT_FOUND;
  if (!utilization || *count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned int i = 0; i < n && i < MAX_LINES; ++i) {
    memset(&utilization[i], 0, sizeof utilization[i]);
    utilization[i].pid = buffer[i].pid;
    utilization[i].timeStamp = buffer[i].ts;
    utilization[i].smUtil = buffer[i].sm;
    utilization[i].memUtil = buffer[i].mem;
    char served[128];
    snprintf(served, sizeof served, "sample %s %u %llu %u\n", t.pci, buffer[i].pid, buffer[i].ts,
             buffer[i].sm);
    Served(served);
  }
  *count = n;
  return NVML_SUCCESS;
}

/* ---- accounting ---- */

int nvmlDeviceGetAccountingMode(void* device, unsigned int* mode) {
  const Line* d = NULL;
  int rc = DeviceFigure(device, "nvmlDeviceGetAccountingMode", &d);
  if (rc) return rc;
  *mode = d->accounting ? 1 : 0;
  return NVML_SUCCESS;
}

int nvmlDeviceGetAccountingPids(void* device, unsigned int* count, unsigned int* pids) {
  const Line* d = NULL;
  int rc = DeviceFigure(device, "nvmlDeviceGetAccountingPids", &d);
  if (rc) return rc;
  if (!d->accounting) return NVML_ERROR_NOT_SUPPORTED;
  unsigned int n = 0;
  for (int i = 0; i < line_count; ++i) {
    const Line* l = &lines[i];
    if (strcmp(l->kind, "accounting") != 0 || strcmp(l->pci, d->pci) != 0) continue;
    if (pids && n < *count) pids[n] = l->pid;
    ++n;
  }
  const int fits = *count >= n;
  *count = n;
  return n == 0 || (fits && pids) ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}

int nvmlDeviceGetAccountingStats(void* device, unsigned int pid, AccountingStats* stats) {
  const Line* d = NULL;
  int rc = DeviceFigure(device, "nvmlDeviceGetAccountingStats", &d);
  if (rc) return rc;
  for (int i = 0; i < line_count; ++i) {
    const Line* l = &lines[i];
    if (strcmp(l->kind, "accounting") != 0 || strcmp(l->pci, d->pci) != 0 || l->pid != pid)
      continue;
    memset(stats, 0, sizeof *stats);
    stats->gpuUtilization = l->sm;
    stats->memoryUtilization = l->mem;
    stats->maxMemoryUsage = l->memory;
    stats->time = l->running ? 0 : l->time_ms;
    stats->startTime = l->start_us;
    stats->isRunning = (unsigned int)l->running;
    return NVML_SUCCESS;
  }
  return NVML_ERROR_NOT_FOUND;
}

/* ---- GPM ---- */

typedef struct {
  char pci[24];
  int gi; /* -1: the whole GPU */
  int taken;
} GpmSampleRecord;

int nvmlGpmQueryDeviceSupport(void* device, GpmSupport* support) {
  Target t = TargetOf(device);
  if (!t.pci || !support || support->version != 1) return NVML_ERROR_INVALID_ARGUMENT;
  int rc = Injected("nvmlGpmQueryDeviceSupport", t.pci);
  if (rc) return rc;
  const Line* d = DeviceLine(t.pci);
  support->isSupportedDevice = d && d->gpm ? 1 : 0;
  return NVML_SUCCESS;
}

int nvmlGpmSampleAlloc(void** sample) {
  GpmSampleRecord* record = calloc(1, sizeof *record);
  if (!record) return NVML_ERROR_INSUFFICIENT_SIZE;
  record->gi = -1;
  *sample = record;
  return NVML_SUCCESS;
}

int nvmlGpmSampleFree(void* sample) {
  free(sample);
  return NVML_SUCCESS;
}

static int TakeGpm(void* device, int gi, void* sample, const char* function) {
  Target t = TargetOf(device);
  if (!t.pci || !sample) return NVML_ERROR_INVALID_ARGUMENT;
  int rc = Injected(function, t.pci);
  if (rc) return rc;
  const Line* d = DeviceLine(t.pci);
  if (!d || !d->gpm) return NVML_ERROR_NOT_SUPPORTED;
  GpmSampleRecord* record = sample;
  snprintf(record->pci, sizeof record->pci, "%s", t.pci);
  record->gi = gi;
  record->taken = 1;
  return NVML_SUCCESS;
}

int nvmlGpmSampleGet(void* device, void* sample) {
  return TakeGpm(device, -1, sample, "nvmlGpmSampleGet");
}

int nvmlGpmMigSampleGet(void* device, unsigned int gpu_instance_id, void* sample) {
  return TakeGpm(device, (int)gpu_instance_id, sample, "nvmlGpmMigSampleGet");
}

int nvmlGpmMetricsGet(GpmMetricsGet* get) {
  if (!get || get->version != 1 || get->numMetrics > 98) return NVML_ERROR_INVALID_ARGUMENT;
  const GpmSampleRecord* a = get->sample1;
  const GpmSampleRecord* b = get->sample2;
  if (!a || !b || !a->taken || !b->taken || strcmp(a->pci, b->pci) != 0 || a->gi != b->gi)
    return NVML_ERROR_INVALID_ARGUMENT;
  int rc = Injected("nvmlGpmMetricsGet", a->pci);
  if (rc) return rc;
  for (unsigned int m = 0; m < get->numMetrics; ++m) {
    GpmMetric* metric = &get->metrics[m];
    metric->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    metric->value = 0;
    if (metric->metricId != 2) continue; /* NVML_GPM_METRIC_SM_UTIL */
    for (int i = 0; i < line_count; ++i) {
      const Line* l = &lines[i];
      if (strcmp(l->kind, "gpm") != 0 || strcmp(l->pci, a->pci) != 0) continue;
      if ((a->gi < 0) != !l->has_gi || (l->has_gi && (int)l->gi != a->gi)) continue;
      metric->nvmlReturn = NVML_SUCCESS;
      metric->value = (double)l->sm;
    }
  }
  return NVML_SUCCESS;
}
