"""WN18RR-style knowledge graph derived from WordNet 3.0 (Debian wordnet-base).

Steps:
  1. Parse /usr/share/wordnet/data.{noun,verb,adj,adv} from the .deb. An
     entity is a synset, written "<8-digit offset>.<pos>" (pos n, v, a, r;
     adjective satellites "s" are written "a", they share data.adj's offsets),
     e.g. 02084071.n is dog.n.01.
  2. Keep only the 11 WN18RR relations, one direction each, by WordNet
     pointer symbol (source synset = head, target = tail):
       @  -> _hypernym                     @i -> _instance_hypernym
       %m -> _member_meronym               %p -> _has_part
       ;c -> _synset_domain_topic_of       -u -> _member_of_domain_usage
       -r -> _member_of_domain_region      +  -> _derivationally_related_form
       ^  -> _also_see                     $  -> _verb_group
       &  -> _similar_to
     The inverses WN18 also had (~ hyponym, ~i, #m, #p, -c, ;u, ;r) are
     dropped; lexical pointers are lifted to their synsets; duplicate
     triples and self-loops are removed. The four symmetric relations
     (+ ^ $ &) keep both directions, as in WN18RR.
  3. Entity subset (like WN18/WN18RR, roughly 40k entities): a synset is kept
     if it is linked by the kept relations (either direction) to at least 3
     distinct other synsets, counted on the whole WordNet graph; triples are
     kept if both ends are kept. Entities = synsets in a kept triple.
  4. Split: triples are grouped by unordered entity pair {h, t} (so a
     triple and its reverse, e.g. both directions of a symmetric relation,
     always land in the same split); groups are ordered by
     sha256("<seed>:<min(h,t)>:<max(h,t)>"). Walking that order, a group goes
     to test (until 3000 triples), then valid (until 3000), if after moving it
     every entity in it still has at least one train triple; everything
     else is train.
  5. Filters (WN18RR rules; with step 4 they remove nothing, but are
     checked): drop valid/test triples with an entity not in train, and
     valid/test triples whose reverse pair (t, *, h) occurs in train.
  6. Write train.txt, valid.txt, test.txt as "head<TAB>relation<TAB>tail",
     in the group order of step 4 (deterministic, pseudo-random).
"""

import collections
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402
import wordnet  # noqa: E402

RELATIONS = {
    "@": "_hypernym",
    "@i": "_instance_hypernym",
    "%m": "_member_meronym",
    "%p": "_has_part",
    ";c": "_synset_domain_topic_of",
    "-u": "_member_of_domain_usage",
    "-r": "_member_of_domain_region",
    "+": "_derivationally_related_form",
    "^": "_also_see",
    "$": "_verb_group",
    "&": "_similar_to",
}
MIN_NEIGHBOURS = 3
N_TEST = 3000
N_VALID = 3000


def main():
    a = cli.parse(__doc__, [("--wordnet-dir", 'directory holding data.noun etc.')], seed=True)

    # 1-2: kept triples over the whole of WordNet.
    n_synsets = 0
    n_pointers = 0
    symbols = set()
    triples = set()
    for sid, _lemmas, pointers in wordnet.read_synsets(a.wordnet_dir):
        n_synsets += 1
        for sym, target in pointers:
            n_pointers += 1
            symbols.add(sym)
            rel = RELATIONS.get(sym)
            if rel is not None and target != sid:
                triples.add((sid, rel, target))

    # 3: entity subset.
    nbrs = collections.defaultdict(set)
    for h, _r, t in triples:
        nbrs[h].add(t)
        nbrs[t].add(h)
    keep = {e for e, s in nbrs.items() if len(s) >= MIN_NEIGHBOURS}
    kept = sorted(x for x in triples if x[0] in keep and x[2] in keep)

    # 4: grouped, seeded split.
    groups = collections.defaultdict(list)
    for h, r, t in kept:
        groups[(min(h, t), max(h, t))].append((h, r, t))

    def gkey(pair):
        return hashlib.sha256(("%d:%s:%s" % (a.seed, pair[0], pair[1])).encode()).hexdigest()

    order = sorted(groups, key=gkey)
    train_deg = collections.Counter()
    for h, _r, t in kept:
        train_deg[h] += 1
        train_deg[t] += 1
    split_of = {}
    sizes = {"test": 0, "valid": 0}
    for pair in order:
        g = groups[pair]
        target = None
        if sizes["test"] + len(g) <= N_TEST:
            target = "test"
        elif sizes["valid"] + len(g) <= N_VALID:
            target = "valid"
        if target is not None:
            use = collections.Counter()
            for h, _r, t in g:
                use[h] += 1
                use[t] += 1
            if all(train_deg[e] - c >= 1 for e, c in use.items()):
                for e, c in use.items():
                    train_deg[e] -= c
                sizes[target] += len(g)
                split_of[pair] = target
                continue
        split_of[pair] = "train"

    out = {"train": [], "valid": [], "test": []}
    for pair in order:
        out[split_of[pair]].extend(groups[pair])

    # 5: WN18RR filters (guards).
    train_ents = {h for h, _r, _t in out["train"]} | {t for _h, _r, t in out["train"]}
    train_pairs = {(h, t) for h, _r, t in out["train"]}
    removed = {}
    for split in ("valid", "test"):
        before = len(out[split])
        out[split] = [
            (h, r, t)
            for h, r, t in out[split]
            if h in train_ents and t in train_ents and (t, h) not in train_pairs and (h, t) not in train_pairs
        ]
        removed[split] = before - len(out[split])

    # 6: write.
    os.makedirs(a.out, exist_ok=True)
    for split in ("train", "valid", "test"):
        with open(os.path.join(a.out, split + ".txt"), "w", newline="\n") as f:
            for h, r, t in out[split]:
                f.write("%s\t%s\t%s\n" % (h, r, t))

    all_t = out["train"] + out["valid"] + out["test"]
    ents = {h for h, _r, _t in all_t} | {t for _h, _r, t in all_t}
    per_pos = collections.Counter(e.split(".")[1] for e in ents)
    per_rel = collections.Counter(r for _h, r, _t in all_t)
    print("wordnet synsets: %d" % n_synsets)
    print("wordnet pointers: %d" % n_pointers)
    print("wordnet pointer types: %d" % len(symbols))
    print("kept-relation triples in all of wordnet: %d" % len(triples))
    print("entities: %d (n %d, v %d, a %d, r %d)" % (len(ents), per_pos["n"], per_pos["v"], per_pos["a"], per_pos["r"]))
    print("relations: %d" % len(per_rel))
    print("triples: %d" % len(all_t))
    for split in ("train", "valid", "test"):
        print("%s: %d" % (split, len(out[split])))
    print("valid/test removed by filters: %d/%d" % (removed["valid"], removed["test"]))
    for r, c in per_rel.most_common():
        print("relation %s: %d (train %d, valid %d, test %d)" % (
            r, c,
            sum(1 for x in out["train"] if x[1] == r),
            sum(1 for x in out["valid"] if x[1] == r),
            sum(1 for x in out["test"] if x[1] == r)))


if __name__ == "__main__":
    main()
