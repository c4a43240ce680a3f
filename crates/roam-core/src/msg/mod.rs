//! Typed messages: the one place that knows what each frame kind carries.
//!
//! [`Msg::decode`] turns a received [`Frame`](crate::wire::Frame) into a [`Msg`] that borrows the frame's keys,
//! positions and values in place (no copy), checking the structure every kind needs (positions
//! present and one per key, the counts a kind requires, node ids and codes that exist). The
//! `encode_*` functions build frames. The protocol matches on `Msg` only and never reads a
//! header's `flags`, `req` or `aux` itself, so no field has a meaning that is spread across
//! files.
//!
//! Invariants: decoding never panics and never allocates; a `Msg` that decodes satisfies the
//! structural rules documented on its variant (semantic checks — key ranges, value lengths
//! against the key space — are the receiver's, since they need its configuration).
//!
//! Files: this one holds the message types; `decode.rs` turns a frame into a [`Msg`],
//! `encode.rs` builds frames.

mod decode;
pub mod encode;
#[cfg(test)]
mod tests;

use crate::id::{Key, NodeId, ReqId};
use crate::store::UpdateMode;
use crate::wire::{Kind, RejectCode};

/// A request to read or update keys, as it travels requester → (home →) owner.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request<'a> {
    /// The node whose worker issued the operation; every answer goes straight to it.
    pub origin: NodeId,
    /// The operation's id on `origin`.
    pub req: ReqId,
    /// How many times the request was forwarded so far.
    pub hops: u32,
    /// The keys.
    pub keys: &'a [Key],
    /// Each key's position in the original operation (one per key).
    pub positions: &'a [u32],
    /// Pushes: the updates, the keys' lengths concatenated; pulls: empty.
    pub values: &'a [f32],
}

/// A decoded frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Msg<'a> {
    /// Read the keys; answered by [`Msg::PullReply`] from each node that holds some.
    Pull(Request<'a>),
    /// Apply the updates; answered by [`Msg::PushReply`].
    Push {
        /// The request.
        request: Request<'a>,
        /// Add, overwrite, or apply as gradients.
        mode: UpdateMode,
    },
    /// Values of some keys of pull `req`, in the order of `keys`.
    PullReply {
        /// The pull on the receiver.
        req: ReqId,
        /// The answered keys.
        keys: &'a [Key],
        /// Their positions in the pull.
        positions: &'a [u32],
        /// Their values, concatenated.
        values: &'a [f32],
    },
    /// Positions `positions` of push `req` were applied.
    PushReply {
        /// The push on the receiver.
        req: ReqId,
        /// The applied positions (never empty).
        positions: &'a [u32],
    },
    /// The sender refused positions `positions` of `req` (all of it if empty).
    Reject {
        /// The operation on the receiver.
        req: ReqId,
        /// Why.
        code: RejectCode,
        /// The key that caused it (all 64 bits).
        culprit: Key,
        /// The refused positions.
        positions: &'a [u32],
    },
    /// A node's workers all reached barrier `generation` (to the coordinator).
    Barrier {
        /// The barrier's generation.
        generation: u64,
    },
    /// Every node reached barrier `generation` (from the coordinator).
    BarrierRelease {
        /// The barrier's generation.
        generation: u64,
    },
    /// Keeps an idle link alive for failure detection.
    Heartbeat,
    /// The sender shuts down cleanly and sends nothing more.
    Goodbye,
    /// At a key's home: make `new_owner` the keys' owner.
    Localize {
        /// The node that wants the keys (may differ from the sender if a home forwarded it).
        new_owner: NodeId,
        /// The keys.
        keys: &'a [Key],
    },
    /// The keys were lost with `peer` (held by it, or on their way from it): stop waiting for
    /// them in a relocation, and fail their accesses naming `peer`.
    KeysLost {
        /// The lost node.
        peer: NodeId,
        /// The keys.
        keys: &'a [Key],
    },
    /// At a key's owner: send the keys' records to `new_owner`.
    HandOver {
        /// The keys' next owner.
        new_owner: NodeId,
        /// The keys.
        keys: &'a [Key],
    },
    /// The keys' records, moving to the receiver, their new owner.
    Transfer {
        /// The keys.
        keys: &'a [Key],
        /// Their records, concatenated.
        values: &'a [f32],
    },
    /// The sender lost node `peer`; the receiver must treat it as lost too.
    PeerLost {
        /// The lost node.
        peer: NodeId,
    },
    /// Round `round` of the flush after `peer` was lost (`peer_loss.rs`).
    LossFlush {
        /// The lost node.
        peer: NodeId,
        /// The round (1 and up; the loss notice is round 0).
        round: u64,
        /// The receiver's push operations with positions queued at the sender (last round).
        ops: &'a [u64],
        /// Their positions, one per entry of `ops`.
        positions: &'a [u32],
    },
    /// At the coordinator: move `bucket`'s home to `to`; answer [`Msg::OpDone`] to `origin`.
    MoveHome {
        /// The node whose worker asked.
        origin: NodeId,
        /// Its operation.
        req: ReqId,
        /// The bucket.
        bucket: u32,
        /// Its next home.
        to: NodeId,
    },
    /// At a bucket's home, from the coordinator: hand the bucket over to `to` at `epoch`.
    HomeHandOff {
        /// The bucket.
        bucket: u32,
        /// Its next home.
        to: NodeId,
        /// The epoch the move takes effect in.
        epoch: u32,
    },
    /// At a bucket's new home: the owner records of the keys of `bucket`.
    HomeTransfer {
        /// The bucket.
        bucket: u32,
        /// The epoch the move takes effect in.
        epoch: u32,
        /// The owner of every key of the bucket that has no record here.
        default_owner: NodeId,
        /// Keys with an owner other than `default_owner`.
        keys: &'a [Key],
        /// Their owners (node ids), one per key.
        owners: &'a [u32],
    },
    /// At the coordinator: the new home of `bucket` has installed its records.
    HomeReady {
        /// The bucket.
        bucket: u32,
        /// The move's epoch.
        epoch: u32,
    },
    /// At a bucket's new home, right after [`Msg::HomeTransfer`]: the keys the old home held
    /// (a move under static allocation carries them along).
    BucketKeys {
        /// The bucket.
        bucket: u32,
        /// The move's epoch.
        epoch: u32,
        /// The keys.
        keys: &'a [Key],
        /// Their records, concatenated.
        values: &'a [f32],
    },
    /// At a key's home: `wanter` will access the keys soon (its request `generation`).
    Want {
        /// The node that wants the keys (may differ from the sender if a home forwarded it).
        wanter: NodeId,
        /// The request's generation (echoed in the grant).
        generation: u64,
        /// When the wanter needs the keys, from when it sent the request.
        need: crate::intent::Need,
        /// The keys.
        keys: &'a [Key],
    },
    /// At a key's owner, from its home: share the keys with `wanter`, or give them to it.
    Offer {
        /// The node that wants the keys.
        wanter: NodeId,
        /// Its request's generation.
        generation: u64,
        /// When the wanter needs the keys, from when the home sent the offer.
        need: crate::intent::Need,
        /// The keys.
        keys: &'a [Key],
    },
    /// At a key's home, from its owner: the keys were shared with `wanter` or, with
    /// `released`, given to it.
    Decided {
        /// The node that wanted the keys.
        wanter: NodeId,
        /// Whether `wanter` is the keys' new owner.
        released: bool,
        /// The keys.
        keys: &'a [Key],
    },
    /// At a node that wanted the keys, from their owner: replicas of them.
    Grant {
        /// The want's generation.
        generation: u64,
        /// The keys.
        keys: &'a [Key],
        /// Their values, concatenated.
        values: &'a [f32],
    },
    /// At a shared key's owner: a member's pending deltas of its sync round `round`.
    ShareDeltas {
        /// The sender's round.
        round: u64,
        /// The keys.
        keys: &'a [Key],
        /// Their deltas, concatenated.
        values: &'a [f32],
    },
    /// At a member, from a shared key's owner: values that include its rounds up to `ack`.
    ShareValues {
        /// The receiver's last round applied at the owner.
        ack: u64,
        /// The keys.
        keys: &'a [Key],
        /// Their values, concatenated.
        values: &'a [f32],
    },
    /// At a shared key's owner: a member dropped its replicas.
    Leave {
        /// The generation of each replica (the grant's).
        generations: &'a [u32],
        /// The keys.
        keys: &'a [Key],
        /// Their final deltas, concatenated; empty when all are zero (a replica only pushed
        /// gradients to, whose sums go ahead in their own frame, changed nothing).
        values: &'a [f32],
    },
    /// At a member, from a shared key's owner that no longer wants the keys: take them over.
    Promote {
        /// The generation of each replica.
        generations: &'a [u32],
        /// The keys.
        keys: &'a [Key],
    },
    /// At a member, from a shared key's owner: drop these replicas.
    Revoke {
        /// The generation of each replica.
        generations: &'a [u32],
        /// The keys.
        keys: &'a [Key],
    },
    /// At a replicated key's hub: a node's pending deltas of its sync round `round`.
    ReplicaDeltas {
        /// The sender's round.
        round: u64,
        /// When the deltas started accumulating (ns; the oldest a push in them can be).
        since_ns: u64,
        /// The keys.
        keys: &'a [Key],
        /// Their deltas, concatenated.
        values: &'a [f32],
    },
    /// From a replicated key's hub: primaries that include the receiver's rounds up to `ack`.
    ReplicaValues {
        /// The receiver's last round applied at the hub.
        ack: u64,
        /// The oldest origin (ns) of the changes they include.
        since_ns: u64,
        /// The keys.
        keys: &'a [Key],
        /// Their primaries, concatenated.
        values: &'a [f32],
    },
    /// At every hub: the sender flushed its deltas for `sync_replicas` `generation`.
    ReplicaFlush {
        /// The collective's generation.
        generation: u64,
    },
    /// From a hub: every node's flush of `generation` is applied and broadcast.
    ReplicaFlushed {
        /// The collective's generation.
        generation: u64,
    },
    /// Checkpoint cut: the sender is flushed and quiet (to the coordinator).
    CutQuiet {
        /// The cut's generation.
        generation: u64,
    },
    /// Checkpoint cut: every member is quiet (from the coordinator).
    CutRelease {
        /// The cut's generation.
        generation: u64,
    },
    /// A member's view of its peers' response times (see `load.rs`).
    LoadReport {
        /// Operations of the sender's workers that completed through the protocol in the
        /// period (its share of the job's throughput).
        ops: u64,
        /// The peers' ids.
        peers: &'a [Key],
        /// Mean response time (ns) and answers, per peer.
        values: &'a [f32],
        /// The sender's serving in the period: keys served, busy ns, queueing ns
        /// (`load_service.rs`; [`SERVICE_VALUES`](crate::load_service::SERVICE_VALUES) values).
        service: &'a [f32],
    },
    /// At every node: from `epoch` on, `bucket`'s home is `home`.
    EpochChange {
        /// The bucket.
        bucket: u32,
        /// Its home.
        home: NodeId,
        /// The epoch of the change.
        epoch: u32,
    },
    /// The receiver's control operation `req` completed.
    OpDone {
        /// The operation.
        req: ReqId,
    },
    /// A membership change (see [`Member`]).
    Member(Member<'a>),
    /// `node` routes `bucket` by the table of `epoch` (it sent everything it routed by the old
    /// one before this). Sent to the old home, which passes it on to the new one.
    EpochAck {
        /// The node that switched.
        node: NodeId,
        /// The bucket.
        bucket: u32,
        /// The epoch it switched to.
        epoch: u32,
    },
}

/// Messages of membership changes (see `membership.rs`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Member<'a> {
    /// From a node that is not yet a member: admit me as a server.
    Join {
        /// The fingerprint of the joiner's configuration (must equal the coordinator's).
        fingerprint: u64,
    },
    /// The directory to join with (`Directory::to_words`), or `None` and a refusal code.
    Welcome {
        /// The table, if admitted.
        table: Option<&'a [u64]>,
        /// Why not, if refused.
        refusal: u64,
        /// The epoch of the join.
        epoch: u32,
    },
    /// `node` joined (as a server) or left, at `epoch`.
    Change {
        /// The node.
        node: NodeId,
        /// Joined, or left.
        joined: bool,
        /// The epoch of the change.
        epoch: u32,
    },
    /// The sender applied the change of `node` at `epoch`.
    Ack {
        /// The node that joined or left.
        node: NodeId,
        /// The epoch of the change.
        epoch: u32,
    },
    /// At the coordinator: drain `node`; answer `req` of `origin`.
    Drain {
        /// The requester.
        origin: NodeId,
        /// Its operation.
        req: ReqId,
        /// The node to drain.
        node: NodeId,
    },
    /// Hand every key held here to its home.
    Evacuate,
    /// The sender holds no key any more.
    Evacuated,
    /// At a key's home: take these keys.
    Reclaim {
        /// The keys.
        keys: &'a [Key],
    },
}

/// Why a frame does not decode as the message its kind names.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum MsgError {
    /// A request or answer lacks the positions that say where each key belongs.
    #[error("{kind:?} frame without one position per key")]
    MissingPositions {
        /// The frame's kind.
        kind: Kind,
    },
    /// The frame has the wrong number of keys or values for its kind.
    #[error("{kind:?} frame with {keys} keys and {values} values: {expected}")]
    BadShape {
        /// The frame's kind.
        kind: Kind,
        /// Keys found.
        keys: usize,
        /// Values found.
        values: usize,
        /// What the kind needs.
        expected: &'static str,
    },
    /// A node id field is not a `u32` node id.
    #[error("{kind:?} frame names node {raw}, which is no node id")]
    BadNode {
        /// The frame's kind.
        kind: Kind,
        /// The raw field.
        raw: u64,
    },
    /// A bucket field does not fit a bucket number.
    #[error("{kind:?} frame names bucket {raw}, which is no bucket number")]
    BadBucket {
        /// The frame's kind.
        kind: Kind,
        /// The raw field.
        raw: u64,
    },
    /// A reject frame with a code this version does not know.
    #[error("reject with unknown code {code}")]
    UnknownRejectCode {
        /// The code.
        code: u8,
    },
}
