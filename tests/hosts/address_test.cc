// Address choice for jobs across hosts (core/job/address.h), Slurm host lists and identity
// (core/job/identity.h), and rendezvous records carrying several addresses. No network.
#include "core/job/address.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "core/job/bootstrap.h"
#include "core/job/identity.h"
#include "core/store/hash_store.h"
#include "core/store/rendezvous.h"

namespace gyre::job {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(IfaceFilterTest, IncludesAndExcludes) {
  auto f = IfaceFilter::Parse("eth*, ib*,^docker*,^eth9");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->Matches("eth0"));
  EXPECT_TRUE(f->Matches("ib1"));
  EXPECT_FALSE(f->Matches("eth9"));
  EXPECT_FALSE(f->Matches("docker0"));
  EXPECT_FALSE(f->Matches("wlan0"));
  auto only_exclude = IfaceFilter::Parse("^docker*");
  ASSERT_TRUE(only_exclude.ok());
  EXPECT_TRUE(only_exclude->Matches("wlan0"));
  EXPECT_FALSE(only_exclude->Matches("docker0"));
  auto all = IfaceFilter::Parse("");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->Matches("anything"));
  auto bad = IfaceFilter::Parse("eth*,^");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("'eth*,^'"));
}

std::vector<Interface> TwoInterfaces() {
  return {{"lo", "127.0.0.1", 8, true}, {"eth0", "198.18.0.1", 24, false}};
}

TEST(SelectInterfacesTest, LoopbackOnlyWhenAllowed) {
  auto f = IfaceFilter::Parse(kDefaultIfaces);
  ASSERT_TRUE(f.ok());
  auto chosen = SelectInterfaces(TwoInterfaces(), *f, false);
  ASSERT_TRUE(chosen.ok());
  ASSERT_EQ(chosen->size(), 1u);
  EXPECT_EQ((*chosen)[0].name, "eth0");
  auto lo = IfaceFilter::Parse("lo");
  ASSERT_TRUE(lo.ok());
  auto refused = SelectInterfaces(TwoInterfaces(), *lo, false);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("this host has: lo 127.0.0.1, eth0 198.18.0.1"));
  auto allowed = SelectInterfaces(TwoInterfaces(), *lo, true);
  ASSERT_TRUE(allowed.ok());
  EXPECT_EQ((*allowed)[0].ip, "127.0.0.1");
}

TEST(AddressTest, ParsesHostAndPort) {
  EXPECT_EQ(HostOf("198.18.0.5:4000"), "198.18.0.5");
  EXPECT_EQ(PortOf("198.18.0.5:4000"), 4000);
  EXPECT_EQ(HostOf("[::1]:7"), "::1");
  EXPECT_EQ(HostPort("::1", 7), "[::1]:7");
  EXPECT_TRUE(IsLoopbackIp("127.0.0.2"));
  EXPECT_FALSE(IsLoopbackIp("198.18.0.1"));
}

TEST(OrderCandidatesTest, SameSubnetFirstLoopbackOnlyOnTheSameHost) {
  const std::vector<std::string> advertised = {"10.1.1.1:5", "127.0.0.1:5", "198.18.0.7:5"};
  EXPECT_THAT(OrderCandidates(advertised, TwoInterfaces(), false),
              ElementsAre("198.18.0.7:5", "10.1.1.1:5"));
  EXPECT_THAT(OrderCandidates(advertised, TwoInterfaces(), true),
              ElementsAre("198.18.0.7:5", "10.1.1.1:5", "127.0.0.1:5"));
  EXPECT_EQ(DescribeRoute(TwoInterfaces(), "198.18.0.7:5"),
            "via eth0 198.18.0.7 (same subnet 198.18.0.0/24)");
  EXPECT_THAT(DescribeRoute(TwoInterfaces(), "10.1.1.1:5"), HasSubstr("routed"));
}

std::vector<store::PeerRecord> FourRanksTwoHosts() {
  std::vector<store::PeerRecord> peers(4);
  for (int r = 0; r < 4; ++r) {
    peers[r].rank = r;
    peers[r].world_size = 4;
    peers[r].host = r < 2 ? "host0" : "host1";
    peers[r].pid = 100 + r;
    const std::string ip = r < 2 ? "198.18.0.1" : "198.18.0.2";
    peers[r].addresses = {"10.9.9." + std::to_string(r) + ":70", ip + ":" + std::to_string(70 + r)};
    peers[r].address = peers[r].addresses[0];
  }
  return peers;
}

AddressPlan PlanOf(const std::vector<store::PeerRecord>& peers, int self) {
  AddressPlan plan;
  plan.local = TwoInterfaces();
  plan.advertised = peers[self].addresses;
  return plan;
}

TEST(ChoosePeerAddressesTest, ProbesInPreferenceOrder) {
  auto peers = FourRanksTwoHosts();
  std::vector<std::string> probed;
  std::mutex mu;
  ProbeFn probe = [&](int, const std::string& a, Deadline) -> Status {
    std::lock_guard<std::mutex> lock(mu);
    probed.push_back(a);
    return a.rfind("198.18.", 0) == 0 ? Status::Ok() : UnavailableError("no route");
  };
  auto chosen = ChoosePeerAddresses(peers, 0, PlanOf(peers, 0), false, probe,
                                    Deadline::After(*SteadyClock::Get(), Seconds(5)), "rdzv");
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_THAT(*chosen,
              ElementsAre("10.9.9.0:70", "198.18.0.1:71", "198.18.0.2:72", "198.18.0.2:73"));
  // One rank per host is probed, and its same-subnet address answered first: host0's rank 1
  // and one rank of host1, nothing else.
  EXPECT_EQ(probed.size(), 2u);
}

TEST(ChoosePeerAddressesTest, NamesEveryUnreachableRankAndHost) {
  auto peers = FourRanksTwoHosts();
  ProbeFn probe = [&](int r, const std::string&, Deadline) -> Status {
    return r >= 2 ? UnavailableError("Network is unreachable") : Status::Ok();
  };
  auto chosen = ChoosePeerAddresses(peers, 1, PlanOf(peers, 1), false, probe,
                                    Deadline::After(*SteadyClock::Get(), Seconds(5)), "rdzv");
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(chosen.status().message(),
              HasSubstr("rdzv: rank 1 (host host0, pid 101) cannot reach ranks 2-3 (host host1)"));
  EXPECT_THAT(chosen.status().message(),
              HasSubstr("rank 3 (host host1, pid 103) at 198.18.0.2:73 (Network is unreachable); "
                        "10.9.9.3:70 (Network is unreachable)"));
  EXPECT_THAT(chosen.status().message(),
              HasSubstr("rank 2 (host host1, pid 102) (not tried: rank 3 of the same host "
                        "answered at none of its addresses)"));
}

TEST(ChoosePeerAddressesTest, RefusesLoopbackAcrossHostsUnlessAllowed) {
  auto peers = FourRanksTwoHosts();
  peers[3].addresses = {"127.0.0.1:99"};
  peers[3].address = "127.0.0.1:99";
  auto chosen =
      ChoosePeerAddresses(peers, 0, PlanOf(peers, 0), false, nullptr, Deadline::Infinite(), "rdzv");
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(chosen.status().message(),
              HasSubstr("spans 2 hosts (host0, host1) but rank 3 (host host1, pid 103) advertises "
                        "only the loopback address 127.0.0.1:99"));
  auto allowed =
      ChoosePeerAddresses(peers, 0, PlanOf(peers, 0), true, nullptr, Deadline::Infinite(), "rdzv");
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_EQ((*allowed)[3], "127.0.0.1:99");
}

TEST(RanksPerHostTest, EqualContiguousBlocksOnly) {
  auto peers = FourRanksTwoHosts();
  EXPECT_EQ(RanksPerHost(peers), 2);
  std::swap(peers[1].host, peers[2].host);
  EXPECT_EQ(RanksPerHost(peers), 0);
  peers.resize(3);
  peers[0].host = peers[1].host = peers[2].host = "one";
  EXPECT_EQ(RanksPerHost(peers), 3);
}

TEST(ShareReachabilityTest, EveryRankSeesTheFirstFailure) {
  store::HashStore store;
  const Deadline d = Deadline::After(*SteadyClock::Get(), Seconds(5));
  Status s1;
  std::thread t([&] {
    s1 = ShareReachability(&store, "j", 1, 2, UnavailableError("rank 1 cannot reach rank 0"), d);
  });
  Status s0 = ShareReachability(&store, "j", 0, 2, Status::Ok(), d);
  t.join();
  EXPECT_THAT(s0.message(), HasSubstr("rank 1 cannot reach rank 0 (reported by rank 1)"));
  EXPECT_THAT(s1.message(), HasSubstr("rank 1 cannot reach rank 0"));
  Status lonely = ShareReachability(&store, "k", 0, 2, Status::Ok(),
                                    Deadline::After(*SteadyClock::Get(), Millis(100)));
  EXPECT_EQ(lonely.code(), StatusCode::kDeadlineExceeded);
}

TEST(RendezvousTest, RecordsCarrySeveralAddresses) {
  store::HashStore store;
  store::PeerRecord me;
  me.rank = 0;
  me.world_size = 1;
  me.host = "host0";
  me.addresses = {"198.18.0.1:5", "10.0.0.1:5"};
  me.address = me.addresses[0];
  auto got =
      store::Rendezvous(&store, "multi", me, Deadline::After(*SteadyClock::Get(), Seconds(5)));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].address, "198.18.0.1:5");
  EXPECT_THAT((*got)[0].addresses, ElementsAre("198.18.0.1:5", "10.0.0.1:5"));
}

TEST(RendezvousTest, RecordsCarryTheAutomaticChoice) {
  store::HashStore store;
  store::PeerRecord me;
  me.rank = 0;
  me.world_size = 1;
  me.host = "host0";
  me.address = "198.18.0.1:5";
  me.choice_one_host = 0x1234567890abcdefull;
  me.choice_across_hosts = 77;
  me.choice_source = "calibration file /x/cal.txt";
  auto got =
      store::Rendezvous(&store, "choice", me, Deadline::After(*SteadyClock::Get(), Seconds(5)));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].choice_one_host, 0x1234567890abcdefull);
  EXPECT_EQ((*got)[0].choice_across_hosts, 77u);
  EXPECT_EQ((*got)[0].choice_source, "calibration file /x/cal.txt");
}

TEST(CheckAutomaticChoicesTest, NamesTheRanksAndSourcesThatDiffer) {
  auto peers = FourRanksTwoHosts();
  for (auto& p : peers) {
    p.choice_one_host = 1;
    p.choice_across_hosts = 5;
    p.choice_source = "calibration file /x/" + p.host + ".txt";
  }
  // Across hosts the model is not used: per-host files that differ there are alike.
  peers[2].choice_one_host = peers[3].choice_one_host = 3;
  EXPECT_TRUE(CheckAutomaticChoices(peers).ok());
  peers[3].choice_across_hosts = 7;
  Status s = CheckAutomaticChoices(peers);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("rank 3's cost model (calibration file /x/" + peers[3].host +
                                     ".txt, on host " + peers[3].host +
                                     ") differs from rank 0's (calibration file /x/" +
                                     peers[0].host + ".txt, on host " + peers[0].host + ")"));
  // On one host the model's digest decides; every rank that differs is named.
  for (auto& p : peers) p.host = "one";
  peers[3].choice_across_hosts = 5;
  s = CheckAutomaticChoices(peers);
  EXPECT_THAT(s.message(),
              HasSubstr("rank 2's cost model (calibration file /x/host1.txt) differs from "
                        "rank 0's (calibration file /x/host0.txt); so does that of rank 3: the "
                        "ranks would choose different algorithms for the same call; give every "
                        "rank the same calibration"));
  // The same name with other contents is said as such; a record without a digest is not
  // compared.
  for (auto& p : peers) p.choice_source = "calibration file /x/cal.txt";
  EXPECT_THAT(CheckAutomaticChoices(peers).message(),
              HasSubstr("(calibration file /x/cal.txt), the same source with other contents"));
  peers[2].choice_one_host = peers[3].choice_one_host = 0;
  EXPECT_TRUE(CheckAutomaticChoices(peers).ok());
}

TEST(HostListTest, ExpandsSlurmNodeLists) {
  auto hosts = ExpandHostList("node[1-3,7],gpu[08-10],login");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(*hosts,
              ElementsAre("node1", "node2", "node3", "node7", "gpu08", "gpu09", "gpu10", "login"));
  for (const char* bad : {"node[1-", "node[3-1]", "node[a-b]", "", "n[1]x[2]"}) {
    auto r = ExpandHostList(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_THAT(r.status().message(), HasSubstr("'" + std::string(bad) + "'"));
    }
  }
}

TEST(IdentityTest, SlurmGivesRankHostAndStore) {
  auto id = ResolveIdentity({}, MapEnvironment({{"SLURM_PROCID", "5"},
                                                {"SLURM_NTASKS", "8"},
                                                {"SLURM_LOCALID", "1"},
                                                {"SLURM_NODEID", "1"},
                                                {"SLURM_STEP_NODELIST", "node[3-4]"},
                                                {"SLURM_JOB_ID", "123"},
                                                {"SLURMD_NODENAME", "node4"}}));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->rank, 5);
  EXPECT_EQ(id->world_size, 8);
  EXPECT_EQ(id->local_rank, 1);
  EXPECT_EQ(id->host, "node4");
  EXPECT_EQ(id->store_url, "tcp://node3:20123");
  EXPECT_EQ(id->job_id, "slurm-123");
  EXPECT_EQ(id->source, "Slurm");
}

TEST(IdentityTest, HostAndInterfacesFromGyreVariables) {
  auto id = ResolveIdentity({}, MapEnvironment({{"GYRE_RANK", "0"},
                                                {"GYRE_WORLD_SIZE", "2"},
                                                {"GYRE_HOST", "host1"},
                                                {"GYRE_IFACES", "eth*"},
                                                {"GYRE_ALLOW_LOOPBACK", "1"}}));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->host, "host1");
  EXPECT_EQ(id->ifaces, "eth*");
  EXPECT_TRUE(id->allow_loopback);
}

// gyrerun's id of its run (GYRE_LAUNCH_ID) is taken as given; one that is not one line of at
// most 128 characters is refused, naming the variable.
TEST(IdentityTest, TheLaunchIdComesFromGyrerunsVariable) {
  auto id = ResolveIdentity(
      {}, MapEnvironment(
              {{"GYRE_RANK", "0"}, {"GYRE_WORLD_SIZE", "2"}, {"GYRE_LAUNCH_ID", "gyre-1f2e-0"}}));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->launch_id, "gyre-1f2e-0");
  auto none = ResolveIdentity({}, MapEnvironment({{"GYRE_RANK", "0"}, {"GYRE_WORLD_SIZE", "2"}}));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->launch_id, "");
  for (const std::string& bad :
       {std::string(129, 'x'), std::string("two\nlines"), std::string("a/b")}) {
    auto refused = ResolveIdentity(
        {},
        MapEnvironment({{"GYRE_RANK", "0"}, {"GYRE_WORLD_SIZE", "2"}, {"GYRE_LAUNCH_ID", bad}}));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("GYRE_LAUNCH_ID"), std::string::npos);
  }
}

// torchrun's store address is MASTER_ADDR and MASTER_PORT: either one alone is named, where
// MASTER_PORT alone used to end in "no store given", which hid the variable that was set.
TEST(IdentityTest, HalfOfTorchrunsStoreAddressIsNamed) {
  auto port_only = ResolveIdentity(
      {}, MapEnvironment({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "29500"}}));
  ASSERT_FALSE(port_only.ok());
  EXPECT_EQ(port_only.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(port_only.status().message(), HasSubstr("MASTER_PORT is set but MASTER_ADDR is not"));
  auto addr_only = ResolveIdentity(
      {}, MapEnvironment({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}}));
  ASSERT_FALSE(addr_only.ok());
  EXPECT_THAT(addr_only.status().message(), HasSubstr("MASTER_ADDR is set but MASTER_PORT is not"));
  // Another store given takes the place of torchrun's, as before.
  auto with_store = ResolveIdentity({}, MapEnvironment({{"RANK", "0"},
                                                        {"WORLD_SIZE", "1"},
                                                        {"MASTER_PORT", "29500"},
                                                        {"GYRE_STORE", "file:///tmp/s"}}));
  ASSERT_TRUE(with_store.ok()) << with_store.status();
  EXPECT_EQ(with_store->store_url, "file:///tmp/s");
}

// GYRE_ALLOW_LOOPBACK=yes read as false, silently, and GYRE_LOCAL_WORLD_SIZE=abc was ignored:
// both are refused by name before the rank joins, as GYRE_DETERMINISTIC is.
TEST(IdentityTest, BadSwitchesAndCountsInGyreVariablesAreRefusedByName) {
  auto with = [](const std::string& name, const std::string& value) {
    return ResolveIdentity({}, MapEnvironment({{"GYRE_RANK", "0"},
                                               {"GYRE_WORLD_SIZE", "1"},
                                               {"GYRE_STORE", "file:///tmp/s"},
                                               {name, value}}));
  };
  for (const char* bad : {"yes", "2", "on"}) {
    auto id = with("GYRE_ALLOW_LOOPBACK", bad);
    ASSERT_FALSE(id.ok()) << bad;
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(id.status().message().find(std::string("GYRE_ALLOW_LOOPBACK=\"") + bad +
                                         "\" is not 0, 1, false or true"),
              std::string::npos)
        << id.status();
  }
  EXPECT_TRUE(with("GYRE_ALLOW_LOOPBACK", "true")->allow_loopback);
  EXPECT_TRUE(with("GYRE_ALLOW_LOOPBACK", "1")->allow_loopback);
  EXPECT_FALSE(with("GYRE_ALLOW_LOOPBACK", "0")->allow_loopback);
  for (const char* bad : {"abc", "0", "3x"}) {
    auto id = with("GYRE_LOCAL_WORLD_SIZE", bad);
    ASSERT_FALSE(id.ok()) << bad;
    EXPECT_NE(id.status().message().find(std::string("GYRE_LOCAL_WORLD_SIZE=\"") + bad + "\""),
              std::string::npos)
        << id.status();
  }
  EXPECT_TRUE(with("GYRE_LOCAL_WORLD_SIZE", "4").ok());
}

// A host name or job id that is not UTF-8 text went into every rank's state, whose protobuf
// strings refuse such bytes: every control answer was lost, and with it every verdict ("no
// rank could be named"). Both are refused by name before the rank joins.
TEST(IdentityTest, HostNamesAndJobIdsMustBeText) {
  auto with = [](const std::string& name, const std::string& value) {
    return ResolveIdentity({}, MapEnvironment({{"GYRE_RANK", "0"},
                                               {"GYRE_WORLD_SIZE", "1"},
                                               {"GYRE_STORE", "file:///tmp/s"},
                                               {name, value}}));
  };
  const std::pair<std::string, std::string> bad[] = {
      {"host\xff", "is not UTF-8 (byte 0xff at offset 4)"},
      {"x\xc0\xafy", "is not UTF-8 (byte 0xc0 at offset 1)"},     // overlong '/'
      {"x\xed\xa0\x80", "is not UTF-8 (byte 0xed at offset 1)"},  // a surrogate
      {"x\xe2\x82", "is not UTF-8 (byte 0xe2 at offset 1)"},      // cut short
      {"tab\there", "holds a control character (byte 0x09 at offset 3)"},
      {"c1\xc2\x85", "holds a control character (byte 0xc2 at offset 2)"},  // U+0085
  };
  for (const auto& [value, why] : bad) {
    for (const char* var : {"GYRE_HOST", "GYRE_JOB_ID"}) {
      auto id = with(var, value);
      ASSERT_FALSE(id.ok()) << var << " " << value;
      EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(id.status().message().find(why), std::string::npos) << id.status();
    }
  }
  auto spaced = with("GYRE_HOST", "node 1");
  ASSERT_FALSE(spaced.ok());
  EXPECT_NE(spaced.status().message().find("GYRE_HOST 'node 1' contains a space"),
            std::string::npos)
      << spaced.status();
  EXPECT_FALSE(with("GYRE_HOST", std::string(256, 'h')).ok());
  EXPECT_TRUE(with("GYRE_HOST", std::string(255, 'h')).ok());
  // A 70 KB name went whole into every verdict and error line; refused with its length and a
  // prefix, never the whole of it.
  const std::string huge = "node-" + std::string(70 * 1024, 'x');
  for (const char* var : {"GYRE_HOST", "SLURMD_NODENAME"}) {
    auto id = with(var, huge);
    ASSERT_FALSE(id.ok()) << var;
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(id.status().message().find(std::string(var) + " 'node-xxxxxxxxxxxxxxxxxxx'... is " +
                                         std::to_string(huge.size()) +
                                         " bytes long, more than the 255 a host name may have"),
              std::string::npos)
        << id.status().message().substr(0, 300);
    EXPECT_LT(id.status().message().size(), 200u);
  }
  IdentityOverrides flag;
  flag.host = huge;
  auto flagged = ResolveIdentity(
      flag, MapEnvironment(
                {{"GYRE_RANK", "0"}, {"GYRE_WORLD_SIZE", "1"}, {"GYRE_STORE", "file:///tmp/s"}}));
  ASSERT_FALSE(flagged.ok());
  EXPECT_LT(flagged.status().message().size(), 200u);
  // The prefix is cut between characters, not inside one.
  std::string accents(23, 'a');
  for (int i = 0; i < 300; ++i) accents += "\xc3\xa9";
  auto wide = with("GYRE_HOST", accents);
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(
      wide.status().message().find("GYRE_HOST '" + std::string(23, 'a') + "'... is 623 bytes"),
      std::string::npos)
      << wide.status();
  for (const std::string good :
       {"node-7.cluster", "h\xc3\xa9te", "\xe8\x8a\x82\xe7\x82\xb9", "emoji\xf0\x9f\x9a\x80"}) {
    auto host = with("GYRE_HOST", good);
    ASSERT_TRUE(host.ok()) << host.status();
    EXPECT_EQ(host->host, good);
    auto job = with("GYRE_JOB_ID", good);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->job_id, good);
  }
}

// A hand-launched rank of a world of 2147483647 was told to run `ulimit -n 6442451002`;
// a world past what a job may have is refused as such, before anything is opened.
TEST(IdentityTest, AWorldLargerThanAJobMayHaveIsRefused) {
  auto with = [](const std::string& size) {
    return ResolveIdentity(
        {}, MapEnvironment(
                {{"GYRE_RANK", "0"}, {"GYRE_WORLD_SIZE", size}, {"GYRE_STORE", "file:///tmp/s"}}));
  };
  for (const char* size : {"2147483647", "1048577"}) {
    auto id = with(size);
    ASSERT_FALSE(id.ok()) << size;
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(id.status().message().find(std::string("world size ") + size +
                                         " (from GYRE_*) is more than the 1048576 ranks a gyre "
                                         "job may have"),
              std::string::npos)
        << id.status();
  }
  auto most = with("1048576");
  ASSERT_TRUE(most.ok()) << most.status();
  EXPECT_EQ(most->world_size, 1 << 20);
  IdentityOverrides flags;
  flags.rank = 0;
  flags.world_size = 2147483647;
  auto flagged = ResolveIdentity(flags, MapEnvironment({{"GYRE_STORE", "file:///tmp/s"}}));
  ASSERT_FALSE(flagged.ok());
  EXPECT_NE(flagged.status().message().find("(from flags) is more than the 1048576"),
            std::string::npos)
      << flagged.status();
}

TEST(ListInterfacesTest, FindsLoopback) {
  auto all = ListInterfaces();
  ASSERT_TRUE(all.ok()) << all.status();
  bool found = false;
  for (const auto& i : *all) found = found || (i.loopback && i.ip == "127.0.0.1");
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace gyre::job
