// The client config through the real `tessera` binary against a real tessera-serve (null
// backend): login, contexts, the resolution order (flag, environment, context, default) for
// `tessera top` and `tessera doctor`, hostile config files, and the shell completion scripts.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "cli/completion_script.h"
#include "serve/null_serve_fixture.h"
#include "support/hostile_files.h"

namespace tessera::testing {
namespace {

std::string Quote(const std::string& word) {
  std::string out = "'";
  for (char c : word)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class ClientConfigE2e : public NullServeTest {
 protected:
  void SetUp() override {
    NullServeTest::SetUp();
    for (const char* name : {"TESSERA_SERVER", "TESSERA_TOKEN", "TESSERA_TOKEN_FILE",
                             "TESSERA_CA_FILE", "TESSERA_CONFIG", "XDG_CONFIG_HOME"})
      ::unsetenv(name);
    StartServe();
    url_ = "http://127.0.0.1:" + std::to_string(serve_->port());
    config_ = home_.path() + "/conf/tessera/config.yaml";
    admin_file_ = home_.path() + "/admin.token";
    std::ofstream(admin_file_) << serve_->admin_token() << "\n";
    wrong_file_ = home_.path() + "/wrong.token";
    std::ofstream(wrong_file_) << "tsa_wrong\n";
  }

  // `tessera ARGS` in `cwd` with TESSERA_CONFIG and `env` ("NAME=value" words); stdout and
  // stderr together.
  std::string Tessera(const std::string& args, int* status, const std::string& env = "",
                      const std::string& cwd = "") {
    const std::string dir = cwd.empty() ? home_.path() : cwd;
    return RunCommand("cd " + Quote(dir) + " && env TESSERA_CONFIG=" + Quote(config_) + " " + env +
                          " " + TesseraBinary() + " " + args + " 2>&1",
                      status);
  }
  // `tessera top --once` and more: 0 when it read the server's telemetry.
  int Top(const std::string& args, const std::string& env = "", std::string* out = nullptr) {
    int status = -1;
    std::string text = Tessera("top --once " + args, &status, env);
    if (out) *out = text;
    return status;
  }
  void WriteConfig(const std::string& text) {
    ::mkdir((home_.path() + "/conf").c_str(), 0700);
    ::mkdir((home_.path() + "/conf/tessera").c_str(), 0700);
    std::ofstream(config_) << text;
  }

  TempDir home_;
  std::string url_, config_, admin_file_, wrong_file_;
};

TEST_F(ClientConfigE2e, LoginThenVerbsNeedNoFlags) {
  int status = -1;
  // A token the server refuses is not kept.
  std::string out = Tessera("login --server " + url_ + " --token-file " + wrong_file_, &status);
  EXPECT_EQ(status, 6) << out;
  EXPECT_EQ(::access(config_.c_str(), F_OK), -1) << "written after a refused login";
  out = Tessera("login --server " + url_ + " --token-file admin.token", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("Logged in to " + url_ + " as the admin."), std::string::npos) << out;
  EXPECT_NE(out.find("Context 127.0.0.1, the current one, written to " + config_),
            std::string::npos)
      << out;
  struct stat info {};
  ASSERT_EQ(::stat(config_.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  // The token file is kept by its absolute path; the token itself is nowhere in the file.
  const std::string view = Tessera("config view", &status);
  EXPECT_EQ(status, 0) << view;
  EXPECT_NE(view.find("token-file: \"" + admin_file_ + "\""), std::string::npos) << view;
  EXPECT_EQ(view.find(serve_->admin_token()), std::string::npos) << view;
  // No flags: the current context's server and token.
  out.clear();
  EXPECT_EQ(Top("", "", &out), 0) << out;
  EXPECT_NE(out.find("tessera top - " + url_), std::string::npos) << out;
  // A tenancy's token is shown as its tenancy.
  const std::string tenant = TenancyToken(*admin_, "team-a");
  ASSERT_NE(tenant, "");
  std::ofstream(home_.path() + "/team-a.token") << tenant;
  out = Tessera("login --server " + url_ + " --token-file team-a.token --context team-a", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("as tenancy team-a."), std::string::npos) << out;
  // --no-check keeps a context whose server is not there.
  out = Tessera(
      "login --no-check --server http://127.0.0.1:1 --token-file admin.token --context "
      "gone",
      &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("Context gone (not checked)"), std::string::npos) << out;
  EXPECT_NE(Top(""), 0);  // the current context is now "gone"
}

TEST_F(ClientConfigE2e, ContextsAreListedSwitchedAndDeleted) {
  WriteConfig(
      "current-context: good\ncontexts:\n"
      "  - {name: good, server: '" +
      url_ + "', token-file: '" + admin_file_ +
      "'}\n"
      "  - {name: bad, server: '" +
      url_ + "', token-file: '" + wrong_file_ + "'}\n");
  int status = -1;
  std::string out = Tessera("config get-contexts", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("CURRENT   NAME   SERVER"), std::string::npos) << out;
  EXPECT_NE(out.find("*         good   " + url_), std::string::npos) << out;
  EXPECT_NE(out.find("\n          bad    " + url_), std::string::npos) << out;
  out = Tessera("config get-contexts -o json", &status);
  EXPECT_EQ(status, 0) << out;
  auto doc = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << out;
  EXPECT_EQ(doc["current-context"], "good");
  EXPECT_EQ(doc["contexts"][1]["token-file"], wrong_file_);
  EXPECT_EQ(Top(""), 0);
  out = Tessera("config use-context bad", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(Top("", "", &out), 0) << out;
  EXPECT_NE(out.find("HTTP 401"), std::string::npos) << out;
  out = Tessera("config use-context missing", &status);
  EXPECT_EQ(status, 3) << out;
  out = Tessera("config delete-context bad", &status);
  EXPECT_EQ(status, 0) << out;
  out = Tessera("config get-contexts -o json", &status);
  doc = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << out;
  EXPECT_EQ(doc["current-context"], "") << out;  // the deleted one was current
  ASSERT_EQ(doc["contexts"].size(), 1u) << out;
  EXPECT_EQ(doc["contexts"][0]["name"], "good");
  out = Tessera("config delete-context bad", &status);
  EXPECT_NE(out.find("context bad: not in the client config " + config_), std::string::npos) << out;
  EXPECT_EQ(status, 3);
}

TEST_F(ClientConfigE2e, FlagBeatsEnvironmentBeatsContextBeatsDefault) {
  WriteConfig(
      "current-context: bad\ncontexts:\n"
      "  - {name: good, server: '" +
      url_ + "', token-file: '" + admin_file_ +
      "'}\n"
      "  - {name: bad, server: '" +
      url_ + "', token-file: '" + wrong_file_ +
      "'}\n"
      "  - {name: nowhere, server: 'http://127.0.0.1:1', token-file: '" +
      admin_file_ + "'}\n");
  const std::string closed = "TESSERA_SERVER=http://127.0.0.1:1";
  // Context: --context beats the current one; a --context that is not there is not found.
  EXPECT_NE(Top(""), 0);
  EXPECT_EQ(Top("--context good"), 0);
  std::string out;
  EXPECT_EQ(Top("--context elsewhere", "", &out), 3) << out;
  // Environment beats the context, the flag beats the environment.
  EXPECT_EQ(Top("", "TESSERA_TOKEN_FILE=" + admin_file_), 0);
  EXPECT_EQ(Top("--context good", "TESSERA_TOKEN_FILE=" + wrong_file_, &out), 4) << out;
  EXPECT_EQ(Top("--context good --token-file " + admin_file_, "TESSERA_TOKEN_FILE=" + wrong_file_),
            0);
  EXPECT_EQ(Top("", "TESSERA_TOKEN=" + serve_->admin_token()), 0);
  EXPECT_NE(Top("--context good", closed), 0);
  EXPECT_EQ(Top("--context good --server " + url_, closed), 0);
  EXPECT_EQ(Top("--context nowhere --server " + url_), 0);
  // Default: tessera-data/admin.token in the working directory, with nothing else named.
  const std::string cwd = home_.path() + "/here";
  ::mkdir(cwd.c_str(), 0700);
  ::mkdir((cwd + "/tessera-data").c_str(), 0700);
  std::ofstream(cwd + "/tessera-data/admin.token") << serve_->admin_token();
  WriteConfig("contexts: []\n");
  int status = -1;
  out = Tessera("top --once --server " + url_, &status, "", cwd);
  EXPECT_EQ(status, 0) << out;
  out = Tessera("top --once --server " + url_, &status, "", home_.path());
  EXPECT_NE(status, 0) << out;  // no token found: asked without one, and refused
  EXPECT_NE(out.find("HTTP 401"), std::string::npos) << out;
}

TEST_F(ClientConfigE2e, DoctorAsksTheServerOfAContext) {
  WriteConfig(
      "current-context: good\ncontexts:\n"
      "  - {name: good, server: '" +
      url_ + "', token-file: '" + admin_file_ + "'}\n");
  int status = -1;
  const std::string doctor = "doctor --root " + root_ +
                             " --containerd-version 1.7.20 "
                             "--podman-version 4.3.1 ";
  std::string out = Tessera(doctor + "--context good", &status);
  EXPECT_NE(out.find("PASS  gpu.faults"), std::string::npos) << out;
  EXPECT_NE(out.find("GPUs, none out after a fault"), std::string::npos) << out;
  // --server with the context's token; without either, the server is not asked.
  out = Tessera(doctor + "--server " + url_, &status);
  EXPECT_NE(out.find("PASS  gpu.faults"), std::string::npos) << out;
  out = Tessera(doctor, &status);
  EXPECT_EQ(out.find("gpu.faults"), std::string::npos) << out;
}

TEST_F(ClientConfigE2e, HostileConfigFilesAreRefusedNamingThem) {
  HostileFiles files(".yaml");
  std::vector<HostileFile> all = files.all();
  const std::string bomb = home_.path() + "/bomb.yaml";
  std::ofstream(bomb) << AliasBomb("current-context: \"\"\n", "contexts");
  const std::string deep = home_.path() + "/deep.yaml";
  std::ofstream(deep) << "contexts: " << std::string(5000, '[') << std::string(5000, ']') << "\n";
  for (const auto& args : {std::string("config view"), std::string("top --once"),
                           std::string("config get-contexts")}) {
    std::vector<std::string> argv = {TesseraBinary()};
    for (size_t at = 0, next; at < args.size(); at = next + 1) {
      next = std::min(args.find(' ', at), args.size());
      argv.push_back(args.substr(at, next - at));
    }
    for (const auto& file : all) {
      LimitedRun run = RunUnderLimits(argv, kHostileFileAddressSpace, std::chrono::seconds(60),
                                      {"TESSERA_CONFIG=" + file.path});
      EXPECT_EQ(RefusalProblem(run, file.path, ReasonFor(file)), "") << args << ": " << file.kind;
    }
    LimitedRun run = RunUnderLimits(argv, kHostileFileAddressSpace, std::chrono::seconds(60),
                                    {"TESSERA_CONFIG=" + bomb});
    EXPECT_EQ(RefusalProblem(run, bomb, "with its aliases expanded"), "") << args;
    run = RunUnderLimits(argv, kHostileFileAddressSpace, std::chrono::seconds(60),
                         {"TESSERA_CONFIG=" + deep});
    EXPECT_EQ(RefusalProblem(run, deep, "nested deeper than"), "") << args;
    EXPECT_EQ(run.exit_code, 2) << run.output;
  }
}

TEST_F(ClientConfigE2e, BashCompletionOffersTheAppsOwnVerbsFlagsAndChoices) {
  const auto complete = [](const std::string& words, int cword) {
    int status = -1;
    std::string out =
        RunCommand("bash -c " +
                       Quote("source <(" + TesseraBinary() + " completion bash) && COMP_WORDS=(" +
                             words + ") && COMP_CWORD=" + std::to_string(cword) +
                             " && _tessera && echo \" ${COMPREPLY[*]} \"") +
                       " 2>&1",
                   &status);
    EXPECT_EQ(status, 0) << out;
    return out;
  };
  std::string out = complete("tessera ''", 1);
  for (const char* verb : {" run ", " top ", " serve ", " inventory ", " login ", " config ",
                           " completion ", " doctor "})
    EXPECT_NE(out.find(verb), std::string::npos) << verb << " in " << out;
  out = complete("tessera top -", 2);
  for (const char* flag : {" --server ", " --token-file ", " --context ", " --once ", " --help "})
    EXPECT_NE(out.find(flag), std::string::npos) << flag << " in " << out;
  EXPECT_EQ(out.find(" run "), std::string::npos) << out;
  out = complete("tessera config ''", 2);
  EXPECT_EQ(out, " delete-context get-contexts use-context view \n") << out;
  out = complete("tessera config get-contexts -o ''", 4);
  EXPECT_EQ(out, " csv json table wide yaml \n") << out;
  out = complete("tessera completion ''", 2);
  EXPECT_EQ(out, " bash zsh \n") << out;
  // After an option that takes a value comes its value, not an option; after a flag, anything.
  out = complete("tessera top --server -", 3);
  EXPECT_EQ(out.find(" --once "), std::string::npos) << out;
  out = complete("tessera top --once -", 3);
  EXPECT_NE(out.find(" --server "), std::string::npos) << out;
  // A flag is not taken for an option with a value: the subcommand after it is found.
  out = complete("tessera config -h get-contexts -", 4);
  EXPECT_NE(out.find(" --output "), std::string::npos) << out;
  EXPECT_NE(out.find(" --no-headers "), std::string::npos) << out;
}

TEST(CompletionScript, AnOptionsValueIsNotTakenForASubcommand) {
  cli::CompletionCommand root{"tessera", {{{"--at"}, true, {}}}, {}, {}};
  root.subcommands.push_back({"one", {{{"--x"}, false, {}}}, {}, {}});
  root.subcommands.push_back({"two", {{{"--y"}, true, {"a", "b", "not plain"}}}, {}, {}});
  TempDir dir;
  std::ofstream(dir.path() + "/script") << cli::BashCompletion(root);
  const auto complete = [&](const std::string& words, int cword) {
    return RunCommand("bash -c " +
                      Quote("source " + dir.path() + "/script && COMP_WORDS=(" + words +
                            ") && COMP_CWORD=" + std::to_string(cword) +
                            " && _tessera && echo \" ${COMPREPLY[*]} \"") +
                      " 2>&1");
  };
  EXPECT_EQ(complete("tessera --at one -", 3), " --at \n");  // "one" is --at's value
  EXPECT_EQ(complete("tessera one -", 2), " --x \n");
  EXPECT_EQ(complete("tessera two --y ''", 3), " a b \n");  // a word that is not plain is left out
}

TEST_F(ClientConfigE2e, ZshCompletionIsValidZshAndOffersTheVerbs) {
  ASSERT_FALSE(RunCommand("command -v zsh").empty())
      << "zsh is not installed (scripts/setup-test-tools.sh installs it)";
  const std::string script = home_.path() + "/_tessera";
  int status = -1;
  RunCommand(TesseraBinary() + " completion zsh > " + script, &status);
  ASSERT_EQ(status, 0);
  std::string out = RunCommand("zsh -n " + script + " 2>&1", &status);
  EXPECT_EQ(status, 0) << out;
  out = RunCommand("HOME=" + home_.path() + " zsh -f -c " +
                       Quote("autoload -U compinit && compinit -u -d " + home_.path() +
                             "/zcompdump && source " + script +
                             " && _tessera_subcommands tessera && _tessera_choices "
                             "'tessera config get-contexts' --output") +
                       " 2>&1",
                   &status);
  EXPECT_EQ(status, 0) << out;
  for (const char* verb : {" completion ", " config ", " login ", " top ", " run "})
    EXPECT_NE((" " + out).find(verb), std::string::npos) << verb << " in " << out;
  EXPECT_NE(out.find("csv json table wide yaml"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera::testing
