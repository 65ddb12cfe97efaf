#include "probe/lens.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "util/error.h"

namespace ds {

std::vector<LensSource> lens_sources(const Config& cfg) {
  std::vector<LensSource> out;
  if (cfg.n_layers < 1) return out;
  out.push_back({0, Point::ResidPre, Hooks::name(Stack::Decoder, 0, Point::ResidPre), "embedding"});
  for (int l = 0; l < cfg.n_layers; ++l)
    out.push_back(
        {l, Point::ResidPost, Hooks::name(Stack::Decoder, l, Point::ResidPost), "after layer " + std::to_string(l)});
  return out;
}

std::string lens_ids_name(const std::string& hook) { return hook + ".lens.ids"; }
std::string lens_probs_name(const std::string& hook) { return hook + ".lens.probs"; }

void lens_norm(const Model& m, const float* x, int rows, float* y) {
  const Config& c = m.cfg;
  const int d = c.d_model;
  const Norm& n = m.w.ln_final;
  const bool bias = n.b.size() == d;
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + size_t(r) * d;
    float* yr = y + size_t(r) * d;
    if (!c.final_norm) {
      if (yr != xr) std::copy_n(xr, d, yr);
      continue;
    }
    if (c.norm == NormKind::RMSNorm) {
      double ss = 0;
      for (int j = 0; j < d; ++j) ss += double(xr[j]) * xr[j];
      const double inv = 1.0 / std::sqrt(ss / d + double(c.norm_eps));
      for (int j = 0; j < d; ++j) yr[j] = n.g[j] * float(xr[j] * inv);
    } else {
      double mean = 0, var = 0;
      for (int j = 0; j < d; ++j) mean += xr[j];
      mean /= d;
      for (int j = 0; j < d; ++j) var += (xr[j] - mean) * (xr[j] - mean);
      var /= d;
      const double inv = 1.0 / std::sqrt(var + double(c.norm_eps));
      for (int j = 0; j < d; ++j) yr[j] = float((xr[j] - mean) * inv) * n.g[j] + (bias ? n.b[j] : 0.0f);
    }
  }
}

std::vector<float> lens_logits(const Model& m, const float* x) {
  const int d = m.cfg.d_model;
  std::vector<float> y(static_cast<size_t>(d));
  lens_norm(m, x, 1, y.data());
  const MatView W = m.w.head_view();
  std::vector<float> out(static_cast<size_t>(W.rows));
  W.gemv(y.data(), out.data(), 0, W.rows);
  return out;
}

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kChunk = 256;  // vocabulary rows of the head widened at a time
constexpr int kRowBlock = 64;    // residual rows multiplied with them at a time
constexpr int kGemvRows = 2;     // up to this many rows, one matrix-vector product a row

// The running softmax normaliser and top k of some rows over part of the vocabulary,
// scanned in ascending id order.
struct Partial {
  int rows = 0, k = 0;
  std::vector<float> max;   // [rows] largest logit so far
  std::vector<double> sum;  // [rows] sum of exp(logit - max)
  std::vector<float> val;   // [rows, k] the best logits, descending
  std::vector<int> id;      // [rows, k]
  std::vector<int> n;       // [rows] entries of val filled
  Partial(int r, int kk)
      : rows(r),
        k(kk),
        max(size_t(r), kNegInf),
        sum(size_t(r), 0.0),
        val(size_t(r) * kk, kNegInf),
        id(size_t(r) * kk, -1),
        n(size_t(r), 0) {}
  void add(int r, const float* l, int cnt, int id0);
  void merge(const Partial& b);  // b scanned ids above this one's
};

// Logits l[0, cnt) of ids id0, id0 + 1, ... for row r. An id enters the top k only when
// strictly above its last entry, and goes after the entries equal to it: ties keep
// the lower id first.
void Partial::add(int r, const float* l, int cnt, int id0) {
  float cm = kNegInf;
  for (int j = 0; j < cnt; ++j) cm = std::max(cm, l[j]);
  if (cm > max[r]) {
    sum[r] = max[r] == kNegInf ? 0.0 : sum[r] * std::exp(double(max[r]) - double(cm));
    max[r] = cm;
  }
  const float mx = max[r];
  if (mx != kNegInf) sum[r] += (Eigen::Map<const Eigen::ArrayXf>(l, cnt) - mx).exp().sum();  // vectorised exp
  float* v = val.data() + size_t(r) * k;
  int* ids = id.data() + size_t(r) * k;
  int& nr = n[r];
  for (int j = 0; j < cnt; ++j) {
    const float x = l[j];
    if (nr == k && !(x > v[k - 1])) continue;
    int p = nr < k ? nr++ : k - 1;
    for (; p > 0 && x > v[p - 1]; --p) {
      v[p] = v[p - 1];
      ids[p] = ids[p - 1];
    }
    v[p] = x;
    ids[p] = id0 + j;
  }
}

void Partial::merge(const Partial& b) {
  std::vector<float> mv(static_cast<size_t>(k));
  std::vector<int> mi(static_cast<size_t>(k));
  for (int r = 0; r < rows; ++r) {
    const float m = std::max(max[r], b.max[r]);
    double s = 0;
    if (max[r] != kNegInf) s += sum[r] * std::exp(double(max[r]) - double(m));
    if (b.max[r] != kNegInf) s += b.sum[r] * std::exp(double(b.max[r]) - double(m));
    max[r] = m;
    sum[r] = s;
    const float* av = val.data() + size_t(r) * k;
    const float* bv = b.val.data() + size_t(r) * k;
    const int* ai = id.data() + size_t(r) * k;
    const int* bi = b.id.data() + size_t(r) * k;
    int i = 0, j = 0, o = 0;
    for (; o < k && (i < n[r] || j < b.n[r]); ++o) {
      const bool take_a = j >= b.n[r] || (i < n[r] && !(bv[j] > av[i]));  // equal: a's lower id first
      mv[size_t(o)] = take_a ? av[i] : bv[j];
      mi[size_t(o)] = take_a ? ai[i++] : bi[j++];
    }
    std::copy_n(mv.data(), o, val.data() + size_t(r) * k);
    std::copy_n(mi.data(), o, id.data() + size_t(r) * k);
    n[r] = o;
  }
}

// Vocabulary rows [v0, v1) of the head against normed rows y [rows, d]. A row or two
// take the matrix-vector product, which reads the head (in any storage) at memory
// speed; more rows share each slice of the head widened to float32 rows (B), in
// one matrix product per block of rows (L).
void scan(const MatView& W, const float* y, int rows, int d, int64_t v0, int64_t v1, float* B, float* L, Partial& p) {
  if (rows <= kGemvRows) {
    for (int r = 0; r < rows; ++r)
      for (int64_t c0 = v0; c0 < v1; c0 += kChunk * kRowBlock) {
        const int n = int(std::min(kChunk * kRowBlock, v1 - c0));
        W.gemv(y + size_t(r) * d, L, c0, c0 + n);
        p.add(r, L, n, int(c0));
      }
    return;
  }
  if (!is_quantized(W.type)) {
    // Float storages: each group of 8 head rows, read once, against every residual row
    // while it is in the cache (no widened copy of the head: it is in tiles).
    for (int64_t c0 = v0; c0 < v1; c0 += kChunk) {
      const int n = int(std::min(kChunk, v1 - c0));
      for (int r0 = 0; r0 < rows; r0 += kRowBlock) {
        const int nr = std::min(kRowBlock, rows - r0);
        W.gemv_many(y + size_t(r0) * d, nr, L, n, c0, c0 + n);
        for (int i = 0; i < nr; ++i) p.add(r0 + i, L + size_t(i) * n, n, int(c0));
      }
    }
    return;
  }
  for (int64_t c0 = v0; c0 < v1; c0 += kChunk) {
    const int n = int(std::min(kChunk, v1 - c0));
    W.rows_f32(c0, c0 + n, B);
    const Eigen::Map<const MatRM> Bm(B, n, d);
    for (int r0 = 0; r0 < rows; r0 += kRowBlock) {
      const int nr = std::min(kRowBlock, rows - r0);
      Eigen::Map<MatRM> Lm(L, nr, n);
      Lm.noalias() = Eigen::Map<const MatRM>(y + size_t(r0) * d, nr, d) * Bm.transpose();
      for (int i = 0; i < nr; ++i) p.add(r0 + i, L + size_t(i) * n, n, int(c0));
    }
  }
}

// The lens of rows already through the final norm.
LensTop top_of_normed(const Model& m, const float* y, int rows, int k, int threads) {
  if (k < 1) throw Error("the logit lens needs a top k of at least 1, not " + std::to_string(k));
  const MatView W = m.w.head_view();
  const int d = m.cfg.d_model;
  const int64_t V = W.rows;
  LensTop out;
  out.rows = rows;
  out.k = int(std::min<int64_t>(k, V));
  if (rows <= 0 || V == 0) return out;
  // Each thread scans a contiguous range of whole chunks.
  const int64_t chunks = (V + kChunk - 1) / kChunk;
  const int nt = int(std::clamp<int64_t>(threads, 1, chunks));
  const int64_t per = (chunks + nt - 1) / nt * kChunk;
  std::vector<Partial> parts(size_t(nt), Partial(rows, out.k));
  // B: the widened head slices, only quantized heads need them (scan).
  std::vector<float> B(is_quantized(W.type) ? size_t(nt) * kChunk * d : 0), L(size_t(nt) * kRowBlock * kChunk);
  auto run = [&](int t) {
    scan(W, y, rows, d, std::min(V, t * per), std::min(V, (t + 1) * per),
         B.empty() ? nullptr : B.data() + size_t(t) * kChunk * d, L.data() + size_t(t) * kRowBlock * kChunk,
         parts[size_t(t)]);
  };
  if (nt == 1) {
    run(0);
  } else {
#pragma omp parallel for num_threads(nt) schedule(static, 1)
    for (int t = 0; t < nt; ++t) run(t);
  }
  for (int t = 1; t < nt; ++t) parts[0].merge(parts[size_t(t)]);
  const Partial& p = parts[0];
  out.ids.assign(size_t(rows) * out.k, -1);
  out.probs.assign(size_t(rows) * out.k, 0.0f);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < p.n[r]; ++j) {
      const size_t i = size_t(r) * out.k + j;
      out.ids[i] = p.id[i];
      out.probs[i] = p.sum[r] > 0 ? float(std::exp(double(p.val[i]) - double(p.max[r])) / p.sum[r]) : 0.0f;
    }
  return out;
}

std::string text_of(const TraceStep& s, int id) {
  auto it = s.token_text.find(id);
  return it != s.token_text.end() ? it->second : "#" + std::to_string(id);
}

const TraceStep& step_at(const Trace& t, int pos) {
  const int s = t.step_of(pos);
  if (s < 0) {
    const int n = t.steps.empty() ? 0 : t.positions(int(t.steps.size()) - 1);
    throw Error("position " + std::to_string(pos) + " is not in the trace: it has " + std::to_string(n) + " positions" +
                (n > 0 ? " (0 to " + std::to_string(n - 1) + ")" : std::string()));
  }
  return t.steps[size_t(s)];
}

}  // namespace

LensTop lens_top_k(const Model& m, const float* x, int rows, int k, int threads) {
  std::vector<float> y(size_t(std::max(rows, 0)) * m.cfg.d_model);
  lens_norm(m, x, rows, y.data());
  return top_of_normed(m, y.data(), rows, k, threads);
}

std::vector<LensRow> recorded_lens(const Trace& t, int pos) {
  const TraceStep& st = step_at(t, pos);
  const int r = pos - st.pos0;
  std::vector<LensRow> out;
  for (auto& src : lens_sources(t.config)) {
    auto a = st.tensors.find(lens_ids_name(src.hook)), b = st.tensors.find(lens_probs_name(src.hook));
    if (a == st.tensors.end() || b == st.tensors.end()) continue;
    const Tensor &ti = a->second, &tp = b->second;
    if (ti.shape.size() != 2 || tp.shape != ti.shape || r >= ti.shape[0] || !ti.has_values() || !tp.has_values())
      throw Error("trace tensor " + a->first + " or " + b->first + " has the wrong shape");
    const int k = ti.shape[1];
    LensRow row;
    row.hook = src.hook;
    row.label = src.label;
    std::vector<float> ids(static_cast<size_t>(k));
    row.probs.resize(size_t(k));
    ti.values(int64_t(r) * k, k, ids.data());
    tp.values(int64_t(r) * k, k, row.probs.data());
    for (float f : ids) {
      if (!(f >= -1 && f < float(t.config.vocab_size)) || f != std::floor(f))
        throw Error("trace tensor " + a->first + " holds a value that is not a token id");
      if (f < 0) break;  // fewer tokens than k (not written by the recorder)
      row.ids.push_back(int(f));
      row.texts.push_back(text_of(st, int(f)));
    }
    row.probs.resize(row.ids.size());
    out.push_back(std::move(row));
  }
  return out;
}

std::vector<LensRow> compute_lens(const Model& m, const Trace& t, int pos, int k, int threads) {
  const Config &mc = m.cfg, &tc = t.config;
  if (mc.d_model != tc.d_model || mc.n_layers != tc.n_layers || mc.vocab_size != tc.vocab_size)
    throw Error("the model does not fit the trace: the model has d_model " + std::to_string(mc.d_model) + ", " +
                std::to_string(mc.n_layers) + " layers and " + std::to_string(mc.vocab_size) +
                " tokens, the trace's model d_model " + std::to_string(tc.d_model) + ", " +
                std::to_string(tc.n_layers) + " layers and " + std::to_string(tc.vocab_size) + " tokens");
  const TraceStep& st = step_at(t, pos);
  const int r = pos - st.pos0, d = mc.d_model;
  std::vector<LensSource> used;
  std::vector<float> rows;
  for (auto& src : lens_sources(tc)) {
    auto it = st.tensors.find(src.hook);
    if (it == st.tensors.end() || !it->second.has_values()) continue;  // compact traces keep some as norms
    const Tensor& x = it->second;
    if (x.shape.size() != 2 || x.shape[1] != d || r >= x.shape[0])
      throw Error("trace tensor " + src.hook + " has the wrong shape");
    rows.resize(rows.size() + size_t(d));
    x.values(int64_t(r) * d, d, rows.data() + rows.size() - d);
    used.push_back(src);
  }
  const LensTop top = lens_top_k(m, rows.data(), int(used.size()), k, threads);
  std::vector<LensRow> out;
  for (size_t i = 0; i < used.size(); ++i) {
    LensRow row;
    row.hook = used[i].hook;
    row.label = used[i].label;
    for (int j = 0; j < top.k; ++j) {
      const int id = top.ids[i * top.k + j];
      if (id < 0) break;
      row.ids.push_back(id);
      row.probs.push_back(top.probs[i * top.k + j]);
      row.texts.push_back(text_of(st, id));
    }
    out.push_back(std::move(row));
  }
  return out;
}

std::vector<int> lens_token_ids(const TraceStep& s) {
  std::set<int> ids;
  for (auto& [name, t] : s.tensors) {
    if (name.size() < 9 || name.compare(name.size() - 9, 9, ".lens.ids") != 0 || !t.has_values()) continue;
    for (int64_t i = 0; i < t.size(); ++i) {
      const float f = t.at(i);
      if (f >= 0 && f < float(1 << 24)) ids.insert(int(f));
    }
  }
  return {ids.begin(), ids.end()};
}

// ---- recorder

LensRecorder::LensRecorder(Hooks& hooks, std::shared_ptr<const Model> model, Trace& trace, int k, bool compact,
                           int threads)
    : hooks_(hooks), model_(std::move(model)), trace_(trace), threads_(std::max(1, threads)), compact_(compact) {
  if (!model_) throw Error("recording the logit lens needs the model's weights");
  if (k < 1) throw Error("the logit lens needs a top k of at least 1, not " + std::to_string(k));
  k_ = std::min(k, model_->cfg.vocab_size);
  sources_ = lens_sources(model_->cfg);
  for (size_t i = 0; i < sources_.size(); ++i)
    handles_.push_back(hooks_.subscribe(sources_[i].hook, [this, i](HookEvent& ev) { on_row(ev, i); }));
}

LensRecorder::~LensRecorder() {
  for (int h : handles_) hooks_.unsubscribe(h);
}

void LensRecorder::on_row(const HookEvent& ev, size_t source) {
  if (paused_) return;
  const int d = model_->cfg.d_model;
  if (ev.t.rank != 2 || ev.t.shape[1] != d) return;
  const int drop = std::clamp(first_row_ - ev.pos0, 0, ev.t.shape[0]);  // rows before first_row_
  const int T = ev.t.shape[0] - drop;
  if (T == 0) return;
  const float* x = ev.t.data + size_t(drop) * d;
  if (source == 0) {
    T_ = T;
    rows_.resize(sources_.size() * size_t(T) * d);
  } else if (T != T_) {
    return;  // a forward call whose embedding this recorder did not see
  }
  std::copy_n(x, size_t(T) * d, rows_.data() + source * size_t(T) * d);
  if (source + 1 == sources_.size()) {
    store(T);
    T_ = 0;
  }
}

void LensRecorder::store(int T) {
  const int S = int(sources_.size()), R = S * T;
  lens_norm(*model_, rows_.data(), R, rows_.data());
  const LensTop top = top_of_normed(*model_, rows_.data(), R, k_, threads_);
  if (rows_.size() > (size_t(1) << 22)) std::vector<float>().swap(rows_);  // a long prompt's rows: let them go
  if (trace_.steps.empty()) trace_.steps.emplace_back();
  std::map<std::string, Tensor>& dst = trace_.steps.back().tensors;
  const int k = top.k;
  for (int s = 0; s < S; ++s) {
    const size_t off = size_t(s) * T * k, n = size_t(T) * k;
    Tensor& ids = dst[lens_ids_name(sources_[size_t(s)].hook)];
    ids.shape = {T, k};
    ids.storage = Storage::F32;
    ids.half.clear();
    ids.data.assign(top.ids.begin() + off, top.ids.begin() + off + n);
    Tensor& probs = dst[lens_probs_name(sources_[size_t(s)].hook)];
    probs.shape = {T, k};
    if (compact_) {
      probs.storage = Storage::F16;
      probs.data.clear();
      probs.half.resize(n);
      narrow(top.probs.data() + off, int64_t(n), Precision::F16, probs.half.data());
    } else {
      probs.storage = Storage::F32;
      probs.half.clear();
      probs.data.assign(top.probs.begin() + off, top.probs.begin() + off + n);
    }
  }
}

}  // namespace ds
