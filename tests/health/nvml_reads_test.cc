// The nvml module's health reads and event set against the stand-in NVML: what each read
// answers for a healthy GPU, a faulted one, a driver without the figure and a lost GPU.
#include <gtest/gtest.h>

#include "nvml/nvml.h"
#include "support/fake_nvml_state.h"

namespace tessera::nvml {
namespace {

TEST(NvmlHealthReads, StateOfAHealthyAFaultedAndALostGpu) {
  testing::FakeNvmlFaults faults;
  faults.SetFaults(
      "0000:66:00.0 remap_pending=1 remap_correctable=2 retired_pending=1 ecc_uncorrected=7 "
      "recovery_action=1\n"
      "0000:67:00.0 recovery_action=na remap_pending=na retired_pending=na ecc_uncorrected=na\n"
      "0000:68:00.0 lost=1\n");
  auto library = Library::Open(FAKE_NVML);
  ASSERT_TRUE(library.ok()) << library.error().message;
  auto healthy = (*library)->HandleByPci("0000:65:00.0");
  ASSERT_TRUE(healthy.ok());
  EXPECT_EQ((*library)->PciAddress(healthy.value).value, "0000:65:00.0");
  auto rows = (*library)->RemappedRows(healthy.value);
  ASSERT_TRUE(rows.ok());
  EXPECT_FALSE(rows.value.pending);
  EXPECT_FALSE(rows.value.failure);
  EXPECT_EQ((*library)->RecoveryAction(healthy.value).value, 0u);
  EXPECT_EQ((*library)->VolatileUncorrectedEcc(healthy.value).value, 0u);

  auto faulted = (*library)->HandleByPci("0000:66:00.0").value;
  rows = (*library)->RemappedRows(faulted);
  ASSERT_TRUE(rows.ok());
  EXPECT_TRUE(rows.value.pending);
  EXPECT_EQ(rows.value.correctable, 2u);
  EXPECT_TRUE((*library)->RetiredPagesPending(faulted).value);
  EXPECT_EQ((*library)->VolatileUncorrectedEcc(faulted).value, 7u);
  auto action = (*library)->RecoveryAction(faulted);
  ASSERT_TRUE(action.ok());
  EXPECT_EQ(action.value, 1u);

  auto old_driver = (*library)->HandleByPci("0000:67:00.0").value;
  EXPECT_EQ((*library)->RecoveryAction(old_driver).status, ReadStatus::kNotSupported);
  EXPECT_EQ((*library)->RemappedRows(old_driver).status, ReadStatus::kNotSupported);
  EXPECT_EQ((*library)->RetiredPagesPending(old_driver).status, ReadStatus::kNotSupported);
  EXPECT_EQ((*library)->VolatileUncorrectedEcc(old_driver).status, ReadStatus::kNotSupported);

  EXPECT_EQ((*library)->HandleByPci("0000:68:00.0").status, ReadStatus::kGpuLost);
  // A handle taken before the GPU fell off: every read says so.
  faults.SetFaults("0000:66:00.0 lost=1\n");
  EXPECT_EQ((*library)->RemappedRows(faulted).status, ReadStatus::kGpuLost);
  EXPECT_EQ((*library)->RetiredPagesPending(faulted).status, ReadStatus::kGpuLost);
  EXPECT_EQ((*library)->VolatileUncorrectedEcc(faulted).status, ReadStatus::kGpuLost);
  EXPECT_EQ((*library)->RecoveryAction(faulted).status, ReadStatus::kGpuLost);
  EXPECT_EQ((*library)->PciAddress(faulted).status, ReadStatus::kGpuLost);
  EXPECT_EQ((*library)->Uuid(faulted).status, ReadStatus::kGpuLost);
  EXPECT_FALSE((*library)->RunningProcessCount(faulted).ok());
}

TEST(NvmlHealthReads, EventsOfTheRegisteredTypesWithTheirInstances) {
  testing::FakeNvmlFaults faults;
  auto library = Library::Open(FAKE_NVML);
  ASSERT_TRUE(library.ok()) << library.error().message;
  EXPECT_EQ((*library)->WaitEvent(0).status, ReadStatus::kNotSupported);  // no set yet
  auto gpu = (*library)->HandleByPci("0000:65:00.0").value;
  auto registered = (*library)->RegisterEvents(gpu, kEventXidCriticalError);
  ASSERT_TRUE(registered.ok());
  EXPECT_EQ(registered.value, kEventXidCriticalError);
  EXPECT_EQ((*library)->WaitEvent(0).status, ReadStatus::kNotFound);

  faults.AddEvent("0000:65:00.0 ecc");  // not registered: passed over
  faults.AddEvent("0000:65:00.0 94 gi=3 ci=1");
  auto event = (*library)->WaitEvent(5000);
  ASSERT_TRUE(event.ok());
  EXPECT_EQ(event.value.gpu, gpu.handle());
  EXPECT_EQ(event.value.type, kEventXidCriticalError);
  EXPECT_EQ(event.value.data, 94u);
  EXPECT_EQ(event.value.gpu_instance_id, 3u);
  EXPECT_EQ(event.value.compute_instance_id, 1u);

  ASSERT_TRUE((*library)->RegisterEvents(gpu, kEventDoubleBitEccError).ok());
  faults.AddEvent("0000:65:00.0 ecc");
  event = (*library)->WaitEvent(5000);
  ASSERT_TRUE(event.ok());
  EXPECT_EQ(event.value.type, kEventDoubleBitEccError);
  EXPECT_EQ(event.value.gpu_instance_id, kNoInstance);
}

}  // namespace
}  // namespace tessera::nvml
