// The checkpoint of prepared claims: round trip, strict parsing, atomic file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "dra/dra.h"

namespace tessera::dra {
namespace {

Checkpoint Sample() {
  Checkpoint checkpoint;
  PreparedClaim claim;
  claim.ref = {"team", "train", "uid-1"};
  claim.devices.push_back(
      {{"gpus"}, "node-a", "gpu-0000-18-00-0", {ClaimCdiId("uid-1", "gpu-0000-18-00-0")}});
  claim.devices.push_back({{"gpus", "more"}, "node-a", "gpu-0000-2a-00-0", {"x/y=z"}});
  checkpoint["uid-1"] = claim;
  return checkpoint;
}

TEST(Checkpoint, RoundTrips) {
  auto parsed = ParseCheckpoint(SerializeCheckpoint(Sample()));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(*parsed, Sample());
  auto empty = ParseCheckpoint(SerializeCheckpoint({}));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(Checkpoint, ParserIsStrict) {
  EXPECT_FALSE(ParseCheckpoint("").ok());
  EXPECT_FALSE(ParseCheckpoint(R"({"version":2,"claims":{}})").ok());
  EXPECT_FALSE(ParseCheckpoint(R"({"version":1,"claims":{},"extra":1})").ok());
  EXPECT_FALSE(ParseCheckpoint(R"({"version":1,"claims":[]})").ok());
  EXPECT_FALSE(
      ParseCheckpoint(R"({"version":1,"claims":{"u":{"namespace":"a","name":"b"}}})").ok());
  auto unknown = ParseCheckpoint(
      R"({"version":1,"claims":{"u":{"namespace":"a","name":"b","devices":[{"requestNames":["r"],"poolName":"p","deviceName":"d","cdiDeviceIds":["c"],"shareId":"s"}]}}})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("shareId: unknown field"), std::string::npos);
  EXPECT_FALSE(
      ParseCheckpoint(
          R"({"version":1,"claims":{"u":{"namespace":"a","name":"b","devices":[{"requestNames":[],"poolName":"p","deviceName":"d","cdiDeviceIds":["c"]}]}}})")
          .ok());
}

TEST(Checkpoint, FileIsWrittenAtomicallyAndMissingMeansEmpty) {
  auto dir = std::filesystem::temp_directory_path() / ("dra-ckpt-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "checkpoint.json").string();
  auto missing = ReadCheckpoint(path);
  ASSERT_TRUE(missing.ok());
  EXPECT_TRUE(missing->empty());
  ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
  auto read = ReadCheckpoint(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, Sample());
  // Only the checkpoint itself is left behind (no temporary file).
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::dra
