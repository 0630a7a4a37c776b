#include "launcher/signal_name.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace gyre::launcher {
namespace {

TEST(SignalNameTest, NamesCommonSignals) {
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalName(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(SignalName(SIGABRT), "SIGABRT");
  EXPECT_EQ(SignalName(SIGRTMIN), "SIGRTMIN");
  EXPECT_EQ(SignalName(SIGRTMIN + 2), "SIGRTMIN+2");
  EXPECT_EQ(SignalName(200), "SIG?(200)");
}

TEST(SignalNameTest, ParsesNamesAndNumbers) {
  EXPECT_EQ(SignalFromName("SIGKILL"), SIGKILL);
  EXPECT_EQ(SignalFromName("KILL"), SIGKILL);
  EXPECT_EQ(SignalFromName("term"), SIGTERM);
  EXPECT_EQ(SignalFromName("9"), 9);
  EXPECT_EQ(SignalFromName("SIGRTMIN+1"), SIGRTMIN + 1);
  EXPECT_EQ(SignalFromName("SIGIOT"), SIGABRT);
  EXPECT_FALSE(SignalFromName(""));
  EXPECT_FALSE(SignalFromName("0"));
  EXPECT_FALSE(SignalFromName("9x"));
  EXPECT_FALSE(SignalFromName("SIGNOPE"));
  EXPECT_FALSE(SignalFromName("1000"));
}

TEST(SignalNameTest, RoundTrips) {
  for (int sig = 1; sig <= SIGRTMAX; ++sig) {
    if (sig > SIGSYS && sig < SIGRTMIN) continue;  // reserved by the C library
    EXPECT_EQ(SignalFromName(SignalName(sig)), sig) << SignalName(sig);
  }
}

}  // namespace
}  // namespace gyre::launcher
