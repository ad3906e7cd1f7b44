#include "inventory/parsers.h"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace tessera::inventory {
namespace {

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t' || text.front() == '\n' ||
                           text.front() == '\r'))
    text.remove_prefix(1);
  while (!text.empty() &&
         (text.back() == ' ' || text.back() == '\t' || text.back() == '\n' || text.back() == '\r'))
    text.remove_suffix(1);
  return text;
}

template <typename T>
std::optional<T> ParseNumber(std::string_view text, int base) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text.substr(0, 64))
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > 64) out += "…";
  return out + "\"";
}

// Splits on '\n', keeping empty lines.
std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

}  // namespace

Result<uint32_t> ParseHexAttribute(std::string_view text, int max_bits) {
  std::string_view value = Trim(text);
  if (value.size() > 2 && value[0] == '0' && (value[1] == 'x' || value[1] == 'X')) {
    value.remove_prefix(2);
  }
  auto number = ParseNumber<uint64_t>(value, 16);
  if (!number) return InvalidArgument("not a hex number: " + Quote(text));
  if (max_bits < 64 && *number >> max_bits) {
    return InvalidArgument("hex value wider than " + std::to_string(max_bits) +
                           " bits: " + Quote(text));
  }
  return static_cast<uint32_t>(*number);
}

Result<int> ParseIntAttribute(std::string_view text) {
  auto number = ParseNumber<int>(Trim(text), 10);
  if (!number) return InvalidArgument("not an integer: " + Quote(text));
  return *number;
}

Result<std::pair<uint32_t, uint32_t>> ParseDevNumbers(std::string_view text) {
  std::string_view value = Trim(text);
  auto colon = value.find(':');
  if (colon == std::string_view::npos) return InvalidArgument("not major:minor: " + Quote(text));
  auto major = ParseNumber<uint32_t>(value.substr(0, colon), 10);
  auto minor = ParseNumber<uint32_t>(value.substr(colon + 1), 10);
  if (!major || !minor) return InvalidArgument("not major:minor: " + Quote(text));
  // Linux device numbers: 12-bit major, 20-bit minor.
  if (*major >= (1u << 12) || *minor >= (1u << 20)) {
    return InvalidArgument("device number out of range: " + Quote(text));
  }
  return std::make_pair(*major, *minor);
}

Result<std::vector<Bar>> ParseResourceFile(std::string_view text) {
  std::vector<Bar> bars;
  int index = 0;
  for (std::string_view line : Lines(text)) {
    line = Trim(line);
    if (line.empty()) continue;
    uint64_t fields[3];
    int count = 0;
    size_t pos = 0;
    while (pos < line.size() && count < 4) {
      while (pos < line.size() && line[pos] == ' ')
        ++pos;
      size_t end = line.find(' ', pos);
      if (end == std::string_view::npos) end = line.size();
      if (end == pos) break;
      if (count == 3)
        return InvalidArgument("line " + std::to_string(index + 1) +
                               ": more than 3 fields: " + Quote(line));
      std::string_view field = line.substr(pos, end - pos);
      if (field.size() > 2 && field[0] == '0' && field[1] == 'x') field.remove_prefix(2);
      auto value = ParseNumber<uint64_t>(field, 16);
      if (!value)
        return InvalidArgument("line " + std::to_string(index + 1) +
                               ": not a hex number: " + Quote(line));
      fields[count++] = *value;
      pos = end;
    }
    if (count != 3) {
      return InvalidArgument("line " + std::to_string(index + 1) +
                             ": expected 3 fields: " + Quote(line));
    }
    uint64_t start = fields[0], end = fields[1], flags = fields[2];
    if (end != 0 || start != 0) {
      if (end < start) {
        return InvalidArgument("line " + std::to_string(index + 1) +
                               ": end before start: " + Quote(line));
      }
      if (index <= 6) bars.push_back(Bar{index, start, end - start + 1, flags});
    }
    ++index;
  }
  return bars;
}

Result<std::map<std::string, uint32_t>> ParseProcDevices(std::string_view text) {
  std::map<std::string, uint32_t> majors;
  bool in_character = false;
  bool saw_header = false;
  int line_number = 0;
  for (std::string_view line : Lines(text)) {
    ++line_number;
    std::string_view trimmed = Trim(line);
    if (trimmed.empty()) continue;
    if (trimmed == "Character devices:") {
      in_character = saw_header = true;
      continue;
    }
    if (trimmed == "Block devices:") {
      in_character = false;
      saw_header = true;
      continue;
    }
    if (!in_character) continue;
    auto space = trimmed.find(' ');
    if (space == std::string_view::npos) {
      return InvalidArgument("line " + std::to_string(line_number) +
                             ": expected \"<major> <name>\": " + Quote(line));
    }
    auto major = ParseNumber<uint32_t>(trimmed.substr(0, space), 10);
    std::string_view name = Trim(trimmed.substr(space + 1));
    if (!major || name.empty() || *major >= (1u << 12)) {
      return InvalidArgument("line " + std::to_string(line_number) +
                             ": expected \"<major> <name>\": " + Quote(line));
    }
    // One name can own several majors (e.g. "tty"); the first is the one device nodes use.
    majors.emplace(std::string(name), *major);
  }
  if (!saw_header) return InvalidArgument("no \"Character devices:\" section");
  return majors;
}

Result<NvidiaGpuInformation> ParseNvidiaGpuInformation(std::string_view text) {
  NvidiaGpuInformation info;
  int line_number = 0;
  for (std::string_view line : Lines(text)) {
    ++line_number;
    auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view key = Trim(line.substr(0, colon));
    std::string_view value = Trim(line.substr(colon + 1));
    if (key == "Model") {
      info.model = std::string(value);
    } else if (key == "GPU UUID") {
      // Older drivers print "GPU-…" only with persistence; "N/A" or "??" means unknown.
      if (value.size() > 4 && value.substr(0, 4) == "GPU-") info.uuid = std::string(value);
    } else if (key == "Device Minor") {
      auto minor = ParseNumber<int>(value, 10);
      if (!minor || *minor < 0 || *minor > 254) {
        return InvalidArgument("line " + std::to_string(line_number) +
                               ": Device Minor: " + Quote(value) + " is not 0..254");
      }
      info.device_minor = *minor;
    } else if (key == "Bus Location") {
      info.bus_location = std::string(value);
    }
  }
  if (!info.device_minor) return InvalidArgument("no \"Device Minor:\" line");
  return info;
}

namespace {

bool LooksLikeVersion(std::string_view token) {
  // "580.65.06", "535.129.03": digits with at least one inner dot.
  if (token.empty() || token.front() == '.' || token.back() == '.') return false;
  bool dot = false;
  for (char c : token) {
    if (c == '.')
      dot = true;
    else if (c < '0' || c > '9')
      return false;
  }
  return dot;
}

}  // namespace

Result<std::string> ParseNvidiaDriverVersion(std::string_view text) {
  std::string_view first_line = Trim(text.substr(0, text.find('\n')));
  // sysfs holds the bare version. The proc banner differs between the proprietary module
  // ("… x86_64 Kernel Module  535.129.03  Thu Oct 19 …") and the open one ("… Open Kernel
  // Module for x86_64  580.65.06  Release Build …"): take the first version-shaped word after
  // "Kernel Module".
  if (LooksLikeVersion(first_line)) return std::string(first_line);
  auto module = first_line.find("Kernel Module");
  if (module == std::string_view::npos) {
    return InvalidArgument("not a driver version or NVRM banner: " + Quote(first_line));
  }
  std::string_view rest = first_line.substr(module);
  while (!rest.empty()) {
    size_t start = rest.find_first_not_of(" \t");
    if (start == std::string_view::npos) break;
    rest.remove_prefix(start);
    size_t end = rest.find_first_of(" \t");
    std::string_view token = rest.substr(0, end);
    if (LooksLikeVersion(token)) return std::string(token);
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end);
  }
  return InvalidArgument("no version after \"Kernel Module\" in " + Quote(first_line));
}

Result<uint32_t> ParseNvidiaCapabilityMinor(std::string_view text) {
  for (std::string_view line : Lines(text)) {
    auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    if (Trim(line.substr(0, colon)) != "DeviceFileMinor") continue;
    auto minor = ParseNumber<uint32_t>(Trim(line.substr(colon + 1)), 10);
    if (!minor || *minor >= (1u << 20)) return InvalidArgument("DeviceFileMinor: not a minor");
    return *minor;
  }
  return InvalidArgument("no \"DeviceFileMinor:\" line");
}

}  // namespace tessera::inventory
