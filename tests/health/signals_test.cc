// What NVML events, NVML state changes and sysfs counters become (pure), and NVML's record
// decoders beneath them.
#include "health/watch/signals.h"

#include <gtest/gtest.h>

#include <cstring>

#include "health/watch/watch.h"
#include "nvml/nvml.h"

namespace tessera::health {
namespace {

std::string EventBytes(uint64_t type, uint64_t data, uint32_t gi, uint32_t ci) {
  // nvmlEventData_t: device (a pointer), eventType, eventData, gpuInstanceId, computeInstanceId.
  std::string bytes(nvml::kEventDataBytes, '\0');
  void* device = reinterpret_cast<void*>(0x1234);
  std::memcpy(bytes.data(), &device, sizeof device);
  std::memcpy(bytes.data() + 8, &type, sizeof type);
  std::memcpy(bytes.data() + 16, &data, sizeof data);
  std::memcpy(bytes.data() + 24, &gi, sizeof gi);
  std::memcpy(bytes.data() + 28, &ci, sizeof ci);
  return bytes;
}

TEST(EventData, DecodesNvmlsRecord) {
  auto event = nvml::DecodeEventData(EventBytes(0x8, 94, 2, 0));
  ASSERT_TRUE(event);
  EXPECT_EQ(event->gpu, reinterpret_cast<void*>(0x1234));
  EXPECT_EQ(event->type, 0x8u);
  EXPECT_EQ(event->data, 94u);
  EXPECT_EQ(event->gpu_instance_id, 2u);
  EXPECT_EQ(event->compute_instance_id, 0u);
  EXPECT_FALSE(nvml::DecodeEventData(EventBytes(0x8, 94, 2, 0).substr(0, 31)));
  EXPECT_TRUE(nvml::DecodeEventData(EventBytes(0x8, 94, 2, 0) + "trailing"));
}

TEST(EventSignal, XidWithItsInstanceDoubleBitEccAndNothingElse) {
  auto xid = EventSignal(*nvml::DecodeEventData(EventBytes(0x8, 94, 1, 0)), "0000:9d:00.0", 42);
  ASSERT_TRUE(xid);
  EXPECT_EQ(xid->kind, SignalKind::kXid);
  EXPECT_EQ(xid->gpu, "0000:9d:00.0");
  EXPECT_EQ(xid->xid, 94u);
  EXPECT_EQ(xid->gpu_instance_id, 1u);
  EXPECT_EQ(xid->compute_instance_id, 0u);
  EXPECT_EQ(xid->at_ms, 42);
  auto whole = EventSignal(*nvml::DecodeEventData(EventBytes(0x8, 79, kWholeGpu, kWholeGpu)),
                           "0000:9d:00.0", 42);
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->gpu_instance_id, kWholeGpu);
  auto ecc = EventSignal(*nvml::DecodeEventData(EventBytes(0x2, 0, kWholeGpu, kWholeGpu)),
                         "0000:9d:00.0", 42);
  ASSERT_TRUE(ecc);
  EXPECT_EQ(ecc->kind, SignalKind::kDoubleBitEcc);
  EXPECT_FALSE(EventSignal(*nvml::DecodeEventData(EventBytes(0x1, 0, 0, 0)), "x", 0));
}

TEST(PciAddress, NvmlsBusIdInSysfsForm) {
  EXPECT_EQ(nvml::SysfsPciAddress("00000000:65:00.0"), "0000:65:00.0");
  EXPECT_EQ(nvml::SysfsPciAddress("00000000:9D:00.0"), "0000:9d:00.0");
  EXPECT_EQ(nvml::SysfsPciAddress("0000:9d:00.0"), "0000:9d:00.0");
  EXPECT_EQ(nvml::SysfsPciAddress("00010000:65:00.0"), "");  // a domain that does not fit
  EXPECT_EQ(nvml::SysfsPciAddress("00000000:65:00"), "");
  EXPECT_EQ(nvml::SysfsPciAddress("00000000:6g:00.0"), "");
  EXPECT_EQ(nvml::SysfsPciAddress(""), "");
}

TEST(StateSignals, WhatTurnedBad) {
  GpuState healthy;
  healthy.remap_pending = false;
  healthy.remap_failure = false;
  healthy.retired_pages_pending = false;
  healthy.uncorrected_volatile_ecc = 1;
  healthy.recovery_action = RecoveryAction::kNone;
  EXPECT_TRUE(StateSignals("g", healthy, healthy, 1).empty());

  GpuState bad = healthy;
  bad.remap_pending = true;
  bad.remap_failure = true;
  bad.retired_pages_pending = true;
  bad.uncorrected_volatile_ecc = 4;
  bad.recovery_action = RecoveryAction::kGpuReset;
  auto signals = StateSignals("g", healthy, bad, 7);
  ASSERT_EQ(signals.size(), 5u);
  EXPECT_EQ(signals[0].kind, SignalKind::kRemapPending);
  EXPECT_EQ(signals[1].kind, SignalKind::kRemapFailure);
  EXPECT_EQ(signals[2].kind, SignalKind::kRetiredPagesPending);
  EXPECT_EQ(signals[3].kind, SignalKind::kUncorrectedEcc);
  EXPECT_EQ(signals[3].count, 4u);
  EXPECT_EQ(signals[4].kind, SignalKind::kRecoveryAction);
  for (const Signal& signal : signals) {
    EXPECT_EQ(signal.gpu, "g");
    EXPECT_EQ(signal.at_ms, 7);
    EXPECT_EQ(signal.recovery_action, RecoveryAction::kGpuReset);
  }
  EXPECT_TRUE(StateSignals("g", bad, bad, 8).empty());  // still bad: no news
  GpuState other_action = bad;
  other_action.recovery_action = RecoveryAction::kNodeReboot;
  ASSERT_EQ(StateSignals("g", bad, other_action, 9).size(), 1u);
  EXPECT_TRUE(StateSignals("g", bad, healthy, 9).empty());  // better is no signal

  GpuState lost;
  lost.lost = true;
  signals = StateSignals("g", healthy, lost, 9);
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_EQ(signals[0].kind, SignalKind::kGpuLost);
  EXPECT_FALSE(signals[0].recovery_action);
  // A count not read on one side is no growth.
  GpuState unread = healthy;
  unread.uncorrected_volatile_ecc.reset();
  EXPECT_TRUE(StateSignals("g", unread, bad, 9).size() == 4u);
}

TEST(RecoveryActionOf, NvmlsValues) {
  EXPECT_EQ(RecoveryActionOf(0), RecoveryAction::kNone);
  EXPECT_EQ(RecoveryActionOf(3), RecoveryAction::kDrainP2p);
  EXPECT_EQ(RecoveryActionOf(4), RecoveryAction::kDrainAndReset);
  EXPECT_FALSE(RecoveryActionOf(5));
}

TEST(AerCount, TheKernelsCounterFile) {
  const std::string text =
      "Undefined 0\nDLP 1\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 2\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\n"
      "MalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\n"
      "AtomicOpBlocked 0\nTLPBlockedErr 0\nPoisonTLPBlocked 0\nTOTAL_ERR_FATAL 3\n";
  EXPECT_EQ(AerCount(text, "TOTAL_ERR_FATAL"), 3u);
  EXPECT_EQ(AerCount(text, "DLP"), 1u);
  EXPECT_FALSE(AerCount(text, "TOTAL_ERR_NONFATAL"));
  EXPECT_FALSE(AerCount("TOTAL_ERR_FATAL x\n", "TOTAL_ERR_FATAL"));
  EXPECT_FALSE(AerCount("TOTAL_ERR_FATAL 99999999999999999999999\n", "TOTAL_ERR_FATAL"));
  EXPECT_FALSE(AerCount("TOTAL_ERR_FATALS 1\n", "TOTAL_ERR_FATAL"));
  EXPECT_EQ(AerCount("TOTAL_ERR_FATAL 7", "TOTAL_ERR_FATAL"), 7u);  // no final newline
  EXPECT_FALSE(AerCount("", "TOTAL_ERR_FATAL"));
}

TEST(SysfsSignals, GoneAllOnesAndFatalGrowth) {
  SysfsState fine;
  fine.aer_fatal = 1;
  EXPECT_TRUE(SysfsSignals("g", fine, fine, 1).empty());
  SysfsState grew = fine;
  grew.aer_fatal = 2;
  auto signals = SysfsSignals("g", fine, grew, 1);
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_EQ(signals[0].kind, SignalKind::kAerFatal);
  EXPECT_EQ(signals[0].count, 2u);
  SysfsState ones = fine;
  ones.config_ones = true;
  ASSERT_EQ(SysfsSignals("g", fine, ones, 1).size(), 1u);
  EXPECT_EQ(SysfsSignals("g", fine, ones, 1)[0].kind, SignalKind::kConfigAllOnes);
  SysfsState gone;
  gone.gone = true;
  ASSERT_EQ(SysfsSignals("g", fine, gone, 1).size(), 1u);
  EXPECT_EQ(SysfsSignals("g", fine, gone, 1)[0].kind, SignalKind::kDeviceGone);
  EXPECT_TRUE(SysfsSignals("g", gone, gone, 1).empty());
}

TEST(CommandWords, SplitsAFlagAtWhitespaceWithoutAShell) {
  EXPECT_EQ(CommandWords("nvidia-smi -r  -i {uuid}"),
            (std::vector<std::string>{"nvidia-smi", "-r", "-i", "{uuid}"}));
  EXPECT_EQ(CommandWords(" dcgmi\tdiag -r 1 "),
            (std::vector<std::string>{"dcgmi", "diag", "-r", "1"}));
  EXPECT_EQ(CommandWords("sh -c 'reboot; x'"),
            (std::vector<std::string>{"sh", "-c", "'reboot;", "x'"}));  // no quoting, no shell
  EXPECT_TRUE(CommandWords("").empty());
  EXPECT_TRUE(CommandWords("   ").empty());
}

TEST(ExpandCommand, FillsInEveryGpuField) {
  EXPECT_EQ(ExpandCommand({"nvidia-smi", "-r", "-i", "{uuid}"}, "GPU-a", "0000:65:00.0", 3),
            (std::vector<std::string>{"nvidia-smi", "-r", "-i", "GPU-a"}));
  EXPECT_EQ(ExpandCommand({"probe", "--gpu={index}", "{pci}/{pci}"}, "GPU-a", "0000:65:00.0", 3),
            (std::vector<std::string>{"probe", "--gpu=3", "0000:65:00.0/0000:65:00.0"}));
  EXPECT_EQ(ExpandCommand({"x", "{uuid}"}, "{uuid}", "p", 0),  // no replacement loops
            (std::vector<std::string>{"x", "{uuid}"}));
}

}  // namespace
}  // namespace tessera::health
