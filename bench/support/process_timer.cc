#include "support/process_timer.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

extern char** environ;

namespace tessera::bench {

int RunQuietly(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

namespace {

ProcessTimings Summarize(std::vector<double> samples, int failures) {
  ProcessTimings t;
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    return samples[std::min(samples.size() - 1, size_t(q * samples.size()))];
  };
  t.runs = static_cast<int>(samples.size());
  t.failures = failures;
  t.min_ms = samples.front();
  t.p50_ms = at(0.50);
  t.p90_ms = at(0.90);
  t.p99_ms = at(0.99);
  t.max_ms = samples.back();
  return t;
}

}  // namespace

std::vector<ProcessTimings> TimeProcessesInterleaved(
    const std::vector<std::vector<std::string>>& commands, int runs, int warmup) {
  for (int i = 0; i < warmup; ++i)
    for (const auto& argv : commands)
      RunQuietly(argv);
  std::vector<std::vector<double>> samples(commands.size());
  std::vector<int> failures(commands.size(), 0);
  for (int i = 0; i < runs; ++i) {
    for (size_t c = 0; c < commands.size(); ++c) {
      // Alternate which command goes first, so neither always follows the other.
      size_t which = i % 2 == 0 ? c : commands.size() - 1 - c;
      auto start = std::chrono::steady_clock::now();
      bool ok = RunQuietly(commands[which]) == 0;
      auto end = std::chrono::steady_clock::now();
      if (!ok) ++failures[which];
      samples[which].push_back(std::chrono::duration<double, std::milli>(end - start).count());
    }
  }
  std::vector<ProcessTimings> out;
  for (size_t c = 0; c < commands.size(); ++c)
    out.push_back(Summarize(std::move(samples[c]), failures[c]));
  return out;
}

ProcessTimings TimeProcess(const std::vector<std::string>& argv, int runs, int warmup) {
  return TimeProcessesInterleaved({argv}, runs, warmup).front();
}

std::string FormatTimings(const std::string& name, const ProcessTimings& t) {
  char line[256];
  std::snprintf(line, sizeof line,
                "%s: runs %d, min %.2f ms, p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms, "
                "failures %d",
                name.c_str(), t.runs, t.min_ms, t.p50_ms, t.p90_ms, t.p99_ms, t.max_ms, t.failures);
  return line;
}

}  // namespace tessera::bench
