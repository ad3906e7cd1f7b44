// Real tessera-serve --backend kubernetes --leader-elect replicas keeping their state in the
// cluster (the scripted API server): every replica serves the API from its watch cache and
// writes objects; a stream of submissions from several clients survives kill -9 of the leader
// (another replica leads, every acknowledged submission is an object placed exactly once, no GPU
// is in two leases, reads keep answering on the survivors); and a fresh replica with an empty
// data dir, after every replica was killed, still knows every token and idempotency key.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "backends/kubernetes/kubernetes_backend.h"
#include "backends/kubernetes/state_objects.h"
#include "kubernetes/fake_apiserver.h"
#include "kubernetes/gpu_node.h"
#include "serve/serve_process.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using k8s::Json;
using k8s::Resource;

constexpr const char* kNamespace = "tessera-system";
constexpr const char* kAdminToken = "tsa_0123456789abcdef0123456789abcdef0123456789abcdef";
constexpr int kLeaseMs = 3000;

class ServeReplicasSharingTheCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteKubeconfigFile(dir_.path() + "/kubeconfig", api_.url());
    // The chart mounts one admin token Secret into every replica.
    std::ofstream(dir_.path() + "/admin.token") << kAdminToken << "\n";
    std::filesystem::permissions(
        dir_.path() + "/admin.token",
        std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    config_.server = api_.url();
    admin_ = std::make_unique<k8s::Client>(config_);
  }

  // One replica: every replica is the same instance of the control plane (the chart's
  // Deployment), with short election timings (3 s Lease, 2 s renew deadline).
  std::unique_ptr<ServeProcess> StartReplica(const std::string& identity,
                                             bool admin_token_file = true) {
    const std::string dir = dir_.path() + "/" + identity;
    std::filesystem::create_directories(dir);
    std::vector<std::string> flags = {"--root",
                                      MaterializeHost("hgx-h100-dgx"),
                                      "--backend",
                                      "kubernetes",
                                      "--kubeconfig",
                                      dir_.path() + "/kubeconfig",
                                      "--cdi-dir",
                                      dir + "/cdi",
                                      "--instance",
                                      "tessera-control-plane",
                                      "--leader-elect",
                                      "--leader-elect-identity",
                                      identity,
                                      "--leader-elect-namespace",
                                      kNamespace,
                                      "--leader-elect-lease-duration-ms",
                                      std::to_string(kLeaseMs),
                                      "--leader-elect-renew-deadline-ms",
                                      "2000",
                                      "--leader-elect-retry-period-ms",
                                      "300"};
    if (admin_token_file) {
      flags.push_back("--admin-token-file");
      flags.push_back(dir_.path() + "/admin.token");
    }
    auto replica = std::make_unique<ServeProcess>(dir, flags);
    std::string log;
    EXPECT_TRUE(replica->Start(&log)) << log;
    return replica;
  }

  std::string Holder() {
    auto lease = admin_->Get(Resource::Leases(), kNamespace, "tessera-control-plane");
    return lease ? (*lease)["spec"].value("holderIdentity", "") : "";
  }

  Json Items(const Resource& resource, const std::string& ns = "") {
    auto list = admin_->List(resource, ns);
    return list ? (*list).value("items", Json::array()) : Json::array();
  }

  // Every GpuContainer object by ID.
  std::map<std::string, fleet::ContainerRecord> Objects() {
    std::map<std::string, fleet::ContainerRecord> out;
    for (const auto& item : Items(Resource::GpuContainers())) {
      auto record = k8s::ContainerRecordOf(item);
      EXPECT_TRUE(record.ok()) << item.dump();
      if (record) out[record->id] = *record;
    }
    return out;
  }

  // No GPU is named by two GpuLeases that hold it (reserved or active); returns how many
  // leases there are.
  size_t CheckLeasesDisjoint() {
    std::set<std::string> held;
    size_t leases = 0;
    for (const auto& lease : Items(Resource::GpuLeases())) {
      ++leases;
      const std::string state =
          lease.value("status", Json::object()).value("state", std::string("reserved"));
      if (state != "reserved" && state != "active") continue;
      const std::string node = lease["spec"].value("node", "");
      for (const auto& gpu : lease["spec"].value("gpuIds", Json::array())) {
        const std::string id = gpu.get<std::string>() + "@" + node;
        EXPECT_TRUE(held.insert(id).second) << "GPU " << id << " is in two GpuLeases";
      }
    }
    return leases;
  }

  FakeApiServer api_;
  TempDir dir_;
  k8s::ClientConfig config_;
  std::unique_ptr<k8s::Client> admin_;
};

TEST_F(ServeReplicasSharingTheCluster, SubmissionsSurviveKillingTheLeader) {
  for (const char* node : {"gpu-node-1", "gpu-node-2", "gpu-node-3"})
    PublishGpuNode(*admin_, node, "hgx-h100-dgx");
  std::vector<std::unique_ptr<ServeProcess>> replicas;
  replicas.push_back(StartReplica("replica-a"));
  ASSERT_TRUE(WaitUntil([&] { return Holder() == "replica-a"; }));
  replicas.push_back(StartReplica("replica-b"));
  replicas.push_back(StartReplica("replica-c"));
  for (const auto& replica : replicas)
    ASSERT_GT(replica->port(), 0);

  // A tenancy per client, created on the leader; a token made on a follower works on another.
  {
    auto leader = replicas[0]->Connect(kAdminToken);
    for (int client = 0; client < 3; ++client) {
      int status = 0;
      CallJson(*leader, "PUT", "/v1/tenancies/team-" + std::to_string(client), "{}", &status);
      ASSERT_EQ(status, 200);
    }
  }
  auto follower = replicas[1]->Connect(kAdminToken);
  ASSERT_TRUE(WaitUntil([&] {
    int status = 0;
    CallJson(*follower, "GET", "/v1/tenancies/team-2", "", &status);
    return status == 200;
  }));
  int status = 0;
  Json token = CallJson(*follower, "POST", "/v1/tenancies/team-0/tokens", "", &status);
  ASSERT_EQ(status / 100, 2) << token.dump();
  const std::string tenant_token = token.value("token", "");
  ASSERT_FALSE(tenant_token.empty());
  auto other = replicas[2]->Connect(tenant_token);
  ASSERT_TRUE(WaitUntil([&] {
    int answered = 0;
    CallJson(*other, "GET", "/v1/containers", "", &answered);
    return answered == 200;
  }));

  // Reads on replicas b and c (the survivors) all along.
  std::atomic<bool> reading{true};
  std::atomic<int> reads{0}, failed_reads{0};
  std::thread reader([&] {
    std::vector<std::unique_ptr<client::Connection>> connections;
    for (int i = 1; i < 3; ++i)
      connections.push_back(replicas[i]->Connect(kAdminToken));
    while (reading) {
      for (auto& connection : connections) {
        int answered = 0;
        CallJson(*connection, "GET", "/v1/containers?limit=5", "", &answered);
        ++reads;
        if (answered != 200) ++failed_reads;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  // Three clients, one per replica, 20 submissions each (every third with one GPU). A request
  // that gets no answer is retried with the same Idempotency-Key on the next replica.
  std::mutex mu;
  std::map<std::string, std::string> acknowledged;  // Idempotency-Key -> container ID
  std::atomic<int> submitted{0};
  std::atomic<bool> leader_killed{false};
  constexpr int kPerClient = 20;
  auto client_loop = [&](int client) {
    for (int n = 0; n < kPerClient; ++n) {
      const std::string key = "client-" + std::to_string(client) + "-" + std::to_string(n);
      const std::string body = R"({"image":"cuda","tenancy":"team-)" + std::to_string(client) +
                               R"(","gpus":)" + (n % 3 == 0 ? "1" : "0") + "}";
      for (int attempt = 0; attempt < 6; ++attempt) {
        size_t target = (client + attempt) % 3;
        if (target == 0 && leader_killed) target = 1 + client % 2;
        auto connection = replicas[target]->Connect(kAdminToken);
        int answered = 0;
        Json reply = CallJson(*connection, "POST", "/v1/containers", body, &answered,
                              {{"Idempotency-Key", key}});
        if (answered / 100 == 2) {
          std::lock_guard lock(mu);
          auto [it, fresh] = acknowledged.emplace(key, reply.value("id", ""));
          EXPECT_EQ(it->second, reply.value("id", "")) << key;
          break;
        }
      }
      ++submitted;
    }
  };
  std::vector<std::thread> clients;
  for (int client = 0; client < 3; ++client)
    clients.emplace_back(client_loop, client);

  ASSERT_TRUE(WaitUntil([&] { return submitted >= 3 * kPerClient / 3; }));
  const auto killed_at = std::chrono::steady_clock::now();
  leader_killed = true;
  replicas[0]->Kill(SIGKILL);
  ASSERT_TRUE(WaitUntil([&] {
    const std::string holder = Holder();
    return holder == "replica-b" || holder == "replica-c";
  }));
  const auto took = std::chrono::steady_clock::now() - killed_at;
  std::printf(
      "a new leader (%s) %lld ms after kill -9 of the old one (Lease %d ms)\n", Holder().c_str(),
      static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()),
      kLeaseMs);
  // The Lease expires at most kLeaseMs after the last renewal; generous slack for a loaded CI.
  EXPECT_LT(took, std::chrono::milliseconds(kLeaseMs) + std::chrono::seconds(10));
  for (auto& thread : clients)
    thread.join();

  // Every acknowledged submission is an object, and each is placed (started) exactly once.
  ASSERT_GE(acknowledged.size(), size_t(3 * kPerClient - 3));
  ASSERT_TRUE(WaitUntil([&] {
    auto objects = Objects();
    for (const auto& [key, id] : acknowledged) {
      auto it = objects.find(id);
      if (it == objects.end() || !it->second.started) return false;
    }
    return true;
  })) << replicas[1]->log().substr(0, 20000);
  reading = false;
  reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(failed_reads.load(), 0);

  auto objects = Objects();
  std::set<std::string> ids;
  size_t with_gpus = 0, vanished_with_gpus = 0;
  for (const auto& [key, id] : acknowledged) {
    EXPECT_TRUE(ids.insert(id).second) << "two keys answered with " << id;
    const auto& record = objects.at(id);
    EXPECT_EQ(record.idempotency_key, key);
    if (record.spec.gpus > 0) {
      ++with_gpus;
      EXPECT_EQ(record.gpus.size(), 1u) << id;
      if (record.state == fleet::ContainerState::kFailed) ++vanished_with_gpus;
    }
  }
  // Nothing but what the clients asked for (an unanswered request retried under its key is the
  // same object).
  EXPECT_LE(objects.size(), size_t(3 * kPerClient));
  // At most one GpuLease per container with a GPU (one each, but for a start the killed leader
  // had recorded and not carried out), none naming a GPU another names.
  size_t leases = 0;
  ASSERT_TRUE(WaitUntil([&] {
    leases = CheckLeasesDisjoint();
    return leases >= with_gpus - vanished_with_gpus;
  }));
  EXPECT_LE(leases, with_gpus);
  // And the records agree: no GPU is held by two containers.
  std::map<std::string, std::string> holder_of;
  for (const auto& [id, record] : objects) {
    if (fleet::IsTerminal(record.state)) continue;
    for (const auto& gpu : record.gpus)
      EXPECT_TRUE(holder_of.emplace(gpu, id).second)
          << "GPU " << gpu << " held by " << holder_of[gpu] << " and " << id;
  }
  // Every placed container has its Pod, but for a start the killed leader recorded and did not
  // carry out: its successor finds no Pod and fails it ("vanished"), never starts it again.
  size_t vanished = 0;
  for (const auto& [key, id] : acknowledged) {
    const auto& record = objects.at(id);
    const std::string ns = "tenant-" + record.spec.tenancy;
    if (record.state == fleet::ContainerState::kFailed) {
      ++vanished;
      EXPECT_NE(record.reason.find("vanished"), std::string::npos) << id << ": " << record.reason;
      continue;
    }
    EXPECT_TRUE(admin_->Get(Resource::Pods(), ns, backends::PodNameFor(id)).ok()) << id;
  }
  // A kill catches only the starts under way or queued at that instant, never most of them.
  EXPECT_LT(vanished, acknowledged.size() / 2);
  std::printf("%zu acknowledged submissions, %zu failed as vanished by the takeover\n",
              acknowledged.size(), vanished);
}

TEST_F(ServeReplicasSharingTheCluster, AFreshReplicaAfterEveryOneWasKilledLosesNothing) {
  PublishGpuNode(*admin_, "gpu-node-1", "hgx-h100-dgx");
  auto a = StartReplica("replica-a");
  ASSERT_TRUE(WaitUntil([&] { return Holder() == "replica-a"; }));
  auto b = StartReplica("replica-b");
  auto admin = a->Connect(kAdminToken);
  int status = 0;
  CallJson(*admin, "PUT", "/v1/tenancies/team-a", "{}", &status);
  ASSERT_EQ(status, 200);
  Json token = CallJson(*admin, "POST", "/v1/tenancies/team-a/tokens", "", &status);
  ASSERT_EQ(status / 100, 2);
  const std::string tenant_token = token.value("token", "");
  auto tenant = b->Connect(tenant_token);
  ASSERT_TRUE(WaitUntil([&] {
    int answered = 0;
    CallJson(*tenant, "GET", "/v1/containers", "", &answered);
    return answered == 200;
  }));
  const std::string body = R"({"image":"cuda","tenancy":"team-a","gpus":1})";
  Json first = CallJson(*tenant, "POST", "/v1/containers", body, &status,
                        {{"Idempotency-Key", "nightly-42"}});
  ASSERT_EQ(status / 100, 2) << first.dump();
  const std::string id = first.value("id", "");
  // Placed and running (its Pod and GpuLease exist) before every replica goes.
  ASSERT_TRUE(WaitUntil([&] {
    auto object = admin_->Get(Resource::GpuContainers(), "", id);
    return object &&
           (*object).value("status", Json::object()).value("state", std::string()) == "running";
  }));

  a->Kill(SIGKILL);
  b->Kill(SIGKILL);
  // A new replica, a new empty data dir, and no admin token file: the cluster has it all.
  auto fresh = StartReplica("replica-fresh", /*admin_token_file=*/false);
  EXPECT_FALSE(std::filesystem::exists(fresh->data_dir() + "/admin.token"));
  auto again = fresh->Connect(tenant_token);
  Json seen = CallJson(*again, "GET", "/v1/containers/" + id, "", &status);
  EXPECT_EQ(status, 200) << seen.dump();
  EXPECT_EQ(seen.value("id", ""), id);
  auto response = again->Call("POST", "/v1/containers", body, {{"Idempotency-Key", "nightly-42"}});
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->status / 100, 2) << response->body;
  EXPECT_EQ(Json::parse(response->body).value("id", ""), id);
  // The admin token still opens everything.
  auto fresh_admin = fresh->Connect(kAdminToken);
  CallJson(*fresh_admin, "GET", "/v1/tenancies/team-a", "", &status);
  EXPECT_EQ(status, 200);
  // Once it leads, the container it found placed is not placed again.
  ASSERT_TRUE(WaitUntil([&] { return Holder() == "replica-fresh"; }));
  EXPECT_EQ(CheckLeasesDisjoint(), 1u);
}

}  // namespace
}  // namespace tessera::testing
