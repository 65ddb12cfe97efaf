// The compact trace (the window's default observers): float16 scores with a float
// row offset, patterns rebuilt as their softmax, masks rebuilt from -inf scores,
// float16 or norm-only residuals. Everything it shows must agree with a full float32
// recording of the same generation within float16's precision, at a fraction of
// the memory.
#include <gtest/gtest.h>

#include "util.h"

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
