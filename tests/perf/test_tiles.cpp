// Tiles (perf/gemv.h): the storage loaded models keep their matrices in for decoding.
// Checked against the row-major matrix they came from: the element positions, the
// conversion both ways, products and rows read from tiles (against double loops),
// and prefill products packed from tiles.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "io/safetensors.h"
#include "model/weights.h"
#include "perf/gemm.h"
#include "perf/gemv.h"

namespace {

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(g);
  return v;
}

// (rows, cols) shapes: whole groups, a row-major tail, one group, wide rows.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{8, 8}, {13, 24}, {50, 768}, {16, 3072}, {57, 40}};

TEST(Tiles, ConversionPlacesEveryElementAndRoundTrips) {
  for (auto [rows, cols] : kShapes) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
    const std::vector<float> orig = random_values(rows * cols, 1);
    std::vector<float> p = orig;
    ds::rows_to_tiles(p.data(), sizeof(float), rows, cols);
    if (cols > 8) {  // (one chunk wide, a group is its rows)
      EXPECT_NE(p, orig);
    }
    const int64_t pr = ds::tile_rows(rows);
    // Chunks of 8 columns of the 8 rows of a group follow each other.
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t want = r < pr ? (r / 8) * 8 * cols + (c / 8) * 64 + (r % 8) * 8 + c % 8 : r * cols + c;
        ASSERT_EQ(ds::element_index(r, c, cols, pr), want);
        ASSERT_EQ(p[size_t(want)], orig[size_t(r * cols + c)]) << r << "," << c;
      }
    ds::tiles_to_rows(p.data(), sizeof(float), rows, cols);
    EXPECT_EQ(p, orig);
  }
}

// A loader reads rows into a buffer and writes them from there into a matrix's tiles
// (rows_into_tiles): the bytes must be those of converting the rows in place.
TEST(Tiles, WritingRowsIntoTilesEqualsConvertingInPlace) {
  for (int esz : {4, 2}) {
    for (auto [rows, cols] : kShapes) {
      SCOPED_TRACE(std::to_string(esz) + " bytes, " + std::to_string(rows) + "x" + std::to_string(cols));
      const size_t bytes = size_t(rows * cols * esz);
      std::vector<unsigned char> src(bytes);
      std::mt19937 g(5);
      for (unsigned char& b : src) b = static_cast<unsigned char>(g());
      std::vector<unsigned char> want = src;
      ds::rows_to_tiles(want.data(), esz, rows, cols);
      std::vector<unsigned char> got(bytes, 0xAB);
      const int64_t pr = ds::tile_rows(rows);
      ds::rows_into_tiles(src.data(), got.data(), esz, pr, cols);
      const size_t tiled = size_t(pr * cols * esz);
      std::copy(src.begin() + std::ptrdiff_t(tiled), src.end(), got.begin() + std::ptrdiff_t(tiled));
      EXPECT_EQ(got, want);
    }
  }
}

TEST(Tiles, ProductsAndRowsMatchDoubleLoops) {
  for (ds::Precision prec : {ds::Precision::F32, ds::Precision::BF16, ds::Precision::F16}) {
    for (auto [rows, cols] : kShapes) {
      SCOPED_TRACE(std::string(ds::precision_name(prec)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
      const std::vector<float> w = random_values(rows * cols, 2);
      const std::vector<float> x = random_values(cols, 3);
      // The values as stored (16-bit ones widened back), row-major, for the reference.
      std::vector<float> exact(w.size());
      std::vector<uint16_t> h(w.size());
      if (prec == ds::Precision::F32) {
        exact = w;
      } else {
        ds::narrow(w.data(), int64_t(w.size()), prec, h.data());
        for (size_t i = 0; i < h.size(); ++i) exact[i] = ds::widen(h[i], prec);
      }
      std::vector<float> stored = w;
      void* data = prec == ds::Precision::F32 ? static_cast<void*>(stored.data()) : static_cast<void*>(h.data());
      ds::rows_to_tiles(data, ds::precision_bytes(prec), rows, cols);
      const int64_t pr = ds::tile_rows(rows);
      // Ranges that start and end inside groups and in the row-major tail.
      for (auto [r0, r1] :
           std::vector<std::pair<int64_t, int64_t>>{{0, rows}, {3, rows - 2}, {5, 7}, {rows - 1, rows}}) {
        if (r0 < 0 || r1 <= r0) continue;
        std::vector<float> y(size_t(r1 - r0), -1.0f), got_rows(size_t((r1 - r0) * cols));
        ds::gemv_rows(data, prec, cols, x.data(), y.data(), r0, r1, pr);
        ds::rows_f32(data, prec, cols, pr, r0, r1, got_rows.data());
        for (int64_t r = r0; r < r1; ++r) {
          double want = 0, mag = 0;
          for (int64_t c = 0; c < cols; ++c) {
            want += double(exact[size_t(r * cols + c)]) * x[size_t(c)];
            mag += std::abs(double(exact[size_t(r * cols + c)]) * x[size_t(c)]);
          }
          EXPECT_NEAR(y[size_t(r - r0)], want, 1e-5 * mag + 1e-6) << "row " << r;
          for (int64_t c = 0; c < cols; ++c)
            ASSERT_EQ(got_rows[size_t((r - r0) * cols + c)], exact[size_t(r * cols + c)]) << r << "," << c;
        }
      }
    }
  }
}

// Several vectors at once (the logit lens's residual rows against the head): each
// vector's products are gemv_rows's, bit for bit, over ranges that start and end inside
// groups and in the row-major tail; and gemv_rows's are the double loop's (above).
TEST(Tiles, ManyVectorsGiveEachVectorsProducts) {
  for (ds::Precision prec : {ds::Precision::F32, ds::Precision::BF16, ds::Precision::F16}) {
    for (auto [rows, cols] : kShapes) {
      SCOPED_TRACE(std::string(ds::precision_name(prec)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
      const std::vector<float> w = random_values(rows * cols, 4);
      std::vector<uint16_t> h(w.size());
      std::vector<float> stored = w;
      if (prec != ds::Precision::F32) ds::narrow(w.data(), int64_t(w.size()), prec, h.data());
      void* data = prec == ds::Precision::F32 ? static_cast<void*>(stored.data()) : static_cast<void*>(h.data());
      ds::rows_to_tiles(data, ds::precision_bytes(prec), rows, cols);
      const int64_t pr = ds::tile_rows(rows);
      const int n = 5;
      const std::vector<float> X = random_values(n * cols, 5);
      for (auto [r0, r1] :
           std::vector<std::pair<int64_t, int64_t>>{{0, rows}, {3, rows - 2}, {5, 7}, {rows - 1, rows}, {9, rows}}) {
        if (r0 < 0 || r1 <= r0) continue;
        const int64_t ld = r1 - r0 + 3;  // a gap between the vectors' outputs stays untouched
        std::vector<float> Y(size_t(n * ld), -7.0f);
        ds::gemv_rows_many(data, prec, cols, X.data(), n, Y.data(), ld, r0, r1, pr);
        for (int k = 0; k < n; ++k) {
          std::vector<float> y(size_t(r1 - r0));
          ds::gemv_rows(data, prec, cols, X.data() + k * cols, y.data(), r0, r1, pr);
          for (int64_t r = r0; r < r1; ++r)
            ASSERT_EQ(Y[size_t(k * ld + (r - r0))], y[size_t(r - r0)]) << "vector " << k << " row " << r;
          for (int64_t g = r1 - r0; g < ld; ++g) ASSERT_EQ(Y[size_t(k * ld + g)], -7.0f);
        }
      }
    }
  }
}

TEST(Tiles, PrefillProductsPackFromTiles) {
  if (!ds::gemm_nt_available()) GTEST_SKIP() << "gemm_nt needs an AVX-512 build";
  for (auto [N, K] : std::vector<std::pair<int64_t, int64_t>>{{77, 40}, {64, 768}, {1000, 24}}) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::to_string(N) + "x" + std::to_string(K) + ", " + std::to_string(threads) + " thread(s)");
      const int64_t T = 29;
      const std::vector<float> w = random_values(N * K, 4), X = random_values(T * K, 5);
      std::vector<float> p = w;
      ds::rows_to_tiles(p.data(), sizeof(float), N, K);
      std::vector<float> Y(size_t(T * N));
      ds::gemm_nt(X.data(), T, K, p.data(), N, Y.data(), N, threads, ds::tile_rows(N));
      for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < N; ++n) {
          double want = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            want += double(X[size_t(t * K + k)]) * w[size_t(n * K + k)];
            mag += std::abs(double(X[size_t(t * K + k)]) * w[size_t(n * K + k)]);
          }
          ASSERT_NEAR(Y[size_t(t * N + n)], want, 1e-5 * mag + 1e-6) << t << "," << n;
        }
    }
  }
}

TEST(Tiles, WeightsConvertInPlaceAndBack) {
  ds::Config c;
  c.d_model = 24;
  c.n_heads = 3;
  c.d_head = 8;
  c.n_kv_heads = 3;
  c.d_ff = 40;
  c.vocab_size = 37;  // the head and embedding end in a row-major tail
  c.n_layers = 2;
  c.max_seq = 16;
  const ds::Weights orig = ds::Weights::random(c, 11);
  ds::Weights w = orig;
  w.to_tiles();
  ASSERT_TRUE(w.in_tiles());
  EXPECT_TRUE(w.blocks[1].ffn.down.W.tiles());
  EXPECT_NE(w.blocks[1].ffn.down.W.data(), orig.blocks[1].ffn.down.W.data());  // a deep copy
  // Rows read through the views are the original rows.
  std::vector<float> row(static_cast<size_t>(c.d_model));
  for (int r = 0; r < c.vocab_size; ++r) {
    w.embed_view().row(r, row.data());
    for (int j = 0; j < c.d_model; ++j) ASSERT_EQ(row[size_t(j)], orig.tok_embed(r, j));
  }
  // Narrowing keeps the storage order; converting back restores every value.
  ds::Weights n = w;
  n.narrow(ds::Precision::BF16);
  EXPECT_TRUE(n.blocks[0].attn.q.W16.tiles);
  n.blocks[0].attn.q.view().row(5, row.data());
  for (int j = 0; j < c.d_model; ++j)
    EXPECT_EQ(row[size_t(j)], ds::bf16_to_f32(ds::f32_to_bf16(orig.blocks[0].attn.q.W(5, j))));
  w.to_rows();
  EXPECT_FALSE(w.in_tiles());
  EXPECT_EQ(w.blocks[1].ffn.down.W, orig.blocks[1].ffn.down.W);
  EXPECT_EQ(w.tok_embed, orig.tok_embed);
  EXPECT_EQ(w.blocks[0].attn.q.W, orig.blocks[0].attn.q.W);
}

}  // namespace
