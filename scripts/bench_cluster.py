#!/usr/bin/env python3
"""Cluster mode on Kafka (ADR 0008): cost per span of each role beside the single binary, on the
same load, in one run.

Each of --rounds rounds:
1. The single binary (`weft`, compaction off) takes `weft loadgen` for --seconds; its CPU is read
   once every span is in a block.
2. For each --compression value: a fresh distributor and block builder (blocks in a real
   S3-compatible store, s3proxy) take the identical load through a real Kafka broker
   (scripts/kafka-server.sh, a topic of --partitions partitions per run). The distributor's CPU
   is read after the load; the block builder's once every span is in a block.

With --tls, each compression also runs over the broker's SASL_SSL listener (TLS with the
script's test CA, SASL SCRAM-SHA-512), reported as "<compression>+tls": the cost of TLS on the
same load, in the same round.

With --live-stores, each cluster run also has a querier tailing the whole topic (the old
read path) and two live stores (`--target live-store`) holding half of the partitions each,
all started before the load: reported as CPU microseconds per span received, the querier's
and the two live stores' together (issue 47: the live stores' total should match one
querier's, where every tailing querier paid it before).

Reported: spans per CPU-second of the single binary, of the distributor, of the block builder
and of the cluster's weft processes together (and its ratio to the single binary); bytes
received and bytes written to Kafka per span; S3 requests per million spans; the broker's own
CPU (not a weft process) for context; per round, and the median of the rounds (ratios are
taken within a round). Targets (issue 17): distributor >= 1,500,000 spans per
CPU-second, cluster >= 80% of the single binary, Kafka bytes per span <= bytes received.
"""
import argparse, json, os, shutil, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ingest import metric  # noqa: E402
from benchlib import cpu_seconds, emit, free_port, wait_http  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUIET_PORTS = {k: "0" for k in ("WEFT_ZIPKIN_PORT", "WEFT_JAEGER_HTTP_PORT", "WEFT_JAEGER_GRPC_PORT",
                                "WEFT_JAEGER_QUERY_PORT", "WEFT_XRAY_PORT", "WEFT_JAEGER_COMPACT_PORT",
                                "WEFT_JAEGER_BINARY_PORT", "WEFT_SAMPLING_HTTP_PORT", "WEFT_SAMPLING_GRPC_PORT")}


class Proc:
    def __init__(self, weft, name, root, *args):
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir)
        self.http, self.grpc = free_port(), free_port()
        self.log = os.path.join(self.dir, "weft.log")
        self.proc = subprocess.Popen(
            [weft, "--data-dir", os.path.join(self.dir, "data"), "--http-port", str(self.http),
             "--otlp-grpc-port", str(self.grpc), "--otlp-http-port", str(free_port()), *args],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT, env={**os.environ, **QUIET_PORTS})
        wait_http(f"http://127.0.0.1:{self.http}/ready", self.proc, name, self.log)

    def cpu(self):
        return cpu_seconds(self.proc.pid)

    def m(self, name):
        return metric(self.http, name) or 0.0

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def loadgen(args, port):
    out = subprocess.run([args.weft, "loadgen", "--endpoint", f"127.0.0.1:{port}", "--duration", str(args.seconds),
                          "--max-spans", "100000000", "--concurrency", "32", "--connections", "4"],
                         check=True, capture_output=True, text=True).stdout
    return int(json.loads(out.strip().splitlines()[-1])["spans"])


def wait_until(what, ok, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if ok():
            return
        time.sleep(0.5)
    sys.exit(f"timed out waiting for {what}")


def script(name, *args, env=None):
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", name), *map(str, args)], capture_output=True,
                       text=True, env={**os.environ, **(env or {})})
    if r.returncode != 0:
        sys.exit(f"scripts/{name} {' '.join(map(str, args))} failed:\n{r.stderr[-2000:]}")
    return r.stdout.strip()


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def run_single(args, root, tag):
    one = Proc(args.weft, f"single-{tag}", root, "--compaction-interval", "0")
    try:
        c0 = one.cpu()
        spans = loadgen(args, one.grpc)
        wait_until("the single binary's blocks", lambda: one.m("weft_block_spans_written_total") >= spans)
        return {"spans": spans, "spans_per_cpu_second": round(spans / (one.cpu() - c0))}
    finally:
        one.stop()


def run_cluster(args, root, tag, codec, brokers, sport, broker_pid, security=()):
    """A distributor and a block builder on a topic of their own, with `codec` (and `security`:
    the --kafka-tls and --kafka-sasl flags)."""
    kafka = ["--kafka-brokers", brokers, "--kafka-topic", f"bench-{tag}", "--kafka-partitions", str(args.partitions),
             "--kafka-compression", codec, "--kafka-group", f"bench-{tag}", *security]
    s3 = ["--storage", "s3", "--s3-endpoint", f"http://127.0.0.1:{sport}", "--s3-bucket", "weft",
          "--s3-prefix", tag, "--s3-access-key-id", "weft", "--s3-secret-access-key", "weft-secret"]
    procs = []
    try:
        dist = Proc(args.weft, f"distributor-{tag}", root, "--target", "distributor", *kafka)
        procs.append(dist)
        builder = Proc(args.weft, f"builder-{tag}", root, "--target", "block-builder", *kafka, *s3)
        procs.append(builder)
        tails = []
        if args.live_stores:
            half = args.partitions // 2
            tails.append(Proc(args.weft, f"querier-{tag}", root, "--target", "querier", *kafka, *s3))
            for i, parts in enumerate([range(half), range(half, args.partitions)]):
                tails.append(Proc(args.weft, f"live-{i}-{tag}", root, "--target", "live-store", *kafka, *s3,
                                  "--live-store-partitions", ",".join(map(str, parts))))
            procs.extend(tails)
        t0 = [t.cpu() for t in tails]
        # Memory per recent span held, sampled on the live stores while the load runs.
        per_span, sampling = [], [bool(tails)]

        def sample():
            while sampling[0]:
                for t in tails[1:]:
                    held = t.m("weft_live_store_spans")
                    if held > 100_000:
                        per_span.append((t.m("weft_live_store_bytes") - t.m("weft_live_store_retired_bytes")) / held)
                time.sleep(0.5)
        sampler = threading.Thread(target=sample)
        sampler.start()
        d0, b0, k0 = dist.cpu(), builder.cpu(), cpu_seconds(broker_pid)
        try:
            spans = loadgen(args, dist.grpc)
        finally:
            sampling[0] = False
            sampler.join()
        d_cpu = dist.cpu() - d0
        wait_until("the block builder's blocks", lambda: builder.m("weft_block_spans_written_total") >= spans)
        b_cpu = builder.cpu() - b0
        k_cpu = cpu_seconds(broker_pid) - k0
        live = {}
        if tails:
            # The tails read as fast as the builder; give them a moment past it.
            time.sleep(3)
            t_cpu = [t.cpu() - c for t, c in zip(tails, t0)]
            live = {
                "querier_tail_cpu_us_per_span": round(t_cpu[0] / spans * 1e6, 3),
                "live_stores_cpu_us_per_span": round((t_cpu[1] + t_cpu[2]) / spans * 1e6, 3),
                "live_store_each_cpu_us_per_span": [round(c / spans * 1e6, 3) for c in t_cpu[1:]],
                "live_store_memory_bytes_per_span": round(median(per_span), 1) if per_span else None,
            }
        return {**live,
            "spans": spans,
            "distributor_spans_per_cpu_second": round(spans / d_cpu),
            "block_builder_spans_per_cpu_second": round(spans / b_cpu),
            "weft_processes_spans_per_cpu_second": round(spans / (d_cpu + b_cpu)),
            "kafka_broker_cpu_seconds": round(k_cpu, 2),
            "bytes_received_per_span": round(dist.m("weft_bytes_received_total") / spans, 1),
            "kafka_bytes_per_span": round(dist.m("weft_kafka_bytes_total") / spans, 1),
            "kafka_records_per_request": round(dist.m("weft_kafka_records_total")
                                               / max(1.0, dist.m("weft_kafka_produce_requests_total")), 2),
            "s3_requests_per_million_spans": round(builder.m("weft_storage_requests_total") / spans * 1e6, 1),
            "blocks": builder.m("weft_blocks_written_total"),
        }
    finally:
        for p in procs:
            p.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weft", default=os.path.join(ROOT, "target", "release", "weft"))
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--compression", default="none,lz4,zstd",
                    help="--kafka-compression values of the distributor to run, comma-separated")
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds of the single binary followed by a cluster per compression")
    ap.add_argument("--live-stores", action="store_true",
                    help="also run a querier tailing the topic and two live stores, and report their CPU per span")
    ap.add_argument("--tls", action="store_true",
                    help="also run each compression over TLS with SASL SCRAM-SHA-512, as <compression>+tls")
    ap.add_argument("--out")
    args = ap.parse_args()
    codecs = args.compression.split(",")
    root = tempfile.mkdtemp(prefix="weft-bench-cluster-")
    owner = {"KAFKA_SERVER_OWNER_PID": str(os.getpid()), "S3_SERVER_OWNER_PID": str(os.getpid())}
    kport, sport = free_port(), free_port()
    started = script("kafka-server.sh", "start", os.path.join(root, "kafka"), kport,
                     env={**owner, **({"KAFKA_SERVER_SECURE": "1"} if args.tls else {})})
    kv = dict(line.split("=", 1) for line in started.split())
    brokers = kv["WEFT_KAFKA_BROKERS"]
    variants = [(codec, brokers, []) for codec in codecs]
    if args.tls:
        tls = kv["WEFT_KAFKA_TLS_DIR"]
        with open(os.path.join(tls, "password"), "w") as f:
            f.write("weft-secret\n")
        secure = ["--kafka-tls", "--kafka-tls-ca", os.path.join(tls, "ca.pem"), "--kafka-sasl-mechanism",
                  "scram-sha-512", "--kafka-sasl-username", "weft", "--kafka-sasl-password-file",
                  os.path.join(tls, "password")]
        variants = [v for codec in codecs for v in [(codec, brokers, []),
                                                    (codec + "+tls", kv["WEFT_KAFKA_SASL_SSL_BROKERS"], secure)]]
    script("s3-server.sh", "start", os.path.join(root, "s3"), sport, env=owner)
    broker_pid = int(open(os.path.join(root, "kafka", "kafka.pid")).read())
    results = {"seconds": args.seconds, "partitions": args.partitions, "rounds": []}
    try:
        for r in range(args.rounds):
            rnd = {"single": run_single(args, root, f"r{r}")}
            single = rnd["single"]["spans_per_cpu_second"]
            for name, addr, security in variants:
                codec = name.removesuffix("+tls")
                tag = f"r{r}-{name.replace('+', '-')}"
                c = run_cluster(args, root, tag, codec, addr, sport, broker_pid, security)
                c["ratio_to_single"] = round(c["weft_processes_spans_per_cpu_second"] / single, 3)
                rnd[name] = c
            results["rounds"].append(rnd)
            print(json.dumps(rnd), file=sys.stderr, flush=True)
        rounds = results["rounds"]
        summary = {"single_spans_per_cpu_second": round(median([x["single"]["spans_per_cpu_second"] for x in rounds]))}
        for name, _, _ in variants:
            summary[name] = {k: median([x[name][k] for x in rounds])
                             for k in rounds[0][name] if isinstance(rounds[0][name][k], (int, float))}
        results["median"] = summary
    finally:
        script("kafka-server.sh", "stop", os.path.join(root, "kafka"))
        script("s3-server.sh", "stop", os.path.join(root, "s3"))
        shutil.rmtree(root, ignore_errors=True)
    emit(results, args.out)


if __name__ == "__main__":
    main()
