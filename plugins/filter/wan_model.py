# -*- coding: utf-8 -*-
# Copyright: (c) 2026, longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The WAN link matrix, checked and normalised by the collection's WAN model (wan_links.yml has
the documentation; the rules are plugins/plugin_utils/wan_model.py, which the lab uses too)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.longhaul.trainnet.plugins.plugin_utils import wan_model


def wan_links(links, sites=None):
    """Every link checked (one per site pair; with `sites`, only known sites), defaults filled in,
    name, rtt_ms, bandwidth_mbps and loss_pct derived; AnsibleFilterError listing every problem."""
    if sites is not None and not isinstance(sites, dict):
        raise AnsibleFilterError("wan_links: sites must be a dict of site -> {lan}, got %s" % type(sites).__name__)
    normalised, problems = wan_model.normalise(links, site_names=None if sites is None else list(sites))
    if problems:
        raise AnsibleFilterError("wan_links: " + "; ".join(problems))
    return normalised


class FilterModule(object):
    """The WAN model filter of longhaul.trainnet."""

    def filters(self):
        return {"wan_links": wan_links}
