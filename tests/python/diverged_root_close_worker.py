"""One of 2 ranks under gyrerun: each rank makes a broadcast with itself as the root (a
divergence), then a barrier, then closes. Each rank must report the divergence, in the
broadcast or the barrier, and Close must succeed on both. A message of the diverged broadcast
that came after the divergence had been reported made the Close refuse to run on that rank
("not run: the ranks' calls diverged at seq=2"), or its stall probe fail the Close on that
divergence again; it then exited, and the other rank's Close failed with "rank 0 dead" (about
half the runs). The test runs this several times, a fresh job each."""
import numpy as np

import gyre

comm = gyre.Comm.from_environment()
rank, size = comm.rank, comm.size
assert size == 2, size
comm.barrier()
reported = []
for call in ("broadcast", "barrier"):
    try:
        if call == "broadcast":
            comm.broadcast(np.arange(64, dtype=np.int32), root=rank)
        else:
            comm.barrier()
    except gyre.GyreError as e:
        reported.append("%s: %s" % (call, e))
assert reported, "rank %d: the divergence was not reported" % rank
for text in reported:
    assert "diverged at seq=2" in text, "rank %d: %s" % (rank, text)
try:
    comm.close()
except gyre.GyreError as e:
    raise AssertionError("rank %d: close failed after the reported divergence (%s): %s" %
                         (rank, reported, e))
print("rank %d of %d, mode %s: the divergence was reported and the close succeeded" %
      (rank, size, comm.mode), flush=True)
