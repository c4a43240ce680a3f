//! cluster_env (being written).
