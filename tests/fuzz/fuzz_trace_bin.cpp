// libFuzzer target: the binary trace format (Trace::read_binary, core/probe/trace_bin.cpp).
// The input is the file. A trace that loads is read as the window reads it: its tokens,
// the attention of the first and last layer (head 0 and the mean of the heads, pattern
// and scores) as of each step and the rows each step added, the encoder's attention, and
// it is written out again in both formats.
#include <sstream>

#include "fuzz_common.h"
#include "probe/trace.h"

namespace {

void attention_of(const ds::Trace& t, int s) {
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

void view(const ds::Trace& t) {
  (void)t.tokens();
  (void)t.bytes();
  const int steps = static_cast<int>(t.steps.size());
  for (int s = 0; s < steps && s < 8; ++s) {
    (void)t.positions(s);
    (void)t.step_of(s);
    attention_of(t, s);
    for (auto& [name, tensor] : t.steps[size_t(s)].tensors) (void)tensor.row_norms();
  }
  try {
    (void)t.encoder_attention(0, 0);
  } catch (const ds::Error&) {
  }
  std::ostringstream bin, js;
  t.write_binary(bin);
  t.write_json(js);
  const std::string b = bin.str();
  (void)ds::Trace::read_binary(b.data(), b.size());  // what it writes it reads back
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    view(ds::Trace::read_binary(data, size));
  } catch (const ds::Error&) {
  }
  return 0;
}
