// Fabric faults as health signals: the GPUs and NVSwitches whose NVLinks the fabric manager
// reports failed become health::Signal{kFabricFatal} for every GPU they touch.
//
// The rule (FabricFaults):
//  - a GPU with failed NVLink ports: that GPU;
//  - an NVSwitch with failed ports: every GPU of every partition that routes over NVSwitches,
//    which is every partition of two or more GPUs. The fabric manager does not say which GPUs
//    reach a switch, and on HGX boards every GPU links to every NVSwitch, so every GPU of such a
//    partition is implicated (on the 8-GPU tables that is every GPU of the board). A GPU that is
//    in no multi-GPU partition uses no NVLink and is left alone.
// Each signal's detail names the active partition that holds the GPU ("partition 3: NVSwitch
// 0000:05:00.0 ports 12,13"; "no active partition: ..." when none does).
//
// FabricHealthWatch polls a fabric manager on a connection of its own and hands each new failure
// to a sink once: a failure reported again at the next poll is not new; one that clears and comes
// back is.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "fabricmanager/fabricmanager.h"
#include "health/health.h"
#include "topology/topology.h"

namespace tessera::fabricmanager {

struct FabricFault {
  health::Signal signal;  // kFabricFatal; gpu, detail and at_ms set
  // What failed, apart from the partition: the same failure keeps its key from poll to poll
  // ("0000:18:00.0 <- NVSwitch 0000:05:00.0 ports 12,13").
  std::string key;
};

struct FabricFaultList {
  std::vector<FabricFault> faults;  // by GPU, then failed device
  // Failed GPUs that are no GPU of the table (or that the fabric manager named without a usable
  // bus ID), described for a log line.
  std::vector<std::string> unplaced;
};

// Pure. `table`: the placement table (pci_addresses map every module); `active`: the partitions
// the fabric manager reports active. Details are printable and at most kMaxFaultDetail bytes;
// at most 8 ports are named, then how many more.
FabricFaultList FabricFaults(const NvlinkFailedDevices& failed,
                             const topology::PartitionTable& table,
                             const std::vector<uint32_t>& active, int64_t now_ms);
inline constexpr size_t kMaxFaultDetail = 160;

// Receives each new fabric fault's signal. Called on the watch's thread (or PollOnce's caller);
// it must not call back into the watch.
using FabricSignalSink = std::function<void(health::Signal)>;

struct FabricHealthOptions {
  // Opens the watch's own connection (a FabricManager has one owner: the activator keeps its
  // own); called again after a connection failed.
  std::function<Result<std::unique_ptr<FabricManager>>()> connect;
  topology::PartitionTable table;  // the placement table
  std::chrono::milliseconds interval{5000};
};

class FabricHealthWatch {
 public:
  // Starts no thread (Start does).
  FabricHealthWatch(FabricHealthOptions options, FabricSignalSink to_service);
  ~FabricHealthWatch();  // stops and joins the thread
  FabricHealthWatch(const FabricHealthWatch&) = delete;
  FabricHealthWatch& operator=(const FabricHealthWatch&) = delete;

  // Polls every interval on a thread of its own until destroyed; problems are logged once each.
  void Start();
  // One poll: asks the fabric manager for the active partitions and the failed NVLinks, and
  // hands the sink every fault that was not there at the last poll that answered. Answers how
  // many it handed over; an error leaves what it remembers as it was.
  Result<size_t> PollOnce();

 private:
  void Run();

  FabricHealthOptions options_;
  FabricSignalSink sink_;
  std::mutex poll_mu_;  // one poll at a time; guards fabric_, seen_, last_problem_
  std::unique_ptr<FabricManager> fabric_;
  std::set<std::string> seen_;  // keys of the faults the last answered poll reported
  std::string last_problem_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tessera::fabricmanager
