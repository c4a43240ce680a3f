//! Round trips of typed messages through the wire format: what `encode` builds, `decode`
//! reads back; malformed shapes are refused with a `MsgError`, never a panic.

use super::*;
use crate::wire::{FLAG_SET, FLAG_SQUARES, Frame, Kind};

#[test]
fn rejects_carry_a_full_64_bit_culprit() {
    let culprit = u64::MAX - 5;
    let frame = encode::reject(
        NodeId(2),
        ReqId(9),
        RejectCode::NotOwner,
        culprit,
        &[culprit],
        &[3],
    );
    let bytes = frame.to_bytes();
    let (back, _) = crate::wire::decode(&bytes, &Default::default()).unwrap();
    assert_eq!(
        Msg::decode(&back).unwrap(),
        Msg::Reject {
            req: ReqId(9),
            code: RejectCode::NotOwner,
            culprit,
            positions: &[3],
        }
    );
}

#[test]
fn push_modes_roundtrip_and_set_with_gradient_is_refused() {
    let request = Request {
        origin: NodeId(1),
        req: ReqId(4),
        hops: 0,
        keys: &[7, 8],
        positions: &[0, 1],
        values: &[0.5, -1.5],
    };
    for mode in [
        UpdateMode::Add,
        UpdateMode::Set,
        UpdateMode::Gradient,
        UpdateMode::GradientSums,
    ] {
        let frame = encode::request(Kind::Push, &request, mode);
        let (back, _) = crate::wire::decode(&frame.to_bytes(), &Default::default()).unwrap();
        assert_eq!(Msg::decode(&back).unwrap(), Msg::Push { request, mode });
    }
    for (mode, bad) in [
        (UpdateMode::Gradient, FLAG_SET),
        (UpdateMode::GradientSums, FLAG_SET),
        (UpdateMode::Add, FLAG_SQUARES),
        (UpdateMode::Set, FLAG_SQUARES),
    ] {
        let mut frame = encode::request(Kind::Push, &request, mode);
        frame.header.flags |= bad;
        assert!(
            matches!(Msg::decode(&frame), Err(MsgError::BadShape { .. })),
            "{mode:?} with flag {bad}"
        );
    }
}

#[test]
fn requests_without_positions_do_not_decode() {
    let frame = Frame::new(Kind::Pull, NodeId(0), ReqId(1), 0, &[4, 5], 0);
    assert_eq!(
        Msg::decode(&frame),
        Err(MsgError::MissingPositions { kind: Kind::Pull })
    );
}

#[test]
fn home_transfer_roundtrips() {
    let frame = encode::home_transfer(NodeId(1), 77, 3, NodeId(0), &[10, 11], &[2, 3]);
    let (back, _) = crate::wire::decode(&frame.to_bytes(), &Default::default()).unwrap();
    assert_eq!(
        Msg::decode(&back).unwrap(),
        Msg::HomeTransfer {
            bucket: 77,
            epoch: 3,
            default_owner: NodeId(0),
            keys: &[10, 11],
            owners: &[2, 3],
        }
    );
}

#[test]
fn bucket_keys_roundtrip() {
    let frame = encode::bucket_keys(NodeId(2), 9, 4, &[3, 5], &[1.0, 2.0, 3.0]);
    let (back, _) = crate::wire::decode(&frame.to_bytes(), &Default::default()).unwrap();
    assert_eq!(
        Msg::decode(&back).unwrap(),
        Msg::BucketKeys {
            bucket: 9,
            epoch: 4,
            keys: &[3, 5],
            values: &[1.0, 2.0, 3.0],
        }
    );
}

#[test]
fn control_frames_with_a_body_do_not_decode() {
    let frame = Frame::new(Kind::Barrier, NodeId(0), ReqId(0), 1, &[4], 0);
    assert!(matches!(
        Msg::decode(&frame),
        Err(MsgError::BadShape { .. })
    ));
}

#[test]
fn keys_lost_roundtrips_with_the_lost_node() {
    let frame = encode::keys_lost(NodeId(1), NodeId(2), &[7, u64::MAX]);
    let bytes = frame.to_bytes();
    let (back, _) = crate::wire::decode(&bytes, &Default::default()).unwrap();
    assert_eq!(
        Msg::decode(&back).unwrap(),
        Msg::KeysLost {
            peer: NodeId(2),
            keys: &[7, u64::MAX]
        }
    );
}

#[test]
fn loss_flush_roundtrips_with_and_without_queued_positions() {
    for (ops, positions) in [(&[][..], &[][..]), (&[9u64, u64::MAX][..], &[3u32, 0][..])] {
        let frame = encode::loss_flush(NodeId(1), NodeId(2), 4, ops, positions);
        let bytes = frame.to_bytes();
        let (back, _) = crate::wire::decode(&bytes, &Default::default()).unwrap();
        assert_eq!(
            Msg::decode(&back).unwrap(),
            Msg::LossFlush {
                peer: NodeId(2),
                round: 4,
                ops,
                positions,
            }
        );
    }
    // Values have no meaning here: refused.
    let frame = Frame::new(Kind::LossFlush, NodeId(1), ReqId(1), 2, &[], 1);
    assert!(matches!(
        Msg::decode(&frame),
        Err(MsgError::BadShape { .. })
    ));
}
