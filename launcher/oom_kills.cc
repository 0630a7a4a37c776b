#include "launcher/oom_kills.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace gyre::launcher {

std::string OomKillCounterPath(const std::string& proc_cgroup, const std::string& root,
                               bool (*exists)(const std::string& path)) {
  std::string v2, v1;
  std::istringstream lines(proc_cgroup);
  for (std::string line; std::getline(lines, line);) {
    // "hierarchy-id:controllers:path"; the path may itself hold ':'.
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string id = line.substr(0, first);
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path.empty() || path[0] != '/') continue;
    if (path == "/") path.clear();
    if (id == "0" && controllers.empty()) v2 = root + path + "/memory.events";
    std::istringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');) {
      if (name == "memory") v1 = root + "/memory" + path + "/memory.oom_control";
    }
  }
  if (!v2.empty() && exists(v2)) return v2;
  if (!v1.empty() && exists(v1)) return v1;
  return "";
}

std::string OwnOomKillCounterPath() {
  std::ifstream in("/proc/self/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  return OomKillCounterPath(text.str(), "/sys/fs/cgroup", [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  });
}

std::optional<int64_t> ParseOomKillCount(const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string key, value, extra;
    if (!(words >> key >> value) || key != "oom_kill" || (words >> extra)) continue;
    if (value.empty() || value.size() > 18 ||
        value.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    return std::strtoll(value.c_str(), nullptr, 10);
  }
  return std::nullopt;
}

std::optional<int64_t> ReadOomKillCount(const std::string& path) {
  if (path.empty()) return std::nullopt;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return ParseOomKillCount(text.str());
}

std::string OomKillNote(const std::string& path, std::optional<int64_t> before,
                        std::optional<int64_t> after) {
  if (path.empty() || !before || !after || *after <= *before) return "";
  return "(likely the kernel's out-of-memory killer: oom_kill in " + path + " rose from " +
         std::to_string(*before) + " to " + std::to_string(*after) + ")";
}

}  // namespace gyre::launcher
