// Elapsed wall time for logs and metrics: the steady clock, in seconds.
#pragma once

#include <chrono>

namespace ft {

using SteadyClock = std::chrono::steady_clock;

// Seconds from `start` to now.
inline double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

}  // namespace ft
