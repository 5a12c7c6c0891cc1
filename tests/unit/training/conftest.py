"""Shared helpers for the training workload tests: real processes on loopback, always reaped."""

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FILES = os.path.join(ROOT, "training")
WORKLOAD = os.path.join(FILES, "trainnet_workload.py")
STORE = os.path.join(FILES, "trainnet_rendezvous_store.py")
try:
    HAVE_TORCH = importlib.util.find_spec("torch") is not None
except (ImportError, ValueError):
    HAVE_TORCH = False
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not importable (pip install torch==2.13.0)")
# Settings a developer's shell may carry that would change what the workload does.
FOREIGN_PREFIXES = ("GLOO_", "NCCL_", "TRAINNET_", "PET_", "TORCHELASTIC_", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_")


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN_PREFIXES)}
    # Two cores, several ranks: one intra-op thread each keeps the runs short and steady.
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(argv, env, **kwargs):
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)


def reap(procs):
    """Kill whatever is still running (its whole session: torchrun's workers too)."""
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            proc.communicate(timeout=10)
        except (subprocess.TimeoutExpired, ValueError):
            pass


def finish(procs, timeout):
    """Wait for every process within one deadline; returns [(rc, stdout, stderr)]."""
    deadline = time.monotonic() + timeout
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append((proc.returncode, out, err))
    finally:
        reap(procs)
    return results


def run_ranks(args, world, timeout=90, per_rank_env=None, **env_extra):
    """The workload as `world` ranks, each a node of its own (LOCAL_RANK 0), wired the way
    torchrun wires its workers (env://), without torchrun's agent (saves one torch import)."""
    port = free_port()
    procs = []
    try:
        for rank in range(world):
            env = clean_env(RANK=rank, WORLD_SIZE=world, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, MASTER_ADDR="127.0.0.1",
                            MASTER_PORT=port, GLOO_SOCKET_IFNAME="lo", TRAINNET_PROCESS_GROUP_TIMEOUT_SEC=60, **env_extra)
            env.update((per_rank_env or {}).get(rank, {}))
            procs.append(start([sys.executable, WORKLOAD] + list(args), env))
    except BaseException:
        reap(procs)
        raise
    return finish(procs, timeout)
