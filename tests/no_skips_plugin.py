"""pytest plugin the test command loads for the lab and benchmark gates (-p tests.no_skips_plugin).

Those tests skip themselves where a lab cannot be built (not root, no TUN, no image, the lab in
use). Run by scripts/test.sh, a skip means an acceptance check did not happen, so it fails.
"""

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # pylint: disable=unused-argument
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = "skipped, which the test command does not accept: %s" % (report.longrepr,)
