"""Minimal reader for the WordNet 3.0 database files (data.noun/verb/adj/adv).

Standard library only. Used by wn18rr.py and gcide.py. File format: wndb(5WN),
one synset per line:

    offset lex_filenum ss_type w_cnt (word lex_id)* p_cnt (sym offset pos st)* ... | gloss

Lines starting with two spaces are the licence header and are skipped.
Synset ids are "<8-digit offset>.<pos>" with pos in n, v, a, r; adjective
satellites (ss_type "s", also "s" in pointer targets) live in data.adj and
share its offset space, so they are written as ".a".
"""

import os
import re

POS_FILES = (("noun", "n"), ("verb", "v"), ("adj", "a"), ("adv", "r"))
_ADJ_MARKER = re.compile(r"\([a-z]+\)$")  # (a), (p), (ip) on adjective lemmas


def norm_pos(pos):
    return "a" if pos == "s" else pos


def read_synsets(wordnet_dir):
    """Yield (synset_id, lemmas, pointers) for every synset.

    lemmas: list of lemma strings as stored (underscores for spaces, markers
    stripped). pointers: list of (symbol, target_synset_id).
    """
    for fname, _ in POS_FILES:
        path = os.path.join(wordnet_dir, "data." + fname)
        with open(path, "r", encoding="latin-1") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                fields = line.split(" | ", 1)[0].split()
                offset, ss_type = fields[0], norm_pos(fields[2])
                w_cnt = int(fields[3], 16)
                i = 4
                lemmas = []
                for _ in range(w_cnt):
                    lemmas.append(_ADJ_MARKER.sub("", fields[i]))
                    i += 2
                p_cnt = int(fields[i])
                i += 1
                pointers = []
                for _ in range(p_cnt):
                    sym, t_off, t_pos = fields[i], fields[i + 1], fields[i + 2]
                    pointers.append((sym, t_off + "." + norm_pos(t_pos)))
                    i += 4
                yield offset + "." + ss_type, lemmas, pointers
