// What the client makes of the API server's bytes: error bodies, object bodies and watch streams.
// Pure and private to the Kubernetes client (the fuzzers reach it directly). Everything here
// treats the server as untrusted: nesting is checked on the bytes before anything is parsed,
// and what lands in an error message is an excerpt.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "kubernetes/client.h"

namespace tessera::k8s {

// The HTTP status and, from a Status object, its reason and message (excerpts); any other body
// becomes the message as an excerpt.
ApiError ParseApiError(long status, std::string_view body);

// A 2xx body as JSON (an empty body is an empty object). Internal error naming `what` when it
// nests deeper than kMaxApiJsonDepth or is not JSON.
Result<Json> ParseResponseJson(std::string_view body, const std::string& what);

// A watch response body, fed as it arrives: newline-separated JSON events.
class WatchDecoder {
 public:
  // `max_line`: the longest event line taken; `resource_version`: where the watch started.
  WatchDecoder(uint64_t max_line, std::string resource_version);

  // Feeds a piece of the body, calling `on_event` for each whole event. Returns false once the
  // watch must end: the handler returned false, the server said 410 Gone, or a line grew past
  // max_line. Lines that are not JSON objects, or nest too deeply, are skipped.
  bool Feed(std::string_view data, const std::function<bool(const WatchEvent&)>& on_event);

  const std::string& last_version() const { return last_version_; }
  bool handler_stopped() const { return handler_stopped_; }
  bool too_long() const { return too_long_; }
  bool gone() const { return gone_; }
  const std::string& gone_message() const { return gone_message_; }
  uint64_t max_line() const { return max_line_; }

 private:
  uint64_t max_line_;
  std::string buffer_;
  size_t scanned_ = 0;  // bytes of buffer_ known to hold no newline
  std::string last_version_;
  bool handler_stopped_ = false;
  bool too_long_ = false;
  bool gone_ = false;
  std::string gone_message_;
};

}  // namespace tessera::k8s
