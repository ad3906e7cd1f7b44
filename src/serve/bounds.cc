#include "serve/bounds.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace tessera::serve {
namespace {

// The longest a string may become as JSON: quotes, two-character escapes, \u00XX for other
// control characters, and U+FFFD (3 bytes) for each byte of invalid UTF-8 (the renderer
// replaces those).
size_t JsonStringBytes(std::string_view text) {
  size_t bytes = 2;
  for (unsigned char c : text) {
    if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t') {
      bytes += 2;
    } else if (c < 0x20) {
      bytes += 6;
    } else if (c >= 0x80) {
      bytes += 3;
    } else {
      bytes += 1;
    }
  }
  return bytes;
}

}  // namespace

Result<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  // Quoted in the error only when short: it comes from a command line, but may be anything.
  const std::string shown =
      text.size() <= 32 ? "\"" + std::string(text) + "\"" : "of " + std::to_string(text.size());
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data() || value < 0)
    return InvalidArgument("duration " + shown +
                           ": want a whole number and a unit (ms, s, m, h, d)");
  const std::string_view unit(end, static_cast<size_t>(text.data() + text.size() - end));
  int64_t scale = 0;
  if (unit == "ms") scale = 1;
  if (unit == "s") scale = 1000;
  if (unit == "m") scale = 60 * 1000;
  if (unit == "h") scale = 3600 * 1000;
  if (unit == "d") scale = 24 * 3600 * 1000;
  if (scale == 0)
    return InvalidArgument("duration " + shown + ": the unit must be ms, s, m, h or d");
  if (value > INT64_MAX / scale) return InvalidArgument("duration " + shown + ": too long");
  return std::chrono::milliseconds(value * scale);
}

std::vector<size_t> PlanRetention(
    const std::vector<const fleet::ContainerRecord*>& containers, const RetentionOptions& options,
    int64_t now_ms, const std::function<bool(const fleet::ContainerRecord&)>& pinned) {
  std::vector<size_t> drop;
  std::unordered_map<std::string, size_t> finished;  // incarnation -> finished records so far
  const int64_t max_age = options.max_age.count();
  // Newest first, so the per-tenancy count keeps the newest records.
  for (size_t i = containers.size(); i-- > 0;) {
    const fleet::ContainerRecord& container = *containers[i];
    if (!fleet::IsTerminal(container.state)) continue;
    // Records of no incarnation (a deleted owner's) are counted under their name.
    const size_t kept = ++finished[container.spec.tenancy + '\n' + container.tenancy_uid];
    const int64_t finished_ms =
        container.finished_ms ? container.finished_ms : container.created_ms;
    const bool expired = now_ms - finished_ms > max_age || kept > options.per_tenancy;
    if (expired && !(pinned && pinned(container))) drop.push_back(i);
  }
  std::reverse(drop.begin(), drop.end());
  return drop;
}

size_t EstimatedJsonBytes(const fleet::ContainerRecord& c) {
  // Keys, punctuation, numbers and the fixed-vocabulary values of ContainerJson (api module).
  size_t bytes = 640;
  for (std::string_view text :
       {std::string_view(c.id), std::string_view(c.spec.tenancy), std::string_view(c.spec.image),
        std::string_view(c.reason), std::string_view(c.idempotency_key)})
    bytes += JsonStringBytes(text);
  for (const auto& argument : c.spec.command)
    bytes += JsonStringBytes(argument) + 1;
  for (const auto& [name, value] : c.spec.env)
    bytes += JsonStringBytes(name) + JsonStringBytes(value) + 2;
  for (const auto& gpu : c.gpus)
    bytes += JsonStringBytes(gpu) + 1;
  for (const auto& volume : c.spec.volumes)
    bytes += JsonStringBytes(volume.name) + JsonStringBytes(volume.mount_path) + 48;
  // `ports` and `ready`; each port's keys, numbers, protocol, and its host address twice (in
  // host_address and address, at most an IPv6 address's 45 characters each).
  bytes += 32;
  for (const auto& port : c.spec.ports)
    bytes += JsonStringBytes(port.name) + 220;
  return bytes;
}

}  // namespace tessera::serve
