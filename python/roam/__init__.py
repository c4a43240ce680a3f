"""roam: a parameter server whose parameters *roam* to the node that uses them.

One :class:`Node` per Python process joins the cluster; each Python thread takes its own
:class:`Worker` with ``node.worker(i)`` and calls ``pull``/``push``/``set``/``localize``, each of
which returns a :class:`Ticket` to ``wait`` on. Keys are ``uint64`` arrays, values ``float32``
arrays, used in place (zero-copy): NumPy arrays, anything with the buffer protocol, or
``__dlpack__`` objects on the CPU (e.g. PyTorch tensors). The GIL is released during every
wait and network operation. Samplers (:class:`Sampler`, registered with
``Node(samplers=[...])``) draw keys with their values: ``prepare_sample``, ``pull_sample``,
``finish_sample``. See ``docs/python.md``.

Example::

    import numpy as np
    import roam

    with roam.Node(num_keys=1000, value_lengths=4, allocation="dynamic") as node:
        w = node.worker(0)
        keys = np.array([7, 8], dtype=np.uint64)
        w.localize(keys).wait()
        w.push(keys, np.ones(8, dtype=np.float32)).wait()
        out = w.pull(keys).wait()      # shape (2, 4)
        w.barrier()
"""

from ._roam import (
    AccessError,
    Node,
    OpError,
    PeerGoneError,
    RoamError,
    Sample,
    Sampler,
    StartError,
    Ticket,
    Worker,
    WorkerError,
    __version__,
    choose_above_mean,
    choose_top_n,
)

__all__ = [
    "AccessError",
    "Node",
    "OpError",
    "PeerGoneError",
    "RoamError",
    "Sample",
    "Sampler",
    "StartError",
    "Ticket",
    "Worker",
    "WorkerError",
    "__version__",
    "choose_above_mean",
    "choose_top_n",
]
