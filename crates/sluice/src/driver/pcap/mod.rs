//! The `pcap` driver: packets from and to pcap files. Today: the file
//! format, [`format`](mod@format); the port driver on top comes with issue 3.

pub mod format;
