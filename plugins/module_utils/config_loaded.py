# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Logic behind the longhaul.trainnet.config_loaded module: does a service run its files?

A service reads its configuration files when it starts and when it is told to reload; between
the two the files can change without the service knowing. This keeps, per service, the sha256 of
the files the last time a reload (or a start) made the service read them, and decides from it:

    digest, missing = config_digest(paths)           # reads the files, in order
    recorded = read_record(record_path(dir, name))   # the digest last loaded, None if none
    action = plan(digest, recorded, loaded_by_start) # none / record / reload
    ... run the reload command (the module), judge it with reload_problem ...
    write_record(record_path(dir, name), digest)     # only after a successful reload

Touches: config_digest and read_record read files; ensure_state_dir creates one directory (0700)
and write_record writes one file (mkstemp in the same directory, 0600, fsync, rename). plan,
reload_problem, validate_name and build_diff are pure. Nothing here runs a command.

Standard library only, Python 3.8 compatible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import hmac
import os
import re

from ansible_collections.longhaul.trainnet.plugins.module_utils.textfile import write_atomic

DEFAULT_STATE_DIR = '/var/lib/trainnet/config-loaded'
RECORD_SUFFIX = '.sha256'
STATE_DIR_MODE = 0o700
RECORD_MODE = 0o600

ACTION_NONE = 'none'        # the service runs these files already
ACTION_RECORD = 'record'    # it started with these files in this run: record them, no reload
ACTION_RELOAD = 'reload'    # reload it, then record

NAME_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$')
_DIGEST_RE = re.compile(r'^[0-9a-f]{64}$')
# Stands for a missing file in the digest (check mode only: a real run refuses missing files).
_MISSING = b'\0missing\0'


def validate_name(name):
    """A message when `name` cannot name a record file, else None."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        return ('name %r must be 1-128 characters of letters, digits, "_", ".", "@" and "-", '
                'starting with a letter or digit (it names the record file)' % (name,))
    return None


def config_digest(paths, key=None):
    """(sha256 hex over the paths and contents in order, [paths that do not exist]).

    With `key` it is an HMAC-SHA256: the files may hold credentials (Squid's peers), and a plain
    hash of them in a result or a diff would let a weak password be confirmed offline.

    Each file adds its path, NUL, its length in decimal, NUL, then its bytes, so moving bytes
    from one file to the next, renaming a file or reordering the list changes the digest. A file
    that does not exist adds a marker instead of its length and content (check mode predicts a
    reload for a file a skipped task would have written). Other read errors (EACCES, EISDIR)
    raise OSError.
    """
    digest = hmac.new(key, digestmod=hashlib.sha256) if key else hashlib.sha256()
    missing = []
    for path in paths:
        digest.update(path.encode('utf-8', 'surrogateescape') + b'\0')
        try:
            with open(path, 'rb') as handle:
                content = handle.read()
        except (IOError, OSError) as exc:
            if exc.errno != errno.ENOENT:
                raise
            missing.append(path)
            digest.update(_MISSING)
            continue
        digest.update(str(len(content)).encode('ascii') + b'\0')
        digest.update(content)
    return digest.hexdigest(), missing


KEY_NAME = '.key'
KEY_BYTES = 32


def load_key(state_dir, create):
    """The host's record key (state_dir/.key, 32 random bytes, 0600). Missing: created when
    `create`, else (check mode) a throwaway key, which matches no record: a reload is predicted,
    as it would be for a host without records."""
    path = os.path.join(state_dir, KEY_NAME)
    try:
        with open(path, 'rb') as handle:
            key = handle.read(KEY_BYTES + 1)
        if len(key) == KEY_BYTES:
            return key
    except (IOError, OSError) as exc:
        if exc.errno != errno.ENOENT:
            raise
    key = os.urandom(KEY_BYTES)
    if not create:
        return key
    ensure_state_dir(state_dir)
    _write_private(path, key)
    return key


def record_path(state_dir, name):
    """The record file of `name` in `state_dir`."""
    return os.path.join(state_dir, name + RECORD_SUFFIX)


def read_record(path):
    """The digest recorded at `path`; None when there is no record or it does not hold one
    digest (a torn or hand-edited record means: reload). Other read errors raise OSError."""
    try:
        with open(path, 'rb') as handle:
            text = handle.read(256).decode('ascii', 'replace').strip()
    except (IOError, OSError) as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise
    return text if _DIGEST_RE.match(text) else None


def plan(digest, recorded, loaded_by_start=False, files_changed=False):
    """What to do: ACTION_NONE when the recorded digest is the files' digest; ACTION_RECORD when
    the service started with these files in this run (it read them; a reload would only repeat
    that); ACTION_RELOAD otherwise, also when there is no record.

    files_changed (check mode only: a task of this run would have written the files, which still
    hold their old content) turns ACTION_NONE into the action the new content would get.
    """
    if recorded == digest and not files_changed:
        return ACTION_NONE
    if loaded_by_start:
        return ACTION_RECORD
    return ACTION_RELOAD


def reload_problem(rc, out, err, timed_out=False, expect=None, limit=None):
    """Why a finished reload command did not succeed, or None when it did: it ran out of time, its
    exit status is not 0, or `expect` (a compiled regex, searched in stdout) does not match."""
    detail = (err or '').strip() or (out or '').strip()
    if timed_out:
        return 'did not finish within %s s%s' % (limit, ': %s' % detail if detail else '')
    if rc != 0:
        return 'exited %d%s' % (rc, ': %s' % detail if detail else '')
    if expect is not None and not expect.search(out or ''):
        return ('exited 0 but its output does not match %r: %s'
                % (expect.pattern, (out or '').strip() or (err or '').strip() or '(no output)'))
    return None


def ensure_state_dir(path):
    """Create the record directory, 0700 (records say what a root service runs). An existing
    directory is left as it is. Returns True when it was created."""
    if os.path.isdir(path):
        return False
    os.makedirs(path, STATE_DIR_MODE)
    os.chmod(path, STATE_DIR_MODE)   # makedirs' mode is filtered by the umask
    return True


def write_record(path, digest):
    """Write `digest` to `path` atomically (see _write_private): a crash leaves the old record or the new one."""
    _write_private(path, digest.encode('ascii') + b'\n')


def _write_private(path, data):
    """Write `data` to `path` atomically, mode 0600 (textfile.write_atomic), then fsync the
    directory where the file system allows it."""
    directory = os.path.dirname(path) or '.'
    write_atomic(path, data, RECORD_MODE)
    try:   # make the rename itself durable; not possible everywhere (some file systems refuse)
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def build_diff(name, state_file, recorded, digest, paths, rewritten=False):
    """--diff: the digest of the files last loaded (the record) against the files' digest now.
    rewritten: check mode, and a task of this run would have written the files (their new digest
    is not known)."""
    header = '%s: sha256 of %s as last loaded (%s)' % (name, ', '.join(paths), state_file)
    after = 'sha256 %s\n' % digest
    if rewritten:
        after = 'sha256 of the files as this run writes them (not known in check mode)\n'
    return {
        'before_header': header,
        'after_header': header,
        'before': ('sha256 %s\n' % recorded) if recorded else '',
        'after': after,
    }
