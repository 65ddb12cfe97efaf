// decoderscope_bench: one executable for the benchmarks, one subcommand each.
//   decoderscope_bench load [--mb 500] [--reps R] [--dir /tmp] [--keep] [--drop-caches]
//                           [--format gpt2|own]
//   decoderscope_bench decode [--shape gpt2-small|llama-110m] [--steps N] [--threads N] [--reps R]
//                             [--precision f32|bf16|f16] [--prefill N] [--trace-tokens N]
//   decoderscope_bench team [--threads 2] [--regions N] [--gap-us 5]
//   decoderscope_bench lens [--rows 13] [--reps 5] [--precision f32|bf16|f16]
//   decoderscope_bench quant [--threads 2] [--reps 7] [--layers 16] [--vocab 128256] [--types Q4_K,...]
//   decoderscope_bench sampler [--threads 2] [--vocab 128256] [--candidates 20] [--reps 400]
#include <cstdio>
#include <cstring>

int bench_load(int argc, char** argv);     // bench_load.cpp
int bench_decode(int argc, char** argv);   // bench_decode.cpp
int bench_team(int argc, char** argv);     // bench_team.cpp
int bench_lens(int argc, char** argv);     // bench_lens.cpp
int bench_quant(int argc, char** argv);    // bench_quant.cpp
int bench_sampler(int argc, char** argv);  // bench_sampler.cpp

int main(int argc, char** argv) {
  struct Sub {
    const char* name;
    int (*run)(int, char**);
    const char* help;
  };
  const Sub subs[] = {
      {"load", bench_load, "write a GPT-2-shaped model.safetensors, then time and measure loading it"},
      {"decode", bench_decode,
       "bandwidth floor, decode, prefill and trace memory of a random GPT-2-small or llama-110M-shaped model"},
      {"team", bench_team, "what one parallel region costs: OpenMP's fork and join against the engine's thread team"},
      {"lens", bench_lens,
       "the logit lens's unembedding of several rows: by groups of head rows against widened slices"},
      {"quant", bench_quant,
       "one token's quantized products of a Llama-3.2-1B shape: exact against fast, and the bandwidth floor"},
      {"sampler", bench_sampler,
       "a greedy step's sampling (on the team) and candidate ranking over Llama 3's vocabulary"},
  };
  if (argc >= 2) {
    for (const Sub& s : subs)
      if (std::strcmp(argv[1], s.name) == 0) return s.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "usage: %s SUBCOMMAND [options]\n", argv[0]);
  for (const Sub& s : subs) std::fprintf(stderr, "  %-8s %s\n", s.name, s.help);
  return 2;
}
