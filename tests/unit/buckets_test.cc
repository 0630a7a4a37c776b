// The Bucketer's packing, against a fake Comm that "reduces" by doubling (a sum over two
// identical ranks) and records every call: tensors are packed in order, a full bucket starts
// at once, a large tensor goes alone and in place, results land back in their tensors, and a
// failed call's error comes out of Flush.
#include "client/include/gyre/buckets.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>

#include "client/comm_impl.h"

namespace gyre {
namespace {

class FakeComm : public Comm {
 public:
  std::vector<int64_t> counts;  // each allreduce call's count
  int fail_call = -1;           // this call (0-based) fails

  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string mode() const override { return "fake"; }
  std::shared_ptr<Work> AllreduceAsync(const void* in, void* out, int64_t count, DataType, ReduceOp,
                                       const Options&) override {
    const int call = static_cast<int>(counts.size());
    counts.push_back(count);
    if (call == fail_call) {
      return client::FinishedWork(UnavailableError("rank 1 dead (fake)"));
    }
    const float* src = static_cast<const float*>(in);
    float* dst = static_cast<float*>(out);
    for (int64_t i = 0; i < count; ++i) dst[i] = 2 * src[i];
    return client::FinishedWork(Status::Ok());
  }
  // Not used by the Bucketer.
  Status Allreduce(const void*, void*, int64_t, DataType, ReduceOp, const Options&) override {
    return Unused();
  }
  Status Broadcast(const void*, void*, int64_t, DataType, int, const Options&) override {
    return Unused();
  }
  Status Reduce(const void*, void*, int64_t, DataType, ReduceOp, int, const Options&) override {
    return Unused();
  }
  Status Allgather(const void*, void*, int64_t, DataType, const Options&) override {
    return Unused();
  }
  Status ReduceScatter(const void*, void*, int64_t, DataType, ReduceOp, const Options&) override {
    return Unused();
  }
  Status Alltoall(const void*, void*, int64_t, DataType, const Options&) override {
    return Unused();
  }
  Status Gather(const void*, void*, int64_t, DataType, int, const Options&) override {
    return Unused();
  }
  Status Scatter(const void*, void*, int64_t, DataType, int, const Options&) override {
    return Unused();
  }
  Status Barrier(const Options&) override { return Unused(); }
  Status RefuseCall(const std::string& collective, const Status& why) override {
    counts.push_back(-1);  // a refused call, in its place
    refused.push_back(collective + ": " + why.ToString());
    return why;
  }
  Status Send(const void*, int64_t, DataType, int, int, const Options&) override {
    return Unused();
  }
  Status Recv(void*, int64_t, DataType, int, int, const Options&) override { return Unused(); }
  std::shared_ptr<Work> SendAsync(const void*, int64_t, DataType, int, int,
                                  const Options&) override {
    return client::FinishedWork(Unused());
  }
  std::shared_ptr<Work> RecvAsync(void*, int64_t, DataType, int, int, const Options&) override {
    return client::FinishedWork(Unused());
  }
  std::shared_ptr<Work> BroadcastAsync(const void*, void*, int64_t, DataType, int,
                                       const Options&) override {
    return client::FinishedWork(Unused());
  }
  std::shared_ptr<Work> AllgatherAsync(const void*, void*, int64_t, DataType,
                                       const Options&) override {
    return client::FinishedWork(Unused());
  }
  std::shared_ptr<Work> ReduceScatterAsync(const void*, void*, int64_t, DataType, ReduceOp,
                                           const Options&) override {
    return client::FinishedWork(Unused());
  }
  CallInfo last() const override { return {}; }
  StatusOr<void*> AllocBuffer(size_t bytes) override {
    if (allocs++ == fail_alloc) return ResourceExhaustedError("AllocBuffer: no memory (fake)");
    return std::malloc(bytes);
  }
  Status FreeBuffer(void* p) override {
    ++frees;
    std::free(p);
    return Status::Ok();
  }
  int allocs = 0, frees = 0;
  int fail_alloc = -1;               // this AllocBuffer call (0-based) fails
  std::vector<std::string> refused;  // RefuseCall's collective and reason, in order

 private:
  static Status Unused() { return InternalError("not used by the Bucketer"); }
};

std::vector<float> Tensor(int64_t n, float first) {
  std::vector<float> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(BucketerTest, PacksInOrderAndWritesEveryResultBack) {
  FakeComm comm;
  // Buckets of 10 floats: 4 + 4 fit, the next 4 starts a new bucket; 10 is alone, in place.
  Bucketer b(&comm, DataType::kFloat32, ReduceOp::kSum, 10 * sizeof(float));
  std::vector<std::vector<float>> t = {Tensor(4, 0), Tensor(4, 100), Tensor(4, 200),
                                       Tensor(10, 300), Tensor(3, 400)};
  const std::vector<std::vector<float>> before = t;
  for (auto& x : t) ASSERT_TRUE(b.Add(x.data(), static_cast<int64_t>(x.size())).ok());
  // Nothing is written back before Flush, except the in-place one.
  EXPECT_EQ(t[0], before[0]);
  ASSERT_TRUE(b.Flush().ok());
  EXPECT_EQ(comm.counts, (std::vector<int64_t>{8, 4, 10, 3}));
  EXPECT_EQ(b.calls(), 4);
  EXPECT_EQ(b.tensors(), 5);
  for (size_t i = 0; i < t.size(); ++i) {
    for (size_t k = 0; k < t[i].size(); ++k) EXPECT_EQ(t[i][k], 2 * before[i][k]) << i << "," << k;
  }
}

// A training loop allocates its buckets once: later steps reuse them, and the Bucketer frees
// every one when it goes.
TEST(BucketerTest, BucketMemoryComesFromTheCommAndIsReusedAcrossSteps) {
  FakeComm comm;
  {
    Bucketer b(&comm, DataType::kFloat32, ReduceOp::kSum, 8 * sizeof(float));
    for (int step = 0; step < 4; ++step) {
      std::vector<std::vector<float>> t = {Tensor(5, step), Tensor(5, 10), Tensor(5, 20)};
      const auto before = t;
      for (auto& x : t) ASSERT_TRUE(b.Add(x.data(), 5).ok());
      ASSERT_TRUE(b.Flush().ok());
      for (size_t i = 0; i < t.size(); ++i) {
        for (size_t k = 0; k < 5; ++k) ASSERT_EQ(t[i][k], 2 * before[i][k]) << step;
      }
      EXPECT_EQ(comm.allocs, 3) << "step " << step;  // three buckets in flight at most
    }
    EXPECT_EQ(comm.frees, 0);
  }
  EXPECT_EQ(comm.frees, comm.allocs);
}

TEST(BucketerTest, ExactlyFullBucketStartsAtOnce) {
  FakeComm comm;
  Bucketer b(&comm, DataType::kFloat32, ReduceOp::kSum, 8 * sizeof(float));
  auto x = Tensor(4, 1), y = Tensor(4, 5);
  ASSERT_TRUE(b.Add(x.data(), 4).ok());
  EXPECT_TRUE(comm.counts.empty());
  ASSERT_TRUE(b.Add(y.data(), 4).ok());
  EXPECT_EQ(comm.counts, (std::vector<int64_t>{8}));  // started before Flush
  ASSERT_TRUE(b.Flush().ok());
  EXPECT_EQ(x[3], 8.0f);
  EXPECT_EQ(y[0], 10.0f);
}

TEST(BucketerTest, AFailedBucketIsFlushsErrorAndTheRestStillLand) {
  FakeComm comm;
  comm.fail_call = 0;
  Bucketer b(&comm, DataType::kFloat32, ReduceOp::kSum, 4 * sizeof(float));
  auto x = Tensor(4, 1), y = Tensor(2, 7);
  ASSERT_TRUE(b.Add(x.data(), 4).ok());
  ASSERT_TRUE(b.Add(y.data(), 2).ok());
  Status s = b.Flush();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("rank 1 dead"), std::string::npos);
  EXPECT_EQ(x[0], 1.0f);        // its bucket failed: untouched
  EXPECT_EQ(y[1], 16.0f);       // the next bucket's result landed
  EXPECT_TRUE(b.Flush().ok());  // empty again
}

// A bucket whose memory cannot be had is refused in its place, when the others' would start,
// so this rank stays in step (the others' bucket fails naming it): before, Add returned the
// error and no call was made here, and this rank's next bucket met the others' previous one.
TEST(BucketerTest, ABucketWithoutMemoryIsRefusedInItsPlaceAndFlushSaysSo) {
  FakeComm comm;
  comm.fail_alloc = 0;
  Bucketer b(&comm, DataType::kFloat32, ReduceOp::kSum, 4 * sizeof(float));
  auto x = Tensor(2, 1), y = Tensor(2, 5), z = Tensor(3, 9);
  // Add goes on as the others' does; the error comes from Flush.
  ASSERT_TRUE(b.Add(x.data(), 2).ok());
  EXPECT_TRUE(comm.counts.empty());
  ASSERT_TRUE(b.Add(y.data(), 2).ok());
  EXPECT_EQ(comm.counts, (std::vector<int64_t>{-1}));  // full: refused where it would start
  ASSERT_EQ(comm.refused.size(), 1u);
  EXPECT_NE(comm.refused[0].find("allreduce: ResourceExhausted: Bucketer: a bucket's memory: "
                                 "AllocBuffer: no memory (fake)"),
            std::string::npos)
      << comm.refused[0];
  ASSERT_TRUE(b.Add(z.data(), 3).ok());
  const Status flushed = b.Flush();
  EXPECT_EQ(flushed.code(), StatusCode::kResourceExhausted) << flushed;
  EXPECT_EQ(comm.counts, (std::vector<int64_t>{-1, 3}));
  EXPECT_EQ(x, Tensor(2, 1));  // refused: untouched
  EXPECT_EQ(y, Tensor(2, 5));
  EXPECT_EQ(z[2], 22.0f);  // the next bucket's result landed
  EXPECT_TRUE(b.Flush().ok());
}

// Arguments a Bucketer cannot use are refused at its first Add and Flush, and no call is made:
// a negative bucket, or one of less than an element, ran every tensor alone, and avg of
// integers failed only in the calls. 0 is every tensor on its own, as documented.
TEST(BucketerTest, ABucketOfNoElementOrAvgOfIntegersIsRefused) {
  FakeComm comm;
  auto x = Tensor(4, 1);
  for (int64_t bytes : {int64_t{-5}, int64_t{1}, int64_t{3}}) {
    Bucketer b(&comm, DataType::kFloat32, ReduceOp::kSum, bytes);
    const Status s = b.Add(x.data(), 4);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("bucket_bytes " + std::to_string(bytes) +
                               " holds no float32 element (4 bytes)"),
              std::string::npos)
        << s;
    EXPECT_EQ(b.Flush().code(), StatusCode::kInvalidArgument);
  }
  Bucketer avg(&comm, DataType::kInt32, ReduceOp::kAvg);
  const Status s = avg.Add(x.data(), 4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("avg"), std::string::npos) << s;
  // A dtype or op no gyre build knows (a value cast from a stray integer) is refused by name
  // before any memory or call.
  Bucketer bad_type(&comm, static_cast<DataType>(77), ReduceOp::kSum);
  const Status t = bad_type.Add(x.data(), 4);
  EXPECT_EQ(t.code(), StatusCode::kInvalidArgument) << t;
  EXPECT_NE(t.message().find("dtype value 77 is not a gyre dtype"), std::string::npos) << t;
  EXPECT_EQ(bad_type.Flush().code(), StatusCode::kInvalidArgument);
  Bucketer bad_op(&comm, DataType::kFloat32, static_cast<ReduceOp>(42));
  const Status o = bad_op.Add(x.data(), 4);
  EXPECT_EQ(o.code(), StatusCode::kInvalidArgument) << o;
  EXPECT_NE(o.message().find("reduce op value 42 is not a gyre reduce op"), std::string::npos) << o;
  EXPECT_EQ(bad_op.Flush().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm.counts.empty());
  EXPECT_EQ(comm.allocs, 0);
  for (int64_t bytes : {int64_t{0}, int64_t{4}}) {  // each tensor on its own
    Bucketer alone(&comm, DataType::kFloat32, ReduceOp::kSum, bytes);
    EXPECT_TRUE(alone.Add(x.data(), 1).ok());
    EXPECT_TRUE(alone.Add(x.data() + 1, 2).ok());
    EXPECT_TRUE(alone.Flush().ok());
  }
  EXPECT_EQ(comm.counts, (std::vector<int64_t>{1, 2, 1, 2}));
}

TEST(BucketerTest, BadTensorsAreInvalidArgument) {
  FakeComm comm;
  Bucketer b(&comm, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(b.Add(nullptr, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(b.Add(nullptr, -1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(b.Add(nullptr, 0).ok());
  EXPECT_TRUE(b.Flush().ok());
  EXPECT_TRUE(comm.counts.empty());
}

}  // namespace
}  // namespace gyre
