// How long the pure Windows steps take on the 4xT4 WS2022 snapshot: parsing the snapshot, planning
// the mounts for every GPU, and parsing a device string. Prints Google Benchmark's table.
#include <benchmark/benchmark.h>

#include <fstream>
#include <sstream>

#include "windows/windows.h"

namespace {

std::string Fixture(const char* name) {
  std::ifstream in(std::string(TESSERA_FIXTURES_DIR) + "/" + name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void BM_ParseSnapshot(benchmark::State& state) {
  std::string text = Fixture("ws2022-aws-4xt4.json");
  for (auto _ : state) {
    auto s = tessera::windows::ParseSnapshot(text);
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_ParseSnapshot);

void BM_PlanMountsAllGpus(benchmark::State& state) {
  auto s = tessera::windows::ParseSnapshot(Fixture("ws2022-aws-4xt4.json"));
  tessera::windows::MountsOptions options;
  options.selection.all = true;
  for (auto _ : state) {
    auto plan = tessera::windows::PlanMounts(*s, options);
    benchmark::DoNotOptimize(plan);
  }
}
BENCHMARK(BM_PlanMountsAllGpus);

void BM_ParseDeviceString(benchmark::State& state) {
  for (auto _ : state) {
    auto r =
        tessera::windows::ParseDeviceString("vpci-location-path://PCIROOT(0)#PCI(0100)#PCI(0000)");
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_ParseDeviceString);

}  // namespace

BENCHMARK_MAIN();
