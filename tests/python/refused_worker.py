"""One rank under gyrerun (-n 2): rank 0's binding refuses its first call of each kind for a
bad argument (an `out` too small, a non-contiguous array, a read-only one, timeout=0, an
unknown op), while rank 1 makes the call. The refusal takes its place in the call sequence:
rank 1's call fails naming rank 0, and every later call of both ranks meets its partner and
is exact. Before, rank 0's next call paired with rank 1's refused one and returned its data
(21 where 40 was right), and every later result was wrong by one call."""
import numpy as np

import gyre

comm = gyre.Comm.from_environment()
rank, size = comm.rank, comm.size
assert size == 2, size


def bad_call(kind, x):
    if kind == "out":
        comm.allreduce(x, out=np.empty(4, np.float32))
    elif kind == "noncontiguous":
        comm.allreduce(np.full(16, 1, np.float32)[::2])
    elif kind == "readonly":
        y = x.copy()
        y.flags.writeable = False
        comm.allreduce(y)
    elif kind == "timeout":
        comm.allreduce(x, timeout=0)
    elif kind == "op":
        comm.allreduce(x, op="median")
    elif kind == "gather":
        comm.gather(x, out=np.empty(3, np.float32), root=0)


for kind in ("out", "noncontiguous", "readonly", "timeout", "op", "gather"):
    x = np.full(8, 1 + rank, np.float32)
    try:
        if rank == 0:
            bad_call(kind, x)
            raise AssertionError("rank 0: %s was not refused" % kind)
        elif kind == "gather":
            # A non-root rank's part may leave before the root refuses: its call can end
            # either way. If it completes, the root's word that it refused comes by the end of
            # the next call, which then fails (below).
            comm.gather(x, root=0, timeout=10)
        else:
            comm.allreduce(x, timeout=10)
            raise AssertionError("rank 1: %s: the call rank 0 refused returned %r" % (kind, x[:2]))
    except (ValueError, TypeError) as e:
        assert rank == 0, e
    except gyre.GyreError as e:
        assert rank == 1, e
        assert "rank 0" in str(e) and "refused" in str(e), str(e)
    # The next calls meet their partners: sums of known values, bit for bit. After the gather,
    # the first of them may fail, on either rank, with the root's refusal: rank 1's gather
    # completed without the root, and it reports that (and a rank told of it before it began
    # refuses the call, which fails the other's too). Those after it meet again.
    for step in range(2, 5):
        y = np.full(8, 10 * step * (rank + 1), np.int64)
        if kind == "gather" and step == 2:
            try:
                comm.allreduce(y, timeout=10)
            except gyre.GyreError as e:
                assert "rank 0 refused seq=" in str(e) or "refused the call" in str(e), str(e)
                continue
        else:
            comm.allreduce(y, timeout=10)
        if y.tolist() != [30 * step] * 8:
            raise AssertionError("MISMATCH rank %d after %s, step %d: %r" % (rank, kind, step, y))
print("rank %d of 2, mode %s: refused calls kept the sequence" % (rank, comm.mode), flush=True)
comm.close()
