// A cluster file (`plan --cluster`, `train --layout auto --cluster`): peak
// rates, links, efficiencies, GEMM rates by shape and their sources.
#include <cstdint>
#include <string>

#include "launch/plan/cluster_file.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::accepts([&] { (void)launch::parse_cluster_file(std::string(fuzz::as_text(data, size)), "fuzz.json"); });
  return 0;
}
