// The simulated transport and driver: failures are reported rather than hung, byte scale,
// phantom buffers and reduction time, lower bounds, the study's claims, and scale.
#include "core/sim/sim_world.h"

#include <gtest/gtest.h>

#include <sstream>

#include "core/algo/collective.h"
#include "core/algo/select.h"
#include "core/comm/communicator.h"
#include "core/sim/simulator.h"
#include "core/sim/study.h"

namespace gyre::sim {
namespace {

using algo::Algorithm;
using algo::Collective;
using algo::CollectiveSpec;

algo::Step SendStep(int peer, uint64_t tag, int64_t n) {
  algo::Step s;
  s.kind = algo::StepKind::kSend;
  s.peer = peer;
  s.tag = tag;
  s.src = algo::InputRegion(0, n);
  return s;
}

algo::Step RecvStep(int peer, uint64_t tag, int64_t n) {
  algo::Step s;
  s.kind = algo::StepKind::kRecv;
  s.peer = peer;
  s.tag = tag;
  s.dst = algo::OutputRegion(0, n);
  return s;
}

// Runs hand-written schedules (phantom) on a 2-device switch.
Status RunSchedules(std::vector<algo::RankSchedule> schedules) {
  const int p = static_cast<int>(schedules.size());
  auto topology = MakeTopology("switch", p).value();
  Network network(topology.get(), {0, 1});
  SimWorld world(&network, p);
  CollectiveSpec spec;
  spec.world_size = p;
  spec.count = 4;
  OpContext ctx;
  ctx.seq = 7;
  ctx.desc = MakeOpDesc(spec);
  ctx.name = "test op";
  std::vector<std::unique_ptr<OpRun>> runs;
  std::vector<OpRun*> ptrs;
  for (int r = 0; r < p; ++r) {
    schedules[r].rank = r;
    runs.push_back(std::make_unique<OpRun>(schedules[r], spec, ctx, OpBuffers{}, nullptr,
                                           world.transport(r), /*phantom=*/true));
    GYRE_RETURN_IF_ERROR(runs.back()->Prepare());
    world.SetSchedule(r, &schedules[r], 4);
    ptrs.push_back(runs.back().get());
  }
  return world.Run(ptrs, Deadline::After(*SteadyClock::Get(), Seconds(30)));
}

TEST(SimWorld, SizeMismatchFailsTheReceive) {
  algo::RankSchedule a, b;
  a.steps = {SendStep(1, 5, 4)};
  b.steps = {RecvStep(0, 5, 3)};
  Status s = RunSchedules({a, b});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("expected 12 bytes"), std::string::npos) << s;
  EXPECT_NE(s.message().find("sent 16 bytes"), std::string::npos) << s;
}

TEST(SimWorld, AReceiveNobodySendsIsReportedNotHung) {
  algo::RankSchedule a, b;
  a.steps = {SendStep(1, 5, 4)};
  b.steps = {RecvStep(0, 5, 4), RecvStep(0, 6, 4)};
  Status s = RunSchedules({a, b});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("1 of 2 ranks unfinished"), std::string::npos) << s;
  EXPECT_NE(s.message().find("rank 1 has 1 of 2 steps done"), std::string::npos) << s;
  EXPECT_NE(s.message().find("receive from rank 0 (device 0 of switch)"), std::string::npos) << s;
}

TEST(SimWorld, ShutDownTransportFailsNewCalls) {
  auto topology = MakeTopology("switch", 2).value();
  Network network(topology.get(), {0, 1});
  SimWorld world(&network, 2);
  world.transport(0)->Shutdown();
  Status got;
  MessageHeader h;
  world.transport(0)->Send(1, h, nullptr, 0, [&](Status s) { got = s; });
  EXPECT_EQ(got.code(), StatusCode::kUnavailable) << got;
  EXPECT_EQ(&world.transport(1)->clock(), &world.clock());
  EXPECT_EQ(world.transport(1)->DescribePeer(0), "rank 0 (device 0 of switch)");
}

CollectiveSpec Ring(int p, int64_t n) {
  CollectiveSpec s;
  s.algorithm = Algorithm::kRing;
  s.world_size = p;
  s.count = n;
  return s;
}

SimOptions OneGigabit() {
  SimOptions o;
  o.topology_options.link = LinkParams{1'000'000'000, 1000};
  return o;
}

TEST(SimWorld, ByteScalePhantomAndReductionTime) {
  SimOptions o = OneGigabit();
  StatusOr<SimResult> base = Simulate(Ring(4, 4000), o);
  ASSERT_TRUE(base.ok()) << base.status();
  // 6 steps of 1000 elements: 6 us of latency and 6 * 4000 bytes at 1 GB/s.
  EXPECT_EQ(base->time_ns, 6 * 1000 + 6 * 4000);
  EXPECT_EQ(base->steps, 6);
  EXPECT_EQ(base->messages, 4 * 6);
  EXPECT_TRUE(base->checked && base->ok);

  o.byte_scale = 10;
  StatusOr<SimResult> scaled = Simulate(Ring(4, 4000), o);
  ASSERT_TRUE(scaled.ok());
  EXPECT_EQ(scaled->time_ns, 6 * 1000 + 10 * 6 * 4000);
  EXPECT_EQ(scaled->bytes, 10 * 4000 * 4);
  EXPECT_TRUE(scaled->ok);

  SimOptions ph = OneGigabit();
  ph.phantom = true;
  StatusOr<SimResult> phantom = Simulate(Ring(4, 40000), ph);
  ASSERT_TRUE(phantom.ok());
  EXPECT_EQ(phantom->time_ns, scaled->time_ns);
  EXPECT_FALSE(phantom->checked);

  // Each of the 3 reduce-scatter steps folds 4000 bytes at 1 GB/s on the critical path.
  SimOptions slow = OneGigabit();
  slow.reduce_bytes_per_s = 1e9;
  StatusOr<SimResult> reduced = Simulate(Ring(4, 4000), slow);
  ASSERT_TRUE(reduced.ok());
  EXPECT_EQ(reduced->time_ns, base->time_ns + 3 * 4000);
  EXPECT_TRUE(reduced->ok);
}

// The automatic algorithm is the one gyre picks for the timed size, count x byte scale,
// not for the few elements that stand in for it to check the data: a 64 MiB allreduce on 3
// ranks checked on 2048 elements ran recursive doubling where gyre runs ring.
TEST(SimWorld, AutoIsChosenForTheTimedSize) {
  int differs = 0;  // cases where the real count alone would choose otherwise
  for (Collective c : {Collective::kAllreduce, Collective::kBroadcast, Collective::kReduce,
                       Collective::kAllgather, Collective::kReduceScatter, Collective::kAlltoall}) {
    for (int p : {3, 8}) {
      for (int64_t scale : {int64_t{1}, int64_t{64}, int64_t{4096}, int64_t{1} << 20}) {
        for (bool phantom : {false, true}) {
          CollectiveSpec s;
          s.collective = c;
          s.algorithm = Algorithm::kAuto;
          s.world_size = p;
          s.count = 16 * p;
          SimOptions o;
          o.byte_scale = scale;
          o.phantom = phantom;
          CollectiveSpec timed = s;
          timed.count = s.count * scale;
          const Algorithm want = algo::SelectAlgorithm(timed);
          if (want != algo::SelectAlgorithm(s)) ++differs;
          SCOPED_TRACE(s.ToString() + " x " + std::to_string(scale) + (phantom ? " phantom" : ""));
          StatusOr<SimResult> r = Simulate(s, o);
          ASSERT_TRUE(r.ok()) << r.status();
          EXPECT_EQ(std::string(algo::AlgorithmName(r->spec.algorithm)),
                    std::string(algo::AlgorithmName(want)));
          EXPECT_EQ(r->spec.count, s.count);
          EXPECT_EQ(r->bytes, CallBytes(timed));
          EXPECT_TRUE(phantom || r->ok);
        }
      }
    }
  }
  // The sizes span the selection's thresholds, so some choices depend on the scale.
  EXPECT_GT(differs, 0);
  // A deterministic call runs the canonical schedule whatever its size.
  CollectiveSpec det = Ring(4, 64);
  det.algorithm = Algorithm::kAuto;
  det.deterministic = true;
  SimOptions o;
  o.byte_scale = 1 << 20;
  StatusOr<SimResult> r = Simulate(det, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->spec.algorithm, Algorithm::kCanonical);
}

// A timed call over 1 GiB with no segment asked for runs in 64 MiB segments, as gyre's
// calls do (algo::LargeCallSegmentElems): a 2 GiB ring allreduce at p = 4 sends each
// 512 MiB chunk as 8 messages; at 512 MiB (under the line) as one. A segment asked for
// stays as it was.
TEST(SimWorld, ATimedCallOverOneGiBRunsInTheDefaultSegments) {
  const CollectiveSpec ring = Ring(4, 4096);
  SimOptions o;
  o.byte_scale = (int64_t{2} << 30) / (4096 * 4);  // 2 GiB of float32
  StatusOr<SimResult> big = Simulate(ring, o);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->bytes, int64_t{2} << 30);
  EXPECT_EQ(big->spec.segment_elems * o.byte_scale * 4, algo::kLargeCallSegmentBytes);
  EXPECT_EQ(big->messages, 4 * 2 * 3 * 8);
  o.byte_scale /= 4;  // 512 MiB
  StatusOr<SimResult> small = Simulate(ring, o);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->spec.segment_elems, 0);
  EXPECT_EQ(small->messages, 4 * 2 * 3);
  CollectiveSpec asked = ring;
  asked.segment_elems = 512;  // two segments per chunk
  o.byte_scale *= 4;
  StatusOr<SimResult> kept = Simulate(asked, o);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->spec.segment_elems, 512);
  EXPECT_EQ(kept->messages, 4 * 2 * 3 * 2);
}

TEST(SimWorld, ReportsLinksAndBusiest) {
  SimOptions o = OneGigabit();
  o.topology = "torus2d:4x4";
  o.mapping = "random:7";
  StatusOr<SimResult> r = Simulate(Ring(16, 1600), o);
  ASSERT_TRUE(r.ok());
  ASSERT_GE(r->busiest, 0);
  int64_t total = 0;
  for (const LinkReport& l : r->links) {
    EXPECT_LE(l.bytes, r->links[r->busiest].bytes);
    EXPECT_LE(l.utilisation, 1.0 + 1e-9);
    total += l.bytes;
  }
  EXPECT_EQ(total, r->link_bytes);
  // Every message crosses mean_hops links on average.
  const int64_t payload = 16 * 30 * 100 * 4;
  EXPECT_EQ(r->link_bytes, static_cast<int64_t>(r->mean_hops * payload + 0.5));
  const std::string json = ResultJson(*r, true);
  EXPECT_NE(json.find("\"busiest_link\""), std::string::npos);
  EXPECT_NE(json.find("\"links\": ["), std::string::npos);
  EXPECT_NE(FormatResult(*r).find("(busiest)"), std::string::npos);
}

TEST(SimLowerBounds, NoRunBeatsItsBound) {
  for (const char* topology : {"switch", "ring", "torus2d:4x4", "two_level:2x8", "fat_tree:4x4"}) {
    for (int c = 0; c < algo::kNumCollectives; ++c) {
      for (Algorithm a : algo::AlgorithmsFor(static_cast<Collective>(c))) {
        CollectiveSpec s;
        s.collective = static_cast<Collective>(c);
        s.algorithm = a;
        s.world_size = 16;
        s.count = 16 * 64;
        s.root = 3;
        SimOptions o;
        o.topology = topology;
        o.byte_scale = 64;
        SCOPED_TRACE(s.ToString() + " on " + topology);
        StatusOr<SimResult> r = Simulate(s, o);
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_TRUE(r->ok);
        ASSERT_GT(r->bounds.Max(), 0);
        EXPECT_GE(r->ratio_to_bound, 1.0 - 1e-9);
      }
    }
  }
}

TEST(SimLowerBounds, ValuesOfTheStudiedCases) {
  CollectiveSpec a2a;
  a2a.collective = Collective::kAlltoall;
  a2a.algorithm = Algorithm::kPairwise;
  a2a.world_size = 16;
  a2a.count = 1 << 18;  // 1 MiB blocks: 16 MiB per device
  auto ring = MakeTopology("ring", 16).value();
  const LowerBounds b = ComputeLowerBounds(a2a, 1, *ring, *MakeMapping("identity", *ring));
  EXPECT_NEAR(b.bisection_s, 16.0 * (16 << 20) / 4 / (2 * 45e9), 1e-12);
  EXPECT_NEAR(b.injection_s, 15.0 * (1 << 20) / (2 * 45e9), 1e-12);
  EXPECT_NEAR(b.latency_s, 8 * 1e-6, 1e-12);  // the farthest device is 8 links away
  auto sw = MakeTopology("switch", 16).value();
  const LowerBounds ar =
      ComputeLowerBounds(Ring(16, 1 << 20), 1, *sw, *MakeMapping("identity", *sw));
  EXPECT_NEAR(ar.injection_s, 2.0 * 15 / 16 * (4 << 20) / 45e9, 1e-12);
}

TEST(SimStudy, TablesHoldTheirClaims) {
  auto small = MappingStudy(64 << 10);
  ASSERT_TRUE(small.ok()) << small.status();
  auto large = MappingStudy(64 << 20);
  ASSERT_TRUE(large.ok()) << large.status();
  auto time = [](const std::vector<MappingRow>& rows, const std::string& mapping, Algorithm a) {
    for (const MappingRow& r : rows) {
      if (r.topology == "torus2d:4x4" && r.mapping == mapping && r.result.spec.algorithm == a) {
        return r.result.time_ns;
      }
    }
    return int64_t{-1};
  };
  for (const auto* rows : {&*small, &*large}) {
    for (const MappingRow& r : *rows) EXPECT_TRUE(r.result.ok) << r.topology << " " << r.mapping;
    EXPECT_LE(time(*rows, "snake", Algorithm::kRing), time(*rows, "row_major", Algorithm::kRing));
    EXPECT_LT(time(*rows, "row_major", Algorithm::kRing),
              time(*rows, "random:7", Algorithm::kRing));
  }
  // At 64 KiB the 2-D allreduce's 12 steps beat the ring's 30.
  EXPECT_LT(2 * time(*small, "row_major", Algorithm::kTwoD),
            time(*small, "snake", Algorithm::kRing));
  for (const MappingRow& r : *large) {
    EXPECT_GE(r.result.time_ns * 1e-9, r.ideal_s);
    if (r.mapping == "snake") {
      EXPECT_LT(r.result.time_ns * 1e-9, 1.02 * r.ideal_s);
    }
  }
  auto a2a = AlltoallStudy(16 << 20);
  ASSERT_TRUE(a2a.ok());
  ASSERT_EQ(a2a->size(), 6u);
  for (const AlltoallRow& r : *a2a) {
    EXPECT_TRUE(r.result.ok);
    EXPECT_GE(r.result.ratio_to_bound, 1.0 - 1e-9);
    if (r.topology == "switch") {
      EXPECT_LT(r.result.ratio_to_bound, 1.01);
    }
  }
  auto two = TwoLevelStudy();
  ASSERT_TRUE(two.ok());
  for (const TwoLevelRow& r : *two) {
    EXPECT_TRUE(r.ring.ok && r.hierarchical.ok);
    EXPECT_LT(r.hierarchical.time_ns, r.ring.time_ns) << r.nodes << " nodes";
    EXPECT_GE(r.hierarchical.time_ns * 1e-9, r.ideal_inter_s);
  }
  std::ostringstream out;
  ASSERT_TRUE(RunTopologyStudy(out, /*json=*/true).ok());
  const std::string text = out.str();
  size_t sentences = 0;
  for (size_t pos = 0; (pos = text.find("  -> ", pos)) != std::string::npos; ++pos) ++sentences;
  EXPECT_EQ(sentences, 4u) << text;
  EXPECT_NE(text.find("\"topology\": \"two_level:8x8\""), std::string::npos);
}

TEST(SimScale, ThousandsOfRanks) {
  SimOptions o;
  o.phantom = true;
  CollectiveSpec rd;
  rd.algorithm = Algorithm::kRecursiveDoubling;
  rd.world_size = 4096;
  rd.count = 16 << 20;
  StatusOr<SimResult> r = Simulate(rd, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps, 12);
  // 12 exchanges of the whole 64 MiB at 45 GB/s, 1 us each.
  EXPECT_EQ(r->time_ns, 12 * (1000 + SerializationNs(64 << 20, 45'000'000'000)));
  EXPECT_GT(r->events_per_s, 0);
  std::printf("4096-rank recursive doubling: %lld events in %.2f s (%.0f events/s)\n",
              static_cast<long long>(r->events), r->wall_s, r->events_per_s);

  StatusOr<SimResult> ring = Simulate(Ring(256, 256 * 1024), o);
  ASSERT_TRUE(ring.ok());
  EXPECT_EQ(ring->steps, 2 * 255);
  EXPECT_EQ(ring->time_ns, 2 * 255 * (1000 + SerializationNs(4096, 45'000'000'000)));
  std::printf("256-rank ring: %lld events in %.2f s (%.0f events/s)\n",
              static_cast<long long>(ring->events), ring->wall_s, ring->events_per_s);
}

}  // namespace
}  // namespace gyre::sim
