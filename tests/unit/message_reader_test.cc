// ipc::MessageReader: length-prefixed messages read through a buffer, as the client library
// and gyred read each other. Real sockets (a Unix socketpair), real partial writes.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "core/ipc/ipc.h"
#include "proto/client.pb.h"

namespace gyre::ipc {
namespace {

class MessageReaderTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0); }
  void TearDown() override {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  static std::string Frame(uint64_t id, const std::string& message = "") {
    proto::ClientResponse r;
    r.set_id(id);
    if (!message.empty()) r.mutable_status()->set_message(message);
    std::string body = r.SerializeAsString();
    std::string frame(4, '\0');
    for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((body.size() >> (8 * i)) & 0xff);
    return frame + body;
  }
  void Write(const std::string& bytes) {
    ASSERT_EQ(::write(fds_[0], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  static Deadline In(Duration d) { return Deadline::After(*SteadyClock::Get(), d); }
  int fds_[2] = {-1, -1};
};

TEST_F(MessageReaderTest, TwoMessagesInOneWriteComeOutOneByOne) {
  Write(Frame(1) + Frame(2, "second"));
  MessageReader reader(fds_[1]);
  proto::ClientResponse a, b;
  ASSERT_TRUE(reader.Read(&a, In(Seconds(5)), "test").ok());
  EXPECT_EQ(a.id(), 1u);
  // The second message was read along with the first and is kept for the next Read.
  EXPECT_EQ(reader.buffered(), Frame(2, "second").size());
  ASSERT_TRUE(reader.Read(&b, In(Seconds(5)), "test", ReadStart::kWaitFirst).ok());
  EXPECT_EQ(b.id(), 2u);
  EXPECT_EQ(b.status().message(), "second");
  EXPECT_EQ(reader.buffered(), 0u);
}

TEST_F(MessageReaderTest, AMessageCutAnywhereIsReassembled) {
  const std::string big = Frame(7, std::string(10000, 'x'));  // larger than the first buffer
  for (size_t cut : {size_t{1}, size_t{3}, size_t{4}, size_t{5}, big.size() - 1}) {
    MessageReader reader(fds_[1]);
    std::thread writer([&] {
      Write(big.substr(0, cut));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      Write(big.substr(cut) + Frame(8));
    });
    proto::ClientResponse r;
    Status s = reader.Read(&r, In(Seconds(5)), "test", ReadStart::kWaitFirst);
    writer.join();
    ASSERT_TRUE(s.ok()) << "cut at " << cut << ": " << s.ToString();
    EXPECT_EQ(r.id(), 7u);
    EXPECT_EQ(r.status().message().size(), 10000u);
    ASSERT_TRUE(reader.Read(&r, In(Seconds(5)), "test").ok());
    EXPECT_EQ(r.id(), 8u);
  }
}

TEST_F(MessageReaderTest, ALengthOverTheCapIsRefusedBeforeAnyAllocation) {
  Write(std::string("\xff\xff\xff\x7f", 4));
  MessageReader reader(fds_[1]);
  proto::ClientResponse r;
  Status s = reader.Read(&r, In(Seconds(5)), "client connection");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("client connection: length prefix"), std::string::npos) << s;
  EXPECT_NE(s.message().find("exceeds the cap"), std::string::npos) << s;
}

TEST_F(MessageReaderTest, GarbageBytesAreAnErrorNotACrash) {
  Write(std::string("\x05\x00\x00\x00\xff\xff\xff\xff\xff", 9));
  MessageReader reader(fds_[1]);
  proto::ClientResponse r;
  Status s = reader.Read(&r, In(Seconds(5)), "test");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unparsable"), std::string::npos) << s;
}

TEST_F(MessageReaderTest, ThePeerClosingMidMessageIsUnavailable) {
  const std::string f = Frame(3, "cut short");
  Write(f.substr(0, f.size() - 2));
  ::close(fds_[0]);
  fds_[0] = -1;
  MessageReader reader(fds_[1]);
  proto::ClientResponse r;
  Status s = reader.Read(&r, In(Seconds(5)), "gyre client talking to daemon");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("closed by the other side"), std::string::npos) << s;
}

TEST_F(MessageReaderTest, SilenceEndsAtTheDeadline) {
  MessageReader reader(fds_[1]);
  proto::ClientResponse r;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = reader.Read(&r, In(Millis(100)), "test", ReadStart::kWaitFirst);
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_GE(waited, std::chrono::milliseconds(100));
  EXPECT_LT(waited, std::chrono::seconds(5));
}

// The inode of descriptor `fd`: which file it is, whatever its number.
ino_t InodeOf(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

TEST_F(MessageReaderTest, DescriptorsThatComeWithMessagesAreHeldInOrder) {
  int a[2], b[2];
  ASSERT_EQ(::pipe(a), 0);
  ASSERT_EQ(::pipe(b), 0);
  proto::ClientResponse one, two;
  one.set_id(1);
  two.set_id(2);
  ASSERT_TRUE(WriteMessageWithFd(fds_[0], one, a[0], In(Seconds(5)), "test").ok());
  ASSERT_TRUE(WriteMessageWithFd(fds_[0], two, b[0], In(Seconds(5)), "test").ok());
  MessageReader reader(fds_[1]);
  proto::ClientResponse r;
  ASSERT_TRUE(reader.Read(&r, In(Seconds(5)), "test").ok());
  EXPECT_EQ(r.id(), 1u);
  ASSERT_TRUE(reader.Read(&r, In(Seconds(5)), "test").ok());
  EXPECT_EQ(r.id(), 2u);
  EXPECT_EQ(reader.held_fds(), 2u);
  const int first = reader.TakeFd(), second = reader.TakeFd();
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  EXPECT_EQ(InodeOf(first), InodeOf(a[0]));
  EXPECT_EQ(InodeOf(second), InodeOf(b[0]));
  EXPECT_EQ(reader.TakeFd(), -1);
  for (int fd : {first, second, a[0], a[1], b[0], b[1]}) ::close(fd);
}

TEST_F(MessageReaderTest, MoreDescriptorsThanTheCapAreAnErrorAndClosed) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  proto::ClientResponse empty;
  for (size_t i = 0; i <= MessageReader::kMaxHeldFds; ++i) {
    ASSERT_TRUE(WriteMessageWithFd(fds_[0], empty, p[1], In(Seconds(5)), "test").ok());
  }
  ::close(p[1]);
  {
    MessageReader reader(fds_[1]);
    proto::ClientResponse r;
    Status s;
    for (size_t i = 0; i <= MessageReader::kMaxHeldFds && s.ok(); ++i) {
      s = reader.Read(&r, In(Seconds(5)), "test");
    }
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("more file descriptors"), std::string::npos) << s;
    EXPECT_EQ(reader.held_fds(), 0u);
  }
  // Every copy of the write end is closed: the read end sees EOF at once.
  char c;
  EXPECT_EQ(::read(p[0], &c, 1), 0);
  ::close(p[0]);
}

}  // namespace
}  // namespace gyre::ipc
