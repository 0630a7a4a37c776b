#include "core/job/address.h"

#include <arpa/inet.h>
#include <fnmatch.h>
#include <glog/logging.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "core/base/thread.h"

namespace gyre::job {
namespace {

bool ParseV4(const std::string& ip, uint32_t* out) {
  in_addr a{};
  if (inet_pton(AF_INET, ip.c_str(), &a) != 1) return false;
  *out = ntohl(a.s_addr);
  return true;
}

uint32_t Mask(int prefix_len) {
  if (prefix_len <= 0) return 0;
  if (prefix_len >= 32) return 0xffffffffu;
  return ~((1u << (32 - prefix_len)) - 1);
}

std::string FormatV4(uint32_t v) {
  in_addr a{};
  a.s_addr = htonl(v);
  char buf[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}

}  // namespace

StatusOr<std::vector<Interface>> ListInterfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return UnavailableError(std::string("cannot list network interfaces (getifaddrs): ") +
                            std::strerror(errno));
  }
  std::vector<Interface> out;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    if ((it->ifa_flags & IFF_UP) == 0) continue;
    Interface iface;
    iface.name = it->ifa_name;
    const auto* addr = reinterpret_cast<const sockaddr_in*>(it->ifa_addr);
    iface.ip = FormatV4(ntohl(addr->sin_addr.s_addr));
    if (it->ifa_netmask != nullptr) {
      const auto* mask = reinterpret_cast<const sockaddr_in*>(it->ifa_netmask);
      iface.prefix_len = __builtin_popcount(ntohl(mask->sin_addr.s_addr));
    }
    iface.loopback = (it->ifa_flags & IFF_LOOPBACK) != 0 || IsLoopbackIp(iface.ip);
    out.push_back(std::move(iface));
  }
  freeifaddrs(list);
  return out;
}

StatusOr<IfaceFilter> IfaceFilter::Parse(const std::string& text) {
  IfaceFilter f;
  f.text_ = text;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t b = item.find_first_not_of(" \t");
    const size_t e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    const bool exclude = !item.empty() && item[0] == '^';
    const std::string pattern = exclude ? item.substr(1) : item;
    if (pattern.empty()) {
      return InvalidArgumentError("interface filter '" + text +
                                  "' has an empty pattern; write e.g. 'eth*,^docker*'");
    }
    (exclude ? f.exclude_ : f.include_).push_back(pattern);
  }
  return f;
}

bool IfaceFilter::Matches(const std::string& name) const {
  for (const auto& p : exclude_) {
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return false;
  }
  if (include_.empty()) return true;
  for (const auto& p : include_) {
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  }
  return false;
}

StatusOr<std::vector<Interface>> SelectInterfaces(const std::vector<Interface>& all,
                                                  const IfaceFilter& filter, bool allow_loopback) {
  std::vector<Interface> out;
  std::string seen;
  for (const auto& i : all) {
    seen += (seen.empty() ? "" : ", ") + i.name + " " + i.ip;
    if (i.loopback && !allow_loopback) continue;
    if (filter.Matches(i.name)) out.push_back(i);
  }
  if (out.empty()) {
    return InvalidArgumentError("no network interface passes the filter '" + filter.text() + "'" +
                                (allow_loopback ? "" : " (loopback excluded)") +
                                "; this host has: " + (seen.empty() ? "none" : seen));
  }
  return out;
}

bool IsLoopbackIp(const std::string& ip) {
  if (ip == "::1" || ip == "localhost") return true;
  uint32_t v = 0;
  return ParseV4(ip, &v) && (v >> 24) == 127;
}

bool IsUnspecifiedIp(const std::string& ip) { return ip == "0.0.0.0" || ip == "::" || ip == "*"; }

std::string HostOf(const std::string& address) {
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    return close == std::string::npos ? "" : address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? "" : address.substr(0, colon);
}

int PortOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return -1;
  return std::atoi(address.c_str() + colon + 1);
}

std::string HostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

const Interface* InterfaceFor(const std::vector<Interface>& local, const std::string& ip) {
  uint32_t v = 0;
  if (!ParseV4(ip, &v)) return nullptr;
  for (const auto& i : local) {
    uint32_t mine = 0;
    if (!ParseV4(i.ip, &mine)) continue;
    const uint32_t m = Mask(i.prefix_len);
    if ((mine & m) == (v & m)) return &i;
  }
  return nullptr;
}

std::vector<std::string> OrderCandidates(const std::vector<std::string>& advertised,
                                         const std::vector<Interface>& local, bool same_host) {
  std::vector<std::string> near, far, loop;
  for (const auto& a : advertised) {
    const std::string ip = HostOf(a);
    if (IsLoopbackIp(ip)) {
      if (same_host) loop.push_back(a);
    } else if (const Interface* i = InterfaceFor(local, ip); i != nullptr && !i->loopback) {
      near.push_back(a);
    } else {
      far.push_back(a);
    }
  }
  near.insert(near.end(), far.begin(), far.end());
  near.insert(near.end(), loop.begin(), loop.end());
  return near;
}

std::string DescribeRoute(const std::vector<Interface>& local, const std::string& address) {
  const std::string ip = HostOf(address);
  if (IsLoopbackIp(ip)) return "via lo " + ip + " (loopback)";
  const Interface* i = InterfaceFor(local, ip);
  if (i == nullptr || i->loopback) return ip + " (no shared subnet: routed)";
  uint32_t v = 0;
  ParseV4(i->ip, &v);
  return "via " + i->name + " " + ip + " (same subnet " + FormatV4(v & Mask(i->prefix_len)) + "/" +
         std::to_string(i->prefix_len) + ")";
}

StatusOr<AddressPlan> PlanAddresses(const std::string& bound, const std::string& ifaces,
                                    bool allow_loopback) {
  AddressPlan plan;
  GYRE_ASSIGN_OR_RETURN(plan.local, ListInterfaces());
  const std::string ip = HostOf(bound);
  const int port = PortOf(bound);
  if (!IsUnspecifiedIp(ip)) {
    plan.advertised.push_back(bound);
    return plan;
  }
  GYRE_ASSIGN_OR_RETURN(IfaceFilter filter,
                        IfaceFilter::Parse(ifaces.empty() ? kDefaultIfaces : ifaces));
  GYRE_ASSIGN_OR_RETURN(std::vector<Interface> chosen,
                        SelectInterfaces(plan.local, filter, allow_loopback));
  for (const auto& i : chosen) {
    const std::string a = i.ip + ":" + std::to_string(port);
    if (std::find(plan.advertised.begin(), plan.advertised.end(), a) == plan.advertised.end()) {
      plan.advertised.push_back(a);
    }
  }
  return plan;
}

bool SpansHosts(const std::vector<store::PeerRecord>& peers) {
  for (const auto& p : peers) {
    if (p.host != peers.front().host) return true;
  }
  return false;
}

int RanksPerHost(const std::vector<store::PeerRecord>& peers) {
  const int p = static_cast<int>(peers.size());
  if (p == 0) return 0;
  int g = 1;
  while (g < p && peers[g].host == peers[0].host) ++g;
  if (p % g != 0) return 0;
  std::set<std::string> seen;
  for (int start = 0; start < p; start += g) {
    if (!seen.insert(peers[start].host).second) return 0;  // a host appears in two blocks
    for (int r = start; r < start + g; ++r) {
      if (peers[r].host != peers[start].host) return 0;
    }
  }
  return g;
}

namespace {

std::vector<std::string> AddressesOf(const store::PeerRecord& p) {
  if (!p.addresses.empty()) return p.addresses;
  return {p.address};
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

StatusOr<std::vector<std::string>> ChoosePeerAddresses(const std::vector<store::PeerRecord>& peers,
                                                       int self, const AddressPlan& plan,
                                                       bool allow_loopback, const ProbeFn& probe,
                                                       Deadline deadline,
                                                       const std::string& where) {
  const int p = static_cast<int>(peers.size());
  const bool multi_host = SpansHosts(peers);
  if (multi_host && !allow_loopback) {
    std::set<std::string> hosts;
    for (const auto& peer : peers) hosts.insert(peer.host);
    for (const auto& peer : peers) {
      const auto addrs = AddressesOf(peer);
      const bool all_loopback = std::all_of(
          addrs.begin(), addrs.end(), [](const std::string& a) { return IsLoopbackIp(HostOf(a)); });
      if (!all_loopback) continue;
      std::string host_list;
      for (const auto& h : hosts) host_list += (host_list.empty() ? "" : ", ") + h;
      return InvalidArgumentError(
          where + ": the job spans " + std::to_string(hosts.size()) + " hosts (" + host_list +
          ") but " + store::DescribePeer(peer) + " advertises only the loopback address " +
          Join(addrs) +
          ", which other hosts cannot reach; listen on a routable address (gyred/gyrerun "
          "--ifaces 'eth*' or --listen 0.0.0.0:0), or allow it with --allow_loopback");
    }
  }
  std::vector<std::string> chosen(p);
  std::vector<std::string> failures(p);
  auto choose = [&](int r) {
    const store::PeerRecord& peer = peers[r];
    if (r == self) {
      chosen[r] = plan.advertised.empty() ? peer.address : plan.advertised.front();
      return;
    }
    const bool same_host = peer.host == peers[self].host;
    std::vector<std::string> candidates = OrderCandidates(AddressesOf(peer), plan.local, same_host);
    if (candidates.empty()) candidates = AddressesOf(peer);  // loopback allowed across hosts
    if (!probe) {
      chosen[r] = candidates.front();
      return;
    }
    std::string tried;
    for (const auto& c : candidates) {
      // Each candidate gets a share of the time, so one that drops packets cannot use it all.
      const Duration left = deadline.Remaining(*SteadyClock::Get());
      const Duration slice = std::clamp<Duration>(left / 4, Millis(250), Seconds(3));
      const Deadline attempt = Deadline::At(
          std::min(deadline.when(), SteadyClock::Get()->Now() + std::min(slice, left)));
      // A busy control endpoint turns connections away; try again a few times in the slice.
      Status s;
      for (int i = 0; i < 3; ++i) {
        s = probe(r, c, attempt);
        if (s.ok() || attempt.Expired(*SteadyClock::Get())) break;
        std::this_thread::sleep_for(Millis(100));
      }
      if (s.ok()) {
        chosen[r] = c;
        return;
      }
      tried += (tried.empty() ? "" : "; ") + c + " (" + s.message() + ")";
    }
    failures[r] = store::DescribePeer(peer) + " at " + tried;
  };
  // One rank of each host is probed, a different one from each prober so that no control
  // endpoint gets every probe; the host's other ranks use the interface that answered.
  std::map<std::string, std::vector<int>> by_host;
  for (int r = 0; r < p; ++r) {
    if (r != self) by_host[peers[r].host].push_back(r);
  }
  std::vector<int> first_pass = {self};
  std::vector<int> via(p);  // whose probe chose each rank's address
  for (int r = 0; r < p; ++r) via[r] = r;
  std::map<std::string, int> representative;
  for (const auto& [host, ranks] : by_host) {
    const int rep = ranks[self % ranks.size()];
    representative[host] = rep;
    first_pass.push_back(rep);
  }
  std::vector<std::thread> workers;
  // Probes wait on the network, not the CPU; a bounded number run at once.
  constexpr size_t kParallelProbes = 16;
  for (size_t start = 0; start < first_pass.size(); start += kParallelProbes) {
    workers.clear();
    for (size_t i = start; i < std::min(first_pass.size(), start + kParallelProbes); ++i) {
      const int rank = first_pass[i];
      std::thread t;
      if (StartThread(&t, "", "", [&choose, rank] { choose(rank); }).ok()) {
        workers.push_back(std::move(t));
      } else {
        choose(rank);  // no thread to be had: probed in turn, each bounded by the deadline
      }
    }
    for (auto& w : workers) w.join();
  }
  for (int r = 0; r < p; ++r) {
    if (r == self) continue;
    const int rep = representative[peers[r].host];
    if (r == rep) continue;
    via[r] = rep;
    if (!failures[rep].empty()) {
      failures[r] = store::DescribePeer(peers[r]) + " (not tried: rank " + std::to_string(rep) +
                    " of the same host answered at none of its addresses)";
      continue;
    }
    for (const auto& a : AddressesOf(peers[r])) {
      if (HostOf(a) == HostOf(chosen[rep])) chosen[r] = a;
    }
    if (chosen[r].empty()) choose(r);  // published other interfaces than its neighbour
  }
  std::vector<int> unreachable;
  std::string detail;
  for (int r = 0; r < p; ++r) {
    if (failures[r].empty()) continue;
    unreachable.push_back(r);
    detail += (detail.empty() ? "" : "; ") + failures[r];
  }
  if (!unreachable.empty()) {
    std::set<std::string> hosts;
    for (int r : unreachable) hosts.insert(peers[r].host);
    std::string host_list;
    for (const auto& h : hosts) host_list += (host_list.empty() ? "" : ", ") + h;
    return UnavailableError(where + ": " + store::DescribePeer(peers[self]) + " cannot reach " +
                            store::FormatRankList(unreachable) + " (host " + host_list +
                            ") at any advertised address: " + detail);
  }
  for (int r = 0; r < p && probe; ++r) {
    if (r == self) continue;
    LOG(INFO) << "rank " << self << " -> rank " << r << " " << DescribeRoute(plan.local, chosen[r])
              << (via[r] == r ? ", answered" : ", as rank " + std::to_string(via[r]) + " did");
  }
  return chosen;
}

std::string ReachKey(const std::string& job_id, int rank) {
  return "gyre/reach/" + job_id + "/" + std::to_string(rank);
}

Status ShareReachability(store::Store* store, const std::string& job_id, int rank, int world_size,
                         const Status& mine, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(
      store->Set(ReachKey(job_id, rank), mine.ok() ? std::string() : mine.message(), deadline));
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(ReachKey(job_id, r));
  Status waited = store->Wait(keys, deadline);
  if (!mine.ok()) return mine;
  if (!waited.ok()) {
    return waited.WithContext("rank " + std::to_string(rank) +
                              " waiting for every rank's reachability check of job " + job_id);
  }
  auto values = store::ReadPublished(store, keys, deadline, [](size_t r) {
    return "the reachability check of rank " + std::to_string(r);
  });
  if (!values.ok()) return values.status().WithContext("reading the ranks' reachability checks");
  for (int r = 0; r < world_size; ++r) {
    const std::string& v = (*values)[r];
    if (r != rank && !v.empty()) {
      return UnavailableError(v + " (reported by rank " + std::to_string(r) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace gyre::job
