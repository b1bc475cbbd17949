#!/usr/bin/env bash
# Runs `spry bench video` and its peers (OpenCV, PyAV, decord, decord2) on the
# same clips, interleaved: every round runs each reader once (a warm-up pass,
# then RUNS timed passes, median), TSN 8 segments and dense 32x2, 224 crops,
# one decoder thread each. Then the seed's frames-vs-video comparison (TSN
# from JPEG frame folders made by `spry prepare frames`), and one summary line
# per set and sampler: medians over the rounds, spry / best peer.
#
# Usage: bench/run_video.sh [FILES...]
#   default: the sets in SETS (default "shared"):
#     shared  ../shared/data/action_clips: 2x mp4 (H.264), avi (MPEG-4 Part 2)
#     x264    the shared clips re-encoded with libx264's default settings
#             (what `ffmpeg -i in -c:v libx264 out.mp4` makes; needs PyAV)
#     synth   12 clips of `spry synth actions` (H.264, 112x112, 32 frames)
#   RUNS=5 passes per reader, ROUNDS=3, PYTHON=python3 (OpenCV, PyAV, decord),
#   PYTHON_DECORD2 (an environment with decord2, whose module is also named
#   `decord`; default: PYTHON when it has decord2, else a venv this script makes
#   under ~/.cache/spry-bench), PEER_INSTALL=1 (pip-install missing peers; 0:
#   use what is there).
# Every stdout line is one JSON object. A peer that is not installed gets a
# {"note": "peer not installed: spry figures only"} line. Exit status 1 when
# spry fails or returns a wrong frame, or a peer that is installed fails.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
spry="${SPRY_BIN:-$here/build/spry}"
py="${PYTHON:-python3}"
runs="${RUNS:-5}"
rounds="${ROUNDS:-3}"
install="${PEER_INSTALL:-1}"
clips="$here/../shared/data/action_clips"
out="$(mktemp)"; work="$(mktemp -d)"; trap 'rm -rf "$out" "$work"' EXIT
status=0
args=("$@")

note() { printf '{"bench": "video", "note": "%s"}\n' "$*" | tee -a "$out"; }
[ -x "$spry" ] || { note "no spry binary at $spry: build first (make)"; exit 1; }

# ---------------------------------------------------------------- peers
has_dist() { "$1" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$2" 2>/dev/null; }
has_mod() { "$1" -c "import $2" 2>/dev/null; }
pip_in() { [ "$install" = 1 ] && "$1" -m pip install --quiet --disable-pip-version-check --timeout 30 "${@:2}" >/dev/null 2>&1; }
peers=()   # "name python" pairs
want_peer() { # name, python, module, dist
  local name=$1 p=$2 mod=$3 dist=$4
  if ! "$p" -c "" 2>/dev/null; then note "peer not installed: spry figures only ($name: no python at $p)"; return; fi
  if ! { has_mod "$p" "$mod" && has_dist "$p" "$dist"; }; then pip_in "$p" "$dist" numpy || true; fi
  if has_mod "$p" "$mod" && has_dist "$p" "$dist"; then peers+=("$name $p")
  else note "peer not installed: spry figures only ($name: pip install $dist)"; fi
}
want_peer opencv "$py" cv2 opencv-python-headless
want_peer pyav "$py" av av
if has_dist "$py" decord2; then note "peer decord: $py has decord2 installed, which replaces decord's module"
else want_peer decord "$py" decord decord; fi
py2="${PYTHON_DECORD2:-}"
if [ -z "$py2" ]; then
  if has_dist "$py" decord2; then py2="$py"
  else
    venv="${XDG_CACHE_HOME:-$HOME/.cache}/spry-bench/venv-decord2"
    if [ ! -x "$venv/bin/python" ] && [ "$install" = 1 ]; then
      python3 -m venv "$venv" >/dev/null 2>&1 && pip_in "$venv/bin/python" decord2 numpy av || true
    fi
    py2="$venv/bin/python"
  fi
fi
want_peer decord2 "$py2" decord decord2
# The peers' frame check decodes with PyAV: an environment without it cannot check.
for pe in "${peers[@]}"; do
  set -- $pe
  has_mod "$2" av || { pip_in "$2" av || true; has_mod "$2" av || note "peer $1: no PyAV in $2, its frames are not checked"; }
done

# ----------------------------------------------------------------- sets
declare -A set_files
if [ ${#args[@]} -gt 0 ]; then
  set_files[files]="${args[*]}"; sets=(files)
else
  read -r -a sets <<< "${SETS:-shared}"
  for s in "${sets[@]}"; do
    case "$s" in
      shared)
        [ -d "$clips" ] || { note "no $clips: give FILES"; exit 1; }
        set_files[shared]="$clips/kinetics400/demo.mp4 $clips/kinetics400/test.mp4 $clips/ucf101/test.avi" ;;
      x264)
        mkdir -p "$work/x264"
        if has_mod "$py" av && (cd "$here/bench/peers" && "$py" video_make_x264.py --out "$work/x264" \
             "$clips/kinetics400/demo.mp4" "$clips/kinetics400/test.mp4" "$clips/ucf101/test.avi" >/dev/null); then
          set_files[x264]="$(ls "$work"/x264/*.mp4 | tr '\n' ' ')"
        else note "set x264 needs PyAV with libx264 (PYTHON=$py): skipped"; fi ;;
      synth)
        "$spry" synth actions --count 12 --out "$work/synth" >/dev/null
        set_files[synth]="$(awk '{print $1}' "$work/synth/list.txt" | sed "s|^|$work/synth/|" | tr '\n' ' ')" ;;
      *) note "unknown set $s (shared, x264, synth)"; exit 2 ;;
    esac
  done
fi

# ---------------------------------------------------------------- rounds
tag() { sed "s/^{/{\"set\": \"$1\", \"round\": $2, /"; }
samplers=("--sampler tsn --segments 8" "--sampler dense --frames 32 --stride 2")
for s in "${sets[@]}"; do
  [ -n "${set_files[$s]:-}" ] || continue
  read -r -a files <<< "${set_files[$s]}"
  for ((r = 1; r <= rounds; r++)); do
    for sampler in "${samplers[@]}"; do
      # Frames are checked in the first round only (it does not change).
      chk=(); [ "$r" -gt 1 ] && chk=(--no-check)
      # shellcheck disable=SC2086
      if ! "$spry" bench video $sampler --size 224 --runs "$runs" "${chk[@]}" "${files[@]}" | tag "$s" "$r" | tee -a "$out"; then
        note "spry bench video failed on set $s"; status=1
      fi
      for pe in "${peers[@]}"; do
        set -- $pe
        # shellcheck disable=SC2086
        if ! (cd "$here/bench/peers" && "$2" "video_$1.py" $sampler --size 224 --runs "$runs" "${chk[@]}" "${files[@]}") \
             | tag "$s" "$r" | tee -a "$out"; then
          note "peer $1 failed on set $s"; status=1
        fi
      done
    done
  done
done

# Frames vs video (the seed's 3.22x): the shared clips pre-decoded to JPEG folders.
if [ -n "${set_files[shared]:-}" ]; then
  read -r -a files <<< "${set_files[shared]}"
  printf '%s 0\n' "${files[@]}" > "$work/list.txt"
  "$spry" prepare frames --list "$work/list.txt" --out "$work/frames" >/dev/null 2>&1
  mapfile -t dirs < <(awk '{print $1}' "$work/frames/frames.list" | sed "s|^|$work/frames/|")
  for ((r = 1; r <= rounds; r++)); do
    "$spry" bench video --sampler tsn --segments 8 --size 224 --runs "$runs" --no-check "${dirs[@]}" \
      | sed 's/"impl": "spry"/"impl": "spry-frames"/' | tag shared "$r" | tee -a "$out"
    "$spry" bench video --sampler tsn --segments 8 --size 224 --runs "$runs" --no-check "${files[@]}" \
      | sed 's/"impl": "spry"/"impl": "spry-video"/' | tag shared "$r" | tee -a "$out"
  done
fi

# Summary with the standard library only (any python3 will do).
spy="$(command -v python3 || echo "$py")"
"$spy" - "$out" <<'PY' || status=1
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
rows = [r for r in rows if "impl" in r]
goal = {"tsn": 2.0, "dense": 1.5}
def med(impl, s, sampler, key="clips_per_s"):
    v = [r[key] for r in rows if r["impl"] == impl and r["set"] == s and r["sampler"] == sampler and key in r]
    return statistics.median(v) if v else None
for s in dict.fromkeys(r["set"] for r in rows):
    for sampler in ("tsn", "dense"):
        base = med("spry", s, sampler)
        if base is None:
            continue
        line = {"bench": "video", "summary": "spry / best peer", "set": s, "sampler": sampler,
                "rounds": len([r for r in rows if r["impl"] == "spry" and r["set"] == s and r["sampler"] == sampler]),
                "spry_clips_per_s": round(base, 3),
                "spry_frames_decoded_per_clip": med("spry", s, sampler, "frames_decoded_per_clip"),
                "spry_cpu_ms_per_clip": med("spry", s, sampler, "cpu_ms_per_clip")}
        peers = {p: med(p, s, sampler) for p in ("opencv", "pyav", "decord", "decord2")}
        peers = {p: v for p, v in peers.items() if v}
        for p, v in peers.items():
            line[p + "_clips_per_s"] = round(v, 3)
            line["ratio_" + p] = round(base / v, 2)
        best = [p for p in ("opencv", "decord", "decord2") if p in peers]
        if best:
            b = max(best, key=peers.get)
            line.update({"best_peer": b, "ratio_best": round(base / peers[b], 2), "goal": goal[sampler],
                         "met": base / peers[b] >= goal[sampler]})
        else:
            line["note"] = "peer not installed: spry figures only"
        print(json.dumps(line))
fr, vid = med("spry-frames", "shared", "tsn"), med("spry-video", "shared", "tsn")
if fr and vid:
    print(json.dumps({"bench": "video", "summary": "frames / video", "set": "shared", "sampler": "tsn",
                      "clips_per_s": round(fr / vid, 2), "seed": 3.22}))
# spry must be exact; the peers' check is approximate (nearest frame) and
# their misses are reported, not failed on.
sys.exit(1 if any(r["impl"] == "spry" and r.get("accuracy_mismatches", 0) != 0 for r in rows) else 0)
PY
exit "$status"
