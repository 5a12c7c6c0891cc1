"""A converge killed (SIGKILL, its whole process group) the moment a host shows a given state (a file
it writes holds a text, a table it loads lacks a rule): the state a run leaves when it dies between
writing a configuration and loading it, or between loading and confirming it."""

import os
import signal
import subprocess
import tempfile
import time


def container_file(container, path):
    """A function that reads `path` inside the running container (through /proc: no exec per poll)."""
    pid = subprocess.check_output(["podman", "inspect", "-f", "{{.State.Pid}}", container], text=True).strip()
    full = "/proc/%s/root%s" % (pid, path)

    def read():
        try:
            with open(full, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""
    return read


def converge_killed_when(argv, reached, env=None, seconds=600):
    """Run `argv` (an ansible-playbook command), polling reached() every 10 ms, and kill it once that
    is true. Returns (killed, output): killed is False when the run ended first or the time ran out."""
    env = dict(env or os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    killed = False
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + seconds
            while proc.poll() is None and time.monotonic() < deadline:
                if reached():
                    os.killpg(proc.pid, signal.SIGKILL)
                    killed = True
                    break
                time.sleep(0.01)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        log.seek(0)
        return killed, log.read()
