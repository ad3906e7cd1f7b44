// `tessera completion bash|zsh`: a completion script for the shell, generated from this very
// app's tree (completion_script.h), so that every subcommand, option and choice is offered as
// registered.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/completion_script.h"

namespace tessera::cli {
namespace {

// The values an IsMember check names: CLI11 describes them as "{a,b,c}".
std::vector<std::string> ChoicesOf(CLI::Option* option) {
  std::vector<std::string> choices;
  for (int i = 0;; ++i) {
    CLI::Validator* validator = nullptr;
    try {
      validator = option->get_validator(i);
    } catch (const CLI::OptionNotFound&) {
      break;
    }
    const std::string described = validator->get_description();
    if (described.size() < 2 || described.front() != '{' || described.back() != '}') continue;
    std::string item;
    for (char c : described.substr(1, described.size() - 2) + ",") {
      if (c != ',') {
        item += c;
      } else if (!item.empty()) {
        choices.push_back(item);
        item.clear();
      }
    }
  }
  return choices;
}

CompletionCommand DescribeForCompletion(CLI::App* app) {
  CompletionCommand command;
  command.name = app->get_name();
  for (CLI::Option* option : app->get_options()) {
    if (option->get_group().empty()) continue;  // hidden
    if (option->get_positional() && option->get_lnames().empty() && option->get_snames().empty()) {
      auto choices = ChoicesOf(option);
      command.positional_choices.insert(command.positional_choices.end(), choices.begin(),
                                        choices.end());
      continue;
    }
    CompletionOption described;
    for (const auto& name : option->get_lnames())
      described.names.push_back("--" + name);
    for (const auto& name : option->get_snames())
      described.names.push_back("-" + name);
    described.takes_value = option->get_items_expected_max() > 0;  // flags expect none
    described.choices = ChoicesOf(option);
    command.options.push_back(std::move(described));
  }
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_group().empty() || sub->get_name().empty()) continue;  // hidden
    command.subcommands.push_back(DescribeForCompletion(sub));
  }
  return command;
}

}  // namespace

void AddCompletionCommand(CLI::App& app) {
  auto shell = std::make_shared<std::string>();
  CLI::App* completion = app.add_subcommand(
      "completion",
      "Print a completion script for bash or zsh: source <(tessera completion bash), or "
      "tessera completion zsh > \"${fpath[1]}/_tessera\"");
  completion->add_option("shell", *shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
  CLI::App* root = &app;
  completion->callback([shell, root] {
    CompletionCommand tree = DescribeForCompletion(root);
    tree.name = "tessera";  // the app is named after argv[0], a path
    const std::string script = *shell == "zsh" ? ZshCompletion(tree) : BashCompletion(tree);
    std::fwrite(script.data(), 1, script.size(), stdout);
  });
}

}  // namespace tessera::cli
