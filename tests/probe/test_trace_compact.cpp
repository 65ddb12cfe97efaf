// The compact trace (the window's default observers): float16 scores with a float
// row offset, patterns rebuilt as their softmax, masks rebuilt from -inf scores,
// float16 or norm-only residuals. Everything it shows must agree with a full float32
// recording of the same generation within float16's precision, at a fraction of
// the memory.
#include <gtest/gtest.h>

#include "helpers.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "model/model.h"
#include "probe/trace.h"
#include "session/session.h"

using namespace ds;

namespace {

Config small(bool encdec) { return ds::test::small_config(encdec ? ds::test::Arch::EncDec : ds::test::Arch::GPT2); }

Trace run(std::shared_ptr<const Model> m, bool compact, bool encdec) {
  SessionOptions o;
  o.sampler.temperature = 0.9f;
  o.sampler.seed = 11;
  o.steps = 48;
  o.record = default_record_patterns(m->cfg);
  o.trace_options.compact = compact;
  Session s(m, nullptr, o);
  std::vector<int> src = {5, 6, 7, 8, 9, 0, 0};
  s.start({1, 4, 9, 12}, encdec ? src : std::vector<int>{});
  while (!s.done()) s.step();
  return s.trace();
}

}  // namespace

TEST(CompactTrace, AgreesWithTheFullRecordingWithinFloat16Precision) {
  for (bool encdec : {false, true}) {
    SCOPED_TRACE(encdec ? "encoder-decoder" : "decoder-only");
    Config c = small(encdec);
    // Large weights give large scores: the row offset must keep the softmax precise.
    auto m = std::make_shared<const Model>(c, Weights::random(c, 7, 0.4f));
    Trace full = run(m, false, encdec), comp = run(m, true, encdec);
    ASSERT_EQ(full.tokens(), comp.tokens());  // recording never changes the generation
    const int last = int(full.steps.size()) - 1;
    float max_score = 0;
    for (bool cross : {false, true}) {
      if (cross && !encdec) continue;
      for (int l = 0; l < c.n_layers; ++l)
        for (int h = 0; h < c.n_heads; ++h) {
          MatRM pf = full.attention(l, h, last, cross, false), pc = comp.attention(l, h, last, cross, false);
          MatRM sf = full.attention(l, h, last, cross, true), sc = comp.attention(l, h, last, cross, true);
          ASSERT_EQ(pf.rows(), pc.rows());
          ASSERT_EQ(pf.cols(), pc.cols());
          for (int r = 0; r < pf.rows(); ++r) {
            float rmax = -std::numeric_limits<float>::infinity();
            for (int j = 0; j < sf.cols(); ++j)
              if (std::isfinite(sf(r, j))) rmax = std::max(rmax, sf(r, j));
            double rowsum = 0;
            for (int j = 0; j < pf.cols(); ++j) {
              EXPECT_NEAR(pc(r, j), pf(r, j), 2e-3) << "pattern l" << l << " h" << h << " (" << r << "," << j << ")";
              rowsum += pc(r, j);
              if (std::isinf(sf(r, j))) {
                EXPECT_TRUE(std::isinf(sc(r, j)) && sc(r, j) < 0) << "masked cell lost";
              } else {
                max_score = std::max(max_score, std::abs(sf(r, j)));
                // Stored as float16 relative to the row's maximum: the rounding error is at
                // most 2^-11 of the distance to it (2^-10 allows for float32 rounding).
                EXPECT_NEAR(sc(r, j), sf(r, j), std::ldexp(std::abs(sf(r, j) - rmax), -10) + 1e-6);
              }
            }
            EXPECT_NEAR(rowsum, 1.0, 1e-3);
          }
        }
    }
    EXPECT_GT(max_score, 4.0f) << "the test needs scores away from zero";
    // Residual stream: resid_post in float16, the norms of every point as recorded.
    for (int s = 0; s <= last; ++s)
      for (int l = 0; l < c.n_layers; ++l)
        for (const char* pt : {"resid_pre", "resid_mid", "resid_post"}) {
          const std::string nm = "blocks." + std::to_string(l) + "." + pt;
          const Tensor& tf = full.steps[s].tensors.at(nm);
          const Tensor& tc = comp.steps[s].tensors.at(nm);
          std::vector<float> nf = tf.row_norms(), nc = tc.row_norms();
          ASSERT_EQ(nf.size(), nc.size());
          for (size_t i = 0; i < nf.size(); ++i) EXPECT_NEAR(nc[i], nf[i], 1e-3 * nf[i] + 1e-5) << nm;
          const bool lens_reads = std::string(pt) == "resid_post" || (l == 0 && std::string(pt) == "resid_pre");
          EXPECT_EQ(tc.has_values(), lens_reads) << nm;
          if (tc.has_values()) {
            for (int64_t i = 0; i < tf.size(); ++i)
              EXPECT_NEAR(tc.at(i), tf.data[i], 1e-3 * std::abs(tf.data[i]) + 1e-6);
          }
        }
    // The masks were folded into the scores.
    for (auto& st : comp.steps)
      for (auto& [k, t] : st.tensors) EXPECT_EQ(k.find(".mask"), std::string::npos) << k;
    auto tensor_bytes = [](const Trace& t) {
      size_t n = 0;
      for (auto& st : t.steps)
        for (auto& [k, v] : st.tensors) n += v.bytes();
      return n;
    };
    // Per step and layer: float16 scores instead of float32 scores, pattern and mask,
    // and 2 of 3 residual points as norms: well under a third.
    EXPECT_LT(tensor_bytes(comp) * 3, tensor_bytes(full))
        << "compact " << tensor_bytes(comp) << " B, full " << tensor_bytes(full) << " B";
    EXPECT_LT(comp.bytes(), full.bytes());
  }
}

TEST(CompactTrace, SurvivesJsonRoundTrip) {
  Config c = small(false);
  auto m = std::make_shared<const Model>(c, Weights::random(c, 3, 0.3f));
  Trace t = run(m, true, false);
  std::stringstream ss;
  t.write_json(ss);
  Trace back = Trace::read_json(ss);
  const int last = int(t.steps.size()) - 1;
  for (int l = 0; l < c.n_layers; ++l) {
    MatRM a = t.attention(l, 1, last), b = back.attention(l, 1, last);
    ASSERT_EQ(a.rows(), b.rows());
    EXPECT_LT((a - b).cwiseAbs().maxCoeff(), 1e-6f);
    std::vector<float> na = t.steps[last].tensors.at("blocks." + std::to_string(l) + ".resid_mid").row_norms();
    std::vector<float> nb = back.steps[last].tensors.at("blocks." + std::to_string(l) + ".resid_mid").row_norms();
    EXPECT_EQ(na, nb);
  }
}

// Trace::step_mask answers which cells a query may read from whatever the step kept:
// the engine's recorded mask (a full recording), the -inf cells of the scores (a
// compact one drops the mask), or the rule (a recording of the patterns alone). All
// three agree on every step, layer and kind, with a sliding window (Gemma 3's layer 0)
// and with padding in the source (the encoder-decoder); the encoder's mask leaves out
// exactly the keys its recorded pattern gives no weight.
TEST(CompactTrace, MasksAgreeFromTheRecordedMaskTheScoresAndTheRule) {
  std::vector<std::pair<std::string, Config>> cases = {{"gpt2", small(false)}, {"encdec", small(true)}};
  for (const auto& v : ds::test::variants())
    if (v.cfg.sliding_window > 0) cases.push_back({v.name, v.cfg});
  ASSERT_EQ(cases.size(), 3u) << "expected a variant with a sliding window";
  for (const auto& [name, c] : cases) {
    SCOPED_TRACE(name);
    const bool encdec = c.encoder_decoder;
    auto m = std::make_shared<const Model>(c, Weights::random(c, 9));
    auto record = [&](bool compact, std::vector<std::string> patterns) {
      SessionOptions o;
      o.sampler.temperature = 0;
      o.steps = 12;
      o.record = std::move(patterns);
      o.trace_options.compact = compact;
      Session s(m, nullptr, o);
      s.start({1, 4, 9, 12}, encdec ? std::vector<int>{5, 6, 7, 8, 9, 0, 0} : std::vector<int>{});
      while (!s.done()) s.step();
      return s.trace();
    };
    std::vector<std::string> with_masks = default_record_patterns(c);
    if (encdec) with_masks.push_back("**.cross_attn.mask");  // not among the window's defaults
    const Trace full = record(false, with_masks), comp = record(true, default_record_patterns(c));
    std::vector<std::string> patterns_only = {"**.attn.pattern"};
    if (encdec) patterns_only.push_back("**.cross_attn.pattern");
    const Trace rule = record(false, patterns_only);
    ASSERT_EQ(full.tokens(), rule.tokens());
    long masked = 0;
    for (bool cross : {false, true}) {
      if (cross && !encdec) continue;
      for (int l = 0; l < c.n_layers; ++l)
        for (int s = 0; s < int(full.steps.size()); ++s) {
          SCOPED_TRACE("layer " + std::to_string(l) + (cross ? " cross" : " self") + ", step " + std::to_string(s));
          const std::string base = "blocks." + std::to_string(l) + (cross ? ".cross_attn." : ".attn.");
          ASSERT_TRUE(full.steps[size_t(s)].tensors.count(base + "mask"));
          ASSERT_FALSE(comp.steps[size_t(s)].tensors.count(base + "mask"));
          ASSERT_FALSE(rule.steps[size_t(s)].tensors.count(base + "scores"));
          const std::vector<uint8_t> a = full.step_mask(l, s, cross);
          const Tensor& mk = full.steps[size_t(s)].tensors.at(base + "mask");
          ASSERT_EQ(a.size(), size_t(mk.size()));
          for (int64_t i = 0; i < mk.size(); ++i) ASSERT_EQ(a[size_t(i)], mk.at(i) != 0) << "cell " << i;
          EXPECT_EQ(comp.step_mask(l, s, cross), a);
          EXPECT_EQ(rule.step_mask(l, s, cross), a);
          for (uint8_t x : a) masked += x == 0;
        }
    }
    EXPECT_GT(masked, 0);
    if (encdec) {
      for (int l = 0; l < c.n_enc_layers; ++l) {
        const MatRM p = full.encoder_attention(l, 0);
        const std::vector<uint8_t> em = full.encoder_mask(int(p.rows()), int(p.cols()));
        for (int r = 0; r < p.rows(); ++r)
          for (int j = 0; j < p.cols(); ++j) EXPECT_EQ(em[size_t(r * p.cols() + j)], p(r, j) != 0.0f) << r << "," << j;
      }
    }
  }
  EXPECT_THROW(Trace().step_mask(0, 0), ds::Error);
}
