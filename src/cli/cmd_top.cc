// `tessera top`: a terminal view of what each GPU and each tenancy uses, for operators on a node
// without a browser. Reads /v1/telemetry of `tessera serve` (embedded mode, with a token) or of
// a node agent (tessera-lease-sync --metrics-listen), and redraws every --interval seconds.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/api_session.h"
#include "cli/commands.h"
#include "client/client.h"
#include "client/top_view.h"

namespace tessera::cli {
namespace {

using nlohmann::json;

struct TopFlags {
  ApiFlags api;
  double interval_s = 2;
  bool once = false;
};

}  // namespace

void AddTopCommand(CLI::App& app) {
  auto flags = std::make_shared<TopFlags>();
  CLI::App* top = app.add_subcommand(
      "top",
      "What each GPU and each tenancy uses, refreshing: reads /v1/telemetry of tessera serve or "
      "of a node agent (tessera-lease-sync --metrics-listen)");
  AddApiOptions(top, flags->api);
  top->get_option("--server")
      ->description(
          "tessera serve or a node agent (default $TESSERA_SERVER, the client config's context, "
          "http://127.0.0.1:8080)");
  top->get_option("--token-file")
      ->description(
          "Token for tessera serve, or a node agent's --metrics-token-file (default "
          "$TESSERA_TOKEN, $TESSERA_TOKEN_FILE, the context's, "
          "tessera-data/admin.token; none found: no token)");
  top->add_option("--interval", flags->interval_s, "Seconds between refreshes")
      ->check(CLI::Range(0.2, 3600.0))
      ->capture_default_str();
  top->add_flag("--once", flags->once, "Print one frame and exit (no screen control codes)");
  top->callback([flags] {
    auto target = ResolveApi(flags->api);
    if (!target) Fail(target.error());
    const std::string server = target->server;
    auto endpoint = client::ParseServer(server);
    if (!endpoint) Fail(endpoint.error());
    client::Connection connection(*endpoint, target->token, target->tls);
    for (;;) {
      auto response = connection.Call("GET", "/v1/telemetry");
      if (!response) Fail(response.error().WithContext(server));
      if (response->status != 200)
        Fail(Unavailable(server + "/v1/telemetry: HTTP " + std::to_string(response->status)));
      auto doc = json::parse(response->body, nullptr, false);
      if (doc.is_discarded() || !doc.is_object())
        Fail(Unavailable(server + "/v1/telemetry: not a JSON object"));
      std::string frame = client::RenderTop(doc, server, std::time(nullptr));
      if (flags->once) {
        std::fputs(frame.c_str(), stdout);
        return;
      }
      std::fputs("\x1b[H\x1b[2J", stdout);  // home, clear
      std::fputs(frame.c_str(), stdout);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::duration<double>(flags->interval_s));
    }
  });
}

}  // namespace tessera::cli
