//! Ring protocol tests.
