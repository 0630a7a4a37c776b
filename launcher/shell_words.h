// Splitting a command given as one string (gyrerun's --rsh) into words, as a POSIX shell
// splits a command line before it expands anything.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"

namespace gyre::launcher {

// Blanks (space, tab, newline) separate words. Inside '...' every character is itself; inside
// "..." a backslash escapes only $ ` " \ and a newline, and is itself before anything else; a
// backslash outside quotes makes the next character itself (a backslash-newline joins two
// lines). Quotes may meet within one word (a'b'"c" is abc), and '' or "" alone is an empty
// word. Nothing is expanded: $HOME, `cmd`, * and ~ stay as written. An unterminated quote, or
// a backslash that ends the text, is InvalidArgument naming it and where it starts.
StatusOr<std::vector<std::string>> SplitShellWords(const std::string& text);

}  // namespace gyre::launcher
