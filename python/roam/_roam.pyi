"""Type stubs of the extension module ``roam._roam`` (re-exported by ``roam``)."""

from types import TracebackType
from typing import Any, Literal, Protocol, Sequence, TypeAlias

import numpy as np
import numpy.typing as npt

__version__: str

class _DLPack(Protocol):
    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...

Keys: TypeAlias = npt.NDArray[np.uint64] | npt.NDArray[np.int64] | Sequence[int] | _DLPack
"""Keys: a ``uint64`` array (used in place), an ``int64`` array (used in place, negative keys
are out of range), another integer array or a sequence of ``int`` (converted)."""

Values: TypeAlias = npt.NDArray[np.float32] | memoryview | _DLPack
"""Values: a C-contiguous ``float32`` array of any shape, holding the keys' values concatenated
in key order; anything with the buffer protocol or ``__dlpack__`` on the CPU (e.g. a PyTorch
tensor). Used in place, never copied."""

Allocation: TypeAlias = Literal["static-range", "static-hash", "dynamic"]

class RoamError(Exception):
    """Base class of every error raised by roam."""

class StartError(RoamError, RuntimeError):
    """The node could not start: invalid key space or configuration, rendezvous or connection
    failure."""

class WorkerError(RoamError, IndexError):
    """The worker index is not below the node's number of workers."""

class AccessError(RoamError, ValueError):
    """Bad input to an access: a key out of range or a buffer whose length does not match the
    keys' value lengths. Nothing was changed."""

class OpError(RoamError, RuntimeError):
    """An operation could not be issued or did not complete (a peer refused it, the node is
    shutting down, ...)."""

class PeerGoneError(OpError, ConnectionError):
    """A node the operation depended on disconnected or stopped answering; the operation did
    not complete."""

class Node:
    """A roam node: this process's member of the cluster (one per process).

    Creating it joins the cluster. Rank, node count and coordinator come from the arguments,
    else from the environment as in Rust (``ROAM_RANK``/``ROAM_NUM_NODES``/``ROAM_COORDINATOR``,
    torchrun's ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``, Slurm, Open MPI); a
    single node needs nothing, so ``roam launch --nodes N -- python train.py`` just works. The
    GIL is released while joining.

    Use it as a context manager: leaving the ``with`` block calls :meth:`shutdown` (clean: waits
    for every node), or :meth:`close` if the block raised.

    Args:
        num_keys: keys are ``0..num_keys``. May be omitted with per-key ``value_lengths``, and
            must be with ``sparse_keys``.
        value_lengths: values (``float32``) per key: one ``int`` for all keys, or one per key
            (a sequence or integer array).
        workers: worker threads per node; ``None`` reads ``ROAM_WORKERS_PER_NODE``, else 1.
        allocation: ``"static-range"`` / ``"static-hash"`` (classic parameter server) or
            ``"dynamic"`` (keys move to the node that localizes them); ``None``:
            ``"static-range"``, or ``"static-hash"`` with ``sparse_keys``.
        home: home-node partitioning under dynamic allocation: ``"range"`` or ``"hash"``;
            ``None``: ``"range"``, or ``"hash"`` with ``sparse_keys``.
        sparse_keys: every ``uint64`` is a key (hashed feature ids, user ids): keys are
            created, with zero values, on first use, and nodes keep state only for keys they
            have seen. Needs one ``int`` ``value_lengths`` and no ``num_keys``.
        location_caches: under dynamic allocation, remember where keys were last seen.
        fast_local_access: access local keys directly (``False``: through the message path).
        rank, num_nodes, coordinator: explicit cluster settings (override the environment).
        token: the cluster secret; ``None`` reads ``ROAM_CLUSTER_TOKEN`` (required for more
            than one node; ``roam launch`` sets it).
        emulate_latency_us: emulated one-way link latency; ``None`` reads
            ``ROAM_EMULATE_LATENCY_US``.
        peer_timeout: seconds of silence after which a peer is declared gone.
        rendezvous_timeout: seconds allowed for finding and connecting all peers.

    Raises:
        StartError: invalid key space, cluster configuration, missing token, rendezvous or
            connection failure (the Rust ``StartError`` message).
        ValueError: unknown ``allocation`` or ``home``, bad timeouts or lengths.
        TypeError: ``value_lengths`` missing or of the wrong type.
    """

    def __init__(
        self,
        num_keys: int | None = None,
        value_lengths: int | Sequence[int] | npt.NDArray[np.integer[Any]] | None = None,
        *,
        workers: int | None = None,
        allocation: Allocation | None = None,
        home: Literal["range", "hash"] | None = None,
        sparse_keys: bool = False,
        location_caches: bool = False,
        fast_local_access: bool = True,
        rank: int | None = None,
        num_nodes: int | None = None,
        coordinator: str | None = None,
        token: str | None = None,
        emulate_latency_us: int | None = None,
        peer_timeout: float = 5.0,
        rendezvous_timeout: float = 60.0,
    ) -> None: ...
    @property
    def rank(self) -> int:
        """This node's rank (``0..num_nodes``)."""
    @property
    def num_nodes(self) -> int:
        """Number of nodes in the cluster."""
    @property
    def workers_per_node(self) -> int:
        """Worker threads per node."""
    @property
    def num_keys(self) -> int | None:
        """Number of keys (keys are ``0..num_keys``); ``None`` with sparse keys."""
    @property
    def sparse_keys(self) -> bool:
        """Whether every ``uint64`` is a key (created on first use)."""
    @property
    def value_length(self) -> int | None:
        """The value length shared by all keys, or ``None`` if lengths are per key."""
    @property
    def allocation(self) -> Allocation:
        """The allocation mode."""
    @property
    def closed(self) -> bool:
        """Whether the node was shut down or closed."""
    @property
    def data_addr(self) -> str | None:
        """The address this node accepts peer connections on (``None`` for a single node)."""
    def value_len(self, key: int) -> int:
        """The value length of ``key`` (raises :class:`AccessError` if out of range)."""
    def worker(self, index: int) -> Worker:
        """The :class:`Worker` of index ``index`` (``0..workers_per_node``), for one Python
        thread. Asking twice returns the same object. Raises :class:`WorkerError`."""
    def workers(self) -> list[Worker]:
        """All workers, in index order."""
    def stats(self) -> dict[str, Any]:
        """This node's counters (local/remote accesses, messages, bytes, relocations,
        ``local_fraction``, ...); after shutdown, the final ones."""
    def shutdown(self) -> dict[str, Any] | None:
        """Leaves the cluster cleanly: completes the workers' pending operations, waits until
        every node has called ``shutdown``, closes the links (GIL released). Prints the counters
        as one JSON line and returns them (``None`` if already shut down or closed)."""
    def close(self) -> None:
        """Leaves at once without waiting for the other nodes (they see this node as departed
        and their operations that need it fail). For error paths."""
    def __enter__(self) -> Node: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

class Worker:
    """The handle of one worker, for one Python thread (``node.worker(i)``).

    ``pull``, ``push``, ``set`` and ``localize`` return a :class:`Ticket` as soon as the
    operation is issued (local keys are served at once, remote ones by one batched message per
    node); ``wait(ticket)`` blocks until it is complete. The GIL is released while an operation
    is issued and during every wait. Arrays are used in place: do not modify a pull's ``out``
    (nor read it) until its ticket is waited; ``keys`` and ``vals`` may be reused as soon as the
    call returns. Only one thread should use a worker at a time (calls from several threads are
    serialised, never unsafe).
    """

    @property
    def id(self) -> int:
        """This worker's index on its node."""
    @property
    def rank(self) -> int:
        """This worker's node rank."""
    @property
    def num_nodes(self) -> int:
        """Nodes in the cluster."""
    @property
    def workers_per_node(self) -> int:
        """Worker threads per node."""
    @property
    def global_id(self) -> int:
        """This worker's index among all workers of all nodes."""
    @property
    def num_keys(self) -> int | None:
        """Number of keys; ``None`` with sparse keys."""
    @property
    def value_length(self) -> int | None:
        """The value length shared by all keys, or ``None`` if lengths are per key."""
    def value_len(self, key: int) -> int:
        """The value length of ``key``."""
    def pull(self, keys: Keys, out: Values | None = None) -> Ticket:
        """Reads the values of ``keys`` into ``out``, or into a new ``float32`` array of shape
        ``(len(keys), value_length)`` (per-key lengths: ``(total,)``).

        ``out`` must be writable, C-contiguous ``float32`` and hold exactly the keys' values.
        It is complete once the ticket is waited; ``wait`` returns it (``out`` itself).

        Raises:
            AccessError: a key out of range, or ``out`` of the wrong length.
            TypeError: keys not integers, ``out`` not ``float32``.
            ValueError: ``out`` read-only, not C-contiguous, or overlapping the keys or the
                output of a pending pull (which roam is still allowed to write).
            OpError: the node was shut down.
        """
    def push(self, keys: Keys, vals: Values) -> Ticket:
        """Adds ``vals`` to the values of ``keys`` (e.g. a gradient step). Raises as ``pull``."""
    def set(self, keys: Keys, vals: Values) -> Ticket:
        """Overwrites the values of ``keys`` with ``vals``. Raises as ``pull``."""
    def localize(self, keys: Keys) -> Ticket:
        """Moves ``keys`` to this node (dynamic allocation; a no-op otherwise). The ticket
        completes once all of them have arrived; accesses stay correct while they move."""
    def wait(self, ticket: Ticket) -> Any:
        """Blocks (GIL released) until ``ticket``'s operation is complete. Returns the output
        array for a pull (``out`` itself when given), ``None`` otherwise. Raises the
        operation's error (:class:`OpError`, :class:`PeerGoneError`, :class:`AccessError`).
        Waiting again returns (or raises) the same."""
    def is_finished(self, ticket: Ticket) -> bool:
        """Whether ``ticket``'s operation has completed (``wait`` would not block)."""
    def wait_all(self) -> None:
        """Blocks until every operation this worker issued has completed, and the outputs of
        all its pulls are filled. Raises the first error among them (including operations
        whose ticket was dropped without being waited)."""
    def pull_if_local(self, key: int, out: Values) -> bool:
        """Copies ``key``'s values into ``out`` and returns ``True`` if the key is on this node
        right now; returns ``False`` otherwise. Never sends a message."""
    def barrier(self) -> None:
        """Waits for this worker's operations (as ``wait_all``), then for every worker of every
        node to reach the barrier. Everything issued before it by any worker has then been
        applied. Every worker of every node must call it."""
    def stats(self) -> dict[str, Any]:
        """The node's counters (as :meth:`Node.stats`)."""

class Ticket:
    """An issued operation. A pull's output is complete once the ticket is waited.

    A ticket dropped without being waited is completed later: by its worker's next
    ``wait_all()`` / ``barrier()`` (which raise its error, if any) or at shutdown.
    """

    @property
    def kind(self) -> Literal["pull", "push", "set", "localize"]:
        """The operation."""
    def wait(self) -> Any:
        """Same as ``worker.wait(ticket)``."""
    def is_finished(self) -> bool:
        """Whether the operation has completed."""
