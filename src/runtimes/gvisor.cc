// What an installed runsc can do. Debian 12's runsc (0.0~20221219.0) predates nvproxy: its
// `runsc flags` has no -nvproxy, so it cannot give a container GPUs; releases with nvproxy list
// "-nvproxy" there (and accept --nvproxy=true).
#include <sstream>

#include "runtimes/runtimes.h"

namespace tessera::runtimes {
namespace {

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r'))
    text.remove_suffix(1);
  return text;
}

}  // namespace

RunscInfo ParseRunscInfo(std::string path, std::string_view version_output,
                         std::string_view flags_output) {
  RunscInfo info;
  info.path = std::move(path);
  // "runsc version 0.0~20221219.0\nspec: 1.0.2-dev\n"
  std::string_view first = version_output.substr(0, version_output.find('\n'));
  constexpr std::string_view kPrefix = "runsc version ";
  auto at = first.find(kPrefix);
  info.version =
      std::string(Trim(at == std::string_view::npos ? first : first.substr(at + kPrefix.size())));
  // Go's flag package prints each flag as "  -name[ type]" on a line of its own, the usage on
  // the next: exactly "-nvproxy", not "-nvproxy-docker" or "-nvproxy-driver-version".
  size_t start = 0;
  while (start < flags_output.size()) {
    size_t end = flags_output.find('\n', start);
    if (end == std::string_view::npos) end = flags_output.size();
    std::string_view line = Trim(flags_output.substr(start, end - start));
    start = end + 1;
    if (line.rfind("-nvproxy", 0) != 0) continue;
    std::string_view rest = line.substr(8);
    if (rest.empty() || rest.front() == ' ' || rest.front() == '\t') info.nvproxy = true;
  }
  return info;
}

Status GvisorGpuSupport(const RunscInfo& runsc) {
  if (runsc.nvproxy) return Ok();
  return FailedPrecondition(
      "isolation gvisor with GPUs: runsc " + runsc.version + " (" + runsc.path +
      ") has no nvproxy (`runsc flags` lists no -nvproxy), so gVisor cannot give a container "
      "GPUs; GPU containers under gVisor need a gVisor release with nvproxy "
      "(https://gvisor.dev/docs/user_guide/gpu/); without GPUs, gvisor runs here");
}

std::optional<int> RunscReleaseDate(std::string_view version) {
  // "release-20240513.0" (gVisor's releases), "0.0~20221219.0" (Debian's package).
  for (std::string_view marker : {std::string_view("release-"), std::string_view("~")}) {
    const size_t at = version.find(marker);
    if (at == std::string_view::npos) continue;
    std::string_view digits = version.substr(at + marker.size(), 8);
    if (digits.size() != 8 || digits.find_first_not_of("0123456789") != std::string_view::npos)
      continue;
    return std::stoi(std::string(digits));
  }
  return std::nullopt;
}

Status GvisorMpsSupport(const RunscInfo& runsc) {
  // nvproxy gained MPS clients (class MPS_COMPUTE, TPC partition mode) in google/gvisor PR
  // #13484, released in June 2026.
  constexpr int kFirstRelease = 20260601;
  const auto date = RunscReleaseDate(runsc.version);
  if (runsc.nvproxy && date && *date >= kFirstRelease) return Ok();
  return InvalidArgument(
      "share: isolation gvisor needs a runsc whose nvproxy carries MPS clients (a release of "
      "June 2026 or later); this host has runsc " +
      runsc.version + " (" + runsc.path + ")" + (runsc.nvproxy ? "" : " without nvproxy"));
}

}  // namespace tessera::runtimes
