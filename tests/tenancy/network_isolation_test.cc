// Real tenancy networks on this host: podman (CNI backend) + runc + busybox containers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "support/podman_harness.h"
#include "support/wait.h"
#include "tenancy/tenancy.h"

namespace tessera::tenancy {
namespace {

using tessera::testing::Podman;
using tessera::testing::RunArgv;

std::string Unique(const std::string& what) {
  return "tt" + std::to_string(::getpid()) + "-" + what;
}

bool IptablesHas(const std::vector<std::string>& rule) {
  std::vector<std::string> argv = {"iptables", "-w", "-C", std::string(kIsolationChain)};
  argv.insert(argv.end(), rule.begin(), rule.end());
  return RunArgv(argv).status == 0;
}

// podman run --rm FLAGS IMAGE /bin/sh -c SCRIPT (the harness's RunShell always adds
// --network none, which is exactly what these tests must not do).
tessera::testing::CommandResult RunShell(const std::vector<std::string>& flags,
                                         const std::string& script) {
  std::vector<std::string> args = {"run", "--rm"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {Podman::Get().image(), "/bin/sh", "-c", script});
  return Podman::Get().Run(args);
}

// Removes what a test made, even when an assertion failed half-way.
struct Cleanup {
  std::vector<std::string> containers;
  std::vector<std::string> tenancies;
  ~Cleanup() {
    const auto& podman = Podman::Get();
    for (const auto& c : containers)
      podman.Run({"rm", "-f", "-t", "0", c});
    PodmanTenancy effects;
    for (const auto& t : tenancies) {
      if (!effects.RemoveNetwork(t, true, 0).ok())
        podman.Run({"network", "rm", "-f", NetworkName(t)});
    }
  }
};

class TenancyNetworks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Podman::Get().ready()) GTEST_FAIL() << "podman: " << Podman::Get().setup_error();
  }

  // podman run -d: a listener that answers every connection with `reply`.
  std::string StartListener(const std::string& tenancy, const std::string& name,
                            const std::string& reply) {
    std::vector<std::string> args = {"run", "-d", "--name", name};
    auto net = ContainerNetworkArgs(tenancy, NetworkMode::kTenancy);
    args.insert(args.end(), net.begin(), net.end());
    args.insert(args.end(), {Podman::Get().image(), "/bin/sh", "-c",
                             "while true; do echo " + reply + " | nc -l -p 5000; done"});
    auto started = Podman::Get().Run(args);
    EXPECT_EQ(started.status, 0) << started.output;
    auto ip = Podman::Get().Run(
        {"inspect", name, "--format",
         "{{(index .NetworkSettings.Networks \"" + NetworkName(tenancy) + "\").IPAddress}}"});
    EXPECT_EQ(ip.status, 0) << ip.output;
    std::string address = ip.output.substr(0, ip.output.find('\n'));
    EXPECT_FALSE(address.empty());
    return address;
  }

  // A one-shot client container of `tenancy` connecting to address:5000 with a 3 s timeout.
  tessera::testing::CommandResult Connect(const std::string& tenancy, const std::string& address) {
    return RunShell(ContainerNetworkArgs(tenancy, NetworkMode::kTenancy),
                    "nc -w 3 " + address + " 5000 </dev/null; echo rc=$?");
  }
};

TEST_F(TenancyNetworks, OtherTenancyCannotConnectSameTenancyCan) {
  Cleanup cleanup;
  const std::string a = Unique("a"), b = Unique("b");
  cleanup.tenancies = {a, b};
  PodmanTenancy effects;
  auto net_a = effects.EnsureNetwork(a);
  ASSERT_TRUE(net_a.ok()) << net_a.error().message;
  auto net_b = effects.EnsureNetwork(b);
  ASSERT_TRUE(net_b.ok()) << net_b.error().message;
  EXPECT_TRUE(net_a->internal);
  EXPECT_NE(net_a->bridge, net_b->bridge);  // one bridge per tenancy
  EXPECT_EQ(net_a->labels.at(std::string(kTenancyLabel)), a);
  for (const auto& rule : IsolationRules(net_a->bridge, a))
    EXPECT_TRUE(IptablesHas(rule));
  // Repeating is harmless (idempotent): still exactly one of each rule afterwards is checked
  // by removal below finding them.
  ASSERT_TRUE(effects.EnsureNetwork(a).ok());

  const std::string listener = Unique("listener-a");
  cleanup.containers.push_back(listener);
  const std::string address = StartListener(a, listener, "hello-from-a");
  ASSERT_FALSE(address.empty());

  // Same tenancy: accepted (retried until the listener listens).
  std::string same;
  tessera::testing::WaitUntil(
      [&] {
        same = Connect(a, address).output;
        return same.find("hello-from-a") != std::string::npos;
      },
      tessera::testing::kEventTimeout, std::chrono::milliseconds(300));
  EXPECT_NE(same.find("hello-from-a"), std::string::npos) << same;

  // Other tenancy: refused or timed out, never answered.
  auto other = Connect(b, address);
  EXPECT_EQ(other.output.find("hello-from-a"), std::string::npos) << other.output;
  EXPECT_NE(other.output.find("rc=1"), std::string::npos) << other.output;

  // Podman's default network is another place a container could come from: also refused.
  auto default_net =
      RunShell({"--network", "podman"}, "nc -w 3 " + address + " 5000 </dev/null; echo rc=$?");
  EXPECT_EQ(default_net.output.find("hello-from-a"), std::string::npos) << default_net.output;

  // The listener still answers its own tenancy after the refused attempts.
  EXPECT_NE(Connect(a, address).output.find("hello-from-a"), std::string::npos);
}

TEST_F(TenancyNetworks, NetworkNoneHasOnlyLoopback) {
  auto result = RunShell(ContainerNetworkArgs("any", NetworkMode::kNone),
                         "ls /sys/class/net; echo ---; ip -o -4 addr");
  ASSERT_EQ(result.status, 0) << result.output;
  std::string interfaces = result.output.substr(0, result.output.find("---"));
  EXPECT_EQ(interfaces, "lo\n") << result.output;
  std::string addresses = result.output.substr(result.output.find("---") + 4);
  EXPECT_NE(addresses.find("127.0.0.1"), std::string::npos);
  EXPECT_EQ(addresses.find("eth"), std::string::npos) << addresses;
}

TEST_F(TenancyNetworks, RemovedOnlyWhenEmptyAndTakesItsFirewallRules) {
  Cleanup cleanup;
  const std::string t = Unique("rm");
  cleanup.tenancies = {t};
  PodmanTenancy effects;
  auto net = effects.EnsureNetwork(t);
  ASSERT_TRUE(net.ok()) << net.error().message;

  EXPECT_EQ(effects.RemoveNetwork(t, false, 0).error().category,
            ErrorCategory::kFailedPrecondition);
  const std::string c = Unique("rm-c");
  cleanup.containers.push_back(c);
  std::vector<std::string> args = {"create", "--name", c};
  auto flags = ContainerNetworkArgs(t, NetworkMode::kTenancy);
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {Podman::Get().image(), "true"});
  ASSERT_EQ(Podman::Get().Run(args).status, 0);
  // Even if the caller's count were wrong, podman's own refusal is reported, rules stay.
  auto busy = effects.RemoveNetwork(t, true, 0);
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.error().category, ErrorCategory::kFailedPrecondition) << busy.error().message;
  for (const auto& rule : IsolationRules(net->bridge, t))
    EXPECT_TRUE(IptablesHas(rule));

  ASSERT_EQ(Podman::Get().Run({"rm", "-f", c}).status, 0);
  auto removed = effects.RemoveNetwork(t, true, 0);
  ASSERT_TRUE(removed.ok()) << removed.error().message;
  EXPECT_EQ(effects.InspectNetwork(t).error().category, ErrorCategory::kNotFound);
  for (const auto& rule : IsolationRules(net->bridge, t))
    EXPECT_FALSE(IptablesHas(rule));
  EXPECT_TRUE(effects.RemoveNetwork(t, true, 0).ok());  // already gone: fine
}

TEST_F(TenancyNetworks, ARoutedNetworkWithTheSameNameIsNeverAdopted) {
  Cleanup cleanup;
  const std::string t = Unique("squat");
  cleanup.tenancies = {t};
  ASSERT_EQ(Podman::Get().Run({"network", "create", NetworkName(t)}).status, 0);
  auto refused = PodmanTenancy().EnsureNetwork(t);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_NE(refused.error().message.find("--internal"), std::string::npos);
}

}  // namespace
}  // namespace tessera::tenancy
