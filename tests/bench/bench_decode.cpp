// decoderscope_bench decode: the decode benchmark (core/bench/decode_bench.h) on a
// random model of a given shape built in memory, so no checkpoint file is needed.
//   decoderscope_bench decode [--shape gpt2-small|llama-110m] [--steps N] [--threads N]
//                             [--reps R] [--precision f32|bf16|f16] [--prefill N] [--trace-tokens N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "bench/decode_bench.h"
#include "bench_common.h"
#include "model/model.h"

namespace {

ds::Config shape(const std::string& name) {
  ds::Config c;
  if (name == "gpt2-small") {
    c = ds::gpt2_config(768, 12, 12, 1024, 50257);
  } else if (name == "llama-110m") {
    c.d_model = 768, c.n_layers = 12, c.n_heads = c.n_kv_heads = 12, c.d_head = 64, c.d_ff = 2048;
    c.vocab_size = 32000, c.max_seq = 1024;
    c.norm = ds::NormKind::RMSNorm, c.pos = ds::PosKind::Rotary, c.ffn = ds::FFNKind::SwiGLU;
    c.attn_bias = c.ffn_bias = c.norm_bias = false;
    c.bos_id = 1;
  } else {
    std::fprintf(stderr, "unknown shape %s (gpt2-small, llama-110m)\n", name.c_str());
    std::exit(2);
  }
  return c;
}

}  // namespace

int bench_decode(int argc, char** argv) {
  std::string name = "gpt2-small", precision = "f32";
  ds::DecodeBenchOptions o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--shape"))
      name = argv[i + 1];
    else if (!std::strcmp(argv[i], "--steps"))
      o.steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads"))
      o.threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps"))
      o.reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--prefill"))
      o.prefill = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--trace-tokens"))
      o.trace_tokens = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--precision"))
      precision = argv[i + 1];
  }
  ds::Config c = shape(name);
  ds::Weights w = ds::Weights::random(c, 1, 0.02f);
  if (!bench::narrow_to(w, precision)) return 2;
  w.to_tiles();  // as loaded models are
  auto m = std::make_shared<const ds::Model>(c, std::move(w));
  std::printf("model                   %s (random, in memory): %.1f M parameters, %.1f MB as %s\n", name.c_str(),
              m->w.parameter_count() / 1e6, m->w.bytes() / 1e6, ds::precision_name(m->w.precision()));
  auto r = ds::run_decode_bench(m, o);
  ds::print_decode_bench(stdout, r, o);
  return 0;
}
