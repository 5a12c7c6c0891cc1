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


@pytest.mark.parametrize("role", ROLES)
def test_specs_and_defaults_cover_the_same_variables(role):
    options = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    defaults = load(role, "defaults", "main.yml")
    assert sorted(options) == sorted(defaults)


@pytest.mark.parametrize("role", ROLES)
def test_spec_defaults_equal_role_defaults(role):
    options = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    defaults = load(role, "defaults", "main.yml")
    for name, spec in options.items():
        assert spec.get("default") == defaults[name], name


@pytest.mark.parametrize("role", ROLES)
def test_public_variables_carry_the_role_prefix(role):
    options = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert all(name.startswith(role + "_") for name in options), sorted(options)
    private = load(role, "vars", "main.yml") if os.path.exists(
        os.path.join(ROOT, "roles", role, "vars", "main.yml")) else {}
    assert all(name.startswith("__%s_" % role) for name in private), sorted(private)


@pytest.mark.parametrize("role", ROLES)
def test_every_option_has_type_and_description(role):
    options = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    for name, spec in options.items():
        assert spec.get("type"), name
        assert spec.get("description"), name
