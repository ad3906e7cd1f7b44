// `tessera serve` (execs tessera-serve, which holds the heavy dependencies) and `tessera run`, a
// one-shot client: submit a container, wait for it, print its output, exit with its code.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "client/client.h"
#include "common/bounded_file.h"
#include "sharing/sharing.h"

namespace tessera::cli {
namespace {

// tessera-serve next to this executable (the build tree and `make install` both put it there),
// else from PATH.
std::string ServeBinary() {
  std::error_code error;
  auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    auto candidate = self.parent_path() / "tessera-serve";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "tessera-serve";
}

void ExecServe(const std::vector<std::string>& args) {
  std::string binary = ServeBinary();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const auto& arg : args)
    argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  ::execvp(binary.c_str(), argv.data());
  Fail(ErrnoError("exec " + binary, errno));
}

struct RunFlags {
  int gpus = 0;
  std::string tenancy = "default";
  std::string isolation = "runc";
  std::string server;
  std::string token_file;
  client::TlsOptions tls;
  std::vector<std::string> env;
  int priority = 0;
  int64_t max_duration_s = 0;  // 0: no limit
  bool preemptible = false;
  std::string mig;    // PROFILE[xCOUNT]: MIG slices instead of --gpus
  std::string share;  // MEMORY,COMPUTE[,mps|timeslice]: a share of one GPU instead of --gpus
  int poll_ms = 10;
};

std::string Token(const RunFlags& flags) {
  auto token = ApiToken(flags.token_file);
  if (!token) Fail(token.error());
  return *token;
}

std::string ErrorText(const client::Response& response) {
  auto doc = nlohmann::json::parse(response.body, nullptr, false);
  if (doc.is_object() && doc.contains("error") && doc["error"].is_object())
    return doc["error"].value("message", response.body);
  return response.body;
}

// The POST /v1/containers body for `tessera run IMAGE [COMMAND...]`.
nlohmann::json RunRequest(const RunFlags& flags, const std::vector<std::string>& rest) {
  nlohmann::json body = {{"image", rest[0]},
                         {"tenancy", flags.tenancy},
                         {"gpus", flags.gpus},
                         {"isolation", flags.isolation}};
  if (rest.size() > 1) body["command"] = std::vector<std::string>(rest.begin() + 1, rest.end());
  nlohmann::json env = nlohmann::json::object();
  for (const auto& entry : flags.env) {
    auto equals = entry.find('=');
    if (equals == std::string::npos) Fail(InvalidArgument("--env " + entry + ": want NAME=VALUE"));
    env[entry.substr(0, equals)] = entry.substr(equals + 1);
  }
  if (!env.empty()) body["env"] = env;
  if (flags.priority != 0) body["priority"] = flags.priority;
  if (flags.max_duration_s > 0) body["maxDurationSeconds"] = flags.max_duration_s;
  if (flags.preemptible) body["preemptible"] = true;
  if (!flags.mig.empty()) {
    // "1g.10gb" or "1g.10gbx2"; the service checks the profile and the count.
    std::string profile = flags.mig;
    int count = 1;
    if (auto x = profile.rfind('x');
        x != std::string::npos && x + 1 < profile.size() &&
        profile.find_first_not_of("0123456789", x + 1) == std::string::npos) {
      count = std::stoi(profile.substr(x + 1, 3));
      profile.resize(x);
    }
    body.erase("gpus");
    body["mig"] = {{"profile", profile}, {"count", count}};
  }
  if (!flags.share.empty()) {
    auto share = sharing::ParseShareFlag(flags.share);
    if (!share) Fail(share.error());
    body.erase("gpus");
    body["share"] = {{"memory", sharing::FormatMemory(share->memory_bytes)},
                     {"compute", share->compute_percent},
                     {"mode", sharing::ModeName(share->mode)}};
  }
  return body;
}

// The container record the service answered the submission with.
nlohmann::json Submit(client::Connection& connection, const nlohmann::json& body) {
  auto submitted = connection.Call("POST", "/v1/containers", body.dump());
  if (!submitted) Fail(submitted.error());
  if (submitted->status != 202)
    Fail(Error{submitted->status == 400 ? ErrorCategory::kInvalidArgument
                                        : ErrorCategory::kFailedPrecondition,
               "submit: HTTP " + std::to_string(submitted->status) + ": " + ErrorText(*submitted)});
  auto container = nlohmann::json::parse(submitted->body, nullptr, false);
  if (!container.is_object()) Fail(Internal("submit: answer is not JSON"));
  return container;
}

// Polls the container until it has exited or failed, and returns its last record.
nlohmann::json WaitUntilDone(client::Connection& connection, const RunFlags& flags,
                             nlohmann::json container) {
  const std::string id = container.value("id", "");
  std::string state = container.value("state", "");
  // While it waits in the queue: why, each time that changes (stderr; stdout is its output).
  std::string told;
  auto tell_wait = [&told, &id](const nlohmann::json& record) {
    if (record.value("state", "") != "pending") return;
    const auto reason = record.value("reason", "");
    if (reason.empty() || reason == told) return;
    told = reason;
    const int position = record.value("queue_position", 0);
    std::fprintf(stderr, "tessera: %s %s (queue position %d)\n", id.c_str(), reason.c_str(),
                 position);
  };
  while (state != "exited" && state != "failed") {
    std::this_thread::sleep_for(std::chrono::milliseconds(flags.poll_ms));
    auto got = connection.Call("GET", "/v1/containers/" + id);
    if (!got) Fail(got.error());
    if (got->status != 200)
      Fail(Internal("container " + id + ": HTTP " + std::to_string(got->status)));
    container = nlohmann::json::parse(got->body, nullptr, false);
    if (!container.is_object()) Fail(Internal("container " + id + ": answer is not JSON"));
    state = container.value("state", "");
    tell_wait(container);
  }
  return container;
}

void Run(const RunFlags& flags, const std::vector<std::string>& rest) {
  if (rest.empty()) Fail(InvalidArgument("run: IMAGE is required"));
  auto endpoint = client::ParseServer(ApiServer(flags.server));
  if (!endpoint) Fail(endpoint.error());
  client::Connection connection(*endpoint, Token(flags), flags.tls);

  const nlohmann::json container =
      WaitUntilDone(connection, flags, Submit(connection, RunRequest(flags, rest)));
  const std::string id = container.value("id", "");
  const std::string state = container.value("state", "");
  auto logs = connection.Call("GET", "/v1/containers/" + id + "/logs");
  if (logs && logs->status == 200) {
    std::fwrite(logs->body.data(), 1, logs->body.size(), stdout);
    std::fflush(stdout);
  }
  if (state == "failed") {
    std::fprintf(stderr, "tessera: container %s failed: %s\n", id.c_str(),
                 container.value("reason", "").c_str());
    throw CLI::RuntimeError(125);
  }
  int code = container["exit_code"].is_number_integer() ? container["exit_code"].get<int>() : 125;
  if (code != 0) throw CLI::RuntimeError(code);
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  CLI::App* serve = app.add_subcommand(
      "serve",
      "GPU containers as a service on this host (REST API, dashboard; runs tessera-serve)");
  serve->prefix_command();
  serve->allow_extras();
  serve->set_help_flag();  // --help goes to tessera-serve
  serve->callback([serve] { ExecServe(serve->remaining()); });

  auto flags = std::make_shared<RunFlags>();
  CLI::App* run = app.add_subcommand(
      "run",
      "Run one container through `tessera serve` and wait: tessera run [--gpus N] IMAGE "
      "[COMMAND...]; prints its output and exits with its code");
  run->prefix_command();
  run->add_option("--gpus", flags->gpus, "GPUs to give it (0..8)")->capture_default_str();
  run->add_option("--tenancy", flags->tenancy, "Tenancy to run in")->capture_default_str();
  run->add_option("--isolation", flags->isolation, "runc, gvisor or kata")
      ->check(CLI::IsMember({"runc", "gvisor", "kata"}))
      ->capture_default_str();
  run->add_option("--server", flags->server,
                  "API address (default $TESSERA_SERVER or http://127.0.0.1:8080)");
  run->add_option("--token-file", flags->token_file,
                  "Token file (default $TESSERA_TOKEN, $TESSERA_TOKEN_FILE, "
                  "tessera-data/admin.token)");
  AddTlsOptions(run, flags->tls);
  run->add_option("-e,--env", flags->env, "NAME=VALUE (repeatable)");
  run->add_option("--priority", flags->priority,
                  "Order among the tenancy's own pending containers (up to its maxPriority)")
      ->capture_default_str();
  run->add_option("--max-duration", flags->max_duration_s,
                  "Seconds after which the service stops it (maxDurationSeconds; 0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{366} * 24 * 3600));
  run->add_flag("--preemptible", flags->preemptible,
                "It may be stopped (reason \"preempted\") for a more urgent request");
  run->add_option("--mig", flags->mig,
                  "MIG slices instead of --gpus: PROFILE or PROFILExCOUNT (1g.10gb, 1g.10gbx2)")
      ->excludes("--gpus");
  run->add_option("--share", flags->share,
                  "A share of one GPU instead of --gpus: MEMORY,COMPUTE[,mps|timeslice] "
                  "(20Gi,25: 20 GiB and 25% of its SMs, MPS)")
      ->excludes("--gpus")
      ->excludes("--mig");
  run->callback([run, flags] { Run(*flags, run->remaining()); });
}

}  // namespace tessera::cli
