// TcpStoreServer: serves a HashStore to TcpStore clients over TCP on its own io thread.
// Every connection first completes the authenticated handshake of core/auth/handshake.h
// (within handshake_timeout, its messages capped at a few hundred bytes); nothing else is
// read before that. Blocking requests (Get, Wait) are parked until their keys appear or
// their deadline passes, so they never hold up other clients. A connection that sends
// garbage (a length over the cap, an unparsable request, a frame that never completes) is
// dropped with a logged reason while the server goes on serving everyone else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/auth/handshake.h"
#include "core/auth/secret.h"
#include "core/base/clock.h"
#include "core/base/status.h"

namespace gyre::store {

class TcpStoreServer {
 public:
  // The most ranks one server is sized for; a million connections is past any descriptor
  // limit, and larger counts are clamped to it.
  static constexpr int kMaxRanks = 1 << 20;
  // Connections a tool may hold beside the ranks' own (gyrerun's hang watcher, gyrectl).
  static constexpr int kToolConnections = 64;
  // The connection cap for a store that serves `ranks` ranks, one connection each, plus
  // kToolConnections; saturates rather than overflowing.
  static constexpr int ConnectionsFor(int ranks) {
    return (ranks < 1 ? 1 : ranks > kMaxRanks ? kMaxRanks : ranks) + kToolConnections;
  }

  struct Options {
    // Frames longer than this are refused before any allocation.
    size_t max_frame_bytes;
    // A frame whose header has arrived must complete within this time.
    Duration frame_timeout = Seconds(30);
    // Connections beyond this are closed at once, with a logged reason that names the cap
    // and `max_connections_hint`. Size it for the ranks served: ConnectionsFor(ranks).
    int max_connections = ConnectionsFor(1024);
    // Where max_connections comes from and how to raise it, for that log line, e.g. "the cap
    // is --max_ranks 4096 plus 64 for tools; restart gyre-store with a larger --max_ranks".
    std::string max_connections_hint = "raise TcpStoreServer::Options::max_connections";
    // The job's secret; clients must prove they hold it. Empty: see core/auth/secret.h.
    auth::Secret secret;
    // Only clients of this job are served; empty serves any job id (the proof still binds
    // the id the client claims, and a shared server needs a shared secret).
    std::string job_id;
    // A connection must complete the handshake within this time, however it trickles.
    Duration handshake_timeout = Seconds(5);
    // Connections still in the handshake. At the cap, the one that has waited longest there
    // is closed to make room for a newcomer.
    int max_unauthenticated = 64;
    // Called on the io thread with the key of every Set, Add or CompareSet the store
    // answered without an error (a CompareSet whose comparison failed too: the key then held
    // a value), for an owner that must know what was ever written, such as which ranks
    // claimed their rendezvous slot (records leave the store again). Must be quick and must
    // not call the server. Empty: none.
    std::function<void(const std::string& key)> on_write;
    Options();
  };

  // Listens on host:port (port 0: the kernel picks; see port()). Only `host` is bound:
  // "127.0.0.1" stays local; "0.0.0.0" must be asked for explicitly.
  static StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& host = "127.0.0.1",
                                                         int port = 0);
  static StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& host, int port,
                                                         const Options& options);
  // Stops as Stop() does.
  ~TcpStoreServer();

  // Closes the listener and every connection (parked clients see the connection close) and
  // joins the io thread. Idempotent. Must not be called from a store callback.
  void Stop();

  int port() const;
  // "host:port", e.g. "127.0.0.1:29500"
  std::string address() const;
  // "tcp://host:port"
  std::string url() const;

  // Connections dropped since Start: garbage, a protocol violation, over a cap, or refused
  // in the handshake.
  int64_t dropped_connections() const;
  // The connections refused in the handshake, by reason.
  const auth::RefusalCounters& refusals() const;

 private:
  class Impl;
  explicit TcpStoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gyre::store
