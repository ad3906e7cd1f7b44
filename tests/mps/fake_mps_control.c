#define _GNU_SOURCE /* accept4 */
/* A stand-in nvidia-cuda-mps-control for tests, found through a configured path. Like NVIDIA's:
 *   nvidia-cuda-mps-control -f   runs the daemon in the foreground (as -d does after its fork);
 *   nvidia-cuda-mps-control -d   forks a daemon that makes $CUDA_MPS_PIPE_DIRECTORY (default
 *                                /tmp/nvidia-mps) with its `control` socket and
 *                                nvidia-cuda-mps-control.pid, and writes control.log in
 *                                $CUDA_MPS_LOG_DIRECTORY in NVIDIA's format
 *                                ("[2026-02-06 09:34:17.770 Control   261] ...");
 *   nvidia-cuda-mps-control      sends each line of stdin to the daemon and prints its answers;
 *                                status 1 when no daemon answers on the socket.
 * Commands: get/set_default_active_thread_percentage, get/set_default_device_pinned_mem_limit,
 * get_server_list, get_client_list, set_active_thread_percentage, set_device_pinned_mem_limit,
 * terminate_client, quit. Every command is logged ("Cmd:<command>") before it is answered.
 *
 * Tests steer it through files in $TESSERA_FAKE_MPS_DIR:
 *   transcript                  every daemon start and every command, one line each, appended
 *                               (set TESSERA_FAKE_NVML_LOG to the same file to interleave the
 *                               stand-in NVML's compute-mode calls)
 *   <uuid>.behaviour            "exit": the daemon dies at once (socket and pid file left, as
 *                               after a crash); "hang": it stops answering; "fault": it logs a
 *                               server's fatal exception. "exit" and "fault" happen once (the
 *                               file is then renamed .done); "hang" lasts until it is removed
 *   <uuid>.start-delay-ms       the daemon waits this long before it makes its socket
 *   <uuid>.answer-delay-ms      the daemon waits this long before it answers each command
 *   <uuid>.clients              client PIDs of one running server (get_server_list answers a
 *                               server only while this file lists clients)
 * where <uuid> is the daemon's CUDA_VISIBLE_DEVICES. With TESSERA_FAKE_MPS_WATCH naming a file
 * (tessera's ready marker; "{uuid}" in it stands for the daemon's GPU), each transcript line ends
 * with what that file held at that moment
 * ("[watch absent]" or "[watch <first line>]"), so tests see what was ready when. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_PATH 4096
#define MAX_COMMAND 1024

static char pipe_dir[MAX_PATH], log_dir[MAX_PATH], fake_dir[MAX_PATH], uuid[128];
static double default_percentage = 100.0;
static char default_limit[64] = "";
static int hanging;
static int foreground;

static void Env(char* out, const char* name, const char* fallback) {
  const char* value = getenv(name);
  snprintf(out, MAX_PATH, "%s", value && *value ? value : fallback);
}

static void FakePath(char* out, const char* suffix) {
  snprintf(out, MAX_PATH, "%s/%s%s", fake_dir, uuid[0] ? uuid : "nogpu", suffix);
}

static void Transcript(const char* format, ...) {
  if (!fake_dir[0]) return;
  char path[MAX_PATH], line[2048];
  snprintf(path, sizeof path, "%s/transcript", fake_dir);
  va_list args;
  va_start(args, format);
  vsnprintf(line, sizeof line, format, args);
  va_end(args);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  char watched[256] = "absent";
  const char* watch = getenv("TESSERA_FAKE_MPS_WATCH");
  char watch_path[MAX_PATH] = "";
  if (watch) {
    /* "{uuid}" in the name stands for the daemon's GPU. */
    const char* at = strstr(watch, "{uuid}");
    if (at)
      snprintf(watch_path, sizeof watch_path, "%.*s%s%s", (int)(at - watch), watch, uuid, at + 6);
    else
      snprintf(watch_path, sizeof watch_path, "%s", watch);
  }
  FILE* w = watch_path[0] ? fopen(watch_path, "r") : NULL;
  if (w) {
    if (!fgets(watched, sizeof watched, w)) watched[0] = 0;
    watched[strcspn(watched, "\n")] = 0;
    fclose(w);
  }
  dprintf(fd, "nvidia-cuda-mps-control %s %s [watch %s]\n", uuid[0] ? uuid : "-", line, watched);
  close(fd);
}

/* "[2026-02-06 09:34:17.770 Control   261] message" */
static void ControlLog(const char* source, long pid, const char* format, ...) {
  char path[MAX_PATH], message[2048], stamp[32];
  snprintf(path, sizeof path, "%s/control.log", log_dir);
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof message, format, args);
  va_end(args);
  struct timeval now;
  gettimeofday(&now, NULL);
  struct tm tm;
  localtime_r(&now.tv_sec, &tm);
  strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  dprintf(fd, "[%s.%03ld %s %5ld] %s\n", stamp, (long)(now.tv_usec / 1000), source, pid, message);
  close(fd);
}

static long ReadNumberFile(const char* path, long fallback) {
  FILE* f = fopen(path, "r");
  if (!f) return fallback;
  long value = fallback;
  if (fscanf(f, "%ld", &value) != 1) value = fallback;
  fclose(f);
  return value;
}

/* The simulated server's clients; their count. */
static int Clients(long* pids, int max) {
  char path[MAX_PATH];
  FakePath(path, ".clients");
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  int n = 0;
  while (n < max && fscanf(f, "%ld", &pids[n]) == 1)
    ++n;
  fclose(f);
  return n;
}

static long ServerPid(void) {
  return (long)getpid() + 1; /* a pseudo server, never a real process */
}

/* Sizes as the MPS interface takes them: digits and an optional K, M or G. */
static int ValidSize(const char* text) {
  size_t n = strspn(text, "0123456789");
  if (n == 0) return 0;
  return text[n] == 0 || ((text[n] == 'K' || text[n] == 'M' || text[n] == 'G') && !text[n + 1]);
}

static void Answer(int fd, const char* command) {
  char verb[64] = "", a[64] = "", b[64] = "", c[64] = "", extra[8] = "";
  int n = sscanf(command, "%63s %63s %63s %63s %7s", verb, a, b, c, extra);
  long clients[64];
  int count = Clients(clients, 64);
  if (strcmp(verb, "get_default_active_thread_percentage") == 0 && n == 1) {
    dprintf(fd, "%.1f\n", default_percentage);
  } else if (strcmp(verb, "set_default_active_thread_percentage") == 0 && n == 2) {
    double value = atof(a);
    if (strspn(a, "0123456789.") != strlen(a) || value <= 0 || value > 100) {
      dprintf(fd, "Invalid percentage %s\n", a);
      return;
    }
    default_percentage = value;
  } else if (strcmp(verb, "set_default_device_pinned_mem_limit") == 0 && n == 3) {
    if (strcmp(a, "0") != 0 || !ValidSize(b)) {
      dprintf(fd, "Invalid device or limit: %s %s\n", a, b);
      return;
    }
    snprintf(default_limit, sizeof default_limit, "%s", b);
  } else if (strcmp(verb, "get_default_device_pinned_mem_limit") == 0 && n == 2) {
    dprintf(fd, "%s\n", default_limit[0] ? default_limit : "0");
  } else if (strcmp(verb, "get_server_list") == 0 && n == 1) {
    if (count > 0) dprintf(fd, "%ld\n", ServerPid());
  } else if (strcmp(verb, "get_client_list") == 0 && n == 2) {
    if (atol(a) == ServerPid())
      for (int i = 0; i < count; ++i)
        dprintf(fd, "%ld\n", clients[i]);
  } else if ((strcmp(verb, "set_active_thread_percentage") == 0 && n == 3) ||
             (strcmp(verb, "set_device_pinned_mem_limit") == 0 && n == 4) ||
             (strcmp(verb, "terminate_client") == 0 && n == 3)) {
    if (count == 0 || atol(a) != ServerPid()) dprintf(fd, "Server %s not found\n", a);
  } else if (strcmp(verb, "quit") == 0 && n == 1) {
    /* answered by the caller */
  } else {
    dprintf(fd, "Unrecognized command \"%s\"\n", command);
  }
}

/* What the behaviour file says now: 0 none, 1 exit, 2 hang, 3 fault. */
static int Behaviour(void) {
  char path[MAX_PATH], word[16] = "";
  FakePath(path, ".behaviour");
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  int got = fscanf(f, "%15s", word);
  fclose(f);
  if (got != 1) return 0;
  if (strcmp(word, "hang") == 0) return 2;
  const int event = strcmp(word, "exit") == 0 ? 1 : strcmp(word, "fault") == 0 ? 3 : 0;
  if (event) {
    char done[MAX_PATH];
    snprintf(done, sizeof done, "%s.done", path);
    rename(path, done);
  }
  return event;
}

static void ApplyBehaviour(long pid) {
  switch (Behaviour()) {
    case 1:
      Transcript("died");
      _exit(1); /* like a crash: socket and pid file stay */
    case 2:
      if (!hanging) Transcript("hangs");
      hanging = 1;
      break;
    case 3:
      Transcript("server fault");
      ControlLog("Control", pid, "Server encountered a fatal exception. Shutting down");
      ControlLog("Control", pid, "Server %ld exited with status 1", ServerPid());
      break;
  }
}

static int RunDaemon(void) {
  long pid = (long)getpid();
  mkdir(pipe_dir, 0755);
  mkdir(log_dir, 0755);
  char pid_path[MAX_PATH], socket_path[MAX_PATH], delay_path[MAX_PATH];
  snprintf(pid_path, sizeof pid_path, "%s/nvidia-cuda-mps-control.pid", pipe_dir);
  snprintf(socket_path, sizeof socket_path, "%s/control", pipe_dir);
  long running = ReadNumberFile(pid_path, 0);
  if (running > 0 && running != pid && kill((pid_t)running, 0) == 0) {
    ControlLog("Control", pid, "An instance of this daemon is already running");
    return 1;
  }
  FakePath(delay_path, ".start-delay-ms");
  long delay = ReadNumberFile(delay_path, 0);
  Transcript("%s%s", foreground ? "-f" : "-d", delay > 0 ? " (slow start)" : "");
  if (delay > 0) usleep((useconds_t)delay * 1000);
  struct stat st;
  if (stat(pipe_dir, &st) != 0) return 1; /* taken away while it started: nothing to listen in */

  FILE* f = fopen(pid_path, "w");
  if (f) {
    fprintf(f, "%ld\n", pid);
    fclose(f);
  }
  int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un address = {.sun_family = AF_UNIX};
  if (strlen(socket_path) >= sizeof address.sun_path) return 1;
  strcpy(address.sun_path, socket_path);
  unlink(socket_path);
  if (listener < 0 || bind(listener, (struct sockaddr*)&address, sizeof address) != 0 ||
      listen(listener, 16) != 0)
    return 1;
  ControlLog("Control", pid, "Starting control daemon using socket %s", socket_path);
  ControlLog("Control", pid,
             "To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY=%s",
             pipe_dir);
  ControlLog("Control", pid, "CUDA MPS Control binary version: 13000");
  for (;;) {
    ApplyBehaviour(pid);
    if (hanging) {
      usleep(100 * 1000);
      continue;
    }
    struct pollfd ready = {listener, POLLIN, 0};
    if (poll(&ready, 1, 100) <= 0) continue;
    int client = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
    if (client < 0) continue;
    ControlLog("Control", pid, "Accepting connection...");
    ControlLog("Control", pid, "NEW UI");
    char command[MAX_COMMAND];
    size_t used = 0;
    for (;;) {
      struct pollfd in = {client, POLLIN, 0};
      if (poll(&in, 1, 2000) <= 0) break;
      ssize_t got = read(client, command + used, sizeof command - 1 - used);
      if (got <= 0) break;
      used += (size_t)got;
      if (memchr(command, '\n', used) || used == sizeof command - 1) break;
    }
    command[used] = 0;
    command[strcspn(command, "\n")] = 0;
    ApplyBehaviour(pid); /* a hang that began while this command was on its way */
    if (hanging) {
      close(client);
      continue;
    }
    ControlLog("Control", pid, "Cmd:%s", command);
    Transcript("cmd %s", command);
    char answer_delay[MAX_PATH];
    FakePath(answer_delay, ".answer-delay-ms");
    long wait_ms = ReadNumberFile(answer_delay, 0);
    if (wait_ms > 0) usleep((useconds_t)wait_ms * 1000);
    Answer(client, command);
    close(client);
    ControlLog("Control", pid, "UI closed");
    if (strcmp(command, "quit") == 0) {
      ControlLog("Control", pid, "Exit");
      Transcript("quit");
      unlink(socket_path);
      unlink(pid_path);
      return 0;
    }
  }
}

static int SendCommands(void) {
  char socket_path[MAX_PATH], line[MAX_COMMAND];
  snprintf(socket_path, sizeof socket_path, "%s/control", pipe_dir);
  int status = 0;
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\n")] = 0;
    if (!line[0]) continue;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    snprintf(address.sun_path, sizeof address.sun_path, "%s", socket_path);
    if (fd < 0 || connect(fd, (struct sockaddr*)&address, sizeof address) != 0) {
      fprintf(stderr, "Cannot find MPS control daemon process\n");
      return 1;
    }
    dprintf(fd, "%s\n", line);
    char buffer[4096];
    ssize_t got;
    /* A hung daemon never answers: this waits, as the real client does. */
    while ((got = read(fd, buffer, sizeof buffer)) > 0)
      fwrite(buffer, 1, (size_t)got, stdout);
    close(fd);
  }
  return status;
}

int main(int argc, char** argv) {
  Env(pipe_dir, "CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps");
  Env(log_dir, "CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps");
  Env(fake_dir, "TESSERA_FAKE_MPS_DIR", "");
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  snprintf(uuid, sizeof uuid, "%s", visible ? visible : "");
  signal(SIGPIPE, SIG_IGN);
  if (argc == 2 && strcmp(argv[1], "-f") == 0) {
    foreground = 1;
    return RunDaemon();
  }
  if (argc == 2 && strcmp(argv[1], "-d") == 0) {
    pid_t child = fork();
    if (child < 0) return 1;
    if (child > 0) return 0; /* the daemon goes on in the background */
    setsid();
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    if (null > 2) close(null);
    _exit(RunDaemon());
  }
  if (argc != 1) {
    fprintf(stderr, "usage: nvidia-cuda-mps-control [-d | -f]\n");
    return 2;
  }
  return SendCommands();
}
