#!/usr/bin/env bash
# Lesson mode driven with the keys a presentation clicker sends (xdotool on the X display
# this runs on, under xvfb-run): the window opens on a lesson, Page Down goes to the next
# step (or first shows a question's answer), Page Up goes back. Pictures are taken with
# F12 (--sidecar: each has its PNG.json). Run by gui_test.sh's `lessons` group:
#   keys_lesson.sh DECODERSCOPE LESSON DIR
# Prints one line per picture: "shot FILE STEP STEPS_GENERATED REVEALED"; exit 1 when the
# window did not come up or a picture did not arrive.
set -uo pipefail
APP=$(realpath "$1")
LESSON=$(realpath "$2")
DIR=$3
cd "$DIR" || exit 1
rm -f decoderscope-*.png decoderscope-*.png.json
"$APP" --lesson "$LESSON" --size 800x600 --sidecar >app.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
wid=$(timeout 60 xdotool search --sync --onlyvisible --name decoderscope | head -1)
[ -n "$wid" ] || { echo "the window did not open"; exit 1; }
xdotool mousemove --window "$wid" 300 500
n=0
state() {  # state SIDECAR: "STEP STEPS_GENERATED REVEALED SETTING_UP" (one python a picture: quick)
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); l=d['lesson'] or {}
print(l.get('step'), d['steps'], l.get('revealed'), l.get('setting_up'))" "$1" 2>/dev/null
}
shot() {
  n=$((n + 1))
  LAST=$(printf 'decoderscope-%03d.png' "$n")
  xdotool key F12
  local i
  for i in $(seq 1 200); do
    [ -s "$LAST.json" ] && STATE=$(state "$LAST.json") && [ -n "$STATE" ] && break
    sleep 0.1
  done
  [ -n "$STATE" ] || { echo "F12 made no $LAST"; exit 1; }
}
# settled WANT_STEP WANT_GENERATED: pictures until the lesson is at the step with that many
# steps generated and nothing being set up (at most 20 s).
settled() {
  local i
  for i in $(seq 1 100); do
    STATE=
    shot
    case "$STATE" in
      "$1 $2 "*" False")
        echo "shot $LAST $1 $2 $(echo "$STATE" | cut -d' ' -f3)"
        return
        ;;
    esac
    sleep 0.2
  done
  echo "shot $LAST (not settled at step $1 with $2 steps)"
}
settled 1 1
xdotool key Next  # Page Down
settled 2 1
xdotool key Next
settled 3 1
xdotool key Next  # step 3 asks a question: its answer first
sleep 0.2
settled 3 1
xdotool key Prior  # Page Up
settled 2 1
xdotool key ctrl+q
wait $pid
echo "exit $?"
