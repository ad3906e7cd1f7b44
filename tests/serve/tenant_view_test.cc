// What a tenant sees of the GPUs through a real tessera-serve with real podman containers and the
// stand-in NVML: two tenancies each hold one GPU; each one's /v1/telemetry lists its own GPU
// only (no other UUID, no unattributed processes), its /v1/dashboard carries figures only for
// its own GPU (the others by lease state alone), and /v1/gpus names no other GPU's UUID; the
// admin sees all eight with their figures.
#include <gtest/gtest.h>

#include <set>

#include "serve/container_wait.h"
#include "serve/podman_serve_fixture.h"
#include "support/fake_nvml_state.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

class TenantView : public PodmanServeTest {
 protected:
  TenantView() : PodmanServeTest("tview") {}

  // A one-GPU container of `tenancy` that sleeps; returns the GPU it holds.
  std::string RunOn(const std::string& tenancy) {
    json body = {{"image", image_},
                 {"tenancy", tenancy},
                 {"gpus", 1},
                 {"command", {"/bin/sh", "-c", "exec sleep 300"}}};
    int status = 0;
    auto submitted = CallJson(*admin_, "POST", "/v1/containers", body.dump(), &status);
    EXPECT_EQ(status, 202) << submitted;
    if (status != 202) return "";
    auto running = WaitForContainerState(*admin_, *serve_, submitted["id"], {"running"});
    return running["gpus"].size() == 1 ? running["gpus"][0].get<std::string>() : "";
  }
};

TEST_F(TenantView, ATenantSeesOnlyItsOwnGpusFiguresAndUuids) {
  FakeNvmlState state("");
  FakeNvmlScenario scenario;
  std::string devices;
  for (size_t i = 0; i < gpus_.size(); ++i)
    devices += "device " + gpus_[i] + " util=" + std::to_string(10 + i) +
               " memory_used=1073741824 memory_total=85899345920 power_mw=100000 temp=40 "
               "energy_mj=1000\n";
  scenario.Write(devices);
  StartServe(
      {"--nvml", FAKE_NVML, "--telemetry-interval", "300ms", "--telemetry-proc-dir", "/proc"});
  const std::string alpha_token = TenancyToken(*admin_, "alpha");
  const std::string beta_token = TenancyToken(*admin_, "beta");
  ASSERT_FALSE(alpha_token.empty());
  ASSERT_FALSE(beta_token.empty());
  const std::string alpha_gpu = RunOn("alpha");
  const std::string beta_gpu = RunOn("beta");
  ASSERT_FALSE(alpha_gpu.empty());
  ASSERT_FALSE(beta_gpu.empty());
  ASSERT_NE(alpha_gpu, beta_gpu);

  // A telemetry pass after both started: each tenant's view has its GPU, the admin's all eight.
  json everything;
  ASSERT_TRUE(WaitUntil([&] {
    everything = CallJson(*admin_, "GET", "/v1/telemetry");
    if (!everything.is_object() || everything["gpus"].size() != gpus_.size()) return false;
    for (const auto& token : {alpha_token, beta_token})
      if (CallJson(*serve_->Connect(token), "GET", "/v1/telemetry")["gpus"].size() != 1)
        return false;
    return true;
  })) << everything.dump().substr(0, 2000)
      << serve_->log();
  std::map<std::string, std::string> uuid_of;
  for (const auto& gpu : everything["gpus"])
    uuid_of[gpu["pci_address"]] = gpu.value("uuid", "");

  for (const auto& [token, own, other] : {std::tuple{alpha_token, alpha_gpu, beta_gpu},
                                          std::tuple{beta_token, beta_gpu, alpha_gpu}}) {
    auto tenant = serve_->Connect(token);
    auto telemetry = CallJson(*tenant, "GET", "/v1/telemetry");
    ASSERT_EQ(telemetry["gpus"].size(), 1u) << telemetry;
    EXPECT_EQ(telemetry["gpus"][0]["pci_address"], own);
    const std::string text = telemetry.dump();
    for (const auto& [pci, uuid] : uuid_of) {
      if (pci == own) continue;
      EXPECT_EQ(text.find(pci), std::string::npos) << pci << " in " << text.substr(0, 400);
      if (!uuid.empty()) EXPECT_EQ(text.find(uuid), std::string::npos) << uuid;
    }

    auto dashboard = CallJson(*tenant, "GET", "/v1/dashboard");
    ASSERT_EQ(dashboard["gpus"].size(), gpus_.size()) << dashboard;
    for (const auto& gpu : dashboard["gpus"]) {
      const bool mine = gpu["pci_address"] == own;
      EXPECT_EQ(gpu["util_percent"].is_null(), !mine) << gpu;
      EXPECT_EQ(gpu["power_watts"].is_null(), !mine) << gpu;
      if (gpu["pci_address"] == other) EXPECT_EQ(gpu.value("tenancy", ""), "") << gpu;
    }
    // Global counts only: every GPU by lease state.
    EXPECT_EQ(dashboard["counts"]["gpus"]["active"], 2) << dashboard["counts"];

    auto listed = CallJson(*tenant, "GET", "/v1/gpus");
    ASSERT_EQ(listed["gpus"].size(), gpus_.size());
    for (const auto& gpu : listed["gpus"]) {
      const bool mine = gpu["pci_address"] == own;
      EXPECT_EQ(gpu.value("cdi_device", "").empty(), !mine) << gpu;
    }
  }

  // The admin's dashboard has every GPU's figures.
  auto dashboard = CallJson(*admin_, "GET", "/v1/dashboard");
  for (const auto& gpu : dashboard["gpus"])
    EXPECT_FALSE(gpu["util_percent"].is_null()) << gpu;
}

}  // namespace
}  // namespace tessera::testing
