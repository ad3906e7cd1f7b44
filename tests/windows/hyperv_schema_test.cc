// The HCS and OCI documents `tessera windows hyperv-gpu` prints, checked field by field against
// the schemas they claim: a table of the HCS schema2 types (field names and JSON types from
// hcsshim's internal/hcs/schema2 and the public HCS schema reference, SchemaReference.md) and of
// the OCI runtime spec's Windows fields (config-windows.md). An unknown field, a wrong type or an
// enum value the schema lacks fails.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "windows/process.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

const std::string kFixtures = std::string(TESSERA_FIXTURES_DIR) + "/windows/";

// A field's JSON type: a scalar kind, an enum, a reference to another type, an array of one.
struct Field {
  std::string kind;  // "string", "bool", "uint16", "uint64", "int32", "enum", "object", "array",
                     // "string-map", "string-array"
  std::string type;  // the referenced type for object/array
  std::set<std::string> values = {};  // enum
};
using Type = std::map<std::string, Field>;

const std::map<std::string, Type>& HcsTypes() {
  static const std::map<std::string, Type> types = {
      // schema2/compute_system.go (the fields a utility VM document starts with)
      {"ComputeSystem",
       {{"Owner", {"string", ""}},
        {"SchemaVersion", {"object", "Version"}},
        {"HostingSystemId", {"string", ""}},
        {"VirtualMachine", {"object", "VirtualMachine"}},
        {"ShouldTerminateOnLastHandleClosed", {"bool", ""}}}},
      {"Version", {{"Major", {"int32", ""}}, {"Minor", {"int32", ""}}}},
      // schema2/virtual_machine.go (part)
      {"VirtualMachine",
       {{"StopOnReset", {"bool", ""}},
        {"ComputeTopology", {"object", "Topology"}},
        {"ResourcePartitionId", {"string", ""}}}},
      // schema2/topology.go (part)
      {"Topology", {{"Memory", {"object", "VirtualMachineMemory"}}}},
      // schema2/virtual_machine_memory.go
      {"VirtualMachineMemory",
       {{"SizeInMB", {"uint64", ""}},
        {"Backing", {"enum", "", {"Virtual", "Physical", "Hybrid"}}},
        {"AllowOvercommit", {"bool", ""}},
        {"EnableHotHint", {"bool", ""}},
        {"EnableColdHint", {"bool", ""}},
        {"EnableColdDiscardHint", {"bool", ""}},
        {"EnableDeferredCommit", {"bool", ""}},
        {"LowMmioGapInMB", {"uint64", ""}},
        {"HighMmioBaseInMB", {"uint64", ""}},
        {"HighMmioGapInMB", {"uint64", ""}}}},
      // schema2/modify_setting_request.go; RequestType from protocol/guestrequest
      {"ModifySettingRequest",
       {{"ResourcePath", {"string", ""}},
        {"RequestType", {"enum", "", {"Add", "Remove", "PreAdd", "Update"}}},
        {"Settings", {"object", "VirtualPciDevice"}}}},
      // schema2/virtual_pci_device.go, virtual_pci_function.go; AllowDirectTranslatedP2P from the
      // public schema reference
      {"VirtualPciDevice",
       {{"Functions", {"array", "VirtualPciFunction"}}, {"PropagateNumaAffinity", {"bool", ""}}}},
      {"VirtualPciFunction",
       {{"DeviceInstancePath", {"string", ""}},
        {"VirtualFunction", {"uint16", ""}},
        {"AllowDirectTranslatedP2P", {"bool", ""}}}},
      // schema2/container.go (part) and device.go
      {"Container", {{"AssignedDevices", {"array", "Device"}}}},
      {"Device",
       {{"Type", {"enum", "", {"ClassGuid", "DeviceInstance", "GpuMirror"}}},
        {"InterfaceClassGuid", {"string", ""}},
        {"LocationPath", {"string", ""}}}},
      // OCI runtime-spec (config.md, config-windows.md): the fields containerd fills
      {"OciSpec",
       {{"annotations", {"string-map", ""}},
        {"mounts", {"array", "OciMount"}},
        {"windows", {"object", "OciWindows"}}}},
      {"OciMount",
       {{"destination", {"string", ""}},
        {"source", {"string", ""}},
        {"type", {"string", ""}},
        {"options", {"string-array", ""}}}},
      {"OciWindows",
       {{"devices", {"array", "OciWindowsDevice"}}, {"hyperv", {"object", "OciWindowsHyperV"}}}},
      {"OciWindowsDevice", {{"id", {"string", ""}}, {"idType", {"string", ""}}}},
      {"OciWindowsHyperV", {{"utilityVMPath", {"string", ""}}}},
  };
  return types;
}

void Check(const json& value, const Field& field, const std::string& path,
           std::vector<std::string>& problems);

void CheckObject(const json& object, const std::string& type_name, const std::string& path,
                 std::vector<std::string>& problems) {
  const Type& type = HcsTypes().at(type_name);
  if (!object.is_object()) {
    problems.push_back(path + ": expected a " + type_name + " object");
    return;
  }
  for (const auto& [key, value] : object.items()) {
    auto field = type.find(key);
    if (field == type.end()) {
      problems.push_back(path + "." + key + ": " + type_name + " has no such field");
      continue;
    }
    Check(value, field->second, path + "." + key, problems);
  }
}

void Check(const json& value, const Field& field, const std::string& path,
           std::vector<std::string>& problems) {
  auto fail = [&](const std::string& what) { problems.push_back(path + ": " + what); };
  if (field.kind == "string") {
    if (!value.is_string()) fail("expected a string");
  } else if (field.kind == "bool") {
    if (!value.is_boolean()) fail("expected a bool");
  } else if (field.kind == "uint16" || field.kind == "uint64") {
    uint64_t max = field.kind == "uint16" ? 0xffff : UINT64_MAX;
    if (!value.is_number_unsigned() || value.get<uint64_t>() > max) fail("expected " + field.kind);
  } else if (field.kind == "int32") {
    if (!value.is_number_integer() || value.get<int64_t>() > INT32_MAX) fail("expected int32");
  } else if (field.kind == "enum") {
    if (!value.is_string() || !field.values.count(value.get<std::string>())) fail("not in enum");
  } else if (field.kind == "object") {
    CheckObject(value, field.type, path, problems);
  } else if (field.kind == "array") {
    if (!value.is_array()) return fail("expected an array");
    for (size_t i = 0; i < value.size(); ++i)
      CheckObject(value[i], field.type, path + "[" + std::to_string(i) + "]", problems);
  } else if (field.kind == "string-map") {
    if (!value.is_object()) return fail("expected a string map");
    for (const auto& [k, v] : value.items()) {
      if (!v.is_string()) fail(k + ": expected a string");
    }
  } else if (field.kind == "string-array") {
    if (!value.is_array()) return fail("expected an array of strings");
    for (const json& v : value) {
      if (!v.is_string()) fail("expected an array of strings");
    }
  }
}

std::vector<std::string> ProblemsOf(const json& doc, const std::string& type) {
  std::vector<std::string> problems;
  CheckObject(doc, type, type, problems);
  return problems;
}

json RunWindows(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {TesseraBinary(), "windows"};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessResult r = RunProcess(argv);
  json doc = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << r.out << r.err;
  return doc;
}

struct Host {
  const char* file;
  const char* gpu;
};
// Every fixture whose host has HCS schema 2.3 (WS2019's 2.1 refuses the documents).
const Host kHosts[] = {{"ws2022-dda-t4.json", "1"},
                       {"ws2022-dda-rmrr.json", "1"},
                       {"ws2022-no-acs.json", "0"},
                       {"ws2022-t4-not-dismounted.json", "1"}};

TEST(HyperVSchema, HcsDocumentsUseOnlyHcsSchemaFields) {
  for (const Host& h : kHosts) {
    json doc =
        RunWindows({"hyperv-gpu", "--snapshot", kFixtures + h.file, "--gpu", h.gpu, "--format",
                    "hcs", "--force"});  // refused fixtures print their documents only with --force
    EXPECT_EQ(ProblemsOf(doc["utility_vm"], "ComputeSystem"), std::vector<std::string>{}) << h.file;
    EXPECT_EQ(ProblemsOf(doc["assign_device"], "ModifySettingRequest"), std::vector<std::string>{})
        << h.file;
    EXPECT_EQ(ProblemsOf(doc["container"], "Container"), std::vector<std::string>{}) << h.file;
    // The resource path hcsshim formats: VirtualMachine/Devices/VirtualPci/<GUID>.
    EXPECT_TRUE(std::regex_match(
        doc["assign_device"]["ResourcePath"].get<std::string>(),
        std::regex("VirtualMachine/Devices/VirtualPci/"
                   "[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")))
        << doc["assign_device"];
    EXPECT_EQ(doc["assign_device"]["RequestType"], "Add");
    EXPECT_EQ(doc["container"]["AssignedDevices"][0]["Type"], "DeviceInstance");
  }
}

TEST(HyperVSchema, OciFieldsAreTheRuntimeSpecsWindowsFields) {
  for (const Host& h : kHosts) {
    json doc =
        RunWindows({"hyperv-gpu", "--snapshot", kFixtures + h.file, "--gpu", h.gpu, "--format",
                    "oci", "--force"});  // refused fixtures print their documents only with --force
    EXPECT_EQ(ProblemsOf(doc["sandbox"], "OciSpec"), std::vector<std::string>{}) << h.file;
    EXPECT_EQ(ProblemsOf(doc["container"], "OciSpec"), std::vector<std::string>{}) << h.file;
    // windows.devices entries need both id and idType (REQUIRED in config-windows.md).
    for (const json& d : doc["container"]["windows"]["devices"]) {
      EXPECT_TRUE(d.contains("id") && d.contains("idType")) << d;
      EXPECT_EQ(d["idType"], "vpci-instance-id");
    }
  }
}

TEST(HyperVSchema, TheCheckerFindsWrongFieldsTypesAndEnumValues) {
  json request = {
      {"ResourcePath", "VirtualMachine/Devices/VirtualPci/x"},
      {"RequestType", "Attach"},
      {"Settings",
       {{"Functions", json::array({json{{"DeviceInstancePath", 7}}})}, {"NumaAware", true}}}};
  EXPECT_EQ(ProblemsOf(request, "ModifySettingRequest"),
            (std::vector<std::string>{
                "ModifySettingRequest.RequestType: not in enum",
                "ModifySettingRequest.Settings.Functions[0].DeviceInstancePath: expected a string",
                "ModifySettingRequest.Settings.NumaAware: VirtualPciDevice has no such field"}));
  json memory = {{"VirtualMachine", {{"ComputeTopology", {{"Memory", {{"SizeInMb", 1}}}}}}}};
  EXPECT_EQ(ProblemsOf(memory, "ComputeSystem"),
            (std::vector<std::string>{"ComputeSystem.VirtualMachine.ComputeTopology.Memory."
                                      "SizeInMb: VirtualMachineMemory has no such field"}));
}

}  // namespace
}  // namespace tessera::testing
