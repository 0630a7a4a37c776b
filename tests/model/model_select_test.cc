// The automatic choice from the calibrated cost model: it picks the candidate with the
// lowest estimate, leaves out candidates that cannot run, reads calibration files strictly
// (every error names the file, the line and the key), and its cache never changes an answer.
#include "core/algo/model_select.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/algo/builders.h"
#include "core/algo/verifier.h"
#include "core/comm/communicator.h"
#include "core/transport/loopback.h"

namespace gyre::algo {
namespace {

CollectiveSpec Spec(Collective c, int p, int64_t count) {
  CollectiveSpec s = MakeSpec(c, count, DataType::kFloat32);
  s.world_size = p;
  return s;
}

MachinePoint Point(int p, double alpha_us, double overhead_us, double gbps, double all_gbps) {
  MachinePoint q;
  q.world_size = p;
  q.alpha_s = alpha_us * 1e-6;
  q.overhead_s = overhead_us * 1e-6;
  q.beta_s_per_byte = 1e-9 / gbps;
  q.beta_all_s_per_byte = all_gbps > 0 ? 1e-9 / all_gbps : 0;
  return q;
}

MachineModel OnePoint(const MachinePoint& q) {
  MachineModel m;
  m.points = {q};
  return m;
}

std::string TempFile(const std::string& text) {
  char path[] = "/tmp/gyre_model_test_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

TEST(ModelSelectTest, PicksTheLowestEstimate) {
  const MachineModel model = DefaultMachineModel();
  ModelSelector selector(model);
  for (Collective c : {Collective::kAllreduce, Collective::kBroadcast, Collective::kAllgather,
                       Collective::kReduce, Collective::kReduceScatter, Collective::kAlltoall}) {
    for (int p : {2, 3, 4, 8}) {
      for (int64_t count : {int64_t{1}, int64_t{256}, int64_t{16384}, int64_t{1} << 20}) {
        const CollectiveSpec spec = Spec(c, p, count);
        const std::vector<Estimate> est = RankCandidates(spec, model);
        ASSERT_FALSE(est.empty()) << spec.ToString();
        for (const Estimate& e : est) EXPECT_LE(est.front().seconds, e.seconds);
        // count is a bucket's lower bound here, so the choice is the estimate's winner.
        ASSERT_EQ(ModelSelector::BucketCount(count), count);
        EXPECT_EQ(selector.Choose(spec).algorithm, est.front().algorithm) << spec.ToString();
      }
    }
  }
}

TEST(ModelSelectTest, LatencyBoundTakesFewRoundsBandwidthBoundTakesFewBytes) {
  // Messages cost everything: one round of direct sends beats every log p algorithm.
  ModelSelector latency(OnePoint(Point(8, 100, 0, 1e6, 0)));
  EXPECT_EQ(latency.Choose(Spec(Collective::kAllreduce, 8, 16)).algorithm, Algorithm::kDirect);
  // Per-message overhead dominates, a core per rank: recursive doubling (2 log p messages
  // per rank, the fewest rounds among those) wins.
  MachineModel own_cores = OnePoint(Point(8, 1, 100, 1e6, 0));
  own_cores.cores = 8;
  ModelSelector overhead(own_cores);
  EXPECT_EQ(overhead.Choose(Spec(Collective::kAllreduce, 8, 16)).algorithm,
            Algorithm::kRecursiveDoubling);
  // The same 8 ranks on 2 cores: a core spends its four ranks' messages, so the fewest in all
  // win: the tree's 28 sends and receives (7 edges, up then down; 20 of them on core 0)
  // against recursive doubling's 48 (24 on each core).
  ModelSelector shared_cores(OnePoint(Point(8, 1, 100, 1e6, 0)));
  EXPECT_EQ(shared_cores.Choose(Spec(Collective::kAllreduce, 8, 16)).algorithm, Algorithm::kTree);
  // Bytes cost everything: an algorithm that sends 2(p-1)/p of the buffer, never the ones
  // that send the whole buffer log p times or to every peer.
  ModelSelector bandwidth(OnePoint(Point(8, 0, 0, 1, 1)));
  const Algorithm big = bandwidth.Choose(Spec(Collective::kAllreduce, 8, 16 << 20)).algorithm;
  EXPECT_NE(big, Algorithm::kDirect);
  EXPECT_NE(big, Algorithm::kRecursiveDoubling);
  EXPECT_NE(big, Algorithm::kTree);
}

TEST(ModelSelectTest, ThroughputBoundChargesTheBusiestCore) {
  // 8 ranks on 2 cores (rank r on core r mod 2): a binomial broadcast from rank 0 keeps only
  // even ranks busy until its last round, a chain alternates cores, a ring allgather is
  // balanced. Both broadcasts move the same bytes.
  SharedCosts shared;
  shared.beta_all_s_per_byte = 1e-9;
  shared.cores = 2;
  CostParams walk;
  walk.alpha_s = 0;
  walk.beta_s_per_byte = 0;
  CollectiveSpec b = Spec(Collective::kBroadcast, 8, 1 << 20);
  b.algorithm = Algorithm::kBinomial;
  auto binomial = EstimateAlgorithm(b, walk, shared);
  b.algorithm = Algorithm::kChain;
  auto chain = EstimateAlgorithm(b, walk, shared);
  ASSERT_TRUE(binomial.ok() && chain.ok());
  const double bytes = 4.0 * (1 << 20);
  // chain: each core carries 7/2 messages' worth of send+receive halves: 7 n / 2 per core,
  // times cores / p.
  EXPECT_NEAR(chain->throughput_s, 7 * bytes / 2 * 1e-9 * 2 / 8, 1e-9);
  // binomial: core 0 sends 7 n (ranks 0, 2, 4, 6) and receives 3 n: (7 + 3) n / 2.
  EXPECT_NEAR(binomial->throughput_s, 10 * bytes / 2 * 1e-9 * 2 / 8, 1e-9);
  shared.cores = 0;  // a core per rank: the chain's busiest rank receives n and sends n
  auto spread = EstimateAlgorithm(b, walk, shared);
  ASSERT_TRUE(spread.ok());
  EXPECT_NEAR(spread->throughput_s, 2 * bytes / 2 * 1e-9, 1e-9);  // chain: n in, n out
}

// The per-message overhead is measured with every rank equally busy, ceil(p / cores) of them
// sharing a core; a core is charged its own ranks' messages at the cost of one rank's share.
// 8 ranks on 2 cores: a dissemination barrier (3 rounds, 6 messages a rank) is charged as
// before, 24 messages on each core / 4; a linear barrier's core 0 carries rank 0's 14 and
// three other ranks' 2 each, 20 / 4, where charging its busiest rank would have said 14.
TEST(ModelSelectTest, PerMessageOverheadIsChargedPerCore) {
  SharedCosts shared;
  shared.overhead_s_per_msg = 1e-6;
  shared.cores = 2;
  CostParams walk;
  CollectiveSpec b = Spec(Collective::kBarrier, 8, 0);
  b.algorithm = Algorithm::kDissemination;
  auto dissemination = EstimateAlgorithm(b, walk, shared);
  b.algorithm = Algorithm::kLinear;
  auto linear = EstimateAlgorithm(b, walk, shared);
  ASSERT_TRUE(dissemination.ok() && linear.ok());
  EXPECT_EQ(dissemination->max_msgs, 6);
  EXPECT_NEAR(dissemination->overhead_s, 6e-6, 1e-12);
  EXPECT_EQ(linear->max_msgs, 14);
  EXPECT_NEAR(linear->overhead_s, 5e-6, 1e-12);
  // Odd p: 3 ranks, 2 of them on core 0. A symmetric schedule still costs a rank's count.
  CollectiveSpec odd = Spec(Collective::kAllreduce, 3, 1);
  odd.algorithm = Algorithm::kDirect;
  auto direct = EstimateAlgorithm(odd, walk, shared);
  ASSERT_TRUE(direct.ok());
  EXPECT_NEAR(direct->overhead_s, 4e-6, 1e-12);  // 2 sends + 2 receives a rank
  // A core per rank: the busiest rank's messages, as ever.
  shared.cores = 0;
  auto spread = EstimateAlgorithm(b, walk, shared);
  ASSERT_TRUE(spread.ok());
  EXPECT_NEAR(spread->overhead_s, 14e-6, 1e-12);
}

TEST(ModelSelectTest, CandidatesThatCannotRunAreLeftOut) {
  const MachineModel model = DefaultMachineModel();
  // A 3 x ? grid does not divide 8 ranks: two_d cannot run and is not a candidate.
  CollectiveSpec grid = Spec(Collective::kAllreduce, 8, 1 << 20);
  grid.grid_rows = 3;
  for (const Estimate& e : RankCandidates(grid, model)) {
    EXPECT_NE(e.algorithm, Algorithm::kTwoD);
  }
  EXPECT_NE(ModelSelector(model).Choose(grid).algorithm, Algorithm::kTwoD);
  // Fewer elements than ranks: whatever wins must build and verify for that count.
  for (Collective c : {Collective::kAllreduce, Collective::kBroadcast, Collective::kAllgather,
                       Collective::kReduceScatter}) {
    for (int64_t count : {0, 1, 3}) {
      CollectiveSpec s = ModelSelector(model).Choose(Spec(c, 8, count));
      auto schedule = BuildSchedule(s);
      ASSERT_TRUE(schedule.ok()) << s.ToString() << ": " << schedule.status().ToString();
      EXPECT_TRUE(VerifySchedule(*schedule).ok()) << s.ToString();
    }
  }
  // Only algorithms of the collective are candidates.
  for (const Estimate& e : RankCandidates(Spec(Collective::kBroadcast, 4, 1024), model)) {
    const std::vector<Algorithm> offered = AlgorithmsFor(Collective::kBroadcast);
    EXPECT_NE(std::find(offered.begin(), offered.end(), e.algorithm), offered.end());
  }
}

TEST(ModelSelectTest, ForcedAlgorithmThatCannotRunIsAnError) {
  CollectiveSpec s = Spec(Collective::kAllreduce, 4, 1024);
  s.algorithm = Algorithm::kBruck;  // not an allreduce
  EXPECT_FALSE(ValidateSpec(s).ok());
  s.algorithm = Algorithm::kTwoD;
  s.grid_rows = 3;  // does not divide 4
  EXPECT_FALSE(ValidateSpec(s).ok());
  EXPECT_FALSE(EstimateAlgorithm(s, CostParams{}).ok());

  auto world = LoopbackHub::CreateWorld(1);
  Communicator comm(std::move(world[0]));
  CallOptions forced;
  forced.algorithm = Algorithm::kBruck;
  auto r = comm.Resolve(MakeSpec(Collective::kAllreduce, 16, DataType::kFloat32), forced);
  EXPECT_FALSE(r.ok());
  forced.algorithm = Algorithm::kRing;
  r = comm.Resolve(MakeSpec(Collective::kAllreduce, 16, DataType::kFloat32), forced);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->algorithm, Algorithm::kRing);
}

TEST(ModelSelectTest, AcrossHostsTheHierarchicalRuleStillHolds) {
  ModelSelector selector(DefaultMachineModel());
  CollectiveSpec s = Spec(Collective::kAllreduce, 8, (1 << 20) / 4);
  s.local_size = 4;
  CollectiveSpec chosen = selector.Choose(s);
  EXPECT_EQ(chosen.algorithm, Algorithm::kHierarchical);
  EXPECT_EQ(chosen.local_size, 4);
  s.count = (256 << 10) / 4;  // below the threshold: flat, and no host shape passed on
  chosen = selector.Choose(s);
  EXPECT_EQ(chosen.algorithm, SelectAlgorithm(s));
  EXPECT_EQ(chosen.local_size, 0);
  // On one host (local_size p) the model decides, with the builders' default shapes.
  s.local_size = 8;
  s.count = 1 << 20;
  chosen = selector.Choose(s);
  EXPECT_EQ(chosen.local_size, 0);
  EXPECT_EQ(chosen.algorithm, RankCandidates(s, DefaultMachineModel()).front().algorithm);
}

TEST(ModelSelectTest, CacheGivesTheUncachedAnswer) {
  ModelSelector cached(DefaultMachineModel());
  const ModelSelector uncached(DefaultMachineModel());
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> log_count(0, 22);
  const Collective ops[] = {Collective::kAllreduce, Collective::kBroadcast, Collective::kAllgather};
  for (int i = 0; i < 600; ++i) {
    const int p = 2 << (i % 3);
    const int64_t count = (int64_t{1} << log_count(rng)) + static_cast<int64_t>(rng() % 1000);
    CollectiveSpec s = Spec(ops[i % 3], p, count);
    s.root = static_cast<int>(rng() % p);
    const CollectiveSpec a = cached.Choose(s);
    const CollectiveSpec b = cached.Choose(s);  // from the cache
    const CollectiveSpec c = uncached.ChooseUncached(s);
    EXPECT_EQ(a.algorithm, c.algorithm) << s.ToString();
    EXPECT_EQ(b.algorithm, c.algorithm) << s.ToString();
    EXPECT_EQ(a.count, s.count);  // the call keeps its own count and root
    EXPECT_EQ(a.root, s.root);
  }
  // Counts of one bucket share one decision and one entry.
  ModelSelector fresh(DefaultMachineModel());
  const int64_t base = ModelSelector::BucketCount(100000);
  for (int64_t c = base; ModelSelector::BucketCount(c) == base; c += 97) {
    EXPECT_EQ(fresh.Choose(Spec(Collective::kAllreduce, 4, c)).algorithm,
              fresh.ChooseUncached(Spec(Collective::kAllreduce, 4, base)).algorithm);
  }
  EXPECT_EQ(fresh.cache_size(), 1u);
}

TEST(ModelSelectTest, BucketsAreQuarterOctavesAboveSixtyFour) {
  EXPECT_EQ(ModelSelector::BucketCount(0), 0);
  EXPECT_EQ(ModelSelector::BucketCount(63), 63);
  EXPECT_EQ(ModelSelector::BucketCount(64), 64);
  EXPECT_EQ(ModelSelector::BucketCount(79), 64);
  EXPECT_EQ(ModelSelector::BucketCount(80), 80);
  EXPECT_EQ(ModelSelector::BucketCount(127), 112);
  EXPECT_EQ(ModelSelector::BucketCount(int64_t{1} << 40), int64_t{1} << 40);
}

TEST(ModelSelectTest, SelectionIsCheapOnceCached) {
  ModelSelector selector(DefaultMachineModel());
  const CollectiveSpec s = Spec(Collective::kAllreduce, 8, 262144);
  for (int p : {8, 64}) {  // the first call of a bucket builds and walks every candidate
    const auto t = std::chrono::steady_clock::now();
    (void)selector.Choose(Spec(Collective::kAllreduce, p, 262144));
    std::printf(
        "ModelSelector::Choose, first call of a bucket, allreduce p=%d: %.2f ms\n", p,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
  }
  constexpr int kCalls = 200000;
  int ring = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) ring += selector.Choose(s).algorithm == Algorithm::kRing;
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
      kCalls;
  std::printf("ModelSelector::Choose, cached: %.0f ns per call (%d)\n", ns, ring);
  EXPECT_LT(ns, 5000);  // a few hundred ns; loose for a loaded machine and sanitizers

  auto world = LoopbackHub::CreateWorld(1);
  Communicator comm(std::move(world[0]));
  const CollectiveSpec call = MakeSpec(Collective::kAllreduce, 262144, DataType::kFloat32);
  ASSERT_TRUE(comm.Resolve(call, {}).ok());
  const auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) ring += comm.Resolve(call, {})->algorithm == Algorithm::kRing;
  const double resolve_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t1).count() /
      kCalls;
  std::printf("Communicator::Resolve, auto: %.0f ns per call\n", resolve_ns);
  EXPECT_LT(resolve_ns, 5000);
}

TEST(ModelSelectTest, MachineModelAtScalesUnmeasuredSizesBySharing) {
  MachineModel m;
  m.cores = 2;
  m.points = {Point(2, 10, 1, 4, 2), Point(8, 40, 20, 3, 0.5)};
  EXPECT_DOUBLE_EQ(m.At(8).alpha_s, 40e-6);
  const MachinePoint sixteen = m.At(16);  // from 8: sharing 8 against 4
  EXPECT_DOUBLE_EQ(sixteen.alpha_s, 80e-6);
  EXPECT_DOUBLE_EQ(sixteen.overhead_s, 40e-6);
  EXPECT_DOUBLE_EQ(sixteen.beta_all_s_per_byte, 2 * m.points[1].beta_all_s_per_byte);
  EXPECT_EQ(sixteen.world_size, 16);
  EXPECT_DOUBLE_EQ(m.At(3).alpha_s, 15e-6);  // nearest is 2: sharing 1.5 against 1
}

TEST(CalibrationFileTest, RoundTripsAndTheBuiltInModelParses) {
  const MachineModel builtin = DefaultMachineModel();
  EXPECT_EQ(builtin.source, "built-in");
  ASSERT_EQ(builtin.points.size(), 3u);
  const std::string path = TempFile(FormatMachineModel(builtin));
  auto read = ReadMachineModel(path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->source, path);
  EXPECT_EQ(read->cores, builtin.cores);
  ASSERT_EQ(read->points.size(), builtin.points.size());
  for (size_t i = 0; i < builtin.points.size(); ++i) {
    EXPECT_EQ(read->points[i].world_size, builtin.points[i].world_size);
    EXPECT_NEAR(read->points[i].alpha_s, builtin.points[i].alpha_s, 1e-8);
    EXPECT_NEAR(read->points[i].beta_all_s_per_byte, builtin.points[i].beta_all_s_per_byte,
                1e-3 * builtin.points[i].beta_all_s_per_byte);
  }
  std::remove(path.c_str());
}

// A write that fails leaves the file as it was (it used to be left empty, and every later
// run refused it), says why, and leaves nothing beside it.
TEST(CalibrationFileTest, AWriteThatFailsLeavesTheFileAsItWasAndSaysWhy) {
  const MachineModel builtin = DefaultMachineModel();
  const std::string good = FormatMachineModel(builtin);
  const std::string path = TempFile(good);
  const std::string dir = path.substr(0, path.rfind('/'));
  auto leftovers = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.path().string().rfind(path + ".tmp.", 0) == 0) ++n;
    }
    return n;
  };
  // The disk fills up under the write (a file size limit fails it as ENOSPC would).
  struct sigaction ignore {
  }, old_action{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &old_action), 0);
  struct rlimit old_limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit small = old_limit;
  small.rlim_cur = 16;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  MachineModel other = builtin;
  other.cores = 7;
  const Status full = WriteMachineModel(path, other);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  ::sigaction(SIGXFSZ, &old_action, nullptr);
  EXPECT_FALSE(full.ok());
  EXPECT_NE(full.message().find("cannot write calibration file '" + path +
                                "': File too large "
                                "(the file is unchanged)"),
            std::string::npos)
      << full;
  std::ifstream in(path);
  std::stringstream kept;
  kept << in.rdbuf();
  EXPECT_EQ(kept.str(), good);
  EXPECT_EQ(leftovers(), 0);
  // A folder that is not there: named, with the reason.
  const Status nowhere = WriteMachineModel("/nonexistent/gyre/model.txt", builtin);
  EXPECT_EQ(nowhere.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(nowhere.message().find("No such file or directory"), std::string::npos) << nowhere;
  // And a write that works replaces the file whole.
  ASSERT_TRUE(WriteMachineModel(path, other).ok());
  auto read = ReadMachineModel(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->cores, 7);
  EXPECT_EQ(leftovers(), 0);
  std::remove(path.c_str());
}

void ExpectError(const std::string& text, const std::vector<std::string>& parts) {
  auto m = ParseMachineModel(text, "/etc/gyre/model.txt");
  ASSERT_FALSE(m.ok()) << text;
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  const std::string msg = m.status().message();
  EXPECT_NE(msg.find("calibration file '/etc/gyre/model.txt'"), std::string::npos) << msg;
  for (const std::string& part : parts) {
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  }
}

TEST(CalibrationFileTest, ErrorsNameTheFileTheLineAndTheKey) {
  const std::string ok = "cores = 2\np4.alpha_us = 10\np4.beta_GBps = 2\n";
  ASSERT_TRUE(ParseMachineModel(ok, "x").ok());
  ExpectError(ok + "p4.alpah_us = 3\n", {"line 4", "unknown key 'p4.alpah_us'", "p<N>.alpha_us"});
  ExpectError(ok + "alpha_us = 3\n", {"line 4", "unknown key 'alpha_us'"});
  ExpectError("# model\ncores = 2\np4.alpha_us = fast\np4.beta_GBps = 2\n",
              {"line 3", "'p4.alpha_us'", "'fast'"});
  ExpectError("p4.alpha_us = 10\np4.beta_GBps = 0\n", {"line 2", "'p4.beta_GBps'", "positive"});
  ExpectError("p4.alpha_us = -1\np4.beta_GBps = 2\n", {"line 1", "'p4.alpha_us'"});
  ExpectError("p4.alpha_us = 10\np4.beta_GBps = 2 GB/s\n", {"line 2", "'2 GB/s'"});
  ExpectError("cores = 1.5\np4.alpha_us = 10\np4.beta_GBps = 2\n", {"line 1", "'cores'"});
  ExpectError(ok + "p4.alpha_us = 11\n", {"line 4", "'p4.alpha_us'", "already set on line 2"});
  ExpectError("p4.alpha_us 10\n", {"line 1", "key = value"});
  // A binary file's bytes are not echoed to the terminal as they are.
  ExpectError(std::string("\x1b[2J\xc8\x01") + std::string(200, 'z') + "\n",
              {"line 1", "not '\\x1b[2J\\xc8\\x01zz", "... (206 bytes)"});
  ExpectError(ok + "p4.alpha_us\x07 = 3\n", {"line 4", "unknown key 'p4.alpha_us\\x07'"});
  ExpectError("p8.alpha_us = 10\n", {"'p8.beta_GBps'"});
  ExpectError("# nothing\n", {"no p<N>.alpha_us"});
  auto missing = ReadMachineModel("/nonexistent/gyre-model.txt");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/gyre-model.txt"), std::string::npos);
  // An endless or huge file is refused after the cap, not read into memory whole; a folder
  // says why it cannot be read.
  auto endless = ReadMachineModel("/dev/zero");
  ASSERT_FALSE(endless.ok());
  EXPECT_NE(endless.status().message().find("'/dev/zero' is larger than 1048576 bytes"),
            std::string::npos)
      << endless.status().ToString();
  auto folder = ReadMachineModel("/tmp");
  ASSERT_FALSE(folder.ok());
  EXPECT_NE(folder.status().message().find("Is a directory"), std::string::npos)
      << folder.status().ToString();
}

TEST(CalibrationFileTest, ValuesArePlainDecimalNumbersInRange) {
  const std::string ok = "cores = 2\np4.alpha_us = 10\np4.beta_GBps = 2\n";
  // Every decimal spelling is taken, and what it says is what is stored.
  auto spelled = ParseMachineModel(
      "cores = +2\np4.alpha_us = 1.5e1\np4.overhead_us = .5\np4.beta_GBps = 2.\n"
      "p4.reduce_GBps = 1E-300\np4.copy_GBps = 0\n",
      "x");
  ASSERT_TRUE(spelled.ok()) << spelled.status().ToString();
  EXPECT_EQ(spelled->cores, 2);
  EXPECT_DOUBLE_EQ(spelled->At(4).alpha_s, 15e-6);
  EXPECT_DOUBLE_EQ(spelled->At(4).overhead_s, 0.5e-6);
  EXPECT_DOUBLE_EQ(spelled->At(4).beta_s_per_byte, 0.5e-9);
  EXPECT_TRUE(std::isfinite(spelled->At(4).gamma_s_per_byte));
  EXPECT_EQ(spelled->At(4).delta_s_per_byte, 0);
  // Hex, inf, nan and other strtod extras are not numbers here, and the error says what is.
  for (const std::string bad : {"0x10", "0X1p4", "inf", "nan", "1e", "e5", ".", "1.5.2", "--1"}) {
    ExpectError(ok + "p4.overhead_us = " + bad + "\n",
                {"line 4", "'p4.overhead_us' needs a non-negative decimal number", "12.5",
                 "not '" + bad + "'"});
  }
  ExpectError("cores = 0x2\n" + ok.substr(ok.find('\n') + 1), {"line 1", "'cores'", "'0x2'"});
  // A value too near 0 or too large for a double is out of range, not "not a number".
  for (const std::string far : {"1e-320", "4.9e-324", "1e-301", "1e400", "1e301"}) {
    ExpectError(ok + "p4.reduce_GBps = " + far + "\n",
                {"line 4", "'p4.reduce_GBps' has '" + far + "', out of range",
                 "want 0 or a number from 1e-300 to 1e300"});
  }
  ExpectError("p4.alpha_us = 10\np4.beta_GBps = 1e-320\n",
              {"line 2", "'p4.beta_GBps' has '1e-320', out of range",
               "want a number from 1e-300 to 1e300"});
  ExpectError("p4.alpha_us = -1e-320\np4.beta_GBps = 2\n", {"line 1", "out of range"});
}

TEST(CalibrationFileTest, CommunicatorUsesTheFileAndFailsAutoCallsOnABadOne) {
  // A file whose only point makes messages cost everything: auto is direct on 2 ranks.
  const std::string good = TempFile("cores = 2\np2.alpha_us = 1000\np2.beta_GBps = 1000\n");
  const std::string bad = TempFile("cores = 2\np2.alpha_us = 10\np2.beta = 2\n");
  const CollectiveSpec call = MakeSpec(Collective::kAllreduce, 1 << 20, DataType::kFloat32);
  {
    CommOptions o;
    o.calibration_file = good;
    auto world = LoopbackHub::CreateWorld(2);
    Communicator comm(std::move(world[0]), o);
    auto r = comm.Resolve(call, {});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->algorithm, RankCandidates(r.value(), *ReadMachineModel(good)).front().algorithm);
  }
  {
    CommOptions o;
    o.calibration_file = bad;
    auto world = LoopbackHub::CreateWorld(2);
    Communicator comm(std::move(world[0]), o);
    auto r = comm.Resolve(call, {});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("'p2.beta'"), std::string::npos);
    CallOptions forced;  // a named algorithm does not need the model
    forced.algorithm = Algorithm::kRing;
    EXPECT_TRUE(comm.Resolve(call, forced).ok());
  }
  {
    // Thresholds set explicitly decide as before the model.
    CommOptions o;
    o.thresholds = SelectionThresholds();
    o.thresholds->allreduce_large_bytes = 64 << 20;
    auto world = LoopbackHub::CreateWorld(2);
    Communicator comm(std::move(world[0]), o);
    auto r = comm.Resolve(call, {});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->algorithm, Algorithm::kRabenseifner);
  }
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

TEST(CalibrationFileTest, ChoiceBasisDigestsWhatTheAutomaticChoiceReads) {
  ::unsetenv("GYRE_CALIBRATION");  // the built-in model when no file is given
  auto basis = [](const std::string& file, bool tune = false, int p = 2) {
    CommOptions o;
    o.calibration_file = file;
    o.tune = tune;
    auto world = LoopbackHub::CreateWorld(p);
    Communicator comm(std::move(world[0]), o);
    return comm.choice_basis();
  };
  const std::string a = TempFile("cores = 2\np2.alpha_us = 0\np2.beta_GBps = 3\n");
  // The same figures at p = 2, written otherwise, and with a point only p = 8 reads.
  const std::string a2 = TempFile(
      "# same\np2.beta_GBps = 3.0\ncores = 2\np2.alpha_us = 0.0\n"
      "p8.alpha_us = 9\np8.beta_GBps = 1\n");
  const std::string b = TempFile("cores = 2\np2.alpha_us = 1e6\np2.beta_GBps = 3\n");
  const std::string c = TempFile("cores = 4\np2.alpha_us = 0\np2.beta_GBps = 3\n");
  const std::string bad = TempFile("cores = 2\np2.beta = 2\n");
  const ChoiceBasis ba = basis(a);
  EXPECT_NE(ba.one_host, 0u);
  EXPECT_EQ(ba.source, "calibration file " + a);
  EXPECT_EQ(basis(a2).one_host, ba.one_host);
  EXPECT_NE(basis(a2, false, 8).one_host, basis(a, false, 8).one_host);
  EXPECT_NE(basis(b).one_host, ba.one_host);
  EXPECT_NE(basis(c).one_host, ba.one_host);  // cores: the CPU-sharing terms
  EXPECT_EQ(basis("").source, "the built-in one, no calibration file");
  EXPECT_NE(basis("").one_host, ba.one_host);
  // Tuning moves the choice on one host only.
  const ChoiceBasis tuned = basis(a, true);
  EXPECT_NE(tuned.one_host, ba.one_host);
  EXPECT_EQ(tuned.source, "calibration file " + a + ", online tuning");
  // Across hosts the model is not read: any usable model chooses alike there.
  EXPECT_EQ(basis(b).across_hosts, ba.across_hosts);
  EXPECT_EQ(tuned.across_hosts, ba.across_hosts);
  // A file that cannot be used fails every automatic call: unlike any usable one.
  const ChoiceBasis broken = basis(bad);
  EXPECT_NE(broken.one_host, ba.one_host);
  EXPECT_NE(broken.across_hosts, ba.across_hosts);
  EXPECT_NE(broken.source.find("'p2.beta'"), std::string::npos) << broken.source;
  // Beyond kMaxModelRanks the model is not read on one host either.
  EXPECT_EQ(basis(a, false, kMaxModelRanks + 1).one_host,
            basis(b, false, kMaxModelRanks + 1).one_host);
  for (const std::string& f : {a, a2, b, c, bad}) std::remove(f.c_str());
}

TEST(ExplainChoiceTest, NamesTheWinnerTheRunnerUpAndTheTerm) {
  const MachineModel model = OnePoint(Point(4, 100, 0, 1e6, 0));
  const CollectiveSpec s = Spec(Collective::kAllreduce, 4, 16);
  const std::vector<Estimate> est = RankCandidates(s, model);
  ASSERT_GE(est.size(), 2u);
  const std::string why = ExplainChoice(s, model, est);
  EXPECT_EQ(why.rfind(AlgorithmName(est.front().algorithm), 0), 0u) << why;
  EXPECT_NE(why.find(AlgorithmName(est[1].algorithm)), std::string::npos) << why;
  EXPECT_NE(why.find("latency (rounds x alpha)"), std::string::npos) << why;
}

}  // namespace
}  // namespace gyre::algo
