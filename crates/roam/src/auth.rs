//! auth (being written).
