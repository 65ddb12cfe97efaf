// GGUF files made by llama.cpp's own tools (../shared/fixtures/gguf/models, README there)
// against llama.cpp's recorded outputs: for every architecture (llama with Llama 3.2's
// rotary scaling, qwen2, qwen3, gemma3) and every tensor type, the logits at each of the
// sequence's 72 positions equal llama.cpp's on the file's float32 copy within 1e-4 of the position's
// logit range, and greedy decoding gives its ids. aidreams260K.gguf (a real llama2.c
// checkpoint converted by llama.cpp) decodes run.c's greedy ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>

#include "helpers.h"
#include "io/gguf.h"
#include "io/loader.h"
#include "model/model.h"
#include "perf/bf16_fast.h"

namespace {

namespace fs = std::filesystem;

fs::path models_dir() { return ds::test::fixture("gguf/models"); }

std::vector<int> read_ids(const fs::path& p) {
  std::ifstream in(p);
  std::vector<int> ids;
  for (int x; in >> x;) ids.push_back(x);
  return ids;
}

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<float> v;
  in.seekg(0, std::ios::end);
  v.resize(size_t(in.tellg()) / 4);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * 4));
  return v;
}

struct Case {
  std::string arch, type;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.arch << "-" << c.type; }

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* a : {"llama", "qwen2", "qwen3", "gemma3"})
    for (const char* t : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q4_K_M"})
      out.push_back({a, t});
  return out;
}

class GgufFixture : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!fs::exists(models_dir())) GTEST_SKIP() << "../shared/fixtures/gguf/models is absent";
  }
  // What llama.cpp computed on the file's float32 copy (the file itself for F32).
  std::string expected(const std::string& what) const {
    const Case c = GetParam();
    const std::string base = c.arch + "-" + c.type + (c.type == "F32" ? "" : ".dequantized");
    return (models_dir() / (base + what)).string();
  }
  std::string file() const { return (models_dir() / (GetParam().arch + "-" + GetParam().type + ".gguf")).string(); }
};

TEST_P(GgufFixture, LogitsEqualLlamaCppOnTheFloat32Copy) {
  const ds::LoadedModel lm = ds::load_model(file());
  const std::vector<int> seq = read_ids(models_dir() / (GetParam().arch + ".sequence.ids"));
  const std::vector<float> want = read_f32(expected(".logits.f32"));
  const int V = lm.model->cfg.vocab_size;
  ASSERT_GE(seq.size(), 60u);
  ASSERT_EQ(want.size(), seq.size() * size_t(V));
  ds::Engine e(lm.model);
  const ds::MatRM got = e.forward_full(seq);
  double worst = 0.0;
  for (size_t p = 0; p < seq.size(); ++p) {
    const float* w = want.data() + p * size_t(V);
    const float range = *std::max_element(w, w + V) - *std::min_element(w, w + V);
    for (int v = 0; v < V; ++v) worst = std::max(worst, double(std::fabs(got(long(p), v) - w[v]) / range));
  }
  EXPECT_LT(worst, 1e-4) << "largest difference, as a share of the position's logit range";
  // Decoding one token at a time through the KV cache gives the same logits.
  ds::Engine step(lm.model);
  for (size_t p = 0; p < seq.size(); ++p) {
    const auto row = step.forward(std::span<const int>(&seq[p], 1));
    for (int v = 0; v < V; v += 7) ASSERT_NEAR(row(0, v), got(long(p), v), 1e-3) << "position " << p;
  }
}

TEST_P(GgufFixture, GreedyIdsEqualLlamaCpp) {
  const ds::LoadedModel lm = ds::load_model(file());
  std::vector<int> ids = read_ids(models_dir() / (GetParam().arch + ".prompt.ids"));
  const std::vector<int> want = read_ids(expected(".greedy.ids"));
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(lm.tokenizer ? ds::encode_prompt(lm, "Once upon a time") : ids, ids);
  ds::Engine e(lm.model);
  ds::MatRM logits = e.forward(ids);
  std::vector<int> got;
  for (size_t i = 0; i < want.size(); ++i) {
    Eigen::Index best;
    logits.row(0).maxCoeff(&best);
    got.push_back(int(best));
    logits = e.forward(std::span<const int>(&got.back(), 1));
  }
  EXPECT_EQ(got, want);
}

// The Fast products (perf/quant_fast.h) against llama.cpp's logits on the quantized
// file itself, which rounds the activations the same way. Rounding to 8 bits is not
// continuous: where a value before the rounding differs from llama.cpp's by one float32
// step (its own exp, SiLU, norms and sum orders) and sits on a rounding boundary, one
// rounded value moves by a step and that position's logits by up to about 1e-2 of their
// range, and the difference travels to later positions through the KV cache. The goal
// of 1e-3 at every position is met only by the files where no such step happens (about
// half; the others stay under 1.2e-2, printed per file). What holds everywhere, in one
// prefill and one token at a time:
// - the top-1 id is llama.cpp's wherever its lead over the second is at least 3% of
//   the range (more than any rounding step moved a logit here), and no position is off
//   by more than 2e-2 of its range;
// - some position agrees to float32 rounding (1e-5): the same computation, not an
//   approximation of it;
// - at the median position the Fast products are closer to llama.cpp on the file than
//   the Exact ones (the float32 engine on the decoded weights).
// The quantized types, and BF16 where the AVX-512 BF16 kernels run (perf/bf16_fast.h:
// the activations rounded to bfloat16, as llama.cpp rounds them); F32 and F16 keep
// float32 activations (tested above).
struct FastStats {
  std::vector<double> err;  // per position: the largest difference over the range
  int top1_missed = 0;      // positions whose top-1 differs where llama.cpp leads by >= 3%
  double worst() const { return *std::max_element(err.begin(), err.end()); }
  double median() const {
    std::vector<double> v = err;
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    return v[v.size() / 2];
  }
  double within(double tol) const {
    return double(std::count_if(err.begin(), err.end(), [&](double e) { return e < tol; })) / double(err.size());
  }
};

FastStats compare_rows(const std::vector<float>& want, int V, size_t p, const float* got, FastStats& s) {
  const float* w = want.data() + p * size_t(V);
  std::vector<float> sorted(w, w + V);
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  const float range = sorted.front() - sorted.back();
  double e = 0.0;
  for (int v = 0; v < V; ++v) e = std::max(e, double(std::fabs(got[v] - w[v]) / range));
  s.err.push_back(e);
  const long top = long(std::max_element(w, w + V) - w), mine = long(std::max_element(got, got + V) - got);
  if (top != mine && sorted[0] - sorted[1] >= 0.03f * range) ++s.top1_missed;
  return s;
}

TEST_P(GgufFixture, FastProductsFollowLlamaCppOnTheQuantizedFile) {
  const Case c = GetParam();
  if (c.type == "F32" || c.type == "F16") GTEST_SKIP() << "float32 activations: no fast products";
  if (c.type == "BF16" && !ds::bf16_fast_available())
    GTEST_SKIP() << "the bfloat16 fast products need AVX-512 BF16, which this processor lacks";
  const fs::path ref = models_dir() / (c.arch + "-" + c.type + ".logits.f32");
  DS_NEED_FIXTURE(ref, "llama.cpp's logits on the quantized file");
  const ds::LoadedModel lm = ds::load_model(file());
  const std::vector<int> seq = read_ids(models_dir() / (c.arch + ".sequence.ids"));
  const std::vector<float> want = read_f32(ref);
  const int V = lm.model->cfg.vocab_size;
  ASSERT_EQ(want.size(), seq.size() * size_t(V));
  ds::Engine full(lm.model), step(lm.model), exact(lm.model);
  full.set_products(ds::Products::Fast);
  step.set_products(ds::Products::Fast);
  const ds::MatRM all = full.forward_full(seq);
  FastStats f, s, x;
  for (size_t p = 0; p < seq.size(); ++p) {
    compare_rows(want, V, p, &all(long(p), 0), f);
    compare_rows(want, V, p, step.forward(std::span<const int>(&seq[p], 1)).data(), s);
    compare_rows(want, V, p, exact.forward(std::span<const int>(&seq[p], 1)).data(), x);
  }
  std::printf(
      "[ fast     ] %-13s prefill: worst %.1e median %.1e, %3.0f%% within 1e-3, top-1 missed %d | "
      "steps: worst %.1e median %.1e, %3.0f%% within 1e-3, top-1 missed %d | exact: median %.1e\n",
      (c.arch + "-" + c.type).c_str(), f.worst(), f.median(), 100 * f.within(1e-3), f.top1_missed, s.worst(),
      s.median(), 100 * s.within(1e-3), s.top1_missed, x.median());
  for (const FastStats* st : {&f, &s}) {
    const char* how = st == &f ? "prefill" : "one token at a time";
    EXPECT_EQ(st->top1_missed, 0) << how << ": top-1 ids that differ where llama.cpp leads by 3% of the range";
    EXPECT_LT(st->worst(), 2e-2) << how << ": the largest difference, as a share of the logit range";
    EXPECT_LT(*std::min_element(st->err.begin(), st->err.end()), 1e-5) << how << ": no position agrees closely";
    EXPECT_LT(st->median(), x.median()) << how << ": no closer to llama.cpp on the file than the Exact products";
  }
}

// Quantized matrices stay quantized: the weights take no more memory than the file.
TEST_P(GgufFixture, WeightsTakeAboutTheFilesSize) {
  const ds::LoadedModel lm = ds::load_model(file());
  const auto file_bytes = fs::file_size(file());
  EXPECT_LE(uint64_t(lm.model->w.bytes()), file_bytes);
  EXPECT_GE(uint64_t(lm.model->w.bytes()), file_bytes * 9 / 10);
}

INSTANTIATE_TEST_SUITE_P(Files, GgufFixture, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.arch + "_" + info.param.type; });

TEST(GgufFixtures, Aidreams260KDecodesRunCsGreedyIds) {
  const fs::path f = models_dir() / "aidreams260K.gguf";
  if (!fs::exists(f)) GTEST_SKIP() << "../shared/fixtures/gguf/models is absent";
  const ds::LoadedModel lm = ds::load_model(f.string());
  const std::vector<int> want = read_ids(models_dir() / "aidreams260K.greedy_from_bos.ids");
  const std::vector<int> run_c = read_ids(ds::test::fixture("aidreams260K/greedy_from_bos.ids"));
  ds::Engine e(lm.model);
  std::vector<int> got;
  int tok = 1;  // BOS
  for (size_t i = 0; i < want.size(); ++i) {
    Eigen::Index best;
    e.forward(std::span<const int>(&tok, 1)).row(0).maxCoeff(&best);
    tok = int(best);
    got.push_back(tok);
  }
  EXPECT_EQ(got, want);
  const size_t n = std::min(run_c.size(), got.size());
  EXPECT_EQ(std::vector<int>(got.begin(), got.begin() + long(n)),
            std::vector<int>(run_c.begin(), run_c.begin() + long(n)));
}

}  // namespace
