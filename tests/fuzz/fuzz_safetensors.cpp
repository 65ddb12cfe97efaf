// libFuzzer target: a safetensors file (core/io/safetensors.cpp). The input is the
// file. It is opened, then every tensor of a float dtype is read whole as float32,
// and its first and last values as bfloat16 and float16.
#include <vector>

#include "fuzz_common.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::tmp_dir() + "/x.safetensors";
  fuzz::put(path, fuzz::as_view(data, size));
  try {
    ds::SafeTensors st = ds::SafeTensors::open(path);
    std::vector<float> f;
    std::vector<uint16_t> h(2);
    for (const auto& e : st.entries()) {
      (void)st.find(e.name);
      const int64_t n = e.numel();
      if (n > (1 << 20)) continue;  // the file is at most max_len bytes: such a tensor cannot pass open
      try {
        f.resize(static_cast<size_t>(n) + 1);
        st.read_f32(e, f.data());
        if (n > 0) {
          st.read_16(e, 0, 1, ds::Precision::BF16, h.data());
          st.read_16(e, n - 1, 1, ds::Precision::F16, h.data());
          st.read_f32(e, n - 1, 1, f.data());
        }
      } catch (const ds::Error&) {
      }
    }
    (void)st.find("no such tensor");
  } catch (const ds::Error&) {
  }
  return 0;
}
