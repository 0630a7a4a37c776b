// gyred checks its own flags before it joins its job: a bad duration, --run, --metrics_port or
// --trace_jsonl is named and the rank exits 1 without claiming its slot in the store, so the
// next run of the same job id still works. And a built-in workload (--run main | bench) stops
// promptly on SIGTERM or SIGINT with exit 128 + the signal, keeping the report so far.
// Runs the real build/bin/gyred as a one-rank job on a FileStore folder.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "tests/support/subprocess.h"

namespace gyre {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using testing::ReadAll;
using testing::WaitExit;

std::string GyredBinary() { return testing::BuiltBinary("gyred"); }
pid_t StartGyred(const std::vector<std::string>& flags, const std::string& log) {
  return testing::StartLogged(GyredBinary(), flags, log);
}

class GyredFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::access(GyredBinary().c_str(), X_OK), 0) << GyredBinary() << ": build gyred";
    dir_ = testing::MakeTempDir("gyred_flags");
    ASSERT_FALSE(dir_.empty()) << std::strerror(errno);
  }
  void TearDown() override { EXPECT_TRUE(testing::RemoveTree(dir_)); }
  // A one-rank job on this test's store folder, with `extra` flags last (they win).
  std::vector<std::string> OneRank(const std::string& job_id, const std::string& run,
                                   const std::vector<std::string>& extra) const {
    std::vector<std::string> flags = {"--rank=0",
                                      "--world_size=1",
                                      "--store=file://" + dir_ + "/store",
                                      "--job_id=" + job_id,
                                      "--run=" + run,
                                      "--timeout=10",
                                      "--rendezvous_timeout=10"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    return flags;
  }
  std::string dir_;
};

struct BadFlag {
  std::string flag, value, shown;  // `shown`: how the message prints the value
};

TEST_F(GyredFlagsTest, BadFlagIsNamedBeforeJoiningAndLeavesTheJobIdUsable) {
  const std::vector<BadFlag> cases = {
      {"--timeout", "0", "0"},
      {"--timeout", "-1", "-1"},
      {"--timeout", "nan", "nan"},
      {"--timeout", "inf", "inf"},
      {"--timeout", "1e300", "1e+300"},
      {"--rendezvous_timeout", "0", "0"},
      {"--rendezvous_timeout", "-1", "-1"},
      {"--rendezvous_timeout", "nan", "nan"},
      {"--linger_after_failure", "-1", "-1"},
      {"--segment_bytes", "-1", "-1"},
      {"--metrics_port", "70000", "70000"},
      {"--metrics_port", "-2", "-2"},
      {"--run", "bogus", "'bogus'"},
      {"--timing_runs", "-3", "-3"},
      {"--flight_dir", "/dev/null", "/dev/null is not a folder"},
      // Found out only after the whole workload, with no reason given.
      {"--report_file", "/", "/ is a directory"},
      {"--report_file", "/nonexistent-gyre-dir/r.txt",
       "/nonexistent-gyre-dir/r.txt cannot be created: /nonexistent-gyre-dir: No such file or "
       "directory"},
      {"--bench_max_bytes", "3", "3"},
      // Past a quarter of any host's memory: it was killed by the OOM killer.
      {"--bench_max_bytes", "99999999999999", "99999999999999"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const BadFlag& c = cases[i];
    SCOPED_TRACE(c.flag + "=" + c.value);
    const std::string job = "bad" + std::to_string(i);
    const std::string log = dir_ + "/" + job + ".log";
    const int code =
        WaitExit(StartGyred(OneRank(job, "selftest", {c.flag + "=" + c.value}), log), Seconds(30));
    const std::string text = ReadAll(log);
    EXPECT_EQ(code, 1) << text;
    EXPECT_THAT(text, HasSubstr("[rank 0] gyred: InvalidArgument: " + c.flag + " " + c.shown));
    EXPECT_THAT(text, Not(HasSubstr("joined as pid"))) << "it joined the job before refusing";
    // The refused rank left no claim behind: the same job id runs.
    const std::string again = dir_ + "/" + job + ".again.log";
    EXPECT_EQ(WaitExit(StartGyred(OneRank(job, "selftest", {}), again), Seconds(60)), 0)
        << ReadAll(again);
  }
}

// A negative rank or world size was taken as "from the environment", and the error then
// said the rank could not be told.
TEST_F(GyredFlagsTest, ANegativeRankOrWorldSizeIsNamed) {
  for (const auto& [flag, want] : std::vector<std::pair<std::string, std::string>>{
           {"--rank=-5", "--rank -5 must be 0 or more"},
           {"--world_size=-3", "--world_size -3 must be 1 or more"},
           {"--world_size=0", "--world_size 0 must be 1 or more"}}) {
    const std::string log = dir_ + "/negative.log";
    EXPECT_EQ(WaitExit(StartGyred(OneRank("negative", "selftest", {flag}), log), Seconds(30)), 1);
    EXPECT_THAT(ReadAll(log), HasSubstr("gyred: InvalidArgument: " + want)) << flag;
  }
}

TEST_F(GyredFlagsTest, TraceFileThatCannotBeOpenedIsNamed) {
  ASSERT_EQ(::mkdir((dir_ + "/folder").c_str(), 0700), 0);
  // A FIFO nobody reads blocked gyred in its check for good.
  ASSERT_EQ(::mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dir_ + "/missing/trace.jsonl", "No such file or directory"},
      {dir_ + "/folder", "Is a directory"},
      {dir_ + "/fifo", "it is a FIFO that no process reads"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& [path, error] = cases[i];
    SCOPED_TRACE(path);
    const std::string log = dir_ + "/trace" + std::to_string(i) + ".log";
    const int code = WaitExit(
        StartGyred(OneRank("trace" + std::to_string(i), "selftest", {"--trace_jsonl=" + path}),
                   log),
        Seconds(30));
    const std::string text = ReadAll(log);
    EXPECT_EQ(code, 1) << text;
    EXPECT_THAT(text, HasSubstr("[rank 0] gyred: InvalidArgument: --trace_jsonl " + path));
    EXPECT_THAT(text, HasSubstr(error));
    EXPECT_THAT(text, Not(HasSubstr("joined as pid")));
  }
}

// A trace that opens but cannot be written (a full disk): the calls go on and succeed, and
// the log says so at the first lost record and counts them at the end.
TEST_F(GyredFlagsTest, TraceOnAFullDiskIsReportedAndTheCallsGoOn) {
  const std::string log = dir_ + "/full.log";
  const int code = WaitExit(
      StartGyred(OneRank("tracefull", "selftest", {"--trace_jsonl=/dev/full"}), log), Seconds(60));
  const std::string text = ReadAll(log);
  EXPECT_EQ(code, 0) << text;
  EXPECT_THAT(text, HasSubstr("selftest: all checks passed"));
  EXPECT_THAT(text, HasSubstr("rank 0: --trace_jsonl /dev/full: cannot write a record: No space "
                              "left on device"));
  EXPECT_TRUE(std::regex_search(
      text, std::regex(R"(--trace_jsonl /dev/full: (\d+) of \1 records could not be written)")))
      << text;
}

// The report of `--run selftest` is the run's result: one that cannot reach stdout (a full
// disk) fails the run, naming stdout, instead of exiting 0 without it.
TEST_F(GyredFlagsTest, ReportOnAFullStdoutFailsTheRun) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" >/dev/full", GyredBinary()};
  for (const std::string& flag : OneRank("fullstdout", "selftest", {})) argv.push_back(flag);
  const testing::CommandResult r = testing::RunCommand(argv, {}, 60);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("[rank 0] gyred: ResourceExhausted: cannot write to stdout: No "
                               "space left on device"));
}

struct StopCase {
  std::string run;
  std::vector<std::string> flags;
  int signal_number;
  std::string signal_name;
  std::string report_start;  // a line the report had before the signal
};

void PrintTo(const StopCase& c, std::ostream* os) { *os << c.run << " " << c.signal_name; }

class GyredStopTest : public GyredFlagsTest, public ::testing::WithParamInterface<StopCase> {};

TEST_P(GyredStopTest, WorkloadStopsOnTheSignalAndKeepsItsReport) {
  const StopCase& c = GetParam();
  const std::string log = dir_ + "/stop.log";
  const pid_t pid = StartGyred(OneRank("stop", c.run, c.flags), log);
  // Signal it once it runs the workload (before that the default action would end it).
  const TimePoint joined_by = SteadyClock::Get()->Now() + Seconds(30);
  while (ReadAll(log).find("joined as pid") == std::string::npos &&
         SteadyClock::Get()->Now() < joined_by) {
    ::usleep(10000);
  }
  ASSERT_THAT(ReadAll(log), HasSubstr("joined as pid"));
  // The handler is installed right after that line; the bench runs for about 0.5 s more.
  ::usleep(50000);
  ASSERT_EQ(::kill(pid, c.signal_number), 0);
  const TimePoint signalled = SteadyClock::Get()->Now();
  const int code = WaitExit(pid, Seconds(10));
  const double took = std::chrono::duration<double>(SteadyClock::Get()->Now() - signalled).count();
  const std::string text = ReadAll(log);
  EXPECT_EQ(code, 128 + c.signal_number) << text;
  EXPECT_LT(took, 5.0) << text;
  EXPECT_THAT(text, HasSubstr(c.report_start));
  EXPECT_THAT(
      text, HasSubstr("--run " + c.run + ": stopped by " + c.signal_name + " before it finished"));
  EXPECT_THAT(text, HasSubstr("[rank 0] gyred: --run " + c.run + " stopped by " + c.signal_name));
}

INSTANTIATE_TEST_SUITE_P(
    Workloads, GyredStopTest,
    ::testing::Values(
        // So many timed runs that it would go on for hours.
        StopCase{"main", {"--timing_runs=100000000"}, SIGTERM, "SIGTERM", "gyre main job: "},
        StopCase{"main", {"--timing_runs=100000000"}, SIGINT, "SIGINT", "gyre main job: "},
        // Half a second of cells here: it would finish with 0 instead.
        StopCase{"bench", {}, SIGTERM, "SIGTERM", "gyred --run bench"}),
    [](const ::testing::TestParamInfo<StopCase>& info) {
      return info.param.run + "_" + info.param.signal_name;
    });

}  // namespace
}  // namespace gyre
