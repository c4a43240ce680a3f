//! launch (being written).
