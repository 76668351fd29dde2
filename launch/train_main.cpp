// The `train` program: flags (or a JSON config) in, a trained GPT out, on one
// process or under mpirun.
//
// Errors never leave ranks waiting (DESIGN.md): everything that can be checked
// without communicating (flags, the layout, the data and model files) is
// checked by every rank alike; the ranks then agree on the outcome, the first
// failing rank prints its message once, and all exit non-zero. A later error
// on one rank prints with its rank and aborts the whole job.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "engine/check.h"
#include "engine/device.h"
#include "launch/train_config.h"
#include "launch/trainer.h"

namespace {

// Returns true on every rank if no rank failed; the lowest failing rank
// prints its error.
bool all_ranks_passed(const std::string& error, int rank) {
  int first_failed = error.empty() ? 1 << 30 : rank;
  MPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first_failed == rank) std::cerr << "error: " << error << std::endl;
  return first_failed == 1 << 30;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  CLI::App app{"Train a GPT-2 style model on token shards (llm.c format), on one process or under mpirun."};
  launch::TrainConfig config;
  launch::add_train_options(app, config);
  int status = 0;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments; rank 0 speaks for all.
    std::ostringstream silent;
    status = rank == 0 ? app.exit(e) : app.exit(e, silent, silent);
    MPI_Finalize();
    return status;
  }

  std::string error;
  try {
    config.resolve(config.device == "cpu" ? 0 : engine::cuda_device_count(), world);
    launch::check_inputs(config);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!all_ranks_passed(error, rank)) {
    MPI_Finalize();
    return 1;
  }

  // The trainer outlives the try block: were it destroyed while unwinding,
  // its pending communication would wait for ranks that will never join,
  // and MPI_Abort below would never run.
  std::optional<launch::Trainer> trainer;
  try {
    trainer.emplace(config, std::cout, MPI_COMM_WORLD);
    trainer->run();
  } catch (const std::exception& e) {
    std::cerr << "[rank " << rank << "] error: " << e.what() << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  trainer.reset();
  MPI_Finalize();
  return 0;
}
