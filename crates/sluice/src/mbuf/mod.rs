//! mbuf (being written).
