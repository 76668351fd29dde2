// Small collectives by which the ranks of a job agree on an outcome before
// any of them acts on it: a failure on one rank becomes the same decision,
// and the same message, on every rank (so no rank is left waiting in a
// collective the others have abandoned). Host-side, over the MPI world.
#pragma once

#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace launch {

// True on every rank of `world` when `ok` is true on every rank.
bool all_ranks_ok(parallel::Communicator& world, bool ok);
// `text` of rank `root` of `world`, on every rank.
std::string broadcast_string(parallel::Communicator& world, const std::string& text, int root = 0);
// The error of the lowest rank whose `error` is not empty, on every rank; ""
// when no rank failed. Lets a job-wide failure be reported once, with the
// words of a rank that saw it.
std::string first_error(parallel::Communicator& world, const std::string& error);
// Every rank's `text`, in rank order, on every rank.
std::vector<std::string> all_gather_strings(parallel::Communicator& world, const std::string& text);

}  // namespace launch
