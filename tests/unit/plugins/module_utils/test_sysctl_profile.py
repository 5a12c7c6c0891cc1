# -*- coding: utf-8 -*-
# Copyright: (c) 2025, longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests of the sysctl_profile logic on a fake /proc/sys tree (no root needed)."""

from __future__ import annotations

import errno
import json
import os

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import netns as netns_utils
from ansible_collections.longhaul.trainnet.plugins.module_utils import sysctl_profile as sf

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "fixtures", "sysctl_profile")


def snapshot(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return json.load(handle)


class FakeProc(sf.ProcSys):
    """A /proc/sys tree in a temporary directory that answers writes like the kernel would.

    read_only keys refuse writes with EACCES (and os.access says so), the congestion control
    key behaves like net/ipv4/tcp_cong.c (ENOENT for an unknown algorithm, EPERM for one not
    allowed outside init_net), write_errors raise a given errno on every write, value_errors
    only when a given value is written, clamp stores another value than the one written.
    """

    def __init__(self, base, snap, init_netns=None, write_errors=None, value_errors=None,
                 clamp=None, modules=(), extra=None):
        root = os.path.join(str(base), "proc_sys")
        modules_root = os.path.join(str(base), "lib_modules")
        super(FakeProc, self).__init__(
            root=root, init_netns=snap["init_netns"] if init_netns is None else init_netns,
            modules_roots=(modules_root,), kernel_release="test")
        values = dict(snap["values"])
        values.update(extra or {})
        for key, value in values.items():
            path = self.path(key)
            if not os.path.isdir(os.path.dirname(path)):
                os.makedirs(os.path.dirname(path))
            with open(path, "w") as handle:
                handle.write(value + "\n")
        for name in modules:
            mdir = os.path.join(modules_root, "test", "kernel", "net", "ipv4")
            if not os.path.isdir(mdir):
                os.makedirs(mdir)
            open(os.path.join(mdir, "tcp_%s.ko.xz" % name), "w").close()
        self.read_only = set(snap["read_only"])
        self.write_errors = dict(write_errors or {})
        self.value_errors = dict(value_errors or {})
        self.clamp = dict(clamp or {})
        self.writes = []

    def writable(self, key):
        return sf.canonical_key(key) not in self.read_only and super(FakeProc, self).writable(key)

    def write(self, key, text):
        canonical = sf.canonical_key(key)
        self.writes.append((canonical, text))
        if canonical in self.read_only:
            raise OSError(errno.EACCES, "Permission denied")
        if canonical in self.write_errors:
            raise OSError(self.write_errors[canonical], os.strerror(self.write_errors[canonical]))
        bad = self.value_errors.get(canonical)
        if bad and bad[0].split() == text.split():
            raise OSError(bad[1], os.strerror(bad[1]))
        if canonical == sf.CC_KEY:
            name = text.strip()
            if name not in self.read(sf.CC_AVAILABLE_KEY).split():
                raise OSError(errno.ENOENT, "No such file or directory")
            if not self.is_init_netns() and name not in self.read(sf.CC_ALLOWED_KEY).split():
                raise OSError(errno.EPERM, "Operation not permitted")
        if canonical in self.clamp:
            text = self.clamp[canonical]
        super(FakeProc, self).write(key, text)

    def live(self, key):
        return " ".join(self.read(key).split())


def netns(tmp_path, **kwargs):
    return FakeProc(tmp_path, snapshot("netns_6.18.json"), **kwargs)


def init_ns(tmp_path, **kwargs):
    return FakeProc(tmp_path, snapshot("init_netns_6.18.json"), **kwargs)


def plan(settings, proc, apply_live=True):
    entries = sf.parse_settings(settings)
    sf.plan_entries(entries, proc, apply_live=apply_live)
    return entries


def run_real(settings, proc, strict=False):
    entries = plan(settings, proc)
    if strict:
        sf.make_strict(entries)
    if not any(e.status == sf.FAILED for e in entries):
        sf.apply_entries(entries, proc)
    if strict:
        sf.make_strict(entries)
    return entries


def by_key(entries):
    return dict((e.key, e) for e in entries)


PROFILE = {
    "net.ipv4.tcp_slow_start_after_idle": 0,
    "net.core.rmem_max": 67108864,
    "net.ipv4.tcp_rmem": [4096, 131072, 67108864],
    "net.ipv4.tcp_wmem": "4096 16384 67108864",
    "net.ipv4.tcp_congestion_control": "bbr",
    "net.core.default_qdisc": "fq",
    "net.ipv4.tcp_mtu_probing": 1,
}


# --- keys and values -------------------------------------------------------------------------

@pytest.mark.parametrize("key, relpath", [
    ("net.ipv4.tcp_rmem", "net/ipv4/tcp_rmem"),
    ("net/ipv4/tcp_rmem", "net/ipv4/tcp_rmem"),
    ("net.ipv4.conf.eth0/100.forwarding", "net/ipv4/conf/eth0.100/forwarding"),
    ("net/ipv4/conf/eth0.100/forwarding", "net/ipv4/conf/eth0.100/forwarding"),
])
def test_key_to_relpath(key, relpath):
    assert sf.key_to_relpath(key) == relpath


def test_canonical_key_of_slash_form():
    assert sf.canonical_key("net/ipv4/conf/eth0.100/forwarding") == "net.ipv4.conf.eth0/100.forwarding"
    assert sf.canonical_key("net.ipv4.tcp_rmem") == "net.ipv4.tcp_rmem"


@pytest.mark.parametrize("key", ["", " net.ipv4.x", "net..ipv4", "net.ipv4.", ".net", "/net/ipv4",
                                 "-net.ipv4.tcp_rmem", "net.ipv4.tcp rmem", "net/../etc", "a=b",
                                 "#net.ipv4.x", None, 5])
def test_invalid_keys(key):
    with pytest.raises(sf.SysctlInputError):
        sf.key_to_relpath(key)


@pytest.mark.parametrize("value, text", [
    (0, "0"),
    (67108864, "67108864"),
    (True, "1"),
    (False, "0"),
    (1.0, "1"),
    ("bbr", "bbr"),
    ("  4096\t131072   6291456 ", "4096 131072 6291456"),
    ([4096, 131072, 6291456], "4096 131072 6291456"),
    (["4096", 131072, "6291456"], "4096 131072 6291456"),
    ("", ""),
])
def test_normalize_value(value, text):
    assert sf.normalize_value(value, "k") == text


@pytest.mark.parametrize("value", [None, {"a": 1}, [], [[1, 2]], [None], 1.5, "a\nb", float("nan")])
def test_normalize_value_rejects(value):
    with pytest.raises(sf.SysctlInputError):
        sf.normalize_value(value, "net.ipv4.tcp_rmem")


def test_values_equal_is_whitespace_insensitive():
    wanted = sf.normalize_value([4096, 131072, 6291456])
    assert sf.values_equal("4096\t131072\t6291456", "4096 131072 6291456")
    assert sf.values_equal("4096\t131072\t6291456", wanted)
    assert sf.values_equal(" 4096  131072\t6291456 ", sf.normalize_value("4096 131072 6291456"))
    assert not sf.values_equal("4096\t131072\t6291456", "4096 131072 6291457")
    assert not sf.values_equal("4096 131072", "4096 131072 6291456")
    assert not sf.values_equal(None, "1")


def test_values_equal_ignores_order_of_allowed_cc_only():
    assert sf.values_equal("reno bbr cubic", "bbr cubic reno", sf.CC_ALLOWED_KEY)
    assert not sf.values_equal("4096 131072 6291456", "131072 4096 6291456", "net.ipv4.tcp_rmem")


def test_parse_settings_keeps_order_and_rejects_duplicates():
    entries = sf.parse_settings({"b.x": 1, "a.y": [1, 2]})
    assert [(e.key, e.wanted) for e in entries] == [("b.x", "1"), ("a.y", "1 2")]
    with pytest.raises(sf.SysctlInputError, match="same sysctl"):
        sf.parse_settings({"net.ipv4.tcp_rmem": 1, "net/ipv4/tcp_rmem": 1})
    with pytest.raises(sf.SysctlInputError) as err:
        sf.parse_settings({"net.ipv4.tcp_rmem": None, "bad key": 1})
    assert "net.ipv4.tcp_rmem" in str(err.value) and "bad key" in str(err.value)


# --- rendering -------------------------------------------------------------------------------

def test_render_file_whole_and_removed_key_disappears(tmp_path):
    proc = init_ns(tmp_path)
    first = sf.render_file(plan({"net.ipv4.tcp_mtu_probing": 1, "net.ipv4.tcp_fastopen": 3}, proc),
                           header="data plane of h1\n# already a comment")
    assert first.startswith(sf.MANAGED_HEADER[0] + "\n" + sf.MANAGED_HEADER[1] + "\n")
    assert "# data plane of h1\n# already a comment\n" in first
    assert sf.parse_file(first) == {"net.ipv4.tcp_mtu_probing": "1", "net.ipv4.tcp_fastopen": "3"}
    second = sf.render_file(plan({"net.ipv4.tcp_mtu_probing": 1}, proc))
    assert "tcp_fastopen" not in second
    assert sf.parse_file(second) == {"net.ipv4.tcp_mtu_probing": "1"}
    assert "overwritten" in second
    assert second.endswith("net.ipv4.tcp_mtu_probing = 1\n")


def test_render_file_comments_out_skipped_keys(tmp_path):
    proc = netns(tmp_path)
    content = sf.render_file(plan(PROFILE, proc))
    lines = content.splitlines()
    assert any(line.startswith("# skipped here: net.core.rmem_max = 67108864 (") for line in lines)
    assert any(line.startswith("# skipped here: net.core.default_qdisc = fq (") for line in lines)
    active = sf.parse_file(content)
    assert "net.core.rmem_max" not in active and "net.core.default_qdisc" not in active
    assert active["net.ipv4.tcp_rmem"] == "4096 131072 67108864"
    assert active["net.ipv4.tcp_wmem"] == "4096 16384 67108864"


def test_render_is_deterministic(tmp_path):
    proc = netns(tmp_path)
    assert sf.render_file(plan(PROFILE, proc), "x") == sf.render_file(plan(PROFILE, proc), "x")


# --- planning (check mode) -------------------------------------------------------------------

def test_plan_in_netns(tmp_path):
    proc = netns(tmp_path)
    entries = by_key(plan(PROFILE, proc))
    assert entries["net.core.rmem_max"].status == sf.SKIPPED
    assert "not writable" in entries["net.core.rmem_max"].reason
    assert entries["net.core.default_qdisc"].status == sf.SKIPPED
    assert "does not exist" in entries["net.core.default_qdisc"].reason
    assert entries["net.ipv4.tcp_congestion_control"].status == sf.UNCHANGED
    for key in ("net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
                "net.ipv4.tcp_mtu_probing"):
        assert entries[key].status == sf.APPLIED, key
        assert entries[key].drifted
    assert entries["net.ipv4.tcp_rmem"].before == "4096 131072 33554432"
    assert entries["net.ipv4.tcp_rmem"].after == "4096 131072 67108864"
    # planning changed no live value: the only writes were write-backs of the current value
    for key, text in proc.writes:
        assert text == snapshot("netns_6.18.json")["values"][key]
    assert proc.live("net.ipv4.tcp_rmem") == "4096 131072 33554432"


def test_check_mode_prediction_equals_real_run(tmp_path):
    settings = dict(PROFILE, **{"net.ipv4.tcp_congestion_control": "cubic",
                                "net.ipv4.tcp_fastopen": 3})
    for maker in (netns, init_ns):
        check_proc = maker(tmp_path / ("check-" + maker.__name__))
        real_proc = maker(tmp_path / ("real-" + maker.__name__))
        predicted = plan(settings, check_proc)
        done = run_real(settings, real_proc)
        assert sf.summarize(predicted) == sf.summarize(done), maker.__name__
        assert [(e.key, e.status, e.after) for e in predicted] == \
            [(e.key, e.status, e.after) for e in done]
        assert sf.render_file(predicted) == sf.render_file(done)
        assert sf.build_diff("/p", "", "x", predicted) == sf.build_diff("/p", "", "x", done)


def test_idempotence_second_run_unchanged(tmp_path):
    proc = netns(tmp_path)
    first = sf.summarize(run_real(PROFILE, proc))
    assert first["applied"]
    second_entries = run_real(PROFILE, proc)
    second = sf.summarize(second_entries)
    assert second["applied"] == [] and second["drifted"] == []
    assert second["skipped_keys"] == first["skipped_keys"]
    assert sorted(second["unchanged"]) == sorted(first["applied"] + first["unchanged"])
    assert sf.render_file(second_entries) == sf.render_file(run_real(PROFILE, proc))


def test_missing_path_is_skipped_and_failed_under_strict(tmp_path):
    proc = netns(tmp_path)
    entries = by_key(run_real({"net.core.netdev_max_backlog": 30000}, proc))
    assert entries["net.core.netdev_max_backlog"].status == sf.SKIPPED
    assert entries["net.core.netdev_max_backlog"].before is None
    strict = by_key(run_real({"net.core.netdev_max_backlog": 30000}, proc, strict=True))
    assert strict["net.core.netdev_max_backlog"].status == sf.FAILED
    assert "strict" in strict["net.core.netdev_max_backlog"].reason


@pytest.mark.parametrize("code", [errno.EPERM, errno.EINVAL, errno.EACCES, errno.EROFS])
def test_refused_write_is_skipped(tmp_path, code):
    proc = init_ns(tmp_path, write_errors={"net.core.rmem_max": code})
    entries = by_key(run_real({"net.core.rmem_max": 67108864, "net.ipv4.tcp_mtu_probing": 1}, proc))
    rmem = entries["net.core.rmem_max"]
    assert rmem.status == sf.SKIPPED
    assert errno.errorcode[code] in rmem.reason
    assert not rmem.drifted and rmem.after == "4194304"
    assert entries["net.ipv4.tcp_mtu_probing"].status == sf.APPLIED
    assert proc.live("net.core.rmem_max") == "4194304"
    strict = by_key(run_real({"net.core.rmem_max": 67108864}, init_ns(tmp_path / "s", write_errors={
        "net.core.rmem_max": code}), strict=True))
    assert strict["net.core.rmem_max"].status == sf.FAILED


def test_read_only_key_in_netns_is_skipped_even_when_it_already_matches(tmp_path):
    proc = netns(tmp_path)
    entries = by_key(run_real({"net.core.rmem_max": 4194304}, proc))
    assert entries["net.core.rmem_max"].status == sf.SKIPPED
    assert "already matches" in entries["net.core.rmem_max"].reason


def test_unexpected_probe_error_fails(tmp_path):
    proc = init_ns(tmp_path, write_errors={"net.ipv4.tcp_mtu_probing": errno.EIO})
    entry = plan({"net.ipv4.tcp_mtu_probing": 1}, proc)[0]
    assert entry.status == sf.FAILED
    assert "EIO" in entry.reason


def test_value_refused_at_apply_time_is_skipped(tmp_path):
    # The write-back probe passes, the wanted value is refused (EINVAL): skipped at apply time.
    proc = init_ns(tmp_path, value_errors={"net.ipv4.tcp_rmem": ("1 2 3", errno.EINVAL)})
    entries = plan({"net.ipv4.tcp_rmem": "1 2 3"}, proc)
    assert entries[0].status == sf.APPLIED
    sf.apply_entries(entries, proc)
    assert entries[0].status == sf.SKIPPED and "EINVAL" in entries[0].reason
    assert entries[0].after == entries[0].before
    assert "# skipped here: net.ipv4.tcp_rmem = 1 2 3" in sf.render_file(entries)


def test_unexpected_write_error_fails(tmp_path):
    proc = init_ns(tmp_path, value_errors={"net.ipv4.tcp_mtu_probing": ("1", errno.EIO)})
    entries = run_real({"net.ipv4.tcp_mtu_probing": 1}, proc)
    assert entries[0].status == sf.FAILED and "EIO" in entries[0].reason


def test_read_back_mismatch_fails(tmp_path):
    proc = init_ns(tmp_path, clamp={"net.ipv4.tcp_rmem": "4096 131072 33554432"})
    entries = run_real({"net.ipv4.tcp_rmem": "4096 131072 2147483647"}, proc)
    assert entries[0].status == sf.FAILED
    assert "reads back 4096 131072 33554432" in entries[0].reason
    assert sf.summarize(entries)["failed_keys"] == ["net.ipv4.tcp_rmem"]


def test_partial_write_read_back_mismatch_fails(tmp_path):
    # The kernel accepts "4096 131072" for tcp_rmem and keeps the third field: read back differs.
    proc = init_ns(tmp_path, clamp={"net.ipv4.tcp_rmem": "4096\t131072\t33554432"})
    entries = run_real({"net.ipv4.tcp_rmem": "4096 131072"}, proc)
    assert entries[0].status == sf.FAILED


# --- congestion control prediction -----------------------------------------------------------

def test_cc_not_allowed_in_non_init_netns_is_skipped(tmp_path):
    proc = netns(tmp_path)
    entry = plan({"net.ipv4.tcp_congestion_control": "cubic"}, proc)[0]
    assert entry.status == sf.SKIPPED
    assert "tcp_allowed_congestion_control" in entry.reason and "EPERM" in entry.reason
    # predicted without writing cubic
    assert ("net.ipv4.tcp_congestion_control", "cubic") not in proc.writes
    assert proc.live(sf.CC_KEY) == "bbr"


def test_cc_not_allowed_is_fine_in_init_netns(tmp_path):
    proc = init_ns(tmp_path)
    entries = run_real({"net.ipv4.tcp_congestion_control": "cubic"}, proc)
    assert entries[0].status == sf.APPLIED
    assert proc.live(sf.CC_KEY) == "cubic"


def test_cc_allowed_in_netns_is_applied(tmp_path):
    proc = netns(tmp_path, extra={sf.CC_KEY: "reno"})
    entries = run_real({"net.ipv4.tcp_congestion_control": "bbr"}, proc)
    assert entries[0].status == sf.APPLIED


def test_cc_unavailable_is_skipped_unless_a_module_exists(tmp_path):
    entry = plan({"net.ipv4.tcp_congestion_control": "htcp"}, init_ns(tmp_path / "a"))[0]
    assert entry.status == sf.SKIPPED and "not available" in entry.reason
    with_module = init_ns(tmp_path / "b", modules=("htcp",))
    entry = plan({"net.ipv4.tcp_congestion_control": "htcp"}, with_module)[0]
    assert entry.status == sf.APPLIED
    # a module exists, but a non-init namespace still may not make it its default
    entry = plan({"net.ipv4.tcp_congestion_control": "htcp"}, netns(tmp_path / "c", modules=("htcp",)))[0]
    assert entry.status == sf.SKIPPED and "allowed" in entry.reason


def test_cc_unknown_netns_lets_the_kernel_decide(tmp_path):
    proc = netns(tmp_path)
    proc._init_netns = None  # could not tell: no allowed-list prediction
    entry = plan({"net.ipv4.tcp_congestion_control": "cubic"}, proc)[0]
    assert entry.status == sf.APPLIED


# --- apply_live=false ------------------------------------------------------------------------

def test_apply_live_false_writes_nothing(tmp_path):
    proc = netns(tmp_path)
    entries = by_key(plan(PROFILE, proc, apply_live=False))
    assert proc.writes == []
    assert entries["net.ipv4.tcp_rmem"].status == sf.UNCHANGED
    assert entries["net.ipv4.tcp_rmem"].drifted
    assert entries["net.ipv4.tcp_rmem"].after == entries["net.ipv4.tcp_rmem"].before
    assert entries["net.core.rmem_max"].status == sf.SKIPPED
    assert "net.ipv4.tcp_rmem" in sf.summarize(entries.values())["drifted"]


# --- diff ------------------------------------------------------------------------------------

def test_build_diff(tmp_path):
    proc = netns(tmp_path)
    entries = run_real({"net.ipv4.tcp_rmem": [4096, 131072, 67108864],
                        "net.core.rmem_max": 67108864,
                        "net.ipv4.tcp_congestion_control": "bbr"}, proc)
    content = sf.render_file(entries)
    file_diff, live_diff = sf.build_diff("/etc/sysctl.d/90-x.conf", None, content, entries)
    assert file_diff == {"before": "", "after": content,
                         "before_header": "/etc/sysctl.d/90-x.conf",
                         "after_header": "/etc/sysctl.d/90-x.conf"}
    assert live_diff["before"] == "net.ipv4.tcp_rmem = 4096 131072 33554432\n"
    assert live_diff["after"] == "net.ipv4.tcp_rmem = 4096 131072 67108864\n"
    assert live_diff["before_header"] == sf.LIVE_DIFF_HEADER
    # second run: nothing changes, before == after in both diffs
    again = run_real({"net.ipv4.tcp_rmem": [4096, 131072, 67108864],
                      "net.core.rmem_max": 67108864,
                      "net.ipv4.tcp_congestion_control": "bbr"}, proc)
    file_diff, live_diff = sf.build_diff("/p", content, sf.render_file(again), again)
    assert file_diff["before"] == file_diff["after"]
    assert live_diff["before"] == live_diff["after"] == ""


# --- the real kernel (read only) -------------------------------------------------------------

def test_real_netns_detection_reads_only():
    """sysctl_profile judges the namespace exactly as kernel_capability does."""
    proc = sf.ProcSys()
    assert proc.is_init_netns() in (True, False, None)
    assert proc.is_init_netns() == netns_utils.detect_init_netns()[0]


def test_real_proc_read():
    proc = sf.ProcSys()
    if not proc.exists("kernel.ostype"):
        pytest.skip("no /proc/sys")
    assert proc.read("kernel.ostype") == "Linux"
