"""Every process command line a container runs while a block of a molecule test runs: secrets must
never reach process arguments, and a single snapshot of /proc misses the moment a helper runs."""

import contextlib
import subprocess

# Sampled every 10 ms until a stop file appears, and at most for the given seconds.
SAMPLER = """
import os, sys, time
out, stop, end = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])
seen = set()
while time.monotonic() < end and not os.path.exists(stop):
    for pid in os.listdir('/proc'):
        if pid.isdigit():
            try:
                with open('/proc/%s/cmdline' % pid, 'rb') as f:
                    seen.add(f.read().replace(b'\\0', b' '))
            except OSError:
                pass
    time.sleep(0.01)
with open(out, 'wb') as f:
    f.write(b'\\n'.join(sorted(seen)))
"""

OUT, STOP = "/tmp/cmdlines.txt", "/tmp/cmdlines.stop"


def _exec(container, *argv, **kwargs):
    return subprocess.run(["podman", "exec", container] + list(argv), capture_output=True, text=True,
                          timeout=120, check=True, **kwargs)


@contextlib.contextmanager
def sampled(container, seconds=900):
    """with sampled(name) as seen: ...; afterwards seen["text"] holds every distinct command line
    (one per line) the container ran while the block did."""
    _exec(container, "rm", "-f", OUT, STOP)
    sampler = subprocess.Popen(["podman", "exec", container, "python3", "-c", SAMPLER, OUT, STOP, str(seconds)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = {"text": ""}
    try:
        yield seen
    finally:
        _exec(container, "touch", STOP)
        sampler.communicate(timeout=60)
        seen["text"] = _exec(container, "cat", OUT).stdout
