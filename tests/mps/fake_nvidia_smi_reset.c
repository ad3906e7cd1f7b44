/* The reset half of the stand-in nvidia-smi (fake_nvidia_smi.c runs it for `-r`):
 * `nvidia-smi -r -i <id>` resets one GPU of the stand-in NVML
 * (tests/deviceplugin/fake_nvml_faults.c). <id> is a UUID (the fault state's uuid=, the MIG
 * state's uuid=, or the stand-in's default "GPU-<pci>") or a PCI address.
 *
 * Like the real one, the reset is refused while a process holds the GPU (the fault state's
 * processes=, else the MIG state's) or another process holds NVML (a file in the folder named by
 * TESSERA_FAKE_NVML_HOLDERS, named by a live PID): "In use by another client", exit status 1.
 * reset_fail=<n> in the GPU's fault line makes every reset of it fail with exit status <n>. A reset
 * that succeeds applies what waits for one: remap_pending, retired_pending, recovery_action, lost
 * and ecc_uncorrected (volatile) become 0 in the fault state (rewritten by a rename).
 *
 * Each reset asked for is appended to the file named by TESSERA_FAKE_NVIDIA_SMI_LOG as
 * "reset <id> <pci> -> <exit status>". */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LINES 256
#define LINE_SIZE 512

/* The value of " key=" in a line (empty when absent). */
static const char* Value(const char* line, const char* key, char* out, size_t size) {
  char pattern[40];
  snprintf(pattern, sizeof pattern, " %s=", key);
  out[0] = 0;
  const char* at = strstr(line, pattern);
  if (!at) return out;
  at += strlen(pattern);
  size_t n = strcspn(at, " \n");
  if (n >= size) n = size - 1;
  memcpy(out, at, n);
  out[n] = 0;
  return out;
}

typedef struct {
  char text[MAX_LINES][LINE_SIZE];
  int count;
} Lines;

static void ReadLines(const char* path, Lines* lines) {
  lines->count = 0;
  FILE* f = path ? fopen(path, "re") : NULL;
  if (!f) return;
  while (lines->count < MAX_LINES && fgets(lines->text[lines->count], LINE_SIZE, f))
    ++lines->count;
  fclose(f);
}

/* The GPU's PCI address for `id`, and its fault line (-1: none) and MIG state line (-1). */
static int Resolve(const char* id, const Lines* faults, const Lines* state, char* pci,
                   int* fault_line, int* state_line) {
  char first[64], second[64], uuid[128];
  pci[0] = 0;
  *fault_line = *state_line = -1;
  for (int i = 0; i < faults->count && !pci[0]; ++i) {
    if (sscanf(faults->text[i], "%63s", first) != 1) continue;
    Value(faults->text[i], "uuid", uuid, sizeof uuid);
    if (strcmp(first, id) == 0 || strcmp(uuid, id) == 0) snprintf(pci, 64, "%s", first);
  }
  for (int i = 0; i < state->count && !pci[0]; ++i) {
    if (sscanf(state->text[i], "%63s %63s", first, second) != 2 || strcmp(first, "gpu") != 0)
      continue;
    Value(state->text[i], "uuid", uuid, sizeof uuid);
    if (strcmp(second, id) == 0 || strcmp(uuid, id) == 0) snprintf(pci, 64, "%s", second);
  }
  if (!pci[0] && strncmp(id, "GPU-", 4) == 0 && strchr(id + 4, ':'))
    snprintf(pci, 64, "%s", id + 4);
  if (!pci[0] && strchr(id, ':')) snprintf(pci, 64, "%s", id);
  if (!pci[0]) return 0;
  for (int i = 0; i < faults->count; ++i)
    if (sscanf(faults->text[i], "%63s", first) == 1 && strcmp(first, pci) == 0) *fault_line = i;
  for (int i = 0; i < state->count; ++i)
    if (sscanf(state->text[i], "%63s %63s", first, second) == 2 && strcmp(first, "gpu") == 0 &&
        strcmp(second, pci) == 0)
      *state_line = i;
  return 1;
}

/* The fault line with what a reset applies set to 0. */
static void Applied(const char* line, char* out, size_t size) {
  static const char* const kCleared[] = {"remap_pending", "retired_pending", "recovery_action",
                                         "lost", "ecc_uncorrected"};
  char copy[LINE_SIZE];
  snprintf(copy, sizeof copy, "%s", line);
  copy[strcspn(copy, "\n")] = 0;
  out[0] = 0;
  for (char* word = strtok(copy, " "); word; word = strtok(NULL, " ")) {
    int cleared = 0;
    for (size_t k = 0; k < sizeof kCleared / sizeof kCleared[0]; ++k) {
      size_t n = strlen(kCleared[k]);
      if (strncmp(word, kCleared[k], n) == 0 && word[n] == '=') cleared = 1;
    }
    if (cleared) continue;
    if (out[0]) strncat(out, " ", size - strlen(out) - 1);
    strncat(out, word, size - strlen(out) - 1);
  }
  for (size_t k = 0; k < sizeof kCleared / sizeof kCleared[0]; ++k) {
    strncat(out, " ", size - strlen(out) - 1);
    strncat(out, kCleared[k], size - strlen(out) - 1);
    strncat(out, "=0", size - strlen(out) - 1);
  }
  strncat(out, "\n", size - strlen(out) - 1);
}

static void Rewrite(const char* path, const Lines* lines) {
  char temp[4096];
  snprintf(temp, sizeof temp, "%s.smi.tmp", path);
  FILE* f = fopen(temp, "we");
  if (!f) return;
  for (int i = 0; i < lines->count; ++i)
    fputs(lines->text[i], f);
  fclose(f);
  rename(temp, path);
}

/* Whether a live process other than this one holds NVML (the stand-in NVML's holder files). */
static int NvmlHeldElsewhere(void) {
  const char* holders = getenv("TESSERA_FAKE_NVML_HOLDERS");
  DIR* dir = holders ? opendir(holders) : NULL;
  if (!dir) return 0;
  int held = 0;
  for (struct dirent* entry = readdir(dir); entry && !held; entry = readdir(dir)) {
    char* end = NULL;
    long pid = strtol(entry->d_name, &end, 10);
    if (pid <= 0 || !end || *end || pid == (long)getpid()) continue;
    held = kill((pid_t)pid, 0) == 0;
  }
  closedir(dir);
  return held;
}

static int Finish(const char* id, const char* pci, int status) {
  const char* log = getenv("TESSERA_FAKE_NVIDIA_SMI_LOG");
  FILE* f = log ? fopen(log, "ae") : NULL;
  if (f) {
    fprintf(f, "reset %s %s -> %d\n", id, pci[0] ? pci : "?", status);
    fclose(f);
  }
  return status;
}

static int Reset(const char* id) {
  static Lines faults, state;
  const char* faults_path = getenv("TESSERA_FAKE_NVML_FAULTS");
  ReadLines(faults_path, &faults);
  ReadLines(getenv("TESSERA_FAKE_NVML_STATE"), &state);
  char pci[64], value[32];
  int fault_line, state_line;
  if (!Resolve(id, &faults, &state, pci, &fault_line, &state_line)) {
    fprintf(stderr, "No devices were found\n");
    return Finish(id, "", 6);
  }
  const char* fault = fault_line >= 0 ? faults.text[fault_line] : "";
  long processes = -1;
  if (Value(fault, "processes", value, sizeof value)[0]) processes = strtol(value, NULL, 10);
  if (processes < 0 && state_line >= 0 &&
      Value(state.text[state_line], "processes", value, sizeof value)[0])
    processes = strtol(value, NULL, 10);
  if (processes > 0 || NvmlHeldElsewhere()) {
    printf("GPU 0000%s: In use by another client\n", pci);
    printf(
        "1 device is currently being used by one or more other processes (e.g., Fabric "
        "Manager, CUDA application, graphics application such as an X server, or a "
        "monitoring application such as another instance of nvidia-smi). Please first kill "
        "all processes using this device and all compute applications running in the "
        "system.\n");
    return Finish(id, pci, 1);
  }
  if (Value(fault, "reset_fail", value, sizeof value)[0]) {
    printf("GPU 0000%s: Unknown Error\n", pci);
    return Finish(id, pci, (int)strtol(value, NULL, 10));
  }
  if (fault_line >= 0 && faults_path) {
    char applied[LINE_SIZE];
    Applied(faults.text[fault_line], applied, sizeof applied);
    snprintf(faults.text[fault_line], LINE_SIZE, "%s", applied);
    Rewrite(faults_path, &faults);
  }
  printf("GPU 0000%s was successfully reset.\nAll done.\n", pci);
  return Finish(id, pci, 0);
}

int FakeNvidiaSmiReset(int argc, char** argv);
int FakeNvidiaSmiReset(int argc, char** argv) {
  int reset = 0;
  const char* id = NULL;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "-r") == 0 || strcmp(argv[i], "--gpu-reset") == 0) {
      reset = 1;
    } else if (strcmp(argv[i], "-i") == 0 && i + 1 < argc) {
      id = argv[++i];
    } else if (strncmp(argv[i], "--id=", 5) == 0) {
      id = argv[i] + 5;
    } else {
      fprintf(stderr, "Invalid combination of input arguments: %s\n", argv[i]);
      return 2;
    }
  }
  if (!reset || !id) {
    fprintf(stderr, "the stand-in nvidia-smi knows only: nvidia-smi -r -i <id>\n");
    return 2;
  }
  return Reset(id);
}
