// libFuzzer target: config.json (core/model/config_json.cpp and the config parts of
// core/io/model_folder.cpp), in both kinds. The first byte picks the folder the rest
// is written to as config.json: even, a tiny Hugging Face GPT-2 folder; odd, a tiny
// decoderscope folder (chars tokenizer). The folder is then loaded (and run when it
// loads), and the JSON, when it parses, also goes to config_from_json directly.
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "model/config_json.h"

namespace {

struct Folders {
  std::string gpt2, own;
};

// dm 4, 1 layer, 2 heads, 6 positions, vocab 5, inner 8: GPT2Model's tensors.
std::string write_gpt2(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const int64_t dm = 4, ff = 8, V = 5, P = 6;
  std::vector<float> v(256, 0.5f);
  const float* x = v.data();
  ds::save_safetensors(dir + "/model.safetensors",
                       {{"wte.weight", {V, dm}, x},
                        {"wpe.weight", {P, dm}, x},
                        {"ln_f.weight", {dm}, x},
                        {"ln_f.bias", {dm}, x},
                        {"h.0.ln_1.weight", {dm}, x},
                        {"h.0.ln_1.bias", {dm}, x},
                        {"h.0.attn.c_attn.weight", {dm, 3 * dm}, x},
                        {"h.0.attn.c_attn.bias", {3 * dm}, x},
                        {"h.0.attn.c_proj.weight", {dm, dm}, x},
                        {"h.0.attn.c_proj.bias", {dm}, x},
                        {"h.0.ln_2.weight", {dm}, x},
                        {"h.0.ln_2.bias", {dm}, x},
                        {"h.0.mlp.c_fc.weight", {dm, ff}, x},
                        {"h.0.mlp.c_fc.bias", {ff}, x},
                        {"h.0.mlp.c_proj.weight", {ff, dm}, x},
                        {"h.0.mlp.c_proj.bias", {dm}, x, "F16"},
                        {"h.0.attn.bias", {1, 1, P, P}, x, "BF16"}},
                       {{"format", "pt"}});
  const nlohmann::json conf = {{"model_type", "gpt2"},
                               {"n_embd", dm},
                               {"n_layer", 1},
                               {"n_head", 2},
                               {"n_positions", P},
                               {"vocab_size", V},
                               {"n_inner", ff},
                               {"n_ctx", P},
                               {"activation_function", "gelu_new"},
                               {"layer_norm_epsilon", 1e-5}};
  return conf.dump(2);
}

std::string write_own(const std::string& dir) {
  ds::Config c;
  c.d_model = 4;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_head = 2;
  c.d_ff = 6;
  c.vocab_size = 6;
  c.max_seq = 8;
  c.bos_id = 1;
  c.eos_id = 2;
  ds::save_model_folder(dir, c, ds::Weights::random(c, 1),
                        {{"kind", "chars"}, {"vocab", {"<pad>", "<s>", "</s>", "a", "b", "c"}}});
  return fuzz::slurp(dir + "/config.json");
}

const Folders& folders() {
  static const Folders f = [] {
    Folders d{fuzz::tmp_dir() + "/gpt2", fuzz::tmp_dir() + "/own"};
    fuzz::seed("gpt2", fuzz::join('\0', {write_gpt2(d.gpt2)}));
    fuzz::seed("own", fuzz::join('\1', {write_own(d.own)}));
    return d;
  }();
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)folders();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string& dir = data[0] % 2 ? folders().own : folders().gpt2;
  const std::string_view text = fuzz::as_view(data + 1, size - 1);
  fuzz::put(dir + "/config.json", text);
  try {
    ds::FolderModel m = ds::load_model_folder(dir);
    fuzz::run_model(std::move(m.cfg), std::move(m.w));
  } catch (const ds::Error&) {
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    try {
      (void)ds::config_from_json(j);
    } catch (const ds::Error&) {
    }
  }
  return 0;
}
