#include "core/transport/transport.h"

#include <atomic>

namespace gyre {
namespace {

std::string DefaultFormatter(const OpDesc& d) {
  return "op" + std::to_string(d.collective) + "(count=" + std::to_string(d.count) +
         ", dtype=" + std::to_string(d.dtype) + ", op=" + std::to_string(d.reduce_op) +
         ", root=" + std::to_string(d.root) + ", algo=" + std::to_string(d.algorithm) + ")";
}

std::atomic<OpDescFormatter> g_formatter{&DefaultFormatter};

std::string DefaultSeqTag(uint64_t seq, uint64_t tag) {
  return "seq " + std::to_string(seq) + " tag " + std::to_string(tag);
}

std::atomic<SeqTagFormatter> g_seq_tag{&DefaultSeqTag};

std::string DefaultOversizeRemedy(const OpDesc&) {
  return "the operation sends a message of that size in one piece";
}

std::atomic<OversizeRemedyFormatter> g_oversize{&DefaultOversizeRemedy};

}  // namespace

std::string DescribeOpDesc(const OpDesc& d) { return g_formatter.load()(d); }
void SetOpDescFormatter(OpDescFormatter f) { g_formatter.store(f ? f : &DefaultFormatter); }
std::string DescribeSeqTag(uint64_t seq, uint64_t tag) { return g_seq_tag.load()(seq, tag); }
void SetSeqTagFormatter(SeqTagFormatter f) { g_seq_tag.store(f ? f : &DefaultSeqTag); }
std::string DescribeOversizeRemedy(const OpDesc& d) { return g_oversize.load()(d); }
void SetOversizeRemedyFormatter(OversizeRemedyFormatter f) {
  g_oversize.store(f ? f : &DefaultOversizeRemedy);
}

std::string Transport::DescribePeer(int peer) const { return "rank " + std::to_string(peer); }

}  // namespace gyre
