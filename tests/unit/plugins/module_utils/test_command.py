# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""run_bounded runs real, harmless commands: the limit must stop them without coreutils timeout."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal
import time

from ansible_collections.longhaul.trainnet.plugins.module_utils import command
from ansible_collections.longhaul.trainnet.plugins.module_utils.command import run_bounded


# Prints 'ready' once its INT trap is installed, 'summary' when the trap runs.
TRAPS_INT = 'trap "echo summary; exit 0" INT; echo ready; while :; do sleep 0.05; done'


def test_output_and_c_locale():
    result = run_bounded(['sh', '-c', 'echo "$LANG/$LC_ALL"; echo err >&2; exit 3'], limit=10)
    assert (result.rc, result.out, result.err, result.timed_out) == (3, 'C/C\n', 'err\n', False)


def test_limit_stops_a_hung_command_and_its_children():
    start = time.monotonic()
    result = run_bounded(['sh', '-c', 'echo started; sleep 30 & sleep 30; wait'], limit=0.5)
    assert time.monotonic() - start < 5
    assert result.timed_out and result.rc == 124
    assert result.out == 'started\n'


def test_first_signal_lets_the_command_report(monkeypatch):
    # The limit leaves the shell time to install its trap even on a loaded machine (at 0.5 s, a
    # CI run at load 15 signalled sh before the trap existed); 'ready' proves it was installed.
    # A wide grace before SIGKILL costs nothing: a healthy run ends as soon as sh exits.
    monkeypatch.setattr(command, 'KILL_GRACE', 20.0)
    start = time.monotonic()
    result = run_bounded(['sh', '-c', TRAPS_INT], limit=3, signal='INT')
    assert result.timed_out and result.out == 'ready\nsummary\n'
    assert time.monotonic() - start < 20    # the trap ended it, not the SIGKILL after the grace


def test_first_signal_reaches_a_command_started_with_it_ignored(monkeypatch):
    # Bug: run as a background job (the test command runs the unit gate beside lint and sanity),
    # this process ignores SIGINT; sh inherited that, could not trap INT, and was SIGKILLed
    # without its summary - as ping would be in a module run with SIGINT ignored.
    monkeypatch.setattr(command, 'KILL_GRACE', 20.0)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        result = run_bounded(['sh', '-c', TRAPS_INT], limit=3, signal='INT')
    finally:
        signal.signal(signal.SIGINT, previous)
    assert result.timed_out and result.out == 'ready\nsummary\n'


def test_missing_binary():
    result = run_bounded(['/nonexistent/trainnet-binary'])
    assert result.rc == 127 and 'No such file' in result.err


def test_stdin_data():
    assert run_bounded(['cat'], limit=5, data='abc').out == 'abc'
