"""The scenarios' testinfra hosts, "podman-nsenter://<container>": each command enters the
container's namespaces with nsenter, as the podman_nsenter connection does for the roles, instead of
testinfra's podman backend, which starts `podman exec` (conmon and runc) for every command: 0.1 s on
an idle machine, over a second under load, for hundreds of small reads per verify.
Same argv builder as the connection (plugin_utils/nsenter.py): the container's environment, root and
working directory; the user and cgroup namespaces stay the host's, as for the roles."""

import subprocess

import testinfra.backend
from testinfra.backend import base

from ansible_collections.longhaul.trainnet.plugins.plugin_utils.nsenter import inspect_argv, is_current, nsenter_argv, parse_target

SCHEME = "podman-nsenter"


class NsenterBackend(base.BaseBackend):
    """testinfra backend: `nsenter` into a running podman container, /bin/sh -c per command."""

    NAME = SCHEME

    def __init__(self, name, *args, **kwargs):
        self.name, self.user = self.parse_containerspec(name)
        super().__init__(self.name, *args, **kwargs)
        self._target = None

    def target(self):
        """{pid, start, env} of the container, looked up again once its PID 1 is gone or another
        (a restarted container gets a new one)."""
        if self._target is None or not is_current(self._target):
            found = subprocess.run(inspect_argv("podman", self.name), capture_output=True, text=True,
                                   timeout=60, check=False)
            try:
                if found.returncode != 0:
                    raise ValueError(found.stderr.strip())
                self._target = parse_target(found.stdout)
            except ValueError as exc:
                raise RuntimeError("container %s: %s" % (self.name, exc)) from exc
        return self._target

    def run(self, command, *args, **kwargs):
        cmd = self.get_command(command, *args)
        target = self.target()
        argv = nsenter_argv("nsenter", target["pid"], target["env"], self.user, ["/bin/sh", "-c", cmd])
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False)
        return self.result(proc.returncode, self.encode(cmd), proc.stdout, proc.stderr)


# testinfra finds a backend by scheme, as "module.Class": this conftest's own module name.
testinfra.backend.BACKENDS[SCHEME] = __name__ + ".NsenterBackend"
