"""The ocean lab command: python3 lab/lab.py up|down|status|validate [--help].

Python puts this file's folder (lab/) first on sys.path, so trainnet_lab imports from here with
any interpreter. The lab also needs PyYAML and the collection's shared code
(ansible_collections.longhaul.trainnet: MTU limits, BDP arithmetic), which the project's
virtualenv has (scripts/bootstrap.sh installs it and links the collection into it): an
interpreter without them re-runs this command with .venv's Python.
"""
import importlib.util
import os
import sys
from pathlib import Path

NEEDED = ("yaml", "ansible_collections.longhaul.trainnet.plugins.plugin_utils.bdp")


def missing_module():
    for name in NEEDED:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except ImportError:  # a parent package is missing
            return name
    return None


missing = missing_module()
if missing:
    venv_python = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
    if venv_python.exists() and not os.environ.get("TRAINNET_LAB_REEXEC"):
        os.environ["TRAINNET_LAB_REEXEC"] = "1"  # once: the venv may lack them too
        os.execv(str(venv_python), [str(venv_python), *sys.argv])
    sys.exit(f"lab: Python module {missing} is missing: run `source scripts/bootstrap.sh` "
             "(it creates .venv with PyYAML and links the collection into it)")

from trainnet_lab.cli import main  # noqa: E402

sys.exit(main())
