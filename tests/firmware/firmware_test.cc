// The firmware module: digests, the baseline file format, the baseline directory and one GPU's
// check or record on a materialized HGX H100 host tree with option ROMs written into it.
#include "firmware/firmware.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/atomic_file.h"
#include "inventory/host_root.h"
#include "inventory/inventory.h"
#include "support/fixture_host.h"

namespace tessera::firmware {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::TempHost;

constexpr char kGpu[] = "0000:18:00.0";
constexpr char kOtherGpu[] = "0000:2a:00.0";
const std::string kDigestA = "sha256:" + std::string(64, 'a');

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc | std::ios::binary) << text;
}

// A PCI expansion ROM image starts with the 0x55 0xAA signature.
std::string Rom(const std::string& version) {
  return std::string("\x55\xAA", 2) + std::string(4096, '\x11') + version;
}

class FirmwareOnHgx : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* gpu : {kGpu, kOtherGpu})
      WriteText(RomPath(gpu), Rom("v1"));
  }
  std::string RomPath(const std::string& gpu) const {
    return host_.root() + "/sys/bus/pci/devices/" + gpu + "/rom";
  }
  TempHost host_{"hgx-h100-dgx"};
  TempDir dir_;
  BaselineStore store_{dir_.path() + "/firmware"};
};

TEST(Digest, IsSha256OfTheBytes) {
  // FIPS 180-4 example "abc".
  EXPECT_EQ(DigestOf("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(DigestOf(""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_TRUE(IsDigest(DigestOf("x")));
  EXPECT_TRUE(IsDigest("absent"));
  EXPECT_FALSE(IsDigest("sha256:" + std::string(63, 'a')));
  EXPECT_FALSE(IsDigest("sha256:" + std::string(64, 'A')));
  EXPECT_FALSE(IsDigest("md5:" + std::string(64, 'a')));
}

TEST(PciAddress, CanonicalFormsAndErrorsNameTheField) {
  EXPECT_EQ(*CanonicalPciAddress("0000:18:00.0", "--gpu"), "0000:18:00.0");
  EXPECT_EQ(*CanonicalPciAddress("0000:AB:00.0", "--gpu"), "0000:ab:00.0");
  EXPECT_EQ(*CanonicalPciAddress("18:00.0", "--gpu"), "0000:18:00.0");
  for (const char* bad : {"", "0000:18:00.8", "0000:18:20.0", "0000:18:00", "../../etc/x",
                          "0000:18:00.0/", "0000-18-00.0"}) {
    auto parsed = CanonicalPciAddress(bad, "--gpu");
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.error().category, ErrorCategory::kInvalidArgument);
    EXPECT_EQ(parsed.error().message.rfind("--gpu \"", 0), 0u) << parsed.error().message;
  }
}

TEST(BaselineFormat, RoundTripsAndIsStrict) {
  Baseline baseline{kGpu, kDigestA, 1732390000};
  std::string text = FormatBaseline(baseline);
  EXPECT_EQ(text, "tessera-firmware-baseline 1\npci_address 0000:18:00.0\noption_rom " + kDigestA +
                      "\nrecorded_unix_s 1732390000\n");
  auto parsed = ParseBaseline(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(*parsed, baseline);
  EXPECT_TRUE(ParseBaseline(FormatBaseline({kGpu, "absent", 0})).ok());

  auto fails = [](const std::string& bad, const std::string& named) {
    auto result = ParseBaseline(bad);
    ASSERT_FALSE(result.ok()) << bad;
    EXPECT_NE(result.error().message.find(named), std::string::npos) << result.error().message;
  };
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string copy = text;
    copy.replace(copy.find(from), from.size(), to);
    return copy;
  };
  fails(text.substr(0, text.size() - 1), "newline");
  fails(text + "extra 1\n", "4 lines");
  fails("\n" + text, "4 lines");
  fails(replace("baseline 1", "baseline 2"), "line 1");
  fails(replace("pci_address 0000:18:00.0", "pci_address 18:00.0"), "canonical");
  fails(replace("pci_address 0000:18", "pci_address ../etc"), "line 2 (pci_address)");
  fails(replace("option_rom ", "option_rom  "), "line 3 (option_rom)");
  fails(replace("option_rom sha256:a", "option_rom sha256:A"), "line 3 (option_rom)");
  fails(replace("option_rom", "rom"), "line 3 (option_rom)");
  fails(replace("1732390000", "01732390000"), "line 4 (recorded_unix_s)");
  fails(replace("1732390000", "-1"), "line 4 (recorded_unix_s)");
  fails(replace("1732390000", "99999999999999999999"), "line 4 (recorded_unix_s)");
  fails(replace("\n", "\r\n"), "line 1");
}

TEST(Compare, PassesOnlyOnTheSameDigest) {
  EXPECT_TRUE(CompareWithBaseline(kDigestA, kDigestA).passed);
  EXPECT_TRUE(CompareWithBaseline("absent", "absent").passed);
  Verdict changed = CompareWithBaseline(kDigestA, "absent");
  EXPECT_FALSE(changed.passed);
  EXPECT_EQ(changed.reason, "option ROM changed (baseline " + kDigestA + ", now absent)");
}

TEST(BaselineStoreDir, RecordsOnceAndNeverOverwrites) {
  TempDir dir;
  BaselineStore store(dir.path() + "/nested/firmware");
  EXPECT_EQ(store.Read(kGpu).error().category, ErrorCategory::kNotFound);
  ASSERT_TRUE(store.Record({kGpu, kDigestA, 5}).ok());
  struct stat st {};
  ASSERT_EQ(::stat(store.PathFor(kGpu).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  auto again = store.Record({kGpu, "absent", 6});
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().category, ErrorCategory::kAlreadyExists);
  EXPECT_EQ(*store.Read(kGpu), (Baseline{kGpu, kDigestA, 5}));
  // No temporary files are left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(store.dir()), fs::directory_iterator()), 1);
  // Names come only from canonical PCI addresses.
  EXPECT_FALSE(store.Record({"../x", kDigestA, 5}).ok());
  EXPECT_FALSE(store.Read("18:00.0").ok());
}

TEST(BaselineStoreDir, RefusesAFileThatNamesAnotherDevice) {
  TempDir dir;
  BaselineStore store(dir.path());
  ASSERT_TRUE(
      WriteFileAtomically(store.PathFor(kGpu), FormatBaseline({kOtherGpu, kDigestA, 5})).ok());
  auto read = store.Read(kGpu);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.error().message.find("names 0000:2a:00.0"), std::string::npos)
      << read.error().message;
  EXPECT_NE(read.error().message.find(store.PathFor(kGpu)), std::string::npos);
}

TEST_F(FirmwareOnHgx, HashesTheRomAndTellsAbsentFromMissing) {
  EXPECT_EQ(*HashOptionRom(host_.root(), kGpu), DigestOf(Rom("v1")));
  // The fixture's plain file is read, never written (on sysfs "1"/"0" enable the ROM).
  std::ifstream in(RomPath(kGpu), std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), Rom("v1"));
  // A device without a `rom` file has no option ROM: the NVSwitch-side bridge here.
  EXPECT_EQ(*HashOptionRom(host_.root(), "0000:00:00.0"), "absent");
  auto missing = HashOptionRom(host_.root(), "0000:19:00.0");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().category, ErrorCategory::kNotFound);
  auto bad = inventory::ReadOptionRom(host_.root(), "../../..");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().category, ErrorCategory::kInvalidArgument);
}

// Whether the ROM is enabled by a write depends on the file system, not on the path: a host
// mounted at /host is sysfs too, a fixture tree never is.
TEST_F(FirmwareOnHgx, OnlyRealSysfsIsWrittenTo) {
  inventory::HostRoot fixture(host_.root());
  const std::string device = "/sys/bus/pci/devices/" + std::string(kGpu);
  EXPECT_FALSE(fixture.OnSysfs(device + "/rom"));
  ASSERT_TRUE(fixture.WriteAttribute(device + "/enable", "0").ok());
  std::ifstream enable(host_.root() + device + "/enable");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(enable), {}),
            "0\n");  // no O_TRUNC, as for sysfs
  // An attribute is written, never created.
  EXPECT_FALSE(fixture.WriteAttribute(device + "/nothing", "1").ok());
  EXPECT_FALSE(fs::exists(host_.root() + device + "/nothing"));

  // The real sysfs of this machine is recognised as such, and a device that is not there is an
  // error rather than a device without a ROM.
  inventory::HostRoot real("/");
  EXPECT_TRUE(real.OnSysfs("/sys/bus/pci/devices"));
  auto missing = HashOptionRom("/", "0000:ff:1f.7");
  EXPECT_FALSE(missing.ok());
  // Whatever PCI devices this machine has (possibly none), read through the real sysfs: the
  // digest of a ROM, or "absent" exactly when the device has no rom attribute.
  for (const auto& entry : fs::directory_iterator("/sys/bus/pci/devices")) {
    const std::string pci = entry.path().filename().string();
    auto digest = HashOptionRom("/", pci);
    ASSERT_TRUE(digest.ok()) << pci << ": " << digest.error().message;
    EXPECT_TRUE(IsDigest(*digest)) << *digest;
    EXPECT_EQ(*digest == "absent", !fs::exists(entry.path() / "rom")) << pci;
  }
}

TEST_F(FirmwareOnHgx, RecordThenCheckPassesAndAChangedRomFails) {
  GpuReport recorded = RecordGpu(host_.root(), store_, kGpu, 1732390000);
  EXPECT_EQ(recorded.outcome, Outcome::kRecorded) << recorded.reason;
  EXPECT_EQ(recorded.baseline, DigestOf(Rom("v1")));
  EXPECT_EQ(store_.Read(kGpu)->recorded_unix_s, 1732390000);

  GpuReport checked = CheckGpu(host_.root(), store_, kGpu);
  EXPECT_EQ(checked.outcome, Outcome::kPass) << checked.reason;
  EXPECT_NE(checked.reason.find("matches its baseline"), std::string::npos);

  WriteText(RomPath(kGpu), Rom("v2-tampered"));
  checked = CheckGpu(host_.root(), store_, kGpu);
  EXPECT_EQ(checked.outcome, Outcome::kFail);
  EXPECT_EQ(checked.reason, "option ROM changed (baseline " + DigestOf(Rom("v1")) + ", now " +
                                DigestOf(Rom("v2-tampered")) + ")");
  EXPECT_EQ(checked.option_rom, DigestOf(Rom("v2-tampered")));

  // Recording again keeps the old baseline and says the ROM differs.
  GpuReport kept = RecordGpu(host_.root(), store_, kGpu, 1732399999);
  EXPECT_EQ(kept.outcome, Outcome::kKept);
  EXPECT_NE(kept.reason.find("now differs"), std::string::npos) << kept.reason;
  EXPECT_EQ(store_.Read(kGpu)->option_rom, DigestOf(Rom("v1")));
  EXPECT_EQ(store_.Read(kGpu)->recorded_unix_s, 1732390000);
}

TEST_F(FirmwareOnHgx, MissingBaselineAndUnreadableRomFail) {
  GpuReport none = CheckGpu(host_.root(), store_, kOtherGpu);
  EXPECT_EQ(none.outcome, Outcome::kFail);
  EXPECT_NE(none.reason.find("no baseline recorded in " + store_.dir()), std::string::npos)
      << none.reason;

  ASSERT_EQ(RecordGpu(host_.root(), store_, kOtherGpu, 1).outcome, Outcome::kRecorded);
  // A ROM that cannot be read (a directory where the file was) fails with the cause.
  fs::remove(RomPath(kOtherGpu));
  fs::create_directory(RomPath(kOtherGpu));
  GpuReport unreadable = CheckGpu(host_.root(), store_, kOtherGpu);
  EXPECT_EQ(unreadable.outcome, Outcome::kFail);
  EXPECT_NE(unreadable.reason.find("cannot read the option ROM"), std::string::npos)
      << unreadable.reason;
  // And nothing is recorded from an unreadable ROM.
  GpuReport not_recorded = RecordGpu(host_.root(), BaselineStore(dir_.path() + "/b"), kOtherGpu, 1);
  EXPECT_EQ(not_recorded.outcome, Outcome::kFail);
  EXPECT_FALSE(fs::exists(dir_.path() + "/b/" + std::string(kOtherGpu) + ".baseline"));
}

TEST_F(FirmwareOnHgx, ACorruptBaselineFailsTheCheckAndIsNotReplaced) {
  fs::create_directories(store_.dir());
  WriteText(store_.PathFor(kGpu), "sha256:whatever\n");
  GpuReport checked = CheckGpu(host_.root(), store_, kGpu);
  EXPECT_EQ(checked.outcome, Outcome::kFail);
  EXPECT_NE(checked.reason.find("cannot read the baseline: " + store_.PathFor(kGpu)),
            std::string::npos)
      << checked.reason;
  GpuReport recorded = RecordGpu(host_.root(), store_, kGpu, 1);
  EXPECT_EQ(recorded.outcome, Outcome::kFail);
  std::ifstream in(store_.PathFor(kGpu));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "sha256:whatever\n");
}

TEST(Reports, TextAndJsonCarryOutcomeAndReason) {
  std::vector<GpuReport> reports = {{kGpu, Outcome::kPass, "ok", kDigestA, kDigestA},
                                    {kOtherGpu, Outcome::kFail, "changed", "absent", kDigestA}};
  EXPECT_TRUE(AnyFailed(reports));
  EXPECT_EQ(ToText(reports), "0000:18:00.0 pass: ok\n0000:2a:00.0 fail: changed\n");
  std::string json = ToJson(reports);
  EXPECT_NE(json.find("\"passed\": false"), std::string::npos) << json;
  EXPECT_NE(json.find("\"outcome\": \"fail\""), std::string::npos) << json;
  reports.pop_back();
  EXPECT_FALSE(AnyFailed(reports));
}

}  // namespace
}  // namespace tessera::firmware
