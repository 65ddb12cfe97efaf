// The binary trace format (core/probe/trace_bin.cpp): a trace written and read back is
// the same trace, every recorded tensor bit for bit, in every storage; a damaged file
// (cut short at any byte, a wrong magic or version, counts and sizes past the end,
// fields out of range) ends in one ds::Error naming what is wrong, never a crash, an
// allocation of a declared size, or a trace read wrong without a word.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "helpers.h"
#include "probe/trace.h"
#include "session/session.h"
#include "util/atomic_file.h"
#include "util/error.h"

using namespace ds;

namespace {

// A real trace: a session's recording (every hook point, or the window's compact
// set), the logit lens, a sampled generation; plus the fields a session leaves at
// their defaults set by hand.
Trace make_trace(bool encdec, bool compact) {
  const Config c = test::small_config(encdec ? test::Arch::EncDec : test::Arch::GPT2);
  auto m = test::random_model(c, 11);
  SessionOptions o;
  o.sampler = {0.8f, 10, 0.9f, 3};
  o.steps = 9;
  o.record = compact ? default_record_patterns(c) : std::vector<std::string>{"**"};
  o.trace_options.compact = compact;
  o.trace_options.lens_top_k = 3;
  Session s(m, nullptr, o);
  s.start({1, 4, 9}, encdec ? std::vector<int>{5, 6, 7, 8} : std::vector<int>{});
  while (!s.done()) s.step();
  Trace t = s.trace();
  t.model_name = "tiny \"model\"";
  t.steps[0].token_text = {{3, "c"}, {4, "\xe2\x80"}};  // a piece that is half a character
  t.steps[0].input_text = {"a", "b", "c"};
  t.steps[1].forward_ms = 0.125;
  t.steps[1].kv_cache = false;
  if (encdec) t.source_text = {"w", "x", "y", "z"};
  Candidate& cd = t.steps[1].sample->candidates.at(0);
  cd.lookahead = true;
  cd.confidence = 0.25f;
  cd.degeneration = -0.5f;
  cd.score = 0.375f;
  cd.removed = 2;
  cd.repeated = true;
  // Steps chosen by beam search and forced: what chose them is kept (kFlagChoices).
  TokenChoice beam;
  beam.by = "beam search";
  beam.width = 3;
  beam.length_penalty = 0.75;
  beam.logprob = -0.3125;
  beam.sum = -2.0625;
  beam.rank = 1;
  beam.score = -1.5;
  beam.final = true;
  t.steps[2].sample->chosen = beam;
  t.steps[3].sample->chosen = TokenChoice{};  // "forced"
  return t;
}

std::string bytes_of(const Trace& t) {
  std::ostringstream os;
  t.write_binary(os);
  return os.str();
}

// The message reading the bytes ends with; "(loaded)" when they load.
std::string message_of(const std::string& b) {
  try {
    Trace::read_binary(b.data(), b.size());
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("NOT A ds::Error: ") + e.what();
  }
  return "(loaded)";
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void expect_same_tensors(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    const Tensor& u = b.at(name);
    EXPECT_EQ(t.shape, u.shape) << name;
    EXPECT_EQ(t.storage, u.storage) << name;
    EXPECT_EQ(t.half, u.half) << name;
    EXPECT_TRUE(same_bits(t.data, u.data)) << name;
  }
}

void expect_same(const Trace& a, const Trace& b) {
  EXPECT_EQ(a.model_name, b.model_name);
  EXPECT_EQ(a.config.describe(), b.config.describe());
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.source_text, b.source_text);
  expect_same_tensors(a.encoder, b.encoder);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    const TraceStep &s = a.steps[i], &r = b.steps[i];
    EXPECT_EQ(s.pos0, r.pos0);
    EXPECT_EQ(s.input, r.input);
    EXPECT_EQ(s.input_text, r.input_text);
    EXPECT_EQ(s.token_text, r.token_text);
    EXPECT_EQ(std::memcmp(&s.forward_ms, &r.forward_ms, sizeof(double)), 0);
    EXPECT_EQ(s.kv_cache, r.kv_cache);
    expect_same_tensors(s.tensors, r.tensors);
    ASSERT_EQ(s.sample.has_value(), r.sample.has_value());
    if (!s.sample) continue;
    const SampleRecord &x = *s.sample, &y = *r.sample;
    EXPECT_EQ(x.config.temperature, y.config.temperature);
    EXPECT_EQ(x.config.top_k, y.config.top_k);
    EXPECT_EQ(x.config.top_p, y.config.top_p);
    EXPECT_EQ(x.config.seed, y.config.seed);
    EXPECT_EQ(x.greedy, y.greedy);
    EXPECT_EQ(x.u, y.u);
    EXPECT_EQ(x.token, y.token);
    EXPECT_EQ(x.rank, y.rank);
    EXPECT_EQ(x.n_kept, y.n_kept);
    ASSERT_EQ(x.chosen.has_value(), y.chosen.has_value());
    if (x.chosen) {
      const TokenChoice &c = *x.chosen, &d = *y.chosen;
      EXPECT_EQ(c.by, d.by);
      EXPECT_EQ(c.width, d.width);
      EXPECT_EQ(c.length_penalty, d.length_penalty);
      EXPECT_EQ(c.logprob, d.logprob);
      EXPECT_EQ(c.sum, d.sum);
      EXPECT_EQ(c.rank, d.rank);
      EXPECT_EQ(c.score, d.score);
      EXPECT_EQ(c.final, d.final);
    }
    ASSERT_EQ(x.candidates.size(), y.candidates.size());
    for (size_t k = 0; k < x.candidates.size(); ++k) {
      const Candidate &p = x.candidates[k], &q = y.candidates[k];
      EXPECT_EQ(p.id, q.id);
      EXPECT_EQ(p.text, q.text);
      EXPECT_EQ(p.p_raw, q.p_raw);
      EXPECT_EQ(p.p_rep, q.p_rep);
      EXPECT_EQ(p.p_temp, q.p_temp);
      EXPECT_EQ(p.p_topk, q.p_topk);
      EXPECT_EQ(p.p_final, q.p_final);
      EXPECT_EQ(p.repeated, q.repeated);
      EXPECT_EQ(p.removed, q.removed);
      EXPECT_EQ(p.lookahead, q.lookahead);
      EXPECT_EQ(p.confidence, q.confidence);
      EXPECT_EQ(p.degeneration, q.degeneration);
      EXPECT_EQ(p.score, q.score);
    }
  }
}

// Counts the storages a trace holds: the round trip must cover each.
int count_storage(const Trace& t, Storage s) {
  int n = 0;
  for (auto& st : t.steps)
    for (auto& [k, v] : st.tensors) n += v.storage == s;
  return n;
}

// Reads a little-endian integer of the bytes.
template <class T>
T get(const std::string& b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}
template <class T>
std::string put(std::string b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
  return b;
}

// Byte offsets of the file's parts (README, "The binary trace format").
size_t header_end(const std::string& b) { return 24 + get<uint64_t>(b, 16); }
// The first step of a trace with no encoder tensors.
size_t first_step(const std::string& b) { return header_end(b) + 8 + 8; }
// The record of tensor `name` of the first step that holds it: the byte after its name.
size_t tensor_at(const std::string& b, const std::string& name) {
  std::string key = put(std::string(4, '\0'), 0, uint32_t(name.size())) + name;
  const size_t at = b.find(key);
  EXPECT_NE(at, std::string::npos) << name;
  return at + key.size();
}

bool has(const std::string& msg, const std::string& part) {
  const bool ok = msg.find(part) != std::string::npos;
  if (!ok) ADD_FAILURE() << "message \"" << msg << "\" does not contain \"" << part << "\"";
  return ok;
}

}  // namespace

TEST(TraceBin, RoundTripIsBitForBitInEveryStorage) {
  for (bool encdec : {false, true})
    for (bool compact : {false, true}) {
      SCOPED_TRACE(std::string(encdec ? "encdec" : "decoder") + (compact ? " compact" : " full"));
      const Trace t = make_trace(encdec, compact);
      if (compact) {
        EXPECT_GT(count_storage(t, Storage::F16), 0);
        EXPECT_GT(count_storage(t, Storage::RowNorms), 0);
      } else {
        EXPECT_GT(count_storage(t, Storage::F32), 0);
      }
      EXPECT_EQ(t.encoder.empty(), !encdec);
      const std::string b = bytes_of(t);
      EXPECT_EQ(b.size(), t.binary_bytes());
      const Trace back = Trace::read_binary(b.data(), b.size());
      expect_same(t, back);
      EXPECT_EQ(bytes_of(back), b);  // written again: the same bytes
    }
}

TEST(TraceBin, SaveAndLoadPickTheFormatAndReportProgress) {
  test::TempDir dir;
  const Trace t = make_trace(false, true);
  const std::string bin = dir.path("t.dstrace"), js = dir.path("t.json");
  uint64_t last = 0, total = 0;
  int calls = 0;
  t.save(bin, [&](uint64_t done, uint64_t all) {
    EXPECT_GE(done, last);
    EXPECT_LE(done, all);
    last = done;
    total = all;
    ++calls;
  });
  EXPECT_GT(calls, 0);
  EXPECT_EQ(last, total);
  EXPECT_EQ(total, uint64_t(std::filesystem::file_size(bin)));
  EXPECT_TRUE(Trace::is_binary(bin));
  t.save(js);
  EXPECT_FALSE(Trace::is_binary(js));
  EXPECT_EQ(test::read_file(js).substr(0, 1), "{");
  expect_same(t, Trace::load(bin));
  // The JSON file is the JSON reader's (float16 values widened): the same steps and tokens.
  EXPECT_EQ(Trace::load(js).tokens(), t.tokens());
  last = 0;
  Trace::load(bin, [&](uint64_t done, uint64_t all) {
    EXPECT_LE(done, all);
    last = done;
  });
  EXPECT_EQ(last, total);
}

TEST(TraceBin, AFailedSaveLeavesThePreviousFile) {
  test::TempDir dir;
  const Trace t = make_trace(false, true);
  const std::string path = dir.path("t.dstrace");
  t.save(path);
  const std::string before = test::read_file(path);
  fail_writes_after(int64_t(before.size() / 2));
  EXPECT_NE(test::error_of([&] { t.save(path); }), "");
  clear_save_failures();
  EXPECT_EQ(test::read_file(path), before);
  // A progress that stops the save: the same.
  EXPECT_NE(test::error_of([&] {
              t.save(path, [](uint64_t d, uint64_t) {
                if (d > 1000) throw Error("stopped");
              });
            }),
            "");
  EXPECT_EQ(test::read_file(path), before);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.dir()), std::filesystem::directory_iterator{}),
            1);  // no temporary left
}

TEST(TraceBin, JsonIsRefusedAboveItsLimitWithAPointerToTheBinaryFormat) {
  test::TempDir dir;
  Trace t = make_trace(false, true);
  // 27 million float16 values: over 200 MB as JSON text (8 or more characters each).
  Tensor& big = t.steps[0].tensors.begin()->second;
  big.storage = Storage::F16;
  big.half.assign(27u << 20, 0);
  const std::string path = dir.path("big.json");
  const std::string msg = test::error_of([&] { t.save(path); });
  has(msg, "too large for JSON");
  has(msg, ".dstrace");
  EXPECT_FALSE(std::filesystem::exists(path));
  std::ostringstream os;
  has(test::error_of([&] { t.write_json(os); }), "binary format");
  EXPECT_TRUE(os.str().empty());
}

TEST(TraceBin, ACutFileIsAnErrorAtEveryByte) {
  const std::string b = bytes_of(make_trace(true, true));
  for (size_t cut = 0; cut < b.size(); cut += cut < 400 ? 1 : 97) {
    const std::string msg = message_of(b.substr(0, cut));
    EXPECT_NE(msg, "(loaded)") << "cut at " << cut;
    EXPECT_EQ(msg.find("NOT A ds::Error"), std::string::npos) << msg;
  }
  EXPECT_EQ(message_of(b), "(loaded)");
  has(message_of(b.substr(0, b.size() - 1)), "cut short");
  has(message_of(b + "x"), "bytes after the last step");
}

TEST(TraceBin, MagicVersionAndHeader) {
  const std::string b = bytes_of(make_trace(false, false));
  has(message_of("{\"format\": 1}"), "not a decoderscope binary trace");
  has(message_of(put(b, 0, 'X')), "does not start with DSTRACE");
  has(message_of(put(b, 8, uint32_t(2))), "binary trace version 2 is not one this program reads");
  has(message_of(put(b, 12, uint32_t(2))), "flags");  // bit 0 (the choices) is the only one
  has(message_of(put(b, 16, uint64_t(1) << 62)), "header length is 4611686018427387904 bytes");
  has(message_of(put(b, 24, 'x')), "not valid JSON");
  // The header's JSON is checked as a JSON trace's: a config the model cannot have.
  std::string bad = b;
  const size_t at = bad.find("\"n_heads\":");
  ASSERT_NE(at, std::string::npos);
  bad[at + 10] = '0';
  has(message_of(bad), "trace model config");
}

// A file written before the choices were kept (flags 0: no byte for them after each
// sample) still reads, with no choice recorded: built from today's bytes by dropping each
// sample's "no choice" byte, found by walking the format as the README describes it.
TEST(TraceBin, AFileWithoutChoicesStillReads) {
  Trace t = make_trace(false, false);
  for (auto& st : t.steps)
    if (st.sample) st.sample->chosen.reset();
  const std::string b = bytes_of(t);
  ASSERT_EQ(get<uint32_t>(b, 12), 1u);
  std::string old = put(b, 12, uint32_t(0));
  // Offsets of the "no choice" bytes: after each sample's last candidate.
  std::vector<size_t> drop;
  size_t at = first_step(b);
  auto skip_str = [&] { at += 4 + get<uint32_t>(b, at); };
  for (size_t i = 0; i < t.steps.size(); ++i) {
    at += 8;                                                                                    // pos0
    at += 8 + 4 * get<uint64_t>(b, at);                                                         // input
    for (uint64_t n = get<uint64_t>(b, at), k = (at += 8, 0); k < n; ++k) skip_str();           // input_text
    at += 8 + 1;                                                                                // forward_ms, kv_cache
    for (uint64_t n = get<uint64_t>(b, at), k = (at += 8, 0); k < n; ++k) at += 4, skip_str();  // token_text
    const bool sampled = b[at++] == 1;
    if (sampled) {
      at += 4 + 4 + 4 + 8 + 4 + 1 + 4 + 1 + 8 + 4 + 4 + 4;  // the sampler's settings and the draw
      for (uint64_t n = get<uint64_t>(b, at), k = (at += 8, 0); k < n; ++k) at += 4, skip_str(), at += 20 + 3 + 12;
      ASSERT_EQ(b[at], 0) << "step " << i << ": the choice byte";
      drop.push_back(at++);
    }
    // The step's tensor table.
    for (uint64_t n = get<uint64_t>(b, at), k = (at += 8, 0); k < n; ++k) {
      skip_str();
      const int rank = uint8_t(b[at + 1]);
      at += 2 + 4 * size_t(rank);
      const uint64_t n16 = get<uint64_t>(b, at), n32 = get<uint64_t>(b, at + 8);
      at += 16 + 2 * n16 + 4 * n32;
    }
  }
  ASSERT_EQ(at + 8, b.size());  // the walk ends at the end marker
  ASSERT_FALSE(drop.empty());
  for (auto it = drop.rbegin(); it != drop.rend(); ++it) old.erase(*it, 1);
  const Trace back = Trace::read_binary(old.data(), old.size());
  expect_same(t, back);
  // The same bytes with the flag set are one byte short a sample: a clear error.
  has(message_of(put(old, 12, uint32_t(1))), "trace step");
}

TEST(TraceBin, HugeDeclaredCountsAreCheckedBeforeAnythingIsAllocated) {
  const std::string b = bytes_of(make_trace(false, false));
  const size_t steps = header_end(b) + 8, s0 = first_step(b);
  has(message_of(put(b, header_end(b), uint64_t(4000000000u))), "tensors declares 4000000000 entries");
  has(message_of(put(b, steps, uint64_t(1) << 61)), "steps declares 2305843009213693952 entries");
  has(message_of(put(b, steps, uint64_t(0))), "no steps");
  has(message_of(put(b, s0 + 8, ~uint64_t(0))), "trace step 1: input declares");
  const size_t scores = tensor_at(b, "blocks.0.attn.scores");
  const uint8_t rank = uint8_t(b[scores + 1]);
  const size_t counts = scores + 2 + 4 * rank;
  has(message_of(put(b, counts + 8, uint64_t(1) << 60)), "tensor \"blocks.0.attn.scores\" data has");
  // A count that fits the shape's rule but not the bytes left (a float16 tensor's offsets).
  has(message_of(put(b, scores - 4 - std::string("blocks.0.attn.scores").size(), uint32_t(4000000000u))),
      "declares 4000000000 bytes");
}

TEST(TraceBin, DamagedFieldsAreNamed) {
  const Trace t = make_trace(false, false);
  const std::string b = bytes_of(t);
  const size_t s0 = first_step(b);
  const int vocab = t.config.vocab_size;
  has(message_of(put(b, s0, int64_t(5))), "trace step 1: pos0 is 5, but the steps before it fed 0 tokens");
  has(message_of(put(b, s0, int64_t(-1))), "pos0 is -1 (must be 0 or more)");
  has(message_of(put(b, s0 + 16, int32_t(vocab))), "input[0] is " + std::to_string(vocab) + ", outside the vocabulary");
  // A shape that is not the model's, a storage that does not exist, counts that do not
  // fit the shape.
  const size_t scores = tensor_at(b, "blocks.0.attn.scores");
  has(message_of(put(b, scores + 2, int32_t(t.config.n_heads + 1))), "tensor \"blocks.0.attn.scores\" shape is [");
  has(message_of(put(b, scores + 2, int32_t(0))), "shape is 0 (must be 1 to");
  has(message_of(put(b, scores, uint8_t(7))), "storage is 7");
  has(message_of(put(b, scores + 1, uint8_t(200))), "shape has 200 dimensions");
  const size_t counts = scores + 2 + 4 * uint8_t(b[scores + 1]);
  has(message_of(put(b, counts + 8, get<uint64_t>(b, counts + 8) - 1)), "32-bit values, its shape");
  // A tensor name that is no hook point: the name is replaced by one of the same length.
  std::string bad = b;
  bad.replace(scores - 6, 6, "zzzzzz");
  has(message_of(bad), "is not a hook point of this model");
  // The sample of step 1: its temperature is the first field after the step's token_text.
  size_t at = s0 + 16 + 4 * t.steps[0].input.size() + 8;
  for (auto& s : t.steps[0].input_text) at += 4 + s.size();
  at += 8 + 1 + 8;
  for (auto& [id, s] : t.steps[0].token_text) at += 4 + 4 + s.size();
  ASSERT_EQ(b[at], 1);  // the sample flag
  has(message_of(put(b, at, uint8_t(2))), "sample flag is 2 (must be 0 or 1)");
  has(message_of(put(b, at + 1, -1.0f)), "trace step 1: sample settings are invalid");
  has(message_of(put(b, at + 1, std::nanf(""))), "sample temperature is not finite");
  has(message_of(put(b, at + 1 + 30, 1.5)), "sample u is 1.5");
  has(message_of(put(b, at + 1 + 38, int32_t(-3))), "sample token is -3, outside the vocabulary");
  has(message_of(put(b, at + 1 + 58, int32_t(vocab))), "sample candidates[0] id");
  has(message_of(put(b, at + 1 + 66 + get<uint32_t>(b, at + 1 + 62), 2.0f)), "sample candidates[0] probability is 2");
}

TEST(TraceBin, LensIdsAndTokenTextAreCheckedAgainstTheVocabulary) {
  Trace t = make_trace(false, true);
  Trace bad = t;
  for (auto& [name, v] : bad.steps[2].tensors)
    if (name.find(".lens.ids") != std::string::npos) v.data[0] = float(t.config.vocab_size);
  has(message_of(bytes_of(bad)), "trace step 3: tensor");
  has(message_of(bytes_of(bad)), "not a token id of the vocabulary");
  bad = t;
  bad.steps[1].token_text[t.config.vocab_size + 2] = "x";
  has(message_of(bytes_of(bad)), "trace step 2: token_text id is");
  bad = t;
  bad.steps[1].forward_ms = -3;
  has(message_of(bytes_of(bad)), "trace step 2: forward_ms is negative");
}

TEST(TraceBin, FlippedBytesNeverCrash) {
  const std::string b = bytes_of(make_trace(true, true));
  int loaded = 0, refused = 0;
  for (size_t at = 0; at < b.size(); at += 13)
    for (unsigned char x : {0x01, 0x80, 0xff}) {
      std::string d = b;
      d[at] = char(uint8_t(d[at]) ^ x);
      const std::string msg = message_of(d);
      EXPECT_EQ(msg.find("NOT A ds::Error"), std::string::npos) << msg;
      (msg == "(loaded)" ? loaded : refused)++;
    }
  EXPECT_GT(refused, 0);
  EXPECT_GT(loaded, 0);  // a flipped tensor value is still a trace
}

TEST(TraceBinCli, WindowRecordingAndConvertBothWays) {
  test::TempDir dir;
  const std::string model = dir.path("m.bin"), bin = dir.path("a.dstrace"), js = dir.path("b.json"),
                    back = dir.path("c.dstrace");
  ASSERT_EQ(test::run_cli("random --out " + model + " --dim 16 --layers 2 --heads 2 --vocab 50 --seq-len 32").code, 0);
  const auto gen = test::run_cli("generate --model " + model + " --steps 12 --ids --window-recording --trace " + bin);
  ASSERT_EQ(gen.code, 0) << gen.err;
  ASSERT_TRUE(Trace::is_binary(bin));
  const Trace t = Trace::load(bin);
  // What the window records: float16 values, row norms, the logit lens's top 5.
  EXPECT_GT(count_storage(t, Storage::F16), 0);
  EXPECT_GT(count_storage(t, Storage::RowNorms), 0);
  EXPECT_EQ(t.steps.back().tensors.at("blocks.1.resid_post.lens.ids").shape.back(), kWindowLensTopK);
  const auto to_json = test::run_cli("convert --in " + bin + " --out " + js);
  ASSERT_EQ(to_json.code, 0) << to_json.err;
  EXPECT_NE(to_json.out.find("wrote " + js + " (JSON"), std::string::npos) << to_json.out;
  ASSERT_EQ(test::run_cli("convert --in " + js + " --out " + back).code, 0);
  // JSON widens float16 to float32: the values are the same numbers.
  const Trace r = Trace::load(back);
  ASSERT_EQ(r.steps.size(), t.steps.size());
  for (size_t s = 0; s < t.steps.size(); ++s)
    for (auto& [name, x] : t.steps[s].tensors) {
      const Tensor& y = r.steps[s].tensors.at(name);
      ASSERT_EQ(x.size(), y.size()) << name;
      if (!x.has_values()) {
        EXPECT_TRUE(same_bits(x.data, y.data)) << name;
        continue;
      }
      for (int64_t i = 0; i < x.size(); ++i) {
        const float a = x.at(i), b = y.at(i);
        EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << name << " " << i;
      }
    }
  const auto bad = test::run_cli("generate --model " + model + " --steps 4 --window-recording");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("--window-recording chooses what --trace records"), std::string::npos) << bad.err;
  const auto cut =
      test::run_cli("convert --in " + dir.write("cut.dstrace", test::read_file(bin).substr(0, 500)) + " --out " + js);
  EXPECT_EQ(cut.code, 1);
  EXPECT_NE(cut.err.find("cut short"), std::string::npos) << cut.err;
}
