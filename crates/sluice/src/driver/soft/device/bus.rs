//! Bus figures of soft ports, for reports: the PCIe link a port is given
//! (`link=`, default [`DEFAULT_LINK`]) and its bus xstats summed by
//! direction, from which `sluice fwd` and `sluice bench` give bus bytes per
//! packet and the link's utilisation at the measured rate.
//!
//! Directions, as seen from the device:
//! - **to the device** (host memory read by the device, and MMIO writes):
//!   descriptor and WQE fetches (`bus_desc_bytes`), Tx data reads
//!   (`bus_tx_data_bytes`), doorbells (`bus_doorbell_bytes`);
//! - **from the device** (written into host memory): Rx data
//!   (`bus_data_bytes` minus the Tx part), Rx write-backs
//!   (`bus_writeback_bytes`), Tx completions (`bus_completion_bytes`).
//!
//! Every figure already includes the per-transaction overhead
//! (`bus_overhead`); the link budget is the raw rate after line coding
//! (128b/130b from generation 3), so utilisation leaves out link-layer
//! packets (acknowledgements, flow-control credits) and read requests.

/// The link names `link=` takes.
pub const LINKS: &[&str] = &[
    "gen3x4", "gen3x8", "gen3x16", "gen4x4", "gen4x8", "gen4x16", "gen5x8", "gen5x16",
];

/// The link of a port without `link=` (a ConnectX-5/6 Dx in an x8 slot).
pub const DEFAULT_LINK: &str = "gen3x8";

/// A PCIe link: generation and lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// Generation (3, 4 or 5).
    pub generation: u8,
    /// Lanes.
    pub lanes: u8,
}

impl Link {
    /// Parses `genGxL`, one of [`LINKS`].
    pub fn parse(s: &str) -> Option<Link> {
        if !LINKS.contains(&s) {
            return None;
        }
        let (g, l) = s.strip_prefix("gen")?.split_once('x')?;
        Some(Link {
            generation: g.parse().ok()?,
            lanes: l.parse().ok()?,
        })
    }

    /// The link of a soft port spec (its `link=`, else the default);
    /// `None` for another driver or a spec that does not parse.
    pub fn of_spec(spec: &str) -> Option<Link> {
        let s = crate::port::PortSpec::parse(spec).ok()?;
        if s.driver() != "soft" {
            return None;
        }
        Link::parse(s.get("link").unwrap_or(DEFAULT_LINK))
    }

    /// Its name (`gen3x8`).
    pub fn name(&self) -> String {
        format!("gen{}x{}", self.generation, self.lanes)
    }

    /// Bytes per second each way: 8, 16 or 32 GT/s per lane, 128b/130b.
    pub fn bytes_per_sec(&self) -> f64 {
        let gt = match self.generation {
            3 => 8.0,
            4 => 16.0,
            _ => 32.0,
        };
        gt * 1e9 * 128.0 / 130.0 / 8.0 * self.lanes as f64
    }
}

/// A port's bus bytes by kind (overheads included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BusBytes {
    /// Descriptor and WQE fetches.
    pub desc: u64,
    /// Tx data reads.
    pub tx_data: u64,
    /// Doorbells.
    pub doorbell: u64,
    /// Rx data writes.
    pub rx_data: u64,
    /// Rx descriptor write-backs.
    pub writeback: u64,
    /// Tx completions (CQEs).
    pub completion: u64,
}

impl BusBytes {
    /// Sums a port's xstats; `None` when it has no bus counters (not a
    /// soft port).
    pub fn from_xstats(x: &[(String, u64)]) -> Option<BusBytes> {
        let get = |name: &str| x.iter().find(|(n, _)| n == name).map(|&(_, v)| v);
        let data = get("bus_data_bytes")?;
        let tx_data = get("bus_tx_data_bytes").unwrap_or(0);
        Some(BusBytes {
            desc: get("bus_desc_bytes").unwrap_or(0),
            tx_data,
            doorbell: get("bus_doorbell_bytes").unwrap_or(0),
            rx_data: data.saturating_sub(tx_data),
            writeback: get("bus_writeback_bytes").unwrap_or(0),
            completion: get("bus_completion_bytes").unwrap_or(0),
        })
    }

    /// Bytes toward the device.
    pub fn to_device(&self) -> u64 {
        self.desc + self.tx_data + self.doorbell
    }

    /// Bytes from the device.
    pub fn from_device(&self) -> u64 {
        self.rx_data + self.writeback + self.completion
    }

    /// Both ways.
    pub fn total(&self) -> u64 {
        self.to_device() + self.from_device()
    }

    /// Field-wise `self + o`.
    pub fn add(&self, o: &BusBytes) -> BusBytes {
        BusBytes {
            desc: self.desc + o.desc,
            tx_data: self.tx_data + o.tx_data,
            doorbell: self.doorbell + o.doorbell,
            rx_data: self.rx_data + o.rx_data,
            writeback: self.writeback + o.writeback,
            completion: self.completion + o.completion,
        }
    }

    /// Field-wise `self - earlier` (a window of a run).
    pub fn since(&self, earlier: &BusBytes) -> BusBytes {
        BusBytes {
            desc: self.desc.saturating_sub(earlier.desc),
            tx_data: self.tx_data.saturating_sub(earlier.tx_data),
            doorbell: self.doorbell.saturating_sub(earlier.doorbell),
            rx_data: self.rx_data.saturating_sub(earlier.rx_data),
            writeback: self.writeback.saturating_sub(earlier.writeback),
            completion: self.completion.saturating_sub(earlier.completion),
        }
    }

    /// The link's busier direction's share (0..1, may exceed 1 when the
    /// rate could not be carried) at `pps` packets per second, these bytes
    /// having carried `packets`.
    pub fn utilisation(&self, packets: u64, pps: f64, link: &Link) -> f64 {
        if packets == 0 {
            return 0.0;
        }
        let busier = self.to_device().max(self.from_device()) as f64 / packets as f64;
        busier * pps / link.bytes_per_sec()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn links_parse_and_carry_their_rates() {
        let l = Link::parse("gen3x8").unwrap();
        assert_eq!(
            (l.generation, l.lanes, l.name()),
            (3, 8, "gen3x8".to_string())
        );
        assert!((l.bytes_per_sec() - 7.877e9).abs() < 1e7);
        assert_eq!(
            Link::parse("gen4x16").unwrap().bytes_per_sec(),
            4.0 * l.bytes_per_sec()
        );
        assert_eq!(Link::parse("gen3x9"), None);
        assert_eq!(
            Link::of_spec("soft:link=gen5x16").unwrap().name(),
            "gen5x16"
        );
        assert_eq!(Link::of_spec("soft:tester=a").unwrap(), l);
        assert_eq!(Link::of_spec("null"), None);
    }

    #[test]
    fn bus_bytes_split_by_direction() {
        let x: Vec<(String, u64)> = [
            ("bus_desc_bytes", 100),
            ("bus_data_bytes", 1000),
            ("bus_tx_data_bytes", 400),
            ("bus_doorbell_bytes", 28),
            ("bus_writeback_bytes", 50),
            ("bus_completion_bytes", 88),
        ]
        .iter()
        .map(|&(n, v)| (n.to_string(), v))
        .collect();
        let b = BusBytes::from_xstats(&x).unwrap();
        assert_eq!((b.to_device(), b.from_device()), (528, 738));
        assert_eq!(b.total(), 1266);
        assert_eq!(b.since(&b), BusBytes::default());
        assert_eq!(b.add(&b).total(), 2 * 1266);
        // 738 bytes per 10 packets at 1 Mpps on a link of 7.877 GB/s.
        let u = b.utilisation(10, 1e6, &Link::parse("gen3x8").unwrap());
        assert!((u - 73.8e6 / 7.877e9).abs() < 1e-4, "{u}");
        assert_eq!(BusBytes::from_xstats(&[]), None);
    }
}
