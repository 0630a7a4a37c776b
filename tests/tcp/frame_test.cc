#include "core/transport/tcp/frame.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace gyre {
namespace {

const FrameLimits kLimits{4096, 1 << 20};

FrameHeader SampleHeader() {
  FrameHeader h;
  h.type = FrameType::kData;
  h.meta_len = 17;
  h.seq = 0x0102030405060708ull;
  h.tag = 0xF0E0D0C0B0A09080ull;
  h.payload_len = 12345;
  h.desc.collective = 3;
  h.desc.dtype = 7;
  h.desc.reduce_op = 2;
  h.desc.algorithm = 5;
  h.desc.root = -4;
  h.desc.count = -123456789012345ll;
  return h;
}

TEST(FrameTest, RoundTripsEveryField) {
  uint8_t bytes[kFrameHeaderBytes];
  EncodeFrameHeader(SampleHeader(), bytes);
  FrameHeader out;
  ASSERT_TRUE(DecodeFrameHeader(bytes, kLimits, &out).ok());
  FrameHeader in = SampleHeader();
  EXPECT_EQ(out.type, in.type);
  EXPECT_EQ(out.meta_len, in.meta_len);
  EXPECT_EQ(out.seq, in.seq);
  EXPECT_EQ(out.tag, in.tag);
  EXPECT_EQ(out.payload_len, in.payload_len);
  EXPECT_TRUE(out.desc == in.desc);
}

TEST(FrameTest, LayoutIsLittleEndianWithMagicFirst) {
  uint8_t bytes[kFrameHeaderBytes];
  EncodeFrameHeader(SampleHeader(), bytes);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(bytes), 4), "GYRE");
  EXPECT_EQ(bytes[4], 1);  // version
  EXPECT_EQ(bytes[5], 0);
  EXPECT_EQ(bytes[6], static_cast<uint8_t>(FrameType::kData));
  EXPECT_EQ(bytes[12], 0x08);  // seq, low byte first
  EXPECT_EQ(bytes[19], 0x01);
  EXPECT_EQ(Crc32("123456789", 9), 0xCBF43926u);  // the standard CRC-32 check value
}

// Crc32 works eight bytes at a time; a bit at a time is the definition it must match, at
// every length and starting offset.
TEST(FrameTest, Crc32MatchesTheBitwiseDefinition) {
  auto bitwise = [](const uint8_t* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (0xEDB88320u ^ (c >> 1)) : (c >> 1);
    }
    return c ^ 0xFFFFFFFFu;
  };
  std::vector<uint8_t> data(300);
  uint32_t x = 12345;
  for (uint8_t& b : data) {
    x = x * 1103515245u + 12345u;
    b = static_cast<uint8_t>(x >> 16);
  }
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n + offset <= 200; ++n) {
      ASSERT_EQ(Crc32(data.data() + offset, n), bitwise(data.data() + offset, n))
          << "offset " << offset << ", " << n << " bytes";
    }
  }
}

TEST(FrameTest, EveryCorruptedByteIsRejected) {
  uint8_t good[kFrameHeaderBytes];
  EncodeFrameHeader(SampleHeader(), good);
  for (size_t i = 0; i < kFrameHeaderBytes; ++i) {
    uint8_t bad[kFrameHeaderBytes];
    std::memcpy(bad, good, sizeof(bad));
    bad[i] ^= 0x5A;
    FrameHeader out;
    EXPECT_FALSE(DecodeFrameHeader(bad, kLimits, &out).ok()) << "byte " << i;
  }
}

TEST(FrameTest, NamesTheBrokenRule) {
  uint8_t bytes[kFrameHeaderBytes];
  FrameHeader out;
  EncodeFrameHeader(SampleHeader(), bytes);
  bytes[0] = 'X';
  Status s = DecodeFrameHeader(bytes, kLimits, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("magic"), std::string::npos) << s;

  EncodeFrameHeader(SampleHeader(), bytes);
  bytes[4] = 9;
  s = DecodeFrameHeader(bytes, kLimits, &out);
  EXPECT_NE(s.message().find("version 9"), std::string::npos) << s;

  EncodeFrameHeader(SampleHeader(), bytes);
  bytes[30] ^= 1;
  s = DecodeFrameHeader(bytes, kLimits, &out);
  EXPECT_NE(s.message().find("CRC"), std::string::npos) << s;
}

TEST(FrameTest, LengthsOverTheCapsAreRefusedBeforeAnyAllocation) {
  uint8_t bytes[kFrameHeaderBytes];
  FrameHeader out;
  FrameHeader h = SampleHeader();
  h.payload_len = uint64_t{1} << 62;
  EncodeFrameHeader(h, bytes);
  Status s = DecodeFrameHeader(bytes, kLimits, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("exceeds the cap of 1048576 bytes"), std::string::npos) << s;

  h = SampleHeader();
  h.meta_len = 0xFFFFFFFFu;
  EncodeFrameHeader(h, bytes);
  s = DecodeFrameHeader(bytes, kLimits, &out);
  EXPECT_NE(s.message().find("metadata of 4294967295 bytes"), std::string::npos) << s;

  h = SampleHeader();
  h.payload_len = kLimits.max_payload_bytes;
  h.meta_len = kLimits.max_meta_bytes;
  EncodeFrameHeader(h, bytes);
  EXPECT_TRUE(DecodeFrameHeader(bytes, kLimits, &out).ok());
}

TEST(FrameTest, ControlFrameCarriesItsMetadata) {
  std::vector<uint8_t> frame = EncodeControlFrame(FrameType::kHello, "meta!");
  ASSERT_EQ(frame.size(), kFrameHeaderBytes + 5);
  FrameHeader out;
  ASSERT_TRUE(DecodeFrameHeader(frame.data(), kLimits, &out).ok());
  EXPECT_EQ(out.type, FrameType::kHello);
  EXPECT_EQ(out.meta_len, 5u);
  EXPECT_EQ(out.payload_len, 0u);
  EXPECT_EQ(std::string(frame.begin() + kFrameHeaderBytes, frame.end()), "meta!");
}

}  // namespace
}  // namespace gyre
