// The example programs' command lines. --help (or -h) prints the example's usage and its own
// flags and exits 0 without joining a job. Bad flags and stray arguments are refused by name
// with exit code 2 before the program allocates or joins anything, instead of aborting on
// std::length_error (a negative count), reporting a meaningless ratio (0 bytes per tensor) or
// running a job the user did not ask for.
#include <dirent.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/tools/cli_test_util.h"

namespace gyre::testing {
namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

// The environment of rank 0 of a two-rank embedded job whose store is `store_dir`: a program
// that joined would write its claim there and then wait in the rendezvous for rank 1, which
// never comes, for 3 s before failing.
Env WaitingJobEnv(const std::string& store_dir) {
  return {{"GYRE_MODE", "embedded"},      {"GYRE_RANK", "0"},
          {"GYRE_WORLD_SIZE", "2"},       {"GYRE_STORE", "file://" + store_dir},
          {"GYRE_JOB_ID", "example-cli"}, {"GYRE_RENDEZVOUS_TIMEOUT_MS", "3000"}};
}

// True when nothing was written at `dir`: it does not exist, or it is empty.
bool NothingWrittenAt(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return true;
  int entries = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") ++entries;
  }
  ::closedir(d);
  return entries == 0;
}

size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

struct Example {
  std::string name;
  std::string usage_part;          // from its usage message
  std::vector<std::string> flags;  // flags it defines, as --help prints them
};

TEST(ExampleHelpTest, HelpListsTheExamplesOwnFlagsAndJoinsNoJob) {
  for (const Example& ex : std::vector<Example>{
           {"gyre-example-sgd", "data-parallel SGD", {"-steps", "-samples_per_rank"}},
           {"gyre-example-fusion",
            "fusion and overlap",
            {"-tensors", "-tensor_bytes", "-layers", "-iters"}},
       }) {
    for (const char* ask : {"--help", "-h"}) {
      SCOPED_TRACE(ex.name + " " + ask);
      const std::string store = EmptyTempDir("example-help") + "/store";
      CommandResult r = RunCommand({BuiltBinary(ex.name), ask}, WaitingJobEnv(store), 15);
      EXPECT_FALSE(r.timed_out);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(r.err, "");
      // The usage first, then the example's own flags, each once.
      EXPECT_LT(r.out.find(ex.usage_part), r.out.find("Flags from examples/")) << r.out;
      for (const std::string& flag : ex.flags) {
        EXPECT_EQ(Count(r.out, "\n    " + flag + " ("), 1u) << flag << "\n" << r.out;
      }
      EXPECT_NE(r.out.find("--helpfull"), std::string::npos) << r.out;
      // Not glog's and gflags' flags, nor gflags' complaint about a missing usage message.
      EXPECT_EQ(r.out.find("logtostderr"), std::string::npos) << r.out;
      EXPECT_EQ(r.out.find("SetUsageMessage"), std::string::npos) << r.out;
      EXPECT_TRUE(NothingWrittenAt(store)) << "it joined the job at " << store;
    }
  }
}

struct BadArgs {
  std::vector<std::string> args;
  std::vector<std::string> parts;
};

// gyre-example-sgd took no flags and ignored every argument: `--steps=-5 garbage` and even
// --help joined the job. Now each bad argument is refused, on one line, before any job.
TEST(SgdExampleFlagsTest, EveryBadArgumentIsNamedWithExitCodeTwoBeforeJoining) {
  const std::string sgd = BuiltBinary("gyre-example-sgd");
  for (const BadArgs& c : std::vector<BadArgs>{
           {{"--steps=-5", "garbage"}, {"unexpected argument 'garbage'", "takes flags only"}},
           {{"garbage"}, {"unexpected argument 'garbage'"}},
           {{"--steps=-5"}, {"--steps -5", "steps from 1 to 1000000"}},
           {{"--steps", "0"}, {"--steps 0", "from 1 to 1000000"}},
           {{"--steps", "1000001"}, {"--steps 1000001", "from 1 to 1000000"}},
           {{"--samples_per_rank", "-256"}, {"--samples_per_rank -256", "samples from 1 to"}},
           {{"--samples_per_rank", "0"}, {"--samples_per_rank 0", "from 1 to 100000"}},
           {{"--samples_per_rank", "100001"}, {"--samples_per_rank 100001", "from 1 to 100000"}},
       }) {
    SCOPED_TRACE(c.args[0]);
    const std::string store = EmptyTempDir("example-sgd-bad") + "/store";
    std::vector<std::string> argv = {sgd};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    CommandResult r = RunCommand(argv, WaitingJobEnv(store), 15);
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err.rfind("gyre-example-sgd: ", 0), 0u) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
    for (const std::string& p : c.parts) {
      EXPECT_NE(r.err.find(p), std::string::npos) << "want: " << p << "\ngot: " << r.err;
    }
    EXPECT_EQ(r.out, "");
    EXPECT_TRUE(NothingWrittenAt(store)) << "it joined the job at " << store;
  }
}

// The flags are the run's: a one-rank job trains for --steps steps on --samples_per_rank
// samples and still matches single-process training.
TEST(SgdExampleFlagsTest, TheRunUsesTheFlags) {
  const std::string store = EmptyTempDir("example-sgd-run") + "/store";
  CommandResult r =
      RunCommand({BuiltBinary("gyre-example-sgd"), "--steps", "3", "--samples_per_rank", "16"},
                 {{"GYRE_MODE", "embedded"},
                  {"GYRE_RANK", "0"},
                  {"GYRE_WORLD_SIZE", "1"},
                  {"GYRE_STORE", "file://" + store},
                  {"GYRE_JOB_ID", "example-sgd-run"}},
                 30);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("sgd: 1 ranks x 16 samples, 3 steps, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("matches single-process training"), std::string::npos) << r.out;
}

struct BadFlags {
  std::vector<std::string> flags;
  std::vector<std::string> parts;
};

// gyre-example-fusion's flags, each outside its range.
TEST(FusionExampleFlagsTest, EveryBadFlagIsNamedWithExitCodeTwo) {
  const std::string fusion = BuiltBinary("gyre-example-fusion");
  for (const BadFlags& c : std::vector<BadFlags>{
           {{"--tensors", "-3", "--layers", "-1", "--grad_bytes", "-4"},
            {"--tensors -3", "from 1 to 1000000"}},
           {{"--layers", "-1"}, {"--layers -1", "layers from 1 to 100000"}},
           {{"--grad_bytes", "-4"}, {"--grad_bytes -4", "from 4 to 1073741824", "multiple of 4"}},
           {{"--tensor_bytes", "0"}, {"--tensor_bytes 0", "from 4 to"}},
           {{"--tensor_bytes", "6"}, {"--tensor_bytes 6", "a multiple of 4"}},
           {{"--bucket_bytes", "0"}, {"--bucket_bytes 0"}},
           {{"--overlap_bucket_bytes", "-1"}, {"--overlap_bucket_bytes -1"}},
           {{"--iters", "0"}, {"--iters 0", "repetitions from 1"}},
           {{"--compute_passes", "-1"}, {"--compute_passes -1", "from 0 to"}},
           {{"--tensors", "1000000", "--tensor_bytes", "1048576"},
            {"--tensors 1000000 of --tensor_bytes 1048576 hold more than 4294967296 bytes"}},
           {{"--layers", "100", "--grad_bytes", "1073741824"}, {"--layers 100 of --grad_bytes"}},
           {{"stray"}, {"unexpected argument 'stray'", "takes flags only"}},
       }) {
    std::vector<std::string> argv = {fusion};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    CommandResult r = RunTool(argv, 30);
    EXPECT_FALSE(r.timed_out) << c.flags[0];
    EXPECT_EQ(r.exit_code, 2) << c.flags[0] << ": " << r.err;
    EXPECT_NE(r.err.find("gyre-example-fusion: "), std::string::npos) << r.err;
    for (const std::string& p : c.parts) {
      EXPECT_NE(r.err.find(p), std::string::npos) << "want: " << p << "\ngot: " << r.err;
    }
    EXPECT_EQ(r.out, "") << c.flags[0];
  }
}

}  // namespace
}  // namespace gyre::testing
