// End to end with gVisor: a real tessera-serve (local backend) runs containers through real
// podman and runsc. runsc is a test dependency (scripts/setup.sh installs it): when it is missing
// the tests fail.
#include <gtest/gtest.h>

#include <set>

#include "serve/container_wait.h"
#include "serve/serve_process.h"
#include "support/podman_harness.h"
#include "tenancy/tenancy.h"

namespace tessera::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string FirstLine(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

class ServeGvisor : public ::testing::Test {
 protected:
  void SetUp() override {
    const Podman& podman = Podman::Get();
    ASSERT_TRUE(podman.ready()) << podman.setup_error();
    auto version = RunArgv({"runsc", "--version"});
    ASSERT_EQ(version.status, 0) << "runsc is not installed (scripts/setup.sh installs it): "
                                 << version.output;
    runsc_version_ = FirstLine(version.output);  // "runsc version 0.0~20221219.0"
    runsc_version_ = runsc_version_.substr(runsc_version_.rfind(' ') + 1);
    image_ = podman.image();
    kind_ = UniqueTestKind("gpu");
    const std::string n = kind_.substr(kind_.rfind('-') + 1);
    instance_ = "gv-" + std::to_string(::getpid()) + "-" + n;
    alpha_ = "gva-" + std::to_string(::getpid()) + "-" + n;
    beta_ = "gvb-" + std::to_string(::getpid()) + "-" + n;
    ASSERT_EQ(WriteGpuRoms(host_.root()).size(), 8u);
    serve_ = std::make_unique<ServeProcess>(
        dir_.path(), std::vector<std::string>{"--root", host_.root(), "--cdi-kind", kind_,
                                              "--instance", instance_, "--stop-grace-s", "1"});
    std::string log;
    ASSERT_TRUE(serve_->Start(&log)) << log;
    admin_ = serve_->Connect(serve_->admin_token());
  }

  void TearDown() override {
    serve_.reset();
    RemoveInstanceContainers(instance_);
    RemoveSpecsOfKind(kind_);
    tenancy::PodmanTenancy effects;
    for (const auto& t : {alpha_, beta_}) {
      if (!effects.RemoveNetwork(t, true, 0).ok())
        Podman::Get().Run({"network", "rm", "-f", tenancy::NetworkName(t)});
    }
  }

  // POST /v1/containers with isolation gvisor; the answer and its status.
  json Post(const std::string& tenancy, const std::string& script, int* status, int gpus = 0,
            const std::string& network = "tenancy") {
    json body = {{"image", image_},    {"tenancy", tenancy},
                 {"gpus", gpus},       {"isolation", "gvisor"},
                 {"network", network}, {"command", {"/bin/sh", "-c", script}}};
    return CallJson(*admin_, "POST", "/v1/containers", body.dump(), status);
  }

  std::string Submit(const std::string& tenancy, const std::string& script,
                     const std::string& network = "tenancy") {
    int status = 0;
    auto answer = Post(tenancy, script, &status, 0, network);
    EXPECT_EQ(status, 202) << answer;
    return answer.value("id", "");
  }

  json WaitFor(const std::string& id, const std::set<std::string>& states) {
    return WaitForContainerState(*admin_, *serve_, id, states);
  }

  // Runs a gVisor container to its end; its logs.
  std::string RunToEnd(const std::string& tenancy, const std::string& script,
                       const std::string& network = "tenancy") {
    std::string id = Submit(tenancy, script, network);
    auto done = WaitFor(id, {"exited", "failed"});
    EXPECT_EQ(done["state"], "exited") << done << "\n" << serve_->log();
    return Logs(id);
  }

  std::string Logs(const std::string& id) {
    auto response = admin_->Call("GET", "/v1/containers/" + id + "/logs");
    EXPECT_TRUE(response && response->status == 200);
    return response ? response->body : "";
  }

  TempHost host_{"hgx-h100-dgx"};
  TempDir dir_;
  std::string image_, kind_, instance_, alpha_, beta_, runsc_version_;
  std::unique_ptr<ServeProcess> serve_;
  std::unique_ptr<client::Connection> admin_;
};

TEST_F(ServeGvisor, SeesGvisorsKernelAndItsLogsAndExitCodeComeBack) {
  std::string id = Submit(alpha_, "uname -r; echo to-stderr >&2; exit 3");
  auto done = WaitFor(id, {"exited", "failed"});
  EXPECT_EQ(done["state"], "exited") << done;
  EXPECT_EQ(done.value("exit_code", -1), 3) << done;
  EXPECT_EQ(done["isolation"], "gvisor") << done;
  const std::string logs = Logs(id);
  // gVisor reports its own kernel version; the host's is another.
  EXPECT_EQ(FirstLine(logs), "4.4.0") << logs;
  EXPECT_NE(FirstLine(logs), FirstLine(RunArgv({"uname", "-r"}).output));
  EXPECT_NE(logs.find("to-stderr"), std::string::npos) << logs;
  // podman ran it with runsc, not runc.
  auto runtime = Podman::Get().Run({"inspect", "tessera-" + id, "--format", "{{.OCIRuntime}}"});
  EXPECT_NE(runtime.output.find("runsc"), std::string::npos) << runtime.output;
}

TEST_F(ServeGvisor, NetworkNoneGivesOnlyLoopback) {
  EXPECT_EQ(RunToEnd(alpha_, "ls /sys/class/net", "none"), "lo\n");
}

TEST_F(ServeGvisor, TenantNetworksStayApart) {
  // A listener in alpha answers every connection.
  std::string listener =
      Submit(alpha_, "while true; do echo hello-from-alpha | nc -l -p 5000; done");
  WaitFor(listener, {"running"});
  auto ip = Podman::Get().Run(
      {"inspect", "tessera-" + listener, "--format",
       "{{(index .NetworkSettings.Networks \"" + tenancy::NetworkName(alpha_) + "\").IPAddress}}"});
  ASSERT_EQ(ip.status, 0) << ip.output;
  const std::string address = FirstLine(ip.output);
  ASSERT_FALSE(address.empty());
  const std::string connect = "nc -w 3 " + address + " 5000 </dev/null; echo rc=$?";

  // Same tenancy: answered, once the listener's sandbox listens (no fixed delay: until it does).
  std::string same;
  auto deadline = Clock::now() + std::chrono::seconds(90);
  while (Clock::now() < deadline) {
    same = RunToEnd(alpha_, connect);
    if (same.find("hello-from-alpha") != std::string::npos) break;
  }
  ASSERT_NE(same.find("hello-from-alpha"), std::string::npos) << same;

  // Another tenancy: never answered, the connection fails.
  std::string other = RunToEnd(beta_, connect);
  EXPECT_EQ(other.find("hello-from-alpha"), std::string::npos) << other;
  EXPECT_NE(other.find("rc=1"), std::string::npos) << other;

  // The listener still answers its own tenancy after the refused attempt.
  EXPECT_NE(RunToEnd(alpha_, connect).find("hello-from-alpha"), std::string::npos);
}

TEST_F(ServeGvisor, GpuSubmissionsNeedARunscWithNvproxy) {
  int status = 0;
  auto answer = Post(alpha_, "true", &status, 1);
  bool nvproxy = RunArgv({"sh", "-c", "runsc flags 2>&1 | grep -qE '^ +-nvproxy$'"}).status == 0;
  if (nvproxy) {
    EXPECT_EQ(status, 202) << answer;
    return;
  }
  // Debian 12's runsc: refused at submit, naming the runsc and what is needed.
  EXPECT_EQ(status, 409) << answer;
  const std::string message = answer["error"]["message"];
  EXPECT_NE(message.find("runsc " + runsc_version_), std::string::npos) << message;
  EXPECT_NE(message.find("nvproxy"), std::string::npos) << message;
  EXPECT_NE(message.find("gVisor release with nvproxy"), std::string::npos) << message;
  // Nothing was created for it; without GPUs gVisor still runs.
  auto listed = CallJson(*admin_, "GET", "/v1/containers");
  EXPECT_TRUE(listed["containers"].empty()) << listed;
  EXPECT_EQ(RunToEnd(alpha_, "echo ok"), "ok\n");
}

}  // namespace
}  // namespace tessera::testing
