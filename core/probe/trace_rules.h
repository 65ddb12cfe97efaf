#pragma once
// The rules a saved trace must follow, whichever format it was read from (JSON:
// trace_read.cpp; binary: trace_bin.cpp). Internal to core/probe: both readers call
// these so that every check (tensor names and shapes against the config and the step,
// positions, token ids, sampler settings) lives in one place. Each throws one ds::Error
// whose message starts with where the value is ("trace step 2") and names the field.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/hooks.h"
#include "probe/trace.h"
#include "util/error.h"

namespace ds::trace_rules {

// Largest dimension of a recorded tensor.
inline constexpr int kMaxDim = 1 << 24;

// Where the values being read are ("trace step 2", "trace header"): every message
// starts with it and names the field.
struct Where {
  std::string at;
  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    throw Error(at + ": " + field + " " + what);
  }
};

// What the steps and the source say about the sizes every tensor must have.
struct Sizes {
  int T = 0;    // the step's rows (its input tokens)
  int S = 0;    // the keys as of the step (its positions)
  int src = 0;  // the source length
};

std::string dims(const std::vector<int>& s);

// The hook points of the model: a name is one when it is spelled as the model names
// it, its layer exists, and a one-layer model of the same config has that point.
class HookNames {
 public:
  explicit HookNames(const Config& c);
  bool find(const std::string& name, Stack& s, int& layer, Point& p) const;

 private:
  const Config& cfg_;
  std::set<std::string> names_;
};

// What a tensor named `name` must look like in a step (encoder = false) or in the
// encoder map (true): the shape the config and the sizes give (-1: any k of a logit
// lens, 1..vocab), whether its first axis may be 1..T (logits) and whether its values
// are token ids (a lens's .ids). Throws for a name that is no hook point of the model
// or one in the wrong place.
struct TensorRule {
  std::vector<int> want;
  bool logits = false;
  bool ids = false;
};
TensorRule tensor_rule(const Config& c, const HookNames& hooks, const std::string& name, Sizes z, bool encoder,
                       const std::string& field, const Where& w);
// The declared shape against the rule (each dimension 1..kMaxDim first).
void check_shape(const std::vector<int64_t>& shape, const TensorRule& r, const Config& c, const std::string& field,
                 const Where& w);
// The values a tensor of this shape holds: the product, or one norm a last-axis row.
int64_t stored_values(const std::vector<int>& shape, bool row_norms);
// A lens's ids: each a whole number in the vocabulary.
void check_ids(const std::vector<float>& data, const Config& c, const std::string& field, const Where& w);

// A token id: 0 .. vocab - 1.
void check_id(int64_t id, const std::string& field, const Config& c, const Where& w);
// The step's first position (pos: the tokens of the steps before it) and its inputs.
void check_positions(int64_t pos0, int64_t n_input, int pos, const Config& c, const Where& w);
// The source's length against the model (encoder, max_src).
void check_source(const Config& c, size_t n, const Where& w);
// Sampler settings (ds::validate), u (-1 or 0 to 1), token, rank and n_kept.
void check_sample(const SampleRecord& r, const Config& c, const Where& w);
// forward_ms: -1 (not measured) or 0 or more.
void check_forward_ms(double ms, const Where& w);

// The JSON header of a binary trace (the JSON trace's fields "format", "version",
// "model", "source", "source_text"), checked as the JSON reader checks them.
Trace trace_header_from_json(const std::string& text);

}  // namespace ds::trace_rules
