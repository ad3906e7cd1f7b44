// The text-level pieces of format 2's Hyper-V facts that need no Windows: version lines, the
// containerd config's runtime tables, a service command line's --config, the interrupt and class
// rules. Compiled into the mingw-w64 discovery tool and into the Linux tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "windows/snapshot.h"

namespace tessera::windows::native {

// The version in the first line of `containerd --version` ("containerd
// github.com/containerd/containerd v1.7.20 8fc6bc...") or `containerd-shim-runhcs-v1 --version`
// ("containerd-shim-runhcs-v1 version v0.12.9"): the first token that is [v]N.N[.N...], without
// the v. "" when there is none (a shim built without a version prints only its commit).
std::string VersionFromOutput(std::string_view output);

// The config file a containerd command line names (--config PATH, --config=PATH, -c PATH); ""
// when none. argv[0] is the program.
std::string ConfigFlag(const std::vector<std::string>& argv);

// The CRI plugin's runtime tables in a containerd config: plugins."io.containerd.grpc.v1.cri"
// (config version 2), plugins."io.containerd.cri.v1.runtime" (version 3, containerd 2.x) or
// plugins.cri (version 1), each with runtime_type, options.SandboxIsolation and the annotation
// allow-lists, ordered by name. At most 64 runtimes and 64 patterns each are kept. InvalidArgument
// for text that is not TOML.
Result<std::vector<ContainerdRuntime>> ContainerdRuntimesFromConfig(std::string_view toml_text);

// A message-signaled interrupt's number reads 42949... in decimal (it is negative as a signed
// 32-bit value): the rule Microsoft's SurveyDDA.ps1 uses.
bool IsMessageSignaledIrq(uint32_t number);

// A PCI display controller (base class 03) or processing accelerator (12).
bool IsGpuClass(std::optional<uint32_t> class_code);

}  // namespace tessera::windows::native
