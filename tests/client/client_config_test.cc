// The client config: its text parsed strictly and written back the same, its file read with
// the bounds of every operator file (hostile files, nesting, aliases) and written privately.
#include "client/client_config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "client/client_config_codec.h"
#include "support/file_text.h"
#include "support/fixture_host.h"
#include "support/hostile_files.h"

namespace tessera::testing {
namespace {

using client::ClientConfig;
using client::ClientContext;

bool operator==(const ClientContext& a, const ClientContext& b) {
  return a.name == b.name && a.server == b.server && a.token_file == b.token_file &&
         a.ca_file == b.ca_file && a.client_cert == b.client_cert && a.client_key == b.client_key;
}

ClientConfig TwoContexts() {
  ClientConfig config;
  config.current = "lab";
  config.contexts.push_back({"prod.example", "https://tessera.example:8443", "/etc/tessera/token",
                             "/etc/tessera/ca.pem", "/home/a b/\"me\".pem",
                             "/home/a b/key #1: x\\y.pem"});
  config.contexts.push_back(
      {"lab", "http://127.0.0.1:8080", "/tmp/\xc3\xa9t\xc3\xa9/token", "", "", ""});
  return config;
}

// The error's message, or "" when it parsed.
std::string ParseError(const std::string& text) {
  auto config = client::ParseClientConfig(text);
  return config ? "" : config.error().message;
}

TEST(ClientConfigText, FormatThenParseGivesTheSameConfig) {
  const ClientConfig config = TwoContexts();
  const std::string text = client::FormatClientConfig(config);
  auto parsed = client::ParseClientConfig(text);
  ASSERT_TRUE(parsed) << parsed.error().message << "\n" << text;
  EXPECT_EQ(parsed->current, "lab");
  ASSERT_EQ(parsed->contexts.size(), 2u);
  EXPECT_TRUE(parsed->contexts[0] == config.contexts[0]) << text;
  EXPECT_TRUE(parsed->contexts[1] == config.contexts[1]) << text;
  EXPECT_EQ(client::FormatClientConfig(*parsed), text);
  // Find: the named context, else the current one.
  ASSERT_NE(parsed->Find(""), nullptr);
  EXPECT_EQ(parsed->Find("")->name, "lab");
  EXPECT_EQ(parsed->Find("prod.example")->server, "https://tessera.example:8443");
  EXPECT_EQ(parsed->Find("elsewhere"), nullptr);
}

TEST(ClientConfigText, HandWrittenYamlAndEmptyTextParse) {
  auto config = client::ParseClientConfig(
      "# mine\ncurrent-context: a\ncontexts:\n- {name: a, server: 'h:1', token-file: /t}\n");
  ASSERT_TRUE(config) << config.error().message;
  EXPECT_EQ(config->contexts.at(0).server, "h:1");
  for (const char* empty : {"", "# nothing\n", "contexts: []\n", "contexts:\n"}) {
    auto none = client::ParseClientConfig(empty);
    ASSERT_TRUE(none) << empty << ": " << none.error().message;
    EXPECT_TRUE(none->contexts.empty());
    EXPECT_EQ(none->Find(""), nullptr);
  }
}

TEST(ClientConfigText, MalformedConfigsAreRefusedNamingTheField) {
  const std::string ok = "  - name: a\n    server: h:1\n    token-file: /t\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"- a\n", "not a mapping"},
      {"context: []\n", "unknown key \"context\""},
      {"contexts: {a: b}\n", "contexts: not a list"},
      {"contexts:\n" + ok + "    color: red\n", "contexts[0]: unknown key \"color\""},
      {"contexts:\n" + ok + "    server: h:2\n", "contexts[0].server: repeated"},
      {"contexts:\n  - name: a\n    server: [h]\n    token-file: /t\n",
       "contexts[0].server: not a string"},
      {"contexts:\n  - name: a\n    token-file: /t\n", "contexts[0].server: required"},
      {"contexts:\n  - name: a\n    server: h:1\n", "contexts[0].token-file: required"},
      {"contexts:\n  - name: a\n    server: h:1\n    token-file: t\n",
       "contexts[0].token-file: not an absolute path"},
      {"contexts:\n  - name: a\n    server: h:1\n    token-file: /t\n    ca-file: ca.pem\n",
       "contexts[0].ca-file: not an absolute path"},
      {"contexts:\n  - name: a\n    server: h:1\n    token-file: /t\n    client-cert: /c\n",
       "contexts[0]: client-cert and client-key go together"},
      {"contexts:\n  - name: A\n    server: h:1\n    token-file: /t\n",
       "contexts[0].name: A is not a name"},
      {"contexts:\n  - name: " + std::string(64, 'a') + "\n    server: h:1\n    token-file: /t\n",
       "contexts[0].name: longer than 63"},
      {"contexts:\n  - name: a\n    server: \"h\\x01:1\"\n    token-file: /t\n",
       "contexts[0].server: holds a control character"},
      {"contexts:\n  - name: a\n    server: h:1\n    token-file: \"/t\\u2028\"\n",
       "contexts[0].token-file: holds a control character"},
      {"contexts:\n  - name: a\n    server: h:1\n    token-file: \"/\xff\"\n",
       "contexts[0].token-file: not valid UTF-8"},
      {"contexts:\n  - name: a\n    server: 'ftp://h'\n    token-file: /t\n", "contexts[0].server"},
      {"contexts:\n" + ok + ok, "contexts[1].name: a second context named a"},
      {"current-context: b\ncontexts:\n" + ok, "current-context: no context is named b"},
      {"current-context: [a]\n", "current-context: not a string"},
      {"contexts: []\ncontexts: []\n", "contexts: repeated"},
      {"contexts:\n  - name: a\n    server: h:1\n    token-file: /" + std::string(5000, 'x') + "\n",
       "contexts[0].token-file: longer than 4096 bytes"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string error = ParseError(text);
    EXPECT_EQ(error.rfind("client config: " + expected, 0), 0u) << text << "\n=> " << error;
  }
}

TEST(ClientConfigText, ValuesAreNeverEchoedWhole) {
  const std::string secret(2000, 's');
  const std::string error =
      ParseError("contexts:\n  - name: a\n    server: h:1\n    token-file: " + secret + "\n");
  EXPECT_NE(error, "");
  EXPECT_EQ(error.find(secret.substr(0, 100)), std::string::npos) << error;
  EXPECT_EQ(ParseError(secret + ": x\n").find(secret.substr(0, 100)), std::string::npos);
}

TEST(ClientConfigText, TooManyContextsDeepNestingAndAliasBombsAreRefused) {
  std::string many = "contexts:\n";
  for (size_t i = 0; i <= client::kMaxClientContexts; ++i)
    many += "  - {name: c" + std::to_string(i) + ", server: 'h:1', token-file: /t}\n";
  EXPECT_EQ(ParseError(many), "client config: contexts: more than 64");
  std::string deep = "contexts: " + std::string(200, '[') + std::string(200, ']') + "\n";
  EXPECT_NE(ParseError(deep).find("deeper than"), std::string::npos) << ParseError(deep);
  const std::string bomb = AliasBomb("current-context: \"\"\n", "contexts");
  EXPECT_NE(ParseError(bomb).find("with its aliases expanded"), std::string::npos)
      << ParseError(bomb);
}

TEST(ClientConfigContext, LoginsContextIsCheckedLikeTheFilesOwn) {
  ClientContext context{"lab", "http://127.0.0.1:1", "/t", "", "", ""};
  EXPECT_TRUE(client::CheckClientContext(context, "x").ok());
  context.name = "-lab";
  EXPECT_EQ(client::CheckClientContext(context, "x").error().message.rfind("x.name: -lab", 0), 0u);
  EXPECT_FALSE(client::CheckContextName("", "name").ok());
  EXPECT_TRUE(client::CheckContextName("my-lab.example_1", "name").ok());
}

class ClientConfigFile : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  TempDir dir_;
};

TEST_F(ClientConfigFile, MissingIsEmptyAndWrittenIsPrivateAndReadsBack) {
  const std::string path = dir_.path() + "/new/tessera/config.yaml";
  auto missing = client::ReadClientConfig(path);
  ASSERT_TRUE(missing) << missing.error().message;
  EXPECT_TRUE(missing->contexts.empty());
  ASSERT_TRUE(client::WriteClientConfig(path, TwoContexts()).ok());
  struct stat file {
  }, dir{};
  ASSERT_EQ(::stat(path.c_str(), &file), 0);
  ASSERT_EQ(::stat((dir_.path() + "/new/tessera").c_str(), &dir), 0);
  EXPECT_EQ(file.st_mode & 0777, 0600u);
  EXPECT_EQ(dir.st_mode & 0777, 0700u);
  auto read = client::ReadClientConfig(path);
  ASSERT_TRUE(read) << read.error().message;
  EXPECT_EQ(read->current, "lab");
  EXPECT_EQ(read->contexts.size(), 2u);
  // An invalid config is not written: the file stays as it was.
  ClientConfig bad = TwoContexts();
  bad.contexts[1].token_file = "relative/token";
  auto refused = client::WriteClientConfig(path, bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("contexts[1].token-file"), std::string::npos);
  EXPECT_EQ(ReadText(path), client::FormatClientConfig(TwoContexts()));
}

TEST_F(ClientConfigFile, HostileFilesAreRefusedNamingThem) {
  HostileFiles files(".yaml");
  for (const auto& file : files.all()) {
    auto read = client::ReadClientConfig(file.path);
    ASSERT_FALSE(read) << file.kind;
    EXPECT_NE(read.error().message.find(file.path), std::string::npos) << read.error().message;
    EXPECT_NE(read.error().message.find(ReasonFor(file)), std::string::npos)
        << file.kind << ": " << read.error().message;
  }
  auto dir = client::ReadClientConfig(dir_.path());
  ASSERT_FALSE(dir);
  EXPECT_NE(dir.error().message.find("a directory"), std::string::npos) << dir.error().message;
  const std::string big = Write("big.yaml", "# " + std::string(client::kMaxClientConfigBytes, 'x'));
  auto huge = client::ReadClientConfig(big);
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.error().message.find("larger than"), std::string::npos) << huge.error().message;
  const std::string wrong = Write("wrong.yaml", "contexts: 7\n");
  auto typed = client::ReadClientConfig(wrong);
  ASSERT_FALSE(typed);
  EXPECT_EQ(typed.error().message, wrong + ": client config: contexts: not a list");
}

}  // namespace
}  // namespace tessera::testing
