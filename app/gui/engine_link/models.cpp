#include "engine_link/models.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "text/char_tokenizer.h"
#include "util/data_dir.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace dsgui {

std::shared_ptr<const ds::Tokenizer> demo_tokenizer(int vocab) {
  std::vector<std::string> v = {"<pad>", "<bos>", "<eos>"};
  for (int id = 3; id < vocab; ++id)
    v.push_back(id >= 32 && id < 127 ? std::string(1, char(id)) : "#" + std::to_string(id));
  return std::make_shared<ds::CharTokenizer>(std::move(v), kDemoBos);
}

namespace {

std::string fixture_path() {
#ifdef DS_SOURCE_DIR
  fs::path p = fs::path(DS_SOURCE_DIR) / ".." / "shared" / "fixtures" / "aidreams260K" / "model.bin";
  std::error_code ec;
  if (fs::exists(p, ec)) return fs::weakly_canonical(p, ec).string();
#endif
  return "";
}

// The shared GGUF fixtures' models folder (tiny models llama.cpp made and quantized), or
// "" when it is absent.
std::string gguf_fixture_dir() {
#ifdef DS_SOURCE_DIR
  fs::path p = fs::path(DS_SOURCE_DIR) / ".." / "shared" / "fixtures" / "gguf" / "models";
  std::error_code ec;
  if (fs::is_directory(p, ec)) return fs::weakly_canonical(p, ec).string();
#endif
  return "";
}

// A few of the GGUF fixtures, one per architecture the loader reads (the shapes are in
// the fixtures' README: d_model 256, 4 heads, grouped-query, the 512-token vocabulary of
// aidreams260K), each offered when its file is there.
void add_gguf_choices(std::vector<ModelChoice>& out) {
  const std::string dir = gguf_fixture_dir();
  if (dir.empty()) return;
  struct Pick {
    const char *file, *label, *help;
  };
  static const Pick picks[] = {
      {"aidreams260K.gguf", "GGUF aidreams260K (F32, trained)",
       "The trained llama2.c model aidreams260K converted to GGUF by llama.cpp, with the tokenizer the file "
       "carries."},
      {"llama-Q4_K_M.gguf", "GGUF llama (Q4_K_M, random weights)",
       "A tiny llama GGUF file with seeded random weights (2 layers, Llama 3.2's rotary scaling), quantized by "
       "llama.cpp to its default mix: Q4_K with some Q6_K. It writes nonsense; the weights stay quantized."},
      {"qwen3-Q8_0.gguf", "GGUF qwen3 (Q8_0, random weights)",
       "A tiny Qwen3 GGUF file with seeded random weights (2 layers, RMSNorm over each head's q and k), quantized "
       "by llama.cpp to 8 bits a weight. It writes nonsense; every view works."},
      {"gemma3-Q4_K_M.gguf", "GGUF gemma3 (Q4_K_M, random weights)",
       "A tiny Gemma 3 GGUF file with seeded random weights (3 layers, sliding-window attention of 16 tokens, q/k "
       "norms, norms after each sub-layer, a GELU-tanh gate), quantized by llama.cpp. It writes nonsense."},
  };
  std::error_code ec;
  for (const Pick& p : picks) {
    const fs::path f = fs::path(dir) / p.file;
    if (fs::is_regular_file(f, ec)) out.push_back({p.label, f.string(), p.help});
  }
}

ds::LoadedModel random_model(const ds::Config& c, const std::string& name, uint64_t seed, float scale,
                             ds::Precision precision) {
  c.validate();
  ds::LoadedModel m;
  ds::Weights w = ds::Weights::random(c, seed, scale);
  w.narrow(precision);  // float32 stays as it is
  w.to_tiles();         // as loaded models are
  m.model = std::make_shared<const ds::Model>(c, std::move(w));
  m.precision = precision;
  m.tokenizer = demo_tokenizer(c.vocab_size);
  m.kind = "random";
  m.name = name;
  m.bos_prompt = true;
  if (c.eos_id >= 0) m.stop_ids = {c.eos_id};
  return m;
}

}  // namespace

std::vector<ModelChoice> model_choices() {
  std::vector<ModelChoice> out;
  // The built-in models: the folders of models/ in decoderscope's data (util/data_dir.h).
  for (const std::string& n : ds::list_data("models"))
    if (!ds::find_data("models/" + n + "/config.json").empty())
      out.push_back({"built-in: " + n, "builtin:" + n, builtin_help(n)});
  if (std::string f = fixture_path(); !f.empty())
    out.push_back({"aidreams260K (llama2.c, trained)", f,
                   "A real 260K-parameter llama2.c model trained by its author on short generated \"dream\" texts."});
  add_gguf_choices(out);
  out.push_back({"random decoder (tiny, characters)", "random:decoder",
                 "An untrained decoder-only model with random weights: it writes nonsense, but every view works."});
  out.push_back({"random decoder, 1,024 tokens of context", "random:long",
                 "The tiny random decoder with room for 1,024 tokens: long runs, fast."});
  out.push_back({"random encoder-decoder (characters)", "random:encdec",
                 "An untrained encoder-decoder model: the decoder reads a source text through cross-attention."});
  out.push_back({"random GPT-2-small size (slow)", "random:gpt2-small",
                 "Random weights in the shape of GPT-2 small (124M parameters): shows how big models feel."});
  return out;
}

std::string builtin_help(const std::string& name) {
  if (name == "stories")
    return "Writes short children's stories, word by word (trained by this project on a story grammar).";
  if (name == "dates") return "Turns a date written any way into YYYY-MM-DD: an encoder-decoder with cross-attention.";
  if (name == "dates-postnorm")
    return "The same date task with the original Transformer's block: Add & Norm after each sub-layer.";
  if (name == "adder") return "Adds two numbers, writing the sum's digits from the last to the first.";
  return "A small model trained by this project.";
}

std::string default_model_spec() {
  // The built-in models once they exist, else the llama2.c fixture, else a random one.
  // builtin:stories (a model that writes English) first, then builtin:dates
  // (cross-attention a class can read), then any other built-in.
  auto choices = model_choices();
  std::stable_partition(choices.begin(), choices.end(), [](const ModelChoice& c) { return c.spec == "builtin:dates"; });
  std::stable_partition(choices.begin(), choices.end(),
                        [](const ModelChoice& c) { return c.spec == "builtin:stories"; });
  for (auto& c : choices)
    if (c.spec.rfind("builtin:", 0) == 0 && !ds::find_data("models/" + c.spec.substr(8) + "/model.safetensors").empty())
      return c.spec;
  std::string f = fixture_path();
  return f.empty() ? "random:decoder" : f;
}

const char* precision_label(ds::Precision p) {
  switch (p) {
    case ds::Precision::BF16:
      return "bfloat16 (2 bytes a weight)";
    case ds::Precision::F16:
      return "float16 (2 bytes a weight)";
    default:
      return "float32 (4 bytes a weight)";
  }
}

bool parse_precision(const std::string& name, ds::Precision& out) {
  if (name == "f32" || name == "float32")
    out = ds::Precision::F32;
  else if (name == "bf16" || name == "bfloat16")
    out = ds::Precision::BF16;
  else if (name == "f16" || name == "float16")
    out = ds::Precision::F16;
  else
    return false;
  return true;
}

ds::LoadedModel open_model(const std::string& spec, const std::string& tokenizer, ds::Precision precision) {
  if (spec == "random:decoder" || spec == "random:long") {
    ds::Config c;
    c.d_model = 64;
    c.n_layers = 4;
    c.n_heads = 4;
    c.n_kv_heads = 4;
    c.d_head = 16;
    c.d_ff = 256;
    c.vocab_size = 128;
    c.max_seq = spec == "random:long" ? 1024 : 96;
    c.bos_id = kDemoBos;
    c.eos_id = -1;
    return random_model(c, spec == "random:long" ? "random long decoder" : "random decoder", 7, 0.4f, precision);
  }
  if (spec == "random:encdec") {
    ds::Config c;
    c.d_model = 64;
    c.n_layers = 2;
    c.n_enc_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 4;
    c.d_head = 16;
    c.d_ff = 256;
    c.vocab_size = 128;
    c.max_seq = 64;
    c.max_src = 64;
    c.encoder_decoder = true;
    c.norm_place = ds::NormPlace::Post;
    c.pos = ds::PosKind::Sinusoidal;
    c.ffn = ds::FFNKind::ReLU;
    c.final_norm = false;
    c.enc_final_norm = false;
    c.tied_head = true;
    c.bos_id = kDemoBos;
    c.eos_id = -1;
    c.pad_id = kDemoPad;
    return random_model(c, "random encoder-decoder", 11, 0.5f, precision);
  }
  if (spec == "random:gpt2-small") {
    ds::Config c = ds::gpt2_config(768, 12, 12, 1024, 50257);
    c.bos_id = kDemoBos;
    c.eos_id = -1;
    return random_model(c, "random GPT-2 small", 3, 0.02f, precision);
  }
  if (spec.empty()) throw ds::Error("no model given");
  std::string tok = tokenizer;
  std::error_code ec;
  const bool gguf = ds::is_gguf_file(spec);  // carries its own tokenizer
  if (tok.empty() && !gguf && !fs::is_directory(spec, ec)) {
    // llama2.c's tinystories models ship their tokenizer as tokNNN.bin beside the model.
    fs::path dir = fs::path(spec).parent_path();
    if (!fs::exists(dir / "tokenizer.bin", ec) && fs::is_directory(dir.empty() ? "." : dir, ec)) {
      for (auto& e : fs::directory_iterator(dir.empty() ? fs::path(".") : dir, ec)) {
        std::string n = e.path().filename().string();
        if (n.size() > 7 && n.rfind("tok", 0) == 0 && n.compare(n.size() - 4, 4, ".bin") == 0) tok = e.path().string();
      }
    }
  }
  ds::LoadedModel m = ds::load_model(spec, tok, precision);
  if (m.name == "model.bin") m.name = fs::path(spec).parent_path().filename().string();
  return m;
}

namespace {
// The task a built-in model was trained on ("dates", "adder"), from its training record.
std::string task_of(const ds::LoadedModel& m) {
  if (m.training.empty()) return "";
  try {
    auto j = nlohmann::json::parse(m.training);
    return j.value("task", "");
  } catch (const std::exception&) {
    return "";
  }
}
}  // namespace

std::string default_prompt(const ds::LoadedModel& m) {
  if (m.model->cfg.encoder_decoder) return "";
  if (task_of(m) == "adder") return "123+45=";
  if (task_of(m) == "stories") return "Once upon a time, Lily";
  if (m.kind == "random") return "hello world";
  return "Once upon a time";
}

std::string default_source(const ds::LoadedModel& m) {
  if (!m.model->cfg.encoder_decoder) return "";
  if (task_of(m) == "dates") return "July 14, 1989";
  return "the cat sat on the mat";
}

}  // namespace dsgui
