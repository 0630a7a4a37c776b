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

}  // namespace
}  // namespace gyre::launcher
