#include "inventory/windows/native_hyperv.h"

#include <toml++/toml.h>

#include <cctype>

#include "common/toml_text.h"
#include "common/untrusted_text.h"

namespace tessera::windows::native {
namespace {

constexpr size_t kMaxRuntimes = 64;
constexpr size_t kMaxPatterns = 64;
// The smallest number whose decimal form starts 42949: every 32-bit value from here up does.
constexpr uint32_t kFirstMessageSignaled = 4294900000u;

bool IsVersionToken(std::string_view token) {
  if (!token.empty() && token[0] == 'v') token.remove_prefix(1);
  size_t digits = 0;
  size_t dots = 0;
  for (char c : token) {
    if (c >= '0' && c <= '9') {
      ++digits;
    } else if (c == '.') {
      ++dots;
    } else {
      return false;
    }
  }
  return dots >= 1 && digits > dots && token.front() != '.' && token.back() != '.' &&
         token.find("..") == std::string_view::npos;
}

std::vector<std::string> Strings(const toml::table* table, std::string_view key) {
  std::vector<std::string> out;
  if (table == nullptr) return out;
  if (const toml::array* array = (*table)[key].as_array()) {
    for (const toml::node& item : *array) {
      if (out.size() == kMaxPatterns) break;
      if (auto s = item.value<std::string>()) out.push_back(*s);
    }
  }
  return out;
}

const toml::table* CriPlugin(const toml::table& root) {
  const toml::table* plugins = root["plugins"].as_table();
  if (plugins == nullptr) return nullptr;
  for (const char* name : {"io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "cri"}) {
    if (const toml::table* cri = (*plugins)[name].as_table()) return cri;
  }
  return nullptr;
}

}  // namespace

std::string VersionFromOutput(std::string_view output) {
  size_t eol = output.find_first_of("\r\n");
  std::string_view line = output.substr(0, eol);
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t'))
      ++i;
    size_t end = line.find_first_of(" \t", i);
    if (end == std::string_view::npos) end = line.size();
    std::string_view token = line.substr(i, end - i);
    if (IsVersionToken(token)) {
      if (token[0] == 'v') token.remove_prefix(1);
      return std::string(token.substr(0, 32));
    }
    i = end;
  }
  return "";
}

std::string ConfigFlag(const std::vector<std::string>& argv) {
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if ((arg == "--config" || arg == "-c") && i + 1 < argv.size()) return argv[i + 1];
    if (arg.rfind("--config=", 0) == 0) return arg.substr(9);
  }
  return "";
}

Result<std::vector<ContainerdRuntime>> ContainerdRuntimesFromConfig(std::string_view toml_text) {
  toml::table root;
  try {
    root = toml::parse(AsciiForToml(toml_text));
  } catch (const toml::parse_error& e) {
    return InvalidArgument("containerd config is not TOML: " + Excerpt(e.description(), 120));
  }
  std::vector<ContainerdRuntime> out;
  const toml::table* cri = CriPlugin(root);
  if (cri == nullptr) return out;
  const toml::table* runtimes = (*cri)["containerd"]["runtimes"].as_table();
  if (runtimes == nullptr) return out;
  for (const auto& [key, node] : *runtimes) {
    const toml::table* table = node.as_table();
    if (table == nullptr || key.str().empty()) continue;
    if (out.size() == kMaxRuntimes) break;
    ContainerdRuntime r;
    r.name = std::string(key.str());
    r.runtime_type = (*table)["runtime_type"].value_or(std::string());
    auto isolation = (*table)["options"]["SandboxIsolation"].value<int64_t>();
    if (isolation && *isolation >= 0 && *isolation <= 0xffff) r.sandbox_isolation = *isolation;
    r.pod_annotations = Strings(table, "pod_annotations");
    r.container_annotations = Strings(table, "container_annotations");
    out.push_back(std::move(r));
  }
  return out;
}

bool IsMessageSignaledIrq(uint32_t number) {
  return number >= kFirstMessageSignaled;
}

bool IsGpuClass(std::optional<uint32_t> class_code) {
  if (!class_code) return false;
  uint32_t base = *class_code >> 16;
  return base == 0x03 || base == 0x12;
}

}  // namespace tessera::windows::native
