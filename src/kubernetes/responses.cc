#include "kubernetes/responses.h"

#include <spdlog/spdlog.h>

#include "common/untrusted_text.h"

namespace tessera::k8s {
namespace {

// What the server says lands in error messages and logs: excerpts only.
constexpr size_t kMaxErrorText = 300;

std::string ExcerptField(const Json& object, std::string_view key) {
  return Excerpt(StringField(object, key), kMaxErrorText);
}

}  // namespace

ApiError ParseApiError(long status, std::string_view body) {
  ApiError error;
  error.http_status = status;
  Json doc;
  if (CheckJsonNesting(body, "body", kMaxApiJsonDepth)) doc = Json::parse(body, nullptr, false);
  if (StringField(doc, "kind") == "Status") {
    error.reason = ExcerptField(doc, "reason");
    error.message = ExcerptField(doc, "message");
  } else {
    error.message = Excerpt(body, 200);
  }
  return error;
}

Result<Json> ParseResponseJson(std::string_view body, const std::string& what) {
  if (body.empty()) return Json::object();
  if (auto nesting = CheckJsonNesting(body, "response", kMaxApiJsonDepth); !nesting) {
    return Internal(what + ": " + nesting.error().message);
  }
  auto doc = Json::parse(body, nullptr, false);
  if (doc.is_discarded()) return Internal(what + ": response is not JSON");
  return doc;
}

WatchDecoder::WatchDecoder(uint64_t max_line, std::string resource_version)
    : max_line_(max_line), last_version_(std::move(resource_version)) {}

bool WatchDecoder::Feed(std::string_view data,
                        const std::function<bool(const WatchEvent&)>& on_event) {
  buffer_.append(data);
  size_t start = 0, newline;
  while ((newline = buffer_.find('\n', std::max(start, scanned_))) != std::string::npos) {
    std::string_view line(buffer_.data() + start, newline - start);
    start = newline + 1;
    if (line.empty() || line == "\r") continue;
    if (auto nesting = CheckJsonNesting(line, "watch event", kMaxApiJsonDepth); !nesting) {
      spdlog::debug("k8s: watch event skipped: {}", nesting.error().message);
      continue;
    }
    auto doc = Json::parse(line, nullptr, false);
    if (!doc.is_object()) continue;
    auto object = doc.find("object");
    WatchEvent event{StringField(doc, "type"),
                     object != doc.end() ? std::move(*object) : Json::object()};
    if (event.type == "ERROR") {
      // The watch cache no longer holds that resourceVersion: relist.
      auto code = event.object.is_object() ? event.object.find("code") : event.object.end();
      if (code != event.object.end() && code->is_number_integer() && code->get<int64_t>() == 410) {
        gone_ = true;
        gone_message_ = ExcerptField(event.object, "message");
        return false;
      }
      continue;
    }
    std::string rv = StringField(ObjectField(event.object, "metadata"), "resourceVersion");
    if (!rv.empty()) last_version_ = std::move(rv);
    if (!on_event(event)) {
      handler_stopped_ = true;
      return false;
    }
  }
  buffer_.erase(0, start);
  scanned_ = buffer_.size();
  if (buffer_.size() > max_line_) {
    too_long_ = true;
    return false;
  }
  return true;
}

}  // namespace tessera::k8s
