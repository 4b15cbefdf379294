// Splitting a kernel's blocks of output columns over XLA's intra-op thread pool (fastmt's CPU kernels).
//
// Why: a decoder step at batch 1 is bound by reading its weights, and one core reads memory at well under the
// rate two do. A kernel that reads its weights on the calling thread alone leaves the other core's share of
// the bandwidth unused: on this project's 2-core machines a Transformer-base decoder step's int8 products take
// 1.58x as long on one thread as split over two, its float32 products 1.23x (1 row) and 1.62x (8 rows)
// (benchmarks/kernel_threads.py, docs/BENCHMARKS.md section 7).
//
// How: the columns' blocks are cut into chunks; the calling thread and up to num_threads - 1 tasks scheduled on
// the pool take chunks from a shared counter until none is left, and the caller then waits only for chunks
// another thread has already started. So the call never waits for a task that has not started (a pool whose
// threads are all busy cannot deadlock it: the caller does every chunk itself), and a task that starts after
// the call returned finds no chunk and touches nothing but the shared counters, which it co-owns.
// Each output column is computed by one thread exactly as before, so results do not depend on the split.
// FASTMT_KERNEL_THREADS=N caps the threads at N (1: the calling thread alone, as before the split; e.g. for
// several processes sharing a machine, or to measure what the split gains: benchmarks/kernel_threads.py).

#ifndef FASTMT_KERNELS_PARALLEL_BLOCKS_H_
#define FASTMT_KERNELS_PARALLEL_BLOCKS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>

#include <immintrin.h>

#include "xla/ffi/api/ffi.h"

namespace fastmt {

// FASTMT_KERNEL_THREADS, read once: the most threads a product uses (0: no cap).
inline int64_t ThreadCap() {
  static const int64_t cap = [] {
    const char* value = std::getenv("FASTMT_KERNEL_THREADS");
    return value ? std::max<int64_t>(std::atoll(value), 0) : int64_t{0};
  }();
  return cap;
}

// Runs fn(begin, end) over blocks [0, count) in chunks of at least min_chunk blocks (fewer chunks than
// that would make are not worth a thread's wake-up), on the caller and on `pool`.
template <typename Fn>
void ParallelBlocks(xla::ffi::ThreadPool& pool, int64_t count, int64_t min_chunk, const Fn& fn) {
  int64_t threads = std::max<int64_t>(pool.num_threads(), 1);
  if (ThreadCap() > 0) threads = std::min(threads, ThreadCap());
  // A few chunks per thread, so that a thread that starts late still gets a share.
  const int64_t chunks = std::min<int64_t>(count / std::max<int64_t>(min_chunk, 1), 4 * threads);
  if (threads == 1 || chunks < 2) {
    fn(int64_t{0}, count);
    return;
  }
  struct Counters {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
  };
  auto counters = std::make_shared<Counters>();
  auto work = [counters, chunks, count, fn]() {
    for (int64_t chunk; (chunk = counters->next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
      fn(chunk * count / chunks, (chunk + 1) * count / chunks);
      counters->done.fetch_add(1, std::memory_order_release);
    }
  };
  for (int64_t t = 1; t < std::min(threads, chunks); ++t) pool.Schedule(decltype(work)(work));  // a copy each
  work();
  // Only chunks that another thread is computing right now are left: they take microseconds, unless that
  // thread lost its core (more busy threads than cores: test workers, other processes), so after a short spin
  // the wait yields the core instead of burning it.
  for (int spins = 0; counters->done.load(std::memory_order_acquire) < chunks; ++spins) {
    if (spins < 4096) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace fastmt

#endif  // FASTMT_KERNELS_PARALLEL_BLOCKS_H_
