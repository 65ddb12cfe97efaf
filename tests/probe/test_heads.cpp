// The head detector (core/probe/heads.h): the detection patterns and the score equal a
// naive transcription of TransformerLens's head_detector.py written here; attention
// patterns written by the test score what the definition says; a head forced through
// a hook to attend like an induction head is found; the patterns the detector reads
// equal the reference forward pass's; `decoderscope-cli heads` agrees with the
// library; and the real llama2.c fixture gives scores in [0, 1].
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "helpers.h"
#include "io/loader.h"
#include "model/model.h"
#include "model/reference.h"
#include "probe/heads.h"
#include "util/error.h"

using namespace ds;

namespace {

using ds::test::Arch;
using Grid = std::vector<std::vector<double>>;  // [T][T]

// ---- TransformerLens's head_detector.py, transcribed step by step on plain arrays.

Grid zeros(size_t T) { return Grid(T, std::vector<double>(T, 0.0)); }

// torch.tril: keeps j <= i.
Grid tril(Grid g) {
  for (size_t i = 0; i < g.size(); ++i)
    for (size_t j = i + 1; j < g.size(); ++j) g[i][j] = 0;
  return g;
}

// detection_pattern[1:, :-1] = torch.eye(T - 1); tril.
Grid tl_previous(const std::vector<int>& t) {
  Grid d = zeros(t.size());
  for (size_t a = 0; a + 1 < t.size(); ++a)
    for (size_t b = 0; b + 1 < t.size(); ++b) d[a + 1][b] = a == b ? 1 : 0;
  return tril(d);
}

// token_pattern = tokens.repeat(T, 1); eq_mask = token_pattern == token_pattern.T;
// fill_diagonal(0); tril.
Grid tl_duplicate(const std::vector<int>& t) {
  const size_t T = t.size();
  Grid d = zeros(T);
  for (size_t i = 0; i < T; ++i)
    for (size_t j = 0; j < T; ++j) {
      const int tp = t[j], tpT = t[i];  // token_pattern[i][j], its transpose
      d[i][j] = tp == tpT ? 1 : 0;
    }
  for (size_t i = 0; i < T; ++i) d[i][i] = 0;
  return tril(d);
}

// torch.roll(duplicate, shifts=1, dims=1) (the last column wraps to the first); the
// first column replaced by zeros; tril.
Grid tl_induction(const std::vector<int>& t) {
  const Grid dup = tl_duplicate(t);
  const size_t T = t.size();
  Grid rolled = zeros(T);
  for (size_t i = 0; i < T; ++i)
    for (size_t j = 0; j < T; ++j) rolled[i][(j + 1) % T] = dup[i][j];
  for (size_t i = 0; i < T; ++i) rolled[i][0] = 0;
  return tril(rolled);
}

// compute_head_attention_similarity_score with error_measure "mul".
double tl_score(Grid a, const Grid& d, bool exclude_bos, bool exclude_current_token) {
  if (exclude_bos)
    for (auto& row : a) row[0] = 0;
  if (exclude_current_token)
    for (size_t i = 0; i < a.size(); ++i) a[i][i] = 0;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a.size(); ++j) {
      num += a[i][j] * d[i][j];
      den += a[i][j];
    }
  return num / den;
}

Grid grid(const MatRM& m) {
  Grid g(size_t(m.rows()), std::vector<double>(size_t(m.cols())));
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) g[size_t(i)][size_t(j)] = m(i, j);
  return g;
}

MatRM mat(const Grid& g) {
  MatRM m(Eigen::Index(g.size()), Eigen::Index(g.size()));
  for (size_t i = 0; i < g.size(); ++i)
    for (size_t j = 0; j < g.size(); ++j) m(Eigen::Index(i), Eigen::Index(j)) = float(g[i][j]);
  return m;
}

void expect_same(const MatRM& got, const Grid& want, const std::string& what) {
  ASSERT_EQ(size_t(got.rows()), want.size()) << what;
  ASSERT_EQ(got.rows(), got.cols()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t j = 0; j < want.size(); ++j)
      ASSERT_EQ(double(got(Eigen::Index(i), Eigen::Index(j))), want[i][j]) << what << " cell " << i << ", " << j;
}

// A random causal attention pattern: each row a softmax of random scores over j <= i.
Grid random_attention(size_t T, std::mt19937& g) {
  std::normal_distribution<double> n(0.0, 2.0);
  Grid a = zeros(T);
  for (size_t i = 0; i < T; ++i) {
    double z = 0;
    for (size_t j = 0; j <= i; ++j) z += a[i][j] = std::exp(n(g));
    for (size_t j = 0; j <= i; ++j) a[i][j] /= z;
  }
  return a;
}

std::vector<std::vector<int>> hand_sequences() {
  return {
      {1, 5, 7, 5, 5, 9, 7, 5},     // repeats near and far, two adjacent
      {3, 3, 3, 3},                 // one token throughout
      {1, 10, 11, 12, 10, 11, 12},  // BOS + r + r
      {4, 8},                       // no repeat
      {2, 6, 2, 6, 2, 6, 6, 2, 9},  // alternating, then a pair
  };
}

}  // namespace

// The three patterns equal the transcription of TransformerLens's functions, cell by
// cell, on hand-written sequences and random ones over a small vocabulary.
TEST(HeadDetection, PatternsEqualTransformerLens) {
  std::vector<std::vector<int>> seqs = hand_sequences();
  std::mt19937 g(7);
  for (int n : {1, 2, 5, 17, 40}) {
    std::uniform_int_distribution<int> id(0, 5);
    std::vector<int> s(static_cast<size_t>(n));
    for (int& v : s) v = id(g);
    seqs.push_back(s);
  }
  for (const auto& s : seqs) {
    std::ostringstream name;
    for (int v : s) name << v << ' ';
    expect_same(previous_token_detection(s), tl_previous(s), "previous of " + name.str());
    expect_same(duplicate_token_detection(s), tl_duplicate(s), "duplicate of " + name.str());
    expect_same(induction_detection(s), tl_induction(s), "induction of " + name.str());
  }
}

// The conventions, spelled out on A B A A: the duplicate pattern looks back at earlier
// copies; the induction pattern at the token after them, the diagonal included when
// the token before is the same token.
TEST(HeadDetection, ConventionsOnASmallExample) {
  const std::vector<int> t = {7, 8, 7, 7};
  const Grid dup = {{0, 0, 0, 0}, {0, 0, 0, 0}, {1, 0, 0, 0}, {1, 0, 1, 0}};
  const Grid ind = {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 1, 0, 0}, {0, 1, 0, 1}};
  const Grid prev = {{0, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}};
  expect_same(duplicate_token_detection(t), dup, "duplicate");
  expect_same(induction_detection(t), ind, "induction");
  expect_same(previous_token_detection(t), prev, "previous");
  EXPECT_EQ(previous_token_detection({}).rows(), 0);
  expect_same(induction_detection({4}), {{0}}, "one token");
}

// The score equals the transcription of TransformerLens's "mul" score for every
// combination of the two options, on random causal patterns and on arbitrary matrices.
TEST(HeadDetection, ScoreEqualsTransformerLens) {
  std::mt19937 g(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (const auto& s : hand_sequences()) {
    if (s.size() < 2) continue;
    for (int trial = 0; trial < 4; ++trial) {
      Grid a = random_attention(s.size(), g);
      if (trial == 3)
        for (auto& row : a)
          for (double& v : row) v = u(g);  // not causal, rows not normalised
      a = grid(mat(a));                    // the float values the detector sees
      for (const Grid& d : {tl_previous(s), tl_duplicate(s), tl_induction(s)})
        for (bool bos : {false, true})
          for (bool cur : {false, true}) {
            double want = tl_score(a, d, bos, cur);
            if (std::isnan(want)) want = 0;  // everything excluded: TransformerLens's 0 / 0, 0 here
            EXPECT_NEAR(detection_score(mat(a), mat(d), bos, cur), want, 1e-6)
                << "sequence of " << s.size() << ", trial " << trial << ", exclude_bos " << bos << ", current " << cur;
          }
    }
  }
}

TEST(HeadDetection, BadShapesEndInAClearError) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { detection_score(MatRM::Zero(3, 4), MatRM::Zero(3, 3), false, false); }).find("square"),
            std::string::npos);
  EXPECT_NE(message([] {
              detection_score(MatRM::Zero(3, 3), MatRM::Zero(4, 4), false, false);
            }).find("3 positions and the detection pattern 4"),
            std::string::npos);
  // Everything excluded: 0, not NaN.
  EXPECT_EQ(detection_score(MatRM::Identity(1, 1), MatRM::Zero(1, 1), true, true), 0.0f);
  HeadRoles r;
  EXPECT_NE(message([&] { r.score(0, 0, 0); }).find("no head 0.0"), std::string::npos);
  EXPECT_NE(message([] { head_kind_name(3); }).find("head kind 3"), std::string::npos);
  EXPECT_EQ(r.strongest(kInductionHead), -1);
  Config c = ds::test::small_config(Arch::GPT2);
  EXPECT_NE(message([&] { head_probe(c, -1, 1); }).find("0 (automatic) or more"), std::string::npos);
  EXPECT_NE(message([&] { head_probe(c, 32, 1); }).find("does not fit this model's context of 64 positions"),
            std::string::npos);
  c.max_seq = 2;
  EXPECT_NE(message([&] { head_probe(c, 0, 1); }).find("context of at least 3"), std::string::npos);
  c = ds::test::small_config(Arch::GPT2, 3);  // ids 0, 1 (BOS), 2
  EXPECT_NE(message([&] { head_probe(c, 0, 1, {0, 2}); }).find("no usable token id"), std::string::npos);
}

// The probe: BOS, then a half of distinct usable ids, then the same half again; never
// a special or avoided id; the same for the same seed, another for another seed.
TEST(HeadDetection, ProbeIsRandomTokensRepeatedTwice) {
  Config c = ds::test::small_config(Arch::GPT2, 40);
  c.eos_id = 2, c.pad_id = 0, c.max_seq = 200;
  const std::vector<int> avoid = {5, 6, 39};
  for (uint64_t seed : {1u, 2u, 99u}) {
    const std::vector<int> p = head_probe(c, 0, seed, avoid);
    const int h = auto_probe_half(c, avoid);
    EXPECT_EQ(h, 40 - 6);  // the usable ids: fewer than 50 and than the context's half
    ASSERT_EQ(p.size(), size_t(1 + 2 * h));
    EXPECT_EQ(p[0], c.bos_id);
    std::set<int> first;
    for (int i = 1; i <= h; ++i) {
      EXPECT_EQ(p[size_t(i)], p[size_t(i + h)]);
      first.insert(p[size_t(i)]);
      for (int bad : {0, 1, 2, 5, 6, 39}) EXPECT_NE(p[size_t(i)], bad);
      EXPECT_TRUE(p[size_t(i)] >= 0 && p[size_t(i)] < c.vocab_size);
    }
    EXPECT_EQ(first.size(), size_t(h));  // distinct within a half
    EXPECT_EQ(head_probe(c, 0, seed, avoid), p);
    EXPECT_NE(head_probe(c, 0, seed + 1000, avoid), p);
  }
  // A half longer than the usable ids takes further permutations; a model without BOS.
  c.bos_id = -1;
  const std::vector<int> q = head_probe(c, 90, 3, avoid);
  ASSERT_EQ(q.size(), 180u);
  EXPECT_EQ(std::set<int>(q.begin(), q.begin() + 35).size(), 35u);  // the 35 usable ids, then again
  for (int i = 0; i < 90; ++i) EXPECT_EQ(q[size_t(i)], q[size_t(i + 90)]);
  EXPECT_EQ(auto_probe_half(c), 38);  // min(50, 200 / 2, 38 usable)
  c.max_seq = 64;
  EXPECT_EQ(auto_probe_half(c), 32);
}

TEST(HeadDetection, ProbeAvoidsWhatTheTokenizerDoesNotKnow) {
  Config c = ds::test::small_config(Arch::GPT2, 10);
  const std::vector<std::string> pieces = {"<unk>", "<s>", "a", "", "<0x0A>", "<|endoftext|>", "<", "<>", "b"};
  const std::vector<int> avoid = probe_avoid_ids(c, int(pieces.size()), [&](int id) { return pieces[size_t(id)]; });
  EXPECT_EQ(avoid, (std::vector<int>{0, 1, 3, 5, 9}));  // 9: beyond the tokenizer's 9 entries
}

namespace {

// Attention patterns written by the test for a probe of T positions.
Grid previous_attention(size_t T) {  // row 0 on itself, every other row on the token before
  Grid a = zeros(T);
  a[0][0] = 1;
  for (size_t i = 1; i < T; ++i) a[i][i - 1] = 1;
  return a;
}

// Every row of the second half on the token after the earlier copy of its token; the
// rows that have none (BOS, the first half) on position 0.
Grid induction_attention(const std::vector<int>& probe, int half, bool bos) {
  const size_t T = probe.size(), b = bos ? 1 : 0;
  Grid a = zeros(T);
  for (size_t i = 0; i < T; ++i)
    if (i >= b + size_t(half))
      a[i][i - size_t(half) + 1] = 1;
    else
      a[i][0] = 1;
  return a;
}

}  // namespace

TEST(HeadDetection, WrittenPatternsScoreWhatTheDefinitionSays) {
  Config c = ds::test::small_config(Arch::GPT2, 40);
  c.max_seq = 64;
  const int h = 12;
  const std::vector<int> p = head_probe(c, h, 4);
  const size_t T = p.size();
  ASSERT_EQ(T, size_t(2 * h + 1));
  const MatRM P = previous_token_detection(p), D = duplicate_token_detection(p), I = induction_detection(p);
  // A perfect previous-token head: all of rows 1.. on the sub-diagonal; row 0 (BOS) can
  // only attend to itself, which counts unless excluded.
  const MatRM prev = mat(previous_attention(T));
  EXPECT_NEAR(detection_score(prev, P, false, false), double(T - 1) / T, 1e-6);
  EXPECT_NEAR(detection_score(prev, P, false, true), 1.0, 1e-6);
  EXPECT_NEAR(detection_score(prev, P, true, false), 1.0, 1e-6);
  EXPECT_NEAR(detection_score(prev, I, false, false), 0.0, 1e-6);
  EXPECT_NEAR(detection_score(prev, D, false, false), 0.0, 1e-6);
  EXPECT_NEAR(detection_score(P, P, false, false), 1.0, 1e-6);  // the sub-diagonal alone
  // A perfect induction head: h of the 2h + 1 rows have a target.
  const MatRM ind = mat(induction_attention(p, h, true));
  EXPECT_NEAR(detection_score(ind, I, false, false), double(h) / (2 * h + 1), 1e-6);
  EXPECT_NEAR(detection_score(ind, I, true, false), 1.0, 1e-6);
  EXPECT_NEAR(detection_score(ind, P, true, false), 0.0, 1e-6);
  EXPECT_NEAR(detection_score(I, I, false, false), 1.0, 1e-6);  // the detection pattern itself
  // Uniform causal attention: row i gives 1 / (i + 1) to each of its i + 1 keys.
  Grid uni = zeros(T);
  for (size_t i = 0; i < T; ++i)
    for (size_t j = 0; j <= i; ++j) uni[i][j] = 1.0 / double(i + 1);
  double prev_want = 0, ind_want = 0, den_bos = 0;
  for (size_t i = 1; i < T; ++i) prev_want += 1.0 / double(i + 1);             // one target in each row but the first
  for (size_t i = size_t(h) + 1; i < T; ++i) ind_want += 1.0 / double(i + 1);  // second half: one target each
  for (size_t i = 0; i < T; ++i) den_bos += double(i) / double(i + 1);         // without column 0
  EXPECT_NEAR(detection_score(mat(uni), P, false, false), prev_want / T, 1e-6);
  EXPECT_NEAR(detection_score(mat(uni), I, false, false), ind_want / T, 1e-6);
  EXPECT_NEAR(detection_score(mat(uni), D, false, false), ind_want / T, 1e-6);  // one earlier copy each
  EXPECT_NEAR(detection_score(mat(uni), P, true, false), (prev_want - 1.0 / 2) / den_bos, 1e-6);  // row 1's target is 0
}

namespace {

// Which decoder layer and head the tests force to be an induction head.
constexpr int kLayer = 1, kHead = 2;

// Subscribes to blocks.1.attn.pattern and overwrites head 2's pattern in place with a
// perfect induction head's on the probe (rows without a target on position 0).
int force_induction_head(Engine& e, const std::vector<int>& probe, int half, bool bos) {
  const MatRM want = mat(induction_attention(probe, half, bos));
  return e.hooks().subscribe("blocks." + std::to_string(kLayer) + ".attn.pattern", [want](HookEvent& ev) {
    const int rows = ev.t.shape[1], S = ev.t.shape[2];
    ASSERT_EQ(S, want.cols());
    Eigen::Map<MatRM> head(ev.t.data + size_t(kHead) * rows * S, rows, S);
    head = want.block(ev.pos0, 0, rows, S);
  });
}

}  // namespace

// A head made an induction head through a hook (an intervention subscribed before the
// detector, so it runs first) is reported at 1 with exclude_bos, h / (2h + 1) without,
// and the heads of the random model score lower; the forced head's pattern is the one
// written; every pattern's rows sum to 1.
TEST(DetectHeads, FindsAnInductionHeadForcedThroughAHook) {
  for (Arch a : {Arch::GPT2, Arch::Llama, Arch::EncDec}) {
    SCOPED_TRACE(int(a));
    const Config c = ds::test::small_config(a, 40);
    auto m = ds::test::random_model(c, 21 + int(a), 0.3f);
    HeadDetectOptions o;
    o.seed = 5;
    const int h = auto_probe_half(c);
    const std::vector<int> probe = head_probe(c, h, o.seed);
    for (bool exclude_bos : {false, true}) {
      o.exclude_bos = exclude_bos;
      Engine e(m);
      const int handle = force_induction_head(e, probe, h, true);
      const HeadRoles r = detect_heads(e, o);
      e.hooks().unsubscribe(handle);
      ASSERT_EQ(r.probe, probe);
      EXPECT_EQ(r.half, h);
      ASSERT_EQ(r.induction.size(), size_t(c.n_layers * c.n_heads));
      const int forced = kLayer * c.n_heads + kHead;
      EXPECT_NEAR(r.score(kInductionHead, kLayer, kHead), exclude_bos ? 1.0 : double(h) / (2 * h + 1), 1e-6);
      EXPECT_EQ(r.strongest(kInductionHead), forced);
      for (int i = 0; i < int(r.induction.size()); ++i)
        if (i != forced) {
          EXPECT_LT(r.induction[size_t(i)], exclude_bos ? 0.5f : 0.25f) << "head " << i;
        }
      expect_same(r.patterns[size_t(forced)], induction_attention(probe, h, true), "the forced head");
      for (const MatRM& p : r.patterns)
        for (Eigen::Index i = 0; i < p.rows(); ++i) EXPECT_NEAR(p.row(i).sum(), 1.0, 1e-5);
      if (c.encoder_decoder) {
        EXPECT_EQ(r.source, std::vector<int>(probe.begin() + 1, probe.begin() + 1 + c.max_src));
      }
    }
  }
}

// The patterns the detector reads are the model's: they equal the reference forward
// pass's (double precision, plain loops) on the probe, and each score equals the
// TransformerLens transcription applied to the reference's pattern.
TEST(DetectHeads, PatternsAndScoresEqualTheReferenceForwardPass) {
  for (const auto& v : ds::test::variants()) {
    SCOPED_TRACE(v.name);
    auto m = ds::test::random_model(v.cfg, v.seed, 0.3f);
    HeadDetectOptions o;
    o.half = 15;
    o.seed = 8;
    o.threads = 2;
    const HeadRoles r = detect_heads(m, o);
    ref::Recorded rec;
    ref::logits(v.cfg, m->w, r.probe, r.source, -1, -1, &rec);
    const Grid P = tl_previous(r.probe), D = tl_duplicate(r.probe), I = tl_induction(r.probe);
    for (int l = 0; l < v.cfg.n_layers; ++l)
      for (int h = 0; h < v.cfg.n_heads; ++h) {
        const Grid& want = rec.self[size_t(l)][size_t(h)];
        const MatRM& got = r.patterns[size_t(l * v.cfg.n_heads + h)];
        ASSERT_EQ(size_t(got.rows()), want.size());
        double err = 0;
        for (size_t i = 0; i < want.size(); ++i)
          for (size_t j = 0; j < want.size(); ++j) err = std::max(err, std::abs(got(int(i), int(j)) - want[i][j]));
        EXPECT_LT(err, 1e-4) << "layer " << l << " head " << h;
        EXPECT_NEAR(r.score(kPreviousHead, l, h), tl_score(want, P, false, false), 1e-4);
        EXPECT_NEAR(r.score(kDuplicateHead, l, h), tl_score(want, D, false, false), 1e-4);
        EXPECT_NEAR(r.score(kInductionHead, l, h), tl_score(want, I, false, false), 1e-4);
      }
  }
}

// keep_patterns false keeps the scores and drops the matrices; the options as used
// come back with the half resolved.
TEST(DetectHeads, WithoutPatterns) {
  const Config c = ds::test::small_config(Arch::GPT2, 40);
  auto m = ds::test::random_model(c, 3, 0.3f);
  HeadDetectOptions o;
  o.exclude_current_token = true;
  const HeadRoles a = detect_heads(m, o);
  o.keep_patterns = false;
  const HeadRoles b = detect_heads(m, o);
  EXPECT_TRUE(b.patterns.empty());
  EXPECT_EQ(a.patterns.size(), size_t(c.n_layers * c.n_heads));
  EXPECT_EQ(a.previous, b.previous);
  EXPECT_EQ(a.duplicate, b.duplicate);
  EXPECT_EQ(a.induction, b.induction);
  EXPECT_EQ(b.options.half, auto_probe_half(c));
  EXPECT_TRUE(b.options.exclude_current_token);
  for (int i = 0; i < int(a.patterns.size()); ++i)
    EXPECT_NEAR(a.induction[size_t(i)],
                detection_score(a.patterns[size_t(i)], induction_detection(a.probe), false, true), 1e-6);
}

namespace {

// The scores of a real model, printed, and checked for what any attention must give.
void report_and_check(const HeadRoles& r, const std::string& name) {
  std::printf("%s: probe of %zu positions (half %d)\n", name.c_str(), r.probe.size(), r.half);
  for (int k = 0; k < kHeadKinds; ++k) {
    const int i = r.strongest(k);
    std::printf("  strongest %-9s head: layer %d head %d, %.3f\n", head_kind_name(k), i / r.n_heads, i % r.n_heads,
                r.score(k, i / r.n_heads, i % r.n_heads));
  }
  for (const auto* v : {&r.previous, &r.duplicate, &r.induction})
    for (float s : *v) {
      EXPECT_GE(s, 0.0f);
      EXPECT_LE(s, 1.0f + 1e-6f);
    }
  for (const MatRM& p : r.patterns)
    for (Eigen::Index i = 0; i < p.rows(); ++i) {
      EXPECT_NEAR(p.row(i).sum(), 1.0, 1e-4);
      for (Eigen::Index j = i + 1; j < p.cols(); ++j) EXPECT_EQ(p(i, j), 0.0f);  // causal
    }
}

HeadDetectOptions options_of(const LoadedModel& m) {
  HeadDetectOptions o;
  if (m.tokenizer)
    o.avoid = probe_avoid_ids(m.model->cfg, m.tokenizer->vocab_size(), [&](int id) { return m.tokenizer->piece(id); });
  o.avoid.insert(o.avoid.end(), m.stop_ids.begin(), m.stop_ids.end());
  return o;
}

}  // namespace

TEST(DetectHeads, Llama2cFixtureScoresAreFractions) {
  const auto dir = ds::test::fixture("aidreams260K");
  DS_NEED_FIXTURE(dir / "model.bin", "the head detector on the llama2.c checkpoint");
  const LoadedModel m = load_model((dir / "model.bin").string(), (dir / "tok512.bin").string());
  HeadDetectOptions o = options_of(m);
  const HeadRoles r = detect_heads(m.model, o);
  EXPECT_EQ(r.probe.size(), 101u);                                       // BOS + 50 + 50 (context 128)
  for (size_t i = 1; i < r.probe.size(); ++i) EXPECT_GE(r.probe[i], 3);  // not <unk>, <s>, </s>
  report_and_check(r, "aidreams260K");
  o.exclude_bos = true;
  report_and_check(detect_heads(m.model, o), "aidreams260K, excluding position 0");
  // Checked apart from the probe and the engine: on the model's own text (run.c's
  // greedy ids from BOS, a fixture file) through the reference forward pass, the
  // previous-token score of every head (TransformerLens's definition, transcribed above).
  std::vector<int> text = {1};
  {
    std::ifstream in(dir / "greedy_from_bos.ids");
    for (int id; in >> id && int(text.size()) < m.model->cfg.max_seq;) text.push_back(id);
  }
  ref::Recorded rec;
  ref::logits(m.model->cfg, m.model->w, text, {}, -1, -1, &rec);
  const Grid P = tl_previous(text);
  int best = 0;
  std::vector<double> on_text;
  for (int l = 0; l < r.n_layers; ++l)
    for (int h = 0; h < r.n_heads; ++h) {
      on_text.push_back(tl_score(rec.self[size_t(l)][size_t(h)], P, false, false));
      if (on_text.back() > on_text[size_t(best)]) best = int(on_text.size()) - 1;
    }
  std::printf("  on run.c's greedy text (%zu positions), reference forward pass: previous", text.size());
  for (double v : on_text) std::printf(" %.3f", v);
  std::printf("\n  strongest previous-token head on that text: layer %d head %d\n", best / r.n_heads, best % r.n_heads);
  // The two agree on the previous-token head (layer 3 head 3 for seeds 1 to 5 of the probe).
  EXPECT_EQ(r.strongest(kPreviousHead), best);
  EXPECT_GT(r.previous[size_t(best)], 0.5f);
}

// The stories model (assets/models/stories, trained on a story corpus) has an
// induction head. With exclude_bos: by default even a perfect induction head scores
// h / (2h + 1) < 0.5 on this probe (heads.h), as the first half has nothing to copy.
TEST(DetectHeads, StoriesModelHasAnInductionHead) {
  const std::filesystem::path dir = std::filesystem::path(DS_SOURCE_DIR) / "assets" / "models" / "stories";
  if (!std::filesystem::exists(dir / "config.json"))
    GTEST_SKIP() << dir << " is absent (not trained yet): skipping the induction head check";
  const LoadedModel m = load_model("builtin:stories");
  HeadDetectOptions o = options_of(m);
  report_and_check(detect_heads(m.model, o), "stories");
  o.exclude_bos = true;
  const HeadRoles r = detect_heads(m.model, o);
  report_and_check(r, "stories, excluding position 0");
  const int best = r.strongest(kInductionHead);
  // The bar: TransformerLens's induction score of at least 0.6 (position 0 left
  // out, as TransformerLens's exclude_bos: a head with nothing to copy rests on <s>).
  EXPECT_GE(r.induction[size_t(best)], 0.6f) << "no head of the stories model scores 0.6 as an induction head";
  // What the head does where there is something to copy, checked directly: the rows of
  // the second half, each row's share of attention on the token after the earlier copy
  // of its token.
  const ds::MatRM& A = r.patterns[size_t(best)];
  const ds::MatRM D = induction_detection(r.probe);
  const int T = int(A.rows()), first = T - r.half;
  double on = 0, all = 0;
  for (int i = first; i < T; ++i)
    for (int j = 0; j <= i; ++j) {
      all += A(i, j);
      on += A(i, j) * D(i, j);
    }
  std::printf(
      "stories: layer %d head %d puts %.3f of the second half's attention on the token after the earlier copy\n",
      best / r.n_heads, best % r.n_heads, on / all);
  EXPECT_GE(on / all, 0.9) << "the strongest induction head does not copy from the first half";
}

// ---- decoderscope-cli heads

namespace {

using ds::test::CliRun;
using ds::test::run_cli;

std::vector<std::string> lines_of(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

// The table has one row per head, "layer head previous duplicate induction", with the
// library's scores to 3 decimals and the strongest of each kind marked *; --json holds
// the same scores and the probe.
TEST(CliHeads, TableAgreesWithTheLibrary) {
  for (const char* extra : {"", " --exclude-bos --seed 9 --half 5"}) {
    SCOPED_TRACE(extra);
    const LoadedModel m = load_model("builtin:adder");
    HeadDetectOptions o = options_of(m);
    const std::string args = std::string(extra);
    if (!args.empty()) o.exclude_bos = true, o.seed = 9, o.half = 5;
    const HeadRoles r = detect_heads(m.model, o);
    CliRun t = run_cli("heads --model builtin:adder" + args);
    ASSERT_EQ(t.code, 0) << t.err;
    const std::vector<std::string> lines = lines_of(t.out);
    auto header =
        std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("layer", 0) == 0; });
    ASSERT_NE(header, lines.end()) << t.out;
    EXPECT_NE(header->find("previous"), std::string::npos);
    const size_t first = size_t(header - lines.begin()) + 1;
    ASSERT_GE(lines.size(), first + size_t(r.n_layers * r.n_heads)) << t.out;
    int marks[kHeadKinds] = {0, 0, 0};
    for (int i = 0; i < r.n_layers * r.n_heads; ++i) {
      std::istringstream row(lines[first + size_t(i)]);
      int layer = -1, head = -1;
      row >> layer >> head;
      EXPECT_EQ(layer, i / r.n_heads);
      EXPECT_EQ(head, i % r.n_heads);
      for (int k = 0; k < kHeadKinds; ++k) {
        std::string cell;
        row >> cell;
        const bool star = !cell.empty() && cell.back() == '*';
        if (star) cell.pop_back(), ++marks[k];
        EXPECT_EQ(star, r.strongest(k) == i) << lines[first + size_t(i)];
        EXPECT_NEAR(std::stod(cell), r.score(k, layer, head), 0.0005 + 1e-6) << lines[first + size_t(i)];
      }
    }
    for (int k : marks) EXPECT_EQ(k, 1);
    EXPECT_TRUE(lines[first + size_t(r.n_layers * r.n_heads)].empty());
    EXPECT_EQ(lines.back().rfind("strongest: previous ", 0), 0u) << lines.back();
    CliRun j = run_cli("heads --model builtin:adder --json" + args);
    ASSERT_EQ(j.code, 0) << j.err;
    const nlohmann::json js = nlohmann::json::parse(j.out);
    EXPECT_EQ(js.at("probe").get<std::vector<int>>(), r.probe);
    EXPECT_EQ(js.at("exclude_bos").get<bool>(), o.exclude_bos);
    ASSERT_EQ(js.at("heads").size(), size_t(r.n_layers * r.n_heads));
    for (const auto& h : js.at("heads")) {
      const int l = h.at("layer").get<int>(), hd = h.at("head").get<int>();
      EXPECT_FLOAT_EQ(h.at("previous").get<float>(), r.score(kPreviousHead, l, hd));
      EXPECT_FLOAT_EQ(h.at("duplicate").get<float>(), r.score(kDuplicateHead, l, hd));
      EXPECT_FLOAT_EQ(h.at("induction").get<float>(), r.score(kInductionHead, l, hd));
    }
    const int best = r.strongest(kInductionHead);
    EXPECT_EQ(js.at("strongest").at("induction").at("layer").get<int>(), best / r.n_heads);
    EXPECT_EQ(js.at("strongest").at("induction").at("head").get<int>(), best % r.n_heads);
  }
}

// An encoder-decoder model: the decoder's heads, the source named in the JSON.
TEST(CliHeads, EncoderDecoderModel) {
  CliRun r = run_cli("heads --model builtin:dates --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j.at("source").empty());
  EXPECT_EQ(j.at("heads").size(), size_t(j.at("n_layers").get<int>() * j.at("n_heads").get<int>()));
}

TEST(CliHeads, BadArgumentsEndWithOneLine) {
  const char* cases[] = {
      "heads",
      "heads --model builtin:adder --half -1",
      "heads --model builtin:adder --half 8",  // context 16 with BOS: half at most 7
      "heads --model builtin:adder --half x",
      "heads --model builtin:adder --seed -3",
      "heads --model builtin:adder --prompt 1+1=",
      "heads --model builtin:adder --threads 0",
      "heads --model /nonexistent/model.bin",
  };
  for (auto* c : cases) {
    SCOPED_TRACE(c);
    CliRun r = run_cli(c);
    EXPECT_EQ(r.code, 1);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("error"), std::string::npos) << r.err;
  }
  CliRun r = run_cli("heads --model builtin:adder --half 8");
  EXPECT_NE(r.err.find("--half must be between 0 and 7"), std::string::npos) << r.err;
  r = run_cli("heads --model builtin:adder --prompt 1+1=");
  EXPECT_NE(r.err.find("unknown option --prompt for heads"), std::string::npos) << r.err;
}
