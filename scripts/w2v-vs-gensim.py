#!/usr/bin/env python3
"""Word vectors of `roam train w2v --mode single` against gensim 4.4.0, side by side.

Both tools train skip-gram with negative sampling on the same tokenised corpus (GCIDE by
default) with gensim's settings -- dim 100, window 5, 5 negatives, min-count 5, sample 1e-4,
lr 0.025 decaying to 0.0001, 5 epochs, 2 threads -- and are scored by gensim's own evaluation
code on roam's side as well (roam's `--eval-dir`, a port of `evaluate_word_pairs` and
`evaluate_word_analogies` with their defaults): WordSim-353 and SimLex-999 Spearman, Google
analogy accuracy. Runs are interleaved (gensim, roam, gensim, roam, ...) and each run is a
separate process whose CPU time (user + sys, all threads) the driver reads from wait4().

    scripts/w2v-vs-gensim.py [--runs 2] [--threads 2] [--tools gensim,roam]
                             [--roam-arg=--batch-words=1000 ...] [--variant "ARGS" ...]
                             [--other-roam PATH ...] [--gensim-init word2vec] [--json FILE]
    scripts/w2v-vs-gensim.py --check-eval   # roam's evaluation = gensim's, on roam's vectors

Prerequisites are fetched when missing: the data (`scripts/fetch-data.sh gcide gensim-eval`),
gensim 4.4.0 in a venv under target/w2v-vs-gensim/venv (pip, PyPI), and the roam binary
(`cargo build --release -p roam-cli`).

Same text for both: the corpus is plain text, one sentence per line, lower-case ASCII words
separated by spaces (fetch-data.sh's gcide converter writes it so). gensim reads it with
`LineSentence` (str.split(), lines cut at 10 000 words), roam with `--data` (ASCII
whitespace, lines cut at 1 000 words). The script checks that the file is ASCII and lower
case and cuts its lines longer than 1 000 words (gcide has one, of 1 179) into lines of
1 000 in a copy under target/w2v-vs-gensim/, which both tools then read: they see exactly
the same sentences.
roam runs with `--heldout 0` (it trains on the whole text and counts min-count over it, as
gensim does).

CPU columns: "CPU s" is the whole process (start-up, reading, vocabulary, training) minus
the final evaluation, which differs between the tools and is not what is compared; "eval
CPU s" is that evaluation. "wall s" likewise excludes the evaluation.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import roam_report  # scripts/roam_report.py: reports from old and new binaries

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(REPO, "target", "w2v-vs-gensim")
VENV = os.path.join(WORK, "venv")
GENSIM_VERSION = "4.4.0"
EVAL_FILES = ("wordsim353.tsv", "simlex999.txt", "questions-words.txt")
MAX_SENTENCE = 1000  # roam's cut; gensim's is 10 000

SETTINGS = dict(dim=100, window=5, negative=5, min_count=5, sample=1e-4, alpha=0.025,
                min_alpha=0.0001, epochs=5)


def log(msg):
    print("[w2v-vs-gensim] " + msg, file=sys.stderr, flush=True)


# ---- gensim worker (runs inside the venv) -----------------------------------------------
def gensim_evaluate(kv, eval_dir):
    """gensim's own evaluation of KeyedVectors `kv`, with its defaults."""
    ws = kv.evaluate_word_pairs(os.path.join(eval_dir, EVAL_FILES[0]))
    sl = kv.evaluate_word_pairs(os.path.join(eval_dir, EVAL_FILES[1]))
    acc, sections = kv.evaluate_word_analogies(os.path.join(eval_dir, EVAL_FILES[2]))
    sem = [s for s in sections[:-1] if not s["section"].startswith("gram")]
    syn = [s for s in sections[:-1] if s["section"].startswith("gram")]

    def ratio(secs):
        c = sum(len(s["correct"]) for s in secs)
        n = c + sum(len(s["incorrect"]) for s in secs)
        return c / n if n else None

    total = sections[-1]
    return {
        "vocab": len(kv),
        "wordsim_spearman": float(ws[1][0]),
        "wordsim_oov_percent": float(ws[2]),
        "simlex_spearman": float(sl[1][0]),
        "simlex_oov_percent": float(sl[2]),
        "analogy_accuracy": float(acc),
        "analogy_semantic": ratio(sem),
        "analogy_syntactic": ratio(syn),
        "analogy_questions_covered": len(total["correct"]) + len(total["incorrect"]),
    }


def gensim_worker(a):
    t_wall0 = time.time()
    import logging

    import gensim
    from gensim.models import KeyedVectors, Word2Vec
    from gensim.models.word2vec import LineSentence
    from gensim.models.word2vec_inner import FAST_VERSION

    logging.basicConfig(level=logging.WARNING)
    if a.vectors:
        # Score vectors written by another tool (roam's --save-vectors).
        kv = KeyedVectors.load_word2vec_format(a.vectors, binary=False)
        print(json.dumps(gensim_evaluate(kv, a.eval_dir)))
        return
    if FAST_VERSION < 0:
        sys.exit("gensim's compiled training routines are missing (FAST_VERSION < 0)")
    s = SETTINGS
    common = dict(sg=1, hs=0, vector_size=s["dim"], window=s["window"], negative=s["negative"],
                  min_count=s["min_count"], sample=s["sample"], alpha=s["alpha"],
                  min_alpha=s["min_alpha"], epochs=s["epochs"], workers=a.threads, seed=a.seed)
    source = (dict(corpus_file=a.corpus) if a.gensim_input == "corpus_file"
              else dict(corpus_iterable=LineSentence(a.corpus)))
    # What Word2Vec(sentences, ...) does, in its three steps.
    model = Word2Vec(**common)
    model.build_vocab(**source)
    if a.gensim_init == "word2vec":
        # word2vec.c's initial range, ±0.5/dim: gensim draws uniform in [-1, 1)/dim, so
        # halving its vectors gives exactly word2vec.c's distribution.
        model.wv.vectors *= 0.5
    model.train(**source, total_examples=model.corpus_count,
                total_words=model.corpus_total_words, epochs=model.epochs,
                start_alpha=model.alpha, end_alpha=model.min_alpha)
    cpu_train, wall_train = time.process_time(), time.time() - t_wall0
    r = gensim_evaluate(model.wv, a.eval_dir)
    r.update(gensim=gensim.__version__, cpu_train=cpu_train, wall_train=wall_train,
             eval_cpu_seconds=time.process_time() - cpu_train)
    print(json.dumps(r))


# ---- driver ---------------------------------------------------------------------------------
def run_child(cmd):
    """Runs cmd to completion; returns (stdout, user+sys CPU of the child, wall seconds)."""
    t0 = time.time()
    before = os.times()
    r = subprocess.run(cmd, capture_output=True, text=True)
    after = os.times()
    wall = time.time() - t0
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-4000:])
        sys.exit("command failed (exit %d): %s" % (r.returncode, " ".join(cmd)))
    cpu = (after.children_user - before.children_user) + (after.children_system
                                                          - before.children_system)
    return r.stdout, cpu, wall


def ensure_data(corpus, eval_dir, default_corpus, default_eval):
    want = []
    if corpus == default_corpus and not os.path.isfile(corpus):
        want.append("gcide")
    if eval_dir == default_eval and not all(
            os.path.isfile(os.path.join(eval_dir, f)) for f in EVAL_FILES):
        want.append("gensim-eval")
    if want:
        log("fetching " + " ".join(want))
        subprocess.run([os.path.join(REPO, "scripts", "fetch-data.sh")] + want, check=True)
    if not os.path.isfile(corpus):
        sys.exit("corpus %s not found" % corpus)
    for f in EVAL_FILES:
        if not os.path.isfile(os.path.join(eval_dir, f)):
            sys.exit("%s not found in %s (scripts/fetch-data.sh gensim-eval)" % (f, eval_dir))


def prepare_corpus(path):
    """The text both tools train on: `path` checked to be ASCII and lower case (so that
    str.split() and roam's ASCII-whitespace split agree), with every line longer than roam's
    1 000-word cut split into lines of 1 000 words (gensim would keep up to 10 000), written to
    target/w2v-vs-gensim/corpus.txt when anything had to be cut, else `path` itself."""
    cut, tokens, lines, out = 0, 0, 0, []
    with open(path, "rb") as f:
        for no, line in enumerate(f, start=1):
            try:
                text = line.decode("ascii")
            except UnicodeDecodeError:
                sys.exit("%s line %d is not ASCII: gensim and roam could split it differently"
                         % (path, no))
            if text != text.lower():
                sys.exit("%s line %d is not lower-case: lower-case the corpus first" % (path, no))
            words = text.split()
            tokens += len(words)
            lines += bool(words)
            if len(words) > MAX_SENTENCE:
                cut += 1
                for i in range(0, len(words), MAX_SENTENCE):
                    out.append(" ".join(words[i:i + MAX_SENTENCE]) + "\n")
            else:
                out.append(text)
    log("corpus %s: %d lines, %d tokens, %d lines longer than %d words"
        % (path, lines, tokens, cut, MAX_SENTENCE))
    if not cut:
        return path
    os.makedirs(WORK, exist_ok=True)
    prepared = os.path.join(WORK, "corpus.txt")
    with open(prepared + ".tmp", "w") as f:
        f.writelines(out)
    os.replace(prepared + ".tmp", prepared)
    log("  cut into lines of at most %d words: %s" % (MAX_SENTENCE, prepared))
    return prepared


def ensure_gensim():
    py = os.path.join(VENV, "bin", "python")
    probe = "import gensim, scipy; print(gensim.__version__)"
    if os.path.isfile(py):
        r = subprocess.run([py, "-c", probe], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip() == GENSIM_VERSION:
            return py
    log("installing gensim==%s into %s" % (GENSIM_VERSION, VENV))
    os.makedirs(WORK, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "gensim==" + GENSIM_VERSION], check=True)
    r = subprocess.run([py, "-c", probe], capture_output=True, text=True)
    if r.returncode != 0 or r.stdout.strip() != GENSIM_VERSION:
        sys.exit("gensim %s is not importable in %s:\n%s" % (GENSIM_VERSION, VENV, r.stderr))
    return py


def ensure_roam(path, build):
    if build or not os.path.isfile(path):
        log("cargo build --release -p roam-cli")
        subprocess.run(["cargo", "build", "--release", "-p", "roam-cli"], cwd=REPO, check=True)
    return path


def run_gensim(py, a, seed):
    cmd = [py, os.path.abspath(__file__), "--gensim-worker", "--corpus", a.corpus,
           "--eval-dir", a.eval_dir, "--threads", str(a.threads), "--seed", str(seed),
           "--gensim-input", a.gensim_input, "--gensim-init", a.gensim_init]
    out, cpu, wall = run_child(cmd)
    r = json.loads(out.strip().splitlines()[-1])
    label = "gensim " + r["gensim"] + ("" if a.gensim_init == "gensim" else " (±0.5/dim init)")
    r.update(tool=label, cpu=cpu - r["eval_cpu_seconds"],
             wall=r["wall_train"], cpu_total=cpu)
    return r


def run_roam(roam, a, seed, extra):
    s = SETTINGS
    base = [("--mode", "single"), ("--data", a.corpus), ("--eval-dir", a.eval_dir),
            ("--heldout", "0"), ("--eval-every", "0"), ("--workers-per-node", str(a.threads)),
            ("--seed", str(seed)), ("--dim", str(s["dim"])), ("--window", str(s["window"])),
            ("--negative", str(s["negative"])), ("--min-count", str(s["min_count"])),
            ("--subsample", str(s["sample"])), ("--lr", str(s["alpha"])),
            ("--epochs", str(s["epochs"]))]
    # An option given in `extra` replaces the default above.
    given = {x.split("=", 1)[0] for x in extra if x.startswith("--")}
    cmd = [roam, "train", "w2v"]
    for flag, value in base:
        if flag not in given:
            cmd += [flag, value]
    cmd += extra
    out, cpu, wall = run_child(roam_report.with_json(cmd))
    rep = roam_report.find_report(out)
    last = rep["epochs"][-1]
    st = rep["settings"]
    r = {k: last.get(k) for k in ("wordsim_spearman", "simlex_spearman", "analogy_accuracy",
                                  "analogy_semantic", "analogy_syntactic", "eval_cpu_seconds",
                                  "eval_seconds")}
    r.update(
        tool="roam" + (" " + " ".join(extra) if extra else ""),
        vocab=st["vocab"],
        wordsim_oov_percent=100.0 * (1 - st["wordsim_pairs_covered"] / st["wordsim_pairs_listed"]),
        simlex_oov_percent=100.0 * (1 - st["simlex_pairs_covered"] / st["simlex_pairs_listed"]),
        analogy_questions_covered=st["analogy_questions_covered"],
        cpu=cpu - last["eval_cpu_seconds"], cpu_total=cpu,
        wall=wall - last["eval_seconds"],
        cpu_train=sum(e["cpu_seconds"] for e in rep["epochs"]),
        loss=last["loss"],
    )
    return r


def check_eval(py, roam, a):
    """roam's evaluation against gensim's on the same vectors: one roam run writes its
    vectors, gensim scores them; the figures must agree."""
    path = os.path.join(WORK, "roam-vectors.txt")
    os.makedirs(WORK, exist_ok=True)
    r = run_roam(roam, a, a.seed, a.roam_arg + ["--save-vectors", path])
    out, _, _ = run_child([py, os.path.abspath(__file__), "--gensim-worker", "--vectors", path,
                           "--eval-dir", a.eval_dir, "--corpus", a.corpus])
    g = json.loads(out.strip().splitlines()[-1])
    worst = 0.0
    print("| figure | roam's evaluation | gensim's evaluation of roam's vectors |")
    print("|---|---|---|")
    for k in ("wordsim_spearman", "wordsim_oov_percent", "simlex_spearman", "simlex_oov_percent",
              "analogy_accuracy", "analogy_semantic", "analogy_syntactic",
              "analogy_questions_covered"):
        print("| %s | %s | %s |" % (k, r[k], g[k]))
        if r[k] is not None and g[k] is not None:
            worst = max(worst, abs(r[k] - g[k]))
    log("largest difference %.2e (gensim's cosines are float32, roam's float64: the Spearman "
        "figures may differ in the 4th digit when many cosines are equal to 6 digits)" % worst)
    if worst > 2e-3:
        sys.exit("roam's evaluation disagrees with gensim's")


def fmt(x, digits=3):
    return "–" if x is None else ("%.*f" % (digits, x))


def table(results):
    rows = ["| tool | run | WordSim-353 ρ | SimLex-999 ρ | analogies (sem / syn) | CPU s | "
            "wall s | eval CPU s |",
            "|---|---|---|---|---|---|---|---|"]
    by_tool = {}
    for r in results:
        by_tool.setdefault(r["tool"], []).append(r)
    for tool, rs in by_tool.items():
        for i, r in enumerate(rs, start=1):
            rows.append("| %s | %d | %s | %s | %s (%s / %s) | %s | %s | %s |" % (
                tool, i, fmt(r["wordsim_spearman"]), fmt(r["simlex_spearman"]),
                fmt(r["analogy_accuracy"]), fmt(r["analogy_semantic"]),
                fmt(r["analogy_syntactic"]), fmt(r["cpu"], 1), fmt(r["wall"], 1),
                fmt(r["eval_cpu_seconds"], 1)))
        if len(rs) > 1:
            def mean(k):
                v = [r[k] for r in rs if r[k] is not None]
                return statistics.mean(v) if v else None
            rows.append("| %s | mean | %s | %s | %s (%s / %s) | %s | %s | %s |" % (
                tool, fmt(mean("wordsim_spearman")), fmt(mean("simlex_spearman")),
                fmt(mean("analogy_accuracy")), fmt(mean("analogy_semantic")),
                fmt(mean("analogy_syntactic")), fmt(mean("cpu"), 1), fmt(mean("wall"), 1),
                fmt(mean("eval_cpu_seconds"), 1)))
    first = {}
    for r in results:
        first.setdefault(r["tool"], r)
    notes = ["", "Coverage (pairs or questions with every word in the vocabulary):"]
    for tool, r in first.items():
        notes.append("- %s: vocabulary %d, WordSim OOV %.1f %%, SimLex OOV %.1f %%, "
                     "analogy questions covered %d of 19544" % (
                         tool, r["vocab"], r["wordsim_oov_percent"], r["simlex_oov_percent"],
                         r["analogy_questions_covered"]))
    return "\n".join(rows + notes)


def main():
    default_corpus = os.path.join(REPO, "data", "gcide", "corpus.txt")
    default_eval = os.path.join(REPO, "data", "gensim-eval")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--runs", type=int, default=2, help="runs per tool (default 2)")
    ap.add_argument("--threads", type=int, default=2, help="training threads (default 2)")
    ap.add_argument("--tools", default="gensim,roam",
                    help="comma-separated, in run order: gensim, roam (default both)")
    ap.add_argument("--corpus", default=default_corpus)
    ap.add_argument("--eval-dir", default=default_eval)
    ap.add_argument("--roam", default=os.path.join(REPO, "target", "release", "roam"))
    ap.add_argument("--build", action="store_true", help="rebuild roam first")
    ap.add_argument("--roam-arg", action="append", default=[],
                    help="extra argument for roam (repeatable), e.g. --roam-arg=--batch-words=1000")
    ap.add_argument("--variant", action="append", default=[],
                    help="an extra roam configuration, its arguments space-separated "
                         "(repeatable; each runs --runs times beside the others)")
    ap.add_argument("--other-roam", action="append", default=[], metavar="PATH",
                    help="another roam binary (e.g. a build with a candidate change) run as one "
                         "more configuration, with --roam-arg (repeatable)")
    ap.add_argument("--seed", type=int, default=1, help="first seed (run i uses seed + i)")
    ap.add_argument("--gensim-input", choices=("sentences", "corpus_file"), default="sentences",
                    help="gensim's reader: LineSentence iterable (default) or corpus_file")
    ap.add_argument("--gensim-init", choices=("gensim", "word2vec"), default="gensim",
                    help="gensim's initial input vectors: its own, uniform in ±1/dim (default), "
                         "or word2vec.c's ±0.5/dim (gensim's halved), for the investigation")
    ap.add_argument("--json", help="also write every run's figures here, one JSON per line")
    ap.add_argument("--check-eval", action="store_true",
                    help="instead of the comparison: score one roam run's vectors with both "
                         "roam's and gensim's evaluation code and compare")
    ap.add_argument("--gensim-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--vectors", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.corpus = os.path.abspath(a.corpus)
    a.eval_dir = os.path.abspath(a.eval_dir)
    if a.gensim_worker:
        return gensim_worker(a)

    tools = [t.strip() for t in a.tools.split(",") if t.strip()]
    for t in tools:
        if t not in ("gensim", "roam"):
            sys.exit("--tools: unknown tool %r (gensim, roam)" % t)
    ensure_data(a.corpus, a.eval_dir, default_corpus, default_eval)
    a.corpus = prepare_corpus(a.corpus)
    py = ensure_gensim() if "gensim" in tools or a.check_eval else None
    need_roam = "roam" in tools or a.variant or a.check_eval
    roam = ensure_roam(a.roam, a.build) if need_roam else None
    if a.check_eval:
        return check_eval(py, roam, a)

    configs = []  # (tool, roam binary, extra roam arguments, label suffix)
    for t in tools:
        configs.append((t, roam, a.roam_arg if t == "roam" else None, ""))
    for v in a.variant:
        configs.append(("roam", roam, a.roam_arg + v.split(), ""))
    for other in a.other_roam:
        configs.append(("roam", os.path.abspath(other), a.roam_arg, " (%s)" % other))
    results = []
    out = open(a.json, "a") if a.json else None
    for i in range(a.runs):
        seed = a.seed + i
        for tool, binary, extra, suffix in configs:
            log("run %d/%d: %s%s%s (seed %d)" % (i + 1, a.runs, tool, suffix,
                                                 " " + " ".join(extra) if extra else "", seed))
            if tool == "gensim":
                r = run_gensim(py, a, seed)
            else:
                r = run_roam(binary, a, seed, extra)
                r["tool"] += suffix
            r.update(seed=seed, run=i + 1, threads=a.threads,
                     load=os.getloadavg()[0])
            log("  wordsim %.4f simlex %.4f analogies %.4f cpu %.1f s wall %.1f s" % (
                r["wordsim_spearman"], r["simlex_spearman"], r["analogy_accuracy"], r["cpu"],
                r["wall"]))
            results.append(r)
            if out:
                out.write(json.dumps(r) + "\n")
                out.flush()
    print(table(results))


if __name__ == "__main__":
    main()
