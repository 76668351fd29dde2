// `prepare --train-tokenizer N`: learning the BPE that the shards are then
// encoded with (launch/prepare_main.cpp).
#pragma once

#include <vector>

#include "launch/data/prepare_inputs.h"
#include "launch/data/prepare_options.h"

namespace launch::prepare {

// --train-tokenizer: learns the BPE from the training text of every file
// that the encoding pass will use, and writes it (whole or not at all).
void learn_tokenizer(const std::vector<InputFile>& files, const Options& options);

}  // namespace launch::prepare
