// `tessera stop ID...`: stops each container (DELETE /v1/containers/{id}: SIGTERM, then SIGKILL
// after the service's grace; a pending one leaves the queue) and prints each ID whose stop was
// taken. It goes on through the list after a failure and exits with the first failure's code.
#include <cstdio>
#include <memory>

#include "cli/api_session.h"
#include "cli/commands.h"
#include "cli/container_follow.h"

namespace tessera::cli {
namespace {

struct StopFlags {
  ApiFlags api;
  std::vector<std::string> ids;
};

void Stop(const StopFlags& flags) {
  ApiSession session = ConnectOrFail(flags.api);
  int exit_code = 0;
  for (const auto& id : flags.ids) {
    auto path = ContainerPath(id);
    Result<nlohmann::json> stopped =
        path ? session.Json("DELETE", *path) : Result<nlohmann::json>(path.error());
    if (!stopped) {
      std::fprintf(stderr, "tessera: %s\n", stopped.error().message.c_str());
      if (exit_code == 0) exit_code = ExitCodeFor(stopped.error());
      continue;
    }
    std::printf("%s\n", id.c_str());
    std::fflush(stdout);
  }
  if (exit_code != 0) throw CLI::RuntimeError(exit_code);
}

}  // namespace

void AddStopCommand(CLI::App& app) {
  auto flags = std::make_shared<StopFlags>();
  CLI::App* stop = app.add_subcommand(
      "stop", "Stop containers: tessera stop ID... (prints each ID whose stop was taken)");
  AddApiOptions(stop, flags->api);
  stop->add_option("ID", flags->ids, "The containers' IDs")->required();
  stop->callback([flags] { Stop(*flags); });
}

}  // namespace tessera::cli
