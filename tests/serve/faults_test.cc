// GPU faults in the service, in process: a backend whose containers run until stopped, four GPUs
// (three whole, one in MIG mode with two instances) and a stand-in for what recovery reads and
// runs (NVML state, the reset, the self-test). A fault stops only the containers it reaches,
// with its reason, billed to the fault; the GPU leaves the pool at once, is reset, verified and
// checked, and returns; a fault during the reset counts as a failed attempt; too many faults in
// the window keep it out until an operator releases it; every step survives a restart.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>

#include "mps/mps.h"
#include "serve/service.h"
#include "support/fake_mps.h"
#include "support/fake_nvml_state.h"
#include "support/fixture_host.h"

namespace tessera::serve {
namespace {

using namespace std::chrono_literals;
using fleet::ContainerState;
using fleet::LeaseState;
using health::RecoveryStep;
using testing::TempDir;

const char* const kWhole[] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"};
const char* const kMig = "0000:9d:00.0";

// Containers run until stopped; a stop ends them at once with 137.
class RunningBackend final : public backends::ContainerBackend {
 public:
  std::string name() const override { return "running"; }
  Status CheckIsolation(fleet::Isolation, int) const override { return Ok(); }
  Status Start(const backends::StartRequest& request, backends::ExitCallback on_exit) override {
    std::lock_guard lock(mutex_);
    running_[request.id] = std::move(on_exit);
    return Ok();
  }
  Status Watch(const std::string& id, backends::ExitCallback) override {
    return NotFound("container " + id + " does not exist");
  }
  Status Stop(const std::string& id, std::chrono::seconds) override {
    backends::ExitCallback on_exit;
    {
      std::lock_guard lock(mutex_);
      auto it = running_.find(id);
      if (it == running_.end()) return NotFound("container " + id + " does not exist");
      on_exit = std::move(it->second);
      running_.erase(it);
      stopped_.push_back(id);
    }
    on_exit(id, backends::ExitInfo{137, false, ""});
    return Ok();
  }
  Result<backends::BackendContainer> Inspect(const std::string& id) override {
    return NotFound("container " + id + " does not exist");
  }
  Result<std::string> Logs(const std::string&) override { return std::string(); }
  Result<std::vector<backends::BackendContainer>> List() override {
    return std::vector<backends::BackendContainer>{};
  }
  Status Remove(const std::string&) override { return Ok(); }

  std::vector<std::string> stopped() {
    std::lock_guard lock(mutex_);
    return stopped_;
  }

 private:
  std::mutex mutex_;
  std::map<std::string, backends::ExitCallback> running_;
  std::vector<std::string> stopped_;
};

// What recovery reads and runs: a GPU with no process and nothing pending; resets recorded.
// `during_reset` runs inside the next reset (a fault arriving meanwhile).
struct StandIn {
  std::mutex mutex;
  std::vector<std::string> resets;
  std::function<void()> during_reset;
  bool remap_failure = false;
};

class StandInIo final : public RecoveryIo {
 public:
  explicit StandInIo(std::shared_ptr<StandIn> state) : state_(std::move(state)) {}
  health::GpuState ReadState(const fleet::GpuRecord&) override {
    std::lock_guard lock(state_->mutex);
    health::GpuState state;
    state.processes = 0;
    state.remap_pending = false;
    state.remap_failure = state_->remap_failure;
    state.recovery_action = health::RecoveryAction::kNone;
    return state;
  }
  Status Reset(const fleet::GpuRecord& gpu) override {
    std::function<void()> during;
    {
      std::lock_guard lock(state_->mutex);
      state_->resets.push_back(gpu.pci_address);
      during = std::exchange(state_->during_reset, nullptr);
    }
    if (during) during();
    return Ok();
  }
  std::optional<health::SelfTestVerdict> SelfTest(const fleet::GpuRecord&) override {
    return health::SelfTestVerdict{true, ""};
  }

 private:
  std::shared_ptr<StandIn> state_;
};

class GpuFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    // Option ROMs the firmware baseline and check read.
    for (const char* pci : {kWhole[0], kWhole[1], kWhole[2], kMig}) {
      const std::string device = dir_.path() + "/root/sys/bus/pci/devices/" + pci;
      std::filesystem::create_directories(device);
    }
    mps_ = std::make_unique<testing::FakeMps>();  // after the NVML state
    Open(true);
  }
  void TearDown() override {
    if (service_) service_->Stop();
    // The MPS daemons of shares of MIG slices outlive the service on purpose.
    for (const auto& daemon : mps::InspectDaemons(dir_.path() + "/mps")) {
      (void)mps::UnmountShm(daemon.paths.shm);
      (void)mps::UnmountShm(daemon.paths.pipe);
      if (daemon.control_pid) ::kill(static_cast<pid_t>(*daemon.control_pid), SIGKILL);
    }
  }

  void Open(bool with_io, int max_faults = 3) {
    auto store = fleet::OpenSqliteStore(fleet::StoreOptions{dir_.path() + "/t.db"});
    ASSERT_TRUE(store.ok()) << store.error().message;
    auto backend = std::make_unique<RunningBackend>();
    backend_ = backend.get();
    ServiceOptions options;
    options.root = dir_.path() + "/root";
    options.data_dir = dir_.path();
    options.lease_file = dir_.path() + "/leases.json";
    options.stop_grace = 1s;
    options.faults.policy.max_faults = max_faults;
    options.faults.drain_poll = 50ms;
    // Shares of MIG slices: their daemons are the stand-in nvidia-cuda-mps-control's.
    options.sharing.mps.root = dir_.path() + "/mps";
    options.sharing.mps.control_binary = testing::FakeMps::Binary();
    options.sharing.mps.shm_bytes = 4 << 20;
    options.sharing.nvml_library = FAKE_NVML;
    auto service =
        Service::Create(std::move(options), Host(), std::move(*store), std::move(backend));
    ASSERT_TRUE(service.ok()) << service.error().message;
    service_ = std::move(*service);
    if (with_io) service_->SetRecoveryIo(std::make_unique<StandInIo>(io_));
    service_->Start();
  }

  void Restart(bool with_io, int max_faults = 3) {
    service_->Stop();
    service_.reset();
    Open(with_io, max_faults);
  }

  static Service::Host Host() {
    Service::Host host;
    topology::GpuTopology topology;
    int index = 0;
    for (const char* pci : {kWhole[0], kWhole[1], kWhole[2], kMig}) {
      fleet::GpuRecord gpu;
      gpu.pci_address = pci;
      gpu.index = index++;
      gpu.model = "NVIDIA H100 80GB HBM3";
      gpu.cdi_device = std::string("nvidia.com/gpu=") + pci;
      if (std::string(pci) == kMig) {
        gpu.mig_enabled = true;
        gpu.compute_slices = 7;
        for (uint32_t gi : {1u, 2u}) {
          fleet::MigSlice slice;
          slice.id = "MIG-00000000-000" + std::to_string(gi) + "-4000-8000-000000000000";
          slice.profile = "3g.40gb";
          slice.compute_slices = 3;
          slice.cdi_device = "nvidia.com/gpu=3:" + std::to_string(gi);
          slice.gpu_instance_id = gi;
          gpu.mig_slices.push_back(slice);
        }
      }
      host.gpus.push_back(gpu);
      topology::GpuInfo info;
      info.id = pci;
      info.pci_address = pci;
      topology.gpus.push_back(info);
    }
    host.topology = topology;
    return host;
  }

  std::string Submit(const std::string& tenancy, bool mig = false, bool share = false) {
    fleet::ContainerSpec spec;
    spec.image = "busybox";
    spec.tenancy = tenancy;
    if (share) {
      sharing::Share slice_share;
      slice_share.memory_bytes = 4 * sharing::kGiB;
      slice_share.compute_percent = 25;
      slice_share.mig_profile = "3g.40gb";
      spec.share = slice_share;
    } else if (mig) {
      spec.mig = {"3g.40gb", 1};
    } else {
      spec.gpus = 1;
    }
    std::promise<Result<SubmitResult>> answered;
    service_->Submit(admin_, spec, "",
                     [&answered](Result<SubmitResult> result) { answered.set_value(result); });
    auto result = answered.get_future().get();
    EXPECT_TRUE(result.ok()) << result.error().message;
    return result.ok() ? result->container.id : "";
  }

  fleet::ContainerRecord Container(const std::string& id) {
    auto container = service_->GetContainer(admin_, id);
    EXPECT_TRUE(container.ok());
    return container.ok() ? *container : fleet::ContainerRecord{};
  }

  fleet::GpuRecord Gpu(const std::string& pci) {
    for (auto& gpu : service_->ListGpus(admin_))
      if (gpu.pci_address == pci) return gpu;
    ADD_FAILURE() << "no GPU " << pci;
    return {};
  }

  // Polls with a generous bound: the machine may be loaded; only the outcome is asserted.
  template <typename Pred>
  bool WaitFor(Pred pred) {
    for (auto deadline = std::chrono::steady_clock::now() + 60s;
         std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(20ms))
      if (pred()) return true;
    return pred();
  }
  bool WaitState(const std::string& id, ContainerState want) {
    return WaitFor([&] { return Container(id).state == want; });
  }
  bool WaitGpu(const std::string& pci, LeaseState want, RecoveryStep step) {
    return WaitFor([&] {
      auto gpu = Gpu(pci);
      return gpu.state == want && gpu.health.step == step;
    });
  }

  void Fault(const std::string& pci, uint64_t xid, uint32_t gpu_instance = health::kWholeGpu) {
    health::Signal signal;
    signal.kind = health::SignalKind::kXid;
    signal.gpu = pci;
    signal.xid = xid;
    signal.gpu_instance_id = gpu_instance;
    signal.at_ms = fleet::NowMs();
    service_->OnGpuSignal(signal);
  }

  // Three containers, one on each whole GPU: container ID by GPU.
  std::map<std::string, std::string> RunThree() {
    std::map<std::string, std::string> by_gpu;
    for (const char* tenancy : {"alpha", "beta", "gamma"}) {
      const std::string id = Submit(tenancy);
      EXPECT_TRUE(WaitState(id, ContainerState::kRunning)) << id;
      auto container = Container(id);
      EXPECT_EQ(container.gpus.size(), 1u);
      if (!container.gpus.empty()) by_gpu[container.gpus.front()] = id;
    }
    EXPECT_EQ(by_gpu.size(), 3u);
    return by_gpu;
  }

  testing::FakeNvmlState nvml_{""};
  std::unique_ptr<testing::FakeMps> mps_;
  TempDir dir_;
  RunningBackend* backend_ = nullptr;
  std::shared_ptr<StandIn> io_ = std::make_shared<StandIn>();
  std::unique_ptr<Service> service_;
  const Caller admin_ = [] {
    Caller caller;
    caller.admin = true;
    caller.token_id = "admin";
    caller.scope = fleet::TokenScope::kAdmin;
    return caller;
  }();
};

TEST_F(GpuFaults, Xid79StopsOnlyItsGpusContainerAndTheGpuComesBack) {
  auto by_gpu = RunThree();
  const std::string faulty = kWhole[1];
  const std::string victim = by_gpu[faulty];
  const int64_t fault_ms = fleet::NowMs();
  Fault(faulty, 79);
  // Out of the pool at once, with the fault in its history.
  auto gpu = Gpu(faulty);
  EXPECT_NE(gpu.state, LeaseState::kFree);
  ASSERT_FALSE(gpu.health.history.empty());
  EXPECT_EQ(gpu.health.history.back().xid, 79u);

  ASSERT_TRUE(WaitState(victim, ContainerState::kExited));
  auto stopped = Container(victim);
  EXPECT_EQ(stopped.reason, "gpu-fault: Xid 79 (GPU has fallen off the bus) on " + faulty);
  EXPECT_LE(stopped.finished_ms, fleet::NowMs());
  EXPECT_GE(stopped.finished_ms, stopped.started_ms);
  EXPECT_LE(stopped.finished_ms, fault_ms + 5000);  // billed to the fault, not a later exit
  EXPECT_EQ(backend_->stopped(), std::vector<std::string>{victim});
  for (const auto& [pci, id] : by_gpu) {
    if (pci == faulty) continue;
    EXPECT_EQ(Container(id).state, ContainerState::kRunning) << id;
  }

  // Reset, verified, self-tested, firmware-checked: free and healthy, the history kept.
  ASSERT_TRUE(WaitGpu(faulty, LeaseState::kFree, RecoveryStep::kHealthy));
  {
    std::lock_guard lock(io_->mutex);
    EXPECT_EQ(io_->resets, std::vector<std::string>{faulty});
  }
  EXPECT_EQ(Gpu(faulty).health.history.size(), 1u);
  // The other GPUs were never touched.
  for (const auto& [pci, id] : by_gpu) {
    if (pci == faulty) continue;
    EXPECT_EQ(Gpu(pci).state, LeaseState::kActive) << pci;
  }
}

TEST_F(GpuFaults, AnApplicationFaultStopsNothingAndNamesTheXid) {
  auto by_gpu = RunThree();
  const std::string pci = kWhole[0];
  Fault(pci, 13);
  auto container = Container(by_gpu[pci]);
  EXPECT_EQ(container.state, ContainerState::kRunning);
  EXPECT_NE(container.reason.find("Xid 13"), std::string::npos) << container.reason;
  EXPECT_EQ(Gpu(pci).state, LeaseState::kActive);
  EXPECT_TRUE(Gpu(pci).health.in_service());
  EXPECT_TRUE(backend_->stopped().empty());
}

TEST_F(GpuFaults, Xid94OnOneMigInstanceStopsOnlyThatSlicesContainer) {
  const std::string first = Submit("alpha", true);
  const std::string second = Submit("beta", true);
  ASSERT_TRUE(WaitState(first, ContainerState::kRunning));
  ASSERT_TRUE(WaitState(second, ContainerState::kRunning));
  // The instance of the first container's slice.
  uint32_t instance = health::kWholeGpu;
  for (const auto& slice : Gpu(kMig).mig_slices)
    if (slice.container_id == first) instance = slice.gpu_instance_id;
  ASSERT_NE(instance, health::kWholeGpu);
  Fault(kMig, 94, instance);
  ASSERT_TRUE(WaitState(first, ContainerState::kExited));
  EXPECT_NE(Container(first).reason.find("Xid 94"), std::string::npos);
  EXPECT_EQ(Container(second).state, ContainerState::kRunning);
  EXPECT_EQ(backend_->stopped(), std::vector<std::string>{first});
}

TEST_F(GpuFaults, AFaultOnOneMigInstanceStopsOnlyThatSlicesShares) {
  // Two shares join one slice; another tenancy holds the other slice whole.
  const std::string first = Submit("alpha", false, true);
  ASSERT_TRUE(WaitState(first, ContainerState::kRunning)) << Container(first).reason;
  const std::string second = Submit("alpha", false, true);
  ASSERT_TRUE(WaitState(second, ContainerState::kRunning)) << Container(second).reason;
  const std::string whole = Submit("beta", true);
  ASSERT_TRUE(WaitState(whole, ContainerState::kRunning));
  ASSERT_EQ(Container(first).mig_devices, Container(second).mig_devices);
  uint32_t shared_instance = health::kWholeGpu, whole_instance = health::kWholeGpu;
  for (const auto& slice : Gpu(kMig).mig_slices) {
    if (slice.id == Container(first).mig_devices.at(0)) shared_instance = slice.gpu_instance_id;
    if (slice.container_id == whole) whole_instance = slice.gpu_instance_id;
  }
  ASSERT_NE(shared_instance, health::kWholeGpu);
  ASSERT_NE(whole_instance, health::kWholeGpu);
  ASSERT_NE(shared_instance, whole_instance);
  // A fault contained to the shared slice's instance stops both its shares, and only them.
  Fault(kMig, 94, shared_instance);
  ASSERT_TRUE(WaitState(first, ContainerState::kExited));
  ASSERT_TRUE(WaitState(second, ContainerState::kExited));
  EXPECT_NE(Container(second).reason.find("Xid 94"), std::string::npos) << Container(second).reason;
  EXPECT_EQ(Container(whole).state, ContainerState::kRunning);
  auto stopped = backend_->stopped();
  std::sort(stopped.begin(), stopped.end());
  auto want = std::vector<std::string>{first, second};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(stopped, want);
}

TEST_F(GpuFaults, AFaultDuringTheResetIsAFailedAttempt) {
  auto by_gpu = RunThree();
  const std::string pci = kWhole[2];
  {
    std::lock_guard lock(io_->mutex);
    io_->during_reset = [this, pci] { Fault(pci, 48); };
  }
  Fault(pci, 79);
  ASSERT_TRUE(WaitGpu(pci, LeaseState::kFree, RecoveryStep::kHealthy));
  std::lock_guard lock(io_->mutex);
  // The interrupted reset's outcome was dropped: recovery started over and reset again.
  EXPECT_EQ(io_->resets.size(), 2u);
  EXPECT_EQ(Gpu(pci).health.history.size(), 2u);
}

TEST_F(GpuFaults, ThreeFaultsInTheWindowKeepTheGpuOutUntilReleased) {
  const std::string pci = kWhole[0];
  for (int i = 0; i < 2; ++i) {
    Fault(pci, 79);
    ASSERT_TRUE(WaitGpu(pci, LeaseState::kFree, RecoveryStep::kHealthy)) << i;
  }
  Fault(pci, 79);
  auto gpu = Gpu(pci);
  EXPECT_EQ(gpu.state, LeaseState::kFaulted);
  EXPECT_EQ(gpu.health.step, RecoveryStep::kOut);
  EXPECT_NE(gpu.health.reason.find("stays out"), std::string::npos) << gpu.health.reason;
  // Nothing is placed on it meanwhile.
  const std::string id = Submit("alpha");
  ASSERT_TRUE(WaitState(id, ContainerState::kRunning));
  EXPECT_NE(Container(id).gpus.front(), pci);

  std::promise<Result<fleet::GpuRecord>> released;
  service_->GpuAdmin(admin_, pci, GpuAction::kRelease, "",
                     [&released](Result<fleet::GpuRecord> r) { released.set_value(r); });
  auto result = released.get_future().get();
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result->state, LeaseState::kFree);
  EXPECT_TRUE(result->health.in_service());
  EXPECT_EQ(result->health.history.size(), 3u);
}

TEST_F(GpuFaults, ARestartResumesRecoveryWhereItWas) {
  // Without the means to reset, the GPU waits in its step; the step is in the store.
  Restart(/*with_io=*/false);
  const std::string pci = kWhole[1];
  Fault(pci, 79);
  ASSERT_TRUE(WaitGpu(pci, LeaseState::kFaulted, RecoveryStep::kDraining));
  Restart(/*with_io=*/true);
  ASSERT_TRUE(WaitGpu(pci, LeaseState::kFree, RecoveryStep::kHealthy));
  std::lock_guard lock(io_->mutex);
  EXPECT_EQ(io_->resets, std::vector<std::string>{pci});
}

TEST_F(GpuFaults, ARemapFailureKeepsTheGpuOutWithoutResettingAgain) {
  {
    std::lock_guard lock(io_->mutex);
    io_->remap_failure = true;
  }
  const std::string pci = kWhole[0];
  Fault(pci, 79);
  ASSERT_TRUE(WaitGpu(pci, LeaseState::kFaulted, RecoveryStep::kOut));
  std::lock_guard lock(io_->mutex);
  EXPECT_EQ(io_->resets.size(), 1u);
}

TEST_F(GpuFaults, ATenancyThatAsksHasItsStoppedRequestQueuedAgainElsewhere) {
  fleet::Tenancy tenancy;
  tenancy.name = "alpha";
  tenancy.extensions[std::string(kFaultPolicyExtension)] = FaultPolicyToJson(true);
  std::promise<Result<fleet::Tenancy>> put;
  service_->PutTenancy(admin_, tenancy, [&put](Result<fleet::Tenancy> r) { put.set_value(r); });
  ASSERT_TRUE(put.get_future().get().ok());
  const std::string id = Submit("alpha");
  ASSERT_TRUE(WaitState(id, ContainerState::kRunning));
  const std::string pci = Container(id).gpus.front();
  Fault(pci, 79);
  ASSERT_TRUE(WaitState(id, ContainerState::kExited));
  const std::string reason = Container(id).reason;
  const auto at = reason.find("queued again as ");
  ASSERT_NE(at, std::string::npos) << reason;
  const std::string again = reason.substr(at + 16);
  ASSERT_TRUE(WaitState(again, ContainerState::kRunning));
  EXPECT_NE(Container(again).gpus.front(), pci);
}

// Fleet mode: the node agents recover their GPUs and publish the health; the service contains
// a published fault and frees a GPU whose node says it is healthy again.
TEST(FleetGpuFaults, APublishedFaultStopsItsContainerAndAPublishedRecoveryFreesTheGpu) {
  TempDir dir;
  auto store = fleet::OpenSqliteStore(fleet::StoreOptions{dir.path() + "/t.db"});
  ASSERT_TRUE(store.ok()) << store.error().message;
  ServiceOptions options;
  options.data_dir = dir.path();
  options.lease_file = dir.path() + "/leases.json";
  options.fleet = true;
  auto created = Service::Create(std::move(options), Service::Host{}, std::move(*store),
                                 std::make_unique<RunningBackend>());
  ASSERT_TRUE(created.ok()) << created.error().message;
  std::unique_ptr<Service> service = std::move(*created);
  service->Start();
  Caller admin;
  admin.admin = true;
  admin.token_id = "admin";
  admin.scope = fleet::TokenScope::kAdmin;

  auto publish = [&](const health::GpuHealth& health) {
    Service::NodeInventory node;
    node.name = "node-a";
    for (const char* pci : {kWhole[0], kWhole[1]}) {
      fleet::GpuRecord gpu;
      gpu.pci_address = pci;
      gpu.model = "NVIDIA H100 80GB HBM3";
      gpu.cdi_device = std::string("nvidia.com/gpu=") + pci;
      if (std::string(pci) == kWhole[0]) gpu.health = health;
      node.gpus.push_back(gpu);
      topology::GpuInfo info;
      info.id = pci;
      info.pci_address = pci;
      node.topology.gpus.push_back(info);
    }
    service->UpdateNodes({node});
  };
  publish({});
  fleet::ContainerSpec spec;
  spec.image = "busybox";
  spec.tenancy = "alpha";
  spec.gpus = 2;
  std::promise<Result<SubmitResult>> answered;
  service->Submit(admin, spec, "", [&](Result<SubmitResult> r) { answered.set_value(r); });
  auto submitted = answered.get_future().get();
  ASSERT_TRUE(submitted.ok()) << submitted.error().message;
  const std::string id = submitted->container.id;
  auto state = [&] { return service->GetContainer(admin, id)->state; };
  auto wait = [&](auto pred) {
    for (auto deadline = std::chrono::steady_clock::now() + 60s;
         std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(20ms))
      if (pred()) return true;
    return pred();
  };
  ASSERT_TRUE(wait([&] { return state() == ContainerState::kRunning; }));

  const std::string gpu_id = std::string(kWhole[0]) + "@node-a";
  auto gpu = [&] {
    for (auto& g : service->ListGpus(admin))
      if (g.id() == gpu_id) return g;
    return fleet::GpuRecord{};
  };
  health::GpuHealth faulted;
  faulted.step = RecoveryStep::kDraining;
  faulted.reason = std::string("gpu-fault: Xid 79 (GPU has fallen off the bus) on ") + kWhole[0];
  faulted.faulted_ms = fleet::NowMs();
  faulted.history.push_back({faulted.faulted_ms, "xid", 79, "gpu", "stop-gpu", faulted.reason});
  publish(faulted);
  EXPECT_EQ(gpu().state, LeaseState::kFaulted);
  ASSERT_TRUE(wait([&] { return state() == ContainerState::kExited; }));
  EXPECT_EQ(service->GetContainer(admin, id)->reason, faulted.reason);

  health::GpuHealth recovered = faulted;
  recovered.step = RecoveryStep::kHealthy;
  recovered.reason.clear();
  recovered.faulted_ms = 0;
  publish(recovered);
  EXPECT_EQ(gpu().state, LeaseState::kFree);
  EXPECT_EQ(gpu().health.history.size(), 1u);
  service->Stop();
}

TEST(GpuHealthRecord, ReadsBackEqual) {
  health::GpuHealth health;
  health.step = RecoveryStep::kVerifying;
  health.reason = "gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:9d:00.0";
  health.attempts = 2;
  health.step_since_ms = 1700000000123;
  health.faulted_ms = 1700000000000;
  health.history.push_back({1700000000000, "xid", 79, "gpu", "stop-gpu", health.reason});
  auto back = fleet::ParseGpuHealthJson(fleet::GpuHealthToJson(health));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, health);
  EXPECT_FALSE(fleet::ParseGpuHealthJson(R"({"step":"sideways"})").ok());
  EXPECT_FALSE(fleet::ParseGpuHealthJson(R"({"attempts":"2"})").ok());
  EXPECT_FALSE(fleet::ParseGpuHealthJson(R"([1])").ok());
}

}  // namespace
}  // namespace tessera::serve
