//! The binary frame format shared by every transport.
//!
//! A frame is a fixed 40-byte little-endian header followed by a body of 8-byte words: the
//! keys (`u64`), then the values (`f32`, padded to a whole word). Bodies are held in `Vec<u64>`
//! so that both arrays can be viewed in place with `bytemuck` casts, without copying.
//!
//! ```text
//! 0      1      2       4        8        16       20       24     32      36         40
//! | kind | flags| magic | origin | req    | n_keys | n_vals | aux  | epoch | reserved | keys.. | values.. |
//! ```
//!
//! `epoch` is the sender's directory epoch when it routed the frame (see `directory.rs`): a
//! receiver with a different table still routes by its own, so a stale epoch costs a hop, never a
//! lost or doubled request. What `flags`, `req` and `aux` mean per kind is known only to the
//! typed codec in `msg/`; the protocol never reads them directly.
//!
//! Invariants: [`Header::decode`] bounds `n_keys` and `n_vals` by [`Limits`] *before* anything is
//! allocated, and no function here panics on arbitrary input bytes.

use std::sync::Arc;

use crate::id::{NodeId, ReqId};

/// Header size in bytes.
pub const HEADER_LEN: usize = 40;
/// Identifies roam frames (and their format version) on the wire.
pub const MAGIC: u16 = 0x5232;

#[cfg(not(target_endian = "little"))]
compile_error!("roam's wire format assumes a little-endian target");

/// What a frame means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Read the keys; answered by [`Kind::PullReply`].
    Pull = 1,
    /// Values of a [`Kind::Pull`], in the request's key order.
    PullReply = 2,
    /// Apply values to the keys (add, overwrite with [`FLAG_SET`], or apply as gradients with
    /// [`FLAG_GRADIENT`], as aggregates of gradients, twice the keys' lengths, with
    /// [`FLAG_SQUARES`] too); answered by
    /// [`Kind::PushReply`].
    Push = 3,
    /// Acknowledges a [`Kind::Push`]; `aux` holds the number of keys applied.
    PushReply = 4,
    /// A node's workers all reached barrier `aux`; sent to the coordinator.
    Barrier = 5,
    /// Every node reached barrier `aux`; sent by the coordinator.
    BarrierRelease = 6,
    /// Keeps an idle link alive for failure detection.
    Heartbeat = 7,
    /// The request `req` was refused; `aux` is a [`RejectCode`], the keys name the culprit.
    Reject = 8,
    /// The sender is shutting down cleanly and sends nothing more on this link.
    Goodbye = 9,
    /// Make the origin node the owner of the keys; sent by the requester to the keys' home.
    Localize = 10,
    /// Send the keys' values to the origin node, their new owner; sent by the home node to the
    /// previous owner.
    HandOver = 11,
    /// The keys' values, moving to their new owner (the receiver).
    Transfer = 12,
    /// The sender lost its connection to node `aux`; the receiver must treat it as lost too.
    PeerLost = 13,
    /// Asks the coordinator to move a bucket's home to another node.
    MoveHome = 14,
    /// From the coordinator to a bucket's home: hand the bucket's placement records over.
    HomeHandOff = 15,
    /// A bucket's placement records, from its old home to its new one.
    HomeTransfer = 16,
    /// From a bucket's new home to the coordinator: the records are installed.
    HomeReady = 17,
    /// From the coordinator to every node: a bucket has a new home, from this epoch on.
    EpochChange = 18,
    /// A control operation (such as a home move) of the receiver completed.
    OpDone = 19,
    /// A node routes by a bucket's new home; sent to the old home, which passes it on.
    EpochAck = 20,
    /// A node's replica deltas of one sync round, to the keys' hub (`req`: round, `aux`: origin).
    ReplicaDeltas = 21,
    /// A hub's primaries (`req`: the receiver's acknowledged round, `aux`: oldest origin).
    ReplicaValues = 22,
    /// `sync_replicas`: the sender flushed its deltas (`aux`: generation).
    ReplicaFlush = 23,
    /// `sync_replicas`: the hub broadcast every node's flushed deltas (`aux`: generation).
    ReplicaFlushed = 24,
    /// A node's view of its peers' response times (keys: peer ids; values: mean ns and answer
    /// count per peer), every load-report period.
    LoadReport = 25,
    /// A bucket's keys and their records, from its old home to its new one, when the move
    /// carries them (static allocation); `aux`: the bucket.
    BucketKeys = 26,
    /// From a node that is not yet a member, to the coordinator: admit me as a server
    /// (`aux`: the fingerprint of my configuration).
    Join = 27,
    /// Coordinator → joining node: the directory it joins with (keys: see
    /// `Directory::to_words`), or with no keys a refusal (`aux`: why).
    Welcome = 28,
    /// Coordinator → members: keys `[node, joined]`, at the frame's epoch.
    MemberChange = 29,
    /// A member applied the member change of the frame's epoch (`aux`: the node that changed);
    /// to the coordinator, and to a leaving node.
    MemberAck = 30,
    /// To the coordinator: drain node `aux` (move its buckets and keys away, then remove it);
    /// answered by `OpDone` or `Reject`.
    Drain = 31,
    /// Coordinator → a draining node (dynamic allocation): hand every key you hold to its home.
    Evacuate = 32,
    /// A draining node → the coordinator: it holds no key any more.
    Evacuated = 33,
    /// A leaving node → a key's home: take these keys (the home relocates them to itself).
    Reclaim = 34,
    /// Intent: the origin will access the keys soon; to their home (`req`: the request's
    /// generation). The home asks the owner to share or give them ([`Kind::Offer`]).
    Want = 35,
    /// A key's home → its owner: share the keys with the origin, or give them to it.
    Offer = 36,
    /// Owner → home: the keys were shared with the origin (the owner keeps them).
    Shared = 37,
    /// Owner → home: the keys went to the origin, their new owner.
    Released = 38,
    /// Owner → a node that wanted the keys: replicas (`req`: the want's generation).
    Grant = 39,
    /// A member's replica deltas of one sync round, to the keys' owner (`req`: round).
    ShareDeltas = 40,
    /// An owner's values of shared keys (`req`: the receiver's last round applied).
    ShareValues = 41,
    /// A member drops its replicas (positions: generations; values: final deltas, or none
    /// when every one is zero).
    Leave = 42,
    /// An owner asks members to drop their replicas (positions: generations).
    Revoke = 43,
    /// An owner no intent wants any more offers its sole, busy sharer the keys (positions:
    /// generations): the sharer, if it still wants them, drops its replica and localizes.
    Promote = 44,
    /// Checkpoint cut: the sender is flushed and nothing moves towards it (`aux`: the cut's
    /// generation); to the coordinator.
    CutQuiet = 45,
    /// Checkpoint cut: every member is quiet (`aux`: generation); from the coordinator.
    CutRelease = 46,
    /// Keys a lost peer held or was sending (`aux`: the lost peer): to a node waiting for them
    /// in a relocation, which stops waiting and fails their accesses naming the peer.
    KeysLost = 47,
    /// A round of the flush after node `aux` was lost (`req`: the round; `peer_loss.rs`): the
    /// sender got the previous round from every survivor. The last round to an origin carries
    /// the origin's push operations queued at the sender (keys: operations, positions: their
    /// positions), which are answered later.
    LossFlush = 48,
}

impl Kind {
    /// The kind a header's first byte names, if any.
    pub fn from_u8(byte: u8) -> Option<Self> {
        Some(match byte {
            1 => Self::Pull,
            2 => Self::PullReply,
            3 => Self::Push,
            4 => Self::PushReply,
            5 => Self::Barrier,
            6 => Self::BarrierRelease,
            7 => Self::Heartbeat,
            8 => Self::Reject,
            9 => Self::Goodbye,
            10 => Self::Localize,
            11 => Self::HandOver,
            12 => Self::Transfer,
            13 => Self::PeerLost,
            14 => Self::MoveHome,
            15 => Self::HomeHandOff,
            16 => Self::HomeTransfer,
            17 => Self::HomeReady,
            18 => Self::EpochChange,
            19 => Self::OpDone,
            20 => Self::EpochAck,
            21 => Self::ReplicaDeltas,
            22 => Self::ReplicaValues,
            23 => Self::ReplicaFlush,
            24 => Self::ReplicaFlushed,
            25 => Self::LoadReport,
            26 => Self::BucketKeys,
            27 => Self::Join,
            28 => Self::Welcome,
            29 => Self::MemberChange,
            30 => Self::MemberAck,
            31 => Self::Drain,
            32 => Self::Evacuate,
            33 => Self::Evacuated,
            34 => Self::Reclaim,
            35 => Self::Want,
            36 => Self::Offer,
            37 => Self::Shared,
            38 => Self::Released,
            39 => Self::Grant,
            40 => Self::ShareDeltas,
            41 => Self::ShareValues,
            42 => Self::Leave,
            43 => Self::Revoke,
            44 => Self::Promote,
            45 => Self::CutQuiet,
            46 => Self::CutRelease,
            47 => Self::KeysLost,
            48 => Self::LossFlush,
            _ => return None,
        })
    }
}

/// [`Kind::Push`] flag: overwrite instead of add.
pub const FLAG_SET: u8 = 1;
/// [`Kind::Push`] flag: the values are gradients for the key space's optimizer (never together
/// with [`FLAG_SET`]).
pub const FLAG_GRADIENT: u8 = 4;
/// [`Kind::Push`] flag, with [`FLAG_GRADIENT`]: each key's values are an aggregate of
/// gradients, their sum then the sum of their squares (twice the key's length).
pub const FLAG_SQUARES: u8 = 8;
/// The body holds one `u32` position per key after the keys: the key's index in the operation
/// that first issued it, so that partial answers from several nodes can be put in place.
pub const FLAG_POSITIONS: u8 = 2;

/// Why a peer refused a request (carried in a [`Kind::Reject`] frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RejectCode {
    /// A key was out of range (the first key of the frame names it).
    KeyOutOfRange = 1,
    /// The values did not match the keys' lengths.
    LengthMismatch = 2,
    /// The receiving node could not route a key it was asked for (the culprit names it).
    NotOwner = 3,
    /// The frame's positions are missing or inconsistent with its keys.
    Malformed = 4,
    /// The request was forwarded too many times without reaching the key's owner.
    RoutingLoop = 5,
    /// A home move named no bucket or no member (the culprit is the bucket).
    InvalidMove = 6,
    /// A drain was refused (the culprit: the node in its low 32 bits, the
    /// `membership::DrainRefusal` code above them).
    CannotDrain = 7,
    /// Gradients the receiver cannot apply to the culprit key: it has no optimizer, or the key
    /// is replicated under an optimizer with per-key state.
    GradientRefused = 8,
    /// The keys (the frame's) needed a lost node, their owner or the next hop towards it (the
    /// culprit is that node's id).
    PeerLost = 9,
}

impl RejectCode {
    /// Decodes a code; unknown codes are reported as `None`.
    pub fn from_u8(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::KeyOutOfRange,
            2 => Self::LengthMismatch,
            3 => Self::NotOwner,
            4 => Self::Malformed,
            5 => Self::RoutingLoop,
            6 => Self::InvalidMove,
            7 => Self::CannotDrain,
            8 => Self::GradientRefused,
            9 => Self::PeerLost,
            _ => return None,
        })
    }
}

/// Size limits enforced on every received frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most keys in one frame.
    pub max_keys: u32,
    /// Most values in one frame.
    pub max_values: u32,
}

impl Default for Limits {
    fn default() -> Self {
        // 16 Mi keys and 256 Mi values (1 GiB): far above any sane batch, far below memory.
        Self {
            max_keys: 1 << 24,
            max_values: 1 << 28,
        }
    }
}

/// Why bytes could not be decoded as a frame.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// More bytes are needed (normal while streaming).
    #[error("incomplete frame: {needed} more bytes needed")]
    Incomplete {
        /// How many more bytes would be needed at least.
        needed: usize,
    },
    /// The magic number is wrong: this is not a roam peer, or a different version.
    #[error("bad magic 0x{0:04x}: not a roam frame of this version")]
    BadMagic(u16),
    /// Unknown frame kind.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// A count exceeds [`Limits`].
    #[error("frame announces {count} {what}, above the limit of {limit}")]
    TooLarge {
        /// "keys" or "values".
        what: &'static str,
        /// The announced count.
        count: u32,
        /// The limit.
        limit: u32,
    },
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What the frame means.
    pub kind: Kind,
    /// Kind-specific flags.
    pub flags: u8,
    /// The node that issued the original request (kept when a request is forwarded).
    pub origin: NodeId,
    /// The original request's id (on the origin node).
    pub req: ReqId,
    /// Number of keys in the body.
    pub n_keys: u32,
    /// Number of values in the body.
    pub n_vals: u32,
    /// Kind-specific extra word.
    pub aux: u64,
    /// The sender's directory epoch.
    pub epoch: u32,
}

impl Header {
    /// Encodes into the [`HEADER_LEN`] wire bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.kind as u8;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.origin.0.to_le_bytes());
        b[8..16].copy_from_slice(&self.req.0.to_le_bytes());
        b[16..20].copy_from_slice(&self.n_keys.to_le_bytes());
        b[20..24].copy_from_slice(&self.n_vals.to_le_bytes());
        b[24..32].copy_from_slice(&self.aux.to_le_bytes());
        b[32..36].copy_from_slice(&self.epoch.to_le_bytes());
        b
    }

    /// Decodes and validates [`HEADER_LEN`] wire bytes; counts are checked against `limits`.
    pub fn decode(b: &[u8; HEADER_LEN], limits: &Limits) -> Result<Self, DecodeError> {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| u64::from(u32_at(i)) | (u64::from(u32_at(i + 4)) << 32);
        let magic = u16::from_le_bytes([b[2], b[3]]);
        if magic != MAGIC {
            return Err(DecodeError::BadMagic(magic));
        }
        let kind = Kind::from_u8(b[0]).ok_or(DecodeError::UnknownKind(b[0]))?;
        let n_keys = u32_at(16);
        let n_vals = u32_at(20);
        if n_keys > limits.max_keys {
            return Err(DecodeError::TooLarge {
                what: "keys",
                count: n_keys,
                limit: limits.max_keys,
            });
        }
        if n_vals > limits.max_values {
            return Err(DecodeError::TooLarge {
                what: "values",
                count: n_vals,
                limit: limits.max_values,
            });
        }
        Ok(Self {
            kind,
            flags: b[1],
            origin: NodeId(u32_at(4)),
            req: ReqId(u64_at(8)),
            n_keys,
            n_vals,
            aux: u64_at(24),
            epoch: u32_at(32),
        })
    }

    /// The header of a new frame (epoch 0: the sender stamps it).
    fn of_frame(
        kind: Kind,
        flags: u8,
        origin: NodeId,
        req: ReqId,
        aux: u64,
        n_keys: usize,
        n_vals: usize,
    ) -> Self {
        Self {
            kind,
            flags,
            origin,
            req,
            n_keys: n_keys as u32,
            n_vals: n_vals as u32,
            aux,
            epoch: 0,
        }
    }

    /// Body length in 8-byte words.
    pub fn body_words(&self) -> usize {
        self.n_keys as usize + self.position_words() + (self.n_vals as usize).div_ceil(2)
    }

    fn position_words(&self) -> usize {
        if self.flags & FLAG_POSITIONS != 0 {
            (self.n_keys as usize).div_ceil(2)
        } else {
            0
        }
    }

    /// Body length in bytes.
    pub fn body_len(&self) -> usize {
        self.body_words() * 8
    }
}

/// A whole frame: header plus an aligned body. Clones share the body (a frame is not changed
/// once sent), so one frame goes to many peers without copying its values.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    /// The header.
    pub header: Header,
    body: Arc<Vec<u64>>,
}

impl Frame {
    /// A frame with the given keys and `n_vals` zeroed values (fill them with
    /// [`Frame::values_mut`]).
    pub fn new(
        kind: Kind,
        origin: NodeId,
        req: ReqId,
        aux: u64,
        keys: &[u64],
        n_vals: usize,
    ) -> Self {
        let header = Header::of_frame(kind, 0, origin, req, aux, keys.len(), n_vals);
        let mut body = vec![0u64; header.body_words()];
        body[..keys.len()].copy_from_slice(keys);
        Self {
            header,
            body: Arc::new(body),
        }
    }

    /// A frame with the given keys and values, built without zeroing the values first:
    /// `fill` appends exactly `n_vals` values to the (empty) vector it gets.
    ///
    /// # Panics
    /// If `fill` appends another number of values.
    pub fn with_values(
        kind: Kind,
        origin: NodeId,
        req: ReqId,
        aux: u64,
        keys: &[u64],
        n_vals: usize,
        fill: impl FnOnce(&mut ValueWriter<'_>),
    ) -> Self {
        let header = Header::of_frame(kind, 0, origin, req, aux, keys.len(), n_vals);
        let mut body = Vec::with_capacity(header.body_words());
        body.extend_from_slice(keys);
        let mut writer = ValueWriter {
            body: &mut body,
            pending: None,
            written: 0,
        };
        fill(&mut writer);
        let written = writer.finish();
        assert_eq!(
            written, n_vals,
            "a frame filled with another number of values"
        );
        debug_assert_eq!(body.len(), header.body_words());
        Self {
            header,
            body: Arc::new(body),
        }
    }

    /// A frame with the given keys, their positions (`None`: no positions; else one per key)
    /// and values, written once into a body that is not zeroed first. Zeroing a body and then
    /// overwriting its values had cost a relocation's sender and receiver a tenth of their
    /// instructions (callgrind of KGE under `lapse`); every encoder with values to copy uses
    /// this.
    ///
    /// # Panics
    /// If `positions` is given with another count than `keys`.
    pub fn with_contents(
        kind: Kind,
        origin: NodeId,
        req: ReqId,
        aux: u64,
        keys: &[u64],
        positions: Option<&[u32]>,
        values: &[f32],
    ) -> Self {
        let flags = if positions.is_some() {
            FLAG_POSITIONS
        } else {
            0
        };
        let header = Header::of_frame(kind, flags, origin, req, aux, keys.len(), values.len());
        let mut body = Vec::with_capacity(header.body_words());
        body.extend_from_slice(keys);
        if let Some(positions) = positions {
            assert_eq!(keys.len(), positions.len(), "one position per key");
            push_packed(&mut body, positions);
        }
        push_packed(&mut body, bytemuck::cast_slice(values));
        debug_assert_eq!(body.len(), header.body_words());
        Self {
            header,
            body: Arc::new(body),
        }
    }

    /// A frame with the given keys, their positions (same count) and `n_vals` zeroed values.
    pub fn with_positions(
        kind: Kind,
        origin: NodeId,
        req: ReqId,
        aux: u64,
        keys: &[u64],
        positions: &[u32],
        n_vals: usize,
    ) -> Self {
        assert_eq!(keys.len(), positions.len(), "one position per key");
        let header = Header::of_frame(kind, FLAG_POSITIONS, origin, req, aux, keys.len(), n_vals);
        let mut body = vec![0u64; header.body_words()];
        body[..keys.len()].copy_from_slice(keys);
        let pos_words = header.position_words();
        bytemuck::cast_slice_mut::<u64, u32>(&mut body[keys.len()..keys.len() + pos_words])
            [..positions.len()]
            .copy_from_slice(positions);
        Self {
            header,
            body: Arc::new(body),
        }
    }

    /// A frame with no body.
    pub fn control(kind: Kind, origin: NodeId, req: ReqId, aux: u64) -> Self {
        Self::new(kind, origin, req, aux, &[], 0)
    }

    /// Assembles a received frame. `body` must hold exactly `header.body_words()` words.
    pub fn from_parts(header: Header, body: Vec<u64>) -> Option<Self> {
        (body.len() == header.body_words()).then(|| Self {
            header,
            body: Arc::new(body),
        })
    }

    /// A zeroed body buffer of the right size for `header`, to read the wire bytes into.
    pub fn body_buffer(header: &Header) -> Vec<u64> {
        vec![0u64; header.body_words()]
    }

    /// The keys.
    pub fn keys(&self) -> &[u64] {
        &self.body[..self.header.n_keys as usize]
    }

    /// The keys' positions (empty unless [`FLAG_POSITIONS`] is set).
    pub fn positions(&self) -> &[u32] {
        let start = self.header.n_keys as usize;
        let words = &self.body[start..start + self.header.position_words()];
        let n = if words.is_empty() {
            0
        } else {
            self.header.n_keys as usize
        };
        &bytemuck::cast_slice::<u64, u32>(words)[..n]
    }

    fn values_start(&self) -> usize {
        self.header.n_keys as usize + self.header.position_words()
    }

    /// The values.
    pub fn values(&self) -> &[f32] {
        let words = &self.body[self.values_start()..];
        &bytemuck::cast_slice::<u64, f32>(words)[..self.header.n_vals as usize]
    }

    /// The values, writable (copies the body first if a clone shares it).
    pub fn values_mut(&mut self) -> &mut [f32] {
        let start = self.values_start();
        let n_vals = self.header.n_vals as usize;
        let body = Arc::make_mut(&mut self.body);
        &mut bytemuck::cast_slice_mut::<u64, f32>(&mut body[start..])[..n_vals]
    }

    /// The body as wire bytes (including padding).
    pub fn body_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.body)
    }

    /// Total bytes on the wire.
    pub fn wire_len(&self) -> usize {
        HEADER_LEN + self.body.len() * 8
    }

    /// Encodes header and body into one contiguous buffer (tests and simulators; the TCP shell
    /// writes the two parts with one vectored write instead).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.wire_len());
        out.extend_from_slice(&self.header.encode());
        out.extend_from_slice(self.body_bytes());
        out
    }
}

/// Appends a frame's values to its body as they are produced (see [`Frame::with_values`]):
/// two `f32`s per body word, in the same byte order as [`Frame::values`] reads them.
pub struct ValueWriter<'a> {
    body: &'a mut Vec<u64>,
    /// The first half of a word whose second value has not come yet.
    pending: Option<f32>,
    written: usize,
}

/// Appends `items` to a body two per word, the last word padded with zero, in the layout that
/// [`Frame::values`] and [`Frame::positions`] read back.
fn push_packed(body: &mut Vec<u64>, items: &[u32]) {
    let pairs = items.chunks_exact(2);
    let last = pairs.remainder().first().copied();
    body.extend(pairs.map(|pair| bytemuck::cast::<[u32; 2], u64>([pair[0], pair[1]])));
    if let Some(last) = last {
        body.push(bytemuck::cast::<[u32; 2], u64>([last, 0]));
    }
}

impl ValueWriter<'_> {
    /// Appends `values`.
    pub fn extend_from_slice(&mut self, mut values: &[f32]) {
        if values.is_empty() {
            return;
        }
        self.written += values.len();
        if let Some(first) = self.pending.take() {
            self.body.push(bytemuck::cast([first, values[0]]));
            values = &values[1..];
        }
        let pairs = values.chunks_exact(2);
        self.pending = pairs.remainder().first().copied();
        self.body
            .extend(pairs.map(|pair| bytemuck::cast::<[f32; 2], u64>([pair[0], pair[1]])));
    }

    /// Pads the last word; returns the number of values written.
    fn finish(self) -> usize {
        if let Some(first) = self.pending {
            self.body.push(bytemuck::cast([first, 0.0f32]));
        }
        self.written
    }
}

/// Decodes one frame from the front of `bytes`, returning it and the bytes consumed.
pub fn decode(bytes: &[u8], limits: &Limits) -> Result<(Frame, usize), DecodeError> {
    let Some(head) = bytes.first_chunk::<HEADER_LEN>() else {
        return Err(DecodeError::Incomplete {
            needed: HEADER_LEN - bytes.len(),
        });
    };
    let header = Header::decode(head, limits)?;
    let total = HEADER_LEN + header.body_len();
    if bytes.len() < total {
        return Err(DecodeError::Incomplete {
            needed: total - bytes.len(),
        });
    }
    let mut body = Frame::body_buffer(&header);
    bytemuck::cast_slice_mut::<u64, u8>(&mut body).copy_from_slice(&bytes[HEADER_LEN..total]);
    let body = Arc::new(body);
    Ok((Frame { header, body }, total))
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
