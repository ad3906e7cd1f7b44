// `tessera wait ID...`: waits until each container has ended and prints its exit code (125 when it
// failed to run), one line each; exits with the last one's code, as `docker wait` does. A
// container that cannot be asked for is named on stderr, and the first such error's code is
// the exit code.
#include <cstdio>
#include <memory>

#include "cli/api_session.h"
#include "cli/commands.h"
#include "cli/container_follow.h"

namespace tessera::cli {
namespace {

struct WaitFlags {
  ApiFlags api;
  std::vector<std::string> ids;
};

void Wait(const WaitFlags& flags) {
  ApiSession session = ConnectOrFail(flags.api);
  int last = 0;
  int error_code = 0;
  for (const auto& id : flags.ids) {
    auto ended = WaitEnded(session, id);
    if (!ended) {
      std::fprintf(stderr, "tessera: %s\n", ended.error().message.c_str());
      if (error_code == 0) error_code = ExitCodeFor(ended.error());
      continue;
    }
    last = ExitCodeOf(*ended);
    if (TextOf(*ended, "state") == "failed")
      std::fprintf(stderr, "tessera: %s failed: %s\n", id.c_str(), ReasonOf(*ended).c_str());
    std::printf("%d\n", last);
    std::fflush(stdout);
  }
  const int code = error_code != 0 ? error_code : last;
  if (code != 0) throw CLI::RuntimeError(code);
}

}  // namespace

void AddWaitCommand(CLI::App& app) {
  auto flags = std::make_shared<WaitFlags>();
  CLI::App* wait = app.add_subcommand(
      "wait",
      "Wait until containers have ended: tessera wait ID... (prints each exit code; exits with "
      "the last one's)");
  AddApiOptions(wait, flags->api);
  wait->add_option("ID", flags->ids, "The containers' IDs")->required();
  wait->callback([flags] { Wait(*flags); });
}

}  // namespace tessera::cli
