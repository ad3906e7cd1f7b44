// Runs a program to completion and captures what it wrote: for tests of the real CLI.
#pragma once

#include <string>
#include <vector>

namespace tessera::testing {

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when it was killed
  std::string out;
  std::string err;
};

// argv[0] is looked up on PATH; `path_prefix`, when not empty, is put in front of PATH, or
// replaces it when `keep_path` is false.
ProcessResult RunProcess(const std::vector<std::string>& argv, const std::string& path_prefix = "",
                         bool keep_path = true);

// The tessera binary built next to the tests.
std::string TesseraBinary();

}  // namespace tessera::testing
