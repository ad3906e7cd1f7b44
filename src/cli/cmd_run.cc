// `tessera run`: submit a container, show why it waits while pending, stream its output while it
// runs and exit with its code; -d prints its ID once it was accepted and returns.
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "cli/api_session.h"
#include "cli/commands.h"
#include "cli/container_follow.h"
#include "cli/run_request.h"

namespace tessera::cli {
namespace {

struct RunFlags {
  ApiFlags api;
  RunOptions request;
  bool detach = false;
};

// How often a pending container is asked about.
constexpr std::chrono::milliseconds kPendingInterval{250};

// The wait line on stderr: updated in place on a terminal, else a plain line each time the reason
// changes (stdout is the container's output).
class PendingLine {
 public:
  explicit PendingLine(std::string id) : id_(std::move(id)), terminal_(::isatty(2) == 1) {}
  ~PendingLine() { Clear(); }

  void Show(const nlohmann::json& record) {
    const std::string reason = TextOf(record, "reason");
    const auto position = record.find("queue_position");
    const int place =
        position != record.end() && position->is_number_integer() ? position->get<int>() : 0;
    if (reason.empty()) return;
    const std::string text = id_ + " " + reason + " (queue position " + std::to_string(place) + ")";
    if (terminal_) {
      if (text == shown_) return;
      std::fprintf(stderr, "\r\033[Ktessera: %s", text.c_str());
      shown_ = text;
      std::fflush(stderr);
      return;
    }
    if (reason == told_) return;
    told_ = reason;
    std::fprintf(stderr, "tessera: %s\n", text.c_str());
  }
  void Clear() {
    if (!terminal_ || shown_.empty()) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    shown_.clear();
  }

 private:
  std::string id_;
  bool terminal_;
  std::string shown_;  // on the terminal now
  std::string told_;   // the last reason written as a line
};

// Polls until it is no longer pending; returns its record.
nlohmann::json WaitWhilePending(ApiSession& session, const std::string& path,
                                nlohmann::json record) {
  PendingLine line(TextOf(record, "id"));
  while (TextOf(record, "state") == "pending") {
    line.Show(record);
    std::this_thread::sleep_for(kPendingInterval);
    auto got = session.Json("GET", path);
    if (!got) Fail(got.error());
    record = std::move(*got);
  }
  return record;
}

// Prints each published port of the record once its address is known:
// "tessera: c-... port 8080/tcp at 127.0.0.1:30001".
class PortNotes {
 public:
  explicit PortNotes(const nlohmann::json& submitted) {
    auto ports = submitted.find("ports");
    wanted_ = ports != submitted.end() && ports->is_array() ? ports->size() : 0;
  }
  bool done() const { return told_.size() >= wanted_; }

  void Tell(const nlohmann::json& record) {
    auto ports = record.find("ports");
    if (ports == record.end() || !ports->is_array()) return;
    for (const auto& port : *ports) {
      const std::string address = TextOf(port, "address");
      if (address.empty()) continue;
      auto number = port.find("container_port");
      const std::string name =
          (number != port.end() && number->is_number_integer() ? std::to_string(number->get<int>())
                                                               : "?") +
          "/" + (TextOf(port, "protocol").empty() ? "tcp" : TextOf(port, "protocol"));
      if (!told_.insert(name).second) continue;
      std::fprintf(stderr, "tessera: %s port %s at %s\n", TextOf(record, "id").c_str(),
                   name.c_str(), address.c_str());
    }
  }

 private:
  size_t wanted_ = 0;
  std::set<std::string> told_;
};

void Run(const RunFlags& flags, const std::vector<std::string>& rest) {
  auto body = RunRequest(flags.request, rest);
  if (!body) Fail(body.error());
  ApiSession session = ConnectOrFail(flags.api);
  auto submitted = session.Json("POST", "/v1/containers", body->dump());
  if (!submitted) Fail(submitted.error().WithContext("submit"));
  const std::string id = TextOf(*submitted, "id");
  auto path = ContainerPath(id);
  if (!path) Fail(Unavailable("submit: the answer names no container"));
  if (flags.detach) {
    std::printf("%s\n", id.c_str());
    return;
  }
  nlohmann::json record = WaitWhilePending(session, *path, *submitted);
  PortNotes ports(*submitted);
  ports.Tell(record);
  Status followed = FollowLogs(session, id, 0, [&] {
    if (ports.done()) return;
    if (auto got = session.Json("GET", *path); got) ports.Tell(*got);
  });
  if (!followed.ok()) Fail(followed.error());
  auto ended = WaitEnded(session, id);
  if (!ended) Fail(ended.error());
  if (TextOf(*ended, "state") == "failed") {
    std::fprintf(stderr, "tessera: container %s failed: %s\n", id.c_str(),
                 ReasonOf(*ended).c_str());
    throw CLI::RuntimeError(125);
  }
  const int code = ExitCodeOf(*ended);
  if (code != 0) throw CLI::RuntimeError(code);
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  RunOptions& options = flags->request;
  CLI::App* run = app.add_subcommand(
      "run",
      "Run one container through `tessera serve`: tessera run [--gpus N] [-d] [-p PORT] IMAGE "
      "[COMMAND...]; streams its output and exits with its code (-d: prints its ID)");
  run->prefix_command();
  AddApiOptions(run, flags->api);
  run->add_flag("-d,--detach", flags->detach, "Print its ID once it was accepted and return");
  run->add_option("--gpus", options.gpus, "GPUs to give it (0..8)")->capture_default_str();
  run->add_option("--tenancy", options.tenancy, "Tenancy to run in")->capture_default_str();
  run->add_option("--isolation", options.isolation, "runc, gvisor or kata")
      ->check(CLI::IsMember({"runc", "gvisor", "kata"}))
      ->capture_default_str();
  // One value per occurrence: `-e A=1 IMAGE` must leave IMAGE to the positionals.
  run->add_option("-e,--env", options.env, "NAME=VALUE (repeatable)")->allow_extra_args(false);
  run->add_option("-p,--publish", options.publish,
                  "PORT[/udp][:NAME]: publish a port of the container (repeatable); its address "
                  "is printed once it runs")
      ->allow_extra_args(false);
  auto* ready_port = run->add_option("--ready-port", options.ready_port,
                                     "Ready once an HTTP GET of this port answers 2xx or 3xx")
                         ->check(CLI::Range(1, 65535));
  run->add_option("--ready-path", options.ready_path, "The path --ready-port is asked for")
      ->needs(ready_port);
  run->add_option("--priority", options.priority,
                  "Order among the tenancy's own pending containers (up to its maxPriority)")
      ->capture_default_str();
  run->add_option("--max-duration", options.max_duration_s,
                  "Seconds after which the service stops it (maxDurationSeconds; 0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{366} * 24 * 3600));
  run->add_flag("--preemptible", options.preemptible,
                "It may be stopped (reason \"preempted\") for a more urgent request");
  auto* mig =
      run->add_option("--mig", options.mig,
                      "MIG slices instead of --gpus: PROFILE or PROFILExCOUNT (1g.10gb, 1g.10gbx2)")
          ->excludes("--gpus");
  run->add_option("--share", options.share,
                  "A share of one GPU instead of --gpus: [MIG-PROFILE:]MEMORY,COMPUTE"
                  "[,mps|timeslice] (20Gi,25: 20 GiB and 25% of its SMs, MPS; "
                  "3g.40gb:10Gi,50: a share of a 3g.40gb MIG slice)")
      ->excludes("--gpus")
      ->excludes(mig);
  run->callback([run, flags] { Run(*flags, run->remaining()); });
}

}  // namespace tessera::cli
