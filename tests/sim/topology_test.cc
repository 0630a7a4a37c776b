// Topologies, routes and hop counts, bisection and injection bandwidth, and the link model
// (latency sums, bottleneck bandwidth, first-come-first-served waiting, full duplex).
#include "core/sim/topology.h"

#include <gtest/gtest.h>

#include "core/algo/collective.h"
#include "core/sim/network.h"
#include "core/sim/simulator.h"

namespace gyre::sim {
namespace {

std::unique_ptr<Topology> Make(const std::string& spec, int n, TopologyOptions o = {}) {
  StatusOr<std::unique_ptr<Topology>> t = MakeTopology(spec, n, o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// The devices a route visits, following link ends.
std::vector<int> Visits(const Topology& t, int a, int b) {
  std::vector<int> path;
  t.Route(a, b, &path);
  std::vector<int> nodes = {a};
  for (int l : path) {
    EXPECT_EQ(t.links()[l].from, nodes.back()) << "route is not connected";
    nodes.push_back(t.links()[l].to);
  }
  EXPECT_EQ(nodes.back(), b);
  std::vector<int> devices;
  for (int v : nodes) {
    if (v < t.num_devices()) devices.push_back(v);
  }
  return devices;
}

TEST(SimTopology, SwitchRoutesUpAndDown) {
  auto t = Make("switch", 8);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->links().size(), 16u);
  for (int a = 0; a < 8; ++a) {
    for (int b = 0; b < 8; ++b) {
      if (a != b) {
        EXPECT_EQ(t->Hops(a, b), 2);
      }
    }
  }
  EXPECT_EQ(t->RouteLatencyNs(0, 5), 1000);
  EXPECT_DOUBLE_EQ(t->InjectionBandwidth(3), 45e9);
  EXPECT_DOUBLE_EQ(t->BisectionBandwidth(), 4 * 45e9);
}

TEST(SimTopology, RingTakesTheShorterWay) {
  auto t = Make("ring", 8);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->links().size(), 16u);  // full duplex: one link per direction per cable
  EXPECT_EQ(Visits(*t, 0, 3), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(Visits(*t, 0, 6), (std::vector<int>{0, 7, 6}));
  EXPECT_EQ(Visits(*t, 0, 4), (std::vector<int>{0, 1, 2, 3, 4}));  // tie: the + way
  EXPECT_EQ(Visits(*t, 5, 1), (std::vector<int>{5, 6, 7, 0, 1}));
  for (int d = 1; d < 8; ++d) EXPECT_EQ(t->Hops(0, d), std::min(d, 8 - d));
  EXPECT_DOUBLE_EQ(t->InjectionBandwidth(0), 2 * 45e9);
  EXPECT_DOUBLE_EQ(t->BisectionBandwidth(), 2 * 45e9);
  auto two = Make("ring", 2);
  ASSERT_TRUE(two);
  EXPECT_EQ(two->links().size(), 2u);  // one cable between the pair
  EXPECT_EQ(two->Hops(0, 1), 1);
  EXPECT_EQ(two->Hops(1, 0), 1);
}

TEST(SimTopology, TorusRoutesColumnsFirstWithWrapAround) {
  auto t = Make("torus2d:4x4", 16);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->links().size(), 64u);
  // (0,0) -> (2,3): x the short way round (0 -> 3 via the wrap), then y down twice.
  EXPECT_EQ(Visits(*t, 0, 11), (std::vector<int>{0, 3, 7, 11}));
  // (3,3) -> (0,0): one wrap in each dimension.
  EXPECT_EQ(Visits(*t, 15, 0), (std::vector<int>{15, 12, 0}));
  int max_hops = 0;
  int64_t total = 0;
  for (int a = 0; a < 16; ++a) {
    for (int b = 0; b < 16; ++b) {
      if (a == b) continue;
      const int h = t->Hops(a, b);
      const int dx = std::abs(a % 4 - b % 4);
      const int dy = std::abs(a / 4 - b / 4);
      EXPECT_EQ(h, std::min(dx, 4 - dx) + std::min(dy, 4 - dy));
      max_hops = std::max(max_hops, h);
      total += h;
    }
  }
  EXPECT_EQ(max_hops, 4);     // the diameter of a 4x4 torus
  EXPECT_EQ(total, 16 * 32);  // mean distance 32/15 over the other 15 devices
  EXPECT_DOUBLE_EQ(t->InjectionBandwidth(5), 4 * 45e9);
  EXPECT_DOUBLE_EQ(t->BisectionBandwidth(), 8 * 45e9);
  auto wide = Make("torus2d:2x8", 16);
  ASSERT_TRUE(wide);
  EXPECT_DOUBLE_EQ(wide->BisectionBandwidth(), 4 * 45e9);   // cut the 8-long rings
  EXPECT_DOUBLE_EQ(wide->InjectionBandwidth(0), 3 * 45e9);  // +x, -x, one cable in y
  int rows = 0, cols = 0;
  wide->Layout(&rows, &cols);
  EXPECT_EQ(rows, 2);
  EXPECT_EQ(cols, 8);
}

TEST(SimTopology, TwoLevelIsRailAligned) {
  auto t = Make("two_level:4x8", 32);
  ASSERT_TRUE(t);
  // Same node: NVLink up and down.
  std::vector<int> path;
  t->Route(1, 6, &path);
  ASSERT_EQ(path.size(), 2u);
  EXPECT_EQ(t->links()[path[0]].params.bandwidth_bps, 450'000'000'000);
  // Same rail, other node: NIC up and down, no NVLink.
  path.clear();
  t->Route(3, 8 * 2 + 3, &path);
  ASSERT_EQ(path.size(), 2u);
  EXPECT_EQ(t->links()[path[0]].name, "d3.nic->rail3");
  // Other rail: NVLink to the GPU on the destination's rail first, then that GPU's NIC.
  EXPECT_EQ(Visits(*t, 7, 8 + 0), (std::vector<int>{7, 0, 8}));
  path.clear();
  t->Route(7, 8, &path);
  ASSERT_EQ(path.size(), 4u);
  EXPECT_EQ(t->links()[path[2]].name, "d0.nic->rail0");
  EXPECT_EQ(t->RouteLatencyNs(7, 8), 1000 + 4000);
  EXPECT_DOUBLE_EQ(t->InjectionBandwidth(0), 450e9 + 50e9);
  EXPECT_DOUBLE_EQ(t->BisectionBandwidth(), 2 * 8 * 50e9);
}

TEST(SimTopology, FatTreeUsesDestinationModSpines) {
  TopologyOptions o;
  o.fat_tree_spines = 2;
  auto t = Make("fat_tree:4x4", 16, o);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->Hops(0, 3), 2);  // same leaf
  std::vector<int> path;
  t->Route(0, 13, &path);
  ASSERT_EQ(path.size(), 4u);
  EXPECT_EQ(t->links()[path[1]].name, "leaf0->spine1");  // 13 mod 2
  EXPECT_EQ(t->links()[path[2]].name, "spine1->leaf3");
  EXPECT_DOUBLE_EQ(t->BisectionBandwidth(), 2 * 2 * 45e9);  // two leaves' uplinks
  auto full = Make("fat_tree:4x4", 16);
  ASSERT_TRUE(full);
  EXPECT_DOUBLE_EQ(full->BisectionBandwidth(), 2 * 4 * 45e9);
}

// Every leaf is cabled to every spine, built up front: a spine count without a bound grew
// to gigabytes (2 leaves x 100 million spines) before a message was sent.
TEST(SimTopology, FatTreeSpinesAreBounded) {
  TopologyOptions o;
  o.fat_tree_spines = 100'000'000;
  auto many = MakeTopology("fat_tree:2x8", 16, o);
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(many.status().message().find("100000000 spines, more than its 16 devices"),
            std::string::npos)
      << many.status();
  // One spine per device is the most a route can use.
  o.fat_tree_spines = 16;
  EXPECT_TRUE(MakeTopology("fat_tree:2x8", 16, o).ok());
  // 4096 leaves x 4096 spines would be 33 million links.
  o.fat_tree_spines = 4096;
  auto cables = MakeTopology("fat_tree:4096x1", 4096, o);
  ASSERT_FALSE(cables.ok());
  EXPECT_NE(cables.status().message().find("4096 leaves x 4096 spines is 16777216 leaf-spine "
                                           "cables, more than 1048576"),
            std::string::npos)
      << cables.status();
  o.fat_tree_spines = 256;
  EXPECT_TRUE(MakeTopology("fat_tree:4096x1", 4096, o).ok());
}

TEST(SimTopology, BadSpecsAreInvalidArgument) {
  for (const char* spec : {"torus2d:4x", "torus2d:0x4", "mesh", "two_level:3", "switch:4"}) {
    auto t = MakeTopology(spec, 16);
    ASSERT_FALSE(t.ok()) << spec;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << spec;
  }
  auto wrong = MakeTopology("torus2d:4x4", 12);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("16 devices"), std::string::npos) << wrong.status();
  // Dimensions whose product passes an int count it whole; one too large says its range.
  auto huge = MakeTopology("fat_tree:1000000x1000000", 16);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("has 1000000000000 devices"), std::string::npos)
      << huge.status();
  auto too_wide = MakeTopology("fat_tree:4096x1048577", 16);
  ASSERT_FALSE(too_wide.ok());
  EXPECT_NE(
      too_wide.status().message().find("fat_tree wants AxB, each a whole number from 1 to 1048576"),
      std::string::npos)
      << too_wide.status();
  EXPECT_FALSE(LinkPreset("ethernet").ok());
  ASSERT_TRUE(LinkPreset("ib_ndr").ok());
  EXPECT_GT(LinkPreset("ib_ndr")->latency_ns, LinkPreset("nvlink")->latency_ns);
  EXPECT_EQ(LinkPreset("nvlink")->bandwidth_bps, 450'000'000'000);
  EXPECT_EQ(LinkPreset("ici")->bandwidth_bps, 45'000'000'000);
}

// One message at a time, advanced by hand (there is no contention to order).
Flight Fly(Network& net, int src, int dst, int64_t bytes, int64_t now) {
  Flight f;
  net.Start(src, dst, bytes, now, &f);
  while (!net.Advance(&f)) {
  }
  return f;
}

TEST(SimLinkModel, LatenciesAddAndTheSlowestLinkSetsTheRate) {
  TopologyOptions o;
  o.intra = LinkParams{4'000'000'000, 1000};
  o.inter = LinkParams{1'000'000'000, 3000};
  auto t = Make("two_level:2x2", 4, o);
  ASSERT_TRUE(t);
  Network net(t.get(), {0, 1, 2, 3});
  // 1 -> 2: NVLink to GPU 0 of node 0 (4 GB/s), then its NIC (1 GB/s): 1 + 3 us of latency
  // and 4000 bytes at the NIC's 1 GB/s.
  const Flight f = Fly(net, 1, 2, 4000, 0);
  EXPECT_EQ(f.tail_in_ns, 1000 + 3000 + 4000);
  EXPECT_EQ(f.sent_ns, 1000);  // the first link sends at 4 GB/s
  EXPECT_EQ(SerializationNs(4000, 4'000'000'000), 1000);
  EXPECT_EQ(SerializationNs(1, 3'000'000'000), 1);  // rounded up
  EXPECT_EQ(SerializationNs(5, 0), 0);              // unlimited
}

TEST(SimLinkModel, MessagesOnOneLinkWaitAndOppositeDirectionsDoNot) {
  TopologyOptions o;
  o.link = LinkParams{1'000'000'000, 500};
  auto t = Make("ring", 4, o);
  ASSERT_TRUE(t);
  Network net(t.get(), {0, 1, 2, 3});
  const Flight a = Fly(net, 0, 1, 1000, 0);
  const Flight b = Fly(net, 0, 1, 1000, 0);  // same link, same direction: waits for a
  const Flight c = Fly(net, 1, 0, 1000, 0);  // the other direction of the same cable
  EXPECT_EQ(a.tail_in_ns, 1500);
  EXPECT_EQ(b.tail_in_ns, 2500);
  EXPECT_EQ(c.tail_in_ns, 1500);
  // A two-hop message behind b on the first link also waits there.
  const Flight d = Fly(net, 0, 2, 1000, 0);
  EXPECT_EQ(d.tail_in_ns, 3000 + 2 * 500);
  EXPECT_EQ(net.link_stats()[0].messages, 3);
  EXPECT_EQ(net.link_stats()[0].bytes, 3000);
  EXPECT_EQ(net.link_stats()[0].busy_ns, 3000);
}

// Two senders into one device over a switch with modelled receive ports: the second waits
// for the receive side; with the ideal receive (the cost model's rule) it does not.
TEST(SimLinkModel, SwitchReceiveSideIsUnlimitedUnlessModelled) {
  for (bool ideal : {true, false}) {
    TopologyOptions o;
    o.link = LinkParams{1'000'000'000, 100};
    o.ideal_switch_receive = ideal;
    auto t = Make("switch", 3, o);
    ASSERT_TRUE(t);
    algo::CollectiveSpec spec;
    spec.collective = algo::Collective::kGather;
    spec.algorithm = algo::Algorithm::kLinear;
    spec.world_size = 3;
    spec.count = 250;  // 1000 bytes each
    SimOptions so;
    so.topology_options = o;
    StatusOr<SimResult> r = SimulateOn(spec, *t, {0, 1, 2}, so);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->ok);
    EXPECT_EQ(r->time_ns, ideal ? 1100 : 2100) << "ideal receive " << ideal;
  }
}

}  // namespace
}  // namespace gyre::sim
