// A real small file system for disk-full tests: a tmpfs of a given size mounted on a fresh
// directory (root, as the tests run), unmounted when the object goes away.
#pragma once

#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/fixture_host.h"

namespace tessera::testing {

class SmallTmpfs {
 public:
  explicit SmallTmpfs(const std::string& size) : path_(dir_.path() + "/fs") {
    std::filesystem::create_directories(path_);
    const std::string options = "size=" + size + ",mode=0700";
    if (::mount("tmpfs", path_.c_str(), "tmpfs", 0, options.c_str()) != 0)
      error_ = std::string("mount tmpfs ") + size + ": " + std::strerror(errno);
  }
  ~SmallTmpfs() {
    if (error_.empty()) ::umount2(path_.c_str(), MNT_DETACH);
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;

  bool mounted() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

  // Fills what is left of it with a file of zeros (writes until ENOSPC); returns its path.
  std::string Fill(const std::string& name = "filler") const {
    const std::string file = path_ + "/" + name;
    std::ofstream out(file, std::ios::binary);
    const std::string block(4096, '\0');
    while (out.write(block.data(), static_cast<std::streamsize>(block.size()))) {
    }
    return file;
  }

 private:
  TempDir dir_;
  std::string path_;
  std::string error_;
};

}  // namespace tessera::testing
