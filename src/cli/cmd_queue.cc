// `tessera queue`: GET /v1/queue, the pending GPU containers in dispatch order (a tenant's own;
// positions stay global), and with -o wide the tenancies' shares next to their weights.
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/api_session.h"
#include "cli/commands.h"
#include "client/views.h"

namespace tessera::cli {
namespace {

using nlohmann::json;

struct QueueFlags {
  ApiFlags api;
  OutputFlags output;
};

void Queue(const QueueFlags& flags) {
  ApiSession session = ConnectOrFail(flags.api);
  auto doc = session.Json("GET", "/v1/queue");
  if (!doc) Fail(doc.error());
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  PrintOutput(flags.output, *doc, client::QueueTable(*doc, now_ms));
  if (flags.output.format != "table" && flags.output.format != "wide") return;
  // The API lists the first 1,000 entries; say so when more wait.
  const json& total = client::FieldOf(*doc, "queue_total");
  const json& queue = client::FieldOf(*doc, "queue");
  if (total.is_number() && queue.is_array() &&
      client::IntOf(total) > static_cast<int64_t>(queue.size()))
    std::fprintf(stderr, "tessera: %zu of %lld pending containers listed\n", queue.size(),
                 static_cast<long long>(client::IntOf(total)));
  if (flags.output.format != "wide") return;
  std::printf("\n");
  OutputFlags shares = flags.output;
  PrintOutput(shares, json::object(), client::QueueSharesTable(*doc));
}

}  // namespace

void AddQueueCommand(CLI::App& app) {
  auto flags = std::make_shared<QueueFlags>();
  CLI::App* queue = app.add_subcommand(
      "queue", "Pending GPU containers in dispatch order and why each waits (-o wide: shares)");
  AddApiOptions(queue, flags->api);
  AddOutputOptions(queue, flags->output);
  queue->callback([flags] { Queue(*flags); });
}

}  // namespace tessera::cli
