// A saved trace is checked before it is trusted. A real trace written by a session is
// damaged one field at a time (with nlohmann::json, not with the reader under test):
// every damage must end in a ds::Error naming the field, never in a crash, an abort,
// a raw parser message or a trace drawn without a word; the undamaged trace must
// still load and equal what was saved.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "helpers.h"
#include "probe/trace.h"
#include "session/session.h"
#include "util/error.h"

using namespace ds;
using nlohmann::json;

namespace {

// A real trace: every hook point recorded, the logit lens, a sampled generation.
Trace make_trace(bool encdec) {
  const Config c = test::small_config(encdec ? test::Arch::EncDec : test::Arch::GPT2);
  auto m = test::random_model(c, 7);
  SessionOptions o;
  o.sampler = {0.8f, 10, 0.9f, 3};
  o.steps = 10;  // positions, the prompt's included
  o.record = {"**"};
  o.trace_options.lens_top_k = 3;
  Session s(m, nullptr, o);
  s.start({1, 4, 9}, encdec ? std::vector<int>{5, 6, 7, 8} : std::vector<int>{});
  while (!s.done()) s.step();
  Trace t = s.trace();
  t.model_name = "tiny";
  t.steps[0].token_text = {{3, "c"}, {4, "d"}};
  return t;
}

std::string text_of(const Trace& t) {
  std::ostringstream os;
  t.write_json(os);
  return os.str();
}

// The message read_json ends with; "(loaded)" when it loads.
std::string message_of(const std::string& text) {
  std::istringstream is(text);
  try {
    Trace::read_json(is);
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("NOT A ds::Error: ") + e.what();
  }
  return "(loaded)";
}

// A message a teacher can read: it names something, and never is library text.
void expect_clear(const std::string& msg, const std::string& names) {
  EXPECT_NE(msg, "(loaded)");
  EXPECT_EQ(msg.find("NOT A ds::Error"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find(names), std::string::npos) << "message: " << msg << "\nshould name: " << names;
}

struct Damage {
  const char* what;
  std::function<void(json&)> apply;
  const char* names;  // a substring of the message: the field (and the step)
};

json& tensor(json& j, int step, const char* name) { return j["steps"][step]["tensors"][name]; }

// Replaces a tensor's shape and gives it as many values as that shape needs.
void reshape(json& t, std::vector<int> shape) {
  size_t n = 1;
  for (int d : shape) n *= size_t(d);
  t["shape"] = shape;
  t["data"] = std::vector<float>(n, 0.25f);
}

std::vector<Damage> decoder_damages(const Trace& t) {
  const int vocab = t.config.vocab_size, last = int(t.steps.size()) - 1;
  const int64_t big = int64_t(1) << 40;
  return {
      {"negative pos0", [](json& j) { j["steps"][1]["pos0"] = -5; }, "trace step 2: pos0 is -5 (must be 0 or more)"},
      {"pos0 beyond the context", [=](json& j) { j["steps"][last]["pos0"] = 5000; },
       "pos0 is 5000, beyond the model's context"},
      {"pos0 far beyond", [=](json& j) { j["steps"][last]["pos0"] = 20000; }, "max_seq"},
      {"pos0 of 2^40", [=](json& j) { j["steps"][last]["pos0"] = big; }, "pos0"},
      {"decreasing pos0", [](json& j) { j["steps"][2]["pos0"] = 1; }, "trace step 3: pos0"},
      {"duplicated step", [](json& j) { j["steps"].insert(j["steps"].begin() + 2, j["steps"][1]); },
       "trace step 3: pos0"},
      {"reversed steps", [](json& j) { std::swap(j["steps"][1], j["steps"][2]); }, "trace step 2: pos0"},
      {"first step not at 0", [](json& j) { j["steps"][0]["pos0"] = 1; }, "trace step 1: pos0"},
      {"context too short for the steps", [=](json& j) { j["model"]["config"]["max_seq"] = t.positions(last) - 1; },
       "max_seq"},
      {"pattern with 3 heads",
       [](json& j) {
         reshape(tensor(j, 1, "blocks.0.attn.pattern"), {3, 1, 4});
       },
       "trace step 2: tensor \"blocks.0.attn.pattern\" shape"},
      {"config with 2 heads",
       [](json& j) {
         j["model"]["config"]["n_heads"] = 2;
         j["model"]["config"]["n_kv_heads"] = 2;
       },
       "shape"},
      {"config with 3 layers", [](json& j) { j["model"]["config"]["n_layers"] = 1; }, "blocks.1"},
      {"d_model disagrees", [](json& j) { j["model"]["config"]["d_model"] = 16; }, "shape"},
      {"vocab disagrees", [](json& j) { j["model"]["config"]["vocab_size"] = 41; }, "tensor \"logits\" shape"},
      {"3-entry logits",
       [](json& j) {
         reshape(tensor(j, 0, "logits"), {1, 3});
       },
       "tensor \"logits\" shape"},
      {"logits data of 3 values",
       [](json& j) {
         tensor(j, 0, "logits")["data"] = {0.1, 0.2, 0.3};
       },
       "tensor \"logits\" data has 3 values"},
      {"pattern rows of another step",
       [](json& j) {
         reshape(tensor(j, 1, "blocks.1.attn.pattern"), {4, 2, 5});
       },
       "blocks.1.attn.pattern"},
      {"a tensor of no hook point",
       [](json& j) {
         reshape(tensor(j, 0, "blocks.7.attn.pattern"), {4, 3, 3});
       },
       "blocks.7.attn.pattern\" is not a hook point"},
      {"input id past the vocabulary", [=](json& j) { j["steps"][2]["input"][0] = vocab; },
       "trace step 3: input[0] is 40, outside the vocabulary"},
      {"input id of 2^40", [=](json& j) { j["steps"][2]["input"][0] = big; }, "trace step 3: input[0]"},
      {"negative input id", [](json& j) { j["steps"][0]["input"][1] = -1; }, "trace step 1: input[1]"},
      {"sampled token of 2^40", [=](json& j) { j["steps"][1]["sample"]["token"] = big; }, "sample token"},
      {"candidate id past the vocabulary", [=](json& j) { j["steps"][1]["sample"]["candidates"][0]["id"] = vocab; },
       "sample candidates[0] id"},
      {"lens id of 2^40", [=](json& j) { tensor(j, 1, "blocks.1.resid_post.lens.ids")["data"][0] = big; },
       "lens.ids\" data"},
      {"token_text of no token",
       [](json& j) {
         j["steps"][0]["token_text"] = {{"99999", "x"}};
       },
       "token_text"},
      {"pos0 as a string", [](json& j) { j["steps"][1]["pos0"] = "3"; }, "trace step 2: pos0 must be an integer"},
      {"input as an object",
       [](json& j) {
         j["steps"][1]["input"] = {{"a", 1}};
       },
       "trace step 2: input must be an array"},
      {"an id as a float", [](json& j) { j["steps"][1]["input"][0] = 2.5; }, "input[0]"},
      {"shape as a string", [](json& j) { tensor(j, 0, "logits")["shape"] = "[1, 40]"; },
       "\"logits\" shape must be an array"},
      {"data as an object", [](json& j) { tensor(j, 0, "logits")["data"] = json::object(); },
       "\"logits\" data must be an array"},
      {"a value as an object", [](json& j) { tensor(j, 0, "logits")["data"][3] = json::object(); }, "\"logits\" data"},
      {"a value as a word", [](json& j) { tensor(j, 0, "logits")["data"][3] = "many"; }, "\"logits\" data"},
      {"temperature as a string", [](json& j) { j["steps"][1]["sample"]["temperature"] = "hot"; },
       "sample temperature"},
      {"kv_cache as a number", [](json& j) { j["steps"][1]["kv_cache"] = 1; }, "kv_cache"},
      {"candidates as an object", [](json& j) { j["steps"][1]["sample"]["candidates"] = json::object(); },
       "candidates"},
      {"a probability of 7", [](json& j) { j["steps"][1]["sample"]["candidates"][0]["p_raw"] = 7; }, "p_raw"},
      {"tensors as an array", [](json& j) { j["steps"][1]["tensors"] = json::array(); }, "tensors"},
      {"a step as a number", [](json& j) { j["steps"][1] = 3; }, "trace step 2"},
      {"d_model as a string", [](json& j) { j["model"]["config"]["d_model"] = "32"; }, "d_model"},
      {"huge declared shape",
       [](json& j) {
         tensor(j, 1, "blocks.0.attn.pattern")["shape"] = {4, 1 << 24, 1 << 24};
       },
       "blocks.0.attn.pattern\" shape"},
      {"declared dimension of 2^40", [=](json& j) { tensor(j, 1, "blocks.0.attn.pattern")["shape"][1] = big; },
       "blocks.0.attn.pattern\" shape"},
      {"row norms of the wrong count",
       [](json& j) {
         json& r = tensor(j, 1, "blocks.0.resid_pre");
         r["storage"] = "row_norms";
       },
       "resid_pre\" data has"},
      {"an unknown storage", [](json& j) { tensor(j, 1, "blocks.0.resid_pre")["storage"] = "zip"; }, "storage"},
      {"a value too large for a float", [](json& j) { tensor(j, 0, "logits")["data"][0] = 1e300; }, "too large"},
      {"empty input", [](json& j) { j["steps"][2]["input"] = json::array(); }, "trace step 3: input is empty"},
      {"input_text of another length", [](json& j) { j["steps"][0]["input_text"] = {"a"}; }, "input_text"},
      {"version 99", [](json& j) { j["version"] = 99; }, "trace version 99"},
      {"version as a string", [](json& j) { j["version"] = "1"; }, "version"},
      {"no version", [](json& j) { j.erase("version"); }, "\"version\" is missing"},
      {"another format", [](json& j) { j["format"] = "other"; }, "\"format\""},
      {"header only", [](json& j) { j.erase("steps"); }, "\"steps\" is missing"},
      {"no steps", [](json& j) { j["steps"] = json::array(); }, "no steps"},
      {"steps as an object", [](json& j) { j["steps"] = json::object(); }, "\"steps\" must be an array"},
      {"no model config", [](json& j) { j["model"].erase("config"); }, "\"config\" is missing"},
      {"a source without an encoder",
       [](json& j) {
         j["source"] = {1, 2};
       },
       "source"},
  };
}

std::vector<Damage> encdec_damages(const Trace& t) {
  const int vocab = t.config.vocab_size;
  return {
      {"source id past the vocabulary", [=](json& j) { j["source"][1] = vocab; }, "trace source: source[1]"},
      {"source longer than max_src", [](json& j) { j["model"]["config"]["max_src"] = 3; }, "max_src"},
      {"encoder pattern with 3 heads",
       [](json& j) {
         reshape(j["encoder"]["encoder.blocks.0.attn.pattern"], {3, 4, 4});
       },
       "trace encoder: tensor \"encoder.blocks.0.attn.pattern\" shape"},
      {"cross pattern of another source",
       [](json& j) {
         reshape(tensor(j, 1, "blocks.0.cross_attn.pattern"), {4, 1, 5});
       },
       "trace step 2: tensor \"blocks.0.cross_attn.pattern\" shape"},
      {"cross keys in a step",
       [](json& j) { tensor(j, 1, "blocks.0.cross_attn.k") = j["encoder"]["blocks.0.cross_attn.k"]; },
       "belongs in \"encoder\""},
      {"an encoder layer too many", [](json& j) { j["model"]["config"]["n_enc_layers"] = 1; }, "encoder.blocks.1"},
  };
}

// Two traces are equal: every field read back is the one saved.
void expect_same(const Trace& a, const Trace& b) {
  EXPECT_EQ(a.model_name, b.model_name);
  EXPECT_EQ(a.config.describe(), b.config.describe());
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.source_text, b.source_text);
  auto same_tensors = [](const std::map<std::string, Tensor>& x, const std::map<std::string, Tensor>& y) {
    ASSERT_EQ(x.size(), y.size());
    for (const auto& [name, p] : x) {
      ASSERT_EQ(y.count(name), 1u) << name;
      const Tensor& q = y.at(name);
      ASSERT_EQ(p.shape, q.shape) << name;
      ASSERT_EQ(p.storage, q.storage) << name;
      ASSERT_EQ(p.data.size(), q.data.size()) << name;
      for (size_t i = 0; i < p.data.size(); ++i)
        ASSERT_TRUE(p.data[i] == q.data[i] || (std::isnan(p.data[i]) && std::isnan(q.data[i]))) << name << " " << i;
    }
  };
  same_tensors(a.encoder, b.encoder);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t s = 0; s < a.steps.size(); ++s) {
    const TraceStep &x = a.steps[s], &y = b.steps[s];
    EXPECT_EQ(x.pos0, y.pos0);
    EXPECT_EQ(x.input, y.input);
    EXPECT_EQ(x.input_text, y.input_text);
    EXPECT_EQ(x.token_text, y.token_text);
    EXPECT_EQ(x.kv_cache, y.kv_cache);
    same_tensors(x.tensors, y.tensors);
    ASSERT_EQ(x.sample.has_value(), y.sample.has_value());
    if (!x.sample) continue;
    EXPECT_EQ(x.sample->token, y.sample->token);
    EXPECT_EQ(x.sample->u, y.sample->u);
    EXPECT_EQ(x.sample->config.seed, y.sample->config.seed);
    ASSERT_EQ(x.sample->candidates.size(), y.sample->candidates.size());
    for (size_t i = 0; i < x.sample->candidates.size(); ++i) {
      EXPECT_EQ(x.sample->candidates[i].id, y.sample->candidates[i].id);
      EXPECT_EQ(x.sample->candidates[i].p_final, y.sample->candidates[i].p_final);
    }
  }
}

void run_damages(const Trace& t, const std::vector<Damage>& damages) {
  const json good = json::parse(text_of(t));
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    json j = good;
    d.apply(j);
    expect_clear(message_of(j.dump()), d.names);
  }
}

}  // namespace

TEST(TraceValidate, TheUndamagedTraceLoadsAndEqualsWhatWasSaved) {
  for (bool encdec : {false, true}) {
    const Trace t = make_trace(encdec);
    ASSERT_GE(t.steps.size(), encdec ? 2u : 4u);
    const std::string text = text_of(t);
    std::istringstream is(text);
    const Trace back = Trace::read_json(is);
    expect_same(t, back);
    EXPECT_EQ(text_of(back), text);  // and it writes the same text again
  }
}

TEST(TraceValidate, EveryDamagedFieldIsNamed) {
  const Trace t = make_trace(false);
  // The damages touch what this trace has.
  ASSERT_GE(t.steps.size(), 4u);
  ASSERT_TRUE(t.steps[1].tensors.count("blocks.0.attn.pattern"));
  ASSERT_TRUE(t.steps[1].tensors.count("blocks.1.resid_post.lens.ids"));
  ASSERT_TRUE(t.steps[0].tensors.count("logits"));
  ASSERT_TRUE(t.steps[1].sample.has_value());
  run_damages(t, decoder_damages(t));
}

TEST(TraceValidate, EveryDamagedEncoderFieldIsNamed) {
  const Trace t = make_trace(true);
  ASSERT_EQ(t.source.size(), 4u);
  ASSERT_TRUE(t.encoder.count("encoder.blocks.0.attn.pattern"));
  ASSERT_TRUE(t.encoder.count("blocks.0.cross_attn.k"));
  run_damages(t, encdec_damages(t));
}

TEST(TraceValidate, NotATraceAtAll) {
  expect_clear(message_of("{}"), "\"format\"");
  expect_clear(message_of("[]"), "not a decoderscope trace");
  expect_clear(message_of("3"), "not a decoderscope trace");
  expect_clear(message_of(""), "not valid JSON");
  expect_clear(message_of("   \n"), "the file is empty");
  expect_clear(message_of("{\"format\": decoderscope}"), "not valid JSON (byte 12: unexpected 'd')");
  // Nesting far deeper than a trace has: a message, not a stack overflow.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  expect_clear(message_of(deep), "nested deeper");
  expect_clear(message_of("{\"format\":\"decoderscope-trace\",\"version\":1,\"steps\":[]}"), "\"model\" is missing");
}

TEST(TraceValidate, ATraceCutShortAnywhereIsAClearError) {
  const std::string text = text_of(make_trace(false));
  // Every cut in the first 64 bytes (the header), then about 400 spread over the rest.
  std::vector<size_t> cuts;
  for (size_t n = 0; n < 64; ++n) cuts.push_back(n);
  for (size_t n = 64; n < text.size() - 2; n += std::max<size_t>(1, text.size() / 400)) cuts.push_back(n);
  for (size_t n : cuts) {
    SCOPED_TRACE("cut at byte " + std::to_string(n) + " of " + std::to_string(text.size()));
    expect_clear(message_of(text.substr(0, n)), "not valid JSON");
  }
}

TEST(TraceValidate, LoadNamesTheFile) {
  test::TempDir tmp;
  const std::string path = tmp.path("bad.json");
  {
    json j = json::parse(text_of(make_trace(false)));
    j["steps"][1]["pos0"] = -5;
    std::ofstream(path) << j.dump();
  }
  std::string msg;
  try {
    Trace::load(path);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("trace step 2: pos0 is -5 (must be 0 or more)"), std::string::npos) << msg;
}
