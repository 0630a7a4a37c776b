// gyre::Transport over TCP. Each rank listens on one socket; the first Send to a peer opens a
// connection to it, and the peer sends its own messages back on the same connection unless
// it had already begun connecting itself (see one_connection_per_pair). Socket work happens
// on one io thread owned by the transport, or on the caller's thread: Send writes at once
// when it can, and a thread holding the driver lease (core/transport/driven.h) reads and
// writes while it waits, so a small message needs no thread switch. Frames are described in
// frame.h. Every connection opens with the authenticated handshake of core/auth/handshake.h;
// nothing else is read from a connection before its proof has checked out.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/auth/handshake.h"
#include "core/auth/secret.h"
#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/transport/driven.h"
#include "core/transport/tcp/buffer_pool.h"
#include "core/transport/transport.h"

namespace gyre {

struct TcpTransportOptions {
  int rank = 0;
  int world_size = 1;
  // Every connection carries it; a hello from another job is refused.
  std::string job_id;
  // The job's secret. Both sides of every connection prove they hold it; a connection whose
  // proof fails is closed without a word and counted (refusals()). Empty: see secret.h.
  auth::Secret secret;
  // Must be an IP address the peers can reach; address() advertises it.
  std::string listen_host = "127.0.0.1";
  int listen_port = 0;  // 0: the kernel picks a free port
  // How long the first Send to a peer keeps retrying to connect and handshake before every
  // Send to that peer fails with Unavailable.
  Duration connect_timeout = Seconds(30);
  // How long connects to a peer may all be refused before they are given up, within
  // connect_timeout: ranks listen before they publish their address, so a port that refuses
  // for this long has no rank behind it any more (it exited or closed its communicator).
  Duration refused_timeout = Seconds(1);
  // How long an accepted connection may take to complete the handshake (a total deadline,
  // so a sender of one byte per second is cut off too), and how long one connect attempt
  // waits for the answers; a silent stranger holds a socket for no longer.
  Duration handshake_timeout = Seconds(5);
  // Accepted connections still in the handshake. At the cap, the one that has waited longest
  // there is closed to make room for a newcomer.
  int max_unauthenticated_connections = 64;
  // Largest message accepted or sent; a larger frame header closes the connection before
  // anything is allocated.
  size_t max_frame_bytes = size_t{1} << 30;
  // Cap on payload bytes of messages that arrived before their Recv was posted, over all
  // peers. A frame that would exceed it closes its connection.
  size_t max_unexpected_bytes = size_t{1} << 30;
  // Idle payload buffers of such early messages kept for the next ones (buffer_pool.h): an
  // early message is the rule in a large collective, and a fresh buffer for each costs a
  // page fault per page. Measured on 2 cores, pinned, auto, 5 interleaved runs against a
  // buffer per message: at 8 ranks allreduce of 1, 4, 16 MiB took 0.91, 0.54, 0.75x the
  // time and allgather of 4, 16, 64 MiB 0.64, 0.54, 0.78x (page faults per rank and
  // iteration of a 4 MiB ring allreduce: 110 before, 0 after); 4 ranks and smaller sizes
  // within the spread (0.97-1.04). 0 frees each buffer at once.
  size_t early_buffer_pool_bytes = size_t{64} << 20;
  // SO_SNDBUF / SO_RCVBUF. 0 leaves the kernel's autotuning alone, which on Linux grows past
  // what an unprivileged process may set explicitly.
  int socket_buffer_bytes = 0;
  // TCP congestion control for connections whose peer is on this host (over the loopback
  // device) while this host has a CPU for each of its ranks; empty keeps the system's
  // default, which connections to other hosts always keep.
  // On loopback there is no bottleneck to model: BBR (the default of some kernels) sizes its
  // window from a microsecond RTT, so a message over about 1 MiB waits for ACKs, its tail is
  // then sent from the receiver's CPU, segments arrive out of order and look lost. Reno,
  // always allowed to unprivileged processes, opens the window and the sender pushes whole
  // messages. Measured on 2 vCPUs with BBR the default (pinned, 2 ranks): broadcast 1-16 MiB
  // 0.5x the time, allreduce 4-16 MiB 0.65-0.73x, 4 B-1 MiB unchanged. With more ranks than
  // CPUs the spurious losses that reordering still causes collapse Reno's window while a
  // rank waits for its core: recursive doubling at 4 ranks, 64-256 KiB, took 1.2-7x as long,
  // so oversubscribed hosts use shared_cpu_congestion_control instead.
  std::string same_host_congestion_control = "reno";
  // On a host with more ranks than CPUs, same-host connections switch to this congestion
  // control for an operation in which this rank sends at least bulk_send_bytes, and back to
  // shared_cpu_congestion_control for one of 64 KiB up to that (smaller ones leave it). Reno's
  // window collapses at the spurious losses of a rank that waits for its core, which costs small
  // and medium operations; a long transfer opens it again and then pushes whole messages, where BBR
  // paces from a microsecond RTT. Measured on 2 cores, pinned, 4-5 runs of each: allreduce,
  // allgather and broadcast of 4-64 MiB took 0.57-0.76x the time under Reno at p = 4 and 0.64-0.93x
  // at p = 8 (2 MiB and up); at p = 8, 64 KiB-1 MiB took 1.1-2.2x. The line sits at 1 MiB:
  // against 2 MiB, 5-7 runs each, a broadcast of 1 MiB took 0.51-0.56x the time at p = 4 and
  // 0.79x at p = 8 (1-4 MiB), the rest within the spread; at 512 KiB, p = 8 lost 1.37-1.44x at
  // 512 KiB-1 MiB. Empty: no switching; connections keep the control set at their handshake.
  std::string bulk_congestion_control = "reno";
  size_t bulk_send_bytes = size_t{1} << 20;
  // On a host with more ranks than CPUs, the congestion control of same-host connections
  // outside bulk operations; empty keeps the system's. Both same-host controls are set
  // before a connection's handshake (the listening socket's, inherited by accepted ones, and
  // an outgoing socket's before connect when the peer's address is a loopback one or the one
  // this rank listens on): set afterwards, a control that paces, as BBR does, leaves pacing
  // on for the connection's life, and every later control is then paced from an RTT that a
  // rank waiting for its core stretches to milliseconds. Measured on 2 cores with BBR the
  // system's default, pinned, auto, 4 interleaved runs: connections that never ran BBR took
  // 0.48-0.60x the time at p = 8 for allgather of 4-64 MiB and 0.72-0.90x for allreduce of
  // 1-64 MiB; switching to cubic after the handshake instead took 1.3-1.8x at p = 8,
  // 64 KiB-1 MiB.
  std::string shared_cpu_congestion_control = "cubic";
  // One connection per pair of ranks carries messages both ways: a rank that accepts a peer's
  // connection while it has none of its own to that peer sends on it too. A reply then
  // carries the ACK of the message it answers; with a connection each way every small
  // message costs a separate ACK segment (measured on 2 vCPUs, 4-byte ping-pong over
  // loopback: 4.6-5.1 us one way on one connection, 7.0-8.2 us on two). Two ranks that
  // connect to each other at once keep a connection each way. The lower rank of each pair
  // connects at SetPeers, unless the world is larger than max_unauthenticated_connections
  // (then the first sender connects). false: always one each way.
  bool one_connection_per_pair = true;
  // How long a driver (core/transport/driven.h) polls its sockets before it sleeps in the
  // kernel, while every message it waits for is small (at most 256 KiB). Sleeping costs a
  // wake-up that, on a busy core, waits for the scheduler. Only while this host has a CPU
  // per rank (else driver_yield_spin applies): spinning without yielding would keep the rank
  // it waits for off a shared core. Measured on 2 cores: medians of small allreduces 3-7x
  // lower at p=2 than sleeping at once. Zero sleeps at once.
  Duration driver_spin = std::chrono::microseconds(50);
  // With more ranks on this host than it has CPUs, a driver waiting for small messages polls
  // its sockets for up to this long, yielding the CPU between polls (Open MPI's
  // mpi_yield_when_idle), so a rank on the same core can run and the wake-up of a sleep is
  // saved. A yield that comes back late (something kept the core for a time slice, a CPU hog
  // say) makes it sleep at once for 5 ms, doubling while late yields recur, up to a second.
  // Measured on 2 cores, 4 and 8 ranks: small allreduces 1.3-2x faster than sleeping at once.
  // Zero sleeps at once.
  Duration driver_yield_spin = std::chrono::milliseconds(2);
  // In worlds of more ranks than this a driver sleeps on an epoll set holding each of its
  // connections once, rather than polling all of them per wait (kernel work in proportion
  // to the world on every wake-up). Measured on 2 cores, small allreduces: 0.8x the time at
  // 32 ranks, 0.6-0.8x at 64; at 2 and 4 ranks the poll of a few descriptors was 1-5%
  // faster, hence the threshold.
  int driver_epoll_above_ranks = 16;
  // AcquireDriver declines operations whose largest message exceeds this; the io thread then
  // moves their bytes while the caller waits. Measured on 2 cores (a VM; ring allreduce,
  // pinned, medians of 20 iterations), driving every size beat handing messages over 1 MiB
  // to the io thread: 4 MiB at p=2 2.0 vs 3.0 ms, 16 MiB at p=2 8.5-10.5 vs 12.2-12.5 ms, at
  // p=4 28-34 vs 58-68 ms; p=8 alike. The thread hand-offs cost more than the socket left
  // undrained while the caller reduces.
  size_t driver_max_message_bytes = size_t{1} << 30;
};

class TcpTransport final : public Transport, public DrivenTransport {
 public:
  // Binds and listens (so address() is known at once) and starts the io thread.
  static StatusOr<std::unique_ptr<TcpTransport>> Create(const TcpTransportOptions& options);

  // Shuts down and joins the io thread. Must not run on the io thread (inside a `done`).
  ~TcpTransport() override;

  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  // "127.0.0.1:40123": what peers pass to SetPeers for this rank.
  std::string address() const;

  // The listening address of every rank, index = rank, as found at rendezvous. Call once,
  // before the first Send; receiving works before it.
  Status SetPeers(std::vector<std::string> addresses);

  int rank() const override;
  int size() const override;
  const Clock& clock() const override;

  // Sends and receives never block; `done` runs on the io thread, on the driver's thread
  // inside Drive, or inline (a refusal, or a frame written at once). A receive from a peer whose
  // connection to this rank closed fails with Unavailable, but only once every message that arrived
  // before the close has been matched; a peer that never connected is caught by the caller's
  // deadline, not here.
  void Send(int peer, const MessageHeader& header, const void* data, size_t bytes,
            DoneCallback done) override;
  void Recv(int peer, const MessageHeader& header, void* data, size_t bytes,
            DoneCallback done) override;

  // Safe from any thread, including inside `done`.
  void CancelOperation(uint64_t seq, const Status& reason) override;

  uint64_t BytesReceivedFrom(int peer) const override;
  uint64_t BytesSentTo(int peer) const override;
  uint64_t BytesReceivedFrom(int peer, uint64_t seq) const override;
  uint64_t BytesSentTo(int peer, uint64_t seq) const override;
  std::optional<StaleMessage> TakeStale(uint64_t seq) override;
  std::optional<Exhaustion> LastExhaustion() const override;

  // DrivenTransport. While a driver holds the lease, the io thread leaves identified
  // connections to it; they go back to the io thread when a receive is posted without one.
  // Declines operations with messages over options.driver_max_message_bytes.
  bool AcquireDriver(size_t max_message_bytes) override;
  void ReleaseDriver() override;
  void Drive(TimePoint until) override;
  void Wake() override;
  std::string DescribePeer(int peer) const override;
  // Switches same-host connections to options.bulk_congestion_control and back (above).
  void ExpectSend(size_t bytes) override;

  // Connections this rank refused, by reason. Safe from any thread.
  const auth::RefusalCounters& refusals() const;
  // The early-message buffer pool's counters. Safe from any thread.
  BufferPoolStats early_buffers() const;

  // Idempotent. Pending operations fail with Aborted. From inside a `done` it closes
  // everything at once and the io thread is joined by the destructor.
  void Shutdown() override;

 private:
  class Impl;
  explicit TcpTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gyre
