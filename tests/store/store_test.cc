// OpenStore URL handling and the shared helpers of the store layer.
#include "core/store/store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/store/tcp_store_server.h"
#include "tests/store/store_test_util.h"

namespace gyre::store {
namespace {

using ::testing::HasSubstr;
using testing::In;

TEST(OpenStoreTest, FileUrl) {
  testing::TempDir tmp;
  auto store = OpenStore("file://" + tmp.path() + "/s", In(Seconds(5)));
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Describe(), "file://" + tmp.path() + "/s");
  ASSERT_TRUE((*store)->Set("k", "v", In(Seconds(5))).ok());
}

TEST(OpenStoreTest, TcpUrl) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok());
  auto store = OpenStore((*server)->url(), In(Seconds(5)));
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Describe(), (*server)->url());
  ASSERT_TRUE((*store)->Set("k", "v", In(Seconds(5))).ok());
}

TEST(OpenStoreTest, AnythingElseIsInvalidArgumentNamingTheForms) {
  for (const std::string url :
       {"http://x:1", "file://relative/dir", "file://", "tcp://host", "tcp://host:0",
        "tcp://host:99999", "tcp://host:12ab", "tcp://[::1", "", "/abs/dir"}) {
    auto store = OpenStore(url, In(Seconds(1)));
    ASSERT_FALSE(store.ok()) << url;
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << url << ": " << store.status();
    EXPECT_THAT(store.status().message(), HasSubstr("'" + url + "'"));
  }
  auto other = OpenStore("redis://x:1", In(Seconds(1)));
  EXPECT_THAT(other.status().message(), HasSubstr("file:///abs/dir and tcp://host:port"));
}

// A mistyped IPv4 address was taken for a host name not resolved yet and retried until the
// rendezvous deadline. It cannot be a name (a host name's last label is never all digits),
// so it is refused at once, as gyrerun refuses a malformed --store before any rank starts.
TEST(OpenStoreTest, AMistypedIpv4AddressIsInvalidArgumentAtOnce) {
  for (const std::string host : {"256.1.1.1", "10.0.0.300", "1.2.3.4.5", "1..2", "."}) {
    const std::string url = "tcp://" + host + ":29500";
    EXPECT_EQ(CheckStoreUrl(url).code(), StatusCode::kInvalidArgument) << url;
    const TimePoint start = SteadyClock::Get()->Now();
    auto store = OpenStore(url, In(Seconds(20)));
    ASSERT_FALSE(store.ok()) << url;
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << url << ": " << store.status();
    EXPECT_THAT(store.status().message(), HasSubstr("'" + host + "' is not an IPv4 address"));
    EXPECT_LT(SteadyClock::Get()->Now() - start, Seconds(1)) << url;
  }
  // Forms the resolver reads as IPv4 stay accepted.
  for (const std::string host : {"127.0.0.1", "127.1", "0.0.0.0"}) {
    EXPECT_TRUE(CheckStoreUrl("tcp://" + host + ":29500").ok()) << host;
  }
}

TEST(StoreTest, QuoteKeyIsPrintable) {
  EXPECT_EQ(QuoteKey("rank/0"), "'rank/0'");
  EXPECT_EQ(QuoteKey(std::string("a\0\xff'", 4)), "'a\\x00\\xff\\x27'");
  std::string shown = QuoteKey(std::string(1000, 'k'));
  EXPECT_LT(shown.size(), 200u);
  EXPECT_THAT(shown, HasSubstr("(1000 bytes)"));
}

}  // namespace
}  // namespace gyre::store
