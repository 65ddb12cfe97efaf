#!/usr/bin/env bash
# The window's test: scripted runs under Xvfb take a screenshot of every view and the
# pictures themselves are checked by ds_png_check (not blank; no OpenGL error; in the
# causal heatmap every cell above the diagonal, and only those, has the mask colour, and
# on a sliding-window layer also the cells the window leaves out;
# the cross-attention heatmap has none); stepping back then forward gives the same
# picture byte for byte; a saved trace replays with every view working.
# usage: gui_test.sh DECODERSCOPE DS_PNG_CHECK OUT_DIR [GROUP]   (exit 77: skipped)
#        gui_test.sh --list                                      (the groups, one a line)
# The checks come in groups (the list below) that ctest runs as separate tests, in
# parallel: each group has its own OUT_DIR and its own X displays, and a check that
# compares two runs (a replay with its live run, back-and-forward with forward) keeps
# both runs in one group. Without GROUP every group runs in turn, in OUT_DIR.
# A failed check is counted, not fatal: the script goes on to the next one.
set -euo pipefail
ALL_GROUPS=(views encdec replay models block gguf tracebin_dec tracebin_enc maps soak keys blockview beamtab headsmatter lensgrid install lessons attribution compare patching products)
if [ "${1:-}" = --list ]; then
  printf '%s\n' "${ALL_GROUPS[@]}"
  exit 0
fi
if [ $# -lt 3 ] || [ $# -gt 4 ]; then
  echo "usage: gui_test.sh DECODERSCOPE DS_PNG_CHECK OUT_DIR [GROUP]   (groups: ${ALL_GROUPS[*]})" >&2
  exit 2
fi
APP=$1
CHECK=$2
OUT=$3
GROUP=${4:-}
# Each group's first X display number: 100, 110, 120, ... (see xrun).
XNUM=
for i in "${!ALL_GROUPS[@]}"; do
  [ "${ALL_GROUPS[$i]}" = "$GROUP" ] && XNUM=$((100 + 10 * i))
done
if [ -n "$GROUP" ] && [ -z "$XNUM" ]; then
  echo "gui_test.sh: no group '$GROUP' (groups: ${ALL_GROUPS[*]})" >&2
  exit 2
fi
if ! command -v xvfb-run >/dev/null 2>&1; then
  echo "SKIP: xvfb-run is not installed (Debian: apt-get install xvfb xauth)"
  exit 77
fi
# In a sanitizer build the window runs with AddressSanitizer's checks but without leak
# detection: Mesa's driver is unloaded before exit and what it keeps reads as leaks of
# an unknown module, which no suppression can name. (The engine thread and the trace
# helpers are leak-checked by decoderscope_gui_tests.)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
mkdir -p "$OUT"
# Windows driven by keys are not scripted runs: they keep their recent files here, not in ~/.config.
export XDG_CONFIG_HOME
XDG_CONFIG_HOME="$(cd "$OUT" && pwd)/xdg-config"
rm -f "$OUT"/*.png "$OUT"/*.json "$OUT"/*.log "$OUT"/*.dstrace
failed=0
passed=0

# xrun SCREEN LOG ARGS...: the window run with ARGS on an X server of its own (Xvfb, one
# screen of SCREEN, e.g. 1280x800x24), its output in LOG; returns the window's exit code.
# xvfb-run -a takes the first display from XNUM up with no lock file, and tries the next
# one when Xvfb cannot start there (another xvfb-run took it at the same moment). The
# groups start 10 numbers apart, so those running in parallel do not meet; if Xvfb still
# could not start (other programs held 10 displays in a row), the run is tried again.
xrun() {
  local screen=$1 log=$2 try rc
  shift 2
  for try in 1 2 3 4 5; do
    rc=0
    xvfb-run ${XNUM:+-n "$XNUM"} -a -s "-screen 0 $screen" "$APP" "$@" >"$log" 2>&1 || rc=$?
    if [ $rc -ne 1 ] || ! grep -q '^xvfb-run: error: Xvfb failed to start' "$log"; then return $rc; fi
    echo "note: Xvfb did not start (try $try of 5)"
    sleep "$try"
  done
  return $rc
}

# run NAME ARGS...: one scripted run of the window, its screenshot in OUT/NAME.png.
run() {
  local name=$1
  shift
  local rc=0
  xrun 1280x800x24 "$OUT/$name.log" --screenshot "$OUT/$name.png" "$@" || rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL $name: the window exited with $rc"
    sed 's/^/    /' "$OUT/$name.log"
    failed=$((failed + 1))
    return 1
  fi
  return 0
}
check() {
  if "$CHECK" "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}

# fails NAME WANTED ARGS...: the window run with ARGS must fail with WANTED on stderr.
fails() {
  local name=$1 wanted=$2
  shift 2
  local rc=0
  xrun 1280x800x24 "$OUT/$name.log" "$@" || rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 134 ] || [ $rc -ge 128 ]; then
    echo "FAIL $name: the window exited with $rc (wanted a clear error)"
    sed 's/^/    /' "$OUT/$name.log"
    failed=$((failed + 1))
  elif grep -q "terminate called\|json.exception\|X Error" "$OUT/$name.log"; then
    echo "FAIL $name: raw library text on stderr"
    sed 's/^/    /' "$OUT/$name.log"
    failed=$((failed + 1))
  elif ! grep -qF -- "$wanted" "$OUT/$name.log"; then
    echo "FAIL $name: stderr does not say '$wanted'"
    sed 's/^/    /' "$OUT/$name.log"
    failed=$((failed + 1))
  else
    passed=$((passed + 1))
  fi
}

# block_ok NAME: the Block or KV cache view of run NAME had its snapshot.
block_ok() {
  if grep -q '"block_ok": true' "$OUT/$1.png.json"; then
    passed=$((passed + 1))
  else
    echo "FAIL $1: the Block/KV cache view has no snapshot (see $OUT/$1.png.json)"
    failed=$((failed + 1))
  fi
}

# run_big NAME ARGS...: as run, on a 1920x1080 screen at that size.
run_big() {
  local name=$1
  shift
  if ! xrun 1920x1080x24 "$OUT/$name.log" --size 1920x1080 --screenshot "$OUT/$name.png" "$@"; then
    echo "FAIL $name: the window exited with an error"
    sed 's/^/    /' "$OUT/$name.log"
    failed=$((failed + 1))
    return 1
  fi
}

DEC=(--model random:decoder --prompt "hello world" --steps 6)
ENC=(--model random:encdec --source "the cat sat" --steps 6)
MODELS="$(dirname "$0")/../../assets/models"

# ---- views
group_views() {
  # Every view of a decoder-only model.
  # The cells are drawn in the colormap chosen (each colormap and scale has its own shader
  # program), against the C++ colormap the legends use: 82-98% of the pixels (the rest are
  # the lines between cells and the outlines), another colormap 0-16%.
  if run attention "${DEC[@]}" --view attention --layer 1 --head 2; then
    check blank "$OUT/attention.png"
    check heatmap "$OUT/attention.png" attention causal
    check colours "$OUT/attention.png" attention 0.7
  fi
  if run attention_mean "${DEC[@]}" --view attention --head mean --log --colormap magma; then
    check heatmap "$OUT/attention_mean.png" attention causal
    check colours "$OUT/attention_mean.png" attention 0.7
  fi
  if run attention_scores "${DEC[@]}" --view attention --scores --colormap greys --light; then
    check heatmap "$OUT/attention_scores.png" attention causal
    check colours "$OUT/attention_scores.png" attention 0.7
  fi
  if run attention_mask "${DEC[@]}" --view attention --mask-only; then
    check heatmap "$OUT/attention_mask.png" attention causal
  fi
  for v in heads residual next lens; do
    if run "$v" "${DEC[@]}" --view "$v"; then check blank "$OUT/$v.png"; fi
  done
  # The Next token view: the temperature slider moved after the steps (the last step's
  # distribution reshaped, nothing drawn), and contrastive search's columns.
  if run next_preview "${DEC[@]}" --view next --top-k 8 --temperature 0.7 --preview-temperature 1.5; then
    check blank "$OUT/next_preview.png"
  fi
  if run next_contrastive "${DEC[@]}" --view next --penalty-alpha 0.6 --top-k 4 --repetition-penalty 1.3; then
    check blank "$OUT/next_contrastive.png"
  fi
  if run branches "${DEC[@]}" --steps 10 --view branches --fork-at 4 --fork-seed 9; then
    check blank "$OUT/branches.png"
  fi
}

# ---- encdec: encoder-decoder views, a model that cannot be opened, what-ifs, All heads
group_encdec() {
  # Encoder-decoder: cross-attention has no masked cell on a source without padding.
  if run cross "${ENC[@]}" --view cross; then
    check blank "$OUT/cross.png"
    check heatmap "$OUT/cross.png" cross nomask
  fi
  if run cross_self "${ENC[@]}" --view attention --save-trace "$OUT/trace_encdec.json"; then
    check heatmap "$OUT/cross_self.png" attention causal
    if run cross_replay --trace "$OUT/trace_encdec.json" --view cross --head mean; then
      check heatmap "$OUT/cross_replay.png" cross nomask
    fi
  fi

  for v in heads residual next lens; do
    if run "encdec_$v" "${ENC[@]}" --view "$v"; then check blank "$OUT/encdec_$v.png"; fi
  done

  # A model that cannot be opened ends the run with a message and a non-zero exit.
  if xrun 1280x800x24 "$OUT/bad.log" --model /nonexistent/model.bin --screenshot "$OUT/bad.png"; then
    echo "FAIL bad model: the window exited 0"
    failed=$((failed + 1))
  elif grep -q "nonexistent" "$OUT/bad.log"; then
    passed=$((passed + 1))
  else
    echo "FAIL bad model: no message naming the file"
    cat "$OUT/bad.log"
    failed=$((failed + 1))
  fi

  # A re-run of the last step with heads off keeps the original continuation as a branch
  # (the plain run's tokens, forked at that step) and one what-if to undo; Ctrl+Z (--undo 1)
  # puts the original back as the live text, with no branch and nothing left to undo. The
  # Residual stream view of an encoder-decoder model (resid_mid_cross among its points).
  if run whatif_plain "${DEC[@]}" --view branches &&
    run whatif_rerun "${DEC[@]}" --view branches --head-off 0:0 --head-off 1:1 &&
    run whatif_undo "${DEC[@]}" --view branches --head-off 0:0 --head-off 1:1 --undo 1; then
    check blank "$OUT/whatif_rerun.png"
    if python3 - "$OUT" <<'PY'; then
import json, sys
d = sys.argv[1]
plain, rerun, undo = (json.load(open(f"{d}/whatif_{n}.png.json")) for n in ("plain", "rerun", "undo"))
problems = []
b = rerun["branches"]
if len(b) != 1 or b[0]["tokens"] != plain["tokens"] or b[0]["fork_step"] != plain["steps"] - 1:
    problems.append(f"the re-run kept {b}, not the original {plain['tokens']} forked at step {plain['steps'] - 1}")
if rerun["undo"] != 1:
    problems.append(f"the re-run left {rerun['undo']} what-ifs to undo, not 1")
if undo["tokens"] != plain["tokens"] or undo["branches"] or undo["undo"] != 0:
    problems.append(f"after Ctrl+Z: tokens {undo['tokens']} (want {plain['tokens']}), "
                    f"{len(undo['branches'])} branches, {undo['undo']} to undo")
for p in problems:
    print("FAIL whatif:", p)
sys.exit(1 if problems else 0)
PY
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
    fi
  fi
  if run whatif_residual_encdec "${ENC[@]}" --view residual --layer 1; then
    check blank "$OUT/whatif_residual_encdec.png"
  fi

  # All heads of an encoder-decoder model shows three grids (decoder self-attention,
  # cross-attention, encoder self-attention), each one map per head; a cross-attention
  # head switched off from the command line re-runs the last step (--head-off cL:H).
  if [ -f "$MODELS/dates/model.safetensors" ]; then
    if run heads_dates --model builtin:dates --source "July 14, 1989" --steps 8 --view heads; then
      check blank "$OUT/heads_dates.png"
      if grep -q '"head_grids": \["heads", "heads-cross", "heads-encoder"\]' "$OUT/heads_dates.png.json" &&
        grep -q '"name": "heads-cross", [^}]*"rows": 2, "cols": 4' "$OUT/heads_dates.png.json"; then
        passed=$((passed + 1))
      else
        echo "FAIL heads_dates: All heads does not show the cross-attention and encoder grids of dates"
        grep -o '"head_grids": [^]]*]' "$OUT/heads_dates.png.json" || true
        failed=$((failed + 1))
      fi
    fi
    if run heads_dates_off --model builtin:dates --source "July 14, 1989" --steps 8 --view heads --head-off c1:0; then
      check blank "$OUT/heads_dates_off.png"
    fi
  fi
  if run heads_dec "${DEC[@]}" --view heads; then
    if grep -q '"head_grids": \["heads"\]' "$OUT/heads_dec.png.json"; then
      passed=$((passed + 1))
    else
      echo "FAIL heads_dec: All heads of a decoder-only model should show its one grid alone"
      failed=$((failed + 1))
    fi
  fi
}

# ---- replay: back and forward, grown heatmaps, 16-bit weights, JSON traces
group_replay() {
  # Stepping back then forward again reproduces the same tokens and the same picture.
  if run forward "${DEC[@]}" --steps 9 --seed 5 --view attention; then
    if run back_forward "${DEC[@]}" --steps 9 --seed 5 --view attention --step-back 4; then
      check same "$OUT/forward.png" "$OUT/back_forward.png"
    fi
  fi

  # Heatmaps grown a row at a time while the engine runs (only the new rows go to the
  # GPU; past 32 positions the textures move to a larger allocation) are, cell for
  # cell, the ones a replay of the same trace sends whole. (All heads sends each head's
  # thumbnail, at most a tile's pixels, whole; the check is that it matches the replay.)
  for v in attention heads; do
    if run "grown_$v" "${DEC[@]}" --steps 30 --view "$v" --save-heatmap "$OUT/grown_${v}_cells.png" \
        --save-trace "$OUT/trace_grown_$v.json"; then
      if [ "$v" = heads ] || grep -q '"appends": [1-9]' "$OUT/grown_$v.png.json"; then
        passed=$((passed + 1))
      else
        echo "FAIL grown_$v: no heatmap was sent a row at a time"
        failed=$((failed + 1))
      fi
      if run "grown_${v}_replay" --trace "$OUT/trace_grown_$v.json" --view "$v" \
          --save-heatmap "$OUT/grown_${v}_replay_cells.png"; then
        check same "$OUT/grown_${v}_cells.png" "$OUT/grown_${v}_replay_cells.png"
      fi
    fi
  done

  # 16-bit weights: the window says which precision it runs, and every view still works.
  for p in bf16 f16; do
    if run "precision_$p" "${DEC[@]}" --precision "$p" --view attention; then
      check heatmap "$OUT/precision_$p.png" attention causal
      want=$([ "$p" = bf16 ] && echo bfloat16 || echo float16)
      if grep -q "\"precision\": \"$want\"" "$OUT/precision_$p.png.json"; then
        passed=$((passed + 1))
      else
        echo "FAIL precision_$p: the window does not run in $want"
        failed=$((failed + 1))
      fi
    fi
  done

  # A saved trace replays with no model: the picture is the one of the live run.
  if run live "${DEC[@]}" --view attention --save-trace "$OUT/trace.json"; then
    if run replay --trace "$OUT/trace.json" --view attention; then
      check heatmap "$OUT/replay.png" attention causal
    fi
    for v in next lens residual heads; do
      if run "replay_$v" --trace "$OUT/trace.json" --view "$v"; then check blank "$OUT/replay_$v.png"; fi
    done
  fi

  # A damaged trace, or a bad option, in a scripted run: a message on stderr naming what
  # is wrong and a non-zero exit, never an abort (134) or a C++ exception's last words.
  if [ -f "$OUT/trace.json" ]; then
    # The second step's pos0 made -5 (the JSON is one line: the 2nd "pos0" is step 2's).
    sed 's/"pos0":[0-9]*/"pos0":-5/2' "$OUT/trace.json" >"$OUT/damaged_pos0.json"
    fails damaged_pos0 "trace step 2: pos0 is -5" --trace "$OUT/damaged_pos0.json" --screenshot "$OUT/x.png"
    head -c 3000 "$OUT/trace.json" >"$OUT/damaged_cut.json"
    fails damaged_cut "not valid JSON" --trace "$OUT/damaged_cut.json" --screenshot "$OUT/x.png"
    sed 's/"version":1/"version":99/' "$OUT/trace.json" >"$OUT/damaged_version.json"
    fails damaged_version "trace version 99" --trace "$OUT/damaged_version.json" --screenshot "$OUT/x.png"
  fi
  echo '{}' >"$OUT/empty_object.json"
  fails empty_object '"format"' --trace "$OUT/empty_object.json" --screenshot "$OUT/x.png"
  # A file that is no trace at all (notes saved under the trace's name) says so.
  echo "lesson notes: attention, then the KV cache" >"$OUT/notes.dstrace"
  fails not_a_trace "not a decoderscope trace" --trace "$OUT/notes.dstrace" --screenshot "$OUT/x.png"
  fails no_such_trace "cannot open trace file {}" --trace '{}' --screenshot "$OUT/x.png"
  fails bad_option "--bogus" --bogus --screenshot "$OUT/x.png"
  fails bad_value "--steps expects an integer" --steps many --screenshot "$OUT/x.png"
  fails huge_size "--size 100000x100000 is too large" --size 100000x100000 --screenshot "$OUT/x.png"
}

# ---- models: the llama2.c fixture, the built-in models, head roles
group_models() {
  # The real llama2.c fixture, when the shared fixtures are there.
  FIX="$(dirname "$0")/../../../shared/fixtures/aidreams260K/model.bin"
  if [ -f "$FIX" ]; then
    if run fixture --model "$FIX" --prompt "Once upon a time" --steps 10 --view attention --layer 3 --head mean; then
      check blank "$OUT/fixture.png"
      check heatmap "$OUT/fixture.png" attention causal
    fi
    # The head detector's grid and the strongest previous-token head on the probe.
    if run roles_fixture --model "$FIX" --prompt "Once upon a time" --steps 2 --view roles; then
      check blank "$OUT/roles_fixture.png"
      check heatmap "$OUT/roles_fixture.png" roles causal
    fi
  else
    echo "note: $FIX is absent; the llama2.c fixture run is skipped"
  fi
  if run roles_random "${DEC[@]}" --view roles --light; then
    check blank "$OUT/roles_random.png"
    check heatmap "$OUT/roles_random.png" roles causal
  fi

  # The built-in dates model (encoder-decoder), when it has been trained.
  if [ -f "$(dirname "$0")/../../assets/models/dates/model.safetensors" ]; then
    if run dates --model builtin:dates --source "July 14, 1989" --steps 11 --view cross --layer 1 --head mean; then
      check blank "$OUT/dates.png"
      check heatmap "$OUT/dates.png" cross nomask
    fi
    # The beam search tree; the window keeps the winner as a branch, whose tokens are the
    # ones decoderscope-cli's beam search prints (between <s> and </s>).
    if run beams --model builtin:dates --source "Sunday, 22 November 2026" --steps 3 --view beams --beam 3; then
      check blank "$OUT/beams.png"
      want="1 $("$(dirname "$APP")/decoderscope-cli" generate --model builtin:dates \
        --source "Sunday, 22 November 2026" --beam 3 --ids) 2" || true
      got=$(grep -o '"branches": \[{[^]]*\]' "$OUT/beams.png.json" | sed 's/.*"tokens": //' | tr -d '",[]a-z:' |
        xargs) || true
      if [ "$got" = "$want" ]; then
        passed=$((passed + 1))
      else
        echo "FAIL beams: the window shows tokens '$got', the CLI's beam search gives '$want'"
        failed=$((failed + 1))
      fi
    fi
    if run beams_light --model builtin:dates --source "the 3rd of March 2021" --steps 3 --view beams --beam 4 \
        --light; then
      check blank "$OUT/beams_light.png"
    fi
  fi

  # The stories model: the Head roles view opens the strongest induction head, the same
  # head decoderscope-cli heads marks (both leave attention to BOS out).
  if [ -f "$MODELS/stories/model.safetensors" ]; then
    if run roles_stories --model builtin:stories --steps 2 --view roles; then
      check blank "$OUT/roles_stories.png"
      want=$("$(dirname "$APP")/decoderscope-cli" heads --model builtin:stories --exclude-bos |
        awk '$5 ~ /\*$/ {print $1, $2}') || true
      got=$(grep -o '"roles": {[^}]*}' "$OUT/roles_stories.png.json" |
        sed 's/.*"layer": \([0-9]*\), "head": \([0-9]*\).*/\1 \2/') || true
      if [ -n "$want" ] && [ "$got" = "$want" ]; then
        passed=$((passed + 1))
      else
        echo "FAIL roles_stories: the window opens head '$got', decoderscope-cli heads marks '$want'"
        failed=$((failed + 1))
      fi
    fi
  fi

  # Temperature 0: the Next token table lists the model's most probable tokens (each
  # step's rows by descending model probability, not ids 0-19 at 0) and keeps 1 token.
  if run next_greedy "${DEC[@]}" --view next --temperature 0 --light --size 1024x768 \
      --save-trace "$OUT/trace_greedy.json"; then
    check blank "$OUT/next_greedy.png"
    kept=$(grep -o '"n_kept": *[0-9]*' "$OUT/trace_greedy.json" | tr -d ' "' | sort -u | xargs) || true
    unsorted=$(sed 's/"candidates":/\n/g' "$OUT/trace_greedy.json" | tail -n +2 | sed 's/\].*//' |
      awk '{n = split($0, a, "\"p_raw\":"); for (i = 3; i <= n; i++) if (a[i] + 0 > a[i - 1] + 0) {print NR; break}}') || true
    if [ "$kept" = "n_kept:1" ] && [ -z "$unsorted" ]; then
      passed=$((passed + 1))
    else
      echo "FAIL next_greedy: n_kept '$kept' (wanted 1); steps whose rows are not by model probability: $unsorted"
      failed=$((failed + 1))
    fi
  fi
  if run lens_light "${DEC[@]}" --view lens --light --size 1024x768; then check blank "$OUT/lens_light.png"; fi
  # Refused text names the real character (an emoji's own code point, never U+FFFD), and
  # a broken config.json is described in words, never the JSON library's tagged text.
  if [ -f "$(dirname "$0")/../../assets/models/dates/model.safetensors" ]; then
    fails source_refused "U+00E4" --model builtin:dates --source "$(printf '3 M\xC3\xA4rz 2021')" --screenshot "$OUT/x.png"
    fails source_emoji "U+1F600" --model builtin:dates --source "$(printf '3 \xF0\x9F\x98\x80')" --screenshot "$OUT/x.png"
  fi
  mkdir -p "$OUT/bad_folder"
  printf '{"n_layer": 2,,}' >"$OUT/bad_folder/config.json"
  : >"$OUT/bad_folder/model.safetensors"
  fails bad_config_json "config.json: not valid JSON: line 1, column 15" --model "$OUT/bad_folder" --screenshot "$OUT/x.png"
  if grep -q '\[json\.' "$OUT/bad_config_json.log"; then
    echo "FAIL bad_config_json: the JSON library's text on stderr"
    failed=$((failed + 1))
  fi
}

# ---- block
group_block() {
  # The Block and KV cache views on every built-in model that has been trained: the
  # window's snapshot of the selected token inside a layer arrived without an error.
  for m in stories dates dates-postnorm adder; do
    [ -f "$MODELS/$m/model.safetensors" ] || continue
    case $m in
      adder) input=(--prompt "57+68=" --steps 4) ;;
      stories) input=(--prompt "Once upon a time, Lily" --steps 10) ;;
      *) input=(--source "the 3rd of March 2021" --steps 6) ;;
    esac
    if run "block_$m" --model "builtin:$m" "${input[@]}" --view block --layer 1 --head 2 --stage attn.scores; then
      check blank "$OUT/block_$m.png"
      block_ok "block_$m"
    fi
    if run "kv_$m" --model "builtin:$m" "${input[@]}" --view kv --layer 0; then
      check blank "$OUT/kv_$m.png"
      block_ok "kv_$m"
    fi
  done
  if run block_mask "${DEC[@]}" --view block --stage attn.mask --select 2 --light; then
    check blank "$OUT/block_mask.png"
    block_ok block_mask
  fi
  if run kv_nocache "${ENC[@]}" --view kv --no-kv-cache; then
    check blank "$OUT/kv_nocache.png"
    block_ok kv_nocache
  fi
}

# ---- gguf
group_gguf() {
  # GGUF files (the shared fixtures' tiny models, made and quantized by llama.cpp; their
  # vocabulary is aidreams260K's): Gemma 3's first layer has a sliding window of 16, so
  # 37 positions show the mask's second edge; the Block view draws its q/k norms, sandwich
  # norms and GELU-tanh gate; the status line names the file's storage types.
  GGUF="$(dirname "$0")/../../../shared/fixtures/gguf/models"
  if [ -f "$GGUF/gemma3-Q4_K_M.gguf" ]; then
    GEMMA=(--model "$GGUF/gemma3-Q4_K_M.gguf" --prompt "Once upon a time" --steps 24)
    if run gguf_gemma3_attention "${GEMMA[@]}" --view attention --layer 0 --head 1; then
      check blank "$OUT/gguf_gemma3_attention.png"
      check heatmap "$OUT/gguf_gemma3_attention.png" attention window:16
      if grep -q '"storage": "Q4_K [0-9]*% + Q6_K [0-9]*%"' "$OUT/gguf_gemma3_attention.png.json"; then
        passed=$((passed + 1))
      else
        echo "FAIL gguf_gemma3_attention: the window does not name the storage Q4_K + Q6_K"
        failed=$((failed + 1))
      fi
    fi
    # A saved trace of it replays with the window's mask (the trace keeps the Config).
    if run gguf_gemma3_mask "${GEMMA[@]}" --view attention --layer 0 --mask-only --light \
        --save-trace "$OUT/trace_gemma3.dstrace"; then
      check heatmap "$OUT/gguf_gemma3_mask.png" attention window:16
      if run gguf_gemma3_replay --trace "$OUT/trace_gemma3.dstrace" --view attention --layer 0 --head 1; then
        check heatmap "$OUT/gguf_gemma3_replay.png" attention window:16
      fi
    fi
    if run gguf_gemma3_block "${GEMMA[@]}" --view block --layer 0 --head 1 --stage attn.mask; then
      check blank "$OUT/gguf_gemma3_block.png"
      block_ok gguf_gemma3_block
    fi
    for m in llama-Q4_K_M qwen3-Q8_0; do
      if run "gguf_$m" --model "$GGUF/$m.gguf" --prompt "Once upon a time" --steps 8 --precision bf16 \
          --view block --stage attn.scores; then
        check blank "$OUT/gguf_$m.png"
        block_ok "gguf_$m"
      fi
    done
  else
    echo "note: $GGUF is absent; the GGUF runs are skipped"
  fi
}

# ---- products
# --products exact|fast on a quantized GGUF file (llama, every matrix Q4_K): the window
# generates greedily what llama.cpp generates on the file itself with fast (the default)
# and what it generates on the file's float32 copy with exact (the two differ from the
# sixth id on), and names the products in use in the status line (the sidecar's copy of
# it; none for a float32 model).
products_ids() {  # NAME IDS_FILE: the run's generated ids are the first ones of IDS_FILE
  python3 - "$OUT/$1.png.json" "$2" "$GGUF/llama.prompt.ids" <<'PY'
import json, sys
got = json.load(open(sys.argv[1]))["tokens"]
want = open(sys.argv[2]).read().split()
prompt = open(sys.argv[3]).read().split()
gen = [str(t) for t in got[len(prompt):]]
if [str(t) for t in got[:len(prompt)]] != prompt or not gen or gen != want[:len(gen)]:
    print("FAIL %s: generated %s, wanted %s" % (sys.argv[1], " ".join(gen), " ".join(want[:len(gen)])))
    sys.exit(1)
PY
}
products_label() {  # NAME LABEL
  if grep -q "\"products\": \"$2\"" "$OUT/$1.png.json"; then
    passed=$((passed + 1))
  else
    echo "FAIL $1: the status line does not say '$2'"
    failed=$((failed + 1))
  fi
}
group_products() {
  GGUF="$(dirname "$0")/../../../shared/fixtures/gguf/models"
  if ! [ -f "$GGUF/llama-Q4_K.gguf" ] || ! command -v python3 >/dev/null 2>&1; then
    echo "note: $GGUF or python3 is absent; the products group is skipped"
    return 0
  fi
  local base=(--model "$GGUF/llama-Q4_K.gguf" --prompt "Once upon a time" --steps 10 --temperature 0 --view next)
  local m want
  for m in fast exact; do
    want="$GGUF/llama-Q4_K.greedy.ids"
    [ $m = exact ] && want="$GGUF/llama-Q4_K.dequantized.greedy.ids"
    if run "products_$m" "${base[@]}" $([ $m = exact ] && echo --products exact); then
      check blank "$OUT/products_$m.png"
      products_label "products_$m" "$m products"
      if products_ids "products_$m" "$want"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
    fi
  done
  if run products_f32 --model "$GGUF/llama-F32.gguf" --prompt "Once upon a time" --steps 4 --view next; then
    products_label products_f32 ""
  fi
  fails products_bad "--products expects exact or fast, got 'quick'" --products quick --screenshot "$OUT/x.png"
}

# ---- tracebin
# The binary trace format (.dstrace): a live run saves it and a replay opens it. Every
# view's area is the live run's pixel for pixel (ds_png_check same-view), and the heatmap
# cells alone too (same); All heads and Next token have buttons that need a model (re-run
# with heads off, draw again) greyed out in a replay: their heatmap cells are compared,
# and Next token is checked for being drawn. A cut or foreign binary file ends in a
# message naming what is wrong.
# tracebin dec|enc: every view of the decoder-only or encoder-decoder model, live and replayed.
tracebin() {
  local m=$1
  if [ "$m" = dec ]; then args=("${DEC[@]}" --steps 12); views="attention heads lens residual next"; else
    args=("${ENC[@]}"); views="attention cross heads lens residual next"; fi
  for v in $views; do
    for sc in "" $([ "$v" = attention ] && echo --scores); do
      name="bin_${m}_${v}${sc:+_scores}"
      cells=()
      case $v in attention | cross | heads) cells=(--save-heatmap "$OUT/${name}_cells.png") ;; esac
      run "$name" "${args[@]}" --view "$v" $sc "${cells[@]}" --save-trace "$OUT/$name.dstrace" || continue
      [ ${#cells[@]} -gt 0 ] && cells=(--save-heatmap "$OUT/${name}_replay_cells.png")
      run "${name}_replay" --trace "$OUT/$name.dstrace" --view "$v" $sc "${cells[@]}" || continue
      [ ${#cells[@]} -gt 0 ] && check same "$OUT/${name}_cells.png" "$OUT/${name}_replay_cells.png"
      case $v in
        heads) ;;
        next) check blank "$OUT/${name}_replay.png" ;;
        *) check same-view "$OUT/$name.png" "$OUT/${name}_replay.png" ;;
      esac
    done
  done
}
group_tracebin_dec() {
  tracebin dec
  if [ -f "$OUT/bin_dec_attention.dstrace" ]; then
    head -c 300 "$OUT/bin_dec_attention.dstrace" >"$OUT/bin_cut.dstrace"
    fails bin_cut "cut short" --trace "$OUT/bin_cut.dstrace" --screenshot "$OUT/x.png"
    { printf 'DSTRACE\032'; printf '\007\000\000\000'; } >"$OUT/bin_version.dstrace"
    fails bin_version "binary trace version 7" --trace "$OUT/bin_version.dstrace" --screenshot "$OUT/x.png"
  fi
}
group_tracebin_enc() {
  tracebin enc
}

# ---- maps
# Heatmaps fill the room: an 11-token run's map covers at least half of the window's width
# or height at 1920x1080 (and in presenter mode; 40% with 1.5x text); the residual map
# of 90 positions is not a strip; a window of the matrix (the last N tokens, a zoom whose
# visible rows and columns start at different cells) still hatches exactly the cells
# above the matrix's diagonal, so the renderer draws the cells the placement names.
group_maps() {
  MAP11=(--model random:decoder --prompt "hello" --steps 6 --view attention)
  if run_big maps_11 "${MAP11[@]}"; then
    check heatmap "$OUT/maps_11.png" attention causal
    check cover "$OUT/maps_11.png" attention 0.5
  fi
  # Bigger text takes room (the caption, whole, on two lines; the controls on two): 35%.
  if run_big maps_11_scaled "${MAP11[@]}" --scale 1.5; then
    check cover "$OUT/maps_11_scaled.png" attention 0.35
  fi
  if run_big maps_presenter "${MAP11[@]}" --presenter --scale 2; then
    check blank "$OUT/maps_presenter.png"
    check heatmap "$OUT/maps_presenter.png" attention causal
    check cover "$OUT/maps_presenter.png" attention 0.5
  fi
  if run_big maps_residual --model random:decoder --prompt "hello" --steps 85 --view residual; then
    check cover "$OUT/maps_residual.png" residual 0.4
  fi
  if run maps_last --model random:decoder --prompt "hello world" --steps 20 --last-tokens 8 --view attention; then
    check heatmap "$OUT/maps_last.png" attention causal
  fi
  if run maps_zoom --model random:decoder --prompt "hello world" --steps 30 --zoom 3 --view attention; then
    check heatmap "$OUT/maps_zoom.png" attention causal
  fi
  # A 1024x768 projector: the map has 40% of the height; with 1.5x text, presenter mode
  # gives it half.
  if run maps_small "${MAP11[@]}" --size 1024x768; then
    check heatmap "$OUT/maps_small.png" attention causal
    check cover "$OUT/maps_small.png" attention 0.4
  fi
  if run maps_small_presenter "${MAP11[@]}" --size 1024x768 --scale 1.5 --presenter; then
    check heatmap "$OUT/maps_small_presenter.png" attention causal
    check cover "$OUT/maps_small_presenter.png" attention 0.5
  fi
  # Long runs: 267 tokens take the map's whole height in fractional cells (whole pixels
  # gave 2 px cells, 534 of 600 px); 727 tokens at 1 px show the newest 600 or so down
  # and across; both inside the view (not under the status bar), at both sizes (at
  # 1024x768 the three-line token strip and the controls leave the map a third).
  local n size cover
  for n in 267 727; do
    for size in 1920x1080 1024x768; do
      cover=0.5
      [ "$size" = 1024x768 ] && cover=0.33
      if xrun "${size}x24" "$OUT/maps_long_${n}_$size.log" --size "$size" --screenshot "$OUT/maps_long_${n}_$size.png" \
        --model random:long --prompt "a" --steps "$n" --view attention; then
        check whole "$OUT/maps_long_${n}_$size.png" attention
        check cover "$OUT/maps_long_${n}_$size.png" attention "$cover"
      else
        echo "FAIL maps_long_${n}_$size: the window exited with an error"
        failed=$((failed + 1))
      fi
    done
  done
}

# ---- soak
group_soak() {
  # The soak: random user actions through the functions the widgets call (--soak), with
  # frames drawn between them; exits non-zero naming the action when one fails (an error
  # that is not an expected refusal, an OpenGL error, an abort, a hang). The same 300
  # actions run in the sanitizer build (AddressSanitizer and UBSan in the program).
  SOAK_N=${DS_SOAK_ACTIONS:-300}
  if xrun 1280x800x24 "$OUT/soak.log" --soak "$SOAK_N" --seed 1; then
    passed=$((passed + 1))
    grep '^soak:' "$OUT/soak.log" | tail -1 || true
  else
    echo "FAIL soak: --soak $SOAK_N --seed 1 exited with $?"
    sed 's/^/    /' "$OUT/soak.log" | tail -20
    failed=$((failed + 1))
  fi
}

# ---- keys
group_keys() {
  # The window driven with keys (xdotool, quick taps as a clicker sends them), pictures by
  # F12 with their sidecars (--sidecar): End runs to the end and the button turns into
  # Stop; ONE press of Space stops it (at most the step in progress arrives after it; then
  # no more steps 1.5 s later, before the context is full); F12 numbers its pictures and
  # never overwrites one.
  if ! command -v xdotool >/dev/null 2>&1; then
    echo "SKIP keys: xdotool is not installed (Debian: apt-get install xdotool)"
    return
  fi
  local dir="$OUT/keys" cli
  cli="$(dirname "$APP")/decoderscope-cli"
  rm -rf "$dir"
  mkdir -p "$dir"
  # A GPT-2-shaped model small enough to load at once and slow enough (30M parameters,
  # 1,024 positions) that running to the end takes seconds.
  if ! "$cli" random --arch gpt2 --out "$dir/model" --dim 384 --hidden 1536 --layers 6 --heads 6 --seq-len 1024 \
    --seed 2 >"$dir/random.log" 2>&1; then
    echo "FAIL keys: decoderscope-cli random did not write the model"
    sed 's/^/    /' "$dir/random.log"
    failed=$((failed + 1))
    return
  fi
  local rc=0
  xvfb-run ${XNUM:+-n "$XNUM"} -a -s "-screen 0 1280x800x24" bash "$(dirname "$0")/keys_driver.sh" "$APP" \
    "$dir/model" "$dir" >"$dir/driver.log" 2>&1 || rc=$?
  sed 's/^/    /' "$dir/driver.log"
  if [ $rc -ne 0 ]; then
    echo "FAIL keys: the driver exited with $rc"
    sed 's/^/    /' "$dir/app.log"
    failed=$((failed + 1))
    return
  fi
  # The shots: "shot FILE steps playing running_to_end done".
  local running at_space after_space later shots pngs
  running=$(grep -c '^shot .* true false$' "$dir/driver.log" || true)
  at_space=$(grep '^shot ' "$dir/driver.log" | tail -3 | head -1)
  after_space=$(grep '^shot ' "$dir/driver.log" | tail -2 | head -1)
  later=$(grep '^shot ' "$dir/driver.log" | tail -1)
  if [ "$running" -lt 1 ]; then
    echo "FAIL keys: no picture shows Run to end running (Stop) after End"
    failed=$((failed + 1))
  else
    passed=$((passed + 1))
  fi
  read -r _ _ s0 _ r0 _ <<<"$at_space"
  read -r _ _ s1 _ r1 d1 <<<"$after_space"
  read -r _ _ s2 _ r2 _ <<<"$later"
  if [ "$r0" = false ] && [ "$r1" = false ] && [ "$r2" = false ] && [ "$d1" = false ] && [ "$s1" = "$s2" ] &&
    [ "$s1" -gt 0 ] && [ "$s1" -le $((s0 + 1)) ] && [ "$s1" -lt 1023 ]; then
    passed=$((passed + 1))
    echo "ok keys: one Space stopped Run to end at step $s1 ($s0 half a second after it), still $s2 1.5 s later"
  else
    echo "FAIL keys: after one Space: '$at_space', '$after_space', then '$later' (wanted: stopped after at most the step in progress, before the end)"
    failed=$((failed + 1))
  fi
  shots=$(grep -c '^shot ' "$dir/driver.log")
  pngs=$(find "$dir" -maxdepth 1 -name 'decoderscope-[0-9][0-9][0-9].png' | wc -l)
  if [ "$shots" -eq "$pngs" ] && [ -f "$dir/decoderscope-001.png" ] &&
    [ -f "$dir/$(printf 'decoderscope-%03d.png' "$shots")" ]; then
    passed=$((passed + 1))
    echo "ok keys: F12 saved $shots pictures, decoderscope-001.png to $(printf 'decoderscope-%03d.png' "$shots")"
  else
    echo "FAIL keys: $shots pictures taken, $pngs numbered files"
    failed=$((failed + 1))
  fi
}

# ---- blockview
# bv_json NAME WHAT PYTHON: checks run NAME's sidecar with PYTHON (j: the sidecar, b: its
# Block view, k: its KV cache view); the script prints why when it fails.
bv_json() {
  local name=$1 what=$2 code=$3
  if python3 - "$OUT/$name.png.json" "$code" <<'PY'; then
import json, math, sys
j = json.load(open(sys.argv[1]))
b, k = j["block_view"], j["kv_view"]
why = []
def need(ok, msg):
    if not ok:
        why.append(msg)
exec(sys.argv[2])
for w in why:
    print("   ", w)
sys.exit(1 if why else 0)
PY
    passed=$((passed + 1))
  else
    echo "FAIL $name: $what (see $OUT/$name.png.json)"
    failed=$((failed + 1))
  fi
}

# Nothing of the Block view's detail is wider than its area; the equation fits the width
# it has; the key table shows at least 8 rows (all when fewer) on screen.
BV_FITS='
need(b["eq_w"] <= b["eq_avail"] + 1, "equation %.0f px wide in %.0f px" % (b["eq_w"], b["eq_avail"]))
need(b["content_x1"] <= b["detail_x1"] + 1, "detail content reaches x=%.0f past its edge %.0f" % (b["content_x1"], b["detail_x1"]))
need(b["detail_x1"] <= b["window_w"] + 1, "detail ends at x=%.0f, the window at %.0f" % (b["detail_x1"], b["window_w"]))
'
BV_ROWS='
want = min(b["key_rows"], 8)
need(b["key_rows"] > 0, "no key table")
need(b["key_visible"] >= want, "%d of %d key rows on screen, want %d (row %.0f px, table top %.0f, detail bottom %.0f)" % (b["key_visible"], b["key_rows"], want, b["key_row_h"], b["key_top"], b["detail_y1"]))
'
group_blockview() {
  local STORIES=(--model builtin:stories --prompt "Once upon a time, Lily" --steps 12)
  local DATES=(--model builtin:dates --source "the 3rd of March 2021" --steps 6)
  [ -f "$MODELS/stories/model.safetensors" ] || STORIES=("${DEC[@]}")
  [ -f "$MODELS/dates/model.safetensors" ] || DATES=("${ENC[@]}")
  # The scores stage at three sizes: readable rows, nothing cut.
  local sizes=("small:--size 1024x768" "presenter:--size 1024x768 --presenter --scale 1.5")
  for sz in "${sizes[@]}"; do
    local tag=${sz%%:*} args
    read -ra args <<<"${sz#*:}"
    for m in stories dates; do
      local input=("${STORIES[@]}")
      [ $m = dates ] && input=("${DATES[@]}")
      if run "bv_${m}_$tag" "${input[@]}" "${args[@]}" --view block --stage attn.scores; then
        block_ok "bv_${m}_$tag"
        bv_json "bv_${m}_$tag" "the scores stage fits" "$BV_FITS$BV_ROWS"
      fi
    done
  done
  if run_big bv_stories_big "${STORIES[@]}" --view block --stage attn.scores; then
    bv_json bv_stories_big "the scores stage fits at 1920x1080" "$BV_FITS$BV_ROWS"
  fi
  # Future keys of a generated token: with the cache never computed (its step had keys
  # 0..pos only), without it computed and masked.
  local sel=9
  if run bv_cached "${STORIES[@]}" --view block --stage attn.scores --select $sel; then
    bv_json bv_cached "keys after the selected token are 'not computed yet'" "
n = len(j['tokens']) - 1; st = b['key_state']  # the newest token is drawn, not yet fed
need(len(st) == n, 'key states %d, tokens %d' % (len(st), n))
need(b['computed_end'] == $sel + 1, 'computed_end %d' % b['computed_end'])
need(all(s == 2 for s in st[$sel + 1:]) and all(s == 0 for s in st[:$sel + 1]), 'states %s' % st)
"
  fi
  if run bv_nocache "${STORIES[@]}" --no-kv-cache --view block --stage attn.scores --select $sel; then
    bv_json bv_nocache "keys after the selected token are computed and masked" "
n = len(j['tokens']) - 1; st = b['key_state']  # the newest token is drawn, not yet fed
need(b['computed_end'] == n, 'computed_end %d of %d' % (b['computed_end'], n))
need(all(s == 1 for s in st[$sel + 1:]) and all(s == 0 for s in st[:$sel + 1]) and len(st) == n, 'states %s' % st)
"
  fi
  # The norm stage: one colour scale for its rows, the standardized row recomputed.
  for tag in small presenter; do
    local args=(--size 1024x768)
    [ $tag = presenter ] && args+=(--presenter --scale 1.5)
    if run "bv_ln_$tag" "${STORIES[@]}" "${args[@]}" --view block --stage ln2; then
      bv_json "bv_ln_$tag" "LN2's rows share one scale; (x - mean)/std is right" "$BV_FITS"'
need(b["stage"] == "ln2", "stage %s" % b["stage"])
sc = [s["scale"] for s in b["strips"]]
need(len(sc) == 3 and max(sc) - min(sc) <= 1e-6 * max(sc), "strip scales %s" % sc)
x = b["norm_in"]; z = b["norm_std"]
mu = sum(x) / len(x); sd = math.sqrt(sum((v - mu) ** 2 for v in x) / len(x) + 1e-5)
need(len(z) == len(x) and len(x) > 0, "rows of %d and %d" % (len(x), len(z)))
need(all(abs(zi - (xi - mu) / sd) <= 1e-3 * (1 + abs(zi)) for xi, zi in zip(x, z)), "standardized row differs")
need(abs(max(max(abs(v) for v in x), max(abs(v) for v in z)) - sc[0]) <= 1e-3 * sc[0] or sc[0] > max(abs(v) for v in z), "scale %s" % sc[0])
'
    fi
  done
  # Number tables of Q, K (one scale) and the scores, in presenter mode too.
  if run bv_tables "${STORIES[@]}" --size 1024x768 --presenter --scale 1.5 --view block --stage attn.qkv; then
    bv_json bv_tables "Q, K and V tables share a scale" "$BV_FITS"'
t = {x["name"]: x["scale"] for x in b["tables"]}
need(set(t) == {"Q", "K", "V"}, "tables %s" % t)
need(len(set(t.values())) == 1, "scales %s" % t)
'
  fi
  # The KV cache view: the bytes sentence, the first timed step left out, labels inside.
  for sz in "${sizes[@]}" "big:"; do
    local tag=${sz%%:*} args
    read -ra args <<<"${sz#*:}"
    for mode in cache nocache; do
      local extra=()
      [ $mode = nocache ] && extra=(--no-kv-cache)
      local name="bv_kv_${tag}_$mode" ok=0
      if [ "$tag" = big ]; then
        run_big "$name" "${STORIES[@]}" "${extra[@]}" --view kv && ok=1
      else
        run "$name" "${STORIES[@]}" "${args[@]}" "${extra[@]}" --view kv --kv-pane cost && ok=1
      fi
      [ $ok = 1 ] || continue
      bv_json "$name" "the KV cache view explains its bytes and keeps its labels" '
need(k["explained"], "no bytes sentence")
need(k["measured"][0] > 1 and k["measured"][1] > 1, "measured %s" % k["measured"])
need(k["points"] == [m - 1 for m in k["measured"]], "points %s of %s" % (k["points"], k["measured"]))
need(k["label_x1"] <= k["plot_x1"] + 1, "a label ends at x=%.0f past the plot %.0f" % (k["label_x1"], k["plot_x1"]))
'
    done
  done
  # A narrow or short window shows the caches under their own tab: the new row on screen,
  # labels at least three quarters of the text, and a dozen rows or all.
  local kvtab=("small:--size 1024x768" "presenter:--size 1024x768 --presenter --scale 1.5")
  for sz in "${kvtab[@]}"; do
    local tag=${sz%%:*} args
    read -ra args <<<"${sz#*:}"
    run "bv_kv_tab_$tag" "${STORIES[@]}" "${args[@]}" --view kv --kv-pane cache || continue
    bv_json "bv_kv_tab_$tag" "the KV cache tab shows the new row and readable rows" '
need(k["tabs"] and k["pane"] == 0, "tabs %s pane %s" % (k["tabs"], k["pane"]))
need(k["new_shown"], "the new row is not drawn")
need(0 < k["new_y1"] <= k["pane_y1"] + 1, "the new row ends at y=%.0f, the pane at %.0f" % (k["new_y1"], k["pane_y1"]))
need(k["label_px"] >= 0.75 * k["font_px"] - 0.5, "row labels %.1f px with %.1f px text" % (k["label_px"], k["font_px"]))
need(k["rows_shown"] >= min(k["rows"], 12), "%d of %d rows drawn" % (k["rows_shown"], k["rows"]))
'
  done
}

# ---- beamtab: beam search beside the generation, how each token was chosen, branch labels
# field FILE KEY: a top-level value of a screenshot's sidecar (strings as they are, lists
# of numbers space-separated), or "" when absent.
field() {
  python3 -c '
import json, sys
v = json.load(open(sys.argv[1])).get(sys.argv[2])
print(" ".join(str(x) for x in v) if isinstance(v, list) and all(isinstance(x, int) for x in v) else
      json.dumps(v) if isinstance(v, list) else "" if v is None else v)' "$1" "$2" 2>/dev/null || true
}
# expect NAME WHAT CONDITION-RESULT: counts a check (CONDITION-RESULT: 0 passed).
expect() {
  if [ "$3" = 0 ]; then
    passed=$((passed + 1))
  else
    echo "FAIL $1: $2"
    failed=$((failed + 1))
  fi
}
has() { case "$1" in *"$2"*) echo 0 ;; *) echo 1 ;; esac; }
lacks() { case "$1" in *"$2"*) echo 1 ;; *) echo 0 ;; esac; }
same() { [ "$1" = "$2" ] && echo 0 || echo 1; }

group_beamtab() {
  if ! [ -f "$MODELS/stories/model.safetensors" ] || ! command -v python3 >/dev/null 2>&1; then
    echo "note: builtin:stories or python3 is absent; the beamtab group is skipped"
    return
  fi
  local CLI P STORY json ref live best ids cli_ids cli_text br n score text
  CLI="$(dirname "$APP")/decoderscope-cli"
  P="Once upon a time, Lily"
  STORY=(--model builtin:stories --prompt "$P" --steps 200 --seed 5)
  # The lesson: the story to its end, Left to step 4, the Beam search tab opened. The
  # story stays the live generation (the same tokens as the same run without the tab),
  # the beam's winner is kept as a branch, and Undo can forget it.
  run story_ref "${STORY[@]}" --cursor 4 --view next || return
  ref=$(field "$OUT/story_ref.png.json" live_ids)
  if run_big beam_open "${STORY[@]}" --cursor 4 --view beams --beam 3; then
    json="$OUT/beam_open.png.json"
    check blank "$OUT/beam_open.png"
    live=$(field "$json" live_ids)
    expect beam_open "the live story changed on opening Beam search: '$live', was '$ref'" "$(same "$live" "$ref")"
    expect beam_open "the cursor left step 4" "$(same "$(field "$json" cursor)" 3)"
    ids=$(field "$json" beam_best_ids)
    cli_ids=$("$CLI" generate --model builtin:stories --prompt "$P" --beam 3 --steps 48 --ids) || true
    expect beam_open "the window's winner '$ids' is not the CLI's '$cli_ids'" "$(has "$ids" "$cli_ids")"
    br=$(python3 -c 'import json,sys; b=json.load(open(sys.argv[1]))["branches"]; print(len(b), " ".join(map(str, b[0]["tokens"])) if b else "")' "$json")
    expect beam_open "the branches are '$br', wanted one ending with the winner '$ids'" \
      "$([ "${br%% *}" = 1 ] && [ "${br%"$ids"}" != "$br" ] && echo 0 || echo 1)"
    expect beam_open "Edit > Undo has nothing to undo" "$(same "$(field "$json" can_undo)" True)"
    # The Best line is the tokenizer's decoding of the winner's ids (as the CLI prints
    # it after the prompt), with the spaces between words.
    best=$(field "$json" beam_best_text)
    cli_text=$("$CLI" generate --model builtin:stories --prompt "$P" --beam 3 --steps 48) || true
    expect beam_open "Best text '$best' is not the CLI's text after the prompt: '$cli_text'" \
      "$([ -n "$best" ] && [ "${cli_text%"$best"}" != "$cli_text" ] && echo 0 || echo 1)"
    expect beam_open "Best text '$best' has no space" "$(has "$best" " ")"
    expect beam_open "the Best line does not show the text" "$(has "$(field "$json" beam_best)" "$best")"
    expect beam_open "the Runners-up line lost its spaces" "$(has "$(field "$json" beam_runners_up)" " ")"
  fi
  if run beam_undo "${STORY[@]}" --cursor 4 --view branches --beam 3 --undo 1; then
    json="$OUT/beam_undo.png.json"
    expect beam_undo "Undo left the branches '$(field "$json" branches)'" "$(same "$(field "$json" branches)" "")"
    expect beam_undo "Undo changed the story" "$(same "$(field "$json" live_ids)" "$ref")"
  fi
  # The teacher makes the beam's branch live: the Next token view says beam search chose
  # the step, with the beam's cumulative log-probability, and invents no draw.
  if run_big beam_next "${STORY[@]}" --cursor 4 --view next --beam 3 --choose-branch 1 --preview-temperature 1.88; then
    json="$OUT/beam_next.png.json"
    check blank "$OUT/beam_next.png"
    text=$(field "$json" next_text)
    expect beam_next "next text: '$text'" "$(has "$text" "beam search chose")"
    expect beam_next "next text does not say 'chosen by beam search'" "$(has "$text" "chosen by beam search")"
    expect beam_next "next text has no cumulative log-probability" "$(has "$text" "cumulative log-probability is -")"
    expect beam_next "next text invents a draw" "$(lacks "$text" "u =")"
    expect beam_next "next text reports settings that did not choose the token" "$(lacks "$text" "1.88")"
    expect beam_next "the story is not kept as a branch" \
      "$(python3 -c 'import json,sys; b=json.load(open(sys.argv[1]))["branches"]; print(0 if len(b)==1 and " ".join(map(str,b[0]["tokens"]))==sys.argv[2] else 1)' "$json" "$ref")"
    expect beam_next "the live generation is not the beam's winner" "$(has "$(field "$json" live_ids)" "$ids")"
  fi
  # At the winner's last step the score is the CLI's (sum / length^penalty).
  n=$("$CLI" generate --model builtin:stories --prompt "$P" --beam 3 --steps 48 --all-beams | sed -n 's/^beam 0: .* \([0-9]*\) tokens.*/\1/p') || true
  score=$("$CLI" generate --model builtin:stories --prompt "$P" --beam 3 --steps 48 --all-beams | sed -n 's/^beam 0: score \(-*[0-9.]*\),.*/\1/p') || true
  if [ -n "$n" ] && run beam_last "${STORY[@]}" --cursor "$n" --view next --beam 3 --choose-branch 1 --size 1024x768; then
    text=$(field "$OUT/beam_last.png.json" next_text)
    want=$(printf '%.4f' "$score")
    expect beam_last "the last step's text '$text' does not give the CLI's score $want" "$(has "$text" "= $want.")"
  fi
  if run beam_choose_undo "${STORY[@]}" --cursor 4 --view branches --beam 3 --choose-branch 1 --undo 1; then
    json="$OUT/beam_choose_undo.png.json"
    expect beam_choose_undo "Undo did not bring the story back live" "$(same "$(field "$json" live_ids)" "$ref")"
    expect beam_choose_undo "Undo did not put the beam's branch back" "$(has "$(field "$json" branches)" "$(echo "$ids" | tr ' ' ',' | sed 's/,/, /g')")"
  fi
  # Branch labels name the method that made each side's tokens, from the steps
  # themselves: contrastive search with alpha and k (never the temperature its steps
  # ignored); sampling with the settings drawn with, not a previewed temperature.
  if run branches_contrastive --model builtin:stories --prompt "$P" --steps 12 --penalty-alpha 0.6 --top-k 5 \
      --temperature 1.88 --fork-at 6 --view branches --size 1024x768; then
    json="$OUT/branches_contrastive.png.json"
    check blank "$OUT/branches_contrastive.png"
    text=$(field "$json" live_label)
    expect branches_contrastive "live label '$text'" "$(has "$text" "contrastive search (alpha 0.60, top-k 5)")"
    expect branches_contrastive "live label '$text' names a temperature" "$(lacks "$text" "temperature")"
    text=$(field "$json" branch_labels)
    expect branches_contrastive "branch labels '$text'" "$(has "$text" "contrastive search (alpha 0.60, top-k 5)")"
  fi
  if run branches_preview --model builtin:stories --prompt "$P" --steps 10 --temperature 0.7 --seed 3 --fork-at 5 \
      --fork-seed 8 --preview-temperature 1.88 --view branches; then
    text=$(field "$OUT/branches_preview.png.json" live_label)
    expect branches_preview "live label '$text'" "$(has "$text" "sampling (temperature 0.70")"
    expect branches_preview "live label '$text' names the previewed temperature" "$(lacks "$text" "1.88")"
  fi
  # Cross-attention on a decoder-only model points to builtin:dates.
  if run cross_decoder --model builtin:stories --prompt "$P" --steps 3 --view cross --size 1024x768; then
    text=$(field "$OUT/cross_decoder.png.json" cross_text)
    if [ -f "$MODELS/dates/model.safetensors" ]; then
      expect cross_decoder "cross text '$text'" "$(has "$text" "Open builtin:dates")"
    else
      expect cross_decoder "cross text '$text'" "$(has "$text" "no cross-attention")"
    fi
  fi
}

# ---- headsmatter: which heads matter (All heads' ranking), the grids' layout, undo of heads off
group_headsmatter() {
  local CLI
  CLI="$(dirname "$APP")/decoderscope-cli"
  if [ ! -f "$MODELS/stories/model.safetensors" ] || [ ! -f "$MODELS/dates/model.safetensors" ] || [ ! -x "$CLI" ]; then
    echo "SKIP headsmatter: the built-in models or decoderscope-cli are missing"
    return
  fi
  local ST=(--model builtin:stories --prompt "Once upon a time" --view heads)
  local DT=(--model builtin:dates --source "July 14, 1989" --view heads)
  local all_self=() all_cross=() l h
  for l in 0 1 2 3; do for h in 0 1 2 3; do all_self+=(--head-off "$l:$h"); done; done
  for l in 0 1; do for h in 0 1 2 3; do all_cross+=(--head-off "c$l:$h"); done; done
  # Undo of a re-run with heads off, then more steps: they run with every head on, as
  # the plain run's steps did (stuck: the same without the undo, which must differ, or
  # the check would prove nothing).
  run hm_plain "${ST[@]}" --steps 12 &&
    run hm_undo "${ST[@]}" --steps 8 "${all_self[@]}" --undo 1 --more-steps 4 &&
    run hm_stuck "${ST[@]}" --steps 8 "${all_self[@]}" --more-steps 4 &&
    run hm_dplain "${DT[@]}" --steps 8 &&
    run hm_dundo "${DT[@]}" --steps 5 "${all_cross[@]}" --undo 1 --more-steps 3 &&
    run hm_dstuck "${DT[@]}" --steps 5 "${all_cross[@]}" --more-steps 3
  # The ranking at the last step, against decoderscope-cli heads --ablation --json on the
  # same run (same sampling defaults), and a click on the first ranked head (--rank-heads 1).
  run hm_rank "${ST[@]}" --steps 10 --rank-heads 0 &&
    run hm_pick "${ST[@]}" --steps 10 --rank-heads 1 &&
    run hm_drank "${DT[@]}" --steps 6 --rank-heads 0
  "$CLI" heads --ablation --model builtin:stories --prompt "Once upon a time" --steps 64 --step 10 --json \
    >"$OUT/hm_cli.json" 2>"$OUT/hm_cli.log" || echo "cli failed" >>"$OUT/hm_cli.log"
  "$CLI" heads --ablation --model builtin:dates --source "July 14, 1989" --steps 12 --step 6 --json \
    >"$OUT/hm_dcli.json" 2>"$OUT/hm_dcli.log" || echo "cli failed" >>"$OUT/hm_dcli.log"
  # The layout of dates' three grids at both screen sizes and in presenter mode.
  run_big hm_big "${DT[@]}" --steps 8
  xrun 1024x768x24 "$OUT/hm_small.log" --size 1024x768 --screenshot "$OUT/hm_small.png" "${DT[@]}" --steps 8 ||
    echo "FAIL hm_small: the window exited with an error"
  xrun 1920x1080x24 "$OUT/hm_pres.log" --size 1920x1080 --presenter --scale 1.5 --screenshot "$OUT/hm_pres.png" \
    "${DT[@]}" --steps 8 --rank-heads 0 || echo "FAIL hm_pres: the window exited with an error"
  # Stories' single 4x4 grid at 1024x768: the room beside it shows the open head larger.
  xrun 1024x768x24 "$OUT/hm_zoom.log" --size 1024x768 --screenshot "$OUT/hm_zoom.png" "${ST[@]}" --steps 20 \
    --layer 2 --head 1 || echo "FAIL hm_zoom: the window exited with an error"
  for n in hm_big hm_small hm_pres hm_rank hm_drank hm_zoom; do [ -f "$OUT/$n.png" ] && check blank "$OUT/$n.png"; done
  if python3 - "$OUT" <<'PY'; then
import json, math, os, sys
d = sys.argv[1]
def side(n):
    p = f"{d}/{n}.png.json"
    return json.load(open(p)) if os.path.exists(p) else None
problems = []
# Undo, then more steps.
for plain, undo, stuck, what in (("hm_plain", "hm_undo", "hm_stuck", "self"), ("hm_dplain", "hm_dundo", "hm_dstuck", "cross")):
    p, u, s = side(plain), side(undo), side(stuck)
    if not (p and u and s):
        problems.append(f"{what}: a run is missing")
        continue
    if s["tokens"] == p["tokens"]:
        problems.append(f"{what}: the heads-off run without undo equals the plain run: the check proves nothing")
    if u["steps"] != p["steps"] or u["tokens"] != p["tokens"]:
        problems.append(f"{what}: after undo and more steps, tokens {u['tokens']} (plain run: {p['tokens']})")
    off = u["heads_off"] + u["cross_heads_off"] + u["heads_engine"] + u["cross_heads_engine"]
    if off:
        problems.append(f"{what}: after undo, heads still off: {off}")
# The ranking: the window's against the CLI's, head for head.
for gui, cli, n in (("hm_rank", "hm_cli.json", 16), ("hm_drank", "hm_dcli.json", 16)):
    g = side(gui)
    try:
        c = json.load(open(f"{d}/{cli}"))
    except Exception as e:
        problems.append(f"{cli}: {e}: {open(f'{d}/{cli[:-5]}.log').read()[:300]}")
        continue
    a = g and g.get("ablation")
    if not a:
        problems.append(f"{gui}: no ranking in the sidecar")
        continue
    if a["step"] + 1 != c["step"] or a["token"] != c["token"]:
        problems.append(f"{gui}: the window ranked step {a['step'] + 1} token {a['token']}, the CLI step {c['step']} token {c['token']}")
        continue
    if len(a["heads"]) != n or len(c["heads"]) != n:
        problems.append(f"{gui}: {len(a['heads'])} heads in the window, {len(c['heads'])} in the CLI, want {n}")
    if abs(a["logp"] - c["logp"]) > 1e-9:
        problems.append(f"{gui}: log p {a['logp']} in the window, {c['logp']} in the CLI")
    cd = {(h["site"], h["layer"], h["head"]): h["delta"] for h in c["heads"]}
    for h in a["heads"]:
        k = (h["site"], h["layer"], h["head"])
        if k not in cd or abs(cd[k] - h["delta"]) > 1e-9:
            problems.append(f"{gui}: head {k} changes log p by {h['delta']} in the window, {cd.get(k)} in the CLI")
    if gui == "hm_drank" and sum(h["site"] == "cross" for h in a["heads"]) != 8:
        problems.append("hm_drank: the cross-attention heads are not ranked")
    if max(abs(h["delta"]) for h in a["heads"]) < 1e-6:
        problems.append(f"{gui}: no head changes anything: the comparison proves nothing")
# One click on the first ranked head: the step re-run with that head alone off, undoable.
pk, rk = side("hm_pick"), side("hm_rank")
if pk and rk and rk.get("ablation"):
    top = rk["ablation"]["heads"][0]
    if pk["heads_off"] != [[top["layer"], top["head"]]] or pk["heads_engine"] != pk["heads_off"] or pk["undo"] != 1:
        problems.append(f"hm_pick: heads off {pk['heads_off']} (engine {pk['heads_engine']}), {pk['undo']} to undo; "
                        f"want the top head {top} and 1")
# Layout: the grids fill the area. Bound from geometry alone: the largest square tile
# 4 heads x 6 layers (stacked) or 12 heads x 2 layers (side by side) could have in the
# area, labels ignored; the tiles must reach half of it, and the grids' box 60% of the
# area in one dimension.
for n in ("hm_big", "hm_small", "hm_pres"):
    s = side(n)
    if not s or "heads_layout" not in s:
        problems.append(f"{n}: no layout in the sidecar")
        continue
    lay = s["heads_layout"]
    _, _, aw, ah = lay["area"]
    _, _, bw, bh = lay["box"]
    bound = max(min(aw / 4, ah / 6), min(aw / 12, ah / 2), min(aw / 8, ah / 4))
    print(f"{n}: area {aw:.0f}x{ah:.0f}, grids {bw:.0f}x{bh:.0f} in {lay['columns']} columns, tile {lay['tile']:.0f} px "
          f"(bound {bound:.0f})")
    if lay["tile"] < 0.5 * bound:
        problems.append(f"{n}: tiles of {lay['tile']} px, under half the {bound:.0f} px the area allows")
    if max(bw / aw, bh / ah) < 0.6:
        problems.append(f"{n}: the grids fill {bw:.0f}x{bh:.0f} of {aw:.0f}x{ah:.0f}")
    if bw > aw + 1 or bh > ah + 1:
        problems.append(f"{n}: the grids ({bw:.0f}x{bh:.0f}) overflow the area ({aw:.0f}x{ah:.0f})")
# The larger head beside stories' grid: the open one, right of the grids, inside the
# area, and grids and head together use most of the width.
z = side("hm_zoom")
if not z or "heads_layout" not in z:
    problems.append("hm_zoom: no layout in the sidecar")
else:
    lay = z["heads_layout"]
    zm = lay["zoom"]
    ax, ay, aw, ah = lay["area"]
    bx, by, bw, bh = lay["box"]
    zx, zy, zw, zh = zm["box"]
    print(f"hm_zoom: grids {bw:.0f}x{bh:.0f}, larger head {zm['layer']}:{zm['head']} {zw:.0f}x{zh:.0f} in {aw:.0f}x{ah:.0f}")
    if (zm["layer"], zm["head"], zm["cross"]) != (2, 1, False):
        problems.append(f"hm_zoom: the larger map shows {zm}, want layer 2 head 1 (the open one)")
    if zx < bx + bw or zx + zw > ax + aw + 1 or zy + zh > ay + ah + 1 or zy < ay:
        problems.append(f"hm_zoom: the larger map {zm['box']} is not beside the grids {lay['box']} inside {lay['area']}")
    if (zx + zw - bx) < 0.9 * aw:
        problems.append(f"hm_zoom: grids and the larger map span {zx + zw - bx:.0f} of {aw:.0f} px")
for p in problems:
    print("FAIL headsmatter:", p)
sys.exit(1 if problems else 0)
PY
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
}

# ---- lensgrid: the Logit lens view's grid of layers x positions
# lens_cells SHOT LAYERS all|newest: the grid on SHOT (its sidecar) has a row for the
# embedding and one per layer, and shows every position fed (all) or the newest ones,
# at least 5 columns of cells wide enough for a token's text (newest).
lens_cells() {
  if python3 - "$@" <<'PY'; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
import json, sys
shot, layers, want = sys.argv[1], int(sys.argv[2]), sys.argv[3]
j = json.load(open(shot + ".json"))
P = len(j["tokens"]) - 1  # the positions fed: the last token drawn is not run yet
g = [h for h in j["heatmaps"] if h["name"] == "lens"]
bad = []
if len(g) != 1:
    bad.append("%d lens grids on screen" % len(g))
else:
    h = g[0]
    if h["rows"] != layers + 1 or h["row0"] != 0:
        bad.append("rows %d from %d, wanted the embedding and %d layers" % (h["rows"], h["row0"], layers))
    if want == "all" and (h["cols"] != P or h["col0"] != 0):
        bad.append("columns %d from %d, wanted all %d positions" % (h["cols"], h["col0"], P))
    if want == "newest" and (h["col0"] + h["cols"] != P or h["cols"] < 5 or h["cols"] >= P or h["cell_w"] < 30):
        bad.append("columns %d-%d of %d (%.0f px wide), wanted the newest that fit with text"
                   % (h["col0"], h["col0"] + h["cols"] - 1, P, h["cell_w"]))
if bad:
    print("FAIL %s: %s" % (shot, "; ".join(bad)))
    sys.exit(1)
print("ok %s: lens grid %d x %d cells (%.0fx%.0f px), positions %d-%d of %d" % (shot, h["rows"], h["cols"],
      h["cell_w"], h["cell_h"], h["col0"], h["col0"] + h["cols"] - 1, P))
PY
}

group_lensgrid() {
  # builtin:stories has 4 layers; 20 steps of "Once upon a time, Lily" make 26 positions.
  LENS=(--model builtin:stories --steps 20 --view lens)
  if run_big lens_big "${LENS[@]}"; then
    check blank "$OUT/lens_big.png"
    check cover "$OUT/lens_big.png" lens 0.6
    check heatmap "$OUT/lens_big.png" lens nomask
    lens_cells "$OUT/lens_big.png" 4 all
  fi
  if run_big lens_big_presenter "${LENS[@]}" --presenter --scale 1.5; then
    check cover "$OUT/lens_big_presenter.png" lens 0.6
    lens_cells "$OUT/lens_big_presenter.png" 4 newest
  fi
  if run lens_small "${LENS[@]}" --size 1024x768; then
    check blank "$OUT/lens_small.png"
    check cover "$OUT/lens_small.png" lens 0.6
    lens_cells "$OUT/lens_small.png" 4 newest
  fi
  if run lens_small_presenter "${LENS[@]}" --size 1024x768 --presenter --scale 1.5; then
    check cover "$OUT/lens_small_presenter.png" lens 0.5
    lens_cells "$OUT/lens_small_presenter.png" 4 newest
  fi
  # A short run fits whole at 1024x768 too.
  if run lens_short --model builtin:stories --steps 4 --view lens --size 1024x768; then
    check heatmap "$OUT/lens_short.png" lens nomask
    lens_cells "$OUT/lens_short.png" 4 all
  fi
}

# ---- install: `cmake --install` into a temporary prefix, both programs run from another
# folder. The installed data is what they use: the sidecar names the installed shaders,
# font and model folder, and with the installed model (or shaders) moved away the programs
# fail naming only the installed place (and $DECODERSCOPE_DATA), never the checkout, then
# work again with DECODERSCOPE_DATA pointing at the moved copy.
install_ok() {  # install_ok NAME CONDITION...: a counted check
  local name=$1
  shift
  if "$@"; then passed=$((passed + 1)); else
    echo "FAIL install: $name"
    failed=$((failed + 1))
  fi
}
group_install() {
  local build prefix share src here check_abs
  check_abs=$(realpath "$CHECK")
  local CHECK=$check_abs
  build=$(cd "$(dirname "$APP")" && pwd)
  here=$(cd "$OUT" && pwd)
  src=$(cd "$(dirname "$0")/../.." && pwd)
  prefix="$here/prefix"
  share="$prefix/share/decoderscope"
  rm -rf "$prefix" "$here/elsewhere" "$here/moved" "$here/config"
  if ! cmake --install "$build" --prefix "$prefix" >"$here/install.log" 2>&1; then
    echo "FAIL install: cmake --install"
    sed 's/^/    /' "$here/install.log"
    failed=$((failed + 1))
    return
  fi
  for f in bin/decoderscope bin/decoderscope-cli share/decoderscope/models/stories/model.safetensors \
    share/decoderscope/models/dates/config.json share/decoderscope/shaders/heatmap.frag \
    share/decoderscope/fonts/DejaVuSans.ttf share/applications/decoderscope.desktop \
    share/icons/hicolor/48x48/apps/decoderscope.png share/icons/hicolor/256x256/apps/decoderscope.png \
    share/icons/hicolor/scalable/apps/decoderscope.svg share/man/man1/decoderscope.1 share/man/man1/decoderscope-cli.1; do
    install_ok "$f installed" test -e "$prefix/$f"
  done
  install_ok "no screenshots installed" test ! -e "$share/screenshots"
  # The icon's PNG is as large as its folder says (IHDR width and height).
  install_ok "128 px icon" test "$(od -An -tu1 -j16 -N8 "$prefix/share/icons/hicolor/128x128/apps/decoderscope.png" | tr -s ' ')" = " 0 0 0 128 0 0 0 128"
  if command -v desktop-file-validate >/dev/null; then
    install_ok "desktop entry valid" desktop-file-validate "$prefix/share/applications/decoderscope.desktop"
  fi
  mkdir -p "$here/elsewhere" "$here/moved/models" "$here/config"
  cd "$here/elsewhere"
  local cli=("$prefix/bin/decoderscope-cli" generate --model builtin:stories --steps 12 --temperature 0)
  install_ok "cli runs installed" "${cli[@]}" >"$here/cli.txt" 2>"$here/cli.log"
  install_ok "cli writes the build's text" test "$("$build/decoderscope-cli" "${cli[@]:1}" 2>/dev/null)" = "$(cat "$here/cli.txt")"
  mv "$share/models/stories" "$here/moved/models/stories"
  install_ok "cli without the model fails" test "$(
    "${cli[@]}" >/dev/null 2>"$here/cli_missing.log"
    echo $?
  )" != 0
  install_ok "message names the installed place" grep -qF "$share/models/stories (installed)" "$here/cli_missing.log"
  install_ok "message never names the checkout" test "$(grep -cE "$src/assets/|build tree" "$here/cli_missing.log")" = 0
  install_ok "DECODERSCOPE_DATA is read" env DECODERSCOPE_DATA="$here/moved" "${cli[@]}" >/dev/null 2>"$here/cli_env.log"
  mv "$here/moved/models/stories" "$share/models/stories"
  # The window, installed, with a settings file of its own.
  local APP="$prefix/bin/decoderscope"
  local settings="$here/config/settings.json"
  if run installed_dates --model builtin:dates --steps 6 --view cross --size 1024x768 --settings "$settings"; then
    check heatmap "$OUT/installed_dates.png" cross nomask
    install_ok "window reads the installed data" python3 - "$OUT/installed_dates.png.json" "$share" "$settings" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["data"]
share, settings = sys.argv[2], sys.argv[3]
ok = (d["shaders"] == share + "/shaders" and d["model_dir"] == share + "/models/dates"
      and d["font"] == share + "/fonts/DejaVuSans.ttf" and d["recent_models"][:1] == ["builtin:dates"]
      and json.load(open(settings))["recent_models"][:1] == ["builtin:dates"])
print("" if ok else "data used: %s" % d)
sys.exit(0 if ok else 1)
PY
  fi
  # A damaged settings file: a notice, the window runs.
  printf '{"recent_models": ["builtin:dates", \xff' >"$settings"
  if run installed_damaged --model builtin:dates --steps 2 --settings "$settings"; then
    install_ok "damaged settings: a notice" grep -q "settings file .* is damaged" "$OUT/installed_damaged.log"
  fi
  mv "$share/shaders" "$here/moved/shaders"
  fails installed_noshaders "$share/shaders/heatmap.frag (installed)" --model builtin:dates --screenshot "$OUT/x.png"
  install_ok "shader message never names the checkout" \
    test "$(grep -cE "$src/shaders/|build tree" "$OUT/installed_noshaders.log")" = 0
  if DECODERSCOPE_DATA="$here/moved" run installed_envshaders --model builtin:dates --steps 2; then
    install_ok "window reads shaders from DECODERSCOPE_DATA" \
      grep -qF "\"shaders\":\"$here/moved/shaders\"" "$OUT/installed_envshaders.png.json"
  fi
  mv "$here/moved/shaders" "$share/shaders"
  cd "$here"
}

# ---- lessons (app/gui/lessons): every step of every shipped lesson renders (not blank),
# its caption's live numbers equal the values recomputed from the trace the same run saved
# (lessons/check_live.py), a lesson written here from the README opens and walks, and a
# bad step gives one message naming it while the others still render.
lesson_live() {  # lesson_live SIDECAR TRACE [SIDECAR TRACE ...]
  if python3 "$(dirname "$0")/lessons/check_live.py" "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}
group_lessons() {
  local lessons l stem d f n rc extra
  local GGUF_FIX="$(dirname "$0")/../../../shared/fixtures/gguf/models/aidreams260K.gguf"
  lessons=("$(dirname "$0")"/../../assets/lessons/*.json)
  # Every step of every lesson, as slides (--export: one window for all the steps), two
  # lessons at a time (on displays XNUM and XNUM + 5), then the checks.
  local i=0
  for l in "${lessons[@]}"; do
    stem=$(basename "$l" .json)
    d="$OUT/$stem"
    rm -rf "$d"
    mkdir -p "$d"
    extra=(--save-trace "$d/trace.json")
    if [ "$stem" = 8-a-real-model ]; then  # a real GGUF model, when the shared fixtures are there
      if [ -f "$GGUF_FIX" ]; then extra+=(--model "$GGUF_FIX"); else extra=(); fi
    fi
    (
      XNUM=$((XNUM + 5 * (i % 2)))
      rc=0
      xrun 800x600x24 "$OUT/$stem.log" --lesson "$l" --export "$d" --size 800x600 "${extra[@]}" || rc=$?
      echo $rc >"$OUT/$stem.rc"
    ) &
    i=$((i + 1))
    [ $((i % 2)) -ne 0 ] || wait
  done
  wait
  for l in "${lessons[@]}"; do
    stem=$(basename "$l" .json)
    d="$OUT/$stem"
    if [ "$stem" = 8-a-real-model ] && [ ! -f "$GGUF_FIX" ]; then  # each step is skipped, saying why
      expect "$stem" "every step skipped, saying why" "$(same "$(grep -c 'not exported (it needs --model FILE' "$OUT/$stem.log")" \
        "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["steps"]))' "$l")")"
      continue
    fi
    if [ "$(cat "$OUT/$stem.rc")" != 0 ]; then
      echo "FAIL $stem: --export exited with $(cat "$OUT/$stem.rc")"
      sed 's/^/    /' "$OUT/$stem.log"
      failed=$((failed + 1))
      continue
    fi
    n=0
    local pairs=()
    for f in "$d"/[0-9][0-9].png; do
      [ -e "$f" ] || continue
      n=$((n + 1))
      check blank "$f"
      pairs+=("$f.json" "$d/trace-$(basename "$f" .png).json")
    done
    [ $n -eq 0 ] || lesson_live "${pairs[@]}"
    expect "$stem" "a slide for every step" "$(same "$n" "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["steps"]))' "$l")")"
  done
  # One step as the window shows it (caption beside the view), at both sizes.
  if run_big lesson_big --lesson attention-mask --lesson-step 3 --save-trace "$OUT/lesson_big.json"; then
    check blank "$OUT/lesson_big.png"
    lesson_live "$OUT/lesson_big.png.json" "$OUT/lesson_big.json"
  fi
  if run lesson_small --lesson induction-heads --lesson-step 4 --size 1024x768 --presenter --scale 1.5 \
    --save-trace "$OUT/lesson_small.json"; then
    check blank "$OUT/lesson_small.png"
    lesson_live "$OUT/lesson_small.png.json" "$OUT/lesson_small.json"
  fi
  # A lesson written here from the README alone; step 2 names an unknown view, step 3 a
  # missing model, step 4 a position past the end.
  cat >"$OUT/mine.json" <<'LESSON'
{
  "title": "My lesson",
  "model": "builtin:stories",
  "prompt": "Once upon a time, Lily",
  "steps": [
    {"title": "Look", "view": "attention", "steps": 2, "layer": 1, "head": 1, "key": 0,
     "caption": "\"{query}\" reads \"{key_token}\" with weight {weight} (score {score}).",
     "question": "Which word does it read most?", "answer": "Look at the brightest cell."},
    {"title": "Nowhere", "view": "nowhere", "steps": 2},
    {"title": "Gone", "model": "no-such-model.gguf", "view": "next"},
    {"title": "Too far", "view": "attention", "steps": 2, "select": 99, "caption": "Position {pos}."},
    {"title": "Next", "view": "next", "steps": 3, "temperature": 0.5, "caption": "{token} with {prob}."}
  ]
}
LESSON
  if run mine1 --lesson "$OUT/mine.json" --lesson-step 1 --size 1024x768 --save-trace "$OUT/mine1.json"; then
    check blank "$OUT/mine1.png"
    lesson_live "$OUT/mine1.png.json" "$OUT/mine1.json"
    expect mine1 "one message naming step 2" "$(same "$(grep -c 'mine.json step 2 (Nowhere): unknown view' "$OUT/mine1.log")" 1)"
    expect mine1 "one message naming step 3" "$(same "$(grep -c "mine.json step 3 (Gone): model file 'no-such-model.gguf' not found" "$OUT/mine1.log")" 1)"
  fi
  if run mine5 --lesson "$OUT/mine.json" --lesson-step 5 --size 1024x768 --save-trace "$OUT/mine5.json"; then
    lesson_live "$OUT/mine5.png.json" "$OUT/mine5.json"
  fi
  if run mine4 --lesson "$OUT/mine.json" --lesson-step 4 --size 1024x768; then
    expect mine4 "position past the end named" "$(has "$(cat "$OUT/mine4.png.json")" 'mine.json step 4 (Too far): position 99 is past the end')"
  fi
  if run mine2 --lesson "$OUT/mine.json" --lesson-step 2 --size 1024x768; then
    expect mine2 "the bad step's caption names it" "$(has "$(cat "$OUT/mine2.png.json")" 'mine.json step 2 (Nowhere): unknown view')"
  fi
  # Page Down / Page Up in the window (what a clicker sends), with F12's pictures.
  if command -v xdotool >/dev/null 2>&1; then
    local kd="$OUT/keys_lesson" want
    rm -rf "$kd"
    mkdir -p "$kd"
    rc=0
    xvfb-run ${XNUM:+-n "$XNUM"} -a -s "-screen 0 800x600x24" bash "$(dirname "$0")/lessons/keys_lesson.sh" "$APP" \
      "$(dirname "$0")/../../assets/lessons/1-attention-mask.json" "$kd" >"$kd/driver.log" 2>&1 || rc=$?
    want="1 1 False|2 1 False|3 1 False|3 1 True|2 1 False|exit 0"
    expect keys_lesson "Page Down / Page Up walk the steps ($(tr '\n' '|' <"$kd/driver.log"))" \
      "$(same "$(sed 's/^shot [^ ]* //' "$kd/driver.log" | tr '\n' '|')" "$want|")"
  else
    echo "SKIP keys_lesson: xdotool is not installed"
  fi
  printf '{"steps": [ {"view": ' >"$OUT/cut.json"
  fails lesson_cut "cut.json: not valid JSON" --lesson "$OUT/cut.json" --lesson-step 1 --screenshot "$OUT/cut.png"
  fails lesson_none "no lesson 'no-such-lesson'" --lesson no-such-lesson --screenshot "$OUT/none.png"
}

# ---- attribution: the Attribution view's parts add up to the logit and agree with
# decoderscope-cli attribute --json on the same tokens; post-norm models get the notice.
group_attribution() {
  local CLI
  CLI="$(dirname "$APP")/decoderscope-cli"
  if [ ! -f "$MODELS/stories/model.safetensors" ] || [ ! -f "$MODELS/dates/model.safetensors" ] || [ ! -x "$CLI" ]; then
    echo "SKIP attribution: the built-in models or decoderscope-cli are missing"
    return
  fi
  local ST=(--model builtin:stories --prompt "Lily and Ben went to the park. Lily" --view attribution)
  local DT=(--model builtin:dates --source "July 14, 1989" --view attribution)
  run at_stories "${ST[@]}" --steps 14 --attribute-head 3:1 && check blank "$OUT/at_stories.png"
  run at_vs "${ST[@]}" --steps 14 --attribute-token "#40" --attribute-vs "#41" && check blank "$OUT/at_vs.png"
  run at_dates "${DT[@]}" --steps 5 --attribute-head c1:2 && check blank "$OUT/at_dates.png"
  run at_post --model builtin:dates-postnorm --source "July 14, 1989" --view attribution --steps 3
  run_big at_big "${ST[@]}" --steps 14 --attribute-head 3:1 && check blank "$OUT/at_big.png"
  xrun 1024x768x24 "$OUT/at_small.log" --size 1024x768 --screenshot "$OUT/at_small.png" "${DT[@]}" --steps 5 \
    --attribute-head c1:2 || echo "FAIL at_small: the window exited with an error"
  xrun 1920x1080x24 "$OUT/at_pres.log" --size 1920x1080 --presenter --scale 1.5 --screenshot "$OUT/at_pres.png" \
    "${ST[@]}" --steps 14 --attribute-head 3:1 || echo "FAIL at_pres: the window exited with an error"
  for n in at_small at_pres; do [ -f "$OUT/$n.png" ] && check blank "$OUT/$n.png"; done
  if python3 - "$OUT" "$CLI" <<'PY'; then
import json, os, subprocess, sys
d, cli = sys.argv[1], sys.argv[2]
problems = []
def side(n):
    p = f"{d}/{n}.png.json"
    return json.load(open(p))["attribution"] if os.path.exists(p) else None
for name, model in (("at_stories", "builtin:stories"), ("at_vs", "builtin:stories"), ("at_dates", "builtin:dates"),
                    ("at_big", "builtin:stories"), ("at_small", "builtin:dates"), ("at_pres", "builtin:stories")):
    a = side(name)
    if not a or "parts" not in a:
        problems.append(f"{name}: no attribution in the sidecar")
        continue
    if a["bars_drawn"] < 5 or a["grid"][0] < 2:
        problems.append(f"{name}: {a['bars_drawn']} bars, grid {a['grid']}")
    total = sum(p["value"] for p in a["parts"]) + a["bias_term"]
    if abs(total - a["logit"]) > 1e-4 * max(1.0, abs(a["logit"])):
        problems.append(f"{name}: the parts add up to {total}, the logit is {a['logit']}")
    args = [cli, "attribute", "--model", model, "--prompt-ids", " ".join(map(str, a["fed"])),
            "--token", f"#{a['token']}", "--json"]
    if a["vs"] >= 0:
        args += ["--vs", f"#{a['vs']}"]
    if a["source"]:
        args += ["--source-ids", " ".join(map(str, a["source"]))]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        problems.append(f"{name}: {' '.join(args)} failed: {r.stderr}")
        continue
    c = json.loads(r.stdout)
    gl, cl = [p["label"] for p in a["parts"]], [p["label"] for p in c["parts"]]
    if gl != cl:
        problems.append(f"{name}: the window's parts {gl[:5]}... differ from the CLI's {cl[:5]}...")
        continue
    worst = max(abs(p["value"] - q["value"]) for p, q in zip(a["parts"], c["parts"]))
    if worst > 1e-4 or abs(c["logit"] - a["logit"]) > 1e-4:
        problems.append(f"{name}: the window and the CLI differ by {worst} (logits {a['logit']}, {c['logit']})")
for name in ("at_stories", "at_dates", "at_big", "at_pres", "at_small"):
    a = side(name)
    if a and (a.get("writes_part", -1) < 0 or len(a.get("up", [])) < 3 or a["up"][0][1] <= a["down"][0][1]):
        problems.append(f"{name}: no list of what the head writes ({a.get('writes_part')}, {a.get('up')})")
v = side("at_vs")
if v and (v.get("token"), v.get("vs")) != (40, 41):
    problems.append(f"at_vs: token and vs are {v.get('token')}, {v.get('vs')}")
p = side("at_post")
if not p or not p["refused"].startswith("direct logit attribution is defined for pre-norm") or "parts" in p:
    problems.append(f"at_post: the post-norm model was not refused: {p}")
for n in problems:
    print("FAIL attribution:", n)
sys.exit(1 if problems else 0)
PY
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
}

# ---- compare: two runs side by side (the Compare view). Each side's next-token table and
# logit lens are checked against decoderscope-cli lens runs of its prompt alone (another
# process, recording every hook in float32), and every difference shown against A - B.
# compare_check NAME MODEL PROMPT_A PROMPT_B [SOURCE_A SOURCE_B [POSITIONS]]: POSITIONS, the
# CLI's --steps (positions in all) for a window run of more than one step.
compare_check() {
  if python3 - "$OUT/$1.png.json" "$(dirname "$APP")/decoderscope-cli" "${@:2}" <<'PY'; then
import json, math, subprocess, sys
shot, cli, model, pa, pb = sys.argv[1:6]
sa, sb, positions = (sys.argv[6:9] + ["", "", ""])[:3]
j = json.load(open(shot))["compare"]
bad = []
def lens(prompt, source):
    cmd = [cli, "lens", "--model", model, "--top-k", "20", "--json"]
    if prompt: cmd += ["--prompt", prompt]
    if source: cmd += ["--source", source]
    if positions: cmd += ["--steps", positions]
    return json.loads(subprocess.check_output(cmd))
if j.get("error") or "a" not in j:
    print("FAIL %s: no comparison (%s)" % (shot, j.get("error")))
    sys.exit(1)
for side, prompt, source in (("a", pa, sa), ("b", pb, sb)):
    ref = lens(prompt, source)
    out = ref["layers"][-1]  # the last layer's lens: the model's own next-token distribution
    got = j[side]
    if got["position"] != ref["position"]:
        bad.append("%s reads position %d, the CLI %d" % (side, got["position"], ref["position"]))
    top = {c["id"]: c["p_raw"] for c in got["top"]}
    for i, (tid, p) in enumerate(zip(out["ids"][:8], out["probs"][:8])):
        if tid not in top:
            bad.append("%s: the CLI's token %d (rank %d) is not in the window's table" % (side, tid, i))
        elif abs(top[tid] - p) > 1e-4 + 1e-3 * p:
            bad.append("%s: token %d p %.6f in the window, %.6f from the CLI" % (side, tid, top[tid], p))
    if [l["ids"][0] for l in ref["layers"]] != got["lens"]:
        bad.append("%s: lens top tokens %s, the CLI %s" % (side, got["lens"], [l["ids"][0] for l in ref["layers"]]))
# Every difference shown is A - B of the probabilities shown (or a bound that holds).
for r in j["rows"]:
    if r["in_a"] and r["in_b"]:
        if abs(r["diff_lo"] - (r["pa"] - r["pb"])) > 1e-6 or r["diff_lo"] != r["diff_hi"]:
            bad.append("token %d: difference %g, A - B is %g" % (r["id"], r["diff_lo"], r["pa"] - r["pb"]))
    elif r["in_a"]:
        if not (r["diff_lo"] <= r["pa"] - r["floor_b"] + 1e-7 and r["diff_hi"] == r["pa"]):
            bad.append("token %d: bound [%g, %g] for A only" % (r["id"], r["diff_lo"], r["diff_hi"]))
if not j["rows"]:
    bad.append("no rows in the next-token table")
if pa != pb and not j["differ"]:
    bad.append("different prompts, but no position marked as differing")
if bad:
    print("FAIL %s: %s" % (shot, "; ".join(bad)))
    sys.exit(1)
print("ok %s: %d rows, positions %s differ, lens %s / %s" % (shot, len(j["rows"]), j["differ"], j["a"]["lens"], j["b"]["lens"]))
PY
    passed=$((passed + 1))
  else failed=$((failed + 1)); fi
}

group_compare() {
  if ! [ -f "$MODELS/stories/model.safetensors" ] || ! command -v python3 >/dev/null 2>&1; then
    echo "note: builtin:stories or python3 is absent; the compare group is skipped"
    return
  fi
  local A="Once upon a time, Lily" B="Once upon a time, Tom"
  CMP=(--model builtin:stories --prompt "$A" --steps 1 --view compare --compare-prompt "$B")
  if run_big compare_big "${CMP[@]}"; then
    check blank "$OUT/compare_big.png"
    check heatmap "$OUT/compare_big.png" compare_a causal
    check heatmap "$OUT/compare_big.png" compare_b causal
    compare_check compare_big builtin:stories "$A" "$B"
  fi
  if run compare_small "${CMP[@]}" --size 1024x768; then
    check blank "$OUT/compare_small.png"
    compare_check compare_small builtin:stories "$A" "$B"
  fi
  if run compare_small_attn "${CMP[@]}" --size 1024x768 --compare-part attention; then
    check heatmap "$OUT/compare_small_attn.png" compare_a causal
  fi
  if run_big compare_presenter "${CMP[@]}" --presenter --scale 1.5 --steps 6; then
    check blank "$OUT/compare_presenter.png"
  fi
  if run compare_small_presenter "${CMP[@]}" --size 1024x768 --presenter --scale 1.5 --compare-part layers; then
    check blank "$OUT/compare_small_presenter.png"
  fi
  # Encoder-decoder: two sources, the cross-attention maps side by side (no masked cell).
  # Five steps: the target's BOS and four drawn tokens are the rows (the CLI: --steps 5).
  if run_big compare_dates --model builtin:dates --source "22 Nov 2026" --steps 5 --view compare \
    --compare-source "3 Jan 1999"; then
    check blank "$OUT/compare_dates.png"
    check heatmap "$OUT/compare_dates.png" compare_a nomask
    check heatmap "$OUT/compare_dates.png" compare_b nomask
    compare_check compare_dates builtin:dates "" "" "22 Nov 2026" "3 Jan 1999" 5
  fi
  # The same model at another temperature: B differs only after its first draw.
  if run_big compare_temp --model builtin:stories --steps 8 --view compare --temperature 0.5 --seed 4 \
    --compare-temperature 2; then
    check blank "$OUT/compare_temp.png"
  fi
  # Another vocabulary: a clear message in the view and on stderr, no crash.
  if run compare_vocab --model builtin:stories --steps 2 --view compare --compare-model builtin:dates; then
    check blank "$OUT/compare_vocab.png"
    if grep -q "different vocabularies" "$OUT/compare_vocab.log" &&
      grep -q '"error": *"[^"]*different vocabularies' "$OUT/compare_vocab.png.json"; then
      passed=$((passed + 1))
    else
      echo "FAIL compare_vocab: no message about the vocabularies (see $OUT/compare_vocab.log)"
      failed=$((failed + 1))
    fi
  fi
  fails compare_badpart "--compare-part expects next, attention or layers" --compare-part sideways \
    --screenshot "$OUT/compare_badpart.png"
}

# ---- patching: the Patching view's grid against decoderscope-cli patch --json on the same
# input (every cell), its layout at three sizes, and bad input refused with a clear message.
# patch_cells SHOT CLI_JSON: the sidecar's grid equals the CLI's, cell for cell, and lies
# inside the window with cells big enough for their numbers.
patch_cells() {
  if python3 - "$1" "$2" <<'PY'; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
import json, sys
side, cli = json.load(open(sys.argv[1] + ".json")), json.load(open(sys.argv[2]))
p, problems = side.get("patching", {}), []
g = p.get("grid")
if not g or not p.get("drawn"):
    print(f"FAIL {sys.argv[1]}: no grid drawn: {p}")
    sys.exit(1)
if (g["rows"], g["cols"]) != (cli["rows"], cli["cols"]):
    problems.append(f"shape {g['rows']}x{g['cols']}, the CLI's {cli['rows']}x{cli['cols']}")
else:
    for r in range(g["rows"]):
        for c in range(g["cols"]):
            a, b = g["value"][r][c], cli["value"][r][c]
            if abs(a - b) > 1e-9 * max(1.0, abs(b)):
                problems.append(f"cell ({r}, {c}): window {a}, CLI {b}")
if g["clean_ids"] != cli["clean_ids"] or g["corrupt_ids"] != cli["corrupt_ids"]:
    problems.append("the window and the CLI tokenized the prompts differently")
if abs(g["clean"] - cli["clean_metric"]) > 1e-9 or abs(g["corrupt"] - cli["corrupt_metric"]) > 1e-9:
    problems.append("clean/corrupt metrics differ")
right, bottom = p["x"] + g["cols"] * p["cell_w"], p["y"] + g["rows"] * p["cell_h"]
if right > side["width"] + 0.5 or bottom > side["height"] + 0.5 or p["x"] < 0 or p["y"] < 0:
    problems.append(f"the grid ({p['x']:.0f}, {p['y']:.0f}) - ({right:.0f}, {bottom:.0f}) leaves the window")
if p["cell_h"] < 14 or p["cell_w"] < 14:
    problems.append(f"cells of {p['cell_w']:.1f} x {p['cell_h']:.1f} px are too small to read")
for m in problems:
    print(f"FAIL {sys.argv[1]}: {m}")
sys.exit(1 if problems else 0)
PY
}
group_patching() {
  local CLI
  CLI="$(dirname "$APP")/decoderscope-cli"
  if [ ! -f "$MODELS/stories/model.safetensors" ] || [ ! -f "$MODELS/dates/model.safetensors" ] || [ ! -x "$CLI" ]; then
    echo "SKIP patching: the built-in models or decoderscope-cli are missing"
    return
  fi
  local CLEAN="drum market friend house brown girl shy drum market friend house brown girl" CORRUPT="drum market friend house brown girl kind drum market friend house brown girl"
  local SP=(--patch-clean "$CLEAN" --patch-corrupt "$CORRUPT" --patch-answer shy --patch-wrong kind)
  local ST=(--model builtin:stories --prompt "$CLEAN" --steps 1 --view patching "${SP[@]}")
  local DSRC=(--patch-clean "July 14, 1989" --patch-corrupt "July 14, 1954" --patch-prefix "19"
    --patch-answer 8 --patch-wrong 5)
  local DT=(--model builtin:dates --source "July 14, 1989" --steps 1 --view patching "${DSRC[@]}")
  local site
  for site in resid_pre head; do
    "$CLI" patch --model builtin:stories --clean "$CLEAN" --corrupt "$CORRUPT" --answer shy \
      --wrong kind --site $site --json >"$OUT/patch_cli_$site.json" 2>"$OUT/patch_cli_$site.log"
    if run "patch_$site" "${ST[@]}" --patch-site $site; then
      check blank "$OUT/patch_$site.png"
      patch_cells "$OUT/patch_$site.png" "$OUT/patch_cli_$site.json"
    fi
  done
  "$CLI" patch --model builtin:dates --clean "July 14, 1989" --corrupt "July 14, 1954" --prefix "19" \
    --answer 8 --wrong 5 --site cross_attn_out --json >"$OUT/patch_cli_dates.json" 2>"$OUT/patch_cli_dates.log"
  if run patch_dates "${DT[@]}" --patch-site cross_attn_out; then
    check blank "$OUT/patch_dates.png"
    patch_cells "$OUT/patch_dates.png" "$OUT/patch_cli_dates.json"
  fi
  # Readable at both screen sizes and in presenter mode with text 1.5x.
  if run_big patch_big "${ST[@]}"; then
    check blank "$OUT/patch_big.png"
    patch_cells "$OUT/patch_big.png" "$OUT/patch_cli_resid_pre.json"
  fi
  if run patch_small "${ST[@]}" --size 1024x768; then
    patch_cells "$OUT/patch_small.png" "$OUT/patch_cli_resid_pre.json"
  fi
  if run_big patch_pres "${ST[@]}" --presenter --scale 1.5; then
    patch_cells "$OUT/patch_pres.png" "$OUT/patch_cli_resid_pre.json"
  fi
  # The lesson's patching steps as slides (a short view: the boxes fold into one line):
  # each draws its grid, whole, inside the slide.
  local L="$(dirname "$0")/../../assets/lessons/11-activation-patching.json" rc=0
  rm -rf "$OUT/patch_lesson" && mkdir -p "$OUT/patch_lesson"
  xrun 800x600x24 "$OUT/patch_lesson.log" --lesson "$L" --export "$OUT/patch_lesson" --size 800x600 || rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL patch_lesson: --export exited with $rc"
    failed=$((failed + 1))
  elif python3 - "$OUT/patch_lesson" "$L" <<'PY'; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
import json, sys
d, lesson = sys.argv[1], json.load(open(sys.argv[2]))
bad = 0
for i, st in enumerate(lesson["steps"]):
    if st.get("view") != "patching":
        continue
    side = json.load(open(f"{d}/{i + 1:02d}.png.json"))
    p = side.get("patching", {})
    g = p.get("grid")
    if not g or not p.get("drawn") or p.get("site") != st["patch-site"]:
        print(f"FAIL patch_lesson step {i + 1}: no {st['patch-site']} grid drawn")
        bad += 1
    elif p["y"] + g["rows"] * p["cell_h"] > side["view_rect"][1] + side["view_rect"][3] + 1:
        print(f"FAIL patch_lesson step {i + 1}: the grid runs past the view's bottom")
        bad += 1
sys.exit(1 if bad else 0)
PY
  # Bad input: a clear message, never a crash.
  fails patch_len "same length" --model builtin:stories --steps 1 --view patching --patch-clean "Lily had a ball ." \
    --patch-corrupt "Lily had a red ball ." --patch-answer Tom --patch-wrong Lily --screenshot "$OUT/patch_len.png"
  fails patch_tok "must be one token" "${ST[@]}" --patch-answer "Tom Lily" --screenshot "$OUT/patch_tok.png"
}

for g in "${ALL_GROUPS[@]}"; do
  [ -z "$GROUP" ] || [ "$g" = "$GROUP" ] || continue
  "group_$g"
done
echo "gui${GROUP:+ $GROUP}: $passed passed, $failed failed"
[ $failed -eq 0 ]
