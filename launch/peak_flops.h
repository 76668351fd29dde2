// The MFU denominator (DESIGN.md, "Numbers"): peak FLOP/s of one device.
#pragma once

#include <ostream>

#include "launch/train_config.h"

namespace launch {

// Peak fp32 FLOP/s of this CPU as our matmul op achieves it (a few 1024^3
// GEMMs, best time): the CPU's MFU denominator when no peak is given.
double measure_cpu_matmul_flops();

// --peak-tflops, else the GPU's dense bf16 peak from the device table, else
// the measured CPU peak. `out` (the logger's log, or null on other ranks)
// gets one line saying which; only the logger measures a CPU (only it
// reports MFU), the others get 1.
double peak_flops_per_device(const TrainConfig& config, int gpu, std::ostream* out);

}  // namespace launch
