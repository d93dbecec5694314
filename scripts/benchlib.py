"""Helpers the benchmark scripts share: free ports, a process's CPU time, waiting for a server."""
import os, socket, sys, time, urllib.request


def free_port(udp_too=False):
    """A free TCP port (and, with udp_too, free for UDP as well: the X-Ray port takes both)."""
    for _ in range(100):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        if udp_too:
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                u.bind(("127.0.0.1", p))
            except OSError:
                s.close()
                continue
            u.close()
        s.close()
        return p
    sys.exit("no free port found")


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def wait_http(url, proc, what, log=None, timeout=90):
    """Waits until url answers 200; exits if proc dies first or the time runs out."""
    see = f"; see {log}" if log else ""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode}{see}")
        try:
            if urllib.request.urlopen(url, timeout=1).status == 200:
                return
        except Exception:
            time.sleep(0.2)
    sys.exit(f"{what} did not start within {timeout}s{see}")


def emit(results, out=None):
    """Prints the results as JSON and writes them to `out` too."""
    import json
    print(json.dumps(results, indent=2))
    if out:
        with open(out, "w") as f:
            json.dump(results, f, indent=2)


# Fresh trace IDs per request: bodies are templates whose trace IDs each request rewrites, so a
# server stores a stream of distinct traces (as real clients send) and not the same few again.

def id_spots(body, trace_ids, form):
    """Where each trace ID lies in a body, for rewriting: a list per trace of (offset, lo, hi, hex):
    bytes lo..hi of the trace ID are at offset (as hex text when hex). form: 'thrift' (the high
    and low 8 bytes as i64s), 'raw' (16 bytes), 'hex' (32 hex digits, as Zipkin's JSON has them),
    'xray' (the 24 hex digits after the epoch)."""
    spots = []
    for tid in trace_ids:
        parts = {"thrift": [(0, 8, False), (8, 16, False)], "raw": [(0, 16, False)], "hex": [(0, 16, True)],
                 "xray": [(4, 16, True)]}[form]
        mine = []
        for lo, hi, hx in parts:
            needle = tid[lo:hi].hex().encode() if hx else tid[lo:hi]
            at = body.find(needle)
            if at < 0:
                raise RuntimeError("trace ID not found in a body template")
            while at >= 0:
                mine.append((at, lo, hi, hx))
                at = body.find(needle, at + 1)
        spots.append(mine)
    return spots


def template(body, trace_ids, form):
    """A body whose trace IDs `fresh` rewrites; trace_ids are 16 bytes each."""
    return (body, id_spots(body, trace_ids, form), trace_ids)


def fresh(tmpl, rng):
    """The body with new trace IDs; returns it and its first trace's new ID (16 bytes)."""
    body, spots, old = tmpl
    b = bytearray(body)
    first = None
    for mine, tid in zip(spots, old):
        new = bytearray(tid)
        new[:] = rng.getrandbits(128).to_bytes(16, "big")
        for at, lo, hi, hx in mine:
            v = new[lo:hi].hex().encode() if hx else bytes(new[lo:hi])
            b[at:at + len(v)] = v
        if first is None:
            # Bytes outside every spot (an X-Ray trace ID's epoch) keep the template's value.
            covered = set(i for _, lo, hi, _ in mine for i in range(lo, hi))
            first = bytes(new[i] if i in covered else tid[i] for i in range(16))
    return bytes(b), first
