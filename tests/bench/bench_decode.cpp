// decoderscope_bench decode: decode speed of a random model of a given shape, built in
// memory, with no observer and with a trace recording every hook point.
//   decoderscope_bench decode [--shape gpt2-small|llama-110m] [--steps N] [--threads N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "session/session.h"

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

double ms_per_token(const std::shared_ptr<const ds::Model>& m, int steps, int threads, bool traced) {
  ds::SessionOptions o;
  o.sampler.temperature = 0;
  o.steps = steps;
  o.threads = threads;
  if (traced) o.record = {"**"};
  ds::Session s(m, nullptr, o);
  s.start({m->cfg.bos_id});
  s.step();
  auto t0 = std::chrono::steady_clock::now();
  int n = 0;
  while (!s.done()) {
    s.step();
    ++n;
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / std::max(1, n);
}

}  // namespace

int bench_decode(int argc, char** argv) {
  std::string name = "gpt2-small";
  int steps = 64, threads = 1, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--shape")) name = argv[i + 1];
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  }
  ds::Config c = shape(name);
  auto m = std::make_shared<const ds::Model>(c, ds::Weights::random(c, 1, 0.02f));
  double mb = m->w.parameter_count() * 4 / 1e6;
  std::printf("%s: %.1f M parameters (%.0f MB float32), %d positions, %d thread(s)\n", name.c_str(),
              m->w.parameter_count() / 1e6, mb, steps, threads);
  ms_per_token(m, 8, threads, false);  // warm-up
  std::vector<double> plain, traced;
  for (int r = 0; r < reps; ++r) {
    plain.push_back(ms_per_token(m, steps, threads, false));
    traced.push_back(ms_per_token(m, steps, threads, true));
  }
  std::sort(plain.begin(), plain.end());
  std::sort(traced.begin(), traced.end());
  double p = plain[plain.size() / 2], t = traced[traced.size() / 2];
  std::printf("no observer        %8.2f ms/token  %7.1f tokens/s  (%.1f GB/s of weights)\n", p, 1000 / p, mb / p);
  std::printf("trace, every hook  %8.2f ms/token  %7.1f tokens/s\n", t, 1000 / t);
  std::printf("ratio traced/plain %8.3f\n", t / p);
  return 0;
}
