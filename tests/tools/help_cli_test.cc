// Every gyre program's --help: its usage and its own flags, on stdout with exit 0, without
// glog's and gflags' flags in the way (those are behind --helpfull). -h means --help.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/tools/cli_test_util.h"

namespace gyre::testing {
namespace {

struct Tool {
  std::string name;
  std::string usage_part;  // from its usage message
  std::string flag;        // one flag the program defines, as --help prints it
};

const std::vector<Tool>& Tools() {
  static const std::vector<Tool> tools = {
      {"gyrerun", "gyrerun -n N", "-job_timeout"},
      {"gyred", "one rank of a gyre job", "-world_size"},
      {"gyre-bench", "gyre-bench [-b 4]", "-calibrate"},
      {"gyre-sim", "modelled network", "-topology"},
      {"gyre-schedule", "one collective's schedule", "-alpha_us"},
      {"gyrectl", "gyrectl status|dump|timeline", "-job_id"},
      {"gyre-store", "rendezvous store", "-port"},
  };
  return tools;
}

size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(ToolHelp, HelpListsTheProgramsOwnFlagsOnly) {
  for (const Tool& tool : Tools()) {
    for (const char* ask : {"--help", "-h"}) {
      SCOPED_TRACE(tool.name + " " + ask);
      CommandResult r = RunTool({BuiltBinary(tool.name), ask});
      EXPECT_FALSE(r.timed_out);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      // The usage comes first.
      EXPECT_LT(r.out.find(tool.usage_part), r.out.find("Flags from")) << r.out;
      EXPECT_EQ(Count(r.out, "\n    " + tool.flag + " ("), 1u) << r.out;
      EXPECT_NE(r.out.find("--helpfull"), std::string::npos) << r.out;
      // glog's and gflags' own flags stay out of --help.
      EXPECT_EQ(r.out.find("logtostderr"), std::string::npos) << r.out;
      EXPECT_EQ(r.out.find("-flagfile"), std::string::npos) << r.out;
      EXPECT_EQ(r.out.find("gflags.cc"), std::string::npos) << r.out;
    }
  }
}

TEST(ToolHelp, HelpfullStillListsEveryFlag) {
  for (const Tool& tool : Tools()) {
    SCOPED_TRACE(tool.name);
    CommandResult r = RunTool({BuiltBinary(tool.name), "--helpfull"});
    EXPECT_FALSE(r.timed_out);
    EXPECT_NE(r.out.find("-flagfile"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(tool.flag + " ("), std::string::npos) << r.out;
  }
}

// A rank's stdin is /dev/null, which a user piping input into gyrerun could not tell from
// anything gyrerun said: --help says so (and the README's gyrerun section).
TEST(ToolHelp, GyrerunsHelpSaysARanksStdinIsDevNull) {
  CommandResult help = RunTool({BuiltBinary("gyrerun"), "--help"});
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("Every rank's stdin is /dev/null"), std::string::npos) << help.out;
  EXPECT_LT(help.out.find("stdin"), help.out.find("Flags from")) << help.out;
  // As it says: what is piped into gyrerun reaches no rank.
  CommandResult piped = RunTool({"/bin/sh", "-c",
                                 "echo piped-in | exec \"$0\" -n 2 --mode embedded -- /bin/sh -c "
                                 "'readlink /proc/self/fd/0; cat'",
                                 BuiltBinary("gyrerun")},
                                90);
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_NE(piped.out.find("[rank 0] /dev/null\n"), std::string::npos) << piped.out;
  EXPECT_NE(piped.out.find("[rank 1] /dev/null\n"), std::string::npos) << piped.out;
  EXPECT_EQ(piped.out.find("piped-in"), std::string::npos) << piped.out;
}

TEST(ToolHelp, HelpAfterTheProgramBelongsToTheProgram) {
  // gyrerun's own flags end where the program starts: `-h` after it is the program's.
  CommandResult r = RunTool({BuiltBinary("gyrerun"), "-n", "1", "--mode", "embedded",
                             "--job_timeout", "60", "--", "/bin/echo", "-h"},
                            90);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("-h"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("-job_timeout"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace gyre::testing
