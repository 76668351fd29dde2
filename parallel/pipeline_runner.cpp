#include "parallel/pipeline_runner.h"

#include "engine/check.h"
#include "engine/ops.h"
#include "parallel/watchdog.h"

namespace parallel {

void Stage::backward_weight(int micro) {
  ENGINE_FAIL("pipeline stage: the schedule runs a weight-gradient pass (W", micro,
              ") but this stage does not split its backward into input and weight passes");
}

void run_schedule(const std::vector<Action>& actions, Stage& stage, Communicator& pp_comm) {
  run_schedule(actions, std::vector<Stage*>{&stage}, pp_comm);
}

void run_schedule(const std::vector<Action>& actions, const std::vector<Stage*>& chunks, Communicator& pp_comm,
                  StagePlacement placement) {
  const int me = pp_comm.rank(), size = pp_comm.size();
  const int v = static_cast<int>(chunks.size());
  ENGINE_CHECK(v >= 1, "run_schedule needs at least one stage");
  ENGINE_CHECK(placement != StagePlacement::kVShape || v == 2, "a V-shaped pipeline runs two chunks per rank, not ", v);
  auto chunk = [&](const Action& a) -> Stage& {
    ENGINE_CHECK(a.chunk >= 0 && a.chunk < v, "pipeline stage ", me, ": ", to_string(a), " names chunk ", a.chunk,
                 " of the ", v, " this rank holds");
    return *chunks[a.chunk];
  };
  // The rank a message goes to or comes from; a message past either end of
  // the virtual pipeline is a schedule made for another stage.
  auto peer = [&](const Action& a) {
    chunk(a);  // checks the chunk
    const bool towards_next = a.kind == ActionKind::kSendForward || a.kind == ActionKind::kRecvBackward;
    const int k = virtual_stage(placement, size, me, a.chunk) + (towards_next ? 1 : -1);
    ENGINE_CHECK(k >= 0 && k < v * size, "pipeline stage ", me, " of ", size, " has no neighbour for ",
                 to_string(a), " (was the schedule made for another stage?)");
    return pipeline_peer(a, size, me, placement);
  };
  // A message to this rank itself: the receiving chunk.
  auto local_peer = [&](const Action& a) -> Stage& {
    return *chunks[pipeline_peer_chunk(a, size, me, placement)];
  };

  // The batch being collected, and the one posted and not yet waited for.
  std::vector<P2POp> batch;
  CommHandle in_flight;
  auto wait = [&] {
    if (!in_flight) return;
    in_flight->wait();
    in_flight.reset();
  };
  auto post = [&] {
    if (batch.empty()) return;
    wait();  // one batch in flight at a time (a list never posts two; see check_schedules)
    in_flight = pp_comm.batch_p2p_async(batch);
    batch.clear();
  };
  auto post_and_wait = [&] {
    post();
    wait();
  };
  for (const Action& a : actions) {
    const bool local = is_communication(a.kind) && peer(a) == me;
    switch (a.kind) {
      case ActionKind::kRecvForward:
        if (local) engine::ops::copy(chunk(a).forward_input(a.micro), local_peer(a).forward_output(a.micro));
        else batch.push_back(P2POp::recv(chunk(a).forward_input(a.micro), peer(a)));
        break;
      case ActionKind::kSendForward:
        if (!local) batch.push_back(P2POp::send(chunk(a).forward_output(a.micro), peer(a)));
        break;
      case ActionKind::kRecvBackward:
        if (!local) batch.push_back(P2POp::recv(chunk(a).backward_input_grad(a.micro), peer(a)));
        break;
      case ActionKind::kSendBackward:
        if (local) engine::ops::copy(local_peer(a).backward_input_grad(a.micro), chunk(a).backward_output_grad(a.micro));
        else batch.push_back(P2POp::send(chunk(a).backward_output_grad(a.micro), peer(a)));
        break;
      case ActionKind::kForward:
        // The messages this compute waits for belong to its phase (for the
        // watchdog's message).
        watchdog_set_phase("forward");
        post_and_wait();
        chunk(a).forward(a.micro);
        break;
      case ActionKind::kBackward:
        watchdog_set_phase("backward");
        post_and_wait();
        chunk(a).backward(a.micro);
        break;
      case ActionKind::kWeight:
        // No message is needed: the batch stays in flight behind this compute.
        post();
        if (in_flight) in_flight->progress();
        chunk(a).backward_weight(a.micro);
        if (in_flight) in_flight->progress();
        break;
    }
  }
  watchdog_set_phase("backward");
  post_and_wait();
}

}  // namespace parallel
