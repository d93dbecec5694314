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
