"""Verify the training_job role on a rendezvous anchor and two training nodes joined by a bridge: the
store serves only its address, the launcher and the quoted env file, preflight on each node, and
playbooks/train.yml end to end - a verify run whose sums are exact on both ranks, a training run
whose checkpoint manifests match their files, and a refused job that starts nothing."""

import json
import os
import subprocess
import time

import testinfra
import testinfra.utils.ansible_runner

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PROJECT = os.environ["MOLECULE_PROJECT_DIRECTORY"]
STORE, GPU1, GPU2 = "trainnet-molecule-tj-store", "trainnet-molecule-tj-gpu1", "trainnet-molecule-tj-gpu2"

testinfra_hosts = ["podman-nsenter://" + name for name in
                   testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("all")]


def on(name):
    return testinfra.get_host("podman-nsenter://" + name)


def train(tmp_path, run_id, *extra):
    return subprocess.run(
        ["ansible-playbook", "-i", INVENTORY, os.path.join(PROJECT, "playbooks/train.yml"),
         "-e", "training_job_run_id=" + run_id, "-e", "training_job_results_dir=" + str(tmp_path), *extra],
        env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"),
        capture_output=True, text=True, timeout=600, check=False)


def events(tmp_path, run_id):
    out = {}
    for host_dir in sorted((tmp_path / run_id).iterdir()):
        out[host_dir.name] = [json.loads(line) for log in sorted(host_dir.glob("*.jsonl"))
                              for line in log.read_text().splitlines() if line.strip()]
    return out


def test_store_serves_only_the_rendezvous_address():
    store = on(STORE)
    assert store.service("trainnet-rendezvous-store.service").is_running
    assert store.service("trainnet-rendezvous-store.service").is_enabled
    listening = store.check_output("ss -Htln 'sport = :29400'")
    assert "192.0.2.3:29400" in listening and "0.0.0.0:29400" not in listening and "*:29400" not in listening, listening
    # Not a training node: no launcher there.
    assert not store.file("/usr/local/bin/trainnet-train").exists


def test_launcher_env_file_and_preflight_on_training_nodes():
    for name in (GPU1, GPU2):
        node = on(name)
        launcher = node.file("/usr/local/bin/trainnet-train")
        assert launcher.mode == 0o755 and launcher.user == "root"
        env = node.file("/etc/trainnet/training_job.env").content_string
        assert "TRAINNET_PYTHON=/usr/bin/python3\n" in env and "PYTHONPATH=/opt/trainnet-torch\n" in env, env
        assert ("TRAINNET_CHECKPOINT_WRITER=true\n" in env) == (name == GPU2), env
        assert "TRAINNET_SYNC_GROUPS=2\n" in env and "OMP_NUM_THREADS=1\n" in env, env
        site = "cn-home" if name == GPU1 else "us-west"
        assert "TRAINNET_SYNC_TOPOLOGY=site\n" in env and f"TRAINNET_SITE={site}\n" in env, env
        pre = node.run("/usr/local/bin/trainnet-train --preflight")
        assert pre.rc == 0 and "rendezvous 192.0.2.3:29400" in pre.stdout, pre.stdout + pre.stderr


def test_verify_run_sums_right_on_both_ranks(tmp_path):
    proc = train(tmp_path, "mol-verify", "-e", "training_job_mode=verify", "-e", "training_job_verify_elements=262144")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    got = events(tmp_path, "mol-verify")
    assert sorted(got) == [GPU1, GPU2], sorted(got)
    done = [e for ev in got.values() for e in ev if e["event"] == "verify_done"]
    assert sorted(e["rank"] for e in done) == [0, 1] and all(e["ok"] for e in done), done
    cases = {(e["rank"], e["case"]) for ev in got.values() for e in ev if e["event"] == "verify" and e["ok"]}
    assert cases == {(r, c) for r in (0, 1) for c in ("default_group", "sync_groups", "site_ring_groups", "site_groups")}, cases


def test_training_run_writes_checkpoints_with_matching_manifests(tmp_path):
    proc = train(tmp_path, "mol-train", "-e", "training_job_steps=4", "-e", "training_job_checkpoint_every=2",
                 "-e", '{"training_job_workload_args": ["--width", "256"]}')
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    got = events(tmp_path, "mol-train")
    steps = [e for e in got[GPU1] if e["event"] == "step"]
    assert [e["step"] for e in steps] == [1, 2, 3, 4] and all(e["world_size"] == 2 for e in steps), steps
    # Only the writer (gpu2) checkpoints; each manifest names a file whose size and SHA-256 match.
    writer = on(GPU2)
    manifests = writer.check_output("ls /var/lib/trainnet/checkpoints/mol-train/").split()
    manifests = sorted(m for m in manifests if m.endswith(".manifest.json"))
    assert len(manifests) == 2, manifests
    for name in manifests:
        manifest = json.loads(writer.file("/var/lib/trainnet/checkpoints/mol-train/" + name).content_string)
        path = "/var/lib/trainnet/checkpoints/mol-train/" + manifest["file"]
        assert writer.file(path).size == manifest["size"]
        assert writer.check_output("sha256sum %s", path).split()[0] == manifest["sha256"]
    assert not on(GPU1).file("/var/lib/trainnet/checkpoints/mol-train").listdir()
    # The manifests reach the home master (rsync every 3 s here), byte for byte.
    master = on(STORE)
    received = "/var/lib/trainnet/manifests/%s/mol-train/" % GPU2
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and sorted(master.file(received).listdir() if master.file(received).exists else []) != manifests:
        time.sleep(0.5)
    assert sorted(master.file(received).listdir()) == manifests  # manifests only, no checkpoint
    for name in manifests:
        assert master.file(received + name).content_string == writer.file(
            "/var/lib/trainnet/checkpoints/mol-train/" + name).content_string


def test_manifest_secret_files_are_root_only():
    for name, path in ((STORE, "/etc/trainnet/manifests.secret"), (STORE, "/etc/trainnet/rsyncd-manifests.secrets"),
                       (GPU2, "/etc/trainnet/manifests.password")):
        secret = on(name).file(path)
        assert secret.mode == 0o600 and secret.user == "root", (name, path)
    assert on(STORE).file("/etc/trainnet/manifests.secret").content_string.strip() in \
        on(GPU2).file("/etc/trainnet/manifests.password").content_string
    assert not on(GPU1).file("/etc/trainnet/manifests.password").exists  # not a checkpoint writer
    # The receiver listens on its address only.
    listening = on(STORE).check_output("ss -Htln 'sport = :8873'")
    assert "192.0.2.3:8873" in listening and "0.0.0.0:8873" not in listening, listening


def test_a_node_refusing_preflight_stops_the_job_before_it_starts(tmp_path):
    node = on(GPU1)
    env = "/etc/trainnet/data_plane.env"
    node.check_output("cp %s %s.saved && sed -i 's/^GLOO_SOCKET_IFNAME=.*/GLOO_SOCKET_IFNAME=wg-missing/' %s", env, env, env)
    try:
        proc = train(tmp_path, "mol-refused")
    finally:
        node.check_output("mv %s.saved %s", env, env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "Preflight refused the job on 1 node(s)" in out and GPU1 in out and "wg-missing" in out, out[-3000:]
    for name in (GPU1, GPU2):
        assert not on(name).file("/var/log/trainnet/mol-refused").exists, name
