// The exit code of each error category, and the one way a command fails (commands.h).
#include <cstdio>

#include "cli/commands.h"

namespace tessera::cli {

int ExitCodeFor(const Error& error) {
  switch (error.category) {
    case ErrorCategory::kInvalidArgument:
      return 2;
    case ErrorCategory::kNotFound:
      return 3;
    case ErrorCategory::kUnavailable:
      return 4;
    case ErrorCategory::kPermissionDenied:
      return 6;
    default:
      return 5;
  }
}

void Fail(const Error& error) {
  std::fprintf(stderr, "tessera: %s\n", error.message.c_str());
  throw CLI::RuntimeError(ExitCodeFor(error));
}

}  // namespace tessera::cli
