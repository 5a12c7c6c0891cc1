# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import interface_link as ls

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "fixtures", "interface_link")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def fixture_lm(name):
    with open(os.path.join(os.path.dirname(FIXTURES), "link_measure", name)) as handle:
        return handle.read()


# --- parsing tc output ----------------------------------------------------------------------

@pytest.mark.parametrize("name, kind", [
    ("tc_json_noqueue.json", "noqueue"),
    ("tc_json_pfifo.json", "pfifo"),
    ("tc_json_tbf.json", "tbf"),
    ("tc_json_pretty_tbf.json", "tbf"),
    ("tc_json_fq.json", "fq"),
    ("tc_json_mq_all.json", "mq"),
    ("tc_json_mq_fq_children.json", "mq"),
    ("tc_json_empty.json", "noop"),
])
def test_parse_qdisc_json(name, kind):
    assert ls.parse_qdisc_json(fixture(name)) == kind
    assert ls.parse_root_qdisc(fixture(name)) == kind


@pytest.mark.parametrize("name, kind", [
    ("tc_text_noqueue.txt", "noqueue"),
    ("tc_text_pfifo.txt", "pfifo"),
    ("tc_text_tbf.txt", "tbf"),
    ("tc_text_fq.txt", "fq"),
    ("tc_text_fq_codel.txt", "fq_codel"),
    ("tc_text_mq_all.txt", "mq"),
    ("tc_text_empty.txt", "noop"),
])
def test_parse_qdisc_text(name, kind):
    assert ls.parse_qdisc_text(fixture(name)) == kind
    assert ls.parse_root_qdisc(fixture(name)) == kind


def test_json_and_text_agree_on_every_captured_pair():
    for base in ("noqueue", "pfifo", "tbf", "fq", "empty"):
        assert ls.parse_root_qdisc(fixture("tc_json_%s.json" % base)) == \
            ls.parse_root_qdisc(fixture("tc_text_%s.txt" % base))


def test_json_without_root_flag_uses_entry_without_parent():
    text = '[{"kind":"fq","handle":"0:","parent":":1"},{"kind":"htb","handle":"1:"}]'
    assert ls.parse_qdisc_json(text) == "htb"


def test_json_only_children_is_an_error():
    with pytest.raises(ValueError):
        ls.parse_qdisc_json('[{"kind":"fq","handle":"0:","parent":":1"}]')


def test_json_not_a_list_is_an_error():
    with pytest.raises(ValueError):
        ls.parse_qdisc_json('{"kind": "fq"}')


def test_text_child_lines_only_is_an_error():
    with pytest.raises(ValueError):
        ls.parse_qdisc_text("qdisc fq 0: parent :1 limit 10000p\n")


def test_text_garbage_is_an_error():
    with pytest.raises(ValueError):
        ls.parse_qdisc_text("Segmentation fault\n")


def test_root_qdisc_falls_back_to_text_when_json_flag_printed_text():
    # Some tc builds accept -j but print plain text for qdiscs.
    assert ls.parse_root_qdisc(fixture("tc_text_fq_codel.txt")) == "fq_codel"


def test_root_qdisc_broken_json_falls_back_to_text_and_fails_cleanly():
    with pytest.raises(ValueError):
        ls.parse_root_qdisc('[{"kind": ')


def test_tc_json_unsupported():
    assert ls.tc_json_unsupported(255, "", fixture("tc_stderr_json_unknown.txt"))
    assert ls.tc_json_unsupported(255, 'Option "-json" is unknown, try "tc -help".', "")
    assert not ls.tc_json_unsupported(0, fixture("tc_json_pfifo.json"), "")
    assert not ls.tc_json_unsupported(1, "", fixture("tc_stderr_no_device.txt"))


def test_qdisc_kind_unknown():
    assert ls.qdisc_kind_unknown(fixture("tc_stderr_kind_unknown.txt"))
    assert ls.qdisc_kind_unknown("RTNETLINK answers: No such file or directory\n"
                                 "Error: Specified qdisc kind is unknown.\n")
    assert not ls.qdisc_kind_unknown(fixture("tc_stderr_no_device.txt"))
    assert not ls.qdisc_kind_unknown("")
    assert not ls.qdisc_kind_unknown(None)


@pytest.mark.parametrize("text, mtu", [("1500\n", 1500), ("9000", 9000), (" 1400 \n", 1400)])
def test_parse_mtu(text, mtu):
    assert ls.parse_mtu(text) == mtu


@pytest.mark.parametrize("text", ["", "abc\n", "-1\n", None])
def test_parse_mtu_rejects_garbage(text):
    with pytest.raises(ValueError):
        ls.parse_mtu(text)


# --- bounds -------------------------------------------------------------------------------

@pytest.mark.parametrize("mtu", [None, 576, 1400, 1500, 9000])
def test_mtu_in_range(mtu):
    assert ls.validate_mtu(mtu) is None


@pytest.mark.parametrize("mtu", [0, 68, 575, 9001, 65535, -1])
def test_mtu_out_of_range_names_option_and_range(mtu):
    msg = ls.validate_mtu(mtu)
    assert msg.startswith("mtu ")
    assert "576" in msg and "9000" in msg and str(mtu) in msg


@pytest.mark.parametrize("seconds", [None, 0, 10, 60, 3600])
def test_rollback_seconds_in_range(seconds):
    assert ls.validate_rollback_seconds(seconds) is None


@pytest.mark.parametrize("seconds", [1, 9, 3601, -5])
def test_rollback_seconds_out_of_range(seconds):
    msg = ls.validate_rollback_seconds(seconds)
    assert msg.startswith("rollback_seconds ")
    assert "10" in msg and "3600" in msg and str(seconds) in msg


@pytest.mark.parametrize("name", ["eth0", "d0", "enp3s0f1", "wg-ocean", "eth0.100", "a" * 15])
def test_interface_names_ok(name):
    assert ls.validate_interface_name(name) is None


@pytest.mark.parametrize("name", ["", ".", "..", "../eth0", "eth 0", "eth0:1", "a" * 16])
def test_interface_names_rejected(name):
    assert ls.validate_interface_name(name)


def test_missing_interface_message_lists_sorted():
    assert ls.missing_interface_message("eth9", ["lo", "eth1", "eth0"]) == \
        "interface eth9 does not exist; interfaces here: eth0, eth1, lo"
    assert ls.missing_interface_message("eth9", []).endswith("interfaces here: (none)")


# --- planning -------------------------------------------------------------------------------

def test_plan_nothing_requested():
    plan = ls.plan_link(1500, "noqueue")
    assert plan == {
        "mtu": "unchanged", "qdisc": "unchanged", "qdisc_shape": "root", "rollback": "none",
        "rollback_mtu": None, "mtu_before": 1500, "mtu_after": 1500,
        "qdisc_before": "noqueue", "qdisc_after": "noqueue", "verify": [], "changed": False,
    }


def test_plan_mtu_change_and_qdisc_available():
    plan = ls.plan_link(1500, "noqueue", want_mtu=1400, want_qdisc="fq", qdisc_available=True)
    assert (plan["mtu"], plan["qdisc"], plan["rollback"]) == ("changed", "changed", "none")
    assert (plan["mtu_after"], plan["qdisc_after"]) == (1400, "fq")
    assert plan["changed"] is True


def test_plan_qdisc_unavailable_keeps_current():
    plan = ls.plan_link(1400, "noqueue", want_mtu=1400, want_qdisc="fq", qdisc_available=False)
    assert (plan["mtu"], plan["qdisc"]) == ("unchanged", "unavailable")
    assert plan["qdisc_after"] == "noqueue"
    assert plan["changed"] is False


def test_plan_qdisc_unknown_availability_is_planned_as_change():
    plan = ls.plan_link(1500, "noqueue", want_qdisc="cake", qdisc_available=None)
    assert plan["qdisc"] == "changed"
    assert plan["changed"] is True


def test_plan_qdisc_already_set_ignores_probe():
    plan = ls.plan_link(1500, "fq", want_qdisc="fq", qdisc_available=False)
    assert plan["qdisc"] == "unchanged"


def test_plan_rollback_only_when_mtu_changes():
    assert ls.plan_link(1500, "fq", want_mtu=1400, rollback_seconds=60)["rollback"] == "arm"
    assert ls.plan_link(1400, "fq", want_mtu=1400, rollback_seconds=60)["rollback"] == "none"
    assert ls.plan_link(1500, "fq", want_mtu=1400, rollback_seconds=0)["rollback"] == "none"
    assert ls.plan_link(1500, "noqueue", want_qdisc="fq", qdisc_available=True,
                        rollback_seconds=60)["rollback"] == "none"


def test_plan_rollback_target_is_mtu_before():
    plan = ls.plan_link(1500, "fq", want_mtu=1400, rollback_seconds=60)
    assert plan["rollback_mtu"] == 1500


def test_plan_rollback_keeps_pending_target():
    # an earlier run moved 1500 -> 1400 and its rollback (to 1500) is still armed
    plan = ls.plan_link(1400, "fq", want_mtu=1450, rollback_seconds=60, pending_rollback_mtu=1500)
    assert (plan["rollback"], plan["rollback_mtu"]) == ("arm", 1500)


def test_plan_no_rollback_target_when_not_armed():
    assert ls.plan_link(1500, "fq", want_mtu=1400)["rollback_mtu"] is None
    assert ls.plan_link(1500, "fq", want_mtu=1400, rollback_seconds=60,
                        rollback_possible=False)["rollback_mtu"] is None


def test_plan_rollback_unavailable_without_systemd():
    plan = ls.plan_link(1500, "fq", want_mtu=1400, rollback_seconds=60, rollback_possible=False)
    assert plan["rollback"] == "unavailable"
    assert plan["changed"] is True


# --- rollback -------------------------------------------------------------------------------

def test_plan_pending_timer_reported_when_mtu_already_wanted():
    # re-run inside the window of an unconfirmed change: nothing to change, timer still armed
    plan = ls.plan_link(1400, "fq", want_mtu=1400, rollback_seconds=60, pending_rollback_mtu=1500)
    assert (plan["rollback"], plan["rollback_mtu"], plan["changed"]) == ("pending", 1500, False)
    plan = ls.plan_link(1400, "fq", pending_rollback_mtu=1500)
    assert plan["rollback"] == "pending"


def test_plan_verify_only_when_mtu_changes_or_a_timer_is_pending():
    peers = [{"peer": "a", "address": "198.18.2.11", "ipv6": False},
             {"peer": "b", "address": "2001:db8::2", "ipv6": True}]
    plan = ls.plan_link(1400, "fq", want_mtu=1500, verify_peers=peers)
    assert [(p["peer"], p["payload"]) for p in plan["verify"]] == [("a", 1472), ("b", 1452)]
    assert ls.plan_link(1500, "fq", want_mtu=1500, verify_peers=peers)["verify"] == []
    pending = ls.plan_link(1500, "fq", want_mtu=1500, verify_peers=peers, pending_rollback_mtu=1400)
    assert len(pending["verify"]) == 2
    assert ls.plan_link(1500, "fq", verify_peers=peers, pending_rollback_mtu=1400)["verify"] == []


def test_plan_mq_keeps_the_root():
    tree = ls.parse_qdisc_tree(fixture("tc_json_mq_all.json"))
    plan = ls.plan_link(1500, tree, want_qdisc="fq", qdisc_available=True)
    assert (plan["qdisc"], plan["qdisc_shape"]) == ("changed", "mq")
    assert (plan["qdisc_before"], plan["qdisc_after"]) == ("mq(pfifo_fast)", "mq(fq)")
    tree = ls.parse_qdisc_tree(fixture("tc_json_mq_fq_children.json"))
    assert ls.plan_link(1500, tree, want_qdisc="fq", qdisc_available=False)["qdisc"] == "unchanged"


@pytest.mark.parametrize("name, unit", [
    ("eth1", "trainnet-mtu-rollback-eth1"),
    ("d0", "trainnet-mtu-rollback-d0"),
    ("eth0.100", "trainnet-mtu-rollback-eth0.100"),
    ("wg-ocean_1", "trainnet-mtu-rollback-wg-ocean_1"),
    ("veth@x", "trainnet-mtu-rollback-veth_x40x"),
    ("a\\b", "trainnet-mtu-rollback-a_x5cb"),
])
def test_rollback_unit_name(name, unit):
    assert ls.rollback_unit_name(name) == unit


def test_rollback_unit_name_carries_the_netns():
    assert ls.rollback_unit_name("eth0", 4026532281) == "trainnet-mtu-rollback-eth0-ns4026532281"
    assert ls.rollback_unit_name("eth0", 1) != ls.rollback_unit_name("eth0", 2)


def test_rollback_netns_shared_with_pid1_needs_no_path():
    assert ls.rollback_netns((4026532281, 4), (4026532281, 4), []) == (4026532281, None, None)


def test_rollback_netns_other_than_pid1_is_pinned_by_its_named_path():
    named = [("/run/netns/a", (4026532999, 4)), ("/run/netns/side", (4026532300, 4))]
    assert ls.rollback_netns((4026532300, 4), (4026531840, 4), named) == \
        (4026532300, "/run/netns/side", None)


def test_rollback_netns_refused_without_a_path_or_evidence():
    netns_id, path, error = ls.rollback_netns((4026532300, 4), (4026531840, 4),
                                              [("/run/netns/a", (4026532999, 4)), ("/run/netns/b", None)])
    assert (netns_id, path) == (None, None) and "not in PID 1's" in error
    assert "needs root" in ls.rollback_netns((4026532300, 4), None, [])[2]
    assert ls.rollback_netns(None, (1, 4), [])[2]
    # same inode on another device is another namespace file system: not a match
    assert ls.rollback_netns((5, 4), (1, 4), [("/run/netns/x", (5, 9))])[2]


def test_rollback_argv_pins_the_netns():
    argv = ls.rollback_argv("/usr/bin/systemd-run", "u", 60, "/usr/sbin/ip", "eth0", 1500,
                            netns_path="/run/netns/side")
    assert "--property=NetworkNamespacePath=/run/netns/side" in argv
    assert argv.index("--property=NetworkNamespacePath=/run/netns/side") < argv.index("/usr/sbin/ip")


def test_rollback_argv():
    argv = ls.rollback_argv("/usr/bin/systemd-run", "trainnet-mtu-rollback-eth1", 60,
                            "/usr/sbin/ip", "eth1", 1500)
    assert argv[0] == "/usr/bin/systemd-run"
    assert "--unit=trainnet-mtu-rollback-eth1" in argv
    assert "--on-active=60s" in argv
    assert "--timer-property=AccuracySec=1s" in argv
    assert argv[-7:] == ["/usr/sbin/ip", "link", "set", "dev", "eth1", "mtu", "1500"]
    assert all(isinstance(arg, str) for arg in argv)


def test_parse_pending_rollback_mtu():
    text = fixture("systemctl_show_execstart.txt")
    assert ls.parse_pending_rollback_mtu(text, "d0") == 1500
    assert ls.parse_pending_rollback_mtu(text, "d1") is None
    assert ls.parse_pending_rollback_mtu("", "d0") is None
    assert ls.parse_pending_rollback_mtu(None, "d0") is None
    assert ls.parse_pending_rollback_mtu("ExecStart=", "d0") is None


def test_parse_pending_rollback_mtu_round_trips_rollback_argv():
    argv = ls.rollback_argv("/usr/bin/systemd-run", "u", 60, "/usr/sbin/ip", "eth1", 9000)
    cmd = " ".join(argv[argv.index("/usr/sbin/ip"):])
    show = "ExecStart={ path=/usr/sbin/ip ; argv[]=%s ; ignore_errors=no }" % cmd
    assert ls.parse_pending_rollback_mtu(show, "eth1") == 9000


# --- diff -----------------------------------------------------------------------------------

def test_render_state():
    assert ls.render_state(1500, "noqueue") == "mtu: 1500\nqdisc: noqueue\n"


def test_build_diff():
    assert ls.build_diff("eth1", 1500, "noqueue", 1400, "fq") == {
        "before_header": "interface eth1 (before)",
        "after_header": "interface eth1 (after)",
        "before": "mtu: 1500\nqdisc: noqueue\n",
        "after": "mtu: 1400\nqdisc: fq\n",
    }


# --- qdisc trees (finding 9: keep mq) ---------------------------------------------------------

def test_tree_of_kernel_default_mq():
    tree = ls.parse_qdisc_tree(fixture("tc_json_mq_default.json"))
    assert (tree["root"], tree["handle"]) == ("mq", "0:")
    assert [c["parent"] for c in tree["children"]] == [":1", ":2", ":3", ":4"]
    assert tree == ls.parse_qdisc_tree(fixture("tc_text_mq_default.txt"))
    assert ls.mq_needs_handle(tree)
    assert ls.describe_qdisc(tree) == "mq(pfifo_fast)"


def test_tree_json_and_text_agree_for_mq_with_handle():
    assert ls.parse_qdisc_tree(fixture("tc_json_mq_all.json")) == \
        ls.parse_qdisc_tree(fixture("tc_text_mq_all.txt"))


@pytest.mark.parametrize("name", ["tc_json_noqueue.json", "tc_text_noqueue.txt", "tc_json_tbf.json"])
def test_tree_of_single_root(name):
    tree = ls.parse_qdisc_tree(fixture(name))
    assert tree["children"] == [] and ls.qdisc_shape(tree) == "root"
    assert ls.qdisc_commands(tree, "fq") == [["root", "fq"]]


def test_tree_of_never_up_device():
    assert ls.parse_qdisc_tree(fixture("tc_json_empty.json"))["root"] == "noop"


def test_commands_for_mq_with_handle_replace_children_only():
    tree = ls.parse_qdisc_tree(fixture("tc_json_mq_all.json"))
    assert ls.qdisc_commands(tree, "fq") == [["parent", "1:%d" % i, "fq"] for i in range(1, 5)]
    mixed = ls.parse_qdisc_tree(fixture("tc_json_mq_mixed.json"))
    assert ls.qdisc_commands(mixed, "pfifo") == [["parent", "1:2", "pfifo"], ["parent", "1:4", "pfifo"]]
    assert ls.describe_qdisc(mixed) == "mq(pfifo,pfifo_fast)"


def test_commands_for_kernel_default_mq_give_it_a_handle_first():
    tree = ls.parse_qdisc_tree(fixture("tc_json_mq_default.json"))
    assert ls.qdisc_commands(tree, "fq") == [["root", "handle", "1:", "mq"]] + [
        ["parent", "1:%d" % i, "fq"] for i in range(1, 5)]


def test_mq_with_fq_children_is_already_fq():
    tree = ls.parse_qdisc_tree(fixture("tc_json_mq_fq_children.json"))
    assert ls.qdisc_is(tree, "fq") and not ls.qdisc_is(tree, "pfifo")
    assert ls.qdisc_commands(tree, "fq") == []


# --- DF probes (finding 5) ----------------------------------------------------------------------

def test_ping_argv():
    assert ls.ping_argv("/usr/bin/ping", "198.18.2.11", 1372) == [
        "/usr/bin/ping", "-4", "-n", "-c", "3", "-i", "0.2", "-W", "2", "-s", "1372", "-M", "do",
        "198.18.2.11"]
    small = ls.ping_argv("/usr/bin/ping", "2001:db8::2", 56, ipv6=True, dont_fragment=False)
    assert "-6" in small and "-M" not in small


def test_judge_probe():
    assert ls.judge_probe(None, 0) == "ok"
    assert ls.judge_probe(0, 1) == "too_big"
    assert ls.judge_probe(1, 1) == "peer_silent"


def test_reported_path_mtu():
    assert ls.reported_path_mtu(fixture_lm("ping_df_frag_needed.txt")) == 1400
    assert ls.reported_path_mtu("ping: local error: message too long, mtu=1400") == 1400
    assert ls.reported_path_mtu("100% packet loss") is None


def test_probe_failure_message_names_peer_and_size():
    probe = {"peer": "usw-gpu1.example", "address": "198.18.2.11", "ipv6": False, "payload": 1472}
    msg = ls.probe_failure_message("eth0", 1500, 1400, probe, "")
    assert "usw-gpu1.example (198.18.2.11)" in msg and "1500-byte" in msg and "-s 1472" in msg
    assert "rolled back to 1400" in msg


def test_mtu_limits_come_from_the_shared_module():
    from ansible_collections.longhaul.trainnet.plugins.module_utils import mtu
    assert (ls.MTU_MIN, ls.MTU_MAX) == (mtu.MTU_MIN, mtu.MTU_MAX)
    source = open(ls.__file__).read()
    assert "MTU_MIN = " not in source and "MTU_MAX = " not in source


def test_qdisc_choices_are_parameterless_kinds():
    assert ls.QDISC_CHOICES == ("fq", "fq_codel", "cake", "pfifo", "sfq")
