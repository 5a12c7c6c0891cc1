"""Read an Ansible YAML inventory (hosts.yml, group_vars/, host_vars/) with PyYAML.

The lab needs only plain data from the inventory (sites, links, host sites and addresses), so it
reads the files directly instead of depending on ansible-inventory. Variable precedence follows
Ansible's for the parts used here: group `all` < other groups by depth then name < host vars;
within a level, inventory-file vars < group_vars/ or host_vars/ files. Values are not templated
(strings with Jinja stay strings; the lab does not use such values).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

INVENTORY_FILE_NAMES = ("hosts.yml", "hosts.yaml", "inventory.yml", "inventory.yaml")


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


def _load_yaml(path: Path):
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise InventoryError(f"{path}: not valid YAML: {error}") from error


def _vars_from_dir(base: Path, name: str) -> dict:
    """group_vars/<name>.yml, group_vars/<name>/*.yml (sorted), as Ansible loads them."""
    merged: dict = {}
    for candidate in (base / f"{name}.yml", base / f"{name}.yaml", base / name):
        if candidate.is_file():
            merged.update(_load_yaml(candidate))
        elif candidate.is_dir():
            for part in sorted(candidate.iterdir()):
                if part.suffix in (".yml", ".yaml") and part.is_file():
                    content = _load_yaml(part)
                    if not isinstance(content, dict):
                        raise InventoryError(f"{part}: expected a mapping of variables")
                    merged.update(content)
    return merged


def read_inventory(path: str | Path) -> Inventory:
    path = Path(path)
    if path.is_dir():
        inventory_file = next((path / n for n in INVENTORY_FILE_NAMES if (path / n).is_file()), None)
        if inventory_file is None:
            raise InventoryError(f"{path}: no {' or '.join(INVENTORY_FILE_NAMES)} found")
        base = path
    elif path.is_file():
        inventory_file, base = path, path.parent
    else:
        raise InventoryError(f"{path}: no such inventory")

    document = _load_yaml(inventory_file)
    if not isinstance(document, dict):
        raise InventoryError(f"{inventory_file}: expected a mapping of groups")

    group_inline_vars: dict[str, dict] = {}
    group_depth: dict[str, int] = {"all": 0}
    direct_members: dict[str, set[str]] = {}
    children: dict[str, set[str]] = {}
    host_inline_vars: dict[str, dict] = {}

    def walk(name: str, body, depth: int) -> None:
        body = body or {}
        if not isinstance(body, dict):
            raise InventoryError(f"{inventory_file}: group {name}: expected a mapping")
        group_depth[name] = max(group_depth.get(name, 0), depth)
        group_inline_vars.setdefault(name, {}).update(body.get("vars") or {})
        members = direct_members.setdefault(name, set())
        for host, host_vars in (body.get("hosts") or {}).items():
            members.add(host)
            host_inline_vars.setdefault(host, {}).update(host_vars or {})
        for child, child_body in (body.get("children") or {}).items():
            children.setdefault(name, set()).add(child)
            walk(child, child_body, depth + 1)

    for top_name, top_body in document.items():
        walk(top_name, top_body, 0 if top_name == "all" else 1)

    def transitive(group: str, seen: frozenset = frozenset()) -> set[str]:
        if group in seen:
            raise InventoryError(f"{inventory_file}: group {group} is its own descendant")
        members = set(direct_members.get(group, ()))
        for child in children.get(group, ()):
            members |= transitive(child, seen | {group})
        return members

    inventory = Inventory(path=path)
    all_hosts = set(host_inline_vars)
    for group in group_depth:
        inventory.groups[group] = transitive(group)
    inventory.groups["all"] = all_hosts

    group_vars_dir, host_vars_dir = base / "group_vars", base / "host_vars"
    resolved_group_vars = {g: {**group_inline_vars.get(g, {}), **_vars_from_dir(group_vars_dir, g)}
                           for g in group_depth}
    inventory.all_vars = resolved_group_vars["all"]
    ordered_groups = sorted((g for g in group_depth if g != "all"),
                            key=lambda g: (group_depth[g], g))
    for host in sorted(all_hosts):
        merged = dict(inventory.all_vars)
        for group in ordered_groups:
            if host in inventory.groups[group]:
                merged.update(resolved_group_vars[group])
        merged.update(host_inline_vars.get(host, {}))
        merged.update(_vars_from_dir(host_vars_dir, host))
        inventory.hosts[host] = merged
    return inventory
