//! [`Msg::decode`]: from a received frame to a typed message that borrows the frame's keys,
//! positions and values in place.
//!
//! Invariants: never panics, never allocates; every structural rule a variant documents is
//! checked here, so the protocol can match on the variant and trust its shape.

use super::{Member, Msg, MsgError, Request};
use crate::id::NodeId;
use crate::load_service::SERVICE_VALUES;
use crate::store::UpdateMode;
use crate::wire::{FLAG_GRADIENT, FLAG_POSITIONS, FLAG_SET, FLAG_SQUARES, Frame, Kind, RejectCode};

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
                mode: match (
                    h.flags & FLAG_SET != 0,
                    h.flags & FLAG_GRADIENT != 0,
                    h.flags & FLAG_SQUARES != 0,
                ) {
                    (false, false, false) => UpdateMode::Add,
                    (true, false, false) => UpdateMode::Set,
                    (false, true, false) => UpdateMode::Gradient,
                    (false, true, true) => UpdateMode::GradientSums,
                    (true, true, _) => return Err(shape("either set or gradient, not both")),
                    (_, false, true) => return Err(shape("squares only with gradients")),
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
            Kind::KeysLost => {
                if !values.is_empty() {
                    return Err(shape("no values"));
                }
                Self::KeysLost {
                    peer: node(h.aux)?,
                    keys,
                }
            }
            Kind::PeerLost => {
                control(0)?;
                Self::PeerLost { peer: node(h.aux)? }
            }
            Kind::LossFlush => {
                if !values.is_empty() {
                    return Err(shape("no values"));
                }
                Self::LossFlush {
                    peer: node(h.aux)?,
                    round: h.req.0,
                    ops: keys,
                    positions: if keys.is_empty() {
                        &[][..]
                    } else {
                        positioned()?
                    },
                }
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
                if values.len() != 2 * keys.len() + SERVICE_VALUES {
                    return Err(MsgError::BadShape {
                        kind: h.kind,
                        keys: keys.len(),
                        values: values.len(),
                        expected: "two values (mean ns, answers) per peer, then three (keys \
                                   served, busy ns, queueing ns)",
                    });
                }
                let (values, service) = values.split_at(2 * keys.len());
                if let Some(&raw) = keys.iter().find(|&&k| u32::try_from(k).is_err()) {
                    return Err(MsgError::BadNode { kind: h.kind, raw });
                }
                Self::LoadReport {
                    ops: h.aux,
                    peers: keys,
                    values,
                    service,
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
