// The fixture of the zero-bubble parity suites (test_parity_zero_bubble for
// ZB-H1, test_parity_zero_bubble_v for ZB-V): a gpt-micro and a llama-micro
// reference trained in one process under 1F1B, and layouts of the schedule
// checked against them on groups of the world's ranks (parity_fixture.h).
// Schedule: a struct naming the schedule, the shared folder's name and the
// layers (ZB-V needs two chunks per rank: 8 layers at pp 4).
#pragma once

#include <string>

#include "tests/launch/parity_fixture.h"

namespace test_support {

template <typename Schedule>
class ZeroBubbleParity : public ::testing::Test {
 protected:
  static constexpr int kSteps = 6, kSavedAt = 3;

  static void SetUpTestSuite() {
    dir_ = new SharedDir(Schedule::kFolder);
    ref_ = new Reference(train_reference(config(1, 1, 1, "1f1b"), kSavedAt));
    launch::TrainConfig llama = config(1, 1, 1, "1f1b");
    make_llama(llama);
    llama_ref_ = new Reference(train_reference(llama, kSavedAt));
  }
  static void TearDownTestSuite() {
    delete llama_ref_;
    delete ref_;
    delete dir_;
  }

  // Eight micro-batches of one sequence per step at dp 1 (four at dp 2).
  static launch::TrainConfig config(int tp, int pp, int dp, const std::string& schedule = Schedule::kName) {
    launch::TrainConfig c = parity_config(*dir_, tp, pp, dp);
    c.n_layer = Schedule::kLayers;
    c.steps = kSteps;
    c.pipeline_schedule = schedule;
    return c;
  }
  static void make_llama(launch::TrainConfig& c) {
    c.preset = "llama-micro";  // grouped-query attention, SwiGLU, RoPE, untied head, qkv bias
    c.n_head = 4;
    c.n_kv_head = 2;
  }

  static void expect_parity(launch::TrainConfig c, const std::string& what, const Reference* ref = nullptr) {
    on_groups(c.tp * c.pp * c.dp,
              [&](MPI_Comm group) { expect_close_to_reference(train_run(c, group), (ref ? *ref : *ref_).whole, what); });
  }

  static inline SharedDir* dir_ = nullptr;
  static inline Reference* ref_ = nullptr;        // gpt-micro, one process: the whole run and its tail after kSavedAt
  static inline Reference* llama_ref_ = nullptr;  // llama-micro, one process
};

}  // namespace test_support
