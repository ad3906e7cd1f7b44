// `tessera ps`: the containers the token sees, pages of GET /v1/containers followed with `next`;
// pending and running ones unless -a (as docker ps).
#include <chrono>
#include <cstdio>
#include <memory>
#include <set>

#include "cli/api_session.h"
#include "cli/commands.h"
#include "client/views.h"
#include "common/untrusted_text.h"

namespace tessera::cli {
namespace {

using nlohmann::json;

struct PsFlags {
  ApiFlags api;
  OutputFlags output;
  bool all = false;
  std::string states;  // --state S[,S]
  std::string tenancy;
};

int64_t PsNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Every page's containers in one list; stops at kMaxListedContainers, or where `next` repeats.
json ReadAllContainers(ApiSession& session, const std::string& states, const std::string& tenancy) {
  json all = json::array();
  std::string after;
  std::set<std::string> seen;
  for (;;) {
    auto page = session.Json("GET", client::ContainersQuery(states, tenancy, after));
    if (!page) Fail(page.error());
    const json& items = client::FieldOf(*page, "containers");
    if (!items.is_array())
      Fail(Unavailable("GET /v1/containers: the answer has no containers list"));
    for (const auto& item : items) {
      if (all.size() >= client::kMaxListedContainers) {
        std::fprintf(stderr, "tessera: only the first %zu containers are listed\n",
                     client::kMaxListedContainers);
        return all;
      }
      all.push_back(item);
    }
    const json& next = client::FieldOf(*page, "next");
    if (!next.is_string() || next.get_ref<const std::string&>().empty()) return all;
    after = next.get<std::string>();
    if (after.size() > 1024 || !seen.insert(after).second)
      Fail(Unavailable("GET /v1/containers: the answer's next page is " + Excerpt(after, 40) +
                       " again"));
  }
}

void Ps(const PsFlags& flags) {
  ApiSession session = ConnectOrFail(flags.api);
  std::string states = flags.states;
  if (states.empty() && !flags.all) states = "pending,running";
  json containers = ReadAllContainers(session, states, flags.tenancy);
  PrintOutput(flags.output, {{"containers", containers}},
              client::ContainersTable(containers, PsNowMs()));
}

}  // namespace

void AddPsCommand(CLI::App& app) {
  auto flags = std::make_shared<PsFlags>();
  CLI::App* ps = app.add_subcommand(
      "ps", "List containers: pending and running ones (-a: every state) the token sees");
  ps->add_flag("-a,--all", flags->all, "Every state, ended containers too");
  ps->add_option("--state", flags->states,
                 "Only these states: pending, running, exited, failed (comma-separated)");
  ps->add_option("--tenancy", flags->tenancy, "Only this tenancy's containers");
  AddApiOptions(ps, flags->api);
  AddOutputOptions(ps, flags->output);
  ps->callback([flags] { Ps(*flags); });
}

}  // namespace tessera::cli
