// What a share of a GPU pays (docs/sharing.md, "What a share pays"). Under the fault-domain rule
// (the default: --share-across-tenancies off) a shared GPU takes no other tenancy's work, so its
// holder pays the whole GPU while any share of it holds the GPU: usage (GPU-seconds), fair share
// and the GPU quota count 1 GPU, however small the shares. Its containers keep their fractions
// (sharing::Fraction) as the breakdown, and the rest of the GPU is billed as a run of its own,
// "held-<GPU>", in segments between the moments its running shares change: every usage record
// stays an ordinary run (the stores, the meter's sums and the usage API add them up as they are),
// and the records of one GPU held add up to exactly 1 GPU over the time it was held. Where
// tenancies may share a GPU, each share pays its fraction and nothing more.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "fleet/fleet.h"
#include "sharing/sharing.h"

namespace tessera::serve {

class Meter;

// The run ID under which the part of `gpu` its shares leave uncharged is billed:
// "held-0000-18-00.0" (a name the usage stores take as a container's).
std::string HeldRunId(const fleet::GpuRecord& gpu);

// What a share's own record is charged (its container's share_gpus): its fraction; where its
// tenancy pays the whole GPU, no more of it than the GPU's other shares (`others`, their charged
// parts) leave, so that the parts never add up past the one GPU.
double ChargedPart(double fraction, double others, bool whole_gpu);

class ShareHolds {
 public:
  // `across_tenancies`: --share-across-tenancies, which lets tenancies mix on time-sliced GPUs
  // only (an MPS GPU is always one tenancy's: sharing::MayMixTenancies).
  explicit ShareHolds(bool across_tenancies) : across_tenancies_(across_tenancies) {}
  // Whether a GPU shared in `mode` takes no other tenancy's work, so its holder pays it whole.
  bool whole_gpu(sharing::Mode mode) const {
    return !across_tenancies_ || mode != sharing::Mode::kTimeslice;
  }

  // Fair share and the GPU quota: what a tenancy's GPUs in use grow by when a share whose charged
  // part is `part` joins a GPU (`holds_already`: the tenancy has a share there before it), or
  // shrink by when one leaves (`holds_still`: it has one there after it).
  double UseJoining(sharing::Mode mode, bool holds_already, double part) const {
    return whole_gpu(mode) ? (holds_already ? 0.0 : 1.0) : part;
  }
  double UseLeaving(sharing::Mode mode, bool holds_still, double part) const {
    return whole_gpu(mode) ? (holds_still ? 0.0 : 1.0) : part;
  }
  // A share of a MIG slice pays its part only (its fraction of the slice times the slice's of
  // the GPU): the other slices of its GPU take other work, so nothing is held whole.
  bool whole(const sharing::Share& share) const {
    return share.mig_profile.empty() && whole_gpu(share.mode);
  }
  double UseJoining(const sharing::Share& share, bool holds_already, double part) const {
    return whole(share) ? (holds_already ? 0.0 : 1.0) : part;
  }
  double UseLeaving(const sharing::Share& share, bool holds_still, double part) const {
    return whole(share) ? (holds_still ? 0.0 : 1.0) : part;
  }

  // Usage, under the whole-GPU rule (each does nothing otherwise). `gpu` as it is after the
  // change: its shares list the containers that hold it now.
  // A share container on `gpu` runs from its started_ms.
  void Started(const fleet::GpuRecord& gpu, const fleet::ContainerRecord& container, Meter& meter,
               std::vector<fleet::Mutation>& out);
  // A share container left `gpu` (its share already gone from gpu.shares), having run until
  // `ended_ms` when `ran`. When it was its tenancy's last share there, the hold ends: the GPU is
  // billed up to the latest end of its shares. Returns when the hold ended (0 when it goes on or
  // there was none), for the fair share's correction of an end reported late.
  int64_t Left(const fleet::GpuRecord& gpu, const fleet::ContainerRecord& container, bool ran,
               int64_t ended_ms, Meter& meter, std::vector<fleet::Mutation>& out);
  // After a restart: the hold of `gpu` by `uid`, whose running shares are `running` and whose
  // shares that ended are `ended` (all of that tenancy on that GPU, from the container records):
  // billed again from the last moment its running shares changed.
  void Adopt(const fleet::GpuRecord& gpu, const std::string& uid, const std::string& name,
             const std::vector<const fleet::ContainerRecord*>& running,
             const std::vector<const fleet::ContainerRecord*>& ended, Meter& meter);

 private:
  struct Hold {
    std::string uid, name, run_id, gpu_model, mode;
    int64_t since_ms = 0;     // the open segment's start; 0 while none of its shares has run
    int64_t last_end_ms = 0;  // the latest end of a share of it
    std::map<std::string, double> running;  // container -> charged part, of those that run
    double Rest() const;                    // the part of the GPU the running shares leave
  };
  // Ends the open segment at `at_ms` (billed when it has any length and any rest) and opens the
  // next one from there with the running shares as they are now.
  void Resegment(Hold& hold, int64_t at_ms, bool reopen, Meter& meter,
                 std::vector<fleet::Mutation>* out);

  bool across_tenancies_;
  std::map<std::pair<std::string, std::string>, Hold> holds_;  // (GPU ID, uid)
};

}  // namespace tessera::serve
