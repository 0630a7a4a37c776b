// ipc::Doorbell: requests and answers in a shared block between two real processes (fork, a
// MAP_SHARED mapping), woken by a futex. No wake may be lost, a slot the other side filled
// with nonsense is an error and never a read past the slot, and a block that is not a
// doorbell is refused.
#include "core/ipc/doorbell.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "proto/client.pb.h"

namespace gyre::ipc {
namespace {

class DoorbellTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = ::mmap(nullptr, Doorbell::kBlockBytes, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mem_, MAP_FAILED);
  }
  void TearDown() override { ::munmap(mem_, Doorbell::kBlockBytes); }

  // Runs `daemon` in a child process (its exit code: 0 for success) and returns it.
  template <typename F>
  pid_t Child(F daemon) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(daemon());
    return pid;
  }
  static int Wait(pid_t pid) {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
  }

  void* mem_ = nullptr;
};

proto::ClientRequest Request(uint64_t id, int64_t count) {
  proto::ClientRequest r;
  r.set_id(id);
  r.mutable_collective()->set_count(count);
  return r;
}

// Each wait sleeps in slices longer than the test's bound on a call, so a lost wake-up (the
// ring coming between the look at the word and the sleep) fails the call instead of being
// papered over by the slice's end.
constexpr Duration kSlice = std::chrono::seconds(20);
constexpr Duration kBound = std::chrono::seconds(15);

// The daemon's side of a call: wait for a request after `*last`, answer it with its id and
// count doubled. Returns false if none came within kBound or it did not parse.
bool Serve(Doorbell& bell, uint32_t* last, const WaitPolicy& policy) {
  const Deadline deadline = Deadline::After(*SteadyClock::Get(), kBound);
  while (!bell.WaitRequest(*last, policy, kSlice)) {
    if (deadline.Expired(*SteadyClock::Get())) return false;
  }
  proto::ClientRequest req;
  if (!bell.ReadRequest(&req, last).ok()) return false;
  proto::ClientResponse resp;
  resp.set_id(req.id());
  resp.set_seq(static_cast<uint64_t>(req.collective().count()) * 2);
  return bell.PostAnswer(resp, *last).ok();
}

// The program's side: post, wait for the answer within kBound, check it.
::testing::AssertionResult Call(Doorbell& bell, uint64_t id, const WaitPolicy& policy) {
  uint32_t seq = 0;
  Status s = bell.PostRequest(Request(id, static_cast<int64_t>(id) + 7), &seq);
  if (!s.ok()) return ::testing::AssertionFailure() << s;
  const Deadline deadline = Deadline::After(*SteadyClock::Get(), kBound);
  while (!bell.WaitAnswer(seq, policy, kSlice)) {
    if (deadline.Expired(*SteadyClock::Get())) {
      return ::testing::AssertionFailure() << "no answer to request " << id << " in time";
    }
  }
  proto::ClientResponse resp;
  s = bell.ReadAnswer(&resp);
  if (!s.ok()) return ::testing::AssertionFailure() << s;
  if (resp.id() != id || resp.seq() != (id + 7) * 2) {
    return ::testing::AssertionFailure() << "request " << id << " answered " << resp.DebugString();
  }
  return ::testing::AssertionSuccess();
}

// Many calls back to back between two processes, sleeping on every wait, then spinning first,
// then yielding first: every answer belongs to its request, and no wake-up is lost.
TEST_F(DoorbellTest, ThousandsOfCallsBetweenTwoProcessesEachGetTheirAnswer) {
  const WaitPolicy policies[] = {WaitPolicy{}, WaitPolicy{std::chrono::microseconds(20), {}},
                                 WaitPolicy{{}, kDoorbellYield}};
  for (const WaitPolicy& policy : policies) {
    Doorbell bell = Doorbell::Create(mem_);
    constexpr int kCalls = 5000;
    const pid_t pid = Child([&] {
      auto opened = Doorbell::Open(mem_, Doorbell::kBlockBytes);
      if (!opened.ok()) return 2;
      uint32_t last = 0;
      for (int i = 0; i < kCalls; ++i) {
        if (!Serve(*opened, &last, policy)) return 3;
      }
      return 0;
    });
    ASSERT_GT(pid, 0);
    for (int i = 1; i <= kCalls; ++i) ASSERT_TRUE(Call(bell, static_cast<uint64_t>(i), policy));
    EXPECT_EQ(Wait(pid), 0);
    std::memset(mem_, 0, Doorbell::kBlockBytes);
  }
}

// A sleeper with a long slice wakes when the other side rings, not when the slice ends.
TEST_F(DoorbellTest, ASleepingDaemonIsWokenByTheRing) {
  Doorbell bell = Doorbell::Create(mem_);
  const pid_t pid = Child([&] {
    Doorbell daemon = *Doorbell::Open(mem_, Doorbell::kBlockBytes);
    const TimePoint start = SteadyClock::Get()->Now();
    if (!daemon.WaitRequest(0, WaitPolicy{}, Seconds(30))) return 2;
    return SteadyClock::Get()->Now() - start < Seconds(10) ? 0 : 3;
  });
  ASSERT_GT(pid, 0);
  ::usleep(200 * 1000);  // the child is asleep in the futex by now, or sees the ring at once
  uint32_t seq = 0;
  ASSERT_TRUE(bell.PostRequest(Request(1, 1), &seq).ok());
  EXPECT_EQ(seq, 1u);
  EXPECT_EQ(Wait(pid), 0);
}

TEST_F(DoorbellTest, AWaitWithNothingToComeEndsAfterItsSlice) {
  Doorbell bell = Doorbell::Create(mem_);
  const TimePoint start = SteadyClock::Get()->Now();
  EXPECT_FALSE(bell.WaitRequest(0, WaitPolicy{std::chrono::microseconds(50), {}},
                                std::chrono::milliseconds(30)));
  EXPECT_FALSE(bell.WaitAnswer(1, WaitPolicy{}, std::chrono::milliseconds(30)));
  EXPECT_GE(SteadyClock::Get()->Now() - start, std::chrono::milliseconds(50));
}

TEST_F(DoorbellTest, ASlotFilledWithNonsenseIsAnErrorNotAReadPastIt) {
  Doorbell program = Doorbell::Create(mem_);
  Doorbell daemon = *Doorbell::Open(mem_, Doorbell::kBlockBytes);
  uint32_t seq = 0;
  ASSERT_TRUE(program.PostRequest(Request(5, 5), &seq).ok());
  unsigned char* slot = static_cast<unsigned char*>(mem_) + Doorbell::kHeaderBytes;
  // A length past the slot's end.
  const uint32_t huge = 0xfffffff0u;
  std::memcpy(slot, &huge, 4);
  proto::ClientRequest req;
  Status s = daemon.ReadRequest(&req, &seq);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("claims 4294967280 bytes"), std::string::npos) << s;
  // A length that fits, over bytes that are no message.
  const uint32_t len = 16;
  std::memcpy(slot, &len, 4);
  std::memset(slot + 4, 0xff, len);
  s = daemon.ReadRequest(&req, &seq);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("not a valid message"), std::string::npos) << s;
}

TEST_F(DoorbellTest, AMessageTooBigForTheSlotIsRefusedBeforeAnythingIsWritten) {
  Doorbell program = Doorbell::Create(mem_);
  proto::ClientResponse big;  // any message: a slot holds bytes, whatever they parse as
  big.set_job_id(std::string(Doorbell::kMaxMessage, 'x'));
  uint32_t seq = 0;
  Status s = program.PostRequest(big, &seq);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("does not fit the shared slot"), std::string::npos) << s;
  Doorbell daemon = *Doorbell::Open(mem_, Doorbell::kBlockBytes);
  EXPECT_FALSE(daemon.WaitRequest(0, WaitPolicy{}, std::chrono::milliseconds(1)));
}

TEST_F(DoorbellTest, ABlockThatIsNoDoorbellIsRefused) {
  auto none = Doorbell::Open(mem_, Doorbell::kBlockBytes);  // all zero: never laid out
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("not a gyre doorbell"), std::string::npos)
      << none.status();
  Doorbell::Create(mem_);
  auto small = Doorbell::Open(mem_, Doorbell::kBlockBytes - 1);
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("must be"), std::string::npos) << small.status();
  EXPECT_TRUE(Doorbell::Open(mem_, Doorbell::kBlockBytes).ok());
}

}  // namespace
}  // namespace gyre::ipc
