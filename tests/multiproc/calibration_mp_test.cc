// Ranks given different calibrations (the cost model behind the automatic algorithm choice)
// would choose different algorithms for one call. Each rank a real process under gyrerun: such
// a job is refused when the ranks meet, on every rank and in both modes, naming the ranks and
// each one's calibration; ranks given the same calibration run as before.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace gyre::testing {
namespace {

std::string Gyrerun() { return BinDir() + "/gyrerun"; }
std::string Client() { return BinDir() + "/gyre-test-client"; }

void WriteFile(const std::string& path, const std::string& text, bool executable = false) {
  std::ofstream(path) << text;
  if (executable) ::chmod(path.c_str(), 0755);
}

// Two models that disagree on every automatic choice: rounds free, or rounds all that counts.
struct Calibrations {
  std::string dir, a, b;
};
Calibrations WriteCalibrations(const std::string& name) {
  Calibrations c;
  c.dir = EmptyTempDir(name);
  c.a = c.dir + "/calA.txt";
  c.b = c.dir + "/calB.txt";
  WriteFile(c.a, "cores = 2\np2.alpha_us = 0\np2.beta_GBps = 3\n");
  WriteFile(c.b, "cores = 2\np2.alpha_us = 1e6\np2.beta_GBps = 3\n");
  return c;
}

// An embedded job of 2 ranks whose rank 0 runs with `rank0_env` and rank 1 with `rank1_env`
// (shell assignments, or "unset GYRE_CALIBRATION"), each a short loop of automatic allreduces.
CommandResult RunEmbedded(const std::string& rank0_env, const std::string& rank1_env) {
  const std::string script = "if [ \"$GYRE_RANK\" = 0 ]; then " + rank0_env + "; else " +
                             rank1_env + "; fi; exec " + Client() + " --check=false --loop_iters=3";
  return RunCommand({Gyrerun(), "-n", "2", "--mode", "embedded", "--timeout", "10", "--", "/bin/sh",
                     "-c", script},
                    {}, 120);
}

// A daemon job of 2 ranks whose gyred is started with `rank0_flag` on rank 0 and `rank1_flag`
// on rank 1 (through gyrerun --gyred, a wrapper that adds them).
CommandResult RunDaemon(const std::string& dir, const std::string& rank0_flag,
                        const std::string& rank1_flag) {
  const std::string wrapper = dir + "/gyred-per-rank.sh";
  WriteFile(wrapper,
            "#!/bin/sh\nif [ \"$GYRE_RANK\" = 0 ]; then exec " + BinDir() + "/gyred " + rank0_flag +
                " \"$@\"; else exec " + BinDir() + "/gyred " + rank1_flag + " \"$@\"; fi\n",
            /*executable=*/true);
  return RunCommand({Gyrerun(), "-n", "2", "--mode", "daemon", "--timeout", "10", "--gyred",
                     wrapper, "--", Client(), "--check=false", "--loop_iters=3"},
                    {}, 120);
}

// The refusal, as every rank gives it.
std::string Refusal(const std::string& rank1_source, const std::string& rank0_source) {
  return "rank 1's cost model (" + rank1_source + ") differs from rank 0's (" + rank0_source +
         "): the ranks would choose different algorithms for the same call; give every rank the "
         "same calibration";
}

// Whether some line of `err` starts with `prefix` and holds `text` after it.
bool HasLine(const std::string& err, const std::string& prefix, const std::string& text) {
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) == 0 && line.find(text, prefix.size()) != std::string::npos) {
      return true;
    }
  }
  return false;
}

// Every rank's program fails creating its communicator with `refusal`, before any call.
void ExpectEmbeddedRefusal(const CommandResult& r, const std::string& refusal) {
  EXPECT_NE(r.exit_code, 0) << r.err;
  for (const std::string rank : {"0", "1"}) {
    EXPECT_TRUE(HasLine(
        r.err, "[rank " + rank + "] gyre-test-client: InvalidArgument: rank " + rank + " of job ",
        refusal))
        << "rank " << rank << ": " << r.err;
  }
  EXPECT_EQ(r.err.find("diverged"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("allreduce 0 failed"), std::string::npos) << r.err;
}

TEST(CalibrationAgreementTest, EmbeddedRanksWithDifferentFilesAreRefusedAtStart) {
  const Calibrations c = WriteCalibrations("gyre-calib-embedded");
  CommandResult r = RunEmbedded("export GYRE_CALIBRATION=" + c.a, "export GYRE_CALIBRATION=" + c.b);
  ASSERT_FALSE(r.timed_out) << r.err;
  ExpectEmbeddedRefusal(r, Refusal("calibration file " + c.b, "calibration file " + c.a));
}

TEST(CalibrationAgreementTest, EmbeddedRankWithAFileAndOneWithoutAreRefusedAtStart) {
  const Calibrations c = WriteCalibrations("gyre-calib-none");
  CommandResult r = RunEmbedded("export GYRE_CALIBRATION=" + c.b, "unset GYRE_CALIBRATION");
  ASSERT_FALSE(r.timed_out) << r.err;
  ExpectEmbeddedRefusal(
      r, Refusal("the built-in one, no calibration file", "calibration file " + c.b));
}

TEST(CalibrationAgreementTest, DaemonsWithDifferentFilesAreRefusedAtStart) {
  const Calibrations c = WriteCalibrations("gyre-calib-daemon");
  CommandResult r = RunDaemon(c.dir, "--calibration=" + c.a, "--calibration=" + c.b);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.exit_code, 0) << r.err;
  const std::string refusal = Refusal("calibration file " + c.b, "calibration file " + c.a);
  // Each rank's gyred fails joining with it.
  for (const std::string rank : {"0", "1"}) {
    EXPECT_TRUE(HasLine(r.err,
                        "[rank " + rank + " gyred] [rank " + rank +
                            "] gyred: InvalidArgument: rank " + rank + " of job ",
                        refusal))
        << "rank " << rank << ": " << r.err;
  }
  EXPECT_EQ(r.err.find("diverged"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("allreduce 0 failed"), std::string::npos) << r.err;
}

// The call defaults that shape every schedule are compared too: ranks whose segments differ
// failed each call as diverged or stalled, blaming a rank that had made no mistake.
TEST(CallDefaultsAgreementTest, EmbeddedRanksWithDifferentSegmentsAreRefusedAtStart) {
  CommandResult r = RunEmbedded("export GYRE_SEGMENT_BYTES=65536", "export GYRE_SEGMENT_BYTES=0");
  ASSERT_FALSE(r.timed_out) << r.err;
  ExpectEmbeddedRefusal(
      r,
      "rank 1's call defaults (segment_bytes=0 deterministic=0) differ from rank 0's "
      "(segment_bytes=65536 deterministic=0): the ranks would cut or order the same call "
      "differently and their messages would not match; give every rank the same --segment_bytes");
}

TEST(CallDefaultsAgreementTest, DaemonsThatDisagreeOnDeterminismAreRefusedAtStart) {
  const Calibrations c = WriteCalibrations("gyre-defaults-daemon");
  CommandResult r = RunDaemon(c.dir, "--deterministic=true", "--deterministic=false");
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_NE(r.exit_code, 0) << r.err;
  for (const std::string rank : {"0", "1"}) {
    EXPECT_TRUE(HasLine(r.err,
                        "[rank " + rank + " gyred] [rank " + rank +
                            "] gyred: InvalidArgument: rank " + rank + " of job ",
                        "rank 1's call defaults (segment_bytes=0 deterministic=0) differ from "
                        "rank 0's (segment_bytes=0 deterministic=1)"))
        << "rank " << rank << ": " << r.err;
  }
}

// Online tuning is part of the choice: a rank that tunes meets one that does not.
TEST(CalibrationAgreementTest, EmbeddedRanksThatDisagreeOnTuningAreRefusedAtStart) {
  CommandResult r = RunEmbedded("export GYRE_TUNE=1", "export GYRE_TUNE=0");
  ASSERT_FALSE(r.timed_out) << r.err;
  ExpectEmbeddedRefusal(r, Refusal("the built-in one, no calibration file",
                                   "the built-in one, no calibration file, online tuning"));
}

TEST(CalibrationAgreementTest, TheSameFileOnEveryRankRunsInBothModes) {
  const Calibrations c = WriteCalibrations("gyre-calib-same");
  for (const std::string& file : {c.a, c.b}) {
    CommandResult r =
        RunEmbedded("export GYRE_CALIBRATION=" + file, "export GYRE_CALIBRATION=" + file);
    EXPECT_EQ(r.exit_code, 0) << "embedded, " << file << ": " << r.err;
    r = RunDaemon(c.dir, "--calibration=" + file, "--calibration=" + file);
    EXPECT_EQ(r.exit_code, 0) << "daemon, " << file << ": " << r.err;
  }
}

}  // namespace
}  // namespace gyre::testing
