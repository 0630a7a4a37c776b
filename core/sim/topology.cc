#include "core/sim/topology.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace gyre::sim {
namespace {

int Mod(int a, int m) { return ((a % m) + m) % m; }

constexpr LinkParams kUnlimited{0, 0};

// The largest side of a two-dimensional topology, and the most leaf-spine cables of a fat
// tree.
constexpr int64_t kMaxDimension = int64_t{1} << 20;

// Splits "AxB" into two positive integers.
bool ParseDims(const std::string& s, int* a, int* b) {
  const size_t x = s.find('x');
  if (x == std::string::npos || x == 0 || x + 1 >= s.size()) return false;
  char* end = nullptr;
  const long va = std::strtol(s.c_str(), &end, 10);
  if (end != s.c_str() + x) return false;
  const long vb = std::strtol(s.c_str() + x + 1, &end, 10);
  if (*end != '\0' || va < 1 || vb < 1 || va > kMaxDimension || vb > kMaxDimension) return false;
  *a = static_cast<int>(va);
  *b = static_cast<int>(vb);
  return true;
}

std::string Dev(int d) { return "d" + std::to_string(d); }

// A rows x cols torus (rows = 1: a ring). A dimension of size 2 has one cable between the
// pair; larger ones have a "+" and a "-" neighbour. Routing: columns (x) first, then rows
// (y), each the shorter way round, "+" on a tie.
class Torus final : public Topology {
 public:
  Torus(std::string name, int rows, int cols, LinkParams link)
      : Topology(std::move(name), rows * cols), rows_(rows), cols_(cols), link_(link) {
    const int n = rows * cols;
    px_.assign(n, -1);
    mx_.assign(n, -1);
    py_.assign(n, -1);
    my_.assign(n, -1);
    for (int d = 0; d < n; ++d) {
      const int y = d / cols;
      const int x = d % cols;
      auto at = [&](int yy, int xx) { return Mod(yy, rows) * cols + Mod(xx, cols); };
      if (cols >= 2) px_[d] = AddLink(d, at(y, x + 1), link, Dev(d) + "->" + Dev(at(y, x + 1)));
      if (cols >= 3) mx_[d] = AddLink(d, at(y, x - 1), link, Dev(d) + "->" + Dev(at(y, x - 1)));
      if (rows >= 2) py_[d] = AddLink(d, at(y + 1, x), link, Dev(d) + "->" + Dev(at(y + 1, x)));
      if (rows >= 3) my_[d] = AddLink(d, at(y - 1, x), link, Dev(d) + "->" + Dev(at(y - 1, x)));
    }
  }

  void Route(int a, int b, std::vector<int>* path) const override {
    int y = a / cols_;
    int x = a % cols_;
    const int ty = b / cols_;
    const int tx = b % cols_;
    const int dx = Mod(tx - x, cols_);
    const bool plus_x = 2 * dx <= cols_;
    for (int k = 0, steps = plus_x ? dx : cols_ - dx; k < steps; ++k) {
      const int d = y * cols_ + x;
      path->push_back(plus_x ? px_[d] : mx_[d]);
      x = Mod(x + (plus_x ? 1 : -1), cols_);
    }
    const int dy = Mod(ty - y, rows_);
    const bool plus_y = 2 * dy <= rows_;
    for (int k = 0, steps = plus_y ? dy : rows_ - dy; k < steps; ++k) {
      const int d = y * cols_ + x;
      path->push_back(plus_y ? py_[d] : my_[d]);
      y = Mod(y + (plus_y ? 1 : -1), rows_);
    }
  }

  // Cutting a dimension of size L in half crosses (L > 2 ? 2 : 1) cables per line of it;
  // the bisection is the cheaper of the two cuts.
  double BisectionBandwidth() const override {
    double best = -1;
    auto consider = [&](int size, int lines) {
      if (size < 2) return;
      const double bw = static_cast<double>(lines) * (size > 2 ? 2 : 1) * link_.bandwidth_bps;
      if (best < 0 || bw < best) best = bw;
    };
    consider(cols_, rows_);
    consider(rows_, cols_);
    return best < 0 ? 0 : best;
  }

  void Layout(int* rows, int* cols) const override {
    *rows = rows_;
    *cols = cols_;
  }

 private:
  int rows_;
  int cols_;
  LinkParams link_;
  std::vector<int> px_, mx_, py_, my_;
};

// Every device has one port into a non-blocking switch. The port's send side is a link with
// the whole latency; its receive side is unlimited unless modelled.
class Switch final : public Topology {
 public:
  Switch(int n, LinkParams link, bool ideal_receive) : Topology("switch", n), link_(link) {
    const int sw = n;
    LinkParams down = ideal_receive ? kUnlimited : LinkParams{link.bandwidth_bps, 0};
    for (int d = 0; d < n; ++d) up_.push_back(AddLink(d, sw, link, Dev(d) + "->sw"));
    for (int d = 0; d < n; ++d) down_.push_back(AddLink(sw, d, down, "sw->" + Dev(d)));
  }
  void Route(int a, int b, std::vector<int>* path) const override {
    path->push_back(up_[a]);
    path->push_back(down_[b]);
  }
  double BisectionBandwidth() const override {
    return static_cast<double>(num_devices() / 2) * link_.bandwidth_bps;
  }

 private:
  LinkParams link_;
  std::vector<int> up_, down_;
};

// NODES x GPUS: inside a node every GPU has an NVLink port into the node's switch; every GPU
// also has its own NIC into rail switch g (GPU g of every node on rail g). A message to
// another node first moves over NVLink to the GPU on the destination's rail, then crosses
// that rail (rail-aligned), so inter-node traffic never needs a spine.
class TwoLevel final : public Topology {
 public:
  TwoLevel(std::string name, int nodes, int gpus, LinkParams intra, LinkParams inter)
      : Topology(std::move(name), nodes * gpus),
        nodes_(nodes),
        gpus_(gpus),
        intra_(intra),
        inter_(inter) {
    const int n = nodes * gpus;
    const LinkParams intra_down{intra.bandwidth_bps, 0};
    const LinkParams inter_down{inter.bandwidth_bps, 0};
    for (int d = 0; d < n; ++d) {
      const int node_switch = n + d / gpus;
      const int rail_switch = n + nodes + d % gpus;
      const std::string node = "node" + std::to_string(d / gpus);
      const std::string rail = "rail" + std::to_string(d % gpus);
      nv_up_.push_back(AddLink(d, node_switch, intra, Dev(d) + "->" + node + ".nvswitch"));
      nv_down_.push_back(AddLink(node_switch, d, intra_down, node + ".nvswitch->" + Dev(d)));
      nic_up_.push_back(AddLink(d, rail_switch, inter, Dev(d) + ".nic->" + rail));
      nic_down_.push_back(AddLink(rail_switch, d, inter_down, rail + "->" + Dev(d) + ".nic"));
    }
  }
  void Route(int a, int b, std::vector<int>* path) const override {
    const int na = a / gpus_;
    const int nb = b / gpus_;
    if (na == nb) {
      path->push_back(nv_up_[a]);
      path->push_back(nv_down_[b]);
      return;
    }
    const int via = na * gpus_ + b % gpus_;  // the GPU of a's node on b's rail
    if (via != a) {
      path->push_back(nv_up_[a]);
      path->push_back(nv_down_[via]);
    }
    path->push_back(nic_up_[via]);
    path->push_back(nic_down_[b]);
  }
  double BisectionBandwidth() const override {
    if (nodes_ >= 2) {
      return static_cast<double>(nodes_ / 2) * gpus_ * inter_.bandwidth_bps;
    }
    return static_cast<double>(gpus_ / 2) * intra_.bandwidth_bps;
  }
  void Layout(int* rows, int* cols) const override {
    *rows = nodes_;
    *cols = gpus_;
  }

 private:
  int nodes_;
  int gpus_;
  LinkParams intra_;
  LinkParams inter_;
  std::vector<int> nv_up_, nv_down_, nic_up_, nic_down_;
};

// LEAVES x DEVS with S spines: device -> leaf -> spine (dst mod S) -> leaf -> device. The
// latency is charged on the two upward links, so a same-leaf route costs one latency and a
// cross-leaf route two.
class FatTree final : public Topology {
 public:
  FatTree(std::string name, int leaves, int devs, int spines, LinkParams link)
      : Topology(std::move(name), leaves * devs),
        leaves_(leaves),
        devs_(devs),
        spines_(spines),
        link_(link) {
    const int n = leaves * devs;
    const LinkParams down{link.bandwidth_bps, 0};
    for (int d = 0; d < n; ++d) {
      const std::string leaf = "leaf" + std::to_string(d / devs);
      up_.push_back(AddLink(d, n + d / devs, link, Dev(d) + "->" + leaf));
      down_.push_back(AddLink(n + d / devs, d, down, leaf + "->" + Dev(d)));
    }
    leaf_up_.assign(static_cast<size_t>(leaves) * spines, -1);
    spine_down_.assign(static_cast<size_t>(leaves) * spines, -1);
    for (int l = 0; l < leaves; ++l) {
      for (int s = 0; s < spines; ++s) {
        const std::string leaf = "leaf" + std::to_string(l);
        const std::string spine = "spine" + std::to_string(s);
        leaf_up_[l * spines + s] = AddLink(n + l, n + leaves + s, link, leaf + "->" + spine);
        spine_down_[l * spines + s] = AddLink(n + leaves + s, n + l, down, spine + "->" + leaf);
      }
    }
  }
  void Route(int a, int b, std::vector<int>* path) const override {
    const int la = a / devs_;
    const int lb = b / devs_;
    path->push_back(up_[a]);
    if (la != lb) {
      const int s = b % spines_;
      path->push_back(leaf_up_[la * spines_ + s]);
      path->push_back(spine_down_[lb * spines_ + s]);
    }
    path->push_back(down_[b]);
  }
  double BisectionBandwidth() const override {
    if (leaves_ < 2) return static_cast<double>(devs_ / 2) * link_.bandwidth_bps;
    return static_cast<double>(leaves_ / 2) * std::min(devs_, spines_) * link_.bandwidth_bps;
  }
  void Layout(int* rows, int* cols) const override {
    *rows = leaves_;
    *cols = devs_;
  }

 private:
  int leaves_;
  int devs_;
  int spines_;
  LinkParams link_;
  std::vector<int> up_, down_, leaf_up_, spine_down_;
};

// One shared medium: every message crosses the same link, one at a time (the in-process
// loopback, whose hub copies every payload under one lock). The latency is charged on the
// device's own unlimited port.
class Bus final : public Topology {
 public:
  Bus(int n, LinkParams link) : Topology("bus", n), link_(link) {
    const int in = n;
    const int out = n + 1;
    for (int d = 0; d < n; ++d) {
      up_.push_back(AddLink(d, in, LinkParams{0, link.latency_ns}, Dev(d) + "->bus"));
    }
    shared_ = AddLink(in, out, LinkParams{link.bandwidth_bps, 0}, "bus");
    for (int d = 0; d < n; ++d) down_.push_back(AddLink(out, d, kUnlimited, "bus->" + Dev(d)));
  }
  void Route(int a, int b, std::vector<int>* path) const override {
    path->push_back(up_[a]);
    path->push_back(shared_);
    path->push_back(down_[b]);
  }
  double BisectionBandwidth() const override { return static_cast<double>(link_.bandwidth_bps); }

 private:
  LinkParams link_;
  int shared_ = -1;
  std::vector<int> up_, down_;
};

std::string FormatRate(int64_t bps) {
  char buf[48];
  if (bps == 0) return "unlimited";
  std::snprintf(buf, sizeof(buf), "%g GB/s", static_cast<double>(bps) / 1e9);
  return buf;
}

}  // namespace

StatusOr<LinkParams> LinkPreset(const std::string& name) {
  if (name == "ici") return LinkParams{45'000'000'000, 1000};
  if (name == "nvlink") return LinkParams{450'000'000'000, 1000};
  if (name == "ib_ndr") return LinkParams{50'000'000'000, 4000};
  return InvalidArgumentError("unknown link preset '" + name + "' (known: ici nvlink ib_ndr)");
}

std::string FormatLinkParams(const LinkParams& p) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), ", %g us", static_cast<double>(p.latency_ns) / 1000.0);
  return FormatRate(p.bandwidth_bps) + buf;
}

void Topology::Layout(int* rows, int* cols) const {
  *rows = 1;
  *cols = num_devices_;
}

int Topology::AddLink(int from, int to, LinkParams params, std::string name) {
  if (from < num_devices_) {
    if (injection_.empty()) injection_.assign(num_devices_, 0.0);
    injection_[from] += static_cast<double>(params.bandwidth_bps);
  }
  links_.push_back(Link{from, to, params, std::move(name)});
  return static_cast<int>(links_.size()) - 1;
}

double Topology::InjectionBandwidth(int d) const {
  return injection_.empty() ? 0.0 : injection_[d];
}

int Topology::Hops(int a, int b) const {
  if (a == b) return 0;
  std::vector<int> path;
  Route(a, b, &path);
  return static_cast<int>(path.size());
}

int64_t Topology::RouteLatencyNs(int a, int b) const {
  if (a == b) return 0;
  std::vector<int> path;
  Route(a, b, &path);
  int64_t total = 0;
  for (int l : path) total += links_[l].params.latency_ns;
  return total;
}

StatusOr<std::unique_ptr<Topology>> MakeTopology(const std::string& spec, int world_size,
                                                 const TopologyOptions& options) {
  if (world_size < 1) {
    return InvalidArgumentError("topology '" + spec + "': world size " +
                                std::to_string(world_size) + " must be at least 1");
  }
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string dims = colon == std::string::npos ? "" : spec.substr(colon + 1);
  auto check_count = [&](int64_t devices) -> Status {
    if (devices == world_size) return Status::Ok();
    return InvalidArgumentError("topology '" + spec + "' has " + std::to_string(devices) +
                                " devices but the world has " + std::to_string(world_size) +
                                " ranks");
  };
  int a = 0;
  int b = 0;
  if (kind == "switch" && dims.empty()) {
    return std::unique_ptr<Topology>(
        new Switch(world_size, options.link, options.ideal_switch_receive));
  }
  if (kind == "bus" && dims.empty()) {
    return std::unique_ptr<Topology>(new Bus(world_size, options.link));
  }
  if (kind == "ring" && dims.empty()) {
    return std::unique_ptr<Topology>(new Torus("ring", 1, world_size, options.link));
  }
  const bool two_dims = kind == "torus2d" || kind == "two_level" || kind == "fat_tree";
  if (two_dims && !ParseDims(dims, &a, &b)) {
    return InvalidArgumentError("topology '" + Printable(spec) + "': " + kind +
                                " wants AxB, each a whole number from 1 to " +
                                std::to_string(kMaxDimension));
  }
  if (two_dims) {
    GYRE_RETURN_IF_ERROR(check_count(int64_t{a} * b));
    const std::string name = kind + ":" + std::to_string(a) + "x" + std::to_string(b);
    if (kind == "torus2d") return std::unique_ptr<Topology>(new Torus(name, a, b, options.link));
    if (kind == "two_level") {
      return std::unique_ptr<Topology>(new TwoLevel(name, a, b, options.intra, options.inter));
    }
    const int spines = options.fat_tree_spines > 0 ? options.fat_tree_spines : b;
    // Every leaf is cabled to every spine, and each cable is two links built up front. A
    // route crosses spine (destination mod spines), so spines past the devices would carry
    // nothing; and the cables are held to the bound of the other dimensions, which keeps
    // their links to a few hundred MB (4096 leaves of one device each with 4096 spines
    // would be 33 million links).
    if (spines > world_size) {
      return InvalidArgumentError("topology '" + name + "': " + std::to_string(spines) +
                                  " spines, more than its " + std::to_string(world_size) +
                                  " devices (a route crosses spine destination mod spines, so "
                                  "the others would carry nothing)");
    }
    if (int64_t{a} * spines > kMaxDimension) {
      return InvalidArgumentError(
          "topology '" + name + "': " + std::to_string(a) + " leaves x " + std::to_string(spines) +
          " spines is " + std::to_string(int64_t{a} * spines) + " leaf-spine cables, more than " +
          std::to_string(kMaxDimension) + ": give fewer spines");
    }
    return std::unique_ptr<Topology>(new FatTree(name, a, b, spines, options.link));
  }
  return InvalidArgumentError("cannot parse topology '" + spec +
                              "' (known: switch, ring, torus2d:AxB, two_level:NODESxGPUS, "
                              "fat_tree:LEAVESxDEVICES, bus)");
}

}  // namespace gyre::sim
