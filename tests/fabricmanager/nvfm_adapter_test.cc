// The libnvfm.so.1 adapter against stand-in libraries built by the tests (fake_nvfm.cc).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "fabricmanager/fabricmanager.h"

namespace tessera::fabricmanager {
namespace {

class NvfmAdapter : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("FAKE_NVFM_MODE"); }

  static Result<std::unique_ptr<FabricManager>> Connect(const std::string& library,
                                                        const char* mode = nullptr) {
    if (mode) {
      setenv("FAKE_NVFM_MODE", mode, 1);
    } else {
      unsetenv("FAKE_NVFM_MODE");
    }
    NvfmOptions options;
    options.library = library;
    options.address = "/run/nvidia-fabricmanager/socket";
    options.unix_socket = true;
    return ConnectNvfm(options);
  }

  static std::unique_ptr<FabricManager> Fake() {
    auto manager = Connect(FAKE_NVFM);
    EXPECT_TRUE(manager.ok()) << manager.error().message;
    if (!manager.ok()) return nullptr;
    EXPECT_TRUE((*manager)->SetActivatedPartitions({}).ok());
    return std::move(*manager);
  }
};

TEST_F(NvfmAdapter, MissingLibraryIsUnavailable) {
  auto manager = Connect("/nonexistent/libnvfm.so.1");
  ASSERT_FALSE(manager.ok());
  EXPECT_EQ(manager.error().category, ErrorCategory::kUnavailable);
  EXPECT_NE(manager.error().message.find("dlopen /nonexistent/libnvfm.so.1"), std::string::npos)
      << manager.error().message;
}

TEST_F(NvfmAdapter, AFileThatIsNoLibraryIsUnavailable) {
  const std::string path = std::string(TESSERA_BINARY_DIR) + "/not-a-library.so.1";
  std::ofstream(path) << "not an ELF file\n";
  auto manager = Connect(path);
  ASSERT_FALSE(manager.ok());
  EXPECT_EQ(manager.error().category, ErrorCategory::kUnavailable);
}

TEST_F(NvfmAdapter, MissingFunctionIsNamed) {
  auto manager = Connect(FAKE_NVFM_INCOMPLETE);
  ASSERT_FALSE(manager.ok());
  EXPECT_EQ(manager.error().category, ErrorCategory::kUnavailable);
  EXPECT_NE(manager.error().message.find("function fmActivateFabricPartition is missing"),
            std::string::npos)
      << manager.error().message;
}

TEST_F(NvfmAdapter, InitAndConnectFailuresCarryTheStatus) {
  auto init = Connect(FAKE_NVFM, "init-fails");
  ASSERT_FALSE(init.ok());
  EXPECT_EQ(init.error().message, "fmLibInit: FM_ST_GENERIC_ERROR (-2)");
  auto connect = Connect(FAKE_NVFM, "connect-refused");
  ASSERT_FALSE(connect.ok());
  EXPECT_EQ(connect.error().category, ErrorCategory::kUnavailable);
  EXPECT_EQ(connect.error().message,
            "fmConnect /run/nvidia-fabricmanager/socket: FM_ST_CONNECTION_NOT_VALID (-9)");
}

TEST_F(NvfmAdapter, ListsPartitionsWithModuleIdsAndCanonicalPciAddresses) {
  auto manager = Fake();
  ASSERT_NE(manager, nullptr);
  auto listed = manager->ListPartitions();
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  ASSERT_EQ(listed->size(), 15u);
  const SupportedPartition& pair = (*listed)[3];
  EXPECT_EQ(pair.id, 3u);
  ASSERT_EQ(pair.gpus.size(), 2u);
  EXPECT_EQ(pair.gpus[0].module_id, 1);
  EXPECT_EQ(pair.gpus[0].pci_address, "0000:1b:00.0");
  EXPECT_EQ(pair.gpus[1].uuid, "GPU-00000003-fake");
  EXPECT_EQ(pair.gpus[1].max_nvlinks, 18);
  auto table = TableFromPartitions(*listed, "hgx-h100-8gpu");
  ASSERT_TRUE(table.ok()) << table.error().message;
  EXPECT_EQ(table->partitions, topology::HgxH100Table().partitions);
  EXPECT_EQ(table->pci_addresses.at(8), "0000:df:00.0");
}

TEST_F(NvfmAdapter, ActivationStatusCodesMapToCategories) {
  auto manager = Fake();
  ASSERT_NE(manager, nullptr);
  ASSERT_TRUE(manager->Activate(3).ok());
  auto in_use = manager->Activate(1);
  ASSERT_FALSE(in_use.ok());
  EXPECT_EQ(in_use.error().category, ErrorCategory::kFailedPrecondition);
  EXPECT_EQ(in_use.error().message, "fmActivateFabricPartition(1): FM_ST_IN_USE (-7)");
  auto unknown = manager->Activate(99);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().category, ErrorCategory::kInvalidArgument);
  auto inactive = manager->Deactivate(4);
  ASSERT_FALSE(inactive.ok());
  EXPECT_EQ(inactive.error().category, ErrorCategory::kFailedPrecondition);
  ASSERT_TRUE(manager->Deactivate(3).ok());

  setenv("FAKE_NVFM_MODE", "nvlink-error", 1);
  auto nvlink = manager->Activate(2);
  ASSERT_FALSE(nvlink.ok());
  EXPECT_EQ(nvlink.error().message, "fmActivateFabricPartition(2): FM_ST_NVLINK_ERROR (-10)");
  setenv("FAKE_NVFM_MODE", "not-configured", 1);
  auto starting = manager->ListPartitions();
  ASSERT_FALSE(starting.ok());
  EXPECT_EQ(starting.error().category, ErrorCategory::kUnavailable);
}

TEST_F(NvfmAdapter, SetActivatedPartitionsIsReflectedInTheList) {
  auto manager = Fake();
  ASSERT_NE(manager, nullptr);
  ASSERT_TRUE(manager->SetActivatedPartitions({2, 3, 4}).ok());
  auto listed = manager->ListPartitions();
  ASSERT_TRUE(listed.ok());
  std::vector<uint32_t> active;
  for (const auto& p : *listed) {
    if (p.active) active.push_back(p.id);
  }
  EXPECT_EQ(active, (std::vector<uint32_t>{2, 3, 4}));
  std::vector<uint32_t> too_many(65, 7);
  EXPECT_EQ(manager->SetActivatedPartitions(too_many).error().category,
            ErrorCategory::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::fabricmanager
