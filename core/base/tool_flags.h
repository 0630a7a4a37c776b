// Command-line parsing shared by gyre's programs (gflags underneath). `--help` prints the
// usage line and the flags defined in gyre's own sources, so a tool's flags are not buried
// under glog's and gflags' (41 of gyrerun's 72); `--helpfull` still lists them all.
#pragma once

#include <string>

namespace gyre {

// Sets `usage` as the program's usage message and parses argv as
// gflags::ParseCommandLineFlags(argc, argv, true) does. On --help (or -h) it prints the usage
// and the program's gyre flags to stdout and exits 0; gflags' other help flags (--helpfull,
// --helpshort, --helpmatch, --version, ...) behave as gflags documents.
void ParseToolFlags(int* argc, char*** argv, const std::string& usage);

}  // namespace gyre
