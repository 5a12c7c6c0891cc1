# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Entering a running container's namespaces with nsenter, written once for the podman_nsenter
connection and the lab's own commands on its hosts. Controller side, standard library only; reads
/proc/PID/stat, runs nothing itself.
"""

from __future__ import annotations


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
