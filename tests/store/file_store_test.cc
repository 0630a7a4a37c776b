// FileStore specifics: file naming, folder creation, atomic publish, the lock file, and
// many handles (as many processes would) on one folder.
#include "core/store/file_store.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "tests/store/store_test_util.h"

namespace gyre::store {
namespace {

using ::testing::HasSubstr;
using testing::In;
using testing::TempDir;

TEST(FileStoreTest, FileNamesAreSafeAndBounded) {
  EXPECT_EQ(FileStore::FileNameForKey("rank/0"), "k.rank%2F0");
  EXPECT_EQ(FileStore::FileNameForKey("a.b-c_D9"), "k.a.b-c_D9");
  EXPECT_EQ(FileStore::FileNameForKey(std::string("\0\xff", 2)), "k.%00%FF");
  EXPECT_EQ(FileStore::FileNameForKey(".."), "k...");
  std::string long_name = FileStore::FileNameForKey(std::string(4096, '/'));
  EXPECT_EQ(long_name.substr(0, 2), "h.");
  EXPECT_LE(long_name.size(), 40u);
  EXPECT_NE(FileStore::FileNameForKey(std::string(300, 'a')),
            FileStore::FileNameForKey(std::string(301, 'a')));
}

TEST(FileStoreTest, CreatesTheFolderWithParents) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/a/b/c/";
  auto store = FileStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Describe(), "file://" + tmp.path() + "/a/b/c");
  ASSERT_TRUE((*store)->Set("k", "v", In(Seconds(5))).ok());
  EXPECT_EQ(TempDir::List(tmp.path() + "/a/b/c"), (std::vector<std::string>{".lock", "k.k"}));
}

TEST(FileStoreTest, OpenOnAFileIsAnError) {
  TempDir tmp;
  const std::string file = tmp.path() + "/plain";
  std::ofstream(file) << "x";
  auto store = FileStore::Open(file);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr(file));
  auto below = FileStore::Open(file + "/sub");
  ASSERT_FALSE(below.ok());
  EXPECT_THAT(below.status().message(), HasSubstr(file));
  EXPECT_THAT(below.status().message(), HasSubstr("Not a directory"));
}

// A file:// store that cannot be used fails at once naming its path, not after the
// rendezvous deadline: a folder under a plain file, and one this process cannot write.
TEST(FileStoreTest, AnUnusableFolderFailsAtOnceThroughOpenStore) {
  TempDir tmp;
  const std::string file = tmp.path() + "/plain";
  std::ofstream(file) << "x";
  auto start = std::chrono::steady_clock::now();
  auto below = OpenStore("file://" + file + "/sub", In(Seconds(30)));
  ASSERT_FALSE(below.ok());
  EXPECT_THAT(below.status().message(), HasSubstr(file));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));

  // Mode bits do not stop root; a folder of a read-only file system does.
  std::string locked = tmp.path() + "/locked";
  if (::geteuid() == 0) {
    locked = "/proc/self/fdinfo";
  } else {
    ASSERT_EQ(::mkdir(locked.c_str(), 0500), 0);
  }
  start = std::chrono::steady_clock::now();
  auto unwritable = OpenStore("file://" + locked, In(Seconds(30)));
  ASSERT_FALSE(unwritable.ok());
  EXPECT_THAT(unwritable.status().message(), HasSubstr(locked));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  if (::geteuid() != 0) ::chmod(locked.c_str(), 0700);
}

TEST(FileStoreTest, AFifoAtAKeysPathIsAnErrorByTheDeadline) {
  // Opening a FIFO for reading blocks until a writer comes: it must not outlast the deadline.
  TempDir tmp;
  auto store = FileStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  const std::string fifo = tmp.path() + "/" + FileStore::FileNameForKey("k");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto value = (*store)->Get("k", In(Seconds(1)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  ASSERT_FALSE(value.ok());
  EXPECT_THAT(value.status().message(), HasSubstr("is not a regular file"));
  EXPECT_THAT(value.status().message(), HasSubstr(fifo));
}

TEST(FileStoreTest, PublishLeavesNoTempFilesAndIgnoresStaleOnes) {
  TempDir tmp;
  auto store = FileStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  // What a writer that crashed between create and rename leaves behind.
  std::ofstream(tmp.path() + "/.tmp.deadhost.1.0") << "half";
  ASSERT_TRUE((*store)->Set("x", "1", In(Seconds(5))).ok());
  ASSERT_EQ(*(*store)->Add("n", 2, In(Seconds(5))), 2);
  ASSERT_EQ(*(*store)->CompareSet("c", "", "z", In(Seconds(5))), "z");
  EXPECT_EQ(TempDir::List(tmp.path()),
            (std::vector<std::string>{".lock", ".tmp.deadhost.1.0", "k.c", "k.n", "k.x"}));
  std::ifstream in(tmp.path() + "/k.n");
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "2");
}

TEST(FileStoreTest, LongKeysUseHashedFilesThatRecordTheKey) {
  TempDir tmp;
  auto store = FileStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  const std::string key_a(1000, 'a');
  const std::string key_b = std::string(999, 'a') + "b";
  ASSERT_TRUE((*store)->Set(key_a, "A", In(Seconds(5))).ok());
  ASSERT_TRUE((*store)->Set(key_b, "B", In(Seconds(5))).ok());
  EXPECT_EQ(*(*store)->Get(key_a, In(Seconds(5))), "A");
  EXPECT_EQ(*(*store)->Get(key_b, In(Seconds(5))), "B");
  EXPECT_TRUE((*store)->Wait({key_a, key_b}, In(Seconds(1))).ok());
  // A file under a key's hashed name that records another key is reported, not returned.
  const std::string hashed = tmp.path() + "/" + FileStore::FileNameForKey(key_a);
  std::string other = std::string(999, 'a') + "c";
  std::string forged(8, '\0');
  forged[0] = static_cast<char>(other.size() & 0xff);
  forged[1] = static_cast<char>(other.size() >> 8);
  std::ofstream(hashed, std::ios::binary | std::ios::trunc) << forged << other << "X";
  auto collided = (*store)->Get(key_a, In(Seconds(1)));
  ASSERT_EQ(collided.status().code(), StatusCode::kInternal) << collided.status();
  EXPECT_THAT(collided.status().message(), HasSubstr("hash collision"));
}

TEST(FileStoreTest, LockHeldElsewhereTimesOutNamingTheLockFile) {
  TempDir tmp;
  auto store = FileStore::Open(tmp.path());
  ASSERT_TRUE(store.ok());
  // Another process holding the lock looks the same: a separate open file description.
  int fd = ::open((tmp.path() + "/.lock").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  TimePoint start = SteadyClock::Get()->Now();
  auto added = (*store)->Add("n", 1, In(Millis(200)));
  Duration took = SteadyClock::Get()->Now() - start;
  ASSERT_EQ(added.status().code(), StatusCode::kDeadlineExceeded) << added.status();
  EXPECT_THAT(added.status().message(), HasSubstr(tmp.path() + "/.lock"));
  EXPECT_THAT(added.status().message(), HasSubstr("'n'"));
  EXPECT_GE(took, Millis(190));
  EXPECT_LT(took, Seconds(3));
  // Readers do not need the lock.
  EXPECT_TRUE((*store)->TryGet("n", In(Seconds(1))).ok());
  ::flock(fd, LOCK_UN);
  ::close(fd);
  EXPECT_EQ(*(*store)->Add("n", 1, In(Seconds(5))), 1);
}

TEST(FileStoreTest, ManyHandlesAddFromManyThreads) {
  TempDir tmp;
  constexpr int kThreads = 6;
  constexpr int kAdds = 40;
  std::vector<std::unique_ptr<FileStore>> handles;
  for (int t = 0; t < kThreads; ++t) handles.push_back(FileStore::Open(tmp.path()).value());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) {
        auto result = handles[t]->Add("sum", t + 1, In(Seconds(20)));
        EXPECT_TRUE(result.ok()) << result.status();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  // Sum of (t + 1) * kAdds for t in 0..kThreads-1.
  EXPECT_EQ(*handles[0]->Add("sum", 0, In(Seconds(5))), kAdds * kThreads * (kThreads + 1) / 2);
}

}  // namespace
}  // namespace gyre::store
