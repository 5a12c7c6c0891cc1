# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Entering a running container's namespaces with nsenter, written once for the podman_nsenter
connection, the lab's own commands on its hosts and the molecule scenarios' testinfra backend.
Controller side, standard library only; reads /proc/PID/stat, runs nothing itself (callers run
inspect_argv and nsenter_argv their own way).
"""

from __future__ import annotations

import json

# What nsenter needs from podman: the container's first process and its environment.
INSPECT_FORMAT = '{{json .State.Pid}} {{json .Config.Env}}'


def process_start_time(pid):
    """Start time of PID in clock ticks since boot (field 22 of /proc/PID/stat), None when gone.
    A PID with the start time seen earlier is the same process (PIDs are reused, start times not)."""
    try:
        with open('/proc/%d/stat' % int(pid), 'rb') as handle:
            stat = handle.read().decode('ascii', 'replace')
    except (OSError, ValueError):
        return None
    # The command name (field 2) may hold spaces and parentheses: count from its closing one.
    fields = stat[stat.rfind(')') + 2:].split()
    return fields[19] if len(fields) > 19 else None


def nsenter_argv(nsenter, pid, env, user, argv):
    """nsenter into every namespace of PID but the user and cgroup ones, with its root and working
    directory, then env -i with ENV (the container's environment: the caller's must not leak in),
    then ARGV. USER is None/root or a numeric UID; anything else is a ValueError."""
    command = [nsenter, '--target', str(pid), '--mount', '--uts', '--ipc', '--net', '--pid', '--root', '--wd']
    if user not in (None, '', 'root', '0', 0):
        if not str(user).isdigit():
            raise ValueError('remote_user must be a numeric UID or root, not %r' % (user,))
        command += ['--setuid', str(user), '--setgid', str(user)]
    return command + ['--', '/usr/bin/env', '-i'] + list(env) + list(argv)


def inspect_argv(podman, container):
    """The podman command whose output parse_target reads."""
    return [podman, 'inspect', '--type', 'container', '--format', INSPECT_FORMAT, container]


def parse_target(text):
    """{'pid', 'start', 'env'} of a running container from inspect_argv's output; a ValueError that
    says why when it cannot be entered."""
    try:
        pid_text, env_text = text.strip().split(' ', 1)
        pid, env = int(pid_text), json.loads(env_text) or []
    except ValueError as exc:
        raise ValueError('unexpected podman inspect output %r' % (text[:200],)) from exc
    if pid <= 0:
        raise ValueError('not running')
    start = process_start_time(pid)
    if start is None:
        # podman's state can outlive the process (a host that was suspended or rebooted).
        raise ValueError('podman reports PID %d but no such process exists; restart the container' % pid)
    return {'pid': pid, 'start': start, 'env': [str(item) for item in env]}


def is_current(target):
    """True while TARGET's process still runs: the same PID with the same start time (a restarted
    container has another first process, a reused PID another start time)."""
    try:
        pid = int(target['pid'])
    except (KeyError, TypeError, ValueError):
        return False
    start = process_start_time(pid) if pid > 0 else None
    return start is not None and start == target.get('start')
