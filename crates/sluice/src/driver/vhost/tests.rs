//! Tests of the vhost port.
