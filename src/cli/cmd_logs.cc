// `tessera logs [-f] [--tail N] ID`: a container's output (stdout and stderr as the runtime
// recorded them), passed through unchanged as podman and kubectl do; -f follows it until the
// container has ended.
#include <cstdio>
#include <memory>

#include "cli/api_session.h"
#include "cli/commands.h"
#include "cli/container_follow.h"

namespace tessera::cli {
namespace {

struct LogsFlags {
  ApiFlags api;
  bool follow = false;
  size_t tail = 0;  // 0: all of it
  std::string id;
};

void Logs(const LogsFlags& flags) {
  auto path = ContainerPath(flags.id);
  if (!path) Fail(path.error());
  ApiSession session = ConnectOrFail(flags.api);
  auto tail = flags.tail > 0 ? std::optional<size_t>(flags.tail) : std::nullopt;
  auto answer = ReadLogs(session, *path, 0, tail);
  if (!answer) Fail(answer.error());
  std::fwrite(answer->text.data(), 1, answer->text.size(), stdout);
  std::fflush(stdout);
  if (!flags.follow) return;
  if (Status followed = FollowLogs(session, flags.id, answer->offset); !followed.ok())
    Fail(followed.error());
}

}  // namespace

void AddLogsCommand(CLI::App& app) {
  auto flags = std::make_shared<LogsFlags>();
  CLI::App* logs = app.add_subcommand(
      "logs", "A container's output: tessera logs [-f] [--tail N] ID (-f: until it has ended)");
  AddApiOptions(logs, flags->api);
  logs->add_flag("-f,--follow", flags->follow,
                 "Go on printing its output as it comes, until it has ended");
  logs->add_option("--tail", flags->tail, "Only its last N lines (1..100000)")
      ->check(CLI::Range(size_t{1}, size_t{100000}));
  logs->add_option("ID", flags->id, "The container's ID")->required();
  logs->callback([flags] { Logs(*flags); });
}

}  // namespace tessera::cli
