#!/usr/bin/env bash
# kwatch's benchmarks (make bench): kwatch against TShark and against the
# physical floor (reading the packets with pcapgo and nothing else) on the
# same generated captures, and live decoding against kubectl on the same
# replayed watch. Results go to bench/RESULTS.md.
#
#   RUNS=3            runs of each command, alternated; medians are reported
#   BENCH_LARGE=1     also a 1 GB capture
#   TSHARK_MAX_MB=50  TShark only on captures up to this size (it grows faster
#                     than linearly: 44 s for 50 MB measured here)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-3}"
TSHARK_MAX_MB="${TSHARK_MAX_MB:-50}"
OUT=bench/out
mkdir -p "$OUT"

need=()
command -v tshark >/dev/null || need+=(tshark)
[ -x /usr/bin/time ] || need+=(time)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} from Debian" >&2
  export DEBIAN_FRONTEND=noninteractive
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi

echo "building" >&2
go build -trimpath -o "$OUT/kwatch" .
go build -o "$OUT/floor" ./bench/floor
go build -o "$OUT/gen" ./bench/gen
go build -o "$OUT/replay" ./bench/replay

sizes=(10 20 50 100)
[ "${BENCH_LARGE:-}" = 1 ] && sizes+=(1024)
for mb in "${sizes[@]}"; do
  f="$OUT/watch-${mb}MB.pcap"
  [ -f "$f" ] || { echo "generating $f" >&2; "$OUT/gen" -size "${mb}MB" -o "$f"; }
done

# measure CMD...: prints "seconds maxrss_kb" of one run, output discarded.
# Wall time from bash's EPOCHREALTIME (microseconds; /usr/bin/time's %e has
# only 10 ms), peak RSS from /usr/bin/time.
measure() {
  local t0=$EPOCHREALTIME
  /usr/bin/time -f "%M" -o "$OUT/time.txt" "$@" >/dev/null 2>"$OUT/stderr.txt" || true
  local t1=$EPOCHREALTIME
  awk -v a="$t0" -v b="$t1" -v rss="$(tail -1 "$OUT/time.txt")" 'BEGIN {printf "%.4f %s\n", b - a, rss}'
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

results="$OUT/results.tsv"
: >"$results"
for mb in "${sizes[@]}"; do
  f="$OUT/watch-${mb}MB.pcap"
  bytes=$(stat -c %s "$f")
  events=$("$OUT/kwatch" pcap -o json "$f" | tail -1 | sed -E 's/.*"events":\{([^}]*)\}.*/\1/' | tr ',' '\n' | awk -F: '{s+=$2} END {print s}')
  : >"$OUT/k.txt"; : >"$OUT/kr.txt"; : >"$OUT/f.txt"; : >"$OUT/t.txt"
  for run in $(seq "$RUNS"); do
    echo "size ${mb} MB, run $run" >&2
    read -r s rss < <(measure "$OUT/kwatch" pcap -o json "$f"); echo "$s" >>"$OUT/k.txt"; echo "$rss" >>"$OUT/kr.txt"
    read -r s _ < <(measure "$OUT/floor" "$f"); echo "$s" >>"$OUT/f.txt"
    if [ "$mb" -le "$TSHARK_MAX_MB" ]; then
      read -r s _ < <(measure tshark -r "$f" -d tcp.port==8001,http -Y http.response -T fields -e http.chunk_size); echo "$s" >>"$OUT/t.txt"
    fi
  done
  k=$(median <"$OUT/k.txt"); kr=$(sort -n "$OUT/kr.txt" | tail -1); fl=$(median <"$OUT/f.txt")
  t=-; [ -s "$OUT/t.txt" ] && t=$(median <"$OUT/t.txt")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$mb" "$bytes" "$events" "$k" "$kr" "$fl" "$t" >>"$results"
done

# Live: one replayed watch of 100k events, decoded by kwatch stream and
# copied by kubectl get --raw (which only prints the body).
EVENTS=100000
"$OUT/replay" -addr 127.0.0.1:18080 -events $EVENTS &
rpid=$!
trap 'kill $rpid 2>/dev/null || true' EXIT
sleep 0.5
kubectl_bin=$(command -v kubectl || true)
[ -x "${XDG_CACHE_HOME:-$HOME/.cache}/kwatch/run/bin/kubectl" ] && kubectl_bin="${XDG_CACHE_HOME:-$HOME/.cache}/kwatch/run/bin/kubectl"
: >"$OUT/live.tsv"
for run in $(seq "$RUNS"); do
  kill $rpid 2>/dev/null || true; wait $rpid 2>/dev/null || true
  "$OUT/replay" -addr 127.0.0.1:18080 -events $EVENTS & rpid=$!; sleep 0.5
  read -r ks krss < <(measure "$OUT/kwatch" stream --raw '/api/v1/namespaces/kube-system/configmaps?watch=1' --proxy http://127.0.0.1:18080 -o json)
  kill $rpid 2>/dev/null || true; wait $rpid 2>/dev/null || true
  "$OUT/replay" -addr 127.0.0.1:18080 -events $EVENTS & rpid=$!; sleep 0.5
  cs=-; crss=-
  if [ -n "$kubectl_bin" ]; then
    read -r cs crss < <(measure "$kubectl_bin" --server http://127.0.0.1:18080 get --raw '/api/v1/namespaces/kube-system/configmaps?watch=1')
  fi
  printf '%s\t%s\t%s\t%s\n' "$ks" "$krss" "$cs" "$crss" >>"$OUT/live.tsv"
done

# RESULTS.md
{
  echo "# kwatch benchmark results"
  echo
  echo "Written by \`make bench\` (bench/run.sh) on $(date -u +%Y-%m-%d), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"
  echo "$(go version | cut -d' ' -f3), $(tshark --version 2>/dev/null | head -1 || echo 'no tshark'). Medians of $RUNS runs, alternated."
  echo
  echo "Captures: \`bench/gen\` (16 watch connections through kubectl proxy, Ethernet, 1448-byte MSS;"
  echo "small events one per chunk, every 10th chunk carrying 3 events, every 97th event 200 KB in 32 KiB chunks, 1 segment in 200 out of order)."
  echo
  echo "Commands: \`kwatch pcap -o json FILE > /dev/null\`; \`bench/floor FILE\` (pcapgo reads every packet, nothing else);"
  echo "\`tshark -r FILE -d tcp.port==8001,http -Y http.response -T fields -e http.chunk_size\`. Peak RSS from \`/usr/bin/time\`."
  echo
  echo "| capture | events | kwatch s | kwatch MB/s | kwatch events/s | kwatch peak RSS | floor s | TShark s | kwatch/TShark speed | kwatch/floor speed |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  while IFS=$'\t' read -r mb bytes events k kr fl t; do
    awk -v mb="$mb" -v bytes="$bytes" -v ev="$events" -v k="$k" -v kr="$kr" -v fl="$fl" -v t="$t" 'BEGIN {
      mbs = bytes / 1048576 / (k > 0 ? k : 0.001)
      eps = ev / (k > 0 ? k : 0.001)
      ts = (t == "-") ? "-" : sprintf("%.1fx", t / (k > 0 ? k : 0.001))
      printf "| %d MB | %d | %.3f | %.0f | %.0f | %.1f MiB | %.4f | %s | %s | 1/%.0f |\n", mb, ev, k, mbs, eps, kr / 1024, fl, t, ts, k / (fl > 0 ? fl : 0.001)
    }'
  done <"$results"
  echo
  echo "Live: a local server (\`bench/replay\`) streams $EVENTS ConfigMap events of about 1 KB, one chunk each;"
  echo "\`kwatch stream --raw PATH --proxy URL -o json > /dev/null\` decodes them, \`kubectl get --raw PATH > /dev/null\` only copies the body."
  echo
  echo "| run | kwatch s | kwatch events/s | kwatch peak RSS | kubectl get --raw s | kubectl events/s | kubectl peak RSS |"
  echo "|---|---|---|---|---|---|---|"
  n=0
  while IFS=$'\t' read -r ks krss cs crss; do
    n=$((n+1))
    awk -v n="$n" -v ev="$EVENTS" -v ks="$ks" -v krss="$krss" -v cs="$cs" -v crss="$crss" 'BEGIN {
      ce = (cs == "-") ? "-" : sprintf("%.0f", ev / cs); cr = (crss == "-") ? "-" : sprintf("%.1f MiB", crss / 1024)
      printf "| %d | %.2f | %.0f | %.1f MiB | %s | %s | %s |\n", n, ks, ev / ks, krss / 1024, cs, ce, cr
    }'
  done <"$OUT/live.tsv"
} >bench/RESULTS.md
echo "wrote bench/RESULTS.md" >&2
cat bench/RESULTS.md
