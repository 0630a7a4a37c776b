// The average of float16 values whose sum leaves float16's range (65504) but whose mean does
// not: every reducing collective, every algorithm, in and out of place, over TCP on 127.0.0.1.
// The ranks divide their inputs by p before the sum (AverageScalesInputs), so the result is
// the mean, never inf, and the caller's input is left as it was.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/base/dtype.h"
#include "tests/world/world.h"
#include "tests/world/world_factories.h"

namespace gyre::testing {
namespace {

using algo::Algorithm;
using algo::Collective;
using algo::CollectiveSpec;

constexpr int kRanks = 4;

std::vector<uint16_t> Halves(int64_t n, double value) {
  return std::vector<uint16_t>(static_cast<size_t>(n), FloatToHalf(static_cast<float>(value)));
}

// Runs `spec` (float16 avg) on every rank with rank r's input filled with value_of(r), out of
// place and, where the collective allows it, in place; returns what went wrong, or "".
std::string RunAverage(Collective c, Algorithm a, int64_t count,
                       const std::function<double(int)>& value_of, double mean, double tolerance) {
  auto world = MakeWorld(FactoryByName("tcp"), kRanks);
  if (!world.ok()) return "cannot make world: " + world.status().ToString();
  std::vector<std::string> errors(kRanks);
  RunOnRanks(kRanks, [&](int r) {
    Communicator& comm = *(*world)[r];
    for (const bool in_place : {false, true}) {
      CollectiveSpec spec;
      spec.collective = c;
      spec.algorithm = a;
      spec.world_size = kRanks;
      spec.count = count;
      spec.dtype = DataType::kFloat16;
      spec.op = ReduceOp::kAvg;
      spec.root = kRanks - 1;
      const int64_t out_count = algo::OutputCount(spec, r);
      const bool runs_in_place =
          c == Collective::kAllreduce || (c == Collective::kReduce && r == spec.root);
      if (in_place && c == Collective::kReduceScatter) continue;
      const std::vector<uint16_t> given = Halves(algo::InputCount(spec, r), value_of(r));
      std::vector<uint16_t> in = given;
      std::vector<uint16_t> out(static_cast<size_t>(out_count), 0xABCD);
      const std::string where =
          spec.ToString() + (in_place ? " in place" : "") + " rank " + std::to_string(r) + ": ";
      Status st;
      if (in_place && runs_in_place) {
        st = comm.Run(spec, in.data(), in.data());
        out = in;
      } else {
        // A reduce's other ranks have no output; "in place" there is the plain call again.
        st = comm.Run(spec, in.data(), out.empty() ? nullptr : out.data());
        if (in != given) {
          errors[r] = where + "the input buffer was changed";
          return Status::Ok();
        }
      }
      if (!st.ok()) {
        errors[r] = where + st.ToString();
        return Status::Ok();
      }
      for (size_t i = 0; i < out.size(); ++i) {
        const double got = HalfToFloat(out[i]);
        if (!(std::fabs(got - mean) <= tolerance)) {
          errors[r] = where + "element " + std::to_string(i) + " is " + std::to_string(got) +
                      ", the mean is " + std::to_string(mean);
          return Status::Ok();
        }
      }
    }
    return Status::Ok();
  });
  std::string all;
  for (const std::string& e : errors) {
    if (!e.empty()) all += e + "\n";
  }
  return all;
}

std::vector<Algorithm> AlgorithmsOf(Collective c) {
  std::vector<Algorithm> out = algo::AlgorithmsFor(c);
  out.push_back(Algorithm::kCanonical);  // deterministic mode's schedule
  return out;
}

// 20000 on each of 4 ranks: the sum, 80000, is past 65504, the mean exact.
TEST(AverageTest, Float16MeanOfValuesWhoseSumLeavesTheRangeIsExact) {
  for (Collective c : {Collective::kAllreduce, Collective::kReduce, Collective::kReduceScatter}) {
    for (Algorithm a : AlgorithmsOf(c)) {
      EXPECT_EQ(RunAverage(
                    c, a, 1001, [](int) { return 20000.0; }, 20000.0, 0.0),
                "")
          << algo::CollectiveName(c) << " " << algo::AlgorithmName(a);
    }
  }
}

// Different values on each rank: the mean 21500 within 3 float16 steps (16 each at this
// magnitude), from p roundings of the divided inputs and p - 1 of the sums.
TEST(AverageTest, Float16MeanOfDifferentValuesIsWithinThreeSteps) {
  for (Collective c : {Collective::kAllreduce, Collective::kReduce, Collective::kReduceScatter}) {
    for (Algorithm a : AlgorithmsOf(c)) {
      EXPECT_EQ(RunAverage(
                    c, a, 64, [](int r) { return 20000.0 + 1000.0 * r; }, 21500.0, 48.0),
                "")
          << algo::CollectiveName(c) << " " << algo::AlgorithmName(a);
    }
  }
}

// The sequential reference (the simulator's and the self-test's) divides float16 inputs by p
// before the sum, as the ranks do, and the other floating types' sums after it.
TEST(AverageTest, ReferenceDividesFloat16InputsFirstAndOtherTypesAfterTheSum) {
  CollectiveSpec spec;
  spec.collective = Collective::kAllreduce;
  spec.world_size = 3;
  spec.count = 1;
  spec.op = ReduceOp::kAvg;
  auto reference = [&](DataType t, double x) {
    spec.dtype = t;
    std::vector<std::vector<unsigned char>> inputs(3);
    for (auto& in : inputs) {
      in.assign(DataTypeSize(t), 0);
      StoreFromDouble(t, in.data(), 0, x);
    }
    const std::vector<unsigned char> got = Reference(spec, inputs, 0);
    return LoadAsDouble(t, got.data(), 0);
  };
  // float16, one rounding per operation: d = x / 3, then (d + d) + d.
  auto divided_first = [](double x) {
    const float d = HalfToFloat(FloatToHalf(HalfToFloat(FloatToHalf(static_cast<float>(x))) / 3));
    const float dd = HalfToFloat(FloatToHalf(d + d));
    return static_cast<double>(HalfToFloat(FloatToHalf(dd + d)));
  };
  for (double x : {0.7, 1.1, 30000.0, 60000.0}) {
    EXPECT_EQ(reference(DataType::kFloat16, x), divided_first(x)) << x;
    EXPECT_TRUE(std::isfinite(reference(DataType::kFloat16, x))) << x;
  }
  // The others: one division of the sum, 3 / 3.
  EXPECT_EQ(reference(DataType::kBfloat16, 1.0), 1.0);
  EXPECT_EQ(reference(DataType::kFloat32, 1.0), 1.0);
  EXPECT_EQ(reference(DataType::kFloat64, 0.1), (0.1 + 0.1 + 0.1) / 3);
}

}  // namespace
}  // namespace gyre::testing
