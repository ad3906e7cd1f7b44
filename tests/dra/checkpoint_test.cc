// The checkpoint of prepared claims: round trip, strict parsing, atomic file, claim files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/atomic_file.h"
#include "dra/dra.h"

namespace tessera::dra {
namespace {

Checkpoint Sample() {
  Checkpoint checkpoint;
  PreparedClaim claim;
  claim.ref = {"team", "train", "uid-1"};
  claim.devices.push_back(
      {{"gpus"}, "node-a", "gpu-0000-18-00-0", {ClaimCdiId("uid-1", "gpu-0000-18-00-0")}, {}, {}});
  claim.devices.push_back({{"gpus", "more"}, "node-a", "gpu-0000-2a-00-0", {"x/y=z"}, {}, {}});
  checkpoint["uid-1"] = claim;
  return checkpoint;
}

// A claim whose MIG instance prepare made (MIG by demand).
Checkpoint MigSample() {
  Checkpoint checkpoint = Sample();
  MigInstance instance{"0000:2a:00.0", 3, 0, "MIG-x", {}};
  cdi::DeviceNode gi;
  gi.path = "/dev/nvidia-caps/nvidia-cap30";
  gi.host_path = "/host/dev/nvidia-caps/nvidia-cap30";
  gi.type = "c";
  gi.major = 237;
  gi.minor = 30;
  cdi::DeviceNode ci = gi;
  ci.path = "/dev/nvidia-caps/nvidia-cap31";
  ci.host_path.clear();
  ci.minor = 31;
  instance.device_nodes = {gi, ci};
  checkpoint["uid-1"].devices[1].mig_instance = instance;
  return checkpoint;
}

TEST(Checkpoint, RoundTrips) {
  auto parsed = ParseCheckpoint(SerializeCheckpoint(Sample()));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(*parsed, Sample());
  auto mig = ParseCheckpoint(SerializeCheckpoint(MigSample()));
  ASSERT_TRUE(mig.ok()) << mig.error().message;
  EXPECT_EQ(*mig, MigSample());
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
  // A MIG instance's fields are as strict: numbers, /dev paths, known keys only.
  std::string mig = SerializeCheckpoint(MigSample());
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"gpuInstanceId\": 3", "\"gpuInstanceId\": -3"},
           {"\"/dev/nvidia-caps/nvidia-cap31\"", "\"/etc/passwd\""},
           {"\"uuid\"", "\"uuids\""}}) {
    std::string changed = mig;
    ASSERT_NE(changed.find(from), std::string::npos) << from << " in " << mig;
    changed.replace(changed.find(from), from.size(), to);
    EXPECT_FALSE(ParseCheckpoint(changed).ok()) << to;
  }
  EXPECT_FALSE(
      ParseCheckpoint(
          R"({"version":1,"claims":{"u":{"namespace":"a","name":"b","devices":[{"requestNames":[],"poolName":"p","deviceName":"d","cdiDeviceIds":["c"]}]}}})")
          .ok());
}

// A claim whose MIG instance is about to be made: its intent only, pending.
Checkpoint IntentSample() {
  Checkpoint checkpoint = Sample();
  checkpoint["uid-1"].pending = true;
  checkpoint["uid-1"].devices[1].mig_intent = MigIntent{"0000:2a:00.0", 9, 4, 4, {}};
  return checkpoint;
}

TEST(Checkpoint, AnIntentRoundTripsAndOlderFilesReadAsBefore) {
  std::string text = SerializeCheckpoint(IntentSample());
  EXPECT_NE(text.find("\"pending\": true"), std::string::npos) << text;
  EXPECT_NE(text.find("\"migIntent\""), std::string::npos) << text;
  EXPECT_EQ(text.find("gpuInstanceId"), std::string::npos) << text;
  auto parsed = ParseCheckpoint(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(*parsed, IntentSample());
  EXPECT_TRUE(parsed->at("uid-1").pending);
  // Adopted on start: the GPU instance found at its place, then completed with the instance.
  Checkpoint adopted = IntentSample();
  adopted["uid-1"].devices[1].mig_intent->gpu_instance_id = 2;
  auto again = ParseCheckpoint(SerializeCheckpoint(adopted));
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->at("uid-1").devices[1].mig_intent->gpu_instance_id, 2u);
  Checkpoint completed = MigSample();
  completed["uid-1"].devices[1].mig_intent = adopted["uid-1"].devices[1].mig_intent;
  auto done = ParseCheckpoint(SerializeCheckpoint(completed));
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(*done, completed);
  EXPECT_FALSE(done->at("uid-1").pending);
  // A file of an earlier version (no pending, no intent) reads as a prepared claim.
  auto older = ParseCheckpoint(
      R"({"version":1,"claims":{"u":{"namespace":"a","name":"b","devices":[{"requestNames":["r"],"poolName":"p","deviceName":"d","cdiDeviceIds":["c"]}]}}})");
  ASSERT_TRUE(older.ok());
  EXPECT_FALSE(older->at("u").pending);
  EXPECT_FALSE(older->at("u").devices[0].mig_intent.has_value());
  // As strict as the rest.
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"pending\": true", "\"pending\": 1"},
           {"\"start\": 4", "\"start\": -4"},
           {"\"profileId\": 9", "\"profileId\": \"9\""},
           {"\"size\": 4", "\"sizes\": 4"},
           {"\"pciAddress\": \"0000:2a:00.0\"", "\"pciAddress\": \"\""}}) {
    std::string changed = text;
    ASSERT_NE(changed.find(from), std::string::npos) << from << " in " << text;
    changed.replace(changed.find(from), from.size(), to);
    EXPECT_FALSE(ParseCheckpoint(changed).ok()) << to;
  }
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

TEST(Checkpoint, OnlyUidsThatCannotLeaveTheDirectoryNameFiles) {
  EXPECT_TRUE(IsFileNameSafeUid("9d0b7a1e-1111-4222-8333-944455556666"));
  EXPECT_TRUE(IsFileNameSafeUid("never-prepared"));
  for (std::string_view bad : {"", ".", "..", "../x", "a/b", ".x", "a b", "a\nb"})
    EXPECT_FALSE(IsFileNameSafeUid(bad)) << bad;
  EXPECT_FALSE(IsFileNameSafeUid(std::string(254, 'a')));
  EXPECT_EQ(PreparedClaimPath("/p/prepared", "u-1"), "/p/prepared/claim_u-1.json");
}

TEST(Checkpoint, ClaimFilesReadBackAndStrayOnesAreDroppedOrLeftAlone) {
  auto dir = std::filesystem::temp_directory_path() / ("dra-claims-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::vector<std::string> dropped;
  auto none = ReadPreparedClaims(dir.string(), &dropped);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  std::filesystem::create_directories(dir);
  Checkpoint sample = Sample();
  for (const auto& [uid, claim] : sample)
    ASSERT_TRUE(WritePreparedClaim(dir.string(), claim, Durability::kProcessCrash).ok());
  const auto& [uid, claim] = *sample.begin();
  // A file under another claim's name, a torn one, a crashed write's temporary file and a file
  // of no claim.
  PreparedClaim other = claim;
  other.ref.uid = "other";
  ASSERT_TRUE(WriteFileAtomically(PreparedClaimPath(dir.string(), "moved"),
                                  SerializeCheckpoint({{"other", other}}))
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(PreparedClaimPath(dir.string(), "torn"), "{\"vers").ok());
  std::string temporary = PreparedClaimPath(dir.string(), "crashed") + ".tmp-1-2-3";
  ASSERT_TRUE(WriteFileAtomically(temporary, "{").ok());
  std::string unrelated = (dir / "notes.txt").string();
  ASSERT_TRUE(WriteFileAtomically(unrelated, "x").ok());

  auto read = ReadPreparedClaims(dir.string(), &dropped);
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(*read, sample);
  EXPECT_EQ(dropped.size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(PreparedClaimPath(dir.string(), "moved")));
  EXPECT_FALSE(std::filesystem::exists(PreparedClaimPath(dir.string(), "torn")));
  EXPECT_FALSE(std::filesystem::exists(temporary));
  EXPECT_TRUE(std::filesystem::exists(unrelated));
  // A claim's file is the checkpoint format holding that claim alone.
  auto one = ReadCheckpoint(PreparedClaimPath(dir.string(), uid));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, (Checkpoint{{uid, claim}}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::dra
