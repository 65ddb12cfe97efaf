#include "probe/trace.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/config_json.h"
#include "model/mask.h"
#include "probe/lens.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/precision.h"

namespace ds {

using nlohmann::json;

int64_t Tensor::size() const {
  int64_t n = shape.empty() ? 0 : 1;
  for (int s : shape) n *= s;
  return n;
}

float Tensor::at(int64_t i) const {
  switch (storage) {
    case Storage::F16:
      return f16_to_f32(half[size_t(i)]) + (data.empty() ? 0.0f : data[size_t(i / shape.back())]);
    case Storage::F32:
      return data[size_t(i)];
    default:
      throw Error("this trace tensor keeps only row norms, not values");
  }
}

void Tensor::values(int64_t begin, int64_t n, float* out) const {
  if (storage == Storage::F32)
    std::copy_n(data.data() + begin, n, out);
  else if (storage == Storage::F16) {
    widen_rows(half.data() + begin, Precision::F16, n, 0, 1, out);
    if (!data.empty()) {
      const int64_t d = shape.back();
      for (int64_t i = 0; i < n; ++i) out[i] += data[size_t((begin + i) / d)];
    }
  } else
    throw Error("this trace tensor keeps only row norms, not values");
}

namespace {
float l2_norm(const float* x, int64_t n) {
  double ss = 0;
  for (int64_t j = 0; j < n; ++j) ss += double(x[j]) * x[j];
  return float(std::sqrt(ss));
}
}  // namespace

float Tensor::row_norm(int64_t r) const {
  if (storage == Storage::RowNorms) return data[size_t(r)];
  const int64_t d = shape.empty() ? 0 : shape.back();
  std::vector<float> row(static_cast<size_t>(d));
  values(r * d, d, row.data());
  return l2_norm(row.data(), d);
}

std::vector<float> Tensor::row_norms() const {
  if (storage == Storage::RowNorms) return data;
  const int64_t d = shape.empty() ? 0 : shape.back();
  const int64_t rows = d > 0 ? size() / d : 0;
  std::vector<float> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) out[size_t(r)] = row_norm(r);
  return out;
}

size_t Tensor::bytes() const {
  return data.capacity() * sizeof(float) + half.capacity() * sizeof(uint16_t) + shape.capacity() * sizeof(int);
}

size_t Trace::bytes() const {
  size_t n = 0;
  for (auto& [k, t] : encoder) n += t.bytes() + k.capacity();
  for (auto& s : steps) {
    for (auto& [k, t] : s.tensors) n += t.bytes() + k.capacity();
    if (s.sample)
      for (auto& c : s.sample->candidates) n += sizeof(Candidate) + c.text.capacity();
    for (auto& [id, text] : s.token_text) n += sizeof(id) + sizeof(text) + text.capacity();
    n += s.input.capacity() * sizeof(int);
  }
  return n;
}

void Trace::clear() {
  source.clear();
  source_text.clear();
  encoder.clear();
  steps.clear();
}

std::vector<int> Trace::tokens() const {
  std::vector<int> out;
  for (auto& s : steps) out.insert(out.end(), s.input.begin(), s.input.end());
  return out;
}

int Trace::positions(int step) const {
  if (step < 0 || step >= int(steps.size())) return 0;
  return steps[step].pos0 + int(steps[step].input.size());
}

int Trace::step_of(int pos) const {
  for (int s = 0; s < int(steps.size()); ++s)
    if (pos >= steps[s].pos0 && pos < steps[s].pos0 + int(steps[s].input.size())) return s;
  return -1;
}

namespace {

void check_step(const std::vector<TraceStep>& steps, int step) {
  if (step < 0 || step >= int(steps.size()))
    throw Error("trace has no step " + std::to_string(step) + " (it has " + std::to_string(steps.size()) + ")");
}

// "blocks.{layer}.attn." or "blocks.{layer}.cross_attn.": the hook names of a layer's attention.
std::string attn_prefix(int layer, bool cross) {
  return "blocks." + std::to_string(layer) + (cross ? ".cross_attn." : ".attn.");
}

}  // namespace

MatRM Trace::step_attention(int layer, int head, int step, bool cross, bool scores) const {
  check_step(steps, step);
  const TraceStep& st = steps[size_t(step)];
  const std::string base = attn_prefix(layer, cross);
  auto it = st.tensors.find(base + (scores ? "scores" : "pattern"));
  const bool derive = it == st.tensors.end() && !scores;  // a compact trace: softmax of the scores
  if (derive) it = st.tensors.find(base + "scores");
  if (it == st.tensors.end()) return MatRM();
  const Tensor& t = it->second;
  const int H = head >= 0 ? 1 : config.n_heads, h0 = std::max(head, 0);
  if (t.shape.size() != 3 || !t.has_values() || H < 1 || h0 + H > t.shape[0])
    throw Error("trace tensor " + it->first + " has the wrong shape");
  const int T = int(st.input.size()), Tt = int(t.shape[1]), St = int(t.shape[2]);
  const int S = cross ? int(source.size()) : positions(step);
  MatRM m = MatRM::Constant(T, S, scores ? -std::numeric_limits<float>::infinity() : 0.0f);
  std::vector<float> row(size_t(std::max(St, 0)));
  for (int h = h0; h < h0 + H; ++h)
    for (int r = 0; r < T && r < Tt; ++r) {
      t.values((int64_t(h) * Tt + r) * St, St, row.data());
      if (derive) pattern_from_scores(row.data(), St);
      for (int j = 0; j < St && j < S; ++j) m(r, j) = h == h0 ? row[size_t(j)] : m(r, j) + row[size_t(j)];
    }
  if (H > 1) m /= float(H);
  return m;
}

std::vector<uint8_t> Trace::step_mask(int layer, int step, bool cross) const {
  check_step(steps, step);
  const TraceStep& st = steps[size_t(step)];
  const std::string base = attn_prefix(layer, cross);
  const int T = int(st.input.size()), S = cross ? int(source.size()) : positions(step);
  std::vector<uint8_t> mask(size_t(T) * size_t(S), 0);
  auto recorded = [&](const char* name, size_t rank) -> const Tensor* {
    auto it = st.tensors.find(base + name);
    if (it == st.tensors.end() || it->second.shape.size() != rank || !it->second.has_values()) return nullptr;
    return &it->second;
  };
  if (const Tensor* mk = recorded("mask", 2)) {
    const int Tm = int(mk->shape[0]), Sm = int(mk->shape[1]);
    for (int r = 0; r < Tm && r < T; ++r)
      for (int j = 0; j < Sm && j < S; ++j) mask[size_t(r) * S + j] = mk->at(int64_t(r) * Sm + j) != 0;
  } else if (const Tensor* sc = recorded("scores", 3)) {
    const int Ts = int(sc->shape[1]), Ss = int(sc->shape[2]);  // head 0's rows
    for (int r = 0; r < Ts && r < T; ++r)
      for (int j = 0; j < Ss && j < S; ++j) mask[size_t(r) * S + j] = std::isfinite(sc->at(int64_t(r) * Ss + j));
  } else {
    const AttnKind kind = cross ? AttnKind::Cross : AttnKind::Causal;
    const int window = !cross && config.sliding(layer) ? config.sliding_window : 0;
    for (int r = 0; r < T; ++r)
      for (int j = 0; j < S; ++j)
        mask[size_t(r) * S + j] = may_attend(kind, st.pos0 + r, j, source, config.pad_id, window);
  }
  return mask;
}

MatRM Trace::attention(int layer, int head, int step, bool cross, bool scores) const {
  check_step(steps, step);
  const int Q = positions(step), S = cross ? int(source.size()) : Q;
  MatRM m = MatRM::Constant(Q, S, scores ? -std::numeric_limits<float>::infinity() : 0.0f);
  bool found = false;
  for (int i = 0; i <= step; ++i) {
    const MatRM rows = step_attention(layer, head, i, cross, scores);
    if (rows.rows() == 0) continue;
    for (int r = 0; r < rows.rows() && steps[size_t(i)].pos0 + r < Q; ++r)
      for (int j = 0; j < rows.cols() && j < S; ++j) m(steps[size_t(i)].pos0 + r, j) = rows(r, j);
    found = true;
  }
  if (!found) throw Error("the trace did not record " + attn_prefix(layer, cross) + (scores ? "scores" : "pattern"));
  return m;
}

MatRM Trace::encoder_attention(int layer, int head, bool scores) const {
  const std::string name = "encoder.blocks." + std::to_string(layer) + ".attn." + (scores ? "scores" : "pattern");
  auto it = encoder.find(name);
  if (it == encoder.end()) throw Error("the trace did not record " + name);
  const Tensor& t = it->second;
  if (t.shape.size() != 3 || head < 0 || head >= t.shape[0] || !t.has_values())
    throw Error("trace tensor " + name + " has the wrong shape");
  const int T = t.shape[1], S = t.shape[2];
  MatRM m(T, S);
  for (int r = 0; r < T; ++r) t.values((int64_t(head) * T + r) * S, S, m.data() + size_t(r) * S);
  return m;
}

std::vector<uint8_t> Trace::encoder_mask(int rows, int cols) const {
  std::vector<uint8_t> mask(size_t(std::max(rows, 0)) * size_t(std::max(cols, 0)));
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < cols; ++j)
      mask[size_t(r) * size_t(cols) + size_t(j)] = may_attend(AttnKind::Bidirectional, r, j, source, config.pad_id);
  return mask;
}

// ---- JSON

namespace {

// Non-finite floats (masked scores are -inf) are written as strings.
json float_json(float f) {
  if (std::isfinite(f)) return f;
  if (std::isnan(f)) return "nan";
  return f > 0 ? "inf" : "-inf";
}

// Token ids (the logit lens's "*.ids" tensors) are written as integers.
json tensor_json(const Tensor& t, bool ints) {
  json d = json::array();
  if (ints && t.storage == Storage::F32)
    for (float f : t.data) d.push_back(std::isfinite(f) ? json(int64_t(std::lround(f))) : float_json(f));
  else if (t.storage == Storage::F16)
    for (int64_t i = 0; i < t.size(); ++i) d.push_back(float_json(t.at(i)));
  else
    for (float f : t.data) d.push_back(float_json(f));
  json o{{"shape", t.shape}, {"data", std::move(d)}};
  if (t.storage == Storage::RowNorms) o["storage"] = "row_norms";
  return o;
}

json tensors_json(const std::map<std::string, Tensor>& m) {
  json o = json::object();
  for (auto& [k, v] : m) o[k] = tensor_json(v, k.size() > 4 && k.compare(k.size() - 4, 4, ".ids") == 0);
  return o;
}

// A step's token_text: {"284": " of", ...}.
json token_text_json(const std::map<int, std::string>& m) {
  json o = json::object();
  for (auto& [id, text] : m) o[std::to_string(id)] = text;
  return o;
}

json candidate_json(const Candidate& c) {
  json o{{"id", c.id},
         {"text", c.text},
         {"p_raw", c.p_raw},
         {"p_rep", c.p_rep},
         {"repeated", c.repeated},
         {"p_temp", c.p_temp},
         {"p_topk", c.p_topk},
         {"p_final", c.p_final},
         {"removed", c.removed == 0 ? "" : c.removed == 1 ? "top_k" : "top_p"}};
  if (c.lookahead) {
    o["confidence"] = c.confidence;
    o["degeneration_penalty"] = c.degeneration;
    o["score"] = c.score;
  }
  return o;
}

}  // namespace

void Trace::write_json(std::ostream& os) const {
  check_json_size();
  json j;
  j["format"] = "decoderscope-trace";
  j["version"] = 1;
  j["model"] = {{"name", model_name}, {"config", config_to_json(config)}};
  j["source"] = source;
  j["source_text"] = source_text;
  j["encoder"] = tensors_json(encoder);
  json st = json::array();
  for (auto& s : steps) {
    json o{{"pos0", s.pos0}, {"input", s.input}, {"input_text", s.input_text}, {"tensors", tensors_json(s.tensors)}};
    if (!s.token_text.empty()) o["token_text"] = token_text_json(s.token_text);
    if (s.forward_ms >= 0) o["forward_ms"] = s.forward_ms;
    o["kv_cache"] = s.kv_cache;
    if (s.sample) {
      const SampleRecord& r = *s.sample;
      json cands = json::array();
      for (auto& c : r.candidates) cands.push_back(candidate_json(c));
      o["sample"] = {{"temperature", r.config.temperature},
                     {"top_k", r.config.top_k},
                     {"top_p", r.config.top_p},
                     {"seed", r.config.seed},
                     {"repetition_penalty", r.config.repetition_penalty},
                     {"contrastive", r.config.contrastive},
                     {"penalty_alpha", r.config.penalty_alpha},
                     {"greedy", r.greedy},
                     {"u", r.u},
                     {"token", r.token},
                     {"rank", r.rank},
                     {"n_kept", r.n_kept},
                     {"candidates", std::move(cands)}};
      if (r.chosen) {
        const TokenChoice& ch = *r.chosen;
        o["sample"]["chosen"] = {{"by", ch.by}};
        if (ch.width > 0)
          o["sample"]["chosen"].update({{"width", ch.width},
                                        {"length_penalty", ch.length_penalty},
                                        {"logprob", ch.logprob},
                                        {"sum", ch.sum},
                                        {"rank", ch.rank},
                                        {"score", ch.score},
                                        {"final", ch.final}});
      }
    }
    st.push_back(std::move(o));
  }
  j["steps"] = std::move(st);
  // Invalid UTF-8 in token text (a piece that is part of a character) is replaced.
  os << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
}

// ---- recorder

void pattern_from_scores(float* row, int64_t n) {
  const float ninf = -std::numeric_limits<float>::infinity();
  float mx = ninf;
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, row[j]);
  double z = 0;
  for (int64_t j = 0; j < n; ++j) {
    row[j] = (mx == ninf || row[j] == ninf) ? 0.0f : std::exp(row[j] - mx);
    z += row[j];
  }
  if (z > 0)
    for (int64_t j = 0; j < n; ++j) row[j] = float(row[j] / z);
}

std::vector<std::string> default_record_patterns(const Config& cfg) {
  // resid_mid_cross: decoder blocks of encoder-decoder models only (dropped below otherwise).
  static const char* kWanted[] = {"blocks.*.attn.pattern",        "blocks.*.attn.scores",     "blocks.*.attn.mask",
                                  "**.cross_attn.pattern",        "**.cross_attn.scores",     "blocks.*.resid_pre",
                                  "blocks.*.resid_mid",           "blocks.*.resid_mid_cross", "blocks.*.resid_post",
                                  "encoder.blocks.*.attn.pattern"};
  std::vector<std::string> names = Hooks::names(cfg), out;
  for (const char* p : kWanted)
    for (auto& n : names)
      if (Hooks::matches(p, n)) {
        out.push_back(p);
        break;
      }
  return out;
}

namespace {

void store_f16(Tensor& t, const TensorView& src) {
  t.storage = Storage::F16;
  t.data.clear();
  t.half.resize(size_t(src.size()));
  narrow(src.data, src.size(), Precision::F16, t.half.data());
}

// Scores: each row relative to its largest finite value (kept as a float offset), so
// the cells that matter after the softmax, those near the maximum, keep float16's
// finest steps whatever the scores' magnitude.
void store_f16_rows(Tensor& t, const TensorView& src) {
  t.storage = Storage::F16;
  const int64_t d = src.rank ? src.shape[src.rank - 1] : 1;
  const int64_t rows = d > 0 ? src.size() / d : 0;
  t.data.assign(size_t(rows), 0.0f);
  t.half.resize(size_t(src.size()));
  std::vector<float> tmp(static_cast<size_t>(d));
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = src.data + r * d;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < d; ++j)
      if (std::isfinite(x[j])) mx = std::max(mx, x[j]);
    if (!std::isfinite(mx)) mx = 0;
    for (int64_t j = 0; j < d; ++j) tmp[size_t(j)] = x[j] - mx;
    t.data[size_t(r)] = mx;
    narrow(tmp.data(), d, Precision::F16, t.half.data() + r * d);
  }
}

// The event with only its rows of positions >= first (the query rows of attention's
// [n_heads, T, S] tensors, the first axis of the others), copied into scratch; the
// event itself when it has no row before first.
HookEvent rows_from(const HookEvent& ev, int first, std::vector<float>& scratch) {
  const int drop = first - ev.pos0;
  if (drop <= 0) return ev;
  const Point p = ev.point;
  const bool heads_first =
      p == Point::AttnScores || p == Point::AttnPattern || p == Point::CrossScores || p == Point::CrossPattern;
  const int axis = heads_first && ev.t.rank == 3 ? 1 : 0;
  const int T = ev.t.shape[axis], keep = std::max(0, T - drop);
  int64_t outer = 1, inner = 1;  // the sizes of the axes before and after the row axis
  for (int i = 0; i < axis; ++i) outer *= ev.t.shape[i];
  for (int i = axis + 1; i < ev.t.rank; ++i) inner *= ev.t.shape[i];
  scratch.resize(size_t(outer * keep * inner));
  for (int64_t o = 0; o < outer; ++o)
    std::copy_n(ev.t.data + (o * T + (T - keep)) * inner, keep * inner, scratch.data() + o * keep * inner);
  HookEvent out = ev;
  out.pos0 = ev.pos0 + (T - keep);
  out.t.data = scratch.data();
  out.t.shape[axis] = keep;
  return out;
}

void store_row_norms(Tensor& t, const TensorView& src) {
  t.storage = Storage::RowNorms;
  t.half.clear();
  const int64_t d = src.rank ? src.shape[src.rank - 1] : 1;
  const int64_t rows = d > 0 ? src.size() / d : 0;
  t.data.resize(size_t(rows));
  for (int64_t r = 0; r < rows; ++r) t.data[size_t(r)] = l2_norm(src.data + r * d, d);
}

}  // namespace

TraceRecorder::TraceRecorder(Hooks& hooks, const Config& cfg, Trace& trace, const std::vector<std::string>& patterns,
                             TraceOptions options, std::shared_ptr<const Model> model)
    : hooks_(hooks), trace_(trace), opt_(options) {
  if (opt_.lens_top_k < 0) throw Error("the logit lens's top k must be positive (0: no lens)");
  if (opt_.lens_top_k > 0) {
    if (!model) throw Error("recording the logit lens needs the model's weights: give the recorder the model");
    const Config& mc = model->cfg;
    if (mc.d_model != cfg.d_model || mc.n_layers != cfg.n_layers || mc.vocab_size != cfg.vocab_size)
      throw Error("the logit lens's model (" + mc.describe() + ") is not the model recorded (" + cfg.describe() + ")");
    lens_ = std::make_unique<LensRecorder>(hooks, std::move(model), trace, opt_.lens_top_k, opt_.compact,
                                           std::max(1, opt_.threads));
  }
  n_layers_ = std::max(cfg.n_layers, cfg.n_enc_layers);
  names_.resize(size_t(2) * (n_layers_ + 1) * int(Point::Count));
  for (int s = 0; s < 2; ++s)
    for (int l = -1; l < n_layers_; ++l)
      for (int p = 0; p < int(Point::Count); ++p)
        names_[(size_t(s) * (n_layers_ + 1) + (l + 1)) * int(Point::Count) + p] = Hooks::name(Stack(s), l, Point(p));
  for (auto& pat : patterns) handles_.push_back(hooks_.subscribe(pat, [this](HookEvent& ev) { record(ev); }));
}

void TraceRecorder::record(const HookEvent& event) {
  if (paused_) return;
  const bool source_side = event.point == Point::CrossK || event.point == Point::CrossV;
  const HookEvent ev = event.stack == Stack::Decoder && !source_side ? rows_from(event, first_row_, kept_) : event;
  if (ev.t.size() == 0) return;
  auto name_of = [&](Point p) -> const std::string& {
    return names_[(size_t(ev.stack) * (n_layers_ + 1) + (ev.layer + 1)) * int(Point::Count) + int(p)];
  };
  const std::string& nm = name_of(ev.point);
  std::map<std::string, Tensor>* dst = nullptr;
  // The source's cross-attention keys and values come with the encoder, once.
  if (ev.stack == Stack::Encoder || source_side) {
    dst = &trace_.encoder;
  } else {
    if (trace_.steps.empty()) trace_.steps.emplace_back();
    dst = &trace_.steps.back().tensors;
  }
  if (!opt_.compact) {
    Tensor& t = (*dst)[nm];
    t.shape.assign(ev.t.shape, ev.t.shape + ev.t.rank);
    t.data.assign(ev.t.data, ev.t.data + ev.t.size());
    return;
  }
  const Point p = ev.point;
  const bool scores = p == Point::AttnScores || p == Point::CrossScores;
  const bool pattern = p == Point::AttnPattern || p == Point::CrossPattern;
  const bool cross = p == Point::CrossScores || p == Point::CrossPattern;
  if (pattern) {
    // Rebuilt from the scores when they were recorded (they fire first).
    if (dst->count(name_of(cross ? Point::CrossScores : Point::AttnScores))) return;
  }
  Tensor& t = (*dst)[nm];
  t.shape.assign(ev.t.shape, ev.t.shape + ev.t.rank);
  if (scores) dst->erase(name_of(cross ? Point::CrossMask : Point::AttnMask));  // -inf cells are the mask
  const bool norms_only = (p == Point::ResidPre && ev.layer > 0) || p == Point::ResidMid || p == Point::ResidMidCross;
  if (norms_only)
    store_row_norms(t, ev.t);
  else if (scores)
    store_f16_rows(t, ev.t);
  else
    store_f16(t, ev.t);
}

void TraceRecorder::set_first_row(int pos) {
  first_row_ = std::max(0, pos);
  if (lens_) lens_->set_first_row(first_row_);
}

void TraceRecorder::set_paused(bool paused) {
  paused_ = paused;
  if (lens_) lens_->set_paused(paused);
}

TraceRecorder::~TraceRecorder() {
  for (int h : handles_) hooks_.unsubscribe(h);
}

}  // namespace ds
