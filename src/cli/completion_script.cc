// Bash and zsh completion scripts from a command tree (completion_script.h). Both scripts share
// the same lookup functions (POSIX `case` tables keyed by the subcommand path); only the function
// that reads the command line and offers the words differs.
#include "cli/completion_script.h"

#include <algorithm>
#include <string_view>

namespace tessera::cli {
namespace {

bool PlainWord(std::string_view word) {
  if (word.empty()) return false;
  return std::all_of(word.begin(), word.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("._:/=+@,-").find(c) != std::string_view::npos;
  });
}

// The plain ones of `words`, sorted, without repeats, separated by spaces.
std::string CompletionWords(std::vector<std::string> words) {
  words.erase(
      std::remove_if(words.begin(), words.end(), [](const auto& w) { return !PlainWord(w); }),
      words.end());
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
  std::string out;
  for (const auto& word : words)
    out += (out.empty() ? "" : " ") + word;
  return out;
}

struct CompletionTables {
  std::string subcommands, options, valued, choices, positional;
};

void AddCaseLine(std::string& table, const std::string& key, const std::string& list) {
  if (!list.empty()) table += "    \"" + key + "\") printf '%s\\n' \"" + list + "\" ;;\n";
}

void CollectTables(const CompletionCommand& command, const std::string& path,
                   CompletionTables& tables) {
  std::vector<std::string> names, options, valued;
  for (const auto& sub : command.subcommands)
    if (PlainWord(sub.name)) names.push_back(sub.name);
  for (const auto& option : command.options) {
    options.insert(options.end(), option.names.begin(), option.names.end());
    if (option.takes_value) valued.insert(valued.end(), option.names.begin(), option.names.end());
    for (const auto& name : option.names)
      if (PlainWord(name))
        AddCaseLine(tables.choices, path + "|" + name, CompletionWords(option.choices));
  }
  AddCaseLine(tables.subcommands, path, CompletionWords(names));
  AddCaseLine(tables.options, path, CompletionWords(options));
  AddCaseLine(tables.valued, path, CompletionWords(valued));
  AddCaseLine(tables.positional, path, CompletionWords(command.positional_choices));
  for (const auto& sub : command.subcommands)
    if (PlainWord(sub.name)) CollectTables(sub, path + " " + sub.name, tables);
}

std::string CaseFunction(const std::string& name, const std::string& key,
                         const std::string& table) {
  return name + "() {\n  case \"" + key + "\" in\n" + table + "  esac\n}\n";
}

// The lookup functions, and <fn>_path: the subcommand path named by its arguments (the words
// after the program's name), skipping options' values.
std::string SharedFunctions(const CompletionCommand& root, const std::string& fn) {
  CompletionTables tables;
  CollectTables(root, root.name, tables);
  std::string out;
  out += CaseFunction(fn + "_subcommands", "$1", tables.subcommands);
  out += CaseFunction(fn + "_options", "$1", tables.options);
  out += CaseFunction(fn + "_valued", "$1", tables.valued);
  out += CaseFunction(fn + "_choices", "$1|$2", tables.choices);
  out += CaseFunction(fn + "_positional", "$1", tables.positional);
  out += fn +
         "_has() {\n  case \" $1 \" in\n    *\" $2 \"*) [ -n \"$2\" ] ;;\n    *) return 1 ;;\n"
         "  esac\n}\n";
  out += fn + "_path() {\n  local cmdpath=\"" + root.name + "\" skip=0 word\n" +
         "  for word in \"$@\"; do\n"
         "    if [ \"$skip\" = 1 ]; then skip=0; continue; fi\n"
         "    if " +
         fn + "_has \"$(" + fn +
         "_valued \"$cmdpath\")\" \"$word\"; then skip=1; "
         "continue; fi\n"
         "    if " +
         fn + "_has \"$(" + fn +
         "_subcommands \"$cmdpath\")\" \"$word\"; then "
         "cmdpath=\"$cmdpath $word\"; fi\n"
         "  done\n  printf '%s\\n' \"$cmdpath\"\n}\n";
  return out;
}

std::string FunctionName(const CompletionCommand& root) {
  std::string fn = "_" + root.name;
  for (char& c : fn)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) c = '_';
  return fn;
}

}  // namespace

std::string BashCompletion(const CompletionCommand& root) {
  const std::string fn = FunctionName(root);
  std::string out =
      "# bash completion for " + root.name + ": source <(" + root.name + " completion bash)\n";
  out += SharedFunctions(root, fn);
  out += fn +
         "() {\n"
         "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"\" cmdpath list\n"
         "  [ \"$COMP_CWORD\" -gt 1 ] && prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
         "  cmdpath=\"$(" +
         fn +
         "_path \"${COMP_WORDS[@]:1:COMP_CWORD-1}\")\"\n"
         "  if " +
         fn + "_has \"$(" + fn +
         "_valued \"$cmdpath\")\" \"$prev\"; then\n"
         "    list=\"$(" +
         fn +
         "_choices \"$cmdpath\" \"$prev\")\"\n"
         "    if [ -n \"$list\" ]; then COMPREPLY=($(compgen -W \"$list\" -- \"$cur\"));\n"
         "    else COMPREPLY=($(compgen -f -- \"$cur\")); fi\n"
         "    return 0\n"
         "  fi\n"
         "  if [[ \"$cur\" == -* ]]; then list=\"$(" +
         fn +
         "_options \"$cmdpath\")\"\n"
         "  else list=\"$(" +
         fn + "_subcommands \"$cmdpath\") $(" + fn +
         "_positional \"$cmdpath\")\"; fi\n"
         "  COMPREPLY=($(compgen -W \"$list\" -- \"$cur\"))\n"
         "  if [ ${#COMPREPLY[@]} -eq 0 ] && [[ \"$cur\" != -* ]]; then\n"
         "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
         "  fi\n"
         "  return 0\n"
         "}\n";
  return out + "complete -F " + fn + " " + root.name + "\n";
}

std::string ZshCompletion(const CompletionCommand& root) {
  const std::string fn = FunctionName(root);
  std::string out = "#compdef " + root.name + "\n# zsh completion for " + root.name +
                    ": in $fpath as " + fn + ", or source <(" + root.name +
                    " completion zsh) after compinit\n";
  out += SharedFunctions(root, fn);
  out += fn +
         "() {\n"
         "  local cur=\"${words[CURRENT]}\" prev=\"\" cmdpath list\n"
         "  (( CURRENT > 2 )) && prev=\"${words[CURRENT-1]}\"\n"
         "  cmdpath=\"$(" +
         fn +
         "_path \"${(@)words[2,CURRENT-1]}\")\"\n"
         "  if " +
         fn + "_has \"$(" + fn +
         "_valued \"$cmdpath\")\" \"$prev\"; then\n"
         "    list=\"$(" +
         fn +
         "_choices \"$cmdpath\" \"$prev\")\"\n"
         "    if [[ -n \"$list\" ]]; then compadd -- ${=list}; else _files; fi\n"
         "    return\n"
         "  fi\n"
         "  if [[ \"$cur\" == -* ]]; then list=\"$(" +
         fn +
         "_options \"$cmdpath\")\"\n"
         "  else list=\"$(" +
         fn + "_subcommands \"$cmdpath\") $(" + fn +
         "_positional \"$cmdpath\")\"; fi\n"
         "  if [[ -n \"${list// /}\" ]]; then compadd -- ${=list}; else _files; fi\n"
         "}\n";
  return out + "if [ \"${funcstack[1]}\" = \"" + fn + "\" ]; then\n  " + fn +
         " \"$@\"\nelse\n  compdef " + fn + " " + root.name + "\nfi\n";
}

}  // namespace tessera::cli
