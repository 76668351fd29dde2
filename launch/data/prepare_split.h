// `prepare`'s train/validation split: every input file cut into blocks, the
// last val-fraction of each going to validation, with a BPE at line starts
// (the top of launch/prepare_main.cpp says how and why).
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

#include "launch/data/prepare_options.h"

namespace launch::prepare {

// One block of a file (see the top of launch/prepare_main.cpp): its training
// and its validation text, and whether it starts the document.
struct Block {
  std::string_view train, val;
  bool document_start;
};

// Where a block's validation text starts: val-fraction of it from the end,
// rounded to whole bytes, or with a BPE at a line start (see the top of
// launch/prepare_main.cpp).
std::size_t validation_start(std::string_view block, double val_fraction, bool whole_lines);

// Calls `on_block` with each block of `text`, in order.
void for_each_block(std::string_view text, const Options& options, const std::function<void(const Block&)>& on_block);

}  // namespace launch::prepare
