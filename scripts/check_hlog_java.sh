#!/usr/bin/env bash
# histograms.hlog read by the standard Java HdrHistogram tools, with the steps docs/reference/hlog.md gives:
# a short quickstart run, then HistogramLogProcessor with -tag rtt_us and
# -outputValueUnitRatio 1000 (our values are microseconds); its total count, mean and max
# must match summary.json. Needs a JRE and the HdrHistogram jar (Debian:
# default-jre-headless libhdrhistogram-java, or HDR_JAR=path/to/HdrHistogram.jar).
# Bounded: one 3 s run of 10 bots on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
jar=${HDR_JAR:-/usr/share/java/hdrhistogram.jar}
command -v java >/dev/null || { echo "java not found (apt-get install default-jre-headless)" >&2; exit 2; }
[ -f "$jar" ] || { echo "$jar not found (apt-get install libhdrhistogram-java, or set HDR_JAR)" >&2; exit 2; }
cargo build -q --bin tickswarm
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
./target/debug/tickswarm run scenarios/quickstart.yaml --bots 10 --duration 3s --quiet --out "$work/run"
grep -qx '#\[Histogram log format version 1.3\]' "$work/run/histograms.hlog"
java -cp "$jar" org.HdrHistogram.HistogramLogProcessor -i "$work/run/histograms.hlog" -listtags \
    | grep -qx 'rtt_us'
java -cp "$jar" org.HdrHistogram.HistogramLogProcessor \
    -i "$work/run/histograms.hlog" -tag rtt_us -outputValueUnitRatio 1000 -o "$work/rtt"
python3 - "$work/run/summary.json" "$work/rtt.hgrm" <<'PY'
import json, re, sys
s = json.load(open(sys.argv[1]))["rtt_us"]
text = open(sys.argv[2]).read()
mean = float(re.search(r"Mean\s+=\s+([\d.]+)", text).group(1))
mx = float(re.search(r"Max\s+=\s+([\d.]+)", text).group(1))
count = int(re.search(r"Total count\s+=\s+(\d+)", text).group(1))
print(f"summary.json rtt_us: count {s['count']} mean {s['mean']} us max {s['max']} us")
print(f"HistogramLogProcessor: count {count} mean {mean} ms max {mx} ms")
assert count == s["count"], "counts differ"
assert abs(mean * 1000 - s["mean"]) <= 1.0, "means differ"
assert abs(mx * 1000 - s["max"]) <= 1.0, "max differs"
print("ok: the Java HistogramLogProcessor reads histograms.hlog with the documented flags")
PY
