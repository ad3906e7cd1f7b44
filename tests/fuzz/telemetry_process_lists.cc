// NVML's raw per-process records (what a fill call leaves in the buffer) through one pass:
// merging, attribution to a small directory and integration. Whatever the bytes: one entry per
// PID, usage finite and never negative, no holder outside the directory, cursors never go back,
// and the pass's figures within what one GPU can do over the interval (SM-seconds, energy at the
// fallback power bound, memory at the fallback board size).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>

#include "telemetry/telemetry.h"

namespace {

bool Finite(const tessera::telemetry::Usage& u) {
  return std::isfinite(u.sm_seconds) && std::isfinite(u.memory_gib_seconds) &&
         std::isfinite(u.energy_joules) && u.sm_seconds >= 0 && u.memory_gib_seconds >= 0 &&
         u.energy_joules >= -1e-9;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace t = tessera::telemetry;
  namespace nvml = tessera::nvml;
  if (size < 16) return 0;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // Header: split points and the clock; then compute records, MPS records, samples.
  const size_t a = (data[0] * 24u) % (size - 16 + 1);
  const size_t b = a + (data[1] * 24u) % (size - 16 - a + 1);
  const int64_t now_ms = static_cast<int64_t>(data[2]) * 1000 + 1000;
  const uint64_t energy = static_cast<uint64_t>(data[3]) << 20;
  std::string_view body = bytes.substr(16);
  auto compute = nvml::ProcessRecords(body.substr(0, a), false);
  auto mps = nvml::ProcessRecords(body.substr(a, b - a), true);
  auto samples = nvml::UtilizationRecords(body.substr(b));
  auto merged = t::MergeProcessLists({compute, mps}, 64);
  std::set<uint32_t> pids;
  for (const auto& p : merged) {
    if (p.pid == 0 || !pids.insert(p.pid).second) __builtin_trap();
  }
  if (merged.size() > 64) __builtin_trap();

  t::GpuReading reading;
  reading.identity.pci_address = "0000:18:00.0";
  reading.processes = merged;
  reading.samples = samples;
  reading.energy_mj = energy;
  t::Directory directory;
  t::Holder holder;
  holder.key = "c-a";
  holder.tenancy = "team-a";
  holder.runtime_id = std::string(64, 'a');
  holder.gpus = {{"0000:18:00.0", static_cast<double>(data[4]) / 128.0}};
  directory.holders.push_back(holder);
  t::PidContainers containers;
  for (uint32_t pid : pids) {
    if (pid % 3 == 0)
      containers[pid] = {t::CgroupContainer{t::Runtime::kPodman, std::string(64, 'a'), ""},
                         static_cast<int64_t>(pid % 7) * 1000};
    else if (pid % 3 == 1)
      containers[pid] = {std::nullopt, 0};  // a host process; the rest are gone
  }
  t::Cursors cursors;
  cursors["0000:18:00.0"] = {static_cast<uint64_t>(data[5]) << 16, energy / 2,
                             static_cast<int64_t>(data[6]) * 100};
  const t::GpuCursor before = cursors["0000:18:00.0"];
  auto pass = t::Integrate({reading}, containers, directory, cursors, now_ms);
  const t::GpuCursor& after = cursors["0000:18:00.0"];
  if (after.sample_us < before.sample_us) __builtin_trap();
  if (pass.gpus.size() != 1 || !Finite(pass.gpus[0].unattributed)) __builtin_trap();
  t::Usage total = pass.gpus[0].unattributed;
  for (const auto& h : pass.holders) {
    if (h.holder >= directory.holders.size() || !Finite(h.delta)) __builtin_trap();
    total += h.delta;
    for (const auto& gpu : h.gpus)
      if (gpu.memory_bytes > (1ull << 40) || gpu.sm_percent > 100.0 + 1e-9) __builtin_trap();
  }
  // One sample period (1 s at most) before the cursor's, then no more than the time passed.
  const double seconds = now_ms / 1000.0;
  if (total.sm_seconds > seconds + 1.0 + 1e-6) __builtin_trap();
  const double dt = std::max<int64_t>(0, now_ms - before.sampled_ms) / 1000.0;
  if (before.sampled_ms > 0 && total.energy_joules > 1500.0 * dt + 1e-6) __builtin_trap();
  if (pass.gpus[0].sm_percent > 100.0 + 1e-9) __builtin_trap();
  return 0;
}
