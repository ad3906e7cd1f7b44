// The dashboard in real headless Chromium, driven over the DevTools protocol, at both sizes it
// is made for:
//  - one host, 8 GPUs: a real podman container whose real processes the stand-in NVML reports,
//    so the page shows its GPUs' utilisation and memory bars, the tenancy on the cards, a
//    quarantined and a draining GPU with their reasons in the card, filters, and the tenancy's
//    usage chart; every poll is one request;
//  - a fleet of 100 nodes x 8 GPUs (tessera serve --backend kubernetes against the scripted API
//    server, nodes publishing an HGX table): a row per node, GPUs in their NVLink partitions.
// Both take a screenshot (PNG, under the build tree's screenshots/) for a person to look at.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>

#include "backends/kubernetes/node_gpus.h"
#include "inventory/inventory.h"
#include "kubernetes/client.h"
#include "kubernetes/fake_apiserver.h"
#include "nodeagent/node_telemetry.h"
#include "serve/container_wait.h"
#include "serve/serve_process.h"
#include "support/cdp_client.h"
#include "support/fake_nvml_state.h"
#include "support/podman_harness.h"
#include "support/wait.h"
#include "topology/topology.h"

namespace tessera::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// What the page shows, read from its DOM (the data-* attributes the dashboard sets) and from
// what is visible (text, bar widths, dimming).
constexpr const char* kReadPage = R"js((() => {
  const cards = [...document.querySelectorAll('#nodes .gpu')].map(c => ({
    id: c.dataset.id || '', state: c.dataset.state || '', tenancy: c.dataset.tenancy || '',
    node: c.dataset.node || '', group: c.parentElement.dataset.label || '',
    reason: c.querySelector('.reason').textContent, reasonVisible: c.querySelector('.reason').offsetHeight > 0,
    tenant: c.querySelector('.tenant').textContent,
    util: parseFloat(c.querySelector('.bar.util > i').style.width) || 0,
    mem: parseFloat(c.querySelector('.bar.mem > i').style.width) || 0,
    dim: c.classList.contains('dim')}));
  const rows = [...document.querySelectorAll('#nodes .node')].map(r => ({
    node: r.dataset.node, hidden: r.classList.contains('hidden'),
    groups: [...r.querySelectorAll('.group')].map(g => g.dataset.label)}));
  const tenancies = [...document.querySelectorAll('#tenancies tr')].map(r => ({
    name: r.dataset.tenancy || '', weight: Number(r.dataset.weight), share: Number(r.dataset.share)}));
  const svg = document.getElementById('chart-svg');
  const status = document.getElementById('status');
  return {status: status ? status.textContent : '', cards, rows, tenancies,
          chart: {buckets: Number(svg.dataset.buckets || 0), gpuSeconds: Number(svg.dataset.gpuSeconds || 0),
                  bars: svg.querySelectorAll('rect').length},
          counts: document.getElementById('counts').textContent,
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
  json Cards() const { return doc.is_object() ? doc.value("cards", json::array()) : json::array(); }
  json Rows() const { return doc.is_object() ? doc.value("rows", json::array()) : json::array(); }
  int Count(const std::function<bool(const json&)>& wanted) const {
    int n = 0;
    for (const auto& card : Cards())
      n += wanted(card);
    return n;
  }
  json Card(const std::string& id) const {
    for (const auto& card : Cards())
      if (card.value("id", "") == id) return card;
    return json::object();
  }
  json Tenancy(const std::string& name) const {
    if (doc.is_object())
      for (const auto& row : doc.value("tenancies", json::array()))
        if (row.value("name", "") == name) return row;
    return json::object();
  }
  json Chart() const {
    return doc.is_object() ? doc.value("chart", json::object()) : json::object();
  }
  json Errors() const {
    return doc.is_object() ? doc.value("errors", json::array()) : json::array();
  }
  // Counts for a failure message (a whole reading of 800 cards is too long to read).
  std::string Summary() const {
    std::map<std::string, int> states;
    int measured = 0, reasons = 0;
    for (const auto& card : Cards()) {
      states[card.value("state", "")]++;
      measured += card.value("util", 0.0) > 0;
      reasons += !card.value("reason", "").empty();
    }
    return "cards " + std::to_string(Cards().size()) + ", rows " + std::to_string(Rows().size()) +
           ", states " + json(states).dump() + ", with a utilisation " + std::to_string(measured) +
           ", with a reason " + std::to_string(reasons) + ", status \"" + Status() + "\"";
  }
  std::string Status() const { return doc.is_object() ? doc.value("status", "") : ""; }
  bool Updated() const { return Status().rfind("updated ", 0) == 0; }
};

int64_t fleet_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string ScreenshotPath(const std::string& name) {
  return std::string(TESSERA_BINARY_DIR) + "/screenshots/" + name + ".png";
}

// One Chromium page on one serve process.
class Browser {
 public:
  void Open(uint16_t port, const std::string& token) {
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
    ASSERT_TRUE(page_->Call(
        "Emulation.setDeviceMetricsOverride",
        {{"width", 1600}, {"height", 1000}, {"deviceScaleFactor", 1}, {"mobile", false}}));
    ASSERT_TRUE(page_->Call("Page.addScriptToEvaluateOnNewDocument", {{"source", kErrorCounter}}));
    auto navigated =
        page_->Call("Page.navigate",
                    {{"url", "http://127.0.0.1:" + std::to_string(port) + "/#token=" + token}});
    ASSERT_TRUE(navigated) << navigated.error().message;
    ASSERT_FALSE(navigated->contains("errorText")) << *navigated;
  }

  // Reads the page until `wanted` holds; the last reading either way.
  Page WaitFor(const std::string& what, const std::function<bool(const Page&)>& wanted,
               const std::function<std::string()>& context) {
    auto deadline = Clock::now() + std::chrono::seconds(90);
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
    std::string last = page.doc.dump(1);
    if (last.size() > 20000) last = page.Summary();
    ADD_FAILURE() << "the page never showed " << what << "; last reading: " << last << "\n"
                  << error << "\n"
                  << context();
    return page;
  }

  void Select(const std::string& id, const std::string& value) {
    auto done =
        page_->Evaluate("(() => { const s = document.getElementById('" + id + "'); s.value = '" +
                        value + "'; s.dispatchEvent(new Event('change')); return s.value; })()");
    ASSERT_TRUE(done) << done.error().message;
    EXPECT_EQ(*done, value);
  }

  void Screenshot(const std::string& name) {
    auto saved = SaveScreenshot(*page_, ScreenshotPath(name), 1600, 1000);
    EXPECT_TRUE(saved) << saved.error().message;
    std::error_code error;
    EXPECT_GT(std::filesystem::file_size(ScreenshotPath(name), error), 10000u);
  }

  // The API requests the page sent (Network.requestWillBeSent), by path without the query.
  std::map<std::string, int> ApiRequests() const {
    std::map<std::string, int> out;
    for (const auto& event : page_->Events("Network.requestWillBeSent")) {
      std::string url = event["params"]["request"].value("url", "");
      auto at = url.find("/v1/");
      if (at == std::string::npos) continue;
      url = url.substr(at);
      out[url.substr(0, url.find('?'))]++;
    }
    return out;
  }

  void ExpectNoScriptErrors(const Page& page) {
    for (const auto& event : page_->Events("Runtime.exceptionThrown"))
      ADD_FAILURE() << "page exception: " << event["params"]["exceptionDetails"].dump(1);
    EXPECT_EQ(page.Errors(), json::array());
    int documents = 0;
    for (const auto& event : page_->Events("Network.requestWillBeSent"))
      documents += event["params"].value("type", "") == "Document";
    EXPECT_EQ(documents, 1);  // one page load; everything after it came from its own polls
  }

  ~Browser() {
    page_.reset();
    chromium_.reset();
  }

 private:
  std::unique_ptr<HeadlessChromium> chromium_;
  std::unique_ptr<CdpSession> page_;
};

// ---------------------------------------------------------------------------------------------
// One host, 8 GPUs, a real container, telemetry from the stand-in NVML.

TEST(DashboardInChromium, OneHostEightGpusWithTelemetryReasonsFiltersAndUsageChart) {
  const Podman& podman = Podman::Get();
  ASSERT_TRUE(podman.ready()) << podman.setup_error();
  TempHost host("hgx-h100-dgx");
  TempDir dir;
  const std::string kind = UniqueTestKind("gpu");
  const std::string instance =
      "dash-" + std::to_string(::getpid()) + "-" + kind.substr(kind.rfind('-') + 1);
  const auto gpus = WriteGpuRoms(host.root());
  ASSERT_EQ(gpus.size(), 8u);
  FakeNvmlState state("");
  FakeNvmlScenario scenario;
  std::string devices;
  for (size_t i = 0; i < gpus.size(); ++i)
    devices += "device " + gpus[i] + " util=" + std::to_string(i == 7 ? 0 : 3 * i) +
               " memory_used=" + std::to_string((i + 1) << 28) +
               " memory_total=85899345920 power_mw=" + std::to_string(70000 + 1000 * i) +
               " temp=40 energy_mj=1000\n";
  scenario.Write(devices);
  ServeProcess serve(
      dir.path(),
      {"--root", host.root(), "--cdi-kind", kind, "--instance", instance, "--stop-grace-s", "1",
       "--nvml", FAKE_NVML, "--telemetry-interval", "300ms", "--telemetry-proc-dir", "/proc"});
  std::string log;
  ASSERT_TRUE(serve.Start(&log)) << log;
  const std::string token = serve.admin_token();
  auto admin = serve.Connect(token);
  auto cleanup = [&] {
    RemoveInstanceContainers(instance);
    RemoveSpecsOfKind(kind);
  };
  struct Cleanup {
    std::function<void()> run;
    ~Cleanup() { run(); }
  } guard{cleanup};

  // A real container takes two GPUs; the stand-in learns its real PIDs.
  int status = 0;
  CallJson(*admin, "PUT", "/v1/tenancies/dash-team", R"({"weight":3})", &status);
  ASSERT_EQ(status, 200);
  json body = {{"image", podman.image()},
               {"tenancy", "dash-team"},
               {"gpus", 2},
               {"command", {"/bin/sh", "-c", "sleep 300 & exec sleep 301"}}};
  auto submitted = CallJson(*admin, "POST", "/v1/containers", body.dump(), &status);
  ASSERT_EQ(status, 202) << submitted;
  const std::string id = submitted["id"];
  auto running = WaitForContainerState(*admin, serve, id, {"running"});
  std::vector<std::string> held = running["gpus"];
  ASSERT_EQ(held.size(), 2u);
  const auto pids = ContainerHostPids(podman, "tessera-" + id, 2);
  ASSERT_EQ(pids.size(), 2u) << podman.Run({"ps", "-a"}).output;
  const uint64_t now = NowMicros();
  std::string processes;
  for (size_t i = 0; i < 2; ++i) {
    const std::string pid = std::to_string(pids[i]);
    processes +=
        "process " + held[i] + " pid=" + pid + " memory=" + std::to_string(30ull << 30) + "\n";
    processes += "busy " + held[i] + " pid=" + pid + " sm=" + std::to_string(60 + 20 * i) +
                 " period_ms=100 from_us=" + std::to_string(now) + "\n";
  }
  // The held GPUs' device figures say what the processes do.
  std::string figures;
  for (size_t i = 0; i < gpus.size(); ++i) {
    bool holds = std::find(held.begin(), held.end(), gpus[i]) != held.end();
    figures += "device " + gpus[i] + " util=" + std::to_string(holds ? 85 : 3 * i) +
               " memory_used=" + std::to_string(holds ? (31ull << 30) : (i + 1) << 28) +
               " memory_total=85899345920 power_mw=" + std::to_string(holds ? 520000 : 70000) +
               " temp=" + std::to_string(holds ? 66 : 40) + " energy_mj=1000\n";
  }
  scenario.Write(figures + processes);

  // An operator quarantines one free GPU and drains another, with reasons.
  std::vector<std::string> free;
  for (const auto& gpu : gpus)
    if (std::find(held.begin(), held.end(), gpu) == held.end()) free.push_back(gpu);
  CallJson(*admin, "POST", "/v1/gpus/" + free[0] + "/quarantine",
           R"({"reason":"Xid 79: fell off the bus"})", &status);
  ASSERT_EQ(status, 200);
  CallJson(*admin, "POST", "/v1/gpus/" + free[1] + "/drain", R"({"reason":"HBM replacement"})",
           &status);
  ASSERT_EQ(status, 200);

  Browser browser;
  browser.Open(serve.port(), token);
  if (::testing::Test::HasFatalFailure()) return;
  auto context = [&] {
    return "API: " + CallJson(*admin, "GET", "/v1/dashboard").dump().substr(0, 4000) +
           "\nservice log:\n" + serve.log();
  };
  Page page = browser.WaitFor(
      "8 GPUs, the container's two active with bars, reasons in the cards",
      [&](const Page& p) {
        if (!p.Updated() || p.Cards().size() != 8) return false;
        for (const auto& gpu : held) {
          json card = p.Card(gpu);
          if (card.value("state", "") != "active" || card.value("util", 0.0) < 80 ||
              card.value("mem", 0.0) < 30)
            return false;
        }
        return p.Card(free[0]).value("state", "") == "quarantined" &&
               p.Card(free[1]).value("state", "") == "draining";
      },
      context);
  // One row: this host, all 8 GPUs in it.
  ASSERT_EQ(page.Rows().size(), 1u) << page.doc.dump(1);
  for (const auto& gpu : held) {
    EXPECT_EQ(page.Card(gpu).value("tenancy", ""), "dash-team");
    EXPECT_EQ(page.Card(gpu).value("tenant", ""), "dash-team");
  }
  // The reasons are in the card itself, visible, not only in a tooltip.
  EXPECT_EQ(page.Card(free[0]).value("reason", ""), "Xid 79: fell off the bus");
  EXPECT_TRUE(page.Card(free[0]).value("reasonVisible", false));
  EXPECT_EQ(page.Card(free[1]).value("reason", ""), "HBM replacement");
  EXPECT_TRUE(page.Card(free[1]).value("reasonVisible", false));
  // The utilisation bar is the GPU's own figure.
  EXPECT_NEAR(page.Card(held[0]).value("util", 0.0), 85, 0.01);
  EXPECT_EQ(page.Tenancy("dash-team").value("weight", 0.0), 3.0);

  // The usage chart of the tenancy, from the usage API (one hour, minute buckets).
  browser.Select("usage-tenancy", "dash-team");
  page = browser.WaitFor(
      "the usage chart of dash-team",
      [](const Page& p) {
        return p.Chart().value("buckets", 0) == 60 && p.Chart().value("gpuSeconds", 0.0) > 0;
      },
      context);
  EXPECT_GE(page.Chart().value("bars", 0), 1);

  // Filters: the tenancy dims every other card; "needs attention" keeps the two with reasons.
  browser.Select("filter-tenancy", "dash-team");
  page = browser.WaitFor(
      "only the tenancy's cards undimmed",
      [](const Page& p) {
        return p.Count([](const json& c) { return !c.value("dim", true); }) == 2;
      },
      context);
  EXPECT_EQ(page.Count([](const json& c) {
    return !c.value("dim", true) && c.value("tenancy", "") == "dash-team";
  }),
            2);
  browser.Select("filter-tenancy", "");
  browser.Select("filter-state", "attention");
  page = browser.WaitFor(
      "only the quarantined and the draining GPU undimmed",
      [](const Page& p) {
        return p.Count([](const json& c) { return !c.value("dim", true); }) == 2;
      },
      context);
  EXPECT_FALSE(page.Card(free[0]).value("dim", true));
  EXPECT_FALSE(page.Card(free[1]).value("dim", true));
  browser.Select("filter-state", "");
  browser.WaitFor(
      "nothing dimmed",
      [](const Page& p) {
        return p.Count([](const json& c) { return c.value("dim", false); }) == 0;
      },
      context);
  browser.Screenshot("dashboard-8-gpus");

  // Every poll was one request, to /v1/dashboard: the first, the chart's, and the page's timer
  // (every 2 s) after them, however fast the steps above went.
  browser.WaitFor(
      "a poll on the page's timer",
      [&](const Page&) { return browser.ApiRequests()["/v1/dashboard"] >= 3; }, context);
  auto requests = browser.ApiRequests();
  EXPECT_GE(requests["/v1/dashboard"], 3);
  EXPECT_EQ(requests.size(), 1u) << json(requests).dump();
  browser.ExpectNoScriptErrors(page);
}

// ---------------------------------------------------------------------------------------------
// A fleet: 100 nodes x 8 GPUs.

// Node `name` publishing the HGX fixture's 8 GPUs and the HGX H100 partition table (module i is
// the i-th GPU in PCI order on this fixture).
void PublishHgxNode(k8s::Client& admin, const std::string& name, const inventory::Inventory& inv) {
  k8s::NodeGpus gpus;
  for (const auto* gpu : inv.Gpus())
    gpus.gpus.push_back({gpu->pci_address, gpu->gpu_uuid.value_or(""), gpu->model, gpu->numa_node,
                         gpu->upstream_bridges});
  auto table = topology::PresetTable("hgx-h100-8gpu");
  ASSERT_TRUE(table) << table.error().message;
  for (size_t i = 0; i < gpus.gpus.size(); ++i)
    table->pci_addresses[static_cast<int>(i) + 1] = gpus.gpus[i].pci_address;
  gpus.partition_table = json::parse(topology::PartitionTableToJson(*table, -1));
  json node = {{"apiVersion", "v1"},
               {"kind", "Node"},
               {"metadata",
                {{"name", name},
                 {"annotations", {{k8s::kNodeGpusAnnotation, k8s::NodeGpusAnnotation(gpus)}}}}}};
  ASSERT_TRUE(admin.Create(k8s::Resource::Nodes(), "", node).ok());
}

TEST(FleetDashboardInChromium, OneHundredNodesOfEightGpus) {
  FakeApiServer api;
  TempDir dir;
  WriteKubeconfigFile(dir.path() + "/kubeconfig", api.url());
  k8s::ClientConfig config;
  config.server = api.url();
  k8s::Client admin_k8s(config);
  inventory::ReadOptions read;
  read.root = MaterializeHost("hgx-h100-dgx");
  auto inv = inventory::ReadInventory(read);
  ASSERT_TRUE(inv);
  char name[32];
  for (int n = 1; n <= 100; ++n) {
    std::snprintf(name, sizeof name, "gpu-node-%03d", n);
    PublishHgxNode(admin_k8s, name, *inv);
  }
  ServeProcess serve(dir.path(), {"--backend", "kubernetes", "--kubeconfig",
                                  dir.path() + "/kubeconfig", "--store", "sqlite"});
  std::string log;
  ASSERT_TRUE(serve.Start(&log)) << log;
  const std::string token = serve.admin_token();
  auto admin = serve.Connect(token);
  ASSERT_TRUE(WaitUntil([&] {
    auto listed = CallJson(*admin, "GET", "/v1/gpus");
    return listed.is_object() && listed["gpus"].size() == 800;
  })) << serve.log();

  // An operator's quarantines and drains with reasons, then work from five tenancies (the
  // scripted API server runs no kubelet: their Pods exist and their leases hold the GPUs).
  int status = 0;
  const std::vector<std::string> tenancies = {"vision", "speech", "llm-train", "batch", "research"};
  for (const auto& tenancy : tenancies) {
    CallJson(*admin, "PUT", "/v1/tenancies/" + tenancy, "{}", &status);
    ASSERT_EQ(status, 200);
  }
  const std::vector<std::pair<std::string, std::string>> actions = {
      {"0000:18:00.0@gpu-node-097/quarantine", "Xid 79: GPU has fallen off the bus"},
      {"0000:2a:00.0@gpu-node-098/quarantine", "firmware check failed: option ROM hash changed"},
      {"0000:ab:00.0@gpu-node-099/drain", "node maintenance 02:00 UTC"},
      {"0000:ba:00.0@gpu-node-099/drain", "node maintenance 02:00 UTC"}};
  for (const auto& [path, reason] : actions) {
    CallJson(*admin, "POST", "/v1/gpus/" + path, json({{"reason", reason}}).dump(), &status);
    EXPECT_EQ(status, 200) << path;
  }

  int submitted = 0;
  for (int i = 0; i < 60; ++i) {
    const int gpus = i % 4 == 0 ? 8 : i % 4 == 1 ? 4 : i % 4 == 2 ? 2 : 1;
    json body = {{"image", "registry.example/train:1"},
                 {"tenancy", tenancies[i % tenancies.size()]},
                 {"gpus", gpus}};
    CallJson(*admin, "POST", "/v1/containers", body.dump(), &status);
    submitted += status == 202;
  }
  ASSERT_EQ(submitted, 60);
  // What the node agents write into each lease they measure (the very patch tessera-lease-sync
  // sends): the GPUs' utilisation, memory and power.
  size_t measured_gpus = 0;
  ASSERT_TRUE(WaitUntil([&] {
    auto leases = admin_k8s.List(k8s::Resource::GpuLeases(), "");
    return leases && (*leases)["items"].size() == 60;
  }));
  auto leases = admin_k8s.List(k8s::Resource::GpuLeases(), "");
  ASSERT_TRUE(leases);
  int n = 0;
  for (const auto& lease : (*leases)["items"]) {
    k8s::LeaseMeasured measured;
    measured.total = {3600.0 * (n % 7), 90000.0, 1.2e6};
    for (const auto& gpu : lease["spec"]["gpuIds"]) {
      auto& g = measured.gauges[gpu.get<std::string>()];
      g.util_percent = 15 + (37 * n++) % 85;
      g.memory_total = 85899345920ull;
      g.memory_used = g.memory_total / 100 * static_cast<uint64_t>(10 + (53 * n) % 85);
      g.power_watts = 150 + 4.5 * *g.util_percent;
      ++measured_gpus;
    }
    ASSERT_TRUE(admin_k8s.Patch(k8s::Resource::GpuLeases(), "", lease["metadata"]["name"],
                                k8s::MeasuredPatch(measured, fleet_now_ms()),
                                k8s::PatchType::kMerge, "status"));
  }

  Browser browser;
  browser.Open(serve.port(), token);
  if (::testing::Test::HasFatalFailure()) return;
  auto context = [&] { return "service log:\n" + serve.log().substr(0, 20000); };
  Page page = browser.WaitFor(
      "800 GPUs on 100 node rows with the leases, their measured bars and the reasons",
      [&](const Page& p) {
        return p.Updated() && p.Cards().size() == 800 && p.Rows().size() == 100 &&
               p.Count([](const json& c) { return !c.value("tenancy", "").empty(); }) ==
                   static_cast<int>(measured_gpus) &&
               p.Count([](const json& c) { return c.value("util", 0.0) > 0; }) ==
                   static_cast<int>(measured_gpus) &&
               p.Count([](const json& c) { return !c.value("reason", "").empty(); }) == 4;
      },
      context);
  // A node per row, its GPUs in the HGX board's two NVLink halves.
  for (const auto& row : page.Rows()) {
    EXPECT_EQ(row["groups"], json({"P1", "P2"})) << row;
  }
  EXPECT_EQ(page.Rows()[0].value("node", ""), "gpu-node-001");
  EXPECT_EQ(page.Card("0000:18:00.0@gpu-node-097").value("reason", ""),
            "Xid 79: GPU has fallen off the bus");
  EXPECT_TRUE(page.Card("0000:18:00.0@gpu-node-097").value("reasonVisible", false));
  EXPECT_EQ(page.Card("0000:ab:00.0@gpu-node-099").value("state", ""), "draining");
  browser.Screenshot("dashboard-800-gpus");

  // The tenancy filter leaves only the rows with that tenancy's GPUs.
  browser.Select("filter-tenancy", "llm-train");
  page = browser.WaitFor(
      "only llm-train's GPUs undimmed",
      [](const Page& p) {
        const int shown = p.Count([](const json& c) { return !c.value("dim", true); });
        return shown > 0 && shown == p.Count([](const json& c) {
          return c.value("tenancy", "") == "llm-train";
        });
      },
      context);
  int visible_rows = 0;
  for (const auto& row : page.Rows())
    visible_rows += !row.value("hidden", true);
  EXPECT_LT(visible_rows, 100);
  EXPECT_GT(visible_rows, 0);
  browser.Screenshot("dashboard-800-gpus-filtered");

  auto requests = browser.ApiRequests();
  EXPECT_GE(requests["/v1/dashboard"], 2);
  EXPECT_EQ(requests.size(), 1u) << json(requests).dump();
  browser.ExpectNoScriptErrors(page);
}

}  // namespace
}  // namespace tessera::testing
