"""The ocean lab command: python3 lab/lab.py up|down|status|validate [--help]."""
import importlib.util
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

if importlib.util.find_spec("yaml") is None:  # the inventory reader needs PyYAML
    # Re-run with the project's virtualenv, which has PyYAML (scripts/bootstrap.sh creates it).
    venv_python = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
    if venv_python.exists() and not os.environ.get("TRAINNET_LAB_REEXEC"):
        os.environ["TRAINNET_LAB_REEXEC"] = "1"  # once: the venv may lack PyYAML too
        os.execv(str(venv_python), [str(venv_python), *sys.argv])
    sys.exit("lab: PyYAML is missing: apt-get install python3-yaml (or source scripts/bootstrap.sh)")

from trainnet_lab.cli import main  # noqa: E402

sys.exit(main())
