// The faulted GPUs of a /v1/gpus answer, as `tessera doctor --server` lists them: healthy GPUs
// and GPUs without health are left out, the latest fault is named, and a hostile answer prints
// nothing unbounded or unprintable.
#include "client/gpu_faults.h"

#include <gtest/gtest.h>

namespace tessera::client {
namespace {

using nlohmann::json;

json Gpu(const std::string& id, const json& health) {
  json gpu = {{"id", id}, {"model", "NVIDIA H100 80GB HBM3"}, {"state", "free"}};
  if (!health.is_null()) gpu["health"] = health;
  return gpu;
}

TEST(GpuFaults, ListsOnlyGpusThatAreNotHealthy) {
  json doc = {
      {"gpus",
       {Gpu("0000:18:00.0", {{"step", "healthy"}, {"reason", ""}}),
        Gpu("0000:9d:00.0",
            {{"step", "resetting"},
             {"reason", "gpu-fault: Xid 79 (GPU has fallen off the bus) on 0000:9d:00.0"},
             {"attempts", 1},
             {"faulted_ms", 1700000001000},
             {"last_fault",
              {{"xid", 79}, {"signal", "xid"}, {"class", "gpu"}, {"action", "stop-gpu"}}}}),
        Gpu("0000:ab:00.0@node-b", {{"step", "out"},
                                    {"reason", "remap failure: the GPU cannot repair itself"},
                                    {"last_fault",
                                     {{"xid", nullptr},
                                      {"signal", "remap-failure"},
                                      {"class", "gpu"},
                                      {"action", "out"}}}}),
        Gpu("0000:c0:00.0", nullptr)}}};
  auto faults = ListGpuFaults(doc);
  ASSERT_TRUE(faults.ok()) << faults.error().message;
  ASSERT_EQ(faults->size(), 2u);
  const GpuFault& resetting = (*faults)[0];
  EXPECT_EQ(resetting.id, "0000:9d:00.0");
  EXPECT_EQ(resetting.model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(resetting.step, "resetting");
  EXPECT_FALSE(resetting.stays_out());
  EXPECT_EQ(resetting.attempts, 1);
  EXPECT_EQ(resetting.faulted_ms, 1700000001000);
  EXPECT_EQ(resetting.last_fault, "Xid 79, class gpu, action stop-gpu");
  const GpuFault& out = (*faults)[1];
  EXPECT_EQ(out.id, "0000:ab:00.0@node-b");
  EXPECT_TRUE(out.stays_out());
  EXPECT_EQ(out.reason, "remap failure: the GPU cannot repair itself");
  EXPECT_EQ(out.last_fault, "remap-failure, class gpu, action out");
}

TEST(GpuFaults, ADocumentThatIsNoListingIsRefused) {
  for (const json& doc : {json(nullptr), json::array(), json{{"gpus", "x"}}, json{{"leases", {}}}})
    EXPECT_FALSE(ListGpuFaults(doc).ok()) << doc;
  auto empty = ListGpuFaults(json{{"gpus", json::array()}});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(GpuFaults, HostileTextIsCutToPrintableAndBounded) {
  json doc = {{"gpus",
               {{{"id", "\x1b[2Jgpu"},
                 {"model", std::string(10000, 'm')},
                 {"health",
                  {{"step", "out"},
                   {"reason", "why\n\x1b]0;title\x07" + std::string(10000, 'r')},
                   {"attempts", -5},
                   {"faulted_ms", 1e300},
                   {"last_fault", {{"xid", "79"}, {"signal", 7}, {"class", {1, 2}}}}}}},
                {{"health", "out"}},
                "not an object"}}};
  auto faults = ListGpuFaults(doc);
  ASSERT_TRUE(faults.ok());
  ASSERT_EQ(faults->size(), 1u);
  const GpuFault& fault = (*faults)[0];
  for (const std::string* text : {&fault.id, &fault.model, &fault.reason, &fault.last_fault}) {
    EXPECT_LE(text->size(), 400u);
    for (char c : *text)
      EXPECT_TRUE(c >= 0x20 && c <= 0x7e) << static_cast<int>(c);
  }
  EXPECT_EQ(fault.id, "?[2Jgpu");
  EXPECT_EQ(fault.attempts, 0);
  EXPECT_EQ(fault.faulted_ms, 1000000000000000);
  EXPECT_EQ(fault.last_fault, "");
}

}  // namespace
}  // namespace tessera::client
