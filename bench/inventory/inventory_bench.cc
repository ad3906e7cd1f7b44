// Inventory cost on the 8-GPU HGX fixture: in-process (Google Benchmark) and as a whole
// `tessera inventory --format json` process. Goals: ≤2 ms in-process, ≤15 ms whole process.
#include <benchmark/benchmark.h>

#include <cstdio>

#include "inventory/inventory.h"
#include "support/fixture_host.h"
#include "support/process_timer.h"

namespace {

std::string& FixtureRoot() {
  static std::string root = tessera::testing::MaterializeHost("hgx-h100-dgx");
  return root;
}

void BM_ReadInventoryHgx(benchmark::State& state) {
  tessera::inventory::ReadOptions options;
  options.root = FixtureRoot();
  for (auto _ : state) {
    auto inventory = tessera::inventory::ReadInventory(options);
    benchmark::DoNotOptimize(inventory);
  }
}
BENCHMARK(BM_ReadInventoryHgx)->Unit(benchmark::kMicrosecond);

void BM_ReadInventoryHgxToJson(benchmark::State& state) {
  tessera::inventory::ReadOptions options;
  options.root = FixtureRoot();
  for (auto _ : state) {
    auto json = tessera::inventory::ToJson(*tessera::inventory::ReadInventory(options));
    benchmark::DoNotOptimize(json);
  }
}
BENCHMARK(BM_ReadInventoryHgxToJson)->Unit(benchmark::kMicrosecond);

void BM_ReadInventoryRealHost(benchmark::State& state) {
  tessera::inventory::ReadOptions options;
  for (auto _ : state) {
    auto inventory = tessera::inventory::ReadInventory(options);
    benchmark::DoNotOptimize(inventory);
  }
}
BENCHMARK(BM_ReadInventoryRealHost)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  std::string tessera = std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera";
  auto whole = tessera::bench::TimeProcess(
      {tessera, "inventory", "--root", FixtureRoot(), "--format", "json"}, 200);
  std::printf("%s\n", tessera::bench::FormatTimings("whole process: tessera inventory --root "
                                                    "<hgx-h100-dgx> --format json",
                                                    whole)
                          .c_str());
  auto baseline = tessera::bench::TimeProcess({"/bin/true"}, 200);
  std::printf("%s\n", tessera::bench::FormatTimings("baseline: /bin/true", baseline).c_str());
  return whole.failures == 0 ? 0 : 1;
}
