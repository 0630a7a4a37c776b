#include "core/base/tool_flags.h"

#include <gflags/gflags.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

namespace gyre {
namespace {

// Where gyre's flags are defined: the CMake build passes each source by its absolute path,
// so a flag's file (its __FILE__) starts with the source tree's path.
constexpr const char kSourceDir[] = GYRE_SOURCE_DIR "/";

bool IsGyreFlag(const gflags::CommandLineFlagInfo& info) {
  return info.filename.compare(0, sizeof(kSourceDir) - 1, kSourceDir) == 0;
}

// The --help text: the usage and every gyre flag the program links, one block per source
// file, then a pointer to --helpfull.
std::string ToolHelpText() {
  std::vector<gflags::CommandLineFlagInfo> all;
  gflags::GetAllFlags(&all);  // sorted by file, then by name
  std::map<std::string, std::string> by_file;
  for (const gflags::CommandLineFlagInfo& info : all) {
    if (IsGyreFlag(info)) by_file[info.filename] += gflags::DescribeOneFlag(info);
  }
  std::string text = gflags::ProgramUsage();
  text += "\n";
  for (const auto& [file, flags] : by_file) {
    text += "\n  Flags from " + file.substr(sizeof(kSourceDir) - 1) + ":\n" + flags;
  }
  if (by_file.empty()) text += "\n  (no flags of its own)\n";
  text += "\n  --helpfull lists the logging (glog) and flag-parsing (gflags) flags as well.\n";
  return text;
}

}  // namespace

void ParseToolFlags(int* argc, char*** argv, const std::string& usage) {
  gflags::SetUsageMessage(usage);
  // -h, which gflags does not know, asks for the same help as --help (up to a "--": what
  // follows it is not the program's flags).
  static char help_flag[] = "--help";
  for (int i = 1; i < *argc && std::strcmp((*argv)[i], "--") != 0; ++i) {
    if (std::strcmp((*argv)[i], "-h") == 0) (*argv)[i] = help_flag;
  }
  gflags::ParseCommandLineNonHelpFlags(argc, argv, true);
  std::string help;
  if (gflags::GetCommandLineOption("help", &help) && help == "true") {
    const std::string text = ToolHelpText();
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::exit(std::fflush(stdout) == 0 ? 0 : 1);
  }
  gflags::HandleCommandLineHelpFlags();
}

}  // namespace gyre
