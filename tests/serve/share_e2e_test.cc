// Shares of a GPU through a real tessera-serve with real podman containers, the stand-in NVML
// (memory, compute modes) and the stand-in nvidia-cuda-mps-control: the contract's order, nothing
// started before the ready marker (after a config change too), exactly the env, pipe bind and
// private shm in `podman inspect`, one tenancy per shared GPU, no memory overcommitted under 50
// concurrent submissions, a daemon crash that drains and restarts, metering by fraction, a
// teardown that puts the compute mode back, and the watchdog fed by telemetry's attribution of
// the stand-in NVML's processes to the real containers' PIDs.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "mps/mps.h"
#include "serve/container_wait.h"
#include "serve/podman_serve_fixture.h"
#include "serve/serve_process.h"
#include "support/fake_mps.h"
#include "support/fake_nvml_state.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBoard = uint64_t{81559} * kMiB;  // the stand-in H100's memory
constexpr uint64_t kReserve = uint64_t{1} << 30;     // --share-reserve default

std::string Uuid(int i) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-5e4b7c1%d-3c2a-4d8e-9f10-a1b2c3d4e5f%d", i, i);
  return buf;
}

class ShareServeTest : public PodmanServeTest {
 protected:
  ShareServeTest() : PodmanServeTest("share") {}

  void SetUp() override {
    PodmanServeTest::SetUp();
    for (size_t i = 0; i < gpus_.size(); ++i)
      nvml_.Append("gpu " + gpus_[i] + " board=h100-80gb uuid=" + Uuid(static_cast<int>(i)));
    mps_ = std::make_unique<FakeMps>();  // after the NVML state: it takes over the call log
    mps_root_ = dir_.path() + "/mps";
    mps_->Watch(mps_root_ + "/{uuid}/ready");
  }

  void TearDown() override {
    PodmanServeTest::TearDown();
    // The daemons outlive a killed service on purpose; the test's own go here.
    for (const auto& daemon : mps::InspectDaemons(mps_root_)) {
      (void)mps::UnmountShm(daemon.paths.shm);
      (void)mps::UnmountShm(daemon.paths.pipe);
      if (daemon.control_pid) ::kill(static_cast<pid_t>(*daemon.control_pid), SIGKILL);
    }
  }

  void Start(std::vector<std::string> extra = {}) {
    std::vector<std::string> flags = {"--nvml",
                                      FAKE_NVML,
                                      "--mps-root",
                                      mps_root_,
                                      "--mps-control",
                                      FakeMps::Binary(),
                                      "--nvidia-smi",
                                      FakeMps::NvidiaSmi(),
                                      "--mps-shm-mib",
                                      "4",
                                      "--share-check-interval",
                                      "200ms",
                                      "--mps-command-timeout",
                                      command_timeout_};
    flags.insert(flags.end(), extra.begin(), extra.end());
    StartServe(flags);
  }

  std::string SubmitShare(const std::string& tenancy, const std::string& memory, int compute,
                          const std::string& mode = "mps",
                          const std::string& script = "exec sleep 600") {
    return SubmitAccepted({{"image", image_},
                           {"tenancy", tenancy},
                           {"share", {{"memory", memory}, {"compute", compute}, {"mode", mode}}},
                           {"command", {"/bin/sh", "-c", script}}});
  }

  json Gpu(const std::string& pci) {
    const json listed = Get("/v1/gpus");
    for (const auto& gpu : listed["gpus"])
      if (gpu["pci_address"] == pci) return gpu;
    ADD_FAILURE() << "no GPU " << pci;
    return json();
  }

  std::string GpuOf(const std::string& id) {
    auto container = Get("/v1/containers/" + id);
    return container["gpus"].empty() ? "" : container["gpus"][0].get<std::string>();
  }

  int IndexOf(const std::string& pci) {
    return static_cast<int>(std::find(gpus_.begin(), gpus_.end(), pci) - gpus_.begin());
  }

  // Whether podman has created the container of `id` yet.
  bool Created(const std::string& id) {
    auto listed = Podman::Get().Run(
        {"ps", "-a", "--filter", "label=tessera.container=" + id, "--format", "{{.ID}}"});
    return listed.status == 0 && !listed.output.empty();
  }

  json Inspect(const std::string& id) {
    auto answer = Podman::Get().Run({"inspect", "--type", "container", "tessera-" + id});
    EXPECT_EQ(answer.status, 0) << answer.output;
    // podman warns about the fixture's device nodes on stderr, before the JSON.
    const size_t at = answer.output.rfind("\n[", answer.output.find("\n{"));
    auto doc = json::parse(
        answer.output.substr(answer.output[0] == '[' || at == std::string::npos ? 0 : at + 1),
        nullptr, false);
    return doc.is_array() && !doc.empty() ? doc[0] : json();
  }

  void Stop(const std::string& id) {
    int status = 0;
    CallJson(*admin_, "DELETE", "/v1/containers/" + id, "", &status);
    EXPECT_EQ(status, 202);
    WaitFor(id, {"exited", "failed"});
  }

  FakeNvmlState nvml_{""};
  std::unique_ptr<FakeMps> mps_;
  std::string mps_root_;
  std::string command_timeout_ = "2s";
};

TEST_F(ShareServeTest, AnMpsShareStartsAfterTheMarkerWithExactlyItsEnvPipeAndShm) {
  mps_->SetStartDelayMs(Uuid(0), 1500);  // the daemon comes up slowly
  Start();
  const std::string id = SubmitShare("team", "20Gi", 25);
  const mps::DaemonConfig config{Uuid(0), gpus_[0], 20 * 1024 * kMiB, 25};
  const std::string hash = mps::ConfigHash(config);
  const mps::Paths paths = *mps::PathsFor(mps_root_, Uuid(0));
  // Whenever podman has the container, the marker holds this config's hash.
  bool seen = false;
  ASSERT_TRUE(WaitUntil(
      [&] {
        if (!Created(id)) return false;
        seen = true;
        return true;
      },
      240s, 10ms));
  EXPECT_EQ(mps::ReadReadyMarker(paths), hash);
  auto running = WaitFor(id, {"running", "exited", "failed"});
  ASSERT_EQ(running["state"], "running") << running << "\n" << serve_->log();

  // Compute mode, then the daemon, then the limits, then the marker.
  const std::string transcript = mps_->Transcript();
  const size_t mode = transcript.find("nvmlDeviceSetComputeMode " + gpus_[0] + " 3 -> 0");
  const size_t daemon = transcript.find(Uuid(0) + " -f");
  const size_t memory =
      transcript.find(Uuid(0) + " cmd set_default_device_pinned_mem_limit 0 20480M");
  const size_t threads = transcript.find(Uuid(0) + " cmd set_default_active_thread_percentage 25");
  ASSERT_NE(mode, std::string::npos) << transcript;
  ASSERT_NE(daemon, std::string::npos) << transcript;
  ASSERT_NE(memory, std::string::npos) << transcript;
  ASSERT_NE(threads, std::string::npos) << transcript;
  EXPECT_LT(mode, daemon);
  EXPECT_LT(daemon, memory);
  EXPECT_LT(memory, threads);
  EXPECT_EQ(mps_->Lines("cmd set_default_active_thread_percentage 25 [watch absent]").size(), 1u)
      << transcript;
  EXPECT_EQ(mps_->ComputeMode(gpus_[0]), 3);

  // podman inspect: exactly its MPS environment, the pipe bind and the private shm.
  const json inspect = Inspect(id);
  std::map<std::string, std::string> mps_env;
  for (const auto& entry : inspect["Config"]["Env"]) {
    const std::string text = entry.get<std::string>();
    EXPECT_EQ(text.find("/tmp/nvidia-mps"), std::string::npos) << text;
    if (text.rfind("CUDA_MPS_", 0) == 0)
      mps_env[text.substr(0, text.find('='))] = text.substr(text.find('=') + 1);
  }
  EXPECT_EQ(mps_env,
            (std::map<std::string, std::string>{{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25"},
                                                {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=20480M"},
                                                {"CUDA_MPS_PIPE_DIRECTORY", "/run/tessera/mps"}}));
  std::map<std::string, std::string> binds;  // destination -> source
  std::map<std::string, bool> writable;      // destination -> RW
  for (const auto& mount : inspect["Mounts"]) {
    const std::string source = mount.value("Source", ""),
                      destination = mount.value("Destination", "");
    EXPECT_EQ(source.find("/tmp/nvidia-mps"), std::string::npos) << mount;
    EXPECT_EQ(destination.find("/tmp/nvidia-mps"), std::string::npos) << mount;
    binds[destination] = source;
    writable[destination] = mount.value("RW", true);
  }
  EXPECT_EQ(binds["/run/tessera/mps"], paths.pipe);
  // The pipe directory is the container's to connect through, never to write in.
  EXPECT_FALSE(writable["/run/tessera/mps"]);
  EXPECT_TRUE(mps::IsMountPoint(paths.pipe));
  EXPECT_EQ(binds["/dev/shm"], paths.shm);
  EXPECT_TRUE(mps::IsMountPoint(paths.shm));

  // The lease and the container say what holds the limits, and meter the fraction.
  const json container = Get("/v1/containers/" + id);
  EXPECT_EQ(container["enforcement"], "driver");
  EXPECT_EQ(container["share"]["memory"], "20Gi");
  EXPECT_NEAR(container["share_gpus"].get<double>(), 20.0 * 1024 / 81559, 1e-9);
  bool leased = false;
  const json leases = Get("/v1/leases");
  for (const auto& lease : leases["leases"]) {
    if (lease["gpu"] != gpus_[0]) continue;
    leased = true;
    EXPECT_EQ(lease["mode"], "mps");
    EXPECT_EQ(lease["enforcement"], "driver");
    ASSERT_EQ(lease["shares"].size(), 1u);
    EXPECT_EQ(lease["shares"][0]["compute"], 25);
  }
  EXPECT_TRUE(leased) << leases;
  EXPECT_TRUE(seen);
}

TEST_F(ShareServeTest, AConfigChangeHoldsTheNextShareUntilTheNewMarker) {
  Start();
  const std::string a = SubmitShare("team", "10Gi", 25);
  ASSERT_EQ(WaitFor(a, {"running", "exited", "failed"})["state"], "running");
  const std::string gpu = GpuOf(a);
  const int index = IndexOf(gpu);
  const mps::Paths paths = *mps::PathsFor(mps_root_, Uuid(index));
  const std::string old_hash = mps::ReadReadyMarker(paths);
  ASSERT_FALSE(old_hash.empty());
  // Every answer of the daemon now takes a while: the change has a window to watch.
  mps_->SetAnswerDelayMs(Uuid(index), 400);
  const std::string b = SubmitShare("team", "30Gi", 40);
  const std::string new_hash = mps::ConfigHash({Uuid(index), gpu, uint64_t{30} * 1024 * kMiB, 40});
  bool marker_gone = false;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const std::string marker = mps::ReadReadyMarker(paths);
        if (marker.empty()) marker_gone = true;
        // B's container never exists before the marker holds the new config's hash.
        if (Created(b)) {
          EXPECT_EQ(mps::ReadReadyMarker(paths), new_hash);
          return true;
        }
        return false;
      },
      120s, 10ms));
  EXPECT_TRUE(marker_gone);
  EXPECT_EQ(GpuOf(b), gpu);  // the fullest GPU first
  ASSERT_EQ(WaitFor(b, {"running", "exited", "failed"})["state"], "running");
  // The running server of A got the new limits too (none runs in the stand-in without clients,
  // so the defaults are what changed), with no marker there meanwhile.
  const auto lines = mps_->Lines(Uuid(index) + " cmd set_default_device_pinned_mem_limit 0 30720M");
  ASSERT_EQ(lines.size(), 1u) << mps_->Transcript();
  EXPECT_NE(lines[0].find("[watch absent]"), std::string::npos) << lines[0];
  EXPECT_EQ(mps_->Lines(Uuid(index) + " -f").size(), 1u);  // the same daemon
}

TEST_F(ShareServeTest, ASecondTenancyIsNeverPlacedOnASharedGpuByDefault) {
  Start();
  const std::string a = SubmitShare("alpha", "10Gi", 10);
  ASSERT_EQ(WaitFor(a, {"running", "exited", "failed"})["state"], "running");
  const std::string b = SubmitShare("beta", "10Gi", 10);
  ASSERT_EQ(WaitFor(b, {"running", "exited", "failed"})["state"], "running");
  EXPECT_NE(GpuOf(a), GpuOf(b));
  const json shared = Gpu(GpuOf(a))["shared"];
  ASSERT_EQ(shared["shares"].size(), 1u) << shared;
  EXPECT_EQ(shared["shares"][0]["tenancy"], "alpha");
  // The same tenancy goes onto the shared GPU.
  const std::string c = SubmitShare("alpha", "10Gi", 10);
  ASSERT_EQ(WaitFor(c, {"running", "exited", "failed"})["state"], "running");
  EXPECT_EQ(GpuOf(c), GpuOf(a));
}

TEST_F(ShareServeTest, MemoryIsNeverOvercommittedUnderFiftyConcurrentSubmissions) {
  Start();
  // 30 GiB each: two fit a GPU (79.6 GiB less the 1 GiB reserve), so 16 run and 34 wait.
  std::vector<std::string> ids(50);
  std::vector<std::thread> submitters;
  for (int t = 0; t < 5; ++t) {
    submitters.emplace_back([&, t] {
      auto connection = serve_->Connect(serve_->admin_token());
      for (int i = t; i < 50; i += 5) {
        int status = 0;
        auto answer = CallJson(*connection, "POST", "/v1/containers",
                               json{{"image", image_},
                                    {"tenancy", "crowd"},
                                    {"share", {{"memory", "30Gi"}, {"compute", 5}}},
                                    {"command", {"/bin/sh", "-c", "exec sleep 600"}}}
                                   .dump(),
                               &status);
        ids[i] = answer.value("id", "");
      }
    });
  }
  std::atomic<bool> done{false};
  int worst = 0;  // most MiB any GPU held, over the run
  std::thread watcher([&] {
    // A connection of its own: one connection carries one exchange at a time.
    auto connection = serve_->Connect(serve_->admin_token());
    while (!done) {
      int status = 0;
      auto listed = CallJson(*connection, "GET", "/v1/gpus", "", &status);
      if (status == 200) {
        for (const auto& gpu : listed["gpus"]) {
          if (gpu["shared"].is_null()) continue;
          uint64_t held = 0;
          for (const auto& share : gpu["shared"]["shares"])
            held += share["memory_bytes"].get<uint64_t>();
          worst = std::max(worst, static_cast<int>(held / kMiB));
          EXPECT_LE(held, kBoard - kReserve) << gpu;
        }
      }
      std::this_thread::sleep_for(20ms);
    }
  });
  for (auto& submitter : submitters)
    submitter.join();
  for (const auto& id : ids)
    ASSERT_FALSE(id.empty());
  int running = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const json listed = Get("/v1/containers?state=running&tenancy=crowd");
        running = static_cast<int>(listed["containers"].size());
        return running == 16;
      },
      300s, 200ms))
      << running << " running\n"
      << serve_->log();
  done = true;
  watcher.join();
  EXPECT_EQ(worst, 2 * 30 * 1024);
  // The rest wait, saying why.
  const json waiting = Get("/v1/containers?state=pending&tenancy=crowd");
  ASSERT_EQ(waiting["containers"].size(), 34u) << Get("/v1/containers?tenancy=crowd") << "\n"
                                               << serve_->log();
  EXPECT_NE(waiting["containers"][0]["reason"].get<std::string>().find("waiting: room on a GPU"),
            std::string::npos)
      << waiting["containers"][0];
}

TEST_F(ShareServeTest, ADaemonCrashDrainsTheGpuRestartsItAndReappliesTheLimits) {
  Start();
  const std::string a = SubmitShare("team", "20Gi", 25);
  ASSERT_EQ(WaitFor(a, {"running", "exited", "failed"})["state"], "running");
  const std::string gpu = GpuOf(a);
  const int index = IndexOf(gpu);
  mps_->SetBehaviour(Uuid(index), "exit");  // the daemon crashes, once
  const json ended = WaitFor(a, {"exited", "failed"});
  EXPECT_EQ(ended["reason"].get<std::string>().rfind("gpu-shared-fault: ", 0), 0u) << ended;
  // Restarted with its limits, the marker last; the GPU takes shares again.
  ASSERT_TRUE(WaitUntil([&] { return mps_->Lines(Uuid(index) + " -f").size() >= 2; }, 60s))
      << mps_->Transcript() << serve_->log();
  const auto limits =
      mps_->Lines(Uuid(index) + " cmd set_default_device_pinned_mem_limit 0 20480M");
  ASSERT_GE(limits.size(), 2u) << mps_->Transcript();
  EXPECT_NE(limits.back().find("[watch absent]"), std::string::npos) << limits.back();
  const std::string b = SubmitShare("team", "10Gi", 10);
  ASSERT_EQ(WaitFor(b, {"running", "exited", "failed"})["state"], "running");
  EXPECT_TRUE(Gpu(GpuOf(b))["shared"]["healthy"].get<bool>());
}

TEST_F(ShareServeTest, ATenantCanPlantNothingInItsPipeDirectoryAndLimitsItMovesAreRestored) {
  Start();
  // A container that tries what an attacker would in the pipe directory, and says what it got
  // through its shm (the host can read that).
  const std::string attempts =
      "cd /run/tessera/mps; r=''; "
      "mkfifo nvidia-cuda-mps-control.pid 2>/dev/null && r=\"$r fifo\"; "
      "ln -s /run/tessera control2 2>/dev/null && r=\"$r symlink\"; "
      "rm -f control 2>/dev/null && r=\"$r unlink\"; "
      "dd if=/dev/zero of=fill bs=64k count=64 2>/dev/null && r=\"$r fill\"; "
      "echo \"planted:$r\" > /dev/shm/result; exec sleep 600";
  const std::string attacker = SubmitShare("mallory", "20Gi", 25, "mps", attempts);
  const std::string victim = SubmitShare("alice", "20Gi", 25);
  ASSERT_EQ(WaitFor(attacker, {"running", "exited", "failed"})["state"], "running");
  ASSERT_EQ(WaitFor(victim, {"running", "exited", "failed"})["state"], "running");
  const int attacker_gpu = IndexOf(GpuOf(attacker)), victim_gpu = IndexOf(GpuOf(victim));
  ASSERT_NE(attacker_gpu, victim_gpu);  // an MPS daemon is one tenancy's
  const mps::Paths paths = *mps::PathsFor(mps_root_, Uuid(attacker_gpu));
  std::string result;
  ASSERT_TRUE(WaitUntil(
      [&] {
        result = ReadText(paths.shm + "/result");
        return !result.empty();
      },
      120s));
  EXPECT_EQ(Trimmed(result), "planted:") << result;
  struct stat st {};
  ASSERT_EQ(::lstat((paths.pipe + "/control").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));

  // It still holds the control socket, so it may move its daemon's limits: put back within a
  // check, and logged.
  const size_t victim_commands = mps_->Lines(Uuid(victim_gpu) + " cmd set_").size();
  int status = 0;
  RunCommand("echo 'set_default_active_thread_percentage 100' | CUDA_MPS_PIPE_DIRECTORY=" +
                 paths.pipe + " " + FakeMps::Binary(),
             &status);
  ASSERT_EQ(status, 0);
  const size_t moved = mps_->Transcript().size();
  ASSERT_TRUE(WaitUntil(
      [&] {
        const std::string transcript = mps_->Transcript();
        return transcript.find(Uuid(attacker_gpu) + " cmd set_default_active_thread_percentage 25",
                               moved) != std::string::npos;
      },
      60s))
      << mps_->Transcript() << serve_->log();
  EXPECT_TRUE(WaitUntil(
      [&] { return serve_->log().find("limits changed from outside") != std::string::npos; }, 60s));
  // The other tenancy's daemon heard nothing of it, and its container runs on.
  EXPECT_EQ(mps_->Lines(Uuid(victim_gpu) + " cmd set_").size(), victim_commands);
  EXPECT_TRUE(mps_->Lines(Uuid(victim_gpu) + " cmd quit").empty());
  EXPECT_EQ(Get("/v1/containers/" + victim)["state"], "running");
  EXPECT_EQ(Get("/v1/containers/" + attacker)["state"], "running");
}

TEST_F(ShareServeTest, AHungDaemonStallsNeitherAnotherGpusRecoveryNorTheStop) {
  // Checked every 200 ms, each command bounded by 24 s: a daemon that never answers again costs
  // its own GPU's keeper that long, and no other GPU anything.
  command_timeout_ = "24s";
  Start();
  const std::string stuck = SubmitShare("mallory", "20Gi", 25);
  const std::string other = SubmitShare("alice", "20Gi", 25);
  ASSERT_EQ(WaitFor(stuck, {"running", "exited", "failed"})["state"], "running");
  ASSERT_EQ(WaitFor(other, {"running", "exited", "failed"})["state"], "running");
  const int stuck_gpu = IndexOf(GpuOf(stuck)), other_gpu = IndexOf(GpuOf(other));
  ASSERT_NE(stuck_gpu, other_gpu);
  mps_->SetBehaviour(Uuid(stuck_gpu), "hang");
  ASSERT_TRUE(WaitUntil([&] { return !mps_->Lines(Uuid(stuck_gpu) + " hangs").empty(); }, 60s));
  // Meanwhile the other GPU's daemon dies: found, drained and restarted as if nothing else were
  // wrong. (The stuck one's own restart is what ends its hang: the check that timed out drains
  // it the same way.)
  mps_->SetBehaviour(Uuid(other_gpu), "exit");
  // Seen at its own GPU's pace (every 200 ms), not after the stuck GPU's 24 s: generous, yet
  // less than one stuck command.
  json ended;
  EXPECT_TRUE(WaitUntil(
      [&] {
        ended = Get("/v1/containers/" + other);
        return ended["state"] == "exited" || ended["state"] == "failed";
      },
      18s))
      << serve_->log();
  ended = WaitFor(other, {"exited", "failed"});
  EXPECT_EQ(ended["reason"].get<std::string>().rfind("gpu-shared-fault: ", 0), 0u) << ended;
  ASSERT_TRUE(WaitUntil([&] { return mps_->Lines(Uuid(other_gpu) + " -f").size() >= 2; }, 18s))
      << mps_->Transcript() << serve_->log();
  // Stopping the service while a daemon that holds a running share hangs: it exits, bounded by
  // one command time-out.
  const std::string again = SubmitShare("alice", "10Gi", 10);
  ASSERT_EQ(WaitFor(again, {"running", "exited", "failed"})["state"], "running");
  const int again_gpu = IndexOf(GpuOf(again));
  mps_->SetBehaviour(Uuid(again_gpu), "hang");
  ASSERT_TRUE(WaitUntil([&] { return !mps_->Lines(Uuid(again_gpu) + " hangs").empty(); }, 60s));
  const auto stop_started = std::chrono::steady_clock::now();
  EXPECT_EQ(serve_->Kill(SIGTERM), 0) << serve_->log();
  EXPECT_LT(std::chrono::steady_clock::now() - stop_started, 120s);
  mps_->SetBehaviour(Uuid(stuck_gpu), "");
  mps_->SetBehaviour(Uuid(again_gpu), "");
}

TEST_F(ShareServeTest, MeteringCountsTheFractionAndTeardownPutsTheComputeModeBack) {
  Start();
  const std::string id = SubmitShare("meter", "20Gi", 50);
  ASSERT_EQ(WaitFor(id, {"running", "exited", "failed"})["state"], "running");
  const std::string gpu = GpuOf(id);
  const mps::Paths paths = *mps::PathsFor(mps_root_, Uuid(IndexOf(gpu)));
  EXPECT_EQ(mps_->ComputeMode(gpu), 3);
  std::this_thread::sleep_for(1s);
  Stop(id);
  // The last share gone: quit, compute mode DEFAULT, unmount, remove; then the GPU is free.
  ASSERT_TRUE(WaitUntil([&] { return Gpu(gpu)["state"] == "free"; }, 120s)) << serve_->log();
  EXPECT_EQ(mps_->ComputeMode(gpu), 0);
  EXPECT_FALSE(mps::IsMountPoint(paths.shm));
  EXPECT_FALSE(std::filesystem::exists(paths.dir));
  const std::string transcript = mps_->Transcript();
  EXPECT_LT(transcript.rfind(Uuid(IndexOf(gpu)) + " cmd quit"),
            transcript.rfind("nvmlDeviceSetComputeMode " + gpu + " 0 -> 0"))
      << transcript;
  // The container is metered as max(20 GiB / 79.6 GiB, 50 / 100) = 0.5 of a GPU; the GPU took
  // no other tenancy's work meanwhile, so the other half is billed to its tenancy as well.
  const json usage = Get("/v1/tenancies/meter/usage");
  ASSERT_EQ(usage["containers"].size(), 2u) << usage;
  std::map<std::string, json> by_id;
  for (const auto& entry : usage["containers"])
    by_id[entry["id"].get<std::string>()] = entry;
  const json& metered = by_id[id];
  EXPECT_DOUBLE_EQ(metered["gpus"].get<double>(), 0.5);
  const double seconds =
      (metered["finished_ms"].get<double>() - metered["started_ms"].get<double>()) / 1000.0;
  EXPECT_NEAR(metered["gpu_seconds"].get<double>(), 0.5 * seconds, 1e-6);
  std::string held_id = "held-" + gpu;
  std::replace(held_id.begin(), held_id.end(), ':', '-');
  const json& held = by_id[held_id];
  EXPECT_DOUBLE_EQ(held["gpus"].get<double>(), 0.5) << usage;
  EXPECT_EQ(held["started_ms"], metered["started_ms"]);
  EXPECT_EQ(held["finished_ms"], metered["finished_ms"]);
  EXPECT_NEAR(usage["gpu_seconds"].get<double>(), seconds, 1e-6);
}

TEST_F(ShareServeTest, TimeSlicedSharesGetNoMpsAndTheirTimeslice) {
  Start({"--share-timeslice", "short"});
  const std::string id = SubmitShare("slices", "10Gi", 50, "timeslice");
  ASSERT_EQ(WaitFor(id, {"running", "exited", "failed"})["state"], "running");
  const std::string gpu = GpuOf(id);
  EXPECT_EQ(mps_->Lines("nvidia-smi compute-policy -i " + Uuid(IndexOf(gpu)) + " --set-timeslice 1")
                .size(),
            1u)
      << mps_->Transcript();
  EXPECT_TRUE(mps_->Lines(Uuid(IndexOf(gpu)) + " -f").empty());
  const json inspect = Inspect(id);
  for (const auto& entry : inspect["Config"]["Env"])
    EXPECT_EQ(entry.get<std::string>().rfind("CUDA_MPS_", 0), std::string::npos) << entry;
  // Telemetry runs (--nvml): the watchdog holds a time-sliced share.
  EXPECT_EQ(Get("/v1/containers/" + id)["enforcement"], "watchdog");
  // An MPS share does not go onto a time-sliced GPU.
  const std::string mps = SubmitShare("slices", "10Gi", 10);
  ASSERT_EQ(WaitFor(mps, {"running", "exited", "failed"})["state"], "running");
  EXPECT_NE(GpuOf(mps), gpu);
  Stop(id);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return mps_->Lines("nvidia-smi compute-policy -i " + Uuid(IndexOf(gpu)) +
                           " --set-timeslice 0")
                   .size() == 1;
      },
      120s))
      << mps_->Transcript();
}

TEST_F(ShareServeTest, TheWatchdogStopsAContainerOverItsShareSummingItsProcesses) {
  // NVML's process lists come from a scenario the test writes once the containers run; the
  // collector attributes each PID to its container through its real cgroup in /proc.
  FakeNvmlScenario scenario;
  Start({"--share-grace", "1s", "--telemetry-interval", "300ms", "--telemetry-proc-dir", "/proc"});
  const std::string two = "sleep 600 & exec sleep 601";
  const std::string sliced_over = SubmitShare("wd", "10Gi", 20, "timeslice", two);
  const std::string sliced_under = SubmitShare("wd", "10Gi", 20, "timeslice", two);
  const std::string mps_over = SubmitShare("wd", "10Gi", 20, "mps", two);
  for (const auto& id : {sliced_over, sliced_under, mps_over})
    ASSERT_EQ(WaitFor(id, {"running", "exited", "failed"})["state"], "running") << id;
  EXPECT_EQ(Get("/v1/containers/" + sliced_over)["enforcement"], "watchdog");
  EXPECT_EQ(Get("/v1/containers/" + mps_over)["enforcement"], "driver");

  constexpr uint64_t kGiB = uint64_t{1} << 30;
  std::string processes;
  std::map<std::string, std::vector<uint32_t>> pids;
  // Each process under the share, their sum over it (12 GiB of 10): only the sum catches it.
  const std::map<std::string, uint64_t> per_process = {
      {sliced_over, 6 * kGiB}, {sliced_under, 4 * kGiB}, {mps_over, 6 * kGiB}};
  for (const auto& [id, bytes] : per_process) {
    pids[id] = ContainerHostPids(Podman::Get(), "tessera-" + id, 2);
    ASSERT_EQ(pids[id].size(), 2u) << id;
    for (uint32_t pid : pids[id])
      processes += "process " + GpuOf(id) + " pid=" + std::to_string(pid) +
                   " memory=" + std::to_string(bytes) + (id == mps_over ? " mps=1" : "") + "\n";
  }
  // The MPS server of the over-limit client lists its processes as its clients.
  mps_->SetClients(Uuid(IndexOf(GpuOf(mps_over))),
                   std::vector<int>(pids[mps_over].begin(), pids[mps_over].end()));
  scenario.Write(processes);

  for (const auto& id : {sliced_over, mps_over}) {
    const json ended = WaitFor(id, {"exited", "failed"});
    const std::string reason = ended.value("reason", "");
    EXPECT_EQ(reason.rfind("gpu-memory-limit: 12", 0), 0u) << id << ": " << ended;
    EXPECT_NE(reason.find("used of 10"), std::string::npos) << id << ": " << ended;
  }
  // MPS: each of the client's processes ended through its server before the container stopped.
  const auto terminated = mps_->Lines("cmd terminate_client ");
  for (uint32_t pid : pids[mps_over])
    EXPECT_EQ(std::count_if(terminated.begin(), terminated.end(),
                            [&](const std::string& line) {
                              return line.find(" " + std::to_string(pid)) != std::string::npos;
                            }),
              1)
        << pid << "\n"
        << mps_->Transcript();
  for (uint32_t pid : pids[sliced_over])
    for (const auto& line : terminated)
      EXPECT_EQ(line.find(" " + std::to_string(pid)), std::string::npos) << line;
  // Judged in the same rounds, the one under its share runs on.
  EXPECT_EQ(Get("/v1/containers/" + sliced_under)["state"], "running");
}

TEST_F(ShareServeTest, TheWatchdogCatchesAContainerThatHoldsTooMuchOnlyBetweenPasses) {
  // Telemetry passes an hour apart, and a container over its share only half of the time, in
  // bursts shorter than the grace: the watchdog's own unannounced samples catch it all the same.
  FakeNvmlScenario scenario;
  Start({"--share-grace", "2s", "--telemetry-interval", "1h", "--telemetry-proc-dir", "/proc"});
  const std::string bursty = SubmitShare("wd", "10Gi", 20, "timeslice");
  ASSERT_EQ(WaitFor(bursty, {"running", "exited", "failed"})["state"], "running");
  const auto pids = ContainerHostPids(Podman::Get(), "tessera-" + bursty, 1);
  ASSERT_EQ(pids.size(), 1u);
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  auto line = [&](uint64_t bytes) {
    return "process " + GpuOf(bursty) + " pid=" + std::to_string(pids[0]) +
           " memory=" + std::to_string(bytes) + "\n";
  };
  const std::string over = line(12 * kGiB), under = line(1 * kGiB);
  std::atomic<bool> done = false;
  std::thread allocator([&] {
    for (bool high = true; !done; high = !high) {
      scenario.Write(high ? over : under);
      std::this_thread::sleep_for(250ms);
    }
  });
  const json ended = WaitFor(bursty, {"exited", "failed"});
  done = true;
  allocator.join();
  EXPECT_EQ(ended.value("reason", "").rfind("gpu-memory-limit: 12", 0), 0u) << ended;
}

TEST_F(ShareServeTest, RefusesSharesThatCannotBeHeld) {
  Start();
  struct Case {
    json share;
    json extra;
    int status;
    const char* says;
  } cases[] = {
      {{{"memory", "20Gi"}, {"compute", 25}}, {{"gpus", 1}}, 400, "share"},
      {{{"memory", "20Gi"}, {"compute", 25}},
       {{"mig", {{"profile", "1g.10gb"}, {"count", 1}}}},
       400,
       "share"},
      {{{"memory", "20Gi"}, {"compute", 25}}, {{"isolation", "kata"}}, 400, "kata"},
      {{{"memory", "20Gi"}, {"compute", 25}}, {{"isolation", "gvisor"}}, 400, "gvisor"},
      {{{"memory", "20GB"}, {"compute", 25}}, json::object(), 400, "share.memory"},
      {{{"memory", "20Gi"}, {"compute", 101}}, json::object(), 400, "share.compute"},
      {{{"memory", "20Gi"}, {"compute", 25}, {"mode", "mig"}}, json::object(), 400, "mode"},
      {{{"memory", "20Gi"}}, json::object(), 400, "share.compute: required"},
      {{{"memory", "90Gi"}, {"compute", 25}}, json::object(), 409, "more than any GPU here holds"},
  };
  for (const auto& c : cases) {
    json body = {{"image", image_}, {"tenancy", "no"}, {"share", c.share}};
    for (const auto& [key, value] : c.extra.items())
      body[key] = value;
    int status = 0;
    auto answer = Post(body, &status);
    EXPECT_EQ(status, c.status) << body << " -> " << answer;
    EXPECT_NE(answer.dump().find(c.says), std::string::npos) << body << " -> " << answer;
  }
}

TEST_F(ShareServeTest, TesseraRunShareRunsAContainerOnAShare) {
  Start();
  int status = 0;
  const std::string output =
      RunCommand("TESSERA_SERVER=http://127.0.0.1:" + std::to_string(serve_->port()) +
                     " TESSERA_TOKEN=" + serve_->admin_token() + " " + TesseraBinary() +
                     " run --tenancy cli --share 8Gi,20 " + image_ +
                     " /bin/sh -c 'echo pipe=$CUDA_MPS_PIPE_DIRECTORY "
                     "limit=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT' 2>&1",
                 &status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("pipe=/run/tessera/mps limit=0=8192M"), std::string::npos) << output;
}

TEST_F(ShareServeTest, AOnePercentShareThatExcludesOthersIsChargedOneGpuAndFairShareFollows) {
  Start();
  int status = 0;
  // "pair" runs two whole GPUs at weight 3 (2/3 of a GPU per weight); "tiny" one 1 % share.
  CallJson(*admin_, "PUT", "/v1/tenancies/pair", R"({"weight":3})", &status);
  ASSERT_EQ(status, 200);
  auto whole = [&](const std::string& tenancy) {
    auto answer = Post({{"image", image_},
                        {"tenancy", tenancy},
                        {"gpus", 1},
                        {"command", {"/bin/sh", "-c", "exec sleep 600"}}},
                       &status);
    EXPECT_EQ(status, 202) << answer;
    return answer.value("id", "");
  };
  const std::string tiny = SubmitShare("tiny", "256Mi", 1);
  ASSERT_EQ(WaitFor(tiny, {"running", "exited", "failed"})["state"], "running");
  const json container = Get("/v1/containers/" + tiny);
  EXPECT_DOUBLE_EQ(container["share_gpus"].get<double>(), 0.01);  // its own part: 1 %
  std::vector<std::string> running;
  for (const std::string tenancy :
       {"pair", "pair", "filler", "filler", "filler", "filler", "filler"})
    running.push_back(whole(tenancy));
  for (const auto& id : running)
    ASSERT_EQ(WaitFor(id, {"running", "exited", "failed"})["state"], "running") << id;

  // Fair share and quota count the GPU the share keeps from everyone else.
  json queue = Get("/v1/queue");
  std::map<std::string, json> tenancies;
  for (const auto& entry : queue["tenancies"])
    tenancies[entry["name"].get<std::string>()] = entry;
  EXPECT_DOUBLE_EQ(tenancies["tiny"]["mig_gpus_in_use"].get<double>(), 1.0) << queue;
  EXPECT_EQ(tenancies["pair"]["gpus_in_use"], 2) << queue;

  // Both ask for a GPU, tiny first: at 1 GPU in use tiny is ahead of pair's 2/3 per weight no
  // longer (charged 0.01 it would be).
  const std::string tiny_next = whole("tiny");
  const std::string pair_next = whole("pair");
  ASSERT_TRUE(WaitUntil(
      [&] {
        queue = Get("/v1/queue");
        return queue["queue"].size() == 2u;
      },
      60s))
      << queue;
  EXPECT_EQ(queue["queue"][0]["id"], pair_next) << queue;
  EXPECT_EQ(queue["queue"][1]["id"], tiny_next) << queue;

  // Billed one GPU for the time the share held it: 0.01 for the container, 0.99 for the rest.
  Stop(tiny);
  ASSERT_TRUE(WaitUntil(
      [&] {
        const json usage = Get("/v1/tenancies/tiny/usage");
        return usage["containers_total"].get<int>() >= 2;
      },
      60s));
  const json usage = Get("/v1/tenancies/tiny/usage");
  const json ended = Get("/v1/containers/" + tiny);
  const double held_s =
      (ended["finished_ms"].get<double>() - ended["started_ms"].get<double>()) / 1000.0;
  double parts = 0, gpu_seconds = 0;
  for (const auto& entry : usage["containers"]) {
    if (entry["finished_ms"].is_null()) continue;  // tiny_next, should it have started
    parts += entry["gpus"].get<double>();
    gpu_seconds += entry["gpu_seconds"].get<double>();
  }
  EXPECT_NEAR(parts, 1.0, 1e-9) << usage;
  EXPECT_NEAR(gpu_seconds, held_s, 1e-6) << usage;
  EXPECT_GT(held_s, 0.0);
}

TEST_F(ShareServeTest, TheGpuQuotaCountsTheWholeGpuOnceForItsShares) {
  Start();
  int status = 0;
  CallJson(*admin_, "PUT", "/v1/tenancies/capped", R"({"quota":{"gpus":1}})", &status);
  ASSERT_EQ(status, 200);
  // Two shares on one GPU: the first counts the whole GPU, the second adds nothing.
  const std::string first = SubmitShare("capped", "256Mi", 1);
  ASSERT_EQ(WaitFor(first, {"running", "exited", "failed"})["state"], "running");
  const std::string second = SubmitShare("capped", "10Gi", 20);
  ASSERT_EQ(WaitFor(second, {"running", "exited", "failed"})["state"], "running");
  EXPECT_EQ(GpuOf(first), GpuOf(second));
  // A time-sliced share needs a GPU of its own: a second GPU is past the quota.
  const std::string sliced = SubmitShare("capped", "256Mi", 1, "timeslice");
  json waiting;
  ASSERT_TRUE(WaitUntil(
      [&] {
        waiting = Get("/v1/containers/" + sliced);
        return waiting.value("reason", "").find("tenancy quota") != std::string::npos;
      },
      60s))
      << waiting;
  EXPECT_EQ(waiting["state"], "pending");
  EXPECT_EQ(waiting["reason"], "waiting: tenancy quota 1/1 GPUs in use");
  // Its GPU freed, the time-sliced share takes one: billed whole, as what it can take.
  Stop(first);
  Stop(second);
  ASSERT_EQ(WaitFor(sliced, {"running", "exited", "failed"})["state"], "running") << waiting;
  EXPECT_DOUBLE_EQ(Get("/v1/containers/" + sliced)["share_gpus"].get<double>(), 1.0);
}

}  // namespace
}  // namespace tessera::testing
