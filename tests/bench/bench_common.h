#pragma once
// What the benchmarks share: a random model's weights narrowed to the precision asked for.
#include <cstdio>
#include <string>

#include "model/weights.h"

namespace bench {

// Narrows w to precision ("f32": as it is, "bf16", "f16"); false (said on stderr) for
// any other name.
inline bool narrow_to(ds::Weights& w, const std::string& precision) {
  if (precision == "bf16")
    w.narrow(ds::Precision::BF16);
  else if (precision == "f16")
    w.narrow(ds::Precision::F16);
  else if (precision != "f32") {
    std::fprintf(stderr, "--precision must be f32, bf16 or f16\n");
    return false;
  }
  return true;
}

}  // namespace bench
