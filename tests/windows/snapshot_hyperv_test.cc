// Format 2's Hyper-V facts: what the fixtures hold, and every field's strictness.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "windows/fixture.h"
#include "windows/snapshot.h"

namespace tessera::windows {
namespace {

using testing::LoadFixture;
using testing::ReadFixture;

// The passing fixture as JSON, for tests that break one field at a time.
nlohmann::ordered_json Passing() {
  return nlohmann::ordered_json::parse(ReadFixture("ws2022-dda-t4.json"));
}

std::string ErrorOf(const nlohmann::ordered_json& doc) {
  auto s = ParseSnapshot(doc.dump());
  EXPECT_FALSE(s.ok()) << "parsed: " << doc.dump();
  return s.ok() ? "" : s.error().message;
}

TEST(SnapshotHyperV, ReadsEveryFactOfTheDismountedGpuAndItsHost) {
  Snapshot s = LoadFixture("ws2022-dda-t4.json");
  ASSERT_TRUE(s.hyperv_facts);
  ASSERT_EQ(s.hyperv_facts->pci_adapters.size(), 2u);
  const PciAdapter& t4 = s.hyperv_facts->pci_adapters[1];
  EXPECT_TRUE(t4.Dismounted());
  EXPECT_FALSE(s.hyperv_facts->pci_adapters[0].Dismounted());
  EXPECT_EQ(t4.instance_id, "PCIP\\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\\4&2C9A8E5&0&0018");
  EXPECT_EQ(t4.PciLocationPath(), "PCIROOT(0)#PCI(0300)#PCI(0000)");
  EXPECT_EQ(t4.class_code, 0x030200u);
  EXPECT_EQ(t4.dda.device_type, 2u);
  EXPECT_EQ(t4.dda.acs_compatible_up_hierarchy, 3u);
  EXPECT_EQ(t4.dda.requires_reserved_memory_region, false);
  ASSERT_TRUE(t4.interrupts);
  EXPECT_EQ(t4.interrupts->message_signaled, 1u);
  ASSERT_TRUE(t4.memory_ranges);
  ASSERT_EQ(t4.memory_ranges->size(), 3u);
  EXPECT_EQ((*t4.memory_ranges)[1].start, 0x38bf0000000ull);
  EXPECT_EQ((*t4.memory_ranges)[1].Size(), 256ull << 20);
  EXPECT_EQ(t4.driver_inf, "oem5.inf");
  const HyperVHost& h = s.hyperv_facts->hyperv;
  EXPECT_EQ(h.vmms, ServiceState::kRunning);
  EXPECT_EQ(h.iov_support, true);
  ASSERT_TRUE(s.hyperv_facts->containerd);
  const ContainerdHost& c = *s.hyperv_facts->containerd;
  EXPECT_EQ(c.version, "1.7.20");
  EXPECT_EQ(c.config_state, ConfigState::kRead);
  ASSERT_EQ(c.runtimes.size(), 2u);
  EXPECT_EQ(c.runtimes[0].name, "runhcs-wcow-hypervisor");
  EXPECT_EQ(c.runtimes[0].sandbox_isolation, 1);
  EXPECT_EQ(c.runtimes[1].sandbox_isolation, std::nullopt);
  EXPECT_EQ(c.runtimes[0].pod_annotations,
            (std::vector<std::string>{"io.microsoft.virtualmachine.*"}));
  EXPECT_TRUE(c.device_util_beside_shim);
}

TEST(SnapshotHyperV, FormatOneHasNoFactsAndIsWrittenBackAsFormatOne) {
  Snapshot s = LoadFixture("ws2022-aws-4xt4.json");
  EXPECT_FALSE(s.hyperv_facts);
  EXPECT_NE(SnapshotToJson(s).find("\"snapshot_version\": 1,"), std::string::npos);
  Snapshot v2 = LoadFixture("ws2022-dda-t4.json");
  EXPECT_NE(SnapshotToJson(v2).find("\"snapshot_version\": 2,"), std::string::npos);
  // Format 1 with format 2's fields is rejected: the version decides which fields exist.
  auto doc = nlohmann::ordered_json::parse(ReadFixture("ws2022-aws-4xt4.json"));
  doc["pci_adapters"] = nlohmann::ordered_json::array();
  EXPECT_EQ(ErrorOf(doc), "pci_adapters: unknown field");
}

TEST(SnapshotHyperV, UnknownContainerdMeansNull) {
  auto doc = Passing();
  doc["containerd"] = nullptr;
  auto s = ParseSnapshot(doc.dump());
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_FALSE(s->hyperv_facts->containerd);
  EXPECT_EQ(*ParseSnapshot(SnapshotToJson(*s)), *s);
}

TEST(SnapshotHyperV, EveryBrokenFieldIsNamed) {
  struct Case {
    const char* what;
    std::function<void(nlohmann::ordered_json&)> change;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"enumerator", [](auto& d) { d["pci_adapters"][1]["instance_id"] = "USB\\VID_1"; },
       "pci_adapters[1].instance_id: expected a PCI\\ or PCIP\\ device instance ID, got "
       "\"USB\\VID_1\""},
      {"space in the ID", [](auto& d) { d["pci_adapters"][1]["instance_id"] = "PCIP\\VEN 10DE"; },
       "pci_adapters[1].instance_id: vpci-instance-id device: instance ID \"PCIP\\VEN 10DE\" has "
       "an invalid character at position 9"},
      {"range backwards",
       [](auto& d) { d["pci_adapters"][1]["memory_ranges"][0]["end"] = "0000000000000001"; },
       "pci_adapters[1].memory_ranges[0]: end is below start"},
      {"range not hex",
       [](auto& d) { d["pci_adapters"][1]["memory_ranges"][0]["start"] = "0xfa000000"; },
       "pci_adapters[1].memory_ranges[0].start: expected 16 hex digits without 0x, got "
       "\"0xfa000000\""},
      {"too many ranges",
       [](auto& d) {
         auto& r = d["pci_adapters"][1]["memory_ranges"];
         while (r.size() <= 64)
           r.push_back(r[0]);
       },
       "pci_adapters[1].memory_ranges: more than 64 entries"},
      {"interrupts as a number", [](auto& d) { d["pci_adapters"][1]["interrupts"] = 1; },
       "pci_adapters[1].interrupts: expected an object, got number"},
      {"device type as a string", [](auto& d) { d["pci_adapters"][1]["dda"]["device_type"] = "2"; },
       "pci_adapters[1].dda.device_type: expected a non-negative integer, got string"},
      {"unknown DDA field", [](auto& d) { d["pci_adapters"][1]["dda"]["rmrr"] = true; },
       "pci_adapters[1].dda.rmrr: unknown field"},
      {"duplicate adapter", [](auto& d) { d["pci_adapters"].push_back(d["pci_adapters"][1]); },
       "pci_adapters[2].instance_id: duplicate instance ID "
       "\"PCIP\\VEN_10DE&DEV_1EB8&SUBSYS_12A210DE&REV_A1\\4&2C9A8E5&0&0018\""},
      {"service state", [](auto& d) { d["hyperv"]["vmms"] = "paused"; },
       "hyperv.vmms: expected \"running\", \"stopped\", \"absent\" or \"unknown\", got \"paused\""},
      {"iov support as a string", [](auto& d) { d["hyperv"]["iov_support"] = "yes"; },
       "hyperv.iov_support: expected true or false, got string"},
      {"config state", [](auto& d) { d["containerd"]["config"] = "missing"; },
       "containerd.config: expected \"read\", \"absent\", \"unreadable\" or \"invalid\", got "
       "\"missing\""},
      {"runtimes of a config never read", [](auto& d) { d["containerd"]["config"] = "absent"; },
       "containerd.runtimes: must be empty unless the config was read"},
      {"duplicate runtime",
       [](auto& d) { d["containerd"]["runtimes"].push_back(d["containerd"]["runtimes"][0]); },
       "containerd.runtimes[2].name: duplicate runtime \"runhcs-wcow-hypervisor\""},
      {"device-util without a shim", [](auto& d) { d["containerd"]["shim_path"] = ""; },
       "containerd.device_util_beside_shim: true without a shim_path"},
      {"empty binary", [](auto& d) { d["containerd"]["binary"] = ""; },
       "containerd.binary: must not be empty (use null: not found)"},
      {"missing field", [](auto& d) { d["pci_adapters"][1].erase("driver_inf"); },
       "pci_adapters[1].driver_inf: missing field"},
      {"long unknown key is cut", [](auto& d) { d["hyperv"][std::string(300, 'k')] = 1; },
       "hyperv.kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...: unknown field"},
  };
  for (const Case& c : cases) {
    auto doc = Passing();
    c.change(doc);
    EXPECT_EQ(ErrorOf(doc), c.error) << c.what;
  }
}

TEST(SnapshotHyperV, DeepNestingIsRefusedBeforeParsing) {
  std::string deep =
      R"({"snapshot_version":2,"hostname":)" + std::string(100, '[') + std::string(100, ']') + "}";
  auto s = ParseSnapshot(deep);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("nested deeper than 32 levels"), std::string::npos)
      << s.error().message;
}

}  // namespace
}  // namespace tessera::windows
