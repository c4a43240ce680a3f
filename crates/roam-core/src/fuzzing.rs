//! Entry points for the fuzz targets (`fuzz/`, and their corpus replay test in
//! `crates/roam/tests/fuzz_corpus.rs`) only: internals that a peer's bytes reach but that are
//! not roam's API. Hidden from the docs; no stability promise.

use crate::directory::Directory;

/// The directory's table as a joining node receives it in a `Welcome` frame.
pub fn directory_table(dir: &Directory) -> Vec<u64> {
    dir.to_words()
}

/// Applies a `Welcome` frame's table as a joining node does (on error nothing changes).
pub fn apply_directory_table(
    dir: &mut Directory,
    epoch: u32,
    words: &[u64],
) -> Result<(), &'static str> {
    dir.restore_words(epoch, words)
}
