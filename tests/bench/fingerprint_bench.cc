// What the call fingerprint costs per frame: every data frame's header carries the sender's
// OpDesc (collective, dtype, op, algorithm, root, count), covered by the header CRC, and the
// receiver compares it with its own call. Measured here: encode + decode + compare of a
// header with the fingerprint, against the same header with the fingerprint left zero and
// not compared. Multiply the difference by the frames of an operation and divide by its
// measured time to get the share (docs/algorithms.md quotes it for a 1 MiB allreduce).
//   build/bin/gyre-fingerprint-bench
#include <benchmark/benchmark.h>

#include "core/transport/tcp/frame.h"

namespace {

gyre::FrameHeader Header(bool fingerprint) {
  gyre::FrameHeader h;
  h.type = gyre::FrameType::kData;
  h.seq = 41;
  h.tag = 7;
  h.payload_len = 256 << 10;
  if (fingerprint) {
    h.desc.collective = 0;
    h.desc.dtype = 8;
    h.desc.reduce_op = 0;
    h.desc.algorithm = 1;
    h.desc.root = 0;
    h.desc.count = 1 << 18;
  }
  return h;
}

void BM_Header(benchmark::State& state, bool fingerprint) {
  const gyre::FrameHeader sent = Header(fingerprint);
  const gyre::OpDesc expected = sent.desc;
  const gyre::FrameLimits limits{1 << 20, uint64_t{1} << 32};
  uint8_t wire[gyre::kFrameHeaderBytes];
  int64_t mismatches = 0;
  for (auto _ : state) {
    gyre::EncodeFrameHeader(sent, wire);
    benchmark::DoNotOptimize(wire);
    gyre::FrameHeader got;
    gyre::Status s = gyre::DecodeFrameHeader(wire, limits, &got);
    benchmark::DoNotOptimize(s);
    if (fingerprint && !(got.desc == expected)) ++mismatches;
    benchmark::DoNotOptimize(mismatches);
  }
  state.counters["mismatches"] = static_cast<double>(mismatches);
}
BENCHMARK_CAPTURE(BM_Header, with_fingerprint, true)->Name("frame_header/with_fingerprint");
BENCHMARK_CAPTURE(BM_Header, without_fingerprint, false)->Name("frame_header/without_fingerprint");

}  // namespace

BENCHMARK_MAIN();
