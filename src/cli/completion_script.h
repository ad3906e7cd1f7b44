// Shell completion scripts for `tessera completion bash|zsh`, generated from a description of the
// command tree (cmd_completion.cc builds it from the CLI11 app itself, so every subcommand and
// option registered anywhere is completed). Pure: a tree in, a script out.
#pragma once

#include <string>
#include <vector>

namespace tessera::cli {

struct CompletionOption {
  std::vector<std::string> names;    // "--output", "-o"
  bool takes_value = false;          // the next word is its value, not a subcommand
  std::vector<std::string> choices;  // its values, when it names them
};

struct CompletionCommand {
  std::string name;
  std::vector<CompletionOption> options;
  std::vector<std::string> positional_choices;  // values its positional arguments name
  std::vector<CompletionCommand> subcommands;
};

// A bash script defining _tessera and registering it with `complete` for `root.name`; words
// that are not plain (letters, digits, and . _ : / = + - @ ,) are left out of it.
std::string BashCompletion(const CompletionCommand& root);
// The same for zsh: `#compdef`, usable from $fpath or with `source <(...)` after compinit.
std::string ZshCompletion(const CompletionCommand& root);

}  // namespace tessera::cli
