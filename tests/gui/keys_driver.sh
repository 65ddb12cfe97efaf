#!/usr/bin/env bash
# Drives the window with keys as a teacher would (xdotool on the X display this runs on,
# under xvfb-run) and takes pictures with F12; each picture's PNG.json (--sidecar) says
# what the window was doing. Run by gui_test.sh's `keys` group:
#   keys_driver.sh DECODERSCOPE MODEL DIR
# Prints one line per picture: "shot FILE steps playing running_to_end done"; exit 1 when
# the window did not come up or a picture did not arrive.
set -uo pipefail
APP=$(realpath "$1")
MODEL=$(realpath "$2")
DIR=$3
cd "$DIR" || exit 1
"$APP" --model "$MODEL" --prompt "a" --size 1280x800 --sidecar >app.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
wid=$(timeout 60 xdotool search --sync --onlyvisible --name decoderscope | head -1)
[ -n "$wid" ] || { echo "the window did not open"; exit 1; }
xdotool mousemove --window "$wid" 640 700  # keys go to the window under the pointer (no window manager)
n=0
field() { python3 -c "import json,sys; print(str(json.load(open(sys.argv[1]))[sys.argv[2]]).lower())" "$1" "$2"; }
# shot: F12, then waits for the numbered picture's sidecar; LAST is its path.
shot() {
  n=$((n + 1))
  LAST=$(printf 'decoderscope-%03d.png' "$n")
  xdotool key F12
  local i
  for i in $(seq 1 200); do
    [ -s "$LAST.json" ] && python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$LAST.json" 2>/dev/null && break
    sleep 0.1
  done
  [ -s "$LAST.json" ] || { echo "F12 made no $LAST"; exit 1; }
  echo "shot $LAST $(field "$LAST.json" steps) $(field "$LAST.json" playing) $(field "$LAST.json" running_to_end) $(field "$LAST.json" done)"
}
# Wait for the model (the sidecar's storage is empty while it loads).
for i in $(seq 1 120); do
  shot
  [ -n "$(field "$LAST.json" storage)" ] && break
  sleep 0.5
done
xdotool key End  # Run to end
for i in $(seq 1 50); do
  shot
  [ "$(field "$LAST.json" running_to_end)" = true ] && break
done
xdotool key space  # one press stops it (the step in progress still ends)
sleep 0.5
shot
sleep 3  # a step of this model under the sanitizers takes up to a second
shot
sleep 1.5
shot
xdotool key ctrl+q
wait $pid
echo "exit $?"
