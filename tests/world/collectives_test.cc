// Every collective with every algorithm, p = 1..9, counts {0, 1, p-1, p, 13, 1000, 2^20+3},
// several dtypes and ops, any root, over a real transport: every rank's output is compared
// bit for bit with the sequential reference (inputs are integers small enough that every
// reduction is exact, so any order gives the same bits).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "tests/world/world.h"
#include "tests/world/world_factories.h"

namespace gyre::testing {
namespace {

using algo::Algorithm;
using algo::Collective;
using algo::CollectiveSpec;

struct Case {
  CollectiveSpec spec;
  bool in_place = false;
};

std::vector<std::pair<DataType, ReduceOp>> TypesFor(Collective c) {
  if (algo::IsReducing(c)) {
    return {{DataType::kFloat32, ReduceOp::kSum},  {DataType::kInt32, ReduceOp::kSum},
            {DataType::kInt64, ReduceOp::kProd},   {DataType::kUint8, ReduceOp::kMax},
            {DataType::kFloat16, ReduceOp::kAvg},  {DataType::kBfloat16, ReduceOp::kMin},
            {DataType::kBfloat16, ReduceOp::kSum}, {DataType::kFloat64, ReduceOp::kAvg},
            {DataType::kInt8, ReduceOp::kBxor},    {DataType::kUint64, ReduceOp::kBand},
            {DataType::kUint32, ReduceOp::kBor}};
  }
  return {{DataType::kFloat32, ReduceOp::kSum}, {DataType::kUint8, ReduceOp::kSum}};
}

std::vector<Case> CasesFor(Collective c, int p, bool large) {
  std::vector<Case> cases;
  std::vector<int64_t> counts = {0, 1, p - 1, p, 13, 1000};
  if (large) counts = {(int64_t{1} << 20) + 3};
  std::vector<int> roots = {0};
  if (c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
      c == Collective::kScatter) {
    roots = {0, p - 1, p / 2};
  }
  // GYRE_TEST_ALGO=name narrows a run to one algorithm while debugging.
  const char* only = std::getenv("GYRE_TEST_ALGO");
  for (Algorithm a : algo::AlgorithmsFor(c)) {
    if (only != nullptr && std::string(only) != algo::AlgorithmName(a)) continue;
    for (int64_t n : counts) {
      auto types = TypesFor(c);
      if (large) types.resize(1);
      for (auto [dt, op] : types) {
        for (int root : roots) {
          Case k;
          k.spec.collective = c;
          k.spec.algorithm = a;
          k.spec.world_size = p;
          k.spec.count = n;
          k.spec.dtype = dt;
          k.spec.op = op;
          k.spec.root = root;
          cases.push_back(k);
          if (n == 13 && root == roots[0] && dt == types[0].first) {
            Case seg = k;  // pipelined: segments smaller than a chunk
            seg.spec.segment_elems = 2;
            cases.push_back(seg);
            if (c == Collective::kAllreduce) {
              Case inplace = k;
              inplace.in_place = true;
              cases.push_back(inplace);
            }
          }
        }
      }
    }
  }
  return cases;
}

std::string RunCases(const TransportFactory& factory, Collective c, int p, bool large) {
  auto world = MakeWorld(factory, p);
  if (!world.ok()) return "cannot make world: " + world.status().ToString();
  std::vector<Case> cases = CasesFor(c, p, large);
  std::vector<std::string> errors(p);
  RunOnRanks(p, [&](int r) {
    Communicator& comm = *(*world)[r];
    for (const Case& k : cases) {
      std::vector<std::vector<unsigned char>> inputs;
      for (int q = 0; q < p; ++q) inputs.push_back(MakeInput(k.spec, q));
      std::vector<unsigned char> want = Reference(k.spec, inputs, r);
      std::vector<unsigned char> in = inputs[r];
      std::vector<unsigned char> out(
          static_cast<size_t>(algo::OutputCount(k.spec, r)) * DataTypeSize(k.spec.dtype), 0xAB);
      Status st;
      if (k.in_place) {
        out = in;
        st = comm.Run(k.spec, out.data(), out.data());
      } else {
        st = comm.Run(k.spec, in.empty() ? nullptr : in.data(), out.empty() ? nullptr : out.data());
      }
      std::string where =
          k.spec.ToString() + (k.in_place ? " in-place" : "") + " rank " + std::to_string(r) + ": ";
      if (!st.ok()) {
        errors[r] = where + st.ToString();
        return Status::Ok();
      }
      if (comm.last().spec.algorithm != k.spec.algorithm) {
        errors[r] = where + "ran " + algo::AlgorithmName(comm.last().spec.algorithm);
        return Status::Ok();
      }
      std::string diff = FirstDifference(k.spec, out, want);
      if (!diff.empty()) {
        errors[r] = where + diff;
        return Status::Ok();
      }
      if (in != inputs[r] && !k.in_place) {
        errors[r] = where + "the input buffer was modified";
        return Status::Ok();
      }
    }
    return Status::Ok();
  });
  std::string all;
  for (const auto& e : errors) {
    if (!e.empty()) all += e + "\n";
  }
  return all;
}

struct Param {
  std::string transport;
  Collective collective;
};

class CollectivesTest : public ::testing::TestWithParam<Param> {};

TEST_P(CollectivesTest, EveryAlgorithmMatchesReference) {
  TransportFactory factory = FactoryByName(GetParam().transport);
  for (int p = 1; p <= 9; ++p) {
    std::string err = RunCases(factory, GetParam().collective, p, /*large=*/false);
    EXPECT_EQ(err, "") << "p=" << p;
    if (!err.empty()) break;
  }
}

TEST_P(CollectivesTest, LargeCountMatchesReference) {
  TransportFactory factory = FactoryByName(GetParam().transport);
  for (int p : {2, 3, 5, 8}) {
    std::string err = RunCases(factory, GetParam().collective, p, /*large=*/true);
    EXPECT_EQ(err, "") << "p=" << p;
    if (!err.empty()) break;
  }
}

std::vector<Param> AllParams() {
  std::vector<Param> out;
  for (const std::string& t : TransportNames()) {
    for (int c = 0; c < algo::kNumCollectives; ++c) out.push_back({t, static_cast<Collective>(c)});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(World, CollectivesTest, ::testing::ValuesIn(AllParams()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return info.param.transport + "_" +
                                  algo::CollectiveName(info.param.collective);
                         });

}  // namespace
}  // namespace gyre::testing
