"""Read an Ansible inventory through `ansible-inventory`, so the lab sees exactly what the playbooks see.

The lab needs plain data from the inventory (sites, links, host sites and addresses). Ansible's own
reader resolves it (every inventory plugin, group_vars/ and host_vars/, variable precedence): one
`ansible-inventory --list` gives each host's variables and the groups, one `--list --export` the
variables of group `all` as written. Values are not templated (strings with Jinja stay strings; the
lab does not use such values). Answers are cached per inventory until one of its files changes.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path


class InventoryError(ValueError):
    pass


@dataclass
class Inventory:
    path: Path
    hosts: dict[str, dict] = field(default_factory=dict)        # host -> resolved vars
    groups: dict[str, set[str]] = field(default_factory=dict)   # group -> hosts (transitive)
    all_vars: dict = field(default_factory=dict)                # vars of group `all`

    def groups_of(self, host: str) -> list[str]:
        return sorted(g for g, members in self.groups.items() if host in members and g != "all")


def _ansible_inventory_command() -> str:
    """ansible-inventory beside this Python (the project's .venv), else from PATH."""
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    found = shutil.which("ansible-inventory", path=search)
    if not found:
        raise InventoryError("ansible-inventory not found: run `source scripts/bootstrap.sh` (it installs Ansible in .venv)")
    return found


def _list(path: Path, export: bool) -> dict:
    # An inventory source Ansible cannot parse fails the command instead of giving an empty inventory.
    env = dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_FAILED="1", ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="1",
               ANSIBLE_NOCOLOR="1", LANG="C")
    argv = [_ansible_inventory_command(), "-i", str(path), "--list"] + (["--export"] if export else [])
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    except subprocess.TimeoutExpired as error:
        raise InventoryError(f"{path}: ansible-inventory took over 120 s") from error
    if proc.returncode != 0:
        detail = " ".join(line.strip() for line in proc.stderr.splitlines() if line.strip())
        detail = detail if len(detail) <= 600 else detail[:600] + " ..."
        raise InventoryError(f"{path}: ansible-inventory failed: {detail}")
    try:
        return json.loads(proc.stdout)
    except ValueError as error:
        raise InventoryError(f"{path}: ansible-inventory gave no JSON: {error}") from error


def _signature(path: Path) -> tuple:
    """Every file of the inventory with its modification time: a change reads it again."""
    base = path if path.is_dir() else path.parent
    files = [path] if path.is_file() else []
    for root, _dirs, names in os.walk(base):
        files.extend(Path(root) / name for name in names)
    return tuple(sorted((str(f), f.stat().st_mtime_ns) for f in files if f.exists()))


@lru_cache(maxsize=16)
def _read(path: Path, _signature_of_files: tuple) -> Inventory:
    listing, exported = _list(path, export=False), _list(path, export=True)
    direct = {name: set(body.get("hosts") or ()) for name, body in listing.items() if name != "_meta"}
    children = {name: set(body.get("children") or ()) for name, body in listing.items() if name != "_meta"}

    def transitive(group: str, seen: frozenset = frozenset()) -> set[str]:
        if group in seen:
            raise InventoryError(f"{path}: group {group} is its own descendant")
        members = set(direct.get(group, ()))
        for child in children.get(group, ()):
            members |= transitive(child, seen | {group})
        return members

    inventory = Inventory(path=path)
    inventory.groups = {group: transitive(group) for group in direct if group != "ungrouped" or direct[group]}
    hostvars = listing.get("_meta", {}).get("hostvars", {})
    every_host = set().union(*inventory.groups.values()) if inventory.groups else set()
    inventory.groups["all"] = every_host
    inventory.hosts = {host: dict(hostvars.get(host, {})) for host in sorted(every_host)}
    inventory.all_vars = dict(exported.get("all", {}).get("vars") or {})
    return inventory


def read_inventory(path: str | Path) -> Inventory:
    path = Path(path).resolve()
    if not path.exists():
        raise InventoryError(f"{path}: no such inventory")
    return copy.deepcopy(_read(path, _signature(path)))
