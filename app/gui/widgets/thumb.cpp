#include "widgets/thumb.h"

#include <algorithm>
#include <cmath>

namespace dsgui {

namespace {

int bins(int cells, int bin) { return (cells + bin - 1) / bin; }

// Folds value x of an allowed cell into bin i of m.
void fold(Matrix& m, size_t i, float x) {
  if (!m.mask[i] || x > m.v[i]) m.v[i] = x;
  m.mask[i] = 1;
}

}  // namespace

void Thumb::reset(int side) {
  side_ = std::max(side, 1);
  bin_ = 1;
  rows_ = cols_ = 0;
  m_ = Matrix{};
  ++serial_;
}

void Thumb::fit(int rows, int cols) {
  // Double the bins until the matrix fits; each doubling merges 2 x 2 bins.
  while (bins(std::max(rows, cols), bin_) > side_) {
    Matrix n;
    n.rows = bins(m_.rows, 2);
    n.cols = bins(m_.cols, 2);
    n.v.assign(size_t(n.rows) * n.cols, 0.0f);
    n.mask.assign(n.v.size(), 0);
    for (int r = 0; r < m_.rows; ++r)
      for (int c = 0; c < m_.cols; ++c)
        if (m_.allowed(r, c)) fold(n, size_t(r / 2) * n.cols + c / 2, m_.at(r, c));
    n.lo = m_.lo;
    n.hi = m_.hi;
    m_ = std::move(n);
    bin_ *= 2;
  }
  const int nr = bins(rows, bin_), nc = bins(cols, bin_);
  if (nr == m_.rows && nc == m_.cols) return;
  // Wider or taller: the bins held keep their place, new ones are masked.
  Matrix n;
  n.rows = nr;
  n.cols = nc;
  n.v.assign(size_t(nr) * nc, 0.0f);
  n.mask.assign(n.v.size(), 0);
  for (int r = 0; r < std::min(nr, m_.rows); ++r)
    for (int c = 0; c < std::min(nc, m_.cols); ++c) {
      n.v[size_t(r) * nc + c] = m_.at(r, c);
      n.mask[size_t(r) * nc + c] = m_.mask[size_t(r) * m_.cols + c];
    }
  n.lo = m_.lo;
  n.hi = m_.hi;
  m_ = std::move(n);
}

bool Thumb::add_rows(const Matrix& rows, int row0) {
  if (row0 < rows_ || rows.rows < 0 || rows.cols < 0) return false;
  if (rows.v.size() < size_t(rows.rows) * rows.cols || rows.mask.size() < rows.v.size()) return false;
  const int nrows = row0 + rows.rows, ncols = std::max(cols_, rows.cols);
  fit(nrows, ncols);
  for (int r = 0; r < rows.rows; ++r) {
    const size_t brow = size_t((row0 + r) / bin_) * m_.cols;
    for (int c = 0; c < rows.cols; ++c) {
      if (!rows.allowed(r, c)) continue;
      const float x = rows.at(r, c);
      fold(m_, brow + size_t(c / bin_), x);
      if (!std::isfinite(x)) continue;
      if (m_.lo <= m_.hi) {
        m_.lo = std::min(m_.lo, x);
        m_.hi = std::max(m_.hi, x);
      } else {
        m_.lo = m_.hi = x;
      }
    }
  }
  rows_ = nrows;
  cols_ = ncols;
  ++serial_;
  return true;
}

}  // namespace dsgui
