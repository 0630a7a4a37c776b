// Whether this test is built with AddressSanitizer (GYRE_SANITIZE=address, which adds UBSan).
// Its runtime keeps freed memory in quarantine (up to 256 MiB), so resident memory says
// nothing about leaks there, and it needs file descriptors of its own.
#pragma once

namespace gyre::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace gyre::testing
