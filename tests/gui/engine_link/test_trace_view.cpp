// Unit tests of the window's trace helpers (no window): the full attention matrix and
// its mask rebuilt from per-step rows (whole, and grown a step at a time), token lists,
// visible whitespace.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "engine_link/models.h"
#include "engine_link/trace_view.h"
#include "engine_link/worker.h"
#include "session/session.h"
#include "text/hf_tokenizer.h"

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

ds::Trace run(bool encdec, const std::vector<int>& src, int steps, bool compact = false) {
  auto m = tiny_model(encdec);
  ds::SessionOptions o;
  o.record = dsgui::record_patterns(m->cfg);
  o.trace_options.compact = compact;
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

// The reference: ds::Trace::attention as a full matrix (the mean of the heads summed
// in head order, then divided), masked scores made 0 as the window draws them.
std::vector<float> reference(const ds::Trace& t, int layer, int head, int step, bool cross, bool scores) {
  ds::MatRM a;
  if (head >= 0) {
    a = t.attention(layer, head, step, cross, scores);
  } else {
    a = t.attention(layer, 0, step, cross, scores);
    for (int h = 1; h < t.config.n_heads; ++h) a += t.attention(layer, h, step, cross, scores);
    a /= float(t.config.n_heads);
  }
  std::vector<float> v(a.data(), a.data() + a.size());
  if (scores)
    for (float& x : v)
      if (!std::isfinite(x)) x = 0;
  return v;
}

// Every matrix the window draws equals the core's own, for full and compact traces;
// and growing it a step at a time (what a view does while the engine runs) gives the
// very same cells, mask and colour range as building it whole.
TEST(TraceView, MatricesGrownStepByStepEqualTheCoreAndTheWhole) {
  for (bool compact : {false, true})
    for (bool encdec : {false, true}) {
      ds::Trace t = run(encdec, encdec ? std::vector<int>{'a', 'b', 0} : std::vector<int>{}, 5, compact);
      for (bool cross : encdec ? std::vector<bool>{false, true} : std::vector<bool>{false})
        for (int layer : {0, 1})
          for (int head : {0, 1, -1})
            for (bool scores : {false, true}) {
              if (cross && scores) continue;  // cross-attention is shown as weights
              dsgui::Matrix grown;
              for (int step = 0; step < int(t.steps.size()); ++step) {
                SCOPED_TRACE(::testing::Message()
                             << "compact " << compact << " encdec " << encdec << " cross " << cross << " layer "
                             << layer << " head " << head << " scores " << scores << " step " << step);
                dsgui::Matrix whole = dsgui::attention_matrix(t, layer, head, step, cross, scores);
                ASSERT_TRUE(whole.ok()) << whole.error;
                EXPECT_EQ(whole.v, reference(t, layer, head, step, cross, scores));
                dsgui::Matrix rows = dsgui::attention_step_rows(t, layer, head, step, cross, scores);
                ASSERT_TRUE(rows.ok()) << rows.error;
                EXPECT_EQ(rows.rows, int(t.steps[step].input.size()));
                dsgui::append_rows(grown, rows, t.steps[step].pos0, scores);
                ASSERT_EQ(grown.rows, whole.rows);
                ASSERT_EQ(grown.cols, whole.cols);
                EXPECT_EQ(grown.v, whole.v);
                EXPECT_EQ(grown.mask, whole.mask);
                EXPECT_EQ(grown.vmin, whole.vmin);
                EXPECT_EQ(grown.vmax, whole.vmax);
                // The colour range spans the allowed cells (weights from 0).
                float lo = 1e30f, hi = -1e30f;
                for (int r = 0; r < whole.rows; ++r)
                  for (int c = 0; c < whole.cols; ++c)
                    if (whole.allowed(r, c)) lo = std::min(lo, whole.at(r, c)), hi = std::max(hi, whole.at(r, c));
                EXPECT_EQ(whole.vmax, hi);
                EXPECT_EQ(whole.vmin, scores ? lo : 0.0f);
              }
            }
    }
}

TEST(TraceView, AnEarlierStepsMatrixIsACropOfALaterOne) {
  for (bool encdec : {false, true}) {
    ds::Trace t = run(encdec, encdec ? std::vector<int>{'a', 'b', 0} : std::vector<int>{}, 6);
    const int last = int(t.steps.size()) - 1;
    for (bool cross : encdec ? std::vector<bool>{false, true} : std::vector<bool>{false})
      for (bool scores : {false, true}) {
        if (cross && scores) continue;
        const dsgui::Matrix later = dsgui::attention_matrix(t, 1, 0, last, cross, scores);
        for (int step = 0; step < last; ++step) {
          SCOPED_TRACE(::testing::Message() << "encdec " << encdec << " cross " << cross << " step " << step);
          const dsgui::Matrix want = dsgui::attention_matrix(t, 1, 0, step, cross, scores);
          const dsgui::Matrix got = dsgui::crop(later, want.rows, want.cols, scores);
          ASSERT_EQ(got.rows, want.rows);
          ASSERT_EQ(got.cols, want.cols);
          EXPECT_EQ(got.v, want.v);
          EXPECT_EQ(got.mask, want.mask);
          EXPECT_EQ(got.lo, want.lo);
          EXPECT_EQ(got.hi, want.hi);
          EXPECT_EQ(got.vmin, want.vmin);
          EXPECT_EQ(got.vmax, want.vmax);
        }
      }
  }
}

TEST(TraceView, StepRowsSayWhatIsMissing) {
  ds::Trace t = run(false, {}, 2);
  EXPECT_FALSE(dsgui::attention_step_rows(t, 0, 0, 5, false, false).ok());
  EXPECT_FALSE(dsgui::attention_step_rows(t, 0, 0, 0, true, false).ok());   // no cross-attention here
  EXPECT_FALSE(dsgui::attention_step_rows(t, 0, 7, 0, false, false).ok());  // no head 7
  t.steps[1].tensors.clear();
  dsgui::Matrix m = dsgui::attention_step_rows(t, 0, 0, 1, false, false);
  EXPECT_FALSE(m.ok());
  EXPECT_NE(m.error.find("did not record"), std::string::npos) << m.error;
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
  // SentencePiece's space marker U+2581, as GGUF vocabularies spell their pieces.
  EXPECT_EQ(dsgui::visible("\xE2\x96\x81"
                           "Once"),
            "_Once");
  dsgui::set_unicode_font(true);
  EXPECT_EQ(dsgui::visible("\xE2\x96\x81"
                           "a"),
            "\xE2\x90\xA3"
            "a");
  EXPECT_EQ(dsgui::visible(" a"),
            "\xE2\x90\xA3"
            "a");
  EXPECT_EQ(dsgui::shorten("abcdef", 3), "abc\xE2\x80\xA6");
}

// A byte-level vocabulary spells each byte as a character of GPT-2's byte alphabet, so
// "é" (bytes C3 A9) is the entry "Ã©" (U+00C3 U+00A9): the window shows the text.
// Entries that are plain text stay as they are, and so do byte-level entries holding
// part of a character.
TEST(TraceView, VisibleSpellsByteLevelEntriesAsTheirText) {
  dsgui::set_unicode_font(false);
  EXPECT_EQ(dsgui::visible("\xC3\x83\xC2\xA9"), "\xC3\xA9");  // "Ã©" -> "é"
  EXPECT_EQ(dsgui::visible("\xC4\xA0"
                           "caf\xC3\x83\xC2\xA9"),
            "_caf\xC3\xA9");                          // "ĠcafÃ©" -> "_café"
  EXPECT_EQ(dsgui::visible("\xC4\x89"), "\\t");       // "ĉ", the tab byte
  EXPECT_EQ(dsgui::visible("\xC3\x83"), "\xC3\x83");  // "Ã": half of a character
  EXPECT_EQ(dsgui::visible("\xC3\xA9"), "\xC3\xA9");  // a SentencePiece "é"
  EXPECT_EQ(dsgui::visible("\xC3\xBC"
                           "ber"),
            "\xC3\xBC"
            "ber");                                 // "über", plain text
  EXPECT_EQ(dsgui::visible("[PAD 1]"), "[PAD_1]");  // outside the alphabet

  // A real byte-level vocabulary (Llama 3's): the pieces of accented, Greek and
  // Cyrillic words, each piece whole characters, read as the words. (A character split
  // between two pieces, as " ñ" is, stays in the byte alphabet in both.)
  const auto dir = std::filesystem::path(DS_SOURCE_DIR) / ".." / "shared" / "fixtures" / "hf-tokenizers" / "llama3";
  if (!std::filesystem::exists(dir / "tokenizer.json")) GTEST_SKIP() << "../shared/fixtures/hf-tokenizers is absent";
  const ds::HfTokenizerInfo info = ds::load_hf_tokenizer(dir.string());
  const std::string text =
      "caf\xC3\xA9 men\xC3\xBA stra\xC3\x9F"
      "e \xCE\xBB\xCF\x8C\xCE\xB3\xCE\xBF\xCF\x82 "
      "\xD0\xBC\xD0\xB8\xD1\x80";  // café menú straße λόγος мир
  std::string shown, want = text;
  std::replace(want.begin(), want.end(), ' ', '_');
  for (int id : info.tokenizer->encode(text, false)) shown += dsgui::visible(info.tokenizer->piece(id));
  EXPECT_EQ(shown, want);
}

}  // namespace

// The residual norms the window shows are there for every point and position in a
// compact trace too (most points keep only norms), and equal the full trace's
// vector norms. Encoder-decoder models have a fourth point, resid_mid_cross (kind 3);
// decoder-only ones do not.
TEST(TraceView, ResidualNormsSurviveTheCompactTrace) {
  int compared = 0;
  for (bool encdec : {false, true}) {
    const std::vector<int> src = encdec ? std::vector<int>{1, 5, 6, 7} : std::vector<int>{};
    ds::Trace full = run(encdec, src, 6, false), comp = run(encdec, src, 6, true);
    const int last = int(full.steps.size()) - 1;
    EXPECT_EQ(dsgui::resid_norm_map(full, last, 3).ok(), encdec);
    for (int l = 0; l < full.config.n_layers; ++l)
      for (int k = 0; k < (encdec ? 4 : 3); ++k)
        for (int pos = 0; pos < full.positions(last); ++pos) {
          SCOPED_TRACE("layer " + std::to_string(l) + " kind " + std::to_string(k) + " pos " + std::to_string(pos));
          std::vector<float> x;
          ASSERT_TRUE(dsgui::resid_vector(full, last, l, k, pos, x));
          double ss = 0;
          for (float f : x) ss += double(f) * f;
          float n = 0;
          ASSERT_TRUE(dsgui::resid_norm(comp, last, l, k, pos, n));
          EXPECT_NEAR(n, std::sqrt(ss), 1e-3 * std::sqrt(ss) + 1e-5);
          ++compared;
        }
  }
  EXPECT_GT(compared, 0);
}

// The residual map grown a step at a time, scrubbed back and forward, equals the map
// read from the whole trace at every step, for every kind; with and without the KV cache
// (where every step writes every position again) and for a trace replaced by another.
TEST(TraceView, GrowingNormsEqualTheMapReadWhole) {
  auto same = [](const dsgui::Matrix& a, const dsgui::Matrix& b) {
    ASSERT_EQ(a.error, b.error);
    if (!b.error.empty()) return;  // nothing to draw: the message is what the view shows
    ASSERT_EQ(a.rows, b.rows);
    ASSERT_EQ(a.cols, b.cols);
    ASSERT_EQ(a.v, b.v);
    ASSERT_EQ(a.mask, b.mask);
    ASSERT_EQ(a.vmin, b.vmin);
    ASSERT_EQ(a.vmax, b.vmax);
  };
  for (bool compact : {false, true})
    for (bool encdec : {false, true}) {
      const ds::Trace t = run(encdec, encdec ? std::vector<int>{5, 6, 7} : std::vector<int>{}, 8, compact);
      const int n = int(t.steps.size());
      for (int kind = 0; kind < dsgui::kResidKinds; ++kind) {
        dsgui::GrowingNorms g;
        // forward one step at a time, back to the start, forward in jumps
        std::vector<int> path;
        for (int s = 0; s < n; ++s) path.push_back(s);
        for (int s = n - 1; s >= 0; --s) path.push_back(s);
        for (int s = 0; s < n; s += 3) path.push_back(s);
        path.push_back(n - 1);
        for (int s : path) {
          SCOPED_TRACE("compact " + std::to_string(compact) + " encdec " + std::to_string(encdec) + " kind " +
                       std::to_string(kind) + " step " + std::to_string(s));
          same(g.as_of(t, 1, s, kind), dsgui::resid_norm_map(t, s, kind));
        }
        // another trace under a new epoch: nothing of the first is kept
        const ds::Trace u = run(encdec, encdec ? std::vector<int>{9, 8} : std::vector<int>{}, 4, compact);
        for (int s = 0; s < int(u.steps.size()); ++s) same(g.as_of(u, 2, s, kind), dsgui::resid_norm_map(u, s, kind));
      }
    }
  // Without the KV cache each step writes every position again.
  auto m = tiny_model(false);
  ds::SessionOptions o;
  o.record = dsgui::record_patterns(m->cfg);
  o.kv_cache = false;
  ds::Session s(m, dsgui::demo_tokenizer(128), o);
  s.start({1, 'h', 'i'});
  for (int i = 0; i < 6; ++i) s.step();
  const ds::Trace& t = s.trace();
  ASSERT_GT(t.steps.size(), 3u);
  dsgui::GrowingNorms g;
  for (int step : {0, 1, 2, 5, 3, 6, 6})
    if (step < int(t.steps.size())) same(g.as_of(t, 1, step, 2), dsgui::resid_norm_map(t, step, 2));
}
