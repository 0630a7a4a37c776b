// The transport seam: asynchronous, tagged, point-to-point messages with completion
// callbacks. The executor drives every algorithm through this interface only, so the same
// schedule runs over the in-process loopback, the fault-injecting wrapper, TCP and the
// network simulator.
//
// Contract for every implementation:
//  - Send/Recv never block. `done` runs exactly once, with OK or an error, either inline
//    (before Send/Recv returns) or later on a transport thread. `done` must not block and
//    must not call back into the transport while holding locks of its own.
//  - A message is identified by (sender, receiver, seq, tag). A receive matches the one
//    message from `peer` with the same seq and tag; messages may arrive before their
//    receive is posted (the transport holds them) and in any order across tags.
//  - A receive whose matching message has a different size or a different OpDesc fails
//    with InvalidArgument describing both sides (a mismatched collective call).
//  - `data` passed to Send/Recv stays valid until `done` runs; after CancelOperation(seq)
//    returns, the transport no longer touches the buffers of that operation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/base/clock.h"
#include "core/base/status.h"

namespace gyre {

// The fingerprint of a collective call, carried by every data message so a receiver
// detects a mismatched call (different collective, dtype, count, root, op or algorithm).
struct OpDesc {
  uint8_t collective = 0;
  uint8_t dtype = 0;
  uint8_t reduce_op = 0;
  uint8_t algorithm = 0;
  int32_t root = 0;
  int64_t count = 0;

  bool operator==(const OpDesc& o) const {
    return collective == o.collective && dtype == o.dtype && reduce_op == o.reduce_op &&
           algorithm == o.algorithm && root == o.root && count == o.count;
  }
  bool operator!=(const OpDesc& o) const { return !(*this == o); }
};
static_assert(sizeof(OpDesc) == 16, "OpDesc is part of the wire format");

// "allreduce(count=12, float32, sum, root=0, algo=ring)"; the names come from the algo
// layer through a formatter installed at start-up, so the transport stays below it.
std::string DescribeOpDesc(const OpDesc& d);
using OpDescFormatter = std::string (*)(const OpDesc&);
void SetOpDescFormatter(OpDescFormatter f);
// A message's sequence number and tag as a user reads them ("seq 12, step p1.r0.s0", or a
// point-to-point message's sender, receiver and tag): installed by the same layer, the raw
// numbers until then.
std::string DescribeSeqTag(uint64_t seq, uint64_t tag);
using SeqTagFormatter = std::string (*)(uint64_t seq, uint64_t tag);
void SetSeqTagFormatter(SeqTagFormatter f);
// What the caller can do about a message over the transport's size cap, for the operation it
// belongs to ("every gather algorithm ... sends whole blocks as single messages ...: make
// smaller calls"): whether another algorithm helps depends on the collective, so this too is
// installed by the layer above; a hint that names no remedy until then.
std::string DescribeOversizeRemedy(const OpDesc& d);
using OversizeRemedyFormatter = std::string (*)(const OpDesc&);
void SetOversizeRemedyFormatter(OversizeRemedyFormatter f);

// A connection a rank dropped for what its sender did (a protocol violation, going over
// max_unexpected_bytes, a message it cannot hold): "rank D dropped the connection from
// <sender>: <why>". The same words reach the sender (its goodbye) and fail both sides' calls
// over that pair from then on, so a verdict can find the cause in either side's error.
std::string DroppedConnectionText(int dropper, const std::string& sender, const std::string& why);
// Finds those words in an error message: the dropping rank and the text from "rank D
// dropped" on. False when the message holds none.
bool FindDroppedConnection(const std::string& message, int* dropper, std::string* text);

struct MessageHeader {
  uint64_t seq = 0;  // operation sequence number within the communicator
  uint64_t tag = 0;  // message tag within the operation's schedule
  OpDesc desc;
};

using DoneCallback = std::function<void(Status)>;

// A message this rank had to drop for want of its own memory (TCP: an early message whose
// buffer could not be allocated): the operation it belonged to, and why.
struct Exhaustion {
  uint64_t seq = 0;
  std::string why;
};

// A message held for an operation this rank has already finished, which none of its
// receives took: ranks making the same call receive all that is sent to them in it, so the
// sender made another call there.
struct StaleMessage {
  int peer = -1;
  uint64_t seq = 0;
  uint64_t tag = 0;
  OpDesc desc;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const Clock& clock() const = 0;

  virtual void Send(int peer, const MessageHeader& header, const void* data, size_t bytes,
                    DoneCallback done) = 0;
  virtual void Recv(int peer, const MessageHeader& header, void* data, size_t bytes,
                    DoneCallback done) = 0;

  // Completes every pending Send and Recv of operation `seq` with `reason` (their `done`
  // may run inside this call) and drops messages of `seq` that arrive later. When it
  // returns, no transport thread reads or writes a buffer of that operation.
  virtual void CancelOperation(uint64_t seq, const Status& reason) = 0;

  // Payload bytes received from `peer` so far, counting frames still in progress. The
  // executor uses it to tell a slow peer (this grows) from a silent one.
  virtual uint64_t BytesReceivedFrom(int peer) const = 0;
  // Bytes written towards `peer` so far (frames in part included), for the same purpose on
  // the sending side; 0 where a transport does not count them.
  virtual uint64_t BytesSentTo(int peer) const {
    (void)peer;
    return 0;
  }
  // The same, counting only the frames of operation `seq`: what a wait in `seq` may take for
  // progress. A peer that streams other messages (point-to-point ones, or a later call's)
  // while this rank waits on it in `seq` is not moving `seq`, and must not hold its deadline
  // off. Where a transport does not count by operation, every byte counts.
  virtual uint64_t BytesReceivedFrom(int peer, uint64_t seq) const {
    (void)seq;
    return BytesReceivedFrom(peer);
  }
  virtual uint64_t BytesSentTo(int peer, uint64_t seq) const {
    (void)seq;
    return BytesSentTo(peer);
  }

  // "rank 3 (127.0.0.1:40123)" or "rank 3" where there is no address.
  virtual std::string DescribePeer(int peer) const;

  // Before each operation, from the thread that runs it: this rank will send `bytes` of
  // payload in it. A transport may tune its connections for that volume (TCP: congestion
  // control); the default ignores it.
  virtual void ExpectSend(size_t bytes) { (void)bytes; }

  // Closes every connection. Pending operations fail; peers see this rank as gone.
  virtual void Shutdown() = 0;

  // Drops every message held for a collective before `seq` that no cancelled operation
  // explains, and returns the first of them (lowest seq), if any. Called before operation
  // `seq` starts; the default holds none.
  virtual std::optional<StaleMessage> TakeStale(uint64_t seq) {
    (void)seq;
    return std::nullopt;
  }

  // The latest drop for want of this rank's own memory, if any. A rank's state reports it at
  // once, so the others' verdicts name this rank even before its own call of that operation
  // fails (or starts). Any thread; the default drops nothing for memory.
  virtual std::optional<Exhaustion> LastExhaustion() const { return std::nullopt; }
};

}  // namespace gyre
