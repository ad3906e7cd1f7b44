// The failed-NVLink list a fabric manager's library fills in (fmGetNvlinkFailedDevices), as raw
// bytes: decoded, then mapped to the GPUs it touches. The first byte picks the active partitions.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>

#include "fabricmanager/fabric_health.h"
#include "fabricmanager/nvfm_library.h"

namespace {

using namespace tessera;
using namespace tessera::fabricmanager;

const topology::PartitionTable& Board() {
  static const topology::PartitionTable table = [] {
    topology::PartitionTable t = topology::HgxH100Table();
    for (int m = 1; m <= 8; ++m)
      t.pci_addresses[m] = "0000:1" + std::to_string(m) + ":00.0";
    return t;
  }();
  return table;
}

bool Printable(const std::string& text) {
  for (unsigned char c : text)
    if (c < 0x20 || c >= 0x7f) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  auto raw = std::make_unique<nvfm::NvlinkFailedDevices>();
  std::memset(raw.get(), 0, sizeof *raw);
  std::memcpy(raw.get(), data + 1, std::min(size - 1, sizeof *raw));
  // Small counts reach the mapping more often than the raw words would.
  if (data[0] & 0x80) {
    raw->num_gpus %= 17;
    raw->num_switches %= 13;
    for (auto& info : raw->gpu_info)
      info.num_ports %= 65;
    for (auto& info : raw->switch_info)
      info.num_ports %= 65;
  }
  auto decoded = DecodeNvlinkFailedDevices(*raw);
  if (!decoded) return 0;
  if (decoded->gpus.size() > 16 || decoded->switches.size() > 12) __builtin_trap();
  std::vector<uint32_t> active;
  if (data[0] & 0x40) active.push_back(data[0] % 15);
  FabricFaultList list = FabricFaults(*decoded, Board(), active, 0);
  if (list.faults.size() > 16 + 12 * 8 || list.unplaced.size() > 16) __builtin_trap();
  std::set<std::string> keys;
  for (const auto& fault : list.faults) {
    if (fault.signal.kind != health::SignalKind::kFabricFatal) __builtin_trap();
    if (fault.signal.detail.size() > kMaxFaultDetail || !Printable(fault.signal.detail))
      __builtin_trap();
    bool known = false;
    for (const auto& [module, address] : Board().pci_addresses)
      known |= address == fault.signal.gpu;
    if (!known || !keys.insert(fault.key).second) __builtin_trap();
  }
  for (const auto& text : list.unplaced)
    if (text.size() > kMaxFaultDetail || !Printable(text)) __builtin_trap();
  return 0;
}
