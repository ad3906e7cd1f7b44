// Times a whole command (fork + exec + exit) over many runs: what a hook or node-boot script
// pays, start-up included.
#pragma once

#include <string>
#include <vector>

namespace tessera::bench {

struct ProcessTimings {
  double min_ms = 0, p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;
  int runs = 0;
  int failures = 0;
};

// Runs argv `runs` times with stdout/stderr to /dev/null after `warmup` untimed runs.
ProcessTimings TimeProcess(const std::vector<std::string>& argv, int runs, int warmup = 5);
// Several commands timed in turns (run i of each before run i+1 of any), so drift in the
// machine's load falls on all of them alike.
std::vector<ProcessTimings> TimeProcessesInterleaved(
    const std::vector<std::vector<std::string>>& commands, int runs, int warmup = 5);

// Runs argv once, stdout and stderr to /dev/null: its exit status, or -1 when it did not start
// or did not exit.
int RunQuietly(const std::vector<std::string>& argv);
// "name: min 1.23 ms, p50 …" on one line.
std::string FormatTimings(const std::string& name, const ProcessTimings& timings);

}  // namespace tessera::bench
