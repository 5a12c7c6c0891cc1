"""chunked_allreduce: a chunk whose all-reduce fails makes the whole call fail. Found on the lab:
the error of one Gloo group was swallowed and the caller read a half-reduced tensor as the sum."""

import pytest
from .conftest import WORKLOAD, load_module, needs_torch


class FakeWork:
    def __init__(self, torch, error=None):
        self.future = torch.futures.Future()
        if error:
            self.future.set_exception(error)
        else:
            self.future.set_result(None)

    def get_future(self):
        return self.future


@needs_torch
def test_a_failed_chunk_fails_the_call(monkeypatch):
    import torch
    import torch.distributed as dist
    workload = load_module(WORKLOAD, "trainnet_workload_chunked")
    calls = []

    def all_reduce(chunk, group=None, async_op=False):
        calls.append(group)
        return FakeWork(torch, RuntimeError("Connection closed by peer") if group == "g2" else None)

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    tensor = torch.ones(12)
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        workload.chunked_allreduce(tensor, ["g1", "g2", "g3"]).wait()
    assert calls == ["g1", "g2", "g3"]          # all chunks were in flight at once
    monkeypatch.setattr(dist, "all_reduce", lambda chunk, group=None, async_op=False: FakeWork(torch))
    assert workload.chunked_allreduce(tensor, ["g1", "g2"]).wait() is tensor
