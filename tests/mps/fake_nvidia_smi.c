/* A stand-in nvidia-smi for tests: only what tessera runs, `nvidia-smi compute-policy -i <uuid>
 * --set-timeslice <0..3>` (0 default, 1 short, 2 medium, 3 long), checked as strictly as the real
 * one and logged to $TESSERA_FAKE_MPS_DIR/transcript as "nvidia-smi compute-policy -i <uuid>
 * --set-timeslice <n>", and `nvidia-smi -r -i <id>`, a GPU reset over the stand-in NVML's fault
 * state (fake_nvidia_smi_reset.c). Anything else is an error (status 2). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int FakeNvidiaSmiReset(int argc, char** argv); /* fake_nvidia_smi_reset.c */

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (strcmp(argv[i], "-r") == 0 || strcmp(argv[i], "--gpu-reset") == 0)
      return FakeNvidiaSmiReset(argc, argv);
  if (argc != 6 || strcmp(argv[1], "compute-policy") != 0 || strcmp(argv[2], "-i") != 0 ||
      strncmp(argv[3], "GPU-", 4) != 0 || strcmp(argv[4], "--set-timeslice") != 0 ||
      strlen(argv[5]) != 1 || argv[5][0] < '0' || argv[5][0] > '3') {
    fprintf(stderr, "nvidia-smi (stand-in): unsupported arguments\n");
    return 2;
  }
  const char* dir = getenv("TESSERA_FAKE_MPS_DIR");
  if (dir && *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/transcript", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dprintf(fd, "nvidia-smi compute-policy -i %s --set-timeslice %s\n", argv[3], argv[5]);
      close(fd);
    }
  }
  printf("Successfully set time slice to %s for GPU %s\n", argv[5], argv[3]);
  return 0;
}
