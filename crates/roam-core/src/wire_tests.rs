//! Tests of the frame codec: frames built every way agree, round-trip through bytes and share
//! a body until written; the decoder refuses oversized counts before allocating, reports a
//! truncated frame as incomplete, and never panics on random or mutated bytes (property tests).

use super::*;
use proptest::prelude::*;

/// `with_contents` writes the body that zeroing and then filling writes, for every
/// parity of key and value counts, with and without positions.
#[test]
fn with_contents_matches_a_filled_zeroed_frame() {
    for n_keys in 0..4usize {
        for n_vals in 0..5usize {
            let keys: Vec<u64> = (0..n_keys as u64).map(|k| k * 7 + 1).collect();
            let positions: Vec<u32> = (0..n_keys as u32).map(|p| p + 3).collect();
            let values: Vec<f32> = (0..n_vals).map(|v| v as f32 * 0.5 - 1.0).collect();
            let mut expected = Frame::with_positions(
                Kind::PullReply,
                NodeId(1),
                ReqId(2),
                3,
                &keys,
                &positions,
                n_vals,
            );
            expected.values_mut().copy_from_slice(&values);
            let built = Frame::with_contents(
                Kind::PullReply,
                NodeId(1),
                ReqId(2),
                3,
                &keys,
                Some(&positions),
                &values,
            );
            assert_eq!(built, expected, "{n_keys} keys, {n_vals} values");
            let mut expected = Frame::new(Kind::Transfer, NodeId(1), ReqId(0), 0, &keys, n_vals);
            expected.values_mut().copy_from_slice(&values);
            let built =
                Frame::with_contents(Kind::Transfer, NodeId(1), ReqId(0), 0, &keys, None, &values);
            assert_eq!(
                built, expected,
                "{n_keys} keys, {n_vals} values, no positions"
            );
        }
    }
}

proptest! {
    /// Values appended in pieces of any sizes give the same frame, byte for byte, as
    /// zeroed values overwritten at once.
    #[test]
    fn a_frame_filled_in_pieces_equals_one_written_at_once(
        keys in proptest::collection::vec(any::<u64>(), 0..5),
        pieces in proptest::collection::vec(
            proptest::collection::vec(-1e6f32..1e6, 0..6), 0..6),
    ) {
        let all: Vec<f32> = pieces.concat();
        let mut expected = Frame::new(Kind::ReplicaValues, NodeId(2), ReqId(5), 7, &keys, all.len());
        expected.values_mut().copy_from_slice(&all);
        let built = Frame::with_values(
            Kind::ReplicaValues, NodeId(2), ReqId(5), 7, &keys, all.len(),
            |out| pieces.iter().for_each(|p| out.extend_from_slice(p)),
        );
        prop_assert_eq!(built.values(), &all[..]);
        prop_assert_eq!(built.to_bytes(), expected.to_bytes());
    }
}

#[test]
#[should_panic(expected = "another number of values")]
fn a_frame_filled_with_too_few_values_is_refused() {
    Frame::with_values(
        Kind::ReplicaValues,
        NodeId(0),
        ReqId(0),
        0,
        &[1, 2],
        3,
        |out| out.extend_from_slice(&[1.0, 2.0]),
    );
}

#[test]
fn a_clone_shares_its_body_until_written() {
    let mut frame = Frame::new(Kind::PullReply, NodeId(1), ReqId(1), 0, &[9], 2);
    frame.values_mut().copy_from_slice(&[1.0, 2.0]);
    let mut copy = frame.clone();
    assert!(Arc::ptr_eq(&frame.body, &copy.body));
    copy.values_mut()[0] = 5.0;
    assert_eq!(frame.values(), &[1.0, 2.0]);
    assert_eq!(copy.values(), &[5.0, 2.0]);
}

#[test]
fn frame_roundtrips_through_bytes() {
    let mut frame = Frame::new(Kind::PullReply, NodeId(3), ReqId(77), 9, &[4, 5, 6], 3);
    frame.values_mut().copy_from_slice(&[1.5, -2.0, 3.25]);
    let bytes = frame.to_bytes();
    assert_eq!(bytes.len(), HEADER_LEN + 3 * 8 + 16);
    let (back, used) = decode(&bytes, &Limits::default()).unwrap();
    assert_eq!(used, bytes.len());
    assert_eq!(back, frame);
    assert_eq!(back.keys(), &[4, 5, 6]);
    assert_eq!(back.values(), &[1.5, -2.0, 3.25]);
}

#[test]
fn positions_sit_between_keys_and_values() {
    let mut frame = Frame::with_positions(
        Kind::Pull,
        NodeId(1),
        ReqId(2),
        0,
        &[10, 11, 12],
        &[4, 0, 7],
        2,
    );
    frame.values_mut().copy_from_slice(&[0.5, 1.5]);
    let (back, _) = decode(&frame.to_bytes(), &Limits::default()).unwrap();
    assert_eq!(back.keys(), &[10, 11, 12]);
    assert_eq!(back.positions(), &[4, 0, 7]);
    assert_eq!(back.values(), &[0.5, 1.5]);
    assert!(
        Frame::new(Kind::Pull, NodeId(0), ReqId(0), 0, &[1], 0)
            .positions()
            .is_empty()
    );
}

#[test]
fn oversized_counts_are_refused_before_allocation() {
    let frame = Frame::new(Kind::Push, NodeId(0), ReqId(1), 0, &[1], 1);
    let mut bytes = frame.to_bytes();
    bytes[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        decode(&bytes, &Limits::default()).unwrap_err(),
        DecodeError::TooLarge {
            what: "keys",
            count: u32::MAX,
            limit: 1 << 24
        }
    );
}

#[test]
fn truncated_frames_are_incomplete() {
    let bytes = Frame::new(Kind::Pull, NodeId(0), ReqId(1), 0, &[1, 2], 0).to_bytes();
    for cut in 0..bytes.len() {
        assert!(matches!(
            decode(&bytes[..cut], &Limits::default()),
            Err(DecodeError::Incomplete { .. })
        ));
    }
}

proptest! {
    #[test]
    fn decoder_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode(&bytes, &Limits::default());
    }

    #[test]
    fn decoder_never_panics_on_mutated_frames(
        keys in proptest::collection::vec(any::<u64>(), 0..8),
        flips in proptest::collection::vec((0usize..128, any::<u8>()), 0..8),
    ) {
        let mut bytes = Frame::new(Kind::Push, NodeId(1), ReqId(2), 3, &keys, keys.len()).to_bytes();
        for (pos, byte) in flips {
            if let Some(b) = bytes.get_mut(pos) { *b = byte; }
        }
        let limits = Limits { max_keys: 64, max_values: 64 };
        if let Ok((frame, used)) = decode(&bytes, &limits) {
            prop_assert!(used <= bytes.len());
            prop_assert!(frame.keys().len() <= 64 && frame.values().len() <= 64);
        }
    }
}
