// libFuzzer target: the trace JSON (Trace::read_json, core/probe/trace.cpp). The input
// is the file. A trace that loads is read as the window reads it: its tokens, the
// attention of the first and last layer (head 0 and the mean of the heads, pattern and
// scores) as of each step and the rows each step added, the encoder's attention, and
// it is written out again.
#include <sstream>

#include "fuzz_common.h"
#include "probe/trace.h"

namespace {

void view(const ds::Trace& t) {
  (void)t.tokens();
  (void)t.bytes();
  const int steps = static_cast<int>(t.steps.size());
  for (int s = 0; s < steps && s < 8; ++s) {
    (void)t.positions(s);
    (void)t.step_of(s);
    for (int layer : {0, t.config.n_layers - 1})
      for (int head : {0, -1})
        for (bool scores : {false, true}) {
          try {
            (void)t.attention(layer, head, s, false, scores);
          } catch (const ds::Error&) {
          }
          try {
            (void)t.step_attention(layer, head, s, false, scores);
          } catch (const ds::Error&) {
          }
        }
  }
  try {
    (void)t.encoder_attention(0, 0);
  } catch (const ds::Error&) {
  }
  std::ostringstream os;
  t.write_json(os);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream is(std::string(fuzz::as_view(data, size)));
  try {
    view(ds::Trace::read_json(is));
  } catch (const ds::Error&) {
  }
  return 0;
}
