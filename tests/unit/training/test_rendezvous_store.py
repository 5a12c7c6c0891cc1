"""The rendezvous store server for real: two torchrun invocations (two "nodes") rendezvous
through it on loopback and run the workload's all-reduce check; SIGTERM ends it cleanly."""

import errno
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

from .conftest import STORE, WORKLOAD, clean_env, finish, free_port, load_module, needs_torch, reap, start

store_mod = load_module(STORE, "trainnet_rendezvous_store_test")


def wait_for_line(proc, words, timeout):
    """Read proc's stderr until a line contains `words` (bounded in time)."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        ready = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))[0]
        if not ready:
            break
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if words in line:
            return seen
    raise AssertionError("no %r within %d s; rc=%s stderr so far: %s" % (words, timeout, proc.poll(), "".join(seen)))


def connect_refused(host, port):
    with socket.socket() as sock:
        sock.settimeout(2)
        try:
            sock.connect((host, port))
        except ConnectionRefusedError:
            return True
    return False


def test_bad_arguments_and_an_address_not_here_fail_before_torch():
    for argv in (["--host", "anchor.example", "--port", "29400"], ["--host", "127.0.0.1", "--port", "70000"]):
        result = subprocess.run([sys.executable, STORE] + argv, capture_output=True, text=True, timeout=30, check=False)
        assert result.returncode == 2 and ("IP address" in result.stderr or "TCP port" in result.stderr), result.stderr
    # 198.18.255.254 (benchmarking range) is assigned to no interface of this machine.
    result = subprocess.run([sys.executable, STORE, "--host", "198.18.255.254", "--port", str(free_port())],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 1
    assert "cannot listen on 198.18.255.254" in result.stderr and os.strerror(errno.EADDRNOTAVAIL) in result.stderr


def test_sd_notify_sends_one_datagram(tmp_path):
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        assert store_mod.sd_notify("READY=1", {"NOTIFY_SOCKET": path})
        assert sock.recv(100) == b"READY=1"
    assert not store_mod.sd_notify("READY=1", {})


@needs_torch
def test_two_torchrun_agents_rendezvous_through_the_store_and_finish(tmp_path):
    port = free_port()
    server = start([sys.executable, STORE, "--host", "127.0.0.1", "--port", str(port), "--timeout-sec", "60"], clean_env())
    agents = []
    try:
        wait_for_line(server, "serving the c10d rendezvous store", timeout=60)
        # Bound to the rendezvous address only: another loopback address on the same port is refused.
        assert connect_refused("127.0.0.2", port)
        check = subprocess.run([sys.executable, STORE, "--check", "--host", "127.0.0.1", "--port", str(port), "--timeout-sec", "10"],
                               capture_output=True, text=True, timeout=60, check=False)
        assert check.returncode == 0 and "reachable" in check.stdout, check.stderr
        for node in range(2):
            # is_host=false: no agent may host the store itself, so success means the server served it.
            # PET_LOCAL_ADDR is torchrun's --local-addr and the workload's local address at once.
            argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", "trainnet-test",
                    "--rdzv-conf", "is_host=false,join_timeout=60,read_timeout=60", "--max-restarts", "0",
                    WORKLOAD, "--verify-allreduce", "--verify-elements", "100003", "--log-file", str(tmp_path / ("node%d.jsonl" % node))]
            agents.append(start(argv, clean_env(PET_LOCAL_ADDR="127.0.0.1", TRAINNET_PROCESS_GROUP_TIMEOUT_SEC=60)))
        results = finish(agents, timeout=120)
        ranks = set()
        for node, (rc, _out, err) in enumerate(results):
            assert rc == 0, "node %d: %s" % (node, err[-3000:])
            with open(tmp_path / ("node%d.jsonl" % node)) as handle:
                last = json.loads(handle.read().splitlines()[-1])
            assert last["event"] == "verify_done" and last["ok"] and last["run_id"] == "trainnet-test"
            ranks.add(last["rank"])
        assert ranks == {0, 1}
        server.send_signal(signal.SIGTERM)
        (rc, _out, err), = finish([server], timeout=20)
        assert rc == 0 and "stopped" in err, err
        # The port is free again at once (a systemd restart can bind it).
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
    finally:
        reap(agents + [server])


@needs_torch
def test_check_reports_a_store_that_is_not_there():
    result = subprocess.run([sys.executable, STORE, "--check", "--host", "127.0.0.1", "--port", str(free_port()), "--timeout-sec", "2"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert "is not reachable" in result.stderr


@needs_torch
def test_sigterm_before_ready_still_exits_cleanly():
    # systemd may stop the unit while torch is still being imported.
    server = start([sys.executable, STORE, "--host", "127.0.0.1", "--port", str(free_port())], clean_env())
    try:
        time.sleep(0.5)
        server.send_signal(signal.SIGTERM)
        (rc, _out, err), = finish([server], timeout=60)
        assert rc == 0, err
    finally:
        reap([server])


def test_missing_torch_is_a_clear_error(tmp_path):
    # An interpreter that cannot import torch (a stub package raising ImportError shadows it).
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('no torch here')\n")
    result = subprocess.run([sys.executable, STORE, "--host", "127.0.0.1", "--port", str(free_port())], capture_output=True,
                            text=True, timeout=30, check=False, env=clean_env(PYTHONPATH=str(tmp_path)))
    assert result.returncode == 1
    assert "cannot import torch.distributed" in result.stderr and "Traceback" not in result.stderr


def test_freebind_listens_on_an_address_not_yet_local():
    """A standby store (an anchor that takes the rendezvous address over) binds the address before it
    is local; without --freebind the same bind fails (the test above)."""
    sock = store_mod.bind_listener("198.18.255.254", free_port(), freebind=True)
    try:
        assert sock.getsockname()[0] == "198.18.255.254"
    finally:
        sock.close()
