#include "engine_link/compare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "engine_link/models.h"
#include "engine_link/worker.h"
#include "probe/interventions.h"
#include "probe/lens.h"
#include "util/error.h"

namespace dsgui {

namespace {

float prob_of(const ds::Candidate& c, bool after_settings) { return after_settings ? c.p_final : c.p_raw; }

// The entries of a table that bound the tokens it leaves out: all but a drawn token the
// session may have appended after its most probable ones (the last entry, ranked last);
// leaving one out when it was not appended only loosens the bound.
size_t floor_entries(const ds::SampleRecord& r) {
  const size_t n = r.candidates.size();
  if (n > 1 && r.token >= 0 && r.rank >= int(n) - 1 && r.candidates.back().id == r.token) return n - 1;
  return n;
}

}  // namespace

float table_floor(const ds::SampleRecord& r, bool after_settings) {
  if (!after_settings && r.config.repetition_penalty != 1.0f) return -1;
  if (r.config.contrastive) return -1;
  const size_t n = floor_entries(r);
  if (n == 0) return -1;
  float lo = std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) lo = std::min(lo, prob_of(r.candidates[i], after_settings));
  return lo;
}

std::vector<CompareRow> compare_rows(const ds::SampleRecord* a, const ds::SampleRecord* b, bool after_settings,
                                     int top) {
  std::vector<CompareRow> rows;
  auto find = [&](int id) -> CompareRow* {
    for (CompareRow& r : rows)
      if (r.id == id) return &r;
    return nullptr;
  };
  const float fa = a ? table_floor(*a, after_settings) : -1, fb = b ? table_floor(*b, after_settings) : -1;
  auto add = [&](const ds::SampleRecord* rec, bool side_a) {
    if (!rec) return;
    const size_t n = std::min(rec->candidates.size(), size_t(std::max(0, top)));
    for (size_t i = 0; i < n; ++i) {
      const ds::Candidate& c = rec->candidates[i];
      CompareRow* r = find(c.id);
      if (!r) {
        r = &rows.emplace_back();
        r->id = c.id;
        r->text = c.text;
        r->floor_a = fa, r->floor_b = fb;
      }
      (side_a ? r->in_a : r->in_b) = true;
      (side_a ? r->pa : r->pb) = prob_of(c, after_settings);
    }
  };
  add(a, true);
  add(b, false);
  // A token one side lists among its top ones but the other lists only further down its
  // table (beyond `top`) still has a known probability there.
  for (CompareRow& r : rows)
    for (int side = 0; side < 2; ++side) {
      const ds::SampleRecord* rec = side == 0 ? a : b;
      bool& in = side == 0 ? r.in_a : r.in_b;
      if (!rec || in) continue;
      for (size_t i = 0; i < rec->candidates.size(); ++i)
        if (rec->candidates[i].id == r.id) {
          in = true;
          (side == 0 ? r.pa : r.pb) = prob_of(rec->candidates[i], after_settings);
        }
    }
  return rows;
}

Diff prob_diff(const CompareRow& r) {
  Diff d;
  if (r.in_a && r.in_b) {
    d.known = d.exact = true;
    d.lo = d.hi = double(r.pa) - double(r.pb);
  } else if (r.in_a && r.floor_b >= 0) {  // pb in [0, floor_b]
    d.known = true;
    d.lo = double(r.pa) - double(r.floor_b), d.hi = r.pa;
  } else if (r.in_b && r.floor_a >= 0) {  // pa in [0, floor_a]
    d.known = true;
    d.lo = -double(r.pb), d.hi = double(r.floor_a) - double(r.pb);
  }
  return d;
}

Diff logprob_diff(const CompareRow& r) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  auto lg = [](double p) { return p > 0 ? std::log(p) : -inf; };
  Diff d;
  if (r.in_a && r.in_b) {
    d.known = d.exact = true;
    d.lo = d.hi = lg(r.pa) - lg(r.pb);
  } else if (r.in_a && r.floor_b >= 0) {  // log pb <= log floor_b
    d.known = true;
    d.lo = lg(r.pa) - lg(r.floor_b), d.hi = inf;
  } else if (r.in_b && r.floor_a >= 0) {
    d.known = true;
    d.lo = -inf, d.hi = lg(r.floor_a) - lg(r.pb);
  }
  return d;
}

namespace {

std::string signed_text(double v, int digits) {
  if (std::isinf(v)) return v > 0 ? "+inf" : "-inf";
  if (v == 0) return "0";
  char b[48];
  std::snprintf(b, sizeof b, std::fabs(v) < 1e-3 ? "%+.*e" : "%+.*f", std::fabs(v) < 1e-3 ? digits - 1 : digits + 1, v);
  return b;
}

}  // namespace

std::string diff_text(const Diff& d, int digits) {
  if (!d.known) return "?";
  if (d.exact) return signed_text(d.lo, digits);
  // One side is a bound: the end that holds (the other end is the token's own
  // probability, or infinite).
  if (std::isinf(d.hi) || (d.lo > 0 && !std::isinf(d.lo))) return ">= " + signed_text(d.lo, digits);
  return "<= " + signed_text(d.hi, digits);
}

std::string prob_text(float p, int digits) {
  if (p == 0) return "0";
  char b[48];
  if (p < 1e-3f)
    std::snprintf(b, sizeof b, "%.*e", digits - 2, double(p));
  else
    std::snprintf(b, sizeof b, "%.*f", digits, double(p));
  return b;
}

std::vector<bool> token_differences(const std::vector<int>& a, const std::vector<int>& b) {
  const size_t n = std::max(a.size(), b.size());
  std::vector<bool> d(n, true);
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d[i] = a[i] != b[i];
  return d;
}

Matrix difference_map(const Matrix& a, const Matrix& b) {
  Matrix m;
  if (!a.ok() || !b.ok()) {
    m.error = !a.ok() ? a.error : b.error;
    if (m.error.empty()) m.error = "nothing to compare";
    return m;
  }
  m.rows = std::min(a.rows, b.rows);
  m.cols = std::min(a.cols, b.cols);
  m.v.assign(size_t(m.rows) * size_t(m.cols), 0.0f);
  m.mask.assign(m.v.size(), 0);
  float big = 1e-6f;
  for (int r = 0; r < m.rows; ++r)
    for (int c = 0; c < m.cols; ++c) {
      const size_t i = size_t(r) * size_t(m.cols) + size_t(c);
      if (!a.allowed(r, c) || !b.allowed(r, c)) continue;
      m.mask[i] = 1;
      m.v[i] = a.at(r, c) - b.at(r, c);
      big = std::max(big, std::fabs(m.v[i]));
    }
  m.vmin = -big, m.vmax = big;
  m.lo = -big, m.hi = big;
  return m;
}

std::vector<LensTop1> lens_at(const ds::Trace& t, int pos) {
  std::vector<LensTop1> out;
  const int s = t.step_of(pos);
  if (s < 0) return out;
  const ds::TraceStep& st = t.steps[size_t(s)];
  const int row = pos - st.pos0;
  for (const ds::LensSource& src : ds::lens_sources(t.config)) {
    auto ids = st.tensors.find(ds::lens_ids_name(src.hook));
    auto probs = st.tensors.find(ds::lens_probs_name(src.hook));
    if (ids == st.tensors.end() || probs == st.tensors.end() || ids->second.shape.size() != 2) return {};
    const int k = ids->second.shape[1];
    if (k < 1 || row >= ids->second.shape[0] || probs->second.size() != ids->second.size()) return {};
    LensTop1 l;
    l.label = src.label;
    l.id = int(ids->second.at(int64_t(row) * k));
    l.p = probs->second.at(int64_t(row) * k);
    auto tx = st.token_text.find(l.id);
    l.text = tx != st.token_text.end() ? tx->second : "#" + std::to_string(l.id);
    out.push_back(std::move(l));
  }
  return out;
}

std::string vocabulary_mismatch(int vocab_a, const ds::Tokenizer* tok_a, const std::string& name_a, int vocab_b,
                                const ds::Tokenizer* tok_b, const std::string& name_b) {
  const std::string pair = name_a + " and " + name_b;
  if (vocab_a != vocab_b)
    return pair + " have different vocabularies (" + std::to_string(vocab_a) + " and " + std::to_string(vocab_b) +
           " tokens), so their tokens and probabilities cannot be lined up: pick a model with the same tokenizer";
  if (!tok_a != !tok_b) return pair + " cannot be lined up: only " + (tok_a ? name_a : name_b) + " has a tokenizer";
  if (tok_a && tok_b)
    for (int id = 0; id < vocab_a; ++id) {
      std::string pa, pb;
      try {
        pa = tok_a->piece(id);
        pb = tok_b->piece(id);
      } catch (const ds::Error&) {
        continue;
      }
      if (pa != pb)
        return pair + " have different vocabularies (token " + std::to_string(id) + " reads \"" + visible(pa) +
               "\" in one and \"" + visible(pb) + "\" in the other), so their tokens cannot be lined up";
    }
  return "";
}

// ---- the worker's side

namespace {

// The prompt and source ids of B's text on model m, as the window's boxes make them for
// the main session (Worker::inputs, without chat templates).
void compare_inputs(const ds::LoadedModel& m, const std::string& prompt_text, const std::string& source_text,
                    std::vector<int>& prompt, std::vector<int>& src) {
  const ds::Config& cfg = m.model->cfg;
  if (m.tokenizer) {
    if (cfg.encoder_decoder) {
      if (cfg.bos_id >= 0) prompt.push_back(cfg.bos_id);
      for (int id : m.tokenizer->encode(prompt_text, false)) prompt.push_back(id);
      src = m.tokenizer->encode(source_text, false);
    } else if (m.kind == "random") {
      prompt = m.tokenizer->encode(prompt_text, m.bos_prompt);
    } else {
      prompt = ds::encode_prompt(m, prompt_text);
    }
  }
  if (prompt.empty()) {
    if (cfg.bos_id >= 0)
      prompt = {cfg.bos_id};
    else if (!m.tokenizer)
      throw ds::Error("this model has no tokenizer, so B's text cannot be turned into tokens");
    else
      throw ds::Error("B's prompt is empty: type some text");
  }
  if (cfg.encoder_decoder && src.empty()) throw ds::Error("B's source is empty: type a source text");
}

}  // namespace

// B's run: the model (the loaded one, or another with the same vocabulary, kept open for
// the next request), its text, settings and heads off, `steps` steps, with the progress
// on the status line; Stop ends it with the steps made so far.
void Worker::handle(cmd::Compare& c) {
  auto a = std::make_shared<CompareAnswer>();
  a->key = c.key;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (!lm_.model) throw ds::Error("comparing needs a model loaded");
    const ds::LoadedModel* m = &lm_;
    if (!c.spec.empty() && c.spec != spec_) {
      if (compare_spec_ != c.spec || compare_lm_.model == nullptr || compare_lm_.precision != c.precision) {
        set_activity("compare: opening " + c.spec);
        compare_lm_ = ds::LoadedModel{};
        compare_spec_.clear();
        compare_lm_ = open_model(c.spec, "", c.precision);
        compare_spec_ = c.spec;
      }
      m = &compare_lm_;
      const std::string why = vocabulary_mismatch(lm_.model->cfg.vocab_size, lm_.tokenizer.get(), lm_.name,
                                                  m->model->cfg.vocab_size, m->tokenizer.get(), m->name);
      if (!why.empty()) throw ds::Error(why);
      if (m->model->cfg.encoder_decoder != lm_.model->cfg.encoder_decoder)
        throw ds::Error(lm_.name + " and " + m->name +
                        " cannot be compared: one is an encoder-decoder model, the other decoder-only");
    }
    a->model_name = m->name;
    set_activity("compare: encoding B's text");
    std::vector<int> prompt, src;
    compare_inputs(*m, c.prompt, c.source, prompt, src);
    ds::SessionOptions o = session_options(c.threads, c.kv_cache);
    o.sampler = c.sampler;
    o.stop_ids = m->stop_ids;
    o.keep_logits_bytes = 0;
    ds::Session s(m->model, m->tokenizer, o);
    const ds::Config& cfg = m->model->cfg;
    for (auto [l, h] : c.heads_off)
      if (l >= 0 && l < cfg.n_layers && h >= 0 && h < cfg.n_heads) ds::zero_head(s.engine().hooks(), l, h, cfg.d_head);
    s.start(prompt, src);
    a->trace = s.trace();
    for (int i = 0; i < c.steps && !s.done(); ++i) {
      if (cancel_) {
        a->cancelled = true;
        break;
      }
      set_activity("compare: B's step " + std::to_string(i + 1) + " of " + std::to_string(c.steps));
      s.step();
      a->trace.steps.push_back(s.hand_over_last_step());
    }
  } catch (const ds::Error& e) {
    a->error = e.what();
    a->trace = ds::Trace{};
  }
  a->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  emit(ev::Compare{std::move(a)});
}

}  // namespace dsgui
