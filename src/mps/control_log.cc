// Reading MPS's logs. Lines look like
//   [2026-02-06 09:34:17.770 Control   261] CUDA MPS Control binary version: 13000
//   [2024-04-29 11:22:10.446 Control    73] Server 95 exited with status 1
//   [2026-04-28 18:20:41.986 Server 4428] Active Threads Percentage set to 33.0
// (k8s-device-plugin issues #1614 and #685, bottlerocket-kernel-kit PR #415). Whatever a log
// holds, this reads it in linear time and bounded memory; lines of any other shape are counted.
#include <charconv>
#include <deque>

#include "mps/mps.h"

namespace tessera::mps {
namespace {

bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}

bool AllDigits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text)
    if (!IsDigit(c)) return false;
  return true;
}

// "2026-02-06"
bool IsDate(std::string_view text) {
  return text.size() == 10 && AllDigits(text.substr(0, 4)) && text[4] == '-' &&
         AllDigits(text.substr(5, 2)) && text[7] == '-' && AllDigits(text.substr(8, 2));
}

// "09:34:17.770" (the milliseconds are optional)
bool IsTime(std::string_view text) {
  if (text.size() != 8 && text.size() != 12) return false;
  if (!AllDigits(text.substr(0, 2)) || text[2] != ':' || !AllDigits(text.substr(3, 2)) ||
      text[5] != ':' || !AllDigits(text.substr(6, 2)))
    return false;
  return text.size() == 8 || (text[8] == '.' && AllDigits(text.substr(9, 3)));
}

template <typename T>
std::optional<T> Number(std::string_view text) {
  if (!AllDigits(text) || text.size() > 10) return std::nullopt;
  T value{};
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<LogLine> ParseLine(std::string_view line) {
  if (line.size() < 2 || line.front() != '[') return std::nullopt;
  const size_t close = line.find(']');
  if (close == std::string_view::npos) return std::nullopt;
  std::string_view head = line.substr(1, close - 1);
  std::string_view message = line.substr(close + 1);
  if (!message.empty() && message.front() == ' ') message.remove_prefix(1);
  // head: date, time, source words, pid (right-aligned: several spaces may come before it).
  std::vector<std::string_view> words;
  for (size_t at = 0; at < head.size() && words.size() < 8;) {
    while (at < head.size() && head[at] == ' ')
      ++at;
    if (at == head.size()) break;
    const size_t end = std::min(head.find(' ', at), head.size());
    words.push_back(head.substr(at, end - at));
    at = end;
  }
  if (words.size() < 4 || words.size() > 6 || !IsDate(words[0]) || !IsTime(words[1]))
    return std::nullopt;
  auto pid = Number<uint32_t>(words.back());
  if (!pid) return std::nullopt;
  LogLine out;
  out.date = words[0];
  out.time = words[1];
  for (size_t i = 2; i + 1 < words.size(); ++i) {
    for (char c : words[i])
      if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))) return std::nullopt;
    if (!out.source.empty()) out.source += ' ';
    out.source += words[i];
  }
  out.pid = *pid;
  out.message = message;
  while (!out.message.empty() && (out.message.back() == '\r' || out.message.back() == ' '))
    out.message.pop_back();
  return out;
}

// "<prefix><number><suffix>" -> the number.
template <typename T>
std::optional<T> Between(std::string_view text, std::string_view prefix, std::string_view suffix) {
  if (!text.starts_with(prefix)) return std::nullopt;
  text.remove_prefix(prefix.size());
  size_t digits = 0;
  while (digits < text.size() && IsDigit(text[digits]))
    ++digits;
  if (text.substr(digits).substr(0, suffix.size()) != suffix) return std::nullopt;
  return Number<T>(text.substr(0, digits));
}

// Calls `each` for every line of `text` (without its newline).
template <typename F>
void ForEachLine(std::string_view text, F&& each) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    each(text.substr(start, end - start));
    start = end + 1;
  }
}

}  // namespace

std::vector<LogLine> ParseLogLines(std::string_view text, size_t max_lines) {
  std::deque<LogLine> kept;
  ForEachLine(text, [&](std::string_view raw) {
    if (raw.size() > kMaxLogLine) return;
    auto line = ParseLine(raw);
    if (!line) return;
    kept.push_back(std::move(*line));
    if (kept.size() > max_lines) kept.pop_front();
  });
  return {std::make_move_iterator(kept.begin()), std::make_move_iterator(kept.end())};
}

LogFacts ReadLogFacts(std::string_view text) {
  LogFacts facts;
  constexpr size_t kMaxPids = 1024;  // a long-lived daemon starts many servers: keep the last
  auto keep = [](auto& list, auto value) {
    if (list.size() == kMaxPids) list.erase(list.begin());
    list.push_back(value);
  };
  ForEachLine(text, [&](std::string_view raw) {
    if (raw.empty()) return;
    std::optional<LogLine> line;
    if (raw.size() <= kMaxLogLine) line = ParseLine(raw);
    if (!line) {
      ++facts.malformed;
      return;
    }
    ++facts.lines;
    std::string_view message = line->message;
    if (auto version = Between<uint32_t>(message, "CUDA MPS Control binary version: ", "")) {
      facts.control_version = *version;
    } else if (auto started = Between<uint32_t>(message, "Starting new server ", " for user ")) {
      keep(facts.servers_started, *started);
    } else if (auto ready = Between<uint32_t>(message, "NEW SERVER ", ": Ready")) {
      keep(facts.servers_ready, *ready);
    } else if (auto pid = Between<uint32_t>(message, "Server ", " exited with status ")) {
      const std::string_view rest =
          message.substr(message.find(" exited with status ") + sizeof(" exited with status ") - 1);
      auto status = Number<uint32_t>(rest);
      keep(facts.servers_exited, ServerExit{*pid, status ? static_cast<int>(*status) : -1});
    } else if (message.starts_with("Server encountered a fatal exception")) {
      ++facts.fatal_exceptions;
    } else if (message.starts_with("Device pinned memory limit for device ")) {
      // "... for device 0 set to 0x140000000 bytes"
      const size_t at = message.find(" set to 0x");
      if (at != std::string_view::npos) {
        std::string_view hex = message.substr(at + sizeof(" set to 0x") - 1);
        hex = hex.substr(0, hex.find(' '));
        uint64_t value = 0;
        auto [end, error] = std::from_chars(hex.data(), hex.data() + hex.size(), value, 16);
        if (error == std::errc() && end == hex.data() + hex.size() && !hex.empty())
          facts.pinned_memory_limit = value;
      }
    } else if (message.starts_with("Active Threads Percentage set to ")) {
      std::string_view number = message.substr(sizeof("Active Threads Percentage set to ") - 1);
      double value = 0;
      auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), value);
      if (error == std::errc() && end == number.data() + number.size() && value >= 0 &&
          value <= 100)
        facts.active_thread_percentage = value;
    }
  });
  return facts;
}

}  // namespace tessera::mps
