// Unit tests of the window's trace helpers (no window): the full attention matrix and
// its mask rebuilt from per-step rows, token lists, visible whitespace.
#include <gtest/gtest.h>

#include <memory>

#include "models.h"
#include "session/session.h"
#include "trace_view.h"
#include "worker.h"

namespace {

std::shared_ptr<const ds::Model> tiny_model(bool encdec) {
  ds::Config c;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.d_head = 8;
  c.d_ff = 32;
  c.vocab_size = 128;
  c.max_seq = 32;
  c.bos_id = 1;
  if (encdec) {
    c.encoder_decoder = true;
    c.n_enc_layers = 1;
    c.max_src = 32;
    c.pad_id = 0;
  }
  return std::make_shared<const ds::Model>(c, ds::Weights::random(c, 5, 0.5f));
}

ds::Trace run(bool encdec, const std::vector<int>& src, int steps) {
  auto m = tiny_model(encdec);
  ds::SessionOptions o;
  o.record = dsgui::record_patterns(m->cfg);
  o.sampler.temperature = 1.0f;
  o.sampler.seed = 3;
  ds::Session s(m, dsgui::demo_tokenizer(128), o);
  s.start({1, 'h', 'i'}, src);
  for (int i = 0; i < steps; ++i) s.step();
  return s.trace();
}

TEST(TraceView, CausalMaskIsExactlyAboveTheDiagonalAtEveryStep) {
  ds::Trace t = run(false, {}, 5);
  for (int step = 0; step < int(t.steps.size()); ++step)
    for (int head : {0, 1, -1})
      for (bool scores : {false, true}) {
        dsgui::Matrix m = dsgui::attention_matrix(t, 1, head, step, false, scores);
        ASSERT_TRUE(m.ok()) << m.error;
        ASSERT_EQ(m.rows, t.positions(step));
        ASSERT_EQ(m.cols, m.rows);
        for (int r = 0; r < m.rows; ++r) {
          float sum = 0;
          for (int c = 0; c < m.cols; ++c) {
            EXPECT_EQ(m.allowed(r, c), c <= r) << "step " << step << " cell " << r << "," << c;
            if (!scores) {
              if (c > r) {
                EXPECT_EQ(m.at(r, c), 0.0f);
              }
              sum += m.at(r, c);
            }
          }
          if (!scores) {
            EXPECT_NEAR(sum, 1.0f, 1e-4f);
          }
        }
      }
}

TEST(TraceView, CrossAttentionMasksOnlyPadding) {
  ds::Trace t = run(true, {'a', 'b', 'c'}, 3);
  dsgui::Matrix m = dsgui::attention_matrix(t, 0, 0, 2, true, false);
  ASSERT_TRUE(m.ok()) << m.error;
  EXPECT_EQ(m.cols, 3);
  for (uint8_t a : m.mask) EXPECT_EQ(a, 1);
  ds::Trace tp = run(true, {'a', 'b', 0, 0}, 2);
  dsgui::Matrix mp = dsgui::attention_matrix(tp, 1, -1, 1, true, false);
  ASSERT_TRUE(mp.ok()) << mp.error;
  for (int r = 0; r < mp.rows; ++r)
    for (int c = 0; c < mp.cols; ++c) EXPECT_EQ(mp.allowed(r, c), c < 2);
}

TEST(TraceView, TokensListPromptGeneratedAndTheLastDraw) {
  ds::Trace t = run(false, {}, 3);
  auto toks = dsgui::tokens_as_of(t, 2);
  ASSERT_EQ(toks.size(), 3u + 3u);  // prompt of 3, two fed draws, the last draw
  EXPECT_TRUE(toks[0].prompt);
  EXPECT_FALSE(toks[3].prompt);
  EXPECT_EQ(toks[3].drawn_at, 0);
  EXPECT_FALSE(toks.back().fed);
  EXPECT_EQ(toks.back().id, t.steps[2].sample->token);
  EXPECT_TRUE(dsgui::tokens_as_of(t, -1).empty());
  EXPECT_EQ(dsgui::step_sampling_at(t, 2), 0);
  EXPECT_EQ(dsgui::step_sampling_at(t, 1), -1);
}

TEST(TraceView, VisibleWhitespace) {
  dsgui::set_unicode_font(false);
  EXPECT_EQ(dsgui::visible(" the"), "_the");
  EXPECT_EQ(dsgui::visible("<0x0A>"), "\\n");
  EXPECT_EQ(dsgui::visible("\n<s>\n"), "<s>");
  dsgui::set_unicode_font(true);
  EXPECT_EQ(dsgui::visible(" a"),
            "\xE2\x90\xA3"
            "a");
  EXPECT_EQ(dsgui::shorten("abcdef", 3), "abc\xE2\x80\xA6");
}

}  // namespace
