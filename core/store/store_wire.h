// Framing and status conversion shared by TcpStore and TcpStoreServer. A frame is a 4-byte
// little-endian length followed by a serialized StoreRequest or StoreResponse; both sides
// check the length against kMaxFrameBytes before allocating anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/base/status.h"
#include "core/store/store.h"
#include "proto/store.pb.h"

namespace gyre::store::internal {

inline constexpr size_t kFrameHeaderBytes = 4;
// The largest value plus room for the keys of a large Wait and the protobuf overhead.
inline constexpr size_t kMaxFrameBytes = kMaxValueBytes + (size_t{4} << 20);

inline void EncodeFrameLength(uint32_t length, unsigned char out[kFrameHeaderBytes]) {
  for (size_t i = 0; i < kFrameHeaderBytes; ++i) out[i] = (length >> (8 * i)) & 0xff;
}

inline uint32_t DecodeFrameLength(const unsigned char in[kFrameHeaderBytes]) {
  uint32_t length = 0;
  for (size_t i = 0; i < kFrameHeaderBytes; ++i) length |= uint32_t{in[i]} << (8 * i);
  return length;
}

// Most keys one Wait or TryGetMany request may name.
inline constexpr size_t kMaxWaitKeys = size_t{1} << 16;

// The rules a parsed request must meet before a server acts on it: a known op, exactly one
// key (a Wait or TryGetMany: 1 to kMaxWaitKeys), every key and value within the store's caps.
// InvalidArgument naming `where` and the broken rule.
Status CheckRequest(const proto::StoreRequest& request, const std::string& where);

// Header followed by `message` serialized; false when it does not fit in a frame.
bool EncodeFrame(const google::protobuf::MessageLite& message, std::string* frame);

void SetResponseStatus(const Status& status, proto::StoreResponse* response);
Status ResponseStatus(const proto::StoreResponse& response);

const char* StoreOpName(proto::StoreOp op);

}  // namespace gyre::store::internal
