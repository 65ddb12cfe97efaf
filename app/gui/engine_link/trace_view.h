#pragma once
// Read-only helpers the panels use on the window's copy of the Trace: full attention
// matrices with their masks, token lists, residual norms, visible whitespace.
#include <string>
#include <vector>

#include "probe/trace.h"

namespace dsgui {

// A matrix ready to draw: rows x cols values and a mask (1 allowed, 0 masked).
struct Matrix {
  int rows = 0, cols = 0;
  std::vector<float> v;
  std::vector<uint8_t> mask;
  float vmin = 0, vmax = 1;  // the colour range (display_range of lo, hi)
  float lo = 0, hi = -1;     // smallest and largest allowed finite cell (lo > hi: none)
  std::string error;         // why there is nothing to draw
  bool ok() const { return error.empty() && rows > 0 && cols > 0; }
  float at(int r, int c) const { return v[size_t(r) * cols + c]; }
  bool allowed(int r, int c) const { return mask[size_t(r) * cols + c] != 0; }
};

// Attention of one layer and head (head < 0: the mean over heads) as of `step`:
// [positions, positions] for self-attention, [positions, source] for cross.
Matrix attention_matrix(const ds::Trace& t, int layer, int head, int step, bool cross, bool scores);
// Encoder self-attention [source, source].
Matrix encoder_matrix(const ds::Trace& t, int layer, int head);

// The rows one step adds to attention_matrix: rows [pos0, pos0 + T) of the step's
// matrix, as a [T, keys] matrix (keys: the step's positions, or the source length for
// cross-attention), with their mask and range. attention_matrix is these rows of
// every step up to its own, stacked, so a view can grow its matrix a step at a time.
Matrix attention_step_rows(const ds::Trace& t, int layer, int head, int step, bool cross, bool scores);
// Puts rows (from attention_step_rows) into m from row `row0` on, widening m when the
// rows are wider: cells of earlier rows in the new columns, and rows skipped, are
// masked zeros (a key that did not exist when a row was computed). Keeps lo, hi,
// vmin and vmax as attention_matrix sets them.
void append_rows(Matrix& m, const Matrix& rows, int row0, bool scores);
// The top-left rows x cols of m (no larger than m), with its range made again: the
// matrix as of an earlier step of the same trace is this crop of a later one (rows:
// the positions then; cols: the same for self-attention, the source for cross).
Matrix crop(const Matrix& m, int rows, int cols, bool scores);
// The colour range of a matrix whose allowed finite cells span [lo, hi] (lo > hi:
// none): weights from 0, scores over their own range.
void display_range(float lo, float hi, bool scores, float& vmin, float& vmax);
// The residual points, by kind: 0 resid_pre, 1 resid_mid, 2 resid_post, 3 resid_mid_cross
// (between cross-attention and the feed-forward; encoder-decoder models only).
inline constexpr int kResidKinds = 4;
// Layer x position map of the norms of one residual point (kind as above).
Matrix resid_norm_map(const ds::Trace& t, int step, int kind);
// The same map kept for a whole run and grown a step at a time: a step of a long run
// reads only its own rows (a compact trace keeps resid_post as float16 values, and the
// norms of 1,000 positions x 12 layers of 768 values each took tens of ms a frame).
// Within one trace epoch (steps only appended) as_of(step) equals resid_norm_map(t,
// step, kind): later steps are cropped off unless one of them wrote a position again
// (a run without the KV cache recomputes every position), which starts it over.
struct GrowingNorms {
  // The map as of `step`; reads the steps after the last one read, or starts over when
  // epoch or kind differ from the last call's.
  const Matrix& as_of(const ds::Trace& t, uint64_t epoch, int step, int kind);

 private:
  void start(uint64_t epoch, int kind, int layers);
  bool add_step(const ds::Trace& t, int s);  // false: nothing to read, or a position written again
  uint64_t epoch_ = 0;
  int kind_ = -1, layers_ = 0, read_ = -1;  // steps 0 .. read_ are in the table
  bool any_ = false;
  std::vector<std::vector<float>> norms_;  // [layer][position]
  std::vector<int> written_;               // positions' steps: the last step that wrote each (-1: none)
  Matrix m_;
  int m_step_ = -2;  // the step m_ is as of (-2: none)
};

// The residual vector at a position (kind as above).
bool resid_vector(const ds::Trace& t, int step, int layer, int kind, int pos, std::vector<float>& out);
// The norm of that vector; also for points a compact trace keeps as norms only.
bool resid_norm(const ds::Trace& t, int step, int layer, int kind, int pos, float& out);

// One token of the decoder sequence as of a step.
struct TokenInfo {
  int pos = 0, id = 0;
  std::string text;
  bool prompt = false;  // part of the prompt (not drawn)
  bool fed = true;      // false for the token just drawn (not run through the model yet)
  int drawn_at = -1;    // step whose sample drew it
  float p = 0, p_raw = 0;
  int rank = -1;
};
std::vector<TokenInfo> tokens_as_of(const ds::Trace& t, int step);
// The step whose rows include position pos, or -1.
int step_of_position(const ds::Trace& t, int pos);
// The step whose sample was drawn from position pos (pos is that step's last row), or -1.
int step_sampling_at(const ds::Trace& t, int pos);

// Whether the font can show the symbols below (set once the font is loaded).
void set_unicode_font(bool yes);
bool unicode_font();
// A token piece with whitespace made visible: space (and the space markers of GPT-2's
// and SentencePiece's vocabularies, U+0120 and U+2581) -> open box, newline -> return
// symbol, tab -> arrow; byte tokens like <0x0A> read as the byte they stand for; a
// byte-level vocabulary's entry whose bytes are whole UTF-8 characters reads as that
// text ("Ã©", the bytes of "é" in GPT-2's byte alphabet, reads "é").
std::string visible(const std::string& piece);
// Shortened to at most n characters (UTF-8 aware), with an ellipsis.
std::string shorten(const std::string& s, int n);

}  // namespace dsgui
