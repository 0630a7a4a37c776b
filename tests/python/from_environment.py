"""Run by gyrerun (test python_module_gyrerun): the plain module joins the job the launcher
set up (through the rank's daemon, or embedded) and runs a few collectives."""
import os

import numpy as np

import gyre

comm = gyre.Comm.from_environment()
rank, size = comm.rank, comm.size
assert rank == int(os.environ["GYRE_RANK"]) and size == int(os.environ["GYRE_WORLD_SIZE"])
x = np.full(1000, rank + 1, np.int64)
comm.allreduce(x)
assert (x == size * (size + 1) // 2).all(), x[:4]
parts = comm.allgather(np.array([rank], np.int32), np.zeros(size, np.int32))
assert parts.tolist() == list(range(size)), parts
w = comm.broadcast(np.full(4, rank, np.float32), root=size - 1, async_op=True)
assert w.wait(timeout=30).tolist() == [size - 1] * 4
comm.barrier()
# Memory from alloc_buffer: through the daemon shared with gyred and reduced in place, with
# nothing staged; embedded, ordinary memory. Freed with its last view.
buf = comm.alloc_buffer(4000 * 4)
assert len(buf) == 16000
v = np.frombuffer(buf, dtype=np.float32)
v[:] = np.arange(4000, dtype=np.float32) + rank
comm.allreduce(v)
want = size * np.arange(4000, dtype=np.float32) + size * (size - 1) // 2
assert (v == want).all(), v[:4]
assert comm.last()["bytes_staged"] == 0, comm.last()
h = np.ones(1000, np.float32)
comm.allreduce(h)
staged = comm.last()["bytes_staged"]
assert staged == (2 * 4000 if comm.mode == "daemon" else 0), (comm.mode, staged)
del v, buf
print("alloc_buffer ok: rank %d, mode %s" % (rank, comm.mode), flush=True)
# Close ends the rank's part (a barrier); any later call is refused, Close included.
comm.close()
for late in (lambda: comm.allreduce(h), lambda: comm.close()):
    try:
        late()
        raise AssertionError("a call after close() was not refused")
    except gyre.GyreError as e:
        assert "this Comm was closed" in str(e), e
print("from_environment ok: rank %d of %d, mode %s" % (rank, size, comm.mode), flush=True)
