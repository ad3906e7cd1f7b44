/* The MIG half of the stand-in libnvidia-ml.so.1: MIG mode, GPU/compute instance profiles,
 * instances, MIG device handles and the calls that create and destroy instances, with NVML's
 * types, constants and error codes. Built into the same library as fake_nvml.c.
 *
 * State lives in the file named by TESSERA_FAKE_NVML_STATE, read at nvmlInit_v2 and written
 * back after every change, one line per fact:
 *   gpu <pci> board=<h100-80gb|a100-40gb> uuid=<GPU-…> mig=<0|1> pending=<0|1> processes=<n>
 *       [activation=<nvml error>]      (SetMigMode records pending but answers this status)
 *       [memory_mb=<MiB>]              (the whole GPU's memory; default: the board's)
 *       [module=<n>]                   (nvmlDeviceGetModuleId; absent: not supported)
 *       [minor=<n>]                    (its /dev/nvidia<n>; default: its place among the gpu lines)
 *   gi <pci> id=<g> profile=<profile ID> start=<memory slice>
 *   ci <pci> gi=<g> id=<c> slices=<compute slices> uuid=<MIG-…> [processes=<n>]
 *       (processes: what runs on that MIG device; destroying it answers NVML_ERROR_IN_USE)
 *   fail <nvml function> <nvml error>  (that function answers the error)
 * Each state-changing call is appended to TESSERA_FAKE_NVML_LOG as
 * "<function> <pci> <arguments> -> <status>", so tests can read back what changed.
 *
 * As the driver does, creating and destroying instances adds and removes their capability files
 * under <TESSERA_FAKE_NVML_ROOT>/proc/driver/nvidia/capabilities/gpu<minor>/mig (gi<g>/access,
 * gi<g>/ci<c>/access, "DeviceFileMinor: <n>" by the driver's numbering) when that variable names
 * a fixture host's root. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_IN_USE 19
#define NVML_ERROR_INSUFFICIENT_RESOURCES 23

typedef struct {
  unsigned int version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
      copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
  unsigned long long memorySizeMB;
  char name[96];
} ProfileInfoV2;
typedef struct {
  unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
      decoderCount, encoderCount, jpegCount, ofaCount;
  unsigned long long memorySizeMB;
} ProfileInfo;
typedef struct {
  unsigned int start, size;
} Placement;
typedef struct {
  void* device;
  unsigned int id, profileId;
  Placement placement;
} GpuInstanceInfo;
typedef struct {
  unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
      sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} CiProfileInfo;
typedef struct {
  void* device;
  void* gpuInstance;
  unsigned int id, profileId;
  Placement placement;
} CiInfo;
typedef struct {
  unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount,
      sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
  unsigned long long memorySizeMB;
} Attributes;
typedef struct {
  unsigned long long total, free, used;
} Memory;

/* A board's GPU instance profiles, by NVML profile index (facts from NVIDIA's MIG user guide). */
typedef struct {
  int index;
  unsigned int id, compute_slices, count, sms, memory_mb, memory_slices;
  const char* name;
  unsigned int starts[8];
  int start_count;
} Profile;

static const Profile kH100[] = {
    {0, 19, 1, 7, 16, 9856, 1, "1g.10gb", {0, 1, 2, 3, 4, 5, 6}, 7},
    {1, 14, 2, 3, 32, 19968, 2, "2g.20gb", {0, 2, 4}, 3},
    {2, 9, 3, 2, 60, 40192, 4, "3g.40gb", {0, 4}, 2},
    {3, 5, 4, 1, 64, 40192, 4, "4g.40gb", {0}, 1},
    {4, 0, 7, 1, 132, 80384, 8, "7g.80gb", {0}, 1},
    {7, 20, 1, 1, 16, 9856, 1, "1g.10gb+me", {0, 1, 2, 3, 4, 5, 6}, 7},
    {9, 15, 1, 4, 26, 19968, 2, "1g.20gb", {0, 2, 4, 6}, 4},
};
static const Profile kA100[] = {
    {0, 19, 1, 7, 14, 4864, 1, "1g.5gb", {0, 1, 2, 3, 4, 5, 6}, 7},
    {1, 14, 2, 3, 28, 9856, 2, "2g.10gb", {0, 2, 4}, 3},
    {2, 9, 3, 2, 42, 19968, 4, "3g.20gb", {0, 4}, 2},
    {3, 5, 4, 1, 56, 19968, 4, "4g.20gb", {0}, 1},
    {4, 0, 7, 1, 98, 40192, 8, "7g.40gb", {0}, 1},
    {7, 20, 1, 1, 14, 4864, 1, "1g.5gb+me", {0, 1, 2, 3, 4, 5, 6}, 7},
    {9, 15, 1, 4, 14, 9856, 2, "1g.10gb", {0, 2, 4, 6}, 4},
};
/* Compute-instance profile index -> compute slices (1_SLICE, 2, 3, 4, 7). */
static const unsigned int kCiSlices[] = {1, 2, 3, 4, 7};

#define MAX_GPUS 16
#define MAX_GIS 64
#define MAX_CIS 128
#define MAX_FAILS 16

typedef struct {
  char pci[24];
  char board[24];
  char uuid[96];
  int mig, pending, processes, activation, module, used, minor;
  unsigned int memory_mb;
} Gpu;
typedef struct {
  int used, gpu;
  unsigned int id, profile_id, start;
} Gi;
typedef struct {
  int used, gpu;
  unsigned int gi, id, slices;
  char uuid[96];
  unsigned int processes;
} Ci;

static Gpu gpus[MAX_GPUS];
static Gi gis[MAX_GIS];
static Ci cis[MAX_CIS];
static struct {
  char function[80];
  int code;
} fails[MAX_FAILS];
static int fail_count;
static int loaded;

/* ---- state file ---- */

/* The value of " key=" in a state or scenario line (the telemetry half reads its lines with it). */
const char* FakeNvmlValue(const char* line, const char* key, char* out, size_t size);
const char* FakeNvmlValue(const char* line, const char* key, char* out, size_t size) {
  char pattern[32];
  snprintf(pattern, sizeof pattern, " %s=", key);
  const char* at = strstr(line, pattern);
  if (!at) return NULL;
  at += strlen(pattern);
  size_t n = strcspn(at, " \n");
  if (n >= size) n = size - 1;
  memcpy(out, at, n);
  out[n] = 0;
  return out;
}
static unsigned int Number(const char* line, const char* key, unsigned int fallback) {
  char buffer[32];
  return FakeNvmlValue(line, key, buffer, sizeof buffer) ? (unsigned int)strtoul(buffer, NULL, 10)
                                                         : fallback;
}
static int GpuIndex(const char* pci) {
  for (int i = 0; i < MAX_GPUS; ++i)
    if (gpus[i].used && strcmp(gpus[i].pci, pci) == 0) return i;
  return -1;
}

void FakeNvmlMigLoad(void);
void FakeNvmlMigLoad(void) {
  loaded = 1;
  memset(gpus, 0, sizeof gpus);
  memset(gis, 0, sizeof gis);
  memset(cis, 0, sizeof cis);
  fail_count = 0;
  const char* path = getenv("TESSERA_FAKE_NVML_STATE");
  FILE* f = path ? fopen(path, "re") : NULL;
  if (!f) return;
  char line[512], kind[16], pci[64];
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "%15s %63s", kind, pci) != 2) continue;
    if (strcmp(kind, "gpu") == 0) {
      for (int i = 0; i < MAX_GPUS; ++i) {
        if (gpus[i].used) continue;
        Gpu* g = &gpus[i];
        g->used = 1;
        snprintf(g->pci, sizeof g->pci, "%.*s", (int)sizeof g->pci - 1, pci);
        if (!FakeNvmlValue(line, "board", g->board, sizeof g->board)) strcpy(g->board, "h100-80gb");
        if (!FakeNvmlValue(line, "uuid", g->uuid, sizeof g->uuid))
          snprintf(g->uuid, sizeof g->uuid, "GPU-%s", pci);
        g->mig = (int)Number(line, "mig", 0);
        g->pending = (int)Number(line, "pending", (unsigned int)g->mig);
        g->processes = (int)Number(line, "processes", 0);
        g->activation = (int)Number(line, "activation", 0);
        g->memory_mb = Number(line, "memory_mb", 0);
        g->module = (int)Number(line, "module", 0);
        g->minor = (int)Number(line, "minor", (unsigned int)i);
        break;
      }
    } else if (strcmp(kind, "gi") == 0) {
      for (int i = 0; i < MAX_GIS; ++i) {
        if (gis[i].used) continue;
        gis[i] = (Gi){1, GpuIndex(pci), Number(line, "id", 0), Number(line, "profile", 0),
                      Number(line, "start", 0)};
        break;
      }
    } else if (strcmp(kind, "ci") == 0) {
      for (int i = 0; i < MAX_CIS; ++i) {
        if (cis[i].used) continue;
        cis[i] = (Ci){1,
                      GpuIndex(pci),
                      Number(line, "gi", 0),
                      Number(line, "id", 0),
                      Number(line, "slices", 1),
                      "",
                      Number(line, "processes", 0)};
        FakeNvmlValue(line, "uuid", cis[i].uuid, sizeof cis[i].uuid);
        break;
      }
    } else if (strcmp(kind, "fail") == 0 && fail_count < MAX_FAILS) {
      int code = 0;
      if (sscanf(line, "%*s %79s %d", fails[fail_count].function, &code) == 2) {
        fails[fail_count++].code = code;
      }
    }
  }
  fclose(f);
}

static void Save(void) {
  const char* path = getenv("TESSERA_FAKE_NVML_STATE");
  if (!path) return;
  char temp[4096];
  snprintf(temp, sizeof temp, "%s.tmp", path);
  FILE* f = fopen(temp, "we");
  if (!f) return;
  for (int i = 0; i < MAX_GPUS; ++i) {
    const Gpu* g = &gpus[i];
    if (!g->used) continue;
    fprintf(f, "gpu %s board=%s uuid=%s mig=%d pending=%d processes=%d", g->pci, g->board, g->uuid,
            g->mig, g->pending, g->processes);
    if (g->activation) fprintf(f, " activation=%d", g->activation);
    if (g->memory_mb) fprintf(f, " memory_mb=%u", g->memory_mb);
    if (g->module) fprintf(f, " module=%d", g->module);
    if (g->minor != i) fprintf(f, " minor=%d", g->minor);
    fprintf(f, "\n");
  }
  for (int i = 0; i < MAX_GIS; ++i)
    if (gis[i].used && gis[i].gpu >= 0)
      fprintf(f, "gi %s id=%u profile=%u start=%u\n", gpus[gis[i].gpu].pci, gis[i].id,
              gis[i].profile_id, gis[i].start);
  for (int i = 0; i < MAX_CIS; ++i) {
    if (!cis[i].used || cis[i].gpu < 0) continue;
    fprintf(f, "ci %s gi=%u id=%u slices=%u uuid=%s", gpus[cis[i].gpu].pci, cis[i].gi, cis[i].id,
            cis[i].slices, cis[i].uuid);
    if (cis[i].processes) fprintf(f, " processes=%u", cis[i].processes);
    fprintf(f, "\n");
  }
  for (int i = 0; i < fail_count; ++i)
    fprintf(f, "fail %s %d\n", fails[i].function, fails[i].code);
  fclose(f);
  rename(temp, path);
}

static void Log(const char* function, const char* pci, const char* arguments, int status) {
  const char* path = getenv("TESSERA_FAKE_NVML_LOG");
  FILE* f = path ? fopen(path, "ae") : NULL;
  if (!f) return;
  fprintf(f, "%s %s %s -> %d\n", function, pci, arguments, status);
  fclose(f);
}

/* The driver's capability file of a GPU instance (ci < 0) or compute instance: present with its
 * minor after a create, gone after a destroy. Minors: 3 for the global caps, then per GPU 15
 * GPU-instance slots of 9 (the instance's own, then 8 compute instances). */
static void CapabilityFile(int gpu, unsigned int gi, int ci, int present) {
  const char* root = getenv("TESSERA_FAKE_NVML_ROOT");
  if (!root || gpu < 0) return;
  char dir[4096], path[4200];
  int n = snprintf(dir, sizeof dir, "%s/proc/driver/nvidia/capabilities/gpu%d/mig/gi%u", root,
                   gpus[gpu].minor, gi);
  if (ci >= 0) snprintf(dir + n, sizeof dir - (size_t)n, "/ci%d", ci);
  snprintf(path, sizeof path, "%s/access", dir);
  if (!present) {
    unlink(path);
    rmdir(dir);
    return;
  }
  for (char* slash = strchr(dir + strlen(root) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
    *slash = 0;
    mkdir(dir, 0755);
    *slash = '/';
  }
  mkdir(dir, 0755);
  FILE* f = fopen(path, "we");
  if (!f) return;
  unsigned int minor =
      3u + (unsigned int)gpus[gpu].minor * 135u + gi * 9u + (ci >= 0 ? 1u + (unsigned int)ci : 0u);
  fprintf(f, "DeviceFileMinor: %u\nDeviceFileMode: 292\nDeviceFileModify: 1\n", minor);
  fclose(f);
}

static int Injected(const char* function) {
  if (!loaded) FakeNvmlMigLoad();
  for (int i = 0; i < fail_count; ++i)
    if (strcmp(fails[i].function, function) == 0) return fails[i].code;
  return NVML_SUCCESS;
}

/* fake_nvml_faults.c: lost=1 (the GPU fell off the bus) and processes= of the fault state. */
int FakeNvmlLost(const char* pci);
int FakeNvmlFaultProcesses(const char* pci);

/* ---- handles ---- */
/* A GPU handle is fake_nvml.c's device record, whose first member is its PCI address; GPU
 * instance, compute instance and MIG device handles point into the arrays above. */

static int GpuOf(void* device) {
  if (!loaded) FakeNvmlMigLoad();
  return device ? GpuIndex((const char*)device) : -1;
}
static Gi* AsGi(void* handle) {
  Gi* gi = (Gi*)handle;
  return gi >= gis && gi < gis + MAX_GIS && gi->used ? gi : NULL;
}
static Ci* AsCi(void* handle) {
  Ci* ci = (Ci*)handle;
  return ci >= cis && ci < cis + MAX_CIS && ci->used ? ci : NULL;
}
/* Injected(), or NVML_ERROR_GPU_IS_LOST for a handle of (or on) a GPU that fell off the bus. */
static int InjectedOn(const char* function, void* device) {
  int rc = Injected(function);
  if (rc || !device) return rc;
  Ci* ci = AsCi(device);
  const char* pci = ci ? (ci->gpu >= 0 ? gpus[ci->gpu].pci : NULL) : (const char*)device;
  return pci && FakeNvmlLost(pci) ? 15 : NVML_SUCCESS;
}

static const Profile* Profiles(int gpu, int* count) {
  if (strcmp(gpus[gpu].board, "a100-40gb") == 0) {
    *count = sizeof kA100 / sizeof kA100[0];
    return kA100;
  }
  *count = sizeof kH100 / sizeof kH100[0];
  return kH100;
}
static const Profile* ProfileById(int gpu, unsigned int id) {
  int count;
  const Profile* p = Profiles(gpu, &count);
  for (int i = 0; i < count; ++i)
    if (p[i].id == id) return &p[i];
  return NULL;
}
static Gi* FindGi(int gpu, unsigned int id) {
  for (int i = 0; i < MAX_GIS; ++i)
    if (gis[i].used && gis[i].gpu == gpu && gis[i].id == id) return &gis[i];
  return NULL;
}
/* MIG device handles enumerate compute instances in (GI, CI) order. */
static Ci* NthCi(int gpu, unsigned int n) {
  Ci* order[MAX_CIS];
  int count = 0;
  for (int i = 0; i < MAX_CIS; ++i)
    if (cis[i].used && cis[i].gpu == gpu) order[count++] = &cis[i];
  for (int i = 1; i < count; ++i)
    for (int j = i;
         j > 0 && (order[j - 1]->gi > order[j]->gi ||
                   (order[j - 1]->gi == order[j]->gi && order[j - 1]->id > order[j]->id));
         --j) {
      Ci* t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  return n < (unsigned int)count ? order[n] : NULL;
}

/* ---- queries ---- */

const char* nvmlErrorString(int result) {
  switch (result) {
    case 0:
      return "Success";
    case 2:
      return "Invalid Argument";
    case 3:
      return "Not Supported";
    case 6:
      return "Not Found";
    case 7:
      return "Insufficient Size";
    case 19:
      return "In use by another client";
    case 23:
      return "Insufficient Resources";
    default:
      return "Unknown Error";
  }
}

int nvmlDeviceGetModuleId(void* device, unsigned int* id) {
  int rc = InjectedOn("nvmlDeviceGetModuleId", device);
  if (rc) return rc;
  int gpu = GpuOf(device);
  if (gpu < 0 || gpus[gpu].module == 0) return NVML_ERROR_NOT_SUPPORTED;
  *id = (unsigned int)gpus[gpu].module;
  return NVML_SUCCESS;
}

int nvmlDeviceGetMigMode(void* device, unsigned int* current, unsigned int* pending) {
  int rc = InjectedOn("nvmlDeviceGetMigMode", device);
  if (rc) return rc;
  int gpu = GpuOf(device);
  if (gpu < 0) return NVML_ERROR_NOT_SUPPORTED;
  *current = (unsigned int)gpus[gpu].mig;
  *pending = (unsigned int)gpus[gpu].pending;
  return NVML_SUCCESS;
}

static int FillProfile(void* device, unsigned int index, ProfileInfo* info, const char** name) {
  int gpu = GpuOf(device);
  if (gpu < 0) return NVML_ERROR_NOT_SUPPORTED;
  int count;
  const Profile* p = Profiles(gpu, &count);
  for (int i = 0; i < count; ++i) {
    if (p[i].index != (int)index) continue;
    memset(info, 0, sizeof *info);
    info->id = p[i].id;
    info->sliceCount = p[i].compute_slices;
    info->instanceCount = p[i].count;
    info->multiprocessorCount = p[i].sms;
    info->memorySizeMB = p[i].memory_mb;
    *name = p[i].name;
    return NVML_SUCCESS;
  }
  return index < 10 ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

int nvmlDeviceGetGpuInstanceProfileInfo(void* device, unsigned int index, ProfileInfo* info) {
  int rc = InjectedOn("nvmlDeviceGetGpuInstanceProfileInfo", device);
  const char* name;
  return rc ? rc : FillProfile(device, index, info, &name);
}

int nvmlDeviceGetGpuInstanceProfileInfoV(void* device, unsigned int index, ProfileInfoV2* info) {
  int rc = InjectedOn("nvmlDeviceGetGpuInstanceProfileInfoV", device);
  if (rc) return rc;
  if (info->version != (sizeof(ProfileInfoV2) | (2u << 24))) return 25; /* VERSION_MISMATCH */
  ProfileInfo v1;
  const char* name;
  rc = FillProfile(device, index, &v1, &name);
  if (rc) return rc;
  info->id = v1.id;
  info->sliceCount = v1.sliceCount;
  info->instanceCount = v1.instanceCount;
  info->multiprocessorCount = v1.multiprocessorCount;
  info->memorySizeMB = v1.memorySizeMB;
  snprintf(info->name, sizeof info->name, "MIG %s", name);
  return NVML_SUCCESS;
}

int nvmlDeviceGetGpuInstances(void* device, unsigned int profile_id, void** out,
                              unsigned int* count) {
  int rc = InjectedOn("nvmlDeviceGetGpuInstances", device);
  if (rc) return rc;
  int gpu = GpuOf(device);
  if (gpu < 0 || !gpus[gpu].mig) return NVML_ERROR_NOT_SUPPORTED;
  const Profile* p = ProfileById(gpu, profile_id);
  if (!p) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned int n = 0;
  for (int i = 0; i < MAX_GIS; ++i)
    if (gis[i].used && gis[i].gpu == gpu && gis[i].profile_id == profile_id && n < p->count)
      out[n++] = &gis[i];
  *count = n;
  return NVML_SUCCESS;
}

int nvmlDeviceGetGpuInstanceById(void* device, unsigned int id, void** out) {
  int gpu = GpuOf(device);
  if (gpu < 0) return NVML_ERROR_INVALID_ARGUMENT;
  Gi* gi = FindGi(gpu, id);
  if (!gi) return NVML_ERROR_NOT_FOUND;
  *out = gi;
  return NVML_SUCCESS;
}

int nvmlGpuInstanceGetInfo(void* handle, GpuInstanceInfo* info) {
  Gi* gi = AsGi(handle);
  if (!gi) return NVML_ERROR_INVALID_ARGUMENT;
  const Profile* p = ProfileById(gi->gpu, gi->profile_id);
  info->device = NULL;
  info->id = gi->id;
  info->profileId = gi->profile_id;
  info->placement.start = gi->start;
  info->placement.size = p ? p->memory_slices : 0;
  return NVML_SUCCESS;
}

int nvmlGpuInstanceGetComputeInstanceProfileInfo(void* handle, unsigned int index,
                                                 unsigned int engine, CiProfileInfo* info) {
  Gi* gi = AsGi(handle);
  if (!gi || engine != 0) return NVML_ERROR_INVALID_ARGUMENT;
  const Profile* p = ProfileById(gi->gpu, gi->profile_id);
  if (index >= sizeof kCiSlices / sizeof kCiSlices[0] || !p || kCiSlices[index] > p->compute_slices)
    return NVML_ERROR_NOT_SUPPORTED;
  memset(info, 0, sizeof *info);
  info->id = index;
  info->sliceCount = kCiSlices[index];
  info->instanceCount = p->compute_slices / kCiSlices[index];
  info->multiprocessorCount = p->sms / p->compute_slices * kCiSlices[index];
  return NVML_SUCCESS;
}

int nvmlGpuInstanceGetComputeInstances(void* handle, unsigned int profile_id, void** out,
                                       unsigned int* count) {
  Gi* gi = AsGi(handle);
  if (!gi || profile_id >= sizeof kCiSlices / sizeof kCiSlices[0])
    return NVML_ERROR_INVALID_ARGUMENT;
  unsigned int n = 0;
  for (int i = 0; i < MAX_CIS; ++i)
    if (cis[i].used && cis[i].gpu == gi->gpu && cis[i].gi == gi->id &&
        cis[i].slices == kCiSlices[profile_id])
      out[n++] = &cis[i];
  *count = n;
  return NVML_SUCCESS;
}

int nvmlComputeInstanceGetInfo_v2(void* handle, CiInfo* info) {
  Ci* ci = AsCi(handle);
  if (!ci) return NVML_ERROR_INVALID_ARGUMENT;
  memset(info, 0, sizeof *info);
  info->gpuInstance = FindGi(ci->gpu, ci->gi);
  info->id = ci->id;
  for (unsigned int i = 0; i < sizeof kCiSlices / sizeof kCiSlices[0]; ++i)
    if (kCiSlices[i] == ci->slices) info->profileId = i;
  return NVML_SUCCESS;
}

int nvmlDeviceGetMaxMigDeviceCount(void* device, unsigned int* count) {
  int rc = InjectedOn("nvmlDeviceGetMaxMigDeviceCount", device);
  if (rc) return rc;
  int gpu = GpuOf(device);
  *count = gpu >= 0 && gpus[gpu].mig ? 7 : 0;
  return NVML_SUCCESS;
}

int nvmlDeviceGetMigDeviceHandleByIndex(void* device, unsigned int index, void** out) {
  int gpu = GpuOf(device);
  if (gpu < 0 || !gpus[gpu].mig) return NVML_ERROR_INVALID_ARGUMENT;
  Ci* ci = NthCi(gpu, index);
  if (!ci) return NVML_ERROR_NOT_FOUND;
  *out = ci;
  return NVML_SUCCESS;
}

int nvmlDeviceGetGpuInstanceId(void* device, unsigned int* id) {
  Ci* ci = AsCi(device);
  if (!ci) return NVML_ERROR_INVALID_ARGUMENT;
  *id = ci->gi;
  return NVML_SUCCESS;
}

int nvmlDeviceGetComputeInstanceId(void* device, unsigned int* id) {
  Ci* ci = AsCi(device);
  if (!ci) return NVML_ERROR_INVALID_ARGUMENT;
  *id = ci->id;
  return NVML_SUCCESS;
}

int nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  int rc = InjectedOn("nvmlDeviceGetUUID", device);
  if (rc) return rc;
  Ci* ci = AsCi(device);
  const char* text = ci ? ci->uuid : NULL;
  int gpu = ci ? -1 : GpuOf(device);
  if (!ci && gpu >= 0) text = gpus[gpu].uuid;
  /* A GPU the MIG state does not list (telemetry scenarios): "GPU-<PCI address>". */
  static char fallback[96];
  if (!text && !ci && device) {
    snprintf(fallback, sizeof fallback, "GPU-%s", (const char*)device);
    text = fallback;
  }
  if (!text) return NVML_ERROR_INVALID_ARGUMENT;
  if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  strcpy(uuid, text);
  return NVML_SUCCESS;
}

/* fake_nvml_telemetry.c: memory and processes from the scenario a test drives. */
int FakeNvmlScenarioMemory(void* device, Memory* memory);
int FakeNvmlScenarioHasProcesses(const char* pci);
int FakeNvmlScenarioProcesses(void* device, unsigned int* count, void* infos);

int FakeNvmlMigHandle(void* handle, const char** pci, unsigned int* gi, unsigned int* ci);
int FakeNvmlMigHandle(void* handle, const char** pci, unsigned int* gi, unsigned int* ci) {
  if (!loaded) FakeNvmlMigLoad();
  Ci* c = AsCi(handle);
  if (!c || c->gpu < 0) return 0;
  *pci = gpus[c->gpu].pci;
  *gi = c->gi;
  *ci = c->id;
  return 1;
}

int nvmlDeviceGetMemoryInfo(void* device, Memory* memory) {
  Ci* ci = AsCi(device);
  if (!ci) {
    /* A whole GPU: the scenario's figures where a test gives them (fake_nvml_telemetry.c), else,
       for a GPU of the MIG state, its memory_mb, else the total nvidia-smi shows as memory.total
       for its board (H100 80GB: 81559 MiB; A100 40GB: 40960). */
    int rc = FakeNvmlScenarioMemory(device, memory);
    int gpu = GpuOf(device);
    if (rc != NVML_ERROR_NOT_SUPPORTED || gpu < 0) return rc;
    unsigned long long mb = gpus[gpu].memory_mb                         ? gpus[gpu].memory_mb
                            : strcmp(gpus[gpu].board, "a100-40gb") == 0 ? 40960
                                                                        : 81559;
    memory->total = mb << 20;
    memory->used = 0;
    memory->free = memory->total;
    return NVML_SUCCESS;
  }
  Gi* gi = FindGi(ci->gpu, ci->gi);
  const Profile* p = gi ? ProfileById(ci->gpu, gi->profile_id) : NULL;
  if (!p) return NVML_ERROR_NOT_FOUND;
  memory->total = (unsigned long long)p->memory_mb << 20;
  memory->used = 0;
  memory->free = memory->total;
  int rc = FakeNvmlScenarioMemory(device, memory); /* used: its processes' memory */
  return rc == NVML_ERROR_NOT_SUPPORTED ? NVML_SUCCESS : rc;
}

int nvmlDeviceGetAttributes_v2(void* device, Attributes* attributes) {
  Ci* ci = AsCi(device);
  if (!ci) return NVML_ERROR_NOT_SUPPORTED;
  Gi* gi = FindGi(ci->gpu, ci->gi);
  const Profile* p = gi ? ProfileById(ci->gpu, gi->profile_id) : NULL;
  if (!p) return NVML_ERROR_NOT_FOUND;
  memset(attributes, 0, sizeof *attributes);
  attributes->multiprocessorCount = p->sms / p->compute_slices * ci->slices;
  attributes->gpuInstanceSliceCount = p->compute_slices;
  attributes->computeInstanceSliceCount = ci->slices;
  attributes->memorySizeMB = p->memory_mb;
  return NVML_SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned int* count, void* infos) {
  int rc = InjectedOn("nvmlDeviceGetComputeRunningProcesses_v3", device);
  if (rc) return rc;
  {
    Ci* ci = AsCi(device);
    const char* pci = ci ? (ci->gpu >= 0 ? gpus[ci->gpu].pci : NULL) : (const char*)device;
    if (pci && FakeNvmlScenarioHasProcesses(pci))
      return FakeNvmlScenarioProcesses(device, count, infos);
  }
  if (AsCi(device)) {
    *count = 0;
    return NVML_SUCCESS;
  }
  int gpu = GpuOf(device);
  unsigned int n = gpu >= 0 ? (unsigned int)gpus[gpu].processes : 0;
  int faulted = device ? FakeNvmlFaultProcesses((const char*)device) : -1;
  if (faulted >= 0) n = (unsigned int)faulted;
  int fits = *count >= n;
  *count = n;
  (void)infos;
  return n == 0 || fits ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}

/* ---- changes ---- */

int nvmlDeviceSetMigMode(void* device, unsigned int mode, int* activation) {
  int gpu = GpuOf(device);
  char args[32];
  snprintf(args, sizeof args, "%u", mode);
  int rc = InjectedOn("nvmlDeviceSetMigMode", device);
  if (!rc && gpu < 0) rc = NVML_ERROR_NOT_SUPPORTED;
  if (!rc && mode == 0) {
    for (int i = 0; i < MAX_GIS; ++i)
      if (gis[i].used && gis[i].gpu == gpu) rc = NVML_ERROR_IN_USE;
  }
  if (!rc) {
    gpus[gpu].pending = (int)mode;
    *activation = gpus[gpu].activation;
    if (!gpus[gpu].activation) gpus[gpu].mig = (int)mode;
    Save();
  }
  Log("nvmlDeviceSetMigMode", gpu >= 0 ? gpus[gpu].pci : "?", args, rc);
  return rc;
}

int nvmlDeviceCreateGpuInstanceWithPlacement(void* device, unsigned int profile_id,
                                             const Placement* placement, void** out) {
  int gpu = GpuOf(device);
  char args[64];
  snprintf(args, sizeof args, "profile=%u start=%u size=%u", profile_id, placement->start,
           placement->size);
  int rc = InjectedOn("nvmlDeviceCreateGpuInstanceWithPlacement", device);
  const Profile* p = gpu >= 0 ? ProfileById(gpu, profile_id) : NULL;
  if (!rc && (gpu < 0 || !gpus[gpu].mig)) rc = NVML_ERROR_NOT_SUPPORTED;
  if (!rc && (!p || placement->size != p->memory_slices)) rc = NVML_ERROR_INVALID_ARGUMENT;
  if (!rc) {
    int allowed = 0;
    for (int i = 0; i < p->start_count; ++i)
      if (p->starts[i] == placement->start) allowed = 1;
    if (!allowed) rc = NVML_ERROR_INVALID_ARGUMENT;
  }
  unsigned int same = 0, next_id = 1;
  for (int i = 0; !rc && i < MAX_GIS; ++i) {
    if (!gis[i].used || gis[i].gpu != gpu) continue;
    const Profile* q = ProfileById(gpu, gis[i].profile_id);
    unsigned int size = q ? q->memory_slices : 1;
    if (placement->start < gis[i].start + size && gis[i].start < placement->start + placement->size)
      rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (gis[i].profile_id == profile_id) ++same;
  }
  if (!rc && same >= p->count) rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
  while (!rc && FindGi(gpu, next_id))
    ++next_id;
  if (!rc) {
    rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (int i = 0; i < MAX_GIS; ++i) {
      if (gis[i].used) continue;
      gis[i] = (Gi){1, gpu, next_id, profile_id, placement->start};
      *out = &gis[i];
      rc = NVML_SUCCESS;
      CapabilityFile(gpu, next_id, -1, 1);
      Save();
      break;
    }
  }
  Log("nvmlDeviceCreateGpuInstanceWithPlacement", gpu >= 0 ? gpus[gpu].pci : "?", args, rc);
  return rc;
}

int nvmlGpuInstanceCreateComputeInstance(void* handle, unsigned int profile_id, void** out) {
  Gi* gi = AsGi(handle);
  char args[64];
  snprintf(args, sizeof args, "gi=%u profile=%u", gi ? gi->id : 0, profile_id);
  int rc = Injected("nvmlGpuInstanceCreateComputeInstance");
  const Profile* p = gi ? ProfileById(gi->gpu, gi->profile_id) : NULL;
  if (!rc && (!p || profile_id >= sizeof kCiSlices / sizeof kCiSlices[0] ||
              kCiSlices[profile_id] > p->compute_slices))
    rc = NVML_ERROR_INVALID_ARGUMENT;
  unsigned int used = 0, next_id = 0;
  for (int i = 0; !rc && i < MAX_CIS; ++i)
    if (cis[i].used && cis[i].gpu == gi->gpu && cis[i].gi == gi->id) used += cis[i].slices;
  if (!rc && used + kCiSlices[profile_id] > p->compute_slices)
    rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
  for (int again = 1; !rc && again;) {
    again = 0;
    for (int i = 0; i < MAX_CIS; ++i)
      if (cis[i].used && cis[i].gpu == gi->gpu && cis[i].gi == gi->id && cis[i].id == next_id) {
        ++next_id;
        again = 1;
      }
  }
  if (!rc) {
    rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (int i = 0; i < MAX_CIS; ++i) {
      if (cis[i].used) continue;
      cis[i] = (Ci){1, gi->gpu, gi->id, next_id, kCiSlices[profile_id], "", 0};
      /* A stable, well-formed UUID derived from where the instance sits. */
      unsigned int h = 2166136261u;
      for (const char* c = gpus[gi->gpu].pci; *c; ++c)
        h = (h ^ (unsigned char)*c) * 16777619u;
      snprintf(cis[i].uuid, sizeof cis[i].uuid, "MIG-%08x-%04x-4%03x-8%03x-%012x", h, gi->id,
               next_id, gi->start, (unsigned int)i);
      *out = &cis[i];
      rc = NVML_SUCCESS;
      CapabilityFile(gi->gpu, gi->id, (int)next_id, 1);
      Save();
      break;
    }
  }
  Log("nvmlGpuInstanceCreateComputeInstance", gi ? gpus[gi->gpu].pci : "?", args, rc);
  return rc;
}

int nvmlComputeInstanceDestroy(void* handle) {
  Ci* ci = AsCi(handle);
  char args[64];
  snprintf(args, sizeof args, "gi=%u ci=%u", ci ? ci->gi : 0, ci ? ci->id : 0);
  int rc = Injected("nvmlComputeInstanceDestroy");
  if (!rc && !ci) rc = NVML_ERROR_INVALID_ARGUMENT;
  const char* pci = ci ? gpus[ci->gpu].pci : "?";
  if (!rc && (gpus[ci->gpu].processes > 0 || ci->processes > 0)) rc = NVML_ERROR_IN_USE;
  if (!rc) {
    ci->used = 0;
    CapabilityFile(ci->gpu, ci->gi, (int)ci->id, 0);
    Save();
  }
  Log("nvmlComputeInstanceDestroy", pci, args, rc);
  return rc;
}

int nvmlGpuInstanceDestroy(void* handle) {
  Gi* gi = AsGi(handle);
  char args[32];
  snprintf(args, sizeof args, "gi=%u", gi ? gi->id : 0);
  int rc = Injected("nvmlGpuInstanceDestroy");
  if (!rc && !gi) rc = NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; !rc && i < MAX_CIS; ++i)
    if (cis[i].used && cis[i].gpu == gi->gpu && cis[i].gi == gi->id) rc = NVML_ERROR_IN_USE;
  const char* pci = gi ? gpus[gi->gpu].pci : "?";
  if (!rc) {
    gi->used = 0;
    CapabilityFile(gi->gpu, gi->id, -1, 0);
    Save();
  }
  Log("nvmlGpuInstanceDestroy", pci, args, rc);
  return rc;
}
