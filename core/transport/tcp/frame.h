// The TCP transport's wire format. Every frame is a fixed 56-byte little-endian header, then
// `meta_len` bytes of protobuf metadata, then `payload_len` raw payload bytes. Decoding checks
// magic, version, CRC and every length against caps before the caller allocates anything, so
// garbage on a socket costs a closed connection and nothing else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/transport/transport.h"

namespace gyre {

// Header layout (offsets in bytes, integers little-endian):
//   0 magic u32 ("GYRE")   4 version u16    6 type u8       7 flags u8 (must be 0)
//   8 meta_len u32        12 seq u64       20 tag u64      28 payload_len u64
//  36 OpDesc: collective u8, dtype u8, reduce_op u8, algorithm u8, root i32, count i64
//  52 CRC-32 (IEEE) of bytes 0..51
inline constexpr uint32_t kFrameMagic = 0x45525947;
inline constexpr uint16_t kFrameVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 56;

// The handshake (core/auth/handshake.h) is hello, challenge, proof, ack; then data frames.
enum class FrameType : uint8_t {
  kHello = 1,      // meta: proto::PeerHello; no payload
  kHelloAck = 2,   // meta: proto::PeerHelloAck; no payload
  kData = 3,       // a message: seq, tag and OpDesc identify it; payload is the raw bytes
  kChallenge = 4,  // meta: proto::PeerChallenge; no payload
  kProof = 5,      // meta: proto::PeerProof; no payload
  // After the handshake, in place of a data frame: why the sender is dropping the connection,
  // written on it just before it closes, so that the peer's failed writes and reads name the
  // cause rather than a reset. meta: the reason's text (at most kMaxGoodbyeBytes); no payload.
  kGoodbye = 6,
};

inline constexpr size_t kMaxGoodbyeBytes = 1024;

const char* FrameTypeName(FrameType type);

struct FrameHeader {
  FrameType type = FrameType::kData;
  uint32_t meta_len = 0;
  uint64_t seq = 0;
  uint64_t tag = 0;
  uint64_t payload_len = 0;
  OpDesc desc;
};

// What a reader is prepared to accept; a header over either cap is refused.
struct FrameLimits {
  uint32_t max_meta_bytes = 0;
  uint64_t max_payload_bytes = 0;
};

void EncodeFrameHeader(const FrameHeader& header, uint8_t out[kFrameHeaderBytes]);

// Fills `out` from `in`, or fails with InvalidArgument naming the first broken rule (wrong
// magic, unsupported version, CRC mismatch, unknown type or flags, length over a cap).
Status DecodeFrameHeader(const uint8_t in[kFrameHeaderBytes], const FrameLimits& limits,
                         FrameHeader* out);

// A complete frame without payload (header followed by `meta`), as sent for the handshake.
std::vector<uint8_t> EncodeControlFrame(FrameType type, const std::string& meta);

// A goodbye frame carrying `reason` (cut to kMaxGoodbyeBytes).
std::vector<uint8_t> EncodeGoodbye(const std::string& reason);

// The reason in the goodbye frame at the start of `bytes`, or nullopt when they do not begin
// with a whole, valid one.
std::optional<std::string> DecodeGoodbye(const uint8_t* bytes, size_t size);

uint32_t Crc32(const void* data, size_t size);

}  // namespace gyre
