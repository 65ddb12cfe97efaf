// decoderscope_bench lens: the logit lens's unembedding of several residual rows (a
// position's embedding and every layer's output) against GPT-2 small's 50,257-row head,
// the way lens_top_k does it (each group of 8 head rows read once, against every row
// while it is in the cache) and the way it did before (the head widened to float32 a
// slice at a time, then one matrix product per slice), with one decode step's product
// of the head for scale, in the same run.
//   decoderscope_bench lens [--rows 13] [--reps 5] [--precision f32|bf16|f16]
#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "model/model.h"
#include "probe/lens.h"

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The best of reps runs of f, in milliseconds.
template <class F>
double best_ms(int reps, F&& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now_s();
    f();
    best = std::min(best, (now_s() - t0) * 1000);
  }
  return best;
}

// The previous way: slices of 256 head rows widened to float32, times the rows.
float widened_products(const ds::MatView& W, const std::vector<float>& y, int rows, int d) {
  using MatRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t chunk = 256;
  std::vector<float> B(size_t(chunk) * d), L(size_t(rows) * chunk);
  float keep = 0;  // so the products are not optimised away
  for (int64_t c0 = 0; c0 < W.rows; c0 += chunk) {
    const int n = int(std::min(chunk, W.rows - c0));
    W.rows_f32(c0, c0 + n, B.data());
    Eigen::Map<MatRM> Lm(L.data(), rows, n);
    Lm.noalias() = Eigen::Map<const MatRM>(y.data(), rows, d) * Eigen::Map<const MatRM>(B.data(), n, d).transpose();
    keep += L[0];
  }
  return keep;
}

}  // namespace

int bench_lens(int argc, char** argv) {
  int rows = 13, reps = 5;
  std::string precision = "f32";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rows"))
      rows = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--precision"))
      precision = argv[i + 1];
  }
  const ds::Config c = ds::gpt2_config(768, 12, 12, 1024, 50257);
  ds::Weights w = ds::Weights::random(c, 1, 0.02f);
  if (!bench::narrow_to(w, precision)) return 2;
  w.to_tiles();  // as loaded models are
  const ds::Model m(c, std::move(w));
  const ds::MatView W = m.w.head_view();
  const int d = c.d_model;
  std::vector<float> x(size_t(rows) * d);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 2654435761u) % 1000) / 500.0f - 1.0f;
  std::vector<float> one(size_t(W.rows));
  const double gemv = best_ms(reps, [&] { W.gemv(x.data(), one.data(), 0, W.rows); });
  ds::LensTop top;
  const double lens = best_ms(reps, [&] { top = ds::lens_top_k(m, x.data(), rows, 5); });
  float keep = 0;
  // One thread, as the lens gets (Eigen would otherwise start its own for the product).
  const int eigen_threads = Eigen::nbThreads();
  Eigen::setNbThreads(1);
  const double widened = best_ms(reps, [&] { keep += widened_products(W, x, rows, d); });
  Eigen::setNbThreads(eigen_threads);
  const double mb = double(W.rows) * d * ds::precision_bytes(m.w.precision()) / 1e6;
  std::printf("head                    %lld x %d as %s, %.1f MB\n", (long long)W.rows, d,
              ds::precision_name(m.w.precision()), mb);
  std::printf("one row (a decode step) %8.2f ms  (%.1f GB/s)\n", gemv, mb / gemv);
  std::printf("%2d rows, lens_top_k     %8.2f ms  = %.2f x one row (groups of 8 rows against every row)\n", rows, lens,
              lens / gemv);
  std::printf("%2d rows, widened slices %8.2f ms  = %.2f x one row (the previous way, products only)\n", rows, widened,
              widened / gemv);
  std::printf("ratio                   %8.2f x faster than widened slices (best of %d; top id of row 0: %d, %g)\n",
              widened / lens, reps, top.ids.empty() ? -1 : top.ids[0], double(keep) * 0);
  return 0;
}
