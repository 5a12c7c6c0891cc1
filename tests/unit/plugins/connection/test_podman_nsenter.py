"""podman_nsenter connection: its nsenter command line, the cached target and when the cache is stale,
and exec/put/fetch end to end with a stand-in nsenter that runs the command locally."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest
from ansible.errors import AnsibleConnectionFailure
from ansible.playbook.play_context import PlayContext
from ansible_collections.longhaul.trainnet.plugins.connection.podman_nsenter import Connection, cached_target
from ansible_collections.longhaul.trainnet.plugins.plugin_utils import nsenter as nsenter_utils
from ansible_collections.longhaul.trainnet.plugins.plugin_utils.nsenter import (
    inspect_argv, is_current, nsenter_argv, parse_target, process_start_time)

ENV = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "container=podman", "HOME=/root"]

# A stand-in podman (inspect only) and nsenter (skips its options, runs what follows "--" here).
FAKE_PODMAN = """#!%s
import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(["podman"] + sys.argv[1:]) + "\\n")
assert sys.argv[1] == "inspect", sys.argv
print("%%d %%s" %% (os.getppid(), json.dumps(%r)))
"""
FAKE_NSENTER = """#!%s
import json, os, subprocess, sys
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(["nsenter"] + sys.argv[1:]) + "\\n")
argv = sys.argv[sys.argv.index("--") + 1:]
sys.exit(subprocess.run(argv).returncode)
"""


def test_the_command_line_enters_every_namespace_with_the_containers_environment_only():
    argv = nsenter_argv("/usr/bin/nsenter", 4242, ENV, None, ["/bin/sh", "-c", "echo hi"])
    assert argv[:3] == ["/usr/bin/nsenter", "--target", "4242"]
    for flag in ("--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wd"):
        assert flag in argv
    tail = argv[argv.index("--") + 1:]
    assert tail == ["/usr/bin/env", "-i"] + ENV + ["/bin/sh", "-c", "echo hi"]
    assert "--setuid" not in argv
    assert nsenter_argv("nsenter", 1, [], "root", ["true"]) == nsenter_argv("nsenter", 1, [], None, ["true"])


def test_a_numeric_user_is_set_and_a_user_name_is_refused():
    argv = nsenter_argv("nsenter", 7, [], "1000", ["id"])
    assert argv[argv.index("--setuid") + 1] == "1000" and argv[argv.index("--setgid") + 1] == "1000"
    with pytest.raises(ValueError, match="numeric UID"):
        nsenter_argv("nsenter", 7, [], "alice", ["id"])


def test_a_user_name_fails_the_connection_naming_it(connection, monkeypatch):
    make = connection[0]
    monkeypatch.setattr(nsenter_utils, "process_start_time", lambda pid: "42")
    conn = make()
    conn._options["remote_user"] = "alice"
    with pytest.raises(AnsibleConnectionFailure, match="podman_nsenter: remote_user must be a numeric UID or root, not 'alice'"):
        conn.exec_command("id")


def test_start_time_is_read_past_a_command_name_with_spaces_and_parentheses():
    assert process_start_time(os.getpid()) is not None
    assert process_start_time(os.getpid()) == process_start_time(os.getpid())
    assert process_start_time(2 ** 22 + 12345) is None   # above pid_max: never a process


def test_podman_inspect_output_becomes_a_target_or_says_why_not():
    assert inspect_argv("podman", "c1") == ["podman", "inspect", "--type", "container", "--format",
                                            "{{json .State.Pid}} {{json .Config.Env}}", "c1"]
    target = parse_target("%d %s\n" % (os.getpid(), json.dumps(ENV)))
    assert target == {"pid": os.getpid(), "start": process_start_time(os.getpid()), "env": ENV}
    assert is_current(target)
    assert parse_target("%d null" % os.getpid())["env"] == []
    with pytest.raises(ValueError, match="not running"):
        parse_target("0 null")
    with pytest.raises(ValueError, match="PID 4206649 but no such process exists"):
        parse_target("4206649 []")                      # above pid_max: never a process
    for garbage in ("", "12", "x []", "12 {not json"):
        with pytest.raises(ValueError, match="unexpected podman inspect output"):
            parse_target(garbage)


def test_a_target_is_current_only_while_its_process_lives():
    assert not is_current({"pid": os.getpid(), "start": "1", "env": []})     # the PID reused
    assert not is_current({"pid": 2 ** 22 + 12345, "start": None, "env": []})
    assert not is_current({"pid": "x", "start": "1"}) and not is_current({}) and not is_current(None)


def test_a_cache_entry_is_used_only_while_its_process_lives(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"pid": os.getpid(), "start": process_start_time(os.getpid()), "env": ENV}))
    assert cached_target(str(path))["pid"] == os.getpid()
    # Another process now holds the PID (another start time): stale.
    path.write_text(json.dumps({"pid": os.getpid(), "start": "1", "env": ENV}))
    assert cached_target(str(path)) is None
    path.write_text("{not json")
    assert cached_target(str(path)) is None
    assert cached_target(str(tmp_path / "missing.json")) is None
    # An entry for a PID with no process (start unknown) is never valid, even with "start": null.
    path.write_text(json.dumps({"pid": 2 ** 22 + 12345, "start": None, "env": ENV}))
    assert cached_target(str(path)) is None


def test_podman_state_naming_a_vanished_process_is_a_connection_failure(connection, monkeypatch):
    make, calls, cache = connection
    # podman's state outlived the container's process (the machine was suspended or rebooted).
    monkeypatch.setattr(nsenter_utils, "process_start_time", lambda pid: None)
    with pytest.raises(AnsibleConnectionFailure, match="no such process exists"):
        make().exec_command("true")
    assert not (cache / "trainnet-lab-cn-gpu1.json").exists()   # nothing cached that would stick
    assert [c[0] for c in calls()] == ["podman"]


@pytest.fixture
def connection(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("podman", FAKE_PODMAN % (sys.executable, ENV)), ("nsenter", FAKE_NSENTER % sys.executable)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    cache = tmp_path / "cache"

    def make():
        conn = Connection(PlayContext(), None)
        conn._options.update({"remote_addr": "trainnet-lab-cn-gpu1", "remote_user": None, "pipelining": True,
                              "podman_executable": "podman", "nsenter_executable": "nsenter",
                              "cache_dir": str(cache)})
        return conn

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return make, calls, cache


def test_podman_is_asked_once_then_every_command_goes_through_nsenter(connection, monkeypatch):
    make, calls, cache = connection
    # The fake podman answers with its parent's PID: the connection's own process, alive and stable.
    monkeypatch.setattr(nsenter_utils, "process_start_time", lambda pid: "42")
    for round_number in range(3):
        conn = make()                       # Ansible makes a connection per task
        assert round_number < 3
        rc, out, err = conn.exec_command("/bin/sh -c 'cat; echo done'", in_data=b"module\n")
        assert (rc, out, err) == (0, b"module\ndone\n", b"")
        conn.close()
    assert [c[0] for c in calls()] == ["podman", "nsenter", "nsenter", "nsenter"]
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(cache / "trainnet-lab-cn-gpu1.json").st_mode) == 0o600


def test_files_go_both_ways_and_the_exit_status_comes_back(connection, tmp_path, monkeypatch):
    make = connection[0]
    monkeypatch.setattr(nsenter_utils, "process_start_time", lambda pid: "42")
    conn = make()
    payload = bytes(range(256)) * 500
    source = tmp_path / "in $(file) 'name'"
    source.write_bytes(payload)
    remote = tmp_path / "remote \"dir\"" / "out"
    remote.parent.mkdir()
    conn.put_file(str(source), str(remote))
    assert remote.read_bytes() == payload
    back = tmp_path / "back"
    conn.fetch_file(str(remote), str(back))
    assert back.read_bytes() == payload
    assert conn.exec_command("/bin/sh -c 'exit 3'")[0] == 3


def test_a_cache_directory_others_can_write_is_refused(connection, monkeypatch):
    make, cache = connection[0], connection[2]
    cache.mkdir(mode=0o777)
    os.chmod(cache, 0o777)
    with pytest.raises(AnsibleConnectionFailure, match="0700"):
        make().exec_command("true")
