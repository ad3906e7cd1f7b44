// Reading a whole file as text in tests.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace tessera::testing {

// The whole content of the file at `path`; "" when it is empty or cannot be read.
inline std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace tessera::testing
