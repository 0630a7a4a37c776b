#include "core/algo/builders_internal.h"

namespace gyre::algo::internal {

Status BuildAllgather(const CollectiveSpec& spec, RankBuilder* b) {
  return InternalError("BuildAllgather is not built yet");
}

Status BuildGather(const CollectiveSpec& spec, RankBuilder* b) {
  return InternalError("BuildGather is not built yet");
}

Status BuildScatter(const CollectiveSpec& spec, RankBuilder* b) {
  return InternalError("BuildScatter is not built yet");
}

Status BuildAlltoall(const CollectiveSpec& spec, RankBuilder* b) {
  return InternalError("BuildAlltoall is not built yet");
}

Status BuildBarrier(const CollectiveSpec& spec, RankBuilder* b) {
  return InternalError("BuildBarrier is not built yet");
}

}  // namespace gyre::algo::internal
