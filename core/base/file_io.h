// Small helpers for writing files through descriptors.
#pragma once

#include <cstddef>

namespace gyre {

// Writes all `n` bytes of `data` to `fd`, going on after a short write or EINTR: 0, or the
// errno of the first other failure (EIO for a write that wrote nothing).
int WriteFully(int fd, const char* data, size_t n);

}  // namespace gyre
