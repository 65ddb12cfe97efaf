#include "engine_link/trace_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "text/unicode.h"
#include "util/error.h"

namespace dsgui {

namespace {

bool g_unicode = false;

const ds::Tensor* find(const ds::TraceStep& s, const std::string& name) {
  auto it = s.tensors.find(name);
  return it == s.tensors.end() ? nullptr : &it->second;
}

void finish_range(Matrix& m, bool scores) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (int r = 0; r < m.rows; ++r)
    for (int c = 0; c < m.cols; ++c) {
      if (!m.allowed(r, c)) continue;
      float x = m.at(r, c);
      if (!std::isfinite(x)) continue;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  if (lo <= hi)
    m.lo = lo, m.hi = hi;
  else
    m.lo = 0, m.hi = -1;
  display_range(m.lo, m.hi, scores, m.vmin, m.vmax);
}

}  // namespace

void display_range(float lo, float hi, bool scores, float& vmin, float& vmax) {
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (!scores) lo = 0, hi = std::max(hi, 1e-6f);
  if (hi - lo < 1e-9f) hi = lo + 1e-6f;
  vmin = lo;
  vmax = hi;
}

Matrix attention_step_rows(const ds::Trace& t, int layer, int head, int step, bool cross, bool scores) {
  Matrix m;
  if (step < 0 || step >= int(t.steps.size())) {
    m.error = "no step yet: press Step (Right arrow)";
    return m;
  }
  const ds::Config& cfg = t.config;
  if (cross && !cfg.encoder_decoder) {
    m.error = "this model is decoder-only: it has no cross-attention";
    return m;
  }
  const std::string base = "blocks." + std::to_string(layer) + (cross ? ".cross_attn." : ".attn.");
  ds::MatRM rows;
  try {
    rows = t.step_attention(layer, head, step, cross, scores);
  } catch (const ds::Error& e) {
    m.error = e.what();
    return m;
  }
  if (rows.rows() == 0) {
    m.error = "the trace did not record " + base + (scores ? "scores" : "pattern");
    return m;
  }
  const int T = int(rows.rows()), S = int(rows.cols());
  m.rows = T;
  m.cols = S;
  m.v.assign(rows.data(), rows.data() + rows.size());
  m.mask = t.step_mask(layer, step, cross);  // recorded, else from the scores, else the rule
  if (scores)                                // masked scores are -inf; keep the texture finite
    for (float& v : m.v)
      if (!std::isfinite(v)) v = 0;
  finish_range(m, scores);
  return m;
}

Matrix crop(const Matrix& m, int rows, int cols, bool scores) {
  Matrix c;
  c.error = m.error;
  c.rows = std::clamp(rows, 0, m.rows);
  c.cols = std::clamp(cols, 0, m.cols);
  c.v.resize(size_t(c.rows) * c.cols);
  c.mask.resize(c.v.size());
  for (int r = 0; r < c.rows; ++r) {
    std::copy_n(m.v.data() + size_t(r) * m.cols, c.cols, c.v.data() + size_t(r) * c.cols);
    std::copy_n(m.mask.data() + size_t(r) * m.cols, c.cols, c.mask.data() + size_t(r) * c.cols);
  }
  finish_range(c, scores);
  return c;
}

void append_rows(Matrix& m, const Matrix& rows, int row0, bool scores) {
  const int R = std::max(m.rows, row0 + rows.rows), C = std::max(m.cols, rows.cols);
  if (C != m.cols) {  // wider: lay the earlier rows out again
    std::vector<float> v(size_t(R) * C, 0.0f);
    std::vector<uint8_t> mask(size_t(R) * C, 0);
    for (int r = 0; r < m.rows; ++r) {
      std::copy_n(m.v.data() + size_t(r) * m.cols, m.cols, v.data() + size_t(r) * C);
      std::copy_n(m.mask.data() + size_t(r) * m.cols, m.cols, mask.data() + size_t(r) * C);
    }
    m.v = std::move(v);
    m.mask = std::move(mask);
  } else {
    m.v.resize(size_t(R) * C, 0.0f);
    m.mask.resize(size_t(R) * C, 0);
  }
  for (int r = 0; r < rows.rows; ++r) {
    float* v = m.v.data() + size_t(row0 + r) * C;
    uint8_t* k = m.mask.data() + size_t(row0 + r) * C;
    std::copy_n(rows.v.data() + size_t(r) * rows.cols, rows.cols, v);
    std::copy_n(rows.mask.data() + size_t(r) * rows.cols, rows.cols, k);
    std::fill(v + rows.cols, v + C, 0.0f);
    std::fill(k + rows.cols, k + C, uint8_t(0));
  }
  m.rows = R;
  m.cols = C;
  if (rows.lo <= rows.hi) {
    if (m.lo <= m.hi)
      m.lo = std::min(m.lo, rows.lo), m.hi = std::max(m.hi, rows.hi);
    else
      m.lo = rows.lo, m.hi = rows.hi;
  }
  display_range(m.lo, m.hi, scores, m.vmin, m.vmax);
}

Matrix attention_matrix(const ds::Trace& t, int layer, int head, int step, bool cross, bool scores) {
  Matrix m;
  if (step < 0 || step >= int(t.steps.size())) {
    m.error = "no step yet: press Step (Right arrow)";
    return m;
  }
  // Each step's own rows, stacked: the same rows a view appends one step at a time.
  for (int s = 0; s <= step; ++s) {
    Matrix rows = attention_step_rows(t, layer, head, s, cross, scores);
    if (!rows.error.empty()) {
      Matrix e;
      e.error = rows.error;
      return e;
    }
    append_rows(m, rows, t.steps[s].pos0, scores);
  }
  return m;
}

Matrix encoder_matrix(const ds::Trace& t, int layer, int head) {
  Matrix m;
  try {
    ds::MatRM a;
    if (head >= 0) {
      a = t.encoder_attention(layer, head);
    } else {
      a = t.encoder_attention(layer, 0);
      for (int h = 1; h < t.config.n_heads; ++h) a += t.encoder_attention(layer, h);
      a /= float(t.config.n_heads);
    }
    m.rows = int(a.rows());
    m.cols = int(a.cols());
    m.v.assign(a.data(), a.data() + a.size());
  } catch (const ds::Error& e) {
    m.error = e.what();
    return m;
  }
  m.mask = t.encoder_mask(m.rows, m.cols);
  finish_range(m, false);
  return m;
}

static const char* kResidNames[] = {"resid_pre", "resid_mid", "resid_post", "resid_mid_cross"};

bool resid_vector(const ds::Trace& t, int step, int layer, int kind, int pos, std::vector<float>& out) {
  if (kind < 0 || kind >= kResidKinds) return false;
  int s = step_of_position(t, pos);
  if (s < 0 || s > step) return false;
  const ds::TraceStep& st = t.steps[s];
  const ds::Tensor* x = find(st, "blocks." + std::to_string(layer) + "." + kResidNames[kind]);
  if (!x || x->shape.size() != 2 || !x->has_values()) return false;  // compact traces keep some as norms
  int r = pos - st.pos0, d = x->shape[1];
  if (r < 0 || r >= x->shape[0]) return false;
  out.resize(size_t(d));
  x->values(int64_t(r) * d, d, out.data());
  return true;
}

bool resid_norm(const ds::Trace& t, int step, int layer, int kind, int pos, float& out) {
  if (kind < 0 || kind >= kResidKinds) return false;
  int s = step_of_position(t, pos);
  if (s < 0 || s > step) return false;
  const ds::Tensor* x = find(t.steps[s], "blocks." + std::to_string(layer) + "." + kResidNames[kind]);
  if (!x || x->shape.size() != 2) return false;
  const int r = pos - t.steps[s].pos0;
  if (r < 0 || r >= x->shape[0]) return false;
  out = x->row_norm(r);
  return true;
}

Matrix resid_norm_map(const ds::Trace& t, int step, int kind) {
  Matrix m;
  if (step < 0 || step >= int(t.steps.size())) {
    m.error = "no step yet";
    return m;
  }
  if (kind < 0 || kind >= kResidKinds) {
    m.error = "no such residual point";
    return m;
  }
  m.rows = t.config.n_layers;
  m.cols = t.positions(step);
  m.v.assign(size_t(m.rows) * m.cols, 0.0f);
  m.mask.assign(size_t(m.rows) * m.cols, 1);
  bool any = false;
  // Step by step: each step's tensor gives the norms of its rows (a compact trace
  // stores only those norms for some points).
  for (int s = 0; s <= step; ++s) {
    const ds::TraceStep& st = t.steps[s];
    for (int l = 0; l < m.rows; ++l) {
      const ds::Tensor* x = find(st, "blocks." + std::to_string(l) + "." + kResidNames[kind]);
      if (!x || x->shape.size() != 2) continue;
      std::vector<float> norms = x->row_norms();
      for (size_t r = 0; r < norms.size(); ++r) {
        const int p = st.pos0 + int(r);
        if (p >= m.cols) break;
        m.v[size_t(l) * m.cols + p] = norms[r];
        any = true;
      }
    }
  }
  if (!any) {
    m.error = std::string("the trace did not record ") + kResidNames[kind];
    return m;
  }
  finish_range(m, false);
  return m;
}

void GrowingNorms::start(uint64_t epoch, int kind, int layers) {
  epoch_ = epoch;
  kind_ = kind;
  layers_ = layers;
  read_ = -1;
  any_ = false;
  norms_.assign(size_t(layers), {});
  written_.clear();
  m_step_ = -2;
}

bool GrowingNorms::add_step(const ds::Trace& t, int s) {
  const ds::TraceStep& st = t.steps[size_t(s)];
  const int P = t.positions(s);
  if (int(written_.size()) < P) written_.resize(size_t(P), -1);
  for (int l = 0; l < layers_; ++l) {
    std::vector<float>& row = norms_[size_t(l)];
    if (int(row.size()) < P) row.resize(size_t(P), 0.0f);
    const ds::Tensor* x = find(st, "blocks." + std::to_string(l) + "." + kResidNames[kind_]);
    if (!x || x->shape.size() != 2) continue;
    const std::vector<float> n = x->row_norms();
    for (size_t r = 0; r < n.size(); ++r) {
      const int p = st.pos0 + int(r);
      if (p < 0 || p >= P) break;
      if (written_[size_t(p)] >= 0 && written_[size_t(p)] < s) return false;  // written again
      written_[size_t(p)] = s;
      row[size_t(p)] = n[r];
      any_ = true;
    }
  }
  read_ = s;
  return true;
}

const Matrix& GrowingNorms::as_of(const ds::Trace& t, uint64_t epoch, int step, int kind) {
  if (step < 0 || step >= int(t.steps.size()) || kind < 0 || kind >= kResidKinds) {
    m_ = resid_norm_map(t, step, kind);  // its message
    m_step_ = -2;
    return m_;
  }
  if (epoch != epoch_ || kind != kind_ || layers_ != t.config.n_layers) start(epoch, kind, t.config.n_layers);
  if (step == m_step_) return m_;
  bool grown = true;
  for (int s = read_ + 1; s <= step && grown; ++s) grown = add_step(t, s);
  if (!grown) {  // a position written again: the map as of this step from the trace
    start(epoch, kind, t.config.n_layers);
    m_ = resid_norm_map(t, step, kind);
    return m_;
  }
  Matrix& m = m_;
  m = Matrix();
  m_step_ = step;
  if (!any_) {
    m.error = std::string("the trace did not record ") + kResidNames[kind];
    return m;
  }
  m.rows = layers_;
  m.cols = t.positions(step);
  m.v.resize(size_t(m.rows) * m.cols);
  m.mask.assign(size_t(m.rows) * m.cols, 1);
  for (int l = 0; l < m.rows; ++l)
    std::copy_n(norms_[size_t(l)].begin(), m.cols, m.v.begin() + ptrdiff_t(size_t(l) * m.cols));
  finish_range(m, false);
  return m;
}

std::vector<TokenInfo> tokens_as_of(const ds::Trace& t, int step) {
  std::vector<TokenInfo> out;
  if (t.steps.empty() || step < 0) return out;
  step = std::min(step, int(t.steps.size()) - 1);
  for (int s = 0; s <= step; ++s) {
    const ds::TraceStep& st = t.steps[s];
    for (size_t i = 0; i < st.input.size(); ++i) {
      TokenInfo ti;
      ti.pos = st.pos0 + int(i);
      ti.id = st.input[i];
      ti.text = i < st.input_text.size() ? st.input_text[i] : "#" + std::to_string(ti.id);
      ti.prompt = s == 0;
      if (s > 0 && t.steps[s - 1].sample) {
        const ds::SampleRecord& r = *t.steps[s - 1].sample;
        ti.drawn_at = s - 1;
        ti.rank = r.rank;
        for (auto& c : r.candidates)
          if (c.id == r.token) ti.p = c.p_final, ti.p_raw = c.p_raw;
      }
      out.push_back(std::move(ti));
    }
  }
  const ds::TraceStep& last = t.steps[step];
  if (last.sample && last.sample->token >= 0) {
    const ds::SampleRecord& r = *last.sample;
    TokenInfo ti;
    ti.pos = t.positions(step);
    ti.id = r.token;
    ti.fed = false;
    ti.drawn_at = step;
    ti.rank = r.rank;
    ti.text = "#" + std::to_string(r.token);
    for (auto& c : r.candidates)
      if (c.id == r.token) ti.text = c.text, ti.p = c.p_final, ti.p_raw = c.p_raw;
    out.push_back(std::move(ti));
  }
  return out;
}

int step_of_position(const ds::Trace& t, int pos) {
  for (int s = 0; s < int(t.steps.size()); ++s)
    if (pos >= t.steps[s].pos0 && pos < t.steps[s].pos0 + int(t.steps[s].input.size())) return s;
  return -1;
}

int step_sampling_at(const ds::Trace& t, int pos) {
  int s = step_of_position(t, pos);
  if (s < 0 || t.positions(s) - 1 != pos || !t.steps[s].sample) return -1;
  return s;
}

void set_unicode_font(bool yes) { g_unicode = yes; }
bool unicode_font() { return g_unicode; }

namespace {
// A byte-level vocabulary's entry (GPT-2, Llama 3, Qwen: every byte spelled as a
// character of GPT-2's byte alphabet) as the text its bytes make, when it has a
// character beyond ASCII and its bytes are whole UTF-8 characters: "Ã©" reads "é",
// "ĉ" a tab. Other entries are kept: plain text (a SentencePiece piece such as "é" is
// in the alphabet too, but its one byte 0xE9 is no UTF-8 text), and byte-level entries
// that hold part of a character.
std::string byte_level_text(const std::string& piece) {
  const bool beyond_ascii = std::any_of(piece.begin(), piece.end(), [](char c) { return (unsigned char)c >= 0x80; });
  std::string bytes;
  if (!beyond_ascii || !ds::unicode::alphabet_to_bytes(piece, bytes) || !ds::unicode::valid_utf8(bytes)) return piece;
  return bytes;
}
}  // namespace

std::string visible(const std::string& piece) {
  std::string s = byte_level_text(piece);
  // llama2.c's BOS and EOS pieces are "\n<s>\n" and "\n</s>\n": show the tag alone.
  if (s.size() > 4 && s.front() == '\n' && s.back() == '\n' && s[1] == '<' && s[s.size() - 2] == '>')
    s = s.substr(1, s.size() - 2);
  // Byte tokens of llama2.c's tokenizer.
  if (s.size() == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>') {
    int b = std::stoi(s.substr(3, 2), nullptr, 16);
    if (b == '\n')
      s = "\n";
    else if (b == '\t')
      s = "\t";
    else if (b == ' ')
      s = " ";
    else if (b == '\r')
      s = "\r";
    else
      return s;
  }
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = s[i];
    // GPT-2 byte-level pieces: U+0120 (space) and U+010A (newline).
    if (c == 0xC4 && i + 1 < s.size() && (unsigned char)s[i + 1] == 0xA0) {
      out += g_unicode ? "\xE2\x90\xA3" : "_";
      ++i;
    } else if (c == 0xE2 && i + 2 < s.size() && (unsigned char)s[i + 1] == 0x96 && (unsigned char)s[i + 2] == 0x81) {
      // SentencePiece's space marker U+2581 (the pieces of a GGUF file's vocabulary).
      out += g_unicode ? "\xE2\x90\xA3" : "_";
      i += 2;
    } else if (c == 0xC4 && i + 1 < s.size() && (unsigned char)s[i + 1] == 0x8A) {
      out += g_unicode ? "\xE2\x8F\x8E" : "\\n";
      ++i;
    } else if (c == ' ') {
      out += g_unicode ? "\xE2\x90\xA3" : "_";  // U+2423 open box
    } else if (c == '\n') {
      out += g_unicode ? "\xE2\x8F\x8E" : "\\n";  // U+23CE return symbol
    } else if (c == '\t') {
      out += g_unicode ? "\xE2\x86\x92" : "\\t";  // U+2192 arrow
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 32) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<%02X>", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  if (out.empty()) out = g_unicode ? "\xE2\x88\x85" : "(empty)";  // U+2205 empty set
  return out;
}

std::string shorten(const std::string& s, int n) {
  int count = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (count == n) return s.substr(0, i) + (g_unicode ? "\xE2\x80\xA6" : "~");
      ++count;
    }
  }
  return s;
}

}  // namespace dsgui
