"""MovieLens-100k ratings from the recbole wheel, split 90/10.

Steps:
  1. Read recbole/dataset_example/ml-100k/ml-100k.inter from the wheel (a zip;
     read with zipfile, nothing is installed). It is TSV with the header
     "user_id:token item_id:token rating:float timestamp:float".
  2. Drop the header and the timestamp column; keep user, item and rating
     exactly as written in the file (raw MovieLens ids, ratings 1..5).
  3. Test set = the 10% of ratings (n // 10) with the smallest key
     sha256("<seed>:<user>:<item>") (hex digest compared as a string;
     (user, item) is unique). Everything else is train. The split depends
     only on the seed, not on any RNG implementation.
  4. Write train.tsv and test.tsv as "user<TAB>item<TAB>rating" lines, no
     header, in the order of the source file.
"""

import hashlib
import os
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402

MEMBER = "recbole/dataset_example/ml-100k/ml-100k.inter"
HEADER = ["user_id:token", "item_id:token", "rating:float", "timestamp:float"]


def main():
    a = cli.parse(__doc__, [("--wheel", None)], seed=True)

    with zipfile.ZipFile(a.wheel) as z:
        text = z.read(MEMBER).decode("utf-8")
    lines = text.splitlines()
    header = lines[0].split("\t")
    if header != HEADER:
        sys.exit("ml100k.py: unexpected header in %s: %r" % (MEMBER, header))
    rows = []
    seen = set()
    for ln, line in enumerate(lines[1:], start=2):
        if not line:
            continue
        parts = line.split("\t")
        if len(parts) != 4:
            sys.exit("ml100k.py: %s line %d: expected 4 fields" % (MEMBER, ln))
        user, item, rating = parts[0], parts[1], parts[2]
        float(rating)
        if (user, item) in seen:
            sys.exit("ml100k.py: duplicate (user, item) %s %s" % (user, item))
        seen.add((user, item))
        rows.append((user, item, rating))

    n_test = len(rows) // 10
    keyed = sorted(
        range(len(rows)),
        key=lambda i: hashlib.sha256(("%d:%s:%s" % (a.seed, rows[i][0], rows[i][1])).encode()).hexdigest(),
    )
    test_idx = set(keyed[:n_test])

    os.makedirs(a.out, exist_ok=True)
    n_train = 0
    with open(os.path.join(a.out, "train.tsv"), "w", newline="\n") as ftr, open(
        os.path.join(a.out, "test.tsv"), "w", newline="\n"
    ) as fte:
        for i, r in enumerate(rows):
            line = "\t".join(r) + "\n"
            if i in test_idx:
                fte.write(line)
            else:
                ftr.write(line)
                n_train += 1

    users = {r[0] for r in rows}
    items = {r[1] for r in rows}
    train_users = {r[0] for i, r in enumerate(rows) if i not in test_idx}
    train_items = {r[1] for i, r in enumerate(rows) if i not in test_idx}
    ratings = sorted({r[2] for r in rows}, key=float)
    print("ratings: %d" % len(rows))
    print("train: %d" % n_train)
    print("test: %d" % n_test)
    print("users: %d" % len(users))
    print("items: %d" % len(items))
    print("rating values: %s" % " ".join(ratings))
    print("users with ratings only in test: %d" % len(users - train_users))
    print("items with ratings only in test: %d" % len(items - train_items))


if __name__ == "__main__":
    main()
