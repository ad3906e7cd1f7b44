// Waiting for events in tests. CI runs tests in parallel on 2 cores, so a step that takes
// milliseconds alone can take seconds there: wait for the event itself, with a bound that only a
// real failure reaches, and never for a fixed time.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera::testing {

// How long a test waits for something that should happen: far above any loaded-machine delay.
inline constexpr std::chrono::seconds kEventTimeout{60};

// Polls `done` until it returns true (then true) or `timeout` passes (then false).
template <typename Done>
bool WaitUntil(Done&& done, std::chrono::milliseconds timeout = kEventTimeout,
               std::chrono::milliseconds poll = std::chrono::milliseconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
}

// Events recorded by one thread (a watch callback, a fake server) and awaited by the test.
class EventLog {
 public:
  void Add(std::string event) {
    {
      std::lock_guard lock(mutex_);
      events_.push_back(std::move(event));
    }
    changed_.notify_all();
  }
  // True once `event` has been recorded (before or during the wait).
  bool WaitFor(const std::string& event, std::chrono::milliseconds timeout = kEventTimeout) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] {
      return std::find(events_.begin(), events_.end(), event) != events_.end();
    });
  }
  std::vector<std::string> Events() const {
    std::lock_guard lock(mutex_);
    return events_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> events_;  // in order (mutex_)
};

}  // namespace tessera::testing
