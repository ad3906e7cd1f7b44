// Lookups under a root while other processes rename files: the kernel's confined walk
// (RESOLVE_IN_ROOT) refuses a ".." that raced any rename on the system with EAGAIN. A device
// reached through sysfs's "../../devices/..." links must still be found, never reported absent
// (a firmware check once read a present option ROM as "absent" this way and quarantined a GPU).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "inventory/host_root.h"
#include "support/fixture_host.h"

namespace tessera::testing {
namespace {

TEST(HostRootRace, APathThroughParentLinksIsFoundWhileRenamesRaceIt) {
  TempHost host("hgx-h100-dgx");
  const std::string device = "/sys/bus/pci/devices/0000:18:00.0";
  // The fixture's device entries are relative links climbing with "..", as real sysfs's are.
  ASSERT_NE(std::filesystem::read_symlink(host.root() + device).string().find(".."),
            std::string::npos);
  std::ofstream(host.root() + device + "/rom") << "ROM";
  inventory::HostRoot root(host.root());

  TempDir scratch;
  std::atomic<bool> done{false};
  std::thread renamer([&] {
    const std::string a = scratch.path() + "/a", b = scratch.path() + "/b";
    std::ofstream(a) << "x";
    while (!done.load(std::memory_order_relaxed)) {
      std::filesystem::rename(a, b);
      std::filesystem::rename(b, a);
    }
  });
  int absent = 0, unreadable = 0;
  for (int i = 0; i < 20000; ++i) {
    if (!root.Exists(device + "/rom")) ++absent;
    if (!root.ReadFile(device + "/rom")) ++unreadable;
  }
  done = true;
  renamer.join();
  EXPECT_EQ(absent, 0);
  EXPECT_EQ(unreadable, 0);
}

}  // namespace
}  // namespace tessera::testing
