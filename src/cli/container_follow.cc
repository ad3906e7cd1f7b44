// Following a container over the API (container_follow.h).
#include "cli/container_follow.h"

#include <charconv>
#include <cstdio>
#include <thread>

#include "common/untrusted_text.h"

namespace tessera::cli {

std::string TextOf(const nlohmann::json& record, const char* field) {
  if (!record.is_object()) return "";
  auto it = record.find(field);
  return it != record.end() && it->is_string() ? Excerpt(it->get<std::string>(), 200) : "";
}

std::string ReasonOf(const nlohmann::json& record) {
  constexpr size_t kMaxReason = 4096;
  if (!record.is_object()) return "";
  auto it = record.find("reason");
  if (it == record.end() || !it->is_string()) return "";
  std::string reason = it->get<std::string>();
  if (reason.size() > kMaxReason) reason = reason.substr(0, kMaxReason) + "...";
  for (char& c : reason)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') || c == 0x7f) c = '?';
  return reason;
}

Result<std::string> ContainerPath(const std::string& id) {
  const bool fits = !id.empty() && id.size() <= 128 &&
                    id.find_first_not_of(
                        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789._-") == std::string::npos;
  if (!fits)
    return InvalidArgument("container ID " + Excerpt(id, 40) +
                           ": want 1 to 128 of letters, digits, '.', '_' and '-'");
  return "/v1/containers/" + id;
}

bool IsEnded(const std::string& state) {
  return state == "exited" || state == "failed";
}

Result<LogAnswer> ReadLogs(ApiSession& session, const std::string& path, uint64_t offset,
                           std::optional<size_t> tail) {
  std::string target = path + "/logs?offset=" + std::to_string(offset);
  if (tail) target += "&tail=" + std::to_string(*tail);
  auto response = session.Call("GET", target);
  if (!response) return response.error();
  if (response->status != 200) return ApiError(*response, "GET " + path + "/logs");
  LogAnswer answer;
  answer.text = std::move(response->body);
  const std::string offset_text = response->headers["tessera-log-offset"];
  const char* end = offset_text.data() + offset_text.size();
  auto [ptr, ec] = std::from_chars(offset_text.data(), end, answer.offset);
  if (offset_text.empty() || ec != std::errc() || ptr != end)
    return Unavailable("GET " + path + "/logs: the answer has no Tessera-Log-Offset " +
                       "(a tessera-serve older than this client?)");
  answer.state = Excerpt(response->headers["tessera-container-state"], 20);
  answer.cut = response->headers["tessera-log-cut"] == "true";
  return answer;
}

Status FollowLogs(ApiSession& session, const std::string& id, uint64_t offset,
                  const std::function<void()>& between) {
  auto path = ContainerPath(id);
  if (!path) return path.error();
  while (true) {
    auto answer = ReadLogs(session, *path, offset);
    if (!answer) return answer.error();
    if (answer->cut && offset > 0)
      std::fprintf(stderr, "tessera: %s: output was lost here (its log was emptied at its cap)\n",
                   id.c_str());
    std::fwrite(answer->text.data(), 1, answer->text.size(), stdout);
    std::fflush(stdout);
    offset = answer->offset;
    // The state is read before the output, so an ended container's answer holds the rest; one
    // more empty answer confirms it.
    if (IsEnded(answer->state) && answer->text.empty()) return Ok();
    if (between) between();
    if (answer->text.empty()) std::this_thread::sleep_for(kFollowInterval);
  }
}

Result<nlohmann::json> WaitEnded(ApiSession& session, const std::string& id) {
  auto path = ContainerPath(id);
  if (!path) return path.error();
  while (true) {
    auto record = session.Json("GET", *path);
    if (!record) return record.error();
    if (!record->is_object()) return Unavailable("GET " + *path + ": not a container record");
    if (IsEnded(TextOf(*record, "state"))) return record;
    std::this_thread::sleep_for(kFollowInterval);
  }
}

int ExitCodeOf(const nlohmann::json& record) {
  if (TextOf(record, "state") != "exited") return 125;
  const auto code = record.find("exit_code");
  if (code == record.end() || !code->is_number_integer()) return 125;
  const int value = code->get<int>();
  return value >= 0 && value <= 255 ? value : 125;
}

}  // namespace tessera::cli
