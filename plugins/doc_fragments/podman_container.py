# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Options shared by the connections to a running podman container (podman_exec, podman_nsenter)."""

from __future__ import annotations


class ModuleDocFragment(object):

    DOCUMENTATION = r"""
options:
  remote_addr:
    description:
      - Name or ID of the container.
    type: str
    default: inventory_hostname
    vars:
      - name: inventory_hostname
      - name: ansible_host
      - name: ansible_podman_host
  pipelining:
    description:
      - Pipeline modules (on by default, it is what these connections are for). Asynchronous
        tasks are never pipelined.
    type: bool
    default: true
    env:
      - name: ANSIBLE_PIPELINING
    ini:
      - section: defaults
        key: pipelining
      - section: connection
        key: pipelining
    vars:
      - name: ansible_pipelining
  podman_executable:
    description:
      - The podman executable on the controller.
    type: str
    default: podman
    vars:
      - name: ansible_podman_executable
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
"""
