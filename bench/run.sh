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
command -v curl >/dev/null || need+=(curl)
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

# Two sets of captures: 16 watch connections (an informer-heavy client
# through kubectl proxy) at 10-100 MB, and one watch connection (a single
# kubectl get -w or controller being debugged) at 2-10 MB.
sizes=(10 20 50 100)
[ "${BENCH_LARGE:-}" = 1 ] && sizes+=(1024)
one_sizes=(2 5 10)
for mb in "${sizes[@]}"; do
  f="$OUT/watch-${mb}MB.pcap"
  [ -f "$f" ] || { echo "generating $f" >&2; "$OUT/gen" -size "${mb}MB" -o "$f"; }
done
for mb in "${one_sizes[@]}"; do
  f="$OUT/watch1-${mb}MB.pcap"
  [ -f "$f" ] || { echo "generating $f" >&2; "$OUT/gen" -conns 1 -size "${mb}MB" -o "$f"; }
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

# TShark's closest job: list the chunk sizes of every HTTP response on port
# 8001. It dissects a response only once its whole body is reassembled, and
# by default does not put out-of-order segments back in order (the
# response is then silently not shown), hence tcp.reassemble_out_of_order.
TSHARK_JOB=(-o tcp.reassemble_out_of_order:TRUE -d tcp.port==8001,http -Y http.response -T fields -e http.chunk_size)

# bench_set NAME PREFIX SIZES...: times kwatch, the floor and TShark on
# OUT/PREFIX-<size>MB.pcap, alternating, RUNS times each; one line per
# capture in OUT/NAME.tsv. Before timing, TShark's chunk count must equal
# kwatch's (chunks plus one last-chunk per watch), or TShark did not do the
# job and is not timed.
bench_set() {
  local name=$1 prefix=$2; shift 2
  : >"$OUT/$name.tsv"
  for mb in "$@"; do
    f="$OUT/$prefix-${mb}MB.pcap"
    bytes=$(stat -c %s "$f")
    summary=$("$OUT/kwatch" pcap -o json "$f" | tail -1)
    events=$(sed -E 's/.*"events":\{([^}]*)\}.*/\1/' <<<"$summary" | tr ',' '\n' | awk -F: '{s+=$2} END {print s}')
    kchunks=$(sed -E 's/.*"chunks":([0-9]+).*/\1/' <<<"$summary")
    watches=$(sed -E 's/.*"watches":([0-9]+).*/\1/' <<<"$summary")
    tshark_ok=0
    if [ "$mb" -le "$TSHARK_MAX_MB" ]; then
      tchunks=$(tshark -r "$f" "${TSHARK_JOB[@]}" 2>/dev/null | tr ',' '\n' | grep -c . || true)
      if [ "$tchunks" = $((kchunks + watches)) ]; then tshark_ok=1; else
        echo "TShark listed $tchunks chunks of $f, kwatch $kchunks + $watches last-chunks: TShark not timed" >&2; fi
    fi
    : >"$OUT/k.txt"; : >"$OUT/kr.txt"; : >"$OUT/f.txt"; : >"$OUT/t.txt"; : >"$OUT/tr.txt"
    for run in $(seq "$RUNS"); do
      echo "$prefix ${mb} MB, run $run" >&2
      read -r s rss < <(measure "$OUT/kwatch" pcap -o json "$f"); echo "$s" >>"$OUT/k.txt"; echo "$rss" >>"$OUT/kr.txt"
      read -r s _ < <(measure "$OUT/floor" "$f"); echo "$s" >>"$OUT/f.txt"
      if [ "$tshark_ok" = 1 ]; then
        read -r s rss < <(measure tshark -r "$f" "${TSHARK_JOB[@]}"); echo "$s" >>"$OUT/t.txt"; echo "$rss" >>"$OUT/tr.txt"
      fi
    done
    k=$(median <"$OUT/k.txt"); kr=$(sort -n "$OUT/kr.txt" | tail -1); fl=$(median <"$OUT/f.txt")
    t=-; tr=-; [ -s "$OUT/t.txt" ] && { t=$(median <"$OUT/t.txt"); tr=$(sort -n "$OUT/tr.txt" | tail -1); }
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$mb" "$bytes" "$events" "$k" "$kr" "$fl" "$t" "$tr" >>"$OUT/$name.tsv"
  done
}
bench_set many watch "${sizes[@]}"
bench_set one watch1 "${one_sizes[@]}"

# Live: one replayed watch of 100k events (bench/replay also answers
# discovery and the LIST before it). The same work: kwatch stream and
# kubectl get -w, both -o json, each listing then watching configmaps; and
# the raw body, which kubectl get --raw only copies. Twice: the server
# flushing after every event (one chunk each), and flushing only when
# drained, as kube-apiserver does with a backlog (2 KiB chunks).
EVENTS=100000
kubectl_bin=$(command -v kubectl || true)
[ -x "${XDG_CACHE_HOME:-$HOME/.cache}/kwatch/run/bin/kubectl" ] && kubectl_bin="${XDG_CACHE_HOME:-$HOME/.cache}/kwatch/run/bin/kubectl"
RAW='/api/v1/namespaces/kube-system/configmaps?watch=1'
URL=http://127.0.0.1:18080
rpid=
trap '[ -n "$rpid" ] && kill $rpid 2>/dev/null || true' EXIT
# live NAME FLUSH CMD...: one run of CMD against a fresh replay flushing
# as FLUSH says; appends "NAME FLUSH seconds maxrss_kb" to live.tsv.
live() {
  local name=$1 flush=$2; shift 2
  "$OUT/replay" -addr 127.0.0.1:18080 -events $EVENTS -flush "$flush" & rpid=$!
  for _ in $(seq 50); do curl -fs "$URL/api" >/dev/null 2>&1 && break; sleep 0.1; done
  read -r s rss < <(measure "$@")
  kill $rpid 2>/dev/null || true; wait $rpid 2>/dev/null || true; rpid=
  printf '%s\t%s\t%s\t%s\n' "$name" "$flush" "$s" "$rss" >>"$OUT/live.tsv"
}
: >"$OUT/live.tsv"
for run in $(seq "$RUNS"); do
  for flush in event drained; do
    echo "live, flush $flush, run $run" >&2
    live kwatch-watch $flush "$OUT/kwatch" stream configmaps -n kube-system --proxy "$URL" -o json
    live kwatch-raw $flush "$OUT/kwatch" stream --raw "$RAW" --proxy "$URL" -o json
    if [ -n "$kubectl_bin" ]; then
      live kubectl-watch $flush "$kubectl_bin" --server "$URL" get configmaps -n kube-system -w -o json
      live kubectl-raw $flush "$kubectl_bin" --server "$URL" get --raw "$RAW"
    fi
  done
done

# RESULTS.md: the tables, then the analysis written by hand under "## Against
# the targets", which a new run keeps.
analysis=$(sed -n '/^## Against the targets/,$p' bench/RESULTS.md 2>/dev/null || true)
{
  echo "# kwatch benchmark results"
  echo
  echo "Written by \`make bench\` (bench/run.sh) on $(date -u +%Y-%m-%d), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"
  echo "$(go version | cut -d' ' -f3), $(tshark --version 2>/dev/null | head -1 || echo 'no tshark'). Medians of $RUNS runs, alternated."
  echo
  echo "Captures: \`bench/gen\` (watch connections through kubectl proxy, Ethernet, 1448-byte MSS;"
  echo "small events one per chunk, every 10th chunk carrying 3 events, every 97th event 200 KB in 32 KiB chunks, 1 segment in 200"
  echo "out of order; each watch ends with the last-chunk, as when its timeoutSeconds expires)."
  echo
  echo "Commands: \`kwatch pcap -o json FILE > /dev/null\`; \`bench/floor FILE\` (pcapgo reads every packet, nothing else);"
  echo "\`tshark -r FILE -o tcp.reassemble_out_of_order:TRUE -d tcp.port==8001,http -Y http.response -T fields -e http.chunk_size\`"
  echo "(TShark is timed only when it lists as many chunks as kwatch). Peak RSS from \`/usr/bin/time\`."
  echo
  table() {
    echo "| capture | events | kwatch s | kwatch MB/s | kwatch events/s | kwatch peak RSS | floor s | TShark s | TShark peak RSS | kwatch/TShark speed | kwatch/floor speed |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    while IFS=$'\t' read -r mb bytes events k kr fl t tr; do
      awk -v mb="$mb" -v bytes="$bytes" -v ev="$events" -v k="$k" -v kr="$kr" -v fl="$fl" -v t="$t" -v tr="$tr" 'BEGIN {
        mbs = bytes / 1048576 / (k > 0 ? k : 0.001)
        eps = ev / (k > 0 ? k : 0.001)
        ts = (t == "-") ? "-" : sprintf("%.0fx", t / (k > 0 ? k : 0.001))
        trs = (tr == "-") ? "-" : sprintf("%.0f MiB", tr / 1024)
        printf "| %d MB | %d | %.3f | %.0f | %.0f | %.1f MiB | %.4f | %s | %s | %s | 1/%.0f |\n", mb, ev, k, mbs, eps, kr / 1024, fl, t, trs, ts, k / (fl > 0 ? fl : 0.001)
      }'
    done <"$1"
  }
  echo "16 watch connections (\`bench/gen -size N\`):"
  echo
  table "$OUT/many.tsv"
  echo
  echo "One watch connection (\`bench/gen -conns 1 -size N\`): the whole capture is one chunked body, which"
  echo "TShark reassembles before it lists any chunk."
  echo
  table "$OUT/one.tsv"
  echo
  echo "Live: a local server (\`bench/replay\`) answers discovery and the LIST, then streams $EVENTS ConfigMap"
  echo "MODIFIED events of about 1 KB. \`-flush event\`: it flushes after every event (one chunk each, as"
  echo "kube-apiserver does when each event is written before the next is queued); \`-flush drained\`: it flushes"
  echo "only when no event is left to write, as kube-apiserver does with a backlog (net/http then sends 2 KiB chunks"
  echo "that split and join events). Each command runs against a fresh replay; medians of $RUNS runs."
  echo "kubectl is $("${kubectl_bin:-false}" version --client 2>/dev/null | head -1 || echo 'not found')."
  echo
  echo "| command | flush | s | events/s | peak RSS |"
  echo "|---|---|---|---|---|"
  for name in kwatch-watch kubectl-watch kwatch-raw kubectl-raw; do
    case $name in
      kwatch-watch) cmdline="\`kwatch stream configmaps -n kube-system --proxy URL -o json\`" ;;
      kubectl-watch) cmdline="\`kubectl --server URL get configmaps -n kube-system -w -o json\`" ;;
      kwatch-raw) cmdline="\`kwatch stream --raw PATH --proxy URL -o json\`" ;;
      kubectl-raw) cmdline="\`kubectl --server URL get --raw PATH\` (copies the body, decodes nothing)" ;;
    esac
    for flush in event drained; do
      s=$(awk -v n="$name" -v f="$flush" '$1 == n && $2 == f {print $3}' "$OUT/live.tsv" | median)
      rss=$(awk -v n="$name" -v f="$flush" '$1 == n && $2 == f {print $4}' "$OUT/live.tsv" | sort -n | tail -1)
      [ -z "$s" ] && continue
      awk -v c="$cmdline" -v f="$flush" -v s="$s" -v rss="$rss" -v ev="$EVENTS" 'BEGIN {printf "| %s | %s | %.2f | %.0f | %.1f MiB |\n", c, f, s, ev / s, rss / 1024}'
    done
  done
  echo
  for flush in event drained; do
    kw=$(awk -v f="$flush" '$1 == "kwatch-watch" && $2 == f {print $3}' "$OUT/live.tsv" | median)
    kc=$(awk -v f="$flush" '$1 == "kubectl-watch" && $2 == f {print $3}' "$OUT/live.tsv" | median)
    if [ -n "$kw" ] && [ -n "$kc" ]; then
      awk -v kw="$kw" -v kc="$kc" -v f="$flush" 'BEGIN {printf "kwatch stream / kubectl get -w, events/s, flush %s: **%.1fx**  \n", f, kc / kw}'
    fi
  done
  if [ -n "$analysis" ]; then
    echo
    echo "$analysis"
  fi
} >bench/RESULTS.md.new
mv bench/RESULTS.md.new bench/RESULTS.md
echo "wrote bench/RESULTS.md" >&2
cat bench/RESULTS.md
