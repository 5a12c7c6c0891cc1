# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection to a running podman container that enters its namespaces with nsenter."""

from __future__ import annotations

DOCUMENTATION = r"""
name: podman_nsenter
short_description: Run tasks in a running podman container by entering its namespaces
version_added: 0.2.0
author:
  - longhaul.trainnet maintainers (@longhaul)
description:
  - Runs commands in a running podman container on the controller with C(nsenter), entering the
    mount, UTS, IPC, network and PID namespaces of the container's first process, with the
    container's environment (C(.Config.Env)), its root and working directory. No container
    runtime starts per command; C(podman inspect) runs once per container, its answer cached on
    the controller until that process is gone.
  - "What it costs, measured on this project's 2-core machine with an idle systemd container:
    ten C(podman exec <container> true) took 1.18 s, ten C(nsenter) into it 0.03 s; a playbook of
    twenty C(command) tasks took 13.8 s with M(longhaul.trainnet.podman_exec) and 7.3 s with this
    connection (about 0.59 and 0.27 s per module call, Ansible's start-up of about 2 s included
    in both). Under load the gap widens: while site.yml ran on the lab (load 15), ten C(podman
    exec) took 10.3 s."
  - Modules are pipelined (on the module's standard input) and files are copied through standard
    input and output of C(cat), as with M(longhaul.trainnet.podman_exec) (this connection is that
    one with another way into the container); become works as on any host, inside the container.
  - The command runs in the controller's cgroup, not the container's, and with the controller's
    resource limits, where C(podman exec) applies the container's; the lab and the molecule
    scenarios set none that a task depends on.
  - Needs C(nsenter) (util-linux) and root on the controller, C(cat) and C(/bin/sh) in the container.
extends_documentation_fragment:
  - longhaul.trainnet.podman_container
options:
  remote_user:
    description:
      - User (numeric UID, or C(root)) the commands run as inside the container; root when not set.
    type: str
    vars:
      - name: ansible_user
      - name: ansible_podman_user
  nsenter_executable:
    description:
      - The nsenter executable on the controller.
    type: str
    default: nsenter
    vars:
      - name: ansible_nsenter_executable
  cache_dir:
    description:
      - Directory on the controller for the containers' process IDs and environments (created 0700).
    type: path
    default: /run/trainnet-podman-nsenter
    vars:
      - name: ansible_podman_nsenter_cache_dir
"""

import json
import os
import subprocess
import tempfile

from ansible.errors import AnsibleConnectionFailure
from ansible.module_utils.common.process import get_bin_path
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible_collections.longhaul.trainnet.plugins.connection.podman_exec import Connection as PodmanExec
from ansible_collections.longhaul.trainnet.plugins.plugin_utils.nsenter import inspect_argv, is_current, nsenter_argv, parse_target
from ansible.utils.display import Display

display = Display()


def cached_target(path):
    """The cached {pid, start, env} of a container, or None when absent, unreadable or stale."""
    try:
        with open(path) as handle:
            entry = json.load(handle)
    except (OSError, ValueError):
        return None
    # An entry must name a live process, the one it was written for.
    if not isinstance(entry, dict) or not isinstance(entry.get('env'), list) or not is_current(entry):
        return None
    return entry


class Connection(PodmanExec):
    """nsenter into the container's namespaces, with the module (or the file) on standard input."""

    transport = 'longhaul.trainnet.podman_nsenter'

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._nsenter = None
        self._target = None

    def _connect(self):
        if not self._connected:
            try:
                self._nsenter = get_bin_path(self.get_option('nsenter_executable'))
                self._podman = get_bin_path(self.get_option('podman_executable'))
            except ValueError as exc:
                raise AnsibleConnectionFailure('podman_nsenter needs nsenter and podman on the controller: %s' % exc) from exc
            self._target = self._find_target()
            self._connected = True
        return self

    def _cache_path(self):
        directory = self.get_option('cache_dir')
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.stat(directory)
        if info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise AnsibleConnectionFailure('podman_nsenter: %s must be a 0700 directory of this user' % directory)
        name = self.get_option('remote_addr').replace('/', '_')
        return os.path.join(directory, name + '.json')

    def _find_target(self):
        path = self._cache_path()
        entry = cached_target(path)
        if entry is not None:
            return entry
        container = self.get_option('remote_addr')
        proc = subprocess.run(inspect_argv(self._podman, container),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        try:
            if proc.returncode != 0:
                raise ValueError(to_native(proc.stderr, errors='surrogate_or_replace').strip())
            entry = parse_target(to_native(proc.stdout, errors='surrogate_or_replace'))
        except ValueError as exc:
            raise AnsibleConnectionFailure('podman_nsenter: container %s: %s' % (container, exc)) from exc
        handle, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.entry-')
        with os.fdopen(handle, 'w') as out:
            json.dump(entry, out)
        os.replace(tmp, path)   # forks of one run may race: the last whole file wins
        return entry

    def _exec_argv(self, argv, interactive):
        self._connect()
        try:
            command = nsenter_argv(self._nsenter, self._target['pid'], self._target['env'],
                                   self.get_option('remote_user'), argv)
        except ValueError as exc:
            raise AnsibleConnectionFailure('podman_nsenter: %s' % exc) from exc
        return [to_bytes(part, errors='surrogate_or_strict') for part in command]

    def close(self):
        super().close()
        self._target = None
