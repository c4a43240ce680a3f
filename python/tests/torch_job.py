"""One node of the two-node roam.torch test: `roam launch --nodes 2 -- python torch_job.py`.

Both nodes train one roam.torch table: forward equals the rows in roam, every node's backward
lands exactly once, and a small model's loss falls on each node. Prints `OK torch rank <r>`.
"""

import torch

import roam
import roam.torch as rt

NUM, DIM, LR = 100, 4, 0.25


def main() -> None:
    with roam.Node(num_keys=2 * NUM, value_lengths=DIM, allocation="dynamic") as node:
        assert node.num_nodes == 2, node.num_nodes
        w = node.worker(0)
        emb = rt.Embedding(NUM, DIM, node, lr=LR)
        if node.rank == 0:
            emb.init_normal_(std=1.0, seed=5)
        w.barrier()
        init = torch.randn(NUM, DIM, generator=torch.Generator().manual_seed(5))  # as init_normal_

        # Exact sums: node r uses ids r, r+1, ... (overlapping), loss = sum, so each use of a
        # row subtracts LR from it, wherever the row lives.
        ids = torch.arange(node.rank, NUM, 1).reshape(-1)[: NUM - 1]
        ids = torch.cat([ids, ids[:10]])
        out = emb(ids)
        assert torch.equal(out.detach(), init[ids]), "forward returns the rows in roam"
        w.barrier()  # both nodes read before either pushes
        out.sum().backward()
        w.barrier()
        counts = torch.zeros(NUM)
        for r in range(2):
            used = torch.cat([torch.arange(r, NUM)[: NUM - 1], torch.arange(r, NUM)[:10]])
            counts.index_add_(0, used, torch.ones(len(used)))
        expected = init - LR * counts[:, None]
        got = emb.read(torch.arange(NUM))
        assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()
        w.barrier()

        # A model of the rows alone (logit = sum of the bag's values; a dense head per node would
        # make the two nodes pull the shared rows apart), on this node's half of the data; each
        # node prefetches its next batch.
        gen = torch.Generator().manual_seed(100 + node.rank)
        good = torch.rand(NUM, generator=torch.Generator().manual_seed(7)) < 0.5
        data = torch.randint(0, NUM, (1024, 4), generator=gen)
        labels = (good[data].sum(1) >= 2).float()
        bag = rt.EmbeddingBag(NUM, DIM, node, mode="sum", lr=0.05, key_offset=NUM)  # zeros
        losses = []
        for _ in range(8):
            total = 0.0
            for b in range(0, len(data), 64):
                bag.prefetch(data[b + 64 : b + 128])
                loss = torch.nn.functional.binary_cross_entropy_with_logits(
                    bag(data[b : b + 64]).sum(1) - 2.0, labels[b : b + 64]
                )
                loss.backward()
                total += loss.item() * 64
            losses.append(total / len(data))
        w.barrier()
        assert losses[-1] < 0.7 * losses[0], losses
        stats = node.stats()
        print(f"losses {[round(x, 3) for x in losses]} relocations_in {stats['relocations_in']}")
    print(f"OK torch rank {node.rank}", flush=True)


if __name__ == "__main__":
    main()
