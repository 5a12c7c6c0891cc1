"""podman_exec connection: the podman command lines it runs, and files and modules through stdin.

A stand-in `podman` on PATH records its arguments and runs the command after the container name
locally, so exec, pipelining (stdin), put_file and fetch_file are exercised end to end without a
container; paths with spaces and quotes check that no path is ever parsed by a shell.
"""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest
from ansible.playbook.play_context import PlayContext
from ansible_collections.longhaul.trainnet.plugins.connection.podman_exec import Connection

FAKE_PODMAN = """#!%s
import json, os, subprocess, sys
args = sys.argv[1:]
with open(os.environ["FAKE_PODMAN_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
assert args[0] == "exec", args
args = args[1:]
if args and args[0] == "-i":
    args = args[1:]
if args and args[0] == "--user":
    args = args[2:]
container, argv = args[0], args[1:]
sys.exit(subprocess.run(argv).returncode)
"""


@pytest.fixture
def connection(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "podman"
    fake.parent.mkdir()
    fake.write_text(FAKE_PODMAN % sys.executable)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "podman.log"
    monkeypatch.setenv("FAKE_PODMAN_LOG", str(log))
    monkeypatch.setenv("PATH", "%s:%s" % (fake.parent, os.environ["PATH"]))
    conn = Connection(PlayContext(), None)
    # The options as Ansible resolves them from the inventory (ansible_host names the container);
    # set directly, so the test does not depend on the plugin loader's global collection state.
    conn._options.update({"remote_addr": "trainnet-lab-cn-gpu1", "remote_user": None,
                          "podman_executable": "podman", "pipelining": True})

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return conn, calls


def test_a_module_runs_from_stdin_in_one_exec(connection):
    conn, calls = connection
    assert conn.is_pipelining_enabled()
    rc, out, err = conn.exec_command("/bin/sh -c 'cat; echo done'", in_data=b"module source\n")
    assert (rc, out, err) == (0, b"module source\ndone\n", b"")
    assert calls() == [["exec", "-i", "trainnet-lab-cn-gpu1", "/bin/sh", "-c", "cat; echo done"]]


def test_a_command_without_input_gets_no_stdin_and_its_exit_status(connection):
    conn, calls = connection
    rc, out, err = conn.exec_command("/bin/sh -c 'exit 3'")
    assert (rc, out, err) == (3, b"", b"")
    assert calls() == [["exec", "trainnet-lab-cn-gpu1", "/bin/sh", "-c", "exit 3"]]


def test_files_go_both_ways_byte_for_byte_whatever_their_names(connection, tmp_path):
    conn, calls = connection
    payload = bytes(range(256)) * 1000
    source = tmp_path / "in file's $(name)"
    source.write_bytes(payload)
    remote = tmp_path / "remote dir" / "a \"quoted\" 'name'"
    remote.parent.mkdir()
    conn.put_file(str(source), str(remote))
    assert remote.read_bytes() == payload
    back = tmp_path / "back"
    conn.fetch_file(str(remote), str(back))
    assert back.read_bytes() == payload
    put, fetch = calls()
    assert put[:3] == ["exec", "-i", "trainnet-lab-cn-gpu1"] and put[-1] == str(remote)
    assert fetch == ["exec", "trainnet-lab-cn-gpu1", "cat", "--", str(remote)]


def test_a_failed_copy_names_the_path(connection, tmp_path):
    conn = connection[0]
    source = tmp_path / "f"
    source.write_text("x")
    with pytest.raises(Exception, match="no-such-dir"):
        conn.put_file(str(source), str(tmp_path / "no-such-dir" / "f"))
    with pytest.raises(Exception, match="missing"):
        conn.fetch_file(str(tmp_path / "missing"), str(tmp_path / "out"))


def test_async_tasks_are_not_pipelined(connection):
    """Ansible runs its async wrapper only for connections that do not pipeline async tasks."""
    conn = connection[0]
    assert conn.is_pipelining_enabled(wrap_async=False)
    assert not conn.is_pipelining_enabled(wrap_async=True)
    assert not conn.always_pipeline_modules
