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

namespace {
constexpr char kDroppedWords[] = " dropped the connection from ";
}  // namespace

std::string DroppedConnectionText(int dropper, const std::string& sender, const std::string& why) {
  return "rank " + std::to_string(dropper) + kDroppedWords + sender + ": " + why;
}

bool FindDroppedConnection(const std::string& message, int* dropper, std::string* text) {
  for (size_t at = message.find(kDroppedWords); at != std::string::npos;
       at = message.find(kDroppedWords, at + 1)) {
    // "rank <digits>" right before the words.
    size_t digits = at;
    while (digits > 0 && message[digits - 1] >= '0' && message[digits - 1] <= '9') --digits;
    if (digits == at || digits < 5 || message.compare(digits - 5, 5, "rank ") != 0) continue;
    if (at - digits > 9) continue;
    *dropper = std::stoi(message.substr(digits, at - digits));
    *text = message.substr(digits - 5);
    return true;
  }
  return false;
}

std::string Transport::DescribePeer(int peer) const { return "rank " + std::to_string(peer); }

}  // namespace gyre
