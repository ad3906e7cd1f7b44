#include <gtest/gtest.h>

#include "inventory/inventory.h"
#include "topology/gpu_masks.h"
#include "topology/topology.h"

namespace tessera::topology {
namespace {

std::string Pci(int bus) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0000:%02x:00.0", bus);
  return buf;
}

// Two sockets; on each, two PCIe switches with two GPUs each:
//   NUMA 0: root port 00:01.0 -> switch 10 -> GPUs 0,1; root port 00:02.0 -> switch 20 -> GPUs 2,3
//   NUMA 1: root port 80:01.0 -> switch 90 -> GPUs 4,5; root port 80:02.0 -> switch a0 -> GPUs 6,7
GpuTopology TwoSocketBox() {
  GpuTopology topology;
  const int switch_bus[4] = {0x10, 0x20, 0x90, 0xa0};
  const char* root_ports[4] = {"0000:00:01.0", "0000:00:02.0", "0000:80:01.0", "0000:80:02.0"};
  for (int i = 0; i < 8; ++i) {
    GpuInfo gpu;
    gpu.pci_address = Pci(switch_bus[i / 2] + 1 + i % 2);
    gpu.id = "gpu" + std::to_string(i);
    gpu.numa_node = i < 4 ? 0 : 1;
    // Nearest first: the switch's downstream port (one per GPU), its upstream port, the root port.
    gpu.upstream_bridges = {Pci(switch_bus[i / 2] + 8 + i % 2), Pci(switch_bus[i / 2]),
                            root_ports[i / 2]};
    topology.gpus.push_back(gpu);
  }
  return topology;
}

std::shared_ptr<const GpuSetScorer> Scorer(GpuTopology topology) {
  auto scorer = GpuSetScorer::Create(std::move(topology));
  EXPECT_TRUE(scorer.ok()) << scorer.error().message;
  return *scorer;
}

GpuMask Chosen(const GpuSetScorer& scorer, GpuMask available, int size, GpuMask must = 0) {
  auto chosen = scorer.Choose(available, size, must);
  EXPECT_TRUE(chosen.ok()) << chosen.error().message;
  return chosen.ok() ? *chosen : 0;
}

TEST(GpuScoring, LinkTypesFollowBridgesNumaAndNvLink) {
  GpuTopology topology = TwoSocketBox();
  topology.nvlinks.assign(8, std::vector<int>(8, 0));
  topology.nvlinks[0][5] = topology.nvlinks[5][0] = 4;
  auto scorer = Scorer(topology);
  EXPECT_EQ(scorer->Link(0, 1), LinkType::kSamePcieSwitch);
  EXPECT_EQ(scorer->Link(0, 2), LinkType::kSameNumaNode);
  EXPECT_EQ(scorer->Link(0, 4), LinkType::kCrossSocket);
  EXPECT_EQ(scorer->Link(0, 5), LinkType::kNvLink);
  EXPECT_EQ(scorer->PairScore(0, 5), 4 * 100 + 10);
  EXPECT_EQ(scorer->PairScore(0, 1), 30);
  EXPECT_STREQ(LinkTypeName(scorer->Link(0, 4)), "cross-socket");
}

TEST(GpuScoring, SharingOnlyTheRootPortIsNotASwitch) {
  GpuTopology topology;
  for (int i = 0; i < 2; ++i) {
    topology.gpus.push_back({"g" + std::to_string(i), Pci(0x40 + i), 0, {"0000:00:03.0"}});
  }
  auto scorer = Scorer(topology);
  EXPECT_EQ(scorer->Link(0, 1), LinkType::kSameNumaNode);
}

TEST(GpuScoring, UnknownNumaCountsAsOneNode) {
  GpuTopology topology;
  topology.gpus.push_back({"a", Pci(1), -1, {}});
  topology.gpus.push_back({"b", Pci(2), 1, {}});
  EXPECT_EQ(Scorer(topology)->Link(0, 1), LinkType::kSameNumaNode);
}

TEST(GpuScoring, PrefersSwitchThenNumaThenCrossSocket) {
  auto scorer = Scorer(TwoSocketBox());
  const GpuMask all = 0xff;
  EXPECT_EQ(Chosen(*scorer, all, 2), GpuMaskOf({0, 1}));
  EXPECT_EQ(Chosen(*scorer, all, 4), GpuMaskOf({0, 1, 2, 3}));
  // GPU 1's switch partner is gone: a same-NUMA pair beats a cross-socket one.
  EXPECT_EQ(Chosen(*scorer, GpuMaskOf({1, 2, 4}), 2), GpuMaskOf({1, 2}));
  EXPECT_EQ(Chosen(*scorer, GpuMaskOf({1, 4, 6}), 2), GpuMaskOf({4, 6}));
  EXPECT_EQ(Chosen(*scorer, GpuMaskOf({0, 4}), 2), GpuMaskOf({0, 4}));
}

TEST(GpuScoring, NvLinkOutweighsAnyPciePath) {
  GpuTopology topology = TwoSocketBox();
  topology.nvlinks.assign(8, std::vector<int>(8, 0));
  topology.nvlinks[0][6] = topology.nvlinks[6][0] = 1;
  auto scorer = Scorer(topology);
  EXPECT_EQ(Chosen(*scorer, 0xff, 2), GpuMaskOf({0, 6}));
}

TEST(GpuScoring, MustIncludeIsHonoured) {
  auto scorer = Scorer(TwoSocketBox());
  EXPECT_EQ(Chosen(*scorer, 0xff, 2, GpuMaskOf({5})), GpuMaskOf({4, 5}));
  EXPECT_EQ(Chosen(*scorer, 0xff, 3, GpuMaskOf({3, 7})), GpuMaskOf({2, 3, 7}));
  EXPECT_EQ(Chosen(*scorer, 0xff, 2, GpuMaskOf({3, 7})), GpuMaskOf({3, 7}));
}

TEST(GpuScoring, TiesGoToTheLowestIndices) {
  GpuTopology flat;
  for (int i = 0; i < 10; ++i)
    flat.gpus.push_back({"g" + std::to_string(i), Pci(i + 1), 0, {}});
  auto scorer = Scorer(flat);
  EXPECT_EQ(Chosen(*scorer, GpuMaskOf({2, 5, 7, 9}), 3), GpuMaskOf({2, 5, 7}));
  EXPECT_EQ(Chosen(*scorer, GpuMaskOf({2, 5, 7, 9}), 2, GpuMaskOf({9})), GpuMaskOf({2, 9}));
  // Two equally good switch pairs: the one with the lower first GPU.
  auto box = Scorer(TwoSocketBox());
  EXPECT_EQ(Chosen(*box, GpuMaskOf({2, 3, 4, 5}), 2), GpuMaskOf({2, 3}));
}

TEST(GpuScoring, BadRequestsAreRefused) {
  auto scorer = Scorer(TwoSocketBox());
  auto not_available = scorer->Choose(GpuMaskOf({0, 1}), 2, GpuMaskOf({2}));
  ASSERT_FALSE(not_available.ok());
  EXPECT_EQ(not_available.error().category, ErrorCategory::kInvalidArgument);
  auto too_many = scorer->Choose(GpuMaskOf({0, 1}), 3);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.error().category, ErrorCategory::kNotFound);
  EXPECT_FALSE(scorer->Choose(0xff, 0).ok());
  EXPECT_FALSE(scorer->Choose(0xff, 1, GpuMaskOf({0, 1})).ok());
  EXPECT_FALSE(scorer->Choose(GpuMaskOf({9}), 1).ok());
}

// A small deterministic generator so the test needs no seed handling.
uint32_t Next(uint32_t& state) {
  state = state * 1664525u + 1013904223u;
  return state >> 8;
}

TEST(GpuScoring, ExactSearchMatchesBruteForceOnRandomTopologies) {
  uint32_t state = 7;
  for (int round = 0; round < 20; ++round) {
    const int n = 6 + round % 7;  // 6..12 GPUs
    GpuTopology topology;
    for (int i = 0; i < n; ++i) {
      GpuInfo gpu{"g" + std::to_string(i), Pci(i + 1), static_cast<int>(Next(state) % 2), {}};
      gpu.upstream_bridges = {Pci(0x80 + Next(state) % 3), "0000:00:01.0"};
      topology.gpus.push_back(gpu);
    }
    topology.nvlinks.assign(n, std::vector<int>(n, 0));
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b)
        topology.nvlinks[a][b] = topology.nvlinks[b][a] = Next(state) % 3;
    }
    auto scorer = Scorer(topology);
    const GpuMask available = ((GpuMask{1} << n) - 1) & ~GpuMask(Next(state) % 4);
    const GpuMask must = (Next(state) % 2) ? (available & (~available + 1)) : 0;
    for (int size = std::max(1, MaskSize(must)); size <= MaskSize(available); ++size) {
      GpuMask best = 0;
      int64_t best_score = -1;
      for (GpuMask set = 0; set < (GpuMask{1} << n); ++set) {
        if (MaskSize(set) != size || (set & ~available) || (must & ~set)) continue;
        int64_t score = scorer->Score(set);
        GpuMask diff = set ^ best;
        bool lower_first = diff && (set & diff & (~diff + 1));
        if (score > best_score || (score == best_score && lower_first)) {
          best = set;
          best_score = score;
        }
      }
      EXPECT_EQ(Chosen(*scorer, available, size, must), best)
          << "round " << round << " size " << size;
    }
  }
}

TEST(GpuScoring, AboveSixteenGpusGrowsTheBestLinkedSetGreedily) {
  GpuTopology topology;
  for (int i = 0; i < 20; ++i)
    topology.gpus.push_back({"g" + std::to_string(i), Pci(i + 1), 0, {}});
  topology.nvlinks.assign(20, std::vector<int>(20, 0));
  for (int a : {12, 15, 17}) {
    for (int b : {12, 15, 17}) {
      if (a != b) topology.nvlinks[a][b] = 2;
    }
  }
  auto scorer = Scorer(topology);
  GpuMask all = (GpuMask{1} << 20) - 1;
  EXPECT_EQ(Chosen(*scorer, all, 3), GpuMaskOf({12, 15, 17}));
  EXPECT_EQ(Chosen(*scorer, all, 2, GpuMaskOf({17})), GpuMaskOf({12, 17}));
}

TEST(GpuScoring, BadTopologiesAreRefused) {
  GpuTopology duplicate = TwoSocketBox();
  duplicate.gpus[3].id = "gpu1";
  auto dup = GpuSetScorer::Create(duplicate);
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.error().message.find("duplicate id gpu1"), std::string::npos);

  GpuTopology asymmetric = TwoSocketBox();
  asymmetric.nvlinks.assign(8, std::vector<int>(8, 0));
  asymmetric.nvlinks[1][2] = 2;
  auto asym = GpuSetScorer::Create(asymmetric);
  ASSERT_FALSE(asym.ok());
  EXPECT_NE(asym.error().message.find("nvlinks[1][2]: 2 differs from nvlinks[2][1] (0)"),
            std::string::npos);

  GpuTopology ragged = TwoSocketBox();
  ragged.nvlinks.assign(7, std::vector<int>(8, 0));
  EXPECT_FALSE(GpuSetScorer::Create(ragged).ok());
}

inventory::PciDevice Device(const std::string& address, inventory::DeviceKind kind, int numa,
                            std::vector<std::string> bridges) {
  inventory::PciDevice device;
  device.pci_address = address;
  device.kind = kind;
  device.vendor_id = 0x10de;
  device.numa_node = numa;
  device.upstream_bridges = std::move(bridges);
  return device;
}

TEST(GpuScoring, TopologyFromInventoryTakesGpusInPciOrder) {
  inventory::Inventory inv;
  inv.devices.push_back(Device("0000:18:00.0", inventory::DeviceKind::kGpu, 0,
                               {"0000:17:00.0", "0000:16:00.0", "0000:15:01.0"}));
  inv.devices.push_back(Device("0000:19:00.0", inventory::DeviceKind::kGpu, 0,
                               {"0000:17:01.0", "0000:16:00.0", "0000:15:01.0"}));
  inv.devices.push_back(Device("0000:41:00.0", inventory::DeviceKind::kNvSwitch, 0, {}));
  inv.devices.push_back(
      Device("0000:9a:00.0", inventory::DeviceKind::kGpu, 1, {"0000:99:00.0", "0000:98:01.0"}));
  auto topology = TopologyFromInventory(inv);
  ASSERT_TRUE(topology.ok()) << topology.error().message;
  ASSERT_EQ(topology->gpus.size(), 3u);
  EXPECT_EQ(topology->gpus[2].id, "0000:9a:00.0");
  EXPECT_EQ(topology->gpus[2].numa_node, 1);
  auto scorer = Scorer(*topology);
  // 18:00.0 and 19:00.0 meet at switch 16:00.0 below root port 15:01.0.
  EXPECT_EQ(scorer->Link(0, 1), LinkType::kSamePcieSwitch);
  EXPECT_EQ(scorer->Link(0, 2), LinkType::kCrossSocket);

  auto bad = TopologyFromInventory(inv, {{0, 1}, {1, 0}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("2 rows for the 3 GPUs"), std::string::npos);
}

// An HGX board whose module IDs are not in PCI order.
GpuTopology HgxTopology() {
  GpuTopology topology;
  const int buses[8] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};
  for (int i = 0; i < 8; ++i) {
    topology.gpus.push_back({"GPU-" + std::to_string(i), Pci(buses[i]), i < 4 ? 0 : 1, {}});
  }
  return topology;
}

PartitionTable HgxWithMap() {
  PartitionTable table = HgxH100Table();
  // Module 1 is GPU index 2 (3a:00.0), module 3 is index 0 (18:00.0), and so on.
  const int bus_of_module[9] = {0, 0x3a, 0x5d, 0x18, 0x2a, 0xdb, 0xba, 0xab, 0x9a};
  for (int m = 1; m <= 8; ++m)
    table.pci_addresses[m] = Pci(bus_of_module[m]);
  return table;
}

TEST(GpuChooser, PartitionModeGivesWholePartitionsByModuleId) {
  auto chooser = GpuChooser::Create(HgxTopology(), HgxWithMap());
  ASSERT_TRUE(chooser.ok()) << chooser.error().message;
  EXPECT_TRUE(chooser->partition_mode());
  std::vector<std::string> all;
  for (int i = 0; i < 8; ++i)
    all.push_back("GPU-" + std::to_string(i));
  // Pair P3 = modules {1,3} = GPU indices {2,0}.
  auto pair = chooser->Choose(all, {}, 2);
  ASSERT_TRUE(pair.ok()) << pair.error().message;
  EXPECT_EQ(*pair, (std::vector<std::string>{"GPU-0", "GPU-2"}));
  // Must include GPU-7 (db:00.0) = module 5: pair P5 {5,7} = GPU indices {7,5}.
  auto with = chooser->Choose(all, {"GPU-7"}, 2);
  ASSERT_TRUE(with.ok()) << with.error().message;
  EXPECT_EQ(*with, (std::vector<std::string>{"GPU-5", "GPU-7"}));
  auto three = chooser->Choose(all, {}, 3);
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.error().category, ErrorCategory::kFailedPrecondition);
  auto unknown = chooser->Choose({"GPU-0", "GPU-9"}, {}, 1);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("unknown device ID \"GPU-9\""), std::string::npos);
}

TEST(GpuChooser, PartitionModeNeedsTheModuleMap) {
  auto no_map = GpuChooser::Create(HgxTopology(), HgxH100Table());
  ASSERT_FALSE(no_map.ok());
  EXPECT_NE(no_map.error().message.find("pci_addresses is empty"), std::string::npos);
  PartitionTable partial = HgxWithMap();
  partial.pci_addresses[4] = Pci(0x77);
  auto missing = GpuChooser::Create(HgxTopology(), partial);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("0000:2a:00.0) is not in partition table"),
            std::string::npos);
}

TEST(GpuChooser, ScoringModeUsesLinks) {
  auto chooser = GpuChooser::Create(TwoSocketBox());
  ASSERT_TRUE(chooser.ok());
  EXPECT_FALSE(chooser->partition_mode());
  auto chosen = chooser->Choose({"gpu1", "gpu4", "gpu5", "gpu6"}, {"gpu6"}, 2);
  ASSERT_TRUE(chosen.ok()) << chosen.error().message;
  EXPECT_EQ(*chosen, (std::vector<std::string>{"gpu4", "gpu6"}));
}

}  // namespace
}  // namespace tessera::topology
