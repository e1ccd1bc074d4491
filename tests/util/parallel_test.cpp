// parallel_tasks: every task runs once, at the same time as others, and a failure reaches the caller after all ended.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "util/parallel.h"

namespace ft::test {
namespace {

TEST(ParallelTasks, RunsEveryTaskOnceAndSeveralAtATime) {
  constexpr int64_t kTasks = 6;
  std::vector<std::atomic<int>> runs(kTasks);
  std::atomic<int> running{0}, most{0};
  parallel_tasks(kTasks, [&](int64_t i) {
    const int now = ++running;
    for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // long enough for the others to start
    --running;
    ++runs[static_cast<size_t>(i)];
  });
  for (const auto& r : runs) EXPECT_EQ(r.load(), 1);
  if (std::thread::hardware_concurrency() > 1) {
    EXPECT_GT(most.load(), 1) << "the tasks ran one after another";
  }
}

TEST(ParallelTasks, RethrowsTheFirstFailureAfterEveryTaskEnded) {
  std::atomic<int> finished{0};
  try {
    parallel_tasks(4, [&](int64_t i) {
      if (i == 1 || i == 3) throw std::runtime_error("task " + std::to_string(i));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ++finished;
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "task 1");
  }
  EXPECT_EQ(finished.load(), 2);
}

// A child of fork() has only the thread that forked; the tasks still run there.
TEST(ParallelTasks, RunsInAForkedChild) {
  parallel_tasks(2, [](int64_t) {});  // threads made and ended in the parent first
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::atomic<int> runs{0};
    parallel_tasks(4, [&](int64_t) { ++runs; });
    ::_exit(runs.load() == 4 ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ParallelTasks, NoTasksIsANoOp) {
  int calls = 0;
  parallel_tasks(0, [&](int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace ft::test
