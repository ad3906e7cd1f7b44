// tessera-lease-sync as a process against the scripted API server: the lease file follows this
// node's GpuLeases (created, checked, quarantined, deleted) and ignores other nodes'.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "backends/kubernetes/kubernetes.h"
#include "kubernetes/fake_apiserver.h"
#include "support/fixture_host.h"

namespace tessera::k8s {
namespace {

using testing::FakeApiServer;
using testing::TempDir;

Json ReadLeaseFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return Json::parse(text.str(), nullptr, false);
}

bool WaitFor(const std::string& path, const std::function<bool(const Json&)>& ready) {
  for (int i = 0; i < 100; ++i) {
    Json file = ReadLeaseFile(path);
    if (file.is_object() && ready(file)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

TEST(LeaseSync, LeaseFileFollowsThisNodesLeases) {
  FakeApiServer server;
  server.SetWatchSeconds(0.5);
  TempDir dir;
  std::ofstream(dir.path() + "/kubeconfig")
      << "apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n- name: c\n  cluster:\n"
         "    server: "
      << server.url() << "\ncontexts:\n- name: t\n  context: {cluster: c}\n";
  ClientConfig config;
  config.server = server.url();
  Client client(config);
  ASSERT_TRUE(client
                  .Create(Resource::GpuLeases(), "",
                          BuildGpuLease({"a", "team-a", "node-1", {"0000:18:00.0"}}))
                  .ok());
  ASSERT_TRUE(client
                  .Create(Resource::GpuLeases(), "",
                          BuildGpuLease({"b", "team-b", "node-2", {"0000:2a:00.0"}}))
                  .ok());

  const std::string file = dir.path() + "/leases.json";
  std::string binary = std::string(TESSERA_BINARY_DIR) + "/src/cli/tessera-lease-sync";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl(binary.c_str(), binary.c_str(), "--kubeconfig", (dir.path() + "/kubeconfig").c_str(),
            "--node", "node-1", "--lease-file", file.c_str(), nullptr);
    ::_exit(127);
  }
  EXPECT_TRUE(WaitFor(file, [](const Json& f) {
    return f["gpus"].size() == 1 && f["gpus"].contains("0000:18:00.0");
  }));
  ASSERT_TRUE(client
                  .Patch(Resource::GpuLeases(), "", "a",
                         {{"status", {{"state", "quarantined"}, {"reason", "check failed"}}}},
                         PatchType::kMerge, "status")
                  .ok());
  EXPECT_TRUE(WaitFor(file, [](const Json& f) {
    return f["gpus"]["0000:18:00.0"].value("state", "") == "quarantined";
  }));
  ASSERT_TRUE(client
                  .Create(Resource::GpuLeases(), "",
                          BuildGpuLease({"c", "team-a", "node-1", {"0000:3a:00.0"}}))
                  .ok());
  EXPECT_TRUE(WaitFor(file, [](const Json& f) { return f["gpus"].size() == 2; }));
  ASSERT_TRUE(client.Delete(Resource::GpuLeases(), "", "a").ok());
  EXPECT_TRUE(WaitFor(file, [](const Json& f) {
    return f["gpus"].size() == 1 && f["gpus"].contains("0000:3a:00.0");
  }));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace tessera::k8s
