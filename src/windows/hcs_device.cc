// HCS schema versions by build and the schema `Device` document for an OCI windows.devices entry.
#include <nlohmann/json.hpp>

#include "windows/windows.h"

namespace tessera::windows {
namespace {

struct SchemaRow {
  uint32_t build;
  SchemaVersion schema;
};
// The schema each release's compute service reports at most (HcsGetServiceProperties
// SupportedSchemaVersions): 1809/WS2019, 1903, 2004, WS2022, Windows 11 21H2, 22H2.
constexpr SchemaRow kSchemaByBuild[] = {
    {17763, {2, 1}}, {18362, {2, 2}}, {19041, {2, 3}},
    {20348, {2, 5}}, {22000, {2, 6}}, {22621, {2, 7}},
};

constexpr SchemaVersion kClassGuidSchema{2, 1};
// Device{Type: DeviceInstance, LocationPath} arrived with schema 2.2. hcsshim lets it through at
// 2.1, and WS2019's compute service (2.1) then rejects the whole container document.
constexpr SchemaVersion kLocationPathSchema{2, 2};
constexpr SchemaVersion kVirtualPciSchema{2, 3};

std::string NeedSchema(SchemaVersion need, SchemaVersion have) {
  uint32_t first_build = 0;
  for (const SchemaRow& row : kSchemaByBuild) {
    if (row.schema >= need) {
      first_build = row.build;
      break;
    }
  }
  std::string have_text = have == SchemaVersion{} ? std::string("none") : FormatSchemaVersion(have);
  return "needs HCS schema " + FormatSchemaVersion(need) + " (Windows build " +
         std::to_string(first_build) + " or later); this host supports " + have_text;
}

}  // namespace

Result<Isolation> ParseIsolation(const std::string& text) {
  if (text == "process") return Isolation::kProcess;
  if (text == "hyperv") return Isolation::kHyperV;
  return InvalidArgument("isolation \"" + text + "\" is not process or hyperv");
}

const char* IsolationName(Isolation isolation) {
  return isolation == Isolation::kProcess ? "process" : "hyperv";
}

Result<SchemaVersion> HcsSchemaForBuild(uint32_t build) {
  const SchemaRow* best = nullptr;
  for (const SchemaRow& row : kSchemaByBuild) {
    if (build >= row.build) best = &row;
  }
  if (best == nullptr) {
    return NotFound("Windows build " + std::to_string(build) +
                    " has no HCS schema 2.x (it arrived with build 17763, Windows Server 2019)");
  }
  return best->schema;
}

std::vector<SchemaVersion> HcsSchemaVersionsForBuild(uint32_t build) {
  std::vector<SchemaVersion> out;
  auto max = HcsSchemaForBuild(build);
  if (!max.ok()) return out;
  for (int minor = 1; minor <= max->minor; ++minor)
    out.push_back({2, minor});
  return out;
}

Result<std::string> HcsDeviceJson(const DeviceRef& device, SchemaVersion host_schema,
                                  Isolation isolation) {
  std::string device_string = FormatDeviceString(device);
  nlohmann::ordered_json doc;
  if (isolation == Isolation::kProcess) {
    if (device.IsHyperVOnly()) {
      return InvalidArgument(device_string + ": " + DeviceIdTypeName(device.type) +
                             " assigns a device to a Hyper-V utility VM; a process-isolated "
                             "container takes class://GUID, vpci-class-guid://GUID or "
                             "vpci-location-path://PATH");
    }
    if (device.type == DeviceIdType::kVpciLocationPath) {
      if (host_schema < kLocationPathSchema) {
        return FailedPrecondition(
            device_string + ": Device{Type: DeviceInstance, LocationPath} " +
            NeedSchema(kLocationPathSchema, host_schema) +
            " and would reject the document; on Windows Server 2019 use class/" +
            kDisplayAdapterClassGuid + " (every display adapter becomes visible)");
      }
      doc["Type"] = "DeviceInstance";
      doc["LocationPath"] = device.id;
    } else {
      if (host_schema < kClassGuidSchema) {
        return FailedPrecondition(device_string + ": Device{InterfaceClassGuid} " +
                                  NeedSchema(kClassGuidSchema, host_schema));
      }
      doc["InterfaceClassGuid"] = device.id;
    }
    return doc.dump();
  }
  if (!device.IsHyperVOnly()) {
    return InvalidArgument(device_string + ": " + DeviceIdTypeName(device.type) +
                           " shares a host device with a process-isolated container; a Hyper-V "
                           "isolated container gets devices assigned to its utility VM with "
                           "vpci-instance-id://ID");
  }
  if (host_schema < kVirtualPciSchema) {
    return FailedPrecondition(device_string + ": VirtualPciDevice assignment to a utility VM " +
                              NeedSchema(kVirtualPciSchema, host_schema));
  }
  doc["VirtualPciDevice"]["Functions"] =
      nlohmann::ordered_json::array({{{"DeviceInstancePath", device.id}}});
  return doc.dump();
}

}  // namespace tessera::windows
