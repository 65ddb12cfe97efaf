#pragma once
// The window's shared state and its actions. App composes named parts (the engine link,
// the trace and its history, the selection, playback, the what-ifs, the look, the text
// boxes, the requests to main, the messages, the maps on the GPU). The views are listed
// in views.h; like imgui_demo.cpp, each is a function with its own state struct beside
// it, and no framework sits on top.
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <typeindex>
#include <utility>
#include <vector>

#include "engine_link/trace_view.h"
#include "engine_link/undo.h"
#include "engine_link/worker.h"
#include "imgui.h"
#include "probe/trace.h"
#include "shell/view_table.h"
#include "widgets/draw.h"
#include "widgets/heatmap.h"

namespace dsgui {

// A continuation kept when the class forks: its trace and how it was made.
struct Branch {
  std::string label;
  ds::Trace trace;
  int fork_step = 0;  // the step the other branch regenerates
};

// The window's sampling settings before any change (temperature 1, top-p 0.9).
ds::SamplerConfig default_sampler();

// ---- App's parts: each holds one concern of the window's state.

// The engine as the window knows it: the worker thread, the model it holds, how it
// computes. Views ask it for things through ask() and ask_latest().
struct EngineLink {
  Worker worker;
  std::shared_ptr<const ModelInfo> model;  // null when no model is loaded
  bool loading = false;
  double loading_since = 0;
  std::string loading_what;
  ds::Precision precision = ds::Precision::F32;  // how the next model loaded keeps its weights
  ds::Products products = ds::Products::Fast;    // its products with quantized weights (--products)
  int threads = 1;                               // threads the engine computes a step with
  bool kv_cache = true;                          // the next Start keeps a KV cache (else recomputes the prefix)
  bool started = false;                          // the worker has a session with the current prompt
  bool done = false;                             // the session takes no more steps
  int steps_wanted = 0;                          // steps asked of the worker and not yet arrived
  double last_step_seconds = 0;
  // Posts a command; ask_latest drops the commands of its kind still queued (a request
  // whose answer would be out of date by the time it ran).
  void ask(Command c) { worker.post(std::move(c)); }
  void ask_latest(Command c) { worker.post_latest(std::move(c)); }
};

// The trace on screen and what came before it: the branches kept, the undo stack.
struct TraceHistory {
  ds::Trace trace;
  uint64_t version = 1;  // bumped whenever trace changes
  uint64_t epoch = 1;    // bumped when steps are removed or the trace is replaced
  bool replay = false;   // showing a trace opened from a file
  std::vector<Branch> branches;
  int branch_shown = 0;
  UndoStack undo;                     // every what-if pushes what it replaced (undo_app.cpp)
  std::optional<Undo> pending_start;  // Start over a trace: pushed once the session has started
};

// What is being looked at: the step, the query position, the view, the layer and head.
struct Selection {
  int cursor = -1;            // the step being looked at
  int pos = -1;               // selected query position, -1: the last row of the cursor's step
  int view = 0;               // the row of the view table (views.h) on screen
  bool view_request = false;  // select `view` in the tab bar this frame
  int layer = 0, head = 0;    // head -1: mean of the layer's heads
};

// Play: steps taken (or shown) one after another at a speed.
struct Playback {
  bool playing = false;
  float speed = 2.0f;  // steps a second
  double next = 0;     // when the next step is due
};

// The what-ifs: the sampling settings and the heads switched off, and the draw a
// re-run replaced (for comparison).
struct WhatIfs {
  ds::SamplerConfig sampler;
  std::vector<std::pair<int, int>> heads_off;           // (layer, head)
  std::vector<std::pair<int, int>> cross_heads_off;     // cross-attention (layer, head), encoder-decoder models
  std::vector<std::pair<int, int>> heads_engine;        // the heads send_heads last switched off in the engine
  std::vector<std::pair<int, int>> cross_heads_engine;  // the cross-attention heads send_heads last switched off
  std::optional<ds::SampleRecord> before;               // the draw before a re-run, for comparison
  int before_step = -1;
  std::string before_label;
};

// How things look: the maps' colours and scales, the theme, the text size, presenter mode.
struct Look {
  bool show_scores = false, mask_only = false, log_scale = false;
  int cmap = kViridis;
  bool light = false;
  float ui_scale = 1.0f;
  bool font_dirty = true;
  ImFont* mono_font = nullptr;  // for code (the Block view); null: the main font
  bool tooltips = true;
  bool captions = true;         // the one-sentence explanation above each view
  bool presenter = false;       // F11: full screen, the view alone (presenter.cpp)
  double presenter_since = -1;  // when presenter mode was entered (its hint fades)
  bool keys_help = false;       // the F1 card of every key is up
  int fit_serial = 0;           // bumped by F: every heatmap fits its area again
  bool wheel_zooms = false;     // the mouse is over a heatmap: the wheel zooms it, the view does not scroll
  bool show_legend = true;      // the chip colours and markers under the token strip
  float strip_lines = 1;        // lines of the token strip
};

// The text boxes, and the text the running session was started with.
struct Inputs {
  std::string prompt, source;
  std::string model_path, tokenizer_path, trace_path = "trace.dstrace";
  std::string png_path = "decoderscope.png";
  std::string run_prompt, run_source, pending_prompt, pending_source;  // the session's, and the Start on its way
  bool start_pending = false;
  bool step_after_start = false;  // Step pressed with changed text: start from it, then step
  bool keep_text = false;         // keep the typed prompt and source when a model loads
  bool chat = false;              // the prompt box holds a chat's user message (ModelInfo::has_chat)
  std::string system = "You are a helpful assistant.";  // the chat's system message ("" for none)
  // What a session starts from, as one string to compare with run_prompt and
  // pending_prompt: the prompt, or in chat mode the system and user messages.
  std::string prompt_key() const { return chat ? "\x01" + system + "\x02" + prompt : prompt; }
  std::string prev_model_spec;  // the model loaded before the current one
  // Beside the text boxes (notices.cpp): why the text (or the model) was refused, and a
  // note that the sampling settings were kept from the model before.
  std::string error, sampler_note;
};

// What main does between frames, asked for during one.
struct Requests {
  bool quit = false;
  bool open_model = false;
  std::string screenshot;    // save the whole window to this PNG
  std::string heatmap_png;   // save the last drawn heatmap to this PNG
  std::string window_shot;   // "The whole window": saved on the next frame, the dialog closed
  bool hide_popups = false;  // this frame is saved as a picture: no dialog, no tooltip
  uint64_t scrolled_version = 0;
  int scrolled_cursor = -2;  // the step the token strip last scrolled to
};

// The status line and the dialog.
struct Messages {
  std::string status, error;
  double status_time = 0;
  std::string alert;  // shown in a dialog until dismissed (a bad trace, a bad option)
};

// The maps on the GPU: matrices rebuilt only when their key changes, their textures and
// render targets, and where each landed on screen this frame.
struct Maps {
  // Every matrix made gets a new lineage id; a matrix that only gains rows keeps it, so
  // that its texture is sent only the rows it gained.
  uint64_t last_lineage = 0;  // the last lineage id given out
  struct CachedMatrix {
    std::string key;
    uint64_t lineage = 0;
    Matrix m;
  };
  std::map<std::string, CachedMatrix> matrix_cache;
  template <class F>
  const CachedMatrix& cached(const std::string& slot, const std::string& key, F&& make) {
    auto& e = matrix_cache[slot];
    if (e.key != key || e.lineage == 0) {
      e.m = make();
      e.key = key;
      e.lineage = ++last_lineage;
    }
    return e;
  }
  // An attention matrix as of the cursor that grows a step at a time while the cursor
  // moves forward in the same trace, and is made again for anything else.
  struct GrowingMatrix {
    std::string what;  // trace epoch, layer, head, kind
    int step = -1;     // the step it is built to
    uint64_t lineage = 0;
    Matrix m;
  };
  std::map<std::string, GrowingMatrix> growing;
  std::map<std::string, std::string> drawn_keys;                      // heatmap target -> what it shows
  std::map<std::string, std::unique_ptr<HeatTexture>> heat_textures;  // heatmap name -> its cells on the GPU
  HeatTexture& heat_texture(const std::string& name);
  UploadStats uploads;
  HeatmapRenderer heat;
  std::map<std::string, std::unique_ptr<RenderTarget>> targets;
  RenderTarget& target(const std::string& name);
  std::string last_heatmap;                  // name of the target drawn by the visible view (export)
  std::vector<HeatmapPlacement> placements;  // filled every frame
  ImVec4 view_rect;                          // x, y, w, h of the visible view's area
};

class App {
 public:
  App();

  // ---- set up by main
  bool scripted = false;        // a scripted run: no mouse, no ini file
  std::vector<int> key_taps;    // GLFW keys pressed since the last frame, | GLFW mods << 16 (main.cpp)
  std::vector<int> frame_taps;  // those the shortcuts of this frame read (key_pressed)
  // Whether the GLFW key was pressed this frame (held down: also its repeats when
  // repeat): Dear ImGui's reading, or a press and release both between two frames.
  bool key_pressed(int key, bool repeat = true) const;
  int fb_w = 1280, fb_h = 800;  // framebuffer size this frame

  // ---- the parts
  EngineLink engine;
  TraceHistory history;
  Selection sel;
  Playback play;
  WhatIfs whatif;
  Look look;
  Inputs inputs;
  Requests requests;
  Messages msgs;
  Maps maps;

  double view_ms = 0;  // how long the shown view's panel took to build in the last frame (--bench)
  int selected_position() const;
  const Maps::GrowingMatrix& attention_view(const std::string& slot, int layer, int head, bool cross, bool scores);

  // ---- undo (undo_app.cpp)
  void undo();       // Ctrl+Z, Edit > Undo
  void edit_menu();  // the menu bar's Edit menu
  // What a what-if is about to replace, from step `shared` on (-1: the whole trace).
  Undo snapshot(const std::string& label, int shared) const;
  // Keeps the trace as a branch forked at step s before a what-if replaces its steps
  // from s on (unless a branch with the same tokens is kept already); its index or -1.
  int keep_as_branch(const std::string& why, int s);
  std::string settings_label() const;  // "T 1.00, top-k 0, top-p 1.00, seed 1, 2 heads off"
  bool input_changed() const;          // the boxes differ from what the running session was started with
  cmd::ChatInput chat_input() const;   // chat mode as the boxes say (off unless the model has a template)
  bool special_token(int id) const;    // a control or special token of the model's tokenizer

  // ---- actions
  void load_model(const std::string& spec, const std::string& tokenizer);
  void start();
  void step_forward();
  void step_back();
  void run_to_end();
  bool running_to_end() const;  // "Run to end" asked and the worker still writing
  void stop_run();              // stops "Run to end" (Stop, Space)
  void timeline(int n);
  void reset();
  void toggle_play();
  void rewind_engine(int keep);  // forget steps >= keep in the engine and here
  void redraw_step(int s);       // draw step s again with the current settings
  void rerun_with_heads(int s);  // step s again with heads_off applied
  bool send_sampler();           // false (and the reason on the status line) when the settings are refused
  void send_heads();
  void fork_here();
  void forget_branch(int i);                    // Branches: "Forget this branch"
  void scrub_to(int step);                      // the timeline slider
  void show_view(int v);                        // a tab of the view table (views.h), from the View menu or a script
  void toggle_head(int layer, int head);        // All heads: right-click switches a head off or on
  void toggle_cross_head(int layer, int head);  // the same for a cross-attention head
  void all_heads_on();
  void redraw_new_seed(int s);  // Next token: "New seed, draw again"
  void set_theme(bool light_theme);
  void scale_text(int dir);  // +1 bigger, -1 smaller, 0 the default size
  bool open_trace(const std::string& path);
  // A trace opened (trace_io.cpp opens in the background): shown for replay.
  void show_trace(ds::Trace t, const std::string& path, double seconds = -1);
  bool save_trace(const std::string& path);
  void say(const std::string& s);
  void fail(const std::string& s);
  // A problem the user must see (a trace that cannot be opened, a bad command line):
  // printed on stderr and shown in a dialog in the window until dismissed.
  void alert(const std::string& s);
  void alert_dialog();         // per frame
  void notices();              // per frame, under the text boxes (notices.cpp)
  void use_default_sampler();  // the window's default sampling settings, sent to the engine

  // ---- per frame
  void handle_events();
  void tick(double now);  // playing
  void frame();           // builds the whole window
  void shortcuts();

  // A view's own state: S is declared beside the view's draw function, in its file;
  // made on first use, kept while the window lives.
  template <class S>
  S& state() {
    std::shared_ptr<void>& p = view_states_[std::type_index(typeid(S))];
    if (!p) p = std::make_shared<S>();
    return *static_cast<S*>(p.get());
  }

  // Token helpers shared by views. The tokens as of the cursor and their labels are made
  // once per trace version and cursor (several views and the strip ask every frame; at
  // 1,024 positions making them took a fifth of the window's thread).
  const std::vector<TokenInfo>& tokens() const;
  std::vector<std::string> position_labels(int n) const;
  std::vector<std::string> source_labels() const;

 private:
  struct TokenCache {
    uint64_t version = 0;
    int cursor = -2;
    size_t steps = 0;
    // The tokens, and the ones before them: a reference a view took stays valid when the
    // cursor moves later in the same frame.
    std::shared_ptr<const std::vector<TokenInfo>> toks, before;
    std::vector<std::string> labels;  // position_labels of every token
  };
  mutable TokenCache token_cache_;
  const TokenCache& token_cache() const;

  void menu_bar();
  bool precision_combo(const char* id);  // true when the choice changed
  void toolbar();
  void stepping_row();
  void token_strip();
  void status_bar();
  bool status_shown() const;  // a status message is on (for 8 s; always in a scripted run)
  int status_rows() const;    // 2 when an error needs a second line
  int status_rows_now = 1;    // status_rows() as the frame's layout took it
  void view_tabs();
  void selection_keys();  // Up/Down layer, [ ] head, , . token (shortcuts)
  void keys_overlay();    // the F1 card
  int tab_row(int shown);
  bool tabs_wrap() const;  // the views' tabs need two rows in the window's width
  std::map<std::type_index, std::shared_ptr<void>> view_states_;
};

// A tooltip on the last item, when tooltips are on and the frame is not being saved as a
// picture.
inline void tooltip(App& app, const char* text) { tooltip(app.look.tooltips && !app.requests.hide_popups, text); }

}  // namespace dsgui
