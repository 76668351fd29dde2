// Runs a pipeline schedule (pipeline_schedule.h) on one stage: compute
// actions call the Stage, communication actions move activations and their
// gradients to the neighbouring stages over the pipeline communicator.
//
// Generic on purpose: a Stage is anything with a forward and a backward per
// micro-batch and four tensors to exchange (model/ implements it with a range
// of transformer layers; the tests with a scalar affine map).
#pragma once

#include <vector>

#include "engine/tensor.h"
#include "parallel/communicator.h"
#include "parallel/pipeline_schedule.h"

namespace parallel {

// One pipeline stage, as the schedule sees it. The runner asks for each
// tensor right before it is communicated, so a stage may hand out views into
// per-micro-batch storage (1F1B needs at most peak_in_flight() sets alive).
class Stage {
 public:
  virtual ~Stage() = default;
  // Runs micro-batch `micro` forward. On the first stage the input comes from
  // the stage itself (the data); elsewhere it is in forward_input(micro).
  virtual void forward(int micro) = 0;
  // Runs micro-batch `micro` backward. On the last stage the gradient starts
  // from the loss; elsewhere it is in backward_input_grad(micro). Under a
  // schedule that splits the backward (W actions; zero-bubble schedules)
  // this is the input-gradient pass only: it must produce
  // backward_output_grad(micro) and may leave the weights' gradients to
  // backward_weight(micro), which runs later.
  virtual void backward(int micro) = 0;
  // The weight-gradient pass of micro-batch `micro` (W), after its backward.
  // A stage that does not split its backward keeps this default, which
  // throws engine::Error.
  virtual void backward_weight(int micro);

  // Where the previous stage's activation for `micro` is received (never
  // called on the first stage).
  virtual Tensor forward_input(int micro) = 0;
  // The activation sent to the next stage, valid after forward(micro)
  // (never called on the last stage).
  virtual Tensor forward_output(int micro) = 0;
  // Where the gradient of forward_output(micro) is received from the next
  // stage (never called on the last stage).
  virtual Tensor backward_input_grad(int micro) = 0;
  // The gradient of forward_input(micro), sent to the previous stage, valid
  // after backward(micro) (never called on the first stage).
  virtual Tensor backward_output_grad(int micro) = 0;
};

// Executes `actions` (this stage's list from make_schedule) in order.
// `pp_comm` is the pipeline group, whose ranks are stage indices (as
// make_mpi_comms/make_nccl_comms build it): this stage is pp_comm.rank(), the
// previous stage pp_comm.rank() - 1, the next pp_comm.rank() + 1.
//
// Each maximal run of consecutive communication actions is posted as one
// batch (Communicator::batch_p2p_async: sends and receives progress together,
// one NCCL group) when the next compute action is reached, and completed
// before the next F or B, Megatron's send_forward_recv_backward. A W (weight
// pass) needs no message, so it runs while the batch before it is in flight.
// pipeline_schedule.h argues why this cannot deadlock and check_schedules()
// verifies it for any list. All tensors of a batch are free for reuse when
// the next F or B starts.
void run_schedule(const std::vector<Action>& actions, Stage& stage, Communicator& pp_comm);

// The same for several chunks per rank: chunks[c] runs the actions of chunk
// c, virtual stage virtual_stage(placement, pp, rank, c) (interleaved: c pp +
// rank, the last rank sending on to rank 0 and back; ZB-V's V: chunk 0 is
// stage rank, chunk 1 stage 2 pp - 1 - rank). Messages go to pipeline_peer.
// A message the rank sends itself (the turn of the V) is a copy, made where
// the data is sure to be in place: an activation at its receive, from the
// sending chunk's forward_output (a stage keeps it until that micro-batch's
// backward, which needs the receiving chunk's work first); a gradient at its
// send, into the receiving chunk's backward_input_grad (that micro-batch's
// own storage since its forward).
void run_schedule(const std::vector<Action>& actions, const std::vector<Stage*>& chunks, Communicator& pp_comm,
                  StagePlacement placement = StagePlacement::kLooped);

}  // namespace parallel
