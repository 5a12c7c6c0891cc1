# -*- coding: utf-8 -*-
# Copyright: (c) 2025, longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure logic behind the longhaul.trainnet.sysctl_profile module.

Everything that touches the kernel goes through ProcSys, whose root directory (normally
/proc/sys) is a parameter, so unit tests run on a fake tree without root. The flow is:

    entries = parse_settings(settings)          # validate keys and values (no I/O)
    plan_entries(entries, proc, apply_live)     # read live values, stat keys, predict statuses
    apply_entries(entries, proc)                # write the predicted 'applied' keys, read back
    render_file(entries, header)                # the drop-in, rendered whole
    build_diff(...)                             # --diff output

Removing the drop-in (state=absent) puts the keys it set back to what the remaining
configuration gives them:

    values = SysctlConfig(root).values(exclude=[path])   # the remaining sysctl.d files, resolved
    entries = restore_entries(content, values, restore, proc, apply_live)  # then plan_entries
    apply_entries(entries, proc)                            # the same writer as above

Touches: parse_settings and the render/diff helpers are pure. SysctlConfig only lists and reads
the configuration files below its root. plan_entries only reads: it
reads and stats /proc/sys keys, lists tcp_<cc> modules below /lib/modules and asks
netns.detect_init_netns (an inode stat and one unconnected socket); it never writes, so check
mode writes nothing. apply_entries is the only function that writes /proc/sys.

Standard library only, Python 3.8 compatible.
"""

from __future__ import annotations

import errno
import fnmatch
import glob
import os
import re
import stat

from ansible_collections.longhaul.trainnet.plugins.module_utils.errors import describe_os_error
from ansible_collections.longhaul.trainnet.plugins.module_utils.netns import detect_init_netns

PROC_SYS = "/proc/sys"
NETNS_SELF = "/proc/self/ns/net"
MODULES_ROOTS = ("/lib/modules", "/usr/lib/modules")
DEFAULT_PATH = "/etc/sysctl.d/90-trainnet.conf"
# The configuration the kernel parameters get at boot, see SysctlConfig.
SYSCTL_D_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d",
                 "/lib/sysctl.d")
SYSCTL_CONF = "/etc/sysctl.conf"
GLOB_CHARS = "*?["
RESTORE_SOURCE = "restore"  # the source of a target given by the module's restore option

CC_KEY = "net.ipv4.tcp_congestion_control"
CC_AVAILABLE_KEY = "net.ipv4.tcp_available_congestion_control"
CC_ALLOWED_KEY = "net.ipv4.tcp_allowed_congestion_control"
# Keys whose value is a set the kernel prints in its own order.
ORDER_INSENSITIVE_KEYS = frozenset([CC_ALLOWED_KEY])

INT_MIN = -2147483648
INT_MAX = 2147483647
UINT_MAX = 4294967295
U8_MAX = 255

# Integer keys the collection sets: (number of fields, min, max) of each field. Measured on
# Linux 6.18 (the kernel refuses values outside these with EINVAL); the buffer maxima have a
# kernel minimum of a few KiB that is not modelled, so the kernel may still refuse tiny values.
INTEGER_KEYS = {
    "net.core.rmem_max": (1, 0, INT_MAX),
    "net.core.wmem_max": (1, 0, INT_MAX),
    "net.core.rmem_default": (1, 0, INT_MAX),
    "net.core.wmem_default": (1, 0, INT_MAX),
    "net.core.netdev_max_backlog": (1, INT_MIN, INT_MAX),
    "net.core.somaxconn": (1, 0, INT_MAX),
    "net.ipv4.tcp_rmem": (3, 1, INT_MAX),
    "net.ipv4.tcp_wmem": (3, 1, INT_MAX),
    "net.ipv4.tcp_fastopen": (1, INT_MIN, INT_MAX),
    "net.ipv4.tcp_fastopen_blackhole_timeout_sec": (1, 0, INT_MAX),
    "net.ipv4.tcp_mtu_probing": (1, 0, U8_MAX),
    "net.ipv4.tcp_base_mss": (1, INT_MIN, INT_MAX),
    "net.ipv4.tcp_no_metrics_save": (1, 0, U8_MAX),
    "net.ipv4.tcp_slow_start_after_idle": (1, 0, U8_MAX),
    "net.ipv4.tcp_notsent_lowat": (1, 0, UINT_MAX),
}
# Keys whose value is text even when the live value happens to be all digits.
TEXT_KEYS = frozenset([
    CC_KEY, CC_ALLOWED_KEY, CC_AVAILABLE_KEY, "net.core.default_qdisc", "kernel.hostname",
    "kernel.domainname", "kernel.core_pattern", "kernel.modprobe", "net.ipv4.tcp_fastopen_key",
    "net.ipv4.ip_local_reserved_ports",
])
_INTEGER_RE = re.compile(r"^[+-]?[0-9]+$")

# Global sysctls: only the initial network namespace can set them. A non-init namespace
# does not have them at all or sees them read-only (mode 0444) or gets EINVAL on write.
# Measured on Linux 6.18 (`find /proc/sys/net` in the init netns and in `unshare --net`);
# older kernels hide more of net.core, hence the net.core prefix rule below.
GLOBAL_KEYS = frozenset([
    "net.core.rmem_max", "net.core.wmem_max", "net.core.rmem_default", "net.core.wmem_default",
    CC_ALLOWED_KEY,
    "net.ipv4.cipso_cache_bucket_size", "net.ipv4.cipso_cache_enable",
    "net.ipv4.cipso_rbm_optfmt", "net.ipv4.cipso_rbm_strictvalid", "net.ipv4.fib_sync_mem",
    "net.ipv4.inet_peer_maxttl", "net.ipv4.inet_peer_minttl", "net.ipv4.inet_peer_threshold",
    "net.ipv4.ipfrag_secret_interval", "net.ipv4.tcp_available_ulp", "net.ipv4.tcp_low_latency",
    "net.ipv4.tcp_max_orphans", "net.ipv4.tcp_mem", "net.ipv4.udp_mem",
    "net.ipv6.calipso_cache_bucket_size", "net.ipv6.calipso_cache_enable",
    "net.ipv6.ip6frag_secret_interval", "net.ipv6.mld_max_msf", "net.ipv6.mld_qrv",
    "net.netfilter.nf_log_all_netns", "net.nf_conntrack_max",
])
GLOBAL_PREFIXES = ("net.ipv4.route.gc_", "net.ipv4.route.error_", "net.ipv4.route.redirect_",
                   "net.ipv4.route.max_size")
# The net.core keys each network namespace has its own copy of (everything else in net.core
# is global).
NETNS_CORE_KEYS = frozenset([
    "net.core.somaxconn", "net.core.optmem_max", "net.core.txrehash", "net.core.tstamp_allow_data",
    "net.core.rps_default_mask", "net.core.xfrm_acq_expires", "net.core.xfrm_aevent_etime",
    "net.core.xfrm_aevent_rseqth", "net.core.xfrm_larval_drop",
])

APPLIED = "applied"
UNCHANGED = "unchanged"
SKIPPED = "skipped"
FAILED = "failed"
STATUSES = (APPLIED, UNCHANGED, SKIPPED, FAILED)
# Names of the result lists. 'skipped' and 'failed' are reserved in an Ansible task result
# (a truthy 'skipped' marks the task skipped, 'failed' marks it failed and fail_json
# overwrites it), so those two lists carry a _keys suffix.
RESULT_LISTS = {
    APPLIED: "applied",
    UNCHANGED: "unchanged",
    SKIPPED: "skipped_keys",
    FAILED: "failed_keys",
}

MANAGED_HEADER = (
    "# Managed by longhaul.trainnet (sysctl_profile module).",
    "# This file is rendered whole on every run: local edits are overwritten.",
)
LIVE_DIFF_HEADER = "live values (/proc/sys)"


class SysctlInputError(ValueError):
    """A key or value in the settings cannot be used."""


# ---------------------------------------------------------------------------------------------
# keys and values
# ---------------------------------------------------------------------------------------------

def key_to_relpath(key):
    """Return the path of a sysctl key relative to /proc/sys.

    Follows sysctl.d(5): if the first separator is a slash, the key is already a path
    (dots stay dots); if it is a dot, dots and slashes are swapped, so
    net.ipv4.conf.eth0/100.forwarding is net/ipv4/conf/eth0.100/forwarding.
    """
    if not isinstance(key, str) or not key:
        raise SysctlInputError("sysctl key must be a non-empty string, got %r" % (key,))
    if key != key.strip() or any(c.isspace() for c in key):
        raise SysctlInputError("sysctl key %r contains whitespace" % (key,))
    if key[0] in "-#;/." or "=" in key or "\0" in key:
        raise SysctlInputError(
            "sysctl key %r is not valid (it must not start with '-', '#', ';', '/' or '.' "
            "and must not contain '=')" % (key,))
    first_dot = key.find(".")
    first_slash = key.find("/")
    if first_slash != -1 and (first_dot == -1 or first_slash < first_dot):
        relpath = key
    else:
        relpath = key.translate(str.maketrans("./", "/."))
    parts = relpath.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise SysctlInputError("sysctl key %r has an empty or relative path component" % (key,))
    return relpath


def display_path(key):
    """/proc/sys/... path of a key for messages (independent of a test root)."""
    return PROC_SYS + "/" + key_to_relpath(key)


def canonical_key(key):
    """The dotted form of a key as sysctl -a prints it (net.ipv4.tcp_rmem)."""
    return key_to_relpath(key).translate(str.maketrans("/.", "./"))


def _scalar_to_text(value, key):
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        raise SysctlInputError("%s: value %r is not an integer (sysctls take integers or strings)"
                               % (key, value))
    if isinstance(value, str):
        return value
    raise SysctlInputError("%s: unsupported value %r of type %s (use an int, a string or a list "
                           "of ints/strings)" % (key, value, type(value).__name__))


def normalize_value(value, key="value"):
    """Render a wanted value as the text written to /proc/sys and the drop-in.

    int -> "123", bool -> "1"/"0", list -> items joined by one space, str -> as given. Runs of
    whitespace (tabs, several spaces) are collapsed to one space: values are compared
    whitespace-insensitively, so that is the only form the module can keep stable.
    """
    if value is None:
        raise SysctlInputError("%s: value is missing (null)" % key)
    if isinstance(value, (list, tuple)):
        if not value:
            raise SysctlInputError("%s: empty list" % key)
        items = []
        for item in value:
            if isinstance(item, (list, tuple, dict)) or item is None:
                raise SysctlInputError("%s: list items must be ints or strings, got %r" % (key, item))
            items.append(_scalar_to_text(item, key))
        text = " ".join(items)
    else:
        text = _scalar_to_text(value, key)
    if "\n" in text.strip() or "\r" in text.strip() or "\0" in text:
        raise SysctlInputError("%s: value must be a single line" % key)
    return " ".join(text.split())


def split_value(text):
    """Whitespace-split form of a value (None stays None)."""
    if text is None:
        return None
    return text.split()


def values_equal(live, wanted, key=""):
    """Compare a live value with a wanted one, ignoring whitespace differences.

    "4096\\t131072\\t6291456" equals "4096 131072 6291456". For keys the kernel prints as an
    unordered set (tcp_allowed_congestion_control) the order is ignored too.
    """
    if live is None or wanted is None:
        return False
    a = split_value(live)
    b = split_value(wanted)
    if key and canonical_key(key) in ORDER_INSENSITIVE_KEYS:
        return sorted(a) == sorted(b)
    return a == b


def is_integer_text(text):
    """True for a non-empty run of whitespace-separated decimal integers ("4096 131072 6291456")."""
    fields = split_value(text)
    return bool(fields) and all(_INTEGER_RE.match(f) for f in fields)


def integer_value_problem(key, wanted, fields, low, high):
    """Why wanted is not `fields` integers within low..high, or None."""
    parts = split_value(wanted)
    what = "%d integer%s in %d..%d" % (fields, "" if fields == 1 else "s", low, high)
    if len(parts) != fields or not all(_INTEGER_RE.match(p) for p in parts):
        return "%s: value %r is not valid: it takes %s" % (key, wanted, what)
    bad = [p for p in parts if not low <= int(p) <= high]
    if bad:
        return "%s: value %r is out of range: it takes %s" % (key, wanted, what)
    return None


def known_value_problem(key, wanted):
    """Validation of keys whose type the module knows (INTEGER_KEYS), without any I/O."""
    spec = INTEGER_KEYS.get(canonical_key(key))
    if spec is None:
        return None
    return integer_value_problem(key, wanted, *spec)


def inferred_value_problem(key, wanted, live):
    """Validation of other keys from the shape of their live value: a key that reads as N
    integers takes N integers (the kernel ignores extra fields and keeps missing ones)."""
    canonical = canonical_key(key)
    if canonical in INTEGER_KEYS or canonical in TEXT_KEYS or not is_integer_text(live):
        return None
    parts = split_value(wanted)
    fields = len(split_value(live))
    if len(parts) != fields or not all(_INTEGER_RE.match(p) for p in parts):
        return ("%s: value %r is not valid: it takes %d integer%s (its live value is %r)"
                % (key, wanted, fields, "" if fields == 1 else "s", live))
    return None


def is_global_key(key):
    """A sysctl only the initial network namespace can set (see GLOBAL_KEYS)."""
    canonical = canonical_key(key)
    if canonical in GLOBAL_KEYS or canonical.startswith(GLOBAL_PREFIXES):
        return True
    return canonical.startswith("net.core.") and canonical not in NETNS_CORE_KEYS


def _one_line(text):
    return " ".join(str(text).split())


# ---------------------------------------------------------------------------------------------
# access to the kernel
# ---------------------------------------------------------------------------------------------

class ProcSys(object):
    """Reads and writes sysctls below a root directory (default /proc/sys).

    init_netns: True/False to state whether this is the initial network namespace (tests),
    None to detect it. modules_roots: where to look for loadable tcp_<cc> modules.
    """

    def __init__(self, root=PROC_SYS, init_netns=None, netns_path=NETNS_SELF,
                 modules_roots=MODULES_ROOTS, kernel_release=None):
        self.root = root
        self._init_netns = init_netns
        self._init_netns_known = init_netns is not None
        self.netns_path = netns_path
        self.modules_roots = modules_roots
        self.kernel_release = kernel_release

    def path(self, key):
        return os.path.join(self.root, key_to_relpath(key))

    def exists(self, key):
        return os.path.isfile(self.path(key))

    def is_dir(self, key):
        return os.path.isdir(self.path(key))

    def read(self, key):
        """Raw text of a key without the trailing newline. Raises OSError."""
        with open(self.path(key), "rb") as f:
            data = f.read()
        text = data.decode("utf-8", "replace")
        if text.endswith("\n"):
            text = text[:-1]
        return text

    def read_list(self, key):
        try:
            return self.read(key).split()
        except (OSError, IOError):
            return None

    def write(self, key, text):
        """Write one value in a single write(2), as sysctl(8) does. Raises OSError.

        O_TRUNC is ignored by procfs and keeps a fake tree on a normal file system right.
        Never creates a key that does not exist.
        """
        data = (text + "\n").encode("utf-8")
        fd = os.open(self.path(key), os.O_WRONLY | os.O_TRUNC)
        try:
            written = os.write(fd, data)
        finally:
            os.close(fd)
        if written != len(data):
            raise OSError(errno.EIO, "short write (%d of %d bytes)" % (written, len(data)))

    def writable(self, key):
        """Permission check without writing: os.access(W_OK) (false on a read-only mount)."""
        return os.access(self.path(key), os.W_OK)

    def mode(self, key):
        """Permission bits of the key (0444 for a read-only sysctl), None if it cannot be stat'ed."""
        try:
            return stat.S_IMODE(os.stat(self.path(key)).st_mode)
        except OSError:
            return None

    def is_init_netns(self):
        """True in the initial network namespace, False in another one, None if unknown
        (netns.detect_init_netns: the fixed inode on 6.18+, the cookie on 5.14-6.17,
        then sysctl heuristics)."""
        if not self._init_netns_known:
            self._init_netns = detect_init_netns(self.netns_path)[0]
            self._init_netns_known = True
        return self._init_netns

    def cc_module_exists(self, name):
        """Is there a loadable tcp_<name> module the kernel could autoload?"""
        release = self.kernel_release or os.uname()[2]
        for base in self.modules_roots:
            pattern = os.path.join(base, release, "kernel", "net", "ipv4", "tcp_%s.ko*" % name)
            if glob.glob(pattern):
                return True
        return False


# ---------------------------------------------------------------------------------------------
# planning and applying
# ---------------------------------------------------------------------------------------------

class Entry(object):
    """One wanted key: its value, what is live, and what happens to it."""

    def __init__(self, key, wanted):
        self.key = key
        self.canonical = canonical_key(key)
        self.wanted = wanted
        self.before = None        # live value before the run (whitespace-normalised), or None
        self.after = None         # live value after the run (predicted in check mode)
        self.status = None
        self.reason = ""
        self.settable = True      # False: rendered as a comment line, never as an active line
        self.drifted = False      # live differs from wanted and the key is settable here

    def as_result(self):
        return {
            "status": self.status,
            "before": self.before,
            "after": self.after,
            "wanted": self.wanted,
            "reason": self.reason,
        }

    def skip(self, reason):
        self.status = SKIPPED
        self.reason = _one_line(reason)
        self.settable = False
        self.drifted = False
        self.after = self.before

    def fail(self, reason):
        self.status = FAILED
        self.reason = _one_line(reason)
        # A value that failed (refused, clamped, invalid) is never an active line of the file.
        self.settable = False


def parse_settings(settings):
    """Validate the settings dict and return a list of Entry in the given order.

    Values of the integer keys in INTEGER_KEYS are checked here, before anything is read.
    """
    if settings is None:
        return []
    if not isinstance(settings, dict):
        raise SysctlInputError("settings must be a dict of key -> value")
    entries = []
    seen = {}
    errors = []
    for key, value in settings.items():
        try:
            entry = Entry(key, normalize_value(value, key))
        except SysctlInputError as e:
            errors.append(str(e))
            continue
        if entry.canonical in seen:
            errors.append("%s and %s name the same sysctl" % (seen[entry.canonical], key))
            continue
        problem = known_value_problem(key, entry.wanted)
        if problem:
            errors.append(problem)
            continue
        seen[entry.canonical] = key
        entries.append(entry)
    if errors:
        raise SysctlInputError("; ".join(errors))
    return entries


def predict_congestion_control(wanted, proc):
    """(status, reason) if the kernel would refuse wanted as default congestion control, else None.

    An algorithm that is neither registered nor loadable is refused everywhere (ENOENT): that
    is a wrong value, FAILED. In a non-init network namespace one that is not in
    tcp_allowed_congestion_control is refused with EPERM (only init_net may make a restricted
    algorithm the default): a namespace restriction, SKIPPED.
    """
    name = wanted.strip()
    if not name or len(name.split()) != 1:
        return FAILED, "congestion control %r is not one algorithm name" % wanted
    available = proc.read_list(CC_AVAILABLE_KEY)
    if available is not None and name not in available and not proc.cc_module_exists(name):
        return FAILED, ("congestion control %s is not available in this kernel: "
                        "tcp_available_congestion_control is '%s' and there is no tcp_%s module "
                        "[ENOENT]" % (name, " ".join(available), name))
    if proc.is_init_netns() is False:
        allowed = proc.read_list(CC_ALLOWED_KEY)
        if allowed is not None and name not in allowed:
            return SKIPPED, ("congestion control %s is not in net.ipv4.tcp_allowed_congestion_control "
                             "'%s': a non-init network namespace may only make an allowed algorithm "
                             "its default [EPERM]" % (name, " ".join(allowed)))
    return None


def settability(entry, proc):
    """(status, reason) when the key cannot be set here, else None. Judged without writing:
    a global key outside the init netns, no write bit in the key's mode, no write access."""
    init = proc.is_init_netns()
    if init is False and is_global_key(entry.key):
        return SKIPPED, ("global sysctl: only the initial network namespace can set it, this one "
                         "sees it read-only or has writes refused [EINVAL]")
    mode = proc.mode(entry.key)
    if mode is not None and not mode & 0o222:
        if init is True:
            return FAILED, "%s is read-only (mode %04o): nobody can set it" % (
                display_path(entry.key), mode)
        return SKIPPED, "read-only in this network namespace (mode %04o)" % mode
    if not proc.writable(entry.key):
        return SKIPPED, ("no write permission here [EACCES]: /proc/sys mounted read-only (a "
                         "container) or not root")
    return None


def plan_entries(entries, proc, apply_live=True):
    """Predict every key's status. Reads and stats only: never writes, also not in check mode.

    Per key, in this order:
    - a directory, or a value that does not fit the key (INTEGER_KEYS, or for other keys the
      shape of the live value: a key that reads as N integers takes N integers) -> failed;
    - missing /proc/sys path -> skipped for a global key outside the init netns (hidden there),
      failed otherwise (a misspelt key, or a feature this kernel lacks);
    - congestion control: an unknown algorithm -> failed; one a non-init netns may not make
      its default -> skipped (see predict_congestion_control);
    - cannot be set here (see settability) -> skipped, or failed for a read-only key in the
      init netns; this also holds when the live value already matches, so the drop-in never
      holds a line that sysctl --system would fail on;
    - live value equal (whitespace-insensitive) -> unchanged;
    - otherwise applied, or with apply_live=False unchanged and listed as drifted.
    """
    for e in entries:
        e.status = None
        e.reason = ""
        e.settable = True
        e.drifted = False
        e.before = e.after = None
        if proc.is_dir(e.key):
            e.fail("%s is a directory, not a sysctl" % display_path(e.key))
            continue
        if not proc.exists(e.key):
            if proc.is_init_netns() is not True and is_global_key(e.key):
                e.skip("%s does not exist in this network namespace: a global sysctl only the "
                       "initial namespace has" % display_path(e.key))
            else:
                where = "" if proc.is_init_netns() is True else " (not a global sysctl hidden in a netns)"
                e.fail("%s does not exist%s: not a sysctl of this kernel - a misspelt key, or a "
                       "feature this kernel lacks" % (display_path(e.key), where))
            continue
        readable = True
        read_error = ""
        try:
            e.before = " ".join(proc.read(e.key).split())
        except (OSError, IOError) as err:
            readable = False
            read_error = describe_os_error(err)
        e.after = e.before

        problem = inferred_value_problem(e.key, e.wanted, e.before) if readable else None
        if problem:
            e.fail(problem)
            continue
        matches = readable and values_equal(e.before, e.wanted, e.key)
        verdict = None
        if e.canonical == CC_KEY and not matches:
            verdict = predict_congestion_control(e.wanted, proc)
        verdict = verdict or settability(e, proc)
        if verdict:
            status, reason = verdict
            if matches:
                reason += "; the live value already matches"
            if status == FAILED:
                e.fail(reason)
            else:
                e.skip(reason)
            continue

        if matches:
            e.status = UNCHANGED
            e.reason = "live value already matches"
            continue
        if not apply_live:
            e.status = UNCHANGED
            e.drifted = True
            e.reason = ("live value differs and is left as it is: apply_live=false"
                        if readable else "live value unreadable (%s); apply_live=false" % read_error)
            continue
        e.status = APPLIED
        e.drifted = True
        e.after = e.wanted
        e.reason = ("live value differs" if readable
                    else "live value unreadable (%s); written unconditionally" % read_error)
    return entries


def apply_entries(entries, proc):
    """Write the keys planned as 'applied' and read them back.

    The plan already left out what this namespace cannot set, so any refusal now is a refusal
    of the wanted value (EINVAL out of range, EPERM/ENOENT congestion control, ...): failed. So
    is a read-back that differs from the wanted value (the kernel clamped or ignored part of
    it). A failed key is never written to the drop-in as an active line.
    """
    for e in entries:
        if e.status != APPLIED:
            continue
        try:
            proc.write(e.key, e.wanted)
        except (OSError, IOError) as err:
            e.after = e.before
            e.fail("the kernel refused the value %s: %s" % (e.wanted, describe_os_error(err)))
            continue
        try:
            raw = proc.read(e.key)
        except (OSError, IOError) as err:
            e.after = None
            if e.before is not None:
                e.fail("written, but reading it back failed: %s" % describe_os_error(err))
            else:
                e.reason = "written; the key cannot be read back"
            continue
        e.after = " ".join(raw.split())
        # On success the reason stays the planned one, so a real run reports exactly what
        # check mode predicted.
        if not values_equal(e.after, e.wanted, e.key):
            e.fail("wrote %s but the kernel reads back %s: clamped or rejected"
                   % (e.wanted, e.after))
    return entries


def make_strict(entries):
    """strict=true: a key that cannot be set here is a failure."""
    for e in entries:
        if e.status == SKIPPED:
            e.status = FAILED
            e.reason = "cannot be set here (strict): " + e.reason


def summarize(entries):
    """The per-key dict, the status lists (see RESULT_LISTS) and drifted."""
    out = {"keys": {}, "drifted": []}
    for status in STATUSES:
        out[RESULT_LISTS[status]] = []
    for e in entries:
        out["keys"][e.key] = e.as_result()
        out[RESULT_LISTS[e.status]].append(e.key)
        if e.drifted:
            out["drifted"].append(e.key)
    return out


# ---------------------------------------------------------------------------------------------
# the remaining configuration and restoring (state=absent)
# ---------------------------------------------------------------------------------------------

def is_glob(relpath):
    """A key with a glob(7) pattern, as systemd-sysctl tells them apart (string_is_glob)."""
    return any(c in relpath for c in GLOB_CHARS)


def glob_matches(pattern, relpath):
    """Does a key pattern (a /proc/sys relative path) match a key? systemd-sysctl globs the
    /proc/sys tree, so a wildcard never crosses a '/'."""
    pattern_parts = pattern.split("/")
    key_parts = relpath.split("/")
    return len(pattern_parts) == len(key_parts) and all(
        fnmatch.fnmatchcase(k, p) for p, k in zip(pattern_parts, key_parts))


class ConfigValues(object):
    """The assignments of a set of sysctl configuration files, resolved like systemd-sysctl.

    options maps a key or key pattern (relative path below /proc/sys) to (value, file) like
    systemd-sysctl's ordered table: a later assignment of a different value replaces an earlier
    one and moves to the end, an exclusion line (C(-key) without C(=)) is stored with the value
    None. A key is set by its own entry if it has one (an explicit key, also an exclusion, keeps
    every pattern away from it, see sysctl.d(5) "Keys for which an explicit pattern exists will be
    excluded from any glob matching"); otherwise by the last pattern that matches it.
    """

    def __init__(self):
        self.options = {}
        self.files = []

    def add(self, relpath, value, source):
        existing = self.options.get(relpath)
        if existing is not None and existing[0] == value:
            return  # systemd keeps the earlier entry (and its place) for the same value
        self.options.pop(relpath, None)
        self.options[relpath] = (value, source)

    def parse(self, content, source):
        """Read one file's lines as systemd-sysctl's parse_file does: '#' and ';' comments,
        'key = value', '-key = value' (failures ignored: still an assignment), '-key' (exclude
        the key from patterns). A line it would reject (no '=', an invalid key) is ignored."""
        self.files.append(source)
        for line in (content or "").splitlines():
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            key, sep, value = line.partition("=")
            key = key.strip()
            if key.startswith("-"):
                key = key[1:].strip()
            elif not sep:
                continue
            try:
                relpath = key_to_relpath(key)
            except SysctlInputError:
                continue
            self.add(relpath, " ".join(value.split()) if sep else None, source)
        return self

    def lookup(self, key):
        """(value, where) that the configuration gives key: where names the file (and the
        pattern), value is None when no file sets it (where is then None, or names the exclusion)."""
        relpath = key_to_relpath(key)
        if relpath in self.options:
            value, source = self.options[relpath]
            if value is None:
                return None, "excluded by '-%s' in %s" % (key, source)
            return value, source
        found = None, None
        for pattern, (value, source) in self.options.items():
            if value is not None and is_glob(pattern) and glob_matches(pattern, relpath):
                found = value, "%s (pattern %s)" % (source, pattern)
        return found


class SysctlConfig(object):
    """The sysctl configuration files applied at boot, below a root directory (tests use a fake
    tree; default /).

    Order and precedence, as systemd-sysctl (sysctl.d(5), "CONFIGURATION DIRECTORIES AND
    PRECEDENCE") and procps' sysctl --system (sysctl(8), "SYSTEM FILE PRECEDENCE") read them:
    the *.conf files of /etc/sysctl.d, /run/sysctl.d, /usr/local/lib/sysctl.d, /usr/lib/sysctl.d
    and /lib/sysctl.d (systemd reads /lib only on split-/usr systems; on merged /usr it is the
    same directory as /usr/lib); a file hides every file of the same name in the directories
    after it (so a symlink to /dev/null in /etc masks a vendor file); all remaining files are
    applied sorted by file name regardless of their directory, so the file with the latest name
    wins for a key set twice. /etc/sysctl.conf: procps reads it after all of them; systemd-sysctl
    does not read it since systemd 207 (NEWS: "no longer natively reads the file
    /etc/sysctl.conf. If desired, the file should be symlinked from
    /etc/sysctl.d/99-sysctl.conf", which Debian's systemd package ships). So it counts where a
    sysctl.d file resolves to it, and last (as procps does) when none does. Not modelled:
    sysctl.*= on the kernel command line and systemd credentials (sysctl.extra).
    """

    def __init__(self, root="/", dirs=SYSCTL_D_DIRS, legacy_file=SYSCTL_CONF):
        self.root = root
        self.dirs = tuple(self._below_root(d) for d in dirs)
        self.legacy_file = self._below_root(legacy_file) if legacy_file else None

    def _below_root(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    @staticmethod
    def _same_file(a, b):
        return os.path.abspath(a) == os.path.abspath(b) or os.path.realpath(a) == os.path.realpath(b)

    def files(self, exclude=()):
        """The files in the order they are applied. The exclude paths (the drop-in being
        removed) count as gone already, so a same-named file in a later directory takes their
        place. Raises OSError if a directory cannot be listed."""
        chosen = {}
        for directory in self.dirs:
            try:
                names = os.listdir(directory)
            except (OSError, IOError) as err:
                if err.errno in (errno.ENOENT, errno.ENOTDIR):
                    continue
                raise
            for name in names:
                path = os.path.join(directory, name)
                if (not name.endswith(".conf") or name in chosen or os.path.isdir(path)
                        or any(self._same_file(path, gone) for gone in exclude)):
                    continue
                chosen[name] = path
        ordered = [chosen[name] for name in sorted(chosen)]
        legacy = self.legacy_file
        if legacy and os.path.isfile(legacy) and not any(
                self._same_file(legacy, path) for path in list(ordered) + list(exclude)):
            ordered.append(legacy)
        return ordered

    @staticmethod
    def read(path):
        """Text of one file; a dangling symlink masks like an empty file. Raises OSError."""
        try:
            with open(path, "rb") as handle:
                return handle.read().decode("utf-8", "replace")
        except (OSError, IOError) as err:
            if err.errno == errno.ENOENT and os.path.islink(path):
                return ""
            raise

    def values(self, exclude=()):
        """ConfigValues of all files but the excluded ones. Reads only; raises OSError."""
        values = ConfigValues()
        for path in self.files(exclude):
            values.parse(self.read(path), path)
        return values


class RestoreEntry(Entry):
    """A key of the removed drop-in; wanted is the value it is restored to (None: none)."""

    def __init__(self, key):
        self.key = key
        try:
            self.canonical = canonical_key(key)
        except SysctlInputError:
            self.canonical = None
        self.wanted = None
        self.before = self.after = None
        self.status = None
        self.reason = ""
        self.settable = True
        self.drifted = False
        self.source = None        # where wanted comes from: a file, or RESTORE_SOURCE
        self.unrestored = False   # no target: the live value is left as it is

    def as_result(self):
        result = super(RestoreEntry, self).as_result()
        result["source"] = self.source
        return result

    def leave(self, reason, proc=None, unrestored=False):
        """Nothing to write: status unchanged, the live value (if any) reported as it is."""
        if proc is not None:
            try:
                self.before = " ".join(proc.read(self.key).split())
            except (OSError, IOError):
                self.before = None
        self.after = self.before
        self.status = UNCHANGED
        self.reason = _one_line(reason)
        self.unrestored = unrestored


def parse_restore(restore):
    """Validate the restore option (key -> value, like settings): canonical key -> value text.
    Raises SysctlInputError."""
    return dict((e.canonical, e.wanted) for e in parse_settings(restore or {}))


def restore_entries(removed_content, values, restore, proc, apply_live=True):
    """Plan putting back every key the removed drop-in set. Reads only, like plan_entries.

    Per key of the removed file (its active lines, in order): the target is the value the
    remaining configuration gives it (values, a ConfigValues), else restore[canonical key]
    (restore from parse_restore); then plan_entries predicts applied / unchanged / skipped /
    failed as for state=present, and apply_entries writes it. Left as it is with status unchanged:
    a key that does not exist here (nothing live to restore) and - listed as unrestored - a key
    without a target, a glob pattern, an invalid key. A target value from a file that does not fit
    the key fails like an invalid setting.
    """
    entries = []
    planned = []
    seen = set()
    for key in parse_file(removed_content):
        e = RestoreEntry(key)
        if e.canonical is not None and e.canonical in seen:
            continue
        entries.append(e)
        if e.canonical is None:
            e.leave("not a valid sysctl key: left as it is", unrestored=True)
            continue
        seen.add(e.canonical)
        relpath = key_to_relpath(key)
        if is_glob(relpath):
            e.leave("a glob pattern: the keys it matched are left as they are", unrestored=True)
            continue
        if not proc.exists(key):
            e.leave("%s does not exist here: nothing live to restore" % display_path(key))
            continue
        value, where = values.lookup(key)
        if value is not None:
            e.wanted, e.source = value, where
            problem = known_value_problem(key, value)
            if problem:
                e.leave("", proc)
                e.fail("%s (the value %s sets)" % (problem, where))
                continue
        elif e.canonical in restore:
            e.wanted, e.source = restore[e.canonical], RESTORE_SOURCE
        else:
            e.leave("no remaining configuration file sets it%s and restore has no value for it: "
                    "the live value is left as it is" % (" (%s)" % where if where else ""),
                    proc, unrestored=True)
            continue
        planned.append(e)
    plan_entries(planned, proc, apply_live=apply_live)
    for e in planned:
        e.reason = "%s; restoring %s from %s" % (
            e.reason, e.wanted, "the restore option" if e.source == RESTORE_SOURCE else e.source)
    return entries


def summarize_restore(entries):
    """summarize() plus unrestored: the keys left as they are for want of a target."""
    out = summarize(entries)
    out["unrestored"] = [e.key for e in entries if getattr(e, "unrestored", False)]
    return out


# ---------------------------------------------------------------------------------------------
# the drop-in and the diff
# ---------------------------------------------------------------------------------------------

def render_header(header=None):
    lines = list(MANAGED_HEADER)
    if header:
        for line in str(header).splitlines():
            line = line.rstrip()
            if not line:
                lines.append("#")
            elif line.startswith("#"):
                lines.append(line)
            else:
                lines.append("# " + line)
    return lines


def render_file(entries, header=None):
    """The whole drop-in. Keys that cannot be set here, and values the kernel refused, become
    comment lines, so the file never holds a value sysctl --system at boot would fail on."""
    lines = render_header(header)
    lines.append("")
    for e in entries:
        if e.settable:
            lines.append("%s = %s" % (e.key, e.wanted))
        elif e.status == FAILED:
            lines.append("# refused here: %s = %s (%s)" % (e.key, e.wanted, _one_line(e.reason)))
        else:
            lines.append("# skipped here: %s = %s (%s)" % (e.key, e.wanted, _one_line(e.reason)))
    return "\n".join(lines) + "\n"


def parse_file(content):
    """key -> value of the active lines of a sysctl.d file (for inspection and tests)."""
    values = {}
    for line in (content or "").splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if "=" not in line:
            continue
        key, value = line.split("=", 1)
        values[key.strip().lstrip("-")] = " ".join(value.split())
    return values


def live_diff_lines(entries):
    before = []
    after = []
    for e in entries:
        if e.status in (APPLIED, FAILED) and e.before != e.after:
            before.append("%s = %s" % (e.key, "" if e.before is None else e.before))
            after.append("%s = %s" % (e.key, "" if e.after is None else e.after))
    return before, after


def _text_block(lines):
    return "".join(line + "\n" for line in lines)


def build_diff(path, before_content, after_content, entries):
    """Two diffs: the drop-in file and the live values of the keys that change."""
    live_before, live_after = live_diff_lines(entries)
    return [
        {
            "before": before_content or "",
            "after": after_content or "",
            "before_header": path,
            "after_header": path,
        },
        {
            "before": _text_block(live_before),
            "after": _text_block(live_after),
            "before_header": LIVE_DIFF_HEADER,
            "after_header": LIVE_DIFF_HEADER,
        },
    ]
