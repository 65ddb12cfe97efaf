#pragma once
// "Which heads matter?" of the All heads view (heads_ablation.cpp): every head switched
// off alone at the shown step, ranked; the chosen head across the steps.
#include <iosfwd>
#include <string>

#include "shell/app.h"

namespace dsgui {

// A change or a probability with 4 significant digits, signed ("+0.0123", "-1.234e-05",
// "0" only when exactly zero): never a "-0.000" that hides a real change.
std::string sig4(double v);

// A probability from its log-probability: 4 significant digits, and above 0.9995 as
// "1-1.249e-05" (1 - p from expm1), where 4 digits of p would read 1.
std::string prob4(double logp);

// Asks the worker to rank every head at the cursor's step and opens the panel; pick > 0
// (scripted runs): once ranked, re-run the step with the head ranked `pick` off.
void ablation_ask(App& app, int pick = 0);
// The view table's hooks (views.cpp).
bool ablation_waiting(App& app);
bool ablation_answer(App& app, Event& e);
void ablation_failed(App& app);
// The ranking of the cursor's step, if the panel has it (nullptr: none, or out of date).
const ds::HeadAblation* ablation_now(const App& app);
// Whether the panel is shown (the button was pressed).
bool ablation_open(const App& app);
// The button that asks for the ranking, for the view's row of controls.
void ablation_button(App& app);
// The panel, `width` wide, at the cursor.
void ablation_panel(App& app, float width);
// The All heads layout (tile side, columns, area and the grids' box) and then
// ablation_sidecar, for the scripted run's sidecar (heads.cpp).
void heads_sidecar(const App& app, std::ostream& f);
// For the scripted run's sidecar: the heads switched off (window and engine) and the
// ranking shown, full precision.
void ablation_sidecar(const App& app, std::ostream& f);

}  // namespace dsgui
