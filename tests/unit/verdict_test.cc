// The verdict's classification on hand-made views of a job: the root cause is the faulty
// rank, never the survivor's neighbour, and the text names it with its class.
#include "core/job/verdict.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "core/comm/communicator.h"
#include "core/job/bootstrap.h"
#include "core/job/inquiry.h"

namespace gyre::job {
namespace {

// Call descriptions read as they do in a running job.
const bool kFormatterInstalled = (SetOpDescFormatter(&FormatOpDesc), true);

OpDesc Allreduce() {
  OpDesc d;
  d.collective = 0;
  d.dtype = 8;
  d.count = 1024;
  d.algorithm = 1;
  return d;
}

PeerView Waiting(int rank, uint64_t seq, int waiting_on) {
  PeerView v;
  v.rank = rank;
  v.reach = Reach::kAnswered;
  v.state.set_rank(rank);
  v.state.set_pid(1000 + rank);
  v.state.set_host("h");
  v.state.set_in_op(true);
  v.state.set_seq(seq);
  v.state.set_last_started_seq(seq);
  v.state.set_last_completed_seq(seq - 1);
  v.state.set_collective(0);
  v.state.set_dtype(8);
  v.state.set_count(1024);
  v.state.set_algorithm(1);
  v.state.set_waiting_on(waiting_on);
  v.state.set_seconds_since_progress(30);
  v.state.set_op_name("allreduce seq=41 (ring, 4.0 KiB float32)");
  proto::CallRecord* c = v.state.add_recent();
  c->set_seq(seq);
  c->set_collective(0);
  c->set_dtype(8);
  c->set_count(1024);
  c->set_algorithm(1);
  return v;
}

// A rank whose process is gone: its control endpoint refuses the connection.
PeerView Refused(int rank) {
  PeerView v;
  v.rank = rank;
  v.reach = Reach::kRefused;
  v.pid = 1000 + rank;
  v.host = "h" + std::to_string(rank);
  return v;
}

// The state of a rank that completed seq=40 and has not started seq=41.
void IdleAfterSeq40(PeerView* v) {
  v->state.set_in_op(false);
  v->state.set_seq(40);
  v->state.set_last_started_seq(40);
  v->state.set_last_completed_seq(40);
}

LocalFailure Me(int rank, int waiting_on) {
  LocalFailure me;
  me.rank = rank;
  me.seq = 41;
  me.desc = Allreduce();
  me.op_name = "allreduce seq=41 (ring, 4.0 KiB float32)";
  me.status = DeadlineExceededError("no progress");
  me.elapsed = Seconds(30);
  me.timeout = Seconds(30);
  me.waiting_on = waiting_on;
  me.recent.push_back(CallRecord{41, Allreduce(), me.op_name});
  return me;
}

// A ring of 8 where rank 3 is stopped: rank 7 waits on 6, 6 on 5, 5 on 4, 4 on 3.
std::vector<PeerView> RingWithRank3Stopped() {
  std::vector<PeerView> views(8);
  for (int q = 0; q < 8; ++q) views[q] = Waiting(q, 41, (q + 7) % 8);
  views[3] = PeerView{};
  views[3].rank = 3;
  views[3].reach = Reach::kSilent;
  views[3].pid = 1003;
  views[3].host = "h";
  return views;
}

TEST(VerdictTest, StoppedRankInARingIsNamedNotTheNeighbour) {
  Verdict v = Classify(Me(7, 6), RingWithRank3Stopped());
  EXPECT_EQ(v.root, 3);
  EXPECT_EQ(v.root_class, RankClass::kStalled);
  EXPECT_NE(v.text.find("rank 3 stalled (pid 1003 on host h"), std::string::npos) << v.text;
  // Every other rank of the ring waits on it, directly or through its predecessors.
  EXPECT_NE(v.text.find("ranks 0,1,2,4,5,6,7 waiting on it"), std::string::npos) << v.text;
  EXPECT_EQ(v.text.find("rank 6 stalled"), std::string::npos);
}

// The flight record keeps the blamed rank, its process and class in a form gyrerun reads
// back; this rank's own process when the verdict names this rank.
// A rank that dropped a peer's early message for want of memory names itself, and the peer,
// whose send was cut off, names it too, rather than "no rank" or the rank it waited on.
TEST(VerdictTest, ARankWhoseMemoryRanOutIsNamedByItselfAndByTheOthers) {
  const std::string dropped =
      "rank 0 dropped the connection from rank 1: sent 471859200 bytes for seq=41 before the "
      "receive was posted, and this rank cannot allocate a buffer of that size to hold them";
  std::vector<PeerView> views(3);
  for (int q = 0; q < 3; ++q) views[q] = Waiting(q, 41, (q + 2) % 3);
  LocalFailure me0 = Me(0, 1);
  me0.status = ResourceExhaustedError(dropped);
  me0.elapsed = Seconds(1);
  Verdict own = Classify(me0, views);
  EXPECT_EQ(own.root, 0);
  EXPECT_EQ(own.root_class, RankClass::kExhausted);
  EXPECT_NE(own.text.find("rank 0 (this rank) out of memory: its seq=41 failed for want of its "
                          "own memory: " +
                          dropped),
            std::string::npos)
      << own.text;

  // Rank 1's send was cut; rank 0 answers that its seq=41 failed for want of memory.
  views[0].state.set_in_op(false);
  views[0].state.set_failed_seq(41);
  views[0].state.set_exhausted_seq(41);
  views[0].state.set_last_error("ResourceExhausted: " + dropped);
  LocalFailure me1 = Me(1, 0);
  me1.status = UnavailableError("connection reset by rank 0");
  me1.elapsed = Seconds(1);
  Verdict theirs = Classify(me1, views);
  EXPECT_EQ(theirs.root, 0);
  EXPECT_EQ(theirs.root_class, RankClass::kExhausted);
  EXPECT_NE(theirs.text.find("rank 0 out of memory (pid 1000 on host h"), std::string::npos)
      << theirs.text;
  EXPECT_NE(theirs.text.find(dropped), std::string::npos) << theirs.text;

  // What a rank's control endpoint answers carries what its monitor kept.
  OpSnapshot kept;
  kept.failed_seq = 41;
  kept.exhausted_seq = 41;
  EXPECT_EQ(StateOf(kept, RankInfo{}).exhausted_seq(), 41u);

  // A rank that has not reached the call yet, but dropped a message of it for want of memory
  // (its transport's report), is named for that, not as "not entered".
  views[0].state.set_in_op(false);
  views[0].state.set_last_started_seq(40);
  views[0].state.set_last_completed_seq(40);
  views[0].state.set_failed_seq(0);
  views[0].state.set_last_error("");
  views[0].state.set_exhausted_error("ResourceExhausted: " + dropped);
  Verdict early = Classify(me1, views);
  EXPECT_EQ(early.root, 0);
  EXPECT_EQ(early.root_class, RankClass::kExhausted) << early.text;
  EXPECT_NE(early.text.find(dropped), std::string::npos) << early.text;

  // Its memory ran out in an earlier call: this one is not explained by it.
  views[0].state.set_exhausted_seq(40);
  views[0].state.set_failed_seq(40);
  EXPECT_NE(Classify(me1, views).root_class, RankClass::kExhausted);
}

// After rank 1 dropped rank 0's connection (rank 0 sent more than rank 1's
// max_unexpected_bytes before its receives were posted), every call over that pair fails at
// once on both. The verdict named whichever rank had not entered the call yet ("rank 2 not
// entered ... idle"), even rank 0 itself, and the drop's reason showed only on the two ranks.
TEST(VerdictTest, ACallThatFailedOnADroppedConnectionNamesTheRankThatDroppedIt) {
  const std::string dropped = DroppedConnectionText(
      1, "rank 0 (127.0.0.1:4000)",
      "sent 16777216 bytes for a point-to-point message before the receive was posted, over "
      "max_unexpected_bytes (1056968640 of 1073741824 bytes in use)");
  std::vector<PeerView> views(3);
  for (int q = 0; q < 3; ++q) {
    views[q] = Waiting(q, 41, -1);
    IdleAfterSeq40(&views[q]);  // none has entered seq=41 but this rank
  }
  for (int me_rank : {0, 1}) {
    LocalFailure me = Me(me_rank, -1);
    me.status = UnavailableError(me_rank == 0 ? "send to rank 1 failed: " + dropped : dropped);
    me.elapsed = Millis(1);
    const Verdict v = Classify(me, views);
    EXPECT_EQ(v.root, 1) << v.text;
    EXPECT_EQ(v.root_class, RankClass::kDropped) << v.text;
    EXPECT_EQ(v.text.find("not entered"), std::string::npos) << v.text;
    EXPECT_NE(v.text.find(me_rank == 1 ? "rank 1 (this rank) dropped a connection: the connection "
                                         "from rank 0 (127.0.0.1:4000): sent 16777216 bytes"
                                       : "rank 1 dropped a connection (pid 1001 on host h"),
              std::string::npos)
        << v.text;
    EXPECT_NE(v.text.find("over max_unexpected_bytes (1056968640 of 1073741824 bytes in use); "
                          "every call over that pair fails on it from then on"),
              std::string::npos)
        << v.text;
  }

  int dropper = -1;
  std::string text;
  EXPECT_TRUE(FindDroppedConnection("x: " + dropped, &dropper, &text));
  EXPECT_EQ(dropper, 1);
  EXPECT_EQ(text, dropped);
  EXPECT_FALSE(FindDroppedConnection("connection from rank 0 closed: EOF", &dropper, &text));
  EXPECT_FALSE(FindDroppedConnection("it dropped the connection from rank 0", &dropper, &text));

  // A failure that is not on a dropped connection is classified as before.
  LocalFailure other = Me(0, -1);
  other.status = UnavailableError("connection from rank 1 closed: End of file");
  other.elapsed = Millis(1);
  EXPECT_NE(Classify(other, views).root_class, RankClass::kDropped);
}

// A ResourceExhausted failure is named for what ran out: descriptors (EMFILE) or threads are
// not memory, and "out of memory" sent the reader to the wrong limit.
TEST(VerdictTest, ARankOutOfDescriptorsOrThreadsIsNamedForThatNotForMemory) {
  const std::string no_fds =
      "rank 0 cannot read replies from rank 1 (127.0.0.1:4000): Too many open files";
  std::vector<PeerView> views(3);
  for (int q = 0; q < 3; ++q) views[q] = Waiting(q, 41, (q + 2) % 3);
  LocalFailure me0 = Me(0, 1);
  me0.status = ResourceExhaustedError(no_fds);
  me0.elapsed = Seconds(1);
  Verdict own = Classify(me0, views);
  EXPECT_EQ(own.root_class, RankClass::kExhausted);
  EXPECT_NE(own.text.find("rank 0 (this rank) out of file descriptors: its seq=41 failed for "
                          "want of its own file descriptors: " +
                          no_fds),
            std::string::npos)
      << own.text;
  EXPECT_EQ(own.text.find("memory"), std::string::npos) << own.text;
  FlightRecorder recorder;
  RecordBlame(&recorder, 41, &own, /*self=*/0);
  EXPECT_NE(recorder.DumpJson(0).find(" out of file descriptors\""), std::string::npos)
      << recorder.DumpJson(0);

  // The others read it from what rank 0 answered.
  const std::string no_thread =
      "rank 0 cannot start a thread: Resource temporarily unavailable (for its control endpoint)";
  views[0].state.set_in_op(false);
  views[0].state.set_failed_seq(41);
  views[0].state.set_exhausted_seq(41);
  views[0].state.set_exhausted_error("ResourceExhausted: " + no_thread);
  LocalFailure me1 = Me(1, 0);
  me1.status = UnavailableError("connection reset by rank 0");
  me1.elapsed = Seconds(1);
  Verdict theirs = Classify(me1, views);
  EXPECT_EQ(theirs.root, 0);
  EXPECT_NE(theirs.text.find("rank 0 out of threads (pid 1000 on host h"), std::string::npos)
      << theirs.text;
  EXPECT_NE(theirs.text.find("failed for want of its own threads: ResourceExhausted: " + no_thread),
            std::string::npos)
      << theirs.text;

  EXPECT_EQ(ExhaustedResource("cannot write /x: No space left on device"), "disk space");
  EXPECT_EQ(ExhaustedResource("cannot allocate a buffer of 1 GiB"), "memory");
}

TEST(VerdictTest, TheBlamedRankIsRecordedForTheLauncherToRead) {
  const Verdict v = Classify(Me(7, 6), RingWithRank3Stopped());
  ASSERT_EQ(v.root, 3);
  EXPECT_EQ(v.root_pid, 1003);
  FlightRecorder recorder;
  RecordBlame(&recorder, 41, &v, /*self=*/7);
  RecordBlame(&recorder, 42, &v, /*self=*/3);
  RecordBlame(&recorder, 43, nullptr, 7);
  Verdict none;
  RecordBlame(&recorder, 44, &none, 7);
  ASSERT_EQ(recorder.size(), 2u);
  const std::string json = recorder.DumpJson(7);
  EXPECT_NE(json.find(R"("kind": "blame", "seq": 41, "detail": "3 1003 stalled")"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("kind": "blame", "seq": 42, "detail": "3 )" + std::to_string(getpid()) +
                      " stalled\""),
            std::string::npos)
      << json;

  // A rank that names itself for not having run is recorded as such, not as "self".
  Verdict self_named;
  self_named.root = 7;
  self_named.root_class = RankClass::kSelf;
  FlightRecorder own;
  RecordBlame(&own, 45, &self_named, /*self=*/7);
  EXPECT_NE(own.DumpJson(7).find("\"detail\": \"7 " + std::to_string(getpid()) + " not running\""),
            std::string::npos)
      << own.DumpJson(7);

  Blamed b;
  ASSERT_TRUE(ParseBlame("3 1003 not entered", &b));
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(b.pid, 1003);
  EXPECT_EQ(b.what, "not entered");
  for (const char* bad : {"", "3", "3 1003", "3 1003 ", "x 1003 stalled", "3 x stalled",
                          " 3 1003 stalled", "99999999999 1 stalled", "3  stalled"}) {
    Blamed out;
    EXPECT_FALSE(ParseBlame(bad, &out)) << "'" << bad << "'";
    EXPECT_EQ(out.rank, -1) << "'" << bad << "'";
  }
}

// Rank 0 waits on 3, 3 waits on 2, and 2 does not answer; rank 1's control port refuses (it
// left: after its own verdict, or because it died). The chain of waits names rank 2: what
// holds this rank up comes before a rank that merely disappeared off that chain.
TEST(VerdictTest, TheChainOfWaitsOutranksADeadRankOffIt) {
  std::vector<PeerView> views(4);
  for (int q = 0; q < 4; ++q) views[q] = Waiting(q, 41, (q + 3) % 4);
  views[1].reach = Reach::kRefused;
  views[2].reach = Reach::kSilent;
  Verdict v = Classify(Me(0, 3), views);
  EXPECT_EQ(v.root, 2) << v.text;
  EXPECT_EQ(v.root_class, RankClass::kStalled);
  EXPECT_EQ(v.classes[1], RankClass::kDead);
  EXPECT_NE(v.text.find("rank 2 stalled"), std::string::npos) << v.text;
}

// A rank whose own process did not run for the progress timeout or more since its last call
// that succeeded (stopped, say), or for half of it during the failed call, finds on resuming
// that the others gave up on it and left: it names itself, not the first of them. A shorter
// stretch, or one the others survived (before its last success, so not counted here), leaves
// the dead rank the cause.
TEST(VerdictTest, ARankThatWasNotRunningNamesItselfNotTheRanksThatGaveUpOnIt) {
  std::vector<PeerView> views(3);
  for (int q = 0; q < 3; ++q) views[q] = Refused(q);
  LocalFailure me = Me(2, 0);
  me.status = UnavailableError("rank 0 closed the connection");
  me.elapsed = Seconds(40);
  me.frozen = Seconds(35);
  Verdict v = Classify(me, views);
  EXPECT_EQ(v.root, 2) << v.text;
  EXPECT_EQ(v.root_class, RankClass::kSelf);
  EXPECT_NE(v.text.find("rank 2 (this rank) was not running: its process did not run for 35"),
            std::string::npos)
      << v.text;
  EXPECT_NE(v.text.find("the other ranks gave up on it"), std::string::npos) << v.text;
  EXPECT_EQ(v.text.find("rank 0 dead"), std::string::npos) << v.text;

  me.frozen = Seconds(20);  // under the 30 s timeout, but 16 s of it in the failed call
  me.frozen_in_call = Seconds(16);
  v = Classify(me, views);
  EXPECT_EQ(v.root_class, RankClass::kSelf) << v.text;

  me.frozen = Seconds(25);  // under the timeout, before the call: the others survived it
  me.frozen_in_call = Duration::zero();
  v = Classify(me, views);
  EXPECT_EQ(v.root, 0) << v.text;
  EXPECT_EQ(v.root_class, RankClass::kDead);
  EXPECT_NE(v.text.find("rank 0 dead"), std::string::npos) << v.text;

  me.frozen = Seconds(14);  // in the call, under half the timeout
  me.frozen_in_call = Seconds(14);
  v = Classify(me, views);
  EXPECT_EQ(v.root_class, RankClass::kDead) << v.text;
}

// When the chain ends nowhere (this rank waits on nobody, or on a rank that is done), the
// class decides: dead before stalled before not entered.
TEST(VerdictTest, OffTheChainDeadBeatsStalled) {
  std::vector<PeerView> views(4);
  for (int q = 0; q < 4; ++q) views[q] = Waiting(q, 41, -1);
  views[1].reach = Reach::kRefused;
  views[2].reach = Reach::kSilent;
  Verdict v = Classify(Me(0, -1), views);
  EXPECT_EQ(v.root, 1) << v.text;
  EXPECT_EQ(v.root_class, RankClass::kDead);
  EXPECT_EQ(v.classes[2], RankClass::kStalled);
}

// Daemon mode, its program killed: rank 2's gyred told the others before it left, so the rank
// named dead is named by its program's pid and how it went, not by the daemon's pid alone.
TEST(VerdictTest, ARankWhoseProgramWentAwayIsNamedByItsProgram) {
  std::vector<PeerView> views(4);
  for (int q = 0; q < 4; ++q) views[q] = Waiting(q, 41, (q + 3) % 4);
  views[2] = Refused(2);  // its daemon left after telling
  LocalFailure me = Me(3, 2);
  me.status = UnavailableError("connection from rank 2 closed: End of file");
  me.elapsed = Millis(120);
  me.departures.push_back(PeerDeparture{2, 4569, "its connection to gyred closed", 40});
  const Verdict v = Classify(me, views);
  EXPECT_EQ(v.root, 2) << v.text;
  EXPECT_EQ(v.root_class, RankClass::kDead);
  EXPECT_EQ(v.root_pid, 4569);
  EXPECT_NE(v.text.find("rank 2 dead (pid 1002 on host h2): its program (pid 4569) is gone: its "
                        "connection to gyred closed; last completed seq=40, in seq=41"),
            std::string::npos)
      << v.text;

  // Its daemon still answering on its way out, idle after seq=40: dead all the same, not
  // "not entered" (it never will), and named by the program.
  views[2] = Waiting(2, 40, -1);
  IdleAfterSeq40(&views[2]);
  const Verdict answering = Classify(me, views);
  EXPECT_EQ(answering.root, 2) << answering.text;
  EXPECT_EQ(answering.root_class, RankClass::kDead);
  EXPECT_EQ(answering.root_pid, 4569);

  // A rank whose program left after completing this very call did its part: not the cause.
  views[2] = Waiting(2, 41, -1);
  views[2].state.set_in_op(false);
  views[2].state.set_last_completed_seq(41);
  views[1] = Refused(1);
  me.departures[0].last_completed_seq = 41;
  const Verdict after = Classify(me, views);
  EXPECT_EQ(after.classes[2], RankClass::kDone) << after.text;
  EXPECT_EQ(after.root, 1) << after.text;
  EXPECT_NE(after.text.find("its process is gone"), std::string::npos) << after.text;
  // The same with its daemon gone too: its daemon's word says it completed the call.
  views[2] = Refused(2);
  const Verdict after_gone = Classify(me, views);
  EXPECT_EQ(after_gone.classes[2], RankClass::kDone) << after_gone.text;
  EXPECT_EQ(after_gone.root, 1) << after_gone.text;
  EXPECT_EQ(after_gone.text.find("its program"), std::string::npos) << after_gone.text;

  // Without a word from its daemon, the pid named is the one the rank published.
  me.departures.clear();
  views[2] = Refused(2);
  views[1] = Waiting(1, 41, 0);
  const Verdict unknown = Classify(me, views);
  EXPECT_EQ(unknown.root_pid, 1002) << unknown.text;
  EXPECT_EQ(unknown.text.find("its program"), std::string::npos) << unknown.text;
}

// A program that let go of its communicator without Close (and may well have exited 0) is the
// cause of a call it never makes, but it "left": it is not dead. Embedded, the program is the
// rank's process, and its pid is not said twice.
TEST(VerdictTest, ARankWhoseProgramLeftOnPurposeIsNamedAsHavingLeft) {
  std::vector<PeerView> views(4);
  for (int q = 0; q < 4; ++q) views[q] = Waiting(q, 41, (q + 3) % 4);
  views[2] = Refused(2);
  LocalFailure me = Me(3, 2);
  me.status = UnavailableError("connection from rank 2 closed: End of file");
  me.elapsed = Millis(120);
  PeerDeparture left{2, 4569, "destroyed its communicator without Comm::Close", 40};
  left.on_purpose = true;
  me.departures.push_back(left);
  const Verdict v = Classify(me, views);
  EXPECT_EQ(v.root, 2) << v.text;
  EXPECT_EQ(v.root_class, RankClass::kLeft);
  EXPECT_EQ(v.root_pid, 4569);
  EXPECT_NE(v.text.find("rank 2 left (pid 1002 on host h2): its program (pid 4569) destroyed its "
                        "communicator without Comm::Close, so that rank makes no more calls; "
                        "last completed seq=40, in seq=41"),
            std::string::npos)
      << v.text;

  // Its daemon still answering on its way out, idle: left all the same.
  views[2] = Waiting(2, 40, -1);
  IdleAfterSeq40(&views[2]);
  EXPECT_EQ(Classify(me, views).root_class, RankClass::kLeft);

  // Embedded: the pid it published is its program's.
  views[2] = Refused(2);
  me.departures[0].program_pid = 1002;
  const Verdict embedded = Classify(me, views);
  EXPECT_NE(embedded.text.find("rank 2 left (pid 1002 on host h2): its program destroyed its "
                               "communicator"),
            std::string::npos)
      << embedded.text;

  // Left after completing this very call: it did its part, and a dead rank is the cause.
  me.departures[0].last_completed_seq = 41;
  views[1] = Refused(1);
  const Verdict after = Classify(me, views);
  EXPECT_EQ(after.classes[2], RankClass::kDone) << after.text;
  EXPECT_EQ(after.root, 1) << after.text;
  EXPECT_EQ(after.root_class, RankClass::kDead) << after.text;
}

// A partition between two hosts: ranks 2 and 3 on host "b" answer no connect from host "h".
// They are named unreachable, by host, not "dead" or "stalled".
TEST(VerdictTest, RanksBehindAPartitionAreUnreachableByHost) {
  std::vector<PeerView> views(4);
  for (int q = 0; q < 4; ++q) views[q] = Waiting(q, 41, (q + 3) % 4);
  for (int q : {2, 3}) {
    views[q] = PeerView{};
    views[q].rank = q;
    views[q].reach = Reach::kUnreachable;
    views[q].error = "connect to 198.18.0.3:4000: no connection within 250 ms";
    views[q].pid = 2000 + q;
    views[q].host = "b";
  }
  LocalFailure me = Me(1, 0);
  me.host = "h";
  Verdict v = Classify(me, views);
  EXPECT_EQ(v.root_class, RankClass::kUnreachable) << v.text;
  EXPECT_TRUE(v.root == 2 || v.root == 3) << v.text;
  EXPECT_NE(v.text.find("cannot be reached from host h"), std::string::npos) << v.text;
  EXPECT_NE(v.text.find("unreachable: ranks 2,3 (host b)"), std::string::npos) << v.text;
}

TEST(VerdictTest, ConnectFailuresReadAsTheirCause) {
  EXPECT_EQ(ClassifyConnectFailure(UnavailableError("connect to a:1: Connection refused")),
            Reach::kRefused);
  EXPECT_EQ(ClassifyConnectFailure(DeadlineExceededError("connect to a:1: no answer in 1 s")),
            Reach::kUnreachable);
  EXPECT_EQ(ClassifyConnectFailure(UnavailableError("connect to a:1: Invalid argument")),
            Reach::kUnreachable);
  EXPECT_EQ(ClassifyConnectFailure(UnavailableError("connect to a:1: Network is unreachable")),
            Reach::kUnreachable);
  EXPECT_EQ(ClassifyConnectFailure(UnavailableError("connect to a:1: Connection reset by peer")),
            Reach::kRefused);
  EXPECT_EQ(ClassifyConnectFailure(UnavailableError("connect to a:1: Too many open files")),
            Reach::kError);
}

TEST(VerdictTest, IdleRankIsNotEntered) {
  std::vector<PeerView> views(3);
  for (int q = 0; q < 3; ++q) views[q] = Waiting(q, 41, (q + 2) % 3);
  IdleAfterSeq40(&views[2]);
  Verdict v = Classify(Me(0, 2), views);
  EXPECT_EQ(v.root, 2);
  EXPECT_EQ(v.root_class, RankClass::kNotEntered);
  EXPECT_NE(v.text.find("never started seq=41: last completed seq=40, idle"), std::string::npos)
      << v.text;
}

// Between collectives but blocked in a receive of its own: the verdict says which.
TEST(VerdictTest, ARankBlockedInAReceiveIsNotEnteredAndSaysWhere) {
  std::vector<PeerView> views(3);
  for (int q = 0; q < 3; ++q) views[q] = Waiting(q, 41, (q + 2) % 3);
  IdleAfterSeq40(&views[2]);
  proto::WaitingMessage* w = views[2].state.add_waiting();
  w->set_name("recv from rank 0 (tag 7, 4 x float32) on rank 2 #0");
  w->set_peer(0);
  w->set_seconds(12.5);
  Verdict v = Classify(Me(0, 2), views);
  EXPECT_EQ(v.root, 2);
  EXPECT_EQ(v.root_class, RankClass::kNotEntered);
  EXPECT_NE(v.text.find("never started seq=41: last completed seq=40, blocked in recv from rank 0 "
                        "(tag 7, 4 x float32) on rank 2 #0 for 12.50 s"),
            std::string::npos)
      << v.text;
  EXPECT_EQ(v.text.find("idle"), std::string::npos) << v.text;

  // Blocked there after its own previous call failed: that failure is said too.
  views[2].state.set_failed_seq(40);
  views[2].state.set_last_completed_seq(39);
  views[2].state.set_last_error("rank 0 dead");
  v = Classify(Me(0, 2), views);
  EXPECT_NE(v.text.find("for 12.50 s (after its seq=40 failed: rank 0 dead)"), std::string::npos)
      << v.text;
}

// Rank 0 has moved on to seq=41 and waits on rank 1, which is still in seq=40 waiting on
// rank 3, which does not answer: rank 1 is behind only because of that wait, so rank 3 is
// named, not rank 1 as "not entered". A rank that is idle (not inside seq=40) still is.
TEST(VerdictTest, ARankHeldInAnEarlierCallIsFollowedToWhatHoldsIt) {
  std::vector<PeerView> views(4);
  for (int q = 0; q < 4; ++q) views[q] = Waiting(q, 41, -1);
  views[1] = Waiting(1, 40, 3);
  views[2] = Waiting(2, 40, 3);
  views[3].reach = Reach::kSilent;
  Verdict v = Classify(Me(0, 1), views);
  EXPECT_EQ(v.root, 3) << v.text;
  EXPECT_EQ(v.root_class, RankClass::kStalled);
  EXPECT_EQ(v.classes[1], RankClass::kNotEntered);
  EXPECT_NE(v.text.find("rank 3 stalled"), std::string::npos) << v.text;

  IdleAfterSeq40(&views[1]);
  v = Classify(Me(0, 1), views);
  EXPECT_EQ(v.root, 1) << v.text;
  EXPECT_EQ(v.root_class, RankClass::kNotEntered);
}

// A cycle of waits through a held rank (rank 1, in seq=40, waits on 2; rank 2, in seq=41,
// waits on 1) gives no root by itself; every rank then names the same one, whichever end of
// the cycle it starts from: rank 4, which does not answer.
TEST(VerdictTest, ACycleThroughAHeldRankNamesTheSameRankFromEverywhere) {
  std::vector<PeerView> views(5);
  for (int q = 0; q < 5; ++q) views[q] = Waiting(q, 41, -1);
  views[1] = Waiting(1, 40, 2);
  views[2] = Waiting(2, 41, 1);
  views[4].reach = Reach::kSilent;
  for (int start : {1, 2}) {
    Verdict v = Classify(Me(0, start), views);
    EXPECT_EQ(v.root, 4) << "rank 0 waiting on " << start << ": " << v.text;
    EXPECT_EQ(v.root_class, RankClass::kStalled);
  }
}

// The state of a rank whose seq=40 failed and which has started nothing since.
void IdleAfterFailingSeq40(PeerView* v) {
  v->state.set_in_op(false);
  v->state.set_seq(40);
  v->state.set_last_started_seq(40);
  v->state.set_last_completed_seq(39);
  v->state.set_failed_seq(40);
}

// Rank 2 is idle because its seq=40 failed (a rank it depended on died while this rank had
// already finished seq=40): its failure, with the dead rank named, is in the verdict.
TEST(VerdictTest, IdleRankAfterAFailureCarriesItsCause) {
  std::vector<PeerView> views(3);
  for (int q = 0; q < 3; ++q) views[q] = Waiting(q, 41, (q + 2) % 3);
  IdleAfterFailingSeq40(&views[2]);
  views[2].state.set_last_error(
      "allreduce seq=40 failed on rank 2: rank 7 dead (pid 9 on host h9)");
  Verdict v = Classify(Me(0, 2), views);
  EXPECT_EQ(v.root, 2);
  EXPECT_EQ(v.root_class, RankClass::kNotEntered);
  EXPECT_NE(
      v.text.find("never started seq=41: last completed seq=39, idle after its seq=40 "
                  "failed: allreduce seq=40 failed on rank 2: rank 7 dead (pid 9 on host h9)"),
      std::string::npos)
      << v.text;
  // An old failure, followed by completed calls, is not this one's cause.
  views[2].state.set_last_completed_seq(40);
  views[2].state.set_failed_seq(12);
  v = Classify(Me(0, 2), views);
  EXPECT_EQ(v.text.find("failed: allreduce seq=40"), std::string::npos) << v.text;
  EXPECT_EQ(v.text.find("after its seq"), std::string::npos) << v.text;
}

// Rank 0 waits on rank 2, which is idle because its previous call failed when rank 1 died:
// the dead rank is the cause, not the victim the chain of waits ends at.
TEST(VerdictTest, AVictimOfAnEarlierFailureDoesNotHideTheDeadRank) {
  std::vector<PeerView> views(3);
  for (int q = 0; q < 3; ++q) views[q] = Waiting(q, 41, (q + 2) % 3);
  views[1] = Refused(1);
  IdleAfterFailingSeq40(&views[2]);
  views[2].state.set_last_error("allreduce seq=40 failed on rank 2: connection from rank 1 closed");
  Verdict v = Classify(Me(0, 2), views);
  EXPECT_EQ(v.root, 1) << v.text;
  EXPECT_EQ(v.root_class, RankClass::kDead) << v.text;
}

// Rank 0's call failed 1 ms in, when rank 1's connection closed; rank 2, which rank 0 was
// waiting on, had not started the call yet (it had just finished the one before). The dead
// rank is the cause. After a wait as long as the progress timeout, the idle rank would be.
TEST(VerdictTest, AQuickFailureNamesTheDeadRankNotOneThatIsBehind) {
  std::vector<PeerView> views(3);
  for (int q = 0; q < 3; ++q) views[q] = Waiting(q, 41, (q + 2) % 3);
  views[1] = Refused(1);
  IdleAfterSeq40(&views[2]);
  LocalFailure me = Me(0, 2);
  me.status = UnavailableError("connection from rank 1 closed: End of file");
  me.elapsed = Millis(1);
  Verdict v = Classify(me, views);
  EXPECT_EQ(v.root, 1) << v.text;
  EXPECT_EQ(v.root_class, RankClass::kDead) << v.text;
  EXPECT_NE(v.text.find("rank 1 dead"), std::string::npos) << v.text;
  me.elapsed = Seconds(30);
  v = Classify(me, views);
  EXPECT_EQ(v.root, 2) << v.text;
  EXPECT_EQ(v.root_class, RankClass::kNotEntered) << v.text;
}

// Rank 2 of 4 calls broadcast where the others call allreduce. Whichever rank computes
// the verdict, the minority call is the one named.
TEST(VerdictTest, MinorityCallIsDivergedWhoeverAsks) {
  std::vector<PeerView> views(4);
  for (int q = 0; q < 4; ++q) views[q] = Waiting(q, 41, (q + 3) % 4);
  views[2].state.mutable_recent(0)->set_collective(1);  // broadcast
  views[2].state.mutable_recent(0)->set_root(0);
  for (int asker : {0, 3}) {
    Verdict v = Classify(Me(asker, (asker + 3) % 4), views);
    EXPECT_EQ(v.root, 2);
    EXPECT_EQ(v.root_class, RankClass::kDiverged);
    EXPECT_NE(v.text.find("rank 2 diverged"), std::string::npos) << v.text;
    EXPECT_NE(v.text.find("called broadcast(count=1024"), std::string::npos) << v.text;
    EXPECT_NE(v.text.find("while ranks 0,1,3 called allreduce(count=1024"), std::string::npos)
        << v.text;
  }
  // The diverged rank itself gets the same answer about itself.
  std::vector<PeerView> from2 = views;
  LocalFailure me2 = Me(2, 1);
  me2.recent[0].desc.collective = 1;
  Verdict v2 = Classify(me2, from2);
  EXPECT_EQ(v2.root, 2);
  EXPECT_NE(v2.text.find("rank 2 (this rank) diverged"), std::string::npos) << v2.text;
}

// A rank that refused call 41 for its arguments sent nothing in it: it is named with its
// reason, whether it has moved on to the next call and whatever fingerprint its refused call
// had (refused before the automatic choice, it may differ from the others').
TEST(VerdictTest, ARankThatRefusedTheCallIsNamedWithItsReason) {
  std::vector<PeerView> views(4);
  for (int q = 0; q < 4; ++q) views[q] = Waiting(q, 41, (q + 3) % 4);
  PeerView& r2 = views[2];
  r2.state.set_refused_seq(41);
  r2.state.set_failed_seq(41);
  r2.state.set_last_error("InvalidArgument: allreduce seq=41 on rank 2: the input buffer is null");
  r2.state.mutable_recent(0)->set_algorithm(0);  // auto: refused before the choice
  for (bool moved_on : {false, true}) {
    if (moved_on) {
      r2.state.set_seq(42);
      r2.state.set_last_started_seq(42);
      r2.state.set_waiting_on(1);
    } else {
      r2.state.set_in_op(false);
    }
    for (int asker : {0, 3}) {
      Verdict v = Classify(Me(asker, (asker + 3) % 4), views);
      EXPECT_EQ(v.root, 2) << v.text;
      EXPECT_EQ(v.root_class, RankClass::kRefused) << v.text;
      EXPECT_NE(v.text.find("rank 2 refused the call"), std::string::npos) << v.text;
      EXPECT_NE(v.text.find("its seq=41 was refused there"), std::string::npos) << v.text;
      EXPECT_NE(v.text.find("the input buffer is null"), std::string::npos) << v.text;
    }
  }
  // A refusal of an earlier call is not this call's cause.
  r2.state.set_refused_seq(40);
  Verdict v = Classify(Me(0, 3), views);
  EXPECT_NE(v.root_class, RankClass::kRefused) << v.text;
}

// A divergence at an earlier call explains ranks stuck behind it.
TEST(VerdictTest, EarliestDivergenceIsTheRootCause) {
  std::vector<PeerView> views(3);
  for (int q = 0; q < 3; ++q) views[q] = Waiting(q, 41, (q + 2) % 3);
  // Rank 1 is still in seq 40, where it called with another root.
  views[1].state.set_seq(40);
  views[1].state.set_last_started_seq(40);
  views[1].state.clear_recent();
  proto::CallRecord* c = views[1].state.add_recent();
  c->set_seq(40);
  c->set_collective(2);
  c->set_root(1);
  proto::CallRecord* c2 = views[2].state.add_recent();
  c2->set_seq(40);
  c2->set_collective(2);
  c2->set_root(0);
  LocalFailure me = Me(0, 1);
  me.recent.insert(me.recent.begin(), CallRecord{40, OpDesc{2, 0, 0, 0, 0, 0}, "reduce"});
  Verdict v = Classify(me, views);
  EXPECT_EQ(v.root, 1);
  EXPECT_EQ(v.root_class, RankClass::kDiverged);
  EXPECT_NE(v.text.find("at seq=40"), std::string::npos) << v.text;
}

TEST(VerdictTest, RankAheadHasMovedOn) {
  std::vector<PeerView> views(3);
  views[0] = Waiting(0, 41, 2);
  views[1] = Waiting(1, 42, 0);
  views[2] = Waiting(2, 41, 1);
  views[2].reach = Reach::kSilent;
  Verdict v = Classify(Me(0, 2), views);
  EXPECT_EQ(v.classes[1], RankClass::kDone);
  EXPECT_EQ(v.root, 2);
}

TEST(VerdictTest, ProgressingRankIsSlow) {
  std::vector<PeerView> views(3);
  for (int q = 0; q < 3; ++q) views[q] = Waiting(q, 41, (q + 2) % 3);
  views[2].state.set_waiting_on(-1);
  views[2].state.set_seconds_since_progress(0.1);
  Verdict v = Classify(Me(0, 2), views);
  EXPECT_EQ(v.root, 2);
  EXPECT_EQ(v.root_class, RankClass::kSlow);
}

TEST(VerdictTest, NobodyToBlameSaysSo) {
  std::vector<PeerView> views(2);
  views[0] = Waiting(0, 41, 1);
  views[1] = Waiting(1, 41, 0);
  views[1].state.set_in_op(false);
  views[1].state.set_last_completed_seq(41);
  Verdict v = Classify(Me(0, 1), views);
  EXPECT_EQ(v.root, -1);
  EXPECT_NE(v.text.find("no rank could be named"), std::string::npos) << v.text;
}

// Up to kAllAskAtOnce ranks every survivor asks at once; beyond, rank r waits min(r, 16)/4
// query timeouts, so the last in line (whom gyrerun's settle window must cover) waits four.
TEST(VerdictTest, SurvivorsWaitTheirTurnOnlyInLargerJobs) {
  const Duration t = Seconds(10);
  const Duration q = QueryTimeoutFor(t);
  EXPECT_EQ(q, Seconds(1));
  EXPECT_EQ(VerdictTurnWait(kAllAskAtOnce - 1, kAllAskAtOnce, t), Duration::zero());
  const int p = kAllAskAtOnce + 1;
  EXPECT_EQ(VerdictTurnWait(0, p, t), Duration::zero());
  EXPECT_EQ(VerdictTurnWait(1, p, t), q / 4);
  EXPECT_EQ(VerdictTurnWait(8, p, t), q * 2);
  EXPECT_EQ(VerdictTurnWait(16, p, t), q * 4);
  EXPECT_EQ(VerdictTurnWait(511, 512, t), q * 4);
}

// A verdict that names its own writer ("rank 1 (this rank) diverged") is sent to every rank
// as written; read on rank 2, "this rank" pointed at rank 2. The reader's copy names the
// sender instead; other ranks' numbers, and a verdict naming another rank, are untouched.
TEST(VerdictTest, ARelayedVerdictDoesNotCallItsWriterThisRank) {
  const std::string text =
      "allreduce seq=2 failed after 243 us on rank 1: rank 1 (this rank) diverged: called "
      "allreduce(count=65) where rank 11 (this rank) is not rank 1";
  EXPECT_EQ(
      VerdictAsRelayed(text, 1),
      "allreduce seq=2 failed after 243 us on rank 1: rank 1 (the rank that sent this "
      "verdict) diverged: called allreduce(count=65) where rank 11 (this rank) is not rank 1");
  const std::string other = "barrier seq=3 failed on rank 0: rank 2 stalled (pid 7): in seq=3";
  EXPECT_EQ(VerdictAsRelayed(other, 0), other);
}

}  // namespace
}  // namespace gyre::job
