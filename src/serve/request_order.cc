#include "serve/request_order.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "serve/queue.h"

namespace tessera::serve {

using fleet::ContainerRecord;

std::string QuotaWaitReason(double in_use, int quota) {
  const std::string held = in_use == std::floor(in_use)
                               ? std::to_string(static_cast<int64_t>(in_use))
                               : fmt::format("{:.3f}", in_use);
  return fmt::format("waiting: tenancy quota {}/{} GPUs in use", held, quota);
}

RequestOrder::RequestOrder(std::vector<ContainerRecord*> pending,
                           const scheduling::Scheduler& queue) {
  fair_ = queue.options().mode == scheduling::Mode::kFair;
  std::stable_sort(pending.begin(), pending.end(), [](const auto* a, const auto* b) {
    return a->spec.priority > b->spec.priority;
  });
  if (!fair_) {
    fifo_ = std::move(pending);
    return;
  }
  std::map<std::string, size_t> index;
  for (const auto& usage : queue.Usage()) {
    index[usage.name] = lists_.size();
    lists_.push_back({(usage.recent_gpus + usage.in_use + usage.other_gpus) / usage.weight,
                      usage.weight,
                      0,
                      {}});
  }
  for (ContainerRecord* container : pending) {
    auto it = index.find(QueueTenancy(*container));
    if (it == index.end()) {
      it = index.emplace(QueueTenancy(*container), lists_.size()).first;
      lists_.push_back({0, 1, 0, {}});
    }
    lists_[it->second].requests.push_back(container);
  }
}

ContainerRecord* RequestOrder::Next() {
  if (!fair_) return next_ < fifo_.size() ? fifo_[next_++] : nullptr;
  List* best = nullptr;
  for (auto& list : lists_)
    if (list.next < list.requests.size() && (!best || list.key < best->key)) best = &list;
  if (!best) return nullptr;
  current_ = best;
  return best->requests[best->next++];
}

void RequestOrder::Placed(double gpus) {
  if (fair_ && current_) current_->key += gpus / current_->weight;
}

}  // namespace tessera::serve
