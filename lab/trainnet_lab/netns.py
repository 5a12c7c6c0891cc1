"""Network namespace plumbing: ip(8) wrappers, setns(2) and TUN devices.

Python 3.11 has no os.setns (3.12 does), so setns and timerfd go through ctypes.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import struct
import subprocess
from contextlib import contextmanager
from pathlib import Path

NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000

_libc = ctypes.CDLL(None, use_errno=True)


class CommandError(RuntimeError):
    pass


def c_locale_env(**extra: str) -> dict:
    """This process's environment with the C locale (the output of what runs is parsed)."""
    return dict(os.environ, LANG="C", LC_ALL="C", **extra)


def run(argv: list[str], *, check: bool = True, input_text: str | None = None,
        timeout: float = 60, env: dict | None = None, what: str | None = None
        ) -> subprocess.CompletedProcess:
    """The lab's one command runner: C locale (env defaults to c_locale_env()), bounded by
    `timeout`; with check, a non-zero exit raises CommandError naming `what` (default: argv)."""
    result = subprocess.run(argv, input=input_text, capture_output=True, text=True,
                            env=env if env is not None else c_locale_env(),
                            timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise CommandError(f"{what or ' '.join(argv)} failed ({result.returncode}): "
                           f"{(result.stderr or result.stdout).strip()}")
    return result


def ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    argv = ["ip"] + (["-n", netns] if netns else []) + list(args)
    return run(argv, check=check)


def ip_batch(commands: list[str], netns: str | None = None) -> None:
    """Several ip(8) commands in one process (much faster than one process each)."""
    if commands:
        argv = ["ip"] + (["-n", netns] if netns else []) + ["-batch", "-"]
        run(argv, input_text="\n".join(commands) + "\n")


def netns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def list_netns() -> list[str]:
    return sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.is_dir() else []


def sysctl_in(netns: str, settings: dict[str, str]) -> None:
    """Write sysctls inside a namespace (net.* sysctls are per network namespace)."""
    argv = ["ip", "netns", "exec", netns, "sysctl", "-q", "-w"]
    argv += [f"{key}={value}" for key, value in settings.items()]
    run(argv)


def read_sysctl(key: str) -> str:
    return Path("/proc/sys", *key.split(".")).read_text().strip()


def write_sysctl(key: str, value: str) -> None:
    Path("/proc/sys", *key.split(".")).write_text(value + "\n")


def setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextmanager
def inside_netns(name: str):
    """Switch this thread into a named network namespace, and back afterwards."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    target = os.open(NETNS_DIR / name, os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(target)
        try:
            yield
        finally:
            setns(home)
    finally:
        os.close(target)
        os.close(home)


def open_tun(name: str, netns: str) -> int:
    """Create a non-persistent TUN device in a namespace and return its non-blocking fd.

    The device exists only while the fd is open: when the emulator exits (or dies), the kernel
    removes its TUN devices and the routes through them, so nothing is left behind.
    """
    with inside_netns(netns):
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
        except OSError:
            os.close(fd)
            raise
    os.set_blocking(fd, False)
    return fd


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class MonotonicTimer:
    """A timerfd on CLOCK_MONOTONIC (the clock behind time.monotonic()) armed at absolute times.

    epoll_wait's timeout has millisecond granularity and Python rounds it up, which would add up
    to a millisecond to every emulated delay; a timerfd wakes the loop within microseconds.
    """

    CLOCK_MONOTONIC = 1
    TFD_NONBLOCK = os.O_NONBLOCK
    TFD_CLOEXEC = os.O_CLOEXEC
    TFD_TIMER_ABSTIME = 1

    def __init__(self):
        self.fd = _libc.timerfd_create(self.CLOCK_MONOTONIC, self.TFD_NONBLOCK | self.TFD_CLOEXEC)
        if self.fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self._spec = _Itimerspec()
        self._settime = _libc.timerfd_settime
        self.armed_at = None

    def arm(self, deadline: float) -> None:
        """Fire at the given time.monotonic() value (a past deadline fires immediately)."""
        if deadline == self.armed_at:
            return
        whole = int(deadline)
        self._spec.it_value.tv_sec = whole
        self._spec.it_value.tv_nsec = max(1, int((deadline - whole) * 1e9))
        if self._settime(self.fd, self.TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self.armed_at = deadline

    def acknowledge(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass
        self.armed_at = None

    def close(self) -> None:
        os.close(self.fd)
