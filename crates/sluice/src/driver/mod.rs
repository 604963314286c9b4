//! Drivers, one folder each. Being built (issue 3); today only the pcap file
//! format the `pcap` driver will use.

pub mod pcap;
