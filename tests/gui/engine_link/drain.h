#pragma once
// For the tests that drive the engine's worker: every event it sends until it is idle.
#include <chrono>
#include <thread>
#include <vector>

#include "engine_link/worker.h"

namespace dsgui_test {

// Collects the worker's events until it is idle (or `seconds` pass: a hang then shows as
// the events missing, not as a test that never ends).
inline std::vector<dsgui::Event> drain(dsgui::Worker& w, int seconds = 120) {
  std::vector<dsgui::Event> all;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    for (auto& e : w.poll()) all.push_back(std::move(e));
    if (!w.busy()) {
      for (auto& e : w.poll()) all.push_back(std::move(e));
      return all;
    }
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(seconds)) return all;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace dsgui_test
