# Sourced by the A/B scripts (ab-bench.sh, ab-train.sh): `ab_build USAGE OLD_REV` (USAGE is
# printed when OLD_REV is missing) builds OLD_REV in a
# temporary worktree (target directory .ab-target/, reused across runs) and the working tree,
# both release, and sets `roam_old` and `roam_new` to the two `roam` binaries. The worktree and
# the copy of the old binary are removed when the calling script exits.
ab_build() {
    if [ $# -lt 2 ]; then
        echo "usage: $1" >&2
        exit 2
    fi
    local old_rev
    old_rev=$(git rev-parse --verify "$2^{commit}") || { echo "ab: no commit $2" >&2; exit 2; }
    ab_repo=$PWD
    ab_work=$(mktemp -d)
    trap 'git -C "$ab_repo" worktree remove --force "$ab_work/old" >/dev/null 2>&1 || true; rm -rf "$ab_work"' EXIT
    git worktree add --detach --quiet "$ab_work/old" "$old_rev"
    echo "ab: building old ($old_rev) and new (working tree)" >&2
    (cd "$ab_work/old" && CARGO_TARGET_DIR="$ab_repo/.ab-target" cargo build --quiet --release -p roam-cli --bin roam)
    cp "$ab_repo/.ab-target/release/roam" "$ab_work/roam-old"
    cargo build --quiet --release -p roam-cli --bin roam
    roam_old="$ab_work/roam-old"
    roam_new="$ab_repo/target/release/roam"
}
