// What an MPS client container is given, and nothing more: never the host's /tmp/nvidia-mps,
// never the host's /dev/shm.
#include "sharing/sharing.h"

namespace tessera::sharing {

ClientEdits MpsClientEdits(const Share& share, const std::string& host_pipe_directory,
                           const std::string& host_shm_directory) {
  ClientEdits edits;
  if (share.mode != Mode::kMps) return edits;
  edits.env["CUDA_MPS_PIPE_DIRECTORY"] = kContainerPipeDirectory;
  // The client's limit is per device it sees; the container sees one GPU, as device 0. Written
  // in MiB, the unit the MPS interface documents ("0=1024M").
  edits.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] =
      "0=" + std::to_string(share.memory_bytes / kMiB) + "M";
  edits.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string(share.compute_percent);
  // Read-only: a client only connects to the daemon's sockets there (connect(2) needs no
  // writable mount), and a container can then plant nothing in the directory the service's own
  // commands go through, nor fill it.
  edits.mounts.push_back({host_pipe_directory, kContainerPipeDirectory, true});
  edits.mounts.push_back({host_shm_directory, "/dev/shm", false});
  return edits;
}

}  // namespace tessera::sharing
