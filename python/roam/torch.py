"""PyTorch embedding modules whose rows live in roam: ``Embedding`` and ``EmbeddingBag``.

This module owns the bridge between PyTorch autograd and roam's workers: forward pulls the
batch's *unique* ids straight into a preallocated tensor (zero-copy, through the tensor's
``__dlpack__``), and backward pushes the gradient of those rows only (sparse). How a gradient
becomes an update lives in one function, :func:`_apply_gradients`: SGD pushed as ``-lr * grad``,
or with ``lr=None`` the node's server-side optimizer (``roam.Node(optimizer=...)``: SGD, Adagrad,
Adam, FTRL) applied by ``push_gradients`` where each row lives. Importing it needs PyTorch; ``import roam`` does not.

Example::

    import torch, roam, roam.torch

    with roam.Node(num_keys=10_000, value_lengths=16) as node:
        emb = roam.torch.EmbeddingBag(10_000, 16, node, mode="mean", lr=0.1)
        emb.init_normal_(std=0.1, seed=0)          # once per cluster, then barrier
        head = torch.nn.Linear(16, 1)
        opt = torch.optim.Adam(head.parameters())  # dense part: any torch optimizer
        for ids, offsets, y in batches:
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                head(emb(ids, offsets)).squeeze(1), y)
            opt.zero_grad()
            loss.backward()                        # pushes the embedding rows' updates
            opt.step()

See ``docs/embeddings.md`` ("PyTorch modules") and ``docs/python.md``.
"""

from __future__ import annotations

import threading
from typing import Optional, Union

import numpy as np
import torch
import torch.nn.functional as F

from ._roam import Node, Worker

__all__ = ["Embedding", "EmbeddingBag", "set_worker", "current_worker"]

_thread = threading.local()


def set_worker(worker: Optional[Worker]) -> None:
    """Makes ``worker`` the roam worker of the calling thread for modules built on a ``Node``.

    roam's Python binding has one ``Worker`` per Python thread; a module shared by several
    training threads uses the worker each thread declared here. ``None`` clears it.
    """
    if worker is not None and not isinstance(worker, Worker):
        raise TypeError(f"set_worker takes a roam.Worker or None, not {type(worker).__name__}")
    _thread.worker = worker


def current_worker() -> Optional[Worker]:
    """The worker the calling thread declared with :func:`set_worker`, or ``None``."""
    return getattr(_thread, "worker", None)


def _apply_gradients(
    worker: Worker, keys: torch.Tensor, grads: torch.Tensor, lr: Optional[float]
) -> None:
    """Applies the gradient ``grads`` (one row per key of ``keys``; consumed) to the rows in roam.

    With a learning rate: SGD as an additive push of ``-lr * grads``. With ``lr=None``: the
    gradients themselves, through ``push_gradients``, so that the node's optimizer steps each
    row (and its hidden state) where the row lives. Either is not waited: the worker's later
    pulls of the same keys see it (roam orders one worker's operations per key), and an error
    surfaces at the worker's next ``wait_all``/``barrier``. roam reads the pushed values during
    the call, so they may be freed as soon as it returns.
    """
    if lr is None:
        worker.push_gradients(_roam_keys(keys), grads.numpy())
    else:
        worker.push(_roam_keys(keys), grads.mul_(-lr).numpy())


def _roam_keys(keys: torch.Tensor) -> np.ndarray:
    """The roam keys of int64 ``keys`` (their bit patterns: keys of tables 128 and up, 2^63 and
    above, are negative as int64), as the ``uint64`` view roam takes, sharing the memory."""
    return keys.numpy().view(np.uint64)


class _PullRows(torch.autograd.Function):
    """Rows of the unique keys: pulled in forward, their gradient pushed in backward."""

    @staticmethod
    def forward(ctx, anchor, module, worker, keys):  # noqa: ARG004 - anchor only carries grad
        ctx.module = module
        ctx.worker = worker
        ctx.keys = keys
        return module._pull(worker, keys)

    @staticmethod
    def backward(ctx, grad_rows):
        keys = ctx.keys
        module = ctx.module
        # The rows feed only this module's _Gather/_Bag, whose backward allocates grad_rows:
        # _apply_gradients may scale it in place.
        grad = grad_rows.contiguous()
        if module.padding_key is not None:
            keep = keys != module.padding_key
            if not bool(keep.all()):
                keys, grad = keys[keep].contiguous(), grad[keep].contiguous()
        if keys.numel():
            _apply_gradients(ctx.worker, keys, grad, module.lr)
        return None, None, None, None


class _Gather(torch.autograd.Function):
    """``rows[inverse]``, whose backward sums the output gradient into the rows (index_add).

    Equivalent to ``F.embedding(inverse, rows)``, with the backward :class:`_Bag` needs for
    speed (there torch's dense backward measured several times slower than one index_add,
    ``docs/embeddings.md``), kept alike for both modules.
    """

    @staticmethod
    def forward(ctx, rows, inverse):
        ctx.save_for_backward(inverse)
        ctx.num_rows = rows.shape[0]
        return F.embedding(inverse, rows)

    @staticmethod
    def backward(ctx, grad_out):
        (inverse,) = ctx.saved_tensors
        dim = grad_out.shape[-1]
        grad = grad_out.new_zeros(ctx.num_rows, dim)
        grad.index_add_(0, inverse.reshape(-1), grad_out.reshape(-1, dim))
        return grad, None


class _Bag(torch.autograd.Function):
    """``F.embedding_bag`` over the unique rows, with an index_add backward (as :class:`_Gather`).

    ``bag_of[i]`` is the bag of element ``i`` of the flattened input and ``scale[i]`` its
    factor in that bag's sum (1, 1/bag length for "mean", or its per-sample weight).
    """

    @staticmethod
    def forward(ctx, rows, psw, inverse, offsets, mode, last, bag_of, scale):
        ctx.save_for_backward(rows, inverse, bag_of, scale)
        return F.embedding_bag(
            inverse, rows, offsets, mode=mode, per_sample_weights=psw, include_last_offset=last
        )

    @staticmethod
    def backward(ctx, grad_out):
        rows, inverse, bag_of, scale = ctx.saved_tensors
        flat = inverse.reshape(-1)
        per_id = grad_out.index_select(0, bag_of)
        grad_rows = grad_psw = None
        if ctx.needs_input_grad[1]:
            grad_psw = (per_id * rows.index_select(0, flat)).sum(1).reshape(inverse.shape)
        if ctx.needs_input_grad[0]:
            if scale is not None:
                per_id = per_id * scale[:, None]
            grad_rows = grad_out.new_zeros(rows.shape)
            grad_rows.index_add_(0, flat, per_id)
        return grad_rows, grad_psw, None, None, None, None, None, None


class _RoamRows(torch.nn.Module):
    """What both modules share: the key range, the worker lookup, pulls and initialization."""

    def __init__(
        self,
        num_embeddings: Optional[int],
        embedding_dim: int,
        source: Union[Node, Worker],
        *,
        key_offset: int,
        lr: Optional[float],
        padding_idx: Optional[int] = None,
        table: Optional[str] = None,
    ) -> None:
        super().__init__()
        if not isinstance(source, (Node, Worker)):
            raise TypeError(f"source must be a roam.Node or roam.Worker, not {type(source).__name__}")
        table_dim = None
        if table is not None:
            # A named table's id i is the key (table index << 56) | i (docs/embeddings.md).
            names = [name for name, _ in source.tables]
            if table not in names:
                raise ValueError(f"no table named {table!r} (tables: {', '.join(names) or 'none'})")
            if key_offset:
                raise ValueError("key_offset must be 0 with table (the table places its ids)")
            key_offset = names.index(table) << 56
            table_dim = dict(source.tables)[table]
        if embedding_dim <= 0:
            raise ValueError(f"embedding_dim must be positive, got {embedding_dim}")
        if num_embeddings is not None and num_embeddings <= 0:
            raise ValueError(f"num_embeddings must be positive or None, got {num_embeddings}")
        if key_offset < 0:
            raise ValueError(f"key_offset must be >= 0, got {key_offset}")
        if lr is not None and not lr > 0:
            raise ValueError(f"lr must be positive, or None for the node's optimizer; got {lr}")
        space = source.num_keys
        if table is not None:
            pass  # the table's own ids: any, or the node refuses those past a dense table's end
        elif num_embeddings is None:
            if space is not None:
                raise ValueError(
                    "num_embeddings=None (any 64-bit id) needs a node with sparse_keys=True; "
                    f"this one has {space} keys"
                )
            if key_offset:
                raise ValueError("key_offset must be 0 with num_embeddings=None")
        elif space is not None and key_offset + num_embeddings > space:
            raise ValueError(
                f"keys {key_offset}..{key_offset + num_embeddings} exceed the node's key space "
                f"of {space} keys"
            )
        length = table_dim if table is not None else source.value_length
        if length is None and num_embeddings is not None:
            # Per-key lengths: the table's range must be one length (checked at its two ends;
            # a pull of a key of another length raises AccessError naming it anyway).
            lengths = {source.value_len(key_offset), source.value_len(key_offset + num_embeddings - 1)}
            length = lengths.pop() if len(lengths) == 1 else None
        if length != embedding_dim and table is not None:
            raise ValueError(f"embedding_dim {embedding_dim} differs from table {table!r}'s dim {length}")
        if length != embedding_dim:
            raise ValueError(
                f"embedding_dim {embedding_dim} differs from the value length {length} of "
                f"the node's keys {key_offset}..{key_offset + (num_embeddings or 0)}"
            )
        if padding_idx is not None:
            if num_embeddings is None:
                raise ValueError("padding_idx needs num_embeddings")
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"padding_idx {padding_idx} is outside 0..{num_embeddings}")
            padding_idx %= num_embeddings
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.key_offset = key_offset
        # What torch adds to an id: the offset's bit pattern as an int64 (tables 128 and up have
        # keys of 2^63 and above, negative as int64; `_roam_keys` reads them back as uint64).
        self._offset64 = key_offset - (1 << 64) if key_offset >= 1 << 63 else key_offset
        self.lr = None if lr is None else float(lr)
        self.padding_idx = padding_idx
        self.table = table
        self.padding_key = None if padding_idx is None else padding_idx + self._offset64
        self._source = source
        # The custom Function's output needs an input that requires grad to be recorded; this
        # tensor is that input. It is not a Parameter, so dense optimizers and DDP never see it.
        self._anchor = torch.empty(0, requires_grad=True)

    def extra_repr(self) -> str:
        return (
            f"{self.num_embeddings}, {self.embedding_dim}, key_offset={self.key_offset}, "
            f"lr={self.lr}"
        )

    @property
    def worker(self) -> Worker:
        """The roam worker of the calling thread (the module's own, if built on a Worker)."""
        if isinstance(self._source, Worker):
            return self._source
        worker = current_worker()
        if worker is not None:
            return worker
        if self._source.workers_per_node == 1:
            return self._source.worker(0)
        raise RuntimeError(
            f"no roam worker for thread {threading.current_thread().name!r}: the node has "
            f"{self._source.workers_per_node} workers, so each training thread calls "
            "roam.torch.set_worker(node.worker(i)) first"
        )

    def _keys(self, ids: torch.Tensor) -> torch.Tensor:
        """The roam keys of sorted unique ids (int64, contiguous), checking the id range."""
        if ids.numel() and self.num_embeddings is not None:
            lo, hi = int(ids[0]), int(ids[-1])
            if lo < 0 or hi >= self.num_embeddings:
                bad = lo if lo < 0 else hi
                raise IndexError(f"id {bad} is outside this embedding's 0..{self.num_embeddings}")
        if ids.numel() and self.table is not None:
            # Ids past 2^56 would land in the next table's keys.
            lo, hi = int(ids[0]), int(ids[-1])
            if lo < 0 or hi >= 1 << 56:
                bad = lo if lo < 0 else hi
                raise IndexError(f"id {bad} is outside table {self.table!r}'s ids 0..2**56")
        if self._offset64:
            ids = ids + self._offset64
        return ids.contiguous()

    def _pull(self, worker: Worker, keys: torch.Tensor) -> torch.Tensor:
        rows = torch.empty(keys.numel(), self.embedding_dim)
        # NumPy views share the tensors' memory (roam writes the rows in place); they reach
        # the binding's buffer protocol path, ~10 us cheaper per call than __dlpack__.
        worker.pull(_roam_keys(keys), rows.numpy()).wait()
        return rows

    def _unique_rows(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows of the batch's unique ids, autograd-connected; inverse indices into them)."""
        if ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"ids must be int64 or int32, not {ids.dtype}")
        if ids.device.type != "cpu":
            raise ValueError(f"ids must be on the CPU, not {ids.device}")
        uniq, inverse = torch.unique(ids.to(torch.int64), return_inverse=True)
        keys = self._keys(uniq)
        worker = self.worker
        if torch.is_grad_enabled():
            rows = _PullRows.apply(self._anchor, self, worker, keys)
        else:
            rows = self._pull(worker, keys)
        return rows, inverse

    @torch.no_grad()
    def read(self, ids: torch.Tensor) -> torch.Tensor:
        """The current rows of ``ids`` (any shape), as a new tensor of shape ``ids.shape + (dim,)``."""
        ids = torch.as_tensor(ids, dtype=torch.int64)
        rows, inverse = self._unique_rows(ids)
        return rows[inverse]

    @torch.no_grad()
    def load_(self, weight: torch.Tensor, *, chunk: int = 65536) -> None:
        """Overwrites rows ``0..len(weight)`` with ``weight`` (e.g. another model's table).

        Call it from one worker of the cluster, then ``barrier()`` before training.
        """
        weight = torch.as_tensor(weight, dtype=torch.float32)
        if weight.dim() != 2 or weight.shape[1] != self.embedding_dim:
            raise ValueError(
                f"weight must have shape (n, {self.embedding_dim}), not {tuple(weight.shape)}"
            )
        if self.num_embeddings is not None and weight.shape[0] > self.num_embeddings:
            raise ValueError(f"weight has {weight.shape[0]} rows, the table {self.num_embeddings}")
        worker = self.worker
        for start in range(0, weight.shape[0], chunk):
            rows = weight[start : start + chunk].contiguous()
            keys = torch.arange(start, start + rows.shape[0]) + self._offset64
            worker.set(_roam_keys(keys), rows).wait()

    @torch.no_grad()
    def init_normal_(self, std: float = 1.0, seed: int = 0, *, chunk: int = 65536) -> None:
        """Sets every row to N(0, std²) draws, reproducible from ``seed`` (as torch.nn.Embedding).

        Needs ``num_embeddings``. Call it from one worker of the cluster, then ``barrier()``.
        The padding row, if any, is set to zeros.
        """
        if self.num_embeddings is None:
            raise ValueError("init_normal_ needs num_embeddings (dynamic ids start at zero)")
        gen = torch.Generator().manual_seed(seed)
        worker = self.worker
        for start in range(0, self.num_embeddings, chunk):
            n = min(chunk, self.num_embeddings - start)
            rows = torch.randn(n, self.embedding_dim, generator=gen) * std
            if self.padding_idx is not None and start <= self.padding_idx < start + n:
                rows[self.padding_idx - start] = 0
            keys = torch.arange(start, start + n) + self._offset64
            worker.set(_roam_keys(keys), rows).wait()

    def prefetch(self, ids: torch.Tensor, clock: Optional[int] = None) -> None:
        """Announces the next batch's ids so that their rows are local when it runs.

        Without ``clock``: starts moving the rows to this node (``localize``, not waited;
        a no-op under static allocation). With ``clock``: signals an intent for the worker's
        clock ``clock`` (``worker.intent(keys, clock)``; roam acts on it in time, and the
        training loop ticks ``worker.advance_clock()`` once per batch).
        """
        ids = torch.as_tensor(ids, dtype=torch.int64)
        if not ids.numel():
            return
        keys = _roam_keys(self._keys(torch.unique(ids)))
        if clock is None:
            self.worker.localize(keys)
        else:
            self.worker.intent(keys, clock)


class Embedding(_RoamRows):
    """``torch.nn.Embedding`` whose table lives in roam (row ``i`` is key ``key_offset + i``).

    Args:
        num_embeddings: rows of the table (ids ``0..num_embeddings``); ``None`` for any 64-bit
            id on a node with ``sparse_keys=True`` (rows start at zero).
        embedding_dim: values per row; must equal the node's value length for those keys.
        source: a ``roam.Node`` (each thread's worker: :func:`set_worker`, or worker 0 on a
            one-worker node) or one ``roam.Worker``.
        key_offset: the roam key of row 0 (several tables in one key space).
        table: the named table (``roam.Node(tables=...)``) whose rows these are: row ``i`` is
            the table's id ``i``; ``num_embeddings`` may be ``None`` (any id of a dynamic
            table) and ``embedding_dim`` must be the table's ``dim``. Then ``key_offset``
            stays 0, and ``lr=None`` steps the rows with the table's own optimizer.
        lr: the learning rate of the SGD update applied in roam on backward; ``None``: the
            gradients go to the node's server-side optimizer (``roam.Node(optimizer=...)``)
            through ``push_gradients``, which steps each row where it lives.
        padding_idx: as in torch: this row receives no gradient.

    forward(ids) takes int64/int32 ids of any shape and returns ``ids.shape + (dim,)``.
    Backward pushes ``-lr * grad`` (or, with ``lr=None``, the gradient to the node's optimizer)
    for the batch's unique rows at once: there is no
    ``.grad`` to step, and ``zero_grad`` does not concern these rows.
    """

    def __init__(
        self,
        num_embeddings: Optional[int],
        embedding_dim: int,
        source: Union[Node, Worker],
        *,
        key_offset: int = 0,
        lr: Optional[float] = 0.01,
        padding_idx: Optional[int] = None,
        table: Optional[str] = None,
    ) -> None:
        super().__init__(
            num_embeddings, embedding_dim, source, key_offset=key_offset, lr=lr,
            padding_idx=padding_idx, table=table,
        )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows, inverse = self._unique_rows(ids)
        return _Gather.apply(rows, inverse) if rows.requires_grad else F.embedding(inverse, rows)


class EmbeddingBag(_RoamRows):
    """``torch.nn.EmbeddingBag`` (``mode="sum"`` or ``"mean"``) whose table lives in roam.

    Arguments as :class:`Embedding`, plus ``mode`` and ``include_last_offset`` as in torch.
    forward(input, offsets=None, per_sample_weights=None): ``input`` 2-D (bags of equal
    length) or 1-D with ``offsets``; ``per_sample_weights`` (same shape as ``input``, float32)
    only with ``mode="sum"``, and it receives its gradient as in torch.
    """

    def __init__(
        self,
        num_embeddings: Optional[int],
        embedding_dim: int,
        source: Union[Node, Worker],
        *,
        mode: str = "mean",
        key_offset: int = 0,
        lr: Optional[float] = 0.01,
        include_last_offset: bool = False,
        table: Optional[str] = None,
    ) -> None:
        if mode not in ("sum", "mean"):
            raise ValueError(f"mode must be 'sum' or 'mean', not {mode!r}")
        super().__init__(
            num_embeddings, embedding_dim, source, key_offset=key_offset, lr=lr, table=table
        )
        self.mode = mode
        self.include_last_offset = include_last_offset

    def extra_repr(self) -> str:
        return super().extra_repr() + f", mode={self.mode!r}"

    def forward(
        self,
        input: torch.Tensor,
        offsets: Optional[torch.Tensor] = None,
        per_sample_weights: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        if per_sample_weights is not None and self.mode != "sum":
            raise ValueError(f"per_sample_weights needs mode='sum', this bag is {self.mode!r}")
        if input.dim() == 2 and offsets is not None:
            raise ValueError("offsets must be None for a 2-D input (one bag per row)")
        if input.dim() == 1 and offsets is None:
            raise ValueError("a 1-D input needs offsets (the start of each bag)")
        if input.dim() not in (1, 2):
            raise ValueError(f"input must be 1-D or 2-D, not {input.dim()}-D")
        rows, inverse = self._unique_rows(input)
        psw = per_sample_weights
        if not (rows.requires_grad or (psw is not None and psw.requires_grad)):
            return F.embedding_bag(
                inverse, rows, offsets, mode=self.mode, per_sample_weights=psw,
                include_last_offset=self.include_last_offset,
            )
        n = inverse.numel()
        if inverse.dim() == 2:
            bags, length = inverse.shape
            lengths = torch.full((bags,), length, dtype=torch.int64)
        else:
            offsets = torch.as_tensor(offsets, dtype=torch.int64)
            ends = offsets[1:] if self.include_last_offset else torch.cat([offsets[1:], offsets.new_tensor([n])])
            starts = offsets[:-1] if self.include_last_offset else offsets
            lengths = ends - starts
            if lengths.numel() and (int(lengths.min()) < 0 or int(ends[-1]) != n or int(starts[0]) != 0):
                raise ValueError(
                    f"offsets must start at 0, not decrease, and end at the input's {n} ids"
                )
        bag_of = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
        if psw is not None:
            scale = psw.detach().reshape(-1)
        elif self.mode == "mean":
            scale = (1.0 / lengths.clamp(min=1).to(torch.float32)).index_select(0, bag_of)
        else:
            scale = None
        return _Bag.apply(
            rows, psw, inverse, offsets, self.mode, self.include_last_offset, bag_of, scale
        )
