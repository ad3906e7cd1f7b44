// Crash-safe file replacement: readers see the old content or the new, never a torn file.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/error.h"

namespace tessera {

// What a replacement must survive. Readers never see a torn file either way (rename(2)); a file
// the process writes survives the process's own crash in the page cache. Surviving a power loss
// as well takes an fsync of the file and of its directory: worth it for state, not for files
// that are rebuilt after every boot. In between, kWholeOnPowerLoss fsyncs the file but not the
// directory: after a power loss the path holds the old content or the new, never a torn or empty
// file, but the replacement itself may be lost (until the next journal commit, or the next
// kPowerLoss write in that directory). For changes that are harmless to lose but must not leave
// a file that cannot be read.
enum class Durability { kPowerLoss, kWholeOnPowerLoss, kProcessCrash };

// Writes `content` to a temporary file in the same directory as `path`, sets `mode`, renames it
// over `path`; with kPowerLoss the file is fsynced before and the directory after the rename,
// with kWholeOnPowerLoss only the file.
Status WriteFileAtomically(const std::string& path, std::string_view content, mode_t mode = 0644,
                           Durability durability = Durability::kPowerLoss);

// Like WriteFileAtomically, but never replaces: when `path` exists it fails with AlreadyExists
// and leaves the file as it was (the temporary file is linked into place, and link(2) refuses
// an existing name where rename(2) would replace it).
Status CreateFileAtomically(const std::string& path, std::string_view content, mode_t mode = 0644);

// Removes `path`; a missing file is no error. With kPowerLoss the directory is fsynced after a
// removal, so that the removal survives a power loss.
Status RemoveFile(const std::string& path, Durability durability = Durability::kPowerLoss);

// fsyncs a directory: the entries created, renamed or removed in it survive a power loss.
Status SyncDirectory(const std::string& dir);

// ReadBoundedFile (common/bounded_file.h) with a generous limit, for callers that name none:
// a regular file of at most 64 MiB, NotFound when it does not exist. A file read from outside
// the process should name the limit its format needs instead.
inline constexpr size_t kMaxWholeFileBytes = size_t{64} << 20;
Result<std::string> ReadWholeFile(const std::string& path);

}  // namespace tessera
