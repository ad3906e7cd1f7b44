// The fabric manager's bus IDs, and its failed-NVLink list as values.
#include <algorithm>
#include <cctype>
#include <cstring>

#include "common/pci_address.h"
#include "fabricmanager/fabricmanager.h"
#include "fabricmanager/nvfm_library.h"

namespace tessera::fabricmanager {
namespace {

std::string PrintableUuid(const char* raw, size_t size) {
  std::string out;
  for (size_t i = 0; i < size && raw[i] != '\0'; ++i) {
    const unsigned char c = static_cast<unsigned char>(raw[i]);
    if (c > 0x20 && c < 0x7f) out += static_cast<char>(c);
  }
  return out;
}

Result<NvlinkFailedDevice> DecodeDevice(const nvfm::NvlinkFailedDeviceInfo& info, const char* what,
                                        unsigned index) {
  if (info.num_ports > static_cast<unsigned>(nvfm::kMaxNvlinkPorts)) {
    return Internal("fmGetNvlinkFailedDevices: " + std::string(what) + " " + std::to_string(index) +
                    " has " + std::to_string(info.num_ports) +
                    " failed ports, more than the API's 64");
  }
  NvlinkFailedDevice device;
  device.pci_address = CanonicalPciAddress(info.pci_bus_id, sizeof info.pci_bus_id);
  if (!IsPciAddress(device.pci_address)) device.pci_address.clear();
  device.uuid = PrintableUuid(info.uuid, sizeof info.uuid);
  device.ports.assign(info.port_num, info.port_num + info.num_ports);
  std::sort(device.ports.begin(), device.ports.end());
  device.ports.erase(std::unique(device.ports.begin(), device.ports.end()), device.ports.end());
  return device;
}

}  // namespace

std::string CanonicalPciAddress(const char* raw, size_t size) {
  std::string text(raw, strnlen(raw, size));
  for (char& c : text)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t colon = text.find(':');
  if (colon != std::string::npos && colon > 4 && text.find_first_not_of('0') >= colon - 4) {
    text.erase(0, colon - 4);
  }
  if (text.find_first_not_of("0:.") == std::string::npos) return "";
  return text;
}

Result<NvlinkFailedDevices> DecodeNvlinkFailedDevices(const nvfm::NvlinkFailedDevices& raw) {
  if (raw.num_gpus > static_cast<unsigned>(nvfm::kMaxGpus) ||
      raw.num_switches > static_cast<unsigned>(nvfm::kMaxNvSwitches)) {
    return Internal("fmGetNvlinkFailedDevices: " + std::to_string(raw.num_gpus) + " GPUs and " +
                    std::to_string(raw.num_switches) +
                    " NVSwitches, more than the API's 16 and 12");
  }
  NvlinkFailedDevices out;
  for (unsigned i = 0; i < raw.num_gpus; ++i) {
    auto device = DecodeDevice(raw.gpu_info[i], "GPU", i);
    if (!device) return device.error();
    out.gpus.push_back(std::move(*device));
  }
  for (unsigned i = 0; i < raw.num_switches; ++i) {
    auto device = DecodeDevice(raw.switch_info[i], "NVSwitch", i);
    if (!device) return device.error();
    out.switches.push_back(std::move(*device));
  }
  return out;
}

}  // namespace tessera::fabricmanager
