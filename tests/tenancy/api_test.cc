// Tenancy isolation through the REST API of a real tessera-serve process: storage entitlements
// (admin-only, validated), volumes in submissions (403 naming the volume), network modes; and
// with the local backend, the tenancy's podman network and NFS volumes made on the host.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sstream>

#include "serve/null_serve_fixture.h"
#include "support/podman_harness.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

const char* kBlueStorage = R"({"nfs":[
  {"name":"data","server":"10.0.0.5","path":"/exports/blue"},
  {"name":"models","server":"10.0.0.5","path":"/exports/models","readOnly":true}]})";
const char* kGreenStorage = R"({"nfs":[{"name":"secrets","server":"10.0.0.9","path":"/g"}]})";

class TenancyApi : public NullServeTest {
 protected:
  void SetUp() override {
    NullServeTest::SetUp();
    StartServe();
  }

  std::unique_ptr<client::Connection> TenantOf(const std::string& tenancy) {
    int status = 0;
    CallJson(*admin_, "PUT", "/v1/tenancies/" + tenancy, "{}", &status);
    EXPECT_EQ(status, 200);
    auto token = CallJson(*admin_, "POST", "/v1/tenancies/" + tenancy + "/tokens", "", &status);
    EXPECT_EQ(status, 201) << token;
    return serve_->Connect(token.value("token", ""));
  }

  json Submit(client::Connection& as, json body, int* status) {
    body["image"] = "localhost/none:1";
    if (!body.contains("tenancy")) body["tenancy"] = "blue";
    return CallJson(as, "POST", "/v1/containers", body.dump(), status);
  }

  static std::string Message(const json& answer) {
    return answer.is_object() && answer.contains("error") ? answer["error"].value("message", "")
                                                          : std::string();
  }
};

TEST_F(TenancyApi, StorageEntitlementsAreSetByTheAdminOnly) {
  int status = 0;
  auto stored = CallJson(*admin_, "PUT", "/v1/tenancies/blue/storage", kBlueStorage, &status);
  ASSERT_EQ(status, 200) << stored;
  EXPECT_EQ(stored["nfs"].size(), 2u);
  EXPECT_EQ(stored["nfs"][1]["readOnly"], true);
  CallJson(*admin_, "PUT", "/v1/tenancies/green/storage", kGreenStorage, &status);
  ASSERT_EQ(status, 200);

  auto blue = TenantOf("blue");
  auto own = CallJson(*blue, "GET", "/v1/tenancies/blue/storage", "", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(own, stored);
  CallJson(*blue, "GET", "/v1/tenancies/green/storage", "", &status);
  EXPECT_EQ(status, 404);  // another tenancy's: not even its existence

  // A tenant cannot entitle itself, neither here nor through the tenancy's extensions.
  auto refused = CallJson(*blue, "PUT", "/v1/tenancies/blue/storage", kGreenStorage, &status);
  EXPECT_EQ(status, 403) << refused;
  std::string sneaky = std::string(R"({"extensions":{"storage":)") + kGreenStorage + "}}";
  refused = CallJson(*blue, "PUT", "/v1/tenancies/blue", sneaky, &status);
  EXPECT_EQ(status, 403) << refused;
  EXPECT_EQ(CallJson(*blue, "GET", "/v1/tenancies/blue/storage"), stored);
  // The admin may set them through the extensions too, but only valid ones.
  refused = CallJson(*admin_, "PUT", "/v1/tenancies/blue",
                     R"({"extensions":{"storage":{"nfs":[{"name":"x"}]}}})", &status);
  EXPECT_EQ(status, 400) << refused;
  EXPECT_EQ(Message(refused).rfind("extensions.storage: nfs[0].server: missing", 0), 0u) << refused;
}

TEST_F(TenancyApi, BadStorageBodiesAre400NamingTheField) {
  int status = 0;
  auto answer = CallJson(*admin_, "PUT", "/v1/tenancies/blue/storage",
                         R"({"nfs":[{"name":"a","server":"x,ro","path":"/p"}]})", &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(Message(answer).rfind("nfs[0].server:", 0), 0u) << answer;
  answer =
      CallJson(*admin_, "PUT", "/v1/tenancies/blue/storage", R"({"nfs":[],"cifs":[]})", &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(Message(answer).rfind("body.cifs: unknown field", 0), 0u) << answer;
  answer = CallJson(*admin_, "PUT", "/v1/tenancies/Blue/storage", R"({"nfs":[]})", &status);
  EXPECT_EQ(status, 400) << answer;
}

TEST_F(TenancyApi, SubmissionsGetOnlyTheirTenancysVolumes) {
  int status = 0;
  CallJson(*admin_, "PUT", "/v1/tenancies/blue/storage", kBlueStorage, &status);
  ASSERT_EQ(status, 200);
  CallJson(*admin_, "PUT", "/v1/tenancies/green/storage", kGreenStorage, &status);
  ASSERT_EQ(status, 200);
  auto blue = TenantOf("blue");

  auto accepted = Submit(*blue,
                         {{"volumes",
                           {{{"name", "data"}, {"mountPath", "/data"}},
                            {{"name", "models"}, {"mountPath", "/models"}, {"readOnly", true}}}}},
                         &status);
  ASSERT_EQ(status, 202) << accepted;
  EXPECT_EQ(accepted["network"], "tenancy");
  EXPECT_EQ(accepted["volumes"].size(), 2u);
  const std::string id = accepted.value("id", "");

  // Another tenancy's export, an unknown one, and read-write on a read-only export: 403 naming
  // the volume.
  for (const auto& [volume, read_only] : std::vector<std::pair<std::string, json>>{
           {"secrets", json()}, {"nothing", json()}, {"models", false}}) {
    json item = {{"name", volume}, {"mountPath", "/v"}};
    if (!read_only.is_null()) item["readOnly"] = read_only;
    auto refused = Submit(*blue, {{"volumes", {item}}}, &status);
    EXPECT_EQ(status, 403) << volume << ": " << refused;
    EXPECT_NE(Message(refused).find("\"" + volume + "\""), std::string::npos) << refused;
  }
  // The admin submitting for blue is held to blue's entitlements as well.
  auto refused =
      Submit(*admin_, {{"volumes", {{{"name", "secrets"}, {"mountPath", "/s"}}}}}, &status);
  EXPECT_EQ(status, 403) << refused;

  // Malformed: 400 naming the field.
  auto bad = Submit(*blue, {{"volumes", {{{"name", "data"}, {"mountPath", "/proc/x"}}}}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(Message(bad).rfind("volumes[0].mountPath:", 0), 0u) << bad;
  bad = Submit(*blue, {{"volumes", {{{"name", "data"}, {"mountPath", "/d"}, {"rw", true}}}}},
               &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(Message(bad).rfind("volumes[0].rw: unknown field", 0), 0u) << bad;
  bad = Submit(*blue, {{"network", "host"}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(Message(bad).rfind("network:", 0), 0u) << bad;

  auto isolated = Submit(*blue, {{"network", "none"}}, &status);
  ASSERT_EQ(status, 202) << isolated;
  EXPECT_EQ(isolated["network"], "none");

  // Durable: the same after a restart.
  serve_->Kill(SIGTERM);
  ASSERT_TRUE(serve_->Start());
  admin_ = serve_->Connect(serve_->admin_token());
  auto again = CallJson(*admin_, "GET", "/v1/containers/" + id, "", &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(again["volumes"], accepted["volumes"]);
  EXPECT_EQ(CallJson(*admin_, "GET", "/v1/containers/" + isolated.value("id", ""))["network"],
            "none");
  EXPECT_EQ(CallJson(*admin_, "GET", "/v1/tenancies/blue/storage")["nfs"].size(), 2u);
}

TEST_F(TenancyApi, DeletingATenancyIsAdminOnlyAndTakesItsTokens) {
  auto blue = TenantOf("blue");
  int status = 0;
  auto refused = CallJson(*blue, "DELETE", "/v1/tenancies/blue", "", &status);
  EXPECT_EQ(status, 403) << refused;
  CallJson(*admin_, "DELETE", "/v1/tenancies/nobody", "", &status);
  EXPECT_EQ(status, 404);
  auto deleted = CallJson(*admin_, "DELETE", "/v1/tenancies/blue", "", &status);
  EXPECT_EQ(status, 200) << deleted;
  CallJson(*admin_, "GET", "/v1/tenancies/blue", "", &status);
  EXPECT_EQ(status, 404);
  CallJson(*blue, "GET", "/v1/containers", "", &status);
  EXPECT_EQ(status, 401);  // its tokens went with it
  // Durably.
  serve_->Kill(SIGTERM);
  ASSERT_TRUE(serve_->Start());
  admin_ = serve_->Connect(serve_->admin_token());
  CallJson(*admin_, "GET", "/v1/tenancies/blue", "", &status);
  EXPECT_EQ(status, 404);
}

// The local backend: podman objects follow the tenancy records.
class TenancyLocalBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Podman::Get().ready()) << Podman::Get().setup_error();
    root_ = MaterializeHost("hgx-h100-dgx");
    tenancy_ = "tt" + std::to_string(::getpid()) + "-api";
    instance_ = tenancy_;
    serve_ = std::make_unique<ServeProcess>(
        dir_.path(), std::vector<std::string>{"--root", root_, "--cdi-dir", dir_.path() + "/cdi",
                                              "--cdi-kind", "tessera-test.example/gpu",
                                              "--instance", instance_, "--stop-grace-s", "1"});
    std::string log;
    ASSERT_TRUE(serve_->Start(&log)) << log;
    admin_ = serve_->Connect(serve_->admin_token());
  }

  void TearDown() override {
    serve_.reset();
    RemoveInstanceContainers(instance_);
    for (const char* name : {"data", "models"})
      RunArgv({"podman", "volume", "rm", "-f", "tessera-t-" + tenancy_ + "." + name});
    RunArgv({"podman", "network", "rm", "-f", "tessera-t-" + tenancy_});
  }

  json WaitEnded(const std::string& id) {
    json container;
    for (int i = 0; i < 600; ++i) {
      container = CallJson(*admin_, "GET", "/v1/containers/" + id);
      std::string state = container.value("state", "");
      if (state == "exited" || state == "failed") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return container;
  }

  std::string Submit(json body) {
    body["image"] = Podman::Get().image();
    body["tenancy"] = tenancy_;
    int status = 0;
    auto answer = CallJson(*admin_, "POST", "/v1/containers", body.dump(), &status);
    EXPECT_EQ(status, 202) << answer;
    return answer.value("id", "");
  }

  std::string root_, tenancy_, instance_;
  TempDir dir_;
  std::unique_ptr<ServeProcess> serve_;
  std::unique_ptr<client::Connection> admin_;
};

TEST_F(TenancyLocalBackend, NetworkAndVolumesFollowTheTenancy) {
  int status = 0;
  auto put = CallJson(*admin_, "PUT", "/v1/tenancies/" + tenancy_, "{}", &status);
  ASSERT_EQ(status, 200) << put << serve_->log();
  // The tenancy's network exists as soon as the tenancy does, and is --internal.
  auto inspected =
      RunArgv({"podman", "network", "inspect", "--format",
               "{{.Internal}} {{index .Labels \"io.tessera.tenancy\"}}", "tessera-t-" + tenancy_});
  ASSERT_EQ(inspected.status, 0) << inspected.output;
  EXPECT_EQ(inspected.output, "true " + tenancy_ + "\n");

  // Storage entitlements become podman NFS volumes; withdrawing one removes its volume.
  std::string storage = R"({"nfs":[{"name":"data","server":"127.0.0.1","path":"/exports/d"},
    {"name":"models","server":"127.0.0.1","path":"/exports/m","readOnly":true}]})";
  auto stored =
      CallJson(*admin_, "PUT", "/v1/tenancies/" + tenancy_ + "/storage", storage, &status);
  ASSERT_EQ(status, 200) << stored;
  auto volume = RunArgv({"podman", "volume", "inspect", "--format",
                         "{{.Driver}} {{.Options.type}} {{.Options.o}} {{.Options.device}}",
                         "tessera-t-" + tenancy_ + ".models"});
  ASSERT_EQ(volume.status, 0) << volume.output;
  EXPECT_EQ(volume.output, "local nfs addr=127.0.0.1,ro 127.0.0.1:/exports/m\n");
  CallJson(*admin_, "PUT", "/v1/tenancies/" + tenancy_ + "/storage",
           R"({"nfs":[{"name":"data","server":"127.0.0.1","path":"/exports/d"}]})", &status);
  ASSERT_EQ(status, 200);
  EXPECT_NE(RunArgv({"podman", "volume", "exists", "tessera-t-" + tenancy_ + ".models"}).status, 0);
  EXPECT_EQ(RunArgv({"podman", "volume", "exists", "tessera-t-" + tenancy_ + ".data"}).status, 0);

  // A container joins its tenancy's network and nothing else; "none" gets no network.
  auto on_net = WaitEnded(Submit({{"command", {"/bin/sh", "-c", "ls /sys/class/net"}}}));
  EXPECT_EQ(on_net["state"], "exited") << on_net << serve_->log();
  auto networks = RunArgv({"podman", "inspect", "--format",
                           "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}",
                           "tessera-" + on_net.value("id", "")});
  EXPECT_EQ(networks.output, "tessera-t-" + tenancy_ + " \n");
  auto logs = serve_->Connect(serve_->admin_token())
                  ->Call("GET", "/v1/containers/" + on_net.value("id", "") + "/logs", "", {});
  ASSERT_TRUE(logs);
  EXPECT_NE(logs->body.find("eth0"), std::string::npos) << logs->body;

  auto no_net =
      WaitEnded(Submit({{"network", "none"}, {"command", {"/bin/sh", "-c", "ls /sys/class/net"}}}));
  EXPECT_EQ(no_net["state"], "exited") << no_net;
  auto mode = RunArgv({"podman", "inspect", "--format", "{{.HostConfig.NetworkMode}}",
                       "tessera-" + no_net.value("id", "")});
  EXPECT_EQ(mode.output, "none\n");

  // An NFS volume: this kernel has no NFS client, so the start fails at the kernel's mount and
  // the container is failed with that reason (on a kernel with NFS it would need a server).
  auto with_volume = WaitEnded(
      Submit({{"volumes", {{{"name", "data"}, {"mountPath", "/data"}}}}, {"command", {"true"}}}));
  EXPECT_EQ(with_volume["state"], "failed") << with_volume;
  std::string reason = with_volume.value("reason", "");
  EXPECT_TRUE(reason.find("No such device") != std::string::npos ||
              reason.find("unknown filesystem type") != std::string::npos ||
              reason.find("Connection refused") != std::string::npos)
      << reason;

  // Deleting the tenancy (every container ended) removes its containers, network and volumes.
  auto deleted = CallJson(*admin_, "DELETE", "/v1/tenancies/" + tenancy_, "", &status);
  EXPECT_EQ(status, 200) << deleted << serve_->log();
  EXPECT_NE(RunArgv({"podman", "network", "exists", "tessera-t-" + tenancy_}).status, 0);
  EXPECT_NE(RunArgv({"podman", "volume", "exists", "tessera-t-" + tenancy_ + ".data"}).status, 0);
  EXPECT_NE(RunArgv({"podman", "container", "exists", "tessera-" + on_net.value("id", "")}).status,
            0);
}

TEST_F(TenancyLocalBackend, ATenancyWithARunningContainerIsNotDeleted) {
  auto id = Submit({{"command", {"sleep", "60"}}});
  json container;
  for (int i = 0; i < 300; ++i) {
    container = CallJson(*admin_, "GET", "/v1/containers/" + id);
    if (container.value("state", "") == "running") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(container["state"], "running") << container << serve_->log();
  int status = 0;
  auto refused = CallJson(*admin_, "DELETE", "/v1/tenancies/" + tenancy_, "", &status);
  EXPECT_EQ(status, 409) << refused;
  EXPECT_EQ(RunArgv({"podman", "network", "exists", "tessera-t-" + tenancy_}).status, 0);
  CallJson(*admin_, "DELETE", "/v1/containers/" + id, "", &status);
  WaitEnded(id);
  auto deleted = CallJson(*admin_, "DELETE", "/v1/tenancies/" + tenancy_, "", &status);
  EXPECT_EQ(status, 200) << deleted << serve_->log();
  EXPECT_NE(RunArgv({"podman", "network", "exists", "tessera-t-" + tenancy_}).status, 0);
}

}  // namespace
}  // namespace tessera::testing
