#include "util/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

namespace ft {

void parallel_tasks(int64_t n, const std::function<void(int64_t)>& task) {
  if (n <= 0) return;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::atomic<int64_t> next{0};
  const auto work = [&] {
    for (int64_t i = next++; i < n; i = next++) {
      try {
        task(i);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
      }
    }
  };
  const int64_t hardware = std::max<int64_t>(1, std::thread::hardware_concurrency());
  std::vector<std::thread> helpers;
  for (int64_t t = 1; t < std::min(n, hardware); ++t) helpers.emplace_back(work);
  work();
  for (auto& helper : helpers) helper.join();
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace ft
