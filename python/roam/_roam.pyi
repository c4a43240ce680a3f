"""Type stubs of the extension module ``roam._roam`` (re-exported by ``roam``)."""

import os
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

Scheme: TypeAlias = str
"""A sampling scheme: ``"naive"``, ``"preloc"``, ``"pool:U"``, ``"pool:U:strict"`` (U >= 1),
``"local"`` or ``"local:next"``."""

class RoamError(Exception):
    """Base class of every error raised by roam."""

class StartError(RoamError, RuntimeError):
    """The node could not start: invalid key space or configuration, rendezvous or connection
    failure."""

class WorkerError(RoamError, IndexError):
    """The worker index is not below the node's number of workers."""

class AccessError(RoamError, ValueError):
    """Bad input to an access: a key out of range, a buffer whose length does not match the
    keys' value lengths, a refused sampling call (unknown sampler, more samples than the
    sample has left), or an intent with an empty clock range. Nothing was changed."""

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
        barrier_warning: a barrier that waits this many seconds logs (a warning on stderr)
            which workers (node, worker id) it still waits for, and again after every further
            such interval; ``None``: never.
        rendezvous_timeout: seconds allowed for finding and connecting all peers.
        replicated_keys: keys held as a replica on every node (NuPS), read and pushed
            locally, synchronised in the background every ``replica_sync_every`` seconds;
            rounds hold back deltas whose L2 norm is below ``replica_min_delta_norm``. With
            ``replica_sync_after_updates`` > 0 a round also starts once this node's workers
            pushed that many keys locally since the last one (a work clock; the period then
            only bounds the time between rounds).
        samplers: the samplers (:class:`Sampler`) of ``Worker.prepare_sample``; a sampler's
            id is its index in this list. Every node must register the same ones.
        sampling_seed: the seed of the samplers' random numbers (each node and worker
            derives its own stream).
        balancer: run the load balancer, which moves home buckets (and, under static
            allocation, their keys) away from nodes that answer slowly; ``ROAM_BALANCER``
            (``on``/``off``, set by ``roam launch --balancer``) overrides it.
        intent_timing: when workers act on their intents (:meth:`Worker.intent`):
            ``"timed"`` shortly before each intent's start clock, by the measured time an
            action takes; ``"immediate"`` as soon as an intent is signalled (ablation).
        intent_techniques: what acting on an intent may do with a key another node holds:
            ``"all"`` moves it to the one node that wants it and, while several nodes want it
            at once, gives each a replica from its owner (bounded-stale reads, synchronised
            every ``share_sync_every``, dropped when the node's intent ends);
            ``"relocate-only"`` and ``"replicate-only"`` are the ablations.
        share_sync_every: the longest time in seconds between the sync rounds of keys
            replicated by intent (default: roam's, 0.1); with ``share_sync_updates_per_key=0``,
            the time between rounds.
        share_sync_updates_per_key: a work clock for those rounds: one starts once the node
            pushed this many keys per key shared there since the last one (default: roam's,
            2; 0: rounds by time only).
        restore_from: start from the checkpoint in this directory (written by
            :meth:`Worker.checkpoint`, on any number of nodes): each node loads the keys it is
            home of. A damaged checkpoint, or one of another key space, raises ``StartError``
            naming the file.
        optimizer: the server-side optimizer :meth:`Worker.push_gradients` applies where each
            row lives: a name (``"sgd"``, ``"adagrad"``, ``"adam"``, ``"ftrl"``; default
            hyper-parameters) or a dict with ``"kind"`` and any of ``lr``, ``eps``, ``beta1``,
            ``beta2`` (Adam), ``alpha``, ``beta``, ``l1``, ``l2`` (FTRL). Its state is hidden in
            the rows (never pulled, moved and checkpointed with them). See
            ``docs/embeddings.md``.
        metrics_addr: serve Prometheus metrics at ``http://HOST:PORT/metrics`` from this
            node (``"127.0.0.1:9100"``; port 0 is refused, a scraper must know the port);
            ``None`` reads ``ROAM_METRICS_ADDR``, which ``roam launch --metrics-addr`` sets per
            node (the port plus the rank), else no endpoint. See ``docs/metrics.md``.
        metrics_hold_scrapes: at the end of :meth:`shutdown` (links closed, so no peer waits),
            keep answering ``/metrics`` until a Prometheus server has scraped this node this
            many times in all (at most ``rendezvous_timeout`` longer); ``None`` reads
            ``ROAM_METRICS_HOLD``, else 0.
        initializer: how new rows are filled: ``"zeros"`` (the default), or a dict
            ``{"kind": "uniform", "low": a, "high": b, "seed": s}`` or ``{"kind": "normal",
            "mean": m, "std": s, "seed": s}``. A row's values are a pure function of (seed,
            key): every node creates the same row. Optimizer state starts at zero.
        dynamic: a dynamic key space (implies ``sparse_keys``): a dict with any of
            ``"admission"`` (``"all"``, ``{"kind": "count", "min_count": K, "sketch_width":
            W}`` or ``{"kind": "probability", "p": p, "seed": s}``), ``"max_rows"`` (rows per
            node; the LRU clock evicts to stay under it), ``"max_bytes"`` (the same budget in
            bytes of records: values and optimizer state, 4 bytes a float), ``"ttl"`` (seconds untouched
            before a row is evicted) or ``"ttl_steps"`` (steps untouched: ticks of the node's
            clock, the furthest of its workers' :meth:`Worker.advance_clock` calls, which a
            training loop makes once a batch) and ``"spill"`` (``True``: evicted rows are kept whole in a
            spill file per node under ``spill_dir`` and taken back, trained, on their next use).
            An id without a row reads the initializer's value (a spilled id: its spilled
            values) and its updates are dropped (``stats()["rows_rejected"]``,
            ``["grads_dropped"]``, ``["rows_evicted"]``, ``["rows_spilled"]``). See
            ``docs/embeddings.md``.
        tables: named tables instead of one key space: a dict ``{name: {"dim": D,
            "num_ids": N, "optimizer": ..., "initializer": ..., "dynamic": ...}}``, in key
            order. A table is dense (ids ``0..num_ids``) or, with ``"dynamic"`` (a policy dict
            as for ``dynamic``, or ``True``: admit every id, never evict), takes any id below
            ``2**56``; ``"optimizer"`` and ``"initializer"`` take the forms above and apply to
            that table only, and a row budget counts that table's rows. Address a table with
            ``table=`` on :meth:`Worker.pull`, ``push``, ``set``, ``push_gradients`` and
            ``localize`` (the keys are then the table's ids). ``num_keys``,
            ``value_lengths``, ``sparse_keys``, ``optimizer``, ``initializer`` and
            ``dynamic`` must be left out; homes are by hash. A checkpoint restores only into
            the same tables in the same order (a mismatch raises naming the table).
        spill_dir: the directory of the spill files (one per node) of dynamic policies with
            ``"spill": True``; required with them.

    Raises:
        StartError: invalid key space, cluster configuration, missing token, rendezvous or
            connection failure, a metrics address that cannot be served (the Rust ``StartError``
            message).
        ValueError: unknown ``allocation``, ``home``, ``intent_timing`` or
            ``intent_techniques``, an unknown optimizer, initializer, admission or dynamic
            parameter or an invalid value (named),
            bad timeouts or lengths, a sampler
            whose keys are outside the key space or have different value lengths (the
            message names it: ``samplers[i] = Sampler...``).
        TypeError: ``value_lengths`` missing or of the wrong type, ``samplers`` not a list
            of :class:`Sampler`.
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
        barrier_warning: float | None = 30.0,
        rendezvous_timeout: float = 60.0,
        replicated_keys: Sequence[int] | None = None,
        replica_sync_every: float = 0.01,
        replica_min_delta_norm: float = 0.0,
        replica_sync_after_updates: int = 0,
        samplers: Sequence[Sampler] | None = None,
        sampling_seed: int = 0,
        balancer: bool = True,
        intent_timing: Literal["timed", "immediate"] = "timed",
        intent_techniques: Literal["all", "relocate-only", "replicate-only"] = "all",
        share_sync_every: float | None = None,
        share_sync_updates_per_key: int | None = None,
        restore_from: str | os.PathLike[str] | None = None,
        optimizer: str | dict[str, Any] | None = None,
        metrics_addr: str | None = None,
        metrics_hold_scrapes: int | None = None,
        initializer: str | dict[str, Any] | None = None,
        dynamic: dict[str, Any] | None = None,
        tables: dict[str, dict[str, Any]] | None = None,
        spill_dir: str | os.PathLike[str] | None = None,
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
    def tables(self) -> list[tuple[str, int]]:
        """The named tables (``Node(tables=...)``) and their dims, in key order; ``[]``
        without tables."""
    @property
    def allocation(self) -> Allocation:
        """The allocation mode."""
    @property
    def samplers(self) -> list[Sampler]:
        """The registered samplers; a sampler's id is its index."""
    @property
    def sampling_seed(self) -> int:
        """The seed of the samplers' random numbers."""
    @property
    def is_member(self) -> bool:
        """Whether this node is a member of the cluster (false once drained or shut down)."""
    def drain(self, rank: int) -> None:
        """Drains node ``rank``: its buckets and keys move to the other members, then it leaves
        (GIL released until it left). Raises :class:`OpError` with the reason if it cannot be
        drained (the coordinator, not a member, ...). The drained node's workers must have
        finished; it calls :meth:`wait_until_done` and then :meth:`shutdown`."""
    def wait_until_done(self) -> None:
        """Blocks (GIL released) until this node was drained or every other member left
        cleanly. Raises :class:`PeerGoneError` if a member was lost instead."""
    @property
    def closed(self) -> bool:
        """Whether the node was shut down or closed."""
    @property
    def data_addr(self) -> str | None:
        """The address this node accepts peer connections on (``None`` for a single node)."""
    @property
    def metrics_addr(self) -> str | None:
        """Where this node serves Prometheus metrics (``"HOST:PORT"``, as bound), or ``None``
        without an endpoint or once the node has left."""
    def value_len(self, key: int) -> int:
        """The value length of ``key`` (raises :class:`AccessError` if out of range)."""
    def worker(self, index: int) -> Worker:
        """The :class:`Worker` of index ``index`` (``0..workers_per_node``), for one Python
        thread. Asking twice returns the same object. Raises :class:`WorkerError`."""
    def workers(self) -> list[Worker]:
        """All workers, in index order."""
    def stats(self) -> dict[str, Any]:
        """This node's counters (local/remote accesses, messages, bytes, relocations,
        ``local_fraction``, intents, ...); after shutdown, the final ones."""
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
    @property
    def tables(self) -> list[tuple[str, int]]:
        """The named tables and their dims, in key order (see :attr:`Node.tables`)."""
    def value_len(self, key: int) -> int:
        """The value length of ``key``."""
    def pull(self, keys: Keys, out: Values | None = None, *, table: str | None = None) -> Ticket:
        """Reads the values of ``keys`` into ``out``, or into a new ``float32`` array of shape
        ``(len(keys), value_length)`` (per-key lengths: ``(total,)``). With ``table``, the
        keys are ids of that named table and a new array has shape ``(len(keys), dim)``; an
        unknown table or an id outside it raises ``AccessError`` naming both.

        ``out`` must be writable, C-contiguous ``float32`` and hold exactly the keys' values.
        It is complete once the ticket is waited; ``wait`` returns it (``out`` itself).

        Raises:
            AccessError: a key out of range, or ``out`` of the wrong length.
            TypeError: keys not integers, ``out`` not ``float32``.
            ValueError: ``out`` read-only, not C-contiguous, or overlapping the keys or the
                output of a pending pull (which roam is still allowed to write).
            OpError: the node was shut down.
        """
    def push(self, keys: Keys, vals: Values, *, table: str | None = None) -> Ticket:
        """Adds ``vals`` to the values of ``keys`` (e.g. a gradient step). Raises as ``pull``."""
    def set(self, keys: Keys, vals: Values, *, table: str | None = None) -> Ticket:
        """Overwrites the values of ``keys`` with ``vals``. Raises as ``pull``."""
    def push_gradients(self, keys: Keys, grads: Values, *, table: str | None = None) -> Ticket:
        """Applies ``grads`` (the keys' gradients, concatenated) with the node's optimizer
        (``Node(optimizer=...)``) where each row lives: local rows at once, remote rows at
        their owner. A key named twice gets two steps. Raises as ``push``, and
        ``AccessError`` without an optimizer; a replicated key's gradient accumulates for its
        hub's next step. With ``table``, the table's own optimizer steps its rows
        (``AccessError`` if it has none)."""
    def push_gradient_sums(
        self, keys: Keys, aggregates: Values, *, table: str | None = None
    ) -> Ticket:
        """Applies aggregates of gradients, one optimizer step per key standing for all of
        them: ``aggregates`` holds, per key, the sum of its gradients then the sum of their
        squares (twice the key's length). For gradients gathered before they are sent
        (copies of rows held elsewhere): the optimizer's state grows as if each had been
        pushed (Adagrad's accumulator by the squares, not the square of the sum), and an
        aggregate of one gradient ``(g, g*g)`` is exactly ``push_gradients`` of ``g``. Raises
        as ``push_gradients``; ``AccessError`` names the expected length on a mismatch, and
        the key whose sum of squares is negative or not finite."""
    def localize(self, keys: Keys, *, table: str | None = None) -> Ticket:
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
    def intent(self, keys: Keys, start: int, end: int | None = None) -> None:
        """Signals that this worker will access ``keys`` while its clock
        (:meth:`advance_clock`) is in ``start..end`` (AdaPM's intent; ``end`` defaults to
        ``start + 1``). roam decides when to act: under dynamic allocation the keys not on
        this node are moved here shortly before ``start`` — or, if another node wants them at
        the same time, replicated here until this node's intents on them end
        (``Node(intent_techniques=...)``) — how long before is measured from this worker's
        clock rate and the time keys take to arrive (``Node(intent_timing=...)``); under
        static allocation intents are only counted. Returns at once (GIL released); the
        relocations it starts are completed by :meth:`wait_all` / :meth:`barrier`.

        Raises:
            AccessError: a key out of range, or ``end <= start`` (the message names both
                clocks); nothing was recorded.
            TypeError: keys not integers.
            ValueError: ``end`` omitted with ``start`` ``2**64 - 1``; ``keys`` overlapping the
                output of a pending pull.
            OverflowError: a negative clock.
            OpError: the node was shut down.
        """
    def advance_clock(self) -> int:
        """Ticks this worker's clock (once per data point or batch) and returns the new clock;
        intents whose start is now within the action window are acted on (GIL released).
        Raises :class:`OpError` if the node was shut down."""
    def current_clock(self) -> int:
        """This worker's clock: how many times it called :meth:`advance_clock` (starts at 0)."""
    def intent_window(self) -> int:
        """How many clocks before their start intents are acted on now (measured;
        ``2**64 - 1`` with ``intent_timing="immediate"``)."""
    def close(self) -> None:
        """Retires this worker, as a dropped Rust ``Worker``: completes its operations (as
        :meth:`wait_all`; their first error is raised after retiring it), then counts it as
        arrived at every later barrier of its node, so its sibling workers do not wait for it.
        Call it when the worker's thread is done, or use the worker as a context manager
        (``with node.worker(i) as w:``), which closes it also when the block raises. Later
        operations raise :class:`OpError`; closing again does nothing."""
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
    def __enter__(self) -> Worker: ...
    def __exit__(self, *exc: object) -> bool: ...
    def barrier(self) -> None:
        """Waits for this worker's operations (as ``wait_all``), then for every worker of every
        node to reach the barrier. Everything issued before it by any worker has then been
        applied. Every worker of every node must call it."""
    def sync_replicas(self) -> None:
        """A collective like :meth:`barrier`: when it returns, every push issued before it by
        any worker of any node is in every replica of the replicated keys."""
    def checkpoint(self, path: str | os.PathLike[str], epoch: int = 0) -> None:
        """Writes a checkpoint of every node into directory ``path`` (reachable by every node):
        a collective like :meth:`barrier` holding every push issued before it by any worker and
        none after. Each node writes a safetensors shard (tensors ``keys`` (uint64) and
        ``values`` (float32, one row per key; per-key lengths add ``offsets``); with named
        tables, per table ``<name>.ids`` and ``<name>.values``), rank 0 a ``manifest.json``
        last. Raises ``OpError`` if writing fails."""
    def prepare_sample(
        self, sampler: int, n: int, start: int | None = None, end: int | None = None
    ) -> Sample:
        """Starts drawing ``n`` samples from sampler ``sampler`` (its index in
        ``Node(samplers=[...])``); draw them with :meth:`pull_sample`, end with
        :meth:`finish_sample`. Under ``preloc`` the keys are drawn now and under ``pool``
        taken from the node's pool; keys not on this node start moving here (dynamic
        allocation). With ``start`` (``end`` defaults to ``start + 1``) the samples are for
        this worker's clocks ``start..end``: under ``preloc`` their keys are signalled as an
        intent (:meth:`intent`) and move shortly before ``start`` instead of at once. The GIL
        is released.

        Raises:
            AccessError: no sampler ``sampler``; more distinct samples than the distribution
                can draw (without replacement).
            ValueError: ``n`` negative, or above ``2**26`` under ``preloc``/``pool`` (which
                draw every sample here); ``end`` without ``start``.
            OpError: the node was shut down.
        """
    def pull_sample(
        self, sample: Sample, n: int | None = None
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        """Draws ``n`` of ``sample``'s samples (default: all that are left) and returns
        ``(keys, vals)``: a ``uint64`` array of ``n`` keys and a ``float32`` array of shape
        ``(n, value_len)`` with their values, complete (remote values are waited for, GIL
        released). Pushes to sampled keys are ordinary pushes.

        Raises:
            AccessError: ``n`` more than the sample has left.
            ValueError: the sample was finished, is in use by another thread, or was
                prepared by another worker.
            OpError, PeerGoneError: the read of remote values failed.
        """
    def finish_sample(self, sample: Sample) -> int:
        """Ends ``sample``; returns how many of its samples were never pulled. Raises
        ``ValueError`` if it was already finished or was prepared by another worker."""
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

class Sampler:
    """A sampler to register with ``roam.Node(samplers=[...])``: which keys to draw (the
    support ``first + i * stride`` for ``i`` in ``0..count``), with which probabilities, and the
    scheme that serves the draws. Its id (for ``Worker.prepare_sample``) is its index in that
    list; every node must register the same samplers.

    Schemes: ``"naive"`` draws, then an ordinary pull (exact); ``"preloc"`` draws at
    ``prepare_sample`` and starts moving the keys here (exact); ``"pool:U"`` takes samples from
    the node's pool of localized draws, each used ``U`` times (marginally exact, samples
    correlated; ``"pool:U:strict"`` does not postpone a remote sample behind a local one);
    ``"local"``/``"local:next"`` only draw keys held on the node (redraw, or the next local key
    of the support), without communication — the distribution is *not* kept (a node holding
    none of the support still samples, remotely). ``with_replacement=False``: one sample's keys
    are distinct. ``group_draws``: draws per pool group (``pool`` only).

    Raises (constructors):
        ValueError: an empty support (``count`` 0, no weights), ``stride`` 0, a support that
            overflows ``uint64``, a negative, NaN or infinite weight, weights summing to zero,
            an unknown scheme, ``group_draws`` 0 or a pool group (``group_draws`` × U) above
            ``2**20`` samples.
        TypeError: ``weights`` not a 1-D sequence of numbers.
    """

    @staticmethod
    def uniform(
        first: int,
        count: int,
        *,
        stride: int = 1,
        scheme: Scheme = "naive",
        with_replacement: bool = True,
        group_draws: int = 250,
    ) -> Sampler:
        """Every key of the support equally likely."""
    @staticmethod
    def log_uniform(
        first: int,
        count: int,
        *,
        stride: int = 1,
        scheme: Scheme = "naive",
        with_replacement: bool = True,
        group_draws: int = 250,
    ) -> Sampler:
        """Position ``i`` with probability ``ln((i + 2) / (i + 1)) / ln(count + 1)``: the first
        keys are the likeliest (Zipf-like, as for a vocabulary sorted by frequency)."""
    @staticmethod
    def weighted(
        weights: Sequence[float] | npt.NDArray[np.floating[Any]] | npt.NDArray[np.integer[Any]],
        *,
        first: int = 0,
        stride: int = 1,
        scheme: Scheme = "naive",
        with_replacement: bool = True,
        group_draws: int = 250,
    ) -> Sampler:
        """Key ``first + i * stride`` with probability ``weights[i] / sum(weights)`` (alias
        method, O(1) per draw); ``count`` is ``len(weights)``."""
    @property
    def distribution(self) -> Literal["uniform", "log-uniform", "weighted"]: ...
    @property
    def first(self) -> int: ...
    @property
    def stride(self) -> int: ...
    @property
    def count(self) -> int:
        """Keys in the support."""
    @property
    def scheme(self) -> str:
        """The scheme in canonical form (e.g. ``"pool:16"``)."""
    @property
    def with_replacement(self) -> bool: ...
    @property
    def group_draws(self) -> int: ...
    @property
    def keeps_distribution(self) -> bool:
        """Whether the samples follow the distribution (every scheme but ``local``)."""
    def probability(self, key: int) -> float:
        """The probability of drawing ``key`` (0 outside the support)."""
    def __contains__(self, key: int) -> bool:
        """Whether ``key`` is in the support."""

class Sample:
    """One ``Worker.prepare_sample`` in progress, bound to the worker that prepared it: draw
    from it with ``worker.pull_sample(sample, n)`` (in one call or several), end it with
    ``worker.finish_sample(sample)``, or use it as a context manager (leaving the block
    finishes it)."""

    @property
    def sampler(self) -> int:
        """The id of the sampler it draws from."""
    @property
    def size(self) -> int:
        """Samples asked for at ``prepare_sample``."""
    @property
    def remaining(self) -> int:
        """Samples still to be pulled (0 once finished)."""
    @property
    def finished(self) -> bool:
        """Whether it was finished."""
    def __enter__(self) -> Sample: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...
