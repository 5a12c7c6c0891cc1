#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2025, longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sysctl_profile
short_description: Apply a set of sysctls in one call and own their drop-in file
version_added: 0.1.0
description:
  - Sets many kernel parameters at once, live in C(/proc/sys) and in one C(sysctl.d) drop-in file
    that this module owns exclusively.
  - The drop-in is rendered whole from O(settings) on every run, so a key removed from
    O(settings) disappears from the file. It is written atomically (a temporary file in the same
    directory, then renamed), mode C(0644), owned by root, with a header saying that it is
    managed by longhaul.trainnet and that local edits are overwritten.
  - 'Values are validated before anything is read or written: the integer keys this collection
    manages (C(net.core.rmem_max), C(net.ipv4.tcp_rmem), C(net.ipv4.tcp_notsent_lowat), ...) must
    be the right number of integers within the range Linux accepts; any other key whose live value
    is N integers must be given N integers. A bad value fails the module naming the key and what
    it takes, before anything is changed.'
  - A key is B(skipped) with a warning, instead of failing, only when this network namespace
    cannot set the key at all - a global sysctl (for example C(net.core.rmem_max),
    C(net.core.default_qdisc)) outside the initial network namespace, where it is missing, read-only
    or refuses writes; a key without a write bit (mode C(0444)) outside the initial namespace; a key
    without write access (C(/proc/sys) mounted read-only in a container) - or when
    C(net.ipv4.tcp_congestion_control) names an algorithm that a non-init network namespace may
    not make its default (not in C(net.ipv4.tcp_allowed_congestion_control)). With O(strict=true)
    these fail too.
  - 'Everything else the kernel would refuse is a B(failure): a key that does not exist (a misspelt
    key, or a feature this kernel lacks) unless it is a global key hidden in a non-init network
    namespace; a read-only key in the initial namespace; an unknown congestion control (neither in
    C(tcp_available_congestion_control) nor a loadable C(tcp_<name>) module); a value the kernel
    refuses on write (for example C(EINVAL) for a value out of range) or reads back differently.'
  - Failures found while planning stop the module before anything is written. A value the kernel
    refuses while applying fails the module; the drop-in is still written for the other keys, with
    the refused key only as a comment line, so the file never holds a value the kernel refused.
  - 'Skipped keys are written into the drop-in only as a comment line, C(# skipped here: KEY = VALUE)
    followed by the reason in parentheses, so that C(sysctl --system) at boot does not fail on them.'
  - Values are compared whitespace-insensitively, so C(4096<TAB>131072<TAB>6291456), C(4096 131072 6291456) and
    V([4096, 131072, 6291456]) are equal. Runs of whitespace inside a value are collapsed to one
    space when the value is written.
  - 'What it reads: the C(/proc/sys) files of the given keys (content and mode; with
    O(state=absent) the keys of the removed drop-in),
    C(tcp_available_congestion_control), C(tcp_allowed_congestion_control), the C(tcp_*.ko*) names
    below C(/lib/modules/RELEASE/kernel/net/ipv4), the inode of C(/proc/self/ns/net) and the netns
    cookie of one unconnected socket, the drop-in O(path), and with O(state=absent) and an
    existing drop-in the C(sysctl.d) files and C(/etc/sysctl.conf).'
  - 'What it writes, outside check mode only: the C(/proc/sys) files of the keys whose live value
    differs (one C(write(2)) of the wanted value each, then read back; nothing with
    O(apply_live=false)), and the drop-in O(path) (a temporary file in the same directory renamed
    over it, or with O(state=absent) removed). In check mode it writes nothing at all; the plan is made from the values, the modes
    and write access of the keys, and the network namespace, so check mode predicts the real run.
    Limits of that prediction - a kernel minimum or range of a key that is not modelled - show up
    in the real run as a failed key, never as a silently skipped one.'
  - After writing a live value the module reads it back; a value the kernel clamped or ignored
    is a failure.
  - Do not use it for trigger keys whose write has an effect regardless of the value (for
    example C(vm.drop_caches), C(net.ipv4.route.flush)).
  - 'With O(state=absent) the module removes the drop-in and puts every key it set back live to
    the value the remaining configuration gives it: the C(sysctl.d) files that
    C(systemd-sysctl) and C(sysctl --system) read at boot, without the removed drop-in. They are
    the C(*.conf) files of C(/etc/sysctl.d), C(/run/sysctl.d), C(/usr/local/lib/sysctl.d),
    C(/usr/lib/sysctl.d) and C(/lib/sysctl.d) - a file hides the files of the same name in the
    directories after it, so removing a drop-in from C(/etc/sysctl.d) uncovers a vendor file of
    the same name - applied in the order of their file names regardless of the directory, the last
    assignment of a key winning, an explicit key winning over a glob pattern
    (see sysctl.d(5)); then C(/etc/sysctl.conf), unless a C(sysctl.d) file (such as
    C(99-sysctl.conf)) is a symlink to it, in which case it counts at that place as with
    C(systemd-sysctl).'
  - A key no remaining file sets is put back to its value in O(restore). A key with neither is
    left as it is, with status V(unchanged), and listed in RV(unrestored). Only keys that the
    removed drop-in set (its active lines) are touched, so with no drop-in nothing is read or
    changed.
  - The initial network namespace is recognised by the inode of C(/proc/self/ns/net)
    (C(PROC_NET_INIT_INO)); the netns cookie is not used because Linux 6.18 no longer gives
    the initial namespace cookie 1.
author:
  - longhaul.trainnet maintainers (@longhaul)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details:
      - Returns two diffs, the drop-in file (with O(state=absent) its removal) and the live values
        of the keys that change.
  platform:
    platforms: linux
options:
  settings:
    description:
      - Sysctl key (dotted, for example C(net.ipv4.tcp_rmem), or slash separated as in
        C(sysctl.d)) mapped to its value.
      - A value is an integer, a string, or a list of integers/strings for multi-value keys
        such as C(net.ipv4.tcp_rmem). Booleans become C(1)/C(0).
      - Keys are written to the drop-in and applied in the given order.
      - Required with O(state=present); ignored with O(state=absent).
    type: dict
  restore:
    description:
      - With O(state=absent), the value (as in O(settings)) to put a key back to when no remaining
        configuration file sets it, for example C(net.ipv4.ip_forward) V(0).
      - A key is restored only if the removed drop-in set it; keys here that the drop-in did not
        set are ignored. A value set by a remaining configuration file wins over the one given
        here.
      - Values are validated like O(settings).
      - Ignored with O(state=present).
    type: dict
    default: {}
    version_added: 0.6.0
  path:
    description:
      - The drop-in file this module owns exclusively. Any other content is replaced.
      - The parent directory must exist with O(state=present); with O(state=absent) a missing
        directory means there is no drop-in to remove.
    type: path
    default: /etc/sysctl.d/90-trainnet.conf
  state:
    description:
      - V(present) renders the drop-in and applies the live values.
      - V(absent) removes the drop-in and restores the live values of the keys it set, to the
        value the remaining configuration gives each key, else to its value in O(restore), else
        the key is left as it is and listed in RV(unrestored). This restoring from the remaining
        configuration is done also without O(restore) (before 0.6.0 every live value was left
        as it was until the next boot).
      - With V(absent) the live values are written first and the drop-in is removed only if none
        was refused; a refused value fails the module and keeps the drop-in, so that the next
        run restores again. A drop-in that does not exist (also a missing directory) changes
        nothing.
    type: str
    choices: [present, absent]
    default: present
  strict:
    description:
      - If V(true), keys that cannot be set (or, with O(state=absent), restored) in this namespace
        fail the module (naming them) instead of being skipped with a warning. They are predicted without writing, so the
        module fails before anything is changed.
    type: bool
    default: false
  apply_live:
    description:
      - Also set the live values in C(/proc/sys). With V(false) only the file is written and
        nothing is written to C(/proc/sys); keys whose live value differs are reported with status
        V(unchanged) and listed in RV(drifted).
      - With O(state=absent) and V(false) only the drop-in is removed; keys whose live value differs
        from the value they are restored to are listed in RV(drifted).
    type: bool
    default: true
  header:
    description:
      - Extra comment line(s) for the file header, below the managed-by lines. Each line is
        prefixed with C(# ) unless it already starts with C(#).
    type: str
notes:
  - Supports check mode and diff mode. Check mode writes nothing (neither C(/proc/sys) nor the
    drop-in).
  - Needs root (or the capabilities to write C(/proc/sys) and the drop-in's directory).
  - Uses only the Python standard library; no C(sysctl) binary is run.
seealso:
  - module: ansible.posix.sysctl
  - name: Linux kernel ip-sysctl documentation
    description: Meaning of the net.ipv4.* and net.core.* keys.
    link: https://docs.kernel.org/networking/ip-sysctl.html
"""

EXAMPLES = r"""
- name: Tune TCP for long fat paths, skipping what a container cannot set
  longhaul.trainnet.sysctl_profile:
    path: /etc/sysctl.d/90-trainnet.conf
    header: "data plane of {{ inventory_hostname }}"
    settings:
      net.ipv4.tcp_congestion_control: bbr
      net.ipv4.tcp_slow_start_after_idle: 0
      net.core.rmem_max: 67108864
      net.core.wmem_max: 67108864
      net.ipv4.tcp_rmem: [4096, 131072, 67108864]
      net.ipv4.tcp_wmem: "4096 16384 67108864"
  register: tuned

- name: Show what could not be set here
  ansible.builtin.debug:
    msg: "{{ tuned.skipped_keys }}"
  when: tuned.skipped_keys | length > 0

- name: List drifted keys without changing anything
  longhaul.trainnet.sysctl_profile:
    settings:
      net.ipv4.tcp_slow_start_after_idle: 0
  check_mode: true
  register: drift

- name: Only write the file (applied at the next boot)
  longhaul.trainnet.sysctl_profile:
    path: /etc/sysctl.d/90-trainnet.conf
    apply_live: false
    settings:
      net.ipv4.tcp_mtu_probing: 1

- name: Fail if any key cannot be set on this host
  longhaul.trainnet.sysctl_profile:
    strict: true
    settings:
      net.core.default_qdisc: fq

- name: Remove the drop-in, restoring its keys from the remaining sysctl.d configuration
  longhaul.trainnet.sysctl_profile:
    path: /etc/sysctl.d/90-trainnet.conf
    state: absent

- name: Stop forwarding when the forwarding drop-in goes (0 unless another file sets it)
  longhaul.trainnet.sysctl_profile:
    path: /etc/sysctl.d/90-router.conf
    state: absent
    restore:
      net.ipv4.ip_forward: 0
  register: unrouted

- name: Show the keys that kept the removed drop-in's value (no file and no restore value for them)
  ansible.builtin.debug:
    msg: "{{ unrouted.unrestored }}"
  when: unrouted.unrestored | length > 0
"""

RETURN = r"""
check_mode:
  description:
    - Whether this run only predicted the change (check mode, also when set on the task alone,
      which the C(ansible_check_mode) variable does not show).
  returned: always
  type: bool
  sample: false
path:
  description: The drop-in file.
  returned: always
  type: str
  sample: /etc/sysctl.d/90-trainnet.conf
file_changed:
  description:
    - Whether the drop-in was (or, in check mode, would be) written, removed, or had its mode or
      owner fixed.
  returned: always
  type: bool
  sample: true
file_drifted:
  description:
    - Whether the drop-in on disk differed from the wanted content (or mode/owner) before this
      run. Same value in check mode and in a real run.
  returned: always
  type: bool
  sample: false
keys:
  description:
    - Per key (as given in O(settings), or with O(state=absent) as written in the removed drop-in)
      what was found and done.
  returned: always
  type: dict
  sample:
    net.core.rmem_max:
      status: skipped
      before: "4194304"
      after: "4194304"
      wanted: "67108864"
      reason: "global sysctl: only the initial network namespace can set it, this one sees it read-only or has writes refused [EINVAL]"
    net.ipv4.tcp_rmem:
      status: applied
      before: "4096 131072 6291456"
      after: "4096 131072 67108864"
      wanted: "4096 131072 67108864"
      reason: live value differs
  contains:
    status:
      description:
        - V(applied) the live value was (would be) changed;
          V(unchanged) the live value already matched, or was left alone with O(apply_live=false);
          V(skipped) this network namespace cannot set the key (or, for the congestion control,
          may not make the algorithm its default);
          V(failed) an invalid value, a key that does not exist, an unknown congestion control, a
          value the kernel refused or read back differently, or, with O(strict=true), a key that
          cannot be set here.
      type: str
      returned: always
      choices: [applied, unchanged, skipped, failed]
    before:
      description: Live value before the run, whitespace-normalised; null if missing or unreadable.
      type: str
      returned: always
    after:
      description: Live value after the run (predicted in check mode), whitespace-normalised.
      type: str
      returned: always
    wanted:
      description:
        - The wanted value as written to the file and C(/proc/sys).
        - With O(state=absent) the value the key is restored to; null if it has none.
      type: str
      returned: always
    reason:
      description: Why the key has this status.
      type: str
      returned: always
    source:
      description:
        - With O(state=absent), where RV(keys.wanted) comes from - the configuration file (and
          glob pattern) that sets the key, or V(restore) for the O(restore) option; null if the
          key has no value to be restored to.
      type: str
      returned: with O(state=absent)
      sample: /usr/lib/sysctl.d/50-default.conf
applied:
  description: Keys whose live value was (in check mode, would be) changed.
  returned: always
  type: list
  elements: str
  sample: [net.ipv4.tcp_rmem]
unchanged:
  description: Keys whose live value already matched (or was left alone with O(apply_live=false)).
  returned: always
  type: list
  elements: str
  sample: [net.ipv4.tcp_slow_start_after_idle]
skipped_keys:
  description:
    - Keys this network namespace cannot set (each also produces a warning).
    - Not called C(skipped) because a true C(skipped) in a task result marks the whole task skipped.
  returned: always
  type: list
  elements: str
  sample: [net.core.rmem_max]
failed_keys:
  description:
    - Keys that failed (invalid value, missing key, value refused by the kernel). When not empty
      the module fails.
    - Not called C(failed) because Ansible reserves C(failed) for the task's own status.
  returned: always
  type: list
  elements: str
  sample: []
drifted:
  description:
    - Keys whose live value differed from the wanted value before this run and that are settable
      here. In check mode this is exactly what a real run changes.
  returned: always
  type: list
  elements: str
  sample: [net.ipv4.tcp_rmem]
unrestored:
  description:
    - With O(state=absent), keys of the removed drop-in left live as they are because neither a
      remaining configuration file nor O(restore) gives them a value (also glob patterns and
      invalid keys of the drop-in). Their status is V(unchanged). Empty with O(state=present).
  returned: always
  type: list
  elements: str
  sample: [net.ipv4.tcp_mtu_probing]
  version_added: 0.6.0
init_netns:
  description:
    - Whether the module ran in the initial network namespace (null if it could not tell).
  returned: always
  type: bool
  sample: false
diff:
  description:
    - With C(--diff), two diffs, the drop-in file (headers are the path) and the live values
      (C(key = value) lines of the keys that change).
  returned: when diff mode is on
  type: list
  elements: dict
  sample:
    - before: ""
      after: "# Managed by longhaul.trainnet (sysctl_profile module).\n..."
      before_header: /etc/sysctl.d/90-trainnet.conf
      after_header: /etc/sysctl.d/90-trainnet.conf
    - before: "net.ipv4.tcp_rmem = 4096 131072 6291456\n"
      after: "net.ipv4.tcp_rmem = 4096 131072 67108864\n"
      before_header: live values (/proc/sys)
      after_header: live values (/proc/sys)
"""

import os
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.longhaul.trainnet.plugins.module_utils.sysctl_profile import (
    FAILED,
    SKIPPED,
    ProcSys,
    SysctlConfig,
    SysctlInputError,
    apply_entries,
    build_diff,
    make_strict,
    parse_restore,
    parse_settings,
    plan_entries,
    render_file,
    restore_entries,
    summarize,
    summarize_restore,
)

FILE_MODE = 0o644


def read_current(path):
    """(content or None, stat or None) of the drop-in."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None, None
    with open(path, "rb") as f:
        content = f.read().decode("utf-8", "replace")
    return content, st


def attrs_ok(st):
    if st is None:
        return True
    if stat.S_IMODE(st.st_mode) != FILE_MODE:
        return False
    if os.geteuid() == 0 and (st.st_uid != 0 or st.st_gid != 0):
        return False
    return True


def fix_attrs(path):
    os.chmod(path, FILE_MODE)
    if os.geteuid() == 0:
        os.chown(path, 0, 0)


def write_atomic(module, path, content):
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        fix_attrs(tmp)
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    # atomic_move keeps an existing file's mode and owner: enforce ours.
    fix_attrs(path)


def empty_result(path):
    return dict(
        changed=False,
        path=path,
        file_changed=False,
        file_drifted=False,
        keys={},
        applied=[],
        unchanged=[],
        skipped_keys=[],
        failed_keys=[],
        drifted=[],
        unrestored=[],
        init_netns=None,
    )


def failure_message(entries):
    return "sysctl_profile: %s" % "; ".join(
        "%s failed: %s" % (e.key, e.reason) for e in entries if e.status == FAILED)


def warn_skipped(module, entries):
    for e in entries:
        if e.status == SKIPPED:
            module.warn("sysctl_profile: %s skipped, it cannot be set here: %s" % (e.key, e.reason))


def run_absent(module, path, result, proc=None, config=None):
    """Remove the drop-in and put the keys it set back to what the remaining configuration (or
    the restore option) gives them. The plan is made before anything is written, so check mode
    predicts the real run; a drop-in that does not exist changes nothing and reads no key."""
    p = module.params
    try:
        restore = parse_restore(p["restore"])
    except SysctlInputError as e:
        module.fail_json(msg="invalid restore: %s" % to_native(e), **result)
    try:
        content, st = read_current(path)
    except (OSError, IOError) as e:
        module.fail_json(msg="cannot read %s: %s" % (path, to_native(e)), **result)
    exists = st is not None
    entries = []
    if exists:
        if proc is None:
            proc = ProcSys()
        if config is None:
            config = SysctlConfig()
        result["init_netns"] = proc.is_init_netns()
        try:
            values = config.values(exclude=[path])
        except (OSError, IOError) as e:
            module.fail_json(msg="cannot read the remaining sysctl configuration: %s (nothing was "
                                 "changed)" % to_native(e), **result)
        # 1. plan (identical in check mode and in a real run)
        entries = restore_entries(content, values, restore, proc, apply_live=p["apply_live"])
        refuse_a_failed_plan(module, entries, result, summarize_restore)
        # 2. act: the live values first; the drop-in goes only when they all took, so that a
        # key the kernel refused is restored again by the next run instead of being forgotten.
        apply_the_plan(module, entries, proc)
    refused = any(e.status == FAILED for e in entries)
    remove = exists and not refused
    if remove and not module.check_mode:
        try:
            os.unlink(path)
        except (OSError, IOError) as e:
            result.update(summarize_restore(entries))
            module.fail_json(msg="cannot remove %s: %s" % (path, to_native(e)), **result)
    result.update(summarize_restore(entries))
    result["file_changed"] = remove
    result["file_drifted"] = exists
    result["changed"] = remove or bool(result["applied"]) or any(
        e.status == FAILED and e.before != e.after for e in entries)
    if module._diff:
        result["diff"] = build_diff(path, content, "" if remove else content, entries)
    warn_skipped(module, entries)
    if refused:
        kept = " (%s is kept, so that the next run restores its keys again)" % path
        module.fail_json(msg=failure_message(entries) + kept, **result)
    module.exit_json(**result)


def refuse_a_failed_plan(module, entries, result, summary):
    """Strict mode turns skips into failures; a plan with failures is refused before anything changes."""
    if module.params["strict"]:
        make_strict(entries)
    if any(e.status == FAILED for e in entries):
        result.update(summary(entries))
        module.fail_json(msg=failure_message(entries) + " (nothing was changed)", **result)


def apply_the_plan(module, entries, proc):
    """The live values of a plan (not in check mode, not without apply_live); strict again after."""
    if not module.check_mode and module.params["apply_live"]:
        apply_entries(entries, proc)
        if module.params["strict"]:
            make_strict(entries)


def run(module, proc=None, config=None):
    p = module.params
    path = p["path"]
    result = empty_result(path)
    result["check_mode"] = module.check_mode

    if os.path.isdir(path):
        module.fail_json(msg="path %s is a directory" % path, **result)

    if p["state"] == "absent":
        # A missing parent directory holds no drop-in: nothing to remove.
        run_absent(module, path, result, proc, config)
        return

    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        module.fail_json(msg="parent directory %s of path does not exist" % parent, **result)

    if proc is None:
        proc = ProcSys()
    result["init_netns"] = proc.is_init_netns()

    try:
        entries = parse_settings(p["settings"])
    except SysctlInputError as e:
        module.fail_json(msg="invalid settings: %s" % to_native(e), **result)

    try:
        current, st = read_current(path)
    except (OSError, IOError) as e:
        module.fail_json(msg="cannot read %s: %s" % (path, to_native(e)), **result)

    # 1. plan (identical in check mode and in a real run)
    plan_entries(entries, proc, apply_live=p["apply_live"])
    refuse_a_failed_plan(module, entries, result, summarize)

    # 2. act
    apply_the_plan(module, entries, proc)

    wanted_content = render_file(entries, p["header"])
    file_drifted = current != wanted_content or not attrs_ok(st)
    if file_drifted and not module.check_mode:
        try:
            if current != wanted_content:
                write_atomic(module, path, wanted_content)
            else:
                fix_attrs(path)
        except (OSError, IOError) as e:
            result.update(summarize(entries))
            module.fail_json(msg="cannot write %s: %s" % (path, to_native(e)), **result)

    result.update(summarize(entries))
    result["file_changed"] = file_drifted
    result["file_drifted"] = file_drifted
    result["changed"] = file_drifted or bool(result["applied"]) or any(
        e.status == FAILED and e.before != e.after for e in entries)
    if module._diff:
        result["diff"] = build_diff(path, current, wanted_content, entries)

    warn_skipped(module, entries)

    if result["failed_keys"]:
        module.fail_json(msg=failure_message(entries), **result)
    module.exit_json(**result)


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            settings=dict(type="dict"),
            path=dict(type="path", default="/etc/sysctl.d/90-trainnet.conf"),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            strict=dict(type="bool", default=False),
            apply_live=dict(type="bool", default=True),
            header=dict(type="str"),
            restore=dict(type="dict", default={}),
        ),
        required_if=[("state", "present", ("settings",))],
        supports_check_mode=True,
    )


def main(proc=None, config=None):
    module = build_module()
    run(module, proc, config)


if __name__ == "__main__":
    main()
