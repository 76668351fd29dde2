#include "model/recompute.h"

#include "engine/check.h"

namespace model {

Recompute parse_recompute(const std::string& text) {
  if (text == "none") return Recompute::kNone;
  if (text == "selective") return Recompute::kSelective;
  if (text == "full") return Recompute::kFull;
  ENGINE_FAIL("unknown recomputation mode '", text, "'; expected none, selective or full");
}

const char* recompute_name(Recompute mode) {
  switch (mode) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

}  // namespace model
