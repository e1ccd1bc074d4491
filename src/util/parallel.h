// Running a few independent tasks at once (file reads, checksums).
#pragma once

#include <cstdint>
#include <functional>

namespace ft {

// Runs task(0) .. task(n - 1) concurrently on the calling thread and up to (hardware threads - 1) threads started
// for the call, each taking the next task index until none is left. Returns when all have finished; then rethrows
// the exception of the lowest failed index. Threads of its own rather than a shared pool: a pool made before a
// fork() has no threads in the child (the checkpoint tests fork writers), and thread creation (~20 us) is small
// against tasks of megabytes.
//
// at::parallel_for cannot serve here: its OpenMP body (ATen/ParallelOpenMP.h) is compiled into the caller's
// translation unit, and ours are built without -fopenmp, so it runs the whole range on one thread.
void parallel_tasks(int64_t n, const std::function<void(int64_t)>& task);

}  // namespace ft
