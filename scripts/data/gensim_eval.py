"""Word-vector benchmarks as shipped in the gensim wheel's test data.

Steps:
  1. Read gensim/test/test_data/{wordsim353.tsv,simlex999.txt,questions-words.txt}
     from the wheel (a zip; read with zipfile, nothing is installed).
  2. Check the formats roam and gensim read: in the two similarity lists every
     line is a "#" comment or "word1<TAB>word2<TAB>score" with a numeric score;
     in questions-words.txt every line is a ": section" header or four
     space-separated words, and the first line is a header.
  3. Write the three files unchanged (byte for byte) under the same names.
"""

import os
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402

PREFIX = "gensim/test/test_data/"
PAIRS = ("wordsim353.tsv", "simlex999.txt")
ANALOGIES = "questions-words.txt"


def fail(msg):
    sys.exit("gensim_eval.py: " + msg)


def check_pairs(name, text):
    n = 0
    for ln, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3 or not parts[0] or not parts[1]:
            fail("%s line %d is not word1<TAB>word2<TAB>score" % (name, ln))
        try:
            float(parts[2])
        except ValueError:
            fail("%s line %d: score %r is not a number" % (name, ln, parts[2]))
        n += 1
    return n


def check_analogies(text):
    sections, questions, semantic = 0, 0, 0
    section = None
    for ln, line in enumerate(text.splitlines(), start=1):
        if line.startswith(": "):
            sections += 1
            section = line[2:].strip()
            continue
        if section is None:
            fail("%s line %d: a question before the first section header" % (ANALOGIES, ln))
        if len(line.split()) != 4:
            fail("%s line %d is not four words" % (ANALOGIES, ln))
        questions += 1
        semantic += not section.startswith("gram")
    return sections, questions, semantic


def main():
    a = cli.parse(__doc__, [("--wheel", None)])

    os.makedirs(a.out, exist_ok=True)
    counts = []
    with zipfile.ZipFile(a.wheel) as z:
        names = set(z.namelist())
        for name in PAIRS + (ANALOGIES,):
            if PREFIX + name not in names:
                fail("%s not found in %s" % (PREFIX + name, a.wheel))
            data = z.read(PREFIX + name)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as e:
                fail("%s is not UTF-8 text (%s)" % (name, e))
            if name in PAIRS:
                counts.append("%s pairs: %d" % (name, check_pairs(name, text)))
            else:
                sections, questions, semantic = check_analogies(text)
                counts.append("%s sections: %d" % (name, sections))
                counts.append("%s questions: %d (semantic %d, syntactic %d)"
                              % (name, questions, semantic, questions - semantic))
            with open(os.path.join(a.out, name), "wb") as f:
                f.write(data)
    for c in counts:
        print(c)


if __name__ == "__main__":
    main()
