// decoderscope_bench: one executable for the benchmarks, one subcommand each.
//   decoderscope_bench load [--mb 500] [--dir /tmp] [--keep]
#include <cstdio>
#include <cstring>

int bench_load(int argc, char** argv);  // bench_load.cpp

int main(int argc, char** argv) {
  struct Sub {
    const char* name;
    int (*run)(int, char**);
    const char* help;
  };
  const Sub subs[] = {
      {"load", bench_load, "write a GPT-2-shaped model.safetensors, then time and measure loading it"},
  };
  if (argc >= 2) {
    for (const Sub& s : subs)
      if (std::strcmp(argv[1], s.name) == 0) return s.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "usage: %s SUBCOMMAND [options]\n", argv[0]);
  for (const Sub& s : subs) std::fprintf(stderr, "  %-8s %s\n", s.name, s.help);
  return 2;
}
