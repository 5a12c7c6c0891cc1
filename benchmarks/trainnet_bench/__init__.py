"""The longhaul.trainnet benchmark suite: untuned vs tuned on the ocean lab, in one run.

Pure logic (stats, profiles, report, svg) needs no root; runner.py drives the lab.
"""

BENCH_LAB_NAME = "trainnet-labbench"
SCHEMA_VERSION = 1
