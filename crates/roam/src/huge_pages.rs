//! Transparent huge pages for the store's value areas: the shell's chunk hint
//! (`roam_core::store::set_chunk_hint`), installed once per process when a node starts.
//!
//! Why: a restore writes the whole table into fresh memory, and on a 4 KiB-page kernel most of
//! its time is the page faults that zero that memory page by page; with 2 MiB pages the kernel
//! zeroes the same bytes in 512× fewer faults (docs/benchmarks.md, "Checkpoints and restore").
//! Training on a large table also takes fewer TLB misses. The hint is `madvise(MADV_HUGEPAGE)`
//! on each new chunk (≥ 2 MiB), so it matters only where THP is in `madvise` mode (with
//! `always` the kernel does it anyway, with `never` it ignores it). `ROAM_HUGE_PAGES=off`
//! leaves the chunks alone (to compare, or where a node's RSS must grow in 4 KiB steps).
//!
//! Invariant: the hint never fails a node: `madvise` errors (an old kernel, no THP) are ignored,
//! since the memory is correct and zeroed either way.

/// Installs the hint unless `ROAM_HUGE_PAGES` is `off` (or `0`).
pub(crate) fn install() {
    let off = std::env::var("ROAM_HUGE_PAGES").is_ok_and(|v| v == "off" || v == "0");
    if !off {
        roam_core::store::set_chunk_hint(advise);
    }
}

#[cfg(target_os = "linux")]
fn advise(start: *mut u8, bytes: usize) {
    // madvise takes whole pages: the pages the chunk touches. The first may hold the
    // allocator's header of the same mapping; flagging it is harmless.
    const PAGE: usize = 4096;
    let from = start as usize & !(PAGE - 1);
    let to = (start as usize + bytes).div_ceil(PAGE) * PAGE;
    // SAFETY: advice only, on pages of a live allocation; MADV_HUGEPAGE does not change their
    // contents.
    unsafe {
        libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_start: *mut u8, _bytes: usize) {}
