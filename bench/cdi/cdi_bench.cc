// CDI spec generation on the 8-GPU HGX H100 fixture: the whole `tessera cdi generate` process
// (what a node boot or driver-upgrade hook pays) and the in-process steps.
//
//   cdi_bench [ROOT]     ROOT defaults to the materialised hgx-h100-dgx fixture
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cdi/cdi.h"
#include "inventory/inventory.h"
#include "support/process_timer.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

struct Figures {
  double min_ms, median_ms, p90_ms;
};

Figures Measure(int runs, const std::function<void()>& body) {
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    auto start = Clock::now();
    body();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms.front(), ms[ms.size() / 2], ms[ms.size() * 9 / 10]};
}

void Print(const char* what, int runs, Figures f) {
  std::printf("%-58s min %8.3f ms  median %8.3f ms  p90 %8.3f ms  (%d runs)\n", what, f.min_ms,
              f.median_ms, f.p90_ms, runs);
}

std::string MaterializedHgx() {
  std::string command = std::string("python3 ") + TESSERA_SOURCE_DIR +
                        "/tests/fixtures/materialize.py --cached hgx-h100-dgx " +
                        TESSERA_BINARY_DIR + "/fixtures";
  FILE* pipe = popen(command.c_str(), "r");
  char buffer[4096] = {};
  std::string out;
  while (fgets(buffer, sizeof buffer, pipe))
    out += buffer;
  if (pclose(pipe) != 0) return {};
  while (!out.empty() && out.back() == '\n')
    out.pop_back();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string root = argc > 1 ? argv[1] : MaterializedHgx();
  if (root.empty()) {
    std::fprintf(stderr, "cdi_bench: could not materialise the hgx-h100-dgx fixture\n");
    return 1;
  }
  std::string tessera = std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera";
  std::string out_dir = std::string(TESSERA_BINARY_DIR) + "/bench-cdi-out";
  std::printf("fixture: %s\n", root.c_str());

  tessera::inventory::ReadOptions read;
  read.root = root;
  auto inv = tessera::inventory::ReadInventory(read);
  if (!inv) {
    std::fprintf(stderr, "cdi_bench: %s\n", inv.error().message.c_str());
    return 1;
  }
  auto built = tessera::cdi::BuildSpecs(*inv, {});
  if (!built || built->specs.empty()) {
    std::fprintf(stderr, "cdi_bench: no spec built\n");
    return 1;
  }
  std::printf("spec: %s, %zu devices, %zu mounts, %zu bytes JSON\n", built->specs[0].kind.c_str(),
              built->specs[0].devices.size(), built->specs[0].container_edits.mounts.size(),
              tessera::cdi::ToJson(built->specs[0]).size());

  const int runs = 200;
  Print("in-process BuildSpecs (inventory already read)", 2000, Measure(2000, [&] {
          auto b = tessera::cdi::BuildSpecs(*inv, {});
          if (!b) std::abort();
        }));
  Print("in-process BuildSpecs + ToJson", 2000, Measure(2000, [&] {
          auto b = tessera::cdi::BuildSpecs(*inv, {});
          auto text = tessera::cdi::ToJson(b->specs[0]);
          if (text.empty()) std::abort();
        }));
  Print("in-process ReadInventory + BuildSpecs + ToJson", runs, Measure(runs, [&] {
          auto i = tessera::inventory::ReadInventory(read);
          auto b = tessera::cdi::BuildSpecs(*i, {});
          auto text = tessera::cdi::ToJson(b->specs[0]);
          if (text.empty()) std::abort();
        }));
  Print("in-process ParseSpec + ValidateSpec of the spec", runs, Measure(runs, [&] {
          auto problems = tessera::cdi::CheckSpecText(tessera::cdi::ToJson(built->specs[0]));
          if (!problems.empty()) std::abort();
        }));
  Print("process: tessera --version (start-up floor)", runs, Measure(runs, [&] {
          tessera::bench::RunQuietly({tessera, "--version"});
        }));
  Print("process: tessera cdi generate --output - (stdout)", runs, Measure(runs, [&] {
          if (tessera::bench::RunQuietly(
                  {tessera, "cdi", "generate", "--root", root, "--output", "-"}) != 0)
            std::abort();
        }));
  Print("process: tessera cdi generate --output-dir DIR (unchanged)", runs, Measure(runs, [&] {
          if (tessera::bench::RunQuietly(
                  {tessera, "cdi", "generate", "--root", root, "--output-dir", out_dir}) != 0) {
            std::abort();
          }
        }));
  return 0;
}
