//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`) through the same checks the
//! cargo-fuzz targets run (`fuzz/src/checks.rs`, included here), on the stable toolchain, so
//! that CI keeps every input the fuzzer kept (including each finding's reproducer) passing.

#[path = "../../../fuzz/src/checks.rs"]
mod checks;

use std::path::PathBuf;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "corpus {} holds {} inputs: run scripts/fuzz.sh and commit it",
        dir.display(),
        files.len()
    );
    for file in &files {
        let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        if std::panic::catch_unwind(|| check(&bytes)).is_err() {
            panic!("fuzz input {} fails its check", file.display());
        }
    }
    println!("{target}: {} inputs replayed", files.len());
}

#[test]
fn the_frame_corpus_decodes_without_panics() {
    replay("frame", checks::frame);
}

#[test]
fn the_handshake_corpus_parses_without_panics() {
    replay("handshake", checks::handshake);
}

/// Writes the seed inputs the fuzzer starts from (run once, then `scripts/fuzz.sh SECONDS
/// --update-corpus`): a frame of every kind in every body shape (the fuzzer cannot guess the
/// magic number and the kinds' shapes from nothing), and handshake messages.
/// `cargo test --release -p roam --test fuzz_corpus -- --ignored write_seeds`
#[test]
#[ignore = "writes fuzz/corpus; run by hand"]
fn write_seeds() {
    use roam_core::directory::Directory;
    use roam_core::wire::{FLAG_SET, Frame, Kind};
    use roam_core::{NodeId, Partitioning, ReqId};
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let write = |target: &str, name: String, bytes: &[u8]| {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
    };
    let shapes: Vec<Vec<u8>> = vec![
        Frame::control(Kind::Pull, NodeId(1), ReqId(2), 3).to_bytes(),
        Frame::new(Kind::Pull, NodeId(1), ReqId(2), 0, &[5, 1], 0).to_bytes(),
        Frame::new(Kind::Pull, NodeId(1), ReqId(2), 0, &[3, 9], 3).to_bytes(),
        Frame::with_positions(
            Kind::Pull,
            NodeId(1),
            ReqId(2),
            0,
            &[4, 7, 8],
            &[0, 2, 1],
            0,
        )
        .to_bytes(),
        Frame::with_positions(Kind::Pull, NodeId(1), ReqId(2), 1, &[4, 7], &[1, 0], 4).to_bytes(),
        Frame::new(Kind::Pull, NodeId(0), ReqId(0), 0, &[0, 1, 2], 6).to_bytes(),
    ];
    for kind in 1u8..=48 {
        for (i, shape) in shapes.iter().enumerate() {
            let mut bytes = shape.clone();
            bytes[0] = kind;
            write("frame", format!("{kind:02}-{i}"), &bytes);
            if i == 4 {
                bytes[1] |= FLAG_SET | (3 << 2);
                write("frame", format!("{kind:02}-{i}-flags"), &bytes);
            }
        }
    }
    for partitioning in [Partitioning::Range, Partitioning::Hash] {
        let table = roam_core::fuzzing::directory_table(&Directory::new(64, 2, partitioning));
        let mut welcome = Frame::new(Kind::Welcome, NodeId(0), ReqId(0), 0, &table, 0);
        welcome.header.epoch = 3;
        write(
            "frame",
            format!("welcome-{partitioning:?}"),
            &welcome.to_bytes(),
        );
    }
    // A load report in its full shape: two values per peer, then the service figures.
    let mut report = Frame::new(Kind::LoadReport, NodeId(1), ReqId(0), 9, &[0, 2], 7);
    report
        .values_mut()
        .copy_from_slice(&[120e3, 12.0, 95e3, 30.0, 800.0, 2e6, 1e5]);
    write("frame", "load-report".into(), &report.to_bytes());
    // LossFlush (kind 48) as the core sends it: a round with no queued pushes (control) and
    // a last round with the receiver's queued push operations and their positions, so the
    // fuzzer starts past the decoder's LossFlush shape checks.
    use roam_core::msg::encode::loss_flush;
    let flushes = [
        loss_flush(NodeId(1), NodeId(2), 0, &[], &[]),
        loss_flush(NodeId(1), NodeId(2), 3, &[7], &[0]),
        loss_flush(NodeId(3), NodeId(0), 1, &[5, 5, 9], &[0, 4, 1]),
    ];
    for (i, frame) in flushes.iter().enumerate() {
        write("frame", format!("loss-flush-{i}"), &frame.to_bytes());
    }
    let mut stream = shapes[4].clone();
    stream.extend_from_slice(&shapes[1]);
    write("frame", "stream".into(), &stream);

    let nonce = [7u8; roam::fuzzing::NONCE_LEN];
    let mut signed = vec![1u8];
    signed.extend_from_slice(&nonce);
    signed.extend_from_slice(&3u32.to_le_bytes());
    signed.push(2);
    signed.extend_from_slice(&[9u8; roam::fuzzing::NONCE_LEN]);
    write("handshake", "signed".into(), &signed);
    let mut hello = vec![0u8];
    hello.extend_from_slice(&nonce);
    hello.extend_from_slice(&roam::fuzzing::hello_bytes(b"x", &nonce, &nonce, 1, 2));
    write("handshake", "hello".into(), &hello);
    for (i, addr) in ["127.0.0.1:7000", "[::1]:9", "10.1.2.3:65535"]
        .iter()
        .enumerate()
    {
        let mut entry = vec![0u8; 1 + roam::fuzzing::NONCE_LEN];
        entry.extend_from_slice(&roam::fuzzing::encode_entry(addr.parse().unwrap()));
        write("handshake", format!("entry-{i}"), &entry);
    }
}
