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
ALL_GROUPS=(views encdec replay models block gguf tracebin_dec tracebin_enc maps soak lensgrid)
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
  if run attention "${DEC[@]}" --view attention --layer 1 --head 2; then
    check blank "$OUT/attention.png"
    check heatmap "$OUT/attention.png" attention causal
  fi
  if run attention_mean "${DEC[@]}" --view attention --head mean --log --colormap magma; then
    check heatmap "$OUT/attention_mean.png" attention causal
  fi
  if run attention_scores "${DEC[@]}" --view attention --scores --colormap greys --light; then
    check heatmap "$OUT/attention_scores.png" attention causal
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
    # The beam search tree; the window replays the winner, whose tokens are the ones
    # decoderscope-cli's beam search prints (between <s> and </s>).
    if run beams --model builtin:dates --source "Sunday, 22 November 2026" --steps 3 --view beams --beam 3; then
      check blank "$OUT/beams.png"
      want="1 $("$(dirname "$APP")/decoderscope-cli" generate --model builtin:dates \
        --source "Sunday, 22 November 2026" --beam 3 --ids) 2" || true
      got=$(grep -o '"tokens": \[[^]]*\]' "$OUT/beams.png.json" | tr -d '",[]a-z:' | xargs) || true
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
  if run_big maps_11_scaled "${MAP11[@]}" --scale 1.5; then  # bigger text takes room: 40%
    check cover "$OUT/maps_11_scaled.png" attention 0.4
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

for g in "${ALL_GROUPS[@]}"; do
  [ -z "$GROUP" ] || [ "$g" = "$GROUP" ] || continue
  "group_$g"
done
echo "gui${GROUP:+ $GROUP}: $passed passed, $failed failed"
[ $failed -eq 0 ]
