"""Offline stand-in for ansible-test's pip bootstrap script (get-pip-<version>.py).

ansible-test downloads get-pip from ci-files.testing.ansible.com, which is not reachable from
these machines; its own error message says the script may be saved to its cache by hand. This
stand-in does what get-pip does: run pip from its wheel (downloaded from PyPI by
scripts/sanity.sh, saved beside this file) to install the requested packages.
"""
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WHEEL = sorted(glob.glob(os.path.join(HERE, "pip-*-py3-none-any.whl")))[-1]
sys.path.insert(0, WHEEL)
from pip._internal.cli.main import main as pip_main  # noqa: E402  pylint: disable=wrong-import-position

# get-pip-only flags; pip itself does not know them.
ARGS = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(pip_main(["install"] + ARGS))
