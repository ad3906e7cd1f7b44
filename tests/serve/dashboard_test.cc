// The dashboard in real headless Chromium, driven over the DevTools protocol: one page load,
// then the page must follow a real podman container through the API on its own (its refresh
// timer), with the admin token on every request and no script errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>

#include "serve/container_wait.h"
#include "serve/serve_process.h"
#include "support/cdp_client.h"
#include "support/podman_harness.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// What the page shows, read from its DOM (the data-* attributes the dashboard sets).
constexpr const char* kReadPage = R"js((() => {
  const grid = [...document.querySelectorAll('#grid .gpu')].map(c => ({
    pci: c.dataset.pci || '', state: c.dataset.state || '', tenancy: c.dataset.tenancy || '',
    container: c.dataset.container || ''}));
  const containers = [...document.querySelectorAll('#containers tr')].map(r => ({
    id: r.dataset.id || '', state: r.dataset.state || '', tenancy: r.dataset.tenancy || '',
    gpus: r.dataset.gpus || ''}));
  const tenancies = [...document.querySelectorAll('#tenancies tr')].map(r => ({
    name: r.dataset.tenancy || '', weight: Number(r.dataset.weight), share: Number(r.dataset.share)}));
  const status = document.getElementById('status');
  return {status: status ? status.textContent : '', grid, containers, tenancies,
          errors: window.__dashboardErrors || []};
})())js";

// Installed before the page's own script: errors the page did not catch, counted in the page.
constexpr const char* kErrorCounter = R"js(
window.__dashboardErrors = [];
window.addEventListener('error', e => window.__dashboardErrors.push(String(e.message)));
window.addEventListener('unhandledrejection',
                        e => window.__dashboardErrors.push('unhandled rejection: ' + e.reason));
)js";

struct Page {
  json doc;

  int Cards(const std::string& state, const std::string& tenancy) const {
    int n = 0;
    for (const auto& card : Grid())
      n += card.value("state", "") == state && card.value("tenancy", "") == tenancy;
    return n;
  }
  std::set<std::string> CardsOf(const std::string& container) const {
    std::set<std::string> out;
    for (const auto& card : Grid())
      if (card.value("container", "") == container) out.insert(card.value("pci", ""));
    return out;
  }
  json Row(const std::string& id) const {
    for (const auto& row : Containers())
      if (row.value("id", "") == id) return row;
    return json::object();
  }
  json Grid() const { return doc.is_object() ? doc.value("grid", json::array()) : json::array(); }
  json Tenancy(const std::string& name) const {
    if (doc.is_object())
      for (const auto& row : doc.value("tenancies", json::array()))
        if (row.value("name", "") == name) return row;
    return json::object();
  }
  json Containers() const {
    return doc.is_object() ? doc.value("containers", json::array()) : json::array();
  }
  json Errors() const {
    return doc.is_object() ? doc.value("errors", json::array()) : json::array();
  }
  std::string Status() const { return doc.is_object() ? doc.value("status", "") : ""; }
  bool Updated() const { return Status().rfind("updated ", 0) == 0; }
};

class DashboardInChromium : public ::testing::Test {
 protected:
  void SetUp() override {
    const Podman& podman = Podman::Get();
    ASSERT_TRUE(podman.ready()) << podman.setup_error();
    image_ = podman.image();
    kind_ = UniqueTestKind("gpu");
    instance_ = "dash-" + std::to_string(::getpid()) + "-" + kind_.substr(kind_.rfind('-') + 1);
    ASSERT_EQ(WriteGpuRoms(host_.root()).size(), 8u);
    serve_ = std::make_unique<ServeProcess>(
        dir_.path(), std::vector<std::string>{"--root", host_.root(), "--cdi-kind", kind_,
                                              "--instance", instance_, "--stop-grace-s", "1"});
    std::string log;
    ASSERT_TRUE(serve_->Start(&log)) << log;
    token_ = serve_->admin_token();
    admin_ = serve_->Connect(token_);
  }

  void TearDown() override {
    page_.reset();
    chromium_.reset();
    serve_.reset();
    RemoveInstanceContainers(instance_);
    RemoveSpecsOfKind(kind_);
  }

  // Starts Chromium and opens the dashboard once, with the token in the URL fragment.
  void OpenDashboard() {
    chromium_ = std::make_unique<HeadlessChromium>();
    auto started = chromium_->Start();
    ASSERT_TRUE(started) << started.error().message;
    auto url = chromium_->PageWebSocketUrl();
    ASSERT_TRUE(url) << url.error().message << "\n" << chromium_->Log();
    auto session = CdpSession::Connect(*url);
    ASSERT_TRUE(session) << session.error().message;
    page_ = std::move(*session);
    for (const char* domain : {"Page.enable", "Runtime.enable", "Network.enable"}) {
      auto enabled = page_->Call(domain);
      ASSERT_TRUE(enabled) << enabled.error().message;
    }
    auto counter =
        page_->Call("Page.addScriptToEvaluateOnNewDocument", {{"source", kErrorCounter}});
    ASSERT_TRUE(counter) << counter.error().message;
    auto navigated = page_->Call(
        "Page.navigate",
        {{"url", "http://127.0.0.1:" + std::to_string(serve_->port()) + "/#token=" + token_}});
    ASSERT_TRUE(navigated) << navigated.error().message;
    ASSERT_FALSE(navigated->contains("errorText")) << *navigated;
  }

  // Reads the page until `wanted` holds; the last reading either way.
  Page WaitForPage(const std::string& what, const std::function<bool(const Page&)>& wanted,
                   std::chrono::seconds timeout = std::chrono::seconds(60)) {
    auto deadline = Clock::now() + timeout;
    Page page;
    std::string error;
    while (Clock::now() < deadline) {
      auto read = page_->Evaluate(kReadPage);
      if (read) {
        page.doc = *read;
        if (page.doc.is_object() && wanted(page)) return page;
      } else {
        error = read.error().message;
      }
      page_->Pump(std::chrono::milliseconds(200));
    }
    ADD_FAILURE() << "the page never showed " << what << "; last reading: " << page.doc.dump(1)
                  << "\n"
                  << error << "\nAPI: " << CallJson(*admin_, "GET", "/v1/gpus").dump()
                  << "\nservice log:\n"
                  << serve_->log();
    return page;
  }

  json WaitForContainer(const std::string& id, const std::set<std::string>& states) {
    return WaitForContainerState(*admin_, *serve_, id, states);
  }

  // /v1/ requests the page sent so far (Network.requestWillBeSent), by request id.
  std::map<std::string, json> ApiRequests() const {
    std::map<std::string, json> out;
    for (const auto& event : page_->Events("Network.requestWillBeSent")) {
      const json& request = event["params"]["request"];
      if (request.value("url", "").find("/v1/") != std::string::npos)
        out[event["params"]["requestId"]] = request;
    }
    return out;
  }

  // Requests to `path`, whatever their query.
  int ApiRequestsTo(const std::string& path) const {
    int n = 0;
    for (const auto& [id, request] : ApiRequests()) {
      std::string url = request["url"];
      url = url.substr(url.find("/v1/"));
      n += url.substr(0, url.find('?')) == path;
    }
    return n;
  }

  TempHost host_{"hgx-h100-dgx"};
  TempDir dir_;
  std::string image_, kind_, instance_, token_;
  std::unique_ptr<ServeProcess> serve_;
  std::unique_ptr<client::Connection> admin_;
  std::unique_ptr<HeadlessChromium> chromium_;
  std::unique_ptr<CdpSession> page_;
};

TEST_F(DashboardInChromium, OnePageFollowsAContainerTakingAndReturningGpusWithoutReloading) {
  const std::string tenant = "dash-team";
  OpenDashboard();
  if (HasFatalFailure()) return;

  // The first reading: eight free GPUs, nobody's, no containers.
  Page before = WaitForPage("eight free GPUs", [](const Page& page) {
    return page.Updated() && page.Grid().size() == 8u && page.Cards("free", "") == 8;
  });
  ASSERT_EQ(before.Cards("free", ""), 8) << before.doc.dump(1);
  EXPECT_EQ(before.Containers().size(), 0u) << before.doc.dump(1);
  EXPECT_NE(before.Status().find("8 GPUs"), std::string::npos) << before.Status();
  const int gpu_polls_before = ApiRequestsTo("/v1/gpus");

  // A real container takes two GPUs; the same page, not reloaded, has to show it, and its
  // tenancy's share of the GPUs next to its weight.
  int status = 0;
  CallJson(*admin_, "PUT", "/v1/tenancies/" + tenant, R"({"weight":3})", &status);
  ASSERT_EQ(status, 200);
  json body = {{"image", image_}, {"tenancy", tenant}, {"gpus", 2}, {"command", {"sleep", "300"}}};
  auto submitted = CallJson(*admin_, "POST", "/v1/containers", body.dump(), &status);
  ASSERT_EQ(status, 202) << submitted;
  const std::string id = submitted["id"];
  Page running = WaitForPage(
      "two GPUs active for " + tenant + " and the container running", [&](const Page& page) {
        return page.Cards("active", tenant) == 2 && page.Row(id).value("state", "") == "running" &&
               page.Tenancy(tenant).value("share", 0.0) > 0;
      });
  // The only tenancy with GPUs in use has all of the recent usage.
  EXPECT_EQ(running.Tenancy(tenant).value("weight", 0.0), 3.0) << running.doc.dump(1);
  EXPECT_EQ(running.Tenancy(tenant).value("share", 0.0), 1.0) << running.doc.dump(1);
  ASSERT_EQ(running.Cards("active", tenant), 2) << running.doc.dump(1);
  EXPECT_EQ(running.Cards("free", ""), 6) << running.doc.dump(1);
  auto api = WaitForContainer(id, {"running"});
  std::set<std::string> held(api["gpus"].begin(), api["gpus"].end());
  EXPECT_EQ(held.size(), 2u) << api;
  // The grid's two cards are the very GPUs the API says the container holds.
  EXPECT_EQ(running.CardsOf(id), held) << running.doc.dump(1);
  json row = running.Row(id);
  EXPECT_EQ(row.value("tenancy", ""), tenant) << row;
  std::set<std::string> row_gpus;
  std::istringstream words(row.value("gpus", ""));
  for (std::string gpu; words >> gpu;)
    row_gpus.insert(gpu);
  EXPECT_EQ(row_gpus, held) << row;

  // Deleting the container gives the GPUs back: the page shows them go through release and
  // the check to free, and the container end.
  CallJson(*admin_, "DELETE", "/v1/containers/" + id, "", &status);
  EXPECT_LT(status, 300);
  Page after = WaitForPage("the GPUs free again and the container ended", [&](const Page& page) {
    std::string state = page.Row(id).value("state", "");
    return page.Cards("free", "") == 8 && (state == "exited" || state == "failed");
  });
  EXPECT_TRUE(after.CardsOf(id).empty()) << after.doc.dump(1);
  EXPECT_TRUE(after.Updated()) << after.Status();

  // One document load: everything after it came from the page's own refresh timer.
  int documents = 0;
  for (const auto& event : page_->Events("Network.requestWillBeSent"))
    documents += event["params"].value("type", "") == "Document";
  EXPECT_EQ(documents, 1);
  EXPECT_EQ(page_->Events("Page.loadEventFired").size(), 1u);
  EXPECT_GT(ApiRequestsTo("/v1/gpus"), gpu_polls_before + 1);
  EXPECT_GT(ApiRequestsTo("/v1/containers"), 2);

  // Every API request carried the admin token and was answered 200.
  std::map<std::string, int> answered;
  for (const auto& event : page_->Events("Network.responseReceived"))
    answered[event["params"]["requestId"]] = event["params"]["response"].value("status", 0);
  auto requests = ApiRequests();
  ASSERT_FALSE(requests.empty());
  for (const auto& [request_id, request] : requests) {
    std::string authorization;
    for (const auto& [name, value] : request["headers"].items()) {
      std::string lower = name;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      if (lower == "authorization") authorization = value;
    }
    EXPECT_EQ(authorization, "Bearer " + token_) << request["url"];
    if (answered.count(request_id)) {
      EXPECT_EQ(answered[request_id], 200) << request["url"];
    }
  }
  EXPECT_GT(answered.size(), 0u);

  // No script error, as the DevTools protocol saw it and as the page counted it.
  for (const auto& event : page_->Events("Runtime.exceptionThrown"))
    ADD_FAILURE() << "page exception: " << event["params"]["exceptionDetails"].dump(1);
  EXPECT_EQ(after.Errors(), json::array());
}

}  // namespace
}  // namespace tessera::testing
