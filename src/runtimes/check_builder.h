// Building a doctor Check, for the files of src/runtimes that make them (internal).
#pragma once

#include <string>
#include <utility>

#include "runtimes/runtimes.h"

namespace tessera::runtimes::checks {

inline Check Make(std::string id, std::string title, Verdict verdict, std::string evidence,
                  std::string fix = "") {
  return Check{std::move(id), std::move(title), verdict, std::move(evidence), std::move(fix)};
}

}  // namespace tessera::runtimes::checks
