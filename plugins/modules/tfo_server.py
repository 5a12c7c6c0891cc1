#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: tfo_server
short_description: Serve TCP Fast Open request/response connections on one address for a bounded time
version_added: 0.2.0
description:
  - Runs the collection's TCP Fast Open echo server (the counterpart of the O(longhaul.trainnet.link_measure#module:tfo_port)
    timing) on the peer of a measured link, bound to O(address) only (IPv4 or IPv6, the family follows the address),
    until O(seconds) pass or O(max_connections) connections were answered, then returns how many it answered.
  - Meant to be started with C(async) and C(poll=0) beside the measurement, so it runs from Ansible's private
    temporary directory (nothing is copied to a shared path).
  - When started as root it binds the socket, then forks a child that drops to O(user) (supplementary groups
    cleared, group and user set to that user's) before it accepts a single connection; the root parent only
    waits for the child, kills it at the deadline and reports. Started as another user, it serves as that user.
  - The kernel accepts data in the SYN only when C(net.ipv4.tcp_fastopen) has the server bit (2); otherwise
    clients fall back to a normal handshake, which the measurement reports.
options:
  address:
    description:
      - Address to listen on - the address the peer is measured at. Not a wildcard, so the server is not
        reachable on other interfaces.
    type: str
    required: true
  port:
    description: TCP port, 1-65535.
    type: int
    default: 5202
  seconds:
    description: Seconds the server runs at most, 1-3600.
    type: int
    default: 60
  max_connections:
    description: Stop after answering this many connections; V(0) means no limit (only O(seconds)).
    type: int
    default: 0
  user:
    description: Unprivileged user the server runs as when the module runs as root.
    type: str
    default: nobody
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - The server only answers probe connections and changes nothing on the host, so it runs in check mode too.
  diff_mode:
    support: none
  platform:
    platforms: linux
notes:
  - The listening socket is closed when the module returns; nothing outlives O(seconds) plus a few seconds.
seealso:
  - module: longhaul.trainnet.link_measure
  - name: TCP Fast Open (RFC 7413)
    description: Data in the SYN with a server cookie.
    link: https://www.rfc-editor.org/rfc/rfc7413
author:
  - longhaul.trainnet maintainers (@longhaul)
'''

EXAMPLES = r'''
- name: Start a TFO server on the peer's measured address for at most two minutes
  longhaul.trainnet.tfo_server:
    address: 198.18.2.11
    port: 5202
    seconds: 120
  async: 130
  poll: 0
  register: tfo_job
'''

RETURN = r'''
address:
  description: The address the server listened on.
  returned: always
  type: str
  sample: 198.18.2.11
port:
  description: The port.
  returned: always
  type: int
  sample: 5202
served:
  description: Connections answered.
  returned: success
  type: int
  sample: 5
user:
  description: The user that accepted the connections.
  returned: success
  type: str
  sample: nobody
'''

import os
import pwd
import select
import signal
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.longhaul.trainnet.plugins.module_utils.errors import describe_os_error
from ansible_collections.longhaul.trainnet.plugins.module_utils.tfo import listen, serve_on

EXIT_GRACE = 5.0


def drop_privileges(entry):
    """Clear supplementary groups, then set group and user (in that order: after setuid the
    process could not change its groups any more). Raises OSError if any step fails."""
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    if os.getuid() != entry.pw_uid or os.geteuid() != entry.pw_uid or os.getgroups() not in ([], [entry.pw_gid]):
        raise OSError(0, 'privileges not dropped to %s' % entry.pw_name)


def serve_as(listener, entry, deadline, max_connections):
    """Fork; the child drops to `entry` and serves; the parent waits (bounded) and returns
    (served, error)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            os.close(read_fd)
            drop_privileges(entry)
            served = serve_on(listener, deadline, max_connections)
            os.write(write_fd, ('ok %d' % served).encode())
            code = 0
        except BaseException as exc:  # pylint: disable=broad-except
            try:
                os.write(write_fd, ('error %s' % describe_os_error(exc)).encode())
            except OSError:
                pass
        finally:
            os._exit(code)  # pylint: disable=protected-access
    os.close(write_fd)
    listener.close()
    message = b''
    try:
        limit = deadline + EXIT_GRACE
        while time.monotonic() < limit:
            ready, _w, _x = select.select([read_fd], [], [], max(0.0, limit - time.monotonic()))
            if not ready:
                break
            chunk = os.read(read_fd, 4096)
            if not chunk:
                break
            message += chunk
    finally:
        os.close(read_fd)
        if not message:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        os.waitpid(pid, 0)
    text = message.decode('utf-8', 'replace')
    if text.startswith('ok '):
        return int(text[3:]), None
    return None, text[6:] if text.startswith('error ') else 'server process ended without a result (killed?)'


def main():
    module = AnsibleModule(
        argument_spec=dict(
            address=dict(type='str', required=True),
            port=dict(type='int', default=5202),
            seconds=dict(type='int', default=60),
            max_connections=dict(type='int', default=0),
            user=dict(type='str', default='nobody'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    problems = []
    if not 0 < params['port'] < 65536:
        problems.append('port=%s must be 1-65535' % params['port'])
    if not 1 <= params['seconds'] <= 3600:
        problems.append('seconds=%s must be 1-3600' % params['seconds'])
    if params['max_connections'] < 0:
        problems.append('max_connections=%s must be 0 (no limit) or more' % params['max_connections'])
    if not params['address'].strip() or params['address'].strip() in ('0.0.0.0', '::', '*'):
        problems.append('address=%r must name the one measured address, not a wildcard' % params['address'])
    entry = None
    if os.geteuid() == 0:
        try:
            entry = pwd.getpwnam(params['user'])
        except KeyError:
            problems.append('user=%s does not exist on this host' % params['user'])
        else:
            if entry.pw_uid == 0:
                problems.append('user=%s is root; the server must run unprivileged' % params['user'])
    if problems:
        module.fail_json(msg='invalid options: %s' % '; '.join(problems))
    result = dict(changed=False, address=params['address'], port=params['port'])
    try:
        listener = listen(params['address'], params['port'])
    except (OSError, IOError) as exc:
        module.fail_json(msg='cannot listen on %s port %s: %s' % (params['address'], params['port'],
                                                                  describe_os_error(exc)), **result)
    deadline = time.monotonic() + params['seconds']
    limit = params['max_connections'] or None
    if entry is None:
        served, error = serve_on(listener, deadline, limit), None
        user = pwd.getpwuid(os.geteuid()).pw_name
    else:
        served, error = serve_as(listener, entry, deadline, limit)
        user = entry.pw_name
    if error:
        module.fail_json(msg='TFO server on %s port %s: %s' % (params['address'], params['port'], error), **result)
    module.exit_json(served=served, user=user, **result)


if __name__ == '__main__':
    main()
