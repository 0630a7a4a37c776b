// gyrerun with ranks "on other hosts" that are this one: --rsh is a stand-in the test writes
// (a script that checks the host name it is given and runs the command here), or a command
// that runs nothing (`true`). Real processes on 127.0.0.1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace gyre::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Gyrerun() { return BinDir() + "/gyrerun"; }
std::string Client() { return BinDir() + "/gyre-test-client"; }

// Ranks on "other hosts" here meet over loopback.
const std::vector<std::string> kLoopback = {"--ifaces", "lo", "--allow_loopback"};

std::vector<std::string> Args(std::vector<std::string> head, const std::vector<std::string>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

// An executable script in a fresh folder: a remote shell stand-in that runs its command here
// when the host it is given is one of `hosts`, and fails as ssh does (255) otherwise.
std::string FakeRsh(const std::string& name, const std::string& hosts) {
  const std::string dir = MakeTempDir("gyre-rsh");
  const std::string path = dir + "/" + name;
  std::ofstream f(path);
  f << "#!/bin/sh\n"
    << "case \"$1\" in " << hosts << ") ;; *) echo \"no host $1\" >&2; exit 255;; esac\n"
    << "shift\nexec \"$@\"\n";
  f.close();
  ::chmod(path.c_str(), 0755);
  return path;
}

// F7: a remote shell that does not run the command "exits 0" for every remote gyred at once,
// and no rank ever claimed its slot. The job fails, naming the rank and --rsh.
TEST(GyrerunRemoteTest, ARemoteShellThatRunsNothingFailsTheJob) {
  for (const std::vector<std::string>& what :
       {std::vector<std::string>{"--", Client()}, std::vector<std::string>{"--run", "selftest"}}) {
    CommandResult r = RunCommand(
        Args(Args({Gyrerun(), "--hosts", "fakehost:2", "--rsh", "true"}, kLoopback), what), {}, 60);
    ASSERT_FALSE(r.timed_out) << r.err;
    EXPECT_EQ(r.exit_code, 1) << what[1] << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("gyrerun: job failed: fakehost rank "));
    EXPECT_THAT(r.err, HasSubstr("exited with code 0 after "));
    EXPECT_THAT(r.err, HasSubstr("before joining the job: gyrerun's store saw no claim of rank "));
    EXPECT_THAT(r.err, HasSubstr("'s rendezvous slot, so its gyred never ran or never reached the "
                                 "rendezvous: is --rsh running the command? (--rsh 'true')\n"));
  }
}

// One rank here, one behind a remote shell that runs nothing: the job fails at once rather
// than when the rank here gives up waiting for the other at the rendezvous.
TEST(GyrerunRemoteTest, AMissingRemoteRankFailsTheJobBeforeTheRendezvousTimesOut) {
  CommandResult r = RunCommand(Args(Args({Gyrerun(), "--hosts", "localhost:1,fakehost:1", "--rsh",
                                          "true", "--rendezvous_timeout", "60"},
                                         kLoopback),
                                    {"--", Client()}),
                               {}, 90);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("gyrerun: job failed: fakehost rank 1 gyred (pid "));
  EXPECT_THAT(r.err, HasSubstr("saw no claim of rank 1's rendezvous slot"));
  EXPECT_LT(r.seconds, 30) << r.err;
}

// A remote shell that runs the command: gyreds that joined and exited 0 pass, in daemon mode
// and with gyrerun's own workload; the ranks are on the hosts the stand-in was given.
TEST(GyrerunRemoteTest, ARemoteShellThatRunsTheCommandPasses) {
  const std::string rsh = FakeRsh("fake-rsh", "fakehost0|fakehost1");
  CommandResult r = RunCommand(
      Args(Args({Gyrerun(), "--hosts", "fakehost0:1,fakehost1:1", "--rsh", rsh}, kLoopback),
           {"--", Client()}),
      {}, 120);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[fakehost1 rank 1] "));
  EXPECT_THAT(r.out, HasSubstr("rank 1: all collectives ok"));
  r = RunCommand(
      Args({Gyrerun(), "--hosts", "fakehost0:1,fakehost1:1", "--rsh", rsh, "--run", "selftest"},
           kLoopback),
      {}, 120);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("selftest: all checks passed"));
}

// --rsh is split as a shell splits words: a quoted word with blanks reaches the remote shell
// whole (the stand-in runs the command only when its first word is exactly "two words"); an
// unterminated quote is a usage error that names it.
TEST(GyrerunRemoteTest, RshIsSplitHonouringQuotes) {
  const std::string dir = MakeTempDir("gyre-rsh-quoted");
  const std::string rsh = dir + "/remote-shell";  // not "ssh" or "rsh": words go unquoted
  std::ofstream f(rsh);
  f << "#!/bin/sh\n"
    << "[ \"$1\" = 'two words' ] || { echo \"first word: $1\" >&2; exit 9; }\n"
    << "shift 2\nexec \"$@\"\n";
  f.close();
  ::chmod(rsh.c_str(), 0755);
  CommandResult r = RunCommand(Args(Args({Gyrerun(), "--hosts", "fakehost:1", "--rsh",
                                          rsh + " 'two words'", "--mode", "embedded"},
                                         kLoopback),
                                    {"--", "sh", "-c", "echo ran on $GYRE_HOST"}),
                               {}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[fakehost rank 0] ran on fakehost\n"));
  r = RunCommand({Gyrerun(), "--hosts", "fakehost:1", "--rsh", "sh -c \"exit 0", "--", "true"}, {},
                 30);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("gyrerun: --rsh 'sh -c \"exit 0': unterminated double quote: the "
                               "\" at byte 6 has no closing \"\n"));
}

// A program may rightly end without using gyre: its exit 0 is not questioned, here or behind
// --rsh (where a shell that ran nothing looks the same: only a gyred's exit is known to come
// after joining).
TEST(GyrerunRemoteTest, AProgramThatNeverUsesGyreStillPasses) {
  for (const char* mode : {"daemon", "embedded"}) {
    CommandResult r = RunCommand({Gyrerun(), "-n", "2", "--mode", mode, "--", "true"}, {}, 60);
    EXPECT_EQ(r.exit_code, 0) << mode << "\n" << r.err;
    EXPECT_THAT(r.err, Not(HasSubstr("job failed"))) << mode;
  }
  CommandResult r = RunCommand(
      Args(Args({Gyrerun(), "--hosts", "fakehost:2", "--rsh", "true", "--mode", "embedded"},
                kLoopback),
           {"--", Client()}),
      {}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
}  // namespace gyre::testing
