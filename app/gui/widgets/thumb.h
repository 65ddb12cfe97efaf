#pragma once
// A thumbnail of a growing matrix: its cells max-pooled into square bins so that it
// has at most `side` bins each way, whatever the matrix's size. Rows are added as the
// trace grows (one query row per generated token); when the matrix outgrows the bins,
// the bins double in size and neighbouring bins merge, so no row is ever read twice.
// The All heads grid keeps one per head and sends the GPU only these few cells.
#include <cstdint>

#include "engine_link/trace_view.h"

namespace dsgui {

class Thumb {
 public:
  // Forgets everything; at most `side` bins each way from now on (side >= 1).
  void reset(int side);
  // Rows [row0, row0 + rows.rows) of the full matrix, rows.cols wide (a Matrix from
  // attention_step_rows). Rows before row0 not given yet stay masked, as do the cells
  // of earlier rows in columns they did not have. Returns false (nothing changed)
  // when row0 is before the rows held.
  bool add_rows(const Matrix& rows, int row0);

  // The pooled cells: each the largest allowed value of its bin, allowed when any
  // cell of the bin is; lo and hi span the allowed finite cells of the full matrix.
  const Matrix& pooled() const { return m_; }
  int bin() const { return bin_; }         // full cells per bin, each way (a power of two)
  int full_rows() const { return rows_; }  // the full matrix's size so far
  int full_cols() const { return cols_; }
  int side() const { return side_; }
  uint64_t serial() const { return serial_; }  // bumped whenever the cells change

 private:
  void fit(int rows, int cols);  // bins large enough for rows x cols, m_ resized
  Matrix m_;
  int side_ = 64, bin_ = 1, rows_ = 0, cols_ = 0;
  uint64_t serial_ = 0;
};

}  // namespace dsgui
