// `prepare`'s steps in order (launch/prepare_main.cpp): check the flags, list
// the inputs, ready the output directory, learn a tokenizer if asked, encode
// every block into the train and validation shards, and report what was
// written.
#pragma once

#include "launch/data/prepare_options.h"

namespace launch::prepare {

// Runs `prepare` as `options` say; returns the exit status. Throws
// engine::Error (the caller reports it) on bad options, inputs or output.
int run(const Options& options);

}  // namespace launch::prepare
