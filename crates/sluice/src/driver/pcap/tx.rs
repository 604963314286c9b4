//! Sending to a pcap file.
//!
//! The file is created when the port opens and written through a buffer:
//! each packet becomes a record stamped with the wall clock (read once per
//! burst), its segments concatenated and cut to the snap length, its
//! original length kept. The buffer is flushed when the queue stops and when
//! it is dropped. A failed write (or flush) counts in `tx_errors`; the packet
//! is freed either way, since a file cannot push back.

use std::fs::File;
use std::io::BufWriter;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use super::format::{LINKTYPE_ETHERNET, PcapWriter};
use crate::mbuf::BurstSlice;
use crate::port::{PortCounters, PortError, TxQueue};

/// The Tx queue of a pcap port with a `tx` file.
pub(crate) struct PcapTx {
    writer: PcapWriter<BufWriter<File>>,
    /// Where a chained packet's segments are joined.
    scratch: Vec<u8>,
    counters: Arc<PortCounters>,
    q: usize,
}

impl PcapTx {
    /// Creates (or empties) `path` and writes the file header.
    pub(crate) fn create(
        path: &str,
        snaplen: u32,
        counters: Arc<PortCounters>,
        q: usize,
    ) -> Result<PcapTx, PortError> {
        let ctx = || format!("pcap: tx file '{path}'");
        let file = File::create(path).map_err(|e| PortError::io(ctx(), e))?;
        let writer = PcapWriter::new(BufWriter::new(file), snaplen, LINKTYPE_ETHERNET, false)
            .map_err(|e| PortError::Driver(format!("tx file '{path}': {e}")))?;
        Ok(PcapTx {
            writer,
            scratch: Vec::new(),
            counters,
            q,
        })
    }

    fn flush(&mut self) {
        if self.writer.flush().is_err() {
            self.counters.tx[self.q].errors.inc();
        }
    }
}

impl TxQueue for PcapTx {
    fn tx_burst(&mut self, burst: &mut BurstSlice) -> usize {
        let n = burst.len();
        if n == 0 {
            self.counters.tx[self.q].record_burst(0, 0);
            return 0;
        }
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let (mut sent, mut bytes, mut errors) = (0usize, 0u64, 0u64);
        for m in burst.iter() {
            let r = if m.nb_segs() == 1 {
                self.writer.write(ts, m.data())
            } else {
                self.scratch.clear();
                m.segments().for_each(|s| self.scratch.extend_from_slice(s));
                self.writer.write(ts, &self.scratch)
            };
            match r {
                Ok(()) => {
                    sent += 1;
                    bytes += m.pkt_len() as u64;
                }
                Err(_) => errors += 1,
            }
        }
        burst.clear();
        let stats = &self.counters.tx[self.q];
        stats.errors.add(errors);
        stats.record_burst(sent, bytes);
        n
    }

    fn start(&mut self) -> Result<(), PortError> {
        Ok(())
    }

    fn stop(&mut self) {
        self.flush();
    }
}

impl Drop for PcapTx {
    fn drop(&mut self) {
        self.flush();
    }
}
