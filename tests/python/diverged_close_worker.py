"""One rank under gyrerun (-n 3): rank 0 makes a broadcast where ranks 1 and 2 make a barrier,
then closes. Rank 0's Close finds that it diverged, tells the others and exits; ranks 1 and 2,
still in their barrier, must be told the divergence, not that rank 0 is dead (embedded mode
used to say "rank 0 dead: its process is gone", since its going ended their barrier)."""
import numpy as np

import gyre

comm = gyre.Comm.from_environment()
rank, size = comm.rank, comm.size
assert size == 3, size
comm.barrier()
try:
    if rank == 0:
        comm.broadcast(np.zeros(0, np.float32), root=0)
        comm.close()
    else:
        comm.barrier()
    raise AssertionError("rank %d: the divergence was not reported" % rank)
except gyre.GyreError as e:
    text = str(e)
    assert "diverged" in text and "called broadcast" in text, "rank %d: %s" % (rank, text)
    assert " dead " not in text, "rank %d: %s" % (rank, text)
print("rank %d: %s" % (rank, text[:600]), flush=True)
print("rank %d of %d, mode %s: the divergence was named" % (rank, size, comm.mode), flush=True)
