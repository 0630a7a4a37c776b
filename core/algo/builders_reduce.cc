#include "core/algo/builders_internal.h"

namespace gyre::algo::internal {

Status BuildReduce(const CollectiveSpec& spec, RankBuilder* b) {
  return InternalError("BuildReduce is not built yet");
}

Status BuildReduceScatter(const CollectiveSpec& spec, RankBuilder* b) {
  return InternalError("BuildReduceScatter is not built yet");
}

}  // namespace gyre::algo::internal
