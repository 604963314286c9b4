//! mempool (being written).
