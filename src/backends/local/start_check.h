// The local backend's check at start: can podman start a runc container here, as
// `tessera doctor --probe` checks it, and what must every container get so that it can. Where
// podman's default ulimits for root are more than runc may set (no CAP_SYS_RESOURCE: "error
// setting rlimit type 7"), containers get explicit --ulimit values within the hard limits that
// count: this process's and those of conmon, runc's parent, which podman may lower further.
#pragma once

#include <string>
#include <vector>

namespace tessera::backends {

struct StartCheck {
  std::vector<std::string> run_args;  // `podman run` flags every container gets (--ulimit ...)
  std::string problem;  // empty when containers start; else podman's error and doctor's fix
  std::string summary;  // one line for the log: what was found and what was chosen, and why
};

// Starts throw-away containers (a 129-byte program in a temporary root, no image or network);
// their names start with "tessera-check-<instance>-".
StartCheck CheckContainersStart(const std::string& podman, const std::string& runc_runtime,
                                const std::string& instance);

}  // namespace tessera::backends
