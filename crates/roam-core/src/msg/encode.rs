//! Builds frames; `origin` is the sender unless said otherwise. Epochs are stamped by the node
//! when a frame leaves (see `Node::poll_transmit`), except where a message names the epoch it
//! establishes.
//!
//! Invariants: each builder writes the shape [`Msg::decode`](super::Msg::decode) checks for
//! its kind (the round trips in `tests.rs` check it); nothing here decides protocol.

use super::Request;
use crate::id::{Key, NodeId, ReqId};
use crate::store::UpdateMode;
use crate::wire::{FLAG_GRADIENT, FLAG_SET, FLAG_SQUARES, Frame, Kind, RejectCode};

/// A request (pull, or push with its values and `mode`).
pub fn request(kind: Kind, request: &Request<'_>, mode: UpdateMode) -> Frame {
    let mut frame = Frame::with_contents(
        kind,
        request.origin,
        request.req,
        u64::from(request.hops),
        request.keys,
        Some(request.positions),
        request.values,
    );
    frame.header.flags |= match mode {
        UpdateMode::Add => 0,
        UpdateMode::Set => FLAG_SET,
        UpdateMode::Gradient => FLAG_GRADIENT,
        UpdateMode::GradientSums => FLAG_GRADIENT | FLAG_SQUARES,
    };
    frame
}

/// An answer to a pull (values given) or a push (values empty).
pub fn reply(
    kind: Kind,
    from: NodeId,
    req: ReqId,
    keys: &[Key],
    positions: &[u32],
    values: &[f32],
) -> Frame {
    Frame::with_contents(kind, from, req, 0, keys, Some(positions), values)
}

/// Refuses `positions` of `req` (all of it when empty) because of `culprit`.
pub fn reject(
    from: NodeId,
    req: ReqId,
    code: RejectCode,
    culprit: Key,
    keys: &[Key],
    positions: &[u32],
) -> Frame {
    let mut frame = if keys.is_empty() {
        Frame::new(Kind::Reject, from, req, culprit, &[], 0)
    } else {
        Frame::with_positions(Kind::Reject, from, req, culprit, keys, positions, 0)
    };
    frame.header.flags |= (code as u8) << 2;
    frame
}

/// A frame with no body and one word of meaning (barrier generations, peer ids).
pub fn control(kind: Kind, from: NodeId, word: u64) -> Frame {
    Frame::control(kind, from, ReqId(0), word)
}

/// Keys on their way in a relocation (`Localize`, `HandOver`: `owner` is the new owner).
pub fn keys(kind: Kind, owner: NodeId, keys: &[Key]) -> Frame {
    Frame::new(kind, owner, ReqId(0), 0, keys, 0)
}

/// `keys` were lost with `peer`; `from` is the sender.
pub fn keys_lost(from: NodeId, peer: NodeId, keys: &[Key]) -> Frame {
    Frame::new(Kind::KeysLost, from, ReqId(0), u64::from(peer.0), keys, 0)
}

/// Round `round` of the flush after `peer` was lost, with the receiver's push operations
/// (`ops`, one per position) queued at the sender.
pub fn loss_flush(from: NodeId, peer: NodeId, round: u64, ops: &[u64], positions: &[u32]) -> Frame {
    let (req, aux) = (ReqId(round), u64::from(peer.0));
    if ops.is_empty() {
        Frame::new(Kind::LossFlush, from, req, aux, &[], 0)
    } else {
        Frame::with_positions(Kind::LossFlush, from, req, aux, ops, positions, 0)
    }
}

/// Records moving to their new owner.
pub fn transfer(from: NodeId, keys: &[Key], values: &[f32]) -> Frame {
    Frame::with_contents(Kind::Transfer, from, ReqId(0), 0, keys, None, values)
}

/// Old home → new home: the keys of `bucket` it held, and their records (concatenated).
pub fn bucket_keys(from: NodeId, bucket: u32, epoch: u32, keys: &[Key], values: &[f32]) -> Frame {
    let mut frame = Frame::with_contents(
        Kind::BucketKeys,
        from,
        ReqId(0),
        u64::from(bucket),
        keys,
        None,
        values,
    );
    frame.header.epoch = epoch;
    frame
}

/// Asks the coordinator to move `bucket`'s home to `to`.
pub fn move_home(origin: NodeId, req: ReqId, bucket: u32, to: NodeId) -> Frame {
    Frame::new(
        Kind::MoveHome,
        origin,
        req,
        0,
        &[u64::from(bucket), u64::from(to.0)],
        0,
    )
}

/// Coordinator → home: hand `bucket` to `to` at `epoch`.
pub fn home_hand_off(from: NodeId, bucket: u32, to: NodeId, epoch: u32) -> Frame {
    let mut frame = Frame::new(
        Kind::HomeHandOff,
        from,
        ReqId(0),
        0,
        &[u64::from(bucket), u64::from(to.0)],
        0,
    );
    frame.header.epoch = epoch;
    frame
}

/// Old home → new home: the bucket's owner records.
pub fn home_transfer(
    from: NodeId,
    bucket: u32,
    epoch: u32,
    default_owner: NodeId,
    keys: &[Key],
    owners: &[u32],
) -> Frame {
    let mut frame = Frame::with_positions(
        Kind::HomeTransfer,
        from,
        ReqId(u64::from(default_owner.0)),
        u64::from(bucket),
        keys,
        owners,
        0,
    );
    frame.header.epoch = epoch;
    frame
}

/// New home → coordinator: `bucket`'s records are installed.
pub fn home_ready(from: NodeId, bucket: u32, epoch: u32) -> Frame {
    let mut frame = Frame::control(Kind::HomeReady, from, ReqId(0), u64::from(bucket));
    frame.header.epoch = epoch;
    frame
}

/// Coordinator → every node: `bucket`'s home is `home` from `epoch` on.
pub fn epoch_change(from: NodeId, bucket: u32, home: NodeId, epoch: u32) -> Frame {
    let mut frame = Frame::new(
        Kind::EpochChange,
        from,
        ReqId(0),
        0,
        &[u64::from(bucket), u64::from(home.0)],
        0,
    );
    frame.header.epoch = epoch;
    frame
}

/// `node` switched `bucket` to the table of `epoch`.
pub fn epoch_ack(node: NodeId, bucket: u32, epoch: u32) -> Frame {
    let mut frame = Frame::control(Kind::EpochAck, node, ReqId(0), u64::from(bucket));
    frame.header.epoch = epoch;
    frame
}

/// The receiver's control operation `req` completed.
pub fn op_done(from: NodeId, req: ReqId) -> Frame {
    Frame::control(Kind::OpDone, from, req, 0)
}

/// Coordinator → joining node: the table to join with at `epoch`.
pub fn welcome(from: NodeId, epoch: u32, table: &[u64]) -> Frame {
    let mut frame = Frame::new(Kind::Welcome, from, ReqId(0), 0, table, 0);
    frame.header.epoch = epoch;
    frame
}

/// Coordinator → members: `node` joined or left at `epoch`.
pub fn member_change(from: NodeId, node: NodeId, joined: bool, epoch: u32) -> Frame {
    let words = [u64::from(node.0), u64::from(joined)];
    let mut frame = Frame::new(Kind::MemberChange, from, ReqId(0), 0, &words, 0);
    frame.header.epoch = epoch;
    frame
}

/// `from` applied the change of `node` at `epoch`.
pub fn member_ack(from: NodeId, node: NodeId, epoch: u32) -> Frame {
    let mut frame = Frame::control(Kind::MemberAck, from, ReqId(0), u64::from(node.0));
    frame.header.epoch = epoch;
    frame
}
