"""The ocean lab: an emulated China-US training network on one machine.

Modules:
  inventory  - reads the Ansible YAML inventory (hosts.yml, group_vars, host_vars) with PyYAML
  spec       - the lab model (sites, hosts, WAN links) and its validation
  packets    - IPv4 helpers for the emulator (route keys, ICMP "fragmentation needed", fragments)
  shaping    - one directed WAN link: rate, drop-tail queue, delay, jitter, loss (pure logic)
  emulator   - the WAN emulator process: TUN devices in the site routers, epoll loop, counters
  netns      - network namespace and TUN plumbing (ip(8), setns(2) through ctypes)
  lab        - builds, inspects and removes a lab (namespaces, bridges, containers, emulator)
  cli        - the `lab` command (lab/lab.py up|down|status|validate)
Links are measured by longhaul.trainnet.link_measure through playbooks/measure.yml.
"""

DEFAULT_LAB_NAME = "trainnet-lab"
STATE_ROOT = "/run/trainnet-lab"
