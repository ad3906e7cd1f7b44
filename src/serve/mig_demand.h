// MIG by demand: when waiting MIG requests cannot be placed on the free slices, the service makes
// the instance they need (destroying only idle instances, never one that holds a container) and
// keeps memory slices for a large request that busy instances block (mig_demand_plan.h decides).
// One thread: a snapshot under the model's lock, the decision outside it, a check under the lock
// again, the GPU marked as being changed, the NVML calls outside the lock, then the GPU's new
// MIG devices go into its record and the scheduler's placement pass places the request.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "fleet/fleet.h"
#include "mig/mig.h"
#include "serve/mig_demand_plan.h"

namespace tessera::serve {

class Model;

// What changes this host's MIG instances (tessera-serve's host side: NVML, device nodes, CDI).
class MigShaper {
 public:
  virtual ~MigShaper() = default;
  // The board's profile table of a GPU; nullptr: its instances are never changed.
  virtual const mig::ProfileTable* TableOf(const std::string& pci_address) const = 0;
  // The GPU instances NVML reports now (busy unset).
  virtual Result<std::vector<mig::LiveInstance>> Instances(const std::string& pci_address) = 0;
  struct Outcome {
    Status status = Ok();             // the first step that failed, named
    std::optional<uint32_t> refused;  // an instance whose destroy NVML refused (in use)
    std::optional<uint32_t> created;  // the new GPU instance
    std::string created_uuid;         // its MIG device's UUID, when read back
    std::optional<std::vector<fleet::MigSlice>> slices;  // the GPU's MIG devices read again
    std::optional<std::vector<mig::LiveInstance>> instances;
  };
  // Destroys the step's instances, then makes its new one; then the GPU's MIG devices are read
  // again, their device nodes made and the CDI spec written again (also after a failure).
  virtual Outcome Apply(const std::string& pci_address, const mig::ShapeStep& step) = 0;
};

class MigDemand {
 public:
  MigDemand(Model& model, std::shared_ptr<MigShaper> shaper);
  ~MigDemand();
  MigDemand(const MigDemand&) = delete;
  MigDemand& operator=(const MigDemand&) = delete;
  void Start();
  void Stop();

 private:
  struct Snapshot {
    std::vector<MigDemandGpu> gpus;
    std::vector<MigWant> wants;
    std::vector<MigReservation> held;
  };
  struct Change {
    std::string pci_address;
    std::string for_container;
    mig::ShapeStep step;
    std::chrono::microseconds decided{0};
  };
  void Loop();
  void ReadInstances();
  Snapshot SnapshotLocked();
  // The decision's reservations and reasons become the model's; its step, when it still holds,
  // marks its GPU as being changed.
  std::optional<Change> AdoptLocked(const Snapshot& snapshot, MigDemandDecision decision,
                                    std::chrono::microseconds decided);
  bool StillHoldsLocked(const Change& change) const;
  void FinishLocked(const Change& change, const MigShaper::Outcome& outcome);

  Model& model_;
  std::shared_ptr<MigShaper> shaper_;
  bool stopping_ = false;  // guarded by model_.mu
  // Instances whose destroy NVML refused (in use): busy until then, (PCI, GI) -> time.
  std::map<std::pair<std::string, uint32_t>, std::chrono::steady_clock::time_point> refused_;
  // Instances made for a waiting request, (PCI, GI) -> its container: busy for every other
  // decision until that request is placed or gone.
  std::map<std::pair<std::string, uint32_t>, std::string> promised_;
  std::thread thread_;
};

// The most reservations held at once, and the most waiting requests one decision looks at.
inline constexpr size_t kMaxMigReservations = 4;
inline constexpr size_t kMaxMigWants = 1024;

}  // namespace tessera::serve
