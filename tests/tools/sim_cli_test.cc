// gyre-sim and gyre-schedule given bad input: every numeric flag is checked by name, the
// world size is capped, sizes that overflow are refused, stray arguments are refused, and
// output that cannot be written is an error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/cli_test_util.h"

namespace gyre::testing {
namespace {

TEST(GyreSimCli, ZeroRanksIsAnErrorNotACrash) {
  // The default --bytes 64M takes the byte-scale path, which divided by the world size.
  ExpectRefused({BuiltBinary("gyre-sim"), "--ranks", "0"}, {"--ranks 0", "from 1 to 4096"});
  ExpectRefused({BuiltBinary("gyre-sim"), "--topology", "ring", "--ranks", "0"}, {"--ranks 0"});
}

TEST(GyreSimCli, RanksBeyondTheCapAreRefusedAtOnce) {
  CommandResult r = RunTool({BuiltBinary("gyre-sim"), "--ranks", "100000", "--phantom"}, 30);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--ranks 100000"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("4096"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 5.0);
}

// Runs `argv` with its address space limited to `kib` KiB (ulimit -v), as on a host with
// that much memory.
CommandResult RunWithin(int64_t kib, const std::vector<std::string>& argv, double timeout = 60) {
  std::vector<std::string> sh = {"/bin/sh", "-c",
                                 "ulimit -v " + std::to_string(kib) + " && exec \"$0\" \"$@\""};
  sh.insert(sh.end(), argv.begin(), argv.end());
  return RunCommand(sh, {}, timeout);
}

// A run whose memory cannot fit is refused up front, naming the estimate and what is
// available. A 4096-rank ring allreduce (the automatic choice at 64 MiB) needs about 25 GB:
// it was OOM-killed, or under ulimit -v aborted on std::bad_alloc after seconds.
TEST(GyreSimCli, ARunThatCannotFitInMemoryIsRefusedAtOnce) {
  const std::string sim = BuiltBinary("gyre-sim");
  for (const std::vector<std::string>& run : std::vector<std::vector<std::string>>{
           {sim, "--ranks", "4096", "--phantom", "--bytes", "64M"},
           {sim, "--ranks", "2048", "--phantom", "--bytes", "64M", "--algo", "ring"},
           // Real data checks 4096 elements, but the call is 64 MiB and chooses ring.
           {sim, "--ranks", "4096", "--bytes", "64M"},
       }) {
    CommandResult r = RunWithin(2000000, run, 120);
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code, 2) << run[2] << " ranks: " << r.err;
    EXPECT_NE(r.err.find("gyre-sim: ResourceExhausted: simulating allreduce (ring) on " + run[2] +
                         " ranks needs about "),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("this process can still get (MemAvailable, the memory cgroup's limit, "
                         "ulimit -v)"),
              std::string::npos)
        << r.err;
    EXPECT_LT(r.seconds, 10.0) << r.err;
  }
  // Real data at full size on a thousand ranks (64 GiB) is refused the same way.
  CommandResult real = RunWithin(2000000, {sim, "--ranks", "1024", "--bytes", "64M", "--byte_scale",
                                           "1", "--algo", "recursive_doubling"});
  EXPECT_EQ(real.exit_code, 2) << real.err;
  EXPECT_NE(real.err.find("the real data), more than the "), std::string::npos) << real.err;
  // Runs that fit still run within the same limit: 4096 ranks of recursive doubling (0.9 GB).
  CommandResult fits = RunWithin(2000000, {sim, "--ranks", "4096", "--phantom", "--bytes", "64M",
                                           "--algo", "recursive_doubling"});
  EXPECT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_NE(fits.out.find("steps 12 "), std::string::npos) << fits.out;
}

TEST(GyreSimCli, LinkAndRateFlagsOutsideTheirMeaningAreRefused) {
  const std::string sim = BuiltBinary("gyre-sim");
  ExpectRefused({sim, "--bandwidth_GBps", "0"}, {"--bandwidth_GBps 0", "above 0"});
  ExpectRefused({sim, "--bandwidth_GBps", "-5"}, {"--bandwidth_GBps -5"});
  ExpectRefused({sim, "--bandwidth_GBps", "nan"}, {"--bandwidth_GBps nan"});
  ExpectRefused({sim, "--latency_us", "-3"}, {"--latency_us -3"});
  ExpectRefused({sim, "--reduce_GBps", "-1"}, {"--reduce_GBps -1"});
  ExpectRefused({sim, "--byte_scale", "-2"}, {"--byte_scale -2"});
  ExpectRefused({sim, "--topology", "fat_tree:2x2", "--ranks", "4", "--spines", "-1"},
                {"--spines -1"});
  ExpectRefused({sim, "--count", "-5"}, {"--count -5"});
}

TEST(GyreSimCli, SizesThatOverflowAreRefusedNamingTheFlag) {
  const std::string sim = BuiltBinary("gyre-sim");
  ExpectRefused({sim, "--ranks", "4", "--count", "9223372036854775807"},
                {"--count 9223372036854775807 is too large"});
  ExpectRefused({sim, "--ranks", "4", "--count", "2305843009213693952", "--op", "allgather"},
                {"--count 2305843009213693952 is too large"});
  ExpectRefused({sim, "--ranks", "4", "--bytes", "999999999999999G"},
                {"--bytes 999999999999999G", "too large"});
}

// --bytes runs as whole elements, at least one, and says so when that is not what was asked,
// as gyre-bench does: 3 B of float64 ran as 0 elements, "ok", without a word.
TEST(GyreSimCli, BytesThatAreNotWholeElementsRunAsWholeOnesAndSaySo) {
  const std::string sim = BuiltBinary("gyre-sim");
  CommandResult three = RunTool({sim, "--ranks", "4", "--bytes", "3", "--dtype", "float64"});
  EXPECT_EQ(three.exit_code, 0) << three.err;
  EXPECT_EQ(three.out.rfind("# 3 B runs as 8 B (whole float64 elements: at least one)\n", 0), 0)
      << three.out;
  EXPECT_NE(three.out.find("count=1 "), std::string::npos) << three.out;
  EXPECT_NE(three.out.find("result: ok"), std::string::npos) << three.out;
  // With --json the note goes to stderr and stdout stays one JSON object.
  CommandResult json =
      RunTool({sim, "--ranks", "4", "--bytes", "20", "--dtype", "float64", "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_NE(json.err.find("# 20 B runs as 16 B (whole float64 elements: at least one)"),
            std::string::npos)
      << json.err;
  EXPECT_EQ(json.out.rfind("{\"op\": \"allreduce\"", 0), 0) << json.out;
  EXPECT_NE(json.out.find("\"count\": 2,"), std::string::npos) << json.out;
  // A size of whole elements runs as asked, without a note.
  CommandResult whole = RunTool({sim, "--ranks", "4", "--bytes", "16", "--dtype", "float64"});
  EXPECT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_EQ(whole.out.find("runs as"), std::string::npos) << whole.out;
  EXPECT_NE(whole.out.find("count=2 "), std::string::npos) << whole.out;
}

// The "algo" of gyre-sim's --json line.
std::string AlgoOf(const std::vector<std::string>& argv) {
  CommandResult r = RunTool(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string key = "\"algo\": \"";
  const size_t at = r.out.find(key);
  if (at == std::string::npos) return "(no algo in: " + r.out + ")";
  const size_t from = at + key.size();
  return r.out.substr(from, r.out.find('"', from) - from);
}

// --algo auto is chosen for the size that is timed, as gyre chooses at run time: a
// --phantom run holds the whole count, so it is what gyre picks; a run on real data checks
// a few thousand elements and scales their bytes, and ran the small-message algorithm (64
// MiB on 3 ranks: recursive doubling where gyre runs ring).
TEST(GyreSimCli, AutoIsChosenForTheTimedSizeNotTheCheckedOne) {
  const std::string sim = BuiltBinary("gyre-sim");
  for (const char* op : {"allreduce", "broadcast"}) {
    for (const char* ranks : {"3", "16"}) {
      for (const char* bytes : {"1M", "64M", "1G"}) {
        const std::vector<std::string> run = {sim,   "--op",    op,    "--ranks",
                                              ranks, "--bytes", bytes, "--json"};
        std::vector<std::string> phantom = run;
        phantom.push_back("--phantom");
        std::vector<std::string> scaled = run;
        scaled.insert(scaled.end(), {"--byte_scale", "1024"});
        const std::string want = AlgoOf(phantom);
        SCOPED_TRACE(std::string(op) + " of " + bytes + " on " + ranks + " ranks");
        EXPECT_EQ(AlgoOf(run), want);
        EXPECT_EQ(AlgoOf(scaled), want);
      }
    }
  }
}

// Inputs that asked for unbounded memory, or for a run of nothing, are refused at once with
// gyre-sim's exit status for refused input, naming the flag and its bound.
TEST(GyreSimCli, InputsBeyondTheirBoundsAreRefusedNotRun) {
  const std::string sim = BuiltBinary("gyre-sim");
  const struct {
    std::vector<std::string> args;
    std::vector<std::string> says;
  } cases[] = {
      // Read as one endless line: gigabytes within seconds.
      {{"--mapping", "file:/dev/zero"},
       {"--mapping file:/dev/zero: ", "line 1 is longer than 4096 bytes"}},
      // Two links per leaf and spine, built before the run.
      {{"--topology", "fat_tree:2x8", "--ranks", "16", "--spines", "100000000"},
       {"--spines 100000000: want 1 to --ranks (16) spines"}},
      {{"--topology", "fat_tree:4096x1", "--ranks", "4096", "--spines", "4096"},
       {"--topology fat_tree:4096x1 --spines 4096: ", "leaf-spine cables, more than 1048576"}},
      // A scale above the count divided it to nothing: "time 0 ns ... result: ok".
      {{"--byte_scale", "9223372036854775807"},
       {"--byte_scale 9223372036854775807 is larger than --bytes 64M (16777216 elements)"}},
      {{"--count", "10", "--byte_scale", "11"},
       {"--byte_scale 11 is larger than --count 10 (10 elements)", "want at most 10"}},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {sim};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    CommandResult r = RunTool(argv, 20);
    EXPECT_FALSE(r.timed_out) << c.args[1];
    EXPECT_EQ(r.exit_code, 2) << c.args[1] << ": " << r.err;
    for (const std::string& part : c.says) {
      EXPECT_NE(r.err.find(part), std::string::npos) << "want: " << part << "\ngot: " << r.err;
    }
    EXPECT_LT(r.seconds, 5.0) << c.args[1];
  }
  // At the bounds the runs go ahead.
  for (const std::vector<std::string>& fits : std::vector<std::vector<std::string>>{
           {sim, "--count", "10", "--byte_scale", "10"},
           {sim, "--topology", "fat_tree:2x8", "--ranks", "16", "--spines", "16"},
       }) {
    CommandResult r = RunTool(fits);
    EXPECT_EQ(r.exit_code, 0) << fits[2] << ": " << r.err;
    EXPECT_NE(r.out.find("result: ok"), std::string::npos) << r.out;
  }
}

TEST(GyreScheduleCli, CostModelAndRankFlagsAreChecked) {
  const std::string schedule = BuiltBinary("gyre-schedule");
  ExpectRefused({schedule, "--gbps", "0"}, {"--gbps 0", "above 0"});
  ExpectRefused({schedule, "--gbps", "-5"}, {"--gbps -5"});
  ExpectRefused({schedule, "--gbps", "nan"}, {"--gbps nan"});
  ExpectRefused({schedule, "--alpha_us", "-1"}, {"--alpha_us -1"});
  ExpectRefused({schedule, "--rank", "7"}, {"--rank 7", "0 to 3"});
  ExpectRefused({schedule, "--rank", "-2"}, {"--rank -2"});
  ExpectRefused({schedule, "-p", "0"}, {"-p 0", "from 1 to 2048"});
  ExpectRefused({schedule, "-p", "100000"}, {"-p 100000", "from 1 to 2048"});
  CommandResult one = RunTool({schedule, "--rank", "3"});
  EXPECT_EQ(one.exit_code, 0) << one.err;
}

// Schedules too large to build, verify and print in memory (every rank's steps) are refused
// up front, where they ran the machine out of memory and aborted on bad_alloc.
TEST(GyreScheduleCli, SchedulesTooLargeToHoldAreRefusedAtOnce) {
  const std::string schedule = BuiltBinary("gyre-schedule");
  CommandResult pairwise = RunTool(
      {schedule, "--op", "alltoall", "-p", "2048", "--count", "1", "--algo", "pairwise"}, 30);
  EXPECT_EQ(pairwise.exit_code, 2) << pairwise.err;
  EXPECT_NE(pairwise.err.find("this schedule has about 8386560 steps (4095 on rank 0, times "
                              "2048 ranks); gyre-schedule builds, verifies and prints at most "
                              "1048576"),
            std::string::npos)
      << pairwise.err;
  EXPECT_LT(pairwise.seconds, 5.0);
  ExpectRefused({schedule, "--segment", "1", "--count", "1000000000", "-p", "4"},
                {"--segment 1 cuts --count 1000000000 into 1000000000 segments"});
  CommandResult fits =
      RunTool({schedule, "--op", "alltoall", "-p", "64", "--count", "1", "--algo", "pairwise"}, 30);
  EXPECT_EQ(fits.exit_code, 0) << fits.err;
}

TEST(GyreSimCli, StrayPositionalArgumentsAreRefused) {
  ExpectRefused({BuiltBinary("gyre-sim"), "extra"}, {"unexpected argument 'extra'"});
  ExpectRefused({BuiltBinary("gyre-schedule"), "extra", "positional"},
                {"unexpected argument 'extra'"});
}

TEST(GyreSimCli, OutputThatCannotBeWrittenIsAnError) {
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {BuiltBinary("gyre-schedule")},
           {BuiltBinary("gyre-sim"), "--ranks", "4", "--bytes", "1K"},
       }) {
    CommandResult r = RunToFullDisk(argv);
    EXPECT_FALSE(r.timed_out) << argv[0];
    EXPECT_NE(r.exit_code, 0) << argv[0] << ": " << r.err;
    EXPECT_NE(r.err.find("cannot write to stdout"), std::string::npos) << argv[0] << ": " << r.err;
  }
}

}  // namespace
}  // namespace gyre::testing
