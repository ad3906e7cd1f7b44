// What `run`, `logs`, `stop` and `wait` share: a container's API path from an ID the user typed,
// its output followed by offset (GET /v1/containers/{id}/logs?offset=, docs/serve.md), and
// waiting for its end.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/api_session.h"
#include "common/error.h"

namespace tessera::cli {

// How often the followers ask again.
inline constexpr std::chrono::milliseconds kFollowInterval{500};

// "/v1/containers/<id>"; InvalidArgument (naming an excerpt) unless `id` is 1..128 of
// [A-Za-z0-9._-], so nothing typed can change the request's path.
Result<std::string> ContainerPath(const std::string& id);

// One answer of the logs endpoint: its output, where to ask next and the container's state.
struct LogAnswer {
  std::string text;
  uint64_t offset = 0;
  std::string state;
  bool cut = false;  // output before `text` is gone (Tessera-Log-Cut)
};
// GET <path>/logs?offset=OFFSET[&tail=N].
Result<LogAnswer> ReadLogs(ApiSession& session, const std::string& path, uint64_t offset,
                           std::optional<size_t> tail = std::nullopt);

// Writes the output from `offset` on to stdout as it comes, unchanged, until the container has
// ended and its output is drained. `between` runs before each wait (run: its ports).
Status FollowLogs(ApiSession& session, const std::string& id, uint64_t offset,
                  const std::function<void()>& between = {});

// Its record once it has exited or failed (polls GET).
Result<nlohmann::json> WaitEnded(ApiSession& session, const std::string& id);
// The exit code of an ended record: its exit_code, 125 when it failed or has none.
int ExitCodeOf(const nlohmann::json& record);
bool IsEnded(const std::string& state);
// A string field of an answer, cut to printable ASCII (Excerpt); "" when absent or not a string.
std::string TextOf(const nlohmann::json& record, const char* field);
// A record's reason for a message of its own on stderr: whole lines (a start failure's reason
// holds the runtime's error and the fix), control characters other than newlines and tabs
// replaced by '?', at most 4 KiB.
std::string ReasonOf(const nlohmann::json& record);

}  // namespace tessera::cli
