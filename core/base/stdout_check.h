// Output a program wrote to stdout but that never reached it (a full disk, /dev/full, a closed
// pipe) is an error, not a success: every gyre tool checks it before it exits.
#pragma once

#include "core/base/status.h"

namespace gyre {

// Flushes std::cout and stdout; ResourceExhausted "cannot write to stdout: <reason>" if
// anything written to either was lost.
Status FlushStdout();

// For a tool's main: returns `code` if stdout took everything, otherwise prints
// "<tool>: cannot write to stdout: <reason>" on stderr and returns `code`, or 2 if `code` was 0.
int ExitCodeAfterFlushingStdout(const char* tool, int code);

}  // namespace gyre
