/* The compute-mode half of the stand-in libnvidia-ml.so.1 (MPS sharing), built into the same
 * library as fake_nvml.c and fake_nvml_mig.c and kept apart from them.
 *
 * nvmlDeviceGetComputeMode / nvmlDeviceSetComputeMode with NVML's values (DEFAULT 0,
 * EXCLUSIVE_THREAD 1, PROHIBITED 2, EXCLUSIVE_PROCESS 3). State lives in the file named by
 * TESSERA_FAKE_NVML_COMPUTE_MODES, read at every call and rewritten after every change (several
 * processes share it), one line per GPU or injected error:
 *   <pci> <mode>
 *   fail <nvml function> <nvml error>
 * A GPU without a line is in DEFAULT. Each set is appended to TESSERA_FAKE_NVML_LOG as
 * "nvmlDeviceSetComputeMode <pci> <mode> -> <status>". A handle is fake_nvml.c's device record,
 * whose first member is its PCI address. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define MAX_MODES 64

typedef struct {
  char pci[24];
  unsigned int mode;
} ModeLine;

typedef struct {
  ModeLine modes[MAX_MODES];
  int count;
  char fail_function[80];
  int fail_code;
} ModeState;

static void LoadModes(ModeState* state) {
  memset(state, 0, sizeof *state);
  const char* path = getenv("TESSERA_FAKE_NVML_COMPUTE_MODES");
  FILE* f = path ? fopen(path, "re") : NULL;
  if (!f) return;
  char first[80], second[80];
  int code;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "fail %79s %d", first, &code) == 2) {
      snprintf(state->fail_function, sizeof state->fail_function, "%s", first);
      state->fail_code = code;
    } else if (sscanf(line, "%79s %79s", first, second) == 2 && state->count < MAX_MODES) {
      snprintf(state->modes[state->count].pci, sizeof state->modes[0].pci, "%.*s",
               (int)sizeof state->modes[0].pci - 1, first);
      state->modes[state->count++].mode = (unsigned int)strtoul(second, NULL, 10);
    }
  }
  fclose(f);
}

static void SaveModes(const ModeState* state) {
  const char* path = getenv("TESSERA_FAKE_NVML_COMPUTE_MODES");
  if (!path) return;
  char temp[4096];
  snprintf(temp, sizeof temp, "%s.tmp", path);
  FILE* f = fopen(temp, "we");
  if (!f) return;
  for (int i = 0; i < state->count; ++i)
    fprintf(f, "%s %u\n", state->modes[i].pci, state->modes[i].mode);
  if (state->fail_function[0]) fprintf(f, "fail %s %d\n", state->fail_function, state->fail_code);
  fclose(f);
  rename(temp, path);
}

static void LogModeCall(const char* pci, unsigned int mode, int status) {
  const char* path = getenv("TESSERA_FAKE_NVML_LOG");
  FILE* f = path ? fopen(path, "ae") : NULL;
  if (!f) return;
  fprintf(f, "nvmlDeviceSetComputeMode %s %u -> %d\n", pci, mode, status);
  fclose(f);
}

/* The state file's read-modify-write under an exclusive lock: the GPUs' keepers set their modes
 * from threads and processes of their own at once, as real NVML takes them, one per device. */
static int LockModes(void) {
  const char* path = getenv("TESSERA_FAKE_NVML_COMPUTE_MODES");
  if (!path) return -1;
  char lock_path[4096];
  snprintf(lock_path, sizeof lock_path, "%s.lock", path);
  int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) flock(fd, LOCK_EX);
  return fd;
}

static void UnlockModes(int fd) {
  if (fd >= 0) close(fd); /* releases the lock */
}

int nvmlDeviceGetComputeMode(void* device, unsigned int* mode) {
  if (!device || !mode) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  ModeState state;
  int lock = LockModes();
  LoadModes(&state);
  UnlockModes(lock);
  if (strcmp(state.fail_function, "nvmlDeviceGetComputeMode") == 0) return state.fail_code;
  *mode = 0;
  for (int i = 0; i < state.count; ++i)
    if (strcmp(state.modes[i].pci, (const char*)device) == 0) *mode = state.modes[i].mode;
  return 0;
}

int nvmlDeviceSetComputeMode(void* device, unsigned int mode) {
  if (!device) return 2;
  const char* pci = (const char*)device;
  ModeState state;
  int lock = LockModes();
  LoadModes(&state);
  int status = 0;
  if (strcmp(state.fail_function, "nvmlDeviceSetComputeMode") == 0) {
    status = state.fail_code;
  } else if (mode > 3) {
    status = 2;
  } else {
    int i = 0;
    while (i < state.count && strcmp(state.modes[i].pci, pci) != 0)
      ++i;
    if (i == state.count && state.count < MAX_MODES)
      snprintf(state.modes[state.count++].pci, sizeof state.modes[0].pci, "%s", pci);
    if (i < state.count) state.modes[i].mode = mode;
    SaveModes(&state);
  }
  UnlockModes(lock);
  LogModeCall(pci, mode, status);
  return status;
}
