// What hostile files cost under the bounded readers, printed as figures. Each case runs in a
// child process of its own, so its peak RSS (VmHWM) is its own:
//  - a billion-laughs YAML (nine levels of ten aliases) through LoadBoundedYaml, and, for
//    scale, the first 10^6 of its 10^9 expanded nodes converted to JSON the way a loader
//    without the bound did;
//  - the largest document the default bounds accept (100,000 nodes);
//  - /dev/zero, a FIFO and a 2 GiB sparse file through ReadBoundedFile;
//  - CheckJsonNesting over a 100,000-deep JSON array.
// Usage: bounded_readers_bench
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/bounded_file.h"
#include "common/bounded_yaml.h"
#include "common/untrusted_text.h"
#include "support/hostile_files.h"

namespace {

using Clock = std::chrono::steady_clock;

long StatusKb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::strlen(field)));
  }
  return -1;
}

// Runs `body` in a child; prints the time it took and the child's peak RSS above its start.
void Case(const char* what, const std::function<std::string()>& body) {
  std::fflush(stdout);
  pid_t pid = ::fork();
  if (pid == 0) {
    const long base = StatusKb("VmRSS:");
    auto start = Clock::now();
    std::string outcome = body();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    std::printf("%-52s %9.2f ms  peak RSS +%6ld kB  %s\n", what, ms, StatusKb("VmHWM:") - base,
                outcome.c_str());
    std::fflush(stdout);
    ::_exit(0);
  }
  ::waitpid(pid, nullptr, 0);
}

// The conversion loaders did before the bound (YAML to JSON, aliases expanded), stopped after
// `budget` nodes.
nlohmann::json Convert(const YAML::Node& node, size_t* budget) {
  if (*budget == 0) return nullptr;
  --*budget;
  if (node.IsScalar()) return node.Scalar();
  nlohmann::json out = node.IsMap() ? nlohmann::json::object() : nlohmann::json::array();
  for (const auto& item : node) {
    if (node.IsMap()) {
      out[item.first.Scalar()] = Convert(item.second, budget);
    } else {
      out.push_back(Convert(item, budget));
    }
  }
  return out;
}

std::string Outcome(const tessera::Result<std::string>& result) {
  return result ? "read " + std::to_string(result->size()) + " bytes" : result.error().message;
}

}  // namespace

int main() {
  using namespace tessera;
  const std::string bomb = testing::AliasBomb("", "laughs");
  std::printf("bounded readers: what hostile input costs (%zu-byte billion-laughs YAML)\n",
              bomb.size());
  Case("billion laughs, LoadBoundedYaml (100,000 nodes)", [&] {
    auto node = LoadBoundedYaml(bomb);
    return node ? std::string("accepted?!") : node.error().message;
  });
  Case("billion laughs, unbounded: first 10^6 of 10^9 nodes", [&] {
    size_t budget = 1'000'000;
    auto json = Convert(YAML::Load(bomb), &budget);
    return std::string("converted 10^6 nodes; the whole is 1000x that");
  });
  std::string dense = "[";
  for (int i = 0; i < 99'998; ++i)
    dense += i ? ",x" : "x";
  dense += "]";
  Case("largest accepted: 99,999-item flow list", [&] {
    auto node = LoadBoundedYaml(dense);
    return node ? "accepted, " + std::to_string(node->size()) + " items" : node.error().message;
  });
  char dir[] = "/tmp/bounded-bench-XXXXXX";
  if (!::mkdtemp(dir)) return 1;
  const std::string fifo = std::string(dir) + "/fifo", sparse = std::string(dir) + "/sparse";
  ::mkfifo(fifo.c_str(), 0600);
  int fd = ::open(sparse.c_str(), O_WRONLY | O_CREAT, 0600);
  if (fd < 0 || ::ftruncate(fd, off_t{2} << 30) != 0) return 1;
  ::close(fd);
  Case("ReadBoundedFile /dev/zero (1 MiB limit)",
       [] { return Outcome(ReadBoundedFile("/dev/zero", kMaxConfigFileBytes)); });
  Case("ReadBoundedFile FIFO", [&] { return Outcome(ReadBoundedFile(fifo, kMaxConfigFileBytes)); });
  Case("ReadBoundedFile 2 GiB sparse file",
       [&] { return Outcome(ReadBoundedFile(sparse, kMaxConfigFileBytes)); });
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  Case("CheckJsonNesting, 100,000-deep array (200 KB)", [&] {
    auto checked = CheckJsonNesting(deep, "claim");
    return checked ? std::string("accepted?!") : checked.error().message;
  });
  ::unlink(fifo.c_str());
  ::unlink(sparse.c_str());
  ::rmdir(dir);
  return 0;
}
