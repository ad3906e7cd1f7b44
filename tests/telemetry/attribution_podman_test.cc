// Attribution with real processes: real podman containers (runc) give real host PIDs and real
// cgroups; the test tells the stand-in NVML which PIDs use which GPU, and the collector must
// find each process's container from /proc alone: two processes of one container summed, a host
// process unattributed, the other tenancy's container never counted as this one's.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "support/fake_nvml_state.h"
#include "support/podman_harness.h"
#include "telemetry/telemetry.h"

namespace tessera::telemetry {
namespace {

using testing::Podman;

constexpr uint64_t kGiB = 1ull << 30;

struct Container {
  std::string name;
  std::string id;
  std::vector<uint32_t> pids;
};

std::string Trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  return text;
}

// Runs `script` in a new busybox container; its ID and its processes' host PIDs.
Container Start(const Podman& podman, const std::string& name, const std::string& script,
                size_t processes) {
  Container c;
  c.name = name;
  auto run = podman.Run({"run", "-d", "--rm", "--network", "none", "--name", name, podman.image(),
                         "/bin/sh", "-c", script});
  EXPECT_EQ(run.status, 0) << run.output;
  c.id = Trim(podman.Run({"inspect", "--format", "{{.Id}}", name}).output);
  c.pids = testing::ContainerHostPids(podman, name, processes);
  return c;
}

class Attribution : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(podman_.ready()) << podman_.setup_error();
    const std::string suffix = std::to_string(::getpid());
    a_ = Start(podman_, "tessera-attr-a-" + suffix, "sleep 300 & exec sleep 301", 2);
    b_ = Start(podman_, "tessera-attr-b-" + suffix, "exec sleep 302", 1);
    ASSERT_EQ(a_.pids.size(), 2u);
    ASSERT_EQ(b_.pids.size(), 1u);
    ASSERT_EQ(a_.id.size(), 64u) << a_.id;
    host_ = ::fork();
    if (host_ == 0) {
      ::execl("/bin/sleep", "sleep", "300", nullptr);
      ::_exit(127);
    }
  }
  void TearDown() override {
    if (host_ > 0) {
      ::kill(host_, SIGKILL);
      ::waitpid(host_, nullptr, 0);
    }
    podman_.Run({"rm", "-f", "-t", "0", a_.name, b_.name});
  }

  const Podman& podman_ = Podman::Get();
  Container a_, b_;
  pid_t host_ = -1;
};

TEST_F(Attribution, RealContainersThroughTheStandInNvml) {
  // The kernel's own record of each process names its container (this host's podman and runc).
  std::ifstream cgroup("/proc/" + std::to_string(a_.pids[0]) + "/cgroup");
  std::stringstream text;
  text << cgroup.rdbuf();
  auto parsed = ContainerOfProcCgroup(text.str());
  ASSERT_TRUE(parsed) << text.str();
  EXPECT_EQ(parsed->container_id, a_.id) << text.str();
  EXPECT_EQ(parsed->runtime, Runtime::kPodman);

  testing::FakeNvmlState state("");
  testing::FakeNvmlScenario scenario;
  const uint64_t now = testing::NowMicros();
  auto line = [](const std::string& pci, uint32_t pid, uint64_t bytes) {
    return "process " + pci + " pid=" + std::to_string(pid) + " memory=" + std::to_string(bytes) +
           "\n";
  };
  auto busy = [&](const std::string& pci, uint32_t pid, int sm) {
    return "busy " + pci + " pid=" + std::to_string(pid) + " sm=" + std::to_string(sm) +
           " period_ms=100 from_us=" + std::to_string(now - 200'000) + "\n";
  };
  // A's two processes and the host's on GPU 0; B's process on GPU 1 and also on GPU 0, as if
  // it had reached a device that is not its own.
  scenario.Write(
      "device 0000:18:00.0 util=80\ndevice 0000:2a:00.0 util=30\n" +
      line("0000:18:00.0", a_.pids[0], 1 * kGiB) + line("0000:18:00.0", a_.pids[1], 2 * kGiB) +
      line("0000:18:00.0", static_cast<uint32_t>(host_), 4 * kGiB) +
      line("0000:18:00.0", b_.pids[0], 8 * kGiB) + line("0000:2a:00.0", b_.pids[0], 16 * kGiB) +
      busy("0000:18:00.0", a_.pids[0], 20) + busy("0000:18:00.0", a_.pids[1], 30) +
      busy("0000:18:00.0", static_cast<uint32_t>(host_), 5) + busy("0000:2a:00.0", b_.pids[0], 25));

  NvmlSourceOptions options;
  options.library = FAKE_NVML;
  options.gpus = {{"0000:18:00.0", "", "H100", 0, 0, "host"},
                  {"0000:2a:00.0", "", "H100", 1, 1, "host"}};
  auto source = OpenNvmlSource(options);
  ASSERT_TRUE(source) << source.error().message;
  Collector collector(std::move(*source), {});
  Directory dir;
  Holder a;
  a.key = "c-a";
  a.tenancy = "team-a";
  a.runtime_id = a_.id;
  a.gpus = {{"0000:18:00.0", 1.0}};
  Holder b = a;
  b.key = "c-b";
  b.tenancy = "team-b";
  b.runtime_id = b_.id;
  b.gpus = {{"0000:2a:00.0", 1.0}};
  dir.holders = {a, b};
  Cursors cursors;
  PassResult pass = collector.Collect(dir, cursors, 1000);
  EXPECT_EQ(collector.last_cost().cgroup_reads, 4u);
  // The second pass reads no cgroup again: the same PIDs are the same processes. (The stand-in
  // makes a sample every 100 ms: after a quarter of a second each process has a new one.)
  usleep(250000);
  pass = collector.Collect(dir, cursors, 2000);
  EXPECT_EQ(collector.last_cost().cgroup_reads, 0u);

  const HolderReading* ra = nullptr;
  const HolderReading* rb = nullptr;
  for (const auto& h : pass.holders)
    (h.holder == 0 ? ra : rb) = &h;
  ASSERT_TRUE(ra && rb);
  ASSERT_EQ(ra->gpus.size(), 1u);
  EXPECT_EQ(ra->gpus[0].pci_address, "0000:18:00.0");
  EXPECT_EQ(ra->gpus[0].processes, 2u);
  EXPECT_EQ(ra->gpus[0].memory_bytes, 3 * kGiB);
  EXPECT_DOUBLE_EQ(ra->gpus[0].sm_percent, 50);
  // B: its own GPU and the one it reached; nothing of it is A's.
  ASSERT_EQ(rb->gpus.size(), 2u);
  EXPECT_EQ(rb->gpus[0].memory_bytes, 8 * kGiB);
  EXPECT_EQ(rb->gpus[1].memory_bytes, 16 * kGiB);
  EXPECT_DOUBLE_EQ(rb->gpus[1].sm_percent, 25);
  // The host process is nobody's.
  EXPECT_EQ(pass.gpus[0].unattributed_processes, 1u);
  EXPECT_EQ(pass.gpus[0].unattributed_memory, 4 * kGiB);
  EXPECT_DOUBLE_EQ(pass.gpus[0].unattributed_sm_percent, 5);
  EXPECT_EQ(pass.gpus[1].unattributed_processes, 0u);
}

}  // namespace
}  // namespace tessera::telemetry
