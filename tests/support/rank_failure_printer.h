// A GoogleTest listener for ranks other than 0 under mpirun: prints only this
// rank's failures, tagged with the rank, so the report is not repeated N times.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>

namespace test_support {

class RankFailurePrinter final : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                   result.line_number(), result.summary());
  }

 private:
  int rank_;
};

}  // namespace test_support
