// Starting a thread as a step that can fail. std::thread throws std::system_error when the
// process cannot have one more (EAGAIN: RLIMIT_NPROC, the kernel's task limit, or no address
// space left for its stack under RLIMIT_AS), and a throw nobody catches ends the process in
// std::terminate. Every thread gyre starts goes through StartThread, and its caller turns a
// refusal into an error for the program (or a skipped helper), never an abort.
#pragma once

#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "core/base/status.h"

namespace gyre {

// Starts `body` on `*thread` (which must not hold a running thread). ResourceExhausted when
// the system refuses: "<who> cannot start a thread: <reason> (for <purpose>)".
template <typename Body>
Status StartThread(std::thread* thread, const std::string& who, const std::string& purpose,
                   Body&& body) {
  std::string reason;
  try {
    *thread = std::thread(std::forward<Body>(body));
    return Status::Ok();
  } catch (const std::system_error& e) {
    reason = e.code().message();
  } catch (const std::bad_alloc&) {
    reason = "out of memory";
  }
  return ResourceExhaustedError(who + " cannot start a thread: " + reason + " (for " + purpose +
                                ")");
}

}  // namespace gyre
