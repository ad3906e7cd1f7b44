// The API client's wire behaviour against a scripted API server on a real socket: auth headers,
// TLS with a generated CA and client certificates, error categories, 409/429/5xx handling,
// watch resume after the stream ends and relist after 410 Gone. Plus kubeconfig parsing.
#include "kubernetes/client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "backends/kubernetes/controller.h"
#include "backends/kubernetes/objects.h"
#include "kubernetes/fake_apiserver.h"
#include "kubernetes/kubeconfig.h"
#include "kubernetes/plain_config.h"
#include "support/fixture_host.h"
#include "support/hostile_files.h"
#include "support/wait.h"

namespace tessera::k8s {
namespace {

using testing::FakeApiServer;
using testing::RunCommand;
using testing::TempDir;

ClientConfig Plain(const FakeApiServer& server) {
  ClientConfig config = testing::PlainConfig(server);
  config.retry.initial_backoff = std::chrono::milliseconds(50);
  config.retry.max_backoff = std::chrono::milliseconds(2000);
  return config;
}

Json ConfigMapLike(const std::string& name) {
  return BuildNamespace(name);
}

std::string Base64(const std::string& path) {
  std::string out = RunCommand("base64 -w0 " + path);
  return out;
}

TEST(Client, SendsTheBearerTokenAndJson) {
  FakeApiServer server({"--token", "s3cret"});
  ClientConfig config = Plain(server);
  config.bearer_token = "s3cret";
  Client client(config);
  ASSERT_TRUE(client.Create(Resource::Namespaces(), "", ConfigMapLike("a")).ok());
  auto got = client.Get(Resource::Namespaces(), "", "tenant-a");
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ((*got)["metadata"]["name"], "tenant-a");
  Json log = server.Log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0]["method"], "POST");
  EXPECT_EQ(log[0]["path"], "/api/v1/namespaces");
  EXPECT_EQ(log[0]["authorization"], "Bearer s3cret");
  EXPECT_EQ(log[0]["contentType"], "application/json");
  EXPECT_EQ(log[0]["userAgent"], "tessera");
  // A wrong token is a permission error, not retried.
  config.bearer_token = "wrong";
  Client bad(config);
  auto denied = bad.Get(Resource::Namespaces(), "", "tenant-a");
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.error().category, ErrorCategory::kPermissionDenied);
  EXPECT_EQ(bad.last_error().http_status, 401);
}

// One kept-alive connection carries the requests (a new connection per request cost more than
// the API server's answer); one the server closed while idle is replaced without the caller
// noticing, and the request is sent once.
TEST(Client, ReusesOneConnectionAndReplacesOneTheServerClosed) {
  FakeApiServer server;
  Client client(Plain(server));
  ASSERT_TRUE(client.Create(Resource::Namespaces(), "", BuildNamespace("keep")).ok());
  ASSERT_TRUE(client.Get(Resource::Namespaces(), "", "tenant-keep").ok());
  ASSERT_TRUE(client.Get(Resource::Namespaces(), "", "tenant-keep").ok());
  server.CloseAfterNextRequest();
  ASSERT_TRUE(client.Get(Resource::Namespaces(), "", "tenant-keep").ok());  // answered, closed
  auto after = client.Get(Resource::Namespaces(), "", "tenant-keep");
  ASSERT_TRUE(after.ok()) << after.error().message;
  Json log = server.Log();
  ASSERT_EQ(log.size(), 5u) << log.dump();
  for (size_t i = 1; i < 4; ++i)
    EXPECT_EQ(log[i]["peerPort"], log[0]["peerPort"]) << log.dump();
  EXPECT_NE(log[4]["peerPort"], log[0]["peerPort"]) << log.dump();
}

TEST(Client, TokenFileIsReadForEachRequest) {
  FakeApiServer server({"--token", "second"});
  TempDir dir;
  std::ofstream(dir.path() + "/token") << "first\n";
  ClientConfig config = Plain(server);
  config.token_file = dir.path() + "/token";
  Client client(config);
  EXPECT_FALSE(client.Get(Resource::Namespaces(), "", "x").ok());
  std::ofstream(dir.path() + "/token") << "second\n";  // rotated
  auto result = client.Get(Resource::Namespaces(), "", "x");
  EXPECT_EQ(result.error().category, ErrorCategory::kNotFound);
  EXPECT_EQ(server.Log().back()["authorization"], "Bearer second");
}

TEST(Client, ErrorCategoriesFollowStatusObjects) {
  FakeApiServer server;
  Client client(Plain(server));
  auto missing = client.Get(Resource::Pods(), "ns", "nope");
  EXPECT_EQ(missing.error().category, ErrorCategory::kNotFound);
  EXPECT_EQ(client.last_error().reason, "NotFound");
  ASSERT_TRUE(client.Create(Resource::Namespaces(), "", ConfigMapLike("a")).ok());
  auto again = client.Create(Resource::Namespaces(), "", ConfigMapLike("a"));
  EXPECT_EQ(again.error().category, ErrorCategory::kAlreadyExists);
  EXPECT_EQ(client.last_error().http_status, 409);
  // A stale resourceVersion on replace is a conflict (FailedPrecondition), not AlreadyExists.
  Json stale = ConfigMapLike("a");
  stale["metadata"]["resourceVersion"] = "1";
  auto conflict = client.Replace(Resource::Namespaces(), "", "tenant-a", stale);
  EXPECT_EQ(conflict.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_EQ(client.last_error().reason, "Conflict");
  server.Script({{{"method", "POST"},
                  {"path", "namespaces$"},
                  {"status", 422},
                  {"reason", "Invalid"},
                  {"times", 1}}});
  EXPECT_EQ(client.Create(Resource::Namespaces(), "", ConfigMapLike("b")).error().category,
            ErrorCategory::kInvalidArgument);
}

TEST(Client, RetriesTooManyRequestsHonouringRetryAfter) {
  FakeApiServer server;
  Client client(Plain(server));
  server.Script({{{"method", "GET"},
                  {"path", "tenant-x"},
                  {"status", 429},
                  {"reason", "TooManyRequests"},
                  {"headers", {{"Retry-After", "1"}}},
                  {"times", 1}}});
  auto start = std::chrono::steady_clock::now();
  auto result = client.Get(Resource::Namespaces(), "", "tenant-x");
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(result.error().category, ErrorCategory::kNotFound);  // the retry reached the store
  EXPECT_GE(waited, std::chrono::milliseconds(950));
  EXPECT_EQ(server.Log().size(), 2u);
}

TEST(Client, RetriesServerErrorsWithBackoffThenGivesUp) {
  FakeApiServer server;
  ClientConfig config = Plain(server);
  config.retry.max_attempts = 3;
  Client client(config);
  server.Script({{{"path", "tenant-y"}, {"status", 503}, {"times", 2}}});
  EXPECT_EQ(client.Get(Resource::Namespaces(), "", "tenant-y").error().category,
            ErrorCategory::kNotFound);
  EXPECT_EQ(server.Log().size(), 3u);
  server.ClearLog();
  server.Script({{{"path", "tenant-z"}, {"status", 500}, {"times", 10}}});
  auto failed = client.Get(Resource::Namespaces(), "", "tenant-z");
  EXPECT_EQ(failed.error().category, ErrorCategory::kUnavailable);
  EXPECT_EQ(server.Log().size(), 3u);  // max_attempts
}

TEST(Client, EnsureObjectRetriesAConflictingReplace) {
  FakeApiServer server;
  Client client(Plain(server));
  Json desired = BuildNetworkPolicy("team-a", {});
  ASSERT_TRUE(client.Create(Resource::NetworkPolicies(), "tenant-team-a", desired).ok());
  Json drifted = desired;
  drifted["spec"]["ingress"] = Json::array();
  ASSERT_TRUE(
      client.Replace(Resource::NetworkPolicies(), "tenant-team-a", "tenant-isolation", drifted)
          .ok());
  server.ClearLog();
  server.Script({{{"method", "PUT"},
                  {"path", "networkpolicies/tenant-isolation"},
                  {"status", 409},
                  {"reason", "Conflict"},
                  {"times", 1}}});
  auto live = EnsureObject(client, Resource::NetworkPolicies(), "tenant-team-a", desired);
  ASSERT_TRUE(live.ok()) << live.error().message;
  EXPECT_EQ((*live)["spec"]["ingress"], desired["spec"]["ingress"]);
  int puts = 0;
  for (const auto& entry : server.Log())
    puts += entry["method"] == "PUT";
  EXPECT_EQ(puts, 2);
}

TEST(Client, WatchResumesFromTheLastVersionAndRelistsAfterGone) {
  FakeApiServer server;
  server.SetWatchSeconds(0.5);  // the server ends every watch stream after half a second
  Client client(Plain(server));
  ASSERT_TRUE(
      client.Create(Resource::GpuLeases(), "", BuildGpuLease({"l1", "t", "n", {"0000:18:00.0"}}))
          .ok());
  std::atomic<bool> stop{false};
  testing::EventLog events;
  std::thread watcher([&] {
    auto status = client.ListWatch(
        Resource::GpuLeases(), "", "",
        [&](const WatchEvent& e) {
          std::string name = e.type == "SYNC" ? std::to_string(e.object["items"].size())
                                              : e.object["metadata"].value("name", "");
          events.Add(e.type + ":" + name);
          return true;
        },
        &stop);
    EXPECT_TRUE(status.ok());
  });
  // Lists and watches of the leases the server saw, the watches by the version they start from.
  auto count_requests = [&](int* lists, int* watches_from_1) {
    *lists = *watches_from_1 = 0;
    for (const auto& entry : server.Log()) {
      std::string query = entry["query"];
      if (entry["method"] != "GET" || entry["path"] != "/apis/tessera.dev/v1alpha1/gpuleases")
        continue;
      if (query.find("watch=1") == std::string::npos)
        ++*lists;
      else if (query.find("resourceVersion=1") != std::string::npos)
        ++*watches_from_1;
    }
  };
  ASSERT_TRUE(events.WaitFor("SYNC:1"));
  // A stream has ended and the client watched again from the version it had.
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        int lists = 0, resumed = 0;
        count_requests(&lists, &resumed);
        return resumed >= 2;
      },
      testing::kEventTimeout, std::chrono::milliseconds(100)));
  Client writer(Plain(server));
  ASSERT_TRUE(
      writer.Create(Resource::GpuLeases(), "", BuildGpuLease({"l2", "t", "n", {"0000:2a:00.0"}}))
          .ok());
  EXPECT_TRUE(events.WaitFor("ADDED:l2"));
  // History compacted: the next watch from the old version gets 410 and the client relists.
  server.Compact();
  ASSERT_TRUE(
      writer.Create(Resource::GpuLeases(), "", BuildGpuLease({"l3", "t", "n", {"0000:3a:00.0"}}))
          .ok());
  const bool relisted = events.WaitFor("SYNC:3");
  stop = true;
  watcher.join();
  auto seen = events.Events();
  std::string trail;
  for (const auto& event : seen)
    trail += event + " ";
  EXPECT_TRUE(relisted) << "events: " << trail;
  EXPECT_EQ(std::count(seen.begin(), seen.end(), "ADDED:l2"), 1) << "no duplicate after resume";
  // The log shows watches resuming with a resourceVersion and two lists.
  int lists = 0, resumed = 0;
  count_requests(&lists, &resumed);
  EXPECT_GE(lists, 2);
  EXPECT_GE(resumed, 2);
}

// A hostile (or impersonated) API server: answers over the call's limit are refused while they
// are read and not retried, deep JSON is refused before it is parsed, a trickling answer ends at
// the call's deadline, and it holds up no other call of the same client.
class HostileServer : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(client_.Create(Resource::Namespaces(), "", ConfigMapLike("a")).ok());
  }
  // The next GET of the namespace is answered as `rule` says.
  void Answer(Json rule) {
    rule["method"] = "GET";
    rule["path"] = "/namespaces/tenant-a$";
    rule["times"] = 1;
    server_.Script(Json::array({rule}));
  }
  int Gets() {
    int n = 0;
    for (const auto& entry : server_.Log())
      n += entry["method"] == "GET" && entry["path"] == "/api/v1/namespaces/tenant-a";
    return n;
  }
  FakeApiServer server_;
  Client client_{Plain(server_)};
};

TEST_F(HostileServer, AnAnswerOverTheCallsLimitIsRefusedAsItIsReadAndNotRetried) {
  for (bool chunked : {false, true}) {
    server_.ClearLog();
    Answer({{"huge_bytes", 64 << 20}, {"chunked", chunked}});
    auto got = client_.GetBytes(Resource::Namespaces(), "", "tenant-a", CallLimits{1 << 20, {}});
    ASSERT_FALSE(got.ok()) << chunked;
    EXPECT_NE(got.error().message.find("response body larger than 1048576 bytes"),
              std::string::npos)
        << got.error().message;
    EXPECT_EQ(Gets(), 1) << chunked;
  }
  // Under the limit the same answer passes, unparsed.
  server_.ClearLog();
  Answer({{"huge_bytes", 100000}});
  auto fits = client_.GetBytes(Resource::Namespaces(), "", "tenant-a", CallLimits{1 << 20, {}});
  ASSERT_TRUE(fits.ok()) << fits.error().message;
  EXPECT_EQ(fits->size(), 100000u);
}

TEST_F(HostileServer, DeepJsonIsRefusedBeforeItIsParsed) {
  Answer({{"deep", 100000}});
  auto got = client_.Get(Resource::Namespaces(), "", "tenant-a");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.error().message.find("nested deeper than 64 levels"), std::string::npos)
      << got.error().message;
  EXPECT_LT(got.error().message.size(), 400u);
}

TEST_F(HostileServer, ATricklingAnswerEndsAtTheCallsDeadlineAndDelaysNoOtherCall) {
  Answer({{"trickle_interval", 1.0}});
  auto start = std::chrono::steady_clock::now();
  std::atomic<bool> slow_done{false};
  std::thread slow([&] {
    auto got = client_.GetBytes(Resource::Namespaces(), "", "tenant-a",
                                CallLimits{0, std::chrono::milliseconds(3000)});
    EXPECT_FALSE(got.ok());
    if (!got.ok()) {
      EXPECT_NE(got.error().message.find("timed out"), std::string::npos);
    }
    slow_done = true;
  });
  ASSERT_TRUE(testing::WaitUntil([&] { return Gets() > 0; }));
  // The same client, another object, while the slow call waits on the network.
  auto other = client_.Get(Resource::Namespaces(), "", "tenant-b");
  EXPECT_EQ(other.error().category, ErrorCategory::kNotFound);
  EXPECT_FALSE(slow_done.load());
  slow.join();
  // Its attempts and backoffs together stayed inside the deadline (plus one poll slice).
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(ClientTls, VerifiesTheServerWithTheKubeconfigCaAndPresentsAClientCertificate) {
  TempDir pki;
  testing::MakeTestPki(pki.path());
  FakeApiServer server({"--tls-cert", pki.path() + "/server.crt", "--tls-key",
                        pki.path() + "/server.key", "--client-ca", pki.path() + "/ca.crt"});
  std::string kubeconfig =
      "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
      "clusters:\n- name: c\n  cluster:\n    server: " +
      server.url() + "\n    certificate-authority-data: " + Base64(pki.path() + "/ca.crt") +
      "\nusers:\n- name: u\n  user:\n    client-certificate-data: " +
      Base64(pki.path() + "/client.crt") +
      "\n    client-key-data: " + Base64(pki.path() + "/client.key") +
      "\ncontexts:\n- name: test\n  context:\n    cluster: c\n    user: u\n";
  auto config = ParseKubeconfig(kubeconfig, pki.path());
  ASSERT_TRUE(config.ok()) << config.error().message;
  Client client(*config);
  auto created = client.Create(Resource::Namespaces(), "", BuildNamespace("tls"));
  ASSERT_TRUE(created.ok()) << created.error().message;
  EXPECT_EQ(server.Log().back()["clientCert"], true);

  // Without the client certificate the server does not know who we are.
  ClientConfig no_cert = *config;
  no_cert.client_cert_pem.clear();
  no_cert.client_key_pem.clear();
  no_cert.retry.max_attempts = 1;
  EXPECT_EQ(Client(no_cert).Get(Resource::Namespaces(), "", "tenant-tls").error().category,
            ErrorCategory::kPermissionDenied);
  // Without the CA the server is not trusted ...
  ClientConfig no_ca = *config;
  no_ca.ca_pem.clear();
  no_ca.retry.max_attempts = 1;
  EXPECT_EQ(Client(no_ca).Get(Resource::Namespaces(), "", "tenant-tls").error().category,
            ErrorCategory::kUnavailable);
  // ... unless verification is switched off; and a CA file works like CA data.
  no_ca.insecure_skip_tls_verify = true;
  EXPECT_TRUE(Client(no_ca).Get(Resource::Namespaces(), "", "tenant-tls").ok());
  ClientConfig ca_file = *config;
  ca_file.ca_pem.clear();
  ca_file.ca_file = pki.path() + "/ca.crt";
  ca_file.client_cert_pem.clear();
  ca_file.client_key_pem.clear();
  ca_file.client_cert_file = pki.path() + "/client.crt";
  ca_file.client_key_file = pki.path() + "/client.key";
  EXPECT_TRUE(Client(ca_file).Get(Resource::Namespaces(), "", "tenant-tls").ok());
  // tls-server-name: the certificate names 127.0.0.1 and localhost, not other.example.
  ClientConfig named = *config;
  named.retry.max_attempts = 1;
  named.tls_server_name = "localhost";
  auto by_name = Client(named).Get(Resource::Namespaces(), "", "tenant-tls");
  EXPECT_TRUE(by_name.ok()) << by_name.error().message;
  named.tls_server_name = "other.example";
  EXPECT_EQ(Client(named).Get(Resource::Namespaces(), "", "tenant-tls").error().category,
            ErrorCategory::kUnavailable);
}

TEST(ClientFiles, HostileCaCertificateKeyAndTokenFilesAreRefusedAtOnceNamingThem) {
  TempDir pki;
  testing::MakeTestPki(pki.path());
  FakeApiServer server(
      {"--tls-cert", pki.path() + "/server.crt", "--tls-key", pki.path() + "/server.key"});
  ClientConfig good;
  good.server = server.url();
  good.ca_file = pki.path() + "/ca.crt";
  good.retry.max_attempts = 1;
  ASSERT_TRUE(Client(good).Create(Resource::Namespaces(), "", BuildNamespace("f")).ok());
  testing::HostileFiles hostile(".pem");
  for (const auto& file : hostile.all()) {
    for (const char* which : {"ca", "certificate", "key", "token"}) {
      ClientConfig config = good;
      std::string* slot = std::string(which) == "ca"            ? &config.ca_file
                          : std::string(which) == "certificate" ? &config.client_cert_file
                          : std::string(which) == "key"         ? &config.client_key_file
                                                                : &config.token_file;
      *slot = file.path;
      if (slot == &config.client_key_file) config.client_cert_file = pki.path() + "/client.crt";
      if (slot == &config.client_cert_file) config.client_key_file = pki.path() + "/client.key";
      auto got = Client(config).Get(Resource::Namespaces(), "", "tenant-f");
      ASSERT_FALSE(got.ok()) << which << " " << file.kind;
      EXPECT_NE(got.error().message.find(file.path + ": " + testing::ReasonFor(file)),
                std::string::npos)
          << which << " " << file.kind << ": " << got.error().message;
    }
  }
}

TEST(Kubeconfig, SelectsTheContextAndResolvesRelativeFiles) {
  std::string text = R"(apiVersion: v1
kind: Config
current-context: prod
clusters:
- name: prod-cluster
  cluster: {server: "https://10.0.0.1:6443/", certificate-authority: pki/ca.crt}
- name: dev-cluster
  cluster: {server: "https://dev:6443", insecure-skip-tls-verify: true}
users:
- name: admin
  user: {client-certificate: /abs/admin.crt, client-key: pki/admin.key}
- name: bot
  user: {token: abc.def}
contexts:
- name: prod
  context: {cluster: prod-cluster, user: admin}
- name: dev
  context: {cluster: dev-cluster, user: bot}
)";
  auto prod = ParseKubeconfig(text, "/home/me/.kube");
  ASSERT_TRUE(prod.ok()) << prod.error().message;
  EXPECT_EQ(prod->server, "https://10.0.0.1:6443");
  EXPECT_EQ(prod->ca_file, "/home/me/.kube/pki/ca.crt");
  EXPECT_EQ(prod->client_cert_file, "/abs/admin.crt");
  EXPECT_EQ(prod->client_key_file, "/home/me/.kube/pki/admin.key");
  auto dev = ParseKubeconfig(text, "/home/me/.kube", "dev");
  ASSERT_TRUE(dev.ok());
  EXPECT_TRUE(dev->insecure_skip_tls_verify);
  EXPECT_EQ(dev->bearer_token, "abc.def");
  EXPECT_EQ(ParseKubeconfig(text, "", "staging").error().category, ErrorCategory::kNotFound);
  EXPECT_EQ(ParseKubeconfig("current-context: x\n", "").error().category, ErrorCategory::kNotFound);
  EXPECT_EQ(ParseKubeconfig("[", "").error().category, ErrorCategory::kInvalidArgument);
  std::string exec = text + "";
  exec.replace(exec.find("{token: abc.def}"), 16, "{exec: {command: aws}}");
  auto refused = ParseKubeconfig(exec, "", "dev");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("exec"), std::string::npos);
}

TEST(Kubeconfig, InClusterUsesTheServiceAccount) {
  TempDir dir;
  std::ofstream(dir.path() + "/token") << "sa-token";
  std::ofstream(dir.path() + "/ca.crt") << "x";
  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto config = InClusterConfig(dir.path());
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->token_file, dir.path() + "/token");
  EXPECT_EQ(config->ca_file, dir.path() + "/ca.crt");
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_EQ(InClusterConfig(dir.path()).error().category, ErrorCategory::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera::k8s
