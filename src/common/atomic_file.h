// Crash-safe file replacement: readers see the old content or the new, never a torn file.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/error.h"

namespace tessera {

// Writes `content` to a temporary file in the same directory as `path`, fsyncs it, sets `mode`,
// renames it over `path` and fsyncs the directory so the rename itself survives a crash.
Status WriteFileAtomically(const std::string& path, std::string_view content, mode_t mode = 0644);

// Like WriteFileAtomically, but never replaces: when `path` exists it fails with AlreadyExists
// and leaves the file as it was (the temporary file is linked into place, and link(2) refuses
// an existing name where rename(2) would replace it).
Status CreateFileAtomically(const std::string& path, std::string_view content, mode_t mode = 0644);

// Reads a whole file. NotFound when it does not exist.
Result<std::string> ReadWholeFile(const std::string& path);

}  // namespace tessera
