#include "engine_link/lens_grid.h"

#include <algorithm>
#include <cmath>

#include "probe/lens.h"

namespace dsgui {

int lens_commitment(const int* top1, int n) {
  if (n < 1 || top1[n - 1] < 0) return -1;
  int i = n - 1;
  while (i > 0 && top1[i - 1] == top1[n - 1]) --i;
  return i;
}

namespace {

// The grid's row labels: the lens sources', "after layer l" shortened to "layer l", the
// last "final (l)".
std::vector<std::string> row_labels(const ds::Config& cfg) {
  std::vector<std::string> out;
  for (auto& s : ds::lens_sources(cfg))
    out.push_back(s.point == ds::Point::ResidPre ? s.label : "layer " + std::to_string(s.layer));
  if (out.size() > 1) out.back() = "final (" + std::to_string(cfg.n_layers - 1) + ")";  // the model's own output
  return out;
}

}  // namespace

void LensGrid::start(const ds::Trace& t, uint64_t epoch) {
  epoch_ = epoch;
  d_model_ = t.config.d_model;
  vocab_ = t.config.vocab_size;
  read_ = -1;
  positions_ = 0;
  recorded_ = false;
  labels_ = row_labels(t.config);
  cells_.clear();
  known_.clear();
  commit_.clear();
  text_.clear();
  ++serial_;
}

void LensGrid::grow(int positions) {
  if (positions <= int(known_.size())) return;
  cells_.resize(size_t(positions) * labels_.size());
  known_.resize(size_t(positions), 0);
  commit_.resize(size_t(positions), -1);
}

void LensGrid::finish_column(int pos) {
  const int S = sources();
  std::vector<int> top(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) top[size_t(s)] = cell(s, pos).top();
  const bool all = S > 0 && std::all_of(top.begin(), top.end(), [](int id) { return id >= 0; });
  known_[size_t(pos)] = all ? 1 : 0;
  commit_[size_t(pos)] = all ? lens_commitment(top.data(), S) : -1;
}

void LensGrid::read_step(const ds::Trace& t, int s) {
  const ds::TraceStep& st = t.steps[size_t(s)];
  const int T = int(st.input.size());
  grow(st.pos0 + T);
  const std::vector<ds::LensSource> src = ds::lens_sources(t.config);
  bool any = false;
  for (size_t k = 0; k < src.size() && k < labels_.size(); ++k) {
    auto a = st.tensors.find(ds::lens_ids_name(src[k].hook)), b = st.tensors.find(ds::lens_probs_name(src[k].hook));
    if (a == st.tensors.end() || b == st.tensors.end()) continue;
    const ds::Tensor &ti = a->second, &tp = b->second;
    if (ti.shape.size() != 2 || tp.shape != ti.shape || !ti.has_values() || !tp.has_values()) continue;
    const int rows = std::min(ti.shape[0], T), kk = ti.shape[1], n = std::min(kk, LensCell::kTop);
    std::vector<float> ids(static_cast<size_t>(kk)), probs(static_cast<size_t>(kk));
    for (int r = 0; r < rows; ++r) {
      ti.values(int64_t(r) * kk, kk, ids.data());
      tp.values(int64_t(r) * kk, kk, probs.data());
      LensCell& c = cells_[size_t(st.pos0 + r) * labels_.size() + k];
      c.n = 0;
      for (int j = 0; j < n; ++j) {
        const float f = ids[size_t(j)];
        if (!(f >= 0 && f < float(vocab_)) || f != std::floor(f)) break;  // fewer tokens, or not an id
        c.ids[size_t(j)] = int(f);
        c.probs[size_t(j)] = probs[size_t(j)];
        c.n = j + 1;
      }
      any = true;
    }
  }
  if (any) {
    recorded_ = true;
    for (auto& [id, text] : st.token_text) text_.emplace(id, text);
    for (int r = 0; r < T; ++r) finish_column(st.pos0 + r);
    ++serial_;
  }
}

bool LensGrid::as_of(const ds::Trace& t, uint64_t epoch, int step) {
  bool changed = false;
  if (epoch != epoch_ || t.config.d_model != d_model_ || t.config.vocab_size != vocab_ ||
      int(labels_.size()) != (t.config.n_layers > 0 ? t.config.n_layers + 1 : 0)) {
    start(t, epoch);
    changed = true;
  }
  step = std::min(step, int(t.steps.size()) - 1);
  if (step < 0) {
    changed |= positions_ != 0;
    positions_ = 0;
    return changed;
  }
  for (int s = read_ + 1; s <= step; ++s) {
    read_step(t, s);
    read_ = s;
    changed = true;
  }
  const int P = t.positions(step);
  grow(P);
  changed |= P != positions_;
  positions_ = P;
  return changed;
}

bool LensGrid::put(const LensResult& r) {
  bool any = false;
  for (const LensColumn& col : r.columns) {
    if (col.pos < 0 || col.pos >= int(known_.size()) || int(col.rows.size()) != sources()) continue;
    for (int s = 0; s < sources(); ++s) {
      const LensRow& row = col.rows[size_t(s)];
      LensCell& c = cells_[size_t(col.pos) * labels_.size() + size_t(s)];
      c.n = int(std::min({row.ids.size(), row.probs.size(), size_t(LensCell::kTop)}));
      for (int j = 0; j < c.n; ++j) {
        c.ids[size_t(j)] = row.ids[size_t(j)];
        c.probs[size_t(j)] = row.probs[size_t(j)];
        if (size_t(j) < row.texts.size()) text_.emplace(row.ids[size_t(j)], row.texts[size_t(j)]);
      }
    }
    finish_column(col.pos);
    any = true;
  }
  if (any) ++serial_;
  return any;
}

int LensGrid::known_count() const {
  int n = 0;
  for (int p = 0; p < positions_; ++p) n += known_[size_t(p)];
  return n;
}

std::string LensGrid::text(int id) const {
  auto it = text_.find(id);
  return it != text_.end() ? it->second : "#" + std::to_string(id);
}

Matrix LensGrid::matrix(int col0, int cols) const {
  Matrix m;
  col0 = std::clamp(col0, 0, positions_);
  cols = std::clamp(cols, 0, positions_ - col0);
  if (sources() == 0 || cols == 0) {
    m.error = "no positions yet";
    return m;
  }
  m.rows = sources();
  m.cols = cols;
  m.v.assign(size_t(m.rows) * m.cols, 0.0f);
  m.mask.assign(size_t(m.rows) * m.cols, 0);
  for (int c = 0; c < cols; ++c) {
    if (!known(col0 + c)) continue;
    for (int s = 0; s < m.rows; ++s) {
      m.v[size_t(s) * m.cols + c] = cell(s, col0 + c).p();
      m.mask[size_t(s) * m.cols + c] = 1;
    }
  }
  m.vmin = 0, m.vmax = 1, m.lo = 0, m.hi = 1;
  return m;
}

bool lens_column_inputs(const ds::Trace& t, int step, int pos, cmd::Lens::Column& out) {
  out = cmd::Lens::Column{};
  out.pos = pos;
  std::vector<float> x;
  if (!resid_vector(t, step, 0, 0, pos, x)) return false;
  out.resid.push_back(x);
  out.labels.push_back("embedding");
  for (int l = 0; l < t.config.n_layers; ++l) {
    if (!resid_vector(t, step, l, 2, pos, x)) return false;
    out.resid.push_back(x);
    out.labels.push_back("layer " + std::to_string(l));
  }
  return true;
}

}  // namespace dsgui
