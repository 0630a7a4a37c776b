// base: Status, deadlines, dtypes and the reduction kernels.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "core/base/clock.h"
#include "core/base/dtype.h"
#include "core/base/fd_limit.h"
#include "core/base/log_budget.h"
#include "core/base/status.h"
#include "core/base/stdout_check.h"

namespace gyre {
namespace {

// Run in a child process (the limits are the process's): exits 0 when a soft limit below the
// need is raised to it and never lowered, and a need above the hard limit raises it to the
// hard limit and is an error, which it prints.
[[noreturn]] void RaiseLimitsAndExit() {
  struct rlimit set = {64, 200};
  if (setrlimit(RLIMIT_NOFILE, &set) != 0) _exit(10);
  struct rlimit now {};
  if (!EnsureFileDescriptors(150, "a test").ok()) _exit(11);
  if (getrlimit(RLIMIT_NOFILE, &now) != 0 || now.rlim_cur != 150) _exit(12);
  if (!EnsureFileDescriptors(100, "a test").ok()) _exit(13);
  if (getrlimit(RLIMIT_NOFILE, &now) != 0 || now.rlim_cur != 150) _exit(14);
  Status over = EnsureFileDescriptors(300, "rank 3 of job j (a job of 100 ranks)");
  if (over.code() != StatusCode::kResourceExhausted) _exit(15);
  // As far as it goes: to the hard limit.
  if (getrlimit(RLIMIT_NOFILE, &now) != 0 || now.rlim_cur != 200) _exit(16);
  std::fprintf(stderr, "%s\n", over.message().c_str());
  _exit(0);
}

TEST(FdLimitTest, TheSoftLimitIsRaisedUpToTheHardOneAndBeyondItIsAClearError) {
  EXPECT_EXIT(RaiseLimitsAndExit(), ::testing::ExitedWithCode(0),
              "rank 3 of job j \\(a job of 100 ranks\\) needs about 300 file descriptors, but "
              "this process may open only 200 \\(hard limit 200\\): raise it with `ulimit -n "
              "300`");
}

// A need past the kernel's cap (fs.nr_open) was answered with `ulimit -n <need>`, which no
// shell can grant (a world of 2147483647 ranks asked for `ulimit -n 6442451002`).
TEST(FdLimitTest, ANeedPastTheKernelsCapIsNotAnsweredWithAnImpossibleUlimit) {
  FILE* f = std::fopen("/proc/sys/fs/nr_open", "r");
  ASSERT_NE(f, nullptr);
  unsigned long long cap = 0;
  ASSERT_EQ(std::fscanf(f, "%llu", &cap), 1);
  std::fclose(f);
  const std::string need = std::to_string(cap + 1);
  Status over = EnsureFileDescriptors(cap + 1, "rank 0 of job j (a job of many ranks)");
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("rank 0 of job j (a job of many ranks) needs about " + need +
                                " file descriptors, more than the kernel lets any process open "
                                "(fs.nr_open is " +
                                std::to_string(cap) + ";"),
            std::string::npos)
      << over;
  EXPECT_NE(over.message().find("too many for one process's descriptor limit"), std::string::npos)
      << over;
  EXPECT_EQ(over.message().find("ulimit -n"), std::string::npos) << over;
}

TEST(StatusTest, CodesAndContext) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  Status s = DeadlineExceededError("recv from rank 3");
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.ToString(), "DeadlineExceeded: recv from rank 3");
  EXPECT_EQ(s.WithContext("allreduce seq=4").message(), "allreduce seq=4: recv from rank 3");
  StatusOr<int> v = 5;
  EXPECT_TRUE(v.ok());
  EXPECT_EQ(*v, 5);
  StatusOr<int> e = UnavailableError("gone");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kUnavailable);
}

TEST(ClockTest, DeadlineOnManualClock) {
  ManualClock clock;
  Deadline d = Deadline::After(clock, Millis(100));
  EXPECT_FALSE(d.Expired(clock));
  EXPECT_EQ(d.Remaining(clock), Millis(100));
  clock.Advance(Millis(60));
  EXPECT_EQ(d.Remaining(clock), Millis(40));
  clock.Advance(Millis(40));
  EXPECT_TRUE(d.Expired(clock));
  EXPECT_EQ(d.Remaining(clock), Duration::zero());
  EXPECT_FALSE(Deadline::Infinite().Expired(clock));
  EXPECT_EQ(Deadline::After(clock, Duration::max()).infinite(), true);
  EXPECT_EQ(FormatDuration(Millis(1500)), "1.50 s");
  // Just below a unit's boundary reads as the larger unit, never as "1000.0 ms".
  EXPECT_EQ(FormatDuration(std::chrono::microseconds(999980)), "1.00 s");
  EXPECT_EQ(FormatDuration(std::chrono::nanoseconds(999700)), "1.0 ms");
  EXPECT_EQ(FormatDuration(Millis(999)), "999.0 ms");
  EXPECT_EQ(FormatDuration(std::chrono::microseconds(250)), "250 us");
}

TEST(DtypeTest, NamesRoundTrip) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    DataType t = static_cast<DataType>(i);
    auto parsed = ParseDataType(DataTypeName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_EQ(ParseDataType("complex64").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseReduceOp("mean").status().code(), StatusCode::kInvalidArgument);
}

TEST(DtypeTest, UnsupportedPairsAreInvalidArgument) {
  EXPECT_EQ(CheckReduceSupported(DataType::kInt32, ReduceOp::kAvg).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckReduceSupported(DataType::kFloat32, ReduceOp::kBxor).code(),
            StatusCode::kInvalidArgument);
  EXPECT_NE(CheckReduceSupported(DataType::kFloat32, ReduceOp::kBand).message().find("float32"),
            std::string::npos);
  EXPECT_EQ(CheckReduceSupported(static_cast<DataType>(42), ReduceOp::kSum).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(GetReduceFn(DataType::kUint8, ReduceOp::kAvg).ok());
}

TEST(DtypeTest, HalfConversionsRoundTripExactValues) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(f)), f) << f;
  }
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(1e6f))));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  // 1 + 2^-11 is halfway between two halves: ties go to even (1.0).
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 1.0f / 2048)), 1.0f);
  for (float f : {0.0f, 1.0f, -3.0f, 256.0f}) EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(f)), f);
}

// Every supported (dtype, op) kernel against element-wise arithmetic in double (exact for
// the small integers used here).
TEST(ReduceKernelTest, EverySupportedPairMatchesScalarReference) {
  const size_t n = 1037;  // not a multiple of any vector width
  for (int t = 0; t < kNumDataTypes; ++t) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      DataType dt = static_cast<DataType>(t);
      ReduceOp op = static_cast<ReduceOp>(o);
      auto fn = GetReduceFn(dt, op);
      if (!CheckReduceSupported(dt, op).ok()) {
        EXPECT_FALSE(fn.ok());
        continue;
      }
      ASSERT_TRUE(fn.ok()) << DataTypeName(dt) << " " << ReduceOpName(op);
      const size_t es = DataTypeSize(dt);
      std::vector<unsigned char> a(n * es), b(n * es);
      for (size_t i = 0; i < n; ++i) {
        StoreFromDouble(dt, a.data(), i, static_cast<double>((i * 7) % 11));
        StoreFromDouble(dt, b.data(), i, static_cast<double>((i * 3) % 5 + 1));
      }
      std::vector<unsigned char> expect = a;
      for (size_t i = 0; i < n; ++i) {
        double x = LoadAsDouble(dt, a.data(), i), y = LoadAsDouble(dt, b.data(), i), z = 0;
        int64_t xi = static_cast<int64_t>(x), yi = static_cast<int64_t>(y);
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kAvg:
            z = x + y;
            break;
          case ReduceOp::kProd:
            z = x * y;
            break;
          case ReduceOp::kMin:
            z = std::min(x, y);
            break;
          case ReduceOp::kMax:
            z = std::max(x, y);
            break;
          case ReduceOp::kBand:
            z = static_cast<double>(xi & yi);
            break;
          case ReduceOp::kBor:
            z = static_cast<double>(xi | yi);
            break;
          case ReduceOp::kBxor:
            z = static_cast<double>(xi ^ yi);
            break;
        }
        StoreFromDouble(dt, expect.data(), i, z);
      }
      (*fn)(a.data(), b.data(), n);
      EXPECT_EQ(std::memcmp(a.data(), expect.data(), a.size()), 0)
          << DataTypeName(dt) << " " << ReduceOpName(op);
    }
  }
}

TEST(ReduceKernelTest, SignedOverflowWrapsLikeUnsigned) {
  auto fn = GetReduceFn(DataType::kInt32, ReduceOp::kSum);
  ASSERT_TRUE(fn.ok());
  int32_t a[1] = {std::numeric_limits<int32_t>::max()};
  int32_t b[1] = {1};
  (*fn)(a, b, 1);
  EXPECT_EQ(a[0], std::numeric_limits<int32_t>::min());
}

TEST(ReduceKernelTest, AverageDividesFloatsAndRejectsIntegers) {
  float v[3] = {3, 6, 9};
  ASSERT_TRUE(ScaleForAverage(DataType::kFloat32, v, 3, 3).ok());
  EXPECT_EQ(v[0], 1);
  EXPECT_EQ(v[2], 3);
  int32_t w[1] = {4};
  EXPECT_EQ(ScaleForAverage(DataType::kInt32, w, 1, 2).code(), StatusCode::kInvalidArgument);
}

// In a child whose stdout is /dev/full: what was printed is lost, so the check fails, names
// stdout and the reason, and turns a tool's exit code 0 into 2 (a failing code is kept).
TEST(StdoutCheckTest, OutputThatNeverReachedStdoutIsAnError) {
  for (int code : {0, 3}) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const int full = ::open("/dev/full", O_WRONLY);
      if (full < 0 || ::dup2(full, STDOUT_FILENO) < 0) _exit(10);
      ::close(STDERR_FILENO);  // keep the test's log clean
      std::printf("a report\n");
      Status s = FlushStdout();
      if (s.ok() || s.code() != StatusCode::kResourceExhausted) _exit(11);
      if (s.message().find("cannot write to stdout: No space left on device") ==
          std::string::npos) {
        _exit(12);
      }
      std::printf("more\n");
      _exit(ExitCodeAfterFlushingStdout("tool", code));
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), code == 0 ? 2 : code);
  }
  // Here stdout works: the code passes through.
  EXPECT_TRUE(FlushStdout().ok());
  EXPECT_EQ(ExitCodeAfterFlushingStdout("tool", 0), 0);
}

// At most N lines a window; the first line after some were held back says how many, and a
// new window starts a new budget.
TEST(LogBudgetTest, HoldsBackPastItsBudgetAndSaysHowManyAfterwards) {
  LogBudget budget(3, Seconds(60));
  const TimePoint t0{};
  int64_t held = -1;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(budget.Allow(t0 + Seconds(i), &held)) << i;
    EXPECT_EQ(held, 0);
  }
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(budget.Allow(t0 + Seconds(10), &held)) << i;
  EXPECT_FALSE(budget.Allow(t0 + Seconds(59), &held));
  ASSERT_TRUE(budget.Allow(t0 + Seconds(60), &held));  // a new window
  EXPECT_EQ(held, 6);
  EXPECT_TRUE(budget.Allow(t0 + Seconds(61), &held));
  EXPECT_EQ(held, 0);
}

}  // namespace
}  // namespace gyre
