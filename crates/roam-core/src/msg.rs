//! Typed messages: the one place that knows what each frame kind carries.
//!
//! [`Msg::decode`] turns a received [`Frame`] into a [`Msg`] that borrows the frame's keys,
//! positions and values in place (no copy), checking the structure every kind needs (positions
//! present and one per key, the counts a kind requires, node ids and codes that exist). The
//! `encode_*` functions build frames. The protocol matches on `Msg` only and never reads a
//! header's `flags`, `req` or `aux` itself, so no field has a meaning that is spread across
//! files.
//!
//! Invariants: decoding never panics and never allocates; a `Msg` that decodes satisfies the
//! structural rules documented on its variant (semantic checks — key ranges, value lengths
//! against the key space — are the receiver's, since they need its configuration).

use crate::id::{Key, NodeId, ReqId};
use crate::store::UpdateMode;
use crate::wire::{FLAG_GRADIENT, FLAG_POSITIONS, FLAG_SET, Frame, Kind, RejectCode};

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
        /// Their final deltas, concatenated.
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

impl<'a> Msg<'a> {
    /// Decodes `frame`; see the module docs for what is checked.
    pub fn decode(frame: &'a Frame) -> Result<Self, MsgError> {
        let h = &frame.header;
        let kind = h.kind;
        let keys = frame.keys();
        let values = frame.values();
        let positioned = || -> Result<&'a [u32], MsgError> {
            if h.flags & FLAG_POSITIONS == 0 || frame.positions().len() != keys.len() {
                return Err(MsgError::MissingPositions { kind });
            }
            Ok(frame.positions())
        };
        let shape = |expected: &'static str| MsgError::BadShape {
            kind,
            keys: keys.len(),
            values: values.len(),
            expected,
        };
        let node = |raw: u64| -> Result<NodeId, MsgError> {
            u32::try_from(raw)
                .map(NodeId)
                .map_err(|_| MsgError::BadNode { kind, raw })
        };
        let bucket = |raw: u64| -> Result<u32, MsgError> {
            u32::try_from(raw).map_err(|_| MsgError::BadBucket { kind, raw })
        };
        let request = || -> Result<Request<'a>, MsgError> {
            Ok(Request {
                origin: h.origin,
                req: h.req,
                hops: u32::try_from(h.aux).unwrap_or(u32::MAX),
                keys,
                positions: positioned()?,
                values,
            })
        };
        let control = |n_keys: usize| {
            if keys.len() == n_keys && values.is_empty() {
                Ok(())
            } else {
                Err(shape(match n_keys {
                    0 => "no body",
                    _ => "two keys, no values",
                }))
            }
        };
        Ok(match kind {
            Kind::Pull => {
                let request = request()?;
                if !values.is_empty() {
                    return Err(shape("no values"));
                }
                Self::Pull(request)
            }
            Kind::Push => Self::Push {
                request: request()?,
                mode: match (h.flags & FLAG_SET != 0, h.flags & FLAG_GRADIENT != 0) {
                    (false, false) => UpdateMode::Add,
                    (true, false) => UpdateMode::Set,
                    (false, true) => UpdateMode::Gradient,
                    (true, true) => return Err(shape("either set or gradient, not both")),
                },
            },
            Kind::PullReply => Self::PullReply {
                req: h.req,
                keys,
                positions: positioned()?,
                values,
            },
            Kind::PushReply => {
                let positions = positioned()?;
                if positions.is_empty() || !values.is_empty() {
                    return Err(shape("at least one key, no values"));
                }
                Self::PushReply {
                    req: h.req,
                    positions,
                }
            }
            Kind::Reject => {
                let code = (h.flags & !FLAG_POSITIONS) >> 2;
                let code = RejectCode::from_u8(code).ok_or(MsgError::UnknownRejectCode { code })?;
                let positions = if keys.is_empty() {
                    &[][..]
                } else {
                    positioned()?
                };
                Self::Reject {
                    req: h.req,
                    code,
                    culprit: h.aux,
                    positions,
                }
            }
            Kind::Barrier => {
                control(0)?;
                Self::Barrier { generation: h.aux }
            }
            Kind::BarrierRelease => {
                control(0)?;
                Self::BarrierRelease { generation: h.aux }
            }
            Kind::Heartbeat => Self::Heartbeat,
            Kind::Goodbye => Self::Goodbye,
            Kind::Localize | Kind::HandOver => {
                if !values.is_empty() {
                    return Err(shape("no values"));
                }
                let new_owner = h.origin;
                if kind == Kind::Localize {
                    Self::Localize { new_owner, keys }
                } else {
                    Self::HandOver { new_owner, keys }
                }
            }
            Kind::Transfer => Self::Transfer { keys, values },
            Kind::PeerLost => {
                control(0)?;
                Self::PeerLost { peer: node(h.aux)? }
            }
            Kind::MoveHome => {
                control(2)?;
                Self::MoveHome {
                    origin: h.origin,
                    req: h.req,
                    bucket: bucket(keys[0])?,
                    to: node(keys[1])?,
                }
            }
            Kind::HomeHandOff => {
                control(2)?;
                Self::HomeHandOff {
                    bucket: bucket(keys[0])?,
                    to: node(keys[1])?,
                    epoch: h.epoch,
                }
            }
            Kind::HomeTransfer => Self::HomeTransfer {
                bucket: bucket(h.aux)?,
                epoch: h.epoch,
                default_owner: node(h.req.0)?,
                keys,
                owners: positioned()?,
            },
            Kind::HomeReady => {
                control(0)?;
                Self::HomeReady {
                    bucket: bucket(h.aux)?,
                    epoch: h.epoch,
                }
            }
            Kind::EpochChange => {
                control(2)?;
                Self::EpochChange {
                    bucket: bucket(keys[0])?,
                    home: node(keys[1])?,
                    epoch: h.epoch,
                }
            }
            Kind::OpDone => {
                control(0)?;
                Self::OpDone { req: h.req }
            }
            Kind::Want | Kind::Offer => {
                if !values.is_empty() {
                    return Err(shape("no values"));
                }
                let (wanter, generation) = (h.origin, h.req.0);
                let need = crate::intent::Need::unpack(h.aux);
                if kind == Kind::Want {
                    Self::Want {
                        wanter,
                        generation,
                        need,
                        keys,
                    }
                } else {
                    Self::Offer {
                        wanter,
                        generation,
                        need,
                        keys,
                    }
                }
            }
            Kind::Shared | Kind::Released => {
                if !values.is_empty() {
                    return Err(shape("no values"));
                }
                Self::Decided {
                    wanter: h.origin,
                    released: kind == Kind::Released,
                    keys,
                }
            }
            Kind::Grant => Self::Grant {
                generation: h.req.0,
                keys,
                values,
            },
            Kind::ShareDeltas => Self::ShareDeltas {
                round: h.req.0,
                keys,
                values,
            },
            Kind::ShareValues => Self::ShareValues {
                ack: h.req.0,
                keys,
                values,
            },
            Kind::Leave => Self::Leave {
                generations: positioned()?,
                keys,
                values,
            },
            Kind::Revoke | Kind::Promote => {
                if !values.is_empty() {
                    return Err(shape("no values"));
                }
                let generations = positioned()?;
                if kind == Kind::Revoke {
                    Self::Revoke { generations, keys }
                } else {
                    Self::Promote { generations, keys }
                }
            }
            Kind::ReplicaDeltas => Self::ReplicaDeltas {
                round: h.req.0,
                since_ns: h.aux,
                keys,
                values,
            },
            Kind::ReplicaValues => Self::ReplicaValues {
                ack: h.req.0,
                since_ns: h.aux,
                keys,
                values,
            },
            Kind::ReplicaFlush => {
                control(0)?;
                Self::ReplicaFlush { generation: h.aux }
            }
            Kind::ReplicaFlushed => {
                control(0)?;
                Self::ReplicaFlushed { generation: h.aux }
            }
            Kind::CutQuiet => {
                control(0)?;
                Self::CutQuiet { generation: h.aux }
            }
            Kind::CutRelease => {
                control(0)?;
                Self::CutRelease { generation: h.aux }
            }
            Kind::BucketKeys => Self::BucketKeys {
                bucket: bucket(h.aux)?,
                epoch: h.epoch,
                keys,
                values,
            },
            Kind::LoadReport => {
                if values.len() != 2 * keys.len() {
                    return Err(MsgError::BadShape {
                        kind: h.kind,
                        keys: keys.len(),
                        values: values.len(),
                        expected: "two values (mean ns, answers) per peer",
                    });
                }
                if let Some(&raw) = keys.iter().find(|&&k| u32::try_from(k).is_err()) {
                    return Err(MsgError::BadNode { kind: h.kind, raw });
                }
                Self::LoadReport {
                    ops: h.aux,
                    peers: keys,
                    values,
                }
            }
            Kind::EpochAck => {
                control(0)?;
                Self::EpochAck {
                    node: h.origin,
                    bucket: bucket(h.aux)?,
                    epoch: h.epoch,
                }
            }
            Kind::Join => {
                control(0)?;
                Self::Member(Member::Join { fingerprint: h.aux })
            }
            Kind::Welcome => {
                if !values.is_empty() {
                    return Err(shape("no values"));
                }
                Self::Member(Member::Welcome {
                    table: (!keys.is_empty()).then_some(keys),
                    refusal: h.aux,
                    epoch: h.epoch,
                })
            }
            Kind::MemberChange => {
                control(2)?;
                Self::Member(Member::Change {
                    node: node(keys[0])?,
                    joined: keys[1] != 0,
                    epoch: h.epoch,
                })
            }
            Kind::MemberAck => {
                control(0)?;
                Self::Member(Member::Ack {
                    node: node(h.aux)?,
                    epoch: h.epoch,
                })
            }
            Kind::Drain => {
                control(0)?;
                Self::Member(Member::Drain {
                    origin: h.origin,
                    req: h.req,
                    node: node(h.aux)?,
                })
            }
            Kind::Evacuate => {
                control(0)?;
                Self::Member(Member::Evacuate)
            }
            Kind::Evacuated => {
                control(0)?;
                Self::Member(Member::Evacuated)
            }
            Kind::Reclaim => {
                if !values.is_empty() {
                    return Err(shape("no values"));
                }
                Self::Member(Member::Reclaim { keys })
            }
        })
    }
}

/// Builds frames; `origin` is the sender unless said otherwise. Epochs are stamped by the node
/// when a frame leaves (see `Node::poll_transmit`), except where a message names the epoch it
/// establishes.
pub mod encode {
    use super::*;

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

    /// Records moving to their new owner.
    pub fn transfer(from: NodeId, keys: &[Key], values: &[f32]) -> Frame {
        Frame::with_contents(Kind::Transfer, from, ReqId(0), 0, keys, None, values)
    }

    /// Old home → new home: the keys of `bucket` it held, and their records (concatenated).
    pub fn bucket_keys(
        from: NodeId,
        bucket: u32,
        epoch: u32,
        keys: &[Key],
        values: &[f32],
    ) -> Frame {
        let mut frame = Frame::new(
            Kind::BucketKeys,
            from,
            ReqId(0),
            u64::from(bucket),
            keys,
            values.len(),
        );
        frame.values_mut().copy_from_slice(values);
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for mode in [UpdateMode::Add, UpdateMode::Set, UpdateMode::Gradient] {
            let frame = encode::request(Kind::Push, &request, mode);
            let (back, _) = crate::wire::decode(&frame.to_bytes(), &Default::default()).unwrap();
            assert_eq!(Msg::decode(&back).unwrap(), Msg::Push { request, mode });
        }
        let mut frame = encode::request(Kind::Push, &request, UpdateMode::Gradient);
        frame.header.flags |= FLAG_SET;
        assert!(matches!(
            Msg::decode(&frame),
            Err(MsgError::BadShape { .. })
        ));
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
}
