// gyrectl given bad input: --timeout out of range, a store folder that does not exist
// (named, and not created) and stray arguments are refused by name.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/base/clock.h"
#include "core/store/rendezvous.h"
#include "core/store/store.h"
#include "tests/support/loopback_listener.h"
#include "tests/tools/cli_test_util.h"

namespace gyre::testing {
namespace {

TEST(GyrectlCli, TimeoutOutsideItsRangeIsRefused) {
  const std::string store = "file://" + EmptyTempDir("gyrectl-timeout");
  for (const char* t : {"0", "-1", "nan", "1e+300", "inf"}) {
    ExpectRefused(
        {BuiltBinary("gyrectl"), "status", "--store", store, "--job_id", "j", "--timeout", t},
        {std::string("--timeout ") + t, "from 0.05 to 3600 seconds"});
  }
}

// A wait shorter than a healthy rank may need to answer showed healthy ranks of a live job
// as "silent ... (stopped or frozen)". Such a --timeout is refused, saying why, before the
// store is opened; the floor itself is accepted.
TEST(GyrectlCli, TimeoutTooShortToHearAHealthyRankIsRefused) {
  const std::string store = "file://" + EmptyTempDir("gyrectl-short");
  for (const char* cmd : {"status", "dump"}) {
    for (const char* t : {"0.001", "0.01", "0.049"}) {
      SCOPED_TRACE(std::string(cmd) + " --timeout " + t);
      CommandResult r =
          RunTool({BuiltBinary("gyrectl"), cmd, "--store", store, "--job_id", "j", "--timeout", t});
      EXPECT_FALSE(r.timed_out);
      EXPECT_EQ(r.exit_code, 2) << r.err;
      EXPECT_NE(r.err.find(std::string("gyrectl: --timeout ") + t +
                           " must be from 0.05 to 3600 seconds: a healthy rank may take tens of "
                           "ms to answer"),
                std::string::npos)
          << r.err;
      EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
      EXPECT_EQ(r.err.find("no rank of job"), std::string::npos) << r.err;
      EXPECT_EQ(r.out, "");
    }
  }
  // At the floor the flag is taken: gyrectl goes on to the (empty) store.
  CommandResult r = RunTool(
      {BuiltBinary("gyrectl"), "status", "--store", store, "--job_id", "j", "--timeout", "0.05"});
  EXPECT_EQ(r.err.find("--timeout"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no rank of job j has published a control address"), std::string::npos)
      << r.err;
}

TEST(GyrectlCli, MissingStoreFolderIsNamedAndNotCreated) {
  const std::string base = EmptyTempDir("gyrectl-missing");
  const std::string dir = base + "/a/b/c";
  for (const char* cmd : {"status", "dump", "timeline"}) {
    ExpectRefused({BuiltBinary("gyrectl"), cmd, "--store", "file://" + dir, "--job_id", "x",
                   "--out", base + "/out.json"},
                  {dir, "No such file or directory"});
    struct stat st;
    EXPECT_NE(::stat((base + "/a").c_str(), &st), 0) << cmd << " created " << base << "/a";
  }
}

// A control record overwritten with garbage is shown escaped (not written raw onto the
// terminal), and a timeline with no rank answering is a failure, not an empty file "written".
TEST(GyrectlCli, AGarbageRecordIsShownEscapedAndAnEmptyTimelineFails) {
  const std::string dir = EmptyTempDir("gyrectl-garbage");
  {
    std::ofstream f(dir + "/k.gyre%2Fcontrol%2Fj%2F0", std::ios::binary);
    f << std::string("\x01gar\x1b[31mbage\xff:99");
  }
  const std::string store = "file://" + dir;
  CommandResult status =
      RunTool({BuiltBinary("gyrectl"), "status", "--store", store, "--job_id", "j"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("'\\x01gar\\x1b[31mbage\\xff:99' is not an IPv4 host:port"),
            std::string::npos)
      << status.out;
  EXPECT_EQ(status.out.find('\x1b'), std::string::npos) << "a raw escape byte was printed";
  ExpectRefused({BuiltBinary("gyrectl"), "timeline", "--store", store, "--job_id", "j", "--out",
                 dir + "/timeline.json"},
                {"rank 0 did not answer", "no rank answered"});
}

// Ranks in the rendezvous that have published no control address yet (a rank publishes it
// once it holds its slot; here the test plays the ranks through the store and publishes
// none), then a job where one rank has published one and another has not: gyrectl says
// what the rendezvous shows instead of "no rank has started".
TEST(GyrectlCli, RanksWithoutAControlAddressAreExplainedFromTheRendezvous) {
  const std::string dir = EmptyTempDir("gyrectl-noaddr");
  const std::string url = "file://" + dir;
  auto enter = [&url](const std::string& job, int rank, int world, double seconds) {
    return std::thread([=] {
      const Deadline deadline = Deadline::After(*SteadyClock::Get(), Seconds(seconds));
      auto store = store::OpenStore(url, deadline);
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      store::PeerRecord me;
      me.rank = rank;
      me.world_size = world;
      me.address = "127.0.0.1:1";
      me.host = "h";
      me.pid = 1;
      // Ranks 0 and 2 of three wait for rank 1 until the deadline; a complete world meets.
      (void)store::Rendezvous(store->get(), job, me, deadline);
    });
  };
  auto status = [&url](const std::string& job) {
    return RunTool({BuiltBinary("gyrectl"), "status", "--store", url, "--job_id", job});
  };
  auto wait_for = [&status](const std::string& job, const std::string& text) {
    CommandResult r;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    do {
      r = status(job);
      if ((r.out + r.err).find(text) != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (std::chrono::steady_clock::now() < give_up);
    return r;
  };

  std::vector<std::thread> ranks;
  ranks.push_back(enter("waits", 0, 3, 8));
  ranks.push_back(enter("waits", 2, 3, 8));
  CommandResult r = wait_for("waits", "(its rendezvous has 2 of 3 ranks)");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no rank of job waits has published a control address in " + url +
                       " (its rendezvous has 2 of 3 ranks)"),
            std::string::npos)
      << r.err;

  // A complete world of two: rank 0 has a control address (nothing answers there), rank 1
  // has none yet.
  ranks.push_back(enter("half", 0, 2, 8));
  ranks.push_back(enter("half", 1, 2, 8));
  {
    auto store = store::OpenStore(url, Deadline::After(*SteadyClock::Get(), Seconds(5)));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)
                    ->Set("gyre/control/half/0", "127.0.0.1:1",
                          Deadline::After(*SteadyClock::Get(), Seconds(5)))
                    .ok());
  }
  r = wait_for("half", "joined the rendezvous but has no control address yet");
  EXPECT_NE(r.out.find("joined the rendezvous but has no control address yet"), std::string::npos)
      << r.out << r.err;
  for (auto& t : ranks) t.join();
}

// gyrectl pointed at a port where an HTTP server answers: it said "the store ... does not
// answer yet" and tried again, though the answer (no gyre store) would not change. It fails
// at once, showing what answered.
TEST(GyrectlCli, AStoreAddressWhereSomethingElseAnswersFailsAtOnce) {
  int port = 0;
  const int listener = gyre::testing::ListenOnLoopback(&port);
  ASSERT_GE(listener, 0);
  const std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  std::atomic<bool> stop{false};
  std::thread http([&] {
    while (!stop) {
      pollfd p{listener, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept(listener, nullptr, nullptr);
      if (fd < 0) continue;
      char buf[512];
      pollfd r{fd, POLLIN, 0};
      if (::poll(&r, 1, 2000) > 0) [[maybe_unused]]
        ssize_t n = ::read(fd, buf, sizeof(buf));
      const std::string answer = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
      [[maybe_unused]] ssize_t n = ::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
      ::close(fd);
    }
  });
  CommandResult r = RunTool(
      {BuiltBinary("gyrectl"), "status", "--store", url, "--job_id", "j", "--timeout", "20"});
  stop = true;
  http.join();
  ::close(listener);
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(url + " answered \"HTTP/1.1 400 Bad Request\": not a gyre store"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("does not answer yet"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 5.0) << r.err;
}

TEST(GyrectlCli, StrayPositionalArgumentsAreRefused) {
  ExpectRefused(
      {BuiltBinary("gyrectl"), "status", "extra", "--store", "file:///tmp", "--job_id", "j"},
      {"unexpected argument 'extra'"});
}

}  // namespace
}  // namespace gyre::testing
