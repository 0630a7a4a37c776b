#include "client/include/gyre/buckets.h"

#include <algorithm>
#include <cstring>

namespace gyre {

struct Bucketer::Bucket {
  struct Entry {
    void* data;
    int64_t offset;  // in elements, within `staging`
    int64_t count;
  };
  // A block from Comm::AllocBuffer, left uninitialised; null for a tensor reduced in place
  // on its own.
  unsigned char* staging = nullptr;
  // Why this bucket has no memory (AllocBuffer refused): it is refused in the call sequence
  // where it would start, and nothing is copied into it or back.
  Status no_memory;
  std::vector<Entry> entries;
  int64_t used = 0;  // elements
  std::shared_ptr<Work> work;
};

Bucketer::Bucketer(Comm* comm, DataType dtype, ReduceOp op, int64_t bucket_bytes,
                   const Options& options)
    : comm_(comm), dtype_(dtype), op_(op), bucket_elems_(1), options_(options) {
  if (Status fits = CheckReduceSupported(dtype, op); !fits.ok()) {
    refused_ = fits.WithContext("Bucketer");
    return;
  }
  const int64_t esize = static_cast<int64_t>(DataTypeSize(dtype));
  if (bucket_bytes == 0) {
    bucket_elems_ = 1;  // every tensor on its own
  } else if (bucket_bytes < esize) {
    refused_ = InvalidArgumentError("Bucketer: bucket_bytes " + std::to_string(bucket_bytes) +
                                    " holds no " + DataTypeName(dtype) + " element (" +
                                    std::to_string(esize) + " bytes)");
  } else {
    bucket_elems_ = bucket_bytes / esize;
  }
}

Bucketer::~Bucketer() {
  // bounded: each in-flight call is bounded by gyre's own deadlines.
  for (auto& b : in_flight_) {
    if (b->work != nullptr) b->work->Wait().IgnoreError();
    if (b->staging != nullptr) spare_.push_back(b->staging);
  }
  if (open_ != nullptr && open_->staging != nullptr) spare_.push_back(open_->staging);
  for (unsigned char* block : spare_) comm_->FreeBuffer(block).IgnoreError();
}

StatusOr<unsigned char*> Bucketer::TakeStaging() {
  if (!spare_.empty()) {
    unsigned char* block = spare_.back();
    spare_.pop_back();
    return block;
  }
  GYRE_ASSIGN_OR_RETURN(
      void* block, comm_->AllocBuffer(static_cast<size_t>(bucket_elems_) * DataTypeSize(dtype_)));
  return static_cast<unsigned char*>(block);
}

Status Bucketer::Add(void* data, int64_t count) {
  GYRE_RETURN_IF_ERROR(refused_);
  if (count < 0 || (count > 0 && data == nullptr)) {
    return InvalidArgumentError("Bucketer::Add: " + std::to_string(count) +
                                " elements at a null pointer");
  }
  if (count == 0) return Status::Ok();
  ++tensors_;
  const size_t esize = DataTypeSize(dtype_);
  if (count >= bucket_elems_) {
    // Large enough to be its own bucket: reduce it where it lies. The order of calls is the
    // order of Add on every rank, so the open bucket is started first.
    if (open_ != nullptr && open_->used > 0) GYRE_RETURN_IF_ERROR(Launch());
    auto b = std::make_unique<Bucket>();
    b->entries.push_back({data, 0, count});
    b->used = count;
    b->work = comm_->AllreduceAsync(data, data, count, dtype_, op_, options_);
    ++calls_;
    in_flight_.push_back(std::move(b));
    return Status::Ok();
  }
  if (open_ != nullptr && open_->used + count > bucket_elems_) GYRE_RETURN_IF_ERROR(Launch());
  if (open_ == nullptr) {
    StatusOr<unsigned char*> staging = TakeStaging();
    open_ = std::make_unique<Bucket>();
    if (staging.ok()) {
      open_->staging = *staging;
    } else {
      // The bucket still counts its tensors, so it ends where the others' does; Flush says.
      open_->no_memory = staging.status().WithContext("Bucketer: a bucket's memory");
    }
  }
  if (open_->staging != nullptr) {
    std::memcpy(open_->staging + open_->used * esize, data, count * esize);
  }
  open_->entries.push_back({data, open_->used, count});
  open_->used += count;
  if (open_->used == bucket_elems_) GYRE_RETURN_IF_ERROR(Launch());
  return Status::Ok();
}

Status Bucketer::Launch() {
  std::unique_ptr<Bucket> b = std::move(open_);
  if (b == nullptr || b->used == 0) return Status::Ok();
  if (b->staging == nullptr) {
    // Refused in its place: the others' same bucket fails naming this rank and why.
    comm_->RefuseCall("allreduce", b->no_memory).IgnoreError();
    in_flight_.push_back(std::move(b));
    return Status::Ok();
  }
  b->work = comm_->AllreduceAsync(b->staging, b->staging, b->used, dtype_, op_, options_);
  ++calls_;
  in_flight_.push_back(std::move(b));
  return Status::Ok();
}

Status Bucketer::Flush(Deadline deadline) {
  GYRE_RETURN_IF_ERROR(refused_);
  Status first = Launch();
  const size_t esize = DataTypeSize(dtype_);
  std::vector<std::unique_ptr<Bucket>> unfinished;
  for (auto& b : in_flight_) {
    if (b->work == nullptr) {  // refused for want of memory: nothing to write back
      if (first.ok()) first = b->no_memory;
      continue;
    }
    // bounded: the caller's deadline, and each call is bounded by gyre's own deadlines.
    Status s = b->work->Wait(deadline);
    if (!b->work->Done()) {
      // The caller's deadline passed first: the call still writes into this bucket's
      // staging, so it stays (and keeps its memory) for another Flush.
      if (first.ok()) first = s;
      unfinished.push_back(std::move(b));
      continue;
    }
    if (b->staging == nullptr) {  // reduced in place
      if (first.ok() && !s.ok()) first = s;
      continue;
    }
    if (!s.ok()) {
      if (first.ok()) first = s;
    } else {
      for (const auto& e : b->entries) {
        std::memcpy(e.data, b->staging + e.offset * esize, e.count * esize);
      }
    }
    spare_.push_back(b->staging);
  }
  // Written back or failed: done with. Only the unfinished stay.
  in_flight_ = std::move(unfinished);
  return first;
}

}  // namespace gyre
