// Small helpers for reading and writing files through descriptors.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

#include "core/base/status.h"

namespace gyre {

// Writes all `n` bytes of `data` to `fd`, going on after a short write or EINTR: 0, or the
// errno of the first other failure (EIO for a write that wrote nothing).
int WriteFully(int fd, const char* data, size_t n);

// The whole of a small file (a calibration, a mapping), read without ever holding more than
// `max_bytes` + 1 of it: a path that names /dev/zero, a FIFO's endless writer or a huge file is
// refused (InvalidArgument) rather than taking the host's memory. `what` names the file in
// every error ("calibration file 'x': ..."), which says why: the errno, or the size.
StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes,
                                    const std::string& what);

// Opens `path` for appending (created 0644 if missing) without waiting for a reader: a FIFO
// that no process reads is refused (as any error, with its errno) instead of blocking the
// caller until one comes.
StatusOr<std::FILE*> OpenForAppend(const std::string& path);

}  // namespace gyre
