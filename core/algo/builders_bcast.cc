#include "core/algo/builders_internal.h"

namespace gyre::algo::internal {

Status BuildBroadcast(const CollectiveSpec& spec, RankBuilder* b) {
  return InternalError("BuildBroadcast is not built yet");
}

}  // namespace gyre::algo::internal
