// A daemon's files as tessera reads them (tessera doctor's InspectDaemons, the path the keeper's
// takeover takes): the state file, the ready marker and the logs hold any bytes, or are a FIFO,
// a symlink to /dev/zero or a huge sparse file. Nothing blocks, nothing is read past its bound,
// and a PID is believed only from a well-formed state file. The pure parsers the daemon's
// answers and /proc go through get the same bytes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "mps/mps.h"
#include "process/process.h"

namespace {

constexpr char kUuid[] = "GPU-11111111-2222-3333-4444-555555555555";

const std::string& Root() {
  static const std::string root = [] {
    char pattern[] = "/tmp/fuzz-mps-XXXXXX";
    const char* made = ::mkdtemp(pattern);
    if (!made) std::abort();
    return std::string(made);
  }();
  return root;
}

// Puts `bytes` at `path` in the shape `kind` says.
void Place(const std::string& path, std::string_view bytes, uint8_t kind) {
  ::unlink(path.c_str());
  switch (kind % 5) {
    case 0:
    case 1: {
      std::ofstream out(path, std::ios::binary);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      break;
    }
    case 2:
      (void)::mkfifo(path.c_str(), 0644);
      break;
    case 3:
      (void)::symlink("/dev/zero", path.c_str());
      break;
    case 4: {
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        (void)::ftruncate(fd, off_t{1} << 32);  // 4 GiB of holes
        ::close(fd);
      }
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::mps;
  std::string_view text(reinterpret_cast<const char*>(data), size);

  // Pure parsers first.
  if (auto stat = tessera::process::ParseProcStat(text);
      stat && text.rfind(')') == std::string_view::npos)
    __builtin_trap();
  if (auto state = ParseDaemonState(text)) {
    if (state->pid == 0 || ParseDaemonState(FormatDaemonState(*state)) != state) __builtin_trap();
  }
  (void)ParseMemoryLimitAnswer(text);

  // Then the files, three of them cut from the input, each in a shape the input picks.
  const uint8_t kinds = size > 0 ? data[0] : 0;
  const size_t third = size / 3;
  auto paths = PathsFor(Root(), kUuid);
  if (!paths) __builtin_trap();
  std::filesystem::create_directories(paths->log);
  Place(paths->state, text.substr(0, third), kinds);
  Place(paths->ready, text.substr(third, third), kinds >> 3);
  Place(paths->log + "/control.log", text.substr(2 * third), kinds >> 5);

  const auto reports = InspectDaemons(Root());
  if (reports.size() != 1) __builtin_trap();
  const DaemonReport& report = reports.front();
  if (report.control_pid && !ParseDaemonState(text.substr(0, third))) __builtin_trap();
  if (report.marker.size() > 256) __builtin_trap();
  if (report.log.lines > kLogTailBytes) __builtin_trap();
  return 0;
}
