// Switching off a head of each attention (decoder self-attention, cross-attention, the
// encoder's self-attention) against a naive reference: the same model with that head's
// columns of the output projection set to zero, run with no intervention.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "helpers.h"
#include "model/model.h"
#include "model/weights.h"
#include "probe/interventions.h"

namespace {

using ds::test::Variant;

// The encoder-decoder variants of the engine's tests.
std::vector<Variant> enc_dec_variants() {
  std::vector<Variant> out;
  for (const Variant& v : ds::test::variants())
    if (v.cfg.encoder_decoder && v.cfg.n_enc_layers > 0) out.push_back(v);
  return out;
}

// Zeroes the columns of head h in an attention's output projection o ([d_model, H*dh]).
void zero_columns(ds::Attention& a, int h, int d_head) {
  ds::MatRM w = a.o.W;
  w.block(0, int64_t(h) * d_head, w.rows(), d_head).setZero();
  a.o.W = ds::WMat(w);
}

// The logits for `toks` after encoding `src`, with an intervention subscribed first.
ds::MatRM run(std::shared_ptr<const ds::Model> m, const std::vector<int>& src, const std::vector<int>& toks,
              int layer = -1, int head = -1, ds::HeadSite site = ds::HeadSite::Self) {
  ds::Engine e(std::move(m));
  if (layer >= 0) ds::zero_head(e.hooks(), layer, head, e.config().d_head, site);
  e.encode(src);
  return e.forward_full(toks);
}

double max_diff(const ds::MatRM& a, const ds::MatRM& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return INFINITY;
  return double((a - b).cwiseAbs().maxCoeff());
}

}  // namespace

TEST(HeadSites, HookNames) {
  EXPECT_EQ(ds::head_output_hook(3, ds::HeadSite::Self), "blocks.3.attn.z");
  EXPECT_EQ(ds::head_output_hook(0, ds::HeadSite::Cross), "blocks.0.cross_attn.z");
  EXPECT_EQ(ds::head_output_hook(1, ds::HeadSite::Encoder), "encoder.blocks.1.attn.z");
}

TEST(HeadSites, ZeroedHeadEqualsItsOutputColumnsZeroed) {
  const auto vs = enc_dec_variants();
  ASSERT_FALSE(vs.empty()) << "no encoder-decoder variant to test";
  for (const Variant& v : vs) {
    const ds::Config& cfg = v.cfg;
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> d(3, cfg.vocab_size - 1);  // clear of pad, bos and eos
    std::vector<int> src(9), toks(7);
    for (int& x : src) x = d(rng);
    for (int& x : toks) x = d(rng);
    const auto base = std::make_shared<const ds::Model>(cfg, ds::Weights::random(cfg, v.seed));
    const ds::MatRM orig = run(base, src, toks);
    for (ds::HeadSite site : {ds::HeadSite::Self, ds::HeadSite::Cross, ds::HeadSite::Encoder}) {
      const int L = site == ds::HeadSite::Encoder ? cfg.n_enc_layers : cfg.n_layers;
      for (int l : {0, L - 1})
        for (int h : {0, cfg.n_heads - 1}) {
          SCOPED_TRACE(v.name + " " + ds::head_output_hook(l, site) + " head " + std::to_string(h));
          ds::Weights w = ds::Weights::random(cfg, v.seed);
          ds::Attention& a = site == ds::HeadSite::Self    ? w.blocks[size_t(l)].attn
                             : site == ds::HeadSite::Cross ? w.blocks[size_t(l)].cross
                                                           : w.enc_blocks[size_t(l)].attn;
          zero_columns(a, h, cfg.d_head);
          const auto cut = std::make_shared<const ds::Model>(cfg, std::move(w));
          const ds::MatRM want = run(cut, src, toks);
          const ds::MatRM got = run(base, src, toks, l, h, site);
          EXPECT_LE(max_diff(got, want), 1e-4 * std::max(1.0, double(want.cwiseAbs().maxCoeff())));
          EXPECT_GT(max_diff(got, orig), 1e-6) << "switching the head off changed nothing";
        }
    }
  }
}
