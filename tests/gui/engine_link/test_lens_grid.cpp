// The Logit lens view's grid (engine_link/lens_grid.h): every cell's top token and its
// probability equal a naive recomputation (the reference forward pass's residual stream
// after that layer, the final norm and the unembedding in double precision, here); the
// commitment layer equals the first layer from which the top-1 is the final answer at
// every later layer, found naively; columns the engine computes for a trace recorded
// without the lens equal the recorded ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "engine_link/lens_grid.h"
#include "engine_link/worker.h"
#include "model/reference.h"
#include "session/session.h"

namespace {

// Three layers of d_model 32: GPT-like (LayerNorm, tied head, biases) or llama-like
// (RMSNorm, rotary, SwiGLU, grouped keys, a separate head).
ds::Config small_config(bool llama) {
  ds::Config c;
  c.d_model = 32, c.n_layers = 3, c.n_heads = 4, c.n_kv_heads = 4, c.d_head = 8, c.d_ff = 64;
  c.vocab_size = 48, c.max_seq = 64, c.bos_id = 1;
  if (llama) {
    c.norm = ds::NormKind::RMSNorm, c.pos = ds::PosKind::Rotary, c.ffn = ds::FFNKind::SwiGLU;
    c.n_kv_heads = 2, c.tied_head = false;
    c.attn_bias = c.ffn_bias = c.norm_bias = false;
  }
  return c;
}

// The first i from which top1[j] == top1[n-1] for every j >= i, by checking each i.
int naive_commitment(const std::vector<int>& top1) {
  const int n = int(top1.size());
  for (int i = 0; i < n; ++i) {
    bool all = true;
    for (int j = i; j < n; ++j) all &= top1[size_t(j)] == top1[size_t(n - 1)];
    if (all) return i;
  }
  return -1;
}

// The lens of one residual row, naively: final norm, unembedding, softmax (double).
std::vector<double> naive_lens(const ds::Model& m, const std::vector<float>& head, const std::vector<double>& x) {
  const ds::Config& c = m.cfg;
  const int d = c.d_model, V = c.vocab_size;
  std::vector<double> y = x;
  if (c.final_norm) {
    const ds::Norm& n = m.w.ln_final;
    double mean = 0, var = 0;
    if (c.norm == ds::NormKind::RMSNorm) {
      for (double v : y) var += v * v;
      var /= d;
    } else {
      for (double v : y) mean += v;
      mean /= d;
      for (double v : y) var += (v - mean) * (v - mean);
      var /= d;
    }
    const double inv = 1.0 / std::sqrt(var + c.norm_eps);
    for (int i = 0; i < d; ++i)
      y[size_t(i)] = (y[size_t(i)] - mean) * inv * double(n.g(i)) + (n.b.size() ? double(n.b(i)) : 0.0);
  }
  std::vector<double> p(static_cast<size_t>(V));
  for (int v = 0; v < V; ++v) {
    double acc = 0;
    for (int i = 0; i < d; ++i) acc += double(head[size_t(v) * d + i]) * y[size_t(i)];
    p[size_t(v)] = acc;
  }
  const double mx = *std::max_element(p.begin(), p.end());
  double z = 0;
  for (auto& v : p) z += v = std::exp(v - mx);
  for (auto& v : p) v /= z;
  return p;
}

// A generation recorded as the window records it (compact, the lens's top 5).
ds::Trace generate(std::shared_ptr<const ds::Model> m, int lens_k) {
  ds::SessionOptions o;
  o.sampler.temperature = 1.0f;
  o.sampler.seed = 11;
  o.steps = 12;
  o.record = dsgui::record_patterns(m->cfg);
  o.trace_options.compact = true;
  o.trace_options.lens_top_k = lens_k;
  ds::Session s(m, nullptr, o);
  s.start({1, 7, 3, 22, 9});
  while (!s.done()) s.step();
  return s.trace();
}

TEST(LensGrid, CommitmentIsTheFirstLayerFromWhichTheAnswerStays) {
  std::mt19937 g(5);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + int(g() % 9);
    std::vector<int> top1(static_cast<size_t>(n));
    for (auto& v : top1) v = int(g() % 3);
    EXPECT_EQ(dsgui::lens_commitment(top1.data(), n), naive_commitment(top1)) << "trial " << trial;
  }
  EXPECT_EQ(dsgui::lens_commitment(nullptr, 0), -1);
}

TEST(LensGrid, CellsEqualANaiveLensOfTheReferenceResidualStream) {
  for (bool llama : {false, true}) {
    SCOPED_TRACE(llama ? "llama-like, separate head" : "GPT-like, tied head");
    const ds::Config c = small_config(llama);
    auto m = std::make_shared<const ds::Model>(c, ds::Weights::random(c, 9, 0.3f));
    const ds::Weights ref_w = ds::Weights::random(c, 9, 0.3f);  // the same weights, untouched by the engine
    const ds::Trace t = generate(m, ds::kWindowLensTopK);
    const int last = int(t.steps.size()) - 1;
    dsgui::LensGrid grid;
    ASSERT_TRUE(grid.as_of(t, 1, last));
    const int P = t.positions(last);
    ASSERT_EQ(grid.positions(), P);
    ASSERT_EQ(grid.sources(), c.n_layers + 1);
    EXPECT_TRUE(grid.recorded());
    std::vector<int> ids;
    for (auto& ti : dsgui::tokens_as_of(t, last))
      if (ti.fed) ids.push_back(ti.id);
    ASSERT_EQ(int(ids.size()), P);
    ds::ref::Recorded rec;
    ds::ref::logits(c, ref_w, ids, {}, -1, -1, &rec);
    const ds::MatView W = m->w.head_view();
    std::vector<float> head(size_t(W.rows * W.cols));
    W.rows_f32(0, W.rows, head.data());
    int checked = 0, commits = 0;
    for (int pos = 0; pos < P; ++pos) {
      ASSERT_TRUE(grid.known(pos)) << "position " << pos;
      std::vector<int> top1;
      bool tie = false;
      for (int s = 0; s <= c.n_layers; ++s) {
        const auto& x =
            s == 0 ? rec.blocks[0].resid_pre[size_t(pos)] : rec.blocks[size_t(s - 1)].resid_post[size_t(pos)];
        const std::vector<double> p = naive_lens(*m, head, x);
        std::vector<int> order(p.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
        std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                          [&](int u, int v) { return p[size_t(u)] > p[size_t(v)]; });
        top1.push_back(order[0]);
        const dsgui::LensCell& cell = grid.cell(s, pos);
        EXPECT_NEAR(cell.p(), p[size_t(order[0])], 3e-3) << "position " << pos << " source " << s;
        if (p[size_t(order[0])] - p[size_t(order[1])] < 5e-3) {
          tie = true;  // float32 against double may order a near tie either way
          continue;
        }
        EXPECT_EQ(cell.top(), order[0]) << "position " << pos << " source " << s;
        ++checked;
      }
      if (tie) continue;
      EXPECT_EQ(grid.commitment(pos), naive_commitment(top1)) << "position " << pos;
      ++commits;
    }
    EXPECT_GT(checked, P * (c.n_layers + 1) * 3 / 4);
    EXPECT_GT(commits, P / 2);
    // The matrix the view draws holds the top token's probability of each cell.
    const dsgui::Matrix mm = grid.matrix(2, 5);
    ASSERT_TRUE(mm.ok());
    ASSERT_EQ(mm.rows, c.n_layers + 1);
    ASSERT_EQ(mm.cols, 5);
    for (int s = 0; s < mm.rows; ++s)
      for (int col = 0; col < mm.cols; ++col) {
        EXPECT_EQ(mm.at(s, col), grid.cell(s, 2 + col).p());
        EXPECT_TRUE(mm.allowed(s, col));
      }
    // As of an earlier step: that step's positions.
    EXPECT_FALSE(grid.as_of(t, 1, last));
    EXPECT_TRUE(grid.as_of(t, 1, 3));
    EXPECT_EQ(grid.positions(), t.positions(3));
  }
}

// A trace recorded without the lens: the columns the engine computes (cmd::Lens, all
// rows of all columns through the head at once) equal those a trace with the lens holds.
TEST(LensGrid, EngineColumnsEqualTheRecordedLens) {
  dsgui::Worker w;
  w.post(dsgui::cmd::Load{"random:decoder", "", ds::Precision::F32});
  dsgui::cmd::Start st;
  st.prompt = "hello";
  w.post(std::move(st));
  w.post(dsgui::cmd::Step{6});
  ds::Trace t;
  auto drain = [&](auto on) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      const bool idle = !w.busy();
      for (auto& e : w.poll()) on(e);
      if (idle || std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  drain([&](dsgui::Event& e) {
    if (auto* l = std::get_if<dsgui::ev::Loaded>(&e)) t.config = l->info->cfg;
    if (auto* s = std::get_if<dsgui::ev::Step>(&e)) t.steps.push_back(std::move(s->step));
    if (auto* er = std::get_if<dsgui::ev::Error>(&e)) ADD_FAILURE() << er->msg;
  });
  ASSERT_EQ(t.steps.size(), 6u);
  const int last = 5, P = t.positions(last);
  dsgui::LensGrid want;
  want.as_of(t, 1, last);
  ds::Trace bare = t;  // the same run without the lens
  for (auto& s : bare.steps)
    for (auto it = s.tensors.begin(); it != s.tensors.end();)
      it = it->first.find(".lens.") != std::string::npos ? s.tensors.erase(it) : std::next(it);
  dsgui::LensGrid got;
  got.as_of(bare, 1, last);
  EXPECT_FALSE(got.recorded());
  EXPECT_EQ(got.known_count(), 0);
  dsgui::cmd::Lens c;
  c.version = 3;
  for (int p = 0; p < P; ++p) {
    dsgui::cmd::Lens::Column col;
    ASSERT_TRUE(dsgui::lens_column_inputs(bare, last, p, col));
    c.columns.push_back(std::move(col));
  }
  w.post(std::move(c));
  drain([&](dsgui::Event& e) {
    if (auto* l = std::get_if<dsgui::ev::Lens>(&e)) {
      EXPECT_EQ(l->lens.version, 3u);
      EXPECT_TRUE(got.put(l->lens));
    }
    if (auto* er = std::get_if<dsgui::ev::Error>(&e)) ADD_FAILURE() << er->msg;
  });
  ASSERT_EQ(got.known_count(), P);
  for (int p = 0; p < P; ++p) {
    for (int s = 0; s < got.sources(); ++s) {
      const dsgui::LensCell &a = got.cell(s, p), &b = want.cell(s, p);
      ASSERT_EQ(a.n, b.n);
      EXPECT_EQ(a.top(), b.top()) << "position " << p << " source " << s;
      EXPECT_NEAR(a.p(), b.p(), 2e-3);  // the recorded probabilities are float16
      EXPECT_EQ(got.text(a.top()), want.text(b.top()));
    }
    EXPECT_EQ(got.commitment(p), want.commitment(p));
  }
}

}  // namespace
