// The control plane's records as cluster objects: a submission survives the trip through a
// GpuContainer, tokens through Secrets, idempotent IDs are stable per (incarnation, key), and
// objects that are not what this control plane writes are refused, naming the field. An audit
// record survives its ConfigMap, whose name sorts by time and whose labels are always label-safe.
#include "backends/kubernetes/state_objects.h"

#include <gtest/gtest.h>

#include "backends/kubernetes/audit_objects.h"
#include "backends/kubernetes/objects.h"

namespace tessera::k8s {
namespace {

fleet::ContainerRecord Sample() {
  fleet::ContainerRecord c;
  c.id = "c-0123456789abcdef";
  c.spec.image = "registry.example/team/app:1.2";
  c.spec.tenancy = "team-a";
  c.spec.gpus = 2;
  c.spec.isolation = fleet::Isolation::kGvisor;
  c.spec.command = {"python", "train.py"};
  c.spec.env = {{"EPOCHS", "3"}};
  c.spec.network = tenancy::NetworkMode::kNone;
  c.spec.volumes = {{"datasets", "/data", true}};
  c.tenancy_uid = "5e1f00aa";
  c.state = fleet::ContainerState::kExited;
  c.gpus = {"0000:18:00.0@node-1", "0000:2a:00.0@node-1"};
  c.exit_code = 3;
  c.reason = "stopped by request";
  c.idempotency_key = "retry-7";
  c.stop_requested = true;
  c.started = true;
  c.created_ms = 1763900000123;
  c.started_ms = 1763900001456;
  c.finished_ms = 1763900009789;
  return c;
}

TEST(KubernetesStateObjects, ASubmissionSurvivesTheGpuContainer) {
  const auto record = Sample();
  Json object = GpuContainerObject(record);
  EXPECT_EQ(object["kind"], "GpuContainer");
  EXPECT_EQ(object["apiVersion"], "tessera.dev/v1alpha1");
  EXPECT_EQ(object["metadata"]["name"], record.id);
  EXPECT_EQ(object["metadata"]["labels"][kTenancyLabel], "team-a");
  EXPECT_EQ(object["status"]["node"], "node-1");
  EXPECT_EQ(object["status"]["claim"], "lease-tessera-c-0123456789abcdef");
  EXPECT_EQ(object["status"]["finishedTime"], "2025-11-23T12:13:29.789Z");
  // Through JSON text, as the API server hands it back.
  auto back = ContainerRecordOf(Json::parse(object.dump()));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, record);
}

TEST(KubernetesStateObjects, SchedulingFieldsSurviveAndAreBounded) {
  auto record = Sample();
  record.spec.priority = -7;
  record.spec.max_duration_s = 3600;
  record.spec.preemptible = true;
  Json object = GpuContainerObject(record);
  EXPECT_EQ(object["spec"]["maxDurationSeconds"], 3600);
  auto back = ContainerRecordOf(Json::parse(object.dump()));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, record);
  // Unset fields are left out, as the embedded store leaves them out.
  EXPECT_FALSE(GpuContainerObject(Sample())["spec"].contains("priority"));
  object["spec"]["priority"] = 5000;
  auto refused = ContainerRecordOf(object);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("spec.priority"), std::string::npos);
}

// Ports and readiness ride in the GpuContainer (spec: what was asked; status: where each is
// reached and whether it answers), so another replica and a restart see them; hostile ones are
// refused.
TEST(KubernetesStateObjects, PublishedPortsSurviveAndAreBounded) {
  auto record = Sample();
  record.spec.ports = {{8080, "http", "tcp"}, {5353, "", "udp"}};
  record.spec.ready = fleet::ReadinessProbe{"/healthz", 8080};
  record.published = {{8080, "tcp", "http", "10.96.0.12", 8080}, {5353, "udp", "", "", 0}};
  record.ready = true;
  Json object = GpuContainerObject(record);
  EXPECT_EQ(object["spec"]["ports"][0],
            (Json{{"containerPort", 8080}, {"protocol", "tcp"}, {"name", "http"}}));
  EXPECT_EQ(object["spec"]["ports"][1], (Json{{"containerPort", 5353}, {"protocol", "udp"}}));
  EXPECT_EQ(object["spec"]["ready"]["httpGet"], (Json{{"path", "/healthz"}, {"port", 8080}}));
  EXPECT_EQ(object["status"]["ports"][0]["hostAddress"], "10.96.0.12");
  EXPECT_FALSE(object["status"]["ports"][1].contains("hostPort"));
  EXPECT_EQ(object["status"]["ready"], true);
  auto back = ContainerRecordOf(Json::parse(object.dump()));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, record);
  // Without ports, nothing of them is written.
  EXPECT_FALSE(GpuContainerObject(Sample())["spec"].contains("ports"));
  EXPECT_FALSE(GpuContainerObject(Sample())["status"].contains("ready"));

  auto refused_naming = [&](Json bad, const std::string& field) {
    auto refused = ContainerRecordOf(bad);
    ASSERT_FALSE(refused.ok()) << field;
    EXPECT_NE(refused.error().message.find(field), std::string::npos) << refused.error().message;
    EXPECT_LT(refused.error().message.size(), 200u);
  };
  Json bad = object;
  bad["spec"]["ports"][0]["containerPort"] = 70000;
  refused_naming(bad, "spec.ports[0].containerPort");
  bad = object;
  bad["spec"]["ports"][1]["protocol"] = "sctp";
  refused_naming(bad, "spec.ports[1].protocol");
  bad = object;
  bad["spec"]["ports"] = Json::array();
  for (int i = 0; i < 100; ++i)
    bad["spec"]["ports"].push_back({{"containerPort", 1000 + i}});
  refused_naming(bad, "spec.ports");
  bad = object;
  bad["spec"]["ready"]["httpGet"]["path"] = std::string(100000, '/');
  refused_naming(bad, "spec.ready.httpGet.path");
  bad = object;
  bad["spec"]["ready"] = "yes";
  refused_naming(bad, "spec.ready");
  bad = object;
  bad["status"]["ports"][0]["hostAddress"] = std::string(300, 'a');
  refused_naming(bad, "status.ports[0]");
  bad = object;
  bad["status"]["ports"][0]["hostPort"] = "8080";
  refused_naming(bad, "status.ports[0].hostPort");
  bad = object;
  bad["status"]["ready"] = "true";
  refused_naming(bad, "status.ready");
}

TEST(KubernetesStateObjects, UsageLivesInItsOwnConfigMap) {
  fleet::UsageRecord usage{"c-0123456789abcdef", "team-a",     "5e1f00aa", 4,
                           1763900001456,        1763900009789};
  Json object = UsageConfigMap(usage, "tessera-system");
  // One per run: the container and its start.
  EXPECT_EQ(object["metadata"]["name"], "tessera-usage-c-0123456789abcdef-1763900001456");
  EXPECT_EQ(object["metadata"]["labels"][kUsageLabel], "container");
  EXPECT_FALSE(object["metadata"]["labels"].contains(kManagedBy));
  auto back = UsageRecordOf(Json::parse(object.dump()));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, usage);
  for (const char* gpus : {"0", "9", "12", "-1", ""}) {
    Json bad = object;
    bad["data"]["gpus"] = gpus;
    EXPECT_FALSE(UsageRecordOf(bad).ok()) << gpus;
  }
  for (const char* gpus : {"0.0", "8.5", "1e3", "0x2", "1.5x", "nan", "inf", "-0.5", " 1"}) {
    Json bad = object;
    bad["data"]["gpus"] = gpus;
    EXPECT_FALSE(UsageRecordOf(bad).ok()) << gpus;
  }
  Json backwards = object;
  backwards["data"]["finished"] = "2025-11-23T12:13:20.000Z";
  EXPECT_FALSE(UsageRecordOf(backwards).ok());
}

// What the run was measured to use (the node agent's status.measured at its end) rides in the same
// ConfigMap, as exact decimal text; an entry that is no number not below 0 is refused, and a run
// nobody measured carries none and loads as unmeasured.
TEST(KubernetesStateObjects, MeasuredUseRidesInTheRunsUsageConfigMap) {
  fleet::UsageRecord usage{"c-0123456789abcdef", "team-a",     "5e1f00aa", 2,
                           1763900001456,        1763900009789};
  usage.measured = fleet::MeasuredUsage{7.5, 0.1, 1234.5678};
  usage.gpu_model = "NVIDIA H100 80GB HBM3";
  usage.mode = "gpu";
  Json object = UsageConfigMap(usage, "tessera-system");
  EXPECT_EQ(object["data"]["smSeconds"], "7.5");
  EXPECT_EQ(object["data"]["memoryGibSeconds"], "0.1");
  auto back = UsageRecordOf(Json::parse(object.dump()));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, usage);  // exactly
  for (const char* bad_value : {"-1", "nan", "inf", "1e400", "x", "0x10", " 1"}) {
    Json bad = object;
    bad["data"]["energyJoules"] = bad_value;
    auto refused = UsageRecordOf(bad);
    ASSERT_FALSE(refused.ok()) << bad_value;
    EXPECT_NE(refused.error().message.find("energyJoules"), std::string::npos);
  }
  fleet::UsageRecord unmeasured = usage;
  unmeasured.measured.reset();
  Json plain = UsageConfigMap(unmeasured, "tessera-system");
  EXPECT_FALSE(plain["data"].contains("smSeconds"));
  auto plain_back = UsageRecordOf(Json::parse(plain.dump()));
  ASSERT_TRUE(plain_back.ok());
  EXPECT_FALSE(plain_back->measured);
}

TEST(KubernetesStateObjects, MigUsageKeepsItsShareOfTheGpu) {
  fleet::UsageRecord usage{"c-0123456789abcdef", "team-a",     "5e1f00aa", 3.0 / 7.0,
                           1763900001456,        1763900009789};
  Json object = UsageConfigMap(usage, "tessera-system");
  EXPECT_EQ(object["data"]["gpus"], "0.42857142857142855");
  auto back = UsageRecordOf(Json::parse(object.dump()));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, usage);  // exactly
}

TEST(KubernetesStateObjects, IdempotentIdsArePerIncarnationAndKey) {
  const std::string id = IdempotentContainerId("uid-1", "key");
  EXPECT_EQ(id, IdempotentContainerId("uid-1", "key"));
  EXPECT_NE(id, IdempotentContainerId("uid-2", "key"));
  EXPECT_NE(id, IdempotentContainerId("uid-1", "key2"));
  ASSERT_EQ(id.size(), 18u);
  EXPECT_EQ(id.substr(0, 2), "c-");
}

TEST(KubernetesStateObjects, RefusesObjectsItDoesNotWrite) {
  Json object = GpuContainerObject(Sample());
  Json bad = object;
  bad["spec"]["gpus"] = 99;
  auto refused = ContainerRecordOf(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("spec.gpus"), std::string::npos);
  bad = object;
  bad["spec"]["tenancy"] = "../../etc";
  EXPECT_FALSE(ContainerRecordOf(bad).ok());
  bad = object;
  bad["status"]["state"] = "exploded";
  EXPECT_FALSE(ContainerRecordOf(bad).ok());
  bad = object;
  bad["spec"]["image"] = std::string(100000, 'a');
  refused = ContainerRecordOf(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_LT(refused.error().message.size(), 200u);  // the value is not echoed
  bad = object;
  bad["spec"]["command"] = Json::array();
  for (int i = 0; i < 1000; ++i)
    bad["spec"]["command"].push_back("x");
  EXPECT_FALSE(ContainerRecordOf(bad).ok());
  EXPECT_FALSE(ContainerRecordOf(Json::array()).ok());
  EXPECT_FALSE(ContainerRecordOf(Json{{"spec", 1}}).ok());
}

TEST(KubernetesStateObjects, TokensAndTheAdminHashLiveInSecrets) {
  fleet::TokenRecord token{"t-0a1b2c3d", fleet::Sha256Hex("tsr_secret"), "team-a", 1763900000123,
                           "5e1f00aa"};
  Json secret = TokenSecret(token, "tessera-system");
  EXPECT_EQ(secret["kind"], "Secret");
  EXPECT_EQ(secret["metadata"]["namespace"], "tessera-system");
  EXPECT_EQ(secret["metadata"]["name"], "tessera-token-0a1b2c3d");
  // Only the hash is stored, never the secret.
  EXPECT_EQ(secret.dump().find("tsr_secret"), std::string::npos);
  auto back = TokenRecordOf(Json::parse(secret.dump()));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, token);
  Json bad = secret;
  bad["data"]["sha256"] = "!!!";
  EXPECT_FALSE(TokenRecordOf(bad).ok());
  EXPECT_EQ(TokenIdOfSecretName(secret["metadata"]["name"]), token.id);

  // Scope and expiry travel in the Secret; one written before they existed is a tenancy token
  // that never expires; the admin scope is never a Secret of this kind.
  fleet::TokenRecord reader = token;
  reader.scope = fleet::TokenScope::kReadOnly;
  reader.expires_ms = 1763900600000;
  back = TokenRecordOf(Json::parse(TokenSecret(reader, "tessera-system").dump()));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, reader);
  Json old = TokenSecret(reader, "tessera-system");
  old["data"].erase("scope");
  old["data"].erase("expires");
  back = TokenRecordOf(old);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->scope, fleet::TokenScope::kTenant);
  EXPECT_EQ(back->expires_ms, 0);
  Json admin_scope = TokenSecret(reader, "tessera-system");
  admin_scope["data"]["scope"] = "YWRtaW4=";  // "admin"
  EXPECT_FALSE(TokenRecordOf(admin_scope).ok());

  const std::string hash = fleet::Sha256Hex("admin");
  auto admin = AdminTokenHashOf(AdminTokenSecret(hash, "tessera-system"));
  ASSERT_TRUE(admin.ok());
  EXPECT_EQ(*admin, hash);
  EXPECT_FALSE(AdminTokenHashOf(Json{{"data", {{"sha256", "YWJj"}}}}).ok());
}

TEST(AuditObjects, ARecordSurvivesItsConfigMapAndHostileOnesAreRefused) {
  fleet::AuditRecord record{
      1763900000123, "t-0011aabb", "tenant", "container.create", "container", "c-0123456789abcdef",
      "team-a",      "ok",         "r-1",    "replayed"};
  const int64_t seq = AuditSeqOf(record);
  EXPECT_EQ(seq / kAuditSeqPerMs, record.time_ms);
  EXPECT_EQ(AuditSeqOf(record), seq) << "the same record has the same name";
  EXPECT_NE(AuditSeqOf(record, 1), seq);
  Json object = AuditConfigMap(record, seq, "tessera-system");
  EXPECT_EQ(object["metadata"]["name"], "tessera-audit-" + std::to_string(seq));
  EXPECT_EQ(AuditSeqOfName(object["metadata"]["name"].get<std::string>()), seq);
  auto entry = AuditEntryOf(object);
  ASSERT_TRUE(entry.ok()) << entry.error().message;
  EXPECT_EQ(entry->seq, seq);
  EXPECT_EQ(entry->record, record);
  // Earlier records sort first by name.
  fleet::AuditRecord earlier = record;
  earlier.time_ms -= 1;
  EXPECT_LT(AuditConfigMapName(AuditSeqOf(earlier)), AuditConfigMapName(seq));

  EXPECT_EQ(AuditLabelValue("team-a"), "team-a");
  for (std::string odd : {std::string(64, 'a'), std::string("a/b"), std::string("-a"),
                          std::string("a\n"), std::string("x.")}) {
    const std::string value = AuditLabelValue(odd);
    EXPECT_TRUE(value.starts_with("h-") && value.size() == 42) << value;
  }

  Json bad = object;
  bad["data"]["detail"] = std::string(fleet::kMaxAuditDetail + 1, 'd');
  EXPECT_NE(AuditEntryOf(bad).error().message.find("data.detail"), std::string::npos);
  bad = object;
  bad["data"]["time"] = "12x";
  EXPECT_NE(AuditEntryOf(bad).error().message.find("data.time"), std::string::npos);
  bad = object;
  bad["data"]["token"] = Json::array();
  EXPECT_NE(AuditEntryOf(bad).error().message.find("data.token"), std::string::npos);
  bad = object;
  bad["metadata"]["name"] = "tessera-audit-12";
  EXPECT_FALSE(AuditEntryOf(bad).ok());
  EXPECT_FALSE(AuditSeqOfName("tessera-audit-00000000000000000-1").has_value());
}

}  // namespace
}  // namespace tessera::k8s
