/* The fault half of the stand-in libnvidia-ml.so.1: a GPU's fault state (remapped rows, retired
 * pages, uncorrected ECC counts, the driver's recovery action, a GPU that fell off the bus),
 * with NVML's types, constants and error codes. Built into the same library as fake_nvml.c.
 *
 * State lives in the file named by TESSERA_FAKE_NVML_FAULTS, read at every call (a test, or the
 * stand-in nvidia-smi after a reset, rewrites it while the library is in use: atomically, by a
 * rename), one line per GPU:
 *   <pci> [uuid=<GPU-…>] [remap_pending=0|1] [remap_failure=0|1] [remap_correctable=<n>]
 *         [remap_uncorrectable=<n>] [retired_pending=0|1] [ecc_uncorrected=<n>]
 *         [recovery_action=<n>] [lost=0|1] [processes=<n>] [reset_fail=<exit status>]
 * A figure given as "na" is not supported by that GPU (e.g. recovery_action=na: a driver before
 * the field). A GPU without a line has none of these faults. lost=1 makes the calls on that
 * GPU's handle answer NVML_ERROR_GPU_IS_LOST (15); processes=<n> is what the running-process
 * list counts (over the MIG state's processes=). uuid= and reset_fail= are the stand-in
 * nvidia-smi's (tests/health/fake_nvidia_smi.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_GPU_IS_LOST 15

#define FIELD_GPU_RECOVERY_ACTION 230 /* NVML_FI_DEV_GET_GPU_RECOVERY_ACTION */
#define VALUE_TYPE_UNSIGNED_INT 1     /* NVML_VALUE_TYPE_UNSIGNED_INT */

typedef struct {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  unsigned int valueType;
  int nvmlReturn;
  union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
  } value;
} FieldValue;

/* fake_nvml_mig.c: the value of " key=" in a line. */
const char* FakeNvmlValue(const char* line, const char* key, char* out, size_t size);

/* The fault line of `pci` in `out` (1), or 0 when the GPU has none. */
static int FaultLine(const char* pci, char* out, size_t size) {
  const char* path = getenv("TESSERA_FAKE_NVML_FAULTS");
  FILE* f = path && pci ? fopen(path, "re") : NULL;
  if (!f) return 0;
  char line[512], first[64];
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    if (sscanf(line, "%63s", first) != 1 || strcmp(first, pci) != 0) continue;
    snprintf(out, size, "%s", line);
    found = 1;
  }
  fclose(f);
  return found;
}

/* A figure of the GPU's fault line: 1 and its value, 0 when absent (`fallback`), -1 for "na". */
static int Figure(const char* pci, const char* key, unsigned long long fallback,
                  unsigned long long* value) {
  char line[512], text[40];
  *value = fallback;
  if (!FaultLine(pci, line, sizeof line) || !FakeNvmlValue(line, key, text, sizeof text)) return 0;
  if (strcmp(text, "na") == 0) return -1;
  *value = strtoull(text, NULL, 10);
  return 1;
}

/* Whether the GPU at `pci` fell off the bus (lost=1): every call on its handle answers 15. */
int FakeNvmlLost(const char* pci);
int FakeNvmlLost(const char* pci) {
  unsigned long long lost;
  return Figure(pci, "lost", 0, &lost) == 1 && lost != 0;
}

/* The GPU's processes= of the fault file, or -1 when the line does not say. */
int FakeNvmlFaultProcesses(const char* pci);
int FakeNvmlFaultProcesses(const char* pci) {
  unsigned long long processes;
  return Figure(pci, "processes", 0, &processes) == 1 ? (int)processes : -1;
}

/* A handle is fake_nvml.c's device record, whose first member is its PCI address; MIG device
 * handles (fake_nvml_mig.c) answer for their GPU. */
int FakeNvmlMigHandle(void* handle, const char** pci, unsigned int* gi, unsigned int* ci);
static const char* PciOf(void* device) {
  const char* pci = NULL;
  unsigned int gi, ci;
  if (!device) return NULL;
  if (FakeNvmlMigHandle(device, &pci, &gi, &ci)) return pci;
  return (const char*)device;
}

int nvmlDeviceGetRemappedRows(void* device, unsigned int* corrRows, unsigned int* uncRows,
                              unsigned int* isPending, unsigned int* failureOccurred) {
  const char* pci = PciOf(device);
  if (!pci || !corrRows || !uncRows || !isPending || !failureOccurred)
    return NVML_ERROR_INVALID_ARGUMENT;
  if (FakeNvmlLost(pci)) return NVML_ERROR_GPU_IS_LOST;
  unsigned long long pending, failure, correctable, uncorrectable;
  if (Figure(pci, "remap_pending", 0, &pending) < 0 ||
      Figure(pci, "remap_failure", 0, &failure) < 0)
    return NVML_ERROR_NOT_SUPPORTED;
  Figure(pci, "remap_correctable", 0, &correctable);
  Figure(pci, "remap_uncorrectable", pending || failure ? 1 : 0, &uncorrectable);
  *corrRows = (unsigned int)correctable;
  *uncRows = (unsigned int)uncorrectable;
  *isPending = pending ? 1 : 0;
  *failureOccurred = failure ? 1 : 0;
  return NVML_SUCCESS;
}

int nvmlDeviceGetRetiredPagesPendingStatus(void* device, unsigned int* isPending) {
  const char* pci = PciOf(device);
  if (!pci || !isPending) return NVML_ERROR_INVALID_ARGUMENT;
  if (FakeNvmlLost(pci)) return NVML_ERROR_GPU_IS_LOST;
  unsigned long long pending;
  if (Figure(pci, "retired_pending", 0, &pending) < 0) return NVML_ERROR_NOT_SUPPORTED;
  *isPending = pending ? 1 : 0; /* NVML_FEATURE_ENABLED / DISABLED */
  return NVML_SUCCESS;
}

int nvmlDeviceGetTotalEccErrors(void* device, unsigned int errorType, unsigned int counterType,
                                unsigned long long* eccCounts) {
  const char* pci = PciOf(device);
  if (!pci || !eccCounts || errorType > 1 || counterType > 1) return NVML_ERROR_INVALID_ARGUMENT;
  if (FakeNvmlLost(pci)) return NVML_ERROR_GPU_IS_LOST;
  /* Only uncorrected counts are kept; volatile and aggregate read the same here. */
  unsigned long long count = 0;
  if (errorType == 1 && Figure(pci, "ecc_uncorrected", 0, &count) < 0)
    return NVML_ERROR_NOT_SUPPORTED;
  *eccCounts = errorType == 1 ? count : 0;
  return NVML_SUCCESS;
}

int nvmlDeviceGetFieldValues(void* device, int valuesCount, FieldValue* values) {
  const char* pci = PciOf(device);
  if (!pci || valuesCount < 0 || (valuesCount > 0 && !values)) return NVML_ERROR_INVALID_ARGUMENT;
  if (FakeNvmlLost(pci)) return NVML_ERROR_GPU_IS_LOST;
  for (int i = 0; i < valuesCount; ++i) {
    FieldValue* v = &values[i];
    memset(&v->value, 0, sizeof v->value);
    v->timestamp = 0;
    v->latencyUsec = 0;
    unsigned long long action = 0;
    if (v->fieldId != FIELD_GPU_RECOVERY_ACTION || Figure(pci, "recovery_action", 0, &action) < 0) {
      v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
      continue;
    }
    v->valueType = VALUE_TYPE_UNSIGNED_INT;
    v->value.uiVal = (unsigned int)action;
    v->nvmlReturn = NVML_SUCCESS;
  }
  return NVML_SUCCESS;
}
