// The collective test suite, written against the Communicator interface so
// every backend runs the same tests: a test program's main() registers the
// communicators it built (MPI now; NCCL on a GPU machine) before
// ::testing::InitGoogleTest, and the parameterised suite runs once per entry.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/buffer.h"
#include "engine/tensor.h"
#include "parallel/communicator.h"

namespace parallel_test {

struct CommUnderTest {
  std::string label;            // test-name suffix: letters, digits, '_'
  parallel::Communicator* comm;  // owned by main()
  engine::DeviceType device;    // where the suite puts its tensors
};

// Filled by main() before InitGoogleTest (the suite's parameters are read
// when Google Test registers the tests).
std::vector<CommUnderTest>& comms_under_test();
// Communicators the pipeline test runs over, their ranks being stage indices.
std::vector<parallel::Communicator*>& pipeline_comms();

// Host values <-> a tensor of any dtype on any device, for exact checks.
class TestTensor {
 public:
  TestTensor(engine::DType dtype, std::int64_t n, engine::DeviceType device);
  const engine::Tensor& tensor() const { return tensor_; }
  void set(const std::vector<double>& values);
  std::vector<double> get() const;

 private:
  engine::Buffer buffer_;
  engine::Tensor tensor_;
};

}  // namespace parallel_test
