/* Stands in front of a program tessera-serve runs (podman, nvidia-smi, nvidia-cuda-mps-control)
 * under that program's name: records the descriptors it was exec'd with, then execs the real
 * program with the same arguments. Anything above stdio in a report was inherited from the
 * service.
 *   TESSERA_FD_WITNESS_DIR   where reports go, one file "<program>.<pid>" of "FD TARGET" lines
 *   TESSERA_FD_WITNESS_PATH  where the real programs are looked for (PATH syntax)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t ListDescriptors(char* out, size_t size) {
  size_t used = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return 0;
  const int own = dirfd(dir);
  struct dirent* entry;
  while ((entry = readdir(dir)) != NULL) {
    char* end = NULL;
    const long fd = strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == own) continue;
    char link[64], target[1024];
    snprintf(link, sizeof link, "/proc/self/fd/%ld", fd);
    const ssize_t n = readlink(link, target, sizeof target - 1);
    target[n < 0 ? 0 : n] = '\0';
    const int wrote = snprintf(out + used, size - used, "%ld %s\n", fd, target);
    if (wrote < 0 || (size_t)wrote >= size - used) break;
    used += (size_t)wrote;
  }
  closedir(dir);
  return used;
}

int main(int argc, char** argv) {
  (void)argc;
  static char lines[65536];
  const size_t used = ListDescriptors(lines, sizeof lines);
  const char* slash = strrchr(argv[0], '/');
  const char* name = slash ? slash + 1 : argv[0];
  const char* dir = getenv("TESSERA_FD_WITNESS_DIR");
  const char* path = getenv("TESSERA_FD_WITNESS_PATH");
  if (!dir || !path) {
    fprintf(stderr, "fd_witness: TESSERA_FD_WITNESS_DIR and TESSERA_FD_WITNESS_PATH are needed\n");
    return 127;
  }
  char report[4096];
  snprintf(report, sizeof report, "%s/%s.%d", dir, name, (int)getpid());
  const int fd = open(report, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) {
    if (write(fd, lines, used) < 0) perror("fd_witness: write");
    close(fd);
  }
  char* dirs = strdup(path);
  for (char* each = strtok(dirs, ":"); each; each = strtok(NULL, ":")) {
    char real[4096];
    snprintf(real, sizeof real, "%s/%s", each, name);
    if (access(real, X_OK) == 0) {
      execv(real, argv);
      break;
    }
  }
  fprintf(stderr, "fd_witness: no %s in %s\n", name, path);
  return 127;
}
