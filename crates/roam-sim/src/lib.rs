//! Placeholder: the simulator is being written.
