// Reading a failed job's flight records: every event of a record as FlightRecorder writes it,
// and which rank the ranks' verdicts blame (launcher/flight_records.h).
#include "launcher/flight_records.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/comm/flight_recorder.h"

namespace gyre::launcher {
namespace {

TEST(FlightRecordsTest, EveryEventOfARecordIsReadBackWithItsEscapes) {
  FlightRecorder recorder;
  recorder.Record("join", 0, "rank 1 joined as 127.0.0.1:5");
  recorder.Record("verdict", 12, "a \"quoted\" word, a back\\slash\nand a new line");
  // Longer than std::regex's recursion takes (one frame per character).
  const std::string long_detail(200000, 'x');
  recorder.Record("op_end", 13, long_detail);
  const std::vector<FlightEvent> events = ParseFlightRecord(recorder.DumpJson(1));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kind, "join");
  EXPECT_EQ(events[0].seq, 0u);
  EXPECT_EQ(events[0].detail, "rank 1 joined as 127.0.0.1:5");
  EXPECT_EQ(events[1].kind, "verdict");
  EXPECT_EQ(events[1].seq, 12u);
  EXPECT_EQ(events[1].detail, JsonEscape("a \"quoted\" word, a back\\slash\nand a new line"));
  EXPECT_EQ(events[2].seq, 13u);
  EXPECT_EQ(events[2].detail, long_detail);
  // A record cut short keeps the whole events before the cut.
  const std::string json = recorder.DumpJson(1);
  EXPECT_EQ(ParseFlightRecord(json.substr(0, json.find("op_end"))).size(), 2u);
  EXPECT_TRUE(ParseFlightRecord("").empty());
  EXPECT_TRUE(ParseFlightRecord("{\"t_us\": 5, \"kind\": \"x").empty());
}

FlightEvent Blame(uint64_t seq, const std::string& detail) { return {"blame", seq, detail}; }
FlightEvent Start(uint64_t seq) {
  return {"op_start", seq, "allreduce seq=" + std::to_string(seq)};
}

TEST(FlightRecordsTest, TheRankMostVerdictsBlameIsNamedWithTheClassMostGaveIt) {
  // Ranks 0, 1 and 3 saw rank 2 stalled (its daemon, pid 900); rank 2 itself, resumed, says
  // it was not running; rank 4 wrote no blame.
  const std::vector<std::vector<FlightEvent>> records = {
      {Start(7), Blame(7, "2 900 stalled")},
      {Start(7), Blame(7, "2 900 stalled")},
      {Start(7), Blame(7, "2 900 not running")},
      {Start(7), Blame(7, "2 900 stalled")},
      {Start(7)},
  };
  launcher::Blame b = BlameOf(records, 5);
  EXPECT_EQ(b.rank, 2);
  EXPECT_EQ(b.pid, 900);
  EXPECT_EQ(b.what, "stalled");

  // The most records win; a tie goes to the lower rank.
  b = BlameOf({{Blame(3, "1 10 dead")}, {Blame(3, "3 30 diverged")}, {Blame(3, "3 30 diverged")}},
              4);
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(b.what, "diverged");
  b = BlameOf({{Blame(3, "3 30 diverged")}, {Blame(3, "1 10 dead")}}, 4);
  EXPECT_EQ(b.rank, 1);

  // Nothing to name: no records, no blame, garbage, or a rank outside the job.
  // The earliest failed call's verdicts decide: a later call failed because of it (a rank
  // a call ahead found the rank that diverged gone), whatever the number of records.
  b = BlameOf({{Start(6), Blame(6, "1 10 diverged")},
               {Start(7), Blame(7, "1 10 dead")},
               {Start(7), Blame(7, "1 10 dead")},
               {Start(7), Blame(7, "2 20 dead")},
               {Start(7), Blame(7, "2 20 dead")},
               {Start(7), Blame(7, "2 20 dead")}},
              4);
  EXPECT_EQ(b.rank, 1);
  EXPECT_EQ(b.what, "diverged");

  EXPECT_EQ(BlameOf({}, 4).rank, -1);
  EXPECT_EQ(BlameOf({{Start(1)}}, 4).rank, -1);
  EXPECT_EQ(BlameOf({{Blame(1, "two 10 dead")}}, 4).rank, -1);
  EXPECT_EQ(BlameOf({{Blame(1, "9 10 dead")}}, 4).rank, -1);
}

// A failure the program went on from (it kept calling) is not the one that ended the job: a
// record's blame counts only if no later operation started.
TEST(FlightRecordsTest, ABlameTheRankWentOnFromDoesNotCount) {
  const std::vector<std::vector<FlightEvent>> records = {
      {Start(10), Blame(10, "2 900 not entered"), Start(11), Start(12)},
      {Start(10), Blame(10, "2 900 not entered"), Start(11)},
  };
  EXPECT_EQ(BlameOf(records, 4).rank, -1);
  // The latest failure's blame is the one that counts.
  const std::vector<std::vector<FlightEvent>> later = {
      {Start(10), Blame(10, "2 900 not entered"), Start(11), Blame(11, "3 901 stalled")},
  };
  const launcher::Blame b = BlameOf(later, 4);
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(b.what, "stalled");
}

// A cut between ranks {0,1} and {2,3}: each side blames a rank of the other as unreachable.
// No vote names one rank (the tie would go to rank 0); the two sides are named instead.
TEST(FlightRecordsTest, RanksThatBlameEachOtherAreSplitIntoTwoSides) {
  const std::vector<std::vector<FlightEvent>> cut = {
      {Start(5), Blame(5, "2 902 unreachable")},
      {Start(5), Blame(5, "2 902 unreachable")},
      {Start(5), Blame(5, "0 900 unreachable")},
      {Start(5), Blame(5, "0 900 unreachable")},
  };
  launcher::Blame b = BlameOf(cut, 4);
  EXPECT_TRUE(b.contradicted());
  EXPECT_EQ(b.rank, -1);
  EXPECT_EQ(b.side_a, (std::vector<int>{0, 1}));
  EXPECT_EQ(b.side_b, (std::vector<int>{2, 3}));
  EXPECT_EQ(b.what_a, "unreachable");
  EXPECT_EQ(b.what_b, "unreachable");

  // Rank 0 and rank 2 blame each other; rank 1, which wrote nothing and is blamed by none, is
  // on neither side.
  b = BlameOf({{Start(3), Blame(3, "2 12 unreachable")}, {}, {Start(3), Blame(3, "0 10 stalled")}},
              3);
  EXPECT_EQ(b.side_a, (std::vector<int>{0}));
  EXPECT_EQ(b.side_b, (std::vector<int>{2}));
  EXPECT_EQ(b.what_a, "unreachable");
  EXPECT_EQ(b.what_b, "stalled");

  // Blame back that a cut does not give is no contradiction: rank 1 blames rank 0 for a call
  // it refused, and rank 0 then finds rank 1 gone; the vote takes the earliest, as before.
  b = BlameOf(
      {{Start(22), Blame(22, "1 901 left")}, {Start(17), Blame(17, "0 900 refused the call")}}, 2);
  EXPECT_FALSE(b.contradicted());
  EXPECT_EQ(b.rank, 0);
  EXPECT_EQ(b.what, "refused the call");

  // One-sided blame is a vote as before: ranks 0, 1 and 3 blame rank 2, which names itself.
  b = BlameOf({{Blame(5, "2 902 stalled")},
               {Blame(5, "2 902 stalled")},
               {Blame(5, "2 902 not running")},
               {Blame(5, "2 902 stalled")}},
              4);
  EXPECT_FALSE(b.contradicted());
  EXPECT_EQ(b.rank, 2);
  // As a real cut between hosts a (ranks 0, 1) and b (ranks 2, 3) left it: each rank blames
  // the peer it waited on, so two pairs blame each other and share no rank; and one side is a
  // call behind the other (ranks 2-3 still finishing seq 905, which ranks 0-1 completed), so
  // each side's verdict is on its own call. (Voting took only seq 905's verdicts, and named
  // rank 0.) The hosts put the pairs together.
  const std::vector<std::vector<FlightEvent>> pairs = {
      {Start(906), Blame(906, "2 902 unreachable")},
      {Start(906), Blame(906, "3 903 unreachable")},
      {Start(905), Blame(905, "0 900 unreachable")},
      {Start(905), Blame(905, "1 901 unreachable")}};
  b = BlameOf(pairs, 4, {"a", "a", "b", "b"});
  EXPECT_EQ(b.side_a, (std::vector<int>{0, 1}));
  EXPECT_EQ(b.side_b, (std::vector<int>{2, 3}));
  // Ranks placed round robin (a: 0, 2; b: 1, 3) with the same blame pairs: hosts decide.
  b = BlameOf({{Blame(9, "1 901 unreachable")},
               {Blame(9, "0 900 unreachable")},
               {Blame(9, "3 903 unreachable")},
               {Blame(9, "2 902 unreachable")}},
              4, {"a", "b", "a", "b"});
  EXPECT_EQ(b.side_a, (std::vector<int>{0, 2}));
  EXPECT_EQ(b.side_b, (std::vector<int>{1, 3}));
  // Rank 3 was told rank 2's verdict and blames no one; rank 1 blames rank 3, which blames
  // it not: they are placed by their hosts, and by who blames whom.
  b = BlameOf({{Start(5), Blame(5, "2 902 unreachable")},
               {Start(5), Blame(5, "3 903 unreachable")},
               {Start(5), Blame(5, "0 900 unreachable")},
               {Start(5)}},
              4, {"a", "a", "b", "b"});
  EXPECT_EQ(b.side_a, (std::vector<int>{0, 1}));
  EXPECT_EQ(b.side_b, (std::vector<int>{2, 3}));
  // Without hosts, each pair has its lowest rank on the first side.
  b = BlameOf(pairs, 4);
  EXPECT_EQ(b.side_a, (std::vector<int>{0, 1}));
  EXPECT_EQ(b.side_b, (std::vector<int>{2, 3}));
}

ProcessResult Exited(int rank, pid_t pid, int code, std::vector<std::string> tail,
                     bool service = false) {
  ProcessResult r;
  r.rank = rank;
  r.name = "rank " + std::to_string(rank) + (service ? " gyred" : "");
  r.pid = pid;
  r.exited = true;
  r.exit_code = code;
  r.service = service;
  r.stderr_tail = std::move(tail);
  return r;
}

// A rank whose program exited with an error of its own after making its communicator: the
// others' verdict says it left without Comm::Close, which is what they saw, not why it went.
// The line leads with its exit and its last stderr line.
TEST(FlightRecordsTest, AVerdictOnARankThatExitedWithAnErrorLeadsWithItsExit) {
  const std::string verdict =
      "barrier seq=1 (dissemination) failed after 97.5 ms on rank 1: rank 0 left (pid 41 on "
      "host vm, 127.0.0.1:5): its program destroyed its communicator without Comm::Close, so "
      "that rank makes no more calls";
  const std::vector<ProcessResult> results = {
      Exited(0, 40, 143, {}, /*service=*/true),
      Exited(0, 41, 1, {"starting", "gyre-bench rank 0: InvalidArgument: cannot open --jsonl /x"}),
      Exited(1, 42, 1, {"gyre-bench rank 1: Unavailable: ..."})};
  const launcher::Blame left(0, 40, "left");
  EXPECT_EQ(ExitedOnItsOwn(left, results), &results[1]);
  EXPECT_EQ(VerdictLine(left, verdict, results),
            "rank 0 (pid 41) exited with code 1: \"gyre-bench rank 0: InvalidArgument: cannot "
            "open --jsonl /x\"; the other ranks' barrier seq=1 (dissemination) failed because it "
            "had gone (it left without Comm::Close)");

  // The verdict stands as it is: a program that exited 0 (it finished its work) or that
  // gyrerun stopped, and other classes.
  std::vector<ProcessResult> finished = results;
  finished[1].exit_code = 0;
  EXPECT_EQ(VerdictLine(left, verdict, finished), verdict);
  std::vector<ProcessResult> stopped = results;
  stopped[1].killed_by_launcher = true;
  EXPECT_EQ(VerdictLine(left, verdict, stopped), verdict);
  EXPECT_EQ(VerdictLine(launcher::Blame(0, 40, "stalled"), verdict, results), verdict);
  EXPECT_EQ(VerdictLine(launcher::Blame(), verdict, results), verdict);
}

// A rank whose gyred was killed: its program then failed talking to it, but the line leads
// with the gyred, the job's root cause, as the summary table does.
TEST(FlightRecordsTest, AVerdictOnARankWhoseDaemonWasKilledLeadsWithTheDaemon) {
  const std::string verdict =
      "allreduce seq=12 (ring, 8 B float32) failed after 1.2 ms on rank 0: rank 2 dead (pid 40 "
      "on host vm, 127.0.0.1:5): its process is gone";
  std::vector<ProcessResult> results = {
      Exited(2, 40, 0, {"I1207 19:48:36.227890 12009 client_server.cc:586] client connected"},
             /*service=*/true),
      Exited(2, 41, 1,
             {"gyre.GyreError: gyre allreduce failed: connection closed by the other "
              "side (the daemon exited)"})};
  results[0].exited = false;
  results[0].signaled = true;
  results[0].signal = 9;
  results[0].root_cause = true;
  const launcher::Blame dead(2, 40, "dead");
  EXPECT_EQ(ExitedOnItsOwn(dead, results), &results[0]);
  EXPECT_EQ(VerdictLine(dead, verdict, results),
            "rank 2 gyred (pid 40) was killed by signal SIGKILL (9); the other ranks' allreduce "
            "seq=12 (ring, 8 B float32) failed because it had gone");

  // Without the gyred as the root cause, the program's own exit leads, as before.
  results[0].root_cause = false;
  results[1].root_cause = true;
  EXPECT_EQ(ExitedOnItsOwn(dead, results), &results[1]);
}

}  // namespace
}  // namespace gyre::launcher
