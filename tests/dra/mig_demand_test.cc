// MIG by demand in the node model and the pool's ResourceSlices (KEP-4815 partitionable devices,
// resource.k8s.io/v1): a MIG-enabled GPU with a profile table is a counter set, the whole GPU
// consuming all of it and every profile at every allowed start consuming its slices; instances
// this plugin did not make stay as their own devices with their slices taken out. The slices keep
// the API's limits and validate against its schema (kubernetes-models).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "dra/dra.h"
#include "mig/placements.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"

namespace tessera::dra {
namespace {

using nlohmann::json;

// H100 80GB: 7 + 7 + 4 + 3 + 2 + 1 + 1 placements.
constexpr size_t kH100Placements = 25;

struct Described {
  NodeDevices node;
  std::string pci;  // the first GPU's address
};

Described Describe(const std::string& fixture, NodeOptions options,
                   const std::string& replace_from = "", const std::string& replace_to = "") {
  testing::FakeNvmlState nvml(fixture);
  if (!replace_from.empty()) nvml.Replace(replace_from, replace_to);
  inventory::ReadOptions read;
  read.root = testing::MaterializeHost(fixture);
  read.nvml_library = FAKE_NVML;
  auto inv = inventory::ReadInventory(read);
  EXPECT_TRUE(inv.ok());
  Described out;
  if (!inv.ok()) return out;
  out.pci = inv->Gpus().front()->pci_address;
  auto node = DescribeNode(*inv, options);
  EXPECT_TRUE(node.ok()) << node.error().message;
  if (node.ok()) out.node = *node;
  return out;
}

NodeOptions ByDemand(std::vector<mig::ProfileTable> tables = {mig::BuiltinH100Table()}) {
  NodeOptions options;
  options.mig_by_demand = true;
  options.mig_tables = std::move(tables);
  return options;
}

bool IsDnsLabel(const std::string& name) {
  static const std::regex label("[a-z0-9]([-a-z0-9]*[a-z0-9])?");
  return name.size() <= 63 && std::regex_match(name, label);
}

std::vector<json> Slices(const NodeDevices& node) {
  SliceOptions options;
  options.node_name = "node-a";
  options.generation = 3;
  std::vector<json> out;
  for (const auto& text : BuildResourceSlices(node, PublishedDevices(node, DeviceState{}), options,
                                              DeviceTaints(node, DeviceState{})))
    out.push_back(json::parse(text));
  return out;
}

// Every limit of KEP-4815 and resource.k8s.io/v1 the pool must keep; "" when it keeps them.
std::string PoolProblem(const std::vector<json>& slices) {
  std::map<std::string, std::map<std::string, int64_t>> sets;  // name -> counter -> value
  std::set<std::string> names, devices;
  for (const auto& slice : slices) {
    const json& spec = slice["spec"];
    if (spec["pool"]["resourceSliceCount"] != slices.size()) return "resourceSliceCount";
    if (spec["pool"]["generation"] != 3) return "generation";
    if (!names.insert(slice["metadata"]["name"].get<std::string>()).second) return "slice name";
    if (spec.contains("devices") == spec.contains("sharedCounters")) return "devices XOR counters";
    if (spec.contains("sharedCounters")) {
      if (spec["sharedCounters"].size() > 8) return "more than 8 counter sets";
      for (const auto& set : spec["sharedCounters"]) {
        if (!IsDnsLabel(set["name"])) return "set name " + set["name"].dump();
        if (set["counters"].size() > 32) return "more than 32 counters";
        for (const auto& [counter, value] : set["counters"].items()) {
          if (!IsDnsLabel(counter)) return "counter name " + counter;
          sets[set["name"]][counter] = std::stoll(value["value"].get<std::string>());
        }
      }
    }
  }
  for (const auto& slice : slices) {
    const json& spec = slice["spec"];
    if (!spec.contains("devices")) continue;
    if (spec["devices"].size() > 64) return "more than 64 devices with counters";
    for (const auto& device : spec["devices"]) {
      if (!IsDnsLabel(device["name"])) return "device name " + device["name"].dump();
      if (!devices.insert(device["name"].get<std::string>()).second) return "device twice";
      if (device["attributes"].size() + device.value("capacity", json::object()).size() > 32)
        return "more than 32 attributes and capacities";
      for (const auto& consumption : device.value("consumesCounters", json::array())) {
        auto set = sets.find(consumption["counterSet"]);
        if (set == sets.end()) return "no counter set " + consumption["counterSet"].dump();
        for (const auto& [counter, value] : consumption["counters"].items()) {
          auto it = set->second.find(counter);
          if (it == set->second.end()) return "no counter " + counter;
          if (std::stoll(value["value"].get<std::string>()) > it->second)
            return device["name"].get<std::string>() + " consumes more " + counter + " than exist";
        }
      }
    }
  }
  return "";
}

// The slices against kubernetes-models' resource.k8s.io/v1 schema: "" when valid.
std::string SchemaProblem(const std::vector<json>& slices) {
  testing::TempDir dir;
  std::string lines;
  for (const auto& slice : slices)
    lines += slice.dump() + "\n";
  std::string path = dir.path() + "/slices.jsonl";
  if (!WriteFileAtomically(path, lines).ok()) return "cannot write " + path;
  std::string command = std::string("node ") + TESSERA_SOURCE_DIR +
                        "/tests/tools/k8s-schema/validate.mjs " + path + " > " + path + ".out 2>&1";
  int status = std::system(command.c_str());
  auto out = ReadBoundedFile(path + ".out", 1 << 20);
  return status == 0 ? "" : (out ? *out : "validator failed");
}

TEST(DraMigDemand, AMigGpuIsACounterSetTheWholeGpuAndEveryPlacement) {
  Described d = Describe("hgx-h100-dgx", ByDemand(), "mig=0", "mig=1");
  const std::string gpu = DeviceNameFor(d.pci);
  ASSERT_EQ(d.node.counter_sets.size(), 8u);
  const CounterSet& set = d.node.counter_sets[0];
  EXPECT_EQ(set.name, gpu + "-counters");
  EXPECT_EQ(set.counters.at("compute-slices"), 7u);
  EXPECT_EQ(set.counters.at("memory-slices"), 8u);
  for (int s = 0; s < 8; ++s)
    EXPECT_EQ(set.counters.at("memory-slice-" + std::to_string(s)), 1u) << s;
  EXPECT_EQ(set.counters.at("1g-10gb-me-instances"), 1u);  // one +me instance at a time
  EXPECT_EQ(set.counters.size(), 11u);
  EXPECT_EQ(d.node.devices.size(), 8 * (1 + kH100Placements));

  const NodeDevice* whole = d.node.Find(gpu);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->type, "gpu");
  EXPECT_EQ(whole->consumes, set.counters);

  const NodeDevice* slice = d.node.Find(gpu + "-mig-2g-20gb-4");
  ASSERT_NE(slice, nullptr);
  EXPECT_EQ(slice->type, "mig");
  EXPECT_EQ(slice->profile, "2g.20gb");
  EXPECT_EQ(slice->parent_uuid, whole->uuid);
  EXPECT_EQ(slice->uuid, "");
  ASSERT_TRUE(slice->mig_slot.has_value());
  EXPECT_EQ(*slice->mig_slot, (MigSlot{"2g.20gb", 14, 4, 2, 2}));
  EXPECT_EQ(slice->counter_set, set.name);
  EXPECT_EQ(slice->consumes, (std::map<std::string, uint64_t>{{"compute-slices", 2},
                                                              {"memory-slices", 2},
                                                              {"memory-slice-4", 1},
                                                              {"memory-slice-5", 1}}));
  EXPECT_EQ(slice->edits, whole->edits);  // the parent's node; prepare adds the instance's
  const NodeDevice* me = d.node.Find(gpu + "-mig-1g-10gb-me-6");
  ASSERT_NE(me, nullptr);
  EXPECT_EQ(me->consumes.at("1g-10gb-me-instances"), 1u);
  EXPECT_NE(d.node.Find(gpu + "-mig-7g-80gb-0"), nullptr);
  EXPECT_EQ(d.node.Find(gpu + "-mig-3g-40gb-2"), nullptr);  // not an allowed start
}

TEST(DraMigDemand, ThePoolKeepsTheApiLimitsAndValidatesAgainstTheSchema) {
  Described d = Describe("hgx-h100-dgx", ByDemand(), "mig=0", "mig=1");
  std::vector<json> slices = Slices(d.node);
  // 8 counter sets in one slice, 208 devices in slices of at most 64.
  ASSERT_EQ(slices.size(), 1u + 4u);
  EXPECT_EQ(PoolSliceCount(d.node), slices.size());
  EXPECT_EQ(slices[0]["metadata"]["name"], SliceName(kDefaultDriverName, "node-a"));
  EXPECT_EQ(slices[0]["spec"]["sharedCounters"].size(), 8u);
  EXPECT_EQ(slices[1]["metadata"]["name"], SliceName(kDefaultDriverName, "node-a") + "-1");
  size_t devices = 0;
  for (size_t i = 1; i < slices.size(); ++i)
    devices += slices[i]["spec"]["devices"].size();
  EXPECT_EQ(devices, d.node.devices.size());
  EXPECT_EQ(PoolProblem(slices), "");
  // A placement device as the API sees it.
  const json* placed = nullptr;
  for (const auto& device : slices[1]["spec"]["devices"])
    if (device["name"] == DeviceNameFor(d.pci) + "-mig-3g-40gb-4") placed = &device;
  ASSERT_NE(placed, nullptr) << slices[1].dump(1);
  EXPECT_EQ((*placed)["attributes"]["profile"]["string"], "3g.40gb");
  EXPECT_EQ((*placed)["attributes"]["placementStart"]["int"], 4);
  EXPECT_EQ((*placed)["attributes"]["placementSize"]["int"], 4);
  EXPECT_EQ((*placed)["attributes"]["type"]["string"], "mig");
  EXPECT_EQ((*placed)["consumesCounters"][0]["counterSet"], DeviceNameFor(d.pci) + "-counters");
  EXPECT_EQ((*placed)["consumesCounters"][0]["counters"]["memory-slice-7"]["value"], "1");
  EXPECT_EQ(SchemaProblem(slices), "");
}

TEST(DraMigDemand, WithoutTheOptionOrATableTheGpuKeepsTheCurrentForm) {
  Described off = Describe("hgx-h100-dgx", NodeOptions{}, "mig=0", "mig=1");
  EXPECT_TRUE(off.node.counter_sets.empty());
  EXPECT_EQ(off.node.devices.size(), 8u);
  ASSERT_EQ(Slices(off.node).size(), 1u);
  EXPECT_FALSE(Slices(off.node)[0]["spec"].contains("sharedCounters"));
  // A board with no table (only the A100 table given) is published as before.
  auto a100 = ReadBoundedFile(std::string(TESSERA_SOURCE_DIR) + "/data/mig-profiles/a100-40gb.yaml",
                              1 << 20);
  ASSERT_TRUE(a100.ok());
  auto table = mig::ParseProfileTable(*a100);
  ASSERT_TRUE(table.ok());
  Described other = Describe("hgx-h100-dgx", ByDemand({*table}), "mig=0", "mig=1");
  EXPECT_TRUE(other.node.counter_sets.empty());
  EXPECT_EQ(other.node.devices.size(), 8u);
  // GPUs not in MIG mode stay whole, without counters.
  Described plain = Describe("hgx-h100-dgx", ByDemand());
  EXPECT_TRUE(plain.node.counter_sets.empty());
  EXPECT_EQ(plain.node.devices.size(), 8u);
}

TEST(DraMigDemand, InstancesMadeByOthersStayAndTheirSlicesAreTaken) {
  // GPU 18:00.0 holds 3g.40gb at 0, 2g.20gb at 4 and 1g.10gb at 6; 2a:00.0 is not in MIG mode.
  Described d = Describe("h100-mig-mixed", ByDemand());
  const std::string gpu = DeviceNameFor("0000:18:00.0");
  ASSERT_EQ(d.node.counter_sets.size(), 1u);
  const CounterSet& set = d.node.counter_sets[0];
  for (int s = 0; s < 7; ++s)
    EXPECT_EQ(set.counters.at("memory-slice-" + std::to_string(s)), 0u) << s;
  EXPECT_EQ(set.counters.at("memory-slice-7"), 1u);
  EXPECT_EQ(set.counters.at("compute-slices"), 1u);
  EXPECT_EQ(set.counters.at("memory-slices"), 1u);
  std::vector<std::string> names;
  for (const auto& device : d.node.devices)
    names.push_back(device.name);
  // No profile starts at slice 7; the whole GPU is not offered while others' instances exist.
  EXPECT_EQ(names, (std::vector<std::string>{gpu + "-mig-1-0", gpu + "-mig-5-0", gpu + "-mig-13-0",
                                             "gpu-0000-2a-00-0"}));
  EXPECT_EQ(PoolProblem(Slices(d.node)), "");

  // The same GPU when GI 13 is one this plugin made for a prepared claim: its slice stays offered.
  NodeOptions options = ByDemand();
  options.owned_instances["0000:18:00.0"] = {13};
  Described owned = Describe("h100-mig-mixed", options);
  EXPECT_EQ(owned.node.Find(gpu + "-mig-13-0"), nullptr);
  EXPECT_NE(owned.node.Find(gpu + "-mig-1g-10gb-6"), nullptr);
  EXPECT_NE(owned.node.Find(gpu + "-mig-1g-20gb-6"), nullptr);
  EXPECT_EQ(owned.node.Find(gpu + "-mig-1g-10gb-5"), nullptr);
  EXPECT_EQ(owned.node.counter_sets[0].counters.at("memory-slice-6"), 1u);
  EXPECT_EQ(SchemaProblem(Slices(owned.node)), "");
}

TEST(DraMigDemand, AnA100IsPartitionedByItsTable) {
  auto text = ReadBoundedFile(std::string(TESSERA_SOURCE_DIR) + "/data/mig-profiles/a100-40gb.yaml",
                              1 << 20);
  ASSERT_TRUE(text.ok());
  auto table = mig::ParseProfileTable(*text);
  ASSERT_TRUE(table.ok());
  // a100-mig holds GIs 2, 3 and 4, which cover every slice; taken as this plugin's, none is left.
  NodeOptions options = ByDemand({*table, mig::BuiltinH100Table()});
  options.owned_instances["0000:07:00.0"] = {2, 3, 4};
  Described d = Describe("a100-mig", options);
  const std::string gpu = DeviceNameFor("0000:07:00.0");
  ASSERT_EQ(d.node.counter_sets.size(), 1u);
  EXPECT_EQ(d.node.devices.size(), 1 + mig::AllPlacements(*table).size());
  EXPECT_NE(d.node.Find(gpu + "-mig-1g-5gb-me-3"), nullptr);
  EXPECT_NE(d.node.Find(gpu + "-mig-7g-40gb-0"), nullptr);
  EXPECT_EQ(d.node.counter_sets[0].counters.at("1g-5gb-me-instances"), 1u);
  std::vector<json> slices = Slices(d.node);
  EXPECT_EQ(PoolProblem(slices), "");
  EXPECT_EQ(SchemaProblem(slices), "");
}

// The driver alone, with MIG hooks that record what they were asked: a prepare that fails part
// way leaves no instance behind; an unprepare of a busy instance keeps the claim.
class DraMigDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    node_ = Describe("hgx-h100-dgx", ByDemand(), "mig=0", "mig=1").node;
    gpu_ = node_.devices.front().name;
    config_.node_name = "node-a";
    config_.cdi_dir = dir_.path();
    config_.plugin_dir = dir_.path();
  }
  std::unique_ptr<Driver> Make() {
    auto driver = std::make_unique<Driver>(
        config_, node_,
        [this](const std::string&, const std::string&) -> Result<std::string> { return claim_; });
    EXPECT_TRUE(driver->Load().ok());
    return driver;
  }
  void Allocate(const std::vector<std::string>& devices) {
    json results = json::array();
    for (const auto& d : devices)
      results.push_back(
          {{"request", "r"}, {"driver", "gpu.tessera.dev"}, {"pool", "node-a"}, {"device", d}});
    claim_ = json{{"metadata", {{"namespace", "team"}, {"name", "c"}, {"uid", ref_.uid}}},
                  {"status", {{"allocation", {{"devices", {{"results", results}}}}}}}}
                 .dump();
  }
  MigHooks Recording() {
    MigHooks hooks;
    hooks.create = [this](const NodeDevice& device,
                          const std::set<uint32_t>&) -> Result<MigInstance> {
      calls_.push_back("create " + device.name);
      if (device.mig_slot->start == 6) return Unavailable("NVML error 23");
      return MigInstance{device.pci_address, device.mig_slot->start + 1, 0, "MIG-x", {}};
    };
    hooks.destroy = [this](const MigInstance& instance) -> Status {
      calls_.push_back("destroy " + std::to_string(instance.gpu_instance_id));
      if (busy_) return FailedPrecondition("nvmlComputeInstanceDestroy failed: NVML error 19");
      return Ok();
    };
    return hooks;
  }

  testing::TempDir dir_;
  NodeDevices node_;
  std::string gpu_;
  DriverConfig config_;
  std::string claim_;
  std::vector<std::string> calls_;
  bool busy_ = false;
  const ClaimRef ref_{"team", "c", "5b0c4a2e-1111-4222-8333-944455556666"};
};

TEST_F(DraMigDriver, WithoutMigHooksAPlacementIsRefused) {
  Allocate({gpu_ + "-mig-1g-10gb-0"});
  auto prepared = Make()->Prepare(ref_);
  ASSERT_FALSE(prepared.ok());
  EXPECT_NE(prepared.error().message.find("not made here"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(ClaimSpecPath(config_.cdi_dir, ref_.uid)));
}

TEST_F(DraMigDriver, APrepareThatFailsPartWayDestroysWhatItMade) {
  Allocate({gpu_ + "-mig-1g-10gb-0", gpu_ + "-mig-1g-10gb-6"});
  auto driver = Make();
  driver->SetMig(Recording());
  auto prepared = driver->Prepare(ref_);
  ASSERT_FALSE(prepared.ok());
  EXPECT_NE(prepared.error().message.find("NVML error 23"), std::string::npos);
  EXPECT_EQ(calls_, (std::vector<std::string>{"create " + gpu_ + "-mig-1g-10gb-0",
                                              "create " + gpu_ + "-mig-1g-10gb-6", "destroy 1"}));
  EXPECT_TRUE(driver->PreparedClaimUids().empty());
  EXPECT_FALSE(std::filesystem::exists(ClaimSpecPath(config_.cdi_dir, ref_.uid)));
}

TEST_F(DraMigDriver, ABusyInstanceKeepsTheClaimUntilItIsDestroyed) {
  Allocate({gpu_ + "-mig-3g-40gb-4"});
  {
    auto driver = Make();
    driver->SetMig(Recording());
    auto prepared = driver->Prepare(ref_);
    ASSERT_TRUE(prepared.ok()) << prepared.error().message;
    ASSERT_TRUE(prepared->devices[0].mig_instance.has_value());
    EXPECT_EQ(prepared->devices[0].mig_instance->gpu_instance_id, 5u);
  }
  // A restarted driver knows the instance from the claim's file.
  auto driver = Make();
  driver->SetMig(Recording());
  busy_ = true;
  auto busy = driver->Unprepare(ref_);
  ASSERT_FALSE(busy.ok());
  EXPECT_NE(busy.error().message.find("in use"), std::string::npos) << busy.error().message;
  EXPECT_NE(busy.error().message.find("kubelet retries"), std::string::npos);
  EXPECT_EQ(driver->PreparedClaimUids(), std::vector<std::string>{ref_.uid});
  EXPECT_TRUE(std::filesystem::exists(ClaimSpecPath(config_.cdi_dir, ref_.uid)));
  busy_ = false;
  EXPECT_TRUE(driver->Unprepare(ref_).ok());
  EXPECT_TRUE(driver->PreparedClaimUids().empty());
  EXPECT_EQ(calls_, (std::vector<std::string>{"create " + gpu_ + "-mig-3g-40gb-4", "destroy 5",
                                              "destroy 5"}));
}

// Hooks over a model of the GPU's instances (by start, as NVML places them): a create first takes
// an instance at its place that nobody holds, as the plugin's NVML hooks do; `fail_after_create_`
// makes a create fail after the instance exists (a plugin killed there), `destroy_fails_` keeps
// what an undo would destroy.
class DraMigIntent : public DraMigDriver {
 protected:
  MigHooks Modelled() {
    MigHooks hooks;
    hooks.create = [this](const NodeDevice& device,
                          const std::set<uint32_t>& owned) -> Result<MigInstance> {
      const uint32_t start = device.mig_slot->start;
      // The intent is on disk before anything is made.
      auto file = ReadCheckpoint(PreparedClaimPath(dir_.path() + "/prepared", ref_.uid));
      bool intent = file.ok() && file->count(ref_.uid) && file->at(ref_.uid).pending;
      calls_.push_back(std::string(intent ? "" : "NO INTENT ") + "create " + device.name);
      if (!instances_.count(start) || owned.count(instances_[start])) {
        made_.push_back(start);
        instances_[start] = start + 1;
      }
      if (fail_after_create_) return Unavailable("NVML error 999 after the create");
      return MigInstance{device.pci_address, instances_[start], 0, "MIG-x", {}};
    };
    hooks.destroy = [this](const MigInstance& instance) -> Status {
      calls_.push_back("destroy " + std::to_string(instance.gpu_instance_id));
      if (destroy_fails_) return Unavailable("NVML error 999");
      for (auto it = instances_.begin(); it != instances_.end(); ++it) {
        if (it->second == instance.gpu_instance_id) {
          instances_.erase(it);
          break;
        }
      }
      return Ok();
    };
    hooks.find = [this](const MigIntent& intent,
                        const std::set<uint32_t>& owned) -> Result<std::optional<uint32_t>> {
      auto it = instances_.find(intent.start);
      if (it == instances_.end() || owned.count(it->second)) return std::optional<uint32_t>();
      return std::optional<uint32_t>(it->second);
    };
    return hooks;
  }
  // A restart: the claim files read, intents adopted or dropped, a new driver loaded.
  std::unique_ptr<Driver> Restart(std::vector<std::string>* log) {
    auto claims = ReadPreparedClaims(dir_.path() + "/prepared", nullptr);
    EXPECT_TRUE(claims.ok());
    if (claims.ok()) *log = AdoptIntents(Modelled(), dir_.path() + "/prepared", *claims);
    auto driver = Make();
    driver->SetMig(Modelled());
    return driver;
  }
  bool ClaimFile() const {
    return std::filesystem::exists(PreparedClaimPath(dir_.path() + "/prepared", ref_.uid));
  }

  std::map<uint32_t, uint32_t> instances_;  // GPU instance ID by start
  std::vector<uint32_t> made_;              // starts, in the order made
  bool fail_after_create_ = false;
  bool destroy_fails_ = false;
};

TEST_F(DraMigIntent, AnInstanceMadeBeforeAFailureIsAdoptedByTheRetriedPrepare) {
  Allocate({gpu_ + "-mig-3g-40gb-4"});
  auto driver = Make();
  driver->SetMig(Modelled());
  fail_after_create_ = destroy_fails_ = true;
  ASSERT_FALSE(driver->Prepare(ref_).ok());
  EXPECT_EQ(instances_, (std::map<uint32_t, uint32_t>{{4, 5}}));
  ASSERT_TRUE(ClaimFile());  // the intent stays while its instance may
  EXPECT_TRUE(driver->PreparedClaimUids().empty());
  fail_after_create_ = destroy_fails_ = false;

  std::vector<std::string> log;
  driver = Restart(&log);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("adopted"), std::string::npos) << log[0];
  EXPECT_EQ(Driver::OwnedInstances(*ReadPreparedClaims(dir_.path() + "/prepared", nullptr)),
            (std::map<std::string, std::set<uint32_t>>{{node_.devices.front().pci_address, {5}}}));
  auto prepared = driver->Prepare(ref_);
  ASSERT_TRUE(prepared.ok()) << prepared.error().message;
  ASSERT_TRUE(prepared->devices[0].mig_instance.has_value());
  EXPECT_EQ(prepared->devices[0].mig_instance->gpu_instance_id, 5u);
  EXPECT_EQ(made_, std::vector<uint32_t>{4});  // made once
  auto file = ReadCheckpoint(PreparedClaimPath(dir_.path() + "/prepared", ref_.uid));
  ASSERT_TRUE(file.ok());
  EXPECT_FALSE(file->at(ref_.uid).pending);
  EXPECT_EQ(driver->PreparedClaimUids(), std::vector<std::string>{ref_.uid});
  ASSERT_TRUE(driver->Unprepare(ref_).ok());
  EXPECT_TRUE(instances_.empty());
  EXPECT_FALSE(ClaimFile());
  for (const auto& call : calls_)
    EXPECT_EQ(call.find("NO INTENT"), std::string::npos) << call;
}

TEST_F(DraMigIntent, AClaimWithOnlyAnIntentIsUnpreparedByDestroyingWhatIsAtItsPlace) {
  Allocate({gpu_ + "-mig-1g-10gb-2"});
  auto driver = Make();
  driver->SetMig(Modelled());
  fail_after_create_ = destroy_fails_ = true;
  ASSERT_FALSE(driver->Prepare(ref_).ok());
  destroy_fails_ = false;
  std::vector<std::string> log;
  driver = Restart(&log);
  ASSERT_TRUE(driver->Unprepare(ref_).ok());
  EXPECT_TRUE(instances_.empty());
  EXPECT_FALSE(ClaimFile());
  EXPECT_EQ(calls_.back(), "destroy 3");
  // Nothing left: a second unprepare succeeds and destroys nothing.
  size_t calls = calls_.size();
  ASSERT_TRUE(driver->Unprepare(ref_).ok());
  EXPECT_EQ(calls_.size(), calls);
}

TEST_F(DraMigIntent, AnIntentWithoutAnInstanceIsDroppedOnStart) {
  Allocate({gpu_ + "-mig-1g-10gb-2"});
  auto driver = Make();
  driver->SetMig(Modelled());
  fail_after_create_ = destroy_fails_ = true;
  ASSERT_FALSE(driver->Prepare(ref_).ok());
  ASSERT_TRUE(ClaimFile());
  instances_.clear();  // gone meanwhile (a GPU reset)
  fail_after_create_ = destroy_fails_ = false;
  std::vector<std::string> log;
  driver = Restart(&log);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("dropped"), std::string::npos) << log[0];
  EXPECT_FALSE(ClaimFile());
  // A prepare that fails and can undo what it made leaves no intent behind either.
  fail_after_create_ = true;
  ASSERT_FALSE(driver->Prepare(ref_).ok());
  EXPECT_TRUE(instances_.empty());
  EXPECT_FALSE(ClaimFile());
}

TEST(DraMigDemand, ProfileLabelsAreDnsLabels) {
  EXPECT_EQ(mig::ProfileLabel("1g.10gb+me"), "1g-10gb-me");
  EXPECT_EQ(mig::ProfileLabel("7g.80GB"), "7g-80gb");
  for (const auto& place : mig::AllPlacements(mig::BuiltinH100Table()))
    EXPECT_TRUE(IsDnsLabel(mig::ProfileLabel(place.profile->name)));
  EXPECT_EQ(mig::AllPlacements(mig::BuiltinH100Table()).size(), kH100Placements);
}

}  // namespace
}  // namespace tessera::dra
