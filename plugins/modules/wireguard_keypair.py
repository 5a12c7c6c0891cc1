#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: wireguard_keypair
short_description: Keep a WireGuard private key on its host and return only the public key
version_added: 0.3.0
description:
  - Generates the private key on the managed host with C(wg genkey) when O(path) does not exist, writing it
    with mode C(0600) (created that way, never wider for a moment) in a directory of mode C(0700).
  - An existing key is kept; its mode is narrowed to C(0600) and its owner set to root when they differ.
  - Returns the public key (C(wg pubkey), the private key passed on standard input, never in process
    arguments). The private key never appears in the result, in a diff or in a log.
  - The public key is also written to O(public_path) so a later run limited to other hosts can read it.
options:
  path:
    description: The private key file, owned by this module.
    type: path
    default: /etc/trainnet/wireguard/private.key
  public_path:
    description: Where the public key is kept (mode C(0644)).
    type: path
    default: /etc/trainnet/wireguard/public.key
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - Predicts creating a missing key (then RV(public_key) is V(null)) or narrowing its mode; writes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
requirements:
  - C(wg) from wireguard-tools on the managed host.
author:
  - longhaul.trainnet maintainers (@longhaul)
'''

EXAMPLES = r'''
- name: Make sure this host has a WireGuard key and learn its public key
  longhaul.trainnet.wireguard_keypair:
    path: /etc/trainnet/wireguard/private.key
  register: wg_key
'''

RETURN = r'''
public_key:
  description: Base64 public key; V(null) in check mode when the key does not exist yet.
  returned: always
  type: str
  sample: Tt5uQ7S0vXbYkWmRl1Gd8mJqKq3b0r9E1a6bXcY2Z1A=
path:
  description: The private key file.
  returned: always
  type: str
  sample: /etc/trainnet/wireguard/private.key
created:
  description: Whether a new private key was (or in check mode would be) generated.
  returned: always
  type: bool
  sample: false
'''

import os
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.longhaul.trainnet.plugins.module_utils.command import run_bounded
from ansible_collections.longhaul.trainnet.plugins.module_utils.config_value import is_wireguard_key
from ansible_collections.longhaul.trainnet.plugins.module_utils.control_plane import valid_preshared_key
from ansible_collections.longhaul.trainnet.plugins.module_utils.errors import describe_os_error
from ansible_collections.longhaul.trainnet.plugins.module_utils.textfile import write_atomic

LIMIT = 10  # seconds: wg genkey/pubkey read /dev/urandom and answer at once


def write_exclusive(path, text, mode):
    """Create `path` with `mode` from the start (O_EXCL, umask 077): never readable by others."""
    old = os.umask(0o077)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    finally:
        os.umask(old)
    with os.fdopen(fd, 'w') as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', default='/etc/trainnet/wireguard/private.key'),
            public_path=dict(type='path', default='/etc/trainnet/wireguard/public.key'),
        ),
        supports_check_mode=True,
    )
    path, public_path = module.params['path'], module.params['public_path']
    result = dict(changed=False, path=path, public_key=None, created=False)
    wg = module.get_bin_path('wg')
    if wg is None:
        module.fail_json(msg='wg (wireguard-tools) is not installed on this host', **result)

    directory = os.path.dirname(path)
    try:
        exists = os.path.exists(path)
        if not exists:
            result.update(changed=True, created=True)
            if module.check_mode:
                module.exit_json(**result)
            if not os.path.isdir(directory):
                os.makedirs(directory, 0o700)
            generated = run_bounded([wg, 'genkey'], LIMIT)
            key = generated.out.strip()
            if generated.rc != 0 or not valid_preshared_key(key):
                module.fail_json(msg='wg genkey failed (rc=%s): %s' % (generated.rc, generated.err.strip()), **result)
            write_exclusive(path, key + '\n', 0o600)
        else:
            info = os.stat(path)
            if stat.S_IMODE(info.st_mode) != 0o600 or info.st_uid != 0:
                result['changed'] = True
                if not module.check_mode:
                    os.chown(path, 0, 0)
                    os.chmod(path, 0o600)
            with open(path) as handle:
                key = handle.read().strip()
        derived = run_bounded([wg, 'pubkey'], LIMIT, data=key + '\n')
        if derived.rc != 0:
            # wg's message names the problem without the key ("Key is not the correct length or format").
            module.fail_json(msg='%s does not hold a valid WireGuard private key: %s' % (path, derived.err.strip()),
                             **result)
        public = derived.out.strip()
        if not is_wireguard_key(public):   # it goes into the peers' configuration: one line, a key
            module.fail_json(msg='wg pubkey printed no WireGuard key for %s: %r' % (path, public[:100]), **result)
        result['public_key'] = public
        current = None
        if os.path.exists(public_path):
            with open(public_path) as handle:
                current = handle.read().strip()
        if current != public:
            result['changed'] = True
            if not module.check_mode:
                write_atomic(public_path, public + '\n', 0o644)
    except (IOError, OSError) as exc:
        module.fail_json(msg='%s: %s' % (path, describe_os_error(exc)), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
