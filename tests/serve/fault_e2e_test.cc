// GPU faults through a real tessera-serve with real podman containers: its health monitor reads
// the stand-in NVML's events and fault state, and resets with the stand-in nvidia-smi. An Xid 79
// on one of three GPUs stops only that GPU's container, with the reason; the GPU is reset,
// verified, firmware-checked and free again. An Xid 13 stops nothing and is named in the
// container's reason. A kill -9 while a GPU waits to be reset resumes its recovery.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <map>
#include <thread>

#include "serve/podman_serve_fixture.h"
#include "support/fake_nvml_state.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

class FaultServeTest : public PodmanServeTest {
 protected:
  FaultServeTest() : PodmanServeTest("faults") {}

  void StartWithHealth() {
    StartServe({"--nvml", FAKE_NVML, "--gpu-reset-command",
                std::string(FAKE_NVIDIA_SMI) + " -r -i {pci}", "--health-poll-interval", "200ms",
                "--telemetry-interval", "500ms"});
  }

  std::string SubmitSleeper(const std::string& tenancy) {
    return SubmitAccepted({{"image", image_},
                           {"tenancy", tenancy},
                           {"gpus", 1},
                           {"command", {"/bin/sh", "-c", "exec sleep 600"}}});
  }

  // Three running containers, one per GPU: container ID by GPU.
  std::map<std::string, std::string> RunThree() {
    std::map<std::string, std::string> by_gpu;
    for (const char* tenancy : {"alpha", "beta", "gamma"}) {
      const std::string id = SubmitSleeper(tenancy);
      const json running = WaitFor(id, {"running"});
      EXPECT_EQ(running.value("state", ""), "running") << running;
      if (running.contains("gpus") && running["gpus"].size() == 1)
        by_gpu[running["gpus"][0].get<std::string>()] = id;
    }
    EXPECT_EQ(by_gpu.size(), 3u);
    return by_gpu;
  }

  std::string GpuState(const std::string& pci) {
    const json listed = Get("/v1/gpus");
    for (const auto& gpu : listed["gpus"])
      if (gpu.value("pci_address", "") == pci) return gpu.value("state", "");
    return "";
  }

  bool WaitGpuState(const std::string& pci, const std::string& state) {
    return WaitUntil([&] { return GpuState(pci) == state; }, std::chrono::seconds(120));
  }

  FakeNvmlFaults faults_;
};

TEST_F(FaultServeTest, Xid79StopsOnlyItsGpusContainerAndTheGpuReturnsAfterItsReset) {
  StartWithHealth();
  auto by_gpu = RunThree();
  ASSERT_EQ(by_gpu.size(), 3u);
  const std::string faulty = by_gpu.begin()->first;
  faults_.AddEvent(faulty + " 79");

  const json stopped = WaitFor(by_gpu[faulty], {"exited", "failed"});
  EXPECT_EQ(stopped.value("reason", ""),
            "gpu-fault: Xid 79 (GPU has fallen off the bus) on " + faulty)
      << stopped;
  for (const auto& [pci, id] : by_gpu) {
    if (pci == faulty) continue;
    EXPECT_EQ(Get("/v1/containers/" + id).value("state", ""), "running") << id;
  }
  // Reset by the stand-in nvidia-smi, verified, checked: free again.
  EXPECT_TRUE(WaitGpuState(faulty, "free")) << serve_->log();
  EXPECT_NE(faults_.ResetLog().find(faulty), std::string::npos) << faults_.ResetLog();
  for (const auto& [pci, id] : by_gpu) {
    if (pci == faulty) continue;
    EXPECT_EQ(GpuState(pci), "active") << pci;
  }

  // An application fault stops nothing; the container's record names it.
  const std::string other = std::next(by_gpu.begin())->first;
  faults_.AddEvent(other + " 13");
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Get("/v1/containers/" + by_gpu[other]).value("reason", "").find("Xid 13") !=
               std::string::npos;
      },
      std::chrono::seconds(60)));
  EXPECT_EQ(Get("/v1/containers/" + by_gpu[other]).value("state", ""), "running");
}

TEST_F(FaultServeTest, AKillDuringRecoveryResumesItAfterTheRestart) {
  StartWithHealth();
  const std::string pci = gpus_.front();
  // A process still holds the GPU: recovery waits in draining.
  faults_.SetFaults(pci + " processes=1\n");
  faults_.AddEvent(pci + " 79");
  ASSERT_TRUE(WaitGpuState(pci, "faulted")) << serve_->log();
  serve_->Kill(SIGKILL);
  faults_.SetFaults(pci + " processes=0\n");
  Restart();
  EXPECT_TRUE(WaitGpuState(pci, "free")) << serve_->log();
  EXPECT_NE(faults_.ResetLog().find(pci), std::string::npos) << faults_.ResetLog();
}

TEST_F(FaultServeTest, ThreeFaultsWithinTheWindowKeepTheGpuOutUntilReleased) {
  StartWithHealth();
  const std::string pci = gpus_.front();
  auto resets = [&] {
    const std::string log = faults_.ResetLog();
    return static_cast<size_t>(std::count(log.begin(), log.end(), '\n'));
  };
  for (size_t i = 1; i <= 2; ++i) {
    faults_.AddEvent(pci + " 79");
    // Each fault is reset once and the GPU returns before the next one comes.
    ASSERT_TRUE(WaitUntil([&] { return resets() == i && GpuState(pci) == "free"; },
                          std::chrono::seconds(120)))
        << i << faults_.ResetLog() << serve_->log();
  }
  faults_.AddEvent(pci + " 79");
  ASSERT_TRUE(WaitGpuState(pci, "faulted")) << serve_->log();
  // It stays out: no reset is tried for the third fault.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(GpuState(pci), "faulted");
  EXPECT_EQ(resets(), 2u) << faults_.ResetLog();
  int status = 0;
  auto released = CallJson(*admin_, "POST", "/v1/gpus/" + pci + "/release", "{}", &status);
  EXPECT_EQ(status, 200) << released;
  EXPECT_TRUE(WaitGpuState(pci, "free"));
}

}  // namespace
}  // namespace tessera::testing
