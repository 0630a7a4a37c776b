// Network topologies for the simulator: devices and switches joined by directed links (a
// full-duplex cable is two links, one per direction), and the route a message takes from
// one device to another. Routes are fixed functions of the two end points (dimension-order
// on a torus, destination-mod-k on a fat-tree, rail-aligned on a two-level cluster), so a
// run is deterministic. docs/simulator.md draws each topology.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace gyre::sim {

struct LinkParams {
  int64_t bandwidth_bps = 0;  // bytes per second; 0 means unlimited (not a shared resource)
  int64_t latency_ns = 0;     // added once per traversal of the link
};

// Named presets: "ici" (45 GB/s, 1 us), "nvlink" (450 GB/s, 1 us), "ib_ndr" (an NDR
// InfiniBand NIC: 50 GB/s, 4 us). GB is 1e9 bytes.
StatusOr<LinkParams> LinkPreset(const std::string& name);
std::string FormatLinkParams(const LinkParams& p);  // "45 GB/s, 1 us"

struct TopologyOptions {
  LinkParams link{45'000'000'000, 1000};    // switch, ring, torus2d, fat_tree
  LinkParams intra{450'000'000'000, 1000};  // two_level: NVLink inside a node
  LinkParams inter{50'000'000'000, 4000};   // two_level: one NIC per GPU
  // "switch": a port's receive side is unlimited, as in the cost model of cost.h (so a
  // simulated time on a switch equals CostOf's). false models it as a link like the send
  // side.
  bool ideal_switch_receive = true;
  // fat_tree: spine switches (0: as many as devices per leaf, i.e. full bisection).
  int fat_tree_spines = 0;
};

struct Link {
  int from = 0;  // node ids: devices are 0 .. num_devices-1, switches follow
  int to = 0;
  LinkParams params;
  std::string name;  // "d3->d4", "d3->sw", "leaf1->spine0"
};

class Topology {
 public:
  virtual ~Topology() = default;

  const std::string& name() const { return name_; }  // "torus2d:4x4"
  int num_devices() const { return num_devices_; }
  const std::vector<Link>& links() const { return links_; }

  // Appends to `path` the links a message from device a to device b (a != b) crosses, in
  // order.
  virtual void Route(int a, int b, std::vector<int>* path) const = 0;
  // Bytes per second from one half of the devices to the other across the topology's
  // natural balanced cut (one direction).
  virtual double BisectionBandwidth() const = 0;
  // Rows x cols of the device numbering (row-major), for the snake mapping; 1 x n when the
  // topology has no second dimension.
  virtual void Layout(int* rows, int* cols) const;

  // Sum of the bandwidths of the limited links leaving device d.
  double InjectionBandwidth(int d) const;
  int Hops(int a, int b) const;                // links on the route
  int64_t RouteLatencyNs(int a, int b) const;  // sum of their latencies

 protected:
  Topology(std::string name, int num_devices) : name_(std::move(name)), num_devices_(num_devices) {}
  int AddLink(int from, int to, LinkParams params, std::string name);

 private:
  std::string name_;
  int num_devices_;
  std::vector<Link> links_;
  std::vector<double> injection_;  // per device
};

// Parses a topology for `world_size` devices:
//   switch                 each device one port into an ideal switch
//   ring                   a bidirectional physical ring
//   torus2d:AxB            A rows x B columns with wrap-around, dimension-order routing
//   two_level:NODESxGPUS   NVLink switch inside each node, one NIC per GPU, rail-aligned
//   fat_tree:LEAVESxDEVS   two-level folded Clos, destination-mod-k up-routing
//   bus                    one shared medium (how the in-process loopback behaves)
// InvalidArgument when the spec is malformed or its device count is not world_size.
StatusOr<std::unique_ptr<Topology>> MakeTopology(const std::string& spec, int world_size,
                                                 const TopologyOptions& options = {});

}  // namespace gyre::sim
