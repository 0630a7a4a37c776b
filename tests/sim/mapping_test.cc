// Rank-to-device mappings and the ring hop statistics they give.
#include "core/sim/mapping.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/algo/collective.h"
#include "core/sim/simulator.h"

namespace gyre::sim {
namespace {

std::unique_ptr<Topology> Torus4x4() { return MakeTopology("torus2d:4x4", 16).value(); }

bool IsPermutation(std::vector<int> m) {
  std::sort(m.begin(), m.end());
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i] != static_cast<int>(i)) return false;
  }
  return true;
}

TEST(SimMapping, IdentityAndSnake) {
  auto t = Torus4x4();
  auto id = MakeMapping("identity", *t);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ((*id)[5], 5);
  auto snake = MakeMapping("snake", *t);
  ASSERT_TRUE(snake.ok());
  // Row 0 left to right, row 1 right to left, ...
  EXPECT_EQ(*snake, (std::vector<int>{0, 1, 2, 3, 7, 6, 5, 4, 8, 9, 10, 11, 15, 14, 13, 12}));
  // On a flat topology snake is the identity.
  auto ring = MakeTopology("ring", 6).value();
  EXPECT_EQ(*MakeMapping("snake", *ring), *MakeMapping("identity", *ring));
}

TEST(SimMapping, RingHopsOnATorus) {
  auto t = Torus4x4();
  const HopStats snake = RingHops(*t, *MakeMapping("snake", *t));
  EXPECT_DOUBLE_EQ(snake.mean, 1.0);  // the wrap from (3,0) back to (0,0) is one link
  EXPECT_EQ(snake.max, 1);
  EXPECT_EQ(snake.pairs, 16);
  const HopStats row_major = RingHops(*t, *MakeMapping("identity", *t));
  EXPECT_DOUBLE_EQ(row_major.mean, (12 * 1 + 4 * 2) / 16.0);  // row ends are two links apart
  EXPECT_EQ(row_major.max, 2);
  const HopStats random = RingHops(*t, *MakeMapping("random:7", *t));
  EXPECT_GT(random.mean, row_major.mean);
  EXPECT_LE(random.max, 4);
  auto sw = MakeTopology("switch", 16).value();
  EXPECT_DOUBLE_EQ(RingHops(*sw, *MakeMapping("identity", *sw)).mean, 2.0);
}

TEST(SimMapping, RandomIsASeededPermutation) {
  auto t = Torus4x4();
  auto a = MakeMapping("random:42", *t);
  auto b = MakeMapping("random:42", *t);
  auto c = MakeMapping("random:43", *t);
  auto d = MakeMapping("random", *t);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_TRUE(IsPermutation(*a));
  EXPECT_TRUE(IsPermutation(*d));
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  EXPECT_NE(*a, *MakeMapping("identity", *t));
  EXPECT_EQ(*d, *MakeMapping("random:1", *t));
  EXPECT_FALSE(MakeMapping("random:x", *t).ok());
}

class SimMappingFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() /
        ("gyre_sim_mapping_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(SimMappingFile, ReadsAPermutationWithComments) {
  auto t = MakeTopology("ring", 4).value();
  const std::string path = Write("m.txt", "# rank -> device\n3 2\n1 0  # reversed\n");
  auto m = MakeMapping("file:" + path, *t);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, (std::vector<int>{3, 2, 1, 0}));
  // The mapping is used by the simulator too.
  algo::CollectiveSpec spec;
  spec.algorithm = algo::Algorithm::kRing;
  spec.world_size = 4;
  spec.count = 64;
  SimOptions o;
  o.topology = "ring";
  o.mapping = "file:" + path;
  auto r = Simulate(spec, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok);
  EXPECT_EQ(r->mapping, "file:" + path);
}

TEST_F(SimMappingFile, RejectsBadFiles) {
  auto t = MakeTopology("ring", 4).value();
  const struct {
    const char* text;
    const char* says;
  } cases[] = {
      {"0 1 2", "lists 3 devices"},
      {"0 1 2 2", "ranks 2 and 3 on device 2"},
      {"0 1 2 4", "not a device"},
      {"0 1 two 3", "'two'"},
  };
  int i = 0;
  for (const auto& c : cases) {
    const std::string path = Write("bad" + std::to_string(i++), c.text);
    auto m = MakeMapping("file:" + path, *t);
    ASSERT_FALSE(m.ok()) << c.text;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(c.says), std::string::npos) << m.status();
    EXPECT_NE(m.status().message().find(path), std::string::npos) << m.status();
  }
  EXPECT_FALSE(MakeMapping("file:" + (dir_ / "missing").string(), *t).ok());
  EXPECT_FALSE(MakeMapping("hilbert", *t).ok());
}

// A file that is not a mapping is refused once it passes a bound a mapping never needs,
// having held at most a line of it: /dev/zero was read as one endless line into memory.
TEST_F(SimMappingFile, FilesThatCannotBeAMappingAreRefusedAtTheirBound) {
  auto t = MakeTopology("ring", 4).value();
  auto zero = MakeMapping("file:/dev/zero", *t);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("'/dev/zero' line 1 is longer than 4096 bytes"),
            std::string::npos)
      << zero.status();
  // Lines of comments up to the file bound, and one device too many.
  std::string comments;
  while (comments.size() <= (size_t{16} << 20)) comments += "# a comment line of a mapping\n";
  const std::string big = Write("big", comments + "0 1 2 3\n");
  auto large = MakeMapping("file:" + big, *t);
  ASSERT_FALSE(large.ok());
  EXPECT_NE(large.status().message().find("is larger than 16 MiB"), std::string::npos)
      << large.status();
  auto more = MakeMapping("file:" + Write("more", "0 1\n2 3\n# done\n0\n"), *t);
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find("line 4 lists more than the topology's 4 devices"),
            std::string::npos)
      << more.status();
  // A directory opens as a file but cannot be read: an error, not an exception.
  auto dir = MakeMapping("file:" + dir_.string(), *t);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("cannot be read"), std::string::npos) << dir.status();
  // A line of the longest length, without a final newline, still reads.
  const std::string padded = "3 2 1 0" + std::string(4096 - 7, ' ');
  auto fits = MakeMapping("file:" + Write("fits", padded), *t);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(*fits, (std::vector<int>{3, 2, 1, 0}));
}

}  // namespace
}  // namespace gyre::sim
