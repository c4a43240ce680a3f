#!/usr/bin/env bash
# Fetch the real datasets used by roam's example workloads from package
# registries (PyPI via pip, Debian via apt-get) and convert them into data/.
#
#   scripts/fetch-data.sh [--force] [ml-100k|ml-100k-ctr|umls|wn18rr|gcide|gensim-eval|all]...
#
# Datasets (see docs/data.md):
#   ml-100k  MovieLens-100k ratings, 90/10 split   (PyPI recbole wheel)       -> mf
#   ml-100k-ctr  MovieLens-100k as clicks (rating >= 4), 7 id fields, 80/20
#            split                                  (PyPI recbole wheel)       -> ctr
#   umls     UMLS knowledge graph                   (PyPI pykeen wheel)        -> kge
#   wn18rr   WN18RR-style graph from WordNet 3.0    (Debian wordnet-base)      -> kge
#   gcide    English corpus + WordNet synonym pairs (Debian dict-gcide,
#            wordnet-base)                                                     -> w2v
#   gensim-eval  WordSim-353, SimLex-999, Google analogy questions
#            (PyPI gensim wheel's test data)                  -> w2v --eval-dir
#
# Idempotent: a dataset whose data/<name>/SOURCE matches what this script would
# produce (same artifacts, hashes, converter code, seed) and whose output files
# still have the recorded sha256 is skipped. --force redoes it.
#
# Environment:
#   ROAM_DATA_DIR        output directory (default: <repo>/data)
#   ROAM_DATA_ARTIFACTS  directory with already-downloaded artifacts (the exact
#                        wheel / .deb file names below); used instead of the
#                        network when present. Hashes are still checked.
#
# Needs bash, python3 (standard library only), pip (for `pip download`),
# apt-get + dpkg-deb (Debian/Ubuntu), sha256sum.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HELPERS="$REPO/scripts/data"
DATA="${ROAM_DATA_DIR:-$REPO/data}"
PYTHON="${PYTHON:-python3}"

# ---- pinned artifacts (hashes recorded on first download) -----------------
SEED=42

RECBOLE_VERSION=1.2.1
RECBOLE_FILE=recbole-1.2.1-py3-none-any.whl
RECBOLE_SHA256=9c9948202011f37eb0a7c6768129313f00d6403ad221ec940d5e2d5d5f33a407

PYKEEN_VERSION=1.11.1
PYKEEN_FILE=pykeen-1.11.1-py3-none-any.whl
PYKEEN_SHA256=b6cc0ab012fc6ba4f37b58fb7081a409a5c1f04cbbb0e0e9c2256e911757d4ba

WORDNET_VERSION=1:3.0-37
WORDNET_FILE=wordnet-base_3.0-37_all.deb
WORDNET_SHA256=61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752

GCIDE_VERSION=0.48.5+nmu2
GCIDE_FILE=dict-gcide_0.48.5+nmu2_all.deb
GCIDE_SHA256=7b0af5cfde3cbdef5e9d6e78f92ec335ced7c2790f37a40f49bebc6f7347ac0f

# One platform's wheel, downloaded with explicit --platform/--python-version so that every
# machine gets this same file (the test data is the same in all of gensim's wheels).
GENSIM_VERSION=4.4.0
GENSIM_FILE=gensim-4.4.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl
GENSIM_SHA256=91a7fa5e814e7b1bad4b2dffa8d62c1e55410d5cbdf930714c1997ffb4404db8
GENSIM_PIP_ARGS=(--platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp --abi cp311)

ALL_DATASETS=(ml-100k ml-100k-ctr umls wn18rr gcide gensim-eval)
FORMAT_VERSION=1

# ---- helpers ---------------------------------------------------------------
log() { printf '[fetch-data] %s\n' "$*" >&2; }
die() { printf '[fetch-data] error: %s\n' "$*" >&2; exit 1; }

usage() {
    sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

check_sha256() { # file expected label
    local got
    got="$(sha256_of "$1")"
    if [[ "$got" != "$2" ]]; then
        die "sha256 mismatch for $3 ($(basename "$1")):
    expected $2
    got      $got
  The registry served a different file than the one pinned in scripts/fetch-data.sh.
  If the new artifact is legitimate, check it and update the pinned version/hash there."
    fi
}

TMP=""
STAGE=""
cleanup() {
    [[ -n "$STAGE" && -d "$STAGE" ]] && rm -rf "$STAGE"
    [[ -n "$TMP" && -d "$TMP" ]] && rm -rf "$TMP"
    return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ensure_tmp() {
    if [[ -z "$TMP" ]]; then
        TMP="$(mktemp -d "${TMPDIR:-/tmp}/roam-fetch-data.XXXXXX")"
    fi
}

from_artifact_dir() { # file -> copies it into $TMP/dl if ROAM_DATA_ARTIFACTS has it
    local f="$1"
    if [[ -n "${ROAM_DATA_ARTIFACTS:-}" && -f "$ROAM_DATA_ARTIFACTS/$f" ]]; then
        cp "$ROAM_DATA_ARTIFACTS/$f" "$TMP/dl/$f"
        log "using $ROAM_DATA_ARTIFACTS/$f"
        return 0
    fi
    return 1
}

# fetch_wheel project version file sha256 [extra pip download args...] -> sets FETCHED to the path
fetch_wheel() {
    local project="$1" version="$2" file="$3" sha="$4"
    shift 4
    ensure_tmp
    mkdir -p "$TMP/dl"
    if [[ ! -f "$TMP/dl/$file" ]] && ! from_artifact_dir "$file"; then
        "$PYTHON" -m pip --version >/dev/null 2>&1 \
            || die "pip is not available for $PYTHON; install it (e.g. 'apt-get install python3-pip') or put $file in ROAM_DATA_ARTIFACTS"
        log "pip download $project==$version"
        local dl="$TMP/pip-$project"
        mkdir -p "$dl"
        if ! "$PYTHON" -m pip download --no-deps --only-binary=:all: --disable-pip-version-check \
                "$@" -q -d "$dl" "$project==$version" >"$TMP/pip.log" 2>&1; then
            cat "$TMP/pip.log" >&2
            die "'pip download $project==$version' failed (needs access to PyPI or a configured pip index)"
        fi
        [[ -f "$dl/$file" ]] || die "pip download $project==$version did not produce $file (got: $(ls "$dl"))"
        mv "$dl/$file" "$TMP/dl/$file"
    fi
    check_sha256 "$TMP/dl/$file" "$sha" "PyPI $project $version"
    FETCHED="$TMP/dl/$file"
}

APT_UPDATED=0
apt_download() { # pkg version dir
    local pkg="$1" version="$2" dir="$3" opts=()
    [[ "$(id -u)" == 0 ]] && opts=(-o APT::Sandbox::User=root)
    (cd "$dir" && apt-get "${opts[@]}" -q download "$pkg=$version") >"$TMP/apt.log" 2>&1
}

# fetch_deb pkg version file sha256 -> sets FETCHED to the path of the extracted root
fetch_deb() {
    local pkg="$1" version="$2" file="$3" sha="$4"
    ensure_tmp
    mkdir -p "$TMP/dl"
    local root="$TMP/root-$pkg"
    if [[ -d "$root" ]]; then FETCHED="$root"; return 0; fi
    if [[ ! -f "$TMP/dl/$file" ]] && ! from_artifact_dir "$file"; then
        command -v apt-get >/dev/null 2>&1 \
            || die "apt-get not found: $pkg $version comes from Debian's archive. Run this on Debian/Ubuntu, or download $file elsewhere and point ROAM_DATA_ARTIFACTS at its directory."
        local dl="$TMP/apt-$pkg"
        mkdir -p "$dl"
        log "apt-get download $pkg=$version"
        if ! apt_download "$pkg" "$version" "$dl"; then
            if [[ "$APT_UPDATED" == 0 && "$(id -u)" == 0 ]]; then
                log "apt-get update (package lists missing or stale)"
                apt-get update -qq >"$TMP/apt-update.log" 2>&1 \
                    || { cat "$TMP/apt-update.log" >&2; die "apt-get update failed"; }
                APT_UPDATED=1
                apt_download "$pkg" "$version" "$dl" || { cat "$TMP/apt.log" >&2; die "apt-get download $pkg=$version failed even after apt-get update. Is version $version still in the archive? (apt-cache policy $pkg)"; }
            elif [[ "$(id -u)" != 0 ]]; then
                cat "$TMP/apt.log" >&2
                die "apt-get download $pkg=$version failed. The package lists may be missing: run 'sudo apt-get update' and retry (this script runs apt-get update itself only as root)."
            else
                cat "$TMP/apt.log" >&2
                die "apt-get download $pkg=$version failed. Is version $version still in the archive? (apt-cache policy $pkg)"
            fi
        fi
        local got=("$dl"/"${pkg}"_*.deb)
        [[ -f "${got[0]}" ]] || die "apt-get download $pkg=$version produced no .deb"
        mv "${got[0]}" "$TMP/dl/$file"
    fi
    check_sha256 "$TMP/dl/$file" "$sha" "Debian $pkg $version"
    command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb not found (needed to unpack $file); run on Debian/Ubuntu"
    mkdir -p "$root"
    dpkg-deb -x "$TMP/dl/$file" "$root"
    FETCHED="$root"
}

# ---- SOURCE files ----------------------------------------------------------
converter_lines() { # helper files...
    local f
    for f in "$@"; do
        printf 'converter: scripts/data/%s sha256=%s\n' "$f" "$(sha256_of "$HELPERS/$f")"
    done
}

# spec_<name>: the part of SOURCE that decides whether the data is current.
spec_header() { # name
    printf '# roam dataset %s, written by scripts/fetch-data.sh. Do not edit:\n' "$1"
    printf '# the lines up to "## counts" decide whether the data is re-fetched.\n'
    printf 'dataset: %s\n' "$1"
    printf 'format-version: %s\n' "$FORMAT_VERSION"
}

spec_ml-100k() {
    spec_header ml-100k
    printf 'artifact: PyPI recbole %s %s sha256=%s\n' "$RECBOLE_VERSION" "$RECBOLE_FILE" "$RECBOLE_SHA256"
    printf 'member: recbole/dataset_example/ml-100k/ml-100k.inter\n'
    printf 'seed: %s\n' "$SEED"
    converter_lines ml100k.py cli.py
    printf '## steps\n'
    "$PYTHON" "$HELPERS/ml100k.py" --describe
}

spec_ml-100k-ctr() {
    spec_header ml-100k-ctr
    printf 'artifact: PyPI recbole %s %s sha256=%s\n' "$RECBOLE_VERSION" "$RECBOLE_FILE" "$RECBOLE_SHA256"
    printf 'member: recbole/dataset_example/ml-100k/ml-100k.{inter,user,item}\n'
    printf 'seed: %s\n' "$SEED"
    converter_lines ml100k_ctr.py cli.py
    printf '## steps\n'
    "$PYTHON" "$HELPERS/ml100k_ctr.py" --describe
}

spec_umls() {
    spec_header umls
    printf 'artifact: PyPI pykeen %s %s sha256=%s\n' "$PYKEEN_VERSION" "$PYKEEN_FILE" "$PYKEEN_SHA256"
    printf 'member: pykeen/datasets/umls/{train,valid,test}.txt\n'
    converter_lines umls.py cli.py
    printf '## steps\n'
    "$PYTHON" "$HELPERS/umls.py" --describe
}

spec_wn18rr() {
    spec_header wn18rr
    printf 'artifact: Debian wordnet-base %s %s sha256=%s\n' "$WORDNET_VERSION" "$WORDNET_FILE" "$WORDNET_SHA256"
    printf 'member: /usr/share/wordnet/data.{noun,verb,adj,adv} (WordNet 3.0)\n'
    printf 'seed: %s\n' "$SEED"
    converter_lines wn18rr.py wordnet.py cli.py
    printf '## steps\n'
    "$PYTHON" "$HELPERS/wn18rr.py" --describe
}

spec_gcide() {
    spec_header gcide
    printf 'artifact: Debian dict-gcide %s %s sha256=%s\n' "$GCIDE_VERSION" "$GCIDE_FILE" "$GCIDE_SHA256"
    printf 'member: /usr/share/dictd/gcide.dict.dz, /usr/share/dictd/gcide.index (GCIDE 0.48)\n'
    printf 'artifact: Debian wordnet-base %s %s sha256=%s\n' "$WORDNET_VERSION" "$WORDNET_FILE" "$WORDNET_SHA256"
    printf 'member: /usr/share/wordnet/data.{noun,verb,adj,adv} (WordNet 3.0)\n'
    converter_lines gcide.py wordnet.py cli.py
    printf '## steps\n'
    "$PYTHON" "$HELPERS/gcide.py" --describe
}

spec_gensim-eval() {
    spec_header gensim-eval
    printf 'artifact: PyPI gensim %s %s sha256=%s\n' "$GENSIM_VERSION" "$GENSIM_FILE" "$GENSIM_SHA256"
    printf 'member: gensim/test/test_data/{wordsim353.tsv,simlex999.txt,questions-words.txt}\n'
    converter_lines gensim_eval.py cli.py
    printf '## steps\n'
    "$PYTHON" "$HELPERS/gensim_eval.py" --describe
}

outputs_of() {
    case "$1" in
        ml-100k) echo "train.tsv test.tsv" ;;
        ml-100k-ctr) echo "train.tsv test.tsv fields.tsv" ;;
        umls | wn18rr) echo "train.txt valid.txt test.txt" ;;
        gcide) echo "corpus.txt similar_pairs.tsv" ;;
        gensim-eval) echo "wordsim353.tsv simlex999.txt questions-words.txt" ;;
    esac
}

# is_current name: SOURCE spec matches and every output has its recorded hash
is_current() {
    local name="$1" dir="$DATA/$1"
    [[ -f "$dir/SOURCE" ]] || return 1
    local want have
    want="$("spec_$name")" || return 1
    have="$(sed '/^## counts$/,$d' "$dir/SOURCE")"
    [[ "$want" == "$have" ]] || return 1
    local sums
    sums="$(sed -n '/^## outputs/,$p' "$dir/SOURCE" | sed 1d)"
    [[ -n "$sums" ]] || return 1
    local f
    for f in $(outputs_of "$name"); do
        [[ -f "$dir/$f" ]] || return 1
        grep -q "  $f\$" <<<"$sums" || return 1
    done
    (cd "$dir" && sha256sum --status -c <<<"$sums") || return 1
}

# ---- conversion per dataset -----------------------------------------------
convert_ml-100k() { # out
    fetch_wheel recbole "$RECBOLE_VERSION" "$RECBOLE_FILE" "$RECBOLE_SHA256"
    "$PYTHON" "$HELPERS/ml100k.py" --wheel "$FETCHED" --out "$1" --seed "$SEED"
}

convert_ml-100k-ctr() { # out
    fetch_wheel recbole "$RECBOLE_VERSION" "$RECBOLE_FILE" "$RECBOLE_SHA256"
    "$PYTHON" "$HELPERS/ml100k_ctr.py" --wheel "$FETCHED" --out "$1" --seed "$SEED"
}

convert_umls() {
    fetch_wheel pykeen "$PYKEEN_VERSION" "$PYKEEN_FILE" "$PYKEEN_SHA256"
    "$PYTHON" "$HELPERS/umls.py" --wheel "$FETCHED" --out "$1"
}

convert_wn18rr() {
    fetch_deb wordnet-base "$WORDNET_VERSION" "$WORDNET_FILE" "$WORDNET_SHA256"
    "$PYTHON" "$HELPERS/wn18rr.py" --wordnet-dir "$FETCHED/usr/share/wordnet" --out "$1" --seed "$SEED"
}

convert_gcide() {
    fetch_deb wordnet-base "$WORDNET_VERSION" "$WORDNET_FILE" "$WORDNET_SHA256"
    local wn="$FETCHED/usr/share/wordnet"
    fetch_deb dict-gcide "$GCIDE_VERSION" "$GCIDE_FILE" "$GCIDE_SHA256"
    "$PYTHON" "$HELPERS/gcide.py" --dict-dz "$FETCHED/usr/share/dictd/gcide.dict.dz" \
        --index "$FETCHED/usr/share/dictd/gcide.index" --wordnet-dir "$wn" --out "$1"
}

convert_gensim-eval() {
    fetch_wheel gensim "$GENSIM_VERSION" "$GENSIM_FILE" "$GENSIM_SHA256" "${GENSIM_PIP_ARGS[@]}"
    "$PYTHON" "$HELPERS/gensim_eval.py" --wheel "$FETCHED" --out "$1"
}

run_dataset() {
    local name="$1" force="$2"
    if [[ "$force" == 0 ]] && is_current "$name"; then
        log "$name: up to date ($DATA/$name), skipping (use --force to redo)"
        return 0
    fi
    local t0=$SECONDS
    log "$name: fetching and converting"
    mkdir -p "$DATA"
    STAGE="$(mktemp -d "$DATA/.$name.tmp.XXXXXX")"
    local counts="$STAGE/.counts"
    "convert_$name" "$STAGE" >"$counts"
    {
        "spec_$name"
        printf '## counts\n'
        cat "$counts"
        printf '## outputs (sha256sum format)\n'
        local f
        for f in $(outputs_of "$name"); do
            [[ -f "$STAGE/$f" ]] || die "$name: converter did not write $f"
            (cd "$STAGE" && sha256sum "$f")
        done
    } >"$STAGE/SOURCE"
    rm -f "$counts"
    rm -rf "$DATA/$name"
    mv "$STAGE" "$DATA/$name"
    STAGE=""
    chmod 755 "$DATA/$name"
    sed 's/^/    /' <(sed -n '/^## counts$/,/^## outputs/p' "$DATA/$name/SOURCE" | sed '1d;$d') >&2
    log "$name: done in $((SECONDS - t0))s -> $DATA/$name"
}

# ---- main ------------------------------------------------------------------
main() {
    local force=0 names=() a
    for a in "$@"; do
        case "$a" in
            -f | --force) force=1 ;;
            -h | --help) usage; exit 0 ;;
            all) names+=("${ALL_DATASETS[@]}") ;;
            ml-100k | ml-100k-ctr | umls | wn18rr | gcide | gensim-eval) names+=("$a") ;;
            *) usage >&2; die "unknown argument '$a' (expected ml-100k, ml-100k-ctr, umls, wn18rr, gcide, gensim-eval, all or --force)" ;;
        esac
    done
    [[ ${#names[@]} -gt 0 ]] || names=("${ALL_DATASETS[@]}")
    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found"
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 8))' || die "python 3.8 or newer is needed"
    command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found (coreutils)"

    local seen=" " n
    for n in "${names[@]}"; do
        [[ "$seen" == *" $n "* ]] && continue
        seen+="$n "
        run_dataset "$n" "$force"
    done
}

main "$@"
