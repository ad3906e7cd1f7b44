// The device plugin's GPU health file: each GPU's recovery step and fault history, so that a
// restarted plugin still advertises a faulted GPU as Unhealthy and resumes its recovery.
// {"version":1,"gpus":{"0000:9d:00.0":{"step":"draining","reason":"...","attempts":0,
//  "stepSinceMs":...,"faultedMs":...,"history":[{"atMs":...,"signal":"xid","xid":79,
//  "class":"gpu","action":"stop-gpu","reason":"..."}]}}}
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/error.h"
#include "health/health.h"

namespace tessera::deviceplugin {

using GpuHealthMap = std::map<std::string, health::GpuHealth>;  // by canonical PCI address

// Pure. The parser is strict on shape (InvalidArgument naming the field) and bounded: at most
// 1024 GPUs, health::kMaxHistory entries each (older ones dropped), strings cut to 512 bytes.
std::string SerializeGpuHealth(const GpuHealthMap& gpus);
Result<GpuHealthMap> ParseGpuHealth(std::string_view json);

// A missing file is no GPU at all. Writes replace the file atomically (and durably), creating
// its directory.
Result<GpuHealthMap> ReadGpuHealthFile(const std::string& path);
Status WriteGpuHealthFile(const std::string& path, const GpuHealthMap& gpus);

}  // namespace tessera::deviceplugin
