// Gradient fusion: many small allreduces packed into a few large ones. A training step
// produces hundreds of small gradient tensors; one allreduce each pays the per-call latency
// hundreds of times. A Bucketer copies tensors into a bucket (25 MiB by default) as they are
// added, starts an asynchronous allreduce of the bucket the moment it is full — so it runs
// while the program computes the next gradients — and Flush() reduces what is left and
// copies every result back into its tensor. Every rank must add the same tensors in the same
// order (as in data-parallel training); the results are those of one allreduce per tensor.
// Buckets are blocks from Comm::AllocBuffer (through the daemon, shared memory the daemon
// reduces in place) and are kept for the next step, so a training loop allocates them once.
//
//   gyre::Bucketer b(comm, gyre::DataType::kFloat32, gyre::ReduceOp::kAvg);
//   for (auto& layer : layers_backwards) { layer.Backward(); b.Add(layer.grad, layer.n); }
//   gyre::Status s = b.Flush();
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "client/include/gyre/gyre.h"

namespace gyre {

class Bucketer {
 public:
  static constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;

  // `comm` must outlive the Bucketer. Every tensor is `dtype` and reduced with `op`.
  // `bucket_bytes` 0 reduces every tensor on its own. A negative size or one between 0 and
  // an element, an unknown dtype or op, or avg of an integer type is refused: Add and Flush
  // return that error (InvalidArgument) and no call is made.
  Bucketer(Comm* comm, DataType dtype, ReduceOp op, int64_t bucket_bytes = kDefaultBucketBytes,
           const Options& options = {});
  // Waits for buckets still in flight (their tensors are not written back), then frees the
  // bucket memory.
  ~Bucketer();

  // Queues `count` elements at `data` to be reduced in place. `data` must stay valid and
  // untouched until Flush() returns. A tensor at least as large as a bucket is reduced on
  // its own, without a copy. When a bucket's memory cannot be had (AllocBuffer refused), the
  // bucket still takes its tensors and is refused in its place in the call sequence when the
  // others' would start (Comm::RefuseCall): this rank stays in step, the others' bucket
  // fails naming it, and Flush returns why (Add does not, so a caller that stops at the
  // first error of Add still makes the same calls as the others).
  Status Add(void* data, int64_t count);
  // Starts the partial bucket, waits for every bucket, and writes each result back into its
  // tensor. The first failure is returned (with gyre's verdict) and the Bucketer is empty
  // again; only when `deadline` passes first do the unfinished buckets stay, for another
  // Flush.
  // bounded: every bucket's call is bounded by gyre's own deadlines.
  Status Flush(Deadline deadline = Deadline::Infinite());

  // Allreduce calls made so far, and tensors added (for measuring the fusion).
  int64_t calls() const { return calls_; }
  int64_t tensors() const { return tensors_; }

 private:
  struct Bucket;
  Status Launch();
  // A bucket's memory: a spare one, else a new block from the Comm.
  StatusOr<unsigned char*> TakeStaging();

  Comm* comm_;
  DataType dtype_;
  ReduceOp op_;
  int64_t bucket_elems_;
  Options options_;
  std::unique_ptr<Bucket> open_;
  std::vector<std::unique_ptr<Bucket>> in_flight_;
  std::vector<unsigned char*> spare_;  // bucket memory of finished buckets, for reuse
  int64_t calls_ = 0;
  int64_t tensors_ = 0;
  Status refused_;  // the constructor's arguments, when they cannot be used
};

}  // namespace gyre
