// The HCS documents hcsshim sends for the chain, as far as a snapshot predicts them (field names
// and types from hcsshim's internal/hcs/schema2 and the public HCS schema reference):
// - the utility VM's ComputeTopology.Memory (internal/uvm/create_wcow.go), from the annotations;
// - the ModifySettingRequest that hot-adds the GPU (uvm.AssignDevice): ResourcePath
//   VirtualMachine/Devices/VirtualPci/<vmbus GUID>, Settings a VirtualPciDevice;
// - the container's AssignedDevices (hcsdoc_wcow.go parseAssignedDevices): the location path
//   device-util finds inside the utility VM, which only the running VM knows.
#include <nlohmann/json.hpp>

#include "windows/hyperv.h"

namespace tessera::windows {
namespace {

using ojson = nlohmann::ordered_json;

// hcsshim sets VirtualPciDevice.PropagateNumaAffinity from this build (osversion.V25H1Server).
constexpr uint32_t kPropagateNumaAffinityFrom = 26100;
// VMBus channel type of every device assigned through vPCI (controller/device/vpci/utils.go).
constexpr const char* kVmBusChannelType = "{44c4f61d-4444-4400-9d52-802e27ede19f}";
constexpr const char* kLocationPathPlaceholder =
    "<the GPU's location path in the utility VM, from device-util>";

}  // namespace

std::string VmBusGuidFor(const std::string& instance_id) {
  // FNV-1a, 128 bits (offset basis and prime from the FNV specification).
  unsigned __int128 hash =
      (static_cast<unsigned __int128>(0x6c62272e07bb0142ull) << 64) | 0x62b821756295c58dull;
  const unsigned __int128 prime = (static_cast<unsigned __int128>(1) << 88) | 0x13b;
  for (unsigned char c : instance_id) {
    hash ^= c;
    hash *= prime;
  }
  unsigned char bytes[16];
  for (int i = 0; i < 16; ++i)
    bytes[i] = static_cast<unsigned char>(hash >> (8 * (15 - i)));
  bytes[6] = static_cast<unsigned char>((bytes[6] & 0x0f) | 0x80);  // version 8 (custom)
  bytes[8] = static_cast<unsigned char>((bytes[8] & 0x3f) | 0x80);  // RFC 9562 variant
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 0x0f];
  }
  return out;
}

Result<std::string> HcsDocumentsJson(const Snapshot& snapshot, const HyperVGpuPlan& plan) {
  DeviceRef device{DeviceIdType::kVpciInstanceId, plan.assigned_instance_id};
  // The gate (VirtualPci needs schema 2.3) and the VirtualPciDevice shape are hcs-device's.
  auto device_json = HcsDeviceJson(device, snapshot.MaxSchemaVersion(), Isolation::kHyperV);
  if (!device_json) return device_json.error();
  ojson settings = ojson::parse(*device_json)["VirtualPciDevice"];
  if (snapshot.os.build >= kPropagateNumaAffinityFrom) settings["PropagateNumaAffinity"] = true;

  ojson memory = ojson::object();
  memory["SizeInMB"] = plan.memory_mb;  // AllowOvercommit false (physically backed): omitted
  if (plan.mmio) {
    memory["LowMmioGapInMB"] = plan.mmio->low_gap_mb;
    memory["HighMmioBaseInMB"] = plan.mmio->high_base_mb;
    memory["HighMmioGapInMB"] = plan.mmio->high_gap_mb;
  }
  ojson utility_vm = {{"SchemaVersion", {{"Major", 2}, {"Minor", 1}}},
                      {"VirtualMachine", {{"ComputeTopology", {{"Memory", memory}}}}}};

  std::string guid = VmBusGuidFor(plan.assigned_instance_id);
  ojson assign = {{"ResourcePath", "VirtualMachine/Devices/VirtualPci/" + guid},
                  {"RequestType", "Add"},
                  {"Settings", settings}};
  ojson container = {
      {"AssignedDevices",
       ojson::array({{{"Type", "DeviceInstance"}, {"LocationPath", kLocationPathPlaceholder}}})}};
  std::string vmbus_instance = std::string("VMBUS\\") + kVmBusChannelType + "\\{" + guid + "}";
  ojson run_time = {{"vmbus_instance_id", vmbus_instance},
                    {"device_util", "device-util.exe children --parentID=" + vmbus_instance +
                                        " --property=location"},
                    {"vmbus_guid",
                     "hcsshim draws a random GUID per assignment; this one is derived from the "
                     "instance ID so the output is reproducible"}};
  ojson out = {{"host_schema", FormatSchemaVersion(snapshot.MaxSchemaVersion())},
               {"utility_vm", utility_vm},
               {"assign_device", assign},
               {"container", container},
               {"run_time", run_time}};
  return out.dump(2, ' ', true, ojson::error_handler_t::replace) + "\n";
}

}  // namespace tessera::windows
