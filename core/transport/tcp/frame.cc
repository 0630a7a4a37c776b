#include "core/transport/tcp/frame.h"

#include <array>
#include <cstdio>
#include <cstring>

namespace gyre {
namespace {

constexpr size_t kCrcOffset = 52;

// CRC-32 (IEEE, reflected) eight bytes at a time: table k gives the CRC contribution of a
// byte followed by k zero bytes, so the eight lookups of one step are independent rather
// than a chain of eight dependent ones (a header's 52 bytes: 7 steps and 4 single bytes).
using CrcTables = std::array<std::array<uint32_t, 256>, 8>;
constexpr CrcTables MakeCrcTables() {
  CrcTables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (0xEDB88320u ^ (c >> 1)) : (c >> 1);
    t[0][i] = c;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  }
  return t;
}
constexpr CrcTables kCrc = MakeCrcTables();

// Explicit byte order so the format does not depend on the host.
template <typename T>
void Put(uint8_t* out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out[i] = static_cast<uint8_t>(static_cast<uint64_t>(value) >> (8 * i));
  }
}

template <typename T>
T Get(const uint8_t* in) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return static_cast<T>(v);
}

bool KnownType(uint8_t type) {
  return type >= static_cast<uint8_t>(FrameType::kHello) &&
         type <= static_cast<uint8_t>(FrameType::kGoodbye);
}

}  // namespace

const char* FrameTypeName(FrameType type) {
  switch (type) {
    case FrameType::kHello:
      return "hello";
    case FrameType::kHelloAck:
      return "hello-ack";
    case FrameType::kData:
      return "data";
    case FrameType::kChallenge:
      return "challenge";
    case FrameType::kProof:
      return "proof";
    case FrameType::kGoodbye:
      return "goodbye";
  }
  return "unknown";
}

uint32_t Crc32(const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (; size >= 8; p += 8, size -= 8) {
    const uint32_t lo = c ^ Get<uint32_t>(p);
    const uint32_t hi = Get<uint32_t>(p + 4);
    c = kCrc[7][lo & 0xFF] ^ kCrc[6][(lo >> 8) & 0xFF] ^ kCrc[5][(lo >> 16) & 0xFF] ^
        kCrc[4][lo >> 24] ^ kCrc[3][hi & 0xFF] ^ kCrc[2][(hi >> 8) & 0xFF] ^
        kCrc[1][(hi >> 16) & 0xFF] ^ kCrc[0][hi >> 24];
  }
  for (; size > 0; ++p, --size) c = kCrc[0][(c ^ *p) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void EncodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]) {
  Put<uint32_t>(out + 0, kFrameMagic);
  Put<uint16_t>(out + 4, kFrameVersion);
  out[6] = static_cast<uint8_t>(h.type);
  out[7] = 0;
  Put<uint32_t>(out + 8, h.meta_len);
  Put<uint64_t>(out + 12, h.seq);
  Put<uint64_t>(out + 20, h.tag);
  Put<uint64_t>(out + 28, h.payload_len);
  out[36] = h.desc.collective;
  out[37] = h.desc.dtype;
  out[38] = h.desc.reduce_op;
  out[39] = h.desc.algorithm;
  Put<uint32_t>(out + 40, static_cast<uint32_t>(h.desc.root));
  Put<uint64_t>(out + 44, static_cast<uint64_t>(h.desc.count));
  Put<uint32_t>(out + kCrcOffset, Crc32(out, kCrcOffset));
}

Status DecodeFrameHeader(const uint8_t in[kFrameHeaderBytes], const FrameLimits& limits,
                         FrameHeader* out) {
  uint32_t magic = Get<uint32_t>(in);
  if (magic != kFrameMagic) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%08x", magic);
    return InvalidArgumentError(std::string("bad frame magic ") + hex + " (want 0x45525947)");
  }
  uint16_t version = Get<uint16_t>(in + 4);
  if (version != kFrameVersion) {
    return InvalidArgumentError("unsupported frame version " + std::to_string(version) +
                                " (this build speaks " + std::to_string(kFrameVersion) + ")");
  }
  uint32_t crc = Get<uint32_t>(in + kCrcOffset);
  if (crc != Crc32(in, kCrcOffset)) return InvalidArgumentError("frame header CRC mismatch");
  if (!KnownType(in[6])) {
    return InvalidArgumentError("unknown frame type " + std::to_string(in[6]));
  }
  if (in[7] != 0) return InvalidArgumentError("unknown frame flags " + std::to_string(in[7]));
  FrameHeader h;
  h.type = static_cast<FrameType>(in[6]);
  h.meta_len = Get<uint32_t>(in + 8);
  h.seq = Get<uint64_t>(in + 12);
  h.tag = Get<uint64_t>(in + 20);
  h.payload_len = Get<uint64_t>(in + 28);
  h.desc.collective = in[36];
  h.desc.dtype = in[37];
  h.desc.reduce_op = in[38];
  h.desc.algorithm = in[39];
  h.desc.root = static_cast<int32_t>(Get<uint32_t>(in + 40));
  h.desc.count = static_cast<int64_t>(Get<uint64_t>(in + 44));
  if (h.meta_len > limits.max_meta_bytes) {
    return InvalidArgumentError(std::string(FrameTypeName(h.type)) + " frame metadata of " +
                                std::to_string(h.meta_len) + " bytes exceeds the cap of " +
                                std::to_string(limits.max_meta_bytes) + " bytes");
  }
  if (h.payload_len > limits.max_payload_bytes) {
    return InvalidArgumentError(std::string(FrameTypeName(h.type)) + " frame payload of " +
                                std::to_string(h.payload_len) + " bytes exceeds the cap of " +
                                std::to_string(limits.max_payload_bytes) + " bytes");
  }
  *out = h;
  return Status::Ok();
}

std::vector<uint8_t> EncodeControlFrame(FrameType type, const std::string& meta) {
  std::vector<uint8_t> frame(kFrameHeaderBytes + meta.size());
  FrameHeader h;
  h.type = type;
  h.meta_len = static_cast<uint32_t>(meta.size());
  EncodeFrameHeader(h, frame.data());
  std::memcpy(frame.data() + kFrameHeaderBytes, meta.data(), meta.size());
  return frame;
}

std::vector<uint8_t> EncodeGoodbye(const std::string& reason) {
  return EncodeControlFrame(FrameType::kGoodbye, reason.substr(0, kMaxGoodbyeBytes));
}

std::optional<std::string> DecodeGoodbye(const uint8_t* bytes, size_t size) {
  if (size < kFrameHeaderBytes) return std::nullopt;
  FrameHeader h;
  if (!DecodeFrameHeader(bytes, FrameLimits{static_cast<uint32_t>(kMaxGoodbyeBytes), 0}, &h).ok() ||
      h.type != FrameType::kGoodbye || size < kFrameHeaderBytes + h.meta_len) {
    return std::nullopt;
  }
  return std::string(reinterpret_cast<const char*>(bytes) + kFrameHeaderBytes, h.meta_len);
}

}  // namespace gyre
