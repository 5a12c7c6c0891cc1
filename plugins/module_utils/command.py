# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one way the modules run an external command: C locale (its output is parsed), argv only
(no shell), and a time limit enforced here rather than by coreutils `timeout`, so a hung `ip`,
`tc`, `ping` or `iperf3` cannot stall a play on a host without coreutils.

Touches: starts the command as a child process in its own session and, when the limit passes,
sends SIGTERM (or the given signal) to that session, then SIGKILL after a grace period.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal as signals
import subprocess

C_LOCALE = {'LANG': 'C', 'LC_ALL': 'C'}
KILL_GRACE = 2.0


class CommandResult(object):
    """rc, stdout, stderr (text) and whether the time limit stopped the command."""

    __slots__ = ('rc', 'out', 'err', 'timed_out')

    def __init__(self, rc, out, err, timed_out=False):
        self.rc = rc
        self.out = out
        self.err = err
        self.timed_out = timed_out

    def __iter__(self):
        return iter((self.rc, self.out, self.err))


def _text(data):
    if isinstance(data, bytes):
        return data.decode('utf-8', 'replace')
    return data or ''


def _signal_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except OSError:  # already gone
        pass


def _default_signal(sig):
    """preexec_fn: give the child SIG's default action back. A process started with a signal
    ignored (a background job of a non-interactive shell ignores SIGINT, nohup SIGHUP) passes the
    ignoring on through exec, and sh cannot even trap a signal ignored on entry: ping would then
    never print its summary on SIGINT and be killed instead."""
    def reset():
        signals.signal(sig, signals.SIG_DFL)
    return reset


def run_bounded(argv, limit=None, data=None, signal=None, env_update=None):
    """Run argv with LANG=C within `limit` seconds (None: unbounded).

    Returns CommandResult. A command stopped by the limit gets rc 124 (like coreutils timeout)
    and timed_out=True, with whatever it printed before; `signal` names the first signal sent
    ('INT' lets ping print its summary). A missing binary gives rc 127 and the OS message.
    """
    env = dict(os.environ)
    env.update(C_LOCALE)
    if env_update:
        env.update(env_update)
    first = getattr(signals, 'SIG' + signal) if signal else signals.SIGTERM
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                start_new_session=True, close_fds=True, preexec_fn=_default_signal(first))
    except OSError as exc:
        return CommandResult(127, '', '%s: %s' % (argv[0], exc.strerror or exc))
    stdin = data.encode('utf-8') if isinstance(data, str) else data
    try:
        out, err = proc.communicate(stdin, timeout=limit)
        return CommandResult(proc.returncode, _text(out), _text(err))
    except subprocess.TimeoutExpired:
        _signal_group(proc, first)
        try:
            out, err = proc.communicate(timeout=KILL_GRACE)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signals.SIGKILL)
            out, err = proc.communicate()
        return CommandResult(124, _text(out), _text(err), timed_out=True)
