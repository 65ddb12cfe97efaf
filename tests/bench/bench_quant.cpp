// decoderscope_bench quant: one token's matrix-vector products with quantized weights of
// a Llama-3.2-1B shape (d_model 2048, 16 layers, 8 KV heads of 64, d_ff 8192, a tied head
// of 128,256 rows: 1.24 B parameters), random blocks of each type, on the engine's thread
// team grouped as a decode step groups them (q/k/v, o, gate/up, down, head), with the
// exact products (float32 activations) and the fast ones (activations rounded to 8 bits
// per block, integer dot products) alternating in one run; against the machine's read
// bandwidth measured in the same run (the floor: the matrices' bytes over it).
// With --prefill T: a T-row prompt's products instead (the layers' matrices, not the
// head), with the tiles that multiply each weight block with 8 activation rows at a time
// (perf/quant_tiles.h) against one row product per activation row, alternating.
//   decoderscope_bench quant [--threads 2] [--reps 7] [--layers 16] [--vocab 128256]
//                            [--types Q4_K,Q5_K,Q6_K,Q8_0,Q4_0] [--prefill T]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bandwidth.h"
#include "perf/memory.h"
#include "perf/parallel.h"
#include "perf/quant_fast.h"
#include "perf/quant_tiles.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  int64_t d = 2048, kv = 512, ff = 8192, vocab = 128256;
  int layers = 16;
};

// Random blocks whose float16 fields are small finite values.
void fill_random(uint8_t* p, size_t n, ds::Precision t, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    std::memcpy(p + i, &s, 8);
  }
  const int B = ds::block_bytes(t);
  const int off = t == ds::Precision::Q6_K ? 208 : 0;
  const bool two = t == ds::Precision::Q4_K || t == ds::Precision::Q5_K;
  for (size_t b = 0; b + size_t(B) <= n; b += size_t(B)) {
    const uint16_t h = ds::f32_to_f16(1e-3f * float(int(p[b + 5] % 64) + 1));
    std::memcpy(p + b + off, &h, 2);
    if (two) std::memcpy(p + b + 2, &h, 2);
  }
}

struct Token {
  std::shared_ptr<void> block;
  std::vector<std::vector<ds::MatView>> groups;  // per product group, its matrices
  std::vector<int64_t> in;                       // each group's input length
  double bytes = 0;
};

// The matrices of one token, in reading order, in one block.
Token make_token(const Shape& s, ds::Precision t) {
  struct M {
    int64_t rows, cols;
    int group;
  };
  std::vector<M> ms;
  int g = 0;
  for (int l = 0; l < s.layers; ++l) {
    ms.push_back({s.d, s.d, g}), ms.push_back({s.kv, s.d, g}), ms.push_back({s.kv, s.d, g++});
    ms.push_back({s.d, s.d, g++});
    ms.push_back({s.ff, s.d, g}), ms.push_back({s.ff, s.d, g++});
    ms.push_back({s.d, s.ff, g++});
  }
  ms.push_back({s.vocab, s.d, g++});
  Token tok;
  size_t total = 0;
  for (const M& m : ms) total += size_t(ds::row_bytes(t, m.cols) * m.rows);
  tok.block = ds::allocate_weight_block(total, ds::HugePages::AtFirstTouch);
  auto* base = static_cast<uint8_t*>(tok.block.get());
  fill_random(base, total, t, 7);
  tok.groups.resize(size_t(g));
  tok.in.resize(size_t(g));
  size_t at = 0;
  for (const M& m : ms) {
    tok.groups[size_t(m.group)].push_back(ds::MatView{base + at, t, m.rows, m.cols, 0});
    tok.in[size_t(m.group)] = m.cols;
    at += size_t(ds::row_bytes(t, m.cols) * m.rows);
  }
  tok.bytes = double(total);
  return tok;
}

// Milliseconds of one token's products.
double time_token(ds::MatvecTeam& team, const Token& tok, const std::vector<float>& x, std::vector<float>& y) {
  const auto t0 = Clock::now();
  for (size_t g = 0; g < tok.groups.size(); ++g) {
    ds::MatvecPart parts[3];
    size_t n = 0, at = 0;
    for (const ds::MatView& v : tok.groups[g]) {
      parts[n++] = {v, y.data() + at};
      at += size_t(v.rows);
    }
    team.run({parts, n}, x.data());
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

bool parse_types(const std::string& list, std::vector<ds::Precision>& out) {
  const std::pair<const char*, ds::Precision> names[] = {{"Q4_K", ds::Precision::Q4_K},
                                                         {"Q5_K", ds::Precision::Q5_K},
                                                         {"Q6_K", ds::Precision::Q6_K},
                                                         {"Q8_0", ds::Precision::Q8_0},
                                                         {"Q4_0", ds::Precision::Q4_0}};
  size_t i = 0;
  while (i <= list.size()) {
    const size_t j = std::min(list.find(',', i), list.size());
    const std::string name = list.substr(i, j - i);
    bool found = false;
    for (auto [n, p] : names)
      if (name == n) out.push_back(p), found = true;
    if (!found) {
      std::fprintf(stderr, "quant: unknown type '%s' (Q4_K, Q5_K, Q6_K, Q8_0, Q4_0)\n", name.c_str());
      return false;
    }
    i = j + 1;
  }
  return !out.empty();
}

// A T-row prompt's products with each type's matrices (the layers', not the head's):
// the tiles (perf/quant_tiles.h) and one row product per activation row, alternating.
void bench_prefill(ds::MatvecTeam& team, const Shape& s, const std::vector<ds::Precision>& types, int T, int reps) {
  std::printf("a %d-row prompt's products, d_model %lld, %d layers, KV %lld, d_ff %lld; %d thread(s), median of %d\n",
              T, (long long)s.d, s.layers, (long long)s.kv, (long long)s.ff, team.threads(), reps);
  std::printf("tiles: %s\n", ds::quant_tiles_available() ? "avx512 vnni" : "none here (row products)");
  std::printf("%-5s | %9s %9s | %9s %9s | %7s\n", "type", "rows ms", "tok/s", "tiles ms", "tok/s", "speedup");
  std::vector<float> X(size_t(T * s.ff));
  for (size_t i = 0; i < X.size(); ++i) X[i] = float(int(i * 7919 % 201) - 100) * 0.01f;
  std::vector<float> Y(size_t(T * 2 * s.ff));
  for (ds::Precision t : types) {
    const Token tok = make_token(s, t);
    const int block = ds::q8_block_for(t);
    // The rows for each input width (d_model, d_ff), rounded and prepared for t.
    std::vector<ds::Q8Vector> xd(static_cast<size_t>(T)), xf(static_cast<size_t>(T));
    for (int r = 0; r < T; ++r) {
      ds::quantize_q8(X.data() + r * s.d, s.d, block, xd[size_t(r)]);
      ds::prepare_tiles(t, xd[size_t(r)]);
      ds::quantize_q8(X.data() + r * s.ff, s.ff, block, xf[size_t(r)]);
      ds::prepare_tiles(t, xf[size_t(r)]);
    }
    auto pass = [&](bool tiles) {
      const auto t0 = Clock::now();
      for (size_t g = 0; g + 1 < tok.groups.size(); ++g)
        for (const ds::MatView& v : tok.groups[g]) {
          const ds::Q8Vector* xs = v.cols == s.d ? xd.data() : xf.data();
          const int64_t n = tiles ? ds::quant_tile_rows(v.type, v.cols, v.rows, team.threads()) : 16;
          team.parallel_for(int((v.rows + n - 1) / n), team.threads() > 1, [&](int i) {
            const int64_t r0 = i * n, r1 = std::min(v.rows, r0 + n);
            ds::gemm_quant_fast(v.data, v.type, v.cols, xs, T, Y.data() + r0, 2 * s.ff, r0, r1, tiles);
          });
        }
      return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    };
    pass(true);
    std::vector<double> rows, tiles;
    for (int r = 0; r < reps; ++r) {
      rows.push_back(pass(false));
      tiles.push_back(pass(true));
    }
    const double mr = median(rows), mt = median(tiles);
    std::printf("%-5s | %9.1f %9.1f | %9.1f %9.1f | %7.2f\n", ds::precision_name(t), mr, T * 1e3 / mr, mt, T * 1e3 / mt,
                mr / mt);
    std::fflush(stdout);
  }
}

}  // namespace

int bench_quant(int argc, char** argv) {
  int threads = 2, reps = 7, prefill = 0;
  Shape s;
  std::vector<ds::Precision> types;
  std::string list = "Q4_K,Q5_K,Q6_K,Q8_0,Q4_0";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads"))
      threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--layers"))
      s.layers = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--vocab"))
      s.vocab = std::atol(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--types"))
      list = argv[i + 1];
    else if (!std::strcmp(argv[i], "--prefill"))
      prefill = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (threads < 1 || threads > 256 || reps < 1 || s.layers < 1 || s.vocab < 1 || prefill < 0 || prefill > 4096 ||
      !parse_types(list, types)) {
    std::fprintf(stderr, "quant: --threads 1..256, --prefill 0..4096, --reps, --layers and --vocab at least 1\n");
    return 2;
  }
  ds::MatvecTeam team;
  team.set_threads(threads);
  if (prefill > 0) {
    bench_prefill(team, s, types, prefill, reps);
    return 0;
  }
  ds::ReadProbe probe(threads);
  std::printf(
      "one token's products, d_model %lld, %d layers, KV %lld, d_ff %lld, head %lld rows; %d thread(s), "
      "median of %d\n",
      (long long)s.d, s.layers, (long long)s.kv, (long long)s.ff, (long long)s.vocab, threads, reps);
  std::printf("fast kernels: %s\n", ds::quant_simd_available() ? "avx2 (maddubs)" : "portable");
  std::printf("%-5s %8s | %9s %7s %7s | %9s %7s %7s | %6s %10s\n", "type", "MB", "exact ms", "GB/s", "tok/s", "fast ms",
              "GB/s", "tok/s", "fast/x", "fast/floor");
  for (ds::Precision t : types) {
    const Token tok = make_token(s, t);
    std::vector<float> x(size_t(s.ff)), y(size_t(std::max<int64_t>(s.vocab, 2 * s.ff)));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 7919 % 201) - 100) * 0.01f;
    team.set_products(ds::Products::Exact);
    time_token(team, tok, x, y);  // warm-up: pages, caches
    team.set_products(ds::Products::Fast);
    time_token(team, tok, x, y);
    std::vector<double> ex, fa, rates;
    for (int r = 0; r < reps; ++r) {  // alternating, with a bandwidth pass between
      team.set_products(ds::Products::Exact);
      ex.push_back(time_token(team, tok, x, y));
      rates.push_back(probe.pass());
      team.set_products(ds::Products::Fast);
      fa.push_back(time_token(team, tok, x, y));
      rates.push_back(probe.pass());
    }
    const double me = median(ex), mf = median(fa), bw = median(rates);
    const double floor_ms = tok.bytes / (bw * 1e9) * 1e3;
    std::printf("%-5s %8.1f | %9.2f %7.1f %7.1f | %9.2f %7.1f %7.1f | %6.2f %10.2f   (read %.1f GB/s)\n",
                ds::precision_name(t), tok.bytes / 1e6, me, tok.bytes / me / 1e6, 1e3 / me, mf, tok.bytes / mf / 1e6,
                1e3 / mf, me / mf, mf / floor_ms, bw);
    std::fflush(stdout);
  }
  return 0;
}
