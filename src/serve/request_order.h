// What the scheduler's passes beside the queue (MIG slices, shares of a GPU) have in common: the
// order they try their pending requests in (the scheduling policy's, fair share or FIFO), and
// the reason a request over its tenancy's GPU quota waits.
#pragma once

#include <string>
#include <vector>

#include "fleet/fleet.h"
#include "scheduling/scheduling.h"

namespace tessera::serve {

// Fair: a merge of the tenancies' own lists (priority, then submission) that always takes the
// tenancy with the lowest (recent GPU usage + GPUs in use, slices and shares included, + what
// this pass has placed for it) / weight, as the queue orders whole-GPU requests. FIFO: priority,
// then submission.
// "waiting: tenancy quota 1.250/2 GPUs in use": whole GPUs as integers; with MIG slices or
// shares in use, to three decimals (as the queue's reasons).
std::string QuotaWaitReason(double in_use, int quota);

class RequestOrder {
 public:
  RequestOrder(std::vector<fleet::ContainerRecord*> pending, const scheduling::Scheduler& queue);
  // The next request to try; null when none is left.
  fleet::ContainerRecord* Next();
  // The request Next() gave was placed, holding `gpus`.
  void Placed(double gpus);

 private:
  struct List {
    double key = 0;
    double weight = 1;
    size_t next = 0;
    std::vector<fleet::ContainerRecord*> requests;
  };
  bool fair_ = true;
  std::vector<fleet::ContainerRecord*> fifo_;
  size_t next_ = 0;
  std::vector<List> lists_;
  List* current_ = nullptr;
};

}  // namespace tessera::serve
