// Which addresses a rank advertises and which one a peer uses to reach it. A rank that
// listens on every interface publishes the address of each interface that passes the job's
// filter; each peer then orders those by whether they share a subnet with one of its own
// interfaces and takes the first one that answers. The same filter syntax is used by every
// gyre binary: --ifaces 'eth*,ib*,^docker*' (globs; a leading '^' excludes).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/store/rendezvous.h"
#include "core/store/store.h"

namespace gyre::job {

// One IPv4 address of one network interface.
struct Interface {
  std::string name;  // "eth0"
  std::string ip;    // "198.18.0.1"
  int prefix_len = 32;
  bool loopback = false;
};

// Every IPv4 address of every interface that is up, in the order the kernel lists them.
StatusOr<std::vector<Interface>> ListInterfaces();

// "eth*,^docker*": a name passes when it matches no exclude and, if there are includes, at
// least one include. An empty filter passes everything.
class IfaceFilter {
 public:
  // InvalidArgument naming the filter for an empty pattern or a lone '^'.
  static StatusOr<IfaceFilter> Parse(const std::string& text);
  bool Matches(const std::string& name) const;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::vector<std::string> include_;
  std::vector<std::string> exclude_;
};

// The filter used when none is given: everything except loopback and the usual container
// bridges, which other hosts cannot reach.
inline constexpr const char* kDefaultIfaces = "^lo*,^docker*,^virbr*,^br-*";

// The interfaces a rank advertises: those passing `filter`, loopback ones only when
// `allow_loopback`. InvalidArgument listing every interface found when none is left.
StatusOr<std::vector<Interface>> SelectInterfaces(const std::vector<Interface>& all,
                                                  const IfaceFilter& filter, bool allow_loopback);

bool IsLoopbackIp(const std::string& ip);
bool IsUnspecifiedIp(const std::string& ip);
// "198.18.0.5:4000" -> "198.18.0.5"; "[::1]:4000" -> "::1". Empty when malformed.
std::string HostOf(const std::string& address);
int PortOf(const std::string& address);
// "198.18.0.5", 4000 -> "198.18.0.5:4000" (brackets for IPv6).
std::string HostPort(const std::string& host, int port);
// The local interface whose subnet holds `ip`, or nullptr.
const Interface* InterfaceFor(const std::vector<Interface>& local, const std::string& ip);

// The peer's advertised addresses, best first: those on a subnet this host is attached to,
// then the rest in the peer's order. Loopback ones come last, and only when `same_host`.
std::vector<std::string> OrderCandidates(const std::vector<std::string>& advertised,
                                         const std::vector<Interface>& local, bool same_host);

// Why `address` was picked, for the log: "via eth0 198.18.0.1 (same subnet 198.18.0.0/24)".
std::string DescribeRoute(const std::vector<Interface>& local, const std::string& address);

// What this rank advertises, and the host's interfaces for routing decisions.
struct AddressPlan {
  std::vector<Interface> local;
  std::vector<std::string> advertised;  // "ip:port", best first
};

// `bound` is the listener's "ip:port". An unspecified ip (0.0.0.0) advertises every
// interface passing `ifaces` (kDefaultIfaces when empty); a specific ip advertises itself.
StatusOr<AddressPlan> PlanAddresses(const std::string& bound, const std::string& ifaces,
                                    bool allow_loopback);

// The peers' records span more than one host name.
bool SpansHosts(const std::vector<store::PeerRecord>& peers);

// Ranks per host when the hosts hold equal, contiguous blocks of ranks (host-major numbering,
// as gyrerun, torchrun and Slurm's block distribution give): what hierarchical allreduce
// takes as its local size. 0 when the layout is not like that.
int RanksPerHost(const std::vector<store::PeerRecord>& peers);

// Checks that `address` of `rank` answers by `deadline`.
using ProbeFn = std::function<Status(int rank, const std::string& address, Deadline deadline)>;

// Picks one address per rank (index = rank; self gets its own first advertised one) and logs
// each choice with its reason. With `probe` empty, takes the best candidate untested.
// Errors, prefixed with `where`:
//  - InvalidArgument when the job spans hosts and a rank advertises only loopback addresses
//    (unless allow_loopback), naming that rank, its host and address;
//  - Unavailable naming every rank none of whose addresses answered, with each address and
//    why it failed.
StatusOr<std::vector<std::string>> ChoosePeerAddresses(const std::vector<store::PeerRecord>& peers,
                                                       int self, const AddressPlan& plan,
                                                       bool allow_loopback, const ProbeFn& probe,
                                                       Deadline deadline, const std::string& where);

// The store key under which rank `rank` of `job_id` publishes its reachability check.
std::string ReachKey(const std::string& job_id, int rank);

// Every rank publishes whether it reached all others; returns the first failure any rank
// reported (so a rank that is reachable but cannot reach out fails with the same cause), or
// DeadlineExceeded naming the ranks that did not report.
Status ShareReachability(store::Store* store, const std::string& job_id, int rank, int world_size,
                         const Status& mine, Deadline deadline);

}  // namespace gyre::job
