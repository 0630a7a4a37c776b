// Real processes: gyrerun starting gyred daemons and client programs on 127.0.0.1, with the
// file store and the TCP store, through the daemon and embedded; rendezvous failures with
// gyred started by hand; a rank SIGKILLed in the middle of a loop of allreduces.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "tests/support/subprocess.h"

namespace gyre::testing {
namespace {

std::string Gyrerun() { return BinDir() + "/gyrerun"; }
std::string Gyred() { return BinDir() + "/gyred"; }
std::string Client() { return BinDir() + "/gyre-test-client"; }

std::string TempDir(const std::string& name) { return EmptyTempDir("gyre-mp-" + name); }

struct JobCase {
  int p;
  std::string store;
  std::string mode;
};

class GyrerunJobTest : public ::testing::TestWithParam<JobCase> {};

TEST_P(GyrerunJobTest, EveryCollectiveThroughTheClientLibrary) {
  const JobCase& c = GetParam();
  CommandResult r = RunCommand({Gyrerun(), "-n", std::to_string(c.p), "--store", c.store, "--mode",
                                c.mode, "--timeout", "20", "--", Client()},
                               {}, 240);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < c.p; ++rank) {
    EXPECT_NE(r.out.find("rank " + std::to_string(rank) + ": all collectives ok"),
              std::string::npos)
        << "rank " << rank << "\n"
        << r.out << r.err;
  }
  EXPECT_NE(r.out.find("mode=" + c.mode), std::string::npos) << r.out;
}

// 20 and 24 ranks: above 16 a waiting rank sleeps on its epoll set rather than a poll of
// every connection (TcpTransportOptions::driver_epoll_above_ranks).
INSTANTIATE_TEST_SUITE_P(
    Multiproc, GyrerunJobTest,
    ::testing::Values(JobCase{1, "file", "daemon"}, JobCase{2, "file", "daemon"},
                      JobCase{3, "tcp", "daemon"}, JobCase{4, "file", "daemon"},
                      JobCase{8, "tcp", "daemon"}, JobCase{20, "file", "daemon"},
                      JobCase{1, "tcp", "embedded"}, JobCase{2, "tcp", "embedded"},
                      JobCase{3, "file", "embedded"}, JobCase{4, "tcp", "embedded"},
                      JobCase{8, "file", "embedded"}, JobCase{24, "tcp", "embedded"}),
    [](const ::testing::TestParamInfo<JobCase>& info) {
      return "p" + std::to_string(info.param.p) + "_" + info.param.store + "_" + info.param.mode;
    });

TEST(GyrerunTest, MainJobPrintsEverySectionAndPasses) {
  CommandResult r = RunCommand({Gyrerun(), "-n", "4", "--timing_runs", "5"}, {}, 240);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* s : {"1. Verification", "2. Counters", "3. Float associativity", "4. Timings",
                        "main job: all checks passed"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("WRONG"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("MISMATCH"), std::string::npos) << r.out;
}

// gyred processes started by hand, so a test can leave ranks out or duplicate them.
struct Daemons {
  std::vector<std::thread> threads;
  std::vector<CommandResult> results;
  void Start(int index, std::vector<std::string> argv) {
    threads.emplace_back([this, index, argv] { results[index] = RunCommand(argv, {}, 60); });
  }
  void Join() {
    for (auto& t : threads) t.join();
  }
};

std::vector<std::string> GyredArgs(int rank, int world, const std::string& store,
                                   const std::string& job, double rendezvous_s = 3) {
  return {Gyred(),
          "--rank=" + std::to_string(rank),
          "--world_size=" + std::to_string(world),
          "--store=" + store,
          "--job_id=" + job,
          "--run=selftest",
          "--rendezvous_timeout=" + std::to_string(rendezvous_s)};
}

TEST(RendezvousTest, MissingRankIsListedByEveryoneAtTheDeadline) {
  const std::string dir = TempDir("missing");
  Daemons d;
  d.results.resize(3);
  for (int r = 0; r < 3; ++r) d.Start(r, GyredArgs(r, 4, "file://" + dir, "jobM", 2));
  d.Join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(d.results[r].exit_code, 1) << d.results[r].err;
    EXPECT_NE(d.results[r].err.find("3 of 4 ranks arrived"), std::string::npos) << d.results[r].err;
    EXPECT_NE(d.results[r].err.find("missing: rank 3"), std::string::npos) << d.results[r].err;
    EXPECT_LT(d.results[r].seconds, 2 + 3.0);
  }
}

TEST(RendezvousTest, DuplicateRankIsRefusedNamingBothClaimants) {
  const std::string dir = TempDir("dup");
  Daemons d;
  d.results.resize(3);
  d.Start(0, GyredArgs(0, 3, "file://" + dir, "jobD", 3));
  d.Start(1, GyredArgs(1, 3, "file://" + dir, "jobD", 3));
  d.Start(2, GyredArgs(1, 3, "file://" + dir, "jobD", 3));
  d.Join();
  int refused = 0;
  for (const auto& r : d.results) {
    if (r.err.find("AlreadyExists") != std::string::npos &&
        r.err.find("rank 1") != std::string::npos && r.err.find("pid") != std::string::npos) {
      ++refused;
    }
    EXPECT_NE(r.exit_code, 0) << r.err;  // nobody completes a job with a duplicate rank
  }
  EXPECT_EQ(refused, 1) << d.results[1].err << d.results[2].err;
}

TEST(RendezvousTest, WorldSizeMismatchNamesBothValues) {
  const std::string dir = TempDir("size");
  Daemons d;
  d.results.resize(2);
  d.Start(0, GyredArgs(0, 2, "file://" + dir, "jobS", 3));
  d.Start(1, GyredArgs(1, 3, "file://" + dir, "jobS", 3));
  d.Join();
  bool named = false;
  for (const auto& r : d.results) {
    EXPECT_NE(r.exit_code, 0) << r.err;
    if (r.err.find("world size") != std::string::npos && r.err.find('2') != std::string::npos &&
        r.err.find('3') != std::string::npos) {
      named = true;
    }
  }
  EXPECT_TRUE(named) << d.results[0].err << d.results[1].err;
}

TEST(RendezvousTest, StaleFileStoreFolderDoesNotConfuseANewJob) {
  const std::string dir = TempDir("stale");
  for (const char* job : {"jobOld", "jobNew"}) {
    Daemons d;
    d.results.resize(3);
    for (int r = 0; r < 3; ++r) d.Start(r, GyredArgs(r, 3, "file://" + dir, job, 10));
    d.Join();
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(d.results[r].exit_code, 0) << job << " rank " << r << d.results[r].err;
    }
  }
  // The same job id again: every rank slot is still claimed by the finished job, so the
  // stale state is refused loudly rather than mixed with the new one.
  Daemons again;
  again.results.resize(1);
  again.Start(0, GyredArgs(0, 3, "file://" + dir, "jobNew", 2));
  again.Join();
  EXPECT_NE(again.results[0].exit_code, 0);
  EXPECT_NE(again.results[0].err.find("rank 0"), std::string::npos) << again.results[0].err;
}

// Kills rank 2's gyred with SIGKILL in the middle of a loop of allreduces.
TEST(KillTest, SigkilledDaemonIsNamedAndTheJobStops) {
  std::atomic<pid_t> victim{0};
  std::set<pid_t> pids;
  std::mutex mu;
  std::atomic<bool> killed{false};
  auto killed_at = std::chrono::steady_clock::now();
  const std::regex daemon_pid(R"(\[rank (\d+) gyred\].*joined as pid (\d+))");
  // The kill waits for every program to be connected to its daemon (and so in its loop
  // soon): a loaded machine may start them well after the daemons.
  const std::regex connected_re(R"(\[rank \d+ gyred\].*client pid \d+ connected)");
  const std::regex client_pid(R"(pid=(\d+))");
  int connected = 0;
  std::thread killer;
  CommandResult r = RunCommand({Gyrerun(), "-n", "4", "--store", "tcp", "--timeout", "20", "--",
                                Client(), "--check=false", "--loop_seconds=60"},
                               {}, 120, [&](const std::string& line) {
                                 std::smatch m;
                                 std::lock_guard<std::mutex> lock(mu);
                                 if (std::regex_search(line, m, daemon_pid)) {
                                   pids.insert(static_cast<pid_t>(std::stoi(m[2])));
                                   if (m[1] == "2") victim = static_cast<pid_t>(std::stoi(m[2]));
                                 } else if (std::regex_search(line, connected_re)) {
                                   ++connected;
                                 }
                                 if (victim != 0 && connected == 4 && !killed.exchange(true)) {
                                   killer = std::thread([&] {
                                     std::this_thread::sleep_for(std::chrono::milliseconds(500));
                                     killed_at = std::chrono::steady_clock::now();
                                     ::kill(victim.load(), SIGKILL);
                                   });
                                 }
                               });
  if (killer.joinable()) killer.join();
  ASSERT_NE(victim.load(), 0) << r.err;
  const double after_kill =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  EXPECT_LT(after_kill, 10.0) << "the job took too long to stop after the kill";
  // The summary marks rank 2's daemon as the root cause, killed by SIGKILL.
  EXPECT_NE(r.err.find("SIGKILL"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("root cause"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(rank 2 gyred.*SIGKILL)")) ||
              std::regex_search(r.err, std::regex(R"(2\s+rank 2 gyred)")))
      << r.err;
  // A survivor's allreduce failed naming rank 2.
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(allreduce.*failed.*rank 2)"))) << r.err;
  // Every client pid printed is gone, as is every daemon.
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), client_pid), end; it != end; ++it) {
    pids.insert(static_cast<pid_t>(std::stoi((*it)[1])));
  }
  EXPECT_GE(pids.size(), 5u);
  for (pid_t p : pids) EXPECT_FALSE(ProcessExists(p)) << "pid " << p << " survived";
}

TEST(KillTest, ClientKilledMidLoopStopsTheJobWithItsSignal) {
  CommandResult r =
      RunCommand({Gyrerun(), "-n", "3", "--timeout", "20", "--", Client(), "--check=false",
                  "--loop_seconds=60", "--die_rank=1", "--die_after=30"},
                 {}, 120);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_NE(r.err.find("root cause"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(\[rank 1\]|rank 1 )"))) << r.err;
}

TEST(GyrerunTest, DataParallelSgdExampleMatchesSingleProcessTraining) {
  for (const char* mode : {"daemon", "embedded"}) {
    CommandResult r = RunCommand(
        {Gyrerun(), "-n", "4", "--mode", mode, "--", BinDir() + "/gyre-example-sgd"}, {}, 120);
    EXPECT_EQ(r.exit_code, 0) << mode << r.out << r.err;
    EXPECT_NE(r.out.find("matches single-process training"), std::string::npos) << r.out;
  }
}

TEST(GyrerunTest, BuiltInBenchWorkloadReportsEverySizeCorrect) {
  const std::string dir = TempDir("bench");
  Daemons d;
  d.results.resize(2);
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> args = GyredArgs(r, 2, "file://" + dir, "jobB", 20);
    args[5] = "--run=bench";
    args.push_back("--bench_max_bytes=4096");
    d.Start(r, args);
  }
  d.Join();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(d.results[r].exit_code, 0) << d.results[r].err;
  for (const char* size : {"           4 ", "          64 ", "        4096 "}) {
    EXPECT_NE(d.results[0].out.find(size), std::string::npos) << d.results[0].out;
  }
  EXPECT_NE(d.results[0].out.find("auto:"), std::string::npos) << d.results[0].out;
}

// gyred --metrics_port serves Prometheus' text format on loopback. Idle connections (20 of
// them, opened first) hold up no scrape, and a request that is not a GET is answered 400.
TEST(MetricsTest, DaemonServesPrometheusText) {
  const std::string dir = TempDir("metrics");
  std::string body, garbage_answer;
  double scrape_seconds = -1;
  std::thread fetcher;
  const std::regex port_re(R"(metrics on http://127\.0\.0\.1:(\d+)/metrics)");
  const std::regex pid_re(R"(joined as pid (\d+))");
  pid_t pid = 0;
  CommandResult r = RunCommand(
      {Gyred(), "--rank=0", "--world_size=1", "--store=file://" + dir, "--job_id=jobP",
       "--run=serve", "--socket=" + dir + "/d.sock", "--metrics_port=0"},
      {}, 30, [&](const std::string& line) {
        std::smatch m;
        if (std::regex_search(line, m, pid_re)) pid = static_cast<pid_t>(std::stoi(m[1]));
        if (std::regex_search(line, m, port_re)) {
          const int port = std::stoi(m[1]);
          fetcher = std::thread([&, port] {
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_port = htons(static_cast<uint16_t>(port));
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            auto ask = [&](const std::string& req) {
              std::string answer;
              int fd = ::socket(AF_INET, SOCK_STREAM, 0);
              if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
                (void)::send(fd, req.data(), req.size(), 0);
                char buf[65536];
                ssize_t n;
                while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) answer.append(buf, n);
              }
              ::close(fd);
              return answer;
            };
            std::vector<int> idle;
            for (int i = 0; i < 20; ++i) {
              idle.push_back(::socket(AF_INET, SOCK_STREAM, 0));
              (void)::connect(idle.back(), reinterpret_cast<sockaddr*>(&a), sizeof(a));
            }
            const auto t0 = std::chrono::steady_clock::now();
            body = ask("GET /metrics HTTP/1.0\r\n\r\n");
            scrape_seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            garbage_answer = ask("\x16\x03\x01 not http\r\n\r\n");
            for (int fd : idle) ::close(fd);
            if (pid > 0) ::kill(pid, SIGTERM);
          });
        }
      });
  if (fetcher.joinable()) fetcher.join();
  EXPECT_NE(body.find("HTTP/1.0 200 OK"), std::string::npos) << body << r.err;
  EXPECT_NE(body.find("# TYPE gyre_operations_total counter"), std::string::npos) << body;
  EXPECT_NE(body.find("gyre_operation_duration_seconds_bucket{rank=\"0\",le=\"+Inf\"} 0"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("gyre_sent_bytes_total{rank=\"0\"} 0"), std::string::npos) << body;
  EXPECT_GE(scrape_seconds, 0);
  EXPECT_LT(scrape_seconds, 5.0) << "waited on the idle connections (1 s each) before it";
  EXPECT_EQ(garbage_answer.rfind("HTTP/1.0 400 Bad Request", 0), 0u) << garbage_answer;
}

// gyrerun's --timeout, --segment_bytes and --deterministic reach every rank in both modes:
// gyred takes them as flags, an embedded program from its environment, and in both modes
// the program sees them there (gyre's Python layer reads them). A chain broadcast of 16 KiB
// from rank 0 is one message per hop unsegmented and four in 4 KiB segments; deterministic
// calls run the canonical order. Values the launching shell exported do not override the
// flags.
TEST(GyrerunTest, CallDefaultsReachEveryRankInBothModes) {
  for (const char* mode : {"daemon", "embedded"}) {
    for (bool set : {false, true}) {
      std::vector<std::string> argv = {Gyrerun(), "-n", "3", "--mode", mode, "--timeout", "20"};
      if (set) argv.insert(argv.end(), {"--segment_bytes", "4096", "--deterministic", "--tune"});
      argv.insert(argv.end(), {"--", Client(), "--check=false", "--report_defaults"});
      CommandResult r = RunCommand(argv,
                                   {{"GYRE_SEGMENT_BYTES", "1024"},
                                    {"GYRE_DETERMINISTIC", set ? "0" : "1"},
                                    {"GYRE_TUNE", set ? "0" : "1"},
                                    {"GYRE_TIMEOUT_MS", "5"}},
                                   120);
      const std::string what = std::string(mode) + (set ? " with" : " without") + " flags\n";
      ASSERT_FALSE(r.timed_out) << what << r.err;
      ASSERT_EQ(r.exit_code, 0) << what << r.out << r.err;
      const std::string msgs = set ? "4" : "1";
      for (const std::string& line :
           {"rank 0: chain broadcast sent " + msgs + " messages, received 0",
            "rank 1: chain broadcast sent " + msgs + " messages, received " + msgs,
            "rank 2: chain broadcast sent 0 messages, received " + msgs,
            std::string("rank 2: env GYRE_TIMEOUT_MS=20000"),
            "rank 2: env GYRE_SEGMENT_BYTES=" + std::string(set ? "4096" : "0"),
            "rank 2: env GYRE_DETERMINISTIC=" + std::string(set ? "1" : "0"),
            "rank 2: env GYRE_TUNE=" + std::string(set ? "1" : "0"),
            std::string("rank 2: 12 automatic broadcasts ran ")}) {
        EXPECT_NE(r.out.find(line), std::string::npos) << what << line << "\n" << r.out;
      }
      const bool canonical = r.out.find("rank 2: allreduce ran canonical") != std::string::npos;
      EXPECT_EQ(canonical, set) << what << r.out;
      // Tuned (in gyred or in the program), the first calls try the model's close rivals.
      const bool one =
          r.out.find("rank 2: 12 automatic broadcasts ran 1 algorithms") != std::string::npos;
      EXPECT_EQ(one, !set) << what << r.out;
    }
  }
}

// A one-rank embedded job started without gyrerun, as another launcher would start it, with
// `extra` added to its environment.
CommandResult RunEmbeddedAlone(const std::vector<std::pair<std::string, std::string>>& extra) {
  static int runs = 0;  // a job id per run: the store keeps the earlier runs' records
  std::vector<std::pair<std::string, std::string>> env = {
      {"GYRE_MODE", "embedded"},
      {"GYRE_RANK", "0"},
      {"GYRE_WORLD_SIZE", "1"},
      {"GYRE_STORE",
       "file://" + ::testing::TempDir() + "/gyre-alone-" + std::to_string(::getpid())},
      {"GYRE_JOB_ID", "alone-" + std::to_string(++runs)}};
  env.insert(env.end(), extra.begin(), extra.end());
  return RunCommand({Client(), "--check=false", "--report_defaults"}, env, 60);
}

// Started by another launcher, an embedded rank applies the call defaults it is given,
// takes an empty value as unset, and refuses a malformed one naming the variable, instead of
// reading "abc" as 0, "30s" as 30, or a timeout past what a Duration holds as negative.
TEST(GyrerunTest, EmbeddedDefaultsFromAnotherLauncher) {
  CommandResult r = RunEmbeddedAlone({{"GYRE_DETERMINISTIC", "true"}, {"GYRE_SEGMENT_BYTES", ""}});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("rank 0: allreduce ran canonical"), std::string::npos) << r.out;
  r = RunEmbeddedAlone({{"GYRE_DETERMINISTIC", "0"}, {"GYRE_TIMEOUT_MS", ""}});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("allreduce ran canonical"), std::string::npos) << r.out;

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"GYRE_SEGMENT_BYTES", "abc"},
      {"GYRE_SEGMENT_BYTES", "-1"},
      {"GYRE_TIMEOUT_MS", "30s"},
      {"GYRE_TIMEOUT_MS", "0"},
      {"GYRE_TIMEOUT_MS", "10000000000000"},
      {"GYRE_DETERMINISTIC", "2"},
      {"GYRE_DETERMINISTIC", "yes"},
      {"GYRE_TUNE", "on"}};
  for (const auto& [name, value] : bad) {
    r = RunEmbeddedAlone({{name, value}});
    ASSERT_FALSE(r.timed_out) << name << "=" << value << "\n" << r.err;
    EXPECT_NE(r.exit_code, 0) << name << "=" << value << "\n" << r.out;
    EXPECT_NE(r.err.find(name + "=\"" + value + "\" is not "), std::string::npos)
        << name << "=" << value << "\n"
        << r.err;
  }
}

TEST(GyrerunTest, BadCallDefaultFlagsAreClearErrors) {
  CommandResult r = RunCommand({Gyrerun(), "-n", "2", "--segment_bytes", "-4096"}, {}, 30);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--segment_bytes must be 0 (no segments) or more, not -4096"),
            std::string::npos)
      << r.err;
  for (const char* timeout : {"0", "nan", "1e10"}) {
    r = RunCommand({Gyrerun(), "-n", "2", "--timeout", timeout}, {}, 30);
    EXPECT_EQ(r.exit_code, 2) << timeout;
    EXPECT_NE(
        r.err.find("--timeout " + std::string(timeout == std::string("1e10") ? "1e+10" : timeout) +
                   " must be from 0.001 to 1e9 seconds"),
        std::string::npos)
        << timeout << "\n"
        << r.err;
  }
}

TEST(GyrerunTest, BadTimeFlagsAreClearErrors) {
  // Durations are nanoseconds in an int64: a huge value must not wrap into "at once".
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--job_timeout", "1e10"},     {"--job_timeout", "nan"},         {"--job_timeout", "-1"},
      {"--grace_period", "1e20"},    {"--grace_period", "nan"},        {"--hang_timeout", "inf"},
      {"--rendezvous_timeout", "0"}, {"--rendezvous_timeout", "1e10"}, {"--settle_time", "-1"},
      {"--settle_time", "nan"}};
  for (const auto& [flag, value] : bad) {
    CommandResult r = RunCommand({Gyrerun(), "-n", "1", flag, value, "--", "/bin/true"}, {}, 30);
    EXPECT_EQ(r.exit_code, 2) << flag << " " << value;
    EXPECT_NE(r.err.find("gyrerun: " + flag + " "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(" must be "), std::string::npos) << r.err;
  }
  CommandResult r = RunCommand({Gyrerun(), "-n", "2000", "--", "/bin/true"}, {}, 30);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("at most 1024 ranks"), std::string::npos) << r.err;
  r = RunCommand({Gyrerun(), "--hosts", "localhost:2000000000", "--", "/bin/true"}, {}, 30);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("slots must be a number from 1 to 1024"), std::string::npos) << r.err;
  // Only gyrerun's own workload has timed runs; with a program the flag is not used.
  r = RunCommand({Gyrerun(), "-n", "1", "--timing_runs", "2"}, {}, 30);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("gyrerun: --timing_runs must be at least 5"), std::string::npos) << r.err;
}

// A host name of 70 KB (--host_name, GYRE_HOST, --hosts, a hostfile) was taken and then
// repeated whole in every verdict and error line; gyrerun refuses it before any rank starts,
// with its length and a short prefix.
TEST(GyrerunTest, AHostNameOfAbsurdLengthIsRefusedBeforeAnyRankStarts) {
  const std::string huge = "node" + std::string(70 * 1024, 'q');
  const std::string dir = ::testing::TempDir() + "/absurd-host-" + std::to_string(::getpid());
  ASSERT_TRUE(std::filesystem::create_directories(dir) || std::filesystem::is_directory(dir));
  const std::string hostfile = dir + "/hosts";
  std::ofstream(hostfile) << "localhost slots=1\n" << huge << " slots=2\n";
  const std::string marker = dir + "/ran";
  const std::vector<std::string> program = {"--", "/bin/touch", marker};
  struct Case {
    std::vector<std::string> args;
    std::vector<std::pair<std::string, std::string>> env;
    std::string what;
  };
  const Case cases[] = {
      {{"-n", "1", "--host_name", huge}, {}, "--host_name"},
      {{"-n", "1"}, {{"GYRE_HOST", huge}}, "GYRE_HOST"},
      {{"--hosts", huge + ":1"}, {}, "the host name of --hosts entry 1"},
      {{"--hosts", "localhost:1," + huge}, {}, "the host name of --hosts entry 2"},
      {{"--hostfile", hostfile}, {}, "the host name of --hostfile " + hostfile + " line 2"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {Gyrerun()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    argv.insert(argv.end(), program.begin(), program.end());
    CommandResult r = RunCommand(argv, c.env, 30);
    EXPECT_EQ(r.exit_code, 2) << c.what << ": " << r.err.substr(0, 500);
    EXPECT_NE(r.err.find("gyrerun: " + c.what + " 'nodeqqqqqqqqqqqqqqqqqqqq'... is " +
                         std::to_string(huge.size()) +
                         " bytes long, more than the 255 a host name may have"),
              std::string::npos)
        << r.err.substr(0, 500);
    EXPECT_LT(r.err.size(), 1000u) << c.what;
    EXPECT_FALSE(std::filesystem::exists(marker)) << c.what;
  }
  // Entries refused for their form before their length is looked at are shown by their start.
  std::ofstream(hostfile) << "localhost slots=1\n" << huge << " slots=x\n";
  const Case malformed[] = {
      {{"--hosts", huge + ":x"}, {}, "host 'nodeqqqq"},
      {{"--hostfile", hostfile}, {}, "--hostfile " + hostfile + " line 2: 'nodeqqqq"},
  };
  const size_t shown_sizes[] = {huge.size() + 2, huge.size() + 8};  // ":x", " slots=x"
  for (size_t k = 0; k < 2; ++k) {
    const Case& c = malformed[k];
    std::vector<std::string> argv = {Gyrerun()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    argv.insert(argv.end(), program.begin(), program.end());
    CommandResult r = RunCommand(argv, c.env, 30);
    EXPECT_EQ(r.exit_code, 2) << c.what << ": " << r.err.substr(0, 500);
    EXPECT_NE(r.err.find(c.what), std::string::npos) << r.err.substr(0, 500);
    EXPECT_NE(r.err.find("... (" + std::to_string(shown_sizes[k]) + " bytes)"), std::string::npos)
        << r.err.substr(0, 500);
    EXPECT_LT(r.err.size(), 1000u) << c.what;
    EXPECT_FALSE(std::filesystem::exists(marker)) << c.what;
  }
  std::filesystem::remove_all(dir);
}

// Rank 1 fails at once; rank 0 reports 2 s later. With --settle_time 5 gyrerun waits for that
// report (rank 0's own exit code in the summary); with 0.3 it stops rank 0 first.
TEST(GyrerunTest, SettleTimeBoundsTheWaitForTheOthersReports) {
  auto run = [](const char* settle) {
    return RunCommand(
        {Gyrerun(), "-n", "2", "--mode", "embedded", "--settle_time", settle, "--grace_period", "1",
         "--", "/bin/sh", "-c", "[ \"$GYRE_RANK\" = 1 ] && exit 5; sleep 2; exit 3"},
        {}, 60);
  };
  CommandResult waited = run("5");
  EXPECT_EQ(waited.exit_code, 5) << waited.err;
  EXPECT_NE(waited.err.find("exit 3"), std::string::npos) << waited.err;
  EXPECT_EQ(waited.err.find("terminated by gyrerun"), std::string::npos) << waited.err;
  // Ended by rank 0's report, not by the 5 s window.
  EXPECT_LT(waited.seconds, 4.5) << waited.err;
  CommandResult cut = run("0.3");
  EXPECT_EQ(cut.exit_code, 5) << cut.err;
  EXPECT_NE(cut.err.find("terminated by gyrerun (SIGTERM)"), std::string::npos) << cut.err;
  EXPECT_EQ(cut.err.find("exit 3"), std::string::npos) << cut.err;
}

TEST(GyrerunTest, ADaemonWhoseProgramNeverCallsItDoesNotHoldTheJob) {
  // Daemon mode: each program exits 0 without creating a Comm; its gyred would serve forever.
  CommandResult r = RunCommand({Gyrerun(), "-n", "2", "--", "/bin/true"}, {}, 60);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(r.seconds, 30.0);
  EXPECT_EQ(r.err.find("job failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[rank 1 gyred]"), std::string::npos) << r.err;
}

// A "daemon" that exits 0 at once (not a gyred at all) leaves its program nothing to call:
// the job fails at once naming it, where the programs used to wait out the rendezvous (60 s).
// A gyred that served and then left (the program closed and runs on) is not this case: the
// torch DDP example and DaemonVerdictTest cover it.
TEST(GyrerunTest, ADaemonThatExitsBeforeItEverServedFailsTheJobAtOnce) {
  CommandResult r = RunCommand({Gyrerun(), "-n", "2", "--gyred", "/bin/true", "--", Client(),
                                "--check=false", "--loop_iters=2"},
                               {}, 90);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, 30.0) << r.err;
  EXPECT_NE(r.err.find("gyred (pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited with code 0 before it ever served its rank's program, which was "
                       "still running (nothing appeared at "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(".sock) after"), std::string::npos) << r.err;
}

// A rank whose program ends (exit 0) before it joins left the others waiting for it until the
// rendezvous timeout (60 s by default), though gyrerun had seen it exit. gyrerun marks the
// exit in the job's store, and every rank waiting for it fails at once, naming it.
class ExitBeforeJoiningTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExitBeforeJoiningTest, TheOtherRanksFailAtOnceNamingIt) {
  CommandResult r = RunCommand(
      {Gyrerun(), "-n", "3", "--mode", "embedded", "--store", GetParam(), "--rendezvous_timeout",
       "60", "--", "/bin/sh", "-c",
       "[ \"$GYRE_RANK\" = 1 ] && exit 0; exec " + Client() + " --check=false --loop_iters 3"},
      {}, 90);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_LT(r.seconds, 20.0) << r.err;
  for (int rank : {0, 2}) {
    const std::string line = "[rank " + std::to_string(rank) + "] ";
    const size_t at = r.err.find(line);
    ASSERT_NE(at, std::string::npos) << r.err;
    EXPECT_TRUE(std::regex_search(
        r.err, std::regex(R"(\[rank )" + std::to_string(rank) +
                          R"(\] .*rank 1 will not join: its process \(pid \d+\) exited with )"
                          R"(status 0 after .* \(seen by gyrerun\), before it claimed its )"
                          R"(rendezvous slot)")))
        << r.err;
  }
  EXPECT_EQ(r.err.find("missing: rank 1"), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(GyrerunTest, ExitBeforeJoiningTest, ::testing::Values("file", "tcp"));

TEST(GyrerunTest, EmbeddedRanksGetTheRendezvousTimeout) {
  // Rank 0 never joins (it runs on without gyre): rank 1 must give up after
  // --rendezvous_timeout, not the 60 s default.
  CommandResult r = RunCommand({Gyrerun(), "-n", "2", "--mode", "embedded", "--rendezvous_timeout",
                                "2", "--job_timeout", "40", "--", "/bin/sh", "-c",
                                "[ \"$GYRE_RANK\" = 0 ] && exec sleep 30; exec " + Client() +
                                    " --check=false --loop_iters 3"},
                               {}, 60);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_LT(r.seconds, 20.0);
  EXPECT_NE(r.err.find("rendezvous of job"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("missing: rank 0"), std::string::npos) << r.err;
}

// A rank needs about three descriptors per peer. Below that it used to run out part way
// through connecting ("Too many open files" on some peer's connection, verdicts naming healthy
// ranks); now a low soft limit is raised, and a low hard limit fails before any connection.
TEST(GyrerunTest, AFileDescriptorLimitTooLowForTheJobIsRaisedOrNamed) {
  const std::string need = std::to_string(3 * 15 + 64);  // job::JobDescriptorsNeeded(16)
  CommandResult low =
      RunCommand({Gyrerun(), "-n", "16", "--mode", "embedded", "--timeout", "20", "--", "prlimit",
                  "--nofile=30", Client(), "--check=false", "--loop_iters", "3"},
                 {}, 90);
  EXPECT_FALSE(low.timed_out);
  EXPECT_NE(low.exit_code, 0) << low.err;
  EXPECT_NE(low.err.find("ResourceExhausted: rank 0 of job"), std::string::npos) << low.err;
  EXPECT_NE(low.err.find("needs about " + need +
                         " file descriptors, but this process may open only 30 (hard limit 30): "
                         "raise it with `ulimit -n " +
                         need + "`"),
            std::string::npos)
      << low.err;
  EXPECT_EQ(low.err.find("Too many open files"), std::string::npos) << low.err;
  EXPECT_EQ(low.err.find("verdict"), std::string::npos) << low.err;

  CommandResult raised = RunCommand({Gyrerun(), "-n", "16", "--mode", "embedded", "--", "prlimit",
                                     "--nofile=30:" + need, Client(), "--loop_iters", "3"},
                                    {}, 90);
  // 16 ranks hold 43 descriptors each once connected: more than 30, so this passes only raised.
  EXPECT_EQ(raised.exit_code, 0) << raised.err;
}

// A rank has one communicator in both modes. Through the daemon a second one used to be
// served too, its calls matched with the other ranks' calls of the first: both returned OK
// with data summed across unrelated calls.
TEST(GyrerunTest, ASecondCommOfARankIsRefusedInBothModes) {
  for (const std::string mode : {"daemon", "embedded"}) {
    CommandResult r =
        RunCommand({Gyrerun(), "-n", "2", "--mode", mode, "--timeout", "20", "--", Client(),
                    "--second_comm", "--check=false", "--loop_iters", "5", "--close"},
                   {}, 60);
    EXPECT_EQ(r.exit_code, 0) << mode << "\n" << r.out << r.err;
    for (int rank = 0; rank < 2; ++rank) {
      const std::string name = "rank " + std::to_string(rank);
      EXPECT_NE(r.out.find(name + ": second comm: AlreadyExists: "), std::string::npos)
          << mode << "\n"
          << r.out;
      EXPECT_NE(r.out.find(name + ": closed"), std::string::npos) << mode << "\n" << r.out;
    }
    if (mode == "daemon") {
      EXPECT_NE(r.out.find("rank 0's gyred already serves a communicator of this program"),
                std::string::npos)
          << r.out;
    }
  }
}

// Options::deterministic takes -1, 0 or 1; 7 was taken as "on" without a word, where every
// other bad Options field is refused by name. The refusal takes the call's place on every
// rank, so the calls after it still meet.
TEST(GyrerunTest, ADeterministicOptionOutsideItsValuesIsRefusedInBothModes) {
  for (const std::string mode : {"daemon", "embedded"}) {
    CommandResult r =
        RunCommand({Gyrerun(), "-n", "2", "--mode", mode, "--timeout", "20", "--", Client(),
                    "--bad_options", "--check=false", "--loop_iters", "3", "--close"},
                   {}, 60);
    EXPECT_EQ(r.exit_code, 0) << mode << "\n" << r.out << r.err;
    for (int rank = 0; rank < 2; ++rank) {
      const std::string name = "rank " + std::to_string(rank);
      EXPECT_NE(r.out.find(name + ": deterministic 7: InvalidArgument: "), std::string::npos)
          << mode << "\n"
          << r.out;
      EXPECT_NE(r.out.find(name + ": closed"), std::string::npos) << mode << "\n" << r.out;
    }
    EXPECT_NE(r.out.find("Options::deterministic is 7: want -1 (the job's default), 0 (off) or 1 "
                         "(canonical order)"),
              std::string::npos)
        << mode << "\n"
        << r.out;
  }
}

// A gyred started by gyrerun serves its program's one communicator, then exits. A new Comm
// after Close waited out the daemon's 60 s start-up allowance and failed saying the
// rendezvous might still be going on. Now it is told at once: by the daemon while it is
// exiting, or by the client library once the daemon is gone or caught in its exit (which of
// the two answers is a race, more so on a loaded machine: a daemon that accepted the
// connection and closed it unread used to give "connection closed by the other side").
TEST(GyrerunTest, ANewCommAfterCloseThroughTheDaemonIsToldAtOnce) {
  for (const std::string delay : {"0", "1.5"}) {
    CommandResult r =
        RunCommand({Gyrerun(), "-n", "2", "--", Client(), "--check=false", "--loop_iters", "3",
                    "--close", "--recreate_after_close", "--recreate_delay", delay},
                   {}, 60);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    for (int rank = 0; rank < 2; ++rank) {
      const std::string name = "rank " + std::to_string(rank);
      std::smatch m;
      ASSERT_TRUE(std::regex_search(
          r.out, m, std::regex(name + R"(: recreated after close: (.*) in ([0-9.]+) s)")))
          << r.out;
      const std::string said = m[1];
      const bool by_daemon =
          said.find("Unavailable: " + name + "'s gyred served its program's communicator") == 0;
      const bool by_client = said.find("Unavailable: the daemon at ") == 0 &&
                             said.find(
                                 " served an earlier communicator of this program and "
                                 "is gone or exiting (") != std::string::npos;
      EXPECT_TRUE(by_daemon || by_client) << "delay " << delay << "\n" << r.out;
      EXPECT_LT(std::stod(m[2]), 5.0) << r.out;
    }
  }
}

// Comm::RefuseCall misused: an unknown collective name is InvalidArgument naming it and takes
// no place in the sequence (the next call pairs right, checked exactly); after Close it is
// refused as any call is.
TEST(GyrerunTest, RefuseCallWithAnUnknownNameOrAfterCloseIsRefusedByName) {
  for (const std::string mode : {"embedded", "daemon"}) {
    CommandResult r =
        RunCommand({Gyrerun(), "-n", "2", "--mode", mode, "--", Client(), "--check=false",
                    "--loop_iters", "0", "--refuse_call_misuse", "--close"},
                   {}, 60);
    EXPECT_EQ(r.exit_code, 0) << mode << "\n" << r.out << r.err;
    for (int rank = 0; rank < 2; ++rank) {
      const std::string name = "rank " + std::to_string(rank);
      EXPECT_NE(r.out.find(name + ": refuse unknown: InvalidArgument: "), std::string::npos)
          << mode << "\n"
          << r.out;
      EXPECT_TRUE(std::regex_search(r.out, std::regex(name + ": refuse unknown: .*frobnicate")))
          << mode << "\n"
          << r.out;
      EXPECT_NE(r.out.find(name + ": allreduce after it: exact"), std::string::npos) << mode << "\n"
                                                                                     << r.out;
      EXPECT_NE(r.out.find(name + ": refuse after close: InvalidArgument: this Comm was closed"),
                std::string::npos)
          << mode << "\n"
          << r.out;
    }
  }
}

// A block freed while an asynchronous call submitted before still uses it is freed only once
// that call has finished, in both modes: embedded, FreeBuffer returned at once and the call
// then wrote its result into the next block AllocBuffer handed out (at the same address).
TEST(GyrerunTest, FreeBufferWaitsForTheAsynchronousCallsBeforeIt) {
  for (const std::string mode : {"embedded", "daemon"}) {
    CommandResult r = RunCommand({Gyrerun(), "-n", "2", "--mode", mode, "--", Client(),
                                  "--check=false", "--free_while_async"},
                                 {}, 60);
    EXPECT_EQ(r.exit_code, 0) << mode << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("rank 0: free while async: free ok, call done when FreeBuffer "
                         "returned: yes, call ok, new block changed in 0 elements"),
              std::string::npos)
        << mode << "\n"
        << r.out << r.err;
  }
}

// With --tune, a call one rank refuses fails that call on every rank and nothing more: the
// ranks give their trials up at that failure together. Before, the refusing rank's buckets
// stood a trial behind the others': every later trial call failed as a divergence, and one
// rank's tuning agreement (an int64 allreduce) summed with the others' 6-element int64
// allreduce, which returned success with timing figures in it.
TEST(GyrerunTest, ARefusedCallWhileTuningFailsThatCallOnly) {
  for (const std::string mode : {"embedded", "daemon"}) {
    CommandResult r = RunCommand({Gyrerun(), "-n", "3", "--mode", mode, "--tune", "--timeout", "20",
                                  "--", Client(), "--check=false", "--refuse_while_tuning"},
                                 {}, 120);
    EXPECT_EQ(r.exit_code, 0) << mode << "\n" << r.out << r.err;
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_NE(r.out.find("rank " + std::to_string(rank) + ": tuning rounds: 1 failed, 0 wrong"),
                std::string::npos)
          << mode << "\n"
          << r.out;
    }
  }
}

// A calibration file that cannot be used fails the job at its start, naming the file, in
// both modes: before, the ranks ran until their first automatically chosen call (seq 85 of
// a test loop) and failed there.
TEST(GyrerunTest, AnUnusableCalibrationFileFailsTheJobAtItsStart) {
  const std::string dir = TempDir("calibration-dir");
  for (const std::string mode : {"embedded", "daemon"}) {
    CommandResult r = RunCommand({Gyrerun(), "-n", "2", "--mode", mode, "--", Client(),
                                  "--check=false", "--loop_iters", "3"},
                                 {{"GYRE_CALIBRATION", dir}}, 60);
    EXPECT_NE(r.exit_code, 0) << mode << "\n" << r.out << r.err;
    EXPECT_EQ(r.out.find("client rank"), std::string::npos) << mode << "\n" << r.out;
    EXPECT_NE((r.out + r.err).find("calibration file '" + dir + "'"), std::string::npos)
        << mode << "\n"
        << r.out << r.err;
    EXPECT_LT(r.seconds, 30) << mode;
  }
}

TEST(GyrerunTest, AReusedRunFolderDoesNotShowAnEarlierJobsFailure) {
  const std::string dir = TempDir("reused-run-dir");
  // The first job fails in a collective (rank 1 dies), leaving flight records and a store.
  CommandResult first = RunCommand(
      {Gyrerun(), "-n", "2", "--mode", "embedded", "--run_dir", dir, "--timeout", "20", "--",
       Client(), "--check=false", "--loop_iters", "200", "--die_rank", "1", "--die_after", "5"},
      {}, 60);
  ASSERT_NE(first.exit_code, 0) << first.err;
  // The second fails before any collective: nothing about the first may show.
  CommandResult second = RunCommand({Gyrerun(), "-n", "2", "--mode", "embedded", "--run_dir", dir,
                                     "--", "/bin/sh", "-c", "echo bad config >&2; exit 3"},
                                    {}, 60);
  EXPECT_EQ(second.exit_code, 3);
  EXPECT_NE(second.err.find("bad config"), std::string::npos) << second.err;
  EXPECT_EQ(second.err.find("verdict"), std::string::npos) << second.err;
  EXPECT_EQ(second.err.find("flight recorders"), std::string::npos) << second.err;
  // With a fixed job id, a reused folder's store must not hold the earlier job's claims.
  for (int run = 0; run < 2; ++run) {
    CommandResult ok =
        RunCommand({Gyrerun(), "-n", "2", "--mode", "embedded", "--run_dir", dir, "--job_id",
                    "fixed", "--", Client(), "--check=false", "--loop_iters", "3"},
                   {}, 60);
    EXPECT_EQ(ok.exit_code, 0) << "run " << run << "\n" << ok.err;
  }
}

// A second gyrerun given a running job's --run_dir used to clear that job's store and secret.
// It now refuses before touching the folder, naming the gyrerun that holds it.
TEST(GyrerunTest, ARunFolderInUseIsRefusedAndLeftAlone) {
  const std::string dir = TempDir("busy-run-dir") + "/deeper";  // made by gyrerun
  const std::string log = TempDir("busy-run-dir-log") + "/first.log";
  const pid_t first = StartLogged(Gyrerun(),
                                  {"-n", "1", "--mode", "embedded", "--run_dir", dir, "--",
                                   "/bin/sh", "-c", "touch \"$GYRE_FLIGHT_DIR/started\"; sleep 30"},
                                  log);
  ASSERT_GT(first, 0);
  for (int i = 0; i < 400 && ::access((dir + "/started").c_str(), F_OK) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(::access((dir + "/started").c_str(), F_OK), 0) << ReadAll(log);
  ASSERT_EQ(::access((dir + "/secret").c_str(), F_OK), 0) << ReadAll(log);
  CommandResult second = RunCommand(
      {Gyrerun(), "-n", "1", "--mode", "embedded", "--run_dir", dir, "--", "/bin/true"}, {}, 30);
  EXPECT_EQ(second.exit_code, 1) << second.err;
  EXPECT_NE(second.err.find("the run folder " + dir + " is in use by another gyrerun (pid " +
                            std::to_string(first) + ")"),
            std::string::npos)
      << second.err;
  // The first job's secret is still there, and the job runs on.
  EXPECT_EQ(::access((dir + "/secret").c_str(), F_OK), 0);
  EXPECT_TRUE(ProcessExists(first));
  ::kill(first, SIGTERM);
  EXPECT_EQ(WaitExit(first, Seconds(20)), 143) << ReadAll(log);
  // Once it has ended, the folder is free again.
  CommandResult third = RunCommand(
      {Gyrerun(), "-n", "1", "--mode", "embedded", "--run_dir", dir, "--", "/bin/true"}, {}, 30);
  EXPECT_EQ(third.exit_code, 0) << third.err;
}

// SIGUSR1 and SIGUSR2 to gyrerun reach every rank's program (not its gyred) and the job goes
// on; SIGQUIT stops it as SIGTERM does. All three ended gyrerun by their default action,
// leaving its run folder, with the job's secret, in TMPDIR.
TEST(GyrerunTest, UserSignalsReachTheProgramsAndSigquitStopsTheJobInOrder) {
  const std::string tmp = TempDir("user-signals");
  const std::string log = TempDir("user-signals-log") + "/gyrerun.log";
  // Daemon mode: each rank's gyred runs beside its program, and would die of SIGUSR2.
  const pid_t gyrerun =
      StartLogged("/usr/bin/env",
                  {"TMPDIR=" + tmp, Gyrerun(), "-n", "2", "--", "/bin/sh", "-c",
                   "trap 'echo got USR1' USR1; trap 'echo got USR2' USR2; "
                   "touch \"${GYRE_SOCKET%/*}/ready.$GYRE_RANK\"; while :; do sleep 0.05; done"},
                  log);
  ASSERT_GT(gyrerun, 0);
  // However the test ends, the job does not outlive it.
  std::shared_ptr<void> stop_job(nullptr, [gyrerun](void*) {
    if (ProcessExists(gyrerun)) {
      ::kill(gyrerun, SIGTERM);
      WaitExit(gyrerun, Seconds(10));
    }
  });
  auto run_dirs = [&] {
    std::vector<std::string> dirs;
    for (const auto& e : std::filesystem::directory_iterator(tmp)) dirs.push_back(e.path());
    return dirs;
  };
  auto eventually = [](const std::function<bool()>& done) {
    for (int i = 0; i < 400 && !done(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return done();
  };
  ASSERT_TRUE(eventually([&] {
    const std::vector<std::string> dirs = run_dirs();
    return dirs.size() == 1 && ::access((dirs[0] + "/ready.0").c_str(), F_OK) == 0 &&
           ::access((dirs[0] + "/ready.1").c_str(), F_OK) == 0;
  })) << ReadAll(log);
  for (const char* sig : {"USR1", "USR2"}) {
    ASSERT_EQ(::kill(gyrerun, std::string(sig) == "USR1" ? SIGUSR1 : SIGUSR2), 0);
    EXPECT_TRUE(eventually([&] {
      const std::string text = ReadAll(log);
      return text.find(std::string("[rank 0] got ") + sig) != std::string::npos &&
             text.find(std::string("[rank 1] got ") + sig) != std::string::npos;
    })) << sig
        << "\n"
        << ReadAll(log);
    EXPECT_TRUE(ProcessExists(gyrerun)) << sig << "\n" << ReadAll(log);
  }
  ASSERT_EQ(::kill(gyrerun, SIGQUIT), 0);
  EXPECT_EQ(WaitExit(gyrerun, Seconds(30)), 128 + SIGQUIT) << ReadAll(log);
  const std::string text = ReadAll(log);
  EXPECT_NE(text.find("gyrerun received SIGQUIT"), std::string::npos) << text;
  // Stopped by gyrerun, not by a forwarded signal.
  EXPECT_EQ(text.find("SIGUSR"), std::string::npos) << text;
  EXPECT_TRUE(run_dirs().empty()) << "the run folder was left behind";
}

// A --run_dir that names a file (or a path through one) is refused with the reason before any
// rank starts, and the file is left as it was.
TEST(GyrerunTest, ARunFolderThatIsAFileIsRefusedAndLeftAlone) {
  const std::string file = TempDir("run-dir-file") + "/notes.txt";
  {
    std::ofstream f(file);
    f << "keep me\n";
  }
  for (const std::string& dir : {file, file + "/sub"}) {
    CommandResult r = RunCommand({Gyrerun(), "-n", "2", "--mode", "embedded", "--run_dir", dir,
                                  "--", "/bin/sh", "-c", "echo started"},
                                 {}, 30);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("gyrerun: cannot use --run_dir " + dir + ": Not a directory"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.out.find("started"), std::string::npos) << r.out;
  }
  EXPECT_EQ(ReadAll(file), "keep me\n");
}

// A --run_dir no gyrerun has used that already holds what gyrerun writes there (a store
// folder, a secret, a report, flight records: a project folder given as `--run_dir .`, say)
// is refused, and every file is left as it was. In a folder an earlier gyrerun used, its
// store is cleared for the next job, but not a store folder holding anything else.
TEST(GyrerunTest, AUsersFilesInTheRunFolderAreNeverCleared) {
  // A two-rank job in run folder `dir` whose ranks print "started".
  auto RunIn = [](const std::string& dir) {
    return RunCommand({Gyrerun(), "-n", "2", "--mode", "embedded", "--run_dir", dir, "--",
                       "/bin/sh", "-c", "echo started"},
                      {}, 30);
  };
  const std::string dir = TempDir("users-run-dir");
  std::filesystem::create_directories(dir + "/store/deep");
  const std::vector<std::string> mine = {"/store/deep/important.db", "/secret", "/report.txt",
                                         "/flight-rank0.json"};
  for (const std::string& f : mine) std::ofstream(dir + f) << "mine: " << f << "\n";
  CommandResult r = RunIn(dir);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("gyrerun: the run folder " + dir +
                       " already holds flight-rank0.json, report.txt, secret, store, which "
                       "gyrerun would replace, and no gyrerun has used it"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("started"), std::string::npos) << r.out;
  for (const std::string& f : mine) EXPECT_EQ(ReadAll(dir + f), "mine: " + f + "\n") << f;
  EXPECT_FALSE(std::filesystem::exists(dir + "/gyrerun.lock"));

  // A folder a job ran in, then a file of the user's put into its store folder.
  const std::string used = TempDir("used-run-dir");
  CommandResult first = RunIn(used);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_TRUE(std::filesystem::exists(used + "/gyrerun.lock"));
  std::filesystem::create_directories(used + "/store");
  std::ofstream(used + "/store/notes.txt") << "mine\n";
  CommandResult second = RunIn(used);
  EXPECT_EQ(second.exit_code, 1) << second.err;
  EXPECT_NE(second.err.find("gyrerun: " + used +
                            "/store holds notes.txt, which is not a file of gyre's store"),
            std::string::npos)
      << second.err;
  EXPECT_EQ(ReadAll(used + "/store/notes.txt"), "mine\n");
  // A file named store is not a store either.
  std::filesystem::remove_all(used + "/store");
  std::ofstream(used + "/store") << "mine\n";
  CommandResult file = RunIn(used);
  EXPECT_EQ(file.exit_code, 1) << file.err;
  EXPECT_NE(file.err.find("gyrerun: " + used + "/store is not a folder"), std::string::npos)
      << file.err;
  EXPECT_EQ(ReadAll(used + "/store"), "mine\n");
  // Without them, the folder is reused as before.
  std::filesystem::remove(used + "/store");
  CommandResult third = RunIn(used);
  EXPECT_EQ(third.exit_code, 0) << third.err;
  EXPECT_NE(third.out.find("[rank 1] started"), std::string::npos) << third.out;
}

// A run folder on a file system without locks (NFS without its lock daemon: ENOLCK) cannot be
// guarded against a second gyrerun: the job runs, and gyrerun says what it could not do.
TEST(GyrerunTest, ARunFolderThatCannotBeLockedIsUsedWithAWarning) {
  const std::string dir = TempDir("nolock-run-dir");
  CommandResult r = RunCommand({Gyrerun(), "-n", "2", "--mode", "embedded", "--run_dir", dir, "--",
                                "/bin/sh", "-c", "echo started"},
                               {{"LD_PRELOAD", GYRE_NOLOCK_SHIM}}, 30);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("gyrerun: warning: cannot lock " + dir +
                       "/gyrerun.lock (No locks available): nothing stops another gyrerun from "
                       "using this run folder meanwhile"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("[rank 1] started"), std::string::npos) << r.out;
}

TEST(GyrerunTest, TheRunFolderIsMadeUnderTmpdir) {
  const std::string tmp = TempDir("tmpdir");
  CommandResult r = RunCommand({Gyrerun(), "-n", "1", "--mode", "embedded", "--", "/bin/sh", "-c",
                                "echo \"flight dir: $GYRE_FLIGHT_DIR\""},
                               {{"TMPDIR", tmp}}, 30);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("flight dir: " + tmp + "/gyrerun-"), std::string::npos) << r.out;
  r = RunCommand({Gyrerun(), "-n", "1", "--mode", "embedded", "--", "/bin/true"},
                 {{"TMPDIR", tmp + "/missing"}}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot create a run folder in " + tmp + "/missing: No such file"),
            std::string::npos)
      << r.err;
  // A relative TMPDIR still gives an absolute folder (a file store takes no other).
  r = RunCommand({Gyrerun(), "-n", "1", "--mode", "embedded", "--", "/bin/sh", "-c",
                  "echo \"flight dir: $GYRE_FLIGHT_DIR\""},
                 {{"TMPDIR", "."}}, 30);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("flight dir: /"), std::string::npos) << r.out;
  // One whose sockets would not fit a socket path (107 bytes) is refused by name: every
  // program failed on its daemon's socket.
  const std::string deep = tmp + "/" + std::string(100, 'd');
  ASSERT_EQ(::mkdir(deep.c_str(), 0700), 0);
  r = RunCommand({Gyrerun(), "-n", "2", "--", "/bin/true"}, {{"TMPDIR", deep}}, 30);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("is too long for the daemons' sockets"), std::string::npos) << r.err;
}

// The README's hung-job recipe loops for a time. Each rank used to stop on its own clock, so
// one made a call the others never made, and that call failed naming a healthy rank dead.
TEST(GyrerunTest, ATimedLoopEndsAfterTheSameCallOnEveryRank) {
  for (const char* mode : {"daemon", "embedded"}) {
    CommandResult r = RunCommand({Gyrerun(), "-n", "3", "--mode", mode, "--timeout", "10", "--",
                                  Client(), "--check=false", "--loop_seconds=1.5"},
                                 {}, 60);
    EXPECT_EQ(r.exit_code, 0) << mode << "\n" << r.err;
    EXPECT_FALSE(std::regex_search(r.err, std::regex(R"(rank \d+: allreduce \d+ failed)")))
        << mode << "\n"
        << r.err;
  }
}

TEST(GyrerunTest, TheTestClientsHelpListsItsOwnFlags) {
  CommandResult r = RunCommand({Client(), "--help"}, {}, 30);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("gyre-test-client [flags]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-loop_seconds ("), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("logtostderr"), std::string::npos) << r.out;
}

// gyrectl finds the secret beside a file store, but not a TCP store's: the command gyrerun
// prints for one used to be refused by the store ("a different secret").
TEST(GyrerunTest, ThePrintedGyrectlCommandWorksOnATcpStore) {
  std::thread asker;
  CommandResult status;
  CommandResult r = RunCommand(
      {Gyrerun(), "-n", "2", "--store", "tcp", "--mode", "embedded", "--", Client(),
       "--check=false", "--loop_seconds=8"},
      {}, 60, [&](const std::string& line) {
        static const std::regex inspect(R"(inspect it with: gyrectl (.*)$)");
        std::smatch m;
        if (asker.joinable() || !std::regex_search(line, m, inspect)) return;
        std::vector<std::string> argv = {BinDir() + "/gyrectl"};
        std::istringstream words(m[1].str());
        for (std::string w; words >> w;) argv.push_back(w);
        argv.insert(argv.end(), {"--timeout", "5"});
        // Asked until both ranks have joined and answer from inside a call (a
        // loaded machine is slow to start them), for up to 6 s of the job's 8.
        asker = std::thread([&status, argv] {
          const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(6);
          do {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            status = RunCommand(argv, {}, 30);
          } while (!(status.exit_code == 0 &&
                     std::regex_search(status.out, std::regex(R"(\n1 +\d+ )"))) &&
                   std::chrono::steady_clock::now() < give_up);
        });
      });
  ASSERT_TRUE(asker.joinable()) << r.err;
  asker.join();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The store gyrerun serves logs through glog, initialised first.
  EXPECT_EQ(r.err.find("Logging before InitGoogleLogging"), std::string::npos) << r.err;
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(std::regex_search(status.out, std::regex(R"(\n0 +\d+ )"))) << status.out;
  EXPECT_TRUE(std::regex_search(status.out, std::regex(R"(\n1 +\d+ )"))) << status.out;
}

// A gyrerun killed by SIGKILL has its job stopped by its group guardian, but its run folder,
// with the job's secret, stayed in TMPDIR for good. The next gyrerun removes such folders
// (no gyrerun holds their lock, and they still hold a secret), and leaves alone a folder
// kept with --keep_run_dir and the folder of a gyrerun still running.
TEST(GyrerunTest, RunFoldersOfKilledGyrerunsAreRemovedByTheNext) {
  const std::string tmp = TempDir("killed-run-dirs");
  auto folders = [&tmp] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(tmp)) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::pair<std::string, std::string>> env = {{"TMPDIR", tmp}};
  auto within = [](const std::function<bool()>& done, int seconds) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (!done() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return done();
  };
  // One kept on purpose.
  CommandResult kept = RunCommand(
      {Gyrerun(), "-n", "1", "--mode", "embedded", "--keep_run_dir", "--", "/bin/true"}, env, 60);
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  const std::vector<std::string> after_kept = folders();
  ASSERT_EQ(after_kept.size(), 1u);
  // One running (from before the kill to after the next has started).
  const std::string running_log = tmp + "-running.log";
  const pid_t running = StartLogged("/usr/bin/env",
                                    {"TMPDIR=" + tmp, Gyrerun(), "-n", "1", "--mode", "embedded",
                                     "--", "/bin/sh", "-c", "echo started; sleep 8"},
                                    running_log);
  ASSERT_TRUE(within([&] { return ReadAll(running_log).find("started") != std::string::npos; }, 30))
      << ReadAll(running_log);
  std::string running_dir;
  for (const std::string& f : folders()) {
    if (f != after_kept[0]) running_dir = f;
  }
  // One killed: started through env so that TMPDIR reaches it, then SIGKILLed.
  const std::string log = tmp + "-killed.log";
  const pid_t killed = StartLogged(
      "/usr/bin/env",
      {"TMPDIR=" + tmp, Gyrerun(), "-n", "2", "--", Client(), "--check=false", "--loop_seconds=60"},
      log);
  ASSERT_GT(killed, 0);
  ASSERT_TRUE(
      within([&] { return ReadAll(log).find("client rank 1 of 2") != std::string::npos; }, 30))
      << ReadAll(log);
  ::kill(killed, SIGKILL);
  EXPECT_EQ(WaitExit(killed, std::chrono::seconds(10)), 128 + SIGKILL);
  std::string killed_dir;  // the one folder not there before it
  for (const std::string& f : folders()) {
    if (f != after_kept[0] && f != running_dir) killed_dir = tmp + "/" + f;
  }
  ASSERT_FALSE(killed_dir.empty());
  EXPECT_EQ(::access((killed_dir + "/secret").c_str(), F_OK), 0) << killed_dir;

  CommandResult next =
      RunCommand({Gyrerun(), "-n", "1", "--mode", "embedded", "--", "/bin/true"}, env, 60);
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_NE(next.err.find("gyrerun: removed 1 run folder in " + tmp +
                          " that killed gyreruns left (each with its job's secret)"),
            std::string::npos)
      << next.err;
  EXPECT_FALSE(std::filesystem::exists(killed_dir));
  EXPECT_TRUE(std::filesystem::exists(tmp + "/" + after_kept[0]));
  EXPECT_EQ(folders().size(), 2u);  // the kept one and the running one's
  EXPECT_EQ(WaitExit(running, std::chrono::seconds(30)), 0) << ReadAll(running_log);
  EXPECT_EQ(folders(), after_kept);
}

// A store URL nobody serves made every rank wait the whole rendezvous timeout (60 s by
// default) before anything was said. gyrerun now says at start that nothing answers there.
TEST(GyrerunTest, AStoreThatDoesNotAnswerIsSaidAtStart) {
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  const std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  CommandResult r = RunCommand({Gyrerun(), "-n", "1", "--mode", "embedded", "--store", url,
                                "--rendezvous_timeout", "7", "--", "/bin/true"},
                               {}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("gyrerun: nothing answers at " + url +
                       " yet (connect to 127.0.0.1:" + std::to_string(port) +
                       " failed: Connection refused); every rank waits "
                       "for it up to 7.00 s (--rendezvous_timeout)"),
            std::string::npos)
      << r.err;
}

// gyrectl status on a job stuck in its rendezvous read "job gj, 1 ranks ... idle": it stopped
// at the first rank without a control address and did not say the job waits. It now shows
// every rank of the world size, the ones that have not come, and the others as joining.
TEST(GyrectlTest, AJobStuckInItsRendezvousShowsTheRanksItWaitsFor) {
  const std::string dir = TempDir("gyrectl-rdzv");
  std::vector<pid_t> pids;
  for (int rank : {0, 2}) {
    pids.push_back(StartLogged(
        Gyred(),
        {"--rank=" + std::to_string(rank), "--world_size=3", "--store=file://" + dir, "--job_id=gj",
         "--run=serve", "--socket=" + dir + "/r" + std::to_string(rank) + ".sock",
         "--rendezvous_timeout=30"},
        dir + "/gyred" + std::to_string(rank) + ".log"));
    ASSERT_GT(pids.back(), 0);
  }
  const std::vector<std::string> status = {BinDir() + "/gyrectl", "status", "--store=file://" + dir,
                                           "--job_id=gj"};
  CommandResult r;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto joining = [&r](int rank) {
    return std::regex_search(
        r.out, std::regex("\n" + std::to_string(rank) +
                          R"( +\d+ +\S+ +joining +in the rendezvous, waiting for rank 1 )"));
  };
  do {  // until both have published their control addresses and answer
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    r = RunCommand(status, {}, 30);
  } while (!(joining(0) && joining(2)) && std::chrono::steady_clock::now() < give_up);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("job gj, 3 ranks, 2 joined: the rendezvous waits for rank 1\n"),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(joining(0) && joining(2)) << r.out;
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex(R"(\n1 +- +- +missing +has not joined the rendezvous)")))
      << r.out;
  CommandResult json = RunCommand(
      {BinDir() + "/gyrectl", "status", "--json", "--store=file://" + dir, "--job_id=gj"}, {}, 30);
  EXPECT_NE(json.out.find("\"world_size\": 3, \"joined\": [0, 2]"), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("{\"rank\": 1, \"state\": \"missing\""), std::string::npos) << json.out;
  // A dump has the two ranks' records and says which one it could not have.
  CommandResult dump =
      RunCommand({BinDir() + "/gyrectl", "dump", "--store=file://" + dir, "--job_id=gj"}, {}, 30);
  EXPECT_EQ(dump.exit_code, 1) << dump.err;
  EXPECT_NE(dump.out.find("{\"rank\": 2, "), std::string::npos) << dump.out;
  EXPECT_NE(dump.err.find("gyrectl: rank 1 has not joined the rendezvous"), std::string::npos)
      << dump.err;
  for (pid_t pid : pids) {
    ::kill(pid, SIGTERM);
    EXPECT_NE(WaitExit(pid, std::chrono::seconds(20)), -1);
  }
}

// A flight record that cannot be written (here its name is taken by a folder; on a full disk
// the same) was dropped without a word, and left a partial .tmp file beside it.
TEST(GyrerunTest, AFlightRecordThatCannotBeWrittenIsSaidAndLeavesNoPartialFile) {
  const std::string dir = TempDir("flight-blocked");
  std::ofstream(dir + "/gyrerun.lock");  // an earlier gyrerun's folder: its leftovers go
  ASSERT_EQ(::mkdir((dir + "/flight-rank0.json").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((dir + "/flight-rank0.json/in-the-way").c_str(), 0700), 0);
  CommandResult r = RunCommand({Gyrerun(),
                                "-n",
                                "2",
                                "--mode",
                                "embedded",
                                "--run_dir",
                                dir,
                                "--timeout",
                                "10",
                                "--settle_time",
                                "4",
                                "--",
                                Client(),
                                "--check=false",
                                "--loop_iters",
                                "200",
                                "--die_rank",
                                "1",
                                "--die_after",
                                "5"},
                               {}, 60);
  EXPECT_NE(r.exit_code, 0) << r.err;
  // A folder where the file should be is the flight folder's fault, not a resource run out.
  EXPECT_NE(r.err.find("rank 0: the flight record was not written: InvalidArgument: cannot "
                       "write " +
                       dir + "/flight-rank0.json"),
            std::string::npos)
      << r.err;
  EXPECT_NE(::access((dir + "/flight-rank0.json.tmp").c_str(), F_OK), 0) << "left behind";
}

// Two ways of giving one thing used to take one and drop the other without a word; a
// malformed store URL started every rank only for each to fail on it.
TEST(GyrerunTest, FlagsThatDisagreeOrCannotWorkAreRefusedUpFront) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-n", "2", "-np", "3"}, "-n 2 and -np 3 disagree"},
      {{"-n", "3", "--nproc_per_node", "2"}, "-n 3 is not --nnodes x --nproc_per_node (2)"},
      {{"--hosts", "localhost:1", "--hostfile", "/dev/null"}, "--hosts and --hostfile both"},
      {{"-n", "1", "--tail_lines", "-1"}, "--tail_lines must be 0 (none) or more, not -1"},
      {{"-n", "1", "--store", "tcp://127.0.0.1"},
       "--store: store URL 'tcp://127.0.0.1': expected tcp://host:port"},
      {{"--hosts", "localhost:2:3"}, "host 'localhost:2:3': want 'host' or 'host:slots'"},
      {{"-n", "1", "--run", "selftest"}, "--run picks gyrerun's own workload"},
      {{"--hostfile", "/"}, "--hostfile / is a directory"},
      {{"-n", "1", "--store", "file://relative"},
       "--store: store URL 'file://relative': a file store needs an absolute folder"},
      // Flags that placed nothing were ignored; a job id every rank then failed on.
      {{"-n", "2", "--nnodes", "0"}, "--nnodes must be at least 1, not 0"},
      {{"-n", "2", "--nproc_per_node", "-2"},
       "--nproc_per_node must be 0 (ranks from -n) or more, not -2"},
      {{"-n", "2", "--node_rank", "5"}, "--node_rank 5 is not in 0..0 (--nnodes 1)"},
      {{"-n", "2", "--job_id", "a/b"}, "job id 'a/b' contains '/'"},
      {{"-n", "2", "--job_id", std::string(300, 'j')},
       "job id '" + std::string(120, 'j') +
           "...(300 bytes)' is 300 bytes, more than the 256 a job id may have"},
      // Restarts need a job one gyrerun runs on its own store (restart_mp_test.cc).
      {{"-n", "2", "--max_restarts", "-1"},
       "--max_restarts must be 0 (no restart) to 1000000, not -1"},
      {{"-n", "2", "--max_restarts", "1", "--store", "file:///tmp/gyre-restart-user-store"},
       "--max_restarts with --store file:///tmp/gyre-restart-user-store: that store would keep "
       "the failed attempt's claims"},
      {{"--nnodes", "2", "--nproc_per_node", "1", "--max_restarts", "1", "--store",
        "tcp://127.0.0.1:1", "--secret_file", "/nonexistent/secret"},
       "--max_restarts with --nnodes 2: each node's gyrerun would restart its own ranks"},
      {{"--hosts", "otherhost:1", "--max_restarts", "1"},
       "--max_restarts with ranks on other hosts"},
  };
  for (const auto& [flags, want] : cases) {
    std::vector<std::string> argv = {Gyrerun()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--", "/bin/true"});
    CommandResult r = RunCommand(argv, {}, 30);
    EXPECT_EQ(r.exit_code, 2) << want << "\n" << r.err;
    EXPECT_NE(r.err.find("gyrerun: " + want), std::string::npos) << r.err;
  }
  // Open MPI's max_slots is allowed on a hostfile line.
  const std::string hostfile = TempDir("max-slots") + "/hosts";
  {
    std::ofstream f(hostfile);
    f << "localhost slots=1 max_slots=4\n";
  }
  CommandResult ok = RunCommand(
      {Gyrerun(), "--hostfile", hostfile, "--mode", "embedded", "--", "/bin/true"}, {}, 30);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  // A binary file's bytes are not echoed to the terminal as they are.
  {
    std::ofstream f(hostfile);
    f << "\x1b[2J\xc8 junk\n";
  }
  CommandResult binary = RunCommand({Gyrerun(), "--hostfile", hostfile, "--", "/bin/true"}, {}, 30);
  EXPECT_EQ(binary.exit_code, 2) << binary.err;
  EXPECT_NE(binary.err.find("'\\x1b[2J\\xc8 junk' is not 'host slots=N'"), std::string::npos)
      << binary.err;
  EXPECT_EQ(binary.err.find('\x1b'), std::string::npos) << binary.err;
  {
    std::ofstream f(hostfile);
    f << "node\x07\n";
  }
  binary = RunCommand({Gyrerun(), "--hostfile", hostfile, "--", "/bin/true"}, {}, 30);
  EXPECT_EQ(binary.exit_code, 2) << binary.err;
  EXPECT_NE(binary.err.find("--hostfile " + hostfile + " line 1: 'node\\x07' is not a host name"),
            std::string::npos)
      << binary.err;
  // A hostfile's error quotes its line as written, with its number: "localhost:2 slots=3" was
  // quoted as 'localhost:2:3', which is in no file.
  const std::vector<std::pair<std::string, std::string>> lines = {
      {"localhost:2 slots=3", "'localhost:2 slots=3' gives the slots twice"},
      {"localhost slots=0", "'localhost slots=0': slots must be a number from 1 to 1024"},
      {"localhost:x:2", "'localhost:x:2': want 'host' or 'host:slots'"},
  };
  for (const auto& [line, want] : lines) {
    {
      std::ofstream f(hostfile);
      f << "# hosts\nlocalhost:1\n" << line << "  # the bad one\n";
    }
    CommandResult bad = RunCommand({Gyrerun(), "--hostfile", hostfile, "--", "/bin/true"}, {}, 30);
    EXPECT_EQ(bad.exit_code, 2) << bad.err;
    EXPECT_NE(bad.err.find("gyrerun: --hostfile " + hostfile + " line 3: " + want),
              std::string::npos)
        << line << "\n"
        << bad.err;
  }
  // Without a program, the workload runs in gyred.
  CommandResult r = RunCommand({Gyrerun(), "-n", "1", "--mode", "embedded"}, {}, 30);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("gyrerun: --mode embedded runs a program's ranks in-process"),
            std::string::npos)
      << r.err;
}

// Node 0 of a torchrun-style job serves the store on every interface, for the other hosts; a
// loopback store address means one host, and the store listened on every interface anyway.
TEST(GyrerunTest, NodeZeroServesALoopbackStoreOnLoopbackOnly) {
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  const std::string dir = TempDir("node0-store");
  const std::string secret = dir + "/secret";
  {
    std::ofstream f(secret);
    f << std::string(64, 'a') << "\n";
  }
  ::chmod(secret.c_str(), 0600);
  const std::string store = "tcp://127.0.0.1:" + std::to_string(port);
  CommandResult r = RunCommand(
      {Gyrerun(), "--nnodes", "2", "--node_rank", "0", "--nproc_per_node", "1", "--store", store,
       "--secret_file", secret, "--mode", "embedded", "--", "/bin/true"},
      {}, 30);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("store server listening on 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << r.err;
}

TEST(GyrerunTest, AProgramGivenWithoutDashDashKeepsItsOwnFlags) {
  // "-n 3" after the program is the program's, not a second -n for gyrerun.
  CommandResult r = RunCommand(
      {Gyrerun(), "-n", "2", "--mode", "embedded", "/bin/echo", "hello", "-n", "3"}, {}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  int lines = 0;
  for (size_t at = r.out.find("] hello -n 3\n"); at != std::string::npos;
       at = r.out.find("] hello -n 3\n", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 2) << r.out;
}

TEST(GyrerunTest, ThisHostUnderTwoNamesIsOneHost) {
  CommandResult r = RunCommand({Gyrerun(), "--hosts", "localhost:1,127.0.0.1:1", "--mode",
                                "embedded", "--", Client(), "--check=false", "--loop_iters", "3"},
                               {}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("client rank 1 of 2"), std::string::npos) << r.out;
}

TEST(GyrerunTest, BadArgumentsAreClearErrors) {
  CommandResult r = RunCommand({Gyrerun(), "-n", "0"}, {}, 30);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("-n N"), std::string::npos) << r.err;
  r = RunCommand({Gyrerun(), "-n", "2", "--store", "ftp://x"}, {}, 30);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--store must be"), std::string::npos) << r.err;
  r = RunCommand({Gyred(), "--run=selftest"}, {}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot tell this process's rank"), std::string::npos) << r.err;
  // A rank's own id is checked before it opens anything, and a port is a port.
  r = RunCommand({Gyred(), "--rank=0", "--world_size=1", "--job_id=x/y", "--run=selftest",
                  "--store=file:///nonexistent-gyre-store"},
                 {}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("job id 'x/y' contains '/'"), std::string::npos) << r.err;
  r = RunCommand({Gyred(), "--rank=0", "--world_size=1", "--job_id=", "--run=selftest",
                  "--store=file:///nonexistent-gyre-store"},
                 {}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--job_id is empty"), std::string::npos) << r.err;
  r = RunCommand({Gyred(), "--run=selftest"},
                 {{"RANK", "0"},
                  {"WORLD_SIZE", "1"},
                  {"MASTER_ADDR", "127.0.0.1"},
                  {"MASTER_PORT", "notaport"}},
                 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("MASTER_PORT=\"notaport\" is not a whole number from 1 to 65535"),
            std::string::npos)
      << r.err;
  // Half of torchrun's store address is named whichever half it is (MASTER_PORT alone said
  // "no store given"); nothing else in the environment gives a store.
  r = RunCommand(
      {"/usr/bin/env", "-i", "RANK=0", "WORLD_SIZE=1", "MASTER_PORT=5", Gyred(), "--run=selftest"},
      {}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("MASTER_PORT is set but MASTER_ADDR is not"), std::string::npos) << r.err;
  r = RunCommand({"/usr/bin/env", "-i", "RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=127.0.0.1", Gyred(),
                  "--run=selftest"},
                 {}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("MASTER_ADDR is set but MASTER_PORT is not"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gyre::testing
