// A GPU's health through the API, in process (a real Service on a SQLite store, null backend, and
// the Router): GET /v1/gpus/{id} with its fault history, the listing and the dashboard with the
// latest fault only, a tenant's view without other tenancies' names, and the fault series in
// /metrics. The GPU's health is handed in with the host's GPUs, as a record the service keeps.
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>

#include "api/router.h"
#include "backends/local/local.h"
#include "fleet/fleet.h"
#include "serve/service.h"
#include "support/fixture_host.h"

namespace tessera::serve {
namespace {

using nlohmann::json;

constexpr char kAdminToken[] = "health-admin-token-0123456789abcdef";
constexpr char kAlphaToken[] = "health-alpha-token-0123456789abcdef";
constexpr char kFaulted[] = "0000:9d:00.0";
constexpr char kHealthy[] = "0000:18:00.0";

fleet::Tenancy MakeTenancy(const std::string& name, const std::string& uid) {
  fleet::Tenancy tenancy;
  tenancy.name = name;
  tenancy.uid = uid;
  tenancy.created_ms = fleet::NowMs();
  return tenancy;
}

health::FaultEntry Entry(int64_t at_ms, uint64_t xid, const std::string& fault_class,
                         const std::string& action, const std::string& reason) {
  health::FaultEntry entry;
  entry.at_ms = at_ms;
  entry.signal = "xid";
  entry.xid = xid;
  entry.fault_class = fault_class;
  entry.action = action;
  entry.reason = reason;
  return entry;
}

// One GPU taken out by Xid 79 after an application fault of tenancy beta, resetting now.
fleet::GpuRecord FaultedGpu() {
  fleet::GpuRecord gpu;
  gpu.pci_address = kFaulted;
  gpu.index = 1;
  gpu.model = "NVIDIA H100 80GB HBM3";
  gpu.health.step = health::RecoveryStep::kResetting;
  gpu.health.reason = "gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:9d:00.0";
  gpu.health.attempts = 1;
  gpu.health.step_since_ms = 1700000002000;
  gpu.health.faulted_ms = 1700000001000;
  gpu.health.history = {Entry(1700000000000, 13, "application", "notify",
                              "gpu-fault: Xid 13 (graphics engine exception) in beta's container"),
                        Entry(1700000001000, 79, "gpu", "stop-gpu", gpu.health.reason)};
  return gpu;
}

class GpuHealthApi : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = fleet::OpenSqliteStore(fleet::StoreOptions{dir_.path() + "/store.db"});
    ASSERT_TRUE(store.ok()) << store.error().message;
    auto alpha = MakeTenancy("alpha", "u-00000000000000a1");
    fleet::TokenRecord token;
    token.id = "t-000000a1";
    token.sha256 = fleet::Sha256Hex(kAlphaToken);
    token.tenancy = alpha.name;
    token.tenancy_uid = alpha.uid;
    token.created_ms = alpha.created_ms;
    ASSERT_TRUE(
        (*store)->CommitAndWait({alpha, MakeTenancy("beta", "u-00000000000000b2"), token}).ok());
    ServiceOptions options;
    options.data_dir = dir_.path();
    options.lease_file.clear();
    options.rate_limit = {};
    Service::Host host;
    fleet::GpuRecord healthy;
    healthy.pci_address = kHealthy;
    healthy.model = "NVIDIA H100 80GB HBM3";
    host.gpus = {healthy, FaultedGpu()};
    auto service = Service::Create(std::move(options), std::move(host), std::move(*store),
                                   backends::CreateNullBackend());
    ASSERT_TRUE(service.ok()) << service.error().message;
    service_ = std::move(*service);
    service_->SetAdminTokenHash(fleet::Sha256Hex(kAdminToken));
    router_ = std::make_unique<api::Router>(service_.get());
  }

  api::Response Get(const std::string& target, const std::string& token) {
    api::Request request{api::http::verb::get, target, 11};
    request.set(api::http::field::host, "localhost");
    request.set(api::http::field::authorization, "Bearer " + token);
    std::promise<api::Response> answered;
    router_->HandleRequest(std::move(request), [&answered](api::Response response) {
      answered.set_value(std::move(response));
    });
    return answered.get_future().get();
  }

  json GetJson(const std::string& target, const std::string& token, int* status) {
    auto response = Get(target, token);
    *status = static_cast<int>(response.result_int());
    return json::parse(response.body(), nullptr, false);
  }

  testing::TempDir dir_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<api::Router> router_;
};

TEST_F(GpuHealthApi, OneGpuShowsItsStepReasonAndWholeHistory) {
  int status = 0;
  json gpu = GetJson(std::string("/v1/gpus/") + kFaulted, kAdminToken, &status);
  ASSERT_EQ(status, 200) << gpu;
  EXPECT_EQ(gpu["id"], kFaulted);
  const json& health = gpu["health"];
  EXPECT_EQ(health["step"], "resetting");
  EXPECT_EQ(health["reason"], "gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:9d:00.0");
  EXPECT_EQ(health["attempts"], 1);
  EXPECT_EQ(health["faulted_ms"], 1700000001000);
  EXPECT_EQ(health["step_since_ms"], 1700000002000);
  ASSERT_EQ(health["history"].size(), 2u) << health;
  EXPECT_EQ(health["fault_count"], 2);
  EXPECT_EQ(health["history"][0]["xid"], 13);
  EXPECT_EQ(health["history"][0]["class"], "application");
  EXPECT_EQ(health["history"][0]["action"], "notify");
  EXPECT_EQ(health["history"][0]["signal"], "xid");
  EXPECT_EQ(health["history"][0]["at_ms"], 1700000000000);
  EXPECT_NE(health["history"][0]["reason"].get<std::string>().find("beta"), std::string::npos);
  EXPECT_EQ(health["history"][1]["xid"], 79);
  EXPECT_EQ(health["history"][1]["class"], "gpu");
  EXPECT_EQ(health["last_fault"], health["history"][1]);

  json healthy = GetJson(std::string("/v1/gpus/") + kHealthy, kAdminToken, &status);
  ASSERT_EQ(status, 200) << healthy;
  EXPECT_EQ(healthy["health"]["step"], "healthy");
  EXPECT_EQ(healthy["health"]["reason"], "");
  EXPECT_TRUE(healthy["health"]["faulted_ms"].is_null());
  EXPECT_TRUE(healthy["health"]["last_fault"].is_null());
  EXPECT_EQ(healthy["health"]["history"], json::array());
  EXPECT_EQ(healthy["health"]["fault_count"], 0);
}

TEST_F(GpuHealthApi, AnUnknownGpuIs404AndOtherMethodsAre405) {
  int status = 0;
  json answer = GetJson("/v1/gpus/0000:ff:00.0", kAdminToken, &status);
  EXPECT_EQ(status, 404) << answer;
  EXPECT_EQ(answer["error"]["code"], "not_found") << answer;
  api::Request request{api::http::verb::delete_, std::string("/v1/gpus/") + kFaulted, 11};
  request.set(api::http::field::authorization, std::string("Bearer ") + kAdminToken);
  std::promise<api::Response> answered;
  router_->HandleRequest(std::move(request), [&answered](api::Response response) {
    answered.set_value(std::move(response));
  });
  EXPECT_EQ(static_cast<int>(answered.get_future().get().result_int()), 405);
}

TEST_F(GpuHealthApi, AnUnknownGpuIdIsNotEchoedWhole) {
  const std::string id = "0000:ff:00.0" + std::string(3000, 'x');
  const auto response = Get("/v1/gpus/" + id, kAdminToken);
  EXPECT_EQ(static_cast<int>(response.result_int()), 404);
  EXPECT_EQ(response.body().find(std::string(200, 'x')), std::string::npos);
  EXPECT_LT(response.body().size(), 1000u) << response.body().substr(0, 200);
}

TEST_F(GpuHealthApi, ATenantSeesTheHistoryWithoutOtherTenanciesNames) {
  int status = 0;
  json gpu = GetJson(std::string("/v1/gpus/") + kFaulted, kAlphaToken, &status);
  ASSERT_EQ(status, 200) << gpu;
  const json& history = gpu["health"]["history"];
  ASSERT_EQ(history.size(), 2u) << gpu;
  EXPECT_EQ(history[0]["reason"],
            "gpu-fault: Xid 13 (graphics engine exception) in (another tenancy)'s container");
  EXPECT_EQ(history[1]["reason"], "gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:9d:00.0");
  EXPECT_EQ(gpu["health"]["step"], "resetting");
  EXPECT_EQ(gpu.dump().find("beta"), std::string::npos) << gpu;
  EXPECT_FALSE(gpu.contains("firmware_baseline"));
}

TEST_F(GpuHealthApi, TheListingAndTheDashboardCarryTheLatestFaultOnly) {
  int status = 0;
  json list = GetJson("/v1/gpus", kAlphaToken, &status);
  ASSERT_EQ(status, 200) << list;
  bool seen = false;
  for (const auto& gpu : list["gpus"]) {
    if (gpu["id"] != kFaulted) continue;
    seen = true;
    EXPECT_EQ(gpu["health"]["step"], "resetting");
    EXPECT_EQ(gpu["health"]["last_fault"]["xid"], 79);
    EXPECT_FALSE(gpu["health"].contains("history"));
  }
  EXPECT_TRUE(seen) << list;
  json dashboard = GetJson("/v1/dashboard", kAdminToken, &status);
  ASSERT_EQ(status, 200) << dashboard;
  seen = false;
  for (const auto& gpu : dashboard["gpus"]) {
    if (gpu["id"] != kFaulted) continue;
    seen = true;
    EXPECT_EQ(gpu["health"]["step"], "resetting");
    EXPECT_EQ(gpu["health"]["last_fault"]["class"], "gpu");
  }
  EXPECT_TRUE(seen) << dashboard;
}

TEST_F(GpuHealthApi, MetricsRenderTheServicesFaultSeries) {
  service_->fault_metrics().Fault(kFaulted, 79, "stop-gpu");
  service_->fault_metrics().Recovered(kFaulted, 42);
  auto response = Get("/metrics", kAdminToken);
  ASSERT_EQ(static_cast<int>(response.result_int()), 200);
  const std::string body = response.body();
  EXPECT_NE(
      body.find(
          "tessera_gpu_faults_total{gpu=\"0000:9d:00.0\",xid=\"79\",action=\"stop-gpu\"} 1\n"),
      std::string::npos)
      << body;
  EXPECT_NE(body.find("tessera_gpu_recoveries_total{gpu=\"0000:9d:00.0\"} 1\n"), std::string::npos);
  EXPECT_NE(body.find("tessera_gpu_recovery_seconds_bucket{le=\"60\"} 1\n"), std::string::npos);
}

}  // namespace
}  // namespace tessera::serve
