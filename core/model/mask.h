#pragma once
// The attention mask rule, written once. The engine, the readable reference
// (model/reference.cpp), the trace and the window all ask this function which keys a
// query may read; a masked key gets -inf added to its score before the softmax.
#include <span>

namespace ds {

enum class AttnKind {
  Causal,         // decoder self-attention: a query reads itself and earlier positions
  Bidirectional,  // encoder self-attention: every source token that is not padding
  Cross           // decoder queries over the encoder output: every source token that is not padding
};

// May the query at absolute position `query_pos` read key `key`? For Causal the key is
// an absolute position; with a sliding window (window > 0, the layers of a model that
// have one) only the last `window` positions up to the query are read. Otherwise the key
// indexes the source ids, where `pad_id` (when >= 0) marks padding.
inline bool may_attend(AttnKind kind, int query_pos, int key, std::span<const int> src_ids = {}, int pad_id = -1,
                       int window = 0) {
  if (kind == AttnKind::Causal) return key <= query_pos && (window <= 0 || query_pos - key < window);
  return !(pad_id >= 0 && key < int(src_ids.size()) && src_ids[size_t(key)] == pad_id);
}

}  // namespace ds
