// One test body over every Store back end: HashStore, FileStore and TcpStore (against a
// TcpStoreServer on 127.0.0.1, port 0).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/store/file_store.h"
#include "core/store/hash_store.h"
#include "core/store/prefix_store.h"
#include "core/store/rendezvous.h"
#include "core/store/tcp_store.h"
#include "core/store/tcp_store_server.h"
#include "tests/store/store_test_util.h"

namespace gyre::store {
namespace {

using ::testing::HasSubstr;
using testing::In;

enum class Backend { kHash, kFile, kTcp };

std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  switch (info.param) {
    case Backend::kHash:
      return "Hash";
    case Backend::kFile:
      return "File";
    case Backend::kTcp:
      return "Tcp";
  }
  return "Unknown";
}

class StoreConformanceTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kTcp) {
      auto server = TcpStoreServer::Start("127.0.0.1", 0);
      ASSERT_TRUE(server.ok()) << server.status();
      server_ = std::move(*server);
    }
    store_ = NewClient();
    ASSERT_NE(store_, nullptr);
  }

  // Another handle on the same data, as a second rank would open it. A TcpStore serves one
  // request at a time, so threads that block need a handle each.
  Store* NewClient() {
    switch (GetParam()) {
      case Backend::kHash:
        if (hash_ == nullptr) hash_ = std::make_unique<HashStore>();
        return hash_.get();
      case Backend::kFile: {
        auto store = FileStore::Open(dir_.path() + "/store");
        EXPECT_TRUE(store.ok()) << store.status();
        if (!store.ok()) return nullptr;
        clients_.push_back(std::move(*store));
        return clients_.back().get();
      }
      case Backend::kTcp: {
        auto store = TcpStore::Connect("127.0.0.1", server_->port(), In(Seconds(5)));
        EXPECT_TRUE(store.ok()) << store.status();
        if (!store.ok()) return nullptr;
        clients_.push_back(std::move(*store));
        return clients_.back().get();
      }
    }
    return nullptr;
  }

  testing::TempDir dir_;
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<HashStore> hash_;
  std::vector<std::unique_ptr<Store>> clients_;
  Store* store_ = nullptr;
};

TEST_P(StoreConformanceTest, SetThenGetAndOverwrite) {
  ASSERT_TRUE(store_->Set("alpha", "one", In(Seconds(5))).ok());
  auto value = store_->Get("alpha", In(Seconds(5)));
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "one");
  ASSERT_TRUE(store_->Set("alpha", "two", In(Seconds(5))).ok());
  EXPECT_EQ(*store_->Get("alpha", In(Seconds(5))), "two");
  // Another handle sees the same data.
  Store* other = NewClient();
  EXPECT_EQ(*other->Get("alpha", In(Seconds(5))), "two");
}

TEST_P(StoreConformanceTest, KeysAndValuesAreBytes) {
  const std::string key = std::string("job/0\0\xff/../x y", 14);
  const std::string value = std::string("\0\x01\x02\xfe\xff", 5);
  ASSERT_TRUE(store_->Set(key, value, In(Seconds(5))).ok());
  EXPECT_EQ(*store_->Get(key, In(Seconds(5))), value);
  // The longest key allowed, and an empty value.
  const std::string long_key(kMaxKeyBytes, '\x07');
  ASSERT_TRUE(store_->Set(long_key, "", In(Seconds(5))).ok());
  auto got = store_->TryGet(long_key, In(Seconds(5)));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(**got, "");
  // A value of several MiB crosses frames and files intact.
  std::string big(5 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + 7);
  ASSERT_TRUE(store_->Set("big", big, In(Seconds(10))).ok());
  auto big_back = store_->Get("big", In(Seconds(10)));
  ASSERT_TRUE(big_back.ok()) << big_back.status();
  EXPECT_TRUE(*big_back == big);
}

TEST_P(StoreConformanceTest, CapsAreInvalidArgument) {
  Status empty = store_->Set("", "v", In(Seconds(5)));
  EXPECT_EQ(empty.code(), StatusCode::kInvalidArgument) << empty;
  Status long_key = store_->Set(std::string(kMaxKeyBytes + 1, 'k'), "v", In(Seconds(5)));
  EXPECT_EQ(long_key.code(), StatusCode::kInvalidArgument) << long_key;
  EXPECT_THAT(long_key.message(), HasSubstr("4097 bytes"));
  Status big = store_->Set("k", std::string(kMaxValueBytes + 1, 'v'), In(Seconds(5)));
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument) << big;
  EXPECT_THAT(big.message(), HasSubstr("'k'"));
  EXPECT_EQ(store_->Get("", In(Seconds(1))).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Wait({"ok", ""}, In(Seconds(1))).code(), StatusCode::kInvalidArgument);
}

TEST_P(StoreConformanceTest, TryGetDoesNotWait) {
  auto missing = store_->TryGet("nothing", In(Seconds(5)));
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_FALSE(missing->has_value());
  ASSERT_TRUE(store_->Set("something", "x", In(Seconds(5))).ok());
  auto present = store_->TryGet("something", In(Seconds(5)));
  ASSERT_TRUE(present.ok() && present->has_value());
  EXPECT_EQ(**present, "x");
}

// Many keys at once, in order, present or not, through a prefix too; none is waited for.
TEST_P(StoreConformanceTest, TryGetManyAnswersEveryKeyInOrder) {
  ASSERT_TRUE(store_->Set("b", std::string("\0two", 4), In(Seconds(5))).ok());
  ASSERT_TRUE(store_->Set("d", "", In(Seconds(5))).ok());  // present, empty
  const std::string long_key(kMaxKeyBytes, 'k');           // a hashed file name on a FileStore
  ASSERT_TRUE(store_->Set(long_key, "long", In(Seconds(5))).ok());
  auto values = store_->TryGetMany({"a", "b", "c", "d", long_key, "b"}, In(Seconds(5)));
  ASSERT_TRUE(values.ok()) << values.status();
  ASSERT_EQ(values->size(), 6u);
  EXPECT_FALSE((*values)[0].has_value());
  EXPECT_EQ((*values)[1], std::string("\0two", 4));
  EXPECT_FALSE((*values)[2].has_value());
  EXPECT_EQ((*values)[3], "");
  EXPECT_EQ((*values)[4], "long");
  EXPECT_EQ((*values)[5], (*values)[1]);
  auto none = store_->TryGetMany({}, In(Seconds(5)));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(store_->TryGetMany({"a", ""}, In(Seconds(5))).status().code(),
            StatusCode::kInvalidArgument);
  PrefixStore job(store_, "job");
  ASSERT_TRUE(job.Set("b", "in the job", In(Seconds(5))).ok());
  auto scoped = job.TryGetMany({"b", "d"}, In(Seconds(5)));
  ASSERT_TRUE(scoped.ok()) << scoped.status();
  EXPECT_EQ((*scoped)[0], "in the job");
  EXPECT_FALSE((*scoped)[1].has_value());
  // Thousands of keys (a large world's slots) in one call.
  std::vector<std::string> slots;
  for (int r = 0; r < 3000; ++r) slots.push_back("rank/" + std::to_string(r));
  for (int r = 0; r < 3000; r += 7) {
    ASSERT_TRUE(store_->Set(slots[r], "r" + std::to_string(r), In(Seconds(5))).ok());
  }
  auto many = store_->TryGetMany(slots, In(Seconds(30)));
  ASSERT_TRUE(many.ok()) << many.status();
  ASSERT_EQ(many->size(), slots.size());
  for (int r = 0; r < 3000; ++r) {
    if (r % 7 == 0) {
      EXPECT_EQ((*many)[r], "r" + std::to_string(r)) << r;
    } else {
      EXPECT_FALSE((*many)[r].has_value()) << r;
    }
  }
}

TEST_P(StoreConformanceTest, GetTimesOutNamingTheKey) {
  TimePoint start = SteadyClock::Get()->Now();
  auto value = store_->Get("never/set", In(Millis(300)));
  Duration took = SteadyClock::Get()->Now() - start;
  ASSERT_EQ(value.status().code(), StatusCode::kDeadlineExceeded) << value.status();
  EXPECT_THAT(value.status().message(), HasSubstr("'never/set'"));
  EXPECT_THAT(value.status().message(), HasSubstr("ms"));
  EXPECT_GE(took, Millis(250));
  EXPECT_LT(took, Seconds(3));
  // The handle is still usable afterwards.
  ASSERT_TRUE(store_->Set("after", "1", In(Seconds(5))).ok());
  EXPECT_EQ(*store_->Get("after", In(Seconds(5))), "1");
}

TEST_P(StoreConformanceTest, GetWaitsForALateKey) {
  Store* writer = NewClient();
  std::thread late([writer] {
    std::this_thread::sleep_for(Millis(100));  // the point is that the key comes later
    EXPECT_TRUE(writer->Set("late", "here", In(Seconds(5))).ok());
  });
  auto value = store_->Get("late", In(Seconds(10)));
  late.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "here");
}

TEST_P(StoreConformanceTest, AddIsACounter) {
  EXPECT_EQ(*store_->Add("count", 5, In(Seconds(5))), 5);
  EXPECT_EQ(*store_->Add("count", -7, In(Seconds(5))), -2);
  EXPECT_EQ(*store_->Add("count", 0, In(Seconds(5))), -2);
  EXPECT_EQ(*store_->Get("count", In(Seconds(5))), "-2");
  ASSERT_TRUE(store_->Set("text", "12abc", In(Seconds(5))).ok());
  auto bad = store_->Add("text", 1, In(Seconds(5)));
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("'text'"));
  ASSERT_TRUE(store_->Set("max", std::to_string(INT64_MAX), In(Seconds(5))).ok());
  auto overflow = store_->Add("max", 1, In(Seconds(5)));
  EXPECT_EQ(overflow.status().code(), StatusCode::kInvalidArgument) << overflow.status();
  EXPECT_THAT(overflow.status().message(), HasSubstr("overflow"));
}

TEST_P(StoreConformanceTest, CompareSet) {
  // Absent key and empty expected: set.
  EXPECT_EQ(*store_->CompareSet("slot", "", "first", In(Seconds(5))), "first");
  // Mismatch: unchanged, returns the current value.
  EXPECT_EQ(*store_->CompareSet("slot", "", "second", In(Seconds(5))), "first");
  EXPECT_EQ(*store_->CompareSet("slot", "wrong", "second", In(Seconds(5))), "first");
  // Match: replaced.
  EXPECT_EQ(*store_->CompareSet("slot", "first", "second", In(Seconds(5))), "second");
  EXPECT_EQ(*store_->Get("slot", In(Seconds(5))), "second");
  // Absent key with a non-empty expected value.
  auto absent = store_->CompareSet("no-slot", "x", "y", In(Seconds(5)));
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound) << absent.status();
  EXPECT_FALSE(store_->TryGet("no-slot", In(Seconds(5)))->has_value());
}

TEST_P(StoreConformanceTest, WaitListsMissingKeys) {
  ASSERT_TRUE(store_->Set("present", "1", In(Seconds(5))).ok());
  EXPECT_TRUE(store_->Wait({}, In(Seconds(1))).ok());
  EXPECT_TRUE(store_->Wait({"present"}, In(Seconds(1))).ok());
  TimePoint start = SteadyClock::Get()->Now();
  Status status = store_->Wait({"present", "gone-a", "gone-b"}, In(Millis(300)));
  Duration took = SteadyClock::Get()->Now() - start;
  ASSERT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("2 of 3 keys missing"));
  EXPECT_THAT(status.message(), HasSubstr("'gone-a'"));
  EXPECT_THAT(status.message(), HasSubstr("'gone-b'"));
  EXPECT_EQ(status.message().find("'present'"), std::string::npos) << status;
  EXPECT_GE(took, Millis(250));
  EXPECT_LT(took, Seconds(3));
  // A key that is there after one that is not is not listed either.
  status = store_->Wait({"gone-a", "present", "gone-b"}, In(Millis(100)));
  ASSERT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("2 of 3 keys missing"));
  EXPECT_EQ(status.message().find("'present'"), std::string::npos) << status;
}

TEST_P(StoreConformanceTest, WaitReturnsWhenTheLastKeyArrives) {
  Store* writer = NewClient();
  std::thread late([writer] {
    for (const char* key : {"w0", "w1", "w2"}) {
      std::this_thread::sleep_for(Millis(30));
      EXPECT_TRUE(writer->Set(key, "v", In(Seconds(5))).ok());
    }
  });
  Status status = store_->Wait({"w0", "w1", "w2"}, In(Seconds(10)));
  late.join();
  EXPECT_TRUE(status.ok()) << status;
}

TEST_P(StoreConformanceTest, Delete) {
  ASSERT_TRUE(store_->Set("doomed", "x", In(Seconds(5))).ok());
  ASSERT_TRUE(store_->Delete("doomed", In(Seconds(5))).ok());
  EXPECT_FALSE(store_->TryGet("doomed", In(Seconds(5)))->has_value());
  Status again = store_->Delete("doomed", In(Seconds(5)));
  EXPECT_EQ(again.code(), StatusCode::kNotFound) << again;
  EXPECT_THAT(again.message(), HasSubstr("'doomed'"));
  // A deleted counter starts again from zero.
  EXPECT_EQ(*store_->Add("doomed", 3, In(Seconds(5))), 3);
}

TEST_P(StoreConformanceTest, ConcurrentAddGivesTheExactTotal) {
  constexpr int kThreads = 4;
  constexpr int kAddsPerThread = 50;
  std::vector<Store*> handles;
  for (int t = 0; t < kThreads; ++t) handles.push_back(t % 2 == 0 ? store_ : NewClient());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAddsPerThread; ++i) {
        if (!handles[t]->Add("total", 1, In(Seconds(20))).ok()) failures++;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(*store_->Add("total", 0, In(Seconds(5))), kThreads * kAddsPerThread);
}

TEST_P(StoreConformanceTest, Describe) {
  std::string description = store_->Describe();
  switch (GetParam()) {
    case Backend::kHash:
      EXPECT_EQ(description, "memory://hash-store");
      break;
    case Backend::kFile:
      EXPECT_EQ(description, "file://" + dir_.path() + "/store");
      break;
    case Backend::kTcp:
      EXPECT_EQ(description, "tcp://127.0.0.1:" + std::to_string(server_->port()));
      break;
  }
}

TEST_P(StoreConformanceTest, PrefixStoreSeparatesNamespaces) {
  PrefixStore a(store_, "job-a");
  PrefixStore b(store_, "job-b");
  ASSERT_TRUE(a.Set("rank", "A", In(Seconds(5))).ok());
  ASSERT_TRUE(b.Set("rank", "B", In(Seconds(5))).ok());
  EXPECT_EQ(*a.Get("rank", In(Seconds(5))), "A");
  EXPECT_EQ(*b.Get("rank", In(Seconds(5))), "B");
  EXPECT_EQ(*store_->Get("job-a/rank", In(Seconds(5))), "A");
  EXPECT_EQ(*a.Add("n", 2, In(Seconds(5))), 2);
  EXPECT_EQ(*b.CompareSet("n", "", "x", In(Seconds(5))), "x");
  EXPECT_TRUE(a.Wait({"rank", "n"}, In(Seconds(1))).ok());
  Status missing = a.Wait({"rank", "absent"}, In(Millis(200)));
  EXPECT_EQ(missing.code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(missing.message(), HasSubstr("'job-a/absent'"));
  ASSERT_TRUE(a.Delete("rank", In(Seconds(5))).ok());
  EXPECT_FALSE(a.TryGet("rank", In(Seconds(5)))->has_value());
  EXPECT_TRUE(b.TryGet("rank", In(Seconds(5)))->has_value());
  EXPECT_EQ(a.Set("", "v", In(Seconds(5))).code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(a.Describe(), HasSubstr("(prefix 'job-a')"));
}

TEST_P(StoreConformanceTest, RendezvousOfFourThreads) {
  constexpr int kWorld = 4;
  std::vector<Store*> handles;
  for (int r = 0; r < kWorld; ++r) handles.push_back(NewClient());
  std::vector<StatusOr<std::vector<PeerRecord>>> results(
      kWorld, StatusOr<std::vector<PeerRecord>>(InternalError("not run")));
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      PeerRecord me;
      me.rank = r;
      me.world_size = kWorld;
      me.address = "10.0.0." + std::to_string(r) + ":4000";
      me.host = "node" + std::to_string(r);
      me.pid = 1000 + r;
      results[r] = Rendezvous(handles[r], "job-42", me, In(Seconds(20)));
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status();
    ASSERT_EQ(results[r]->size(), static_cast<size_t>(kWorld));
    for (int peer = 0; peer < kWorld; ++peer) {
      const PeerRecord& record = (*results[r])[peer];
      EXPECT_EQ(record.rank, peer);
      EXPECT_EQ(record.world_size, kWorld);
      EXPECT_EQ(record.address, "10.0.0." + std::to_string(peer) + ":4000");
      EXPECT_EQ(record.pid, 1000 + peer);
      EXPECT_FALSE(record.nonce.empty());
      EXPECT_EQ(record.nonce, (*results[0])[peer].nonce);
    }
  }
  // A barrier over the same store.
  std::vector<Status> barrier(kWorld);
  threads.clear();
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      barrier[r] = StoreBarrier(handles[r], "job-42", "after-init", r, kWorld, In(Seconds(20)));
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < kWorld; ++r) EXPECT_TRUE(barrier[r].ok()) << barrier[r];
}

INSTANTIATE_TEST_SUITE_P(AllBackends, StoreConformanceTest,
                         ::testing::Values(Backend::kHash, Backend::kFile, Backend::kTcp),
                         BackendName);

}  // namespace
}  // namespace gyre::store
