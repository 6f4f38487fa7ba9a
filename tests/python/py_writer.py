"""A Python writer in its own process, for the tests. Usage:
    py_writer.py NAME COUNT DTYPE TRACKING STALENESS_BOUND_MS
Allocates a 1-D area, prints "ready ADDRESS", then per stdin line:
    set V     fills the area with V, publishes, prints "version N"
    spin N    for k in 1..N: fills with k and publishes (version k), prints "done N"
Exits at end of input. The daemon is the one $DSM_SOCKET names.
"""
import sys
import time

import libdsm


def publish(w):
    # Every spare buffer may be held by a reader for a moment: retry, for at
    # most 10 s (a reader that never moves on holds its buffer for good). No
    # service() here, so versions are exactly the publishes of this loop.
    deadline = time.monotonic() + 10
    while not w.publish():
        if time.monotonic() > deadline:
            sys.exit("py_writer: publish refused for 10 s: readers hold every spare buffer")
        time.sleep(0.0001)


def main():
    name, count, dtype, tracking, bound = sys.argv[1:6]
    s = libdsm.Session()
    w = s.alloc(name, int(count), dtype, tracking, staleness_bound_ms=int(bound))
    print("ready", w.address, flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "set":
            w.array[:] = float(cmd[1])
            if tracking == "log":
                w.log()
            publish(w)
            print("version", w.version, flush=True)
        elif cmd[0] == "spin":
            for k in range(1, int(cmd[1]) + 1):
                w.array[:] = k
                publish(w)
            print("done", w.version, flush=True)


if __name__ == "__main__":
    main()
