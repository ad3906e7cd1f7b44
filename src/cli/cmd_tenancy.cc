// `tessera tenancy create|list|get|set|delete`: the tenancies and their scheduling policy, over
// /v1/tenancies (admin; a tenant token reads its own).
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/api_session.h"
#include "cli/commands.h"
#include "client/admin_requests.h"
#include "client/admin_views.h"

namespace tessera::cli {
namespace tenancy_cmd {

using nlohmann::json;

struct Flags {
  ApiFlags api;
  OutputFlags output;
  std::string name;
  std::string weight, quota_gpus, quota_pending, max_priority;
  bool requeue = false;
  std::vector<std::string> labels;
  // Which of the policy flags were given (an empty value is not "not given").
  CLI::Option* weight_option = nullptr;
  CLI::Option* quota_gpus_option = nullptr;
  CLI::Option* quota_pending_option = nullptr;
  CLI::Option* max_priority_option = nullptr;
  CLI::Option* requeue_option = nullptr;
};

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

client::TenancyFlagValues Values(const Flags& flags) {
  client::TenancyFlagValues values;
  auto given = [](CLI::Option* option, const std::string& value) {
    return option && option->count() > 0 ? std::optional<std::string>(value) : std::nullopt;
  };
  values.weight = given(flags.weight_option, flags.weight);
  values.quota_gpus = given(flags.quota_gpus_option, flags.quota_gpus);
  values.quota_pending = given(flags.quota_pending_option, flags.quota_pending);
  values.max_priority = given(flags.max_priority_option, flags.max_priority);
  if (flags.requeue_option && flags.requeue_option->count() > 0)
    values.requeue_on_gpu_fault = flags.requeue;
  values.labels = flags.labels;
  return values;
}

// The NAME argument, checked before it goes into a path.
std::string NamePath(const Flags& flags) {
  auto name = client::PathSegment(flags.name, "tenancy");
  if (!name) Fail(name.error());
  return "/v1/tenancies/" + *name;
}

void PrintTenancies(const Flags& flags, const json& doc) {
  auto table = client::TenancyTable(doc, NowMs());
  if (!table) Fail(table.error());
  PrintOutput(flags.output, doc, *table);
}

void AddPolicyOptions(CLI::App* command, Flags& flags, bool removing) {
  flags.weight_option = command->add_option("--weight", flags.weight,
                                            "Weight of its fair share (0.001..1000; default 1)");
  flags.quota_gpus_option = command->add_option(
      "--quota-gpus", flags.quota_gpus, "GPUs it may hold at once, or unlimited (the default)");
  flags.quota_pending_option =
      command->add_option("--quota-pending", flags.quota_pending,
                          "GPU requests it may have waiting, or unlimited (default: the "
                          "service's --default-pending-quota)");
  flags.max_priority_option = command->add_option(
      "--max-priority", flags.max_priority, "Highest priority its requests may ask (-1000..1000)");
  flags.requeue_option =
      command->add_flag("--requeue-on-gpu-fault,!--no-requeue-on-gpu-fault", flags.requeue,
                        "Submit a request again when a GPU fault stops it");
  command
      ->add_option("--label", flags.labels,
                   removing ? "KEY=VALUE to set a label, KEY- to remove one (repeatable)"
                            : "KEY=VALUE label (repeatable)")
      ->allow_extra_args(false);
}

void Create(const Flags& flags) {
  auto body = client::NewTenancyBody(Values(flags));
  if (!body) Fail(body.error());
  const std::string path = NamePath(flags);
  ApiSession session = ConnectOrFail(flags.api);
  // PUT replaces a tenancy's labels and policy: an existing one is changed by `set` only.
  auto existing = session.Json("GET", path);
  if (existing)
    Fail(FailedPrecondition("tenancy " + flags.name +
                            " already exists (tessera tenancy set changes it)"));
  if (existing.error().category != ErrorCategory::kNotFound) Fail(existing.error());
  auto created = session.Json("PUT", path, body->dump());
  if (!created) Fail(created.error());
  PrintTenancies(flags, *created);
}

void Set(const Flags& flags) {
  const client::TenancyFlagValues values = Values(flags);
  if (!values.weight && !values.quota_gpus && !values.quota_pending && !values.max_priority &&
      !values.requeue_on_gpu_fault && values.labels.empty())
    Fail(
        InvalidArgument("tenancy set: nothing to change (give --weight, --quota-gpus, "
                        "--quota-pending, --max-priority, --requeue-on-gpu-fault or --label)"));
  const std::string path = NamePath(flags);
  ApiSession session = ConnectOrFail(flags.api);
  auto stored = session.Json("GET", path);
  if (!stored) Fail(stored.error());
  auto body = client::ChangedTenancyBody(values, *stored);
  if (!body) Fail(body.error());
  auto changed = session.Json("PUT", path, body->dump());
  if (!changed) Fail(changed.error());
  PrintTenancies(flags, *changed);
}

CLI::App* Verb(CLI::App* parent, const std::string& name, const std::string& help,
               std::shared_ptr<Flags>& flags, bool output) {
  flags = std::make_shared<Flags>();
  CLI::App* verb = parent->add_subcommand(name, help);
  AddApiOptions(verb, flags->api);
  if (output) AddOutputOptions(verb, flags->output);
  return verb;
}

}  // namespace tenancy_cmd

void AddTenancyCommand(CLI::App& app) {
  using tenancy_cmd::Flags;
  CLI::App* tenancy = app.add_subcommand(
      "tenancy", "Tenancies and their scheduling policy (admin; a tenant reads its own)");
  tenancy->require_subcommand(1);
  std::shared_ptr<Flags> flags;

  CLI::App* create = tenancy_cmd::Verb(tenancy, "create", "Create a tenancy", flags, true);
  create->add_option("NAME", flags->name, "Its name (a DNS label)")->required();
  tenancy_cmd::AddPolicyOptions(create, *flags, false);
  create->callback([flags] { tenancy_cmd::Create(*flags); });

  CLI::App* list = tenancy_cmd::Verb(tenancy, "list", "List the tenancies", flags, true);
  list->callback([flags] {
    ApiSession session = ConnectOrFail(flags->api);
    auto doc = session.Json("GET", "/v1/tenancies");
    if (!doc) Fail(doc.error());
    tenancy_cmd::PrintTenancies(*flags, *doc);
  });

  CLI::App* get = tenancy_cmd::Verb(tenancy, "get", "Show one tenancy", flags, true);
  get->add_option("NAME", flags->name, "The tenancy")->required();
  get->callback([flags] {
    const std::string path = tenancy_cmd::NamePath(*flags);
    ApiSession session = ConnectOrFail(flags->api);
    auto doc = session.Json("GET", path);
    if (!doc) Fail(doc.error());
    tenancy_cmd::PrintTenancies(*flags, *doc);
  });

  CLI::App* set = tenancy_cmd::Verb(
      tenancy, "set", "Change a tenancy: only what the flags name changes", flags, true);
  set->add_option("NAME", flags->name, "The tenancy")->required();
  tenancy_cmd::AddPolicyOptions(set, *flags, true);
  set->callback([flags] { tenancy_cmd::Set(*flags); });

  CLI::App* remove = tenancy_cmd::Verb(
      tenancy, "delete",
      "Delete a tenancy with its network, volumes and tokens (refused while it has a pending or "
      "running container)",
      flags, false);
  remove->add_option("NAME", flags->name, "The tenancy")->required();
  remove->callback([flags] {
    const std::string path = tenancy_cmd::NamePath(*flags);
    ApiSession session = ConnectOrFail(flags->api);
    auto deleted = session.Json("DELETE", path);
    if (!deleted) Fail(deleted.error());
    std::printf("tenancy %s deleted\n", flags->name.c_str());
  });
}

}  // namespace tessera::cli
