"""English corpus from GCIDE (Debian dict-gcide) plus WordNet synonym pairs.

Steps (corpus.txt):
  1. Read gcide.index (headword, base64 offset, base64 length) and
     gunzip gcide.dict.dz (dictzip is gzip-compatible). Every distinct
     (offset, length) entry is taken once, in file order; the "00-..." entries
     (database info and licence text) are skipped.
  2. In each entry: drop pronunciations (\\Ab*an"don\\ and the "(...)" forms
     with stress marks), "Syn:" paragraphs (synonym lists, many copied from
     WordNet, which the word-pair metric below is built from), quotation
     authors ("--Milton."), domain labels such as "(Bot.)", every
     "[...]" span (etymologies, [1913 Webster], [Obs.], [syn: ...]) and the
     part-of-speech abbreviations after the headword; turn GCIDE letter
     codes ([=a], ['e], [ae], [oe], ...) into plain letters, "{link}" into
     "link", and strip any <tag> and &entity; markup.
  3. Split the text into sentences / definitions at ".", "!", "?", ":" and
     ";" followed by white space, at "--" and at sense numbers ("2.", "(b)").
  4. Lowercase; keep runs of letters and apostrophes (apostrophes only
     inside a word: "one's" stays, quote marks go); drop one-letter tokens
     other than "a" and "i"; keep lines with at least 3 tokens; one line per
     sentence, tokens separated by single spaces.

Steps (similar_pairs.tsv):
  5. From WordNet 3.0 (Debian wordnet-base data.{noun,verb,adj,adv}), for
     every synset take its single-word lemmas (letters only, at least 3 of
     them, lowercased) and form all unordered pairs of different words.
  6. Keep pairs where both words occur at least 20 times in corpus.txt;
     write "w1<TAB>w2" with w1 < w2, sorted, each pair once.
"""

import collections
import gzip
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402
import wordnet  # noqa: E402

MIN_COUNT = 20
MIN_TOKENS = 3
MIN_LETTERS = 3

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
B64_VAL = {c: i for i, c in enumerate(B64)}


def b64num(s):
    n = 0
    for c in s:
        n = n * 64 + B64_VAL[c]
    return n


# GCIDE letter codes: [=a] macron, ['e] acute, [`e] grave, [a^] circumflex,
# ["o] diaeresis, [~n] tilde, [.a] dot, [,c] cedilla, [-o] short, [*a] ring.
_CODE_DIACRITIC = re.compile(r"\[(?:[=`'\"~.,*^-]([A-Za-z]{1,2})|([A-Za-z]{1,2})[\^~])\]")
_NAMED_CODES = {
    "ae": "ae", "AE": "AE", "oe": "oe", "OE": "OE", "imac": "i", "aum": "a",
    "eth": "th", "thorn": "th", "ng": "ng", "yogh": "y", "filig": "fi",
    "fllig": "fl", "ffllig": "ffl", "udd": "u", "add": "a", "asl": "a",
    "ccaron": "c", "cacute": "c", "nbsp": " ", "ldqo": " ", "rdqo": " ",
    "rsquo": "'", "lsquo": "'", "schwa": "e", "dsdot": "d", "zdot": "z",
    "lsdot": "l", "mdot": "m", "tsdo": "t",
}
_NAMED_RE = re.compile(r"\[(" + "|".join(sorted(_NAMED_CODES, key=len, reverse=True)) + r")\]")

_PRON_BACKSLASH = re.compile(r"\\[^\\\n]*\\")
# "(-d[u^]nd)", '(Ab"a*ca)', "(?; 277)": no spaces besides after ';', has a
# stress/syllable mark or a letter code or a '?'.
_PRON_PAREN = re.compile(r"\((?=[^()\s]*[*\"`?\[])[^()\s]*(?:;\s*\d+)?\)")
_AUTHOR = re.compile(r"--\s*\{?[A-Z][^\n]*")
# "(Bot.)", "(Zo[\"o]l.)", "(Mar. Law)", "(Anat. & Physiol.)": capitalized
# words, the first one abbreviated.
_DOMAIN = re.compile(r"\(\s*[A-Z][^()\s]*\.(?:\s*(?:&|and|,)?\s*[A-Z][^()\s]*)*\s*\)")
_POS_HEAD = re.compile(
    r"^[\s,;]*(?:(?:n|v|a|adv|adj|prep|conj|interj|pron|prop|pr|p|vb|imp|pl|sing|t|i|"
    r"superl|compar|fem|masc|pref|suff|prefix|suffix|obs|&)\b\.?[\s,;]*)+"
)
_TAG = re.compile(r"<[^<>\n]*>")
_ENTITY = re.compile(r"&[A-Za-z]+;|&#[0-9]+;")
_LABEL = re.compile(r"^\s*(?:Usage|Note|Syn|Sense|Def|Also|See also)\s*:\s*", re.M)
_SPLIT = re.compile(r"(?<=[.!?:;])\s+|--|\s\(?(?:\d+|[a-z])[.)]\s")
_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)*")


_INNER_BRACKETS = re.compile(r"\[[^\[\]]*\]")


def remove_brackets(text):
    """Remove every [...] span (innermost first, so nesting works); stray
    unmatched brackets are removed as characters, keeping the text around them."""
    while True:
        text, n = _INNER_BRACKETS.subn(" ", text)
        if n == 0:
            break
    return text.replace("[", " ").replace("]", " ")


def clean_entry(entry):
    """Return the list of cleaned sentences (token lists) of one entry."""
    # paragraphs: drop synonym lists
    paras = re.split(r"\n[ \t]*\n", entry)
    paras = [p for p in paras if not re.match(r"\s*Syn\s*[:.]", p)]
    text = "\n".join(paras)

    # headword line: drop everything up to the last pronunciation on it and
    # the part-of-speech abbreviations that follow
    first_nl = text.find("\n")
    head = text if first_nl < 0 else text[:first_nl]
    rest = "" if first_nl < 0 else text[first_nl:]
    m = None
    for m in _PRON_BACKSLASH.finditer(head):
        pass
    if m is not None:
        head = head[m.end():]
        head = _PRON_PAREN.sub(" ", head)
        head = _POS_HEAD.sub(" ", head)
    else:
        head = ""  # a headword line without pronunciation: headword only
    text = head + rest

    text = _PRON_BACKSLASH.sub(" ", text)
    text = _PRON_PAREN.sub(" ", text)
    text = _AUTHOR.sub(" ", text)
    text = _CODE_DIACRITIC.sub(lambda m: m.group(1) or m.group(2), text)
    text = _NAMED_RE.sub(lambda m: _NAMED_CODES[m.group(1)], text)
    text = _DOMAIN.sub(" ", text)
    text = remove_brackets(text)
    text = _TAG.sub(" ", text)
    text = _ENTITY.sub(" ", text)
    text = _LABEL.sub(" ", text)
    text = text.replace("{", "").replace("}", "")
    text = re.sub(r"\s+", " ", text)

    sentences = []
    for part in _SPLIT.split(text):
        toks = [t for t in _TOKEN.findall(part.lower()) if len(t) > 1 or t in ("a", "i")]
        if len(toks) >= MIN_TOKENS:
            sentences.append(toks)
    return sentences


def main():
    a = cli.parse(__doc__, [("--dict-dz", 'gcide.dict.dz'), ("--index", 'gcide.index'), ("--wordnet-dir", 'directory holding WordNet data.noun etc.')])

    with gzip.open(a.dict_dz, "rb") as f:
        raw = f.read()
    spans = set()
    with open(a.index, "r", encoding="utf-8", errors="replace") as f:
        for ln, line in enumerate(f, start=1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                sys.exit("gcide.py: %s line %d: expected 3 fields" % (a.index, ln))
            if parts[0].startswith("00-"):
                continue
            spans.add((b64num(parts[1]), b64num(parts[2])))
    spans = sorted(spans)

    os.makedirs(a.out, exist_ok=True)
    counts = collections.Counter()
    n_lines = 0
    n_tokens = 0
    with open(os.path.join(a.out, "corpus.txt"), "w", encoding="ascii", newline="\n") as out:
        for off, length in spans:
            entry = raw[off:off + length].decode("utf-8", errors="replace")
            for toks in clean_entry(entry):
                out.write(" ".join(toks) + "\n")
                counts.update(toks)
                n_lines += 1
                n_tokens += len(toks)

    pairs = set()
    n_synsets = 0
    for _sid, lemmas, _pointers in wordnet.read_synsets(a.wordnet_dir):
        n_synsets += 1
        words = sorted({w.lower() for w in lemmas if re.fullmatch(r"[A-Za-z]{%d,}" % MIN_LETTERS, w)})
        words = [w for w in words if counts[w] >= MIN_COUNT]
        for i in range(len(words)):
            for j in range(i + 1, len(words)):
                pairs.add((words[i], words[j]))
    with open(os.path.join(a.out, "similar_pairs.tsv"), "w", encoding="ascii", newline="\n") as out:
        for w1, w2 in sorted(pairs):
            out.write("%s\t%s\n" % (w1, w2))

    pair_words = {w for p in pairs for w in p}
    print("dictionary entries: %d" % len(spans))
    print("corpus lines: %d" % n_lines)
    print("corpus tokens: %d" % n_tokens)
    print("vocabulary: %d" % len(counts))
    print("vocabulary (count >= 5): %d" % sum(1 for c in counts.values() if c >= 5))
    print("vocabulary (count >= %d): %d" % (MIN_COUNT, sum(1 for c in counts.values() if c >= MIN_COUNT)))
    print("similar pairs: %d" % len(pairs))
    print("words in similar pairs: %d" % len(pair_words))


if __name__ == "__main__":
    main()
