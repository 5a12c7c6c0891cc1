"""The lab description: inventory reading, validation (bad input is refused, naming the host or
link and the field), overrides, and the refusals that come before anything is created.
No root needed."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT, TWO_SITE_INVENTORY, two_site_raw

from trainnet_lab import cli
from trainnet_lab import lab as lab_module
from trainnet_lab.inventory import read_inventory
from trainnet_lab.lab import Lab, LabError
from trainnet_lab.spec import (LabSpec, SpecError, apply_link_overrides, build_spec,
                               spec_from_inventory)

LAB_INVENTORY = REPO_ROOT / "inventories" / "lab"


def problems_of(raw: dict, **kwargs) -> list[str]:
    with pytest.raises(SpecError) as caught:
        build_spec(raw, **kwargs)
    return caught.value.problems


# --- the default lab inventory --------------------------------------------------------------------

def test_default_inventory_describes_the_three_site_lab():
    spec = spec_from_inventory(read_inventory(LAB_INVENTORY))
    assert set(spec.sites) == {"cn-home", "us-west", "us-east"}
    by_site = {site: sorted(h.name for h in spec.hosts_in(site)) for site in spec.sites}
    assert by_site == {"cn-home": ["cn-gpu1", "cn-loader", "cn-master"],
                       "us-west": ["usw-anchor", "usw-egress1", "usw-egress2", "usw-gpu1", "usw-gpu2", "usw-store"],
                       "us-east": ["use-anchor", "use-egress1", "use-egress2", "use-gpu1"]}
    # the egress pool: four capped egress nodes, one object store
    assert {h.name for h in spec.hosts.values() if h.rate_mbit == 10} == {
        "usw-egress1", "usw-egress2", "use-egress1", "use-egress2"}
    assert dict(spec.hosts["usw-store"].object_store) == {"shards": 48, "shard_kib": 2048}
    pacific = spec.link_between("cn-home", "us-west")
    assert (pacific.delay_ms, pacific.rate_mbit, pacific.loss, pacific.mtu,
            pacific.icmp_blackhole) == (75, 50, 0.005, 1400, True)
    assert pacific.effective_queue_bytes == 937500  # one BDP: 50 Mbit/s x 150 ms
    assert spec.link_between("cn-home", "us-east").loss == 0.01
    assert spec.link_between("us-west", "us-east").rate_mbit == 100
    assert spec.seed == 42
    assert "gpu_nodes" in spec.hosts["cn-gpu1"].groups


def test_inventory_groups_and_host_vars_follow_the_fixed_interface():
    inventory = read_inventory(LAB_INVENTORY)
    groups = inventory.groups
    assert groups["home_master"] == {"cn-master"}
    assert groups["control_plane"] == {"usw-anchor", "use-anchor"}
    assert groups["gpu_nodes"] == {"cn-gpu1", "usw-gpu1", "usw-gpu2", "use-gpu1"}
    assert groups["loaders"] == {"cn-loader"}
    assert groups["egress_nodes"] == {"usw-egress1", "usw-egress2", "use-egress1", "use-egress2"}
    assert groups["object_store"] == {"usw-store"}
    for host, hostvars in inventory.hosts.items():
        assert hostvars["ansible_connection"] == "longhaul.trainnet.podman_nsenter"
        assert hostvars["ansible_host"] == f"trainnet-lab-{host}"
        assert hostvars["ansible_python_interpreter"] == "/usr/bin/python3"
        assert host in groups["site_" + hostvars["trainnet_site"].replace("-", "_")]
    assert inventory.all_vars["data_plane_interface"] == "eth0"


@pytest.mark.skipif(not shutil.which("ansible-inventory"), reason="ansible-inventory not on PATH")
def test_reader_agrees_with_ansible_inventory():
    listing = subprocess.run(["ansible-inventory", "-i", str(LAB_INVENTORY), "--list"],
                             capture_output=True, text=True, check=True, timeout=120).stdout
    hostvars = json.loads(listing)["_meta"]["hostvars"]
    ours = read_inventory(LAB_INVENTORY).hosts
    assert set(hostvars) == set(ours)
    for host, values in hostvars.items():
        for key in ("trainnet_site", "trainnet_lab_address", "ansible_host", "trainnet_wan_links",
                    "trainnet_sites", "trainnet_lab_seed"):
            assert ours[host][key] == values[key], (host, key)


def test_spec_round_trips_through_the_state_file_form():
    spec = spec_from_inventory(read_inventory(LAB_INVENTORY))
    assert LabSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_sites_option_builds_a_smaller_lab():
    spec = spec_from_inventory(read_inventory(LAB_INVENTORY), sites=["cn-home", "us-east"])
    assert set(spec.sites) == {"cn-home", "us-east"}
    assert {h.site for h in spec.hosts.values()} == {"cn-home", "us-east"}
    assert [link.name for link in spec.links] == ["cn-home<->us-east"]
    with pytest.raises(SpecError, match="unknown site mars"):
        spec_from_inventory(read_inventory(LAB_INVENTORY), sites=["mars"])


def test_link_overrides_change_or_add_links():
    raw = two_site_raw(loss=0.0)
    links = apply_link_overrides(raw["links"], ["far,near:loss=0.02,delay_ms=10"])
    assert links[0]["loss"] == 0.02 and links[0]["delay_ms"] == 10
    assert raw["links"][0]["loss"] == 0.0  # the original is not modified
    spec = spec_from_inventory(read_inventory(TWO_SITE_INVENTORY), host_kind="netns",
                               link_overrides=["near,far:mtu=1400,icmp_blackhole=true"])
    assert spec.links[0].mtu == 1400 and spec.links[0].icmp_blackhole is True
    with pytest.raises(SpecError, match="expected SITE_A,SITE_B"):
        apply_link_overrides([], ["near-far-loss"])


def test_emulator_config_has_both_directions_of_each_link():
    spec = build_spec(two_site_raw(loss=0.01), name="trainnet-labtest", host_kind="netns")
    config = spec.emulator_config("/run/trainnet-lab/trainnet-labtest")
    assert [(d["src"], d["dst"]) for d in config["links"]] == [("near", "far"), ("far", "near")]
    assert all(d["loss"] == 0.01 and d["queue_bytes"] == 937500 for d in config["links"])
    assert {s["router_address"] for s in config["sites"]} == {"198.19.1.1", "198.19.2.1"}
    assert spec.router_netns("near") == "trainnet-labtest-rt-near"
    assert spec.host_netns("near1") == spec.container("near1") == "trainnet-labtest-near1"
    assert len(LabSpec.router_veth("a-very-long-host-name")) <= 15


# --- bad input: refused, naming the link or host and the field ------------------------------------

@pytest.mark.parametrize("field, value, expected", [
    ("delay_ms", -5, "link near<->far: delay_ms = -5"),
    ("loss", 1.0, "link near<->far: loss = 1.0 must be a probability in [0, 1)"),
    ("loss", -0.1, "link near<->far: loss = -0.1"),
    ("rate_mbit", 0, "link near<->far: rate_mbit = 0 must be a rate in Mbit/s above 0"),
    ("mtu", 500, "link near<->far: mtu = 500 must be an integer from 576"),
    ("jitter_ms", -1, "link near<->far: jitter_ms = -1"),
    ("queue_bytes", 100, "link near<->far: queue_bytes = 100 cannot hold one packet"),
    ("icmp_blackhole", "yes", "link near<->far: icmp_blackhole = 'yes' must be true or false"),
    ("delay", 10, "link near<->far: unknown field 'delay'"),
])
def test_bad_link_fields_are_refused(field, value, expected):
    raw = two_site_raw()
    raw["links"][0][field] = value
    problems = problems_of(raw)
    assert any(p.startswith(expected) for p in problems), problems


def test_link_to_an_unknown_site_and_duplicate_links_are_refused():
    raw = two_site_raw()
    raw["links"].append({"sites": ["near", "moon"], "delay_ms": 1, "rate_mbit": 1})
    raw["links"].append({"sites": ["far", "near"], "delay_ms": 1, "rate_mbit": 1})
    problems = problems_of(raw)
    assert "link near<->moon: sites: unknown site 'moon'" in problems
    assert any(p.startswith("link far<->near: the sites are already joined") for p in problems)


def test_host_in_an_unknown_site_is_refused():
    raw = two_site_raw()
    raw["hosts"]["far1"]["site"] = "moon"
    problems = problems_of(raw)
    assert any(p.startswith("host far1: trainnet_site = 'moon' is not a known site")
               for p in problems), problems


def test_two_hosts_with_one_address_are_refused():
    raw = two_site_raw()
    raw["hosts"]["near2"] = {"site": "near", "address": "198.19.1.10"}
    problems = problems_of(raw)
    assert ("host near2: trainnet_lab_address = 198.19.1.10 is already the address of host near1"
            in problems), problems


@pytest.mark.parametrize("address, expected", [
    ("198.19.2.99", "is outside the LAN of site near"),
    ("198.19.1.1", "is the site router's address"),
    ("198.19.1.255", "is the network or broadcast address"),
    ("not-an-ip", "is not an IPv4 address"),
])
def test_host_addresses_must_fit_their_site(address, expected):
    raw = two_site_raw()
    raw["hosts"]["near1"]["address"] = address
    problems = problems_of(raw)
    assert any(p.startswith("host near1: trainnet_lab_address") and expected in p
               for p in problems), problems


def test_sites_must_use_separate_lab_ranges():
    raw = two_site_raw()
    raw["sites"]["far"]["lan"] = "198.19.1.128/25"
    raw["sites"]["moon"] = {"lan": "10.0.0.0/24"}
    problems = problems_of(raw)
    assert any(p.startswith("site far: lan = 198.19.1.128/25 overlaps site near") for p in problems)
    assert any(p.startswith("site moon: lan = 10.0.0.0/24 is outside 198.18.0.0/15")
               for p in problems)


def test_every_problem_is_reported_at_once():
    raw = two_site_raw(delay_ms=-1, loss=2)
    raw["hosts"]["far1"]["site"] = "moon"
    assert len(problems_of(raw)) == 3


def test_lab_names_must_carry_the_prefix():
    assert any("must begin with 'trainnet-lab'" in p
               for p in problems_of(two_site_raw(), name="mylab"))


def test_inventory_level_inconsistencies_are_refused(tmp_path):
    inventory = copy_inventory(LAB_INVENTORY, tmp_path)
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    hosts["all"]["children"]["site_us_west"]["hosts"]["usw-gpu1"]["ansible_host"] = "elsewhere"
    hosts["all"]["children"]["site_us_west"]["hosts"]["usw-gpu2"]["trainnet_site"] = "us-east"
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    with pytest.raises(SpecError) as caught:
        spec_from_inventory(read_inventory(inventory))
    text = str(caught.value)
    assert "host usw-gpu1: ansible_host = 'elsewhere'" in text
    assert "host usw-gpu2: is in group site_us_west but trainnet_site = us-east" in text


def copy_inventory(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / "inventory"
    shutil.copytree(source, target)
    return target


# --- the command refuses before creating anything ----------------------------------------------

def test_lab_up_with_bad_input_refuses_and_creates_nothing(tmp_path, capsys):
    inventory = copy_inventory(LAB_INVENTORY, tmp_path)
    wan_file = inventory / "group_vars" / "all" / "wan.yml"
    wan = yaml.safe_load(wan_file.read_text())
    wan["trainnet_wan_links"][1]["loss"] = 1.5
    wan["trainnet_wan_links"][2]["mtu"] = 200
    wan_file.write_text(yaml.safe_dump(wan))
    state_root = tmp_path / "state"
    code = cli.main(["up", "-i", str(inventory), "--state-root", str(state_root)])
    err = capsys.readouterr().err
    assert code == 2
    assert "refused, nothing was created" in err
    assert "link cn-home<->us-east: loss = 1.5" in err
    assert "link us-west<->us-east: mtu = 200" in err
    assert not state_root.exists()


def test_validate_command_accepts_the_lab_inventory(capsys):
    assert cli.main(["validate", "-i", str(LAB_INVENTORY)]) == 0
    assert "3 sites, 13 hosts, 3 links: valid" in capsys.readouterr().out


def test_up_refuses_without_root(monkeypatch, tmp_path):
    monkeypatch.setattr(lab_module.os, "geteuid", lambda: 1000)
    lab = Lab(build_spec(two_site_raw(), name="trainnet-labtest"), tmp_path)
    with pytest.raises(LabError, match="needs root"):
        lab.up(log=lambda *_: None)
    assert not (tmp_path / "trainnet-labtest").exists()


def test_up_refuses_without_podman_or_image(monkeypatch, tmp_path):
    monkeypatch.setattr(lab_module.os, "geteuid", lambda: 0)
    real_which = shutil.which
    monkeypatch.setattr(lab_module.shutil, "which",
                        lambda tool: None if tool == "podman" else real_which(tool) or tool)
    monkeypatch.setattr(lab_module.Path, "exists", lambda self: True)
    monkeypatch.setattr(lab_module.netns, "read_sysctl", lambda key: "reno cubic bbr")
    lab = Lab(build_spec(two_site_raw(), name="trainnet-labtest", host_kind="container"), tmp_path)
    with pytest.raises(LabError, match="podman is not installed"):
        lab.preflight()

    monkeypatch.setattr(lab_module.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(lab_module, "podman", lambda *args, **kwargs: subprocess.CompletedProcess(
        args, 1, "", "no such image"))
    with pytest.raises(LabError, match="image localhost/trainnet-debian12:latest is missing"):
        lab.preflight()


def test_two_site_fixture_inventory_is_valid():
    spec = spec_from_inventory(read_inventory(TWO_SITE_INVENTORY), host_kind="netns",
                               name="trainnet-labtest")
    expected = build_spec(copy.deepcopy(two_site_raw(jitter_ms=0, loss=0.0, queue_bytes=0,
                                                     mtu=1500, icmp_blackhole=False)),
                          name="trainnet-labtest", host_kind="netns")
    assert spec.links == expected.links
    assert {h: (x.site, x.address) for h, x in spec.hosts.items()} == \
        {h: (x.site, x.address) for h, x in expected.hosts.items()}


# --- egress-pool host settings (rate cap, object store) -------------------------------------------

def test_host_rate_cap_and_object_store_round_trip_and_are_validated():
    from trainnet_lab.spec import build_spec
    raw = {"sites": {"a": {"lan": "198.18.50.0/24"}}, "links": [],
           "hosts": {"e": {"site": "a", "address": "198.18.50.10", "rate_mbit": 10},
                     "s": {"site": "a", "address": "198.18.50.11", "object_store": {"shards": 2, "shard_kib": 4}},
                     "g": {"site": "a", "address": "198.18.50.12"}}}
    spec = build_spec(raw)
    assert spec.hosts["e"].rate_mbit == 10.0 and dict(spec.hosts["s"].object_store) == {"shards": 2, "shard_kib": 4}
    data = spec.to_dict()
    # a host without them serialises as before (a running lab's saved topology stays equal)
    assert data["hosts"]["g"] == {"site": "a", "address": "198.18.50.12", "groups": []}
    assert type(spec).from_dict(data).topology() == spec.topology()
    bad = dict(raw, hosts={"e": {"site": "a", "address": "198.18.50.10", "rate_mbit": -1},
                           "s": {"site": "a", "address": "198.18.50.11", "object_store": {"shards": 0, "shard_kib": 4}},
                           "t": {"site": "a", "address": "198.18.50.12", "object_store": {"shards": 1}}})
    with pytest.raises(SpecError) as caught:
        build_spec(bad)
    text = "\n".join(caught.value.problems)
    assert "host e: trainnet_lab_rate_mbit = -1 must be a number of Mbit/s in 0-10000" in text
    assert "host s: trainnet_lab_object_store.shards = 0 must be an integer in 1-4096" in text
    assert "host t: trainnet_lab_object_store must be a mapping with exactly shards, shard_kib" in text


def test_object_store_sums_are_derived_from_the_seed():
    from trainnet_lab import object_store
    sums = object_store.shard_sums(42, 3, 4)
    assert sums == object_store.shard_sums(42, 3, 4) and len(set(sums.values())) == 3
    assert sums != object_store.shard_sums(43, 3, 4)
    import hashlib
    assert sums["shard-0001.bin"] == hashlib.sha256(object_store.shard_bytes(42, 1, 4)).hexdigest()
    listing = object_store.shard_list("usw-store", sums)
    assert listing.splitlines()[0] == sums["shard-0000.bin"] + " https://usw-store/shards/shard-0000.bin"
    assert object_store.parse_sums("%s  shard-0000.bin\n" % sums["shard-0000.bin"]) == {"shard-0000.bin": sums["shard-0000.bin"]}
