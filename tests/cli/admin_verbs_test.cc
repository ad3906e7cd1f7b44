// The operator verbs (`tessera tenancy`, `token`, `gpus`, `gpu`, `audit`): the real binary against
// a real tessera-serve (null backend), their table and JSON output compared with golden files,
// and the token rules per verb: a tenant's or read-only token gets the API's refusal (exit 6),
// and a tenant's `tessera gpus` names no other tenancy's holder.
#include <sys/stat.h>

#include <fstream>
#include <regex>

#include "cli/golden.h"
#include "serve/null_serve_fixture.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

// What varies besides what golden.h normalises: tenancy UIDs (16 hex digits), token secrets,
// request IDs.
const std::vector<GoldenRule> kAdminRules = {
    {"([\\s\"])[0-9a-f]{16}(?=[\\s\"])", "$1<uid>"},
    {"\\btsr_[0-9a-f]{48}\\b", "tsr_<secret>"},
    {"\\br-[0-9a-f]{8,32}-[0-9]+\\b", "r-<request>"},
};

class AdminVerbs : public NullServeTest {
 protected:
  void Start(std::vector<std::string> extra = {}) {
    // The GPUs' option ROMs written before the service reads its baselines: the fixture tree is
    // shared, and the listings show the baselines.
    WriteGpuRoms(root_);
    StartServe(std::move(extra));
    cli_ = std::make_unique<TesseraCli>("http://127.0.0.1:" + std::to_string(serve_->port()),
                                        serve_->admin_token());
  }

  CliResult Run(const std::vector<std::string>& args, const std::string& token = "") {
    cli_->set_token(token.empty() ? serve_->admin_token() : token);
    return cli_->Run(args);
  }

  // Runs, expects `exit_code`, and compares with tests/cli/golden/<name>.txt.
  CliResult Golden(const std::string& name, const std::vector<std::string>& args, int exit_code = 0,
                   const std::string& token = "") {
    CliResult result = Run(args, token);
    EXPECT_EQ(result.exit_code, exit_code) << result.command << "\n" << result.out << result.err;
    ExpectGolden(name, result, serve_->port(), kAdminRules);
    return result;
  }

  json Api(const std::string& method, const std::string& path, const std::string& body = "",
           int* status = nullptr) {
    return CallJson(*admin_, method, path, body, status);
  }

  std::string Submit(const std::string& tenancy, int gpus) {
    int status = 0;
    json accepted = Api(
        "POST", "/v1/containers",
        json({{"image", "busybox"}, {"tenancy", tenancy}, {"gpus", gpus}, {"command", {"true"}}})
            .dump(),
        &status);
    EXPECT_EQ(status, 202) << accepted;
    return accepted.value("id", "");
  }

  std::string ContainerState(const std::string& id) {
    return Api("GET", "/v1/containers/" + id).value("state", "");
  }

  std::unique_ptr<TesseraCli> cli_;
};

TEST_F(AdminVerbs, TenancyCreateListGetSetDelete) {
  Start();
  Golden("tenancy-create", {"tenancy", "create", "alpha", "--weight", "2", "--quota-gpus", "4",
                            "--max-priority", "10", "--label", "team=vision"});
  Golden("tenancy-create-exists", {"tenancy", "create", "alpha"}, 5);
  Golden("tenancy-create-beta",
         {"tenancy", "create", "beta", "--requeue-on-gpu-fault", "-o", "json"});
  // `set` changes only what it names: alpha's label, weight and max priority stay.
  Golden("tenancy-set",
         {"tenancy", "set", "alpha", "--quota-pending", "50", "--label", "tier=gold"});
  json alpha = Api("GET", "/v1/tenancies/alpha");
  EXPECT_EQ(alpha["labels"], json({{"team", "vision"}, {"tier", "gold"}})) << alpha;
  EXPECT_EQ(alpha["weight"], 2.0);
  EXPECT_EQ(alpha["maxPriority"], 10);
  EXPECT_EQ(alpha["quota"], json({{"gpus", 4}, {"pending", 50}}));
  Golden("tenancy-set-unlimited", {"tenancy", "set", "alpha", "--quota-gpus", "unlimited",
                                   "--label", "team-", "--no-requeue-on-gpu-fault"});
  alpha = Api("GET", "/v1/tenancies/alpha");
  EXPECT_EQ(alpha["labels"], json({{"tier", "gold"}})) << alpha;
  EXPECT_EQ(alpha["quota"], json({{"gpus", nullptr}, {"pending", 50}}));
  EXPECT_EQ(alpha["weight"], 2.0);
  Golden("tenancy-list", {"tenancy", "list"});
  Golden("tenancy-list-wide", {"tenancy", "list", "-o", "wide"});
  Golden("tenancy-get-json", {"tenancy", "get", "alpha", "-o", "json"});
  Golden("tenancy-get-yaml", {"tenancy", "get", "beta", "-o", "yaml"});
  Golden("tenancy-get-missing", {"tenancy", "get", "gamma"}, 3);
  Golden("tenancy-set-nothing", {"tenancy", "set", "alpha"}, 2);
  Golden("tenancy-set-bad-weight", {"tenancy", "set", "alpha", "--weight", "heavy"}, 2);
  Golden("tenancy-set-refused", {"tenancy", "set", "alpha", "--weight", "5000"}, 2);

  // Refused while one of its containers waits (quota 0 keeps it pending), then deleted.
  ASSERT_EQ(Run({"tenancy", "set", "beta", "--quota-gpus", "0"}).exit_code, 0);
  const std::string waiting = Submit("beta", 1);
  ASSERT_EQ(ContainerState(waiting), "pending");
  Golden("tenancy-delete-refused", {"tenancy", "delete", "beta"}, 5);
  int status = 0;
  Api("DELETE", "/v1/containers/" + waiting, "", &status);
  ASSERT_EQ(status, 200);
  ASSERT_TRUE(WaitUntil([&] { return ContainerState(waiting) != "pending"; }));
  Golden("tenancy-delete", {"tenancy", "delete", "beta"});
  Api("GET", "/v1/tenancies/beta", "", &status);
  EXPECT_EQ(status, 404);
}

TEST_F(AdminVerbs, TenancyNamesThatWouldSteerThePathAreRefusedBeforeAnyCall) {
  Start();
  for (const std::string name : {"../tokens", "alpha?x=1", "a/b", "a b", "a%2Fb"}) {
    CliResult result = Run({"tenancy", "get", name});
    EXPECT_EQ(result.exit_code, 2) << name << ": " << result.err;
    EXPECT_NE(result.err.find("tenancy"), std::string::npos) << result.err;
  }
  // Nothing reached the service: the audit trail has no refusal either.
  EXPECT_EQ(Api("GET", "/v1/audit")["records"], json::array());
}

TEST_F(AdminVerbs, TokenCreateListRevoke) {
  Start();
  ASSERT_EQ(Run({"tenancy", "create", "alpha"}).exit_code, 0);
  Golden("token-create",
         {"token", "create", "--tenancy", "alpha", "--scope", "read-only", "--expires", "30d"});
  // -q: the secret alone on stdout, for a script; it works as alpha's token.
  CliResult quiet = Run({"token", "create", "--tenancy", "alpha", "-q"});
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_TRUE(std::regex_match(quiet.out, std::regex("tsr_[0-9a-f]{48}\n"))) << quiet.out;
  const std::string secret = quiet.out.substr(0, quiet.out.size() - 1);
  EXPECT_EQ(Run({"tenancy", "get", "alpha"}, secret).exit_code, 0);
  Golden("token-create-metrics", {"token", "create", "--metrics", "-o", "json"});
  Golden("token-create-neither", {"token", "create"}, 2);
  Golden("token-create-bad-expiry", {"token", "create", "--tenancy", "alpha", "--expires", "30"},
         2);
  Golden("token-list", {"token", "list"});
  CliResult listed =
      Golden("token-list-alpha-json", {"token", "list", "--tenancy", "alpha", "-o", "json"});
  json tokens = json::parse(listed.out, nullptr, false);
  ASSERT_TRUE(tokens.is_object() && tokens["tokens"].size() == 2) << listed.out;
  // The tenant token (the second) revoked with an unknown ID: the known one goes, exit 3.
  const std::string id = tokens["tokens"][1].value("id", "");
  Golden("token-revoke", {"token", "revoke", "t-unknown", id}, 3);
  CliResult revoked = Run({"tenancy", "get", "alpha"}, secret);
  EXPECT_EQ(revoked.exit_code, 6) << revoked.err;
  Golden("token-list-after-revoke", {"token", "list", "--tenancy", "alpha"});
}

// A firmware check that waits for the test keeps a released GPU in `checking`, still naming the
// container that held it: the holder the token rules hide from other tenancies.
class AdminVerbsHeldGpu : public AdminVerbs {
 protected:
  void SetUp() override {
    AdminVerbs::SetUp();
    go_ = dir_.path() + "/go";
    const std::string script = dir_.path() + "/check.sh";
    WriteFile(script, "#!/bin/sh\ni=0\nwhile [ ! -e " + go_ +
                          " ] && [ $i -lt 1800 ]; do sleep 0.1; i=$((i+1)); done\nexit 0\n");
    ::chmod(script.c_str(), 0755);
    Start({"--firmware-check-command", script, "--firmware-check-timeout-ms", "300000"});
  }
  void TearDown() override { WriteFile(go_, "go\n"); }

  // alpha's container ends at once (null backend); its GPU waits in its check.
  std::string HoldOneGpu() {
    const std::string id = Submit("alpha", 1);
    std::string held;
    EXPECT_TRUE(WaitUntil([&] {
      const json listing = Api("GET", "/v1/gpus");
      for (const auto& gpu : listing["gpus"])
        if (gpu.value("state", "") == "checking" && gpu.value("container_id", "") == id)
          held = gpu.value("id", "");
      return !held.empty();
    })) << Api("GET", "/v1/gpus");
    return held;
  }

  std::string go_;
};

TEST_F(AdminVerbsHeldGpu, GpusShowsAHolderOnlyToTheAdminAndItsTenancy) {
  const std::string alpha = TenancyToken(*admin_, "alpha");
  const std::string beta = TenancyToken(*admin_, "beta");
  ASSERT_FALSE(alpha.empty() || beta.empty());
  const std::string held = HoldOneGpu();
  ASSERT_FALSE(held.empty());
  Golden("gpus-admin", {"gpus"});
  Golden("gpus-admin-wide", {"gpus", "-o", "wide"});
  Golden("gpus-alpha", {"gpus"}, 0, alpha);
  CliResult other = Golden("gpus-beta", {"gpus"}, 0, beta);
  EXPECT_EQ(other.out.find("alpha"), std::string::npos) << other.out;
  EXPECT_EQ(other.out.find("c-"), std::string::npos) << other.out;
  EXPECT_NE(other.out.find("checking"), std::string::npos) << other.out;
  CliResult beta_json = Run({"gpus", "-o", "json"}, beta);
  ASSERT_EQ(beta_json.exit_code, 0) << beta_json.err;
  EXPECT_EQ(beta_json.out.find("alpha"), std::string::npos) << beta_json.out;
}

TEST_F(AdminVerbs, GpuDrainUndrainQuarantineRelease) {
  Start();
  const std::string gpu = Api("GET", "/v1/gpus")["gpus"][0].value("id", "");
  ASSERT_FALSE(gpu.empty());
  Golden("gpu-drain", {"gpu", "drain", gpu, "--reason", "firmware upgrade"});
  Golden("gpu-undrain", {"gpu", "undrain", gpu, "-o", "json"});
  Golden("gpu-quarantine", {"gpu", "quarantine", gpu, "--reason", "ECC errors"});
  Golden("gpu-undrain-quarantined", {"gpu", "undrain", gpu}, 5);
  Golden("gpu-release", {"gpu", "release", gpu});
  Golden("gpu-missing", {"gpu", "drain", "0000:ee:00.0"}, 3);
  Golden("gpu-bad-id", {"gpu", "drain", "0000:18:00.0/../x"}, 2);
  Golden("gpus-json", {"gpus", "-o", "json"});
}

TEST_F(AdminVerbs, AuditFiltersAndFollowsPages) {
  Start();
  ASSERT_EQ(Run({"tenancy", "create", "alpha"}).exit_code, 0);
  ASSERT_EQ(Run({"tenancy", "create", "beta"}).exit_code, 0);
  ASSERT_EQ(Run({"token", "create", "--tenancy", "alpha", "-q"}).exit_code, 0);
  ASSERT_EQ(Run({"tenancy", "set", "beta", "--weight", "3"}).exit_code, 0);
  Golden("audit", {"audit"});
  Golden("audit-wide-beta", {"audit", "--tenancy", "beta", "--since", "1h", "-o", "wide"});
  Golden("audit-action-json", {"audit", "--action", "token.create", "-o", "json"});
  Golden("audit-limit", {"audit", "--limit", "2"});
  Golden("audit-bad-since", {"audit", "--since", "yesterday"}, 2);
  Golden("audit-bad-limit", {"audit", "--limit", "-1"}, 2);
  // More than a page: --follow-pages reads on up to --limit, and says where the rest begins.
  for (int i = 0; i < 1001; ++i) {
    int status = 0;
    Api("PUT", "/v1/tenancies/alpha", R"({"weight":2})", &status);
    ASSERT_EQ(status, 200);
  }
  CliResult page = Run({"audit", "--action", "tenancy.put", "--limit", "1500", "-o", "json"});
  ASSERT_EQ(page.exit_code, 0) << page.err;
  json first = json::parse(page.out, nullptr, false);
  EXPECT_EQ(first["records"].size(), 1000u);
  EXPECT_TRUE(first.contains("next"));
  CliResult all =
      Run({"audit", "--action", "tenancy.put", "--limit", "1500", "--follow-pages", "-o", "json"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  json gathered = json::parse(all.out, nullptr, false);
  EXPECT_EQ(gathered["records"].size(), 1004u);  // 3 by the verbs above, 1001 here
  EXPECT_FALSE(gathered.contains("next"));
  CliResult some =
      Run({"audit", "--action", "tenancy.put", "--limit", "1002", "--follow-pages", "-o", "json"});
  json limited = json::parse(some.out, nullptr, false);
  EXPECT_EQ(limited["records"].size(), 1002u);
  EXPECT_TRUE(limited.contains("next"));
}

TEST_F(AdminVerbs, TenantAndReadOnlyTokensGetTheApisRefusal) {
  Start();
  const std::string tenant = TenancyToken(*admin_, "alpha");
  ASSERT_FALSE(tenant.empty());
  int status = 0;
  const json read_only =
      Api("POST", "/v1/tenancies/alpha/tokens", R"({"scope":"read-only"})", &status);
  ASSERT_EQ(status, 201) << read_only;
  const std::string reader = read_only.value("token", "");
  Golden("tenant-tenancy-create", {"tenancy", "create", "gamma"}, 6, tenant);
  Golden("tenant-tenancy-set", {"tenancy", "set", "alpha", "--weight", "9"}, 6, tenant);
  Golden("tenant-tenancy-delete", {"tenancy", "delete", "alpha"}, 6, tenant);
  Golden("tenant-tenancy-list", {"tenancy", "list"}, 0, tenant);
  Golden("tenant-token-list", {"token", "list"}, 6, tenant);
  Golden("tenant-token-create", {"token", "create", "--tenancy", "alpha"}, 6, tenant);
  Golden("tenant-audit", {"audit"}, 6, tenant);
  Golden("tenant-gpu-drain", {"gpu", "drain", "0000:18:00.0"}, 6, tenant);
  Golden("read-only-gpus", {"gpus", "--no-headers"}, 0, reader);
  Golden("read-only-gpu-drain", {"gpu", "drain", "0000:18:00.0"}, 6, reader);
  // Nothing changed: the GPU is free and no tenancy gamma exists.
  EXPECT_EQ(Api("GET", "/v1/gpus/0000:18:00.0").value("state", ""), "free");
  Api("GET", "/v1/tenancies/gamma", "", &status);
  EXPECT_EQ(status, 404);
}

}  // namespace
}  // namespace tessera::testing
