#include "probe/patching.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "util/error.h"

namespace ds {

namespace {

struct SiteName {
  PatchSite site;
  const char* name;
  Point point;
};
constexpr SiteName kSites[] = {
    {PatchSite::ResidPre, "resid_pre", Point::ResidPre},
    {PatchSite::AttnOut, "attn_out", Point::AttnOut},
    {PatchSite::CrossAttnOut, "cross_attn_out", Point::CrossAttnOut},
    {PatchSite::MlpOut, "mlp_out", Point::MlpOut},
    {PatchSite::Head, "head", Point::AttnZ},
    {PatchSite::CrossHead, "cross_head", Point::CrossZ},
    {PatchSite::HeadPos, "head_pos", Point::AttnZ},
};

bool is_cross(PatchSite s) { return s == PatchSite::CrossAttnOut || s == PatchSite::CrossHead; }
bool per_head(PatchSite s) { return s == PatchSite::Head || s == PatchSite::CrossHead || s == PatchSite::HeadPos; }

std::string count(size_t n) { return std::to_string(n) + (n == 1 ? " token" : " tokens"); }

void check_ids(const Config& c, const std::vector<int>& ids, const std::string& what) {
  for (int id : ids)
    if (id < 0 || id >= c.vocab_size)
      throw Error(what + " holds token " + std::to_string(id) + ", outside the vocabulary of " +
                  std::to_string(c.vocab_size));
}

// One cell's intervention: copies the clean rows (and columns) over the corrupted ones.
void copy_cell(HookEvent& ev, const MatRM& clean, const PatchCell& cell, int d_head) {
  const int T = ev.t.shape[0];
  const int W = T > 0 ? int(ev.t.size() / T) : 0;
  if (ev.pos0 != 0 || T != clean.rows() || W != clean.cols()) throw Error("a patched tensor changed its shape");
  const int c0 = cell.head >= 0 ? cell.head * d_head : 0, cw = cell.head >= 0 ? d_head : W;
  for (int t = 0; t < T; ++t) {
    if (cell.pos >= 0 && t != cell.pos) continue;
    std::memcpy(ev.t.data + int64_t(t) * W + c0, clean.data() + int64_t(t) * W + c0, sizeof(float) * size_t(cw));
  }
}

}  // namespace

const char* patch_site_name(PatchSite s) {
  for (const SiteName& n : kSites)
    if (n.site == s) return n.name;
  return "?";
}

bool parse_patch_site(const std::string& name, PatchSite& s) {
  for (const SiteName& n : kSites)
    if (name == n.name) {
      s = n.site;
      return true;
    }
  return false;
}

Point patch_point(PatchSite s) {
  for (const SiteName& n : kSites)
    if (n.site == s) return n.point;
  return Point::ResidPre;
}

void check_patch_input(const Config& c, const PatchInput& in) {
  const std::string what = c.encoder_decoder ? "source" : "prompt";
  if (in.clean.empty() || in.corrupt.empty()) throw Error("the clean and the corrupted " + what + " must not be empty");
  if (in.clean.size() != in.corrupt.size())
    throw Error("the clean " + what + " is " + count(in.clean.size()) + " and the corrupted one " +
                count(in.corrupt.size()) +
                ": they must have the same length, because each site (a layer at a position) is copied from the "
                "clean run into the same position of the corrupted run");
  check_ids(c, in.clean, "the clean " + what);
  check_ids(c, in.corrupt, "the corrupted " + what);
  const std::vector<int>& dec = c.encoder_decoder ? in.prefix : in.clean;
  if (c.encoder_decoder) {
    if (in.prefix.empty()) throw Error("an encoder-decoder model needs the decoder's tokens (at least one)");
    check_ids(c, in.prefix, "the decoder's prefix");
    if (int(in.clean.size()) > c.max_src)
      throw Error("the source is " + count(in.clean.size()) + ", longer than the model's " + std::to_string(c.max_src));
  }
  if (int(dec.size()) > c.max_seq)
    throw Error("the input is " + count(dec.size()) + ", past the model's context of " + std::to_string(c.max_seq));
  for (int id : {in.answer, in.wrong})
    if (id < 0 || id >= c.vocab_size)
      throw Error("the answer and the wrong token must be tokens of the vocabulary (got " + std::to_string(id) + ")");
  if (in.answer == in.wrong)
    throw Error(
        "the answer and the wrong token are the same token: the metric logit(answer) - logit(wrong) would "
        "always be 0");
}

struct Patcher::Impl {
  Engine e;
  std::map<std::pair<int, int>, MatRM> clean;  // (point, layer) -> [T, width]
  explicit Impl(std::shared_ptr<const Model> m) : e(std::move(m)) {}

  std::vector<float> forward(const std::vector<int>& tokens) {
    const MatRM out = e.forward_full(tokens, false);
    return std::vector<float>(out.data(), out.data() + out.size());
  }
};

Patcher::Patcher(std::shared_ptr<const Model> m, PatchInput in, int threads) : in_(std::move(in)) {
  if (!m) throw Error("no model");
  check_patch_input(m->cfg, in_);
  impl_ = std::make_unique<Impl>(std::move(m));
  Engine& e = impl_->e;
  e.set_threads(std::max(1, threads));
  const Config& c = e.config();
  std::vector<std::string> pats = {"blocks.*.resid_pre", "blocks.*.attn_out", "blocks.*.mlp_out", "blocks.*.attn.z"};
  if (c.encoder_decoder) pats.insert(pats.end(), {"blocks.*.cross_attn_out", "blocks.*.cross_attn.z"});
  std::vector<int> handles;
  for (const std::string& p : pats)
    handles.push_back(e.hooks().subscribe(p, [this](HookEvent& ev) {
      if (ev.stack != Stack::Decoder) return;
      const int T = ev.t.shape[0], W = T > 0 ? int(ev.t.size() / T) : 0;
      impl_->clean[{int(ev.point), ev.layer}] = Eigen::Map<const MatRM>(ev.t.data, T, W);
    }));
  const std::vector<int>& dec = c.encoder_decoder ? in_.prefix : in_.clean;
  if (c.encoder_decoder) e.encode(in_.clean);
  clean_logits_ = impl_->forward(dec);
  for (int h : handles) e.hooks().unsubscribe(h);
  if (c.encoder_decoder) e.encode(in_.corrupt);
  corrupt_logits_ = impl_->forward(c.encoder_decoder ? in_.prefix : in_.corrupt);
}

Patcher::~Patcher() = default;

const Config& Patcher::config() const { return impl_->e.config(); }

int Patcher::positions() const { return int(config().encoder_decoder ? in_.prefix.size() : in_.clean.size()); }

const MatRM& Patcher::clean_value(Point p, int layer) const {
  auto it = impl_->clean.find({int(p), layer});
  if (it == impl_->clean.end())
    throw Error("this model has no hook point " + Hooks::name(Stack::Decoder, layer, p) + " to patch");
  return it->second;
}

double Patcher::metric(const std::vector<float>& logits) const {
  return double(logits.at(size_t(in_.answer))) - double(logits.at(size_t(in_.wrong)));
}

std::vector<float> Patcher::run(std::span<const PatchCell> cells) {
  Engine& e = impl_->e;
  const Config& c = e.config();
  std::vector<int> handles;
  auto drop = [&] {
    for (int h : handles) e.hooks().unsubscribe(h);
  };
  try {
    for (const PatchCell& cell : cells) {
      if (is_cross(cell.site) && !c.encoder_decoder) throw Error("a decoder-only model has no cross-attention");
      if (cell.layer < 0 || cell.layer >= c.n_layers || cell.pos >= positions() ||
          (per_head(cell.site) && cell.head >= c.n_heads))
        throw Error("this model has no such site to patch");
      const Point pt = patch_point(cell.site);
      const MatRM* clean = &clean_value(pt, cell.layer);
      PatchCell k = cell;
      if (!per_head(cell.site)) k.head = -1;
      const int dh = c.d_head;
      handles.push_back(e.hooks().subscribe(Hooks::name(Stack::Decoder, cell.layer, pt), [clean, k, dh](HookEvent& ev) {
        if (ev.stack == Stack::Decoder) copy_cell(ev, *clean, k, dh);
      }));
    }
    std::vector<float> out = impl_->forward(c.encoder_decoder ? in_.prefix : in_.corrupt);
    drop();
    return out;
  } catch (...) {
    drop();
    throw;
  }
}

double patch_normalise(double patched, double clean, double corrupt) {
  const double d = clean - corrupt;
  if (!(std::fabs(d) > 1e-6 * std::max(1.0, std::max(std::fabs(clean), std::fabs(corrupt)))))
    throw Error("the clean and the corrupted input give the same logit difference (" + std::to_string(clean) +
                "): there is nothing to restore; choose prompts, or an answer and a wrong token, that the model "
                "tells apart");
  return (patched - corrupt) / d;
}

PatchGrid patch_grid(Patcher& p, PatchSite site, int layer, const AblationProgress& progress) {
  const Config& c = p.config();
  if (is_cross(site) && !c.encoder_decoder)
    throw Error(std::string(patch_site_name(site)) + ": a decoder-only model has no cross-attention");
  PatchGrid g;
  g.site = site;
  g.clean = p.clean_metric();
  g.corrupt = p.corrupt_metric();
  patch_normalise(g.clean, g.clean, g.corrupt);  // throws when there is nothing to restore
  const int T = p.positions();
  if (site == PatchSite::HeadPos) {
    if (layer < 0 || layer >= c.n_layers)
      throw Error("head_pos needs a layer from 0 to " + std::to_string(c.n_layers - 1));
    g.layer = layer, g.rows = c.n_heads, g.cols = T;
  } else {
    g.rows = c.n_layers, g.cols = per_head(site) ? c.n_heads : T;
  }
  const int total = g.rows * g.cols;
  for (int r = 0; r < g.rows; ++r)
    for (int col = 0; col < g.cols; ++col) {
      PatchCell cell{site, r, col, -1};
      if (site == PatchSite::HeadPos) cell = {site, layer, col, r};
      if (site == PatchSite::Head || site == PatchSite::CrossHead) cell = {site, r, -1, col};
      const double m = p.metric(p.run(std::span<const PatchCell>(&cell, 1)));
      g.metric.push_back(m);
      g.value.push_back(patch_normalise(m, g.clean, g.corrupt));
      if (progress && !progress(int(g.metric.size()), total)) throw Cancelled();
    }
  return g;
}

}  // namespace ds
