#include "parallel/pipeline_runner.h"

#include "engine/check.h"
#include "parallel/watchdog.h"

namespace parallel {

void run_schedule(const std::vector<Action>& actions, Stage& stage, Communicator& pp_comm) {
  const int me = pp_comm.rank();
  const int prev = me - 1;  // -1 on the first stage
  const int next = me + 1;  // == size on the last stage
  auto peer = [&](int rank, const Action& a) {
    ENGINE_CHECK(rank >= 0 && rank < pp_comm.size(), "pipeline stage ", me, " of ", pp_comm.size(),
                 " has no neighbour for ", to_string(a), " (was the schedule made for another stage?)");
    return rank;
  };

  std::vector<P2POp> batch;
  auto flush = [&] {
    if (batch.empty()) return;
    pp_comm.batch_p2p(batch);
    batch.clear();
  };
  for (const Action& a : actions) {
    switch (a.kind) {
      case ActionKind::kRecvForward:
        batch.push_back(P2POp::recv(stage.forward_input(a.micro), peer(prev, a)));
        break;
      case ActionKind::kSendForward:
        batch.push_back(P2POp::send(stage.forward_output(a.micro), peer(next, a)));
        break;
      case ActionKind::kRecvBackward:
        batch.push_back(P2POp::recv(stage.backward_input_grad(a.micro), peer(next, a)));
        break;
      case ActionKind::kSendBackward:
        batch.push_back(P2POp::send(stage.backward_output_grad(a.micro), peer(prev, a)));
        break;
      case ActionKind::kForward:
        // The messages this compute waits for belong to its phase (for the
        // watchdog's message).
        watchdog_set_phase("forward");
        flush();
        stage.forward(a.micro);
        break;
      case ActionKind::kBackward:
        watchdog_set_phase("backward");
        flush();
        stage.backward(a.micro);
        break;
    }
  }
  flush();
}

}  // namespace parallel
