// Several replicas over one cluster store: the records another replica wrote, as the store's
// watch reports them, applied to this replica's model, so that reads on any replica answer from
// its cache and a replica that takes the lead already holds (nearly) everything to place.
//
// A leading replica owns container status and GPU lease records: it merges a reported container
// (a stop request from a follower is taken; its own status, further along, stays). A follower
// takes the reported status as it is.
#pragma once

#include <functional>

#include "fleet/fleet.h"
#include "serve/model.h"

namespace tessera::serve {

class ReplicaSync {
 public:
  explicit ReplicaSync(Model& model) : model_(model) {}

  // Whether this replica leads at this instant; unset: always. Set before changes arrive.
  void SetLeadershipCheck(std::function<bool()> leading) { leading_ = std::move(leading); }

  // Applies one record (an upsert, or a deletion) another writer made. Takes the model's lock.
  void Apply(const fleet::Mutation& change);

 private:
  struct Visitor;
  bool Leading() const { return !leading_ || leading_(); }

  Model& model_;
  std::function<bool()> leading_;
};

}  // namespace tessera::serve
