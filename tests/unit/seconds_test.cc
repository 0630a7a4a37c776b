// gyre::Seconds(double): timeouts given as a number of seconds (flags, Python) saturate
// instead of overflowing, so that a huge or infinite timeout means "no limit".
#include <gtest/gtest.h>

#include <limits>

#include "core/base/clock.h"

namespace gyre {
namespace {

TEST(SecondsTest, OrdinaryValuesConvertToNanoseconds) {
  EXPECT_EQ(Seconds(0), Duration::zero());
  EXPECT_EQ(Seconds(1.5), std::chrono::milliseconds(1500));
  EXPECT_EQ(Seconds(-2), std::chrono::seconds(-2));
  EXPECT_EQ(Seconds(1e-9), std::chrono::nanoseconds(1));
  EXPECT_EQ(Seconds(9e9), std::chrono::seconds(9000000000LL));  // below the limit
}

TEST(SecondsTest, HugeAndInfiniteSaturate) {
  const double inf = std::numeric_limits<double>::infinity();
  for (double s : {inf, 1e300, 1e19, 9.3e9, std::numeric_limits<double>::max()}) {
    EXPECT_EQ(Seconds(s), Duration::max()) << s;
  }
  for (double s : {-inf, -1e300, -9.3e9}) EXPECT_EQ(Seconds(s), Duration::min()) << s;
  // The saturated value is an infinite deadline, not one in the past.
  ManualClock clock;
  clock.Set(TimePoint(std::chrono::hours(1)));
  EXPECT_TRUE(Deadline::After(clock, Seconds(inf)).infinite());
  EXPECT_FALSE(Deadline::After(clock, Seconds(1e300)).Expired(clock));
}

TEST(SecondsTest, NaNIsZeroNotUndefined) {
  EXPECT_EQ(Seconds(std::numeric_limits<double>::quiet_NaN()), Duration::zero());
  EXPECT_EQ(Seconds(-std::numeric_limits<double>::quiet_NaN()), Duration::zero());
}

}  // namespace
}  // namespace gyre
