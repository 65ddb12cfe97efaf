// libFuzzer target for the file loaders (built with clang only; see the end of
// CMakeLists.txt). The first byte selects what the rest of the input is:
//   0: a safetensors file (opened, then every float tensor read)
//   1: the config.json of a valid tiny Hugging Face GPT-2 folder
//   2: the config.json of a valid tiny decoderscope folder (chars tokenizer)
//   3: the model.safetensors of the tiny GPT-2 folder
//   4: a llama2.c checkpoint
// Every input must load or throw ds::Error; anything else (a crash, another
// exception, a sanitizer report) is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/llama2c.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace {

struct Dirs {
  std::string root, gpt2, gpt2b, own;  // gpt2b: same files, its config.json stays valid
};

void put(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

// A tiny GPT-2 folder and a tiny decoderscope folder to plant inputs in.
Dirs make_dirs() {
  Dirs d;
  char tmpl[] = "/tmp/ds_fuzz_XXXXXX";
  if (!::mkdtemp(tmpl)) std::abort();
  d.root = tmpl;
  d.gpt2 = d.root + "/gpt2";
  d.own = d.root + "/own";
  fs::create_directories(d.gpt2);
  const int64_t dm = 4, ff = 8, V = 5, P = 6;
  std::vector<float> ones(256, 0.5f);
  std::vector<ds::SafeTensorOut> t = {{"wte.weight", {V, dm}, ones.data()},
                                      {"wpe.weight", {P, dm}, ones.data()},
                                      {"ln_f.weight", {dm}, ones.data()},
                                      {"ln_f.bias", {dm}, ones.data()},
                                      {"h.0.ln_1.weight", {dm}, ones.data()},
                                      {"h.0.ln_1.bias", {dm}, ones.data()},
                                      {"h.0.attn.c_attn.weight", {dm, 3 * dm}, ones.data()},
                                      {"h.0.attn.c_attn.bias", {3 * dm}, ones.data()},
                                      {"h.0.attn.c_proj.weight", {dm, dm}, ones.data()},
                                      {"h.0.attn.c_proj.bias", {dm}, ones.data()},
                                      {"h.0.ln_2.weight", {dm}, ones.data()},
                                      {"h.0.ln_2.bias", {dm}, ones.data()},
                                      {"h.0.mlp.c_fc.weight", {dm, ff}, ones.data()},
                                      {"h.0.mlp.c_fc.bias", {ff}, ones.data()},
                                      {"h.0.mlp.c_proj.weight", {ff, dm}, ones.data()},
                                      {"h.0.mlp.c_proj.bias", {dm}, ones.data(), "F16"},
                                      {"h.0.attn.bias", {1, 1, P, P}, ones.data(), "BF16"}};
  ds::save_safetensors(d.gpt2 + "/model.safetensors", t, {{"format", "pt"}});
  std::ofstream(d.gpt2 + "/config.json") << nlohmann::json{{"model_type", "gpt2"}, {"n_embd", dm},
                                                           {"n_layer", 1},         {"n_head", 2},
                                                           {"n_positions", P},     {"vocab_size", V},
                                                           {"n_inner", ff}}
                                                .dump();
  d.gpt2b = d.root + "/gpt2b";
  fs::create_directories(d.gpt2b);
  fs::copy_file(d.gpt2 + "/config.json", d.gpt2b + "/config.json");
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
  ds::save_model_folder(d.own, c, ds::Weights::random(c, 1),
                        {{"kind", "chars"}, {"vocab", {"<pad>", "<s>", "</s>", "a", "b", "c"}}});
  return d;
}

const Dirs& dirs() {
  static const Dirs d = make_dirs();
  return d;
}

void load_folder(const std::string& dir) {
  ds::FolderModel m = ds::load_model_folder(dir);
  ds::Model model(std::move(m.cfg), std::move(m.w));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Dirs& d = dirs();
  const uint8_t sel = data[0] % 5;
  ++data;
  --size;
  try {
    switch (sel) {
      case 0: {
        const std::string p = d.root + "/x.safetensors";
        put(p, data, size);
        ds::SafeTensors st = ds::SafeTensors::open(p);
        std::vector<float> buf;
        for (const auto& e : st.entries()) {
          if (e.numel() > (1 << 22)) continue;
          if (e.dtype != "F32" && e.dtype != "F16" && e.dtype != "BF16") continue;
          buf.resize(static_cast<size_t>(e.numel()) + 1);
          st.read_f32(e, buf.data(), true);
        }
        break;
      }
      case 1:
        put(d.gpt2 + "/config.json", data, size);
        load_folder(d.gpt2);
        break;
      case 2:
        put(d.own + "/config.json", data, size);
        load_folder(d.own);
        break;
      case 3:
        put(d.gpt2b + "/model.safetensors", data, size);
        load_folder(d.gpt2b);
        break;
      default: {
        const std::string p = d.root + "/m.bin";
        put(p, data, size);
        ds::load_llama2c(p);
        break;
      }
    }
  } catch (const ds::Error&) {
  }
  return 0;
}
