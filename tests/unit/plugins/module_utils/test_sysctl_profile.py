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


# What Linux 6.18 accepts for some integer keys, measured with writes in a throwaway
# `unshare --net` namespace (fields, min, max). Kept apart from sf.INTEGER_KEYS on purpose: the
# fake kernel must not share the module's own table.
KERNEL_RANGES = {
    "net.ipv4.tcp_rmem": (3, 1, 2147483647),
    "net.ipv4.tcp_wmem": (3, 1, 2147483647),
    "net.ipv4.tcp_mtu_probing": (1, 0, 255),
    "net.ipv4.tcp_slow_start_after_idle": (1, 0, 255),
    "net.ipv4.tcp_notsent_lowat": (1, 0, 4294967295),
}
# Keys a non-init namespace refuses to write with EINVAL even when their mode says 0644.
KERNEL_GLOBAL = frozenset(["net.core.rmem_max", "net.core.wmem_max", "net.core.rmem_default",
                           "net.core.wmem_default", "net.core.netdev_max_backlog",
                           "net.core.default_qdisc"])


class FakeProc(sf.ProcSys):
    """A /proc/sys tree in a temporary directory that answers writes like the kernel would.

    read_only keys get mode 0444 and refuse writes with EACCES; no_access keys keep mode 0644
    but os.access says no (a read-only /proc/sys mount) and writes fail with EROFS; global keys
    refuse writes from a non-init netns with EINVAL; integer keys refuse a non-integer with
    EINVAL, take only as many fields as they have (extra ignored, missing kept) and refuse values
    outside KERNEL_RANGES; the congestion control key behaves like net/ipv4/tcp_cong.c (ENOENT
    for an unknown algorithm, EPERM for one not allowed outside init_net); write_errors raise a
    given errno on every write, value_errors only when a given value is written, clamp stores
    another value than the one written.
    """

    def __init__(self, base, snap, init_netns=None, write_errors=None, value_errors=None,
                 clamp=None, modules=(), extra=None, read_only=None, no_access=()):
        root = os.path.join(str(base), "proc_sys")
        modules_root = os.path.join(str(base), "lib_modules")
        super(FakeProc, self).__init__(
            root=root, init_netns=snap["init_netns"] if init_netns is None else init_netns,
            modules_roots=(modules_root,), kernel_release="test")
        values = dict(snap["values"])
        values.update(extra or {})
        self.read_only = set(snap["read_only"] if read_only is None else read_only)
        for key, value in values.items():
            path = self.path(key)
            if not os.path.isdir(os.path.dirname(path)):
                os.makedirs(os.path.dirname(path))
            with open(path, "w") as handle:
                handle.write(value + "\n")
            os.chmod(path, 0o444 if key in self.read_only else 0o644)
        for name in modules:
            mdir = os.path.join(modules_root, "test", "kernel", "net", "ipv4")
            if not os.path.isdir(mdir):
                os.makedirs(mdir)
            open(os.path.join(mdir, "tcp_%s.ko.xz" % name), "w").close()
        self.no_access = set(no_access)
        self.write_errors = dict(write_errors or {})
        self.value_errors = dict(value_errors or {})
        self.clamp = dict(clamp or {})
        self.writes = []

    def writable(self, key):
        return sf.canonical_key(key) not in self.no_access and super(FakeProc, self).writable(key)

    def _kernel_value(self, canonical, text):
        """The value the kernel would store for text, or raise OSError like it does."""
        live = self.read(canonical).split()
        fields = text.split()
        if live and all(f.lstrip("-").isdigit() for f in live):
            if not fields or not all(f.lstrip("-").isdigit() for f in fields):
                raise OSError(errno.EINVAL, "Invalid argument")
            count, low, high = KERNEL_RANGES.get(canonical, (len(live), -2 ** 31, 2 ** 31 - 1))
            fields = fields[:count]
            if any(not low <= int(f) <= high for f in fields):
                raise OSError(errno.EINVAL, "Invalid argument")
            return "\t".join(fields + live[len(fields):])
        return text

    def write(self, key, text):
        canonical = sf.canonical_key(key)
        self.writes.append((canonical, text))
        if canonical in self.read_only:
            raise OSError(errno.EACCES, "Permission denied")
        if canonical in self.no_access:
            raise OSError(errno.EROFS, "Read-only file system")
        if canonical in KERNEL_GLOBAL and self.is_init_netns() is False:
            raise OSError(errno.EINVAL, "Invalid argument")
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
        text = self._kernel_value(canonical, text)
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
        sf.parse_settings({"net.ipv4.tcp_rmem": "1 2 3", "net/ipv4/tcp_rmem": [1, 2, 3]})
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
    assert "global sysctl" in entries["net.core.rmem_max"].reason
    assert entries["net.core.default_qdisc"].status == sf.SKIPPED
    assert "does not exist" in entries["net.core.default_qdisc"].reason
    assert entries["net.ipv4.tcp_congestion_control"].status == sf.UNCHANGED
    for key in ("net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
                "net.ipv4.tcp_mtu_probing"):
        assert entries[key].status == sf.APPLIED, key
        assert entries[key].drifted
    assert entries["net.ipv4.tcp_rmem"].before == "4096 131072 33554432"
    assert entries["net.ipv4.tcp_rmem"].after == "4096 131072 67108864"
    # planning (check mode) writes nothing at all, not even the current value back
    assert proc.writes == []
    assert proc.live("net.ipv4.tcp_rmem") == "4096 131072 33554432"


def privileged_netns(tmp_path, **kwargs):
    """A privileged container: global keys are mode 0644 but refuse writes (EINVAL)."""
    return netns(tmp_path, read_only=[sf.CC_AVAILABLE_KEY, sf.CC_ALLOWED_KEY], **kwargs)


@pytest.mark.parametrize("maker", [netns, init_ns, privileged_netns], ids=lambda m: m.__name__)
def test_check_mode_prediction_equals_real_run(tmp_path, maker):
    settings = dict(PROFILE, **{"net.ipv4.tcp_congestion_control": "cubic",
                                "net.ipv4.tcp_fastopen": 3,
                                "net.ipv4.tcp_notsent_lowat": 131072,
                                "net.core.wmem_max": 67108864,
                                "net.core.netdev_max_backlog": 30000})
    check_proc = maker(tmp_path / "check")
    real_proc = maker(tmp_path / "real")
    predicted = plan(settings, check_proc)
    assert check_proc.writes == []
    done = run_real(settings, real_proc)
    assert sf.summarize(predicted) == sf.summarize(done)
    assert [(e.key, e.status, e.after, e.reason) for e in predicted] == \
        [(e.key, e.status, e.after, e.reason) for e in done]
    assert sf.render_file(predicted) == sf.render_file(done)
    assert sf.build_diff("/p", "", "x", predicted) == sf.build_diff("/p", "", "x", done)
    assert not sf.summarize(done)["failed_keys"]
    # what the real run reports as applied is really live now
    for e in done:
        if e.status == sf.APPLIED:
            assert real_proc.live(e.key) == e.wanted, e.key


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
def test_value_refused_on_write_fails_and_stays_out_of_the_file(tmp_path, code):
    # The plan cannot see this refusal (the key is 0644 and writable in the init netns), so the
    # real run must report it as a failure, not as a skip check mode never predicted.
    proc = init_ns(tmp_path, write_errors={"net.core.rmem_max": code})
    entries = by_key(run_real({"net.core.rmem_max": 67108864, "net.ipv4.tcp_mtu_probing": 1}, proc))
    rmem = entries["net.core.rmem_max"]
    assert rmem.status == sf.FAILED
    assert "[%s]" % errno.errorcode[code] in rmem.reason and "refused the value 67108864" in rmem.reason
    assert rmem.after == "4194304"
    assert entries["net.ipv4.tcp_mtu_probing"].status == sf.APPLIED
    assert proc.live("net.core.rmem_max") == "4194304"
    content = sf.render_file(entries.values())
    assert "net.core.rmem_max" not in sf.parse_file(content)
    assert "# refused here: net.core.rmem_max = 67108864 (" in content
    assert sf.parse_file(content) == {"net.ipv4.tcp_mtu_probing": "1"}


def test_read_only_key_in_netns_is_skipped_even_when_it_already_matches(tmp_path):
    proc = netns(tmp_path)
    entries = by_key(run_real({"net.core.rmem_max": 4194304}, proc))
    assert entries["net.core.rmem_max"].status == sf.SKIPPED
    assert "already matches" in entries["net.core.rmem_max"].reason


def test_plan_never_writes_even_when_writes_would_fail(tmp_path):
    proc = init_ns(tmp_path, write_errors={"net.ipv4.tcp_mtu_probing": errno.EIO})
    entry = plan({"net.ipv4.tcp_mtu_probing": 1}, proc)[0]
    assert entry.status == sf.APPLIED and proc.writes == []
    sf.apply_entries([entry], proc)
    assert entry.status == sf.FAILED and "[EIO]" in entry.reason


def test_value_refused_at_apply_time_fails(tmp_path):
    # Was: "skipped" at apply time after check mode had predicted "applied", and remediate.yml
    # then reported drift forever. A refusal of the wanted value is a failure.
    proc = init_ns(tmp_path, value_errors={"net.ipv4.tcp_rmem": ("1 2 3", errno.EINVAL)})
    entries = plan({"net.ipv4.tcp_rmem": "1 2 3"}, proc)
    assert entries[0].status == sf.APPLIED
    sf.apply_entries(entries, proc)
    assert entries[0].status == sf.FAILED and "[EINVAL]" in entries[0].reason
    assert entries[0].after == entries[0].before
    assert sf.summarize(entries)["skipped_keys"] == []
    content = sf.render_file(entries)
    assert "net.ipv4.tcp_rmem" not in sf.parse_file(content)
    assert "# refused here: net.ipv4.tcp_rmem = 1 2 3" in content


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


def test_partial_value_of_a_vector_key_is_refused_before_writing(tmp_path):
    # The kernel would take "4096 131072" for tcp_rmem and keep the third field; the module
    # refuses it up front instead of discovering the mismatch after writing.
    with pytest.raises(sf.SysctlInputError, match="takes 3 integers"):
        sf.parse_settings({"net.ipv4.tcp_rmem": "4096 131072"})


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


@pytest.mark.parametrize("maker", ["init_ns", "netns"])
def test_cc_unknown_algorithm_fails_unless_a_module_exists(tmp_path, maker):
    make = init_ns if maker == "init_ns" else netns
    proc = make(tmp_path / "a")
    entry = plan({"net.ipv4.tcp_congestion_control": "turbo"}, proc)[0]
    assert entry.status == sf.FAILED and "not available" in entry.reason
    assert "reno bbr cubic" in entry.reason and proc.writes == []
    with_module = init_ns(tmp_path / "b", modules=("htcp",))
    entry = plan({"net.ipv4.tcp_congestion_control": "htcp"}, with_module)[0]
    assert entry.status == sf.APPLIED
    # a module exists, but a non-init namespace still may not make it its default
    entry = plan({"net.ipv4.tcp_congestion_control": "htcp"}, netns(tmp_path / "c", modules=("htcp",)))[0]
    assert entry.status == sf.SKIPPED and "allowed" in entry.reason


def test_cc_unknown_netns_lets_the_kernel_decide(tmp_path):
    proc = netns(tmp_path)
    proc._init_netns = None  # could not tell: no allowed-list prediction
    entries = plan({"net.ipv4.tcp_congestion_control": "cubic"}, proc)
    assert entries[0].status == sf.APPLIED
    sf.apply_entries(entries, proc)
    assert entries[0].status == sf.FAILED and "[EPERM]" in entries[0].reason


# --- validation before planning --------------------------------------------------------------

@pytest.mark.parametrize("key, value, fragment", [
    ("net.core.rmem_max", "abc", "takes 1 integer in 0..2147483647"),
    ("net.ipv4.tcp_notsent_lowat", "abc", "takes 1 integer in 0..4294967295"),
    ("net.ipv4.tcp_notsent_lowat", 4294967296, "out of range"),
    ("net.ipv4.tcp_mtu_probing", 256, "out of range: it takes 1 integer in 0..255"),
    ("net.ipv4.tcp_slow_start_after_idle", -1, "out of range"),
    ("net.ipv4.tcp_rmem", [0, 131072, 67108864], "out of range: it takes 3 integers in 1.."),
    ("net.ipv4.tcp_wmem", "4096 16384 67108864 1", "takes 3 integers"),
    ("net.ipv4.tcp_fastopen", "", "takes 1 integer"),
    ("net.ipv4.tcp_base_mss", 1.0e10, "out of range"),
])
def test_known_integer_keys_are_validated_without_io(key, value, fragment):
    with pytest.raises(sf.SysctlInputError) as err:
        sf.parse_settings({"net.ipv4.tcp_mtu_probing": 1, key: value})
    assert key in str(err.value) and fragment in str(err.value)


@pytest.mark.parametrize("key, value", [
    ("net.ipv4.tcp_notsent_lowat", 4294967295), ("net.ipv4.tcp_fastopen", -1),
    ("net.ipv4.tcp_rmem", "1 1 2147483647"), ("net.ipv4.tcp_mtu_probing", 255),
])
def test_known_integer_keys_accept_what_the_kernel_accepts(tmp_path, key, value):
    # Boundaries measured on 6.18; the fake kernel (KERNEL_RANGES) accepts them too.
    entries = run_real({key: value}, init_ns(tmp_path, extra={"net.ipv4.tcp_notsent_lowat": "16384"}))
    assert entries[0].status == sf.APPLIED, entries[0].reason


@pytest.mark.parametrize("maker", ["init_ns", "netns"])
def test_other_integer_keys_are_validated_from_their_live_value(tmp_path, maker):
    make = init_ns if maker == "init_ns" else netns
    proc = make(tmp_path, extra={"net.ipv4.tcp_fin_timeout": "60", "net.ipv4.ip_local_port_range": "32768\t60999"})
    entries = by_key(plan({"net.ipv4.tcp_fin_timeout": "abc",
                           "net.ipv4.ip_local_port_range": "1024",
                           "net.ipv4.tcp_mtu_probing": 1}, proc))
    assert entries["net.ipv4.tcp_fin_timeout"].status == sf.FAILED
    assert "takes 1 integer (its live value is '60')" in entries["net.ipv4.tcp_fin_timeout"].reason
    assert entries["net.ipv4.ip_local_port_range"].status == sf.FAILED
    assert "takes 2 integers" in entries["net.ipv4.ip_local_port_range"].reason
    assert proc.writes == []
    ok = by_key(plan({"net.ipv4.tcp_fin_timeout": 30, "net.ipv4.ip_local_port_range": [1024, 65000]}, proc))
    assert [e.status for e in ok.values()] == [sf.APPLIED, sf.APPLIED]


def test_text_keys_are_not_validated_as_integers(tmp_path):
    proc = init_ns(tmp_path, extra={"kernel.hostname": "12345"})
    assert plan({"kernel.hostname": "gpu-a"}, proc)[0].status == sf.APPLIED


@pytest.mark.parametrize("maker", ["init_ns", "netns"])
def test_misspelt_key_fails_in_every_namespace(tmp_path, maker):
    make = init_ns if maker == "init_ns" else netns
    proc = make(tmp_path)
    entry = plan({"net.ipv4.tcp_rmen": "4096 131072 67108864"}, proc)[0]
    assert entry.status == sf.FAILED
    assert "/proc/sys/net/ipv4/tcp_rmen does not exist" in entry.reason and "misspelt" in entry.reason


def test_missing_global_key_is_skipped_only_outside_the_init_netns(tmp_path):
    entry = plan({"net.core.default_qdisc": "fq"}, netns(tmp_path / "n"))[0]
    assert entry.status == sf.SKIPPED and "global sysctl" in entry.reason
    proc = init_ns(tmp_path / "i")
    os.unlink(proc.path("net.core.default_qdisc"))
    entry = plan({"net.core.default_qdisc": "fq"}, proc)[0]
    assert entry.status == sf.FAILED and "does not exist" in entry.reason


def test_global_key_writable_by_mode_in_a_netns_is_skipped_without_writing(tmp_path):
    # A privileged container: net.core.rmem_max is 0644 but the kernel answers EINVAL.
    proc = netns(tmp_path, read_only=[])
    entries = plan({"net.core.rmem_max": 67108864}, proc)
    assert entries[0].status == sf.SKIPPED and "global sysctl" in entries[0].reason
    assert proc.writes == []


def test_read_only_key_fails_in_init_netns_and_is_skipped_in_a_netns(tmp_path):
    settings = {"net.ipv4.tcp_available_congestion_control": "reno"}
    entry = plan(settings, init_ns(tmp_path / "i", read_only=[sf.CC_AVAILABLE_KEY]))[0]
    assert entry.status == sf.FAILED and "read-only (mode 0444)" in entry.reason
    entry = plan(settings, netns(tmp_path / "n"))[0]
    assert entry.status == sf.SKIPPED and "mode 0444" in entry.reason


def test_read_only_mount_is_skipped(tmp_path):
    proc = init_ns(tmp_path, no_access=["net.ipv4.tcp_mtu_probing"])
    entry = plan({"net.ipv4.tcp_mtu_probing": 1}, proc)[0]
    assert entry.status == sf.SKIPPED and "[EACCES]" in entry.reason


def fixture_lines(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return [line.split() for line in handle.read().splitlines() if line and not line.startswith("#")]


def test_global_key_list_matches_the_kernel():
    """Every key a 6.18 netns lacks is global; of the net.core keys a netns has, exactly the
    read-only (0444) ones are global."""
    hidden = [fields[0] for fields in fixture_lines("netns_hidden_keys_6.18.txt")]
    assert len(hidden) > 50
    assert [key for key in hidden if not sf.is_global_key(key)] == []
    for mode, key in fixture_lines("netns_core_modes_6.18.txt"):
        assert sf.is_global_key(key) == (mode == "444"), key
    assert not sf.is_global_key("net.ipv4.tcp_rmem")
    assert not sf.is_global_key("net.ipv4.route.min_pmtu")


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


# --- the remaining configuration (state=absent) ------------------------------------------------

def config_tree(tmp_path, files):
    """A fake root with {relative path: content or ("->", symlink target)}."""
    root = tmp_path / "fs"
    root.mkdir(exist_ok=True)
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, tuple):
            os.symlink(content[1], str(target))
        else:
            target.write_text(content)
    return sf.SysctlConfig(root=str(root)), str(root)


def test_config_order_is_by_file_name_and_earlier_directories_hide_same_names(tmp_path):
    config, root = config_tree(tmp_path, {
        "etc/sysctl.d/50-a.conf": "net.ipv4.ip_forward = 1\n",
        "run/sysctl.d/50-a.conf": "net.ipv4.ip_forward = 2\n",
        "usr/lib/sysctl.d/50-a.conf": "net.ipv4.ip_forward = 3\n",
        "usr/lib/sysctl.d/10-b.conf": "net.ipv4.ip_forward = 4\n",
        "usr/local/lib/sysctl.d/60-c.conf": "net.ipv4.tcp_mtu_probing = 2\n",
        "lib/sysctl.d/70-d.conf": "net.ipv4.tcp_mtu_probing = 1\n",
        "lib/sysctl.d/README": "net.ipv4.tcp_mtu_probing = 9\n",
        "etc/sysctl.d/80-e.conf.disabled": "net.ipv4.tcp_mtu_probing = 9\n",
    })
    assert [os.path.relpath(p, root) for p in config.files()] == [
        "usr/lib/sysctl.d/10-b.conf", "etc/sysctl.d/50-a.conf", "usr/local/lib/sysctl.d/60-c.conf",
        "lib/sysctl.d/70-d.conf"]
    values = config.values()
    assert values.lookup("net.ipv4.ip_forward") == ("1", os.path.join(root, "etc/sysctl.d/50-a.conf"))
    assert values.lookup("net/ipv4/tcp_mtu_probing")[0] == "1"
    # removing /etc's 50-a.conf uncovers the next one of that name (/run), not the vendor's
    values = config.values(exclude=[os.path.join(root, "etc/sysctl.d/50-a.conf")])
    assert values.lookup("net.ipv4.ip_forward") == ("2", os.path.join(root, "run/sysctl.d/50-a.conf"))


def test_config_dev_null_masks_a_vendor_file(tmp_path):
    config, root = config_tree(tmp_path, {
        "etc/sysctl.d/50-default.conf": ("->", "/dev/null"),
        "usr/lib/sysctl.d/50-default.conf": "net.ipv4.ip_forward = 1\n",
        "etc/sysctl.d/60-gone.conf": ("->", "/nonexistent/60-gone.conf"),
        "usr/lib/sysctl.d/60-gone.conf": "net.ipv4.ip_forward = 1\n",
    })
    assert config.values().lookup("net.ipv4.ip_forward") == (None, None)


@pytest.mark.parametrize("symlinked", [True, False])
def test_config_sysctl_conf_is_last_unless_a_sysctl_d_file_links_to_it(tmp_path, symlinked):
    files = {"etc/sysctl.conf": "net.ipv4.ip_forward = 1\n",
             "etc/sysctl.d/zz-late.conf": "net.ipv4.ip_forward = 0\n"}
    if symlinked:
        files["etc/sysctl.d/99-sysctl.conf"] = ("->", "../sysctl.conf")
    config, root = config_tree(tmp_path, files)
    value, where = config.values().lookup("net.ipv4.ip_forward")
    # systemd-sysctl reads /etc/sysctl.conf only through the 99-sysctl.conf symlink (before
    # zz-late.conf); procps reads it after everything when nothing links to it.
    assert value == ("0" if symlinked else "1")
    assert len(config.files()) == 2
    # the removed file is /etc/sysctl.conf itself: its symlink counts as gone too
    excluded = config.values(exclude=[os.path.join(root, "etc/sysctl.conf")])
    assert excluded.lookup("net.ipv4.ip_forward")[0] == "0"
    assert len(config.files(exclude=[os.path.join(root, "etc/sysctl.conf")])) == 1


def test_config_lines_globs_and_exclusions():
    values = sf.ConfigValues().parse(
        "# comment\n; comment\n\n"
        "-net.ipv4.conf.*.rp_filter = 2\n"
        "net.ipv4.conf.all.rp_filter = 1\n"
        "-net.ipv4.conf.lo.rp_filter\n"
        "not an assignment\n"
        "bad key = 1\n"
        "net.ipv4.conf.eth0/100.forwarding =  1 \n"
        "net.ipv4.ip_local_port_range = 1024\t65000\n", "/f")
    assert values.lookup("net.ipv4.conf.eth0.rp_filter") == ("2", "/f (pattern net/ipv4/conf/*/rp_filter)")
    # an explicit key wins over any pattern, wherever it is
    assert values.lookup("net.ipv4.conf.all.rp_filter") == ("1", "/f")
    # an exclusion keeps the pattern away and sets nothing
    assert values.lookup("net.ipv4.conf.lo.rp_filter") == (None, "excluded by '-net.ipv4.conf.lo.rp_filter' in /f")
    # a wildcard does not cross a '/'
    assert values.lookup("net.ipv4.conf.eth0.x.rp_filter") == (None, None)
    assert values.lookup("net/ipv4/conf/eth0.100/forwarding") == ("1", "/f")
    assert values.lookup("net.ipv4.ip_local_port_range") == ("1024 65000", "/f")
    # a later file overrides; the last matching pattern wins
    values.parse("net.ipv4.conf.e*.rp_filter = 0\n", "/g")
    assert values.lookup("net.ipv4.conf.eth0.rp_filter")[0] == "0"
    values.parse("net.ipv4.conf.*.rp_filter = 1\n", "/h")
    assert values.lookup("net.ipv4.conf.eth0.rp_filter") == ("1", "/h (pattern net/ipv4/conf/*/rp_filter)")


def restore_plan(tmp_path, removed, files, restore=None, extra=None):
    config, root = config_tree(tmp_path, files)
    proc = init_ns(tmp_path, extra=extra)
    entries = sf.restore_entries(removed, config.values(), sf.parse_restore(restore), proc)
    return by_key(entries), proc


def test_restore_entries_plan_without_writing(tmp_path):
    removed = ("# header\nnet.ipv4.ip_forward = 1\nnet/ipv4/ip_forward = 1\n"
               "net.ipv4.tcp_mtu_probing = 1\nnet.ipv4.conf.*.forwarding = 1\n"
               "net.ipv4.no_such_key = 1\n# skipped here: net.core.rmem_max = 1 (x)\n"
               "net.ipv4.tcp_slow_start_after_idle = 0\n")
    entries, proc = restore_plan(
        tmp_path, removed, {"usr/lib/sysctl.d/50-x.conf": "net.ipv4.tcp_slow_start_after_idle = 1\n"},
        restore={"net.ipv4.ip_forward": False, "net.ipv4.tcp_rmem": "1 2 3"},
        extra={"net.ipv4.ip_forward": "1", "net.ipv4.tcp_slow_start_after_idle": "0",
               "net.ipv4.tcp_mtu_probing": "1"})
    assert proc.writes == []
    assert list(entries) == ["net.ipv4.ip_forward", "net.ipv4.tcp_mtu_probing",
                             "net.ipv4.conf.*.forwarding", "net.ipv4.no_such_key",
                             "net.ipv4.tcp_slow_start_after_idle"]
    assert (entries["net.ipv4.ip_forward"].status, entries["net.ipv4.ip_forward"].wanted) == (sf.APPLIED, "0")
    assert entries["net.ipv4.tcp_slow_start_after_idle"].status == sf.APPLIED
    assert entries["net.ipv4.tcp_slow_start_after_idle"].source.endswith("/50-x.conf")
    summary = sf.summarize_restore(entries.values())
    assert summary["unrestored"] == ["net.ipv4.tcp_mtu_probing", "net.ipv4.conf.*.forwarding"]
    assert "glob pattern" in entries["net.ipv4.conf.*.forwarding"].reason
    assert entries["net.ipv4.no_such_key"].status == sf.UNCHANGED
    assert "nothing live to restore" in entries["net.ipv4.no_such_key"].reason
    assert "net.core.rmem_max" not in entries and "net.ipv4.tcp_rmem" not in entries


def test_restore_entries_bad_value_in_a_remaining_file_fails(tmp_path):
    entries, proc = restore_plan(tmp_path, "net.ipv4.tcp_mtu_probing = 1\n",
                                 {"etc/sysctl.d/10-x.conf": "net.ipv4.tcp_mtu_probing = 300\n"})
    entry = entries["net.ipv4.tcp_mtu_probing"]
    assert entry.status == sf.FAILED and "out of range" in entry.reason and "10-x.conf" in entry.reason
    assert entry.before == entry.after == "0" and proc.writes == []
