// launcher/oom_kills.h: finding the OOM-kill counter of a cgroup, reading it, and the note for
// a rank killed by SIGKILL.
#include "launcher/oom_kills.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

namespace gyre::launcher {
namespace {

std::set<std::string>* g_files = nullptr;
bool Exists(const std::string& path) { return g_files->count(path) > 0; }

std::string CounterPath(const std::string& proc_cgroup, std::set<std::string> files) {
  g_files = &files;
  return OomKillCounterPath(proc_cgroup, "/cg", Exists);
}

TEST(OomKillsTest, CgroupV2CountsInMemoryEvents) {
  EXPECT_EQ(CounterPath("0::/user.slice/job-7\n", {"/cg/user.slice/job-7/memory.events"}),
            "/cg/user.slice/job-7/memory.events");
  // A path with ':' in it stays whole.
  EXPECT_EQ(CounterPath("0::/a:b\n", {"/cg/a:b/memory.events"}), "/cg/a:b/memory.events");
}

TEST(OomKillsTest, CgroupV1MemoryControllerCountsInOomControlWhenV2HasNoCounter) {
  // A hybrid layout: the v2 hierarchy holds no memory controller, so no memory.events there.
  const std::string hybrid = "9:name=systemd:/\n4:memory:/jobs/j1\n3:cpu,cpuacct:/\n0::/\n";
  EXPECT_EQ(CounterPath(hybrid, {"/cg/memory/jobs/j1/memory.oom_control"}),
            "/cg/memory/jobs/j1/memory.oom_control");
  EXPECT_EQ(CounterPath("5:cpu,memory:/x\n", {"/cg/memory/x/memory.oom_control"}),
            "/cg/memory/x/memory.oom_control");
  // v2 first when both are there.
  EXPECT_EQ(
      CounterPath("4:memory:/\n0::/y\n", {"/cg/memory/memory.oom_control", "/cg/y/memory.events"}),
      "/cg/y/memory.events");
}

TEST(OomKillsTest, NoCounterWhereNoneIsThere) {
  EXPECT_EQ(CounterPath("0::/\n", {}), "");
  EXPECT_EQ(CounterPath("4:memory:/j\n", {}), "");
  EXPECT_EQ(CounterPath("", {"/cg/memory.events"}), "");
  EXPECT_EQ(CounterPath("garbage\n0:/\n", {"/cg/memory.events"}), "");
}

TEST(OomKillsTest, ParsesTheOomKillLineOfEitherFile) {
  EXPECT_EQ(ParseOomKillCount("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"),
            std::optional<int64_t>(2));
  EXPECT_EQ(ParseOomKillCount("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"),
            std::optional<int64_t>(7));
  EXPECT_EQ(ParseOomKillCount("oom_kill 0"), std::optional<int64_t>(0));
  EXPECT_EQ(ParseOomKillCount("oom_kill_disable 0\nunder_oom 0\n"), std::nullopt);
  EXPECT_EQ(ParseOomKillCount(""), std::nullopt);
  EXPECT_EQ(ParseOomKillCount("oom_kill -1\n"), std::nullopt);
  EXPECT_EQ(ParseOomKillCount("oom_kill lots\n"), std::nullopt);
  EXPECT_EQ(ParseOomKillCount("oom_kill 1 2\n"), std::nullopt);
}

TEST(OomKillsTest, ReadsTheCountOrNothing) {
  const std::string path = ::testing::TempDir() + "/gyre-oom-events-" + std::to_string(::getpid());
  std::ofstream(path) << "oom 1\noom_kill 4\n";
  EXPECT_EQ(ReadOomKillCount(path), std::optional<int64_t>(4));
  std::remove(path.c_str());
  EXPECT_EQ(ReadOomKillCount(path), std::nullopt);
  EXPECT_EQ(ReadOomKillCount(""), std::nullopt);
  EXPECT_EQ(ReadOomKillCount("/"), std::nullopt);  // a folder
}

TEST(OomKillsTest, NotesOnlyACountThatRose) {
  EXPECT_EQ(OomKillNote("/cg/j/memory.events", 0, 1),
            "(likely the kernel's out-of-memory killer: oom_kill in /cg/j/memory.events rose "
            "from 0 to 1)");
  EXPECT_EQ(OomKillNote("/cg/j/memory.events", 3, 3), "");
  EXPECT_EQ(OomKillNote("/cg/j/memory.events", 3, 2), "");  // a new cgroup, say
  EXPECT_EQ(OomKillNote("/cg/j/memory.events", std::nullopt, 1), "");
  EXPECT_EQ(OomKillNote("/cg/j/memory.events", 0, std::nullopt), "");
  EXPECT_EQ(OomKillNote("", 0, 1), "");
}

}  // namespace
}  // namespace gyre::launcher
