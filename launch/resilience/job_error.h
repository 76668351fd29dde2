// An error that every rank of the job raises at the same point with the same
// message, because the ranks reached it together: from values reduced over
// the world (a non-finite loss), or after agreeing on an outcome (a
// checkpoint no rank could write). `train` prints it once, from rank 0, and
// every rank leaves through MPI_Finalize with exit_code(): nobody is left
// waiting, so no MPI_Abort is needed. Any other error (an engine::Error) may
// have been seen by one rank only: launch/resilience/failure_agreement.h finds out, and
// aborts the job only then.
#pragma once

#include <string>

#include "engine/check.h"

namespace launch {

class JobError : public engine::Error {
 public:
  JobError(int exit_code, const std::string& message) : engine::Error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

}  // namespace launch
