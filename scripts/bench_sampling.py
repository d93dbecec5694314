#!/usr/bin/env python3
"""What adaptive sampling's counting costs the ingest path (issue 52): the same `weft loadgen`
load (bench_ingest.py's, 10 spans a trace, so a root in ten spans) into weft with adaptive
sampling (the default: every admitted request's roots counted) and with a strategies file
(nothing counted), in turn, --rounds times. Each run's figure is spans a second per core of
server CPU, from the load's start until every block is written; each pair gives the ratio
counting / not counting, and the median of the pairs is reported, which the shared host's
speed drift cancels out of.

  python3 scripts/bench_sampling.py --weft target/release/weft [--spans 2000000] [--rounds 3]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ingest import Server, cpu_seconds, loadgen_cmd  # noqa: E402


def run(args, extra):
    s = Server(args.weft, extra)
    try:
        ids = os.path.join(s.dir, "ids.txt")
        cpu0 = cpu_seconds(s.proc.pid)
        out = subprocess.run(loadgen_cmd(args, s.grpc, ids), check=True, capture_output=True, text=True).stdout
        load = json.loads(out.strip().splitlines()[-1])
        ok = s.wait_blocks_written()
        cpu = cpu_seconds(s.proc.pid) - cpu0
        return {"spans": load["spans"], "errors": load["errors"], "server_cpu_s": round(cpu, 2),
                "spans_per_s_per_core": round(load["spans"] / cpu), "blocks_all_written": ok}
    finally:
        s.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weft", required=True)
    ap.add_argument("--spans", type=int, default=2_000_000)
    ap.add_argument("--max-seconds", type=float, default=120)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="bench-out/sampling.json")
    args = ap.parse_args()
    strategies = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    strategies.write("{}")
    strategies.close()
    rounds = []
    for i in range(args.rounds):
        on = run(args, ())
        off = run(args, ("--sampling-strategies-file", strategies.name))
        r = {"round": i + 1, "counting": on, "not_counting": off,
             "ratio": round(on["spans_per_s_per_core"] / off["spans_per_s_per_core"], 3)}
        rounds.append(r)
        print(f"round {i + 1}: counting {on['spans_per_s_per_core']:,} spans/s/core, not counting "
              f"{off['spans_per_s_per_core']:,}, ratio {r['ratio']}", file=sys.stderr, flush=True)
    os.unlink(strategies.name)
    ratios = [r["ratio"] for r in rounds]
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count(), "spans": args.spans,
              "rounds": rounds, "ratios": ratios, "ratio_median": statistics.median(ratios)}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"counting / not counting, spans/s per core (median of {len(ratios)}): {result['ratio_median']}  {ratios}")


if __name__ == "__main__":
    main()
