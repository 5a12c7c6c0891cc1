# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every role's meta/argument_specs.yml and defaults/main.yml describe the same variables."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLES = sorted(d for d in os.listdir(os.path.join(ROOT, "roles"))
               if os.path.isfile(os.path.join(ROOT, "roles", d, "meta", "argument_specs.yml")))


def load(role, *parts):
    with open(os.path.join(ROOT, "roles", role, *parts)) as handle:
        return yaml.safe_load(handle) or {}


def all_options(role):
    """Options of every entry point (main, and e.g. training_job's launch); one spec per name."""
    merged = {}
    for entry in load(role, "meta", "argument_specs.yml")["argument_specs"].values():
        for name, spec in entry.get("options", {}).items():
            seen = merged.get(name, spec)
            assert all(seen.get(k) == spec.get(k) for k in ("type", "default", "choices", "elements")), \
                "%s has another type or default in another entry point" % name
            merged[name] = spec
    return merged


@pytest.mark.parametrize("role", ROLES)
def test_specs_and_defaults_cover_the_same_variables(role):
    options = all_options(role)
    defaults = load(role, "defaults", "main.yml")
    assert sorted(options) == sorted(defaults)


@pytest.mark.parametrize("role", ROLES)
def test_spec_defaults_equal_role_defaults(role):
    options = all_options(role)
    defaults = load(role, "defaults", "main.yml")
    for name, spec in options.items():
        assert spec.get("default") == defaults[name], name


@pytest.mark.parametrize("role", ROLES)
def test_public_variables_carry_the_role_prefix(role):
    options = all_options(role)
    assert all(name.startswith(role + "_") for name in options), sorted(options)
    private = load(role, "vars", "main.yml") if os.path.exists(
        os.path.join(ROOT, "roles", role, "vars", "main.yml")) else {}
    assert all(name.startswith("__%s_" % role) for name in private), sorted(private)


@pytest.mark.parametrize("role", ROLES)
def test_every_option_has_type_and_description(role):
    options = all_options(role)
    for name, spec in options.items():
        assert spec.get("type"), name
        assert spec.get("description"), name
