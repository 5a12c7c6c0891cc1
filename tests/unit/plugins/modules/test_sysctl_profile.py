# -*- coding: utf-8 -*-
# Copyright: (c) 2025, longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests of the sysctl_profile module on a fake /proc/sys tree (no root needed)."""

from __future__ import annotations

import errno
import json
import os
import stat

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import sysctl_profile as sf
from ansible_collections.longhaul.trainnet.plugins.modules import sysctl_profile
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.utils import (
    AnsibleExitJson, AnsibleFailJson, capture_warnings, patch_module, patch_module_args, read_fixture,
)


def snapshot(name):
    return json.loads(read_fixture("sysctl_profile", name))


class FakeProc(sf.ProcSys):
    """Fake /proc/sys tree built from a fixture snapshot; see module_utils/test_sysctl_profile.FakeProc."""

    def __init__(self, base, snap, clamp=None, write_errors=None, extra=None):
        super(FakeProc, self).__init__(root=os.path.join(str(base), "proc_sys"),
                                       init_netns=snap["init_netns"],
                                       modules_roots=(os.path.join(str(base), "none"),))
        values = dict(snap["values"])
        values.update(extra or {})
        for key, value in values.items():
            path = self.path(key)
            if not os.path.isdir(os.path.dirname(path)):
                os.makedirs(os.path.dirname(path))
            with open(path, "w") as handle:
                handle.write(value + "\n")
        self.read_only = set(snap["read_only"])
        for key in self.read_only:
            os.chmod(self.path(key), 0o444)
        self.clamp = dict(clamp or {})
        self.write_errors = dict(write_errors or {})
        self.writes = []

    def write(self, key, text):
        self.writes.append((key, text))
        if key in self.read_only:
            raise OSError(errno.EACCES, "Permission denied")
        if key in self.write_errors:
            raise OSError(self.write_errors[key], os.strerror(self.write_errors[key]))
        live = self.read(key).split()
        if live and all(f.isdigit() for f in live) and not all(f.isdigit() for f in text.split()):
            raise OSError(errno.EINVAL, "Invalid argument")  # what the kernel says to "abc"
        if key == sf.CC_KEY and not self.is_init_netns() and \
                text.strip() not in self.read(sf.CC_ALLOWED_KEY).split():
            raise OSError(errno.EPERM, "Operation not permitted")
        super(FakeProc, self).write(key, self.clamp.get(key, text))

    def live(self, key):
        return " ".join(self.read(key).split())


@pytest.fixture
def module_calls(monkeypatch):
    patch_module(monkeypatch)
    return capture_warnings(monkeypatch)


def run_module(args, proc, check=False, diff=False, expect=AnsibleExitJson, config=None):
    args = dict(args)
    args["_ansible_check_mode"] = check
    args["_ansible_diff"] = diff
    with patch_module_args(args):
        with pytest.raises(expect) as raised:
            if config is None:
                sysctl_profile.main(proc=proc)
            else:
                sysctl_profile.main(proc=proc, config=config)
    return raised.value.args[0]


SETTINGS = {
    "net.ipv4.tcp_slow_start_after_idle": 0,
    "net.core.rmem_max": 67108864,
    "net.ipv4.tcp_rmem": "4096 131072 67108864",
}
RESULT_KEYS = {"changed", "path", "file_changed", "file_drifted", "keys", "applied", "unchanged",
               "skipped_keys", "failed_keys", "drifted", "init_netns"}


def netns(base, **kwargs):
    return FakeProc(base, snapshot("netns_6.18.json"), **kwargs)


def init_ns(base, **kwargs):
    return FakeProc(base, snapshot("init_netns_6.18.json"), **kwargs)


def test_present_writes_file_and_live_values(tmp_path, module_calls):
    path = str(tmp_path / "90-trainnet.conf")
    proc = netns(tmp_path)
    result = run_module({"path": path, "settings": SETTINGS, "header": "for h1"}, proc)
    assert RESULT_KEYS <= set(result)
    assert result["changed"] and result["file_changed"] and result["file_drifted"]
    assert result["applied"] == ["net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_rmem"]
    assert result["drifted"] == result["applied"]
    assert result["skipped_keys"] == ["net.core.rmem_max"]
    assert result["failed_keys"] == [] and result["unchanged"] == []
    assert result["init_netns"] is False
    assert result["keys"]["net.ipv4.tcp_rmem"] == {
        "status": "applied", "before": "4096 131072 33554432", "after": "4096 131072 67108864",
        "wanted": "4096 131072 67108864", "reason": "live value differs"}
    assert result["keys"]["net.core.rmem_max"]["status"] == "skipped"
    assert len(module_calls) == 1 and "net.core.rmem_max" in module_calls[0]
    assert proc.live("net.ipv4.tcp_rmem") == "4096 131072 67108864"
    assert proc.live("net.ipv4.tcp_slow_start_after_idle") == "0"
    with open(path) as handle:
        content = handle.read()
    assert "Managed by longhaul.trainnet" in content and "# for h1\n" in content
    assert "# skipped here: net.core.rmem_max = 67108864 (" in content
    assert sf.parse_file(content) == {"net.ipv4.tcp_slow_start_after_idle": "0",
                                      "net.ipv4.tcp_rmem": "4096 131072 67108864"}
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o644
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (0, 0)
    assert [n for n in os.listdir(str(tmp_path)) if n.endswith(".tmp")] == []


def test_second_run_is_unchanged(tmp_path, module_calls):
    path = str(tmp_path / "p.conf")
    proc = netns(tmp_path)
    run_module({"path": path, "settings": SETTINGS}, proc)
    result = run_module({"path": path, "settings": SETTINGS}, proc, diff=True)
    assert not result["changed"] and not result["file_changed"] and not result["file_drifted"]
    assert result["applied"] == [] and result["drifted"] == []
    assert result["unchanged"] == ["net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_rmem"]
    file_diff, live_diff = result["diff"]
    assert file_diff["before"] == file_diff["after"]
    assert live_diff["before"] == live_diff["after"] == ""


def test_check_mode_predicts_the_real_run(tmp_path, module_calls):
    settings = dict(SETTINGS, **{"net.ipv4.tcp_congestion_control": "cubic"})
    check_proc = netns(tmp_path / "check")
    real_proc = netns(tmp_path / "real")
    check_path = str(tmp_path / "check.conf")
    real_path = str(tmp_path / "real.conf")
    predicted = run_module({"path": check_path, "settings": settings}, check_proc,
                           check=True, diff=True)
    assert not os.path.exists(check_path)
    assert check_proc.live("net.ipv4.tcp_rmem") == "4096 131072 33554432"
    assert check_proc.writes == []  # check mode writes nothing, not even current values back
    done = run_module({"path": real_path, "settings": settings}, real_proc, diff=True)
    for name in ("changed", "file_changed", "file_drifted", "keys", "applied", "unchanged",
                 "skipped_keys", "failed_keys", "drifted"):
        assert predicted[name] == done[name], name
    assert predicted["skipped_keys"] == ["net.core.rmem_max", "net.ipv4.tcp_congestion_control"]
    assert predicted["diff"][1] == done["diff"][1]
    assert predicted["diff"][0]["after"] == done["diff"][0]["after"]


def test_diff_shows_file_and_live_values(tmp_path, module_calls):
    path = str(tmp_path / "p.conf")
    with open(path, "w") as handle:
        handle.write("net.ipv4.tcp_fastopen = 3\n")
    os.chmod(path, 0o644)
    result = run_module({"path": path, "settings": SETTINGS}, netns(tmp_path), diff=True)
    file_diff, live_diff = result["diff"]
    assert file_diff["before"] == "net.ipv4.tcp_fastopen = 3\n"
    assert "tcp_fastopen" not in file_diff["after"]
    assert file_diff["before_header"] == file_diff["after_header"] == path
    assert live_diff["before"] == ("net.ipv4.tcp_slow_start_after_idle = 1\n"
                                   "net.ipv4.tcp_rmem = 4096 131072 33554432\n")
    assert live_diff["after"] == ("net.ipv4.tcp_slow_start_after_idle = 0\n"
                                  "net.ipv4.tcp_rmem = 4096 131072 67108864\n")


def test_removed_key_disappears_from_file(tmp_path, module_calls):
    path = str(tmp_path / "p.conf")
    proc = init_ns(tmp_path)
    run_module({"path": path, "settings": {"net.ipv4.tcp_mtu_probing": 1,
                                           "net.ipv4.tcp_fastopen": 3}}, proc)
    result = run_module({"path": path, "settings": {"net.ipv4.tcp_mtu_probing": 1}}, proc)
    assert result["changed"] and result["file_changed"] and result["applied"] == []
    with open(path) as handle:
        assert sf.parse_file(handle.read()) == {"net.ipv4.tcp_mtu_probing": "1"}
    # the live value of the removed key is left as it is
    assert proc.live("net.ipv4.tcp_fastopen") == "3"


def test_strict_fails_before_changing_anything(tmp_path, module_calls):
    path = str(tmp_path / "p.conf")
    proc = netns(tmp_path)
    result = run_module({"path": path, "settings": SETTINGS, "strict": True}, proc, expect=AnsibleFailJson)
    assert "net.core.rmem_max" in result["msg"] and "nothing was changed" in result["msg"]
    assert result["failed_keys"] == ["net.core.rmem_max"]
    assert result["keys"]["net.core.rmem_max"]["status"] == "failed"
    assert not result["changed"]
    assert not os.path.exists(path)
    assert proc.live("net.ipv4.tcp_rmem") == "4096 131072 33554432"


def test_strict_passes_when_everything_is_settable(tmp_path, module_calls):
    result = run_module({"path": str(tmp_path / "p.conf"), "strict": True,
                         "settings": {"net.ipv4.tcp_rmem": [4096, 131072, 67108864]}},
                        netns(tmp_path))
    assert result["applied"] == ["net.ipv4.tcp_rmem"]


def test_read_back_mismatch_fails_the_module(tmp_path, module_calls):
    path = str(tmp_path / "p.conf")
    proc = init_ns(tmp_path, clamp={"net.ipv4.tcp_rmem": "4096 131072 33554432"})
    result = run_module({"path": path, "settings": {"net.ipv4.tcp_rmem": "4096 131072 99999999",
                                                    "net.ipv4.tcp_mtu_probing": 1}},
                        proc, expect=AnsibleFailJson)
    assert result["failed_keys"] == ["net.ipv4.tcp_rmem"]
    assert "net.ipv4.tcp_rmem failed" in result["msg"] and "reads back" in result["msg"]
    assert result["applied"] == ["net.ipv4.tcp_mtu_probing"]
    assert result["changed"]


@pytest.mark.parametrize("code", [errno.EIO, errno.EINVAL, errno.EPERM])
def test_value_refused_on_write_fails_and_is_kept_out_of_the_file(tmp_path, module_calls, code):
    path = str(tmp_path / "p.conf")
    proc = init_ns(tmp_path, write_errors={"net.ipv4.tcp_mtu_probing": code})
    result = run_module({"path": path, "settings": {"net.ipv4.tcp_mtu_probing": 1,
                                                    "net.ipv4.tcp_slow_start_after_idle": 0}},
                        proc, expect=AnsibleFailJson)
    assert "net.ipv4.tcp_mtu_probing failed" in result["msg"]
    assert "[%s]" % errno.errorcode[code] in result["msg"]
    assert result["failed_keys"] == ["net.ipv4.tcp_mtu_probing"] and result["skipped_keys"] == []
    assert module_calls == []  # a refusal is not a warning-and-skip
    assert proc.live("net.ipv4.tcp_mtu_probing") == "0"
    with open(path) as handle:
        content = handle.read()
    assert sf.parse_file(content) == {"net.ipv4.tcp_slow_start_after_idle": "0"}
    assert "# refused here: net.ipv4.tcp_mtu_probing = 1 (" in content


@pytest.mark.parametrize("apply_live", [True, False])
@pytest.mark.parametrize("settings, fragments", [
    ({"net.core.rmem_max": "abc"}, ["net.core.rmem_max", "'abc'", "0..2147483647"]),
    ({"net.ipv4.tcp_notsent_lowat": "abc"}, ["net.ipv4.tcp_notsent_lowat", "0..4294967295"]),
    ({"net.ipv4.tcp_rmen": "4096 131072 67108864"}, ["tcp_rmen does not exist", "misspelt"]),
    ({"net.ipv4.tcp_congestion_control": "turbo"}, ["congestion control turbo is not available"]),
    ({"net.ipv4.tcp_fin_timeout": "abc"}, ["net.ipv4.tcp_fin_timeout", "takes 1 integer"]),
])
def test_bad_values_fail_before_anything_is_written(tmp_path, module_calls, settings, fragments, apply_live):
    path = str(tmp_path / "p.conf")
    for maker in (init_ns, netns):
        proc = maker(tmp_path / maker.__name__)
        for check in (True, False):
            args = {"path": path, "apply_live": apply_live,
                    "settings": dict(settings, **{"net.ipv4.tcp_slow_start_after_idle": 0})}
            result = run_module(args, proc, check=check, expect=AnsibleFailJson)
            for fragment in fragments:
                assert fragment in result["msg"], (maker.__name__, result["msg"])
            assert not result["changed"]
            assert proc.writes == [] and not os.path.exists(path)
            assert proc.live("net.ipv4.tcp_slow_start_after_idle") == "1"
    assert module_calls == []


def test_apply_live_false_only_writes_the_file(tmp_path, module_calls):
    path = str(tmp_path / "p.conf")
    proc = netns(tmp_path)
    result = run_module({"path": path, "settings": SETTINGS, "apply_live": False}, proc)
    assert proc.writes == []
    assert result["applied"] == [] and result["file_changed"] and result["changed"]
    assert result["drifted"] == ["net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_rmem"]
    assert proc.live("net.ipv4.tcp_rmem") == "4096 131072 33554432"
    assert os.path.exists(path)


def test_fixes_mode_of_existing_file(tmp_path, module_calls):
    path = str(tmp_path / "p.conf")
    proc = init_ns(tmp_path)
    run_module({"path": path, "settings": {"net.ipv4.tcp_mtu_probing": 1}}, proc)
    os.chmod(path, 0o600)
    result = run_module({"path": path, "settings": {"net.ipv4.tcp_mtu_probing": 1}}, proc,
                        check=True)
    assert result["changed"] and result["file_drifted"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    result = run_module({"path": path, "settings": {"net.ipv4.tcp_mtu_probing": 1}}, proc)
    assert result["changed"] and result["file_changed"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_overwrites_local_edits(tmp_path, module_calls):
    path = str(tmp_path / "p.conf")
    proc = init_ns(tmp_path)
    run_module({"path": path, "settings": {"net.ipv4.tcp_mtu_probing": 1}}, proc)
    with open(path, "a") as handle:
        handle.write("vm.swappiness = 1\n")
    result = run_module({"path": path, "settings": {"net.ipv4.tcp_mtu_probing": 1}}, proc)
    assert result["file_changed"] and not result["applied"]
    with open(path) as handle:
        assert "swappiness" not in handle.read()


def test_absent_removes_file_and_keeps_live_values_nothing_else_sets(tmp_path, module_calls):
    config = sf.SysctlConfig(root=str(tmp_path / "fs"))  # no configuration files at all
    path = str(tmp_path / "p.conf")
    proc = init_ns(tmp_path)
    run_module({"path": path, "settings": {"net.ipv4.tcp_mtu_probing": 1}}, proc)
    result = run_module({"path": path, "state": "absent"}, proc, check=True, diff=True, config=config)
    assert result["changed"] and result["file_changed"] and os.path.exists(path)
    assert result["diff"][0]["after"] == "" and "tcp_mtu_probing" in result["diff"][0]["before"]
    result = run_module({"path": path, "state": "absent"}, proc, config=config)
    assert result["changed"] and not os.path.exists(path)
    assert result["unrestored"] == ["net.ipv4.tcp_mtu_probing"]
    assert proc.live("net.ipv4.tcp_mtu_probing") == "1"
    result = run_module({"path": path, "state": "absent"}, proc, config=config)
    assert not result["changed"]


def test_invalid_settings_fail(tmp_path, module_calls):
    result = run_module({"path": str(tmp_path / "p.conf"),
                         "settings": {"net.ipv4.tcp_rmem": {"a": 1}}},
                        init_ns(tmp_path), expect=AnsibleFailJson)
    assert "net.ipv4.tcp_rmem" in result["msg"]


def test_settings_required_when_present(tmp_path, module_calls):
    result = run_module({"path": str(tmp_path / "p.conf")}, init_ns(tmp_path), expect=AnsibleFailJson)
    assert "settings" in result["msg"]


def test_missing_parent_directory_fails(tmp_path, module_calls):
    result = run_module({"path": str(tmp_path / "nope" / "p.conf"),
                         "settings": {"net.ipv4.tcp_mtu_probing": 1}},
                        init_ns(tmp_path), expect=AnsibleFailJson)
    assert "does not exist" in result["msg"]


# --- state=absent restores what the remaining configuration gives (issue 23) ------------------

DROP_IN = "etc/sysctl.d/90-trainnet-sync-tunnel.conf"


def fake_fs(base, files=None):
    """A fake root with sysctl configuration files {relative path: content}; symlinks as
    {relative path: ("->", target)}."""
    root = base / "fs"
    for directory in ("etc/sysctl.d", "usr/lib/sysctl.d"):
        (root / directory).mkdir(parents=True, exist_ok=True)
    for rel, content in (files or {}).items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, tuple):
            os.symlink(content[1], str(target))
        else:
            target.write_text(content)
    return sf.SysctlConfig(root=str(root)), str(root / DROP_IN)


def gateway(base, files=None, forwarding="1", **kwargs):
    """A node that was a site gateway: the sync_tunnel drop-in set ip_forward=1 (live: forwarding)."""
    config, path = fake_fs(base, files)
    proc = init_ns(base, extra={"net.ipv4.ip_forward": forwarding}, **kwargs)
    with open(path, "w") as handle:
        handle.write(sf.MANAGED_HEADER[0] + "\n\nnet.ipv4.ip_forward = 1\n")
    return config, path, proc


ABSENT = {"state": "absent", "restore": {"net.ipv4.ip_forward": 0}}


def test_absent_restores_ip_forward_from_restore(tmp_path, module_calls):
    config, path, proc = gateway(tmp_path, files={
        "usr/lib/sysctl.d/50-default.conf": "net.ipv4.conf.all.rp_filter = 2\n"})
    result = run_module(dict(ABSENT, path=path), proc, config=config, diff=True)
    assert result["changed"] and result["file_changed"] and not os.path.exists(path)
    assert proc.live("net.ipv4.ip_forward") == "0"
    assert proc.writes == [("net.ipv4.ip_forward", "0")]
    assert result["applied"] == ["net.ipv4.ip_forward"] and result["unrestored"] == []
    assert result["keys"]["net.ipv4.ip_forward"] == {
        "status": "applied", "before": "1", "after": "0", "wanted": "0", "source": "restore",
        "reason": "live value differs; restoring 0 from the restore option"}
    file_diff, live_diff = result["diff"]
    assert "net.ipv4.ip_forward = 1" in file_diff["before"] and file_diff["after"] == ""
    assert (live_diff["before"], live_diff["after"]) == ("net.ipv4.ip_forward = 1\n",
                                                         "net.ipv4.ip_forward = 0\n")
    # every later run of the role: no drop-in, nothing changes
    again = run_module(dict(ABSENT, path=path), proc, config=config)
    assert not again["changed"] and again["keys"] == {} and len(proc.writes) == 1
    assert module_calls == []


def test_absent_keeps_a_value_another_file_sets(tmp_path, module_calls):
    config, path, proc = gateway(tmp_path, files={
        "etc/sysctl.d/90-trainnet-control-plane.conf": "net.ipv4.ip_forward = 1\n"})
    result = run_module(dict(ABSENT, path=path), proc, config=config)
    assert result["changed"] and not os.path.exists(path)
    assert proc.live("net.ipv4.ip_forward") == "1" and proc.writes == []
    key = result["keys"]["net.ipv4.ip_forward"]
    assert key["status"] == "unchanged" and key["wanted"] == "1"
    assert key["source"] == str(tmp_path / "fs" / "etc/sysctl.d/90-trainnet-control-plane.conf")
    assert result["unchanged"] == ["net.ipv4.ip_forward"] and result["applied"] == []


def test_absent_restores_what_the_remaining_files_say_over_restore(tmp_path, module_calls):
    # A vendor file of the same name as the drop-in is uncovered by its removal; a later-named
    # file overrides it; the restore option only counts when no file sets the key.
    config, path, proc = gateway(tmp_path, files={
        "usr/lib/sysctl.d/90-trainnet-sync-tunnel.conf": "net.ipv4.ip_forward = 1\n",
        "usr/lib/sysctl.d/95-later.conf": "net/ipv4/ip_forward = 0\nnet.ipv4.tcp_mtu_probing = 1\n"},
        forwarding="1")
    result = run_module(dict(path=path, state="absent", restore={"net.ipv4.ip_forward": 1}), proc,
                        config=config)
    assert proc.live("net.ipv4.ip_forward") == "0"
    assert result["keys"]["net.ipv4.ip_forward"]["source"].endswith("/95-later.conf")


def test_absent_without_drop_in_changes_nothing(tmp_path, module_calls):
    config, path = fake_fs(tmp_path, files={"etc/sysctl.d/10-x.conf": "net.ipv4.ip_forward = 1\n"})
    proc = init_ns(tmp_path, extra={"net.ipv4.ip_forward": "1"})
    for check in (True, False):
        result = run_module(dict(ABSENT, path=path), proc, config=config, check=check, diff=True)
        assert not result["changed"] and not result["file_changed"]
        assert result["keys"] == {} and result["unrestored"] == [] and proc.writes == []
        assert result["diff"][1] == {"before": "", "after": "", "before_header": sf.LIVE_DIFF_HEADER,
                                     "after_header": sf.LIVE_DIFF_HEADER}
    assert proc.live("net.ipv4.ip_forward") == "1"
    # also no directory at all (a host without /etc/sysctl.d)
    result = run_module(dict(ABSENT, path=str(tmp_path / "none" / "x.conf")), proc, config=config)
    assert not result["changed"]


def test_absent_check_mode_predicts_and_writes_nothing(tmp_path, module_calls):
    files = {"usr/lib/sysctl.d/50-default.conf": "net.ipv4.tcp_slow_start_after_idle = 0\n"}
    check_config, check_path, check_proc = gateway(tmp_path / "check", files)
    real_config, real_path, real_proc = gateway(tmp_path / "real", files)
    for path in (check_path, real_path):
        with open(path, "a") as handle:
            handle.write("net.ipv4.tcp_slow_start_after_idle = 1\nnet.ipv4.tcp_mtu_probing = 1\n")
    predicted = run_module(dict(ABSENT, path=check_path), check_proc, config=check_config,
                           check=True, diff=True)
    assert os.path.exists(check_path) and check_proc.writes == []
    assert check_proc.live("net.ipv4.ip_forward") == "1"
    done = run_module(dict(ABSENT, path=real_path), real_proc, config=real_config, diff=True)
    for name in ("changed", "file_changed", "file_drifted", "applied", "unchanged", "skipped_keys",
                 "failed_keys", "drifted", "unrestored"):
        assert predicted[name] == done[name], name
    # the same, but for the fake root in the source file names
    assert json.dumps(predicted["keys"]).replace("/check/", "/real/") == json.dumps(done["keys"])
    assert predicted["diff"][1] == done["diff"][1]
    assert predicted["diff"][0]["after"] == done["diff"][0]["after"] == ""
    assert done["applied"] == ["net.ipv4.ip_forward", "net.ipv4.tcp_slow_start_after_idle"]
    assert done["unrestored"] == ["net.ipv4.tcp_mtu_probing"]
    assert real_proc.live("net.ipv4.tcp_slow_start_after_idle") == "0"


def test_absent_key_in_neither_is_reported_and_untouched(tmp_path, module_calls):
    config, path, proc = gateway(tmp_path)
    with open(path, "a") as handle:
        handle.write("net.ipv4.tcp_mtu_probing = 1\n")
    proc.write("net.ipv4.tcp_mtu_probing", "1")
    proc.writes = []
    result = run_module(dict(ABSENT, path=path), proc, config=config)
    assert result["unrestored"] == ["net.ipv4.tcp_mtu_probing"]
    key = result["keys"]["net.ipv4.tcp_mtu_probing"]
    assert key["status"] == "unchanged" and key["wanted"] is None and key["source"] is None
    assert key["before"] == key["after"] == "1" and "left as it is" in key["reason"]
    assert proc.live("net.ipv4.tcp_mtu_probing") == "1"
    assert proc.writes == [("net.ipv4.ip_forward", "0")]
    assert result["unchanged"] == ["net.ipv4.tcp_mtu_probing"]


def test_absent_refused_value_keeps_the_drop_in_for_the_next_run(tmp_path, module_calls):
    config, path, proc = gateway(tmp_path, write_errors={"net.ipv4.ip_forward": errno.EIO})
    result = run_module(dict(ABSENT, path=path), proc, config=config, expect=AnsibleFailJson)
    assert result["failed_keys"] == ["net.ipv4.ip_forward"] and "[EIO]" in result["msg"]
    assert "is kept" in result["msg"] and os.path.exists(path) and not result["file_changed"]
    proc.write_errors = {}
    result = run_module(dict(ABSENT, path=path), proc, config=config)
    assert result["applied"] == ["net.ipv4.ip_forward"] and not os.path.exists(path)


def test_absent_invalid_restore_fails_before_anything(tmp_path, module_calls):
    config, path, proc = gateway(tmp_path)
    result = run_module(dict(path=path, state="absent", restore={"net.ipv4.tcp_mtu_probing": "abc"}),
                        proc, config=config, expect=AnsibleFailJson)
    assert "invalid restore" in result["msg"] and "tcp_mtu_probing" in result["msg"]
    assert os.path.exists(path) and proc.writes == []


def test_absent_apply_live_false_only_removes_the_file(tmp_path, module_calls):
    config, path, proc = gateway(tmp_path)
    result = run_module(dict(ABSENT, path=path, apply_live=False), proc, config=config)
    assert result["changed"] and not os.path.exists(path) and proc.writes == []
    assert result["drifted"] == ["net.ipv4.ip_forward"] and result["applied"] == []


def test_absent_key_not_settable_here_is_skipped_with_a_warning(tmp_path, module_calls):
    config, path, proc = gateway(tmp_path)
    os.chmod(proc.path("net.ipv4.ip_forward"), 0o444)
    proc.read_only.add("net.ipv4.ip_forward")
    proc._init_netns = False
    result = run_module(dict(ABSENT, path=path), proc, config=config)
    assert result["skipped_keys"] == ["net.ipv4.ip_forward"] and not os.path.exists(path)
    assert len(module_calls) == 1 and "net.ipv4.ip_forward" in module_calls[0]
