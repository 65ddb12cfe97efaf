// The Block and KV cache views' data: the stages follow the Config's block layout, every
// stage points at code that exists in core/model/reference.cpp (as embedded), and the
// worker's snapshot of one token's trip through a layer agrees with what an ordinary
// session records at the same hook points (the score the view writes out for a key is
// the recorded attn.scores cell; the cache rows are the keys and values each step made).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "engine_link/block_data.h"
#include "engine_link/models.h"
#include "engine_link/worker.h"
#include "model/mask.h"
#include "session/session.h"

namespace {

using dsgui::Stage;
using dsgui::StageKind;

ds::Config config(bool post, bool enc_dec, bool final_norm) {
  ds::Config c;
  c.d_model = 32, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 4, c.d_head = 8, c.d_ff = 64, c.vocab_size = 40;
  c.norm_place = post ? ds::NormPlace::Post : ds::NormPlace::Pre;
  c.encoder_decoder = enc_dec, c.n_enc_layers = enc_dec ? 2 : 0;
  c.final_norm = final_norm;
  return c;
}

int index_of(const std::vector<Stage>& s, const std::string& id) {
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i].id == id) return int(i);
  return -1;
}

// Gemma 3's block (model/config.h): RMSNorm pre-norm, rotary (half style), q/k norms,
// sandwich norms, a GELU-tanh gate, no biases; a sliding window of 4 on layer 0, layer 1
// global.
ds::Config gemma_like() {
  ds::Config c = config(false, false, true);
  c.norm = ds::NormKind::RMSNorm, c.pos = ds::PosKind::Rotary, c.rope_style = ds::RopeStyle::Half;
  c.ffn = ds::FFNKind::GeGLU, c.attn_bias = c.ffn_bias = c.norm_bias = false;
  c.n_kv_heads = 2, c.qk_norm = true, c.sandwich_norm = true, c.scale_embed = true;
  c.sliding_window = 4, c.sliding_layers = {1, 0};
  c.validate();
  return c;
}

// The stages' ids in order.
std::vector<std::string> ids(const std::vector<Stage>& s) {
  std::vector<std::string> out;
  for (const Stage& st : s) out.push_back(st.id);
  return out;
}

// Pre-norm: x += f(ln(x)), the norm before its sub-layer; post-norm: x = ln(x + f(x)),
// the norm after the add (model/config.h). Cross-attention only in encoder-decoder
// decoders; the final norm and the logits only after the last layer.
TEST(BlockStages, FollowTheBlockLayoutOfTheConfig) {
  for (bool post : {false, true})
    for (bool ed : {false, true})
      for (int layer : {0, 1}) {
        const ds::Config c = config(post, ed, !post);
        const auto s = dsgui::block_stages(c, layer);
        SCOPED_TRACE(std::string(post ? "post" : "pre") + (ed ? " enc-dec" : " decoder") + " layer " +
                     std::to_string(layer));
        ASSERT_EQ(s.front().kind, StageKind::Input);
        const int ln1 = index_of(s, "ln1"), add1 = index_of(s, "add1"), qkv = index_of(s, "attn.qkv");
        // The FFN's norm and add: LN2 / add2 of a decoder-only block, LN3 / add3 of an
        // encoder-decoder one (its LN2 comes before the cross-attention).
        const int ln3 = index_of(s, ed ? "ln3" : "ln2"), add3 = index_of(s, ed ? "add3" : "add2"),
                  up = index_of(s, "mlp.up");
        ASSERT_TRUE(ln1 > 0 && add1 > 0 && qkv > 0 && ln3 > 0 && add3 > 0 && up > 0);
        if (post) {
          EXPECT_EQ(ln1, add1 + 1);
          EXPECT_EQ(ln3, add3 + 1);
          EXPECT_LT(qkv, add1);
        } else {
          EXPECT_EQ(qkv, ln1 + 1);
          EXPECT_EQ(up, ln3 + 1);
        }
        EXPECT_EQ(index_of(s, "cross_attn.qkv") >= 0, ed);
        EXPECT_EQ(index_of(s, "ln3") >= 0, ed);
        const bool last = layer == c.n_layers - 1;
        EXPECT_EQ(index_of(s, "logits") >= 0, last);
        EXPECT_EQ(index_of(s, "ln_final") >= 0, last && c.final_norm);
        EXPECT_EQ(index_of(s, "output") >= 0, !last);
        // The attention steps in the order of the math.
        const char* order[] = {"attn.qkv", "attn.scores", "attn.mask", "attn.softmax", "attn.z", "attn.out", "add1"};
        for (size_t i = 1; i < std::size(order); ++i) EXPECT_EQ(index_of(s, order[i]), index_of(s, order[i - 1]) + 1);
      }
}

// Gemma 3: a q/k norm stage after the projections, a norm after each sub-layer before its
// add, the GELU-tanh gate, the sliding window in the mask of the layers that have one.
TEST(BlockStages, DrawTheBlockAGemmaModelReallyHas) {
  const ds::Config c = gemma_like();
  const auto s0 = dsgui::block_stages(c, 0), s1 = dsgui::block_stages(c, 1);
  const std::vector<std::string> want = {
      "input",     "ln1",  "attn.qkv", "attn.qk_norm", "attn.scores", "attn.mask", "attn.softmax", "attn.z", "attn.out",
      "post_attn", "add1", "ln2",      "mlp.up",       "mlp.act",     "mlp.down",  "post_ffn",     "add2",   "output"};
  EXPECT_EQ(ids(s0), want);
  const Stage& qkv = s0[size_t(index_of(s0, "attn.qkv"))];
  const Stage& qkn = s0[size_t(index_of(s0, "attn.qk_norm"))];
  // attn.q and attn.k are published after the q/k norm and rotary: the projections'
  // stage shows v, the norm's stage q (and k).
  EXPECT_EQ(qkv.hook, "attn.v");
  EXPECT_EQ(qkn.hook, "attn.q");
  EXPECT_EQ(qkn.kind, StageKind::QKNorm);
  EXPECT_NE(qkn.equation.find("\u03b3_q"), std::string::npos);
  EXPECT_NE(std::find(qkn.functions.begin(), qkn.functions.end(), "norm_heads"), qkn.functions.end());
  EXPECT_NE(std::find(qkn.functions.begin(), qkn.functions.end(), "rotate"), qkn.functions.end());
  EXPECT_EQ(std::find(qkv.functions.begin(), qkv.functions.end(), "rotate"), qkv.functions.end());
  // No biases anywhere.
  for (const Stage& st : s0) EXPECT_EQ(st.equation.find("b_"), std::string::npos) << st.id << ": " << st.equation;
  // The sandwich norms: derived from the stream after the add, drawn as norms.
  const Stage& pa = s0[size_t(index_of(s0, "post_attn"))];
  const Stage& pf = s0[size_t(index_of(s0, "post_ffn"))];
  EXPECT_EQ(pa.kind, StageKind::SubNorm);
  EXPECT_EQ(pa.hook, "resid_mid");
  EXPECT_EQ(pf.hook, "resid_post");
  EXPECT_NE(s0[size_t(index_of(s0, "add1"))].equation.find("RMSNorm(SelfAttention"), std::string::npos);
  // The gate.
  const Stage& act = s0[size_t(index_of(s0, "mlp.act"))];
  EXPECT_EQ(act.label, "GELU-tanh gate");
  EXPECT_NE(act.equation.find("gelu_tanh(x W_gate)"), std::string::npos);
  EXPECT_NE(s0[size_t(index_of(s0, "mlp.up"))].equation.find("x W_up"), std::string::npos);
  // The window on layer 0 only.
  const Stage& m0 = s0[size_t(index_of(s0, "attn.mask"))];
  const Stage& m1 = s1[size_t(index_of(s1, "attn.mask"))];
  EXPECT_NE(m0.title.find("sliding window of 4"), std::string::npos) << m0.title;
  EXPECT_NE(m0.explain.find("keys p\u22123..p"), std::string::npos) << m0.explain;
  EXPECT_EQ(m1.title, "The causal mask");
  EXPECT_EQ(m1.title.find("window"), std::string::npos);
  EXPECT_NE(dsgui::block_summary(c, 0).find("sliding window of 4"), std::string::npos);
  EXPECT_NE(dsgui::block_summary(c, 1).find("global attention"), std::string::npos);
  for (int l : {0, 1}) {
    const std::string sum = dsgui::block_summary(c, l);
    EXPECT_NE(sum.find("q/k norms"), std::string::npos) << sum;
    EXPECT_NE(sum.find("norms after each sub-layer"), std::string::npos) << sum;
  }
  // The embedding's scale; the last layer's softcapped logits.
  EXPECT_NE(s0[0].equation.find("\u221a32"), std::string::npos) << s0[0].equation;
  ds::Config capped = c;
  capped.logit_softcap = 30;
  const auto last = dsgui::block_stages(capped, 1);
  EXPECT_NE(last[size_t(index_of(last, "logits"))].equation.find("tanh"), std::string::npos);
}

// The norms as the seeds name them: a decoder-only block is x + Attn(LN1(x)), then
// + FFN(LN2(.)) (pre-norm; post-norm: LN1 after the attention's add, LN2 after the FFN's);
// an encoder-decoder decoder block has LN1, LN2 around the cross-attention, LN3 around
// the FFN. Each norm's label says its name, and its hook is one the snapshot subscribes
// to (the engine calls a decoder-only block's second norm ln3).
TEST(BlockStages, NormsAreNamedAsTheSeedsDrawThem) {
  for (bool post : {false, true})
    for (bool ed : {false, true}) {
      const ds::Config c = config(post, ed, true);
      SCOPED_TRACE(std::string(post ? "post" : "pre") + (ed ? " enc-dec" : " decoder"));
      const auto s = dsgui::block_stages(c, 0);
      // The sub-layers in order, each with the norm the layout puts next to it.
      std::vector<std::pair<int, std::string>> want;  // (sub-layer group, norm name)
      want.push_back({0, "LN1"});
      if (ed) want.push_back({1, "LN2"});
      want.push_back({2, ed ? "LN3" : "LN2"});
      std::vector<std::pair<int, std::string>> got;
      const auto hooks = dsgui::snapshot_hooks(c, 0);
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i].kind != StageKind::Norm) continue;
        // Pre-norm: the next stage starts its sub-layer. Post-norm: the norm follows the
        // add that closes its sub-layer (the stage before the add is the sub-layer's).
        const int group = post ? s[i - 2].group : s[i + 1].group;
        if (post) {
          EXPECT_EQ(s[i - 1].kind, StageKind::Add) << "before " << s[i].id;
        } else {
          EXPECT_EQ(s[i + 1].kind, group == 2 ? StageKind::FFNUp : StageKind::QKV) << "after " << s[i].id;
        }
        std::string name = "LN" + std::to_string(s[i].norm);
        EXPECT_NE(s[i].label.find(name), std::string::npos) << s[i].label;
        EXPECT_NE(s[i].title.find(name), std::string::npos) << s[i].title;
        EXPECT_NE(std::find(hooks.begin(), hooks.end(), "blocks.0." + s[i].hook), hooks.end()) << s[i].hook;
        got.push_back({group, name});
      }
      EXPECT_EQ(got, want);
      // No "LN3" anywhere in a decoder-only block's names.
      if (!ed) {
        for (const Stage& st : s) {
          EXPECT_EQ(st.label.find("LN3"), std::string::npos) << st.label;
          EXPECT_EQ(st.title.find("LN3"), std::string::npos) << st.title;
        }
      }
    }
}

// The colour scale the rows of a stage share is the largest |value| among them, and the
// normalised row is (x - mean) / sqrt(var + eps) (LayerNorm) or x / rms(x) (RMSNorm),
// recomputed here from the definitions.
TEST(BlockStrips, NormRowsShareOneScaleAndStandardizeX) {
  ds::Config c = config(false, false, true);
  const std::vector<float> x = {3.0f, -1.0f, 0.5f, 7.0f, -4.5f, 2.0f};
  const std::vector<float> out = {0.3f, -0.1f, 0.05f, 0.7f, -0.45f, 0.2f};
  for (ds::NormKind k : {ds::NormKind::LayerNorm, ds::NormKind::RMSNorm}) {
    c.norm = k;
    const auto rows = dsgui::norm_rows(x, out, c);
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[0].v, x);
    EXPECT_EQ(rows[2].v, out);
    double mean = 0, sq = 0;
    for (float v : x) mean += v / 6.0;
    if (k == ds::NormKind::RMSNorm) mean = 0;
    for (float v : x) sq += (v - mean) * (v - mean) / 6.0;
    ASSERT_EQ(rows[1].v.size(), x.size());
    float biggest = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_NEAR(rows[1].v[i], (x[i] - mean) / std::sqrt(sq + c.norm_eps), 1e-5) << i;
      biggest = std::max({biggest, std::fabs(x[i]), std::fabs(rows[1].v[i]), std::fabs(out[i])});
    }
    EXPECT_FLOAT_EQ(dsgui::shared_scale(rows), 7.0f);
    EXPECT_FLOAT_EQ(dsgui::shared_scale(rows), biggest);
  }
  EXPECT_TRUE(dsgui::standardized({}, ds::NormKind::LayerNorm, 1e-5f).empty());
  EXPECT_EQ(dsgui::shared_scale({}), 1.0f);
}

// The number tables' default: the last positions up to the selected one, the first
// features; a pick out of range is brought back inside.
TEST(BlockStrips, NumberTablesPickTheLastPositionsAndFirstFeatures) {
  const dsgui::TablePick p = dsgui::TablePick::around(9, 16);
  EXPECT_EQ(p.pos0, 6);
  EXPECT_EQ(p.pos1, 9);
  EXPECT_EQ(p.dim0, 0);
  EXPECT_EQ(p.dims, 6);
  const dsgui::TablePick q = dsgui::TablePick::around(1, 4);
  EXPECT_EQ(q.pos0, 0);
  EXPECT_EQ(q.dims, 4);
  dsgui::TablePick bad;
  bad.pos0 = 12, bad.pos1 = 50, bad.dim0 = 14, bad.dims = 9;
  const dsgui::TablePick c = bad.clamped(10, 16);
  EXPECT_EQ(c.pos1, 9);
  EXPECT_EQ(c.pos0, 9);
  EXPECT_EQ(c.dim0, 14);
  EXPECT_EQ(c.dims, 2);
}

// Without the new flags the block keeps its stages: no q/k norm, no sandwich norm.
TEST(BlockStages, OnlyTheFlagsAModelHasAddStages) {
  for (bool post : {false, true}) {
    const auto s = dsgui::block_stages(config(post, false, true), 0);
    EXPECT_EQ(index_of(s, "attn.qk_norm"), -1);
    EXPECT_EQ(index_of(s, "post_attn"), -1);
    EXPECT_EQ(index_of(s, "post_ffn"), -1);
    EXPECT_EQ(s[size_t(index_of(s, "attn.qkv"))].hook, "attn.q");
  }
  ds::Config qwen3 = gemma_like();
  qwen3.sandwich_norm = false, qwen3.sliding_window = 0, qwen3.sliding_layers = {};
  const auto s = dsgui::block_stages(qwen3, 0);
  EXPECT_EQ(index_of(s, "attn.qk_norm"), index_of(s, "attn.qkv") + 1);
  EXPECT_EQ(index_of(s, "post_attn"), -1);
  EXPECT_EQ(s[size_t(index_of(s, "attn.mask"))].title, "The causal mask");
}

// Biases where the weights have them: Qwen2 has q, k and v biases and no output bias,
// though its Config says attn_bias for all four.
TEST(BlockStages, BiasesOnlyWhereTheWeightsHaveThem) {
  ds::Config c = config(false, false, true);
  c.norm = ds::NormKind::RMSNorm, c.pos = ds::PosKind::Rotary, c.ffn = ds::FFNKind::SwiGLU, c.ffn_bias = false;
  const dsgui::Biases qwen2{true, true, true, false, false, false};
  const auto s = dsgui::block_stages(c, 0, &qwen2);
  const std::string qkv = s[size_t(index_of(s, "attn.qkv"))].equation;
  EXPECT_NE(qkv.find("x W_Q + b_Q"), std::string::npos) << qkv;
  EXPECT_NE(qkv.find("x W_V + b_V"), std::string::npos) << qkv;
  EXPECT_EQ(s[size_t(index_of(s, "attn.out"))].equation.find("b_O"), std::string::npos);
  EXPECT_EQ(s[size_t(index_of(s, "mlp.down"))].equation.find("b_"), std::string::npos);
  // Null: as the Config says (GPT-2: every map has a bias).
  const auto g = dsgui::block_stages(config(false, false, true), 0);
  EXPECT_NE(g[size_t(index_of(g, "attn.out"))].equation.find("b_O"), std::string::npos);
  EXPECT_NE(g[size_t(index_of(g, "mlp.up"))].equation.find("b\u2081"), std::string::npos);
}

// The score written out for a key: the model's own scale when it has one, and with no
// recorded mask the rule of the layer (its sliding window included).
TEST(ScoreArithmetic, UsesTheModelsScaleAndTheLayersWindow) {
  dsgui::BlockSnapshot s;
  s.cfg = config(false, false, true);
  s.cfg.n_heads = s.cfg.n_kv_heads = 1, s.cfg.d_head = 2, s.cfg.d_model = 2;
  s.cfg.sliding_window = 3, s.cfg.sliding_layers = {1, 0};
  s.layer = 0, s.positions = 6, s.pos = 5;
  s.row["attn.q"] = {1, 2};
  for (int p = 0; p < 6; ++p) s.k.insert(s.k.end(), {float(p), 1.0f});
  for (int key = 0; key < 6; ++key) {
    const dsgui::ScoreArithmetic a = dsgui::score_arithmetic(s, 0, key);
    ASSERT_TRUE(a.ok);
    EXPECT_DOUBLE_EQ(a.dot, key + 2.0);
    EXPECT_NEAR(a.scaled, (key + 2.0) / std::sqrt(2.0), 1e-12);
    EXPECT_EQ(a.masked, key <= 2) << key;  // keys 3..5 are the window of 3 ending at 5
  }
  s.layer = 1;  // global
  EXPECT_FALSE(dsgui::score_arithmetic(s, 0, 0).masked);
  s.cfg.attn_scale = 0.5f;
  const dsgui::ScoreArithmetic a = dsgui::score_arithmetic(s, 0, 4);
  EXPECT_DOUBLE_EQ(a.scaled, 3.0);
  EXPECT_NE(a.text.find("\u00d7 0.5 = 3"), std::string::npos) << a.text;
}

TEST(BlockStages, EveryStageShowsCodeOfTheReferenceAsItIsOnDisk) {
  std::ifstream f(std::string(DS_SOURCE_DIR) + "/core/model/reference.cpp");
  ASSERT_TRUE(f.good());
  std::stringstream disk;
  disk << f.rdbuf();
  EXPECT_EQ(dsgui::reference_source(), disk.str());
  ds::Config llama = config(false, false, true);
  llama.norm = ds::NormKind::RMSNorm, llama.pos = ds::PosKind::Rotary, llama.ffn = ds::FFNKind::SwiGLU;
  ds::Config sinus = config(true, true, false);
  sinus.pos = ds::PosKind::Sinusoidal, sinus.ffn = ds::FFNKind::ReLU;
  ds::Config qwen3 = gemma_like();  // q/k norms alone, SwiGLU
  qwen3.sandwich_norm = false, qwen3.ffn = ds::FFNKind::SwiGLU, qwen3.sliding_window = 0, qwen3.sliding_layers = {};
  for (const ds::Config& c : {config(false, false, true), config(true, true, false), llama, sinus, gemma_like(), qwen3})
    for (int layer : {0, 1})
      for (const Stage& st : dsgui::block_stages(c, layer)) {
        EXPECT_FALSE(st.functions.empty()) << st.id;
        EXPECT_FALSE(st.equation.empty()) << st.id;
        for (const std::string& fn : st.functions) {
          int first = 0;
          std::string text;
          ASSERT_TRUE(dsgui::reference_function(fn, first, text)) << st.id << ": " << fn;
          EXPECT_NE(text.find(" " + fn + "("), std::string::npos) << fn;
          EXPECT_EQ(text.substr(text.size() - 2), "}\n") << fn;
          // The line number points at the same text in the file.
          std::istringstream is(dsgui::reference_source());
          std::string line;
          for (int i = 0; i < first; ++i) std::getline(is, line);
          EXPECT_EQ(line, text.substr(0, text.find('\n'))) << fn;
        }
      }
  int first = 0;
  std::string text;
  EXPECT_FALSE(dsgui::reference_function("no_such_function", first, text));
}

std::shared_ptr<const dsgui::BlockSnapshot> inspect(dsgui::Worker& w, const std::vector<int>& tokens,
                                                    const std::vector<int>& src, int layer, int pos, int head) {
  dsgui::cmd::Inspect c;
  c.tokens = tokens, c.src = src, c.layer = layer, c.pos = pos, c.head = head, c.key = 77;
  w.post(std::move(c));
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    for (auto& e : w.poll()) {
      if (const auto* err = std::get_if<dsgui::ev::Error>(&e)) ADD_FAILURE() << err->msg;
      if (const auto* a = std::get_if<dsgui::ev::Inspect>(&e)) return a->answer;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return nullptr;
}

bool close(double a, double b, double tol = 2e-4) { return std::fabs(a - b) <= tol * (1 + std::fabs(b)); }

// A session records every hook of a layer at full precision, step by step with the KV
// cache; the snapshot (one prefill to the selected position, then the rest) must find
// the same numbers: the keys and values of every position, the selected row of every
// point, and the score arithmetic the view writes out. steps: how many steps the
// session takes; pos: the selected position (-1: the last but one).
void check_snapshot_against_session(const std::string& spec, int steps = 6, int pos = 1, int layer = -1) {
  SCOPED_TRACE(spec);
  ds::LoadedModel lm = dsgui::open_model(spec, "");
  const ds::Config& cfg = lm.model->cfg;
  ds::SessionOptions o;
  o.sampler.temperature = 0;
  o.steps = std::min(cfg.max_seq, steps + 3);
  o.record = {"blocks.*.attn.**", "blocks.*.resid_post", "blocks.*.mlp.post"};
  ds::Session sess(lm.model, lm.tokenizer, o);
  std::vector<int> src;
  if (cfg.encoder_decoder) src = {5, 6, 7, 8, 9};
  sess.start({cfg.bos_id >= 0 ? cfg.bos_id : 1, 4, 5}, src);
  while (sess.step() >= 0 && sess.trace().steps.size() < size_t(steps)) {
  }
  const ds::Trace& t = sess.trace();
  std::vector<int> tokens = t.tokens();
  const int n = t.positions(int(t.steps.size()) - 1);
  tokens.resize(size_t(n));
  dsgui::Worker w;
  w.post(dsgui::cmd::Load{spec, "", ds::Precision::F32});
  if (layer < 0) layer = cfg.n_layers - 1;
  if (pos < 0) pos = n - 2;
  const int head = cfg.n_heads - 1;
  auto s = inspect(w, tokens, src, layer, pos, head);
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->error.empty()) << s->error;
  const int kvd = cfg.kv_dim(), S = n;
  const std::string L = "blocks." + std::to_string(layer) + ".";
  // Keys and values of every position, step by step.
  ASSERT_EQ(s->k.size(), size_t(n) * kvd);
  for (const ds::TraceStep& st : t.steps) {
    const ds::Tensor& k = st.tensors.at(L + "attn.k");
    const ds::Tensor& v = st.tensors.at(L + "attn.v");
    for (int64_t i = 0; i < k.size(); ++i) {
      ASSERT_TRUE(close(s->k[size_t(st.pos0) * kvd + size_t(i)], k.data[size_t(i)])) << "k at step pos0 " << st.pos0;
      ASSERT_TRUE(close(s->v[size_t(st.pos0) * kvd + size_t(i)], v.data[size_t(i)]));
    }
  }
  // The score the view writes out for each key is the recorded cell (the step that
  // computed position `pos` recorded row pos - pos0), masked cells included.
  const ds::TraceStep& st = t.steps[size_t(t.step_of(pos))];
  const ds::Tensor& sc = st.tensors.at(L + "attn.scores");
  const int T = sc.shape[1], Ss = sc.shape[2], r = pos - st.pos0;
  for (int j = 0; j < S; ++j) {
    const dsgui::ScoreArithmetic a = dsgui::score_arithmetic(*s, head, j);
    ASSERT_TRUE(a.ok);
    // The rule of the layer: causal, with its sliding window when it has one.
    EXPECT_EQ(a.masked,
              !ds::may_attend(ds::AttnKind::Causal, pos, j, {}, -1, cfg.sliding(layer) ? cfg.sliding_window : 0))
        << j;
    if (j < Ss && a.masked) {
      EXPECT_TRUE(std::isinf(sc.data[(size_t(head) * T + r) * Ss + j])) << j;
    }
    if (j < Ss && !a.masked) {
      const float rec = sc.data[(size_t(head) * T + r) * Ss + j];
      EXPECT_TRUE(close(a.scaled, rec)) << "key " << j << ": " << a.scaled << " vs recorded " << rec;
      EXPECT_TRUE(close(a.scaled, s->row.at("attn.scores")[size_t(head) * S + j]));
      EXPECT_NE(a.text.find("q \u00b7 k ="), std::string::npos);
    }
  }
  // The selected row of the other points.
  const std::vector<float>& post = s->row.at("resid_post");
  const ds::Tensor& rp = st.tensors.at(L + "resid_post");
  for (int i = 0; i < cfg.d_model; ++i) ASSERT_TRUE(close(post[size_t(i)], rp.data[size_t(r) * cfg.d_model + i]));
  if (layer + 1 < cfg.n_layers) return;  // the logits come with the last layer's snapshot
  ASSERT_FALSE(s->top_ids.empty());
  EXPECT_GE(s->top_probs.front(), s->top_probs.back());
}

TEST(BlockSnapshot, AgreesWithWhatTheSessionRecordsOnADecoder) { check_snapshot_against_session("random:decoder"); }
TEST(BlockSnapshot, AgreesWithWhatTheSessionRecordsOnAnEncoderDecoder) {
  check_snapshot_against_session("random:encdec");
}

// The shared GGUF fixtures (tiny models llama.cpp wrote), when they are there.
std::string gguf_fixture(const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::path(DS_SOURCE_DIR) / ".." / "shared" / "fixtures" / "gguf" / "models" / name;
  return std::filesystem::exists(p) ? p.string() : "";
}

// Gemma 3 (q/k norms, sandwich norms, GeGLU, a sliding window of 16 on its first layers):
// a position 20 tokens in, whose window leaves the first keys out.
TEST(BlockSnapshot, AgreesWithWhatTheSessionRecordsOnAGemma3Gguf) {
  const std::string f = gguf_fixture("gemma3-Q4_K_M.gguf");
  if (f.empty()) GTEST_SKIP() << "../shared/fixtures/gguf is absent";
  const ds::LoadedModel lm = dsgui::open_model(f, "");
  ASSERT_TRUE(lm.model->cfg.sliding(0));
  check_snapshot_against_session(f, 22, -1, 0);
  check_snapshot_against_session(f, 6, 1, lm.model->cfg.n_layers - 1);
}

// Qwen2's biases: q, k and v, no output bias; the snapshot says which the layer has.
TEST(BlockSnapshot, SaysWhichBiasesAQwen2GgufHas) {
  const std::string f = gguf_fixture("qwen2-Q8_0.gguf");
  if (f.empty()) GTEST_SKIP() << "../shared/fixtures/gguf is absent";
  check_snapshot_against_session(f);
  dsgui::Worker w;
  w.post(dsgui::cmd::Load{f, "", ds::Precision::F32});
  auto s = inspect(w, {1, 429, 491}, {}, 0, 2, 0);
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->error.empty()) << s->error;
  EXPECT_TRUE(s->biases.q && s->biases.k && s->biases.v);
  EXPECT_FALSE(s->biases.o || s->biases.up || s->biases.down);
  const auto st = dsgui::block_stages(s->cfg, 0, &s->biases);
  EXPECT_EQ(st[size_t(index_of(st, "attn.out"))].equation.find("b_O"), std::string::npos);
}

// Which keys a query was multiplied with: with the KV cache, those of the step that fed
// the query (its recorded attn.scores has exactly that many key columns); without the
// cache, every key of the prefix as of the step shown (its recorded scores are that wide).
TEST(ComputedKeys, MatchTheKeysEachStepRecorded) {
  for (bool cached : {true, false}) {
    SCOPED_TRACE(cached ? "with the cache" : "without the cache");
    ds::LoadedModel lm = dsgui::open_model("random:decoder", "");
    ds::SessionOptions o;
    o.sampler.temperature = 0;
    o.steps = 8;
    o.kv_cache = cached;
    o.record = {"blocks.0.attn.scores"};
    ds::Session sess(lm.model, lm.tokenizer, o);
    sess.start({1, 4, 5, 6}, {});
    while (sess.step() >= 0 && sess.trace().steps.size() < 5) {
    }
    const ds::Trace& t = sess.trace();
    const int last = int(t.steps.size()) - 1, n = t.positions(last);
    ASSERT_GT(n, 5);
    for (int pos = 0; pos < n; ++pos) {
      const int s = t.step_of(pos);
      const ds::Tensor& rec = t.steps[size_t(cached ? s : last)].tensors.at("blocks.0.attn.scores");
      EXPECT_EQ(dsgui::computed_keys(t, last, pos), int(rec.shape[2])) << "position " << pos;
    }
    EXPECT_EQ(dsgui::computed_keys(t, 99, 0), 0);
  }
}

// The snapshot's queries of every position are the ones the session recorded.
TEST(BlockSnapshot, KeepsTheQueriesOfEveryPosition) {
  const std::string spec = "random:decoder";
  ds::LoadedModel lm = dsgui::open_model(spec, "");
  const ds::Config& cfg = lm.model->cfg;
  ds::SessionOptions o;
  o.sampler.temperature = 0;
  o.steps = 8;
  o.record = {"blocks.1.attn.q"};
  ds::Session sess(lm.model, lm.tokenizer, o);
  sess.start({1, 4, 5}, {});
  while (sess.step() >= 0 && sess.trace().steps.size() < 4) {
  }
  const ds::Trace& t = sess.trace();
  std::vector<int> tokens = t.tokens();
  const int n = t.positions(int(t.steps.size()) - 1);
  tokens.resize(size_t(n));
  dsgui::Worker w;
  w.post(dsgui::cmd::Load{spec, "", ds::Precision::F32});
  auto s = inspect(w, tokens, {}, 1, 1, 0);
  ASSERT_TRUE(s && s->error.empty());
  const int qd = cfg.n_heads * cfg.d_head;
  ASSERT_EQ(s->q_all.size(), size_t(n) * qd);
  for (const ds::TraceStep& st : t.steps) {
    const ds::Tensor& q = st.tensors.at("blocks.1.attn.q");
    for (int64_t i = 0; i < q.size(); ++i)
      ASSERT_NEAR(s->q_all[size_t(st.pos0) * qd + size_t(i)], q.data[size_t(i)],
                  2e-4 * (1 + std::fabs(q.data[size_t(i)])));
  }
}

TEST(BlockSnapshot, BadRequestsEndInAMessage) {
  dsgui::Worker w;
  auto none = inspect(w, {1, 2}, {}, 0, 0, 0);
  ASSERT_TRUE(none);
  EXPECT_NE(none->error.find("model"), std::string::npos);
  w.post(dsgui::cmd::Load{"random:decoder", "", ds::Precision::F32});
  for (auto [tokens, layer, pos] : std::vector<std::tuple<std::vector<int>, int, int>>{
           {{}, 0, 0}, {{1, 2}, 99, 0}, {{1, 2}, 0, 5}, {{1, 100000}, 0, 0}}) {
    auto s = inspect(w, tokens, {}, layer, pos, 0);
    ASSERT_TRUE(s);
    EXPECT_FALSE(s->error.empty());
  }
}

}  // namespace
