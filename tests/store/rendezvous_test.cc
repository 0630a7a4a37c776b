// Rendezvous and StoreBarrier failure cases: a missing rank, a rank claimed twice, a world
// size mismatch, stale state from an earlier job, and bad arguments.
#include "core/store/rendezvous.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "core/store/file_store.h"
#include "core/store/hash_store.h"
#include "proto/store.pb.h"
#include "tests/store/store_test_util.h"

namespace gyre::store {
namespace {

using ::testing::HasSubstr;
using testing::In;

PeerRecord Peer(int rank, int world_size, const std::string& tag = "x") {
  PeerRecord p;
  p.rank = rank;
  p.world_size = world_size;
  p.address = tag + "-addr-" + std::to_string(rank);
  p.host = "host" + std::to_string(rank);
  p.pid = 100 + rank;
  return p;
}

using Result = StatusOr<std::vector<PeerRecord>>;

// Runs Rendezvous for every record in `peers` concurrently.
std::vector<Result> RunAll(Store* store, const std::string& job,
                           const std::vector<PeerRecord>& peers, Duration timeout) {
  std::vector<Result> results(peers.size(), Result(InternalError("not run")));
  std::vector<std::thread> threads;
  Deadline deadline = In(timeout);
  for (size_t i = 0; i < peers.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = Rendezvous(store, job, peers[i], deadline); });
  }
  for (auto& thread : threads) thread.join();
  return results;
}

TEST(RendezvousTest, MissingRankIsListed) {
  HashStore store;
  TimePoint start = SteadyClock::Get()->Now();
  // 2 s: every thread must arrive before the shared deadline, also on a loaded machine.
  auto results = RunAll(&store, "J", {Peer(0, 4), Peer(1, 4), Peer(3, 4)}, Seconds(2));
  Duration took = SteadyClock::Get()->Now() - start;
  for (const Result& result : results) {
    ASSERT_EQ(result.status().code(), StatusCode::kDeadlineExceeded) << result.status();
    EXPECT_THAT(result.status().message(),
                HasSubstr("rendezvous of job J: 3 of 4 ranks arrived after"));
    EXPECT_THAT(result.status().message(), HasSubstr("missing: rank 2 "));
    // The budget left when each thread starts on the shared 2 s deadline: 1.9x s or 2.00 s.
    EXPECT_THAT(result.status().message(),
                ::testing::ContainsRegex(R"(\(deadline (1\.9[0-9]|2\.00) s\))"));
  }
  EXPECT_GE(took, Millis(1900));
  EXPECT_LT(took, Seconds(4));
}

TEST(RendezvousTest, SeveralMissingRanksAreCompressed) {
  HashStore store;
  // 2 s, not 200 ms: under a loaded CI machine the second thread once arrived after the
  // first one's deadline ("1 of 8 ranks arrived").
  auto results = RunAll(&store, "J", {Peer(0, 8), Peer(2, 8)}, Seconds(2));
  ASSERT_EQ(results[0].status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(results[0].status().message(), HasSubstr("2 of 8 ranks arrived"));
  EXPECT_THAT(results[0].status().message(), HasSubstr("missing: ranks 1, 3-7"));
}

TEST(RendezvousTest, DuplicateRankNamesBothClaimants) {
  HashStore store;
  PeerRecord second = Peer(1, 2);
  second.host = "intruder";
  second.pid = 999;
  auto results = RunAll(&store, "J", {Peer(0, 2), Peer(1, 2), second}, Seconds(5));
  EXPECT_TRUE(results[0].ok()) << results[0].status();
  // Exactly one of the two claimants of rank 1 wins.
  int winners = results[1].ok() + results[2].ok();
  ASSERT_EQ(winners, 1);
  const Result& loser = results[1].ok() ? results[2] : results[1];
  ASSERT_EQ(loser.status().code(), StatusCode::kAlreadyExists) << loser.status();
  EXPECT_THAT(loser.status().message(), HasSubstr("rank 1 is claimed twice"));
  EXPECT_THAT(loser.status().message(), HasSubstr("host host1 pid 101"));
  EXPECT_THAT(loser.status().message(), HasSubstr("host intruder pid 999"));
  EXPECT_THAT(loser.status().message(), HasSubstr("start with a new job id or an empty store"));
  const Result& winner = results[1].ok() ? results[1] : results[2];
  EXPECT_EQ((*results[0])[1].pid, (*winner)[1].pid);
}

TEST(RendezvousTest, OnlyTheClaimantThatWinsPublishesBesideItsRecord) {
  // What a rank publishes under its rank beside the record (its control address) is written
  // by the owner of the slot only: a second claimant fails before it writes anything.
  HashStore store;
  auto publisher = [&](const std::string& value) {
    return [&store, value]() { return store.Set("control/1", value, In(Seconds(5))); };
  };
  Result owner = Result(InternalError("not run"));
  std::thread first(
      [&] { owner = Rendezvous(&store, "J", Peer(1, 2), In(Seconds(5)), publisher("owner")); });
  ASSERT_TRUE(store.Wait({"control/1"}, In(Seconds(5))).ok());
  PeerRecord intruder = Peer(1, 2);
  intruder.pid = 999;
  Result second = Rendezvous(&store, "J", intruder, In(Seconds(5)), publisher("intruder"));
  EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists) << second.status();
  Result zero = Rendezvous(&store, "J", Peer(0, 2), In(Seconds(5)));
  first.join();
  ASSERT_TRUE(owner.ok()) << owner.status();
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(*store.Get("control/1", In(Seconds(1))), "owner");
  // An error of the publisher is the rendezvous' error.
  HashStore other;
  Result failed = Rendezvous(&other, "K", Peer(0, 1), In(Seconds(5)),
                             [] { return ResourceExhaustedError("disk full"); });
  EXPECT_EQ(failed.status().code(), StatusCode::kResourceExhausted) << failed.status();
}

// "<boot id> <pid namespace> <pid> <start time>" of a child that has exited and been reaped,
// as a record written by it would carry; `ns` replaces the pid namespace when not empty.
std::string ExitedProcess(const std::string& ns = "") {
  std::ifstream boot_file("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(boot_file, boot);
  char self_ns[256] = {0};
  const ssize_t n = ::readlink("/proc/self/ns/pid", self_ns, sizeof(self_ns) - 1);
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::usleep(50 * 1000);  // a zombie now: its stat is still there
  std::ifstream stat_file("/proc/" + std::to_string(child) + "/stat");
  std::string stat;
  std::getline(stat_file, stat);
  std::istringstream rest(stat.substr(stat.rfind(')') + 1));
  std::string field;
  for (int i = 3; i <= 22 && (rest >> field); ++i) {
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return boot + " " + (ns.empty() ? std::string(self_ns, static_cast<size_t>(n)) : ns) + " " +
         std::to_string(child) + " " + field;
}

// The record a rank leaves in its slot when its process dies after claiming it (a failed
// rendezvous gives the slot back; a killed process cannot).
void Plant(Store* store, const std::string& job, const PeerRecord& r) {
  proto::PeerRecordProto p;
  p.set_rank(r.rank);
  p.set_world_size(r.world_size);
  p.set_address(r.address);
  p.set_host(r.host);
  p.set_pid(r.pid);
  p.set_nonce(r.nonce.empty() ? "planted" : r.nonce);
  p.set_process(r.process);
  const std::string prefix = "gyre/rdzv/" + job + "/";
  ASSERT_TRUE(
      store->Set(prefix + "rank/" + std::to_string(r.rank), p.SerializeAsString(), In(Seconds(5)))
          .ok());
  ASSERT_TRUE(store->Set(prefix + "world_size", p.SerializeAsString(), In(Seconds(5))).ok());
}

TEST(RendezvousTest, ARecordWhoseWriterExitedIsNamedAtOnce) {
  // Rank 0's record from a process on this machine that has exited (an earlier job under the
  // same id): rank 1 must say so at once, not join with a dead address.
  HashStore store;
  PeerRecord stale = Peer(0, 2);
  stale.process = ExitedProcess();
  Plant(&store, "J", stale);
  const auto t0 = std::chrono::steady_clock::now();
  auto publish = [&] { return store.Set("control/1", "x", In(Seconds(5))); };
  Result late = Rendezvous(&store, "J", Peer(1, 2), In(Seconds(5)), publish);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  ASSERT_EQ(late.status().code(), StatusCode::kUnavailable) << late.status();
  EXPECT_THAT(late.status().message(), HasSubstr("the slot of rank 0 (host host0, pid 100)"));
  EXPECT_THAT(late.status().message(), HasSubstr("no longer running"));
  EXPECT_THAT(late.status().message(), HasSubstr("start with a new job id or an empty store"));

  // Without a claimed step nothing holds a fast rank back from exiting, so no record is
  // judged: the stale one is taken as it is.
  HashStore bare;
  Plant(&bare, "J", stale);
  EXPECT_TRUE(Rendezvous(&bare, "J", Peer(1, 2), In(Seconds(5))).ok());

  // In another pid namespace the writer's exit cannot be seen here: no verdict on it.
  HashStore other;
  PeerRecord elsewhere = Peer(0, 2);
  elsewhere.process = ExitedProcess("pid:[1]");
  Result first = Result(InternalError("not run"));
  auto nothing = [] { return Status::Ok(); };
  std::thread rank0([&] { first = Rendezvous(&other, "J", elsewhere, In(Seconds(5)), nothing); });
  Result second = Rendezvous(&other, "J", Peer(1, 2), In(Seconds(5)), nothing);
  rank0.join();
  EXPECT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(second.ok()) << second.status();
}

// A store that stops answering (a frozen server) once `frozen` is set: waits run out and
// reads fail.
class FreezingStore final : public Store {
 public:
  std::atomic<bool> frozen{false};
  Status Set(const std::string& k, const std::string& v, Deadline d) override {
    return frozen ? Silent() : inner_.Set(k, v, d);
  }
  StatusOr<std::string> Get(const std::string& k, Deadline d) override {
    if (frozen) return Silent();
    return inner_.Get(k, d);
  }
  StatusOr<std::optional<std::string>> TryGet(const std::string& k, Deadline d) override {
    if (frozen) return Silent();
    return inner_.TryGet(k, d);
  }
  StatusOr<int64_t> Add(const std::string& k, int64_t delta, Deadline d) override {
    if (frozen) return Silent();
    return inner_.Add(k, delta, d);
  }
  StatusOr<std::string> CompareSet(const std::string& k, const std::string& e, const std::string& v,
                                   Deadline d) override {
    if (frozen) return Silent();
    return inner_.CompareSet(k, e, v, d);
  }
  Status Wait(const std::vector<std::string>& keys, Deadline d) override {
    Status s = inner_.Wait(keys, d);
    return frozen && !s.ok() ? DeadlineExceededError("no answer from the store") : s;
  }
  Status Delete(const std::string& k, Deadline d) override {
    return frozen ? Silent() : inner_.Delete(k, d);
  }
  std::string Describe() const override { return "tcp://frozen:1"; }

 private:
  static Status Silent() { return DeadlineExceededError("no answer from tcp://frozen:1"); }
  HashStore inner_;
};

// Counts the reads each kind of call makes of a HashStore; a read of `unreadable` fails (and
// with it a TryGetMany that names it, as a store reading the keys in turn would). A
// TryGetMany finds `vanished` absent, as if it were deleted after a Wait saw it.
class CountingStore final : public Store {
 public:
  std::atomic<int> single_reads{0};  // Get and TryGet: one key, one round trip each
  std::atomic<int> many_reads{0};    // TryGetMany
  std::string unreadable;
  std::string vanished;
  Status Set(const std::string& k, const std::string& v, Deadline d) override {
    return inner_.Set(k, v, d);
  }
  StatusOr<std::string> Get(const std::string& k, Deadline d) override {
    ++single_reads;
    return inner_.Get(k, d);
  }
  StatusOr<std::optional<std::string>> TryGet(const std::string& k, Deadline d) override {
    ++single_reads;
    if (k == unreadable) return InternalError("the slot file is unreadable");
    return inner_.TryGet(k, d);
  }
  StatusOr<std::vector<std::optional<std::string>>> TryGetMany(const std::vector<std::string>& k,
                                                               Deadline d) override {
    ++many_reads;
    if (std::find(k.begin(), k.end(), unreadable) != k.end()) {
      return InternalError("the slot file is unreadable");
    }
    auto values = inner_.TryGetMany(k, d);
    for (size_t i = 0; values.ok() && i < k.size(); ++i) {
      if (k[i] == vanished) (*values)[i].reset();
    }
    return values;
  }
  StatusOr<int64_t> Add(const std::string& k, int64_t delta, Deadline d) override {
    return inner_.Add(k, delta, d);
  }
  StatusOr<std::string> CompareSet(const std::string& k, const std::string& e, const std::string& v,
                                   Deadline d) override {
    return inner_.CompareSet(k, e, v, d);
  }
  Status Wait(const std::vector<std::string>& keys, Deadline d) override {
    return inner_.Wait(keys, d);
  }
  Status Delete(const std::string& k, Deadline d) override { return inner_.Delete(k, d); }
  std::string Describe() const override { return inner_.Describe(); }

 private:
  HashStore inner_;
};

// Every rank reads every slot twice (the stale-record check, then the records), and a store
// server answers all p ranks: a round trip per slot was p^2 of them at one server (a
// 1024-rank rendezvous over a TcpStore took 76 s here). Each read of all slots is one call,
// whatever p, and so are the list of missing ranks when the wait gives up and the read of a
// rank's own records when it then gives them back.
TEST(RendezvousTest, EachRankReadsAllSlotsInAConstantNumberOfCalls) {
  constexpr int kWorld = 32;
  CountingStore store;
  std::vector<Result> results(kWorld, Result(InternalError("not run")));
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      results[r] =
          Rendezvous(&store, "J", Peer(r, kWorld), In(Seconds(20)), [] { return Status::Ok(); });
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status();
    EXPECT_EQ((*results[r])[kWorld - 1].address, Peer(kWorld - 1, kWorld).address);
  }
  EXPECT_EQ(store.single_reads.load(), 0);
  EXPECT_EQ(store.many_reads.load(), 2 * kWorld);

  CountingStore partial;
  std::vector<PeerRecord> few;
  for (int r = 0; r < kWorld; r += 2) few.push_back(Peer(r, kWorld));
  // 2 s: all 16 threads must arrive before the shared deadline, also on a loaded machine.
  auto missing = RunAll(&partial, "J", few, Seconds(2));
  for (const Result& result : missing) {
    ASSERT_EQ(result.status().code(), StatusCode::kDeadlineExceeded) << result.status();
    EXPECT_THAT(result.status().message(), HasSubstr("16 of 32 ranks arrived"));
  }
  // The list of missing ranks, and reading its own records to give its slot back.
  EXPECT_EQ(partial.single_reads.load(), 0);
  EXPECT_EQ(partial.many_reads.load(), 2 * static_cast<int>(few.size()));
}

// One slot that cannot be read makes only that rank unknown: the others are still read, and
// the ones not there are named as missing.
TEST(RendezvousTest, AnUnreadableSlotLeavesTheOthersKnown) {
  CountingStore store;
  store.unreadable = "gyre/rdzv/J/rank/3";
  auto results = RunAll(&store, "J", {Peer(0, 4), Peer(1, 4)}, Seconds(2));
  for (const Result& result : results) {
    ASSERT_EQ(result.status().code(), StatusCode::kDeadlineExceeded) << result.status();
    EXPECT_THAT(result.status().message(), HasSubstr("2 of 4 ranks arrived"));
    EXPECT_THAT(result.status().message(), HasSubstr("missing: rank 2"));
    EXPECT_THAT(result.status().message(), HasSubstr("the slot file is unreadable): rank 3"));
  }
}

// TryGetEach reads all keys in one call when it can, and key by key when that call fails, so
// the one unreadable key is the only error.
TEST(RendezvousTest, TryGetEachFallsBackToOneReadPerKey) {
  CountingStore store;
  ASSERT_TRUE(store.Set("a", "1", In(Seconds(5))).ok());
  ASSERT_TRUE(store.Set("c", "3", In(Seconds(5))).ok());
  auto whole = TryGetEach(&store, {"a", "b", "c"}, In(Seconds(5)));
  ASSERT_EQ(whole.size(), 3u);
  EXPECT_EQ(store.many_reads.load(), 1);
  EXPECT_EQ(store.single_reads.load(), 0);
  EXPECT_EQ(*whole[0], std::optional<std::string>("1"));
  EXPECT_EQ(*whole[1], std::nullopt);
  EXPECT_EQ(*whole[2], std::optional<std::string>("3"));

  store.unreadable = "b";
  auto each = TryGetEach(&store, {"a", "b", "c"}, In(Seconds(5)));
  ASSERT_EQ(each.size(), 3u);
  EXPECT_EQ(store.many_reads.load(), 2);
  EXPECT_EQ(store.single_reads.load(), 3);
  EXPECT_EQ(*each[0], std::optional<std::string>("1"));
  EXPECT_THAT(each[1].status().message(), HasSubstr("the slot file is unreadable"));
  EXPECT_EQ(*each[2], std::optional<std::string>("3"));
}

// Keys every writer published that are gone when read are named, with the store, rather than
// read as empty values.
TEST(RendezvousTest, ReadPublishedNamesAKeyThatWasRemoved) {
  CountingStore store;
  ASSERT_TRUE(store.Set("x/0", "zero", In(Seconds(5))).ok());
  ASSERT_TRUE(store.Set("x/1", "", In(Seconds(5))).ok());
  auto name = [](size_t i) { return "the thing of rank " + std::to_string(i); };
  auto both = ReadPublished(&store, {"x/0", "x/1"}, In(Seconds(5)), name);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(*both, (std::vector<std::string>{"zero", ""}));
  store.vanished = "x/1";
  auto gone = ReadPublished(&store, {"x/0", "x/1"}, In(Seconds(5)), name);
  ASSERT_EQ(gone.status().code(), StatusCode::kUnavailable) << gone.status();
  EXPECT_THAT(gone.status().message(), HasSubstr("the thing of rank 1 was removed from the store " +
                                                 store.Describe() + " after it was published"));
  store.unreadable = "x/0";
  EXPECT_THAT(ReadPublished(&store, {"x/0", "x/1"}, In(Seconds(5)), name).status().message(),
              HasSubstr("the slot file is unreadable"));
}

// A record that was in its slot when every rank had arrived, and is gone when the records are
// read, fails the rendezvous naming the rank (it is not a missing or a garbled record).
TEST(RendezvousTest, ARecordRemovedAfterArrivingIsNamed) {
  CountingStore store;
  store.vanished = "gyre/rdzv/J/rank/1";
  auto results = RunAll(&store, "J", {Peer(0, 2), Peer(1, 2)}, Seconds(10));
  for (const Result& result : results) {
    ASSERT_EQ(result.status().code(), StatusCode::kUnavailable) << result.status();
    EXPECT_THAT(result.status().message(),
                HasSubstr("rendezvous of job J: reading the ranks' records: the record of rank 1 "
                          "was removed from the store"));
  }
}

TEST(RendezvousTest, AStoreThatStopsAnsweringIsNamedNotTheRanks) {
  FreezingStore store;
  Result mine = Result(InternalError("not run"));
  // 3 s: the store must be frozen before rank 0's deadline, also on a loaded machine.
  std::thread rank0([&] { mine = Rendezvous(&store, "J", Peer(0, 3), In(Seconds(3))); });
  // Rank 0 has claimed its slot and fixed the world size (its last writes before it waits
  // for the others); then the store goes silent.
  ASSERT_TRUE(store.Wait({"gyre/rdzv/J/rank/0", "gyre/rdzv/J/world_size"}, In(Seconds(5))).ok());
  store.frozen = true;
  rank0.join();
  ASSERT_EQ(mine.status().code(), StatusCode::kDeadlineExceeded) << mine.status();
  EXPECT_THAT(mine.status().message(), HasSubstr("the store tcp://frozen:1"));
  EXPECT_THAT(mine.status().message(), HasSubstr("did not answer after"));
  EXPECT_THAT(mine.status().message(), HasSubstr("could not be read: no answer from"));
  EXPECT_THAT(mine.status().message(), ::testing::Not(HasSubstr("missing:")));
}

TEST(RendezvousTest, WorldSizeMismatchNamesBothValuesAndRanks) {
  HashStore store;
  // Rank 0 fixes the world size at 2; rank 1 then arrives believing in 3.
  Result first = Result(InternalError("not run"));
  std::thread rank0([&] { first = Rendezvous(&store, "J", Peer(0, 2), In(Seconds(5))); });
  ASSERT_TRUE(store.Wait({"gyre/rdzv/J/world_size"}, In(Seconds(5))).ok());
  Result second = Rendezvous(&store, "J", Peer(1, 3), In(Seconds(5)));
  rank0.join();
  ASSERT_EQ(second.status().code(), StatusCode::kInvalidArgument) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr("world size mismatch"));
  EXPECT_THAT(second.status().message(),
              HasSubstr("rank 1 (host host1, pid 101) has world size 3"));
  EXPECT_THAT(second.status().message(),
              HasSubstr("rank 0 (host host0, pid 100) has world size 2"));
  // Rank 0 finds rank 1's record and fails at once too, rather than waiting it out.
  ASSERT_EQ(first.status().code(), StatusCode::kInvalidArgument) << first.status();
  EXPECT_THAT(first.status().message(), HasSubstr("has world size 3"));
}

// The rank that fixed the world size first waits for a rank that will never come (the other
// believed in a smaller world and failed on it at once): at its deadline it names the rank
// that disagreed, not just the missing one.
TEST(RendezvousTest, TheRankThatFixedTheWorldSizeNamesTheRankThatDisagreed) {
  HashStore store;
  Result first = Result(InternalError("not run"));
  std::thread rank1([&] { first = Rendezvous(&store, "J", Peer(1, 3), In(Millis(1500))); });
  ASSERT_TRUE(store.Wait({"gyre/rdzv/J/world_size"}, In(Seconds(5))).ok());
  Result second = Rendezvous(&store, "J", Peer(0, 2), In(Seconds(5)));
  rank1.join();
  ASSERT_EQ(second.status().code(), StatusCode::kInvalidArgument) << second.status();
  ASSERT_EQ(first.status().code(), StatusCode::kInvalidArgument) << first.status();
  EXPECT_THAT(first.status().message(), HasSubstr("the ranks disagree on the world size"));
  EXPECT_THAT(first.status().message(), HasSubstr("this job's is 3"));
  EXPECT_THAT(first.status().message(), HasSubstr("rank 0 (host host0, pid 100) has world size 2"));
  EXPECT_THAT(first.status().message(), HasSubstr("missing after"));
  EXPECT_THAT(first.status().message(), HasSubstr("rank 2"));
}

TEST(RendezvousTest, StaleFolderFromAnEarlierJobDoesNotConfuseANewOne) {
  testing::TempDir tmp;
  auto store = FileStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  // An earlier job that completed, and one that died half-way.
  std::vector<PeerRecord> old_job;
  for (int r = 0; r < 4; ++r) old_job.push_back(Peer(r, 4, "old"));
  for (const Result& r : RunAll(store->get(), "job-1", old_job, Seconds(10))) {
    ASSERT_TRUE(r.ok()) << r.status();
  }
  auto half = RunAll(store->get(), "job-2", {Peer(0, 3, "half"), Peer(2, 3, "half")}, Millis(200));
  ASSERT_FALSE(half[0].ok());
  // A new job with a different size in the same folder.
  std::vector<PeerRecord> new_job;
  for (int r = 0; r < 3; ++r) new_job.push_back(Peer(r, 3, "new"));
  for (const Result& r : RunAll(store->get(), "job-3", new_job, Seconds(10))) {
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->size(), 3u);
    for (int peer = 0; peer < 3; ++peer)
      EXPECT_EQ((*r)[peer].address, "new-addr-" + std::to_string(peer));
  }
  // Re-using a finished job's id is caught, naming the process that held the rank.
  PeerRecord again = Peer(0, 4, "again");
  again.pid = 5555;
  Result reused = Rendezvous(store->get(), "job-1", again, In(Seconds(5)));
  ASSERT_EQ(reused.status().code(), StatusCode::kAlreadyExists) << reused.status();
  EXPECT_THAT(reused.status().message(), HasSubstr("pid 100"));
  EXPECT_THAT(reused.status().message(), HasSubstr("pid 5555"));
}

// The README's hand-started pair, run again against the same folder: a job whose ranks left
// cleanly frees its job id, and a rank that gave up waiting frees its slot.
TEST(RendezvousTest, ALeftOrFailedRendezvousFreesTheJobIdForTheNextRun) {
  testing::TempDir tmp;
  auto store = FileStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  for (int run = 0; run < 2; ++run) {
    std::vector<PeerRecord> ranks = {Peer(0, 2, "run" + std::to_string(run)),
                                     Peer(1, 2, "run" + std::to_string(run))};
    std::vector<Result> joined = RunAll(store->get(), "demo", ranks, Seconds(10));
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(joined[r].ok()) << "run " << run << ": " << joined[r].status();
      EXPECT_EQ((*joined[r])[1 - r].address, ranks[1 - r].address);
      ASSERT_TRUE(LeaveRendezvous(store->get(), "demo", (*joined[r])[r], In(Seconds(5))).ok());
    }
    // Nothing of the job is left (the folder holds its lock file only).
    EXPECT_EQ(testing::TempDir::List(tmp.path()), std::vector<std::string>{".lock"});
  }
  // Rank 0 alone gives up waiting; the pair then meets under the same id.
  Result alone = Rendezvous(store->get(), "demo", Peer(0, 2, "alone"), In(Millis(300)));
  ASSERT_EQ(alone.status().code(), StatusCode::kDeadlineExceeded) << alone.status();
  for (const Result& r :
       RunAll(store->get(), "demo", {Peer(0, 2, "b"), Peer(1, 2, "b")}, Seconds(10))) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)[0].address, "b-addr-0");
  }
}

// A rank told to stop while it waits for the others gives its slot back at once, well before
// its deadline, and says so; one told before its claim writes nothing. The same rank can then
// meet the others under the same job id.
TEST(RendezvousTest, ARankToldToStopWhileItWaitsGivesItsSlotBack) {
  HashStore store;
  std::atomic<bool> stop{false};
  auto stop_requested = [&stop] { return stop.load(); };
  Result stopped(InternalError("not run"));
  const auto start = std::chrono::steady_clock::now();
  std::thread rank0(
      [&] { stopped = Rendezvous(&store, "J", Peer(0, 2), In(Seconds(20)), {}, stop_requested); });
  while (!store.TryGet("gyre/rdzv/J/rank/0", In(Seconds(1)))->has_value()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  rank0.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_EQ(stopped.status().code(), StatusCode::kAborted) << stopped.status();
  EXPECT_THAT(stopped.status().message(),
              HasSubstr("rank 0 was stopped while it waited for the other ranks"));
  EXPECT_THAT(stopped.status().message(), HasSubstr("it gave its slot back"));
  EXPECT_FALSE(store.TryGet("gyre/rdzv/J/rank/0", In(Seconds(1)))->has_value());
  EXPECT_FALSE(store.TryGet("gyre/rdzv/J/world_size", In(Seconds(1)))->has_value());

  Result early = Rendezvous(&store, "J", Peer(1, 2), In(Seconds(5)), {}, stop_requested);
  ASSERT_EQ(early.status().code(), StatusCode::kAborted) << early.status();
  EXPECT_THAT(early.status().message(), HasSubstr("rank 1 was stopped before it claimed its slot"));
  EXPECT_FALSE(store.TryGet("gyre/rdzv/J/rank/1", In(Seconds(1)))->has_value());

  stop = false;
  for (const Result& r : RunAll(&store, "J", {Peer(0, 2), Peer(1, 2)}, Seconds(10))) {
    EXPECT_TRUE(r.ok()) << r.status();
  }
}

// A rank whose program ended before it joined (gyrerun saw it exit 0) left the others
// waiting for it until the rendezvous timeout, 60 s by default. The launcher marks the exit
// in the store under its launch id; every rank waiting for that rank fails at once, naming it
// and its exit, and gives its slot back. Marks of another launch id (an earlier run under
// the same job id) and marks of a rank that holds its slot change nothing.
TEST(RendezvousTest, ARankTheLauncherSawExitBeforeItJoinedFailsTheWaitersAtOnce) {
  HashStore store;
  const std::string exit_text = "its process (pid 4711) exited with status 0 after 0.10 s";
  // An earlier run's mark of rank 1.
  ASSERT_TRUE(MarkExit(&store, "J", "earlier-run", 1, "old", In(Seconds(1))).ok());
  std::vector<Result> results(3, Result(InternalError("not run")));
  std::atomic<int> finished{0};
  std::vector<std::thread> waiters;
  const auto start = std::chrono::steady_clock::now();
  for (int r : {0, 2}) {
    waiters.emplace_back([&, r] {
      results[r] = Rendezvous(&store, "J", Peer(r, 3), In(Seconds(30)), {}, {}, "this-run");
      ++finished;
    });
  }
  for (int r : {0, 2}) {
    const std::string slot = "gyre/rdzv/J/rank/" + std::to_string(r);
    while (!store.TryGet(slot, In(Seconds(1)))->has_value()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // a few slices of the wait
  EXPECT_EQ(finished.load(), 0) << "an earlier run's mark ended the wait";
  ASSERT_TRUE(MarkExit(&store, "J", "this-run", 1, exit_text, In(Seconds(1))).ok());
  // Rank 0 may see it first, give its slot back and exit (marked too): rank 2 still names
  // the rank whose exit came first, the one they both waited for.
  while (finished.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(MarkExit(&store, "J", "this-run", 0, "rank 0 exited after", In(Seconds(1))).ok());
  for (auto& w : waiters) w.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  for (int r : {0, 2}) {
    ASSERT_EQ(results[r].status().code(), StatusCode::kUnavailable) << results[r].status();
    EXPECT_THAT(
        results[r].status().message(),
        HasSubstr("rendezvous of job J: rank 1 will not join: " + exit_text +
                  ", before it claimed its rendezvous slot, so the job cannot start; rank " +
                  std::to_string(r) + " stopped waiting after"));
    EXPECT_THAT(results[r].status().message(), HasSubstr("it gave its slot back"));
    EXPECT_FALSE(
        store.TryGet("gyre/rdzv/J/rank/" + std::to_string(r), In(Seconds(1)))->has_value());
  }

  // A next run under the same job id, with its own launch id, meets as if nothing happened.
  std::vector<Result> next(3, Result(InternalError("not run")));
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      next[r] = Rendezvous(&store, "J", Peer(r, 3), In(Seconds(10)), {}, {}, "next-run");
    });
  }
  for (auto& t : ranks) t.join();
  for (const Result& r : next) EXPECT_TRUE(r.ok()) << r.status();

  // The launcher clears its marks once the run is over.
  ASSERT_TRUE(ClearExitMarks(&store, "J", {0, 1}, In(Seconds(1))).ok());
  for (const char* key : {"exits", "exit_order", "exited/0", "exited/1"}) {
    EXPECT_FALSE(store.TryGet(std::string("gyre/rdzv/J/") + key, In(Seconds(1)))->has_value())
        << key;
  }
}

// A process's next communicator under the same job id (after a Close): its rendezvous can
// start while another rank is still closing the first one, whose record is then still in its
// slot. Rank 0 took that record, with its old address, for rank 1's new one, and its first
// connection went to rank 1's earlier communicator ("rank 0 already connected to rank 1"). A
// slot holding a record this process's last rendezvous of the job returned is waited out.
TEST(RendezvousTest, ARecordLeftFromTheLastCommunicatorIsWaitedOutNotTaken) {
  HashStore store;
  std::vector<Result> first =
      RunAll(&store, "J", {Peer(0, 2, "first"), Peer(1, 2, "first")}, Seconds(10));
  for (const Result& r : first) ASSERT_TRUE(r.ok()) << r.status();
  // Rank 0 has closed (its records are gone); rank 1 has not yet removed its own.
  ASSERT_TRUE(LeaveRendezvous(&store, "J", (*first[0])[0], In(Seconds(1))).ok());
  Result second0(InternalError("not run"));
  std::atomic<bool> finished{false};
  std::thread rank0([&] {
    second0 = Rendezvous(&store, "J", Peer(0, 2, "second"), In(Seconds(20)));
    finished = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(finished.load()) << "rank 0 took rank 1's record of the first communicator";
  // Rank 1 finishes closing, then joins the second.
  ASSERT_TRUE(LeaveRendezvous(&store, "J", (*first[1])[1], In(Seconds(1))).ok());
  Result second1 = Rendezvous(&store, "J", Peer(1, 2, "second"), In(Seconds(10)));
  rank0.join();
  ASSERT_TRUE(second0.ok()) << second0.status();
  ASSERT_TRUE(second1.ok()) << second1.status();
  EXPECT_EQ((*second0)[1].address, "second-addr-1");
  EXPECT_EQ((*second1)[0].address, "second-addr-0");
}

// A rank that never removes its record of the last communicator (it never makes the new
// one) is named at the deadline, with why it is waited for.
TEST(RendezvousTest, ARankThatNeverLeavesTheLastCommunicatorIsNamedAtTheDeadline) {
  HashStore store;
  std::vector<Result> first =
      RunAll(&store, "J", {Peer(0, 2, "first"), Peer(1, 2, "first")}, Seconds(10));
  for (const Result& r : first) ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(LeaveRendezvous(&store, "J", (*first[0])[0], In(Seconds(1))).ok());
  Result second = Rendezvous(&store, "J", Peer(0, 2, "second"), In(Seconds(1)));
  ASSERT_EQ(second.status().code(), StatusCode::kDeadlineExceeded) << second.status();
  EXPECT_THAT(second.status().message(),
              HasSubstr("the slot of rank 1 still holds its record from this process's earlier "
                        "communicator under this job id"));
  EXPECT_THAT(second.status().message(), HasSubstr("that rank has not finished closing it"));
}

// A mark of a rank that holds its slot changes nothing: it came, so nobody waits for it.
TEST(RendezvousTest, AnExitMarkOfARankThatHoldsItsSlotIsIgnored) {
  HashStore store;
  Result first(InternalError("not run"));
  std::atomic<bool> finished{false};
  std::thread rank0([&] {
    first = Rendezvous(&store, "J", Peer(0, 2), In(Seconds(20)), {}, {}, "run");
    finished = true;
  });
  while (!store.TryGet("gyre/rdzv/J/rank/0", In(Seconds(1)))->has_value()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(MarkExit(&store, "J", "run", 0, "marked while holding", In(Seconds(1))).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // a few slices of the wait
  EXPECT_FALSE(finished.load());
  Result second = Rendezvous(&store, "J", Peer(1, 2), In(Seconds(10)), {}, {}, "run");
  rank0.join();
  EXPECT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(second.ok()) << second.status();
}

// Leaving removes only the leaver's own records: not another claimant's slot, not a world
// size record another rank wrote.
TEST(RendezvousTest, LeavingLeavesOtherClaimantsRecordsAlone) {
  HashStore store;
  std::vector<Result> joined = RunAll(&store, "J", {Peer(0, 2), Peer(1, 2)}, Seconds(5));
  ASSERT_TRUE(joined[0].ok() && joined[1].ok());
  PeerRecord impostor = (*joined[0])[0];
  impostor.nonce = "someone else";
  ASSERT_TRUE(LeaveRendezvous(&store, "J", impostor, In(Seconds(5))).ok());
  EXPECT_TRUE(store.TryGet("gyre/rdzv/J/rank/0", In(Seconds(1)))->has_value());
  EXPECT_TRUE(store.TryGet("gyre/rdzv/J/world_size", In(Seconds(1)))->has_value());
  // Rank 1 leaves: its slot goes; the world size record stays unless rank 1 wrote it.
  auto writer = store.Get("gyre/rdzv/J/world_size", In(Seconds(1)));
  ASSERT_TRUE(writer.ok());
  proto::PeerRecordProto first;
  ASSERT_TRUE(first.ParseFromString(*writer));
  ASSERT_TRUE(LeaveRendezvous(&store, "J", (*joined[1])[1], In(Seconds(5))).ok());
  EXPECT_FALSE(store.TryGet("gyre/rdzv/J/rank/1", In(Seconds(1)))->has_value());
  EXPECT_EQ(store.TryGet("gyre/rdzv/J/world_size", In(Seconds(1)))->has_value(), first.rank() != 1);
  ASSERT_TRUE(LeaveRendezvous(&store, "J", (*joined[0])[0], In(Seconds(5))).ok());
  EXPECT_FALSE(store.TryGet("gyre/rdzv/J/rank/0", In(Seconds(1)))->has_value());
  EXPECT_FALSE(store.TryGet("gyre/rdzv/J/world_size", In(Seconds(1)))->has_value());
}

// A slot still held by a process on this machine that has exited: an earlier run died
// without leaving. The claimant says so, rather than "claimed twice".
TEST(RendezvousTest, ASlotLeftByADeadRunIsNamedAsSuch) {
  HashStore store;
  PeerRecord dead = Peer(0, 2, "dead");
  dead.process = ExitedProcess();
  Plant(&store, "demo", dead);
  Result again = Rendezvous(&store, "demo", Peer(0, 2, "again"), In(Seconds(5)));
  ASSERT_EQ(again.status().code(), StatusCode::kAlreadyExists) << again.status();
  EXPECT_THAT(again.status().message(),
              HasSubstr("the slot of rank 0 holds the record of rank 0 (host host0, pid 100), a "
                        "process on this machine that is no longer running"));
  EXPECT_THAT(again.status().message(), HasSubstr("did not finish cleanly"));
  EXPECT_THAT(again.status().message(), HasSubstr("Start with a new job id or an empty store"));
}

// A communicator of this same process that ended without a Close left its record; a new one
// under the same job id says so, rather than "claimed twice by pid P, now by pid P".
TEST(RendezvousTest, ASlotLeftByAnEarlierCommunicatorOfThisProcessIsNamedAsSuch) {
  HashStore store;
  PeerRecord earlier = Peer(0, 2, "earlier");
  earlier.process = "boot ns 4242 1000";
  Plant(&store, "demo", earlier);
  PeerRecord now = Peer(0, 2, "now");
  now.process = earlier.process;
  Result again = Rendezvous(&store, "demo", now, In(Seconds(5)));
  ASSERT_EQ(again.status().code(), StatusCode::kAlreadyExists) << again.status();
  EXPECT_THAT(again.status().message(),
              HasSubstr("the slot of rank 0 holds the record of an earlier communicator of this "
                        "same process (host host0 pid 100)"));
  EXPECT_THAT(again.status().message(), HasSubstr("a new job id or an empty store"));
  EXPECT_THAT(again.status().message(), ::testing::Not(HasSubstr("claimed twice")));
}

TEST(RendezvousTest, RetryBySameProcessIsIdempotent) {
  HashStore store;
  PeerRecord me = Peer(0, 1);
  me.nonce = "fixed";
  auto first = Rendezvous(&store, "J", me, In(Seconds(5)));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Rendezvous(&store, "J", me, In(Seconds(5)));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)[0].nonce, "fixed");
}

TEST(RendezvousTest, BadArgumentsAreInvalidArgument) {
  HashStore store;
  EXPECT_EQ(Rendezvous(&store, "", Peer(0, 1), In(Seconds(1))).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Rendezvous(&store, "a/b", Peer(0, 1), In(Seconds(1))).status().code(),
            StatusCode::kInvalidArgument);
  auto out_of_range = Rendezvous(&store, "J", Peer(4, 4), In(Seconds(1)));
  EXPECT_EQ(out_of_range.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(out_of_range.status().message(), HasSubstr("rank 4 is not in 0..3"));
  EXPECT_EQ(Rendezvous(&store, "J", Peer(0, 0), In(Seconds(1))).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(StoreBarrier(&store, "J", "", 0, 1, In(Seconds(1))).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(StoreBarrier(&store, "J", "b", -1, 1, In(Seconds(1))).code(),
            StatusCode::kInvalidArgument);
}

TEST(RendezvousTest, BarrierNamesMissingRanks) {
  HashStore store;
  std::vector<Status> statuses(3);
  std::vector<std::thread> threads;
  Deadline deadline = In(Seconds(2));  // every thread arrives before it, even when loaded
  const int ranks[] = {0, 2, 3};
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back(
        [&, i] { statuses[i] = StoreBarrier(&store, "J", "init", ranks[i], 4, deadline); });
  }
  for (auto& thread : threads) thread.join();
  for (const Status& status : statuses) {
    ASSERT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status;
    EXPECT_THAT(status.message(), HasSubstr("barrier 'init' of job J: 3 of 4 ranks arrived"));
    EXPECT_THAT(status.message(), HasSubstr("missing: rank 1 "));
  }
}

TEST(RendezvousTest, FormatRankList) {
  EXPECT_EQ(FormatRankList({2}), "rank 2");
  EXPECT_EQ(FormatRankList({7, 1, 3, 4, 5}), "ranks 1, 3-5, 7");
  EXPECT_EQ(FormatRankList({0, 1}), "ranks 0-1");
  EXPECT_EQ(DescribePeer(Peer(3, 4)), "rank 3 (host host3, pid 103)");
}

}  // namespace
}  // namespace gyre::store
