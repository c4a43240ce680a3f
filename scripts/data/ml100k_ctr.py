"""MovieLens-100k as a click task (CTR), from the recbole wheel, split 80/20.

Steps:
  1. Read recbole/dataset_example/ml-100k/ml-100k.{inter,user,item} from the
     wheel (a zip; read with zipfile, nothing is installed). All are TSV with
     recbole's typed headers: inter "user_id:token item_id:token rating:float
     timestamp:float"; user "user_id:token age:token gender:token
     occupation:token zip_code:token"; item "item_id:token movie_title:token_seq
     release_year:token class:token_seq" (class: the space-separated genres).
  2. One example per rating: label = 1 if rating >= 4 else 0. Seven id fields:
     user, item, age (bucket: <18, 18-24, 25-34, 35-44, 45-49, 50-55, 56+,
     the MovieLens-1M buckets), gender, occupation, zip (the first two
     characters of the zip code), genres (a bag: every genre of the movie).
  3. Each field's values are numbered 0, 1, ... in the order of their first
     appearance in the sorted list of distinct values (a dense index per field,
     so both Rust and PyTorch can use it; Rust hashes (field, id) into roam's
     sparse keys, PyTorch adds a per-field offset).
  4. Test set = the 20% of examples (n // 5) with the smallest key
     sha256("<seed>:<user>:<item>") (hex digest compared as a string; a random
     split that depends only on the seed, not on any RNG implementation).
     Everything else is train.
  5. Write train.tsv and test.tsv in the order of the source file, with the
     header "label user item age gender occupation zip genres": the label,
     then one cell per field, a cell being its ids separated by "," (genres may
     hold several). Write fields.tsv: "name<TAB>cardinality" per field.
"""

import hashlib
import os
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402

PREFIX = "recbole/dataset_example/ml-100k/ml-100k."
HEADERS = {
    "inter": ["user_id:token", "item_id:token", "rating:float", "timestamp:float"],
    "user": ["user_id:token", "age:token", "gender:token", "occupation:token", "zip_code:token"],
    "item": ["item_id:token", "movie_title:token_seq", "release_year:token", "class:token_seq"],
}
FIELDS = ["user", "item", "age", "gender", "occupation", "zip", "genres"]
AGE_BUCKETS = [(18, "<18"), (25, "18-24"), (35, "25-34"), (45, "35-44"), (50, "45-49"), (56, "50-55")]


def table(z, name):
    text = z.read(PREFIX + name).decode("utf-8", "replace")
    lines = text.splitlines()
    header = lines[0].split("\t")
    if header != HEADERS[name]:
        sys.exit("ml100k_ctr.py: unexpected header in %s%s: %r" % (PREFIX, name, header))
    out = []
    for ln, line in enumerate(lines[1:], start=2):
        if not line:
            continue
        parts = line.split("\t")
        if len(parts) != len(header):
            sys.exit("ml100k_ctr.py: %s%s line %d: expected %d fields" % (PREFIX, name, ln, len(header)))
        out.append(parts)
    return out


def age_bucket(age):
    a = int(age)
    for limit, name in AGE_BUCKETS:
        if a < limit:
            return name
    return "56+"


def main():
    a = cli.parse(__doc__, [("--wheel", None)], seed=True)
    with zipfile.ZipFile(a.wheel) as z:
        inter, users, items = table(z, "inter"), table(z, "user"), table(z, "item")
    user = {u[0]: (age_bucket(u[1]), u[2], u[3], u[4][:2]) for u in users}
    genres = {i[0]: sorted(set(i[3].split())) for i in items}

    raw = []  # (label, [values per field])
    for user_id, item_id, rating, _ in inter:
        if user_id not in user or item_id not in genres:
            sys.exit("ml100k_ctr.py: rating of an unknown user %s or item %s" % (user_id, item_id))
        age, gender, occupation, zip2 = user[user_id]
        label = 1 if float(rating) >= 4 else 0
        raw.append((label, [[user_id], [item_id], [age], [gender], [occupation], [zip2], genres[item_id]]))

    vocab = []
    for f in range(len(FIELDS)):
        values = sorted({v for _, cells in raw for v in cells[f]})
        vocab.append({v: i for i, v in enumerate(values)})

    n_test = len(raw) // 5
    keyed = sorted(
        range(len(raw)),
        key=lambda i: hashlib.sha256(("%d:%s:%s" % (a.seed, inter[i][0], inter[i][1])).encode()).hexdigest(),
    )
    test_idx = set(keyed[:n_test])

    os.makedirs(a.out, exist_ok=True)
    header = "label\t" + "\t".join(FIELDS) + "\n"
    clicks = [0, 0]
    with open(os.path.join(a.out, "train.tsv"), "w", newline="\n") as ftr, open(
        os.path.join(a.out, "test.tsv"), "w", newline="\n"
    ) as fte:
        ftr.write(header)
        fte.write(header)
        for i, (label, cells) in enumerate(raw):
            ids = [",".join(str(vocab[f][v]) for v in cell) for f, cell in enumerate(cells)]
            line = "%d\t%s\n" % (label, "\t".join(ids))
            test = i in test_idx
            (fte if test else ftr).write(line)
            clicks[test] += label
    with open(os.path.join(a.out, "fields.tsv"), "w", newline="\n") as ff:
        for name, v in zip(FIELDS, vocab):
            ff.write("%s\t%d\n" % (name, len(v)))

    print("examples: %d" % len(raw))
    print("train: %d (clicks %d)" % (len(raw) - n_test, clicks[0]))
    print("test: %d (clicks %d)" % (n_test, clicks[1]))
    print("field cardinalities: %s" % " ".join("%s=%d" % (n, len(v)) for n, v in zip(FIELDS, vocab)))


if __name__ == "__main__":
    main()
