// `tessera run`'s request body (run_request.h).
#include "cli/run_request.h"

#include <charconv>

#include "common/untrusted_text.h"
#include "sharing/sharing.h"

namespace tessera::cli {
namespace {

// "1g.10gb" or "1g.10gbx2"; the service checks the profile and the count.
nlohmann::json MigRequest(const std::string& flag) {
  std::string profile = flag;
  int count = 1;
  if (auto x = profile.rfind('x');
      x != std::string::npos && x + 1 < profile.size() && x + 4 >= profile.size() &&
      profile.find_first_not_of("0123456789", x + 1) == std::string::npos) {
    count = std::stoi(profile.substr(x + 1));
    profile.resize(x);
  }
  return {{"profile", profile}, {"count", count}};
}

}  // namespace

Result<nlohmann::json> ParsePublish(const std::string& text) {
  const std::string flag = "-p " + Excerpt(text, 40);
  std::string_view rest = text;
  std::string name;
  if (auto colon = rest.find(':'); colon != std::string_view::npos) {
    name = std::string(rest.substr(colon + 1));
    rest = rest.substr(0, colon);
    if (name.empty()) return InvalidArgument(flag + ": an empty NAME after ':'");
  }
  std::string protocol;
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    protocol = std::string(rest.substr(slash + 1));
    rest = rest.substr(0, slash);
    if (protocol != "tcp" && protocol != "udp")
      return InvalidArgument(flag + ": the protocol is tcp or udp");
  }
  int port = 0;
  auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), port);
  if (rest.empty() || ec != std::errc() || ptr != rest.data() + rest.size() || port < 1 ||
      port > 65535)
    return InvalidArgument(flag + ": want PORT[/udp][:NAME] with a port from 1 to 65535");
  nlohmann::json entry = {{"containerPort", port}};
  if (!protocol.empty()) entry["protocol"] = protocol;
  if (!name.empty()) entry["name"] = name;
  return entry;
}

Result<nlohmann::json> RunRequest(const RunOptions& options, const std::vector<std::string>& args) {
  if (args.empty()) return InvalidArgument("run: IMAGE is required");
  nlohmann::json body = {{"image", args[0]},
                         {"tenancy", options.tenancy},
                         {"gpus", options.gpus},
                         {"isolation", options.isolation}};
  if (args.size() > 1) body["command"] = std::vector<std::string>(args.begin() + 1, args.end());
  nlohmann::json env = nlohmann::json::object();
  for (const auto& entry : options.env) {
    auto equals = entry.find('=');
    if (equals == std::string::npos)
      return InvalidArgument("--env " + Excerpt(entry, 40) + ": want NAME=VALUE");
    env[entry.substr(0, equals)] = entry.substr(equals + 1);
  }
  if (!env.empty()) body["env"] = env;
  for (const auto& publish : options.publish) {
    auto port = ParsePublish(publish);
    if (!port) return port.error();
    body["ports"].push_back(std::move(*port));
  }
  if (options.ready_port > 0) {
    nlohmann::json get = {{"port", options.ready_port}};
    if (!options.ready_path.empty()) get["path"] = options.ready_path;
    body["ready"] = {{"httpGet", get}};
  }
  if (options.priority != 0) body["priority"] = options.priority;
  if (options.max_duration_s > 0) body["maxDurationSeconds"] = options.max_duration_s;
  if (options.preemptible) body["preemptible"] = true;
  if (!options.mig.empty()) {
    body.erase("gpus");
    body["mig"] = MigRequest(options.mig);
  }
  if (!options.share.empty()) {
    auto share = sharing::ParseShareFlag(options.share);
    if (!share) return share.error();
    body.erase("gpus");
    body["share"] = {{"memory", sharing::FormatMemory(share->memory_bytes)},
                     {"compute", share->compute_percent},
                     {"mode", sharing::ModeName(share->mode)}};
    if (!share->mig_profile.empty()) body["share"]["mig"] = share->mig_profile;
  }
  return body;
}

}  // namespace tessera::cli
