// libFuzzer target: a llama2.c checkpoint (core/io/llama2c.cpp). The first byte picks
// the precision the weights are loaded in (0 F32, 1 BF16, 2 F16, by its value mod 3)
// and where the matrices go (by its value / 3 mod 3: row-major, tiles, in place in the
// mapped file); the rest is the .bin file. A checkpoint that loads is run (fuzz::run_model).
#include "fuzz_common.h"
#include "io/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const ds::Precision kPrecision[3] = {ds::Precision::F32, ds::Precision::BF16, ds::Precision::F16};
  const ds::Precision p = kPrecision[data[0] % 3];
  static const ds::Llama2cStorage kStorage[3] = {ds::Llama2cStorage::Rows, ds::Llama2cStorage::Tiles,
                                                 ds::Llama2cStorage::Mapped};
  const ds::Llama2cStorage storage = kStorage[(data[0] / 3) % 3];
  const std::string path = fuzz::tmp_dir() + "/model.bin";
  fuzz::put(path, fuzz::as_view(data + 1, size - 1));
  try {
    ds::Llama2cModel m = ds::load_llama2c(path, p, storage);
    fuzz::run_model(std::move(m.cfg), std::move(m.w));
  } catch (const ds::Error&) {
  }
  return 0;
}
