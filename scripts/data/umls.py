"""UMLS knowledge graph as shipped in the pykeen wheel.

Steps:
  1. Read pykeen/datasets/umls/{train,valid,test}.txt from the wheel (a zip;
     read with zipfile, nothing is installed). They are plain text (gunzipped
     first if a member turns out to be gzip-compressed).
  2. Check that every line is "head<TAB>relation<TAB>tail".
  3. Write them unchanged as train.txt, valid.txt, test.txt (byte for byte;
     a final newline would be added if one were missing).
"""

import gzip
import os
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402

PREFIX = "pykeen/datasets/umls/"
SPLITS = ("train", "valid", "test")


def main():
    a = cli.parse(__doc__, [("--wheel", None)])

    os.makedirs(a.out, exist_ok=True)
    ents, rels = set(), set()
    counts = {}
    with zipfile.ZipFile(a.wheel) as z:
        names = set(z.namelist())
        for split in SPLITS:
            member = PREFIX + split + ".txt"
            if member not in names and member + ".gz" in names:
                member += ".gz"
            if member not in names:
                sys.exit("umls.py: %s not found in %s" % (PREFIX + split + ".txt", a.wheel))
            data = z.read(member)
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            n = 0
            for ln, line in enumerate(data.decode("utf-8").splitlines(), start=1):
                parts = line.split("\t")
                if len(parts) != 3 or not all(parts):
                    sys.exit("umls.py: %s line %d is not head<TAB>relation<TAB>tail" % (member, ln))
                ents.update((parts[0], parts[2]))
                rels.add(parts[1])
                n += 1
            if not data.endswith(b"\n"):
                data += b"\n"
            with open(os.path.join(a.out, split + ".txt"), "wb") as f:
                f.write(data)
            counts[split] = n
    for split in SPLITS:
        print("%s: %d" % (split, counts[split]))
    print("entities: %d" % len(ents))
    print("relations: %d" % len(rels))


if __name__ == "__main__":
    main()
