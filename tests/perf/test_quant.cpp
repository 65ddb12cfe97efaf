// GGML's quantized weight blocks (perf/quant.h): the decoding against a naive decoder
// written here value by value from the block layouts, and the matrix-vector products
// (gemv_rows, rows_f32, MatView) on quantized matrices against double-precision sums
// over those decoded values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "perf/gemv.h"
#include "perf/quant.h"
#include "util/precision.h"

using namespace ds;

namespace {

const Precision kQuantized[] = {Precision::Q8_0, Precision::Q4_0, Precision::Q4_K, Precision::Q5_K, Precision::Q6_K};

// n bits of byte b starting at bit lo.
int bits(uint8_t b, int lo, int n) { return (b >> lo) & ((1 << n) - 1); }

float half(const uint8_t* p) { return f16_to_f32(uint16_t(p[0] | (p[1] << 8))); }

// The 6-bit scale (which = 0) or min (which = 1) of sub-block j of a Q4_K/Q5_K block,
// from the 12 bytes s: sub-blocks 0-3 keep theirs in the low 6 bits of byte j (scale)
// and j + 4 (min); sub-blocks 4-7 keep the low 4 bits in byte j + 4 (scale: low nibble,
// min: high nibble) and the top 2 bits in the top bits of byte j - 4 (scale) or j (min).
int k4_six_bits(const uint8_t* s, int j, int which) {
  if (j < 4) return bits(s[j + 4 * which], 0, 6);
  const int low = bits(s[j + 4], 4 * which, 4);
  const int top = bits(s[which == 0 ? j - 4 : j], 6, 2);
  return low + 16 * top;
}

// Value i of one block, decoded on its own.
float ref_value(Precision p, const uint8_t* b, int i) {
  switch (p) {
    case Precision::Q8_0:
      return float(int8_t(b[2 + i])) * half(b);
    case Precision::Q4_0: {
      const uint8_t byte = b[2 + i % 16];
      return float(bits(byte, i < 16 ? 0 : 4, 4) - 8) * half(b);
    }
    case Precision::Q4_K:
    case Precision::Q5_K: {
      const bool five = p == Precision::Q5_K;
      const int j = i / 32, l = i % 32, chunk = i / 64;  // sub-block, place in it, 64-value chunk
      const uint8_t* qs = b + (five ? 48 : 16);
      int q = bits(qs[32 * chunk + l], (j % 2) * 4, 4);
      if (five) q += 16 * bits(b[16 + l], j, 1);  // qh[l], bit j
      const float d1 = half(b) * float(k4_six_bits(b + 4, j, 0));
      const float m1 = half(b + 2) * float(k4_six_bits(b + 4, j, 1));
      const float dq = d1 * float(q);
      return dq - m1;
    }
    case Precision::Q6_K: {
      const int n = i / 128, k = (i % 128) / 32, l = i % 32;  // half, group of 32, place
      const uint8_t* ql = b + 64 * n;
      const uint8_t* qh = b + 128 + 32 * n;
      const int low = bits(ql[l + 32 * (k % 2)], k < 2 ? 0 : 4, 4);
      const int q = low + 16 * bits(qh[l], 2 * k, 2) - 32;
      const float scale = float(int8_t(b[192 + 8 * n + 2 * k + l / 16]));
      const float ds = half(b + 208) * scale;
      return ds * float(q);
    }
    default:
      return NAN;
  }
}

// A whole [rows, cols] matrix decoded value by value.
std::vector<float> ref_matrix(Precision p, const std::vector<uint8_t>& m, int64_t rows, int64_t cols) {
  std::vector<float> out(size_t(rows * cols));
  const int E = block_elems(p), B = block_bytes(p);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[size_t(r * cols + c)] = ref_value(p, m.data() + r * row_bytes(p, cols) + c / E * B, int(c % E));
  return out;
}

// Where the float16 fields of a block are.
std::vector<int> half_offsets(Precision p) {
  if (p == Precision::Q4_K || p == Precision::Q5_K) return {0, 2};
  if (p == Precision::Q6_K) return {208};
  return {0};
}

// Random bytes, with every float16 field set to a random finite half (any sign,
// subnormals included) so that every decoded value is finite.
std::vector<uint8_t> random_matrix(Precision p, int64_t rows, int64_t cols, std::mt19937& gen) {
  std::vector<uint8_t> m(size_t(rows * row_bytes(p, cols)));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& v : m) v = uint8_t(byte(gen));
  std::uniform_int_distribution<int> h(0, 0xFFFF);
  for (size_t b = 0; b < m.size(); b += size_t(block_bytes(p)))
    for (int o : half_offsets(p)) {
      uint16_t v;
      do v = uint16_t(h(gen));
      while ((v & 0x7C00) == 0x7C00);  // not infinity or NaN
      m[b + size_t(o)] = uint8_t(v & 0xFF);
      m[b + size_t(o) + 1] = uint8_t(v >> 8);
    }
  return m;
}

}  // namespace

TEST(Quant, BlockSizesAndNames) {
  struct Row {
    Precision p;
    int elems, bytes;
    const char* name;
  };
  const Row table[] = {{Precision::F32, 1, 4, "float32"},   {Precision::BF16, 1, 2, "bfloat16"},
                       {Precision::F16, 1, 2, "float16"},   {Precision::Q8_0, 32, 34, "Q8_0"},
                       {Precision::Q4_0, 32, 18, "Q4_0"},   {Precision::Q4_K, 256, 144, "Q4_K"},
                       {Precision::Q5_K, 256, 176, "Q5_K"}, {Precision::Q6_K, 256, 210, "Q6_K"}};
  for (const Row& r : table) {
    SCOPED_TRACE(r.name);
    EXPECT_EQ(block_elems(r.p), r.elems);
    EXPECT_EQ(block_bytes(r.p), r.bytes);
    EXPECT_STREQ(precision_name(r.p), r.name);
    EXPECT_EQ(is_quantized(r.p), r.elems > 1);
    EXPECT_EQ(row_bytes(r.p, 4096), 4096 / r.elems * r.bytes);
    if (!is_quantized(r.p)) {
      EXPECT_EQ(row_bytes(r.p, 7), 7 * precision_bytes(r.p));
    }
  }
  EXPECT_EQ(row_bytes(Precision::Q4_K, 4096), 2304);
  EXPECT_EQ(row_bytes(Precision::Q8_0, 64), 68);
}

TEST(Quant, DequantizeRowMatchesTheNaiveDecoderBitForBit) {
  std::mt19937 gen(11);
  for (Precision p : kQuantized) {
    SCOPED_TRACE(precision_name(p));
    const int64_t cols = 3 * block_elems(p), rows = 40;  // 120 random blocks
    const auto m = random_matrix(p, rows, cols, gen);
    const auto want = ref_matrix(p, m, rows, cols);
    std::vector<float> got(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(p, m.data() + r * row_bytes(p, cols), cols, got.data());
      for (int64_t c = 0; c < cols; ++c) {
        const float w = want[size_t(r * cols + c)];
        ASSERT_EQ(std::bit_cast<uint32_t>(got[size_t(c)]), std::bit_cast<uint32_t>(w))
            << "row " << r << " col " << c << ": " << got[size_t(c)] << " vs " << w;
      }
    }
  }
}

// Hand-made blocks whose values are worked out from the layouts by hand.
TEST(Quant, HandMadeBlocks) {
  std::vector<float> out(256);
  {  // Q4_0, d = 0.5: low nibble 3 (value 0), high nibble 15 (value 16).
    uint8_t b[18] = {};
    const uint16_t d = f32_to_f16(0.5f);
    std::memcpy(b, &d, 2);
    b[2 + 5] = 0xF3;
    dequantize_row(Precision::Q4_0, b, 32, out.data());
    EXPECT_EQ(out[5], (3 - 8) * 0.5f);
    EXPECT_EQ(out[21], (15 - 8) * 0.5f);
    EXPECT_EQ(out[0], -4.0f);
  }
  {  // Q4_K, d = 1, dmin = 0.25; sub-block 5: scale 0b10'0011 = 35, min 0b01'0100 = 20.
    uint8_t b[144] = {};
    const uint16_t one = f32_to_f16(1.0f), quarter = f32_to_f16(0.25f);
    std::memcpy(b, &one, 2);
    std::memcpy(b + 2, &quarter, 2);
    b[4 + 9] = 0x43;        // scales[9]: low nibble 3 (scale), high nibble 4 (min)
    b[4 + 1] = 0x80;        // scales[1]: top bits 2 -> scale += 32
    b[4 + 5] = 0x40;        // scales[5]: top bits 1 -> min += 16
    b[16 + 64 + 7] = 0x90;  // chunk 2, byte 7: high nibble 9 is value 2*64 + 32 + 7 (sub-block 5)
    dequantize_row(Precision::Q4_K, b, 256, out.data());
    EXPECT_EQ(out[167], 35.0f * 9 - 0.25f * 20);
    EXPECT_EQ(out[160], -0.25f * 20);
    EXPECT_EQ(out[135], 0.0f);  // sub-block 4 of chunk 2: low nibble 0, scale and min 0 (scales[0], [8] are 0)
  }
  {  // Q6_K, d (the last field) = 2; value 200 is half 1, group 2 (high nibble of ql[64 + 8]), l = 8.
    uint8_t b[210] = {};
    const uint16_t two = f32_to_f16(2.0f);
    std::memcpy(b + 208, &two, 2);
    b[64 + 8] = 0x50;                      // high nibble 5
    b[128 + 32 + 8] = 0x30;                // bits 4-5 of qh[32 + 8]: 3 -> + 48
    b[192 + 8 + 4] = uint8_t(int8_t(-3));  // scales[8 + 4]
    dequantize_row(Precision::Q6_K, b, 256, out.data());
    EXPECT_EQ(out[200], 2.0f * -3 * float(5 + 48 - 32));
  }
}

TEST(Quant, GemvRowsMatchesADoubleSumOverTheDecodedValues) {
  std::mt19937 gen(12);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (Precision p : kQuantized) {
    for (int nblocks : {1, 2, 3}) {
      const int64_t rows = 9, cols = int64_t(nblocks) * block_elems(p);
      SCOPED_TRACE(std::string(precision_name(p)) + " cols " + std::to_string(cols));
      const auto m = random_matrix(p, rows, cols, gen);
      const auto w = ref_matrix(p, m, rows, cols);
      std::vector<float> x(static_cast<size_t>(cols));
      for (auto& v : x) v = nd(gen);
      for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {2, 5}, {8, 9}, {4, 4}}) {
        std::vector<float> y(size_t(r1 - r0) + 1, 12345.0f);  // one past the end: must stay untouched
        gemv_rows(m.data(), p, cols, x.data(), y.data(), r0, r1);
        for (int64_t r = r0; r < r1; ++r) {
          double want = 0, mag = 0;
          for (int64_t c = 0; c < cols; ++c) {
            const double t = double(w[size_t(r * cols + c)]) * x[size_t(c)];
            want += t;
            mag += std::abs(t);
          }
          EXPECT_NEAR(y[size_t(r - r0)], want, 1e-5 * mag) << "row " << r;
        }
        EXPECT_EQ(y.back(), 12345.0f);
      }
    }
  }
}

TEST(Quant, RowsF32AndMatViewDecodeTheMatrix) {
  std::mt19937 gen(13);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (Precision p : kQuantized) {
    SCOPED_TRACE(precision_name(p));
    const int64_t rows = 6, cols = 2 * block_elems(p);
    const auto m = random_matrix(p, rows, cols, gen);
    const auto w = ref_matrix(p, m, rows, cols);
    std::vector<float> out(size_t((rows - 1) * cols));
    rows_f32(m.data(), p, cols, 0, 1, rows, out.data());  // rows 1..5
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(w[size_t(cols) + i])) << i;

    const MatView v{m.data(), p, rows, cols, 0};
    std::vector<float> row(static_cast<size_t>(cols)), x(row.size()), y(static_cast<size_t>(rows));
    v.row(3, row.data());
    EXPECT_EQ(std::memcmp(row.data(), w.data() + 3 * cols, size_t(cols) * sizeof(float)), 0);
    for (auto& e : x) e = nd(gen);
    v.gemv(x.data(), y.data(), 0, rows);
    for (int64_t r = 0; r < rows; ++r) {
      double want = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        want += double(w[size_t(r * cols + c)]) * x[size_t(c)];
        mag += std::abs(double(w[size_t(r * cols + c)]) * x[size_t(c)]);
      }
      EXPECT_NEAR(y[size_t(r)], want, 1e-5 * mag) << "row " << r;
    }
  }
}

TEST(Quant, RejectsRowsThatAreNotWholeBlocks) {
  std::vector<uint8_t> b(256);
  std::vector<float> out(300);
  EXPECT_THROW(dequantize_row(Precision::Q4_K, b.data(), 100, out.data()), std::exception);
  EXPECT_THROW(dequantize_row(Precision::F32, b.data(), 32, out.data()), std::exception);
}
