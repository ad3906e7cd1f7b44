// Nothing of tessera-serve's reaches the programs it starts, with real podman, runc and runsc
// containers, the stand-in MPS control daemon and the stand-in nvidia-smi: every descriptor the
// service holds is close-on-exec, each program it runs is exec'd with stdio only (fd_witness in
// front of it says what it got), and no long-lived process it leaves (conmon, the containers,
// runsc, the MPS daemon) holds its listening socket, store or state files. So a restart after
// kill -9 binds at once while containers run; and a start that cannot bind changes nothing.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "mps/mps.h"
#include "serve/container_wait.h"
#include "serve/podman_serve_fixture.h"
#include "serve/raw_http.h"
#include "support/descriptors.h"
#include "support/fake_mps.h"
#include "support/fake_nvml_state.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::string DescriptorUuid(int i) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-c10ec0de-3c2a-4d8e-9f10-a1b2c3d4e5f%d", i);
  return buf;
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines)
    out += "  " + line + "\n";
  return out;
}

class DescriptorE2e : public PodmanServeTest {
 protected:
  DescriptorE2e() : PodmanServeTest("fds") {}

  void TearDown() override {
    PodmanServeTest::TearDown();
    ::unsetenv("TESSERA_FD_WITNESS_DIR");
    ::unsetenv("TESSERA_FD_WITNESS_PATH");
    // The MPS daemons outlive the service on purpose; the test's own go here.
    if (mps_root_.empty()) return;
    for (const auto& daemon : mps::InspectDaemons(mps_root_)) {
      (void)mps::UnmountShm(daemon.paths.shm);
      (void)mps::UnmountShm(daemon.paths.pipe);
      if (daemon.control_pid) ::kill(static_cast<pid_t>(*daemon.control_pid), SIGKILL);
    }
  }

  json Submit(json body, int* status = nullptr) {
    body["image"] = image_;
    body["tenancy"] = "fds";
    body["network"] = "none";
    int code = 0;
    auto answer = CallJson(*admin_, "POST", "/v1/containers", body.dump(), &code);
    if (status) *status = code;
    EXPECT_EQ(code, 202) << answer;
    return answer;
  }
  std::string Run(json body) { return Submit(std::move(body)).value("id", ""); }

  json WaitFor(const std::string& id, const std::set<std::string>& states) {
    return WaitForContainerState(*admin_, *serve_, id, states, std::chrono::seconds(240));
  }

  // conmon of the container of `id`: found by the container's full ID on its command line.
  pid_t ConmonOf(const std::string& id) {
    auto full = Podman::Get().Run({"inspect", "--format", "{{.Id}}", "tessera-" + id});
    const std::string container =
        Trimmed(full.output.substr(full.output.rfind('\n', full.output.size() - 2) + 1));
    for (pid_t pid : ProcessesWithCommandLine(container))
      if (Trimmed(ReadText("/proc/" + std::to_string(pid) + "/comm")) == "conmon") return pid;
    return -1;
  }

  // What of the service's descriptors `pid` and every process below it hold.
  void ExpectNothingInherited(pid_t pid, const std::string& what) {
    std::vector<pid_t> all = DescendantsOf(pid);
    all.insert(all.begin(), pid);
    for (pid_t each : all) {
      auto inherited = InheritedFrom(serve_->pid(), each);
      EXPECT_TRUE(inherited.empty()) << what << " (process " << each << ", "
                                     << Trimmed(ReadText("/proc/" + std::to_string(each) + "/comm"))
                                     << ") holds the service's descriptors:\n"
                                     << Joined(inherited);
    }
  }

  // Files in the data dir and their contents: what a start that changes nothing leaves alone.
  std::map<std::string, std::string> DataDirFiles() {
    std::map<std::string, std::string> out;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(serve_->data_dir()))
      if (entry.is_regular_file()) out[entry.path().string()] = ReadText(entry.path().string());
    return out;
  }

  std::string mps_root_;  // set by a test that runs MPS daemons
};

TEST_F(DescriptorE2e, ProgramsTheServiceStartsGetStdioAndNothingOfItsOwn) {
  // The stand-ins in front of podman, the MPS control daemon and nvidia-smi.
  TempDir witness;
  const std::string bin = witness.path() + "/bin", reports = witness.path() + "/reports";
  std::filesystem::create_directories(bin);
  std::filesystem::create_directories(reports);
  const std::string fd_witness = std::string(TESSERA_BINARY_DIR) + "/tests/support/fd_witness";
  for (const char* name : {"podman", "nvidia-cuda-mps-control", "nvidia-smi"})
    std::filesystem::create_symlink(fd_witness, bin + "/" + name);
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  const std::string fakes = std::filesystem::path(FakeMps::Binary()).parent_path().string();
  ::setenv("TESSERA_FD_WITNESS_DIR", reports.c_str(), 1);
  ::setenv("TESSERA_FD_WITNESS_PATH", (fakes + ":" + path).c_str(), 1);

  FakeNvmlState nvml("");
  for (size_t i = 0; i < gpus_.size(); ++i)
    nvml.Append("gpu " + gpus_[i] + " board=h100-80gb uuid=" + DescriptorUuid(static_cast<int>(i)));
  FakeMps mps;
  mps_root_ = dir_.path() + "/mps";
  const std::string& mps_root = mps_root_;
  // Only the service looks podman up in the witness's directory.
  ::setenv("PATH", (bin + ":" + path).c_str(), 1);
  StartServe({"--nvml", FAKE_NVML, "--mps-root", mps_root, "--mps-control",
              bin + "/nvidia-cuda-mps-control", "--nvidia-smi", bin + "/nvidia-smi",
              "--share-timeslice", "short", "--mps-shm-mib", "4"});
  ::setenv("PATH", path.c_str(), 1);
  ASSERT_FALSE(HasFatalFailure());

  const std::string whole = Run({{"gpus", 1}, {"command", {"sleep", "600"}}});
  const std::string gvisor =
      Run({{"gpus", 0}, {"isolation", "gvisor"}, {"command", {"sleep", "600"}}});
  const std::string mps_share =
      Run({{"share", {{"memory", "8Gi"}, {"compute", 20}, {"mode", "mps"}}},
           {"command", {"sleep", "600"}}});
  const std::string sliced =
      Run({{"share", {{"memory", "8Gi"}, {"compute", 20}, {"mode", "timeslice"}}},
           {"command", {"sleep", "600"}}});
  for (const auto& id : {whole, gvisor, mps_share, sliced}) {
    auto running = WaitFor(id, {"running", "exited", "failed"});
    ASSERT_EQ(running["state"], "running") << running << "\n" << serve_->log();
  }

  // At the source: every descriptor of the service above stdio is close-on-exec.
  for (const auto& descriptor : DescriptorsOf(serve_->pid()))
    EXPECT_TRUE(descriptor.fd <= 2 || descriptor.close_on_exec)
        << "the service's fd " << descriptor.fd << " (" << descriptor.target
        << ") would be inherited";

  // At each exec: stdio only.
  std::set<std::string> programs;
  for (const auto& report : WitnessReports(reports)) {
    programs.insert(report.name.substr(0, report.name.rfind('.')));
    EXPECT_TRUE(report.extra.empty()) << report.name << " was exec'd with more than stdio:\n"
                                      << Joined(report.extra);
  }
  EXPECT_EQ(programs, (std::set<std::string>{"podman", "nvidia-cuda-mps-control", "nvidia-smi"}));

  // What lives on: conmon (reparented) and everything below it, the MPS daemon.
  for (const auto& id : {whole, gvisor, mps_share, sliced}) {
    const pid_t conmon = ConmonOf(id);
    ASSERT_GT(conmon, 0) << "no conmon for " << id;
    ExpectNothingInherited(conmon, "conmon of " + id);
  }
  const auto daemons = mps::InspectDaemons(mps_root);
  ASSERT_EQ(daemons.size(), 1u);
  ASSERT_TRUE(daemons[0].control_pid);
  ExpectNothingInherited(static_cast<pid_t>(*daemons[0].control_pid), "the MPS daemon");

  // The symptom itself: nobody but the service holds its listening socket.
  const auto listening = ListeningSockets(serve_->port());
  ASSERT_EQ(listening.size(), 1u);
  EXPECT_TRUE(HoldersOf(*listening.begin(), serve_->pid()).empty());
}

// /healthz within 2 s of the restart's exec, polled from the moment it is started; the container
// that ran through the outage is adopted, not failed.
TEST_F(DescriptorE2e, ARestartAfterKillNineBindsAtOnceWhileItsContainerRuns) {
  StartServe();
  const std::string id = Run({{"gpus", 1}, {"command", {"sleep", "600"}}});
  ASSERT_EQ(WaitFor(id, {"running", "exited", "failed"})["state"], "running");
  const uint16_t port = serve_->port();
  ASSERT_EQ(serve_->Kill(SIGKILL), 128 + SIGKILL);

  std::atomic<bool> answered{false};
  std::atomic<int64_t> answered_ms{-1};
  const auto exec = std::chrono::steady_clock::now();
  std::thread poll([&] {
    while (std::chrono::steady_clock::now() - exec < 30s && !answered) {
      RawConnection connection(port);
      if (connection.connected() &&
          connection.Send("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") &&
          connection.Receive(5s, "\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0) {
        answered_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - exec)
                          .count();
        answered = true;
        return;
      }
      std::this_thread::sleep_for(20ms);
    }
  });
  serve_->set_listen("127.0.0.1:" + std::to_string(port));
  std::string log;
  const bool started = serve_->Start(&log);
  poll.join();
  ASSERT_TRUE(started) << log;
  admin_ = serve_->Connect(serve_->admin_token());
  ASSERT_TRUE(answered) << serve_->log();
  EXPECT_LE(answered_ms.load(), 2000) << "/healthz answered " << answered_ms << " ms after exec";
  std::printf("restart after kill -9: /healthz answered %lld ms after exec\n",
              static_cast<long long>(answered_ms.load()));
  auto record = CallJson(*admin_, "GET", "/v1/containers/" + id);
  EXPECT_EQ(record["state"], "running") << record << "\n" << serve_->log();
}

// A pending submission that could be placed, a port another socket holds: the start exits
// non-zero and leaves the store's files, the submission and podman as they were.
TEST_F(DescriptorE2e, AStartThatCannotBindChangesNothing) {
  StartServe();
  const std::string holder = Run({{"gpus", 8}, {"command", {"sleep", "600"}}});
  ASSERT_EQ(WaitFor(holder, {"running", "exited", "failed"})["state"], "running");
  const std::string waiting = Run({{"gpus", 1}, {"command", {"sleep", "600"}}});
  ASSERT_EQ(WaitFor(waiting, {"pending"})["state"], "pending");
  ASSERT_EQ(serve_->Kill(SIGKILL), 128 + SIGKILL);
  // While the service is down the GPUs come free: a start that went on would place `waiting`.
  ASSERT_EQ(Podman::Get().Run({"rm", "-f", "-t", "0", "tessera-" + holder}).status, 0);

  const int taken = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(taken, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(taken, 1), 0);
  socklen_t length = sizeof address;
  ::getsockname(taken, reinterpret_cast<sockaddr*>(&address), &length);
  const auto before = DataDirFiles();

  serve_->set_listen("127.0.0.1:" + std::to_string(ntohs(address.sin_port)));
  std::string log;
  EXPECT_FALSE(serve_->Start(&log));
  ::close(taken);
  EXPECT_NE(serve_->exit_status(), 0) << log;
  EXPECT_NE(log.find("listen on 127.0.0.1"), std::string::npos) << log;
  EXPECT_TRUE(DataDirFiles() == before) << "the failed start changed the data dir";
  auto created = Podman::Get().Run(
      {"ps", "-a", "--filter", "label=tessera.container=" + waiting, "--format", "{{.ID}}"});
  EXPECT_EQ(created.status, 0);
  EXPECT_EQ(Trimmed(created.output), "") << "the failed start created the waiting container";

  // The next start finds the submission as it was left: waiting, then placed, never failed.
  serve_->set_listen("127.0.0.1:0");
  Restart();
  auto record = WaitFor(waiting, {"running", "exited", "failed"});
  EXPECT_EQ(record["state"], "running") << record << "\n" << serve_->log();
}

}  // namespace
}  // namespace tessera::testing
